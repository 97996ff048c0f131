//! The `persistent` variant (`--persistent`): every collective timed through the library's
//! persistent plans (`all_reduce_init`, ..., `barrier_init`), made once per size and placement on
//! the engine's buffers, then started and waited once per iteration.
//!
//! Which path a plan takes is the library's choice and is reported once per backend and collective
//! ([`collectives_core::PlanPath`]): `MPIX_<Coll>_init`/`MPI_<Coll>_init` and `MPI_Start` on host
//! MPI, a CUDA graph launched per run on NCCL, the non-blocking call per run elsewhere (`replay`).
//!
//! Timing ([`crate::measure::hooks::BenchBackend::time_plan`]): on host MPI and the device backends over
//! MPI, the wall clock around `start` + `wait`, as OSU's `osu_*_persistent` time `MPI_Start` +
//! `MPI_Wait`. On NCCL each run is timed between CUDA events around its `start` (the graph launch)
//! and the stream synchronized before the next: a plan's run must be waited for before it starts
//! again, so runs cannot be queued back to back through a plan and `-z 0` does not apply (nccl-tests'
//! `-G N` captures its `-n` iterations into one graph and launches it `N` times back to back, with
//! one synchronization at the end).
//!
//! With `-c 1` a fresh plan on fresh buffers is made, run once, and its result read through the
//! plan's [`recv`](collectives_core::Persistent::recv) and counted like the engine's.
//!
//! `sendrecv` has no persistent form in the library: its persistent rows are left out with a note.

use collectives_core::{Communicator, Persistent, PlanPath, Scope};

use crate::measure::expected::BenchElement;
use crate::measure::hooks::{BenchBackend, BufMutOf, Collective, Ctx, Shape, Step};

/// A plan of any collective: `barrier_init` gives a plan without buffers, the others one on the
/// communicator's buffer type.
#[derive(Debug)]
pub enum Plan<'s, X: ?Sized> {
    /// A plan with buffers.
    Buffers(Persistent<'s, X>),
    /// `barrier_init`'s plan.
    Barrier(Persistent<'s>),
}

impl<X: ?Sized> Plan<'_, X> {
    /// Start a run.
    ///
    /// # Errors
    /// The library's errors ([`Persistent::start`]).
    pub fn start(&mut self) -> anyhow::Result<()> {
        match self {
            Plan::Buffers(p) => p.start()?,
            Plan::Barrier(p) => p.start()?,
        }
        Ok(())
    }

    /// Complete the run in flight (at once without one).
    ///
    /// # Errors
    /// The library's errors ([`Persistent::wait`]).
    pub fn wait(&mut self) -> anyhow::Result<()> {
        match self {
            Plan::Buffers(p) => p.wait()?,
            Plan::Barrier(p) => p.wait()?,
        }
        Ok(())
    }

    /// How the library runs it.
    pub fn path(&self) -> PlanPath {
        match self {
            Plan::Buffers(p) => p.path(),
            Plan::Barrier(p) => p.path(),
        }
    }

    /// The receive buffer between runs; `None` where this rank has none (barrier).
    ///
    /// # Errors
    /// [`collectives_core::Error::PlanActive`] while a run is in flight.
    pub fn recv(&self) -> anyhow::Result<Option<&X>> {
        match self {
            Plan::Buffers(p) => Ok(Some(p.recv()?)),
            Plan::Barrier(_) => Ok(None),
        }
    }
}

/// A collective with a persistent form in the library: how the engine makes its plan on the
/// buffers of the blocking hooks.
pub trait PersistentForm: Collective {
    /// The library call that makes the plan (`all_reduce_init`, ...); `None`: no persistent form.
    const INIT: Option<&'static str>;

    /// The plan on `send` and `recv` (in place: on `recv` alone, filled with the input) in scope `s`.
    ///
    /// # Errors
    /// The library's errors; no persistent form.
    #[allow(clippy::too_many_arguments)]
    fn init<'s, B: BenchBackend, T: BenchElement>(
        b: &'s B,
        ctx: &Ctx,
        shape: &Shape,
        send: &'s mut B::Owned<T>,
        recv: &'s mut B::Owned<T>,
        in_place: bool,
        s: &'s Scope<'s, '_>,
    ) -> anyhow::Result<Plan<'s, BufMutOf<'s, B, T>>>;
}

/// Fresh send and receive buffers for the check run.
pub type Fresh<'a, B, T> =
    &'a dyn Fn() -> anyhow::Result<(<B as BenchBackend>::Owned<T>, <B as BenchBackend>::Owned<T>)>;

/// What one placement measured through a plan: this rank's seconds per iteration, the wrong
/// elements of the check run (`None` without `-c 1`), and the path the library took.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Seconds per timed iteration.
    pub times: Vec<f64>,
    /// Wrong elements of this rank's output.
    pub wrong: Option<u64>,
    /// The plan's path.
    pub path: PlanPath,
}

/// Time collective `K` through a plan on `send` and `recv` (`warmup` runs, then `iters` timed),
/// then, with `check`, make a fresh plan on the buffers `fresh` gives, run it once and count the
/// wrong elements of its receive buffer with `count`.
///
/// # Errors
/// The library's errors; timer errors.
#[allow(clippy::too_many_arguments)]
pub fn measure<K: PersistentForm, B: BenchBackend, T: BenchElement>(
    b: &B,
    ctx: &Ctx,
    shape: &Shape,
    mut send: B::Owned<T>,
    mut recv: B::Owned<T>,
    in_place: bool,
    warmup: usize,
    iters: usize,
    check: Option<Fresh<'_, B, T>>,
    count: &dyn Fn(&[T]) -> u64,
) -> anyhow::Result<Measured> {
    let (times, path) = collectives_core::scope(|s| -> anyhow::Result<_> {
        let mut plan = K::init(b, ctx, shape, &mut send, &mut recv, in_place, s)?;
        for _ in 0..warmup {
            plan.start()?;
            plan.wait()?;
        }
        b.ctl().barrier()?;
        let times = b.time_plan(iters, &mut |step| match step {
            Step::Start => plan.start(),
            Step::Wait => plan.wait(),
        })?;
        plan.wait()?;
        Ok((times, plan.path()))
    })??;
    let wrong = match check {
        None => None,
        Some(fresh) => {
            let (mut send, mut recv) = fresh()?;
            let got = collectives_core::scope(|s| -> anyhow::Result<Vec<T>> {
                let mut plan = K::init(b, ctx, shape, &mut send, &mut recv, in_place, s)?;
                plan.start()?;
                plan.wait()?;
                // A rank that receives nothing (off the root of a gather or reduce) has no
                // receive buffer in its plan, and nothing to check.
                if shape.recv == 0 {
                    return Ok(Vec::new());
                }
                match plan.recv()? {
                    Some(buf) => b.download_buf(buf),
                    None => Ok(Vec::new()),
                }
            })??;
            Some(count(&got))
        }
    };
    Ok(Measured { times, wrong, path })
}

#[cfg(test)]
mod tests {
    use crate::cmd::coll::CollName;

    #[test]
    fn every_collective_but_sendrecv_has_a_plan() {
        for &c in CollName::ALL {
            assert_eq!(
                c.persistent_init().is_some(),
                c != CollName::Sendrecv,
                "{}",
                c.name()
            );
        }
        assert_eq!(
            CollName::Allreduce.persistent_init(),
            Some("all_reduce_init")
        );
    }
}
