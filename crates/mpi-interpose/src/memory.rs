//! Where a buffer lives, asked of the CUDA driver loaded at run time: one driver call per
//! buffer (`cuPointerGetAttributes`, the allocation's range among the attributes; a second,
//! `cuMemGetAddressRange`, only under a driver that does not give the range so), nothing
//! cached (an address freed and allocated again may change what it is).
//!
//! A buffer is device memory only when the driver says so for certain: `libcuda` opens, the
//! process has initialized CUDA (otherwise it cannot hold device memory, and the query says
//! `CUDA_ERROR_NOT_INITIALIZED` without initializing anything), the pointer's memory type is
//! device, it is not managed memory (which the real MPI can read from the host), and its
//! allocation's range is known. Anything else, including a panic in the bindings, is host: the
//! call passes through.

use std::panic::{catch_unwind, AssertUnwindSafe};

use datatype_pack::gpu::cudarc::driver::sys;

/// A device allocation a pointer falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceBuffer {
    /// The device's ordinal.
    pub ordinal: usize,
    /// The pointer.
    pub ptr: u64,
    /// Bytes from the pointer to the end of its allocation.
    pub len: u64,
    /// The start of its allocation.
    pub base: u64,
    /// The driver's id of its allocation (`CU_POINTER_ATTRIBUTE_BUFFER_ID`), unique in the
    /// process's life (an address freed and allocated again gets another); 0 where the driver
    /// gives none.
    pub id: u64,
    /// The context the allocation belongs to (`CU_POINTER_ATTRIBUTE_CONTEXT`), 0 when the
    /// driver names none (stream-ordered and virtual-memory allocations).
    pub context: usize,
}

/// The device allocation `ptr` points into, or `None` for host memory (or anything not certain).
pub fn device_buffer(ptr: *const std::ffi::c_void) -> Option<DeviceBuffer> {
    if ptr.is_null() || !datatype_pack::gpu::driver_present() {
        return None;
    }
    catch_unwind(AssertUnwindSafe(|| query(ptr as u64)))
        .ok()
        .flatten()
}

fn query(p: u64) -> Option<DeviceBuffer> {
    use sys::CUpointer_attribute as A;
    let ok = sys::CUresult::CUDA_SUCCESS;
    let mut memtype: u32 = 0;
    let mut managed: u32 = 0;
    let mut ordinal: i32 = -1;
    let mut start: sys::CUdeviceptr = 0;
    let mut size: usize = 0;
    let mut context: sys::CUcontext = std::ptr::null_mut();
    let mut id: u64 = 0;
    // One driver call for the seven attributes, the allocation's range among them; the buffer
    // id and the context last, so that where the driver refuses them the others are asked
    // again without (id 0: none; context 0: none named). A driver that knows no range
    // attributes refuses those too: then the first three, and the range by
    // `cuMemGetAddressRange`.
    let mut attributes = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        A::CU_POINTER_ATTRIBUTE_CONTEXT,
        A::CU_POINTER_ATTRIBUTE_BUFFER_ID,
    ];
    let mut data: [*mut std::ffi::c_void; 7] = [
        (&mut memtype as *mut u32).cast(),
        (&mut managed as *mut u32).cast(),
        (&mut ordinal as *mut i32).cast(),
        (&mut start as *mut sys::CUdeviceptr).cast(),
        (&mut size as *mut usize).cast(),
        (&mut context as *mut sys::CUcontext).cast(),
        (&mut id as *mut u64).cast(),
    ];
    let mut rc = ok;
    let mut ranged = true;
    for n in [7u32, 6, 5, 3] {
        ranged = n >= 5;
        // SAFETY: `attributes` and `data` hold at least `n` entries; each data pointer is a
        // valid out-pointer of the attribute's type (an `unsigned int` CUmemorytype, a
        // `bool`-like `unsigned int`, an `int`, a `CUdeviceptr`, a `size_t`, a `CUcontext`,
        // an `unsigned long long` buffer id); any address may be asked about (one the driver
        // does not know reads as memory type 0).
        rc = unsafe {
            sys::cuPointerGetAttributes(n, attributes.as_mut_ptr(), data.as_mut_ptr(), p)
        };
        if rc == ok || rc == sys::CUresult::CUDA_ERROR_NOT_INITIALIZED {
            break;
        }
        id = 0;
        if n <= 6 {
            context = std::ptr::null_mut();
        }
    }
    if rc != ok || memtype != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 || managed != 0 {
        return None;
    }
    if !ranged || size == 0 {
        // SAFETY: two valid out-pointers; the driver fills them for an address it allocated.
        let rc = unsafe { sys::cuMemGetAddressRange_v2(&mut start, &mut size, p) };
        if rc != ok {
            return None;
        }
    }
    if p < start {
        return None;
    }
    let end = start.checked_add(size as u64)?;
    if p >= end {
        return None;
    }
    Some(DeviceBuffer {
        ordinal: usize::try_from(ordinal).ok()?,
        ptr: p,
        len: end - p,
        base: start,
        id,
        context: context as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_is_host() {
        let v = [0u8; 64];
        assert_eq!(device_buffer(v.as_ptr().cast()), None);
        assert_eq!(device_buffer(std::ptr::null()), None);
    }
}
