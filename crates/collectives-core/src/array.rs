//! ndarray arrays as host buffers.
//!
//! Host backends take `[T]`. An ndarray array or view whose elements are contiguous in standard (row-major)
//! order is such a slice; any other layout (a transposed view, a column, a strided slice) is refused with
//! an error naming the fix, rather than sent in an order the receiver does not expect.
//!
//! ```
//! use collectives_core::HostArray;
//! use ndarray::{s, Array2};
//!
//! let a = Array2::<f64>::zeros((4, 3));
//! assert_eq!(a.host_slice().unwrap().len(), 12);
//! assert!(a.t().host_slice().is_err()); // transposed: not row-major
//! assert!(a.slice(s![.., 1]).host_slice().is_err()); // a strided column
//! ```

use ndarray::{ArrayBase, Data, DataMut, Dimension};

use crate::element::Element;
use crate::error::{Error, Result};

fn not_contiguous(shape: &[usize], strides: &[isize]) -> Error {
    Error::invalid(
        "host_slice",
        format!(
            "array of shape {shape:?} with strides {strides:?} is not contiguous in row-major order; \
             pass `.as_standard_layout()` (copies only when needed) or an owned `.to_owned()` copy, and \
             for a result array write into a contiguous array and assign it back"
        ),
    )
}

/// Borrow an array's elements as a host slice, when they are contiguous in row-major order.
pub trait HostArray<T: Element> {
    /// The elements as a slice.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the array is not contiguous in row-major order.
    fn host_slice(&self) -> Result<&[T]>;
}

/// Borrow an array's elements as a mutable host slice, when they are contiguous in row-major order.
pub trait HostArrayMut<T: Element> {
    /// The elements as a mutable slice.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the array is not contiguous in row-major order.
    fn host_slice_mut(&mut self) -> Result<&mut [T]>;
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> HostArray<T> for ArrayBase<S, D> {
    fn host_slice(&self) -> Result<&[T]> {
        self.as_slice()
            .ok_or_else(|| not_contiguous(self.shape(), self.strides()))
    }
}

impl<T: Element, S: DataMut<Elem = T>, D: Dimension> HostArrayMut<T> for ArrayBase<S, D> {
    fn host_slice_mut(&mut self) -> Result<&mut [T]> {
        let (shape, strides) = (self.shape().to_vec(), self.strides().to_vec());
        self.as_slice_mut()
            .ok_or_else(|| not_contiguous(&shape, &strides))
    }
}

#[cfg(test)]
mod tests {
    use ndarray::{s, Array3};

    use super::*;

    #[test]
    fn contiguous_views_are_slices() {
        let mut a = Array3::<i32>::zeros((2, 3, 4));
        a.host_slice_mut().unwrap()[5] = 7;
        assert_eq!(a[[0, 1, 1]], 7);
        assert_eq!(a.slice(s![1, .., ..]).host_slice().unwrap().len(), 12);
    }

    #[test]
    fn non_contiguous_views_name_the_fix() {
        let mut a = Array3::<f32>::zeros((2, 3, 4));
        let e = a.slice(s![.., .., 1..3]).host_slice().unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("as_standard_layout"), "{msg}");
        assert!(msg.contains("[2, 3, 2]"), "{msg}");
        assert!(a.slice_mut(s![.., 0, ..]).host_slice_mut().is_err());
        let std = a
            .slice(s![.., .., 1..3])
            .as_standard_layout()
            .host_slice()
            .map(<[f32]>::len);
        assert_eq!(std, Ok(12));
    }
}
