//! The exception classes: one per variant of [`collectives_core::Error`], all under
//! `CollectivesError`, raised with the error's own message.

use collectives_core::Error;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    collectives,
    CollectivesError,
    PyException,
    "Base class of every error of the collectives module; the message is the Rust error's."
);
create_exception!(
    collectives,
    InvalidArgumentError,
    CollectivesError,
    "An argument is wrong on this rank (a length, a root, a counts array, a buffer that is not a \
     contiguous array of a supported type)."
);
create_exception!(
    collectives,
    UnsupportedError,
    CollectivesError,
    "The element type, reduce operation and backend do not go together (complex max, integer avg, \
     a dtype the library has no element type for)."
);
create_exception!(
    collectives,
    CountOverflowError,
    CollectivesError,
    "A count does not fit the backend's count type (MPI: 2**31 - 1 elements); split the call."
);
create_exception!(
    collectives,
    MpiError,
    CollectivesError,
    "The MPI library returned an error."
);
create_exception!(
    collectives,
    MismatchError,
    CollectivesError,
    "Checked mode found that the ranks called with arguments that do not fit together."
);
create_exception!(
    collectives,
    PeerInvalidError,
    CollectivesError,
    "Checked mode found that other ranks rejected their own arguments (their error says why)."
);
create_exception!(
    collectives,
    NcclError,
    CollectivesError,
    "NCCL returned an error."
);
create_exception!(
    collectives,
    CudaError,
    CollectivesError,
    "The CUDA driver returned an error."
);
create_exception!(
    collectives,
    UnavailableError,
    CollectivesError,
    "A library the backend needs could not be loaded or lacks an entry point, or an mpi4py \
     built against another MPI library than the module's."
);
create_exception!(
    collectives,
    TimeoutError,
    CollectivesError,
    "An operation did not complete within the communicator's deadline (not the builtin \
     TimeoutError): a peer died, hangs, or never made the matching call."
);
create_exception!(
    collectives,
    UnusableError,
    CollectivesError,
    "The communicator was refused after an earlier timeout; end the job."
);
create_exception!(
    collectives,
    PlanActiveError,
    CollectivesError,
    "A persistent plan was started, or its buffers asked for, while a run is in flight."
);
create_exception!(
    collectives,
    ThreadLevelError,
    CollectivesError,
    "MPI was initialized at a thread level too low for what was asked (the progress engine \
     needs MPI_THREAD_MULTIPLE)."
);

/// The Python exception for `e`: the class of its variant, with its message.
pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::InvalidArgument { .. } => InvalidArgumentError::new_err(msg),
        Error::Unsupported { .. } => UnsupportedError::new_err(msg),
        Error::CountOverflow { .. } => CountOverflowError::new_err(msg),
        Error::Mpi { .. } => MpiError::new_err(msg),
        Error::Mismatch { .. } => MismatchError::new_err(msg),
        Error::PeerInvalid { .. } => PeerInvalidError::new_err(msg),
        Error::Nccl { .. } => NcclError::new_err(msg),
        Error::Cuda { .. } => CudaError::new_err(msg),
        Error::Unavailable { .. } => UnavailableError::new_err(msg),
        Error::Timeout { .. } => TimeoutError::new_err(msg),
        Error::Unusable { .. } => UnusableError::new_err(msg),
        Error::PlanActive { .. } => PlanActiveError::new_err(msg),
        Error::ThreadLevel { .. } => ThreadLevelError::new_err(msg),
        // A variant added to the core later: still a CollectivesError with its message.
        _ => CollectivesError::new_err(msg),
    }
}

/// `Result<T, Error>` into `PyResult<T>` with [`to_py`].
pub trait IntoPyResult<T> {
    /// The Python form of the result.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for collectives_core::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Add every exception class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CollectivesError", py.get_type::<CollectivesError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("CountOverflowError", py.get_type::<CountOverflowError>())?;
    m.add("MpiError", py.get_type::<MpiError>())?;
    m.add("MismatchError", py.get_type::<MismatchError>())?;
    m.add("PeerInvalidError", py.get_type::<PeerInvalidError>())?;
    m.add("NcclError", py.get_type::<NcclError>())?;
    m.add("CudaError", py.get_type::<CudaError>())?;
    m.add("UnavailableError", py.get_type::<UnavailableError>())?;
    m.add("TimeoutError", py.get_type::<TimeoutError>())?;
    m.add("UnusableError", py.get_type::<UnusableError>())?;
    m.add("PlanActiveError", py.get_type::<PlanActiveError>())?;
    m.add("ThreadLevelError", py.get_type::<ThreadLevelError>())?;
    Ok(())
}
