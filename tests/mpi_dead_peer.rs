//! A silent and a dead peer on the MPI host backend (see `common::dead_peer`): the last rank sleeps
//! through an all-reduce, then leaves the job; the others return `Error::Timeout` within the
//! deadline plus a second and `Error::Unusable` afterwards, and the job ends.
//! Run: `mpirun --mca orte_allowed_exit_without_sync 1 -n N target/debug/deps/mpi_dead_peer-*`
//! (or `cargo xtask test`, which sets it).

#![allow(clippy::useless_vec)] // the shared suite's buffers are vectors

mod common;

use collectives::{Communicator, MpiComm};

fn main() {
    common::dead_peer::run("mpi", |world: &MpiComm, after| {
        Ok(world.dup()?.with_timeout(Some(after)))
    })
}
