//! Operations in flight: an `MPI_Request` on pinned host buffers, and the copy of the result back to
//! the device once complete (also used by the CUDA-aware backend where its MPI takes no device
//! buffers in non-blocking collectives).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::raw::{self, Lease};
use crate::backend::mpi_host::request::MpiPending;
use crate::element::Element;
use crate::error::Result;
use crate::request::Pending;

/// One non-blocking staged operation on device buffers borrowed for `'s`.
pub(crate) struct StagedPending<'s, T: Element> {
    /// The MPI request on the host buffers (with the received-count check and an average's division).
    pub(crate) inner: MpiPending<'s, T>,
    /// The stream of the copies.
    pub(crate) stream: &'s Arc<CudaStream>,
    /// Host buffers MPI reads until completion.
    pub(crate) keep: Vec<Lease<'s, T>>,
    /// The host buffer MPI writes, and the device buffer it is copied to once complete.
    pub(crate) back: Option<(Lease<'s, T>, &'s mut CudaSlice<T>)>,
}

impl<T: Element> StagedPending<'_, T> {
    fn finish(&mut self) -> Result<()> {
        self.keep.clear();
        match self.back.take() {
            Some((host, dev)) => raw::stage_out(self.inner.op, self.stream, host.host(), dev),
            None => Ok(()),
        }
    }
}

impl<T: Element> Pending for StagedPending<'_, T> {
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
}
