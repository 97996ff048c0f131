//! The CUDA driver, opened at run time: checks that `libcuda` loads ([`driver_available`]),
//! a context per device ([`context`]) and its architecture ([`device_arch`]), and the guard that
//! turns a panic inside the bindings (a missing symbol) into an [`Error`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, DriverError};

use crate::error::{Error, Result};

pub(super) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs `f`, turning a panic inside the CUDA bindings (a missing symbol) into an error.
pub(super) fn guard<T>(op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(Error::Cuda {
            op,
            message: format!("the CUDA bindings panicked: {}", panic_message(&*payload)),
        }),
    }
}

pub(super) fn drv(op: &'static str) -> impl Fn(DriverError) -> Error {
    move |e| Error::Cuda {
        op,
        message: format!("{e:?}"),
    }
}

pub(super) fn candidates(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .flat_map(|n| cudarc::get_lib_name_candidates(n))
        .collect()
}

/// Checks once per process that the CUDA driver library (`libcuda`) can be opened.
///
/// # Errors
/// [`Error::LibraryNotFound`] with every file name tried.
pub fn driver_available() -> Result<()> {
    static PROBE: OnceLock<Result<()>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            // SAFETY: this only opens (dlopen) the driver library under cudarc's candidate
            // names and closes it again; opening the vendor's library runs its initialisers,
            // which are sound to run in any process. No symbol is called.
            let found = catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() })
                .unwrap_or(false);
            if found {
                Ok(())
            } else {
                Err(Error::LibraryNotFound {
                    op: "gpu::driver_available",
                    library: "cuda",
                    tried: candidates(&["cuda", "nvcuda"]),
                })
            }
        })
        .clone()
}

/// The primary CUDA context of device `ordinal`.
///
/// # Errors
/// [`Error::LibraryNotFound`] when `libcuda` cannot be loaded (no driver installed);
/// [`Error::Cuda`] when the driver fails (no device, bad ordinal, a missing symbol).
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    const OP: &str = "gpu::context";
    driver_available()?;
    guard(OP, || CudaContext::new(ordinal).map_err(drv(OP)))
}

/// The NVRTC architecture of `ctx`'s device, `sm_XY` for compute capability X.Y.
///
/// # Errors
/// [`Error::Cuda`] if the driver cannot tell.
pub fn device_arch(ctx: &CudaContext) -> Result<String> {
    const OP: &str = "gpu::device_arch";
    guard(OP, || {
        let (major, minor) = ctx.compute_capability().map_err(drv(OP))?;
        Ok(format!("sm_{major}{minor}"))
    })
}
