//! `collbench allreduce` on the NCCL backend: device buffers, CUDA-event timing on the communicator's
//! stream, the raw `ncclAllReduce` baseline and the cost of checked mode.
//!
//! Per size: three device buffers (send, receive, in-place) of exactly that many elements, the inputs
//! uploaded once. Per placement (out-of-place, then in-place): the warm-up calls of each measured variant
//! (the library, then the raw baseline, then the library with checked mode on), each variant's calls
//! followed by a wait for its stream; then for each variant a host barrier, an event recorded on its
//! stream, the `-n` calls, a second event, a wait, and the time between the two events divided by `-n`.
//! The stream is idle when the first event is recorded, so the time includes whatever the host spends
//! per call when that is longer than the GPU's part (small sizes), and the GPU's time otherwise.
//! Variants run one after the other, never interleaved call by call as on MPI: the checked-mode
//! communicator has a stream of its own, and waiting after each variant's calls keeps two streams from
//! touching the buffers at once. After both placements, one more call per placement with the check
//! inputs, downloaded and compared ([`crate::expected`]). Every wait has the library's deadline
//! (`COLLECTIVES_TIMEOUT`), so a dead peer ends in an error instead of a hang.
//!
//! Buffers exist for every element type, including those cudarc cannot copy itself (`f16`/`bf16`
//! without its `f16` feature, complex numbers): memory is allocated and copied as bytes and typed as
//! `CudaSlice<T>` for the library (`alloc_zeroed`, `upload`, `download`).

use std::ffi::{c_void, CStr};
use std::io::Write;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use collectives_core::cudarc::driver::sys::CUevent_flags;
use collectives_core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use collectives_core::nccl_sys as sys;
use collectives_core::{
    device, BackendKind, Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp,
};

use crate::allreduce::{Measured, Settings};
use crate::backend::Backend;
use crate::dtype::{DataType, ElementVisitor};
use crate::expected::{poison, tolerance, BenchElement, Pattern};
use crate::report::Reporter;
use crate::sizes;
use crate::timing;

/// Whether cudarc tracks buffer uses with events (its default). `COLLBENCH_EVENT_TRACKING=0` turns
/// it off for the run's buffers, to measure what the tracking costs per call.
fn event_tracking() -> bool {
    std::env::var("COLLBENCH_EVENT_TRACKING").map_or(true, |v| v.trim() != "0")
}

/// The communicators of one NCCL-backend run.
#[derive(Debug)]
pub struct NcclComms {
    /// The measured communicator (checked mode as `--checked`).
    pub main: NcclComm,
    /// Barriers, the reductions of times and wrong counts: MPI, never checked, never measured.
    pub ctl: MpiComm,
    /// With `--checked-cost`: a second NCCL communicator over the same ranks with checked mode on.
    pub checked_on: Option<NcclComm>,
}

impl NcclComms {
    /// Make the communicators over all ranks of `universe` (collective; one GPU per rank, chosen by
    /// node-local rank).
    ///
    /// # Errors
    /// The library's errors: no CUDA driver or libnccl, more ranks on a node than GPUs, NCCL
    /// initialization failing or timing out (the same verdict on every rank where the library can
    /// agree on it).
    pub fn new(
        universe: &mpi::environment::Universe,
        checked: bool,
        checked_cost: bool,
    ) -> anyhow::Result<Self> {
        let ctl = MpiComm::world(universe)?.with_checked(false);
        let main = NcclComm::from_mpi(&ctl, None)?.with_checked(checked);
        if !event_tracking() {
            // SAFETY: every buffer of the run is allocated after this and used on the communicator's
            // stream only (uploads, collectives and downloads are all ordered on it), which is what
            // cudarc asks of untracked slices.
            unsafe { main.context().disable_event_tracking() };
        }
        let checked_on = if checked_cost {
            Some(NcclComm::from_mpi(&ctl, None)?.with_checked(true))
        } else {
            None
        };
        Ok(NcclComms {
            main,
            ctl,
            checked_on,
        })
    }

    /// The header line naming the NCCL release and this rank's device.
    pub fn describe(&self) -> String {
        let tracking = if event_tracking() {
            "on"
        } else {
            "off (COLLBENCH_EVENT_TRACKING=0)"
        };
        let lib = self.main.library();
        let ctx = self.main.context();
        let name = ctx.name().unwrap_or_else(|e| format!("name unknown: {e}"));
        format!(
            "nccl: NCCL {} ({}); rank {} on device {} ({name}); one GPU per rank, by node-local rank; cudarc event tracking {tracking}",
            lib.version(),
            lib.path().display(),
            self.main.rank(),
            ctx.ordinal(),
        )
    }

    /// Free the NCCL communicators after their work completes, reporting errors.
    ///
    /// # Errors
    /// The library's errors from waiting and from `ncclCommDestroy`.
    pub fn finalize(self) -> anyhow::Result<()> {
        self.main.finalize()?;
        if let Some(c) = self.checked_on {
            c.finalize()?;
        }
        Ok(())
    }
}

/// Zeroed device memory for `len` elements of `T` (any element type) on `stream`.
fn alloc_zeroed<T: BenchElement>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> anyhow::Result<CudaSlice<T>> {
    Ok(device::alloc_zeros(stream, len)?)
}

/// Copy `host` into `dst` (of the same length) on `stream`.
fn upload<T: BenchElement>(
    stream: &Arc<CudaStream>,
    host: &[T],
    dst: &mut CudaSlice<T>,
) -> anyhow::Result<()> {
    Ok(device::copy_to_device(stream, host, dst)?)
}

/// Copy `src` into `host` (of the same length) on `stream`, and wait for the copy.
fn download<T: BenchElement>(
    stream: &Arc<CudaStream>,
    src: &CudaSlice<T>,
    host: &mut [T],
) -> anyhow::Result<()> {
    if host.len() != src.len() {
        bail!(
            "download: a device buffer of {} elements into {} host elements",
            src.len(),
            host.len()
        );
    }
    host.copy_from_slice(&device::download(stream, src)?);
    Ok(())
}

/// `ncclAllReduce`'s prototype in the pinned header.
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    sys::ncclRedOp_t,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;

/// `ncclCommGetAsyncError`'s prototype.
type AsyncErrorFn =
    unsafe extern "C" fn(sys::ncclComm_t, *mut sys::ncclResult_t) -> sys::ncclResult_t;

/// `ncclAllReduce` called directly through `nccl_sys` on a communicator's `ncclComm_t` and stream: the
/// baseline that shows what the library adds per call. The function, datatype and operation are looked
/// up once, as a hand-written NCCL code would have them; the device pointers are taken once per loop.
/// The communicator is non-blocking (as the library makes it), so a call that answers `ncclInProgress`
/// is waited out by polling `ncclCommGetAsyncError`, as NCCL asks of its callers, with the library's
/// deadline.
pub struct RawNcclAllReduce<'c, T> {
    comm: &'c NcclComm,
    all_reduce: AllReduceFn,
    async_error: AsyncErrorFn,
    datatype: sys::ncclDataType_t,
    redop: sys::ncclRedOp_t,
    _element: PhantomData<fn(T)>,
}

impl<T> std::fmt::Debug for RawNcclAllReduce<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawNcclAllReduce")
            .field("datatype", &self.datatype)
            .field("redop", &self.redop)
            .finish_non_exhaustive()
    }
}

/// NCCL's reduction for `op` (`ncclAvg` is NCCL's own average, as the library uses it); `None` for an
/// operation this list does not know.
pub fn nccl_redop(op: ReduceOp) -> Option<sys::ncclRedOp_t> {
    Some(match op {
        ReduceOp::Sum => sys::ncclSum,
        ReduceOp::Prod => sys::ncclProd,
        ReduceOp::Max => sys::ncclMax,
        ReduceOp::Min => sys::ncclMin,
        ReduceOp::Avg => sys::ncclAvg,
        _ => return None,
    })
}

/// NCCL's wire datatype of `T` (complex numbers: their real type, two per element).
pub fn nccl_datatype<T: BenchElement>() -> sys::ncclDataType_t {
    T::WIRE.dtype.nccl_code() as sys::ncclDataType_t
}

fn error_name(lib: &sys::Library, code: sys::ncclResult_t) -> String {
    let Ok(f) = sys::nccl_fn!(lib, ncclGetErrorString) else {
        return format!("ncclResult {code}");
    };
    // SAFETY: ncclGetErrorString returns a pointer to a static NUL-terminated string for any code.
    let p = unsafe { f(code) };
    if p.is_null() {
        return format!("ncclResult {code}");
    }
    // SAFETY: non-null, NUL-terminated and static (see above).
    let name = unsafe { CStr::from_ptr(p) };
    format!("{} ({code})", name.to_string_lossy())
}

impl<'c, T: BenchElement> RawNcclAllReduce<'c, T> {
    /// The baseline for elements `T` reduced with `op` on `comm`.
    ///
    /// # Errors
    /// `op` cannot reduce `T` on NCCL (the library's own check); an entry point is missing.
    pub fn new(comm: &'c NcclComm, op: ReduceOp) -> anyhow::Result<Self> {
        collectives_core::check::check_op::<T>("raw ncclAllReduce", op, BackendKind::Nccl)?;
        let lib = comm.library();
        Ok(RawNcclAllReduce {
            comm,
            all_reduce: sys::nccl_fn!(lib, ncclAllReduce)?,
            async_error: sys::nccl_fn!(lib, ncclCommGetAsyncError)?,
            datatype: nccl_datatype::<T>(),
            redop: nccl_redop(op).with_context(|| {
                format!("raw ncclAllReduce: no NCCL reduction for {}", op.name())
            })?,
            _element: PhantomData,
        })
    }

    /// Enqueue `calls` all-reduces of `send` into `buf` (or of `buf` in place when `send` is `None`) on
    /// the communicator's stream, one `ncclAllReduce` each, on device pointers taken once.
    ///
    /// # Errors
    /// Buffers of different lengths or on another device; an NCCL error code; a call still in
    /// progress at the deadline (the communicator is aborted then).
    pub fn run(
        &self,
        send: Option<&CudaSlice<T>>,
        buf: &mut CudaSlice<T>,
        calls: usize,
    ) -> anyhow::Result<()> {
        let device = self.comm.context().ordinal();
        if send.is_some_and(|s| s.len() != buf.len()) {
            bail!("raw ncclAllReduce: send and receive buffers differ in length");
        }
        if send.is_some_and(|s| s.ordinal() != device) || buf.ordinal() != device {
            bail!("raw ncclAllReduce: a buffer is not on the communicator's device {device}");
        }
        let count = T::WIRE
            .wire_count(buf.len())
            .context("raw ncclAllReduce: count overflows")?;
        if count == 0 {
            return Ok(());
        }
        let stream = self.comm.stream();
        let raw_stream = stream.cu_stream() as sys::cudaStream_t;
        let comm = self.comm.as_raw();
        // The guards order these pointers after the buffers' earlier uses on other streams, and record
        // the loop's reads and writes when they drop after it.
        let s = send.map(|s| s.device_ptr(stream));
        let (r, _r) = buf.device_ptr_mut(stream);
        let src = s.as_ref().map_or(r, |(p, _)| *p);
        for _ in 0..calls {
            // SAFETY: `src` and `r` are device addresses of live buffers of `buf.len()` elements, i.e.
            // `count` wire values of `datatype`, on this communicator's device (checked above), borrowed
            // until the loop ends; `src == r` is NCCL's in-place form; `comm` is the live communicator
            // that owns `raw_stream`.
            let rc = unsafe {
                (self.all_reduce)(
                    src as usize as *const c_void,
                    r as usize as *mut c_void,
                    count,
                    self.datatype,
                    self.redop,
                    comm,
                    raw_stream,
                )
            };
            self.settle(rc)?;
        }
        Ok(())
    }

    fn settle(&self, rc: sys::ncclResult_t) -> anyhow::Result<()> {
        let lib = self.comm.library();
        match rc {
            sys::ncclSuccess => return Ok(()),
            sys::ncclInProgress => {}
            bad => bail!("raw ncclAllReduce failed: {}", error_name(lib, bad)),
        }
        let timeout: Duration = self.comm.timeout();
        let deadline = Instant::now() + timeout;
        loop {
            let mut state: sys::ncclResult_t = sys::ncclInProgress;
            // SAFETY: a live communicator and a valid out-pointer.
            let rc = unsafe { (self.async_error)(self.comm.as_raw(), &mut state) };
            if rc != sys::ncclSuccess {
                bail!(
                    "raw ncclAllReduce: ncclCommGetAsyncError failed: {}",
                    error_name(lib, rc)
                );
            }
            match state {
                sys::ncclSuccess => return Ok(()),
                sys::ncclInProgress => {}
                bad => bail!("raw ncclAllReduce failed: {}", error_name(lib, bad)),
            }
            if Instant::now() >= deadline {
                self.comm.abort();
                bail!("raw ncclAllReduce still in progress after {timeout:?}; the communicator was aborted");
            }
            std::hint::spin_loop();
        }
    }
}

/// Run `dtype` with `op` over `sizes` (bytes) on the NCCL backend, one row per size.
///
/// # Errors
/// Library, CUDA and NCCL errors (the same on every rank for the same arguments, where they come from
/// the arguments).
pub fn run_nccl<W: Write>(
    comms: &NcclComms,
    settings: Settings,
    dtype: DataType,
    op: ReduceOp,
    sizes: &[usize],
    reporter: &mut Reporter<W>,
) -> anyhow::Result<()> {
    dtype.visit(NcclJob {
        comms,
        settings,
        op,
        sizes,
        reporter,
    })
}

struct NcclJob<'a, W: Write> {
    comms: &'a NcclComms,
    settings: Settings,
    op: ReduceOp,
    sizes: &'a [usize],
    reporter: &'a mut Reporter<W>,
}

/// One size's device buffers.
struct Buffers<T> {
    send: CudaSlice<T>,
    recv: CudaSlice<T>,
    inplace: CudaSlice<T>,
}

impl<T: BenchElement> Buffers<T> {
    fn new(stream: &Arc<CudaStream>, len: usize) -> anyhow::Result<Self> {
        Ok(Buffers {
            send: alloc_zeroed(stream, len)?,
            recv: alloc_zeroed(stream, len)?,
            inplace: alloc_zeroed(stream, len)?,
        })
    }
}

impl<W: Write> ElementVisitor for NcclJob<'_, W> {
    type Output = anyhow::Result<()>;

    fn visit<T: BenchElement>(self, dtype: DataType) -> anyhow::Result<()> {
        let NcclJob {
            comms,
            settings,
            op,
            sizes,
            reporter,
        } = self;
        let (rank, nranks) = (comms.main.rank(), comms.main.size());
        let elem = std::mem::size_of::<T>();
        let counts = sizes::counts(sizes, elem);
        let max = counts.iter().copied().max().unwrap_or(0);
        let pattern = Pattern::<T>::new(op, rank, nranks);
        let stream = comms.main.stream().clone();
        // One host buffer: the inputs to upload, and the results downloaded for the check.
        let mut host = Vec::new();
        let host_ok = host.try_reserve_exact(max).is_ok();
        let mut ok = [i32::from(host_ok)];
        comms.ctl.all_reduce_in_place(&mut ok[..], ReduceOp::Min)?;
        if !host_ok {
            bail!(
                "cannot allocate a host buffer of {} bytes on rank {rank}",
                max.saturating_mul(elem)
            );
        }
        if ok[0] == 0 {
            bail!(
                "a rank cannot allocate a host buffer of {} bytes",
                max.saturating_mul(elem)
            );
        }
        host.resize(max, T::zeroed());
        let raw = if settings.baseline {
            Some(RawNcclAllReduce::<T>::new(&comms.main, op)?)
        } else {
            None
        };
        let tol = tolerance::<T>(BackendKind::Nccl, op, nranks);
        for count in counts {
            let bytes = count.saturating_mul(elem);
            let bufs = Buffers::<T>::new(&stream, count);
            // Every rank learns whether all could allocate, so that all stop together if one cannot.
            let mut ok = [i32::from(bufs.is_ok())];
            comms.ctl.all_reduce_in_place(&mut ok[..], ReduceOp::Min)?;
            let mut bufs = bufs.with_context(|| {
                format!("cannot allocate 3 device buffers of {bytes} bytes on rank {rank}")
            })?;
            if ok[0] == 0 {
                bail!("a rank cannot allocate 3 device buffers of {bytes} bytes");
            }
            let host = &mut host[..count];
            pattern.fill(host);
            upload(&stream, host, &mut bufs.send)?;
            let m = measure(
                comms,
                settings,
                op,
                raw.as_ref(),
                &pattern,
                tol,
                host,
                &mut bufs,
            )?;
            reporter.row(m.row(Backend::Nccl, dtype, op, count, elem, nranks));
        }
        Ok(())
    }
}

/// A variant timed at one size.
enum Variant<'a, T> {
    Ours(&'a NcclComm),
    Raw(&'a RawNcclAllReduce<'a, T>),
}

impl<T: BenchElement> Variant<'_, T> {
    /// The communicator whose stream runs this variant.
    fn comm(&self) -> &NcclComm {
        match self {
            Variant::Ours(c) => c,
            Variant::Raw(r) => r.comm,
        }
    }

    /// Enqueue `calls` all-reduces.
    fn run(
        &self,
        op: ReduceOp,
        send: Option<&CudaSlice<T>>,
        buf: &mut CudaSlice<T>,
        calls: usize,
    ) -> anyhow::Result<()> {
        match self {
            Variant::Ours(c) => {
                for _ in 0..calls {
                    match send {
                        Some(s) => c.all_reduce(s, buf, op)?,
                        None => c.all_reduce_in_place(buf, op)?,
                    }
                }
            }
            Variant::Raw(r) => r.run(send, buf, calls)?,
        }
        Ok(())
    }

    /// Seconds per call of `iters` calls, between two CUDA events on the variant's stream.
    fn timed(
        &self,
        op: ReduceOp,
        send: Option<&CudaSlice<T>>,
        buf: &mut CudaSlice<T>,
        iters: usize,
    ) -> anyhow::Result<f64> {
        let comm = self.comm();
        let stream = comm.stream();
        let timing_event = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = stream.record_event(timing_event)?;
        self.run(op, send, buf, iters)?;
        let end = stream.record_event(timing_event)?;
        // Wait with the library's deadline first: reading the events would block without one.
        comm.synchronize()?;
        Ok(timing::seconds_per_call(start.elapsed_ms(&end)?, iters))
    }
}

#[allow(clippy::too_many_arguments)]
fn measure<T: BenchElement>(
    comms: &NcclComms,
    settings: Settings,
    op: ReduceOp,
    raw: Option<&RawNcclAllReduce<'_, T>>,
    pattern: &Pattern<T>,
    tol: f64,
    host: &mut [T],
    bufs: &mut Buffers<T>,
) -> anyhow::Result<Measured> {
    let stream = comms.main.stream();
    let mut variants = vec![Variant::Ours(&comms.main)];
    variants.extend(raw.map(Variant::Raw));
    variants.extend(comms.checked_on.as_ref().map(Variant::Ours));
    // times[v][placement], this rank's seconds per call.
    let mut times = vec![[0.0f64; 2]; variants.len()];
    pattern.fill(host);
    upload(stream, host, &mut bufs.inplace)?;
    let Buffers {
        send,
        recv,
        inplace,
    } = &mut *bufs;
    for placement in 0..2 {
        let (src, buf): (Option<&CudaSlice<T>>, &mut CudaSlice<T>) = if placement == 0 {
            (Some(&*send), &mut *recv)
        } else {
            (None, &mut *inplace)
        };
        for v in &variants {
            v.run(op, src, buf, settings.warmup_iters)?;
            v.comm().synchronize()?;
        }
        for (v, t) in variants.iter().zip(&mut times) {
            comms.ctl.barrier()?;
            t[placement] = v.timed(op, src, buf, settings.iters)?;
        }
    }
    let wrong = if settings.check {
        poison(host);
        upload(stream, host, recv)?;
        comms.main.all_reduce(send, recv, op)?;
        pattern.fill(host);
        upload(stream, host, inplace)?;
        comms.main.all_reduce_in_place(inplace, op)?;
        comms.main.synchronize()?;
        download(stream, recv, host)?;
        let oop = pattern.count_wrong_within(host, tol);
        download(stream, inplace, host)?;
        let ip = pattern.count_wrong_within(host, tol);
        let mut w = [oop, ip];
        comms.ctl.all_reduce_in_place(&mut w[..], ReduceOp::Sum)?;
        Some(w)
    } else {
        None
    };
    let local: Vec<f64> = times.iter().flatten().copied().collect();
    let spread = timing::over_ranks(&comms.ctl, &local)?;
    Ok(Measured::from_variants(
        &spread,
        raw.is_some(),
        comms.checked_on.is_some(),
        wrong,
    ))
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};
    use num_complex::Complex;

    use super::*;

    #[test]
    fn wire_types_and_operations_match_nccl_h() {
        assert_eq!(nccl_datatype::<i8>(), sys::ncclInt8);
        assert_eq!(nccl_datatype::<u64>(), sys::ncclUint64);
        assert_eq!(nccl_datatype::<f16>(), sys::ncclFloat16);
        assert_eq!(nccl_datatype::<bf16>(), sys::ncclBfloat16);
        assert_eq!(nccl_datatype::<f32>(), sys::ncclFloat32);
        assert_eq!(nccl_datatype::<Complex<f64>>(), sys::ncclFloat64);
        assert_eq!(nccl_redop(ReduceOp::Sum), Some(sys::ncclSum));
        assert_eq!(nccl_redop(ReduceOp::Prod), Some(sys::ncclProd));
        assert_eq!(nccl_redop(ReduceOp::Min), Some(sys::ncclMin));
        assert_eq!(nccl_redop(ReduceOp::Max), Some(sys::ncclMax));
        assert_eq!(nccl_redop(ReduceOp::Avg), Some(sys::ncclAvg));
    }

    /// GPU only: device buffers of every element type go up and come back unchanged.
    #[test]
    #[ignore = "needs a CUDA device"]
    fn buffers_round_trip_every_element_type() {
        use collectives_core::cudarc::driver::CudaContext;

        struct RoundTrip(Arc<CudaStream>);
        impl ElementVisitor for RoundTrip {
            type Output = ();
            fn visit<T: BenchElement>(self, dtype: DataType) {
                let p = Pattern::<T>::new(ReduceOp::Sum, 1, 3);
                let mut host = vec![T::zeroed(); 1000];
                p.fill(&mut host);
                let mut dev = alloc_zeroed::<T>(&self.0, host.len()).unwrap();
                let mut back = vec![T::zeroed(); host.len()];
                download(&self.0, &dev, &mut back).unwrap();
                assert!(back.iter().all(|x| *x == T::zeroed()), "{}", dtype.name());
                upload(&self.0, &host, &mut dev).unwrap();
                download(&self.0, &dev, &mut back).unwrap();
                assert!(back == host, "{}", dtype.name());
                assert!(upload(&self.0, &host[1..], &mut dev).is_err());
                let empty = alloc_zeroed::<T>(&self.0, 0).unwrap();
                download(&self.0, &empty, &mut []).unwrap();
            }
        }
        let ctx = CudaContext::new(0).unwrap();
        let stream = ctx.new_stream().unwrap();
        for d in DataType::ALL {
            d.visit(RoundTrip(stream.clone()));
        }
    }
}
