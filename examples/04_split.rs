//! Split: even and odd ranks form two communicators, each ordered by descending world rank, and reduce
//! within themselves.
//! Run: `mpirun -n 4 target/debug/examples/04_split`.

use collectives::{Communicator, MpiComm, ReduceOp};

fn main() -> Result<(), collectives::Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let world = MpiComm::world(&universe)?;
    let (rank, size) = (world.rank(), world.size());

    let color = (rank % 2) as u32;
    let half = world
        .split(Some(color), -(rank as i32))?
        .expect("every rank passed a color");
    let members: Vec<usize> = (0..size).filter(|r| r % 2 == rank % 2).collect();
    assert_eq!(half.size(), members.len());
    // Descending keys: the highest world rank is rank 0 of its half.
    assert_eq!(
        half.rank(),
        members.iter().rev().position(|&r| r == rank).unwrap()
    );

    let mut sum = [rank as u64];
    half.all_reduce_in_place(&mut sum[..], ReduceOp::Sum)?;
    assert_eq!(sum[0], members.iter().map(|&r| r as u64).sum::<u64>());

    let mut sums = vec![0u64; size];
    let mine = [sum[0]];
    world.all_gather(&mine[..], &mut sums[..])?;
    if rank == 0 {
        println!(
            "04_split: {size} ranks; sum over each rank's half, by world rank: {sums:?}: correct"
        );
    }
    Ok(())
}
