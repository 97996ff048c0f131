//! The one-shot all-reduce between GPUs beside NCCL's all-reduce on the same communicator: checks
//! both answers, then times each, blocking (each call waited for) and back to back (`ITERS`
//! calls, one wait), 8 B to 256 KiB of `f32`. One rank per GPU:
//! `mpirun -n 4 target/release/examples/12_nccl_one_shot`. Where the path is not offered (ranks
//! sharing a GPU, no peer access) it says why and only NCCL runs.

use std::time::Instant;

use collectives::one_shot::{Offer, OneShot, DEFAULT_CAPACITY};
use collectives::{device, Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp};

const ITERS: usize = 2000;
const WARMUP: usize = 200;

/// Microseconds per call: blocking (mean and median of single calls), then back to back.
fn time(mut call: impl FnMut(), mut wait: impl FnMut()) -> (f64, f64, f64) {
    for _ in 0..WARMUP {
        call();
        wait();
    }
    let mut single = Vec::with_capacity(ITERS);
    for _ in 0..ITERS {
        let t = Instant::now();
        call();
        wait();
        single.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let mean = single.iter().sum::<f64>() / ITERS as f64;
    single.sort_by(f64::total_cmp);
    let t = Instant::now();
    for _ in 0..ITERS {
        call();
    }
    wait();
    let back = t.elapsed().as_secs_f64() * 1e6 / ITERS as f64;
    (mean, single[ITERS / 2], back)
}

fn main() -> Result<(), collectives::Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let world = MpiComm::world(&universe)?;
    // NCCL's own all-reduce on one side (the communicator's one-shot path off), the path itself,
    // called directly, on the other.
    let comm = NcclComm::from_mpi(&world, None)?.without_one_shot();
    let (rank, size) = (comm.rank(), comm.size());
    let stream = comm.stream().clone();
    let path = match OneShot::offer(&comm, DEFAULT_CAPACITY)? {
        Offer::Ready(p) => Some(p),
        Offer::NotOffered(why) => {
            if rank == 0 {
                println!("12_nccl_one_shot: one-shot not offered: {why}");
            }
            None
        }
    };
    if rank == 0 {
        println!(
            "# {size} ranks; f32 sum; {ITERS} calls after {WARMUP}; us per call (max over ranks)"
        );
        println!(
            "#     bytes  one-shot blocking (p50)   NCCL blocking (p50)  one-shot b2b  NCCL b2b"
        );
    }
    let mut bytes = 8;
    while bytes <= DEFAULT_CAPACITY {
        let n = bytes / 4;
        let send = device::upload(&stream, &vec![(rank + 1) as f32; n])?;
        let mut a = device::alloc_zeros::<f32>(&stream, n)?;
        let mut b = device::alloc_zeros::<f32>(&stream, n)?;
        let want = (size * (size + 1) / 2) as f32;
        comm.all_reduce(&send, &mut b, ReduceOp::Sum)?;
        comm.synchronize()?;
        assert!(
            device::download(&stream, &b)?.iter().all(|&x| x == want),
            "NCCL"
        );
        let mut row = [f64::NAN; 6];
        if let Some(p) = &path {
            p.all_reduce(&send, &mut a, ReduceOp::Sum)?;
            p.synchronize()?;
            let got = device::download(&stream, &a)?;
            assert!(
                got.iter().all(|&x| x == want),
                "rank {rank}: one-shot gave {:?}",
                &got[..1]
            );
            let (m, p50, b2b) = time(
                || {
                    p.all_reduce(&send, &mut a, ReduceOp::Sum)
                        .expect("one-shot")
                },
                || p.synchronize().expect("one-shot wait"),
            );
            row[0] = m;
            row[1] = p50;
            row[4] = b2b;
        }
        let (m, p50, b2b) = time(
            || comm.all_reduce(&send, &mut b, ReduceOp::Sum).expect("NCCL"),
            || comm.synchronize().expect("NCCL wait"),
        );
        row[2] = m;
        row[3] = p50;
        row[5] = b2b;
        world.all_reduce_in_place(&mut row[..], ReduceOp::Max)?;
        if rank == 0 {
            println!(
                "{bytes:>11} {:>10.2} ({:>6.2}) {:>14.2} ({:>6.2}) {:>13.2} {:>9.2}",
                row[0], row[1], row[2], row[3], row[4], row[5]
            );
        }
        bytes *= 8;
    }
    if rank == 0 {
        println!("12_nccl_one_shot: {size} ranks: answers correct");
    }
    Ok(())
}
