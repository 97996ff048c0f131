//! Operations in flight: a CUDA event recorded after the enqueued work.

use std::marker::PhantomData;

use cudarc::driver::{CudaEvent, CudaSlice};

use super::comm::NcclComm;
use crate::error::{Error, Result};
use crate::request::Pending;

/// One non-blocking NCCL operation on buffers borrowed for `'s`.
pub(super) struct NcclPending<'s> {
    pub(super) comm: &'s NcclComm,
    pub(super) event: CudaEvent,
    pub(super) op: &'static str,
    pub(super) done: bool,
    /// Device memory the operation itself allocated (`i_barrier`'s value), freed once complete:
    /// freeing it earlier may wait for the stream.
    pub(super) scratch: Option<CudaSlice<f32>>,
    pub(super) _buffers: PhantomData<&'s mut ()>,
}

impl Pending for NcclPending<'_> {
    fn wait(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        let op = self.op;
        let event = &self.event;
        let r = self.comm.wait_for(op, || {
            event.try_is_complete().map_err(|e| Error::cuda(op, e))
        });
        self.done = true;
        self.scratch = None;
        r
    }

    fn test(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let complete = self
            .event
            .try_is_complete()
            .map_err(|e| Error::cuda(self.op, e))?;
        if !complete {
            self.comm.async_error(self.op)?;
            return Ok(false);
        }
        self.done = true;
        self.scratch = None;
        Ok(true)
    }
}
