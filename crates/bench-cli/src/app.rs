//! The program: parse the command line, start MPI, run the benchmark, report errors on rank 0.

use std::io;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Parser;
use collectives_core::{Communicator as _, MpiComm, ReduceOp};
use mpi::traits::Communicator as _;

use crate::allreduce::{self, MpiComms, Settings};
use crate::backend::{self, Backend};
use crate::cli::{AllreduceArgs, Cli, CollArgs, Command, Plan};
use crate::coll::CollName;
use crate::cuda_mpi::DeviceMpi;
use crate::dtype::DataType;
use crate::nccl::{self, NcclComms};
use crate::report::{Meta, Reporter};

/// This process's rank as the launcher announces it, before MPI is started (Open MPI, PMI, PMIx,
/// MVAPICH, Slurm); `None` outside a launcher.
pub fn launcher_rank() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_RANK",
        "PMIX_RANK",
        "PMI_RANK",
        "MV2_COMM_WORLD_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok()?.trim().parse().ok())
}

/// `collbench`'s `main`: the exit code is 0 on success, 2 for a bad command line and 1 for any other error,
/// on every rank. Only rank 0 prints.
pub fn main() -> ExitCode {
    // The command line is parsed before MPI starts, so that --help works without mpirun; every rank
    // parses the same arguments, and only the launcher's rank 0 prints the message.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            if launcher_rank().unwrap_or(0) == 0 {
                let _ = e.print();
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    // `pack` runs on one GPU without MPI.
    if let Command::Pack(args) = &cli.command {
        return match crate::pack::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("collbench: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    // The progress engine (`overlap --progress on|both`, or COLLECTIVES_PROGRESS=1) needs
    // MPI_THREAD_MULTIPLE; everything else runs at MPI_THREAD_SINGLE, as MPI_Init gives.
    let threading = if needs_thread_multiple(&cli.command) {
        mpi::Threading::Multiple
    } else {
        mpi::Threading::Single
    };
    let Some((universe, _provided)) = mpi::initialize_with_threading(threading) else {
        eprintln!("collbench: MPI was initialized already");
        return ExitCode::FAILURE;
    };
    let rank = universe.world().rank();
    let result = match &cli.command {
        c if c.engine().is_some() => {
            let (name, args) = c.engine().expect("checked by the guard");
            run_coll(&universe, name, args)
        }
        Command::Allreduce(args) => run_allreduce(&universe, args),
        Command::Allgatherv(args) => crate::allgatherv::run(&universe, args),
        Command::P2p(args) => crate::p2p::run(&universe, args),
        Command::Doctor => run_doctor(&universe),
        Command::Halo(args) => crate::halo::run(&universe, args),
        Command::Overlap(args) => crate::overlap::run(&universe, args),
        Command::Pack(_) => Ok(()), // handled above, before MPI starts
        _ => unreachable!("every engine subcommand is taken by the first arm"),
    };
    let code = match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if rank == 0 {
                eprintln!("collbench: {e:#}");
            }
            ExitCode::FAILURE
        }
    };
    // Every communicator has been freed; dropping the universe finalizes MPI on every rank.
    drop(universe);
    code
}

/// Whether `command` needs MPI at `MPI_THREAD_MULTIPLE`: the library's progress engine, asked for
/// by `overlap --progress on|both` or by `COLLECTIVES_PROGRESS`.
pub fn needs_thread_multiple(command: &Command) -> bool {
    let by_env = collectives_core::ProgressOptions::from_env().is_some();
    by_env || matches!(command, Command::Overlap(a) if a.needs_thread_multiple())
}

/// The header line on how NCCL's averages of floating-point types are checked.
pub const NCCL_AVG_NOTE: &str = "nccl: avg of half, float, double, bfloat16 and complex types is checked within \
     nranks*eps relative (NCCL multiplies each input by 1/nranks before summing; exact when nranks is a power of two)";

/// One combination to run.
pub type Job = (Backend, DataType, ReduceOp);

/// The (backend, type, operation) combinations to run, and notes on those left out.
///
/// # Errors
/// A combination asked for by name (one type and one operation) that the one backend cannot reduce:
/// the library's own message (with several backends, those that cannot are left out with a note). No
/// combination left to run.
pub fn combinations(
    backends: &[Backend],
    datatypes: &[DataType],
    ops: &[ReduceOp],
    single_pair: bool,
) -> anyhow::Result<(Vec<Job>, Vec<String>)> {
    let mut run = Vec::new();
    let mut notes = Vec::new();
    for &b in backends {
        for &d in datatypes {
            for &o in ops {
                match allreduce::supported(d, o, b) {
                    Ok(()) => run.push((b, d, o)),
                    Err(e) if single_pair && backends.len() == 1 => return Err(e.into()),
                    Err(e) => notes.push(format!("skipped {} {}: {e}", d.name(), o.name())),
                }
            }
        }
    }
    if run.is_empty() {
        bail!("nothing to run: {}", notes.join("; "));
    }
    Ok((run, notes))
}

/// Why each backend `choice` may run cannot run, agreed over all ranks: each rank looks at its own
/// machine, and a backend runs only when every rank can run it ([`backend::agreed_unavailable`]).
///
/// # Errors
/// Library errors of the agreement.
pub fn agreed_availability(
    universe: &mpi::environment::Universe,
    choice: crate::backend::BackendChoice,
) -> anyhow::Result<Vec<(Backend, Option<String>)>> {
    let candidates = choice.candidates();
    let local: Vec<Option<String>> = candidates.iter().map(|b| b.unavailable()).collect();
    let mut everywhere: Vec<i32> = local.iter().map(|r| i32::from(r.is_none())).collect();
    let ctl = MpiComm::world(universe)?.with_checked(false);
    ctl.all_reduce_in_place(&mut everywhere[..], ReduceOp::Min)?;
    Ok(candidates
        .into_iter()
        .zip(local)
        .zip(everywhere)
        .map(|((b, why), all)| (b, backend::agreed_unavailable(why, all == 1)))
        .collect())
}

/// `collbench allreduce`: on the engine ([`run_engine`]), or with `--baseline raw` or
/// `--checked-cost` on the all-reduce benchmark that times those beside the library
/// ([`crate::allreduce`], [`crate::nccl`], [`crate::cuda_mpi`]).
///
/// # Errors
/// Bad flags (found identically on every rank), unsupported combinations, library errors.
pub fn run_allreduce(
    universe: &mpi::environment::Universe,
    args: &AllreduceArgs,
) -> anyhow::Result<()> {
    let availability = agreed_availability(universe, args.backend)?;
    let plan = args
        .plan(|b| {
            availability
                .iter()
                .find(|(c, _)| *c == b)
                .and_then(|(_, why)| why.clone())
        })
        .map_err(anyhow::Error::msg)?;
    if !plan.columns.baseline && !plan.columns.checked_cost {
        // The all-reduce itself runs on the engine; the raw baselines and the checked-mode cost
        // (hidden flags) keep the benchmark below.
        let mut plan = plan;
        plan.columns.iter_stats = true;
        return run_engine(universe, CollName::Allreduce, &plan, 0, 1);
    }
    let world = universe.world();
    let (rank, nranks) = (world.rank(), world.size() as usize);
    let (jobs, skipped) =
        combinations(&plan.backends, &plan.datatypes, &plan.ops, plan.single_pair)?;
    let mut notes: Vec<String> = plan
        .unavailable
        .iter()
        .map(|(b, why)| format!("{}: not available: {why}", b.name()))
        .collect();
    notes.extend(skipped);
    let meta = Meta {
        benchmark: "allreduce",
        nranks,
        backends: plan.backends.iter().map(|b| b.name()).collect(),
        checked: plan.checked,
        environment: Vec::new(),
        min_bytes: plan.min_bytes,
        max_bytes: plan.max_bytes,
        step: plan.step.describe(),
        warmup_iters: plan.warmup_iters,
        iters: plan.iters,
        check: plan.check,
        notes,
    };
    let mut reporter = Reporter::new(
        (rank == 0).then(io::stdout),
        plan.format,
        plan.columns,
        meta,
    );
    reporter.begin();
    let settings = Settings {
        iters: plan.iters,
        warmup_iters: plan.warmup_iters,
        check: plan.check,
        baseline: plan.columns.baseline,
    };
    for &backend in &plan.backends {
        if plan.backends.len() > 1 {
            reporter.section(&format!("backend {}", backend.name()));
        }
        let jobs = jobs.iter().filter(|j| j.0 == backend);
        match backend {
            Backend::Mpi => {
                let comms = MpiComms::new(universe, plan.checked, plan.columns.checked_cost)?;
                for &(_, dtype, op) in jobs {
                    allreduce::run_mpi(&comms, settings, dtype, op, &plan.sizes, &mut reporter)?;
                }
            }
            Backend::Nccl => {
                let comms = match NcclComms::new(universe, plan.checked, plan.columns.checked_cost)
                {
                    Ok(c) => c,
                    // Under `--backend all` a backend that cannot start is left out, as one
                    // that is missing is; asked for by name, it is an error.
                    Err(e) if plan.all_backends => {
                        reporter.environment(&format!("nccl: not available: {e:#}"));
                        continue;
                    }
                    Err(e) => return Err(e.context("starting the nccl backend")),
                };
                reporter.environment(&comms.describe());
                if plan.ops.contains(&ReduceOp::Avg) && plan.check {
                    reporter.environment(NCCL_AVG_NOTE);
                }
                for &(_, dtype, op) in jobs {
                    nccl::run_nccl(&comms, settings, dtype, op, &plan.sizes, &mut reporter)?;
                }
                comms.finalize()?;
            }
            Backend::CudaMpi | Backend::MpiStaged => {
                let comms = match crate::cuda_mpi::DeviceMpiComms::new(
                    universe,
                    backend,
                    plan.checked,
                    plan.columns.checked_cost,
                ) {
                    Ok(c) => c,
                    Err(e) if plan.all_backends => {
                        reporter.environment(&format!("{}: not available: {e:#}", backend.name()));
                        continue;
                    }
                    Err(e) => {
                        return Err(e.context(format!("starting the {} backend", backend.name())))
                    }
                };
                reporter.environment(&comms.main.describe());
                for &(_, dtype, op) in jobs {
                    crate::cuda_mpi::run_device_mpi(
                        &comms,
                        settings,
                        dtype,
                        op,
                        &plan.sizes,
                        &mut reporter,
                    )?;
                }
                comms.finalize()?;
            }
        }
    }
    // With several backends, the fastest per size closes the run.
    let summary = crate::fastest::fastest_lines(reporter.rows());
    if !summary.is_empty() {
        reporter.section("summary");
        for line in summary {
            reporter.environment(&line);
        }
    }
    reporter.finish().context("writing the output")
}

/// `collbench NAME` for a collective on the engine ([`crate::engine`], [`crate::coll`]): every
/// backend, type and operation of the flags, one row per size.
///
/// # Errors
/// Bad flags (found identically on every rank), unsupported combinations, library errors.
pub fn run_coll(
    universe: &mpi::environment::Universe,
    name: CollName,
    args: &CollArgs,
) -> anyhow::Result<()> {
    let availability = agreed_availability(universe, args.backend)?;
    let nranks = universe.world().size() as usize;
    let plan = args
        .plan(name, nranks, |b| {
            availability
                .iter()
                .find(|(c, _)| *c == b)
                .and_then(|(_, why)| why.clone())
        })
        .map_err(anyhow::Error::msg)?;
    run_engine(universe, name, &plan, args.root, args.average)
}

/// Run collective `name` as `plan` says on the engine, with `root` (`-r`) and `average` (`-a`).
///
/// # Errors
/// Unsupported combinations, library errors.
pub fn run_engine(
    universe: &mpi::environment::Universe,
    name: CollName,
    plan: &Plan,
    root: usize,
    average: u8,
) -> anyhow::Result<()> {
    let world = universe.world();
    let (rank, nranks) = (world.rank(), world.size() as usize);
    let (jobs, skipped) = if name.reduces() {
        combinations(&plan.backends, &plan.datatypes, &plan.ops, plan.single_pair)?
    } else {
        let jobs = plan
            .backends
            .iter()
            .flat_map(|&b| plan.datatypes.iter().map(move |&d| (b, d, ReduceOp::Sum)))
            .collect();
        (jobs, Vec::new())
    };
    let mut notes: Vec<String> = plan
        .unavailable
        .iter()
        .map(|(b, why)| format!("{}: not available: {why}", b.name()))
        .collect();
    notes.extend(skipped);
    notes.push(match plan.blocking {
        Some(true) => "timing: blocking (-z 1): each call timed to its completion".to_string(),
        Some(false) => "timing: back to back (-z 0)".to_string(),
        None => format!(
            "timing: blocking (each call timed to its completion) up to {} B, back to back above \
             (nccl only; -z 0|1 sets one for all sizes)",
            crate::engine::BLOCKING_AUTO_MAX
        ),
    });
    let meta = Meta {
        benchmark: name.name(),
        nranks,
        backends: plan.backends.iter().map(|b| b.name()).collect(),
        checked: plan.checked,
        environment: Vec::new(),
        min_bytes: plan.min_bytes,
        max_bytes: plan.max_bytes,
        step: plan.step.describe(),
        warmup_iters: plan.warmup_iters,
        iters: plan.iters,
        check: plan.check,
        notes,
    };
    let mut reporter = Reporter::new(
        (rank == 0).then(io::stdout),
        plan.format,
        plan.columns,
        meta,
    );
    reporter.begin();
    let settings = crate::engine::Settings {
        iters: plan.iters,
        warmup_iters: plan.warmup_iters,
        check: plan.check,
        root,
        average,
        blocking: plan.blocking,
    };
    for &backend in &plan.backends {
        if plan.backends.len() > 1 {
            reporter.section(&format!("backend {}", backend.name()));
        }
        let jobs: Vec<Job> = jobs.iter().copied().filter(|j| j.0 == backend).collect();
        match backend {
            Backend::Mpi => {
                let main = MpiComm::world(universe)?.with_checked(plan.checked);
                let ctl = MpiComm::world(universe)?.with_checked(false);
                let b = crate::engine::Host {
                    comm: &main,
                    ctl: &ctl,
                };
                for (_, dtype, op) in jobs {
                    name.run(&b, settings, dtype, op, &plan.sizes, &mut reporter)?;
                }
            }
            Backend::Nccl => {
                let comms = match NcclComms::new(universe, plan.checked, false) {
                    Ok(c) => c,
                    Err(e) if plan.all_backends => {
                        reporter.environment(&format!("nccl: not available: {e:#}"));
                        continue;
                    }
                    Err(e) => return Err(e.context("starting the nccl backend")),
                };
                reporter.environment(&comms.describe());
                if name.reduces() && plan.ops.contains(&ReduceOp::Avg) && plan.check {
                    reporter.environment(NCCL_AVG_NOTE);
                }
                let b = crate::engine::Device {
                    comm: &comms.main,
                    ctl: &comms.ctl,
                    backend,
                };
                for (_, dtype, op) in jobs {
                    name.run(&b, settings, dtype, op, &plan.sizes, &mut reporter)?;
                }
                comms.finalize()?;
            }
            Backend::CudaMpi | Backend::MpiStaged => {
                let comms = match crate::cuda_mpi::DeviceMpiComms::new(
                    universe,
                    backend,
                    plan.checked,
                    false,
                ) {
                    Ok(c) => c,
                    Err(e) if plan.all_backends => {
                        reporter.environment(&format!("{}: not available: {e:#}", backend.name()));
                        continue;
                    }
                    Err(e) => {
                        return Err(e.context(format!("starting the {} backend", backend.name())))
                    }
                };
                reporter.environment(&comms.main.describe());
                for (_, dtype, op) in jobs {
                    match &comms.main {
                        DeviceMpi::Cuda(c) => {
                            let b = crate::engine::Device {
                                comm: c,
                                ctl: &comms.ctl,
                                backend,
                            };
                            name.run(&b, settings, dtype, op, &plan.sizes, &mut reporter)?;
                        }
                        DeviceMpi::Staged(c) => {
                            let b = crate::engine::Device {
                                comm: c,
                                ctl: &comms.ctl,
                                backend,
                            };
                            name.run(&b, settings, dtype, op, &plan.sizes, &mut reporter)?;
                        }
                    }
                }
                comms.finalize()?;
            }
        }
    }
    let summary = crate::fastest::fastest_lines(reporter.rows());
    if !summary.is_empty() {
        reporter.section("summary");
        for line in summary {
            reporter.environment(&line);
        }
    }
    reporter.finish().context("writing the output")
}

/// `collbench doctor`: rank 0 prints the report.
///
/// # Errors
/// MPI errors.
pub fn run_doctor(universe: &mpi::environment::Universe) -> anyhow::Result<()> {
    let world = MpiComm::world(universe)?.with_checked(false);
    if let Some(report) = crate::doctor::doctor(&world)? {
        print!("{}", report.render());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_unsupported_pair_is_an_error_and_all_skips() {
        let e =
            combinations(&[Backend::Mpi], &[DataType::Int32], &[ReduceOp::Avg], true).unwrap_err();
        assert!(
            e.to_string()
                .contains("i32 with avg is not supported on the mpi backend"),
            "{e}"
        );
        let (run, notes) =
            combinations(&[Backend::Mpi], &DataType::ALL, &ReduceOp::ALL, false).unwrap();
        // 12 types x 5 ops = 60; half and bfloat16 (10), integer avg (6), complex min/max (4) are out.
        assert_eq!(run.len(), 40);
        assert_eq!(notes.len(), 20);
        assert!(notes.iter().any(|n| n.starts_with(
            "skipped half sum: all_reduce: f16 with sum is not supported on the mpi backend"
        )));
        assert!(combinations(
            &[Backend::Mpi],
            &[DataType::Half, DataType::Bfloat16],
            &[ReduceOp::Sum],
            false
        )
        .is_err());
    }

    #[test]
    fn a_named_pair_runs_where_some_backend_can() {
        let both = [Backend::Mpi, Backend::Nccl];
        let (run, notes) = combinations(&both, &[DataType::Half], &[ReduceOp::Sum], true).unwrap();
        assert_eq!(run, [(Backend::Nccl, DataType::Half, ReduceOp::Sum)]);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("on the mpi backend"), "{notes:?}");
        let e = combinations(&both, &[DataType::Complex64], &[ReduceOp::Max], true).unwrap_err();
        assert!(e.to_string().starts_with("nothing to run"), "{e}");
        // On NCCL: every real type with every operation, complex numbers with sum and avg.
        let (run, notes) =
            combinations(&[Backend::Nccl], &DataType::ALL, &ReduceOp::ALL, false).unwrap();
        assert_eq!((run.len(), notes.len()), (54, 6));
        assert!(combinations(
            &[Backend::Nccl],
            &[DataType::Complex128],
            &[ReduceOp::Prod],
            true
        )
        .unwrap_err()
        .to_string()
        .contains("nccl"));
    }
}
