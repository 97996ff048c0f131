//! The MPI symbols the library defines. Each one either takes the call on the interposer's path
//! or hands it, unchanged, to the real MPI through its profiling interface (`PMPI_*`).
//!
//! Every function here has the C prototype of `mpi.h`; its safety contract is MPI's own for
//! that call (valid handles, buffers as large as the arguments say, MPI initialized).
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpi::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Request, MPI_Status};

use crate::config;
use crate::direct::{self, Arrival, Sent};
use crate::engine::{self, Engine};
use crate::handle::key;
use crate::log::{self, log};
use crate::memory::{self, DeviceBuffer};
use crate::message::{self, bytes_type, Receive, Taken};
use crate::path::{
    self, any_started, blank_status, finish_recv, finish_recvs, forget, guard, guarded, pack_taken,
    prepare_recv, remember, take_completed, take_send, where_taken, Pending,
};
use crate::persistent::{self, prepare_send_init, Persistent};
use crate::profile::{self, Phase};
use crate::progress;
use crate::table::status_slot_of_some;
use crate::types;

/// Whether any of `handles` is the interposer's: a request it started or a persistent one.
fn any_ours(handles: &[u64]) -> bool {
    any_started(handles) || persistent::any_kept(handles)
}

fn status_ignore() -> *mut MPI_Status {
    // SAFETY: reading an immutable constant of the rsmpi shim.
    unsafe { ffi::RSMPI_STATUS_IGNORE }
}

fn statuses_ignore() -> *mut MPI_Status {
    // SAFETY: reading an immutable constant of the rsmpi shim.
    unsafe { ffi::RSMPI_STATUSES_IGNORE }
}

fn null_request() -> u64 {
    // SAFETY: reading an immutable constant of the rsmpi shim.
    key(unsafe { ffi::RSMPI_REQUEST_NULL })
}

/// Before a wait for `handles`: the unpacks of the interposer's receives among them whose bytes
/// already wait in a peer's lent staging are queued now ([`path::pull_early`]), to run while the
/// real MPI moves the rest. Whether some of those receives still wait for their notes.
///
/// # Safety
/// MPI initialized; `handles` are the requests the caller waits for.
unsafe fn pull_early(handles: &[u64]) -> bool {
    if !direct::on() {
        return false;
    }
    guarded(|| {
        // SAFETY: the caller's contract: the receives are not complete, their buffers theirs.
        let waiting = unsafe { path::pull_early_among(handles) + persistent::pull_early(handles) };
        Some(waiting > 0)
    })
    .unwrap_or(false)
}

/// How long [`wait_pulling`] tests at most before it waits: notes come within microseconds of
/// their messages' sends, and the real MPI's own wait may block where a test loop would spin.
const NOTE_POLL: Duration = Duration::from_micros(500);

/// `PMPI_Waitall` on the caller's `n` requests at `reqs` (statuses into `st`), where
/// `waiting`: while some of the interposer's receives among `handles` wait for their notes (for
/// up to [`NOTE_POLL`]), the requests are tested instead, and each note that comes has its
/// unpack queued at once ([`pull_early`]), to run while the real MPI moves the rest; then the
/// wait. The same completion as one `PMPI_Waitall` (`PMPI_Testall` completes all or none).
///
/// # Safety
/// MPI's contract for `MPI_Waitall` of those requests; `handles` are their keys as the caller
/// gave them.
unsafe fn wait_pulling(
    n: c_int,
    reqs: *mut MPI_Request,
    st: *mut MPI_Status,
    handles: &[u64],
    mut waiting: bool,
) -> c_int {
    let start = Instant::now();
    while waiting && start.elapsed() < NOTE_POLL {
        let mut flag: c_int = 0;
        // SAFETY: the caller's contract.
        let rc = unsafe { ffi::PMPI_Testall(n, reqs, &mut flag, st) };
        if rc != 0 || flag != 0 {
            return rc;
        }
        // SAFETY: the requests are not complete (the test said so); the caller's contract.
        waiting = unsafe { pull_early(handles) };
    }
    // SAFETY: the caller's contract.
    unsafe { ffi::PMPI_Waitall(n, reqs, st) }
}

/// Where the direct path came up: the communicator of [`progress::poke`], which a lending start
/// uses.
///
/// # Safety
/// MPI initialized, after [`direct::init`].
unsafe fn init_progress() {
    if direct::on() {
        // SAFETY: the caller's contract.
        unsafe { progress::init() };
    }
}

/// `MPI_Init`: the real call, then the direct path's set-up ([`direct::init`], [`init_progress`]).
///
/// # Safety
/// MPI's contract for `MPI_Init`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init(
    argc: *mut c_int,
    argv: *mut *mut *mut std::ffi::c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    let rc = unsafe { ffi::PMPI_Init(argc, argv) };
    if rc == 0 {
        // SAFETY: MPI was just initialized, on every rank.
        let single = unsafe { ffi::RSMPI_THREAD_SINGLE };
        // SAFETY: as above.
        guard(|| unsafe { direct::init(single) });
        // SAFETY: as above.
        guard(|| unsafe { init_progress() });
    }
    rc
}

/// `MPI_Init_thread`: the real call, then the direct path's set-up at the level provided.
///
/// # Safety
/// MPI's contract for `MPI_Init_thread`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut std::ffi::c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    let rc = unsafe { ffi::PMPI_Init_thread(argc, argv, required, provided) };
    if rc == 0 && !provided.is_null() {
        // SAFETY: the real MPI wrote the level.
        let level = unsafe { *provided };
        // SAFETY: MPI was just initialized, on every rank.
        guard(|| unsafe { direct::init(level) });
        // SAFETY: as above.
        guard(|| unsafe { init_progress() });
    }
    rc
}

/// `MPI_Finalize`: with the profile on, prints this rank's table first; keeps staging still
/// lent ([`direct::finalize`]) and frees the probing communicator ([`progress::finalize`]); then
/// the real call.
///
/// # Safety
/// MPI's contract for `MPI_Finalize`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    if profile::on() {
        let _ = guarded(|| {
            let notes: Vec<String> = engine::waits()
                .into_iter()
                .chain(engine::graphs())
                .collect();
            profile::report(log::world_rank(), &notes);
            Some(())
        });
    }
    guard(direct::finalize);
    // SAFETY: MPI initialized and not finalized (the caller's contract).
    guard(|| unsafe { progress::finalize() });
    // SAFETY: the caller's contract.
    unsafe { ffi::PMPI_Finalize() }
}

/// `MPI_Type_commit`: commits through the real MPI, then decodes the type into the cache.
///
/// # Safety
/// MPI's contract for `MPI_Type_commit`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut MPI_Datatype) -> c_int {
    // SAFETY: the caller's contract.
    let rc = unsafe { ffi::PMPI_Type_commit(datatype) };
    if rc == 0 && !datatype.is_null() && !config::get().disabled {
        // SAFETY: the handle was just committed by the real MPI.
        let dt = unsafe { *datatype };
        let _ = guarded(|| {
            // SAFETY: MPI is initialized (the commit succeeded) and `dt` is live.
            let what = unsafe { types::on_commit(dt) };
            log!("MPI_Type_commit: {what}");
            Some(())
        });
    }
    rc
}

/// `MPI_Type_free`: drops the cache entry, then frees through the real MPI.
///
/// # Safety
/// MPI's contract for `MPI_Type_free`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut MPI_Datatype) -> c_int {
    if !datatype.is_null() {
        // SAFETY: the caller passes a valid pointer to a handle.
        let dt = unsafe { *datatype };
        let _ = guarded(|| Some(types::on_free(dt)));
    }
    // SAFETY: the caller's contract.
    unsafe { ffi::PMPI_Type_free(datatype) }
}

/// `MPI_Pack_size`: the real MPI's bound, which holds for the interposer's packing too (it
/// packs exactly the bytes `MPI_Pack` packs, in the same order).
///
/// # Safety
/// MPI's contract for `MPI_Pack_size`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_size(
    incount: c_int,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
    size: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { ffi::PMPI_Pack_size(incount, datatype, comm, size) }
}

/// What `MPI_Pack` and `MPI_Unpack` share before they move bytes: the plan of the elements in
/// the user's buffer, the bytes it packs to, where the packed buffer stands at `*position`, how
/// many bytes it has from there and whether that is device memory, and the engine for the
/// user's buffer.
struct PackWindow {
    plan: Arc<datatype_pack::StridedBlock>,
    bytes: c_int,
    at: *mut c_void,
    left: u64,
    at_dev: Option<DeviceBuffer>,
    engine: Engine,
}

/// The [`PackWindow`] of `count` elements of `datatype` in `data`, packed in `packed` (`size`
/// bytes) from `*position`; `None` where the call passes through: the interposer off, a null
/// pointer, no elements, a type the cache does not hold or cannot plan, or a host `data` buffer
/// unless `host` (the configuration's forced byte path for this direction) says to take it.
///
/// # Safety
/// MPI's contract for `MPI_Pack`/`MPI_Unpack`: `position` points to a position within `packed`'s
/// `size` bytes, `datatype` is live.
unsafe fn pack_window(
    data: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    packed: *const c_void,
    size: c_int,
    position: *mut c_int,
    host: impl FnOnce(&config::Config) -> bool,
) -> Option<PackWindow> {
    let cfg = config::get();
    if cfg.disabled || position.is_null() || packed.is_null() || count <= 0 {
        return None;
    }
    // SAFETY: the caller passes a valid position.
    let pos = unsafe { *position };
    let left = u64::try_from(size.checked_sub(pos)?).ok()?;
    // SAFETY: MPI's contract: a live datatype.
    let layout = profile::time(Phase::Datatype, || unsafe { types::lookup(datatype) })?;
    let dev = profile::time(Phase::Memory, || memory::device_buffer(data));
    if dev.is_none() && !host(cfg) {
        return None;
    }
    let count = u64::try_from(count).ok()?;
    let plan = profile::time(Phase::Datatype, || layout.plan(count))?;
    let bytes = c_int::try_from(plan.packed_size()).ok()?;
    // SAFETY: `pos` is within `size` (`left` is not negative).
    let at = unsafe { packed.cast::<u8>().add(usize::try_from(pos).ok()?) }
        .cast::<c_void>()
        .cast_mut();
    let at_dev = profile::time(Phase::Memory, || memory::device_buffer(at));
    let left = match at_dev {
        Some(d) => left.min(d.len),
        None => left,
    };
    let engine = profile::time(Phase::Engine, || Engine::for_buffer(dev)).ok()?;
    Some(PackWindow {
        plan,
        bytes,
        at,
        left,
        at_dev,
        engine,
    })
}

/// The end of `MPI_Pack`/`MPI_Unpack`: `*position` advanced by the bytes the interposer moved,
/// or the real MPI's call where it passed through.
///
/// # Safety
/// `position` is the valid pointer the interposer read when `moved` is `Some`.
unsafe fn advance(
    moved: Option<c_int>,
    position: *mut c_int,
    real: impl FnOnce() -> c_int,
) -> c_int {
    match moved {
        Some(n) => {
            // SAFETY: the caller's contract; the call advances it by the bytes moved.
            unsafe { *position += n };
            0
        }
        None => real(),
    }
}

/// `MPI_Pack`: device input buffers of decoded types are packed on the GPU.
///
/// # Safety
/// MPI's contract for `MPI_Pack`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: c_int,
    position: *mut c_int,
    comm: MPI_Comm,
) -> c_int {
    let mut scope = profile::scope("MPI_Pack");
    let done = guarded(|| {
        // SAFETY: MPI's contract for MPI_Pack's arguments.
        let w = unsafe {
            pack_window(inbuf, incount, datatype, outbuf, outsize, position, |c| {
                c.host_pack.send
            })
        }?;
        // SAFETY: MPI's contract for the input triple; `w.at` has `w.left` writable bytes, and
        // `w.at_dev` is the driver's answer for it.
        match unsafe { w.engine.pack_to(&w.plan, inbuf, w.at, w.left, w.at_dev) } {
            Ok(()) => {
                log!(
                    "MPI_Pack: {} bytes packed from a {}",
                    w.bytes,
                    w.engine.describe()
                );
                Some(w.bytes)
            }
            Err(e) => {
                log!("MPI_Pack: passes through: {e}");
                None
            }
        }
    });
    if done.is_some() {
        scope.taken();
    }
    // SAFETY: `position` was read when `done` is `Some`; otherwise the caller's contract.
    unsafe {
        advance(done, position, || {
            ffi::PMPI_Pack(inbuf, incount, datatype, outbuf, outsize, position, comm)
        })
    }
}

/// `MPI_Unpack`: device output buffers of decoded types are unpacked on the GPU.
///
/// # Safety
/// MPI's contract for `MPI_Unpack`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    let mut scope = profile::scope("MPI_Unpack");
    let done = guarded(|| {
        // SAFETY: MPI's contract for MPI_Unpack's arguments.
        let w = unsafe {
            pack_window(outbuf, outcount, datatype, inbuf, insize, position, |c| {
                c.host_pack.recv
            })
        }?;
        // SAFETY: MPI's contract for the output triple; `w.at` has `w.left` readable bytes, and
        // `w.at_dev` is the driver's answer for it.
        match unsafe {
            w.engine
                .unpack_from(&w.plan, w.at, w.left, w.at_dev, outbuf)
        } {
            Ok(()) => {
                log!(
                    "MPI_Unpack: {} bytes unpacked into a {}",
                    w.bytes,
                    w.engine.describe()
                );
                Some(w.bytes)
            }
            Err(e) => {
                log!("MPI_Unpack: passes through: {e}");
                None
            }
        }
    });
    if done.is_some() {
        scope.taken();
    }
    // SAFETY: as in MPI_Pack.
    unsafe {
        advance(done, position, || {
            ffi::PMPI_Unpack(inbuf, insize, position, outbuf, outcount, datatype, comm)
        })
    }
}

/// `MPI_Send`.
///
/// # Safety
/// MPI's contract for `MPI_Send`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Send(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    let mut scope = profile::scope("MPI_Send");
    // SAFETY: MPI's contract for the send.
    let seq = guarded(|| unsafe { direct::sent(comm, dest, tag, count, datatype) });
    // SAFETY: as above.
    let Some(taken) = guarded(|| unsafe { take_send("MPI_Send", buf, count, datatype) }) else {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Send(buf, count, datatype, dest, tag, comm) };
    };
    scope.taken();
    // SAFETY: as above.
    let packed =
        match unsafe { send_directly("MPI_Send", seq, (dest, tag), buf, &taken, true, None) } {
            Sent::Quietly => {
                packed_before_return("MPI_Send", &taken.2);
                return 0;
            }
            Sent::Written(true) => return 0,
            sent @ (Sent::Directly | Sent::Written(false)) => {
                // SAFETY: a message of 0 bytes.
                let rc = profile::time(Phase::Mpi, || unsafe {
                    ffi::PMPI_Send(direct::marker(), 0, bytes_type(), dest, tag, comm)
                });
                if matches!(sent, Sent::Directly) {
                    packed_before_return("MPI_Send", &taken.2);
                }
                return rc;
            }
            // SAFETY: as above.
            Sent::No => guarded(|| unsafe { pack_taken("MPI_Send", buf, taken) }),
        };
    match packed {
        // SAFETY: the staging holds `n` packed bytes until the blocking send returns.
        Some((mut s, n)) => profile::time(Phase::Mpi, || unsafe {
            ffi::PMPI_Send(s.mpi_ptr(), n, bytes_type(), dest, tag, comm)
        }),
        // SAFETY: the caller's contract.
        None => unsafe { ffi::PMPI_Send(buf, count, datatype, dest, tag, comm) },
    }
}

/// A send the interposer took, to `dest` with `tag`, on the direct path where it can go
/// ([`direct::send`]; `quiet`: a blocking send, which may send nothing through the MPI);
/// [`Sent::No`] where anything in it failed.
///
/// # Safety
/// MPI initialized; `buf` is the caller's send buffer, `taken` its plan.
unsafe fn send_directly(
    op: &str,
    seq: Option<u64>,
    to: (c_int, c_int),
    buf: *const c_void,
    taken: &Taken,
    quiet: bool,
    ahead: Option<direct::Ahead>,
) -> Sent {
    if seq.is_none() {
        return Sent::No;
    }
    // SAFETY: the caller's contract.
    guarded(|| Some(unsafe { direct::send(op, seq, to, buf, taken, quiet, ahead) }))
        .unwrap_or(Sent::No)
}

/// After a send went by the direct path and its message of 0 bytes was handed to the MPI:
/// waits for the pack, which read the program's buffer, before the call returns.
fn packed_before_return(op: &str, engine: &Engine) {
    if let Err(e) = engine.wait() {
        log!("{op}: the wait for the direct path's pack failed: {e}");
    }
}

/// `MPI_Isend`.
///
/// # Safety
/// MPI's contract for `MPI_Isend`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Isend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    let mut scope = profile::scope("MPI_Isend");
    // SAFETY: MPI's contract for the send.
    let seq = guarded(|| unsafe { direct::sent(comm, dest, tag, count, datatype) });
    // SAFETY: as above.
    let Some(taken) = guarded(|| unsafe { take_send("MPI_Isend", buf, count, datatype) }) else {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Isend(buf, count, datatype, dest, tag, comm, request) };
    };
    scope.taken();
    // SAFETY: as above.
    let packed =
        match unsafe { send_directly("MPI_Isend", seq, (dest, tag), buf, &taken, false, None) } {
            // Never quietly (not asked for): the program's request is the real MPI's.
            sent @ (Sent::Directly | Sent::Quietly | Sent::Written(_)) => {
                // SAFETY: a message of 0 bytes; the request is the program's, as for any send.
                let rc = profile::time(Phase::Mpi, || unsafe {
                    ffi::PMPI_Isend(direct::marker(), 0, bytes_type(), dest, tag, comm, request)
                });
                // A write was waited for already: nothing of the interposer's is left to wait
                // for when the request completes.
                if matches!(sent, Sent::Written(_)) {
                    return rc;
                }
                if rc == 0 {
                    // SAFETY: the real MPI wrote the new request's handle.
                    remember(key(unsafe { *request }), Pending::Packing(taken.2));
                } else {
                    packed_before_return("MPI_Isend", &taken.2);
                }
                return rc;
            }
            // SAFETY: as above.
            Sent::No => guarded(|| unsafe { pack_taken("MPI_Isend", buf, taken) }),
        };
    match packed {
        Some((mut s, n)) => {
            // SAFETY: the staging is kept in the request table until the request completes.
            let rc = profile::time(Phase::Mpi, || unsafe {
                ffi::PMPI_Isend(s.mpi_ptr(), n, bytes_type(), dest, tag, comm, request)
            });
            if rc == 0 {
                // SAFETY: the real MPI wrote the new request's handle.
                remember(key(unsafe { *request }), Pending::Send(s));
            }
            rc
        }
        // SAFETY: the caller's contract.
        None => unsafe { ffi::PMPI_Isend(buf, count, datatype, dest, tag, comm, request) },
    }
}

/// `MPI_Recv`. With the direct path up, a receive the interposer takes is announced quietly
/// ([`direct::announce`]) and its real receive made only where its message comes through the
/// MPI ([`receive_blocking`]).
///
/// # Safety
/// MPI's contract for `MPI_Recv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    let mut scope = profile::scope("MPI_Recv");
    let seq = guarded(|| direct::posted(comm, source, tag));
    // SAFETY: MPI's contract for the receive triple.
    let Some(mut r) =
        guarded(|| unsafe { prepare_recv("MPI_Recv", buf, count, datatype, None, true) })
    else {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Recv(buf, count, datatype, source, tag, comm, status) };
    };
    scope.taken();
    let mut own = blank_status();
    let st = status_or(status, &mut own);
    // Announced only where the direct path numbered it (`seq`).
    // SAFETY: MPI initialized; the receive completes below.
    guard(|| unsafe { direct::announce(&mut r, source, tag, seq, true) });
    // SAFETY: `st` is a valid status; nothing else is received meanwhile.
    let rc = unsafe { receive_blocking(&mut r, source, tag, comm, st) };
    if rc != 0 {
        return rc;
    }
    // SAFETY: the receive completed with status `st`; the buffer is the caller's.
    unsafe { finish_recv(r, st) }
}

/// The real side of a blocking receive the interposer took from `source` with `tag` on `comm`,
/// once [`direct::announce`] was asked to announce it quietly: announced, it waits for its
/// message ([`direct::arrival`]) and receives it for real only where it comes through the MPI
/// (else `status` is made to say so, [`direct::noted_status`]); not announced, it receives it
/// for real at once. MPI's code.
///
/// # Safety
/// MPI initialized; `r`'s staging holds `r.bytes` bytes; `status` is writable; no other
/// receive is posted by this process until this returns.
unsafe fn receive_blocking(
    r: &mut Receive,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    let how = match r.direct {
        Some(_) => profile::time(Phase::Note, || {
            // SAFETY: the caller's contract.
            guarded(|| Some(unsafe { direct::arrival(r, comm) }))
        })
        .unwrap_or(Ok(Arrival::Mpi)),
        None => Ok(Arrival::Mpi),
    };
    match how {
        Ok(Arrival::Noted) => {
            // SAFETY: the caller's contract.
            unsafe { direct::noted_status(status, source, tag) };
            0
        }
        Ok(Arrival::Mpi) => {
            if let Err(e) = r.make_staging() {
                log!("{}: no staging for the bytes that came: {e}", r.op);
                return message::ERR_INTERN;
            }
            // SAFETY: the staging holds `r.bytes` bytes; `status` is valid.
            profile::time(Phase::Mpi, || unsafe {
                ffi::PMPI_Recv(
                    r.staging.mpi_ptr(),
                    r.bytes,
                    bytes_type(),
                    source,
                    tag,
                    comm,
                    status,
                )
            })
        }
        Err(rc) => rc,
    }
}

fn null_request_handle() -> MPI_Request {
    // SAFETY: reading an immutable constant of the rsmpi shim.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

/// `MPI_Irecv`.
///
/// # Safety
/// MPI's contract for `MPI_Irecv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    let mut scope = profile::scope("MPI_Irecv");
    let seq = guarded(|| direct::posted(comm, source, tag));
    // SAFETY: MPI's contract for the receive triple.
    let Some(mut r) =
        guarded(|| unsafe { prepare_recv("MPI_Irecv", buf, count, datatype, None, false) })
    else {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Irecv(buf, count, datatype, source, tag, comm, request) };
    };
    scope.taken();
    // SAFETY: the staging is kept in the request table until the request completes.
    let rc = profile::time(Phase::Mpi, || unsafe {
        ffi::PMPI_Irecv(
            r.staging.mpi_ptr(),
            r.bytes,
            bytes_type(),
            source,
            tag,
            comm,
            request,
        )
    });
    if rc == 0 {
        // SAFETY: MPI initialized; the real receive is posted.
        guard(|| unsafe { direct::announce(&mut r, source, tag, seq, false) });
        // SAFETY: the real MPI wrote the new request's handle.
        remember(key(unsafe { *request }), Pending::Recv(Box::new(r)));
    }
    rc
}

/// `MPI_Sendrecv`. Each side is taken or not on its own; with the direct path up on this
/// communicator the receive is announced quietly first (or, not announced, posted), then the
/// send made (directly where it can, and then, to a receive announced quietly, with nothing
/// through the MPI), then both completed ([`receive_blocking`]).
///
/// # Safety
/// MPI's contract for `MPI_Sendrecv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    let mut scope = profile::scope("MPI_Sendrecv");
    // SAFETY: MPI's contract for the send.
    let sseq = guarded(|| unsafe { direct::sent(comm, dest, sendtag, sendcount, sendtype) });
    let rseq = guarded(|| direct::posted(comm, source, recvtag));
    profile::mark("counted");
    // SAFETY: MPI's contract for the send triple.
    let send = guarded(|| unsafe { take_send("MPI_Sendrecv", sendbuf, sendcount, sendtype) });
    profile::mark("send taken");
    // Where both sides have channels, the send packs into its slot in the channel's launch
    // below, with the receive's armed unpack.
    let channel = send.is_some()
        && guarded(|| {
            Some(direct::may_open(
                (sseq, dest, sendtag),
                (rseq, source, recvtag),
            ))
        })
        .unwrap_or(false);
    // A send the direct path may lend has its pack launched first: the kernel runs while the
    // receive is prepared and announced and the peer's ready message comes.
    let pack_ahead = |t: &Taken| {
        // SAFETY: MPI's contract for the send; the stream is waited for before the return.
        guarded(|| unsafe { direct::pack_ahead("MPI_Sendrecv", sseq, (dest, sendtag), sendbuf, t) })
    };
    let mut ahead = send.as_ref().filter(|_| !channel).and_then(pack_ahead);
    // One buffer for both sides (a halo code's grid): the driver was asked once.
    let known = send
        .as_ref()
        .filter(|_| recvbuf.cast_const() == sendbuf)
        .map(where_taken);
    // SAFETY: MPI's contract for the receive triple; `known` is the driver's answer for the
    // same address in this call.
    let mut recv = guarded(|| unsafe {
        prepare_recv("MPI_Sendrecv", recvbuf, recvcount, recvtype, known, true)
    });
    profile::mark("receive prepared");
    let mut slot = match (&send, &mut recv) {
        (Some(t), Some(r)) if channel => guarded(|| {
            // SAFETY: MPI's contract for both sides; the receive completes in this call.
            unsafe { direct::open_channel((sseq, dest, sendtag), t, (rseq, source, recvtag), r) }
        }),
        _ => None,
    };
    if channel && slot.is_none() {
        ahead = send.as_ref().and_then(pack_ahead);
    }
    if send.is_none() && recv.is_none() {
        // SAFETY: the caller's contract.
        return unsafe {
            ffi::PMPI_Sendrecv(
                sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                recvtag, comm, status,
            )
        };
    }
    scope.taken();
    let mut own = blank_status();
    let st = status_or(status, &mut own);
    // The receive side as the real MPI takes it: the staging (made now, where it was left for
    // later) or, where none can be made, the caller's triple (the receive passes through).
    let real_side = |recv: &mut Option<Receive>| {
        if let Some(r) = recv {
            match r.make_staging() {
                Ok(()) => return (r.staging.mpi_ptr(), r.bytes, bytes_type()),
                Err(e) => log!("MPI_Sendrecv: the receive passes through: {e}"),
            }
        }
        *recv = None;
        (recvbuf, recvcount, recvtype)
    };
    // The engine of a send that went by the direct path: its pack is waited for before the
    // return.
    let mut lent: Option<Engine> = None;
    // The call's code, and whether the receive completed (its bytes are to be unpacked even
    // where the send failed).
    let (rc, received) = if sseq.is_none() && rseq.is_none() {
        let (rb, rcount, rt) = real_side(&mut recv);
        // SAFETY: MPI's contract for the send triple.
        let mut packed =
            send.and_then(|t| guarded(|| unsafe { pack_taken("MPI_Sendrecv", sendbuf, t) }));
        let (sb, sc, st_) = match &mut packed {
            Some((s, n)) => (s.mpi_ptr().cast_const(), *n, bytes_type()),
            None => (sendbuf, sendcount, sendtype),
        };
        // SAFETY: each side is the caller's triple or a staging buffer of the stated bytes,
        // alive until the blocking call returns.
        let rc = profile::time(Phase::Mpi, || unsafe {
            ffi::PMPI_Sendrecv(
                sb, sc, st_, dest, sendtag, rb, rcount, rt, source, recvtag, comm, st,
            )
        });
        (rc, rc == 0)
    } else {
        // The receive is announced first, quietly: its real receive is made only where its
        // message comes through the MPI ([`receive_blocking`]); one not announced is posted
        // at once.
        if let Some(r) = &mut recv {
            // SAFETY: MPI initialized; the receive completes below.
            guard(|| unsafe { direct::announce(r, source, recvtag, rseq, true) });
        }
        profile::mark("announced");
        let quiet = recv.as_ref().is_some_and(|r| r.direct.is_some());
        let mut reqs = [null_request_handle(); 2];
        if !quiet {
            let (rb, rcount, rt) = real_side(&mut recv);
            // SAFETY: the receive side is the caller's triple or a staging buffer of `rcount`
            // bytes, alive until the wait below.
            let rc = profile::time(Phase::Mpi, || unsafe {
                ffi::PMPI_Irecv(rb, rcount, rt, source, recvtag, comm, &mut reqs[0])
            });
            if rc != 0 {
                return rc;
            }
        }
        let mut packed = None;
        // SAFETY: MPI's contract for the send; the staging lives until the wait below.
        let sending = unsafe {
            match send {
                Some(t) => {
                    match send_directly(
                        "MPI_Sendrecv",
                        sseq,
                        (dest, sendtag),
                        sendbuf,
                        &t,
                        true,
                        slot.take()
                            .map(direct::Ahead::Slot)
                            .or(ahead.take().map(direct::Ahead::Packed)),
                    ) {
                        Sent::Quietly => {
                            lent = Some(t.2);
                            None
                        }
                        Sent::Directly => {
                            lent = Some(t.2);
                            Some((direct::marker(), 0, bytes_type()))
                        }
                        Sent::Written(true) => None,
                        Sent::Written(false) => Some((direct::marker(), 0, bytes_type())),
                        Sent::No => match guarded(|| pack_taken("MPI_Sendrecv", sendbuf, t)) {
                            Some((s, n)) => {
                                Some((packed.insert(s).mpi_ptr().cast_const(), n, bytes_type()))
                            }
                            None => Some((sendbuf, sendcount, sendtype)),
                        },
                    }
                }
                None => Some((sendbuf, sendcount, sendtype)),
            }
        };
        profile::mark("sent");
        // Nothing where the send went quietly.
        let rc = sending.map_or(0, |(sb, sc, sty)| {
            // SAFETY: the caller's send triple, the staging (kept until the wait below) or
            // the message of 0 bytes.
            profile::time(Phase::Mpi, || unsafe {
                ffi::PMPI_Isend(sb, sc, sty, dest, sendtag, comm, &mut reqs[1])
            })
        });
        let r0 = match &mut recv {
            // SAFETY: `st` is a valid status; this process posts no other receive meanwhile.
            Some(r) if quiet => unsafe { receive_blocking(r, source, recvtag, comm, st) },
            // SAFETY: the receive posted above; `st` is a valid status.
            _ => profile::time(Phase::Mpi, || unsafe { ffi::PMPI_Wait(&mut reqs[0], st) }),
        };
        profile::mark("received");
        // No request where the send went quietly: nothing to wait for.
        let r1 = if reqs[1] == null_request_handle() {
            0
        } else {
            // SAFETY: the send's request, made above.
            profile::time(Phase::Mpi, || unsafe {
                ffi::PMPI_Wait(&mut reqs[1], status_ignore())
            })
        };
        profile::mark("send waited");
        drop(packed);
        let code = [rc, r0, r1].into_iter().find(|&c| c != 0).unwrap_or(0);
        (code, r0 == 0)
    };
    // The GPUs the receive's unpack was waited for on.
    let mut waited: Vec<usize> = Vec::new();
    let code = match recv {
        Some(r) if received => {
            // SAFETY: the receive completed with status `st`.
            let finished = unsafe { finish_recvs(vec![(r, st.cast_const())]) };
            waited = finished.waited;
            let unpacked = finished
                .codes
                .first()
                .copied()
                .unwrap_or(message::ERR_INTERN);
            if rc != 0 {
                rc
            } else {
                unpacked
            }
        }
        Some(mut r) => {
            // An unpack queued early is waited for, and its staging given back, before the
            // failed call returns.
            guard(|| direct::let_go(&mut r));
            rc
        }
        None => rc,
    };
    // The pack was queued on its GPU's stream before the receive's unpack: where that GPU
    // was waited for, so was the pack.
    if let Some(e) = lent.filter(|e| !e.ordinal().is_some_and(|o| waited.contains(&o))) {
        packed_before_return("MPI_Sendrecv", &e);
    }
    code
}

/// `MPI_Send_init`: a persistent send of a device buffer and a decoded type gets a staging
/// buffer for good, and the real MPI's persistent request sends from it; each start packs into
/// it first ([`MPI_Start`]), or, where the direct path lends the start, into fresh staging of
/// the direct path's (then a persistent request of the real MPI for a message of 0 bytes, made
/// here too, starts in its place).
///
/// # Safety
/// MPI's contract for `MPI_Send_init`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Send_init(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: the caller's contract.
    let rc = unsafe { send_init(buf, count, datatype, dest, tag, comm, request) };
    // SAFETY: as above; the request is written where the call succeeded.
    unsafe { kept(rc, request, true, comm, dest, tag, count, datatype) }
}

/// Counts the starts of a persistent request just made (where `rc` says it was) on
/// `MPI_COMM_WORLD` ([`direct::keep_persistent`]); returns `rc`.
///
/// # Safety
/// MPI initialized; `request` holds the new handle where `rc` is 0.
#[allow(clippy::too_many_arguments)]
unsafe fn kept(
    rc: c_int,
    request: *mut MPI_Request,
    send: bool,
    comm: MPI_Comm,
    peer: c_int,
    tag: c_int,
    count: c_int,
    datatype: MPI_Datatype,
) -> c_int {
    if rc == 0 && !request.is_null() {
        // SAFETY: the caller's contract.
        let h = key(unsafe { *request });
        // SAFETY: as above.
        guard(|| unsafe { direct::keep_persistent(h, send, comm, peer, tag, count, datatype) });
    }
    rc
}

/// The body of `MPI_Send_init`.
///
/// # Safety
/// MPI's contract for `MPI_Send_init`.
unsafe fn send_init(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: MPI's contract for the send triple.
    match guarded(|| unsafe { prepare_send_init("MPI_Send_init", buf, count, datatype) }) {
        Some(mut o) => {
            // SAFETY: the staging is kept with the request until it is freed.
            let rc = unsafe {
                ffi::PMPI_Send_init(
                    o.staging.mpi_ptr(),
                    o.bytes,
                    bytes_type(),
                    dest,
                    tag,
                    comm,
                    request,
                )
            };
            if rc == 0 {
                if guarded(|| direct::lends_to(comm, dest).then_some(())).is_some() {
                    let mut m = null_request_handle();
                    // SAFETY: a persistent message of 0 bytes at an address MPI never reads,
                    // freed with the program's request.
                    let made = unsafe {
                        ffi::PMPI_Send_init(
                            direct::marker(),
                            0,
                            bytes_type(),
                            dest,
                            tag,
                            comm,
                            &mut m,
                        )
                    };
                    if made == 0 {
                        o.marker = Some(m);
                        persistent::LENT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                // SAFETY: the real MPI wrote the new request's handle.
                persistent::keep(key(unsafe { *request }), Persistent::Send(o));
            }
            rc
        }
        // SAFETY: the caller's contract.
        None => unsafe { ffi::PMPI_Send_init(buf, count, datatype, dest, tag, comm, request) },
    }
}

/// `MPI_Recv_init`: a persistent receive into a device buffer of a decoded type gets a staging
/// buffer for good, and the real MPI's persistent request receives into it; each completion
/// unpacks it.
///
/// # Safety
/// MPI's contract for `MPI_Recv_init`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Recv_init(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: the caller's contract.
    let rc = unsafe { recv_init(buf, count, datatype, source, tag, comm, request) };
    // SAFETY: as above.
    unsafe { kept(rc, request, false, comm, source, tag, count, datatype) }
}

/// The body of `MPI_Recv_init`.
///
/// # Safety
/// MPI's contract for `MPI_Recv_init`.
unsafe fn recv_init(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: MPI's contract for the receive triple.
    let Some(mut r) =
        guarded(|| unsafe { prepare_recv("MPI_Recv_init", buf, count, datatype, None, false) })
    else {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Recv_init(buf, count, datatype, source, tag, comm, request) };
    };
    // SAFETY: the staging is kept with the request until it is freed.
    let rc = unsafe {
        ffi::PMPI_Recv_init(
            r.staging.mpi_ptr(),
            r.bytes,
            bytes_type(),
            source,
            tag,
            comm,
            request,
        )
    };
    if rc == 0 {
        // SAFETY: the real MPI wrote the new request's handle.
        persistent::keep(key(unsafe { *request }), Persistent::Recv(r));
    }
    rc
}

/// `MPI_Start`: the interposer's persistent send is packed before the real MPI starts it.
///
/// # Safety
/// MPI's contract for `MPI_Start`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Start(request: *mut MPI_Request) -> c_int {
    // SAFETY: the caller passes one request; `real` is the caller's own call.
    unsafe { start(request, 1, || ffi::PMPI_Start(request)) }
}

/// `MPI_Startall`: the interposer's persistent sends among the requests are packed together
/// (one launch and one wait per GPU) before the real MPI starts them all.
///
/// # Safety
/// MPI's contract for `MPI_Startall`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Startall(count: c_int, array_of_requests: *mut MPI_Request) -> c_int {
    // SAFETY: the caller passes `count` requests; `real` is the caller's own call.
    unsafe {
        start(array_of_requests, count, || {
            ffi::PMPI_Startall(count, array_of_requests)
        })
    }
}

/// The shared body of `MPI_Start` and `MPI_Startall` on the `n` requests at `reqs`: the
/// interposer's persistent sends among them get fresh staging where the direct path may lend
/// them ([`persistent::choose`]) and are packed ([`persistent::pack`]), then `real`, the real
/// MPI's start, or, with sends to lend, [`start_lending`]; the requests are not active where
/// either fails.
///
/// # Safety
/// MPI's contract for a start of those requests; `real` makes that call.
unsafe fn start(reqs: *mut MPI_Request, n: c_int, real: impl FnOnce() -> c_int) -> c_int {
    // SAFETY: the caller passes `n` requests.
    let handles = unsafe { keys(reqs, n) };
    // SAFETY: MPI initialized (the caller's contract); counted before the real start, so an
    // empty send's note precedes its message.
    let counted = guarded(|| Some(unsafe { direct::started(&handles) }))
        .unwrap_or_else(|| vec![None; handles.len()]);
    if !any_ours(&handles) {
        return real();
    }
    let mut scope = profile::scope("MPI_Start");
    scope.taken();
    let lending = guarded(|| Some(persistent::choose(&handles, &counted))).unwrap_or(false);
    if lending {
        // Every send is lendable: packed after the rest starts, not waited for.
        // SAFETY: the caller's array of `n` requests, which it starts.
        return unsafe { start_lending(reqs, &handles, &counted, true) };
    }
    // SAFETY: the caller starts these requests; their send buffers hold what they send.
    let packed = guarded(|| Some(unsafe { persistent::pack(&handles, true) }))
        .unwrap_or(message::ERR_INTERN);
    if packed != 0 {
        return packed;
    }
    if persistent::packed_fresh(&handles).contains(&true) {
        // SAFETY: as above.
        return unsafe { start_lending(reqs, &handles, &counted, false) };
    }
    let rc = profile::time(Phase::Mpi, real);
    if rc == 0 {
        // SAFETY: MPI initialized; the receives are posted.
        guard(|| unsafe { persistent::announce_started(&handles, &counted) });
    } else {
        persistent::not_started(&handles);
    }
    rc
}

/// A start with sends the direct path may lend (`MPI_Startall` starts its requests in any
/// order): every request but those sends, and the sends that must follow them (the same
/// destination and tag), starts first, so that the peers' sends find the interposer's receives
/// announced and the messages the real MPI moves (contiguous faces) are started before the
/// lent sends are packed (where `pack`: launched, not waited for) and wait for their ready
/// messages; then each lendable send is lent or packed into its own staging
/// ([`persistent::lend_packed`]); then those sends start in their order, lent ones by their
/// markers ([`persistent::swap_in`]). Where a step fails, the requests the real MPI started
/// are marked active and the others not (a send whose pack failed is not started, the packs of
/// lent sends not started are waited for), and the first error is returned; where a counted
/// send did not start, the direct path stops on this rank ([`direct::unsettle`]: the peers'
/// receives and this rank's sends no longer pair by number).
///
/// # Safety
/// MPI initialized; `reqs` is the caller's array of the started `handles`, whose send buffers
/// hold what they send.
unsafe fn start_lending(
    reqs: *mut MPI_Request,
    handles: &[u64],
    counted: &[Option<(c_int, c_int, u64)>],
    pack: bool,
) -> c_int {
    let fresh = persistent::packed_fresh(handles);
    let sends = direct::persistent_sends(handles);
    let lent_to: Vec<(c_int, c_int)> = (0..handles.len())
        .filter(|&i| fresh[i])
        .filter_map(|i| counted[i].map(|(dest, tag, _)| (dest, tag)))
        .collect();
    let late: Vec<bool> = (0..handles.len())
        .map(|i| {
            fresh[i] || (sends[i] && counted[i].is_some_and(|(d, t, _)| lent_to.contains(&(d, t))))
        })
        .collect();
    // The caller's handles of one group, copied: the caller's array is not changed.
    let group = |late_ones: bool| -> Vec<MPI_Request> {
        (0..handles.len())
            .filter(|&i| late[i] == late_ones)
            // SAFETY: the caller's array holds `handles.len()` requests.
            .map(|i| unsafe { *reqs.add(i) })
            .collect()
    };
    let handles_of = |late_ones: bool| -> Vec<u64> {
        (0..handles.len())
            .filter(|&i| late[i] == late_ones)
            .map(|i| handles[i])
            .collect()
    };
    let mut early = group(false);
    if !early.is_empty() {
        let n = c_int::try_from(early.len()).unwrap_or(c_int::MAX);
        // SAFETY: `early` holds `n` of the caller's persistent requests, none lent.
        let rc = profile::time(Phase::Mpi, || unsafe {
            ffi::PMPI_Startall(n, early.as_mut_ptr())
        });
        if rc != 0 {
            persistent::not_started(handles);
            return rc;
        }
    }
    // SAFETY: MPI initialized; the receives are posted.
    guard(|| unsafe { persistent::announce_started(handles, counted) });
    if pack {
        // SAFETY: the caller's contract: the sends' buffers hold what they send; every send is
        // lendable, so the packs need not be waited for.
        let packed = guarded(|| Some(unsafe { persistent::pack(handles, false) }))
            .unwrap_or(message::ERR_INTERN);
        if packed != 0 {
            // Nothing was lent: the rest does not start.
            persistent::not_started(&handles_of(true));
            persistent::started_anyway(&handles_of(false));
            direct::unsettle();
            return packed;
        }
    }
    // The real MPI moves the messages started first (contiguous faces) only inside its calls:
    // a step of theirs after the loans and one after the markers start, so that their
    // transfers overlap the start's own work instead of following it. Not before the loans:
    // a step there (several microseconds of the real MPI's work) held the notes back, and with
    // them the peers' unpacks (run 35, docs/logs/2026-11-27-lean: 45 µs an exchange without
    // it, 51 µs with it).
    let poke = || {
        if !early.is_empty() {
            // SAFETY: MPI initialized (the caller's contract).
            profile::time(Phase::Progress, || unsafe { progress::poke() });
        }
    };
    // SAFETY: the caller's contract: the sends' buffers hold what they send.
    let failed =
        guarded(|| Some(unsafe { persistent::lend_packed(handles) })).unwrap_or_else(|| {
            // Sends already lent still start (their notes are out); the others do not.
            let lent = persistent::lent_among(handles);
            handles_of(true)
                .into_iter()
                .filter(|h| !lent.contains(h))
                .collect()
        });
    // The rest starts, but for sends whose pack failed: the notes of those lent are out, and
    // their markers must follow.
    let mut rest: Vec<MPI_Request> = (0..handles.len())
        .filter(|&i| late[i] && !failed.contains(&handles[i]))
        // SAFETY: the caller's array holds `handles.len()` requests.
        .map(|i| unsafe { *reqs.add(i) })
        .collect();
    let n = c_int::try_from(rest.len()).unwrap_or(c_int::MAX);
    let rc = if rest.is_empty() {
        0
    } else {
        // SAFETY: `rest` holds `n` of the caller's persistent requests; lent sends start their
        // markers.
        let swapped = unsafe { persistent::swap_in(rest.as_mut_ptr(), n) };
        poke();
        // SAFETY: as above.
        let rc = profile::time(Phase::Mpi, || unsafe {
            ffi::PMPI_Startall(n, rest.as_mut_ptr())
        });
        drop(swapped);
        poke();
        rc
    };
    if rc != 0 {
        persistent::wait_lent(&handles_of(true));
        persistent::not_started(&handles_of(true));
        direct::unsettle();
        return rc;
    }
    if !failed.is_empty() {
        persistent::not_started(&failed);
        direct::unsettle();
        return message::ERR_INTERN;
    }
    0
}

/// Completes the interposer's requests among `before` that the call completed: the ones it
/// started and the call set to null, and its started persistent requests in the slots where
/// `completed(i)` (persistent handles stay as they are). `status_of(i)` is the status of array
/// slot `i`. The receives among them are unpacked together ([`finish_recvs`]: their launches,
/// then one wait); the persistent ones are kept for their next start. Returns `rc`, or the
/// first unpack error.
///
/// # Safety
/// MPI initialized; the statuses are those the real MPI just wrote.
unsafe fn complete(
    rc: c_int,
    before: &[u64],
    after: &[u64],
    status_of: impl Fn(usize) -> Option<*const MPI_Status>,
    completed: impl Fn(usize) -> bool,
) -> c_int {
    // No settle of `MPI_Request_get_status` meanwhile (threads calling MPI at once).
    let _gate = crate::sync::completing();
    // Where MPI gave no status, a zeroed one of the receive's own (which reads as nothing
    // received, and which the direct path may write), alive until the end.
    let mut blanks: Vec<Box<MPI_Status>> = Vec::new();
    let mut status_or_blank = |i: usize| -> *const MPI_Status {
        status_of(i).unwrap_or_else(|| {
            let b = Box::new(blank_status());
            let p: *const MPI_Status = &*b;
            blanks.push(b);
            p
        })
    };
    // The receives to unpack, with the handle of each persistent one (to keep it again).
    let mut recvs = Vec::new();
    let mut kept = Vec::new();
    let mut packing = Vec::new();
    // Receives `MPI_Request_get_status` already unpacked: their codes (their statuses are set
    // to what that call said).
    let mut settled = Vec::new();
    for (i, work) in take_completed(before, after, null_request()) {
        match work {
            Pending::Send(s) => drop(s),
            Pending::Recv(r) => {
                recvs.push((*r, status_or_blank(i)));
                kept.push(None);
            }
            Pending::Packing(e) => packing.push(e),
            Pending::Settled(code, n) => {
                // SAFETY: the slot's status (or a blank of our own), writable.
                unsafe { direct::set_bytes(status_or_blank(i).cast_mut(), n as u64) };
                settled.push(code);
            }
        }
    }
    // Persistent requests the call completed: receives to unpack, receives already unpacked,
    // and the engines of sends lent at their start.
    let done = persistent::take_started(before, &completed);
    packing.extend(done.lent);
    for (i, code, n) in done.seen {
        // SAFETY: as above.
        unsafe { direct::set_bytes(status_or_blank(i).cast_mut(), n as u64) };
        settled.push(code);
    }
    let rc = if rc == 0 {
        settled.into_iter().find(|&c| c != 0).unwrap_or(0)
    } else {
        rc
    };
    // Sends lent on the direct path: their packs are waited for after the receives' unpacks,
    // once per GPU, and not at all on a GPU whose stream the unpacks' wait covered (the packs
    // were queued there before).
    let packed = |rc: c_int, waited: &[usize]| {
        let mut seen: Vec<Option<usize>> = Vec::new();
        for e in &packing {
            let o = e.ordinal();
            if o.is_some_and(|o| waited.contains(&o)) || seen.contains(&o) {
                continue;
            }
            seen.push(o);
            if let Err(e) = e.wait() {
                log!("a send's completion: the wait for its direct pack failed: {e}");
            }
        }
        rc
    };
    for (i, handle, r) in done.recvs {
        recvs.push((r, status_or_blank(i)));
        kept.push(Some(handle));
    }
    if recvs.is_empty() {
        return packed(rc, &[]);
    }
    let mut scope = profile::scope(profile::COMPLETION);
    scope.taken();
    // SAFETY: each request completed with its status (or the zeroed one, alive until here).
    let finished = unsafe { finish_recvs(recvs) };
    for ((r, _), handle) in finished.recvs.into_iter().zip(kept) {
        if let Some(h) = handle {
            persistent::put_back(h, r);
        }
    }
    if rc != 0 {
        return packed(rc, &finished.waited);
    }
    let code = finished.codes.into_iter().find(|&c| c != 0).unwrap_or(0);
    packed(code, &finished.waited)
}

/// The handles of `n` requests at `reqs`.
///
/// # Safety
/// `reqs` points at `n` handles (or `n` is 0).
unsafe fn keys(reqs: *const MPI_Request, n: c_int) -> Vec<u64> {
    let n = usize::try_from(n).unwrap_or(0);
    if reqs.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(reqs, n) }
        .iter()
        .map(|&r| key(r))
        .collect()
}

/// `MPI_Wait`: a receive of the interposer is unpacked when it completes.
///
/// # Safety
/// MPI's contract for `MPI_Wait`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
    // SAFETY: the caller passes one request.
    let before = unsafe { keys(request, 1) };
    if !any_ours(&before) {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Wait(request, status) };
    }
    let mut own = blank_status();
    let st = status_or(status, &mut own);
    // SAFETY: the caller's array; lent persistent sends are waited for by their markers.
    let swapped = unsafe { persistent::swap_in(request, 1) };
    // SAFETY: the caller's contract, with a valid status.
    let rc = unsafe { ffi::PMPI_Wait(request, st) };
    drop(swapped);
    // SAFETY: as above.
    let after = unsafe { keys(request, 1) };
    // SAFETY: the status the real MPI just wrote.
    unsafe { complete(rc, &before, &after, |_| Some(st.cast_const()), |_| rc == 0) }
}

/// `MPI_Test`.
///
/// # Safety
/// MPI's contract for `MPI_Test`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Test(
    request: *mut MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller passes one request.
    let before = unsafe { keys(request, 1) };
    if !any_ours(&before) {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Test(request, flag, status) };
    }
    let mut own = blank_status();
    let st = status_or(status, &mut own);
    // SAFETY: the caller's array; lent persistent sends are waited for by their markers.
    let swapped = unsafe { persistent::swap_in(request, 1) };
    // SAFETY: the caller's contract, with a valid status.
    let rc = unsafe { ffi::PMPI_Test(request, flag, st) };
    drop(swapped);
    // SAFETY: as above.
    let after = unsafe { keys(request, 1) };
    // SAFETY: `flag` was written by the real MPI.
    let done = rc == 0 && unsafe { *flag } != 0;
    // SAFETY: the status the real MPI just wrote.
    unsafe { complete(rc, &before, &after, |_| Some(st.cast_const()), |_| done) }
}

/// The caller's status, or `own` where the caller passed `MPI_STATUS_IGNORE`: the interposer
/// reads every status it completes.
fn status_or(user: *mut MPI_Status, own: &mut MPI_Status) -> *mut MPI_Status {
    if user == status_ignore() {
        own
    } else {
        user
    }
}

/// Statuses the real MPI writes for `n` requests: the caller's array, or an own one.
fn statuses(user: *mut MPI_Status, n: c_int, own: &mut Vec<MPI_Status>) -> *mut MPI_Status {
    if user == statuses_ignore() || user.is_null() {
        *own = (0..n.max(1)).map(|_| blank_status()).collect();
        own.as_mut_ptr()
    } else {
        user
    }
}

/// `MPI_Waitall`.
///
/// # Safety
/// MPI's contract for `MPI_Waitall`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller passes `count` requests.
    let before = unsafe { keys(array_of_requests, count) };
    if !any_ours(&before) {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Waitall(count, array_of_requests, array_of_statuses) };
    }
    let mut own = Vec::new();
    let st = statuses(array_of_statuses, count, &mut own);
    // SAFETY: MPI initialized; the caller waits for these requests.
    let waiting = unsafe { pull_early(&before) };
    // SAFETY: the caller's array; lent persistent sends are waited for by their markers.
    let swapped = unsafe { persistent::swap_in(array_of_requests, count) };
    // SAFETY: the caller's contract, with room for `count` statuses.
    let rc = unsafe { wait_pulling(count, array_of_requests, st, &before, waiting) };
    drop(swapped);
    // SAFETY: as above.
    let after = unsafe { keys(array_of_requests, count) };
    // SAFETY: slot `i`'s status is `st[i]`, just written.
    unsafe {
        complete(
            rc,
            &before,
            &after,
            |i| Some(st.add(i).cast_const()),
            |_| rc == 0,
        )
    }
}

/// `MPI_Testall`.
///
/// # Safety
/// MPI's contract for `MPI_Testall`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    flag: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller passes `count` requests.
    let before = unsafe { keys(array_of_requests, count) };
    if !any_ours(&before) {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Testall(count, array_of_requests, flag, array_of_statuses) };
    }
    let mut own = Vec::new();
    let st = statuses(array_of_statuses, count, &mut own);
    // SAFETY: the caller's array; lent persistent sends are waited for by their markers.
    let swapped = unsafe { persistent::swap_in(array_of_requests, count) };
    // SAFETY: the caller's contract, with room for `count` statuses.
    let rc = unsafe { ffi::PMPI_Testall(count, array_of_requests, flag, st) };
    drop(swapped);
    // SAFETY: as above.
    let after = unsafe { keys(array_of_requests, count) };
    // SAFETY: `flag` was written by the real MPI.
    let done = rc == 0 && unsafe { *flag } != 0;
    // SAFETY: slot `i`'s status is `st[i]`, just written.
    unsafe {
        complete(
            rc,
            &before,
            &after,
            |i| Some(st.add(i).cast_const()),
            |_| done,
        )
    }
}

/// `MPI_Waitany`.
///
/// # Safety
/// MPI's contract for `MPI_Waitany`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller passes `count` requests.
    let before = unsafe { keys(array_of_requests, count) };
    if !any_ours(&before) {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Waitany(count, array_of_requests, index, status) };
    }
    let mut own = blank_status();
    let st = status_or(status, &mut own);
    // SAFETY: MPI initialized; the caller waits for these requests.
    unsafe { pull_early(&before) };
    // SAFETY: the caller's array; lent persistent sends are waited for by their markers.
    let swapped = unsafe { persistent::swap_in(array_of_requests, count) };
    // SAFETY: the caller's contract, with a valid status.
    let rc = unsafe { ffi::PMPI_Waitany(count, array_of_requests, index, st) };
    drop(swapped);
    // SAFETY: as above.
    let after = unsafe { keys(array_of_requests, count) };
    // SAFETY: `index` was written by the real MPI.
    let done = unsafe { *index };
    let is_done = |i: usize| rc == 0 && usize::try_from(done).ok() == Some(i);
    // SAFETY: the status of the completed slot `done`, just written.
    unsafe {
        complete(
            rc,
            &before,
            &after,
            |i| is_done(i).then_some(st.cast_const()),
            is_done,
        )
    }
}

/// `MPI_Testany`.
///
/// # Safety
/// MPI's contract for `MPI_Testany`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller passes `count` requests.
    let before = unsafe { keys(array_of_requests, count) };
    if !any_ours(&before) {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Testany(count, array_of_requests, index, flag, status) };
    }
    let mut own = blank_status();
    let st = status_or(status, &mut own);
    // SAFETY: the caller's array; lent persistent sends are waited for by their markers.
    let swapped = unsafe { persistent::swap_in(array_of_requests, count) };
    // SAFETY: the caller's contract, with a valid status.
    let rc = unsafe { ffi::PMPI_Testany(count, array_of_requests, index, flag, st) };
    drop(swapped);
    // SAFETY: as above.
    let after = unsafe { keys(array_of_requests, count) };
    // SAFETY: `index` and `flag` were written by the real MPI.
    let (done, flagged) = unsafe { (*index, *flag != 0) };
    let is_done = |i: usize| rc == 0 && flagged && usize::try_from(done).ok() == Some(i);
    // SAFETY: the status of the completed slot `done`, just written.
    unsafe {
        complete(
            rc,
            &before,
            &after,
            |i| is_done(i).then_some(st.cast_const()),
            is_done,
        )
    }
}

/// The shared body of `MPI_Waitsome` and `MPI_Testsome`.
///
/// # Safety
/// MPI's contract for those calls; `call` is the real one.
unsafe fn some(
    incount: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses_in: *mut MPI_Status,
    call: unsafe extern "C" fn(
        c_int,
        *mut MPI_Request,
        *mut c_int,
        *mut c_int,
        *mut MPI_Status,
    ) -> c_int,
) -> c_int {
    // SAFETY: the caller passes `incount` requests.
    let before = unsafe { keys(reqs, incount) };
    if !any_ours(&before) {
        // SAFETY: the caller's contract.
        return unsafe { call(incount, reqs, outcount, indices, statuses_in) };
    }
    let mut own = Vec::new();
    let st = statuses(statuses_in, incount, &mut own);
    // SAFETY: the caller's array; lent persistent sends are waited for by their markers.
    let swapped = unsafe { persistent::swap_in(reqs, incount) };
    // SAFETY: the caller's contract, with room for `incount` statuses.
    let rc = unsafe { call(incount, reqs, outcount, indices, st) };
    drop(swapped);
    // SAFETY: as above.
    let after = unsafe { keys(reqs, incount) };
    // SAFETY: written by the real MPI.
    let out = unsafe { *outcount };
    let idx: Vec<c_int> = match usize::try_from(out) {
        // SAFETY: the real MPI wrote `out` indices.
        Ok(n) if !indices.is_null() => unsafe { std::slice::from_raw_parts(indices, n) }.to_vec(),
        _ => Vec::new(),
    };
    // SAFETY: slot `i`'s status is at its position among the indices, just written.
    unsafe {
        complete(
            rc,
            &before,
            &after,
            |i| status_slot_of_some(&idx, out, i).map(|j| st.add(j).cast_const()),
            |i| rc == 0 && status_slot_of_some(&idx, out, i).is_some(),
        )
    }
}

/// `MPI_Waitsome`.
///
/// # Safety
/// MPI's contract for `MPI_Waitsome`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitsome(
    incount: c_int,
    array_of_requests: *mut MPI_Request,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        some(
            incount,
            array_of_requests,
            outcount,
            array_of_indices,
            array_of_statuses,
            ffi::PMPI_Waitsome,
        )
    }
}

/// `MPI_Testsome`.
///
/// # Safety
/// MPI's contract for `MPI_Testsome`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testsome(
    incount: c_int,
    array_of_requests: *mut MPI_Request,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        some(
            incount,
            array_of_requests,
            outcount,
            array_of_indices,
            array_of_statuses,
            ffi::PMPI_Testsome,
        )
    }
}

/// `MPI_Request_get_status`: where the real MPI says a request of the interposer is complete,
/// the program may use its buffer from then on without a wait: a receive is unpacked now (its
/// status set as the wait or test that completes it will set it again), and a send lent on the
/// direct path has its pack waited for. A lent persistent send is asked about by its marker,
/// the real MPI's active request.
///
/// # Safety
/// MPI's contract for `MPI_Request_get_status`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_get_status(
    request: MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    let h = key(request);
    if !any_ours(&[h]) {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Request_get_status(request, flag, status) };
    }
    let mut own = blank_status();
    let st = status_or(status, &mut own);
    let real = guarded(|| persistent::marker_if_lent(h)).unwrap_or(request);
    // SAFETY: the caller's contract, with a valid status; `real` is the request or its marker.
    let rc = unsafe { ffi::PMPI_Request_get_status(real, flag, st) };
    // SAFETY: `flag` was written by the real MPI where it succeeded.
    if rc != 0 || flag.is_null() || unsafe { *flag } == 0 {
        return rc;
    }
    // No completion of another thread meanwhile (see `sync::completing`).
    let _gate = crate::sync::settling();
    // SAFETY: MPI initialized; `st` is the request's status, just written.
    let settled =
        guarded(|| unsafe { path::settle_seen(h, st).or_else(|| persistent::settle_seen(h, st)) });
    settled.unwrap_or(0)
}

/// `MPI_Request_free`: a send of the interposer keeps its staging for good (the real MPI may
/// still read it); a receive of the interposer is waited for and unpacked first, since nothing
/// else would ever unpack it. A persistent request of the interposer is let go of: if it is
/// active, as a started request of the same kind.
///
/// # Safety
/// MPI's contract for `MPI_Request_free`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_free(request: *mut MPI_Request) -> c_int {
    // SAFETY: the caller passes one request.
    let before = unsafe { keys(request, 1) };
    if let Some(&h) = before.first() {
        guard(|| direct::forget_persistent(h));
    }
    if !any_ours(&before) {
        // SAFETY: the caller's contract.
        return unsafe { ffi::PMPI_Request_free(request) };
    }
    if let Some((mut work, active)) = persistent::release(before[0]) {
        if let Persistent::Send(o) = &mut work {
            if let Some(mut m) = o.marker.take() {
                persistent::LENT.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                // SAFETY: the marker request made with this send; if its start is active, the
                // real MPI lets it complete (a message of 0 bytes) before freeing it.
                unsafe { ffi::PMPI_Request_free(&mut m) };
            }
        }
        let code = match work {
            Persistent::Send(o) if active => {
                if o.lent() {
                    // Its pack reads the program's buffer, which the program may take this
                    // call to give back.
                    if let Err(e) = o.engine().wait() {
                        log!("MPI_Request_free: the wait for a direct pack failed: {e}");
                    }
                }
                std::mem::forget(o);
                0
            }
            // Unpacked when `MPI_Request_get_status` saw it complete: the real request is done.
            Persistent::Recv(r) if active && persistent::take_seen(before[0]) => {
                drop(r);
                0
            }
            // SAFETY: the caller's request, a started receive of the interposer (a persistent
            // request stays allocated through the wait, and is freed below).
            Persistent::Recv(r) if active => unsafe { wait_and_unpack(request, r) },
            inactive => {
                drop(inactive);
                0
            }
        };
        // SAFETY: the caller's contract.
        let freed = unsafe { ffi::PMPI_Request_free(request) };
        return if code != 0 { code } else { freed };
    }
    match forget(before[0]) {
        Some(Pending::Send(s)) => {
            std::mem::forget(s);
            // SAFETY: the caller's contract.
            unsafe { ffi::PMPI_Request_free(request) }
        }
        // Unpacked when `MPI_Request_get_status` saw it complete.
        // SAFETY: the caller's contract.
        Some(Pending::Settled(..)) => unsafe { ffi::PMPI_Request_free(request) },
        Some(Pending::Packing(e)) => {
            // The program lets go of the send: its pack must be done before the buffer is
            // the program's again, which it may take this call to mean.
            if let Err(e) = e.wait() {
                log!("MPI_Request_free: the wait for a direct pack failed: {e}");
            }
            // SAFETY: the caller's contract.
            unsafe { ffi::PMPI_Request_free(request) }
        }
        // SAFETY: the caller's request, a started receive of the interposer, completed (and
        // so freed) by the wait instead of freed.
        Some(Pending::Recv(r)) => unsafe { wait_and_unpack(request, *r) },
        // SAFETY: the caller's contract.
        None => unsafe { ffi::PMPI_Request_free(request) },
    }
}

/// Waits for a receive of the interposer that its caller lets go of and unpacks it, since
/// nothing else would (`MPI_Request_free`). Returns the wait's code or the unpack's; after a
/// failed wait the staging is kept for good (the real MPI may still write it).
///
/// # Safety
/// MPI initialized; `request` is the started receive `r` was made for.
unsafe fn wait_and_unpack(request: *mut MPI_Request, r: message::Receive) -> c_int {
    let mut scope = profile::scope(profile::COMPLETION);
    scope.taken();
    let mut st = blank_status();
    // SAFETY: the caller's contract.
    let rc = profile::time(Phase::Mpi, || unsafe { ffi::PMPI_Wait(request, &mut st) });
    if rc != 0 {
        std::mem::forget(r);
        return rc;
    }
    let _gate = crate::sync::completing();
    // SAFETY: the receive completed with `st`.
    unsafe { finish_recv(r, &st) }
}
