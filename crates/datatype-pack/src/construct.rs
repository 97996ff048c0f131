//! Constructors that build a [`Type`] the way MPI derived datatypes and array views describe data.
//!
//! Each validates its arguments and returns a typed [`Error`]; each result has byte
//! bounds that fit an `i64` and a packed size that fits a `u64`, so later arithmetic on it cannot
//! overflow silently.
//!
//! | constructor | describes | counts and strides in |
//! |---|---|---|
//! | [`contiguous`] | `MPI_Type_contiguous` of a basic element | elements |
//! | [`vector`] | `MPI_Type_vector` of a basic element | elements |
//! | [`hvector`] | `MPI_Type_create_hvector` of any [`Type`] | copies; stride in bytes |
//! | [`subarray`] | `MPI_Type_create_subarray`, C or Fortran order | elements |
//! | [`from_strides`] | an array view's shape and strides (ndarray's `shape()`, `strides()`) | elements |
//!
//! No constructor carries MPI's resized extent (explicit lower/upper bounds): a [`Type`] only
//! knows the bytes it selects. Where MPI would place copies of a child one *extent* apart
//! ([`hvector`]'s block length), the child's true extent ([`Type::true_extent`]) is used, which is
//! MPI's extent for every datatype without bound markers or alignment padding. To repeat a
//! subarray (whose MPI extent is the whole array), use [`hvector`] with block length 1 and an
//! explicit stride.

use crate::error::{invalid, overflow, Error, Result};
use crate::ir::{Chain, Level, Type};

/// Storage order of a multi-dimensional array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Row-major: the last dimension varies fastest (`MPI_ORDER_C`).
    C,
    /// Column-major: the first dimension varies fastest (`MPI_ORDER_FORTRAN`).
    Fortran,
}

fn to_i64(op: &'static str, what: &str, v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| overflow(op, format!("{what} {v} exceeds i64")))
}

fn mul_u64(op: &'static str, a: u64, b: u64) -> Result<u64> {
    a.checked_mul(b)
        .ok_or_else(|| overflow(op, format!("{a} x {b} exceeds u64")))
}

fn mul_i64(op: &'static str, a: i64, b: i64) -> Result<i64> {
    a.checked_mul(b)
        .ok_or_else(|| overflow(op, format!("{a} x {b} exceeds i64")))
}

fn nonzero_elem(op: &'static str, elem_size: u64) -> Result<()> {
    if elem_size == 0 {
        return Err(invalid(op, "element size must be at least 1 byte"));
    }
    Ok(())
}

/// Checks that a constructed layout's bounds fit `i64` and its packed size fits `u64`.
fn checked(op: &'static str, t: Type) -> Result<Type> {
    t.packed_size()
        .map_err(|_| overflow(op, "packed size exceeds u64"))?;
    let r = t
        .byte_range()
        .map_err(|_| overflow(op, "byte bounds exceed i128"))?;
    if let Some(r) = r {
        if r.start < i128::from(i64::MIN) || r.end > i128::from(i64::MAX) {
            return Err(overflow(
                op,
                format!("byte bounds {}..{} exceed i64", r.start, r.end),
            ));
        }
    }
    Ok(t)
}

/// `count` contiguous elements of `elem_size` bytes (`MPI_Type_contiguous` of a basic type).
///
/// # Errors
/// [`Error::InvalidArgument`] if `elem_size` is 0; [`Error::Overflow`] if the size in bytes does
/// not fit an `i64`.
pub fn contiguous(elem_size: u64, count: u64) -> Result<Type> {
    const OP: &str = "contiguous";
    nonzero_elem(OP, elem_size)?;
    let extent = mul_u64(OP, elem_size, count)?;
    checked(OP, Type::dense(extent))
}

/// `count` blocks of `blocklen` elements, block starts `stride` elements apart
/// (`MPI_Type_vector` of a basic type of `elem_size` bytes). A negative stride is allowed.
///
/// # Errors
/// [`Error::InvalidArgument`] if `elem_size` is 0; [`Error::Overflow`] if a byte quantity does
/// not fit an `i64`.
pub fn vector(count: u64, blocklen: u64, stride: i64, elem_size: u64) -> Result<Type> {
    const OP: &str = "vector";
    nonzero_elem(OP, elem_size)?;
    let block = mul_u64(OP, blocklen, elem_size)?;
    let stride_bytes = mul_i64(OP, stride, to_i64(OP, "element size", elem_size)?)?;
    checked(OP, Type::stream(count, stride_bytes, Type::dense(block)))
}

/// `count` blocks, block starts `stride_bytes` bytes apart, each block `blocklen` copies of
/// `child` placed one child extent apart (`MPI_Type_create_hvector`).
///
/// The child's extent is its true extent ([`Type::true_extent`]); see the [module docs](self).
///
/// # Errors
/// [`Error::Overflow`] if a byte quantity does not fit an `i64`.
pub fn hvector(count: u64, blocklen: u64, stride_bytes: i64, child: Type) -> Result<Type> {
    const OP: &str = "hvector";
    let block = if blocklen == 1 {
        child
    } else {
        let ext = child
            .true_extent()
            .map_err(|_| overflow(OP, "child extent exceeds u64"))?;
        Type::stream(blocklen, to_i64(OP, "child extent", ext)?, child)
    };
    checked(OP, Type::stream(count, stride_bytes, block))
}

/// A `subsizes` block starting at `starts` inside an array of `sizes` elements of `elem_size`
/// bytes, stored in `order` (`MPI_Type_create_subarray`). The layout is relative to the start of
/// the whole array and packs in the array's storage order.
///
/// Unlike MPI, a zero subsize is accepted and gives the empty layout.
///
/// # Errors
/// * [`Error::InvalidArgument`] if there are no dimensions or `elem_size` is 0;
/// * [`Error::DimensionMismatch`] if `subsizes` or `starts` differ in length from `sizes`;
/// * [`Error::SubarrayOutOfRange`] if `starts[d] + subsizes[d] > sizes[d]` in some dimension;
/// * [`Error::Overflow`] if the array's size in bytes does not fit an `i64`.
pub fn subarray(
    sizes: &[u64],
    subsizes: &[u64],
    starts: &[u64],
    order: Order,
    elem_size: u64,
) -> Result<Type> {
    const OP: &str = "subarray";
    nonzero_elem(OP, elem_size)?;
    if sizes.is_empty() {
        return Err(invalid(OP, "a subarray needs at least one dimension"));
    }
    for (what, list) in [("subsizes", subsizes), ("starts", starts)] {
        if list.len() != sizes.len() {
            return Err(Error::DimensionMismatch {
                op: OP,
                what,
                expected: sizes.len(),
                found: list.len(),
            });
        }
    }
    for dim in 0..sizes.len() {
        let (size, subsize, start) = (sizes[dim], subsizes[dim], starts[dim]);
        if !matches!(start.checked_add(subsize), Some(end) if end <= size) {
            return Err(Error::SubarrayOutOfRange {
                op: OP,
                dim,
                size,
                subsize,
                start,
            });
        }
    }
    // Dimensions from fastest to slowest varying.
    let mut fast_first: Vec<usize> = (0..sizes.len()).collect();
    if order == Order::C {
        fast_first.reverse();
    }
    // Byte stride of each dimension, fastest first; the whole array must fit i64.
    let mut stride = elem_size;
    let mut offset: i64 = 0;
    let mut levels = Vec::with_capacity(sizes.len());
    for (k, &d) in fast_first.iter().enumerate() {
        let s = to_i64(OP, "stride", stride)?;
        offset = offset
            .checked_add(mul_i64(OP, to_i64(OP, "start", starts[d])?, s)?)
            .ok_or_else(|| overflow(OP, "start offset exceeds i64"))?;
        if k > 0 {
            levels.push(Level::new(s, subsizes[d]));
        }
        stride = mul_u64(OP, stride, sizes[d])?;
    }
    to_i64(OP, "array size in bytes", stride)?;
    levels.reverse(); // outermost (slowest) first
    let dense = mul_u64(OP, subsizes[fast_first[0]], elem_size)?;
    let t = Chain {
        streams: levels,
        dense_offset: 0,
        dense_extent: dense,
    }
    .into_type()
    .with_offset(offset);
    checked(OP, t)
}

/// The elements of an array view with `shape` and `strides` (in elements, as ndarray's
/// `shape()` and `strides()` give them), each `elem_size` bytes, packed in the view's logical
/// (row-major) order. The layout is relative to the view's first element (`as_ptr()`).
///
/// An empty `shape` is a 0-dimensional view of one element; a zero-length dimension gives the
/// empty layout. Negative strides are described faithfully (the layout then reaches bytes
/// before the first element, so displace it by the view's offset in its allocation before
/// planning it); plans carry them as reversed dimensions, see [`crate::plan`].
///
/// # Errors
/// * [`Error::InvalidArgument`] if `elem_size` is 0;
/// * [`Error::DimensionMismatch`] if `strides` and `shape` differ in length;
/// * [`Error::Overflow`] if a byte quantity does not fit an `i64`.
pub fn from_strides(shape: &[usize], strides: &[isize], elem_size: usize) -> Result<Type> {
    const OP: &str = "from_strides";
    let elem = elem_size as u64;
    nonzero_elem(OP, elem)?;
    if strides.len() != shape.len() {
        return Err(Error::DimensionMismatch {
            op: OP,
            what: "strides",
            expected: shape.len(),
            found: strides.len(),
        });
    }
    let e = to_i64(OP, "element size", elem)?;
    let mut levels = Vec::with_capacity(shape.len());
    for (&n, &s) in shape.iter().zip(strides) {
        levels.push(Level::new(mul_i64(OP, s as i64, e)?, n as u64));
    }
    let chain = Chain {
        streams: levels,
        dense_offset: 0,
        dense_extent: elem,
    };
    checked(OP, chain.into_type())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_is_one_dense_block() {
        assert_eq!(contiguous(8, 10).unwrap(), Type::dense(80));
        assert!(matches!(
            contiguous(0, 10),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            contiguous(1 << 40, 1 << 40),
            Err(Error::Overflow { .. })
        ));
    }

    #[test]
    fn vector_in_bytes() {
        assert_eq!(
            vector(3, 2, 5, 4).unwrap(),
            Type::stream(3, 20, Type::dense(8))
        );
        assert_eq!(
            vector(3, 2, -5, 4).unwrap().byte_range().unwrap(),
            Some(-40..8)
        );
    }

    #[test]
    fn hvector_blocks_use_the_child_extent() {
        let child = vector(2, 1, 3, 4).unwrap(); // bytes 0..4 and 12..16: extent 16
        let t = hvector(2, 3, 100, child.clone()).unwrap();
        assert_eq!(t, Type::stream(2, 100, Type::stream(3, 16, child.clone())));
        assert_eq!(
            hvector(2, 1, 100, child.clone()).unwrap(),
            Type::stream(2, 100, child)
        );
    }

    #[test]
    fn subarray_c_and_fortran() {
        // 4 x 5 array of 8-byte elements, rows 1..3, columns 2..5.
        let c = subarray(&[4, 5], &[2, 3], &[1, 2], Order::C, 8).unwrap();
        assert_eq!(c, Type::stream(2, 40, Type::dense(24)).with_offset(56));
        // Same array in Fortran order: dimension 0 is fastest.
        let f = subarray(&[4, 5], &[2, 3], &[1, 2], Order::Fortran, 8).unwrap();
        assert_eq!(f, Type::stream(3, 32, Type::dense(16)).with_offset(8 + 64));
    }

    #[test]
    fn subarray_validation() {
        assert!(matches!(
            subarray(&[4, 5], &[2, 4], &[1, 2], Order::C, 8),
            Err(Error::SubarrayOutOfRange {
                dim: 1,
                size: 5,
                subsize: 4,
                start: 2,
                ..
            })
        ));
        assert!(matches!(
            subarray(&[4, 5], &[2], &[1, 2], Order::C, 8),
            Err(Error::DimensionMismatch {
                what: "subsizes",
                expected: 2,
                found: 1,
                ..
            })
        ));
        assert!(matches!(
            subarray(&[4], &[2], &[1, 2], Order::C, 8),
            Err(Error::DimensionMismatch { what: "starts", .. })
        ));
        assert!(matches!(
            subarray(&[], &[], &[], Order::C, 8),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            subarray(&[4], &[1], &[u64::MAX], Order::C, 8),
            Err(Error::SubarrayOutOfRange { .. })
        ));
        assert!(matches!(
            subarray(&[1 << 40, 1 << 40], &[1, 1], &[0, 0], Order::C, 8),
            Err(Error::Overflow { .. })
        ));
        assert!(subarray(&[4, 5], &[0, 3], &[4, 2], Order::C, 8)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn from_strides_cases() {
        // A 0-d view is one element.
        assert_eq!(from_strides(&[], &[], 8).unwrap(), Type::dense(8));
        // A zero-length dimension is empty.
        assert!(from_strides(&[3, 0], &[4, 1], 8).unwrap().is_empty());
        // Transposed 2 x 3 view of a 3 x 2 C array.
        assert_eq!(
            from_strides(&[2, 3], &[1, 2], 4).unwrap(),
            Type::stream(2, 4, Type::stream(3, 8, Type::dense(4)))
        );
        assert!(matches!(
            from_strides(&[2, 3], &[1], 4),
            Err(Error::DimensionMismatch { .. })
        ));
        assert!(matches!(
            from_strides(&[2], &[isize::MAX], 4),
            Err(Error::Overflow { .. })
        ));
    }
}
