//! Command line: flags follow nccl-tests (`-b -e -f -i -n -w -c -d -o`), checked into a [`Plan`] before any
//! collective runs. Parsing and checking depend only on the arguments, so every rank reaches the same
//! verdict.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use collectives_core::{ReduceOp, RegisterMode};

use crate::measure::backend::{self, Backend, BackendChoice, Baseline};
use crate::measure::dtype::DataType;
use crate::measure::sizes::{LoopArgs, SizeArgs, Step};
use crate::output::record::Format;
use crate::output::report::Columns;

/// Collective benchmarks over the collectives library, with nccl-tests' flags and columns.
#[derive(Debug, Parser)]
#[command(name = "collbench", version, propagate_version = true)]
#[command(
    after_help = "Run under mpirun, e.g. `mpirun -n 4 collbench allreduce -b 8 -e 128M -f 2`; \
                        without mpirun it runs on one rank."
)]
pub struct Cli {
    /// The benchmark.
    #[command(subcommand)]
    pub command: Command,
}

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// All-reduce: out-of-place and in-place time, algorithm and bus bandwidth, correctness.
    #[command(long_about = ALLREDUCE_ABOUT)]
    Allreduce(AllreduceArgs),
    /// Uneven all-gather on NCCL with one rank holding --skew times as much: the library's algorithms
    /// against padding to the largest block and all-gather.
    Allgatherv(crate::cmd::allgatherv::AllgathervArgs),
    /// Point-to-point latency and bandwidth between ranks 0 and 1, as osu_latency and osu_bw measure
    /// them, on host or device buffers.
    P2p(crate::cmd::p2p::P2pArgs),
    /// What this machine and MPI offer: MPI library, CUDA-awareness and how it was decided, NCCL,
    /// the GPUs each rank sees, and which backends will work here. Needs no GPU.
    Doctor,
    /// GPU pack throughput of non-contiguous layouts against copy baselines, and NVRTC compile
    /// times, on one GPU (no MPI needed).
    Pack(crate::cmd::pack::PackArgs),
    /// 3-D halo exchange: fused pack, grouped send/recv, fused unpack, timed per step, against
    /// the same bytes sent contiguously through the same backend.
    Halo(crate::cmd::halo::HaloArgs),
    /// Overlap of non-blocking collectives with computation, as OSU's osu_i* benchmarks measure
    /// it (pure communication, overall, compute, overlap %), with the library's progress engine
    /// off and on; every non-blocking collective of the library.
    Overlap(crate::cmd::overlap::OverlapArgs),
    /// All-gather: every rank gets every rank's block (size: the gathered buffer).
    #[command(long_about = coll_about("allgather"))]
    Allgather(CollArgs),
    /// Reduce-scatter: block r of the reduction to rank r (size: the send buffer).
    #[command(long_about = coll_about("reducescatter"))]
    Reducescatter(CollArgs),
    /// Broadcast from the root (-r).
    #[command(long_about = coll_about("broadcast"))]
    Broadcast(CollArgs),
    /// Reduce to the root (-r).
    #[command(long_about = coll_about("reduce"))]
    Reduce(CollArgs),
    /// All-to-all: block j of rank i to rank j (size: each rank's buffer).
    #[command(long_about = coll_about("alltoall"))]
    Alltoall(CollArgs),
    /// Uneven all-to-all: rank i sends base*(1 + (i + 2j) mod 3) elements to rank j.
    #[command(long_about = coll_about("alltoallv"))]
    Alltoallv(CollArgs),
    /// Gather to the root (-r) (size: the gathered buffer).
    #[command(long_about = coll_about("gather"))]
    Gather(CollArgs),
    /// Uneven gather to the root (-r): rank i holds a share proportional to i + 1.
    #[command(long_about = coll_about("gatherv"))]
    Gatherv(CollArgs),
    /// Scatter from the root (-r) (size: the root's buffer).
    #[command(long_about = coll_about("scatter"))]
    Scatter(CollArgs),
    /// Uneven scatter from the root (-r): rank i gets a share proportional to i + 1.
    #[command(long_about = coll_about("scatterv"))]
    Scatterv(CollArgs),
    /// Ring shift: each rank sends to the next rank and receives from the previous one.
    #[command(long_about = coll_about("sendrecv"))]
    Sendrecv(CollArgs),
    /// Barrier: one row, the time per barrier.
    #[command(long_about = coll_about("barrier"))]
    Barrier(CollArgs),
    /// Redraw the SVG plots of JSON results (`--json` or `--format json`): bandwidth and latency
    /// against size, one plot per collective, one line per backend.
    Plot(crate::output::plot::PlotArgs),
    /// Any collective on the benchmark engine, by name: the same as `collbench NAME`; here
    /// `allgatherv` (whose own subcommand compares NCCL's uneven algorithms with padding) runs the
    /// engine's version, rank i holding a share proportional to i + 1.
    #[command(long_about = coll_about("coll"))]
    Coll {
        /// The collective.
        #[arg(value_enum)]
        name: crate::cmd::coll::CollName,
        /// Its flags.
        #[command(flatten)]
        args: CollArgs,
    },
}

impl Command {
    /// The engine collective this command runs and its flags, for the engine's subcommands.
    pub fn engine(&self) -> Option<(crate::cmd::coll::CollName, &CollArgs)> {
        use crate::cmd::coll::CollName as N;
        Some(match self {
            Command::Allgather(a) => (N::Allgather, a),
            Command::Reducescatter(a) => (N::Reducescatter, a),
            Command::Broadcast(a) => (N::Broadcast, a),
            Command::Reduce(a) => (N::Reduce, a),
            Command::Alltoall(a) => (N::Alltoall, a),
            Command::Alltoallv(a) => (N::Alltoallv, a),
            Command::Gather(a) => (N::Gather, a),
            Command::Gatherv(a) => (N::Gatherv, a),
            Command::Scatter(a) => (N::Scatter, a),
            Command::Scatterv(a) => (N::Scatterv, a),
            Command::Sendrecv(a) => (N::Sendrecv, a),
            Command::Barrier(a) => (N::Barrier, a),
            Command::Coll { name, args } => (*name, args),
            _ => return None,
        })
    }
}

/// The long help of an engine collective: what its columns mean.
fn coll_about(name: &str) -> String {
    let factor = crate::output::report::busbw_factor_text(name);
    let what = if name == "coll" {
        "Any collective on the benchmark engine, by name.".to_string()
    } else {
        format!("{name} on the benchmark engine.")
    };
    format!(
        "{what}

Columns follow nccl-tests: size(B) count type redop root, then time(us) algbw(GB/s) busbw(GB/s)
#wrong for out-of-place and, where the library has the form (allreduce), in-place (N/A otherwise;
broadcast's one form is in place and is reported as out-of-place).

  size   nccl-tests' size: the gathered buffer (allgather, gather), the send buffer
         (reducescatter, alltoall), the root's buffer (scatter), the buffer (the others); each -b..-e
         size is rounded down to whole elements and whole blocks of n ranks; 0 for barrier.
  time   each rank times -n calls after -w warm-up calls and a barrier, each call on its own (wall
         clock for mpi; CUDA events on the communicator's stream for nccl; for cuda-mpi and
         mpi-staged, whose calls complete when they return, the wall clock with the stream drained);
         -a picks the column: 0 rank 0's average, 1 the average over ranks (default), 2 the fastest
         rank's, 3 the slowest rank's. CSV and JSON also carry min and max over ranks and, per
         iteration (the slowest rank's time), min, p50 and p99; the table shows them with --minmax.
  algbw  size / time, in GB/s (1 GB = 1e9 bytes).
  busbw  algbw * {factor} (nccl-tests' PERFORMANCE.md; the table of every collective's factor is
         in docs/collbench.md).
  #wrong with -c 1: one more call after timing, on inputs that differ on every rank and are exact in
         the type; the elements of every rank's output that differ from the answer computed from the
         inputs alone, summed over ranks.

-o applies to allreduce, reduce and reducescatter; -r to broadcast, reduce, gather(v), scatter(v);
-d all and -o all run every combination the backend supports and note the others.
--backend all runs every backend available on every rank (see `collbench doctor`)."
    )
}

/// Flags of the engine's collectives (nccl-tests' flags where they exist).
#[derive(Clone, Debug, Args)]
pub struct CollArgs {
    /// Sizes: nccl-tests' -b, -e, -f, -i.
    #[command(flatten)]
    pub sizes: SizeArgs,
    /// Timed calls and warm-up calls per size: -n, -w.
    #[command(flatten)]
    pub loops: LoopArgs,
    /// Check results (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
    /// Element type: int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16,
    /// complex64, complex128, or all.
    #[arg(short = 'd', long = "datatype", default_value = "float", value_parser = parse_datatype)]
    pub datatype: Choice<DataType>,
    /// Reduce operation of allreduce, reduce and reducescatter: sum, prod, min, max, avg, or all.
    #[arg(short = 'o', long = "op", default_value = "sum", value_parser = parse_op)]
    pub op: Choice<ReduceOp>,
    /// Root rank of rooted collectives.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// The time column: 0 rank 0's, 1 the average over ranks, 2 the fastest rank's, 3 the slowest's.
    #[arg(short = 'a', long = "average", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub average: u8,
    /// Backend: mpi, mpi-staged, cuda-mpi, nccl, or all (every backend available here).
    #[arg(long, default_value = "mpi", value_parser = |s: &str| s.parse::<BackendChoice>())]
    pub backend: BackendChoice,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Checked mode (cross-rank agreement before each call) for the measured calls.
    #[arg(long, value_enum, default_value_t = OnOff::Off)]
    pub checked: OnOff,
    /// Show min and max over ranks and p50 and p99 over iterations in the table.
    #[arg(long)]
    pub minmax: bool,
    /// OSU micro-benchmarks' conventions: their flags (-m MIN:MAX, -i, -x, -f, -c, -d cuda, -T) and
    /// their tables (see docs/collbench.md for the flags that mean something else without it).
    #[arg(long)]
    pub osu: bool,
    /// Write the output to this file instead of standard output.
    #[arg(long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Also write the JSON document of the run to this file, whatever --format is.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Also time every collective through the library's persistent plan (`*_init` once per size,
    /// then start + wait per call): rows of variant `persistent` beside the library's, size by
    /// size. The path is noted (MPIX_*_init on host MPI, a CUDA graph on NCCL, replay elsewhere).
    /// A long flag only: nccl-tests' CUDA-graph flag -G means graphs in OSU.
    #[arg(long)]
    pub persistent: bool,
    /// nccl-tests' -z: 1 times each call to its completion (one operation, then synchronize),
    /// 0 launches calls back to back; without -z, blocking up to 64 KiB and back to back above.
    #[arg(short = 'z', long = "blocking", value_parser = clap::value_parser!(u8).range(0..=1))]
    pub blocking: Option<u8>,
    /// NCCL only: the buffers' registration, one variant per mode, size by size (comma-separated):
    /// none (cudarc's memory, the library's rows), buffer (ncclMemAlloc + ncclCommRegister, rows of
    /// variant `registered`), window (ncclMemAlloc + ncclCommWindowRegister with
    /// NCCL_WIN_COLL_SYMMETRIC, rows of variant `window`), or all. nccl-tests' -R 1 and -R 2.
    #[arg(long, value_delimiter = ',', value_parser = parse_register)]
    pub register: Vec<RegisterChoice>,
}

const ALLREDUCE_ABOUT: &str = "\
All-reduce: out-of-place and in-place time, algorithm and bus bandwidth, correctness.

Columns follow nccl-tests: size(B) count type redop root, then for out-of-place and in-place:
time(us) algbw(GB/s) busbw(GB/s) #wrong.

  time   each rank times -n calls back to back (after -w warm-up calls and a barrier), each
         call on its own, and averages them; the column is the average over ranks (min and max
         over ranks, and min, p50 and p99 over iterations of the slowest rank's time, are in
         CSV/JSON, and in the table with --minmax). Host backends (mpi) time with the wall
         clock; nccl with CUDA events recorded on the communicator's stream between the calls
         (the stream is idle when the first is recorded); cuda-mpi and mpi-staged (device
         buffers over MPI, complete when each call returns) with the wall clock around each
         call with the communicator's stream drained. It runs on the benchmark engine, as every
         collective does (docs/collbench.md).
  algbw  size / time, in GB/s (1 GB = 1e9 bytes).
  busbw  algbw * 2(n-1)/n for n ranks: a ring all-reduce moves 2(n-1)/n times the buffer through
         each rank's link, so busbw is comparable with the hardware's bandwidth and across rank
         counts (nccl-tests' PERFORMANCE.md). It is 0 on one rank.
  #wrong with -c 1: after timing, one more call with rank-dependent small-integer inputs whose
         result is exact; the number of elements that differ from the expected value, summed
         over ranks (N/A with -c 0). One exception: NCCL averages floating-point types (half,
         float, double, bfloat16, complex) by multiplying each input by 1/n before summing, which
         rounds when n is not a power of two; there an element counts as wrong when it differs
         from the exact average by more than n*eps relative (eps: the type's machine epsilon).

Combinations the backend cannot reduce (e.g. half on MPI, avg of integers on MPI, min/max of
complex numbers, prod of complex numbers on NCCL) are an error when asked for by name and no
chosen backend can run them, and skipped with a note otherwise (-d all, -o all, --backend all).

--backend all runs every backend this machine and every rank can run, and notes why the others
are left out (e.g. nccl without a CUDA driver, libnccl or a GPU per rank; cuda-mpi on an MPI that
is not CUDA-aware, with the evidence: see `collbench doctor`), and ends with the fastest backend
per size.";

/// Whether checked mode is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    /// Checked mode on: ranks agree on each call's arguments before it is made.
    On,
    /// Checked mode off.
    Off,
}

/// A `-d` or `-o` choice: one value or all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice<T> {
    /// Every value.
    All,
    /// This one.
    One(T),
}

fn parse_datatype(s: &str) -> Result<Choice<DataType>, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Choice::All);
    }
    DataType::from_str(s, true).map(Choice::One).map_err(|_| {
        let names: Vec<&str> = DataType::ALL.iter().map(|d| d.name()).collect();
        format!(
            "unknown datatype `{s}` (expected {} or all)",
            names.join(", ")
        )
    })
}

fn parse_op(s: &str) -> Result<Choice<ReduceOp>, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Choice::All);
    }
    s.parse().map(Choice::One).map_err(|_: String| {
        format!("unknown reduce operation `{s}` (expected sum, prod, min, max, avg or all)")
    })
}

/// `collbench allreduce` flags: every engine collective's, and the all-reduce's variants.
#[derive(Debug, Args)]
pub struct AllreduceArgs {
    /// The flags every engine collective takes.
    #[command(flatten)]
    pub coll: CollArgs,
    /// Also time the backend's own all-reduce on the same handle and buffers (rows of variant
    /// `raw`), size by size beside the library's.
    #[arg(long, value_enum)]
    pub baseline: Option<Baseline>,
    /// Also time every call with checked mode on (rows of variant `checked`), size by size beside
    /// the library's, and report the difference.
    #[arg(long)]
    pub checked_cost: bool,
}

/// An all-reduce run, checked and expanded.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Sizes in bytes, before rounding to whole elements.
    pub sizes: Vec<usize>,
    /// `-b`, `-e` and the step, for the header.
    pub min_bytes: usize,
    /// `-e`.
    pub max_bytes: usize,
    /// The step.
    pub step: Step,
    /// Types to run.
    pub datatypes: Vec<DataType>,
    /// Operations to run.
    pub ops: Vec<ReduceOp>,
    /// Whether one type and one operation were asked for by name (then an unsupported pair is an error,
    /// not a skip).
    pub single_pair: bool,
    /// Backends to run.
    pub backends: Vec<Backend>,
    /// Whether `--backend all` chose them (then a backend that fails to start is skipped with a note).
    pub all_backends: bool,
    /// Backends left out, with the reason.
    pub unavailable: Vec<backend::LeftOut>,
    /// Timed calls per size.
    pub iters: usize,
    /// Warm-up calls per size.
    pub warmup_iters: usize,
    /// `-c 1`.
    pub check: bool,
    /// Checked mode of the measured communicator.
    pub checked: bool,
    /// Output format.
    pub format: Format,
    /// Optional columns.
    pub columns: Columns,
    /// Also time the raw baseline (`--baseline raw`).
    pub baseline: bool,
    /// Also time the calls with checked mode on (`--checked-cost`).
    pub checked_cost: bool,
    /// Where the output goes (`--output`); standard output when `None`.
    pub output: Option<PathBuf>,
    /// Where the JSON document also goes (`--json`).
    pub json: Option<PathBuf>,
    /// `-z`: blocking timing (`Some(true)`), back to back (`Some(false)`), or by size (`None`).
    pub blocking: Option<bool>,
    /// `--register`: the registration modes of NCCL's buffers, one variant each, in order
    /// (`[None]` without the flag).
    pub register: Vec<RegisterMode>,
    /// Also time the persistent plans (`--persistent`).
    pub persistent: bool,
}

impl AllreduceArgs {
    /// Check the flags and expand them into a [`Plan`]; `unavailable` says why a backend cannot run
    /// (see [`backend::resolve`]; every rank must give the same verdicts).
    ///
    /// # Errors
    /// Bad sizes or steps; `--checked-cost` with `--checked on`; a backend not available here.
    pub fn plan(&self, unavailable: impl Fn(Backend) -> Option<String>) -> Result<Plan, String> {
        if self.checked_cost && self.coll.checked == OnOff::On {
            return Err(
                "--checked-cost measures checked mode off against on; leave --checked off"
                    .to_string(),
            );
        }
        self.coll
            .expand(self.coll.op, self.baseline, self.checked_cost, unavailable)
    }
}

impl CollArgs {
    /// The same run as [`AllreduceArgs`] plans it (sizes, types, operations, backends), for
    /// collective `name` on `nranks` ranks.
    ///
    /// # Errors
    /// As [`AllreduceArgs::plan`]; a root outside the ranks.
    pub fn plan(
        &self,
        name: crate::cmd::coll::CollName,
        nranks: usize,
        unavailable: impl Fn(Backend) -> Option<String>,
    ) -> Result<Plan, String> {
        if self.root >= nranks.max(1) {
            return Err(format!("root {} is not a rank of {nranks}", self.root));
        }
        let op = if name.reduces() {
            self.op
        } else {
            Choice::One(ReduceOp::Sum)
        };
        let mut plan = self.expand(op, None, false, unavailable)?;
        plan.columns.iter_stats = true;
        Ok(plan)
    }

    /// The [`Plan`] of these flags with reduce operation `op` and the all-reduce's variants.
    fn expand(
        &self,
        op: Choice<ReduceOp>,
        baseline: Option<Baseline>,
        checked_cost: bool,
        unavailable: impl Fn(Backend) -> Option<String>,
    ) -> Result<Plan, String> {
        let step = self.sizes.step();
        let sizes = self.sizes.sequence()?;
        let (backends, unavailable) = backend::resolve(self.backend, unavailable)?;
        let datatypes = match self.datatype {
            Choice::All => DataType::ALL.to_vec(),
            Choice::One(d) => vec![d],
        };
        let ops = match op {
            Choice::All => ReduceOp::ALL.to_vec(),
            Choice::One(o) => vec![o],
        };
        Ok(Plan {
            sizes,
            min_bytes: self.sizes.min_bytes,
            max_bytes: self.sizes.max_bytes,
            step,
            single_pair: matches!((self.datatype, op), (Choice::One(_), Choice::One(_))),
            datatypes,
            ops,
            backends,
            all_backends: self.backend == BackendChoice::All,
            unavailable,
            iters: self.loops.iters as usize,
            warmup_iters: self.loops.warmup_iters as usize,
            check: self.check == 1,
            checked: self.checked == OnOff::On,
            format: if self.osu { Format::Osu } else { self.format },
            columns: Columns {
                minmax: self.minmax,
                iter_stats: false,
                variants: baseline.is_some()
                    || checked_cost
                    || self.persistent
                    || register_modes(&self.register) != [RegisterMode::None],
            },
            baseline: baseline == Some(Baseline::Raw),
            checked_cost,
            output: self.output.clone(),
            json: self.json.clone(),
            blocking: self.blocking.map(|z| z == 1),
            register: register_modes(&self.register),
            persistent: self.persistent,
        })
    }
}

/// One value of `--register`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterChoice {
    /// One mode.
    One(RegisterMode),
    /// Every mode (`all`).
    All,
}

/// Parse one value of `--register`: `none`, `buffer`, `window` or `all`.
///
/// # Errors
/// Any other word.
pub fn parse_register(s: &str) -> Result<RegisterChoice, String> {
    match s.trim() {
        "all" => Ok(RegisterChoice::All),
        word => RegisterMode::ALL
            .into_iter()
            .find(|m| m.name() == word)
            .map(RegisterChoice::One)
            .ok_or_else(|| format!("`{word}`: expected none, buffer, window or all")),
    }
}

/// The modes `--register` names, each once, in the order none, buffer, window; `[None]` without it.
pub fn register_modes(choices: &[RegisterChoice]) -> Vec<RegisterMode> {
    if choices.is_empty() {
        return vec![RegisterMode::None];
    }
    RegisterMode::ALL
        .into_iter()
        .filter(|m| {
            choices
                .iter()
                .any(|c| *c == RegisterChoice::All || *c == RegisterChoice::One(*m))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::measure::backend::host_only;

    fn parse(args: &[&str]) -> Result<AllreduceArgs, clap::Error> {
        let mut v = vec!["collbench", "allreduce"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).map(|c| match c.command {
            Command::Allreduce(a) => a,
            other => panic!("parsed as another subcommand: {other:?}"),
        })
    }

    #[test]
    fn register_modes_become_variants_in_order() {
        let p = parse(&[]).unwrap().plan(host_only).unwrap();
        assert_eq!(p.register, [RegisterMode::None]);
        assert!(!p.columns.variants);
        let p = parse(&["--register", "window,none", "--register", "buffer"])
            .unwrap()
            .plan(host_only)
            .unwrap();
        assert_eq!(
            p.register,
            [
                RegisterMode::None,
                RegisterMode::Buffer,
                RegisterMode::Window
            ]
        );
        assert!(p.columns.variants);
        let p = parse(&["--register", "all"])
            .unwrap()
            .plan(host_only)
            .unwrap();
        assert_eq!(p.register, RegisterMode::ALL);
        let p = parse(&["--register", "window"])
            .unwrap()
            .plan(host_only)
            .unwrap();
        assert_eq!(p.register, [RegisterMode::Window]);
        assert!(parse(&["--register", "symmetric"]).is_err());
    }

    #[test]
    fn defaults_follow_nccl_tests_and_the_design() {
        let p = parse(&[]).unwrap().plan(host_only).unwrap();
        assert_eq!(p.sizes.first(), Some(&8));
        assert_eq!(p.sizes.last(), Some(&(64 << 20)));
        assert_eq!(p.step, Step::Factor(2));
        assert_eq!(
            (p.iters, p.warmup_iters, p.check, p.checked),
            (20, 5, true, false)
        );
        assert_eq!(p.datatypes, [DataType::Float]);
        assert_eq!(p.ops, [ReduceOp::Sum]);
        assert!(p.single_pair);
        assert_eq!(p.backends, [Backend::Mpi]);
        assert_eq!(p.format, Format::Table);
        assert_eq!(p.columns, Columns::default());
    }

    #[test]
    fn nccl_tests_flags() {
        let a = parse(&[
            "-b", "1K", "-e", "1M", "-f", "4", "-n", "7", "-w", "2", "-c", "0", "-d", "double",
            "-o", "max",
        ])
        .unwrap();
        let p = a.plan(host_only).unwrap();
        assert_eq!(p.sizes, [1024, 4096, 16384, 65536, 262144, 1 << 20]);
        assert_eq!((p.iters, p.warmup_iters, p.check), (7, 2, false));
        assert_eq!(p.datatypes, [DataType::Double]);
        assert_eq!(p.ops, [ReduceOp::Max]);
        let p = parse(&[
            "--minbytes",
            "8",
            "--maxbytes",
            "32",
            "--stepbytes",
            "8",
            "--warmup_iters",
            "0",
        ])
        .unwrap()
        .plan(host_only)
        .unwrap();
        assert_eq!(p.sizes, [8, 16, 24, 32]);
        assert_eq!(p.warmup_iters, 0);
    }

    #[test]
    fn all_and_extensions() {
        let p = parse(&["-d", "all", "-o", "all", "--backend", "all"])
            .unwrap()
            .plan(host_only)
            .unwrap();
        assert_eq!(p.datatypes.len(), 12);
        assert_eq!(p.ops.len(), 5);
        assert!(!p.single_pair);
        assert_eq!(p.backends, [Backend::Mpi]);
        assert_eq!(p.unavailable.len(), 3);
        let p = parse(&["-d", "complex128", "-o", "prod"])
            .unwrap()
            .plan(host_only)
            .unwrap();
        assert_eq!(p.datatypes, [DataType::Complex128]);
    }

    #[test]
    fn all_backends_follow_the_machine() {
        let gpu = |b: Backend| (b != Backend::Mpi && b != Backend::Nccl).then(|| "no".to_string());
        let p = parse(&["--backend", "all"]).unwrap().plan(gpu).unwrap();
        assert_eq!(p.backends, [Backend::Mpi, Backend::Nccl]);
        assert!(p.all_backends);
        let p = parse(&["--backend", "nccl", "--baseline", "raw"])
            .unwrap()
            .plan(gpu)
            .unwrap();
        assert_eq!(p.backends, [Backend::Nccl]);
        assert!(!p.all_backends && p.baseline && p.columns.variants);
        let p = parse(&["--backend", "all"])
            .unwrap()
            .plan(host_only)
            .unwrap();
        assert_eq!(p.backends, [Backend::Mpi]);
        let nccl = p.unavailable.iter().find(|(b, _)| *b == Backend::Nccl);
        assert!(nccl.unwrap().1.contains("no CUDA driver"));
    }

    #[test]
    fn hidden_modes() {
        let p = parse(&["--baseline", "raw", "--checked-cost", "--minmax"])
            .unwrap()
            .plan(host_only)
            .unwrap();
        assert_eq!(
            p.columns,
            Columns {
                minmax: true,
                iter_stats: false,
                variants: true,
            }
        );
        assert!(p.baseline && p.checked_cost);
        assert!(parse(&["--checked-cost", "--checked", "on"])
            .unwrap()
            .plan(host_only)
            .is_err());
        assert!(parse(&["--baseline", "fast"]).is_err());
    }

    #[test]
    fn rejects_bad_flags() {
        assert!(parse(&["-b", "1X"]).is_err());
        assert!(parse(&["-d", "float128"]).is_err());
        assert!(parse(&["-o", "mean"]).is_err());
        assert!(parse(&["-c", "2"]).is_err());
        assert!(parse(&["-n", "0"]).is_err());
        assert!(parse(&["-f", "2", "-i", "8"]).is_err());
        assert!(parse(&["--backend", "gloo"]).is_err());
        assert!(parse(&["-b", "64", "-e", "8"])
            .unwrap()
            .plan(host_only)
            .is_err());
        assert!(parse(&["-f", "1"]).unwrap().plan(host_only).is_err());
        assert!(parse(&["--backend", "nccl"])
            .unwrap()
            .plan(host_only)
            .unwrap_err()
            .contains("backend nccl is not available: no CUDA driver"));
    }

    #[test]
    fn help_renders() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("allreduce")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("2(n-1)/n"));
        assert!(help.contains("--minbytes"));
        assert!(help.contains("--checked-cost"));
        assert!(help.contains("--baseline"));
        assert!(help.contains("--osu"));
        assert!(help.contains("--persistent"));
    }

    fn parse_coll(args: &[&str]) -> Result<(crate::cmd::coll::CollName, CollArgs), clap::Error> {
        let mut v = vec!["collbench"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).map(|c| {
            let (n, a) = c.command.engine().expect("an engine subcommand");
            let a = a.clone();
            (n, a)
        })
    }

    #[test]
    fn every_collective_is_a_subcommand_with_nccl_tests_flags() {
        use crate::cmd::coll::CollName;
        for &name in CollName::ALL {
            let args: Vec<&str> = match name {
                // Their own subcommands keep their benchmarks; `coll NAME` reaches the engine's.
                CollName::Allreduce | CollName::Allgatherv => vec!["coll", name.name()],
                _ => vec![name.name()],
            };
            let (n, a) = parse_coll(&args).unwrap();
            assert_eq!(n, name);
            let p = a.plan(n, 4, host_only).unwrap();
            assert_eq!((p.iters, p.warmup_iters, p.check), (20, 5, true));
            assert!(p.columns.iter_stats);
        }
        let (n, a) = parse_coll(&[
            "gather",
            "-b",
            "1K",
            "-e",
            "4K",
            "-f",
            "2",
            "-n",
            "3",
            "-w",
            "0",
            "-c",
            "0",
            "-d",
            "int8",
            "-r",
            "2",
            "-a",
            "3",
            "--backend",
            "all",
            "--minmax",
        ])
        .unwrap();
        let p = a.plan(n, 3, host_only).unwrap();
        assert_eq!(p.sizes, [1024, 2048, 4096]);
        assert_eq!((p.iters, p.warmup_iters, p.check), (3, 0, false));
        assert_eq!(p.datatypes, [DataType::Int8]);
        assert_eq!((a.root, a.average), (2, 3));
        assert_eq!(p.backends, [Backend::Mpi]);
        assert!(p.columns.minmax);
        // -o is ignored where nothing is reduced, and kept where something is.
        let (n, a) = parse_coll(&["alltoall", "-o", "all"]).unwrap();
        assert_eq!(a.plan(n, 2, host_only).unwrap().ops, [ReduceOp::Sum]);
        let (n, a) = parse_coll(&["reducescatter", "-o", "min"]).unwrap();
        assert_eq!(a.plan(n, 2, host_only).unwrap().ops, [ReduceOp::Min]);
        // A root outside the ranks, bad numbers.
        let (n, a) = parse_coll(&["broadcast", "-r", "4"]).unwrap();
        assert!(a.plan(n, 4, host_only).unwrap_err().contains("root 4"));
        assert!(parse_coll(&["scatter", "-a", "4"]).is_err());
        assert!(parse_coll(&["barrier", "-n", "0"]).is_err());
        assert!(parse_coll(&["coll", "allsum"]).is_err());
        let (n, a) = parse_coll(&["sendrecv", "--backend", "nccl"]).unwrap();
        assert!(a.plan(n, 2, host_only).is_err());
    }

    #[test]
    fn engine_help_names_the_factor() {
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("reducescatter")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("busbw  algbw * (n-1)/n"), "{help}");
        assert!(help.contains("--root"));
        let help = Cli::command()
            .find_subcommand_mut("broadcast")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("busbw  algbw * 1 "));
    }

    #[test]
    fn blocking_flag_follows_nccl_tests() {
        use crate::measure::engine::{Settings, BLOCKING_AUTO_MAX};
        assert_eq!(parse(&[]).unwrap().plan(host_only).unwrap().blocking, None);
        assert_eq!(
            parse(&["-z", "1"])
                .unwrap()
                .plan(host_only)
                .unwrap()
                .blocking,
            Some(true)
        );
        let (n, a) = parse_coll(&["alltoall", "-z", "0"]).unwrap();
        assert_eq!(a.plan(n, 2, host_only).unwrap().blocking, Some(false));
        assert!(parse(&["-z", "2"]).is_err());
        let mut s = Settings {
            iters: 1,
            warmup_iters: 0,
            check: false,
            root: 0,
            average: 1,
            blocking: None,
            barrier_each: false,
        };
        assert!(s.blocking_at(8) && s.blocking_at(BLOCKING_AUTO_MAX));
        assert!(!s.blocking_at(BLOCKING_AUTO_MAX + 1));
        s.blocking = Some(true);
        assert!(s.blocking_at(1 << 30));
        s.blocking = Some(false);
        assert!(!s.blocking_at(8));
    }

    #[test]
    fn persistent_is_a_variant_of_every_collective() {
        let p = parse(&["--persistent"]).unwrap().plan(host_only).unwrap();
        assert!(p.persistent && p.columns.variants);
        assert!(!parse(&[]).unwrap().plan(host_only).unwrap().persistent);
        let (n, a) = parse_coll(&["gatherv", "--persistent", "-z", "1"]).unwrap();
        let p = a.plan(n, 3, host_only).unwrap();
        assert!(p.persistent && p.columns.variants && p.columns.iter_stats);
        let (n, a) = parse_coll(&["coll", "barrier", "--persistent"]).unwrap();
        assert!(a.plan(n, 1, host_only).unwrap().persistent);
        // -G is not ours: OSU's -G draws graphs, nccl-tests' -G launches CUDA graphs.
        assert!(parse(&["-G", "1"]).is_err());
        // With OSU's flags too.
        let argv = crate::output::osu::translate(
            [
                "collbench",
                "allreduce",
                "--osu",
                "--persistent",
                "-m",
                "8:64",
            ]
            .map(String::from)
            .to_vec(),
        )
        .unwrap();
        let Command::Allreduce(a) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not allreduce")
        };
        let p = a.plan(host_only).unwrap();
        assert!(p.persistent && p.format == Format::Osu);
        assert_eq!((p.sizes[0], *p.sizes.last().unwrap()), (8, 64));
    }

    #[test]
    fn overlap_flags() {
        let c = Cli::try_parse_from([
            "collbench",
            "overlap",
            "allreduce",
            "barrier",
            "-b",
            "1K",
            "-e",
            "4M",
            "-t",
            "3",
            "--progress",
            "on",
            "--efficiency",
        ])
        .unwrap();
        let Command::Overlap(a) = c.command else {
            panic!("not overlap")
        };
        assert_eq!(
            a.names(),
            [
                crate::cmd::coll::CollName::Allreduce,
                crate::cmd::coll::CollName::Barrier
            ]
        );
        assert_eq!((a.tests, a.efficiency), (3, true));
        assert!(a.needs_thread_multiple());
        assert_eq!(a.sizes().unwrap().len(), 13);
        let c = Cli::try_parse_from(["collbench", "overlap", "--progress", "off"]).unwrap();
        let Command::Overlap(a) = c.command else {
            panic!("not overlap")
        };
        assert_eq!(a.names().len(), crate::cmd::coll::CollName::ALL.len());
        assert!(!a.needs_thread_multiple());
        assert!(Cli::try_parse_from(["collbench", "overlap", "--backend", "cuda-mpi"]).is_err());
    }

    #[test]
    fn the_command_line_reaches_doctor() {
        let c = Cli::try_parse_from(["collbench", "doctor"]).unwrap();
        assert!(matches!(c.command, Command::Doctor));
    }
}
