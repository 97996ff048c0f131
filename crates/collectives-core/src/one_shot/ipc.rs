//! CUDA IPC for the one-shot all-reduce: memory one rank exports, the mappings of its peers'
//! memory, and which GPUs reach which.

use std::ffi::c_uint;
use std::sync::Arc;

use cudarc::driver::sys::{self as cu, CUresult};
use cudarc::driver::CudaContext;

use crate::error::{Error, Result};

const OP: &str = "one_shot";

/// 64-bit words of one `CUipcMemHandle` (64 bytes), the form it travels in over MPI.
pub(super) const HANDLE_WORDS: usize = 8;

fn check(what: &str, rc: CUresult) -> Result<()> {
    if rc == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            op: OP,
            message: format!("{what} failed: {rc:?}"),
        })
    }
}

/// Zeroed device memory from `cuMemAlloc`, which CUDA IPC can export (pool allocations cannot).
#[derive(Debug)]
pub(super) struct DeviceAlloc {
    pub(super) ptr: u64,
}

impl DeviceAlloc {
    pub(super) fn zeroed(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        ctx.bind_to_thread().map_err(|e| Error::cuda(OP, e))?;
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; the context is current on this thread.
        check("cuMemAlloc", unsafe {
            cu::cuMemAlloc_v2(&mut ptr, bytes.max(1))
        })?;
        let alloc = Self { ptr };
        // SAFETY: `ptr` is the start of at least `bytes` bytes just allocated.
        check("cuMemsetD8", unsafe {
            cu::cuMemsetD8_v2(ptr, 0, bytes.max(1))
        })?;
        // The memset runs on the legacy stream: nothing may use the memory before it is done.
        ctx.synchronize().map_err(|e| Error::cuda(OP, e))?;
        Ok(alloc)
    }

    /// The IPC handle of this allocation, as words.
    pub(super) fn handle_words(&self) -> Result<[u64; HANDLE_WORDS]> {
        // SAFETY: the handle is plain bytes, overwritten by the call.
        let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
        // SAFETY: `ptr` is the base of a live cuMemAlloc allocation; valid out-pointer.
        check("cuIpcGetMemHandle", unsafe {
            cu::cuIpcGetMemHandle(&mut h, self.ptr)
        })?;
        let mut out = [0u64; HANDLE_WORDS];
        for (i, w) in out.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            for (j, x) in b.iter_mut().enumerate() {
                *x = h.reserved[8 * i + j] as u8;
            }
            *w = u64::from_le_bytes(b);
        }
        Ok(out)
    }

    /// Gives the memory up without freeing it: for a teardown that cannot prove every peer is
    /// done reading it.
    pub(super) fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc and freed once; the owner's drop leaks the allocation
        // instead (`leak`) when a peer may still read it.
        let _ = unsafe { cu::cuMemFree_v2(self.ptr) };
    }
}

/// Another process's allocation mapped into this one (`cuIpcOpenMemHandle`).
#[derive(Debug)]
pub(super) struct Mapping {
    pub(super) ptr: u64,
}

impl Mapping {
    pub(super) fn open(words: &[u64]) -> Result<Self> {
        // SAFETY: the handle is plain bytes.
        let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
        for (i, w) in words.iter().take(HANDLE_WORDS).enumerate() {
            for (j, b) in w.to_le_bytes().into_iter().enumerate() {
                h.reserved[8 * i + j] = b as _;
            }
        }
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: a handle exported by another rank of this node with cuIpcGetMemHandle; valid
        // out-pointer; the caller made the context current.
        check("cuIpcOpenMemHandle", unsafe {
            cu::cuIpcOpenMemHandle_v2(
                &mut ptr,
                h,
                cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as c_uint,
            )
        })?;
        Ok(Self { ptr })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: opened by cuIpcOpenMemHandle and closed once, after this rank's launches that
        // read it are done (the owner synchronizes its stream first).
        let _ = unsafe { cu::cuIpcCloseMemHandle(self.ptr) };
    }
}

/// A GPU's UUID as two words.
pub(super) fn uuid_of(dev: cu::CUdevice) -> Option<[u64; 2]> {
    // SAFETY: the uuid is plain bytes, overwritten by the call.
    let mut u: cu::CUuuid = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer and device handle.
    if unsafe { cu::cuDeviceGetUuid_v2(&mut u, dev) } != CUresult::CUDA_SUCCESS {
        return None;
    }
    let b: Vec<u8> = u.bytes.iter().map(|&c| c as u8).collect();
    let lo = u64::from_le_bytes(b[..8].try_into().ok()?);
    let hi = u64::from_le_bytes(b[8..16].try_into().ok()?);
    Some([lo, hi])
}

/// Whether `ctx`'s GPU has peer access to the GPU with `uuid`, which must be another GPU of this
/// node (`None`: no such GPU here, so the rank holding it is on another node).
pub(super) fn peer_access(ctx: &Arc<CudaContext>, uuid: [u64; 2]) -> Option<bool> {
    let count = CudaContext::device_count().unwrap_or(0);
    for ordinal in 0..count {
        let Ok(dev) = cudarc::driver::result::device::get(ordinal) else {
            continue;
        };
        if uuid_of(dev) != Some(uuid) {
            continue;
        }
        let mut can = 0;
        // SAFETY: valid out-pointer and device handles.
        let rc = unsafe { cu::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), dev) };
        return Some(rc == CUresult::CUDA_SUCCESS && can == 1);
    }
    None
}

/// Page-locked host memory the GPU writes through a mapping: one word a kernel sets when it
/// gave up waiting, read by the host after the stream completes.
#[derive(Debug)]
pub(super) struct MappedWord {
    host: *mut u32,
    pub(super) device: u64,
}

impl MappedWord {
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        ctx.bind_to_thread().map_err(|e| Error::cuda(OP, e))?;
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current on this thread.
        check("cuMemHostAlloc", unsafe {
            cu::cuMemHostAlloc(
                &mut host,
                std::mem::size_of::<u32>(),
                cu::CU_MEMHOSTALLOC_DEVICEMAP | cu::CU_MEMHOSTALLOC_PORTABLE,
            )
        })?;
        let host = host.cast::<u32>();
        // SAFETY: `host` points to a u32 just allocated, used by nothing else yet.
        unsafe { host.write_volatile(0) };
        let mut device: cu::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with CU_MEMHOSTALLOC_DEVICEMAP; valid out-pointer.
        let rc = unsafe { cu::cuMemHostGetDevicePointer_v2(&mut device, host.cast(), 0) };
        let word = Self { host, device };
        check("cuMemHostGetDevicePointer", rc)?;
        Ok(word)
    }

    pub(super) fn get(&self) -> u32 {
        // SAFETY: `host` stays allocated for `self`'s life; the GPU writes it with system-scope
        // stores, read here after the stream that ran those kernels completed.
        unsafe { self.host.read_volatile() }
    }
}

impl Drop for MappedWord {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once, after the owner synchronized its
        // stream (no kernel writes it any more).
        let _ = unsafe { cu::cuMemFreeHost(self.host.cast()) };
    }
}

// SAFETY: the word is only read through volatile loads and written by the GPU; the pointer is
// not shared with any other Rust value.
unsafe impl Send for MappedWord {}
