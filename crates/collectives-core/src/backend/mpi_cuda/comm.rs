//! [`MpiCudaComm`]: construction (with the CUDA-awareness verdict agreed on by every rank), streams,
//! teardown; and the device choice shared with the staged backend.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};

use super::route::{self, DevicePaths};
use crate::backend::cuda_common::{
    self, agree_setup, env_bytes, local_stream, Pool, DEFAULT_POOL_BYTES, POOL_ENV,
};
use crate::backend::mpi_device;
use crate::backend::mpi_host::MpiComm;
use crate::backend::mpi_staged::MpiStagedComm;
use crate::comm::{Communicator, DeviceCommunicator};
use crate::cuda_aware::{self, CudaAwareness, Vendor};
use crate::error::{Error, Result};
use crate::exchange::ExchangePart;
use crate::memory::DevMut;
use crate::op::{BackendKind, ReduceOp};
use crate::record;

/// A communicator of the CUDA-aware MPI backend: collectives on device memory (`CudaSlice<T>`
/// buffers) handed to MPI as device pointers. See the [module documentation](super).
///
/// ```no_run
/// use collectives_core::{Communicator, DeviceCommunicator, MpiComm, MpiCudaComm, ReduceOp};
///
/// let universe = mpi::initialize().expect("MPI initializes once");
/// let world = MpiComm::world(&universe)?;
/// // Refused, naming the evidence, when the MPI is not CUDA-aware.
/// let comm = MpiCudaComm::from_mpi(&world, None)?;
/// let mut x = comm.stream().clone_htod(&vec![1.0f32; 1 << 20]).expect("device memory");
/// comm.all_reduce_in_place(&mut x, ReduceOp::Sum)?;
/// # Ok::<(), collectives_core::Error>(())
/// ```
pub struct MpiCudaComm {
    pub(super) mpi: MpiComm,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    /// Whether construction was forced past a verdict other than yes.
    pub(super) forced: bool,
    /// Whether non-blocking collectives hand device pointers to MPI (else they stage through `pool`).
    pub(super) nbc_on_device: bool,
    /// Pinned host buffers for non-blocking collectives staged through host memory.
    pub(super) pool: Pool,
    /// Under a deadline, the path every operation takes (see the module documentation).
    pub(super) staged: Option<Box<MpiStagedComm>>,
    /// Without one, what goes on the MPI's device path ([`super::route`]).
    pub(super) paths: DevicePaths,
    /// The path the last call took, for the per-call record.
    pub(super) last: Cell<record::Path>,
}

impl DeviceCommunicator for MpiCudaComm {
    /// The stream the communicator orders its device accesses on.
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn mpi(&self) -> &MpiComm {
        &self.mpi
    }

    /// Under a deadline, the staged path moves to `stream` too.
    fn with_stream(mut self, stream: Arc<CudaStream>) -> Result<Self> {
        cuda_common::switching_stream(&self, &stream)?;
        if let Some(staged) = self.staged.take() {
            self.staged = Some(Box::new(staged.with_stream(stream.clone())?));
        }
        self.stream = stream;
        Ok(self)
    }

    /// On the device addresses unless a buffer is cudarc's pool memory (which the MPI cannot map;
    /// [`MpiCudaBuilder::device_pool_memory`]) or a deadline is set: then through pinned host
    /// copies.
    unsafe fn exchange_bytes(
        &self,
        op: &'static str,
        stream: &CudaStream,
        send: u64,
        sends: &[ExchangePart],
        recv: u64,
        recvs: &[ExchangePart],
    ) -> Result<()> {
        let pooled = || {
            (!sends.is_empty() && route::from_pool(send))
                || (!recvs.is_empty() && route::from_pool(recv))
        };
        let direct = self.paths.through_host(false, pooled).is_none();
        // SAFETY: the trait method's contract, which is the shared exchange's.
        unsafe {
            mpi_device::exchange_bytes(
                &self.mpi,
                &self.pool,
                op,
                stream,
                direct,
                (send, sends),
                (recv, recvs),
            )
        }
    }
}

impl fmt::Debug for MpiCudaComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpiCudaComm")
            .field("rank", &self.mpi.rank())
            .field("size", &self.mpi.size())
            .field("device", &self.ctx.ordinal())
            .field("checked", &self.mpi.checked())
            .field("forced", &self.forced)
            .field("nbc_on_device", &self.nbc_on_device)
            .field("paths", &self.paths)
            .field("timeout", &self.mpi.timeout())
            .finish_non_exhaustive()
    }
}

/// Where the device of an [`MpiCudaBuilder`] comes from.
#[derive(Debug)]
enum Place {
    Stream(Arc<CudaStream>),
    Device(Option<usize>),
}

/// Options of an [`MpiCudaComm`]; [`MpiCudaComm::builder`] makes one.
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct MpiCudaBuilder<'m> {
    mpi: &'m MpiComm,
    place: Place,
    force: bool,
    nbc_on_device: Option<bool>,
    paths: DevicePaths,
}

/// Whether the non-blocking collectives of an MPI of this family take device buffers. Open MPI's
/// CUDA support covers point-to-point and blocking collectives only (its documentation says so for
/// the non-blocking ones); MPICH (with its GPU support) and MVAPICH2-GDR take them; for others the
/// safe answer is no.
pub fn nonblocking_collectives_on_device(vendor: Vendor) -> bool {
    matches!(vendor, Vendor::Mpich | Vendor::Mvapich)
}

impl MpiCudaBuilder<'_> {
    /// Enqueue ordering on `stream` (and use its device) instead of a new stream.
    pub fn stream(mut self, stream: Arc<CudaStream>) -> Self {
        self.place = Place::Stream(stream);
        self
    }

    /// Use a new stream on `device` instead of the GPU of the node-local rank.
    pub fn device(mut self, device: usize) -> Self {
        self.place = Place::Device(Some(device));
        self
    }

    /// Hand device pointers to MPI even when detection does not say it is CUDA-aware (`true`), for
    /// MPIs whose awareness cannot be detected. With an MPI that is not CUDA-aware the first operation
    /// crashes the process.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Whether the non-blocking collectives (`i_all_reduce`, `i_reduce`, `i_all_to_all_v`, ...)
    /// hand device pointers to MPI (`true`)
    /// or stage through pinned host memory and MPI's non-blocking collective on it (`false`). The
    /// default follows the MPI's family ([`nonblocking_collectives_on_device`]); point-to-point and
    /// blocking collectives always take device pointers. Every rank must pass the same value.
    pub fn device_nonblocking_collectives(mut self, on: bool) -> Self {
        self.nbc_on_device = Some(on);
        self
    }

    /// Hand reductions (`all_reduce`, `reduce`, `reduce_scatter` and their forms) on device
    /// buffers to the MPI (`true`), instead of running the same MPI call on pinned host copies
    /// (`false`, the default: Open MPI reduces device buffers on the host, and lost to the copies
    /// at every size measured, docs/PERFORMANCE.md). For an MPI that reduces on the GPU.
    /// Each rank's own choice (both paths make the same MPI call).
    pub fn device_reductions(mut self, on: bool) -> Self {
        self.paths.reductions = on;
        self
    }

    /// Hand buffers from CUDA's stream-ordered pool (cudarc's allocations, where the device has
    /// pools) to the MPI (`true`), instead of running the call on pinned host copies (`false`,
    /// the default: the MPI's shared-memory transport cannot map pool memory into its peer and
    /// took about 1.2 ms a call, docs/PERFORMANCE.md). Buffers from `cuMemAlloc`
    /// ([`IpcBuffer`](super::IpcBuffer)) go to the MPI either way. For an MPI that maps pool
    /// memory. Each rank's own choice.
    pub fn device_pool_memory(mut self, on: bool) -> Self {
        self.paths.pool_memory = on;
        self
    }

    /// Make the communicator. Collective over the MPI communicator.
    ///
    /// # Errors
    /// [`Error::Unavailable`] (`what: "a CUDA-aware MPI"`) naming the detection's evidence when the
    /// MPI is not known to be CUDA-aware and `force` is off, or without a CUDA driver or GPU;
    /// [`Error::InvalidArgument`] for a device that does not exist, and on the ranks whose own part
    /// went well when another rank's did not; [`Error::Mpi`] and [`Error::Cuda`] from the libraries;
    /// [`Error::Timeout`] under the MPI communicator's deadline when a rank does not take part.
    pub fn build(self) -> Result<MpiCudaComm> {
        const OP: &str = "mpi_cuda";
        let _span = tracing::debug_span!("mpi_cuda_new").entered();
        let mpi = self.mpi.dup()?;
        // The node-local split is collective: made on every rank before anything can fail locally.
        let stream = match self.place {
            Place::Stream(s) => Ok(s),
            Place::Device(d) => local_stream(OP, &mpi, d),
        };
        let local = verdict(self.force).and_then(|forced| stream.map(|s| (forced, s)));
        let (forced, stream) = agree_setup(OP, &mpi, local)?;
        let ctx = stream.context().clone();
        ctx.bind_to_thread().map_err(|e| Error::cuda(OP, e))?;
        let vendor = cuda_aware::detect()?.facts.vendor();
        let staged = deadline_path(&mpi, &stream)?;
        Ok(MpiCudaComm {
            staged,
            mpi,
            pool: Pool::new(ctx.clone(), env_bytes(POOL_ENV, DEFAULT_POOL_BYTES)),
            ctx,
            stream,
            forced,
            nbc_on_device: self
                .nbc_on_device
                .unwrap_or_else(|| nonblocking_collectives_on_device(vendor)),
            paths: self.paths,
            last: Cell::new(route::DEVICE),
        })
    }
}

/// Under a deadline (`mpi`'s), the staged communicator every operation runs through; collective over
/// `mpi`.
fn deadline_path(mpi: &MpiComm, stream: &Arc<CudaStream>) -> Result<Option<Box<MpiStagedComm>>> {
    if mpi.timeout().is_none() {
        return Ok(None);
    }
    let staged = MpiStagedComm::new(mpi, stream.clone())?.serving(BackendKind::MpiCuda, mpi);
    Ok(Some(Box::new(staged)))
}

/// Whether this process may hand device pointers to MPI: `Ok(false)` when detection says yes,
/// `Ok(true)` when forced past another verdict, else the refusal naming the evidence.
fn verdict(force: bool) -> Result<bool> {
    let detection = cuda_aware::detect()?;
    match (&detection.awareness, force) {
        (CudaAwareness::Yes { .. }, _) => Ok(false),
        (_, true) => Ok(true),
        (other, false) => Err(refusal(other)),
    }
}

/// The error of a construction refused because of `awareness`.
pub(crate) fn refusal(awareness: &CudaAwareness) -> Error {
    let why = match awareness {
        CudaAwareness::No { reason } => format!("the MPI library is not CUDA-aware: {reason}"),
        _ => format!(
            "cannot tell whether the MPI library is CUDA-aware: {awareness}; force(true) if it is"
        ),
    };
    Error::Unavailable {
        what: "a CUDA-aware MPI",
        message: format!(
            "{why}. Device buffers can go through MpiStagedComm (pinned host memory) or NcclComm instead"
        ),
    }
}

impl MpiCudaComm {
    /// A CUDA-aware MPI communicator over the ranks of `mpi`, ordering on `stream` (whose device the
    /// buffers must live on). Collective over `mpi`.
    ///
    /// # Errors
    /// As [`MpiCudaBuilder::build`].
    pub fn new(mpi: &MpiComm, stream: Arc<CudaStream>) -> Result<Self> {
        Self::builder(mpi).stream(stream).build()
    }

    /// A CUDA-aware MPI communicator over the ranks of `mpi` on `device`, or on the GPU of this rank's
    /// node-local index, with a new stream. Collective over `mpi`.
    ///
    /// # Errors
    /// As [`MpiCudaBuilder::build`].
    pub fn from_mpi(mpi: &MpiComm, device: Option<usize>) -> Result<Self> {
        let builder = Self::builder(mpi);
        match device {
            Some(d) => builder.device(d),
            None => builder,
        }
        .build()
    }

    /// Options for a communicator over the ranks of `mpi`: by default a new stream on the GPU of the
    /// node-local rank, not forced.
    pub fn builder(mpi: &MpiComm) -> MpiCudaBuilder<'_> {
        MpiCudaBuilder {
            mpi,
            place: Place::Device(None),
            force: false,
            nbc_on_device: None,
            paths: DevicePaths {
                reductions: false,
                pool_memory: false,
            },
        }
    }

    /// Whether construction was forced past a verdict other than yes.
    pub fn forced(&self) -> bool {
        self.forced
    }

    /// Whether non-blocking collectives hand device pointers to MPI (else they stage through pinned
    /// host memory); see [`MpiCudaBuilder::device_nonblocking_collectives`].
    pub fn device_nonblocking_collectives(&self) -> bool {
        self.nbc_on_device
    }

    /// Whether reductions on device buffers go to the MPI; see
    /// [`MpiCudaBuilder::device_reductions`].
    pub fn device_reductions(&self) -> bool {
        self.paths.reductions
    }

    /// Whether buffers from a stream-ordered pool go to the MPI; see
    /// [`MpiCudaBuilder::device_pool_memory`].
    pub fn device_pool_memory(&self) -> bool {
        self.paths.pool_memory
    }

    /// Switch checked mode on or off (overrides `COLLECTIVES_CHECK`, whose default is on in debug
    /// builds); every rank must agree. This is the setting of a communicator that is not wrapped:
    /// [`Checked::new`](crate::Checked::new) is the explicit way to have checked mode whatever it
    /// says (see [`crate::checked`]).
    #[must_use]
    pub fn with_checked(mut self, on: bool) -> Self {
        self.mpi.set_checked(on);
        if let Some(staged) = &mut self.staged {
            staged.set_checked(on);
        }
        self
    }

    /// Free the communicator after the stream's work completes, reporting errors.
    ///
    /// # Errors
    /// [`Error::Cuda`] from the wait; [`Error::Mpi`] from `MPI_Comm_free`.
    pub fn finalize(self) -> Result<()> {
        self.synchronize()?;
        if let Some(staged) = self.staged {
            staged.finalize()?;
        }
        self.mpi.finalize()
    }

    /// Where cudarc does not track a buffer's uses (event tracking off, or a single stream in its
    /// context), taking it on the communicator's stream does not order the work of the buffer's own
    /// stream before it: wait for those streams here.
    pub(super) fn foreign(&self, op: &'static str, streams: &[&Arc<CudaStream>]) -> Result<()> {
        for s in streams {
            // The buffer's own context decides whether taking it on our stream waits for its writes.
            if !Arc::ptr_eq(s, &self.stream) && !s.context().is_managing_stream_synchronization() {
                s.synchronize().map_err(|e| Error::cuda(op, e))?;
            }
        }
        Ok(())
    }

    /// Wait for the communicator's stream: called after the buffers were taken on it (which orders
    /// their producers on other streams before it) and before MPI reads or writes them.
    pub(super) fn sync(&self, op: &'static str) -> Result<()> {
        self.stream.synchronize().map_err(|e| Error::cuda(op, e))
    }

    /// The second half of an average: the sum MPI computed, divided by the number of ranks, through
    /// host memory.
    pub(super) fn finish_avg<T: crate::element::Element>(
        &self,
        op: &'static str,
        red: ReduceOp,
        buf: &mut DevMut<'_, T>,
    ) -> Result<()> {
        if red != ReduceOp::Avg || buf.is_empty() {
            return Ok(());
        }
        let mut host = crate::device::download(&self.stream, buf)?;
        T::divide_all(&mut host, self.mpi.size());
        crate::device::copy_to_device(&self.stream, &host, buf)?;
        self.sync(op)
    }

    /// A communicator for a new MPI communicator of some of these ranks, on the same stream.
    /// Collective over `mpi` under a deadline (its staged path is made).
    pub(super) fn derived(&self, mpi: MpiComm) -> Result<MpiCudaComm> {
        let staged = deadline_path(&mpi, &self.stream)?;
        Ok(MpiCudaComm {
            staged,
            mpi,
            ctx: self.ctx.clone(),
            stream: self.stream.clone(),
            forced: self.forced,
            nbc_on_device: self.nbc_on_device,
            paths: self.paths,
            last: Cell::new(route::DEVICE),
            pool: Pool::new(self.ctx.clone(), self.pool.limit()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda_common::cuda_unavailable;
    use crate::cuda_aware::Evidence;

    #[test]
    fn refusals_name_the_evidence() {
        let e = refusal(&CudaAwareness::No {
            reason: Evidence::OmpiQuery(0),
        });
        match &e {
            Error::Unavailable { what, message } => {
                assert_eq!(*what, "a CUDA-aware MPI");
                assert!(
                    message.contains(
                        "not CUDA-aware: Open MPI's MPIX_Query_cuda_support() returned 0"
                    ),
                    "{message}"
                );
                assert!(message.contains("MpiStagedComm"));
            }
            other => panic!("{other:?}"),
        }
        let e = refusal(&CudaAwareness::Unknown).to_string();
        assert!(
            e.contains("cannot tell") && e.contains("force(true)"),
            "{e}"
        );
    }

    #[test]
    fn open_mpi_stages_its_nonblocking_collectives() {
        assert!(!nonblocking_collectives_on_device(Vendor::OpenMpi));
        assert!(!nonblocking_collectives_on_device(Vendor::CrayMpich));
        assert!(!nonblocking_collectives_on_device(Vendor::Other));
        assert!(nonblocking_collectives_on_device(Vendor::Mpich));
        assert!(nonblocking_collectives_on_device(Vendor::Mvapich));
    }

    #[test]
    fn no_gpu_is_an_answer_not_a_panic() {
        if let Some(why) = cuda_unavailable() {
            assert!(!why.is_empty());
        }
    }
}
