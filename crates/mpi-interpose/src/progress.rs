//! Progress of the real MPI's transfers while the interposer works. Open MPI moves a message
//! only inside its calls (the rendezvous of a large one, its copy over CUDA IPC, the end of
//! it), so a start that spends tens of microseconds packing and lending after it started the
//! messages the real MPI carries would hold those back until the program's wait. [`poke`] is
//! one call into the real MPI that lets it progress them and changes nothing else: a probe on
//! a communicator of the interposer's own (a duplicate of `MPI_COMM_SELF`, made by [`init`]),
//! on which no message is ever sent, so it never matches and always progresses.

use std::ffi::c_int;
use std::sync::Mutex;

use mpi::ffi;

use crate::path::blank_status;
use crate::sync::lock;

/// The communicator [`poke`] probes.
struct Comm(ffi::MPI_Comm);

// SAFETY: an MPI handle, only passed by value to MPI calls, which MPI allows from any thread
// at the thread levels where the direct path (its only user) is on.
unsafe impl Send for Comm {}

/// [`poke`]'s communicator, from [`init`] until [`finalize`].
static COMM: Mutex<Option<Comm>> = Mutex::new(None);

/// Makes [`poke`]'s communicator (a local call: a duplicate of `MPI_COMM_SELF`). Without it,
/// [`poke`] does nothing.
///
/// # Safety
/// MPI initialized.
pub unsafe fn init() {
    // SAFETY: reading a handle constant of the rsmpi shim; the out-pointer is valid.
    let (rc, comm) = unsafe {
        let mut comm = ffi::RSMPI_COMM_NULL;
        (ffi::PMPI_Comm_dup(ffi::RSMPI_COMM_SELF, &mut comm), comm)
    };
    if rc == 0 {
        *lock(&COMM) = Some(Comm(comm));
    }
}

/// One call of the real MPI that progresses the transfers under way (`MPI_Iprobe` on
/// [`init`]'s communicator, which finds nothing). Call it holding none of the interposer's
/// locks: the real MPI's progress may run program code (a nonblocking collective's operation)
/// that calls back into the interposer.
///
/// # Safety
/// MPI initialized and not finalized.
pub unsafe fn poke() {
    let Some(comm) = lock(&COMM).as_ref().map(|c| c.0) else {
        return;
    };
    let mut flag: c_int = 0;
    let mut status = blank_status();
    // SAFETY: a live communicator of this process (made by `init`, not freed by `finalize`
    // while MPI is not finalized: the caller's contract); valid out-pointers; the shim's
    // constants.
    unsafe {
        ffi::PMPI_Iprobe(
            ffi::RSMPI_ANY_SOURCE,
            ffi::RSMPI_ANY_TAG,
            comm,
            &mut flag,
            &mut status,
        );
    }
}

/// Before `MPI_Finalize`: frees [`poke`]'s communicator (it then does nothing).
///
/// # Safety
/// MPI initialized and not finalized.
pub unsafe fn finalize() {
    if let Some(Comm(mut comm)) = lock(&COMM).take() {
        // SAFETY: the communicator `init` made, freed once (taken out above).
        unsafe { ffi::PMPI_Comm_free(&mut comm) };
    }
}
