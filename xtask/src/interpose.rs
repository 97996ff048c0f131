//! The interposer's checks (`crates/mpi-interpose`): an ordinary MPI program in C,
//! `interpose_check.c`, compiled with `mpicc`, run under `mpirun` without and with
//! `LD_PRELOAD=libcollectives_interpose.so`, its results compared.
//!
//! Every run counts its own `mpi-tests:` line (each result checked byte for byte against
//! `PMPI_Pack`/`PMPI_Unpack` of host copies); every run after the first also counts one check
//! that its `sum` lines (checksums of every rank's result bytes) equal the first run's.
//!
//! | flavour | where | runs at each rank count |
//! |---|---|---|
//! | host | `cargo xtask test`, `xtask interpose` | plain; preloaded (host buffers pass through); preloaded with `COLLECTIVES_INTERPOSE_HOST_PACK=1` (host buffers take the byte path, CPU packer; with the log, which must show the path taken), `=send`, `=recv` (mixed: bytes one side, typed datatypes the other); `=1` with `COLLECTIVES_INTERPOSE_DIRECT=carry` (the direct path's protocol, host bytes carried in its notes; on 2 ranks or more the log must show messages sent directly, receives claiming their notes before completing, a receive asking for bytes after one that got them, messages to blocking receives with nothing through the MPI, and a probe asking its sender for bytes) |
//! | device | `xtask interpose --device` (GPU machine; `run-interpose.sh` when staged) | host build plain (the reference); device build preloaded under `mpirun` (not CUDA-aware, `--host-mpi`) by the model (the log must show the byte path), with `COLLECTIVES_INTERPOSE_DIRECT=1` (on 2 ranks or more the log must show messages sent directly, notes claimed early, a receive asking for bytes, messages with nothing through the MPI, a probe asking its sender for bytes and a send written into its receive's buffer), forced one-shot, forced staged; under the CUDA-aware `mpirun` plain, preloaded by the model, forced device, with the direct path, one-shot, staged |

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use crate::gpu::{self, CudaMpirun};
use crate::mpirun::{self, Launch};
use crate::results::parse_mpi_tests;
use crate::summary::{self, Step, Tally};
use crate::{cargo, exec, host, jobs, workspace_root};

/// The library's file name.
pub const LIBRARY: &str = "libcollectives_interpose.so";

/// The C sources, relative to the workspace root.
pub const SOURCES: &str = "crates/mpi-interpose/tests/c";

/// The check program's source file.
pub const CHECK_SOURCE: &str = "interpose_check.c";

/// The benchmark program's source file.
pub const BENCH_SOURCE: &str = "interpose_bench.c";

/// The staged script that runs the device flavour.
pub const RUN_SCRIPT: &str = "run-interpose.sh";

/// What the interposer's log says of a message that went by the direct path.
pub const DIRECT_MARK: &str = "bytes directly";

/// What the interposer's log says of a receive whose note it claimed before the real MPI
/// completed it (its unpack queued early).
pub const EARLY_MARK: &str = "its note came before the receive completed";

/// What the interposer's log says of a receive not announced after one that got its bytes
/// through the real MPI (and of its send, which then takes the byte path at once).
pub const BYTES_MARK: &str = "asks for bytes";

/// What the interposer's log says of a message sent directly to a blocking receive that
/// posted no real receive (nothing of it went through the real MPI).
pub const QUIET_MARK: &str = "nothing through the MPI";

/// What the interposer's log says of a probe that told its message's sender to send bytes.
pub const PROBE_MARK: &str = "a probe for message";

/// What the interposer's log says of a send whose kernel wrote straight into the buffer its
/// receive offered (the direct path's write landing, device buffers only).
pub const WRITE_MARK: &str = "written into its buffer";

/// What the interposer's log says of a message that came through a channel (the channel's
/// runs, on 2 ranks or more).
pub const CHANNEL_MARK: &str = "through the channel from rank";

/// What a direct run on 2 ranks or more must log, each with what its absence says.
const DIRECT_MARKS: [(&str, &str); 5] = [
    (DIRECT_MARK, "no message went by the direct path"),
    (EARLY_MARK, "no receive claimed its note early"),
    (BYTES_MARK, "no receive asked for bytes"),
    (QUIET_MARK, "no message went to a blocking receive quietly"),
    (PROBE_MARK, "no probe asked its sender for bytes"),
];

/// The marker of the interposer's log lines.
pub const LOG_MARKER: &str = "[collectives-interpose";

/// One launch of the check program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// A short name for headers and failures.
    pub label: String,
    /// Which build: the device build (`-DUSE_CUDA`) or the host one.
    pub device_build: bool,
    /// Whether the library is preloaded.
    pub preload: bool,
    /// Whether under the CUDA-aware `mpirun`.
    pub cuda_aware: bool,
    /// Variables for the ranks.
    pub env: Vec<(String, String)>,
    /// The program's arguments.
    pub args: Vec<String>,
    /// Whether its stderr must show the interposer's log (the byte path was taken).
    pub expect_log: bool,
    /// Whether, on 2 ranks or more, the log must show messages that went by the direct path.
    pub expect_direct: bool,
    /// Whether, on 2 ranks or more, the log must also show a send written into its receive's
    /// buffer (device buffers).
    pub expect_write: bool,
    /// Whether, on 2 ranks or more, the log must also show a message that came through a
    /// channel (`COLLECTIVES_INTERPOSE_CHANNEL=shared`, which opens them on one GPU too).
    pub expect_channel: bool,
    /// Whether channels open between GPUs only (`COLLECTIVES_INTERPOSE_CHANNEL=1`): on 2 ranks
    /// or more, its log must show a message through a channel where the machine has two GPUs
    /// or more (the check program puts neighbours on different ones), and none where it has
    /// one.
    pub channels_across: bool,
}

fn new_run(label: &str, device_build: bool, preload: bool, cuda_aware: bool) -> Run {
    Run {
        label: label.to_owned(),
        device_build,
        preload,
        cuda_aware,
        env: Vec::new(),
        args: Vec::new(),
        expect_log: false,
        expect_direct: false,
        expect_write: false,
        expect_channel: false,
        channels_across: false,
    }
}

impl Run {
    fn with(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        if key == "COLLECTIVES_INTERPOSE_LOG" && value == "1" {
            self.expect_log = true;
        }
        self
    }

    fn direct(mut self) -> Self {
        self.expect_direct = true;
        self
    }

    /// A direct run on device buffers: on 2 ranks or more its log must also show a send
    /// written into its receive's buffer.
    fn writes(mut self) -> Self {
        self.expect_write = true;
        self
    }

    /// A direct run with channels between any two ranks (`shared`): on 2 ranks or more its
    /// log must show a message through a channel.
    fn channels(mut self) -> Self {
        self.expect_channel = true;
        self.with("COLLECTIVES_INTERPOSE_CHANNEL", "shared")
    }

    /// A direct run with channels between GPUs only ([`Run::channels_across`]).
    fn channels_across(mut self) -> Self {
        self.channels_across = true;
        self.with("COLLECTIVES_INTERPOSE_CHANNEL", "1")
    }

    fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_owned());
        self
    }
}

/// The host flavour's runs; the first is the reference.
pub fn host_runs() -> Vec<Run> {
    vec![
        new_run("plain", false, false, false),
        new_run("preloaded", false, true, false),
        new_run("preloaded, host byte path", false, true, false)
            .with("COLLECTIVES_INTERPOSE_HOST_PACK", "1")
            .with("COLLECTIVES_INTERPOSE_LOG", "1"),
        new_run("preloaded, host byte path for sends", false, true, false)
            .with("COLLECTIVES_INTERPOSE_HOST_PACK", "send"),
        new_run("preloaded, host byte path for receives", false, true, false)
            .with("COLLECTIVES_INTERPOSE_HOST_PACK", "recv"),
        new_run(
            "preloaded, direct path carrying host bytes",
            false,
            true,
            false,
        )
        .with("COLLECTIVES_INTERPOSE_HOST_PACK", "1")
        .with("COLLECTIVES_INTERPOSE_DIRECT", "carry")
        .with("COLLECTIVES_INTERPOSE_LOG", "1")
        .direct(),
    ]
}

/// The device flavour's runs; the first (the host build, plain) is the reference.
pub fn device_runs(cuda_aware_mpirun: bool) -> Vec<Run> {
    let mut v = vec![
        new_run("host build, plain", false, false, false),
        new_run("device, preloaded, by the model", true, true, false)
            .arg("--host-mpi")
            .with("COLLECTIVES_INTERPOSE_LOG", "1"),
        new_run("device, preloaded, direct path", true, true, false)
            .arg("--host-mpi")
            .with("COLLECTIVES_INTERPOSE_DIRECT", "1")
            .with("COLLECTIVES_INTERPOSE_LOG", "1")
            .direct()
            .writes(),
        new_run(
            "device, preloaded, direct path, channels",
            true,
            true,
            false,
        )
        .arg("--host-mpi")
        .with("COLLECTIVES_INTERPOSE_DIRECT", "1")
        .with("COLLECTIVES_INTERPOSE_LOG", "1")
        .direct()
        .channels(),
        new_run("device, preloaded, one-shot", true, true, false)
            .arg("--host-mpi")
            .with("COLLECTIVES_INTERPOSE_METHOD", "one-shot"),
        new_run("device, preloaded, staged", true, true, false)
            .arg("--host-mpi")
            .with("COLLECTIVES_INTERPOSE_METHOD", "staged"),
    ];
    if cuda_aware_mpirun {
        v.extend([
            new_run("device, CUDA-aware MPI, plain", true, false, true),
            new_run(
                "device, CUDA-aware MPI, preloaded, by the model",
                true,
                true,
                true,
            )
            .with("COLLECTIVES_INTERPOSE_LOG", "1"),
            new_run(
                "device, CUDA-aware MPI, preloaded, device",
                true,
                true,
                true,
            )
            .with("COLLECTIVES_INTERPOSE_METHOD", "device"),
            new_run(
                "device, CUDA-aware MPI, preloaded, direct path",
                true,
                true,
                true,
            )
            .with("COLLECTIVES_INTERPOSE_DIRECT", "1")
            .with("COLLECTIVES_INTERPOSE_LOG", "1")
            .direct()
            .writes(),
            new_run(
                "device, CUDA-aware MPI, preloaded, direct path, channels where GPUs differ",
                true,
                true,
                true,
            )
            .with("COLLECTIVES_INTERPOSE_DIRECT", "1")
            .with("COLLECTIVES_INTERPOSE_LOG", "1")
            .direct()
            .channels_across(),
            new_run(
                "device, CUDA-aware MPI, preloaded, direct path, channels",
                true,
                true,
                true,
            )
            .with("COLLECTIVES_INTERPOSE_DIRECT", "1")
            .with("COLLECTIVES_INTERPOSE_LOG", "1")
            .direct()
            .channels(),
            new_run(
                "device, CUDA-aware MPI, preloaded, one-shot",
                true,
                true,
                true,
            )
            .with("COLLECTIVES_INTERPOSE_METHOD", "one-shot"),
            new_run(
                "device, CUDA-aware MPI, preloaded, staged",
                true,
                true,
                true,
            )
            .with("COLLECTIVES_INTERPOSE_METHOD", "staged"),
        ]);
    }
    v
}

/// The `sum` lines of a run's output, in order.
pub fn sums(output: &str) -> Vec<&str> {
    output
        .lines()
        .map(str::trim_end)
        .filter(|l| l.starts_with("sum "))
        .collect()
}

/// Where CUDA is: `$CUDA_HOME`, `$CUDA_PATH`, the prefix of `nvcc` on `PATH`, `/usr/local/cuda`.
pub fn cuda_home() -> PathBuf {
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            return PathBuf::from(v);
        }
    }
    host::which_in_path("nvcc")
        .and_then(|n| n.parent()?.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("/usr/local/cuda"))
}

/// The `mpicc` command line that builds `source` into `out` (the device build links the CUDA
/// runtime of `cuda`).
pub fn compile_args(source: &Path, out: &Path, cuda: Option<&Path>) -> Vec<String> {
    let mut a = vec!["-O2".to_owned(), "-o".to_owned(), out.display().to_string()];
    if let Some(c) = cuda {
        a.push("-DUSE_CUDA".to_owned());
        a.push(format!("-I{}", c.join("include").display()));
    }
    a.push(source.display().to_string());
    if let Some(c) = cuda {
        let lib = c.join("lib64");
        a.push(format!("-L{}", lib.display()));
        a.push(format!("-Wl,-rpath,{}", lib.display()));
        a.push("-lcudart".to_owned());
    }
    a
}

fn compile(source: &Path, out: &Path, cuda: Option<&Path>) -> Result<(), String> {
    let args = compile_args(source, out, cuda);
    println!("== mpicc {} ==", args.join(" "));
    let status = Command::new("mpicc")
        .args(&args)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run mpicc: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("mpicc {} failed ({status})", args.join(" ")))
    }
}

/// The library cargo builds for this workspace (`release` or debug).
fn build_library(root: &Path, release: bool) -> Result<PathBuf, String> {
    let jobs = jobs();
    let mut args = vec![
        "build",
        "-p",
        "collectives-interpose",
        "--lib",
        "-j",
        &jobs,
        "--message-format=json-render-diagnostics",
    ];
    if release {
        args.push("--release");
    }
    eprintln!("xtask: cargo {}", args.join(" "));
    let out = Command::new(cargo())
        .current_dir(root)
        .args(&args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo {} failed ({})", args.join(" "), out.status));
    }
    library_in_messages(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| format!("cargo built no {LIBRARY}"))
}

/// The release build of the library (what `gpu-stage` stages).
///
/// # Errors
/// The build fails.
pub fn release_library(root: &Path) -> Result<PathBuf, String> {
    build_library(root, true)
}

/// The path of [`LIBRARY`] among the `filenames` of cargo's JSON messages.
pub fn library_in_messages(stdout: &str) -> Option<PathBuf> {
    stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m.get("reason").and_then(|r| r.as_str()) == Some("compiler-artifact"))
        .filter_map(|m| m.get("filenames")?.as_array().cloned())
        .flatten()
        .filter_map(|f| f.as_str().map(PathBuf::from))
        .find(|f| f.file_name() == Some(OsStr::new(LIBRARY)))
}

/// The library's exported definitions that are not `MPI_*` functions (there must be none: the
/// Rust runtime, datatype-pack and the rsmpi shim stay hidden, and no `PMPI_*` is defined), or
/// `None` when `nm` is missing.
fn foreign_exports(so: &Path) -> Option<Result<Vec<String>, String>> {
    let nm = host::which_in_path("nm")?;
    let out = match Command::new(nm)
        .args(["-D", "--defined-only"])
        .arg(so)
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => o,
        Ok(o) => return Some(Err(format!("nm -D {}: {}", so.display(), o.status))),
        Err(e) => return Some(Err(format!("cannot run nm: {e}"))),
    };
    Some(Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| !s.starts_with("MPI_"))
        .map(str::to_owned)
        .collect()))
}

/// What the runs need.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The library to preload.
    pub library: PathBuf,
    /// The host build of the check program.
    pub host_exe: PathBuf,
    /// The device build, for the device flavour.
    pub device_exe: Option<PathBuf>,
    /// The CUDA-aware `mpirun`, if any.
    pub cuda_mpirun: Option<CudaMpirun>,
    /// Whether we run as root.
    pub as_root: bool,
    /// Limit of one launch.
    pub limit: Duration,
}

/// The launch of `r` at `ranks`.
pub fn launch(r: &Run, s: &Setup, ranks: u32) -> Option<Launch> {
    let exe = if r.device_build {
        s.device_exe.as_ref()?
    } else {
        &s.host_exe
    };
    let mut l = Launch::new(exe, &r.args, ranks, s.as_root, true);
    if r.cuda_aware {
        let c = s.cuda_mpirun.as_ref()?;
        l = l.with_program(&c.program);
        if let Some(p) = &c.ld_library_path {
            l.export("LD_LIBRARY_PATH", p);
        }
    }
    if r.preload {
        // Exported to the ranks only: mpirun itself runs without the library.
        l.options.push("-x".to_owned());
        l.options
            .push(format!("LD_PRELOAD={}", s.library.display()));
    }
    for (k, v) in &r.env {
        l.export(k, v);
    }
    Some(l)
}

/// Runs `runs` at each of `ranks` and counts them.
pub fn run_all(runs: &[Run], s: &Setup, ranks: &[u32]) -> Tally {
    let mut tally = Tally::default();
    let gpus = match gpu::detect() {
        gpu::Gpus::Found { count, .. } => count,
        gpu::Gpus::Absent { .. } => 0,
    };
    for &k in ranks {
        let mut reference: Option<(String, Vec<String>)> = None;
        for r in runs {
            let Some(l) = launch(r, s, k) else {
                tally.skip(
                    1,
                    format!("{} at n={k}: no build or launcher for it", r.label),
                );
                continue;
            };
            let what = format!("interpose_check n={k}, {}", r.label);
            println!("== {what}: {} ==", l.shell_line());
            let outcome = match exec::run_tee(l.command(), Some(s.limit), false) {
                Ok(o) => o,
                Err(e) => {
                    tally.fail(1, format!("{what}: cannot start mpirun: {e}"));
                    continue;
                }
            };
            let out = &outcome.output;
            let counted = mpirun::count_mpi_test(
                &what,
                parse_mpi_tests(out),
                outcome.success(),
                &outcome.describe(),
            );
            if counted.failed > 0 {
                print!("{out}");
            } else if let Some(line) = out.lines().rev().find(|l| l.contains("mpi-tests:")) {
                println!("{line}");
            }
            tally.absorb(counted);
            let got: Vec<String> = sums(out).into_iter().map(str::to_owned).collect();
            if r.expect_log {
                let lines = out.lines().filter(|l| l.contains(LOG_MARKER)).count();
                if lines > 0 && out.contains("unpacked") {
                    tally.pass(1);
                } else {
                    tally.fail(1, format!("{what}: no log of the interposer's byte path"));
                }
            }
            if r.expect_direct && k > 1 {
                let write = (WRITE_MARK, "no send wrote into its receive's buffer");
                let writes = r.expect_write.then_some(write);
                let channel = (CHANNEL_MARK, "no message came through a channel");
                let channels = r.expect_channel.then_some(channel);
                for (mark, missing) in DIRECT_MARKS.into_iter().chain(writes).chain(channels) {
                    if out.contains(mark) {
                        tally.pass(1);
                    } else {
                        tally.fail(1, format!("{what}: {missing}"));
                    }
                }
            }
            if r.channels_across && k > 1 && gpus > 0 {
                match (gpus > 1, out.contains(CHANNEL_MARK)) {
                    (true, false) => tally.fail(
                        1,
                        format!("{what}: no message came through a channel between {gpus} GPUs"),
                    ),
                    (false, true) => tally.fail(
                        1,
                        format!("{what}: a channel opened between the ranks of one GPU"),
                    ),
                    _ => tally.pass(1),
                }
            }
            match &reference {
                None => reference = Some((r.label.clone(), got)),
                Some((label, want)) => {
                    if !got.is_empty() && &got == want {
                        tally.pass(1);
                    } else {
                        let first = want
                            .iter()
                            .zip(&got)
                            .find(|(a, b)| a != b)
                            .map_or_else(String::new, |(a, b)| format!(": `{a}` vs `{b}`"));
                        tally.fail(
                            1,
                            format!(
                                "{what}: results differ from `{label}` ({} vs {} sums){first}",
                                want.len(),
                                got.len()
                            ),
                        );
                    }
                }
            }
        }
    }
    tally
}

/// The step of `cargo xtask test`: the host flavour at `ranks`, and the library's exports.
pub fn host_step(root: &Path, ranks: &[u32], as_root: bool) -> Step {
    let label = format!(
        "interposer: C program plain and under LD_PRELOAD (n={})",
        ranks
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    Step {
        label,
        tally: Some(host_tally(root, ranks, as_root)),
    }
}

fn host_tally(root: &Path, ranks: &[u32], as_root: bool) -> Tally {
    let mut tally = Tally::default();
    println!("== the interposer ==");
    let library = match build_library(root, false) {
        Ok(l) => l,
        Err(e) => {
            tally.fail(1, format!("interposer build: {e}"));
            return tally;
        }
    };
    match foreign_exports(&library) {
        None => tally.skip(1, "exports of the interposer: no `nm` (binutils)"),
        Some(Ok(v)) if v.is_empty() => tally.pass(1),
        Some(Ok(v)) => tally.fail(
            1,
            format!(
                "{LIBRARY} exports more than MPI_* functions: {}",
                v.join(" ")
            ),
        ),
        Some(Err(e)) => tally.fail(1, e),
    }
    let build = root.join("target").join("interpose");
    if let Err(e) = std::fs::create_dir_all(&build) {
        tally.fail(1, format!("cannot create {}: {e}", build.display()));
        return tally;
    }
    let exe = build.join("interpose_check");
    if let Err(e) = compile(&root.join(SOURCES).join(CHECK_SOURCE), &exe, None) {
        tally.fail(1, e);
        return tally;
    }
    let setup = Setup {
        library,
        host_exe: exe,
        device_exe: None,
        cuda_mpirun: None,
        as_root,
        limit: mpirun::timeout(),
    };
    tally.absorb(run_all(&host_runs(), &setup, ranks));
    tally.absorb(with_the_rust_library(root, &setup));
    tally
}

/// A Rust test binary of this workspace (rsmpi, libmpi, datatype-pack's own decoder) that
/// also builds, commits, decodes and frees datatypes, under `LD_PRELOAD` on 2 ranks: as it is,
/// and with the host byte path. Its own checks must pass: the library and the program share one
/// process without a symbol conflict.
pub const RUST_PROGRAM: &str = "mpi_datatype_decode";

fn with_the_rust_library(root: &Path, s: &Setup) -> Tally {
    let mut tally = Tally::default();
    let jobs = jobs();
    let built = crate::artifacts::build(
        &cargo(),
        root,
        &[
            "-p",
            crate::binaries::ROOT_PACKAGE,
            "--test",
            RUST_PROGRAM,
            "-j",
            &jobs,
        ],
    );
    let exe = match built {
        Ok(b) => b
            .into_iter()
            .find(|a| a.name == RUST_PROGRAM)
            .map(|a| a.executable),
        Err(e) => {
            tally.fail(1, format!("build of {RUST_PROGRAM}: {e}"));
            return tally;
        }
    };
    let Some(exe) = exe else {
        tally.fail(1, format!("cargo built no {RUST_PROGRAM}"));
        return tally;
    };
    for host_pack in ["0", "1"] {
        let mut l = Launch::new(&exe, &[], 2, s.as_root, true);
        l.options.push("-x".to_owned());
        l.options
            .push(format!("LD_PRELOAD={}", s.library.display()));
        l.export("COLLECTIVES_INTERPOSE_HOST_PACK", host_pack);
        l.export("COLLECTIVES_FUZZ_TYPES", "200");
        let what = format!("{RUST_PROGRAM} n=2 under LD_PRELOAD, host byte path {host_pack}");
        println!("== {what}: {} ==", l.shell_line());
        match exec::run_tee(l.command(), Some(s.limit), false) {
            Ok(o) => {
                let counted = mpirun::count_mpi_test(
                    &what,
                    parse_mpi_tests(&o.output),
                    o.success(),
                    &o.describe(),
                );
                if counted.failed > 0 {
                    print!("{}", o.output);
                }
                tally.absorb(counted);
            }
            Err(e) => tally.fail(1, format!("{what}: cannot start mpirun: {e}")),
        }
    }
    tally
}

/// The options of `xtask interpose`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// A staging directory (`.gpu-box`) holding `lib/` and `interpose/`, instead of building.
    pub staged: Option<PathBuf>,
    /// The device flavour.
    pub device: bool,
    /// Rank counts.
    pub ranks: Vec<u32>,
    /// The benchmark instead of the checks (device flavour, 2 ranks).
    pub bench: bool,
    /// With the benchmark: one more run of each preloaded one with the interposer's per-phase
    /// profile (`COLLECTIVES_INTERPOSE_PROFILE=1`), its tables on stderr.
    pub profile: bool,
}

/// Parses the arguments after `interpose`.
///
/// # Errors
/// A message naming the bad argument.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        staged: None,
        device: false,
        ranks: Vec::new(),
        bench: false,
        profile: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--staged" => {
                o.staged = Some(PathBuf::from(
                    it.next().ok_or("--staged needs a directory")?,
                ))
            }
            "--device" => o.device = true,
            "--bench" => {
                o.bench = true;
                o.device = true;
            }
            "--profile" => {
                o.profile = true;
                o.bench = true;
                o.device = true;
            }
            "--ranks" => {
                let list = it.next().ok_or("--ranks needs a list such as 2,4")?;
                for p in list.split(',').filter(|p| !p.is_empty()) {
                    match p.trim().parse::<u32>() {
                        Ok(k) if k > 0 => o.ranks.push(k),
                        _ => return Err(format!("bad rank count `{p}`")),
                    }
                }
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if o.ranks.is_empty() {
        o.ranks = if o.device { vec![2] } else { vec![1, 2, 3, 4] };
    }
    Ok(o)
}

/// `xtask interpose [--staged DIR] [--device] [--ranks LIST] [--bench] [--profile]`.
pub fn run(args: &[String]) -> ExitCode {
    let o = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("xtask interpose: {e}\n(see `cargo xtask help`)");
            return ExitCode::from(2);
        }
    };
    let as_root = host::is_root();
    let tally = if o.device || o.staged.is_some() {
        device_tally(&o, as_root)
    } else {
        host_tally(&workspace_root(), &o.ranks, as_root)
    };
    let steps = vec![Step {
        label: format!(
            "interposer: {} flavour",
            if o.device { "device" } else { "host" }
        ),
        tally: Some(tally),
    }];
    print!("{}", summary::render(&steps));
    if summary::total_failed(&steps) == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The device flavour as a summary step of the GPU suite: staged in `staged` (`.gpu-box`), or
/// built here.
pub fn device_step(staged: Option<&Path>, ranks: &[u32], as_root: bool) -> Step {
    let o = Options {
        staged: staged.map(Path::to_path_buf),
        device: true,
        ranks: ranks.to_vec(),
        bench: false,
        profile: false,
    };
    Step {
        label: format!(
            "interposer: C program on device buffers, plain and under LD_PRELOAD (n={})",
            ranks
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
        tally: Some(device_tally(&o, as_root)),
    }
}

fn device_tally(o: &Options, as_root: bool) -> Tally {
    let mut tally = Tally::default();
    let (library, sources, build) = match &o.staged {
        Some(dir) => (
            dir.join("lib").join(LIBRARY),
            dir.join("interpose"),
            dir.join("interpose").join("build"),
        ),
        None => {
            let root = workspace_root();
            match build_library(&root, false) {
                Ok(l) => (l, root.join(SOURCES), root.join("target").join("interpose")),
                Err(e) => {
                    tally.fail(1, format!("interposer build: {e}"));
                    return tally;
                }
            }
        }
    };
    if !library.is_file() {
        tally.fail(1, format!("{} is missing", library.display()));
        return tally;
    }
    if let Err(e) = std::fs::create_dir_all(&build) {
        tally.fail(1, format!("cannot create {}: {e}", build.display()));
        return tally;
    }
    let source = sources.join(CHECK_SOURCE);
    let host_exe = build.join("interpose_check");
    let device_exe = build.join("interpose_check_cuda");
    for (exe, cuda) in [(&host_exe, None), (&device_exe, Some(cuda_home()))] {
        if let Err(e) = compile(&source, exe, cuda.as_deref()) {
            tally.fail(1, e);
            return tally;
        }
    }
    let cuda_mpirun = match gpu::cuda_mpirun_from_env() {
        Ok(c) => c,
        Err(e) => {
            tally.fail(1, e);
            None
        }
    };
    if cuda_mpirun.is_none() {
        println!("no CUDA-aware mpirun (XTASK_CUDA_MPIRUN): its runs are left out");
    }
    if o.bench {
        let exe = build.join("interpose_bench");
        if let Err(e) = compile(&sources.join(BENCH_SOURCE), &exe, Some(&cuda_home())) {
            tally.fail(1, e);
            return tally;
        }
        let s = Setup {
            library,
            host_exe: exe.clone(),
            device_exe: Some(exe),
            cuda_mpirun,
            as_root,
            limit: mpirun::timeout(),
        };
        tally.absorb(bench(&s, o.profile));
        return tally;
    }
    let setup = Setup {
        library,
        host_exe,
        device_exe: Some(device_exe),
        cuda_mpirun,
        as_root,
        limit: mpirun::timeout(),
    };
    let runs = device_runs(setup.cuda_mpirun.is_some());
    tally.absorb(run_all(&runs, &setup, &o.ranks));
    tally
}

/// The least wall-clock limit of one benchmark launch.
pub const BENCH_TIMEOUT: Duration = Duration::from_secs(1200);

/// The variable that turns on the interposer's per-phase profile.
pub const PROFILE_VARIABLE: &str = "COLLECTIVES_INTERPOSE_PROFILE";

/// The benchmark's runs: under the CUDA-aware `mpirun` plain, preloaded, and preloaded with
/// the direct path (`COLLECTIVES_INTERPOSE_DIRECT=1`), under `mpirun` (not CUDA-aware)
/// preloaded; each `bench` line's median, side by side. With `profile`, each
/// preloaded run once more with the interposer's per-phase profile, whose tables (per rank, at
/// `MPI_Finalize`) break the fixed cost of a call down.
pub fn bench_runs(cuda_aware_mpirun: bool, profile: bool) -> Vec<Run> {
    let mut v = Vec::new();
    if cuda_aware_mpirun {
        v.push(new_run("CUDA-aware MPI", true, false, true));
        v.push(new_run("CUDA-aware MPI + interposer", true, true, true));
        v.push(
            new_run("CUDA-aware MPI + interposer, direct path", true, true, true)
                .with("COLLECTIVES_INTERPOSE_DIRECT", "1"),
        );
        v.push(
            new_run(
                "CUDA-aware MPI + interposer, direct path, channels",
                true,
                true,
                true,
            )
            .with("COLLECTIVES_INTERPOSE_DIRECT", "1")
            .with("COLLECTIVES_INTERPOSE_CHANNEL", "1"),
        );
    }
    v.push(new_run("MPI + interposer", true, true, false).arg("--host-mpi"));
    if profile {
        let profiled: Vec<Run> = v
            .iter()
            .filter(|r| r.preload)
            .map(|r| {
                let mut p = r.clone().with(PROFILE_VARIABLE, "1");
                p.label.push_str(", profiled");
                p
            })
            .collect();
        v.extend(profiled);
    }
    v
}

/// One benchmark result: `((call, object, bytes), median in microseconds)`.
pub type BenchRow = ((String, String, u64), f64);

/// `bench KIND NAME BYTES MEDIAN_US N [MEAN_US P90_US]` lines as [`BenchRow`]s (the median).
pub fn bench_lines(output: &str) -> Vec<BenchRow> {
    output
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if !(w.len() == 6 || w.len() == 8) || w[0] != "bench" {
                return None;
            }
            Some((
                (w[1].to_owned(), w[2].to_owned(), w[3].parse().ok()?),
                w[4].parse().ok()?,
            ))
        })
        .collect()
}

/// The markdown table of the runs' medians, one column per run, and the speed-up of the
/// second column over the first where both are there.
pub fn bench_table(labels: &[String], results: &[Vec<BenchRow>]) -> String {
    let mut keys: Vec<(String, String, u64)> = Vec::new();
    for r in results {
        for (k, _) in r {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
    }
    let mut t = format!(
        "| call | object | bytes | {} | speed-up |\n",
        labels.join(" (us) | ") + " (us)"
    );
    t.push_str(&format!(
        "|---|---|---:|{}---:|\n",
        "---:|".repeat(labels.len())
    ));
    for k in &keys {
        let cols: Vec<Option<f64>> = results
            .iter()
            .map(|r| r.iter().find(|(rk, _)| rk == k).map(|(_, v)| *v))
            .collect();
        let cells: Vec<String> = cols
            .iter()
            .map(|c| c.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}")))
            .collect();
        let speedup = match (
            cols.first().copied().flatten(),
            cols.get(1).copied().flatten(),
        ) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.1}x", a / b),
            _ => "-".to_owned(),
        };
        t.push_str(&format!(
            "| {} | {} | {} | {} | {speedup} |\n",
            k.0,
            k.1,
            k.2,
            cells.join(" | ")
        ));
    }
    t
}

fn bench(s: &Setup, profile: bool) -> Tally {
    let mut tally = Tally::default();
    let runs = bench_runs(s.cuda_mpirun.is_some(), profile);
    let mut labels = Vec::new();
    let mut results = Vec::new();
    for r in &runs {
        let Some(l) = launch(r, s, 2) else { continue };
        let what = format!("interpose_bench n=2, {}", r.label);
        println!("== {what}: {} ==", l.shell_line());
        // The plain run packs on the host, block by block: minutes where the interposer
        // takes milliseconds.
        let limit = s.limit.max(BENCH_TIMEOUT);
        match exec::run_tee(l.command(), Some(limit), true) {
            Ok(o) if o.success() => {
                tally.pass(1);
                labels.push(r.label.clone());
                results.push(bench_lines(&o.output));
            }
            Ok(o) => tally.fail(1, format!("{what}: {}", o.describe())),
            Err(e) => tally.fail(1, format!("{what}: cannot start mpirun: {e}")),
        }
    }
    print!("{}", bench_table(&labels, &results));
    tally
}

/// The text of `run-interpose.sh`, staged beside `run-all.sh`.
pub fn render_run_script() -> String {
    r#"#!/usr/bin/env bash
# The interposer's device checks, staged by `cargo xtask gpu-stage`: the C program
# interpose/interpose_check.c compiled here with mpicc (host and -DUSE_CUDA builds), run on
# device buffers under mpirun (not CUDA-aware) and the CUDA-aware mpirun, plain and with
# LD_PRELOAD=lib/libcollectives_interpose.so, results compared byte for byte.
#   bash .gpu-box/run-interpose.sh                 2 ranks
#   bash .gpu-box/run-interpose.sh --ranks 2,4     2 and 4 ranks
#   bash .gpu-box/run-interpose.sh --bench         the benchmark (2 ranks), plain and preloaded
#   bash .gpu-box/run-interpose.sh --profile       the same, and each preloaded run once more
#                                                  with the interposer's per-phase profile
# The last line is `N passed, M failed`.
set -u
here="${BASH_SOURCE[0]}"
case "$here" in */*) here="${here%/*}" ;; *) here=. ;; esac
box="$(cd "$here" && pwd)"
[ -e "$box/bin/xtask" ] || { [ -e "$box/bin/xtask.xz" ] && xz -dk "$box/bin/xtask.xz"; }
# As run-all.sh: the GPU machine's settings (env.sh unpacks the CUDA-aware Open MPI once) only
# where there is a GPU to run on.
if "$box/bin/xtask" gpu-suite --detect >/dev/null 2>&1; then
  if [ -f "$box/env.sh" ]; then
    # shellcheck source=/dev/null
    source "$box/env.sh"
  fi
  if [ -z "${XTASK_CUDA_MPIRUN:-}" ] && [ -x /opt/ompi-cuda/bin/mpirun ]; then
    export XTASK_CUDA_MPIRUN=/opt/ompi-cuda/bin/mpirun
  fi
else
  echo "run-interpose.sh: no GPU here; the device checks need one" >&2
fi
exec "$box/bin/xtask" interpose --staged "$box" --device "$@"
"#
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn runs_compare_against_a_plain_first_run() {
        for runs in [host_runs(), device_runs(false), device_runs(true)] {
            assert!(!runs[0].preload && !runs[0].device_build);
            assert!(runs[1..].iter().any(|r| r.expect_log));
            // The direct path is switched on, and checked for, in each flavour.
            assert!(runs[1..].iter().any(|r| r.expect_direct && r.expect_log));
        }
        assert_eq!(host_runs().len(), 6);
        assert_eq!(device_runs(false).len(), 6);
        assert_eq!(device_runs(true).len(), 14);
        // Without a CUDA-aware MPI the device build never runs plain, and always says so.
        assert!(device_runs(false)[1..]
            .iter()
            .all(|r| r.preload && r.args == ["--host-mpi"]));
    }

    #[test]
    fn preload_reaches_the_ranks_only() {
        let s = Setup {
            library: PathBuf::from("/x/libcollectives_interpose.so"),
            host_exe: PathBuf::from("/b/interpose_check"),
            device_exe: None,
            cuda_mpirun: None,
            as_root: false,
            limit: Duration::from_secs(1),
        };
        let runs = host_runs();
        let l = launch(&runs[2], &s, 2).unwrap();
        let line = l.shell_line();
        assert!(
            line.contains("-x LD_PRELOAD=/x/libcollectives_interpose.so"),
            "{line}"
        );
        assert!(line.contains("COLLECTIVES_INTERPOSE_HOST_PACK=1"), "{line}");
        assert!(l.env.iter().all(|(k, _)| k != "LD_PRELOAD"));
        assert!(!launch(&runs[0], &s, 2)
            .unwrap()
            .shell_line()
            .contains("LD_PRELOAD"));
        // The device build is missing here: its runs cannot launch.
        assert!(launch(&device_runs(false)[1], &s, 2).is_none());
    }

    #[test]
    fn sums_and_messages() {
        let out = "x\nsum a 01 02\n[collectives-interpose r0] y\nsum b 03\nmpi-tests: 2 passed, 0 failed\n";
        assert_eq!(sums(out), ["sum a 01 02", "sum b 03"]);
        let msg = r#"{"reason":"compiler-artifact","filenames":["/t/libcollectives_interpose.so","/t/libcollectives_interpose.rlib"]}"#;
        assert_eq!(
            library_in_messages(msg),
            Some(PathBuf::from("/t/libcollectives_interpose.so"))
        );
        assert_eq!(library_in_messages("{}"), None);
    }

    #[test]
    fn compile_lines() {
        let host = compile_args(Path::new("s.c"), Path::new("o"), None);
        assert_eq!(host, ["-O2", "-o", "o", "s.c"]);
        let dev = compile_args(Path::new("s.c"), Path::new("o"), Some(Path::new("/cuda")));
        assert!(dev.contains(&"-DUSE_CUDA".to_owned()) && dev.ends_with(&["-lcudart".to_owned()]));
        assert!(dev.contains(&"-Wl,-rpath,/cuda/lib64".to_owned()));
    }

    #[test]
    fn parses_options() {
        let o = parse_args(&[]).unwrap();
        assert_eq!(o.ranks, [1, 2, 3, 4]);
        assert!(!o.device && o.staged.is_none());
        let o = parse_args(&strings(&["--staged", ".gpu-box", "--device"])).unwrap();
        assert_eq!(o.ranks, [2]);
        assert_eq!(o.staged, Some(PathBuf::from(".gpu-box")));
        let o = parse_args(&strings(&["--device", "--ranks", "2,4"])).unwrap();
        assert_eq!(o.ranks, [2, 4]);
        assert!(parse_args(&strings(&["--ranks", "0"])).is_err());
        assert!(parse_args(&strings(&["--bogus"])).is_err());
        assert!(parse_args(&strings(&["--staged"])).is_err());
    }

    #[test]
    fn bench_table_side_by_side() {
        let a = bench_lines("bench MPI_Pack 2d-block-1 262144 7000.5 8\nbench MPI_Sendrecv face-x 512 100.0 3\nnoise\n");
        // With the mean and the 90th percentile after the count: the median is still read.
        let b = bench_lines("bench MPI_Pack 2d-block-1 262144 10.0 99 12.5 14.0\n");
        assert_eq!(a.len(), 2);
        let t = bench_table(&["plain".to_owned(), "preloaded".to_owned()], &[a, b]);
        assert!(
            t.contains("| MPI_Pack | 2d-block-1 | 262144 | 7000.5 | 10.0 | 700.0x |"),
            "{t}"
        );
        assert!(
            t.contains("| MPI_Sendrecv | face-x | 512 | 100.0 | - | - |"),
            "{t}"
        );
        assert!(t.starts_with("| call | object | bytes | plain (us) | preloaded (us) | speed-up |"));
        assert_eq!(bench_runs(false, false).len(), 1);
        assert_eq!(bench_runs(true, false).len(), 5);
        let o = parse_args(&strings(&["--bench"])).unwrap();
        assert!(o.bench && o.device && !o.profile);
        // The profile: each preloaded run once more, with the variable, after the timed ones.
        let runs = bench_runs(true, true);
        assert_eq!(runs.len(), 9);
        let profiled = |r: &Run| r.env.iter().any(|(k, _)| k == PROFILE_VARIABLE);
        assert!(runs[..5].iter().all(|r| !profiled(r)));
        assert!(runs[5..].iter().all(|r| r.preload
            && r.label.ends_with(", profiled")
            && r.env.last() == Some(&(PROFILE_VARIABLE.to_owned(), "1".to_owned()))));
        let o = parse_args(&strings(&["--profile"])).unwrap();
        assert!(o.bench && o.device && o.profile);
    }

    #[test]
    fn run_script_calls_the_staged_xtask() {
        let s = render_run_script();
        assert!(s.contains("interpose --staged \"$box\" --device \"$@\""));
        assert!(s.starts_with("#!/usr/bin/env bash"));
        // env.sh (which installs the CUDA-aware MPI) only where a GPU is found.
        let detect = s.find("gpu-suite --detect").unwrap();
        assert!(detect < s.find("source \"$box/env.sh\"").unwrap());
    }
}
