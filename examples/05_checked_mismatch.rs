//! Checked mode turns a call whose arguments do not fit together across ranks into an error on every
//! rank. Here rank 1 passes a longer buffer than the others to an all-reduce; without checked mode MPI
//! would hang, fail on some ranks only, or return a wrong answer.
//! Run: `COLLECTIVES_CHECK=1 mpirun -n 2 target/debug/examples/05_checked_mismatch`.
//!
//! Exits 0 when every rank got `Err(Mismatch)`; exits 1 without calling the mismatched all-reduce when
//! checked mode is off (it would not be safe to make the call), and 1 if the call did not fail.

use collectives::{Communicator, Error, MpiComm, ReduceOp};

fn main() -> Result<(), Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let comm = MpiComm::world(&universe)?;
    let (rank, size) = (comm.rank(), comm.size());
    if !comm.checked() {
        if rank == 0 {
            eprintln!("05_checked_mismatch: checked mode is off; run with COLLECTIVES_CHECK=1");
        }
        std::process::exit(1);
    }
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
