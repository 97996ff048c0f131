//! The one-shot all-reduce between GPUs beside NCCL's all-reduce on the same communicator: checks
//! both answers, then times each, blocking (each call waited for) and back to back (`ITERS`
//! calls, one wait), 8 B to 1 MiB of `f32` in steps of 2 (the one-shot path up to its capacity,
//! `-` above it); then where a blocking 8-byte call's time goes: the host's enqueue, the GPU's
//! time between CUDA events around the call, and, beside them, an empty kernel launched and
//! waited for the same way (what any GPU operation waited for costs here). One rank per GPU:
//! `mpirun -n 4 target/release/examples/12_nccl_one_shot`. Where the path is not offered (ranks
//! sharing a GPU, no peer access) it says why and only NCCL runs.

use std::time::Instant;

use collectives::cudarc::driver::sys::CUevent_flags;
use collectives::cudarc::driver::{CudaEvent, CudaStream, LaunchConfig};
use collectives::one_shot::{Offer, OneShot, DEFAULT_CAPACITY};
use collectives::{device, Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp};

const ITERS: usize = 2000;
/// The largest message timed (NCCL's all-reduce only above the path's capacity).
const LARGEST: usize = 1 << 20;
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Where a blocking call's time goes, medians over `ITERS` calls in µs: the host's enqueue (the
/// call returning), the GPU's time from an event recorded before the call to one recorded after
/// it, and the whole blocking call (enqueue and wait).
fn breakdown(
    stream: &CudaStream,
    mut call: impl FnMut(),
    mut wait: impl FnMut(),
) -> Result<[f64; 3], collectives::Error> {
    let ctx = stream.context();
    let timed = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
    let cuda = |e| collectives::Error::cuda("breakdown", e);
    let (a, b) = (timed().map_err(cuda)?, timed().map_err(cuda)?);
    let (mut enqueue, mut gpu, mut total) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..WARMUP + ITERS {
        a.record(stream).map_err(cuda)?;
        let t = Instant::now();
        call();
        let e = t.elapsed();
        b.record(stream).map_err(cuda)?;
        wait();
        let w = t.elapsed();
        if i >= WARMUP {
            enqueue.push(e.as_secs_f64() * 1e6);
            total.push(w.as_secs_f64() * 1e6);
            gpu.push(f64::from(a.elapsed_ms(&b).map_err(cuda)?) * 1e3);
        }
    }
    Ok([median(enqueue), median(gpu), median(total)])
}

/// An empty kernel on `stream`, and an event to wait for it the way the library waits (record,
/// then poll until complete).
fn empty_kernel(stream: &CudaStream) -> Result<impl FnMut() + '_, collectives::Error> {
    let cuda = |e| collectives::Error::cuda("empty kernel", e);
    let ptx = collectives::cudarc::nvrtc::compile_ptx(r#"extern "C" __global__ void empty() {}"#)
        .map_err(|e| collectives::Error::Cuda {
        op: "empty kernel",
        message: format!("NVRTC: {e}"),
    })?;
    let f = stream
        .context()
        .load_module(ptx)
        .and_then(|m| m.load_function("empty"))
        .map_err(cuda)?;
    Ok(move || {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the kernel takes no arguments and touches no memory.
        unsafe { stream.launch_builder(&f).launch(cfg) }.expect("empty kernel launches");
    })
}

/// Record `event` on `stream` and poll it until complete (the library's wait without its
/// deadline).
fn wait_event(stream: &CudaStream, event: &CudaEvent) {
    event.record(stream).expect("event records");
    while !event.is_complete() {
        std::hint::spin_loop();
    }
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
    while bytes <= LARGEST {
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
        if let Some(p) = path.as_ref().filter(|p| bytes <= p.capacity()) {
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
            let c = |v: f64| {
                if v.is_nan() {
                    "-".to_owned()
                } else {
                    format!("{v:.2}")
                }
            };
            println!(
                "{bytes:>11} {:>10} ({:>6}) {:>14} ({:>6}) {:>13} {:>9}",
                c(row[0]),
                c(row[1]),
                c(row[2]),
                c(row[3]),
                c(row[4]),
                c(row[5])
            );
        }
        bytes *= 2;
    }
    // Where a blocking 8-byte call's time goes.
    let send = device::upload(&stream, &[(rank + 1) as f32; 2])?;
    let mut a = device::alloc_zeros::<f32>(&stream, 2)?;
    let mut b = device::alloc_zeros::<f32>(&stream, 2)?;
    let event = stream
        .context()
        .new_event(None)
        .map_err(|e| collectives::Error::cuda("event", e))?;
    let mut empty = empty_kernel(&stream)?;
    let mut rows: Vec<(&str, [f64; 3])> = vec![(
        "empty kernel",
        breakdown(&stream, &mut empty, || wait_event(&stream, &event))?,
    )];
    if let Some(p) = &path {
        let one_shot = breakdown(
            &stream,
            || {
                p.all_reduce(&send, &mut a, ReduceOp::Sum)
                    .expect("one-shot")
            },
            || p.synchronize().expect("one-shot wait"),
        )?;
        rows.push(("one-shot", one_shot));
    }
    let nccl = breakdown(
        &stream,
        || comm.all_reduce(&send, &mut b, ReduceOp::Sum).expect("NCCL"),
        || comm.synchronize().expect("NCCL wait"),
    )?;
    rows.push(("NCCL", nccl));
    if rank == 0 {
        println!(
            "# where a blocking 8 B call's time goes: medians of {ITERS} calls, us, max over ranks"
        );
        println!(
            "# {:<14} {:>12} {:>12} {:>12} {:>14}",
            "call", "host enqueue", "GPU (events)", "blocking", "rest (launch, wait)"
        );
    }
    for (name, [enqueue, gpu, blocking]) in rows {
        let mut r = [enqueue, gpu, blocking, blocking - enqueue - gpu];
        world.all_reduce_in_place(&mut r[..], ReduceOp::Max)?;
        if rank == 0 {
            println!(
                "  {name:<14} {:>12.2} {:>12.2} {:>12.2} {:>14.2}",
                r[0], r[1], r[2], r[3]
            );
        }
    }
    if rank == 0 {
        println!("12_nccl_one_shot: {size} ranks: answers correct");
    }
    Ok(())
}
