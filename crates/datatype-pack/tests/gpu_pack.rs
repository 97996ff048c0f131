//! GPU pack and unpack against the CPU oracle, byte for byte, over a generated pool of layouts;
//! fused packing of halo faces; the raw-pointer entry points; fused strided-to-strided copies
//! against the CPU reference; the error paths. Needs a CUDA device: run with `--ignored`.
//!
//! The pool has 1,200 layouts: 1-D to 5-D (0 to 4 stream dimensions over a dense block), every
//! word size, unaligned starts, unaligned buffer pointers (views at odd offsets into larger
//! allocations), counts beyond 65,535 in y, z and an in-kernel loop, empty layouts, and layouts
//! built through the constructors. Every byte of both allocations is compared, so bytes a
//! kernel must not touch are checked too. A third of the layouts run with the default launch
//! options, a third with 256-thread blocks and a one-wave grid, a third with 1024-thread blocks
//! and the full grid. `DTP_POOL_LIMIT=N` runs only the first N layouts
//! (for slow runs such as compute-sanitizer).
//!
//! The copy pool has 240 cases of one to four regions each: pairs of equal-shape regions, 1-D to
//! 4-D, unaligned starts on either side, every word size, views at odd offsets, copied between
//! two buffers and within one, through the safe and the raw entry points.
//!
//! Every case compiles its own kernels through NVRTC (100 to 200 ms each). A test that runs
//! many cases first [warms](warm) the compile cache: it makes every launcher the cases will
//! make and prepares the kernel variants their launches will use, from several threads at once,
//! then runs the cases one after another as before, which now find their kernels in the
//! in-memory cache. The warm-up checks nothing: a case whose compile fails there fails again,
//! with its index, in the loop. It prints how many variants it compiled and how long that took
//! (visible with `--nocapture`). `DTP_COMPILE_THREADS=N` sets how many compiles run at once in
//! the whole binary (default: the available parallelism; 1 compiles one at a time);
//! `DTP_WARM=0` skips the warm-ups, so that every case compiles its kernels in the loop, one
//! after another, as before the warm-ups existed (to compare, or under a sanitizer).
#![cfg(feature = "cuda")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use datatype_pack::construct::{from_strides, hvector, subarray, vector, Order};
use datatype_pack::fused::CopyRegion;
use datatype_pack::gpu::cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};
use datatype_pack::gpu::{self, FusedCopier, FusedPacker, GpuOptions, GridCap, Packer};
use datatype_pack::plan::{flat_threads, FLAT_THREADS};
use datatype_pack::{cpu, fused, Buffer, Error, LaunchShape, StridedBlock, Type};

const POOL: usize = 1200;
const CHUNKS: usize = 12;

fn ctx() -> Arc<CudaContext> {
    static CTX: OnceLock<Arc<CudaContext>> = OnceLock::new();
    CTX.get_or_init(|| gpu::context(0).expect("a CUDA device"))
        .clone()
}

/// One warm-up job: makes a launcher, prepares the variants a case's launches will use and
/// returns how many variants the launcher holds.
type Job = Box<dyn FnOnce() -> Result<usize, Error> + Send>;

/// How many compiles may run at once in the whole binary: `DTP_COMPILE_THREADS`, else the
/// available parallelism.
fn compile_threads() -> usize {
    std::env::var("DTP_COMPILE_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
        .unwrap_or(1)
        .max(1)
}

/// Compile slots shared by the whole binary: libtest runs up to one test per core side by side,
/// and their warm-ups together start no more compiles than [`compile_threads`].
struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Slots {
    fn get() -> &'static Slots {
        static SLOTS: OnceLock<Slots> = OnceLock::new();
        SLOTS.get_or_init(|| Slots {
            free: Mutex::new(compile_threads()),
            freed: Condvar::new(),
        })
    }

    /// Runs `f` holding one slot.
    fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Held<'a>(&'a Slots);
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                self.0.freed.notify_one();
            }
        }
        {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            while *free == 0 {
                free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
            }
            *free -= 1;
        }
        let _held = Held(self);
        f()
    }
}

/// Runs the warm-up `jobs` of test `label` from [`compile_threads`] threads, each job holding
/// a compile slot, and prints what it did. The library's compile cache is a mutexed map that is
/// not held while NVRTC runs, and NVRTC compiles distinct programs concurrently, so the jobs'
/// compiles overlap; the case loop that follows makes the same launchers and launches the same
/// variants, whose images it then finds in the cache (same source, architecture and options:
/// the same image). Errors are only counted: the case loop meets them again and reports them
/// with the case. `DTP_WARM=0` skips it.
fn warm(label: &str, jobs: Vec<Job>) {
    let count = jobs.len();
    if std::env::var("DTP_WARM").is_ok_and(|v| v == "0") {
        println!("{label}: warm-up of {count} launchers skipped (DTP_WARM=0)");
        return;
    }
    let threads = compile_threads().min(count).max(1);
    let queue = Mutex::new(jobs);
    let (variants, failed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let busy = Mutex::new(Duration::ZERO);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let Some(job) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop() else {
                    break;
                };
                let (r, took) = Slots::get().with(|| {
                    let t = Instant::now();
                    (job(), t.elapsed())
                });
                *busy.lock().unwrap_or_else(|e| e.into_inner()) += took;
                match r {
                    Ok(n) => variants.fetch_add(n, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            });
        }
    });
    println!(
        "{label}: warm-up prepared {} kernel variants (compiled, or found in the cache) for \
         {count} launchers ({} failed) in {:.1} s on {threads} threads, {:.1} s of compiling \
         and loading summed",
        variants.into_inner(),
        failed.into_inner(),
        t0.elapsed().as_secs_f64(),
        busy.into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .as_secs_f64()
    );
}

/// A warm-up job: the [`Packer`] of `plan` under `opts` and its variant for a strided view at
/// `strided_off` and a packed view at `packed_off` (into 256-byte-aligned allocations).
fn packer_job(
    plan: &StridedBlock,
    opts: &GpuOptions,
    strided_off: usize,
    packed_off: usize,
) -> Job {
    let (plan, opts) = (plan.clone(), opts.clone());
    Box::new(move || {
        let p = Packer::with_options(&ctx(), &plan, &opts)?;
        if !plan.is_empty() {
            p.prepare(plan.word_size(strided_off as u64, packed_off as u64))?;
        }
        Ok(p.compiled_word_sizes().len())
    })
}

/// A warm-up job: the [`FusedPacker`] of `plans` (laid out by [`fused::layout`]) under `opts`
/// and its variant for views at `grid_off` and `packed_off`.
fn fused_packer_job(
    plans: Vec<StridedBlock>,
    opts: &GpuOptions,
    grid_off: usize,
    packed_off: usize,
) -> Job {
    let opts = opts.clone();
    Box::new(move || {
        let p = FusedPacker::with_regions(&ctx(), fused::layout(&plans)?, &opts)?;
        if p.packed_size() > 0 {
            p.prepare(&p.words(grid_off as u64, packed_off as u64))?;
        }
        Ok(p.compiled_words().len())
    })
}

/// A warm-up job: the [`FusedCopier`] of `regions` under `opts` and its variant for a source
/// view at `src_off` and a destination view at `dst_off`.
fn copier_job(regions: Vec<CopyRegion>, opts: &GpuOptions, src_off: usize, dst_off: usize) -> Job {
    let opts = opts.clone();
    Box::new(move || {
        let c = FusedCopier::new(&ctx(), regions, &opts)?;
        if c.bytes() > 0 {
            c.prepare(&c.words(src_off as u64, dst_off as u64))?;
        }
        Ok(c.compiled_words().len())
    })
}

/// Prints how long the cases of test `label` took after its warm-up.
fn ran(label: &str, t0: Instant) {
    println!(
        "{label}: cases ran in {:.1} s after the warm-up",
        t0.elapsed().as_secs_f64()
    );
}

/// splitmix64: a small deterministic generator, so a failing case is reproducible by index.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

#[derive(Debug, Clone)]
struct Case {
    index: usize,
    plan: StridedBlock,
    /// Offset of the strided view in its allocation.
    strided_off: usize,
    /// Offset of the packed view in its allocation.
    packed_off: usize,
    /// Bytes after the strided view in its allocation (0: the view ends the allocation).
    tail: usize,
}

const MAX_PACKED: u64 = 4 << 20;
const MAX_EXTENT: u64 = 24 << 20;

/// A random plan with `ndims` stream dimensions, non-overlapping blocks, or `None` if it came
/// out too large.
fn random_plan(rng: &mut Rng, unit: u64, ndims: usize, big: Option<usize>) -> Option<StridedBlock> {
    let words = rng.pick(&[1u64, 1, 2, 3, 4, 5, 8, 16, 33, 64, 256, 1000]);
    let block = unit * words;
    let mut start = unit * rng.below(5);
    if rng.below(4) == 0 {
        start += rng.below(16); // an unaligned start
    }
    let mut span = block;
    let (mut counts, mut strides) = (Vec::new(), Vec::new());
    for k in 0..ndims {
        let n = if Some(k) == big {
            65_536 + rng.below(40_000)
        } else {
            rng.pick(&[1u64, 2, 3, 4, 7, 16, 31, 64, 100, 513])
        };
        let slack = unit * rng.pick(&[0u64, 0, 1, 2, 7]) + rng.pick(&[0u64, 0, 0, 1, 3]);
        let stride = span + slack;
        span = stride.checked_mul(n)?;
        counts.push(n);
        strides.push(stride);
    }
    let plan = StridedBlock::new(start, block, counts, strides).ok()?;
    (plan.packed_size() <= MAX_PACKED && plan.extent_end() <= MAX_EXTENT).then_some(plan)
}

/// A layout through the constructors: a C- or Fortran-order subarray of a 2-D to 4-D array.
fn constructed_plan(rng: &mut Rng) -> Option<StridedBlock> {
    let nd = 2 + rng.below(3) as usize;
    let elem = rng.pick(&[1u64, 2, 4, 8, 12, 16]);
    let sizes: Vec<u64> = (0..nd).map(|_| 1 + rng.below(24)).collect();
    let subs: Vec<u64> = sizes.iter().map(|&s| 1 + rng.below(s)).collect();
    let starts: Vec<u64> = sizes
        .iter()
        .zip(&subs)
        .map(|(&s, &b)| rng.below(s - b + 1))
        .collect();
    let order = if rng.below(2) == 0 {
        Order::C
    } else {
        Order::Fortran
    };
    let t = subarray(&sizes, &subs, &starts, order, elem).ok()?;
    StridedBlock::from_type(&t).ok()
}

fn pool() -> Vec<Case> {
    let limit = std::env::var("DTP_POOL_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(POOL)
        .min(POOL);
    let mut rng = Rng(0x00da_7a7e_9ac4);
    let mut out = Vec::with_capacity(POOL);
    let mut i = 0;
    while out.len() < POOL {
        let unit = [1u64, 2, 4, 8, 16][i % 5];
        let ndims = (i / 5) % 5;
        let plan = if i % 97 == 3 {
            Some(StridedBlock::empty())
        } else if i % 97 == 50 {
            // Normalized to empty: a zero count.
            StridedBlock::new(8, 16, vec![5, 0], vec![32, 1000]).ok()
        } else if i % 37 == 5 {
            // Beyond 65,535 in y (small blocks, many of them).
            let block = rng.pick(&[1u64, 2, 4, 8, 12, 16]);
            StridedBlock::new(
                rng.below(3),
                block,
                vec![65_536 + rng.below(20_000)],
                vec![block + rng.below(3) * 4],
            )
            .ok()
        } else if i % 37 == 17 {
            // Beyond 65,535 in z (the second dimension) and in an outer loop.
            let block = rng.pick(&[1u64, 4, 8]);
            let n = 65_536 + rng.below(5_000);
            if rng.below(2) == 0 {
                StridedBlock::new(0, block, vec![2, n], vec![block, 3 * block]).ok()
            } else {
                StridedBlock::new(0, block, vec![1, 2, n], vec![block, block, 2 * block + 1]).ok()
            }
        } else if i % 10 == 7 {
            constructed_plan(&mut rng)
        } else {
            let big = (ndims > 0 && i % 23 == 0).then(|| rng.below(ndims as u64) as usize);
            random_plan(&mut rng, unit, ndims, big)
        };
        i += 1;
        let Some(plan) = plan else { continue };
        let strided_off = if rng.below(2) == 0 {
            0
        } else {
            rng.pick(&[1usize, 2, 3, 4, 8, 12, 256])
        };
        let packed_off = if rng.below(2) == 0 {
            0
        } else {
            rng.pick(&[1usize, 2, 4, 6, 8, 16])
        };
        let tail = if rng.below(2) == 0 {
            0
        } else {
            rng.pick(&[1usize, 7, 64])
        };
        out.push(Case {
            index: out.len(),
            plan,
            strided_off,
            packed_off,
            tail,
        });
    }
    out.truncate(limit);
    out
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

fn check(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

/// Index and values of the first differing byte.
fn first_diff(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!(
            "first difference at byte {i}: got {:#04x}, want {:#04x}",
            a[i], b[i]
        ),
        None => format!("lengths {} vs {}", a.len(), b.len()),
    }
}

fn run_case(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, c: &Case) -> Result<u64, String> {
    run_case_with(ctx, stream, c, &options_for(c.index))
}

/// Packs and unpacks `c` through the safe entry points with `opts`, against the CPU oracle.
fn run_case_with(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    c: &Case,
    opts: &GpuOptions,
) -> Result<u64, String> {
    let err = |e: &dyn std::fmt::Display| format!("case {} ({opts:?}): {e}", c.index);
    let plan = &c.plan;
    let packer = Packer::with_options(ctx, plan, opts).map_err(|e| err(&e))?;
    let extent = plan.extent_end() as usize;
    let packed = plan.packed_size() as usize;
    // Allocations of at least one byte, also for empty layouts.
    let tail = if c.strided_off + extent == 0 {
        c.tail.max(1)
    } else {
        c.tail
    };

    // Pack: strided view at an offset in `src`; packed view at an offset in `dst`, whose other
    // bytes must stay 0xA5.
    let host_src = pattern(c.strided_off + extent + tail, c.index as u64 * 7 + 1);
    let d_src = stream.clone_htod(&host_src).map_err(|e| err(&e))?;
    let host_dst = vec![0xA5u8; c.packed_off + packed + 13];
    let mut d_dst = stream.clone_htod(&host_dst).map_err(|e| err(&e))?;
    {
        let src_view = d_src.slice(c.strided_off..c.strided_off + extent);
        let mut dst_view = d_dst.slice_mut(c.packed_off..c.packed_off + packed);
        packer
            .pack(stream, &src_view, &mut dst_view)
            .map_err(|e| err(&e))?;
    }
    let got = stream.clone_dtoh(&d_dst).map_err(|e| err(&e))?;
    let mut want = host_dst.clone();
    cpu::pack(
        plan,
        &host_src[c.strided_off..c.strided_off + extent],
        &mut want[c.packed_off..c.packed_off + packed],
    )
    .map_err(|e| err(&e))?;
    check(got == want, || {
        format!("case {} pack {:?}: {}", c.index, c, first_diff(&got, &want))
    })?;

    // Unpack: packed view at an offset; strided view at an offset into a buffer of 0x5A..
    // whose untouched bytes must stay as they were.
    let host_packed = pattern(c.packed_off + packed + 3, c.index as u64 * 7 + 3);
    let d_packed = stream.clone_htod(&host_packed).map_err(|e| err(&e))?;
    let host_strided: Vec<u8> = (0..c.strided_off + extent + tail)
        .map(|i| 0x5A ^ (i as u8))
        .collect();
    let mut d_strided = stream.clone_htod(&host_strided).map_err(|e| err(&e))?;
    {
        let src_view = d_packed.slice(c.packed_off..c.packed_off + packed);
        let mut dst_view = d_strided.slice_mut(c.strided_off..c.strided_off + extent);
        packer
            .unpack(stream, &src_view, &mut dst_view)
            .map_err(|e| err(&e))?;
    }
    let got = stream.clone_dtoh(&d_strided).map_err(|e| err(&e))?;
    let mut want = host_strided.clone();
    cpu::unpack(
        plan,
        &host_packed[c.packed_off..c.packed_off + packed],
        &mut want[c.strided_off..c.strided_off + extent],
    )
    .map_err(|e| err(&e))?;
    check(got == want, || {
        format!(
            "case {} unpack {:?}: {}",
            c.index,
            c,
            first_diff(&got, &want)
        )
    })?;
    Ok(plan.packed_size())
}

/// The warm-up job of a pool case: the packer [`run_case`] and [`run_raw_case`] make, and the
/// variant of the case's views.
fn pool_case_job(c: &Case) -> Job {
    packer_job(&c.plan, &options_for(c.index), c.strided_off, c.packed_off)
}

fn run_chunk(k: usize) {
    let ctx = ctx();
    let stream = ctx.new_stream().expect("a stream");
    let cases: Vec<Case> = pool().into_iter().skip(k).step_by(CHUNKS).collect();
    let label = format!("pool chunk {k}");
    warm(&label, cases.iter().map(pool_case_job).collect());
    let t0 = Instant::now();
    let mut failures = Vec::new();
    let (mut bytes, mut words) = (0u64, [0usize; 5]);
    for c in &cases {
        match run_case(&ctx, &stream, c) {
            Ok(b) => {
                bytes += b;
                let w = c.plan.word_size(c.strided_off as u64, c.packed_off as u64);
                words[w.trailing_zeros() as usize] += 1;
            }
            Err(e) => failures.push(e),
        }
    }
    ran(&label, t0);
    println!(
        "chunk {k}: {} layouts, {} passed, {} failed, {} packed bytes; launches by word size \
         1/2/4/8/16: {:?}",
        cases.len(),
        cases.len() - failures.len(),
        failures.len(),
        bytes,
        words
    );
    for f in failures.iter().take(10) {
        println!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} layouts failed",
        failures.len(),
        cases.len()
    );
}

macro_rules! chunks {
    ($($name:ident = $k:expr),*) => {$(
        #[test]
        #[ignore = "needs a CUDA device"]
        fn $name() {
            run_chunk($k);
        }
    )*};
}

chunks!(
    pool_00 = 0,
    pool_01 = 1,
    pool_02 = 2,
    pool_03 = 3,
    pool_04 = 4,
    pool_05 = 5,
    pool_06 = 6,
    pool_07 = 7,
    pool_08 = 8,
    pool_09 = 9,
    pool_10 = 10,
    pool_11 = 11
);

#[test]
fn pool_covers_what_it_promises() {
    // Runs without a GPU: the pool itself.
    let p = pool();
    if std::env::var("DTP_POOL_LIMIT").is_ok() {
        return;
    }
    assert!(p.len() >= 1000);
    for nd in 0..=4 {
        assert!(
            p.iter().any(|c| c.plan.ndims() == nd),
            "no {}-D layout",
            nd + 1
        );
    }
    for w in [1, 2, 4, 8, 16] {
        assert!(
            p.iter().any(|c| c.plan.word_size(0, 0) == w),
            "no layout of word {w}"
        );
    }
    assert!(p.iter().any(|c| c.plan.is_empty()));
    assert!(p.iter().any(|c| c.plan.start() % 2 == 1));
    assert!(p
        .iter()
        .any(|c| c.strided_off % 2 == 1 && !c.plan.is_empty()));
    assert!(p
        .iter()
        .any(|c| c.packed_off % 2 == 1 && !c.plan.is_empty()));
    assert!(p.iter().any(|c| c.plan.counts().first() > Some(&65_535)));
    assert!(p.iter().any(|c| c.plan.counts().get(1) > Some(&65_535)));
    assert!(p.iter().any(|c| c.plan.counts().get(2) > Some(&65_535)));
}

/// The send faces (interior boundary slabs) and ghost faces of a cube of `n` interior cells per
/// side with halo radius `r`, elements of `elem` bytes, C order. `all26` adds edges and corners.
fn halo(n: u64, r: u64, elem: u64, all26: bool) -> (Vec<StridedBlock>, Vec<StridedBlock>) {
    let size = n + 2 * r;
    let sizes = [size; 3];
    let (mut send, mut ghost) = (Vec::new(), Vec::new());
    for dz in -1i32..=1 {
        for dy in -1i32..=1 {
            for dx in -1i32..=1 {
                let d = [dz, dy, dx];
                let nonzero = d.iter().filter(|&&v| v != 0).count();
                if nonzero == 0 || (!all26 && nonzero != 1) {
                    continue;
                }
                let pick = |v: i32, ghost: bool| match (v, ghost) {
                    (-1, false) => (r, r),
                    (-1, true) => (0, r),
                    (0, _) => (r, n),
                    (_, false) => (n, r),
                    (_, true) => (n + r, r),
                };
                for (is_ghost, out) in [(false, &mut send), (true, &mut ghost)] {
                    let (starts, subs): (Vec<u64>, Vec<u64>) =
                        d.iter().map(|&v| pick(v, is_ghost)).unzip();
                    let t = subarray(&sizes, &subs, &starts, Order::C, elem).unwrap();
                    out.push(StridedBlock::from_type(&t).unwrap());
                }
            }
        }
    }
    (send, ghost)
}

/// The warm-up jobs of [`fused_round_trip`] with the same arguments: the packer of the send
/// faces and the unpacker of the ghost faces, each with the variant of the views.
fn fused_round_trip_jobs(
    n: u64,
    r: u64,
    elem: u64,
    all26: bool,
    grid_off: usize,
    packed_off: usize,
    opts: &GpuOptions,
) -> [Job; 2] {
    let (send, ghost) = halo(n, r, elem, all26);
    [
        fused_packer_job(send, opts, grid_off, packed_off),
        fused_packer_job(ghost, opts, grid_off, packed_off),
    ]
}

fn fused_round_trip(
    n: u64,
    r: u64,
    elem: u64,
    all26: bool,
    grid_off: usize,
    packed_off: usize,
    opts: &GpuOptions,
) {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let (send, ghost) = halo(n, r, elem, all26);
    let extent = ((n + 2 * r).pow(3) * elem) as usize;

    let packer = FusedPacker::with_regions(&ctx, fused::layout(&send).unwrap(), opts).unwrap();
    assert!(packer.extent_end() as usize <= extent);
    let host_grid = pattern(grid_off + extent, 99 + n);
    let d_grid = stream.clone_htod(&host_grid).unwrap();
    let packed = packer.packed_size() as usize;
    let host_packed = vec![0xA5u8; packed_off + packed + 5];
    let mut d_packed = stream.clone_htod(&host_packed).unwrap();
    {
        let src = d_grid.slice(grid_off..grid_off + extent);
        let mut dst = d_packed.slice_mut(packed_off..packed_off + packed);
        packer.pack(&stream, &src, &mut dst).unwrap();
    }
    let got = stream.clone_dtoh(&d_packed).unwrap();
    let mut want = host_packed.clone();
    fused::pack(
        packer.regions(),
        &host_grid[grid_off..grid_off + extent],
        &mut want[packed_off..packed_off + packed],
    )
    .unwrap();
    assert!(got == want, "fused pack: {}", first_diff(&got, &want));

    let unpacker = FusedPacker::with_regions(&ctx, fused::layout(&ghost).unwrap(), opts).unwrap();
    let packed = unpacker.packed_size() as usize;
    let host_in = pattern(packed_off + packed, 7 + n);
    let d_in = stream.clone_htod(&host_in).unwrap();
    let host_grid2: Vec<u8> = (0..grid_off + extent).map(|i| (i * 3) as u8).collect();
    let mut d_grid2 = stream.clone_htod(&host_grid2).unwrap();
    {
        let src = d_in.slice(packed_off..packed_off + packed);
        let mut dst = d_grid2.slice_mut(grid_off..grid_off + extent);
        unpacker.unpack(&stream, &src, &mut dst).unwrap();
    }
    let got = stream.clone_dtoh(&d_grid2).unwrap();
    let mut want = host_grid2.clone();
    fused::unpack(
        unpacker.regions(),
        &host_in[packed_off..packed_off + packed],
        &mut want[grid_off..grid_off + extent],
    )
    .unwrap();
    assert!(got == want, "fused unpack: {}", first_diff(&got, &want));
    println!(
        "fused halo n={n} r={r} elem={elem} {} regions, views at +{grid_off}/+{packed_off}, \
         {:?} x {} threads: pack {} bytes and unpack {} bytes match the CPU oracle (launch {:?})",
        send.len(),
        opts.grid,
        opts.max_threads_per_block,
        packer.packed_size(),
        unpacker.packed_size(),
        packer.launch_dims().unwrap()
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn fused_halo_6_faces() {
    let d = GpuOptions::default();
    let one = GpuOptions::default()
        .with_grid(GridCap::Waves(1))
        .with_max_threads_per_block(128);
    let full = GpuOptions::default()
        .with_grid(GridCap::Full)
        .with_max_threads_per_block(1024);
    let trip = |n, r, elem, go, po, o: &GpuOptions| {
        HaloStep::RoundTrip((n, r, elem, false), go, po, o.clone())
    };
    run_halo_steps(
        "fused_halo_6_faces",
        &[
            trip(20, 3, 8, 0, 0, &d),
            trip(64, 3, 8, 0, 0, &d),
            trip(64, 3, 8, 0, 0, &one),
            trip(64, 3, 8, 0, 0, &full),
            trip(33, 2, 4, 4, 8, &d),
            trip(17, 1, 1, 3, 1, &one),
        ],
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn fused_halo_26_regions() {
    let d = GpuOptions::default();
    let full = d.clone().with_grid(GridCap::Full);
    let trip = |n, r, elem, go, po, o: &GpuOptions| {
        HaloStep::RoundTrip((n, r, elem, true), go, po, o.clone())
    };
    run_halo_steps(
        "fused_halo_26_regions",
        &[
            trip(20, 3, 8, 0, 0, &d),
            trip(31, 2, 16, 8, 4, &d),
            trip(31, 2, 16, 8, 4, &full),
        ],
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn nvrtc_errors_come_back_with_the_log() {
    let ctx = ctx();
    let plan = StridedBlock::new(0, 8, vec![100], vec![64]).unwrap();
    let opts = GpuOptions::default().with_nvrtc_options(["--no-such-option"]);
    match Packer::with_options(&ctx, &plan, &opts) {
        Err(Error::Compile {
            options, log, code, ..
        }) => {
            assert!(
                options.iter().any(|o| o == "--no-such-option"),
                "{options:?}"
            );
            assert!(options
                .iter()
                .any(|o| o.starts_with("--gpu-architecture=sm_")));
            println!("unknown option: {code}; log: {log:?}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    let opts = GpuOptions::default().with_nvrtc_options(["--define-macro=reinterpret_cast=oops"]);
    match Packer::with_options(&ctx, &plan, &opts) {
        Err(Error::Compile { log, .. }) => {
            assert!(log.contains("error") && log.contains("oops"), "{log}");
            println!("broken source: log starts {:?}", log.lines().next());
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn bounds_are_checked_before_launch() {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let plan = StridedBlock::new(4, 8, vec![10], vec![16]).unwrap(); // extent 156, packed 80
    let packer = Packer::new(&ctx, &plan).unwrap();
    let src = stream.clone_htod(&pattern(200, 1)).unwrap();
    let mut dst = stream.clone_htod(&vec![0xA5u8; 100]).unwrap();
    let short = src.slice(0..155);
    let r = packer.pack(&stream, &short, &mut dst);
    assert!(
        matches!(
            r,
            Err(Error::OutOfBounds {
                buffer: Buffer::Source,
                end: 156,
                len: 155,
                ..
            })
        ),
        "{r:?}"
    );
    let mut small = dst.slice_mut(0..79);
    let r = packer.pack(&stream, &src, &mut small);
    assert!(
        matches!(
            r,
            Err(Error::BufferTooSmall {
                buffer: Buffer::Destination,
                needed: 80,
                len: 79,
                ..
            })
        ),
        "{r:?}"
    );
    let mut strided = stream.clone_htod(&vec![0x5Au8; 200]).unwrap();
    let r = packer.unpack(&stream, &src.slice(0..79), &mut strided);
    assert!(
        matches!(
            r,
            Err(Error::BufferTooSmall {
                buffer: Buffer::Source,
                needed: 80,
                len: 79,
                ..
            })
        ),
        "{r:?}"
    );
    let r = packer.unpack(&stream, &src.slice(0..80), &mut strided.slice_mut(0..155));
    assert!(
        matches!(
            r,
            Err(Error::OutOfBounds {
                buffer: Buffer::Destination,
                end: 156,
                len: 155,
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(
        stream.clone_dtoh(&dst).unwrap(),
        vec![0xA5u8; 100],
        "nothing was written"
    );
    assert_eq!(
        stream.clone_dtoh(&strided).unwrap(),
        vec![0x5Au8; 200],
        "nothing was written"
    );
    // Exactly large enough is fine.
    let exact = src.slice(0..156);
    let mut out = dst.slice_mut(0..80);
    packer.pack(&stream, &exact, &mut out).unwrap();
    // Fused: the strided buffer must hold every region.
    let fp = FusedPacker::new(
        &ctx,
        &[
            plan.clone(),
            StridedBlock::new(0, 4, vec![3], vec![100]).unwrap(),
        ],
    )
    .unwrap();
    let r = fp.pack(&stream, &src.slice(0..157), &mut dst);
    assert!(
        matches!(r, Err(Error::OutOfBounds { end: 204, .. })),
        "{r:?}"
    );
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA device"]
fn variants_follow_the_buffer_addresses() {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let plan = StridedBlock::new(0, 64, vec![1000], vec![128]).unwrap();
    let packer = Packer::new(&ctx, &plan).unwrap();
    assert_eq!(packer.compiled_word_sizes(), vec![16]);
    let src = stream
        .clone_htod(&pattern(plan.extent_end() as usize + 8, 5))
        .unwrap();
    let mut dst = stream
        .alloc_zeros::<u8>(plan.packed_size() as usize + 8)
        .unwrap();
    for (so, dof, w) in [
        (0usize, 0usize, 16u32),
        (8, 0, 8),
        (0, 4, 4),
        (2, 0, 2),
        (1, 8, 1),
    ] {
        let s = src.slice(so..so + plan.extent_end() as usize);
        let mut d = dst.slice_mut(dof..dof + plan.packed_size() as usize);
        packer.pack(&stream, &s, &mut d).unwrap();
        assert!(packer.compiled_word_sizes().contains(&w), "{w}");
    }
    assert_eq!(packer.compiled_word_sizes(), vec![1, 2, 4, 8, 16]);
    let (grid, block) = packer.launch_dims(16).unwrap();
    println!("64-byte blocks x 1000: block {block:?}, grid {grid:?}");
    stream.synchronize().unwrap();
}

/// The launch options of case `index`: the default, and two other configurations on a third of
/// the cases each.
fn options_for(index: usize) -> GpuOptions {
    match index % 3 {
        0 => GpuOptions::default(),
        1 => GpuOptions::default()
            .with_max_threads_per_block(256)
            .with_grid(GridCap::Waves(1)),
        _ => GpuOptions::default()
            .with_max_threads_per_block(1024)
            .with_grid(GridCap::Full),
    }
}

/// Packs and unpacks `c` through `pack_raw`/`unpack_raw` on device addresses at the case's
/// offsets into larger allocations.
fn run_raw_case(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, c: &Case) -> Result<(), String> {
    run_raw_case_with(ctx, stream, c, &options_for(c.index))
}

/// As [`run_raw_case`], with `opts`.
fn run_raw_case_with(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    c: &Case,
    opts: &GpuOptions,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("case {} (raw, {opts:?}): {e}", c.index);
    let plan = &c.plan;
    let packer = Packer::with_options(ctx, plan, opts).map_err(|e| err(&e))?;
    let extent = plan.extent_end() as usize;
    let packed = plan.packed_size() as usize;
    let host_src = pattern(c.strided_off + extent + c.tail + 1, c.index as u64 * 5 + 2);
    let d_src = stream.clone_htod(&host_src).map_err(|e| err(&e))?;
    let host_dst = vec![0xA5u8; c.packed_off + packed + 13];
    let d_dst = stream.clone_htod(&host_dst).map_err(|e| err(&e))?;
    {
        let (sp, _read) = d_src.device_ptr(stream);
        let (dp, _write) = d_dst.device_ptr(stream);
        // SAFETY: both allocations belong to this context and hold the offsets plus the
        // lengths passed; they live until the end of the test, and only this stream uses them
        // (the copy back below is ordered after the launch on the same stream).
        unsafe {
            packer.pack_raw(
                stream,
                sp + c.strided_off as u64,
                extent,
                dp + c.packed_off as u64,
                packed,
            )
        }
        .map_err(|e| err(&e))?;
    }
    let got = stream.clone_dtoh(&d_dst).map_err(|e| err(&e))?;
    let mut want = host_dst.clone();
    cpu::pack(
        plan,
        &host_src[c.strided_off..c.strided_off + extent],
        &mut want[c.packed_off..c.packed_off + packed],
    )
    .map_err(|e| err(&e))?;
    check(got == want, || {
        format!(
            "case {} pack_raw {:?}: {}",
            c.index,
            c,
            first_diff(&got, &want)
        )
    })?;

    let host_packed = pattern(c.packed_off + packed + 3, c.index as u64 * 5 + 4);
    let d_packed = stream.clone_htod(&host_packed).map_err(|e| err(&e))?;
    let host_strided: Vec<u8> = (0..c.strided_off + extent + c.tail + 1)
        .map(|i| 0x3C ^ (i as u8))
        .collect();
    let d_strided = stream.clone_htod(&host_strided).map_err(|e| err(&e))?;
    {
        let (sp, _read) = d_packed.device_ptr(stream);
        let (dp, _write) = d_strided.device_ptr(stream);
        // SAFETY: as for the pack above.
        unsafe {
            packer.unpack_raw(
                stream,
                sp + c.packed_off as u64,
                packed,
                dp + c.strided_off as u64,
                extent,
            )
        }
        .map_err(|e| err(&e))?;
    }
    let got = stream.clone_dtoh(&d_strided).map_err(|e| err(&e))?;
    let mut want = host_strided.clone();
    cpu::unpack(
        plan,
        &host_packed[c.packed_off..c.packed_off + packed],
        &mut want[c.strided_off..c.strided_off + extent],
    )
    .map_err(|e| err(&e))?;
    check(got == want, || {
        format!(
            "case {} unpack_raw {:?}: {}",
            c.index,
            c,
            first_diff(&got, &want)
        )
    })
}

/// The fused halo round trip of `fused_round_trip`, through `pack_raw`/`unpack_raw`.
fn fused_raw_round_trip(n: u64, r: u64, elem: u64, all26: bool, grid_off: u64, packed_off: u64) {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let (send, ghost) = halo(n, r, elem, all26);
    let extent = ((n + 2 * r).pow(3) * elem) as usize;
    let (go, po) = (grid_off as usize, packed_off as usize);

    let packer = FusedPacker::new(&ctx, &send).unwrap();
    let packed = packer.packed_size() as usize;
    let host_grid = pattern(go + extent, 31 + n);
    let d_grid = stream.clone_htod(&host_grid).unwrap();
    let host_packed = vec![0xA5u8; po + packed + 5];
    let d_packed = stream.clone_htod(&host_packed).unwrap();
    {
        let (gp, _read) = d_grid.device_ptr(&stream);
        let (pp, _write) = d_packed.device_ptr(&stream);
        // SAFETY: both allocations belong to this context and hold the offsets plus the
        // lengths passed; only this stream uses them until the copy back below.
        unsafe { packer.pack_raw(&stream, gp + grid_off, extent, pp + packed_off, packed) }
            .unwrap();
    }
    let got = stream.clone_dtoh(&d_packed).unwrap();
    let mut want = host_packed.clone();
    fused::pack(
        packer.regions(),
        &host_grid[go..go + extent],
        &mut want[po..po + packed],
    )
    .unwrap();
    assert!(got == want, "fused pack_raw: {}", first_diff(&got, &want));

    let unpacker = FusedPacker::new(&ctx, &ghost).unwrap();
    let packed = unpacker.packed_size() as usize;
    let host_in = pattern(po + packed, 17 + n);
    let d_in = stream.clone_htod(&host_in).unwrap();
    let host_grid2: Vec<u8> = (0..go + extent).map(|i| (i * 5) as u8).collect();
    let d_grid2 = stream.clone_htod(&host_grid2).unwrap();
    {
        let (ip, _read) = d_in.device_ptr(&stream);
        let (gp, _write) = d_grid2.device_ptr(&stream);
        // SAFETY: as for the pack above.
        unsafe { unpacker.unpack_raw(&stream, ip + packed_off, packed, gp + grid_off, extent) }
            .unwrap();
    }
    let got = stream.clone_dtoh(&d_grid2).unwrap();
    let mut want = host_grid2.clone();
    fused::unpack(
        unpacker.regions(),
        &host_in[po..po + packed],
        &mut want[go..go + extent],
    )
    .unwrap();
    assert!(got == want, "fused unpack_raw: {}", first_diff(&got, &want));
}

#[test]
#[ignore = "needs a CUDA device"]
fn raw_pack_matches_the_cpu_oracle() {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    // Every 10th layout of the pool: all dimensionalities, word sizes and offsets.
    let cases: Vec<Case> = pool().into_iter().step_by(10).collect();
    let trips = [
        (20, 3, 8, false, 0, 0),
        (33, 2, 4, false, 4, 8),
        (17, 1, 1, true, 3, 1),
    ];
    let d = GpuOptions::default();
    let mut jobs: Vec<Job> = cases.iter().map(pool_case_job).collect();
    for &(n, r, e, all26, go, po) in &trips {
        jobs.extend(fused_round_trip_jobs(
            n,
            r,
            e,
            all26,
            go as usize,
            po as usize,
            &d,
        ));
    }
    warm("raw_pack_matches_the_cpu_oracle", jobs);
    let t0 = Instant::now();
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| run_raw_case(&ctx, &stream, c).err())
        .collect();
    println!("raw: {} layouts, {} failed", cases.len(), failures.len());
    for f in failures.iter().take(10) {
        println!("  {f}");
    }
    assert!(failures.is_empty());
    for (n, r, e, all26, go, po) in trips {
        fused_raw_round_trip(n, r, e, all26, go, po);
    }
    stream.synchronize().unwrap();
    ran("raw_pack_matches_the_cpu_oracle", t0);
}

#[test]
#[ignore = "needs a CUDA device"]
fn relaunch_matches_the_cpu_oracle() {
    let ctx = ctx();
    let own = ctx.new_stream().unwrap();
    let legacy = ctx.default_stream();
    // Every 10th layout of the pool, launched through one-node graphs, on a stream of its own
    // and on the legacy default stream in turn (the interposer's).
    let cases: Vec<Case> = pool().into_iter().skip(5).step_by(10).collect();
    warm(
        "relaunch_matches_the_cpu_oracle",
        cases.iter().map(pool_case_job).collect(),
    );
    let t0 = Instant::now();
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let stream = if c.index % 2 == 0 { &own } else { &legacy };
            let opts = options_for(c.index).with_relaunch(true);
            run_raw_case_with(&ctx, stream, c, &opts).err()
        })
        .collect();
    println!(
        "relaunch: {} layouts, {} failed",
        cases.len(),
        failures.len()
    );
    for f in failures.iter().take(10) {
        println!("  {f}");
    }
    assert!(failures.is_empty());

    // Launches queued back to back, each with other addresses: setting the graph's arguments
    // for the next launch must not change one already queued.
    let plan = StridedBlock::from_type(&vector(4096, 3, 7, 4).unwrap()).unwrap();
    let opts = GpuOptions::default().with_relaunch(true);
    let packer = Packer::with_options(&ctx, &plan, &opts).unwrap();
    let (extent, packed) = (plan.extent_end() as usize, plan.packed_size() as usize);
    const COPIES: usize = 8;
    let host_src = pattern(extent * COPIES, 77);
    let d_src = own.clone_htod(&host_src).unwrap();
    let mut d_dst = own.alloc_zeros::<u8>(packed * COPIES).unwrap();
    {
        let (sp, _read) = d_src.device_ptr(&own);
        let (dp, _write) = d_dst.device_ptr_mut(&own);
        for k in 0..COPIES {
            // SAFETY: copy `k` reads the `k`-th extent of the source and writes the `k`-th
            // packed span of the destination, both inside allocations of this context that
            // outlive the stream's work (copied back below on the same stream).
            unsafe {
                packer.pack_raw(
                    &own,
                    sp + (k * extent) as u64,
                    extent,
                    dp + (k * packed) as u64,
                    packed,
                )
            }
            .unwrap();
        }
    }
    let got = own.clone_dtoh(&d_dst).unwrap();
    for k in 0..COPIES {
        let mut want = vec![0u8; packed];
        cpu::pack(&plan, &host_src[k * extent..(k + 1) * extent], &mut want).unwrap();
        assert!(
            got[k * packed..(k + 1) * packed] == want[..],
            "queued relaunch {k}: {}",
            first_diff(&got[k * packed..(k + 1) * packed], &want)
        );
    }

    // A stream being captured gets a plain launch, which the captured graph then replays.
    // The addresses are taken before the capture: cudarc's guards wait on and record events,
    // and a wait on an event recorded outside a capture is not allowed inside it.
    let cap = ctx.new_stream().unwrap();
    let d_src = cap.clone_htod(&host_src[..extent]).unwrap();
    let mut d_dst = cap.alloc_zeros::<u8>(packed).unwrap();
    let sp = d_src.device_ptr(&cap).0;
    let dp = d_dst.device_ptr_mut(&cap).0;
    cap.synchronize().unwrap();
    cap.begin_capture(
        gpu::cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    )
    .unwrap();
    // SAFETY: as above, for one copy; the graph runs on `cap` after the buffers' writes above
    // (synchronized) and before the copy back on the same stream, and they outlive it.
    unsafe { packer.pack_raw(&cap, sp, extent, dp, packed) }.unwrap();
    let graph = cap
        .end_capture(gpu::cudarc::driver::sys::CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("the capture holds the pack");
    graph.launch().unwrap();
    let got = cap.clone_dtoh(&d_dst).unwrap();
    let mut want = vec![0u8; packed];
    cpu::pack(&plan, &host_src[..extent], &mut want).unwrap();
    assert!(
        got == want,
        "captured relaunch: {}",
        first_diff(&got, &want)
    );
    ran("relaunch_matches_the_cpu_oracle", t0);
}

/// How a test batch is made, and its name in failures.
type MakeBatch = (fn(&Arc<CudaStream>) -> gpu::Batch, &'static str);

/// The two orders of a batch's kernels.
const BATCH_ORDERS: [MakeBatch; 2] = [
    (gpu::Batch::new, "independent"),
    (gpu::Batch::in_launch_order, "in launch order"),
];

/// One batch round over `cases`: each case's pack (or unpack) recorded into one batch on
/// `stream` (made by `make`) from a fresh source into a fresh destination at offset `shift`,
/// the batch launched, every destination compared with the CPU reference.
fn batch_round(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    cases: &[Case],
    (unpack, make): (bool, MakeBatch),
    shift: usize,
) -> Result<(), String> {
    let packers: Vec<Packer> = cases
        .iter()
        .map(|c| Packer::new(ctx, &c.plan).map_err(|e| format!("case {}: {e}", c.index)))
        .collect::<Result<_, _>>()?;
    let mut batch = (make.0)(stream);
    let mut kept = Vec::new();
    for (c, p) in cases.iter().zip(&packers) {
        let (extent, packed) = (c.plan.extent_end() as usize, c.plan.packed_size() as usize);
        let (src_len, dst_len) = if unpack {
            (packed, extent)
        } else {
            (extent, packed)
        };
        let host_src = pattern(shift + src_len + 1, c.index as u64 * 7 + shift as u64);
        let host_dst: Vec<u8> = (0..shift + dst_len + 1).map(|i| 0x5A ^ (i as u8)).collect();
        let d_src = stream.clone_htod(&host_src).map_err(|e| e.to_string())?;
        let mut d_dst = stream.clone_htod(&host_dst).map_err(|e| e.to_string())?;
        let sp = d_src.device_ptr(stream).0 + shift as u64;
        let dp = d_dst.device_ptr_mut(stream).0 + shift as u64;
        // SAFETY: each launch reads its own source and writes its own destination, allocations
        // of this context holding `shift` plus the lengths passed, kept (in `kept`) until the
        // copies back below, which the stream orders after the batch.
        unsafe {
            if unpack {
                p.record_unpack_raw(&mut batch, sp, src_len, dp, dst_len)
            } else {
                p.record_pack_raw(&mut batch, sp, src_len, dp, dst_len)
            }
        }
        .map_err(|e| format!("case {}: {e}", c.index))?;
        kept.push((c, host_src, host_dst, d_src, d_dst));
    }
    batch.launch().map_err(|e| e.to_string())?;
    for (c, host_src, host_dst, _d_src, d_dst) in &kept {
        let got = stream.clone_dtoh(d_dst).map_err(|e| e.to_string())?;
        let mut want = host_dst.clone();
        let (extent, packed) = (c.plan.extent_end() as usize, c.plan.packed_size() as usize);
        let r = if unpack {
            cpu::unpack(
                &c.plan,
                &host_src[shift..shift + packed],
                &mut want[shift..shift + extent],
            )
        } else {
            cpu::pack(
                &c.plan,
                &host_src[shift..shift + extent],
                &mut want[shift..shift + packed],
            )
        };
        r.map_err(|e| e.to_string())?;
        check(got == want, || {
            format!(
                "case {} batched {} {} (shift {shift}): {}",
                c.index,
                if unpack { "unpack" } else { "pack" },
                make.1,
                first_diff(&got, &want)
            )
        })?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA device"]
fn batch_matches_the_cpu_oracle() {
    let ctx = ctx();
    let own = ctx.new_stream().unwrap();
    let legacy = ctx.default_stream();
    // Twelve layouts of every kind, in batches of four: packs on a stream of its own, unpacks
    // on the legacy stream, each batch three times with other buffers: a graph made, a second
    // one kept beside it for the same kernels with other arguments (shift 256 keeps the word
    // sizes), then another set of kernels where the shift of 24 bytes narrows them; each
    // batch in each order of its kernels.
    let cases: Vec<Case> = pool().into_iter().skip(3).step_by(97).take(12).collect();
    let mut failures = Vec::new();
    for chunk in cases.chunks(4) {
        for (stream, unpack) in [(&own, false), (&legacy, true)] {
            for make in BATCH_ORDERS {
                for shift in [0, 256, 24] {
                    if let Err(e) = batch_round(&ctx, stream, chunk, (unpack, make), shift) {
                        failures.push(e);
                    }
                }
            }
        }
    }
    // On a stream being captured: plain launches, which the captured graph replays.
    let cap = ctx.new_stream().unwrap();
    cap.synchronize().unwrap();
    let plan = StridedBlock::from_type(&vector(1000, 5, 9, 4).unwrap()).unwrap();
    let packer = Packer::new(&ctx, &plan).unwrap();
    let (extent, packed) = (plan.extent_end() as usize, plan.packed_size() as usize);
    let host_src = pattern(2 * extent, 5);
    let d_src = cap.clone_htod(&host_src).unwrap();
    let mut d_dst = cap.alloc_zeros::<u8>(2 * packed).unwrap();
    let sp = d_src.device_ptr(&cap).0;
    let dp = d_dst.device_ptr_mut(&cap).0;
    cap.synchronize().unwrap();
    cap.begin_capture(
        gpu::cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    )
    .unwrap();
    let mut batch = gpu::Batch::new(&cap);
    for k in 0..2 {
        // SAFETY: launch `k` reads the `k`-th extent and writes the `k`-th packed span of
        // allocations of this context that outlive the graph's run (copied back after it).
        unsafe {
            packer.record_pack_raw(
                &mut batch,
                sp + (k * extent) as u64,
                extent,
                dp + (k * packed) as u64,
                packed,
            )
        }
        .unwrap();
    }
    assert_eq!(batch.len(), 2);
    batch.launch().unwrap();
    let graph = cap
        .end_capture(gpu::cudarc::driver::sys::CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("the capture holds the packs");
    graph.launch().unwrap();
    let got = cap.clone_dtoh(&d_dst).unwrap();
    for k in 0..2 {
        let mut want = vec![0u8; packed];
        cpu::pack(&plan, &host_src[k * extent..(k + 1) * extent], &mut want).unwrap();
        if got[k * packed..(k + 1) * packed] != want[..] {
            failures.push(format!("captured batch, launch {k}"));
        }
    }
    println!("batch: {} layouts, {} failed", cases.len(), failures.len());
    for f in failures.iter().take(10) {
        println!("  {f}");
    }
    assert!(failures.is_empty());
}

#[test]
#[ignore = "needs a CUDA device"]
fn relaunch_with_the_same_arguments_runs_again() {
    // A kept graph launched again with the arguments it already holds skips setting them: the
    // kernel must still run each time (the destination is cleared before every launch), and
    // arguments that change back and forth must be set again: single launches go through six
    // argument sets in turn (two sources, three destination slots), more than the graphs kept
    // per kernel (four), and then alternate between two sets, each held by a graph of its own;
    // batches go through two; then
    // batches of each order through six sets of the same kernels, more than the graphs kept
    // per sequence of kernels (four), so the least recently launched graph has its nodes set
    // again (a reset), and back to the first sets.
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let plan = StridedBlock::from_type(&vector(4096, 3, 7, 4).unwrap()).unwrap();
    let opts = GpuOptions::default().with_relaunch(true);
    let packer = Packer::with_options(&ctx, &plan, &opts).unwrap();
    let (extent, packed) = (plan.extent_end() as usize, plan.packed_size() as usize);
    let hosts = [pattern(extent, 11), pattern(extent, 12)];
    let wants: Vec<Vec<u8>> = hosts
        .iter()
        .map(|h| {
            let mut w = vec![0u8; packed];
            cpu::pack(&plan, h, &mut w).unwrap();
            w
        })
        .collect();
    let d_src = [
        stream.clone_htod(&hosts[0]).unwrap(),
        stream.clone_htod(&hosts[1]).unwrap(),
    ];
    let slots = 3;
    let mut d_out = stream.alloc_zeros::<u8>(slots * packed).unwrap();
    // One round: the launches (source, destination slot), alone or as a batch made by
    // `make`, into a cleared destination, every slot checked after.
    let mut round = |r: &str, launches: &[(usize, usize)], make: MakeBatch| {
        {
            let (a, _ra) = d_src[0].device_ptr(&stream);
            let (b, _rb) = d_src[1].device_ptr(&stream);
            let (out, _w) = d_out.device_ptr_mut(&stream);
            // SAFETY: `out` holds `slots * packed` bytes of this context, used by this stream
            // only.
            unsafe {
                gpu::cudarc::driver::sys::cuMemsetD8Async(
                    out,
                    0,
                    slots * packed,
                    stream.cu_stream(),
                )
            }
            .result()
            .unwrap();
            let mut batch = (make.0)(&stream);
            for &(src, slot) in launches.iter() {
                let sp = [a, b][src];
                let dp = out + (slot * packed) as u64;
                // SAFETY: the launch reads one whole source allocation and writes its own
                // packed span of the destination, allocations of this context kept until the
                // copy back below, which the stream orders after it.
                unsafe {
                    if launches.len() == 1 {
                        packer.pack_raw(&stream, sp, extent, dp, packed)
                    } else {
                        packer.record_pack_raw(&mut batch, sp, extent, dp, packed)
                    }
                }
                .unwrap();
            }
            batch.launch().unwrap();
        }
        let got = stream.clone_dtoh(&d_out).unwrap();
        for slot in 0..slots {
            let span = &got[slot * packed..(slot + 1) * packed];
            match launches.iter().find(|&&(_, s)| s == slot) {
                Some(&(src, _)) => assert!(
                    span == &wants[src][..],
                    "round {r} ({}), slot {slot}: {}",
                    make.1,
                    first_diff(span, &wants[src])
                ),
                None => assert!(
                    span.iter().all(|&x| x == 0),
                    "round {r} ({}), slot {slot} written",
                    make.1
                ),
            }
        }
    };
    let rounds: [&[(usize, usize)]; 19] = [
        &[(0, 0)],
        &[(0, 0)],
        &[(1, 1)],
        &[(0, 0)],
        &[(0, 0), (1, 1)],
        &[(0, 0), (1, 1)],
        &[(1, 0), (0, 1)],
        &[(0, 0), (1, 1)],
        &[(0, 0), (1, 1)],
        &[(1, 2)],
        &[(0, 2)],
        &[(1, 0)],
        &[(0, 1)],
        &[(1, 2)],
        &[(0, 0)],
        &[(1, 1)],
        &[(0, 2)],
        &[(0, 0)],
        &[(1, 2)],
    ];
    for (r, launches) in rounds.iter().enumerate() {
        round(&r.to_string(), launches, BATCH_ORDERS[0]);
    }
    // Single launches alternating between two argument sets (a send packing into one of two
    // stagings): each set keeps a graph of its own, so after the first two none is set again.
    // (Other tests running meanwhile can only add to the count.)
    let before = gpu::graph_counts();
    for k in 0..8 {
        let set: &[(usize, usize)] = if k % 2 == 0 { &[(0, 1)] } else { &[(1, 2)] };
        round(&format!("alternating {k}"), set, BATCH_ORDERS[0]);
    }
    let after = gpu::graph_counts();
    assert!(
        after.single_held >= before.single_held + 6,
        "{} of eight alternating single launches held their arguments ({before:?} then {after:?})",
        after.single_held - before.single_held
    );
    // Six sets of the same two kernels, then the first two again: at least four resets per
    // order (the fifth and sixth sets, and the first two, which were reset away).
    let sets: [&[(usize, usize)]; 8] = [
        &[(0, 0), (1, 1)],
        &[(1, 0), (0, 1)],
        &[(0, 1), (1, 2)],
        &[(1, 1), (0, 2)],
        &[(0, 2), (1, 0)],
        &[(1, 2), (0, 0)],
        &[(0, 0), (1, 1)],
        &[(1, 0), (0, 1)],
    ];
    for make in BATCH_ORDERS {
        let before = gpu::graph_counts();
        for (r, launches) in sets.iter().enumerate() {
            round(&format!("set {r}"), launches, make);
        }
        let after = gpu::graph_counts();
        assert!(
            after.reset >= before.reset + 4,
            "{}: {} resets over eight batches of six sets ({before:?} then {after:?})",
            make.1,
            after.reset - before.reset
        );
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn raw_calls_are_checked_before_launch() {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let plan = StridedBlock::new(4, 8, vec![10], vec![16]).unwrap(); // extent 156, packed 80
    let packer = Packer::new(&ctx, &plan).unwrap();
    let src = stream.clone_htod(&pattern(200, 1)).unwrap();
    let dst = stream.clone_htod(&vec![0xA5u8; 100]).unwrap();
    let (sp, _read) = src.device_ptr(&stream);
    let (dp, _write) = dst.device_ptr(&stream);
    // SAFETY: both allocations belong to this context and hold at least the lengths passed
    // (200 and 100 bytes); only this stream uses them, and the checks refuse this call and
    // the ones below before they launch anything.
    let r = unsafe { packer.pack_raw(&stream, sp, 155, dp, 100) };
    assert!(
        matches!(
            r,
            Err(Error::OutOfBounds {
                buffer: Buffer::Source,
                end: 156,
                len: 155,
                ..
            })
        ),
        "{r:?}"
    );
    // SAFETY: as above.
    let r = unsafe { packer.pack_raw(&stream, sp, 200, dp, 79) };
    assert!(
        matches!(
            r,
            Err(Error::BufferTooSmall {
                buffer: Buffer::Destination,
                needed: 80,
                ..
            })
        ),
        "{r:?}"
    );
    // Unpack: the packed source (79 of the 80 bytes it needs) is refused; the strided
    // destination passed is the 200-byte allocation, long enough for the extent.
    // SAFETY: as above.
    let r = unsafe { packer.unpack_raw(&stream, dp, 79, sp, 200) };
    assert!(
        matches!(
            r,
            Err(Error::BufferTooSmall {
                buffer: Buffer::Source,
                needed: 80,
                ..
            })
        ),
        "{r:?}"
    );
    // A strided destination shorter than the extent is refused first.
    // SAFETY: as above.
    let r = unsafe { packer.unpack_raw(&stream, dp, 79, sp, 100) };
    assert!(
        matches!(
            r,
            Err(Error::OutOfBounds {
                buffer: Buffer::Destination,
                end: 156,
                ..
            })
        ),
        "{r:?}"
    );
    // SAFETY: as above.
    let r = unsafe { packer.pack_raw(&stream, 0, 200, dp, 100) };
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    let fp = FusedPacker::new(&ctx, std::slice::from_ref(&plan)).unwrap();
    // SAFETY: as above.
    let r = unsafe { fp.pack_raw(&stream, sp, 200, 0, 100) };
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    // SAFETY: as above.
    let r = unsafe { fp.unpack_raw(&stream, sp, 100, dp, 155) };
    assert!(
        matches!(
            r,
            Err(Error::OutOfBounds {
                buffer: Buffer::Destination,
                ..
            })
        ),
        "{r:?}"
    );
    // An empty plan moves nothing, whatever the addresses.
    let empty = Packer::new(&ctx, &StridedBlock::empty()).unwrap();
    // SAFETY: nothing is launched for an empty plan.
    unsafe { empty.pack_raw(&stream, 0, 0, 0, 0) }.unwrap();
    assert_eq!(
        stream.clone_dtoh(&dst).unwrap(),
        vec![0xA5u8; 100],
        "nothing was written"
    );
    stream.synchronize().unwrap();
}

#[derive(Debug, Clone)]
struct CopyCase {
    index: usize,
    /// Regions whose destinations lie in a buffer of their own.
    regions: Vec<CopyRegion>,
    /// Offset of the source view in its allocation.
    src_off: usize,
    /// Offset of the destination view in its allocation.
    dst_off: usize,
}

const COPY_POOL: usize = 240;

/// A source plan of `ndims` stream dimensions, its blocks disjoint, starting at or after `at`.
fn copy_plan(rng: &mut Rng, unit: u64, ndims: usize, at: u64, big: bool) -> StridedBlock {
    let words = if big {
        rng.pick(&[1u64, 2])
    } else {
        rng.pick(&[1u64, 1, 2, 3, 4, 7, 16, 100])
    };
    let block = unit * words;
    let mut start = at.next_multiple_of(unit) + unit * rng.below(3);
    if rng.below(6) == 0 {
        start += rng.below(16); // an unaligned start
    }
    let mut span = block;
    let (mut counts, mut strides) = (Vec::new(), Vec::new());
    for k in 0..ndims {
        let n = if big && k == 0 {
            65_536 + rng.below(10_000)
        } else if big {
            rng.pick(&[1u64, 2])
        } else {
            rng.pick(&[1u64, 2, 3, 5, 16, 31, 64])
        };
        let slack = unit * rng.pick(&[0u64, 0, 1, 3]) + rng.pick(&[0u64, 0, 0, 0, 0, 0, 0, 1, 3]);
        let stride = span + slack;
        span = stride * n;
        counts.push(n);
        strides.push(stride);
    }
    StridedBlock::new(start, block, counts, strides).unwrap()
}

fn copy_pool() -> Vec<CopyCase> {
    let mut rng = Rng(0x000c_097c_a5e5);
    let mut out = Vec::with_capacity(COPY_POOL);
    for index in 0..COPY_POOL {
        let unit = [1u64, 2, 4, 8, 16][index % 5];
        let n = 1 + rng.below(4) as usize;
        let (mut src_at, mut dst_at) = (0u64, rng.below(3) * unit);
        let mut regions = Vec::with_capacity(n);
        for k in 0..n {
            let ndims = (index / 5 + k) % 4;
            let big = ndims > 0 && index % 29 == 7 && k == 0;
            let src = copy_plan(&mut rng, unit, ndims, src_at, big);
            // Sources may overlap (they are only read); destinations are laid out disjoint.
            src_at = if rng.below(3) == 0 {
                src.start()
            } else {
                src.extent_end()
            };
            let mut dst_start = dst_at.next_multiple_of(unit) + unit * rng.below(3);
            if rng.below(6) == 0 {
                dst_start += rng.below(16); // an unaligned destination
            }
            let region = CopyRegion::new(src, dst_start);
            dst_at = region.dst_plan().unwrap().extent_end();
            regions.push(region);
            if rng.below(9) == 0 {
                regions.push(CopyRegion::new(StridedBlock::empty(), rng.below(100)));
            }
        }
        let src_off = if rng.below(3) != 0 {
            0
        } else {
            rng.pick(&[1usize, 2, 4, 8, 16])
        };
        let dst_off = if rng.below(3) != 0 {
            0
        } else {
            rng.pick(&[1usize, 2, 4, 8, 12])
        };
        out.push(CopyCase {
            index,
            regions,
            src_off,
            dst_off,
        });
    }
    out
}

/// The case's regions moved within one buffer: destinations shifted past every source (by a
/// multiple of 16 plus `skew` bytes), so that the bytes read and written are disjoint.
fn in_place_regions(c: &CopyCase, skew: u64) -> Vec<CopyRegion> {
    let src_end = c
        .regions
        .iter()
        .map(|r| r.src().extent_end())
        .max()
        .unwrap_or(0);
    let shift = src_end.next_multiple_of(16) + skew;
    c.regions
        .iter()
        .map(|r| CopyRegion::new(r.src().clone(), r.dst_start() + shift))
        .collect()
}

/// The skew of the case's copy within one buffer: a few bytes in some cases, so that in-place
/// word sizes vary too.
fn in_place_skew(c: &CopyCase) -> u64 {
    [0, 0, 0, 8, 4, 2, 1][c.index % 7]
}

/// The warm-up jobs of [`run_copy_case`]: its two copiers, each with the variant of its views.
fn copy_case_jobs(c: &CopyCase) -> [Job; 2] {
    let opts = options_for(c.index);
    [
        copier_job(c.regions.clone(), &opts, c.src_off, c.dst_off),
        copier_job(
            in_place_regions(c, in_place_skew(c)),
            &opts,
            c.src_off,
            c.src_off,
        ),
    ]
}

/// Word sizes of the case's launches, counted by size (1, 2, 4, 8, 16).
type WordCounts = [usize; 5];

fn run_copy_case(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    c: &CopyCase,
    words: &mut WordCounts,
) -> Result<(), String> {
    let err =
        |what: &str, e: &dyn std::fmt::Display| format!("copy case {} ({what}): {e}", c.index);
    let opts = options_for(c.index);
    let mut count = |w: Vec<u32>, regions: &[CopyRegion]| {
        for (w, r) in w.iter().zip(regions) {
            if !r.src().is_empty() {
                words[w.trailing_zeros() as usize] += 1;
            }
        }
    };

    // Two buffers, safe and raw: views at offsets into allocations whose other bytes must stay.
    let copier = FusedCopier::new(ctx, c.regions.clone(), &opts).map_err(|e| err("new", &e))?;
    let (slen, dlen) = (
        copier.src_extent_end() as usize,
        copier.dst_extent_end() as usize,
    );
    let host_src = pattern(c.src_off + slen + 7, c.index as u64 * 11 + 1);
    let d_src = stream.clone_htod(&host_src).map_err(|e| err("htod", &e))?;
    let host_dst = vec![0xA5u8; c.dst_off + dlen + 9];
    let mut want = host_dst.clone();
    fused::copy(
        &c.regions,
        &host_src[c.src_off..c.src_off + slen],
        &mut want[c.dst_off..c.dst_off + dlen],
    )
    .map_err(|e| err("cpu", &e))?;
    count(copier.words(c.src_off as u64, c.dst_off as u64), &c.regions);
    for raw in [false, true] {
        let what = if raw { "copy_raw" } else { "copy" };
        let mut d_dst = stream.clone_htod(&host_dst).map_err(|e| err("htod", &e))?;
        if raw {
            let (sp, _read) = d_src.device_ptr(stream);
            let (dp, _write) = d_dst.device_ptr(stream);
            // SAFETY: both allocations belong to this context and hold the offsets plus the
            // lengths passed; only this stream uses them until the copy back below.
            unsafe {
                copier.copy_raw(
                    stream,
                    sp + c.src_off as u64,
                    slen,
                    dp + c.dst_off as u64,
                    dlen,
                )
            }
            .map_err(|e| err(what, &e))?;
        } else {
            let src = d_src.slice(c.src_off..c.src_off + slen);
            let mut dst = d_dst.slice_mut(c.dst_off..c.dst_off + dlen);
            copier
                .copy(stream, &src, &mut dst)
                .map_err(|e| err(what, &e))?;
        }
        let got = stream.clone_dtoh(&d_dst).map_err(|e| err("dtoh", &e))?;
        check(got == want, || {
            format!(
                "copy case {} {what} {:?}: {}",
                c.index,
                c,
                first_diff(&got, &want)
            )
        })?;
    }

    // One buffer, safe and raw: the destinations moved past the sources (skewed by a few
    // bytes in some cases, so that in-place word sizes vary too).
    let regions = in_place_regions(c, in_place_skew(c));
    let copier = FusedCopier::new(ctx, regions.clone(), &opts).map_err(|e| err("new", &e))?;
    let len = copier.extent_end() as usize;
    let host = pattern(c.src_off + len + 5, c.index as u64 * 11 + 3);
    let mut want = host.clone();
    fused::copy_in_place(&regions, &mut want[c.src_off..c.src_off + len])
        .map_err(|e| err("cpu in place", &e))?;
    count(copier.words(c.src_off as u64, c.src_off as u64), &regions);
    for raw in [false, true] {
        let what = if raw {
            "copy_raw in place"
        } else {
            "copy_in_place"
        };
        let mut d_buf = stream.clone_htod(&host).map_err(|e| err("htod", &e))?;
        if raw {
            let (p, _write) = d_buf.device_ptr(stream);
            let p = p + c.src_off as u64;
            // SAFETY: the allocation belongs to this context and holds the offset plus `len`
            // bytes; only this stream uses it until the copy back below; source and
            // destination may be one buffer.
            unsafe { copier.copy_raw(stream, p, len, p, len) }.map_err(|e| err(what, &e))?;
        } else {
            let mut view = d_buf.slice_mut(c.src_off..c.src_off + len);
            copier
                .copy_in_place(stream, &mut view)
                .map_err(|e| err(what, &e))?;
        }
        let got = stream.clone_dtoh(&d_buf).map_err(|e| err("dtoh", &e))?;
        check(got == want, || {
            format!(
                "copy case {} {what} {:?}: {}",
                c.index,
                regions,
                first_diff(&got, &want)
            )
        })?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA device"]
fn fused_copy_random_pairs() {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let cases = copy_pool();
    warm(
        "fused_copy_random_pairs",
        cases.iter().flat_map(copy_case_jobs).collect(),
    );
    let t0 = Instant::now();
    let mut words = [0usize; 5];
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| run_copy_case(&ctx, &stream, c, &mut words).err())
        .collect();
    ran("fused_copy_random_pairs", t0);
    println!(
        "copy: {} cases, {} regions, {} failed; regions by word size 1/2/4/8/16: {:?}",
        cases.len(),
        cases.iter().map(|c| c.regions.len()).sum::<usize>(),
        failures.len(),
        words
    );
    for f in failures.iter().take(10) {
        println!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed",
        failures.len(),
        cases.len()
    );
    assert!(
        words.iter().all(|&n| n > 0),
        "every word size ran: {words:?}"
    );
}

/// The regions of [`periodic_halo`]: each send face copied to the ghost face on the opposite
/// side.
fn periodic_regions(n: u64, r: u64, elem: u64, all26: bool) -> Vec<CopyRegion> {
    let (send, ghost) = halo(n, r, elem, all26);
    // The directions come in an order that negation reverses: face i goes to ghost face
    // len - 1 - i. `between` checks the shapes agree.
    send.iter()
        .zip(ghost.iter().rev())
        .map(|(s, g)| CopyRegion::between(s.clone(), g).unwrap())
        .collect()
}

/// The warm-up job of [`periodic_halo`] with the same arguments: its copier with the variant
/// of the view.
fn periodic_halo_job(
    n: u64,
    r: u64,
    elem: u64,
    all26: bool,
    grid_off: usize,
    opts: &GpuOptions,
) -> Job {
    copier_job(
        periodic_regions(n, r, elem, all26),
        opts,
        grid_off,
        grid_off,
    )
}

/// A periodic halo on one rank: each send face (interior slab) fills the ghost face on the
/// opposite side, within the one grid, through `copy_in_place` and `copy_raw`.
fn periodic_halo(n: u64, r: u64, elem: u64, all26: bool, grid_off: usize, opts: &GpuOptions) {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let regions = periodic_regions(n, r, elem, all26);
    let copier = FusedCopier::new(&ctx, regions.clone(), opts).unwrap();
    let extent = ((n + 2 * r).pow(3) * elem) as usize;
    assert!(copier.extent_end() as usize <= extent);
    let host = pattern(grid_off + extent + 3, 5 + n);
    let mut want = host.clone();
    fused::copy_in_place(&regions, &mut want[grid_off..grid_off + extent]).unwrap();
    assert_ne!(want, host, "the copy changes the ghosts");
    for raw in [false, true] {
        let mut d = stream.clone_htod(&host).unwrap();
        if raw {
            let (p, _write) = d.device_ptr(&stream);
            let p = p + grid_off as u64;
            // SAFETY: the allocation belongs to this context and holds the offset plus the
            // extent; only this stream uses it until the copy back below.
            unsafe { copier.copy_raw(&stream, p, extent, p, extent) }.unwrap();
        } else {
            let mut view = d.slice_mut(grid_off..grid_off + extent);
            copier.copy_in_place(&stream, &mut view).unwrap();
        }
        let got = stream.clone_dtoh(&d).unwrap();
        assert!(
            got == want,
            "periodic halo n={n} r={r} elem={elem} raw={raw}: {}",
            first_diff(&got, &want)
        );
    }
    println!(
        "periodic halo n={n} r={r} elem={elem} {} regions at +{grid_off}, {:?} x {} threads: \
         {} bytes copied in place match the CPU reference (launch {:?}, words {:?})",
        regions.len(),
        opts.grid,
        opts.max_threads_per_block,
        copier.bytes(),
        copier.launch_dims().unwrap(),
        copier.words(grid_off as u64, grid_off as u64)
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn fused_copy_periodic_halo_in_place() {
    let d = GpuOptions::default();
    let one = GpuOptions::default()
        .with_grid(GridCap::Waves(1))
        .with_max_threads_per_block(128);
    let full = d.clone().with_grid(GridCap::Full);
    let periodic = |n, r, elem, all26, go, o: &GpuOptions| {
        HaloStep::Periodic((n, r, elem, all26), go, o.clone())
    };
    run_halo_steps(
        "fused_copy_periodic_halo_in_place",
        &[
            periodic(20, 3, 8, false, 0, &d),
            periodic(64, 3, 8, false, 0, &one),
            periodic(33, 2, 4, false, 4, &d),
            periodic(20, 3, 8, true, 0, &d),
            periodic(31, 2, 16, true, 8, &full),
            periodic(17, 1, 1, true, 3, &one),
        ],
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn fused_copy_bounds_are_checked_before_launch() {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    // Source extent 4 + 8 + 9 * 16 = 156; destination extent 300 + 152 = 452.
    let region = CopyRegion::new(StridedBlock::new(4, 8, vec![10], vec![16]).unwrap(), 300);
    let copier = FusedCopier::new(&ctx, vec![region], &GpuOptions::default()).unwrap();
    assert_eq!(
        (
            copier.src_extent_end(),
            copier.dst_extent_end(),
            copier.extent_end()
        ),
        (156, 452, 452)
    );
    assert_eq!(copier.bytes(), 80);
    let src = stream.clone_htod(&pattern(500, 9)).unwrap();
    let mut dst = stream.clone_htod(&vec![0xA5u8; 500]).unwrap();
    let r = copier.copy(&stream, &src.slice(0..155), &mut dst);
    assert!(
        matches!(
            r,
            Err(Error::OutOfBounds {
                buffer: Buffer::Source,
                end: 156,
                len: 155,
                ..
            })
        ),
        "{r:?}"
    );
    let r = copier.copy(&stream, &src, &mut dst.slice_mut(0..451));
    assert!(
        matches!(
            r,
            Err(Error::OutOfBounds {
                buffer: Buffer::Destination,
                first: 300,
                end: 452,
                len: 451,
                ..
            })
        ),
        "{r:?}"
    );
    let r = copier.copy_in_place(&stream, &mut dst.slice_mut(0..451));
    assert!(
        matches!(
            r,
            Err(Error::OutOfBounds {
                buffer: Buffer::Destination,
                ..
            })
        ),
        "{r:?}"
    );
    {
        let (sp, _read) = src.device_ptr(&stream);
        let (dp, _write) = dst.device_ptr(&stream);
        // SAFETY: both allocations belong to this context and hold 500 bytes; the checks
        // refuse both calls before anything is launched.
        let r = unsafe { copier.copy_raw(&stream, sp, 155, dp, 500) };
        assert!(
            matches!(
                r,
                Err(Error::OutOfBounds {
                    buffer: Buffer::Source,
                    ..
                })
            ),
            "{r:?}"
        );
        // SAFETY: as above.
        let r = unsafe { copier.copy_raw(&stream, sp, 500, 0, 500) };
        assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    }
    assert_eq!(
        stream.clone_dtoh(&dst).unwrap(),
        vec![0xA5u8; 500],
        "nothing was written"
    );
    // Exactly large enough is fine.
    copier
        .copy(&stream, &src.slice(0..156), &mut dst.slice_mut(0..452))
        .unwrap();
    let got = stream.clone_dtoh(&dst).unwrap();
    let host_src = pattern(500, 9);
    for b in 0..10 {
        assert_eq!(
            &got[300 + b * 16..308 + b * 16],
            &host_src[4 + b * 16..12 + b * 16]
        );
    }
    // Nothing to copy launches nothing.
    let empty = FusedCopier::new(
        &ctx,
        vec![CopyRegion::new(StridedBlock::empty(), 9)],
        &GpuOptions::default(),
    )
    .unwrap();
    assert_eq!(empty.extent_end(), 0);
    // SAFETY: nothing is launched when nothing is copied.
    unsafe { empty.copy_raw(&stream, 0, 0, 0, 0) }.unwrap();
    stream.synchronize().unwrap();
}

#[test]
fn copy_pool_covers_what_it_promises() {
    // Runs without a GPU: the copy pool itself.
    let p = copy_pool();
    assert_eq!(p.len(), COPY_POOL);
    let regions = || p.iter().flat_map(|c| c.regions.iter());
    for nd in 0..=3 {
        assert!(
            regions().any(|r| r.src().ndims() == nd),
            "no {}-D region",
            nd + 1
        );
    }
    for w in [1, 2, 4, 8, 16] {
        assert!(
            regions().any(|r| r.word_size(0, 0) == w),
            "no region of word {w}"
        );
    }
    assert!(regions().any(|r| r.src().start() % 2 == 1));
    assert!(regions().any(|r| r.dst_start() % 2 == 1 && !r.src().is_empty()));
    assert!(regions().any(|r| r.src().counts().first() > Some(&65_535)));
    assert!(regions().any(|r| r.src().is_empty()));
    assert!(p.iter().any(|c| c.src_off % 2 == 1));
    assert!(p.iter().any(|c| c.dst_off % 2 == 1));
    assert!(p.iter().any(|c| c.regions.len() >= 4));
    for c in &p {
        // Destinations are disjoint (two buffers), and in place they lie past every source.
        fused::check_copy(&c.regions).unwrap();
        let src_end = c
            .regions
            .iter()
            .map(|r| r.src().extent_end())
            .max()
            .unwrap();
        for r in in_place_regions(c, 15) {
            assert!(r.src().is_empty() || r.dst_start() >= src_end);
        }
        // Sizes stay small enough for a quick run.
        let copier_ends = c
            .regions
            .iter()
            .map(|r| r.dst_plan().unwrap().extent_end().max(r.src().extent_end()))
            .max()
            .unwrap();
        assert!(
            copier_ends < 64 << 20,
            "case {}: {copier_ends} bytes",
            c.index
        );
    }
}

// Flat kernels (`LaunchShape::flat`): contiguous plans and plans of tiny blocks.

/// The launch configurations every flat case runs under: the default (full grid, one word per
/// thread), a one-wave grid, the full grid with a 1024-thread limit (flat kernels still use 256),
/// and 32-thread blocks in one wave (many trips of the grid-stride loop per thread).
fn flat_options() -> [GpuOptions; 4] {
    [
        GpuOptions::default(),
        GpuOptions::default()
            .with_max_threads_per_block(256)
            .with_grid(GridCap::Waves(1)),
        GpuOptions::default()
            .with_max_threads_per_block(1024)
            .with_grid(GridCap::Full),
        GpuOptions::default()
            .with_max_threads_per_block(32)
            .with_grid(GridCap::Waves(1)),
    ]
}

/// Plans the flat kernels take, each with unaligned starts or views on some cases: contiguous
/// plans of many sizes (odd ones included), contiguous plans that are not canonical, 1-byte and
/// 2-byte blocks with counts far beyond 65,535 (in one and in two dimensions), and blocks of a
/// power-of-two number of words.
fn flat_cases() -> Vec<Case> {
    let mut plans = Vec::new();
    let sizes = [
        1u64,
        2,
        3,
        15,
        16,
        17,
        31,
        255,
        256,
        257,
        4095,
        4099,
        65_536,
        (1 << 20) + 5,
        4 << 20,
        (4 << 20) + 16 * 7 + 1,
        (16 << 20) + 3,
    ];
    for (i, &n) in sizes.iter().enumerate() {
        plans.push(StridedBlock::new([0, 1, 3, 8, 16][i % 5], n, vec![], vec![]).unwrap());
    }
    plans.extend([
        // Contiguous, not canonical.
        StridedBlock::new(4, 4, vec![1000, 1, 3], vec![4, 77, 4000]).unwrap(),
        StridedBlock::new(0, 16, vec![64, 64], vec![16, 1024]).unwrap(),
        StridedBlock::new(1, 3, vec![5, 7], vec![3, 15]).unwrap(),
        // 1-byte blocks.
        StridedBlock::new(0, 1, vec![3_000_001], vec![2]).unwrap(),
        StridedBlock::new(1, 1, vec![100_000], vec![512]).unwrap(),
        StridedBlock::new(0, 1, vec![70_001, 100], vec![3, 70_001 * 3 + 5]).unwrap(),
        StridedBlock::new(3, 1, vec![100, 70_000], vec![2, 211]).unwrap(),
        // 2-byte blocks.
        StridedBlock::new(0, 2, vec![2_500_000], vec![4]).unwrap(),
        StridedBlock::new(2, 2, vec![80_000, 30], vec![6, 480_010]).unwrap(),
        StridedBlock::new(0, 2, vec![3, 1_000_000], vec![2, 8]).unwrap(),
        // Long launches of small blocks, thread blocks of 1024 and 512 threads
        // (`flat_threads`): 64-byte blocks, single 16-byte words.
        StridedBlock::new(0, 64, vec![1 << 19], vec![512]).unwrap(),
        StridedBlock::new(16, 16, vec![2_100_000], vec![48]).unwrap(),
        // 8 and 16 words per block.
        StridedBlock::new(0, 128, vec![10_000], vec![512]).unwrap(),
        StridedBlock::new(4, 64, vec![300, 7], vec![68, 300 * 68 + 4]).unwrap(),
    ]);
    // Views: aligned, then at odd and even offsets into larger allocations.
    let views = [(0usize, 0usize), (1, 0), (0, 2), (4, 8), (3, 5), (256, 16)];
    let mut out = Vec::new();
    for (i, plan) in plans.into_iter().enumerate() {
        for k in 0..2 {
            let (strided_off, packed_off) = views[(2 * i + k) % views.len()];
            out.push(Case {
                index: out.len(),
                plan: plan.clone(),
                strided_off,
                packed_off,
                tail: [0, 7][k],
            });
        }
    }
    out
}

#[test]
fn flat_cases_take_the_flat_kernels() {
    // Runs without a GPU: every flat case is launched flat for every word size.
    let cases = flat_cases();
    assert!(cases.len() >= 50);
    for c in &cases {
        for w in [1, 2, 4, 8, 16] {
            if w <= c.plan.word_size(0, 0) {
                assert!(
                    LaunchShape::flat_suits(&c.plan, w),
                    "{c:?} in {w}-byte words"
                );
            }
        }
    }
    assert!(cases.iter().any(|c| c.plan.packed_size() > 1 << 24));
    assert!(cases
        .iter()
        .any(|c| c.plan.counts().first() > Some(&65_535)));
    assert!(cases.iter().any(|c| c.plan.counts().get(1) > Some(&65_535)));
    assert!(cases
        .iter()
        .any(|c| c.strided_off % 2 == 1 && c.plan.start() % 2 == 0));
    // Every thread-block size of a single plan's flat kernel, in the widest words.
    let threads: Vec<u32> = cases
        .iter()
        .map(|c| flat_threads(&c.plan, c.plan.word_size(0, 0)))
        .collect();
    for t in [FLAT_THREADS, 512, 1024] {
        assert!(threads.contains(&t), "no case of {t} threads per block");
    }
    // The pool has both kinds of single-plan kernels.
    if std::env::var("DTP_POOL_LIMIT").is_ok() {
        return;
    }
    let pool = pool();
    let flat = |c: &Case| {
        !c.plan.is_empty()
            && LaunchShape::flat_suits(
                &c.plan,
                c.plan.word_size(c.strided_off as u64, c.packed_off as u64),
            )
    };
    assert!(pool.iter().filter(|c| flat(c)).count() > 100);
    assert!(
        pool.iter()
            .filter(|c| !flat(c) && !c.plan.is_empty())
            .count()
            > 100
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn flat_kernels_match_the_cpu_oracle() {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let cases = flat_cases();
    warm(
        "flat_kernels_match_the_cpu_oracle",
        cases
            .iter()
            .flat_map(|c| {
                flat_options().map(|opts| packer_job(&c.plan, &opts, c.strided_off, c.packed_off))
            })
            .collect(),
    );
    let t0 = Instant::now();
    let mut failures = Vec::new();
    let mut runs = 0;
    for c in &cases {
        for opts in &flat_options() {
            runs += 1;
            if let Err(e) = run_case_with(&ctx, &stream, c, opts) {
                failures.push(e);
            }
            if let Err(e) = run_raw_case_with(&ctx, &stream, c, opts) {
                failures.push(e);
            }
        }
    }
    ran("flat_kernels_match_the_cpu_oracle", t0);
    println!(
        "flat: {} layouts x {} launch configurations, safe and raw: {} failed",
        cases.len(),
        runs / cases.len(),
        failures.len()
    );
    for f in failures.iter().take(10) {
        println!("  {f}");
    }
    assert!(failures.is_empty());
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA device"]
fn flat_launches_are_the_one_thread_per_word_launch() {
    let ctx = ctx();
    // Contiguous 4 MiB in 16-byte words: 1024 blocks of 256 threads, as the naive kernel.
    let contiguous = StridedBlock::new(0, 4 << 20, vec![], vec![]).unwrap();
    let p = Packer::new(&ctx, &contiguous).unwrap();
    assert_eq!(p.launch_dims(16).unwrap(), ([1024, 1, 1], [256, 1, 1]));
    // Odd views of it move in narrower words, still one thread per word.
    assert_eq!(p.launch_dims(1).unwrap(), ([16_384, 1, 1], [256, 1, 1]));
    // 1 MiB of 1-byte blocks at stride 512: the full grid under the default policy.
    let tiny = StridedBlock::new(0, 1, vec![1 << 20], vec![512]).unwrap();
    let p = Packer::new(&ctx, &tiny).unwrap();
    assert_eq!(p.launch_dims(1).unwrap(), ([4096, 1, 1], [256, 1, 1]));
    // A one-wave policy caps the flat grid; 32-thread blocks where the limit says so.
    let one = GpuOptions::default()
        .with_max_threads_per_block(32)
        .with_grid(GridCap::Waves(1));
    let p = Packer::with_options(&ctx, &tiny, &one).unwrap();
    let (grid, block) = p.launch_dims(1).unwrap();
    assert_eq!(block, [32, 1, 1]);
    assert!(
        grid[0] < (1 << 20) / 32 && grid[1] == 1 && grid[2] == 1,
        "{grid:?}"
    );
    // 64 MiB of 1-byte blocks: a long launch of small blocks, 1024-thread blocks
    // (`flat_threads`), one x grid of 65,536 blocks (no 65,535 cap in y).
    let big = StridedBlock::new(0, 1, vec![64 << 20], vec![512]).unwrap();
    let p = Packer::new(&ctx, &big).unwrap();
    assert_eq!(p.launch_dims(1).unwrap(), ([65_536, 1, 1], [1024, 1, 1]));
    // Under a limit of 256 threads, 256-thread blocks.
    let p = Packer::with_options(
        &ctx,
        &big,
        &GpuOptions::default().with_max_threads_per_block(256),
    )
    .unwrap();
    assert_eq!(p.launch_dims(1).unwrap(), ([262_144, 1, 1], [256, 1, 1]));
    // A long launch of 3 words per block keeps the mapping by axes.
    let axes = StridedBlock::new(0, 12, vec![1 << 20], vec![512]).unwrap();
    let p = Packer::new(&ctx, &axes).unwrap();
    let (_, block) = p.launch_dims(4).unwrap();
    assert_eq!(block, [4, 128, 1]);
}

// Fused kernels map every region flat (`codegen::fused_shape`).

/// The grid policies every fused flat case runs under: `Auto` (the full grid, one thread per
/// word), `Full`, and one wave of 128-thread blocks (many trips of each region's grid-stride
/// loop).
fn fused_flat_options() -> [GpuOptions; 3] {
    [
        GpuOptions::default(),
        GpuOptions::default().with_grid(GridCap::Full),
        GpuOptions::default()
            .with_grid(GridCap::Waves(1))
            .with_max_threads_per_block(128),
    ]
}

#[test]
#[ignore = "needs a CUDA device"]
fn fused_flat_halos_match_the_cpu_oracle() {
    // 6 faces and 26 regions, radius 1 to 3, cells of 1 to 16 bytes (so blocks of 1 to 48
    // bytes: 3-word blocks at radius 3), views at aligned and unaligned offsets (narrower
    // words), under every grid policy: pack, unpack and the periodic copy in place.
    let offsets = [(0usize, 0usize), (1, 3), (4, 8), (8, 2), (2, 4)];
    let mut steps = Vec::new();
    let mut k = 0;
    for all26 in [false, true] {
        for r in 1..=3u64 {
            for elem in [1u64, 2, 4, 8, 16] {
                for opts in fused_flat_options() {
                    let (grid_off, packed_off) = offsets[k % offsets.len()];
                    k += 1;
                    let halo = (13, r, elem, all26);
                    steps.push(HaloStep::RoundTrip(
                        halo,
                        grid_off,
                        packed_off,
                        opts.clone(),
                    ));
                    steps.push(HaloStep::Periodic(halo, grid_off, opts));
                }
            }
        }
    }
    // Larger faces of 24-byte blocks (3 words of 8 bytes), as a halo of radius 3 in doubles.
    for opts in fused_flat_options() {
        steps.push(HaloStep::RoundTrip((96, 3, 8, false), 0, 0, opts.clone()));
        steps.push(HaloStep::RoundTrip((64, 3, 8, true), 8, 16, opts.clone()));
        steps.push(HaloStep::Periodic((64, 3, 8, true), 0, opts));
    }
    run_halo_steps("fused_flat_halos_match_the_cpu_oracle", &steps);
}

/// Warms the compile cache for `steps` of test `label`, then runs them one after another.
fn run_halo_steps(label: &str, steps: &[HaloStep]) {
    warm(label, steps.iter().flat_map(HaloStep::jobs).collect());
    let t0 = Instant::now();
    for step in steps {
        step.run();
    }
    ran(label, t0);
}

/// A halo's `(n, r, elem, all26)`, as [`halo`] takes them.
type HaloShape = (u64, u64, u64, bool);

/// One step of a halo test: a [`fused_round_trip`] (with the grid and packed view offsets) or a
/// [`periodic_halo`] (with the grid view offset).
enum HaloStep {
    RoundTrip(HaloShape, usize, usize, GpuOptions),
    Periodic(HaloShape, usize, GpuOptions),
}

impl HaloStep {
    /// The warm-up jobs of the step.
    fn jobs(&self) -> Vec<Job> {
        match *self {
            HaloStep::RoundTrip((n, r, e, all26), go, po, ref o) => {
                fused_round_trip_jobs(n, r, e, all26, go, po, o).into()
            }
            HaloStep::Periodic((n, r, e, all26), go, ref o) => {
                vec![periodic_halo_job(n, r, e, all26, go, o)]
            }
        }
    }

    fn run(&self) {
        match *self {
            HaloStep::RoundTrip((n, r, e, all26), go, po, ref o) => {
                fused_round_trip(n, r, e, all26, go, po, o)
            }
            HaloStep::Periodic((n, r, e, all26), go, ref o) => periodic_halo(n, r, e, all26, go, o),
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn fused_flat_launches_are_one_thread_per_word() {
    let ctx = ctx();
    // The x faces of a radius-3 halo of doubles: 24-byte blocks, 3 words of 8 bytes each.
    let (send, _) = halo(64, 3, 8, false);
    let packer = FusedPacker::new(&ctx, &send).unwrap();
    let words: Vec<u64> = send
        .iter()
        .zip(packer.words(256, 256))
        .map(|(p, w)| p.packed_size() / u64::from(w))
        .collect();
    // Auto: every region's full grid of 256-thread blocks.
    let full: u64 = words.iter().map(|w| w.div_ceil(256)).sum();
    assert_eq!(packer.launch_dims().unwrap(), (full as u32, 256));
    // One wave: no more blocks than the full grid (this small halo fits in one wave), at least
    // one per region, still 256 threads (the default limit of 512 is not used).
    let one = GpuOptions::default().with_grid(GridCap::Waves(1));
    let p = FusedPacker::with_regions(&ctx, fused::layout(&send).unwrap(), &one).unwrap();
    let (grid, block) = p.launch_dims().unwrap();
    assert_eq!(block, 256);
    assert!(
        u64::from(grid) <= full && grid >= send.len() as u32,
        "{grid}"
    );
    // The fused copier too, each region copied to a disjoint place far above the field.
    let regions: Vec<CopyRegion> = send
        .iter()
        .map(|s| CopyRegion::new(s.clone(), s.start() + (1 << 30)))
        .collect();
    let copier = FusedCopier::new(&ctx, regions, &GpuOptions::default()).unwrap();
    assert_eq!(copier.launch_dims().unwrap(), (full as u32, 256));
}

#[test]
#[ignore = "needs a CUDA device"]
fn fused_prepare_compiles_the_variant_a_launch_uses() {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    // 8-byte blocks at 64-byte strides and 16-byte blocks at 32: 8-byte words in aligned
    // buffers, 4-byte words when the strided view starts 4 bytes into its allocation.
    let plans = [
        StridedBlock::new(0, 8, vec![100], vec![64]).unwrap(),
        StridedBlock::new(8, 16, vec![10], vec![32]).unwrap(),
    ];
    let packer = FusedPacker::new(&ctx, &plans).unwrap();
    let (aligned, odd) = (packer.words(256, 256), packer.words(4, 0));
    assert_eq!((aligned.clone(), odd.clone()), (vec![8, 8], vec![4, 4]));
    assert_eq!(packer.compiled_words(), vec![aligned.clone()]);
    packer.prepare(&odd).unwrap();
    assert_eq!(packer.compiled_words(), vec![odd.clone(), aligned.clone()]);
    // The launch on a view at +4 uses the prepared variant: nothing new is compiled.
    let extent = packer.extent_end() as usize;
    let packed = packer.packed_size() as usize;
    let host = pattern(4 + extent, 3);
    let d_grid = stream.clone_htod(&host).unwrap();
    let mut d_packed = stream.alloc_zeros::<u8>(packed).unwrap();
    packer
        .pack(&stream, &d_grid.slice(4..4 + extent), &mut d_packed)
        .unwrap();
    assert_eq!(packer.compiled_words(), vec![odd, aligned]);
    let mut want = vec![0u8; packed];
    fused::pack(packer.regions(), &host[4..], &mut want).unwrap();
    assert_eq!(stream.clone_dtoh(&d_packed).unwrap(), want);
    // One word size per region, each suiting its region.
    for bad in [&[8u32][..], &[16, 16], &[3, 8]] {
        let r = packer.prepare(bad);
        assert!(
            matches!(r, Err(Error::InvalidArgument { .. })),
            "{bad:?}: {r:?}"
        );
    }

    // The copier: the same plans copied within one buffer, past every source (which end by
    // 6,344), to destinations 4 bytes off a 16-byte boundary, disjoint from each other;
    // 4-byte words in an aligned buffer, 1-byte words in a view at +1.
    let regions = vec![
        CopyRegion::new(plans[0].clone(), 8196),
        CopyRegion::new(plans[1].clone(), 16_388),
    ];
    let copier = FusedCopier::new(&ctx, regions, &GpuOptions::default()).unwrap();
    let (aligned, odd) = (copier.words(256, 256), copier.words(1, 1));
    assert_eq!((aligned.clone(), odd.clone()), (vec![4, 4], vec![1, 1]));
    assert_eq!(copier.compiled_words(), vec![aligned.clone()]);
    copier.prepare(&odd).unwrap();
    assert_eq!(copier.compiled_words(), vec![odd.clone(), aligned.clone()]);
    let len = copier.extent_end() as usize;
    let host = pattern(1 + len, 4);
    let mut d = stream.clone_htod(&host).unwrap();
    copier
        .copy_in_place(&stream, &mut d.slice_mut(1..1 + len))
        .unwrap();
    assert_eq!(copier.compiled_words(), vec![odd, aligned]);
    let mut want = host.clone();
    fused::copy_in_place(copier.regions(), &mut want[1..]).unwrap();
    assert_eq!(stream.clone_dtoh(&d).unwrap(), want);
    for bad in [&[4u32][..], &[16, 4], &[8, 8]] {
        let r = copier.prepare(bad);
        assert!(
            matches!(r, Err(Error::InvalidArgument { .. })),
            "{bad:?}: {r:?}"
        );
    }
    stream.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Negative strides: plans with reversed dimensions, packed in the layout's (MPI_Pack's) order.

/// Layouts with negative strides, each displaced so that it starts at byte 0 or later: MPI
/// vectors and hvectors with negative strides, nests of them, reversed array views, and random
/// plans with reversed dimensions (1-D to 4-D, every word size, unaligned starts, beyond 65,535
/// in y and z). Each comes with the independent oracle's packed bytes' source, the tree walk of
/// [`cpu::pack_naive`], where it is a type.
fn negative_cases() -> Vec<(String, Option<Type>, StridedBlock)> {
    let mut out = Vec::new();
    let mut typed = |name: &str, t: Type| {
        let lo = t.byte_range().unwrap().map_or(0, |r| r.start);
        let placed = t
            .displaced((-lo) as i64 + 3 * (out.len() as i64 % 2))
            .unwrap();
        let plan = StridedBlock::from_type(&placed).unwrap();
        assert!(plan.has_reversed(), "{name}: {plan:?}");
        out.push((name.to_string(), Some(placed), plan));
    };
    typed("vector(1000, 1, -2) f64", vector(1000, 1, -2, 8).unwrap());
    typed("vector(300, 3, -5) f32", vector(300, 3, -5, 4).unwrap());
    typed("vector(70000, 1, -3) u8", vector(70_000, 1, -3, 1).unwrap());
    typed("vector(9, 2, -7) 12-byte", vector(9, 2, -7, 12).unwrap());
    typed(
        "hvector(64, 2, -1000) of vector(5, 1, 6) f64",
        hvector(64, 2, -1000, vector(5, 1, 6, 8).unwrap()).unwrap(),
    );
    typed(
        "hvector(40, 1, 4096) of vector(100, 1, -4) i32",
        hvector(40, 1, 4096, vector(100, 1, -4, 4).unwrap()).unwrap(),
    );
    typed(
        "hvector(30, 1, -50000) of hvector(3, 1, -9000) of vector(200, 1, -2) f64",
        hvector(
            30,
            1,
            -50_000,
            hvector(3, 1, -9_000, vector(200, 1, -2, 8).unwrap()).unwrap(),
        )
        .unwrap(),
    );
    typed(
        "reversed 2-D view [::-1, ::2] of 64 x 64 f64",
        from_strides(&[64, 32], &[-64, 2], 8).unwrap(),
    );
    typed(
        "reversed 3-D view [:, ::-1, :] of 20 x 30 x 17 u16",
        from_strides(&[20, 30, 17], &[30 * 17, -17, 1], 2).unwrap(),
    );
    let mut rng = Rng(0x0ee9_a71e_57d1);
    let mut i = 0usize;
    while out.len() < 120 {
        let unit = [1u64, 2, 4, 8, 16][i % 5];
        let ndims = 1 + i % 4;
        let big = (i % 11 == 0).then(|| rng.below(ndims as u64) as usize);
        i += 1;
        let Some(p) = random_plan(&mut rng, unit, ndims, big) else {
            continue;
        };
        let reversed: Vec<bool> = (0..p.ndims()).map(|_| rng.below(2) == 0).collect();
        let r = StridedBlock::with_reversed(
            p.start(),
            p.block_len(),
            p.counts().to_vec(),
            p.strides().to_vec(),
            reversed,
        )
        .unwrap();
        if r.has_reversed() {
            out.push((format!("random reversed plan {i}"), None, r));
        }
    }
    out
}

/// The negative-stride layouts as pool cases, views at odd offsets now and then.
fn negative_pool() -> Vec<(String, Option<Type>, Case)> {
    negative_cases()
        .into_iter()
        .enumerate()
        .map(|(i, (name, t, plan))| {
            let case = Case {
                index: 20_000 + i,
                plan,
                strided_off: [0, 1, 8, 3][i % 4],
                packed_off: [0, 4, 2, 16, 1][i % 5],
                tail: [0, 7][i % 2],
            };
            (name, t, case)
        })
        .collect()
}

/// On the host: every negative-stride case's plan packs what the tree walk of its type packs
/// (the oracle the GPU results are compared with through `cpu::pack`), block 0 first.
#[test]
fn negative_stride_cases_pack_in_layout_order() {
    let cases = negative_pool();
    assert!(cases.len() >= 100);
    assert!(cases
        .iter()
        .any(|(_, _, c)| c.plan.counts().iter().any(|&n| n > 65_535)));
    for (name, t, c) in &cases {
        let src = pattern(c.plan.extent_end() as usize, c.index as u64);
        let mut planned = vec![0u8; c.plan.packed_size() as usize];
        cpu::pack(&c.plan, &src, &mut planned).unwrap();
        let origin = c.plan.origin() as usize;
        let first = c.plan.block_len() as usize;
        assert_eq!(planned[..first], src[origin..origin + first], "{name}");
        if let Some(t) = t {
            let mut naive = vec![0u8; planned.len()];
            cpu::pack_naive(t, &src, &mut naive).unwrap();
            assert!(planned == naive, "{name}: {}", first_diff(&planned, &naive));
        }
    }
}

/// `Packer` (safe and raw entry points, every launch option of the pool) on layouts with
/// negative strides: pack and unpack equal the CPU reference byte for byte, bytes outside the
/// layout untouched.
#[test]
#[ignore = "needs a CUDA device"]
fn negative_strides_pack_on_the_gpu_as_mpi_pack() {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let cases = negative_pool();
    warm(
        "negative strides",
        cases.iter().map(|(_, _, c)| pool_case_job(c)).collect(),
    );
    let t0 = Instant::now();
    let mut failures = Vec::new();
    for (name, _, c) in &cases {
        if let Err(e) = run_case(&ctx, &stream, c) {
            failures.push(format!("{name}: {e}"));
        }
        if let Err(e) = run_raw_case(&ctx, &stream, c) {
            failures.push(format!("{name} (raw): {e}"));
        }
    }
    ran("negative strides", t0);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `FusedPacker` and `FusedCopier` with regions that have reversed dimensions beside forward
/// ones: one launch packs, unpacks and copies what the CPU references do.
#[test]
#[ignore = "needs a CUDA device"]
fn negative_strides_in_fused_launches() {
    let ctx = ctx();
    let stream = ctx.new_stream().unwrap();
    let opts = GpuOptions::default();
    // Regions side by side in one strided buffer: each case's plan moved past the previous.
    let mut plans = Vec::new();
    let mut at = 0u64;
    for (_, _, p) in negative_cases().into_iter().take(12) {
        if p.packed_size() > 1 << 20 {
            continue;
        }
        let moved = StridedBlock::with_reversed(
            at + p.start() % 16,
            p.block_len(),
            p.counts().to_vec(),
            p.strides().to_vec(),
            p.reversed().to_vec(),
        )
        .unwrap();
        at = moved.extent_end().next_multiple_of(16);
        plans.push(moved);
        plans.push(StridedBlock::new(at, 24, vec![10], vec![40]).unwrap());
        at += 400;
    }
    let extent = at as usize;
    let packer = FusedPacker::with_regions(&ctx, fused::layout(&plans).unwrap(), &opts).unwrap();
    let host = pattern(extent, 4242);
    let d_src = stream.clone_htod(&host).unwrap();
    let packed = packer.packed_size() as usize;
    let mut d_packed = stream.clone_htod(&vec![0xA5u8; packed]).unwrap();
    packer.pack(&stream, &d_src, &mut d_packed).unwrap();
    let got = stream.clone_dtoh(&d_packed).unwrap();
    let mut want = vec![0xA5u8; packed];
    fused::pack(packer.regions(), &host, &mut want).unwrap();
    assert!(got == want, "fused pack: {}", first_diff(&got, &want));
    let mut d_back = stream.clone_htod(&vec![0x5Au8; extent]).unwrap();
    packer.unpack(&stream, &d_packed, &mut d_back).unwrap();
    let got = stream.clone_dtoh(&d_back).unwrap();
    let mut want = vec![0x5Au8; extent];
    fused::unpack(packer.regions(), &fused_want(&packer, &host), &mut want).unwrap();
    assert!(got == want, "fused unpack: {}", first_diff(&got, &want));

    // Copies: each region to the same shape in a second buffer, 8 bytes further on.
    let regions: Vec<CopyRegion> = plans
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| CopyRegion::new(p.clone(), p.start() + 8))
        .collect();
    let copier = FusedCopier::new(&ctx, regions.clone(), &opts).unwrap();
    let dst_len = copier.dst_extent_end() as usize;
    let mut d_dst = stream.clone_htod(&vec![0xEEu8; dst_len]).unwrap();
    copier.copy(&stream, &d_src, &mut d_dst).unwrap();
    let got = stream.clone_dtoh(&d_dst).unwrap();
    let mut want = vec![0xEEu8; dst_len];
    fused::copy(&regions, &host, &mut want).unwrap();
    assert!(got == want, "fused copy: {}", first_diff(&got, &want));
    println!(
        "negative strides: {} fused regions packed, unpacked and copied as the CPU references",
        plans.len()
    );
}

/// The packed buffer a fused pack of `host` makes, on the CPU.
fn fused_want(packer: &FusedPacker, host: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; packer.packed_size() as usize];
    fused::pack(packer.regions(), host, &mut out).unwrap();
    out
}
