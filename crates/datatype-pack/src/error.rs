//! The crate's one error type.

use std::fmt;

/// Which buffer an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// The buffer that is read from (the strided side for `pack`, the packed side for `unpack`).
    Source,
    /// The buffer that is written to (the packed side for `pack`, the strided side for `unpack`).
    Destination,
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Buffer::Source => "source",
            Buffer::Destination => "destination",
        })
    }
}

/// Everything that can go wrong in this crate.
///
/// Every variant names the operation (`op`) that failed and carries the numbers that made it fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument is out of its domain (a zero element size, a zero-dimensional subarray, a word
    /// size that is not a power of two, ...).
    #[error("{op}: invalid argument: {message}")]
    InvalidArgument {
        /// The operation that refused the argument.
        op: &'static str,
        /// What was wrong.
        message: String,
    },

    /// Two per-dimension argument lists have different lengths.
    #[error("{op}: `{what}` has {found} entries, expected {expected}")]
    DimensionMismatch {
        /// The operation that refused the arguments.
        op: &'static str,
        /// The argument whose length is wrong.
        what: &'static str,
        /// The length it should have (that of the first list).
        expected: usize,
        /// The length it has.
        found: usize,
    },

    /// A subarray reaches beyond its array in one dimension (`start + subsize > size`).
    #[error("{op}: dimension {dim}: start {start} + subsize {subsize} exceeds size {size}")]
    SubarrayOutOfRange {
        /// The operation that refused the arguments.
        op: &'static str,
        /// The dimension, as given by the caller (not reordered for Fortran order).
        dim: usize,
        /// The array's size in that dimension, in elements.
        size: u64,
        /// The subarray's size in that dimension, in elements.
        subsize: u64,
        /// The subarray's start in that dimension, in elements.
        start: u64,
    },

    /// A byte count, offset or stride does not fit the integer type that must hold it.
    #[error("{op}: arithmetic overflow: {message}")]
    Overflow {
        /// The operation whose arithmetic overflowed.
        op: &'static str,
        /// Which quantity overflowed.
        message: String,
    },

    /// The layout is valid but this part of the crate does not handle it (for example a layout
    /// that starts before its base reaching a [`StridedBlock`](crate::plan::StridedBlock), or an
    /// irregular MPI combiner reaching the decoder).
    #[error("{op}: unsupported: {message}")]
    Unsupported {
        /// The operation that refused the layout.
        op: &'static str,
        /// What is not supported.
        message: String,
    },

    /// The layout touches bytes outside its buffer: the half-open byte range `first..end`, relative
    /// to the buffer's start, is not inside `0..len`.
    #[error(
        "{op}: layout touches bytes {first}..{end} of the {buffer} buffer, which has {len} bytes"
    )]
    OutOfBounds {
        /// The operation that checked the bounds.
        op: &'static str,
        /// The buffer the layout describes.
        buffer: Buffer,
        /// The first byte the layout touches (may be negative).
        first: i128,
        /// One past the last byte the layout touches.
        end: i128,
        /// The buffer's length in bytes.
        len: usize,
    },

    /// The packed buffer is shorter than the layout's packed size.
    #[error("{op}: the {buffer} buffer has {len} bytes, the packed data needs {needed}")]
    BufferTooSmall {
        /// The operation that checked the length.
        op: &'static str,
        /// The packed buffer (destination of `pack`, source of `unpack`).
        buffer: Buffer,
        /// The packed size of the layout, in bytes.
        needed: u64,
        /// The buffer's length in bytes.
        len: usize,
    },

    /// A shared library that the GPU packer loads at run time (`libcuda`, `libnvrtc`) could not
    /// be loaded under any of the names tried.
    #[error("{op}: could not load the {library} library; tried {tried:?}")]
    LibraryNotFound {
        /// The operation that needed the library.
        op: &'static str,
        /// The library, by its short name (`cuda`, `nvrtc`).
        library: &'static str,
        /// Every file name that was tried, in order.
        tried: Vec<String>,
    },

    /// A CUDA driver call failed (or the driver bindings failed while loading a symbol).
    #[error("{op}: CUDA driver error: {message}")]
    Cuda {
        /// The operation whose driver call failed.
        op: &'static str,
        /// The driver's error name and description, or what failed while loading it.
        message: String,
    },

    /// NVRTC refused a generated (or given) CUDA source. Carries the compile log and the exact
    /// options, so the failure can be reproduced.
    #[error("{op}: NVRTC compilation failed ({code}) with options {options:?}:\n{log}")]
    Compile {
        /// The operation that compiled.
        op: &'static str,
        /// NVRTC's result code, by name.
        code: String,
        /// The options passed to NVRTC.
        options: Vec<String>,
        /// NVRTC's program log (may be empty, for example for an unknown option).
        log: String,
    },

    /// An MPI call made while decoding a datatype returned an error code (feature `mpi`).
    #[error("{op}: {call} failed with MPI error {code}: {message}")]
    Mpi {
        /// The operation that called MPI.
        op: &'static str,
        /// The MPI function.
        call: &'static str,
        /// The error code it returned.
        code: i32,
        /// `MPI_Error_string` of the code.
        message: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn overflow(op: &'static str, message: impl Into<String>) -> Error {
    Error::Overflow {
        op,
        message: message.into(),
    }
}

pub(crate) fn invalid(op: &'static str, message: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_the_numbers() {
        let e = Error::OutOfBounds {
            op: "pack",
            buffer: Buffer::Source,
            first: -8,
            end: 16,
            len: 12,
        };
        let s = e.to_string();
        assert!(s.contains("-8..16"), "{s}");
        assert!(s.contains("12 bytes"), "{s}");
        assert!(s.contains("source"), "{s}");
        let e = Error::BufferTooSmall {
            op: "unpack",
            buffer: Buffer::Source,
            needed: 100,
            len: 99,
        };
        assert!(e.to_string().contains("99 bytes"));
        assert!(e.to_string().contains("needs 100"));
    }
}
