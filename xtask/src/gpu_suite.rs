//! The GPU suite: every test that needs a GPU, as one plan of steps (program, arguments,
//! environment, launcher, rank count, time limit) run the same way by `cargo xtask test` on a
//! machine with a GPU and by `xtask gpu-suite --staged DIR` on a GPU machine without a Rust
//! toolchain (see `gpu_stage`).
//!
//! The plan, for G GPUs:
//! 1. every test binary with ignored tests (the ones that need a CUDA device or libnccl) with
//!    `--ignored` (the others ran in `cargo test` already);
//! 2. the `nccl_*` multi-rank test binaries under `mpirun -n K`, K = 1..=G (`nccl_halo` on 2 or
//!    more ranks with `HALO_EXPECT_IPC=1`, `nccl_one_shot` with `ONE_SHOT_EXPECT_READY=1`, where
//!    every pair of GPUs has peer access);
//! 3. the `cuda_mpi_*` binaries under `mpirun -n K`, K = 1..=G, with
//!    `COLLECTIVES_EXPECT_CUDA_AWARE=0`, and under the CUDA-aware `mpirun` (`XTASK_CUDA_MPIRUN`)
//!    with `=1`; then the same two on 2 ranks sharing GPU 0 (`CUDA_VISIBLE_DEVICES=0`);
//! 4. the GPU examples (`*nccl*`, `*cuda*`, `*gpu*`) under `mpirun -n K`, K = 1..=G;
//! 5. `collbench p2p` with its byte check on 2 ranks sharing GPU 0: `mpi-staged` under `mpirun`,
//!    `cuda-mpi` and `mpi-staged` under the CUDA-aware `mpirun`;
//! 6. with `compute-sanitizer`: `memcheck`, `racecheck` and `synccheck` over `gpu_pack`, over
//!    `nccl_collectives` on 1 rank and, with 2 GPUs or more that reach each other, over the
//!    correctness cases of `nccl_one_shot` on 2 ranks (memcheck on the one-shot kernel only);
//! 7. the MPI interposer's C checks on device buffers (`xtask interpose --device`, see
//!    [`crate::interpose`]) on 2 ranks, and 4 with 4 GPUs: one summary line of its own.
//!
//! Counting: a libtest binary by its `test result:` lines, a multi-rank binary by its
//! `mpi-tests:` line, an example or a `collbench` check by its exit status, a sanitizer run as one
//! check that passes when the program passes and the sanitizer reports no error (`ERROR SUMMARY:
//! 0 errors`, or racecheck's `RACECHECK SUMMARY` with 0 errors and 0 warnings). A step that hits
//! its time limit, crashes, or runs no test at all (a binary that did not see the GPU) fails.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use serde_json::{json, Value};

use crate::artifacts::{self, Artifact};
use crate::binaries::{needs_gpu, ROOT_PACKAGE};
use crate::gpu::{self, CudaMpirun, Gpus};
use crate::mpirun::{self, shell_quote, Launch};
use crate::results::{failed_names, parse_mpi_tests, parse_result_line};
use crate::summary::{self, Tally};
use crate::{cargo, exec, host, jobs, workspace_root};

/// The benchmark binary whose point-to-point check runs on 2 ranks sharing GPU 0.
pub const COLLBENCH: &str = "collbench";

/// `collbench` arguments of that check: latency and bandwidth from 1 B to 4 MiB, bytes checked,
/// few iterations (it is a check, not a measurement).
pub const P2P_CHECK_ARGS: [&str; 11] = [
    "p2p", "-b", "1", "-e", "4M", "-n", "20", "-w", "5", "-c", "1",
];

/// Multi-rank test binaries of the root package that need GPUs and NCCL.
pub const NCCL_TEST_PREFIX: &str = "nccl_";

/// Multi-rank test binaries of the root package for the MPI device backends.
pub const CUDA_MPI_TEST_PREFIX: &str = "cuda_mpi_";

/// The halo test, which checks CUDA IPC use on 2 or more ranks when told to.
pub const HALO_TEST: &str = "nccl_halo";

/// The one-shot all-reduce test, which fails where the path is not offered when told to.
pub const ONE_SHOT_TEST: &str = "nccl_one_shot";

/// The libtest binary that compute-sanitizer runs.
pub const SANITIZED_LIBTEST: &str = "gpu_pack";

/// The multi-rank binary that compute-sanitizer runs on 1 rank.
pub const SANITIZED_MPI_TEST: &str = "nccl_collectives";

/// The cases of [`ONE_SHOT_TEST`] that compute-sanitizer runs on 2 ranks (`MPI_TESTS_FILTER`):
/// every type, operation and size the path takes, and the library's all-reduce through it.
pub const SANITIZED_ONE_SHOT_CASES: &str = "one_shot_floats,one_shot_integers,\
one_shot_complex_as_lanes,one_shot_inside_the_library_all_reduce";

/// The one-shot all-reduce's kernel, the one kernel memcheck checks in [`ONE_SHOT_TEST`].
pub const ONE_SHOT_KERNEL: &str = "one_shot_all_reduce";

/// The compute-sanitizer tools, in the order they run.
pub const SANITIZER_TOOLS: [&str; 3] = ["memcheck", "racecheck", "synccheck"];

/// `DTP_POOL_LIMIT` for sanitizer runs of `gpu_pack`: the first layouts of its pool only, since
/// a sanitizer slows kernels by orders of magnitude.
pub const SANITIZER_POOL_LIMIT: &str = "60";

/// Wall-clock limit of one sanitizer run when `XTASK_SANITIZER_TIMEOUT` is not set.
pub const DEFAULT_SANITIZER_TIMEOUT: Duration = Duration::from_secs(900);

/// The staged suite's list of binaries, in the staging directory.
pub const MANIFEST: &str = "suite.json";

/// What a binary is to the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryKind {
    /// A libtest binary with ignored tests: run with `--ignored`.
    Libtest,
    /// A multi-rank test binary (`harness = false`) that prints `mpi-tests: N passed, M failed`.
    MpiTest,
    /// A GPU example: passes when it exits 0.
    Example,
    /// `collbench`: its point-to-point check on 2 ranks sharing GPU 0 passes when it exits 0 (it
    /// exits 1 when a byte arrived wrong).
    Benchmark,
}

impl BinaryKind {
    /// The name used in the staged manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryKind::Libtest => "libtest",
            BinaryKind::MpiTest => "mpi-test",
            BinaryKind::Example => "example",
            BinaryKind::Benchmark => "benchmark",
        }
    }

    /// The kind a manifest name stands for.
    pub fn parse(name: &str) -> Option<Self> {
        [
            BinaryKind::Libtest,
            BinaryKind::MpiTest,
            BinaryKind::Example,
            BinaryKind::Benchmark,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
    }
}

/// One binary the suite runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteBinary {
    /// The target name (`gpu_pack`, `nccl_halo`, `06_nccl_all_reduce`).
    pub name: String,
    /// How it is run and counted.
    pub kind: BinaryKind,
    /// The executable.
    pub path: PathBuf,
}

/// How a step is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// As a plain process.
    Direct,
    /// Under `mpirun -n ranks`: the plain `mpirun` on `PATH`, or the CUDA-aware one.
    Mpirun {
        /// The rank count.
        ranks: u32,
        /// Whether through the CUDA-aware `mpirun`.
        cuda_aware: bool,
    },
}

/// How a step's output is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// libtest's `test result:` lines.
    Libtest,
    /// The `mpi-tests: N passed, M failed` line.
    MpiTests,
    /// One check: exit status 0.
    Exit,
}

/// The groups the summary has one line for, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Ignored tests of libtest binaries.
    Tests,
    /// `nccl_*` and `cuda_mpi_*` under `mpirun`.
    MpiRuns,
    /// GPU examples under `mpirun`.
    Examples,
    /// `collbench p2p` with its byte check, 2 ranks sharing GPU 0.
    Benchmarks,
    /// compute-sanitizer runs.
    Sanitizer,
}

impl Group {
    /// Every group, in order.
    pub const ALL: [Group; 5] = [
        Group::Tests,
        Group::MpiRuns,
        Group::Examples,
        Group::Benchmarks,
        Group::Sanitizer,
    ];

    /// The group's line in the summary.
    pub fn label(self) -> &'static str {
        match self {
            Group::Tests => "GPU tests (--ignored)",
            Group::MpiRuns => "GPU multi-rank tests (nccl_*, cuda_mpi_*)",
            Group::Examples => "GPU examples",
            Group::Benchmarks => "collbench p2p, 2 ranks sharing GPU 0 (bytes checked)",
            Group::Sanitizer => "compute-sanitizer (memcheck, racecheck, synccheck)",
        }
    }
}

/// One run of the suite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The summary line it counts towards.
    pub group: Group,
    /// A short name for headers and failures: launcher, binary, what is special.
    pub what: String,
    /// How it is started.
    pub launcher: Launcher,
    /// The compute-sanitizer tool it runs under, if any.
    pub sanitizer: Option<&'static str>,
    /// The binary.
    pub program: PathBuf,
    /// The binary's arguments.
    pub args: Vec<String>,
    /// Variables set for it (and passed to ranks with `-x`).
    pub env: Vec<(String, String)>,
    /// How its output is counted.
    pub counting: Counting,
    /// Its wall-clock limit.
    pub limit: Duration,
}

/// What the machine offers the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// GPUs to use (at least 1 for a plan with steps).
    pub gpus: u32,
    /// Whether we run as root (Open MPI needs `--allow-run-as-root`).
    pub as_root: bool,
    /// The CUDA-aware `mpirun`, if any.
    pub cuda_mpirun: Option<CudaMpirun>,
    /// `compute-sanitizer`, if any.
    pub sanitizer: Option<PathBuf>,
    /// Whether `nccl_halo` on 2 or more ranks runs with `HALO_EXPECT_IPC=1`.
    pub halo_ipc: bool,
    /// Limit of one step.
    pub limit: Duration,
    /// Limit of one sanitizer step.
    pub sanitizer_limit: Duration,
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The steps for `binaries` on machine `m`, in the order the module documentation gives.
pub fn plan(binaries: &[SuiteBinary], m: &Machine) -> Vec<Step> {
    let mut sorted: Vec<&SuiteBinary> = binaries.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let of_kind = |kind| sorted.iter().copied().filter(move |b| b.kind == kind);
    let mut steps = Vec::new();
    if m.gpus == 0 {
        return steps;
    }
    let mpirun_step = |group, b: &SuiteBinary, ranks, cuda_aware, env: Vec<(String, String)>| {
        let counting = if matches!(b.kind, BinaryKind::Example | BinaryKind::Benchmark) {
            Counting::Exit
        } else {
            Counting::MpiTests
        };
        Step {
            group,
            what: describe(b, Launcher::Mpirun { ranks, cuda_aware }, None, &env),
            launcher: Launcher::Mpirun { ranks, cuda_aware },
            sanitizer: None,
            program: b.path.clone(),
            args: Vec::new(),
            env,
            counting,
            limit: m.limit,
        }
    };

    for b in of_kind(BinaryKind::Libtest) {
        let args = vec!["--ignored".to_owned()];
        steps.push(Step {
            group: Group::Tests,
            what: format!("{} --ignored", b.name),
            launcher: Launcher::Direct,
            sanitizer: None,
            program: b.path.clone(),
            args,
            env: Vec::new(),
            counting: Counting::Libtest,
            limit: m.limit,
        });
    }

    for b in of_kind(BinaryKind::MpiTest) {
        if b.name.starts_with(NCCL_TEST_PREFIX) {
            for k in 1..=m.gpus {
                // Where every pair of GPUs has peer access, the IPC paths must be taken.
                let e = if b.name == HALO_TEST && k >= 2 && m.halo_ipc {
                    env(&[("HALO_EXPECT_IPC", "1")])
                } else if b.name == ONE_SHOT_TEST && m.halo_ipc {
                    env(&[("ONE_SHOT_EXPECT_READY", "1")])
                } else {
                    Vec::new()
                };
                steps.push(mpirun_step(Group::MpiRuns, b, k, false, e));
            }
        } else if b.name.starts_with(CUDA_MPI_TEST_PREFIX) {
            let plain = env(&[("COLLECTIVES_EXPECT_CUDA_AWARE", "0")]);
            let aware = env(&[("COLLECTIVES_EXPECT_CUDA_AWARE", "1")]);
            for k in 1..=m.gpus {
                steps.push(mpirun_step(Group::MpiRuns, b, k, false, plain.clone()));
                if m.cuda_mpirun.is_some() {
                    steps.push(mpirun_step(Group::MpiRuns, b, k, true, aware.clone()));
                }
            }
            let shared = |mut e: Vec<(String, String)>| {
                e.insert(0, ("CUDA_VISIBLE_DEVICES".to_owned(), "0".to_owned()));
                e
            };
            steps.push(mpirun_step(Group::MpiRuns, b, 2, false, shared(plain)));
            if m.cuda_mpirun.is_some() {
                steps.push(mpirun_step(Group::MpiRuns, b, 2, true, shared(aware)));
            }
        }
    }

    for b in of_kind(BinaryKind::Example) {
        for k in 1..=m.gpus {
            steps.push(mpirun_step(Group::Examples, b, k, false, Vec::new()));
        }
    }

    // Two ranks sharing one GPU, the set-up where asynchronous CUDA work and MPI's reads raced:
    // every byte of collbench's point-to-point check must arrive right, on both MPI device
    // backends and both MPIs (cuda-mpi only under the CUDA-aware one).
    for b in of_kind(BinaryKind::Benchmark) {
        let mut runs = vec![(false, "mpi-staged")];
        if m.cuda_mpirun.is_some() {
            runs.extend([(true, "cuda-mpi"), (true, "mpi-staged")]);
        }
        for (cuda_aware, backend) in runs {
            let e = env(&[("CUDA_VISIBLE_DEVICES", "0")]);
            let mut step = mpirun_step(Group::Benchmarks, b, 2, cuda_aware, e);
            step.args = P2P_CHECK_ARGS.map(str::to_owned).to_vec();
            step.args
                .extend(["--backend".to_owned(), backend.to_owned()]);
            step.what = format!("{} p2p --backend {backend}", step.what);
            steps.push(step);
        }
    }

    if m.sanitizer.is_some() {
        for tool in SANITIZER_TOOLS {
            for b in of_kind(BinaryKind::Libtest).filter(|b| b.name == SANITIZED_LIBTEST) {
                let e = env(&[("DTP_POOL_LIMIT", SANITIZER_POOL_LIMIT)]);
                steps.push(Step {
                    group: Group::Sanitizer,
                    what: format!("compute-sanitizer {tool} {} --ignored", b.name),
                    launcher: Launcher::Direct,
                    sanitizer: Some(tool),
                    program: b.path.clone(),
                    args: ["--ignored", "--test-threads", "4"]
                        .map(str::to_owned)
                        .to_vec(),
                    env: e,
                    counting: Counting::Libtest,
                    limit: m.sanitizer_limit,
                });
            }
            // A multi-rank test under `tool` on `ranks` ranks, with `e` set.
            let sanitized = |b: &SuiteBinary, ranks, e: Vec<(String, String)>| {
                let launcher = Launcher::Mpirun {
                    ranks,
                    cuda_aware: false,
                };
                Step {
                    group: Group::Sanitizer,
                    what: describe(b, launcher, Some(tool), &e),
                    launcher,
                    sanitizer: Some(tool),
                    program: b.path.clone(),
                    args: Vec::new(),
                    env: e,
                    counting: Counting::MpiTests,
                    limit: m.sanitizer_limit,
                }
            };
            for b in of_kind(BinaryKind::MpiTest).filter(|b| b.name == SANITIZED_MPI_TEST) {
                steps.push(sanitized(b, 1, Vec::new()));
            }
            // The one-shot kernel reads and writes its peers' memory: 2 ranks, where it is
            // offered (every pair of GPUs reaches the other).
            let one_shot = of_kind(BinaryKind::MpiTest).filter(|b| b.name == ONE_SHOT_TEST);
            for b in one_shot.filter(|_| m.gpus >= 2 && m.halo_ipc) {
                let e = env(&[("MPI_TESTS_FILTER", SANITIZED_ONE_SHOT_CASES)]);
                steps.push(sanitized(b, 2, e));
            }
        }
    }
    steps
}

/// `mpirun -n 2 nccl_halo [HALO_EXPECT_IPC=1]`, `CUDA-aware mpirun -n 1 ...`.
fn describe(
    b: &SuiteBinary,
    launcher: Launcher,
    tool: Option<&str>,
    env: &[(String, String)],
) -> String {
    let mut what = match launcher {
        Launcher::Direct => String::new(),
        Launcher::Mpirun { ranks, cuda_aware } => {
            let which = if cuda_aware {
                "CUDA-aware mpirun"
            } else {
                "mpirun"
            };
            format!("{which} -n {ranks} ")
        }
    };
    if let Some(tool) = tool {
        what.push_str(&format!("compute-sanitizer {tool} "));
    }
    what.push_str(&b.name);
    if !env.is_empty() {
        let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        what.push_str(&format!(" [{}]", vars.join(" ")));
    }
    what
}

/// compute-sanitizer's own arguments before `program`: the tool, and a non-zero exit status when
/// it finds errors.
///
/// Under NCCL, failing CUDA API calls are not reported: libnccl probes its kernels at init with
/// `cudaFuncGetAttributes`, which fails with `cudaErrorNoKernelImageForDevice` for the
/// architectures a build leaves out, and NCCL handles that result itself (48 such reports on an
/// H200 with NCCL 2.28, every frame inside libnccl). Memory errors, races and synchronization
/// errors are still reported there; every other program also gets its API errors reported.
///
/// In [`ONE_SHOT_TEST`] memcheck checks [`ONE_SHOT_KERNEL`] only: on 2 ranks NCCL's own
/// point-to-point kernel, run while a communicator is set up, reads past a 4-byte buffer (NCCL
/// reads user data in 16-byte units by design), and memcheck stops it, which fails every later
/// CUDA call of the process (seen on 2 H100, docs/logs/2026-11-27-latency).
fn sanitizer_args(tool: &str, program: &Path) -> Vec<String> {
    let mut args: Vec<String> = ["--tool", tool, "--error-exitcode", "7"]
        .map(str::to_owned)
        .to_vec();
    let name = program.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.starts_with("nccl") {
        args.extend(["--report-api-errors", "no"].map(str::to_owned));
    }
    if name.starts_with(ONE_SHOT_TEST) && tool == "memcheck" {
        args.extend(["--kernel-name".to_owned(), format!("kns={ONE_SHOT_KERNEL}")]);
    }
    args
}

/// The command for `step` on `m`, and the same as a shell line to show or paste.
pub fn invocation(step: &Step, m: &Machine) -> (Command, String) {
    let (program, mut args) = match (step.sanitizer, &m.sanitizer) {
        (Some(tool), Some(sanitizer)) => {
            let mut args = sanitizer_args(tool, &step.program);
            args.push(step.program.display().to_string());
            (sanitizer.clone(), args)
        }
        _ => (step.program.clone(), Vec::new()),
    };
    args.extend(step.args.iter().cloned());
    match step.launcher {
        Launcher::Direct => {
            let mut cmd = Command::new(&program);
            cmd.args(&args);
            let mut words: Vec<String> = Vec::new();
            for (k, v) in &step.env {
                cmd.env(k, v);
                words.push(format!("{k}={}", shell_quote(v)));
            }
            words.push(shell_quote(&program.display().to_string()));
            words.extend(args.iter().map(|a| shell_quote(a)));
            (cmd, words.join(" "))
        }
        Launcher::Mpirun { ranks, cuda_aware } => {
            let mut launch = Launch::new(&program, &args, ranks, m.as_root, true);
            if cuda_aware {
                if let Some(cuda) = &m.cuda_mpirun {
                    launch = launch.with_program(&cuda.program);
                    if let Some(path) = &cuda.ld_library_path {
                        launch.export("LD_LIBRARY_PATH", path);
                    }
                }
            }
            for (k, v) in &step.env {
                launch.export(k, v);
            }
            (launch.command(), launch.shell_line())
        }
    }
}

/// compute-sanitizer's error count: the sum over its `ERROR SUMMARY: N error(s)` lines (memcheck,
/// synccheck) and its `RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)` lines
/// (racecheck, which counts `E + W`: a warning is a possible race too), or `None` when it printed
/// neither.
pub fn sanitizer_errors(output: &str) -> Option<u64> {
    let mut total = None;
    for line in output.lines() {
        let n = if let Some(at) = line.find("ERROR SUMMARY: ") {
            line[at + "ERROR SUMMARY: ".len()..]
                .split_whitespace()
                .next()
                .and_then(|w| w.parse::<u64>().ok())
        } else if line.contains("RACECHECK SUMMARY: ") {
            racecheck_hazards(line)
        } else {
            None
        };
        if let Some(n) = n {
            total = Some(total.unwrap_or(0) + n);
        }
    }
    total
}

/// `E + W` from `... RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)`.
fn racecheck_hazards(line: &str) -> Option<u64> {
    let inner = &line[line.find('(')? + 1..line.rfind(')')?];
    let mut total = 0;
    for part in inner.split(',') {
        let n: u64 = part.split_whitespace().next()?.parse().ok()?;
        total += n;
    }
    Some(total)
}

/// The tally of one step from its output, whether it exited 0 in time, and how it ended.
pub fn tally_step(step: &Step, output: &str, ok: bool, ended: &str) -> Tally {
    let what = &step.what;
    let mut tally = Tally::default();
    match step.counting {
        Counting::Libtest => {
            for (passed, failed) in output.lines().filter_map(parse_result_line) {
                tally.passed += passed;
                tally.failed += failed;
            }
            tally.failures = failed_names(output)
                .into_iter()
                .map(|name| format!("{what}: {name}"))
                .collect();
            if tally.failed == 0 && !ok {
                tally.fail(1, format!("{what}: {ended}"));
            } else if tally.failed > 0 && tally.failures.is_empty() {
                tally
                    .failures
                    .push(format!("{what}: {} failed ({ended})", tally.failed));
            } else if tally.passed == 0 && tally.failed == 0 {
                tally.fail(1, format!("{what}: ran no test"));
            }
        }
        Counting::MpiTests => {
            let line = parse_mpi_tests(output);
            tally = mpirun::count_mpi_test(what, line, ok, ended);
            if line == Some((0, 0)) {
                tally.fail(
                    1,
                    format!("{what}: ran no test (did the binary see no GPU or no libnccl?)"),
                );
            }
        }
        Counting::Exit => {
            if ok {
                tally.pass(1);
            } else {
                tally.fail(1, format!("{what}: {ended}"));
            }
        }
    }
    if step.sanitizer.is_some() {
        // A sanitizer run is one check: the program passed and the sanitizer found nothing.
        let mut problems: Vec<String> = tally.failures.clone();
        match sanitizer_errors(output) {
            Some(0) => {}
            Some(n) => problems.push(format!("{what}: compute-sanitizer reported {n} error(s)")),
            None => problems.push(format!("{what}: no `ERROR SUMMARY` line ({ended})")),
        }
        let mut one = Tally::default();
        if problems.is_empty() && tally.failed == 0 {
            one.pass(1);
        } else {
            one.failed = 1;
            one.failures = problems;
        }
        return one;
    }
    tally
}

/// Runs `steps` one after the other, echoing each command and its output, and returns one
/// summary step per group that has steps. With `dry_run`, only prints the commands.
pub fn run_steps(steps: &[Step], m: &Machine, dry_run: bool) -> Vec<summary::Step> {
    let mut tallies: Vec<(Group, Tally)> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let (cmd, line) = invocation(step, m);
        println!(
            "== [{}/{}] {line} (limit {} s) ==",
            i + 1,
            steps.len(),
            step.limit.as_secs()
        );
        if dry_run {
            continue;
        }
        let tally = match exec::run_tee(cmd, Some(step.limit), true) {
            Ok(outcome) => {
                let ended = if outcome.timed_out {
                    format!("{} after {} s", outcome.describe(), step.limit.as_secs())
                } else {
                    outcome.describe()
                };
                let tally = tally_step(step, &outcome.output, outcome.success(), &ended);
                if tally.failed > 0 {
                    println!("xtask: {} failed ({ended}); rerun with: {line}", step.what);
                }
                tally
            }
            Err(e) => {
                let mut tally = Tally::default();
                tally.fail(1, format!("{}: cannot start: {e}", step.what));
                tally
            }
        };
        match tallies.iter_mut().find(|(g, _)| *g == step.group) {
            Some((_, t)) => t.absorb(tally),
            None => tallies.push((step.group, tally)),
        }
    }
    Group::ALL
        .into_iter()
        .filter(|g| steps.iter().any(|s| s.group == *g))
        .map(|g| summary::Step {
            label: g.label().to_owned(),
            tally: tallies
                .iter()
                .find(|(group, _)| *group == g)
                .map(|(_, t)| t.clone()),
        })
        .collect()
}

/// The per-step limit for sanitizer runs: `$XTASK_SANITIZER_TIMEOUT` seconds, else
/// [`DEFAULT_SANITIZER_TIMEOUT`].
pub fn sanitizer_timeout() -> Duration {
    match std::env::var("XTASK_SANITIZER_TIMEOUT") {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(secs) if secs > 0 => Duration::from_secs(secs),
            _ => {
                eprintln!(
                    "xtask: ignoring XTASK_SANITIZER_TIMEOUT={v:?} (want whole seconds > 0); \
                     using {} s",
                    DEFAULT_SANITIZER_TIMEOUT.as_secs()
                );
                DEFAULT_SANITIZER_TIMEOUT
            }
        },
        Err(_) => DEFAULT_SANITIZER_TIMEOUT,
    }
}

/// The machine for `gpus` GPUs from this process's environment, printing one line per fact.
/// A setting that names something missing (`XTASK_CUDA_MPIRUN`, `XTASK_COMPUTE_SANITIZER`) is
/// returned as a problem, which fails the suite.
pub fn machine_from_env(gpus: u32, as_root: bool) -> (Machine, Vec<String>) {
    let mut problems = Vec::new();
    let cuda_mpirun = gpu::cuda_mpirun_from_env().unwrap_or_else(|e| {
        problems.push(e);
        None
    });
    match &cuda_mpirun {
        Some(c) => println!("CUDA-aware mpirun: {}", c.program.display()),
        None => println!(
            "no CUDA-aware mpirun ({} not set): cuda_mpi_* run under the plain mpirun only",
            gpu::CUDA_MPIRUN_VAR
        ),
    }
    let sanitizer = gpu::sanitizer_from_env().unwrap_or_else(|e| {
        problems.push(e);
        None
    });
    match &sanitizer {
        Some(s) => println!("compute-sanitizer: {}", s.display()),
        None => println!(
            "no compute-sanitizer (not on PATH, not {}): sanitizer runs skipped",
            gpu::SANITIZER_FALLBACK
        ),
    }
    let (halo_ipc, why) = gpu::halo_expect_ipc_from_host(gpus);
    if gpus >= 2 {
        let verdict = if halo_ipc { "1" } else { "unset" };
        println!("{HALO_TEST} on 2+ ranks: HALO_EXPECT_IPC {verdict} ({why})");
    }
    let machine = Machine {
        gpus,
        as_root,
        cuda_mpirun,
        sanitizer,
        halo_ipc,
        limit: mpirun::timeout(),
        sanitizer_limit: sanitizer_timeout(),
    };
    (machine, problems)
}

/// What cargo built, sorted for the suite: the root package's `nccl_*` and `cuda_mpi_*` test
/// binaries and its GPU examples (ready), and the libtest binaries that may hold ignored tests
/// (to be listed with [`with_ignored_tests`]).
pub fn classify(built: &[Artifact], root_manifest: &Path) -> (Vec<SuiteBinary>, Vec<SuiteBinary>) {
    let mut ready = Vec::new();
    let mut libtest = Vec::new();
    for a in built {
        let root = a.in_package(root_manifest);
        let entry = |kind| SuiteBinary {
            name: a.name.clone(),
            kind,
            path: a.executable.clone(),
        };
        let multi_rank = root
            && a.is("test")
            && [
                crate::binaries::MPI_TEST_PREFIX,
                NCCL_TEST_PREFIX,
                CUDA_MPI_TEST_PREFIX,
            ]
            .iter()
            .any(|p| a.name.starts_with(p));
        if multi_rank {
            if a.name.starts_with(NCCL_TEST_PREFIX) || a.name.starts_with(CUDA_MPI_TEST_PREFIX) {
                ready.push(entry(BinaryKind::MpiTest));
            }
        } else if a.test_profile && (a.is("lib") || a.is("bin") || a.is("test")) {
            libtest.push(entry(BinaryKind::Libtest));
        } else if root && a.is("example") && !a.test_profile && needs_gpu(&a.name) {
            ready.push(entry(BinaryKind::Example));
        } else if a.is("bin") && !a.test_profile && a.name == COLLBENCH {
            ready.push(entry(BinaryKind::Benchmark));
        }
    }
    (ready, libtest)
}

/// How many tests `--list --ignored --format terse` listed (`name: test` lines).
pub fn count_listed(output: &str) -> u64 {
    output
        .lines()
        .filter(|line| line.trim_end().ends_with(": test"))
        .count() as u64
}

/// The libtest binaries among `candidates` that have ignored tests, asking each with
/// `--list --ignored`; and one message per binary that could not be asked.
pub fn with_ignored_tests(candidates: &[SuiteBinary]) -> (Vec<SuiteBinary>, Vec<String>) {
    let mut keep = Vec::new();
    let mut problems = Vec::new();
    for b in candidates {
        let mut cmd = Command::new(&b.path);
        cmd.args(["--list", "--ignored", "--format", "terse"]);
        match exec::run_tee(cmd, Some(Duration::from_secs(60)), false) {
            Ok(o) if o.success() => {
                if count_listed(&o.output) > 0 {
                    keep.push(b.clone());
                }
            }
            Ok(o) => problems.push(format!("{} --list --ignored: {}", b.name, o.describe())),
            Err(e) => problems.push(format!("{} --list --ignored: cannot run: {e}", b.name)),
        }
    }
    (keep, problems)
}

/// The manifest of a staged suite: each binary's name, kind and path relative to `base`.
pub fn manifest_json(binaries: &[SuiteBinary], base: &Path) -> String {
    let list: Vec<Value> = binaries
        .iter()
        .map(|b| {
            let path = b.path.strip_prefix(base).unwrap_or(&b.path);
            json!({
                "name": b.name,
                "kind": b.kind.as_str(),
                "path": path.display().to_string(),
            })
        })
        .collect();
    let doc = json!({ "format": 1, "binaries": list });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// The binaries a manifest lists, with paths made absolute under `base`.
///
/// # Errors
/// A manifest that is not the JSON [`manifest_json`] writes.
pub fn parse_manifest(text: &str, base: &Path) -> Result<Vec<SuiteBinary>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if doc.get("format").and_then(Value::as_u64) != Some(1) {
        return Err("unknown format (want \"format\": 1)".to_owned());
    }
    let list = doc
        .get("binaries")
        .and_then(Value::as_array)
        .ok_or("no \"binaries\" list")?;
    list.iter()
        .map(|entry| {
            let field = |key: &str| {
                entry
                    .get(key)
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("an entry without \"{key}\": {entry}"))
            };
            let kind = field("kind")?;
            Ok(SuiteBinary {
                name: field("name")?.to_owned(),
                kind: BinaryKind::parse(kind).ok_or_else(|| format!("unknown kind {kind:?}"))?,
                path: base.join(field("path")?),
            })
        })
        .collect()
}

/// The command line of `gpu-suite`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Run the binaries a staging directory lists instead of building them.
    pub staged: Option<PathBuf>,
    /// Print the steps, run nothing.
    pub dry_run: bool,
    /// Only the steps whose command line or name contains one of these.
    pub only: Vec<String>,
    /// Leave out the compute-sanitizer runs.
    pub skip_sanitizer: bool,
    /// Only detect: print the GPU line, exit 0 with a GPU and 1 without.
    pub detect: bool,
}

/// Parses the arguments after `gpu-suite`.
///
/// # Errors
/// A message naming the bad argument.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut options = Options::default();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |flag: &str| {
            iter.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match arg.as_str() {
            "--staged" => options.staged = Some(PathBuf::from(value("--staged")?)),
            "--only" => options.only.push(value("--only")?),
            "--dry-run" => options.dry_run = true,
            "--skip-sanitizer" => options.skip_sanitizer = true,
            "--detect" => options.detect = true,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(options)
}

/// The steps `options` keeps.
pub fn select(steps: Vec<Step>, options: &Options, m: &Machine) -> Vec<Step> {
    steps
        .into_iter()
        .filter(|s| !(options.skip_sanitizer && s.group == Group::Sanitizer))
        .filter(|s| {
            options.only.is_empty() || {
                let line = invocation(s, m).1;
                options
                    .only
                    .iter()
                    .any(|o| s.what.contains(o.as_str()) || line.contains(o.as_str()))
            }
        })
        .collect()
}

/// The GPU suite's summary steps for the binaries `cargo` builds here (debug profile, as
/// `cargo test` builds them), or one skipped step when there is no GPU.
pub fn local_steps(root: &Path, as_root: bool, options: &Options) -> Vec<summary::Step> {
    println!("== GPU suite ==");
    let gpus = gpu::detect();
    println!("{}", gpus.line());
    if gpus.count() == 0 {
        return vec![skipped_step()];
    }
    let jobs = jobs();
    let built = artifacts::run_cargo(
        &cargo(),
        root,
        &["test", "--no-run", "--workspace", "-j", &jobs],
    )
    .and_then(|mut built| {
        let examples = artifacts::build(
            &cargo(),
            root,
            &["-p", ROOT_PACKAGE, "--examples", "-j", &jobs],
        )?;
        artifacts::merge(&mut built, examples);
        Ok(built)
    });
    let built = match built {
        Ok(built) => built,
        Err(e) => return vec![setup_failure(vec![format!("GPU suite build: {e}")])],
    };
    let (mut binaries, candidates) = classify(&built, &root.join("Cargo.toml"));
    let (libtest, mut problems) = with_ignored_tests(&candidates);
    binaries.extend(libtest);
    let mut steps = run_suite(&binaries, &gpus, as_root, options, &mut problems);
    steps.extend(interposer_step(None, &gpus, as_root, options));
    steps
}

/// The MPI interposer's device checks ([`crate::interpose`]), after the plan's steps:
/// 2 ranks (sharing GPU 0 on a machine with one), and 4 where there are 4 GPUs. Left out by
/// `--only` unless a text of it is in `interpose`, and by `--dry-run` (which prints it).
fn interposer_step(
    staged: Option<&Path>,
    gpus: &Gpus,
    as_root: bool,
    options: &Options,
) -> Option<summary::Step> {
    let chosen = options.only.is_empty()
        || options
            .only
            .iter()
            .any(|o| "interpose_check".contains(o.as_str()));
    if !chosen {
        return None;
    }
    let mut ranks = vec![2];
    if gpus.count() >= 4 {
        ranks.push(4);
    }
    if options.dry_run {
        println!(
            "xtask interpose --device --ranks {}{}",
            ranks
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            staged.map_or_else(String::new, |d| format!(" --staged {}", d.display()))
        );
        return None;
    }
    Some(crate::interpose::device_step(staged, &ranks, as_root))
}

/// Plans and runs the suite for `binaries`; `problems` found so far become a failing step.
fn run_suite(
    binaries: &[SuiteBinary],
    gpus: &Gpus,
    as_root: bool,
    options: &Options,
    problems: &mut Vec<String>,
) -> Vec<summary::Step> {
    let (m, more) = machine_from_env(gpus.count(), as_root);
    problems.extend(more);
    let steps = select(plan(binaries, &m), options, &m);
    println!("{} steps", steps.len());
    let mut summary = Vec::new();
    if !problems.is_empty() {
        summary.push(setup_failure(std::mem::take(problems)));
    }
    summary.extend(run_steps(&steps, &m, options.dry_run));
    if summary.is_empty() {
        summary.push(summary::Step {
            label: "GPU suite (no step selected)".to_owned(),
            tally: None,
        });
    }
    summary
}

fn skipped_step() -> summary::Step {
    summary::Step {
        label: "GPU suite".to_owned(),
        tally: None,
    }
}

fn setup_failure(problems: Vec<String>) -> summary::Step {
    let mut tally = Tally::default();
    for p in problems {
        tally.fail(1, p);
    }
    summary::Step {
        label: "GPU suite setup".to_owned(),
        tally: Some(tally),
    }
}

/// The summary steps of a staged suite in `dir` (see `gpu_stage`): its manifest's binaries,
/// checked to be there, then planned and run.
pub fn staged_steps(dir: &Path, as_root: bool, options: &Options) -> Vec<summary::Step> {
    // Absolute, so that the launched paths do not depend on where mpirun resolves them.
    let dir = &dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    println!("== GPU suite (staged in {}) ==", dir.display());
    let gpus = gpu::detect();
    println!("{}", gpus.line());
    if gpus.count() == 0 {
        return vec![skipped_step()];
    }
    let manifest = dir.join(MANIFEST);
    let binaries = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))
        .and_then(|text| {
            parse_manifest(&text, dir).map_err(|e| format!("{}: {e}", manifest.display()))
        });
    let binaries = match binaries {
        Ok(b) => b,
        Err(e) => return vec![setup_failure(vec![e])],
    };
    let mut problems: Vec<String> = binaries
        .iter()
        .filter(|b| !host::is_executable(&b.path))
        .map(|b| {
            format!(
                "{}: {} is missing or not executable",
                b.name,
                b.path.display()
            )
        })
        .collect();
    let present: Vec<SuiteBinary> = binaries
        .into_iter()
        .filter(|b| host::is_executable(&b.path))
        .collect();
    let mut steps = run_suite(&present, &gpus, as_root, options, &mut problems);
    if dir.join("lib").join(crate::interpose::LIBRARY).is_file() {
        steps.extend(interposer_step(Some(dir), &gpus, as_root, options));
    }
    steps
}

/// `xtask gpu-suite [--staged DIR] [--dry-run] [--only TEXT]... [--skip-sanitizer] [--detect]`.
pub fn run(args: &[String]) -> ExitCode {
    let options = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("xtask gpu-suite: {e}\n(see `cargo xtask help`)");
            return ExitCode::from(2);
        }
    };
    if options.detect {
        let gpus = gpu::detect();
        println!("{}", gpus.line());
        return if gpus.count() > 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let as_root = host::is_root();
    let steps = match &options.staged {
        Some(dir) => staged_steps(dir, as_root, &options),
        None => local_steps(&workspace_root(), as_root, &options),
    };
    if options.dry_run {
        println!("(dry run: nothing ran)");
    }
    print!("{}", summary::render(&steps));
    if summary::total_failed(&steps) == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::fake as artifact;

    fn bin(name: &str, kind: BinaryKind) -> SuiteBinary {
        SuiteBinary {
            name: name.to_owned(),
            kind,
            path: PathBuf::from(format!("/box/{name}")),
        }
    }

    fn suite() -> Vec<SuiteBinary> {
        vec![
            bin("nccl_halo", BinaryKind::MpiTest),
            bin("gpu_pack", BinaryKind::Libtest),
            bin("cuda_mpi_collectives", BinaryKind::MpiTest),
            bin("nccl_collectives", BinaryKind::MpiTest),
            bin("06_nccl_all_reduce", BinaryKind::Example),
            bin("nccl_sys", BinaryKind::Libtest),
            bin("collbench", BinaryKind::Benchmark),
        ]
    }

    fn machine(gpus: u32) -> Machine {
        Machine {
            gpus,
            as_root: false,
            cuda_mpirun: None,
            sanitizer: None,
            halo_ipc: false,
            limit: Duration::from_secs(300),
            sanitizer_limit: Duration::from_secs(900),
        }
    }

    fn whats(steps: &[Step]) -> Vec<String> {
        steps.iter().map(|s| s.what.clone()).collect()
    }

    #[test]
    fn one_gpu_plain_mpi_no_sanitizer() {
        let steps = plan(&suite(), &machine(1));
        assert_eq!(
            whats(&steps),
            [
                "gpu_pack --ignored",
                "nccl_sys --ignored",
                "mpirun -n 1 cuda_mpi_collectives [COLLECTIVES_EXPECT_CUDA_AWARE=0]",
                "mpirun -n 2 cuda_mpi_collectives [CUDA_VISIBLE_DEVICES=0 COLLECTIVES_EXPECT_CUDA_AWARE=0]",
                "mpirun -n 1 nccl_collectives",
                "mpirun -n 1 nccl_halo",
                "mpirun -n 1 06_nccl_all_reduce",
                "mpirun -n 2 collbench [CUDA_VISIBLE_DEVICES=0] p2p --backend mpi-staged",
            ]
        );
        assert_eq!(steps[0].counting, Counting::Libtest);
        let p2p = &steps[7];
        assert_eq!(p2p.counting, Counting::Exit);
        assert_eq!(p2p.group, Group::Benchmarks);
        assert_eq!(p2p.args[..3], ["p2p", "-b", "1"]);
        assert_eq!(p2p.args[p2p.args.len() - 2..], ["--backend", "mpi-staged"]);
        assert!(p2p.args.windows(2).any(|w| w == ["-c", "1"]));
        assert_eq!(steps[0].launcher, Launcher::Direct);
        assert_eq!(steps[2].counting, Counting::MpiTests);
        assert_eq!(steps[6].counting, Counting::Exit);
        assert!(steps.iter().all(|s| s.limit == Duration::from_secs(300)));
        assert!(plan(&suite(), &machine(0)).is_empty());
    }

    #[test]
    fn two_gpus_cuda_aware_mpi_and_sanitizer() {
        let m = Machine {
            cuda_mpirun: Some(CudaMpirun {
                program: PathBuf::from("/opt/ompi-cuda/bin/mpirun"),
                ld_library_path: Some("/opt/ompi-cuda/lib".to_owned()),
            }),
            sanitizer: Some(PathBuf::from("/cuda/bin/compute-sanitizer")),
            halo_ipc: true,
            ..machine(2)
        };
        let steps = plan(&suite(), &m);
        assert_eq!(
            whats(&steps),
            [
                "gpu_pack --ignored",
                "nccl_sys --ignored",
                "mpirun -n 1 cuda_mpi_collectives [COLLECTIVES_EXPECT_CUDA_AWARE=0]",
                "CUDA-aware mpirun -n 1 cuda_mpi_collectives [COLLECTIVES_EXPECT_CUDA_AWARE=1]",
                "mpirun -n 2 cuda_mpi_collectives [COLLECTIVES_EXPECT_CUDA_AWARE=0]",
                "CUDA-aware mpirun -n 2 cuda_mpi_collectives [COLLECTIVES_EXPECT_CUDA_AWARE=1]",
                "mpirun -n 2 cuda_mpi_collectives [CUDA_VISIBLE_DEVICES=0 COLLECTIVES_EXPECT_CUDA_AWARE=0]",
                "CUDA-aware mpirun -n 2 cuda_mpi_collectives [CUDA_VISIBLE_DEVICES=0 COLLECTIVES_EXPECT_CUDA_AWARE=1]",
                "mpirun -n 1 nccl_collectives",
                "mpirun -n 2 nccl_collectives",
                "mpirun -n 1 nccl_halo",
                "mpirun -n 2 nccl_halo [HALO_EXPECT_IPC=1]",
                "mpirun -n 1 06_nccl_all_reduce",
                "mpirun -n 2 06_nccl_all_reduce",
                "mpirun -n 2 collbench [CUDA_VISIBLE_DEVICES=0] p2p --backend mpi-staged",
                "CUDA-aware mpirun -n 2 collbench [CUDA_VISIBLE_DEVICES=0] p2p --backend cuda-mpi",
                "CUDA-aware mpirun -n 2 collbench [CUDA_VISIBLE_DEVICES=0] p2p --backend mpi-staged",
                "compute-sanitizer memcheck gpu_pack --ignored",
                "mpirun -n 1 compute-sanitizer memcheck nccl_collectives",
                "compute-sanitizer racecheck gpu_pack --ignored",
                "mpirun -n 1 compute-sanitizer racecheck nccl_collectives",
                "compute-sanitizer synccheck gpu_pack --ignored",
                "mpirun -n 1 compute-sanitizer synccheck nccl_collectives",
            ]
        );
        let sanitized = steps.iter().filter(|s| s.group == Group::Sanitizer);
        assert!(sanitized
            .clone()
            .all(|s| s.limit == Duration::from_secs(900)));
        assert_eq!(sanitized.count(), 6);
    }

    #[test]
    fn commands_as_they_run() {
        let m = Machine {
            cuda_mpirun: Some(CudaMpirun {
                program: PathBuf::from("/opt/ompi-cuda/bin/mpirun"),
                ld_library_path: Some("/opt/ompi-cuda/lib:/usr/lib".to_owned()),
            }),
            sanitizer: Some(PathBuf::from("/cuda/bin/compute-sanitizer")),
            as_root: true,
            ..machine(1)
        };
        let steps = plan(&suite(), &m);
        let line = |what: &str| {
            let step = steps.iter().find(|s| s.what == what).expect(what);
            invocation(step, &m).1
        };
        assert_eq!(line("gpu_pack --ignored"), "/box/gpu_pack --ignored");
        assert_eq!(
            line("CUDA-aware mpirun -n 2 cuda_mpi_collectives [CUDA_VISIBLE_DEVICES=0 COLLECTIVES_EXPECT_CUDA_AWARE=1]"),
            "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
             LD_LIBRARY_PATH=/opt/ompi-cuda/lib:/usr/lib CUDA_VISIBLE_DEVICES=0 \
             COLLECTIVES_EXPECT_CUDA_AWARE=1 /opt/ompi-cuda/bin/mpirun -n 2 --allow-run-as-root \
             --oversubscribe -x LD_LIBRARY_PATH -x CUDA_VISIBLE_DEVICES \
             -x COLLECTIVES_EXPECT_CUDA_AWARE /box/cuda_mpi_collectives"
        );
        assert_eq!(
            line("compute-sanitizer memcheck gpu_pack --ignored"),
            "DTP_POOL_LIMIT=60 /cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 7 \
             /box/gpu_pack --ignored --test-threads 4"
        );
        assert_eq!(
            line("mpirun -n 1 compute-sanitizer synccheck nccl_collectives"),
            "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 1 \
             --allow-run-as-root --oversubscribe /cuda/bin/compute-sanitizer --tool synccheck \
             --error-exitcode 7 --report-api-errors no /box/nccl_collectives"
        );
        let (cmd, _) = invocation(&steps[0], &m);
        assert_eq!(cmd.get_program(), "/box/gpu_pack");
    }

    #[test]
    fn selection_by_text_and_without_the_sanitizer() {
        let m = Machine {
            sanitizer: Some(PathBuf::from("/cs")),
            ..machine(2)
        };
        let only = Options {
            only: vec!["nccl_halo".to_owned()],
            ..Options::default()
        };
        let picked = select(plan(&suite(), &m), &only, &m);
        assert_eq!(
            whats(&picked),
            ["mpirun -n 1 nccl_halo", "mpirun -n 2 nccl_halo"]
        );
        let no_sanitizer = Options {
            skip_sanitizer: true,
            ..Options::default()
        };
        let all = plan(&suite(), &m).len();
        let kept = select(plan(&suite(), &m), &no_sanitizer, &m);
        assert_eq!(kept.len(), all - 6);
        assert!(kept.iter().all(|s| s.group != Group::Sanitizer));
    }

    fn step(counting: Counting, sanitizer: Option<&'static str>) -> Step {
        Step {
            group: Group::Tests,
            what: "x".to_owned(),
            launcher: Launcher::Direct,
            sanitizer,
            program: PathBuf::from("/x"),
            args: vec![],
            env: vec![],
            counting,
            limit: Duration::from_secs(1),
        }
    }

    #[test]
    fn libtest_steps_are_counted_and_empty_runs_fail() {
        let s = step(Counting::Libtest, None);
        let ok = "test a ... ok\ntest result: ok. 26 passed; 0 failed; 0 ignored; 0 measured; 3 filtered out\n";
        let t = tally_step(&s, ok, true, "exit 0");
        assert_eq!((t.passed, t.failed), (26, 0));
        let failed = "test b ... FAILED\ntest result: FAILED. 25 passed; 1 failed; 0 ignored\n";
        let t = tally_step(&s, failed, false, "exit 101");
        assert_eq!((t.passed, t.failed), (25, 1));
        assert_eq!(t.failures, ["x: b"]);
        let crashed = tally_step(&s, "running 26 tests\n", false, "signal 11");
        assert_eq!((crashed.passed, crashed.failed), (0, 1));
        assert_eq!(crashed.failures, ["x: signal 11"]);
        let nothing =
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 26 filtered out\n";
        let t = tally_step(&s, nothing, true, "exit 0");
        assert_eq!((t.passed, t.failed), (0, 1));
        assert_eq!(t.failures, ["x: ran no test"]);
    }

    #[test]
    fn multi_rank_steps_fail_when_the_binary_saw_no_gpu() {
        let s = step(Counting::MpiTests, None);
        let t = tally_step(
            &s,
            "mpi-tests: 39 passed, 0 failed (0 skipped on 2 ranks)\n",
            true,
            "exit 0",
        );
        assert_eq!((t.passed, t.failed), (39, 0));
        let t = tally_step(&s, "mpi-tests: 74 passed, 1 failed\n", false, "exit 1");
        assert_eq!((t.passed, t.failed), (74, 1));
        let skipped = "nccl_halo: needs a CUDA driver and libnccl; skipped\n\
                       mpi-tests: 0 passed, 0 failed (no GPU)\n";
        let t = tally_step(&s, skipped, true, "exit 0");
        assert_eq!((t.passed, t.failed), (0, 1));
        assert!(t.failures[0].contains("ran no test"), "{t:?}");
        let hung = tally_step(&s, "", false, "timeout after 300 s");
        assert_eq!((hung.passed, hung.failed), (0, 1));
        let e = step(Counting::Exit, None);
        assert_eq!(tally_step(&e, "", true, "exit 0").passed, 1);
        assert_eq!(tally_step(&e, "", false, "exit 1").failures, ["x: exit 1"]);
    }

    #[test]
    fn racecheck_summaries_count_errors_and_warnings() {
        let clean = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n";
        assert_eq!(sanitizer_errors(clean), Some(0));
        let racy = "========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warnings)\n";
        assert_eq!(sanitizer_errors(racy), Some(3));
        assert_eq!(sanitizer_errors("RACECHECK SUMMARY: garbled\n"), None);
    }

    #[test]
    fn the_one_shot_kernel_under_every_tool_on_two_gpus_that_reach_each_other() {
        let mut binaries = suite();
        binaries.push(bin("nccl_one_shot", BinaryKind::MpiTest));
        let m = Machine {
            sanitizer: Some(PathBuf::from("/cs")),
            halo_ipc: true,
            as_root: true,
            ..machine(2)
        };
        let steps = plan(&binaries, &m);
        let filter = format!("[MPI_TESTS_FILTER={SANITIZED_ONE_SHOT_CASES}]");
        let sanitized: Vec<&Step> = steps
            .iter()
            .filter(|s| s.group == Group::Sanitizer && s.what.contains("nccl_one_shot"))
            .collect();
        assert_eq!(
            sanitized.iter().map(|s| s.what.clone()).collect::<Vec<_>>(),
            SANITIZER_TOOLS
                .map(|t| format!("mpirun -n 2 compute-sanitizer {t} nccl_one_shot {filter}"))
        );
        let memcheck = invocation(sanitized[0], &m).1;
        assert!(
            memcheck.contains("--tool memcheck --error-exitcode 7 --report-api-errors no --kernel-name kns=one_shot_all_reduce /box/nccl_one_shot"),
            "{memcheck}"
        );
        assert!(memcheck.contains("-x MPI_TESTS_FILTER"), "{memcheck}");
        assert!(!invocation(sanitized[1], &m).1.contains("--kernel-name"));
        // One GPU, or GPUs without peer access: the path is not offered, nothing to check.
        for m in [
            Machine {
                halo_ipc: false,
                ..m.clone()
            },
            Machine {
                gpus: 1,
                ..m.clone()
            },
        ] {
            assert!(!plan(&binaries, &m)
                .iter()
                .any(|s| s.group == Group::Sanitizer && s.what.contains("nccl_one_shot")));
        }
    }

    #[test]
    fn nccl_programs_leave_out_api_error_reports_and_others_keep_them() {
        let nccl = sanitizer_args("memcheck", Path::new("/box/tests/nccl_collectives-0123"));
        assert!(nccl.windows(2).any(|w| w == ["--report-api-errors", "no"]));
        let pack = sanitizer_args("memcheck", Path::new("/box/tests/gpu_pack-0123"));
        assert!(!pack.iter().any(|a| a == "--report-api-errors"));
        assert!(pack.windows(2).any(|w| w == ["--error-exitcode", "7"]));
    }

    #[test]
    fn sanitizer_runs_need_zero_errors_and_a_passing_program() {
        assert_eq!(
            sanitizer_errors("========= ERROR SUMMARY: 0 errors\n"),
            Some(0)
        );
        assert_eq!(
            sanitizer_errors(
                "========= ERROR SUMMARY: 3 errors\n========= ERROR SUMMARY: 1 error\n"
            ),
            Some(4)
        );
        assert_eq!(sanitizer_errors("no summary"), None);
        let s = step(Counting::Libtest, Some("memcheck"));
        let clean = "test result: ok. 26 passed; 0 failed;\n========= ERROR SUMMARY: 0 errors\n";
        let t = tally_step(&s, clean, true, "exit 0");
        assert_eq!((t.passed, t.failed), (1, 0));
        let errors = "test result: ok. 26 passed; 0 failed;\n========= ERROR SUMMARY: 2 errors\n";
        let t = tally_step(&s, errors, false, "exit 7");
        assert_eq!((t.passed, t.failed), (0, 1));
        assert!(
            t.failures.iter().any(|f| f.contains("reported 2 error(s)")),
            "{t:?}"
        );
        let program_failed =
            "test result: FAILED. 25 passed; 1 failed;\n========= ERROR SUMMARY: 0 errors\n";
        let t = tally_step(&s, program_failed, false, "exit 101");
        assert_eq!((t.passed, t.failed), (0, 1));
        let no_summary = tally_step(
            &s,
            "test result: ok. 26 passed; 0 failed;\n",
            false,
            "timeout",
        );
        assert_eq!(no_summary.failed, 1);
        assert!(
            no_summary
                .failures
                .iter()
                .any(|f| f.contains("no `ERROR SUMMARY`")),
            "{no_summary:?}"
        );
        let m = step(Counting::MpiTests, Some("racecheck"));
        let t = tally_step(
            &m,
            "mpi-tests: 34 passed, 0 failed\n========= ERROR SUMMARY: 0 errors\n",
            true,
            "exit 0",
        );
        assert_eq!((t.passed, t.failed), (1, 0));
    }

    #[test]
    fn a_hung_step_is_killed_and_counted_as_failed() {
        let m = machine(1);
        let mut s = step(Counting::Exit, None);
        s.program = PathBuf::from("sleep");
        s.args = vec!["30".to_owned()];
        s.limit = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let summary = run_steps(&[s], &m, false);
        assert!(started.elapsed() < Duration::from_secs(20));
        let tally = summary[0].tally.as_ref().unwrap();
        assert_eq!((tally.passed, tally.failed), (0, 1));
        assert!(tally.failures[0].contains("timeout"), "{tally:?}");
    }

    #[test]
    fn a_dry_run_runs_nothing() {
        let m = machine(1);
        let mut s = step(Counting::Exit, None);
        s.program = PathBuf::from("/nonexistent/never-run");
        let summary = run_steps(&[s], &m, true);
        assert_eq!(summary.len(), 1);
        assert!(summary[0].tally.is_none());
    }

    #[test]
    fn classifies_what_cargo_built() {
        let root = "/w/Cargo.toml";
        let pack = "/w/crates/datatype-pack/Cargo.toml";
        let built = [
            artifact("nccl_halo", "test", true, root),
            artifact("cuda_mpi_collectives", "test", true, root),
            artifact("mpi_collectives", "test", true, root),
            artifact("compile_fail", "test", true, root),
            artifact("collectives", "lib", true, root),
            artifact("06_nccl_all_reduce", "example", false, root),
            artifact("01_all_reduce", "example", false, root),
            artifact("gpu_pack", "test", true, pack),
            artifact("pack_bench", "example", false, pack),
            artifact("collbench", "bin", true, "/w/crates/bench-cli/Cargo.toml"),
            artifact("collbench", "bin", false, "/w/crates/bench-cli/Cargo.toml"),
        ];
        let (ready, libtest) = classify(&built, Path::new(root));
        let names = |v: &[SuiteBinary]| -> Vec<(String, BinaryKind)> {
            v.iter().map(|b| (b.name.clone(), b.kind)).collect()
        };
        assert_eq!(
            names(&ready),
            [
                ("nccl_halo".to_owned(), BinaryKind::MpiTest),
                ("cuda_mpi_collectives".to_owned(), BinaryKind::MpiTest),
                ("06_nccl_all_reduce".to_owned(), BinaryKind::Example),
                ("collbench".to_owned(), BinaryKind::Benchmark),
            ]
        );
        assert_eq!(
            names(&libtest)
                .into_iter()
                .map(|(n, _)| n)
                .collect::<Vec<_>>(),
            ["compile_fail", "collectives", "gpu_pack", "collbench"]
        );
    }

    #[test]
    fn lists_ignored_tests() {
        let listing = "tests::pool_00: test\ntests::pool_01: test\nbench_x: bench\n\n";
        assert_eq!(count_listed(listing), 2);
        assert_eq!(count_listed(""), 0);
        // A binary that cannot be asked is reported, not silently dropped.
        let (keep, problems) = with_ignored_tests(&[SuiteBinary {
            name: "gone".to_owned(),
            kind: BinaryKind::Libtest,
            path: PathBuf::from("/nonexistent/gone"),
        }]);
        assert!(keep.is_empty());
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with("gone --list --ignored: cannot run"),
            "{problems:?}"
        );
    }

    #[test]
    fn the_manifest_round_trips() {
        let base = Path::new("/stage/.gpu-box");
        let binaries = vec![
            SuiteBinary {
                name: "gpu_pack".to_owned(),
                kind: BinaryKind::Libtest,
                path: base.join("tests/gpu_pack-0123"),
            },
            SuiteBinary {
                name: "06_nccl_all_reduce".to_owned(),
                kind: BinaryKind::Example,
                path: base.join("bin/06_nccl_all_reduce"),
            },
        ];
        let text = manifest_json(&binaries, base);
        assert!(text.contains("\"path\": \"tests/gpu_pack-0123\""), "{text}");
        let elsewhere = Path::new("/gpu/.gpu-box");
        let back = parse_manifest(&text, elsewhere).unwrap();
        assert_eq!(back[0].path, elsewhere.join("tests/gpu_pack-0123"));
        assert_eq!(back[1].kind, BinaryKind::Example);
        assert!(parse_manifest("{}", base).is_err());
        assert!(parse_manifest("not json", base).is_err());
        let bad_kind = r#"{"format":1,"binaries":[{"name":"x","kind":"odd","path":"x"}]}"#;
        assert!(parse_manifest(bad_kind, base).unwrap_err().contains("odd"));
    }

    #[test]
    fn parses_options() {
        let args = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let o = parse_args(&args(&[
            "--staged",
            ".gpu-box",
            "--only",
            "halo",
            "--only",
            "gpu_pack",
            "--dry-run",
            "--skip-sanitizer",
        ]))
        .unwrap();
        assert_eq!(o.staged, Some(PathBuf::from(".gpu-box")));
        assert_eq!(o.only, ["halo", "gpu_pack"]);
        assert!(o.dry_run && o.skip_sanitizer && !o.detect);
        assert!(parse_args(&args(&["--detect"])).unwrap().detect);
        assert!(parse_args(&args(&["--staged"])).is_err());
        assert!(parse_args(&args(&["--bogus"])).is_err());
    }
}
