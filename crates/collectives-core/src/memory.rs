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

#[cfg(feature = "cuda")]
mod device {
    use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice};

    use super::Buffer;
    use crate::element::Element;

    macro_rules! device_buffer {
        ($($ty:ty),*) => {$(
            impl<T: Element> Buffer<T> for $ty {
                fn len(&self) -> usize {
                    DeviceSlice::len(self)
                }
                fn device(&self) -> Option<usize> {
                    Some(self.stream().context().ordinal())
                }
            }
        )*};
    }
    device_buffer!(
        CudaSlice<T>,
        CudaView<'_, T>,
        CudaViewMut<'_, T>,
        dyn DeviceBuffer<T> + '_,
        dyn DeviceBufferMut<T> + '_
    );

    /// Device memory an operation reads: cudarc's [`CudaSlice`], [`CudaView`] (part of one, from
    /// `slice(range)`) and [`CudaViewMut`], and this crate's registered buffers
    /// ([`NcclBuffer`](crate::NcclBuffer)): anything that is cudarc's [`DevicePtr`], whose
    /// `device_ptr` orders the read after the memory's last write where cudarc tracks it.
    ///
    /// A `&CudaSlice<T>` coerces to `&dyn DeviceBuffer<T>` where an operation takes one; inside an
    /// `Option` (the send buffer of a rooted collective) it does not, and
    /// [`as_buf`](Self::as_buf) makes the conversion: `is_root.then_some(send.as_buf())`.
    pub trait DeviceBuffer<T: Element>: DevicePtr<T> {
        /// This buffer as the type operations read.
        fn as_buf(&self) -> &dyn DeviceBuffer<T>
        where
            Self: Sized,
        {
            self
        }
    }
    impl<T: Element, B: ?Sized + DevicePtr<T>> DeviceBuffer<T> for B {}

    /// Device memory an operation writes: [`CudaSlice`], [`CudaViewMut`] (from `slice_mut(range)`)
    /// and registered buffers; not a read-only [`CudaView`].
    ///
    /// A `&mut CudaSlice<T>` coerces to `&mut dyn DeviceBufferMut<T>`; inside an `Option` (the
    /// receive buffer of a rooted collective) [`as_buf_mut`](Self::as_buf_mut) converts it:
    /// `is_root.then_some(recv.as_buf_mut())`.
    pub trait DeviceBufferMut<T: Element>: DeviceBuffer<T> + DevicePtrMut<T> {
        /// This buffer as the type operations write.
        fn as_buf_mut(&mut self) -> &mut dyn DeviceBufferMut<T>
        where
            Self: Sized,
        {
            self
        }
    }
    impl<T: Element, B: ?Sized + DevicePtr<T> + DevicePtrMut<T>> DeviceBufferMut<T> for B {}
}

#[cfg(feature = "cuda")]
pub use device::{DeviceBuffer, DeviceBufferMut};

/// cudarc's device-slice traits for a type that owns a `CudaSlice<T>` in field `$field` (a
/// buffer of this crate with its own allocation or registration): what makes it a
/// [`DeviceBufferMut`].
#[cfg(feature = "cuda")]
macro_rules! forward_device_slice {
    ($ty:ty, $field:ident) => {
        impl<T> cudarc::driver::DeviceSlice<T> for $ty {
            fn len(&self) -> usize {
                self.$field.len()
            }
            fn stream(&self) -> &std::sync::Arc<cudarc::driver::CudaStream> {
                self.$field.stream()
            }
        }
        impl<T> cudarc::driver::DevicePtr<T> for $ty {
            fn device_ptr<'a>(
                &'a self,
                stream: &'a cudarc::driver::CudaStream,
            ) -> (
                cudarc::driver::sys::CUdeviceptr,
                cudarc::driver::SyncOnDrop<'a>,
            ) {
                self.$field.device_ptr(stream)
            }
        }
        impl<T> cudarc::driver::DevicePtrMut<T> for $ty {
            fn device_ptr_mut<'a>(
                &'a mut self,
                stream: &'a cudarc::driver::CudaStream,
            ) -> (
                cudarc::driver::sys::CUdeviceptr,
                cudarc::driver::SyncOnDrop<'a>,
            ) {
                self.$field.device_ptr_mut(stream)
            }
        }
    };
}
#[cfg(feature = "cuda")]
pub(crate) use forward_device_slice;

/// A device buffer as the device backends read it, borrowed for `'b`.
#[cfg(feature = "cuda")]
pub(crate) type Dev<'b, T> = dyn DeviceBuffer<T> + 'b;
/// A device buffer as the device backends write it, borrowed for `'b`.
#[cfg(feature = "cuda")]
pub(crate) type DevMut<'b, T> = dyn DeviceBufferMut<T> + 'b;

/// A memory space: the buffer types its communicators take for elements `T`, one to read
/// (`Buf`) and one to write (`BufMut`), each borrowing memory for `'b`.
pub trait Space {
    /// What an operation reads (a send buffer).
    type Buf<'b, T: Element>: ?Sized + Buffer<T> + 'b;
    /// What an operation writes (a receive buffer, or one used in place).
    type BufMut<'b, T: Element>: ?Sized + Buffer<T> + 'b;

    /// A writable buffer, to read.
    fn read<'a, 'b, T: Element>(buf: &'a Self::BufMut<'b, T>) -> &'a Self::Buf<'b, T>;
    /// `buf` as a buffer of the shorter borrow `'s` (what an operation in a scope keeps).
    fn shorten<'s, 'b, T: Element>(buf: &'s Self::Buf<'b, T>) -> &'s Self::Buf<'s, T>
    where
        Self::Buf<'b, T>: 's;
    /// `buf` as a writable buffer of the shorter borrow `'s`.
    fn shorten_mut<'s, 'b, T: Element>(
        buf: &'s mut Self::BufMut<'b, T>,
    ) -> &'s mut Self::BufMut<'s, T>
    where
        Self::BufMut<'b, T>: 's;
}

/// `Space` for `$space` with buffer types `$buf` and `$buf_mut`, whose conversions are the
/// language's own (a reborrow on the host; an upcast or a shorter object lifetime on a device).
macro_rules! space {
    ($space:ty, $buf:ty, $buf_mut:ty) => {
        impl Space for $space {
            type Buf<'b, T: Element> = $buf;
            type BufMut<'b, T: Element> = $buf_mut;

            fn read<'a, 'b, T: Element>(buf: &'a Self::BufMut<'b, T>) -> &'a Self::Buf<'b, T> {
                buf
            }
            fn shorten<'s, 'b, T: Element>(buf: &'s Self::Buf<'b, T>) -> &'s Self::Buf<'s, T>
            where
                Self::Buf<'b, T>: 's,
            {
                buf
            }
            fn shorten_mut<'s, 'b, T: Element>(
                buf: &'s mut Self::BufMut<'b, T>,
            ) -> &'s mut Self::BufMut<'s, T>
            where
                Self::BufMut<'b, T>: 's,
            {
                buf
            }
        }
    };
}

/// Host memory: buffers are slices `[T]` (a `&Vec<T>` or `&[T; N]` coerces to one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host;

space!(Host, [T], [T]);

/// CUDA device memory, on the communicator's device: an operation reads any
/// [`DeviceBuffer`] (a `&CudaSlice<T>`, or a `&CudaView<T>` of part of one, coerces to it) and
/// writes any [`DeviceBufferMut`] (a `&mut CudaSlice<T>` or `&mut CudaViewMut<T>`).
#[cfg(feature = "cuda")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device;

#[cfg(feature = "cuda")]
space!(
    Device,
    dyn DeviceBuffer<T> + 'b,
    dyn DeviceBufferMut<T> + 'b
);
