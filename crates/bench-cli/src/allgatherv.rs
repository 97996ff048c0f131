//! `collbench allgatherv`: uneven all-gather on NCCL, one rank holding `--skew` times as much as each
//! other rank, comparing the library's algorithms (grouped send/recv, one broadcast per rank, and the
//! automatic choice between them) with padding every block to the largest and calling all-gather, the
//! usual workaround. Reports time, algorithm bandwidth and the device memory each needs.

use std::io::Write;

use anyhow::Context;
use clap::Args;
use collectives_core::backend::nccl::UnevenAlgorithm;
use collectives_core::cudarc::driver::sys::CUevent_flags;
use collectives_core::{device, Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp};

use crate::sizes;

/// Flags of `collbench allgatherv`.
#[derive(Debug, Args)]
pub struct AllgathervArgs {
    /// Smallest total size (bytes over all ranks; suffixes K, M, G).
    #[arg(short = 'b', long = "minbytes", default_value = "1K", value_parser = sizes::parse_size)]
    pub min_bytes: usize,
    /// Largest total size.
    #[arg(short = 'e', long = "maxbytes", default_value = "256M", value_parser = sizes::parse_size)]
    pub max_bytes: usize,
    /// Factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 4)]
    pub factor: usize,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: usize,
    /// Rank 0 holds this many times as many elements as each other rank.
    #[arg(long, default_value_t = 16)]
    pub skew: usize,
}

/// Per-call time in microseconds of `f`, on `comm`'s stream with CUDA events, the maximum over ranks.
fn time(
    comm: &NcclComm,
    ctl: &MpiComm,
    iters: usize,
    warmup: usize,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    comm.synchronize()?;
    ctl.barrier()?;
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = comm.stream().record_event(flags)?;
    for _ in 0..iters {
        f()?;
    }
    let end = comm.stream().record_event(flags)?;
    comm.synchronize()?;
    let us = f64::from(start.elapsed_ms(&end)?) * 1000.0 / iters.max(1) as f64;
    let mut worst = [0.0f64];
    ctl.all_reduce(&[us][..], &mut worst[..], ReduceOp::Max)?;
    Ok(worst[0])
}

/// Run the comparison on every rank; rank 0 prints the table.
///
/// # Errors
/// Library errors (no GPU or NCCL, device memory), a wrong result.
pub fn run(universe: &mpi::environment::Universe, args: &AllgathervArgs) -> anyhow::Result<()> {
    let ctl = MpiComm::world(universe)?.with_checked(false);
    let mut comm = NcclComm::from_mpi(&ctl, None)
        .context("starting the nccl backend")?
        .with_checked(false);
    let (rank, size) = (comm.rank(), comm.size());
    let stream = comm.stream().clone();
    let weight = args.skew + size - 1;
    let mut out = std::io::stdout().lock();
    if rank == 0 {
        writeln!(out, "# collbench allgatherv: nranks {size}, backend nccl, rank 0 holds {}x each other rank; f32", args.skew)?;
        writeln!(out, "#  time: max over ranks of the per-call time (CUDA events on the stream, -n {} after -w {})", args.iters, args.warmup)?;
        writeln!(out, "#  p2p: grouped send/recv; bcast: one broadcast per rank; auto: the library's choice (p2p up to {} ranks, else broadcasts from {} B in all)", UnevenAlgorithm::P2P_UP_TO_RANKS, UnevenAlgorithm::BROADCASTS_FROM)?;
        writeln!(out, "#  pad: every block padded to the largest, then all_gather (needs nranks * largest block of receive memory)")?;
        writeln!(
            out,
            "#  memory: receive buffer bytes per rank; algbw = total size / time"
        )?;
        writeln!(
            out,
            "#{:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8} {:>12} {:>12} {:>6}",
            "total(B)",
            "p2p(us)",
            "bcast(us)",
            "auto(us)",
            "pad(us)",
            "auto GB/s",
            "auto/pad",
            "#wrong",
            "mem auto",
            "mem pad",
            "algo"
        )?;
    }
    for total_bytes in sizes::sequence(
        args.min_bytes,
        args.max_bytes,
        sizes::Step::Factor(args.factor),
    )
    .map_err(anyhow::Error::msg)?
    {
        let small = (total_bytes / 4 / weight).max(1);
        let counts: Vec<usize> = (0..size)
            .map(|r| if r == 0 { small * args.skew } else { small })
            .collect();
        let total: usize = counts.iter().sum();
        let largest = small * args.skew;
        let value = |r: usize, i: usize| (r * 1_000_003 + i) as f32 % 16_777_216.0;
        let send = device::upload(
            &stream,
            &(0..counts[rank])
                .map(|i| value(rank, i))
                .collect::<Vec<f32>>(),
        )?;
        let mut recv = device::alloc_zeros::<f32>(&stream, total)?;
        let mut padded_send_host = vec![0.0f32; largest];
        padded_send_host[..counts[rank]].copy_from_slice(&device::download(&stream, &send)?);
        let padded_send = device::upload(&stream, &padded_send_host)?;
        let mut padded_recv = device::alloc_zeros::<f32>(&stream, largest * size)?;

        let mut times = [0.0f64; 3];
        for (slot, algo) in [
            UnevenAlgorithm::GroupedP2p,
            UnevenAlgorithm::Broadcasts,
            UnevenAlgorithm::Auto,
        ]
        .into_iter()
        .enumerate()
        {
            comm = comm.with_uneven_algorithm(algo);
            times[slot] = time(&comm, &ctl, args.iters, args.warmup, || {
                Ok(comm.all_gather_v(&send, &mut recv, &counts)?)
            })?;
        }
        let expected: Vec<f32> = (0..size)
            .flat_map(|r| (0..counts[r]).map(move |i| value(r, i)))
            .collect();
        let got = device::download(&stream, &recv)?;
        let wrong_mine = got.iter().zip(&expected).filter(|(a, b)| a != b).count() as u64;
        let pad = time(&comm, &ctl, args.iters, args.warmup, || {
            Ok(comm.all_gather(&padded_send, &mut padded_recv)?)
        })?;
        let mut wrong = [0u64];
        ctl.all_reduce(&[wrong_mine][..], &mut wrong[..], ReduceOp::Sum)?;
        let bytes = total * 4;
        if rank == 0 {
            let auto = times[2];
            let algo = match UnevenAlgorithm::Auto.choose(size, bytes) {
                UnevenAlgorithm::Broadcasts => "bcast",
                _ => "p2p",
            };
            writeln!(out, " {:>12} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>9.2} {:>8} {:>12} {:>12} {:>6}",
                bytes, times[0], times[1], auto, pad, bytes as f64 / auto / 1e3, auto / pad, wrong[0], bytes, largest * size * 4, algo)?;
        }
    }
    comm.finalize()?;
    Ok(())
}
