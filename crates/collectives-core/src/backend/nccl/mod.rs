//! NCCL on device memory (cudarc [`CudaSlice`](cudarc::driver::CudaSlice) buffers), bootstrapped from MPI.
//!
//! - **Creation** ([`NcclComm::from_mpi`]): rank 0 makes the unique id and the MPI communicator
//!   broadcasts it; each rank takes the GPU of its node-local rank (`MPI_Comm_split_type` shared) unless
//!   told otherwise, and two ranks on one GPU are refused. Initialization is non-blocking with a
//!   deadline, so a rank that never arrives is [`Error::Timeout`](crate::Error::Timeout), not a hang.
//!   The operations then run on a blocking communicator split from it (a non-blocking one hands every
//!   call to an asynchronous job, tens of microseconds each), whose peers are connected at creation
//!   by a one-element all-reduce, so no later call blocks the host connecting to a silent peer.
//! - **Stream order**: every operation is enqueued on the communicator's stream and returns; results
//!   are ready when the stream reaches them. [`NcclComm::synchronize`](crate::DeviceCommunicator::synchronize) (and [`Request::wait`](crate::Request::wait)
//!   for the non-blocking twins) wait with a deadline, polling `ncclCommGetAsyncError`; on expiry the
//!   communicator is aborted (`ncclCommAbort`) and the call returns `Err(Timeout)`, so a dead or silent
//!   peer never hangs the others. cudarc's stream tracking orders the buffers' other uses around ours.
//! - **Elements**: complex numbers travel as two lanes of their real type; only Sum and Avg are allowed
//!   for them (a lane-wise product would be wrong); `f16`/`bf16` reduce natively.
//! - **Uneven collectives** (`all_gather_v`, `gather(_v)`, `scatter(_v)`, `all_to_all(_v)`) are grouped
//!   point-to-point transfers: no padding, no device memory beyond the buffers themselves.
//! - **Tags**: NCCL has none; point-to-point messages between two ranks match in the order they were
//!   posted, and the `tag` argument is checked for range only.
//! - **Checked mode** agrees through the MPI communicator the NCCL one was made from.
//! - **Registration** (the small-message fast path): [`NcclComm::register`] registers any device
//!   buffer (`ncclCommRegister`); [`NcclComm::alloc_registered`] gives memory from `ncclMemAlloc`,
//!   optionally registered or registered on every rank as a symmetric window
//!   (`ncclCommWindowRegister`), as an [`NcclBuffer`] that every collective takes as a device
//!   buffer (see the `register` module's documentation).

mod aborts;
mod collectives;
mod comm;
pub mod one_shot;
mod persistent;
mod raw;
mod register;
mod request;

pub use super::cuda_common::cuda_driver_present;
pub use comm::{GroupGuard, NcclComm, UnevenAlgorithm};
pub use register::{NcclBuffer, RegisterMode, Registration};
