//! A small runner for tests that run on several MPI ranks (`mpirun -n N target/.../mpi_*`).
//!
//! Each test is a function of a [`T`], which carries this rank's communicator and records failures
//! without returning early, so every rank keeps making the same collective calls. After each test the
//! ranks agree (on a separate communicator) whether it passed on all of them; rank 0 prints one line
//! per test and, at the end, `mpi-tests: N passed, M failed`, the line `cargo xtask test` counts.
#![allow(dead_code)]

pub mod catalog;
pub mod dead_peer;
pub mod suite;

use std::cell::RefCell;
use std::fmt::Debug;
use std::panic::{catch_unwind, AssertUnwindSafe};

use collectives::{Communicator, Error, MpiComm, ReduceOp};

/// One test's context on one rank.
pub struct T<'a> {
    /// A fresh communicator over all ranks for this test (checked mode as the test asked).
    pub comm: &'a MpiComm,
    failures: RefCell<Vec<String>>,
}

impl T<'_> {
    /// Record a failure unless `cond`.
    pub fn check(&self, cond: bool, what: impl FnOnce() -> String) {
        if !cond {
            self.fail(what());
        }
    }

    /// Record a failure.
    pub fn fail(&self, what: String) {
        self.failures.borrow_mut().push(what);
    }

    /// Record a failure unless `actual == expected`.
    pub fn eq<V: PartialEq + Debug + ?Sized>(&self, actual: &V, expected: &V, what: &str) {
        if actual != expected {
            self.fail(format!("{what}: got {actual:?}, expected {expected:?}"));
        }
    }

    /// The value of `r`, or record its error.
    pub fn ok<V>(&self, r: Result<V, Error>, what: &str) -> Option<V> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.fail(format!("{what}: unexpected error: {e}"));
                None
            }
        }
    }

    /// Record a failure unless `r` is an error matching `pred`.
    pub fn err<V: Debug>(
        &self,
        r: Result<V, Error>,
        what: &str,
        pred: impl FnOnce(&Error) -> bool,
    ) {
        match r {
            Err(e) if pred(&e) => {}
            Err(e) => self.fail(format!("{what}: wrong error: {e:?}")),
            Ok(v) => self.fail(format!("{what}: expected an error, got Ok({v:?})")),
        }
    }

    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    pub fn size(&self) -> usize {
        self.comm.size()
    }
}

/// A test: name, fewest ranks it needs, checked mode, body.
pub struct Case {
    pub name: String,
    pub min_ranks: usize,
    pub checked: bool,
    pub body: Box<dyn Fn(&T)>,
}

/// A test that runs on any number of ranks, without checked mode.
pub fn case(name: impl Into<String>, body: impl Fn(&T) + 'static) -> Case {
    Case {
        name: name.into(),
        min_ranks: 1,
        checked: false,
        body: Box::new(body),
    }
}

impl Case {
    /// The same test, run only where there are at least `n` ranks.
    pub fn min_ranks(mut self, n: usize) -> Case {
        self.min_ranks = n;
        self
    }
}

/// A test with checked mode on.
pub fn checked(name: impl Into<String>, min_ranks: usize, body: impl Fn(&T) + 'static) -> Case {
    Case {
        name: name.into(),
        min_ranks,
        checked: true,
        body: Box::new(body),
    }
}

/// Run every case on every rank and exit with 0 iff all passed on all ranks.
pub fn run(cases: &[Case]) -> ! {
    run_in(mpi::initialize().expect("MPI initializes once"), cases)
}

/// [`run`] with MPI initialized at `MPI_THREAD_MULTIPLE` (asked for; the cases see what MPI
/// provides through `mpi::environment::threading_support`).
pub fn run_threaded(cases: &[Case]) -> ! {
    let (universe, _provided) =
        mpi::initialize_with_threading(mpi::Threading::Multiple).expect("MPI initializes once");
    run_in(universe, cases)
}

/// A case that takes at least this long says so on a line of its own (rank 0).
const SLOW_CASE: std::time::Duration = std::time::Duration::from_secs(2);

fn run_in(universe: mpi::environment::Universe, cases: &[Case]) -> ! {
    let referee = MpiComm::world(&universe)
        .expect("dup of MPI_COMM_WORLD")
        .with_checked(false);
    let (rank, size) = (referee.rank(), referee.size());
    // `MPI_TESTS_FILTER=name` runs only the cases whose name contains it (`a,b`: either).
    let filter: Option<String> = std::env::var("MPI_TESTS_FILTER")
        .ok()
        .filter(|f| !f.is_empty());
    let (mut passed, mut failed, mut skipped) = (0usize, 0usize, 0usize);
    // Times on rank 0, so that a launch that runs out of its limit shows whether its cases were
    // slow or the process was slow to end after them.
    let began = std::time::Instant::now();
    for case in cases {
        if filter
            .as_deref()
            .is_some_and(|f| !f.split(',').any(|part| case.name.contains(part)))
        {
            continue;
        }
        if size < case.min_ranks {
            skipped += 1;
            if rank == 0 {
                println!(
                    "test {} ... skipped (needs {} ranks)",
                    case.name, case.min_ranks
                );
            }
            continue;
        }
        let comm = MpiComm::world(&universe)
            .expect("dup of MPI_COMM_WORLD")
            .with_checked(case.checked);
        let t = T {
            comm: &comm,
            failures: RefCell::new(Vec::new()),
        };
        let case_began = std::time::Instant::now();
        let panicked = catch_unwind(AssertUnwindSafe(|| (case.body)(&t))).is_err();
        let failures = t.failures.into_inner();
        for f in &failures {
            eprintln!("[rank {rank}] {}: {f}", case.name);
        }
        drop(comm);
        let mine = i32::from(panicked || !failures.is_empty());
        let mut any = [0i32];
        referee
            .all_reduce(&[mine][..], &mut any[..], ReduceOp::Max)
            .expect("the referee's all_reduce");
        if any[0] == 0 {
            passed += 1;
        } else {
            failed += 1;
        }
        if rank == 0 {
            println!(
                "test {} ... {}",
                case.name,
                if any[0] == 0 { "ok" } else { "FAILED" }
            );
            let took = case_began.elapsed();
            if took >= SLOW_CASE {
                println!("  ({} took {:.1} s)", case.name, took.as_secs_f64());
            }
        }
    }
    if rank == 0 {
        println!(
            "mpi-tests: {passed} passed, {failed} failed ({skipped} skipped on {size} ranks, {:.1} s)",
            began.elapsed().as_secs_f64()
        );
    }
    drop(referee);
    drop(universe);
    std::process::exit(i32::from(failed > 0));
}
