//! The interposer's error type. No error leaves the crate: each one sends its call through to
//! the real MPI (or, after a receive completed, is the call's error code), and is logged.

use datatype_pack::gpu::cudarc::driver::sys;

/// What went wrong on the interposer's own path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Decoding, planning, packing or compiling in datatype-pack.
    #[error(transparent)]
    Pack(#[from] datatype_pack::Error),
    /// A CUDA driver call failed.
    #[error("{op}: {call} failed: {message}")]
    Cuda {
        /// The interposer's operation.
        op: &'static str,
        /// The driver call.
        call: &'static str,
        /// The driver's error.
        message: String,
    },
    /// Something the interposer does not take on.
    #[error("{op}: {message}")]
    Unsupported {
        /// The interposer's operation.
        op: &'static str,
        /// Why.
        message: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A driver result code as a `Result`.
pub(crate) fn cuda(call: &'static str, rc: sys::CUresult) -> Result<()> {
    if rc == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            op: "driver",
            call,
            message: format!("{rc:?}"),
        })
    }
}
