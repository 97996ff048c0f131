//! The `-d/--datatype` names (nccl-tests' names plus `complex64` and `complex128`) and the dispatch
//! from a name to the Rust element type.

use half::{bf16, f16};
use num_complex::Complex;

use crate::measure::expected::BenchElement;

/// An element type, by its nccl-tests name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum DataType {
    /// `i8`
    Int8,
    /// `u8`
    Uint8,
    /// `i32`
    Int32,
    /// `u32`
    Uint32,
    /// `i64`
    Int64,
    /// `u64`
    Uint64,
    /// `f16`
    Half,
    /// `f32`
    Float,
    /// `f64`
    Double,
    /// `bf16`
    Bfloat16,
    /// `Complex<f32>` (an extension of nccl-tests' names)
    Complex64,
    /// `Complex<f64>` (an extension of nccl-tests' names)
    Complex128,
}

impl DataType {
    /// Every type, in the order `-d all` runs them (nccl-tests' order, then the complex types).
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Half,
        DataType::Float,
        DataType::Double,
        DataType::Bfloat16,
        DataType::Complex64,
        DataType::Complex128,
    ];

    /// The name in the `type` column and in `-d`.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Half => "half",
            DataType::Float => "float",
            DataType::Double => "double",
            DataType::Bfloat16 => "bfloat16",
            DataType::Complex64 => "complex64",
            DataType::Complex128 => "complex128",
        }
    }

    /// Call `v` with the Rust type of this data type.
    pub fn visit<V: ElementVisitor>(self, v: V) -> V::Output {
        match self {
            DataType::Int8 => v.visit::<i8>(self),
            DataType::Uint8 => v.visit::<u8>(self),
            DataType::Int32 => v.visit::<i32>(self),
            DataType::Uint32 => v.visit::<u32>(self),
            DataType::Int64 => v.visit::<i64>(self),
            DataType::Uint64 => v.visit::<u64>(self),
            DataType::Half => v.visit::<f16>(self),
            DataType::Float => v.visit::<f32>(self),
            DataType::Double => v.visit::<f64>(self),
            DataType::Bfloat16 => v.visit::<bf16>(self),
            DataType::Complex64 => v.visit::<Complex<f32>>(self),
            DataType::Complex128 => v.visit::<Complex<f64>>(self),
        }
    }
}

/// Code generic over the element type, run for a [`DataType`] chosen at run time.
pub trait ElementVisitor {
    /// What the visit returns.
    type Output;
    /// Run with `T`, the Rust type of `dtype`.
    fn visit<T: BenchElement>(self, dtype: DataType) -> Self::Output;
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Facts;
    impl ElementVisitor for Facts {
        type Output = (&'static str, usize, usize);
        fn visit<T: BenchElement>(self, _: DataType) -> Self::Output {
            (
                T::WIRE.dtype.name(),
                T::WIRE.lanes,
                std::mem::size_of::<T>(),
            )
        }
    }

    #[test]
    fn real_names_are_the_wire_names_and_complex_is_two_lanes() {
        for d in DataType::ALL {
            let (wire, lanes, size) = d.visit(Facts);
            match d {
                DataType::Complex64 => assert_eq!((wire, lanes, size), ("float", 2, 8)),
                DataType::Complex128 => assert_eq!((wire, lanes, size), ("double", 2, 16)),
                _ => assert_eq!((wire, lanes), (d.name(), 1)),
            }
        }
    }

    #[test]
    fn clap_names_match() {
        use clap::ValueEnum;
        for d in DataType::ALL {
            assert_eq!(d.to_possible_value().unwrap().get_name(), d.name());
            assert_eq!(DataType::from_str(d.name(), false), Ok(d));
        }
    }
}
