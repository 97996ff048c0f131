//! The opt-in progress engine of [`MpiComm`](super::MpiComm): a thread that makes MPI progress
//! while non-blocking operations are in flight, so that they advance while the rank computes.
//!
//! # Why
//!
//! Open MPI (and most MPIs without hardware offload) moves the data of a non-blocking collective
//! only while some thread of the process is inside an MPI call: `MPI_Iallreduce` returns, the rank
//! computes, and the collective sits still until `MPI_Wait`. OSU's `osu_iallreduce` measures 0 %
//! overlap on 2 ranks of Open MPI 4.1 from 1 KiB to 4 MiB for that reason.
//!
//! # How
//!
//! Every communicator with the engine shares one engine with the communicators made from it
//! (`dup`, `split`, the device backends built on it). It counts the operations in flight on them:
//! an operation counts from its start until it completes (through `wait`, `test` or the end of its
//! scope). While the count is above zero the engine's thread calls `MPI_Iprobe` on a private
//! duplicate of `MPI_COMM_SELF`, on which nothing is ever sent: the probe finds nothing, and each
//! call runs one pass of Open MPI's progress loop (`opal_progress`), which advances every
//! non-blocking operation of the process (the schedules of non-blocking collectives, rendezvous
//! handshakes, shared-memory fragments). Between probes it yields the core, or sleeps
//! [`ProgressOptions::poll_interval`]. When the count drops to zero the thread parks: an idle
//! engine takes no CPU time and makes no MPI call.
//!
//! # Cost and requirements
//!
//! - **A core while operations fly.** With the default interval (zero: yield between probes) the
//!   thread keeps one core busy from the start of an operation to its completion. Leave a core per
//!   rank for it (e.g. `mpirun --map-by ppr:N:node:pe=2`, or fewer ranks than cores); on an
//!   oversubscribed node it competes with the computation it is meant to overlap. A longer
//!   interval costs less CPU and adds up to one interval of latency per protocol step.
//! - **`MPI_THREAD_MULTIPLE`.** The thread calls MPI concurrently with the rank's own calls, which
//!   MPI allows only at that thread level. Initialize MPI with it through rsmpi:
//!
//!   ```no_run
//!   use collectives_core::MpiComm;
//!   use mpi::Threading;
//!
//!   let (universe, provided) =
//!       mpi::initialize_with_threading(Threading::Multiple).expect("MPI initializes once");
//!   assert_eq!(provided, Threading::Multiple, "this MPI has no MPI_THREAD_MULTIPLE");
//!   let comm = MpiComm::world(&universe)?.with_progress(true)?;
//!   # Ok::<(), collectives_core::Error>(())
//!   ```
//!
//!   Enabling the engine at a lower level is [`Error::ThreadLevel`].
//! - **Teardown.** The thread stops (and its private communicator is freed) when the last
//!   communicator sharing the engine is dropped or finalized; drop communicators before MPI is
//!   finalized, as always. The thread makes MPI calls only while an operation is in flight, and
//!   every operation completes before its scope ends.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use mpi::ffi;

use super::raw;
use crate::error::{Error, Result};

/// The environment variable that turns the engine on for every communicator made by
/// [`MpiComm::world`](super::MpiComm::world), [`from_rsmpi`](super::MpiComm::from_rsmpi) and
/// [`from_raw`](super::MpiComm::from_raw): `1`, `on`, `true` or `yes` (any case).
pub const PROGRESS_ENV: &str = "COLLECTIVES_PROGRESS";

/// The environment variable of the engine's poll interval in microseconds (a decimal number);
/// unset or `0`: yield the core between probes.
pub const PROGRESS_POLL_ENV: &str = "COLLECTIVES_PROGRESS_POLL_US";

/// How the progress engine polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ProgressOptions {
    /// Pause between two probes while operations are in flight: zero (the default) yields the core
    /// (`std::thread::yield_now`) and probes again at once; above zero the thread sleeps that long
    /// (the operating system rounds short sleeps up, typically to 50 to 100 us on Linux).
    pub poll_interval: Duration,
}

impl ProgressOptions {
    /// Options with this poll interval.
    pub fn with_poll_interval(poll_interval: Duration) -> Self {
        ProgressOptions { poll_interval }
    }

    /// What the environment asks for: `None` unless [`PROGRESS_ENV`] is on; the interval from
    /// [`PROGRESS_POLL_ENV`].
    pub fn from_env() -> Option<Self> {
        let on = std::env::var(PROGRESS_ENV).ok()?;
        if !parse_switch(&on) {
            return None;
        }
        let interval = std::env::var(PROGRESS_POLL_ENV)
            .ok()
            .and_then(|s| parse_micros(&s))
            .unwrap_or_default();
        Some(ProgressOptions::with_poll_interval(interval))
    }
}

/// Whether `text` switches something on: `1`, `on`, `true`, `yes` (any case, blanks ignored).
pub fn parse_switch(text: &str) -> bool {
    matches!(
        text.trim().to_ascii_lowercase().as_str(),
        "1" | "on" | "true" | "yes"
    )
}

/// A duration from microseconds as text (`0`, `20`, `2.5`); `None` unless a finite number >= 0.
pub fn parse_micros(text: &str) -> Option<Duration> {
    let us: f64 = text.trim().parse().ok()?;
    if !us.is_finite() || us < 0.0 {
        return None;
    }
    Duration::try_from_secs_f64(us * 1e-6).ok()
}

/// What an engine has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ProgressStats {
    /// Operations in flight now on the communicators sharing the engine.
    pub in_flight: usize,
    /// Probes made since the engine started.
    pub polls: u64,
    /// Probes that returned an error (the thread keeps going; the operations report their own
    /// errors when they are waited for).
    pub errors: u64,
}

/// The name of an MPI thread level, from its value in this MPI.
pub fn thread_level_name(level: c_int) -> &'static str {
    // SAFETY: the RSMPI_THREAD_* values are constants initialized by rsmpi's C shim.
    let (single, funneled, serialized, multiple) = unsafe {
        (
            ffi::RSMPI_THREAD_SINGLE,
            ffi::RSMPI_THREAD_FUNNELED,
            ffi::RSMPI_THREAD_SERIALIZED,
            ffi::RSMPI_THREAD_MULTIPLE,
        )
    };
    match level {
        l if l == single => "MPI_THREAD_SINGLE",
        l if l == funneled => "MPI_THREAD_FUNNELED",
        l if l == serialized => "MPI_THREAD_SERIALIZED",
        l if l == multiple => "MPI_THREAD_MULTIPLE",
        _ => "an unknown thread level",
    }
}

/// `Ok` when `provided` is `multiple`, else [`Error::ThreadLevel`] naming `provided`.
pub(crate) fn require_multiple(provided: c_int, multiple: c_int) -> Result<()> {
    if provided == multiple {
        Ok(())
    } else {
        Err(Error::ThreadLevel {
            op: "progress",
            required: "MPI_THREAD_MULTIPLE",
            provided: thread_level_name(provided),
        })
    }
}

/// The thread level MPI provides (`MPI_Query_thread`).
///
/// # Errors
/// [`Error::Mpi`] from the query.
pub fn provided_thread_level() -> Result<c_int> {
    let mut provided: c_int = 0;
    // SAFETY: MPI is initialized (the caller holds a communicator); `provided` is a valid out-pointer.
    raw::check("progress", unsafe { ffi::MPI_Query_thread(&mut provided) })?;
    Ok(provided)
}

/// What the thread and the operations in flight share.
#[derive(Debug)]
struct Shared {
    in_flight: AtomicUsize,
    stop: AtomicBool,
    polls: AtomicU64,
    errors: AtomicU64,
}

/// An MPI communicator handle that the progress thread may use: sent to it once, used by it alone
/// until it is joined.
struct SelfComm(ffi::MPI_Comm);

// SAFETY: at MPI_THREAD_MULTIPLE (checked before the thread starts) MPI handles may be used from
// any thread; this handle is used only by the progress thread while it runs, and freed by the
// engine's owner after joining it.
unsafe impl Send for SelfComm {}

/// One progress thread and its private communicator, shared (through `Rc`) by the communicators
/// that use it; see the [module documentation](self).
#[derive(Debug)]
pub(crate) struct Engine {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    handle: Thread,
    comm: ffi::MPI_Comm,
    options: ProgressOptions,
}

impl Engine {
    /// Check the thread level, duplicate `MPI_COMM_SELF` (a local call) and start the thread,
    /// parked until an operation starts.
    ///
    /// # Errors
    /// [`Error::ThreadLevel`] below `MPI_THREAD_MULTIPLE`; [`Error::Mpi`] from the query or the
    /// duplicate; [`Error::Unavailable`] when the thread cannot be started.
    pub(crate) fn start(options: ProgressOptions) -> Result<Engine> {
        // SAFETY: a constant of rsmpi's shim.
        let multiple = unsafe { ffi::RSMPI_THREAD_MULTIPLE };
        require_multiple(provided_thread_level()?, multiple)?;
        // SAFETY: an MPI_Comm handle may start as any value; MPI_Comm_dup overwrites it.
        let mut comm: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: MPI_COMM_SELF is a predefined communicator; `comm` is a valid out-pointer.
        raw::check("progress", unsafe {
            ffi::MPI_Comm_dup(ffi::RSMPI_COMM_SELF, &mut comm)
        })?;
        let shared = Arc::new(Shared {
            in_flight: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            polls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        let for_thread = (shared.clone(), SelfComm(comm), options.poll_interval);
        let spawned = std::thread::Builder::new()
            .name("mpi-progress".into())
            .spawn(move || {
                let (shared, comm, interval) = for_thread;
                drive(&shared, comm, interval);
            });
        let thread = match spawned {
            Ok(t) => t,
            Err(e) => {
                // SAFETY: `comm` was created above and nothing else holds it.
                unsafe { ffi::MPI_Comm_free(&mut comm) };
                return Err(Error::Unavailable {
                    what: "the MPI progress thread",
                    message: e.to_string(),
                });
            }
        };
        Ok(Engine {
            shared,
            handle: thread.thread().clone(),
            thread: Some(thread),
            comm,
            options,
        })
    }

    /// Count one more operation in flight until the returned ticket is dropped; wakes the thread.
    pub(crate) fn ticket(&self) -> InFlight {
        if self.shared.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.handle.unpark();
        }
        InFlight {
            shared: self.shared.clone(),
        }
    }

    /// What the engine has done so far.
    pub(crate) fn stats(&self) -> ProgressStats {
        ProgressStats {
            in_flight: self.shared.in_flight.load(Ordering::Acquire),
            polls: self.shared.polls.load(Ordering::Relaxed),
            errors: self.shared.errors.load(Ordering::Relaxed),
        }
    }

    /// The options it runs with.
    pub(crate) fn options(&self) -> ProgressOptions {
        self.options
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.handle.unpark();
        if let Some(t) = self.thread.take() {
            // The thread never panics (it only probes and counts); a join error is dropped
            // because a drop must not panic.
            let _ = t.join();
        }
        let mut finalized: c_int = 0;
        // SAFETY: MPI_Finalized may be called at any time.
        unsafe { ffi::MPI_Finalized(&mut finalized) };
        if finalized == 0 {
            // SAFETY: the thread that used `comm` has been joined; nothing else holds it.
            unsafe { ffi::MPI_Comm_free(&mut self.comm) };
        }
    }
}

/// The progress thread: probe while operations are in flight, park otherwise, stop when told.
fn drive(shared: &Shared, comm: SelfComm, interval: Duration) {
    // SAFETY: constants of rsmpi's shim.
    let (any_source, any_tag) = unsafe { (ffi::RSMPI_ANY_SOURCE, ffi::RSMPI_ANY_TAG) };
    let mut status = raw::status();
    while !shared.stop.load(Ordering::Acquire) {
        if shared.in_flight.load(Ordering::Acquire) == 0 {
            // An unpark between the load and here makes this park return at once.
            std::thread::park();
            continue;
        }
        let mut flag: c_int = 0;
        // SAFETY: the private communicator is valid until this thread is joined; MPI runs at
        // MPI_THREAD_MULTIPLE; `flag` and `status` are valid out-pointers.
        let rc = unsafe { ffi::MPI_Iprobe(any_source, any_tag, comm.0, &mut flag, &mut status) };
        shared.polls.fetch_add(1, Ordering::Relaxed);
        if rc != 0 {
            shared.errors.fetch_add(1, Ordering::Relaxed);
        }
        if interval.is_zero() {
            std::thread::yield_now();
        } else {
            std::thread::sleep(interval);
        }
    }
}

/// One operation in flight on a communicator with the engine; dropping it says the operation is
/// complete (or abandoned).
#[derive(Debug)]
pub(crate) struct InFlight {
    shared: Arc<Shared>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_and_intervals_parse() {
        for on in ["1", "on", "TRUE", " yes\n"] {
            assert!(parse_switch(on), "{on:?}");
        }
        for off in ["", "0", "off", "no", "2", "enabled"] {
            assert!(!parse_switch(off), "{off:?}");
        }
        assert_eq!(parse_micros("0"), Some(Duration::ZERO));
        assert_eq!(parse_micros("20"), Some(Duration::from_micros(20)));
        assert_eq!(parse_micros(" 2.5 "), Some(Duration::from_nanos(2500)));
        for bad in ["-1", "x", "inf", "NaN", ""] {
            assert_eq!(parse_micros(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_multiple_is_enough() {
        // SAFETY: constants of rsmpi's shim.
        let (single, funneled, serialized, multiple) = unsafe {
            (
                ffi::RSMPI_THREAD_SINGLE,
                ffi::RSMPI_THREAD_FUNNELED,
                ffi::RSMPI_THREAD_SERIALIZED,
                ffi::RSMPI_THREAD_MULTIPLE,
            )
        };
        assert!(require_multiple(multiple, multiple).is_ok());
        for (level, name) in [
            (single, "MPI_THREAD_SINGLE"),
            (funneled, "MPI_THREAD_FUNNELED"),
            (serialized, "MPI_THREAD_SERIALIZED"),
        ] {
            let e = require_multiple(level, multiple).unwrap_err();
            assert_eq!(
                e,
                Error::ThreadLevel {
                    op: "progress",
                    required: "MPI_THREAD_MULTIPLE",
                    provided: name,
                }
            );
            let text = e.to_string();
            assert!(
                text.contains(name) && text.contains("initialize_with_threading"),
                "{text}"
            );
        }
        assert_eq!(thread_level_name(-12345), "an unknown thread level");
    }

    #[test]
    fn tickets_count_operations_in_flight() {
        let shared = Arc::new(Shared {
            in_flight: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            polls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        let a = InFlight {
            shared: shared.clone(),
        };
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        let b = InFlight {
            shared: shared.clone(),
        };
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        assert_eq!(shared.in_flight.load(Ordering::Acquire), 2);
        drop(a);
        assert_eq!(shared.in_flight.load(Ordering::Acquire), 1);
        drop(b);
        assert_eq!(shared.in_flight.load(Ordering::Acquire), 0);
    }
}
