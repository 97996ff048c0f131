//! The interposer's path for one call: whether it takes the call, the staging it packs or
//! receives into, the pending work of non-blocking requests, and the unpack on completion
//! (persistent requests are built on these in [`crate::persistent`]).

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::FxHashMap;

use datatype_pack::gpu::Batch;
use datatype_pack::StridedBlock;
use mpi::ffi;

use crate::config;
use crate::direct::{self, Claim, Finish};
use crate::engine::{Engine, Lent, Staging, Waited};
use crate::log::log;
use crate::memory;
use crate::message::{bytes_type, Early, Receive, Taken, ERR_INTERN};
use crate::model::{self, Method, Shape};
use crate::profile::{self, Phase};
use crate::sync::lock;
use crate::table::RequestTable;
use crate::types::{self, Layout};

/// Runs `f`, turning a panic into `None` (pass through): nothing unwinds into the caller's C.
pub fn guarded<T>(f: impl FnOnce() -> Option<T>) -> Option<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(None)
}

/// Runs `f` for its effect, a panic ignored: nothing unwinds into the caller's C.
pub fn guard(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// Whether the real MPI takes device buffers: `COLLECTIVES_INTERPOSE_CUDA_AWARE`, else Open
/// MPI's `MPIX_Query_cuda_support()` when the MPI library has it, else no.
pub fn cuda_aware() -> bool {
    static AWARE: OnceLock<bool> = OnceLock::new();
    *AWARE.get_or_init(|| {
        if let Some(v) = config::get().cuda_aware {
            return v;
        }
        extern "C" {
            fn dlsym(handle: *mut c_void, symbol: *const std::ffi::c_char) -> *mut c_void;
        }
        // SAFETY: `dlsym` with RTLD_DEFAULT (a null handle on glibc) and a NUL-terminated name
        // only looks the symbol up.
        let f = unsafe { dlsym(std::ptr::null_mut(), c"MPIX_Query_cuda_support".as_ptr()) };
        if f.is_null() {
            return false;
        }
        // SAFETY: Open MPI's `int MPIX_Query_cuda_support(void)` (mpi-ext.h), found by name in
        // the process; it takes nothing and may be called at any time.
        let query: extern "C" fn() -> c_int = unsafe { std::mem::transmute(f) };
        query() == 1
    })
}

/// Work pending on a request of the interposer.
#[derive(Debug)]
pub enum Pending {
    /// A send: its staging must outlive the request.
    Send(Staging),
    /// A receive: unpack when it completes.
    Recv(Box<Receive>),
    /// A send lent on the direct path: its pack, which reads the program's buffer, is waited
    /// for when the request completes (MPI leaves the buffer to the send until then).
    Packing(Engine),
    /// A receive that `MPI_Request_get_status` saw complete, and unpacked then ([`settle_seen`]):
    /// its code and its status's count in bytes, for the wait or test that completes it.
    Settled(c_int, c_int),
}

fn table() -> &'static Mutex<RequestTable<Pending>> {
    static T: OnceLock<Mutex<RequestTable<Pending>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(RequestTable::default()))
}

/// Outstanding requests, read without the lock on every wait and test.
static OUTSTANDING: AtomicUsize = AtomicUsize::new(0);

/// Records the pending work of a request the real MPI just started.
pub fn remember(request: u64, work: Pending) {
    let stale = lock(table()).insert(request, work);
    if stale.is_none() {
        OUTSTANDING.fetch_add(1, Ordering::SeqCst);
    }
}

/// Whether any of `handles` is a request the interposer started (not a persistent one:
/// [`crate::persistent::any_kept`]).
pub fn any_started(handles: &[u64]) -> bool {
    OUTSTANDING.load(Ordering::SeqCst) > 0 && lock(table()).any(handles)
}
/// Takes the completed requests of the interposer among `before`/`after`.
pub fn take_completed(before: &[u64], after: &[u64], null: u64) -> Vec<(usize, Pending)> {
    let done = lock(table()).take_completed(before, after, null);
    OUTSTANDING.fetch_sub(done.len(), Ordering::SeqCst);
    done
}

/// `MPI_Request_get_status` said outstanding request `handle` is complete (its `status` just
/// written): a receive is unpacked now, since the program may read its buffer from here on, and
/// kept as [`Pending::Settled`] for the wait or test that completes it (its status then reads
/// the same); a lent send's pack is waited for. The code for the call, or `None` where
/// `handle` is not an outstanding request of the interposer.
///
/// # Safety
/// MPI initialized; `status` is writable, the request's, just written by the real MPI.
pub unsafe fn settle_seen(handle: u64, status: *mut ffi::MPI_Status) -> Option<c_int> {
    let work = {
        let mut t = lock(table());
        match t.get(handle)? {
            Pending::Recv(_) => t.remove(handle),
            &Pending::Settled(code, n) => {
                drop(t);
                // SAFETY: the caller's contract.
                unsafe { direct::set_bytes(status, u64::try_from(n).unwrap_or(0)) };
                return Some(code);
            }
            Pending::Packing(e) => {
                let e = e.clone();
                drop(t);
                if let Err(e) = e.wait() {
                    log!("MPI_Request_get_status: the wait for a direct pack failed: {e}");
                }
                return Some(0);
            }
            Pending::Send(_) => return Some(0),
        }
    };
    let Some(Pending::Recv(r)) = work else {
        return None;
    };
    // SAFETY: the receive completed with `status` (the caller's contract).
    let (code, n, _) = unsafe { settle_receive(*r, status) };
    lock(table()).insert(handle, Pending::Settled(code, n));
    Some(code)
}

/// Unpacks receive `r`, which `MPI_Request_get_status` saw complete with `status`: MPI's code
/// for it, its status's count in bytes (for the wait or test that completes it), and the
/// receive (a persistent request keeps it for its next start).
///
/// # Safety
/// MPI initialized; `status` is the receive's, just written by the real MPI; the receive's
/// buffer is still the caller's.
pub unsafe fn settle_receive(
    r: Receive,
    status: *mut ffi::MPI_Status,
) -> (c_int, c_int, Option<Receive>) {
    // SAFETY: the caller's contract.
    let Finished {
        codes, mut recvs, ..
    } = unsafe { finish_recvs(vec![(r, status.cast_const())]) };
    let code = codes.first().copied().unwrap_or(ERR_INTERN);
    let mut n: c_int = 0;
    // SAFETY: a written status; counted in bytes.
    unsafe { ffi::PMPI_Get_count(status, bytes_type(), &mut n) };
    (code, n, recvs.pop().map(|(r, _)| r))
}

/// Removes one request's entry (`MPI_Request_free`).
pub fn forget(request: u64) -> Option<Pending> {
    let p = lock(table()).remove(request);
    if p.is_some() {
        OUTSTANDING.fetch_sub(1, Ordering::SeqCst);
    }
    p
}

/// Where a buffer lives when the caller knows already: the driver's answer for the same
/// address earlier in the same call (`MPI_Sendrecv` with one buffer for both sides, as a halo
/// code's grid), `None` to ask the driver.
pub type Known = Option<Option<memory::DeviceBuffer>>;

/// What the driver said of the buffer `taken` was made for: its device allocation, or `None`
/// for host memory ([`Known`] for another side of the same call with the same buffer).
pub fn where_taken(taken: &Taken) -> Option<memory::DeviceBuffer> {
    match &taken.2 {
        Engine::Gpu(_, d) => Some(*d),
        Engine::Cpu => None,
    }
}

/// The layout and plan of `(buf, count, dt)` when the interposer takes it for `engine`, and
/// where the buffer is (`known`: as the caller was told already).
///
/// # Safety
/// MPI initialized; `dt` a datatype handle the caller passed to MPI.
unsafe fn plan_for(
    op: &'static str,
    buf: *const c_void,
    count: c_int,
    dt: ffi::MPI_Datatype,
    host_pack: bool,
    known: Known,
) -> Option<(Arc<Layout>, Arc<StridedBlock>, Option<memory::DeviceBuffer>)> {
    let cfg = config::get();
    if cfg.disabled || count <= 0 || buf.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    let layout = profile::time(Phase::Datatype, || unsafe { types::lookup(dt) })?;
    let dev = match known {
        Some(dev) => dev,
        None => profile::time(Phase::Memory, || memory::device_buffer(buf)),
    };
    if dev.is_none() && !host_pack {
        return None;
    }
    let count = u64::try_from(count).ok()?;
    let Some(plan) = profile::time(Phase::Datatype, || layout.plan(count)) else {
        log!("{op}: {count} element(s) of a decoded datatype: contiguous or not lowerable, passes through");
        return None;
    };
    if c_int::try_from(plan.packed_size()).is_err() {
        log!(
            "{op}: {} packed bytes exceed MPI's int count, passes through",
            plan.packed_size()
        );
        return None;
    }
    Some((layout, plan, dev))
}

/// Whether the interposer takes `(buf, count, dt)` for `op`, and how ([`Taken`]); `None`
/// passes the call through.
///
/// # Safety
/// As [`plan_for`].
pub(crate) unsafe fn take(
    op: &'static str,
    buf: *const c_void,
    count: c_int,
    dt: ffi::MPI_Datatype,
    host_pack: bool,
    known: Known,
) -> Option<Taken> {
    // SAFETY: the caller's contract.
    let (layout, plan, dev) = unsafe { plan_for(op, buf, count, dt, host_pack, known) }?;
    let engine = match profile::time(Phase::Engine, || Engine::for_buffer(dev)) {
        Ok(e) => e,
        Err(e) => {
            log!("{op}: passes through: {e}");
            return None;
        }
    };
    let method = profile::time(Phase::Engine, || method_for(op, &engine, &plan));
    Some((layout, plan, engine, method))
}

/// The method for a message of `plan` from `engine`'s buffer: the model's choice
/// ([`model::decide`]), which depends only on the GPU's cost table (fixed once made), the
/// settings and the message's shape, so it is kept per GPU and shape ([`decided`]) and weighed
/// again only where the log is on (which prints every decision with its estimates).
fn method_for(op: &str, engine: &Engine, plan: &StridedBlock) -> Method {
    let Some(ordinal) = engine.ordinal() else {
        return Method::OneShot;
    };
    let cfg = config::get();
    let shape = Shape {
        bytes: plan.packed_size(),
        block_len: plan.block_len(),
    };
    if !cfg.log {
        if let Some(&m) = lock(decided()).get(&(ordinal, shape)) {
            return m;
        }
    }
    let aware = cuda_aware();
    let (m, weighed) = model::decide(&engine.costs(), cfg.method, shape, aware);
    let mut kept = lock(decided());
    if kept.len() >= DECIDED_KEPT {
        kept.clear();
    }
    kept.insert((ordinal, shape), m);
    drop(kept);
    log!(
        "{op}: {} packed bytes in blocks of {} B: {m} (estimates: {}; MPI {}CUDA-aware{})",
        shape.bytes,
        shape.block_len,
        model::describe(&weighed),
        if aware { "" } else { "not " },
        if cfg.method.is_some() {
            "; method forced"
        } else {
            ""
        },
    );
    m
}

/// Methods kept per GPU and shape before the table is cleared.
const DECIDED_KEPT: usize = 256;

/// The methods decided so far, per GPU ordinal and message shape ([`method_for`]).
fn decided() -> &'static Mutex<FxHashMap<(usize, Shape), Method>> {
    static D: OnceLock<Mutex<FxHashMap<(usize, Shape), Method>>> = OnceLock::new();
    D.get_or_init(|| Mutex::new(FxHashMap::default()))
}

/// Whether the interposer takes a send (`take` with the testing mode's choice for sends);
/// [`pack_taken`] then packs it.
///
/// # Safety
/// MPI initialized; the arguments are the caller's send triple (readable, as MPI requires).
pub unsafe fn take_send(
    op: &'static str,
    buf: *const c_void,
    count: c_int,
    dt: ffi::MPI_Datatype,
) -> Option<Taken> {
    let host_pack = config::get().host_pack.send;
    // SAFETY: the caller's contract.
    unsafe { take(op, buf, count, dt, host_pack, None) }
}

/// Packs a send the interposer took into staging: the staging and its byte count, or `None`
/// to pass the call through.
///
/// # Safety
/// As [`take_send`]; `taken` came from it for this buffer.
pub unsafe fn pack_taken(
    op: &'static str,
    buf: *const c_void,
    taken: Taken,
) -> Option<(Staging, c_int)> {
    let (_, plan, engine, method) = taken;
    // SAFETY: the caller's contract; `engine` was made for this buffer.
    match unsafe { engine.pack(&plan, buf, method) } {
        Ok(s) => {
            log!(
                "{op}: packed {} bytes from a {}",
                plan.packed_size(),
                engine.describe()
            );
            Some((s, c_int::try_from(plan.packed_size()).ok()?))
        }
        Err(e) => {
            log!("{op}: passes through: {e}");
            None
        }
    }
}

/// A receive's staging and target, or `None` to pass the call through; `known`: where the
/// buffer lives, where the caller was told already ([`Known`]). `later`: a blocking receive,
/// which the direct path may serve with no staging of its own: a device buffer's staging is
/// left to be made where the bytes come through the real MPI ([`Receive::make_staging`],
/// before anything reads [`Receive::staging`]); its packer is made now all the same, so that
/// a failure there passes the call through before anything is posted.
///
/// # Safety
/// MPI initialized; the arguments are the caller's receive triple (writable, as MPI requires);
/// `known` is the driver's answer for `buf` in this call.
pub unsafe fn prepare_recv(
    op: &'static str,
    buf: *mut c_void,
    count: c_int,
    dt: ffi::MPI_Datatype,
    known: Known,
    later: bool,
) -> Option<Receive> {
    let host_pack = config::get().host_pack.recv;
    // SAFETY: the caller's contract.
    let (layout, plan, engine, method) = unsafe { take(op, buf, count, dt, host_pack, known) }?;
    let staging = match &engine {
        Engine::Gpu(g, _) if later => g.packer(&plan).map(|_| Staging::Later(method)),
        _ => engine.staging_for(&plan, method),
    };
    match staging {
        Ok(staging) => Some(Receive {
            bytes: c_int::try_from(plan.packed_size()).ok()?,
            engine,
            layout,
            count: u64::try_from(count).ok()?,
            plan,
            buf,
            staging,
            op,
            direct: None,
            early: None,
            armed: None,
        }),
        Err(e) => {
            log!("{op}: passes through: {e}");
            None
        }
    }
}

/// A zeroed status for the calls whose caller ignores theirs.
pub fn blank_status() -> ffi::MPI_Status {
    // SAFETY: MPI_Status is a plain C struct of integers, for which all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The engine of receives settled without a GPU wait.
static CPU: Engine = Engine::Cpu;

/// Unpacks a completed receive by `status` (which says how many bytes came, and whether the
/// receive was cancelled). Returns MPI's code for the completion.
///
/// # Safety
/// MPI initialized; `status` is the completed receive's status; the receive's buffer is still
/// the caller's, as MPI requires until completion.
pub unsafe fn finish_recv(r: Receive, status: *const ffi::MPI_Status) -> c_int {
    // SAFETY: the caller's contract.
    let finished = unsafe { finish_recvs(vec![(r, status)]) };
    finished.codes[0]
}

/// What [`finish_recvs`] did.
pub struct Finished {
    /// MPI's code for each completion, in order.
    pub codes: Vec<c_int>,
    /// The receives, in order (a persistent request's is kept for its next start).
    pub recvs: Vec<(Receive, *const ffi::MPI_Status)>,
    /// The GPUs whose streams were waited for, successfully: work queued on them before the
    /// call (a lent send's pack) has run.
    pub waited: Vec<usize>,
}

/// Unpacks receives completed by one call, each by its status: every unpack is queued first,
/// then each GPU is launched and waited for once ([`queue_and_wait`]), so `n` receives cost one
/// launch and one wait instead of `n` of each.
///
/// # Safety
/// As [`finish_recv`], for every pair.
pub unsafe fn finish_recvs(mut done: Vec<(Receive, *const ffi::MPI_Status)>) -> Finished {
    // The direct path's receives read their notes first ([`direct::finish`]): settled there,
    // they count as the CPU engine's (nothing to wait for on their GPU); lent bytes are
    // unpacked from the peer's staging with the other unpacks.
    let direct: Vec<Finish> = done
        .iter_mut()
        .map(|(r, status)| {
            // SAFETY: the caller's contract; a completed status is the caller's, writable.
            guarded(|| Some(unsafe { direct::finish(r, status.cast_mut()) }))
                .unwrap_or(Finish::Settled(Err(ERR_INTERN)))
        })
        .collect();
    profile::mark("notes claimed");
    let mut items: Vec<((Receive, *const ffi::MPI_Status), Finish)> =
        done.into_iter().zip(direct).collect();
    // The peers' events this completion's streams already wait for.
    let mut waited = Vec::new();
    // SAFETY: the caller's contract for each receive (`enqueue_finish`'s); the receives'
    // buffers are distinct (MPI's rule), so the unpacks of one batch write distinct bytes.
    let settled = unsafe {
        queue_and_wait(
            &mut items,
            |((r, _), d)| match d {
                Finish::Settled(_) => &CPU,
                _ => &r.engine,
            },
            |((r, status), d), batch| match d {
                Finish::Settled(result) => *result,
                // Queued before the real receive completed: waited for with the rest.
                Finish::Pulled(..) => Ok(r.plan.packed_size()),
                Finish::Bytes => enqueue_finish(r, *status, batch),
                Finish::Pull(peer, _, lent) => enqueue_pull(r, *peer, lent, batch, &mut waited),
                // The armed unpack is on the stream already ([`direct::open_channel`]).
                Finish::Channel(..) => Ok(r.plan.packed_size()),
            },
        )
    };
    let mut settled = settled;
    for (((r, _), d), s) in items.iter_mut().zip(settled.iter_mut()) {
        if let (Finish::Channel(..), Ok(_)) = (&*d, &*s) {
            // Unpacked again where the armed unpack gave up before its flag came.
            *s = guarded(|| Some(direct::settle_channel(r))).unwrap_or(Err(ERR_INTERN));
        }
        if let Finish::Pull(peer, k, _) | Finish::Pulled(peer, k) | Finish::Channel(peer, k) = d {
            // The unpack was waited for: the peer may reuse its staging.
            guard(|| direct::done(*peer, *k));
        }
    }
    profile::mark("unpacks waited, done sent");
    // A GPU item settled well only where its GPU's wait succeeded.
    let mut waited: Vec<usize> = items
        .iter()
        .zip(&settled)
        .filter(|((_, d), s)| s.is_ok() && !matches!(d, Finish::Settled(_)))
        .filter_map(|(((r, _), _), _)| r.engine.ordinal())
        .collect();
    waited.sort_unstable();
    waited.dedup();
    let done: Vec<(Receive, *const ffi::MPI_Status)> = items.into_iter().map(|(x, _)| x).collect();
    let codes = done
        .iter()
        .zip(settled)
        .map(|((r, _), s)| match s {
            Ok(0) => 0,
            Ok(bytes) => {
                log!(
                    "{}: unpacked {bytes} bytes into a {}",
                    r.op,
                    r.engine.describe()
                );
                0
            }
            Err(code) => code,
        })
        .collect();
    Finished {
        codes,
        recvs: done,
        waited,
    }
}

/// Before a wait: the receives among `rs` (the interposer's, not yet complete) whose notes
/// have come claim them ([`direct::claim_early`]), and the unpacks of those lent are queued
/// and launched (one batch per GPU), not waited for: they run while the real MPI moves the
/// wait's other messages, and the completion waits for them with its own unpacks
/// ([`Finish::Pulled`]). An unpack not queued here is queued at the completion. Returns how
/// many of `rs` were announced and still wait for their notes.
///
/// # Safety
/// MPI initialized; each receive's buffer is the program's, which MPI leaves to the receive
/// until it completes.
pub unsafe fn pull_early(rs: Vec<&mut Receive>) -> usize {
    // Receives announced whose notes have not come.
    let mut waiting = 0;
    let mut claimed: Vec<&mut Receive> = Vec::new();
    for r in rs {
        match direct::claim_early(r) {
            Claim::Claimed if matches!(r.early, Some(Early::Lent(..))) => claimed.push(r),
            Claim::Awaited => waiting += 1,
            Claim::Claimed | Claim::Left => {}
        }
    }
    if claimed.is_empty() {
        return waiting;
    }
    let mut waited = Vec::new();
    // SAFETY: the caller's contract; the receives' buffers are distinct (MPI's rule), so the
    // unpacks of one batch write distinct bytes; the peers keep their staging until told done,
    // after the completion's wait.
    let launched = unsafe {
        queue_and_launch(
            &mut claimed,
            |r| &r.engine,
            |r, batch| {
                let Some(Early::Lent(peer, _, lent, _)) = &r.early else {
                    return Err(ERR_INTERN);
                };
                r.engine
                    .enqueue_pull(&r.plan, *peer, lent, r.buf, batch, &mut waited)
                    .map_err(|e| {
                        log!(
                            "{}: the early unpack failed (again at completion): {e}",
                            r.op
                        );
                        ERR_INTERN
                    })
            },
        )
    };
    for (r, queued) in claimed.iter_mut().zip(not_waited(launched)) {
        if let (Some(Early::Lent(_, _, _, q)), Ok(())) = (&mut r.early, queued) {
            *q = true;
        }
    }
    waiting
}

/// Whether outstanding receive `handle` (the interposer's) claimed its note before completing
/// ([`direct::claim_early`]).
pub fn claimed_early(handle: u64) -> bool {
    matches!(lock(table()).get(handle), Some(Pending::Recv(r)) if r.early.is_some())
}

/// Before a wait for `handles`: [`pull_early`] for the interposer's outstanding receives among
/// them; how many still wait for their notes.
///
/// # Safety
/// As [`pull_early`].
pub unsafe fn pull_early_among(handles: &[u64]) -> usize {
    let mut t = lock(table());
    let rs = t.pick_mut(handles, |p| match p {
        Pending::Recv(r) => Some(&mut **r),
        _ => None,
    });
    // SAFETY: the caller's contract.
    unsafe { pull_early(rs) }
}

/// Queues each item's kernel work on its engine's GPU with `enqueue`, then launches and waits
/// for each GPU once ([`queue_and_launch`], then one wait per GPU). Returns, per item in order,
/// `Ok` where its work was queued and its GPU's launch and wait succeeded (the CPU engine's
/// work is done by `enqueue`), else the code: the enqueue's, or [`ERR_INTERN`] where the launch
/// or the wait failed.
///
/// # Safety
/// As [`queue_and_launch`], each queued kernel's buffers valid until this returns.
pub(crate) unsafe fn queue_and_wait<T, V>(
    items: &mut [T],
    engine: impl Fn(&T) -> &Engine,
    enqueue: impl FnMut(&mut T, Option<&mut Batch>) -> std::result::Result<V, c_int>,
) -> Vec<std::result::Result<V, c_int>> {
    // SAFETY: the caller's contract; the launches are waited for below.
    let launched = unsafe { queue_and_launch(items, &engine, enqueue) };
    profile::mark("unpacks launched");
    wait_launched(items, engine, launched)
}

/// What [`queue_and_launch`] did: per item, what its enqueue returned; per GPU with items, its
/// ordinal and whether its launch succeeded.
pub(crate) struct Launched<V> {
    queued: Vec<std::result::Result<V, c_int>>,
    ordinals: Vec<Option<usize>>,
    gpus: Vec<(usize, bool)>,
}

/// Queues each item's kernel work on its engine's GPU with `enqueue`, then launches each GPU's
/// work once, not waiting for it: the kernels of a GPU with several items are recorded into one
/// [`Batch`] (launched as one graph, where batches are on); a GPU's only item launches its
/// kernel alone, through its kept graph, which costs less host time than a batch of one.
/// `enqueue` returns what the item's work is (`Ok`) or the code it settled with when it queued
/// nothing. [`wait_launched`] waits.
///
/// # Safety
/// `enqueue`'s work for the items of one GPU may share a batch: their kernels touch distinct
/// bytes; each queued kernel's buffers stay valid until its GPU's stream is waited for.
pub(crate) unsafe fn queue_and_launch<T, V>(
    items: &mut [T],
    engine: impl Fn(&T) -> &Engine,
    mut enqueue: impl FnMut(&mut T, Option<&mut Batch>) -> std::result::Result<V, c_int>,
) -> Launched<V> {
    let ordinals: Vec<Option<usize>> = items.iter().map(|t| engine(t).ordinal()).collect();
    let several = |o: usize| ordinals.iter().filter(|&&x| x == Some(o)).count() > 1;
    // Per GPU with items: a batch for its kernels, where it has several and batches are on.
    let mut batches: Vec<(usize, Option<Batch>)> = Vec::new();
    let queued: Vec<std::result::Result<V, c_int>> = items
        .iter_mut()
        .zip(&ordinals)
        .map(|(t, ordinal)| {
            let batch = ordinal.and_then(|o| {
                let at = match batches.iter().position(|(b, _)| *b == o) {
                    Some(at) => at,
                    None => {
                        let batch = if several(o) {
                            engine(t).new_batch()
                        } else {
                            None
                        };
                        batches.push((o, batch));
                        batches.len() - 1
                    }
                };
                batches[at].1.as_mut()
            });
            guarded(|| Some(enqueue(t, batch))).unwrap_or(Err(ERR_INTERN))
        })
        .collect();
    // Launch each GPU's batch, whatever happened before (a failed enqueue may have queued a
    // copy); a failed launch fails that GPU's work.
    let gpus = batches
        .into_iter()
        .map(|(ordinal, batch)| {
            let launched = match batch
                .map(|b| guarded(|| Some(profile::time(Phase::Launch, || b.launch()))))
            {
                None | Some(Some(Ok(()))) => true,
                Some(Some(Err(e))) => {
                    log!("the launch of the kernels on device {ordinal} failed: {e}");
                    false
                }
                Some(None) => false,
            };
            (ordinal, launched)
        })
        .collect();
    Launched {
        queued,
        ordinals,
        gpus,
    }
}

/// Waits once for each GPU that [`queue_and_launch`] launched work on (`items` as given
/// there), whatever happened before; returns, per item in order, `Ok` where its work was
/// queued and its GPU's launch and wait succeeded, else the code.
pub(crate) fn wait_launched<T, V>(
    items: &[T],
    engine: impl Fn(&T) -> &Engine,
    launched: Launched<V>,
) -> Vec<std::result::Result<V, c_int>> {
    let Launched {
        queued,
        ordinals,
        gpus,
    } = launched;
    let waited: Vec<(usize, bool)> = gpus
        .into_iter()
        .filter_map(|(ordinal, launched)| {
            let at = ordinals.iter().position(|&o| o == Some(ordinal))?;
            let ok = match guarded(|| Some(engine(&items[at]).wait())) {
                Some(Ok(())) => launched,
                Some(Err(e)) => {
                    log!("the wait on device {ordinal} failed: {e}");
                    false
                }
                None => false,
            };
            Some((ordinal, ok))
        })
        .collect();
    settle(queued, &ordinals, |o| {
        waited.iter().any(|&(w, ok)| w == o && ok)
    })
}

/// The launches of [`queue_and_launch`], not waited for: per item in order, `Ok` where its work
/// was queued and its GPU's launch succeeded, else the code.
pub(crate) fn not_waited<V>(launched: Launched<V>) -> Vec<std::result::Result<V, c_int>> {
    let Launched {
        queued,
        ordinals,
        gpus,
    } = launched;
    settle(queued, &ordinals, |o| {
        gpus.iter().any(|&(g, ok)| g == o && ok)
    })
}

/// Per item: its enqueue's result where its GPU (if any) went well (`ok`), else the code.
fn settle<V>(
    queued: Vec<std::result::Result<V, c_int>>,
    ordinals: &[Option<usize>],
    ok: impl Fn(usize) -> bool,
) -> Vec<std::result::Result<V, c_int>> {
    queued
        .into_iter()
        .zip(ordinals)
        .map(|(q, ordinal)| match q {
            Ok(v) if ordinal.map_or(true, &ok) => Ok(v),
            Ok(_) => Err(ERR_INTERN),
            Err(code) => Err(code),
        })
        .collect()
}

/// Queues the unpack of a receive whose bytes wait in rank `peer`'s lent staging
/// ([`Engine::enqueue_pull`]; `waited`: the events the streams already wait for in this
/// completion): the packed size, or [`ERR_INTERN`] where it cannot (the bytes are nowhere
/// else).
///
/// # Safety
/// As [`finish_recv`].
unsafe fn enqueue_pull(
    r: &mut Receive,
    peer: c_int,
    lent: &Lent,
    batch: Option<&mut Batch>,
    waited: &mut Vec<Waited>,
) -> std::result::Result<u64, c_int> {
    // SAFETY: the caller's contract: the buffer is the caller's receive buffer, `lent` the
    // peer's note for this receive; the stream is waited for before the receive completes.
    match unsafe {
        r.engine
            .enqueue_pull(&r.plan, peer, lent, r.buf, batch, waited)
    } {
        Ok(()) => Ok(r.plan.packed_size()),
        Err(e) => {
            log!("{}: the direct unpack failed: {e}", r.op);
            Err(ERR_INTERN)
        }
    }
}

/// Reads a completed receive's status and queues its unpack (its kernel into `batch`, where
/// given): the bytes queued, or the completion's code when there is nothing to queue
/// (cancelled, no plan, a failed enqueue).
///
/// # Safety
/// As [`finish_recv`]; `status` is writable where the receive was announced.
unsafe fn enqueue_finish(
    r: &mut Receive,
    status: *const ffi::MPI_Status,
    batch: Option<&mut Batch>,
) -> std::result::Result<u64, c_int> {
    let op = r.op;
    let mut cancelled: c_int = 0;
    // SAFETY: `status` is a completed request's status.
    unsafe { ffi::PMPI_Test_cancelled(status, &mut cancelled) };
    if cancelled != 0 {
        log!("{op}: cancelled, nothing to unpack");
        return Err(0);
    }
    let mut got: c_int = 0;
    // SAFETY: as above; counted in bytes.
    unsafe { ffi::PMPI_Get_count(status, bytes_type(), &mut got) };
    let got = u64::try_from(got).unwrap_or(0);
    let elem = r.layout.element_size();
    let n = got.checked_div(elem).unwrap_or(0).min(r.count);
    if got % elem.max(1) != 0 {
        log!("{op}: {got} bytes are not whole elements of {elem}; unpacking {n} whole");
    }
    if n == 0 {
        // Nothing came (an empty message, or the empty status of a request that never ran).
        return Ok(0);
    }
    let plan = if n == r.count {
        Some(r.plan.clone())
    } else {
        r.layout.raw_plan(n).map(Arc::new)
    };
    let Some(plan) = plan else {
        log!("{op}: no plan for {n} element(s) received");
        return Err(ERR_INTERN);
    };
    // SAFETY: the staging came from `staging_for` of this engine with the full plan, and
    // `plan` is no larger; the buffer is the caller's receive buffer; the staging lives until
    // the wait in `finish_recvs`.
    match unsafe { r.engine.enqueue_unpack(&plan, &mut r.staging, r.buf, batch) } {
        Ok(()) => Ok(plan.packed_size()),
        Err(e) => {
            log!("{op}: unpack failed after the bytes arrived: {e}");
            Err(ERR_INTERN)
        }
    }
}
