//! Device memory (cudarc [`CudaSlice`](cudarc::driver::CudaSlice) buffers) through pinned host memory
//! and the host MPI: the path for MPIs that are not CUDA-aware, and the baseline that shows what
//! staging costs.
//!
//! - **Construction** ([`MpiStagedComm::new`], [`MpiStagedComm::from_mpi`]) is collective; it needs a
//!   CUDA driver and a GPU, not a CUDA-aware MPI.
//! - **Each operation** copies its device inputs into pinned host buffers on the communicator's stream,
//!   waits, runs the host backend's operation on them ([`MpiComm`](crate::MpiComm): the same argument
//!   rules, counts and MPI datatypes, so complex `Prod` is allowed:
//!   [`BackendKind::MpiStaged`](crate::BackendKind::MpiStaged)), copies the results back and waits.
//!   Blocking operations are complete on return; non-blocking ones copy back when waited for.
//! - **Pipelining**: all-reduces move in chunks of [`MpiStagedComm::chunk_bytes`] (default 4 MiB,
//!   `COLLECTIVES_STAGED_CHUNK`): the copy of chunk `k + 1` to the host overlaps MPI's reduction of
//!   chunk `k`, and the copy of chunk `k` back overlaps the reduction of chunk `k + 1`.
//! - **Pinned memory** is cacheable (not write-combined, which the CPU reads slowly) and pooled: a
//!   lease per buffer, returned when the operation completes; the pool keeps up to
//!   `COLLECTIVES_STAGED_POOL` bytes (default 1 GiB, [`MpiStagedComm::with_pool_bytes`]).
//! - **Deadline**: the [`MpiComm`](crate::MpiComm)'s it is built from
//!   ([`MpiComm::with_timeout`](crate::MpiComm::with_timeout)). Under one, the MPI part of every
//!   operation is polled against it (on copies of the pinned buffers); a timeout is
//!   [`Error::Timeout`](crate::Error::Timeout) and refuses the communicator
//!   ([`Error::Unusable`](crate::Error::Unusable)) from then on.
//! - **Stream order**: copies are enqueued on the communicator's stream, where cudarc orders them
//!   after the buffers' producers on other streams; with cudarc's event tracking off, a buffer of
//!   another stream has that stream synchronized first.

mod collectives;
mod comm;
mod raw;
mod request;

pub use super::cuda_common::{parse_bytes, DEFAULT_POOL_BYTES, POOL_ENV};
pub use comm::MpiStagedComm;
pub use raw::{CHUNK_ENV, DEFAULT_CHUNK_BYTES};
