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
}
