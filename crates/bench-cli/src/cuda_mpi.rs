//! `collbench allreduce` on the device backends over MPI: `cuda-mpi` (device pointers handed to a
//! CUDA-aware MPI) and `mpi-staged` (device buffers through pinned host memory and the host MPI), with
//! the raw `MPI_Allreduce` baseline on the same device pointers for `cuda-mpi`.
//!
//! Per size: three device buffers (send, receive, in-place) of exactly that many elements, allocated
//! with `cuMemAlloc` (`IpcBuffer`) so that a CUDA-aware MPI can map them into its peer (CUDA IPC), the
//! inputs uploaded once. Per placement (out-of-place, then in-place): the warm-up calls of each variant (the
//! library, the raw baseline, the library with checked mode on), then for each variant a barrier and
//! `-n` calls timed with the wall clock from before the first call to after the communicator's stream
//! is drained (these backends complete each call before returning, on the host, so the stream is idle
//! at both ends; the drain makes sure). After both placements, one more call per placement with the
//! check inputs, downloaded and compared exactly (MPI reduces these inputs exactly).

use std::ffi::c_void;
use std::io::Write;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use collectives_core::backend::mpi_cuda::IpcBuffer;
use collectives_core::backend::mpi_host;
use collectives_core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use collectives_core::{
    device, Communicator, DeviceCommunicator, MpiComm, MpiCudaComm, MpiStagedComm, ReduceOp,
};
use mpi::datatype::Equivalence;
use mpi::ffi;
use mpi::raw::AsRaw;

use crate::allreduce::{Measured, Settings};
use crate::backend::Backend;
use crate::dtype::{DataType, ElementVisitor};
use crate::expected::{poison, BenchElement, Pattern};
use crate::report::Reporter;
use crate::sizes;
use crate::timing;

/// A communicator of one of the device backends over MPI.
#[derive(Debug)]
pub enum DeviceMpi {
    /// `cuda-mpi`.
    Cuda(MpiCudaComm),
    /// `mpi-staged`.
    Staged(MpiStagedComm),
}

impl DeviceMpi {
    /// Make one over the ranks of `ctl` for `backend` (`cuda-mpi` or `mpi-staged`), on the GPU of the
    /// node-local rank. Collective.
    ///
    /// # Errors
    /// The library's refusal (an MPI that is not CUDA-aware for `cuda-mpi`, no GPU) or its errors;
    /// another backend.
    pub fn new(ctl: &MpiComm, backend: Backend, checked: bool) -> anyhow::Result<Self> {
        Ok(match backend {
            Backend::CudaMpi => {
                DeviceMpi::Cuda(MpiCudaComm::from_mpi(ctl, None)?.with_checked(checked))
            }
            Backend::MpiStaged => {
                DeviceMpi::Staged(MpiStagedComm::from_mpi(ctl, None)?.with_checked(checked))
            }
            other => bail!("{} is not a device backend over MPI", other.name()),
        })
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            DeviceMpi::Cuda(_) => Backend::CudaMpi,
            DeviceMpi::Staged(_) => Backend::MpiStaged,
        }
    }

    /// The communicator's stream.
    pub fn stream(&self) -> &Arc<CudaStream> {
        match self {
            DeviceMpi::Cuda(c) => c.stream(),
            DeviceMpi::Staged(c) => c.stream(),
        }
    }

    /// The MPI communicator underneath.
    pub fn mpi(&self) -> &MpiComm {
        match self {
            DeviceMpi::Cuda(c) => c.mpi(),
            DeviceMpi::Staged(c) => c.mpi(),
        }
    }

    /// Wait for the communicator's stream.
    ///
    /// # Errors
    /// CUDA errors.
    pub fn synchronize(&self) -> anyhow::Result<()> {
        match self {
            DeviceMpi::Cuda(c) => c.synchronize()?,
            DeviceMpi::Staged(c) => c.synchronize()?,
        }
        Ok(())
    }

    /// All-reduce `send` into `buf`, or `buf` in place when `send` is `None`.
    ///
    /// # Errors
    /// The library's errors.
    pub fn all_reduce<T: BenchElement>(
        &self,
        send: Option<&CudaSlice<T>>,
        buf: &mut CudaSlice<T>,
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        match (self, send) {
            (DeviceMpi::Cuda(c), Some(s)) => c.all_reduce(s, buf, op)?,
            (DeviceMpi::Cuda(c), None) => c.all_reduce_in_place(buf, op)?,
            (DeviceMpi::Staged(c), Some(s)) => c.all_reduce(s, buf, op)?,
            (DeviceMpi::Staged(c), None) => c.all_reduce_in_place(buf, op)?,
        }
        Ok(())
    }

    /// The header line: backend, device, and what decides the path.
    pub fn describe(&self) -> String {
        let ctx = self.stream().context();
        let name = ctx.name().unwrap_or_else(|e| format!("name unknown: {e}"));
        let how = match self {
            DeviceMpi::Cuda(c) => {
                let verdict = collectives_core::cuda_aware::detect()
                    .map(|d| d.awareness.to_string())
                    .unwrap_or_else(|e| e.to_string());
                let forced = if c.forced() { " (forced)" } else { "" };
                format!("device pointers to MPI; CUDA-aware: {verdict}{forced}")
            }
            DeviceMpi::Staged(c) => format!(
                "pinned host memory and the host MPI; all-reduce chunks of {} bytes",
                c.chunk_bytes()
            ),
        };
        format!(
            "{}: rank {} on device {} ({name}); {how}; timed with the wall clock, stream drained",
            self.backend().name(),
            self.mpi().rank(),
            ctx.ordinal()
        )
    }

    /// Free the communicator.
    ///
    /// # Errors
    /// CUDA and MPI errors.
    pub fn finalize(self) -> anyhow::Result<()> {
        match self {
            DeviceMpi::Cuda(c) => c.finalize()?,
            DeviceMpi::Staged(c) => c.finalize()?,
        }
        Ok(())
    }
}

/// The communicators of one run on a device backend over MPI.
#[derive(Debug)]
pub struct DeviceMpiComms {
    /// The measured communicator (checked mode as `--checked`).
    pub main: DeviceMpi,
    /// Barriers and the reductions of times and wrong counts: host MPI, never checked.
    pub ctl: MpiComm,
    /// With `--checked-cost`: a second communicator with checked mode on.
    pub checked_on: Option<DeviceMpi>,
}

impl DeviceMpiComms {
    /// Make them over all ranks of `universe`. Collective.
    ///
    /// # Errors
    /// As [`DeviceMpi::new`].
    pub fn new(
        universe: &mpi::environment::Universe,
        backend: Backend,
        checked: bool,
        checked_cost: bool,
    ) -> anyhow::Result<Self> {
        let ctl = MpiComm::world(universe)?.with_checked(false);
        let main = DeviceMpi::new(&ctl, backend, checked)?;
        if std::env::var("COLLBENCH_EVENT_TRACKING").is_ok_and(|v| v.trim() == "0") {
            // SAFETY: every buffer of the run is allocated after this and used on the communicator's
            // stream only (uploads, collectives, downloads), which is what cudarc asks of untracked
            // slices.
            unsafe { main.stream().context().disable_event_tracking() };
        }
        let checked_on = if checked_cost {
            Some(DeviceMpi::new(&ctl, backend, true)?)
        } else {
            None
        };
        Ok(DeviceMpiComms {
            main,
            ctl,
            checked_on,
        })
    }

    /// Free the communicators.
    ///
    /// # Errors
    /// CUDA and MPI errors.
    pub fn finalize(self) -> anyhow::Result<()> {
        self.main.finalize()?;
        if let Some(c) = self.checked_on {
            c.finalize()?;
        }
        Ok(())
    }
}

/// `MPI_Allreduce` called directly on the device pointers of the same buffers, on the handle of the
/// `cuda-mpi` communicator: the baseline of what the library adds per call. The pointers are taken
/// once per loop and the stream drained once before it; an average is MPI's sum followed by the same
/// division through host memory as the library's.
#[derive(Debug)]
pub struct RawDeviceAllReduce<T> {
    comm: ffi::MPI_Comm,
    nranks: usize,
    datatype: ffi::MPI_Datatype,
    op: ffi::MPI_Op,
    avg: bool,
    _element: PhantomData<fn(T)>,
}

impl<T: BenchElement> RawDeviceAllReduce<T> {
    /// The baseline for `T` and `op` on `comm`'s MPI handle (which must outlive every call).
    ///
    /// # Errors
    /// `op` cannot reduce `T` on MPI (the library's own check).
    pub fn new(comm: &MpiCudaComm, op: ReduceOp) -> anyhow::Result<Self> {
        collectives_core::check::check_op::<T>(
            "raw MPI_Allreduce",
            op,
            collectives_core::BackendKind::MpiCuda,
        )?;
        // SAFETY: the RSMPI_* operation handles are constants set up by rsmpi's C shim.
        let mpi_op = unsafe {
            match op {
                ReduceOp::Prod => ffi::RSMPI_PROD,
                ReduceOp::Min => ffi::RSMPI_MIN,
                ReduceOp::Max => ffi::RSMPI_MAX,
                _ => ffi::RSMPI_SUM,
            }
        };
        Ok(RawDeviceAllReduce {
            comm: comm.mpi().as_raw(),
            nranks: comm.size(),
            datatype: <T::Mpi as Equivalence>::equivalent_datatype().as_raw(),
            op: mpi_op,
            avg: op == ReduceOp::Avg,
            _element: PhantomData,
        })
    }

    fn call_once(&self, send: *const c_void, buf: *mut c_void, n: i32) -> anyhow::Result<()> {
        // SAFETY: the caller passes device addresses of live buffers of `n` elements of `T` (or
        // MPI_IN_PLACE as `send`), their producers complete (stream drained), on the handle of a
        // communicator that outlives the call; the MPI is CUDA-aware (the library refused otherwise).
        let rc = unsafe { ffi::MPI_Allreduce(send, buf, n, self.datatype, self.op, self.comm) };
        if rc != 0 {
            bail!("raw MPI_Allreduce on device memory failed with MPI error code {rc}");
        }
        Ok(())
    }

    /// `calls` all-reduces of `send` into `buf` (in place when `send` is `None`) on `stream`'s device.
    ///
    /// # Errors
    /// Lengths differ or exceed an MPI count; MPI and CUDA errors.
    pub fn run(
        &self,
        stream: &Arc<CudaStream>,
        send: Option<&CudaSlice<T>>,
        buf: &mut CudaSlice<T>,
        calls: usize,
    ) -> anyhow::Result<()> {
        if send.is_some_and(|s| s.len() != buf.len()) {
            bail!("raw MPI_Allreduce: send and receive buffers differ in length");
        }
        let n = i32::try_from(buf.len()).context("raw MPI_Allreduce: count exceeds an MPI int")?;
        if n == 0 {
            return Ok(());
        }
        if !self.avg {
            let s = send.map(|s| s.device_ptr(stream));
            let (r, _r) = buf.device_ptr_mut(stream);
            stream.synchronize()?;
            let src = s
                .as_ref()
                .map_or(mpi_host::in_place().cast_const(), |(p, _)| {
                    *p as usize as *const c_void
                });
            for _ in 0..calls {
                self.call_once(src, r as usize as *mut c_void, n)?;
            }
            return Ok(());
        }
        for _ in 0..calls {
            {
                let s = send.map(|s| s.device_ptr(stream));
                let (r, _r) = buf.device_ptr_mut(stream);
                stream.synchronize()?;
                let src = s
                    .as_ref()
                    .map_or(mpi_host::in_place().cast_const(), |(p, _)| {
                        *p as usize as *const c_void
                    });
                self.call_once(src, r as usize as *mut c_void, n)?;
            }
            let mut host = device::download(stream, buf)?;
            host.iter_mut().for_each(|x| *x = x.div_ranks(self.nranks));
            device::copy_to_device(stream, &host, buf)?;
            stream.synchronize()?;
        }
        Ok(())
    }
}

/// Run `dtype` with `op` over `sizes` (bytes) on a device backend over MPI, one row per size.
///
/// # Errors
/// Library, MPI and CUDA errors (the same on every rank where they come from the arguments).
pub fn run_device_mpi<W: Write>(
    comms: &DeviceMpiComms,
    settings: Settings,
    dtype: DataType,
    op: ReduceOp,
    sizes: &[usize],
    reporter: &mut Reporter<W>,
) -> anyhow::Result<()> {
    dtype.visit(Job {
        comms,
        settings,
        op,
        sizes,
        reporter,
    })
}

struct Job<'a, W: Write> {
    comms: &'a DeviceMpiComms,
    settings: Settings,
    op: ReduceOp,
    sizes: &'a [usize],
    reporter: &'a mut Reporter<W>,
}

/// One size's device buffers, from `cuMemAlloc` (see `IpcBuffer`): a CUDA-aware Open MPI maps them
/// into the peer process (CUDA IPC), which it cannot do with cudarc's stream-ordered pool memory.
struct Buffers<T> {
    send: IpcBuffer<T>,
    recv: IpcBuffer<T>,
    inplace: IpcBuffer<T>,
}

impl<W: Write> ElementVisitor for Job<'_, W> {
    type Output = anyhow::Result<()>;

    fn visit<T: BenchElement>(self, dtype: DataType) -> anyhow::Result<()> {
        let Job {
            comms,
            settings,
            op,
            sizes,
            reporter,
        } = self;
        let backend = comms.main.backend();
        let (rank, nranks) = (comms.ctl.rank(), comms.ctl.size());
        let elem = std::mem::size_of::<T>();
        let counts = sizes::counts(sizes, elem);
        let max = counts.iter().copied().max().unwrap_or(0);
        let pattern = Pattern::<T>::new(op, rank, nranks);
        let stream = comms.main.stream().clone();
        let mut host = Vec::new();
        let host_ok = host.try_reserve_exact(max).is_ok();
        let mut ok = [i32::from(host_ok)];
        comms.ctl.all_reduce_in_place(&mut ok[..], ReduceOp::Min)?;
        if !host_ok || ok[0] == 0 {
            bail!(
                "a rank cannot allocate a host buffer of {} bytes",
                max.saturating_mul(elem)
            );
        }
        host.resize(max, T::zeroed());
        let raw = match (&comms.main, settings.baseline) {
            (DeviceMpi::Cuda(c), true) => Some(RawDeviceAllReduce::<T>::new(c, op)?),
            _ => None,
        };
        for count in counts {
            let bytes = count.saturating_mul(elem);
            let bufs = (|| -> collectives_core::Result<Buffers<T>> {
                Ok(Buffers {
                    send: IpcBuffer::zeros(&stream, count)?,
                    recv: IpcBuffer::zeros(&stream, count)?,
                    inplace: IpcBuffer::zeros(&stream, count)?,
                })
            })();
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
            device::copy_to_device(&stream, host, &mut bufs.send)?;
            let m = measure(comms, settings, op, raw.as_ref(), &pattern, host, &mut bufs)?;
            reporter.row(m.row(backend, dtype, op, count, elem, nranks));
        }
        Ok(())
    }
}

enum Variant<'a, T> {
    Ours(&'a DeviceMpi),
    Raw(&'a RawDeviceAllReduce<T>, &'a DeviceMpi),
}

impl<T: BenchElement> Variant<'_, T> {
    fn comm(&self) -> &DeviceMpi {
        match self {
            Variant::Ours(c) | Variant::Raw(_, c) => c,
        }
    }

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
                    c.all_reduce(send, buf, op)?;
                }
                Ok(())
            }
            Variant::Raw(r, c) => r.run(c.stream(), send, buf, calls),
        }
    }

    /// Seconds per call of `iters` calls, wall clock, the stream drained at both ends.
    fn timed(
        &self,
        op: ReduceOp,
        send: Option<&CudaSlice<T>>,
        buf: &mut CudaSlice<T>,
        iters: usize,
    ) -> anyhow::Result<f64> {
        self.comm().synchronize()?;
        let start = Instant::now();
        self.run(op, send, buf, iters)?;
        self.comm().synchronize()?;
        Ok(start.elapsed().as_secs_f64() / iters.max(1) as f64)
    }
}

#[allow(clippy::too_many_arguments)]
fn measure<T: BenchElement>(
    comms: &DeviceMpiComms,
    settings: Settings,
    op: ReduceOp,
    raw: Option<&RawDeviceAllReduce<T>>,
    pattern: &Pattern<T>,
    host: &mut [T],
    bufs: &mut Buffers<T>,
) -> anyhow::Result<Measured> {
    let stream = comms.main.stream().clone();
    let mut variants = vec![Variant::Ours(&comms.main)];
    variants.extend(raw.map(|r| Variant::Raw(r, &comms.main)));
    variants.extend(comms.checked_on.as_ref().map(Variant::Ours));
    let mut times = vec![[0.0f64; 2]; variants.len()];
    pattern.fill(host);
    device::copy_to_device(&stream, host, &mut bufs.inplace)?;
    let Buffers {
        send,
        recv,
        inplace,
    } = &mut *bufs;
    let (send, recv, inplace): (&CudaSlice<T>, &mut CudaSlice<T>, &mut CudaSlice<T>) =
        (send, recv, inplace);
    for placement in 0..2 {
        let (src, buf): (Option<&CudaSlice<T>>, &mut CudaSlice<T>) = if placement == 0 {
            (Some(send), &mut *recv)
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
        let main = &comms.main;
        poison(host);
        device::copy_to_device(&stream, host, recv)?;
        main.all_reduce(Some(send), recv, op)?;
        pattern.fill(host);
        device::copy_to_device(&stream, host, inplace)?;
        main.all_reduce(None, inplace, op)?;
        main.synchronize()?;
        host.copy_from_slice(&device::download(&stream, recv)?);
        let oop = pattern.count_wrong(host);
        host.copy_from_slice(&device::download(&stream, inplace)?);
        let ip = pattern.count_wrong(host);
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
