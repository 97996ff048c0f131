//! CUDA C source generated from a plan: one `pack` and one `unpack` kernel per
//! ([`StridedBlock`], word size), fused kernels that pack many plans in one launch, and fused
//! strided-to-strided copy kernels ([`generate_fused_copy`]).
//!
//! Pure Rust: nothing here needs CUDA. The `gpu` module (feature `cuda`) compiles
//! the sources with NVRTC and launches them.
//!
//! # The generated kernels
//!
//! Each kernel implements the [`LaunchShape`] contract of its plan: grid-stride loops with x over
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
//! every packed word is written once. A copy kernel runs the same loop nests over its source
//! plan and writes each word at its strided offset plus a baked-in constant `DELTA` (the
//! destination start minus the source start, modulo 2^64; the wrapping sum is the destination
//! offset) instead of its packed offset.
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
const CODEGEN_VERSION: u64 = 1;

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

/// What a region body does with the words its loops visit.
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
}

/// The hash that names the kernels of `plan` moved in words of `word_size` bytes by thread
/// blocks of shape `block`.
pub fn plan_hash(plan: &StridedBlock, word_size: u32, block: [u32; 3]) -> u64 {
    let mut h = Fnv64::new();
    h.u64(CODEGEN_VERSION).bytes(b"plan");
    hash_plan(&mut h, plan, word_size);
    for d in block {
        h.u64(u64::from(d));
    }
    h.finish()
}

fn check_word(
    op: &'static str,
    plan: &StridedBlock,
    word_size: u32,
    limits: &LaunchLimits,
) -> Result<LaunchShape> {
    if word_type(word_size).is_none() {
        return Err(invalid(
            op,
            format!("word size {word_size} is not 1, 2, 4, 8 or 16"),
        ));
    }
    LaunchShape::with_limits(plan, word_size, limits)
}

/// The kernels of one plan at one word size: CUDA C source and the names of its two
/// `extern "C"` kernels, `pack(const unsigned char* src, unsigned char* dst)` and
/// `unpack(const unsigned char* src, unsigned char* dst)` (both take the buffers' base
/// addresses; the plan's start offset is baked in).
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

    /// The launch shape the kernels implement: launch with its [`block`](LaunchShape::block)
    /// (baked into the code) and any grid, [`grid`](LaunchShape::grid) or smaller
    /// ([`cap_grid`]). A no-op shape means the plan is empty: launch nothing.
    pub fn shape(&self) -> &LaunchShape {
        &self.shape
    }

    /// Bytes per word.
    pub fn word_size(&self) -> u32 {
        self.shape.word_size()
    }
}

/// Generates the pack and unpack kernels of `plan` in words of `word_size` bytes, with the
/// thread-block shape of [`LaunchShape::new`] (blocks of up to 1024 threads).
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `word_size` is not 1, 2, 4, 8 or
/// 16 or does not divide the plan (see [`StridedBlock::word_size`]).
pub fn generate(plan: &StridedBlock, word_size: u32) -> Result<PlanKernels> {
    generate_with_limits(plan, word_size, &LaunchLimits::CUDA)
}

/// As [`generate`], with the thread-block shape of [`LaunchShape::with_limits`] under `limits`
/// (for example thread blocks of at most 256 threads). The block shape is baked into the code
/// and hashed into the kernel names.
///
/// # Errors
/// As [`generate`]; also [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a zero
/// limit.
pub fn generate_with_limits(
    plan: &StridedBlock,
    word_size: u32,
    limits: &LaunchLimits,
) -> Result<PlanKernels> {
    let shape = check_word("codegen::generate", plan, word_size, limits)?;
    let hash = plan_hash(plan, word_size, shape.block());
    let pack_name = format!("dtp_pack_{hash:016x}");
    let unpack_name = format!("dtp_unpack_{hash:016x}");
    let mut src = String::new();
    prelude(&mut src);
    let _ = writeln!(
        src,
        "// plan: start {}, block length {} bytes, counts {:?}, strides {:?}; {}-byte words",
        plan.start(),
        plan.block_len(),
        plan.counts(),
        plan.strides(),
        word_size
    );
    let _ = writeln!(
        src,
        "// launch: block {:?}, grid up to {:?} (any grid is correct)\n",
        shape.block(),
        shape.grid()
    );
    let threads = shape.threads_per_block();
    for dir in [Direction::Pack, Direction::Unpack] {
        let body = format!("dtp_body_{}", dir.name());
        region_body(&mut src, &body, plan, &shape, Move::Packed(dir), None);
        let name = match dir {
            Direction::Pack => &pack_name,
            Direction::Unpack => &unpack_name,
        };
        let _ = writeln!(
            src,
            "extern \"C\" __global__ void __launch_bounds__({threads}) {name}(\n\
             \x20   const unsigned char* __restrict__ src, unsigned char* __restrict__ dst)\n{{\n\
             \x20   {body}(src, dst, blockIdx.x, blockIdx.y, blockIdx.z,\n\
             \x20       threadIdx.x, threadIdx.y, threadIdx.z, gridDim.x, gridDim.y, gridDim.z);\n}}\n"
        );
    }
    Ok(PlanKernels {
        source: src,
        pack_name,
        unpack_name,
        shape,
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

/// Fixed grid of a fused region, baked into the code.
#[derive(Debug, Clone, Copy)]
struct FixedGrid {
    grid: [u32; 3],
}

/// Emits `static __device__ void NAME(in, out, bx, by, bz, tx, ty, tz, gx, gy, gz)`, the loops
/// of one plan for one thread whose (virtual) block and thread indices and grid size are given.
/// `fixed` bakes a grid in (fused kernels); the grid arguments are then ignored. For a copy,
/// `plan` is the source plan.
fn region_body(
    src: &mut String,
    name: &str,
    plan: &StridedBlock,
    shape: &LaunchShape,
    mv: Move,
    fixed: Option<FixedGrid>,
) {
    let w = u64::from(shape.word_size());
    let wt = word_type(shape.word_size()).unwrap_or("unsigned char");
    let [ex, ey, ez] = shape.extents();
    let [bx, by, bz] = shape.block();
    let s = |k: usize| plan.strides().get(k).copied().unwrap_or(0);
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
         \x20   constexpr dtp_u64 S0 = {s0}ull, S1 = {s1}ull;\n\
         \x20   constexpr dtp_u64 BX = {bx}ull, BY = {by}ull, BZ = {bz}ull;",
        bl = plan.block_len(),
        start = plan.start(),
        s0 = s(0),
        s1 = s(1),
    );
    if let Move::Copy { delta } = mv {
        let _ = writeln!(
            src,
            "    constexpr dtp_u64 DELTA = {delta}ull; // destination start - source start, mod 2^64"
        );
    }
    if let Some(FixedGrid { grid: [gx, gy, gz] }) = fixed {
        let _ = writeln!(
            src,
            "    (void)gx; (void)gy; (void)gz;\n\
             \x20   constexpr dtp_u64 GX = {gx}ull, GY = {gy}ull, GZ = {gz}ull;"
        );
    } else {
        src.push_str("    const dtp_u64 GX = gx, GY = gy, GZ = gz;\n");
    }
    src.push_str(
        "    const dtp_u64 x0 = bx * BX + tx, y0 = by * BY + ty, z0 = bz * BZ + tz;\n\
         \x20   if (x0 >= EX || y0 >= EY || z0 >= EZ) return;\n\
         \x20   const dtp_u64 sx = GX * BX, sy = GY * BY, sz = GZ * BZ;\n\
         \x20   (void)sx;\n",
    );
    // Pack reads the strided side and writes the packed side; unpack the other way round; a copy
    // reads the source's strided side and writes the destination's (in the packed offset's
    // place).
    let in_is_strided = mv != Move::Packed(Direction::Unpack);
    let is_copy = matches!(mv, Move::Copy { .. });
    let copy = |src: &mut String, indent: &str, pairs: &[(String, String)]| {
        // pairs: (strided offset, packed or destination offset); all loads first, then all
        // stores.
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
    };
    let outer = plan.counts().get(2..).unwrap_or(&[]);
    let open_outer = |src: &mut String| {
        if outer.is_empty() && is_copy {
            // A copy has no packed offset, so no use for the outer index.
            src.push_str("        { const dtp_u64 so = 0;\n");
        } else if outer.is_empty() {
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
                    let _ = writeln!(src, "            so += rest * {stride}ull;");
                } else {
                    let _ = writeln!(
                        src,
                        "            so += (rest % {n}ull) * {stride}ull; rest /= {n}ull;"
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
        if is_copy {
            src.push_str("                const dtp_u64 db = sb + DELTA;\n");
        } else {
            src.push_str("                const dtp_u64 pb = (z + EZ * o) * (EY * BL) + xb;\n");
        }
        src.push_str("                dtp_u64 y = y0;\n");
        let (ob, os) = if is_copy { ("db", "S0") } else { ("pb", "BL") };
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
                (format!("sb + {yi} * S0"), format!("{ob} + {yi} * {os}"))
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
            &[("sb + y * S0".to_string(), format!("{ob} + y * {os}"))],
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
        if is_copy {
            src.push_str("                    const dtp_u64 db = sb + DELTA;\n");
        } else {
            src.push_str("                    const dtp_u64 pb = ((z + EZ * o) * EY + y) * BL;\n");
        }
        src.push_str("                    dtp_u64 x = x0;\n");
        let ob = if is_copy { "db" } else { "pb" };
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
                (format!("sb + {xi} * W"), format!("{ob} + {xi} * W"))
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
            &[("sb + x * W".to_string(), format!("{ob} + x * W"))],
        );
        src.push_str("                    }\n                }\n            }\n        }\n");
    }
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

/// Generates fused pack and unpack kernels for `regions`, region `i` moved in words of
/// `words[i]` bytes by the thread-block shape of its [`LaunchShape`] under `limits`, with at
/// most about `max_blocks` thread blocks in all (each non-empty region gets at least one; the
/// budget is shared in proportion to packed bytes).
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
        let shape = check_word(OP, r.plan(), w, limits)?;
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
    for (i, ((r, shape), g)) in regions.iter().zip(&shapes).zip(&part.grids).enumerate() {
        if part.spans[i].0 == part.spans[i].1 {
            continue;
        }
        let _ = writeln!(
            src,
            "// region {i}: plan start {}, block length {}, counts {:?}, strides {:?}; packed at {}; \
             {}-byte words; block {:?}, grid {:?}",
            r.plan().start(),
            r.plan().block_len(),
            r.plan().counts(),
            r.plan().strides(),
            r.packed_offset(),
            shape.word_size(),
            shape.block(),
            g
        );
        for dir in [Direction::Pack, Direction::Unpack] {
            let body = format!("dtp_r{i}_{}", dir.name());
            region_body(
                &mut src,
                &body,
                r.plan(),
                shape,
                Move::Packed(dir),
                Some(FixedGrid { grid: *g }),
            );
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
    /// Each region's fixed grid (all zero for an empty region).
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

/// Emits the `extern "C"` kernel `name(src, dst)` of a fused launch: thread block `b` runs, as
/// virtual block `b - first` of its region's fixed grid, the region whose span holds it.
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
        let [gx, gy, _] = part.grids[i];
        let [bx, by, _] = shape.block();
        let tpb = shape.threads_per_block();
        let (body, a_in, a_out) = call(i);
        let _ = writeln!(
            src,
            "    if (b < {end}ull) {{\n\
             \x20       const dtp_u64 l = b - {first}ull;\n\
             \x20       if (t < {tpb}ull)\n\
             \x20           {body}({a_in}, {a_out},\n\
             \x20               l % {gx}ull, (l / {gx}ull) % {gy}ull, l / ({gx}ull * {gy}ull),\n\
             \x20               t % {bx}ull, (t / {bx}ull) % {by}ull, t / ({bx}ull * {by}ull), 0, 0, 0);\n\
             \x20       return;\n\
             \x20   }}"
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
/// (see [`CopyRegion::word_size`]) by the thread-block shape of its source plan's
/// [`LaunchShape`] under `limits`, with at most about `max_blocks` thread blocks in all (shared
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
        let shape = check_word(OP, r.src(), w, limits)?;
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
    for (i, ((r, shape), g)) in regions.iter().zip(&shapes).zip(&part.grids).enumerate() {
        if part.spans[i].0 == part.spans[i].1 {
            continue;
        }
        let _ = writeln!(
            src,
            "// region {i}: source start {}, destination start {}, block length {}, counts {:?}, \
             strides {:?}; {}-byte words; block {:?}, grid {:?}",
            r.src().start(),
            r.dst_start(),
            r.src().block_len(),
            r.src().counts(),
            r.src().strides(),
            shape.word_size(),
            shape.block(),
            g
        );
        region_body(
            &mut src,
            &format!("dtp_c{i}_copy"),
            r.src(),
            shape,
            Move::Copy {
                delta: r.dst_start().wrapping_sub(r.src().start()),
            },
            Some(FixedGrid { grid: *g }),
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
            "extern \"C\" __global__ void __launch_bounds__(1024) {}(",
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
        // 1 MiB blocks: more words than a thread block's x extent.
        let p = StridedBlock::new(0, 1 << 20, vec![4], vec![1 << 21]).unwrap();
        let k = generate(&p, 16).unwrap();
        assert!(k.source().contains("if (sx >= EX)"));
        assert!(k.source().contains("x += 4ull * sx"));
        // Short blocks: only the unrolled loop over blocks.
        let p = StridedBlock::new(0, 8, vec![1000], vec![512]).unwrap();
        let k = generate(&p, 8).unwrap();
        assert!(!k.source().contains("if (sx >= EX)"));
        assert!(k.source().contains("y += 4ull * sy"));
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
        assert!(s.contains("const dtp_u64 db = sb + DELTA;"));
        assert!(s.contains("db + y * S0"));
        assert!(s.contains("dtp_c0_copy(src, dst,") && s.contains("dtp_c2_copy(src, dst,"));
        assert!(!s.contains("dtp_c1_copy"));
        // No packed offsets anywhere.
        assert!(!s.contains("pb"));
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
        assert!(k.source().contains("if (sx >= EX)"));
        assert!(k.source().contains("db + x * W"));
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
