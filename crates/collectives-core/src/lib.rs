//! One safe collective layer over MPI and NCCL.
//!
//! | layer | what it holds |
//! |---|---|
//! | [`element`] | [`Element`]: the types that travel, their MPI datatype and NCCL wire form |
//! | [`op`] | [`ReduceOp`], [`BackendKind`], which reductions each backend can do with each element |
//! | [`comm`] | the [`Communicator`] trait every backend implements; `DeviceCommunicator` (stream, deadline, wait) for the device backends |
//! | [`request`] | non-blocking operations: [`scope`], [`Request`] |
//! | [`persistent`] | persistent collectives (`*_init`): a [`Persistent`] plan started and completed many times, and the [`PlanPath`] each backend takes |
//! | [`check`], [`checked`] | argument rules (always on; one table for every backend) and checked mode (cross-rank agreement): [`Checked`] wraps any communicator in it |
//! | [`record`] | the per-call record (`COLLECTIVES_RECORD`): which operations ran, on which path, how large, how long |
//! | [`exchange`](mod@exchange) | [`ExchangePart`]: the grouped exchange of byte parts every backend offers (a halo exchange's transfers) |
//! | [`deadline`] | `COLLECTIVES_TIMEOUT` and the one polling loop that waits against a deadline |
//! | [`backend`] | the implementations: [`MpiComm`] (MPI on host memory), `NcclComm` (NCCL on device memory, feature `nccl`, on by default) |
//! | [`cuda_aware`] | whether the MPI library takes device pointers, with the evidence ([`CudaAwareness`]) |
//! | [`netif`] | this host's network interfaces, and which ones NCCL's sockets and Open MPI's TCP transports would take |
//! | `backend::{mpi_cuda, mpi_staged}` | `MpiCudaComm` (device pointers to a CUDA-aware MPI) and `MpiStagedComm` (device buffers through pinned host memory and any MPI); with the `cuda` feature (the CUDA driver bindings; `nccl` implies it) |
//! | [`array`](mod@array) | ndarray arrays as host buffers (feature `ndarray`, on by default) |
//!
//! Raw bindings are re-exported: [`mpi`] (rsmpi, whose `mpi::ffi` is the MPI C interface), with the
//! `cuda` feature `cudarc` (CUDA driver, loaded at run time), and with the `nccl` feature (which
//! implies `cuda`) `nccl_sys` (NCCL, loaded at run time).
//!
//! ```no_run
//! use collectives_core::{Communicator, MpiComm, ReduceOp};
//!
//! let universe = mpi::initialize().expect("MPI initializes once");
//! let comm = MpiComm::world(&universe)?;
//! let send = vec![comm.rank() as f64 + 1.0; 8];
//! let mut recv = vec![0.0; 8];
//! comm.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum)?;
//! let n = comm.size() as f64;
//! assert_eq!(recv[0], n * (n + 1.0) / 2.0);
//! # Ok::<(), collectives_core::Error>(())
//! ```
#![deny(missing_docs)]

#[cfg(feature = "ndarray")]
pub mod array;
pub mod backend;
pub mod check;
pub mod checked;
pub mod comm;
pub mod cuda_aware;
pub mod deadline;
#[cfg(feature = "cuda")]
pub mod device;
pub mod element;
pub mod error;
pub mod exchange;
mod frontend;
#[cfg(feature = "cuda")]
pub mod ipc;
pub mod memory;
pub mod netif;
#[cfg(feature = "cuda")]
pub mod one_shot;
pub mod op;
mod operation;
pub mod persistent;
pub mod record;
pub mod request;
mod rules;
mod transport;

pub use mpi;

#[cfg(feature = "ndarray")]
pub use array::{HostArray, HostArrayMut};
#[cfg(feature = "cuda")]
pub use backend::mpi_cuda::MpiCudaComm;
pub use backend::mpi_host::{MpiComm, ProgressOptions, ProgressStats};
#[cfg(feature = "cuda")]
pub use backend::mpi_staged::MpiStagedComm;
#[cfg(feature = "nccl")]
pub use backend::nccl::{NcclBuffer, NcclComm, RegisterMode, Registration};
pub use checked::Checked;
#[cfg(feature = "cuda")]
pub use comm::DeviceCommunicator;
pub use comm::{Buf, BufMut, Communicator, Tag};
pub use cuda_aware::CudaAwareness;
#[cfg(feature = "cuda")]
pub use cudarc;
pub use element::{DType, Element, ElementKind, WireForm};
pub use error::{Error, Result};
pub use exchange::ExchangePart;
pub use memory::{Buffer, Host, Space};
#[cfg(feature = "cuda")]
pub use memory::{Device, DeviceBuffer, DeviceBufferMut};
#[cfg(feature = "nccl")]
pub use nccl_sys;
pub use op::{BackendKind, ReduceOp};
pub use persistent::{Persistent, PlanPath};
pub use request::{scope, wait_all, Pending, Request, Scope, SetMember};
