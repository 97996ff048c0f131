//! A silent and a dead peer on the NCCL backend (see `common::dead_peer`): the last rank sleeps
//! through an all-reduce, then leaves the job; the others return `Error::Timeout` within the
//! deadline plus a second (NCCL aborts their communicator) and `Error::Unusable` afterwards, and the
//! job ends. One rank per GPU:
//! `mpirun --mca orte_allowed_exit_without_sync 1 -n 2 target/release/deps/nccl_dead_peer-*`.
//! Without a CUDA driver or libnccl it reports that it was skipped and passes nothing.

#![allow(clippy::useless_vec)] // the shared suite's buffers are vectors

mod common;

use collectives::backend::nccl::cuda_driver_present;
use collectives::NcclComm;

fn main() {
    if !cuda_driver_present() || collectives::nccl_sys::library().is_err() {
        println!("nccl_dead_peer: needs a CUDA driver and libnccl; skipped");
        println!("mpi-tests: 0 passed, 0 failed (no GPU)");
        return;
    }
    common::dead_peer::run("nccl", |world, after| {
        Ok(NcclComm::from_mpi(world, None)?.with_timeout(after))
    })
}
