//! Where a communicator's buffers live: the [`Buffer`] trait the argument checks measure, and the
//! memory spaces ([`Host`], [`Device`]) that name each backend's buffer type.
//!
//! A communicator says where its buffers live through
//! [`Communicator::Memory`](crate::Communicator::Memory), and every operation takes
//! [`Buf<C, T>`](crate::comm::Buf), the buffer type of that space for elements `T`: `[T]` on
//! [`Host`], device memory on [`Device`]. Because the space is a plain type, code generic over
//! every host backend names it once and the element type of each call is inferred from the
//! buffers:
//!
//! ```
//! use collectives_core::{Communicator, Host, ReduceOp, Result};
//!
//! /// The global dot product of two distributed vectors, on any host backend.
//! fn dot<C: Communicator<Memory = Host>>(comm: &C, x: &[f64], y: &[f64]) -> Result<f64> {
//!     let local: f64 = x.iter().zip(y).map(|(a, b)| a * b).sum();
//!     let mut global = [0.0];
//!     comm.all_reduce(&[local], &mut global, ReduceOp::Sum)?;
//!     Ok(global[0])
//! }
//! ```

use crate::element::Element;

/// A buffer whose length in elements is known: what the argument checks measure.
pub trait Buffer<T: Element> {
    /// Number of elements.
    fn len(&self) -> usize;
    /// Whether the buffer holds no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The CUDA device the buffer lives on; `None` for host memory.
    fn device(&self) -> Option<usize> {
        None
    }
}

impl<T: Element> Buffer<T> for [T] {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
}

#[cfg(feature = "nccl")]
impl<T: Element> Buffer<T> for cudarc::driver::CudaSlice<T> {
    fn len(&self) -> usize {
        cudarc::driver::CudaSlice::len(self)
    }
    fn device(&self) -> Option<usize> {
        Some(self.ordinal())
    }
}

/// A memory space: the buffer type its communicators take for elements `T`.
pub trait Space {
    /// The buffer type for elements `T`.
    type Buf<T: Element>: ?Sized + Buffer<T>;
}

/// Host memory: buffers are slices `[T]` (a `&Vec<T>` or `&[T; N]` coerces to one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host;

impl Space for Host {
    type Buf<T: Element> = [T];
}

/// CUDA device memory: buffers are cudarc's [`CudaSlice`](cudarc::driver::CudaSlice), on the
/// communicator's device.
#[cfg(feature = "nccl")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device;

#[cfg(feature = "nccl")]
impl Space for Device {
    type Buf<T: Element> = cudarc::driver::CudaSlice<T>;
}
