//! The per-call record: what ran on this rank, how often, how large and how long.
//!
//! Set `COLLECTIVES_RECORD` and every operation that goes through the front end (blocking,
//! non-blocking start, persistent init and each persistent start) is counted in one table per
//! process, keyed by what decides its cost:
//!
//! | column | what |
//! |---|---|
//! | `op` | the method (`all_reduce`, `i_all_gather_v`, `all_reduce_init`, ...) |
//! | `form` | [`Form`]: `blocking`, `non-blocking` (the start of an `i_*`), `init` (making a plan), `start` (one run of a plan) |
//! | `backend` | [`BackendKind::name`] |
//! | `path` | what the backend chose ([`Path`]): `native`, `polled` (MPI under a deadline: the non-blocking twin on copies), `device-pointers`, `staged`, NCCL's `grouped-p2p` or `broadcasts` for uneven collectives; for `start`, the plan's [`PlanPath`](crate::PlanPath) (`persistent`, `replay`, `cuda-graph`) |
//! | `staged` | whether the data went through pinned host memory |
//! | `bytes` | this rank's largest buffer of the call, in bytes (0 for `barrier`, `split`, `dup`) |
//! | `calls` | how many calls had these values and succeeded (a call that returns an error is not counted) |
//! | `host` | wall-clock time on this rank from entering the method to its return: total, min, max |
//! | `device` | on NCCL: the time between two CUDA events recorded on the communicator's stream around the call's work, total, min, max over the calls resolved so far |
//!
//! Host time of a non-blocking operation or a persistent start is the time to issue it, not to
//! complete it; on NCCL every operation only enqueues work, so its device time is what it cost.
//! The MPI backends on device memory (`cuda-mpi`, `mpi-staged`) run their MPI on the host, so
//! their host time is their time and they record no device time.
//!
//! **Device time without a synchronization.** The end event of a call is not waited for: each
//! pair is kept and resolved later, when its end event is found complete (checked without
//! blocking, oldest first, at every recorded call and in [`snapshot`]), and at exit, where the
//! exit handler waits for pending pairs for at most two seconds in all (a pair still pending
//! then, for example behind a hung peer, is left out and counted in `pending`). At most
//! [`MAX_PENDING`] pairs are kept; calls beyond that get no device time.
//!
//! **Switching it on.** `COLLECTIVES_RECORD=1` (or `on`, `true`, `yes`) prints each rank's table
//! on standard error when the process exits; `COLLECTIVES_RECORD=PATH` writes it to the file
//! `PATH.<rank>` instead (rank in `MPI_COMM_WORLD`); unset, empty, `0`, `off`, `false` or `no`:
//! off. [`set_enabled`] switches recording on or off from the program (without printing at exit
//! unless the variable asked for it). When off, a call pays one relaxed atomic load and a branch:
//! no allocation, no clock, no lock.
//!
//! **At exit.** The table is written by a handler registered with the C library's `atexit`, when
//! recording is first switched on by the variable: it runs when `main` returns or the program
//! calls `std::process::exit` (and in the test binaries of this workspace, which end that way),
//! after rsmpi's `Universe` has called `MPI_Finalize`: the handler uses no MPI (the rank was
//! taken when the first call was recorded). It does not run on `MPI_Abort`, on a signal or on
//! `std::process::abort`. A guard dropped at `MPI_Finalize` was the alternative; rsmpi offers no
//! hook there, and a `Universe` leaked or never dropped would lose the table, which `atexit`
//! does not.
//!
//! **Reading it in the program.** [`snapshot`] returns the entries, [`table`] the text the exit
//! handler writes, [`reset`] empties it.
//!
//! ```no_run
//! use collectives_core::{record, Communicator, MpiComm, ReduceOp};
//!
//! let universe = mpi::initialize().expect("MPI initializes once");
//! let comm = MpiComm::world(&universe)?;
//! record::set_enabled(true);
//! let mut x = vec![1.0f64; 1024];
//! comm.all_reduce_in_place(&mut x[..], ReduceOp::Sum)?;
//! let entry = &record::snapshot()[0];
//! assert_eq!((entry.op, entry.calls, entry.bytes), ("all_reduce_in_place", 1, 8192));
//! print!("{}", record::table());
//! # Ok::<(), collectives_core::Error>(())
//! ```

use std::collections::HashMap;
use std::ffi::c_int;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::time::{Duration, Instant};

#[cfg(feature = "cuda")]
use std::collections::VecDeque;
#[cfg(feature = "cuda")]
use std::sync::Arc;

#[cfg(feature = "cuda")]
use cudarc::driver::{sys::CUevent_flags, CudaEvent, CudaStream};

use crate::op::BackendKind;

/// The environment variable that switches recording on: `1` (standard error at exit) or a path
/// prefix (`PATH.<rank>` files at exit).
pub const ENV_VAR: &str = "COLLECTIVES_RECORD";

/// Most CUDA event pairs kept waiting for their device time.
pub const MAX_PENDING: usize = 1 << 16;

/// How long the exit handler waits, in all, for device time still pending.
const EXIT_WAIT: Duration = Duration::from_secs(2);

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);
static OUTPUT: OnceLock<Option<Output>> = OnceLock::new();
static AT_EXIT: Once = Once::new();

/// Whether calls are being recorded. After the first call this is one relaxed atomic load.
#[inline]
pub fn enabled() -> bool {
    match MODE.load(Relaxed) {
        ON => true,
        OFF => false,
        _ => init_from_env(),
    }
}

/// Switch recording on or off for the whole process, from now on (overrides `COLLECTIVES_RECORD`;
/// what was recorded stays). The table is printed at exit only when the variable asked for it.
pub fn set_enabled(on: bool) {
    let _ = output();
    MODE.store(if on { ON } else { OFF }, Relaxed);
}

/// Where the exit handler writes, as `COLLECTIVES_RECORD` says; `None`: nothing at exit.
fn output() -> Option<&'static Output> {
    OUTPUT
        .get_or_init(|| {
            let out = Output::parse(std::env::var_os(ENV_VAR).as_deref());
            if out.is_some() {
                register_at_exit();
            }
            out
        })
        .as_ref()
}

#[cold]
fn init_from_env() -> bool {
    let on = output().is_some();
    let _ = MODE.compare_exchange(UNKNOWN, if on { ON } else { OFF }, Relaxed, Relaxed);
    MODE.load(Relaxed) == ON
}

/// Where the table goes at exit.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Output {
    Stderr,
    Files(PathBuf),
}

impl Output {
    fn parse(value: Option<&std::ffi::OsStr>) -> Option<Output> {
        let value = value?;
        let text = value.to_string_lossy();
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "0" | "off" | "false" | "no" => None,
            "1" | "on" | "true" | "yes" => Some(Output::Stderr),
            _ => Some(Output::Files(PathBuf::from(value))),
        }
    }
}

/// How an operation was called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Form {
    /// A blocking call.
    Blocking,
    /// The start of a non-blocking operation (`i_*`).
    NonBlocking,
    /// Making a persistent plan (`*_init`).
    Init,
    /// One run of a persistent plan ([`Persistent::start`](crate::Persistent::start)).
    Start,
}

impl Form {
    /// `"blocking"`, `"non-blocking"`, `"init"` or `"start"`.
    pub const fn name(self) -> &'static str {
        match self {
            Form::Blocking => "blocking",
            Form::NonBlocking => "non-blocking",
            Form::Init => "init",
            Form::Start => "start",
        }
    }
}

/// What a backend says of how it runs a call: its path's name and whether the data goes through
/// pinned host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Path {
    /// A short name (`"native"`, `"staged"`, `"grouped-p2p"`, ...).
    pub name: &'static str,
    /// Whether the data goes through pinned host memory.
    pub staged: bool,
}

impl Path {
    /// The library's own operation on the caller's buffers.
    pub const NATIVE: Path = Path {
        name: "native",
        staged: false,
    };

    /// A path on the caller's buffers.
    pub const fn direct(name: &'static str) -> Path {
        Path {
            name,
            staged: false,
        }
    }

    /// A path through pinned host memory.
    pub const fn staged(name: &'static str) -> Path {
        Path { name, staged: true }
    }
}

/// Total, minimum and maximum of a set of durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Times {
    /// How many durations.
    pub count: u64,
    /// Their sum.
    pub total: Duration,
    /// The shortest (zero when `count` is 0).
    pub min: Duration,
    /// The longest.
    pub max: Duration,
}

impl Times {
    /// Count one more duration.
    pub fn add(&mut self, d: Duration) {
        self.min = if self.count == 0 { d } else { self.min.min(d) };
        self.max = self.max.max(d);
        self.total += d;
        self.count += 1;
    }

    /// The mean, if there is any duration.
    pub fn mean(&self) -> Option<Duration> {
        (self.count > 0).then(|| self.total / self.count.min(u64::from(u32::MAX)) as u32)
    }
}

/// One line of the record: the calls that had the same operation, form, backend, path and size.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// The method (`"all_reduce"`, `"i_all_gather_v"`, `"all_reduce_init"`, ...).
    pub op: &'static str,
    /// How it was called.
    pub form: Form,
    /// The backend.
    pub backend: BackendKind,
    /// The backend's path.
    pub path: &'static str,
    /// Whether the data went through pinned host memory.
    pub staged: bool,
    /// This rank's largest buffer of the call, in bytes.
    pub bytes: usize,
    /// How many calls succeeded with these values.
    pub calls: u64,
    /// Wall-clock time of the calls on this rank.
    pub host: Times,
    /// Device time from CUDA events (NCCL), over the calls resolved so far; `count` says how many.
    pub device: Times,
    /// Calls whose device time was not resolved (yet, or ever: over [`MAX_PENDING`], failed to
    /// record, or still pending at exit).
    pub device_pending: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    op: &'static str,
    form: Form,
    backend: BackendKind,
    path: Path,
    bytes: usize,
}

#[derive(Debug, Default)]
struct Stats {
    calls: u64,
    host: Times,
    device: Times,
    /// Pairs not resolved: waiting in `pending`, or given up.
    device_pending: u64,
}

#[cfg(feature = "cuda")]
struct Pair {
    slot: usize,
    start: CudaEvent,
    end: CudaEvent,
}

#[derive(Default)]
struct State {
    slots: HashMap<Key, usize>,
    entries: Vec<(Key, Stats)>,
    rank: Option<usize>,
    #[cfg(feature = "cuda")]
    pending: VecDeque<Pair>,
}

impl State {
    fn slot(&mut self, key: Key) -> usize {
        if let Some(&i) = self.slots.get(&key) {
            return i;
        }
        self.entries.push((key, Stats::default()));
        self.slots.insert(key, self.entries.len() - 1);
        self.entries.len() - 1
    }

    /// Resolve the pairs whose end event is complete, oldest first, without blocking; with
    /// `wait`, poll the rest until `wait` has passed.
    #[cfg(feature = "cuda")]
    fn resolve(&mut self, wait: Option<Duration>) {
        let until = wait.map(|w| Instant::now() + w);
        while let Some(pair) = self.pending.front() {
            match pair.end.try_is_complete() {
                Ok(true) => {}
                Ok(false) => match until {
                    Some(t) if Instant::now() < t => {
                        std::thread::sleep(Duration::from_micros(200));
                        continue;
                    }
                    _ => return,
                },
                Err(_) => {
                    // The pair stays counted as pending, for good.
                    self.pending.pop_front();
                    continue;
                }
            }
            let pair = self.pending.pop_front().expect("the front pair");
            let stats = &mut self.entries[pair.slot].1;
            if let Ok(ms) = pair.start.elapsed_ms(&pair.end) {
                stats
                    .device
                    .add(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3));
                stats.device_pending -= 1;
            }
        }
    }

    #[cfg(not(feature = "cuda"))]
    fn resolve(&mut self, _wait: Option<Duration>) {}

    fn snapshot(&self) -> Vec<Entry> {
        let mut out: Vec<Entry> = self
            .entries
            .iter()
            .map(|(k, s)| Entry {
                op: k.op,
                form: k.form,
                backend: k.backend,
                path: k.path.name,
                staged: k.path.staged,
                bytes: k.bytes,
                calls: s.calls,
                host: s.host,
                device: s.device,
                device_pending: s.device_pending,
            })
            .collect();
        out.sort_by(|a, b| {
            (a.op, a.form, a.backend.name(), a.path, a.bytes).cmp(&(
                b.op,
                b.form,
                b.backend.name(),
                b.path,
                b.bytes,
            ))
        });
        out
    }
}

fn state() -> MutexGuard<'static, State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The entries recorded so far on this process, sorted by operation, form, backend, path and size;
/// device time of the calls whose work is complete by now is resolved first (without waiting).
pub fn snapshot() -> Vec<Entry> {
    let mut st = state();
    st.resolve(None);
    st.snapshot()
}

/// Empty the record (pending device time included).
pub fn reset() {
    let mut st = state();
    st.slots.clear();
    st.entries.clear();
    #[cfg(feature = "cuda")]
    st.pending.clear();
}

/// The record as the text table the exit handler writes, for this rank.
pub fn table() -> String {
    let (rank, entries) = {
        let mut st = state();
        st.resolve(None);
        (st.rank, st.snapshot())
    };
    render(rank, &entries)
}

/// The rank of this process in `MPI_COMM_WORLD`, while MPI is running.
fn world_rank() -> Option<usize> {
    use mpi::ffi;
    let (mut init, mut fin): (c_int, c_int) = (0, 0);
    // SAFETY: both may be called at any time, before, during or after MPI; valid out-pointers.
    unsafe {
        ffi::MPI_Initialized(&mut init);
        ffi::MPI_Finalized(&mut fin);
    }
    if init == 0 || fin != 0 {
        return None;
    }
    let mut rank: c_int = 0;
    // SAFETY: MPI is initialized and not finalized; RSMPI_COMM_WORLD is the predefined handle and
    // `rank` a valid out-pointer.
    let rc = unsafe { ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank) };
    (rc == 0).then_some(rank as usize)
}

/// The rank to name the table and its file by: the one taken while MPI ran, else the launcher's.
fn rank_label(rank: Option<usize>) -> String {
    if let Some(r) = rank {
        return r.to_string();
    }
    [
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
    .unwrap_or_else(|| format!("pid{}", std::process::id()))
}

struct Micros(Duration);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0.as_secs_f64() * 1e6;
        let text = if us >= 1e6 {
            format!("{:.3}s", us / 1e6)
        } else if us >= 1e3 {
            format!("{:.3}ms", us / 1e3)
        } else {
            format!("{us:.1}us")
        };
        f.pad(&text)
    }
}

/// The table of `entries` for `rank`.
fn render(rank: Option<usize>, entries: &[Entry]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "collectives record, rank {} ({} entries; host: wall clock, device: CUDA events)",
        rank_label(rank),
        entries.len()
    );
    const HEAD: [&str; 13] = [
        "op",
        "form",
        "backend",
        "path",
        "staged",
        "bytes",
        "calls",
        "host total",
        "host min",
        "host max",
        "device total",
        "device min",
        "device max",
    ];
    let rows: Vec<[String; 13]> = entries
        .iter()
        .map(|e| {
            let dev = |d: Duration| {
                if e.device.count == 0 {
                    "-".to_string()
                } else {
                    Micros(d).to_string()
                }
            };
            let mut device_total = dev(e.device.total);
            if e.device_pending > 0 && e.device.count > 0 {
                let _ = write!(device_total, " ({} of {})", e.device.count, e.calls);
            }
            [
                e.op.to_string(),
                e.form.name().to_string(),
                e.backend.name().to_string(),
                e.path.to_string(),
                if e.staged { "yes" } else { "no" }.to_string(),
                e.bytes.to_string(),
                e.calls.to_string(),
                Micros(e.host.total).to_string(),
                Micros(e.host.min).to_string(),
                Micros(e.host.max).to_string(),
                device_total,
                dev(e.device.min),
                dev(e.device.max),
            ]
        })
        .collect();
    let mut width = HEAD.map(str::len);
    for row in &rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut line = |cells: &[&str]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            // Text columns to the left, numbers to the right.
            if i < 5 {
                let _ = write!(text, "{cell:<w$}  ", w = width[i]);
            } else {
                let _ = write!(text, "{cell:>w$}  ", w = width[i]);
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(&HEAD);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
    if entries.is_empty() {
        out.push_str("(no call recorded)\n");
    }
    out
}

fn register_at_exit() {
    extern "C" {
        fn atexit(callback: extern "C" fn()) -> c_int;
    }
    AT_EXIT.call_once(|| {
        // SAFETY: `atexit` is the C library's, which every Rust program on a hosted target links;
        // `write_at_exit` is an `extern "C" fn()` that lives for the whole program and does not
        // unwind.
        unsafe { atexit(write_at_exit) };
    });
}

extern "C" fn write_at_exit() {
    // A panic must not unwind out of an `extern "C"` function; nothing is left to report it to.
    let _ = std::panic::catch_unwind(|| {
        let Some(output) = output() else { return };
        let (rank, entries) = {
            let mut st = state();
            st.resolve(Some(EXIT_WAIT));
            (st.rank, st.snapshot())
        };
        let text = render(rank, &entries);
        match output {
            Output::Stderr => {
                // One write, so that the ranks' tables interleave as little as possible.
                let _ = std::io::stderr().lock().write_all(text.as_bytes());
            }
            Output::Files(prefix) => {
                let mut name = prefix.clone().into_os_string();
                name.push(format!(".{}", rank_label(rank)));
                if let Err(e) = std::fs::write(&name, text) {
                    let _ = writeln!(
                        std::io::stderr(),
                        "collectives record: cannot write {}: {e}",
                        PathBuf::from(name).display()
                    );
                }
            }
        }
    });
}

/// One call being recorded, from the front end's hook to its return; empty when recording is off.
#[derive(Debug)]
pub(crate) struct Span(Option<Open>);

#[derive(Debug)]
struct Open {
    start: Instant,
    bytes: usize,
    #[cfg(feature = "cuda")]
    device: Option<(Arc<CudaStream>, CudaEvent)>,
}

/// Where a call's device work goes: the stream to time it on, for backends whose operations are
/// ordered on a stream.
#[cfg(feature = "cuda")]
pub(crate) type Stream = Option<Arc<CudaStream>>;
/// Where a call's device work goes (nothing without the `cuda` feature).
#[cfg(not(feature = "cuda"))]
pub(crate) type Stream = Option<std::convert::Infallible>;

impl Span {
    /// Nothing recorded.
    pub(crate) const OFF: Span = Span(None);

    /// Open the record of one call when recording is on: `bytes` and `stream` are evaluated only
    /// then.
    #[inline]
    pub(crate) fn open(bytes: impl FnOnce() -> usize, stream: impl FnOnce() -> Stream) -> Span {
        if !enabled() {
            return Span::OFF;
        }
        Span::open_on(bytes(), stream())
    }

    #[cold]
    #[allow(clippy::needless_pass_by_value)]
    fn open_on(bytes: usize, stream: Stream) -> Span {
        #[cfg(feature = "cuda")]
        let device = stream.and_then(|s| {
            let ev = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).ok()?;
            Some((s, ev))
        });
        #[cfg(not(feature = "cuda"))]
        let _ = stream;
        Span(Some(Open {
            start: Instant::now(),
            bytes,
            #[cfg(feature = "cuda")]
            device,
        }))
    }

    /// Close the record of a call that succeeded (`ok`), on `backend` through `path`.
    #[inline]
    pub(crate) fn close(
        self,
        ok: bool,
        op: &'static str,
        form: Form,
        backend: BackendKind,
        path: impl FnOnce(usize) -> Path,
    ) {
        if let Some(open) = self.0 {
            if ok {
                let path = path(open.bytes);
                open.finish(op, form, backend, path);
            }
        }
    }
}

impl Open {
    #[cold]
    fn finish(self, op: &'static str, form: Form, backend: BackendKind, path: Path) {
        let host = self.start.elapsed();
        #[cfg(feature = "cuda")]
        let pair = self.device.and_then(|(stream, start)| {
            let end = stream
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .ok()?;
            Some((start, end))
        });
        let key = Key {
            op,
            form,
            backend,
            path,
            bytes: self.bytes,
        };
        let rank = if state().rank.is_none() {
            world_rank()
        } else {
            None
        };
        let mut st = state();
        if st.rank.is_none() {
            st.rank = rank;
        }
        let slot = st.slot(key);
        let stats = &mut st.entries[slot].1;
        stats.calls += 1;
        stats.host.add(host);
        #[cfg(feature = "cuda")]
        if let Some((start, end)) = pair {
            stats.device_pending += 1;
            st.resolve(None);
            if st.pending.len() < MAX_PENDING {
                st.pending.push_back(Pair { slot, start, end });
            }
        }
    }
}

/// What a persistent plan's starts say in the record (taken at init, when recording was on).
#[derive(Debug)]
pub(crate) struct PlanRecord {
    pub(crate) backend: BackendKind,
    pub(crate) bytes: usize,
    pub(crate) staged: bool,
    pub(crate) stream: Stream,
}

impl PlanRecord {
    /// Open the record of one start.
    pub(crate) fn open(&self) -> Span {
        Span::open(|| self.bytes, || self.stream.clone())
    }

    /// Close the record of one start of the plan made by `op`, which runs on `path`.
    pub(crate) fn close(&self, span: Span, ok: bool, op: &'static str, path: &'static str) {
        let staged = self.staged;
        span.close(ok, op, Form::Start, self.backend, |_| Path {
            name: path,
            staged,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(op: &'static str, bytes: usize) -> Key {
        Key {
            op,
            form: Form::Blocking,
            backend: BackendKind::MpiHost,
            path: Path::NATIVE,
            bytes,
        }
    }

    #[test]
    fn env_values() {
        use std::ffi::OsStr;
        let p = |s: &str| Output::parse(Some(OsStr::new(s)));
        assert_eq!(Output::parse(None), None);
        for off in ["", "0", "off", " No ", "FALSE"] {
            assert_eq!(p(off), None, "{off:?}");
        }
        for on in ["1", "on", "TRUE", "yes"] {
            assert_eq!(p(on), Some(Output::Stderr), "{on:?}");
        }
        assert_eq!(
            p("/tmp/run/rec"),
            Some(Output::Files(PathBuf::from("/tmp/run/rec")))
        );
    }

    #[test]
    fn times_aggregate() {
        let mut t = Times::default();
        assert_eq!(t.mean(), None);
        for us in [30, 10, 20] {
            t.add(Duration::from_micros(us));
        }
        assert_eq!(t.count, 3);
        assert_eq!(t.total, Duration::from_micros(60));
        assert_eq!(t.min, Duration::from_micros(10));
        assert_eq!(t.max, Duration::from_micros(30));
        assert_eq!(t.mean(), Some(Duration::from_micros(20)));
    }

    #[test]
    fn calls_with_the_same_key_share_a_line() {
        let mut st = State::default();
        let a = st.slot(key("all_reduce", 64));
        let b = st.slot(key("all_reduce", 128));
        let c = st.slot(key("all_reduce", 64));
        let d = st.slot(Key {
            form: Form::NonBlocking,
            ..key("all_reduce", 64)
        });
        assert_eq!(a, c);
        assert_ne!(a, b);
        assert_ne!(a, d);
        for (slot, us) in [(a, 5), (c, 7), (b, 1)] {
            let s = &mut st.entries[slot].1;
            s.calls += 1;
            s.host.add(Duration::from_micros(us));
        }
        let snap = st.snapshot();
        assert_eq!(snap.len(), 3);
        // Sorted by op, form, backend, path, bytes.
        assert_eq!(
            snap.iter()
                .map(|e| (e.form, e.bytes, e.calls))
                .collect::<Vec<_>>(),
            vec![
                (Form::Blocking, 64, 2),
                (Form::Blocking, 128, 1),
                (Form::NonBlocking, 64, 0)
            ]
        );
        assert_eq!(snap[0].host.min, Duration::from_micros(5));
        assert_eq!(snap[0].host.max, Duration::from_micros(7));
    }

    #[test]
    fn table_lists_every_entry() {
        let mut st = State::default();
        let a = st.slot(Key {
            backend: BackendKind::Nccl,
            path: Path::direct("grouped-p2p"),
            ..key("all_gather_v", 4096)
        });
        let s = &mut st.entries[a].1;
        s.calls = 2;
        s.host.add(Duration::from_micros(12));
        s.host.add(Duration::from_micros(14));
        s.device.add(Duration::from_micros(40));
        s.device_pending = 1;
        let text = render(Some(3), &st.snapshot());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("rank 3"), "{text}");
        assert!(lines[1].starts_with("op "), "{text}");
        assert!(lines[1].contains("device max"), "{text}");
        let row = lines[2];
        for cell in [
            "all_gather_v",
            "blocking",
            "nccl",
            "grouped-p2p",
            "no",
            "4096",
            "26.0us",
            "12.0us",
            "14.0us",
            "40.0us (1 of 2)",
        ] {
            assert!(row.contains(cell), "{cell:?} in {row:?}");
        }
        assert!(render(None, &[]).contains("(no call recorded)"));
    }

    #[test]
    fn durations_print_in_a_readable_unit() {
        assert_eq!(Micros(Duration::from_nanos(1500)).to_string(), "1.5us");
        assert_eq!(Micros(Duration::from_micros(2500)).to_string(), "2.500ms");
        assert_eq!(Micros(Duration::from_millis(3200)).to_string(), "3.200s");
    }
}
