//! The per-phase profile (`COLLECTIVES_INTERPOSE_PROFILE=1`): the host wall time of each phase
//! of the calls the interposer takes, summed per call and phase, printed per rank on stderr at
//! `MPI_Finalize`. A run of the program is then its own profile of the interposer's fixed cost.
//!
//! | phase | what it times |
//! |---|---|
//! | `call` | a whole call the interposer took, entry to return (its count is the calls') |
//! | `datatype` | the datatype cache (with MPI's size and extent of the handle) and the plan of the count |
//! | `memory` | the driver's answer to where a buffer lives ([`crate::memory::device_buffer`]) |
//! | `engine` | the GPU's state and the model's choice of method |
//! | `packer` | the plan's kernels (compiled and loaded on first use) |
//! | `staging` | a staging buffer from the pool (allocated when the pool has none) |
//! | `launch` | a pack or unpack kernel's launch (or a batch's graph launch), with its checks |
//! | `record` | a kernel recorded into a batch, with its checks, launched later with the batch's graph |
//! | `copy` | a DMA copy enqueued |
//! | `wait` | the wait for the stream: the kernels and copies themselves, and the driver's notice |
//! | `mpi` | the real MPI's call on the packed bytes |
//! | `progress` | a lending start's probes of the real MPI ([`crate::progress::poke`]): the real MPI's own work on the messages it carries |
//! | `other` | `call` less the phases above (printed, not recorded) |
//!
//! Rows are kept per call: `MPI_Pack`, `MPI_Unpack`, `MPI_Send`, `MPI_Isend`, `MPI_Recv`,
//! `MPI_Irecv`, `MPI_Sendrecv`, `MPI_Start` (with `MPI_Startall`), and `completion` (the unpack of a non-blocking receive inside a
//! wait, a test or `MPI_Request_free`). Phases of a call that then passed through are counted
//! too, so a phase's count may exceed the calls'.
//!
//! Beside the table, each call's **timeline**: named marks ([`mark`]) along the path a call
//! takes, each step the time from the mark before (or the call's entry) to it, and `return`
//! the time from the last mark to the return; summed per call and step, so the steps of a call
//! add up to its whole time, with nothing left as `other` (a phase that waits for another rank,
//! or for the GPU, shows as the step that ends when it does).
//!
//! `COLLECTIVES_INTERPOSE_PROFILE=timeline` keeps the timelines and the `call` phase but times
//! no other phase: some thirty clock reads fewer per call, which otherwise inflate the steps
//! they fall in. Off, each timing point costs one check of a setting read once.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config;
use crate::log::stderr_line;

/// A timed part of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The whole call, when the interposer took it.
    Call,
    /// Datatype cache and plan.
    Datatype,
    /// Where a buffer lives.
    Memory,
    /// The GPU's state and the method.
    Engine,
    /// The plan's kernels.
    Packer,
    /// A staging buffer.
    Staging,
    /// A kernel launch, or a batch's graph launch.
    Launch,
    /// A kernel recorded into a batch.
    Record,
    /// A DMA copy enqueued.
    Copy,
    /// The wait for the stream.
    Wait,
    /// The real MPI's call.
    Mpi,
    /// The real MPI's progress, probed by a lending start.
    Progress,
    /// The direct path: a receive's ready message made and sent.
    Announce,
    /// The direct path: a send waiting for its receive's ready message.
    Ready,
    /// The direct path: a note sent, or read.
    Note,
    /// The direct path: a staging lent, a peer's staging and event opened and waited for, a
    /// done message sent or read.
    Loan,
}

/// Every phase, in the order of the table.
const PHASES: [Phase; 16] = [
    Phase::Call,
    Phase::Datatype,
    Phase::Memory,
    Phase::Engine,
    Phase::Packer,
    Phase::Staging,
    Phase::Launch,
    Phase::Record,
    Phase::Copy,
    Phase::Wait,
    Phase::Mpi,
    Phase::Progress,
    Phase::Announce,
    Phase::Ready,
    Phase::Note,
    Phase::Loan,
];

impl Phase {
    /// The name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Call => "call",
            Phase::Datatype => "datatype",
            Phase::Memory => "memory",
            Phase::Engine => "engine",
            Phase::Packer => "packer",
            Phase::Staging => "staging",
            Phase::Launch => "launch",
            Phase::Record => "record",
            Phase::Copy => "copy",
            Phase::Wait => "wait",
            Phase::Mpi => "mpi",
            Phase::Progress => "progress",
            Phase::Announce => "announce",
            Phase::Ready => "ready",
            Phase::Note => "note",
            Phase::Loan => "loan",
        }
    }
}

/// The calls kept apart, in the order of the table; the last row takes anything else.
const CALLS: [&str; 10] = [
    "MPI_Pack",
    "MPI_Unpack",
    "MPI_Send",
    "MPI_Isend",
    "MPI_Recv",
    "MPI_Irecv",
    "MPI_Sendrecv",
    "MPI_Start",
    COMPLETION,
    "other",
];

/// The row of unpacks on completion of non-blocking receives.
pub const COMPLETION: &str = "completion";

/// A count and a sum of nanoseconds.
#[derive(Debug)]
struct Slot {
    count: AtomicU64,
    nanos: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            count: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
        }
    }

    fn add(&self, d: Duration) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(ns, Ordering::Relaxed);
    }

    fn read(&self) -> (u64, u64) {
        (
            self.count.load(Ordering::Relaxed),
            self.nanos.load(Ordering::Relaxed),
        )
    }
}

static SLOTS: [[Slot; PHASES.len()]; CALLS.len()] =
    [const { [const { Slot::new() }; PHASES.len()] }; CALLS.len()];

thread_local! {
    /// The row of the call the calling thread is in.
    static CURRENT: Cell<usize> = const { Cell::new(CALLS.len() - 1) };
    /// The marks of the calls the calling thread is in, outermost first ([`mark`]).
    static MARKS: RefCell<Vec<(&'static str, Instant)>> = const { RefCell::new(Vec::new()) };
}

/// A step of a call's timeline: its row, the mark that ends it, how often and how long in all,
/// and the first [`SAMPLES_KEPT`] times one by one (for the median: a call's first run, which
/// compiles kernels and maps peers' memory, would swamp a mean).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    row: usize,
    name: &'static str,
    count: u64,
    nanos: u64,
    samples: Vec<u32>,
}

/// The times kept one by one per step of a timeline.
const SAMPLES_KEPT: usize = 1 << 16;

/// The steps of every call's timeline, in the order first seen.
static STEPS: Mutex<Vec<Step>> = Mutex::new(Vec::new());

/// The name of the step from a call's last mark to its return.
const RETURN: &str = "return";

/// Marks `name` on the calling thread's timeline of the call it is in (see the module's
/// docs): the step that ends here is the time since the call's mark before, or its entry.
pub fn mark(name: &'static str) {
    if on() {
        MARKS.with(|m| m.borrow_mut().push((name, Instant::now())));
    }
}

/// Adds the steps of one call of `row`, entered at `start` and marked at `marks`, returning
/// now, to `steps`.
fn add_steps(steps: &mut Vec<Step>, row: usize, start: Instant, marks: &[(&'static str, Instant)]) {
    let now = Instant::now();
    let mut before = start;
    let ends = marks.iter().copied().chain(std::iter::once((RETURN, now)));
    for (name, at) in ends {
        let ns = u64::try_from(at.saturating_duration_since(before).as_nanos()).unwrap_or(u64::MAX);
        before = at;
        let i = match steps.iter().position(|s| s.row == row && s.name == name) {
            Some(i) => i,
            None => {
                steps.push(Step {
                    row,
                    name,
                    count: 0,
                    nanos: 0,
                    samples: Vec::new(),
                });
                steps.len() - 1
            }
        };
        let s = &mut steps[i];
        s.count += 1;
        s.nanos = s.nanos.saturating_add(ns);
        if s.samples.len() < SAMPLES_KEPT {
            s.samples.push(u32::try_from(ns).unwrap_or(u32::MAX));
        }
    }
}

/// Whether the profile is on.
pub fn on() -> bool {
    config::get().profile
}

fn row_of(call: &str) -> usize {
    CALLS
        .iter()
        .position(|c| *c == call)
        .unwrap_or(CALLS.len() - 1)
}

fn record(phase: Phase, d: Duration) {
    let row = CURRENT.with(Cell::get);
    SLOTS[row][phase as usize].add(d);
}

/// Runs `f`, its wall time added to `phase` of the current call when the profile times phases
/// (`COLLECTIVES_INTERPOSE_PROFILE=1`, not `=timeline`).
pub fn time<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    if !config::get().profile_phases {
        return f();
    }
    let start = Instant::now();
    let out = f();
    record(phase, start.elapsed());
    out
}

/// The calling thread inside one call: the phases timed until it is dropped count for that
/// call's row, and, once [`Scope::taken`], the whole call's time for its `call` phase.
#[derive(Debug)]
pub struct Scope {
    /// The row before, the start, whether the interposer took the call, and where its marks
    /// begin on the thread's list; `None` when off.
    inner: Option<(usize, Instant, bool, usize)>,
}

/// Enters `call` (an MPI function's name, or [`COMPLETION`]).
pub fn scope(call: &str) -> Scope {
    if !on() {
        return Scope { inner: None };
    }
    let prev = CURRENT.with(|c| c.replace(row_of(call)));
    let marks = MARKS.with(|m| m.borrow().len());
    Scope {
        inner: Some((prev, Instant::now(), false, marks)),
    }
}

impl Scope {
    /// The interposer took the call: its time counts when the scope ends.
    pub fn taken(&mut self) {
        if let Some((_, _, taken, _)) = &mut self.inner {
            *taken = true;
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some((prev, start, taken, from)) = self.inner {
            if taken {
                record(Phase::Call, start.elapsed());
            }
            let marks: Vec<_> = MARKS.with(|m| {
                let mut m = m.borrow_mut();
                let from = from.min(m.len());
                m.split_off(from)
            });
            if taken {
                let row = CURRENT.with(Cell::get);
                let mut steps = STEPS.lock().unwrap_or_else(|p| p.into_inner());
                add_steps(&mut steps, row, start, &marks);
            }
            CURRENT.with(|c| c.set(prev));
        }
    }
}

/// The table's lines for `counts[call][phase] = (count, nanoseconds)`: per call with anything
/// recorded, each phase with a count, then `other` (the call's time the phases leave).
fn table(counts: &[[(u64, u64); PHASES.len()]; CALLS.len()]) -> Vec<String> {
    let us = |ns: u64| ns as f64 / 1e3;
    let mut lines = vec![format!(
        "{:<13} {:<9} {:>9} {:>13} {:>9} {:>9}",
        "call", "phase", "count", "total us", "us/call", "us/each"
    )];
    for (name, row) in CALLS.iter().zip(counts) {
        let calls = row[Phase::Call as usize].0;
        let per_call = |ns: u64| {
            if calls == 0 {
                "-".to_owned()
            } else {
                format!("{:.2}", us(ns) / calls as f64)
            }
        };
        let mut phases_ns = 0u64;
        for (phase, &(count, ns)) in PHASES.iter().zip(row) {
            if count == 0 {
                continue;
            }
            if *phase != Phase::Call {
                phases_ns = phases_ns.saturating_add(ns);
            }
            lines.push(format!(
                "{:<13} {:<9} {:>9} {:>13.1} {:>9} {:>9.2}",
                name,
                phase.name(),
                count,
                us(ns),
                per_call(ns),
                us(ns) / count as f64
            ));
        }
        if calls > 0 {
            let rest = row[Phase::Call as usize].1.saturating_sub(phases_ns);
            lines.push(format!(
                "{:<13} {:<9} {:>9} {:>13.1} {:>9} {:>9}",
                name,
                "other",
                "-",
                us(rest),
                per_call(rest),
                "-"
            ));
        }
    }
    lines
}

/// The value at quantile `q` (0 to 1) of `sorted` (ascending, not empty).
fn quantile(sorted: &[u32], q: f64) -> u32 {
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// The timeline's lines for `steps`: per call, each step in the order first seen, with its
/// count, its mean time per call of the row (`calls[row]`, the calls taken) and per step, and
/// the median and 90th percentile of its kept times.
fn timeline(steps: &[Step], calls: &[u64]) -> Vec<String> {
    let us = |ns: u64| ns as f64 / 1e3;
    let mut lines = vec![format!(
        "{:<13} {:<26} {:>7} {:>8} {:>8} {:>8} {:>8}",
        "call", "step to", "count", "us/call", "us/each", "median", "p90"
    )];
    for (row, name) in CALLS.iter().enumerate() {
        for s in steps.iter().filter(|s| s.row == row) {
            let per_call = match calls.get(row) {
                Some(&n) if n > 0 => format!("{:.2}", us(s.nanos) / n as f64),
                _ => "-".to_owned(),
            };
            let mut sorted = s.samples.clone();
            sorted.sort_unstable();
            let (median, p90) = if sorted.is_empty() {
                ("-".to_owned(), "-".to_owned())
            } else {
                (
                    format!("{:.2}", us(quantile(&sorted, 0.5).into())),
                    format!("{:.2}", us(quantile(&sorted, 0.9).into())),
                )
            };
            lines.push(format!(
                "{:<13} {:<26} {:>7} {:>8} {:>8.2} {:>8} {:>8}",
                name,
                s.name,
                s.count,
                per_call,
                us(s.nanos) / s.count.max(1) as f64,
                median,
                p90
            ));
        }
    }
    lines
}

/// Prints the table on stderr, each line prefixed with `[collectives-interpose rN] profile:`,
/// after `notes` (one line each). Nothing when the profile is off or recorded nothing.
pub fn report(rank: i32, notes: &[String]) {
    if !on() {
        return;
    }
    let counts: [[(u64, u64); PHASES.len()]; CALLS.len()] =
        std::array::from_fn(|c| std::array::from_fn(|p| SLOTS[c][p].read()));
    if counts.iter().flatten().all(|&(n, _)| n == 0) {
        return;
    }
    let prefix = format!("[collectives-interpose r{rank}] profile:");
    stderr_line(format_args!(
        "{prefix} host wall time per phase of the interposer's calls"
    ));
    for n in notes {
        stderr_line(format_args!("{prefix} {n}"));
    }
    for l in table(&counts) {
        stderr_line(format_args!("{prefix} {l}"));
    }
    let steps = STEPS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if !steps.is_empty() {
        stderr_line(format_args!(
            "{prefix} timeline: host wall time from each mark to the next, per call"
        ));
        let calls: Vec<u64> = counts.iter().map(|r| r[Phase::Call as usize].0).collect();
        for l in timeline(&steps, &calls) {
            stderr_line(format_args!("{prefix} {l}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_in_order() {
        for (i, p) in PHASES.iter().enumerate() {
            assert_eq!(*p as usize, i);
        }
        assert_eq!(row_of("MPI_Sendrecv"), 6);
        assert_eq!(row_of("MPI_Start"), 7);
        assert_eq!(row_of(COMPLETION), 8);
        assert_eq!(row_of("MPI_Bogus"), CALLS.len() - 1);
    }

    #[test]
    fn table_per_call_and_the_rest() {
        let mut counts = [[(0u64, 0u64); PHASES.len()]; CALLS.len()];
        let sr = row_of("MPI_Sendrecv");
        counts[sr][Phase::Call as usize] = (2, 80_000);
        counts[sr][Phase::Launch as usize] = (4, 20_000);
        counts[sr][Phase::Wait as usize] = (4, 30_000);
        let t = table(&counts);
        assert_eq!(t.len(), 5, "{t:#?}");
        assert!(t[0].starts_with("call "));
        let launch = t.iter().find(|l| l.contains("launch")).unwrap();
        // 20 us over 2 calls and 4 launches.
        assert!(
            launch.contains(" 20.0 ") && launch.contains(" 10.00 ") && launch.ends_with(" 5.00"),
            "{launch}"
        );
        let other = t.last().unwrap();
        assert!(
            other.starts_with("MPI_Sendrecv  other") && other.contains(" 30.0 "),
            "{other}"
        );
        // A row with phases but no taken call has no per-call figures and no rest.
        let mut counts = [[(0u64, 0u64); PHASES.len()]; CALLS.len()];
        counts[row_of("MPI_Pack")][Phase::Memory as usize] = (3, 3_000);
        let t = table(&counts);
        assert_eq!(t.len(), 2);
        assert!(t[1].contains(" - ") && t[1].ends_with(" 1.00"), "{}", t[1]);
    }

    #[test]
    fn a_timeline_adds_up_to_the_call() {
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let mut steps = Vec::new();
        let sr = row_of("MPI_Sendrecv");
        add_steps(&mut steps, sr, t0, &[("packed", at(3)), ("noted", at(10))]);
        add_steps(&mut steps, sr, t0, &[("packed", at(5)), ("noted", at(6))]);
        let names: Vec<_> = steps.iter().map(|s| s.name).collect();
        assert_eq!(names, ["packed", "noted", RETURN]);
        assert_eq!((steps[0].count, steps[0].nanos), (2, 8_000));
        assert_eq!((steps[1].count, steps[1].nanos), (2, 8_000));
        // The steps of a call add up to its whole time, the return's step included.
        let whole: u64 = steps.iter().map(|s| s.nanos).sum();
        assert!(whole >= 2 * 10_000 - 4_000, "{steps:?}");
        let mut calls = vec![0; CALLS.len()];
        calls[sr] = 2;
        let lines = timeline(&steps, &calls);
        assert_eq!(lines.len(), 4);
        // Packed: 3 and 5 us, 4 on average per call and per step; the median of two is the
        // upper one (rounded), the 90th percentile too.
        assert!(
            lines[1].starts_with("MPI_Sendrecv  packed")
                && lines[1].contains(" 4.00 ")
                && lines[1].ends_with(" 5.00     5.00"),
            "{}",
            lines[1]
        );
        assert_eq!(quantile(&[1, 2, 3, 4, 5], 0.5), 3);
        assert_eq!(quantile(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9), 9);
    }

    #[test]
    fn scopes_restore_the_row_before() {
        let outer = CURRENT.with(Cell::get);
        let mut s = scope("MPI_Send");
        let inner = scope(COMPLETION);
        drop(inner);
        s.taken();
        drop(s);
        assert_eq!(CURRENT.with(Cell::get), outer);
        assert_eq!(time(Phase::Wait, || 7), 7);
    }
}
