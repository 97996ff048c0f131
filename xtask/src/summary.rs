//! Counting passes and failures per step, and the report that ends `cargo xtask test`.

use std::fmt::Write as _;

/// Passes, failures and skips of one step, with a name for each failure and skip.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// How many checks passed.
    pub passed: u64,
    /// How many checks failed.
    pub failed: u64,
    /// One line per failure (or group of failures) saying what failed.
    pub failures: Vec<String>,
    /// How many checks were skipped for want of an optional program (neither passed nor failed).
    pub skipped: u64,
    /// One line per skip saying what was skipped and why.
    pub skips: Vec<String>,
}

impl Tally {
    /// Adds `n` passes.
    pub fn pass(&mut self, n: u64) {
        self.passed += n;
    }

    /// Adds `n` failures described by `what`.
    pub fn fail(&mut self, n: u64, what: impl Into<String>) {
        self.failed += n;
        self.failures.push(what.into());
    }

    /// Adds `n` skips described by `why`.
    pub fn skip(&mut self, n: u64, why: impl Into<String>) {
        self.skipped += n;
        self.skips.push(why.into());
    }

    /// Adds another tally into this one.
    pub fn absorb(&mut self, other: Tally) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.failures.extend(other.failures);
        self.skipped += other.skipped;
        self.skips.extend(other.skips);
    }

    /// `N passed, M failed`.
    pub fn line(&self) -> String {
        format!("{} passed, {} failed", self.passed, self.failed)
    }

    /// [`Tally::line`], then `, K skipped` when some were.
    pub fn step_line(&self) -> String {
        match self.skipped {
            0 => self.line(),
            k => format!("{}, {k} skipped", self.line()),
        }
    }
}

/// One step of the test run: its label and its tally, or `None` when it was skipped.
#[derive(Debug, Clone)]
pub struct Step {
    /// What the step ran, e.g. `cargo test` or `mpirun examples (n=1,2,3,4)`.
    pub label: String,
    /// Its counts; `None` when skipped.
    pub tally: Option<Tally>,
}

/// The closing report: one line per step, the failures, the skips, and last exactly one
/// `N passed, M failed` line over all steps (skips count in neither).
pub fn render(steps: &[Step]) -> String {
    let mut total = Tally::default();
    let mut out = String::from("\n== summary ==\n");
    for step in steps {
        match &step.tally {
            Some(tally) => {
                let _ = writeln!(out, "{}: {}", step.label, tally.step_line());
                total.absorb(tally.clone());
            }
            None => {
                let _ = writeln!(out, "{}: skipped", step.label);
            }
        }
    }
    if !total.failures.is_empty() {
        out.push_str("failures:\n");
        for failure in &total.failures {
            let _ = writeln!(out, "  {failure}");
        }
    }
    if !total.skips.is_empty() {
        let _ = writeln!(out, "skipped ({}):", total.skipped);
        for skip in &total.skips {
            let _ = writeln!(out, "  {skip}");
        }
    }
    let _ = writeln!(out, "{}", total.line());
    out
}

/// Sum of the failures over all steps.
pub fn total_failed(steps: &[Step]) -> u64 {
    steps
        .iter()
        .filter_map(|s| s.tally.as_ref())
        .map(|t| t.failed)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_ends_with_the_total_line() {
        let mut examples = Tally::default();
        examples.pass(7);
        examples.fail(1, "mpirun -n 3 05_checked_mismatch: exit 1");
        let steps = [
            Step {
                label: "cargo test".into(),
                tally: None,
            },
            Step {
                label: "mpirun examples (n=1,2,3,4)".into(),
                tally: Some(examples),
            },
            Step {
                label: "mpirun tests (n=1,2,3,4)".into(),
                tally: Some(Tally {
                    passed: 40,
                    ..Tally::default()
                }),
            },
        ];
        let report = render(&steps);
        assert_eq!(
            report,
            "\n== summary ==\n\
             cargo test: skipped\n\
             mpirun examples (n=1,2,3,4): 7 passed, 1 failed\n\
             mpirun tests (n=1,2,3,4): 40 passed, 0 failed\n\
             failures:\n  mpirun -n 3 05_checked_mismatch: exit 1\n\
             47 passed, 1 failed\n"
        );
        assert_eq!(total_failed(&steps), 1);
    }

    #[test]
    fn empty_run_is_zero_zero() {
        let steps = [Step {
            label: "mpirun tests (n=1)".into(),
            tally: Some(Tally::default()),
        }];
        assert!(render(&steps).ends_with("\n0 passed, 0 failed\n"));
        assert_eq!(total_failed(&steps), 0);
    }

    #[test]
    fn skips_are_listed_and_counted_apart() {
        let mut unit = Tally::default();
        unit.pass(3);
        unit.skip(1, "gpu_stage::tests::x: no `xz` on PATH");
        let steps = [
            Step {
                label: "cargo test".into(),
                tally: Some(unit),
            },
            Step {
                label: "fresh Debian root".into(),
                tally: None,
            },
        ];
        assert_eq!(
            render(&steps),
            "\n== summary ==\n\
             cargo test: 3 passed, 0 failed, 1 skipped\n\
             fresh Debian root: skipped\n\
             skipped (1):\n  gpu_stage::tests::x: no `xz` on PATH\n\
             3 passed, 0 failed\n"
        );
    }
}
