//! One rank's plan of an exchange ([`HaloPlan`]): the regions it packs and unpacks, its
//! [`Message`]s per pipeline chunk and per peer, its [`LocalCopy`]s and wrap copies.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;

use datatype_pack::fused::{CopyRegion, Region};
use datatype_pack::{StridedBlock, Type};

use collectives_core::{Error, Result};

use crate::boxes::{box_plan, box_plan_of, ghost_box, send_box, wrap_box, CellBox};
use crate::error::pack_error;
use crate::grid::ProcessGrid;
use crate::spec::{directions, Direction, HaloSpec};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Neighbours, MAX_CHUNKS};

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
}
