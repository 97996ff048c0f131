//! The crate's one error type.

use std::ffi::OsString;
use std::fmt;
use std::os::raw::c_int;
use std::path::PathBuf;

use crate::bindings::ncclResult_t;
use crate::version::Version;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The name [`Library::load`](crate::Library::load) is documented with; the same type as [`Error`].
pub type LoadError = Error;

/// One file the loader tried to open, and why the dynamic loader refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The name or path passed to `dlopen`.
    pub file: OsString,
    /// The dynamic loader's message (`dlerror`).
    pub error: String,
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` ({})", self.file.to_string_lossy(), self.error)
    }
}

/// Everything loading NCCL and resolving its entry points can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No candidate file could be opened. Each attempt carries its file and `dlopen` error.
    #[error(
        "could not load NCCL: tried {}; set NCCL_LIBRARY to the path of libnccl.so.2",
        join_attempts(.tried)
    )]
    NotFound {
        /// Every file tried, in order, with its error.
        tried: Vec<Attempt>,
    },
    /// A file opened but does not export `ncclGetVersion`: it is not an NCCL library.
    #[error("{} opened but is not an NCCL library: no `ncclGetVersion` ({message})", .path.display())]
    NotNccl {
        /// The file that opened.
        path: PathBuf,
        /// The dynamic loader's message for the missing symbol.
        message: String,
    },
    /// `ncclGetVersion` returned an error code.
    #[error("ncclGetVersion in {} failed with ncclResult_t {result}", .path.display())]
    VersionQuery {
        /// The library.
        path: PathBuf,
        /// What `ncclGetVersion` returned.
        result: ncclResult_t,
    },
    /// `ncclGetVersion` returned a code that decodes to no version (a negative number).
    #[error("ncclGetVersion in {} returned the invalid version code {code}", .path.display())]
    BadVersionCode {
        /// The library.
        path: PathBuf,
        /// The code it returned.
        code: c_int,
    },
    /// The library is older than the oldest supported release.
    #[error("{} is NCCL {found}, older than NCCL {oldest}, the oldest release supported", .path.display())]
    TooOld {
        /// The library.
        path: PathBuf,
        /// Its version.
        found: Version,
        /// [`OLDEST_SUPPORTED`](crate::OLDEST_SUPPORTED).
        oldest: Version,
    },
    /// The library lacks an entry point that its version should have: one of
    /// [`REQUIRED_SYMBOLS`](crate::REQUIRED_SYMBOLS) at load time, or an optional one whose
    /// introducing release is not newer than the library.
    #[error("{} (NCCL {version}) lacks `{symbol}`: {message}", .path.display())]
    MissingSymbol {
        /// The library.
        path: PathBuf,
        /// Its version.
        version: Version,
        /// The missing entry point.
        symbol: &'static str,
        /// The dynamic loader's message.
        message: String,
    },
    /// An optional entry point that the loaded library is too old to have.
    #[error(
        "`{symbol}` needs NCCL {}.{} or newer; the loaded library is NCCL {found}",
        .needs.major,
        .needs.minor
    )]
    Unsupported {
        /// The entry point.
        symbol: &'static str,
        /// The release that introduced it ([`OPTIONAL_SYMBOLS`](crate::OPTIONAL_SYMBOLS)).
        needs: Version,
        /// The loaded library's version.
        found: Version,
    },
}

fn join_attempts(tried: &[Attempt]) -> String {
    if tried.is_empty() {
        return "no file (the candidate list was empty)".to_owned();
    }
    tried
        .iter()
        .map(Attempt::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_every_file_and_error() {
        let e = Error::NotFound {
            tried: vec![
                Attempt {
                    file: "/a/libnccl.so".into(),
                    error: "no such file".into(),
                },
                Attempt {
                    file: "libnccl.so.2".into(),
                    error: "cannot open shared object file".into(),
                },
            ],
        };
        let text = e.to_string();
        assert!(text.contains("`/a/libnccl.so` (no such file)"), "{text}");
        assert!(
            text.contains("`libnccl.so.2` (cannot open shared object file)"),
            "{text}"
        );
        assert!(text.contains("NCCL_LIBRARY"), "{text}");
    }

    #[test]
    fn empty_candidate_list_is_explained() {
        let text = Error::NotFound { tried: vec![] }.to_string();
        assert!(text.contains("candidate list was empty"), "{text}");
    }

    #[test]
    fn unsupported_names_symbol_and_both_versions() {
        let e = Error::Unsupported {
            symbol: "ncclAlltoAll",
            needs: Version::new(2, 28, 0),
            found: Version::new(2, 18, 5),
        };
        assert_eq!(
            e.to_string(),
            "`ncclAlltoAll` needs NCCL 2.28 or newer; the loaded library is NCCL 2.18.5"
        );
    }
}
