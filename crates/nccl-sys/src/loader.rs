//! Finding libnccl at run time, checking it, and resolving its entry points.
//!
//! [`Library::load`] opens the first of `$NCCL_LIBRARY`, `libnccl.so.2`, `libnccl.so` that the
//! dynamic loader accepts, asks it for its version, refuses releases older than
//! [`OLDEST_SUPPORTED`] and libraries missing any of [`REQUIRED_SYMBOLS`], and keeps every other
//! entry point the pinned header declares as an optional one: resolving an optional entry point
//! the library lacks is an [`Error::Unsupported`] naming the release that introduced it
//! ([`OPTIONAL_SYMBOLS`]).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::bindings::ncclSuccess;
use crate::error::{Attempt, Error, Result};
use crate::functions::Nccl;
use crate::version::Version;

/// Environment variable naming the NCCL library to try first (a path or a file name).
pub const LIBRARY_ENV: &str = "NCCL_LIBRARY";

/// File names tried after `$NCCL_LIBRARY`, in order.
pub const DEFAULT_CANDIDATES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// The oldest NCCL release this crate loads.
pub const OLDEST_SUPPORTED: Version = Version::new(2, 18, 0);

/// Entry points every supported release (2.18 and later) exports; loading fails without them.
pub const REQUIRED_SYMBOLS: &[&str] = &[
    "ncclGetVersion",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommSplit",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclCommFinalize",
    "ncclCommGetAsyncError",
    "ncclCommCount",
    "ncclCommCuDevice",
    "ncclCommUserRank",
    "ncclGetErrorString",
    "ncclGetLastError",
    "ncclAllReduce",
    "ncclBroadcast",
    "ncclReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclSend",
    "ncclRecv",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclRedOpCreatePreMulSum",
    "ncclRedOpDestroy",
];

/// The other entry points of the pinned header, each with the release series that introduced
/// it, as `major.minor.0`.
///
/// Read from the `nccl.h` of the first release of each series published as a wheel
/// (2.18.1, 2.19.3, 2.20.5, 2.21.5, 2.22.3, 2.23.4, 2.24.3, 2.25.1, 2.26.2, 2.27.3, 2.28.3,
/// 2.29.2, 2.30.3, 2.31.2, 2.32.3): an entry point is listed under the first series whose header
/// declares it. One added in a later patch release of the series before (say 2.27.5) would be
/// listed one series late; the table only words the error, since whether an entry point exists is
/// always decided by the loaded library itself. `ncclCommInitAll` and `ncclBcast` are older than
/// any supported release and listed with [`OLDEST_SUPPORTED`].
pub const OPTIONAL_SYMBOLS: &[(&str, Version)] = &[
    ("ncclCommInitAll", OLDEST_SUPPORTED),
    ("ncclBcast", OLDEST_SUPPORTED),
    ("ncclMemAlloc", Version::new(2, 19, 0)),
    ("ncclMemFree", Version::new(2, 19, 0)),
    ("ncclCommRegister", Version::new(2, 19, 0)),
    ("ncclCommDeregister", Version::new(2, 19, 0)),
    ("ncclGroupSimulateEnd", Version::new(2, 22, 0)),
    ("ncclCommInitRankScalable", Version::new(2, 23, 0)),
    ("ncclCommShrink", Version::new(2, 27, 0)),
    ("ncclCommWindowRegister", Version::new(2, 27, 0)),
    ("ncclCommWindowDeregister", Version::new(2, 27, 0)),
    ("ncclAlltoAll", Version::new(2, 28, 0)),
    ("ncclGather", Version::new(2, 28, 0)),
    ("ncclScatter", Version::new(2, 28, 0)),
    ("ncclCommRevoke", Version::new(2, 29, 0)),
    ("ncclCommGetUniqueId", Version::new(2, 29, 0)),
    ("ncclCommGrow", Version::new(2, 29, 0)),
    ("ncclWinGetUserPtr", Version::new(2, 29, 0)),
    ("ncclPutSignal", Version::new(2, 29, 0)),
    ("ncclSignal", Version::new(2, 29, 0)),
    ("ncclWaitSignal", Version::new(2, 29, 0)),
    ("ncclCommSuspend", Version::new(2, 30, 0)),
    ("ncclCommResume", Version::new(2, 30, 0)),
    ("ncclCommMemStats", Version::new(2, 30, 0)),
    ("ncclAllReduceConfig", Version::new(2, 31, 0)),
    ("ncclBroadcastConfig", Version::new(2, 31, 0)),
    ("ncclReduceConfig", Version::new(2, 31, 0)),
    ("ncclAllGatherConfig", Version::new(2, 31, 0)),
    ("ncclReduceScatterConfig", Version::new(2, 31, 0)),
    ("ncclAlltoAllConfig", Version::new(2, 31, 0)),
    ("ncclGatherConfig", Version::new(2, 31, 0)),
    ("ncclScatterConfig", Version::new(2, 31, 0)),
    ("ncclParamBind", Version::new(2, 31, 0)),
    ("ncclParamGetI8", Version::new(2, 31, 0)),
    ("ncclParamGetI16", Version::new(2, 31, 0)),
    ("ncclParamGetI32", Version::new(2, 31, 0)),
    ("ncclParamGetI64", Version::new(2, 31, 0)),
    ("ncclParamGetU8", Version::new(2, 31, 0)),
    ("ncclParamGetU16", Version::new(2, 31, 0)),
    ("ncclParamGetU32", Version::new(2, 31, 0)),
    ("ncclParamGetU64", Version::new(2, 31, 0)),
    ("ncclParamGetStr", Version::new(2, 31, 0)),
    ("ncclParamGet", Version::new(2, 31, 0)),
    ("ncclParamGetParameter", Version::new(2, 31, 0)),
    ("ncclParamGetAllParameterKeys", Version::new(2, 31, 0)),
    ("ncclParamDumpAll", Version::new(2, 31, 0)),
    ("ncclSetEncryption", Version::new(2, 32, 0)),
];

/// The oldest release that has `symbol`: [`OLDEST_SUPPORTED`] for [`REQUIRED_SYMBOLS`], the
/// [`OPTIONAL_SYMBOLS`] entry otherwise, `None` for a name the pinned header does not declare.
pub fn symbol_introduced_in(symbol: &str) -> Option<Version> {
    if REQUIRED_SYMBOLS.contains(&symbol) {
        return Some(OLDEST_SUPPORTED);
    }
    OPTIONAL_SYMBOLS
        .iter()
        .find(|(name, _)| *name == symbol)
        .map(|&(_, version)| version)
}

/// A loaded and checked libnccl.
///
/// It holds the library open for as long as it lives; [`library()`] keeps one for the whole
/// process. Entry points are resolved with [`nccl_fn!`](crate::nccl_fn).
pub struct Library {
    table: Nccl,
    version: Version,
    path: PathBuf,
}

// A `Library` is shared through a `static`.
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Library>();
};

impl fmt::Debug for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Library")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Library {
    /// The files [`Library::load`] tries, in order: `$NCCL_LIBRARY` when it is set and not empty,
    /// then [`DEFAULT_CANDIDATES`].
    pub fn candidates() -> Vec<OsString> {
        candidates_from(std::env::var_os(LIBRARY_ENV))
    }

    /// Loads NCCL from the first of [`Library::candidates`] that opens.
    ///
    /// # Errors
    ///
    /// As [`Library::load_from`].
    pub fn load() -> Result<Self> {
        Self::load_from(&Self::candidates())
    }

    /// Loads NCCL from the first of `candidates` (paths, or file names searched the dynamic
    /// loader's way) that the dynamic loader opens, then checks it. A file that opens but fails
    /// a check is the answer: later candidates are not tried.
    ///
    /// # Errors
    ///
    /// - [`Error::NotFound`] when no candidate opens, naming every file tried and its error;
    /// - [`Error::NotNccl`] when the file has no `ncclGetVersion`;
    /// - [`Error::VersionQuery`] or [`Error::BadVersionCode`] when its version cannot be read;
    /// - [`Error::TooOld`] for a release older than [`OLDEST_SUPPORTED`];
    /// - [`Error::MissingSymbol`] when it lacks one of [`REQUIRED_SYMBOLS`].
    pub fn load_from<S: AsRef<OsStr>>(candidates: &[S]) -> Result<Self> {
        let mut tried = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            let file = candidate.as_ref();
            // SAFETY: opening the library runs its initialisers. The candidates are NCCL's own
            // file names or the file the user chose through NCCL_LIBRARY; NCCL's initialisers
            // have no preconditions on the calling process.
            match unsafe { libloading::Library::new(file) } {
                Ok(opened) => return Self::check(opened, PathBuf::from(file)),
                Err(e) => tried.push(Attempt {
                    file: file.to_owned(),
                    error: e.to_string(),
                }),
            }
        }
        Err(Error::NotFound { tried })
    }

    /// Resolves every entry point of `opened`, reads its version and checks it.
    fn check(opened: libloading::Library, path: PathBuf) -> Result<Self> {
        let table = resolve_table(opened, &path)?;
        let get_version = match &table.ncclGetVersion {
            Ok(f) => *f,
            Err(e) => {
                return Err(Error::NotNccl {
                    path,
                    message: e.to_string(),
                })
            }
        };
        let mut code: c_int = 0;
        // SAFETY: ncclGetVersion(int*) only stores NCCL_VERSION_CODE through its argument, which
        // points to a live, writable c_int; it needs no CUDA context.
        let result = unsafe { get_version(&mut code) };
        if result != ncclSuccess {
            return Err(Error::VersionQuery { path, result });
        }
        let version = Version::from_code(code).ok_or(Error::BadVersionCode {
            path: path.clone(),
            code,
        })?;
        if version < OLDEST_SUPPORTED {
            return Err(Error::TooOld {
                path,
                found: version,
                oldest: OLDEST_SUPPORTED,
            });
        }
        if let Some((symbol, message)) = first_missing_required(&table) {
            return Err(Error::MissingSymbol {
                path,
                version,
                symbol,
                message,
            });
        }
        Ok(Library {
            table,
            version,
            path,
        })
    }

    /// The release of the loaded library, from `ncclGetVersion` at load time.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The candidate that opened (as given: a path, or a file name the dynamic loader searched for).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The function pointer `slot` selects from the resolved table, or why there is none.
    ///
    /// This is what [`nccl_fn!`](crate::nccl_fn) expands to, with `symbol` the name of the field
    /// `slot` reads; call it through the macro, which keeps the two in step.
    ///
    /// # Errors
    ///
    /// When the library lacks the entry point: [`Error::Unsupported`] if the library is older
    /// than the release that introduced it ([`symbol_introduced_in`]), else
    /// [`Error::MissingSymbol`].
    pub fn resolve<F: Copy>(
        &self,
        symbol: &'static str,
        slot: impl FnOnce(&Nccl) -> &std::result::Result<F, libloading::Error>,
    ) -> Result<F> {
        match slot(&self.table) {
            Ok(f) => Ok(*f),
            Err(e) => Err(self.missing(symbol, e.to_string())),
        }
    }

    /// The error for an entry point the library does not export.
    fn missing(&self, symbol: &'static str, message: String) -> Error {
        match symbol_introduced_in(symbol) {
            Some(needs) if self.version < needs => Error::Unsupported {
                symbol,
                needs,
                found: self.version,
            },
            _ => Error::MissingSymbol {
                path: self.path.clone(),
                version: self.version,
                symbol,
                message,
            },
        }
    }

    /// A `Library` over any opened file, with a version given instead of read: it skips every
    /// check, so that tests can drive [`Library::resolve`] with a library that is not NCCL.
    #[cfg(test)]
    fn unchecked(opened: libloading::Library, path: PathBuf, version: Version) -> Result<Self> {
        Ok(Library {
            table: resolve_table(opened, &path)?,
            version,
            path,
        })
    }
}

/// Looks up every entry point of the pinned header in `opened`; a missing one is kept as an
/// error in its slot.
fn resolve_table(opened: libloading::Library, path: &Path) -> Result<Nccl> {
    // SAFETY: each symbol is read as a function pointer with the prototype that the pinned
    // nccl.h declares under that name; those prototypes are unchanged in every release from 2.18
    // to the pinned one (HEADER.md). Nothing is called here.
    unsafe { Nccl::from_library(opened) }.map_err(|e| Error::NotNccl {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// `$NCCL_LIBRARY` (when set and not empty), then [`DEFAULT_CANDIDATES`].
fn candidates_from(env: Option<OsString>) -> Vec<OsString> {
    env.filter(|value| !value.is_empty())
        .into_iter()
        .chain(DEFAULT_CANDIDATES.iter().map(OsString::from))
        .collect()
}

/// The first of [`REQUIRED_SYMBOLS`] that `table` lacks, with the dynamic loader's message.
fn first_missing_required(table: &Nccl) -> Option<(&'static str, String)> {
    macro_rules! check {
        ($($name:ident),* $(,)?) => {{
            // Keep this list and REQUIRED_SYMBOLS in step.
            const NAMES: &[&str] = &[$(::core::stringify!($name)),*];
            debug_assert_eq!(NAMES, REQUIRED_SYMBOLS);
            $(
                if let Err(e) = &table.$name {
                    return Some((::core::stringify!($name), e.to_string()));
                }
            )*
            None
        }};
    }
    check!(
        ncclGetVersion,
        ncclGetUniqueId,
        ncclCommInitRank,
        ncclCommInitRankConfig,
        ncclCommSplit,
        ncclCommDestroy,
        ncclCommAbort,
        ncclCommFinalize,
        ncclCommGetAsyncError,
        ncclCommCount,
        ncclCommCuDevice,
        ncclCommUserRank,
        ncclGetErrorString,
        ncclGetLastError,
        ncclAllReduce,
        ncclBroadcast,
        ncclReduce,
        ncclAllGather,
        ncclReduceScatter,
        ncclSend,
        ncclRecv,
        ncclGroupStart,
        ncclGroupEnd,
        ncclRedOpCreatePreMulSum,
        ncclRedOpDestroy,
    )
}

/// The process-wide NCCL library: the first successful [`Library::load`], kept for the life of
/// the process. A failed load is not remembered; the next call tries again.
///
/// # Errors
///
/// As [`Library::load`].
pub fn library() -> Result<&'static Library> {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    if let Some(loaded) = LIBRARY.get() {
        return Ok(loaded);
    }
    let loaded = Library::load()?;
    // Two threads may both load; the first stored wins and the other copy is closed.
    Ok(LIBRARY.get_or_init(|| loaded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::{NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH};
    use crate::nccl_fn;

    #[test]
    fn candidates_put_the_environment_first() {
        assert_eq!(
            candidates_from(Some("/nonexistent/libnccl.so".into())),
            ["/nonexistent/libnccl.so", "libnccl.so.2", "libnccl.so"]
        );
        assert_eq!(candidates_from(None), ["libnccl.so.2", "libnccl.so"]);
        assert_eq!(
            candidates_from(Some(OsString::new())),
            ["libnccl.so.2", "libnccl.so"]
        );
    }

    #[test]
    fn failed_load_names_every_file_tried_and_its_error() {
        let err = Library::load_from(&["/nonexistent/a.so", "/nonexistent/b.so"]).unwrap_err();
        let Error::NotFound { tried } = &err else {
            panic!("expected NotFound, got {err:?}");
        };
        let files: Vec<_> = tried.iter().map(|a| a.file.clone()).collect();
        assert_eq!(files, ["/nonexistent/a.so", "/nonexistent/b.so"]);
        for attempt in tried {
            assert!(
                attempt.error.contains(&*attempt.file.to_string_lossy()),
                "dlopen's message names the file: {attempt}"
            );
        }
        let text = err.to_string();
        assert!(text.contains("/nonexistent/a.so"), "{text}");
        assert!(text.contains("/nonexistent/b.so"), "{text}");
    }

    #[test]
    fn empty_candidate_list_is_not_found() {
        let none: [&str; 0] = [];
        assert_eq!(
            Library::load_from(&none).unwrap_err(),
            Error::NotFound { tried: vec![] }
        );
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    mod with_libc {
        //! libc stands in for a library that opens but lacks NCCL's entry points.
        use super::*;

        const LIBC: &str = "libc.so.6";

        fn fake(version: Version) -> Library {
            // SAFETY: libc is already loaded into every process; opening it again runs nothing.
            let opened = unsafe { libloading::Library::new(LIBC) }.expect("libc.so.6 opens");
            Library::unchecked(opened, PathBuf::from(LIBC), version).expect("table resolves")
        }

        #[test]
        fn a_library_without_ncclgetversion_is_not_nccl() {
            let err = Library::load_from(&["/nonexistent/libnccl.so", LIBC]).unwrap_err();
            match err {
                Error::NotNccl { path, message } => {
                    assert_eq!(path, Path::new(LIBC));
                    assert!(message.contains("ncclGetVersion"), "{message}");
                }
                other => panic!("expected NotNccl, got {other:?}"),
            }
        }

        #[test]
        fn optional_symbol_newer_than_the_library_is_unsupported_with_its_release() {
            let lib = fake(Version::new(2, 18, 3));
            assert_eq!(
                nccl_fn!(&lib, ncclAlltoAll).map(|_| ()),
                Err(Error::Unsupported {
                    symbol: "ncclAlltoAll",
                    needs: Version::new(2, 28, 0),
                    found: Version::new(2, 18, 3),
                })
            );
            let err = nccl_fn!(&lib, ncclCommShrink).map(|_| ()).unwrap_err();
            assert_eq!(
                err.to_string(),
                "`ncclCommShrink` needs NCCL 2.27 or newer; the loaded library is NCCL 2.18.3"
            );
        }

        #[test]
        fn registration_entry_points_name_the_release_that_has_them() {
            // Buffer registration and ncclMemAlloc came in 2.19, windows in 2.27: on a library
            // older than each, resolving it is Unsupported with that release, never a crash.
            let lib = fake(Version::new(2, 18, 1));
            for (symbol, resolved) in [
                ("ncclMemAlloc", nccl_fn!(&lib, ncclMemAlloc).map(|_| ())),
                ("ncclMemFree", nccl_fn!(&lib, ncclMemFree).map(|_| ())),
                (
                    "ncclCommRegister",
                    nccl_fn!(&lib, ncclCommRegister).map(|_| ()),
                ),
                (
                    "ncclCommDeregister",
                    nccl_fn!(&lib, ncclCommDeregister).map(|_| ()),
                ),
            ] {
                assert_eq!(
                    resolved,
                    Err(Error::Unsupported {
                        symbol,
                        needs: Version::new(2, 19, 0),
                        found: Version::new(2, 18, 1),
                    })
                );
            }
            let lib = fake(Version::new(2, 26, 6));
            let err = nccl_fn!(&lib, ncclCommWindowRegister)
                .map(|_| ())
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                "`ncclCommWindowRegister` needs NCCL 2.27 or newer; the loaded library is NCCL 2.26.6"
            );
            assert!(matches!(
                nccl_fn!(&lib, ncclCommWindowDeregister).map(|_| ()),
                Err(Error::Unsupported { needs, .. }) if needs == Version::new(2, 27, 0)
            ));
        }

        #[test]
        fn optional_symbol_the_version_should_have_is_missing() {
            let lib = fake(Version::new(2, 28, 3));
            match nccl_fn!(&lib, ncclAlltoAll).map(|_| ()) {
                Err(Error::MissingSymbol {
                    symbol,
                    version,
                    path,
                    message,
                }) => {
                    assert_eq!(symbol, "ncclAlltoAll");
                    assert_eq!(version, Version::new(2, 28, 3));
                    assert_eq!(path, Path::new(LIBC));
                    assert!(message.contains("ncclAlltoAll"), "{message}");
                }
                other => panic!("expected MissingSymbol, got {other:?}"),
            }
        }

        #[test]
        fn required_symbol_check_names_the_first_missing_one() {
            let lib = fake(Version::new(2, 18, 0));
            let (symbol, message) = first_missing_required(&lib.table).expect("libc lacks them");
            assert_eq!(symbol, "ncclGetVersion");
            assert!(message.contains("ncclGetVersion"), "{message}");
        }
    }

    /// Names of the entry points in the generated table, in header order.
    fn generated_symbols() -> Vec<&'static str> {
        include_str!("functions.rs")
            .split("__library.get(b\"")
            .skip(1)
            .map(|rest| rest.split("\\0").next().expect("symbol literal"))
            .collect()
    }

    #[test]
    fn every_generated_entry_point_is_required_or_optional_exactly_once() {
        let generated = generated_symbols();
        assert!(generated.len() > REQUIRED_SYMBOLS.len(), "{generated:?}");
        let optional: Vec<&str> = OPTIONAL_SYMBOLS.iter().map(|(name, _)| *name).collect();
        for name in &generated {
            let n = REQUIRED_SYMBOLS.iter().filter(|s| *s == name).count()
                + optional.iter().filter(|s| *s == name).count();
            assert_eq!(n, 1, "{name} is listed {n} times");
        }
        for name in REQUIRED_SYMBOLS.iter().chain(&optional) {
            assert!(generated.contains(name), "{name} is not in the header");
        }
    }

    #[test]
    fn introduction_releases_lie_between_the_oldest_supported_and_the_header() {
        let header = Version::new(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
        for (name, since) in OPTIONAL_SYMBOLS {
            assert!(*since >= OLDEST_SUPPORTED, "{name}: {since}");
            assert!(
                *since <= header,
                "{name}: {since} is newer than the header {header}"
            );
            assert_eq!(since.patch, 0, "{name}: releases are series, x.y.0");
        }
        assert_eq!(
            symbol_introduced_in("ncclAllReduce"),
            Some(OLDEST_SUPPORTED)
        );
        assert_eq!(
            symbol_introduced_in("ncclAlltoAll"),
            Some(Version::new(2, 28, 0))
        );
        assert_eq!(symbol_introduced_in("ncclNoSuchThing"), None);
    }

    #[test]
    #[ignore = "needs libnccl (the GPU box has it)"]
    fn loads_the_installed_nccl() {
        let lib = library().expect("libnccl loads");
        let version = lib.version();
        assert!(version >= OLDEST_SUPPORTED, "{version}");
        println!("loaded NCCL {version} from {}", lib.path().display());

        let get_version = nccl_fn!(lib, ncclGetVersion).expect("required");
        let mut code = 0;
        // SAFETY: `code` is a live, writable c_int.
        assert_eq!(unsafe { get_version(&mut code) }, ncclSuccess);
        assert_eq!(Version::from_code(code), Some(version));

        let error_string = nccl_fn!(lib, ncclGetErrorString).expect("required");
        // SAFETY: ncclGetErrorString takes any ncclResult_t and returns a static C string.
        let text = unsafe { std::ffi::CStr::from_ptr(error_string(ncclSuccess)) };
        println!("ncclGetErrorString(ncclSuccess) = {text:?}");
        assert!(!text.to_bytes().is_empty());

        // Every optional entry point is present exactly when the table says the library is new
        // enough: this checks OPTIONAL_SYMBOLS against a real library.
        let mut checked = Vec::new();
        let mut check = |name: &'static str, resolved: Result<()>| {
            let since = symbol_introduced_in(name).expect("listed");
            println!("{name:<30} since {since}: {resolved:?}");
            if version >= since {
                assert_eq!(resolved, Ok(()), "{name}");
            } else {
                assert!(
                    matches!(resolved, Err(Error::Unsupported { symbol, needs, found })
                        if symbol == name && needs == since && found == version),
                    "{name}: {resolved:?}"
                );
            }
            checked.push(name);
        };
        macro_rules! check_all {
            ($($name:ident),* $(,)?) => {
                $(check(::core::stringify!($name), nccl_fn!(lib, $name).map(|_| ()));)*
            };
        }
        check_all!(
            ncclCommInitAll,
            ncclBcast,
            ncclMemAlloc,
            ncclMemFree,
            ncclCommRegister,
            ncclCommDeregister,
            ncclGroupSimulateEnd,
            ncclCommInitRankScalable,
            ncclCommShrink,
            ncclCommWindowRegister,
            ncclCommWindowDeregister,
            ncclAlltoAll,
            ncclGather,
            ncclScatter,
            ncclCommRevoke,
            ncclCommGetUniqueId,
            ncclCommGrow,
            ncclWinGetUserPtr,
            ncclPutSignal,
            ncclSignal,
            ncclWaitSignal,
            ncclCommSuspend,
            ncclCommResume,
            ncclCommMemStats,
            ncclAllReduceConfig,
            ncclBroadcastConfig,
            ncclReduceConfig,
            ncclAllGatherConfig,
            ncclReduceScatterConfig,
            ncclAlltoAllConfig,
            ncclGatherConfig,
            ncclScatterConfig,
            ncclParamBind,
            ncclParamGetI8,
            ncclParamGetI16,
            ncclParamGetI32,
            ncclParamGetI64,
            ncclParamGetU8,
            ncclParamGetU16,
            ncclParamGetU32,
            ncclParamGetU64,
            ncclParamGetStr,
            ncclParamGet,
            ncclParamGetParameter,
            ncclParamGetAllParameterKeys,
            ncclParamDumpAll,
            ncclSetEncryption,
        );
        let listed: Vec<&str> = OPTIONAL_SYMBOLS.iter().map(|(name, _)| *name).collect();
        assert_eq!(checked, listed);

        assert!(
            std::ptr::eq(lib, library().expect("cached")),
            "library() keeps the first load"
        );
    }
}
