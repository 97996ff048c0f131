//! `cargo xtask fuzz`: the long runs of the two fuzzers, each with its count and wall-clock time,
//! ending with one `N passed, M failed` line.
//!
//! 1. Layouts: datatype-pack's `tests/fuzz_layouts.rs`, built in release, run with
//!    `COLLECTIVES_FUZZ_CASES` layouts against its element-by-element oracle.
//! 2. MPI datatypes: the root package's `tests/mpi_datatype_decode.rs` case `decode_fuzz` under
//!    `mpirun -n RANKS`, with `COLLECTIVES_FUZZ_TYPES` random nested datatypes decoded, packed and
//!    compared with `MPI_Pack` and `MPI_Unpack`.
//!
//! Each fuzzer prints how many cases it checked; a run that checked a different number than asked
//! counts as a failure, so a count that does not reach the binary cannot pass unnoticed.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use crate::artifacts::{self, Artifact};
use crate::binaries::ROOT_PACKAGE;
use crate::mpirun::{count_mpi_test, Launch};
use crate::results::{parse_mpi_tests, strip_ansi, tally_cargo_test};
use crate::summary::{self, Step, Tally};
use crate::{cargo, deps, exec, host, jobs, workspace_root};

/// Layouts generated when `--cases` is not given.
pub const DEFAULT_CASES: u64 = 1_000_000;

/// MPI datatypes generated when `--types` is not given.
pub const DEFAULT_TYPES: u64 = 10_000;

/// Ranks the datatype fuzzer runs on when `--ranks` is not given (it shares the types out).
pub const DEFAULT_RANKS: u32 = 2;

/// The package and test target of the layout fuzzer.
pub const LAYOUT_PACKAGE: &str = "datatype-pack";
/// See [`LAYOUT_PACKAGE`].
pub const LAYOUT_TEST: &str = "fuzz_layouts";

/// The multi-rank test binary and case of the datatype fuzzer.
pub const TYPES_TEST: &str = "mpi_datatype_decode";
/// See [`TYPES_TEST`].
pub const TYPES_CASE: &str = "decode_fuzz";

/// The layout fuzzer's line `fuzz-layouts: N cases passed in ...`: its prefix and the words
/// after the number.
pub const LAYOUTS_MARKER: (&str, &str) = ("fuzz-layouts: ", "cases passed");
/// The datatype fuzzer's line `fuzz-types: N types checked in ...`.
pub const TYPES_MARKER: (&str, &str) = ("fuzz-types: ", "types checked");

/// Wall-clock limit of the datatype fuzzer's `mpirun` when `XTASK_MPI_TIMEOUT` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// The command line of `cargo xtask fuzz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Layouts to generate (0 skips the layout fuzzer).
    pub cases: u64,
    /// MPI datatypes to generate (0 skips the datatype fuzzer).
    pub types: u64,
    /// The seed for both fuzzers; `None` keeps each one's default.
    pub seed: Option<u64>,
    /// Ranks for the datatype fuzzer.
    pub ranks: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cases: DEFAULT_CASES,
            types: DEFAULT_TYPES,
            seed: None,
            ranks: DEFAULT_RANKS,
        }
    }
}

/// A count: decimal digits, `_` allowed between them (`1_000_000`), or `0x` and hexadecimal
/// digits (for seeds).
pub fn parse_number(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, radix) = match text.strip_prefix("0x") {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    let valid = |c: char| c == '_' || c.is_digit(radix);
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || !digits.chars().all(valid)
    {
        return None;
    }
    u64::from_str_radix(&digits.replace('_', ""), radix).ok()
}

/// Parses the arguments after `fuzz`.
///
/// # Errors
/// A message naming the bad argument.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut options = Options::default();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        if !matches!(flag, "--cases" | "--types" | "--seed" | "--ranks") {
            return Err(format!("unknown argument `{arg}`"));
        }
        let value = match inline {
            Some(value) => value,
            None => iter
                .next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a number"))?,
        };
        let number =
            parse_number(&value).ok_or_else(|| format!("{flag}: `{value}` is not a number"))?;
        match flag {
            "--cases" => options.cases = number,
            "--types" => options.types = number,
            "--seed" => options.seed = Some(number),
            _ => {
                options.ranks = u32::try_from(number)
                    .ok()
                    .filter(|&k| k > 0)
                    .ok_or_else(|| format!("--ranks: `{value}` is not a rank count"))?;
            }
        }
    }
    Ok(options)
}

/// The number in the last line of `output` that contains `marker.0` followed by a number and
/// the words `marker.1` (`fuzz-layouts: 1000 cases passed in 2.1 s` gives 1000).
pub fn parse_fuzz_count(output: &str, marker: (&str, &str)) -> Option<u64> {
    output.lines().rev().find_map(|line| {
        let line = strip_ansi(line);
        let at = line.rfind(marker.0)?;
        let rest = line[at + marker.0.len()..].trim_start();
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number = rest[..end].parse().ok()?;
        rest[end..]
            .trim_start()
            .starts_with(marker.1)
            .then_some(number)
    })
}

/// Adds a failure to `tally` unless the fuzzer reported checking exactly `asked` cases.
pub fn check_count(tally: &mut Tally, what: &str, asked: u64, reported: Option<u64>) {
    match reported {
        Some(n) if n == asked => {}
        Some(n) => tally.fail(1, format!("{what}: checked {n} cases, {asked} asked for")),
        None => tally.fail(1, format!("{what}: no count reported ({asked} asked for)")),
    }
}

/// `N cases in S s`, for the summary.
fn label(name: &str, count: u64, unit: &str, elapsed: Duration) -> String {
    format!("{name}: {count} {unit} in {:.1} s", elapsed.as_secs_f64())
}

/// `cargo xtask fuzz ARGS`.
pub fn run(args: &[String]) -> ExitCode {
    let options = match parse_args(args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("xtask fuzz: {e}\n(see `cargo xtask help`)");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = deps::ensure() {
        eprintln!("xtask: {e}");
        return ExitCode::FAILURE;
    }
    let root = workspace_root();
    let seed = options.seed.map(|s| format!("{s:#x}"));
    let mut steps = Vec::new();
    if options.cases > 0 {
        steps.push(layouts(&root, options.cases, seed.as_deref()));
    } else {
        steps.push(Step {
            label: "fuzz layouts".to_owned(),
            tally: None,
        });
    }
    if options.types > 0 {
        steps.push(types(&root, options.types, options.ranks, seed.as_deref()));
    } else {
        steps.push(Step {
            label: "fuzz MPI datatypes".to_owned(),
            tally: None,
        });
    }
    print!("{}", summary::render(&steps));
    if summary::total_failed(&steps) == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The executable of the test target `name` among `built`.
fn test_binary(built: &[Artifact], name: &str) -> Option<std::path::PathBuf> {
    built
        .iter()
        .find(|a| a.name == name && a.is("test"))
        .map(|a| a.executable.clone())
}

/// Step 1: the layout fuzzer, built in release and run with `cases` layouts.
fn layouts(root: &Path, cases: u64, seed: Option<&str>) -> Step {
    let name = "fuzz layouts";
    let mut tally = Tally::default();
    let jobs = jobs();
    println!("== building {LAYOUT_PACKAGE} test {LAYOUT_TEST} (release) ==");
    let built = artifacts::build(
        &cargo(),
        root,
        &[
            "--release",
            "-p",
            LAYOUT_PACKAGE,
            "-j",
            &jobs,
            "--test",
            LAYOUT_TEST,
        ],
    );
    let exe = match built.map(|b| test_binary(&b, LAYOUT_TEST)) {
        Ok(Some(exe)) => exe,
        Ok(None) => {
            tally.fail(1, format!("{name}: cargo built no `{LAYOUT_TEST}` test"));
            return Step {
                label: name.to_owned(),
                tally: Some(tally),
            };
        }
        Err(e) => {
            tally.fail(1, format!("{name}: {e}"));
            return Step {
                label: name.to_owned(),
                tally: Some(tally),
            };
        }
    };
    let mut cmd = Command::new(&exe);
    cmd.current_dir(root.join("crates").join(LAYOUT_PACKAGE))
        .arg("--nocapture")
        .env("COLLECTIVES_FUZZ_CASES", cases.to_string());
    let mut shown = format!("COLLECTIVES_FUZZ_CASES={cases} ");
    if let Some(seed) = seed {
        cmd.env("COLLECTIVES_FUZZ_SEED", seed);
        shown.push_str(&format!("COLLECTIVES_FUZZ_SEED={seed} "));
    }
    println!("== {shown}{} --nocapture ==", exe.display());
    let started = Instant::now();
    let outcome = exec::run_tee(cmd, None, true);
    let elapsed = started.elapsed();
    match outcome {
        Ok(outcome) => {
            tally.absorb(tally_cargo_test(
                &outcome.output,
                outcome.success(),
                &outcome.describe(),
            ));
            if !outcome.success() && tally.failed == 0 {
                tally.fail(1, format!("{name}: {}", outcome.describe()));
            }
            let reported = parse_fuzz_count(&outcome.output, LAYOUTS_MARKER);
            if outcome.success() {
                check_count(&mut tally, name, cases, reported);
            }
        }
        Err(e) => tally.fail(1, format!("{name}: cannot run {}: {e}", exe.display())),
    }
    let label = label(name, cases, "cases", elapsed);
    println!("{label}");
    Step {
        label,
        tally: Some(tally),
    }
}

/// Step 2: the datatype fuzzer under `mpirun -n ranks`, with `types` datatypes.
fn types(root: &Path, types: u64, ranks: u32, seed: Option<&str>) -> Step {
    let name = "fuzz MPI datatypes";
    let mut tally = Tally::default();
    let jobs = jobs();
    println!("== building {ROOT_PACKAGE} test {TYPES_TEST} ==");
    let built = artifacts::build(
        &cargo(),
        root,
        &["-p", ROOT_PACKAGE, "-j", &jobs, "--test", TYPES_TEST],
    );
    let exe = match built.map(|b| test_binary(&b, TYPES_TEST)) {
        Ok(Some(exe)) => exe,
        Ok(None) => {
            tally.fail(1, format!("{name}: cargo built no `{TYPES_TEST}` test"));
            return Step {
                label: name.to_owned(),
                tally: Some(tally),
            };
        }
        Err(e) => {
            tally.fail(1, format!("{name}: {e}"));
            return Step {
                label: name.to_owned(),
                tally: Some(tally),
            };
        }
    };
    let mut launch = Launch::new(&exe, &[], ranks, host::is_root(), true);
    launch.set("MPI_TESTS_FILTER", TYPES_CASE);
    launch.set("COLLECTIVES_FUZZ_TYPES", &types.to_string());
    if let Some(seed) = seed {
        launch.set("COLLECTIVES_FUZZ_SEED", seed);
    }
    let limit = fuzz_timeout();
    let what = format!("mpirun -n {ranks} {TYPES_TEST} ({TYPES_CASE})");
    println!("== {} ==", launch.shell_line());
    let started = Instant::now();
    let outcome = exec::run_tee(launch.command(), Some(limit), true);
    let elapsed = started.elapsed();
    match outcome {
        Ok(outcome) => {
            let ended = if outcome.timed_out {
                format!("timeout after {} s", limit.as_secs())
            } else {
                outcome.describe()
            };
            let line = parse_mpi_tests(&outcome.output);
            tally.absorb(count_mpi_test(&what, line, outcome.success(), &ended));
            if outcome.success() {
                let reported = parse_fuzz_count(&outcome.output, TYPES_MARKER);
                check_count(&mut tally, name, types, reported);
            } else {
                println!("xtask: {ended}; rerun with: {}", launch.shell_line());
            }
        }
        Err(e) => tally.fail(1, format!("{what}: cannot start mpirun: {e}")),
    }
    let label = label(name, types, &format!("types on {ranks} ranks"), elapsed);
    println!("{label}");
    Step {
        label,
        tally: Some(tally),
    }
}

/// `$XTASK_MPI_TIMEOUT` seconds when set, else [`DEFAULT_TIMEOUT`] (the long run needs more than
/// a test launch's default).
fn fuzz_timeout() -> Duration {
    std::env::var("XTASK_MPI_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_options() {
        assert_eq!(
            parse_args(&[]).unwrap(),
            Options {
                cases: 1_000_000,
                types: 10_000,
                seed: None,
                ranks: 2
            }
        );
        let o = parse_args(&strings(&[
            "--cases",
            "2_000",
            "--types=30",
            "--seed",
            "0xFF",
            "--ranks",
            "4",
        ]))
        .unwrap();
        assert_eq!(
            o,
            Options {
                cases: 2000,
                types: 30,
                seed: Some(255),
                ranks: 4
            }
        );
        // The last of a repeated flag wins; zero skips a fuzzer.
        let o = parse_args(&strings(&["--cases", "5", "--cases=0", "--seed=12"])).unwrap();
        assert_eq!((o.cases, o.seed), (0, Some(12)));
        for bad in [
            &["--cases"][..],
            &["--cases", "many"],
            &["--cases", "-1"],
            &["--types", ""],
            &["--types="],
            &["--ranks", "0"],
            &["--ranks", "99999999999"],
            &["--seed", "0x"],
            &["--cases", "1_"],
            &["--case", "3"],
            &["-x"],
            &["10"],
        ] {
            assert!(parse_args(&strings(bad)).is_err(), "{bad:?}");
        }
        assert!(parse_args(&strings(&["--cases", "5", "extra"]))
            .unwrap_err()
            .contains("`extra`"));
    }

    #[test]
    fn parses_numbers() {
        assert_eq!(parse_number("1000000"), Some(1_000_000));
        assert_eq!(parse_number("1_000_000"), Some(1_000_000));
        assert_eq!(parse_number(" 42 "), Some(42));
        assert_eq!(parse_number("0x5eed_0001"), Some(0x5eed_0001));
        assert_eq!(parse_number("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "_1",
            "1_",
            "1e6",
            "0x",
            "0xg",
            "18446744073709551616",
            "+3",
        ] {
            assert_eq!(parse_number(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn finds_the_fuzzers_counts() {
        let layouts = "\
fuzz-layouts: seed 0xc011ec7155f022, 1000000 cases
fuzz-layouts: by kind {\"raw chain\": 5}
fuzz-layouts: 1000000 cases passed in 95.3 s (seed 0xc011ec7155f022)
test fuzz_layouts_against_the_oracle ... ok
";
        assert_eq!(parse_fuzz_count(layouts, LAYOUTS_MARKER), Some(1_000_000));
        // The announcement alone (a run that failed part way) reports no count.
        assert_eq!(
            parse_fuzz_count(
                "fuzz-layouts: seed 0x1, 1000 cases\npanicked\n",
                LAYOUTS_MARKER
            ),
            None
        );
        let types = "\
fuzz-types: seed 0x5eed, 2 ranks: 8255 decoded and compared with MPI_Pack, 1745 refused
\u{1b}[0mfuzz-types: 10000 types checked in 8.4 s
mpi-tests: 1 passed, 0 failed (0 skipped on 2 ranks)
";
        assert_eq!(parse_fuzz_count(types, TYPES_MARKER), Some(10_000));
        assert_eq!(parse_fuzz_count(types, LAYOUTS_MARKER), None);
        assert_eq!(parse_fuzz_count("", TYPES_MARKER), None);
        assert_eq!(
            parse_fuzz_count("fuzz-types: many types checked", TYPES_MARKER),
            None
        );
    }

    #[test]
    fn a_wrong_or_missing_count_fails() {
        let mut tally = Tally::default();
        check_count(&mut tally, "x", 10, Some(10));
        assert_eq!((tally.passed, tally.failed), (0, 0));
        check_count(&mut tally, "x", 10, Some(9));
        check_count(&mut tally, "x", 10, None);
        assert_eq!(tally.failed, 2);
        assert_eq!(
            tally.failures,
            [
                "x: checked 9 cases, 10 asked for",
                "x: no count reported (10 asked for)"
            ]
        );
    }

    #[test]
    fn labels_carry_count_and_time() {
        assert_eq!(
            label("fuzz layouts", 1000, "cases", Duration::from_millis(2345)),
            "fuzz layouts: 1000 cases in 2.3 s"
        );
    }
}
