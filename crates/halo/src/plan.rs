//! The geometry of a halo exchange, on the CPU: the process grid, the neighbours, the regions each
//! rank sends and receives, the messages, and a reference for what every ghost cell must hold.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;

use datatype_pack::construct::{subarray, Order};
use datatype_pack::fused::{CopyRegion, Region};
use datatype_pack::{StridedBlock, Type};

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
    /// The process grid `[px, py, pz]`; `None`: [`dims_create`] of the number of ranks.
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
    /// A spec on the process grid [`dims_create`] makes.
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
/// [`Error::InvalidArgument`] with datatype-pack's message if the box does not fit the field.
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

/// One message of an exchange: the bytes `offset..offset + bytes` of the send (or receive)
/// buffer, to (or from) `peer`, made of the regions of `directions` back to back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Message {
    /// The other rank (never this one: see [`LocalCopy`]).
    pub peer: usize,
    /// The pipeline piece the message belongs to, `0..chunks` ([`HaloSpec::chunks`]).
    pub chunk: usize,
    /// Byte offset in the packed buffer.
    pub offset: u64,
    /// Length in bytes.
    pub bytes: u64,
    /// The directions whose regions the message carries, in order. For a send: the directions
    /// of the neighbour; for a receive: the directions of this rank as the *sender* sees them
    /// (the ghost region of direction `-d` holds what the sender sent in direction `d`).
    pub directions: Vec<Direction>,
}

/// What a rank moves without a message: cells `from` of its field copied straight into the
/// ghost cells `to` of the same field. The two plans have the same shape and differ in their
/// start.
///
/// Two kinds ([`HaloPlan::locals`], [`HaloPlan::wraps`]): a rank that is its own neighbour in
/// `direction` (a periodic grid of one rank along every axis `direction` moves on) copies
/// interior cells; and along an axis of one rank, the ghost cells of an edge or a corner repeat
/// ghost cells that the neighbour across the other axes fills, so they are copied from there
/// once those have arrived.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LocalCopy {
    /// The direction the cells are sent in.
    pub direction: Direction,
    /// The cells read, byte offsets in the field: interior cells ([`send_box`] of `direction`)
    /// for a local copy; for a wrap copy, ghost cells filled by a message ([`wrap_box`]).
    pub from: StridedBlock,
    /// The ghost cells written ([`ghost_box`] of the opposite direction).
    pub to: StridedBlock,
}

/// Everything one rank of an exchange needs: the regions to pack and unpack, the messages and
/// the local copies.
///
/// Messages go to other ranks only: a rank that is its own neighbour copies those cells
/// directly ([`LocalCopy`]), and along an axis of a single rank the edges and corners travel
/// inside the face (or edge) across the other axes and are copied into place after it arrives
/// ([`wrap_box`], [`HaloPlan::wraps`]): a 26-neighbour exchange on a grid two ranks wide
/// sends the two x faces and nothing else. Every message is cut into [`HaloSpec::chunks`] pipeline pieces
/// (chunk `k` holds quantities `k q / chunks .. (k + 1) q / chunks` of every region, or the same
/// share of its z layers when there are fewer quantities than chunks; empty pieces are left
/// out). Per chunk, one message per distinct neighbour rank, so a neighbour that is the
/// neighbour in several directions gets one message holding all of them. A sender orders the
/// regions of a message by direction ([`directions`] order); the receiver orders its ghost
/// regions by the sender's direction, so the concatenations agree region by region. One
/// exception: when the neighbour on both sides along x is the same rank (a periodic grid two
/// ranks wide), the two x faces travel interleaved row by row, so that the receiver writes
/// whole runs of `2 radius` ghost cells (see `x_pair_plans`); a message then holds more than
/// one region per direction, and both ends agree on them. Buffers
/// are laid out chunk by chunk, then by peer; messages start on [`MESSAGE_ALIGN`]-byte
/// boundaries and regions within a message follow each other with no gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaloPlan {
    rank: usize,
    chunks: usize,
    sends: Vec<Message>,
    recvs: Vec<Message>,
    send_regions: Vec<Region>,
    recv_regions: Vec<Region>,
    send_spans: Vec<Range<usize>>,
    recv_spans: Vec<Range<usize>>,
    locals: Vec<LocalCopy>,
    wraps: Vec<LocalCopy>,
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

/// Packed-buffer offsets of messages are multiples of this many bytes.
pub const MESSAGE_ALIGN: u64 = 256;

/// Piece `k` of `chunks` of a box: the quantities and the cells it covers (`None` when empty).
fn piece(spec: &HaloSpec, b: &CellBox, k: usize, chunks: usize) -> Option<(Range<usize>, CellBox)> {
    let share = |n: usize| (k * n / chunks)..((k + 1) * n / chunks);
    let (q, b) = if spec.quantities >= chunks {
        (share(spec.quantities), *b)
    } else {
        let z = share(b.size[2]);
        let mut p = *b;
        p.start[2] += z.start;
        p.size[2] = z.len();
        (0..spec.quantities, p)
    };
    (!q.is_empty() && b.cells() > 0).then_some((q, b))
}

/// One side of a plan: the messages, the regions, and for each chunk the range of its regions.
type Side = (Vec<Message>, Vec<Region>, Vec<Range<usize>>);

/// Which end of the messages a side of a plan describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The sender: interior cells ([`send_box`]).
    Send,
    /// The receiver: ghost cells ([`ghost_box`]).
    Recv,
}

/// The direction towards the low x neighbour.
const X_LOW: Direction = [-1, 0, 0];
/// The direction towards the high x neighbour.
const X_HIGH: Direction = [1, 0, 0];

/// A plan from its start, block length and `(count, stride)` dimensions (innermost first),
/// canonicalized like every other plan of an exchange.
fn strided(start: u64, block: u64, dims: &[(u64, u64)]) -> Result<StridedBlock> {
    let too_big = || Error::invalid("halo", "a halo region's byte offsets exceed i64");
    let mut t = Type::dense(block);
    for &(count, stride) in dims {
        t = Type::stream(count, i64::try_from(stride).map_err(|_| too_big())?, t);
    }
    let t = t.with_offset(i64::try_from(start).map_err(|_| too_big())?);
    StridedBlock::from_type(&t).map_err(|e| pack_error("halo", e))
}

/// The regions of both x faces between two ranks that are each other's neighbour on both
/// sides along x (a periodic grid two ranks wide), for the quantities `q` and the y and z
/// cells of `b` (a piece of either x face), interleaved row by row.
///
/// Apart, each x face is a column of `radius`-cell pieces, one per row, and a receiver
/// writing one face leaves every 32-byte memory sector it touches partly written (a
/// read-modify-write in the memory). Yet the high ghost cells of row `y` and the low ghost
/// cells of row `y + 1` touch: together they are `2 radius` contiguous cells. So the
/// receiver's main region is those runs, one per pair of neighbouring rows, and the sender
/// packs the same bytes in the same order: for each pair, its low x interior cells of row `y`
/// (what lands in the high ghost cells) then its high x interior cells of row `y + 1`. Two
/// more regions carry what has no partner: the low ghost cells of the first row and the high
/// ghost cells of the last row of every z layer. Returns the non-empty regions, in the same
/// order at both ends.
fn x_pair_plans(
    spec: &HaloSpec,
    end: End,
    q: &Range<usize>,
    b: &CellBox,
) -> Result<Vec<StridedBlock>> {
    let p = spec.padded().map(|v| v as u64);
    let (r, n) = (spec.radius as u64, spec.n[0] as u64);
    let (y0, ny) = (b.start[1] as u64, b.size[1] as u64);
    let (z0, nz) = (b.start[2] as u64, b.size[2] as u64);
    let (row, layer, array) = (8 * p[0], 8 * p[0] * p[1], 8 * p[0] * p[1] * p[2]);
    let at = |y: u64, x: u64| q.start as u64 * array + z0 * layer + y * row + 8 * x;
    let outer = [(nz, layer), (q.len() as u64, array)];
    let dims =
        |inner: &[(u64, u64)]| -> Vec<(u64, u64)> { inner.iter().chain(&outer).copied().collect() };
    // The unpaired pieces: `radius` cells from `x` in the row `y` of every z layer.
    let piece = |y: u64, x: u64| {
        let b = CellBox {
            start: [x as usize, y as usize, b.start[2]],
            size: [spec.radius, 1, b.size[2]],
        };
        box_plan_of(spec, &b, q.clone())
    };
    let last = y0 + ny - 1;
    let plans = match end {
        End::Send => [
            strided(
                at(y0, r),
                8 * r,
                &dims(&[(2, row + 8 * (n - r)), (ny - 1, row)]),
            )?,
            piece(y0, n)?,
            piece(last, r)?,
        ],
        End::Recv => [
            strided(at(y0, n + r), 16 * r, &dims(&[(ny - 1, row)]))?,
            piece(y0, 0)?,
            piece(last, n + r)?,
        ],
    };
    Ok(plans.into_iter().filter(|pl| !pl.is_empty()).collect())
}

/// The wrap copies with the copies of `[-1, dy, dz]` and `[1, dy, dz]` paired like the x
/// faces ([`x_pair_plans`]): the high x ghost cells of row `y` and the low x ghost cells of row
/// `y + 1` touch, and so do the cells they are copied from (the same shift moves both), so
/// one copy of `2 radius` cells per pair of neighbouring rows moves both, and two more copy
/// the low ghost cells of the first row and the high ghost cells of the last. Half as many
/// pieces, each a whole run rather than two ends of one. A pair whose plans do not line up
/// that way (rows of one cell, or copies shifted along x) stays as it is.
fn pair_x_wraps(spec: &HaloSpec, wraps: Vec<LocalCopy>) -> Result<Vec<LocalCopy>> {
    let row = 8 * spec.padded()[0] as u64;
    let mut out = Vec::with_capacity(wraps.len() + wraps.len() / 2);
    let mut used = vec![false; wraps.len()];
    for i in 0..wraps.len() {
        if used[i] {
            continue;
        }
        let a = &wraps[i];
        let partner = (a.direction[0] == -1)
            .then(|| {
                wraps.iter().position(|b| {
                    b.direction == [1, a.direction[1], a.direction[2]]
                        && lines_up(&a.to, &b.to, row)
                        && lines_up(&a.from, &b.from, row)
                })
            })
            .flatten();
        let Some(j) = partner else {
            out.push(a.clone());
            continue;
        };
        used[j] = true;
        let b = &wraps[j];
        // (start of the pair run, start of the first row's low ghosts, start of the last
        // row's high ghosts) of one plan pair.
        let pieces = |hi: &StridedBlock, lo: &StridedBlock| -> Result<[StridedBlock; 3]> {
            let (n, block) = (hi.counts()[0], hi.block_len());
            let rest: Vec<(u64, u64)> = hi.counts()[1..]
                .iter()
                .copied()
                .zip(hi.strides()[1..].iter().copied())
                .collect();
            let mut pairs = vec![(n - 1, row)];
            pairs.extend(&rest);
            Ok([
                strided(hi.start(), 2 * block, &pairs)?,
                strided(lo.start(), block, &rest)?,
                strided(hi.start() + (n - 1) * row, block, &rest)?,
            ])
        };
        let (from, to) = (pieces(&a.from, &b.from)?, pieces(&a.to, &b.to)?);
        for (from, to) in from.into_iter().zip(to) {
            out.push(LocalCopy {
                direction: a.direction,
                from,
                to,
            });
        }
    }
    Ok(out)
}

/// Whether `hi` (high x ghost cells of some rows) and `lo` (low x ghost cells of the same
/// rows) have one shape, rows of `row` bytes as their first dimension (at least two of them),
/// and `hi` ends each row where `lo` starts the next.
fn lines_up(hi: &StridedBlock, lo: &StridedBlock, row: u64) -> bool {
    hi.block_len() == lo.block_len()
        && hi.counts() == lo.counts()
        && hi.strides() == lo.strides()
        && hi.counts().first().is_some_and(|&n| n >= 2)
        && hi.strides().first() == Some(&row)
        && hi.start() + hi.block_len() == lo.start() + row
}

/// The side of `items` (peer, direction, box), every peer another rank, at `end`. When a peer
/// is the neighbour on both sides along x, its two x faces travel interleaved
/// ([`x_pair_plans`]), at the place of the first of the two in the message.
fn layout(spec: &HaloSpec, side: End, items: &[(usize, Direction, CellBox)]) -> Result<Side> {
    // Group by peer, keeping the direction order within each peer; messages by peer number.
    let mut by_peer: Vec<(usize, Vec<(Direction, CellBox)>)> = Vec::new();
    let mut index: HashMap<usize, usize> = HashMap::new();
    for &(peer, dir, b) in items {
        let i = *index.entry(peer).or_insert_with(|| {
            by_peer.push((peer, Vec::new()));
            by_peer.len() - 1
        });
        by_peer[i].1.push((dir, b));
    }
    by_peer.sort_by_key(|(peer, _)| *peer);
    let mut messages = Vec::new();
    let mut regions = Vec::new();
    let mut spans = Vec::with_capacity(spec.chunks);
    let mut at = 0u64;
    for k in 0..spec.chunks {
        let first = regions.len();
        for (peer, parts) in &by_peer {
            let offset = at.next_multiple_of(MESSAGE_ALIGN);
            let mut end = offset;
            let mut directions = Vec::with_capacity(parts.len());
            let paired = [X_LOW, X_HIGH]
                .iter()
                .all(|x| parts.iter().any(|(d, _)| d == x));
            for (dir, b) in parts {
                let Some((q, p)) = piece(spec, b, k, spec.chunks) else {
                    continue;
                };
                let plans = if paired && (*dir == X_LOW || *dir == X_HIGH) {
                    // The first of the two x faces carries both; the second adds nothing.
                    if directions.contains(&X_LOW) || directions.contains(&X_HIGH) {
                        vec![]
                    } else {
                        x_pair_plans(spec, side, &q, &p)?
                    }
                } else {
                    vec![box_plan_of(spec, &p, q)?]
                };
                for plan in plans {
                    let bytes = plan.packed_size();
                    regions.push(Region::new(plan, end));
                    end += bytes;
                }
                directions.push(*dir);
            }
            if end > offset {
                messages.push(Message {
                    peer: *peer,
                    chunk: k,
                    offset,
                    bytes: end - offset,
                    directions,
                });
                at = end;
            }
        }
        spans.push(first..regions.len());
    }
    Ok((messages, regions, spans))
}

impl HaloPlan {
    /// The plan of `rank` on `grid`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a spec that [`HaloSpec::validate`] refuses, a grid that
    /// does not match the spec's dims, or a rank outside the grid.
    pub fn new(spec: &HaloSpec, grid: &ProcessGrid, rank: usize) -> Result<Self> {
        spec.validate()?;
        if rank >= grid.size() {
            return Err(Error::invalid(
                "halo",
                format!("rank {rank} is outside a grid of {} ranks", grid.size()),
            ));
        }
        if spec.dims.is_some_and(|d| d != grid.dims()) {
            return Err(Error::invalid(
                "halo",
                format!(
                    "the spec asks for the grid {:?} but the grid is {:?}",
                    spec.dims,
                    grid.dims()
                ),
            ));
        }
        let dirs = directions(spec.neighbours);
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        let mut locals = Vec::new();
        let mut wraps = Vec::new();
        for &d in &dirs {
            let back = d.map(|c| -c);
            let to = grid.neighbour(rank, d);
            if let Some(from) = wrap_box(spec, grid.dims(), d) {
                // No message: the cells are already on their way in another direction's.
                wraps.push(LocalCopy {
                    direction: d,
                    from: box_plan(spec, &from)?,
                    to: box_plan(spec, &ghost_box(spec, back))?,
                });
                continue;
            }
            if to == rank {
                // Then the neighbour at -d is this rank too: what it sends in direction d lands
                // in its own ghost box of -d.
                locals.push(LocalCopy {
                    direction: d,
                    from: box_plan(spec, &send_box(spec, d))?,
                    to: box_plan(spec, &ghost_box(spec, back))?,
                });
                continue;
            }
            sends.push((to, d, send_box(spec, d)));
            // What the neighbour at -d sent in direction d lands in the ghost box of -d.
            recvs.push((grid.neighbour(rank, back), d, ghost_box(spec, back)));
        }
        let wraps = pair_x_wraps(spec, wraps)?;
        let (sends, send_regions, send_spans) = layout(spec, End::Send, &sends)?;
        let (recvs, recv_regions, recv_spans) = layout(spec, End::Recv, &recvs)?;
        Ok(Self {
            rank,
            chunks: spec.chunks,
            sends,
            recvs,
            send_regions,
            recv_regions,
            send_spans,
            recv_spans,
            locals,
            wraps,
        })
    }

    /// The rank this plan is for.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Pipeline pieces ([`HaloSpec::chunks`]).
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// The messages sent, chunk by chunk and by peer within a chunk.
    pub fn sends(&self) -> &[Message] {
        &self.sends
    }

    /// The messages received, chunk by chunk and by peer within a chunk.
    pub fn recvs(&self) -> &[Message] {
        &self.recvs
    }

    /// The regions packed from the field into the send buffer.
    pub fn send_regions(&self) -> &[Region] {
        &self.send_regions
    }

    /// The regions unpacked from the receive buffer into the field's ghost cells.
    pub fn recv_regions(&self) -> &[Region] {
        &self.recv_regions
    }

    /// The send regions of chunk `k` (empty for `k >= chunks`).
    pub fn chunk_send_regions(&self, k: usize) -> &[Region] {
        self.send_spans
            .get(k)
            .map_or(&[], |r| &self.send_regions[r.clone()])
    }

    /// The receive regions of chunk `k` (empty for `k >= chunks`).
    pub fn chunk_recv_regions(&self, k: usize) -> &[Region] {
        self.recv_spans
            .get(k)
            .map_or(&[], |r| &self.recv_regions[r.clone()])
    }

    /// The copies of the directions in which this rank is its own neighbour.
    pub fn locals(&self) -> &[LocalCopy] {
        &self.locals
    }

    /// The wrap copies ([`wrap_box`]): the edges and corners along an axis of a single rank
    /// (26-neighbour exchanges only), copied from ghost cells that messages fill. They run
    /// after every message is unpacked.
    pub fn wraps(&self) -> &[LocalCopy] {
        &self.wraps
    }

    /// The wrap copies ([`wraps`](Self::wraps)) as `datatype_pack` copy regions.
    ///
    /// # Errors
    /// As [`copy_regions`](Self::copy_regions).
    pub fn wrap_regions(&self) -> Result<Vec<CopyRegion>> {
        copy_regions_of(&self.wraps)
    }

    /// The local copies as `datatype_pack` copy regions (one buffer: the field), what the GPU
    /// copier and the CPU reference ([`datatype_pack::fused::copy_in_place`]) both take.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if a copy reads and writes regions of different shapes (never
    /// for a plan made by [`HaloPlan::new`]).
    pub fn copy_regions(&self) -> Result<Vec<CopyRegion>> {
        copy_regions_of(&self.locals)
    }

    /// Bytes of the send buffer.
    pub fn send_bytes(&self) -> u64 {
        datatype_pack::fused::packed_size(&self.send_regions)
    }

    /// Bytes of the receive buffer.
    pub fn recv_bytes(&self) -> u64 {
        datatype_pack::fused::packed_size(&self.recv_regions)
    }

    /// Bytes of ghost cells this rank fills by copies in one exchange, wrap copies included.
    pub fn local_bytes(&self) -> u64 {
        self.locals
            .iter()
            .chain(&self.wraps)
            .map(|c| c.from.packed_size())
            .sum()
    }

    /// Bytes this rank sends to other ranks in one exchange (without the alignment gaps).
    pub fn remote_bytes(&self) -> u64 {
        self.sends.iter().map(|m| m.bytes).sum()
    }

    /// Bytes of interior cells this rank hands to its neighbours in one exchange, itself
    /// included: [`remote_bytes`](Self::remote_bytes) + [`local_bytes`](Self::local_bytes).
    pub fn payload_bytes(&self) -> u64 {
        self.remote_bytes() + self.local_bytes()
    }

    /// Bytes this rank hands to each neighbour rank (itself included) per exchange, summed over
    /// chunks, by peer: what one contiguous message per neighbour rank would carry.
    pub fn send_bytes_by_peer(&self) -> Vec<(usize, u64)> {
        by_peer(self.rank, &self.sends, self.local_bytes())
    }

    /// Bytes this rank receives from each neighbour rank (itself included) per exchange, by
    /// peer.
    pub fn recv_bytes_by_peer(&self) -> Vec<(usize, u64)> {
        by_peer(self.rank, &self.recvs, self.local_bytes())
    }
}

fn copy_regions_of(copies: &[LocalCopy]) -> Result<Vec<CopyRegion>> {
    copies
        .iter()
        .map(|c| CopyRegion::between(c.from.clone(), &c.to))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| pack_error("halo", e))
}

fn by_peer(rank: usize, messages: &[Message], local: u64) -> Vec<(usize, u64)> {
    let mut sum: BTreeMap<usize, u64> = BTreeMap::new();
    for m in messages {
        *sum.entry(m.peer).or_default() += m.bytes;
    }
    if local > 0 {
        *sum.entry(rank).or_default() += local;
    }
    sum.into_iter().collect()
}

impl fmt::Display for HaloPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {}:", self.rank)?;
        for (peer, bytes) in self.send_bytes_by_peer() {
            write!(f, " send {bytes} B to {peer};")?;
        }
        for (peer, bytes) in self.recv_bytes_by_peer() {
            write!(f, " recv {bytes} B from {peer};")?;
        }
        write!(
            f,
            " {} messages in {} chunks, {} local copies, {} wrap copies",
            self.sends.len(),
            self.chunks,
            self.locals.len(),
            self.wraps.len()
        )
    }
}

/// A datatype-pack error as this crate's.
pub(crate) fn pack_error(op: &'static str, e: datatype_pack::Error) -> Error {
    match e {
        datatype_pack::Error::LibraryNotFound { library, tried, .. } => Error::Unavailable {
            what: if library == "nvrtc" {
                "NVRTC"
            } else {
                "the CUDA driver"
            },
            message: format!("tried {tried:?}"),
        },
        datatype_pack::Error::Cuda { message, .. } => Error::Cuda { op, message },
        other => Error::invalid(op, other.to_string()),
    }
}

/// The value the reference field holds at global cell `g` (`[x, y, z]` on a global grid of
/// `global` cells) for `quantity`: `1 + x + X (y + Y (z + Z quantity))`, exact in f64 up to
/// 2^53 cells, distinct for every cell and quantity, and never 0 or [`GHOST_FILL`].
pub fn reference_value(global: [usize; 3], g: [usize; 3], quantity: usize) -> f64 {
    (1 + g[0] + global[0] * (g[1] + global[1] * (g[2] + global[2] * quantity))) as f64
}

/// What [`initial_field`] puts in every ghost cell.
pub const GHOST_FILL: f64 = -1.0;

/// Global cells of the whole domain: `n x dims` per axis.
pub fn global_cells(spec: &HaloSpec, grid: &ProcessGrid) -> [usize; 3] {
    std::array::from_fn(|a| spec.n[a] * grid.dims()[a])
}

/// The global cell of padded cell `cell` of `rank`, wrapped periodically.
pub fn global_cell(
    spec: &HaloSpec,
    grid: &ProcessGrid,
    rank: usize,
    cell: [usize; 3],
) -> [usize; 3] {
    let c = grid.coords(rank);
    let global = global_cells(spec, grid);
    std::array::from_fn(|a| {
        let g = (c[a] * spec.n[a] + cell[a]) as i64 - spec.radius as i64;
        g.rem_euclid(global[a] as i64) as usize
    })
}

fn field_with(
    spec: &HaloSpec,
    grid: &ProcessGrid,
    rank: usize,
    ghost: impl Fn([usize; 3]) -> bool,
) -> Result<Vec<f64>> {
    let mut f = vec![GHOST_FILL; spec.field_len()?];
    let p = spec.padded();
    let global = global_cells(spec, grid);
    let interior = CellBox {
        start: [spec.radius; 3],
        size: spec.n,
    };
    for q in 0..spec.quantities {
        for z in 0..p[2] {
            for y in 0..p[1] {
                for x in 0..p[0] {
                    let cell = [x, y, z];
                    if interior.contains(cell) || ghost(cell) {
                        let g = global_cell(spec, grid, rank, cell);
                        f[spec.index(q, cell)] = reference_value(global, g, q);
                    }
                }
            }
        }
    }
    Ok(f)
}

/// The field of `rank` before an exchange: interior cells hold [`reference_value`] of their
/// global cell, ghost cells [`GHOST_FILL`].
///
/// # Errors
/// [`Error::InvalidArgument`] for a spec [`HaloSpec::validate`] refuses.
pub fn initial_field(spec: &HaloSpec, grid: &ProcessGrid, rank: usize) -> Result<Vec<f64>> {
    spec.validate()?;
    field_with(spec, grid, rank, |_| false)
}

/// The field of `rank` after an exchange, computed from the global field alone: interior cells
/// as before; every ghost cell the exchange fills (all of them with [`Neighbours::All`], those
/// across one face only with [`Neighbours::Faces`]) holds [`reference_value`] of its
/// periodically wrapped global cell; the others still hold [`GHOST_FILL`].
///
/// # Errors
/// [`Error::InvalidArgument`] for a spec [`HaloSpec::validate`] refuses.
pub fn expected_field(spec: &HaloSpec, grid: &ProcessGrid, rank: usize) -> Result<Vec<f64>> {
    spec.validate()?;
    let r = spec.radius;
    let n = spec.n;
    field_with(spec, grid, rank, |cell| {
        let outside = (0..3)
            .filter(|&a| cell[a] < r || cell[a] >= n[a] + r)
            .count();
        match spec.neighbours {
            Neighbours::All => outside > 0,
            Neighbours::Faces => outside == 1,
        }
    })
}

/// The whole exchange of every rank on the CPU: each rank's send regions packed
/// ([`datatype_pack::fused::pack`]), every message delivered to its peer in posting order (as
/// NCCL and MPI match messages between two ranks), and the receive regions unpacked. `fields[r]`
/// is rank `r`'s field. The reference the GPU exchange is tested against, and the test of the
/// plans and the message order.
///
/// # Errors
/// [`Error::InvalidArgument`] for a bad spec or grid, fields of the wrong count or length, or
/// a message whose length differs from what its receiver expects.
pub fn exchange_on_cpu(spec: &HaloSpec, grid: &ProcessGrid, fields: &mut [Vec<f64>]) -> Result<()> {
    const OP: &str = "exchange_on_cpu";
    let len = spec.field_len()?;
    if fields.len() != grid.size() || fields.iter().any(|f| f.len() != len) {
        return Err(Error::invalid(
            OP,
            format!(
                "expected {} fields of {len} elements, got {} fields",
                grid.size(),
                fields.len()
            ),
        ));
    }
    let plans = (0..grid.size())
        .map(|r| HaloPlan::new(spec, grid, r))
        .collect::<Result<Vec<_>>>()?;
    // (from, to, chunk) -> the message's bytes.
    let mut wire: HashMap<(usize, usize, usize), Vec<u8>> = HashMap::new();
    for (rank, plan) in plans.iter().enumerate() {
        let mut packed = vec![0u8; plan.send_bytes() as usize];
        let src: &[u8] = bytemuck::cast_slice(&fields[rank]);
        datatype_pack::fused::pack(plan.send_regions(), src, &mut packed)
            .map_err(|e| pack_error(OP, e))?;
        for m in plan.sends() {
            let bytes = packed[m.offset as usize..(m.offset + m.bytes) as usize].to_vec();
            if wire.insert((rank, m.peer, m.chunk), bytes).is_some() {
                return Err(Error::invalid(
                    OP,
                    format!("rank {rank} sends twice to {} in chunk {}", m.peer, m.chunk),
                ));
            }
        }
    }
    for (rank, plan) in plans.iter().enumerate() {
        let mut packed = vec![0u8; plan.recv_bytes() as usize];
        for m in plan.recvs() {
            let bytes = wire.remove(&(m.peer, rank, m.chunk)).ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "rank {rank} expects a message from {} in chunk {}",
                        m.peer, m.chunk
                    ),
                )
            })?;
            if bytes.len() as u64 != m.bytes {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "rank {} sent {} bytes to rank {rank} in chunk {}, which expects {}",
                        m.peer,
                        bytes.len(),
                        m.chunk,
                        m.bytes
                    ),
                ));
            }
            packed[m.offset as usize..(m.offset + m.bytes) as usize].copy_from_slice(&bytes);
        }
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut fields[rank]);
        // Local copies: interior cells straight into this rank's own ghost cells.
        datatype_pack::fused::copy_in_place(&plan.copy_regions()?, dst)
            .map_err(|e| pack_error(OP, e))?;
        datatype_pack::fused::unpack(plan.recv_regions(), &packed, dst)
            .map_err(|e| pack_error(OP, e))?;
        // Wrap copies: edges and corners from the ghost cells just filled.
        datatype_pack::fused::copy_in_place(&plan.wrap_regions()?, dst)
            .map_err(|e| pack_error(OP, e))?;
    }
    if let Some((from, to, chunk)) = wire.keys().next() {
        return Err(Error::invalid(
            OP,
            format!("the message from rank {from} to rank {to} in chunk {chunk} is never received"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn box_plans_pack_the_right_cells() {
        let spec = HaloSpec::new([4, 3, 5], 1, 2, Neighbours::Faces);
        let grid = ProcessGrid::new(1, None).unwrap();
        let field = initial_field(&spec, &grid, 0).unwrap();
        let b = send_box(&spec, [0, 1, 0]);
        let plan = box_plan(&spec, &b).unwrap();
        assert_eq!(plan.packed_size(), 8 * 2 * 4 * 5);
        let mut packed = vec![0u8; plan.packed_size() as usize];
        datatype_pack::cpu::pack(&plan, bytemuck::cast_slice(&field), &mut packed).unwrap();
        let got: &[f64] = bytemuck::cast_slice(&packed);
        let mut want = Vec::new();
        for q in 0..2 {
            for z in 1..6 {
                for x in 1..5 {
                    want.push(field[spec.index(q, [x, 3, z])]);
                }
            }
        }
        assert_eq!(got, &want[..]);
    }

    #[test]
    fn plans_merge_messages_per_peer() {
        // Two ranks along x: both x neighbours are the other rank, the rest this rank.
        let spec = HaloSpec::cube(4, 1, 1, Neighbours::All).with_chunks(1);
        let grid = ProcessGrid::new(2, None).unwrap();
        let p = HaloPlan::new(&spec, &grid, 0).unwrap();
        assert_eq!(p.sends().len(), 1);
        assert_eq!(p.recvs().len(), 1);
        assert_eq!(p.sends()[0].peer, 1);
        // 8 directions with dx = 0 are local copies; of the 18 with dx != 0, the two x faces
        // go to the other rank and the 16 edges and corners are wrap copies of their ghosts.
        assert_eq!(p.locals().len(), 8);
        assert_eq!(p.sends()[0].directions, vec![X_LOW, X_HIGH]);
        assert_eq!(p.recvs()[0].directions, vec![X_LOW, X_HIGH]);
        assert!(p.locals().iter().all(|c| c.direction[0] == 0));
        // 8 pairs of edges or corners at low and high x, each a run per pair of rows and the
        // two rows without a partner; with a radius of 1, the 6 pairs one row high (dy != 0)
        // have no rows to pair and stay 12 copies. A radius of 2 pairs them all.
        assert_eq!(p.wraps().len(), 2 * 3 + 12);
        let r2 = HaloSpec::cube(4, 2, 1, Neighbours::All).with_chunks(1);
        assert_eq!(HaloPlan::new(&r2, &grid, 0).unwrap().wraps().len(), 8 * 3);
        assert!(p.wraps().iter().all(|c| c.direction[0] != 0));
        assert_eq!(
            p.wraps().iter().map(|c| c.to.packed_size()).sum::<u64>(),
            8 * directions(Neighbours::All)
                .iter()
                .filter(|d| d[0] != 0 && (d[1], d[2]) != (0, 0))
                .map(|&d| ghost_box(&spec, d).cells() as u64)
                .sum::<u64>()
        );
        for c in p.locals().iter().chain(p.wraps()) {
            assert_eq!(c.from.packed_size(), c.to.packed_size());
            assert_eq!(c.from.counts(), c.to.counts());
            assert_eq!(c.from.strides(), c.to.strides());
        }
        // Every byte a rank sends, its peers (and itself) receive.
        let total_cells: u64 = directions(Neighbours::All)
            .iter()
            .map(|&d| send_box(&spec, d).cells() as u64)
            .sum();
        assert_eq!(p.payload_bytes(), 8 * total_cells);
        assert_eq!(
            p.remote_bytes() + p.local_bytes(),
            p.recvs().iter().map(|m| m.bytes).sum::<u64>() + p.local_bytes()
        );
        assert_eq!(
            p.send_bytes_by_peer().iter().map(|&(_, b)| b).sum::<u64>(),
            8 * total_cells
        );
        assert_eq!(p.send_bytes_by_peer(), p.recv_bytes_by_peer());
        assert_eq!(p.send_bytes_by_peer()[0], (0, p.local_bytes()));
        assert!(p.to_string().contains("to 1"));
        assert!(p.to_string().contains("18 wrap copies"));
        // One rank: no message at all.
        let one = ProcessGrid::new(1, None).unwrap();
        let p = HaloPlan::new(&spec, &one, 0).unwrap();
        assert!(p.sends().is_empty() && p.recvs().is_empty());
        assert_eq!(p.locals().len(), 26);
        assert!(p.wraps().is_empty());
        assert_eq!(p.send_bytes(), 0);
    }

    #[test]
    fn chunks_cut_messages_the_same_way_on_both_sides() {
        let grid = ProcessGrid::new(8, Some([2, 2, 2])).unwrap();
        for (q, chunks) in [(8, 4), (3, 4), (1, 3), (5, 5), (2, 64), (1, 1)] {
            let spec = HaloSpec::new([4, 5, 3], 2, q, Neighbours::All).with_chunks(chunks);
            let plans: Vec<_> = (0..8)
                .map(|r| HaloPlan::new(&spec, &grid, r).unwrap())
                .collect();
            for (r, p) in plans.iter().enumerate() {
                assert_eq!(p.chunks(), chunks);
                assert!(
                    p.locals().is_empty(),
                    "2x2x2: every neighbour is another rank"
                );
                // Chunk by chunk, then by peer; aligned; regions of a chunk span its messages.
                let mut last = (0, 0);
                for m in p.sends() {
                    assert!((m.chunk, m.peer) > last || last == (0, 0));
                    last = (m.chunk, m.peer);
                    assert_eq!(m.offset % MESSAGE_ALIGN, 0);
                    assert!(m.bytes > 0);
                    // The receiver expects the same bytes in the same chunk.
                    let back = plans[m.peer]
                        .recvs()
                        .iter()
                        .find(|b| b.peer == r && b.chunk == m.chunk)
                        .expect("a matching receive");
                    assert_eq!(back.bytes, m.bytes);
                    assert_eq!(back.directions, m.directions);
                }
                let in_chunks: usize = (0..chunks).map(|k| p.chunk_send_regions(k).len()).sum();
                assert_eq!(in_chunks, p.send_regions().len());
                assert!(p.chunk_send_regions(chunks).is_empty());
                // The chunks add up to the unchunked bytes.
                let whole = HaloPlan::new(&spec.with_chunks(1), &grid, r).unwrap();
                assert_eq!(p.remote_bytes(), whole.remote_bytes());
                assert_eq!(p.send_bytes_by_peer(), whole.send_bytes_by_peer());
            }
        }
    }

    #[test]
    fn two_ranks_along_x_interleave_the_x_faces() {
        // No other face has blocks of 2r or r cells (x spans 5 cells).
        let (r, n) = (2usize, [5usize, 3, 4]);
        for (dims, chunks) in [
            ([2, 1, 1], 1),
            ([2, 1, 1], 2),
            ([2, 2, 1], 1),
            ([3, 1, 1], 1),
        ] {
            let spec = HaloSpec::new(n, r, 3, Neighbours::Faces)
                .with_dims(dims)
                .with_chunks(chunks);
            let grid = ProcessGrid::new(dims.iter().product(), spec.dims).unwrap();
            let p = HaloPlan::new(&spec, &grid, 0).unwrap();
            let runs: Vec<&Region> = p
                .recv_regions()
                .iter()
                .filter(|g| g.plan().block_len() == (16 * r) as u64)
                .collect();
            let pairs: Vec<&Region> = p
                .send_regions()
                .iter()
                .filter(|g| {
                    g.plan().block_len() == (8 * r) as u64 && g.plan().counts().first() == Some(&2)
                })
                .collect();
            if dims[0] == 2 {
                // One run of 2r ghost cells per pair of neighbouring rows, per chunk, and the
                // sender's matching region of two r-cell pieces per pair.
                assert_eq!(runs.len(), chunks, "{dims:?} {chunks}");
                assert_eq!(pairs.len(), chunks, "{dims:?} {chunks}");
                let rows = n[1] - 1;
                let layers: u64 = runs.iter().map(|g| g.plan().num_blocks()).sum();
                assert_eq!(layers, (rows * n[2] * 3) as u64);
                for (g, s) in runs.iter().zip(&pairs) {
                    assert_eq!(g.plan().packed_size(), s.plan().packed_size());
                    assert_eq!(s.plan().block_len(), (8 * r) as u64);
                }
            } else {
                assert!(runs.is_empty() && pairs.is_empty(), "{dims:?}");
            }
            // The x faces still carry all their bytes.
            let x: u64 = [X_LOW, X_HIGH]
                .iter()
                .map(|&d| 8 * 3 * send_box(&spec, d).cells() as u64)
                .sum();
            let to_x: u64 = p
                .sends()
                .iter()
                .filter(|m| m.peer == grid.neighbour(0, X_HIGH))
                .map(|m| m.bytes)
                .sum();
            if dims[0] == 2 {
                assert_eq!(to_x, x);
            }
        }
    }

    #[test]
    fn spec_validation() {
        assert!(HaloSpec::cube(4, 0, 1, Neighbours::All).validate().is_err());
        assert!(HaloSpec::cube(4, 5, 1, Neighbours::All).validate().is_err());
        assert!(HaloSpec::new([4, 2, 4], 3, 1, Neighbours::All)
            .validate()
            .is_err());
        assert!(HaloSpec::cube(4, 1, 0, Neighbours::All).validate().is_err());
        assert!(HaloSpec::new([0, 4, 4], 1, 1, Neighbours::All)
            .validate()
            .is_err());
        assert!(HaloSpec::cube(usize::MAX / 4, 1, 1, Neighbours::All)
            .validate()
            .is_err());
        assert!(HaloSpec::cube(4, 4, 1, Neighbours::All).validate().is_ok());
        assert!(HaloSpec::cube(4, 1, 1, Neighbours::All)
            .with_chunks(0)
            .validate()
            .is_err());
        assert!(HaloSpec::cube(4, 1, 1, Neighbours::All)
            .with_chunks(MAX_CHUNKS + 1)
            .validate()
            .is_err());
        let spec = HaloSpec::cube(4, 1, 1, Neighbours::All).with_dims([1, 2, 1]);
        let grid = ProcessGrid::new(2, None).unwrap();
        assert!(HaloPlan::new(&spec, &grid, 0).is_err());
        let grid = ProcessGrid::new(2, spec.dims).unwrap();
        assert!(HaloPlan::new(&spec, &grid, 0).is_ok());
        assert!(HaloPlan::new(&spec, &grid, 2).is_err());
    }

    #[test]
    fn expected_field_marks_the_right_ghosts() {
        let spec = HaloSpec::cube(3, 1, 1, Neighbours::Faces);
        let grid = ProcessGrid::new(1, None).unwrap();
        let f = expected_field(&spec, &grid, 0).unwrap();
        // A face ghost holds the wrapped value, an edge ghost is untouched.
        let global = global_cells(&spec, &grid);
        assert_eq!(
            f[spec.index(0, [0, 1, 1])],
            reference_value(global, [2, 0, 0], 0)
        );
        assert_eq!(f[spec.index(0, [0, 0, 1])], GHOST_FILL);
        let all = HaloSpec::cube(3, 1, 1, Neighbours::All);
        let f = expected_field(&all, &grid, 0).unwrap();
        assert_eq!(
            f[spec.index(0, [0, 0, 4])],
            reference_value(global, [2, 2, 0], 0)
        );
    }

    /// The CPU exchange of every rank gives the expected field on every rank, for many grids,
    /// sizes, radii, quantity counts and both modes: the plans, the message order and the
    /// self-messages of periodic grids of 1 and 2 ranks per axis are right.
    #[test]
    fn cpu_exchange_matches_the_global_reference() {
        let mut cases = 0;
        for dims in [
            [1, 1, 1],
            [2, 1, 1],
            [1, 2, 1],
            [1, 1, 2],
            [2, 2, 1],
            [3, 1, 1],
            [2, 2, 2],
            [3, 2, 1],
            [1, 3, 2],
            [3, 3, 3],
        ] {
            for n in [[3, 3, 3], [4, 3, 5], [5, 6, 4]] {
                for radius in 1..=3 {
                    if radius > *n.iter().min().unwrap() {
                        continue;
                    }
                    for (quantities, chunks) in [(1, 1), (3, 1), (3, 2), (1, 4), (3, 3)] {
                        for neighbours in [Neighbours::Faces, Neighbours::All] {
                            let spec = HaloSpec::new(n, radius, quantities, neighbours)
                                .with_dims(dims)
                                .with_chunks(chunks);
                            let size = dims.iter().product();
                            let grid = ProcessGrid::new(size, spec.dims).unwrap();
                            let mut fields: Vec<Vec<f64>> = (0..size)
                                .map(|r| initial_field(&spec, &grid, r).unwrap())
                                .collect();
                            exchange_on_cpu(&spec, &grid, &mut fields).unwrap();
                            for (r, f) in fields.iter().enumerate() {
                                let want = expected_field(&spec, &grid, r).unwrap();
                                assert!(f == &want, "rank {r} differs for {spec:?} on {dims:?}");
                            }
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert!(cases > 500, "{cases}");
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

    #[test]
    fn cpu_exchange_refuses_bad_fields() {
        let spec = HaloSpec::cube(3, 1, 1, Neighbours::Faces);
        let grid = ProcessGrid::new(2, None).unwrap();
        let mut one = vec![initial_field(&spec, &grid, 0).unwrap()];
        assert!(exchange_on_cpu(&spec, &grid, &mut one).is_err());
        let mut short = vec![vec![0.0; 3]; 2];
        assert!(exchange_on_cpu(&spec, &grid, &mut short).is_err());
    }
}
