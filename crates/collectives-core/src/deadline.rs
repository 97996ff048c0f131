//! Deadlines: how long a blocking operation may wait for its peers, and the one polling loop that
//! waits against it.
//!
//! - **The setting**: [`TIMEOUT_ENV`] (`COLLECTIVES_TIMEOUT`) holds seconds (`30`, `2.5`), parsed by
//!   [`parse_timeout`]. On the MPI backends it is opt-in: unset, zero or unreadable means no deadline
//!   (the plain blocking MPI calls); [`MpiComm::with_timeout`](crate::MpiComm::with_timeout)
//!   overrides it per communicator. The NCCL backend always waits with a deadline and falls back to
//!   300 s.
//! - **The loop** ([`poll`]) asks "done yet?" until yes or until the deadline passes. It reads the
//!   clock once every [`CLOCK_EVERY`] polls, spins for the first [`SPIN_FOR`], then yields the core
//!   between polls (`std::thread::yield_now`): a result that arrives early is seen within one poll,
//!   and a long wait leaves the core to other processes of an oversubscribed node. It never sleeps,
//!   because MPI moves data only while it is polled from the calling thread (no thread level beyond
//!   what MPI was initialized with is needed).

use std::time::{Duration, Instant};

/// The environment variable of the deadline, in seconds (`COLLECTIVES_TIMEOUT=30`).
pub const TIMEOUT_ENV: &str = "COLLECTIVES_TIMEOUT";

/// Polls between two readings of the clock.
pub const CLOCK_EVERY: u32 = 16;

/// How long [`poll`] spins before it starts yielding the core between polls.
pub const SPIN_FOR: Duration = Duration::from_millis(1);

/// A deadline in seconds (a decimal number, surrounding blanks ignored), or `None` when `text` is not
/// a finite number above zero.
///
/// ```
/// use std::time::Duration;
/// use collectives_core::deadline::parse_timeout;
///
/// assert_eq!(parse_timeout("2.5"), Some(Duration::from_millis(2500)));
/// assert_eq!(parse_timeout("0"), None);
/// ```
pub fn parse_timeout(text: &str) -> Option<Duration> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// The deadline `COLLECTIVES_TIMEOUT` asks for, if it is set to one ([`parse_timeout`]).
pub fn timeout_from_env() -> Option<Duration> {
    std::env::var(TIMEOUT_ENV)
        .ok()
        .as_deref()
        .and_then(parse_timeout)
}

/// Whether a [`poll`] saw its operation complete or ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polled {
    /// `done` said yes.
    Done,
    /// The deadline passed first.
    TimedOut,
}

/// Call `done` until it returns `Ok(true)` or `timeout` has passed since the call began, spinning then
/// yielding as the [module documentation](self) says. An error from `done` ends the loop.
///
/// # Errors
/// The first error `done` returns.
pub fn poll<E>(timeout: Duration, mut done: impl FnMut() -> Result<bool, E>) -> Result<Polled, E> {
    let start = Instant::now();
    let mut polls = 0u32;
    let mut yielding = false;
    loop {
        if done()? {
            return Ok(Polled::Done);
        }
        polls = polls.wrapping_add(1);
        if polls % CLOCK_EVERY == 0 {
            let waited = start.elapsed();
            if waited >= timeout {
                return Ok(Polled::TimedOut);
            }
            yielding = waited >= SPIN_FOR;
        }
        if yielding {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_parse() {
        assert_eq!(parse_timeout("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_timeout(" 0.25\n"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout("1e-3"), Some(Duration::from_millis(1)));
        for bad in ["", "0", "-1", "abc", "inf", "NaN", "1s", "1e300"] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn completes_as_soon_as_done() {
        let mut left = 100;
        let r: Result<_, ()> = poll(Duration::from_secs(10), || {
            left -= 1;
            Ok(left == 0)
        });
        assert_eq!(r, Ok(Polled::Done));
        assert_eq!(left, 0, "polled exactly until done");
    }

    #[test]
    fn times_out_close_to_the_deadline() {
        let timeout = Duration::from_millis(50);
        let start = Instant::now();
        let r: Result<_, ()> = poll(timeout, || Ok(false));
        let took = start.elapsed();
        assert_eq!(r, Ok(Polled::TimedOut));
        assert!(took >= timeout, "{took:?}");
        assert!(took < timeout + Duration::from_millis(500), "{took:?}");
    }

    #[test]
    fn errors_end_the_loop() {
        let mut calls = 0;
        let r = poll(Duration::from_secs(10), || {
            calls += 1;
            if calls == 3 {
                Err("broken")
            } else {
                Ok(false)
            }
        });
        assert_eq!(r, Err("broken"));
        assert_eq!(calls, 3);
    }
}
