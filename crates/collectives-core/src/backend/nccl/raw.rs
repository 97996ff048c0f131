//! Plumbing for NCCL calls: the library, result codes, wire types and operations.

use std::ffi::CStr;

use nccl_sys as sys;

use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::ReduceOp;

/// The process-wide NCCL library, or why it cannot be used.
pub(crate) fn library() -> Result<&'static sys::Library> {
    sys::library().map_err(Error::from)
}

/// Turn a missing optional entry point into our error type.
pub(crate) fn unavailable(e: sys::Error) -> Error {
    Error::from(e)
}

/// `ncclGetErrorString` of a code.
pub(crate) fn error_name(lib: &sys::Library, code: sys::ncclResult_t) -> String {
    let Ok(f) = sys::nccl_fn!(lib, ncclGetErrorString) else {
        return format!("ncclResult {code}");
    };
    // SAFETY: ncclGetErrorString returns a pointer to a static NUL-terminated string for any code.
    let p = unsafe { f(code) };
    if p.is_null() {
        return format!("ncclResult {code}");
    }
    // SAFETY: non-null, NUL-terminated, static (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `ncclGetLastError` of a communicator (or of the process, for a null one).
pub(crate) fn last_error(lib: &sys::Library, comm: sys::ncclComm_t) -> String {
    let Ok(f) = sys::nccl_fn!(lib, ncclGetLastError) else {
        return String::new();
    };
    // SAFETY: ncclGetLastError accepts any communicator handle, or null, and returns a NUL-terminated
    // string that stays valid until the next NCCL call on this thread; it is copied at once.
    let p = unsafe { f(comm) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated (see above); copied before any other NCCL call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The [`Error::Nccl`] for a result code.
pub(crate) fn error(
    lib: &sys::Library,
    comm: sys::ncclComm_t,
    op: &'static str,
    code: sys::ncclResult_t,
) -> Error {
    Error::Nccl {
        op,
        code,
        name: error_name(lib, code),
        message: last_error(lib, comm),
    }
}

/// NCCL's wire type for `T` (complex numbers: their real type, twice as many).
pub(crate) fn datatype<T: Element>() -> sys::ncclDataType_t {
    T::WIRE.dtype.nccl_code() as sys::ncclDataType_t
}

/// The wire count of `len` elements, which the rules ([`crate::rules`]) checked to fit `size_t`.
pub(crate) fn wire<T: Element>(len: usize) -> usize {
    len.saturating_mul(T::WIRE.lanes)
}

/// NCCL's reduction for `op` (checked against the element beforehand).
pub(crate) fn redop(op: ReduceOp) -> sys::ncclRedOp_t {
    match op {
        ReduceOp::Sum => sys::ncclSum,
        ReduceOp::Prod => sys::ncclProd,
        ReduceOp::Max => sys::ncclMax,
        ReduceOp::Min => sys::ncclMin,
        ReduceOp::Avg => sys::ncclAvg,
    }
}

#[cfg(test)]
mod tests {
    use half::bf16;
    use num_complex::Complex;

    use super::*;

    #[test]
    fn wire_types_and_counts() {
        assert_eq!(datatype::<f32>(), sys::ncclFloat32);
        assert_eq!(datatype::<bf16>(), sys::ncclBfloat16);
        assert_eq!(datatype::<Complex<f64>>(), sys::ncclFloat64);
        assert_eq!(wire::<Complex<f64>>(5), 10);
        assert_eq!(wire::<u8>(5), 5);
    }

    #[test]
    fn uneven_algorithm_by_size() {
        use super::super::UnevenAlgorithm as A;
        assert_eq!(A::Auto.choose(4, 0), A::GroupedP2p);
        assert_eq!(A::Auto.choose(4, A::BROADCASTS_FROM - 1), A::GroupedP2p);
        assert_eq!(A::Auto.choose(4, A::BROADCASTS_FROM), A::Broadcasts);
        assert_eq!(A::Auto.choose(2, usize::MAX), A::GroupedP2p);
        assert_eq!(A::GroupedP2p.choose(8, usize::MAX), A::GroupedP2p);
        assert_eq!(A::Broadcasts.choose(1, 0), A::Broadcasts);
    }

    #[test]
    fn reduce_ops_match_nccl_h() {
        assert_eq!(redop(ReduceOp::Sum), 0);
        assert_eq!(redop(ReduceOp::Prod), 1);
        assert_eq!(redop(ReduceOp::Max), 2);
        assert_eq!(redop(ReduceOp::Min), 3);
        assert_eq!(redop(ReduceOp::Avg), 4);
    }
}
