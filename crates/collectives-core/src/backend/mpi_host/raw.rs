//! Plumbing for the MPI calls: datatypes, operations, counts, error codes, the C shim's values.

use std::ffi::{c_int, c_void};

use mpi::datatype::Equivalence;
use mpi::ffi;
use mpi::raw::AsRaw;

use crate::check;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::ReduceOp;

extern "C" {
    fn collectives_mpi_in_place() -> *mut c_void;
    fn collectives_mpi_tag_ub_key() -> c_int;
    fn collectives_mpi_undefined() -> c_int;
    fn collectives_mpi_success() -> c_int;
}

/// `MPI_IN_PLACE` of the MPI this crate was built against (Open MPI `(void*)1`, MPICH `(void*)-1`).
pub fn in_place() -> *mut c_void {
    // SAFETY: the shim function takes no argument and returns a constant.
    unsafe { collectives_mpi_in_place() }
}

pub(crate) fn tag_ub_key() -> c_int {
    // SAFETY: the shim function takes no argument and returns a constant.
    unsafe { collectives_mpi_tag_ub_key() }
}

pub(crate) fn undefined() -> c_int {
    // SAFETY: the shim function takes no argument and returns a constant.
    unsafe { collectives_mpi_undefined() }
}

fn success() -> c_int {
    // SAFETY: the shim function takes no argument and returns a constant.
    unsafe { collectives_mpi_success() }
}

/// The largest count (and displacement) MPI's `int`-counted calls take.
pub const fn count_limit() -> usize {
    c_int::MAX as usize
}

/// `n` as an MPI count.
pub(crate) fn count(op: &'static str, n: usize) -> Result<c_int> {
    check::count_fits(op, n, count_limit()).map(|n| n as c_int)
}

/// A count the rules ([`crate::rules`]) checked against MPI's `int` limit, as an `int`.
pub(crate) fn int(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// MPI counts and packed displacements of a counts array the rules checked against MPI's `int`.
pub(crate) fn packed(counts: &[usize]) -> (Vec<c_int>, Vec<c_int>) {
    let mut displ = 0usize;
    let mut c = Vec::with_capacity(counts.len());
    let mut d = Vec::with_capacity(counts.len());
    for &n in counts {
        c.push(int(n));
        d.push(int(displ));
        displ = displ.saturating_add(n);
    }
    (c, d)
}

/// The MPI datatype of `T`.
pub(crate) fn datatype<T: Element>() -> ffi::MPI_Datatype {
    T::Mpi::equivalent_datatype().as_raw()
}

/// The MPI operation for `op` (`Avg` is a sum, divided afterwards).
pub(crate) fn op(op: ReduceOp) -> ffi::MPI_Op {
    // SAFETY: the RSMPI_* operation handles are constants initialized by rsmpi's C shim.
    unsafe {
        match op {
            ReduceOp::Sum | ReduceOp::Avg => ffi::RSMPI_SUM,
            ReduceOp::Prod => ffi::RSMPI_PROD,
            ReduceOp::Min => ffi::RSMPI_MIN,
            ReduceOp::Max => ffi::RSMPI_MAX,
        }
    }
}

/// The second half of an average: divide the summed result by the number of ranks.
pub(crate) fn finish_avg<T: Element>(op: ReduceOp, buf: &mut [T], size: usize) {
    if op == ReduceOp::Avg {
        T::divide_all(buf, size);
    }
}

/// Where empty buffers point. An empty slice's own pointer is a dangling `align_of::<T>()`, which for
/// one-byte types is `(void*)1`: Open MPI's `MPI_IN_PLACE`. MPI never reads or writes through a pointer
/// with a zero count, so every empty buffer points here instead.
static EMPTY: [u64; 2] = [0; 2];

/// A buffer pointer for MPI: the slice's, or [`EMPTY`]'s when it is empty (never a sentinel value).
pub(crate) fn ptr<T>(buf: &[T]) -> *const c_void {
    if buf.is_empty() {
        EMPTY.as_ptr().cast()
    } else {
        buf.as_ptr().cast()
    }
}

/// Where an empty receive buffer points when its send buffer may be empty too: another address than
/// [`ptr`]'s, since some MPI calls refuse a send buffer equal to the receive buffer even for zero
/// counts (Open MPI's `MPIX_Reduce_init`).
pub(crate) fn empty_out() -> *mut c_void {
    EMPTY[1..].as_ptr().cast_mut().cast()
}

/// A mutable buffer pointer for MPI; see [`ptr`]. (MPI writes nothing through it when it is empty.)
pub(crate) fn ptr_mut<T>(buf: &mut [T]) -> *mut c_void {
    if buf.is_empty() {
        EMPTY.as_ptr().cast_mut().cast()
    } else {
        buf.as_mut_ptr().cast()
    }
}

/// The two forms of one MPI operation, for the closure given to `MpiComm::run`:
/// `either!(form, MPI_Allreduce / MPI_Iallreduce (send, recv, n, dt, op, comm))` makes the blocking
/// call, or the non-blocking one with the request added as its last argument. Expands to unsafe calls.
macro_rules! either {
    ($form:expr, $blocking:ident / $start:ident ($($arg:expr),* $(,)?)) => {
        match $form {
            $crate::backend::mpi_host::request::Form::Blocking(_) => ::mpi::ffi::$blocking($($arg),*),
            $crate::backend::mpi_host::request::Form::Start(request) => {
                ::mpi::ffi::$start($($arg,)* request)
            }
        }
    };
}
pub(crate) use either;

/// Turn an MPI return code into a `Result`.
pub(crate) fn check(op: &'static str, code: c_int) -> Result<()> {
    if code == success() {
        Ok(())
    } else {
        Err(error(op, code))
    }
}

/// The [`Error::Mpi`] for a return code: its class and message from the MPI library.
pub(crate) fn error(op: &'static str, code: c_int) -> Error {
    let mut class: c_int = -1;
    // SAFETY: `class` is a valid out-pointer; MPI_Error_class may be called at any time after init.
    unsafe { ffi::MPI_Error_class(code, &mut class) };
    let mut buf = vec![0u8; 1024]; // MPI_MAX_ERROR_STRING is at most 1024 in the MPIs we know
    let mut len: c_int = 0;
    // SAFETY: `buf` has room for MPI_MAX_ERROR_STRING characters; `len` is a valid out-pointer.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr().cast(), &mut len) };
    let message = if rc == success() {
        buf.truncate(len.clamp(0, 1024) as usize);
        String::from_utf8_lossy(&buf).into_owned()
    } else {
        "unknown error".to_string()
    };
    Error::Mpi {
        op,
        code,
        class,
        message,
    }
}

/// An empty `MPI_Status`.
pub(crate) fn status() -> ffi::MPI_Status {
    // SAFETY: MPI_Status is a plain C struct of integers, for which all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// Check that a completed receive delivered exactly `expected` elements of `T`'s datatype.
pub(crate) fn received(
    op: &'static str,
    status: &ffi::MPI_Status,
    datatype: ffi::MPI_Datatype,
    expected: usize,
) -> Result<()> {
    let mut got: c_int = 0;
    // SAFETY: `status` was filled by a completed receive; `got` is a valid out-pointer.
    check(op, unsafe {
        ffi::MPI_Get_count(status, datatype, &mut got)
    })?;
    if got >= 0 && got as usize == expected {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("received {got} elements but the buffer expects exactly {expected}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_is_the_mpi_h_value() {
        // Open MPI defines MPI_IN_PLACE as (void *) 1, MPICH and its derivatives as (void *) -1.
        let v = in_place() as usize;
        assert!(v == 1 || v == usize::MAX, "unexpected MPI_IN_PLACE {v:#x}");
    }

    #[test]
    fn shim_constants_are_sane() {
        assert_eq!(success(), 0, "MPI_SUCCESS is 0 in every MPI");
        assert!(
            undefined() < 0,
            "MPI_UNDEFINED is negative in the MPIs we know"
        );
        let _ = tag_ub_key();
    }

    #[test]
    fn empty_buffers_never_point_at_a_sentinel() {
        let empty: [u8; 0] = [];
        assert_ne!(ptr(&empty), in_place().cast_const());
        let mut empty_mut: Vec<u8> = Vec::new();
        assert_ne!(ptr_mut(&mut empty_mut), in_place());
        assert!(!ptr(&empty).is_null());
        let one = [7u8];
        assert_eq!(ptr(&one), one.as_ptr().cast());
    }

    #[test]
    fn counts_and_displacements_are_packed() {
        let (c, d) = packed(&[2, 0, 3, 1]);
        assert_eq!(c, [2, 0, 3, 1]);
        assert_eq!(d, [0, 2, 2, 5]);
        let big = count_limit();
        assert_eq!(int(big), c_int::MAX);
        assert!(count("x", big + 1).is_err());
    }
}
