//! A CUDA-aware MPI on device memory (cudarc [`CudaSlice`](cudarc::driver::CudaSlice) buffers).
//!
//! - **Construction** ([`MpiCudaComm::new`], [`MpiCudaComm::from_mpi`], [`MpiCudaComm::builder`]) is
//!   collective: it duplicates the MPI communicator, asks [`crate::cuda_aware::detect`] whether the MPI
//!   takes device pointers, and refuses with [`Error::Unavailable`](crate::Error::Unavailable) naming
//!   the evidence when it does not (or cannot tell), on every rank, unless the caller forces it
//!   ([`MpiCudaBuilder::force`]). Handing device pointers to an MPI that is not CUDA-aware crashes the
//!   process, so forcing is for MPIs whose awareness cannot be detected.
//! - **Stream order**: MPI knows nothing of CUDA streams. Before MPI touches device memory, every
//!   buffer is taken on the communicator's stream (so cudarc orders the buffers' producers on other
//!   streams before it) and that stream is synchronized; a buffer whose own stream is another one while
//!   cudarc's event tracking is off has its stream synchronized too. Blocking operations are complete
//!   when they return; non-blocking ones when their [`Request`](crate::Request) is waited for.
//! - **Elements**: MPI's own datatypes, so complex numbers use MPI's complex types and `Prod` of
//!   complex numbers is allowed ([`BackendKind::MpiCuda`](crate::BackendKind::MpiCuda)); `f16`/`bf16`
//!   move as 16-bit words and cannot be reduced. `Avg` of floats is an MPI sum followed by a division
//!   through host memory (a download, a division, an upload): correct but a round trip; for speed,
//!   reduce with `Sum` and scale in your own kernel.
//! - **Non-blocking**: `i_send`, `i_recv` and `i_send_recv` hand device pointers to MPI. The
//!   non-blocking collectives (`i_all_reduce`, `i_broadcast`, `i_reduce`, `i_gather_v`, ... and
//!   `i_barrier`, which only waits for the stream first) do too where the MPI takes device buffers
//!   in non-blocking collectives (MPICH,
//!   MVAPICH2-GDR); with Open MPI, whose CUDA support covers point-to-point and blocking collectives
//!   only, and with MPIs not known to, they copy to pinned host memory, start MPI's non-blocking
//!   collective there, and copy the result back when waited for
//!   ([`MpiCudaBuilder::device_nonblocking_collectives`] overrides the choice).
//! - **Memory and paths**: any `CudaSlice<T>` works. cudarc takes it from CUDA's stream-ordered
//!   pool where the device has one, and pool memory cannot be exported with legacy CUDA IPC
//!   (`cuIpcGetMemHandle`), which Open MPI's shared-memory transport uses between GPUs of a node:
//!   it then falls back to a path that took about 1.2 ms a call on H100. So each call picks its
//!   path: one with a buffer from a pool, and every reduction (Open MPI reduces device
//!   buffers on the host, slower than our copies at every size measured), makes the same MPI call
//!   on pinned host copies of its buffers; the others hand device pointers to MPI. The per-call
//!   record ([`crate::record`]) names the path and why. [`IpcBuffer`] allocates with `cuMemAlloc`,
//!   which the MPI maps; [`MpiCudaBuilder::device_pool_memory`] and
//!   [`MpiCudaBuilder::device_reductions`] hand those calls to an MPI that does them well.
//! - **Arguments, counts, checked mode**: exactly as [`MpiComm`](crate::MpiComm), through the same
//!   helpers, plus a check that every buffer lives on the communicator's device.
//! - **Deadline**: the [`MpiComm`](crate::MpiComm)'s it is built from
//!   ([`MpiComm::with_timeout`](crate::MpiComm::with_timeout)). Under one, every operation runs as
//!   [`MpiStagedComm`](crate::MpiStagedComm)'s does (through pinned host memory, with this backend's
//!   argument rules and errors), polled against the deadline: Open MPI has no non-blocking collectives
//!   on device memory, and an operation that times out stays in flight inside MPI, so it must work on
//!   memory this crate owns and never frees, which the caller's device buffers are not. A timeout is
//!   [`Error::Timeout`](crate::Error::Timeout) and refuses the communicator
//!   ([`Error::Unusable`](crate::Error::Unusable)) from then on. Without a deadline nothing changes.

mod collectives;
mod comm;
mod raw;
mod request;
pub(crate) mod route;

pub use super::cuda_common::{cuda_unavailable, node_local};
pub use comm::{nonblocking_collectives_on_device, MpiCudaBuilder, MpiCudaComm};
pub use raw::IpcBuffer;
