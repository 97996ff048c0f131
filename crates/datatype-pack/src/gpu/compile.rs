//! NVRTC compilation and the module cache: [`compile()`] keeps every image in memory, keyed by
//! (source, architecture, options), and in the directory [`CACHE_ENV`] names when it is set.

use rustc_hash::FxHashMap;
use std::ffi::{c_char, CString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::codegen::Fnv64;
use crate::error::{invalid, Error, Result};

use super::driver::{guard, probe_library};

/// Environment variable naming the on-disk cache directory of compiled kernels.
pub const CACHE_ENV: &str = "DATATYPE_PACK_CACHE";

/// Checks once per process that the NVRTC library (`libnvrtc`) can be opened.
///
/// # Errors
/// [`Error::LibraryNotFound`] with every file name tried.
pub fn nvrtc_available() -> Result<()> {
    static PROBE: OnceLock<Result<()>> = OnceLock::new();
    probe_library(
        &PROBE,
        // SAFETY: as in `driver_available`: the library is opened and closed, nothing called.
        || unsafe { cudarc::nvrtc::sys::is_culib_present() },
        ("gpu::nvrtc_available", "nvrtc", &["nvrtc"]),
    )
    .clone()
}

/// NVRTC's version, `(major, minor)`.
///
/// # Errors
/// [`Error::LibraryNotFound`] without NVRTC; [`Error::Cuda`] if the call fails.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    const OP: &str = "gpu::nvrtc_version";
    nvrtc_available()?;
    guard(OP, || {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: the library is loaded (checked above); both pointers are valid for writes.
        let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        r.result().map_err(|e| Error::Cuda {
            op: OP,
            message: format!("{e:?}"),
        })?;
        Ok((major, minor))
    })
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    source: String,
    arch: String,
    options: Vec<String>,
}

pub(super) fn memory_cache() -> MutexGuard<'static, FxHashMap<Key, Arc<[u8]>>> {
    static CACHE: OnceLock<Mutex<FxHashMap<Key, Arc<[u8]>>>> = OnceLock::new();
    lock(CACHE.get_or_init(Default::default))
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Empties the in-memory compile cache (the on-disk cache is left alone). Loaded kernels of
/// existing packers stay valid.
pub fn clear_memory_cache() {
    memory_cache().clear();
}

/// The full NVRTC option list for `arch` and `extra` options.
pub fn nvrtc_options(arch: &str, extra: &[String]) -> Vec<String> {
    let mut o = vec![format!("--gpu-architecture={arch}")];
    o.extend(extra.iter().cloned());
    o
}

/// Compiles `source` with NVRTC for `arch` (`sm_XY` gives a CUBIN, `compute_XY` PTX) with the
/// `extra` options, through the in-memory cache and, if [`CACHE_ENV`] is set, the on-disk cache.
/// Returns the image, ready for `cuModuleLoadData`.
///
/// # Errors
/// [`Error::LibraryNotFound`] without NVRTC; [`Error::Compile`] with NVRTC's log and the exact
/// options when NVRTC refuses the source or an option; [`Error::InvalidArgument`] for a NUL
/// byte in the source or an option.
pub fn compile(source: &str, arch: &str, extra: &[String]) -> Result<Arc<[u8]>> {
    const OP: &str = "gpu::compile";
    let key = Key {
        source: source.to_string(),
        arch: arch.to_string(),
        options: extra.to_vec(),
    };
    if let Some(img) = memory_cache().get(&key) {
        return Ok(img.clone());
    }
    let disk = disk_path(&key);
    if let Some((path, header)) = &disk {
        if let Some(img) = read_disk(path, header) {
            let img: Arc<[u8]> = img.into();
            memory_cache().insert(key, img.clone());
            return Ok(img);
        }
    }
    let options = nvrtc_options(arch, extra);
    let img: Arc<[u8]> = guard(OP, || nvrtc_compile(OP, source, &options, arch))?.into();
    if let Some((path, header)) = &disk {
        write_disk(path, header, &img);
    }
    memory_cache().insert(key, img.clone());
    Ok(img)
}

pub(super) fn c_chars(v: &[c_char]) -> Vec<u8> {
    v.iter().map(|&c| c as u8).collect()
}

pub(super) fn nvrtc_compile(
    op: &'static str,
    source: &str,
    options: &[String],
    arch: &str,
) -> Result<Vec<u8>> {
    use cudarc::nvrtc::{result, sys};
    nvrtc_available()?;
    let src = CString::new(source).map_err(|_| invalid(op, "the source contains a NUL byte"))?;
    if let Some(o) = options.iter().find(|o| o.contains('\0')) {
        return Err(invalid(op, format!("option {o:?} contains a NUL byte")));
    }
    let nv = |e: result::NvrtcError| Error::Cuda {
        op,
        message: format!("NVRTC: {e:?}"),
    };
    let prog = result::create_program(&src, Some(c"datatype_pack.cu")).map_err(nv)?;
    // SAFETY: `prog` was created above and is destroyed once, at the end of this function; the
    // options contain no NUL byte (checked above), so `compile_program` does not panic.
    let compiled = unsafe { result::compile_program(prog, options) };
    // SAFETY: `prog` is live (destroyed below).
    let log = unsafe { result::get_program_log(prog) }
        .map(|l| {
            let bytes = c_chars(&l);
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            String::from_utf8_lossy(&bytes[..end]).into_owned()
        })
        .unwrap_or_default();
    let out = match compiled {
        Err(e) => Err(Error::Compile {
            op,
            code: format!("{:?}", e.0),
            options: options.to_vec(),
            log,
        }),
        Ok(()) if arch.starts_with("sm_") => {
            let mut size = 0usize;
            // SAFETY: `prog` is live and compiled; `size` is valid for a write.
            unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }
                .result()
                .map_err(nv)
                .and_then(|()| {
                    let mut buf = vec![0 as c_char; size];
                    // SAFETY: `buf` has the `size` bytes NVRTC reported for the CUBIN.
                    unsafe { sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr()) }
                        .result()
                        .map_err(nv)?;
                    Ok(c_chars(&buf))
                })
        }
        // PTX text, NUL-terminated, as cuModuleLoadData wants it.
        // SAFETY: `prog` is live and compiled.
        Ok(()) => unsafe { result::get_ptx(prog) }
            .map(|p| c_chars(&p))
            .map_err(nv),
    };
    // SAFETY: `prog` is live and not used after this.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

const DISK_MAGIC: &[u8; 8] = b"DTPKIMG1";

/// The cache file for `key` and the header it must start with, when a cache directory is set.
pub(super) fn disk_path(key: &Key) -> Option<(PathBuf, Vec<u8>)> {
    let dir = std::env::var_os(CACHE_ENV).filter(|d| !d.is_empty())?;
    let version = nvrtc_version().ok()?;
    let mut header = Vec::new();
    header.extend_from_slice(DISK_MAGIC);
    let desc = format!(
        "nvrtc {}.{}\narch {}\noptions {:?}\n",
        version.0, version.1, key.arch, key.options
    );
    let body_len = (desc.len() + key.source.len()) as u64;
    header.extend_from_slice(&body_len.to_le_bytes());
    header.extend_from_slice(desc.as_bytes());
    header.extend_from_slice(key.source.as_bytes());
    let h1 = Fnv64::new().bytes(&header).finish();
    let h2 = Fnv64::with_seed(0x5eed).bytes(&header).finish();
    Some((
        PathBuf::from(dir).join(format!("{h1:016x}{h2:016x}.bin")),
        header,
    ))
}

pub(super) fn read_disk(path: &PathBuf, header: &[u8]) -> Option<Vec<u8>> {
    let data = std::fs::read(path).ok()?;
    (data.len() > header.len() && data.starts_with(header)).then(|| data[header.len()..].to_vec())
}

pub(super) fn write_disk(path: &PathBuf, header: &[u8], img: &[u8]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut data = Vec::with_capacity(header.len() + img.len());
    data.extend_from_slice(header);
    data.extend_from_slice(img);
    if std::fs::write(&tmp, &data).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
