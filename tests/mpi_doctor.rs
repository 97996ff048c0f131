//! `collbench doctor` on the ranks it is launched with (no GPU needed): every rank answers, rank 0 gets
//! one report naming the MPI library, the CUDA-awareness verdict and its facts, every rank's view,
//! every backend and the one-shot all-reduce's offer; the verdict is the same on every rank and
//! follows from its facts. Also the host path of `collbench p2p` (windows of non-blocking sends,
//! acknowledgements, the byte check) on 2+ ranks, and every collective of `collbench` on the
//! benchmark engine over host MPI with the `#wrong` check (0 wrong on every rank count). Run:
//! `mpirun -n N target/debug/deps/mpi_doctor-*` (or `cargo xtask test`).

#![allow(clippy::useless_vec)] // the shared suite's buffers are vectors

mod common;

use bench_cli::cmd::doctor;
use bench_cli::cmd::p2p::P2pArgs;
use bench_cli::measure::backend::Backend;
use collectives::backend::mpi_cuda::cuda_unavailable;
use collectives::cuda_aware::{self, decide, CudaAwareness};
use collectives::Communicator;
use common::{case, Case, T};

fn report(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    let r = match doctor::doctor(t.comm) {
        Ok(r) => r,
        Err(e) => return t.fail(format!("doctor: {e:#}")),
    };
    match r {
        Some(_) if rank != 0 => t.fail("a rank other than 0 got the report".into()),
        None if rank == 0 => t.fail("rank 0 got no report".into()),
        None => {}
        Some(r) => {
            print!(
                "{}",
                r.render()
                    .lines()
                    .map(|l| format!("  | {l}\n"))
                    .collect::<String>()
            );
            t.eq(&r.nranks, &size, "nranks");
            t.eq(
                &r.ranks.iter().map(|i| i.rank).collect::<Vec<_>>(),
                &(0..size).collect::<Vec<_>>(),
                "every rank answered, in order",
            );
            t.check(
                !r.library.is_empty() && !r.library.starts_with("unknown"),
                || format!("MPI library: {:?}", r.library),
            );
            t.check(r.standard.is_some_and(|(major, _)| major >= 3), || {
                format!("MPI standard: {:?}", r.standard)
            });
            t.eq(&r.facts.len(), &4, "facts listed");
            t.check(r.cuda_aware_everywhere_same, || {
                "ranks disagree on CUDA-awareness".into()
            });
            for i in &r.ranks {
                t.check(i.local_rank < i.local_size && i.local_size <= size, || {
                    format!(
                        "rank {} node-local {}/{}",
                        i.rank, i.local_rank, i.local_size
                    )
                });
            }
            t.eq(
                &r.backends.len(),
                &Backend::ALL.len(),
                "every backend listed",
            );
            t.check(r.works(Backend::Mpi), || {
                "the mpi backend works everywhere".into()
            });
            if cuda_unavailable().is_some() {
                for b in [Backend::MpiStaged, Backend::CudaMpi, Backend::Nccl] {
                    t.check(!r.works(b), || {
                        format!("{} cannot work without a GPU", b.name())
                    });
                }
            }
            // The one-shot path: not offered where NCCL does not run, with NCCL's reason; where
            // it runs, a limit or the path's own reason.
            match (&r.one_shot, r.works(Backend::Nccl)) {
                (Err(why), false) => t
                    .check(why.starts_with("the nccl backend does not run"), || {
                        format!("one-shot without nccl: {why:?}")
                    }),
                (Ok(limit), true) => t.check(*limit > 0, || format!("one-shot limit {limit}")),
                (Err(why), true) => t.check(!why.is_empty(), || "one-shot: no reason".into()),
                (Ok(limit), false) => {
                    t.fail(format!("one-shot offered up to {limit} B without nccl"))
                }
            }
            // CUDA-aware MPI needs a yes from detection on every rank.
            if !r.cuda_aware.is_yes() {
                t.check(!r.works(Backend::CudaMpi), || {
                    "cuda-mpi listed as working on an MPI not detected as CUDA-aware".into()
                });
            }
            let text = r.render();
            for needle in [
                "MPI library",
                "CUDA-aware MPI",
                "decided from",
                "NCCL",
                "backends:",
            ] {
                t.check(text.contains(needle), || {
                    format!("the report lacks {needle:?}")
                });
            }
            for b in Backend::ALL {
                t.check(text.contains(&format!("  {:<11} ", b.name())), || {
                    format!("the report lacks backend {}", b.name())
                });
            }
        }
    }
}

/// The verdict follows from the facts, is the same object on every call, and the same on every rank.
fn detection(t: &T) {
    let Some(d) = t.ok(cuda_aware::detect(), "detect") else {
        return;
    };
    t.eq(
        &decide(&d.facts),
        &d.awareness,
        "the verdict follows from the facts",
    );
    let again = cuda_aware::detect().ok();
    t.check(again.is_some_and(|a| std::ptr::eq(a, d)), || {
        "detected once".into()
    });
    t.check(d.facts.library.is_some(), || {
        "MPI_Get_library_version answered".into()
    });
    let code = match &d.awareness {
        CudaAwareness::Yes { .. } => 1i64,
        CudaAwareness::No { .. } => 0,
        _ => -1,
    };
    let mut all = vec![0i64; t.size()];
    t.ok(t.comm.all_gather(&[code][..], &mut all[..]), "all_gather");
    t.check(all.iter().all(|&c| c == code), || {
        format!("verdicts per rank: {all:?}")
    });
}

/// The host path of `collbench p2p`: latency, bandwidth, bi-directional and multi-pair bandwidth
/// rows (every pair of ranks in the last), no byte received wrong.
fn p2p_on_host(t: &T) {
    let flags = [
        "-b", "1", "-e", "64K", "-f", "16", "-n", "5", "-w", "1", "--window", "8",
    ];
    let args = match P2pArgs::from_flags(&flags) {
        Ok(a) => a,
        Err(e) => return t.fail(format!("flags: {e}")),
    };
    let rows = match bench_cli::cmd::p2p::measure_host(t.comm, &args) {
        Ok(rows) => rows,
        Err(e) => return t.fail(format!("p2p on host: {e:#}")),
    };
    if t.rank() != 0 {
        t.check(rows.is_empty(), || "rows on a rank other than 0".into());
        return;
    }
    t.eq(
        &rows.iter().map(|r| r.size).collect::<Vec<_>>(),
        &vec![1, 16, 256, 4096, 65536],
        "sizes",
    );
    for r in &rows {
        t.eq(&r.wrong, &Some(0), &format!("bytes wrong at {}", r.size));
        t.check(r.latency.is_some_and(|l| l > 0.0), || {
            format!("latency at {}", r.size)
        });
        t.check(r.bandwidth.is_some_and(|b| b > 0.0), || {
            format!("bandwidth at {}", r.size)
        });
        t.check(r.bibw.is_some_and(|b| b > 0.0), || {
            format!("bi-directional bandwidth at {}", r.size)
        });
        t.check(r.mbw.is_some_and(|b| b > 0.0), || {
            format!("multi-pair bandwidth at {}", r.size)
        });
        t.eq(&r.pairs, &(t.size() / 2), "pairs");
    }
}

/// Every collective on the engine over host MPI, small sizes, with `-c 1`: rows for every size and
/// no wrong element, for a reduction with a non-zero root and an uneven split included.
fn engine_collectives(t: &T) {
    use bench_cli::cmd::coll::CollName;
    use bench_cli::measure::dtype::DataType;
    use bench_cli::measure::engine::{Host, Settings};
    use bench_cli::output::record::Format;
    use bench_cli::output::report::{Columns, Meta, Reporter};
    use collectives::ReduceOp;

    let Some(ctl) = t.ok(t.comm.dup(), "dup") else {
        return;
    };
    let b = Host {
        comm: t.comm,
        ctl: &ctl,
        variant: Default::default(),
    };
    let settings = Settings {
        iters: 2,
        warmup_iters: 1,
        check: true,
        root: t.size() - 1,
        average: 1,
        blocking: None,
        barrier_each: false,
    };
    let sizes = [8, 64, 512, 4096];
    for &name in CollName::ALL {
        for (dtype, op) in [
            (DataType::Float, ReduceOp::Sum),
            (DataType::Int32, ReduceOp::Max),
        ] {
            let meta = Meta {
                benchmark: name.name(),
                nranks: t.size(),
                backends: vec!["mpi"],
                checked: false,
                min_bytes: 8,
                max_bytes: 4096,
                step: "8(factor)".into(),
                warmup_iters: 1,
                iters: 2,
                check: true,
                notes: Vec::new(),
                environment: Vec::new(),
                machine: Default::default(),
            };
            let mut r = Reporter::<Vec<u8>>::new(None, Format::Csv, Columns::default(), meta);
            let what = format!("{} {} {}", name.name(), dtype.name(), op.name());
            if let Err(e) = name.run(
                std::slice::from_ref(&b),
                settings,
                dtype,
                op,
                &sizes,
                &mut r,
            ) {
                t.fail(format!("{what}: {e:#}"));
                continue;
            }
            t.check(!r.rows().is_empty(), || format!("{what}: no row"));
            for row in r.rows() {
                t.eq(
                    &row.oop.wrong,
                    &Some(0),
                    &format!("{what} {} B wrong", row.size),
                );
                if row.in_place {
                    t.eq(
                        &row.ip.wrong,
                        &Some(0),
                        &format!("{what} {} B in place", row.size),
                    );
                }
                t.check(row.oop.time.avg > 0.0, || format!("{what}: no time"));
            }
        }
    }
}

fn main() {
    let cases: Vec<Case> = vec![
        case("engine_collectives", engine_collectives),
        case("doctor_report", report),
        case("doctor_detection", detection),
        case("p2p_on_host", p2p_on_host).min_ranks(2),
    ];
    common::run(&cases)
}
