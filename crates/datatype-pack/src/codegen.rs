//! CUDA C source generated from a plan: one `pack` and one `unpack` kernel per
//! ([`StridedBlock`], word size), fused kernels that pack many plans in one launch, and fused
//! strided-to-strided copy kernels ([`generate_fused_copy`]).
//!
//! Pure Rust: nothing here needs CUDA. The `gpu` module (feature `cuda`) compiles
//! the sources with NVRTC and launches them.
//!
//! # The generated kernels
//!
//! A single plan's kernels ([`generate`]) implement the [`LaunchShape`] that
//! [`LaunchShape::for_plan`] picks: flat or by axes. Fused kernels map every region flat
//! ([`fused_shape`]): each region walks its own packed words over its own span of the fused
//! grid.
//!
//! A flat kernel is the one-thread-per-word kernel: a 1-D grid-stride loop over the packed words,
//! thread `i` on packed word `i` (packed offset `i * W`), its strided offset
//! `START + i * W` for a contiguous plan and otherwise `START + (i % WPB) * W` plus the digits of
//! `i / WPB` in the counts times the strides, every divisor a baked-in constant (a shift for a
//! power of two). With the full grid each thread moves one word; under a capped grid the loop
//! is unrolled four times, four loads in flight before the first store.
//!
//! A kernel by axes implements the axes contract of its plan: grid-stride loops with x over
//! the words of a block, y over `counts[0]`, z over `counts[1]`, the outer dimensions looped
//! inside the kernel, 64-bit index arithmetic. The block length in words, every count and every
//! stride are baked into the source as constants, so the compiler strength-reduces the index
//! arithmetic; the thread-block shape is baked in too (launch with [`LaunchShape::block`]), while
//! the grid is read from `gridDim`, so any grid (for example one capped at a few waves of the
//! device) is correct.
//!
//! Two loop nests implement the contract, chosen per launch by one uniform test:
//!
//! * when the grid covers the words of a block in x (`gridDim.x * blockDim.x >= words`, always
//!   the case when the words of a block fit one thread block's x extent), each thread owns at most one word of a block and
//!   moves that word of many blocks: the loop over blocks (y) is unrolled four times, with four
//!   independent loads in flight before the first store. Consecutive threads of a warp take
//!   consecutive words of a block and then consecutive blocks, so the packed side is written in
//!   whole, coalesced runs;
//! * otherwise (blocks longer than the grid's x span) the loop over words (x) is unrolled four
//!   times.
//!
//! Both visit exactly the `(x, y, z, outer)` indices that the contract gives each thread, so
//! every packed word is written once.
//!
//! # Fused kernels
//!
//! A fused launch is one 1-D grid of `block_threads` threads per block whose thread blocks are
//! partitioned among the regions (in proportion to their bytes, at least one each): region `r`
//! owns blocks `first..end`. Thread `t` of block `b` in that span starts on word
//! `i = (b - first) * T + t` of the region (`T` threads per block) and strides by the span's
//! `(end - first) * T` threads: the flat loop of the region's plan, with the region's constants
//! baked in, so any span (one block included) covers any number of words (64-bit indices). The
//! packed offset of word `i` is the region's packed offset plus `i * W`. A fused copy kernel
//! runs the same flat loop over its source plan and writes each word at its strided offset plus
//! a baked-in constant `DELTA` (the destination start minus the source start, modulo 2^64; the
//! wrapping sum is the destination offset) instead of a packed offset.
//!
//! Words of 1, 2, 4, 8 bytes move as `unsigned char`, `unsigned short`, `unsigned int`,
//! `unsigned long long`; 16-byte words as a 16-byte-aligned struct of four `unsigned int`
//! (one 128-bit load and store). The source includes no header, so NVRTC compiles it without
//! include paths.
//!
//! Kernel names are `extern "C"` and derived from a hash of everything that shapes the code
//! (the plan, the word size, the fused regions and their grids), so one module may hold the
//! kernels of many plans and a name identifies its code.

use std::fmt::Write as _;

use crate::error::{invalid, Result};
use crate::fused::{CopyRegion, Region};
use crate::plan::{LaunchLimits, LaunchShape, StridedBlock};

/// Hashed into every kernel name; changes whenever the generated code changes, so that cached
/// binaries of older code are never mistaken for the current one.
const CODEGEN_VERSION: u64 = 3;

/// How many loop trips the hot loop of a kernel unrolls.
pub const UNROLL: u64 = 4;

/// Which way a kernel copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Strided buffer -> packed buffer.
    Pack,
    /// Packed buffer -> strided buffer.
    Unpack,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::Pack => "pack",
            Direction::Unpack => "unpack",
        }
    }
}

/// What a flat body does with the words its loop visits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Move {
    /// Pack or unpack between the strided and the packed buffer.
    Packed(Direction),
    /// Strided source to strided destination, the destination offset being the source offset
    /// plus `delta` (modulo 2^64).
    Copy { delta: u64 },
}

/// The CUDA C type a kernel moves words of `word_size` bytes in, or `None` if `word_size` is
/// not 1, 2, 4, 8 or 16.
pub fn word_type(word_size: u32) -> Option<&'static str> {
    Some(match word_size {
        1 => "unsigned char",
        2 => "unsigned short",
        4 => "unsigned int",
        8 => "unsigned long long",
        16 => "dtp_w16",
        _ => return None,
    })
}

/// 64-bit FNV-1a: a stable hash (the same on every platform and Rust version) for kernel names
/// and cache file names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv64(u64);

impl Fnv64 {
    pub(crate) const fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) const fn with_seed(seed: u64) -> Self {
        Self(0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x0000_0100_0000_01b3))
    }

    pub(crate) fn bytes(&mut self, data: &[u8]) -> &mut Self {
        for &b in data {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
}

fn hash_plan(h: &mut Fnv64, plan: &StridedBlock, word_size: u32) {
    h.u64(plan.start())
        .u64(plan.block_len())
        .u64(plan.ndims() as u64);
    for (&n, &s) in plan.counts().iter().zip(plan.strides()) {
        h.u64(n).u64(s);
    }
    h.u64(u64::from(word_size));
    // Only plans with a reversed dimension hash their directions, so that the names (and the
    // cached images) of forward plans stay what they were.
    if plan.has_reversed() {
        h.bytes(b"reversed");
        for &r in plan.reversed() {
            h.u64(u64::from(r));
        }
    }
}

/// The signed stride of dimension `k` of `plan` as a 64-bit CUDA constant expression: `Sull`
/// forward, `(0ull - Sull)` (its two's complement) reversed; `0ull` for a dimension the plan
/// lacks. Offsets summed from the origin with these wrap to the exact offsets.
fn stride_lit(plan: &StridedBlock, k: usize) -> String {
    match (plan.strides().get(k), plan.reversed().get(k)) {
        (Some(&s), Some(true)) => format!("(0ull - {s}ull)"),
        (Some(&s), _) => format!("{s}ull"),
        (None, _) => "0ull".to_string(),
    }
}

/// ` , reversed [..]` for a plan with a reversed dimension, for the comments of the source;
/// nothing for a forward plan (whose source stays as it was).
fn reversed_note(plan: &StridedBlock) -> String {
    if plan.has_reversed() {
        format!(
            ", reversed {:?} (origin {})",
            plan.reversed(),
            plan.origin()
        )
    } else {
        String::new()
    }
}

/// The hash that names the kernels of `plan` launched as `shape`: it covers the plan, the word
/// size, the mapping (flat or by axes) and the thread-block shape, everything baked into the
/// code.
pub fn plan_hash(plan: &StridedBlock, shape: &LaunchShape) -> u64 {
    let mut h = Fnv64::new();
    h.u64(CODEGEN_VERSION).bytes(b"plan");
    hash_plan(&mut h, plan, shape.word_size());
    h.u64(u64::from(shape.is_flat()));
    for d in shape.block() {
        h.u64(u64::from(d));
    }
    h.finish()
}

/// Checks `word_size` and makes the launch shape with `make` (a [`LaunchShape`] constructor).
fn check_word(
    op: &'static str,
    plan: &StridedBlock,
    word_size: u32,
    limits: &LaunchLimits,
    make: fn(&StridedBlock, u32, &LaunchLimits) -> Result<LaunchShape>,
) -> Result<LaunchShape> {
    if word_type(word_size).is_none() {
        return Err(invalid(
            op,
            format!("word size {word_size} is not 1, 2, 4, 8 or 16"),
        ));
    }
    make(plan, word_size, limits)
}

/// The kernels of one plan at one word size: CUDA C source and the names of its two
/// `extern "C"` kernels, `pack(const unsigned char* src, unsigned char* dst)` and
/// `unpack(const unsigned char* src, unsigned char* dst)` (both take the buffers' base
/// addresses; the plan's start offset is baked in). The channel kernels of a plan
/// ([`generate_channel`]) come as the same kind of value: names, source and shape, and more
/// arguments after those two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanKernels {
    source: String,
    pack_name: String,
    unpack_name: String,
    shape: LaunchShape,
}

impl PlanKernels {
    /// The CUDA C source (no `#include`).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Name of the kernel that packs (strided `src` -> packed `dst`).
    pub fn pack_name(&self) -> &str {
        &self.pack_name
    }

    /// Name of the kernel that unpacks (packed `src` -> strided `dst`).
    pub fn unpack_name(&self) -> &str {
        &self.unpack_name
    }

    /// Name of the kernel for `dir`.
    pub fn name(&self, dir: Direction) -> &str {
        match dir {
            Direction::Pack => &self.pack_name,
            Direction::Unpack => &self.unpack_name,
        }
    }

    /// The launch shape the kernels implement ([`LaunchShape::for_plan`]: flat or by axes):
    /// launch with its [`block`](LaunchShape::block) (baked into the code) and any grid,
    /// [`grid`](LaunchShape::grid) or smaller ([`cap_grid`]). A no-op shape means the plan is
    /// empty: launch nothing.
    pub fn shape(&self) -> &LaunchShape {
        &self.shape
    }

    /// Bytes per word.
    pub fn word_size(&self) -> u32 {
        self.shape.word_size()
    }
}

/// Generates the pack and unpack kernels of `plan` in words of `word_size` bytes, launched as
/// [`LaunchShape::for_plan`] under [`LaunchLimits::CUDA`] (flat, or by axes with blocks of up to
/// 1024 threads).
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `word_size` is not 1, 2, 4, 8 or
/// 16 or does not divide the plan (see [`StridedBlock::word_size`]).
pub fn generate(plan: &StridedBlock, word_size: u32) -> Result<PlanKernels> {
    generate_with_limits(plan, word_size, &LaunchLimits::CUDA)
}

/// As [`generate`], with the launch shape of [`LaunchShape::for_plan`] under `limits` (for
/// example thread blocks of at most 256 threads). The mapping and the block shape are baked into
/// the code and hashed into the kernel names.
///
/// # Errors
/// As [`generate`]; also [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a zero
/// limit.
pub fn generate_with_limits(
    plan: &StridedBlock,
    word_size: u32,
    limits: &LaunchLimits,
) -> Result<PlanKernels> {
    let b = bodies("codegen::generate", plan, word_size, limits, false)?;
    let pack_name = format!("dtp_pack_{:016x}", b.hash);
    let unpack_name = format!("dtp_unpack_{:016x}", b.hash);
    let mut src = b.source;
    for (dir, name) in [
        (Direction::Pack, &pack_name),
        (Direction::Unpack, &unpack_name),
    ] {
        let _ = writeln!(
            src,
            "extern \"C\" __global__ void __launch_bounds__({threads}) {name}(\n\
             \x20   const unsigned char* __restrict__ src, unsigned char* __restrict__ dst)\n{{\n\
             \x20   dtp_body_{d}(src, dst, {args});\n}}\n",
            threads = b.threads,
            d = dir.name(),
            args = b.args,
        );
    }
    Ok(PlanKernels {
        source: src,
        pack_name,
        unpack_name,
        shape: b.shape,
    })
}

/// The part of a plan's source its kernels share: the prelude, the plan's comments and the
/// pack and unpack bodies (`dtp_body_pack`, `dtp_body_unpack`), with the shape they implement,
/// the plan's hash, the threads per block and the arguments an entry passes its body after
/// the two buffers. `peer_input`: the unpack body reads its packed side without `__restrict__`,
/// so that its loads go through the coherent path (the packed bytes are written by another
/// GPU while the kernel runs, [`generate_channel`]).
struct Bodies {
    source: String,
    shape: LaunchShape,
    hash: u64,
    threads: u32,
    args: String,
}

fn bodies(
    op: &'static str,
    plan: &StridedBlock,
    word_size: u32,
    limits: &LaunchLimits,
    peer_input: bool,
) -> Result<Bodies> {
    let shape = check_word(op, plan, word_size, limits, LaunchShape::for_plan)?;
    let hash = plan_hash(plan, &shape);
    let mut src = String::new();
    prelude(&mut src);
    let _ = writeln!(
        src,
        "// plan: start {}, block length {} bytes, counts {:?}, strides {:?}{}; {}-byte words",
        plan.start(),
        plan.block_len(),
        plan.counts(),
        plan.strides(),
        reversed_note(plan),
        word_size
    );
    let _ = writeln!(
        src,
        "// launch: {}, block {:?}, grid up to {:?} (any grid is correct)\n",
        if shape.is_flat() { "flat" } else { "by axes" },
        shape.block(),
        shape.grid()
    );
    let threads = shape.threads_per_block();
    if shape.is_flat() {
        flat_offset(&mut src, "dtp_flat_offset", plan, shape.word_size());
    }
    let mut args = String::new();
    for dir in [Direction::Pack, Direction::Unpack] {
        let body = format!("dtp_body_{}", dir.name());
        let from = src.len();
        args = if shape.is_flat() {
            flat_body(
                &mut src,
                &body,
                "dtp_flat_offset",
                &shape,
                Move::Packed(dir),
            );
            format!(
                "(dtp_u64)blockIdx.x * {threads}ull + threadIdx.x, (dtp_u64)gridDim.x * {threads}ull"
            )
        } else {
            region_body(&mut src, &body, plan, &shape, dir);
            "blockIdx.x, blockIdx.y, blockIdx.z,\n\
             \x20       threadIdx.x, threadIdx.y, threadIdx.z, gridDim.x, gridDim.y, gridDim.z"
                .to_string()
        };
        if peer_input && dir == Direction::Unpack {
            let emitted = src.split_off(from);
            src.push_str(&emitted.replacen(
                "const unsigned char* __restrict__ in",
                "const unsigned char* in",
                1,
            ));
        }
    }
    Ok(Bodies {
        source: src,
        shape,
        hash,
        threads,
        args,
    })
}

/// Generates the channel kernels of `plan` in words of `word_size` bytes, launched as
/// [`LaunchShape::for_plan`] under `limits`: the plan's pack followed by a store into a flag once
/// every thread block has packed, and the plan's unpack preceded by a wait for that flag. Two
/// processes on two GPUs order a pack and the peer's unpack with them, both launched at once.
/// Their names are the plan kernels' with `chan_` after `dtp_` (the same hash); they take more
/// arguments than [`PlanKernels`]' two:
///
/// - pack: `(const unsigned char* src, unsigned char* dst, unsigned long long seq,
///   unsigned int* arrived, unsigned long long* flag)`: the plan's pack; then every thread
///   fences system-wide, and the last thread block to count itself into `arrived` sets it back
///   to 0 and stores `seq` into `flag` (a word of another GPU's memory, mapped).
/// - unpack: `(const unsigned char* src, unsigned char* dst, unsigned long long seq,
///   const unsigned long long* flag, const unsigned long long* cancel,
///   unsigned long long* gave_up, unsigned long long patience_ns)`: one thread of each block
///   waits until `*flag >= seq` (then the block unpacks), or `*cancel >= seq`, or `patience_ns`
///   of the GPU's clock have passed (then it stores `seq` into `gave_up`); a block that does
///   not unpack writes nothing. The flag is checked first, so a flag and a call-off word both
///   at `seq` unpack. Each block decides for itself: a launch called off or given up while its
///   flag arrived may have unpacked some blocks and not others. The waiting thread fences
///   system-wide after the flag (its writer is another GPU), and the packed side is read after
///   that fence and a barrier, without `__restrict__` (through the coherent path: another GPU
///   writes it while the kernel waits).
///
/// The kernels are only of use for a plan with something to move: for an empty plan (a no-op
/// [`shape`](PlanKernels::shape)) nothing is launched, so nothing would store the flag.
///
/// # Errors
/// As [`generate_with_limits`].
pub fn generate_channel(
    plan: &StridedBlock,
    word_size: u32,
    limits: &LaunchLimits,
) -> Result<PlanKernels> {
    let b = bodies("codegen::generate_channel", plan, word_size, limits, true)?;
    let pack_name = format!("dtp_chan_pack_{:016x}", b.hash);
    let unpack_name = format!("dtp_chan_unpack_{:016x}", b.hash);
    let (threads, args) = (b.threads, &b.args);
    let mut src = b.source;
    let _ = writeln!(
        src,
        "static __device__ __forceinline__ dtp_u64 dtp_clock()\n{{\n\
         \x20   dtp_u64 t;\n\
         \x20   asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n\
         \x20   return t;\n}}\n\n\
         extern \"C\" __global__ void __launch_bounds__({threads}) {pack_name}(\n\
         \x20   const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,\n\
         \x20   dtp_u64 seq, unsigned int* arrived, dtp_u64* flag)\n{{\n\
         \x20   dtp_body_pack(src, dst, {args});\n\
         \x20   // Every thread's stores before the block counts itself; the last block signals.\n\
         \x20   __threadfence_system();\n\
         \x20   __syncthreads();\n\
         \x20   if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {{\n\
         \x20       const unsigned int blocks = gridDim.x * gridDim.y * gridDim.z;\n\
         \x20       if (atomicAdd(arrived, 1u) == blocks - 1u) {{\n\
         \x20           *arrived = 0u;\n\
         \x20           __threadfence_system();\n\
         \x20           *(volatile dtp_u64*)flag = seq;\n\
         \x20       }}\n\
         \x20   }}\n}}\n\n\
         extern \"C\" __global__ void __launch_bounds__({threads}) {unpack_name}(\n\
         \x20   const unsigned char* src, unsigned char* __restrict__ dst,\n\
         \x20   dtp_u64 seq, const dtp_u64* flag, const dtp_u64* cancel, dtp_u64* gave_up,\n\
         \x20   dtp_u64 patience_ns)\n{{\n\
         \x20   __shared__ int go;\n\
         \x20   if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {{\n\
         \x20       const dtp_u64 t0 = dtp_clock();\n\
         \x20       int g = 0;\n\
         \x20       for (;;) {{\n\
         \x20           if (*(const volatile dtp_u64*)flag >= seq) {{ g = 1; break; }}\n\
         \x20           if (*(const volatile dtp_u64*)cancel >= seq) break;\n\
         \x20           if (dtp_clock() - t0 > patience_ns) {{ *(volatile dtp_u64*)gave_up = seq; break; }}\n\
         \x20       }}\n\
         \x20       go = g;\n\
         \x20       // Acquire: the flag's writer is another GPU, so the fence is system-wide.\n\
         \x20       __threadfence_system();\n\
         \x20   }}\n\
         \x20   __syncthreads();\n\
         \x20   if (go) {{\n\
         \x20       dtp_body_unpack(src, dst, {args});\n\
         \x20   }}\n}}\n"
    );
    Ok(PlanKernels {
        source: src,
        pack_name,
        unpack_name,
        shape: b.shape,
    })
}

/// `grid` reduced so that it has at most `max_blocks` thread blocks (at least one per axis):
/// z first, then y, then x, so that x keeps covering the words of a block for as long as
/// possible. The grid-stride loops of the kernels make any grid correct; a grid of a few waves
/// of the device gives each thread several blocks to move, which hides memory latency better
/// than one word per thread. An empty grid (a no-op shape) stays empty.
pub fn cap_grid(grid: [u32; 3], max_blocks: u64) -> [u32; 3] {
    if grid.contains(&0) {
        return grid;
    }
    let cap = max_blocks.max(1);
    let [gx, gy, gz] = grid.map(u64::from);
    if gx * gy * gz <= cap {
        return grid;
    }
    let gz2 = (cap / (gx * gy)).clamp(1, gz);
    if gx * gy * gz2 <= cap {
        return [gx as u32, gy as u32, gz2 as u32];
    }
    let gy2 = (cap / gx).clamp(1, gy);
    if gx * gy2 <= cap {
        return [gx as u32, gy2 as u32, 1];
    }
    [cap.min(gx) as u32, 1, 1]
}

fn prelude(src: &mut String) {
    src.push_str(
        "// Generated by datatype-pack. Do not edit.\n\
         typedef unsigned long long dtp_u64;\n\
         struct alignas(16) dtp_w16 { unsigned int a, b, c, d; };\n\n",
    );
}

/// Emits `static __device__ void NAME(in, out, bx, by, bz, tx, ty, tz, gx, gy, gz)`, the loops
/// by axes of one plan for one thread whose block and thread indices and grid size are given.
fn region_body(
    src: &mut String,
    name: &str,
    plan: &StridedBlock,
    shape: &LaunchShape,
    dir: Direction,
) {
    let w = u64::from(shape.word_size());
    let wt = word_type(shape.word_size()).unwrap_or("unsigned char");
    let [ex, ey, ez] = shape.extents();
    let [bx, by, bz] = shape.block();
    let s = |k: usize| stride_lit(plan, k);
    let _ = writeln!(
        src,
        "static __device__ __forceinline__ void {name}(\n\
         \x20   const unsigned char* __restrict__ in, unsigned char* __restrict__ out,\n\
         \x20   dtp_u64 bx, dtp_u64 by, dtp_u64 bz, dtp_u64 tx, dtp_u64 ty, dtp_u64 tz,\n\
         \x20   dtp_u64 gx, dtp_u64 gy, dtp_u64 gz)\n{{"
    );
    if plan.is_empty() {
        src.push_str("    // Empty plan: nothing to move.\n}\n\n");
        return;
    }
    let _ = writeln!(src, "    typedef {wt} word;");
    let _ = writeln!(
        src,
        "    constexpr dtp_u64 W = {w}ull, BL = {bl}ull, START = {start}ull;\n\
         \x20   constexpr dtp_u64 EX = {ex}ull, EY = {ey}ull, EZ = {ez}ull;\n\
         \x20   constexpr dtp_u64 S0 = {s0}, S1 = {s1};\n\
         \x20   constexpr dtp_u64 BX = {bx}ull, BY = {by}ull, BZ = {bz}ull;",
        bl = plan.block_len(),
        // The first packed block (the plan's start unless a dimension is reversed).
        start = plan.origin(),
        s0 = s(0),
        s1 = s(1),
    );
    src.push_str("    const dtp_u64 GX = gx, GY = gy, GZ = gz;\n");
    src.push_str(
        "    const dtp_u64 x0 = bx * BX + tx, y0 = by * BY + ty, z0 = bz * BZ + tz;\n\
         \x20   if (x0 >= EX || y0 >= EY || z0 >= EZ) return;\n\
         \x20   const dtp_u64 sx = GX * BX, sy = GY * BY, sz = GZ * BZ;\n\
         \x20   (void)sx;\n",
    );
    // Pack reads the strided side and writes the packed side; unpack the other way round.
    let in_is_strided = dir == Direction::Pack;
    let copy = |src: &mut String, indent: &str, pairs: &[(String, String)]| {
        copy_words(src, indent, in_is_strided, pairs);
    };
    let outer = plan.counts().get(2..).unwrap_or(&[]);
    let open_outer = |src: &mut String| {
        if outer.is_empty() {
            src.push_str("        { const dtp_u64 o = 0, so = 0;\n");
        } else {
            let total: u64 = outer.iter().product();
            let _ = writeln!(
                src,
                "        for (dtp_u64 o = 0; o < {total}ull; ++o) {{\n\
                 \x20           dtp_u64 rest = o, so = 0;"
            );
            for (k, &n) in outer.iter().enumerate() {
                let stride = s(k + 2);
                if k + 1 == outer.len() {
                    let _ = writeln!(src, "            so += rest * {stride};");
                } else {
                    let _ = writeln!(
                        src,
                        "            so += (rest % {n}ull) * {stride}; rest /= {n}ull;"
                    );
                }
            }
        }
    };
    let u = UNROLL;
    // Nest B is needed only when a block has more words than a full x span can take: when the
    // words fit one thread block's x extent, the grid always covers them (gridDim.x >= 1).
    let has_b = ex > u64::from(bx);
    if has_b {
        src.push_str("    if (sx >= EX) {\n");
    } else {
        src.push_str("    {\n");
    }
    {
        // Nest A: one word per thread and block, the loop over blocks (y) unrolled.
        src.push_str("        // Each thread moves word x0 of blocks y0, y0 + sy, ...\n");
        src.push_str("        const dtp_u64 xb = x0 * W;\n");
        open_outer(src);
        src.push_str(
            "            for (dtp_u64 z = z0; z < EZ; z += sz) {\n\
             \x20               const dtp_u64 sb = START + so + z * S1 + xb;\n",
        );
        src.push_str("                const dtp_u64 pb = (z + EZ * o) * (EY * BL) + xb;\n");
        src.push_str("                dtp_u64 y = y0;\n");
        let _ = writeln!(
            src,
            "                for (; y + {m}ull * sy < EY; y += {u}ull * sy) {{",
            m = u - 1
        );
        let pairs: Vec<(String, String)> = (0..u)
            .map(|i| {
                let yi = if i == 0 {
                    "y".to_string()
                } else {
                    format!("(y + {i}ull * sy)")
                };
                (format!("sb + {yi} * S0"), format!("pb + {yi} * BL"))
            })
            .collect();
        copy(src, "                    ", &pairs);
        src.push_str(
            "                }\n\
             \x20               for (; y < EY; y += sy) {\n",
        );
        copy(
            src,
            "                    ",
            &[("sb + y * S0".to_string(), "pb + y * BL".to_string())],
        );
        src.push_str("                }\n            }\n        }\n");
    }
    if has_b {
        src.push_str("    } else {\n        // Blocks longer than the grid's x span: the loop over words is unrolled.\n");
        open_outer(src);
        src.push_str(
            "            for (dtp_u64 z = z0; z < EZ; z += sz) {\n\
             \x20               for (dtp_u64 y = y0; y < EY; y += sy) {\n\
             \x20                   const dtp_u64 sb = START + so + z * S1 + y * S0;\n",
        );
        src.push_str("                    const dtp_u64 pb = ((z + EZ * o) * EY + y) * BL;\n");
        src.push_str("                    dtp_u64 x = x0;\n");
        let _ = writeln!(
            src,
            "                    for (; x + {m}ull * sx < EX; x += {u}ull * sx) {{",
            m = u - 1
        );
        let pairs: Vec<(String, String)> = (0..u)
            .map(|i| {
                let xi = if i == 0 {
                    "x".to_string()
                } else {
                    format!("(x + {i}ull * sx)")
                };
                (format!("sb + {xi} * W"), format!("pb + {xi} * W"))
            })
            .collect();
        copy(src, "                        ", &pairs);
        src.push_str(
            "                    }\n\
             \x20                   for (; x < EX; x += sx) {\n",
        );
        copy(
            src,
            "                        ",
            &[("sb + x * W".to_string(), "pb + x * W".to_string())],
        );
        src.push_str("                    }\n                }\n            }\n        }\n");
    }
    src.push_str("    }\n}\n\n");
}

/// Emits the copies of `pairs` (strided offset, packed or destination offset), all loads first,
/// then all stores: from the strided side to the other if `in_is_strided`, else the other way.
fn copy_words(src: &mut String, indent: &str, in_is_strided: bool, pairs: &[(String, String)]) {
    for (i, (so, po)) in pairs.iter().enumerate() {
        let from = if in_is_strided { so } else { po };
        let _ = writeln!(
            src,
            "{indent}const word v{i} = *reinterpret_cast<const word*>(in + ({from}));"
        );
    }
    for (i, (so, po)) in pairs.iter().enumerate() {
        let to = if in_is_strided { po } else { so };
        let _ = writeln!(
            src,
            "{indent}*reinterpret_cast<word*>(out + ({to})) = v{i};"
        );
    }
}

/// Emits `static __device__ dtp_u64 NAME(dtp_u64 i)`: the strided byte offset of packed word `i`
/// of `plan` in words of `w` bytes (the flat contract of [`LaunchShape`]).
fn flat_offset(src: &mut String, name: &str, plan: &StridedBlock, w: u32) {
    // The first packed block: the plan's start unless a dimension is reversed (a contiguous
    // plan never is).
    let start = plan.origin();
    let _ = writeln!(
        src,
        "// The strided offset of packed word i.\n\
         static __device__ __forceinline__ dtp_u64 {name}(dtp_u64 i)\n{{"
    );
    if plan.is_contiguous() {
        let _ = writeln!(
            src,
            "    // Contiguous: packed word i is strided word i.\n    return {start}ull + i * {w}ull;\n}}\n"
        );
        return;
    }
    let words = plan.block_len() / u64::from(w);
    let _ = writeln!(
        src,
        "    dtp_u64 b = i / {words}ull; // the block\n\
         \x20   dtp_u64 off = {start}ull + (i % {words}ull) * {w}ull;"
    );
    let last = plan.ndims() - 1;
    for (k, &n) in plan.counts().iter().enumerate() {
        let s = stride_lit(plan, k);
        if k == last {
            let _ = writeln!(src, "    off += b * {s};");
        } else {
            let _ = writeln!(src, "    off += (b % {n}ull) * {s}; b /= {n}ull;");
        }
    }
    src.push_str("    return off;\n}\n\n");
}

/// Emits `static __device__ void NAME(in, out, i, step)`, the flat loop of one thread: packed
/// words `i, i + step, ...` below the shape's word count, the strided offset of each from the
/// function `offset` ([`flat_offset`]). A copy (`mv`) writes each word at its strided offset
/// plus `DELTA` rather than at its packed offset.
fn flat_body(src: &mut String, name: &str, offset: &str, shape: &LaunchShape, mv: Move) {
    let w = shape.word_size();
    let wt = word_type(w).unwrap_or("unsigned char");
    let n = shape.extents()[0];
    let _ = writeln!(
        src,
        "static __device__ __forceinline__ void {name}(\n\
         \x20   const unsigned char* __restrict__ in, unsigned char* __restrict__ out,\n\
         \x20   dtp_u64 i, dtp_u64 step)\n{{\n\
         \x20   typedef {wt} word;\n\
         \x20   constexpr dtp_u64 W = {w}ull, N = {n}ull;"
    );
    if let Move::Copy { delta } = mv {
        let _ = writeln!(
            src,
            "    constexpr dtp_u64 DELTA = {delta}ull; // destination start - source start, mod 2^64"
        );
    }
    // Pack and copy read the (source's) strided side; unpack reads the packed side.
    let in_is_strided = mv != Move::Packed(Direction::Unpack);
    let pair = |j: String| {
        let to = match mv {
            Move::Packed(_) => format!("({j}) * W"),
            Move::Copy { .. } => format!("{offset}({j}) + DELTA"),
        };
        (format!("{offset}({j})"), to)
    };
    let u = UNROLL;
    let _ = writeln!(
        src,
        "    // A capped grid: several words per thread, {u} loads in flight.\n\
         \x20   for (; i + {m}ull * step < N; i += {u}ull * step) {{",
        m = u - 1
    );
    let pairs: Vec<(String, String)> = (0..u)
        .map(|k| {
            pair(if k == 0 {
                "i".to_string()
            } else {
                format!("i + {k}ull * step")
            })
        })
        .collect();
    copy_words(src, "        ", in_is_strided, &pairs);
    src.push_str("    }\n    for (; i < N; i += step) {\n");
    copy_words(src, "        ", in_is_strided, &[pair("i".to_string())]);
    src.push_str("    }\n}\n\n");
}

/// Kernels that move many regions in one launch: a one-dimensional grid whose thread blocks are
/// partitioned among the regions, each region with its own plan (and so its own start offset
/// in the strided buffer), its own offset in the packed buffer, its own word size and its own
/// fixed grid. Launch `pack`/`unpack` with `grid = (grid_blocks(), 1, 1)` and
/// `block = (block_threads(), 1, 1)` and the two buffers' base addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FusedKernels {
    source: String,
    pack_name: String,
    unpack_name: String,
    block_threads: u32,
    grid_blocks: u32,
    spans: Vec<(u64, u64)>,
}

impl FusedKernels {
    /// The CUDA C source (no `#include`).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Name of the fused pack kernel (strided `src` -> packed `dst`).
    pub fn pack_name(&self) -> &str {
        &self.pack_name
    }

    /// Name of the fused unpack kernel (packed `src` -> strided `dst`).
    pub fn unpack_name(&self) -> &str {
        &self.unpack_name
    }

    /// Name of the kernel for `dir`.
    pub fn name(&self, dir: Direction) -> &str {
        match dir {
            Direction::Pack => &self.pack_name,
            Direction::Unpack => &self.unpack_name,
        }
    }

    /// Threads per thread block (x only) to launch with.
    pub fn block_threads(&self) -> u32 {
        self.block_threads
    }

    /// Thread blocks (x only) to launch; 0 when every region is empty (launch nothing).
    pub fn grid_blocks(&self) -> u32 {
        self.grid_blocks
    }

    /// For each region, the half-open range `first..end` of thread blocks it owns.
    pub fn spans(&self) -> &[(u64, u64)] {
        &self.spans
    }
}

/// The launch shape of one region of a fused launch ([`generate_fused`],
/// [`generate_fused_copy`]): [`LaunchShape::flat`], whatever the plan (3 words per block, more
/// than two dimensions and contiguous plans included). Its grid is the region's full grid,
/// which the fused launch caps at the region's share of the budget; its block is the thread
/// count of every region ([`FLAT_THREADS`](crate::plan::FLAT_THREADS), or fewer under
/// smaller limits).
///
/// A region never keeps the mapping by axes: flat, a warp moves 32 consecutive packed words
/// whatever the block length (by axes, a 3-word block pads x to 4 threads), and the spans of
/// the fused grid are 1-D already. The price is a few multiplications by constants per word
/// (the divisions by the counts), which the one-thread-per-word kernel pays too.
///
/// # Errors
/// As [`LaunchShape::flat`].
pub fn fused_shape(
    plan: &StridedBlock,
    word_size: u32,
    limits: &LaunchLimits,
) -> Result<LaunchShape> {
    LaunchShape::flat(plan, word_size, limits)
}

/// Generates fused pack and unpack kernels for `regions`, region `i` moved in words of
/// `words[i]` bytes by the flat loop of its [`fused_shape`] under `limits`, with at most about
/// `max_blocks` thread blocks in all (each non-empty region gets at least one; the budget is
/// shared in proportion to packed bytes).
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `words` and `regions` differ in
/// length or a word size does not suit its region: it must divide the plan (see
/// [`StridedBlock::word_size`]) and the region's packed offset.
pub fn generate_fused(
    regions: &[Region],
    words: &[u32],
    max_blocks: u64,
    limits: &LaunchLimits,
) -> Result<FusedKernels> {
    const OP: &str = "codegen::generate_fused";
    check_word_count(OP, regions.len(), words.len())?;
    let mut shapes = Vec::with_capacity(regions.len());
    for (r, &w) in regions.iter().zip(words) {
        let shape = check_word(OP, r.plan(), w, limits, fused_shape)?;
        if r.packed_offset() % u64::from(w) != 0 {
            return Err(invalid(
                OP,
                format!(
                    "word size {w} does not divide the packed offset {}",
                    r.packed_offset()
                ),
            ));
        }
        shapes.push(shape);
    }
    let bytes: Vec<u64> = regions.iter().map(|r| r.plan().packed_size()).collect();
    let part = partition(&shapes, &bytes, max_blocks);
    let block_threads = part.block_threads;

    let mut h = Fnv64::new();
    h.u64(CODEGEN_VERSION).bytes(b"fused");
    h.u64(regions.len() as u64).u64(u64::from(block_threads));
    for ((r, &w), g) in regions.iter().zip(words).zip(&part.grids) {
        hash_plan(&mut h, r.plan(), w);
        h.u64(r.packed_offset());
        for &d in g {
            h.u64(u64::from(d));
        }
    }
    let hash = h.finish();
    let pack_name = format!("dtp_fpack_{hash:016x}");
    let unpack_name = format!("dtp_funpack_{hash:016x}");

    let mut src = String::new();
    prelude(&mut src);
    let _ = writeln!(
        src,
        "// fused: {} regions, {} threads per block\n",
        regions.len(),
        block_threads
    );
    for (i, (r, shape)) in regions.iter().zip(&shapes).enumerate() {
        if part.spans[i].0 == part.spans[i].1 {
            continue;
        }
        let _ = writeln!(
            src,
            "// region {i}: plan start {}, block length {}, counts {:?}, strides {:?}{}; packed at \
             {}; {} words of {} bytes, flat over thread blocks {:?}",
            r.plan().start(),
            r.plan().block_len(),
            r.plan().counts(),
            r.plan().strides(),
            reversed_note(r.plan()),
            r.packed_offset(),
            shape.extents()[0],
            shape.word_size(),
            part.spans[i],
        );
        let offset = format!("dtp_r{i}_offset");
        flat_offset(&mut src, &offset, r.plan(), shape.word_size());
        for dir in [Direction::Pack, Direction::Unpack] {
            let body = format!("dtp_r{i}_{}", dir.name());
            flat_body(&mut src, &body, &offset, shape, Move::Packed(dir));
        }
    }
    for dir in [Direction::Pack, Direction::Unpack] {
        let name = match dir {
            Direction::Pack => &pack_name,
            Direction::Unpack => &unpack_name,
        };
        fused_entry(&mut src, name, &part, &shapes, |i| {
            let off = regions[i].packed_offset();
            let (a_in, a_out) = match dir {
                Direction::Pack => ("src".to_string(), format!("dst + {off}ull")),
                Direction::Unpack => (format!("src + {off}ull"), "dst".to_string()),
            };
            (format!("dtp_r{i}_{}", dir.name()), a_in, a_out)
        });
    }
    Ok(FusedKernels {
        source: src,
        pack_name,
        unpack_name,
        block_threads,
        grid_blocks: part.grid_blocks(),
        spans: part.spans,
    })
}

fn check_word_count(op: &'static str, regions: usize, words: usize) -> Result<()> {
    if regions != words {
        return Err(invalid(
            op,
            format!("{words} word sizes for {regions} regions"),
        ));
    }
    Ok(())
}

/// How the thread blocks of a fused launch are shared among its regions.
#[derive(Debug, Clone)]
struct Partition {
    /// Each region's grid, `[blocks, 1, 1]` for its flat shape (all zero for an empty region).
    grids: Vec<[u32; 3]>,
    /// Threads per thread block: the most any non-empty region's shape has.
    block_threads: u32,
    /// Each region's thread blocks, `first..end`, one region after another.
    spans: Vec<(u64, u64)>,
}

impl Partition {
    fn grid_blocks(&self) -> u32 {
        let n = self.spans.last().map_or(0, |s| s.1);
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

/// The grids of a fused launch: each non-empty region's full grid capped (by [`cap_grid`]) at
/// its share of a budget of about `max_blocks` thread blocks, shared in proportion to `bytes`
/// (at least one block each).
fn partition(shapes: &[LaunchShape], bytes: &[u64], max_blocks: u64) -> Partition {
    let total: u64 = bytes.iter().sum();
    // Keep the sum of the blocks well within grid x (2^31 - 1).
    let budget = max_blocks.clamp(1, 1 << 30);
    let mut grids = Vec::with_capacity(shapes.len());
    for (shape, &b) in shapes.iter().zip(bytes) {
        if shape.is_noop() {
            grids.push([0u32; 3]);
            continue;
        }
        let share = (u128::from(budget) * u128::from(b)).div_ceil(u128::from(total.max(1))) as u64;
        grids.push(cap_grid(shape.grid(), share.max(1)));
    }
    let block_threads = shapes
        .iter()
        .filter(|s| !s.is_noop())
        .map(LaunchShape::threads_per_block)
        .max()
        .unwrap_or(1);
    let mut spans = Vec::with_capacity(grids.len());
    let mut next = 0u64;
    for g in &grids {
        let n: u64 = g.iter().map(|&d| u64::from(d)).product();
        spans.push((next, next + n));
        next += n;
    }
    Partition {
        grids,
        block_threads,
        spans,
    }
}

/// Emits the `extern "C"` kernel `name(src, dst)` of a fused launch: thread `t` of thread block
/// `b` runs the flat body of the region whose span `first..end` holds `b`, from word
/// `(b - first) * T + t` in steps of `(end - first) * T` (`T` the region's threads per block).
/// `call(i)` gives region `i`'s body and its two buffer arguments.
fn fused_entry(
    src: &mut String,
    name: &str,
    part: &Partition,
    shapes: &[LaunchShape],
    call: impl Fn(usize) -> (String, String, String),
) {
    let block_threads = part.block_threads;
    let _ = writeln!(
        src,
        "extern \"C\" __global__ void __launch_bounds__({block_threads}) {name}(\n\
         \x20   const unsigned char* __restrict__ src, unsigned char* __restrict__ dst)\n{{\n\
         \x20   const dtp_u64 b = blockIdx.x, t = threadIdx.x;"
    );
    for (i, (shape, &(first, end))) in shapes.iter().zip(&part.spans).enumerate() {
        if first == end {
            continue;
        }
        let tpb = shape.threads_per_block();
        let (body, a_in, a_out) = call(i);
        // Every region of a fused launch has the same threads per block (see `fused_shape`);
        // should one have fewer, its extra threads sit out.
        let guard = if tpb < block_threads {
            format!("if (t < {tpb}ull) ")
        } else {
            String::new()
        };
        let _ = writeln!(
            src,
            "    if (b < {end}ull) {{\n\
             \x20       {guard}{body}({a_in}, {a_out}, (b - {first}ull) * {tpb}ull + t, {step}ull);\n\
             \x20       return;\n\
             \x20   }}",
            step = (end - first) * u64::from(tpb),
        );
    }
    src.push_str("}\n\n");
}

/// A fused strided-to-strided copy kernel: one launch moves every [`CopyRegion`], each region
/// with its own source plan, destination start, word size and fixed grid, thread blocks
/// partitioned among the regions as in [`FusedKernels`]. Launch [`name`](Self::name) with
/// `grid = (grid_blocks(), 1, 1)`, `block = (block_threads(), 1, 1)` and the base addresses of
/// the source and the destination buffer (the same address for a copy within one buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FusedCopyKernels {
    source: String,
    name: String,
    block_threads: u32,
    grid_blocks: u32,
    spans: Vec<(u64, u64)>,
}

impl FusedCopyKernels {
    /// The CUDA C source (no `#include`).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Name of the copy kernel, `(const unsigned char* src, unsigned char* dst)`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Threads per thread block (x only) to launch with.
    pub fn block_threads(&self) -> u32 {
        self.block_threads
    }

    /// Thread blocks (x only) to launch; 0 when every region is empty (launch nothing).
    pub fn grid_blocks(&self) -> u32 {
        self.grid_blocks
    }

    /// For each region, the half-open range `first..end` of thread blocks it owns.
    pub fn spans(&self) -> &[(u64, u64)] {
        &self.spans
    }
}

/// Generates a fused copy kernel for `regions`, region `i` moved in words of `words[i]` bytes
/// (see [`CopyRegion::word_size`]) by the flat loop of its source plan's [`fused_shape`] under
/// `limits`, with at most about `max_blocks` thread blocks in all (shared
/// in proportion to the bytes each region copies, at least one each), as
/// [`generate_fused`].
///
/// # Errors
/// The errors of [`crate::fused::check_copy`] (a destination past `u64`, or of another shape
/// than its source); [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `words` and
/// `regions` differ in length or a word size does not suit its region: it must divide the
/// source plan (see [`StridedBlock::word_size`]) and the destination start.
pub fn generate_fused_copy(
    regions: &[CopyRegion],
    words: &[u32],
    max_blocks: u64,
    limits: &LaunchLimits,
) -> Result<FusedCopyKernels> {
    const OP: &str = "codegen::generate_fused_copy";
    check_word_count(OP, regions.len(), words.len())?;
    crate::fused::check_copy(regions)?;
    let mut shapes = Vec::with_capacity(regions.len());
    for (r, &w) in regions.iter().zip(words) {
        let shape = check_word(OP, r.src(), w, limits, fused_shape)?;
        if !r.src().is_empty() && r.dst_start() % u64::from(w) != 0 {
            return Err(invalid(
                OP,
                format!(
                    "word size {w} does not divide the destination start {}",
                    r.dst_start()
                ),
            ));
        }
        shapes.push(shape);
    }
    let bytes: Vec<u64> = regions.iter().map(CopyRegion::bytes).collect();
    let part = partition(&shapes, &bytes, max_blocks);

    let mut h = Fnv64::new();
    h.u64(CODEGEN_VERSION).bytes(b"fcopy");
    h.u64(regions.len() as u64)
        .u64(u64::from(part.block_threads));
    for ((r, &w), g) in regions.iter().zip(words).zip(&part.grids) {
        hash_plan(&mut h, r.src(), w);
        h.u64(r.dst_start());
        for &d in g {
            h.u64(u64::from(d));
        }
    }
    let name = format!("dtp_fcopy_{:016x}", h.finish());

    let mut src = String::new();
    prelude(&mut src);
    let _ = writeln!(
        src,
        "// fused copy: {} regions, {} threads per block\n",
        regions.len(),
        part.block_threads
    );
    for (i, (r, shape)) in regions.iter().zip(&shapes).enumerate() {
        if part.spans[i].0 == part.spans[i].1 {
            continue;
        }
        let _ = writeln!(
            src,
            "// region {i}: source start {}, destination start {}, block length {}, counts {:?}, \
             strides {:?}{}; {} words of {} bytes, flat over thread blocks {:?}",
            r.src().start(),
            r.dst_start(),
            r.src().block_len(),
            r.src().counts(),
            r.src().strides(),
            reversed_note(r.src()),
            shape.extents()[0],
            shape.word_size(),
            part.spans[i],
        );
        let offset = format!("dtp_c{i}_offset");
        flat_offset(&mut src, &offset, r.src(), shape.word_size());
        flat_body(
            &mut src,
            &format!("dtp_c{i}_copy"),
            &offset,
            shape,
            Move::Copy {
                delta: r.dst_start().wrapping_sub(r.src().start()),
            },
        );
    }
    fused_entry(&mut src, &name, &part, &shapes, |i| {
        (
            format!("dtp_c{i}_copy"),
            "src".to_string(),
            "dst".to_string(),
        )
    });
    Ok(FusedCopyKernels {
        source: src,
        name,
        block_threads: part.block_threads,
        grid_blocks: part.grid_blocks(),
        spans: part.spans,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> StridedBlock {
        StridedBlock::new(32, 16, vec![70_000, 3, 5], vec![512, 70_000 * 512, 1 << 30]).unwrap()
    }

    #[test]
    fn source_is_deterministic_and_has_no_headers() {
        let a = generate(&plan(), 8).unwrap();
        let b = generate(&plan(), 8).unwrap();
        assert_eq!(a, b);
        assert!(!a.source().contains("#include"));
        assert!(a.source().contains("void __launch_bounds__"));
        assert!(a.source().contains(&format!(
            "extern \"C\" __global__ void __launch_bounds__(512) {}(",
            a.pack_name()
        )));
        assert!(a.source().contains(&format!("{}(", a.unpack_name())));
        assert_eq!(a.word_size(), 8);
        // Balanced braces and parentheses.
        let count = |c: char| a.source().chars().filter(|&x| x == c).count();
        assert_eq!(count('{'), count('}'));
        assert_eq!(count('('), count(')'));
    }

    #[test]
    fn constants_are_baked_in() {
        let k = generate(&plan(), 8).unwrap();
        let s = k.source();
        for needle in [
            "W = 8ull",
            "BL = 16ull",
            "START = 32ull",
            "EX = 2ull",
            "EY = 70000ull",
            "EZ = 3ull",
            "S0 = 512ull",
            "S1 = 35840000ull",
            "o < 5ull",
            "rest * 1073741824ull",
            "typedef unsigned long long word;",
        ] {
            assert!(s.contains(needle), "{needle} missing from\n{s}");
        }
        let k = generate(&plan(), 16).unwrap();
        assert!(k.source().contains("typedef dtp_w16 word;"));
        assert!(k.source().contains("EX = 1ull"));
    }

    #[test]
    fn reversed_dimensions_step_down_from_the_origin() {
        // plan() with its first and third dimensions reversed: the first packed block is the
        // highest of both, and their strides are baked in as two's complements.
        let p = plan();
        let r = StridedBlock::with_reversed(
            p.start(),
            p.block_len(),
            p.counts().to_vec(),
            p.strides().to_vec(),
            vec![true, false, true],
        )
        .unwrap();
        let origin = 32 + 69_999 * 512 + 4 * (1u64 << 30);
        assert_eq!(r.origin(), origin);
        let k = generate(&r, 8).unwrap();
        let s = k.source();
        for needle in [
            format!("START = {origin}ull"),
            "S0 = (0ull - 512ull), S1 = 35840000ull".to_string(),
            "rest * (0ull - 1073741824ull)".to_string(),
            "reversed [true, false, true]".to_string(),
        ] {
            assert!(s.contains(&needle), "{needle} missing from\n{s}");
        }
        // Another plan, so other names; the forward plan's source does not mention directions.
        let f = generate(&p, 8).unwrap();
        assert_ne!(k.pack_name(), f.pack_name());
        assert!(!f.source().contains("reversed") && !f.source().contains("0ull - "));
        // Flat: the digits of the block index times the signed strides.
        let flat =
            StridedBlock::with_reversed(8, 8, vec![4, 3], vec![16, 64], vec![true, true]).unwrap();
        let k = generate(&flat, 8).unwrap();
        assert!(k.shape().is_flat());
        let s = k.source();
        for needle in [
            "dtp_u64 off = 184ull + (i % 1ull) * 8ull;",
            "off += (b % 4ull) * (0ull - 16ull); b /= 4ull;",
            "off += b * (0ull - 64ull);",
        ] {
            assert!(s.contains(needle), "{needle} missing from\n{s}");
        }
    }

    #[test]
    fn names_depend_on_plan_and_word() {
        let p = plan();
        let q = StridedBlock::new(32, 16, vec![70_000, 3, 5], vec![512, 70_000 * 512, 1 << 31])
            .unwrap();
        let names: Vec<String> = [(&p, 8), (&p, 16), (&q, 8), (&p, 4)]
            .iter()
            .map(|(pl, w)| generate(pl, *w).unwrap().pack_name().to_string())
            .collect();
        for i in 0..names.len() {
            for j in i + 1..names.len() {
                assert_ne!(names[i], names[j]);
            }
        }
        let k = generate(&p, 8).unwrap();
        assert_ne!(k.pack_name(), k.unpack_name());
        // The thread-block shape is part of the code, and so of the name.
        let small = LaunchLimits {
            max_threads_per_block: 256,
            ..LaunchLimits::CUDA
        };
        let k256 = generate_with_limits(&p, 8, &small).unwrap();
        assert_eq!(k256.shape().threads_per_block(), 256);
        assert!(k256.source().contains("__launch_bounds__(256)"));
        assert_ne!(k.pack_name(), k256.pack_name());
        assert!(k.pack_name().starts_with("dtp_pack_"));
        assert_eq!(k.pack_name().len(), "dtp_pack_".len() + 16);
    }

    #[test]
    fn refuses_bad_words() {
        let p = StridedBlock::new(4, 8, vec![3], vec![16]).unwrap();
        assert!(generate(&p, 8).is_err());
        assert!(generate(&p, 3).is_err());
        assert!(generate(&p, 32).is_err());
        assert!(generate(&p, 4).is_ok());
    }

    #[test]
    fn empty_plan_generates_no_loops() {
        let k = generate(&StridedBlock::empty(), 16).unwrap();
        assert!(k.shape().is_noop());
        assert!(k.source().contains("Empty plan"));
        assert!(!k.source().contains("for ("));
    }

    #[test]
    fn long_blocks_get_the_word_loop() {
        // 32 blocks of 1 MiB + 48 bytes (65,539 words, a long launch, so mapped by axes): more
        // words than a thread block's x extent.
        let p = StridedBlock::new(0, (1 << 20) + 48, vec![32], vec![1 << 21]).unwrap();
        let k = generate(&p, 16).unwrap();
        assert!(!k.shape().is_flat());
        assert!(k.source().contains("if (sx >= EX)"));
        assert!(k.source().contains("x += 4ull * sx"));
        // Short blocks: only the unrolled loop over blocks.
        let p = StridedBlock::new(0, 24, vec![1 << 20], vec![512]).unwrap();
        let k = generate(&p, 8).unwrap();
        assert!(!k.shape().is_flat());
        assert!(!k.source().contains("if (sx >= EX)"));
        assert!(k.source().contains("y += 4ull * sy"));
    }

    #[test]
    fn channel_kernels_wrap_the_plan_bodies() {
        let flat = StridedBlock::new(0, 4 << 20, vec![], vec![]).unwrap();
        let mut flats = Vec::new();
        for (p, w) in [(plan(), 8), (flat, 16)] {
            let c = generate_channel(&p, w, &LaunchLimits::CUDA).unwrap();
            let k = generate(&p, w).unwrap();
            assert_eq!(c, generate_channel(&p, w, &LaunchLimits::CUDA).unwrap());
            assert_eq!(c.shape(), k.shape());
            assert_eq!(c.word_size(), w);
            assert_eq!(c.name(Direction::Pack), c.pack_name());
            assert_eq!(c.name(Direction::Unpack), c.unpack_name());
            flats.push(c.shape().is_flat());
            let s = c.source();
            assert!(!s.contains("#include"));
            // Named by the plan's hash, beside the plan's own kernels.
            assert_eq!(
                c.pack_name(),
                k.pack_name().replace("dtp_pack_", "dtp_chan_pack_")
            );
            assert_eq!(
                c.unpack_name(),
                k.unpack_name().replace("dtp_unpack_", "dtp_chan_unpack_")
            );
            for needle in [
                format!("{}(\n    const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,\n    dtp_u64 seq, unsigned int* arrived, dtp_u64* flag)", c.pack_name()),
                format!("{}(\n    const unsigned char* src, unsigned char* __restrict__ dst,\n    dtp_u64 seq, const dtp_u64* flag, const dtp_u64* cancel, dtp_u64* gave_up,\n    dtp_u64 patience_ns)", c.unpack_name()),
                "if (atomicAdd(arrived, 1u) == blocks - 1u)".to_string(),
                "*(volatile dtp_u64*)flag = seq;".to_string(),
                "if (*(const volatile dtp_u64*)flag >= seq) { g = 1; break; }".to_string(),
                "if (*(const volatile dtp_u64*)cancel >= seq) break;".to_string(),
                "*(volatile dtp_u64*)gave_up = seq;".to_string(),
                "mov.u64 %0, %%globaltimer;".to_string(),
                // The pack's release (every thread, then the last block) and the unpack's
                // acquire after the flag, all system-wide.
                "    __threadfence_system();\n    __syncthreads();".to_string(),
                "*arrived = 0u;\n            __threadfence_system();\n            *(volatile dtp_u64*)flag = seq;".to_string(),
                "go = g;\n        // Acquire: the flag's writer is another GPU, so the fence is system-wide.\n        __threadfence_system();\n    }\n    __syncthreads();\n    if (go) {\n        dtp_body_unpack(src, dst,".to_string(),
            ] {
                assert!(s.contains(&needle), "{needle} missing from\n{s}");
            }
            // The unpack body reads the packed side coherently (another GPU writes it while
            // the kernel waits); the pack body keeps `__restrict__`.
            assert!(s.contains(
                "dtp_body_unpack(\n    const unsigned char* in, unsigned char* __restrict__ out"
            ));
            assert!(s.contains("dtp_body_pack(\n    const unsigned char* __restrict__ in, unsigned char* __restrict__ out"));
            let count = |ch: char| s.chars().filter(|&x| x == ch).count();
            assert_eq!(count('{'), count('}'));
            assert_eq!(count('('), count(')'));
        }
        assert_eq!(flats, [false, true], "by axes, then flat");
        assert!(generate_channel(&plan(), 3, &LaunchLimits::CUDA).is_err());
    }

    #[test]
    fn flat_kernels() {
        // Contiguous: the strided offset is the packed one plus the start.
        let p = StridedBlock::new(0, 4 << 20, vec![], vec![]).unwrap();
        let k = generate(&p, 16).unwrap();
        assert!(k.shape().is_flat());
        let s = k.source();
        for needle in [
            "// launch: flat, block [256, 1, 1], grid up to [1024, 1, 1]",
            "return 0ull + i * 16ull;",
            "constexpr dtp_u64 W = 16ull, N = 262144ull;",
            "typedef dtp_w16 word;",
            "i + 3ull * step < N; i += 4ull * step",
            "for (; i < N; i += step)",
            "(dtp_u64)blockIdx.x * 256ull + threadIdx.x, (dtp_u64)gridDim.x * 256ull",
            "*reinterpret_cast<word*>(out + ((i) * W)) = v0;",
            "*reinterpret_cast<word*>(out + (dtp_flat_offset(i))) = v0;",
        ] {
            assert!(s.contains(needle), "{needle} missing from\n{s}");
        }
        assert!(s.contains(&format!(
            "extern \"C\" __global__ void __launch_bounds__(256) {}(",
            k.pack_name()
        )));
        assert!(s.contains(&format!("{}(", k.unpack_name())));
        assert!(!s.contains("blockIdx.y") && !s.contains("% "));
        let count = |c: char| s.chars().filter(|&x| x == c).count();
        assert_eq!(count('{'), count('}'));
        assert_eq!(count('('), count(')'));
        // A non-canonical contiguous plan: the same offsets, no digits.
        let q = StridedBlock::new(4, 4, vec![3, 1, 2], vec![4, 99, 12]).unwrap();
        let k = generate(&q, 4).unwrap();
        assert!(k.shape().is_flat() && k.source().contains("return 4ull + i * 4ull;"));
        // 1-byte blocks at stride 512, and 2-byte blocks in two dimensions: digits of the
        // block index by constants.
        let p = StridedBlock::new(3, 1, vec![1 << 20], vec![512]).unwrap();
        let s = generate(&p, 1).unwrap().source().to_string();
        assert!(s.contains("dtp_u64 b = i / 1ull;") && s.contains("off += b * 512ull;"));
        assert!(s.contains("dtp_u64 off = 3ull + (i % 1ull) * 1ull;"));
        let p = StridedBlock::new(2, 2, vec![1000, 70], vec![6, 7000]).unwrap();
        let s = generate(&p, 2).unwrap().source().to_string();
        assert!(s.contains("off += (b % 1000ull) * 6ull; b /= 1000ull;"));
        assert!(s.contains("off += b * 7000ull;"));
        // Fewer threads per block under smaller limits.
        let small = LaunchLimits {
            max_threads_per_block: 128,
            ..LaunchLimits::CUDA
        };
        let k = generate_with_limits(&p, 2, &small).unwrap();
        assert_eq!(k.shape().block(), [128, 1, 1]);
        assert!(k.source().contains("__launch_bounds__(128)"));
        assert!(k.source().contains("(dtp_u64)gridDim.x * 128ull"));
        // The mapping is part of the name.
        let flat = LaunchShape::flat(&p, 2, &LaunchLimits::CUDA).unwrap();
        let mut axes = LaunchShape::with_limits(&p, 2, &small).unwrap();
        assert_eq!(axes.block(), [1, 128, 1]);
        assert_ne!(plan_hash(&p, &flat), plan_hash(&p, &axes));
        axes = LaunchShape::with_limits(&p, 2, &LaunchLimits::CUDA).unwrap();
        assert_ne!(plan_hash(&p, &flat), plan_hash(&p, &axes));
        assert_eq!(
            plan_hash(&p, &flat),
            plan_hash(
                &p,
                &LaunchShape::for_plan(&p, 2, &LaunchLimits::CUDA).unwrap()
            )
        );
    }

    #[test]
    fn grid_caps() {
        assert_eq!(cap_grid([1, 8192, 1], 1000), [1, 1000, 1]);
        assert_eq!(cap_grid([2, 100, 100], 1000), [2, 100, 5]);
        assert_eq!(cap_grid([2, 100, 100], 150), [2, 75, 1]);
        assert_eq!(cap_grid([5000, 3, 1], 1000), [1000, 1, 1]);
        assert_eq!(cap_grid([4, 4, 4], 1000), [4, 4, 4]);
        assert_eq!(cap_grid([0, 0, 0], 10), [0, 0, 0]);
        assert_eq!(cap_grid([7, 7, 7], 0), [1, 1, 1]);
    }

    #[test]
    fn fused_partitions_blocks() {
        let a = StridedBlock::new(0, 24, vec![1000], vec![4096]).unwrap();
        let b = StridedBlock::new(64, 8, vec![10, 10], vec![16, 1000]).unwrap();
        let regions = crate::fused::layout(&[a.clone(), StridedBlock::empty(), b.clone()]).unwrap();
        let k = generate_fused(&regions, &[8, 16, 8], 100, &LaunchLimits::CUDA).unwrap();
        assert_eq!(k.spans().len(), 3);
        assert_eq!(k.spans()[1].0, k.spans()[1].1);
        assert_eq!(k.spans()[0].1, k.spans()[2].0);
        assert_eq!(u64::from(k.grid_blocks()), k.spans()[2].1);
        assert!(k.grid_blocks() >= 2);
        let s = k.source();
        assert!(!s.contains("#include"));
        assert!(s.contains(&format!("dst + {}ull", regions[2].packed_offset())));
        assert!(s.contains(&format!("src + {}ull", regions[2].packed_offset())));
        assert!(s.contains("dtp_r0_pack") && s.contains("dtp_r2_unpack"));
        assert!(!s.contains("dtp_r1_pack"));
        assert_eq!(
            k,
            generate_fused(&regions, &[8, 16, 8], 100, &LaunchLimits::CUDA).unwrap()
        );
        let other = generate_fused(&regions, &[8, 16, 4], 100, &LaunchLimits::CUDA).unwrap();
        assert_ne!(k.pack_name(), other.pack_name());
        assert!(generate_fused(&regions, &[8, 16], 100, &LaunchLimits::CUDA).is_err());
        // A word size must divide the packed offset.
        let shifted = [Region::new(a, 4)];
        assert!(generate_fused(&shifted, &[8], 100, &LaunchLimits::CUDA).is_err());
        assert!(generate_fused(&shifted, &[4], 100, &LaunchLimits::CUDA).is_ok());
    }

    #[test]
    fn fused_copy_kernel() {
        let a = StridedBlock::new(8, 24, vec![100], vec![4096]).unwrap();
        let b = StridedBlock::new(64, 8, vec![10, 10, 3], vec![16, 1000, 20_000]).unwrap();
        let regions = [
            CopyRegion::new(a.clone(), 1 << 20),
            CopyRegion::new(StridedBlock::empty(), 3),
            // Written below its source: DELTA wraps.
            CopyRegion::new(b.clone(), 32),
        ];
        let words: Vec<u32> = regions.iter().map(|r| r.word_size(256, 256)).collect();
        assert_eq!(words, [8, 1, 8]);
        let k = generate_fused_copy(&regions, &words, 100, &LaunchLimits::CUDA).unwrap();
        assert_eq!(
            k,
            generate_fused_copy(&regions, &words, 100, &LaunchLimits::CUDA).unwrap()
        );
        assert!(k.name().starts_with("dtp_fcopy_"));
        assert_eq!(k.name().len(), "dtp_fcopy_".len() + 16);
        assert_eq!(k.spans().len(), 3);
        assert_eq!(k.spans()[1].0, k.spans()[1].1);
        assert_eq!(k.spans()[0].1, k.spans()[2].0);
        assert_eq!(u64::from(k.grid_blocks()), k.spans()[2].1);
        let s = k.source();
        assert!(!s.contains("#include"));
        assert!(s.contains(&format!(
            "extern \"C\" __global__ void __launch_bounds__({}) {}(",
            k.block_threads(),
            k.name()
        )));
        assert!(s.contains(&format!("DELTA = {}ull", (1u64 << 20) - 8)));
        assert!(s.contains(&format!("DELTA = {}ull", 32u64.wrapping_sub(64))));
        // Flat: each word's destination is its source offset plus DELTA.
        assert!(s.contains("*reinterpret_cast<word*>(out + (dtp_c0_offset(i) + DELTA)) = v0;"));
        assert!(
            s.contains("const word v0 = *reinterpret_cast<const word*>(in + (dtp_c2_offset(i)));")
        );
        assert!(s.contains("dtp_c0_copy(src, dst,") && s.contains("dtp_c2_copy(src, dst,"));
        assert!(!s.contains("dtp_c1_copy") && !s.contains("dtp_c1_offset"));
        // No packed offsets anywhere.
        assert!(!s.contains("* W)") && !s.contains("blockIdx.y"));
        let count = |c: char| s.chars().filter(|&x| x == c).count();
        assert_eq!(count('{'), count('}'));
        assert_eq!(count('('), count(')'));
        // The packing kernels carry no copy constants.
        let f = generate_fused(
            &crate::fused::layout(std::slice::from_ref(&a)).unwrap(),
            &[8],
            100,
            &LaunchLimits::CUDA,
        )
        .unwrap();
        assert!(!f.source().contains("DELTA"));
        // The destination start is part of the code, and so of the name.
        let moved = [
            CopyRegion::new(a.clone(), (1 << 20) + 8),
            regions[1].clone(),
            regions[2].clone(),
        ];
        let k2 = generate_fused_copy(&moved, &words, 100, &LaunchLimits::CUDA).unwrap();
        assert_ne!(k.name(), k2.name());
        // Long blocks get the word loop, with the destination offsets.
        let long = [CopyRegion::new(
            StridedBlock::new(0, 1 << 20, vec![4], vec![1 << 21]).unwrap(),
            1 << 24,
        )];
        let k = generate_fused_copy(&long, &[16], 1000, &LaunchLimits::CUDA).unwrap();
        assert!(k
            .source()
            .contains("constexpr dtp_u64 W = 16ull, N = 262144ull;"));
        assert!(k
            .source()
            .contains("dtp_u64 b = i / 65536ull; // the block"));
        assert!(k
            .source()
            .contains("dtp_c0_offset(i + 3ull * step) + DELTA"));
    }

    /// The regions of a fused launch as its flat kernels see them: (plan, word size) each.
    type FlatRegions<'a> = Vec<(&'a StridedBlock, u32)>;

    /// Runs the fused flat contract on the CPU, thread by thread, as the generated entry and
    /// bodies do: thread `t` of block `b` finds the region whose span holds `b`, starts on word
    /// `(b - first) * T + t` and strides by `(end - first) * T`. Calls `visit(region, i,
    /// strided offset)` for every word a thread moves; returns each region's hit count per
    /// packed word.
    fn emulate_fused(
        spans: &[(u64, u64)],
        block_threads: u32,
        grid_blocks: u32,
        regions: &FlatRegions<'_>,
        limits: &LaunchLimits,
        mut visit: impl FnMut(usize, u64, u64),
    ) -> Vec<Vec<u32>> {
        let shapes: Vec<LaunchShape> = regions
            .iter()
            .map(|&(p, w)| fused_shape(p, w, limits).unwrap())
            .collect();
        let mut hits: Vec<Vec<u32>> = shapes
            .iter()
            .map(|l| vec![0; l.extents()[0] as usize])
            .collect();
        for b in 0..u64::from(grid_blocks) {
            let r = spans
                .iter()
                .position(|&(first, end)| first < end && b < end)
                .expect("every block belongs to a region");
            let (first, end) = spans[r];
            assert!(b >= first);
            let tpb = u64::from(shapes[r].threads_per_block());
            assert!(tpb <= u64::from(block_threads));
            let (p, w) = regions[r];
            for t in 0..tpb {
                let (mut i, step) = ((b - first) * tpb + t, (end - first) * tpb);
                while i < shapes[r].extents()[0] {
                    visit(r, i, crate::plan::flat_word_offset(p, u64::from(w), i));
                    hits[r][i as usize] += 1;
                    i += step;
                }
            }
        }
        hits
    }

    /// Halo-like regions with 3-word blocks (24-byte blocks in 8-byte words, 12-byte blocks in
    /// 4-byte words), mixed word sizes, more than two dimensions, a contiguous region and an
    /// empty one; disjoint in the strided buffer.
    fn flat_test_plans() -> Vec<StridedBlock> {
        vec![
            // The x face of a halo: 24-byte blocks, rows, planes, quantities.
            StridedBlock::new(8, 24, vec![6, 5, 2], vec![80, 80 * 7, 80 * 7 * 6]).unwrap(),
            StridedBlock::new(7_000, 12, vec![9, 4], vec![20, 200]).unwrap(),
            StridedBlock::new(8_001, 3, vec![11], vec![5]).unwrap(),
            StridedBlock::empty(),
            StridedBlock::new(8_200, 16, vec![4, 3, 2, 2], vec![32, 160, 500, 1_100]).unwrap(),
            StridedBlock::new(12_000, 1_000, vec![], vec![]).unwrap(),
            StridedBlock::new(13_002, 2, vec![50], vec![6]).unwrap(),
            // Negative strides: the inner dimension descending, then the outer one.
            StridedBlock::with_reversed(14_000, 8, vec![5, 3], vec![16, 100], vec![true, false])
                .unwrap(),
            StridedBlock::with_reversed(
                14_400,
                4,
                vec![3, 2, 2],
                vec![8, 40, 96],
                vec![false, true, true],
            )
            .unwrap(),
        ]
    }

    #[test]
    fn fused_flat_contract_matches_the_cpu_reference() {
        let plans = flat_test_plans();
        let regions = crate::fused::layout(&plans).unwrap();
        let extent = crate::fused::extent_end(&regions) as usize;
        let packed = crate::fused::packed_size(&regions) as usize;
        let tiny = LaunchLimits {
            max_grid: [3, 2, 2],
            max_block: [8, 2, 2],
            max_threads_per_block: 8,
        };
        let strided: Vec<u8> = (0..extent).map(|i| (i * 7 + 3) as u8).collect();
        let packed_in: Vec<u8> = (0..packed).map(|i| (i * 5 + 1) as u8).collect();
        // Word sizes: the widest each region allows, and 1 byte for all.
        let widest: Vec<u32> = regions
            .iter()
            .map(|r| r.plan().word_size(0, r.packed_offset()))
            .collect();
        assert!(widest.contains(&8) && widest.contains(&4) && widest.contains(&1));
        for words in [widest.clone(), vec![1; regions.len()]] {
            for limits in [&tiny, &LaunchLimits::CUDA] {
                // One block per region (the grid-stride loop does everything), a few, all.
                for max_blocks in [1, 2, 7, 40, u64::MAX] {
                    let k = generate_fused(&regions, &words, max_blocks, limits).unwrap();
                    let flat: FlatRegions<'_> = regions
                        .iter()
                        .map(|r| r.plan())
                        .zip(words.clone())
                        .collect();
                    if max_blocks == 1 {
                        // One block each for the non-empty regions.
                        assert!(k.spans().iter().all(|&(a, b)| b - a <= 1));
                    }
                    let mut got = vec![0u8; packed];
                    let hits = emulate_fused(
                        k.spans(),
                        k.block_threads(),
                        k.grid_blocks(),
                        &flat,
                        limits,
                        |r, i, so| {
                            let w = u64::from(words[r]);
                            let d = (regions[r].packed_offset() + i * w) as usize;
                            let so = so as usize;
                            got[d..d + w as usize].copy_from_slice(&strided[so..so + w as usize]);
                        },
                    );
                    assert!(
                        hits.iter().flatten().all(|&h| h == 1),
                        "{words:?} {max_blocks}"
                    );
                    let mut want = vec![0u8; packed];
                    crate::fused::pack(&regions, &strided, &mut want).unwrap();
                    assert_eq!(got, want, "pack {words:?} {max_blocks}");
                    // Unpack: the same visits, the other way.
                    let mut got = vec![0xA5u8; extent];
                    emulate_fused(
                        k.spans(),
                        k.block_threads(),
                        k.grid_blocks(),
                        &flat,
                        limits,
                        |r, i, so| {
                            let w = u64::from(words[r]) as usize;
                            let s = regions[r].packed_offset() as usize + i as usize * w;
                            let so = so as usize;
                            got[so..so + w].copy_from_slice(&packed_in[s..s + w]);
                        },
                    );
                    let mut want = vec![0xA5u8; extent];
                    crate::fused::unpack(&regions, &packed_in, &mut want).unwrap();
                    assert_eq!(got, want, "unpack {words:?} {max_blocks}");
                }
            }
        }
    }

    #[test]
    fn fused_flat_copy_contract_matches_the_cpu_reference() {
        // Each region copied 20,000 bytes up (some destinations less aligned than sources).
        let shift = [
            20_000u64, 20_004, 20_001, 20_000, 20_008, 20_002, 20_000, 20_008, 20_004,
        ];
        let regions: Vec<CopyRegion> = flat_test_plans()
            .into_iter()
            .zip(shift)
            .map(|(p, d)| {
                let at = p.start() + d;
                CopyRegion::new(p, if at == d { 0 } else { at })
            })
            .collect();
        let len = 40_000usize;
        let src: Vec<u8> = (0..len).map(|i| (i * 11 + 7) as u8).collect();
        let mut want = src.clone();
        crate::fused::copy(&regions, &src, &mut want).unwrap();
        let mut in_place = src.clone();
        crate::fused::copy_in_place(&regions, &mut in_place).unwrap();
        assert_eq!(in_place, want, "sources and destinations are disjoint");
        let widest: Vec<u32> = regions.iter().map(|r| r.word_size(0, 0)).collect();
        assert!(widest.contains(&4) && widest.contains(&1) && widest.contains(&8));
        let tiny = LaunchLimits {
            max_grid: [2, 1, 1],
            max_block: [4, 1, 1],
            max_threads_per_block: 4,
        };
        for words in [widest, vec![1; regions.len()]] {
            for limits in [&tiny, &LaunchLimits::CUDA] {
                for max_blocks in [1, 3, u64::MAX] {
                    let k = generate_fused_copy(&regions, &words, max_blocks, limits).unwrap();
                    let flat: FlatRegions<'_> =
                        regions.iter().map(|r| r.src()).zip(words.clone()).collect();
                    let mut got = src.clone();
                    let hits = emulate_fused(
                        k.spans(),
                        k.block_threads(),
                        k.grid_blocks(),
                        &flat,
                        limits,
                        |r, _, so| {
                            let w = words[r] as usize;
                            let delta = regions[r]
                                .dst_start()
                                .wrapping_sub(regions[r].src().start());
                            let d = so.wrapping_add(delta) as usize;
                            let so = so as usize;
                            got[d..d + w].copy_from_slice(&src[so..so + w]);
                        },
                    );
                    assert!(hits.iter().flatten().all(|&h| h == 1));
                    assert_eq!(got, want, "{words:?} {max_blocks}");
                }
            }
        }
    }

    #[test]
    fn fused_kernels_are_flat() {
        // A halo's x face: 24-byte blocks (3 words of 8 bytes) at a stride of 2096 bytes, 256
        // rows, 256 planes, 8 quantities; and its y face, 2096-byte rows.
        let x = StridedBlock::new(
            24,
            24,
            vec![256, 256, 8],
            vec![2096, 2096 * 262, 2096 * 262 * 262],
        )
        .unwrap();
        let y = StridedBlock::new(
            2096 * 3,
            2048,
            vec![3, 256, 8],
            vec![2096, 2096 * 262, 2096 * 262 * 262],
        )
        .unwrap();
        let regions = crate::fused::layout(&[x.clone(), y.clone()]).unwrap();
        let k = generate_fused(&regions, &[8, 8], u64::MAX, &LaunchLimits::CUDA).unwrap();
        let s = k.source();
        // 256-thread blocks, each region its full grid: one thread per word.
        assert_eq!(k.block_threads(), 256);
        let words = [x.packed_size() / 8, y.packed_size() / 8];
        assert_eq!(k.spans()[0], (0, words[0].div_ceil(256)));
        assert_eq!(k.spans()[1].1 - k.spans()[1].0, words[1].div_ceil(256));
        for needle in [
            "extern \"C\" __global__ void __launch_bounds__(256) ",
            "dtp_u64 b = i / 3ull; // the block",
            "dtp_u64 off = 24ull + (i % 3ull) * 8ull;",
            "off += (b % 256ull) * 2096ull; b /= 256ull;",
            "dtp_r0_pack(src, dst + 0ull, (b - 0ull) * 256ull + t, ",
            "*reinterpret_cast<word*>(out + ((i) * W)) = v0;",
            "const word v0 = *reinterpret_cast<const word*>(in + (dtp_r1_offset(i)));",
            "i + 3ull * step < N; i += 4ull * step",
        ] {
            assert!(s.contains(needle), "{needle} missing from\n{s}");
        }
        assert!(s.contains(&format!("off += b * {}ull;", 2096u64 * 262 * 262)));
        assert!(!s.contains("blockIdx.y") && !s.contains("if (t <"));
        let count = |c: char| s.chars().filter(|&x| x == c).count();
        assert_eq!(count('{'), count('}'));
        assert_eq!(count('('), count(')'));
        // Fewer threads under smaller limits.
        let small = LaunchLimits {
            max_threads_per_block: 64,
            ..LaunchLimits::CUDA
        };
        let k = generate_fused(&regions, &[8, 8], 10, &small).unwrap();
        assert_eq!(k.block_threads(), 64);
        assert!(k.source().contains("__launch_bounds__(64)"));
        // The budget is shared in proportion to bytes.
        let k = generate_fused(&regions, &[8, 8], 1000, &LaunchLimits::CUDA).unwrap();
        let n: Vec<u64> = k.spans().iter().map(|&(a, b)| b - a).collect();
        let ratio = (x.packed_size() as f64 / y.packed_size() as f64) * n[1] as f64 / n[0] as f64;
        assert!((0.95..1.05).contains(&ratio), "{n:?}");
        assert!(n.iter().sum::<u64>() <= 1002);
    }

    #[test]
    fn fused_flat_counts_beyond_u32() {
        // Shape arithmetic only: 2^43 one-byte words in one region, 2^36 in another.
        let big =
            StridedBlock::new(0, 1, vec![1 << 20, 1 << 20, 8], vec![2, 1 << 21, 1 << 41]).unwrap();
        let other = StridedBlock::new(1 << 45, 3, vec![1 << 30, 64], vec![4, 1 << 32]).unwrap();
        let regions = crate::fused::layout(&[big.clone(), other.clone()]).unwrap();
        for max_blocks in [1, 1056, u64::MAX] {
            let k = generate_fused(&regions, &[1, 1], max_blocks, &LaunchLimits::CUDA).unwrap();
            let total = k.spans()[1].1;
            assert_eq!(u64::from(k.grid_blocks()), total);
            assert!(total <= (1 << 30) + 2, "{total}");
            let s = k.source();
            assert!(s.contains(&format!("N = {}ull;", big.packed_size())));
            assert!(s.contains(&format!("N = {}ull;", other.packed_size())));
            for (r, &(first, end)) in k.spans().iter().enumerate() {
                assert!(end > first);
                let step = (end - first) * u64::from(k.block_threads());
                // The entry's step and start are 64-bit constants and expressions.
                assert!(s.contains(&format!(
                    "dtp_r{r}_pack(src, dst + {}ull, (b - {first}ull) * 256ull + t, {step}ull);",
                    regions[r].packed_offset()
                )));
                // Fewer threads than words: the grid-stride loop takes thread t over words
                // t, t + step, ..., many trips each, beyond 2^32 words.
                let n = regions[r].plan().packed_size();
                assert!(step < n && n.div_ceil(step) > 1, "{step} {n}");
            }
        }
        // The unrolled loop's bound cannot overflow: i + 3 * step stays far below 2^64.
        assert!(big.packed_size() + 3 * ((1u64 << 30) * 256) < u64::MAX / 2);
    }

    #[test]
    fn fused_copy_words_and_refusals() {
        // Source start 0, destination start 4: 8-byte blocks move in 4-byte words.
        let p = StridedBlock::new(0, 8, vec![10], vec![16]).unwrap();
        let r = [CopyRegion::new(p.clone(), 4)];
        assert_eq!(r[0].word_size(0, 0), 4);
        assert!(generate_fused_copy(&r, &[8], 10, &LaunchLimits::CUDA).is_err());
        assert!(generate_fused_copy(&r, &[4], 10, &LaunchLimits::CUDA).is_ok());
        // An unaligned source start limits the word too.
        let q = StridedBlock::new(2, 8, vec![10], vec![16]).unwrap();
        let r2 = [CopyRegion::new(q, 0)];
        assert_eq!(r2[0].word_size(0, 0), 2);
        assert!(generate_fused_copy(&r2, &[4], 10, &LaunchLimits::CUDA).is_err());
        assert!(generate_fused_copy(&r2, &[2], 10, &LaunchLimits::CUDA).is_ok());
        // And so do the buffers' addresses.
        assert_eq!(r[0].word_size(0, 0x1001), 1);
        // One word size per region.
        assert!(generate_fused_copy(&r, &[4, 4], 10, &LaunchLimits::CUDA).is_err());
        assert!(generate_fused_copy(&r, &[3], 10, &LaunchLimits::CUDA).is_err());
        // A destination past u64 is refused before any code is generated.
        let far = [CopyRegion::new(p.clone(), u64::MAX - 16)];
        assert!(matches!(
            generate_fused_copy(&far, &[1], 10, &LaunchLimits::CUDA),
            Err(crate::Error::Overflow { .. })
        ));
        // Source and destination of different shapes cannot be paired.
        let other = StridedBlock::new(0, 8, vec![10], vec![24]).unwrap();
        assert!(CopyRegion::between(p.clone(), &other).is_err());
        let ok = CopyRegion::between(p, &StridedBlock::new(4, 8, vec![10], vec![16]).unwrap());
        assert_eq!(ok.unwrap(), r[0]);
        // Nothing to copy: an empty launch.
        let k = generate_fused_copy(&[], &[], 10, &LaunchLimits::CUDA).unwrap();
        assert_eq!(k.grid_blocks(), 0);
    }
}
