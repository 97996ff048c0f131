//! Reading what test binaries print: libtest's `test result:` summary lines (one per test binary
//! and one per crate's doc-tests), the `mpi-tests: N passed, M failed` line of multi-rank test
//! binaries, and cargo's `error: test failed, to rerun pass ...` lines (one per failing target).

use crate::summary::Tally;

/// Passed and failed counts of one `test result: ok. N passed; M failed; ...` line, or `None`
/// for any other line. Colour escapes are ignored.
pub fn parse_result_line(line: &str) -> Option<(u64, u64)> {
    let line = strip_ansi(line);
    let rest = line.trim().strip_prefix("test result: ")?;
    // `ok. 3 passed; 0 failed; ...` or `FAILED. 1 passed; 2 failed; ...`
    let (_, counts) = rest.split_once(". ")?;
    let mut passed = None;
    let mut failed = None;
    for field in counts.split(';') {
        let mut words = field.split_whitespace();
        let (Some(number), Some(label)) = (words.next(), words.next()) else {
            continue;
        };
        match label {
            "passed" => passed = number.parse().ok(),
            "failed" => failed = number.parse().ok(),
            _ => {}
        }
    }
    Some((passed?, failed?))
}

/// The marker that starts a multi-rank test binary's summary line.
pub const MPI_TESTS_MARKER: &str = "mpi-tests: ";

/// `(N, M)` from one `mpi-tests: N passed, M failed` line, or `None` for any other line.
///
/// The marker may follow other text on the line (output of several ranks can interleave), and
/// text after `failed` is ignored (`mpi-tests: 5 passed, 0 failed (2 skipped on 1 ranks)`).
pub fn parse_mpi_tests_line(line: &str) -> Option<(u64, u64)> {
    let line = strip_ansi(line);
    let at = line.rfind(MPI_TESTS_MARKER)?;
    let mut words = line[at + MPI_TESTS_MARKER.len()..].split_whitespace();
    let passed = words.next()?.parse().ok()?;
    (words.next()? == "passed,").then_some(())?;
    let failed = words.next()?.parse().ok()?;
    let label = words.next()?;
    (label.trim_end_matches(|c: char| c.is_ascii_punctuation()) == "failed").then_some(())?;
    Some((passed, failed))
}

/// `(N, M)` from the last `mpi-tests:` line in `output`.
pub fn parse_mpi_tests(output: &str) -> Option<(u64, u64)> {
    output.lines().rev().find_map(parse_mpi_tests_line)
}

/// Names of failing tests, from libtest's `test some::name ... FAILED` lines.
pub fn failed_names(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|line| {
            let line = strip_ansi(line);
            let name = line
                .trim_end()
                .strip_prefix("test ")?
                .strip_suffix(" ... FAILED")?;
            Some(name.to_owned())
        })
        .collect()
}

/// The targets cargo reports as failed (`-p x --test y`, `-p x --doc`), in order, without repeats.
pub fn failed_targets(output: &str) -> Vec<String> {
    let mut targets: Vec<String> = Vec::new();
    for line in output.lines() {
        let line = strip_ansi(line);
        let Some(at) = line.find("failed, to rerun pass `") else {
            continue;
        };
        let rest = &line[at + "failed, to rerun pass `".len()..];
        if let Some((target, _)) = rest.split_once('`') {
            if !targets.iter().any(|t| t == target) {
                targets.push(target.to_owned());
            }
        }
    }
    targets
}

/// The tally of a whole `cargo test` run from its output, whether it exited 0, and how it ended.
///
/// A test that printed a [`crate::deps::SKIP_MARKER`] line counts as skipped, not passed.
///
/// Passes and failures are summed over libtest's summaries and the `mpi-tests:` lines of
/// multi-rank test binaries (which `cargo test` runs as single-process jobs). A failing target
/// that printed no failing summary (a crash, or a binary that reports neither way) adds one
/// failure, and so does a failed run that reported nothing failing at all (a build error).
pub fn tally_cargo_test(output: &str, success: bool, ended: &str) -> Tally {
    let mut tally = Tally::default();
    let mut failing_summaries = 0;
    let summaries = output
        .lines()
        .filter_map(|line| parse_result_line(line).or_else(|| parse_mpi_tests_line(line)));
    for (passed, failed) in summaries {
        tally.passed += passed;
        tally.failed += failed;
        failing_summaries += usize::from(failed > 0);
    }
    tally.failures = failed_names(output)
        .into_iter()
        .map(|name| format!("cargo test: {name}"))
        .collect();
    // A test that skipped itself for want of a program passed in libtest's eyes.
    for line in output.lines().map(strip_ansi) {
        if let Some(at) = line.find(crate::deps::SKIP_MARKER) {
            tally.passed = tally.passed.saturating_sub(1);
            let why = &line[at + crate::deps::SKIP_MARKER.len()..];
            tally.skip(1, format!("cargo test: {}", why.trim()));
        }
    }
    let targets = failed_targets(output);
    let unexplained = targets.len().saturating_sub(failing_summaries);
    if unexplained > 0 {
        tally.fail(
            unexplained as u64,
            format!(
                "cargo test: {unexplained} failing target(s) reported no failing test (a crash?); \
                 failing targets: {}",
                targets.join(", ")
            ),
        );
    } else if !targets.is_empty() {
        tally.failures.push(format!(
            "cargo test: failing targets: {}",
            targets.join(", ")
        ));
    } else if !success && tally.failed == 0 {
        tally.fail(
            1,
            format!("cargo test: {ended} with no failing test reported (a build error?)"),
        );
    }
    tally
}

/// The marker a criterion bench prints, and exits 0, when this machine cannot run it (no GPU).
pub const BENCH_SKIPPED: &str = ": skipped: ";

/// The tally of `cargo test --bench '*'` (criterion benches in test mode, each benchmark run once)
/// from its output, whether it exited 0, and how it ended.
///
/// Each benchmark that ran is one pass (criterion prints `Success` after it); a bench binary that
/// said it was skipped (`NAME: skipped: WHY`, exit status 0) is one pass too, and its line is kept
/// as a note. A failing target adds one failure (criterion stops at the first panic), and so does a
/// failed run with no failing target (a build error).
pub fn tally_criterion_test(output: &str, success: bool, ended: &str) -> Tally {
    let mut tally = Tally::default();
    for line in output.lines().map(strip_ansi) {
        let line = line.trim();
        if line == "Success" {
            tally.pass(1);
        } else if let Some((name, _)) = line.split_once(BENCH_SKIPPED) {
            if !name.is_empty() && !name.contains(' ') {
                tally.pass(1);
            }
        }
    }
    let targets = failed_targets(output);
    for target in &targets {
        tally.fail(1, format!("cargo test --bench: {target} failed"));
    }
    if !success && targets.is_empty() {
        tally.fail(
            1,
            format!("cargo test --bench: {ended} with no failing bench reported (a build error?)"),
        );
    }
    tally
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ok_and_failed_summaries() {
        assert_eq!(
            parse_result_line(
                "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s"
            ),
            Some((12, 0))
        );
        assert_eq!(
            parse_result_line(
                "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.20s"
            ),
            Some((3, 2))
        );
        assert_eq!(
            parse_result_line("\u{1b}[32mtest result: ok\u{1b}[0m. 0 passed; 0 failed; 0 ignored"),
            Some((0, 0))
        );
    }

    #[test]
    fn ignores_other_lines() {
        assert_eq!(parse_result_line("test foo ... ok"), None);
        assert_eq!(parse_result_line("running 3 tests"), None);
        assert_eq!(parse_result_line("test result: garbage"), None);
        assert_eq!(parse_result_line("mpi-tests: 1 passed, 0 failed"), None);
    }

    #[test]
    fn sums_over_binaries_and_doc_tests() {
        let output = "\
running 2 tests
test a ... ok
test b ... FAILED
test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

   Doc-tests collectives
running 4 tests
test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.30s
";
        let tally = tally_cargo_test(output, false, "exit 101");
        assert_eq!((tally.passed, tally.failed), (5, 1));
        assert_eq!(failed_names(output), vec!["b".to_owned()]);
    }

    #[test]
    fn parses_the_mpi_tests_line() {
        assert_eq!(
            parse_mpi_tests("hello\nmpi-tests: 12 passed, 0 failed\n"),
            Some((12, 0))
        );
        assert_eq!(
            parse_mpi_tests("rank 1 saysmpi-tests: 3 passed, 2 failed\nbye\n"),
            Some((3, 2))
        );
        assert_eq!(
            parse_mpi_tests("mpi-tests: 1 passed, 0 failed\nmpi-tests: 2 passed, 1 failed\n"),
            Some((2, 1))
        );
        assert_eq!(
            parse_mpi_tests("mpi-tests: 5 passed, 4 failed (6 skipped on 1 ranks)\n"),
            Some((5, 4))
        );
        assert_eq!(parse_mpi_tests("mpi-tests: many passed, 0 failed"), None);
        assert_eq!(parse_mpi_tests("mpi-tests: 1 passed 0 failed"), None);
        assert_eq!(parse_mpi_tests("mpi-tests: 1 passed, 0 failedx"), None);
        assert_eq!(
            parse_mpi_tests("test result: ok. 1 passed; 0 failed;"),
            None
        );
        assert_eq!(parse_mpi_tests(""), None);
    }

    #[test]
    fn failing_targets_count_once_unless_their_summaries_did() {
        let output = "\
     Running tests/mpi_partial.rs (target/debug/deps/mpi_partial-d166)
mpi-tests: 1 passed, 1 failed
error: test failed, to rerun pass `-p collectives --test mpi_partial`
     Running tests/unit.rs (target/debug/deps/unit-49ad)
test bad ... FAILED
test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.09s
error: test failed, to rerun pass `-p collectives --test unit`
error: 2 targets failed:
    `-p collectives --test mpi_partial`
    `-p collectives --test unit`
";
        assert_eq!(
            failed_targets(output),
            [
                "-p collectives --test mpi_partial",
                "-p collectives --test unit"
            ]
        );
        let tally = tally_cargo_test(output, false, "exit 101");
        assert_eq!((tally.passed, tally.failed), (2, 2));
        assert_eq!(
            tally.failures,
            [
                "cargo test: bad",
                "cargo test: failing targets: -p collectives --test mpi_partial, \
                 -p collectives --test unit"
            ]
        );

        let crashed = "\
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s
error: test failed, to rerun pass `-p collectives --test mpi_crash`
";
        let tally = tally_cargo_test(crashed, false, "exit 101");
        assert_eq!((tally.passed, tally.failed), (3, 1));
        assert!(tally.failures[0].contains("reported no failing test"));
    }

    #[test]
    fn build_errors_and_clean_runs() {
        let broken =
            "error[E0425]: cannot find value `x`\nerror: could not compile `collectives`\n";
        let tally = tally_cargo_test(broken, false, "exit 101");
        assert_eq!((tally.passed, tally.failed), (0, 1));
        let clean = "test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let tally = tally_cargo_test(clean, true, "exit 0");
        assert_eq!((tally.passed, tally.failed), (4, 0));
        assert!(tally.failures.is_empty());
    }

    #[test]
    fn tests_that_skipped_themselves_are_not_passes() {
        let out = "running 2 tests\n\
                   xtask-skipped: gpu_stage::tests::xz: no `xz` on PATH; `xz` (xz-utils) is used by gpu-stage\n\
                   test gpu_stage::tests::xz ... ok\ntest other ... ok\n\
                   test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let tally = tally_cargo_test(out, true, "exit 0");
        assert_eq!((tally.passed, tally.failed, tally.skipped), (1, 0, 1));
        assert_eq!(
            tally.skips,
            ["cargo test: gpu_stage::tests::xz: no `xz` on PATH; `xz` (xz-utils) is used by gpu-stage"]
        );
    }

    #[test]
    fn criterion_test_mode_is_counted() {
        let out = "Testing ir/plan face\nSuccess\n\nTesting cpu pack face/plan\nSuccess\n\
                   gpu_pack: skipped: no CUDA driver: libcuda.so.1 not found\n";
        let t = tally_criterion_test(out, true, "exit status 0");
        assert_eq!((t.passed, t.failed), (3, 0));
        let crashed = "Testing ir/plan face\nSuccess\nerror: bench failed, to rerun pass \
                       `-p datatype-pack --bench pack`\n";
        let t = tally_criterion_test(crashed, false, "exit status 101");
        assert_eq!((t.passed, t.failed), (1, 1));
        assert!(t.failures[0].contains("--bench pack"), "{:?}", t.failures);
        let t = tally_criterion_test(
            "error[E0425]: cannot find value\n",
            false,
            "exit status 101",
        );
        assert_eq!((t.passed, t.failed), (0, 1));
    }
}
