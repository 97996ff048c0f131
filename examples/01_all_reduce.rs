//! All-reduce: every rank contributes `rank + 1` in each element, every rank gets the sum.
//! Run: `mpirun -n 4 target/debug/examples/01_all_reduce`.

use collectives::{Communicator, MpiComm, ReduceOp};

fn main() -> Result<(), collectives::Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let comm = MpiComm::world(&universe)?;
    let (rank, size) = (comm.rank(), comm.size());

    let send: Vec<f64> = (0..8).map(|i| (rank + 1) as f64 * (i + 1) as f64).collect();
    let mut recv = vec![0.0; send.len()];
    comm.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum)?;

    // 1 + 2 + ... + size, times (i + 1).
    let ranks_sum = (size * (size + 1) / 2) as f64;
    let expected: Vec<f64> = (0..8).map(|i| ranks_sum * (i + 1) as f64).collect();
    assert_eq!(recv, expected, "rank {rank}");

    // The same in place, with the mean instead of the sum.
    let mut mean = send.clone();
    comm.all_reduce_in_place(&mut mean[..], ReduceOp::Avg)?;
    let expected_mean: Vec<f64> = expected.iter().map(|x| x / size as f64).collect();
    assert_eq!(mean, expected_mean, "rank {rank}");

    if rank == 0 {
        println!("01_all_reduce: {size} ranks, sum {recv:?}, mean {mean:?}: correct");
    }
    Ok(())
}
