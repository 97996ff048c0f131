//! Aborts running on threads of their own ([`NcclComm`](super::NcclComm) after a timeout), counted
//! so that the process's exit waits for them.
//!
//! A communicator joins its abort thread when it is dropped. One that is never dropped (leaked, or
//! still alive when `std::process::exit` runs) would leave `ncclCommAbort` running while `exit`
//! tears down libnccl and the CUDA driver under it: NCCL's threads then crash the process
//! (`SIGSEGV` at exit, seen on 3 and 4 H100 with a dead peer). So the first abort in the
//! background registers an `atexit` handler that waits, at most [`EXIT_WAIT`], until every abort
//! counted here has returned. Handlers run in the reverse order of registration: this one, made
//! after libnccl and the driver were loaded, runs before their teardown.

use std::sync::{Condvar, Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

/// How long the process's exit waits for aborts still running (each takes about 1 s).
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// Aborts started and not yet returned.
static RUNNING: Mutex<usize> = Mutex::new(0);
/// Signalled whenever an abort returns.
static RETURNED: Condvar = Condvar::new();
/// The `atexit` registration, made once.
static AT_EXIT: Once = Once::new();

/// One abort in the background, counted from before its thread starts until this is dropped
/// (when the abort returned, or with the closure of a thread that could not be started).
pub(super) struct Running(());

impl Running {
    /// Count one abort about to start.
    pub(super) fn start() -> Self {
        AT_EXIT.call_once(|| {
            // SAFETY: `wait_at_exit` is an `extern "C"` function without arguments that never
            // unwinds (a poisoned lock is taken as it is; nothing in it panics); atexit only
            // stores its address. A failed registration (no room) leaves exit as it was.
            unsafe { libc::atexit(wait_at_exit) };
        });
        *RUNNING.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Running(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
        *running = running.saturating_sub(1);
        RETURNED.notify_all();
    }
}

/// The number of aborts running now.
#[cfg(test)]
fn running() -> usize {
    *RUNNING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wait until no abort runs, or `limit` passed; whether none runs.
pub(super) fn wait_for_all(limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
    while *running > 0 {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        running = RETURNED
            .wait_timeout(running, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    true
}

extern "C" fn wait_at_exit() {
    wait_for_all(EXIT_WAIT);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_waits_for_a_running_abort_and_no_longer() {
        let abort = Running::start();
        assert_eq!(running(), 1);
        // Still running: the wait gives up at its limit.
        let t = Instant::now();
        assert!(!wait_for_all(Duration::from_millis(50)));
        assert!(t.elapsed() >= Duration::from_millis(50));
        // Returned on another thread: the wait sees it.
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(abort);
        });
        assert!(wait_for_all(Duration::from_secs(10)));
        assert_eq!(running(), 0);
        thread.join().unwrap();
    }
}
