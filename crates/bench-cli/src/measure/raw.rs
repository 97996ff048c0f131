//! The raw baselines of `--baseline raw`: the backend's own all-reduce called directly on the
//! measured communicator's handle, stream and buffers, without the library's front end (no argument
//! rules, no tracing span, no checked mode, no error mapping). What the library adds per call is the
//! difference between its row and the raw row of the same size.
//!
//! | backend | raw call |
//! |---|---|
//! | `mpi` | `MPI_Allreduce` through `mpi::ffi` on host memory ([`host_all_reduce`]) |
//! | `nccl` | `ncclAllReduce` through `nccl_sys` on the communicator's stream ([`RawDevice`] for `NcclComm`) |
//! | `cuda-mpi` | `MPI_Allreduce` on the device pointers, the stream drained first ([`RawDevice`] for `MpiCudaComm`) |
//! | `mpi-staged` | none: staging through host memory is what the backend is |
//!
//! Datatype, operation and entry points are looked up at each call (a table look-up, a few
//! nanoseconds); device pointers are taken at each call through cudarc, as any cudarc code takes them.
//! An average is a sum followed by a division by the number of ranks, as the library does it on MPI;
//! NCCL averages itself (`ncclAvg`).

use std::ffi::{c_int, c_void, CStr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use collectives_core::backend::mpi_host;
use collectives_core::cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use collectives_core::nccl_sys as sys;
use collectives_core::{
    device, BackendKind, Communicator, DeviceCommunicator, MpiComm, MpiCudaComm, MpiStagedComm,
    NcclComm, ReduceOp,
};
use mpi::datatype::Equivalence;
use mpi::ffi;
use mpi::raw::AsRaw;

use crate::measure::expected::BenchElement;

/// MPI's handle of `op` (an average is a sum, divided afterwards).
fn mpi_op(op: ReduceOp) -> ffi::MPI_Op {
    // SAFETY: the RSMPI_* operation handles are constants set up by rsmpi's C shim.
    unsafe {
        match op {
            ReduceOp::Prod => ffi::RSMPI_PROD,
            ReduceOp::Min => ffi::RSMPI_MIN,
            ReduceOp::Max => ffi::RSMPI_MAX,
            _ => ffi::RSMPI_SUM,
        }
    }
}

/// `MPI_Allreduce` of `n` elements of `T` between raw pointers (`send` may be `MPI_IN_PLACE`).
///
/// # Safety
/// `send` (unless it is `MPI_IN_PLACE`) and `buf` address `n` elements of `T` each, readable and
/// writable as MPI needs them until the call returns (host memory, or device memory complete on
/// its stream for a CUDA-aware MPI); `comm` is the handle of a live communicator.
unsafe fn mpi_all_reduce_raw<T: BenchElement>(
    comm: ffi::MPI_Comm,
    send: *const c_void,
    buf: *mut c_void,
    n: c_int,
    op: ReduceOp,
) -> anyhow::Result<()> {
    let datatype = <T::Mpi as Equivalence>::equivalent_datatype().as_raw();
    // SAFETY: as this function's contract says.
    let rc = unsafe { ffi::MPI_Allreduce(send, buf, n, datatype, mpi_op(op), comm) };
    if rc != 0 {
        bail!("raw MPI_Allreduce failed with MPI error code {rc}");
    }
    Ok(())
}

/// The `mpi` baseline: `MPI_Allreduce` of `send` into `buf` (of `buf` in place when `send` is
/// `None`) on `comm`'s handle.
///
/// # Errors
/// Buffers of different lengths; a count beyond an MPI `int`; the MPI error code.
pub fn host_all_reduce<T: BenchElement>(
    comm: &MpiComm,
    send: Option<&[T]>,
    buf: &mut [T],
    op: ReduceOp,
) -> anyhow::Result<()> {
    if send.is_some_and(|s| s.len() != buf.len()) {
        bail!("raw MPI_Allreduce: send and receive buffers differ in length");
    }
    let n = c_int::try_from(buf.len()).context("raw MPI_Allreduce: count exceeds an MPI int")?;
    let sendbuf = match send {
        Some(s) => s.as_ptr().cast(),
        None => mpi_host::in_place().cast_const(),
    };
    // SAFETY: `sendbuf` is `send` (n elements of `T`) or MPI_IN_PLACE from the MPI's own header;
    // `buf` holds n elements and is borrowed exclusively for the call; `comm` is alive.
    unsafe { mpi_all_reduce_raw::<T>(comm.as_raw(), sendbuf, buf.as_mut_ptr().cast(), n, op)? };
    if op == ReduceOp::Avg {
        buf.iter_mut().for_each(|x| *x = x.div_ranks(comm.size()));
    }
    Ok(())
}

/// The raw all-reduce of a device communicator, on its device buffers.
pub trait RawDevice {
    /// The backend's own all-reduce of `send` into `buf` (of `buf` in place when `send` is `None`).
    ///
    /// # Errors
    /// No raw baseline on this backend; lengths that differ; the backend's error code.
    fn raw_all_reduce<T: BenchElement>(
        &self,
        send: Option<&CudaSlice<T>>,
        buf: &mut CudaSlice<T>,
        op: ReduceOp,
    ) -> anyhow::Result<()>;
}

impl RawDevice for MpiStagedComm {
    fn raw_all_reduce<T: BenchElement>(
        &self,
        _: Option<&CudaSlice<T>>,
        _: &mut CudaSlice<T>,
        _: ReduceOp,
    ) -> anyhow::Result<()> {
        bail!("mpi-staged has no raw baseline: staging through host memory is the backend")
    }
}

impl RawDevice for MpiCudaComm {
    fn raw_all_reduce<T: BenchElement>(
        &self,
        send: Option<&CudaSlice<T>>,
        buf: &mut CudaSlice<T>,
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        collectives_core::check::check_op::<T>("raw MPI_Allreduce", op, BackendKind::MpiCuda)?;
        if send.is_some_and(|s| s.len() != buf.len()) {
            bail!("raw MPI_Allreduce: send and receive buffers differ in length");
        }
        let n =
            c_int::try_from(buf.len()).context("raw MPI_Allreduce: count exceeds an MPI int")?;
        if n == 0 {
            return Ok(());
        }
        let stream = self.stream();
        {
            let s = send.map(|s| s.device_ptr(stream));
            let (r, _r) = buf.device_ptr_mut(stream);
            // MPI reads device memory outside the stream: the work ordered before must be complete.
            stream.synchronize()?;
            let src = s
                .as_ref()
                .map_or(mpi_host::in_place().cast_const(), |(p, _)| {
                    *p as usize as *const c_void
                });
            // SAFETY: `src` and `r` are device addresses of live buffers of n elements of `T` (or
            // MPI_IN_PLACE), borrowed until the guards drop after the call, their producers complete
            // (stream synchronized above); the MPI is CUDA-aware (the library refused to build this
            // communicator otherwise); the handle belongs to `self`, alive for the call.
            unsafe {
                mpi_all_reduce_raw::<T>(self.mpi().as_raw(), src, r as usize as *mut c_void, n, op)?
            };
        }
        if op == ReduceOp::Avg {
            let mut host = device::download(stream, buf)?;
            host.iter_mut().for_each(|x| *x = x.div_ranks(self.size()));
            device::copy_to_device(stream, &host, buf)?;
            stream.synchronize()?;
        }
        Ok(())
    }
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

fn nccl_error(lib: &sys::Library, code: sys::ncclResult_t) -> String {
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

/// Wait out a call that answered `ncclInProgress` (the library's communicators are non-blocking) by
/// polling `ncclCommGetAsyncError`, as NCCL asks of its callers, with the library's deadline.
fn nccl_settle(comm: &NcclComm, rc: sys::ncclResult_t) -> anyhow::Result<()> {
    let lib = comm.library();
    match rc {
        sys::ncclSuccess => return Ok(()),
        sys::ncclInProgress => {}
        bad => bail!("raw ncclAllReduce failed: {}", nccl_error(lib, bad)),
    }
    let async_error = sys::nccl_fn!(lib, ncclCommGetAsyncError)?;
    let timeout: Duration = comm.timeout();
    let deadline = Instant::now() + timeout;
    loop {
        let mut state: sys::ncclResult_t = sys::ncclInProgress;
        // SAFETY: a live communicator and a valid out-pointer.
        let rc = unsafe { async_error(comm.as_raw(), &mut state) };
        if rc != sys::ncclSuccess {
            bail!(
                "raw ncclAllReduce: ncclCommGetAsyncError failed: {}",
                nccl_error(lib, rc)
            );
        }
        match state {
            sys::ncclSuccess => return Ok(()),
            sys::ncclInProgress => {}
            bad => bail!("raw ncclAllReduce failed: {}", nccl_error(lib, bad)),
        }
        if Instant::now() >= deadline {
            comm.abort();
            bail!("raw ncclAllReduce still in progress after {timeout:?}; the communicator was aborted");
        }
        std::hint::spin_loop();
    }
}

impl RawDevice for NcclComm {
    fn raw_all_reduce<T: BenchElement>(
        &self,
        send: Option<&CudaSlice<T>>,
        buf: &mut CudaSlice<T>,
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        collectives_core::check::check_op::<T>("raw ncclAllReduce", op, BackendKind::Nccl)?;
        let device = self.context().ordinal();
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
        let redop = nccl_redop(op)
            .with_context(|| format!("raw ncclAllReduce: no NCCL reduction for {}", op.name()))?;
        let all_reduce: AllReduceFn = sys::nccl_fn!(self.library(), ncclAllReduce)?;
        let stream = self.stream();
        let raw_stream = stream.cu_stream() as sys::cudaStream_t;
        // The guards order these pointers after the buffers' earlier uses on other streams, and
        // record this call's reads and writes when they drop.
        let s = send.map(|s| s.device_ptr(stream));
        let (r, _r) = buf.device_ptr_mut(stream);
        let src = s.as_ref().map_or(r, |(p, _)| *p);
        // SAFETY: `src` and `r` are device addresses of live buffers of `buf.len()` elements, i.e.
        // `count` wire values of the datatype, on this communicator's device (checked above),
        // borrowed until the guards drop; `src == r` is NCCL's in-place form; the communicator is
        // alive and owns `raw_stream`.
        let rc = unsafe {
            all_reduce(
                src as usize as *const c_void,
                r as usize as *mut c_void,
                count,
                nccl_datatype::<T>(),
                redop,
                self.as_raw(),
                raw_stream,
            )
        };
        nccl_settle(self, rc)
    }
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
}
