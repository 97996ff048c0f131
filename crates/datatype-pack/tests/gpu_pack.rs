//! GPU pack and unpack against the CPU oracle, byte for byte, over a generated pool of layouts;
//! fused packing of halo faces; the error paths. Needs a CUDA device: run with `--ignored`.
//!
//! The pool has 1,200 layouts: 1-D to 5-D (0 to 4 stream dimensions over a dense block), every
//! word size, unaligned starts, unaligned buffer pointers (views at odd offsets into larger
//! allocations), counts beyond 65,535 in y, z and an in-kernel loop, empty layouts, and layouts
//! built through the constructors. Every byte of both allocations is compared, so bytes a
//! kernel must not touch are checked too. A third of the layouts run with the default launch
//! options, a third with 256-thread blocks and a one-wave grid, a third with 1024-thread blocks
//! and the full grid. `DTP_POOL_LIMIT=N` runs only the first N layouts
//! (for slow runs such as compute-sanitizer).
#![cfg(feature = "cuda")]

use std::sync::{Arc, OnceLock};

use datatype_pack::construct::{subarray, Order};
use datatype_pack::gpu::cudarc::driver::{CudaContext, CudaStream};
use datatype_pack::gpu::{self, FusedPacker, GpuOptions, GridCap, Packer};
use datatype_pack::{cpu, fused, Buffer, Error, StridedBlock};

const POOL: usize = 1200;
const CHUNKS: usize = 12;

fn ctx() -> Arc<CudaContext> {
    static CTX: OnceLock<Arc<CudaContext>> = OnceLock::new();
    CTX.get_or_init(|| gpu::context(0).expect("a CUDA device"))
        .clone()
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
    let err = |e: &dyn std::fmt::Display| format!("case {}: {e}", c.index);
    let plan = &c.plan;
    // The default options, and two other launch configurations on a third of the cases each.
    let opts = match c.index % 3 {
        0 => GpuOptions::default(),
        1 => GpuOptions::default()
            .with_max_threads_per_block(256)
            .with_grid(GridCap::Waves(1)),
        _ => GpuOptions::default()
            .with_max_threads_per_block(1024)
            .with_grid(GridCap::Full),
    };
    let packer = Packer::with_options(ctx, plan, &opts).map_err(|e| err(&e))?;
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

fn run_chunk(k: usize) {
    let ctx = ctx();
    let stream = ctx.new_stream().expect("a stream");
    let cases: Vec<Case> = pool().into_iter().skip(k).step_by(CHUNKS).collect();
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
    fused_round_trip(20, 3, 8, false, 0, 0, &d);
    fused_round_trip(64, 3, 8, false, 0, 0, &d);
    fused_round_trip(64, 3, 8, false, 0, 0, &one);
    fused_round_trip(64, 3, 8, false, 0, 0, &full);
    fused_round_trip(33, 2, 4, false, 4, 8, &d);
    fused_round_trip(17, 1, 1, false, 3, 1, &one);
}

#[test]
#[ignore = "needs a CUDA device"]
fn fused_halo_26_regions() {
    let d = GpuOptions::default();
    fused_round_trip(20, 3, 8, true, 0, 0, &d);
    fused_round_trip(31, 2, 16, true, 8, 4, &d);
    fused_round_trip(31, 2, 16, true, 8, 4, &d.clone().with_grid(GridCap::Full));
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
