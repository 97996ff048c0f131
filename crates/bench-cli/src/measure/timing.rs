//! Timing of a loop on each rank, its spread over ranks, and bandwidths.
//!
//! Each rank times `iters` back-to-back calls after a barrier and divides by `iters` (wall clock for host
//! backends, [`per_call`]; CUDA events on the stream for device backends, [`seconds_per_call`]); the
//! reported time is the average of that per-call time over ranks, with the fastest and slowest rank kept
//! as min and max (the reductions go through the library's own `all_reduce` on a separate, unchecked
//! communicator).

use std::time::Instant;

use collectives_core::cudarc::driver::sys::CUevent_flags;
use collectives_core::{Communicator, DeviceCommunicator, MpiComm, ReduceOp};

/// Seconds per call of `f`, over `iters` calls (at least one) run back to back.
///
/// # Errors
/// The first error of `f`; the loop stops there.
pub fn per_call<E>(iters: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    let iters = iters.max(1);
    let start = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

/// Seconds per call from the milliseconds between two CUDA events around `iters` calls (at least one).
pub fn seconds_per_call(elapsed_ms: f32, iters: usize) -> f64 {
    f64::from(elapsed_ms) * 1e-3 / iters.max(1) as f64
}

/// Per-call time in microseconds of `f` on `comm`'s stream, the slowest rank's: `warmup` calls, the
/// stream drained and a barrier, then `iters` calls back to back between two CUDA events (the
/// loop of `collbench halo` and `collbench allgatherv`; the engine times each call on its own).
///
/// # Errors
/// The first error of `f`; CUDA and library errors of the events, the drain and the reduction.
pub fn events_us<C: DeviceCommunicator>(
    comm: &C,
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
    Ok(max_over_ranks(ctl, us)?)
}

/// The largest of every rank's `v`.
///
/// # Errors
/// Library errors of the reduction.
pub fn max_over_ranks(ctl: &MpiComm, v: f64) -> collectives_core::Result<f64> {
    let mut out = [0.0f64];
    ctl.all_reduce(&[v][..], &mut out[..], ReduceOp::Max)?;
    Ok(out[0])
}

/// A time over ranks, in seconds: the average, the fastest and the slowest rank.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    /// Average over ranks.
    pub avg: f64,
    /// Fastest rank.
    pub min: f64,
    /// Slowest rank.
    pub max: f64,
}

impl Spread {
    /// The same time on every rank (a single rank's measurement).
    pub fn uniform(t: f64) -> Self {
        Spread {
            avg: t,
            min: t,
            max: t,
        }
    }
}

/// The spread over all ranks of each of this rank's times `local` (every rank passes as many).
///
/// # Errors
/// Library errors of the reductions.
pub fn over_ranks(ctl: &MpiComm, local: &[f64]) -> collectives_core::Result<Vec<Spread>> {
    let mut sum = local.to_vec();
    ctl.all_reduce_in_place(&mut sum[..], ReduceOp::Sum)?;
    // One reduction gives both extremes: max(t) and max(-t) = -min(t).
    let mut ext: Vec<f64> = local
        .iter()
        .copied()
        .chain(local.iter().map(|t| -t))
        .collect();
    ctl.all_reduce_in_place(&mut ext[..], ReduceOp::Max)?;
    let n = ctl.size() as f64;
    let k = local.len();
    Ok((0..k)
        .map(|i| Spread {
            avg: sum[i] / n,
            min: -ext[k + i],
            max: ext[i],
        })
        .collect())
}

/// Algorithm bandwidth in GB/s (10^9 bytes per second): `bytes / seconds`, as nccl-tests computes it.
pub fn algbw(bytes: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e9
    } else {
        0.0
    }
}

/// The all-reduce bus-bandwidth factor `2(n-1)/n` (nccl-tests' PERFORMANCE.md): a ring all-reduce sends
/// and receives `2(n-1)/n` times the buffer through each rank's link, so `busbw = algbw * factor` is
/// comparable with the link's bandwidth and across rank counts. It is 0 on one rank (no traffic).
pub fn allreduce_busbw_factor(nranks: usize) -> f64 {
    if nranks == 0 {
        return 0.0;
    }
    2.0 * (nranks as f64 - 1.0) / nranks as f64
}

/// `(n-1)/n`, 0 for no rank.
pub fn n_minus_one_over_n(nranks: usize) -> f64 {
    if nranks == 0 {
        0.0
    } else {
        (nranks as f64 - 1.0) / nranks as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busbw_factor_is_two_n_minus_one_over_n() {
        assert_eq!(allreduce_busbw_factor(1), 0.0);
        assert_eq!(allreduce_busbw_factor(2), 1.0);
        assert_eq!(allreduce_busbw_factor(4), 1.5);
        assert_eq!(allreduce_busbw_factor(8), 1.75);
        assert_eq!(allreduce_busbw_factor(0), 0.0);
        assert!((allreduce_busbw_factor(1000) - 1.998).abs() < 1e-12);
    }

    #[test]
    fn algbw_is_bytes_per_nanosecond() {
        assert_eq!(algbw(1_000_000_000, 1.0), 1.0);
        assert_eq!(algbw(64 << 20, 0.01), (64u64 << 20) as f64 / 1e7);
        assert_eq!(algbw(8, 0.0), 0.0);
    }

    #[test]
    fn event_milliseconds_become_seconds_per_call() {
        assert_eq!(seconds_per_call(20.0, 20), 1e-3);
        assert_eq!(seconds_per_call(0.5, 0), 5e-4);
        assert!((seconds_per_call(1.5, 1000) - 1.5e-6).abs() < 1e-18);
    }

    #[test]
    fn per_call_divides_and_stops_on_error() {
        let mut calls = 0;
        let t = per_call::<()>(10, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 10);
        assert!(t >= 0.0);
        let mut calls = 0;
        let r = per_call(10, || {
            calls += 1;
            if calls == 3 {
                Err("boom")
            } else {
                Ok(())
            }
        });
        assert_eq!(r, Err("boom"));
        assert_eq!(calls, 3);
    }
}
