//! Plans: a layout lowered to a flat strided-block description, ready for a packer or a kernel.
//!
//! A [`StridedBlock`] selects `block_len` contiguous bytes at every byte offset
//!
//! ```text
//! start + i0 * strides[0] + i1 * strides[1] + ... ,   0 <= ik < counts[k]
//! ```
//!
//! and packs those blocks with `i0` varying fastest (dimensions are listed innermost first).
//! The block with multi-index `(i0, i1, ..)` lands at packed byte `b * block_len`, where
//! `b = i0 + counts[0] * (i1 + counts[1] * (i2 + ..))` is its linear block index.
//!
//! Negative strides are carried as *reversed* dimensions: a plan's start and strides are
//! unsigned, `start` is the lowest byte any block touches, and a reversed dimension `k`
//! visits its copies from the highest address down, so that the block with multi-index
//! `(i0, i1, ..)` sits at
//!
//! ```text
//! start + sum over k of (reversed[k] ? counts[k] - 1 - ik : ik) * strides[k]
//! ```
//!
//! That is the signed layout `origin + sum ik * (reversed[k] ? -strides[k] : strides[k])`, with
//! [`origin`](StridedBlock::origin) the offset of the first packed block: a vector with a
//! negative stride (`MPI_Type_vector(3, 1, -2, ..)`) packs block 0 first, at the highest
//! address, as `MPI_Pack` does. Keeping start and strides unsigned keeps the bounds check a
//! single comparison (`extent_end <= len`); kernels form offsets from the origin with the
//! signed strides in wrapping 64-bit arithmetic, whose results are the exact offsets. A layout
//! that starts before its base (its lowest byte at a negative offset) is still refused with
//! [`Error::Unsupported`]: move it ([`Type::displaced`]) so that it starts at or after byte 0
//! of the buffer it is applied to.
//!
//! [`StridedBlock::word_size`] chooses how many bytes a packer may move at once, and
//! [`LaunchShape`] maps a plan onto a CUDA-like grid without exceeding any grid dimension.

use crate::canonical::{canonicalize, sort_by_stride};
use crate::error::{invalid, overflow, Error, Result};
use crate::ir::{Level, Type};

/// A layout as `prod(counts)` blocks of `block_len` bytes on a strided lattice. See the
/// [module docs](self).
///
/// Built by [`StridedBlock::from_type`] (canonical, the usual way), [`StridedBlock::lower`] (no
/// canonicalization) or [`StridedBlock::new`]; all of them check that the packed size and the
/// extent fit a `u64`. Every empty plan is normalized to [`StridedBlock::empty`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StridedBlock {
    start: u64,
    block_len: u64,
    counts: Vec<u64>,
    strides: Vec<u64>,
    /// Per dimension, whether it runs from the highest address down; `false` wherever the
    /// count is at most 1 or the stride 0 (where the direction changes nothing).
    reversed: Vec<bool>,
    packed_size: u64,
    extent_end: u64,
}

impl StridedBlock {
    /// Builds a plan from its parts. `counts` and `strides` are per stream dimension, innermost
    /// first; every dimension runs forward (see [`StridedBlock::with_reversed`]). A plan that
    /// selects no byte (a zero `block_len` or a zero count) is normalized to
    /// [`StridedBlock::empty`].
    ///
    /// # Errors
    /// [`Error::DimensionMismatch`] if `counts` and `strides` differ in length;
    /// [`Error::Overflow`] if the packed size or the extent end does not fit a `u64`.
    pub fn new(start: u64, block_len: u64, counts: Vec<u64>, strides: Vec<u64>) -> Result<Self> {
        let reversed = vec![false; counts.len()];
        Self::with_reversed(start, block_len, counts, strides, reversed)
    }

    /// Builds a plan whose dimensions may run backwards: dimension `k` with `reversed[k]` set
    /// packs its copies from the highest address down (a negative stride of `-strides[k]`),
    /// see the [module docs](self). `start` is the lowest byte the plan touches, whatever the
    /// directions, so the bytes touched are `start..extent_end` as for a forward plan. A
    /// direction where the count is at most 1 or the stride 0 changes nothing and is
    /// normalized to forward; a plan that selects no byte to [`StridedBlock::empty`].
    ///
    /// # Errors
    /// [`Error::DimensionMismatch`] if `strides` or `reversed` differ in length from `counts`;
    /// [`Error::Overflow`] if the packed size or the extent end does not fit a `u64`.
    pub fn with_reversed(
        start: u64,
        block_len: u64,
        counts: Vec<u64>,
        strides: Vec<u64>,
        reversed: Vec<bool>,
    ) -> Result<Self> {
        const OP: &str = "StridedBlock::new";
        for (what, len) in [("strides", strides.len()), ("reversed", reversed.len())] {
            if len != counts.len() {
                return Err(Error::DimensionMismatch {
                    op: OP,
                    what,
                    expected: counts.len(),
                    found: len,
                });
            }
        }
        if block_len == 0 || counts.contains(&0) {
            return Ok(Self::empty());
        }
        let mut packed_size = block_len;
        let mut end = start
            .checked_add(block_len)
            .ok_or_else(|| overflow(OP, "start + block length exceeds u64"))?;
        for (&n, &s) in counts.iter().zip(&strides) {
            packed_size = packed_size
                .checked_mul(n)
                .ok_or_else(|| overflow(OP, "packed size exceeds u64"))?;
            end = (n - 1)
                .checked_mul(s)
                .and_then(|span| end.checked_add(span))
                .ok_or_else(|| overflow(OP, "extent end exceeds u64"))?;
        }
        let reversed = reversed
            .iter()
            .zip(counts.iter().zip(&strides))
            .map(|(&r, (&n, &s))| r && n > 1 && s != 0)
            .collect();
        Ok(Self {
            start,
            block_len,
            counts,
            strides,
            reversed,
            packed_size,
            extent_end: end,
        })
    }

    /// The plan that selects no byte: start 0, block length 0, no dimensions.
    pub fn empty() -> Self {
        Self {
            start: 0,
            block_len: 0,
            counts: Vec::new(),
            strides: Vec::new(),
            reversed: Vec::new(),
            packed_size: 0,
            extent_end: 0,
        }
    }

    /// Canonicalizes `t` ([`canonicalize`]) and lowers the result. The plan packs exactly the
    /// bytes `t` describes, in the same order, with as few dimensions as the passes allow.
    ///
    /// # Errors
    /// As [`StridedBlock::lower`].
    pub fn from_type(t: &Type) -> Result<Self> {
        Self::lower(&canonicalize(t.clone()))
    }

    /// Like [`StridedBlock::from_type`], but with the stream levels sorted by stride first
    /// ([`sort_by_stride`]). The plan selects the same bytes as `t` **in a different order**:
    /// use it only when the buffer it packs is unpacked with the same plan.
    ///
    /// # Errors
    /// As [`StridedBlock::lower`].
    pub fn from_type_sorted(t: &Type) -> Result<Self> {
        Self::lower(&canonicalize(sort_by_stride(canonicalize(t.clone()))))
    }

    /// Lowers `t` as it is, one plan dimension per stream level (no canonicalization). A level
    /// with a negative stride becomes a reversed dimension (see the [module docs](self)).
    ///
    /// # Errors
    /// * [`Error::Unsupported`] if the layout starts before its base (its lowest byte lies at
    ///   a negative offset);
    /// * [`Error::Overflow`] if the packed size or the extent end does not fit a `u64`.
    pub fn lower(t: &Type) -> Result<Self> {
        const OP: &str = "StridedBlock::lower";
        if t.is_empty() {
            return Ok(Self::empty());
        }
        // The first packed byte, then down to the lowest one along every reversed level.
        let mut low = i128::from(t.total_offset()?);
        let chain = t.chain();
        let block_len = chain.dense_extent;
        let n = chain.streams.len();
        let (mut counts, mut strides, mut reversed) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for &Level { stride, count, .. } in chain.streams.iter().rev() {
            if stride < 0 {
                low += i128::from(count - 1) * i128::from(stride);
            }
            counts.push(count);
            strides.push(stride.unsigned_abs());
            reversed.push(stride < 0);
        }
        let start = u64::try_from(low).map_err(|_| {
            if low < 0 {
                Error::Unsupported {
                    op: OP,
                    message: format!(
                        "the layout starts {} bytes before its base; a plan starts at or after \
                         it (displace the layout first)",
                        low.unsigned_abs()
                    ),
                }
            } else {
                overflow(OP, format!("start {low} exceeds u64"))
            }
        })?;
        Self::with_reversed(start, block_len, counts, strides, reversed).map_err(|e| match e {
            Error::Overflow { message, .. } => Error::Overflow { op: OP, message },
            other => other,
        })
    }

    /// Byte offset of the first block from the buffer's start.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Length in bytes of each contiguous block.
    pub fn block_len(&self) -> u64 {
        self.block_len
    }

    /// Count of each stream dimension, innermost first.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Byte stride of each stream dimension, innermost first.
    pub fn strides(&self) -> &[u64] {
        &self.strides
    }

    /// Per stream dimension, innermost first, whether it packs its copies from the highest
    /// address down (a negative stride in the layout). Always `false` where the count is at
    /// most 1 or the stride 0.
    pub fn reversed(&self) -> &[bool] {
        &self.reversed
    }

    /// Whether any dimension runs backwards ([`reversed`](Self::reversed)).
    pub fn has_reversed(&self) -> bool {
        self.reversed.contains(&true)
    }

    /// Whether `other` selects blocks of the same length on the same lattice, in the same
    /// order: the same block length, counts, strides and directions, starts aside (a halo's
    /// interior layer and the ghost layer it fills).
    pub fn same_shape(&self, other: &StridedBlock) -> bool {
        self.block_len == other.block_len
            && self.counts == other.counts
            && self.strides == other.strides
            && self.reversed == other.reversed
    }

    /// The plan of the same shape ([`same_shape`](Self::same_shape)) starting at `start`.
    ///
    /// # Errors
    /// [`Error::Overflow`] if its extent end does not fit a `u64`.
    pub fn moved_to(&self, start: u64) -> Result<StridedBlock> {
        StridedBlock::with_reversed(
            start,
            self.block_len,
            self.counts.clone(),
            self.strides.clone(),
            self.reversed.clone(),
        )
    }

    /// Byte offset of the first packed block (multi-index `(0, 0, ..)`) from the buffer's start:
    /// [`start`](Self::start) for a forward plan, the highest copy of every reversed dimension
    /// otherwise.
    pub fn origin(&self) -> u64 {
        // Cannot overflow: the sum is below the extent end.
        self.start
            + self
                .counts
                .iter()
                .zip(&self.strides)
                .zip(&self.reversed)
                .filter(|(_, &r)| r)
                .map(|((&n, &s), _)| (n - 1) * s)
                .sum::<u64>()
    }

    /// The stride of dimension `k` as a step in wrapping 64-bit arithmetic: `strides[k]`
    /// forward, its two's complement (`-strides[k]` modulo 2^64) reversed. Offsets formed as
    /// `origin + sum ik * step(k)` with wrapping operations are the exact offsets.
    pub(crate) fn step(&self, k: usize) -> u64 {
        if self.reversed[k] {
            self.strides[k].wrapping_neg()
        } else {
            self.strides[k]
        }
    }

    /// Number of stream dimensions.
    pub fn ndims(&self) -> usize {
        self.counts.len()
    }

    /// Number of blocks (the product of the counts; 1 for a plan without dimensions, 0 for the
    /// empty plan).
    pub fn num_blocks(&self) -> u64 {
        if self.block_len == 0 {
            0
        } else {
            self.counts.iter().product()
        }
    }

    /// Whether the plan selects no byte.
    pub fn is_empty(&self) -> bool {
        self.packed_size == 0
    }

    /// Bytes in the packed form: `block_len * prod(counts)`.
    pub fn packed_size(&self) -> u64 {
        self.packed_size
    }

    /// One past the last byte the plan touches; 0 for the empty plan. A buffer of at least this
    /// many bytes holds the whole layout.
    pub fn extent_end(&self) -> u64 {
        self.extent_end
    }

    /// Whether the plan's bytes are one contiguous run, in packing order, from [`start`]: every
    /// dimension with a count above 1 has the stride of the whole span below it (`block_len`
    /// times the counts of the dimensions inside it). Packed byte `p` is then strided byte
    /// `start + p`. A plan without dimensions is contiguous; so is the empty plan. A plan with
    /// a reversed dimension ([`reversed`](Self::reversed)) is not.
    ///
    /// [`start`]: StridedBlock::start
    pub fn is_contiguous(&self) -> bool {
        if self.has_reversed() {
            return false;
        }
        let mut span = self.block_len;
        for (&n, &s) in self.counts.iter().zip(&self.strides) {
            if n > 1 && s != span {
                return false;
            }
            // Cannot overflow: the product is at most the packed size.
            span *= n;
        }
        true
    }

    /// The widest word, in bytes (1, 2, 4, 8 or 16), in which a packer may move this plan's data
    /// between a strided buffer at address `src_addr_align` and a packed buffer at address
    /// `dst_addr_align` (the roles may be swapped for unpacking: the result is symmetric).
    /// Either argument may be the buffer's address or any power of two known to divide it; pass
    /// 0 for "aligned enough".
    ///
    /// It is the largest power of two, at most 16, that divides the GCD of the block length, the
    /// start offset, every stride (of dimensions with count > 1) and both addresses (the origin
    /// of a plan with reversed dimensions is the start plus multiples of strides). Every byte
    /// offset a packer forms, strided (`start + sum ik * strides[k] + x * W`) or packed
    /// (`b * block_len + x * W`), is then a multiple of `W` from an address aligned to `W`.
    /// A word size taken from the block length alone breaks as soon as the start offset or a
    /// stride is less aligned than the block (an 8-byte block at offset 4 is not 8-aligned), or
    /// the buffer itself sits at an odd address (a sub-slice).
    pub fn word_size(&self, src_addr_align: u64, dst_addr_align: u64) -> u32 {
        // The largest power of two dividing a GCD is the lowest set bit of the OR of the values.
        let mut bits = self.block_len | self.start | src_addr_align | dst_addr_align;
        for (&n, &s) in self.counts.iter().zip(&self.strides) {
            if n > 1 {
                bits |= s;
            }
        }
        let tz = bits.trailing_zeros().min(4);
        1u32 << tz
    }
}

/// Grid and thread-block limits of a CUDA-like device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchLimits {
    /// Largest grid dimension in x, y, z.
    pub max_grid: [u32; 3],
    /// Largest thread-block dimension in x, y, z.
    pub max_block: [u32; 3],
    /// Largest number of threads in one thread block.
    pub max_threads_per_block: u32,
}

impl LaunchLimits {
    /// The limits of every CUDA device since compute capability 3.0: grid x up to 2^31 - 1,
    /// grid y and z up to 65535, blocks of up to 1024 threads (z up to 64).
    pub const CUDA: LaunchLimits = LaunchLimits {
        max_grid: [(1u32 << 31) - 1, 65_535, 65_535],
        max_block: [1024, 1024, 64],
        max_threads_per_block: 1024,
    };
}

impl Default for LaunchLimits {
    fn default() -> Self {
        Self::CUDA
    }
}

/// Threads per thread block of a [flat](LaunchShape::flat) launch (fewer only where the launch
/// limits allow fewer): the shape of the one-thread-per-word kernel it is modelled on. A single
/// plan's kernel may use more ([`flat_threads`]).
pub const FLAT_THREADS: u32 = 256;

/// Most threads per thread block of a shape by axes ([`LaunchShape::with_limits`]), fewer
/// where the launch limits allow fewer.
pub const AXES_THREADS: u32 = 512;

/// Blocks of at most this many bytes are small for [`flat_threads`].
pub const SMALL_BLOCK_BYTES: u64 = 64;

/// A flat launch of at least this many packed words is long for [`flat_threads`].
pub const LONG_LAUNCH_WORDS: u64 = 1 << 21;

/// Threads per thread block of a single plan's [flat](LaunchShape::flat) kernel moved in
/// words of `word_size` bytes ([`LaunchShape::for_plan`]): [`FLAT_THREADS`], except for a long
/// launch ([`LONG_LAUNCH_WORDS`] words or more) of small blocks ([`SMALL_BLOCK_BYTES`] or
/// fewer, not contiguous): 1024, or 512 when each block is a single word of 8 or 16 bytes.
///
/// Measured on an H200 (docs/PERFORMANCE.md, "Pack: threads per thread block"), 64 MiB packed
/// from blocks at stride 512: 1024-thread blocks move 64-byte blocks 7 % faster than
/// 256-thread blocks (1702 against 1589 GB/s) and 1 to 4-byte blocks 3 to 5 % faster, but
/// 128 to 512-byte blocks 2 to 4 % slower; single 16-byte words are fastest with 512 (626
/// against 623 with 256 and 620 with 1024). Short launches keep 256 threads, so that they
/// spread over every multiprocessor.
pub fn flat_threads(plan: &StridedBlock, word_size: u32) -> u32 {
    let w = u64::from(word_size.max(1));
    let long = plan.packed_size() / w >= LONG_LAUNCH_WORDS;
    if plan.is_contiguous() || plan.block_len() > SMALL_BLOCK_BYTES || !long {
        FLAT_THREADS
    } else if plan.block_len() == w && w >= 8 {
        512
    } else {
        1024
    }
}

/// How a [`StridedBlock`] maps onto a CUDA-like launch: by axes ([`LaunchShape::with_limits`])
/// or flat ([`LaunchShape::flat`], one thread per packed word); [`LaunchShape::for_plan`] picks
/// one for a single plan's kernel.
///
/// By axes, there are three axes of work: x = the words of a block (`block_len / word_size`),
/// y = the first stream dimension (`counts[0]`), z = the second (`counts[1]`); an axis the plan
/// lacks has extent 1. The remaining dimensions (`counts[2..]`,
/// [`outer_counts`](Self::outer_counts)) are loops inside the kernel. Each axis is covered by a
/// grid-stride loop, so any extent fits a grid capped at the device limits;
/// [`iterations`](Self::iterations) says how many trips each loop makes at most. A kernel that
/// implements the contract below packs exactly what [`crate::cpu::pack`] packs:
///
/// ```text
/// for each (i2, i3, ..) < outer_counts:                          // in-kernel loops
///   for z = blockIdx.z*blockDim.z + threadIdx.z; z < extents[2]; z += gridDim.z*blockDim.z
///     for y = blockIdx.y*blockDim.y + threadIdx.y; y < extents[1]; y += gridDim.y*blockDim.y
///       for x = blockIdx.x*blockDim.x + threadIdx.x; x < extents[0]; x += gridDim.x*blockDim.x
///         b       = y + extents[1] * (z + extents[2] * (i2 + counts[2] * (i3 + ..)))
///         strided = origin + x*W + y*steps[0] + z*steps[1] + i2*steps[2] + ..
///         packed  = b*block_len + x*W
///         copy W bytes strided -> packed (pack) or packed -> strided (unpack)
/// ```
///
/// A flat shape ([`is_flat`](Self::is_flat)) has a 1-D grid and thread block and one axis of
/// work, the packed words (`extents[0] = packed_size / W`), covered by one grid-stride loop; a
/// word's place in the plan comes from its packed index:
///
/// ```text
/// for i = blockIdx.x*blockDim.x + threadIdx.x; i < extents[0]; i += gridDim.x*blockDim.x
///   x = i % words_per_block,  b = i / words_per_block,  (i0, i1, ..) = digits of b in counts
///   strided = origin + x*W + i0*steps[0] + i1*steps[1] + ..   // = start + i*W if contiguous
///   packed  = i*W
///   copy W bytes strided -> packed (pack) or packed -> strided (unpack)
/// ```
///
/// `origin` is [`StridedBlock::origin`] and `steps[k]` the signed stride of dimension `k`
/// (`-strides[k]` where [reversed](StridedBlock::reversed)), summed in wrapping 64-bit
/// arithmetic: the result is the exact offset. Indices and offsets need 64-bit arithmetic. An
/// empty plan gives a shape with
/// [`is_noop`](Self::is_noop) true and a zero grid: launch nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LaunchShape {
    word_size: u32,
    flat: bool,
    words_per_block: u64,
    extents: [u64; 3],
    outer_counts: Vec<u64>,
    block: [u32; 3],
    grid: [u32; 3],
}

/// The checks every launch shape makes of its arguments.
fn check_args(plan: &StridedBlock, word_size: u32, limits: &LaunchLimits) -> Result<()> {
    const OP: &str = "LaunchShape";
    if !matches!(word_size, 1 | 2 | 4 | 8 | 16) {
        return Err(invalid(
            OP,
            format!("word size {word_size} is not 1, 2, 4, 8 or 16"),
        ));
    }
    if plan.word_size(0, 0) < word_size {
        return Err(invalid(
            OP,
            format!(
                "word size {word_size} does not divide the plan (block length {}, start {}, \
                 strides {:?}); at most {}",
                plan.block_len,
                plan.start,
                plan.strides,
                plan.word_size(0, 0)
            ),
        ));
    }
    if limits.max_grid.contains(&0)
        || limits.max_block.contains(&0)
        || limits.max_threads_per_block == 0
    {
        return Err(invalid(
            OP,
            format!("launch limits must be non-zero: {limits:?}"),
        ));
    }
    Ok(())
}

impl LaunchShape {
    /// The launch shape by axes of `plan` moved in words of `word_size` bytes, for
    /// [`LaunchLimits::CUDA`].
    ///
    /// # Errors
    /// As [`LaunchShape::with_limits`].
    pub fn new(plan: &StridedBlock, word_size: u32) -> Result<Self> {
        Self::with_limits(plan, word_size, &LaunchLimits::CUDA)
    }

    /// Whether a single plan's kernel is launched [flat](Self::flat) rather than by axes: when
    /// the plan is contiguous ([`StridedBlock::is_contiguous`]), or has at most two dimensions
    /// and either a power-of-two number of words per block (1 included) or fewer than
    /// [`LONG_LAUNCH_WORDS`] packed words. For those the flat launch is the one-thread-per-word
    /// launch: thread blocks of [`flat_threads`] threads, thread `i` on packed word `i`, each
    /// warp on 32 consecutive packed words, with the word's place found by shifts and divisions
    /// by constants. Long launches of blocks of any other number of words keep the axes
    /// mapping, which needs no division (at 64 MiB of 24-byte blocks, 1022 against 852 GB/s
    /// for the one-thread-per-word kernel); a short launch is about one wave of threads, where
    /// the axes mapping of 3-word blocks leaves a quarter of its lanes idle. An empty plan is
    /// never flat.
    pub fn flat_suits(plan: &StridedBlock, word_size: u32) -> bool {
        let w = u64::from(word_size.max(1));
        let words = plan.block_len() / w;
        let short = plan.packed_size() / w < LONG_LAUNCH_WORDS;
        !plan.is_empty()
            && (plan.is_contiguous() || (plan.ndims() <= 2 && (words.is_power_of_two() || short)))
    }

    /// The launch shape of a single plan's kernels ([`crate::codegen::generate`]):
    /// [flat](Self::flat) where [`flat_suits`](Self::flat_suits), by axes
    /// ([`with_limits`](Self::with_limits)) otherwise.
    ///
    /// # Errors
    /// As [`LaunchShape::with_limits`].
    pub fn for_plan(plan: &StridedBlock, word_size: u32, limits: &LaunchLimits) -> Result<Self> {
        if Self::flat_suits(plan, word_size) {
            Self::flat_with_threads(plan, word_size, limits, flat_threads(plan, word_size))
        } else {
            Self::with_limits(plan, word_size, limits)
        }
    }

    /// The flat launch shape of `plan` moved in words of `word_size` bytes, within `limits` (see
    /// the [type docs](Self)): thread blocks of [`FLAT_THREADS`] threads in x (the largest power
    /// of two the limits allow, if fewer) and as many thread blocks in x as the packed words
    /// need, capped at `max_grid[0]` (the grid-stride loop covers the rest).
    ///
    /// # Errors
    /// As [`LaunchShape::with_limits`].
    pub fn flat(plan: &StridedBlock, word_size: u32, limits: &LaunchLimits) -> Result<Self> {
        Self::flat_with_threads(plan, word_size, limits, FLAT_THREADS)
    }

    /// [`LaunchShape::flat`] with thread blocks of `threads` threads (the largest power of two
    /// not above it and the limits).
    ///
    /// # Errors
    /// As [`LaunchShape::with_limits`].
    pub fn flat_with_threads(
        plan: &StridedBlock,
        word_size: u32,
        limits: &LaunchLimits,
        threads: u32,
    ) -> Result<Self> {
        check_args(plan, word_size, limits)?;
        if plan.is_empty() {
            return Ok(Self::noop(word_size, true));
        }
        let w = u64::from(word_size);
        let cap = threads
            .max(1)
            .min(limits.max_threads_per_block)
            .min(limits.max_block[0]);
        // The largest power of two not above `cap` (which is at least 1: limits are non-zero).
        let threads = 1u32 << (31 - cap.leading_zeros());
        let words = plan.packed_size() / w;
        let blocks = words
            .div_ceil(u64::from(threads))
            .min(u64::from(limits.max_grid[0])) as u32;
        Ok(Self {
            word_size,
            flat: true,
            words_per_block: plan.block_len() / w,
            extents: [words, 1, 1],
            outer_counts: Vec::new(),
            block: [threads, 1, 1],
            grid: [blocks, 1, 1],
        })
    }

    /// The shape of an empty plan: nothing to launch.
    fn noop(word_size: u32, flat: bool) -> Self {
        Self {
            word_size,
            flat,
            words_per_block: 0,
            extents: [0; 3],
            outer_counts: Vec::new(),
            block: [1; 3],
            grid: [0; 3],
        }
    }

    /// The launch shape by axes of `plan` moved in words of `word_size` bytes, within `limits`.
    ///
    /// Thread-block dimensions are powers of two filled x first, then y, then z, up to
    /// `max_threads_per_block` or [`AXES_THREADS`], whichever is lower, so that plans of small blocks still give full thread blocks;
    /// grid dimensions are the blocks needed to cover each axis, capped at `max_grid`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `word_size` is not 1, 2, 4, 8 or 16, does not divide the
    /// plan's block length, start and strides (use [`StridedBlock::word_size`]), or a limit is 0.
    pub fn with_limits(plan: &StridedBlock, word_size: u32, limits: &LaunchLimits) -> Result<Self> {
        check_args(plan, word_size, limits)?;
        if plan.is_empty() {
            return Ok(Self::noop(word_size, false));
        }
        let counts = plan.counts();
        let extents = [
            plan.block_len() / u64::from(word_size),
            counts.first().copied().unwrap_or(1),
            counts.get(1).copied().unwrap_or(1),
        ];
        let outer_counts = counts.get(2..).unwrap_or(&[]).to_vec();
        let mut block = [1u32; 3];
        let mut room = limits.max_threads_per_block.min(AXES_THREADS);
        for axis in 0..3 {
            // Widest power of two not above the extent (rounded up), the axis limit and the room
            // left in the thread block.
            let want = extents[axis].min(u64::from(u32::MAX >> 1)) as u32;
            let b = want
                .next_power_of_two()
                .min(limits.max_block[axis])
                .min(room)
                .max(1);
            // Keep a power of two when a limit is not one.
            let b = if b.is_power_of_two() {
                b
            } else {
                1 << (31 - b.leading_zeros())
            };
            block[axis] = b;
            room /= b;
        }
        let mut grid = [1u32; 3];
        for axis in 0..3 {
            let need = extents[axis].div_ceil(u64::from(block[axis]));
            grid[axis] = need.min(u64::from(limits.max_grid[axis])) as u32;
        }
        Ok(Self {
            word_size,
            flat: false,
            words_per_block: extents[0],
            extents,
            outer_counts,
            block,
            grid,
        })
    }

    /// Bytes moved per word (`W`).
    pub fn word_size(&self) -> u32 {
        self.word_size
    }

    /// Whether the shape is flat ([`LaunchShape::flat`]): a 1-D launch of one thread per packed
    /// word rather than one by axes.
    pub fn is_flat(&self) -> bool {
        self.flat
    }

    /// Words in one block: `block_len / word_size` (the x extent of a shape by axes); 0 for the
    /// empty plan.
    pub fn words_per_block(&self) -> u64 {
        self.words_per_block
    }

    /// Work per axis: `[words per block, counts[0], counts[1]]` (1 for a missing dimension), or
    /// `[packed words, 1, 1]` for a flat shape; all 0 for the empty plan.
    pub fn extents(&self) -> [u64; 3] {
        self.extents
    }

    /// Counts of the dimensions looped inside the kernel (`counts[2..]`), innermost first; none
    /// for a flat shape.
    pub fn outer_counts(&self) -> &[u64] {
        &self.outer_counts
    }

    /// Thread-block dimensions (`blockDim`).
    pub fn block(&self) -> [u32; 3] {
        self.block
    }

    /// Grid dimensions (`gridDim`); all 0 for the empty plan.
    pub fn grid(&self) -> [u32; 3] {
        self.grid
    }

    /// Threads in one thread block.
    pub fn threads_per_block(&self) -> u32 {
        self.block.iter().product()
    }

    /// Trips of each grid-stride loop: `ceil(extents[a] / (grid[a] * block[a]))` (0 for the
    /// empty plan). 1 means every index of that axis has its own thread.
    pub fn iterations(&self) -> [u64; 3] {
        std::array::from_fn(|a| {
            let span = u64::from(self.grid[a]) * u64::from(self.block[a]);
            if span == 0 {
                0
            } else {
                self.extents[a].div_ceil(span)
            }
        })
    }

    /// Whether there is nothing to launch (the plan is empty).
    pub fn is_noop(&self) -> bool {
        self.grid.contains(&0)
    }
}

/// The strided offset of packed word `i` of `p` in words of `w` bytes under the flat contract of
/// [`LaunchShape`], computed as the generated flat kernels compute it (`START + i * W` for a
/// contiguous plan, else the digits of the block index in the counts): for the CPU emulators
/// of the flat single-plan and fused kernels.
#[cfg(test)]
pub(crate) fn flat_word_offset(p: &StridedBlock, w: u64, i: u64) -> u64 {
    if p.is_contiguous() {
        return p.start() + i * w;
    }
    let wpb = p.block_len() / w;
    let (x, mut rest) = (i % wpb, i / wpb);
    let mut off = p.origin() + x * w;
    let k_last = p.ndims() - 1;
    for (k, &c) in p.counts().iter().enumerate() {
        let s = p.step(k);
        if k == k_last {
            off = off.wrapping_add(rest.wrapping_mul(s));
        } else {
            off = off.wrapping_add((rest % c).wrapping_mul(s));
            rest /= c;
        }
    }
    off
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::construct::{subarray, Order};

    #[test]
    fn new_validates_and_computes() {
        let p = StridedBlock::new(8, 4, vec![3, 2], vec![16, 100]).unwrap();
        assert_eq!(p.packed_size(), 24);
        assert_eq!(p.extent_end(), 8 + 4 + 2 * 16 + 100);
        assert_eq!(p.num_blocks(), 6);
        assert!(matches!(
            StridedBlock::new(0, 4, vec![3], vec![]),
            Err(Error::DimensionMismatch { .. })
        ));
        assert!(matches!(
            StridedBlock::new(0, 1 << 40, vec![1 << 30], vec![1 << 40]),
            Err(Error::Overflow { .. })
        ));
        assert_eq!(
            StridedBlock::new(5, 4, vec![0], vec![8]).unwrap(),
            StridedBlock::empty()
        );
        assert_eq!(StridedBlock::empty().extent_end(), 0);
        assert_eq!(StridedBlock::empty().num_blocks(), 0);
    }

    #[test]
    fn from_type_canonicalizes() {
        // 4 x 6 array of f32, rows 1..3, all columns: one dense block.
        let t = subarray(&[4, 6], &[2, 6], &[1, 0], Order::C, 4).unwrap();
        let p = StridedBlock::from_type(&t).unwrap();
        assert_eq!((p.start(), p.block_len(), p.ndims()), (24, 48, 0));
        // Columns 1..3 of rows 1..3.
        let t = subarray(&[4, 6], &[2, 2], &[1, 1], Order::C, 4).unwrap();
        let p = StridedBlock::from_type(&t).unwrap();
        assert_eq!(p, StridedBlock::new(28, 8, vec![2], vec![24]).unwrap());
        // The same type lowered as is keeps its levels.
        assert_eq!(StridedBlock::lower(&t).unwrap(), p);
    }

    #[test]
    fn lower_reverses_negative_strides_and_refuses_negative_starts() {
        // Block 0 at byte 64, block 1 at 56, block 2 at 48: start 48, origin 64.
        let t = Type::stream(3, -8, Type::dense(8)).with_offset(64);
        let p = StridedBlock::from_type(&t).unwrap();
        assert_eq!(
            p,
            StridedBlock::with_reversed(48, 8, vec![3], vec![8], vec![true]).unwrap()
        );
        assert_eq!((p.start(), p.origin(), p.extent_end()), (48, 64, 72));
        assert!(p.has_reversed() && !p.is_contiguous());
        // Starting before the base is still refused, forward or reversed.
        let t = Type::stream(3, 8, Type::dense(4)).with_offset(-8);
        assert!(matches!(
            StridedBlock::from_type(&t),
            Err(Error::Unsupported { .. })
        ));
        let t = Type::stream(3, -8, Type::dense(8)).with_offset(8);
        assert!(matches!(
            StridedBlock::from_type(&t),
            Err(Error::Unsupported { .. })
        ));
        // A unit stream with a negative stride disappears in canonical form.
        let t = Type::stream(1, -8, Type::dense(4));
        assert_eq!(
            StridedBlock::from_type(&t).unwrap(),
            StridedBlock::new(0, 4, vec![], vec![]).unwrap()
        );
        // Nested: rows descending, elements within a row ascending then descending levels.
        let t = Type::stream(2, -100, Type::stream(3, 8, Type::dense(4))).with_offset(200);
        let p = StridedBlock::from_type(&t).unwrap();
        assert_eq!(p.counts(), &[3, 2]);
        assert_eq!(p.strides(), &[8, 100]);
        assert_eq!(p.reversed(), &[false, true]);
        assert_eq!((p.start(), p.origin()), (100, 200));
    }

    #[test]
    fn a_plan_moved_keeps_its_shape() {
        let p = StridedBlock::with_reversed(100, 8, vec![3, 2], vec![16, 200], vec![false, true])
            .unwrap();
        let m = p.moved_to(0).unwrap();
        assert_eq!((m.start(), m.extent_end()), (0, p.extent_end() - 100));
        assert!(m.same_shape(&p) && p.same_shape(&m));
        assert_eq!(m.packed_size(), p.packed_size());
        // Another block length, count, stride or direction is another shape.
        for other in [
            StridedBlock::with_reversed(100, 4, vec![3, 2], vec![16, 200], vec![false, true]),
            StridedBlock::with_reversed(100, 8, vec![3, 3], vec![16, 200], vec![false, true]),
            StridedBlock::with_reversed(100, 8, vec![3, 2], vec![24, 200], vec![false, true]),
            StridedBlock::with_reversed(100, 8, vec![3, 2], vec![16, 200], vec![false, false]),
        ] {
            assert!(!p.same_shape(&other.unwrap()));
        }
        assert!(matches!(
            p.moved_to(u64::MAX - 8),
            Err(Error::Overflow { .. })
        ));
    }

    #[test]
    fn reversed_directions_normalize() {
        // A direction on a count-1 or stride-0 dimension changes nothing.
        let a = StridedBlock::with_reversed(4, 2, vec![1, 3, 2], vec![8, 0, 16], vec![true; 3]);
        let b = StridedBlock::with_reversed(
            4,
            2,
            vec![1, 3, 2],
            vec![8, 0, 16],
            vec![false, false, true],
        );
        assert_eq!(a.unwrap(), b.unwrap());
        assert!(matches!(
            StridedBlock::with_reversed(0, 4, vec![3], vec![8], vec![]),
            Err(Error::DimensionMismatch {
                what: "reversed",
                ..
            })
        ));
        // A reversed contiguous run is not contiguous in packing order.
        let p = StridedBlock::with_reversed(0, 4, vec![4], vec![4], vec![true]).unwrap();
        assert!(!p.is_contiguous());
        assert_eq!(p.origin(), 12);
        assert_eq!(p.word_size(0, 0), 4);
        let mut dst = vec![0u8; 16];
        let src: Vec<u8> = (0..16).collect();
        crate::cpu::pack(&p, &src, &mut dst).unwrap();
        assert_eq!(dst, [12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3]);
        // The word size sees the origin's alignment through the start and strides.
        let p = StridedBlock::with_reversed(4, 8, vec![3], vec![12], vec![true]).unwrap();
        assert_eq!(p.origin(), 28);
        assert_eq!(p.word_size(0, 0), 4);
    }

    #[test]
    fn sorted_plan_reorders() {
        // Column-major walk of a 3 x 4 block of a row-major 3 x 4 array of u8.
        let t = Type::stream(4, 1, Type::stream(3, 4, Type::dense(1)));
        let p = StridedBlock::from_type(&t).unwrap();
        assert_eq!(p.counts(), &[3, 4]);
        let s = StridedBlock::from_type_sorted(&t).unwrap();
        assert_eq!((s.block_len(), s.ndims()), (12, 0));
    }

    #[test]
    fn word_size_uses_every_term() {
        let p = StridedBlock::new(0, 64, vec![4], vec![128]).unwrap();
        assert_eq!(p.word_size(0, 0), 16);
        assert_eq!(p.word_size(8, 0), 8);
        assert_eq!(p.word_size(0, 0x1002), 2);
        // Unaligned start: an 8-byte block at offset 4 moves in 4-byte words.
        let p = StridedBlock::new(4, 8, vec![4], vec![16]).unwrap();
        assert_eq!(p.word_size(0, 0), 4);
        // A stride of 12 limits to 4.
        let p = StridedBlock::new(0, 16, vec![4], vec![24 + 12]).unwrap();
        assert_eq!(p.word_size(256, 256), 4);
        // A count-1 dimension's stride does not matter.
        let p = StridedBlock::new(0, 16, vec![1], vec![3]).unwrap();
        assert_eq!(p.word_size(0, 0), 16);
        // Odd block length.
        let p = StridedBlock::new(0, 3, vec![], vec![]).unwrap();
        assert_eq!(p.word_size(0, 0), 1);
        assert_eq!(StridedBlock::empty().word_size(0, 0), 16);
    }

    #[test]
    fn launch_shape_small_blocks_fill_y() {
        let p = StridedBlock::new(0, 8, vec![1000], vec![64]).unwrap();
        let l = LaunchShape::new(&p, 8).unwrap();
        assert_eq!(l.extents(), [1, 1000, 1]);
        // Thread blocks by axes hold at most AXES_THREADS threads, whatever the limits allow.
        assert_eq!(l.block(), [1, AXES_THREADS, 1]);
        assert_eq!(l.grid(), [1, 2, 1]);
        assert_eq!(l.iterations(), [1, 1, 1]);
        assert!(!l.is_noop());
    }

    #[test]
    fn launch_shape_refuses_bad_word_sizes() {
        let p = StridedBlock::new(4, 8, vec![2], vec![16]).unwrap();
        assert!(LaunchShape::new(&p, 8).is_err());
        assert!(LaunchShape::new(&p, 3).is_err());
        assert!(LaunchShape::new(&p, 4).is_ok());
    }

    #[test]
    fn launch_shape_counts_beyond_grid_limits() {
        // 100,000 x 70,000 x 3 x 2 blocks of 8 bytes.
        let p = StridedBlock::new(
            0,
            8,
            vec![100_000, 70_000, 3, 2],
            vec![
                16,
                16 * 100_000,
                16 * 100_000 * 70_000,
                16 * 100_000 * 70_000 * 3,
            ],
        )
        .unwrap();
        let l = LaunchShape::new(&p, 8).unwrap();
        let lim = LaunchLimits::CUDA;
        assert_eq!(l.extents(), [1, 100_000, 70_000]);
        assert_eq!(l.outer_counts(), &[3, 2]);
        check_limits(&l, &lim);
        assert!(l.grid()[1] <= 65_535 && l.grid()[2] <= 65_535);
        // y alone past 65,535 thread blocks of one thread each would overflow; grid-stride covers it.
        let p = StridedBlock::new(
            0,
            16 * 1024,
            vec![10_000_000, 200_000],
            vec![1 << 15, 1 << 40],
        )
        .unwrap();
        let l = LaunchShape::new(&p, 16).unwrap();
        assert_eq!(l.block(), [512, 1, 1]);
        assert_eq!(l.grid(), [2, 65_535, 65_535]);
        assert_eq!(l.iterations(), [1, 153, 4]);
        check_limits(&l, &lim);
        // Huge blocks: x beyond 2^31 - 1 thread blocks.
        let p = StridedBlock::new(0, 1 << 50, vec![], vec![]).unwrap();
        let l = LaunchShape::new(&p, 1).unwrap();
        assert_eq!(l.grid()[0], (1u32 << 31) - 1);
        check_limits(&l, &lim);
        assert!(l.iterations()[0] > 1);
    }

    fn check_limits(l: &LaunchShape, lim: &LaunchLimits) {
        assert!(l.threads_per_block() <= lim.max_threads_per_block);
        for a in 0..3 {
            assert!(l.grid()[a] >= 1 && l.grid()[a] <= lim.max_grid[a], "{l:?}");
            assert!(
                l.block()[a] >= 1 && l.block()[a] <= lim.max_block[a],
                "{l:?}"
            );
            let span = u64::from(l.grid()[a]) * u64::from(l.block()[a]);
            // Enough trips to cover the axis, and no wasted trip.
            assert!(span * l.iterations()[a] >= l.extents()[a]);
            assert!(span * (l.iterations()[a] - 1) < l.extents()[a]);
        }
    }

    /// Runs the kernel contract of [`LaunchShape`] on the CPU, thread by thread.
    fn emulate_pack(p: &StridedBlock, l: &LaunchShape, src: &[u8], dst: &mut [u8]) -> Vec<u32> {
        let w = u64::from(l.word_size());
        let mut hits = vec![0u32; p.packed_size() as usize];
        if l.is_noop() {
            return hits;
        }
        let [ex, ey, ez] = l.extents();
        let [gx, gy, gz] = l.grid().map(u64::from);
        let [bx, by, bz] = l.block().map(u64::from);
        let outer: u64 = l.outer_counts().iter().product();
        for (blk, thr) in (0..gx * gy * gz).flat_map(|b| (0..bx * by * bz).map(move |t| (b, t))) {
            let (bix, biy, biz) = (blk % gx, blk / gx % gy, blk / (gx * gy));
            let (tix, tiy, tiz) = (thr % bx, thr / bx % by, thr / (bx * by));
            for o in 0..outer {
                // Decompose the outer linear index into (i2, i3, ..).
                let mut rest = o;
                let mut off_outer = 0;
                for (k, &n) in l.outer_counts().iter().enumerate() {
                    off_outer = ((rest % n).wrapping_mul(p.step(k + 2))).wrapping_add(off_outer);
                    rest /= n;
                }
                let mut z = biz * bz + tiz;
                while z < ez {
                    let mut y = biy * by + tiy;
                    while y < ey {
                        let mut x = bix * bx + tix;
                        while x < ex {
                            let b = y + ey * (z + ez * o);
                            let s0 = if p.ndims() > 0 { p.step(0) } else { 0 };
                            let s1 = if p.ndims() > 1 { p.step(1) } else { 0 };
                            let strided = (p.origin() + x * w)
                                .wrapping_add(y.wrapping_mul(s0))
                                .wrapping_add(z.wrapping_mul(s1))
                                .wrapping_add(off_outer);
                            let packed = b * p.block_len() + x * w;
                            let (s, d) = (strided as usize, packed as usize);
                            dst[d..d + w as usize].copy_from_slice(&src[s..s + w as usize]);
                            for h in &mut hits[d..d + w as usize] {
                                *h += 1;
                            }
                            x += gx * bx;
                        }
                        y += gy * by;
                    }
                    z += gz * bz;
                }
            }
        }
        hits
    }

    #[test]
    fn launch_contract_matches_cpu_pack_under_tiny_limits() {
        let tiny = LaunchLimits {
            max_grid: [3, 2, 2],
            max_block: [4, 2, 2],
            max_threads_per_block: 8,
        };
        let cases = [
            StridedBlock::new(3, 40, vec![], vec![]).unwrap(),
            StridedBlock::new(8, 16, vec![7], vec![24]).unwrap(),
            StridedBlock::new(0, 8, vec![5, 3], vec![16, 100]).unwrap(),
            StridedBlock::new(4, 4, vec![3, 5, 2, 3], vec![8, 32, 200, 500]).unwrap(),
            StridedBlock::new(2, 2, vec![9, 1, 4], vec![2, 0, 40]).unwrap(),
            StridedBlock::empty(),
        ];
        for p in &cases {
            for limits in [&tiny, &LaunchLimits::CUDA] {
                let w = p.word_size(0, 0);
                for word in [1, w] {
                    let l = LaunchShape::with_limits(p, word, limits).unwrap();
                    if !l.is_noop() {
                        check_limits(&l, limits);
                    }
                    let src: Vec<u8> = (0..p.extent_end()).map(|i| (i * 7 + 1) as u8).collect();
                    let mut want = vec![0u8; p.packed_size() as usize];
                    crate::cpu::pack(p, &src, &mut want).unwrap();
                    let mut got = vec![0u8; p.packed_size() as usize];
                    let hits = emulate_pack(p, &l, &src, &mut got);
                    assert_eq!(got, want, "{p:?} {l:?}");
                    assert!(hits.iter().all(|&h| h == 1), "{p:?} {l:?} {hits:?}");
                }
            }
        }
    }

    #[test]
    fn launch_shape_of_the_empty_plan() {
        let l = LaunchShape::new(&StridedBlock::empty(), 16).unwrap();
        assert!(l.is_noop());
        assert_eq!(l.grid(), [0, 0, 0]);
        assert_eq!(l.iterations(), [0, 0, 0]);
        let f = LaunchShape::flat(&StridedBlock::empty(), 16, &LaunchLimits::CUDA).unwrap();
        assert!(f.is_noop() && f.is_flat());
        assert_eq!(f.iterations(), [0, 0, 0]);
        let l = LaunchShape::for_plan(&StridedBlock::empty(), 16, &LaunchLimits::CUDA).unwrap();
        assert!(l.is_noop() && !l.is_flat());
    }

    #[test]
    fn contiguity() {
        assert!(StridedBlock::new(3, 40, vec![], vec![])
            .unwrap()
            .is_contiguous());
        assert!(StridedBlock::new(0, 4, vec![8, 3], vec![4, 32])
            .unwrap()
            .is_contiguous());
        // A count-1 dimension's stride does not matter.
        assert!(StridedBlock::new(0, 4, vec![8, 1, 3], vec![4, 7, 32])
            .unwrap()
            .is_contiguous());
        assert!(!StridedBlock::new(0, 4, vec![8, 3], vec![4, 36])
            .unwrap()
            .is_contiguous());
        assert!(!StridedBlock::new(0, 4, vec![8], vec![8])
            .unwrap()
            .is_contiguous());
        assert!(StridedBlock::empty().is_contiguous());
    }

    #[test]
    fn flat_policy_on_the_benchmark_rows() {
        // The rows of `collbench pack`: contiguous 4 MiB, then vectors at stride 512.
        let c = StridedBlock::new(0, 4 << 20, vec![], vec![]).unwrap();
        let l = LaunchShape::for_plan(&c, 16, &LaunchLimits::CUDA).unwrap();
        assert!(l.is_flat());
        // The launch of the one-thread-per-word kernel: 256 threads, one per 16-byte word.
        assert_eq!(l.extents(), [1 << 18, 1, 1]);
        assert_eq!(l.block(), [256, 1, 1]);
        assert_eq!(l.grid(), [1024, 1, 1]);
        assert_eq!(l.iterations(), [1, 1, 1]);
        assert_eq!(l.outer_counts(), &[] as &[u64]);
        for total in [1u64 << 10, 1 << 20, 64 << 20] {
            // 3 words per block: by axes only in the long launches of 64 MiB.
            let long = total == 64 << 20;
            for (block, flat) in [
                (1u64, true),
                (2, true),
                (4, true),
                (6, !long),
                (8, true),
                (12, !long),
                (16, true),
                (24, !long),
                (32, true),
                (64, true),
                (128, true),
                (256, true),
                (512, true),
            ] {
                let t = crate::construct::vector(total / block, block, 512, 1).unwrap();
                let p = StridedBlock::from_type(&t).unwrap();
                let w = p.word_size(256, 256);
                let l = LaunchShape::for_plan(&p, w, &LaunchLimits::CUDA).unwrap();
                assert_eq!(l.is_flat(), flat, "{block} B blocks: {l:?}");
                if flat {
                    let words = p.packed_size() / u64::from(w);
                    // 64 MiB of blocks up to 64 bytes: larger thread blocks (`flat_threads`).
                    let threads = match (total, block) {
                        (t, 8 | 16) if t == 64 << 20 => 512,
                        (t, b) if t == 64 << 20 && b <= 64 => 1024,
                        _ => 256,
                    };
                    assert_eq!(l.block(), [threads, 1, 1], "{block} B blocks, {total} B");
                    assert_eq!(flat_threads(&p, w), threads);
                    assert_eq!(u64::from(l.grid()[0]), words.div_ceil(u64::from(threads)));
                    assert_eq!(l.words_per_block(), p.block_len() / u64::from(w));
                }
            }
        }
        // Three dimensions, or 3 words per block: by axes. A non-canonical contiguous plan of
        // three dimensions: flat.
        let p = StridedBlock::new(0, 8, vec![4, 4, 4], vec![16, 128, 1024]).unwrap();
        assert!(!LaunchShape::flat_suits(&p, 8));
        let p = StridedBlock::new(0, 24, vec![1 << 20], vec![32]).unwrap();
        assert!(!LaunchShape::flat_suits(&p, 8));
        let p = StridedBlock::new(0, 24, vec![4], vec![32]).unwrap();
        assert!(LaunchShape::flat_suits(&p, 8));
        let p = StridedBlock::new(0, 8, vec![4, 4, 4], vec![8, 32, 128]).unwrap();
        assert!(LaunchShape::flat_suits(&p, 8));
        assert!(!LaunchShape::flat_suits(&StridedBlock::empty(), 1));
        // Fewer threads where the limits say so; still a power of two.
        let odd = LaunchLimits {
            max_threads_per_block: 100,
            ..LaunchLimits::CUDA
        };
        assert_eq!(LaunchShape::flat(&c, 16, &odd).unwrap().block(), [64, 1, 1]);
        let small = crate::construct::vector(1 << 20, 64, 512, 1).unwrap();
        let small = StridedBlock::from_type(&small).unwrap();
        assert_eq!(flat_threads(&small, 16), 1024);
        assert_eq!(
            LaunchShape::for_plan(&small, 16, &odd).unwrap().block(),
            [64, 1, 1]
        );
        // A contiguous plan keeps FLAT_THREADS, however long.
        let long = StridedBlock::new(0, 1 << 30, vec![], vec![]).unwrap();
        assert_eq!(flat_threads(&long, 1), FLAT_THREADS);
        // The word size is checked as for a shape by axes.
        let p = StridedBlock::new(4, 8, vec![2], vec![16]).unwrap();
        assert!(LaunchShape::flat(&p, 8, &LaunchLimits::CUDA).is_err());
        assert!(LaunchShape::for_plan(&p, 8, &LaunchLimits::CUDA).is_err());
        assert!(LaunchShape::flat(&p, 4, &LaunchLimits::CUDA).is_ok());
    }

    #[test]
    fn flat_shape_counts_beyond_grid_limits() {
        let lim = LaunchLimits::CUDA;
        // 5e9 one-byte blocks: more words than a u32 counts, one thread each.
        let p = StridedBlock::new(0, 1, vec![5_000_000_000], vec![512]).unwrap();
        let l = LaunchShape::for_plan(&p, 1, &lim).unwrap();
        assert!(l.is_flat());
        assert_eq!(l.extents(), [5_000_000_000, 1, 1]);
        // A long launch of small blocks: 1024 threads per thread block (`flat_threads`).
        assert_eq!(l.block(), [1024, 1, 1]);
        assert_eq!(l.grid(), [4_882_813, 1, 1]);
        assert_eq!(l.iterations(), [1, 1, 1]);
        check_limits(&l, &lim);
        // Two dimensions beyond 65,535 each, 2-byte blocks.
        let p = StridedBlock::new(2, 2, vec![100_000, 70_000], vec![4, 400_000]).unwrap();
        let l = LaunchShape::for_plan(&p, 2, &lim).unwrap();
        assert!(l.is_flat());
        assert_eq!(l.extents()[0], 7_000_000_000);
        check_limits(&l, &lim);
        // Beyond 2^31 - 1 thread blocks: the grid-stride loop takes the rest.
        let p = StridedBlock::new(0, 1, vec![1 << 40], vec![2]).unwrap();
        let l = LaunchShape::flat(&p, 1, &lim).unwrap();
        assert_eq!(l.grid(), [(1u32 << 31) - 1, 1, 1]);
        assert_eq!(l.iterations(), [3, 1, 1]);
        check_limits(&l, &lim);
        let p = StridedBlock::new(0, 1 << 50, vec![], vec![]).unwrap();
        let l = LaunchShape::for_plan(&p, 1, &lim).unwrap();
        assert!(l.is_flat() && l.iterations()[0] > 1);
        check_limits(&l, &lim);
    }

    /// Runs the flat kernel contract of [`LaunchShape`] on the CPU, thread by thread, computing
    /// offsets as the generated flat kernel does.
    fn emulate_flat(p: &StridedBlock, l: &LaunchShape, src: &[u8], dst: &mut [u8]) -> Vec<u32> {
        assert!(l.is_flat());
        let w = u64::from(l.word_size());
        let mut hits = vec![0u32; p.packed_size() as usize];
        if l.is_noop() {
            return hits;
        }
        let n = l.extents()[0];
        let (g, b) = (u64::from(l.grid()[0]), u64::from(l.block()[0]));
        assert_eq!(l.words_per_block(), p.block_len() / w);
        for thread in 0..g * b {
            let mut i = thread;
            while i < n {
                let strided = super::flat_word_offset(p, w, i);
                let (s, d) = (strided as usize, (i * w) as usize);
                dst[d..d + w as usize].copy_from_slice(&src[s..s + w as usize]);
                for h in &mut hits[d..d + w as usize] {
                    *h += 1;
                }
                i += g * b;
            }
        }
        hits
    }

    #[test]
    fn flat_contract_matches_cpu_pack_under_tiny_limits() {
        let tiny = LaunchLimits {
            max_grid: [3, 2, 2],
            max_block: [4, 2, 2],
            max_threads_per_block: 8,
        };
        let cases = [
            StridedBlock::new(3, 40, vec![], vec![]).unwrap(),
            StridedBlock::new(8, 16, vec![7], vec![24]).unwrap(),
            StridedBlock::new(0, 8, vec![5, 3], vec![16, 100]).unwrap(),
            StridedBlock::new(4, 4, vec![3, 5, 2, 3], vec![8, 32, 200, 500]).unwrap(),
            StridedBlock::new(2, 2, vec![9, 1, 4], vec![2, 0, 40]).unwrap(),
            // Contiguous but not canonical.
            StridedBlock::new(5, 4, vec![3, 1, 2], vec![4, 99, 12]).unwrap(),
            StridedBlock::new(1, 1, vec![37], vec![3]).unwrap(),
            StridedBlock::new(0, 2, vec![11, 3], vec![6, 70]).unwrap(),
            StridedBlock::empty(),
        ];
        for p in &cases {
            for limits in [&tiny, &LaunchLimits::CUDA] {
                let w = p.word_size(0, 0);
                for word in [1, w] {
                    let l = LaunchShape::flat(p, word, limits).unwrap();
                    if !l.is_noop() {
                        check_limits(&l, limits);
                    }
                    let src: Vec<u8> = (0..p.extent_end()).map(|i| (i * 7 + 1) as u8).collect();
                    let mut want = vec![0u8; p.packed_size() as usize];
                    crate::cpu::pack(p, &src, &mut want).unwrap();
                    let mut got = vec![0u8; want.len()];
                    let hits = emulate_flat(p, &l, &src, &mut got);
                    assert_eq!(got, want, "{p:?} {l:?}");
                    assert!(hits.iter().all(|&h| h == 1), "{p:?} {l:?} {hits:?}");
                }
            }
        }
    }

    /// A random plan: up to 5 dimensions, strides at least as large as the span below them
    /// (so blocks do not overlap) plus some slack, all multiples of `unit`; about one
    /// dimension in four reversed (a negative stride).
    fn random_plan(max_count: u64) -> impl proptest::strategy::Strategy<Value = StridedBlock> {
        use proptest::prelude::*;
        (
            proptest::sample::select(&[1u64, 2, 4, 8, 16][..]),
            1u64..6,
            0u64..4,
            proptest::collection::vec((1..=max_count, 0u64..3, 0u8..4), 0..=5),
        )
            .prop_map(|(unit, words, start, dims)| {
                let block = unit * words;
                let mut span = block;
                let (mut counts, mut strides, mut reversed) = (Vec::new(), Vec::new(), Vec::new());
                for (n, slack, rev) in dims {
                    let stride = span + slack * unit;
                    match stride.checked_mul(n) {
                        Some(next) if next < 1 << 60 => span = next,
                        _ => break,
                    }
                    counts.push(n);
                    strides.push(stride);
                    reversed.push(rev == 0);
                }
                StridedBlock::with_reversed(start * unit, block, counts, strides, reversed).unwrap()
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(300))]

        /// Under random small limits, the kernel contract visits every packed word once and
        /// packs what the CPU packer packs.
        #[test]
        fn launch_contract_on_random_plans(
            p in random_plan(6),
            grid in (1u32..4, 1u32..4, 1u32..4),
            block in (1u32..5, 1u32..5, 1u32..3),
            threads in 1u32..17,
        ) {
            let limits = LaunchLimits {
                max_grid: [grid.0, grid.1, grid.2],
                max_block: [block.0, block.1, block.2],
                max_threads_per_block: threads,
            };
            let w = p.word_size(0, 0);
            let l = LaunchShape::with_limits(&p, w, &limits).unwrap();
            check_limits(&l, &limits);
            let src: Vec<u8> = (0..p.extent_end()).map(|i| (i * 13 + 5) as u8).collect();
            let mut want = vec![0u8; p.packed_size() as usize];
            crate::cpu::pack(&p, &src, &mut want).unwrap();
            let mut got = vec![0u8; want.len()];
            let hits = emulate_pack(&p, &l, &src, &mut got);
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert!(hits.iter().all(|&h| h == 1));
        }

        /// Under random small limits, the flat contract visits every packed word once and packs
        /// what the CPU packer packs, for any plan (not only those it suits).
        #[test]
        fn flat_contract_on_random_plans(
            p in random_plan(6),
            grid in 1u32..5,
            threads in 1u32..17,
        ) {
            let limits = LaunchLimits {
                max_grid: [grid, 1, 1],
                max_block: [threads, 1, 1],
                max_threads_per_block: threads,
            };
            let l = LaunchShape::flat(&p, p.word_size(0, 0), &limits).unwrap();
            check_limits(&l, &limits);
            let src: Vec<u8> = (0..p.extent_end()).map(|i| (i * 13 + 5) as u8).collect();
            let mut want = vec![0u8; p.packed_size() as usize];
            crate::cpu::pack(&p, &src, &mut want).unwrap();
            let mut got = vec![0u8; want.len()];
            let hits = emulate_flat(&p, &l, &src, &mut got);
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert!(hits.iter().all(|&h| h == 1));
        }

        /// A flat shape with the CUDA limits stays within them for any count, and its one loop
        /// covers every packed word.
        #[test]
        fn flat_shape_within_cuda_limits(p in random_plan(3_000_000)) {
            let w = p.word_size(0, 0);
            let l = LaunchShape::flat(&p, w, &LaunchLimits::CUDA).unwrap();
            check_limits(&l, &LaunchLimits::CUDA);
            proptest::prop_assert_eq!(l.extents()[0], p.packed_size() / u64::from(w));
            proptest::prop_assert_eq!(l.block(), [FLAT_THREADS, 1, 1]);
        }

        /// With the CUDA limits, counts far beyond 65,535 stay within every grid dimension and
        /// the grid-stride loops still cover every index.
        #[test]
        fn launch_shape_within_cuda_limits(p in random_plan(3_000_000)) {
            let l = LaunchShape::new(&p, p.word_size(0, 0)).unwrap();
            check_limits(&l, &LaunchLimits::CUDA);
            proptest::prop_assert_eq!(l.outer_counts(), p.counts().get(2..).unwrap_or(&[]));
        }
    }
}
