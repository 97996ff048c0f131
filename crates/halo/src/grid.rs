//! The periodic 3-D grid of ranks: [`dims_create`] (like `MPI_Dims_create`) and
//! [`ProcessGrid`], which maps ranks to coordinates and finds each rank's neighbours.

use collectives_core::{Error, Result};

use crate::spec::Direction;

/// The most balanced factorization of `size` into three dimensions, largest first, as
/// `MPI_Dims_create(size, 3, ..)` makes it: the smallest difference between the largest and
/// the smallest dimension, then the smallest largest dimension. `dims_create(0)` is `[0, 0, 0]`.
pub fn dims_create(size: usize) -> [usize; 3] {
    if size == 0 {
        return [0; 3];
    }
    let mut best = [size, 1, 1];
    let mut a = 1;
    while a <= size {
        if size % a == 0 {
            let rest = size / a;
            let mut b = 1;
            while b <= a && b <= rest {
                if rest % b == 0 {
                    let c = rest / b;
                    if c <= b {
                        let cand = [a, b, c];
                        let key = |d: [usize; 3]| (d[0] - d[2], d[0]);
                        if key(cand) < key(best) {
                            best = cand;
                        }
                    }
                }
                b += 1;
            }
        }
        a += 1;
    }
    best
}

/// A periodic 3-D grid of ranks: rank `x + px (y + py z)` sits at coordinates `[x, y, z]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessGrid {
    dims: [usize; 3],
}

impl ProcessGrid {
    /// The grid of `size` ranks: `dims`, or [`dims_create`] of `size`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `size` is 0 or the product of `dims` is not `size`.
    pub fn new(size: usize, dims: Option<[usize; 3]>) -> Result<Self> {
        let dims = dims.unwrap_or_else(|| dims_create(size));
        if size == 0 || dims.iter().product::<usize>() != size {
            return Err(Error::invalid(
                "halo",
                format!("the process grid {dims:?} does not hold {size} rank(s)"),
            ));
        }
        Ok(Self { dims })
    }

    /// Ranks per axis, `[px, py, pz]`.
    pub fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.dims.iter().product()
    }

    /// The coordinates of `rank`.
    pub fn coords(&self, rank: usize) -> [usize; 3] {
        let [px, py, _] = self.dims;
        [rank % px, rank / px % py, rank / (px * py)]
    }

    /// The rank at `coords`, wrapped periodically on every axis.
    pub fn rank_at(&self, coords: [i64; 3]) -> usize {
        let w: [usize; 3] =
            std::array::from_fn(|a| coords[a].rem_euclid(self.dims[a] as i64) as usize);
        w[0] + self.dims[0] * (w[1] + self.dims[1] * w[2])
    }

    /// The neighbour of `rank` in direction `dir` (periodic: possibly `rank` itself).
    pub fn neighbour(&self, rank: usize, dir: Direction) -> usize {
        let c = self.coords(rank);
        self.rank_at(std::array::from_fn(|a| c[a] as i64 + i64::from(dir[a])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{directions, Neighbours};

    #[test]
    fn dims_like_mpi_dims_create() {
        for (size, dims) in [
            (1, [1, 1, 1]),
            (2, [2, 1, 1]),
            (3, [3, 1, 1]),
            (4, [2, 2, 1]),
            (6, [3, 2, 1]),
            (7, [7, 1, 1]),
            (8, [2, 2, 2]),
            (12, [3, 2, 2]),
            (16, [4, 2, 2]),
            (24, [4, 3, 2]),
            (32, [4, 4, 2]),
            (36, [4, 3, 3]),
            (60, [5, 4, 3]),
            (64, [4, 4, 4]),
        ] {
            assert_eq!(dims_create(size), dims, "size {size}");
        }
        for size in 1..200 {
            let d = dims_create(size);
            assert_eq!(d.iter().product::<usize>(), size);
            assert!(d[0] >= d[1] && d[1] >= d[2], "{d:?}");
        }
        assert_eq!(dims_create(0), [0, 0, 0]);
    }

    #[test]
    fn grid_coords_and_neighbours() {
        let g = ProcessGrid::new(12, Some([3, 2, 2])).unwrap();
        for r in 0..12 {
            let c = g.coords(r);
            assert_eq!(g.rank_at(c.map(|v| v as i64)), r);
        }
        assert_eq!(g.coords(5), [2, 1, 0]);
        assert_eq!(g.neighbour(5, [1, 0, 0]), 3); // x wraps from 2 to 0
        assert_eq!(g.neighbour(5, [0, 1, 0]), 2); // y wraps from 1 to 0
        assert_eq!(g.neighbour(5, [0, 0, -1]), 11); // z wraps from 0 to 1
        assert_eq!(g.neighbour(0, [-1, -1, -1]), 11);
        // Opposite directions undo each other.
        for r in 0..12 {
            for d in directions(Neighbours::All) {
                assert_eq!(g.neighbour(g.neighbour(r, d), d.map(|c| -c)), r);
            }
        }
        // One rank: every neighbour is itself.
        let one = ProcessGrid::new(1, None).unwrap();
        assert!(directions(Neighbours::All)
            .iter()
            .all(|&d| one.neighbour(0, d) == 0));
        assert!(ProcessGrid::new(4, Some([3, 1, 1])).is_err());
        assert!(ProcessGrid::new(0, None).is_err());
    }
}
