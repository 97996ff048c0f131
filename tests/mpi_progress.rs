//! The MPI progress engine of `MpiComm` (`with_progress`) and `collbench overlap`, on the ranks it
//! is launched with, MPI initialized at `MPI_THREAD_MULTIPLE`. The engine's tests assert states,
//! not timings: a non-blocking all-reduce started with the engine on is complete at the first
//! `test` after a stretch of pure computation that made no MPI call; an idle engine makes no MPI
//! call. Run: `mpirun -n N target/debug/deps/mpi_progress-*` (or `cargo xtask test`).

#![allow(clippy::useless_vec)] // the shared suite's buffers are vectors

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use collectives::{scope, Communicator, Error, MpiComm, ReduceOp};
use common::{case, Case, T};

/// Whether MPI runs at `MPI_THREAD_MULTIPLE` here.
fn multiple() -> bool {
    mpi::environment::threading_support() == mpi::Threading::Multiple
}

/// A communicator like `t.comm`, with the engine on (where MPI allows it).
fn with_progress(t: &T) -> Option<MpiComm> {
    let dup = t.ok(t.comm.dup(), "dup")?;
    t.ok(dup.with_progress(true), "with_progress")
}

/// Arithmetic without any MPI call, until `until` says stop (checked every few thousand steps).
fn compute(mut until: impl FnMut() -> bool) -> f64 {
    let mut x = 1.0f64;
    loop {
        for _ in 0..4096 {
            x = black_box(x * 1.000_000_1 + 1e-9);
        }
        if until() {
            return x;
        }
    }
}

fn thread_level(t: &T) {
    let Some(dup) = t.ok(t.comm.dup(), "dup") else {
        return;
    };
    let r = dup.with_progress(true);
    if multiple() {
        if let Some(c) = t.ok(r, "with_progress at MPI_THREAD_MULTIPLE") {
            t.check(c.progress_stats().is_some(), || "engine on".into());
            let off = t.ok(c.with_progress(false), "with_progress(false)");
            t.check(off.is_some_and(|c| c.progress_stats().is_none()), || {
                "engine off again".into()
            });
        }
    } else {
        t.err(r, "with_progress below MPI_THREAD_MULTIPLE", |e| {
            matches!(
                e,
                Error::ThreadLevel {
                    op: "progress",
                    required: "MPI_THREAD_MULTIPLE",
                    ..
                }
            )
        });
    }
}

/// No operation in flight: the thread is parked and makes no MPI call, before and after one.
fn idle_engine_is_quiet(t: &T) {
    if !multiple() {
        return;
    }
    let Some(comm) = with_progress(t) else { return };
    let polls = || comm.progress_stats().map_or(0, |s| s.polls);
    std::thread::sleep(Duration::from_millis(30));
    t.eq(&polls(), &0, "probes before any operation");
    let send = vec![1.0f64; 1 << 16];
    let mut recv = vec![0.0f64; 1 << 16];
    let r = scope(|s| -> collectives::Result<()> {
        let req = comm.i_all_reduce(s, &send[..], &mut recv[..], ReduceOp::Sum)?;
        t.eq(
            &comm.progress_stats().map(|s| s.in_flight),
            &Some(1),
            "in flight after the start",
        );
        req.wait()
    });
    t.ok(r.and_then(|r| r), "i_all_reduce");
    t.eq(&recv[7], &(t.size() as f64), "sum");
    t.eq(
        &comm.progress_stats().map(|s| s.in_flight),
        &Some(0),
        "in flight after the wait",
    );
    std::thread::sleep(Duration::from_millis(20));
    let settled = polls();
    std::thread::sleep(Duration::from_millis(100));
    t.eq(&polls(), &settled, "probes while idle");
    // Communicators made from it share the engine.
    if let Some(d) = t.ok(comm.dup(), "dup of a communicator with progress") {
        t.check(d.progress_stats().is_some(), || {
            "dup shares the engine".into()
        });
    }
}

/// With the engine on, a non-blocking all-reduce completes while the rank computes without calling
/// MPI: the first `test` after the computation finds it complete (asserted where there are at least
/// two cores per rank; the sums are checked everywhere). The computation lasts until the
/// engine has probed a thousand times and at least 100 ms have passed (20 s at most), far
/// longer than the all-reduce takes when progressed.
fn completes_during_compute(t: &T) {
    if !multiple() {
        return;
    }
    let Some(comm) = with_progress(t) else { return };
    for n in [1usize << 13, 1 << 19] {
        let send: Vec<f64> = (0..n).map(|i| (i % 7) as f64 + t.rank() as f64).collect();
        let mut recv = vec![0.0f64; n];
        let polls = || comm.progress_stats().map_or(0, |s| s.polls);
        t.ok(comm.barrier(), "barrier");
        let r = scope(|s| -> collectives::Result<(bool, u64)> {
            let mut req = comm.i_all_reduce(s, &send[..], &mut recv[..], ReduceOp::Sum)?;
            let (start, first) = (Instant::now(), polls());
            compute(|| {
                let waited = start.elapsed();
                waited > Duration::from_secs(20)
                    || (waited > Duration::from_millis(100) && polls() - first >= 1000)
            });
            let probes = polls() - first;
            let done = req.test()?;
            req.wait()?;
            Ok((done, probes))
        });
        let Some((done, probes)) = t.ok(r.and_then(|r| r), "i_all_reduce") else {
            continue;
        };
        // Asserted where every rank and its progress thread can have a core: with fewer, a rank
        // can finish its computation before another rank's thread was scheduled often enough, and
        // the verdict depends on the scheduler (seen on 4 ranks of 2 cores).
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        if cores >= 2 * t.size() {
            t.check(done, || {
                format!(
                    "{} B: not complete at the first test after the computation ({probes} probes)",
                    n * 8
                )
            });
        } else if t.rank() == 0 {
            println!(
                "  {} B: not asserted: {cores} cores for {} ranks with a progress thread each",
                n * 8,
                t.size()
            );
        }
        // The same without the engine, for the record (not asserted: a small all-reduce may
        // complete within the one MPI call of the test).
        t.ok(t.comm.barrier(), "barrier");
        let without = scope(|s| -> collectives::Result<bool> {
            let mut req = t
                .comm
                .i_all_reduce(s, &send[..], &mut recv[..], ReduceOp::Sum)?;
            let start = Instant::now();
            compute(|| start.elapsed() > Duration::from_millis(100));
            let done = req.test()?;
            req.wait()?;
            Ok(done)
        });
        if let Some(without) = t.ok(without.and_then(|r| r), "i_all_reduce without the engine") {
            if t.rank() == 0 {
                println!(
                    "  {} B: complete at the first test after computing: with the engine {done} \
                     ({probes} probes), without {without}",
                    n * 8
                );
            }
        }
        let nr = t.size() as f64;
        let want = |i: usize| nr * (i % 7) as f64 + nr * (nr - 1.0) / 2.0;
        t.check((0..n).all(|i| recv[i] == want(i)), || {
            format!("{} B: wrong sum", n * 8)
        });
    }
}

/// `collbench overlap` at small sizes: every non-blocking collective, progress engine off and on
/// (where MPI allows it), tests during the computation and the efficiency variant: a row per
/// size, finite times, an overlap percentage that is a number >= 0.
fn collbench_overlap(t: &T) {
    use bench_cli::cmd::coll::CollName;
    use bench_cli::cmd::overlap::{compute::Compute, run_on, Efficiency, Output, Settings};
    use bench_cli::measure::dtype::DataType;
    use bench_cli::measure::engine::Host;
    use bench_cli::output::record::Format;

    let Some(ctl) = t.ok(t.comm.dup(), "dup") else {
        return;
    };
    let settings = Settings {
        iters: 2,
        warmup_iters: 1,
        tests: 2,
        root: t.size() - 1,
        efficiency: Some(Efficiency {
            hidden: 90.0,
            max_factor: 2,
        }),
    };
    let sizes = [64, 4096];
    let progress: &[bool] = if multiple() { &[false, true] } else { &[false] };
    for &on in progress {
        let Some(dup) = t.ok(t.comm.dup(), "dup") else {
            return;
        };
        let Some(comm) = t.ok(dup.with_progress(on), "with_progress") else {
            return;
        };
        let b = Host {
            comm: &comm,
            ctl: &ctl,
            variant: bench_cli::measure::variant::Variant::Library,
        };
        let mut out = Output::new(false, Format::Table);
        let r = run_on(
            &b,
            CollName::ALL,
            settings,
            DataType::Float,
            ReduceOp::Sum,
            &sizes,
            &Compute::Cpu,
            Some(on),
            &mut out,
        );
        let rows = match r {
            Ok(rows) => rows,
            Err(e) => return t.fail(format!("progress {on}: {e:#}")),
        };
        for &name in CollName::ALL {
            let n = rows.iter().filter(|r| r.collective == name.name()).count();
            let want = if name == CollName::Barrier {
                1
            } else {
                sizes.len()
            };
            t.eq(&n, &want, &format!("{} rows, progress {on}", name.name()));
        }
        for r in &rows {
            let what = format!("{} {} B progress {on}", r.collective, r.size);
            t.check(r.overlap.is_finite() && r.overlap >= 0.0, || {
                format!("{what}: overlap {}", r.overlap)
            });
            t.check(r.pure.0 > 0.0 && r.timed.overall > 0.0, || {
                format!("{what}: times {:?} {:?}", r.pure, r.timed)
            });
            t.check(r.timed.test <= r.timed.compute, || {
                format!("{what}: tests longer than the computation")
            });
            t.check(r.hidden_at.is_some(), || format!("{what}: no efficiency"));
            t.eq(&r.progress, &Some(on), &what);
        }
    }
}

fn main() {
    let cases: Vec<Case> = vec![
        case("progress_thread_level", thread_level),
        case("progress_idle_engine_is_quiet", idle_engine_is_quiet),
        case(
            "progress_completes_during_compute",
            completes_during_compute,
        ),
        case("collbench_overlap", collbench_overlap),
    ];
    common::run_threaded(&cases)
}
