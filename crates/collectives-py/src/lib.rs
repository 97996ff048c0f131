//! The Python module `collectives` (imported from the package of the same name, which
//! re-exports this extension, `collectives._collectives`): the MPI host backend of
//! `collectives-core` on NumPy arrays.
//!
//! | module | what it holds |
//! |---|---|
//! | `mpi_env` | MPI initialization (when mpi4py has not), communicators from mpi4py, the library check |
//! | `comm` | `Communicator`: every collective and point-to-point operation, blocking and non-blocking; `ReduceOp` |
//! | `request` | `Request`: a non-blocking operation taken out of its Rust scope, holding what it runs on |
//! | `ops` | one generic function per operation, called for the element type found at run time |
//! | `buffer` | Python buffers as host buffers: dtype, contiguity and alignment checks; result arrays |
//! | `element` | buffer formats to element types, and the dispatch macro |
//! | `errors` | one exception class per error variant, under `CollectivesError` |
//!
//! Not here (see the package's documentation): the device backends (NCCL, CUDA-aware MPI,
//! staged) and GPU arrays, and persistent plans (a core `Persistent` holds a reference into its
//! scope and cannot outlive it).

mod buffer;
mod comm;
mod element;
mod errors;
mod mpi_env;
mod ops;
mod request;

use pyo3::prelude::*;

use crate::comm::{configure, Communicator, PyReduceOp};
use crate::request::Request;

/// A communicator over all ranks (a duplicate of `MPI_COMM_WORLD`), initializing MPI at
/// `MPI_THREAD_MULTIPLE` when nothing has (mpi4py does on import), and finalizing it at exit then.
/// `checked`: checked mode on or off (default: `COLLECTIVES_CHECK`, else on in debug builds);
/// `timeout`: a deadline in seconds for every operation (0: none; default: `COLLECTIVES_TIMEOUT`);
/// `progress`: the progress thread for non-blocking operations (default: `COLLECTIVES_PROGRESS`).
#[pyfunction]
#[pyo3(signature = (*, checked=None, timeout=None, progress=None))]
fn world(
    py: Python<'_>,
    checked: Option<bool>,
    timeout: Option<f64>,
    progress: Option<bool>,
) -> PyResult<Communicator> {
    let inner = configure(mpi_env::world(py)?, checked, timeout, progress)?;
    Ok(Communicator { inner })
}

/// A communicator over the ranks of the mpi4py communicator `comm`, which is duplicated (the
/// duplicate is ours, freed with the returned communicator; `comm` is untouched). Collective.
/// Refused with `UnavailableError` when mpi4py runs on another MPI library than this module
/// (their `Get_library_version` strings differ). Options as for `world`.
#[pyfunction]
#[pyo3(signature = (comm, *, checked=None, timeout=None, progress=None))]
fn from_mpi4py(
    comm: &Bound<'_, PyAny>,
    checked: Option<bool>,
    timeout: Option<f64>,
    progress: Option<bool>,
) -> PyResult<Communicator> {
    let inner = configure(mpi_env::from_mpi4py(comm)?, checked, timeout, progress)?;
    Ok(Communicator { inner })
}

/// The MPI library this module runs on (`MPI_Get_library_version`).
#[pyfunction]
fn library_version() -> String {
    mpi_env::library_version()
}

/// The extension module.
#[pymodule]
fn _collectives(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Communicator>()?;
    m.add_class::<Request>()?;
    m.add_class::<PyReduceOp>()?;
    m.add_function(wrap_pyfunction!(world, m)?)?;
    m.add_function(wrap_pyfunction!(from_mpi4py, m)?)?;
    m.add_function(wrap_pyfunction!(library_version, m)?)?;
    m.add_function(wrap_pyfunction!(mpi_env::finalize, m)?)?;
    errors::register(m)?;
    Ok(())
}
