//! NCCL all-reduce on device memory: every rank contributes `rank + 1`, every rank gets the sum.
//! One rank per GPU: `mpirun -n 2 target/release/examples/06_nccl_all_reduce`.

use collectives::{device, Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp};

fn main() -> Result<(), collectives::Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let world = MpiComm::world(&universe)?;
    let comm = NcclComm::from_mpi(&world, None)?;
    let (rank, size) = (comm.rank(), comm.size());
    let stream = comm.stream().clone();

    let n = 1 << 20;
    let send = device::upload(&stream, &vec![(rank + 1) as f32; n])?;
    let mut recv = device::alloc_zeros::<f32>(&stream, n)?;
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
    // Stream-ordered: the download below waits for the reduction; synchronize reports NCCL errors.
    comm.synchronize()?;
    let got = device::download(&stream, &recv)?;
    let expected = (size * (size + 1) / 2) as f32;
    assert!(
        got.iter().all(|&x| x == expected),
        "rank {rank}: {:?}",
        &got[..4]
    );

    let mut mean = device::upload(&stream, &[(rank + 1) as f64; 8])?;
    comm.all_reduce_in_place(&mut mean, ReduceOp::Avg)?;
    let got = device::download(&stream, &mean)?;
    assert_eq!(got, vec![(size + 1) as f64 / 2.0; 8], "rank {rank}");

    if rank == 0 {
        println!(
            "06_nccl_all_reduce: {size} ranks, NCCL {}, device {}: sum {expected} and mean {} correct",
            comm.library().version(),
            comm.context().name().unwrap_or_default(),
            got[0]
        );
    }
    Ok(())
}
