//! Non-blocking operations: a [`scope`] owns every operation started in it, and a [`Request`] is a handle
//! to one of them.
//!
//! Buffers handed to a non-blocking operation stay borrowed until the scope ends, so the compiler rejects
//! any use of them while the operation may still read or write them. When the scope ends it waits for
//! every operation still in flight, also when a request was dropped or leaked with [`std::mem::forget`],
//! and also when the closure panics: a buffer is never freed or reused under a running operation. (This is
//! the shape of `std::thread::scope` and of rsmpi's request scopes.)
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
}

type Slots<'s> = RefCell<Vec<Option<Box<dyn Pending + 's>>>>;

/// The region in which non-blocking operations run; see the [module documentation](self).
pub struct Scope<'s, 'env: 's> {
    /// Emptied (and its allocation freed) by `wait_all`, the scope's last act; `ManuallyDrop` keeps the
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

    /// Wait for every operation still in flight; the first error wins, the others are still waited for.
    fn wait_all(&self) -> Result<()> {
        let mut first = Ok(());
        loop {
            let next = self.slots.borrow_mut().iter_mut().find_map(Option::take);
            let Some(mut pending) = next else { break };
            let r = pending.wait();
            if first.is_ok() {
                first = r;
            }
        }
        drop(std::mem::take(&mut *self.slots.borrow_mut()));
        first
    }
}

/// Run `f` with a [`Scope`] for non-blocking operations and wait for all of them before returning.
///
/// # Errors
/// The first error of an operation that was still in flight when `f` returned (operations completed
/// through [`Request::wait`] report their errors there). Under a deadline each such operation is
/// waited for with the deadline of its communicator, one after another.
pub fn scope<'env, F, R>(f: F) -> Result<R>
where
    F: for<'s> FnOnce(&'s Scope<'s, 'env>) -> R,
{
    struct WaitOnUnwind<'a, 's, 'env>(&'a Scope<'s, 'env>);
    impl Drop for WaitOnUnwind<'_, '_, '_> {
        fn drop(&mut self) {
            // Reached with work in flight only when `f` panicked: the buffers must not be released
            // under a running operation, and a drop must not panic, so errors are dropped here.
            let _ = self.0.wait_all();
        }
    }
    let scope = Scope {
        slots: ManuallyDrop::new(RefCell::new(Vec::new())),
        _scope: PhantomData,
        _env: PhantomData,
    };
    let guard = WaitOnUnwind(&scope);
    let out = f(&scope);
    let waited = scope.wait_all();
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

    /// Block until the operation is complete.
    ///
    /// # Errors
    /// The backend's error for the operation; [`Error::Timeout`](crate::Error::Timeout) when its
    /// communicator has a deadline and the operation does not complete within it, counted from this
    /// call (on the MPI backends the communicator is refused afterwards).
    pub fn wait(self) -> Result<()> {
        let pending = self.slots.borrow_mut()[self.index].take();
        match pending {
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
