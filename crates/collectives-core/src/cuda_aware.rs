//! Whether the MPI library takes device (CUDA) pointers: decided once per process, with the evidence.
//!
//! Passing a device pointer to an MPI that is not CUDA-aware crashes the process (or, worse, reads
//! garbage), and nothing in the MPI standard before 4.1 says which case one is in. This module gathers
//! what the running MPI and its environment say ([`Facts`]) and decides ([`decide`], a pure function,
//! tested without MPI or GPU):
//!
//! | order | evidence | decides |
//! |---|---|---|
//! | 1 | Open MPI's `MPIX_Query_cuda_support()`, looked up in the process at run time | 1: yes, 0: no |
//! | 2 | MPICH's `MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &flag)`, looked up likewise | flag 1: yes, 0: no |
//! | 3 | MPI 4.1 `mpi_memory_alloc_kinds` info of `MPI_COMM_WORLD`, then of `MPI_INFO_ENV` | a `cuda` kind listed: yes; listed kinds without it: no |
//! | 4 | environment hints of the MPI named by `MPI_Get_library_version` (any, when it names none we know): Cray MPICH `MPICH_GPU_SUPPORT_ENABLED`, MVAPICH `MV2_USE_CUDA`, MPICH `MPIR_CVAR_ENABLE_GPU`, Open MPI `OMPI_MCA_opal_cuda_support` | a false value: no (a false value wins over a true one); a true value: yes |
//! | 5 | nothing of the above | unknown |
//!
//! The library's own answers come first because they are the library's: an environment variable only
//! says what was asked for. The symbols are looked up with `dlsym` on the running process (not linked),
//! so one binary works with Open MPI, MPICH and their derivatives, CUDA-aware or not: on the GPU box
//! the same binary reads 0 under the system `mpirun` and 1 under the CUDA-aware Open MPI.
//!
//! ```no_run
//! use collectives_core::cuda_aware::{self, CudaAwareness};
//!
//! let _universe = mpi::initialize().expect("MPI initializes once");
//! let detection = cuda_aware::detect()?;
//! match &detection.awareness {
//!     CudaAwareness::Yes { source } => println!("CUDA-aware ({source})"),
//!     CudaAwareness::No { reason } => println!("not CUDA-aware ({reason})"),
//!     CudaAwareness::Unknown => println!("cannot tell"),
//!     _ => {}
//! }
//! # Ok::<(), collectives_core::Error>(())
//! ```

use std::ffi::{c_char, c_int, CString};
use std::fmt;
use std::sync::OnceLock;

use mpi::ffi;

use crate::error::{Error, Result};

/// Environment variables that hint at CUDA support, with the MPI family each belongs to.
pub const ENV_HINTS: [(&str, Vendor); 4] = [
    ("MPICH_GPU_SUPPORT_ENABLED", Vendor::CrayMpich),
    ("MV2_USE_CUDA", Vendor::Mvapich),
    ("MPIR_CVAR_ENABLE_GPU", Vendor::Mpich),
    ("OMPI_MCA_opal_cuda_support", Vendor::OpenMpi),
];

/// `MPIX_GPU_SUPPORT_CUDA` of MPICH's `mpi_proto.h`/`mpix.h`.
pub const MPIX_GPU_SUPPORT_CUDA: c_int = 0;

/// The MPI 4.1 info key naming the memory allocation kinds.
pub const MEMORY_ALLOC_KINDS: &str = "mpi_memory_alloc_kinds";

/// The family of an MPI library, from its `MPI_Get_library_version` string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Vendor {
    /// Open MPI.
    OpenMpi,
    /// MPICH (and derivatives not listed separately).
    Mpich,
    /// HPE Cray MPICH.
    CrayMpich,
    /// MVAPICH (MVAPICH2, MVAPICH2-GDR, MVAPICH 3).
    Mvapich,
    /// Intel MPI.
    IntelMpi,
    /// A library not recognized.
    Other,
}

impl Vendor {
    /// The family named by a `MPI_Get_library_version` string.
    pub fn of(library: &str) -> Vendor {
        let s = library.to_ascii_lowercase();
        if s.contains("open mpi") {
            Vendor::OpenMpi
        } else if s.contains("cray mpich") {
            Vendor::CrayMpich
        } else if s.contains("mvapich") {
            Vendor::Mvapich
        } else if s.contains("intel(r) mpi") || s.contains("intel mpi") {
            Vendor::IntelMpi
        } else if s.contains("mpich") {
            Vendor::Mpich
        } else {
            Vendor::Other
        }
    }

    /// A short name.
    pub const fn name(self) -> &'static str {
        match self {
            Vendor::OpenMpi => "Open MPI",
            Vendor::Mpich => "MPICH",
            Vendor::CrayMpich => "Cray MPICH",
            Vendor::Mvapich => "MVAPICH",
            Vendor::IntelMpi => "Intel MPI",
            Vendor::Other => "an MPI not recognized",
        }
    }
}

/// Where a memory-kinds value was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KindsSource {
    /// `MPI_Comm_get_info(MPI_COMM_WORLD)`: the kinds the library supports for the World Model.
    CommWorld,
    /// `MPI_INFO_ENV`.
    InfoEnv,
}

/// One piece of evidence a decision rests on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Evidence {
    /// Open MPI's `MPIX_Query_cuda_support()` returned this value.
    OmpiQuery(i32),
    /// MPICH's `MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &flag)` set `flag` to this value.
    MpichQuery(i32),
    /// The MPI 4.1 `mpi_memory_alloc_kinds` value, and where it was read.
    MemoryKinds {
        /// Where it was read.
        source: KindsSource,
        /// The comma-separated kinds.
        value: String,
    },
    /// An environment variable set to a value read as true or false.
    Env {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Evidence::OmpiQuery(v) => {
                write!(f, "Open MPI's MPIX_Query_cuda_support() returned {v}")
            }
            Evidence::MpichQuery(v) => write!(
                f,
                "MPICH's MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA) reported {v}"
            ),
            Evidence::MemoryKinds { source, value } => {
                let at = match source {
                    KindsSource::CommWorld => "the info of MPI_COMM_WORLD",
                    KindsSource::InfoEnv => "MPI_INFO_ENV",
                };
                write!(f, "{MEMORY_ALLOC_KINDS} = \"{value}\" in {at}")
            }
            Evidence::Env { var, value } => {
                write!(f, "the environment hint {var}={value}")
            }
        }
    }
}

/// Whether the MPI library takes device pointers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CudaAwareness {
    /// It does; `source` is the evidence.
    Yes {
        /// What said so.
        source: Evidence,
    },
    /// It does not; `reason` is the evidence.
    No {
        /// What said so.
        reason: Evidence,
    },
    /// Nothing tells (see [`Facts`] for what was looked at).
    Unknown,
}

impl CudaAwareness {
    /// Whether it is [`CudaAwareness::Yes`].
    pub fn is_yes(&self) -> bool {
        matches!(self, CudaAwareness::Yes { .. })
    }
}

impl fmt::Display for CudaAwareness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaAwareness::Yes { source } => write!(f, "yes ({source})"),
            CudaAwareness::No { reason } => write!(f, "no ({reason})"),
            CudaAwareness::Unknown => f.write_str(
                "unknown (no MPIX query symbol, no memory-kinds info and no environment hint)",
            ),
        }
    }
}

/// What the running MPI and the environment say, as gathered by [`gather`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// `MPI_Get_library_version`, when it answered.
    pub library: Option<String>,
    /// `MPI_Get_version`: the MPI standard the library implements.
    pub standard: Option<(i32, i32)>,
    /// `MPIX_Query_cuda_support()`; `None` when the symbol is absent.
    pub ompi_query: Option<i32>,
    /// The flag of `MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &flag)`; `None` when the symbol is
    /// absent or the call failed.
    pub mpich_query: Option<i32>,
    /// `mpi_memory_alloc_kinds` of `MPI_COMM_WORLD`'s info; `None` when absent.
    pub world_kinds: Option<String>,
    /// `mpi_memory_alloc_kinds` of `MPI_INFO_ENV`; `None` when absent.
    pub env_kinds: Option<String>,
    /// The [`ENV_HINTS`] variables that are set, with their values.
    pub env: Vec<(&'static str, String)>,
}

impl Facts {
    /// The family of the library, from [`Facts::library`].
    pub fn vendor(&self) -> Vendor {
        self.library.as_deref().map_or(Vendor::Other, Vendor::of)
    }

    /// One line per fact, for reports.
    pub fn lines(&self) -> Vec<String> {
        let opt = |v: Option<i32>| v.map_or_else(|| "symbol absent".to_string(), |v| v.to_string());
        let kinds = |v: &Option<String>| {
            v.as_ref()
                .map_or_else(|| "absent".to_string(), |v| format!("\"{v}\""))
        };
        let env = if self.env.is_empty() {
            "none set".to_string()
        } else {
            self.env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        vec![
            format!("MPIX_Query_cuda_support(): {}", opt(self.ompi_query)),
            format!(
                "MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA): {}",
                opt(self.mpich_query)
            ),
            format!(
                "{MEMORY_ALLOC_KINDS}: MPI_COMM_WORLD {}, MPI_INFO_ENV {}",
                kinds(&self.world_kinds),
                kinds(&self.env_kinds)
            ),
            format!("environment hints: {env}"),
        ]
    }
}

/// A decision with the facts it was made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detection {
    /// The decision.
    pub awareness: CudaAwareness,
    /// What it was made from.
    pub facts: Facts,
}

/// Whether a list of memory allocation kinds (`"mpi,system,cuda:device"`) names a CUDA kind.
pub fn kinds_name_cuda(kinds: &str) -> bool {
    kinds.split(',').map(str::trim).any(|k| {
        let base = k.split(':').next().unwrap_or("");
        base.eq_ignore_ascii_case("cuda")
    })
}

/// An environment value read as a boolean: `1/true/yes/on/enabled` or `0/false/no/off/disabled`
/// (any case); `None` for anything else.
pub fn env_flag(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" | "enabled" | "enable" => Some(true),
        "0" | "false" | "no" | "off" | "disabled" | "disable" => Some(false),
        _ => None,
    }
}

/// The decision from the facts: see the [module documentation](self) for the order.
pub fn decide(facts: &Facts) -> CudaAwareness {
    if let Some(v) = facts.ompi_query {
        let source = Evidence::OmpiQuery(v);
        return if v != 0 {
            CudaAwareness::Yes { source }
        } else {
            CudaAwareness::No { reason: source }
        };
    }
    if let Some(v) = facts.mpich_query {
        let source = Evidence::MpichQuery(v);
        return if v != 0 {
            CudaAwareness::Yes { source }
        } else {
            CudaAwareness::No { reason: source }
        };
    }
    for (source, kinds) in [
        (KindsSource::CommWorld, &facts.world_kinds),
        (KindsSource::InfoEnv, &facts.env_kinds),
    ] {
        if let Some(value) = kinds {
            let evidence = Evidence::MemoryKinds {
                source,
                value: value.clone(),
            };
            return if kinds_name_cuda(value) {
                CudaAwareness::Yes { source: evidence }
            } else {
                CudaAwareness::No { reason: evidence }
            };
        }
    }
    let vendor = facts.vendor();
    let relevant = |var: &str| {
        vendor == Vendor::Other
            || ENV_HINTS
                .iter()
                .any(|(name, family)| *name == var && *family == vendor)
    };
    let mut yes = None;
    for (var, value) in &facts.env {
        if !relevant(var) {
            continue;
        }
        let evidence = Evidence::Env {
            var,
            value: value.clone(),
        };
        match env_flag(value) {
            Some(false) => return CudaAwareness::No { reason: evidence },
            Some(true) if yes.is_none() => yes = Some(evidence),
            _ => {}
        }
    }
    match yes {
        Some(source) => CudaAwareness::Yes { source },
        None => CudaAwareness::Unknown,
    }
}

extern "C" {
    fn collectives_mpi_info_env() -> ffi::MPI_Info;
}

/// Whether MPI is initialized and not yet finalized.
pub fn mpi_is_running() -> bool {
    let (mut init, mut fin): (c_int, c_int) = (0, 0);
    // SAFETY: MPI_Initialized and MPI_Finalized may be called at any time, with valid out-pointers.
    unsafe {
        ffi::MPI_Initialized(&mut init);
        ffi::MPI_Finalized(&mut fin);
    }
    init != 0 && fin == 0
}

/// `MPI_Get_library_version`, first line kept whole (MPICH's string has many lines).
pub fn library_version() -> Option<String> {
    // MPI_MAX_LIBRARY_VERSION_STRING is 256 in Open MPI and 8192 in MPICH.
    let mut buf = vec![0u8; 8192 + 1];
    let mut len: c_int = 0;
    // SAFETY: `buf` has room for MPI_MAX_LIBRARY_VERSION_STRING characters of every MPI we know; `len`
    // is a valid out-pointer; the call is allowed before MPI_Init and after MPI_Finalize.
    let rc = unsafe { ffi::MPI_Get_library_version(buf.as_mut_ptr().cast::<c_char>(), &mut len) };
    if rc != 0 {
        return None;
    }
    let n = (len.max(0) as usize).min(buf.len());
    let end = buf[..n].iter().position(|&b| b == 0).unwrap_or(n);
    let text = String::from_utf8_lossy(&buf[..end]);
    let text: String = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    (!text.is_empty()).then_some(text)
}

fn standard_version() -> Option<(i32, i32)> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: valid out-pointers; callable at any time.
    let rc = unsafe { ffi::MPI_Get_version(&mut major, &mut minor) };
    (rc == 0).then_some((major, minor))
}

#[cfg(unix)]
fn ompi_query() -> Option<i32> {
    type QueryFn = unsafe extern "C" fn() -> c_int;
    let this = libloading::os::unix::Library::this();
    // SAFETY: looking up a symbol by name runs no code; the prototype is the one in Open MPI's
    // mpi-ext.h (`int MPIX_Query_cuda_support(void)`).
    let f = unsafe { this.get::<QueryFn>(b"MPIX_Query_cuda_support\0") }.ok()?;
    // SAFETY: Open MPI's function, with its own prototype; MPI is initialized (checked by the caller).
    Some(unsafe { f() })
}

#[cfg(unix)]
fn mpich_query() -> Option<i32> {
    type QueryFn = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
    let this = libloading::os::unix::Library::this();
    // SAFETY: a symbol lookup runs no code; the prototype is MPICH's
    // (`int MPIX_GPU_query_support(int gpu_type, int *is_supported)`).
    let f = unsafe { this.get::<QueryFn>(b"MPIX_GPU_query_support\0") }.ok()?;
    let mut flag: c_int = 0;
    // SAFETY: MPICH's function with its own prototype and a valid out-pointer.
    let rc = unsafe { f(MPIX_GPU_SUPPORT_CUDA, &mut flag) };
    (rc == 0).then_some(flag)
}

#[cfg(not(unix))]
fn ompi_query() -> Option<i32> {
    None
}

#[cfg(not(unix))]
fn mpich_query() -> Option<i32> {
    None
}

/// The value of `key` in `info`, if set.
fn info_value(info: ffi::MPI_Info, key: &str) -> Option<String> {
    let key = CString::new(key).ok()?;
    let (mut len, mut flag): (c_int, c_int) = (0, 0);
    // SAFETY: `info` is a valid info handle (the caller's), `key` NUL-terminated, out-pointers valid.
    let rc = unsafe { ffi::MPI_Info_get_valuelen(info, key.as_ptr(), &mut len, &mut flag) };
    if rc != 0 || flag == 0 || len < 0 {
        return None;
    }
    let mut buf = vec![0u8; len as usize + 1];
    // SAFETY: `buf` has room for `len` characters and the terminating NUL.
    let rc = unsafe {
        ffi::MPI_Info_get(
            info,
            key.as_ptr(),
            len,
            buf.as_mut_ptr().cast::<c_char>(),
            &mut flag,
        )
    };
    if rc != 0 || flag == 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

fn world_kinds() -> Option<String> {
    // SAFETY: an MPI_Info handle may start as any value; MPI_Comm_get_info overwrites it.
    let mut info: ffi::MPI_Info = unsafe { std::mem::zeroed() };
    // SAFETY: MPI_COMM_WORLD is valid while MPI runs (checked by the caller); `info` is an out-pointer.
    let rc = unsafe { ffi::MPI_Comm_get_info(ffi::RSMPI_COMM_WORLD, &mut info) };
    if rc != 0 {
        return None;
    }
    let value = info_value(info, MEMORY_ALLOC_KINDS);
    // SAFETY: the info object was created for us by MPI_Comm_get_info and is freed once.
    unsafe { ffi::MPI_Info_free(&mut info) };
    value
}

fn env_kinds() -> Option<String> {
    // SAFETY: the shim returns MPI_INFO_ENV of the MPI's own header, a predefined handle.
    let info = unsafe { collectives_mpi_info_env() };
    info_value(info, MEMORY_ALLOC_KINDS)
}

/// The [`ENV_HINTS`] variables that are set in this process.
pub fn env_hints() -> Vec<(&'static str, String)> {
    ENV_HINTS
        .iter()
        .filter_map(|(var, _)| std::env::var(var).ok().map(|v| (*var, v)))
        .collect()
}

/// Gather the facts from the running MPI and the environment.
///
/// # Errors
/// [`Error::InvalidArgument`] when MPI is not initialized (or already finalized): the library's
/// answers are only meaningful while it runs.
pub fn gather() -> Result<Facts> {
    if !mpi_is_running() {
        return Err(Error::invalid(
            "cuda_aware",
            "MPI is not initialized (or already finalized); detection needs the running library",
        ));
    }
    Ok(Facts {
        library: library_version(),
        standard: standard_version(),
        ompi_query: ompi_query(),
        mpich_query: mpich_query(),
        world_kinds: world_kinds(),
        env_kinds: env_kinds(),
        env: env_hints(),
    })
}

/// The process's detection, gathered and decided on the first call while MPI runs and kept.
///
/// # Errors
/// As [`gather`], when MPI is not running (nothing is kept then).
pub fn detect() -> Result<&'static Detection> {
    static DETECTION: OnceLock<Detection> = OnceLock::new();
    if let Some(d) = DETECTION.get() {
        return Ok(d);
    }
    let facts = gather()?;
    let awareness = decide(&facts);
    Ok(DETECTION.get_or_init(|| Detection { awareness, facts }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts::default()
    }

    fn env(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn nothing_is_unknown() {
        assert_eq!(decide(&facts()), CudaAwareness::Unknown);
        let f = Facts {
            library: Some("Open MPI v4.1.4".into()),
            ..facts()
        };
        assert_eq!(decide(&f), CudaAwareness::Unknown);
    }

    #[test]
    fn open_mpi_query_decides() {
        let f = Facts {
            ompi_query: Some(1),
            ..facts()
        };
        assert_eq!(
            decide(&f),
            CudaAwareness::Yes {
                source: Evidence::OmpiQuery(1)
            }
        );
        let f = Facts {
            ompi_query: Some(0),
            ..facts()
        };
        assert_eq!(
            decide(&f),
            CudaAwareness::No {
                reason: Evidence::OmpiQuery(0)
            }
        );
        assert!(decide(&f)
            .to_string()
            .contains("MPIX_Query_cuda_support() returned 0"));
    }

    #[test]
    fn library_answers_beat_environment_hints() {
        // The system Open MPI with a hint asking for CUDA: the library's own 0 wins.
        let f = Facts {
            library: Some("Open MPI v4.1.6".into()),
            ompi_query: Some(0),
            env: env(&[("OMPI_MCA_opal_cuda_support", "1")]),
            ..facts()
        };
        assert!(matches!(
            decide(&f),
            CudaAwareness::No {
                reason: Evidence::OmpiQuery(0)
            }
        ));
        // A CUDA-aware Open MPI whose user switched CUDA off: the query already says 0.
        let f = Facts {
            ompi_query: Some(1),
            env: env(&[("MV2_USE_CUDA", "0")]),
            ..facts()
        };
        assert!(decide(&f).is_yes());
    }

    #[test]
    fn mpich_query_decides_when_open_mpi_has_none() {
        let f = Facts {
            library: Some("MPICH Version: 4.2.0".into()),
            mpich_query: Some(1),
            env: env(&[("MPIR_CVAR_ENABLE_GPU", "0")]),
            ..facts()
        };
        assert_eq!(
            decide(&f),
            CudaAwareness::Yes {
                source: Evidence::MpichQuery(1)
            }
        );
        let f = Facts {
            mpich_query: Some(0),
            world_kinds: Some("mpi,system,cuda".into()),
            ..facts()
        };
        assert_eq!(
            decide(&f),
            CudaAwareness::No {
                reason: Evidence::MpichQuery(0)
            }
        );
        // Both present (a library offering both): Open MPI's CUDA-specific query is asked first.
        let f = Facts {
            ompi_query: Some(1),
            mpich_query: Some(0),
            ..facts()
        };
        assert!(decide(&f).is_yes());
    }

    #[test]
    fn memory_kinds_decide_before_hints() {
        let f = Facts {
            world_kinds: Some("mpi,system,cuda:device,cuda:host".into()),
            env: env(&[("MPICH_GPU_SUPPORT_ENABLED", "0")]),
            ..facts()
        };
        assert_eq!(
            decide(&f),
            CudaAwareness::Yes {
                source: Evidence::MemoryKinds {
                    source: KindsSource::CommWorld,
                    value: "mpi,system,cuda:device,cuda:host".into()
                }
            }
        );
        let f = Facts {
            world_kinds: Some("mpi,system".into()),
            env_kinds: Some("cuda".into()),
            ..facts()
        };
        assert!(matches!(
            decide(&f),
            CudaAwareness::No {
                reason: Evidence::MemoryKinds {
                    source: KindsSource::CommWorld,
                    ..
                }
            }
        ));
        let f = Facts {
            env_kinds: Some("system, CUDA:managed".into()),
            ..facts()
        };
        assert!(matches!(
            decide(&f),
            CudaAwareness::Yes {
                source: Evidence::MemoryKinds {
                    source: KindsSource::InfoEnv,
                    ..
                }
            }
        ));
        // An empty value is "no memory kinds at all".
        let f = Facts {
            world_kinds: Some(String::new()),
            ..facts()
        };
        assert!(matches!(decide(&f), CudaAwareness::No { .. }));
    }

    #[test]
    fn kinds_parse() {
        assert!(kinds_name_cuda("cuda"));
        assert!(kinds_name_cuda("mpi, system ,cuda:device"));
        assert!(kinds_name_cuda("CUDA:host"));
        assert!(!kinds_name_cuda("mpi,system,rocm:device,level_zero"));
        assert!(!kinds_name_cuda("cudax,notcuda"));
        assert!(!kinds_name_cuda(""));
    }

    #[test]
    fn env_flags_parse() {
        for v in ["1", "true", "YES", " on ", "Enabled"] {
            assert_eq!(env_flag(v), Some(true), "{v}");
        }
        for v in ["0", "false", "No", "off", "disabled"] {
            assert_eq!(env_flag(v), Some(false), "{v}");
        }
        for v in ["", "2", "maybe", "cuda"] {
            assert_eq!(env_flag(v), None, "{v}");
        }
    }

    #[test]
    fn cray_hint_decides_on_cray_mpich() {
        let cray = "MPI VERSION    : CRAY MPICH version 8.1.28.2 (ANL base 3.4a2)";
        assert_eq!(Vendor::of(cray), Vendor::CrayMpich);
        let f = Facts {
            library: Some(cray.into()),
            env: env(&[("MPICH_GPU_SUPPORT_ENABLED", "1")]),
            ..facts()
        };
        assert_eq!(
            decide(&f),
            CudaAwareness::Yes {
                source: Evidence::Env {
                    var: "MPICH_GPU_SUPPORT_ENABLED",
                    value: "1".into()
                }
            }
        );
        // Unset or 0 on Cray: Cray MPICH needs it set to use device pointers.
        let f = Facts {
            library: Some(cray.into()),
            env: env(&[("MPICH_GPU_SUPPORT_ENABLED", "0")]),
            ..facts()
        };
        assert!(matches!(decide(&f), CudaAwareness::No { .. }));
        // Another MPI's variable says nothing about Cray MPICH.
        let f = Facts {
            library: Some(cray.into()),
            env: env(&[("MV2_USE_CUDA", "1")]),
            ..facts()
        };
        assert_eq!(decide(&f), CudaAwareness::Unknown);
    }

    #[test]
    fn mvapich_and_mpich_hints() {
        let f = Facts {
            library: Some("MVAPICH2-GDR Version 2.3.7".into()),
            env: env(&[("MV2_USE_CUDA", "1"), ("MPIR_CVAR_ENABLE_GPU", "0")]),
            ..facts()
        };
        assert!(matches!(
            decide(&f),
            CudaAwareness::Yes {
                source: Evidence::Env {
                    var: "MV2_USE_CUDA",
                    ..
                }
            }
        ));
        let f = Facts {
            library: Some("MPICH Version:\t3.3.2\nMPICH Release date: ...".into()),
            env: env(&[("MPIR_CVAR_ENABLE_GPU", "0"), ("MV2_USE_CUDA", "1")]),
            ..facts()
        };
        assert!(matches!(
            decide(&f),
            CudaAwareness::No {
                reason: Evidence::Env {
                    var: "MPIR_CVAR_ENABLE_GPU",
                    ..
                }
            }
        ));
    }

    #[test]
    fn unknown_library_weighs_every_hint_and_false_wins() {
        let f = Facts {
            library: None,
            env: env(&[("MV2_USE_CUDA", "1"), ("MPICH_GPU_SUPPORT_ENABLED", "0")]),
            ..facts()
        };
        assert!(matches!(
            decide(&f),
            CudaAwareness::No {
                reason: Evidence::Env {
                    var: "MPICH_GPU_SUPPORT_ENABLED",
                    ..
                }
            }
        ));
        let f = Facts {
            library: Some("Some Vendor MPI 1.0".into()),
            env: env(&[("MPIR_CVAR_ENABLE_GPU", "garbage"), ("MV2_USE_CUDA", "yes")]),
            ..facts()
        };
        assert!(decide(&f).is_yes());
        let f = Facts {
            env: env(&[("MPIR_CVAR_ENABLE_GPU", "garbage")]),
            ..facts()
        };
        assert_eq!(decide(&f), CudaAwareness::Unknown);
    }

    #[test]
    fn open_mpi_hint_when_the_query_is_missing() {
        let f = Facts {
            library: Some("Open MPI v3.0.0".into()),
            env: env(&[("OMPI_MCA_opal_cuda_support", "true")]),
            ..facts()
        };
        assert!(decide(&f).is_yes());
        let f = Facts {
            library: Some("Open MPI v3.0.0".into()),
            env: env(&[
                ("OMPI_MCA_opal_cuda_support", "0"),
                ("MPICH_GPU_SUPPORT_ENABLED", "1"),
            ]),
            ..facts()
        };
        assert!(matches!(decide(&f), CudaAwareness::No { .. }));
    }

    #[test]
    fn vendors_from_version_strings() {
        assert_eq!(
            Vendor::of("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4"),
            Vendor::OpenMpi
        );
        assert_eq!(Vendor::of("MPICH Version: 4.1.2"), Vendor::Mpich);
        assert_eq!(Vendor::of("MVAPICH Version 3.0"), Vendor::Mvapich);
        assert_eq!(
            Vendor::of("Intel(R) MPI Library 2021.10 for Linux* OS"),
            Vendor::IntelMpi
        );
        assert_eq!(Vendor::of("whatever"), Vendor::Other);
    }

    #[test]
    fn facts_render_and_evidence_names_its_source() {
        let f = Facts {
            ompi_query: Some(0),
            env: env(&[("MV2_USE_CUDA", "1")]),
            ..facts()
        };
        let lines = f.lines();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].ends_with(": 0"));
        assert!(lines[1].ends_with("symbol absent"));
        assert!(lines[2].contains("MPI_COMM_WORLD absent"));
        assert!(lines[3].contains("MV2_USE_CUDA=1"));
        let e = Evidence::MemoryKinds {
            source: KindsSource::InfoEnv,
            value: "mpi".into(),
        };
        assert_eq!(
            e.to_string(),
            "mpi_memory_alloc_kinds = \"mpi\" in MPI_INFO_ENV"
        );
        assert!(CudaAwareness::Unknown.to_string().starts_with("unknown"));
    }

    #[test]
    fn detection_needs_a_running_mpi() {
        // Unit tests never start MPI.
        assert!(!mpi_is_running());
        assert!(matches!(gather(), Err(Error::InvalidArgument { .. })));
        assert!(detect().is_err());
    }
}
