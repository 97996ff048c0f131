//! Which all-reduces of an NCCL communicator take the one-shot path ([`crate::one_shot`]) instead
//! of NCCL: those of at most `COLLECTIVES_ONE_SHOT_MAX_BYTES` bytes ([`MAX_BYTES_ENV`]; unset or
//! 0: none, the default for now; [`MEASURED_MAX_BYTES`] is the crossover measured on H100) of a
//! type and reduce operation it offers, on the stream the path was made on, while no persistent
//! plan captures a CUDA graph. Barriers, which are all-reduces of one value, take it too. The path
//! is set up when the communicator is (collective, like the creation), where it is offered; the
//! per-call record names the path a call took (`one-shot` or `native`).

use std::cell::Cell;
use std::sync::Arc;

use super::NcclComm;
use crate::element::Element;
use crate::error::Result;
use crate::one_shot::{Offer, OneShot};
use crate::op::ReduceOp;

/// The largest all-reduce, in bytes, for which the one-shot path beat NCCL on 2 and 4 H100: up
/// to 32 KiB, and it lost at 256 KiB (docs/PERFORMANCE.md). The value to give [`MAX_BYTES_ENV`].
pub const MEASURED_MAX_BYTES: usize = 32 << 10;

/// The largest all-reduce, in bytes, that takes the path when [`MAX_BYTES_ENV`] is not set: none
/// yet. The path is opt-in until the whole GPU suite passes with it chosen (with it chosen by
/// default, a silent peer in a point-to-point case and one of `nccl_collectives`' cases on 2
/// ranks did not come back on 2-4 H100: docs/logs/2026-11-26-device-paths/).
pub const DEFAULT_MAX_BYTES: usize = 0;

/// The environment variable that sets the byte limit (bytes; 0: off), read when a communicator is
/// made.
pub const MAX_BYTES_ENV: &str = "COLLECTIVES_ONE_SHOT_MAX_BYTES";

/// The path of one communicator, as set up at its creation.
#[derive(Debug)]
pub(crate) struct OneShotSlot {
    max_bytes: usize,
    path: Result<OneShot, String>,
    /// The path the last all-reduce took, for the per-call record.
    pub(crate) last: Cell<&'static str>,
}

impl OneShotSlot {
    /// No path (before creation, or turned off).
    pub(crate) fn off(why: &str) -> Self {
        Self {
            max_bytes: 0,
            path: Err(why.to_owned()),
            last: Cell::new("native"),
        }
    }

    /// Whether a kernel of the path gave up waiting for a peer.
    pub(crate) fn failed(&self) -> bool {
        self.path.as_ref().is_ok_and(OneShot::has_failed)
    }

    /// Refuse the path's later calls (its communicator timed out or was aborted).
    pub(crate) fn refuse(&self) {
        if let Ok(p) = &self.path {
            p.refuse();
        }
    }

    pub(crate) fn set_timeout(&self, timeout: std::time::Duration) {
        if let Ok(p) = &self.path {
            p.set_timeout(timeout);
        }
    }
}

/// The byte limit from the environment, else the default.
fn max_bytes_from_env() -> usize {
    std::env::var(MAX_BYTES_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_BYTES)
}

impl NcclComm {
    /// Set up the one-shot path of a communicator just made (collective over its ranks).
    pub(super) fn set_up_one_shot(&mut self) -> Result<()> {
        let max_bytes = max_bytes_from_env();
        if max_bytes == 0 {
            self.one_shot = OneShotSlot::off(&format!("{MAX_BYTES_ENV}=0"));
            return Ok(());
        }
        let path = match OneShot::offer(self, max_bytes.next_multiple_of(256))? {
            Offer::Ready(p) => Ok(p),
            Offer::NotOffered(why) => Err(why),
        };
        self.one_shot = OneShotSlot {
            max_bytes,
            path,
            last: Cell::new("native"),
        };
        Ok(())
    }

    /// The path for an all-reduce of `n` wire values of `T` with `red`, if it takes one.
    pub(super) fn one_shot_for<T: Element>(&self, n: usize, red: ReduceOp) -> Option<&OneShot> {
        let path = self.one_shot.path.as_ref().ok()?;
        let bytes = n.checked_mul(T::WIRE.dtype.size())?;
        let takes = bytes <= self.one_shot.max_bytes
            && self.capturing.get().is_none()
            && Arc::ptr_eq(path.stream(), &self.stream)
            && path.offers::<T>(red);
        takes.then_some(path)
    }

    /// This communicator without the one-shot path: every all-reduce goes through NCCL.
    /// Collective: every rank calls it at the same point of its calls (the path's memory is
    /// freed once every rank is past its last one-shot call).
    #[must_use]
    pub fn without_one_shot(mut self) -> Self {
        self.one_shot = OneShotSlot::off("turned off (without_one_shot)");
        self
    }

    /// The largest all-reduce, in bytes, that takes the one-shot path (0 where it is off or not
    /// offered).
    pub fn one_shot_max_bytes(&self) -> usize {
        if self.one_shot.path.is_ok() {
            self.one_shot.max_bytes
        } else {
            0
        }
    }

    /// Why the one-shot path is not offered on this communicator (`None`: it is).
    pub fn one_shot_refusal(&self) -> Option<&str> {
        self.one_shot.path.as_ref().err().map(String::as_str)
    }
}
