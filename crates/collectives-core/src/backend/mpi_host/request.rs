//! Operations in flight: an `MPI_Request` plus what to do when it completes.

use std::marker::PhantomData;

use mpi::ffi;

use super::raw;
use crate::element::Element;
use crate::error::Result;
use crate::op::ReduceOp;
use crate::request::Pending;

/// One non-blocking MPI operation on buffers borrowed for `'s`.
pub(crate) struct MpiPending<'s, T: Element> {
    pub(crate) request: ffi::MPI_Request,
    pub(crate) op: &'static str,
    /// For `Avg`: the receive buffer to divide by the number of ranks once complete.
    pub(crate) average: Option<(*mut T, usize, usize)>,
    /// For receives: the exact number of elements expected.
    pub(crate) expect: Option<usize>,
    pub(crate) done: bool,
    pub(crate) _buffers: PhantomData<&'s mut [T]>,
}

impl<'s, T: Element> MpiPending<'s, T> {
    pub(crate) fn new(request: ffi::MPI_Request, op: &'static str) -> Self {
        MpiPending {
            request,
            op,
            average: None,
            expect: None,
            done: false,
            _buffers: PhantomData,
        }
    }

    pub(crate) fn average(mut self, reduce: ReduceOp, buf: &mut [T], size: usize) -> Self {
        if reduce == ReduceOp::Avg {
            self.average = Some((buf.as_mut_ptr(), buf.len(), size));
        }
        self
    }

    pub(crate) fn expect(mut self, n: usize) -> Self {
        self.expect = Some(n);
        self
    }

    fn complete(&mut self, status: &ffi::MPI_Status) -> Result<()> {
        self.done = true;
        if let Some(n) = self.expect {
            raw::received(self.op, status, raw::datatype::<T>(), n)?;
        }
        if let Some((ptr, len, size)) = self.average.take() {
            // SAFETY: the buffer is borrowed mutably for 's by this operation and nothing else touches it;
            // MPI has completed, so no one writes it any more; `ptr`/`len` came from that borrow.
            let buf = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
            T::divide_all(buf, size);
        }
        Ok(())
    }
}

impl<T: Element> Pending for MpiPending<'_, T> {
    fn wait(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        let mut status = raw::status();
        // SAFETY: `request` came from a successful MPI_I* call and has not completed (`done` is false);
        // MPI sets it to MPI_REQUEST_NULL on completion.
        let rc = unsafe { ffi::MPI_Wait(&mut self.request, &mut status) };
        if rc != 0 {
            self.done = true;
            return Err(raw::error(self.op, rc));
        }
        self.complete(&status)
    }

    fn test(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let mut status = raw::status();
        let mut flag = 0;
        // SAFETY: as in `wait`; `flag` and `status` are valid out-pointers.
        let rc = unsafe { ffi::MPI_Test(&mut self.request, &mut flag, &mut status) };
        if rc != 0 {
            self.done = true;
            return Err(raw::error(self.op, rc));
        }
        if flag == 0 {
            return Ok(false);
        }
        self.complete(&status).map(|()| true)
    }
}
