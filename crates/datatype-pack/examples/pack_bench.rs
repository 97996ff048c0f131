//! GPU pack throughput of the generated kernels against copy baselines, on one GPU (no MPI).
//!
//! ```text
//! cargo run --release -p datatype-pack --example pack_bench [-- --quick] [--sweep | --sweep-only]
//! ```
//!
//! For each layout: our pack (the generated kernel through [`Packer`], or one fused launch
//! through [`FusedPacker`]) against
//! (a) `cuMemcpyDtoDAsync` of the same number of bytes (the ceiling),
//! (b) `cuMemcpy2DAsync` where the layout is 2-D (one dimension over a block),
//! (c) one `cuMemcpyDtoDAsync` per block (what MPI libraries do); above 2,000 blocks only the
//!     first 2,000 are timed and the time is scaled by the block count (marked `~`),
//! (d) a naive kernel: one thread per word, the word's position found by division, the layout
//!     passed at run time.
//! GB/s counts the packed bytes once (as the D2D copy counts the bytes copied once). Every time
//! is the median of 25 timed iterations after 3 warm-up iterations (5 iterations after one
//! warm-up when one run takes over 20 ms), each iteration measured with CUDA events; iterations
//! of small layouts run several back-to-back operations (`reps`) and report the time per
//! operation. Then NVRTC compile times: cold (first compile of the process),
//! warm (a new source), in-memory cache hit and on-disk cache hit.
//!
//! The "totals" of the vector rows are packed bytes: 64 MiB of 1-byte blocks at stride 512
//! spans 32 GiB of source, which the benchmark allocates once (use `--quick` on smaller GPUs).

use std::sync::Arc;
use std::time::Instant;

use datatype_pack::construct::{subarray, vector, Order};
use datatype_pack::gpu::cudarc::driver::sys::{self, CUevent_flags, CUmemorytype};
use datatype_pack::gpu::cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use datatype_pack::gpu::cudarc::nvrtc::Ptx;
use datatype_pack::gpu::{self, FusedPacker, GpuOptions, GridCap, Packer};
use datatype_pack::{codegen, fused, StridedBlock};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

const ITERS: usize = 25;
const WARMUP: usize = 3;
const PER_BLOCK_SUBSET: u64 = 2000;
const SLOW_MS: f64 = 20.0;
const SLOW_ITERS: usize = 5;

fn cu(r: sys::CUresult) -> AnyResult<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("CUDA error {r:?}").into())
    }
}

/// Median time of one operation, in milliseconds: `f` enqueues `reps` operations. A measurement
/// whose first run takes more than [`SLOW_MS`] uses [`SLOW_ITERS`] iterations and no further
/// warm-up (per-row copies of tiny blocks through the copy engine can be that slow).
fn time_ms(
    ctx: &Arc<CudaContext>,
    stream: &CudaStream,
    reps: usize,
    mut f: impl FnMut() -> AnyResult<()>,
) -> AnyResult<f64> {
    let once = |f: &mut dyn FnMut() -> AnyResult<()>| -> AnyResult<f64> {
        let a = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let b = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        a.record(stream)?;
        f()?;
        b.record(stream)?;
        b.synchronize()?;
        Ok(f64::from(a.elapsed_ms(&b)?) / reps as f64)
    };
    let first = once(&mut f)?;
    let iters = if first * reps as f64 > SLOW_MS {
        SLOW_ITERS
    } else {
        for _ in 1..WARMUP {
            f()?;
        }
        ITERS
    };
    let mut ts = Vec::with_capacity(iters);
    for _ in 0..iters {
        ts.push(once(&mut f)?);
    }
    ts.sort_by(f64::total_cmp);
    Ok(ts[iters / 2])
}

/// The naive kernels: one thread per word, layout passed at run time, up to two dimensions.
fn naive_source() -> String {
    let mut s = String::from(
        "struct alignas(16) w16 { unsigned int a, b, c, d; };\n\
         typedef unsigned long long u64;\n",
    );
    for (w, t) in [
        (1, "unsigned char"),
        (2, "unsigned short"),
        (4, "unsigned int"),
        (8, "unsigned long long"),
        (16, "w16"),
    ] {
        s.push_str(&format!(
            "extern \"C\" __global__ void naive_pack_{w}(const unsigned char* src, unsigned char* dst,\n\
             u64 start, u64 words, u64 c0, u64 s0, u64 s1, u64 total) {{\n\
             u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x;\n\
             if (i >= total) return;\n\
             u64 x = i % words, b = i / words;\n\
             u64 off = start + (b / c0) * s1 + (b % c0) * s0 + x * {w};\n\
             *({t}*)(dst + i * {w}) = *(const {t}*)(src + off);\n}}\n"
        ));
    }
    s
}

struct Naive {
    funcs: Vec<CudaFunction>,
}

impl Naive {
    fn new(ctx: &Arc<CudaContext>) -> AnyResult<Self> {
        let arch = gpu::device_arch(ctx)?;
        let img = gpu::compile(&naive_source(), &arch, &[])?;
        let m = ctx.load_module(Ptx::from_binary(img.to_vec()))?;
        let funcs = [1, 2, 4, 8, 16]
            .iter()
            .map(|w| m.load_function(&format!("naive_pack_{w}")))
            .collect::<Result<_, _>>()?;
        Ok(Self { funcs })
    }

    /// Enqueues the naive pack of `plan` (at most 2 dimensions) in words of `w` bytes.
    fn launch(
        &self,
        stream: &CudaStream,
        plan: &StridedBlock,
        w: u32,
        src: u64,
        dst: u64,
    ) -> AnyResult<()> {
        let f = &self.funcs[w.trailing_zeros() as usize];
        let words = plan.block_len() / u64::from(w);
        let c0 = plan.counts().first().copied().unwrap_or(1);
        let s0 = plan.strides().first().copied().unwrap_or(0);
        let s1 = plan.strides().get(1).copied().unwrap_or(0);
        let total = plan.packed_size() / u64::from(w);
        let start = plan.start();
        let cfg = LaunchConfig {
            grid_dim: (u32::try_from(total.div_ceil(256))?, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(f);
        b.arg(&src)
            .arg(&dst)
            .arg(&start)
            .arg(&words)
            .arg(&c0)
            .arg(&s0)
            .arg(&s1)
            .arg(&total);
        // SAFETY: the arguments match the kernel's signature (two pointers, six u64); the
        // caller's buffers hold the plan's extent end and packed size, so every access is in
        // bounds; the grid fits grid x (checked by try_from above).
        unsafe { b.launch(cfg) }?;
        Ok(())
    }
}

/// Byte offsets of the blocks of `plan`, in packing order, at most `limit` of them.
fn block_offsets(plan: &StridedBlock, limit: u64) -> Vec<u64> {
    let n = plan.num_blocks().min(limit);
    (0..n)
        .map(|mut b| {
            let mut off = plan.start();
            for (&c, &s) in plan.counts().iter().zip(plan.strides()) {
                off += (b % c) * s;
                b /= c;
            }
            off
        })
        .collect()
}

struct Row {
    name: String,
    packed: u64,
    word: u32,
    ours_ms: f64,
    d2d_ms: f64,
    copy2d_ms: Option<f64>,
    per_block_ms: Option<(f64, bool)>,
    naive_ms: Option<f64>,
    extra: Vec<(String, f64)>,
}

fn gbs(bytes: u64, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e-3) / 1e9
}

fn print_header() {
    println!(
        "| layout | packed bytes | W | ours us | ours GB/s | % of D2D | D2D GB/s | 2D GB/s | per-block GB/s | naive GB/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
}

fn print_row(r: &Row) {
    let opt =
        |v: Option<f64>| v.map_or("n/a".to_string(), |ms| format!("{:.1}", gbs(r.packed, ms)));
    let pb = r
        .per_block_ms
        .map_or("n/a".to_string(), |(ms, extrapolated)| {
            format!(
                "{}{:.2}",
                if extrapolated { "~" } else { "" },
                gbs(r.packed, ms)
            )
        });
    println!(
        "| {} | {} | {} | {:.2} | {:.1} | {:.0}% | {:.1} | {} | {} | {} |",
        r.name,
        r.packed,
        r.word,
        r.ours_ms * 1e3,
        gbs(r.packed, r.ours_ms),
        100.0 * r.d2d_ms / r.ours_ms,
        gbs(r.packed, r.d2d_ms),
        opt(r.copy2d_ms),
        pb,
        opt(r.naive_ms),
    );
    for (what, ms) in &r.extra {
        println!(
            "| {} | {} | {} | {:.2} | {:.1} | {:.0}% | | | | |",
            what,
            r.packed,
            r.word,
            ms * 1e3,
            gbs(r.packed, *ms),
            100.0 * r.d2d_ms / ms
        );
    }
}

struct Bench {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    src: CudaSlice<u8>,
    dst: CudaSlice<u8>,
    naive: Naive,
}

impl Bench {
    fn reps(bytes: u64) -> usize {
        ((4u64 << 20) / bytes.max(1)).clamp(1, 64) as usize
    }

    fn d2d(&self, bytes: u64) -> AnyResult<f64> {
        let (s, _g1) = self.src.device_ptr(&self.stream);
        let (d, _g2) = self.dst.device_ptr(&self.stream);
        let reps = Self::reps(bytes);
        let st = self.stream.cu_stream();
        time_ms(&self.ctx, &self.stream, reps, || {
            for _ in 0..reps {
                // SAFETY: both allocations hold at least `bytes` bytes (checked by the caller).
                cu(unsafe { sys::cuMemcpyDtoDAsync_v2(d, s, bytes as usize, st) })?;
            }
            Ok(())
        })
    }

    fn copy2d(&self, plan: &StridedBlock) -> AnyResult<Option<f64>> {
        if plan.ndims() != 1 {
            return Ok(None);
        }
        let (s, _g1) = self.src.device_ptr(&self.stream);
        let (d, _g2) = self.dst.device_ptr(&self.stream);
        let p = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: s + plan.start(),
            srcArray: std::ptr::null_mut(),
            srcPitch: plan.strides()[0] as usize,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: d,
            dstArray: std::ptr::null_mut(),
            dstPitch: plan.block_len() as usize,
            WidthInBytes: plan.block_len() as usize,
            Height: plan.counts()[0] as usize,
        };
        let reps = Self::reps(plan.packed_size());
        let st = self.stream.cu_stream();
        // A pitch the driver refuses (beyond its limit) is reported as n/a.
        // SAFETY: the copy stays inside the source (extent end) and destination (packed size)
        // allocations, as checked by the caller.
        if unsafe { sys::cuMemcpy2DAsync_v2(&p, st) } != sys::CUresult::CUDA_SUCCESS {
            return Ok(None);
        }
        time_ms(&self.ctx, &self.stream, reps, || {
            for _ in 0..reps {
                // SAFETY: as above.
                cu(unsafe { sys::cuMemcpy2DAsync_v2(&p, st) })?;
            }
            Ok(())
        })
        .map(Some)
    }

    /// Time of one cuMemcpyDtoDAsync per block, and whether it was extrapolated.
    fn per_block(&self, plans: &[StridedBlock]) -> AnyResult<(f64, bool)> {
        let (s, _g1) = self.src.device_ptr(&self.stream);
        let (d, _g2) = self.dst.device_ptr(&self.stream);
        let total: u64 = plans.iter().map(StridedBlock::num_blocks).sum();
        let mut copies = Vec::new();
        let mut packed = 0u64;
        for p in plans {
            let left = PER_BLOCK_SUBSET.saturating_sub(copies.len() as u64);
            for off in block_offsets(p, left) {
                copies.push((s + off, d + packed, p.block_len() as usize));
                packed += p.block_len();
            }
        }
        let st = self.stream.cu_stream();
        let ms = time_ms(&self.ctx, &self.stream, 1, || {
            for &(from, to, n) in &copies {
                // SAFETY: each block lies inside the source allocation and its packed place
                // inside the destination allocation (checked by the caller).
                cu(unsafe { sys::cuMemcpyDtoDAsync_v2(to, from, n, st) })?;
            }
            Ok(())
        })?;
        let timed = copies.len() as u64;
        Ok((ms * total as f64 / timed.max(1) as f64, timed < total))
    }

    fn naive(&self, plans: &[StridedBlock], words: &[u32]) -> AnyResult<Option<f64>> {
        if plans.iter().any(|p| p.ndims() > 2) {
            return Ok(None);
        }
        let (s, _g1) = self.src.device_ptr(&self.stream);
        let (d, _g2) = self.dst.device_ptr(&self.stream);
        let bytes: u64 = plans.iter().map(StridedBlock::packed_size).sum();
        let reps = Self::reps(bytes);
        time_ms(&self.ctx, &self.stream, reps, || {
            for _ in 0..reps {
                let mut at = 0;
                for (p, &w) in plans.iter().zip(words) {
                    self.naive.launch(&self.stream, p, w, s, d + at)?;
                    at += p.packed_size().next_multiple_of(16);
                }
            }
            Ok(())
        })
        .map(Some)
    }

    /// Time of our pack of `plan` with `opts`.
    fn ours(&mut self, plan: &StridedBlock, opts: &GpuOptions) -> AnyResult<f64> {
        assert!(plan.extent_end() <= self.src.len() as u64);
        assert!(plan.packed_size() <= self.dst.len() as u64);
        let packer = Packer::with_options(&self.ctx, plan, opts)?;
        let reps = Self::reps(plan.packed_size());
        let src = self.src.slice(0..plan.extent_end() as usize);
        let mut dst = self.dst.slice_mut(0..plan.packed_size() as usize);
        time_ms(&self.ctx, &self.stream, reps, || {
            for _ in 0..reps {
                packer.pack(&self.stream, &src, &mut dst)?;
            }
            Ok(())
        })
    }

    /// Time of our fused pack of `plans` with `opts`.
    fn ours_fused(&mut self, plans: &[StridedBlock], opts: &GpuOptions) -> AnyResult<f64> {
        let fp = FusedPacker::with_regions(&self.ctx, fused::layout(plans)?, opts)?;
        assert!(fp.extent_end() <= self.src.len() as u64);
        assert!(fp.packed_size() <= self.dst.len() as u64);
        let reps = Self::reps(fp.packed_size());
        let src = self.src.slice(0..fp.extent_end() as usize);
        let mut dst = self.dst.slice_mut(0..fp.packed_size() as usize);
        time_ms(&self.ctx, &self.stream, reps, || {
            for _ in 0..reps {
                fp.pack(&self.stream, &src, &mut dst)?;
            }
            Ok(())
        })
    }

    fn plan_row(&mut self, name: String, plan: &StridedBlock) -> AnyResult<Row> {
        let word = plan.word_size(256, 256);
        let ours_ms = self.ours(plan, &GpuOptions::default())?;
        Ok(Row {
            name,
            packed: plan.packed_size(),
            word,
            ours_ms,
            d2d_ms: self.d2d(plan.packed_size())?,
            copy2d_ms: self.copy2d(plan)?,
            per_block_ms: Some(self.per_block(std::slice::from_ref(plan))?),
            naive_ms: self.naive(std::slice::from_ref(plan), &[word])?,
            extra: Vec::new(),
        })
    }

    fn halo_row(&mut self, n: u64, r: u64) -> AnyResult<Row> {
        let sizes = [n; 3];
        let inner = n - 2 * r;
        let mut faces = Vec::new();
        for axis in 0..3 {
            for low in [true, false] {
                let mut starts = [r; 3];
                let mut subs = [inner; 3];
                starts[axis] = if low { r } else { n - 2 * r };
                subs[axis] = r;
                faces.push(StridedBlock::from_type(&subarray(
                    &sizes,
                    &subs,
                    &starts,
                    Order::C,
                    8,
                )?)?);
            }
        }
        let fp = FusedPacker::new(&self.ctx, &faces)?;
        assert!(fp.extent_end() <= self.src.len() as u64);
        assert!(fp.packed_size() <= self.dst.len() as u64);
        let packed: u64 = faces.iter().map(StridedBlock::packed_size).sum();
        let reps = Self::reps(packed);
        let src = self.src.slice(0..fp.extent_end() as usize);
        let mut dst = self.dst.slice_mut(0..fp.packed_size() as usize);
        let ours_ms = time_ms(&self.ctx, &self.stream, reps, || {
            for _ in 0..reps {
                fp.pack(&self.stream, &src, &mut dst)?;
            }
            Ok(())
        })?;
        // The same faces as six separate launches.
        let packers = faces
            .iter()
            .map(|p| Packer::new(&self.ctx, p))
            .collect::<Result<Vec<_>, _>>()?;
        let regions = fp.regions().to_vec();
        let separate_ms = time_ms(&self.ctx, &self.stream, reps, || {
            for _ in 0..reps {
                for (p, reg) in packers.iter().zip(&regions) {
                    let range = reg.packed_range();
                    let mut part = dst.slice_mut(range.start as usize..range.end as usize);
                    p.pack(&self.stream, &src, &mut part)?;
                }
            }
            Ok(())
        })?;
        let one_wave_ms =
            self.ours_fused(&faces, &GpuOptions::default().with_grid(GridCap::Waves(1)))?;
        let words: Vec<u32> = faces.iter().map(|p| p.word_size(256, 256)).collect();
        Ok(Row {
            name: format!("6 faces of {n}^3 f64, radius {r} (fused, 1 launch)"),
            packed,
            word: *words.iter().min().unwrap_or(&1),
            ours_ms,
            d2d_ms: self.d2d(packed)?,
            copy2d_ms: None,
            per_block_ms: Some(self.per_block(&faces)?),
            naive_ms: self.naive(&faces, &words)?,
            extra: vec![
                (
                    "same 6 faces, 6 separate Packer launches".to_string(),
                    separate_ms,
                ),
                (
                    "same 6 faces, fused, GridCap::Waves(1)".to_string(),
                    one_wave_ms,
                ),
            ],
        })
    }
}

/// The 6 send faces of an `n`^3 grid of f64 with halo radius `r`: slabs of thickness `r` at the
/// boundary of the interior `[r, n - r)^3`.
fn halo_faces(n: u64, r: u64) -> AnyResult<Vec<StridedBlock>> {
    let sizes = [n; 3];
    let inner = n - 2 * r;
    let mut faces = Vec::new();
    for axis in 0..3 {
        for low in [true, false] {
            let mut starts = [r; 3];
            let mut subs = [inner; 3];
            starts[axis] = if low { r } else { n - 2 * r };
            subs[axis] = r;
            faces.push(StridedBlock::from_type(&subarray(
                &sizes,
                &subs,
                &starts,
                Order::C,
                8,
            )?)?);
        }
    }
    Ok(faces)
}

/// Our pack under several launch configurations (threads per block x grid cap in waves).
fn sweep(b: &mut Bench, quick: bool) -> AnyResult<()> {
    let total: u64 = if quick { 1 << 20 } else { 64 << 20 };
    let caps = [
        ("full", GridCap::Full),
        ("1w", GridCap::Waves(1)),
        ("4w", GridCap::Waves(4)),
        ("16w", GridCap::Waves(16)),
        ("auto", GridCap::Auto),
    ];
    let configs: Vec<(u32, &str, GridCap)> = [256u32, 512, 1024]
        .iter()
        .flat_map(|&t| caps.map(move |(n, c)| (t, n, c)))
        .collect();
    println!(
        "Launch configuration sweep: ours GB/s by threads per block / grid (full = the whole \
         LaunchShape grid, Nw = at most N waves, auto = GridCap::Auto)\n"
    );
    let mut head = String::from("| layout |");
    let mut rule = String::from("|---|");
    for (t, n, _) in &configs {
        head.push_str(&format!(" {t}/{n} |"));
        rule.push_str("---:|");
    }
    println!("{head}\n{rule}");
    let mut rows: Vec<(String, Vec<StridedBlock>)> = Vec::new();
    for block in [1u64, 4, 6, 8, 16, 24, 64, 256] {
        let plan = StridedBlock::from_type(&vector(total / block, block, 512, 1)?)?;
        rows.push((format!("{block} B blocks, {} MiB", total >> 20), vec![plan]));
    }
    rows.push((
        "8 B blocks, 1 MiB".to_string(),
        vec![StridedBlock::from_type(&vector((1 << 20) / 8, 8, 512, 1)?)?],
    ));
    let n = if quick { 128 } else { 512 };
    let faces = halo_faces(n, 3)?;
    for (i, f) in faces.iter().enumerate() {
        rows.push((format!("halo face {i} of {n}^3 alone"), vec![f.clone()]));
    }
    rows.push((format!("6 faces of {n}^3 fused"), faces));
    for (name, plans) in &rows {
        let bytes: u64 = plans.iter().map(StridedBlock::packed_size).sum();
        let mut line = format!("| {name} |");
        for &(t, _, cap) in &configs {
            let opts = GpuOptions::default()
                .with_max_threads_per_block(t)
                .with_grid(cap);
            let ms = if plans.len() == 1 {
                b.ours(&plans[0], &opts)?
            } else {
                b.ours_fused(plans, &opts)?
            };
            line.push_str(&format!(" {:.1} |", gbs(bytes, ms)));
        }
        println!("{line}");
    }
    println!();
    Ok(())
}

fn compile_times(ctx: &Arc<CudaContext>) -> AnyResult<()> {
    let arch = gpu::device_arch(ctx)?;
    let p1 = StridedBlock::new(0, 8, vec![1 << 20], vec![512])?;
    let p2 = StridedBlock::new(0, 24, vec![506, 506], vec![4096, 2 << 20])?;
    let k1 = codegen::generate(&p1, 8)?;
    let k2 = codegen::generate(&p2, 8)?;
    let t = Instant::now();
    gpu::compile(k1.source(), &arch, &[])?;
    let cold = t.elapsed();
    let t = Instant::now();
    gpu::compile(k2.source(), &arch, &[])?;
    let warm = t.elapsed();
    let t = Instant::now();
    gpu::compile(k2.source(), &arch, &[])?;
    let hit = t.elapsed();
    let dir = std::env::temp_dir().join(format!("pack-bench-cache-{}", std::process::id()));
    std::env::set_var(gpu::CACHE_ENV, &dir);
    let k3 = codegen::generate(
        &StridedBlock::new(4, 12, vec![1000, 7], vec![16, 20_000])?,
        4,
    )?;
    gpu::compile(k3.source(), &arch, &[])?;
    gpu::clear_memory_cache();
    let t = Instant::now();
    gpu::compile(k3.source(), &arch, &[])?;
    let disk = t.elapsed();
    std::env::remove_var(gpu::CACHE_ENV);
    let _ = std::fs::remove_dir_all(&dir);
    let t = Instant::now();
    let p4 = StridedBlock::new(0, 40, vec![3000, 9], vec![48, 200_000])?;
    let _packer = Packer::new(ctx, &p4)?;
    let packer_new = t.elapsed();
    println!("NVRTC compile times ({arch}):");
    println!("| what | ms |\n|---|---:|");
    println!(
        "| cold: first compile in the process (loads NVRTC) | {:.2} |",
        cold.as_secs_f64() * 1e3
    );
    println!("| warm: a new source | {:.2} |", warm.as_secs_f64() * 1e3);
    println!("| cached: in-memory hit | {:.4} |", hit.as_secs_f64() * 1e3);
    println!(
        "| cached: on-disk hit (memory cache cleared) | {:.3} |",
        disk.as_secs_f64() * 1e3
    );
    println!(
        "| Packer::new of a new plan (compile + module load) | {:.2} |",
        packer_new.as_secs_f64() * 1e3
    );
    println!();
    Ok(())
}

fn main() -> AnyResult<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let sweep_only = std::env::args().any(|a| a == "--sweep-only");
    let with_sweep = sweep_only || std::env::args().any(|a| a == "--sweep");
    let ctx = gpu::context(0)?;
    println!(
        "device: {} (compute capability {:?}), NVRTC {:?}",
        ctx.name()?,
        ctx.compute_capability()?,
        gpu::nvrtc_version()?
    );
    compile_times(&ctx)?;

    let stream = ctx.new_stream()?;
    let max_total: u64 = if quick { 1 << 20 } else { 64 << 20 };
    let src_len = (max_total * 512).max(1 << 30) as usize;
    let dst_len = (max_total.max(64 << 20) + (1 << 20)) as usize;
    let src = stream.alloc_zeros::<u8>(src_len)?;
    let dst = stream.alloc_zeros::<u8>(dst_len)?;
    let naive = Naive::new(&ctx)?;
    let mut b = Bench {
        ctx: ctx.clone(),
        stream,
        src,
        dst,
        naive,
    };
    if with_sweep {
        sweep(&mut b, quick)?;
    }
    if sweep_only {
        return Ok(());
    }
    println!(
        "Pack throughput: median of {ITERS} timed iterations after {WARMUP} warm-ups (of \
         {SLOW_ITERS} iterations after one warm-up where one run takes over {SLOW_MS} ms); GB/s = \
         packed bytes / time; `~` = per-block copies timed on the first {PER_BLOCK_SUBSET} \
         blocks and scaled to all blocks.\n"
    );
    print_header();
    let contiguous = StridedBlock::new(0, 4 << 20, vec![], vec![])?;
    print_row(&b.plan_row("contiguous 4 MiB".to_string(), &contiguous)?);
    for total in [1u64 << 10, 1 << 20, 64 << 20] {
        if total > max_total {
            continue;
        }
        for block in [1u64, 2, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256, 512] {
            let count = total / block;
            let plan = StridedBlock::from_type(&vector(count, block, 512, 1)?)?;
            let label = if total >= 1 << 20 {
                format!("{block} B blocks, stride 512, {} MiB", total >> 20)
            } else {
                format!("{block} B blocks, stride 512, {} KiB", total >> 10)
            };
            print_row(&b.plan_row(label, &plan)?);
        }
    }
    let n = if quick { 128 } else { 512 };
    print_row(&b.halo_row(n, 3)?);
    b.stream.synchronize()?;
    Ok(())
}
