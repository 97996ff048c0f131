//! The backends. Each lives in its own folder with the same file names: `comm.rs` (the communicator:
//! construction, teardown, checked mode), `collectives.rs` (the [`Communicator`](crate::Communicator)
//! implementation), `request.rs` (operations in flight), and `raw.rs` (the library calls' plumbing).

#[cfg(feature = "nccl")]
mod cuda_common;
#[cfg(feature = "nccl")]
pub mod mpi_cuda;
#[cfg(feature = "nccl")]
mod mpi_device;
pub mod mpi_host;
#[cfg(feature = "nccl")]
pub mod mpi_staged;
#[cfg(feature = "nccl")]
pub mod nccl;
