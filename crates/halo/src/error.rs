//! `datatype-pack`'s errors as `collectives-core`'s [`Error`], the one error type of this crate's
//! API.

use collectives_core::Error;

/// A datatype-pack error as this crate's.
pub(crate) fn pack_error(op: &'static str, e: datatype_pack::Error) -> Error {
    match e {
        datatype_pack::Error::LibraryNotFound { library, tried, .. } => Error::Unavailable {
            what: if library == "nvrtc" {
                "NVRTC"
            } else {
                "the CUDA driver"
            },
            message: format!("tried {tried:?}"),
        },
        datatype_pack::Error::Cuda { message, .. } => Error::Cuda { op, message },
        other => Error::invalid(op, other.to_string()),
    }
}
