//! Element types: what may travel through a collective, and how.
//!
//! An [`Element`] knows three things about itself:
//! - its **wire form** for NCCL, `{dtype, lanes}`: NCCL has no complex type, so a `Complex<f64>` travels as
//!   two lanes of `f64` and an NCCL count is `2 x len`;
//! - its **MPI datatype** (through rsmpi's [`Equivalence`]): complex numbers use MPI's own complex types, so
//!   MPI multiplies them correctly; `f16`/`bf16` have no standard MPI type and travel as 16-bit words, which
//!   is exact for moving data but meaningless for arithmetic, so MPI reductions on them are refused;
//! - its [`ElementKind`], from which [`crate::op`] decides which [`ReduceOp`](crate::ReduceOp)s each backend
//!   can do with it.

use std::fmt;

use bytemuck::Pod;
use half::{bf16, f16};
use mpi::datatype::Equivalence;
use num_complex::Complex;

/// A scalar type on NCCL's wire (`ncclDataType_t`).
///
/// The discriminants are NCCL's own codes (stable since NCCL 2.0; `Bf16` since 2.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// `ncclInt8`
    I8 = 0,
    /// `ncclUint8`
    U8 = 1,
    /// `ncclInt32`
    I32 = 2,
    /// `ncclUint32`
    U32 = 3,
    /// `ncclInt64`
    I64 = 4,
    /// `ncclUint64`
    U64 = 5,
    /// `ncclFloat16`
    F16 = 6,
    /// `ncclFloat32`
    F32 = 7,
    /// `ncclFloat64`
    F64 = 8,
    /// `ncclBfloat16`
    Bf16 = 9,
}

impl DType {
    /// Size of one value of this type, in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::F16 | DType::Bf16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// NCCL's `ncclDataType_t` code of this type.
    pub const fn nccl_code(self) -> i32 {
        self as i32
    }

    /// Short name, as in nccl-tests' `type` column (`float`, `double`, `int32`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::I32 => "int32",
            DType::U32 => "uint32",
            DType::I64 => "int64",
            DType::U64 => "uint64",
            DType::F16 => "half",
            DType::F32 => "float",
            DType::F64 => "double",
            DType::Bf16 => "bfloat16",
        }
    }
}

/// How an element travels through NCCL: `lanes` consecutive values of `dtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WireForm {
    /// The scalar type on the wire.
    pub dtype: DType,
    /// How many scalars make one element (2 for complex numbers, else 1).
    pub lanes: usize,
}

impl WireForm {
    /// Number of wire scalars for `len` elements, or `None` on overflow.
    pub const fn wire_count(self, len: usize) -> Option<usize> {
        len.checked_mul(self.lanes)
    }
}

/// The arithmetic family of an element; decides which reductions are meaningful.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementKind {
    /// Signed or unsigned integers.
    Integer,
    /// `f32` and `f64`.
    Float,
    /// `f16` and `bf16`: no standard MPI type.
    HalfFloat,
    /// `Complex<f32>` and `Complex<f64>`: two lanes of their real type on NCCL.
    Complex,
}

/// Keeps [`Element`] implemented by this crate's types only.
mod sealed {
    /// Implemented for the element types of this crate, and nothing else.
    pub trait Sealed {}
}

/// A type that collectives can move and reduce.
///
/// The trait is sealed: the implementations are the twelve types listed in the crate documentation
/// (`i8, u8, i32, u32, i64, u64, f16, bf16, f32, f64, Complex<f32>, Complex<f64>`), and no other crate
/// can add one. Every piece an element needs is stated by each implementation, none taken from a
/// default: an element that `Avg` divides must divide, and one that cannot be divided is refused
/// `Avg` by [`crate::op`] before any call.
///
/// # Safety
/// An implementation promises that
/// - `Self` is plain data ([`Pod`]) whose bytes are exactly `WIRE.lanes` consecutive values of
///   `WIRE.dtype` (so `size_of::<Self>() == WIRE.lanes * WIRE.dtype.size()`);
/// - `Self::Mpi` has the same size and bit layout as `Self`, and its MPI datatype describes those bytes
///   (MPI reads and writes `Self` values through it);
/// - `KIND` tells the truth about the arithmetic, since reductions are allowed or refused from it.
///
/// The implementations in this crate check the size equalities at compile time.
pub unsafe trait Element:
    sealed::Sealed + Pod + Send + Sync + fmt::Debug + PartialEq + 'static
{
    /// Name used in messages and in benchmark output (`f32`, `complex<f64>`, ...).
    const NAME: &'static str;
    /// NCCL wire form.
    const WIRE: WireForm;
    /// Arithmetic family.
    const KIND: ElementKind;
    /// The type whose MPI datatype describes `Self` on the wire.
    type Mpi: Equivalence;

    /// A stable code for the element type, used to check that ranks agree on it.
    fn type_code() -> i64 {
        Self::WIRE.dtype.nccl_code() as i64 * 16 + Self::WIRE.lanes as i64
    }

    /// Divide every element by `n`, the last step of an average computed as a sum.
    ///
    /// Only called for kinds on which [`crate::op`] allows `Avg` through a sum (floats and complex);
    /// integers and 16-bit floats, which MPI cannot average, leave `buf` as it is.
    #[doc(hidden)]
    fn divide_all(buf: &mut [Self], n: usize);
}

/// The element name for a [`Element::type_code`], for messages about ranks that disagree.
pub fn type_name_of_code(code: i64) -> String {
    const ALL: [(i64, &str); 12] = [
        (code_of::<i8>(), i8::NAME),
        (code_of::<u8>(), u8::NAME),
        (code_of::<i32>(), i32::NAME),
        (code_of::<u32>(), u32::NAME),
        (code_of::<i64>(), i64::NAME),
        (code_of::<u64>(), u64::NAME),
        (code_of::<f16>(), f16::NAME),
        (code_of::<bf16>(), bf16::NAME),
        (code_of::<f32>(), f32::NAME),
        (code_of::<f64>(), f64::NAME),
        (code_of::<Complex<f32>>(), <Complex<f32>>::NAME),
        (code_of::<Complex<f64>>(), <Complex<f64>>::NAME),
    ];
    ALL.iter()
        .find(|(c, _)| *c == code)
        .map(|(_, n)| (*n).to_string())
        .unwrap_or_else(|| format!("type code {code}"))
}

const fn code_of<T: Element>() -> i64 {
    T::WIRE.dtype.nccl_code() as i64 * 16 + T::WIRE.lanes as i64
}

macro_rules! element {
    ($t:ty, $name:literal, $dtype:ident, $lanes:literal, $kind:ident, $mpi:ty, $real:ty) => {
        // SAFETY: the compile-time assertions below check the size equalities; `$t` is laid out as
        // `$lanes` values of `$dtype` (num-complex's `Complex` is `#[repr(C)] {re, im}`), `$mpi` is
        // `$t` itself or a same-size integer used only to move bytes, and `$kind` is its arithmetic.
        unsafe impl Element for $t {
            const NAME: &'static str = $name;
            const WIRE: WireForm = WireForm { dtype: DType::$dtype, lanes: $lanes };
            const KIND: ElementKind = ElementKind::$kind;
            type Mpi = $mpi;
            element!(@divide $kind $real);
        }
        const _: () = assert!(std::mem::size_of::<$t>() == $lanes * DType::$dtype.size());
        const _: () = assert!(std::mem::size_of::<$t>() == std::mem::size_of::<$mpi>());
        impl sealed::Sealed for $t {}
    };
    (@divide Float $real:ty) => {
        fn divide_all(buf: &mut [Self], n: usize) {
            let d = n as $real;
            buf.iter_mut().for_each(|x| *x /= d);
        }
    };
    (@divide Complex $real:ty) => {
        fn divide_all(buf: &mut [Self], n: usize) {
            let d = n as $real;
            buf.iter_mut().for_each(|x| *x /= d);
        }
    };
    (@divide $other:ident $real:ty) => {
        fn divide_all(_: &mut [Self], _: usize) {
            // Never called: `Avg` through a sum is refused for this kind (crate::op).
        }
    };
}

element!(i8, "i8", I8, 1, Integer, i8, i8);
element!(u8, "u8", U8, 1, Integer, u8, u8);
element!(i32, "i32", I32, 1, Integer, i32, i32);
element!(u32, "u32", U32, 1, Integer, u32, u32);
element!(i64, "i64", I64, 1, Integer, i64, i64);
element!(u64, "u64", U64, 1, Integer, u64, u64);
element!(f16, "f16", F16, 1, HalfFloat, u16, u16);
element!(bf16, "bf16", Bf16, 1, HalfFloat, u16, u16);
element!(f32, "f32", F32, 1, Float, f32, f32);
element!(f64, "f64", F64, 1, Float, f64, f64);
element!(
    Complex<f32>,
    "complex<f32>",
    F32,
    2,
    Complex,
    Complex<f32>,
    f32
);
element!(
    Complex<f64>,
    "complex<f64>",
    F64,
    2,
    Complex,
    Complex<f64>,
    f64
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complex_travels_as_two_lanes_of_its_real_type() {
        assert_eq!(
            <Complex<f64>>::WIRE,
            WireForm {
                dtype: DType::F64,
                lanes: 2
            }
        );
        assert_eq!(
            <Complex<f32>>::WIRE,
            WireForm {
                dtype: DType::F32,
                lanes: 2
            }
        );
        assert_eq!(<Complex<f64>>::WIRE.wire_count(10), Some(20));
        assert_eq!(f64::WIRE.wire_count(10), Some(10));
        assert_eq!(<Complex<f64>>::WIRE.wire_count(usize::MAX), None);
    }

    #[test]
    fn nccl_codes_match_nccl_h() {
        // Values of ncclDataType_t in nccl.h.
        let expected = [
            (DType::I8, 0),
            (DType::U8, 1),
            (DType::I32, 2),
            (DType::U32, 3),
            (DType::I64, 4),
            (DType::U64, 5),
            (DType::F16, 6),
            (DType::F32, 7),
            (DType::F64, 8),
            (DType::Bf16, 9),
        ];
        for (d, code) in expected {
            assert_eq!(d.nccl_code(), code, "{d:?}");
        }
    }

    #[test]
    fn type_codes_are_distinct_and_named() {
        let codes = [
            i8::type_code(),
            u8::type_code(),
            i32::type_code(),
            u32::type_code(),
            i64::type_code(),
            u64::type_code(),
            f16::type_code(),
            bf16::type_code(),
            f32::type_code(),
            f64::type_code(),
            <Complex<f32>>::type_code(),
            <Complex<f64>>::type_code(),
        ];
        let mut sorted = codes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), codes.len());
        assert_eq!(
            type_name_of_code(<Complex<f64>>::type_code()),
            "complex<f64>"
        );
        assert_eq!(type_name_of_code(f32::type_code()), "f32");
        assert_eq!(type_name_of_code(-7), "type code -7");
    }

    #[test]
    fn divide_all_averages_floats_and_complex() {
        let mut v = [2.0f64, 4.0, -6.0];
        f64::divide_all(&mut v, 2);
        assert_eq!(v, [1.0, 2.0, -3.0]);
        let mut c = [Complex::new(3.0f32, -6.0)];
        <Complex<f32>>::divide_all(&mut c, 3);
        assert_eq!(c, [Complex::new(1.0, -2.0)]);
    }
}
