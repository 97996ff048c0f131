//! Many plans moved as one: the regions of a fused pack (a halo's 6 or 26 faces, say).
//!
//! A [`Region`] is a plan (whose start is the region's offset in the strided buffer) and the
//! byte offset of its packed form in the packed buffer. All regions share one strided buffer and
//! one packed buffer. [`layout`] places regions one after the other, each packed offset rounded
//! up to [`PACKED_ALIGN`] bytes so that every region can move in 16-byte words; [`check`]
//! accepts any placement whose packed ranges do not overlap.
//!
//! [`pack`] and [`unpack`] are the CPU reference (region by region through [`crate::cpu`]); the
//! GPU version is `gpu::FusedPacker` (feature `cuda`), one launch for all regions.
//!
//! Regions may overlap in the strided buffer. Packing reads, so overlap is harmless there.
//! Unpacking overlapping regions writes the shared bytes more than once: the CPU reference
//! writes regions in order (the last one wins), a fused GPU launch in no defined order.
//!
//! # Strided-to-strided copies
//!
//! A [`CopyRegion`] reads a plan in a source buffer and writes a region of the same shape (block
//! length, counts, strides) at another start in a destination buffer, with no packed buffer in
//! between: a halo rank that is its own neighbour (a periodic axis of one or two ranks) copies
//! interior cells straight into its own ghost cells. [`copy`] (two buffers) and [`copy_in_place`]
//! (one buffer, the halo case) are the CPU reference; the GPU version is `gpu::FusedCopier`
//! (feature `cuda`), one launch for all regions.
//!
//! The CPU reference copies region by region in order, each region block by block in packing
//! order, each block as one `memmove`. A fused GPU launch moves words in no defined order: where
//! the bytes a launch reads overlap the bytes it writes (within one region or across regions,
//! possible only in place), or two regions write the same bytes, the result in those bytes is
//! not defined. A halo's interior and ghost cells are disjoint, so the halo case is exact.

use std::ops::Range;

use crate::error::{invalid, overflow, Buffer, Error, Result};
use crate::plan::StridedBlock;

/// Packed offsets chosen by [`layout`] are multiples of this many bytes.
pub const PACKED_ALIGN: u64 = 16;

/// One region of a fused pack: a plan and where its packed bytes go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Region {
    plan: StridedBlock,
    packed_offset: u64,
}

impl Region {
    /// A region that packs `plan` to the bytes `packed_offset..packed_offset + packed_size` of
    /// the packed buffer.
    pub fn new(plan: StridedBlock, packed_offset: u64) -> Self {
        Self {
            plan,
            packed_offset,
        }
    }

    /// The region's plan (its start is the region's offset in the strided buffer).
    pub fn plan(&self) -> &StridedBlock {
        &self.plan
    }

    /// Offset of the region's packed bytes in the packed buffer.
    pub fn packed_offset(&self) -> u64 {
        self.packed_offset
    }

    /// The region's bytes in the packed buffer (saturating at `u64::MAX`; [`check`] refuses
    /// regions whose end overflows).
    pub fn packed_range(&self) -> Range<u64> {
        self.packed_offset..self.packed_offset.saturating_add(self.plan.packed_size())
    }
}

/// Regions for `plans` in order, packed one after another, each packed offset rounded up to a
/// multiple of [`PACKED_ALIGN`].
///
/// # Errors
/// [`Error::Overflow`] if the packed offsets exceed `u64`.
pub fn layout(plans: &[StridedBlock]) -> Result<Vec<Region>> {
    let mut at = 0u64;
    let mut out = Vec::with_capacity(plans.len());
    for p in plans {
        let off = at
            .checked_next_multiple_of(PACKED_ALIGN)
            .ok_or_else(|| overflow("fused::layout", "packed offset exceeds u64"))?;
        at = off
            .checked_add(p.packed_size())
            .ok_or_else(|| overflow("fused::layout", "packed offset exceeds u64"))?;
        out.push(Region::new(p.clone(), off));
    }
    Ok(out)
}

/// Bytes a packed buffer needs for `regions`: the end of the last packed range (0 for none).
pub fn packed_size(regions: &[Region]) -> u64 {
    regions
        .iter()
        .filter(|r| !r.plan.is_empty())
        .map(|r| r.packed_range().end)
        .max()
        .unwrap_or(0)
}

/// Bytes a strided buffer needs for `regions`: the largest [`StridedBlock::extent_end`].
pub fn extent_end(regions: &[Region]) -> u64 {
    regions
        .iter()
        .map(|r| r.plan.extent_end())
        .max()
        .unwrap_or(0)
}

/// Checks that no packed range overflows `u64` and that the packed ranges of non-empty regions
/// are pairwise disjoint.
///
/// # Errors
/// [`Error::Overflow`] for a packed range past `u64::MAX`; [`Error::InvalidArgument`] naming two
/// overlapping regions.
pub fn check(regions: &[Region]) -> Result<()> {
    const OP: &str = "fused::check";
    let mut ranges: Vec<(u64, u64, usize)> = Vec::with_capacity(regions.len());
    for (i, r) in regions.iter().enumerate() {
        if r.plan.is_empty() {
            continue;
        }
        let end = r
            .packed_offset
            .checked_add(r.plan.packed_size())
            .ok_or_else(|| overflow(OP, format!("region {i}: packed end exceeds u64")))?;
        ranges.push((r.packed_offset, end, i));
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.0 < a.1 {
            return Err(invalid(
                OP,
                format!(
                    "the packed bytes of region {} ({}..{}) and region {} ({}..{}) overlap",
                    a.2, a.0, a.1, b.2, b.0, b.1
                ),
            ));
        }
    }
    Ok(())
}

fn check_buffers(
    op: &'static str,
    regions: &[Region],
    strided: (Buffer, usize),
    packed: (Buffer, usize),
) -> Result<()> {
    check(regions)?;
    let end = extent_end(regions);
    if end > strided.1 as u64 {
        let first = regions
            .iter()
            .filter(|r| !r.plan.is_empty())
            .map(|r| r.plan.start())
            .min()
            .unwrap_or(0);
        return Err(Error::OutOfBounds {
            op,
            buffer: strided.0,
            first: i128::from(first),
            end: i128::from(end),
            len: strided.1,
        });
    }
    let need = packed_size(regions);
    if need > packed.1 as u64 {
        return Err(Error::BufferTooSmall {
            op,
            buffer: packed.0,
            needed: need,
            len: packed.1,
        });
    }
    Ok(())
}

/// CPU reference of a fused pack: every region of `src` packed into its range of `dst`, in
/// order. Bytes of `dst` outside the regions' packed ranges are left as they were. Returns the
/// packed size ([`packed_size`]).
///
/// # Errors
/// Checked before any byte is written: the errors of [`check`]; [`Error::OutOfBounds`] if a
/// region reaches past `src`; [`Error::BufferTooSmall`] if `dst` is shorter than
/// [`packed_size`].
pub fn pack(regions: &[Region], src: &[u8], dst: &mut [u8]) -> Result<u64> {
    const OP: &str = "fused::pack";
    check_buffers(
        OP,
        regions,
        (Buffer::Source, src.len()),
        (Buffer::Destination, dst.len()),
    )?;
    for r in regions.iter().filter(|r| !r.plan.is_empty()) {
        let range = r.packed_range();
        crate::cpu::pack(
            &r.plan,
            src,
            &mut dst[range.start as usize..range.end as usize],
        )?;
    }
    Ok(packed_size(regions))
}

/// CPU reference of a fused unpack: every region's packed range of `src` scattered into `dst`,
/// in order (where regions overlap in `dst`, the later one wins). Returns the packed size.
///
/// # Errors
/// As [`pack`], with the roles of the buffers swapped.
pub fn unpack(regions: &[Region], src: &[u8], dst: &mut [u8]) -> Result<u64> {
    const OP: &str = "fused::unpack";
    check_buffers(
        OP,
        regions,
        (Buffer::Destination, dst.len()),
        (Buffer::Source, src.len()),
    )?;
    for r in regions.iter().filter(|r| !r.plan.is_empty()) {
        let range = r.packed_range();
        crate::cpu::unpack(&r.plan, &src[range.start as usize..range.end as usize], dst)?;
    }
    Ok(packed_size(regions))
}

/// One region of a fused strided-to-strided copy: the plan read in the source buffer, and the
/// start of the region of the same shape written in the destination buffer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CopyRegion {
    src: StridedBlock,
    dst_start: u64,
}

impl CopyRegion {
    /// A region that copies the bytes `src` selects to the same shape starting at `dst_start`:
    /// the block at source offset `src.start() + d` goes to destination offset
    /// `dst_start + d`. A destination that does not fit `u64` is refused by [`check_copy`].
    pub fn new(src: StridedBlock, dst_start: u64) -> Self {
        Self { src, dst_start }
    }

    /// The region that copies `src` to `dst`, two plans of the same shape (block length, counts
    /// and strides) at different starts: the interior cells of a halo and the ghost cells they
    /// fill, say.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the shapes differ.
    pub fn between(src: StridedBlock, dst: &StridedBlock) -> Result<Self> {
        if !src.same_shape(dst) {
            return Err(invalid(
                "CopyRegion::between",
                format!(
                    "source and destination differ in shape: block length {} vs {}, counts {:?} \
                     vs {:?}, strides {:?} vs {:?}, reversed {:?} vs {:?}",
                    src.block_len(),
                    dst.block_len(),
                    src.counts(),
                    dst.counts(),
                    src.strides(),
                    dst.strides(),
                    src.reversed(),
                    dst.reversed()
                ),
            ));
        }
        let dst_start = dst.start();
        Ok(Self::new(src, dst_start))
    }

    /// The plan read in the source buffer.
    pub fn src(&self) -> &StridedBlock {
        &self.src
    }

    /// Offset of the first destination block in the destination buffer.
    pub fn dst_start(&self) -> u64 {
        self.dst_start
    }

    /// The plan written in the destination buffer: the source's shape (directions included)
    /// at [`dst_start`](Self::dst_start) (the empty plan for an empty source).
    ///
    /// # Errors
    /// [`Error::Overflow`] if the destination's extent end does not fit a `u64`.
    pub fn dst_plan(&self) -> Result<StridedBlock> {
        self.src.moved_to(self.dst_start)
    }

    /// Bytes the region copies.
    pub fn bytes(&self) -> u64 {
        self.src.packed_size()
    }

    /// The widest word, in bytes (1, 2, 4, 8 or 16), in which a copier may move this region
    /// between a source buffer at address `src_addr_align` and a destination buffer at
    /// `dst_addr_align` (addresses or powers of two known to divide them; 0 for "aligned
    /// enough"): the largest power of two, at most 16, that divides the GCD of the block length,
    /// both starts, every stride (of dimensions with count > 1) and both addresses. This is
    /// [`StridedBlock::word_size`] with the destination start as one more term: an 8-byte block
    /// copied from offset 0 to offset 4 moves in 4-byte words.
    pub fn word_size(&self, src_addr_align: u64, dst_addr_align: u64) -> u32 {
        let w = self.src.word_size(src_addr_align, dst_addr_align);
        w.min(1 << self.dst_start.trailing_zeros().min(4))
    }
}

/// Checks that every region's destination fits `u64` and has the source's shape (true by
/// construction of a [`CopyRegion`]; checked so that the kernels and the bounds can rely on it).
///
/// # Errors
/// [`Error::Overflow`] naming a region whose destination extent end exceeds `u64`;
/// [`Error::InvalidArgument`] naming a region whose destination shape differs.
pub fn check_copy(regions: &[CopyRegion]) -> Result<()> {
    copy_spans("fused::check_copy", regions).map(|_| ())
}

/// The bytes the regions of a copy touch on each side: `(first, end)`, `(0, 0)` for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CopySpans {
    pub(crate) src: (u64, u64),
    pub(crate) dst: (u64, u64),
}

/// The spans of `regions`, after the checks of [`check_copy`].
pub(crate) fn copy_spans(op: &'static str, regions: &[CopyRegion]) -> Result<CopySpans> {
    let (mut src, mut dst) = ((u64::MAX, 0u64), (u64::MAX, 0u64));
    for (i, r) in regions.iter().enumerate() {
        let d = r.dst_plan().map_err(|e| match e {
            Error::Overflow { message, .. } => overflow(op, format!("region {i}: {message}")),
            other => other,
        })?;
        if !r.src.same_shape(&d) {
            return Err(invalid(
                op,
                format!("region {i}: the destination's shape differs from the source's"),
            ));
        }
        if r.src.is_empty() {
            continue;
        }
        src = (src.0.min(r.src.start()), src.1.max(r.src.extent_end()));
        dst = (dst.0.min(d.start()), dst.1.max(d.extent_end()));
    }
    let none = |s: (u64, u64)| if s.1 == 0 { (0, 0) } else { s };
    Ok(CopySpans {
        src: none(src),
        dst: none(dst),
    })
}

impl CopySpans {
    /// Checks a source of `src_len` bytes and a destination of `dst_len` bytes (the same
    /// buffer's length twice for an in-place copy), source first.
    pub(crate) fn check(&self, op: &'static str, src_len: usize, dst_len: usize) -> Result<()> {
        for (buffer, (first, end), len) in [
            (Buffer::Source, self.src, src_len),
            (Buffer::Destination, self.dst, dst_len),
        ] {
            if end > len as u64 {
                return Err(Error::OutOfBounds {
                    op,
                    buffer,
                    first: i128::from(first),
                    end: i128::from(end),
                    len,
                });
            }
        }
        Ok(())
    }
}

/// Calls `f(src_offset, dst_offset, block_len)` for every block of every region, region by
/// region, each in packing order (after [`CopySpans::check`]).
fn for_each_copy(regions: &[CopyRegion], mut f: impl FnMut(usize, usize, usize)) {
    for r in regions.iter().filter(|r| !r.src.is_empty()) {
        // The destination offset of a block is its source offset plus `dst_start - start`,
        // modulo 2^64: the exact value, which the bounds check put below the buffer's length.
        let delta = r.dst_start.wrapping_sub(r.src.start());
        let bl = r.src.block_len() as usize;
        crate::cpu::for_each_block(&r.src, |s, _| {
            f(s, (s as u64).wrapping_add(delta) as usize, bl);
        });
    }
}

/// CPU reference of a fused copy: the bytes every region selects in `src` copied to the same
/// shape at its destination start in `dst`, region by region in order. Bytes of `dst` outside
/// the destinations are left as they were.
///
/// # Errors
/// Checked before any byte is written: the errors of [`check_copy`]; [`Error::OutOfBounds`]
/// naming [`Buffer::Source`] if a region reaches past `src`, or [`Buffer::Destination`] if a
/// destination reaches past `dst`.
pub fn copy(regions: &[CopyRegion], src: &[u8], dst: &mut [u8]) -> Result<()> {
    const OP: &str = "fused::copy";
    copy_spans(OP, regions)?.check(OP, src.len(), dst.len())?;
    for_each_copy(regions, |s, d, n| {
        dst[d..d + n].copy_from_slice(&src[s..s + n]);
    });
    Ok(())
}

/// CPU reference of a fused copy within one buffer (source and destination are `buf`): region
/// by region in order, each block moved as by `memmove`. Where a region's destination overlaps
/// bytes a later block or region reads, the later read sees the copied bytes; a GPU launch
/// gives such bytes no defined value (see the [module docs](self)).
///
/// # Errors
/// As [`copy`], both sides checked against `buf`.
pub fn copy_in_place(regions: &[CopyRegion], buf: &mut [u8]) -> Result<()> {
    const OP: &str = "fused::copy_in_place";
    copy_spans(OP, regions)?.check(OP, buf.len(), buf.len())?;
    for_each_copy(regions, |s, d, n| {
        buf.copy_within(s..s + n, d);
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_aligns_and_checks() {
        let a = StridedBlock::new(0, 3, vec![5], vec![8]).unwrap(); // 15 bytes
        let b = StridedBlock::new(1, 2, vec![2], vec![4]).unwrap(); // 4 bytes
        let r = layout(&[a.clone(), StridedBlock::empty(), b.clone()]).unwrap();
        assert_eq!(
            r.iter().map(Region::packed_offset).collect::<Vec<_>>(),
            [0, 16, 16]
        );
        assert_eq!(packed_size(&r), 20);
        assert_eq!(extent_end(&r), a.extent_end().max(b.extent_end()));
        check(&r).unwrap();
        let bad = [Region::new(a.clone(), 0), Region::new(b.clone(), 14)];
        assert!(matches!(check(&bad), Err(Error::InvalidArgument { .. })));
        let ok = [Region::new(a, 0), Region::new(b, 15)];
        check(&ok).unwrap();
    }

    #[test]
    fn cpu_fused_round_trip() {
        let a = StridedBlock::new(0, 2, vec![4], vec![8]).unwrap();
        let b = StridedBlock::new(4, 2, vec![4], vec![8]).unwrap();
        let r = layout(&[a, b]).unwrap();
        let src: Vec<u8> = (0..32).collect();
        let mut packed = vec![0xEEu8; packed_size(&r) as usize];
        assert_eq!(pack(&r, &src, &mut packed).unwrap(), 24);
        assert_eq!(
            packed,
            [
                0, 1, 8, 9, 16, 17, 24, 25, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 4, 5,
                12, 13, 20, 21, 28, 29
            ]
        );
        let mut back = vec![0u8; 32];
        unpack(&r, &packed, &mut back).unwrap();
        for (i, &v) in back.iter().enumerate() {
            let want = if i % 8 < 2 || (4..6).contains(&(i % 8)) {
                i as u8
            } else {
                0
            };
            assert_eq!(v, want, "byte {i}");
        }
        assert!(matches!(
            pack(&r, &src[..29], &mut packed),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            pack(&r, &src, &mut packed[..23]),
            Err(Error::BufferTooSmall { needed: 24, .. })
        ));
    }

    /// The naive oracle: every byte of every block, its offsets found by dividing the block
    /// index, region by region.
    fn naive_copy(regions: &[CopyRegion], src: &[u8], dst: &mut [u8]) {
        for r in regions {
            let p = r.src();
            for b in 0..p.num_blocks() {
                let (mut rest, mut rel) = (b, 0u64);
                for (&n, &st) in p.counts().iter().zip(p.strides()) {
                    rel += (rest % n) * st;
                    rest /= n;
                }
                for i in 0..p.block_len() {
                    dst[(r.dst_start() + rel + i) as usize] = src[(p.start() + rel + i) as usize];
                }
            }
        }
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn copy_region_shape_and_words() {
        let src = StridedBlock::new(4, 8, vec![3, 2], vec![16, 64]).unwrap();
        let r = CopyRegion::new(src.clone(), 200);
        assert_eq!(r.src(), &src);
        assert_eq!(r.dst_start(), 200);
        assert_eq!(r.bytes(), 48);
        let d = r.dst_plan().unwrap();
        assert_eq!(
            d,
            StridedBlock::new(200, 8, vec![3, 2], vec![16, 64]).unwrap()
        );
        assert_eq!(CopyRegion::between(src.clone(), &d).unwrap(), r);
        // The GCD rule over both starts: start 4 limits to 4, then the destination start.
        assert_eq!(r.word_size(0, 0), 4);
        let a = CopyRegion::new(StridedBlock::new(0, 16, vec![4], vec![32]).unwrap(), 0);
        assert_eq!(a.word_size(0, 0), 16);
        assert_eq!(a.word_size(256, 256), 16);
        let b = CopyRegion::new(a.src().clone(), 8);
        assert_eq!(b.word_size(256, 256), 8);
        let b = CopyRegion::new(a.src().clone(), 4098);
        assert_eq!(b.word_size(256, 256), 2);
        assert_eq!(a.word_size(0, 0x1001), 1);
        assert_eq!(a.word_size(4, 0), 4);
        // Shapes must agree.
        let other = StridedBlock::new(0, 8, vec![3, 2], vec![16, 65]).unwrap();
        assert!(matches!(
            CopyRegion::between(src.clone(), &other),
            Err(Error::InvalidArgument { .. })
        ));
        let other = StridedBlock::new(0, 4, vec![3, 2], vec![16, 64]).unwrap();
        assert!(CopyRegion::between(src, &other).is_err());
        // An empty source copies nothing, wherever its destination.
        let e = CopyRegion::new(StridedBlock::empty(), 77);
        assert_eq!(e.dst_plan().unwrap(), StridedBlock::empty());
        assert_eq!(e.bytes(), 0);
        // A destination past u64.
        let far = CopyRegion::new(
            StridedBlock::new(0, 8, vec![2], vec![8]).unwrap(),
            u64::MAX - 8,
        );
        assert!(matches!(far.dst_plan(), Err(Error::Overflow { .. })));
        assert!(matches!(
            check_copy(&[e, far]),
            Err(Error::Overflow {
                op: "fused::check_copy",
                ..
            })
        ));
    }

    #[test]
    fn copy_two_buffers_and_bounds() {
        let regions = [
            CopyRegion::new(StridedBlock::new(1, 3, vec![4], vec![8]).unwrap(), 40),
            CopyRegion::new(StridedBlock::empty(), 1000),
            CopyRegion::new(StridedBlock::new(0, 2, vec![2, 2], vec![4, 16]).unwrap(), 3),
        ];
        let src = bytes(64, 1);
        let mut dst = vec![0xEEu8; 80];
        let mut want = dst.clone();
        copy(&regions, &src, &mut dst).unwrap();
        naive_copy(&regions, &src, &mut want);
        assert_eq!(dst, want);
        assert_eq!(&dst[40..43], &src[1..4]);
        assert_eq!(&dst[64..67], &src[25..28]);
        assert_eq!(dst[0..3], [0xEE; 3]);
        // Source extent: max(1 + 3 + 24, 0 + 2 + 4 + 16) = 28; destination: 40 + 27 = 67.
        let before = dst.clone();
        assert!(matches!(
            copy(&regions, &src[..27], &mut dst),
            Err(Error::OutOfBounds {
                buffer: Buffer::Source,
                first: 0,
                end: 28,
                len: 27,
                ..
            })
        ));
        assert!(matches!(
            copy(&regions, &src, &mut dst[..66]),
            Err(Error::OutOfBounds {
                buffer: Buffer::Destination,
                first: 3,
                end: 67,
                len: 66,
                ..
            })
        ));
        assert_eq!(dst, before, "nothing written on error");
        let mut exact = vec![0u8; 67];
        copy(&regions, &src[..28], &mut exact).unwrap();
        // Nothing to copy: any buffers do.
        copy(&[], &[], &mut []).unwrap();
        copy_in_place(&[CopyRegion::new(StridedBlock::empty(), 9)], &mut []).unwrap();
    }

    #[test]
    fn copy_in_place_fills_periodic_ghosts() {
        // A 1-D periodic grid of 10 interior f64 with 2 ghost cells each side, one rank: the
        // low ghosts take the high interior cells and the other way round.
        let (n, g, e) = (10u64, 2u64, 8u64);
        let cell = |i: u64| StridedBlock::new(i * e, g * e, vec![], vec![]).unwrap();
        let regions = [
            CopyRegion::between(cell(n), &cell(0)).unwrap(),
            CopyRegion::between(cell(g), &cell(n + g)).unwrap(),
        ];
        let mut buf = bytes(((n + 2 * g) * e) as usize, 7);
        let mut want = buf.clone();
        let snapshot = buf.clone();
        naive_copy(&regions, &snapshot, &mut want);
        copy_in_place(&regions, &mut buf).unwrap();
        assert_eq!(buf, want);
        assert_eq!(&buf[..16], &snapshot[80..96]);
        assert_eq!(&buf[96..], &snapshot[16..32]);
        // The in-place bounds name the side that does not fit.
        let mut short = vec![0u8; 95];
        assert!(matches!(
            copy_in_place(&regions, &mut short),
            Err(Error::OutOfBounds {
                buffer: Buffer::Source,
                end: 96,
                ..
            })
        ));
        let high = [CopyRegion::new(cell(0), 100)];
        let mut short = vec![0u8; 110];
        assert!(matches!(
            copy_in_place(&high, &mut short),
            Err(Error::OutOfBounds {
                buffer: Buffer::Destination,
                first: 100,
                end: 116,
                ..
            })
        ));
    }

    #[test]
    fn copy_in_place_is_region_by_region_memmove() {
        // A region whose destination overlaps its own source (shifted by 2 bytes): each block
        // moves as one memmove, blocks in packing order.
        let r = [CopyRegion::new(
            StridedBlock::new(0, 4, vec![3], vec![6]).unwrap(),
            2,
        )];
        let mut buf: Vec<u8> = (0..20).collect();
        copy_in_place(&r, &mut buf).unwrap();
        let mut want: Vec<u8> = (0..20).collect();
        for b in 0..3 {
            want.copy_within(b * 6..b * 6 + 4, b * 6 + 2);
        }
        assert_eq!(buf, want);
    }

    /// A random region: up to 4 dimensions over a block, the blocks of the source disjoint,
    /// any start on either side.
    fn random_region() -> impl proptest::strategy::Strategy<Value = CopyRegion> {
        use proptest::prelude::*;
        (
            proptest::sample::select(&[1u64, 2, 4, 8, 16][..]),
            1u64..5,
            0u64..40,
            0u64..40,
            proptest::collection::vec((1u64..5, 0u64..9), 0..=4),
        )
            .prop_map(|(unit, words, start, dst_start, dims)| {
                let block = unit * words;
                let mut span = block;
                let (mut counts, mut strides) = (Vec::new(), Vec::new());
                for (n, slack) in dims {
                    let stride = span + slack;
                    span = stride * n;
                    counts.push(n);
                    strides.push(stride);
                }
                let src = StridedBlock::new(start, block, counts, strides).unwrap();
                CopyRegion::new(src, dst_start)
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(300))]

        /// Two buffers: the reference equals the byte-by-byte oracle, whatever the overlap of
        /// the destinations (both write region by region in order).
        #[test]
        fn copy_matches_the_naive_oracle(
            regions in proptest::collection::vec(random_region(), 0..5),
            seed in 0u8..255,
        ) {
            let spans = copy_spans("test", &regions).unwrap();
            let src = bytes(spans.src.1 as usize + 3, seed);
            let mut got = vec![0x5Au8; spans.dst.1 as usize + 5];
            let mut want = got.clone();
            copy(&regions, &src, &mut got).unwrap();
            naive_copy(&regions, &src, &mut want);
            proptest::prop_assert_eq!(got, want);
        }

        /// One buffer, the source regions placed below the destinations (disjoint, as in a
        /// halo): in place equals the two-buffer copy from a snapshot.
        #[test]
        fn copy_in_place_matches_the_oracle_when_disjoint(
            regions in proptest::collection::vec(random_region(), 0..5),
            seed in 0u8..255,
        ) {
            let src_end = copy_spans("test", &regions).unwrap().src.1;
            let regions: Vec<CopyRegion> = regions
                .into_iter()
                .map(|r| {
                    let at = r.dst_start() + src_end;
                    CopyRegion::new(r.src().clone(), at)
                })
                .collect();
            let len = copy_spans("test", &regions).unwrap().dst.1.max(src_end) as usize;
            let mut buf = bytes(len, seed);
            let snapshot = buf.clone();
            let mut want = buf.clone();
            naive_copy(&regions, &snapshot, &mut want);
            copy_in_place(&regions, &mut buf).unwrap();
            proptest::prop_assert_eq!(buf, want);
        }
    }
}
