//! CUDA plumbing shared by the device backends on MPI ([`MpiCudaComm`](super::mpi_cuda::MpiCudaComm),
//! [`MpiStagedComm`](super::mpi_staged::MpiStagedComm)) and the NCCL one, kept in one place so that
//! no backend reaches into another:
//!
//! - whether a GPU can be used ([`cuda_driver_present`], [`cuda_unavailable`]), the node-local
//!   rank ([`node_local`]), a stream on this rank's GPU (`local_stream`), and agreement on setup
//!   across ranks (`agree_setup`);
//! - staging through pinned host memory: the pool of pinned buffers and its leases (`Pool`,
//!   `Lease`, [`POOL_ENV`], [`DEFAULT_POOL_BYTES`]), copies of element ranges between device and
//!   pinned memory on a stream, and `StagedPending`, a non-blocking MPI operation on pinned
//!   buffers whose result is copied back when it completes.
//!
//! CUDA driver errors become [`Error::Cuda`] through [`Error::cuda`].

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{
    result, CudaContext, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, PinnedHostSlice,
};

use crate::backend::mpi_host::collectives::{Blocking, Started};
use crate::backend::mpi_host::request::{MpiPending, Region};
use crate::backend::mpi_host::MpiComm;
use crate::comm::Communicator;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::memory::{Dev, DevMut};
use crate::op::ReduceOp;
use crate::operation::Op;
use crate::request::Pending;

/// Whether the CUDA driver library can be opened (cudarc would panic on first use otherwise).
pub fn cuda_driver_present() -> bool {
    // SAFETY: the probe only tries to open libcuda with the dynamic loader and closes it again.
    std::panic::catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false)
}

/// This rank's index among the ranks of its node (`MPI_Comm_split_type` shared memory), and their
/// number. Collective over `mpi`.
///
/// # Errors
/// [`Error::Mpi`] from the split.
pub fn node_local(mpi: &MpiComm) -> Result<(usize, usize)> {
    let local = mpi.split_shared()?;
    Ok((local.rank(), local.size()))
}

/// Why this process cannot use a GPU: no CUDA driver, or no device; `None` when it can. Never panics.
pub fn cuda_unavailable() -> Option<String> {
    if !cuda_driver_present() {
        return Some("no CUDA driver (libcuda could not be opened)".to_string());
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => None,
        Ok(_) => Some("the CUDA driver sees no device".to_string()),
        Err(e) => Some(format!("the CUDA driver cannot list devices: {e}")),
    }
}

/// A new stream on `device`, or on the GPU of this rank's node-local index (round robin when a node
/// has more ranks than GPUs: MPI, unlike NCCL, lets ranks share a GPU). Collective over `mpi` (the
/// node-local split).
pub(crate) fn local_stream(
    op: &'static str,
    mpi: &MpiComm,
    device: Option<usize>,
) -> Result<Arc<CudaStream>> {
    let (local_rank, _) = node_local(mpi)?;
    if let Some(why) = cuda_unavailable() {
        return Err(Error::Unavailable {
            what: "a GPU",
            message: why,
        });
    }
    let count = CudaContext::device_count()
        .map_err(|e| Error::cuda(op, e))?
        .max(0) as usize;
    let device = device.unwrap_or(local_rank % count.max(1));
    if device >= count {
        return Err(Error::invalid(
            op,
            format!("device {device} does not exist ({count} GPU(s) visible)"),
        ));
    }
    let ctx = CudaContext::new(device).map_err(|e| Error::cuda(op, e))?;
    ctx.bind_to_thread().map_err(|e| Error::cuda(op, e))?;
    ctx.new_stream().map_err(|e| Error::cuda(op, e))
}

/// Agree over `mpi` whether every rank's `local` is `Ok`: a rank's own error comes back as it is, and
/// ranks whose part went well learn that another rank's did not.
pub(crate) fn agree_setup<R>(op: &'static str, mpi: &MpiComm, local: Result<R>) -> Result<R> {
    let ok = [u8::from(local.is_ok())];
    let mut all = [0u8];
    mpi.all_reduce(&ok[..], &mut all[..], ReduceOp::Min)?;
    let value = local?;
    if all[0] == 0 {
        return Err(Error::invalid(
            op,
            "another rank could not set up its side (see its error)",
        ));
    }
    Ok(value)
}

/// Environment variable: the most pinned host memory the pool keeps between operations, in bytes.
pub const POOL_ENV: &str = "COLLECTIVES_STAGED_POOL";

/// The pool's limit when [`POOL_ENV`] is not set.
pub const DEFAULT_POOL_BYTES: usize = 1 << 30;

/// `4096`, `512K`, `4M`, `1G` (powers of 1024) as bytes; `None` for anything else or zero.
pub fn parse_bytes(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 10),
        (i, 'm' | 'M') => (&t[..i], 20),
        (i, 'g' | 'G') => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: usize = digits.trim().parse().ok()?;
    n.checked_mul(1usize << shift).filter(|&b| b > 0)
}

/// The value of a byte-count variable, else `default`.
pub(crate) fn env_bytes(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| parse_bytes(&v))
        .unwrap_or(default)
}

/// One pinned (page-locked, cacheable) host allocation.
pub(crate) struct Pinned {
    buf: PinnedHostSlice<u8>,
    /// `buf`'s address, taken once: the memory never moves.
    ptr: *mut u8,
}

impl Pinned {
    fn alloc(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Pinned> {
        const OP: &str = "pinned";
        // Cacheable pinned memory (flags 0): cudarc's default, write-combined memory, is slow for the
        // CPU to read, and MPI reads these buffers on the CPU.
        // SAFETY: the memory is zeroed below before any slice of it is made.
        let mut buf = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }
            .map_err(|e| Error::cuda(OP, e))?;
        let ptr = buf.as_mut_ptr().map_err(|e| Error::cuda(OP, e))?;
        // SAFETY: `ptr` addresses `bytes` bytes of memory owned by `buf`, touched by nothing else yet.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Ok(Pinned { buf, ptr })
    }

    fn capacity(&self) -> usize {
        self.buf.len()
    }
}

/// Pinned buffers kept for reuse: allocating page-locked memory costs milliseconds per call.
pub(crate) struct Pool {
    ctx: Arc<CudaContext>,
    free: RefCell<Vec<Pinned>>,
    limit: Cell<usize>,
}

impl Pool {
    pub(crate) fn new(ctx: Arc<CudaContext>, limit: usize) -> Pool {
        Pool {
            ctx,
            free: RefCell::new(Vec::new()),
            limit: Cell::new(limit),
        }
    }

    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.set(limit);
        self.trim();
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit.get()
    }

    /// Bytes held for reuse now.
    pub(crate) fn held(&self) -> usize {
        self.free.borrow().iter().map(Pinned::capacity).sum()
    }

    /// A host buffer of `len` elements of `T`, from the pool or newly pinned.
    pub(crate) fn lease<T: Element>(&self, op: &'static str, len: usize) -> Result<Lease<'_, T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::CountOverflow {
                op,
                count: len,
                limit: usize::MAX / std::mem::size_of::<T>(),
            })?;
        if bytes == 0 {
            return Ok(Lease {
                pool: self,
                pinned: None,
                len: 0,
                _element: PhantomData,
            });
        }
        let reuse = {
            let mut free = self.free.borrow_mut();
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, p)| p.capacity() >= bytes)
                .min_by_key(|(_, p)| p.capacity())
                .map(|(i, _)| i);
            best.map(|i| free.swap_remove(i))
        };
        let pinned = match reuse {
            Some(p) => p,
            None => Pinned::alloc(&self.ctx, bytes.next_power_of_two().max(4096))?,
        };
        Ok(Lease {
            pool: self,
            pinned: Some(pinned),
            len,
            _element: PhantomData,
        })
    }

    fn give_back(&self, pinned: Pinned) {
        self.free.borrow_mut().push(pinned);
        self.trim();
    }

    /// Keep buffers, largest first, while their total fits the limit; free the others.
    fn trim(&self) {
        let mut free = self.free.borrow_mut();
        free.sort_by_key(|p| std::cmp::Reverse(p.capacity()));
        let mut total = 0usize;
        free.retain(|p| match total.checked_add(p.capacity()) {
            Some(t) if t <= self.limit.get() => {
                total = t;
                true
            }
            _ => false,
        });
    }
}

/// A pinned host buffer of `len` elements of `T`, back in its pool when dropped. Whoever holds it has
/// waited for the copies into and out of it before reading, writing or dropping it.
pub struct Lease<'p, T> {
    pool: &'p Pool,
    pinned: Option<Pinned>,
    len: usize,
    _element: PhantomData<T>,
}

impl<T> std::fmt::Debug for Lease<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("len", &self.len).finish()
    }
}

impl<T: Element> Lease<'_, T> {
    /// The elements.
    pub(crate) fn host(&self) -> &[T] {
        match &self.pinned {
            // SAFETY: the allocation holds at least `len * size_of::<T>()` initialized bytes (zeroed
            // when pinned, written since only as whole `T`s, which are Pod), is page-aligned, and is
            // owned by this lease alone; the borrow of `self` keeps it alive.
            Some(p) => unsafe { std::slice::from_raw_parts(p.ptr.cast::<T>(), self.len) },
            None => &[],
        }
    }

    /// The elements, to write.
    pub(crate) fn host_mut(&mut self) -> &mut [T] {
        match &mut self.pinned {
            // SAFETY: as in `host`, and the exclusive borrow of `self` makes this the only view.
            Some(p) => unsafe { std::slice::from_raw_parts_mut(p.ptr.cast::<T>(), self.len) },
            None => &mut [],
        }
    }
}

impl<T> Drop for Lease<'_, T> {
    fn drop(&mut self) {
        if let Some(p) = self.pinned.take() {
            self.pool.give_back(p);
        }
    }
}

/// Enqueue on `stream` a copy of elements `range` of `dev` into `host` (of `range.len()` elements).
/// The copy runs asynchronously: `host` must not be read before the stream (or an event recorded after
/// the copy) is waited for.
pub(crate) fn download<T: Element, B: ?Sized + DevicePtr<T>>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    dev: &B,
    range: Range<usize>,
    host: &mut [T],
) -> Result<()> {
    crate::check::same_len(op, "host", host.len(), "device range", range.len())?;
    if range.is_empty() {
        return Ok(());
    }
    if range.end > DeviceSlice::len(dev) {
        return Err(Error::invalid(op, "range outside the device buffer"));
    }
    stream
        .context()
        .bind_to_thread()
        .map_err(|e| Error::cuda(op, e))?;
    let (ptr, _read) = dev.device_ptr(stream);
    let offset = (range.start * std::mem::size_of::<T>()) as u64;
    // SAFETY: elements `range` lie inside `dev` (checked above) and `host` holds as many; the copy
    // is ordered on `stream` after the buffer's last write (`device_ptr`), and the caller waits
    // for the stream before reading `host`.
    unsafe { result::memcpy_dtoh_async(host, ptr + offset, stream.cu_stream()) }
        .map_err(|e| Error::cuda(op, e))
}

/// Enqueue on `stream` a copy of `host` into elements `range` of `dev`. Asynchronous: `host` must stay
/// unchanged until the stream is waited for.
pub(crate) fn upload<T: Element, B: ?Sized + DevicePtrMut<T>>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    host: &[T],
    dev: &mut B,
    range: Range<usize>,
) -> Result<()> {
    crate::check::same_len(op, "host", host.len(), "device range", range.len())?;
    if range.is_empty() {
        return Ok(());
    }
    if range.end > DeviceSlice::len(dev) {
        return Err(Error::invalid(op, "range outside the device buffer"));
    }
    stream
        .context()
        .bind_to_thread()
        .map_err(|e| Error::cuda(op, e))?;
    let (ptr, _write) = dev.device_ptr_mut(stream);
    let offset = (range.start * std::mem::size_of::<T>()) as u64;
    // SAFETY: elements `range` lie inside `dev` (checked above) and `host` holds as many (any
    // bytes are a valid `T`: Pod); the copy is ordered on `stream` after the buffer's last use,
    // and the caller keeps `host` unchanged until the stream is waited for.
    unsafe { result::memcpy_htod_async(ptr + offset, host, stream.cu_stream()) }
        .map_err(|e| Error::cuda(op, e))
}

/// Where cudarc does not track the buffer's uses (event tracking off, or a single stream in its
/// context), copies on `stream` are not ordered after the buffer's own stream: wait for it here.
pub(crate) fn foreign<T>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    buf: &Dev<'_, T>,
) -> Result<()> {
    if Arc::ptr_eq(buf.stream(), stream)
        || buf.stream().context().is_managing_stream_synchronization()
    {
        return Ok(());
    }
    buf.stream().synchronize().map_err(|e| Error::cuda(op, e))
}

/// Copy `dev` into `host` on `stream` and wait for the copy.
pub(crate) fn stage_in<T: Element>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    dev: &Dev<'_, T>,
    host: &mut [T],
) -> Result<()> {
    foreign(op, stream, dev)?;
    download(op, stream, dev, 0..dev.len(), host)?;
    stream.synchronize().map_err(|e| Error::cuda(op, e))
}

/// Copy `host` into `dev` on `stream` and wait for the copy.
pub(crate) fn stage_out<T: Element>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    host: &[T],
    dev: &mut DevMut<'_, T>,
) -> Result<()> {
    foreign(op, stream, dev)?;
    let len = dev.len();
    upload(op, stream, host, dev, 0..len)?;
    stream.synchronize().map_err(|e| Error::cuda(op, e))
}

/// Before a device communicator moves to `stream`: the stream is on the communicator's device, and
/// the work on its old stream is complete.
///
/// # Errors
/// [`Error::InvalidArgument`] for a stream of another device; the errors of the wait.
pub(crate) fn switching_stream<C: crate::comm::DeviceCommunicator>(
    comm: &C,
    stream: &Arc<CudaStream>,
) -> Result<()> {
    crate::check::same_device(
        "with_stream",
        "the stream",
        stream.context().ordinal(),
        comm.context().ordinal(),
    )?;
    comm.synchronize()
}

/// The pinned host buffers one call of a staged operation holds (one per buffer of the call that is
/// present on this rank), taken before the ranks agree.
pub type Leases<'c, T> = [Option<Lease<'c, T>>; 2];

/// Lease pinned host buffers of `lens` elements from `pool`, one per present buffer.
pub(crate) fn pin<'c, T: Element>(
    pool: &'c Pool,
    op: &'static str,
    lens: [Option<usize>; 2],
) -> Result<Leases<'c, T>> {
    let [a, b] = lens;
    Ok([
        a.map(|n| pool.lease::<T>(op, n)).transpose()?,
        b.map(|n| pool.lease::<T>(op, n)).transpose()?,
    ])
}

/// The pinned host buffer the front end staged for a buffer that is present.
///
/// # Errors
/// [`Error::InvalidArgument`] if none was staged (a front-end bug, reported rather than a panic).
pub(crate) fn pinned<'c, T: Element>(
    op: &'static str,
    lease: Option<Lease<'c, T>>,
) -> Result<Lease<'c, T>> {
    lease.ok_or_else(|| Error::invalid(op, "no pinned host buffer was staged for this buffer"))
}

/// One non-blocking staged operation on device buffers borrowed for `'s`.
pub(crate) struct StagedPending<'s, T: Element> {
    /// The MPI request on the host buffers (with the received-count check and an average's division).
    pub(crate) inner: MpiPending<'s, T>,
    /// The stream of the copies.
    pub(crate) stream: &'s Arc<CudaStream>,
    /// Host buffers MPI reads until completion.
    pub(crate) keep: Vec<Lease<'s, T>>,
    /// The host buffer MPI writes, and the device buffer it is copied to once complete.
    pub(crate) back: Option<(Lease<'s, T>, &'s mut DevMut<'s, T>)>,
}

impl<T: Element> StagedPending<'_, T> {
    fn finish(&mut self) -> Result<()> {
        self.keep.clear();
        match self.back.take() {
            Some((host, dev)) => stage_out(self.inner.op, self.stream, host.host(), dev),
            None => Ok(()),
        }
    }
}

impl<T: Element> Pending for StagedPending<'_, T> {
    fn wait(&mut self) -> Result<()> {
        self.inner.wait()?;
        self.finish()
    }

    fn test(&mut self) -> Result<bool> {
        if !self.inner.test()? {
            return Ok(false);
        }
        self.finish().map(|()| true)
    }
}

/// The non-blocking collectives through pinned host memory, shared by the staged backend and by
/// the CUDA-aware one where its MPI's non-blocking collectives take no device buffers: copy the
/// inputs to the pinned buffers the front end leased, start the host MPI's `MPI_I*` on them
/// (through `host`'s non-blocking starts, which honour its deadline), and copy the output back to
/// the device once the request completes ([`StagedPending`]).
pub(crate) struct ThroughHost<'s> {
    /// The MPI communicator the host operation runs on.
    pub(crate) host: &'s MpiComm,
    /// The stream of the copies.
    pub(crate) stream: &'s Arc<CudaStream>,
}

impl<'s> ThroughHost<'s> {
    /// The pinned buffers of an operation's buffers on this rank (`read`, `written`, leased in
    /// that order), with what the operation reads copied in and waited for: the send buffer, and
    /// the written buffer where the operation reads it here (a broadcast's root, an in-place
    /// all-reduce).
    ///
    /// # Errors
    /// A missing lease; [`Error::Cuda`] from the copies.
    pub(crate) fn stage_inputs<'c, T: Element, C>(
        &self,
        name: &'static str,
        shape: &Op<(), (), C>,
        read: Option<&Dev<'_, T>>,
        written: Option<&Dev<'_, T>>,
        [hs, hr]: Leases<'c, T>,
    ) -> Result<Leases<'c, T>> {
        let (reads, _) = shape.written_on(self.host.rank());
        let stage = |dev: Option<&Dev<'_, T>>, lease, copy: bool| -> Result<_> {
            let Some(dev) = dev else { return Ok(None) };
            let mut h = pinned(name, lease)?;
            if copy {
                stage_in(name, self.stream, dev, h.host_mut())?;
            }
            Ok(Some(h))
        };
        Ok([stage(read, hs, true)?, stage(written, hr, reads)?])
    }

    /// Run `op` (of `shape`, on device buffers `read` and `written`) through the pinned buffers
    /// `leases` (in the order of [`Op::buffers`]), blocking: copy in what the operation reads, make
    /// the host MPI's blocking call on the pinned buffers ([`MpiComm::call`]), copy the written
    /// buffer back. An `Avg` is the caller's to finish (it runs as `Sum` here).
    ///
    /// # Errors
    /// A missing lease; [`Error::Cuda`] from the copies; the call's errors.
    pub(crate) fn run<T: Element>(
        &self,
        name: &'static str,
        shape: &Op<(), (), &[usize]>,
        read: Option<&Dev<'_, T>>,
        written: Option<&mut DevMut<'_, T>>,
        n: usize,
        leases: Leases<'_, T>,
    ) -> Result<()> {
        let (_, writes) = shape.written_on(self.host.rank());
        let written_in = written.as_deref().map(|d| -> &Dev<'_, T> { d });
        let [hs, mut hr] = self.stage_inputs(name, shape, read, written_in, leases)?;
        let len = hr.as_ref().map_or(0, |h| h.host().len());
        let regions = (*shape).fill(
            hs.as_ref().map(|h| Region::send(h.host())),
            hr.as_mut()
                .map(|h| Region::written(shape.in_out(), h.host_mut())),
        );
        // SAFETY: the regions are pinned host buffers sized for the checked counts, held until
        // the blocking call returns.
        unsafe { self.host.call::<T, Blocking>(name, regions, n, len) }?;
        match (hr, written) {
            (Some(h), Some(dev)) if writes => stage_out(name, self.stream, h.host(), dev),
            _ => Ok(()),
        }
    }

    /// Start `op` (on device buffers) through the pinned buffers `leases` the front end took for
    /// it (in the order of [`Op::buffers`]): wait for the stream's work, copy in what the
    /// operation reads (the send buffer; a broadcast root's and an in-place all-reduce's written
    /// buffer), start the host MPI's call of the operation on the pinned buffers
    /// ([`MpiComm::call`]), and copy the written buffer back at completion, a reduction finished
    /// (divided) on the host copy first where it is `Avg` or `average` says so.
    ///
    /// # Errors
    /// A missing lease; [`Error::Cuda`] from the copies; the start's errors.
    pub(crate) fn start<T: Element>(
        &self,
        name: &'static str,
        op: Op<&'s Dev<'s, T>, &'s mut DevMut<'s, T>, &[usize]>,
        n: usize,
        average: bool,
        [hs, hr]: Leases<'s, T>,
    ) -> Result<StagedPending<'s, T>> {
        let (shape, read, written) = op.split();
        if matches!(shape, Op::Barrier) {
            self.stream
                .synchronize()
                .map_err(|e| Error::cuda(name, e))?;
        }
        let (_, writes) = shape.written_on(self.host.rank());
        let written_in = written.as_deref().map(|d| -> &Dev<'_, T> { d });
        let [hs, mut hr] = self.stage_inputs(name, &shape, read, written_in, [hs, hr])?;
        let len = hr.as_ref().map_or(0, |h| h.host().len());
        let regions = shape.fill(
            hs.as_ref().map(|h| Region::send(h.host())),
            hr.as_mut()
                .map(|h| Region::written(shape.in_out(), h.host_mut())),
        );
        // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
        // operation in flight (`keep`, `back`) until it completes.
        let inner = unsafe { self.host.call::<T, Started>(name, regions, n, len) }?;
        let inner = inner.finishing(
            shape.reduce_op(),
            average,
            hr.as_mut().map(|h| h.host_mut()),
            self.host.size(),
        );
        let mut keep: Vec<_> = hs.into_iter().collect();
        let back = match (hr, written) {
            (Some(h), Some(dev)) if writes => Some((h, dev)),
            (h, _) => {
                keep.extend(h);
                None
            }
        };
        Ok(StagedPending {
            inner,
            stream: self.stream,
            keep,
            back,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("512K"), Some(512 << 10));
        assert_eq!(parse_bytes(" 4m "), Some(4 << 20));
        assert_eq!(parse_bytes("1G"), Some(1 << 30));
        assert_eq!(parse_bytes("0"), None);
        assert_eq!(parse_bytes("4X"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("M"), None);
        assert_eq!(parse_bytes("99999999999999999999G"), None);
    }
}
