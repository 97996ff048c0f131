//! NumPy dtypes to the library's element types, decided at run time from the buffer's format
//! string, and the one macro that calls a generic function for the element found.

use std::ffi::CStr;

/// An element type of the library that a Python buffer can hold (`bf16` has no NumPy dtype or
/// buffer format, so it is not reachable from Python).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    /// `int8` (`b`)
    I8,
    /// `uint8` (`B`)
    U8,
    /// `int32` (`i`, or `l` where a C long is 4 bytes)
    I32,
    /// `uint32`
    U32,
    /// `int64` (`q`, or `l` where a C long is 8 bytes)
    I64,
    /// `uint64`
    U64,
    /// `float16` (`e`)
    F16,
    /// `float32` (`f`)
    F32,
    /// `float64` (`d`)
    F64,
    /// `complex64` (`Zf`)
    C64,
    /// `complex128` (`Zd`)
    C128,
}

/// The NumPy dtypes the module takes, for messages.
pub const SUPPORTED: &str = "int8, uint8, int32, uint32, int64, uint64, float16, float32, \
                             float64, complex64, complex128";

impl Elem {
    /// The element of a buffer with struct-module format `format` and item size `itemsize`, or
    /// `None` when the library has no such element (bool, int16, byte-swapped data, records, ...).
    pub fn from_format(format: &CStr, itemsize: usize) -> Option<Elem> {
        let mut f = format.to_bytes();
        // Native or explicitly little-endian order (every platform the library runs on is
        // little-endian); `>`/`!` (byte-swapped) stay unmatched.
        if let [b'@' | b'=' | b'<' | b'|', rest @ ..] = f {
            f = rest;
        }
        let elem = match f {
            b"b" => Elem::I8,
            b"B" => Elem::U8,
            b"i" | b"l" | b"q" if itemsize == 4 => Elem::I32,
            b"I" | b"L" | b"Q" if itemsize == 4 => Elem::U32,
            b"i" | b"l" | b"q" | b"n" if itemsize == 8 => Elem::I64,
            b"I" | b"L" | b"Q" | b"N" if itemsize == 8 => Elem::U64,
            b"e" => Elem::F16,
            b"f" => Elem::F32,
            b"d" => Elem::F64,
            b"Zf" => Elem::C64,
            b"Zd" => Elem::C128,
            _ => return None,
        };
        (elem.size() == itemsize).then_some(elem)
    }

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 => 1,
            Elem::F16 => 2,
            Elem::I32 | Elem::U32 | Elem::F32 => 4,
            Elem::I64 | Elem::U64 | Elem::F64 | Elem::C64 => 8,
            Elem::C128 => 16,
        }
    }

    /// NumPy's name of the dtype, to allocate result arrays with.
    pub const fn numpy_name(self) -> &'static str {
        match self {
            Elem::I8 => "int8",
            Elem::U8 => "uint8",
            Elem::I32 => "int32",
            Elem::U32 => "uint32",
            Elem::I64 => "int64",
            Elem::U64 => "uint64",
            Elem::F16 => "float16",
            Elem::F32 => "float32",
            Elem::F64 => "float64",
            Elem::C64 => "complex64",
            Elem::C128 => "complex128",
        }
    }

    /// Index into per-element tables (the cached NumPy dtypes).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Number of elements.
    pub const COUNT: usize = 11;
}

/// `dispatch!(elem, f, (args...))` calls `f::<T>(args...)` for the Rust type `T` of `elem`.
macro_rules! dispatch {
    ($elem:expr, $($f:ident)::+, ($($arg:expr),* $(,)?)) => {{
        use $crate::element::Elem;
        match $elem {
            Elem::I8 => $($f)::+::<i8>($($arg),*),
            Elem::U8 => $($f)::+::<u8>($($arg),*),
            Elem::I32 => $($f)::+::<i32>($($arg),*),
            Elem::U32 => $($f)::+::<u32>($($arg),*),
            Elem::I64 => $($f)::+::<i64>($($arg),*),
            Elem::U64 => $($f)::+::<u64>($($arg),*),
            Elem::F16 => $($f)::+::<half::f16>($($arg),*),
            Elem::F32 => $($f)::+::<f32>($($arg),*),
            Elem::F64 => $($f)::+::<f64>($($arg),*),
            Elem::C64 => $($f)::+::<num_complex::Complex<f32>>($($arg),*),
            Elem::C128 => $($f)::+::<num_complex::Complex<f64>>($($arg),*),
        }
    }};
}
pub(crate) use dispatch;

impl Elem {
    /// Alignment the Rust type needs (a complex number: that of its parts).
    pub const fn align(self) -> usize {
        match self {
            Elem::C64 => 4,
            Elem::C128 => 8,
            other => other.size(),
        }
    }
}
