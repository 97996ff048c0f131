//! MPI on host memory, over rsmpi's environment and handles.
//!
//! Calls go to the MPI library through `mpi::ffi` directly, so that every return code becomes a
//! [`Result`](crate::Result) (rsmpi's own collectives ignore return codes) and so that `MPI_IN_PLACE` and
//! the v-collectives' displacements are ours to control. Communicators made here are duplicates with the
//! `MPI_ERRORS_RETURN` error handler: MPI errors come back as [`Error::Mpi`](crate::Error::Mpi) instead of
//! aborting the job, and the caller's communicator is never modified.
//!
//! Counts: MPI's C interface counts in `int`. Open MPI 4.x has no large-count (`MPI_*_c`) calls, so a
//! count or displacement beyond `i32::MAX` elements is [`Error::CountOverflow`](crate::Error::CountOverflow)
//! before any call; split such transfers.
//!
//! Deadlines: opt-in (`COLLECTIVES_TIMEOUT`, [`MpiComm::with_timeout`]); under one, every operation of
//! this backend and of the two device backends built on it goes through one path
//! (`MpiComm::run`/`MpiComm::start`, then `MPI_Test` polled by [`crate::deadline::poll`]) and works on
//! copies it owns; see [`MpiComm`] for what holds then.
//!
//! Progress: opt-in ([`MpiComm::with_progress`], `COLLECTIVES_PROGRESS=1`); a thread that probes
//! MPI while non-blocking operations are in flight, so they advance while the rank computes. It
//! needs `MPI_THREAD_MULTIPLE` and a core while operations fly: see [`progress`].
//!
//! Elements: complex numbers use MPI's complex types (so `Prod` multiplies correctly); `f16`/`bf16` move
//! as 16-bit words and cannot be reduced; `Avg` of floats is a sum followed by a division on each
//! receiving rank.

pub(crate) mod collectives;
mod comm;
mod exchange;
mod persistent;
pub mod progress;
pub(crate) mod raw;
pub(crate) mod request;
mod transport;

pub use comm::MpiComm;
pub use progress::{ProgressOptions, ProgressStats};
pub use raw::{count_limit, in_place};
