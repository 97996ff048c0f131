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
//! Off, each timing point costs one check of a setting read once.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Runs `f`, its wall time added to `phase` of the current call when the profile is on.
pub fn time<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    if !on() {
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
    /// The row before, the start, and whether the interposer took the call; `None` when off.
    inner: Option<(usize, Instant, bool)>,
}

/// Enters `call` (an MPI function's name, or [`COMPLETION`]).
pub fn scope(call: &str) -> Scope {
    if !on() {
        return Scope { inner: None };
    }
    let prev = CURRENT.with(|c| c.replace(row_of(call)));
    Scope {
        inner: Some((prev, Instant::now(), false)),
    }
}

impl Scope {
    /// The interposer took the call: its time counts when the scope ends.
    pub fn taken(&mut self) {
        if let Some((_, _, taken)) = &mut self.inner {
            *taken = true;
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some((prev, start, taken)) = self.inner {
            if taken {
                record(Phase::Call, start.elapsed());
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
