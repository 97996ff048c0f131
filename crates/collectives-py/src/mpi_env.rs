//! MPI itself from Python: initializing it when mpi4py has not, finalizing what we initialized
//! at interpreter exit, and taking a communicator from mpi4py after checking that mpi4py runs on
//! the same MPI library as this module.

use std::cell::RefCell;

use collectives_core::mpi::ffi;
use collectives_core::MpiComm;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use pyo3::prelude::*;

use crate::errors::{to_py, InvalidArgumentError, MpiError, UnavailableError};

thread_local! {
    /// MPI as this module initialized it (`None` when mpi4py or the host program did): dropped,
    /// which finalizes MPI, by [`finalize`] at interpreter exit.
    static UNIVERSE: RefCell<Option<Universe>> = const { RefCell::new(None) };
}

/// Initialize MPI at `MPI_THREAD_MULTIPLE` (what mpi4py asks for too) unless it is initialized
/// already, and have it finalized at interpreter exit.
///
/// # Errors
/// `MpiError` when MPI was finalized already or cannot be initialized.
pub fn ensure_initialized(py: Python<'_>) -> PyResult<()> {
    if mpi::environment::is_initialized() {
        if mpi::environment::is_finalized() {
            return Err(MpiError::new_err("MPI has been finalized already"));
        }
        return Ok(());
    }
    let Some((universe, _level)) = mpi::initialize_with_threading(mpi::Threading::Multiple) else {
        return Err(MpiError::new_err("MPI could not be initialized"));
    };
    UNIVERSE.with(|u| *u.borrow_mut() = Some(universe));
    let finalizer = wrap_pyfunction!(finalize, py)?;
    py.import("atexit")?
        .call_method1("register", (finalizer,))?;
    Ok(())
}

/// Finalize MPI if this module initialized it (registered with `atexit`; communicators still alive
/// afterwards are not freed: MPI is gone).
#[pyfunction]
pub fn finalize() {
    UNIVERSE.with(|u| drop(u.borrow_mut().take()));
}

/// This module's MPI library, as `MPI_Get_library_version` says.
pub fn library_version() -> String {
    mpi::environment::library_version()
        .map(|v| clean(&v))
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// A version string without the NUL and whitespace some bindings leave at its end.
fn clean(v: &str) -> String {
    v.trim_end_matches(|c: char| c == '\0' || c.is_whitespace())
        .to_owned()
}

/// A duplicate of `MPI_COMM_WORLD`.
///
/// # Errors
/// As [`ensure_initialized`]; `MpiError` when duplicating fails.
pub fn world(py: Python<'_>) -> PyResult<MpiComm> {
    ensure_initialized(py)?;
    MpiComm::from_rsmpi(&SimpleCommunicator::world()).map_err(to_py)
}

/// A duplicate of the mpi4py communicator `comm`, owned by the returned communicator (freed when
/// it is), after checking that mpi4py runs on this module's MPI library.
///
/// # Errors
/// `InvalidArgumentError` for an object that is not an mpi4py intracommunicator (or is
/// `COMM_NULL`); `UnavailableError` when mpi4py's MPI library is not this module's; `MpiError`
/// when duplicating fails.
pub fn from_mpi4py(comm: &Bound<'_, PyAny>) -> PyResult<MpiComm> {
    let py = comm.py();
    let mpi4py = py.import("mpi4py.MPI").map_err(|e| {
        InvalidArgumentError::new_err(format!("from_mpi4py needs mpi4py importable: {e}"))
    })?;
    if !comm.is_instance(&mpi4py.getattr("Comm")?)? {
        return Err(InvalidArgumentError::new_err(format!(
            "from_mpi4py: expected an mpi4py.MPI.Comm, got {}",
            comm.get_type().name()?
        )));
    }
    let theirs = clean(
        &mpi4py
            .call_method0("Get_library_version")?
            .extract::<String>()?,
    );
    let ours = library_version();
    if theirs != ours {
        return Err(UnavailableError::new_err(format!(
            "from_mpi4py: mpi4py runs on another MPI library than collectives: mpi4py's is \
             {theirs:?}, collectives' is {ours:?}; install mpi4py against this MPI \
             (pip install --no-binary mpi4py mpi4py, with this MPI's mpicc first on PATH)"
        )));
    }
    if comm.eq(mpi4py.getattr("COMM_NULL")?)? {
        return Err(InvalidArgumentError::new_err(
            "from_mpi4py: the communicator is MPI.COMM_NULL",
        ));
    }
    if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
        return Err(MpiError::new_err(
            "from_mpi4py: MPI is not initialized (or finalized already); import mpi4py.MPI \
             with mpi4py.rc.initialize left on, or call MPI.Init() first",
        ));
    }
    if comm.call_method0("Is_inter")?.extract::<bool>()? {
        return Err(InvalidArgumentError::new_err(
            "from_mpi4py: intercommunicators are not supported; pass an intracommunicator",
        ));
    }
    // mpi4py's `handle` is the MPI_Comm value itself as an integer: in Open MPI (the library
    // rsmpi's bindings are generated for here) a pointer to the communicator's struct.
    let handle: usize = comm.getattr("handle")?.extract()?;
    let raw = ffi::MPI_Comm(handle as *mut _);
    // SAFETY: an `MPI_Comm` handle starts out as any value; MPI_Comm_dup overwrites it.
    let mut dup: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
    // SAFETY: `raw` is the handle of a live mpi4py communicator of this MPI library (checked
    // above: same library, not COMM_NULL), which `comm` keeps alive during the call; `dup` is a
    // valid out-pointer. MPI_Comm_dup is collective, as this call is documented to be.
    let rc = unsafe { ffi::MPI_Comm_dup(raw, &mut dup) };
    if rc != 0 {
        return Err(MpiError::new_err(format!(
            "from_mpi4py: MPI_Comm_dup failed with code {rc}"
        )));
    }
    // SAFETY: `dup` was just created, is not a predefined communicator, and nothing else frees it.
    unsafe { MpiComm::from_raw(dup) }.map_err(to_py)
}

/// Whether MPI has been finalized (operations in flight are then left alone).
pub fn finalized() -> bool {
    mpi::environment::is_finalized()
}
