//! Uneven all-gather on NCCL with skewed sizes: rank 0 holds 16 times as much as each other rank, one
//! rank (the last, when there are 3 or more) holds nothing; blocks land back to back, with no padding
//! and no device memory beyond the two buffers.
//! One rank per GPU: `mpirun -n 2 target/release/examples/07_nccl_all_gather_v`.

use collectives::{device, Communicator, DeviceCommunicator, MpiComm, NcclComm};

fn main() -> Result<(), collectives::Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let world = MpiComm::world(&universe)?;
    let comm = NcclComm::from_mpi(&world, None)?;
    let (rank, size) = (comm.rank(), comm.size());
    let stream = comm.stream().clone();

    let base = 1000;
    let counts: Vec<usize> = (0..size)
        .map(|r| match r {
            0 => 16 * base,
            r if r == size - 1 && size >= 3 => 0,
            _ => base,
        })
        .collect();
    let value = |r: usize, i: usize| (r * 1_000_000 + i) as f64;
    let mine: Vec<f64> = (0..counts[rank]).map(|i| value(rank, i)).collect();
    let send = device::upload(&stream, &mine)?;
    let mut all = device::alloc_zeros::<f64>(&stream, counts.iter().sum())?;
    comm.all_gather_v(&send, &mut all, &counts)?;
    comm.synchronize()?;

    let got = device::download(&stream, &all)?;
    let expected: Vec<f64> = (0..size)
        .flat_map(|r| (0..counts[r]).map(move |i| value(r, i)))
        .collect();
    assert_eq!(got, expected, "rank {rank}");
    if rank == 0 {
        println!("07_nccl_all_gather_v: {size} ranks, counts {counts:?}: correct");
    }
    Ok(())
}
