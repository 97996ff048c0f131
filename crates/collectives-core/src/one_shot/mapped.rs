//! A word of page-locked host memory the GPU writes through a mapping: the one-shot kernels set it
//! when they give up waiting for a peer, and the host reads it after the stream completes.

use std::sync::Arc;

use cudarc::driver::sys as cu;
use cudarc::driver::CudaContext;

use crate::error::{Error, Result};

const OP: &str = "one_shot";

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
        Error::check_cuda(OP, "cuMemHostAlloc", unsafe {
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
        Error::check_cuda(OP, "cuMemHostGetDevicePointer", rc)?;
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
