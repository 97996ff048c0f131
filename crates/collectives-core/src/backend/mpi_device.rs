//! What the two MPI backends on device memory, [`MpiCudaComm`] and [`MpiStagedComm`], share:
//!
//! - their argument rules: the one table of [`crate::rules`] with the communicator's device and
//!   MPI's `int` count limit, so both refuse the same input with the same typed error, in the same
//!   order, as every other backend;
//! - their grouped exchange ([`crate::exchange`]): on the device addresses through a CUDA-aware
//!   MPI, or through pinned host copies of the parts' extent.
//!
//! [`MpiCudaComm`]: super::mpi_cuda::MpiCudaComm
//! [`MpiStagedComm`]: super::mpi_staged::MpiStagedComm

use std::ffi::c_void;

use cudarc::driver::{result, CudaStream};

use crate::backend::cuda_common::Pool;
use crate::backend::mpi_host::raw as host;
use crate::backend::mpi_host::request::Region;
use crate::backend::mpi_host::MpiComm;
use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::exchange::{extent, ExchangePart};
use crate::op::BackendKind;
use crate::rules::{CountLimit, Rules};

/// The rules of `backend` for the ranks of `mpi`, on CUDA device `device`.
pub(crate) fn rules(backend: BackendKind, device: usize, mpi: &MpiComm) -> Rules {
    Rules {
        backend,
        rank: mpi.rank(),
        size: mpi.size(),
        device: Some(device),
        limit: CountLimit::Elements(host::count_limit()),
        tag_ub: mpi.tag_ub(),
    }
}

/// The grouped exchange on device memory over `mpi`: waits for `stream` (MPI knows no streams),
/// then exchanges on the device addresses themselves where `direct` (a CUDA-aware MPI, no
/// deadline), or else copies the sent parts' extent into pinned host memory leased from `pool`,
/// exchanges there (under the deadline, if any) and copies the received extent back, waiting for
/// that copy too. Either way the received bytes are in place when it returns.
///
/// # Errors
/// [`Error::Cuda`] from the waits and copies; the errors of
/// [`MpiComm::exchange_bytes`](crate::MpiComm::exchange_bytes) after its checks.
///
/// # Safety
/// Every part lies inside its buffer (`send` and `recv` are device addresses of the stream's
/// context, or 0 without parts) and names a rank of `mpi`; the buffers stay valid, and nothing
/// else writes them, until this returns; `stream` is ordered after whatever produced the sent
/// bytes.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn exchange_bytes(
    mpi: &MpiComm,
    pool: &Pool,
    op: &'static str,
    stream: &CudaStream,
    direct: bool,
    (send, sends): (u64, &[ExchangePart]),
    (recv, recvs): (u64, &[ExchangePart]),
) -> Result<()> {
    let cuda = |e| Error::cuda(op, e);
    stream.synchronize().map_err(cuda)?;
    if direct && mpi.timeout().is_none() {
        let (s, r) = (send as usize as *mut c_void, recv as usize as *mut c_void);
        // SAFETY: the parts lie inside the buffers, whose producers are complete (the stream was
        // waited for) and which stay valid until this returns (the caller's promise); a
        // CUDA-aware MPI takes device addresses; no deadline, so nothing copies them.
        return unsafe {
            mpi.exchange_regions(op, Region::Device(s), sends, Region::Device(r), recvs)
        };
    }
    let mut out = pool.lease::<u8>(op, extent(sends))?;
    let mut into = pool.lease::<u8>(op, extent(recvs))?;
    if !out.host().is_empty() {
        // SAFETY: `send` holds at least the sent parts' extent, `out.host().len()` bytes (the
        // caller's promise); the pinned lease is ours, and the stream is waited for below,
        // before it is read.
        unsafe { result::memcpy_dtoh_async(out.host_mut(), send, stream.cu_stream()) }
            .map_err(cuda)?;
        stream.synchronize().map_err(cuda)?;
    }
    // SAFETY: host regions, which MPI (or, under a deadline, its copies) reads and writes; the
    // parts lie inside them (extents); peers as the caller promises.
    unsafe {
        mpi.exchange_regions(
            op,
            Region::In(out.host()),
            sends,
            Region::Out(into.host_mut()),
            recvs,
        )
    }?;
    if !into.host().is_empty() {
        // SAFETY: `recv` has room for the received parts' extent (the caller's promise); the
        // lease stays ours until the stream, waited for next, has read it.
        unsafe { result::memcpy_htod_async(recv, into.host(), stream.cu_stream()) }
            .map_err(cuda)?;
        stream.synchronize().map_err(cuda)?;
    }
    Ok(())
}
