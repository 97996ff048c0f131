//! `cargo xtask test`: system dependencies, `cargo test` over the workspace, then every example
//! and every `tests/mpi_*` binary of the root package under `mpirun -n K` for each rank count K,
//! then the MPI interposer's C checks plain and under `LD_PRELOAD` (`interpose`), then the
//! Python module's pytest suite (`python`), then the same across two network-namespace
//! nodes (`netns`) and under a one-machine Slurm (`slurm`), then, where a GPU is present, the GPU
//! suite (`gpu_suite`), then the README's set-up in a fresh Debian root (`fresh`), ending with one
//! `N passed, M failed` line.

use std::io::IsTerminal;
use std::path::Path;
use std::process::{Command, ExitCode};

use crate::artifacts;
use crate::binaries::{select, ROOT_PACKAGE};
use crate::mpirun::{self, Kind};
use crate::summary::{self, Step, Tally};
use crate::{
    cargo, deps, exec, fresh, gpu_suite, host, interpose, jobs, netns, python, results, slurm,
    workspace_root,
};

/// Rank counts used when `--ranks` is not given.
pub const DEFAULT_RANKS: [u32; 4] = [1, 2, 3, 4];

/// The command line of `cargo xtask test`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Rank counts to launch each binary with.
    pub ranks: Vec<u32>,
    /// Skip the `cargo test` step.
    pub skip_unit: bool,
    /// Skip the GPU suite even where a GPU is present.
    pub skip_gpu: bool,
    /// Skip the two-node stage (`netns`).
    pub skip_nodes: bool,
    /// Skip the one-machine Slurm stage (`slurm`).
    pub skip_slurm: bool,
    /// Skip the fresh Debian root stage.
    pub skip_fresh: bool,
    /// Arguments after `--`, passed to `cargo test`.
    pub cargo_args: Vec<String>,
}

/// Parses the arguments after `test`.
///
/// # Errors
/// A message naming the bad argument.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        ranks: DEFAULT_RANKS.to_vec(),
        skip_unit: false,
        skip_gpu: false,
        skip_nodes: false,
        skip_slurm: false,
        skip_fresh: false,
        cargo_args: Vec::new(),
    };
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--" => {
                options.cargo_args.extend(iter.by_ref().cloned());
            }
            "--skip-unit" => options.skip_unit = true,
            "--skip-gpu" => options.skip_gpu = true,
            "--skip-nodes" => options.skip_nodes = true,
            "--skip-slurm" => options.skip_slurm = true,
            "--skip-fresh" => options.skip_fresh = true,
            "--ranks" => {
                let list = iter.next().ok_or("--ranks needs a list such as 1,2")?;
                options.ranks = parse_ranks(list)?;
            }
            other => match other.strip_prefix("--ranks=") {
                Some(list) => options.ranks = parse_ranks(list)?,
                None => return Err(format!("unknown argument `{other}`")),
            },
        }
    }
    Ok(options)
}

/// `[1, 2, 4]` -> `1,2,4`.
fn rank_list(ranks: &[u32]) -> String {
    ranks
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `1,2,4` -> `[1, 2, 4]`; duplicates dropped, order kept.
fn parse_ranks(list: &str) -> Result<Vec<u32>, String> {
    let mut ranks = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<u32>() {
            Ok(k) if k > 0 => {
                if !ranks.contains(&k) {
                    ranks.push(k);
                }
            }
            _ => return Err(format!("bad rank count `{part}` in --ranks {list}")),
        }
    }
    if ranks.is_empty() {
        return Err(format!("--ranks {list} names no rank count"));
    }
    Ok(ranks)
}

/// `cargo xtask test ARGS`.
pub fn run(args: &[String]) -> ExitCode {
    let options = match parse_args(args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("xtask test: {e}\n(see `cargo xtask help`)");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = deps::ensure() {
        eprintln!("xtask: {e}");
        return ExitCode::FAILURE;
    }
    let root = workspace_root();
    let as_root = host::is_root();
    let ranks_label = rank_list(&options.ranks);

    let mut steps = vec![Step {
        label: "cargo test".to_owned(),
        tally: (!options.skip_unit).then(|| cargo_test(&root, &options.cargo_args, as_root)),
    }];

    steps.push(Step {
        label: "criterion benches (test mode)".to_owned(),
        tally: (!options.skip_unit).then(|| bench_test(&root)),
    });

    steps.push(Step {
        label: "cargo doc (warnings are errors)".to_owned(),
        tally: (!options.skip_unit).then(|| cargo_doc(&root)),
    });

    let (examples, tests) = multi_rank(&root, &options.ranks, as_root);
    steps.push(Step {
        label: format!("mpirun examples (n={ranks_label})"),
        tally: Some(examples),
    });
    steps.push(Step {
        label: format!("mpirun tests (n={ranks_label})"),
        tally: Some(tests),
    });
    steps.push(Step {
        label: format!("mpirun collbench (n={ranks_label})"),
        tally: Some(collbench_runs(&root, &options.ranks, as_root)),
    });
    steps.push(interpose::host_step(&root, &options.ranks, as_root));
    steps.push(python::step(&root, &options.ranks, &ranks_label, as_root));
    if options.skip_nodes {
        println!("two-node stage skipped (--skip-nodes)");
        steps.extend(netns::skipped_steps());
    } else {
        steps.extend(netns::steps(&root, as_root));
    }
    if options.skip_slurm {
        println!("Slurm stage skipped (--skip-slurm)");
        steps.push(Step {
            label: slurm::LABEL.to_owned(),
            tally: None,
        });
    } else {
        steps.extend(slurm::steps(&root, as_root));
    }
    if options.skip_gpu {
        println!("GPU suite skipped (--skip-gpu)");
        steps.push(Step {
            label: "GPU suite".to_owned(),
            tally: None,
        });
    } else {
        steps.extend(gpu_suite::local_steps(
            &root,
            as_root,
            &gpu_suite::Options::default(),
        ));
    }

    let fresh_label = "fresh Debian root: the README's set-up".to_owned();
    if options.skip_fresh {
        println!("fresh Debian root skipped (--skip-fresh)");
        steps.push(Step {
            label: fresh_label,
            tally: None,
        });
    } else {
        let mut reports = Vec::new();
        let tally = fresh::stage(fresh::Options::default(), &mut reports);
        if !reports.is_empty() {
            print!("{}", fresh::render_reports(&reports));
        }
        steps.push(Step {
            label: fresh_label,
            tally,
        });
    }

    print!("{}", summary::render(&steps));
    if summary::total_failed(&steps) == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Step 2: `cargo test --workspace -jN --no-fail-fast EXTRA`, counted from the summaries the
/// test binaries print.
fn cargo_test(root: &Path, extra: &[String], as_root: bool) -> Tally {
    let jobs = jobs();
    let mut cmd = Command::new(cargo());
    cmd.current_dir(root)
        .args(["test", "--workspace", "-j", &jobs, "--no-fail-fast"])
        .args(extra);
    if std::io::stderr().is_terminal() && std::env::var_os("CARGO_TERM_COLOR").is_none() {
        cmd.env("CARGO_TERM_COLOR", "always");
    }
    if as_root {
        // Multi-rank test binaries also run here, as single-process MPI jobs.
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    let shown = ["cargo test --workspace -j", &jobs, "--no-fail-fast"]
        .into_iter()
        .chain(extra.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    println!("== {shown} ==");
    let outcome = match exec::run_tee(cmd, None, true) {
        Ok(outcome) => outcome,
        Err(e) => {
            let mut tally = Tally::default();
            tally.fail(1, format!("cargo test: cannot run cargo: {e}"));
            return tally;
        }
    };
    results::tally_cargo_test(&outcome.output, outcome.success(), &outcome.describe())
}

/// The command line of [`bench_test`] after `cargo`.
pub fn bench_test_args(jobs: &str) -> Vec<String> {
    [
        "test",
        "--workspace",
        "--bench",
        "*",
        "-j",
        jobs,
        "--no-fail-fast",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Step 2a: every criterion bench of the workspace in test mode (`cargo test --bench '*'`: each
/// benchmark runs once, unmeasured), which plain `cargo test` neither builds nor runs. `--bench '*'`
/// rather than `--benches`, which would also run every library's unit tests again. Counted by
/// [`results::tally_criterion_test`]; a GPU bench on a machine without a GPU says it was skipped.
fn bench_test(root: &Path) -> Tally {
    let args = bench_test_args(&jobs());
    let mut cmd = Command::new(cargo());
    cmd.current_dir(root).args(&args);
    println!("== cargo {} ==", args.join(" ").replace(" * ", " '*' "));
    match exec::run_tee(cmd, None, true) {
        Ok(outcome) => {
            results::tally_criterion_test(&outcome.output, outcome.success(), &outcome.describe())
        }
        Err(e) => {
            let mut tally = Tally::default();
            tally.fail(1, format!("cargo test --bench: cannot run cargo: {e}"));
            tally
        }
    }
}

/// Step 2b: `cargo doc --workspace --no-deps` with rustdoc's warnings as errors (broken or private
/// links, bad code blocks), one check.
fn cargo_doc(root: &Path) -> Tally {
    let jobs = jobs();
    let mut cmd = Command::new(cargo());
    cmd.current_dir(root)
        .args(["doc", "--workspace", "--no-deps", "-j", &jobs])
        .env("RUSTDOCFLAGS", "-D warnings");
    println!("== RUSTDOCFLAGS=\"-D warnings\" cargo doc --workspace --no-deps -j {jobs} ==");
    let mut tally = Tally::default();
    match exec::run_tee(cmd, None, true) {
        Ok(outcome) if outcome.success() => tally.pass(1),
        Ok(outcome) => tally.fail(
            1,
            format!(
                "cargo doc: rustdoc warnings or errors ({})",
                outcome.describe()
            ),
        ),
        Err(e) => tally.fail(1, format!("cargo doc: cannot run cargo: {e}")),
    }
    tally
}

/// Step 3: build the root package's examples and tests, then launch each example and each
/// `mpi_*` test at every rank count. Returns the examples' and the tests' tallies.
fn multi_rank(root: &Path, ranks: &[u32], as_root: bool) -> (Tally, Tally) {
    let mut examples = Tally::default();
    let mut tests = Tally::default();
    let jobs = jobs();
    println!("== building {ROOT_PACKAGE} examples and tests ==");
    let built = artifacts::build(
        &cargo(),
        root,
        &["-p", ROOT_PACKAGE, "-j", &jobs, "--examples", "--tests"],
    );
    let built = match built {
        Ok(built) => built,
        Err(e) => {
            examples.fail(1, format!("build of examples and tests: {e}"));
            return (examples, tests);
        }
    };
    let gpu_wanted = std::env::var("COLLECTIVES_GPU_EXAMPLES").is_ok_and(|v| v == "1");
    let (binaries, skipped) = select(&built, &root.join("Cargo.toml"), gpu_wanted);
    for name in &skipped {
        println!(
            "skipping GPU example {name} here (the GPU suite runs it; \
             COLLECTIVES_GPU_EXAMPLES=1 runs it at these rank counts too)"
        );
    }
    let count = |kind| binaries.iter().filter(|b| b.kind == kind).count();
    println!(
        "{} examples and {} multi-rank test binaries, each at n={}",
        count(Kind::Example),
        count(Kind::MpiTest),
        rank_list(ranks)
    );
    let limit = mpirun::timeout();
    for binary in &binaries {
        for &k in ranks {
            let tally = mpirun::run_binary(binary, k, as_root, limit);
            match binary.kind {
                Kind::Example => examples.absorb(tally),
                Kind::MpiTest => tests.absorb(tally),
            }
        }
    }
    (examples, tests)
}

/// Small, checked runs of every `collbench` subcommand that runs on host MPI: each must exit 0
/// (which it does only with no wrong value), at each of `ranks` (p2p from 2 ranks). Every
/// collective runs its `persistent` variant beside the library's call (`--persistent`), so that
/// the persistent plans are checked too.
pub fn collbench_commands(ranks: u32) -> Vec<Vec<String>> {
    let small = [
        "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1", "-c", "1",
    ];
    let mut v: Vec<Vec<&str>> = crate::bench::COLLECTIVES
        .iter()
        .map(|c| [&["coll", c][..], &small[..], &["--persistent"][..]].concat())
        .collect();
    v.push(
        [
            &[
                "allreduce",
                "--baseline",
                "raw",
                "--checked-cost",
                "--format",
                "csv",
            ][..],
            &small[..],
        ]
        .concat(),
    );
    v.push(vec![
        "allreduce",
        "--osu",
        "-m",
        "1:1K",
        "-i",
        "2",
        "-x",
        "1",
        "-f",
        "-c",
    ]);
    v.push(vec!["doctor"]);
    if ranks >= 2 {
        v.push(vec![
            "p2p", "-b", "1", "-e", "4K", "-f", "16", "-n", "5", "-w", "1", "--window", "8", "-c",
            "1",
        ]);
    }
    v.into_iter()
        .map(|c| c.into_iter().map(str::to_owned).collect())
        .collect()
}

/// Step 4: build `collbench` and launch [`collbench_commands`] at every rank count.
fn collbench_runs(root: &Path, ranks: &[u32], as_root: bool) -> Tally {
    let mut tally = Tally::default();
    let jobs = jobs();
    println!("== building collbench ==");
    let built = artifacts::build(&cargo(), root, &["-p", "bench-cli", "-j", &jobs, "--bins"]);
    let exe = match built {
        Ok(built) => built
            .into_iter()
            .find(|a| a.name == crate::bench::BENCH_BINARY && a.is("bin"))
            .map(|a| a.executable),
        Err(e) => {
            tally.fail(1, format!("build of collbench: {e}"));
            return tally;
        }
    };
    let Some(exe) = exe else {
        tally.fail(1, "cargo built no collbench binary".to_owned());
        return tally;
    };
    let limit = mpirun::timeout();
    for &k in ranks {
        for args in collbench_commands(k) {
            let launch = mpirun::Launch::new(&exe, &args, k, as_root, true);
            let what = format!("mpirun -n {k} collbench {}", args.join(" "));
            println!("== {what} ==");
            match exec::run_tee(launch.command(), Some(limit), false) {
                Ok(outcome) if outcome.success() => tally.pass(1),
                Ok(outcome) => {
                    print!("{}", outcome.output);
                    tally.fail(1, format!("{what}: {}", outcome.describe()));
                }
                Err(e) => tally.fail(1, format!("{what}: cannot start mpirun: {e}")),
            }
        }
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn collbench_runs_every_collective_checked() {
        let one = collbench_commands(1);
        assert_eq!(one.len(), crate::bench::COLLECTIVES.len() + 3);
        assert!(one.iter().all(|c| !c.contains(&"p2p".to_owned())));
        let two = collbench_commands(2);
        assert_eq!(two.len(), one.len() + 1);
        assert_eq!(two[0][..2], ["coll", "allreduce"]);
        assert!(two[..14]
            .iter()
            .all(|c| c.windows(2).any(|w| w == ["-c", "1"])));
        assert!(two[..14]
            .iter()
            .all(|c| c.contains(&"--persistent".to_owned())));
    }

    #[test]
    fn parses_options() {
        assert_eq!(
            parse_args(&[]).unwrap(),
            Options {
                ranks: vec![1, 2, 3, 4],
                skip_unit: false,
                skip_gpu: false,
                skip_nodes: false,
                skip_slurm: false,
                skip_fresh: false,
                cargo_args: vec![]
            }
        );
        let o = parse_args(&strings(&[
            "--ranks",
            "2,1,2",
            "--skip-unit",
            "--skip-gpu",
            "--skip-nodes",
            "--skip-fresh",
            "--",
            "-p",
            "x",
            "--ranks",
        ]))
        .unwrap();
        assert_eq!(o.ranks, [2, 1]);
        assert!(o.skip_unit && o.skip_gpu && o.skip_nodes && !o.skip_slurm);
        assert!(o.skip_unit && o.skip_gpu && o.skip_fresh);
        assert_eq!(o.cargo_args, ["-p", "x", "--ranks"]);
        assert_eq!(parse_args(&strings(&["--ranks=3"])).unwrap().ranks, [3]);
        for bad in [
            &["--ranks"][..],
            &["--ranks", "0"],
            &["--ranks", "a"],
            &["--ranks", ","],
            &["-x"],
        ] {
            assert!(parse_args(&strings(bad)).is_err(), "{bad:?}");
        }
    }
}
