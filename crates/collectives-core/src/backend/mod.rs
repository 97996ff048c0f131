//! The backends. Each lives in its own folder with the same file names: `comm.rs` (the communicator:
//! construction, teardown, checked mode), `collectives.rs` (the backend's raw, already-checked
//! operations: the front end in `frontend.rs` makes every one of them a
//! [`Communicator`](crate::Communicator) through the same rules, agreement and finishing),
//! `request.rs` (operations in flight), and `raw.rs` (the library calls' plumbing). docs/design.md
//! says how a call travels and how to add a collective or a backend.

#[cfg(feature = "cuda")]
pub(crate) mod cuda_common;
#[cfg(feature = "cuda")]
pub mod mpi_cuda;
#[cfg(feature = "cuda")]
mod mpi_device;
pub mod mpi_host;
#[cfg(feature = "cuda")]
pub mod mpi_staged;
#[cfg(feature = "nccl")]
pub mod nccl;
