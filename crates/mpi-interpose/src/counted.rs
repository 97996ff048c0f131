//! The MPI functions the interposer defines only to count them for the direct path's message
//! order ([`crate::direct`]): the send modes other than standard (buffered, synchronous,
//! ready; blocking, non-blocking and persistent), `MPI_Sendrecv_replace`, the matched probes
//! (which take a message as a receive does) and `MPI_Cancel` (after which the order is no
//! longer known); and the probes, which tell the message's sender not to wait for a ready
//! message ([`direct::probing`]). Each counts, then makes the real call unchanged.
//!
//! Every function here has the C prototype of `mpi.h`; its safety contract is MPI's own for
//! that call.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use mpi::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Message, MPI_Request, MPI_Status};

use crate::direct;
use crate::handle::key;
use crate::path::{self, guard, guarded};
use crate::persistent;

/// Counts a send ([`direct::sent`]); nothing unwinds into the caller.
///
/// # Safety
/// MPI's contract for the send.
unsafe fn count_send(comm: MPI_Comm, dest: c_int, tag: c_int, count: c_int, dt: MPI_Datatype) {
    // SAFETY: the caller's contract.
    let _ = guarded(|| unsafe { direct::sent(comm, dest, tag, count, dt) });
}

/// Blocking sends of the other modes.
macro_rules! blocking_send {
    ($name:ident, $real:ident, $what:literal) => {
        #[doc = concat!("`", $what, "`: counted, then the real call.")]
        ///
        /// # Safety
        #[doc = concat!("MPI's contract for `", $what, "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
        ) -> c_int {
            // SAFETY: the caller's contract.
            unsafe {
                count_send(comm, dest, tag, count, datatype);
                ffi::$real(buf, count, datatype, dest, tag, comm)
            }
        }
    };
}

/// Non-blocking sends of the other modes.
macro_rules! nonblocking_send {
    ($name:ident, $real:ident, $what:literal) => {
        #[doc = concat!("`", $what, "`: counted, then the real call.")]
        ///
        /// # Safety
        #[doc = concat!("MPI's contract for `", $what, "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            // SAFETY: the caller's contract.
            unsafe {
                count_send(comm, dest, tag, count, datatype);
                ffi::$real(buf, count, datatype, dest, tag, comm, request)
            }
        }
    };
}

/// Persistent sends of the other modes: their starts are counted.
macro_rules! persistent_send {
    ($name:ident, $real:ident, $what:literal) => {
        #[doc = concat!("`", $what, "`: the real call, and its starts counted.")]
        ///
        /// # Safety
        #[doc = concat!("MPI's contract for `", $what, "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            // SAFETY: the caller's contract.
            let rc = unsafe { ffi::$real(buf, count, datatype, dest, tag, comm, request) };
            if rc == 0 && !request.is_null() {
                // SAFETY: the real MPI wrote the new request's handle.
                let h = key(unsafe { *request });
                // SAFETY: the caller's contract.
                guard(|| unsafe {
                    direct::keep_persistent(h, true, comm, dest, tag, count, datatype)
                });
            }
            rc
        }
    };
}

blocking_send!(MPI_Bsend, PMPI_Bsend, "MPI_Bsend");
blocking_send!(MPI_Ssend, PMPI_Ssend, "MPI_Ssend");
blocking_send!(MPI_Rsend, PMPI_Rsend, "MPI_Rsend");
nonblocking_send!(MPI_Ibsend, PMPI_Ibsend, "MPI_Ibsend");
nonblocking_send!(MPI_Issend, PMPI_Issend, "MPI_Issend");
nonblocking_send!(MPI_Irsend, PMPI_Irsend, "MPI_Irsend");
persistent_send!(MPI_Bsend_init, PMPI_Bsend_init, "MPI_Bsend_init");
persistent_send!(MPI_Ssend_init, PMPI_Ssend_init, "MPI_Ssend_init");
persistent_send!(MPI_Rsend_init, PMPI_Rsend_init, "MPI_Rsend_init");

/// `MPI_Sendrecv_replace`: its send and its receive counted, then the real call.
///
/// # Safety
/// MPI's contract for `MPI_Sendrecv_replace`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { count_send(comm, dest, sendtag, count, datatype) };
    let _ = guarded(|| direct::posted(comm, source, recvtag));
    // SAFETY: the caller's contract.
    unsafe {
        ffi::PMPI_Sendrecv_replace(
            buf, count, datatype, dest, sendtag, source, recvtag, comm, status,
        )
    }
}

/// `MPI_Probe`: its message's sender is told to send bytes ([`direct::probing`]), then the
/// real call.
///
/// # Safety
/// MPI's contract for `MPI_Probe`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Probe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    guard(|| direct::probing(comm, source, tag));
    // SAFETY: the caller's contract.
    unsafe { ffi::PMPI_Probe(source, tag, comm, status) }
}

/// `MPI_Iprobe`: as [`MPI_Probe`] (the sender is told once per message, however often the
/// program polls), then the real call.
///
/// # Safety
/// MPI's contract for `MPI_Iprobe`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard(|| direct::probing(comm, source, tag));
    // SAFETY: the caller's contract.
    unsafe { ffi::PMPI_Iprobe(source, tag, comm, flag, status) }
}

/// `MPI_Mprobe`: its message's sender is told to send bytes ([`direct::probing`]: a matched
/// message is received as bytes); the real call; the message it takes is counted as a
/// receive (a wildcard one stops the direct path).
///
/// # Safety
/// MPI's contract for `MPI_Mprobe`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Mprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    guard(|| direct::probing(comm, source, tag));
    // SAFETY: the caller's contract.
    let rc = unsafe { ffi::PMPI_Mprobe(source, tag, comm, message, status) };
    if rc == 0 {
        let _ = guarded(|| direct::posted(comm, source, tag));
    }
    rc
}

/// `MPI_Improbe`: as [`MPI_Mprobe`], its sender told first; the real call; a message it
/// takes is counted as a receive.
///
/// # Safety
/// MPI's contract for `MPI_Improbe`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Improbe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    guard(|| direct::probing(comm, source, tag));
    // SAFETY: the caller's contract.
    let rc = unsafe { ffi::PMPI_Improbe(source, tag, comm, flag, message, status) };
    // SAFETY: the real MPI wrote the flag where it succeeded.
    if rc == 0 && !flag.is_null() && unsafe { *flag } != 0 {
        let _ = guarded(|| direct::posted(comm, source, tag));
    }
    rc
}

/// `MPI_Cancel`: the direct path stops on this rank ([`direct::unsettle`]), then the real call.
/// A receive whose note was claimed before it completed ([`direct::claim_early`]) is not
/// cancelled (its unpack may have written the buffer, and its message is bound to come), nor a
/// persistent send whose start was lent (its note is out; the real MPI's active request is its
/// marker): each completes as usual, which MPI allows of a cancel.
///
/// # Safety
/// MPI's contract for `MPI_Cancel`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cancel(request: *mut MPI_Request) -> c_int {
    if !request.is_null() {
        // SAFETY: the caller passes a valid request handle.
        let h = key(unsafe { *request });
        let bound = || {
            path::claimed_early(h)
                || persistent::claimed_early(h)
                || persistent::marker_if_lent(h).is_some()
        };
        if guarded(|| Some(bound())) == Some(true) {
            return 0;
        }
    }
    guard(direct::unsettle);
    // SAFETY: the caller's contract.
    unsafe { ffi::PMPI_Cancel(request) }
}
