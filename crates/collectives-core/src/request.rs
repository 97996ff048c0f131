//! Non-blocking operations: a [`scope`] owns every operation started in it, and a [`Request`] is a handle
//! to one of them.
//!
//! Buffers handed to a non-blocking operation stay borrowed until the scope ends, so the compiler rejects
//! any use of them while the operation may still read or write them. When the scope ends it waits for
//! every operation still in flight, also when a request was dropped or leaked with [`std::mem::forget`],
//! and also when the closure panics: a buffer is never freed or reused under a running operation. (This is
//! the shape of `std::thread::scope` and of rsmpi's request scopes.)
//!
//! A set of requests completes together with [`wait_all`], as `MPI_Waitall` completes an array of
//! requests: the host MPI backend's requests in one `MPI_Waitall` (polled with `MPI_Testall` under
//! a deadline), those of other backends one after another. The end of a scope completes what is
//! still in flight in the same way.
//!
//! ```no_run
//! # use collectives_core::{scope, Communicator, MpiComm, ReduceOp, Result};
//! # fn run(comm: &MpiComm) -> Result<()> {
//! let send = vec![1.0f64; 1024];
//! let mut recv = vec![0.0f64; 1024];
//! let local_work = scope(|s| -> Result<f64> {
//!     let request = comm.i_all_reduce(s, &send[..], &mut recv[..], ReduceOp::Sum)?;
//!     let busy: f64 = (0..1000u32).map(f64::from).sum(); // overlaps the reduction
//!     request.wait()?;
//!     Ok(busy)
//! })??;
//! assert_eq!(recv[0], comm.size() as f64);
//! # let _ = local_work; Ok(()) }
//! ```

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::time::Duration;

use mpi::ffi;

use crate::error::Result;

/// One operation in flight, as a backend implements it.
pub trait Pending {
    /// Block until the operation is complete; run any finishing step (e.g. the division of an average).
    ///
    /// # Errors
    /// Whatever the backend reports for the operation.
    fn wait(&mut self) -> Result<()>;

    /// Whether the operation is complete, without blocking; when it is, the finishing step has run.
    ///
    /// # Errors
    /// Whatever the backend reports for the operation.
    fn test(&mut self) -> Result<bool>;

    /// This operation as a member of a set that completes together ([`wait_all`], and the end of
    /// its scope). The host MPI backend's operations answer `Some`, and one `MPI_Waitall` completes
    /// the requests of all of them; by default `None`, and the operation is waited for on its own
    /// ([`wait`](Self::wait)). Only this crate can make a [`SetMember`].
    fn set_member(&mut self) -> Option<SetMember<'_>> {
        None
    }
}

/// An operation in flight as one of a set that completes together: what
/// [`Pending::set_member`] answers for the host MPI backend's operations, through which
/// [`wait_all`] hands their raw requests to one `MPI_Waitall`. Only this crate makes one.
pub struct SetMember<'a> {
    pub(crate) member: &'a mut dyn Member,
    /// What completes a set of members: the host MPI backend's `MPI_Waitall` over all their
    /// requests, the one completion every member the crate makes names.
    complete: fn(&mut [SetMember<'_>]) -> Result<()>,
}

impl<'a> SetMember<'a> {
    /// `member`, which `complete` completes together with the others of its set.
    pub(crate) fn new(
        member: &'a mut dyn Member,
        complete: fn(&mut [SetMember<'_>]) -> Result<()>,
    ) -> Self {
        Self { member, complete }
    }
}

/// An operation on MPI requests as a member of a set that completes together ([`wait_all`]):
/// its raw requests go into one `MPI_Waitall` with the others', and it finishes (or is given up)
/// as its own wait would finish it. The host MPI backend implements it and completes such sets.
pub(crate) trait Member {
    /// The requests still to complete: none once the operation is complete. MPI sets a request
    /// to `MPI_REQUEST_NULL` when it completes it; the caller writes the handles back here.
    fn requests(&mut self) -> &mut [ffi::MPI_Request];
    /// The deadline of a wait, counted from its start (`None`: wait without one).
    fn timeout(&self) -> Option<Duration>;
    /// MPI completed every request ([`requests`](Self::requests)' order, one status each): run
    /// the finishing step.
    fn finish_set(&mut self, statuses: &[ffi::MPI_Status]) -> Result<()>;
    /// The set's deadline `after` passed before every request of the set completed: complete
    /// this operation if MPI has completed it by now, else give it up and refuse its
    /// communicator, as its own wait does when it times out.
    fn deadline_passed(&mut self, after: Duration) -> Result<()>;
    /// The set's wait failed: the operation will not be waited for again.
    fn abandon_set(&mut self);
}

impl fmt::Debug for SetMember<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetMember").finish_non_exhaustive()
    }
}

type Slots<'s> = RefCell<Vec<Option<Box<dyn Pending + 's>>>>;

/// The region in which non-blocking operations run; see the [module documentation](self).
pub struct Scope<'s, 'env: 's> {
    /// Emptied (and its allocation freed) by `finish`, the scope's last act; `ManuallyDrop` keeps the
    /// scope free of drop glue, so its borrow may last as long as the closure's `'s`.
    slots: ManuallyDrop<Slots<'s>>,
    _scope: PhantomData<&'s mut &'s ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let in_flight = self.slots.borrow().iter().filter(|s| s.is_some()).count();
        f.debug_struct("Scope")
            .field("in_flight", &in_flight)
            .finish()
    }
}

impl<'s> Scope<'s, '_> {
    /// Hand an operation in flight to the scope, which will complete it at the latest when it ends.
    ///
    /// Backends call this; users get the [`Request`] from the `i_*` methods of
    /// [`Communicator`](crate::Communicator).
    pub fn register(&'s self, pending: Box<dyn Pending + 's>) -> Request<'s> {
        let mut slots = self.slots.borrow_mut();
        slots.push(Some(pending));
        Request {
            slots: &self.slots,
            index: slots.len() - 1,
        }
    }

    /// Complete every operation still in flight, as [`wait_all`] completes a set (operations
    /// registered meanwhile too); the first error wins, the others are still waited for. The slots
    /// are taken out all at once, so this is linear in their number.
    fn finish(&self) -> Result<()> {
        let mut first = Ok(());
        loop {
            let pending: Vec<_> = self.slots.borrow_mut().drain(..).flatten().collect();
            if pending.is_empty() {
                break;
            }
            let r = complete_all(pending);
            if first.is_ok() {
                first = r;
            }
        }
        drop(std::mem::take(&mut *self.slots.borrow_mut()));
        first
    }
}

/// Complete the operations of `requests` together, as `MPI_Waitall` completes an array of
/// requests: those of the host MPI backend in one `MPI_Waitall` on their raw `MPI_Request`
/// handles, then those of other backends one after another through their own
/// [`wait`](Request::wait). Requests already complete (tested or waited to completion) count as
/// complete; an empty set returns at once. Every finishing step of an operation (the copy-back of
/// a deadline's copies, the length check of a receive, the division of an `Avg`) runs as when it
/// is waited for alone.
///
/// Under a deadline ([`MpiComm::with_timeout`](crate::MpiComm::with_timeout)) the host MPI
/// requests of communicators with the same deadline are polled together with `MPI_Testall` until
/// they complete or the deadline, counted from this call, passes; then those that completed are
/// finished, and each still in flight is given up as its own wait gives it up: the error is
/// [`Error::Timeout`](crate::Error::Timeout) and its communicator is refused afterwards
/// ([`Error::Unusable`](crate::Error::Unusable)).
///
/// ```no_run
/// # use collectives_core::{scope, wait_all, Communicator, MpiComm, Result};
/// # fn run(comm: &MpiComm) -> Result<()> {
/// let send = vec![7u8; 1024];
/// let mut recv = vec![vec![0u8; 1024]; 8];
/// let peer = (comm.rank() + 1) % comm.size();
/// let from = (comm.rank() + comm.size() - 1) % comm.size();
/// scope(|s| -> Result<()> {
///     let mut window = Vec::new();
///     for buf in recv.iter_mut() {
///         window.push(comm.i_recv(s, &mut buf[..], from, 0)?);
///         window.push(comm.i_send(s, &send[..], peer, 0)?);
///     }
///     wait_all(window)
/// })??;
/// # Ok(()) }
/// ```
///
/// # Errors
/// The first error among the operations (each of them is still completed or given up): the
/// backend's error, [`Error::Timeout`](crate::Error::Timeout) as above, or
/// [`Error::Mpi`](crate::Error::Mpi) (operation `wait_all`) when `MPI_Waitall` itself fails, in
/// which case every host MPI operation of the set is given up.
pub fn wait_all<'s>(requests: impl IntoIterator<Item = Request<'s>>) -> Result<()> {
    let pending: Vec<_> = requests.into_iter().filter_map(Request::take).collect();
    let _span = tracing::trace_span!("wait_all", requests = pending.len()).entered();
    complete_all(pending)
}

/// [`wait_all`] on operations taken out of their scope.
fn complete_all<'s>(pending: Vec<Box<dyn Pending + 's>>) -> Result<()> {
    let (mut set, mut alone) = (Vec::new(), Vec::new());
    for mut p in pending {
        if p.set_member().is_some() {
            set.push(p);
        } else {
            alone.push(p);
        }
    }
    let mut members: Vec<SetMember<'_>> = set.iter_mut().filter_map(|p| p.set_member()).collect();
    let mut first = match members.first() {
        Some(m) => (m.complete)(&mut members),
        None => Ok(()),
    };
    for p in &mut alone {
        let r = p.wait();
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Run `f` with a [`Scope`] for non-blocking operations and wait for all of them before returning.
///
/// # Errors
/// The first error of an operation that was still in flight when `f` returned (operations completed
/// through [`Request::wait`] report their errors there). They are completed together, as
/// [`wait_all`] completes a set, with the deadlines of their communicators.
pub fn scope<'env, F, R>(f: F) -> Result<R>
where
    F: for<'s> FnOnce(&'s Scope<'s, 'env>) -> R,
{
    struct WaitOnUnwind<'a, 's, 'env>(&'a Scope<'s, 'env>);
    impl Drop for WaitOnUnwind<'_, '_, '_> {
        fn drop(&mut self) {
            // Reached with work in flight only when `f` panicked: the buffers must not be released
            // under a running operation, and a drop must not panic, so errors are dropped here.
            let _ = self.0.finish();
        }
    }
    let scope = Scope {
        slots: ManuallyDrop::new(RefCell::new(Vec::new())),
        _scope: PhantomData,
        _env: PhantomData,
    };
    let guard = WaitOnUnwind(&scope);
    let out = f(&scope);
    let waited = scope.finish();
    drop(guard);
    waited.map(|()| out)
}

/// A handle to one non-blocking operation; complete it with [`wait`](Self::wait) or poll it with
/// [`test`](Self::test). Dropping it leaves the operation to its scope, which waits for it.
#[must_use = "a request should be waited for; otherwise its scope waits for it when it ends"]
pub struct Request<'s> {
    slots: &'s Slots<'s>,
    index: usize,
}

impl fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("index", &self.index)
            .finish()
    }
}

impl<'s> Request<'s> {
    /// Take the operation out of its scope, for a caller that guarantees by other means that it
    /// completes before `'s` ends (a persistent plan's replay, which the plan's own slot in the same
    /// scope completes). The slot is released when it is the last one, so that a plan started many
    /// times does not grow the scope.
    pub(crate) fn detach(self) -> Option<Box<dyn Pending + 's>> {
        let mut slots = self.slots.borrow_mut();
        let pending = slots[self.index].take();
        if self.index + 1 == slots.len() {
            slots.pop();
        }
        pending
    }

    /// Take the operation out of its scope for a caller whose buffers are not Rust borrows: a
    /// language binding (the Python module) that keeps the communicator and the buffers alive by
    /// its own references for as long as the operation exists, and so outlives the scope. The
    /// scope no longer waits for it.
    ///
    /// # Safety
    /// The caller must complete the returned operation ([`Pending::wait`], or [`Pending::test`]
    /// until it returns `true`) before the communicator or any buffer it was started on is moved,
    /// released or reused, and must not drop it before: dropping an operation in flight does not
    /// wait for it. Where the caller extends `'s` (the binding's case), this holds also after the
    /// scope has ended.
    pub unsafe fn into_pending(self) -> Option<Box<dyn Pending + 's>> {
        self.detach()
    }

    /// The operation, taken out of its scope (`None`: already complete).
    fn take(self) -> Option<Box<dyn Pending + 's>> {
        self.slots.borrow_mut()[self.index].take()
    }

    /// Block until the operation is complete.
    ///
    /// # Errors
    /// The backend's error for the operation; [`Error::Timeout`](crate::Error::Timeout) when its
    /// communicator has a deadline and the operation does not complete within it, counted from this
    /// call (on the MPI backends the communicator is refused afterwards).
    pub fn wait(self) -> Result<()> {
        match self.take() {
            Some(mut p) => p.wait(),
            None => Ok(()),
        }
    }

    /// Whether the operation is complete, without blocking.
    ///
    /// # Errors
    /// The backend's error for the operation.
    pub fn test(&mut self) -> Result<bool> {
        let pending = self.slots.borrow_mut()[self.index].take();
        let Some(mut p) = pending else {
            return Ok(true);
        };
        match p.test() {
            Ok(true) => Ok(true),
            Ok(false) => {
                self.slots.borrow_mut()[self.index] = Some(p);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;
    use crate::Error;

    /// Completes after `polls` tests; counts waits.
    struct Fake {
        polls: usize,
        waits: Rc<Cell<usize>>,
        fail: bool,
    }

    impl Pending for Fake {
        fn wait(&mut self) -> Result<()> {
            self.waits.set(self.waits.get() + 1);
            if self.fail {
                Err(Error::invalid("fake", "failed"))
            } else {
                Ok(())
            }
        }
        fn test(&mut self) -> Result<bool> {
            if self.polls == 0 {
                return self.wait().map(|()| true);
            }
            self.polls -= 1;
            Ok(false)
        }
    }

    fn fake(polls: usize, waits: &Rc<Cell<usize>>, fail: bool) -> Box<Fake> {
        Box::new(Fake {
            polls,
            waits: waits.clone(),
            fail,
        })
    }

    #[test]
    fn scope_waits_for_dropped_requests() {
        let waits = Rc::new(Cell::new(0));
        scope(|s| {
            let a = s.register(fake(0, &waits, false));
            drop(a);
            let _ = s.register(fake(0, &waits, false));
            assert_eq!(waits.get(), 0);
        })
        .unwrap();
        assert_eq!(waits.get(), 2);
    }

    #[test]
    fn waited_requests_are_not_waited_again() {
        let waits = Rc::new(Cell::new(0));
        scope(|s| {
            let a = s.register(fake(0, &waits, false));
            a.wait().unwrap();
        })
        .unwrap();
        assert_eq!(waits.get(), 1);
    }

    #[test]
    fn test_polls_until_complete() {
        let waits = Rc::new(Cell::new(0));
        scope(|s| {
            let mut a = s.register(fake(2, &waits, false));
            assert!(!a.test().unwrap());
            assert!(!a.test().unwrap());
            assert!(a.test().unwrap());
            assert!(a.test().unwrap());
            a.wait().unwrap();
        })
        .unwrap();
        assert_eq!(waits.get(), 1);
    }

    #[test]
    fn errors_of_unwaited_requests_come_back_from_the_scope() {
        let waits = Rc::new(Cell::new(0));
        let r = scope(|s| {
            let _ = s.register(fake(0, &waits, true));
            let _ = s.register(fake(0, &waits, false));
            7
        });
        assert!(matches!(r, Err(Error::InvalidArgument { op: "fake", .. })));
        assert_eq!(waits.get(), 2, "the second operation is still waited for");
    }

    #[test]
    fn wait_all_waits_each_once_and_skips_completed_ones() {
        let waits = Rc::new(Cell::new(0));
        scope(|s| {
            let mut done = s.register(fake(0, &waits, false));
            assert!(done.test().unwrap(), "completed before the set");
            let waited = s.register(fake(0, &waits, false));
            waited.wait().unwrap();
            assert_eq!(waits.get(), 2);
            let window: Vec<_> = (0..5).map(|_| s.register(fake(3, &waits, false))).collect();
            wait_all(std::iter::once(done).chain(window)).unwrap();
            assert_eq!(
                waits.get(),
                7,
                "each request of the window once, none again"
            );
        })
        .unwrap();
        assert_eq!(
            waits.get(),
            7,
            "the scope's end waits for none of them again"
        );
    }

    #[test]
    fn wait_all_of_nothing_returns_at_once() {
        wait_all(std::iter::empty()).unwrap();
        scope(|_| wait_all(Vec::new())).unwrap().unwrap();
    }

    #[test]
    fn wait_all_reports_the_first_error_and_still_waits_for_the_rest() {
        let waits = Rc::new(Cell::new(0));
        let r = scope(|s| {
            let set = vec![
                s.register(fake(0, &waits, false)),
                s.register(fake(0, &waits, true)),
                s.register(fake(0, &waits, false)),
            ];
            wait_all(set)
        })
        .unwrap();
        assert!(matches!(r, Err(Error::InvalidArgument { op: "fake", .. })));
        assert_eq!(waits.get(), 3);
    }

    #[test]
    fn a_large_scope_ends_in_one_pass() {
        // The end takes every slot at once; thousands of dropped requests are each waited once.
        let waits = Rc::new(Cell::new(0));
        scope(|s| {
            for _ in 0..20_000 {
                let _ = s.register(fake(0, &waits, false));
            }
        })
        .unwrap();
        assert_eq!(waits.get(), 20_000);
    }

    #[test]
    fn panics_still_wait() {
        let waits = Rc::new(Cell::new(0));
        let w = waits.clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scope(|s| {
                let _ = s.register(fake(0, &w, false));
                panic!("boom");
            })
        }));
        assert!(r.is_err());
        assert_eq!(waits.get(), 1);
    }
}
