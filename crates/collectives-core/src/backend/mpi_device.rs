//! What the two MPI backends on device memory, [`MpiCudaComm`] and [`MpiStagedComm`], share:
//!
//! - their argument rules: the one table of [`crate::rules`] with the communicator's device and
//!   MPI's `int` count limit, so both refuse the same input with the same typed error, in the same
//!   order, as every other backend;
//! - their grouped exchange ([`crate::exchange`]): on the device addresses through a CUDA-aware
//!   MPI, or through pinned host copies of the parts; parts a rank sends itself copied on the
//!   device.
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

/// The grouped exchange on device memory over `mpi`: waits for `stream` (MPI knows no streams);
/// copies the parts a rank sends itself straight into the parts it receives from itself (the
/// k-th to itself into the k-th from itself, device to device on `stream`); exchanges the rest on
/// the device addresses themselves where `direct` (a CUDA-aware MPI, no deadline), or else
/// through pinned host memory leased from `pool` (each sent part copied out, each received part
/// copied back), under the deadline, if any. Either way the received bytes are in place when it
/// returns.
///
/// # Errors
/// [`Error::InvalidArgument`] when the parts to this rank and from it differ in number or length
/// (before anything moves); [`Error::Cuda`] from the waits and copies; the errors of
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
    let me = mpi.rank();
    let (to_me, sends): (Vec<ExchangePart>, Vec<ExchangePart>) =
        sends.iter().copied().partition(|p| p.peer == me);
    let (from_me, recvs): (Vec<ExchangePart>, Vec<ExchangePart>) =
        recvs.iter().copied().partition(|p| p.peer == me);
    let lens = |parts: &[ExchangePart]| parts.iter().map(|p| p.len).collect::<Vec<_>>();
    if lens(&to_me) != lens(&from_me) {
        return Err(Error::invalid(
            op,
            format!(
                "the parts this rank sends itself ({:?} bytes) do not match those it receives \
                 from itself ({:?} bytes)",
                lens(&to_me),
                lens(&from_me)
            ),
        ));
    }
    stream.synchronize().map_err(cuda)?;
    for (s, r) in to_me.iter().zip(&from_me) {
        if s.len > 0 {
            // SAFETY: both parts lie inside their device buffers, of the stream's context (the
            // caller's promise), and have the same length (checked); the copy is waited for
            // before this returns.
            unsafe {
                result::memcpy_dtod_async(
                    recv + r.offset as u64,
                    send + s.offset as u64,
                    s.len,
                    stream.cu_stream(),
                )
            }
            .map_err(cuda)?;
        }
    }
    if direct && mpi.timeout().is_none() {
        let (s, r) = (send as usize as *mut c_void, recv as usize as *mut c_void);
        // SAFETY: the parts lie inside the buffers, whose producers are complete (the stream was
        // waited for) and which stay valid until this returns (the caller's promise); a
        // CUDA-aware MPI takes device addresses; no deadline, so nothing copies them.
        unsafe { mpi.exchange_regions(op, Region::Device(s), &sends, Region::Device(r), &recvs) }?;
    } else {
        // SAFETY: as above: the parts lie inside the device buffers, which stay valid.
        unsafe { through_host(mpi, pool, op, stream, (send, &sends), (recv, &recvs)) }?;
    }
    stream.synchronize().map_err(cuda)
}

/// The exchange of `sends` and `recvs` through pinned host memory leased from `pool`: every sent
/// part copied out (then the stream waited for), the host exchange, every received part copied
/// back into its place on `stream` (waited for by the caller). Only the parts' own bytes move,
/// so a receive buffer's bytes outside them (an earlier chunk's, still to be unpacked) are left
/// alone.
///
/// # Safety
/// As [`exchange_bytes`]'s.
unsafe fn through_host(
    mpi: &MpiComm,
    pool: &Pool,
    op: &'static str,
    stream: &CudaStream,
    (send, sends): (u64, &[ExchangePart]),
    (recv, recvs): (u64, &[ExchangePart]),
) -> Result<()> {
    let cuda = |e| Error::cuda(op, e);
    // The parts laid end to end in the host copies: the same peers and lengths.
    let end_to_end =
        |parts: &[ExchangePart]| ExchangePart::end_to_end(parts.iter().map(|p| (p.peer, p.len)));
    let (host_sends, host_recvs) = (end_to_end(sends), end_to_end(recvs));
    let mut out = pool.lease::<u8>(op, extent(&host_sends))?;
    let mut into = pool.lease::<u8>(op, extent(&host_recvs))?;
    for (d, h) in sends.iter().zip(&host_sends).filter(|(d, _)| d.len > 0) {
        let dst = &mut out.host_mut()[h.offset..h.offset + h.len];
        // SAFETY: the part lies inside the device buffer `send` (the caller's promise) and `dst`
        // is its place in the pinned lease, which is ours; the stream is waited for below,
        // before the lease is read.
        unsafe { result::memcpy_dtoh_async(dst, send + d.offset as u64, stream.cu_stream()) }
            .map_err(cuda)?;
    }
    stream.synchronize().map_err(cuda)?;
    // SAFETY: host regions, which MPI (or, under a deadline, its copies) reads and writes; the
    // parts laid end to end lie inside them (their extents); peers as the caller promises.
    unsafe {
        mpi.exchange_regions(
            op,
            Region::In(out.host()),
            &host_sends,
            Region::Out(into.host_mut()),
            &host_recvs,
        )
    }?;
    for (d, h) in recvs.iter().zip(&host_recvs).filter(|(d, _)| d.len > 0) {
        let src = &into.host()[h.offset..h.offset + h.len];
        // SAFETY: the part lies inside the device buffer `recv` (the caller's promise); the copy
        // reads the lease, which stays ours until the stream is waited for below.
        unsafe { result::memcpy_htod_async(recv + d.offset as u64, src, stream.cu_stream()) }
            .map_err(cuda)?;
    }
    // The copies read the lease, which goes back to the pool when this returns.
    stream.synchronize().map_err(cuda)
}
