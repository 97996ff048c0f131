//! Which all-reduces of an NCCL communicator take the one-shot path ([`crate::one_shot`]) instead
//! of NCCL: those of at most `COLLECTIVES_ONE_SHOT_MAX_BYTES` bytes ([`MAX_BYTES_ENV`]; 0: none;
//! unset: [`DEFAULT_MAX_BYTES`], the crossover measured on H100) of a
//! type and reduce operation it offers, on the stream the path was made on, while no persistent
//! plan captures a CUDA graph. Barriers, which are all-reduces of one value, take it too. The path
//! is set up when the communicator is (collective, like the creation), where it is offered; the
//! per-call record names the path a call took (`one-shot`, or `native` with the reason where one
//! is worth naming: [`Declined::record_path`]).

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

/// The largest all-reduce, in bytes, that takes the path when [`MAX_BYTES_ENV`] is not set: the
/// measured crossover. The whole GPU suite passed with it chosen on 1 to 4 H100
/// (docs/logs/2026-11-26-one-shot-default/); `COLLECTIVES_ONE_SHOT_MAX_BYTES=0` turns the path off.
pub const DEFAULT_MAX_BYTES: usize = MEASURED_MAX_BYTES;

/// The environment variable that sets the byte limit (bytes; 0: off), read when a communicator is
/// made.
pub const MAX_BYTES_ENV: &str = "COLLECTIVES_ONE_SHOT_MAX_BYTES";

/// Why an all-reduce of an NCCL communicator went through NCCL instead of the one-shot path
/// ([`NcclComm::one_shot_declined`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Declined {
    /// The path is not offered on this communicator's ranks: they span nodes, a pair of GPUs
    /// lacks peer access, two ranks share a GPU, ... ([`NcclComm::one_shot_refusal`] says why).
    NotOffered,
    /// The path is turned off (`COLLECTIVES_ONE_SHOT_MAX_BYTES=0`, or
    /// [`NcclComm::without_one_shot`]).
    Off,
    /// The call is larger than the limit ([`NcclComm::one_shot_max_bytes`]).
    AboveLimit,
    /// A persistent plan was capturing the call into a CUDA graph. The path runs on the stream
    /// it was made on, which is not the stream a capture records on (the communicator's default
    /// stream cannot be captured: plans capture on a stream of their own).
    CapturingGraph,
    /// The communicator's stream is not the one the path was made on
    /// ([`with_stream`](crate::DeviceCommunicator::with_stream) after creation): the path's
    /// slots are reused safely only in the order of one stream.
    OtherStream,
    /// The path offers no kernel for this element type and reduce operation.
    NotForThisOperation,
}

impl Declined {
    /// The path the per-call record names for an all-reduce declined for this reason: `native`
    /// where the path was not asked for (off, or above the limit), `native (...)` with the reason
    /// otherwise.
    pub const fn record_path(self) -> &'static str {
        match self {
            Declined::Off | Declined::AboveLimit => "native",
            Declined::NotOffered => "native (one-shot not offered on these ranks)",
            Declined::CapturingGraph => "native (one-shot declined: CUDA graph capture)",
            Declined::OtherStream => "native (one-shot declined: another stream)",
            Declined::NotForThisOperation => "native (one-shot declined: type or operation)",
        }
    }
}

/// The path of one communicator, as set up at its creation.
#[derive(Debug)]
pub(crate) struct OneShotSlot {
    max_bytes: usize,
    path: Result<OneShot, String>,
    /// The path the last all-reduce took (`Ok`: the one-shot path), for the per-call record and
    /// [`NcclComm::one_shot_declined`].
    pub(crate) last: Cell<Option<Result<(), Declined>>>,
}

impl OneShotSlot {
    /// The record's name of the last all-reduce's path.
    pub(crate) fn last_path(&self) -> &'static str {
        match self.last.get() {
            Some(Ok(())) => "one-shot",
            Some(Err(d)) => d.record_path(),
            None => "native",
        }
    }
}

impl OneShotSlot {
    /// No path (before creation, or turned off).
    pub(crate) fn off(why: &str) -> Self {
        Self {
            max_bytes: 0,
            path: Err(why.to_owned()),
            last: Cell::new(None),
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
            last: Cell::new(None),
        };
        Ok(())
    }

    /// The path for an all-reduce of `n` wire values of `T` with `red`, or why it does not take
    /// it.
    pub(super) fn one_shot_for<T: Element>(
        &self,
        n: usize,
        red: ReduceOp,
    ) -> Result<&OneShot, Declined> {
        let path = self.one_shot.path.as_ref().map_err(|_| {
            if self.one_shot.max_bytes == 0 {
                Declined::Off
            } else {
                Declined::NotOffered
            }
        })?;
        let bytes = n.checked_mul(T::WIRE.dtype.size());
        if !matches!(bytes, Some(b) if b <= self.one_shot.max_bytes) {
            return Err(Declined::AboveLimit);
        }
        if self.capturing.get().is_some() {
            return Err(Declined::CapturingGraph);
        }
        if !Arc::ptr_eq(path.stream(), &self.stream) {
            return Err(Declined::OtherStream);
        }
        if !path.offers::<T>(red) {
            return Err(Declined::NotForThisOperation);
        }
        Ok(path)
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

    /// Why the last all-reduce on this communicator went through NCCL instead of the one-shot
    /// path (`None`: it took the path, or no all-reduce ran yet). A persistent plan's capture
    /// into a CUDA graph is one such all-reduce: after `all_reduce_init` this says
    /// [`Declined::CapturingGraph`] where the plan captured a graph.
    pub fn one_shot_declined(&self) -> Option<Declined> {
        self.one_shot.last.get().and_then(Result::err)
    }

    /// Why the one-shot path is not offered on this communicator (`None`: it is).
    pub fn one_shot_refusal(&self) -> Option<&str> {
        self.one_shot.path.as_ref().err().map(String::as_str)
    }
}
