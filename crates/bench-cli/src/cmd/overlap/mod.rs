//! `collbench overlap`: how much of a non-blocking collective hides behind computation, measured
//! as OSU's `osu_i*` benchmarks measure it (`c/util/osu_util_mpi.c` of OMB 7.4), for every
//! non-blocking collective of the library.
//!
//! Per collective and size, on every rank:
//!
//! 1. **Pure communication**: `-n` times, after a barrier, start the operation and wait for it at
//!    once; `pure` is this rank's average.
//! 2. **Overlapped**: `-n` times, after a barrier, start it, compute for `pure` (this rank's own,
//!    as OSU sizes `dummy_compute`), then wait. `overall` is the average from the start to the end
//!    of the wait, `compute` the average time of the computation (tests included), `test` the
//!    time spent in the `-t` tests made during the computation (OSU's `-t`, default none).
//! 3. Each quantity is averaged over ranks, and
//!    `overlap = max(0, 100 - (overall - (compute - test)) / pure x 100)` (OSU's
//!    `print_stats_nbc`): 100 % when the operation costs nothing beyond the computation, 0 % when
//!    it runs only in the wait.
//!
//! With `--efficiency` the computation then grows (x2, x4, ... up to `--max-factor` times `pure`)
//! until the overlap reaches `--hidden` percent, and the computation that needed is reported
//! (`-` when it never does): how much work must sit between start and wait to hide the operation.
//!
//! Host buffers (`--backend mpi`) compute on the CPU, with the library's progress engine off, on,
//! or both (`--progress`); device buffers (`--backend nccl`) run a one-thread kernel on a second
//! stream of the GPU while the collective runs on the communicator's stream.

pub mod compute;
pub mod starts;

use std::io::{self, Write};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use collectives_core::{
    scope, Communicator, DeviceCommunicator, MpiComm, ProgressOptions, ReduceOp,
};

use crate::cmd::coll::CollName;
use crate::measure::backend::Backend;
use crate::measure::dtype::{DataType, ElementVisitor};
use crate::measure::engine::{Device, Host};
use crate::measure::expected::BenchElement;
use crate::measure::hooks::{fill, BenchBackend, Ctx};
use crate::measure::sizes::{self, LoopArgs, SizeArgs};
use crate::measure::variant::Variant;
use crate::output::record::rounded;
use crate::output::record::Format;
use crate::output::record::{Document, Machine, Overlap, Record};
use crate::output::sink::Sink;
use compute::{Compute, Spent};
use starts::NonBlocking;

/// `--progress`: the library's progress engine for host buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProgressChoice {
    /// Without the engine (Open MPI progresses only inside MPI calls).
    Off,
    /// With the engine (`MpiComm::with_progress`; needs MPI_THREAD_MULTIPLE).
    On,
    /// Off, then on, for each collective.
    Both,
}

impl ProgressChoice {
    /// The settings to run, in order.
    pub fn settings(self) -> &'static [bool] {
        match self {
            ProgressChoice::Off => &[false],
            ProgressChoice::On => &[true],
            ProgressChoice::Both => &[false, true],
        }
    }
}

/// `collbench overlap` flags (OSU's `-t` for tests; nccl-tests' size and iteration flags).
#[derive(Debug, Args)]
#[command(
    mut_arg("min_bytes", |a| a.default_value("1K")),
    mut_arg("max_bytes", |a| a.default_value("1M"))
)]
pub struct OverlapArgs {
    /// Collectives to measure; none: every collective with a non-blocking form.
    #[arg(value_enum)]
    pub collectives: Vec<CollName>,
    /// Sizes: -b, -e, -f, -i.
    #[command(flatten)]
    pub sizes: SizeArgs,
    /// Timed calls and warm-up calls per size: -n, -w.
    #[command(flatten)]
    pub loops: LoopArgs,
    /// Tests of the operation during the computation (OSU's -t): the computation is cut into this
    /// many parts with a test after each; 0: none.
    #[arg(short = 't', long = "num-tests", default_value_t = 0)]
    pub tests: u32,
    /// Element type.
    #[arg(short = 'd', long = "datatype", default_value = "float", value_parser = parse_dtype)]
    pub datatype: DataType,
    /// Reduce operation of the reducing collectives.
    #[arg(short = 'o', long = "op", default_value = "sum", value_parser = parse_op)]
    pub op: ReduceOp,
    /// Root rank of rooted collectives.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// Backend: mpi (host buffers, CPU computation) or nccl (device buffers, a GPU kernel).
    #[arg(long, default_value = "mpi", value_parser = parse_backend)]
    pub backend: Backend,
    /// The library's progress engine on the measured communicator (host buffers).
    #[arg(long, value_enum, default_value_t = ProgressChoice::Both)]
    pub progress: ProgressChoice,
    /// The progress engine's pause between probes in microseconds (0: yield the core).
    #[arg(long = "progress-poll-us", default_value_t = 0.0)]
    pub progress_poll_us: f64,
    /// Also grow the computation until the operation is hidden, and report what that took.
    #[arg(long)]
    pub efficiency: bool,
    /// With --efficiency: the overlap (%) that counts as hidden.
    #[arg(long, default_value_t = 90.0)]
    pub hidden: f64,
    /// With --efficiency: the largest computation tried, in multiples of the pure time.
    #[arg(long = "max-factor", default_value_t = 32)]
    pub max_factor: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

fn parse_dtype(s: &str) -> Result<DataType, String> {
    DataType::from_str(s, true).map_err(|_| format!("unknown type {s:?}"))
}

fn parse_op(s: &str) -> Result<ReduceOp, String> {
    ReduceOp::ALL
        .iter()
        .copied()
        .find(|o| o.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("unknown operation {s:?} (expected sum, prod, min, max or avg)"))
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    match s {
        "mpi" => Ok(Backend::Mpi),
        "nccl" => Ok(Backend::Nccl),
        _ => Err(format!(
            "overlap runs on mpi (host buffers) or nccl (device buffers), not {s:?}"
        )),
    }
}

impl OverlapArgs {
    /// Whether the run needs MPI at `MPI_THREAD_MULTIPLE` (the progress engine on host buffers).
    pub fn needs_thread_multiple(&self) -> bool {
        self.backend == Backend::Mpi && self.progress != ProgressChoice::Off
    }

    /// The collectives to run, in the engine's order.
    pub fn names(&self) -> Vec<CollName> {
        if self.collectives.is_empty() {
            CollName::ALL.to_vec()
        } else {
            CollName::ALL
                .iter()
                .copied()
                .filter(|c| self.collectives.contains(c))
                .collect()
        }
    }

    /// The sizes in bytes.
    ///
    /// # Errors
    /// Bad sizes or step.
    pub fn sizes(&self) -> Result<Vec<usize>, String> {
        self.sizes.sequence()
    }

    fn settings(&self) -> Settings {
        Settings {
            iters: self.loops.iters as usize,
            warmup_iters: self.loops.warmup_iters as usize,
            tests: self.tests as usize,
            root: self.root,
            efficiency: self.efficiency.then_some(Efficiency {
                hidden: self.hidden,
                max_factor: self.max_factor.max(1),
            }),
        }
    }
}

/// OSU's overlap in percent: `max(0, 100 - (overall - (compute - test)) / pure x 100)`, all in the
/// same unit; `compute` includes the tests made during it. 0 when `pure` is not positive.
pub fn overlap_percent(overall: f64, compute: f64, test: f64, pure: f64) -> f64 {
    if pure > 0.0 {
        (100.0 - (overall - (compute - test)) / pure * 100.0).max(0.0)
    } else {
        0.0
    }
}

/// The efficiency variant's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Efficiency {
    /// The overlap (%) that counts as hidden.
    pub hidden: f64,
    /// The largest computation tried, in multiples of the pure time.
    pub max_factor: u32,
}

/// What every size shares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Timed operations per size (pure and overlapped each).
    pub iters: usize,
    /// Warm-up operations.
    pub warmup_iters: usize,
    /// Tests during the computation.
    pub tests: usize,
    /// Root of rooted collectives.
    pub root: usize,
    /// The efficiency variant, if asked for.
    pub efficiency: Option<Efficiency>,
}

/// Averages over iterations of one overlapped measurement on one rank, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Overlapped {
    /// Start to end of the wait.
    pub overall: f64,
    /// The computation, tests included.
    pub compute: f64,
    /// Inside the tests.
    pub test: f64,
    /// Inside the start call.
    pub init: f64,
    /// Inside the wait.
    pub wait: f64,
}

/// One row: one collective, size and progress setting, times in seconds averaged over ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct OverlapRow {
    /// The collective (`allreduce`).
    pub collective: &'static str,
    /// The library call (`i_all_reduce`).
    pub call: &'static str,
    /// `mpi` or `nccl`.
    pub backend: &'static str,
    /// The progress engine: `Some(on)` on host buffers, `None` on NCCL.
    pub progress: Option<bool>,
    /// Bytes (nccl-tests' size of the collective).
    pub size: usize,
    /// Elements.
    pub count: usize,
    /// Pure communication: average, fastest and slowest rank.
    pub pure: (f64, f64, f64),
    /// The overlapped measurement, averaged over ranks.
    pub timed: Overlapped,
    /// OSU's overlap (%).
    pub overlap: f64,
    /// With `--efficiency`: the computation (tests excluded) at which the overlap first reached the
    /// threshold, its multiple of the pure time, and the overlap there; `None` when it never did.
    pub hidden_at: Option<Option<(f64, u32, f64)>>,
}

impl OverlapRow {
    /// The computation without the tests (OSU's `Compute` column).
    pub fn compute_only(&self) -> f64 {
        self.timed.compute - self.timed.test
    }
}

/// Time `f` once.
fn timed<R>(f: impl FnOnce() -> anyhow::Result<R>) -> anyhow::Result<(R, f64)> {
    let start = Instant::now();
    let r = f()?;
    Ok((r, start.elapsed().as_secs_f64()))
}

/// Measure collective `K` with elements `T` on backend `b` over `counts` (elements per row),
/// computing with `compute`; one row per count.
///
/// # Errors
/// Library and CUDA errors (the same on every rank for the same arguments).
#[allow(clippy::too_many_arguments)]
pub fn measure<K: NonBlocking, B: BenchBackend, T: BenchElement>(
    b: &B,
    settings: Settings,
    op: ReduceOp,
    counts: &[usize],
    compute: &Compute,
    progress: Option<bool>,
    mut emit: impl FnMut(OverlapRow),
) -> anyhow::Result<()> {
    let ctx = Ctx::of(b.comm(), settings.root, op);
    let counts: &[usize] = if K::SIZED { counts } else { &[0] };
    let elem = std::mem::size_of::<T>();
    let mut last = None;
    for &c in counts {
        let shape = K::shape(c, &ctx);
        if last == Some(shape.count) || (K::SIZED && shape.count == 0 && c > 0) {
            continue;
        }
        last = Some(shape.count);
        let input = fill::<K, T>(&ctx, &shape);
        let init =
            K::recv_init(&ctx, &shape, &input).unwrap_or_else(|| vec![T::zeroed(); shape.recv]);
        let buffers = b.upload(&input).and_then(|s| Ok((s, b.upload(&init)?)));
        let mut ok = [i32::from(buffers.is_ok())];
        b.ctl().all_reduce_in_place(&mut ok[..], ReduceOp::Min)?;
        let (send, mut recv) = buffers.with_context(|| {
            format!(
                "setting up buffers of {} and {} elements",
                shape.send, shape.recv
            )
        })?;
        if ok[0] == 0 {
            anyhow::bail!(
                "a rank cannot set up buffers of {} bytes",
                shape.send.max(shape.recv) * elem
            );
        }
        // Start and wait at once.
        let mut once = || -> anyhow::Result<()> {
            scope(|s| -> anyhow::Result<()> {
                K::start(b, &ctx, &shape, &send, &mut recv, s)?.wait()?;
                Ok(())
            })?
        };
        for _ in 0..settings.warmup_iters {
            once()?;
        }
        let mut pure = 0.0;
        for _ in 0..settings.iters {
            b.ctl().barrier()?;
            pure += timed(&mut once)?.1;
        }
        let pure = pure / settings.iters.max(1) as f64;
        // Start, compute for `seconds`, wait.
        let mut overlapped = |seconds: f64| -> anyhow::Result<Overlapped> {
            let mut sum = Overlapped::default();
            for _ in 0..settings.iters {
                b.ctl().barrier()?;
                let ((init, spent, wait), overall) = timed(|| {
                    scope(|s| -> anyhow::Result<(f64, Spent, f64)> {
                        let (mut req, init) =
                            timed(|| K::start(b, &ctx, &shape, &send, &mut recv, s))?;
                        let spent = compute.run(seconds, settings.tests, &mut || {
                            req.test()?;
                            Ok(())
                        })?;
                        let ((), wait) = timed(|| Ok(req.wait()?))?;
                        Ok((init, spent, wait))
                    })?
                })?;
                sum.overall += overall;
                sum.compute += spent.compute;
                sum.test += spent.test;
                sum.init += init;
                sum.wait += wait;
            }
            let n = settings.iters.max(1) as f64;
            Ok(Overlapped {
                overall: sum.overall / n,
                compute: sum.compute / n,
                test: sum.test / n,
                init: sum.init / n,
                wait: sum.wait / n,
            })
        };
        let mine = overlapped(pure)?;
        let (pure_spread, timed) = over_ranks(b.ctl(), pure, mine)?;
        let overlap = overlap_percent(timed.overall, timed.compute, timed.test, pure_spread.0);
        let hidden_at = match settings.efficiency {
            None => None,
            Some(eff) => {
                let mut found =
                    (overlap >= eff.hidden).then_some((timed.compute - timed.test, 1, overlap));
                let mut factor = 2u32;
                while found.is_none() && factor <= eff.max_factor {
                    let mine = overlapped(pure * f64::from(factor))?;
                    let (_, t) = over_ranks(b.ctl(), pure, mine)?;
                    let o = overlap_percent(t.overall, t.compute, t.test, pure_spread.0);
                    if o >= eff.hidden {
                        found = Some((t.compute - t.test, factor, o));
                    }
                    factor = factor.saturating_mul(2);
                }
                Some(found)
            }
        };
        emit(OverlapRow {
            collective: K::NAME,
            call: K::CALL,
            backend: b.backend().name(),
            progress,
            size: shape.count * elem,
            count: shape.count,
            pure: pure_spread,
            timed,
            overlap,
            hidden_at,
        });
    }
    Ok(())
}

/// The averages over ranks (every rank gets the same), and the pure time's fastest and slowest rank.
fn over_ranks(
    ctl: &MpiComm,
    pure: f64,
    o: Overlapped,
) -> anyhow::Result<((f64, f64, f64), Overlapped)> {
    let local = [pure, o.overall, o.compute, o.test, o.init, o.wait];
    let s = crate::measure::timing::over_ranks(ctl, &local)?;
    Ok((
        (s[0].avg, s[0].min, s[0].max),
        Overlapped {
            overall: s[1].avg,
            compute: s[2].avg,
            test: s[3].avg,
            init: s[4].avg,
            wait: s[5].avg,
        },
    ))
}

struct Visit<'a, B> {
    b: &'a B,
    name: CollName,
    settings: Settings,
    op: ReduceOp,
    sizes: &'a [usize],
    compute: &'a Compute,
    progress: Option<bool>,
    rows: &'a mut Vec<OverlapRow>,
    out: &'a mut Output,
}

impl<B: BenchBackend> ElementVisitor for Visit<'_, B> {
    type Output = anyhow::Result<()>;
    fn visit<T: BenchElement>(self, _: DataType) -> anyhow::Result<()> {
        let counts = sizes::counts(self.sizes, std::mem::size_of::<T>());
        let Visit {
            b,
            settings,
            op,
            compute,
            progress,
            rows,
            out,
            ..
        } = self;
        let emit = |r: OverlapRow| {
            out.row(&r);
            rows.push(r);
        };
        macro_rules! go {
            ($($variant:ident => $module:ident),*) => {
                match self.name {
                    $(CollName::$variant => measure::<crate::cmd::coll::$module::Hooks, B, T>(
                        b, settings, op, &counts, compute, progress, emit,
                    ),)*
                }
            };
        }
        go!(
            Allreduce => allreduce, Allgather => allgather, Allgatherv => allgatherv,
            Reducescatter => reducescatter, Broadcast => broadcast, Reduce => reduce,
            Alltoall => alltoall, Alltoallv => alltoallv, Gather => gather, Gatherv => gatherv,
            Scatter => scatter, Scatterv => scatterv, Sendrecv => sendrecv, Barrier => barrier
        )
    }
}

/// Run `names` on `b` with `progress` (host) and emit rows.
///
/// # Errors
/// As [`measure`].
#[allow(clippy::too_many_arguments)]
pub fn run_on<B: BenchBackend>(
    b: &B,
    names: &[CollName],
    settings: Settings,
    dtype: DataType,
    op: ReduceOp,
    sizes: &[usize],
    compute: &Compute,
    progress: Option<bool>,
    out: &mut Output,
) -> anyhow::Result<Vec<OverlapRow>> {
    let mut rows = Vec::new();
    for &name in names {
        let op = if name.reduces() { op } else { ReduceOp::Sum };
        out.section(name, progress, b.backend());
        dtype.visit(Visit {
            b,
            name,
            settings,
            op,
            sizes,
            compute,
            progress,
            rows: &mut rows,
            out,
        })?;
    }
    Ok(rows)
}

/// `collbench overlap`.
///
/// # Errors
/// Bad flags (the same verdict on every rank), library errors.
pub fn run(universe: &mpi::environment::Universe, args: &OverlapArgs) -> anyhow::Result<()> {
    let sizes = args.sizes().map_err(anyhow::Error::msg)?;
    let world = MpiComm::world(universe)?
        .with_progress(false)?
        .with_checked(false);
    let (rank, nranks) = (world.rank(), world.size());
    if args.root >= nranks {
        anyhow::bail!("root {} is not a rank of {nranks}", args.root);
    }
    let names = args.names();
    let settings = args.settings();
    let poll = crate::cmd::overlap::poll_interval(args.progress_poll_us)?;
    let mut out = Output::new(rank == 0, args.format);
    out.begin(args, nranks, &names);
    // Every backend runs the same collectives, sizes and settings.
    macro_rules! run_on {
        ($b:expr, $compute:expr, $progress:expr) => {
            run_on(
                $b,
                &names,
                settings,
                args.datatype,
                args.op,
                &sizes,
                $compute,
                $progress,
                &mut out,
            )?
        };
    }
    match args.backend {
        Backend::Nccl => {
            let comms = crate::measure::comms::NcclComms::new(universe, false, false)?;
            out.note(&comms.describe());
            out.nccl_version(comms.main.library().version().to_string());
            if args.progress != ProgressChoice::Both {
                out.note("--progress applies to host buffers; NCCL progresses on the GPU");
            }
            let compute = Compute::Gpu(compute::GpuSpin::new(comms.main.context())?);
            let b = Device {
                comm: &comms.main,
                ctl: &comms.ctl,
                backend: Backend::Nccl,
                variant: Variant::Library,
            };
            run_on!(&b, &compute, None);
            comms.main.synchronize()?;
            comms.finalize()?;
        }
        _ => {
            for &on in args.progress.settings() {
                let options = on.then(|| ProgressOptions::with_poll_interval(poll));
                let main = MpiComm::world(universe)?
                    .with_checked(false)
                    .with_progress_options(options)?;
                let ctl = MpiComm::world(universe)?
                    .with_checked(false)
                    .with_progress(false)?;
                let b = Host {
                    comm: &main,
                    ctl: &ctl,
                    variant: Variant::Library,
                };
                run_on!(&b, &Compute::Cpu, Some(on));
            }
        }
    }
    out.finish().context("writing the output")
}

/// `--progress-poll-us` as a duration.
///
/// # Errors
/// A negative or non-finite number.
pub fn poll_interval(us: f64) -> anyhow::Result<Duration> {
    if !us.is_finite() || us < 0.0 {
        anyhow::bail!("--progress-poll-us must be a number >= 0, not {us}");
    }
    Ok(Duration::from_secs_f64(us * 1e-6))
}

/// OSU's column widths: the size in 10 characters, the numbers in 18 with 2 decimals.
const SIZE_WIDTH: usize = 10;
const FIELD_WIDTH: usize = 18;

/// The output of a run, written by rank 0 through the shared output layer ([`Sink`]): OSU-style
/// tables, or the records of the one schema ([`crate::output::record`]) as CSV or JSON, with the
/// overlap fields ([`Overlap`]) filled.
#[derive(Debug)]
pub struct Output {
    sink: Sink,
    efficiency: bool,
    run: Option<RunInfo>,
}

/// What every record of a run shares.
#[derive(Clone, Debug)]
struct RunInfo {
    nranks: usize,
    dtype: &'static str,
    op: &'static str,
    root: usize,
    iters: usize,
}

impl Output {
    /// An output on standard output when `write`, else nothing.
    pub fn new(write: bool, format: Format) -> Self {
        let out = write.then(|| Box::new(io::stdout()) as Box<dyn Write>);
        Output {
            sink: Sink::new(out, format, Document::new("overlap", 0, Machine::default())),
            efficiency: false,
            run: None,
        }
    }

    /// Record the NCCL release loaded: a field of every record from now on.
    pub fn nccl_version(&mut self, version: String) {
        if self.run.is_some() {
            self.sink.doc_mut().machine.nccl_version = Some(version);
        }
    }

    fn begin(&mut self, args: &OverlapArgs, nranks: usize, names: &[CollName]) {
        self.efficiency = args.efficiency;
        let head = format!(
            "# collbench overlap: nranks {nranks}, backend {}, type {}, op {}, root {}, \
             -n {} -w {} -t {}\n\
             #  pure: start + wait, after a barrier, averaged over -n and over ranks; compute: \
             sized to each rank's pure time (OSU's dummy_compute){}\n\
             #  overlap = max(0, 100 - (overall - compute) / pure x 100), compute without the tests \
             (OSU's print_stats_nbc)",
            args.backend.name(),
            args.datatype.name(),
            args.op.name(),
            args.root,
            args.loops.iters,
            args.loops.warmup_iters,
            args.tests,
            if args.efficiency {
                format!(
                    "; hidden at: the computation (x1, x2, x4, ... up to x{} pure) at which the \
                     overlap first reached {}%",
                    args.max_factor, args.hidden
                )
            } else {
                String::new()
            },
        );
        let _ = names;
        let doc = self.sink.doc_mut();
        *doc = Document::new("overlap", nranks, Machine::here()).with_settings([
            ("minbytes", serde_json::json!(args.sizes.min_bytes)),
            ("maxbytes", serde_json::json!(args.sizes.max_bytes)),
            ("step", serde_json::json!(args.sizes.step().describe())),
            ("warmup_iters", serde_json::json!(args.loops.warmup_iters)),
            ("iters", serde_json::json!(args.loops.iters)),
            ("num_tests", serde_json::json!(args.tests)),
            (
                "progress",
                serde_json::json!(format!("{:?}", args.progress).to_lowercase()),
            ),
            ("progress_poll_us", serde_json::json!(args.progress_poll_us)),
            ("efficiency", serde_json::json!(args.efficiency)),
            ("hidden", serde_json::json!(args.hidden)),
            ("max_factor", serde_json::json!(args.max_factor)),
        ]);
        doc.backends = vec![args.backend.name().to_string()];
        doc.method = head
            .lines()
            .skip(1)
            .map(|l| l.trim_start_matches(['#', ' ']).to_string())
            .collect();
        self.run = Some(RunInfo {
            nranks,
            dtype: args.datatype.name(),
            op: args.op.name(),
            root: args.root,
            iters: args.loops.iters as usize,
        });
        self.sink.begin(|| head.lines().map(String::from).collect());
    }

    fn note(&mut self, line: &str) {
        self.sink.note(
            line.to_string(),
            Some(format!("#  {line}")),
            Some(format!("# {line}")),
        );
    }

    fn section(&mut self, name: CollName, progress: Option<bool>, backend: Backend) {
        let p = match progress {
            Some(true) => ", progress on",
            Some(false) => ", progress off",
            None => "",
        };
        let efficiency = self.efficiency;
        self.sink.table_lines(|| {
            let mut head = format!(
                "{:<SIZE_WIDTH$}{:>FIELD_WIDTH$}{:>FIELD_WIDTH$}{:>FIELD_WIDTH$}{:>FIELD_WIDTH$}{:>FIELD_WIDTH$}{:>FIELD_WIDTH$}",
                "# Size", "Overall(us)", "Compute(us)", "Pure Comm.(us)", "Overlap(%)", "Test(us)", "Wait(us)"
            );
            if efficiency {
                head.push_str(&format!(
                    "{:>FIELD_WIDTH$}{:>FIELD_WIDTH$}",
                    "Hidden at(us)", "Hidden x pure"
                ));
            }
            vec![
                "#".to_string(),
                format!("# {} ({}{p})", name.name(), backend.name()),
                head,
            ]
        });
    }

    fn row(&mut self, r: &OverlapRow) {
        let Some(run) = self.run.clone() else {
            return;
        };
        self.sink.result(
            || vec![table_line(r)],
            |machine, _| vec![overlap_record(r, &run, machine)],
        );
    }

    fn finish(self) -> io::Result<()> {
        self.sink.finish(Vec::new)
    }

    /// The run's JSON document so far.
    pub fn document(&self) -> Document {
        self.sink.doc().clone()
    }
}

/// One row of the table: OSU's columns, then the test and wait times and, with `--efficiency`,
/// where the overlap was first reached.
fn table_line(r: &OverlapRow) -> String {
    let mut s = format!(
        "{:<SIZE_WIDTH$}{:>FIELD_WIDTH$.2}{:>FIELD_WIDTH$.2}{:>FIELD_WIDTH$.2}{:>FIELD_WIDTH$.2}{:>FIELD_WIDTH$.2}{:>FIELD_WIDTH$.2}",
        r.size,
        r.timed.overall * 1e6,
        r.compute_only() * 1e6,
        r.pure.0 * 1e6,
        r.overlap,
        r.timed.test * 1e6,
        r.timed.wait * 1e6,
    );
    if let Some(h) = r.hidden_at {
        match h {
            Some((c, f, _)) => {
                s.push_str(&format!("{:>FIELD_WIDTH$.2}{:>FIELD_WIDTH$}", c * 1e6, f))
            }
            None => s.push_str(&format!("{:>FIELD_WIDTH$}{:>FIELD_WIDTH$}", "-", "-")),
        }
    }
    s
}

/// One row of `overlap` as a record: `time_us` (and its min and max over ranks) is the pure
/// communication time, no bandwidth, the overlap fields filled.
fn overlap_record(r: &OverlapRow, run: &RunInfo, machine: &Machine) -> Record {
    let us = |s: f64| rounded(s * 1e6, 3);
    let name = CollName::from_name(r.collective);
    let (hidden_at_us, hidden_factor) = match r.hidden_at {
        Some(Some((c, f, _))) => (Some(us(c)), Some(f)),
        _ => (None, None),
    };
    let mut rec = Record::new(machine, "overlap", r.collective, r.backend);
    rec.variant = Variant::Library.name().to_string();
    rec.placement = "out-of-place".to_string();
    rec.dtype = run.dtype.to_string();
    rec.op = name
        .is_some_and(|n| n.reduces())
        .then(|| run.op.to_string());
    rec.root = name.is_some_and(|n| n.rooted()).then_some(run.root);
    (rec.ranks, rec.size_bytes, rec.count) = (run.nranks, r.size as u64, r.count as u64);
    (rec.time_us, rec.time_min_us, rec.time_max_us) = (us(r.pure.0), us(r.pure.1), us(r.pure.2));
    rec.iterations = run.iters as u64;
    rec.overlap = Overlap {
        progress: r.progress.map(|p| if p { "on" } else { "off" }.to_string()),
        overall_us: Some(us(r.timed.overall)),
        compute_us: Some(us(r.compute_only())),
        pure_us: Some(us(r.pure.0)),
        overlap_pct: Some(rounded(r.overlap, 2)),
        test_us: Some(us(r.timed.test)),
        wait_us: Some(us(r.timed.wait)),
        hidden_at_us,
        hidden_factor,
    };
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_formula_follows_osu() {
        // Nothing hidden: overall = compute + pure.
        assert_eq!(overlap_percent(200.0, 100.0, 0.0, 100.0), 0.0);
        // Everything hidden: overall = compute.
        assert_eq!(overlap_percent(100.0, 100.0, 0.0, 100.0), 100.0);
        // Half hidden: 150 = 100 + 50 of 100.
        assert_eq!(overlap_percent(150.0, 100.0, 0.0, 100.0), 50.0);
        // Tests are overhead: compute 110 of which 10 in tests; overall 130 -> 30 of 100 exposed.
        assert!((overlap_percent(130.0, 110.0, 10.0, 100.0) - 70.0).abs() < 1e-12);
        // Worse than serial clamps to 0; a faster-than-pure overall can exceed 100 (OSU does not clamp).
        assert_eq!(overlap_percent(400.0, 100.0, 0.0, 100.0), 0.0);
        assert!((overlap_percent(95.0, 100.0, 0.0, 50.0) - 110.0).abs() < 1e-12);
        // OSU's own numbers from osu_iallreduce (Open MPI, 2 ranks, 1 KiB): overall 9.33,
        // compute 4.55, pure 4.47 -> 100 - (9.33 - 4.55) / 4.47 x 100 = -6.9 -> 0.
        assert_eq!(overlap_percent(9.33, 4.55, 0.0, 4.47), 0.0);
        assert_eq!(overlap_percent(1.0, 1.0, 0.0, 0.0), 0.0);
    }

    #[test]
    fn progress_choices() {
        assert_eq!(ProgressChoice::Both.settings(), &[false, true]);
        assert_eq!(ProgressChoice::On.settings(), &[true]);
        assert_eq!(ProgressChoice::Off.settings(), &[false]);
    }

    #[test]
    fn rows_become_records_of_the_one_schema() {
        use clap::Parser;
        let r = OverlapRow {
            collective: "allreduce",
            call: "i_all_reduce",
            backend: "mpi",
            progress: Some(true),
            size: 1024,
            count: 256,
            pure: (10e-6, 9e-6, 11e-6),
            timed: Overlapped {
                overall: 12e-6,
                compute: 10e-6,
                test: 0.0,
                init: 1e-6,
                wait: 1e-6,
            },
            overlap: 80.0,
            hidden_at: Some(Some((40e-6, 4, 95.0))),
        };
        assert!((r.compute_only() - 10e-6).abs() < 1e-18);
        let mut out = Output::new(false, Format::Json);
        let cli = crate::cli::Cli::try_parse_from(["collbench", "overlap", "-t", "2"]).unwrap();
        let crate::cli::Command::Overlap(args) = cli.command else {
            panic!("not overlap")
        };
        out.begin(&args, 2, &[]);
        out.row(&r);
        out.row(&OverlapRow {
            collective: "broadcast",
            progress: None,
            hidden_at: Some(None),
            ..r.clone()
        });
        let doc = out.document();
        let text = doc.to_json();
        assert_eq!(Document::from_json(&text).unwrap(), doc);
        let [a, b] = &doc.records[..] else {
            panic!("two records")
        };
        assert_eq!(
            (a.benchmark.as_str(), a.op.as_deref(), a.root),
            ("overlap", Some("sum"), None)
        );
        assert_eq!((b.op.as_deref(), b.root), (None, Some(0)));
        assert_eq!((a.time_us, a.busbw_gbps, a.wrong), (10.0, None, None));
        let o = &a.overlap;
        assert_eq!(o.progress.as_deref(), Some("on"));
        assert_eq!(
            (o.overall_us, o.compute_us, o.pure_us),
            (Some(12.0), Some(10.0), Some(10.0))
        );
        assert_eq!(
            (o.overlap_pct, o.test_us, o.wait_us),
            (Some(80.0), Some(0.0), Some(1.0))
        );
        assert_eq!((o.hidden_at_us, o.hidden_factor), (Some(40.0), Some(4)));
        assert_eq!(
            (b.overlap.progress.clone(), b.overlap.hidden_at_us),
            (None, None)
        );
        assert_eq!(doc.settings["num_tests"], serde_json::json!(2));
        let line = a.csv_line();
        assert!(
            line.ends_with(",on,12.0,10.0,10.0,80.0,0.0,1.0,40.0,4,collbench-results/1"),
            "{line}"
        );
    }

    #[test]
    fn the_table_reads_as_before() {
        use clap::Parser;
        let buf = crate::output::sink::tests::Shared::default();
        let mut out = Output::new(false, Format::Table);
        out.sink = Sink::new(
            Some(Box::new(buf.clone())),
            Format::Table,
            out.sink.doc().clone(),
        );
        let cli = crate::cli::Cli::try_parse_from([
            "collbench",
            "overlap",
            "-t",
            "2",
            "--efficiency",
            "--max-factor",
            "4",
        ])
        .unwrap();
        let crate::cli::Command::Overlap(args) = cli.command else {
            panic!("not overlap")
        };
        out.begin(&args, 2, &[]);
        out.note("progress: on");
        out.section(
            CollName::from_name("allreduce").unwrap(),
            Some(true),
            Backend::Mpi,
        );
        // Seconds: start to wait with the computation, the computation, its tests, start, wait.
        let [overall, compute, test, init, wait] = [12.345e-6, 10e-6, 0.5e-6, 1e-6, 1e-6];
        let timed = Overlapped {
            overall,
            compute,
            test,
            init,
            wait,
        };
        let (collective, call, backend) = ("allreduce", "i_all_reduce", "mpi");
        let r = OverlapRow {
            collective,
            call,
            backend,
            progress: Some(true),
            size: 1024,
            count: 256,
            pure: (10e-6, 9e-6, 11e-6),
            timed,
            overlap: 80.0,
            hidden_at: Some(Some((40e-6, 4, 95.0))),
        };
        out.row(&r);
        out.row(&OverlapRow {
            size: 2048,
            hidden_at: Some(None),
            ..r
        });
        out.finish().unwrap();
        assert_eq!(
            buf.text(),
            include_str!("../../../tests/golden/overlap.txt")
        );
    }
}
