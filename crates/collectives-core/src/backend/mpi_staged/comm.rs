//! [`MpiStagedComm`]: construction, the chunk size and pool of pinned buffers, teardown.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};

use super::raw;
use crate::backend::cuda_common::{self, Pool};
use crate::backend::cuda_common::{agree_setup, local_stream};
use crate::backend::mpi_device;
use crate::backend::mpi_host::MpiComm;
use crate::comm::{Communicator, DeviceCommunicator};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::exchange::ExchangePart;
use crate::memory::{Dev, DevMut};
use crate::op::{BackendKind, ReduceOp};

/// A communicator of the staged backend: device buffers (`CudaSlice<T>`) copied to pinned host memory,
/// through the host MPI, and back. Works with any MPI, CUDA-aware or not. See the
/// [module documentation](super).
///
/// ```no_run
/// use collectives_core::{Communicator, DeviceCommunicator, MpiComm, MpiStagedComm, ReduceOp};
///
/// let universe = mpi::initialize().expect("MPI initializes once");
/// let world = MpiComm::world(&universe)?;
/// let comm = MpiStagedComm::from_mpi(&world, None)?;
/// let mut x = comm.stream().clone_htod(&vec![1.0f32; 1 << 20]).expect("device memory");
/// comm.all_reduce_in_place(&mut x, ReduceOp::Sum)?;
/// # Ok::<(), collectives_core::Error>(())
/// ```
pub struct MpiStagedComm {
    /// Checked-mode agreement (checked as the caller asks).
    pub(super) mpi: MpiComm,
    /// The host collectives on the pinned buffers (never checked: agreement is made through `mpi`).
    pub(super) host: MpiComm,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    /// Elements of an all-reduce move in chunks of this many bytes, pipelined.
    pub(super) chunk_bytes: usize,
    pub(super) pool: Pool,
    /// Whose reduction rules apply: this backend's, or the CUDA-aware one's when it runs its
    /// operations through this path under a deadline.
    pub(super) kind: BackendKind,
}

impl DeviceCommunicator for MpiStagedComm {
    /// The stream the copies are enqueued on.
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn mpi(&self) -> &MpiComm {
        &self.mpi
    }

    fn with_stream(mut self, stream: Arc<CudaStream>) -> Result<Self> {
        cuda_common::switching_stream(&self, &stream)?;
        self.stream = stream;
        Ok(self)
    }

    /// Through pinned host copies of the parts, on the host communicator.
    unsafe fn exchange_bytes(
        &self,
        op: &'static str,
        stream: &CudaStream,
        send: u64,
        sends: &[ExchangePart],
        recv: u64,
        recvs: &[ExchangePart],
    ) -> Result<()> {
        // SAFETY: the trait method's contract, which is the shared exchange's.
        unsafe {
            mpi_device::exchange_bytes(
                &self.host,
                &self.pool,
                op,
                stream,
                false,
                (send, sends),
                (recv, recvs),
            )
        }
    }
}

impl fmt::Debug for MpiStagedComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpiStagedComm")
            .field("rank", &self.mpi.rank())
            .field("size", &self.mpi.size())
            .field("device", &self.ctx.ordinal())
            .field("checked", &self.mpi.checked())
            .field("chunk_bytes", &self.chunk_bytes)
            .field("pool_limit", &self.pool.limit())
            .finish_non_exhaustive()
    }
}

impl MpiStagedComm {
    /// A staged communicator over the ranks of `mpi`, copying on `stream` (whose device the buffers
    /// must live on). Collective over `mpi`.
    ///
    /// The chunk size of pipelined all-reduces is `COLLECTIVES_STAGED_CHUNK` bytes (default 4 MiB; the
    /// smallest value over the ranks, so that all split alike), the pool keeps at most
    /// `COLLECTIVES_STAGED_POOL` bytes of pinned memory between operations (default 1 GiB).
    ///
    /// The deadline and checked mode are `mpi`'s ([`MpiComm::with_timeout`]): under a deadline every
    /// operation's MPI part is polled against it on copies of the pinned buffers, and a timeout is
    /// [`Error::Timeout`], after which the communicator is refused ([`Error::Unusable`]).
    ///
    /// # Errors
    /// [`Error::Mpi`] from duplicating `mpi`; [`Error::InvalidArgument`] on the ranks whose own part
    /// went well when another rank's did not; [`Error::Timeout`] under a deadline when a rank does not
    /// take part.
    pub fn new(mpi: &MpiComm, stream: Arc<CudaStream>) -> Result<Self> {
        Self::make(mpi, Ok(stream))
    }

    /// A staged communicator over the ranks of `mpi` on `device`, or on the GPU of this rank's
    /// node-local index (round robin when a node has more ranks than GPUs), with a new stream.
    /// Collective over `mpi`.
    ///
    /// # Errors
    /// [`Error::Unavailable`] without a CUDA driver or GPU; [`Error::InvalidArgument`] for a device
    /// that does not exist; as [`new`](Self::new).
    pub fn from_mpi(mpi: &MpiComm, device: Option<usize>) -> Result<Self> {
        let stream = local_stream("mpi_staged", mpi, device);
        Self::make(mpi, stream)
    }

    fn make(mpi: &MpiComm, stream: Result<Arc<CudaStream>>) -> Result<Self> {
        const OP: &str = "mpi_staged";
        let _span = tracing::debug_span!("mpi_staged_new").entered();
        let dup = mpi.dup()?;
        let host = dup.dup()?.with_checked(false).linked_to(&dup);
        let stream = agree_setup(OP, &dup, stream)?;
        let mut chunk = [cuda_common::env_bytes(raw::CHUNK_ENV, raw::DEFAULT_CHUNK_BYTES) as u64];
        host.all_reduce_in_place(&mut chunk[..], ReduceOp::Min)?;
        let ctx = stream.context().clone();
        ctx.bind_to_thread().map_err(|e| Error::cuda(OP, e))?;
        Ok(MpiStagedComm {
            mpi: dup,
            host,
            pool: Pool::new(
                ctx.clone(),
                cuda_common::env_bytes(cuda_common::POOL_ENV, cuda_common::DEFAULT_POOL_BYTES),
            ),
            ctx,
            stream,
            chunk_bytes: chunk[0] as usize,
            kind: BackendKind::MpiStaged,
        })
    }

    /// This communicator as the path of an [`MpiCudaComm`](crate::MpiCudaComm) under a deadline:
    /// its argument rules are that backend's, and a timeout here refuses `mpi` (that communicator's
    /// own MPI communicator) too.
    pub(crate) fn serving(mut self, kind: BackendKind, mpi: &MpiComm) -> Self {
        self.kind = kind;
        self.mpi = self.mpi.linked_to(mpi);
        self.host = self.host.linked_to(mpi);
        self
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

    pub(crate) fn set_checked(&mut self, on: bool) {
        self.mpi.set_checked(on);
    }

    /// Pipeline all-reduces in chunks of `bytes` (at least one element); every rank must pass the same
    /// value. Copies of chunk `k + 1` overlap MPI's work on chunk `k`: too small a chunk pays MPI's
    /// per-call cost many times, too large a one overlaps little. The default (4 MiB) is a starting
    /// point; measure on the target machine (`collbench allreduce --backend mpi-staged` with
    /// `COLLECTIVES_STAGED_CHUNK` set).
    #[must_use]
    pub fn with_chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes.max(1);
        self
    }

    /// The chunk size of pipelined all-reduces, in bytes.
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// Keep at most `bytes` of pinned host memory for reuse between operations.
    #[must_use]
    pub fn with_pool_bytes(self, bytes: usize) -> Self {
        self.pool.set_limit(bytes);
        self
    }

    /// Pinned host memory held for reuse now, in bytes.
    pub fn pooled_bytes(&self) -> usize {
        self.pool.held()
    }

    /// Free the communicator after the stream's work completes, reporting errors.
    ///
    /// # Errors
    /// [`Error::Cuda`] from the wait; [`Error::Mpi`] from `MPI_Comm_free`.
    pub fn finalize(self) -> Result<()> {
        self.synchronize()?;
        let MpiStagedComm { mpi, host, .. } = self;
        host.finalize()?;
        mpi.finalize()
    }

    pub(super) fn sync(&self, op: &'static str) -> Result<()> {
        self.stream.synchronize().map_err(|e| Error::cuda(op, e))
    }

    /// Copy `host` into `dev` and wait for the copy.
    pub(super) fn stage_out<T: Element>(
        &self,
        op: &'static str,
        host: &[T],
        dev: &mut DevMut<'_, T>,
    ) -> Result<()> {
        cuda_common::stage_out(op, &self.stream, host, dev)
    }

    /// See [`cuda_common::foreign`].
    pub(super) fn foreign<T>(&self, op: &'static str, buf: &Dev<'_, T>) -> Result<()> {
        cuda_common::foreign(op, &self.stream, buf)
    }

    /// A communicator for a new MPI communicator of some of these ranks, on the same stream.
    pub(super) fn derived(&self, mpi: MpiComm) -> Result<MpiStagedComm> {
        let host = mpi.dup()?.with_checked(false).linked_to(&mpi);
        Ok(MpiStagedComm {
            mpi,
            host,
            ctx: self.ctx.clone(),
            stream: self.stream.clone(),
            chunk_bytes: self.chunk_bytes,
            pool: Pool::new(self.ctx.clone(), self.pool.limit()),
            kind: self.kind,
        })
    }
}
