//! Which path a call of the CUDA-aware backend takes without a deadline: the MPI's own, on the
//! device addresses, or the same MPI call on pinned host copies of the buffers
//! ([`ThroughHost`](crate::backend::cuda_common::ThroughHost)), on the same MPI communicator.
//!
//! Measured on 2 H100 under the CUDA-aware Open MPI 4.1.4 (docs/PERFORMANCE.md): every
//! collective on cudarc's buffers took about 1.2 ms through the MPI's device path whatever the
//! size up to 256 KiB, against 16-94 µs through host memory, because cudarc allocates from
//! CUDA's stream-ordered pool and the MPI's shared-memory transport cannot map pool memory into
//! its peer (legacy CUDA IPC refuses it; the MPI says so and falls back); and Open MPI reduces
//! device buffers on the host, so its device reductions lost to host copies at every size (8 B
//! to 2 MiB, 1.4-6x). A call therefore goes through host memory where one of its buffers is
//! pool memory, or where it reduces, unless the builder says the MPI does better
//! ([`MpiCudaBuilder::device_pool_memory`](super::MpiCudaBuilder::device_pool_memory),
//! [`MpiCudaBuilder::device_reductions`](super::MpiCudaBuilder::device_reductions)).
//!
//! The choice is each rank's own: both paths make the same blocking MPI call (or the same
//! non-blocking point-to-point start) on the same communicator, so ranks that choose differently
//! still match.

use cudarc::driver::sys;

use crate::record;

/// Why a call goes through host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// One of its device buffers is stream-ordered pool memory, which the MPI cannot map.
    PoolMemory,
    /// It reduces, and the MPI reduces device buffers on the host.
    Reduction,
}

impl Why {
    /// The path the per-call record names.
    pub(crate) fn path(self) -> record::Path {
        match self {
            Why::PoolMemory => record::Path::staged("through-host (pool memory)"),
            Why::Reduction => record::Path::staged("through-host (reduction)"),
        }
    }
}

/// The device path's name in the per-call record.
pub(crate) const DEVICE: record::Path = record::Path::direct("device-pointers");

/// What the MPI does well on device memory (the builder's choices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DevicePaths {
    /// Reductions on device buffers (else through host memory).
    pub(crate) reductions: bool,
    /// Buffers from a stream-ordered pool (else through host memory).
    pub(crate) pool_memory: bool,
}

impl DevicePaths {
    /// Through host memory, and why, for a call that reduces (`reduces`) on buffers of which one
    /// is pool memory (`pool`, asked only when it matters); `None`: the device path.
    pub(crate) fn through_host(self, reduces: bool, pool: impl FnOnce() -> bool) -> Option<Why> {
        if reduces && !self.reductions {
            Some(Why::Reduction)
        } else if !self.pool_memory && pool() {
            Some(Why::PoolMemory)
        } else {
            None
        }
    }
}

/// Whether device address `ptr` lies in memory from a stream-ordered pool (`cuMemAllocAsync`,
/// which cudarc uses where the device has pools). False where the driver cannot tell.
pub(crate) fn from_pool(ptr: sys::CUdeviceptr) -> bool {
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `pool` is an out-pointer of the attribute's type (a pool handle); the driver only
    // reads `ptr` as an address, and answers an error for one it does not know.
    let rc = unsafe {
        sys::cuPointerGetAttribute(
            (&mut pool as *mut sys::CUmemoryPool).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            ptr,
        )
    };
    rc == sys::CUresult::CUDA_SUCCESS && !pool.is_null()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_and_pool_memory_go_through_host_unless_the_mpi_does_better() {
        let neither = DevicePaths {
            reductions: false,
            pool_memory: false,
        };
        assert_eq!(neither.through_host(true, || false), Some(Why::Reduction));
        assert_eq!(neither.through_host(true, || true), Some(Why::Reduction));
        assert_eq!(neither.through_host(false, || true), Some(Why::PoolMemory));
        assert_eq!(neither.through_host(false, || false), None);
        let both = DevicePaths {
            reductions: true,
            pool_memory: true,
        };
        assert_eq!(
            both.through_host(true, || panic!("not asked when it does not matter")),
            None
        );
        let reductions = DevicePaths {
            reductions: true,
            ..neither
        };
        assert_eq!(
            reductions.through_host(true, || true),
            Some(Why::PoolMemory)
        );
        assert_eq!(reductions.through_host(true, || false), None);
    }

    #[test]
    fn the_record_names_why() {
        assert!(Why::PoolMemory.path().staged);
        assert!(Why::Reduction.path().name.contains("reduction"));
        assert_eq!(DEVICE.name, "device-pointers");
    }
}
