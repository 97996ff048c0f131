//! Launching binaries under Open MPI's `mpirun`, and counting what they report.
//!
//! The contract with the binaries:
//! - an example passes when `mpirun` exits 0 at a given rank count, and fails otherwise;
//! - a multi-rank test binary (`tests/mpi_*.rs`, `harness = false`) prints on rank 0 a last line
//!   `mpi-tests: N passed, M failed`; its N and M are counted, and a non-zero exit, a timeout or a
//!   missing line counts as (at least) one failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::exec;
use crate::results::{parse_mpi_tests, MPI_TESTS_MARKER};
use crate::summary::Tally;

/// Wall-clock limit of one launch when `XTASK_MPI_TIMEOUT` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The per-launch limit: `$XTASK_MPI_TIMEOUT` seconds, else [`DEFAULT_TIMEOUT`].
pub fn timeout() -> Duration {
    match std::env::var("XTASK_MPI_TIMEOUT") {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(secs) if secs > 0 => Duration::from_secs(secs),
            _ => {
                eprintln!(
                    "xtask: ignoring XTASK_MPI_TIMEOUT={v:?} (want whole seconds > 0); using {} s",
                    DEFAULT_TIMEOUT.as_secs()
                );
                DEFAULT_TIMEOUT
            }
        },
        Err(_) => DEFAULT_TIMEOUT,
    }
}

/// What lets a rank leave an Open MPI job for real (`exit` without `MPI_Finalize`) without
/// `mpirun` ending the job: set for the test binaries whose name says a rank leaves.
pub const EXIT_WITHOUT_SYNC: (&str, &str) = ("OMPI_MCA_orte_allowed_exit_without_sync", "1");

/// Whether `exe` is a test binary in which one rank leaves the job (`*dead_peer*`).
pub fn leaves_the_job(exe: &Path) -> bool {
    exe.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains("dead_peer"))
}

/// One `mpirun` command line with its environment, kept as data so it can be shown and tested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The launcher: `mpirun` from `PATH` unless [`Launch::with_program`] chose another.
    pub program: PathBuf,
    /// The launcher's options (`-n 2`, `--oversubscribe`, `-x NAME`, ...).
    pub options: Vec<String>,
    /// The program to launch on every rank and its arguments.
    pub target: Vec<String>,
    /// Variables always set.
    pub env: Vec<(String, String)>,
    /// Variables set only when the caller's environment does not already set them.
    pub env_defaults: Vec<(String, String)>,
}

impl Launch {
    /// `mpirun -n RANKS [--allow-run-as-root] [--oversubscribe] EXE ARGS...`.
    ///
    /// `as_root` adds `--allow-run-as-root` and Open MPI's two root variables. `testing` adds
    /// `--oversubscribe` and defaults that keep test runs reliable in containers
    /// (oversubscription allowed, no CMA single-copy, which needs ptrace rights).
    pub fn new(exe: &Path, args: &[String], ranks: u32, as_root: bool, testing: bool) -> Self {
        let mut launch = Launch {
            program: PathBuf::from("mpirun"),
            options: vec!["-n".to_owned(), ranks.to_string()],
            target: Vec::new(),
            env: Vec::new(),
            env_defaults: Vec::new(),
        };
        if as_root {
            launch.options.push("--allow-run-as-root".to_owned());
            launch.set("OMPI_ALLOW_RUN_AS_ROOT", "1");
            launch.set("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        }
        if testing {
            launch.options.push("--oversubscribe".to_owned());
            for (key, value) in [
                ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
                ("OMPI_MCA_btl_vader_single_copy_mechanism", "none"),
            ] {
                launch.env_defaults.push((key.to_owned(), value.to_owned()));
            }
        }
        if testing && leaves_the_job(exe) {
            launch.set(EXIT_WITHOUT_SYNC.0, EXIT_WITHOUT_SYNC.1);
        }
        launch.target.push(exe.display().to_string());
        launch.target.extend(args.iter().cloned());
        launch
    }

    /// The same launch through another `mpirun` (a CUDA-aware Open MPI, say).
    #[must_use]
    pub fn with_program(mut self, program: &Path) -> Self {
        self.program = program.to_path_buf();
        self
    }

    /// Every argument after the launcher: its options, then the program and its arguments.
    pub fn args(&self) -> Vec<String> {
        self.options.iter().chain(&self.target).cloned().collect()
    }

    /// Sets `key=value` for the launched processes.
    pub fn set(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Sets `key=value` and also passes it with `-x key`, so that ranks started on other nodes
    /// (or by a launcher that does not pass its whole environment on) see it too.
    pub fn export(&mut self, key: &str, value: &str) {
        self.set(key, value);
        let exported = self.options.windows(2).any(|w| w[0] == "-x" && w[1] == key);
        if !exported {
            self.options.push("-x".to_owned());
            self.options.push(key.to_owned());
        }
    }

    /// The command to spawn.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(self.args());
        for (key, value) in &self.env_defaults {
            if std::env::var_os(key).is_none() {
                cmd.env(key, value);
            }
        }
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        cmd
    }

    /// The command as a shell line (forced variables first), to show or to paste.
    pub fn shell_line(&self) -> String {
        let mut words: Vec<String> = self
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", shell_quote(v)))
            .collect();
        words.push(shell_quote(&self.program.display().to_string()));
        words.extend(self.args().iter().map(|a| shell_quote(a)));
        words.join(" ")
    }
}

/// `word` as one shell word: unchanged when it is plain, else in single quotes.
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// What kind of binary a launch runs, which decides how it is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An example: one pass or one failure per launch, by exit status.
    Example,
    /// A `tests/mpi_*` binary: counted from its `mpi-tests:` line.
    MpiTest,
}

/// A binary to launch at several rank counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    /// The target name, used in headers and failure names.
    pub name: String,
    /// The executable.
    pub path: PathBuf,
    /// How its launches are counted.
    pub kind: Kind,
}

impl Binary {
    /// Whether it runs with `COLLECTIVES_CHECK=1` (its name contains `checked`).
    pub fn checked(&self) -> bool {
        self.name.contains("checked")
    }
}

/// The tally of one multi-rank test launch named `what`, from its parsed `mpi-tests:` line,
/// whether it succeeded, and how it ended (`exit 1`, `timeout`, ...).
pub fn count_mpi_test(what: &str, line: Option<(u64, u64)>, ok: bool, ended: &str) -> Tally {
    let mut tally = Tally::default();
    match line {
        Some((passed, failed)) => {
            tally.pass(passed);
            if failed > 0 {
                tally.fail(failed, format!("{what}: {failed} failed ({ended})"));
            } else if !ok {
                tally.fail(1, format!("{what}: {ended} after reporting no failures"));
            }
        }
        None if ok => tally.fail(1, format!("{what}: no `{}` line", MPI_TESTS_MARKER.trim())),
        None => tally.fail(1, format!("{what}: {ended}")),
    }
    tally
}

/// Runs `binary` under `mpirun -n ranks`, echoing its output under a header, and counts it.
pub fn run_binary(binary: &Binary, ranks: u32, as_root: bool, limit: Duration) -> Tally {
    let mut launch = Launch::new(&binary.path, &[], ranks, as_root, true);
    if binary.checked() {
        launch.set("COLLECTIVES_CHECK", "1");
    }
    let what = format!("mpirun -n {ranks} {}", binary.name);
    println!("== {what} ==");
    let outcome = match exec::run_tee(launch.command(), Some(limit), true) {
        Ok(outcome) => outcome,
        Err(e) => {
            let mut tally = Tally::default();
            tally.fail(1, format!("{what}: cannot start mpirun: {e}"));
            return tally;
        }
    };
    let ok = outcome.success();
    let ended = if outcome.timed_out {
        format!("timeout after {} s", limit.as_secs())
    } else {
        outcome.describe()
    };
    let tally = match binary.kind {
        Kind::Example => {
            let mut tally = Tally::default();
            if ok {
                tally.pass(1);
            } else {
                tally.fail(1, format!("{what}: {ended}"));
            }
            tally
        }
        Kind::MpiTest => count_mpi_test(&what, parse_mpi_tests(&outcome.output), ok, &ended),
    };
    if tally.failed > 0 {
        println!("xtask: {ended}; rerun with: {}", launch.shell_line());
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_line_for_root_tests() {
        let launch = Launch::new(Path::new("/t/ex"), &[], 3, true, true);
        assert_eq!(
            launch.args(),
            ["-n", "3", "--allow-run-as-root", "--oversubscribe", "/t/ex"]
        );
        assert_eq!(
            launch.shell_line(),
            "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
             mpirun -n 3 --allow-run-as-root --oversubscribe /t/ex"
        );
        let keys: Vec<&str> = launch
            .env_defaults
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "OMPI_MCA_rmaps_base_oversubscribe",
                "OMPI_MCA_btl_vader_single_copy_mechanism"
            ]
        );
    }

    #[test]
    fn a_rank_may_leave_only_the_dead_peer_tests() {
        let dead = Launch::new(Path::new("/t/mpi_dead_peer-0123"), &[], 2, true, true);
        assert!(dead.env.contains(&(
            EXIT_WITHOUT_SYNC.0.to_owned(),
            EXIT_WITHOUT_SYNC.1.to_owned()
        )));
        let other = Launch::new(Path::new("/t/mpi_deadline-0123"), &[], 2, true, true);
        assert!(other.env.iter().all(|(k, _)| k != EXIT_WITHOUT_SYNC.0));
    }

    #[test]
    fn launch_line_for_user_bench() {
        let args = vec!["allreduce".to_owned(), "-e".to_owned(), "64M".to_owned()];
        let mut launch = Launch::new(Path::new("/r/collbench"), &args, 2, false, false);
        assert_eq!(
            launch.args(),
            ["-n", "2", "/r/collbench", "allreduce", "-e", "64M"]
        );
        assert!(launch.env.is_empty() && launch.env_defaults.is_empty());
        launch.set("COLLECTIVES_CHECK", "1");
        launch.set("COLLECTIVES_CHECK", "1");
        assert_eq!(launch.env.len(), 1);
        assert_eq!(
            Launch::new(Path::new("/a b/x"), &[], 1, false, false).shell_line(),
            "mpirun -n 1 '/a b/x'"
        );
    }

    #[test]
    fn exports_go_before_the_program_once() {
        let args = vec!["--flag".to_owned()];
        let mut launch = Launch::new(Path::new("/t/bin"), &args, 2, false, false)
            .with_program(Path::new("/opt/m pi/bin/mpirun"));
        launch.export("HALO_EXPECT_IPC", "1");
        launch.export("HALO_EXPECT_IPC", "1");
        launch.export("LD_LIBRARY_PATH", "/opt/lib:/usr/lib");
        assert_eq!(
            launch.args(),
            [
                "-n",
                "2",
                "-x",
                "HALO_EXPECT_IPC",
                "-x",
                "LD_LIBRARY_PATH",
                "/t/bin",
                "--flag"
            ]
        );
        assert_eq!(
            launch.shell_line(),
            "HALO_EXPECT_IPC=1 LD_LIBRARY_PATH=/opt/lib:/usr/lib '/opt/m pi/bin/mpirun' \
             -n 2 -x HALO_EXPECT_IPC -x LD_LIBRARY_PATH /t/bin --flag"
        );
        let cmd = launch.command();
        assert_eq!(cmd.get_program(), "/opt/m pi/bin/mpirun");
        let envs: Vec<_> = cmd.get_envs().collect();
        assert!(envs.contains(&(
            std::ffi::OsStr::new("HALO_EXPECT_IPC"),
            Some(std::ffi::OsStr::new("1"))
        )));
    }

    #[test]
    fn counts_mpi_test_launches() {
        let clean = count_mpi_test("x", Some((5, 0)), true, "exit 0");
        assert_eq!((clean.passed, clean.failed), (5, 0));
        let some_failed = count_mpi_test("x", Some((3, 2)), false, "exit 1");
        assert_eq!((some_failed.passed, some_failed.failed), (3, 2));
        let crashed_after = count_mpi_test("x", Some((4, 0)), false, "exit 1");
        assert_eq!((crashed_after.passed, crashed_after.failed), (4, 1));
        let hung = count_mpi_test("x", None, false, "timeout after 5 s");
        assert_eq!((hung.passed, hung.failed), (0, 1));
        assert_eq!(hung.failures, ["x: timeout after 5 s"]);
        let silent = count_mpi_test("x", None, true, "exit 0");
        assert_eq!((silent.passed, silent.failed), (0, 1));
    }

    #[test]
    fn checked_examples_are_recognised() {
        let b = |name: &str| Binary {
            name: name.to_owned(),
            path: PathBuf::from("/x"),
            kind: Kind::Example,
        };
        assert!(b("05_checked_mismatch").checked());
        assert!(!b("01_all_reduce").checked());
    }
}
