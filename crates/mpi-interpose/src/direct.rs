//! The direct path: between ranks of one node, a message's packed bytes are not sent through
//! the real MPI. The sender packs into its own device staging as on the byte path, records an
//! event after the pack and lends the staging; the receiver's stream waits for that event and
//! unpacks straight from the sender's staging, mapped over CUDA IPC. Neither side waits for
//! the other's kernel on the host, the sender's pack and the receiver's unpack are ordered on
//! the GPUs, and the receiver's unpack, on its own stream, comes after the work its program
//! queued there before the receive (as the byte path's does). Per message: one kernel each
//! side, two small messages through shared memory ([`crate::shm`]) and a third that rides with
//! the receiver's next message to the sender (its *done*), a message of 0 bytes
//! through the MPI (none between a blocking send and a blocking receive) and no transfer of the
//! bytes by the MPI.
//!
//! # Pairing a send with its receive, without changing MPI's matching
//!
//! MPI matches the messages from one rank with one tag on one communicator to the receives
//! posted for that rank and tag in order. So on `MPI_COMM_WORLD` every rank counts, per peer
//! and tag, the messages it sends (every send function) and the receives it posts (every
//! receive function, and matched probes): message `n` from a rank with a tag goes to the
//! `n`-th receive posted for that rank and tag. A wildcard receive (`MPI_ANY_SOURCE`,
//! `MPI_ANY_TAG`) or a cancel makes the order unknowable: from then on this rank announces no
//! receive and lends no send (its messages take the byte path; nothing is lost but speed).
//!
//! The protocol's messages go through mailboxes in shared memory made in `MPI_Init` by every
//! rank (so every rank must load the interposer with the same `COLLECTIVES_INTERPOSE_DIRECT`);
//! a message that does not fit its mailbox is not sent, and the message it would have served
//! takes the byte path:
//!
//! 0. A sender greets each peer once with the export of a staging allocation and an event's
//!    handle; a receiver announces receives only to peers whose greeting opened here (same
//!    node, memory it can map).
//! 1. A receive the interposer takes posts its real receive (into staging, as on the byte
//!    path), then sends the source a *ready* message: its tag, number and packed size. A
//!    blocking receive (`MPI_Recv`, `MPI_Sendrecv`) posts none: its ready message says so
//!    (*quiet*), and it waits for its note or for a message through the MPI ([`arrival`]),
//!    receiving the latter for real.
//! 2. A send the interposer takes queues its pack into the direct path's own staging
//!    ([`Engine::lend_staging_for`]: never the real MPI's, each allocation a whole 2 MiB
//!    granule, since a peer cannot map memory its CUDA-aware MPI or another handle already
//!    mapped), then looks for the ready message of its number (waiting a little where the
//!    receiver announced one of the last few with that tag). With it and the same size, it
//!    records the event (one for all the loans of a persistent start), sends a *note* "lent:
//!    this staging, this event", then a message of 0 bytes on the program's communicator and
//!    tag, which completes the receive where MPI matches it (a blocking send to a quiet
//!    receive sends none, and its note says so: [`Sent::Quietly`]); it keeps the staging until the
//!    receiver says it is *done*, and waits for its pack before the call returns, or before
//!    its request completes (the program may then write its buffer). Without, the byte path
//!    packs again into the real MPI's staging and sends the bytes.
//! 3. A receive that completes with 0 bytes after announcing reads its note: "lent" (its
//!    unpack, from the peer's staging after the peer's event, joins the completion's others;
//!    the status says the packed size; after the wait a *done* message is owed, and sent with
//!    the next message to the sender, or on its own once a few are owed) or "empty" (a
//!    message of 0 bytes from the program: every such send on `MPI_COMM_WORLD` to a rank of
//!    the node sends this note first). A receive that got bytes took the byte path as before.
//!    A wait for several requests claims the notes already come before the real MPI completes
//!    them ([`claim_early`]) and queues those unpacks then (`MPI_Waitall` tests its requests
//!    while notes are missing, claiming each as it comes): the note precedes its message of 0
//!    bytes, which the receive is bound to match.
//!
//! 4. *The write landing* ([`crate::target`]). A blocking receive (`MPI_Recv`, `MPI_Sendrecv`)
//!    whose blocks are at least [`target::MIN_BLOCK`] bytes also offers its buffer in its
//!    ready message: the export of its allocation, the driver's id of that allocation, and its
//!    plan, where its GPU's stream is idle (the program's earlier work on it has run, as the
//!    other landings' unpack would have waited for). A send whose plan has the same shape
//!    maps that allocation and writes its layout straight into the receive's layout with one
//!    kernel on its own GPU, waits for it, and sends a note "written" (then nothing else, or
//!    the message of 0 bytes where the receive posted a real one); the receive completes on
//!    that note with nothing left to do. No staging, no event, one kernel instead of two. A
//!    send expecting a target (the last ready message of its destination and tag offered
//!    one, or its own blocks are that long) waits for its ready message before it packs; any
//!    failure lends as before, over what the write left. Requests never offer their buffers:
//!    a cancelled one would be the program's again while a sender may still write.
//!
//! Notes are sent before the message they describe, so a receive that needs one finds it.

use rustc_hash::{FxHashMap, FxHashSet};
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mpi::ffi::{self, MPI_Comm, MPI_Datatype};

use crate::config::{self, Direct};
use crate::engine::{Engine, Lent, Loan, Recorded, Staging};
use crate::handle::key;
use crate::ipc::{Export, Handle};
use crate::log::log;
use crate::message::{bytes_type, Announced, Early, Key, Receive, Taken, ERR_INTERN};
use crate::model::Method;
use crate::profile::{self, Phase};
use crate::shm::Mailboxes;
use crate::sync::lock;
use crate::target::{self, Target};

mod channels;

use channels::{disarm, keep_offer, offer_channel, RecvChan, SendChan};
pub use channels::{may_open, open_channel, settle_channel, Slot};

/// The mailboxes' tag of ready messages.
const READY_TAG: u16 = 1;
/// The mailboxes' tag of notes.
const NOTE_TAG: u16 = 2;
/// The mailboxes' tag of done messages (a receiver is done with a lent staging).
const DONE_TAG: u16 = 3;
/// The mailboxes' tag of greetings.
const HELLO_TAG: u16 = 4;
/// The mailboxes' tag of names: a number that stands for a CUDA IPC handle in this rank's
/// later notes to the peer ([`name`]).
const NAME_TAG: u16 = 5;
/// How long a send waits for the ready message of its receive, where the last one came.
const READY_WAIT: Duration = Duration::from_micros(100);
/// How long a receive waits for its note before it reads its message as empty (a note is
/// sent before the message it describes, so this is only a guard against a peer that does
/// not follow the protocol).
const NOTE_WAIT: Duration = Duration::from_secs(10);
/// How often a blocking receive waiting for its note also probes the real MPI ([`arrival`]):
/// between probes it reads only its mailbox, which a note reaches in well under a
/// microsecond, where a probe makes the real MPI progress every transfer it holds (on a
/// CUDA-aware MPI, queries of the GPUs' events among them) and so sees a note late by as long
/// as it takes. A message through the MPI, this wait's rare case, is seen this much later.
const PROBE_EVERY: Duration = Duration::from_micros(2);
/// Bytes of a note of a lent staging: four words, the staging's offset and length, and the
/// numbers its sender named the staging's and the event's handles by ([`name`]): one
/// mailbox cell ([`crate::shm::CELL_BYTES`]).
const LENT_NOTE: usize = 7 * 8;
/// Bytes of a name: its number and the handle.
const NAME: usize = 8 + 64;
/// Handles one rank names to a peer, at most: a peer names no more than its staging
/// allocations (2 MiB each, kept) and its events, far fewer.
const NAMES_MAX: usize = 1 << 20;
/// Bytes of a note of a write ([`Note::Written`]): four words.
const WRITTEN_NOTE: usize = 4 * 8;
/// Receives from a source and tag announced without an offer of their buffer after the sender
/// lent where one was offered; then one offers again.
const DECLINED_SKIP: u32 = 64;
/// Done messages are read once this many stagings are lent.
const LENT_ROUND: usize = 8;
/// Done messages owed to one peer that are sent without waiting for another message to it.
const OWED_MAX: usize = 4;
/// Stale ready messages and notes are dropped every this many counted operations.
const HOUSEKEEPING: u64 = 64;
/// Ready messages of the last this many sends counted per destination and tag outlive the
/// housekeeping: those sends may not have looked for them yet.
const READIES_KEPT: u64 = 64;

/// How a receive takes a message sent directly, as its ready message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Landing {
    /// Testing: the packed bytes carried in the note (a host buffer).
    Carry,
    /// Unpacked from the sender's lent staging (a device buffer).
    Pull,
    /// Not announced: the receive takes its message through the real MPI, as a receive of
    /// that source and tag lately did (see [`wasted`]); its sender need not wait for a ready
    /// message.
    Bytes,
}

/// A receive's ready message, as the sender reads it.
#[derive(Debug)]
struct Ready {
    packed: u64,
    landing: Landing,
    /// The receive posted no real receive ([`announce`] of a blocking receive): a send lent
    /// to it may send nothing through the MPI ([`Sent::Quietly`]).
    quiet: bool,
    /// The receive's buffer, offered to the sender's kernel (the write landing,
    /// [`crate::target`]): only a blocking receive offers it, which no cancel can end.
    target: Option<Target>,
    /// The receive channel's words, offered to the sender ([`crate::channel`]): never with a
    /// target.
    channel: Option<Offer>,
}

/// A receive channel's offer in a ready message: the receiver's words, by the number it named
/// their allocation by ([`name`]) and the cell's offset in it, and, where the receive's
/// unpack is armed, the message whose slot it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Offer {
    name: u32,
    offset: u32,
    armed_from: Option<u64>,
}

/// What became of a message, as its receiver reads it.
#[derive(Debug, PartialEq)]
pub enum Note {
    /// Its packed bytes are in the sender's staging, lent.
    Lent(Lent),
    /// Its bytes are in the receive's buffer already: the sender's kernel wrote them there,
    /// and the sender waited for it (the write landing).
    Written,
    /// The program sent 0 bytes.
    Empty,
    /// Its packed bytes came through the channel into the slot the receive's armed unpack
    /// reads ([`crate::channel`]).
    Channel,
    /// Testing (`COLLECTIVES_INTERPOSE_DIRECT=carry`): its packed bytes.
    Carried(Vec<u8>),
}

/// How a completed receive settles on the direct path ([`finish`]).
#[derive(Debug)]
pub enum Finish {
    /// As on the byte path: the ordinary unpack of what arrived.
    Bytes,
    /// Settled here with this result (bytes unpacked, or MPI's code).
    Settled(Result<u64, c_int>),
    /// Its unpack is from the staging `Lent` by the peer; [`done`] follows the wait.
    Pull(c_int, Key, Lent),
    /// As `Pull`, its unpack already queued before the real receive completed
    /// ([`claim_early`]); [`done`] follows the wait.
    Pulled(c_int, Key),
    /// Through the channel: the armed unpack is on the stream; [`settle_channel`], then
    /// [`done`], follow the wait.
    Channel(c_int, Key),
}

/// A send made on the direct path ([`send`]).
#[derive(Debug)]
pub enum Sent {
    /// Lent or carried: the caller sends the message of 0 bytes ([`marker`]), then waits for
    /// the engine (the pack) before the call returns, or, for a non-blocking send, when its
    /// request completes.
    Directly,
    /// Lent or carried to a receive that posted no real receive (a blocking one, its ready
    /// message says): nothing goes through the MPI; the caller waits for the engine before
    /// the call returns.
    Quietly,
    /// Written into the receive's buffer (the write landing), the kernel already waited for:
    /// the caller sends the message of 0 bytes unless `.0` (quietly, as [`Sent::Quietly`]),
    /// and has nothing to wait for.
    Written(bool),
    /// Not taken here: the byte path.
    No,
}

/// Whether a peer's greeting opened here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Its staging and event open: receives from it are announced.
    Yes,
    /// They do not: never announced.
    No,
}

#[derive(Debug, Default)]
struct State {
    mail: Option<Mailboxes>,
    /// Messages sent per (destination, tag).
    sent: FxHashMap<(c_int, c_int), u64>,
    /// Receives posted per (source, tag).
    posted: FxHashMap<(c_int, c_int), u64>,
    /// Whether the order of matching is still known (no wildcard receive, no cancel).
    settled: bool,
    ready: FxHashMap<Key, Ready>,
    notes: FxHashMap<Key, Note>,
    /// Messages whose note came with nothing sent through the MPI ([`Sent::Quietly`]).
    quiet: FxHashSet<Key>,
    awaited: FxHashSet<Key>,
    /// Per (destination, tag): the highest number of a ready message come, or `None` once a
    /// send waited for one in vain before any came.
    readies: FxHashMap<(c_int, c_int), Option<u64>>,
    /// Peers that have announced receives to this rank.
    announcing: FxHashSet<c_int>,
    /// Per (source, tag): receives to post without announcing, and the next such run.
    backoff: FxHashMap<(c_int, c_int), (u32, u32)>,
    /// Persistent requests on `MPI_COMM_WORLD`: send or receive, peer, tag, empty.
    persistent: FxHashMap<u64, (bool, c_int, c_int, bool)>,
    /// Done messages owed: to whom, and the message they end. Sent together with the next
    /// message to that peer (its next ready message, as a rule), or on their own once
    /// [`OWED_MAX`] are owed to it or at the housekeeping: never waited for by anyone, they
    /// only give the peer's staging back to its pool, and one write to a mailbox the peer
    /// reads anyway costs less than one at the end of each receive.
    owed: Vec<(c_int, Key)>,
    /// Staging lent per message sent directly, until its receiver is done.
    lent: FxHashMap<Key, Loan>,
    /// Peers greeted by this rank.
    greeted: FxHashSet<c_int>,
    /// Greetings received, not yet tried.
    greetings: FxHashMap<c_int, Lent>,
    /// The numbers this rank named CUDA IPC handles by, per peer ([`name`]).
    named: FxHashMap<c_int, FxHashMap<Handle, u32>>,
    /// The handles each peer named, by number: what its notes' numbers stand for.
    names: FxHashMap<c_int, Vec<Handle>>,
    /// Peers whose greeting was tried here.
    reach: FxHashMap<c_int, Reach>,
    /// Receives a probe asked bytes for before they were posted ([`probing`]): not announced.
    asked: FxHashSet<Key>,
    /// Per (destination, tag): the last ready message offered a buffer this rank's sends fit
    /// (the write landing), so the next send waits for its ready message before it packs.
    writes: FxHashSet<(c_int, c_int)>,
    /// Receives whose ready message offered their buffer, until their note is claimed.
    offered: FxHashSet<Key>,
    /// Notes come that declined their receive's offer ([`DECLINED_NOTE`]), until claimed.
    declines: FxHashSet<Key>,
    /// Per (source, tag): receives still to announce without offering their buffers, since
    /// the sender lent where one was offered (its layout of another shape, say).
    declined: FxHashMap<(c_int, c_int), u32>,
    /// Send channels per (destination, tag).
    sends: FxHashMap<(c_int, c_int), SendChan>,
    /// Receive channels per (source, tag).
    recvs: FxHashMap<(c_int, c_int), RecvChan>,
    ops: u64,
    /// The bytes of the message being filed ([`drain`]), kept between reads.
    scratch: Vec<u8>,
}

impl State {
    /// Whether `rank` is another rank of this node, which the mailboxes reach.
    fn on_node(&self, rank: c_int) -> bool {
        self.mail.as_ref().is_some_and(|m| m.reaches(rank))
    }

    /// Whether messages of `lens` bytes to `rank` fit its mailbox now, one after another,
    /// behind the done message owed to it, which goes first ([`pay`]).
    fn room(&self, rank: c_int, lens: &[usize]) -> bool {
        let owed = self.owed.iter().filter(|&&(p, _)| p == rank).count();
        let done = (owed > 0).then_some(owed * DONE_ENTRY);
        self.mail
            .as_ref()
            .is_some_and(|m| m.room(rank, done.into_iter().chain(lens.iter().copied())))
    }

    /// Claims the note of announced receive `k` where it has come: the receive is no longer
    /// awaited, and its source and tag are announced to again without back-off.
    fn take_note(&mut self, k: &Key) -> Option<Note> {
        let n = self.notes.remove(k)?;
        if let Some(rc) = self.recvs.get_mut(&(k.0, k.1)) {
            let at = (k.2 % 2) as usize;
            match &n {
                Note::Lent(l) => rc.lent[at] = Some((k.2, *l)),
                Note::Channel => {
                    // The slot the armed unpack read, now message `k`'s.
                    rc.lent[at] = rc.lent[at]
                        .filter(|(m, _)| m + 2 == k.2)
                        .map(|(_, l)| (k.2, l));
                }
                _ => rc.lent[at] = None,
            }
        }
        self.awaited.remove(k);
        self.quiet.remove(k);
        self.backoff.remove(&(k.0, k.1));
        let declined = self.declines.remove(k);
        if self.offered.remove(k) {
            if declined {
                self.declined.insert((k.0, k.1), DECLINED_SKIP);
            } else if n == Note::Written {
                self.declined.remove(&(k.0, k.1));
            }
        }
        Some(n)
    }

    /// Whether a receive from `source` with `tag` may offer its buffer now: not while a few
    /// offers to that source and tag were lately declined (each such receive counted here; an
    /// offer costs the receive a query of its stream).
    fn may_offer(&mut self, source: c_int, tag: c_int) -> bool {
        match self.declined.get_mut(&(source, tag)) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        }
    }

    /// Sends `source` a ready message for its message `seq` with `tag` that asks for bytes
    /// through the real MPI (`packed` of them, 0 where unknown); whether it fit.
    fn ask_for_bytes(&mut self, source: c_int, tag: c_int, seq: u64, packed: u64) -> bool {
        let bytes = Ready {
            packed,
            landing: Landing::Bytes,
            quiet: false,
            target: None,
            channel: None,
        };
        post(self, source, READY_TAG, &encode_ready(tag, seq, &bytes))
    }
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
/// thread level): the mailboxes between the ranks of each node ([`Mailboxes::open`]), unless
/// the interposer or the direct path is off, or threads may call MPI at once (the order of
/// sends would be unknown).
///
/// # Safety
/// MPI was just initialized, and every rank calls this (the mailboxes are made collectively).
pub unsafe fn init(provided: c_int) {
    let cfg = config::get();
    // SAFETY: reading an immutable constant of the rsmpi shim.
    let multiple = provided == unsafe { ffi::RSMPI_THREAD_MULTIPLE };
    if cfg.disabled || cfg.direct == Direct::Off || multiple {
        return;
    }
    // Open MPI's and MPICH's Fortran bindings call the profiling interface (`PMPI_*`)
    // themselves: their sends and receives would not be counted, and the numbers would pair
    // a send with the wrong receive. Where they are loaded the path stays off; every rank
    // decides alike, since the mailboxes below are made by all or none.
    let fortran = c_int::from(fortran_bindings_loaded());
    let mut any: c_int = 0;
    // SAFETY: valid buffers of one int; MPI is initialized; the shim's constants.
    unsafe {
        ffi::PMPI_Allreduce(
            (&fortran as *const c_int).cast(),
            (&mut any as *mut c_int).cast(),
            1,
            ffi::RSMPI_INT32_T,
            ffi::RSMPI_MAX,
            ffi::RSMPI_COMM_WORLD,
        );
    }
    if any != 0 {
        log!("direct path: MPI's Fortran bindings are loaded (their calls cannot be counted); off");
        return;
    }
    // SAFETY: the caller's contract.
    let Some(mail) = (unsafe { Mailboxes::open() }) else {
        log!("direct path: no shared-memory mailboxes between the ranks; off");
        return;
    };
    let _ = STATE.set(Mutex::new(State {
        mail: Some(mail),
        settled: true,
        ..State::default()
    }));
}

/// Whether the process has MPI's Fortran bindings loaded (Open MPI's `libmpi_mpifh` or
/// `libmpi_usempif08`, MPICH's `libmpifort`): one of their entry points resolves.
fn fortran_bindings_loaded() -> bool {
    const NAMES: [&std::ffi::CStr; 6] = [
        c"mpi_send_",
        c"mpi_send",
        c"mpi_send__",
        c"MPI_SEND",
        c"ompi_send_f",
        c"mpi_send_f08_",
    ];
    // SAFETY: a handle to the program's global symbols (a null file name); never closed.
    let all = unsafe { libc::dlopen(std::ptr::null(), libc::RTLD_NOW) };
    if all.is_null() {
        return false;
    }
    // SAFETY: looking names up in that handle changes nothing.
    NAMES
        .iter()
        .any(|n| !unsafe { libc::dlsym(all, n.as_ptr()) }.is_null())
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
    let empty = st.on_node(dest) && unsafe { is_empty(count, dt) };
    if empty && !send_note(&mut st, dest, tag, seq, &Note::Empty, 0) {
        log!(
            "direct path: rank {dest}'s mailbox is full; its receive of message {seq} with tag {tag} may wait for its note"
        );
    }
    housekeeping(&mut st);
    Some(seq)
}

/// A probe for a message from `source` with `tag` on `comm` (`MPI_Probe`, `MPI_Iprobe`, the
/// matched probes), about to be made: a program that probes waits to see a message before it
/// posts the receive that takes it, so that receive's ready message would come only after its
/// sender had waited for it in vain. The sender is told at once that the receive counted next
/// from that source and tag takes its bytes through the real MPI (a ready message that asks
/// for bytes), and that receive, once posted, is not announced. Nothing for wildcards, other
/// communicators and ranks of other nodes.
pub fn probing(comm: MPI_Comm, source: c_int, tag: c_int) {
    let Some(s) = state() else {
        return;
    };
    if key(comm) != world() || source == any_source() || tag == any_tag() || source < 0 {
        return;
    }
    let mut st = lock(s);
    if !st.settled || !st.on_node(source) {
        return;
    }
    let Some(k) = probed(&st, source, tag) else {
        return;
    };
    if st.ask_for_bytes(source, tag, k.2, 0) {
        st.asked.insert(k);
        log!(
            "direct path: a probe for message {} from rank {source} with tag {tag}: asks for bytes",
            k.2
        );
    }
}

/// The receive a probe for `(source, tag)` asks bytes for ([`probing`]): the next one counted
/// from that source and tag, unless a probe asked for it already or it was announced.
fn probed(st: &State, source: c_int, tag: c_int) -> Option<Key> {
    let seq = st.posted.get(&(source, tag)).copied().unwrap_or(0);
    let k = (source, tag, seq);
    (!st.asked.contains(&k) && !st.awaited.contains(&k)).then_some(k)
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

/// A cancel, or a counted send that did not start: the order of matching is no longer known
/// here.
pub fn unsettle() {
    if let Some(s) = state() {
        let mut st = lock(s);
        if st.settled {
            log!("direct path: the order of matching is not known any more: the path stops");
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

/// Per handle among `handles`: whether it is a persistent send on `MPI_COMM_WORLD` that
/// [`started`] counts.
pub fn persistent_sends(handles: &[u64]) -> Vec<bool> {
    let Some(s) = state() else {
        return vec![false; handles.len()];
    };
    let st = lock(s);
    handles
        .iter()
        .map(|h| st.persistent.get(h).is_some_and(|p| p.0))
        .collect()
}

/// Counts the starts of the persistent requests among `handles`, as their sends and receives;
/// returns, per handle, its peer, tag and number where it was counted.
///
/// # Safety
/// MPI initialized.
pub unsafe fn started(handles: &[u64]) -> Vec<Option<(c_int, c_int, u64)>> {
    let Some(s) = state() else {
        return vec![None; handles.len()];
    };
    let starts: Vec<Option<(bool, c_int, c_int, bool)>> = {
        let st = lock(s);
        if st.persistent.is_empty() {
            return vec![None; handles.len()];
        }
        handles
            .iter()
            .map(|h| st.persistent.get(h).copied())
            .collect()
    };
    // SAFETY: reading immutable constants of the rsmpi shim.
    let (world, byte) = unsafe { (ffi::RSMPI_COMM_WORLD, ffi::RSMPI_UINT8_T) };
    starts
        .into_iter()
        .map(|start| {
            let (send, peer, tag, empty) = start?;
            let seq = if send {
                // SAFETY: MPI initialized; an empty start is a count of 0.
                unsafe { sent(world, peer, tag, if empty { 0 } else { 1 }, byte) }
            } else {
                posted(world, peer, tag)
            };
            seq.map(|n| (peer, tag, n))
        })
        .collect()
}

/// Whether the direct path is on in this rank now (set up, the order of matching known).
pub fn on() -> bool {
    state().is_some_and(|s| lock(s).settled)
}

/// Whether a send to `dest` on `comm` can go by the direct path from this rank now: the path
/// is up, `comm` is `MPI_COMM_WORLD`, the order of matching is known and `dest` is another
/// rank of this node.
pub fn lends_to(comm: MPI_Comm, dest: c_int) -> bool {
    state().is_some_and(|s| {
        let st = lock(s);
        key(comm) == world() && st.settled && st.on_node(dest)
    })
}

/// Drops ready messages of sends already made and notes no receive waits for, every
/// [`HOUSEKEEPING`] operations. A send is counted before it looks for its ready message (the
/// send counting now among them, and a start counts all its sends first), so the ready
/// messages of the last [`READIES_KEPT`] numbers of each destination and tag stay.
fn housekeeping(st: &mut State) {
    st.ops += 1;
    if st.ops % HOUSEKEEPING != 0 {
        return;
    }
    drain(st);
    let mut peers: Vec<c_int> = st.owed.iter().map(|&(p, _)| p).collect();
    peers.sort_unstable();
    peers.dedup();
    for p in peers {
        pay(st, p);
    }
    let sent = st.sent.clone();
    st.ready.retain(|&(p, t, n), _| {
        n.saturating_add(READIES_KEPT) >= sent.get(&(p, t)).copied().unwrap_or(0)
    });
    let (posted, awaited) = (st.posted.clone(), st.awaited.clone());
    st.notes
        .retain(|k, _| awaited.contains(k) || k.2 >= posted.get(&(k.0, k.1)).copied().unwrap_or(0));
    let notes = &st.notes;
    st.quiet.retain(|k| notes.contains_key(k));
    let awaited = &st.awaited;
    st.offered.retain(|k| awaited.contains(k));
    let notes = &st.notes;
    st.declines.retain(|k| notes.contains_key(k));
    st.asked
        .retain(|k| k.2 >= posted.get(&(k.0, k.1)).copied().unwrap_or(0));
}

/// Words as the bytes of a message, with room for `more` bytes after them.
fn to_bytes(words: &[u64], more: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(words.len() * 8 + more);
    for w in words {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b
}

/// The `N` words of a message from its word `at` on.
fn words<const N: usize>(bytes: &[u8], at: usize) -> Option<[u64; N]> {
    let b = bytes.get(at.checked_mul(8)?..at.checked_add(N)?.checked_mul(8)?)?;
    let mut w = [0u64; N];
    for (w, c) in w.iter_mut().zip(b.chunks_exact(8)) {
        *w = u64::from_le_bytes(c.try_into().ok()?);
    }
    Some(w)
}

/// A ready message: tag, number, packed bytes, how the receive takes a direct message and
/// whether it posted a real receive; then, where the receive offers its buffer, its target
/// ([`Target::encode`]).
fn encode_ready(tag: c_int, seq: u64, r: &Ready) -> Vec<u8> {
    let kind = match r.landing {
        Landing::Carry => 0,
        Landing::Pull => 1,
        Landing::Bytes => 2,
    };
    let offered = if r.channel.is_some() { 2 } else { 0 };
    let mut b = to_bytes(
        &[
            tag as u32 as u64,
            seq,
            r.packed,
            kind,
            u64::from(r.quiet) | offered,
        ],
        16,
    );
    if let Some(o) = &r.channel {
        let armed = o.armed_from.map_or(0, |m| m + 1);
        b.extend_from_slice(&(u64::from(o.name) | u64::from(o.offset) << 32).to_le_bytes());
        b.extend_from_slice(&armed.to_le_bytes());
    } else if let Some(t) = &r.target {
        t.encode(&mut b);
    }
    b
}

fn decode_ready(b: &[u8]) -> Option<(c_int, u64, Ready)> {
    let w = words::<5>(b, 0)?;
    let (target, channel) = match b.get(40..) {
        Some([]) => (None, None),
        Some(rest) if w[4] & 2 != 0 => {
            let [cell, armed] = words::<2>(rest, 0).filter(|_| rest.len() == 16)?;
            let offer = Offer {
                name: (cell & 0xffff_ffff) as u32,
                offset: (cell >> 32) as u32,
                armed_from: armed.checked_sub(1),
            };
            (None, Some(offer))
        }
        Some(rest) => (Some(Target::decode(rest)?), None),
        None => return None,
    };
    if w[4] & 2 != 0 && channel.is_none() {
        return None;
    }
    let landing = match w[3] {
        0 => Landing::Carry,
        1 => Landing::Pull,
        2 => Landing::Bytes,
        _ => return None,
    };
    let quiet = match w[4] & !2 {
        0 => false,
        1 => true,
        _ => return None,
    };
    Some((
        w[0] as u32 as c_int,
        w[1],
        Ready {
            packed: w[2],
            landing,
            quiet,
            target,
            channel,
        },
    ))
}

/// A greeting: a lent staging's words (offset, length) and handles (the allocation's, the
/// event's).
fn encode_lent(lent: &Lent) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 * 8 + 2 * 64);
    b.extend_from_slice(&lent.staging.offset.to_le_bytes());
    b.extend_from_slice(&lent.staging.len.to_le_bytes());
    b.extend_from_slice(&lent.staging.handle);
    b.extend_from_slice(&lent.event);
    b
}

/// The lent staging of a greeting.
fn decode_lent(b: &[u8]) -> Option<Lent> {
    let [offset, len] = words::<2>(b, 0)?;
    let handle = |i: usize| -> Option<Handle> {
        let from = 2 * 8 + i * 64;
        b.get(from..from + 64)?.try_into().ok()
    };
    Some(Lent {
        staging: Export {
            handle: handle(0)?,
            offset,
            len,
        },
        event: handle(1)?,
    })
}

/// The bit of a note's kind that says its message sends nothing through the MPI.
const QUIET_NOTE: u64 = 1 << 8;
/// The bit of a note's kind that says its receive offered its buffer and the sender could
/// not write there (a layout of another shape, a persistent start, a failed write): the
/// receive pauses its offers to that sender and tag ([`State::may_offer`]).
const DECLINED_NOTE: u64 = 1 << 9;

/// A note's flags ([`QUIET_NOTE`], [`DECLINED_NOTE`]).
fn note_flags(quiet: bool, declined: bool) -> u64 {
    (if quiet { QUIET_NOTE } else { 0 }) | (if declined { DECLINED_NOTE } else { 0 })
}

/// A note: tag, number, kind (with its `flags`, [`note_flags`]), then what it carries; a lent
/// staging's offset and length, and its handles by the numbers `names` (the staging's, the
/// event's) this rank named them by to the receiver ([`name`]).
fn encode_note(tag: c_int, seq: u64, note: &Note, flags: u64, names: (u32, u32)) -> Vec<u8> {
    let head = |kind: u64, n: u64| [tag as u32 as u64, seq, kind | flags, n];
    match note {
        Note::Lent(l) => {
            let [a, b, c, d] = head(0, 0);
            let numbers = u64::from(names.0) | u64::from(names.1) << 32;
            to_bytes(&[a, b, c, d, l.staging.offset, l.staging.len, numbers], 0)
        }
        Note::Empty => to_bytes(&head(1, 0), 0),
        Note::Written => to_bytes(&head(3, 0), 0),
        Note::Channel => to_bytes(&head(4, 0), 0),
        Note::Carried(v) => {
            let mut b = to_bytes(&head(2, v.len() as u64), v.len());
            b.extend_from_slice(v);
            b
        }
    }
}

/// A note's tag, number, the note and its flags ([`note_flags`]); `named`: the handles its
/// sender named, by number.
fn decode_note(b: &[u8], named: &[Handle]) -> Option<(c_int, u64, Note, u64)> {
    let w = words::<4>(b, 0)?;
    let flags = w[2] & (QUIET_NOTE | DECLINED_NOTE);
    let quiet = flags & QUIET_NOTE != 0;
    let note = match w[2] & !flags {
        0 if b.len() == LENT_NOTE => {
            let [offset, len, numbers] = words::<3>(b, 4)?;
            let handle = |n: u64| named.get(usize::try_from(n).ok()?).copied();
            Note::Lent(Lent {
                staging: Export {
                    handle: handle(numbers & 0xffff_ffff)?,
                    offset,
                    len,
                },
                event: handle(numbers >> 32)?,
            })
        }
        1 if !quiet => Note::Empty,
        2 => Note::Carried(b.get(32..32 + usize::try_from(w[3]).ok()?)?.to_vec()),
        3 if b.len() == 32 => Note::Written,
        4 if b.len() == 32 && quiet => Note::Channel,
        _ => return None,
    };
    Some((w[0] as u32 as c_int, w[1], note, flags))
}

/// Sends `bytes` with `tag` to `dest` through its mailbox; whether it fit (the done messages
/// owed to `dest` go first, [`pay`]).
fn post(st: &mut State, dest: c_int, tag: u16, bytes: &[u8]) -> bool {
    pay(st, dest);
    st.mail.as_ref().is_some_and(|m| m.send(dest, tag, bytes))
}

/// Sends `dest` the done messages owed to it, as one message of their tags and numbers; kept
/// owed where it does not fit.
fn pay(st: &mut State, dest: c_int) {
    if !st.owed.iter().any(|&(p, _)| p == dest) {
        return;
    }
    let msg = encode_done(st.owed.iter().filter(|&&(p, _)| p == dest).map(|&(_, k)| k));
    if st
        .mail
        .as_ref()
        .is_some_and(|m| m.send(dest, DONE_TAG, &msg))
    {
        st.owed.retain(|&(p, _)| p != dest);
    }
}

/// Bytes of each message a done message names: its tag and number.
const DONE_ENTRY: usize = 16;

/// A done message: the tag and number of each message whose lent staging its receiver is
/// done with.
fn encode_done(keys: impl Iterator<Item = Key>) -> Vec<u8> {
    let words: Vec<u64> = keys.flat_map(|k| [k.1 as u32 as u64, k.2]).collect();
    to_bytes(&words, 0)
}

/// The tags and numbers of a done message.
fn decode_done(b: &[u8]) -> Option<Vec<(c_int, u64)>> {
    if b.is_empty() || b.len() % DONE_ENTRY != 0 {
        return None;
    }
    b.chunks_exact(DONE_ENTRY)
        .map(|pair| words::<2>(pair, 0).map(|[tag, seq]| (tag as u32 as c_int, seq)))
        .collect()
}

/// At `MPI_Finalize`: staging still lent stays allocated (a peer may not have said it is done
/// yet).
pub fn finalize() {
    let Some(s) = state() else { return };
    for (_, loan) in std::mem::take(&mut lock(s).lent) {
        std::mem::forget(loan);
    }
}

/// Sends receive `seq`'s note with its `flags` ([`note_flags`]); whether it fit (with the
/// names of a lent staging's handles, where they are new to `dest`).
fn send_note(st: &mut State, dest: c_int, tag: c_int, seq: u64, note: &Note, flags: u64) -> bool {
    let names = match note {
        Note::Lent(l) => match (name(st, dest, &l.staging.handle), name(st, dest, &l.event)) {
            (Some(a), Some(b)) => (a, b),
            _ => return false,
        },
        _ => (0, 0),
    };
    post(
        st,
        dest,
        NOTE_TAG,
        &encode_note(tag, seq, note, flags, names),
    )
}

/// The number `handle` goes by in this rank's notes to `dest`: named once, in a message of
/// its own before the first note that uses it, so that a note of a lent staging fits one
/// mailbox cell where two handles would take three more (each cell a cache line the
/// receiver's core must fetch). `None` where the name does not fit the mailbox.
fn name(st: &mut State, dest: c_int, handle: &Handle) -> Option<u32> {
    let named = st.named.get(&dest);
    if let Some(&known) = named.and_then(|m| m.get(handle)) {
        return Some(known);
    }
    let n = named.map_or(0, FxHashMap::len);
    if n >= NAMES_MAX {
        return None;
    }
    let n = u32::try_from(n).ok()?;
    let mut msg = u64::from(n).to_le_bytes().to_vec();
    msg.extend_from_slice(handle);
    if !post(st, dest, NAME_TAG, &msg) {
        return None;
    }
    st.named.entry(dest).or_default().insert(*handle, n);
    Some(n)
}

/// The number and handle of a name ([`name`]); numbers from [`NAMES_MAX`] on are refused.
fn decode_name(b: &[u8]) -> Option<(usize, Handle)> {
    let [n] = words::<1>(b, 0)?;
    let n = usize::try_from(n).ok().filter(|&n| n < NAMES_MAX)?;
    Some((n, b.get(8..)?.try_into().ok()?))
}

/// Reads the mailboxes now, where the direct path is on: the done messages come give their
/// lent staging back to its pool before a start asks for staging again.
pub fn read_mail() {
    if let Some(s) = state() {
        drain(&mut lock(s));
    }
}

/// Reads every message that has come to this rank's mailboxes into the state's tables.
fn drain(st: &mut State) {
    // The mailboxes and the scratch are set aside while the messages are filed (neither is
    // touched by filing; a panic there leaves the direct path without mailboxes: the byte path).
    let Some(mail) = st.mail.take() else {
        return;
    };
    let mut scratch = std::mem::take(&mut st.scratch);
    mail.receive(&mut scratch, |from, tag, buf| file(st, from, tag, buf));
    st.scratch = scratch;
    st.mail = Some(mail);
}

/// Files message `buf` with `tag` from rank `from` into the state's tables.
fn file(st: &mut State, from: c_int, tag: u16, buf: &[u8]) {
    let read = match tag {
        READY_TAG => decode_ready(buf).map(|(t, seq, r)| {
            st.ready.insert((from, t, seq), r);
            let last = st.readies.entry((from, t)).or_insert(None);
            *last = Some(last.map_or(seq, |l| l.max(seq)));
            st.announcing.insert(from);
        }),
        NOTE_TAG => decode_note(buf, st.names.get(&from).map_or(&[], Vec::as_slice)).map(
            |(t, seq, note, flags)| {
                st.notes.insert((from, t, seq), note);
                if flags & QUIET_NOTE != 0 {
                    st.quiet.insert((from, t, seq));
                }
                if flags & DECLINED_NOTE != 0 {
                    st.declines.insert((from, t, seq));
                }
            },
        ),
        // A receiver is done with lent stagings (a tag and number each): back to the pool.
        DONE_TAG => decode_done(buf).map(|done| {
            for (tag, seq) in done {
                let Some(loan) = st.lent.remove(&(from, tag, seq)) else {
                    continue;
                };
                // A send channel to that receiver keeps it as the slot of message `seq + 2`.
                if let Some(sc) = st.sends.get_mut(&(from, tag)) {
                    let staging = loan.into_staging();
                    let fits = staging
                        .kernel_side()
                        .is_some_and(|(_, len)| len as u64 >= sc.packed);
                    if fits && staging.lend_address().is_some() {
                        sc.slots[(seq % 2) as usize] = Some((staging, seq));
                    }
                }
            }
        }),
        HELLO_TAG => decode_lent(buf).map(|g| {
            st.greetings.insert(from, g);
        }),
        NAME_TAG => decode_name(buf).map(|(n, handle)| {
            let names = st.names.entry(from).or_default();
            if names.len() <= n {
                names.resize(n + 1, [0; 64]);
            }
            names[n] = handle;
        }),
        _ => None,
    };
    if read.is_none() {
        log!("direct path: an unreadable message with tag {tag} from rank {from}");
    }
}

/// Whether this rank's GPU reaches rank `source`'s lent staging (its greeting opened here),
/// trying a greeting that came; `None` until one has come.
fn reaches(st: &mut State, source: c_int, engine: &Engine) -> Option<bool> {
    if let Some(&r) = st.reach.get(&source) {
        return Some(r == Reach::Yes);
    }
    if !st.greetings.contains_key(&source) {
        drain(st);
    }
    let g = st.greetings.remove(&source)?;
    let yes = engine.reaches(source, &g);
    log!(
        "direct path: rank {source}'s staging {}",
        if yes {
            "maps here"
        } else {
            "does not map here: its messages take the byte path"
        }
    );
    st.reach
        .insert(source, if yes { Reach::Yes } else { Reach::No });
    Some(yes)
}

/// Announces receive `r` (number `seq` from `source` with `tag`) to its source, where the
/// direct path can serve it: the order is settled, the source is another rank whose staging
/// this rank's GPU maps (or, with `COLLECTIVES_INTERPOSE_DIRECT=carry`, the buffer is host
/// memory), and announcing has not been wasted on this source and tag lately. Announced, `r`
/// says so ([`Receive::direct`]).
///
/// `quiet`: the receive is a blocking one that has posted no real receive and will not
/// unless its message turns out to come through the MPI ([`arrival`]), so a send lent to it
/// may send nothing through the MPI. Else its real receive is already posted. A receive not
/// announced posts its real receive as on the byte path.
///
/// # Safety
/// MPI initialized; `r` is a posted receive (or, `quiet`, one its caller completes through
/// [`arrival`]), kept until it completes.
pub unsafe fn announce(r: &mut Receive, source: c_int, tag: c_int, seq: Option<u64>, quiet: bool) {
    let (Some(s), Some(seq)) = (state(), seq) else {
        return;
    };
    let mut st = lock(s);
    if !st.settled || !st.on_node(source) {
        return;
    }
    if st.asked.remove(&(source, tag, seq)) {
        // A probe asked its sender for bytes: the real MPI's receive takes them.
        return;
    }
    let landing = match &r.engine {
        Engine::Gpu(..) => match reaches(&mut st, source, &r.engine) {
            Some(true) => Landing::Pull,
            _ => return,
        },
        Engine::Cpu if config::get().direct == Direct::Carry => Landing::Carry,
        Engine::Cpu => return,
    };
    let packed = r.plan.packed_size();
    if let Some((skip, _)) = st.backoff.get_mut(&(source, tag)) {
        if *skip > 0 {
            *skip -= 1;
            // Said all the same, so that a sender that saw the last ones of this tag come
            // sends its bytes at once instead of waiting for a ready message in vain.
            if profile::time(Phase::Announce, || {
                st.ask_for_bytes(source, tag, seq, packed)
            }) {
                log!(
                    "direct path: message {seq} from rank {source} with tag {tag}: asks for bytes"
                );
            }
            return;
        }
    }
    let sent = profile::time(Phase::Announce, || {
        // A blocking receive offers its buffer to the sender's kernel (the write landing); a
        // request could be cancelled, and its buffer then be the program's again while the
        // sender writes.
        let target = if quiet
            && landing == Landing::Pull
            && config::get().write
            && st.may_offer(source, tag)
        {
            r.engine.offer(&r.plan)
        } else {
            None
        };
        let offering = target.is_some();
        // Short blocks, where no buffer is offered: the receive channel's words instead.
        let channel = if quiet && landing == Landing::Pull && target.is_none() {
            offer_channel(&mut st, source, tag, seq, r)
        } else {
            None
        };
        let msg = encode_ready(
            tag,
            seq,
            &Ready {
                packed,
                landing,
                quiet,
                target,
                channel,
            },
        );
        (post(&mut st, source, READY_TAG, &msg), offering)
    });
    if let (true, offered) = sent {
        st.awaited.insert((source, tag, seq));
        if offered {
            st.offered.insert((source, tag, seq));
        }
        r.direct = Some(Announced((source, tag, seq)));
    }
}

/// A send's pack launched before [`send`]: into the direct path's staging ([`pack_ahead`]), or
/// into its channel's slot ([`open_channel`]).
#[derive(Debug)]
pub enum Ahead {
    /// Into fresh staging.
    Packed(Staging),
    /// Into the slot, signalling the receiver's flag.
    Slot(Slot),
}

/// How the message of a receive announced quietly arrived ([`arrival`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Its note came, and its sender sent nothing through the MPI: the receive completes
    /// without a real one, as a message of 0 bytes that its note describes.
    Noted,
    /// A message through the MPI is the receive's: its bytes (the byte path), the message of
    /// 0 bytes its note says follows, or an empty message. The caller receives it for real.
    Mpi,
}

/// Waits for the message of receive `a`, announced quietly ([`announce`]) on `comm` by a
/// blocking call that posted no real receive: reads the mailboxes for its note, and probes
/// the real MPI (which also moves this rank's own messages) for a message from its source
/// with its tag every [`PROBE_EVERY`]. A message the probe finds is this receive's unless the
/// note has come by then: the receives posted before this one from that source and tag match
/// the earlier messages as those arrive, so the first one left unmatched is this receive's,
/// or a later one's where its own went quietly, whose note was written before the later
/// message was sent. The real MPI's code where the probe fails.
///
/// # Safety
/// MPI initialized; `comm` is the receive's communicator; no other receive is posted by this
/// process until the caller has received what this says (the direct path is off where
/// threads may call MPI at once).
pub unsafe fn arrival(r: &mut Receive, comm: MPI_Comm) -> Result<Arrival, c_int> {
    let (Some(s), Some(a)) = (state(), r.direct) else {
        return Ok(Arrival::Mpi);
    };
    let (source, tag, _) = a.0;
    // How the message came, where its note has; a quiet one's note is claimed at once (the
    // receive then settles as one whose note came early, [`finish_early`]): nothing follows
    // it through the MPI, so it is this receive's.
    let mut noted = |st: &mut State| -> Option<Arrival> {
        if !st.notes.contains_key(&a.0) {
            drain(st);
        }
        st.notes.contains_key(&a.0).then(|| {
            if st.quiet.contains(&a.0) {
                claim_into(st, r, a);
                Arrival::Noted
            } else {
                Arrival::Mpi
            }
        })
    };
    let mut probed = Instant::now();
    loop {
        if let Some(how) = noted(&mut lock(s)) {
            return Ok(how);
        }
        if probed.elapsed() < PROBE_EVERY {
            std::hint::spin_loop();
            continue;
        }
        probed = Instant::now();
        let mut flag: c_int = 0;
        // SAFETY: the caller's contract; a valid flag and the shim's status-ignore constant.
        let rc =
            unsafe { ffi::PMPI_Iprobe(source, tag, comm, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        if rc != 0 {
            return Err(rc);
        }
        if flag != 0 {
            return Ok(noted(&mut lock(s)).unwrap_or(Arrival::Mpi));
        }
        std::hint::spin_loop();
    }
}

/// Fills `status` as the real MPI would for a message of 0 bytes from `source` with `tag`:
/// the status of a receive whose message came quietly ([`Arrival::Noted`]), which
/// [`finish`] then reads its note for.
///
/// # Safety
/// `status` is a writable status.
pub unsafe fn noted_status(status: *mut ffi::MPI_Status, source: c_int, tag: c_int) {
    // SAFETY: the caller's contract.
    unsafe {
        (*status).MPI_SOURCE = source;
        (*status).MPI_TAG = tag;
        (*status).MPI_ERROR = 0;
        ffi::PMPI_Status_set_cancelled(status, 0);
        ffi::PMPI_Status_set_elements(status, bytes_type(), 0);
    }
}

/// The note of announced receive `a`, which completed with 0 bytes: waits for it (it was sent
/// before the message). After [`NOTE_WAIT`] without one, the message counts as empty.
fn claim(a: &Announced) -> Note {
    let Some(s) = state() else {
        return Note::Empty;
    };
    let start = Instant::now();
    loop {
        {
            let mut st = lock(s);
            if !st.notes.contains_key(&a.0) {
                drain(&mut st);
            }
            if let Some(n) = st.take_note(&a.0) {
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

/// Before the real receive completes (in a wait for it): claims the note of announced receive
/// `r` where it has come and says the bytes are lent (or, testing, carried: copied into the
/// staging once the real receive completes), so that its unpack can be queued while the real
/// MPI still moves the other messages of the wait. The note comes before its message of 0
/// bytes, which this receive is then bound to match (the order of matching is known while the
/// path is on). What became of it.
pub fn claim_early(r: &mut Receive) -> Claim {
    let (Some(a), Some(s)) = (r.direct, state()) else {
        return Claim::Left;
    };
    let mut st = lock(s);
    if !st.notes.contains_key(&a.0) {
        drain(&mut st);
    }
    claim_into(&mut st, r, a)
}

/// [`claim_early`] with the state locked and the mailboxes read: the note of `r` (announced
/// as `a`) claimed into [`Receive::early`] where it has come (lent, or carried bytes that fit).
fn claim_into(st: &mut State, r: &mut Receive, a: Announced) -> Claim {
    let note = {
        // Carried bytes are kept in the claim: the staging is the real receive's until it
        // completes.
        let fits = match st.notes.get(&a.0) {
            Some(Note::Lent(_) | Note::Written) => true,
            Some(Note::Channel) => r.armed.is_some_and(|x| x.k == a.0 .2),
            Some(Note::Carried(v)) => matches!(&r.staging, Staging::Cpu(b) if v.len() <= b.len()),
            Some(Note::Empty) => return Claim::Left,
            None => return Claim::Awaited,
        };
        if !fits {
            return Claim::Left;
        }
        st.take_note(&a.0)
    };
    r.direct = None;
    log!(
        "{}: message {} from rank {} with tag {}: its note came before the receive completed",
        r.op,
        a.0 .2,
        a.0 .0,
        a.0 .1
    );
    if note != Some(Note::Channel) {
        disarm(r);
    }
    r.early = match note {
        Some(Note::Channel) => Some(Early::Channel(a.0 .0, a.0)),
        Some(Note::Lent(lent)) => Some(Early::Lent(a.0 .0, a.0, lent, false)),
        Some(Note::Written) => Some(Early::Written(a.0 .0)),
        Some(Note::Carried(v)) => Some(Early::Carried(v)),
        _ => None,
    };
    if r.early.is_some() {
        Claim::Claimed
    } else {
        Claim::Left
    }
}

/// What [`claim_early`] found for a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Its note had come and is claimed ([`Receive::early`] set).
    Claimed,
    /// It is announced and its note has not come yet.
    Awaited,
    /// Nothing to claim before it completes: not announced (or the direct path is off), or its
    /// note is read then (an empty message, carried bytes that do not fit).
    Left,
}

/// A receive that claimed its note early and will not complete here (its call failed): an
/// unpack queued from the peer's staging is waited for, and the peer told it is done with it.
pub fn let_go(r: &mut Receive) {
    if let Some(Early::Channel(peer, k)) = r.early {
        // The armed unpack reads the peer's slot until it ends.
        r.early = None;
        disarm(r);
        if let Err(e) = r.engine.wait() {
            log!("{}: the wait for an armed unpack failed: {e}", r.op);
        }
        done(peer, k);
        return;
    }
    disarm(r);
    if let Some(Early::Lent(peer, k, _, queued)) = r.early.take() {
        if queued {
            if let Err(e) = r.engine.wait() {
                log!("{}: the wait for an early unpack failed: {e}", r.op);
            }
        }
        done(peer, k);
    }
}

/// Settles a completed receive whose note [`claim_early`] claimed: its message must be the
/// 0-byte one that follows a note.
///
/// # Safety
/// MPI initialized; `status` is the receive's completed status, writable.
unsafe fn finish_early(r: &mut Receive, early: Early, status: *mut ffi::MPI_Status) -> Finish {
    let (mut cancelled, mut got): (c_int, c_int) = (0, 0);
    // SAFETY: the caller's contract; counted in bytes.
    unsafe {
        ffi::PMPI_Test_cancelled(status, &mut cancelled);
        ffi::PMPI_Get_count(status, bytes_type(), &mut got);
    }
    if cancelled != 0 || got != 0 {
        log!("{}: a receive whose note came got another message", r.op);
        return Finish::Settled(Err(ERR_INTERN));
    }
    match early {
        Early::Channel(peer, k) => {
            let n = r.plan.packed_size();
            // SAFETY: the status is writable (the caller's contract).
            unsafe { set_bytes(status, n) };
            log!("{}: {n} bytes through the channel from rank {peer}", r.op);
            Finish::Channel(peer, k)
        }
        Early::Lent(peer, k, lent, queued) => {
            let n = r.plan.packed_size();
            // SAFETY: the status is writable (the caller's contract).
            unsafe { set_bytes(status, n) };
            log!(
                "{}: {n} bytes unpacked directly from rank {peer}'s staging",
                r.op
            );
            if queued {
                Finish::Pulled(peer, k)
            } else {
                Finish::Pull(peer, k, lent)
            }
        }
        Early::Written(peer) => {
            // SAFETY: the status is writable (the caller's contract).
            unsafe { written(r, peer, status) }
        }
        Early::Carried(v) => match &mut r.staging {
            Staging::Cpu(b) if v.len() <= b.len() => {
                b[..v.len()].copy_from_slice(&v);
                // SAFETY: as above.
                unsafe { set_bytes(status, v.len() as u64) };
                Finish::Bytes
            }
            _ => Finish::Settled(Err(ERR_INTERN)),
        },
    }
}

/// Settles receive `r`, whose bytes rank `peer`'s kernel wrote into its buffer (the write
/// landing; the peer waited for the kernel before its note): nothing left to do here but say
/// how many bytes came.
///
/// # Safety
/// `status` is the receive's completed status, writable.
unsafe fn written(r: &Receive, peer: c_int, status: *mut ffi::MPI_Status) -> Finish {
    let n = r.plan.packed_size();
    // SAFETY: the caller's contract.
    unsafe { set_bytes(status, n) };
    log!("{}: {n} bytes written into the buffer by rank {peer}", r.op);
    Finish::Settled(Ok(n))
}

/// Settles a completed receive that announced itself, by what came: bytes through the real
/// MPI (its announcement wasted: [`Finish::Bytes`]), or a message of 0 bytes, whose note says
/// whether the bytes wait in the sender's lent staging ([`Finish::Pull`]; the status is set to
/// the packed size), were carried (testing: copied into the staging here, then
/// [`Finish::Bytes`]) or whether the message was empty.
///
/// # Safety
/// MPI initialized; `status` is the receive's completed status, writable.
pub unsafe fn finish(r: &mut Receive, status: *mut ffi::MPI_Status) -> Finish {
    // SAFETY: the caller's contract.
    let f = unsafe { finish_noted(r, status) };
    if !matches!(f, Finish::Channel(..)) {
        // Its message came another way: the armed unpack, if any, stops before the
        // completion's unpack is queued behind it.
        disarm(r);
    }
    f
}

/// [`finish`] by the receive's note.
///
/// # Safety
/// As [`finish`].
unsafe fn finish_noted(r: &mut Receive, status: *mut ffi::MPI_Status) -> Finish {
    if let Some(early) = r.early.take() {
        // SAFETY: the caller's contract.
        return unsafe { finish_early(r, early, status) };
    }
    let Some(a) = r.direct.take() else {
        return Finish::Bytes;
    };
    let op = r.op;
    let (mut cancelled, mut got): (c_int, c_int) = (0, 0);
    // SAFETY: the caller's contract; counted in bytes.
    unsafe {
        ffi::PMPI_Test_cancelled(status, &mut cancelled);
        ffi::PMPI_Get_count(status, bytes_type(), &mut got);
    }
    if cancelled != 0 {
        return Finish::Bytes;
    }
    if got > 0 {
        wasted(&a);
        return Finish::Bytes;
    }
    match profile::time(Phase::Note, || claim(&a)) {
        Note::Lent(lent) => {
            let n = r.plan.packed_size();
            // SAFETY: the status is writable (the caller's contract).
            unsafe { set_bytes(status, n) };
            log!(
                "{op}: {n} bytes unpacked directly from rank {}'s staging",
                a.0 .0
            );
            Finish::Pull(a.0 .0, a.0, lent)
        }
        // SAFETY: the status is writable (the caller's contract).
        Note::Written => unsafe { written(r, a.0 .0, status) },
        Note::Channel if r.armed.is_some_and(|x| x.k == a.0 .2) => {
            let n = r.plan.packed_size();
            // SAFETY: as above.
            unsafe { set_bytes(status, n) };
            log!("{op}: {n} bytes through the channel from rank {}", a.0 .0);
            Finish::Channel(a.0 .0, a.0)
        }
        Note::Channel => {
            log!("{op}: a channel's note for a receive not armed");
            Finish::Settled(Err(ERR_INTERN))
        }
        Note::Empty => Finish::Bytes,
        Note::Carried(v) => match &mut r.staging {
            Staging::Cpu(s) if v.len() <= s.len() => {
                s[..v.len()].copy_from_slice(&v);
                // SAFETY: as above.
                unsafe { set_bytes(status, v.len() as u64) };
                Finish::Bytes
            }
            _ => {
                log!("{op}: carried bytes that do not fit the staging");
                Finish::Settled(Err(ERR_INTERN))
            }
        },
    }
}

/// Tells the peer of a [`Finish::Pull`] receive that this rank is done with its staging (the
/// unpack was waited for, or failed): owed, and sent with the next message to it ([`pay`]).
pub fn done(peer: c_int, k: Key) {
    if let Some(s) = state() {
        profile::time(Phase::Loan, || {
            let mut st = lock(s);
            st.owed.push((peer, k));
            if st.owed.iter().filter(|&&(p, _)| p == peer).count() >= OWED_MAX {
                pay(&mut st, peer);
            }
        });
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
        let skip = e.0;
        log!(
            "direct path: message {} from rank {} with tag {} was announced and came through the MPI: the next {skip} not announced",
            a.0 .2,
            a.0 .0,
            a.0 .1
        );
    }
}

/// Whether a send of `engine` to `dest` may be lent now: the order of matching is known,
/// `dest` is on this node, and host bytes (the CPU engine) only in the carry mode.
fn lends(s: &Mutex<State>, engine: &Engine, dest: c_int) -> bool {
    if matches!(engine, Engine::Cpu) && config::get().direct != Direct::Carry {
        return false;
    }
    let st = lock(s);
    st.settled && st.on_node(dest)
}

/// A send the interposer took (number `seq` to `dest` with `tag`, its buffer `buf`), on the
/// direct path where it can go: a device buffer whose bytes would go through device staging
/// is packed first; then the send looks for its receive's ready message ([`await_ready`]).
/// With it, the staging is lent (or, testing, host bytes carried) and the note sent:
/// [`Sent::Directly`], or, where `quiet` (a blocking send, which needs no request of the real
/// MPI) and the receive posted no real receive, [`Sent::Quietly`]. Without, [`Sent::No`]: the
/// byte path packs again, into the real MPI's staging (the direct path's is never the real
/// MPI's, [`Engine::lend_staging_for`]).
///
/// # Safety
/// MPI initialized; `buf` is the caller's send buffer, `taken` the interposer's plan of it.
pub unsafe fn send(
    op: &str,
    seq: Option<u64>,
    (dest, tag): (c_int, c_int),
    buf: *const c_void,
    taken: &Taken,
    quiet: bool,
    ahead: Option<Ahead>,
) -> Sent {
    let (Some(s), Some(seq)) = (state(), seq) else {
        return Sent::No;
    };
    // A channel's slot is packed into already ([`open_channel`]), as a pack ahead.
    let (ahead, from) = match ahead {
        Some(Ahead::Packed(st)) => (Some(st), None),
        Some(Ahead::Slot(Slot(st, m))) => (Some(st), Some(m)),
        None => (None, None),
    };
    let (_, plan, engine, _) = taken;
    let carry = matches!(engine, Engine::Cpu);
    if !lends(s, engine, dest) {
        return Sent::No;
    }
    let n = plan.packed_size();
    // The pack first (unless launched ahead), where the byte path would send from device
    // staging too: the ready message travels while the kernel is launched. Where the last
    // receive of this destination and tag offered its buffer, the ready message first: this
    // send may write there instead.
    let writing = ahead.is_none() && expects_target(s, dest, tag);
    let packed = match ahead {
        Some(st) => Some(st),
        None if writing => None,
        // SAFETY: the caller's contract.
        None => match unsafe { pack_lent(op, taken, buf) } {
            Ok(packed) => packed,
            Err(()) => return Sent::No,
        },
    };
    let k = (dest, tag, seq);
    let Some(ready) = await_ready(s, engine, plan, packed.as_ref(), k, carry) else {
        // The staging goes back to its pool; what is queued on the stream stays in order.
        return Sent::No;
    };
    profile::mark("ready came");
    let quiet = quiet && ready.quiet;
    if let Some(offer) = ready.channel {
        keep_offer(&mut lock(s), engine, plan, (dest, tag), offer);
    }
    let channelled = from.is_some() && ready.channel.and_then(|o| o.armed_from) == from;
    // The receive's unpack is armed on the slot this send packed into: the note says so, and
    // the slot stays lent until the receiver is done (nothing through the MPI).
    let through_channel =
        channelled && quiet && packed.as_ref().is_some_and(|x| x.lend_address().is_some());
    if through_channel {
        let mut st = lock(s);
        if st.room(dest, &[32]) && send_note(&mut st, dest, tag, seq, &Note::Channel, QUIET_NOTE) {
            if let Some(staging) = packed {
                st.lent.insert(k, Loan::of_slot(staging));
            }
            drop(st);
            log!(
                "{op}: message {seq} to rank {dest} with tag {tag}: {n} bytes through the channel"
            );
            profile::mark("noted");
            return Sent::Quietly;
        }
    }
    let offered = ready.target.is_some();
    let target = ready.target.filter(|t| !carry && t.fits(plan));
    // The receive's offer is declined where this send lends for any other reason than a
    // pack already under way (it did not know to wait for the offer).
    let declined = offered && (target.is_none() || packed.is_none());
    {
        let mut st = lock(s);
        if target.is_some() {
            st.writes.insert((dest, tag));
        } else {
            st.writes.remove(&(dest, tag));
        }
    }
    if let (Some(t), None) = (&target, &packed) {
        // SAFETY: the caller's contract; `t` is the ready message of this send's receive.
        if let Some(sent) = unsafe { write_and_note(s, op, taken, buf, t, (k, n), quiet) } {
            return sent;
        }
    }
    let staging = match packed {
        Some(st) => st,
        None if carry => match engine.staging_for(plan, Method::OneShot) {
            Ok(mut st) => {
                // SAFETY: the caller's contract; the CPU engine packs at once.
                match unsafe { engine.enqueue_pack(plan, buf, &mut st, None) } {
                    Ok(()) => st,
                    Err(_) => return Sent::No,
                }
            }
            Err(_) => return Sent::No,
        },
        // SAFETY: the caller's contract.
        None => match unsafe { pack_into_device(engine, plan, buf) } {
            Ok(st) => st,
            Err(e) => {
                log!("{op}: the pack failed, byte path: {e}");
                return Sent::No;
            }
        },
    };
    let flags = note_flags(quiet, declined);
    match lend_and_note(s, op, engine, staging, (k, n), &mut None, flags) {
        Ok(()) if quiet => Sent::Quietly,
        Ok(()) => Sent::Directly,
        Err(_) => Sent::No,
    }
}

/// The pack of a send the interposer took (number `seq` to `dest` with `tag`, its buffer
/// `buf`) into the direct path's device staging, launched (not waited for) where [`send`]
/// would pack it first: the direct path is up and lends to `dest`, the bytes would go through
/// device staging, and the send is not one that may be written instead (blocks of at least
/// [`target::MIN_BLOCK`] bytes, or the last receive of this destination and tag offered its
/// buffer). `MPI_Sendrecv` launches it before it announces its receive, so that the kernel
/// runs while the announcement and the receive's ready message travel; [`send`] lends it.
/// `None` where there is nothing to pack ahead, or the pack failed (logged; [`send`] then
/// packs itself, or takes the byte path).
///
/// # Safety
/// As [`send`].
pub unsafe fn pack_ahead(
    op: &str,
    seq: Option<u64>,
    (dest, tag): (c_int, c_int),
    buf: *const c_void,
    taken: &Taken,
) -> Option<Staging> {
    let (Some(s), Some(_)) = (state(), seq) else {
        return None;
    };
    // A send whose blocks its receive would offer to take written (a halo code's faces have
    // the same shape both ways) packs only once the ready message says it is not written: a
    // pack on the stream would keep this rank's own receive from offering its buffer
    // ([`Engine::offer`] asks that the stream be idle).
    let writable = config::get().write && taken.1.block_len() >= target::MIN_BLOCK;
    if !lends(s, &taken.2, dest) || writable || expects_target(s, dest, tag) {
        return None;
    }
    // SAFETY: the caller's contract.
    unsafe { pack_lent(op, taken, buf) }.ok().flatten()
}

/// [`pack_ahead`] once the direct path is known to lend to the send's destination.
///
/// # Safety
/// As [`send`].
unsafe fn pack_lent(op: &str, taken: &Taken, buf: *const c_void) -> Result<Option<Staging>, ()> {
    let (_, plan, engine, method) = taken;
    if matches!(engine, Engine::Cpu) || *method != Method::Device || plan.packed_size() == 0 {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let packed = unsafe { pack_into_device(engine, plan, buf) };
    profile::mark("pack launched");
    packed.map(Some).map_err(|e| {
        log!("{op}: the pack failed, byte path: {e}");
    })
}

/// The start of a persistent send (number `seq` to `dest` with `tag`), packed into `staging`
/// (fresh staging of `engine`, the pack queued): lent where its receive's ready message comes
/// ([`await_ready`]), else given back. `recorded`: the event the loans of this start share
/// (recorded by the first, after every pack of the start was queued; see [`Engine::lend`]).
pub fn lend_started(
    op: &str,
    (dest, tag, seq): (c_int, c_int, u64),
    engine: &Engine,
    plan: &datatype_pack::StridedBlock,
    staging: Staging,
    recorded: &mut Option<Arc<Recorded>>,
) -> Result<(), Staging> {
    let Some(s) = state() else {
        return Err(staging);
    };
    let carry = matches!(engine, Engine::Cpu);
    if plan.packed_size() == 0 || !lends(s, engine, dest) {
        return Err(staging);
    }
    let k = (dest, tag, seq);
    let Some(ready) = await_ready(s, engine, plan, Some(&staging), k, carry) else {
        return Err(staging);
    };
    // The start's message of 0 bytes goes through the MPI (its request is the program's); a
    // start packs ahead, so a receive's offer of its buffer is declined.
    lend_and_note(
        s,
        op,
        engine,
        staging,
        (k, plan.packed_size()),
        recorded,
        note_flags(false, ready.target.is_some()),
    )
}

/// Looks for the ready message of message `k` (its destination, tag and number), greeting the
/// destination first where this rank has not (with `staging`'s export, or a fresh staging's):
/// waits up to [`READY_WAIT`] where the receiver announced one of the last few messages with
/// that tag, or announces to this rank and has not yet been waited for in vain with that tag.
/// Where it came, for the same packed size and the way this engine sends (`carry`): the ready
/// message (whether the receive posted no real receive, [`announce`], and the buffer it
/// offers, if any).
fn await_ready(
    s: &Mutex<State>,
    engine: &Engine,
    plan: &datatype_pack::StridedBlock,
    staging: Option<&Staging>,
    k: Key,
    carry: bool,
) -> Option<Ready> {
    let (dest, tag, seq) = k;
    let ready = profile::time(Phase::Ready, || {
        let mut st = lock(s);
        if !carry && !st.greeted.contains(&dest) {
            greet(&mut st, dest, engine, plan, staging);
        }
        drain(&mut st);
        let wait = match st.readies.get(&(dest, tag)) {
            Some(Some(last)) => last + 4 >= seq,
            Some(None) => false,
            None => st.announcing.contains(&dest) || carry,
        };
        let start = Instant::now();
        loop {
            if let Some(r) = st.ready.remove(&k) {
                break Some(r);
            }
            if !wait || start.elapsed() > READY_WAIT {
                if wait {
                    st.readies.entry((dest, tag)).or_insert(None);
                    log!(
                        "direct path: message {seq} to rank {dest} with tag {tag}: no ready message in {} us: byte path",
                        READY_WAIT.as_micros()
                    );
                }
                break None;
            }
            std::hint::spin_loop();
            drain(&mut st);
        }
    });
    if ready.as_ref().is_some_and(|r| r.landing == Landing::Bytes) {
        log!(
            "direct path: message {seq} to rank {dest} with tag {tag}: its receive asks for bytes"
        );
        return None;
    }
    let want = if carry { Landing::Carry } else { Landing::Pull };
    ready.filter(|r| r.landing == want && r.packed == plan.packed_size() && r.packed > 0)
}

/// Whether the last ready message from `dest` with `tag` offered a buffer this rank's sends
/// fit, with the write landing on here: the next send waits for its ready message before it
/// packs ([`send`], [`pack_ahead`]).
fn expects_target(s: &Mutex<State>, dest: c_int, tag: c_int) -> bool {
    config::get().write && lock(s).writes.contains(&(dest, tag))
}

/// The write landing of message `k` (`n` bytes): the send's kernel writes its buffer `buf`
/// straight into the receive buffer `target` offers, is waited for, and the note says so
/// (`quiet`: nothing follows through the MPI). `None` where there is no room for the note or
/// the write fails (logged): the caller lends instead (or sends the bytes), and the receive
/// unpacks them over whatever the write left.
///
/// # Safety
/// As [`send`]; `target` came in the ready message of message `k`.
unsafe fn write_and_note(
    s: &Mutex<State>,
    op: &str,
    taken: &Taken,
    buf: *const c_void,
    target: &Target,
    (k, n): (Key, u64),
    quiet: bool,
) -> Option<Sent> {
    let (dest, tag, seq) = k;
    let (_, plan, engine, _) = taken;
    if !lock(s).room(dest, &[WRITTEN_NOTE]) {
        return None;
    }
    // SAFETY: the caller's contract.
    if let Err(e) = unsafe { engine.write(plan, buf, dest, target) } {
        log!("{op}: message {seq} to rank {dest} with tag {tag}: not written ({e}); lent");
        return None;
    }
    let after = if quiet {
        ", nothing through the MPI"
    } else {
        ""
    };
    log!("{op}: message {seq} to rank {dest} with tag {tag}: {n} bytes written into its buffer directly{after}");
    // The room was checked above, behind the done messages owed to the peer, and only this
    // rank writes that mailbox; were the note refused all the same, the bytes go again another
    // way (the receive still waits for its note or for a message through the MPI).
    let sent = profile::time(Phase::Note, || {
        send_note(
            &mut lock(s),
            dest,
            tag,
            seq,
            &Note::Written,
            note_flags(quiet, false),
        )
    });
    profile::mark("noted");
    sent.then_some(Sent::Written(quiet))
}

/// Lends `staging` (packed, or being packed, with message `k`'s `n` bytes) and writes its note:
/// device staging is lent over CUDA IPC and kept until the receiver is done; host staging
/// (testing) has its bytes carried in the note. `recorded`: as [`Engine::lend`]. `flags`: the
/// note's ([`note_flags`]: nothing follows through the MPI; the receive's offer of its buffer
/// declined). Gives the staging back where the note would not fit its mailbox or the staging
/// cannot be lent.
fn lend_and_note(
    s: &Mutex<State>,
    op: &str,
    engine: &Engine,
    mut staging: Staging,
    (k, n): (Key, u64),
    recorded: &mut Option<Arc<Recorded>>,
    flags: u64,
) -> Result<(), Staging> {
    let (dest, tag, seq) = k;
    let carry = matches!(engine, Engine::Cpu);
    let note = if let Staging::Cpu(v) = &mut staging {
        let len = usize::try_from(n).unwrap_or(usize::MAX).min(v.len());
        if !lock(s).room(dest, &[32 + len]) {
            return Err(staging);
        }
        v.truncate(len);
        Note::Carried(std::mem::take(v))
    } else {
        // The note must reach the receiver once the staging is lent: room for it first, and
        // for the names of its two handles where they are new to the receiver.
        if !lock(s).room(dest, &[LENT_NOTE, NAME, NAME]) {
            return Err(staging);
        }
        match profile::time(Phase::Loan, || engine.lend(staging, recorded)) {
            Ok((loan, lent)) => {
                let mut st = lock(s);
                if st.lent.len() >= LENT_ROUND {
                    profile::time(Phase::Loan, || drain(&mut st));
                }
                st.lent.insert(k, loan);
                profile::mark("lent");
                Note::Lent(lent)
            }
            Err(staging) => {
                log!("{op}: the staging could not be lent: byte path");
                return Err(staging);
            }
        }
    };
    let how = if carry { "carried" } else { "lent" };
    let after = if flags & QUIET_NOTE != 0 {
        ", nothing through the MPI"
    } else {
        ""
    };
    log!("{op}: message {seq} to rank {dest} with tag {tag}: {how} {n} bytes directly{after}");
    // The room was checked above (behind the done messages owed, with the handles' names), and
    // only this rank writes that mailbox.
    let sent = profile::time(Phase::Note, || {
        send_note(&mut lock(s), dest, tag, seq, &note, flags)
    });
    debug_assert!(sent, "the note's room was checked");
    profile::mark("noted");
    Ok(())
}

/// Greets `dest` (once; again only where the greeting did not fit its mailbox): the export of
/// `packed` (device staging of `engine`), or of fresh staging for `plan`, and an event's
/// handle, so that `dest` announces its receives from this rank once they open there.
fn greet(
    st: &mut State,
    dest: c_int,
    engine: &Engine,
    plan: &datatype_pack::StridedBlock,
    packed: Option<&Staging>,
) {
    let fresh = match packed {
        Some(_) => None,
        None => engine.lend_staging_for(plan, &[]).ok(),
    };
    let sent = match packed.or(fresh.as_ref()).and_then(|x| engine.greeting(x)) {
        Some(g) => post(st, dest, HELLO_TAG, &encode_lent(&g)),
        // Nothing to greet with (host staging, no handle): never again.
        None => true,
    };
    if sent {
        st.greeted.insert(dest);
    }
}

/// Queues the pack of `plan` from `buf` into new device staging (not waited for).
///
/// # Safety
/// `buf` is the send buffer `engine` was made for, readable where `plan` says; the stream is
/// waited for before the staging is read or the call returns.
unsafe fn pack_into_device(
    engine: &Engine,
    plan: &datatype_pack::StridedBlock,
    buf: *const c_void,
) -> crate::Result<Staging> {
    engine
        .lend_staging_for(plan, &[])
        .and_then(|mut st| {
            profile::mark("staging taken");
            // SAFETY: the caller's contract; the staging is fresh.
            unsafe { engine.enqueue_pack(plan, buf, &mut st, None) }.map(|()| st)
        })
        .inspect_err(|_| {
            let _ = engine.wait();
        })
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
    use crate::channel::RecvCell;

    fn ready(packed: u64) -> Ready {
        Ready {
            packed,
            landing: Landing::Pull,
            quiet: false,
            target: None,
            channel: None,
        }
    }

    fn target() -> Target {
        Target {
            alloc: Export {
                handle: std::array::from_fn(|i| (i as u8).wrapping_mul(7)),
                offset: 1 << 20,
                len: 64 << 20,
            },
            id: 12,
            base: 0x7f10_0000_0000,
            plan: datatype_pack::StridedBlock::new(2040, 8, vec![256, 256], vec![2048, 524_288])
                .unwrap(),
        }
    }

    #[test]
    fn housekeeping_keeps_the_ready_messages_of_sends_still_to_look_for_them() {
        let mut st = State::default();
        // Message 199 to rank 1 with tag 25 was just counted (200 counted); its ready message
        // and that of message 150 may still be looked for; that of message 100 is stale.
        st.sent.insert((1, 25), 200);
        for n in [100, 150, 199] {
            st.ready.insert((1, 25, n), ready(8));
        }
        // A ready message of a destination and tag with no send counted yet stays.
        st.ready.insert((2, 7, 0), ready(8));
        st.ops = HOUSEKEEPING - 1;
        housekeeping(&mut st);
        let mut kept: Vec<Key> = st.ready.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!(kept, vec![(1, 25, 150), (1, 25, 199), (2, 7, 0)]);
        // Between housekeeping rounds nothing is dropped.
        st.sent.insert((1, 25), 1000);
        housekeeping(&mut st);
        assert_eq!(st.ready.len(), 3);
    }

    #[test]
    fn offers_a_sender_lent_past_pause_for_a_while() {
        let mut st = State::default();
        let k = (1, 7, 0);
        // A receive that offered its buffer gets a loan that declines the offer: the next
        // receives from that source and tag do not offer, then one does.
        st.offered.insert(k);
        st.declines.insert(k);
        st.notes.insert(k, Note::Lent(lent(1, 0, 4096)));
        assert!(matches!(st.take_note(&k), Some(Note::Lent(_))));
        assert!(!st.offered.contains(&k));
        for _ in 0..DECLINED_SKIP {
            assert!(!st.may_offer(1, 7));
        }
        assert!(st.may_offer(1, 7));
        // Other sources and tags offer all along.
        assert!(st.may_offer(1, 8) && st.may_offer(2, 7));
        // A written note ends a pause at once; a receive that offered nothing changes nothing.
        let k2 = (1, 7, 1);
        st.declined.insert((1, 7), 5);
        st.offered.insert(k2);
        st.notes.insert(k2, Note::Written);
        assert_eq!(st.take_note(&k2), Some(Note::Written));
        assert!(st.may_offer(1, 7));
        let k3 = (1, 7, 2);
        st.declined.insert((1, 7), 5);
        st.notes.insert(k3, Note::Lent(lent(1, 0, 4096)));
        let _ = st.take_note(&k3);
        assert_eq!(st.declined.get(&(1, 7)), Some(&5));
        // A loan that does not decline (the sender had packed before it saw the offer) starts
        // no pause.
        let k4 = (2, 7, 0);
        st.offered.insert(k4);
        st.notes.insert(k4, Note::Lent(lent(1, 0, 4096)));
        let _ = st.take_note(&k4);
        assert!(st.may_offer(2, 7));
    }

    #[test]
    fn a_probe_asks_bytes_for_the_next_receive_once() {
        let mut st = State::default();
        // Three receives from rank 1 with tag 5 counted: a probe is for the fourth (number 3).
        st.posted.insert((1, 5), 3);
        assert_eq!(probed(&st, 1, 5), Some((1, 5, 3)));
        // A probe of a source and tag never received from is for their first message.
        assert_eq!(probed(&st, 2, 5), Some((2, 5, 0)));
        // Asked once: a probe polled again asks nothing more.
        st.asked.insert((1, 5, 3));
        assert_eq!(probed(&st, 1, 5), None);
        // The receive counted, the next probe is for the next message.
        st.posted.insert((1, 5), 4);
        assert_eq!(probed(&st, 1, 5), Some((1, 5, 4)));
        // One announced already (a receive posted, then a probe for the same number) is not
        // asked for.
        st.awaited.insert((1, 5, 4));
        assert_eq!(probed(&st, 1, 5), None);
        // Housekeeping drops the asks of receives counted since (the one just posted kept).
        st.asked.insert((1, 5, 4));
        st.asked.insert((1, 5, 9));
        st.posted.insert((1, 5), 5);
        st.ops = HOUSEKEEPING - 1;
        housekeeping(&mut st);
        let mut kept: Vec<Key> = st.asked.iter().copied().collect();
        kept.sort_unstable();
        assert_eq!(kept, vec![(1, 5, 9)]);
    }

    fn lent(k: u8, offset: u64, len: u64) -> Lent {
        Lent {
            staging: Export {
                handle: std::array::from_fn(|i| i as u8 ^ k),
                offset,
                len,
            },
            event: std::array::from_fn(|i| (i as u8).wrapping_mul(3) ^ k),
        }
    }

    #[test]
    fn ready_messages_round_trip() {
        for (tag, seq, packed, landing, quiet) in [
            (7, 42, 1 << 19, Landing::Pull, false),
            (0x7fff_ffff, 0, 3, Landing::Carry, true),
            (9, 5, 64, Landing::Bytes, false),
            (3, 1, 8, Landing::Pull, true),
        ] {
            for offered in [None, Some(target())] {
                let r = Ready {
                    packed,
                    landing,
                    quiet,
                    target: offered.clone(),
                    channel: None,
                };
                let (t, n, back) = decode_ready(&encode_ready(tag, seq, &r)).unwrap();
                assert_eq!(
                    (t, n, back.packed, back.landing, back.quiet, back.target),
                    (tag, seq, packed, landing, quiet, offered)
                );
            }
        }
        // A ready message whose target is cut short is unreadable.
        let offered = Ready {
            target: Some(target()),
            ..ready(1 << 19)
        };
        let b = encode_ready(7, 42, &offered);
        assert!(decode_ready(&b[..b.len() - 1]).is_none());
        assert!(decode_ready(&b[..41]).is_none());
        assert!(decode_ready(&[1, 2, 3]).is_none());
        let r = ready(8);
        let mut bad = encode_ready(7, 42, &r);
        bad[24] = 9;
        assert!(decode_ready(&bad).is_none());
        let mut bad = encode_ready(7, 42, &r);
        bad[32] = 2;
        assert!(decode_ready(&bad).is_none());
        // A ready message without the word that says whether a real receive was posted.
        assert!(decode_ready(&encode_ready(7, 42, &r)[..32]).is_none());
    }

    #[test]
    fn ready_messages_carry_a_channel_offer_in_one_cell() {
        for armed_from in [None, Some(0), Some(41)] {
            let offer = Offer {
                name: 3,
                offset: 0x1f_ffe0,
                armed_from,
            };
            let r = Ready {
                quiet: true,
                channel: Some(offer),
                ..ready(1 << 19)
            };
            let b = encode_ready(7, 43, &r);
            assert_eq!(b.len(), crate::shm::CELL_BYTES);
            let (t, n, back) = decode_ready(&b).unwrap();
            assert_eq!(
                (t, n, back.quiet, back.channel, back.target),
                (7, 43, true, Some(offer), None)
            );
            // Cut short, or longer: unreadable.
            assert!(decode_ready(&b[..b.len() - 8]).is_none());
            let mut long = b.clone();
            long.push(0);
            assert!(decode_ready(&long).is_none());
        }
        // An offer with a target is never sent: the offer goes alone.
        let both = Ready {
            target: Some(target()),
            channel: Some(Offer {
                name: 0,
                offset: 0,
                armed_from: None,
            }),
            ..ready(8)
        };
        let (_, _, back) = decode_ready(&encode_ready(1, 2, &both)).unwrap();
        assert!(back.target.is_none() && back.channel.is_some());
    }

    fn cell() -> RecvCell {
        RecvCell {
            dev: 0x7000_0000,
            gave_up: (0, 0),
        }
    }

    #[test]
    fn a_receive_channel_knows_the_slot_of_each_message_from_its_notes() {
        let mut st = State::default();
        st.recvs.insert(
            (1, 7),
            RecvChan {
                packed: 4096,
                cell: cell(),
                export: Export {
                    handle: [5; 64],
                    offset: 64,
                    len: 32,
                },
                lent: [None, None],
                shared: None,
            },
        );
        let a = lent(1, 0, 4096);
        let b = lent(2, 0, 4096);
        let claim = |st: &mut State, seq: u64, note: Note| {
            st.notes.insert((1, 7, seq), note);
            st.take_note(&(1, 7, seq)).unwrap();
            st.recvs[&(1, 7)].lent
        };
        assert_eq!(claim(&mut st, 4, Note::Lent(a)), [Some((4, a)), None]);
        assert_eq!(
            claim(&mut st, 5, Note::Lent(b)),
            [Some((4, a)), Some((5, b))]
        );
        // Through the channel, message `k` in the slot of `k - 2`.
        assert_eq!(
            claim(&mut st, 6, Note::Channel),
            [Some((6, a)), Some((5, b))]
        );
        assert_eq!(
            claim(&mut st, 7, Note::Channel),
            [Some((6, a)), Some((7, b))]
        );
        // A channel note for a slot not known (a gap of two): nothing known of it after.
        assert_eq!(claim(&mut st, 10, Note::Channel), [None, Some((7, b))]);
        // Another way (bytes, empty): that parity's slot is not known.
        assert_eq!(claim(&mut st, 11, Note::Empty), [None, None]);
    }

    #[test]
    fn notes_round_trip() {
        // The handles of `lent(1, ..)` by the numbers its sender named them by: the event 0,
        // the staging 2 (the same as `lent(2, ..)`'s handles by 0 and 1 below).
        let one = lent(1, 0, 0);
        let named = [one.event, [9; 64], one.staging.handle];
        for quiet in [false, true] {
            for declined in [false, true] {
                let flags = note_flags(quiet, declined);
                for note in [
                    Note::Lent(lent(1, 24, 4096)),
                    Note::Carried(vec![1, 2, 3]),
                    Note::Written,
                ] {
                    let b = encode_note(5, 9, &note, flags, (2, 0));
                    assert_eq!(decode_note(&b, &named), Some((5, 9, note, flags)));
                }
            }
        }
        // A channel's note is always quiet: nothing follows it through the MPI.
        let through = encode_note(5, 9, &Note::Channel, QUIET_NOTE, (0, 0));
        assert_eq!(
            decode_note(&through, &[]),
            Some((5, 9, Note::Channel, QUIET_NOTE))
        );
        assert!(decode_note(&encode_note(5, 9, &Note::Channel, 0, (0, 0)), &[]).is_none());
        let empty = encode_note(5, 9, &Note::Empty, 0, (0, 0));
        assert_eq!(decode_note(&empty, &[]), Some((5, 9, Note::Empty, 0)));
        // An empty message always goes through the MPI: a quiet empty note is unreadable.
        assert!(decode_note(&encode_note(5, 9, &Note::Empty, QUIET_NOTE, (0, 0)), &[]).is_none());
        let carried = encode_note(5, 9, &Note::Carried(vec![1, 2]), 0, (0, 0));
        assert!(decode_note(&carried[..33], &[]).is_none());
        // A written note carries nothing after its words.
        let mut long = encode_note(5, 9, &Note::Written, QUIET_NOTE, (0, 0));
        long.push(0);
        assert!(decode_note(&long, &[]).is_none());
        // A lent note is one mailbox cell; cut, or naming a handle never named, unreadable.
        let l = Note::Lent(lent(1, 0, 1 << 20));
        let cut = encode_note(5, 9, &l, QUIET_NOTE, (2, 0));
        assert_eq!(cut.len(), crate::shm::CELL_BYTES);
        assert!(decode_note(&cut[..cut.len() - 1], &named).is_none());
        assert!(decode_note(&encode_note(5, 9, &l, 0, (0, 3)), &named).is_none());
        assert!(decode_note(&encode_note(5, 9, &l, 0, (3, 0)), &named).is_none());
    }

    #[test]
    fn done_messages_round_trip_several_at_once() {
        let keys = [(1, 7, 42), (1, -3, 0), (1, 7, 43)];
        let b = encode_done(keys.into_iter());
        assert_eq!(b.len(), 48);
        assert_eq!(decode_done(&b), Some(vec![(7, 42), (-3, 0), (7, 43)]));
        assert!(decode_done(&b[..40]).is_none());
        assert!(decode_done(&[]).is_none());
    }

    #[test]
    fn greetings_round_trip() {
        let g = lent(3, 0, 1 << 21);
        assert_eq!(decode_lent(&encode_lent(&g)), Some(g));
        assert!(decode_lent(&[0; 16]).is_none());
    }

    #[test]
    fn names_round_trip() {
        let h = lent(4, 0, 0).event;
        let mut b = 7u64.to_le_bytes().to_vec();
        b.extend_from_slice(&h);
        assert_eq!(b.len(), NAME);
        assert_eq!(decode_name(&b), Some((7, h)));
        assert!(decode_name(&b[..NAME - 1]).is_none());
        b[..8].copy_from_slice(&(NAMES_MAX as u64).to_le_bytes());
        assert!(decode_name(&b).is_none());
    }
}
