//! `cargo xtask bench`: system dependencies, a release build of `collbench`, then every collective
//! under `mpirun -n 2` on every backend available here (`--backend all`: host `mpi` always, the
//! device backends where a GPU is), leaving the tables, the JSON and the SVG plots in one results
//! folder, `results/<UTC date-time>/` (ignored by git), whose path it prints at the end.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::mpirun::Launch;
use crate::{artifacts, cargo, deps, host, jobs, workspace_root};

/// The package that builds `collbench`.
pub const BENCH_PACKAGE: &str = "bench-cli";

/// The benchmark binary.
pub const BENCH_BINARY: &str = "collbench";

/// Ranks the benchmark runs with.
pub const BENCH_RANKS: u32 = 2;

/// The collectives run, by `collbench coll` name (`allreduce` through its own subcommand).
pub const COLLECTIVES: [&str; 14] = [
    "allreduce",
    "allgather",
    "allgatherv",
    "reducescatter",
    "broadcast",
    "reduce",
    "alltoall",
    "alltoallv",
    "gather",
    "gatherv",
    "scatter",
    "scatterv",
    "sendrecv",
    "barrier",
];

/// Sizes and iterations when no arguments are given: 8 B to 4 MiB, times 4, 20 calls after 5: every
/// collective in a few minutes on a 2-core machine.
pub const DEFAULT_SWEEP: [&str; 10] = ["-b", "8", "-e", "4M", "-f", "4", "-n", "20", "-w", "5"];

/// collbench's arguments for `collective`: the collective on `--backend all`, then `extra` (a
/// leading `--` dropped) or the default sweep when `extra` is empty, then the output files in `dir`.
pub fn collbench_args(collective: &str, extra: &[String], dir: &Path) -> Vec<String> {
    let extra = match extra.first() {
        Some(first) if first == "--" => &extra[1..],
        _ => extra,
    };
    let mut args: Vec<String> = if collective == "allreduce" {
        vec!["allreduce".into()]
    } else {
        vec!["coll".into(), collective.into()]
    };
    args.extend(["--backend".into(), "all".into()]);
    if extra.is_empty() {
        args.extend(DEFAULT_SWEEP.map(str::to_owned));
    } else {
        args.extend(extra.iter().cloned());
    }
    let file = |ext: &str| {
        dir.join(format!("{collective}.{ext}"))
            .display()
            .to_string()
    };
    args.extend([
        "--output".into(),
        file("txt"),
        "--json".into(),
        file("json"),
    ]);
    args
}

/// `secs` after 1970 as `YYYY-MM-DDTHH-MM-SSZ` (UTC), a folder name that sorts by time.
pub fn utc_stamp(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}-{:02}-{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// `cargo xtask bench ARGS`: fails when a collective fails (wrong values included) or the plots
/// cannot be drawn.
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
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let dir: PathBuf = workspace_root().join("results").join(utc_stamp(now));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("xtask: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let mut failed = Vec::new();
    let mut json = Vec::new();
    for collective in COLLECTIVES {
        let launch = Launch::new(
            &exe,
            &collbench_args(collective, extra, &dir),
            BENCH_RANKS,
            host::is_root(),
            false,
        );
        println!("== {} ==", launch.shell_line());
        let ok = match launch.command().status() {
            Ok(status) => status.success(),
            Err(e) => {
                eprintln!("xtask: cannot run mpirun: {e}");
                return ExitCode::FAILURE;
            }
        };
        let table = dir.join(format!("{collective}.txt"));
        if let Ok(text) = std::fs::read_to_string(&table) {
            print!("{text}");
        }
        if ok {
            json.push(dir.join(format!("{collective}.json")));
        } else {
            failed.push(collective);
        }
    }
    let mut plot = std::process::Command::new(&exe);
    plot.arg("plot").args(&json).arg("-o").arg(&dir);
    println!(
        "== {BENCH_BINARY} plot {}/*.json -o {} ==",
        dir.display(),
        dir.display()
    );
    let plotted = !json.is_empty() && plot.status().is_ok_and(|s| s.success());
    println!(
        "results: {} (a table, a JSON file and bandwidth and latency plots per collective)",
        dir.display()
    );
    if failed.is_empty() && plotted {
        ExitCode::SUCCESS
    } else {
        if !failed.is_empty() {
            eprintln!("xtask: failed: {}", failed.join(", "));
        }
        if !plotted {
            eprintln!("xtask: the plots were not drawn");
        }
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_given_arguments() {
        let dir = Path::new("/r");
        assert_eq!(
            collbench_args("allreduce", &[], dir).join(" "),
            "allreduce --backend all -b 8 -e 4M -f 4 -n 20 -w 5 --output /r/allreduce.txt --json /r/allreduce.json"
        );
        let given = ["--", "-b", "1K", "-e", "1M"].map(str::to_owned);
        assert_eq!(
            collbench_args("gather", &given, dir).join(" "),
            "coll gather --backend all -b 1K -e 1M --output /r/gather.txt --json /r/gather.json"
        );
        assert_eq!(
            collbench_args("gather", &given[1..], dir),
            collbench_args("gather", &given, dir)
        );
    }

    #[test]
    fn folder_names_are_utc_date_times() {
        assert_eq!(utc_stamp(0), "1970-01-01T00-00-00Z");
        assert_eq!(utc_stamp(951_782_400), "2000-02-29T00-00-00Z");
        assert_eq!(utc_stamp(1_795_503_723), "2026-11-24T07-02-03Z");
    }
}
