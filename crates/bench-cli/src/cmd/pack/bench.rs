//! GPU pack throughput of the generated kernels against copy baselines, on one GPU (no MPI): the
//! measurement behind `collbench pack`.
//!
//! For each layout: our pack (the generated kernel through [`Packer`], flat or by axes as
//! [`LaunchShape::for_plan`](datatype_pack::LaunchShape::for_plan) picks, or one fused launch through [`FusedPacker`]) against
//! (a) `cuMemcpyDtoDAsync` of the same number of bytes (the ceiling),
//! (b) `cuMemcpy2DAsync` where the layout is 2-D (one dimension over a block),
//! (c) one `cuMemcpyDtoDAsync` per block (what MPI libraries do); above
//!     [`PER_BLOCK_SUBSET`] blocks only the first ones are timed and the time is scaled by the
//!     block count (marked `~`),
//! (d) a naive kernel: one thread per word, the word's position found by division, the layout
//!     passed at run time.
//!
//! Every column launches on raw device pointers, with no per-call event bookkeeping: ours
//! through [`Packer::pack_raw`] and [`FusedPacker::pack_raw`], the baselines through the driver.
//!
//! GB/s counts the packed bytes once (as the D2D copy counts the bytes copied once). Every time
//! is the median of [`ITERS`] timed iterations after [`WARMUP`] warm-up iterations
//! ([`SLOW_ITERS`] iterations after one warm-up when one run takes over [`SLOW_MS`] ms), each
//! iteration measured with CUDA events around [`MIN_REPS`] to [`MAX_REPS`] back-to-back
//! operations (about [`REP_BYTES`] bytes), reporting the time per operation. Every column but
//! the per-block copies captures an iteration's operations into a CUDA graph once and launches
//! that, so that small rows time the device's work rather than the host's launch rate; the
//! per-block copies are issued from the host one call at a time, as MPI libraries issue them. Then NVRTC compile times: cold (first compile
//! of the process), warm (a new source), in-memory cache hit and on-disk cache hit.
//!
//! Rows: contiguous 4 MiB; 2-D vectors of 1 to 512-byte blocks at stride 512 with totals of
//! 1 KiB, 1 MiB and 64 MiB (packed bytes: 64 MiB of 1-byte blocks spans 32 GiB of source, which
//! is allocated once; [`Options::quick`] stops at 1 MiB for smaller GPUs); the 6 faces of a
//! 512^3 f64 grid with radius 3 in one fused launch (128^3 with `quick`).
//!
//! Output is Markdown tables, one line at a time through a callback, so a caller prints as the
//! rows come.

use std::sync::Arc;
use std::time::Instant;

use collectives_core::cudarc::driver::sys::{self, CUevent_flags, CUmemorytype};
use collectives_core::cudarc::driver::{
    CudaContext, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, DriverError,
    LaunchConfig, PushKernelArg,
};
use collectives_core::cudarc::nvrtc::Ptx;

use datatype_pack::construct::{subarray, vector, Order};
use datatype_pack::gpu::{self, FusedPacker, GpuOptions, GridCap, Packer};
use datatype_pack::{codegen, fused, Error, Result, StridedBlock};

/// Timed iterations of each measurement.
pub const ITERS: usize = 25;
/// Warm-up iterations of each measurement.
pub const WARMUP: usize = 3;
/// Blocks timed by the per-block copy baseline before its time is scaled to all blocks.
pub const PER_BLOCK_SUBSET: u64 = 2000;
/// A first run slower than this many milliseconds switches to [`SLOW_ITERS`] iterations.
pub const SLOW_MS: f64 = 20.0;
/// Timed iterations of a slow measurement.
pub const SLOW_ITERS: usize = 5;

const OP: &str = "bench";

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// The CUDA device ordinal.
    pub device: usize,
    /// Totals up to 1 MiB and a 128^3 halo instead of 64 MiB and 512^3 (for smaller GPUs).
    pub quick: bool,
    /// Also run the launch-configuration sweep (threads per block x grid cap).
    pub sweep: bool,
    /// The throughput table (off: compile times and, with `sweep`, the sweep only).
    pub table: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            device: 0,
            quick: false,
            sweep: false,
            table: true,
        }
    }
}

impl Options {
    /// These options with `quick` set.
    #[must_use]
    pub fn with_quick(mut self, quick: bool) -> Self {
        self.quick = quick;
        self
    }

    /// These options with `sweep` set.
    #[must_use]
    pub fn with_sweep(mut self, sweep: bool) -> Self {
        self.sweep = sweep;
        self
    }

    /// These options with `table` set.
    #[must_use]
    pub fn with_table(mut self, table: bool) -> Self {
        self.table = table;
        self
    }

    /// These options on device `device`.
    #[must_use]
    pub fn with_device(mut self, device: usize) -> Self {
        self.device = device;
        self
    }
}

fn drv(e: DriverError) -> Error {
    Error::Cuda {
        op: OP,
        message: format!("{e:?}"),
    }
}

fn cu(r: sys::CUresult) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            op: OP,
            message: format!("{r:?}"),
        })
    }
}

/// A timed iteration moves about this many bytes (`Bench::reps` picks the number of operations that does).
pub const REP_BYTES: u64 = 256 << 20;
/// Fewest back-to-back operations per timed iteration.
pub const MIN_REPS: u64 = 4;
/// Most back-to-back operations per timed iteration.
pub const MAX_REPS: u64 = 256;

/// How the operations of a timed iteration reach the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Issue {
    /// Each operation enqueued from the host as it is timed: what an MPI library's loop of
    /// copies costs, host submission included.
    Direct,
    /// The iteration's operations captured once into a CUDA graph, then launched as one:
    /// what the device spends on them, without the host's submission rate (3 to 4 us per
    /// launch back to back, which hid the 1 KiB and 1 MiB rows' kernels).
    Graph,
}

/// Median time of one operation, in milliseconds: `f` enqueues `reps` operations, issued as
/// `issue` says (the first run, which loads modules and decides the iteration count, is always
/// direct). A measurement whose first run takes more than [`SLOW_MS`] uses [`SLOW_ITERS`]
/// iterations and no further warm-up (per-row copies of tiny blocks through the copy engine can
/// be that slow).
fn time_ms(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    reps: usize,
    issue: Issue,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let once = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let a = ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv)?;
        let b = ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv)?;
        a.record(stream).map_err(drv)?;
        f()?;
        b.record(stream).map_err(drv)?;
        b.synchronize().map_err(drv)?;
        Ok(f64::from(a.elapsed_ms(&b).map_err(drv)?) / reps as f64)
    };
    let first = once(&mut f)?;
    let graph = match issue {
        Issue::Graph => Some(capture(stream, &mut f)?),
        Issue::Direct => None,
    };
    let mut run = || -> Result<()> {
        match &graph {
            Some(g) => g.launch().map_err(drv),
            None => f(),
        }
    };
    let iters = if first * reps as f64 > SLOW_MS {
        SLOW_ITERS
    } else {
        for _ in 1..WARMUP {
            run()?;
        }
        ITERS
    };
    let mut ts = Vec::with_capacity(iters);
    for _ in 0..iters {
        ts.push(once(&mut run)?);
    }
    ts.sort_by(f64::total_cmp);
    Ok(ts[iters / 2])
}

/// The operations `f` enqueues on `stream`, captured into a CUDA graph ready to launch.
fn capture(stream: &Arc<CudaStream>, f: &mut dyn FnMut() -> Result<()>) -> Result<CudaGraph> {
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(drv)?;
    let enqueued = f();
    // End the capture whatever happened, so that the stream is usable again.
    let graph = stream.end_capture(sys::CUgraphInstantiate_flags_enum(0));
    enqueued?;
    let graph = graph.map_err(drv)?.ok_or_else(|| Error::Cuda {
        op: OP,
        message: "the stream capture produced no graph".into(),
    })?;
    graph.upload().map_err(drv)?;
    Ok(graph)
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
    fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let arch = gpu::device_arch(ctx)?;
        let img = gpu::compile(&naive_source(), &arch, &[])?;
        let m = ctx
            .load_module(Ptx::from_binary(img.to_vec()))
            .map_err(drv)?;
        let funcs = [1, 2, 4, 8, 16]
            .iter()
            .map(|w| m.load_function(&format!("naive_pack_{w}")).map_err(drv))
            .collect::<Result<_>>()?;
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
    ) -> Result<()> {
        let f = &self.funcs[w.trailing_zeros() as usize];
        let words = plan.block_len() / u64::from(w);
        let c0 = plan.counts().first().copied().unwrap_or(1);
        let s0 = plan.strides().first().copied().unwrap_or(0);
        let s1 = plan.strides().get(1).copied().unwrap_or(0);
        let total = plan.packed_size() / u64::from(w);
        let start = plan.start();
        let blocks = u32::try_from(total.div_ceil(256)).map_err(|_| Error::Unsupported {
            op: OP,
            message: format!("{total} words exceed one grid dimension of the naive kernel"),
        })?;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
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
        unsafe { b.launch(cfg) }.map_err(drv)?;
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

/// One row of the throughput table: times in milliseconds per pack.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The layout.
    pub name: String,
    /// Packed bytes.
    pub packed: u64,
    /// The word size of our kernel (the smallest of a fused launch).
    pub word: u32,
    /// Our pack.
    pub ours_ms: f64,
    /// A device-to-device copy of the packed bytes (the ceiling).
    pub d2d_ms: f64,
    /// `cuMemcpy2DAsync`, for 2-D layouts.
    pub copy2d_ms: Option<f64>,
    /// One copy per block, and whether it was scaled from the first [`PER_BLOCK_SUBSET`] blocks.
    pub per_block_ms: Option<(f64, bool)>,
    /// The one-thread-per-word kernel, for layouts of at most 2 dimensions.
    pub naive_ms: Option<f64>,
    /// Further variants of ours (name, time).
    pub extra: Vec<(String, f64)>,
}

/// GB/s of `bytes` moved in `ms` milliseconds (1 GB = 1e9 bytes).
pub fn gbs(bytes: u64, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e-3) / 1e9
}

/// The table's header lines.
pub fn header() -> [&'static str; 2] {
    [
        "| layout | packed bytes | W | ours us | ours GB/s | % of D2D | D2D GB/s | 2D GB/s | per-block GB/s | naive GB/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
}

impl Row {
    /// The row's table lines (one, plus one per extra variant).
    pub fn lines(&self) -> Vec<String> {
        let opt = |v: Option<f64>| {
            v.map_or("n/a".to_string(), |ms| {
                format!("{:.1}", gbs(self.packed, ms))
            })
        };
        let pb = self
            .per_block_ms
            .map_or("n/a".to_string(), |(ms, extrapolated)| {
                format!(
                    "{}{:.2}",
                    if extrapolated { "~" } else { "" },
                    gbs(self.packed, ms)
                )
            });
        let mut out = vec![format!(
            "| {} | {} | {} | {:.2} | {:.1} | {:.0}% | {:.1} | {} | {} | {} |",
            self.name,
            self.packed,
            self.word,
            self.ours_ms * 1e3,
            gbs(self.packed, self.ours_ms),
            100.0 * self.d2d_ms / self.ours_ms,
            gbs(self.packed, self.d2d_ms),
            opt(self.copy2d_ms),
            pb,
            opt(self.naive_ms),
        )];
        for (what, ms) in &self.extra {
            out.push(format!(
                "| {} | {} | {} | {:.2} | {:.1} | {:.0}% | | | | |",
                what,
                self.packed,
                self.word,
                ms * 1e3,
                gbs(self.packed, *ms),
                100.0 * self.d2d_ms / ms
            ));
        }
        out
    }
}

impl Row {
    /// The row's records (`record.rs`), one per column that was measured: variant `library` for
    /// ours, then `d2d`, `copy2d`, `per-block`, `naive` and the extra variants by name; the layout
    /// and word size in `config` (with `per_block=scaled` where the per-block time was scaled).
    pub fn records(
        &self,
        machine: &crate::output::record::Machine,
    ) -> Vec<crate::output::record::Record> {
        let mut columns = vec![("library".to_string(), Some(self.ours_ms))];
        columns.push(("d2d".into(), Some(self.d2d_ms)));
        columns.push(("copy2d".into(), self.copy2d_ms));
        columns.push(("per-block".into(), self.per_block_ms.map(|(ms, _)| ms)));
        columns.push(("naive".into(), self.naive_ms));
        columns.extend(self.extra.iter().map(|(n, ms)| (n.clone(), Some(*ms))));
        let scaled = self.per_block_ms.is_some_and(|(_, s)| s);
        columns
            .into_iter()
            .filter_map(|(variant, ms)| {
                let mut r = crate::output::record::Record::new(machine, "pack", "pack", "gpu");
                r.config = Some(if variant == "per-block" && scaled {
                    format!("layout={};word={};per_block=scaled", self.name, self.word)
                } else {
                    format!("layout={};word={}", self.name, self.word)
                });
                r.variant = variant;
                r.dtype = "byte".into();
                r.ranks = 1;
                r.size_bytes = self.packed;
                r.count = self.packed;
                Some(r.timed(ms? * 1e3, 1.0))
            })
            .collect()
    }
}

/// NVRTC compile times, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompileTimes {
    /// The first compile of the process (loads NVRTC).
    pub cold_ms: f64,
    /// A new source.
    pub warm_ms: f64,
    /// An in-memory cache hit.
    pub memory_hit_ms: f64,
    /// An on-disk cache hit (memory cache cleared).
    pub disk_hit_ms: f64,
    /// `Packer::new` of a new plan (compile and module load).
    pub packer_new_ms: f64,
}

/// The 6 send faces of an `n`^3 grid of f64 with halo radius `r`: slabs of thickness `r` at the
/// boundary of the interior `[r, n - r)^3`.
///
/// # Errors
/// [`Error::SubarrayOutOfRange`] when `2 r > n`.
pub fn halo_faces(n: u64, r: u64) -> Result<Vec<StridedBlock>> {
    let sizes = [n; 3];
    let inner = n.checked_sub(2 * r).ok_or(Error::SubarrayOutOfRange {
        op: OP,
        dim: 0,
        size: n,
        subsize: 2 * r,
        start: 0,
    })?;
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

/// A device, a stream and the buffers the measurements run on.
#[derive(Debug)]
pub struct Bench {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    src: CudaSlice<u8>,
    dst: CudaSlice<u8>,
    naive: Naive,
    quick: bool,
}

impl std::fmt::Debug for Naive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Naive").finish_non_exhaustive()
    }
}

impl Bench {
    /// A context and stream on `options.device`, source and destination buffers for the
    /// largest row (about 32 GiB of source without `quick`, 1 GiB with it), and the naive
    /// kernels compiled.
    ///
    /// # Errors
    /// [`Error::LibraryNotFound`] without a CUDA driver or NVRTC; [`Error::Cuda`] when the device
    /// or the allocations fail.
    pub fn new(options: &Options) -> Result<Self> {
        let ctx = gpu::context(options.device)?;
        let stream = ctx.new_stream().map_err(drv)?;
        let max_total: u64 = if options.quick { 1 << 20 } else { 64 << 20 };
        let src_len = (max_total * 512).max(1 << 30) as usize;
        let dst_len = (max_total.max(64 << 20) + (1 << 20)) as usize;
        let src = stream.alloc_zeros::<u8>(src_len).map_err(drv)?;
        let dst = stream.alloc_zeros::<u8>(dst_len).map_err(drv)?;
        let naive = Naive::new(&ctx)?;
        Ok(Self {
            ctx,
            stream,
            src,
            dst,
            naive,
            quick: options.quick,
        })
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Back-to-back operations per timed iteration of a layout of `bytes` packed bytes: enough
    /// to move [`REP_BYTES`] (at least [`MIN_REPS`], at most [`MAX_REPS`]), so that a timing
    /// window spans hundreds of microseconds rather than the few microseconds of one small
    /// launch, whose timings moved by 20 % between rows and runs.
    fn reps(bytes: u64) -> usize {
        (REP_BYTES / bytes.max(1)).clamp(MIN_REPS, MAX_REPS) as usize
    }

    fn d2d(&self, bytes: u64) -> Result<f64> {
        let (s, _g1) = self.src.device_ptr(&self.stream);
        let (d, _g2) = self.dst.device_ptr(&self.stream);
        let reps = Self::reps(bytes);
        let st = self.stream.cu_stream();
        time_ms(&self.ctx, &self.stream, reps, Issue::Graph, || {
            for _ in 0..reps {
                // SAFETY: both allocations hold at least `bytes` bytes (checked by the caller).
                cu(unsafe { sys::cuMemcpyDtoDAsync_v2(d, s, bytes as usize, st) })?;
            }
            Ok(())
        })
    }

    fn copy2d(&self, plan: &StridedBlock) -> Result<Option<f64>> {
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
        time_ms(&self.ctx, &self.stream, reps, Issue::Graph, || {
            for _ in 0..reps {
                // SAFETY: as above.
                cu(unsafe { sys::cuMemcpy2DAsync_v2(&p, st) })?;
            }
            Ok(())
        })
        .map(Some)
    }

    /// Time of one cuMemcpyDtoDAsync per block, and whether it was extrapolated.
    fn per_block(&self, plans: &[StridedBlock]) -> Result<(f64, bool)> {
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
        let ms = time_ms(&self.ctx, &self.stream, 1, Issue::Direct, || {
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

    fn naive(&self, plans: &[StridedBlock], words: &[u32]) -> Result<Option<f64>> {
        if plans.iter().any(|p| p.ndims() > 2) {
            return Ok(None);
        }
        let naive = &self.naive;
        let (s, _g1) = self.src.device_ptr(&self.stream);
        let (d, _g2) = self.dst.device_ptr(&self.stream);
        let bytes: u64 = plans.iter().map(StridedBlock::packed_size).sum();
        let reps = Self::reps(bytes);
        time_ms(&self.ctx, &self.stream, reps, Issue::Graph, || {
            for _ in 0..reps {
                let mut at = 0;
                for (p, &w) in plans.iter().zip(words) {
                    naive.launch(&self.stream, p, w, s, d + at)?;
                    at += p.packed_size().next_multiple_of(16);
                }
            }
            Ok(())
        })
        .map(Some)
    }

    fn check_fits(&self, extent_end: u64, packed: u64) -> Result<()> {
        if extent_end > self.src.len() as u64 || packed > self.dst.len() as u64 {
            return Err(Error::InvalidArgument {
                op: OP,
                message: format!(
                    "a layout reaching {extent_end} source bytes and packing {packed} does not \
                     fit the benchmark's buffers ({} and {} bytes)",
                    self.src.len(),
                    self.dst.len()
                ),
            });
        }
        Ok(())
    }

    /// Median time in milliseconds of our pack of `plan` with `opts`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the layout does not fit the buffers; the errors of
    /// [`Packer`].
    pub fn ours(&mut self, plan: &StridedBlock, opts: &GpuOptions) -> Result<f64> {
        self.check_fits(plan.extent_end(), plan.packed_size())?;
        let packer = Packer::with_options(&self.ctx, plan, opts)?;
        let reps = Self::reps(plan.packed_size());
        let (s, _g1) = self.src.device_ptr(&self.stream);
        let (d, _g2) = self.dst.device_ptr(&self.stream);
        let (slen, dlen) = (self.src.len(), self.dst.len());
        time_ms(&self.ctx, &self.stream, reps, Issue::Graph, || {
            for _ in 0..reps {
                // SAFETY: both addresses are the benchmark's own allocations in the packer's
                // context, `slen` and `dlen` bytes long, alive for the whole measurement; only
                // this stream uses them while it runs.
                unsafe { packer.pack_raw(&self.stream, s, slen, d, dlen) }?;
            }
            Ok(())
        })
    }

    /// Median time in milliseconds of our fused pack of `plans` with `opts`.
    ///
    /// # Errors
    /// As [`Bench::ours`], with [`FusedPacker`].
    pub fn ours_fused(&mut self, plans: &[StridedBlock], opts: &GpuOptions) -> Result<f64> {
        let fp = FusedPacker::with_regions(&self.ctx, fused::layout(plans)?, opts)?;
        self.check_fits(fp.extent_end(), fp.packed_size())?;
        let reps = Self::reps(fp.packed_size());
        let (s, _g1) = self.src.device_ptr(&self.stream);
        let (d, _g2) = self.dst.device_ptr(&self.stream);
        let (slen, dlen) = (self.src.len(), self.dst.len());
        time_ms(&self.ctx, &self.stream, reps, Issue::Graph, || {
            for _ in 0..reps {
                // SAFETY: as in `Bench::ours`.
                unsafe { fp.pack_raw(&self.stream, s, slen, d, dlen) }?;
            }
            Ok(())
        })
    }

    /// The row of one plan: ours and every baseline.
    ///
    /// # Errors
    /// As [`Bench::ours`]; [`Error::Cuda`] from the baselines.
    pub fn plan_row(&mut self, name: String, plan: &StridedBlock) -> Result<Row> {
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

    /// The row of the 6 faces of an `n`^3 f64 grid with radius `r`, fused in one launch, with
    /// six separate launches and a one-wave grid as extra variants.
    ///
    /// # Errors
    /// As [`Bench::plan_row`].
    pub fn halo_row(&mut self, n: u64, r: u64) -> Result<Row> {
        let faces = halo_faces(n, r)?;
        let packed: u64 = faces.iter().map(StridedBlock::packed_size).sum();
        let ours_ms = self.ours_fused(&faces, &GpuOptions::default())?;
        // The same faces as six separate launches.
        let regions = fused::layout(&faces)?;
        self.check_fits(fused::extent_end(&regions), fused::packed_size(&regions))?;
        let packers = faces
            .iter()
            .map(|p| Packer::new(&self.ctx, p))
            .collect::<Result<Vec<_>>>()?;
        let reps = Self::reps(packed);
        let separate_ms = {
            let (s, _g1) = self.src.device_ptr(&self.stream);
            let (d, _g2) = self.dst.device_ptr(&self.stream);
            let slen = self.src.len();
            time_ms(&self.ctx, &self.stream, reps, Issue::Graph, || {
                for _ in 0..reps {
                    for (p, reg) in packers.iter().zip(&regions) {
                        let range = reg.packed_range();
                        // SAFETY: as in `Bench::ours`; each face's packed range lies inside the
                        // destination allocation (`check_fits` above).
                        unsafe {
                            p.pack_raw(
                                &self.stream,
                                s,
                                slen,
                                d + range.start,
                                (range.end - range.start) as usize,
                            )
                        }?;
                    }
                }
                Ok(())
            })?
        };
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

    /// The rows of the throughput table, each passed to `row` as it is measured.
    ///
    /// # Errors
    /// As [`Bench::plan_row`].
    pub fn table(&mut self, row: &mut dyn FnMut(&Row)) -> Result<()> {
        let max_total: u64 = if self.quick { 1 << 20 } else { 64 << 20 };
        let contiguous = StridedBlock::new(0, 4 << 20, vec![], vec![])?;
        row(&self.plan_row("contiguous 4 MiB".to_string(), &contiguous)?);
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
                row(&self.plan_row(label, &plan)?);
            }
        }
        let n = if self.quick { 128 } else { 512 };
        row(&self.halo_row(n, 3)?);
        self.stream.synchronize().map_err(drv)?;
        Ok(())
    }

    /// Our pack under several launch configurations (threads per block x grid cap in waves),
    /// as Markdown lines.
    ///
    /// # Errors
    /// As [`Bench::ours`].
    pub fn sweep(&mut self, out: &mut dyn FnMut(&str)) -> Result<()> {
        let total: u64 = if self.quick { 1 << 20 } else { 64 << 20 };
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
        out(
            "Launch configuration sweep: ours GB/s by threads per block / grid (full = the whole \
             LaunchShape grid, Nw = at most N waves, auto = GridCap::Auto; a layout launched flat, \
             see LaunchShape::flat_suits, uses at most 256 threads per block whatever the limit)\n",
        );
        let mut head = String::from("| layout |");
        let mut rule = String::from("|---|");
        for (t, n, _) in &configs {
            head.push_str(&format!(" {t}/{n} |"));
            rule.push_str("---:|");
        }
        out(&head);
        out(&rule);
        let mut rows: Vec<(String, Vec<StridedBlock>)> = Vec::new();
        for block in [1u64, 4, 6, 8, 16, 24, 64, 256] {
            let plan = StridedBlock::from_type(&vector(total / block, block, 512, 1)?)?;
            rows.push((format!("{block} B blocks, {} MiB", total >> 20), vec![plan]));
        }
        rows.push((
            "8 B blocks, 1 MiB".to_string(),
            vec![StridedBlock::from_type(&vector((1 << 20) / 8, 8, 512, 1)?)?],
        ));
        let n = if self.quick { 128 } else { 512 };
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
                    self.ours(&plans[0], &opts)?
                } else {
                    self.ours_fused(plans, &opts)?
                };
                line.push_str(&format!(" {:.1} |", gbs(bytes, ms)));
            }
            out(&line);
        }
        out("");
        Ok(())
    }
}

/// `device: NAME (compute capability (X, Y)), NVRTC (M, m)`.
///
/// # Errors
/// [`Error::Cuda`] when the driver cannot tell; the errors of [`gpu::nvrtc_version`].
pub fn describe(ctx: &CudaContext) -> Result<String> {
    Ok(format!(
        "device: {} (compute capability {:?}), NVRTC {:?}",
        ctx.name().map_err(drv)?,
        ctx.compute_capability().map_err(drv)?,
        gpu::nvrtc_version()?
    ))
}

/// NVRTC compile times on `ctx`'s architecture: cold (the process's first compile, if nothing
/// compiled before), warm, in-memory hit, on-disk hit, and a new [`Packer`].
///
/// The on-disk measurement points [`gpu::CACHE_ENV`] at a fresh directory under the temporary
/// directory for its duration (then removes both): call it while no other thread reads the
/// environment.
///
/// # Errors
/// The errors of [`gpu::compile`] and [`Packer::new`].
pub fn compile_times(ctx: &Arc<CudaContext>) -> Result<CompileTimes> {
    let arch = gpu::device_arch(ctx)?;
    let p1 = StridedBlock::new(0, 8, vec![1 << 20], vec![512])?;
    let p2 = StridedBlock::new(0, 24, vec![506, 506], vec![4096, 2 << 20])?;
    let k1 = codegen::generate(&p1, 8)?;
    let k2 = codegen::generate(&p2, 8)?;
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    gpu::compile(k1.source(), &arch, &[])?;
    let cold_ms = ms(t);
    let t = Instant::now();
    gpu::compile(k2.source(), &arch, &[])?;
    let warm_ms = ms(t);
    let t = Instant::now();
    gpu::compile(k2.source(), &arch, &[])?;
    let memory_hit_ms = ms(t);
    let dir = std::env::temp_dir().join(format!("pack-bench-cache-{}", std::process::id()));
    let before = std::env::var_os(gpu::CACHE_ENV);
    std::env::set_var(gpu::CACHE_ENV, &dir);
    let disk = (|| {
        let k3 = codegen::generate(
            &StridedBlock::new(4, 12, vec![1000, 7], vec![16, 20_000])?,
            4,
        )?;
        gpu::compile(k3.source(), &arch, &[])?;
        gpu::clear_memory_cache();
        let t = Instant::now();
        gpu::compile(k3.source(), &arch, &[])?;
        Ok(ms(t))
    })();
    match before {
        Some(v) => std::env::set_var(gpu::CACHE_ENV, v),
        None => std::env::remove_var(gpu::CACHE_ENV),
    }
    let _ = std::fs::remove_dir_all(&dir);
    let disk_hit_ms = disk?;
    let t = Instant::now();
    let p4 = StridedBlock::new(0, 40, vec![3000, 9], vec![48, 200_000])?;
    let _packer = Packer::new(ctx, &p4)?;
    let packer_new_ms = ms(t);
    Ok(CompileTimes {
        cold_ms,
        warm_ms,
        memory_hit_ms,
        disk_hit_ms,
        packer_new_ms,
    })
}

impl CompileTimes {
    /// The Markdown table of the times, for architecture `arch`.
    pub fn lines(&self, arch: &str) -> Vec<String> {
        vec![
            format!("NVRTC compile times ({arch}):"),
            "| what | ms |".to_string(),
            "|---|---:|".to_string(),
            format!(
                "| cold: first compile in the process (loads NVRTC) | {:.2} |",
                self.cold_ms
            ),
            format!("| warm: a new source | {:.2} |", self.warm_ms),
            format!("| cached: in-memory hit | {:.4} |", self.memory_hit_ms),
            format!(
                "| cached: on-disk hit (memory cache cleared) | {:.3} |",
                self.disk_hit_ms
            ),
            format!(
                "| Packer::new of a new plan (compile + module load) | {:.2} |",
                self.packer_new_ms
            ),
            String::new(),
        ]
    }
}

/// The whole benchmark: device line, compile times, then (as `options` ask) the sweep and the
/// throughput table, each line passed to `out` as soon as it is ready.
///
/// # Errors
/// [`Error::LibraryNotFound`] without a CUDA driver or NVRTC; [`Error::Cuda`] from the device,
/// allocations and copies; compile errors.
pub fn run(options: &Options, out: &mut dyn FnMut(&str)) -> Result<()> {
    // Compile times before anything else compiles, so that "cold" is the process's first
    // compile.
    let ctx = gpu::context(options.device)?;
    out(&describe(&ctx)?);
    let times = compile_times(&ctx)?;
    for l in times.lines(&gpu::device_arch(&ctx)?) {
        out(&l);
    }
    let mut b = Bench::new(options)?;
    if options.sweep {
        b.sweep(out)?;
    }
    if !options.table {
        return Ok(());
    }
    out(&format!(
        "Pack throughput: median of {ITERS} timed iterations after {WARMUP} warm-ups (of \
         {SLOW_ITERS} iterations after one warm-up where one run takes over {SLOW_MS} ms), each \
         iteration {MIN_REPS} to {MAX_REPS} back-to-back operations moving about {} MiB, \
         launched as one CUDA graph (the per-block copies: from the host, one call each); GB/s = \
         packed bytes / time; `~` = per-block copies timed on the first {PER_BLOCK_SUBSET} \
         blocks and scaled to all blocks.\n",
        REP_BYTES >> 20
    ));
    for l in header() {
        out(l);
    }
    b.table(&mut |r| {
        for l in r.lines() {
            out(&l);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halo_faces_of_a_small_grid() {
        let f = halo_faces(16, 3).unwrap();
        assert_eq!(f.len(), 6);
        for p in &f {
            assert_eq!(p.packed_size(), 10 * 10 * 3 * 8);
        }
        assert!(halo_faces(5, 3).is_err());
    }

    #[test]
    fn row_lines() {
        let r = Row {
            name: "x".into(),
            packed: 1_000_000,
            word: 8,
            ours_ms: 0.01,
            d2d_ms: 0.005,
            copy2d_ms: None,
            per_block_ms: Some((1.0, true)),
            naive_ms: Some(0.02),
            extra: vec![("y".into(), 0.02)],
        };
        let l = r.lines();
        assert_eq!(l.len(), 2);
        assert!(
            l[0].starts_with(
                "| x | 1000000 | 8 | 10.00 | 100.0 | 50% | 200.0 | n/a | ~1.00 | 50.0 |"
            ),
            "{}",
            l[0]
        );
        assert_eq!(header()[0].matches('|').count(), l[0].matches('|').count());
        assert_eq!(gbs(1_000_000_000, 1000.0), 1.0);
    }
}
