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
    // `Avg` is the mean to within the rounding of a sum of `size` terms, as `Sum` is the sum: NCCL
    // averages natively (each value scaled by 1/size, then summed, in an order of its choosing),
    // the MPI backends sum and then divide. On 3 ranks 1, 2, 3 can give 1.9999999999999998.
    let want = (size + 1) as f64 / 2.0;
    let ulps = size as f64 * f64::EPSILON * want;
    assert!(
        got.iter().all(|&x| (x - want).abs() <= ulps),
        "rank {rank}: {got:?}, want {want} within {ulps:e}"
    );

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
