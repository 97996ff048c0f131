//! The Python stage of `cargo xtask test`: a virtualenv under `target/`, mpi4py, NumPy, pytest
//! and maturin from PyPI, the `collectives` module built into it (`maturin develop`, a debug
//! build), then pytest under `mpirun -n K` for each rank count, counted from the
//! `mpi-tests: N passed, M failed` line the tests' `conftest.py` prints on rank 0 (a test passes
//! when it passed on every rank). Skipped, with one line saying why, where `python3 -m venv`
//! cannot work (Debian's `python3-venv` missing and not installable here).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::mpirun::{self, Launch};
use crate::results::parse_mpi_tests;
use crate::summary::{Step, Tally};
use crate::{deps, exec, host, jobs};

/// The virtualenv, under the workspace's `target/` (rebuilt by nothing else, kept between runs).
pub const VENV: &str = "target/python-venv";

/// What the tests need from PyPI.
pub const PACKAGES: [&str; 4] = ["mpi4py", "numpy", "pytest", "maturin"];

/// The crate of the module (its `pyproject.toml`).
pub const CRATE: &str = "crates/collectives-py";

/// The pytest suite, run from the workspace root.
pub const TESTS: &str = "crates/collectives-py/tests";

/// The step's label for rank counts `ranks_label` (`1,2,3,4`).
pub fn label(ranks_label: &str) -> String {
    format!("pytest under mpirun (n={ranks_label})")
}

/// The whole stage as one step of the summary.
pub fn step(root: &Path, ranks: &[u32], ranks_label: &str, as_root: bool) -> Step {
    println!("== python: module and pytest ==");
    let python = match usable_python(as_root) {
        Ok(python) => python,
        Err(why) => {
            println!("python stage skipped: {why}");
            return Step {
                label: label(ranks_label),
                tally: None,
            };
        }
    };
    Step {
        label: label(ranks_label),
        tally: Some(run(root, &python, ranks, as_root)),
    }
}

/// `python3` from `PATH` when it can make a virtualenv (`cargo xtask deps` installs Debian's
/// `python3-venv` as root, from its row in [`deps::PROGRAMS`]); otherwise why not.
fn usable_python(_as_root: bool) -> Result<PathBuf, String> {
    let python = host::which_in_path("python3").ok_or("no python3 on PATH")?;
    if can_make_venv(&python) {
        return Ok(python);
    }
    let venv = deps::PROGRAMS
        .iter()
        .find(|p| p.name == "python3" && !p.works_with.is_empty())
        .expect("deps::PROGRAMS has python3's venv row");
    let package = match venv.source {
        deps::Source::Apt(package) => package,
        deps::Source::Elsewhere(from) => from,
    };
    Err(format!(
        "`{} -m venv` is not available (install it: {})",
        python.display(),
        deps::install_hint(&[package])
    ))
}

/// Whether `python -m venv` can work (Debian's python3 lacks `ensurepip` without python3-venv).
fn can_make_venv(python: &Path) -> bool {
    quiet(Command::new(python).args(["-c", "import venv, ensurepip"]))
}

/// Runs `cmd` with its output discarded; whether it exited 0.
fn quiet(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `cmd` with its output shown; `Err` naming `what` when it fails.
fn shown(cmd: &mut Command, what: &str) -> Result<(), String> {
    println!("== {what} ==");
    match cmd.stdin(Stdio::null()).status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{what}: {s}")),
        Err(e) => Err(format!("{what}: cannot start: {e}")),
    }
}

/// The virtualenv with [`PACKAGES`] and the module built into it; its python.
fn prepare(root: &Path, python: &Path) -> Result<PathBuf, String> {
    let venv = root.join(VENV);
    let vpython = venv.join("bin/python");
    if !vpython.exists() {
        shown(
            Command::new(python).args(["-m", "venv"]).arg(&venv),
            &format!("{} -m venv {VENV}", python.display()),
        )?;
    }
    let imports = "import mpi4py, numpy, pytest, maturin";
    if !quiet(Command::new(&vpython).args(["-c", imports])) {
        shown(
            Command::new(&vpython)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(PACKAGES),
            &format!("pip install {}", PACKAGES.join(" ")),
        )?;
    }
    shown(
        Command::new(venv.join("bin/maturin"))
            .args(["develop", "--quiet"])
            .current_dir(root.join(CRATE))
            .env("VIRTUAL_ENV", &venv)
            .env("CARGO_BUILD_JOBS", jobs()),
        &format!("maturin develop ({CRATE}, debug build)"),
    )?;
    Ok(vpython)
}

/// Build, then pytest at every rank count.
fn run(root: &Path, python: &Path, ranks: &[u32], as_root: bool) -> Tally {
    let mut tally = Tally::default();
    let vpython = match prepare(root, python) {
        Ok(p) => p,
        Err(e) => {
            tally.fail(1, format!("python stage: {e}"));
            return tally;
        }
    };
    let limit = mpirun::timeout();
    for &k in ranks {
        let launch = pytest_launch(&vpython, k, as_root);
        let what = format!("mpirun -n {k} pytest {TESTS}");
        println!("== {what} ==");
        let mut cmd = launch.command();
        cmd.current_dir(root);
        match exec::run_tee(cmd, Some(limit), true) {
            Ok(outcome) => {
                let ended = if outcome.timed_out {
                    format!("timeout after {} s", limit.as_secs())
                } else {
                    outcome.describe()
                };
                let t = mpirun::count_mpi_test(
                    &what,
                    parse_mpi_tests(&outcome.output),
                    outcome.success(),
                    &ended,
                );
                if t.failed > 0 {
                    println!("xtask: {ended}; rerun with: {}", launch.shell_line());
                }
                tally.absorb(t);
            }
            Err(e) => tally.fail(1, format!("{what}: cannot start mpirun: {e}")),
        }
    }
    tally
}

/// `mpirun -n K VENV/bin/python -m pytest TESTS` (no cache or bytecode written into the tree,
/// no colours).
pub fn pytest_launch(vpython: &Path, ranks: u32, as_root: bool) -> Launch {
    // Open MPI gives the ranks a pseudo-terminal: no colour codes in the logs.
    let args = [
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--color=no",
        TESTS,
    ]
    .map(str::to_owned);
    let mut launch = Launch::new(vpython, &args, ranks, as_root, true);
    launch.set("PYTHONDONTWRITEBYTECODE", "1");
    launch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_runs_the_suite_under_mpirun_without_writing_caches() {
        let launch = pytest_launch(Path::new("/r/target/python-venv/bin/python"), 3, false);
        assert_eq!(
            launch.args(),
            [
                "-n",
                "3",
                "--oversubscribe",
                "/r/target/python-venv/bin/python",
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "--color=no",
                TESTS
            ]
        );
        assert!(launch
            .env
            .contains(&("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned())));
        assert_eq!(label("1,2"), "pytest under mpirun (n=1,2)");
    }
}
