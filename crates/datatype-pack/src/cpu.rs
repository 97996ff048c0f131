//! The CPU reference packer: the oracle every other packer is tested against.
//!
//! [`pack`] and [`unpack`] take a [`Layout`] (a [`StridedBlock`] or a [`Type`], which is
//! canonicalized and planned on the way) and check every bound before touching a byte: a layout
//! that reaches outside its strided buffer is [`Error::OutOfBounds`], a packed buffer shorter than
//! the packed size is [`Error::BufferTooSmall`]. On error, no byte has been written.
//!
//! [`pack_naive`] and [`unpack_naive`] walk the un-canonicalized tree node by node, with their
//! own bounds computation. They share no code with the canonical passes or plans, which makes
//! them the independent side of the property tests. Both paths handle negative strides (the
//! planned one through reversed plan dimensions, see [`crate::plan`]).

use std::borrow::Cow;
use std::ops::Range;

use crate::error::{overflow, Buffer, Error, Result};
use crate::ir::Type;
use crate::plan::StridedBlock;

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::plan::StridedBlock {}
    impl Sealed for crate::ir::Type {}
}

/// Something [`pack`] and [`unpack`] accept: a [`StridedBlock`] or a [`Type`].
pub trait Layout: sealed::Sealed {
    /// The half-open range of bytes, relative to the strided buffer's start, from the lowest to
    /// one past the highest byte the layout touches; `None` when it touches none.
    ///
    /// # Errors
    /// [`Error::Overflow`] if a bound does not fit an `i128`.
    fn byte_span(&self) -> Result<Option<Range<i128>>>;

    /// The plan that packs this layout (borrowed for a plan, built for a type).
    ///
    /// # Errors
    /// As [`StridedBlock::from_type`] for a type; never for a plan.
    fn plan(&self) -> Result<Cow<'_, StridedBlock>>;
}

impl Layout for StridedBlock {
    fn byte_span(&self) -> Result<Option<Range<i128>>> {
        Ok((!self.is_empty()).then(|| i128::from(self.start())..i128::from(self.extent_end())))
    }

    fn plan(&self) -> Result<Cow<'_, StridedBlock>> {
        Ok(Cow::Borrowed(self))
    }
}

impl Layout for Type {
    fn byte_span(&self) -> Result<Option<Range<i128>>> {
        self.byte_range()
    }

    fn plan(&self) -> Result<Cow<'_, StridedBlock>> {
        StridedBlock::from_type(self).map(Cow::Owned)
    }
}

fn check_span(
    op: &'static str,
    buffer: Buffer,
    span: Option<Range<i128>>,
    len: usize,
) -> Result<()> {
    match span {
        Some(r) if r.start < 0 || r.end > len as i128 => Err(Error::OutOfBounds {
            op,
            buffer,
            first: r.start,
            end: r.end,
            len,
        }),
        _ => Ok(()),
    }
}

fn check_packed(op: &'static str, buffer: Buffer, needed: u64, len: usize) -> Result<()> {
    if needed > len as u64 {
        return Err(Error::BufferTooSmall {
            op,
            buffer,
            needed,
            len,
        });
    }
    Ok(())
}

/// Calls `f(strided_offset, packed_offset)` for every block of a plan whose extent has been
/// checked against the strided buffer, in packing order.
pub(crate) fn for_each_block(plan: &StridedBlock, mut f: impl FnMut(usize, usize)) {
    if plan.is_empty() {
        return;
    }
    let counts = plan.counts();
    let steps: Vec<u64> = (0..counts.len()).map(|k| plan.step(k)).collect();
    let block = plan.block_len();
    let nd = counts.len();
    let mut idx = vec![0u64; nd];
    // Offsets are tracked with wrapping arithmetic: the odometer below may step one stride past a
    // dimension's end (possibly far, for a count-1 dimension) before stepping back, and a
    // reversed dimension steps by the two's complement of its stride. The value used for each
    // block is exact, and inside the checked extent.
    let mut off = plan.origin();
    let mut packed = 0u64;
    loop {
        f(off as usize, packed as usize);
        packed += block;
        let mut k = 0;
        loop {
            if k == nd {
                return;
            }
            idx[k] += 1;
            off = off.wrapping_add(steps[k]);
            if idx[k] < counts[k] {
                break;
            }
            off = off.wrapping_sub(steps[k].wrapping_mul(counts[k]));
            idx[k] = 0;
            k += 1;
        }
    }
}

/// Packs the bytes `layout` selects in `src` into the front of `dst`, in layout order.
/// Returns the number of bytes written (the packed size).
///
/// # Errors
/// Checked before any byte is written:
/// * [`Error::OutOfBounds`] if the layout touches bytes outside `src`;
/// * [`Error::BufferTooSmall`] if `dst` is shorter than the packed size;
/// * for a [`Type`], the errors of [`StridedBlock::from_type`] (a layout that starts before
///   the buffer is [`Error::OutOfBounds`] first). Negative strides are packed in the layout's
///   order, as `MPI_Pack` packs them.
pub fn pack<L: Layout + ?Sized>(layout: &L, src: &[u8], dst: &mut [u8]) -> Result<u64> {
    const OP: &str = "pack";
    check_span(OP, Buffer::Source, layout.byte_span()?, src.len())?;
    let plan = layout.plan()?;
    check_packed(OP, Buffer::Destination, plan.packed_size(), dst.len())?;
    let bl = plan.block_len() as usize;
    for_each_block(&plan, |s, p| {
        dst[p..p + bl].copy_from_slice(&src[s..s + bl]);
    });
    Ok(plan.packed_size())
}

/// Scatters the front of the packed buffer `src` into the bytes `layout` selects in `dst`, in
/// layout order; every other byte of `dst` is left as it was. Returns the number of bytes read
/// (the packed size).
///
/// # Errors
/// Checked before any byte is written:
/// * [`Error::BufferTooSmall`] if `src` is shorter than the packed size;
/// * [`Error::OutOfBounds`] if the layout touches bytes outside `dst`;
/// * for a [`Type`], the errors of [`StridedBlock::from_type`].
pub fn unpack<L: Layout + ?Sized>(layout: &L, src: &[u8], dst: &mut [u8]) -> Result<u64> {
    const OP: &str = "unpack";
    check_span(OP, Buffer::Destination, layout.byte_span()?, dst.len())?;
    let plan = layout.plan()?;
    check_packed(OP, Buffer::Source, plan.packed_size(), src.len())?;
    let bl = plan.block_len() as usize;
    for_each_block(&plan, |s, p| {
        dst[s..s + bl].copy_from_slice(&src[p..p + bl]);
    });
    Ok(plan.packed_size())
}

/// Calls `f(start, len)` for every non-empty dense piece of `t`, in packing order, with
/// `start` relative to the base.
fn walk(t: &Type, base: i128, f: &mut impl FnMut(i128, u64)) -> Result<()> {
    let of = || overflow("naive walk", "byte offset exceeds i128");
    match t {
        Type::Dense { offset, extent } => {
            if *extent > 0 {
                f(
                    base.checked_add(i128::from(*offset)).ok_or_else(of)?,
                    *extent,
                );
            }
            Ok(())
        }
        Type::Stream {
            offset,
            stride,
            count,
            child,
        } => {
            if child.is_empty() {
                return Ok(());
            }
            let first = base.checked_add(i128::from(*offset)).ok_or_else(of)?;
            for i in 0..*count {
                let at = i128::from(i)
                    .checked_mul(i128::from(*stride))
                    .and_then(|d| first.checked_add(d))
                    .ok_or_else(of)?;
                walk(child, at, f)?;
            }
            Ok(())
        }
    }
}

/// Lowest byte, one past the highest byte, and total bytes of `t`'s pieces, found by walking
/// every piece.
fn naive_extent(t: &Type) -> Result<(Option<Range<i128>>, u128)> {
    let mut lo = i128::MAX;
    let mut hi = i128::MIN;
    let mut total: u128 = 0;
    walk(t, 0, &mut |start, len| {
        lo = lo.min(start);
        hi = hi.max(start.saturating_add(i128::from(len)));
        total = total.saturating_add(u128::from(len));
    })?;
    Ok(((total > 0).then_some(lo..hi), total))
}

fn naive_packed(op: &'static str, total: u128) -> Result<u64> {
    u64::try_from(total).map_err(|_| overflow(op, "packed size exceeds u64"))
}

/// Packs `t` by walking its tree as written, piece by piece (no canonicalization, no plan).
/// Slow and simple on purpose: the oracle the canonical path is tested against. It walks every
/// dense piece twice (once to check bounds, once to copy), so its time grows with the number of
/// pieces, not the number of bytes. Negative strides and offsets are fine as long as every byte
/// lies inside `src`.
///
/// # Errors
/// Checked before any byte is written: [`Error::OutOfBounds`] if a piece lies outside `src`,
/// [`Error::BufferTooSmall`] if `dst` is shorter than the packed size, [`Error::Overflow`] for
/// offsets beyond `i128` or a packed size beyond `u64`.
pub fn pack_naive(t: &Type, src: &[u8], dst: &mut [u8]) -> Result<u64> {
    const OP: &str = "pack_naive";
    let (span, total) = naive_extent(t)?;
    check_span(OP, Buffer::Source, span, src.len())?;
    let total = naive_packed(OP, total)?;
    check_packed(OP, Buffer::Destination, total, dst.len())?;
    let mut cursor = 0usize;
    walk(t, 0, &mut |start, len| {
        let (s, n) = (start as usize, len as usize);
        dst[cursor..cursor + n].copy_from_slice(&src[s..s + n]);
        cursor += n;
    })?;
    Ok(total)
}

/// Unpacks into `dst` by walking `t`'s tree as written; the inverse of [`pack_naive`].
///
/// # Errors
/// As [`pack_naive`], with the roles of the buffers swapped.
pub fn unpack_naive(t: &Type, src: &[u8], dst: &mut [u8]) -> Result<u64> {
    const OP: &str = "unpack_naive";
    let (span, total) = naive_extent(t)?;
    check_span(OP, Buffer::Destination, span, dst.len())?;
    let total = naive_packed(OP, total)?;
    check_packed(OP, Buffer::Source, total, src.len())?;
    let mut cursor = 0usize;
    walk(t, 0, &mut |start, len| {
        let (s, n) = (start as usize, len as usize);
        dst[s..s + n].copy_from_slice(&src[cursor..cursor + n]);
        cursor += n;
    })?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::construct::{subarray, vector, Order};

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| i as u8).collect()
    }

    #[test]
    fn pack_a_vector() {
        let t = vector(3, 2, 4, 1).unwrap().displaced(1).unwrap();
        let src = bytes(16);
        let mut dst = vec![0u8; 6];
        assert_eq!(pack(&t, &src, &mut dst).unwrap(), 6);
        assert_eq!(dst, [1, 2, 5, 6, 9, 10]);
        let mut naive = vec![0u8; 6];
        pack_naive(&t, &src, &mut naive).unwrap();
        assert_eq!(naive, dst);
        let plan = StridedBlock::from_type(&t).unwrap();
        let mut via_plan = vec![0u8; 6];
        pack(&plan, &src, &mut via_plan).unwrap();
        assert_eq!(via_plan, dst);
    }

    #[test]
    fn unpack_leaves_other_bytes() {
        let t = subarray(&[3, 4], &[2, 2], &[1, 1], Order::C, 1).unwrap();
        let mut dst = vec![0xAAu8; 12];
        unpack(&t, &[1, 2, 3, 4], &mut dst).unwrap();
        assert_eq!(
            dst,
            [0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 1, 2, 0xAA, 0xAA, 3, 4, 0xAA]
        );
        let mut dst2 = vec![0xAAu8; 12];
        unpack_naive(&t, &[1, 2, 3, 4], &mut dst2).unwrap();
        assert_eq!(dst, dst2);
    }

    #[test]
    fn bounds_are_checked_first() {
        let t = vector(3, 2, 4, 1).unwrap(); // touches 0..10
        let mut dst = vec![7u8; 6];
        assert_eq!(
            pack(&t, &bytes(9), &mut dst),
            Err(Error::OutOfBounds {
                op: "pack",
                buffer: Buffer::Source,
                first: 0,
                end: 10,
                len: 9
            })
        );
        assert_eq!(
            pack(&t, &bytes(10), &mut dst[..5]),
            Err(Error::BufferTooSmall {
                op: "pack",
                buffer: Buffer::Destination,
                needed: 6,
                len: 5
            })
        );
        assert_eq!(dst, [7; 6]);
        let mut small = vec![7u8; 9];
        assert!(matches!(
            unpack(&t, &bytes(6), &mut small),
            Err(Error::OutOfBounds {
                end: 10,
                len: 9,
                ..
            })
        ));
        assert_eq!(small, [7; 9]);
        assert!(matches!(
            unpack(&t, &bytes(5), &mut [0; 10]),
            Err(Error::BufferTooSmall {
                needed: 6,
                len: 5,
                ..
            })
        ));
        // Before the base.
        let t = t.with_offset(-1);
        assert!(matches!(
            pack(&t, &bytes(100), &mut dst),
            Err(Error::OutOfBounds { first: -1, .. })
        ));
        assert!(matches!(
            pack_naive(&t, &bytes(100), &mut dst),
            Err(Error::OutOfBounds {
                first: -1,
                end: 9,
                ..
            })
        ));
    }

    #[test]
    fn negative_strides_pack_in_layout_order() {
        // Reverse the 4 two-byte elements of an 8-byte buffer.
        let t = Type::stream(4, -2, Type::dense(2)).with_offset(6);
        let src = bytes(8);
        let mut dst = vec![0u8; 8];
        pack_naive(&t, &src, &mut dst).unwrap();
        assert_eq!(dst, [6, 7, 4, 5, 2, 3, 0, 1]);
        let mut planned = vec![0u8; 8];
        pack(&t, &src, &mut planned).unwrap();
        assert_eq!(planned, dst);
        let mut back = vec![0u8; 8];
        unpack(&t, &dst, &mut back).unwrap();
        assert_eq!(back, src);
    }

    #[test]
    fn negative_stride_vector_packs_as_mpi_pack() {
        // MPI_Type_vector(3, 2, -4, 2-byte element) at a buffer address 16 bytes in: block 0
        // (bytes 16..20) first, then block 1 at 8..12, then block 2 at 0..4 (MPI_Pack order).
        let t = vector(3, 2, -4, 2).unwrap().displaced(16).unwrap();
        let src = bytes(24);
        let mut dst = vec![0u8; 12];
        assert_eq!(pack(&t, &src, &mut dst).unwrap(), 12);
        assert_eq!(dst, [16, 17, 18, 19, 8, 9, 10, 11, 0, 1, 2, 3]);
        let mut naive = vec![0u8; 12];
        pack_naive(&t, &src, &mut naive).unwrap();
        assert_eq!(naive, dst);
        // Nested: an hvector of 2 descending vectors, themselves descending.
        let inner = vector(3, 1, -2, 4).unwrap(); // bytes 0, -8, -16 (4 each)
        let t = crate::construct::hvector(2, 1, -40, inner)
            .unwrap()
            .displaced(60)
            .unwrap();
        let src = bytes(64);
        let mut planned = vec![0u8; 24];
        let mut naive = vec![0u8; 24];
        pack(&t, &src, &mut planned).unwrap();
        pack_naive(&t, &src, &mut naive).unwrap();
        assert_eq!(planned, naive);
        assert_eq!(&planned[..4], &[60, 61, 62, 63]);
        assert_eq!(&planned[12..16], &[20, 21, 22, 23]);
        // Unpacking scatters back to the same places and nothing else.
        let mut ghost = vec![0xEEu8; 64];
        unpack(&t, &planned, &mut ghost).unwrap();
        let mut want = vec![0xEEu8; 64];
        unpack_naive(&t, &planned, &mut want).unwrap();
        assert_eq!(ghost, want);
        // Before the buffer: the bounds are checked on the true range.
        let t = vector(3, 2, -4, 2).unwrap();
        assert!(matches!(
            pack(&t, &src, &mut dst),
            Err(Error::OutOfBounds {
                first: -16,
                end: 4,
                ..
            })
        ));
    }

    #[test]
    fn empty_layouts_touch_nothing() {
        let t = vector(0, 2, 4, 1).unwrap().with_offset(-100);
        assert_eq!(pack(&t, &[], &mut []).unwrap(), 0);
        assert_eq!(pack_naive(&t, &[], &mut []).unwrap(), 0);
        assert_eq!(unpack(&StridedBlock::empty(), &[], &mut []).unwrap(), 0);
    }

    #[test]
    fn count_one_dimension_with_a_huge_stride() {
        let p = StridedBlock::new(2, 2, vec![3, 1, 2], vec![4, u64::MAX / 2, 12]).unwrap();
        let src = bytes(p.extent_end() as usize);
        let mut dst = vec![0u8; 12];
        pack(&p, &src, &mut dst).unwrap();
        assert_eq!(dst, [2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23]);
    }
}
