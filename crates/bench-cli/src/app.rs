//! The program: parse the command line, start MPI, run the benchmark, report errors on rank 0.

use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Parser;
use collectives_core::{
    Communicator as _, DeviceCommunicator as _, MpiComm, NcclComm, ReduceOp, RegisterMode,
};
use mpi::traits::Communicator as _;

use crate::cli::{AllreduceArgs, Cli, CollArgs, Command, Plan};
use crate::cmd::coll::CollName;
use crate::measure::backend::{self, Backend};
use crate::measure::comms::{DeviceMpi, DeviceMpiComms, NcclComms};
use crate::measure::dtype::{DataType, ElementVisitor};
use crate::measure::expected::BenchElement;
use crate::measure::variant::Variant;
use crate::output::record::Format;
use crate::output::record::Machine;
use crate::output::report::{Meta, Reporter};

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
    // OSU's flags (`--osu`) are read into ours before clap sees them.
    let argv = match crate::output::osu::translate(std::env::args().collect()) {
        Ok(argv) => argv,
        Err(e) => {
            if launcher_rank().unwrap_or(0) == 0 {
                eprintln!("collbench: {e}");
            }
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            if launcher_rank().unwrap_or(0) == 0 {
                let _ = e.print();
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    // `plot` needs no MPI; `pack` runs on one GPU without MPI.
    if let Command::Plot(args) = &cli.command {
        return match crate::output::plot::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("collbench: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Command::Pack(args) = &cli.command {
        return match crate::cmd::pack::run(args) {
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
        Command::Allgatherv(args) => crate::cmd::allgatherv::run(&universe, args),
        Command::P2p(args) => crate::cmd::p2p::run(&universe, args),
        Command::Doctor => run_doctor(&universe),
        Command::Halo(args) => crate::cmd::halo::run(&universe, args),
        Command::Overlap(args) => crate::cmd::overlap::run(&universe, args),
        Command::Pack(_) | Command::Plot(_) => Ok(()), // handled above, before MPI starts
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

/// Why `op` cannot reduce `dtype` on `backend` (the library's own error), or `Ok` when it can.
///
/// # Errors
/// [`collectives_core::Error::Unsupported`].
pub fn supported(dtype: DataType, op: ReduceOp, backend: Backend) -> collectives_core::Result<()> {
    struct Check(ReduceOp, Backend);
    impl ElementVisitor for Check {
        type Output = collectives_core::Result<()>;
        fn visit<T: BenchElement>(self, _: DataType) -> Self::Output {
            collectives_core::check::check_op::<T>("all_reduce", self.0, self.1.kind())
        }
    }
    dtype.visit(Check(op, backend))
}

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
                match supported(d, o, b) {
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
    choice: crate::measure::backend::BackendChoice,
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

/// `collbench allreduce`: the all-reduce on the engine, with its raw baseline (`--baseline raw`) and
/// checked mode's cost (`--checked-cost`) as variants beside the library's call.
///
/// # Errors
/// Bad flags (found identically on every rank), unsupported combinations, library errors, wrong
/// results.
pub fn run_allreduce(
    universe: &mpi::environment::Universe,
    args: &AllreduceArgs,
) -> anyhow::Result<()> {
    let availability = agreed_availability(universe, args.coll.backend)?;
    let mut plan = args
        .plan(|b| {
            availability
                .iter()
                .find(|(c, _)| *c == b)
                .and_then(|(_, why)| why.clone())
        })
        .map_err(anyhow::Error::msg)?;
    plan.columns.iter_stats = true;
    run_engine(
        universe,
        CollName::Allreduce,
        &plan,
        args.coll.root,
        args.coll.average,
    )
}

/// `collbench NAME` for a collective on the engine ([`crate::measure::engine`], [`crate::cmd::coll`]): every
/// backend, type and operation of the flags, one row per size.
///
/// # Errors
/// Bad flags (found identically on every rank), unsupported combinations, library errors, wrong
/// results.
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

/// The variants a backend times: the library's call, then its raw baseline where asked for and the
/// backend has one, then checked mode on where asked for, then the persistent plan where asked for
/// and the collective has one.
fn variants(plan: &Plan, name: CollName, backend: Backend) -> Vec<Variant> {
    let mut v = vec![Variant::Library];
    if backend == Backend::Nccl {
        // `--register`: the library's rows are `none`'s; without `none`, only the registered ones.
        v = plan
            .register
            .iter()
            .map(|&m| Variant::of_register_mode(m))
            .collect();
    }
    if plan.baseline && name == CollName::Allreduce && backend != Backend::MpiStaged {
        v.push(Variant::Raw);
    }
    if plan.checked_cost {
        v.push(Variant::Checked);
    }
    if plan.persistent && name.persistent_init().is_some() {
        v.push(Variant::Persistent);
    }
    v
}

/// The header lines of the NCCL buffers each variant times, and the variants that can run: one
/// small buffer of each registered mode is made (a window on every rank together, agreed), and a
/// mode the loaded NCCL cannot register is left out with a line saying why, the same on every rank.
///
/// # Errors
/// MPI errors of the agreement.
fn register_probe(
    comm: &NcclComm,
    variants: &[Variant],
) -> anyhow::Result<(Vec<Variant>, Vec<String>)> {
    let mut kept = Vec::new();
    let mut lines = Vec::new();
    for &v in variants {
        let mode = v.register_mode();
        let what = match mode {
            RegisterMode::Buffer => "ncclMemAlloc + ncclCommRegister (nccl-tests -R 1)",
            RegisterMode::Window => {
                "ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) on every rank (nccl-tests -R 2)"
            }
            _ => {
                kept.push(v);
                if v == Variant::Library {
                    lines.push("nccl buffers: variant library: cudarc's allocations, not registered".into());
                }
                continue;
            }
        };
        // Every rank makes the probe; a window's failure is agreed inside the call, and a
        // registration's (local) failure is agreed here.
        let probe = comm
            .alloc_registered::<f32>(1, mode)
            .map(|b| (b.is_symmetric(), b.is_registered()));
        let mut ok = [i32::from(probe.is_ok())];
        comm.mpi().all_reduce_in_place(&mut ok[..], ReduceOp::Min)?;
        match probe {
            Ok((symmetric, registered)) if ok[0] == 1 => {
                let granted = match mode {
                    RegisterMode::Window if symmetric => "symmetric window granted",
                    RegisterMode::Window => {
                        "no symmetric window: NCCL has no symmetric support on this communicator (NCCL_DEBUG=INFO says why)"
                    }
                    _ if registered => "registered",
                    _ => "NCCL declined to register (NCCL_LOCAL_REGISTER=0?)",
                };
                lines.push(format!(
                    "nccl buffers: variant {}: {what}; {granted}",
                    v.name()
                ));
                kept.push(v);
            }
            Ok(_) => lines.push(format!(
                "nccl buffers: variant {}: left out: another rank could not register",
                v.name()
            )),
            Err(e) => lines.push(format!("nccl buffers: variant {}: left out: {e}", v.name())),
        }
    }
    Ok((kept, lines))
}

/// Run collective `name` as `plan` says on the engine, with `root` (`-r`) and `average` (`-a`).
///
/// # Errors
/// Unsupported combinations, library errors, wrong results (after the output is complete).
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
    if plan.baseline && plan.backends.contains(&Backend::MpiStaged) {
        notes.push(
            "mpi-staged: no raw baseline (staging through host memory is the backend)".into(),
        );
    }
    if plan.baseline && name != CollName::Allreduce {
        notes.push(format!(
            "{}: no raw baseline (all-reduce only)",
            name.name()
        ));
    }
    if plan.persistent {
        notes.push(match name.persistent_init() {
            Some(init) => format!(
                "persistent: {init} once per size and placement, then start + wait per call; \
                 wall clock around start + wait on mpi, cuda-mpi and mpi-staged; on nccl each \
                 graph launch between CUDA events with the stream synchronized before the next \
                 (a plan is waited for before it starts again, so -z 0 does not apply to it); \
                 -c 1 checks a fresh plan's result through its receive buffer"
            ),
            None => format!(
                "{}: no persistent form in the library (no persistent rows)",
                name.name()
            ),
        });
    }
    notes.push(match plan.blocking {
        Some(true) => "timing: blocking (-z 1): each call timed to its completion".to_string(),
        Some(false) => "timing: back to back (-z 0)".to_string(),
        None => format!(
            "timing: blocking (each call timed to its completion) up to {} B, back to back above \
             (nccl only; -z 0|1 sets one for all sizes)",
            crate::measure::engine::BLOCKING_AUTO_MAX
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
        machine: Machine::here(),
    };
    let sizes = if name == CollName::Barrier {
        1
    } else {
        plan.sizes.len()
    };
    let rows: usize = jobs
        .iter()
        .map(|j| sizes * variants(plan, name, j.0).len())
        .sum();
    let mut reporter = Reporter::new(
        crate::output::record::output(rank, plan.output.as_deref())?,
        plan.format,
        plan.columns,
        meta,
    )
    .with_json(plan.json.clone())
    .with_progress(rows as u64);
    reporter.begin();
    let settings = crate::measure::engine::Settings {
        iters: plan.iters,
        warmup_iters: plan.warmup_iters,
        check: plan.check,
        root,
        average,
        blocking: plan.blocking,
        barrier_each: plan.format == Format::Osu,
    };
    for &backend in &plan.backends {
        if plan.backends.len() > 1 {
            reporter.section(&format!("backend {}", backend.name()));
        }
        let jobs: Vec<Job> = jobs.iter().copied().filter(|j| j.0 == backend).collect();
        let variants = variants(plan, name, backend);
        match backend {
            Backend::Mpi => {
                let main = MpiComm::world(universe)?.with_checked(plan.checked);
                let ctl = MpiComm::world(universe)?.with_checked(false);
                let checked_on = match plan.checked_cost {
                    true => Some(MpiComm::world(universe)?.with_checked(true)),
                    false => None,
                };
                let bs: Vec<_> = variants
                    .iter()
                    .map(|&variant| crate::measure::engine::Host {
                        comm: match (variant, &checked_on) {
                            (Variant::Checked, Some(c)) => c,
                            _ => &main,
                        },
                        ctl: &ctl,
                        variant,
                    })
                    .collect();
                for (_, dtype, op) in jobs {
                    name.run(&bs, settings, dtype, op, &plan.sizes, &mut reporter)?;
                }
            }
            Backend::Nccl => {
                let comms = match NcclComms::new(universe, plan.checked, plan.checked_cost) {
                    Ok(c) => c,
                    Err(e) if plan.all_backends => {
                        reporter.environment(&format!("nccl: not available: {e:#}"));
                        continue;
                    }
                    Err(e) => return Err(e.context("starting the nccl backend")),
                };
                reporter.environment(&comms.describe());
                reporter.nccl_version(comms.main.library().version().to_string());
                let variants = match register_probe(&comms.main, &variants) {
                    Ok((kept, lines)) => {
                        for line in lines {
                            reporter.environment(&line);
                        }
                        kept
                    }
                    Err(e) => return Err(e.context("probing NCCL buffer registration")),
                };
                if name.reduces() && plan.ops.contains(&ReduceOp::Avg) && plan.check {
                    reporter.environment(NCCL_AVG_NOTE);
                }
                let bs: Vec<_> = variants
                    .iter()
                    .map(|&variant| crate::measure::engine::Device {
                        comm: match (variant, &comms.checked_on) {
                            (Variant::Checked, Some(c)) => c,
                            _ => &comms.main,
                        },
                        ctl: &comms.ctl,
                        backend,
                        variant,
                    })
                    .collect();
                for (_, dtype, op) in jobs {
                    name.run(&bs, settings, dtype, op, &plan.sizes, &mut reporter)?;
                }
                drop(bs);
                comms.finalize()?;
            }
            Backend::CudaMpi | Backend::MpiStaged => {
                let comms =
                    match DeviceMpiComms::new(universe, backend, plan.checked, plan.checked_cost) {
                        Ok(c) => c,
                        Err(e) if plan.all_backends => {
                            reporter
                                .environment(&format!("{}: not available: {e:#}", backend.name()));
                            continue;
                        }
                        Err(e) => {
                            return Err(
                                e.context(format!("starting the {} backend", backend.name()))
                            )
                        }
                    };
                reporter.environment(&comms.main.describe());
                let measured = |variant| match (variant, &comms.checked_on) {
                    (Variant::Checked, Some(c)) => c,
                    _ => &comms.main,
                };
                match &comms.main {
                    DeviceMpi::Cuda(_) => {
                        let bs: Vec<_> = variants
                            .iter()
                            .filter_map(|&variant| match measured(variant) {
                                DeviceMpi::Cuda(c) => Some(crate::measure::engine::Device {
                                    comm: c,
                                    ctl: &comms.ctl,
                                    backend,
                                    variant,
                                }),
                                DeviceMpi::Staged(_) => None,
                            })
                            .collect();
                        for &(_, dtype, op) in &jobs {
                            name.run(&bs, settings, dtype, op, &plan.sizes, &mut reporter)?;
                        }
                    }
                    DeviceMpi::Staged(_) => {
                        let bs: Vec<_> = variants
                            .iter()
                            .filter_map(|&variant| match measured(variant) {
                                DeviceMpi::Staged(c) => Some(crate::measure::engine::Device {
                                    comm: c,
                                    ctl: &comms.ctl,
                                    backend,
                                    variant,
                                }),
                                DeviceMpi::Cuda(_) => None,
                            })
                            .collect();
                        for &(_, dtype, op) in &jobs {
                            name.run(&bs, settings, dtype, op, &plan.sizes, &mut reporter)?;
                        }
                    }
                }
                comms.finalize()?;
            }
        }
    }
    let summary = crate::output::summary::fastest_lines(reporter.rows());
    if !summary.is_empty() {
        reporter.section("summary");
        for line in summary {
            reporter.environment(&line);
        }
    }
    reporter.finish().context("writing the output")?;
    let wrong = reporter.wrong();
    if wrong > 0 {
        bail!("{wrong} values were wrong (see #wrong)");
    }
    Ok(())
}

/// `collbench doctor`: rank 0 prints the report.
///
/// # Errors
/// MPI errors.
pub fn run_doctor(universe: &mpi::environment::Universe) -> anyhow::Result<()> {
    let world = MpiComm::world(universe)?.with_checked(false);
    if let Some(report) = crate::cmd::doctor::doctor(&world)? {
        print!("{}", report.render());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_modes_are_nccl_variants() {
        let plan = |args: &[&str]| {
            let mut v = vec!["collbench", "allreduce"];
            v.extend_from_slice(args);
            match Cli::try_parse_from(v).unwrap().command {
                Command::Allreduce(a) => a.plan(crate::measure::backend::host_only).unwrap(),
                other => panic!("{other:?}"),
            }
        };
        let p = plan(&["--register", "all", "--baseline", "raw"]);
        assert_eq!(
            variants(&p, CollName::Allreduce, Backend::Nccl),
            [
                Variant::Library,
                Variant::Registered,
                Variant::Window,
                Variant::Raw
            ]
        );
        assert_eq!(
            variants(&p, CollName::Allreduce, Backend::Mpi),
            [Variant::Library, Variant::Raw]
        );
        let p = plan(&["--register", "window"]);
        assert_eq!(
            variants(&p, CollName::Broadcast, Backend::Nccl),
            [Variant::Window]
        );
    }

    #[test]
    fn supported_pairs_follow_the_library() {
        assert!(supported(DataType::Double, ReduceOp::Avg, Backend::Mpi).is_ok());
        assert!(supported(DataType::Complex128, ReduceOp::Prod, Backend::Mpi).is_ok());
        let e = supported(DataType::Int32, ReduceOp::Avg, Backend::Mpi)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("i32 with avg is not supported on the mpi backend"),
            "{e}"
        );
        assert!(supported(DataType::Half, ReduceOp::Sum, Backend::Mpi).is_err());
        assert!(supported(DataType::Complex64, ReduceOp::Max, Backend::Mpi).is_err());
    }

    #[test]
    fn nccl_reduces_every_real_type_and_complex_sum_and_avg() {
        for d in DataType::ALL {
            for o in ReduceOp::ALL {
                let complex = matches!(d, DataType::Complex64 | DataType::Complex128);
                let want = !complex || matches!(o, ReduceOp::Sum | ReduceOp::Avg);
                assert_eq!(
                    supported(d, o, Backend::Nccl).is_ok(),
                    want,
                    "{} {}",
                    d.name(),
                    o.name()
                );
            }
        }
    }

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
