//! Uneven all-gather: rank r contributes r elements (so rank 0 contributes nothing); every rank gets all
//! of them back to back, with no padding.
//! Run: `mpirun -n 4 target/debug/examples/02_all_gather_v`.

use collectives::{Communicator, MpiComm};

fn main() -> Result<(), collectives::Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let comm = MpiComm::world(&universe)?;
    let (rank, size) = (comm.rank(), comm.size());

    let counts: Vec<usize> = (0..size).collect();
    let mine: Vec<i32> = (0..rank).map(|i| (100 * rank + i) as i32).collect();
    let mut all = vec![-1i32; counts.iter().sum()];
    comm.all_gather_v(&mine[..], &mut all[..], &counts)?;

    let expected: Vec<i32> = (0..size)
        .flat_map(|r| (0..r).map(move |i| (100 * r + i) as i32))
        .collect();
    assert_eq!(all, expected, "rank {rank}");
    if rank == 0 {
        println!("02_all_gather_v: {size} ranks, counts {counts:?}, gathered {all:?}: correct");
    }
    Ok(())
}
