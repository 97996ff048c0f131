//! The public API as users call it, under criterion: host all-reduce and all-gather at 8 B and
//! 1 MiB, NCCL all-reduce and the GPU packer where a GPU is present.
//!
//! ```text
//! cargo bench --bench api                                   # one rank
//! mpirun -n 2 target/release/deps/api-<hash> --bench       # two ranks: rank 0 reports
//! cargo test --bench api                                    # test mode: each case runs once
//! ```
//!
//! Under `mpirun` every rank makes the same calls in the same order: rank 0 runs criterion and, for
//! each batch criterion asks for, tells the other ranks which case and how many calls
//! ([`Lockstep`]); they make them with it and wait for the next batch. Times are rank 0's wall clock
//! around the batch (device cases include the stream's drain after the batch). A case that needs a
//! GPU prints one line saying why it is skipped where there is none (the same verdict on every
//! rank), and the bench still passes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use collectives::cudarc::driver::{CudaSlice, CudaStream};
use collectives::pack::canonical::canonicalize;
use collectives::pack::construct::subarray;
use collectives::pack::gpu::{self, Packer};
use collectives::pack::{Order, StridedBlock};
use collectives::{device, Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp};
use criterion::{Criterion, Throughput};

/// Any error of a call: it ends the bench.
type Error = Box<dyn std::error::Error>;

/// One benchmarked call, made as a user makes it.
type Call<'a> = Box<dyn FnMut() -> Result<(), Error> + 'a>;

/// A named case: its group, its size in bytes and the call.
struct Case<'a> {
    group: &'static str,
    bytes: usize,
    call: Call<'a>,
}

/// What rank 0 sends before each batch: the case's index and the number of calls; [`STOP`] ends.
const STOP: u64 = u64::MAX;

/// Ranks in step: rank 0 leads (criterion), the others follow its batches.
struct Lockstep<'a> {
    ctl: &'a MpiComm,
}

impl Lockstep<'_> {
    /// Rank 0: tell every rank to run `calls` calls of case `case` (or [`STOP`]).
    fn announce(&self, case: u64, calls: u64) {
        let mut msg = [case, calls];
        self.ctl
            .broadcast(&mut msg[..], 0)
            .expect("announcing a batch");
    }

    /// The other ranks: run the batches rank 0 announces until it stops.
    fn follow(&self, cases: &mut [Case<'_>]) {
        loop {
            let mut msg = [0u64; 2];
            self.ctl
                .broadcast(&mut msg[..], 0)
                .expect("receiving a batch");
            let [case, calls] = msg;
            if case == STOP {
                return;
            }
            batch(self.ctl, &mut cases[case as usize].call, calls);
        }
    }
}

/// `calls` calls of `call` after a barrier, timed on this rank.
fn batch(ctl: &MpiComm, call: &mut Call<'_>, calls: u64) -> Duration {
    ctl.barrier().expect("barrier before a batch");
    let start = Instant::now();
    for _ in 0..calls {
        call().expect("the benchmarked call");
    }
    start.elapsed()
}

/// Host all-reduce (f64 sum) and all-gather (u8) of `bytes` per rank on `comm`.
fn host_cases(comm: &MpiComm, bytes: usize) -> Vec<Case<'_>> {
    let n = comm.size();
    let send = vec![1.0f64; bytes / 8];
    let mut recv = vec![0.0f64; bytes / 8];
    let block = vec![1u8; bytes];
    let mut gathered = vec![0u8; bytes * n];
    vec![
        Case {
            group: "host all_reduce f64 sum",
            bytes,
            call: Box::new(move || Ok(comm.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum)?)),
        },
        Case {
            group: "host all_gather u8",
            bytes,
            call: Box::new(move || Ok(comm.all_gather(&block[..], &mut gathered[..])?)),
        },
    ]
}

/// Why NCCL cannot run on this rank, without loading what is not there.
fn nccl_unavailable() -> Option<String> {
    if !collectives::backend::nccl::cuda_driver_present() {
        return Some("no CUDA driver".to_string());
    }
    if let Err(e) = collectives::nccl_sys::library() {
        return Some(format!("no libnccl: {e}"));
    }
    match collectives::cudarc::driver::CudaContext::device_count() {
        Ok(n) if n > 0 => None,
        Ok(_) => Some("no CUDA device".to_string()),
        Err(e) => Some(format!("the CUDA driver lists no device: {e}")),
    }
}

/// NCCL all-reduce (f32 sum) of `bytes` per rank, each call followed by the stream's drain.
fn nccl_case(comm: &NcclComm, bytes: usize) -> collectives::Result<Case<'_>> {
    let stream = comm.stream();
    let send = device::upload(stream, &vec![1.0f32; bytes / 4])?;
    let mut recv = device::alloc_zeros::<f32>(stream, bytes / 4)?;
    Ok(Case {
        group: "nccl all_reduce f32 sum",
        bytes,
        call: Box::new(move || {
            comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
            Ok(comm.synchronize()?)
        }),
    })
}

/// The GPU packer on one halo face (3 x 64 x 64 of a 70^3 grid of f64), synchronized per call.
fn pack_case() -> Result<Case<'static>, String> {
    const SIDE: u64 = 70;
    // The reasons in short: the loaders' own messages list every file they tried.
    gpu::driver_available().map_err(|_| "no CUDA driver".to_string())?;
    gpu::nvrtc_available().map_err(|_| "no NVRTC".to_string())?;
    let ctx = gpu::context(0).map_err(|e| format!("no CUDA device: {e}"))?;
    let face = subarray(&[SIDE; 3], &[3, 64, 64], &[3, 3, 3], Order::C, 8)
        .map_err(|e| format!("face: {e}"))?;
    let plan = StridedBlock::from_type(&canonicalize(face)).map_err(|e| format!("plan: {e}"))?;
    let packer = Packer::new(&ctx, &plan).map_err(|e| format!("packer: {e}"))?;
    let stream: Arc<CudaStream> = ctx.new_stream().map_err(|e| format!("stream: {e}"))?;
    let alloc = |n: u64| -> Result<CudaSlice<u8>, String> {
        stream
            .alloc_zeros::<u8>(n as usize)
            .map_err(|e| format!("allocation: {e}"))
    };
    let src = alloc(SIDE * SIDE * SIDE * 8)?;
    let mut dst = alloc(plan.packed_size())?;
    Ok(Case {
        group: "gpu pack halo face",
        bytes: packer.packed_size() as usize,
        call: Box::new(move || {
            packer.pack(&stream, &src, &mut dst)?;
            Ok(stream.synchronize()?)
        }),
    })
}

/// The same verdict on every rank: `None` where every rank can run, else the first reason seen.
fn agreed(ctl: &MpiComm, why: Option<String>) -> Option<String> {
    let mut ok = [u8::from(why.is_none())];
    ctl.all_reduce_in_place(&mut ok[..], ReduceOp::Min)
        .expect("agreeing on a GPU case");
    match (why, ok[0]) {
        (Some(why), _) => Some(why),
        (None, 1) => None,
        (None, _) => Some("not available on every rank".to_string()),
    }
}

fn main() {
    let universe = mpi::initialize().expect("MPI starts once");
    let comm = MpiComm::world(&universe).expect("a world communicator");
    let ctl = MpiComm::world(&universe)
        .expect("a control communicator")
        .with_checked(false);
    let rank = comm.rank();
    let say = |line: String| {
        if rank == 0 {
            println!("{line}");
        }
    };

    let nccl = match agreed(&ctl, nccl_unavailable()) {
        Some(why) => {
            say(format!("nccl_all_reduce: skipped: {why}"));
            None
        }
        None => Some(NcclComm::from_mpi(&comm, None).expect("an NCCL communicator")),
    };
    let mut cases: Vec<Case<'_>> = [8, 1 << 20]
        .into_iter()
        .flat_map(|bytes| host_cases(&comm, bytes))
        .collect();
    if let Some(nccl) = &nccl {
        for bytes in [8, 1 << 20] {
            cases.push(nccl_case(nccl, bytes).expect("NCCL buffers"));
        }
    }
    let pack = pack_case();
    match (agreed(&ctl, pack.as_ref().err().cloned()), pack) {
        (None, Ok(case)) => cases.push(case),
        (why, _) => say(format!(
            "gpu_pack_face: skipped: {}",
            why.unwrap_or_default()
        )),
    }

    let step = Lockstep { ctl: &ctl };
    if rank != 0 {
        step.follow(&mut cases);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    for (i, case) in cases.iter_mut().enumerate() {
        let mut g = c.benchmark_group(format!("{}, n={}", case.group, comm.size()));
        g.throughput(Throughput::Bytes(case.bytes as u64));
        g.bench_function(format!("{} B", case.bytes), |b| {
            b.iter_custom(|calls| {
                step.announce(i as u64, calls);
                batch(&ctl, &mut case.call, calls)
            })
        });
        g.finish();
    }
    step.announce(STOP, 0);
    c.final_summary();
}
