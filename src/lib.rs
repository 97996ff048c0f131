//! One safe collective layer over MPI and NCCL for HPC and scientific codes.
//!
//! This crate gathers the workspace's crates under one name:
//!
//! | crate | re-exported as | what it holds |
//! |---|---|---|
//! | `collectives-core` | the root of this crate | elements, reduce operations, errors, the [`Communicator`] trait, the backends |
//! | `collectives-halo` | [`halo`] | 3-D halo exchange of device fields over NCCL: process grids, plans, fused pack and unpack, and a CPU reference |
//! | `datatype-pack` | [`pack`] | non-contiguous data in a canonical stride IR, packed by a CPU reference (GPU kernels to come) |
//! | `nccl-sys` | [`nccl_sys`] | raw NCCL bindings, loaded at run time |
//! | rsmpi | [`mpi`] | MPI's environment, handles and C interface (`mpi::ffi`) |
//!
//! ```no_run
//! use collectives::{Communicator, MpiComm, ReduceOp};
//!
//! let universe = mpi::initialize().expect("MPI initializes once");
//! let comm = MpiComm::world(&universe)?;
//! let mut x = vec![1.0f64; 16];
//! comm.all_reduce_in_place(&mut x[..], ReduceOp::Sum)?;
//! assert_eq!(x[0], comm.size() as f64);
//! # Ok::<(), collectives::Error>(())
//! ```
#![deny(missing_docs)]

// The README's code blocks compile as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub use collectives_core::*;
pub use collectives_halo as halo;
pub use datatype_pack as pack;
pub use nccl_sys;
