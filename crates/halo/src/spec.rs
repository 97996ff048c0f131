//! What an exchange moves: [`HaloSpec`] (cells per rank, radius, quantities, neighbours,
//! grid, pipeline chunks), [`Neighbours`] and the [`Direction`]s they stand for.

use collectives_core::{Error, Result};

/// Which neighbours a rank exchanges with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Neighbours {
    /// The 6 face neighbours (`±x`, `±y`, `±z`): ghost cells across faces only; the edge and
    /// corner ghost cells are left as they are.
    Faces,
    /// All 26 neighbours (faces, edges and corners): every ghost cell is filled.
    All,
}

impl Neighbours {
    /// Number of directions: 6 or 26.
    pub const fn count(self) -> usize {
        match self {
            Neighbours::Faces => 6,
            Neighbours::All => 26,
        }
    }

    /// `faces` or `all`.
    pub const fn name(self) -> &'static str {
        match self {
            Neighbours::Faces => "faces",
            Neighbours::All => "all",
        }
    }
}

/// A direction to a neighbour: `-1`, `0` or `1` per axis, `[x, y, z]`, not all zero.
pub type Direction = [i8; 3];

/// The directions of `neighbours`, in the order every rank posts its messages: z slowest, x
/// fastest, `-1` before `0` before `1`, the zero direction left out.
pub fn directions(neighbours: Neighbours) -> Vec<Direction> {
    let mut out = Vec::with_capacity(neighbours.count());
    for z in -1i8..=1 {
        for y in -1i8..=1 {
            for x in -1i8..=1 {
                let nonzero = [x, y, z].iter().filter(|&&c| c != 0).count();
                let keep = match neighbours {
                    Neighbours::Faces => nonzero == 1,
                    Neighbours::All => nonzero > 0,
                };
                if keep {
                    out.push([x, y, z]);
                }
            }
        }
    }
    out
}

/// What a halo exchange moves: every rank holds a block of `n[0] x n[1] x n[2]` interior cells
/// (`x`, `y`, `z`) surrounded by `radius` ghost cells on every side, for `quantities` f64
/// quantities, stored as `[quantity][z][y][x]` (x fastest) over the padded block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct HaloSpec {
    /// Interior cells per rank, `[nx, ny, nz]`.
    pub n: [usize; 3],
    /// Ghost cells on each side (at least 1, at most the smallest of `n`).
    pub radius: usize,
    /// Quantities per cell (at least 1).
    pub quantities: usize,
    /// 6 faces or all 26 neighbours.
    pub neighbours: Neighbours,
    /// The process grid `[px, py, pz]`; `None`: [`dims_create`](crate::grid::dims_create) of the number of ranks.
    pub dims: Option<[usize; 3]>,
    /// Pipeline depth: every message to another rank is cut into this many pieces (by
    /// quantity, or by z layers when there are fewer quantities than pieces), each packed,
    /// sent and unpacked on its own so that the pieces overlap (default [`DEFAULT_CHUNKS`];
    /// 1: no pipeline).
    pub chunks: usize,
}

/// The default [`HaloSpec::chunks`]: 1. On 2xH200 (docs/PERFORMANCE.md) one chunk was 12 to
/// 19 us faster than two when the neighbour is reached through CUDA IPC (every extra chunk adds
/// launches and flag waits and its pack competes with the pulls), and as fast as two through
/// NCCL, where every extra chunk also costs an NCCL group (about 20 us).
pub const DEFAULT_CHUNKS: usize = 1;

/// The largest [`HaloSpec::chunks`] accepted.
pub const MAX_CHUNKS: usize = 64;

impl HaloSpec {
    /// A spec on the process grid [`dims_create`](crate::grid::dims_create) makes.
    pub fn new(n: [usize; 3], radius: usize, quantities: usize, neighbours: Neighbours) -> Self {
        Self {
            n,
            radius,
            quantities,
            neighbours,
            dims: None,
            chunks: DEFAULT_CHUNKS,
        }
    }

    /// A cube of `n^3` interior cells per rank.
    pub fn cube(n: usize, radius: usize, quantities: usize, neighbours: Neighbours) -> Self {
        Self::new([n; 3], radius, quantities, neighbours)
    }

    /// This spec on the process grid `dims` (`[px, py, pz]`, whose product must be the number of
    /// ranks).
    #[must_use]
    pub fn with_dims(mut self, dims: [usize; 3]) -> Self {
        self.dims = Some(dims);
        self
    }

    /// This spec with messages to other ranks cut into `chunks` pipelined pieces (1 to
    /// [`MAX_CHUNKS`]; see [`HaloSpec::chunks`]).
    #[must_use]
    pub fn with_chunks(mut self, chunks: usize) -> Self {
        self.chunks = chunks;
        self
    }

    /// Cells per side with the ghost cells: `n + 2 radius`.
    pub fn padded(&self) -> [usize; 3] {
        self.n.map(|n| n + 2 * self.radius)
    }

    /// Elements (f64) of one rank's field: `quantities x` the padded cells.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it overflows `usize`.
    pub fn field_len(&self) -> Result<usize> {
        let p = self.padded();
        self.quantities
            .checked_mul(p[0])
            .and_then(|v| v.checked_mul(p[1]))
            .and_then(|v| v.checked_mul(p[2]))
            .and_then(|v| v.checked_mul(8).map(|_| v))
            .ok_or_else(|| {
                Error::invalid(
                    "halo",
                    format!("a field of {} x {p:?} f64 overflows", self.quantities),
                )
            })
    }

    /// The index of `(quantity, x, y, z)` (padded coordinates) in a rank's field.
    pub fn index(&self, quantity: usize, cell: [usize; 3]) -> usize {
        let p = self.padded();
        ((quantity * p[2] + cell[2]) * p[1] + cell[1]) * p[0] + cell[0]
    }

    /// Checks the spec's own numbers (not the process grid).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the number that is wrong.
    pub fn validate(&self) -> Result<()> {
        const OP: &str = "halo";
        if self.n.contains(&0) {
            return Err(Error::invalid(
                OP,
                format!("every side needs at least one cell, got n = {:?}", self.n),
            ));
        }
        if self.radius == 0 {
            return Err(Error::invalid(OP, "the radius must be at least 1"));
        }
        let smallest = self.n.iter().copied().min().unwrap_or(0);
        if self.radius > smallest {
            return Err(Error::invalid(
                OP,
                format!(
                    "radius {} exceeds the smallest side {smallest} of n = {:?}: a neighbour \
                     sends only its own interior cells",
                    self.radius, self.n
                ),
            ));
        }
        if self.quantities == 0 {
            return Err(Error::invalid(OP, "at least one quantity is needed"));
        }
        if !(1..=MAX_CHUNKS).contains(&self.chunks) {
            return Err(Error::invalid(
                OP,
                format!("chunks must be from 1 to {MAX_CHUNKS}, got {}", self.chunks),
            ));
        }
        self.field_len().map(|_| ())
    }
}
