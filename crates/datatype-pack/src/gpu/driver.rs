//! The CUDA driver, opened at run time: checks that `libcuda` loads ([`driver_available`]),
//! a context per device ([`context`]) and its architecture ([`device_arch`]), and the guard that
//! turns a panic inside the bindings (a missing symbol) into an [`Error`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUdevice_attribute;
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

fn candidates(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .flat_map(|n| cudarc::get_lib_name_candidates(n))
        .collect()
}

/// The outcome of probing once per process (into `cell`) whether a library opens: `present`
/// says so (a panic counts as no); where not, [`Error::LibraryNotFound`] for `op`, naming
/// `library` and every file name of `names` tried.
pub(super) fn probe_library(
    cell: &'static OnceLock<Result<()>>,
    present: impl FnOnce() -> bool + std::panic::UnwindSafe,
    (op, library, names): (&'static str, &'static str, &[&str]),
) -> &'static Result<()> {
    cell.get_or_init(|| {
        if catch_unwind(present).unwrap_or(false) {
            Ok(())
        } else {
            Err(Error::LibraryNotFound {
                op,
                library,
                tried: candidates(names),
            })
        }
    })
}

/// Checks once per process that the CUDA driver library (`libcuda`) can be opened.
///
/// # Errors
/// [`Error::LibraryNotFound`] with every file name tried.
pub fn driver_available() -> Result<()> {
    probe().clone()
}

/// Whether the CUDA driver library can be opened ([`driver_available`] without its error's
/// details): a check cheap enough for every call of a hot path.
pub fn driver_present() -> bool {
    probe().is_ok()
}

/// The outcome of the one probe for the driver library.
fn probe() -> &'static Result<()> {
    static PROBE: OnceLock<Result<()>> = OnceLock::new();
    probe_library(
        &PROBE,
        // SAFETY: this only opens (dlopen) the driver library under cudarc's candidate names
        // and closes it again; opening the vendor's library runs its initialisers, which are
        // sound to run in any process. No symbol is called.
        || unsafe { cudarc::driver::sys::is_culib_present() },
        ("gpu::driver_available", "cuda", &["cuda", "nvcuda"]),
    )
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

/// What a device holds at once: its multiprocessors and, per multiprocessor, the most threads and
/// thread blocks. The packers size a one-wave grid from it ([`Residency::wave`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Residency {
    /// Multiprocessors.
    pub sms: u64,
    /// Threads one multiprocessor holds at once.
    pub threads_per_sm: u64,
    /// Thread blocks one multiprocessor holds at once.
    pub blocks_per_sm: u64,
}

impl Residency {
    /// The residency of `ctx`'s device.
    ///
    /// # Errors
    /// [`Error::Cuda`] if the driver cannot tell.
    pub fn of(ctx: &CudaContext) -> Result<Self> {
        const OP: &str = "gpu::Residency::of";
        let attr = |a| {
            guard(OP, || {
                ctx.attribute(a)
                    .map_err(drv(OP))
                    .map(|v| u64::try_from(v).unwrap_or(1).max(1))
            })
        };
        Ok(Self {
            sms: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            threads_per_sm: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            )?,
            blocks_per_sm: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
            )?,
        })
    }

    /// Thread blocks of `threads` threads the device holds at once (one wave): at least one per
    /// multiprocessor.
    pub fn wave(&self, threads: u32) -> u64 {
        let per_sm = (self.threads_per_sm / u64::from(threads.max(1)))
            .min(self.blocks_per_sm)
            .max(1);
        self.sms * per_sm
    }
}

#[cfg(test)]
mod tests {
    use super::Residency;

    #[test]
    fn a_wave_is_bounded_by_threads_and_blocks_per_multiprocessor() {
        // H100: 132 multiprocessors, 2048 threads and 32 blocks each.
        let h100 = Residency {
            sms: 132,
            threads_per_sm: 2048,
            blocks_per_sm: 32,
        };
        assert_eq!(h100.wave(256), 132 * 8);
        assert_eq!(h100.wave(1024), 132 * 2);
        // 32-thread blocks: the block limit, not the thread limit.
        assert_eq!(h100.wave(32), 132 * 32);
        // Never less than one block per multiprocessor, nor a division by zero.
        assert_eq!(h100.wave(4096), 132);
        assert_eq!(h100.wave(0), 132 * 32);
    }
}
