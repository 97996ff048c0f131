//! CUDA IPC between the ranks of a node: device memory one rank exports, its peers' mappings of
//! it, the handle in the form it travels in over MPI, and which GPUs reach which. Shared by the
//! one-shot all-reduce ([`crate::one_shot`]) and the halo exchange's pulls between neighbours.
//!
//! Memory from CUDA's stream-ordered pool (cudarc's allocations) cannot be exported with legacy
//! IPC handles, so what is shared is allocated here with `cuMemAlloc`.

use std::ffi::c_uint;
use std::sync::Arc;

use cudarc::driver::sys::{self as cu, CUresult};
use cudarc::driver::CudaContext;

use crate::error::{Error, Result};

/// 64-bit words of one `CUipcMemHandle` (64 bytes), the form it travels in over MPI.
pub const HANDLE_WORDS: usize = 8;

/// Zeroed device memory from `cuMemAlloc`, which CUDA IPC can export. Freed when dropped, unless
/// [`leak`](Self::leak)ed.
#[derive(Debug)]
pub struct DeviceAlloc {
    ptr: u64,
    bytes: usize,
}

impl DeviceAlloc {
    /// `bytes` zeroed bytes (at least one) on `ctx`'s GPU; errors are `op`'s.
    ///
    /// # Errors
    /// [`Error::Cuda`] from the allocation, the memset or the synchronization.
    pub fn zeroed(op: &'static str, ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        ctx.bind_to_thread().map_err(|e| Error::cuda(op, e))?;
        let bytes = bytes.max(1);
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; the context is current on this thread.
        Error::check_cuda(op, "cuMemAlloc", unsafe {
            cu::cuMemAlloc_v2(&mut ptr, bytes)
        })?;
        let alloc = Self { ptr, bytes };
        // SAFETY: `ptr` is the start of `bytes` bytes just allocated.
        Error::check_cuda(op, "cuMemsetD8", unsafe {
            cu::cuMemsetD8_v2(ptr, 0, bytes)
        })?;
        // The memset runs on the legacy stream: nothing may use the memory before it is done.
        ctx.synchronize().map_err(|e| Error::cuda(op, e))?;
        Ok(alloc)
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The IPC handle of this allocation, as words for MPI; errors are `op`'s.
    ///
    /// # Errors
    /// [`Error::Cuda`] from `cuIpcGetMemHandle`.
    pub fn handle_words(&self, op: &'static str) -> Result<[u64; HANDLE_WORDS]> {
        // SAFETY: the handle is plain bytes, overwritten by the call.
        let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
        // SAFETY: `ptr` is the base of a live cuMemAlloc allocation; valid out-pointer.
        Error::check_cuda(op, "cuIpcGetMemHandle", unsafe {
            cu::cuIpcGetMemHandle(&mut h, self.ptr)
        })?;
        Ok(handle_to_words(&h))
    }

    /// Gives the memory up without freeing it: for a teardown that cannot prove every peer is
    /// done with it.
    pub fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc and freed once; an owner whose peers may still use the
        // memory leaks it instead (`leak`).
        let _ = unsafe { cu::cuMemFree_v2(self.ptr) };
    }
}

/// Another process's allocation mapped into this one (`cuIpcOpenMemHandle`). Closed when
/// dropped: the owner first waits for its launches that use it.
#[derive(Debug)]
pub struct Mapping {
    ptr: u64,
}

impl Mapping {
    /// Map the allocation whose handle another rank of this node sent as `words`, in the
    /// context current on this thread; errors are `op`'s.
    ///
    /// # Errors
    /// [`Error::Cuda`] from `cuIpcOpenMemHandle`.
    pub fn open(op: &'static str, words: &[u64]) -> Result<Self> {
        let h = words_to_handle(words);
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: a handle exported by another rank of this node with cuIpcGetMemHandle; valid
        // out-pointer; the caller made the context current.
        Error::check_cuda(op, "cuIpcOpenMemHandle", unsafe {
            cu::cuIpcOpenMemHandle_v2(
                &mut ptr,
                h,
                cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as c_uint,
            )
        })?;
        Ok(Self { ptr })
    }

    /// The device address of the mapping in this process.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: opened by cuIpcOpenMemHandle and closed once, after this rank's launches that
        // read it are done (the owner synchronizes its streams first).
        let _ = unsafe { cu::cuIpcCloseMemHandle(self.ptr) };
    }
}

fn handle_to_words(h: &cu::CUipcMemHandle) -> [u64; HANDLE_WORDS] {
    let mut out = [0u64; HANDLE_WORDS];
    for (i, w) in out.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        for (j, x) in b.iter_mut().enumerate() {
            *x = h.reserved[8 * i + j] as u8;
        }
        *w = u64::from_le_bytes(b);
    }
    out
}

fn words_to_handle(words: &[u64]) -> cu::CUipcMemHandle {
    // SAFETY: the handle is plain bytes.
    let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
    for (i, w) in words.iter().take(HANDLE_WORDS).enumerate() {
        for (j, b) in w.to_le_bytes().into_iter().enumerate() {
            h.reserved[8 * i + j] = b as _;
        }
    }
    h
}

/// A GPU's UUID as two words.
pub fn uuid_words(u: &cu::CUuuid) -> [u64; 2] {
    let b: Vec<u8> = u.bytes.iter().map(|&c| c as u8).collect();
    let lo = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
    let hi = u64::from_le_bytes(b[8..16].try_into().unwrap_or([0; 8]));
    [lo, hi]
}

/// The UUID of device `dev` as two words (`None` where the driver does not say).
pub fn uuid_of(dev: cu::CUdevice) -> Option<[u64; 2]> {
    // SAFETY: the uuid is plain bytes, overwritten by the call.
    let mut u: cu::CUuuid = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer and device handle.
    if unsafe { cu::cuDeviceGetUuid_v2(&mut u, dev) } != CUresult::CUDA_SUCCESS {
        return None;
    }
    Some(uuid_words(&u))
}

/// Whether `ctx`'s GPU has peer access to the GPU with `uuid`, another GPU of this node (`None`:
/// no such GPU here, so the rank holding it is on another node).
pub fn peer_access(ctx: &Arc<CudaContext>, uuid: [u64; 2]) -> Option<bool> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_survive_the_trip_through_words() {
        // SAFETY: the handle is plain bytes.
        let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
        for (i, b) in h.reserved.iter_mut().enumerate() {
            // Every byte value, the high ones negative as c_char.
            *b = (i as u8).wrapping_mul(37).wrapping_add(200) as _;
        }
        let words = handle_to_words(&h);
        let back = words_to_handle(&words);
        assert_eq!(back.reserved, h.reserved);
        assert_ne!(words, [0; HANDLE_WORDS]);
    }

    #[test]
    fn uuids_become_two_words() {
        // SAFETY: the uuid is plain bytes.
        let mut u: cu::CUuuid = unsafe { std::mem::zeroed() };
        for (i, b) in u.bytes.iter_mut().enumerate() {
            *b = (i as u8 + 0xf0) as _;
        }
        let [lo, hi] = uuid_words(&u);
        assert_eq!(lo.to_le_bytes()[0], 0xf0);
        assert_eq!(hi.to_le_bytes()[7], 0xff);
        assert_ne!(lo, hi);
    }
}
