//! Device memory for any [`Element`]: allocate, upload, download.
//!
//! cudarc allocates only types that implement its `DeviceRepr`, which `num_complex::Complex` does not
//! (and, as foreign types, neither crate can add). These helpers move bytes instead, which is exact
//! for every element since elements are plain data ([`bytemuck::Pod`]).
//!
//! ```no_run
//! use collectives_core::device;
//! use cudarc::driver::CudaContext;
//! use num_complex::Complex64;
//!
//! let stream = CudaContext::new(0).expect("a GPU").default_stream();
//! let z = device::upload(&stream, &[Complex64::new(1.0, 2.0); 4])?;
//! assert_eq!(device::download(&stream, &z)?, vec![Complex64::new(1.0, 2.0); 4]);
//! # Ok::<(), collectives_core::Error>(())
//! ```

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice};

use crate::element::Element;
use crate::error::{Error, Result};

fn cuda(op: &'static str, e: cudarc::driver::DriverError) -> Error {
    Error::Cuda {
        op,
        message: e.to_string(),
    }
}

fn bytes_of<T: Element>(op: &'static str, len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or(Error::CountOverflow {
            op,
            count: len,
            limit: usize::MAX / std::mem::size_of::<T>(),
        })
}

/// `len` zeroed elements of `T` on `stream`'s device, ordered on `stream`.
///
/// # Errors
/// [`Error::Cuda`] when the allocation fails; [`Error::CountOverflow`] for an impossible size.
pub fn alloc_zeros<T: Element>(stream: &Arc<CudaStream>, len: usize) -> Result<CudaSlice<T>> {
    const OP: &str = "alloc_zeros";
    // CUDA refuses empty allocations: an empty buffer keeps one byte it never uses.
    let bytes = stream
        .alloc_zeros::<u8>(bytes_of::<T>(OP, len)?.max(1))
        .map_err(|e| cuda(OP, e))?;
    let ptr = bytes.leak();
    // SAFETY: `ptr` is a live allocation of at least `len * size_of::<T>()` zeroed bytes that `leak`
    // handed over; the new slice owns and frees it. All-zero bytes are a valid `T` (elements are Pod).
    Ok(unsafe { stream.upgrade_device_ptr::<T>(ptr, len) })
}

/// A copy of `host` on `stream`'s device.
///
/// # Errors
/// [`Error::Cuda`] when allocating or copying fails.
pub fn upload<T: Element>(stream: &Arc<CudaStream>, host: &[T]) -> Result<CudaSlice<T>> {
    let mut dev = alloc_zeros::<T>(stream, host.len())?;
    copy_to_device(stream, host, &mut dev)?;
    Ok(dev)
}

/// Copy `host` into `dev` (equal lengths): a [`CudaSlice`], or a `CudaViewMut` of part of one.
///
/// # Errors
/// [`Error::InvalidArgument`] when the lengths differ; [`Error::Cuda`] when the copy fails.
pub fn copy_to_device<T: Element, B: ?Sized + DevicePtrMut<T>>(
    stream: &Arc<CudaStream>,
    host: &[T],
    dev: &mut B,
) -> Result<()> {
    const OP: &str = "copy_to_device";
    let len = DeviceSlice::len(dev);
    crate::check::same_len(OP, "host", host.len(), "device", len)?;
    crate::backend::cuda_common::upload(OP, stream, host, dev, 0..len)?;
    // `host` is the caller's (pageable) memory: the copy must be done before it returns.
    stream.synchronize().map_err(|e| cuda(OP, e))
}

/// A host copy of `dev` (a [`CudaSlice`], or a view of part of one), once the work ordered
/// before it on `stream` is done.
///
/// # Errors
/// [`Error::Cuda`] when the copy fails.
pub fn download<T: Element, B: ?Sized + DevicePtr<T>>(
    stream: &Arc<CudaStream>,
    dev: &B,
) -> Result<Vec<T>> {
    const OP: &str = "download";
    let len = DeviceSlice::len(dev);
    let mut out = vec![T::zeroed(); len];
    crate::backend::cuda_common::download(OP, stream, dev, 0..len, &mut out)?;
    stream.synchronize().map_err(|e| cuda(OP, e))?;
    Ok(out)
}
