//! `collectives.Request`: a non-blocking operation in flight, holding what it runs on.
//!
//! The core keeps a non-blocking operation's buffers borrowed inside a Rust `scope`, which a
//! Python call cannot stay inside. So each `i_*` method starts the operation in a scope of its
//! own and takes it out of that scope ([`collectives_core::Request::into_pending`]), and the
//! Python `Request` takes over the scope's duty: it holds the exported buffers (a NumPy array
//! cannot be resized or freed while exported) and a reference to the communicator, and completes
//! the operation before letting go of any of them, in `wait`, in a `test` that finds it done, at
//! the end of a `with` block, or when it is garbage-collected unwaited. Python code can still
//! write into a send array or read a receive array in flight (as with mpi4py): that is a data
//! race on the user's data, never a use of freed memory.

use collectives_core::{scope, Pending, Result, Scope};
use pyo3::prelude::*;

use crate::buffer::HostBuf;
use crate::errors::IntoPyResult;
use crate::mpi_env;

/// An operation taken out of its scope: it borrows the communicator and the buffers of its
/// [`Request`], which keeps them alive until it is complete.
pub type Detached = Box<dyn Pending + 'static>;

/// Start an operation with `f` in a scope of its own and take it out of the scope.
///
/// # Safety
/// Everything `f` hands the operation (the communicator, the buffers' memory) must stay where it
/// is, unreleased, until the returned operation is complete: the caller gives the operation to a
/// [`Request`] together with the owners of all of it.
pub unsafe fn start<'env, F>(f: F) -> Result<Option<Detached>>
where
    F: for<'s> FnOnce(&'s Scope<'s, 'env>) -> Result<collectives_core::Request<'s>>,
{
    scope(|s| -> Result<Option<Detached>> {
        let request = f(s)?;
        // SAFETY: the caller's promise: the request's borrows outlive the operation, which the
        // Python Request completes before releasing them (also when dropped).
        let pending = unsafe { request.into_pending() };
        Ok(pending.map(|p| {
            // SAFETY: only the lifetime changes (same layout); the caller's promise is what
            // makes `'static` true for as long as the operation exists.
            unsafe { std::mem::transmute::<Box<dyn Pending + '_>, Detached>(p) }
        }))
    })
    .and_then(|r| r)
}

/// A non-blocking operation in flight (from an `i_*` method of `Communicator`).
///
/// `wait()` completes it and returns its result array (the receive buffer, allocated or the one
/// passed; `None` where there is none on this rank); `test()` says whether it is complete without
/// blocking. As a context manager it is waited for at the end of the `with` block. A request that
/// is garbage-collected unwaited is waited for then (errors dropped), so its buffers are never
/// released under a running operation; its errors come only from `wait`/`test`.
#[pyclass(unsendable, module = "collectives")]
pub struct Request {
    /// The operation, `None` once complete. Declared first: completed before the buffers below
    /// are released (see `Drop`).
    pending: Option<Detached>,
    /// The buffers the operation runs on, released when it is complete.
    buffers: Vec<HostBuf>,
    /// What `wait` returns.
    result: Option<Py<PyAny>>,
    /// The communicator the operation borrows (a `Communicator`), kept alive; never read.
    _comm: Py<PyAny>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("in_flight", &self.pending.is_some())
            .field("buffers", &self.buffers)
            .finish()
    }
}

impl Request {
    /// A request for `pending` (none: already complete) over `buffers` of `comm`, the
    /// communicator the operation borrows.
    pub fn new<C>(
        pending: Option<Detached>,
        buffers: Vec<HostBuf>,
        result: Option<Py<PyAny>>,
        comm: Py<C>,
    ) -> Request {
        let mut r = Request {
            pending,
            buffers,
            result,
            _comm: comm.into_any(),
        };
        if r.pending.is_none() {
            r.buffers.clear();
        }
        r
    }

    fn finish(&mut self) {
        self.pending = None;
        self.buffers.clear();
    }
}

#[pymethods]
impl Request {
    /// Block until the operation is complete; return its result array (or None).
    fn wait(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if let Some(mut p) = self.pending.take() {
            let r = p.wait();
            // Complete or failed for good (under a deadline MPI keeps working on copies of its
            // own): the buffers are no longer the library's either way.
            drop(p);
            self.finish();
            r.py()?;
        }
        Ok(self.result.as_ref().map(|r| r.clone_ref(py)))
    }

    /// Whether the operation is complete, without blocking.
    fn test(&mut self) -> PyResult<bool> {
        let Some(p) = self.pending.as_mut() else {
            return Ok(true);
        };
        match p.test() {
            Ok(false) => Ok(false),
            done => {
                self.finish();
                done.py()
            }
        }
    }

    /// Whether the operation is known to be complete (waited for, or seen complete by `test`).
    #[getter]
    fn done(&self) -> bool {
        self.pending.is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Wait at the end of the `with` block; an error of the block wins over one of the wait.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &mut self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let waited = self.wait(py);
        if exc_type.is_none() {
            waited?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<collectives.Request {}>",
            if self.pending.is_some() {
                "in flight"
            } else {
                "complete"
            }
        )
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if let Some(mut p) = self.pending.take() {
            if mpi_env::finalized() {
                // MPI is gone and cannot complete it; leak it (and the buffers) rather than
                // release memory MPI was given.
                std::mem::forget(p);
                std::mem::forget(std::mem::take(&mut self.buffers));
            } else {
                // A drop cannot raise: the error is dropped (`wait` reports it).
                let _ = p.wait();
            }
        }
    }
}
