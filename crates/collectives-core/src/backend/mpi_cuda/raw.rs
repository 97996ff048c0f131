//! Plumbing for device pointers handed to MPI: addresses, the stream they are ordered on, CUDA errors.
//! Datatypes, operations, counts and MPI error codes come from the host backend's `raw` module.

use std::borrow::{Borrow, BorrowMut};
use std::ffi::c_void;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use cudarc::driver::{
    result, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop,
};

use crate::backend::mpi_host::raw as host;
use crate::element::Element;
use crate::error::{Error, Result};

/// The address MPI gets for an empty buffer: a host address that is never read or written (MPI does
/// not touch a buffer with a zero count), never a sentinel such as `MPI_IN_PLACE`.
fn empty() -> *mut c_void {
    host::ptr::<u8>(&[]).cast_mut()
}

/// The device address of `buf` for MPI to read, taken on `stream`: cudarc makes `stream` wait for the
/// buffer's earlier writes on other streams (the caller then synchronizes `stream`). No event is
/// recorded on `stream` for this use ([`untracked`]).
pub(crate) fn dptr<T, B: ?Sized + DevicePtr<T>>(buf: &B, stream: &CudaStream) -> *const c_void {
    if DeviceSlice::is_empty(buf) {
        return empty().cast_const();
    }
    let (p, guard) = buf.device_ptr(stream);
    untracked(guard);
    p as usize as *const c_void
}

/// The device address of `buf` for MPI to write, taken on `stream` (as [`dptr`], waiting also for
/// earlier reads).
pub(crate) fn dptr_mut<T, B: ?Sized + DevicePtrMut<T>>(
    buf: &mut B,
    stream: &CudaStream,
) -> *mut c_void {
    if DeviceSlice::is_empty(buf) {
        return empty();
    }
    let (p, guard) = buf.device_ptr_mut(stream);
    untracked(guard);
    p as usize as *mut c_void
}

/// Let cudarc's guard go without recording its event on the communicator's stream.
///
/// MPI reads and writes device memory on the host's time, not the stream's: a blocking call has
/// finished with the buffer when it returns, and a non-blocking one when its request is waited
/// for, before anything the host enqueues afterwards. An event recorded on the stream after the
/// call would order nothing MPI did; it would only leave work on the stream, which the next
/// call's synchronize then waits a round trip to the GPU for, once per message of an `osu_bw`
/// window.
fn untracked(guard: SyncOnDrop<'_>) {
    std::mem::forget(guard);
}

/// Device memory from `cuMemAlloc`, which a CUDA-aware MPI can map into a peer process (CUDA IPC),
/// as a `CudaSlice<T>` for every backend.
///
/// cudarc allocates from CUDA's stream-ordered pool where the device has one, and pool memory cannot
/// be exported with the legacy `cuIpcGetMemHandle` that Open MPI's shared-memory transport uses for
/// large messages: there the MPI falls back to a slower path (and may say so). Buffers made here
/// can take the fast one. Allocating and freeing synchronize the device (as `cuMemAlloc`/`cuMemFree`
/// do): make them once, reuse them.
///
/// ```no_run
/// use collectives_core::backend::mpi_cuda::IpcBuffer;
/// use collectives_core::{Communicator, DeviceCommunicator, MpiComm, MpiCudaComm};
///
/// let universe = mpi::initialize().expect("MPI initializes once");
/// let comm = MpiCudaComm::from_mpi(&MpiComm::world(&universe)?, None)?;
/// let mut buf = IpcBuffer::<f32>::zeros(comm.stream(), 16 << 20)?;
/// if comm.rank() == 0 {
///     comm.send(&buf, 1, 0)?;
/// } else if comm.rank() == 1 {
///     comm.recv(&mut buf, 0, 0)?;
/// }
/// # Ok::<(), collectives_core::Error>(())
/// ```
pub struct IpcBuffer<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
}

crate::memory::forward_device_slice!(IpcBuffer<T>, slice);

impl<T> fmt::Debug for IpcBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IpcBuffer")
            .field("len", &self.slice.len())
            .field("device", &self.slice.ordinal())
            .finish()
    }
}

impl<T: Element> IpcBuffer<T> {
    /// `len` zeroed elements on `stream`'s device, ordered on `stream`.
    ///
    /// # Errors
    /// [`Error::Cuda`] when allocating fails; [`Error::CountOverflow`] for an impossible size.
    pub fn zeros(stream: &Arc<CudaStream>, len: usize) -> Result<Self> {
        const OP: &str = "ipc_alloc";
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::CountOverflow {
                op: OP,
                count: len,
                limit: usize::MAX / std::mem::size_of::<T>().max(1),
            })?;
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| Error::cuda(OP, e))?;
        // CUDA refuses empty allocations: an empty buffer keeps one byte it never uses.
        // SAFETY: a plain allocation of at least one byte in the context bound above.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(|e| Error::cuda(OP, e))?;
        // The zeroing is ordered on `stream`, the stream every later use of the buffer is ordered
        // after. `cuMemsetD8` (no stream) would run on the legacy default stream, which a
        // non-blocking stream (cudarc's `new_stream`, ours) does not wait for: an upload enqueued next
        // on `stream` could land first and be zeroed after it. On a GPU shared by two processes the
        // memset is often delayed that long, and the buffer then sends zeros.
        // SAFETY: `ptr` addresses `bytes.max(1)` bytes just allocated, that nothing else uses;
        // `stream` is a live stream of the context bound above.
        if let Err(e) = unsafe { result::memset_d8_async(ptr, 0, bytes.max(1), stream.cu_stream()) }
        {
            // SAFETY: allocated above, never handed out, freed once.
            let _ = unsafe { result::free_sync(ptr) };
            return Err(Error::cuda(OP, e));
        }
        // SAFETY: `ptr` is a live allocation of at least `len * size_of::<T>()` zeroed bytes (a valid
        // `T` each: elements are Pod), owned from here by the slice, which this buffer keeps from
        // freeing it with the pool's free (see Drop).
        let slice = unsafe { stream.upgrade_device_ptr::<T>(ptr, len) };
        Ok(IpcBuffer {
            slice: ManuallyDrop::new(slice),
        })
    }

    /// A copy of `host` on `stream`'s device.
    ///
    /// # Errors
    /// As [`zeros`](Self::zeros), and [`Error::Cuda`] when the copy fails.
    pub fn upload(stream: &Arc<CudaStream>, host: &[T]) -> Result<Self> {
        let mut buf = Self::zeros(stream, host.len())?;
        crate::device::copy_to_device(stream, host, &mut buf)?;
        Ok(buf)
    }
}

impl<T> Deref for IpcBuffer<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> DerefMut for IpcBuffer<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Borrow<CudaSlice<T>> for IpcBuffer<T> {
    fn borrow(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> BorrowMut<CudaSlice<T>> for IpcBuffer<T> {
    fn borrow_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Drop for IpcBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: the slice is taken once, here, and never used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        let stream = slice.stream().clone();
        // `leak` makes the stream wait for the slice's recorded uses and hands the pointer back.
        let ptr = slice.leak();
        // Errors cannot be reported from a drop; a failed wait still frees (cuMemFree waits too).
        let _ = stream.synchronize();
        let _ = stream.context().bind_to_thread();
        // SAFETY: `ptr` came from `cuMemAlloc` in `zeros`, its uses are complete (stream waited
        // for), and it is freed once.
        let _ = unsafe { result::free_sync(ptr) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host function that holds up the stream it is enqueued on for 300 ms.
    extern "C" fn hold_up(_: *mut c_void) {
        std::thread::sleep(std::time::Duration::from_millis(300));
    }

    /// The zeroing of a new `IpcBuffer` is ordered on the buffer's stream, so the upload enqueued after
    /// it is never overwritten, whatever else the device's legacy default stream is busy with. Holding
    /// up the legacy stream makes the order of a memset enqueued there (the cause of wrong sends with
    /// two ranks on one GPU) deterministic: the zeros would land after the upload.
    #[test]
    #[ignore = "needs a CUDA device"]
    fn ipc_buffer_zeroing_is_ordered_on_its_stream() {
        use cudarc::driver::{sys, CudaContext};
        let ctx = CudaContext::new(0).expect("a CUDA device");
        let stream = ctx.new_stream().expect("a stream");
        let host: Vec<u32> = (0..(1u32 << 20))
            .map(|i| i.wrapping_mul(2_654_435_761) | 1)
            .collect();
        // SAFETY: the legacy default stream (null) of the current context, bound by `new_stream`;
        // `hold_up` is a valid host function that ignores its argument and calls no CUDA API.
        let rc = unsafe {
            sys::cuLaunchHostFunc(std::ptr::null_mut(), Some(hold_up), std::ptr::null_mut())
        };
        assert_eq!(rc, sys::CUresult::CUDA_SUCCESS, "cuLaunchHostFunc");
        let buf = IpcBuffer::upload(&stream, &host).expect("an IpcBuffer");
        // Every stream of the device, the legacy one included, is done before the buffer is read.
        ctx.synchronize().expect("the device completes");
        let got = crate::device::download(&stream, &buf).expect("a download");
        let wrong = got.iter().zip(&host).filter(|(a, b)| a != b).count();
        assert_eq!(wrong, 0, "{wrong} of {} elements overwritten", host.len());
    }

    #[test]
    fn empty_buffers_point_at_host_memory_that_is_no_sentinel() {
        let p = empty();
        assert!(!p.is_null());
        assert_ne!(p, host::in_place());
    }
}
