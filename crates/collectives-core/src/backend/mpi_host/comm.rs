//! [`MpiComm`]: construction, teardown, checked mode, and the deadline: every MPI operation of the
//! three MPI backends is made through [`MpiComm::run`] (blocking) or [`MpiComm::start`]
//! (non-blocking), which choose between the blocking call and its polled non-blocking twin.

use std::ffi::{c_int, c_void};
use std::fmt;
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::Duration;

use mpi::ffi;

use super::progress::{Engine, InFlight, ProgressOptions, ProgressStats};
use super::raw;
use super::request::{new_request, wait_requests, Form, Health, MpiPending, Region, Staging};
use crate::checked;
use crate::deadline;
use crate::element::Element;
use crate::error::Result;

/// A communicator of the MPI host backend: collectives on host memory (`[T]` buffers).
///
/// It owns a duplicate of the communicator it was made from, with the `MPI_ERRORS_RETURN` error handler,
/// so MPI errors come back as [`Error::Mpi`](crate::Error::Mpi) and messages never mix with the caller's.
/// Dropping it frees the duplicate (`MPI_Comm_free`), unless MPI has been finalized already;
/// [`finalize`](Self::finalize) does the same and reports errors. `MPI_Comm_free` is collective in the
/// MPI standard: drop communicators in the same order on every rank.
///
/// **Deadlines** (opt-in: `COLLECTIVES_TIMEOUT` seconds, or [`with_timeout`](Self::with_timeout)):
/// without one, operations are MPI's blocking calls, and a peer that dies or never makes the matching
/// call blocks this rank forever (checked mode does not change that: its agreement waits for the peer
/// too). With one, every blocking operation runs as its non-blocking twin (`MPI_Iallreduce`,
/// `MPI_Isend`, `MPI_Ibarrier`, ...) polled with `MPI_Test` until the deadline, on copies of the
/// buffers, and returns [`Error::Timeout`](crate::Error::Timeout) when it passes; so does
/// [`Request::wait`](crate::Request::wait), and so does checked mode's agreement, which is where a
/// missing peer is usually first noticed. After a timeout the communicator is refused: every later
/// operation returns [`Error::Unusable`](crate::Error::Unusable) at once (after this rank's own
/// argument errors, and before any communication), and the job should end (`MPI_Abort`, or drop the
/// communicators and finalize). `split` and `dup` have no non-blocking twin: under a deadline they
/// first meet in a polled barrier (or checked mode's agreement), so a peer that never arrives is a
/// timeout, but one that dies between that meeting and the call can still block them.
///
/// Every rank of a communicator must use a deadline or none (the durations may differ): MPI does not
/// match a blocking collective with a non-blocking one.
///
/// **Progress** (opt-in: [`with_progress`](Self::with_progress), or `COLLECTIVES_PROGRESS=1`): a
/// thread that makes MPI progress while non-blocking operations of this communicator (and of those
/// made from it) are in flight, so that they advance while the rank computes between `i_*` and
/// `wait`. It needs MPI initialized at `MPI_THREAD_MULTIPLE` and takes a core while operations
/// fly; it parks when none is in flight. See [`progress`](super::progress) for how and what it
/// costs.
///
/// ```no_run
/// use collectives_core::{Communicator, MpiComm, ReduceOp};
///
/// let universe = mpi::initialize().expect("MPI initializes once");
/// let comm = MpiComm::world(&universe)?;
/// let mut x = vec![comm.rank() as f64; 4];
/// comm.all_reduce_in_place(&mut x[..], ReduceOp::Sum)?;
/// # Ok::<(), collectives_core::Error>(())
/// ```
pub struct MpiComm {
    pub(super) raw: ffi::MPI_Comm,
    pub(super) rank: usize,
    pub(super) size: usize,
    pub(super) checked: bool,
    pub(super) tag_ub: i32,
    /// The deadline of blocking operations and waits, if any.
    pub(super) timeout: Option<Duration>,
    /// Refused after a timeout; shared with the communicators of a device backend built on this one.
    pub(super) health: Health,
    /// The progress engine, shared with the communicators made from this one, if it is on.
    pub(super) progress: Option<Rc<Engine>>,
    /// MPI handles are used from the thread that made them (rsmpi initializes `MPI_THREAD_SINGLE`).
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for MpiComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpiComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("checked", &self.checked)
            .field("timeout", &self.timeout)
            .field("usable", &self.health.is_usable())
            .field("progress", &self.progress_options())
            .finish_non_exhaustive()
    }
}

/// The copies a start under a deadline runs on, with the deadline.
type Deadline = Option<(Staging, Duration)>;

impl MpiComm {
    /// A communicator over all ranks (a duplicate of `MPI_COMM_WORLD`). The universe proves MPI is
    /// initialized.
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) when duplicating fails.
    pub fn world(universe: &mpi::environment::Universe) -> Result<Self> {
        Self::from_rsmpi(&universe.world())
    }

    /// A communicator over the ranks of an rsmpi communicator (which is duplicated, not modified).
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) when duplicating fails.
    pub fn from_rsmpi<C: mpi::topology::Communicator>(comm: &C) -> Result<Self> {
        // SAFETY: an `MPI_Comm` handle starts out as any value; MPI_Comm_dup overwrites it.
        let mut dup: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: `comm` is a live communicator (rsmpi keeps it alive while borrowed); `dup` is a valid
        // out-pointer.
        raw::check("dup", unsafe { ffi::MPI_Comm_dup(comm.as_raw(), &mut dup) })?;
        // SAFETY: `dup` was just created and is owned by nobody else.
        unsafe { Self::from_raw(dup) }
    }

    /// Take ownership of a raw communicator handle: set `MPI_ERRORS_RETURN` on it and free it on drop.
    /// The progress engine is on when `COLLECTIVES_PROGRESS` asks for it
    /// ([`ProgressOptions::from_env`]).
    ///
    /// # Safety
    /// `raw` must be a valid communicator (not `MPI_COMM_NULL`, not a predefined one such as
    /// `MPI_COMM_WORLD`), MPI must be initialized, and nothing else may free it.
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) when MPI rejects the handle;
    /// [`Error::ThreadLevel`](crate::Error::ThreadLevel) when `COLLECTIVES_PROGRESS` is on and MPI
    /// was not initialized at `MPI_THREAD_MULTIPLE`.
    pub unsafe fn from_raw(raw: ffi::MPI_Comm) -> Result<Self> {
        // SAFETY: as this function's own contract.
        let comm = unsafe { Self::adopt(raw) }?;
        comm.with_progress_options(ProgressOptions::from_env())
    }

    /// [`from_raw`](Self::from_raw) without the progress engine (communicators made from another
    /// share its engine instead).
    ///
    /// # Safety
    /// As [`from_raw`](Self::from_raw).
    pub(super) unsafe fn adopt(raw: ffi::MPI_Comm) -> Result<Self> {
        let comm = MpiComm {
            raw,
            rank: 0,
            size: 0,
            checked: checked::enabled_by_default(),
            tag_ub: 32767,
            timeout: deadline::timeout_from_env(),
            health: Health::default(),
            progress: None,
            _not_send: PhantomData,
        };
        // From here on `comm` frees the handle on every path.
        let mut comm = comm;
        // SAFETY: `raw` is a valid communicator (caller's promise); RSMPI_ERRORS_RETURN is a constant.
        raw::check("dup", unsafe {
            ffi::MPI_Comm_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN)
        })?;
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: valid communicator and out-pointers.
        raw::check("dup", unsafe { ffi::MPI_Comm_rank(raw, &mut rank) })?;
        // SAFETY: valid communicator and out-pointers.
        raw::check("dup", unsafe { ffi::MPI_Comm_size(raw, &mut size) })?;
        comm.rank = rank as usize;
        comm.size = size as usize;
        let mut value: *mut c_int = std::ptr::null_mut();
        let mut flag: c_int = 0;
        // SAFETY: for MPI_TAG_UB, MPI stores a pointer to an int in `value` when `flag` is set.
        let rc = unsafe {
            ffi::MPI_Comm_get_attr(
                raw,
                raw::tag_ub_key(),
                (&mut value as *mut *mut c_int).cast::<c_void>(),
                &mut flag,
            )
        };
        if rc == 0 && flag != 0 && !value.is_null() {
            // SAFETY: MPI returned a pointer to its (static) tag upper bound.
            comm.tag_ub = unsafe { *value };
        }
        Ok(comm)
    }

    /// The raw `MPI_Comm` handle (still owned by `self`), for calls this crate does not wrap.
    pub fn as_raw(&self) -> ffi::MPI_Comm {
        self.raw
    }

    /// Switch checked mode on or off for this communicator (overrides `COLLECTIVES_CHECK`, whose
    /// default is on in debug builds): the setting of a communicator that is not wrapped.
    /// [`Checked::new`](crate::Checked::new) is the explicit way to have checked mode whatever
    /// this setting, the build and the environment say (see [`crate::checked`]).
    ///
    /// Every rank must use the same setting. Communicators made from this one (`split`, `dup`)
    /// inherit it.
    #[must_use]
    pub fn with_checked(mut self, on: bool) -> Self {
        self.checked = on;
        self
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // used by the device backends
    pub(crate) fn set_checked(&mut self, on: bool) {
        self.checked = on;
    }

    /// Set the deadline in place (a device communicator gives its host side its own deadline).
    #[cfg(feature = "nccl")]
    pub(crate) fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// This communicator's checked-mode flag ([`with_checked`](Self::with_checked), else
    /// `COLLECTIVES_CHECK`): whether it agrees on its own, and whether the device communicators
    /// built on it do.
    pub(crate) fn checked_by_flag(&self) -> bool {
        self.checked
    }

    /// Give blocking operations and waits a deadline (`Some`), or none (`None`: MPI's blocking calls);
    /// overrides `COLLECTIVES_TIMEOUT`. See the [type documentation](Self) for what changes. Every rank
    /// must use a deadline or none; communicators made from this one (`split`, `dup`, the device
    /// backends' `from_mpi`/`new`) inherit it.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The deadline of blocking operations and waits, if there is one.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Turn the progress engine on (with [`ProgressOptions::default`]: yield between probes) or
    /// off; overrides `COLLECTIVES_PROGRESS`. A local call: ranks may differ. Communicators made
    /// from this one afterwards (`split`, `dup`, the device backends' `from_mpi`/`new`) share its
    /// engine. See the [`progress`](super::progress) module for what it does and costs.
    ///
    /// MPI must have been initialized at `MPI_THREAD_MULTIPLE`:
    /// `mpi::initialize_with_threading(mpi::Threading::Multiple)`.
    ///
    /// # Errors
    /// [`Error::ThreadLevel`](crate::Error::ThreadLevel) when MPI provides a lower thread level;
    /// [`Error::Mpi`](crate::Error::Mpi) when the engine's private communicator cannot be made;
    /// [`Error::Unavailable`](crate::Error::Unavailable) when its thread cannot be started. The
    /// communicator is dropped with the error.
    pub fn with_progress(self, on: bool) -> Result<Self> {
        self.with_progress_options(on.then(ProgressOptions::default))
    }

    /// Turn the progress engine on with `options`, or off with `None`; see
    /// [`with_progress`](Self::with_progress).
    ///
    /// # Errors
    /// As [`with_progress`](Self::with_progress).
    pub fn with_progress_options(mut self, options: Option<ProgressOptions>) -> Result<Self> {
        // The old engine (if any) stops when its last communicator lets go of it; no operation
        // can be in flight here, since `self` is not borrowed.
        self.progress = None;
        if let Some(options) = options {
            self.progress = Some(Rc::new(Engine::start(options)?));
        }
        Ok(self)
    }

    /// The progress engine's options, when it is on.
    pub fn progress_options(&self) -> Option<ProgressOptions> {
        self.progress.as_ref().map(|e| e.options())
    }

    /// What the progress engine has done so far (operations in flight, probes made), when it is on.
    pub fn progress_stats(&self) -> Option<ProgressStats> {
        self.progress.as_ref().map(|e| e.stats())
    }

    /// The same engine as `parent`'s (a communicator made from it).
    pub(super) fn sharing_progress(mut self, parent: &MpiComm) -> Self {
        self.progress = parent.progress.clone();
        self
    }

    /// A ticket counting one operation in flight for the progress engine, when it is on.
    fn ticket(&self) -> Option<InFlight> {
        self.progress.as_ref().map(|e| e.ticket())
    }

    /// Whether the communicator may still be used: `false` once an operation on it (or on a device
    /// communicator built on it) timed out, after which every operation returns
    /// [`Error::Unusable`](crate::Error::Unusable).
    pub fn is_usable(&self) -> bool {
        self.health.is_usable()
    }

    /// Share `other`'s health, so that a timeout in either refuses both (the duplicates that make up
    /// one device communicator).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // used by the device backends
    pub(crate) fn linked_to(mut self, other: &MpiComm) -> Self {
        self.health = other.health.clone();
        self
    }

    /// [`Error::Unusable`](crate::Error::Unusable) once an operation on this communicator timed out.
    pub(crate) fn ensure_usable(&self, op: &'static str) -> Result<()> {
        self.health.check(op)
    }

    /// Refuse this communicator from now on, because `op` of a device communicator built on it
    /// timed out after `after` (or, with `("abort", 0)`, because it was aborted); the first refusal
    /// is kept. Returns the [`Error::Timeout`](crate::Error::Timeout) to report.
    #[cfg(feature = "nccl")]
    pub(crate) fn refuse(&self, op: &'static str, after: Duration) -> crate::Error {
        self.health.timed_out(op, after)
    }

    /// Make one MPI operation and complete it: the blocking call without a deadline; under one, its
    /// non-blocking twin on copies of `regions`, polled until the deadline (see the
    /// [`request`](super::request) module). The status is the blocking call's, or the completed
    /// request's.
    ///
    /// # Errors
    /// [`Error::Unusable`](crate::Error::Unusable) after an earlier timeout;
    /// [`Error::Timeout`](crate::Error::Timeout) (and the communicator refused from then on);
    /// [`Error::Mpi`](crate::Error::Mpi).
    ///
    /// # Safety
    /// `call(p, form)` makes exactly one MPI call on this communicator: with [`Form::Blocking`] the
    /// blocking operation (a receive stores its status there), with [`Form::Start`] its non-blocking
    /// twin, which stores its request there. Its buffer arguments are `p[k]` for `regions[k]`, in
    /// order, with counts and datatypes that fit each region's length; every other argument is valid
    /// for the call.
    pub(crate) unsafe fn run<const N: usize>(
        &self,
        op: &'static str,
        regions: [Region<'_>; N],
        call: impl FnOnce([*mut c_void; N], Form<'_>) -> c_int,
    ) -> Result<ffi::MPI_Status> {
        self.health.check(op)?;
        let mut status = raw::status();
        let Some(timeout) = self.timeout else {
            raw::check(
                op,
                call(regions.map(Region::direct), Form::Blocking(&mut status)),
            )?;
            return Ok(status);
        };
        let (staging, p) = Staging::new(regions);
        let mut request = [new_request()];
        // A call that fails starts nothing, so the copies may be freed.
        raw::check(op, call(p, Form::Start(&mut request[0])))?;
        let mut status = [status];
        self.complete(op, staging, &mut request, &mut status, timeout)?;
        Ok(status[0])
    }

    /// `MPI_Sendrecv`, or under a deadline `MPI_Irecv` and `MPI_Isend` on copies, polled together
    /// (MPI 3.1 has no `MPI_Isendrecv`). Returns the receive's status.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    ///
    /// # Safety
    /// `send` holds `sn` and `recv` has room for `rn` elements of datatype `dt`; `dest`, `source` and
    /// `tag` are valid for this communicator.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn exchange(
        &self,
        op: &'static str,
        (send, sn, dest): (Region<'_>, c_int, c_int),
        (recv, rn, source): (Region<'_>, c_int, c_int),
        dt: ffi::MPI_Datatype,
        tag: c_int,
    ) -> Result<ffi::MPI_Status> {
        self.health.check(op)?;
        let mut status = [raw::status(), raw::status()];
        let Some(timeout) = self.timeout else {
            let (s, r) = (send.direct(), recv.direct());
            // SAFETY: buffers, counts, ranks and tag as the caller promises; a valid out-pointer.
            raw::check(op, unsafe {
                ffi::MPI_Sendrecv(
                    s,
                    sn,
                    dt,
                    dest,
                    tag,
                    r,
                    rn,
                    dt,
                    source,
                    tag,
                    self.raw,
                    &mut status[0],
                )
            })?;
            return Ok(status[0]);
        };
        let (staging, p) = Staging::new([send, recv]);
        let mut requests = [new_request(), new_request()];
        // SAFETY: the receive into the copy of `recv` (room for `rn` elements), as the caller promises.
        raw::check(op, unsafe {
            ffi::MPI_Irecv(p[1], rn, dt, source, tag, self.raw, &mut requests[0])
        })?;
        // SAFETY: the send of the copy of `send` (`sn` elements), as the caller promises.
        let sent = raw::check(op, unsafe {
            ffi::MPI_Isend(p[0], sn, dt, dest, tag, self.raw, &mut requests[1])
        });
        if let Err(e) = sent {
            // The receive is in flight and will not be waited for: its copy must outlive it.
            staging.abandon();
            return Err(e);
        }
        self.complete(op, staging, &mut requests, &mut status, timeout)?;
        Ok(status[0])
    }

    /// Wait for requests started on `staging`'s copies against `timeout`: copy the results back when
    /// they complete; otherwise leave the copies to MPI for good, and refuse the communicator after a
    /// timeout.
    pub(super) fn complete(
        &self,
        op: &'static str,
        staging: Staging,
        requests: &mut [ffi::MPI_Request],
        statuses: &mut [ffi::MPI_Status],
        timeout: Duration,
    ) -> Result<()> {
        match wait_requests(op, requests, statuses, Some(timeout)) {
            Ok(true) => {
                staging.finish();
                Ok(())
            }
            Ok(false) => {
                staging.abandon();
                Err(self.health.timed_out(op, timeout))
            }
            Err(e) => {
                staging.abandon();
                Err(e)
            }
        }
    }

    /// Start one non-blocking MPI operation: on `regions` themselves without a deadline, on copies
    /// under one (see [`run`](Self::run)); its wait honours the deadline.
    ///
    /// # Errors
    /// [`Error::Unusable`](crate::Error::Unusable) after an earlier timeout; [`Error::Mpi`](crate::Error::Mpi).
    ///
    /// # Safety
    /// `call(p, request)` makes exactly one non-blocking MPI call on this communicator, storing its
    /// request, with `p[k]` for `regions[k]` as in [`run`](Self::run). The memory of `regions` stays
    /// borrowed for `'s` (the pending operation completes before `'s` ends).
    pub(crate) unsafe fn start<'s, T: Element, const N: usize>(
        &self,
        op: &'static str,
        regions: [Region<'_>; N],
        call: impl FnOnce([*mut c_void; N], &mut ffi::MPI_Request) -> c_int,
    ) -> Result<MpiPending<'s, T>> {
        let (deadline, p) = self.staged(op, regions)?;
        let mut request = new_request();
        raw::check(op, call(p, &mut request))?;
        Ok(self.pending(request, op, deadline))
    }

    /// What every start begins with: the health check, then the addresses MPI gets for `regions`
    /// (the regions themselves without a deadline, copies under one) and, under a deadline, the
    /// copies with it, for the pending operation to wait on.
    pub(super) fn staged<const N: usize>(
        &self,
        op: &'static str,
        regions: [Region<'_>; N],
    ) -> Result<(Deadline, [*mut c_void; N])> {
        self.health.check(op)?;
        Ok(match self.timeout {
            None => (None, regions.map(Region::direct)),
            Some(timeout) => {
                let (staging, p) = Staging::new(regions);
                (Some((staging, timeout)), p)
            }
        })
    }

    /// The pending operation of `request`, started under `deadline` (see [`staged`](Self::staged))
    /// and tracked by this communicator.
    fn pending<'s, T: Element>(
        &self,
        request: ffi::MPI_Request,
        op: &'static str,
        deadline: Deadline,
    ) -> MpiPending<'s, T> {
        MpiPending::with_deadline(request, op, deadline, self.health.clone()).tracked(self.ticket())
    }

    /// Start a receive into `recv` and a send of `send` as one pending operation (MPI 3.1 has no
    /// `MPI_Isendrecv`): on the buffers themselves without a deadline, on copies under one. The
    /// receive's request comes first, so its length is what [`MpiPending::expect`] checks.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    ///
    /// # Safety
    /// `send` holds `sn` and `recv` has room for `rn` elements of datatype `dt`; `dest`, `source` and
    /// `tag` are valid for this communicator; the memory of both regions stays borrowed for `'s`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn start_pair<'s, T: Element>(
        &self,
        op: &'static str,
        (send, sn, dest): (Region<'_>, c_int, c_int),
        (recv, rn, source): (Region<'_>, c_int, c_int),
        dt: ffi::MPI_Datatype,
        tag: c_int,
    ) -> Result<MpiPending<'s, T>> {
        let (deadline, p) = self.staged(op, [send, recv])?;
        let mut rreq = new_request();
        // SAFETY: `p[1]` has room for `rn` elements of `dt` (the caller's promise, or its copy).
        raw::check(op, unsafe {
            ffi::MPI_Irecv(p[1], rn, dt, source, tag, self.raw, &mut rreq)
        })?;
        let mut sreq = new_request();
        // SAFETY: `p[0]` holds `sn` elements of `dt` (the caller's promise, or its copy).
        let rc = unsafe { ffi::MPI_Isend(p[0], sn, dt, dest, tag, self.raw, &mut sreq) };
        if rc != 0 {
            // The receive is in flight on memory freed on return: cancel it and wait for the
            // cancellation before reporting the send's error.
            let mut status = raw::status();
            // SAFETY: `rreq` came from the successful MPI_Irecv above; a valid out-pointer.
            unsafe {
                ffi::MPI_Cancel(&mut rreq);
                ffi::MPI_Wait(&mut rreq, &mut status);
            }
            return Err(raw::error(op, rc));
        }
        let mut pending = self.pending(rreq, op, deadline);
        pending.requests.push(sreq);
        Ok(pending)
    }

    /// Under a deadline, meet the other ranks in a polled barrier before a call that has no
    /// non-blocking twin (`split`, `dup`), so that a missing peer is a timeout. Checked mode's
    /// agreement is that meeting already; outside it [`checked::pass`] calls this.
    pub(crate) fn arrive(&self, op: &'static str) -> Result<()> {
        if self.timeout.is_none() {
            return self.health.check(op);
        }
        // SAFETY: a barrier takes no buffer; both forms are made on this communicator.
        unsafe {
            self.run(op, [], |_, form| match form {
                Form::Blocking(_) => ffi::MPI_Barrier(self.raw),
                Form::Start(request) => ffi::MPI_Ibarrier(self.raw, request),
            })
        }
        .map(drop)
    }

    /// The ranks of this communicator that share this rank's node (`MPI_Comm_split_type` with
    /// `MPI_COMM_TYPE_SHARED`), ordered as here, with checked mode off. Collective: every rank
    /// calls it.
    ///
    /// The device backends use it to pick a GPU per node-local rank; code built on them uses it to
    /// find the ranks it can reach through shared or CUDA IPC memory.
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) from the split.
    pub fn split_shared(&self) -> Result<MpiComm> {
        const OP: &str = "split_shared";
        // SAFETY: an MPI_Comm handle may start as any value; MPI_Comm_split_type overwrites it.
        let mut local: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: a valid communicator, constants from rsmpi's shim, a valid out-pointer.
        raw::check(OP, unsafe {
            ffi::MPI_Comm_split_type(
                self.raw,
                ffi::RSMPI_COMM_TYPE_SHARED,
                self.rank as c_int,
                ffi::RSMPI_INFO_NULL,
                &mut local,
            )
        })?;
        // SAFETY: `local` was just created for this rank and is owned by nobody else.
        Ok(unsafe { MpiComm::adopt(local) }?
            .with_checked(false)
            .sharing_progress(self))
    }

    /// The largest tag this MPI accepts (`MPI_TAG_UB`).
    pub fn tag_ub(&self) -> i32 {
        self.tag_ub
    }

    /// Free the communicator now, reporting errors.
    ///
    /// A communicator refused after a timeout ([`is_usable`](Self::is_usable) is `false`) is not freed:
    /// its timed-out operation is still in flight inside MPI and uses it. The handle is left to MPI
    /// (and to `MPI_Finalize`/`MPI_Abort`), and this returns `Ok(())`; dropping does the same.
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) from `MPI_Comm_free`.
    pub fn finalize(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so its health is moved out exactly once.
        let health = unsafe { std::ptr::read(&this.health) };
        // SAFETY: as for `health`: moved out exactly once; the engine stops here if this was the
        // last communicator sharing it.
        drop(unsafe { std::ptr::read(&this.progress) });
        if !health.is_usable() {
            return Ok(());
        }
        let mut raw = this.raw;
        // SAFETY: `raw` is owned by the communicator that was just consumed, so nothing else frees it.
        raw::check("finalize", unsafe { ffi::MPI_Comm_free(&mut raw) })
    }

    /// All-gather `mine` (the same length on every rank) into `table`, rank by rank: checked
    /// mode's exchange ([`checked::agree`]), polled against the deadline like any operation.
    pub(crate) fn all_gather_i64(
        &self,
        op: &'static str,
        mine: &[i64],
        table: &mut [i64],
    ) -> Result<()> {
        let n = raw::count(op, mine.len())?;
        debug_assert_eq!(table.len(), mine.len() * self.size);
        let dt = raw::datatype::<i64>();
        // SAFETY: `mine` holds `n` i64 and `table` holds `n` per rank (allocated by the caller for this
        // communicator's size); the datatype is i64's; both forms on this communicator.
        unsafe {
            self.run(
                op,
                [Region::send(mine), Region::recv(table)],
                |p, form| match form {
                    Form::Blocking(_) => ffi::MPI_Allgather(p[0], n, dt, p[1], n, dt, self.raw),
                    Form::Start(r) => ffi::MPI_Iallgather(p[0], n, dt, p[1], n, dt, self.raw, r),
                },
            )
        }
        .map(drop)
    }
}

impl Drop for MpiComm {
    fn drop(&mut self) {
        let mut finalized: c_int = 0;
        // SAFETY: MPI_Finalized may be called at any time, even after MPI_Finalize.
        unsafe { ffi::MPI_Finalized(&mut finalized) };
        // After a timeout the communicator stays allocated: an operation in flight inside MPI uses it.
        if finalized == 0 && self.health.is_usable() {
            // SAFETY: the handle is owned by this communicator and freed only here; errors are ignored
            // because a drop must not panic (`finalize` reports them).
            unsafe { ffi::MPI_Comm_free(&mut self.raw) };
        }
    }
}
