//! Persistent collectives: a collective set up once ([`crate::Communicator::all_reduce_init`] and the other
//! `*_init` methods) and run many times on the same buffers with [`Persistent::start`] and
//! [`Persistent::wait`].
//!
//! A plan is checked once, when it is made: the argument rules, and in checked mode the agreement
//! of every rank, run at `*_init` exactly as for the blocking and non-blocking forms (same errors,
//! same order), and never again at `start`. What one start costs is then only what the backend
//! needs to issue the run ([`PlanPath`] says which path that is):
//!
//! | backend | path |
//! |---|---|
//! | `mpi` (host) | MPI-4 `MPI_*_init` or Open MPI's `MPIX_*_init` persistent collective, found at run time, then `MPI_Start` per run ([`PlanPath::Persistent`]); without them, or under a deadline, the non-blocking call per run ([`PlanPath::Replay`]) |
//! | `mpi-staged`, `cuda-mpi` | the non-blocking call per run ([`PlanPath::Replay`]) |
//! | `nccl` | the collective captured once into a CUDA graph, launched per run ([`PlanPath::CudaGraph`]) |
//!
//! A plan borrows its buffers for its whole life, so nothing else can touch them while the library
//! may; between runs they are reached through the plan ([`send_mut`](Persistent::send_mut),
//! [`recv`](Persistent::recv), ...), and each run reads the send buffer as it is when the run
//! starts. Like a [`Request`], a plan lives in a [`Scope`]: dropping
//! a plan completes its run in flight, and the scope completes it at its end in any case, also when
//! the plan was leaked with [`std::mem::forget`], so a buffer is never released under a running
//! collective.
//!
//! ```no_run
//! # use collectives_core::{scope, Communicator, MpiComm, ReduceOp, Result};
//! # fn run(comm: &MpiComm) -> Result<()> {
//! let mut local = vec![1.0f64; 4];
//! let mut global = vec![0.0f64; 4];
//! scope(|s| -> Result<()> {
//!     let mut plan = comm.all_reduce_init(s, &mut local[..], &mut global[..], ReduceOp::Sum)?;
//!     for step in 0..10 {
//!         plan.send_mut()?.fill(step as f64);
//!         plan.start()?;
//!         plan.wait()?;
//!         assert_eq!(plan.recv()?[0], (step * comm.size()) as f64);
//!     }
//!     Ok(())
//! })??;
//! # Ok(()) }
//! ```

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::rc::Rc;

use crate::error::{Error, Result};
use crate::record::{PlanRecord, Span};
use crate::request::{Pending, Request, Scope};

/// How a backend runs a persistent plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlanPath {
    /// The MPI library's own persistent collective (`function`, e.g. `"MPIX_Allreduce_init"` or
    /// `"MPI_Allreduce_init"`), made once; each start is `MPI_Start`.
    Persistent {
        /// The MPI function that made the persistent request.
        function: &'static str,
    },
    /// Each start issues the backend's non-blocking form of the collective on the plan's buffers
    /// (the fallback where the backend has nothing better).
    Replay,
    /// The collective was captured once into a CUDA graph; each start launches the graph on the
    /// communicator's stream.
    CudaGraph,
}

impl PlanPath {
    /// A short name for tables and logs: `"persistent"`, `"replay"` or `"cuda-graph"`.
    pub fn name(&self) -> &'static str {
        match self {
            PlanPath::Persistent { .. } => "persistent",
            PlanPath::Replay => "replay",
            PlanPath::CudaGraph => "cuda-graph",
        }
    }
}

impl fmt::Display for PlanPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanPath::Persistent { function } => write!(f, "persistent ({function})"),
            other => f.write_str(other.name()),
        }
    }
}

/// The one state of a plan, shared by its handle and the scope's guard.
struct State<'s> {
    op: Box<dyn PlanOp + 's>,
    name: &'static str,
    active: bool,
    /// What each start says in the per-call record ([`crate::record`]), when it was on at init.
    record: Option<PlanRecord>,
}

impl State<'_> {
    fn wait(&mut self) -> Result<()> {
        if !self.active {
            return Ok(());
        }
        // Over either way: complete, or failed and given up by the backend.
        self.active = false;
        self.op.wait()
    }

    fn test(&mut self) -> Result<bool> {
        if !self.active {
            return Ok(true);
        }
        match self.op.test() {
            Ok(false) => Ok(false),
            done => {
                self.active = false;
                done
            }
        }
    }
}

/// What the scope holds of a plan: it completes the run in flight when the scope ends.
struct Guard<'s>(Rc<RefCell<State<'s>>>);

impl Pending for Guard<'_> {
    fn wait(&mut self) -> Result<()> {
        self.0.borrow_mut().wait()
    }

    fn test(&mut self) -> Result<bool> {
        self.0.borrow_mut().test()
    }
}

/// A persistent collective on buffers of type `X` (`[T]` on host backends, device memory on the
/// others), made by a `*_init` method of [`Communicator`](crate::Communicator); see the
/// [module documentation](self).
///
/// A run is started with [`start`](Self::start) and completed with [`wait`](Self::wait) (or
/// [`test`](Self::test) until it says so); then it can be started again. Between runs the buffers
/// are reached through [`send`](Self::send)/[`send_mut`](Self::send_mut) and
/// [`recv`](Self::recv)/[`recv_mut`](Self::recv_mut) (for in-place operations and `broadcast` the
/// one buffer is the receive buffer). Dropping the plan completes a run in flight and ignores its
/// errors (the scope does the same for a leaked plan when it ends).
///
/// Collective: every rank starts each run, in the same order relative to its other collectives on
/// the communicator.
#[must_use = "a persistent plan does nothing until it is started"]
pub struct Persistent<'s, X: ?Sized = ()> {
    state: Rc<RefCell<State<'s>>>,
    /// The guard's slot in the scope; waited for (and emptied) when the plan is dropped.
    slot: Option<Request<'s>>,
    send: Option<BufPtr<X>>,
    recv: Option<BufPtr<X>>,
    _buffers: PhantomData<&'s mut X>,
}

impl<X: ?Sized> fmt::Debug for Persistent<'_, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.borrow();
        f.debug_struct("Persistent")
            .field("op", &state.name)
            .field("path", &state.op.path())
            .field("active", &state.active)
            .finish()
    }
}

impl<'s, X: ?Sized> Persistent<'s, X> {
    /// Hand the backend's plan to `scope`, which completes its run in flight when it ends.
    pub(crate) fn new(
        scope: &'s Scope<'s, '_>,
        name: &'static str,
        op: Box<dyn PlanOp + 's>,
        send: Option<BufPtr<X>>,
        recv: Option<BufPtr<X>>,
        record: Option<PlanRecord>,
    ) -> Self {
        let state = Rc::new(RefCell::new(State {
            op,
            name,
            active: false,
            record,
        }));
        let slot = scope.register(Box::new(Guard(state.clone())));
        Persistent {
            state,
            slot: Some(slot),
            send,
            recv,
            _buffers: PhantomData,
        }
    }

    /// The same plan with no buffer to hand out (one that has none: `barrier_init`).
    pub(crate) fn bufferless(mut self) -> Persistent<'s> {
        Persistent {
            state: self.state.clone(),
            slot: self.slot.take(),
            send: None,
            recv: None,
            _buffers: PhantomData,
        }
    }

    /// Start a run: the collective on the buffers as they are now.
    ///
    /// # Errors
    /// [`Error::PlanActive`] when the previous run has not been completed (nothing is issued, on
    /// this rank; the run in flight is unaffected); the backend's error for the start
    /// ([`Error::Unusable`] after a timeout, [`Error::Mpi`], [`Error::Nccl`], [`Error::Cuda`], ...).
    pub fn start(&mut self) -> Result<()> {
        let mut state = self.state.borrow_mut();
        let _span = tracing::trace_span!("start", op = state.name).entered();
        if state.active {
            return Err(Error::PlanActive {
                op: state.name,
                action: "starting it again",
            });
        }
        let span = state.record.as_ref().map_or(Span::OFF, PlanRecord::open);
        let started = state.op.start();
        if let Some(rec) = &state.record {
            rec.close(span, started.is_ok(), state.name, state.op.path().name());
        }
        started?;
        state.active = true;
        Ok(())
    }

    /// Block until the run in flight is complete (for `Avg` on backends that sum, the division
    /// included). Without a run in flight (never started, or already completed) it returns
    /// `Ok(())` at once.
    ///
    /// # Errors
    /// The backend's error for the run; [`Error::Timeout`] when the communicator has a deadline and
    /// the run does not complete within it, counted from this call.
    pub fn wait(&mut self) -> Result<()> {
        let mut state = self.state.borrow_mut();
        let _span = tracing::trace_span!("wait", op = state.name).entered();
        state.wait()
    }

    /// Whether the run in flight is complete, without blocking; `true` without one.
    ///
    /// # Errors
    /// The backend's error for the run.
    pub fn test(&mut self) -> Result<bool> {
        self.state.borrow_mut().test()
    }

    /// Whether a run is in flight (started and not yet seen complete).
    pub fn is_active(&self) -> bool {
        self.state.borrow().active
    }

    /// How this plan runs on its backend (MPI's persistent collective, the non-blocking call per
    /// run, or a CUDA graph).
    pub fn path(&self) -> PlanPath {
        self.state.borrow().op.path()
    }

    /// The operation that made the plan (`"all_reduce_init"`, ...).
    pub fn op(&self) -> &'static str {
        self.state.borrow().name
    }

    fn idle(&self) -> Result<()> {
        let state = self.state.borrow();
        if state.active {
            return Err(Error::PlanActive {
                op: state.name,
                action: "touching its buffers",
            });
        }
        Ok(())
    }

    fn missing(&self, which: &str) -> Error {
        Error::invalid(
            self.op(),
            format!("this plan has no {which} buffer on this rank"),
        )
    }

    /// The send buffer, between runs.
    ///
    /// # Errors
    /// [`Error::PlanActive`] while a run is in flight; [`Error::InvalidArgument`] when the plan has
    /// no send buffer on this rank (in-place operations, `broadcast`, `barrier`, a root-only send
    /// buffer off the root).
    pub fn send(&self) -> Result<&X> {
        self.idle()?;
        let p = self.send.ok_or_else(|| self.missing("send"))?;
        // SAFETY: the plan borrows the buffer for 's and no run is in flight, so nothing writes it;
        // the reference borrows the plan, which cannot start a run while it lives.
        Ok(unsafe { p.get() })
    }

    /// The send buffer, to change between runs: the next run reads what is there when it starts.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn send_mut(&mut self) -> Result<&mut X> {
        self.idle()?;
        let p = self.send.ok_or_else(|| self.missing("send"))?;
        // SAFETY: every `*_init` method borrows the send buffer mutably for 's (so that it can be
        // changed here), and no run is in flight, so nothing else reads or writes it; the reference
        // borrows the plan mutably, so no run starts while it lives.
        Ok(unsafe { p.get_mut() })
    }

    /// The receive buffer (the one buffer of in-place operations and `broadcast`), between runs:
    /// the result of the last completed run.
    ///
    /// # Errors
    /// [`Error::PlanActive`] while a run is in flight; [`Error::InvalidArgument`] when the plan has
    /// no receive buffer on this rank (`barrier`, a root-only receive buffer off the root).
    pub fn recv(&self) -> Result<&X> {
        self.idle()?;
        let p = self.recv.ok_or_else(|| self.missing("receive"))?;
        // SAFETY: the plan borrows the buffer for 's and no run is in flight, so nothing writes it.
        Ok(unsafe { p.get() })
    }

    /// The receive buffer, to change between runs (an in-place operation or `broadcast` reads it
    /// when the next run starts).
    ///
    /// # Errors
    /// As [`recv`](Self::recv).
    pub fn recv_mut(&mut self) -> Result<&mut X> {
        self.idle()?;
        let p = self.recv.ok_or_else(|| self.missing("receive"))?;
        // SAFETY: the plan borrows the buffer mutably for 's and no run is in flight, so nothing
        // else reads or writes it; the reference borrows the plan mutably, so no run starts while
        // it lives.
        Ok(unsafe { p.get_mut() })
    }
}

impl<X: ?Sized> Drop for Persistent<'_, X> {
    fn drop(&mut self) {
        // Completes the run in flight, if any; a drop must not panic, so its error is dropped
        // (`wait` reports it).
        if let Some(slot) = self.slot.take() {
            let _ = slot.wait();
        }
    }
}

/// A way for tests to make the library's own init of the next plan fail on one rank, as an
/// `MPIX_*_init` or a graph capture that the library refuses would: what checked mode's agreement
/// on the outcome of init ([`crate::checked`]) is tested with. Not part of the API.
#[doc(hidden)]
pub mod test_hook {
    use std::cell::Cell;

    use crate::error::{Error, Result};

    thread_local! {
        static REFUSE_NEXT: Cell<bool> = const { Cell::new(false) };
    }

    /// Make the next plan made on this thread fail after the backend made it, as if its library
    /// had refused it.
    pub fn refuse_next_init() {
        REFUSE_NEXT.with(|r| r.set(true));
    }

    /// The refusal asked for by [`refuse_next_init`], once.
    pub(crate) fn refuse(op: &'static str) -> Result<()> {
        if REFUSE_NEXT.with(|r| r.replace(false)) {
            return Err(Error::Unavailable {
                what: op,
                message: "the plan was refused on this rank (test hook)".into(),
            });
        }
        Ok(())
    }
}

/// A plan as a backend implements it: issue one run, complete it.
///
/// The front end calls [`start`](Self::start) only while no run is in flight, and
/// [`wait`](Self::wait)/[`test`](Self::test) only while one is; it tracks which.
pub trait PlanOp {
    /// Issue one run on the plan's buffers.
    fn start(&mut self) -> Result<()>;
    /// Block until the run in flight is complete, finishing step (the division of `Avg`) included.
    fn wait(&mut self) -> Result<()>;
    /// Whether the run in flight is complete (finishing step done when it says so), without blocking.
    fn test(&mut self) -> Result<bool>;
    /// How the plan runs.
    fn path(&self) -> PlanPath;
}

/// A buffer a plan borrows for `'s`, by address, so that it can be handed out again for each run
/// and to the caller between runs.
pub struct BufPtr<X: ?Sized>(NonNull<X>);

impl<X: ?Sized> std::fmt::Debug for BufPtr<X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BufPtr({:p})", self.0)
    }
}

impl<X: ?Sized> Clone for BufPtr<X> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<X: ?Sized> Copy for BufPtr<X> {}

impl<X: ?Sized> BufPtr<X> {
    /// A buffer the plan borrows mutably for its life (a send buffer is only read by the runs, but
    /// the caller changes it between them).
    pub fn new(buf: &mut X) -> Self {
        BufPtr(NonNull::from(buf))
    }

    /// The buffer, to read.
    ///
    /// # Safety
    /// The buffer is still borrowed by the plan (`'a` does not outlast that borrow), and nothing
    /// writes it while the reference lives.
    pub unsafe fn get<'a>(self) -> &'a X {
        // SAFETY: the caller's promise; the pointer came from a reference.
        unsafe { self.0.as_ref() }
    }

    /// The buffer, to write.
    ///
    /// # Safety
    /// The buffer is still borrowed by the plan (`'a` does
    /// not outlast that borrow), and nothing else reads or writes it while the reference lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_mut<'a>(self) -> &'a mut X {
        let mut p = self.0;
        // SAFETY: the caller's promise; the pointer came from a mutable reference.
        unsafe { p.as_mut() }
    }
}
