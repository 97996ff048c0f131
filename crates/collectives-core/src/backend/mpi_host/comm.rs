//! [`MpiComm`]: construction, teardown and checked mode.

use std::ffi::{c_int, c_void};
use std::fmt;
use std::marker::PhantomData;

use mpi::ffi;

use super::raw;
use crate::checked::{self, Call, RECORD_LEN};
use crate::error::Result;

/// A communicator of the MPI host backend: collectives on host memory (`[T]` buffers).
///
/// It owns a duplicate of the communicator it was made from, with the `MPI_ERRORS_RETURN` error handler,
/// so MPI errors come back as [`Error::Mpi`](crate::Error::Mpi) and messages never mix with the caller's.
/// Dropping it frees the duplicate (`MPI_Comm_free`), unless MPI has been finalized already;
/// [`finalize`](Self::finalize) does the same and reports errors. `MPI_Comm_free` is collective in the
/// MPI standard: drop communicators in the same order on every rank.
///
/// ```no_run
/// use collectives_core::{Communicator, MpiComm, ReduceOp};
///
/// let universe = mpi::initialize().expect("MPI initializes once");
/// let comm = MpiComm::world(&universe)?;
/// let mut x = vec![comm.rank() as f64; 4];
/// comm.all_reduce_in_place(&mut x[..], ReduceOp::Sum)?;
/// # Ok::<(), collectives_core::Error>(())
/// ```
pub struct MpiComm {
    pub(super) raw: ffi::MPI_Comm,
    pub(super) rank: usize,
    pub(super) size: usize,
    pub(super) checked: bool,
    pub(super) tag_ub: i32,
    /// MPI handles are used from the thread that made them (rsmpi initializes `MPI_THREAD_SINGLE`).
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for MpiComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpiComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("checked", &self.checked)
            .finish_non_exhaustive()
    }
}

impl MpiComm {
    /// A communicator over all ranks (a duplicate of `MPI_COMM_WORLD`). The universe proves MPI is
    /// initialized.
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) when duplicating fails.
    pub fn world(universe: &mpi::environment::Universe) -> Result<Self> {
        Self::from_rsmpi(&universe.world())
    }

    /// A communicator over the ranks of an rsmpi communicator (which is duplicated, not modified).
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) when duplicating fails.
    pub fn from_rsmpi<C: mpi::topology::Communicator>(comm: &C) -> Result<Self> {
        // SAFETY: an `MPI_Comm` handle starts out as any value; MPI_Comm_dup overwrites it.
        let mut dup: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: `comm` is a live communicator (rsmpi keeps it alive while borrowed); `dup` is a valid
        // out-pointer.
        raw::check("dup", unsafe { ffi::MPI_Comm_dup(comm.as_raw(), &mut dup) })?;
        // SAFETY: `dup` was just created and is owned by nobody else.
        unsafe { Self::from_raw(dup) }
    }

    /// Take ownership of a raw communicator handle: set `MPI_ERRORS_RETURN` on it and free it on drop.
    ///
    /// # Safety
    /// `raw` must be a valid communicator (not `MPI_COMM_NULL`, not a predefined one such as
    /// `MPI_COMM_WORLD`), MPI must be initialized, and nothing else may free it.
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) when MPI rejects the handle.
    pub unsafe fn from_raw(raw: ffi::MPI_Comm) -> Result<Self> {
        let comm = MpiComm {
            raw,
            rank: 0,
            size: 0,
            checked: checked::enabled_by_default(),
            tag_ub: 32767,
            _not_send: PhantomData,
        };
        // From here on `comm` frees the handle on every path.
        let mut comm = comm;
        // SAFETY: `raw` is a valid communicator (caller's promise); RSMPI_ERRORS_RETURN is a constant.
        raw::check("dup", unsafe {
            ffi::MPI_Comm_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN)
        })?;
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: valid communicator and out-pointers.
        raw::check("dup", unsafe { ffi::MPI_Comm_rank(raw, &mut rank) })?;
        // SAFETY: valid communicator and out-pointers.
        raw::check("dup", unsafe { ffi::MPI_Comm_size(raw, &mut size) })?;
        comm.rank = rank as usize;
        comm.size = size as usize;
        let mut value: *mut c_int = std::ptr::null_mut();
        let mut flag: c_int = 0;
        // SAFETY: for MPI_TAG_UB, MPI stores a pointer to an int in `value` when `flag` is set.
        let rc = unsafe {
            ffi::MPI_Comm_get_attr(
                raw,
                raw::tag_ub_key(),
                (&mut value as *mut *mut c_int).cast::<c_void>(),
                &mut flag,
            )
        };
        if rc == 0 && flag != 0 && !value.is_null() {
            // SAFETY: MPI returned a pointer to its (static) tag upper bound.
            comm.tag_ub = unsafe { *value };
        }
        Ok(comm)
    }

    /// The raw `MPI_Comm` handle (still owned by `self`), for calls this crate does not wrap.
    pub fn as_raw(&self) -> ffi::MPI_Comm {
        self.raw
    }

    /// Switch checked mode on or off for this communicator (overrides `COLLECTIVES_CHECK`).
    ///
    /// Every rank must use the same setting.
    #[must_use]
    pub fn with_checked(mut self, on: bool) -> Self {
        self.checked = on;
        self
    }

    pub(crate) fn set_checked(&mut self, on: bool) {
        self.checked = on;
    }

    /// The ranks of this communicator that share this rank's node (`MPI_Comm_split_type` with
    /// `MPI_COMM_TYPE_SHARED`), ordered as here, with checked mode off. Collective: every rank
    /// calls it.
    ///
    /// The device backends use it to pick a GPU per node-local rank; code built on them uses it to
    /// find the ranks it can reach through shared or CUDA IPC memory.
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) from the split.
    pub fn split_shared(&self) -> Result<MpiComm> {
        const OP: &str = "split_shared";
        // SAFETY: an MPI_Comm handle may start as any value; MPI_Comm_split_type overwrites it.
        let mut local: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: a valid communicator, constants from rsmpi's shim, a valid out-pointer.
        raw::check(OP, unsafe {
            ffi::MPI_Comm_split_type(
                self.raw,
                ffi::RSMPI_COMM_TYPE_SHARED,
                self.rank as c_int,
                ffi::RSMPI_INFO_NULL,
                &mut local,
            )
        })?;
        // SAFETY: `local` was just created for this rank and is owned by nobody else.
        Ok(unsafe { MpiComm::from_raw(local) }?.with_checked(false))
    }

    /// The largest tag this MPI accepts (`MPI_TAG_UB`).
    pub fn tag_ub(&self) -> i32 {
        self.tag_ub
    }

    /// Free the communicator now, reporting errors.
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) from `MPI_Comm_free`.
    pub fn finalize(self) -> Result<()> {
        let mut raw = self.raw;
        std::mem::forget(self);
        // SAFETY: `raw` is owned by the communicator that was just consumed, so nothing else frees it.
        raw::check("finalize", unsafe { ffi::MPI_Comm_free(&mut raw) })
    }

    /// Run the checked-mode agreement for `call` (when checked mode is on) and pass on this rank's own
    /// result: the local error first, then a peer's rejection or a mismatch, else `local`'s value.
    pub(crate) fn agree<R>(&self, call: Call<'_>, local: Result<R>) -> Result<R> {
        if !self.checked {
            return local;
        }
        let op = call.op().name();
        let mine = call.record(local.is_ok());
        let mut table = vec![0i64; RECORD_LEN * self.size];
        self.all_gather_i64(op, &mine, &mut table)?;
        let value = local?;
        checked::verdict(op, &table)?;
        if call.needs_pair_check() {
            let mine = call.pair_record();
            let mut table = vec![0i64; mine.len() * self.size];
            self.all_gather_i64(op, &mine, &mut table)?;
            checked::pair_verdict(op, &table, self.size)?;
        }
        Ok(value)
    }

    fn all_gather_i64(&self, op: &'static str, mine: &[i64], table: &mut [i64]) -> Result<()> {
        let n = raw::count(op, mine.len())?;
        debug_assert_eq!(table.len(), mine.len() * self.size);
        // SAFETY: `mine` holds `n` i64 and `table` holds `n` per rank (allocated by the caller for this
        // communicator's size); the datatype is i64's.
        raw::check(op, unsafe {
            ffi::MPI_Allgather(
                mine.as_ptr().cast(),
                n,
                raw::datatype::<i64>(),
                table.as_mut_ptr().cast(),
                n,
                raw::datatype::<i64>(),
                self.raw,
            )
        })
    }
}

impl Drop for MpiComm {
    fn drop(&mut self) {
        let mut finalized: c_int = 0;
        // SAFETY: MPI_Finalized may be called at any time, even after MPI_Finalize.
        unsafe { ffi::MPI_Finalized(&mut finalized) };
        if finalized == 0 {
            // SAFETY: the handle is owned by this communicator and freed only here; errors are ignored
            // because a drop must not panic (`finalize` reports them).
            unsafe { ffi::MPI_Comm_free(&mut self.raw) };
        }
    }
}
