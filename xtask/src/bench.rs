//! `cargo xtask bench`: system dependencies, a release build of `collbench`, then
//! `mpirun -n 2 collbench allreduce --backend all` on this machine.

use std::process::ExitCode;

use crate::mpirun::Launch;
use crate::{artifacts, cargo, deps, host, jobs, workspace_root};

/// The package that builds `collbench`.
pub const BENCH_PACKAGE: &str = "bench-cli";

/// The benchmark binary.
pub const BENCH_BINARY: &str = "collbench";

/// Ranks the benchmark runs with.
pub const BENCH_RANKS: u32 = 2;

/// Sizes swept when no arguments are given: 8 B to 64 MiB, doubling.
pub const DEFAULT_SWEEP: [&str; 6] = ["-b", "8", "-e", "64M", "-f", "2"];

/// collbench's arguments: `allreduce --backend all`, then `extra` (a leading `--` dropped),
/// or the default sweep when `extra` is empty.
pub fn collbench_args(extra: &[String]) -> Vec<String> {
    let extra = match extra.first() {
        Some(first) if first == "--" => &extra[1..],
        _ => extra,
    };
    let mut args: Vec<String> = ["allreduce", "--backend", "all"]
        .map(str::to_owned)
        .to_vec();
    if extra.is_empty() {
        args.extend(DEFAULT_SWEEP.map(str::to_owned));
    } else {
        args.extend(extra.iter().cloned());
    }
    args
}

/// `cargo xtask bench ARGS`: exits with collbench's status.
pub fn run(extra: &[String]) -> ExitCode {
    if let Err(e) = deps::ensure() {
        eprintln!("xtask: {e}");
        return ExitCode::FAILURE;
    }
    let jobs = jobs();
    let built = match artifacts::build(
        &cargo(),
        &workspace_root(),
        &["--release", "-j", &jobs, "-p", BENCH_PACKAGE],
    ) {
        Ok(built) => built,
        Err(e) => {
            eprintln!("xtask: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(exe) = built
        .iter()
        .find(|a| a.name == BENCH_BINARY && a.is("bin"))
        .map(|a| a.executable.clone())
    else {
        eprintln!("xtask: cargo built no `{BENCH_BINARY}` binary");
        return ExitCode::FAILURE;
    };
    let launch = Launch::new(
        &exe,
        &collbench_args(extra),
        BENCH_RANKS,
        host::is_root(),
        false,
    );
    println!("== {} ==", launch.shell_line());
    match launch.command().status() {
        Ok(status) => match status.code() {
            Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            None => {
                eprintln!("xtask: mpirun ended by {status}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("xtask: cannot run mpirun: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_given_arguments() {
        assert_eq!(
            collbench_args(&[]).join(" "),
            "allreduce --backend all -b 8 -e 64M -f 2"
        );
        let given = ["--", "-b", "1K", "-e", "1M"].map(str::to_owned);
        assert_eq!(
            collbench_args(&given).join(" "),
            "allreduce --backend all -b 1K -e 1M"
        );
        assert_eq!(
            collbench_args(&given[1..]).join(" "),
            "allreduce --backend all -b 1K -e 1M"
        );
    }
}
