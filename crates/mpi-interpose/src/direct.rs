//! The direct path: a send's bytes copied by one kernel straight from the sender's device
//! buffer into the receiver's, over CUDA IPC, instead of packed, sent through the real MPI and
//! unpacked (two kernels and the MPI's transfer). On one node this is what brings a halo face
//! near the time of its bytes sent contiguously.
//!
//! # Pairing a send with its receive, without changing MPI's matching
//!
//! MPI matches the messages from one rank with one tag on one communicator to the receives
//! posted for that rank and tag in order. So on `MPI_COMM_WORLD` every rank counts, per peer
//! and tag, the messages it sends (every send function) and the receives it posts (every
//! receive function, and matched probes): message `n` from a rank with a tag goes to the
//! `n`-th receive posted for that rank and tag. A wildcard receive (`MPI_ANY_SOURCE`,
//! `MPI_ANY_TAG`) or a cancel makes the order unknowable: from then on this rank announces no
//! receive and copies no send (its messages take the byte path; nothing is lost but speed).
//!
//! The protocol runs on a duplicate of `MPI_COMM_WORLD` made in `MPI_Init` (so every rank
//! must load the interposer with the same `COLLECTIVES_INTERPOSE_DIRECT`):
//!
//! 1. A receive the interposer takes posts its real receive (into staging, as on the byte
//!    path), then sends the source a *ready* message: its tag and number, its layout, and the
//!    CUDA IPC handle of its buffer's allocation.
//! 2. A send the interposer takes looks for the ready message of its number (waiting a little
//!    where the last one for that peer and tag came). With it, and the same layout shape, it
//!    copies the bytes into the receiver's buffer with one kernel, waits for it, sends a
//!    *note* "copied, `n` bytes", then a message of 0 bytes on the program's communicator and
//!    tag, which completes the receive where MPI matches it. Without, it takes the byte path.
//! 3. A receive that completes with 0 bytes after announcing reads its note: "copied" (the
//!    bytes are in its buffer: nothing to unpack, the status says `n` bytes) or "empty" (a
//!    message of 0 bytes from the program: every such send on `MPI_COMM_WORLD` sends this note
//!    first). A receive that got bytes took the byte path as before.
//!
//! Notes are sent before the message they describe, so a receive that needs one finds it.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use datatype_pack::fused::CopyRegion;
use datatype_pack::StridedBlock;
use mpi::ffi::{self, MPI_Comm, MPI_Datatype};

use crate::config::{self, Direct};
use crate::engine::{Engine, Staging};
use crate::handle::key;
use crate::ipc::Export;
use crate::log::log;
use crate::model::Method;
use crate::path::{blank_status, bytes_type, Receive, Taken, ERR_INTERN};
use crate::profile::{self, Phase};
use crate::sync::lock;

/// The shadow communicator's tag of ready messages.
const READY_TAG: c_int = 1;
/// The shadow communicator's tag of notes.
const NOTE_TAG: c_int = 2;
/// Plans of more dimensions are not announced.
const MAX_DIMS: usize = 8;
/// How long a send waits for the ready message of its receive, where the last one came.
const READY_WAIT: Duration = Duration::from_micros(100);
/// How long a receive waits for its note before it reads its message as empty (a note is
/// sent before the message it describes, so this is only a guard against a peer that does
/// not follow the protocol).
const NOTE_WAIT: Duration = Duration::from_secs(10);
/// Stale ready messages and notes are dropped every this many counted operations.
const HOUSEKEEPING: u64 = 64;

/// A peer, a tag and a message's number.
type Key = (c_int, c_int, u64);

/// Where a receive wants its bytes, as its ready message says.
#[derive(Debug)]
enum Landing {
    /// Testing: carried in the note (a host buffer).
    Carry,
    /// Copied straight into its buffer (this export) in its layout.
    Buffer(Export),
}

/// A receive's ready message, as the sender reads it.
#[derive(Debug)]
struct Ready {
    packed: u64,
    plan: StridedBlock,
    landing: Landing,
}

/// What became of a message, as its receiver reads it.
#[derive(Debug, PartialEq)]
pub enum Note {
    /// Its bytes were copied into the receive's buffer: this many.
    Copied(u64),
    /// The program sent 0 bytes.
    Empty,
    /// Testing (`COLLECTIVES_INTERPOSE_DIRECT=carry`): its packed bytes.
    Carried(Vec<u8>),
}

/// A receive that announced itself: its source, tag and number.
#[derive(Debug, Clone, Copy)]
pub struct Announced(Key);

/// A message of the protocol on its way: the real MPI's request and the bytes it sends from.
#[derive(Debug)]
struct Outgoing(ffi::MPI_Request, Vec<u8>);

// SAFETY: as `Shadow`: a request handle, and bytes owned here until the request completes.
unsafe impl Send for Outgoing {}

/// The protocol's communicator (a duplicate of `MPI_COMM_WORLD`).
#[derive(Debug, Clone, Copy)]
struct Shadow(MPI_Comm);

// SAFETY: a communicator handle is a value MPI lets any thread pass (one at a time here:
// the direct path is off where threads may call MPI at once).
unsafe impl Send for Shadow {}

#[derive(Debug, Default)]
struct State {
    shadow: Option<Shadow>,
    rank: c_int,
    /// Messages sent per (destination, tag).
    sent: HashMap<(c_int, c_int), u64>,
    /// Receives posted per (source, tag).
    posted: HashMap<(c_int, c_int), u64>,
    /// Whether the order of matching is still known (no wildcard receive, no cancel).
    settled: bool,
    ready: HashMap<Key, Ready>,
    notes: HashMap<Key, Note>,
    awaited: HashSet<Key>,
    /// Per (destination, tag): whether the last send found its ready message.
    expect: HashMap<(c_int, c_int), bool>,
    /// Per (source, tag): receives to post without announcing, and the next such run.
    backoff: HashMap<(c_int, c_int), (u32, u32)>,
    /// Persistent requests on `MPI_COMM_WORLD`: send or receive, peer, tag, empty.
    persistent: HashMap<u64, (bool, c_int, c_int, bool)>,
    /// The protocol's messages sent and not yet known to be complete.
    outgoing: Vec<Outgoing>,
    ops: u64,
}

static STATE: OnceLock<Mutex<State>> = OnceLock::new();

/// The protocol's state: `None` until `MPI_Init` set the direct path up, and where it did not.
fn state() -> Option<&'static Mutex<State>> {
    STATE.get()
}

fn world() -> u64 {
    // SAFETY: reading an immutable handle constant of the rsmpi shim.
    key(unsafe { ffi::RSMPI_COMM_WORLD })
}

fn any_source() -> c_int {
    // SAFETY: reading an immutable constant of the rsmpi shim.
    unsafe { ffi::RSMPI_ANY_SOURCE }
}

fn any_tag() -> c_int {
    // SAFETY: reading an immutable constant of the rsmpi shim.
    unsafe { ffi::RSMPI_ANY_TAG }
}

/// Sets the direct path up after the real `MPI_Init`/`MPI_Init_thread` (`provided` is the
/// thread level): a duplicate of `MPI_COMM_WORLD` for the protocol, unless the interposer or
/// the direct path is off, or threads may call MPI at once (the order of sends would be
/// unknown).
///
/// # Safety
/// MPI was just initialized, and every rank calls this (the duplicate is collective).
pub unsafe fn init(provided: c_int) {
    let cfg = config::get();
    // SAFETY: reading an immutable constant of the rsmpi shim.
    let multiple = provided == unsafe { ffi::RSMPI_THREAD_MULTIPLE };
    if cfg.disabled || cfg.direct == Direct::Off || multiple {
        return;
    }
    // SAFETY: reading an immutable constant of the rsmpi shim.
    let mut shadow: MPI_Comm = unsafe { ffi::RSMPI_COMM_NULL };
    let mut rank: c_int = 0;
    // SAFETY: MPI is initialized; valid out-pointers; the world communicator's constant.
    unsafe {
        if ffi::PMPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut shadow) != 0 {
            return;
        }
        ffi::PMPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank);
    }
    let _ = STATE.set(Mutex::new(State {
        shadow: Some(Shadow(shadow)),
        rank,
        settled: true,
        ..State::default()
    }));
}

/// Whether a count of a datatype is 0 bytes (an unknown size counts as bytes).
///
/// # Safety
/// MPI initialized; `dt` a datatype handle the caller passed to MPI.
unsafe fn is_empty(count: c_int, dt: MPI_Datatype) -> bool {
    if count <= 0 {
        return true;
    }
    let mut size: c_int = -1;
    // SAFETY: the caller's contract; a valid out-pointer.
    let rc = unsafe { ffi::PMPI_Type_size(dt, &mut size) };
    rc == 0 && size == 0
}

/// Counts a send of `count` elements of `dt` to `dest` with `tag` on `comm`, and returns its
/// number where it is on `MPI_COMM_WORLD` with the direct path up. A send of 0 bytes to
/// another rank sends its note first ([`Note::Empty`]).
///
/// # Safety
/// MPI initialized; the arguments are the caller's send.
pub unsafe fn sent(
    comm: MPI_Comm,
    dest: c_int,
    tag: c_int,
    count: c_int,
    dt: MPI_Datatype,
) -> Option<u64> {
    let s = state()?;
    if key(comm) != world() || dest < 0 {
        return None;
    }
    let mut st = lock(s);
    let n = st.sent.entry((dest, tag)).or_insert(0);
    let seq = *n;
    *n += 1;
    // SAFETY: the caller's contract.
    if dest != st.rank && unsafe { is_empty(count, dt) } {
        // SAFETY: MPI initialized; the shadow communicator is live.
        unsafe { send_note(&mut st, dest, tag, seq, &Note::Empty) };
    }
    // SAFETY: as above.
    unsafe { housekeeping(&mut st) };
    Some(seq)
}

/// Counts a receive posted from `source` with `tag` on `comm`, and returns its number where
/// it is on `MPI_COMM_WORLD` with the direct path up; a wildcard settles nothing from then on.
pub fn posted(comm: MPI_Comm, source: c_int, tag: c_int) -> Option<u64> {
    let s = state()?;
    if key(comm) != world() {
        return None;
    }
    let mut st = lock(s);
    if source == any_source() || tag == any_tag() {
        if st.settled {
            log!("a wildcard receive on MPI_COMM_WORLD: the direct path stops");
        }
        st.settled = false;
        return None;
    }
    if source < 0 {
        return None;
    }
    let n = st.posted.entry((source, tag)).or_insert(0);
    let seq = *n;
    *n += 1;
    st.ops += 1;
    Some(seq)
}

/// A cancel: the order of matching is no longer known here.
pub fn unsettle() {
    if let Some(s) = state() {
        let mut st = lock(s);
        if st.settled {
            log!("MPI_Cancel: the direct path stops");
        }
        st.settled = false;
    }
}

/// Remembers a persistent request on `MPI_COMM_WORLD` (`send`: a send, else a receive), whose
/// starts [`started`] counts.
///
/// # Safety
/// MPI initialized; the arguments are the caller's.
pub unsafe fn keep_persistent(
    request: u64,
    send: bool,
    comm: MPI_Comm,
    peer: c_int,
    tag: c_int,
    count: c_int,
    dt: MPI_Datatype,
) {
    let Some(s) = state() else { return };
    if key(comm) != world() {
        return;
    }
    // SAFETY: the caller's contract.
    let empty = send && unsafe { is_empty(count, dt) };
    lock(s).persistent.insert(request, (send, peer, tag, empty));
}

/// Forgets a persistent request (`MPI_Request_free`).
pub fn forget_persistent(request: u64) {
    if let Some(s) = state() {
        lock(s).persistent.remove(&request);
    }
}

/// Counts the starts of the persistent requests among `handles`, as their sends and receives.
///
/// # Safety
/// MPI initialized.
pub unsafe fn started(handles: &[u64]) {
    let Some(s) = state() else { return };
    let starts: Vec<(bool, c_int, c_int, bool)> = {
        let st = lock(s);
        if st.persistent.is_empty() {
            return;
        }
        handles
            .iter()
            .filter_map(|h| st.persistent.get(h).copied())
            .collect()
    };
    // SAFETY: reading immutable constants of the rsmpi shim.
    let (world, byte) = unsafe { (ffi::RSMPI_COMM_WORLD, ffi::RSMPI_UINT8_T) };
    for (send, peer, tag, empty) in starts {
        if send {
            // SAFETY: MPI initialized; an empty start is a count of 0.
            unsafe { sent(world, peer, tag, if empty { 0 } else { 1 }, byte) };
        } else {
            posted(world, peer, tag);
        }
    }
}

/// Drops ready messages of sends already made and notes no receive waits for, every
/// [`HOUSEKEEPING`] operations.
///
/// # Safety
/// MPI initialized.
unsafe fn housekeeping(st: &mut State) {
    st.ops += 1;
    if st.ops % HOUSEKEEPING != 0 {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe {
        drain(st, READY_TAG);
        drain(st, NOTE_TAG);
    }
    let sent = st.sent.clone();
    st.ready
        .retain(|&(p, t, n), _| n >= sent.get(&(p, t)).copied().unwrap_or(0));
    let (posted, awaited) = (st.posted.clone(), st.awaited.clone());
    st.notes
        .retain(|k, _| awaited.contains(k) || k.2 >= posted.get(&(k.0, k.1)).copied().unwrap_or(0));
}

/// Words as the bytes of a message.
fn to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The words of a message's first `n * 8` bytes.
fn words_of(bytes: &[u8], n: usize) -> Option<Vec<u64>> {
    let b = bytes.get(..n.checked_mul(8)?)?;
    Some(
        b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
    )
}

/// A ready message: tag, number, packed bytes, the plan, where the bytes go; the handles last.
fn encode_ready(tag: c_int, seq: u64, plan: &StridedBlock, landing: &Landing) -> Vec<u8> {
    let mut w = vec![
        tag as u32 as u64,
        seq,
        plan.packed_size(),
        plan.start(),
        plan.block_len(),
        plan.ndims() as u64,
    ];
    w.extend_from_slice(plan.counts());
    w.extend_from_slice(plan.strides());
    w.extend(plan.reversed().iter().map(|&r| u64::from(r)));
    let handles: Vec<&Export> = match landing {
        Landing::Carry => {
            w.push(0);
            vec![]
        }
        Landing::Buffer(e) => {
            w.extend([1, e.offset, e.len]);
            vec![e]
        }
    };
    let mut b = to_bytes(&w);
    for e in handles {
        b.extend_from_slice(&e.handle);
    }
    b
}

fn decode_ready(b: &[u8]) -> Option<(c_int, u64, Ready)> {
    let head = words_of(b, 6)?;
    let nd = usize::try_from(head[5]).ok().filter(|&n| n <= MAX_DIMS)?;
    let at = 6 + 3 * nd;
    let w = words_of(b, at + 1)?;
    let counts = w[6..6 + nd].to_vec();
    let strides = w[6 + nd..6 + 2 * nd].to_vec();
    let reversed = w[6 + 2 * nd..at].iter().map(|&r| r != 0).collect();
    let plan = StridedBlock::with_reversed(head[3], head[4], counts, strides, reversed).ok()?;
    let handle = |words: usize, i: usize| -> Option<[u8; 64]> {
        let from = words * 8 + i * 64;
        b.get(from..from + 64)?.try_into().ok()
    };
    let landing = match w[at] {
        0 => Landing::Carry,
        1 => {
            let e = words_of(b, at + 3)?;
            Landing::Buffer(Export {
                handle: handle(at + 3, 0)?,
                offset: e[at + 1],
                len: e[at + 2],
            })
        }
        _ => return None,
    };
    Some((
        head[0] as u32 as c_int,
        head[1],
        Ready {
            packed: head[2],
            plan,
            landing,
        },
    ))
}

fn encode_note(tag: c_int, seq: u64, note: &Note) -> Vec<u8> {
    let (kind, n, payload): (u64, u64, &[u8]) = match note {
        Note::Copied(n) => (0, *n, &[]),
        Note::Empty => (1, 0, &[]),
        Note::Carried(v) => (2, v.len() as u64, v),
    };
    let mut b = to_bytes(&[tag as u32 as u64, seq, kind, n]);
    b.extend_from_slice(payload);
    b
}

fn decode_note(b: &[u8]) -> Option<(c_int, u64, Note)> {
    let w = words_of(b, 4)?;
    let note = match w[2] {
        0 => Note::Copied(w[3]),
        1 => Note::Empty,
        2 => Note::Carried(b.get(32..32 + usize::try_from(w[3]).ok()?)?.to_vec()),
        _ => return None,
    };
    Some((w[0] as u32 as c_int, w[1], note))
}

/// Sends `bytes` to `dest` on the shadow communicator with `tag`, without waiting: the send
/// is kept until a later call finds it complete (a message too large to go eagerly waits for
/// its receiver, which may be waiting for the program's message that follows this one).
///
/// # Safety
/// MPI initialized.
unsafe fn post(st: &mut State, dest: c_int, tag: c_int, bytes: Vec<u8>) {
    let Some(Shadow(comm)) = st.shadow else {
        return;
    };
    st.outgoing.retain_mut(|o| {
        let mut done: c_int = 0;
        // SAFETY: a request of this module's, not yet freed; a valid out-pointer.
        unsafe { ffi::PMPI_Test(&mut o.0, &mut done, ffi::RSMPI_STATUS_IGNORE) };
        done == 0
    });
    let n = c_int::try_from(bytes.len()).unwrap_or(c_int::MAX);
    // SAFETY: reading an immutable constant of the rsmpi shim.
    let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `bytes` holds `n` bytes and is kept with the request until it completes; the
    // shadow communicator is live from `init` on.
    let rc = unsafe {
        ffi::PMPI_Isend(
            bytes.as_ptr().cast(),
            n,
            bytes_type(),
            dest,
            tag,
            comm,
            &mut req,
        )
    };
    if rc == 0 {
        st.outgoing.push(Outgoing(req, bytes));
    }
}

/// At `MPI_Finalize`: the protocol's sends still pending are let go (`MPI_Request_free`; their
/// bytes are kept for good, since the real MPI may still read them).
///
/// # Safety
/// MPI initialized, not yet finalized.
pub unsafe fn finalize() {
    let Some(s) = state() else { return };
    for mut o in std::mem::take(&mut lock(s).outgoing) {
        // SAFETY: a request of this module's, not yet freed.
        unsafe { ffi::PMPI_Request_free(&mut o.0) };
        std::mem::forget(o.1);
    }
}

/// # Safety
/// MPI initialized.
unsafe fn send_note(st: &mut State, dest: c_int, tag: c_int, seq: u64, note: &Note) {
    // SAFETY: the caller's contract.
    unsafe { post(st, dest, NOTE_TAG, encode_note(tag, seq, note)) };
}

/// Receives every message with `tag` (ready messages or notes) that has arrived on the shadow
/// communicator into the state's tables.
///
/// # Safety
/// MPI initialized.
unsafe fn drain(st: &mut State, tag: c_int) {
    let Some(Shadow(comm)) = st.shadow else {
        return;
    };
    loop {
        let mut flag: c_int = 0;
        let mut status = blank_status();
        // SAFETY: valid out-pointers; the shadow communicator is live.
        unsafe { ffi::PMPI_Iprobe(any_source(), tag, comm, &mut flag, &mut status) };
        if flag == 0 {
            return;
        }
        let mut n: c_int = 0;
        // SAFETY: the status the probe just wrote.
        unsafe { ffi::PMPI_Get_count(&status, bytes_type(), &mut n) };
        let mut buf = vec![0u8; usize::try_from(n).unwrap_or(0)];
        let from = status.MPI_SOURCE;
        // SAFETY: `buf` holds `n` bytes; the probed message is the first from `from` with
        // `tag` (one thread calls MPI at a time), so this receives exactly it.
        unsafe {
            ffi::PMPI_Recv(
                buf.as_mut_ptr().cast::<c_void>(),
                n,
                bytes_type(),
                from,
                tag,
                comm,
                ffi::RSMPI_STATUS_IGNORE,
            )
        };
        if tag == READY_TAG {
            match decode_ready(&buf) {
                Some((t, seq, r)) => {
                    st.ready.insert((from, t, seq), r);
                }
                None => log!("direct path: an unreadable ready message from rank {from}"),
            }
        } else {
            match decode_note(&buf) {
                Some((t, seq, note)) => {
                    st.notes.insert((from, t, seq), note);
                }
                None => log!("direct path: an unreadable note from rank {from}"),
            }
        }
    }
}

/// Announces receive `r` (number `seq` from `source` with `tag`, its real receive already
/// posted) to its source, where the direct path can serve it: the order is settled, the
/// source is another rank, the receive's buffer is device memory whose allocation exports
/// (or, with `COLLECTIVES_INTERPOSE_DIRECT=carry`, host memory), and announcing has not been
/// wasted on this source and tag lately.
///
/// # Safety
/// MPI initialized; `r` is a posted receive, kept until it completes.
pub unsafe fn announce(r: &mut Receive, source: c_int, tag: c_int, seq: Option<u64>) {
    let (Some(s), Some(seq)) = (state(), seq) else {
        return;
    };
    if r.plan().ndims() > MAX_DIMS {
        return;
    }
    {
        let mut st = lock(s);
        if !st.settled || source == st.rank {
            return;
        }
        if let Some((skip, _)) = st.backoff.get_mut(&(source, tag)) {
            if *skip > 0 {
                *skip -= 1;
                return;
            }
        }
    }
    let landing = match r.engine() {
        Engine::Gpu(..) => {
            // The peer writes the buffer from its own GPU, unordered with this process's
            // streams: what the program queued before the receive (a copy into the buffer that
            // `cudaMemcpy` returned from before its DMA ended, say) must be done first, as the
            // byte path's unpack, queued on the legacy default stream, would come after it.
            if let Err(e) = r.engine().wait() {
                log!("{}: not announced: {e}", r.op());
                return;
            }
            match profile::time(Phase::Memory, || r.engine().export()) {
                Some(e) => Landing::Buffer(e),
                None => return,
            }
        }
        Engine::Cpu if config::get().direct == Direct::Carry => Landing::Carry,
        Engine::Cpu => return,
    };
    profile::time(Phase::Announce, || {
        let msg = encode_ready(tag, seq, r.plan(), &landing);
        let mut st = lock(s);
        // SAFETY: the caller's contract.
        unsafe { post(&mut st, source, READY_TAG, msg) };
        st.awaited.insert((source, tag, seq));
    });
    r.direct = Some(Announced((source, tag, seq)));
}

/// The note of announced receive `a`, which completed with 0 bytes: waits for it (it was sent
/// before the message). After [`NOTE_WAIT`] without one, the message counts as empty.
///
/// # Safety
/// MPI initialized.
unsafe fn claim(a: &Announced) -> Note {
    let Some(s) = state() else {
        return Note::Empty;
    };
    let start = Instant::now();
    loop {
        {
            let mut st = lock(s);
            if let Some(n) = st.notes.remove(&a.0) {
                st.awaited.remove(&a.0);
                st.backoff.remove(&(a.0 .0, a.0 .1));
                return n;
            }
            // SAFETY: the caller's contract.
            unsafe { drain(&mut st, NOTE_TAG) };
            if let Some(n) = st.notes.remove(&a.0) {
                st.awaited.remove(&a.0);
                st.backoff.remove(&(a.0 .0, a.0 .1));
                return n;
            }
        }
        if start.elapsed() > NOTE_WAIT {
            log!(
                "direct path: no note from rank {} for message {} with tag {}: read as empty",
                a.0 .0,
                a.0 .2,
                a.0 .1
            );
            if let Some(s) = state() {
                lock(s).awaited.remove(&a.0);
            }
            return Note::Empty;
        }
        std::hint::spin_loop();
    }
}

/// Settles a completed receive that announced itself, by what came: bytes through the real
/// MPI (its announcement wasted), or a message of 0 bytes, whose note says whether the bytes
/// were copied into the buffer, carried (testing: copied into the staging here) or whether
/// the message was empty. Returns `None` where the ordinary unpack follows (with the status
/// saying how many bytes the staging holds), else how the completion settled here.
///
/// # Safety
/// MPI initialized; `status` is the receive's completed status, writable.
pub unsafe fn finish(r: &mut Receive, status: *mut ffi::MPI_Status) -> Option<Result<u64, c_int>> {
    let a = r.direct.take()?;
    let op = r.op();
    let (mut cancelled, mut got): (c_int, c_int) = (0, 0);
    // SAFETY: the caller's contract; counted in bytes.
    unsafe {
        ffi::PMPI_Test_cancelled(status, &mut cancelled);
        ffi::PMPI_Get_count(status, bytes_type(), &mut got);
    }
    if cancelled != 0 {
        return None;
    }
    if got > 0 {
        wasted(&a);
        return None;
    }
    // SAFETY: the caller's contract.
    match profile::time(Phase::Note, || unsafe { claim(&a) }) {
        Note::Copied(n) => {
            // SAFETY: the status is writable (the caller's contract).
            unsafe { set_bytes(status, n) };
            log!("{op}: {n} bytes copied in directly by the sender");
            // Nothing was unpacked here.
            Some(Ok(0))
        }
        Note::Empty => None,
        Note::Carried(v) => match &mut r.staging {
            Staging::Cpu(s) if v.len() <= s.len() => {
                s[..v.len()].copy_from_slice(&v);
                // SAFETY: as above.
                unsafe { set_bytes(status, v.len() as u64) };
                None
            }
            _ => {
                log!("{op}: carried bytes that do not fit the staging");
                Some(Err(ERR_INTERN))
            }
        },
    }
}

/// Announced receive `a` got its bytes through the real MPI: its announcement was wasted;
/// the next ones from that source and tag are skipped, twice as many each time (up to 64).
fn wasted(a: &Announced) {
    if let Some(s) = state() {
        let mut st = lock(s);
        st.awaited.remove(&a.0);
        let e = st.backoff.entry((a.0 .0, a.0 .1)).or_insert((0, 1));
        e.0 = e.1;
        e.1 = (e.1 * 2).min(64);
    }
}

/// Where a send the interposer took (number `seq` to `dest` with `tag`, its buffer `buf`) can
/// go directly: waits up to [`READY_WAIT`] for its receive's ready message where the last
/// send to that peer and tag found one, then copies the bytes into the receiver's buffer (or
/// carries them, testing) and sends the note. Returns whether it did; the caller then sends
/// the message of 0 bytes, else takes the byte path.
///
/// # Safety
/// MPI initialized; `buf` is the caller's send buffer, `taken` the interposer's plan of it.
pub unsafe fn send(
    op: &str,
    seq: Option<u64>,
    dest: c_int,
    tag: c_int,
    buf: *const c_void,
    taken: &Taken,
) -> bool {
    let (Some(s), Some(seq)) = (state(), seq) else {
        return false;
    };
    let (_, plan, engine, _) = taken;
    let carry = matches!(engine, Engine::Cpu);
    if carry && config::get().direct != Direct::Carry {
        return false;
    }
    let k = (dest, tag, seq);
    let ready = profile::time(Phase::Ready, || {
        let mut st = lock(s);
        if !st.settled || dest == st.rank {
            return None;
        }
        let wait = *st.expect.get(&(dest, tag)).unwrap_or(&true);
        let start = Instant::now();
        loop {
            if let Some(r) = st.ready.remove(&k) {
                break Some(r);
            }
            // SAFETY: the caller's contract.
            unsafe { drain(&mut st, READY_TAG) };
            if let Some(r) = st.ready.remove(&k) {
                break Some(r);
            }
            if !wait || start.elapsed() > READY_WAIT {
                break None;
            }
            std::hint::spin_loop();
        }
    });
    let found = ready.is_some();
    lock(s).expect.insert((dest, tag), found);
    let Some(ready) = ready else {
        return false;
    };
    let note = if carry {
        if !matches!(ready.landing, Landing::Carry) || ready.packed < plan.packed_size() {
            return false;
        }
        // SAFETY: the caller's contract; the CPU engine packs into a new vector.
        match unsafe { engine.pack(plan, buf, Method::OneShot) } {
            Ok(mut staging) => match &mut staging {
                Staging::Cpu(v) => Note::Carried(std::mem::take(v)),
                _ => return false,
            },
            Err(_) => return false,
        }
    } else {
        if ready.packed != plan.packed_size() {
            return false;
        }
        match &ready.landing {
            Landing::Carry => return false,
            Landing::Buffer(export) => {
                let Ok(region) = CopyRegion::between(plan.clone(), &ready.plan) else {
                    log!("{op}: the receive's layout differs in shape: byte path");
                    return false;
                };
                // SAFETY: the caller's contract for the source; the destination is the
                // receive's buffer in its allocation (`export.len` bytes from the buffer to
                // the allocation's end), which MPI leaves to the receive until it completes,
                // and it cannot complete before the message this copy precedes.
                match unsafe { engine.copy_to_peer(&region, buf, dest, export) } {
                    Ok(()) => Note::Copied(plan.packed_size()),
                    Err(e) => {
                        log!("{op}: the direct copy failed, byte path: {e}");
                        return false;
                    }
                }
            }
        }
    };
    let how = if carry { "carried" } else { "copied" };
    log!(
        "{op}: message {seq} to rank {dest} with tag {tag}: {how} {} bytes directly",
        plan.packed_size()
    );
    profile::time(Phase::Note, || {
        // SAFETY: the caller's contract.
        unsafe { send_note(&mut lock(s), dest, tag, seq, &note) }
    });
    true
}

/// Sets `status` to say `bytes` bytes arrived (a receive served by the direct path).
///
/// # Safety
/// `status` is a writable status.
pub unsafe fn set_bytes(status: *mut ffi::MPI_Status, bytes: u64) {
    if let Ok(n) = c_int::try_from(bytes) {
        // SAFETY: the caller's contract.
        unsafe { ffi::PMPI_Status_set_elements(status, bytes_type(), n) };
    }
}

/// The message of 0 bytes a send served by the direct path leaves on the program's
/// communicator: a count of 0 at an address MPI never reads.
pub fn marker() -> *const c_void {
    static BYTE: u8 = 0;
    std::ptr::addr_of!(BYTE).cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_messages_round_trip() {
        let plan = StridedBlock::with_reversed(8, 16, vec![4, 3], vec![64, 512], vec![false, true])
            .unwrap();
        let e = |k: u8, offset, len| Export {
            handle: std::array::from_fn(|i| i as u8 ^ k),
            offset,
            len,
        };
        let same =
            |a: &Export, b: &Export| (a.handle, a.offset, a.len) == (b.handle, b.offset, b.len);
        let (t, n, r) = decode_ready(&encode_ready(
            7,
            42,
            &plan,
            &Landing::Buffer(e(1, 24, 4096)),
        ))
        .unwrap();
        assert_eq!(
            (t, n, r.packed, &r.plan),
            (7, 42, plan.packed_size(), &plan)
        );
        assert!(matches!(&r.landing, Landing::Buffer(x) if same(x, &e(1, 24, 4096))));
        let (t, n, r) =
            decode_ready(&encode_ready(0x7fff_ffff, 0, &plan, &Landing::Carry)).unwrap();
        assert_eq!((t, n), (0x7fff_ffff, 0));
        assert!(matches!(r.landing, Landing::Carry));
        assert!(decode_ready(&[1, 2, 3]).is_none());
        let cut = encode_ready(7, 43, &plan, &Landing::Buffer(e(2, 0, 1 << 20)));
        assert!(decode_ready(&cut[..cut.len() - 1]).is_none());
    }

    #[test]
    fn notes_round_trip() {
        for note in [
            Note::Copied(1 << 20),
            Note::Empty,
            Note::Carried(vec![1, 2, 3]),
        ] {
            let b = encode_note(5, 9, &note);
            assert_eq!(decode_note(&b), Some((5, 9, note)));
        }
        assert!(decode_note(&encode_note(5, 9, &Note::Carried(vec![1, 2]))[..33]).is_none());
    }
}
