//! Checked mode turns a call whose arguments do not fit together across ranks into an error on every
//! rank. Here rank 1 passes a longer buffer than the others to an all-reduce; without checked mode MPI
//! would hang, fail on some ranks only, or return a wrong answer. The communicator is wrapped in
//! `Checked`, so it agrees on every call in any build, whatever `COLLECTIVES_CHECK` says.
//! Run: `mpirun -n 2 target/debug/examples/05_checked_mismatch`.
//!
//! Exits 0 when every rank got `Err(Mismatch)`, and 1 if the call did not fail.

use collectives::{Checked, Communicator, Error, MpiComm, ReduceOp};

fn main() -> Result<(), Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let comm = Checked::new(MpiComm::world(&universe)?);
    let (rank, size) = (comm.rank(), comm.size());
    assert!(comm.checked(), "a Checked communicator always agrees");
    if size < 2 {
        println!(
            "05_checked_mismatch: one rank cannot disagree with itself; run on 2 or more ranks"
        );
        return Ok(());
    }

    let n = if rank == 1 { 5 } else { 4 };
    let send = vec![1.0f32; n];
    let mut recv = vec![0.0f32; n];
    match comm.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum) {
        Err(e @ Error::Mismatch { .. }) => {
            println!("05_checked_mismatch: rank {rank} got the expected error: {e}");
        }
        other => {
            eprintln!("05_checked_mismatch: rank {rank} expected Err(Mismatch), got {other:?}");
            std::process::exit(1);
        }
    }
    // The ranks are still in step: a correct call afterwards works.
    let mut ok = [1u32];
    comm.all_reduce_in_place(&mut ok[..], ReduceOp::Sum)?;
    assert_eq!(ok[0] as usize, size);
    Ok(())
}
