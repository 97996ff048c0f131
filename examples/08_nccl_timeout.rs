//! A silent peer does not hang the others: rank 1 skips an all-reduce that rank 0 makes; rank 0's wait
//! ends with `Err(Timeout)` after the deadline, the communicator is aborted, and both ranks exit.
//! One rank per GPU, 2 or more ranks: `mpirun -n 2 target/release/examples/08_nccl_timeout`.
//! Exits 0 when rank 0 saw the timeout.

use std::time::Duration;

use collectives::{device, Communicator, DeviceCommunicator, Error, MpiComm, NcclComm, ReduceOp};

fn main() -> Result<(), Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let world = MpiComm::world(&universe)?;
    let comm = NcclComm::from_mpi(&world, None)?
        .with_timeout(Duration::from_secs(5))
        .with_checked(false);
    let (rank, size) = (comm.rank(), comm.size());
    if size < 2 {
        println!("08_nccl_timeout: needs 2 or more ranks");
        return Ok(());
    }
    let stream = comm.stream().clone();
    let mut x = device::upload(&stream, &[1.0f32; 1024])?;

    let mut saw_timeout = true;
    if rank != 1 {
        comm.all_reduce_in_place(&mut x, ReduceOp::Sum)?;
        println!(
            "08_nccl_timeout: rank {rank} enqueued the all-reduce; waiting with a 5 s deadline"
        );
        let started = std::time::Instant::now();
        match comm.synchronize() {
            Err(e @ Error::Timeout { .. }) => {
                println!(
                    "08_nccl_timeout: rank {rank} got {e} after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                // The communicator is aborted: later calls are errors, never calls on a freed handle.
                let again = comm.all_reduce_in_place(&mut x, ReduceOp::Sum);
                if !(comm.is_aborted() && again.is_err()) {
                    eprintln!(
                        "08_nccl_timeout: rank {rank}: a call after the abort gave {again:?}"
                    );
                    saw_timeout = false;
                }
            }
            other => {
                eprintln!("08_nccl_timeout: rank {rank} expected Err(Timeout), got {other:?}");
                saw_timeout = false;
            }
        }
    } else {
        println!("08_nccl_timeout: rank 1 skips the all-reduce");
    }
    // The ranks meet again on the host; rank 1 leaves the communicator its peers aborted.
    world.barrier()?;
    comm.abort();
    if !saw_timeout {
        std::process::exit(1);
    }
    Ok(())
}
