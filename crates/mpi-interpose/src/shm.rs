//! Mailboxes in shared memory between the ranks of one node, for the direct path's protocol
//! ([`crate::direct`]): its small messages (ready, note, done, greeting) cost a write and a
//! read of host memory instead of an MPI message each (a send, a probe and a receive, each a
//! round of the MPI's progress).
//!
//! Every rank of a node makes one POSIX shared-memory segment holding one ring per rank of the
//! node: ring `w` of rank `r`'s segment carries the messages rank `w` sends to `r` (one writer,
//! one reader). A ring is a byte queue of [`CAPACITY`] bytes with two counters on their own
//! cache lines: `head` (bytes written, advanced by the writer with release ordering after the
//! message's bytes) and `tail` (bytes read, advanced by the reader). A message is its length
//! and tag (4 bytes each) and its bytes, padded to 8. A full ring refuses a message; the
//! protocol then does without it (the message goes through the real MPI's byte path).
//!
//! Each side touches the other's counter only when it must, so that the counters' cache lines
//! do not move between the two cores on every message: the writer keeps the last `tail` it
//! read and reads it again only when that one says the ring is full, and the reader stores
//! `tail` only when it has read something.
//!
//! The segments are made in `MPI_Init` by every rank (collective on `MPI_COMM_WORLD`), mapped by
//! the other ranks of the node, and unlinked once all have mapped them, so nothing stays behind
//! in `/dev/shm` after a crash past `MPI_Init`. If any rank fails, none uses them.

use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicU64, Ordering};

use mpi::ffi;

/// Bytes of a ring's queue.
pub const CAPACITY: usize = 64 * 1024;
/// Bytes before a ring's queue: `head` and `tail`, each on its own cache line.
const HEADER: usize = 128;
/// Bytes per ring.
const STRIDE: usize = HEADER + CAPACITY;
/// The largest message's bytes.
pub const MAX_MESSAGE: usize = CAPACITY / 4;

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
    /// By index of the reader: the last `tail` this rank read of the ring it writes in that
    /// rank's segment ([`fits`]).
    seen: Vec<Cell<u64>>,
}

// SAFETY: the segments are shared memory mapped for the process's life; the rings are only
// touched through atomics and the single-writer, single-reader discipline above, by one thread
// at a time (the direct path is off where threads may call MPI at once).
unsafe impl Send for Mailboxes {}

/// A ring: `head`, `tail` and the queue, at `base`.
struct Ring(*mut u8);

impl Ring {
    fn head(&self) -> &AtomicU64 {
        // SAFETY: the first 8 bytes of the ring's header, 8-aligned (segments are page-aligned,
        // rings a multiple of 128 bytes apart), shared memory mapped for the process's life.
        unsafe { &*self.0.cast::<AtomicU64>() }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: as `head`, 64 bytes on.
        unsafe { &*self.0.add(64).cast::<AtomicU64>() }
    }

    /// Copies `bytes` into the queue from position `at` (wrapping).
    fn put(&self, at: u64, bytes: &[u8]) {
        let from = (at % CAPACITY as u64) as usize;
        let first = bytes.len().min(CAPACITY - from);
        // SAFETY: both parts lie inside the queue (`from + first <= CAPACITY`, the rest from
        // its start, `bytes.len() <= CAPACITY`); the writer owns these bytes until it advances
        // `head` (the reader reads only below `head`).
        unsafe {
            let q = self.0.add(HEADER);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), q.add(from), first);
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(first), q, bytes.len() - first);
        }
    }

    /// Copies `out.len()` bytes of the queue from position `at` (wrapping).
    fn get(&self, at: u64, out: &mut [u8]) {
        let from = (at % CAPACITY as u64) as usize;
        let first = out.len().min(CAPACITY - from);
        // SAFETY: as `put`; the reader reads only bytes the writer published (below `head`,
        // loaded with acquire ordering) and not yet released (at or above `tail`).
        unsafe {
            let q = self.0.add(HEADER);
            std::ptr::copy_nonoverlapping(q.add(from), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(q, out.as_mut_ptr().add(first), out.len() - first);
        }
    }
}

/// Bytes a message of `len` bytes takes in a ring.
fn footprint(len: usize) -> usize {
    8 + len.div_ceil(8) * 8
}

/// Whether a message of `len` bytes fits in `ring` now, for its writer, whose last read of the
/// ring's `tail` is `seen`: read again (and kept) only where the last one says it does not.
/// A `tail` read earlier is never ahead of the reader, so the bytes below it are free.
fn fits(ring: &Ring, seen: &Cell<u64>, len: usize) -> bool {
    if len > MAX_MESSAGE {
        return false;
    }
    let need = footprint(len) as u64;
    let head = ring.head().load(Ordering::Relaxed);
    if head - seen.get() + need <= CAPACITY as u64 {
        return true;
    }
    seen.set(ring.tail().load(Ordering::Acquire));
    head - seen.get() + need <= CAPACITY as u64
}

/// Writes a message into `ring` where it fits ([`fits`], `seen` its writer's last read of
/// `tail`); returns whether it did.
fn write(ring: &Ring, seen: &Cell<u64>, tag: u32, bytes: &[u8]) -> bool {
    if !fits(ring, seen, bytes.len()) {
        return false;
    }
    let need = footprint(bytes.len()) as u64;
    let head = ring.head().load(Ordering::Relaxed);
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
    header[4..].copy_from_slice(&tag.to_le_bytes());
    ring.put(head, &header);
    ring.put(head + 8, bytes);
    ring.head().store(head + need, Ordering::Release);
    true
}

/// Reads every message in `ring`, oldest first, into `f(tag, bytes)`, each message's bytes
/// copied out of the ring into `scratch` (kept by the caller, so that reading allocates
/// nothing once it has held the largest message).
fn read(ring: &Ring, scratch: &mut Vec<u8>, mut f: impl FnMut(u32, &[u8])) {
    let start = ring.tail().load(Ordering::Relaxed);
    let mut tail = start;
    let head = ring.head().load(Ordering::Acquire);
    while tail < head {
        let mut header = [0u8; 8];
        ring.get(tail, &mut header);
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let tag = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        scratch.resize(len.min(MAX_MESSAGE), 0);
        ring.get(tail + 8, scratch);
        tail += footprint(len) as u64;
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
            seen: vec![Cell::new(0); ranks.len()],
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

    /// Whether a message of `len` bytes to world rank `to` would fit now (only this rank
    /// writes that ring, so it still fits until this rank writes it).
    pub fn room(&self, to: c_int, len: usize) -> bool {
        let Some(&r) = self.index.get(&to) else {
            return false;
        };
        fits(&self.ring(r, self.me), &self.seen[r], len)
    }

    /// Sends `bytes` with `tag` to world rank `to` of this node; whether it fit.
    pub fn send(&self, to: c_int, tag: u32, bytes: &[u8]) -> bool {
        match self.index.get(&to) {
            Some(&r) if r != self.me => write(&self.ring(r, self.me), &self.seen[r], tag, bytes),
            _ => false,
        }
    }

    /// Reads every message sent to this rank, each ring's in order, into
    /// `f(world rank of the sender, tag, bytes)`, the bytes in `scratch` (see [`read`]).
    pub fn receive(&self, scratch: &mut Vec<u8>, mut f: impl FnMut(c_int, u32, &[u8])) {
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
        let seen = Cell::new(0);
        let mut sent = Vec::new();
        let mut got = Vec::new();
        let mut scratch = Vec::new();
        for i in 0..10_000u32 {
            let msg: Vec<u8> = (0..(i % 61) as u8).map(|b| b ^ i as u8).collect();
            assert!(write(&r, &seen, i, &msg));
            sent.push((i, msg));
            if i % 7 == 0 {
                read(&r, &mut scratch, |t, b| got.push((t, b.to_vec())));
            }
        }
        read(&r, &mut scratch, |t, b| got.push((t, b.to_vec())));
        assert_eq!(got, sent);
    }

    #[test]
    fn a_full_ring_refuses_and_then_takes_again() {
        let (_keep, r) = ring();
        let seen = Cell::new(0);
        let msg = vec![7u8; 1000];
        let mut n = 0;
        while write(&r, &seen, 1, &msg) {
            n += 1;
        }
        assert_eq!(n, CAPACITY / footprint(1000));
        assert!(!write(&r, &seen, 1, &vec![0u8; MAX_MESSAGE + 1]));
        let mut got = 0;
        read(&r, &mut Vec::new(), |t, b| {
            assert_eq!((t, b.len()), (1, 1000));
            got += 1;
        });
        assert_eq!(got, n);
        assert!(write(&r, &seen, 2, &msg));
    }
}
