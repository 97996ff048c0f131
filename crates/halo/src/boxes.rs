//! Boxes of cells in a rank's padded block: what it sends ([`send_box`]), what it receives
//! ([`ghost_box`]), where a wrap copy reads ([`wrap_box`]), and their `datatype-pack` plans
//! ([`box_plan`], [`box_plan_of`]).

use std::ops::Range;

use datatype_pack::construct::{subarray, Order};
use datatype_pack::StridedBlock;

use collectives_core::Result;

use crate::error::pack_error;
use crate::spec::{Direction, HaloSpec};

/// A box of cells in a rank's padded block: `start` and `size` per axis, `[x, y, z]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CellBox {
    /// First cell per axis.
    pub start: [usize; 3],
    /// Cells per axis.
    pub size: [usize; 3],
}

impl CellBox {
    /// Number of cells.
    pub fn cells(&self) -> usize {
        self.size.iter().product()
    }

    /// Whether `cell` lies inside.
    pub fn contains(&self, cell: [usize; 3]) -> bool {
        (0..3).all(|a| cell[a] >= self.start[a] && cell[a] < self.start[a] + self.size[a])
    }
}

/// The interior cells a rank sends to its neighbour in direction `dir`: per axis, the low
/// `radius` interior layers for `-1`, the whole interior for `0`, the high `radius` layers for
/// `1`.
pub fn send_box(spec: &HaloSpec, dir: Direction) -> CellBox {
    let r = spec.radius;
    let pick = |a: usize| match dir[a] {
        -1 => (r, r),
        0 => (r, spec.n[a]),
        _ => (spec.n[a], r),
    };
    let p: [(usize, usize); 3] = std::array::from_fn(pick);
    CellBox {
        start: p.map(|(s, _)| s),
        size: p.map(|(_, n)| n),
    }
}

/// The ghost cells filled from the neighbour in direction `dir`: per axis, the low `radius`
/// ghost layers for `-1`, the interior for `0`, the high ghost layers for `1`.
pub fn ghost_box(spec: &HaloSpec, dir: Direction) -> CellBox {
    let r = spec.radius;
    let pick = |a: usize| match dir[a] {
        -1 => (0, r),
        0 => (r, spec.n[a]),
        _ => (spec.n[a] + r, r),
    };
    let p: [(usize, usize); 3] = std::array::from_fn(pick);
    CellBox {
        start: p.map(|(s, _)| s),
        size: p.map(|(_, n)| n),
    }
}

/// The plan of a box of cells, every quantity, in a rank's field (byte offsets from the field's
/// start).
///
/// # Errors
/// [`Error::InvalidArgument`](collectives_core::Error::InvalidArgument) with datatype-pack's message if the box does not fit the field.
pub fn box_plan(spec: &HaloSpec, b: &CellBox) -> Result<StridedBlock> {
    box_plan_of(spec, b, 0..spec.quantities)
}

/// The plan of a box of cells, for the quantities `quantities` only.
///
/// # Errors
/// As [`box_plan`]; also for an empty or out-of-range quantity range.
pub fn box_plan_of(spec: &HaloSpec, b: &CellBox, quantities: Range<usize>) -> Result<StridedBlock> {
    let p = spec.padded().map(|v| v as u64);
    let q = spec.quantities as u64;
    let t = subarray(
        &[q, p[2], p[1], p[0]],
        &[
            quantities.len() as u64,
            b.size[2] as u64,
            b.size[1] as u64,
            b.size[0] as u64,
        ],
        &[
            quantities.start as u64,
            b.start[2] as u64,
            b.start[1] as u64,
            b.start[0] as u64,
        ],
        Order::C,
        8,
    )
    .map_err(|e| pack_error("halo", e))?;
    StridedBlock::from_type(&t).map_err(|e| pack_error("halo", e))
}

/// Where the ghost cells that `direction`'s neighbour fills can be copied from instead, when
/// the direction moves along an axis of a single rank (`dims[a] == 1`) and along another: the
/// [`ghost_box`] of `-direction` shifted by `direction[a] * n[a]` cells along every such axis.
///
/// Along an axis of one rank the grid repeats this rank with period `n[a]`: the ghost cells at
/// `-direction` hold the same values as the cells `n[a]` further in, which lie in the ghost
/// cells of the neighbour across the other axes alone (a face or an edge whose message brings
/// them). `None` when no axis of `direction` has a single rank, or every one does (then the
/// rank is its own neighbour: a local copy).
pub fn wrap_box(spec: &HaloSpec, dims: [usize; 3], direction: Direction) -> Option<CellBox> {
    let single = |a: usize| direction[a] != 0 && dims[a] == 1;
    let other = |a: usize| direction[a] != 0 && dims[a] != 1;
    if !(0..3).any(single) || !(0..3).any(other) {
        return None;
    }
    let mut b = ghost_box(spec, direction.map(|c| -c));
    for a in (0..3).filter(|&a| single(a)) {
        b.start[a] = (b.start[a] as i64 + i64::from(direction[a]) * spec.n[a] as i64) as usize;
    }
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{directions, Neighbours};

    #[test]
    fn directions_and_boxes() {
        let faces = directions(Neighbours::Faces);
        assert_eq!(faces.len(), 6);
        assert_eq!(faces[0], [0, 0, -1]);
        let all = directions(Neighbours::All);
        assert_eq!(all.len(), 26);
        assert!(!all.contains(&[0, 0, 0]));
        let spec = HaloSpec::new([4, 5, 6], 2, 3, Neighbours::All);
        assert_eq!(spec.padded(), [8, 9, 10]);
        assert_eq!(spec.field_len().unwrap(), 3 * 8 * 9 * 10);
        // Faces.
        let b = send_box(&spec, [1, 0, 0]);
        assert_eq!((b.start, b.size), ([4, 2, 2], [2, 5, 6]));
        let b = send_box(&spec, [-1, 0, 0]);
        assert_eq!((b.start, b.size), ([2, 2, 2], [2, 5, 6]));
        let b = ghost_box(&spec, [1, 0, 0]);
        assert_eq!((b.start, b.size), ([6, 2, 2], [2, 5, 6]));
        let b = ghost_box(&spec, [-1, 0, 0]);
        assert_eq!((b.start, b.size), ([0, 2, 2], [2, 5, 6]));
        // An edge and a corner.
        let b = send_box(&spec, [1, -1, 0]);
        assert_eq!((b.start, b.size), ([4, 2, 2], [2, 2, 6]));
        let b = ghost_box(&spec, [-1, 1, 1]);
        assert_eq!((b.start, b.size), ([0, 7, 8], [2, 2, 2]));
        // A send box and the matching ghost box have the same shape.
        for d in all {
            assert_eq!(
                send_box(&spec, d).size,
                ghost_box(&spec, d.map(|c| -c)).size
            );
        }
        // The ghost boxes tile the ghost cells exactly once.
        let p = spec.padded();
        for z in 0..p[2] {
            for y in 0..p[1] {
                for x in 0..p[0] {
                    let hits = directions(Neighbours::All)
                        .iter()
                        .filter(|&&d| ghost_box(&spec, d).contains([x, y, z]))
                        .count();
                    let interior = (0..3).all(|a| {
                        let c = [x, y, z][a];
                        c >= 2 && c < spec.n[a] + 2
                    });
                    assert_eq!(hits, usize::from(!interior), "cell {x} {y} {z}");
                }
            }
        }
    }

    #[test]
    fn wrap_boxes_read_ghost_cells_one_period_in() {
        let spec = HaloSpec::new([4, 3, 5], 2, 1, Neighbours::All);
        // x across two ranks, y and z single: the edge (1, 1, 0) lands at low x, low y; the
        // same values sit ny rows further in, in the low x ghost cells of the interior rows.
        let b = wrap_box(&spec, [2, 1, 1], [1, 1, 0]).unwrap();
        assert_eq!(b.start, [0, 3, 2]);
        assert_eq!(b.size, [2, 2, 5]);
        assert!(ghost_box(&spec, [-1, 0, 0]).contains(b.start));
        // A corner, high y and z: shifted down by ny and nz.
        let b = wrap_box(&spec, [2, 1, 1], [-1, -1, -1]).unwrap();
        assert_eq!(b.start, [6, 2, 2]);
        assert_eq!(b.size, [2, 2, 2]);
        // Two axes of several ranks: the edge across them both.
        let b = wrap_box(&spec, [2, 2, 1], [1, 1, 1]).unwrap();
        assert_eq!(b.start, [0, 0, 5]);
        // Not along a single-rank axis, or only along such axes: no wrap.
        assert_eq!(wrap_box(&spec, [2, 2, 1], [1, 1, 0]), None);
        assert_eq!(wrap_box(&spec, [2, 1, 1], [0, 1, 1]), None);
        assert_eq!(wrap_box(&spec, [1, 1, 1], [1, 1, 1]), None);
    }
}
