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
//!     passed at run time;
//! (e) the fetch references, for layouts of at most one strided dimension ([`FetchLayout`]):
//!     kernels that time the least DRAM traffic the layout allows, not packs. For small blocks
//!     the D2D copy says little: it reads only the packed bytes, while a block of `b` bytes at
//!     stride 512 costs the GPU at least one aligned DRAM sector read however it is packed. A
//!     fetch kernel reads every aligned segment of its size that holds a byte of some block,
//!     once ([`FetchLayout::segments`] of them; `segment / 16` consecutive threads a segment,
//!     one 16-byte load each), and writes the packed number of bytes contiguously (16-byte
//!     stores, byte stores for the last `packed % 16`). What it writes is not the blocks' bytes:
//!     it times the traffic of a pack, not a correct pack. Two sizes ([`SEGMENTS`]): `fetch64`
//!     reads 64-byte segments, `fetch32` the 32-byte sectors the GPU's L2 fetches from DRAM (a
//!     block of up to 32 bytes that fits one sector costs one sector, half of `fetch64`'s
//!     bytes; for blocks over 32 bytes at stride 512 the two read the same bytes). They are
//!     references, not hardware bounds: a plain coalesced kernel with the least traffic, which
//!     the generated kernels matched or beat on an H100 (0.95-1.38x, docs/PERFORMANCE.md), so
//!     `ours/fetch32` (ours GB/s / fetch32 GB/s) says how ours stands against the traffic the
//!     layout needs, where `% of D2D` cannot. Grid-stride loops, 256 threads a block, one wave
//!     of blocks (the multiprocessors times the blocks each holds, as the packers size a
//!     one-wave grid).
//!
//! Every column launches on raw device pointers, with no per-call event bookkeeping: ours
//! through [`Packer::pack_raw`] and [`FusedPacker::pack_raw`], the baselines and the fetch
//! references through the driver.
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

/// Bytes of the aligned DRAM segments the fetch references read whole, one reference each: the
/// unit of DRAM traffic a reference counts (a block of fewer bytes still costs a whole segment).
/// 64 is the `fetch64` column; 32, the sector the GPU's L2 fetches, is the `fetch32` column (for
/// a block of up to 32 bytes it reads half the bytes `fetch64` reads).
pub const SEGMENTS: [u64; 2] = [64, 32];

/// Threads per thread block of the fetch kernels.
const FETCH_THREADS: u32 = 256;

/// A layout of at most one strided dimension as a fetch reference reads it: `count` blocks of
/// `block` bytes, block `i` at byte `start + i * stride` of a buffer whose base is
/// `segment`-aligned (a `cuMemAlloc` base is), read in aligned segments of `segment` bytes (one
/// of [`SEGMENTS`]).
///
/// The reference reads each segment that holds a byte of some block once. Block `i` touches the
/// segments `first(i) ..= last(i)`; as the offsets only grow, a segment an earlier block touches
/// is one block `i - 1` touches, so block `i` reads only the segments after `last(i - 1)`: its
/// new segments. Every touched segment is then read by exactly one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLayout {
    /// Byte offset of the first block.
    pub start: u64,
    /// Number of blocks.
    pub count: u64,
    /// Bytes per block.
    pub block: u64,
    /// Bytes from one block's start to the next's.
    pub stride: u64,
    /// Bytes per segment read: a power of two of at least 16 (one 16-byte load per thread), one
    /// of [`SEGMENTS`] for the kernels the benchmark compiles.
    pub segment: u64,
}

impl FetchLayout {
    /// The layout of `plan` read in `segment`-byte segments, when it has at most one dimension
    /// (none when it has more); the direction of a reversed dimension changes no segment
    /// touched, so it is ignored.
    ///
    /// # Panics
    /// When `segment` is not a power of two of at least 16.
    pub fn of_plan(plan: &StridedBlock, segment: u64) -> Option<Self> {
        assert!(
            segment.is_power_of_two() && segment >= 16,
            "a segment of {segment} bytes is no power of two of at least 16"
        );
        match (plan.counts(), plan.strides()) {
            ([], []) => Some(Self {
                start: plan.start(),
                count: u64::from(!plan.is_empty()),
                block: plan.block_len(),
                stride: 0,
                segment,
            }),
            ([count], [stride]) => Some(Self {
                start: plan.start(),
                count: *count,
                block: plan.block_len(),
                stride: *stride,
                segment,
            }),
            _ => None,
        }
    }

    /// Whether the layout selects no byte.
    fn is_empty(&self) -> bool {
        self.count == 0 || self.block == 0
    }

    /// Byte offset of block `i`.
    fn offset(&self, i: u64) -> u64 {
        self.start + i * self.stride
    }

    /// The first segment block `i` touches.
    fn first(&self, i: u64) -> u64 {
        self.offset(i) / self.segment
    }

    /// The last segment block `i` touches.
    fn last(&self, i: u64) -> u64 {
        (self.offset(i) + self.block - 1) / self.segment
    }

    /// The first segment of block `i` that no earlier block touches (past `last(i)` when it
    /// has none).
    fn first_new(&self, i: u64) -> u64 {
        if i == 0 {
            self.first(0)
        } else {
            // offset(i) - stride = offset(i - 1), written as the kernel computes it.
            self.first(i)
                .max((self.offset(i) - self.stride + self.block - 1) / self.segment + 1)
        }
    }

    /// Segments block `i` reads: those no earlier block touches.
    fn new_segments(&self, i: u64) -> u64 {
        (self.last(i) + 1).saturating_sub(self.first_new(i))
    }

    /// Blocks after which the offsets modulo `segment` repeat: block `i`'s new segments depend
    /// only on `offset(i) % segment` (for `i > 0`), which repeats every
    /// `segment / gcd(stride, segment)` blocks.
    fn period(&self) -> u64 {
        match self.stride % self.segment {
            0 => 1,
            r => self.segment >> r.trailing_zeros(),
        }
    }

    /// Aligned `segment`-byte segments that hold at least one byte of some block: what the
    /// fetch reference reads. Computed over one period of the offsets, so in constant time.
    pub fn segments(&self) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let rest = self.count - 1;
        let p = self.period();
        // new[k] = new segments of block k + 1, for one period.
        let new: Vec<u64> = (1..=rest.min(p)).map(|i| self.new_segments(i)).collect();
        let whole: u64 = new.iter().sum();
        let part: u64 = new[..(rest % p) as usize].iter().sum();
        self.new_segments(0) + (rest / p) * whole + part
    }

    /// Segment slots the kernel gives each block: the most new segments of any block (slots a
    /// block has no segment for stay idle).
    pub fn slots_per_block(&self) -> u64 {
        if self.is_empty() {
            return 0;
        }
        (1..=(self.count - 1).min(self.period()))
            .map(|i| self.new_segments(i))
            .fold(self.new_segments(0), u64::max)
    }

    /// The segment slot `slot` of the kernel reads, if any: block `slot / slots_per_block`, its
    /// `slot % slots_per_block`-th new segment (the kernel's rule, in Rust).
    #[cfg(test)]
    fn slot_segment(&self, slot: u64, slots_per_block: u64) -> Option<u64> {
        let (i, j) = (slot / slots_per_block, slot % slots_per_block);
        let g = self.first_new(i) + j;
        (g <= self.last(i)).then_some(g)
    }
}

/// The fetch kernels' parameters, in launch order; each is 8 bytes (a pointer or a `u64`), as
/// [`FetchArgs::values`] pushes them.
const FETCH_PARAMS: [&str; 9] = [
    "const unsigned char* __restrict__ src",
    "unsigned char* __restrict__ dst",
    "u64 start",
    "u64 block",
    "u64 count",
    "u64 stride",
    "u64 spb",
    "u64 packed",
    "u64 key",
];

/// The name of the fetch kernel of `segment`-byte segments.
fn fetch_name(segment: u64) -> String {
    format!("fetch_reference_{segment}")
}

/// The fetch kernel of `segment`-byte segments (a power of two of at least 16): a grid-stride
/// loop over segment slots (`segment / 16` threads a slot, one 16-byte load each, folded into
/// `acc`), `acc` stored only when it equals `key` (never, see [`FetchArgs::KEY`], but the
/// compiler cannot know, so the loads stay), then a grid-stride loop of 16-byte stores over the
/// packed bytes and byte stores for the last `packed % 16`.
fn fetch_kernel(segment: u64) -> String {
    let seg = segment.trailing_zeros();
    let lanes = (segment / 16).trailing_zeros();
    format!(
        "extern \"C\" __global__ void __launch_bounds__({FETCH_THREADS}) {}({}) {{\n\
         const u64 tid = blockIdx.x * (u64)blockDim.x + threadIdx.x;\n\
         const u64 threads = (u64)gridDim.x * blockDim.x;\n\
         const u64 lanes = (count * spb) << {lanes};\n\
         unsigned int acc = 0;\n\
         for (u64 t = tid; t < lanes; t += threads) {{\n\
         const u64 slot = t >> {lanes};\n\
         const u64 i = spb == 1 ? slot : slot / spb;\n\
         const u64 off = start + i * stride;\n\
         const u64 last = (off + block - 1) >> {seg};\n\
         u64 first = off >> {seg};\n\
         if (i > 0) {{\n\
         const u64 after = ((off - stride + block - 1) >> {seg}) + 1;\n\
         first = after > first ? after : first;\n\
         }}\n\
         const u64 g = first + (slot - i * spb);\n\
         if (g <= last) {{\n\
         const uint4 v = *(const uint4*)(src + (g << {seg}) + ((t & {}) << 4));\n\
         acc ^= v.x ^ v.y ^ v.z ^ v.w;\n\
         }}\n\
         }}\n\
         if ((u64)acc == key) *(unsigned int*)dst = acc;\n\
         const u64 words = packed >> 4;\n\
         for (u64 k = tid; k < words; k += threads) {{\n\
         const unsigned int w = (unsigned int)k;\n\
         ((uint4*)dst)[k] = make_uint4(w, w, w, w);\n\
         }}\n\
         if (tid < (packed & 15)) dst[(words << 4) + tid] = (unsigned char)tid;\n\
         }}\n",
        fetch_name(segment),
        FETCH_PARAMS.join(", "),
        (1u64 << lanes) - 1,
    )
}

/// The fetch kernels of every size of [`SEGMENTS`], in one module.
fn fetch_source() -> String {
    let mut s = String::from("typedef unsigned long long u64;\n");
    for segment in SEGMENTS {
        s.push_str(&fetch_kernel(segment));
    }
    s
}

/// The values of one fetch launch, in the order of [`FETCH_PARAMS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FetchArgs {
    layout: FetchLayout,
    slots_per_block: u64,
    packed: u64,
}

impl FetchArgs {
    /// What `acc` is compared with: the benchmark's source is all zeros (allocated zeroed and
    /// only ever read), so every fold is 0 and never 1. Were it not, the store would write one
    /// word of the destination, which holds no correct pack anyway.
    const KEY: u64 = 1;

    fn new(layout: FetchLayout) -> Self {
        Self {
            layout,
            slots_per_block: layout.slots_per_block(),
            packed: layout.count * layout.block,
        }
    }

    /// Threads the read loop needs: `segment / 16` per segment slot.
    fn lanes(&self) -> u64 {
        self.layout.count * self.slots_per_block * (self.layout.segment / 16)
    }

    /// The kernel's arguments, the source and destination addresses first.
    fn values(&self, src: u64, dst: u64) -> [u64; FETCH_PARAMS.len()] {
        let l = &self.layout;
        [
            src,
            dst,
            l.start,
            l.block,
            l.count,
            l.stride,
            self.slots_per_block,
            self.packed,
            Self::KEY,
        ]
    }
}

/// Thread blocks of a fetch launch: enough for `threads` threads (one per read lane or per
/// 16-byte store, whichever is more), at most `wave` (the blocks the device holds at once; the
/// loops stride over the rest), at least one.
fn fetch_grid(threads: u64, wave: u64) -> u32 {
    let blocks = threads
        .div_ceil(u64::from(FETCH_THREADS))
        .clamp(1, wave.max(1));
    u32::try_from(blocks).unwrap_or(u32::MAX)
}

/// The fetch kernels, loaded (one per size of [`SEGMENTS`], in that order), and the thread
/// blocks of 256 threads the device holds at once.
struct Fetch {
    funcs: Vec<CudaFunction>,
    wave: u64,
}

impl Fetch {
    fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let arch = gpu::device_arch(ctx)?;
        let img = gpu::compile(&fetch_source(), &arch, &[])?;
        let m = ctx
            .load_module(Ptx::from_binary(img.to_vec()))
            .map_err(drv)?;
        let funcs = SEGMENTS
            .iter()
            .map(|&s| m.load_function(&fetch_name(s)).map_err(drv))
            .collect::<Result<_>>()?;
        Ok(Self {
            funcs,
            // As the packers size a one-wave grid.
            wave: gpu::Residency::of(ctx)?.wave(FETCH_THREADS),
        })
    }

    /// Enqueues the fetch reference of `layout` (in its segment size, one of [`SEGMENTS`]) from the
    /// allocation at `src` to the one at `dst`.
    fn launch(&self, stream: &CudaStream, layout: FetchLayout, src: u64, dst: u64) -> Result<()> {
        let func = SEGMENTS
            .iter()
            .position(|&s| s == layout.segment)
            .map(|k| &self.funcs[k])
            .ok_or_else(|| Error::Unsupported {
                op: OP,
                message: format!(
                    "no fetch kernel of {}-byte segments (compiled: {SEGMENTS:?})",
                    layout.segment
                ),
            })?;
        let args = FetchArgs::new(layout);
        let values = args.values(src, dst);
        let cfg = LaunchConfig {
            grid_dim: (
                fetch_grid(args.lanes().max(args.packed / 16), self.wave),
                1,
                1,
            ),
            block_dim: (FETCH_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(func);
        for v in &values {
            b.arg(v);
        }
        // SAFETY: the arguments match the kernel's signature (FETCH_PARAMS: two pointers, seven
        // u64, in that order); `func` is the kernel of the layout's segment size, so the lanes
        // per slot and the shifts it reads with are the ones `args` counts; the caller's source
        // allocation reaches the layout's extent end rounded up to a segment (every segment
        // read lies inside it) and its destination allocation holds the packed size and at
        // least 4 bytes (every store, and the store of `acc` to its first word, lies inside
        // it); the grid is at most one wave, within grid x.
        unsafe { b.launch(cfg) }.map_err(drv)?;
        Ok(())
    }
}

impl std::fmt::Debug for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetch")
            .field("segments", &SEGMENTS)
            .field("wave", &self.wave)
            .finish_non_exhaustive()
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
    /// The fetch reference of 64-byte segments ((e) of the [module docs](self)), for layouts of at
    /// most one strided dimension ([`FetchLayout::of_plan`]).
    pub fetch64_ms: Option<f64>,
    /// The fetch reference of 32-byte sectors ((e) of the [module docs](self)), for
    /// the same layouts.
    pub fetch32_ms: Option<f64>,
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
        "| layout | packed bytes | W | ours us | ours GB/s | % of D2D | ours/fetch32 | D2D GB/s | fetch64 GB/s | fetch32 GB/s | 2D GB/s | per-block GB/s | naive GB/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
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
        // Ours GB/s over the 32-byte fetch reference's; `-` where the layout has no fetch
        // reference.
        let of_fetch = |ms: f64| {
            self.fetch32_ms
                .map_or("-".to_string(), |f| format!("{:.2}", f / ms))
        };
        let fetch =
            |v: Option<f64>| v.map_or("-".to_string(), |ms| format!("{:.1}", gbs(self.packed, ms)));
        let mut out = vec![format!(
            "| {} | {} | {} | {:.2} | {:.1} | {:.0}% | {} | {:.1} | {} | {} | {} | {} | {} |",
            self.name,
            self.packed,
            self.word,
            self.ours_ms * 1e3,
            gbs(self.packed, self.ours_ms),
            100.0 * self.d2d_ms / self.ours_ms,
            of_fetch(self.ours_ms),
            gbs(self.packed, self.d2d_ms),
            fetch(self.fetch64_ms),
            fetch(self.fetch32_ms),
            opt(self.copy2d_ms),
            pb,
            opt(self.naive_ms),
        )];
        for (what, ms) in &self.extra {
            out.push(format!(
                "| {} | {} | {} | {:.2} | {:.1} | {:.0}% | {} | | | | | | |",
                what,
                self.packed,
                self.word,
                ms * 1e3,
                gbs(self.packed, *ms),
                100.0 * self.d2d_ms / ms,
                of_fetch(*ms),
            ));
        }
        out
    }
}

impl Row {
    /// The row's records (`record.rs`), one per column that was measured: variant `library` for
    /// ours, then `d2d`, `copy2d`, `per-block`, `naive`, `fetch64` and `fetch32` (the references)
    /// and the extra variants by name; the layout and word size in `config` (with
    /// `per_block=scaled` where the per-block time was scaled).
    pub fn records(
        &self,
        machine: &crate::output::record::Machine,
    ) -> Vec<crate::output::record::Record> {
        let mut columns = vec![("library".to_string(), Some(self.ours_ms))];
        columns.push(("d2d".into(), Some(self.d2d_ms)));
        columns.push(("copy2d".into(), self.copy2d_ms));
        columns.push(("per-block".into(), self.per_block_ms.map(|(ms, _)| ms)));
        columns.push(("naive".into(), self.naive_ms));
        columns.push(("fetch64".into(), self.fetch64_ms));
        columns.push(("fetch32".into(), self.fetch32_ms));
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
    fetch: Fetch,
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
    /// and fetch kernels compiled.
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
        let fetch = Fetch::new(&ctx)?;
        Ok(Self {
            ctx,
            stream,
            src,
            dst,
            naive,
            fetch,
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

    /// The fetch reference of `plan` in `segment`-byte segments (one of [`SEGMENTS`]; (e) of the
    /// [module docs](self)); none for a plan of more than one dimension or none selected. The
    /// destination buffer is far over 4 bytes, as the kernel's store of its fold needs.
    fn fetch(&self, plan: &StridedBlock, segment: u64) -> Result<Option<f64>> {
        let Some(layout) = FetchLayout::of_plan(plan, segment).filter(|_| !plan.is_empty()) else {
            return Ok(None);
        };
        // Whole segments: the last one read may reach past the extent end.
        self.check_fits(
            plan.extent_end().next_multiple_of(segment),
            plan.packed_size(),
        )?;
        let fetch = &self.fetch;
        let (s, _g1) = self.src.device_ptr(&self.stream);
        let (d, _g2) = self.dst.device_ptr(&self.stream);
        let reps = Self::reps(plan.packed_size());
        time_ms(&self.ctx, &self.stream, reps, Issue::Graph, || {
            for _ in 0..reps {
                fetch.launch(&self.stream, layout, s, d)?;
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
            fetch64_ms: self.fetch(plan, 64)?,
            fetch32_ms: self.fetch(plan, 32)?,
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
            fetch64_ms: None,
            fetch32_ms: None,
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
         blocks and scaled to all blocks; fetch64 / fetch32 = a kernel that reads every aligned \
         64-byte segment / 32-byte sector holding a byte of the layout once and writes the \
         packed bytes (the least DRAM traffic the layout allows, in plain coalesced loads: a \
         reference, not a pack and not a hardware bound), \
         `ours/fetch32` = ours GB/s / fetch32 GB/s, `-` = no fetch reference (more than one \
         strided dimension).\n",
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
            fetch64_ms: Some(0.01),
            fetch32_ms: Some(0.008),
            extra: vec![("y".into(), 0.02)],
        };
        let l = r.lines();
        assert_eq!(l.len(), 2);
        // The ratio is to the 32-byte reference.
        assert_eq!(
            l[0],
            "| x | 1000000 | 8 | 10.00 | 100.0 | 50% | 0.80 | 200.0 | 100.0 | 125.0 | n/a | ~1.00 | 50.0 |"
        );
        assert_eq!(
            l[1],
            "| y | 1000000 | 8 | 20.00 | 50.0 | 25% | 0.40 | | | | | | |"
        );
        for line in header()
            .iter()
            .chain(&l.iter().map(String::as_str).collect::<Vec<_>>())
        {
            assert_eq!(line.matches('|').count(), 14, "{line}");
        }
        let none = Row {
            fetch64_ms: None,
            fetch32_ms: None,
            ..r.clone()
        };
        let l = none.lines();
        assert!(
            l[0].contains("| 50% | - | 200.0 | - | - | n/a |"),
            "{}",
            l[0]
        );
        assert!(l[1].contains("| 25% | - | |"), "{}", l[1]);
        assert_eq!(gbs(1_000_000_000, 1000.0), 1.0);
    }

    #[test]
    fn records_name_the_fetch_references() {
        let r = Row {
            name: "x".into(),
            packed: 1 << 20,
            word: 1,
            ours_ms: 0.01,
            d2d_ms: 0.005,
            copy2d_ms: Some(0.02),
            per_block_ms: None,
            naive_ms: None,
            fetch64_ms: Some(0.04),
            fetch32_ms: Some(0.03),
            extra: Vec::new(),
        };
        let recs = r.records(&crate::output::record::Machine::default());
        let v: Vec<&str> = recs.iter().map(|r| r.variant.as_str()).collect();
        assert_eq!(v, ["library", "d2d", "copy2d", "fetch64", "fetch32"]);
        assert_eq!(recs[3].time_us, 40.0);
        assert_eq!(recs[4].time_us, 30.0);
    }

    /// Segments touched, counted byte by byte.
    fn brute_segments(l: &FetchLayout) -> std::collections::BTreeSet<u64> {
        (0..l.count)
            .flat_map(|i| {
                let off = l.start + i * l.stride;
                (off..off + l.block).map(|b| b / l.segment)
            })
            .collect()
    }

    /// Layouts around the segment boundaries, in segments of each size of [`SEGMENTS`]: blocks
    /// within, across and over several segments, offsets, stride 512, strides not a multiple
    /// of the segment, strides below the block (overlap) and zero, one block, none.
    fn layouts() -> Vec<FetchLayout> {
        let mut v = Vec::new();
        for segment in SEGMENTS {
            for block in [
                0u64, 1, 2, 6, 8, 12, 24, 31, 32, 33, 63, 64, 65, 100, 128, 200, 512,
            ] {
                for start in [0u64, 1, 16, 31, 32, 60, 63, 64, 100] {
                    for stride in [
                        0u64, 1, 7, 16, 24, 32, 40, 48, 64, 72, 96, 100, 130, 192, 511, 512, 513,
                    ] {
                        for count in [0u64, 1, 2, 3, 9, 70, 131] {
                            v.push(FetchLayout {
                                start,
                                count,
                                block,
                                stride,
                                segment,
                            });
                        }
                    }
                }
            }
        }
        v
    }

    #[test]
    fn segments_match_a_byte_by_byte_count() {
        let all = layouts();
        for segment in SEGMENTS {
            assert!(all.iter().filter(|l| l.segment == segment).count() > 10_000);
        }
        for l in all {
            assert_eq!(l.segments(), brute_segments(&l).len() as u64, "{l:?}");
        }
        // The table's rows: one segment per block up to the segment size at stride 512, whole
        // segments above; 32-byte sectors read half the bytes of 64-byte segments for blocks of
        // up to 32 bytes, the same bytes for blocks of whole 64-byte segments.
        for (block, per64, per32) in [
            (1u64, 1u64, 1u64),
            (8, 1, 1),
            (24, 1, 1),
            (32, 1, 1),
            (33, 1, 2),
            (63, 1, 2),
            (64, 1, 2),
            (65, 2, 3),
            (256, 4, 8),
        ] {
            for (segment, per) in [(64, per64), (32, per32)] {
                let l = FetchLayout {
                    start: 0,
                    count: 1 << 20,
                    block,
                    stride: 512,
                    segment,
                };
                assert_eq!(l.segments(), per << 20, "{l:?}");
                assert_eq!(l.slots_per_block(), per, "{l:?}");
                let nine = FetchLayout { count: 9, ..l };
                assert_eq!(brute_segments(&nine).len() as u64, 9 * per, "{l:?}");
            }
        }
        // Counts of many periods: the sum over one period, scaled, against the sum over every
        // block.
        for segment in SEGMENTS {
            for (start, block, stride) in [
                (3u64, 8u64, 100u64),
                (60, 12, 520),
                (1, 70, 66),
                (0, 5, 3),
                (17, 20, 44),
            ] {
                let l = FetchLayout {
                    start,
                    count: 100_003,
                    block,
                    stride,
                    segment,
                };
                let sum: u64 = (0..l.count).map(|i| l.new_segments(i)).sum();
                assert_eq!(l.segments(), sum, "{l:?}");
            }
        }
    }

    #[test]
    fn the_kernel_rule_reads_each_segment_once() {
        for l in layouts() {
            let spb = l.slots_per_block();
            let mut read: Vec<u64> = (0..l.count * spb)
                .filter_map(|slot| l.slot_segment(slot, spb))
                .collect();
            let n = read.len();
            read.sort_unstable();
            read.dedup();
            assert_eq!(read.len(), n, "a segment read twice: {l:?}");
            assert_eq!(
                read,
                brute_segments(&l).into_iter().collect::<Vec<_>>(),
                "{l:?}"
            );
            // No block needs more slots than it has.
            for i in 0..if l.is_empty() { 0 } else { l.count } {
                assert!(l.new_segments(i) <= spb, "{l:?} block {i}");
            }
        }
    }

    #[test]
    fn layouts_of_plans() {
        let v = StridedBlock::from_type(&vector(1000, 8, 512, 1).unwrap()).unwrap();
        for segment in SEGMENTS {
            assert_eq!(
                FetchLayout::of_plan(&v, segment),
                Some(FetchLayout {
                    start: 0,
                    count: 1000,
                    block: 8,
                    stride: 512,
                    segment,
                })
            );
            let c = StridedBlock::new(5, 4 << 20, vec![], vec![]).unwrap();
            let l = FetchLayout::of_plan(&c, segment).unwrap();
            assert_eq!((l.count, l.block), (1, 4 << 20));
            assert_eq!(l.segments(), (5 + (4 << 20) - 1) / segment + 1);
            let e = FetchLayout::of_plan(&StridedBlock::empty(), segment).unwrap();
            assert_eq!((e.segments(), e.slots_per_block()), (0, 0));
            assert!(halo_faces(16, 3)
                .unwrap()
                .iter()
                .any(|f| FetchLayout::of_plan(f, segment).is_none()));
        }
    }

    #[test]
    #[should_panic(expected = "no power of two")]
    fn segments_are_powers_of_two_of_16_bytes_or_more() {
        let v = StridedBlock::from_type(&vector(10, 8, 512, 1).unwrap()).unwrap();
        let _ = FetchLayout::of_plan(&v, 8);
    }

    #[test]
    fn the_fetch_kernels_take_what_the_launch_passes() {
        let src = fetch_source();
        assert_eq!(src.matches("typedef unsigned long long u64;").count(), 1);
        assert_eq!(src.matches("extern \"C\"").count(), SEGMENTS.len());
        // Every parameter is 8 bytes, as each value pushed is a u64.
        for p in FETCH_PARAMS {
            assert!(
                p.ends_with('*') || p.contains("* ") || p.starts_with("u64 "),
                "{p}"
            );
        }
        // The values in the order the parameters are named.
        let named: Vec<&str> = FETCH_PARAMS
            .iter()
            .map(|p| p.rsplit(' ').next().unwrap())
            .collect();
        assert_eq!(
            named,
            ["src", "dst", "start", "block", "count", "stride", "spb", "packed", "key"]
        );
        assert_ne!(
            FetchArgs::KEY,
            0,
            "a zero source folds to 0, which must not match"
        );
        // A 64-byte segment is 4 lanes of 16 bytes, a 32-byte sector 2: the shifts and masks
        // each kernel uses.
        assert_eq!(SEGMENTS, [64, 32]);
        for (segment, lanes, shift, mask, seg_shift) in [(64u64, 4u64, 2, 3, 6), (32, 2, 1, 1, 5)] {
            assert_eq!(segment, 1 << seg_shift);
            assert_eq!(segment / 16, lanes);
            let k = fetch_kernel(segment);
            assert!(src.contains(&k), "{segment}");
            assert!(
                k.starts_with(&format!(
                    "extern \"C\" __global__ void __launch_bounds__(256) fetch_reference_{segment}({})",
                    FETCH_PARAMS.join(", ")
                )),
                "{k}"
            );
            assert_eq!(fetch_name(segment), format!("fetch_reference_{segment}"));
            assert!(k.contains(&format!("const u64 lanes = (count * spb) << {shift};")));
            assert!(
                k.contains(&format!("const u64 slot = t >> {shift};")),
                "{k}"
            );
            assert!(k.contains(&format!("((t & {mask}) << 4)")), "{k}");
            assert!(k.contains(&format!("(g << {seg_shift})")), "{k}");
            assert_eq!(k.matches(&format!(">> {seg_shift}")).count(), 3, "{k}");
            assert!(k.contains("packed & 15"));
            let l = FetchLayout {
                start: 64,
                count: 10,
                block: 100,
                stride: 130,
                segment,
            };
            let a = FetchArgs::new(l);
            assert_eq!(
                a.values(0x1000, 0x2000),
                [
                    0x1000,
                    0x2000,
                    64,
                    100,
                    10,
                    130,
                    l.slots_per_block(),
                    1000,
                    FetchArgs::KEY
                ]
            );
            assert_eq!(a.lanes(), 10 * l.slots_per_block() * lanes);
        }
    }

    #[test]
    fn fetch_grids() {
        assert_eq!(fetch_grid(0, 1056), 1);
        assert_eq!(fetch_grid(256, 1056), 1);
        assert_eq!(fetch_grid(257, 1056), 2);
        assert_eq!(fetch_grid(1 << 30, 1056), 1056);
        assert_eq!(fetch_grid(1 << 30, 0), 1);
    }
}
