//! The benchmark engine: buffer set-up, warm-up, the timed loop, validation, statistics over ranks
//! and iterations, and the output row, written once for every collective and every backend.
//!
//! A collective contributes a [`Collective`](crate::measure::hooks::Collective) (its hooks: how to
//! size, fill, run and check its buffers, and its bus-bandwidth factor; one file under
//! [`crate::cmd::coll`]); a backend contributes a [`BenchBackend`] (how to hold a buffer, upload and
//! download it, and how to time a loop; both in [`crate::measure::hooks`]). The engine is generic
//! over both, so adding either needs nothing here.
//!
//! Per size and placement (out-of-place, then in-place where the collective has that form): the send
//! buffer is filled with the check pattern, `-w` warm-up calls, a barrier, `-n` timed calls (each
//! iteration timed on its own; under `--osu` with a barrier after each call, as OSU), then with `-c 1` the buffers are filled again, one more call is made and
//! the wrong elements of every rank's output are counted against the answer the hooks compute from the
//! inputs alone. Every decision depends only on the arguments, so all ranks make the same calls.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use collectives_core::cudarc::driver::sys::CUevent_flags;
use collectives_core::cudarc::driver::{CudaSlice, CudaStream};
use collectives_core::{
    device, Communicator, DeviceBuffer, DeviceBufferMut, DeviceCommunicator, MpiComm, MpiCudaComm,
    MpiStagedComm, NcclBuffer, NcclComm, ReduceOp, RegisterMode,
};

use crate::measure::backend::Backend;
use crate::measure::dtype::DataType;
use crate::measure::expected::{tolerance, BenchElement};
use crate::measure::hooks::{count_wrong, fill, BenchBackend, Bufs, Ctx, Step};
use crate::measure::persistent::PersistentForm;
use crate::measure::timing::{self, Spread};
use crate::measure::variant::Variant;
use crate::output::record::{IterStats, Placement, Row};
use crate::output::report::Reporter;

/// What every size of a run shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Timed calls.
    pub iters: usize,
    /// Warm-up calls.
    pub warmup_iters: usize,
    /// Count wrong elements.
    pub check: bool,
    /// The root of rooted collectives.
    pub root: usize,
    /// nccl-tests' `-z`: `Some(true)` times each call on its own to its completion (one operation,
    /// then synchronize or wait, per iteration), `Some(false)` launches the calls back to back and
    /// times them between events on the stream; `None` (no `-z`): blocking for sizes up to
    /// [`BLOCKING_AUTO_MAX`], back to back above. Only NCCL differs: host MPI and the device
    /// backends over MPI complete each call before it returns.
    pub blocking: Option<bool>,
    /// nccl-tests' `-a`: the time column is rank 0's (0), the average over ranks (1), the fastest
    /// rank's (2) or the slowest rank's (3).
    pub average: u8,
    /// OSU's method (`--osu`): a barrier after every call, warm-up and timed ones, outside the timed
    /// region, so that each call starts with every rank ready (as OMB's collective loops do) rather
    /// than back to back, where a rooted call's root can run ahead of the others.
    pub barrier_each: bool,
}

/// Without `-z`, sizes up to this many bytes are timed blocking (each call to its completion):
/// there a call's latency is what matters, and back-to-back launches would measure the launch
/// rate instead; above it, back to back (the bandwidth regime, nccl-tests' default).
pub const BLOCKING_AUTO_MAX: usize = 64 << 10;

impl Settings {
    /// Whether a size of `bytes` is timed blocking.
    pub fn blocking_at(&self, bytes: usize) -> bool {
        self.blocking.unwrap_or(bytes <= BLOCKING_AUTO_MAX)
    }
}

/// Run collective `K` with elements `T` (`dtype`) and `op` over `counts` (elements per row, as
/// [`crate::measure::sizes::counts`] gives them) on backend `b`, one row per count.
///
/// Only what touches the buffers is compiled per collective, backend and element type: their
/// set-up, the call and the check. The warm-up and timed loops (`time_calls`, per backend) and the
/// statistics and row (`summarize`, once) are chosen at run time, once per size: the timed call
/// itself stays the collective's own, as before.
///
/// # Errors
/// Library errors (the same on every rank for the same arguments).
pub fn run<K: PersistentForm, B: BenchBackend, T: BenchElement, W: Write>(
    b: &B,
    settings: Settings,
    dtype: DataType,
    op: ReduceOp,
    counts: &[usize],
    reporter: &mut Reporter<W>,
) -> anyhow::Result<()> {
    let ctx = Ctx::of(b.comm(), settings.root, op);
    let counts: &[usize] = if K::SIZED { counts } else { &[0] };
    let rel = tolerance::<T>(b.backend().kind(), op, ctx.nranks);
    let elem = std::mem::size_of::<T>();
    let mut last_count = None;
    for &c in counts {
        let shape = K::shape(c, &ctx);
        // Sizes that round to the same buffers give the same row: run it once; sizes too small for
        // one element per rank give none.
        if last_count == Some(shape.count) || (K::SIZED && shape.count == 0 && c > 0) {
            continue;
        }
        last_count = Some(shape.count);
        let input = fill::<K, T>(&ctx, &shape);
        let mut times = Vec::new(); // this rank's seconds per iteration, per placement
        let mut wrong = Vec::new();
        let placements = if K::IN_PLACE { 2 } else { 1 };
        for placement in 0..placements {
            let in_place = placement == 1;
            let init = K::recv_init(&ctx, &shape, &input);
            let fresh = |poison: T| match (&init, in_place) {
                (_, true) => b.upload(&input),
                (Some(v), false) => b.upload(v),
                (None, false) => b.upload(&vec![poison; shape.recv]),
            };
            // Both are always made, also after a failure: a window is registered by every rank.
            let (send, recv) = (b.upload(&input), fresh(T::zeroed()));
            let buffers = send.and_then(|s| Ok((s, recv?)));
            let all_ok = agree(b.ctl(), buffers.is_ok())?;
            let (send, mut recv) = buffers.with_context(|| {
                format!(
                    "setting up buffers of {} and {} elements on rank {}",
                    shape.send, shape.recv, ctx.rank
                )
            })?;
            if !all_ok {
                anyhow::bail!(
                    "a rank cannot set up buffers of {} bytes",
                    shape.send.max(shape.recv).saturating_mul(elem)
                );
            }
            if b.variant() == Variant::Persistent {
                let count = |got: &[T]| count_wrong::<K, T>(&ctx, &shape, got, rel);
                let check = || -> anyhow::Result<(B::Owned<T>, B::Owned<T>)> {
                    Ok((b.upload(&input)?, fresh(poison_value::<T>())?))
                };
                let m = crate::measure::persistent::measure::<K, B, T>(
                    b,
                    &ctx,
                    &shape,
                    send,
                    recv,
                    in_place,
                    settings.warmup_iters,
                    settings.iters,
                    settings.check.then_some(&check as _),
                    &count,
                )?;
                reporter.environment_once(&format!(
                    "persistent: {} {} on {}: {}",
                    K::NAME,
                    if in_place { "in-place" } else { "out-of-place" },
                    b.backend().name(),
                    m.path
                ));
                times.push(m.times);
                wrong.extend(m.wrong);
                continue;
            }
            let call = |recv: &mut B::Owned<T>| match (b.variant(), in_place) {
                (Variant::Raw, _) => K::run_raw(b, &ctx, (!in_place).then_some(&send), recv),
                (_, true) => K::run_in_place(b, &ctx, &shape, recv),
                (_, false) => K::run(
                    b,
                    Bufs {
                        ctx: &ctx,
                        shape: &shape,
                        send: B::buf(&send),
                        recv: B::buf_mut(recv),
                    },
                ),
            };
            let blocking = settings.blocking_at(shape.count * elem);
            times.push(time_calls(b, &settings, blocking, &mut || call(&mut recv))?);
            if settings.check {
                // Fresh buffers: the timed calls may have reduced in place many times.
                let mut out = fresh(poison_value::<T>())?;
                call(&mut out)?;
                let got = b.download(&out)?;
                wrong.push(count_wrong::<K, T>(&ctx, &shape, &got, rel));
            }
        }
        let row = Row {
            backend: b.backend().name(),
            variant: b.variant().name(),
            size: shape.count * elem,
            count: shape.count,
            dtype: dtype.name(),
            redop: if K::REDUCES { op.name() } else { "none" },
            root: if K::ROOTED { settings.root as i64 } else { -1 },
            oop: Placement::default(),
            ip: Placement::default(),
            in_place: K::IN_PLACE,
        };
        let factor = K::busbw_factor(ctx.nranks);
        reporter.row(summarize(b.ctl(), &settings, &times, wrong, factor, row)?);
    }
    Ok(())
}

/// Whether every rank could do what this rank says it could (`ok`), so that all stop together
/// when one cannot.
///
/// # Errors
/// MPI errors of the reduction.
fn agree(ctl: &MpiComm, ok: bool) -> anyhow::Result<bool> {
    let mut all = [i32::from(ok)];
    ctl.all_reduce_in_place(&mut all[..], ReduceOp::Min)?;
    Ok(all[0] == 1)
}

/// The warm-up calls, a barrier and the timed calls of `call` on backend `b`: this rank's seconds
/// per timed call. Under `--osu` a barrier follows every call, outside the timed region.
///
/// # Errors
/// The first error of `call`; MPI errors of the barriers.
fn time_calls<B: BenchBackend>(
    b: &B,
    settings: &Settings,
    blocking: bool,
    call: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<f64>> {
    for _ in 0..settings.warmup_iters {
        call()?;
        if settings.barrier_each {
            b.ctl().barrier()?;
        }
    }
    b.ctl().barrier()?;
    if !settings.barrier_each {
        return b.time_iters(settings.iters, blocking, call);
    }
    let mut t = Vec::with_capacity(settings.iters);
    for _ in 0..settings.iters.max(1) {
        t.extend(b.time_iters(1, blocking, call)?);
        b.ctl().barrier()?;
    }
    Ok(t)
}

/// `row` with its placements filled in from this rank's `times` (seconds per iteration, per
/// placement) and `wrong` elements: the time over ranks as `-a` picks it, the bandwidths with the
/// collective's bus-bandwidth `factor`, `#wrong` summed over ranks, and per-iteration statistics of
/// the slowest rank's time.
///
/// # Errors
/// MPI errors of the reductions.
fn summarize(
    ctl: &MpiComm,
    settings: &Settings,
    times: &[Vec<f64>],
    mut wrong: Vec<u64>,
    factor: f64,
    mut row: Row,
) -> anyhow::Result<Row> {
    let wrong = if settings.check {
        ctl.all_reduce_in_place(&mut wrong[..], ReduceOp::Sum)?;
        Some(wrong)
    } else {
        None
    };
    let avg: Vec<f64> = times
        .iter()
        .map(|t| t.iter().sum::<f64>() / t.len().max(1) as f64)
        .collect();
    let mut spread = timing::over_ranks(ctl, &avg)?;
    for (s, own) in spread.iter_mut().zip(&avg) {
        s.avg = match settings.average {
            0 => *own, // rank 0 prints: its own time
            2 => s.min,
            3 => s.max,
            _ => s.avg,
        };
    }
    // Each iteration's time is the slowest rank's.
    let mut slowest: Vec<f64> = times.iter().flatten().copied().collect();
    ctl.all_reduce_in_place(&mut slowest[..], ReduceOp::Max)?;
    let per_placement: Vec<&[f64]> = slowest.chunks(settings.iters.max(1)).collect();
    let placement = |p: usize| {
        let time = spread.get(p).copied().unwrap_or(Spread::uniform(0.0));
        let algbw = timing::algbw(row.size, time.avg);
        Placement {
            time,
            algbw,
            busbw: algbw * factor,
            wrong: wrong.as_ref().and_then(|w| w.get(p).copied()),
            iter: per_placement.get(p).map(|t| IterStats::of(t)),
        }
    };
    (row.oop, row.ip) = (placement(0), placement(1));
    Ok(row)
}

/// A value that no check pattern produces (the inputs are small integers): what an untouched output
/// element holds.
fn poison_value<T: BenchElement>() -> T {
    T::from_parts(-77, -77)
}

/// The accessors every backend of the engine shares: the measured communicator, the control
/// communicator, which backend (a field, or a constant) and which variant.
macro_rules! parts {
    ($comm:ty) => {
        fn backend(&self) -> Backend {
            self.backend
        }
        parts!(@shared $comm);
    };
    ($comm:ty, $backend:expr) => {
        fn backend(&self) -> Backend {
            $backend
        }
        parts!(@shared $comm);
    };
    (@shared $comm:ty) => {
        fn comm(&self) -> &$comm {
            self.comm
        }
        fn ctl(&self) -> &MpiComm {
            self.ctl
        }
        fn variant(&self) -> Variant {
            self.variant
        }
    };
}

/// The MPI host backend: `Vec` buffers and the wall clock.
#[derive(Debug)]
pub struct Host<'a> {
    /// The measured communicator.
    pub comm: &'a MpiComm,
    /// The control communicator.
    pub ctl: &'a MpiComm,
    /// Which call it times.
    pub variant: Variant,
}

impl BenchBackend for Host<'_> {
    type Comm = MpiComm;
    type Owned<T: BenchElement> = Vec<T>;
    parts!(MpiComm, Backend::Mpi);
    fn raw_all_reduce<T: BenchElement>(
        &self,
        send: Option<&Vec<T>>,
        buf: &mut Vec<T>,
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        crate::measure::raw::host_all_reduce(self.comm, send.map(|s| &s[..]), buf, op)
    }
    fn upload<T: BenchElement>(&self, host: &[T]) -> anyhow::Result<Vec<T>> {
        let mut v = Vec::new();
        v.try_reserve_exact(host.len())
            .with_context(|| format!("cannot allocate {} elements", host.len()))?;
        v.extend_from_slice(host);
        Ok(v)
    }
    fn download<T: BenchElement>(&self, buf: &Vec<T>) -> anyhow::Result<Vec<T>> {
        Ok(buf.clone())
    }
    fn download_buf<T: BenchElement>(&self, buf: &[T]) -> anyhow::Result<Vec<T>> {
        Ok(buf.to_vec())
    }
    fn buf<T: BenchElement>(buf: &Vec<T>) -> &[T] {
        buf
    }
    fn buf_mut<T: BenchElement>(buf: &mut Vec<T>) -> &mut [T] {
        buf
    }
    fn time_iters(
        &self,
        iters: usize,
        _blocking: bool, // every host call completes before it returns
        f: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<f64>> {
        (0..iters.max(1))
            .map(|_| {
                let start = Instant::now();
                f()?;
                Ok(start.elapsed().as_secs_f64())
            })
            .collect()
    }
}

/// A device backend (`nccl`, `cuda-mpi`, `mpi-staged`): `CudaSlice` buffers; on `nccl` CUDA events
/// recorded on the communicator's stream around each call, on the device backends over MPI (whose
/// calls complete when they return) the wall clock around each call and the drained stream.
#[derive(Debug)]
pub struct Device<'a, C> {
    /// The measured communicator.
    pub comm: &'a C,
    /// The control communicator.
    pub ctl: &'a MpiComm,
    /// Which backend `C` is.
    pub backend: Backend,
    /// Which call it times.
    pub variant: Variant,
}

fn time_on_stream<C: DeviceCommunicator>(
    comm: &C,
    stream: &Arc<CudaStream>,
    iters: usize,
    f: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<f64>> {
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    // The events are made before the loop: making one (`cuEventCreate`) takes microseconds, which
    // between calls launched back to back would be timed as part of each call.
    let events = (0..=iters.max(1))
        .map(|_| stream.context().new_event(flags))
        .collect::<Result<Vec<_>, _>>()?;
    comm.synchronize()?;
    events[0].record(stream)?;
    for e in &events[1..] {
        f()?;
        e.record(stream)?;
    }
    // Wait with the library's deadline first: reading the events would block without one.
    comm.synchronize()?;
    events
        .windows(2)
        .map(|w| Ok(timing::seconds_per_call(w[0].elapsed_ms(&w[1])?, 1)))
        .collect()
}

/// nccl-tests' `-z 1`: each call between two events, then the stream synchronized (with the
/// library's deadline), so every iteration is one operation timed to its completion.
fn time_on_stream_blocking<C: DeviceCommunicator>(
    comm: &C,
    stream: &Arc<CudaStream>,
    iters: usize,
    f: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<f64>> {
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    // Two events made once and recorded again in every iteration (making one takes microseconds).
    let (start, end) = (
        stream.context().new_event(flags)?,
        stream.context().new_event(flags)?,
    );
    comm.synchronize()?;
    (0..iters.max(1))
        .map(|_| {
            start.record(stream)?;
            f()?;
            end.record(stream)?;
            comm.synchronize()?;
            Ok(timing::seconds_per_call(start.elapsed_ms(&end)?, 1))
        })
        .collect()
}

fn time_wall_drained<C: DeviceCommunicator>(
    comm: &C,
    iters: usize,
    f: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<f64>> {
    comm.synchronize()?;
    (0..iters.max(1))
        .map(|_| {
            let start = Instant::now();
            f()?;
            comm.synchronize()?;
            Ok(start.elapsed().as_secs_f64())
        })
        .collect()
}

macro_rules! device_backend {
    ($($comm:ty),*) => {$(
        impl BenchBackend for Device<'_, $comm> {
            type Comm = $comm;
            type Owned<T: BenchElement> = CudaSlice<T>;
            parts!($comm);
            fn raw_all_reduce<T: BenchElement>(
                &self,
                send: Option<&CudaSlice<T>>,
                buf: &mut CudaSlice<T>,
                op: ReduceOp,
            ) -> anyhow::Result<()> {
                crate::measure::raw::RawDevice::raw_all_reduce(self.comm, send, buf, op)
            }
            fn upload<T: BenchElement>(&self, host: &[T]) -> anyhow::Result<CudaSlice<T>> {
                Ok(device::upload(self.comm.stream(), host)?)
            }
            fn download<T: BenchElement>(&self, buf: &CudaSlice<T>) -> anyhow::Result<Vec<T>> {
                self.comm.synchronize()?;
                Ok(device::download(self.comm.stream(), buf)?)
            }
            fn download_buf<T: BenchElement>(
                &self,
                buf: &dyn DeviceBufferMut<T>,
            ) -> anyhow::Result<Vec<T>> {
                self.comm.synchronize()?;
                Ok(device::download(self.comm.stream(), buf)?)
            }
            fn time_plan(
                &self,
                iters: usize,
                run: &mut dyn FnMut(Step) -> anyhow::Result<()>,
            ) -> anyhow::Result<Vec<f64>> {
                match self.backend {
                    // Each graph launch between two events, then the stream synchronized: the
                    // run is complete when the next iteration's wait looks at it, so that wait
                    // returns at once and the events hold the launch and the graph only.
                    Backend::Nccl => time_on_stream_blocking(
                        self.comm,
                        self.comm.stream(),
                        iters,
                        &mut || {
                            run(Step::Wait)?;
                            run(Step::Start)
                        },
                    ),
                    // Replayed non-blocking calls over MPI: start to the end of the wait.
                    _ => time_wall_drained(self.comm, iters, &mut || {
                        run(Step::Start)?;
                        run(Step::Wait)
                    }),
                }
            }
            fn buf<T: BenchElement>(buf: &CudaSlice<T>) -> &dyn DeviceBuffer<T> {
                buf
            }
            fn buf_mut<T: BenchElement>(buf: &mut CudaSlice<T>) -> &mut dyn DeviceBufferMut<T> {
                buf
            }
            fn time_iters(
                &self,
                iters: usize,
                blocking: bool,
                f: &mut dyn FnMut() -> anyhow::Result<()>,
            ) -> anyhow::Result<Vec<f64>> {
                match self.backend {
                    Backend::Nccl if blocking => {
                        time_on_stream_blocking(self.comm, self.comm.stream(), iters, f)
                    }
                    Backend::Nccl => time_on_stream(self.comm, self.comm.stream(), iters, f),
                    // Device memory over MPI: each call completes when it returns (after the
                    // stream work it ordered), so the wall clock with the stream drained.
                    _ => time_wall_drained(self.comm, iters, f),
                }
            }
        }
    )*};
}

device_backend!(MpiCudaComm, MpiStagedComm);

/// A buffer of the NCCL backend: cudarc's memory for the library's and the raw variants, NCCL's
/// (`ncclMemAlloc`, registered as the variant says) for `registered` and `window`.
#[derive(Debug)]
pub enum NcclOwned<'a, T> {
    /// cudarc's allocation.
    Cudarc(CudaSlice<T>),
    /// `ncclMemAlloc`'s, registered or a symmetric window.
    Nccl(NcclBuffer<'a, T>),
}

impl<T> NcclOwned<'_, T> {
    /// The buffer as the collectives take it.
    pub fn slice(&self) -> &CudaSlice<T> {
        match self {
            NcclOwned::Cudarc(s) => s,
            NcclOwned::Nccl(b) => b,
        }
    }
    /// The buffer as the collectives take it, mutably.
    pub fn slice_mut(&mut self) -> &mut CudaSlice<T> {
        match self {
            NcclOwned::Cudarc(s) => s,
            NcclOwned::Nccl(b) => b,
        }
    }
}

impl<'a> BenchBackend for Device<'a, NcclComm> {
    type Comm = NcclComm;
    type Owned<T: BenchElement> = NcclOwned<'a, T>;
    parts!(NcclComm);
    fn raw_all_reduce<T: BenchElement>(
        &self,
        send: Option<&NcclOwned<'a, T>>,
        buf: &mut NcclOwned<'a, T>,
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        crate::measure::raw::RawDevice::raw_all_reduce(
            self.comm,
            send.map(NcclOwned::slice),
            buf.slice_mut(),
            op,
        )
    }
    /// `registered` and `window`: NCCL's memory, registered as the variant says (a window on
    /// every rank together); the others: cudarc's.
    fn upload<T: BenchElement>(&self, host: &[T]) -> anyhow::Result<NcclOwned<'a, T>> {
        let stream = self.comm.stream();
        Ok(match self.variant.register_mode() {
            RegisterMode::None => NcclOwned::Cudarc(device::upload(stream, host)?),
            mode => {
                let mut buf = self.comm.alloc_registered::<T>(host.len(), mode)?;
                device::copy_to_device(stream, host, &mut buf)?;
                NcclOwned::Nccl(buf)
            }
        })
    }
    fn download<T: BenchElement>(&self, buf: &NcclOwned<'a, T>) -> anyhow::Result<Vec<T>> {
        self.download_buf(buf.slice())
    }
    fn download_buf<T: BenchElement>(
        &self,
        buf: &dyn DeviceBufferMut<T>,
    ) -> anyhow::Result<Vec<T>> {
        self.comm.synchronize()?;
        Ok(device::download(self.comm.stream(), buf)?)
    }
    fn time_plan(
        &self,
        iters: usize,
        run: &mut dyn FnMut(Step) -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<f64>> {
        // Each graph launch between two events, then the stream synchronized: the run is complete
        // when the next iteration's wait looks at it, so that wait returns at once and the events
        // hold the launch and the graph only.
        time_on_stream_blocking(self.comm, self.comm.stream(), iters, &mut || {
            run(Step::Wait)?;
            run(Step::Start)
        })
    }
    fn buf<'b, T: BenchElement>(buf: &'b NcclOwned<'a, T>) -> &'b dyn DeviceBuffer<T> {
        buf.slice()
    }
    fn buf_mut<'b, T: BenchElement>(
        buf: &'b mut NcclOwned<'a, T>,
    ) -> &'b mut dyn DeviceBufferMut<T> {
        buf.slice_mut()
    }
    fn time_iters(
        &self,
        iters: usize,
        blocking: bool,
        f: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<f64>> {
        if blocking {
            time_on_stream_blocking(self.comm, self.comm.stream(), iters, f)
        } else {
            time_on_stream(self.comm, self.comm.stream(), iters, f)
        }
    }
}
