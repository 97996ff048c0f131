//! Mailboxes in shared memory between the ranks of one node, for the direct path's protocol
//! ([`crate::direct`]): its small messages (ready, note, done, greeting) cost a write and a
//! read of host memory instead of an MPI message each (a send, a probe and a receive, each a
//! round of the MPI's progress).
//!
//! Every rank of a node makes one POSIX shared-memory segment holding one ring per rank of the
//! node: ring `w` of rank `r`'s segment carries the messages rank `w` sends to `r` (one writer,
//! one reader). A ring is [`CELLS`] cells of one cache line each; a message takes one cell, or
//! more where its bytes pass [`CELL_BYTES`], and every cell begins with a header word: the
//! cell's position in the ring's stream as a marker (which tells a cell written in this lap
//! from one of the last), and in a message's first cell its length and tag. The writer fills a
//! message's later cells first and stores its first cell's header last, with release ordering;
//! the reader looks at the header of the cell at its position and reads what it finds there.
//! So a message of up to [`CELL_BYTES`] bytes (a ready message, a note) moves one cache line
//! from the writer's core to the reader's, where a counter beside the queue would move a second.
//! The reader's position (`tail`, cells read) has a line of its own, which the writer keeps its
//! last read of and reads again only when that one says the ring is full; the reader stores it
//! only when it has read something. The writer's position is its own. A full ring refuses a
//! message; the protocol then does without it (the message goes through the real MPI's byte
//! path).
//!
//! The segments are made in `MPI_Init` by every rank (collective on `MPI_COMM_WORLD`), mapped by
//! the other ranks of the node, and unlinked once all have mapped them, so nothing stays behind
//! in `/dev/shm` after a crash past `MPI_Init`. If any rank fails, none uses them.

use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicU64, Ordering};

use mpi::ffi;

/// Bytes of a cell: one cache line.
const CELL: usize = 64;
/// A message's bytes per cell (after the cell's header word).
pub const CELL_BYTES: usize = CELL - 8;
/// Cells per ring.
pub const CELLS: usize = 1024;
/// Bytes before a ring's cells: the reader's position, on a cache line of its own.
const HEADER: usize = 64;
/// Bytes per ring.
const STRIDE: usize = HEADER + CELLS * CELL;
/// The largest message's bytes.
pub const MAX_MESSAGE: usize = CELLS * CELL_BYTES / 4;

/// One mapped segment.
#[derive(Debug)]
struct Segment(*mut u8);

/// The mailboxes of this rank: its segment and those of the other ranks of its node.
#[derive(Debug)]
pub struct Mailboxes {
    /// World rank → index among the ranks of this node.
    index: FxHashMap<c_int, usize>,
    /// The world ranks of this node, by index.
    ranks: Vec<c_int>,
    /// This rank's index.
    me: usize,
    /// Every rank's segment, by index.
    segments: Vec<Segment>,
    /// By index of the reader: this rank's position (cells written) in the ring it writes in
    /// that rank's segment, and the last `tail` it read of that ring ([`fits`]).
    ends: Vec<Ends>,
}

/// A writer's view of one ring: its own position and its last read of the reader's.
#[derive(Debug, Default)]
struct Ends {
    head: Cell<u64>,
    seen: Cell<u64>,
}

// SAFETY: the segments are shared memory mapped for the process's life; the rings are only
// touched through atomics and the single-writer, single-reader discipline above, by one thread
// at a time (the direct path is off where threads may call MPI at once).
unsafe impl Send for Mailboxes {}

/// A ring: the reader's position, then the cells, at `base`.
struct Ring(*mut u8);

impl Ring {
    fn tail(&self) -> &AtomicU64 {
        // SAFETY: the first 8 bytes of the ring's header, 8-aligned (segments are page-aligned,
        // rings a multiple of 64 bytes apart), shared memory mapped for the process's life.
        unsafe { &*self.0.cast::<AtomicU64>() }
    }

    /// The cell at stream position `at` (its index modulo [`CELLS`]).
    fn cell(&self, at: u64) -> *mut u8 {
        // SAFETY: the index is below `CELLS`: the cell lies inside the ring's `STRIDE` bytes.
        unsafe { self.0.add(HEADER + (at % CELLS as u64) as usize * CELL) }
    }

    /// The header word of the cell at `at`.
    fn header(&self, at: u64) -> &AtomicU64 {
        // SAFETY: a cell's first 8 bytes, 64-aligned, shared memory mapped for the process's
        // life.
        unsafe { &*self.cell(at).cast::<AtomicU64>() }
    }
}

/// Cells a message of `len` bytes takes.
fn cells(len: usize) -> u64 {
    len.div_ceil(CELL_BYTES).max(1) as u64
}

/// The marker of the cell at stream position `at`, from 1 to 2^31: never 0, the header of a
/// cell never written, and a cell of an earlier lap (`at - CELLS`, ...) reads another.
fn marker(at: u64) -> u64 {
    (at & 0x7fff_ffff) + 1
}

/// Whether messages of `lens` bytes fit in `ring` now, for its writer (`ends`: its position
/// and its last read of the ring's `tail`, read again and kept only where that one says they
/// do not). A `tail` read earlier is never ahead of the reader, so the cells below it are
/// free.
fn fits(ring: &Ring, ends: &Ends, lens: impl IntoIterator<Item = usize>) -> bool {
    let Some(need) = lens.into_iter().try_fold(0, |need, len| {
        (len <= MAX_MESSAGE).then(|| need + cells(len))
    }) else {
        return false;
    };
    let head = ends.head.get();
    if head - ends.seen.get() + need <= CELLS as u64 {
        return true;
    }
    ends.seen.set(ring.tail().load(Ordering::Acquire));
    head - ends.seen.get() + need <= CELLS as u64
}

/// Writes a message into `ring` where it fits ([`fits`]); returns whether it did. Its later
/// cells first, then its first cell's bytes, then that cell's header (release): the reader
/// finds the whole message once it sees the header.
fn write(ring: &Ring, ends: &Ends, tag: u16, bytes: &[u8]) -> bool {
    if !fits(ring, ends, [bytes.len()]) {
        return false;
    }
    let head = ends.head.get();
    let need = cells(bytes.len());
    let mut chunks = bytes.chunks(CELL_BYTES);
    let first = chunks.next().unwrap_or(&[]);
    for (i, chunk) in (1..).zip(chunks) {
        let at = head + i;
        // SAFETY: a cell of this ring the reader has released (`fits`): only the writer touches
        // it until its header says otherwise; `chunk` fits its `CELL_BYTES`.
        unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), ring.cell(at).add(8), chunk.len()) };
        ring.header(at).store(marker(at), Ordering::Relaxed);
    }
    // SAFETY: as above, for the first cell.
    unsafe { std::ptr::copy_nonoverlapping(first.as_ptr(), ring.cell(head).add(8), first.len()) };
    let word = marker(head) | (bytes.len() as u64) << 32 | u64::from(tag) << 48;
    ring.header(head).store(word, Ordering::Release);
    ends.head.set(head + need);
    true
}

/// Reads every message in `ring`, oldest first, into `f(tag, bytes)`, each message's bytes
/// copied out of the ring into `scratch` (kept by the caller, so that reading allocates
/// nothing once it has held the largest message).
fn read(ring: &Ring, scratch: &mut Vec<u8>, mut f: impl FnMut(u16, &[u8])) {
    let start = ring.tail().load(Ordering::Relaxed);
    let mut tail = start;
    loop {
        let word = ring.header(tail).load(Ordering::Acquire);
        if word & 0xffff_ffff != marker(tail) {
            break;
        }
        let len = ((word >> 32) & 0xffff) as usize;
        let tag = (word >> 48) as u16;
        scratch.resize(len.min(MAX_MESSAGE), 0);
        for (i, chunk) in (0..).zip(scratch.chunks_mut(CELL_BYTES)) {
            // SAFETY: a cell of this message, published by the header loaded above (release
            // by the writer after every cell of the message), not reused by the writer until
            // `tail` passes it; `chunk` fits its `CELL_BYTES`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ring.cell(tail + i).add(8),
                    chunk.as_mut_ptr(),
                    chunk.len(),
                );
            }
        }
        tail += cells(len);
        f(tag, scratch);
    }
    // Only what was read is released to the writer: an empty ring's `tail` is not stored,
    // so that polling it leaves that cache line where it is.
    if tail != start {
        ring.tail().store(tail, Ordering::Release);
    }
}

impl Mailboxes {
    /// Makes this rank's segment and maps those of the other ranks of its node; collective
    /// over `MPI_COMM_WORLD`. `None` (on every rank) where any rank could not.
    ///
    /// # Safety
    /// MPI is initialized; every rank calls this, from `MPI_Init`.
    pub unsafe fn open() -> Option<Mailboxes> {
        // SAFETY: the caller's contract.
        let (node, world_rank) = unsafe { node_comm() }?;
        let (mut n, mut me): (c_int, c_int) = (0, 0);
        // SAFETY: a communicator made above; valid out-pointers.
        unsafe {
            ffi::PMPI_Comm_size(node, &mut n);
            ffi::PMPI_Comm_rank(node, &mut me);
        }
        let n = usize::try_from(n).ok()?;
        let me = usize::try_from(me).ok()?;
        let mut ranks: Vec<c_int> = vec![0; n];
        // A name shared by the job: rank 0's clock and process id.
        let mut nonce: u64 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32);
        // SAFETY: valid buffers of the stated counts; the communicators are live.
        unsafe {
            ffi::PMPI_Allgather(
                (&world_rank as *const c_int).cast(),
                1,
                ffi::RSMPI_INT32_T,
                ranks.as_mut_ptr().cast(),
                1,
                ffi::RSMPI_INT32_T,
                node,
            );
            ffi::PMPI_Bcast(
                (&mut nonce as *mut u64).cast(),
                1,
                ffi::RSMPI_UINT64_T,
                0,
                ffi::RSMPI_COMM_WORLD,
            );
        }
        let name = |rank: c_int| CString::new(format!("/collectives-interpose-{nonce:x}-{rank}"));
        let len = n * STRIDE;
        // SAFETY: a name of this job's, made here; the segment is sized and mapped below.
        let own = name(world_rank)
            .ok()
            .and_then(|c| unsafe { create(&c, len) });
        // SAFETY: the node communicator is live.
        unsafe { ffi::PMPI_Barrier(node) };
        let mut segments = Vec::with_capacity(n);
        let mut ok = own.is_some();
        for (i, &r) in ranks.iter().enumerate() {
            if !ok {
                break;
            }
            let seg = if i == me {
                own.as_ref().map(|s| Segment(s.0))
            } else {
                // SAFETY: a segment rank `r` made before the barrier above, of `len` bytes.
                name(r).ok().and_then(|c| unsafe { map(&c, len) })
            };
            match seg {
                Some(s) => segments.push(s),
                None => ok = false,
            }
        }
        // Every rank must have mapped every segment before any is unlinked.
        let (mine, mut all): (c_int, c_int) = (c_int::from(ok), 0);
        // SAFETY: valid buffers of one int; the communicators are live.
        unsafe {
            ffi::PMPI_Allreduce(
                (&mine as *const c_int).cast(),
                (&mut all as *mut c_int).cast(),
                1,
                ffi::RSMPI_INT32_T,
                ffi::RSMPI_MIN,
                ffi::RSMPI_COMM_WORLD,
            );
        }
        if let Ok(c) = name(world_rank) {
            // SAFETY: the name of the segment made here; the mappings stay.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        }
        let mut node = node;
        // SAFETY: the communicator made in `node_comm`, no longer needed.
        unsafe { ffi::PMPI_Comm_free(&mut node) };
        if all == 0 {
            return None;
        }
        let index = ranks.iter().enumerate().map(|(i, &r)| (r, i)).collect();
        Some(Mailboxes {
            index,
            ends: (0..ranks.len()).map(|_| Ends::default()).collect(),
            ranks,
            me,
            segments,
        })
    }

    /// Whether world rank `rank` is another rank of this node.
    pub fn reaches(&self, rank: c_int) -> bool {
        self.index.get(&rank).is_some_and(|&i| i != self.me)
    }

    /// The ring `writer` writes into `reader`'s segment.
    fn ring(&self, reader: usize, writer: usize) -> Ring {
        // SAFETY: `writer < n`: ring `writer` lies inside the segment's `n * STRIDE` bytes.
        Ring(unsafe { self.segments[reader].0.add(writer * STRIDE) })
    }

    /// Whether messages of `lens` bytes to world rank `to` would fit now, one after another
    /// (only this rank writes that ring, so they still fit until this rank writes it).
    pub fn room(&self, to: c_int, lens: impl IntoIterator<Item = usize>) -> bool {
        let Some(&r) = self.index.get(&to) else {
            return false;
        };
        fits(&self.ring(r, self.me), &self.ends[r], lens)
    }

    /// Sends `bytes` with `tag` to world rank `to` of this node; whether it fit.
    pub fn send(&self, to: c_int, tag: u16, bytes: &[u8]) -> bool {
        match self.index.get(&to) {
            Some(&r) if r != self.me => write(&self.ring(r, self.me), &self.ends[r], tag, bytes),
            _ => false,
        }
    }

    /// Reads every message sent to this rank, each ring's in order, into
    /// `f(world rank of the sender, tag, bytes)`, the bytes in `scratch` (see [`read`]).
    pub fn receive(&self, scratch: &mut Vec<u8>, mut f: impl FnMut(c_int, u16, &[u8])) {
        for (w, &from) in self.ranks.iter().enumerate() {
            if w != self.me {
                read(&self.ring(self.me, w), scratch, |tag, b| f(from, tag, b));
            }
        }
    }
}

/// The communicator of this rank's node and this rank's world rank.
///
/// # Safety
/// MPI is initialized; every rank calls this.
unsafe fn node_comm() -> Option<(ffi::MPI_Comm, c_int)> {
    let mut world_rank: c_int = 0;
    // SAFETY: reading an immutable constant of the rsmpi shim.
    let mut node = unsafe { ffi::RSMPI_COMM_NULL };
    // SAFETY: MPI initialized; valid out-pointers; the shim's constants.
    let rc = unsafe {
        ffi::PMPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut world_rank);
        ffi::PMPI_Comm_split_type(
            ffi::RSMPI_COMM_WORLD,
            ffi::RSMPI_COMM_TYPE_SHARED,
            0,
            ffi::RSMPI_INFO_NULL,
            &mut node,
        )
    };
    (rc == 0).then_some((node, world_rank))
}

/// Makes and maps a segment of `len` zeroed bytes named `name`.
///
/// # Safety
/// `name` is not in use.
unsafe fn create(name: &CString, len: usize) -> Option<Segment> {
    // SAFETY: a valid C string; the flags make a new segment or fail.
    let fd = unsafe {
        libc::shm_open(
            name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
            0o600,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: the descriptor just opened; a new segment reads as zeros once sized.
    let sized = unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0;
    let seg = if sized {
        // SAFETY: the descriptor just opened and sized to `len` bytes.
        unsafe { map_fd(fd, len) }
    } else {
        None
    };
    // SAFETY: the descriptor opened above; the mapping outlives it.
    unsafe { libc::close(fd) };
    if seg.is_none() {
        // SAFETY: the name of the segment made above.
        unsafe { libc::shm_unlink(name.as_ptr()) };
    }
    seg
}

/// Maps the existing segment `name` of `len` bytes.
///
/// # Safety
/// The segment holds at least `len` bytes.
unsafe fn map(name: &CString, len: usize) -> Option<Segment> {
    // SAFETY: a valid C string.
    let fd = unsafe { libc::shm_open(name.as_ptr(), libc::O_RDWR, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the caller's contract.
    let seg = unsafe { map_fd(fd, len) };
    // SAFETY: the descriptor opened above; the mapping outlives it.
    unsafe { libc::close(fd) };
    seg
}

/// Maps `len` bytes of the descriptor `fd`, shared, for the process's life.
///
/// # Safety
/// `fd` is a shared-memory descriptor of at least `len` bytes.
unsafe fn map_fd(fd: c_int, len: usize) -> Option<Segment> {
    // SAFETY: a fresh mapping of the caller's descriptor; never unmapped.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    (p != libc::MAP_FAILED && !p.is_null()).then(|| Segment(p.cast::<u8>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring in process memory, aligned as a segment's.
    fn ring() -> (Vec<u64>, Ring) {
        let mut v = vec![0u64; STRIDE / 8];
        let r = Ring(v.as_mut_ptr().cast());
        (v, r)
    }

    #[test]
    fn messages_come_out_in_order_across_the_wrap() {
        let (_keep, r) = ring();
        let ends = Ends::default();
        let mut sent = Vec::new();
        let mut got = Vec::new();
        let mut scratch = Vec::new();
        // Lengths from 0 to 180: one to four cells, so that messages straddle the wrap.
        for i in 0..20_000u32 {
            let msg: Vec<u8> = (0..(i % 181) as u8).map(|b| b ^ i as u8).collect();
            assert!(write(&r, &ends, i as u16, &msg));
            sent.push((i as u16, msg));
            if i % 7 == 0 {
                read(&r, &mut scratch, |t, b| got.push((t, b.to_vec())));
            }
        }
        read(&r, &mut scratch, |t, b| got.push((t, b.to_vec())));
        assert_eq!(got, sent);
        // Read out: the cells of the last laps are not read again.
        read(&r, &mut scratch, |_, _| panic!("a message read twice"));
    }

    #[test]
    fn a_fresh_ring_reads_nothing_and_a_message_fits_one_cell() {
        // A marker is never a fresh cell's 0 and never its position's in the lap before.
        for at in [
            0,
            1,
            CELLS as u64 - 1,
            u64::from(u32::MAX),
            1 << 31,
            (1 << 31) - 1,
        ] {
            assert_ne!(marker(at), 0);
            assert_ne!(marker(at), marker(at + CELLS as u64));
        }
        let (_keep, r) = ring();
        read(&r, &mut Vec::new(), |_, _| {
            panic!("a message in a fresh ring")
        });
        let ends = Ends::default();
        assert!(write(&r, &ends, 3, &[9u8; CELL_BYTES]));
        assert_eq!(ends.head.get(), 1);
        assert!(write(&r, &ends, 4, &[]));
        assert!(write(&r, &ends, 5, &[1u8; CELL_BYTES + 1]));
        assert_eq!(ends.head.get(), 4);
        let mut got = Vec::new();
        read(&r, &mut Vec::new(), |t, b| got.push((t, b.len())));
        assert_eq!(got, [(3, CELL_BYTES), (4, 0), (5, CELL_BYTES + 1)]);
    }

    #[test]
    fn a_full_ring_refuses_and_then_takes_again() {
        let (_keep, r) = ring();
        let ends = Ends::default();
        let msg = vec![7u8; 1000];
        let mut n = 0;
        while write(&r, &ends, 1, &msg) {
            n += 1;
        }
        assert_eq!(n, CELLS as u64 / cells(1000));
        assert!(!write(&r, &ends, 1, &vec![0u8; MAX_MESSAGE + 1]));
        assert!(!fits(&r, &ends, [CELL_BYTES; CELLS]));
        let mut got = 0;
        read(&r, &mut Vec::new(), |t, b| {
            assert_eq!((t, b.len()), (1, 1000));
            got += 1;
        });
        assert_eq!(got, n);
        assert!(fits(&r, &ends, [CELL_BYTES; CELLS]));
        assert!(write(&r, &ends, 2, &msg));
    }
}
