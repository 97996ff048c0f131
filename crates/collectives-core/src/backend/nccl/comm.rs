//! [`NcclComm`]: creation from MPI, waiting with a deadline, abort, teardown, groups.

use std::cell::{Cell, RefCell};
use std::ffi::c_int;
use std::fmt;
use std::sync::Arc;
use std::sync::Once;
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use nccl_sys as sys;

use super::aborts;
use super::one_shot::OneShotSlot;
use super::raw;
use crate::backend::cuda_common::{self, cuda_driver_present, node_local};
use crate::backend::mpi_host::MpiComm;
use crate::comm::{Communicator, DeviceCommunicator};
use crate::deadline::{self, Polled};
use crate::error::{Error, Result};
use crate::exchange::ExchangePart;
use crate::op::ReduceOp;

/// The deadline of NCCL waits: `COLLECTIVES_TIMEOUT` seconds, parsed as for the MPI backends
/// ([`crate::deadline::timeout_from_env`]), else 300 s.
fn default_timeout() -> Duration {
    crate::deadline::timeout_from_env().unwrap_or(Duration::from_secs(300))
}

/// The refusal recorded by a call to [`NcclComm::abort`] (no deadline was involved).
const ABORTED_BY_CALL: (&str, Duration) = ("abort", Duration::ZERO);

/// How [`NcclComm::abort_handles`] runs `ncclCommAbort`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Abort {
    /// On the calling thread, returning when the handles are freed.
    Now,
    /// On a thread of its own, joined when the communicator is dropped.
    InBackground,
}

/// NCCL's switch for connecting each algorithm's peers at its first use instead of at creation.
pub const RUNTIME_CONNECT_ENV: &str = "NCCL_RUNTIME_CONNECT";

/// Ask NCCL to connect every algorithm's peers while a communicator is created, unless the user
/// chose otherwise by setting [`RUNTIME_CONNECT_ENV`].
///
/// Since 2.22 NCCL connects an algorithm (ring, tree, ...) on a blocking communicator when a
/// collective first needs it, inside that call and out of reach of any deadline: with a silent
/// peer, the host blocks there for good. Creation is non-blocking and has the deadline, so
/// connections are made there. NCCL reads the variable once, when its first communicator is made.
fn connect_at_creation() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os(RUNTIME_CONNECT_ENV).is_none() {
            std::env::set_var(RUNTIME_CONNECT_ENV, "0");
        }
    });
}

/// A communicator of the NCCL backend: collectives on device memory (`CudaSlice<T>` buffers).
///
/// ```no_run
/// use collectives_core::{Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp};
///
/// let universe = mpi::initialize().expect("MPI initializes once");
/// let world = MpiComm::world(&universe)?;
/// let comm = NcclComm::from_mpi(&world, None)?;
/// let stream = comm.stream().clone();
/// let mut x = stream.clone_htod(&vec![1.0f32; 1 << 20]).expect("device memory");
/// comm.all_reduce_in_place(&mut x, ReduceOp::Sum)?;
/// comm.synchronize()?;
/// # Ok::<(), collectives_core::Error>(())
/// ```
pub struct NcclComm {
    pub(super) lib: &'static sys::Library,
    pub(super) raw: sys::ncclComm_t,
    /// The non-blocking communicator this one was split from at creation (null for splits).
    pub(super) init_parent: sys::ncclComm_t,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    /// While a persistent plan is captured on a stream of its own (the legacy default stream
    /// cannot be captured), that stream: the raw operations enqueue there instead.
    pub(super) capturing: Cell<Option<sys::cudaStream_t>>,
    pub(super) rank: usize,
    pub(super) size: usize,
    /// The host side: checked-mode agreement, host barrier, bootstrap of splits.
    /// Its deadline is the communicator's, and its health is the communicator's: once anything on
    /// either side timed out (or [`NcclComm::abort`] was called) every later call is refused.
    pub(super) mpi: MpiComm,
    pub(super) timeout: Duration,
    /// Whether `ncclCommAbort` was called (the handles are freed).
    pub(super) aborted: Cell<bool>,
    /// The event [`synchronize`](DeviceCommunicator::synchronize) records and polls, made once.
    pub(super) sync_event: CudaEvent,
    /// The thread running `ncclCommAbort` after a timeout, joined on drop.
    pub(super) aborting: RefCell<Option<std::thread::JoinHandle<()>>>,
    pub(super) uneven: UnevenAlgorithm,
    /// The one-shot all-reduce between NVLink peers, where offered ([`super::one_shot`]).
    pub(super) one_shot: OneShotSlot,
}

/// How `all_gather_v` moves its blocks. Both ways use no device memory beyond the two buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnevenAlgorithm {
    /// By rank count and size: grouped send/recv on up to [`UnevenAlgorithm::P2P_UP_TO_RANKS`] ranks
    /// at every size (on 2xH200 it was as fast as broadcasts or faster from 1 KiB to 1 GiB,
    /// docs/PERFORMANCE.md); on more ranks, one broadcast per rank from
    /// [`UnevenAlgorithm::BROADCASTS_FROM`] bytes in all (UCC's threshold; not yet measured here).
    Auto,
    /// Every rank sends its block to every other, all in one group.
    GroupedP2p,
    /// One broadcast per rank, in place into the receive buffer, all in one group.
    Broadcasts,
}

impl UnevenAlgorithm {
    /// Total size (bytes over all ranks) from which [`UnevenAlgorithm::Auto`] uses broadcasts on
    /// more than [`UnevenAlgorithm::P2P_UP_TO_RANKS`] ranks.
    pub const BROADCASTS_FROM: usize = 1 << 20;
    /// Up to this many ranks [`UnevenAlgorithm::Auto`] always uses grouped send/recv.
    pub const P2P_UP_TO_RANKS: usize = 2;

    /// The algorithm for `total_bytes` in all over `ranks` ranks.
    pub fn choose(self, ranks: usize, total_bytes: usize) -> UnevenAlgorithm {
        match self {
            UnevenAlgorithm::Auto
                if ranks > Self::P2P_UP_TO_RANKS && total_bytes >= Self::BROADCASTS_FROM =>
            {
                UnevenAlgorithm::Broadcasts
            }
            UnevenAlgorithm::Auto => UnevenAlgorithm::GroupedP2p,
            fixed => fixed,
        }
    }
}

impl fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NcclComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("device", &self.ctx.ordinal())
            .field("nccl", &self.lib.version())
            .field("checked", &self.mpi.checked())
            .finish_non_exhaustive()
    }
}

impl NcclComm {
    /// An NCCL communicator over the ranks of `mpi`, one GPU per rank: `device`, or the GPU of this
    /// rank's node-local index. Collective over `mpi`.
    ///
    /// # Errors
    /// [`Error::Unavailable`] without libnccl or a CUDA driver; [`Error::InvalidArgument`] when the
    /// device does not exist or two ranks of a node would share a GPU (on every rank);
    /// [`Error::Timeout`] when initialization does not finish in time; [`Error::Nccl`] and
    /// [`Error::Cuda`] from the libraries.
    pub fn from_mpi(mpi: &MpiComm, device: Option<usize>) -> Result<Self> {
        const OP: &str = "from_mpi";
        let _span = tracing::debug_span!("nccl_from_mpi").entered();
        let mut mpi = mpi.dup()?;
        mpi.set_timeout(Some(default_timeout()));
        // Everything that can fail on one rank only is agreed on before anyone waits for the others.
        let local = Self::prepare(&mpi, device);
        let ok = [u8::from(local.is_ok())];
        let mut all_ok = [0u8];
        mpi.all_reduce(&ok[..], &mut all_ok[..], ReduceOp::Min)?;
        let (lib, ctx) = local?;
        if all_ok[0] == 0 {
            return Err(Error::invalid(
                OP,
                "another rank could not set up NCCL (see its error)",
            ));
        }
        let mut id = [0u8; sys::NCCL_UNIQUE_ID_BYTES];
        if mpi.rank() == 0 {
            let mut uid = sys::ncclUniqueId {
                internal: [0; sys::NCCL_UNIQUE_ID_BYTES],
            };
            let f = sys::nccl_fn!(lib, ncclGetUniqueId).map_err(raw::unavailable)?;
            // SAFETY: `uid` is a valid out-pointer to an ncclUniqueId.
            let rc = unsafe { f(&mut uid) };
            if rc != sys::ncclSuccess {
                return Err(raw::with_bootstrap_hint(raw::error(
                    lib,
                    std::ptr::null_mut(),
                    OP,
                    rc,
                )));
            }
            for (d, s) in id.iter_mut().zip(uid.internal.iter()) {
                *d = *s as u8;
            }
        }
        mpi.broadcast(&mut id[..], 0)?;
        let mut uid = sys::ncclUniqueId {
            internal: [0; sys::NCCL_UNIQUE_ID_BYTES],
        };
        for (d, s) in uid.internal.iter_mut().zip(id.iter()) {
            *d = *s as _;
        }
        let stream = default_stream(&ctx);
        let sync_event = ctx.new_event(None).map_err(|e| Error::cuda(OP, e))?;
        let mut config = sys::config_initializer();
        config.blocking = 0;
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        let f = sys::nccl_fn!(lib, ncclCommInitRankConfig).map_err(raw::unavailable)?;
        // SAFETY: `comm` and `config` are valid pointers; the id is the one rank 0 created, the rank is
        // in range and the size is the MPI communicator's; the device is bound to this thread.
        let rc = unsafe {
            f(
                &mut comm,
                mpi.size() as c_int,
                uid,
                mpi.rank() as c_int,
                &mut config,
            )
        };
        let mut made = NcclComm {
            lib,
            raw: comm,
            init_parent: std::ptr::null_mut(),
            ctx,
            stream,
            capturing: Cell::new(None),
            rank: mpi.rank(),
            size: mpi.size(),
            mpi,
            timeout: default_timeout(),
            aborted: Cell::new(comm.is_null()),
            sync_event,
            aborting: RefCell::new(None),
            uneven: UnevenAlgorithm::Auto,
            one_shot: OneShotSlot::off("not set up yet"),
        };
        // Initialization is the bootstrap: its NCCL errors say which interface and what to set.
        made.settle_async(OP, rc)
            .map_err(raw::with_bootstrap_hint)?;
        // A non-blocking communicator hands every call to an asynchronous job (tens of microseconds
        // each), so the work is done on a blocking child split from it; the parent, whose creation
        // had the deadline, is kept only to be freed with the child.
        let mut child_config = sys::config_initializer();
        child_config.blocking = 1;
        let mut child: sys::ncclComm_t = std::ptr::null_mut();
        let split = sys::nccl_fn!(lib, ncclCommSplit).map_err(raw::unavailable)?;
        // SAFETY: a live communicator; `child` and `child_config` outlive the split, which completes
        // (the parent's asynchronous state is polled to success) before either is read or dropped.
        let rc = unsafe {
            split(
                made.raw,
                0,
                made.rank as c_int,
                &mut child,
                &mut child_config,
            )
        };
        made.settle_async(OP, rc)?;
        if child.is_null() {
            return Err(Error::invalid(
                OP,
                "NCCL returned no communicator from the split",
            ));
        }
        made.init_parent = std::mem::replace(&mut made.raw, child);
        made.connect_peers(OP)?;
        made.set_up_one_shot()?;
        Ok(made)
    }

    /// Connect every peer now, while every rank is known to be here: a blocking communicator connects
    /// on the host inside the first call that needs a connection, and waits there for the peer,
    /// out of reach of any deadline. NCCL connects the collectives' algorithms at creation
    /// ([`connect_at_creation`]); one all-reduce checks that they work, and one grouped exchange of a
    /// byte with every other rank connects the point-to-point channels (NCCL connects all of a
    /// peer's channels at its first transfer, whatever its size). Waited for with the deadline.
    pub(super) fn connect_peers(&self, op: &'static str) -> Result<()> {
        let mut one = self
            .stream
            .alloc_zeros::<f32>(1)
            .map_err(|e| Error::cuda(op, e))?;
        self.enqueue_all_reduce(op, None, &mut one, ReduceOp::Sum, 1)?;
        if self.size > 1 {
            let byte = self
                .stream
                .alloc_zeros::<u8>(1)
                .map_err(|e| Error::cuda(op, e))?;
            let mut bytes = self
                .stream
                .alloc_zeros::<u8>(self.size)
                .map_err(|e| Error::cuda(op, e))?;
            self.exchange_with_every_peer(op, &byte, &mut bytes)?;
        }
        self.wait_for_stream(op)
    }

    fn prepare(
        mpi: &MpiComm,
        device: Option<usize>,
    ) -> Result<(&'static sys::Library, Arc<CudaContext>)> {
        const OP: &str = "from_mpi";
        let lib = raw::library()?;
        connect_at_creation();
        if !cuda_driver_present() {
            return Err(Error::Unavailable {
                what: "the CUDA driver",
                message: "libcuda could not be opened".into(),
            });
        }
        let count = CudaContext::device_count()
            .map_err(|e| Error::cuda(OP, e))?
            .max(0) as usize;
        let (local_rank, local_size) = node_local(mpi)?;
        let device = match device {
            Some(d) => d,
            None if local_size > count => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "{local_size} ranks on this node but {count} GPU(s): two ranks on one GPU are not \
                         supported by NCCL; start at most {count} rank(s) per node"
                    ),
                ))
            }
            None => local_rank,
        };
        if device >= count {
            return Err(Error::invalid(
                OP,
                format!("device {device} does not exist ({count} GPU(s) visible)"),
            ));
        }
        let ctx = CudaContext::new(device).map_err(|e| Error::cuda(OP, e))?;
        ctx.bind_to_thread().map_err(|e| Error::cuda(OP, e))?;
        Ok((lib, ctx))
    }

    /// The raw `ncclComm_t` (still owned by `self`). After [`abort`](Self::abort) (also the one a
    /// timeout makes) NCCL has freed it: check [`is_aborted`](Self::is_aborted) before using it.
    pub fn as_raw(&self) -> sys::ncclComm_t {
        self.raw
    }

    /// Whether the communicator was aborted (by [`abort`](Self::abort) or after a timeout); every
    /// later operation returns an error instead of reaching NCCL.
    pub fn is_aborted(&self) -> bool {
        self.aborted.get()
    }

    /// [`Error::Unusable`] once anything on this communicator timed out or it was aborted: its
    /// NCCL handle is then freed and must not reach NCCL. A timeout on the host side (checked mode's
    /// agreement, the meeting before a split) aborts the NCCL side here, at the next call.
    pub(super) fn ensure_live(&self, op: &'static str) -> Result<()> {
        if self.aborted.get() {
            // Aborted without a refusal of its own (a creation that returned no handle).
            let (by, after) = ABORTED_BY_CALL;
            let _ = self.mpi.refuse(by, after);
        }
        let refused = self.mpi.ensure_usable(op);
        if refused.is_err() {
            self.abort_nccl();
        }
        refused
    }

    /// The loaded NCCL library.
    pub fn library(&self) -> &'static sys::Library {
        self.lib
    }

    /// Switch checked mode on or off (overrides `COLLECTIVES_CHECK`, whose default is on in debug
    /// builds); every rank must agree. This is the setting of a communicator that is not wrapped:
    /// [`Checked::new`](crate::Checked::new) is the explicit way to have checked mode whatever it
    /// says (see [`crate::checked`]).
    #[must_use]
    pub fn with_checked(mut self, on: bool) -> Self {
        self.mpi.set_checked(on);
        self
    }

    /// Set the deadline of waits (default `COLLECTIVES_TIMEOUT` seconds, else 300 s), also of the
    /// host side's waits (checked mode's agreement, the meeting before a split). Every rank must set
    /// one (the durations may differ).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.mpi.set_timeout(Some(timeout));
        self.one_shot.set_timeout(timeout);
        self
    }

    /// Choose how `all_gather_v` moves its blocks (default [`UnevenAlgorithm::Auto`]).
    #[must_use]
    pub fn with_uneven_algorithm(mut self, algorithm: UnevenAlgorithm) -> Self {
        self.uneven = algorithm;
        self
    }

    /// The deadline of waits.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Block on the host until every rank has called it (an MPI barrier; no device work is ordered).
    ///
    /// # Errors
    /// MPI errors.
    pub fn host_barrier(&self) -> Result<()> {
        self.mpi.barrier()
    }

    /// Poll `done` until it says yes, checking NCCL's asynchronous error at every poll, with the
    /// deadline, through the one waiting loop ([`deadline::poll`]: it spins while a small message
    /// could still complete, then yields the core, and never sleeps). When the deadline passes the
    /// communicator is refused from then on and aborted, and the wait returns [`Error::Timeout`].
    pub(super) fn wait_for(
        &self,
        op: &'static str,
        mut done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        let polled = deadline::poll(self.timeout, || {
            if done()? {
                return Ok(true);
            }
            self.async_error(op)?;
            Ok::<bool, Error>(false)
        })?;
        match polled {
            // A one-shot kernel that gave up waiting for a peer leaves its stream complete: the
            // timeout is its.
            Polled::Done if !self.one_shot.failed() => Ok(()),
            Polled::Done | Polled::TimedOut => {
                let timeout = self.mpi.refuse(op, self.timeout);
                self.abort_nccl();
                Err(timeout)
            }
        }
    }

    /// Wait with the deadline until the work enqueued so far on the stream is complete (the one
    /// host wait of [`synchronize`](DeviceCommunicator::synchronize), a barrier and creation).
    pub(super) fn wait_for_stream(&self, op: &'static str) -> Result<()> {
        self.ensure_live(op)?;
        self.sync_event
            .record(&self.stream)
            .map_err(|e| Error::cuda(op, e))?;
        let event = &self.sync_event;
        self.wait_for(op, || {
            event.try_is_complete().map_err(|e| Error::cuda(op, e))
        })
    }

    /// The communicator's asynchronous error, if any (`ncclInProgress` counts as none); one ends
    /// the communicator (refused from then on, and aborted).
    pub(super) fn async_error(&self, op: &'static str) -> Result<()> {
        self.ensure_live(op)?;
        let f = sys::nccl_fn!(self.lib, ncclCommGetAsyncError).map_err(raw::unavailable)?;
        let mut state: sys::ncclResult_t = sys::ncclSuccess;
        // SAFETY: a live (not aborted) communicator and a valid out-pointer.
        let rc = unsafe { f(self.raw, &mut state) };
        if rc != sys::ncclSuccess {
            return Err(raw::error(self.lib, self.raw, op, rc));
        }
        if state == sys::ncclSuccess || state == sys::ncclInProgress {
            Ok(())
        } else {
            // NCCL asks for an abort after an asynchronous error (a peer that exited, a broken
            // connection: what the network transport sees before any deadline passes). The error
            // is read before the abort frees the handle; later calls are refused.
            let error = raw::error(self.lib, self.raw, op, state);
            let _ = self.mpi.refuse(op, Duration::ZERO);
            self.abort_nccl();
            Err(error)
        }
    }

    /// The [`Error::Nccl`] for `code`, a result a raw NCCL call on this communicator returned
    /// (its name from `ncclGetErrorString`, the communicator's `ncclGetLastError`), for callers
    /// that make NCCL calls of their own on [`as_raw`](Self::as_raw).
    pub fn error(&self, op: &'static str, code: sys::ncclResult_t) -> Error {
        raw::error(self.lib, self.raw, op, code)
    }

    /// Turn a call's result into a `Result`; `ncclInProgress` is waited out with the deadline.
    pub(super) fn settle(&self, op: &'static str, rc: sys::ncclResult_t) -> Result<()> {
        match rc {
            sys::ncclSuccess => Ok(()),
            sys::ncclInProgress => self.settle_async(op, rc),
            bad => Err(raw::error(self.lib, self.raw, op, bad)),
        }
    }

    /// After a call on a non-blocking communicator: NCCL wants its asynchronous state seen as
    /// `ncclSuccess` (also when the call itself returned `ncclSuccess`) before the next call.
    pub(super) fn settle_async(&self, op: &'static str, rc: sys::ncclResult_t) -> Result<()> {
        match rc {
            sys::ncclSuccess | sys::ncclInProgress => self.wait_for(op, || {
                let f = sys::nccl_fn!(self.lib, ncclCommGetAsyncError).map_err(raw::unavailable)?;
                let mut state: sys::ncclResult_t = sys::ncclSuccess;
                // SAFETY: a live communicator and a valid out-pointer.
                let rc = unsafe { f(self.raw, &mut state) };
                match (rc, state) {
                    (sys::ncclSuccess, sys::ncclInProgress) => Ok(false),
                    (sys::ncclSuccess, sys::ncclSuccess) => Ok(true),
                    (sys::ncclSuccess, bad) | (bad, _) => {
                        Err(raw::error(self.lib, self.raw, op, bad))
                    }
                }
            }),
            bad => Err(raw::error(self.lib, self.raw, op, bad)),
        }
    }

    /// Abort the communicator (`ncclCommAbort`): pending work is dropped, and every later call
    /// returns [`Error::Unusable`].
    pub fn abort(&self) {
        let (op, after) = ABORTED_BY_CALL;
        let _ = self.mpi.refuse(op, after);
        self.abort_handles(Abort::Now);
        self.join_abort();
    }

    /// `ncclCommAbort` on both handles, once. NCCL's kernels of this communicator stop at its abort
    /// flag, so the stream moves on to what was enqueued after them.
    ///
    /// After a timeout this runs on a thread of its own ([`Abort::InBackground`]), so that the wait
    /// returns at its deadline: `ncclCommAbort` stops each handle's proxy threads, which notice
    /// only at their next poll (every 500 ms), about 1 s for the two handles (measured on 2 H100).
    /// NCCL raises the abort flag first, so the stream moves on at once; dropping or finalizing the
    /// communicator waits for the thread, and so does the process's exit (at most 10 s) where the
    /// communicator is never dropped.
    fn abort_nccl(&self) {
        self.abort_handles(Abort::InBackground);
    }

    fn abort_handles(&self, how: Abort) {
        if self.aborted.replace(true) {
            return;
        }
        let Ok(f) = sys::nccl_fn!(self.lib, ncclCommAbort) else {
            return;
        };
        // Addresses, to cross to the thread; each is used once, by whichever side aborts.
        let handles = [self.raw, self.init_parent].map(|c| c as usize);
        let abort_all = move || {
            for comm in handles.into_iter().filter(|&c| c != 0) {
                // SAFETY: a live communicator (not yet destroyed or aborted: `aborted` was false),
                // never used again by its owner (`aborted` is now set and every call is refused),
                // aborted exactly once, here.
                unsafe { f(comm as sys::ncclComm_t) };
            }
        };
        if how == Abort::InBackground {
            let ctx = self.ctx.clone();
            // Counted until the abort returns, so that the process's exit waits for it where
            // this communicator is never dropped (see `aborts`).
            let running = aborts::Running::start();
            let spawned = std::thread::Builder::new()
                .name("nccl-abort".into())
                .spawn(move || {
                    let _ = ctx.bind_to_thread();
                    abort_all();
                    drop(running);
                });
            // Without a thread to be had (the closure went with the failed spawn, unrun), the
            // handles are aborted below, late rather than never.
            if let Ok(thread) = spawned {
                *self.aborting.borrow_mut() = Some(thread);
                return;
            }
        }
        for comm in [self.raw, self.init_parent] {
            if !comm.is_null() {
                // SAFETY: as above; the spawn that would have aborted failed before running.
                unsafe { f(comm) };
            }
        }
    }

    /// Wait for a background abort to finish (its handles are then freed).
    pub(super) fn join_abort(&self) {
        if let Some(thread) = self.aborting.borrow_mut().take() {
            let _ = thread.join();
        }
    }

    /// Start a group: NCCL calls made while the guard lives are launched together when it drops
    /// (`ncclGroupStart`/`ncclGroupEnd`).
    ///
    /// # Errors
    /// [`Error::Nccl`] from `ncclGroupStart`.
    pub fn group(&self) -> Result<GroupGuard<'_>> {
        GroupGuard::start(self)
    }

    /// Free the communicator after its work completes, reporting errors.
    ///
    /// # Errors
    /// As [`synchronize`](DeviceCommunicator::synchronize), and [`Error::Nccl`] from `ncclCommDestroy`.
    pub fn finalize(self) -> Result<()> {
        self.synchronize()?;
        let f = sys::nccl_fn!(self.lib, ncclCommDestroy).map_err(raw::unavailable)?;
        self.aborted.set(true);
        let mut result = Ok(());
        for comm in [self.raw, self.init_parent] {
            if comm.is_null() {
                continue;
            }
            // SAFETY: the communicator is live, its work is complete, and `aborted` keeps Drop from
            // touching it again.
            let rc = unsafe { f(comm) };
            if rc != sys::ncclSuccess && result.is_ok() {
                result = Err(raw::error(self.lib, std::ptr::null_mut(), "finalize", rc));
            }
        }
        result
    }
}

impl DeviceCommunicator for NcclComm {
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn mpi(&self) -> &MpiComm {
        &self.mpi
    }

    /// Always one: `COLLECTIVES_TIMEOUT`, else 300 s, or [`with_timeout`](NcclComm::with_timeout).
    fn deadline(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    /// Polls for NCCL errors while it waits; on expiry of the deadline aborts the communicator.
    fn synchronize(&self) -> Result<()> {
        self.wait_for_stream("synchronize")
    }

    fn with_stream(mut self, stream: Arc<CudaStream>) -> Result<Self> {
        cuda_common::switching_stream(&self, &stream)?;
        self.stream = stream;
        Ok(self)
    }

    /// One NCCL group of sends, then receives, enqueued on `stream`.
    unsafe fn exchange_bytes(
        &self,
        op: &'static str,
        stream: &CudaStream,
        send: u64,
        sends: &[ExchangePart],
        recv: u64,
        recvs: &[ExchangePart],
    ) -> Result<()> {
        // SAFETY: the trait method's contract, which is the group's.
        unsafe { self.grouped_exchange(op, stream, send, sends, recv, recvs) }
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        // Destroy after the work completes; when it cannot complete in time, abort instead, so a
        // drop never hangs on a dead peer and never panics. An abort started by a timeout is
        // waited for here (about 1 s), so the handles are freed before the context may go.
        if !self.aborted.get() {
            if self.synchronize().is_ok() {
                if let Ok(f) = sys::nccl_fn!(self.lib, ncclCommDestroy) {
                    for comm in [self.raw, self.init_parent] {
                        if !comm.is_null() {
                            // SAFETY: the communicator is live, its work is complete, and it is
                            // not used again.
                            unsafe { f(comm) };
                        }
                    }
                }
            } else {
                self.abort_nccl();
            }
        }
        if self.aborted.get() {
            // Peers may still read this rank's one-shot slots: they are not freed.
            self.one_shot.refuse();
        }
        self.join_abort();
    }
}

/// A group of NCCL calls, launched together when the guard is dropped or [`end`](Self::end)ed.
#[must_use = "the group is launched when the guard drops"]
pub struct GroupGuard<'c> {
    comm: &'c NcclComm,
    open: bool,
}

impl fmt::Debug for GroupGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupGuard")
            .field("open", &self.open)
            .finish()
    }
}

impl<'c> GroupGuard<'c> {
    fn start(comm: &'c NcclComm) -> Result<Self> {
        comm.ensure_live("group")?;
        let f = sys::nccl_fn!(comm.lib, ncclGroupStart).map_err(raw::unavailable)?;
        // SAFETY: ncclGroupStart takes no arguments.
        let rc = unsafe { f() };
        if rc != sys::ncclSuccess {
            return Err(raw::error(comm.lib, comm.raw, "group", rc));
        }
        Ok(GroupGuard { comm, open: true })
    }

    /// Launch the group now and report its result.
    ///
    /// # Errors
    /// [`Error::Nccl`] or [`Error::Timeout`] from `ncclGroupEnd`.
    pub fn end(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.open, false) {
            return Ok(());
        }
        let f = sys::nccl_fn!(self.comm.lib, ncclGroupEnd).map_err(raw::unavailable)?;
        // SAFETY: closes the group this guard opened.
        let rc = unsafe { f() };
        self.comm.settle("group", rc)
    }
}

impl Drop for GroupGuard<'_> {
    fn drop(&mut self) {
        // Errors surface through the communicator's asynchronous error on the next wait.
        let _ = self.finish();
    }
}

/// The stream a new communicator runs on: the context's default (legacy) stream, the one
/// `CudaContext::default_stream` gives every user of the context.
///
/// cudarc orders a buffer's users across streams with events recorded at every use, but only once
/// a context has more than one stream (`CudaContext::is_in_multi_stream_mode`). A communicator
/// with a stream of its own would put every program into that mode and add an event wait and an
/// event record per buffer to every call (about 0.5 µs each, measured). On the default stream a
/// program that works on that one stream pays nothing, and one that makes streams of its own gets
/// cudarc's ordering as before; `DeviceCommunicator::with_stream` moves a communicator to any
/// stream. The legacy stream also waits for, and is waited for by, the context's blocking streams
/// (cudarc's own streams are non-blocking).
pub(super) fn default_stream(ctx: &Arc<CudaContext>) -> Arc<CudaStream> {
    ctx.default_stream()
}
