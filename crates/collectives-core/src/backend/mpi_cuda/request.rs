//! Operations in flight: an `MPI_Request` on device buffers, and an average's division once complete.

use super::comm::MpiCudaComm;
use crate::backend::mpi_host::request::MpiPending;
use crate::element::Element;
use crate::error::Result;
use crate::memory::DevMut;
use crate::op::ReduceOp;
use crate::request::{Pending, SetMember};

/// One non-blocking MPI operation on device buffers borrowed for `'s`.
pub(super) struct CudaPending<'s, T: Element> {
    /// The MPI request (with the received-count check of receives).
    pub(super) inner: MpiPending<'s, T>,
    /// For `Avg`: the communicator and the receive buffer whose sum is divided once complete.
    pub(super) average: Option<(&'s MpiCudaComm, &'s mut DevMut<'s, T>)>,
}

impl<T: Element> CudaPending<'_, T> {
    fn finish(&mut self) -> Result<()> {
        match self.average.take() {
            Some((comm, buf)) => comm.finish_avg(self.inner.op, ReduceOp::Avg, buf),
            None => Ok(()),
        }
    }
}

impl<T: Element> Pending for CudaPending<'_, T> {
    fn wait(&mut self) -> Result<()> {
        self.inner.wait()?;
        self.finish()
    }

    fn test(&mut self) -> Result<bool> {
        if !self.inner.test()? {
            return Ok(false);
        }
        self.finish().map(|()| true)
    }

    /// Without an average to finish, this is the MPI request alone: it joins a set's one
    /// `MPI_Waitall` as the host backend's do (`wait` above is then `inner.wait()`, which is what
    /// the set's completion runs). With one, it completes on its own, division included.
    fn set_member(&mut self) -> Option<SetMember<'_>> {
        if self.average.is_some() {
            return None;
        }
        self.inner.set_member()
    }
}
