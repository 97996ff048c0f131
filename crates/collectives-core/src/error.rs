//! The crate's one error type.

use std::fmt;
use std::time::Duration;

use crate::op::{BackendKind, ReduceOp};

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a collective can fail with. `op` names the operation (`"all_reduce"`, ...).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument is wrong on this rank (a length, a root, a counts array); `msg` carries the numbers.
    #[error("{op}: invalid argument: {msg}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong, with the numbers.
        msg: String,
    },
    /// The element type, reduce operation and backend do not go together.
    #[error("{op}: {element}{} is not supported on the {backend} backend: {reason}",
        reduce_op.map(|o| format!(" with {o}")).unwrap_or_default())]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The element type's name.
        element: &'static str,
        /// The reduce operation, where there is one.
        reduce_op: Option<ReduceOp>,
        /// The backend.
        backend: BackendKind,
        /// Why.
        reason: &'static str,
    },
    /// A count does not fit the backend's count type.
    #[error(
        "{op}: count {count} exceeds the largest count the backend takes ({limit}); split the call"
    )]
    CountOverflow {
        /// The operation.
        op: &'static str,
        /// The count asked for (in the backend's units).
        count: usize,
        /// The largest count the backend takes.
        limit: usize,
    },
    /// The MPI library returned an error.
    #[error("{op}: MPI error {code} (class {class}): {message}")]
    Mpi {
        /// The operation.
        op: &'static str,
        /// The error code MPI returned.
        code: i32,
        /// Its error class (`MPI_Error_class`).
        class: i32,
        /// `MPI_Error_string` of the code.
        message: String,
    },
    /// Checked mode found that the ranks called with arguments that do not fit together.
    #[error("{op}: ranks disagree on {field}: {}", Listing(values))]
    Mismatch {
        /// The operation (as called on this rank).
        op: &'static str,
        /// What they disagree on (`"operation"`, `"count"`, `"root"`, ...).
        field: &'static str,
        /// `(rank, value)` for the ranks involved.
        values: Vec<(usize, String)>,
    },
    /// Checked mode found that other ranks rejected their own arguments; they returned the reason.
    #[error(
        "{op}: rank(s) {ranks:?} rejected their arguments for this call (their error says why)"
    )]
    PeerInvalid {
        /// The operation.
        op: &'static str,
        /// The ranks that rejected their arguments.
        ranks: Vec<usize>,
    },
    /// NCCL returned an error.
    #[error("{op}: NCCL error {code} ({name}): {message}")]
    Nccl {
        /// The operation.
        op: &'static str,
        /// The `ncclResult_t` value.
        code: u32,
        /// `ncclGetErrorString` of the code.
        name: String,
        /// `ncclGetLastError` of the communicator, where there is one.
        message: String,
    },
    /// The CUDA driver returned an error.
    #[error("{op}: CUDA error: {message}")]
    Cuda {
        /// The operation.
        op: &'static str,
        /// The driver's error.
        message: String,
    },
    /// A library the backend needs could not be loaded or lacks an entry point.
    #[error("{what} is not available: {message}")]
    Unavailable {
        /// The library (`"NCCL"`, `"the CUDA driver"`).
        what: &'static str,
        /// Why (the files tried, the missing symbol, the release that introduced it).
        message: String,
    },
    /// An operation did not complete in time: a peer died, hangs, or never made the matching call.
    /// On the MPI backends the communicator is unusable afterwards ([`Error::Unusable`]).
    #[error("{op}: timed out after {after:?}")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// How long it was given.
        after: Duration,
    },
    /// A communicator was refused for further use because an earlier operation on it timed out (on
    /// MPI, that operation is still in flight inside MPI and its peers are out of step; on NCCL, the
    /// timeout aborted the communicator), or, on NCCL, because `abort` was called (`timed_out` is then
    /// `"abort"` and `after` zero) or because NCCL reported an asynchronous error (a peer that
    /// exited, a broken connection: `timed_out` is the operation that saw it and `after` zero),
    /// after which the communicator was aborted. Nothing recovers it; end the job (`MPI_Abort`) or
    /// drop the communicator and finalize.
    #[error("{op}: the communicator is unusable: {}; abort the job or finalize", refusal(timed_out, *after))]
    Unusable {
        /// The operation refused now.
        op: &'static str,
        /// The operation that timed out.
        timed_out: &'static str,
        /// Its deadline.
        after: Duration,
    },
    /// A persistent plan ([`crate::Persistent`]) was started, or its buffers asked for, while a run
    /// of it is still in flight: complete it first (`wait`, or `test` until it says so). Nothing was
    /// issued to the library; the run in flight is unaffected.
    #[error("{op}: the persistent plan is still active; wait for its run before {action}")]
    PlanActive {
        /// The plan's operation (`"all_reduce_init"`, ...).
        op: &'static str,
        /// What was refused (`"starting it again"`, `"touching its buffers"`).
        action: &'static str,
    },
    /// MPI was initialized at a thread level too low for what was asked (the progress engine of
    /// [`MpiComm::with_progress`](crate::MpiComm::with_progress) needs `MPI_THREAD_MULTIPLE`).
    #[error(
        "{op}: needs {required} but MPI provides {provided}; initialize MPI with \
         mpi::initialize_with_threading(mpi::Threading::Multiple)"
    )]
    ThreadLevel {
        /// The operation (`"progress"`).
        op: &'static str,
        /// The thread level needed.
        required: &'static str,
        /// The thread level MPI provides (`MPI_Query_thread`).
        provided: &'static str,
    },
}

/// Why a communicator is [`Error::Unusable`], in words.
fn refusal(timed_out: &str, after: Duration) -> String {
    if timed_out == "abort" && after.is_zero() {
        "it was aborted".to_string()
    } else if after.is_zero() {
        format!("{timed_out} failed earlier with an error of the library that ends the communicator, which was aborted")
    } else {
        format!("{timed_out} timed out after {after:?} earlier")
    }
}

impl Error {
    /// The operation the error came from.
    pub fn op(&self) -> &'static str {
        match self {
            Error::InvalidArgument { op, .. }
            | Error::Unsupported { op, .. }
            | Error::CountOverflow { op, .. }
            | Error::Mpi { op, .. }
            | Error::Mismatch { op, .. }
            | Error::PeerInvalid { op, .. }
            | Error::Nccl { op, .. }
            | Error::Cuda { op, .. }
            | Error::Timeout { op, .. }
            | Error::Unusable { op, .. }
            | Error::PlanActive { op, .. }
            | Error::ThreadLevel { op, .. } => op,
            Error::Unavailable { .. } => "load",
        }
    }

    /// [`Error::InvalidArgument`] for `op`, with `msg` saying what is wrong (with the numbers).
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Error {
        Error::InvalidArgument {
            op,
            msg: msg.into(),
        }
    }

    /// [`Error::Cuda`] for `op` from a cudarc driver error (feature `cuda`). For code that drives
    /// CUDA itself next to a device backend and reports its failures as this crate's errors.
    #[cfg(feature = "cuda")]
    pub fn cuda(op: &'static str, e: cudarc::driver::DriverError) -> Error {
        Error::Cuda {
            op,
            message: e.to_string(),
        }
    }

    /// `Ok` where the driver call `what` of `op` returned `rc == CUDA_SUCCESS`, else
    /// [`Error::Cuda`] naming the call and the code (feature `cuda`). For raw driver calls.
    ///
    /// # Errors
    /// [`Error::Cuda`] for any other `rc`.
    #[cfg(feature = "cuda")]
    pub fn check_cuda(
        op: &'static str,
        what: &str,
        rc: cudarc::driver::sys::CUresult,
    ) -> Result<()> {
        if rc == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(Error::Cuda {
                op,
                message: format!("{what} failed: {rc:?}"),
            })
        }
    }
}

/// A missing libnccl or NCCL entry point (from [`nccl_sys::library`] or `nccl_sys::nccl_fn!`) is
/// [`Error::Unavailable`] naming NCCL (feature `nccl`).
#[cfg(feature = "nccl")]
impl From<nccl_sys::Error> for Error {
    fn from(e: nccl_sys::Error) -> Self {
        Error::Unavailable {
            what: "NCCL",
            message: e.to_string(),
        }
    }
}

struct Listing<'a>(&'a [(usize, String)]);

impl fmt::Display for Listing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (rank, value)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "rank {rank}: {value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_the_numbers() {
        let e = Error::Mismatch {
            op: "all_reduce",
            field: "count",
            values: vec![(0, "4".into()), (1, "5".into())],
        };
        assert_eq!(
            e.to_string(),
            "all_reduce: ranks disagree on count: rank 0: 4, rank 1: 5"
        );
        assert_eq!(e.op(), "all_reduce");
        let e = Error::Unsupported {
            op: "all_reduce",
            element: "complex<f64>",
            reduce_op: Some(ReduceOp::Max),
            backend: BackendKind::MpiHost,
            reason: "complex numbers are not ordered",
        };
        assert_eq!(
            e.to_string(),
            "all_reduce: complex<f64> with max is not supported on the mpi backend: complex numbers are not ordered"
        );
        let e = Error::CountOverflow {
            op: "broadcast",
            count: 1 << 31,
            limit: i32::MAX as usize,
        };
        assert!(e.to_string().contains("2147483648"));
        let e = Error::Unusable {
            op: "barrier",
            timed_out: "all_reduce",
            after: Duration::from_millis(1500),
        };
        assert_eq!(e.op(), "barrier");
        assert_eq!(
            e.to_string(),
            "barrier: the communicator is unusable: all_reduce timed out after 1.5s earlier; abort the job or finalize"
        );
    }
}
