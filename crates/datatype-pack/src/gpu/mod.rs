//! GPU packing: the kernels of [`crate::codegen`] compiled with NVRTC for the device's
//! compute capability, cached, and launched on a stream through [`cudarc`] (re-exported).
//!
//! | item | what it does |
//! |---|---|
//! | [`context`] | a CUDA context for a device, or an `Err` when the driver cannot be loaded |
//! | [`Packer`] | one plan: `pack`/`unpack` between cudarc device buffers on a stream |
//! | [`FusedPacker`] | many [`Region`]s (a halo's faces) packed or unpacked in one launch |
//! | [`FusedCopier`] | many [`CopyRegion`]s copied strided to strided in one launch, between two buffers or within one |
//! | [`compile`] | NVRTC with an in-memory cache keyed by (source, arch, options) and an optional on-disk cache |
//!
//! # Loading the CUDA libraries
//!
//! Nothing is needed at build time: `libcuda` and `libnvrtc` are opened at run time (cudarc's
//! dynamic loading). cudarc panics when a library or a symbol is missing; this module never lets
//! that reach the caller. Before the first driver (or NVRTC) call it checks that the library
//! opens under one of cudarc's candidate names, and returns [`Error::LibraryNotFound`] with the
//! names it tried if none does; every entry point also runs inside
//! [`std::panic::catch_unwind`], so a missing symbol comes back as [`Error::Cuda`]. (The panic
//! hook still prints the panic message; with `panic = "abort"` a missing symbol aborts.)
//!
//! # Launch shapes
//!
//! A [`Packer`] launches its plan's kernels as [`LaunchShape::for_plan`] says: flat (one thread
//! per packed word, 1-D blocks of [`FLAT_THREADS`](crate::plan::FLAT_THREADS) threads, as the
//! one-thread-per-word kernel) for contiguous plans and for plans of at most two dimensions with
//! a power-of-two number of words per block; by axes otherwise. Fused launches
//! ([`FusedPacker`], [`FusedCopier`]) map every region flat
//! ([`codegen::fused_shape`](crate::codegen::fused_shape)), each region over its own span of
//! the one 1-D grid.
//!
//! # Word sizes and variants
//!
//! The word size of a launch is [`StridedBlock::word_size`] of the plan *and* the two device
//! addresses passed, so a view that starts at an odd byte of an allocation is packed correctly
//! (in narrower words). Each word size is its own kernel variant, compiled on first use and
//! kept by the packer; the variant for 256-byte-aligned buffers (every cudarc allocation) is
//! compiled when the packer is made, so that compile errors surface there.
//!
//! # Compile cache
//!
//! [`compile`] keeps every image it produced in memory, keyed by the exact source, architecture
//! and options. When the environment variable `DATATYPE_PACK_CACHE` names a directory, images
//! are also stored there (one file per key, named by a hash of the key, holding the full key,
//! which is compared on load) and read back by later processes. The disk cache is best effort:
//! an unreadable or unwritable directory only costs a compile.
//!
//! # Bounds
//!
//! Every launch is preceded by the checks of [`crate::cpu::pack`]: the strided buffer must hold
//! the plan's [`extent_end`](StridedBlock::extent_end) and the packed buffer its
//! [`packed_size`](StridedBlock::packed_size); otherwise the call returns
//! [`Error::OutOfBounds`] or [`Error::BufferTooSmall`] and launches nothing. Buffers and stream
//! must belong to the packer's context.
//!
//! # Raw device pointers
//!
//! The safe entry points take cudarc buffers, and cudarc orders every use of a buffer against
//! the others through events: once a context has more than one stream, each `pack` makes the
//! stream wait on the buffers' last writes and records a read or write event afterwards. A
//! caller that orders its streams with its own events (a halo exchange over several streams)
//! calls the `unsafe` raw entry points instead ([`Packer::pack_raw`],
//! [`FusedPacker::pack_raw`], [`FusedCopier::copy_raw`], ...), which take device addresses and
//! lengths in bytes and do no event bookkeeping. They make the same checks of the stream's
//! context and of the lengths against the layout, and launch the same kernels; that the
//! addresses belong to the context, hold the lengths given and are not in use by other work is
//! the caller's promise.

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

pub use cudarc;
use cudarc::driver::sys::{CUdevice_attribute, CUdeviceptr};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, DriverError,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use crate::codegen::{self, Direction, Fnv64};
use crate::error::{invalid, Buffer, Error, Result};
use crate::fused::{self, CopyRegion, CopySpans, Region};
#[cfg(doc)]
use crate::plan::LaunchShape;
use crate::plan::{LaunchLimits, StridedBlock};

/// Environment variable naming the on-disk cache directory of compiled kernels.
pub const CACHE_ENV: &str = "DATATYPE_PACK_CACHE";

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs `f`, turning a panic inside the CUDA bindings (a missing symbol) into an error.
fn guard<T>(op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(Error::Cuda {
            op,
            message: format!("the CUDA bindings panicked: {}", panic_message(&*payload)),
        }),
    }
}

fn drv(op: &'static str) -> impl Fn(DriverError) -> Error {
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

/// Checks once per process that the NVRTC library (`libnvrtc`) can be opened.
///
/// # Errors
/// [`Error::LibraryNotFound`] with every file name tried.
pub fn nvrtc_available() -> Result<()> {
    static PROBE: OnceLock<Result<()>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            // SAFETY: as in `driver_available`: the library is opened and closed, nothing called.
            let found =
                catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }).unwrap_or(false);
            if found {
                Ok(())
            } else {
                Err(Error::LibraryNotFound {
                    op: "gpu::nvrtc_available",
                    library: "nvrtc",
                    tried: candidates(&["nvrtc"]),
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
struct Key {
    source: String,
    arch: String,
    options: Vec<String>,
}

fn memory_cache() -> MutexGuard<'static, HashMap<Key, Arc<[u8]>>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<[u8]>>>> = OnceLock::new();
    lock(CACHE.get_or_init(Default::default))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

fn c_chars(v: &[c_char]) -> Vec<u8> {
    v.iter().map(|&c| c as u8).collect()
}

fn nvrtc_compile(
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
fn disk_path(key: &Key) -> Option<(PathBuf, Vec<u8>)> {
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

fn read_disk(path: &PathBuf, header: &[u8]) -> Option<Vec<u8>> {
    let data = std::fs::read(path).ok()?;
    (data.len() > header.len() && data.starts_with(header)).then(|| data[header.len()..].to_vec())
}

fn write_disk(path: &PathBuf, header: &[u8], img: &[u8]) {
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

/// How many thread blocks a launch gets. The kernels' grid-stride loops make every grid
/// correct; the choice only changes speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GridCap {
    /// The full [`LaunchShape`] grid (up to the device limits): each thread
    /// moves one word of one block per grid-stride trip, and most threads make one trip.
    Full,
    /// At most this many waves, a wave being the thread blocks the device holds at once
    /// (multiprocessors x resident blocks per multiprocessor); threads then loop over several
    /// blocks, four loads in flight per thread.
    Waves(u32),
    /// At most this many thread blocks per multiprocessor (at least one): less than a wave when
    /// fewer than a multiprocessor holds, for a launch that should leave most of the device to
    /// kernels running beside it. Threads loop as under [`GridCap::Waves`].
    PerSm(u32),
    /// For a [flat](LaunchShape::flat) kernel, the full grid: one thread per word, as the
    /// one-thread-per-word kernel launches. Fused launches are flat (every region, see
    /// [`codegen::fused_shape`](crate::codegen::fused_shape)), so they too get every region's
    /// full grid. Otherwise (a single plan's kernel by axes) the full grid when it has more
    /// than [`AUTO_FULL_ABOVE_WAVES`] waves, one wave below. Measured on an H200
    /// (docs/PACK-GPU-LOG.md) for kernels by axes: a long stream of small blocks is fastest
    /// with the full grid, while a grid of a few waves is faster as one wave of looping threads.
    Auto,
}

/// [`GridCap::Auto`] launches the full grid above this many waves.
pub const AUTO_FULL_ABOVE_WAVES: u64 = 8;

/// Tuning and compile options of a [`Packer`] or [`FusedPacker`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GpuOptions {
    /// Options appended to NVRTC's (after `--gpu-architecture=sm_XY`).
    pub nvrtc_options: Vec<String>,
    /// How many thread blocks a launch gets (default [`GridCap::Auto`]).
    pub grid: GridCap,
    /// Most threads in one thread block, a power of two from 32 to 1024 (default 1024): the
    /// `max_threads_per_block` of the [`LaunchLimits`] the kernels' shapes are made under.
    /// Kernels by axes use at most [`AXES_THREADS`](crate::plan::AXES_THREADS) (512) of them,
    /// a single plan's [flat](LaunchShape::flat) kernel
    /// [`flat_threads`](crate::plan::flat_threads), fused kernels
    /// [`FLAT_THREADS`](crate::plan::FLAT_THREADS).
    pub max_threads_per_block: u32,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            nvrtc_options: Vec::new(),
            grid: GridCap::Auto,
            max_threads_per_block: 1024,
        }
    }
}

impl GpuOptions {
    /// These options with `opts` as the extra NVRTC options.
    pub fn with_nvrtc_options(mut self, opts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.nvrtc_options = opts.into_iter().map(Into::into).collect();
        self
    }

    /// These options with the grid policy `grid`.
    pub fn with_grid(mut self, grid: GridCap) -> Self {
        self.grid = grid;
        self
    }

    /// These options with thread blocks of at most `threads` threads.
    pub fn with_max_threads_per_block(mut self, threads: u32) -> Self {
        self.max_threads_per_block = threads;
        self
    }

    fn limits(&self) -> LaunchLimits {
        LaunchLimits {
            max_threads_per_block: self.max_threads_per_block,
            ..LaunchLimits::CUDA
        }
    }
}

/// What a packer knows about its device.
#[derive(Debug, Clone)]
struct Device {
    ctx: Arc<CudaContext>,
    arch: String,
    sms: u64,
    threads_per_sm: u64,
    blocks_per_sm: u64,
    options: GpuOptions,
}

impl Device {
    fn new(op: &'static str, ctx: &Arc<CudaContext>, options: &GpuOptions) -> Result<Self> {
        let t = options.max_threads_per_block;
        if !(32..=1024).contains(&t) || !t.is_power_of_two() {
            return Err(invalid(
                op,
                format!("max_threads_per_block {t} is not a power of two from 32 to 1024"),
            ));
        }
        let attr = |a| {
            ctx.attribute(a)
                .map_err(drv(op))
                .map(|v| u64::try_from(v).unwrap_or(1).max(1))
        };
        Ok(Self {
            ctx: ctx.clone(),
            arch: device_arch(ctx)?,
            sms: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            threads_per_sm: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            )?,
            blocks_per_sm: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
            )?,
            options: options.clone(),
        })
    }

    /// Thread blocks of `threads` threads the device holds at once.
    fn wave(&self, threads: u32) -> u64 {
        let per_sm = (self.threads_per_sm / u64::from(threads.max(1)))
            .min(self.blocks_per_sm)
            .max(1);
        self.sms * per_sm
    }

    /// The most thread blocks of `threads` threads a launch whose full grid has `full` blocks
    /// gets, under the grid policy; `flat` for a flat kernel.
    fn max_blocks(&self, threads: u32, full: u64, flat: bool) -> u64 {
        grid_budget(self.options.grid, self.wave(threads), self.sms, full, flat)
    }

    fn load<const N: usize>(
        &self,
        op: &'static str,
        source: &str,
        names: [&str; N],
    ) -> Result<[CudaFunction; N]> {
        let img = compile(source, &self.arch, &self.options.nvrtc_options)?;
        let module = self
            .ctx
            .load_module(Ptx::from_binary(img.to_vec()))
            .map_err(drv(op))?;
        let mut funcs = Vec::with_capacity(N);
        for n in names {
            funcs.push(module.load_function(n).map_err(drv(op))?);
        }
        // One function per name, so the conversion cannot fail.
        funcs
            .try_into()
            .map_err(|_: Vec<CudaFunction>| invalid(op, format!("expected {N} kernels")))
    }

    fn check_context(&self, op: &'static str, what: &str, ctx: &CudaContext) -> Result<()> {
        if ctx.cu_ctx() != self.ctx.cu_ctx() {
            return Err(invalid(
                op,
                format!(
                    "the {what} belongs to another CUDA context (device {}) than the packer's \
                     (device {})",
                    ctx.ordinal(),
                    self.ctx.ordinal()
                ),
            ));
        }
        Ok(())
    }
}

/// The most thread blocks a launch gets under `policy`, `wave` thread blocks filling the device
/// once and `sms` multiprocessors, for a full grid of `full` blocks; `flat` for a flat kernel.
fn grid_budget(policy: GridCap, wave: u64, sms: u64, full: u64, flat: bool) -> u64 {
    match policy {
        GridCap::Full => u64::MAX,
        GridCap::Waves(w) => wave.saturating_mul(u64::from(w.max(1))),
        GridCap::PerSm(n) => sms.max(1).saturating_mul(u64::from(n.max(1))),
        GridCap::Auto if flat || full > wave.saturating_mul(AUTO_FULL_ABOVE_WAVES) => u64::MAX,
        GridCap::Auto => wave,
    }
}

/// Launches `f(src, dst)` with the given shape.
///
/// # Safety
/// `f` is a generated kernel taking `(const unsigned char*, unsigned char*)`, loaded in the
/// context of `stream`; `grid` is within the device's limits and `block` is the shape baked into
/// the kernel. `src` and `dst` are device addresses in that context of buffers that hold every
/// byte the kernel touches from them (the callers checked the lengths against the layout), stay
/// allocated until the stream has run the launch, and are not written by other work before then
/// (nor is the written range read by it).
unsafe fn launch(
    op: &'static str,
    stream: &CudaStream,
    f: &CudaFunction,
    grid: [u32; 3],
    block: [u32; 3],
    src: CUdeviceptr,
    dst: CUdeviceptr,
) -> Result<()> {
    let cfg = LaunchConfig {
        grid_dim: (grid[0], grid[1], grid[2]),
        block_dim: (block[0], block[1], block[2]),
        shared_mem_bytes: 0,
    };
    let mut b = stream.launch_builder(f);
    b.arg(&src).arg(&dst);
    // SAFETY: every generated kernel takes exactly `(const unsigned char*, unsigned char*)`,
    // matched by the two 64-bit device addresses pushed above; every byte the kernel touches
    // lies inside the two buffers, which stay allocated and untouched by other work until the
    // launch has run (this function's contract); the block shape is the one baked into the
    // kernel and the grid is within the device's limits (LaunchShape).
    unsafe { b.launch(cfg) }.map_err(drv(op))?;
    Ok(())
}

/// Checks the stream and both buffers of a safe call against the launcher's context.
fn check_buffers<T, U>(
    op: &'static str,
    dev: &Device,
    stream: &CudaStream,
    src: &impl DeviceSlice<T>,
    dst: &impl DeviceSlice<U>,
) -> Result<()> {
    dev.check_context(op, "stream", stream.context())?;
    dev.check_context(op, "source buffer", src.stream().context())?;
    dev.check_context(op, "destination buffer", dst.stream().context())
}

/// Checks the lengths in bytes of a call's buffers against the layout, in the order of
/// [`crate::cpu::pack`]: the strided buffer against `span` (first byte, extent end) first, then
/// the packed buffer against `packed`.
fn check_lengths(
    op: &'static str,
    dir: Direction,
    src_len: usize,
    dst_len: usize,
    span: (u64, u64),
    packed: u64,
) -> Result<()> {
    let ((strided, slen), (packed_buf, plen)) = match dir {
        Direction::Pack => ((Buffer::Source, src_len), (Buffer::Destination, dst_len)),
        Direction::Unpack => ((Buffer::Destination, dst_len), (Buffer::Source, src_len)),
    };
    if span.1 > slen as u64 {
        return Err(Error::OutOfBounds {
            op,
            buffer: strided,
            first: i128::from(span.0),
            end: i128::from(span.1),
            len: slen,
        });
    }
    if packed > plen as u64 {
        return Err(Error::BufferTooSmall {
            op,
            buffer: packed_buf,
            needed: packed,
            len: plen,
        });
    }
    Ok(())
}

/// Refuses a null device address on a raw call that moves bytes (no allocation starts at 0).
fn check_addresses(op: &'static str, src: CUdeviceptr, dst: CUdeviceptr) -> Result<()> {
    for (what, p) in [("source", src), ("destination", dst)] {
        if p == 0 {
            return Err(invalid(op, format!("the {what} address is null")));
        }
    }
    Ok(())
}

struct Variant {
    funcs: [CudaFunction; 2],
    block: [u32; 3],
    grid: [u32; 3],
}

impl Variant {
    fn func(&self, dir: Direction) -> &CudaFunction {
        match dir {
            Direction::Pack => &self.funcs[0],
            Direction::Unpack => &self.funcs[1],
        }
    }
}

/// Packs and unpacks one [`StridedBlock`] between device buffers with generated kernels.
///
/// Buffers are anything cudarc can hand out a device pointer for ([`cudarc::driver::CudaSlice`],
/// `CudaView`, `CudaViewMut`) of any element type; lengths are counted in bytes. The strided
/// buffer's base is the address the plan's offsets count from.
///
/// ```no_run
/// use datatype_pack::gpu::{self, Packer};
/// use datatype_pack::construct::vector;
/// use datatype_pack::StridedBlock;
///
/// let ctx = gpu::context(0)?;
/// let stream = ctx.default_stream();
/// // 1000 blocks of 8 bytes, 512 bytes apart.
/// let plan = StridedBlock::from_type(&vector(1000, 1, 64, 8)?)?;
/// let packer = Packer::new(&ctx, &plan)?;
/// let grid = stream.alloc_zeros::<f64>(64 * 1000).map_err(|e| datatype_pack::Error::Cuda {
///     op: "example", message: e.to_string() })?;
/// let mut packed = stream.alloc_zeros::<u8>(packer.packed_size() as usize).map_err(|e|
///     datatype_pack::Error::Cuda { op: "example", message: e.to_string() })?;
/// packer.pack(&stream, &grid, &mut packed)?;
/// # Ok::<(), datatype_pack::Error>(())
/// ```
pub struct Packer {
    dev: Device,
    plan: StridedBlock,
    variants: Mutex<HashMap<u32, Arc<Variant>>>,
}

impl fmt::Debug for Packer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packer")
            .field("plan", &self.plan)
            .field("arch", &self.dev.arch)
            .field("word_sizes", &self.compiled_word_sizes())
            .finish()
    }
}

impl Packer {
    /// A packer for `plan` on `ctx`'s device, with default [`GpuOptions`].
    ///
    /// # Errors
    /// As [`Packer::with_options`].
    pub fn new(ctx: &Arc<CudaContext>, plan: &StridedBlock) -> Result<Self> {
        Self::with_options(ctx, plan, &GpuOptions::default())
    }

    /// A packer for `plan` on `ctx`'s device. Compiles the variant for 256-byte-aligned
    /// buffers (unless the plan is empty).
    ///
    /// # Errors
    /// [`Error::Cuda`] if the driver cannot describe the device or load the module;
    /// [`Error::Compile`] (with the log and options) or [`Error::LibraryNotFound`] from
    /// [`compile`].
    pub fn with_options(
        ctx: &Arc<CudaContext>,
        plan: &StridedBlock,
        options: &GpuOptions,
    ) -> Result<Self> {
        const OP: &str = "Packer::new";
        guard(OP, || {
            let p = Self {
                dev: Device::new(OP, ctx, options)?,
                plan: plan.clone(),
                variants: Mutex::new(HashMap::new()),
            };
            if !plan.is_empty() {
                p.prepare(plan.word_size(256, 256))?;
            }
            Ok(p)
        })
    }

    /// The plan.
    pub fn plan(&self) -> &StridedBlock {
        &self.plan
    }

    /// Bytes of the packed form.
    pub fn packed_size(&self) -> u64 {
        self.plan.packed_size()
    }

    /// Bytes the strided buffer needs.
    pub fn extent_end(&self) -> u64 {
        self.plan.extent_end()
    }

    /// The context the packer launches in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.dev.ctx
    }

    /// The word sizes whose kernels are compiled and loaded, ascending.
    pub fn compiled_word_sizes(&self) -> Vec<u32> {
        let mut w: Vec<u32> = lock(&self.variants).keys().copied().collect();
        w.sort_unstable();
        w
    }

    /// Grid and block of the launch for word size `word_size` (compiling it if needed).
    ///
    /// # Errors
    /// As [`Packer::prepare`].
    pub fn launch_dims(&self, word_size: u32) -> Result<([u32; 3], [u32; 3])> {
        let v = self.variant("Packer::launch_dims", word_size)?;
        Ok((v.grid, v.block))
    }

    /// Compiles and loads the kernels for `word_size` now rather than on first use.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `word_size` does not suit the plan; the errors of
    /// [`compile`]; [`Error::Cuda`] if the module does not load.
    pub fn prepare(&self, word_size: u32) -> Result<()> {
        self.variant("Packer::prepare", word_size).map(|_| ())
    }

    fn variant(&self, op: &'static str, w: u32) -> Result<Arc<Variant>> {
        let mut map = lock(&self.variants);
        if let Some(v) = map.get(&w) {
            return Ok(v.clone());
        }
        guard(op, || {
            let k = codegen::generate_with_limits(&self.plan, w, &self.dev.options.limits())?;
            let funcs = self
                .dev
                .load(op, k.source(), [k.pack_name(), k.unpack_name()])?;
            let shape = k.shape();
            let v = Arc::new(Variant {
                funcs,
                block: shape.block(),
                grid: codegen::cap_grid(
                    shape.grid(),
                    self.dev.max_blocks(
                        shape.threads_per_block(),
                        shape.grid().iter().map(|&g| u64::from(g)).product(),
                        shape.is_flat(),
                    ),
                ),
            });
            map.insert(w, v.clone());
            Ok(v)
        })
    }

    /// Packs the plan's bytes of `src` (strided) into the front of `dst`, on `stream`
    /// (asynchronously, like a kernel launch).
    ///
    /// # Errors
    /// Checked before anything is launched: [`Error::InvalidArgument`] if the stream or a buffer
    /// belongs to another context; [`Error::OutOfBounds`] if `src` is shorter than the extent
    /// end; [`Error::BufferTooSmall`] if `dst` is shorter than the packed size. Then the errors
    /// of compiling a new variant, and [`Error::Cuda`] if the launch fails.
    pub fn pack<T, U>(
        &self,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
    ) -> Result<()> {
        self.run("Packer::pack", Direction::Pack, stream, src, dst)
    }

    /// Unpacks the front of `src` (packed) into the plan's bytes of `dst` (strided), on
    /// `stream`; other bytes of `dst` are untouched.
    ///
    /// # Errors
    /// As [`Packer::pack`], with `src` the packed buffer (too short: [`Error::BufferTooSmall`])
    /// and `dst` the strided one (too short: [`Error::OutOfBounds`]).
    pub fn unpack<T, U>(
        &self,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
    ) -> Result<()> {
        self.run("Packer::unpack", Direction::Unpack, stream, src, dst)
    }

    /// Packs like [`Packer::pack`], from the strided buffer at device address `src` (`src_len`
    /// bytes) to the packed buffer at `dst` (`dst_len` bytes), without cudarc's event tracking.
    ///
    /// Checked before anything is launched, as [`Packer::pack`]: the stream's context, `src_len`
    /// against the extent end and `dst_len` against the packed size; also that neither address
    /// is null when there is something to move. Neither the addresses' context nor their
    /// allocations' lengths can be checked: that is the caller's part.
    ///
    /// # Safety
    /// `src` and `dst` must be device addresses in the packer's context, each the start of at
    /// least `src_len` and `dst_len` bytes of one live allocation, the two ranges disjoint.
    /// Both must stay allocated, and no other work may write either range (or read the
    /// destination range), until `stream` has run the launch: nothing here orders the launch
    /// against other streams or cudarc's tracked uses of the same memory.
    ///
    /// # Errors
    /// As [`Packer::pack`], and [`Error::InvalidArgument`] for a null address.
    pub unsafe fn pack_raw(
        &self,
        stream: &CudaStream,
        src: CUdeviceptr,
        src_len: usize,
        dst: CUdeviceptr,
        dst_len: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract is the one of `run_raw`.
        unsafe {
            self.run_raw(
                "Packer::pack_raw",
                Direction::Pack,
                stream,
                (src, src_len),
                (dst, dst_len),
            )
        }
    }

    /// Unpacks like [`Packer::unpack`], from the packed buffer at device address `src`
    /// (`src_len` bytes) to the strided buffer at `dst` (`dst_len` bytes), without cudarc's
    /// event tracking. Checked as [`Packer::pack_raw`].
    ///
    /// # Safety
    /// As [`Packer::pack_raw`].
    ///
    /// # Errors
    /// As [`Packer::unpack`], and [`Error::InvalidArgument`] for a null address.
    pub unsafe fn unpack_raw(
        &self,
        stream: &CudaStream,
        src: CUdeviceptr,
        src_len: usize,
        dst: CUdeviceptr,
        dst_len: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract is the one of `run_raw`.
        unsafe {
            self.run_raw(
                "Packer::unpack_raw",
                Direction::Unpack,
                stream,
                (src, src_len),
                (dst, dst_len),
            )
        }
    }

    fn run<T, U>(
        &self,
        op: &'static str,
        dir: Direction,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
    ) -> Result<()> {
        guard(op, || {
            check_buffers(op, &self.dev, stream, src, dst)?;
            self.check_lengths(op, dir, src.num_bytes(), dst.num_bytes())?;
            if self.plan.is_empty() {
                return Ok(());
            }
            let (sp, _read) = src.device_ptr(stream);
            let (dp, _write) = dst.device_ptr_mut(stream);
            // SAFETY: both buffers and the stream belong to the packer's context (checked), the
            // buffers hold `num_bytes` bytes each, which were checked against the plan, and
            // cudarc's guards order the launch after earlier writes of the buffers and record it
            // for later uses; a shared and a mutable borrow cannot be one buffer.
            unsafe { self.launch(op, dir, stream, sp, dp) }
        })
    }

    /// # Safety
    /// As [`Packer::pack_raw`], for the strided and packed roles of `dir`.
    unsafe fn run_raw(
        &self,
        op: &'static str,
        dir: Direction,
        stream: &CudaStream,
        (src, src_len): (CUdeviceptr, usize),
        (dst, dst_len): (CUdeviceptr, usize),
    ) -> Result<()> {
        guard(op, || {
            self.dev.check_context(op, "stream", stream.context())?;
            self.check_lengths(op, dir, src_len, dst_len)?;
            if self.plan.is_empty() {
                return Ok(());
            }
            check_addresses(op, src, dst)?;
            // SAFETY: the lengths were checked against the plan; that the addresses are
            // allocations of this context of those lengths, alive and unused by other work
            // until the launch has run, is the caller's contract.
            unsafe { self.launch(op, dir, stream, src, dst) }
        })
    }

    fn check_lengths(
        &self,
        op: &'static str,
        dir: Direction,
        src_len: usize,
        dst_len: usize,
    ) -> Result<()> {
        check_lengths(
            op,
            dir,
            src_len,
            dst_len,
            (self.plan.start(), self.plan.extent_end()),
            self.plan.packed_size(),
        )
    }

    /// Launches the variant for the two addresses' word size.
    ///
    /// # Safety
    /// As [`launch`], with lengths checked by [`Packer::check_lengths`].
    unsafe fn launch(
        &self,
        op: &'static str,
        dir: Direction,
        stream: &CudaStream,
        src: CUdeviceptr,
        dst: CUdeviceptr,
    ) -> Result<()> {
        let w = self.plan.word_size(src, dst);
        let v = self.variant(op, w)?;
        // SAFETY: the kernel is the plan's for this word size (so every byte it touches is
        // within the extent end and the packed size, which the lengths were checked against),
        // loaded in the packer's context; the rest is this function's contract.
        unsafe { launch(op, stream, v.func(dir), v.grid, v.block, src, dst) }
    }
}

/// The kernels of a fused launch, compiled for one list of word sizes, and its shape.
struct FusedVariant<const N: usize> {
    funcs: [CudaFunction; N],
    grid: u32,
    block: u32,
}

/// What a fused kernel generator produced: a source, its kernels' names, its launch shape.
trait FusedSource<const N: usize> {
    fn source(&self) -> &str;
    fn names(&self) -> [&str; N];
    fn grid_blocks(&self) -> u32;
    fn block_threads(&self) -> u32;
}

impl FusedSource<2> for codegen::FusedKernels {
    fn source(&self) -> &str {
        codegen::FusedKernels::source(self)
    }
    fn names(&self) -> [&str; 2] {
        [self.pack_name(), self.unpack_name()]
    }
    fn grid_blocks(&self) -> u32 {
        codegen::FusedKernels::grid_blocks(self)
    }
    fn block_threads(&self) -> u32 {
        codegen::FusedKernels::block_threads(self)
    }
}

impl FusedSource<1> for codegen::FusedCopyKernels {
    fn source(&self) -> &str {
        codegen::FusedCopyKernels::source(self)
    }
    fn names(&self) -> [&str; 1] {
        [self.name()]
    }
    fn grid_blocks(&self) -> u32 {
        codegen::FusedCopyKernels::grid_blocks(self)
    }
    fn block_threads(&self) -> u32 {
        codegen::FusedCopyKernels::block_threads(self)
    }
}

/// What [`FusedPacker`] and [`FusedCopier`] share: the device, the grid policy and the variants
/// compiled so far, keyed by the word size of each region.
struct FusedLaunch<const N: usize> {
    dev: Device,
    variants: Mutex<HashMap<Vec<u32>, Arc<FusedVariant<N>>>>,
}

impl<const N: usize> FusedLaunch<N> {
    fn new(dev: Device) -> Self {
        Self {
            dev,
            variants: Mutex::new(HashMap::new()),
        }
    }

    /// The variant for `words` (one word size per plan of `plans`), compiled and loaded on
    /// first use from the source `generate` makes for a budget of thread blocks and the launch
    /// limits.
    fn variant<'a, K: FusedSource<N>>(
        &self,
        op: &'static str,
        plans: impl Iterator<Item = &'a StridedBlock>,
        words: &[u32],
        generate: impl FnOnce(u64, &LaunchLimits) -> Result<K>,
    ) -> Result<Arc<FusedVariant<N>>> {
        let mut map = lock(&self.variants);
        if let Some(v) = map.get(words) {
            return Ok(v.clone());
        }
        guard(op, || {
            let limits = self.dev.options.limits();
            // Every region is flat (`codegen::fused_shape`): `Auto` gives the full grid, the
            // one-thread-per-word launch; `Waves(n)` shares n waves among the regions in
            // proportion to their bytes.
            let mut full = 0u64;
            let mut threads = 1;
            for (plan, &w) in plans.zip(words) {
                let shape = codegen::fused_shape(plan, w, &limits)?;
                if !shape.is_noop() {
                    full = full.max(shape.grid().iter().map(|&g| u64::from(g)).product::<u64>());
                    threads = threads.max(shape.threads_per_block());
                }
            }
            let budget = self.dev.max_blocks(threads, full, true);
            let k = generate(budget, &limits)?;
            let funcs = self.dev.load(op, k.source(), k.names())?;
            let v = Arc::new(FusedVariant {
                funcs,
                grid: k.grid_blocks(),
                block: k.block_threads(),
            });
            map.insert(words.to_vec(), v.clone());
            Ok(v)
        })
    }

    /// Launches `v.funcs[i]` on `(src, dst)`, unless the grid is empty.
    ///
    /// # Safety
    /// As [`launch`], `v` being a variant of this launcher whose kernels touch only bytes within
    /// the lengths the caller checked.
    unsafe fn launch(
        &self,
        op: &'static str,
        stream: &CudaStream,
        v: &FusedVariant<N>,
        i: usize,
        src: CUdeviceptr,
        dst: CUdeviceptr,
    ) -> Result<()> {
        if v.grid == 0 {
            return Ok(());
        }
        // SAFETY: this function's contract; the grid and block are the variant's own.
        unsafe {
            launch(
                op,
                stream,
                &v.funcs[i],
                [v.grid, 1, 1],
                [v.block, 1, 1],
                src,
                dst,
            )
        }
    }
}

/// Packs and unpacks many [`Region`]s (one strided buffer, one packed buffer) in one launch
/// each: a halo's 6 or 26 faces, say. See [`crate::fused`] for the layout and the CPU
/// reference; regions unpacked in one launch should not overlap in the strided buffer (the
/// order of overlapping writes is not defined).
pub struct FusedPacker {
    fused: FusedLaunch<2>,
    regions: Vec<Region>,
    packed_size: u64,
    extent_end: u64,
    first: u64,
}

impl fmt::Debug for FusedPacker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FusedPacker")
            .field("regions", &self.regions)
            .field("arch", &self.fused.dev.arch)
            .finish()
    }
}

impl FusedPacker {
    /// A fused packer for `plans`, laid out one after another in the packed buffer
    /// ([`fused::layout`]: offsets rounded up to 16 bytes), default [`GpuOptions`].
    ///
    /// # Errors
    /// As [`FusedPacker::with_regions`].
    pub fn new(ctx: &Arc<CudaContext>, plans: &[StridedBlock]) -> Result<Self> {
        Self::with_regions(ctx, fused::layout(plans)?, &GpuOptions::default())
    }

    /// A fused packer for `regions` as given. Compiles the variant for 256-byte-aligned
    /// buffers.
    ///
    /// # Errors
    /// The errors of [`fused::check`] (overlapping packed ranges); otherwise as
    /// [`Packer::with_options`].
    pub fn with_regions(
        ctx: &Arc<CudaContext>,
        regions: Vec<Region>,
        options: &GpuOptions,
    ) -> Result<Self> {
        const OP: &str = "FusedPacker::new";
        fused::check(&regions)?;
        guard(OP, || {
            let first = regions
                .iter()
                .filter(|r| !r.plan().is_empty())
                .map(|r| r.plan().start())
                .min()
                .unwrap_or(0);
            let p = Self {
                fused: FusedLaunch::new(Device::new(OP, ctx, options)?),
                packed_size: fused::packed_size(&regions),
                extent_end: fused::extent_end(&regions),
                first,
                regions,
            };
            if p.packed_size > 0 {
                p.variant(OP, &p.words(256, 256))?;
            }
            Ok(p)
        })
    }

    /// The regions.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Bytes the packed buffer needs ([`fused::packed_size`]).
    pub fn packed_size(&self) -> u64 {
        self.packed_size
    }

    /// Bytes the strided buffer needs ([`fused::extent_end`]).
    pub fn extent_end(&self) -> u64 {
        self.extent_end
    }

    /// The word size of each region for a strided buffer at `strided_addr` and a packed buffer
    /// at `packed_addr` (addresses or alignments, as [`StridedBlock::word_size`]).
    pub fn words(&self, strided_addr: u64, packed_addr: u64) -> Vec<u32> {
        self.regions
            .iter()
            .map(|r| {
                if r.plan().is_empty() {
                    1
                } else {
                    r.plan()
                        .word_size(strided_addr, packed_addr.wrapping_add(r.packed_offset()))
                }
            })
            .collect()
    }

    /// Thread blocks and threads per block of the launch for 256-byte-aligned buffers.
    ///
    /// # Errors
    /// As [`FusedPacker::with_regions`].
    pub fn launch_dims(&self) -> Result<(u32, u32)> {
        let v = self.variant("FusedPacker::launch_dims", &self.words(256, 256))?;
        Ok((v.grid, v.block))
    }

    fn variant(&self, op: &'static str, words: &[u32]) -> Result<Arc<FusedVariant<2>>> {
        let plans = self.regions.iter().map(Region::plan);
        self.fused.variant(op, plans, words, |budget, limits| {
            codegen::generate_fused(&self.regions, words, budget, limits)
        })
    }

    /// Packs every region of `src` (strided) into its range of `dst` (packed), in one launch
    /// on `stream`.
    ///
    /// # Errors
    /// As [`Packer::pack`], against [`extent_end`](Self::extent_end) and
    /// [`packed_size`](Self::packed_size).
    pub fn pack<T, U>(
        &self,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
    ) -> Result<()> {
        self.run("FusedPacker::pack", Direction::Pack, stream, src, dst)
    }

    /// Unpacks every region's range of `src` (packed) into its bytes of `dst` (strided), in one
    /// launch on `stream`.
    ///
    /// # Errors
    /// As [`Packer::unpack`].
    pub fn unpack<T, U>(
        &self,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
    ) -> Result<()> {
        self.run("FusedPacker::unpack", Direction::Unpack, stream, src, dst)
    }

    /// Packs like [`FusedPacker::pack`], from the strided buffer at device address `src`
    /// (`src_len` bytes) to the packed buffer at `dst` (`dst_len` bytes), without cudarc's
    /// event tracking: for a caller that orders its streams with its own events. Checked as
    /// [`Packer::pack_raw`], against [`extent_end`](Self::extent_end) and
    /// [`packed_size`](Self::packed_size).
    ///
    /// # Safety
    /// `src` and `dst` must be device addresses in the packer's context, each the start of at
    /// least `src_len` and `dst_len` bytes of one live allocation, the two ranges disjoint.
    /// Both must stay allocated, and no other work may write either range (or read the
    /// destination range), until `stream` has run the launch: nothing here orders the launch
    /// against other streams or cudarc's tracked uses of the same memory.
    ///
    /// # Errors
    /// As [`FusedPacker::pack`], and [`Error::InvalidArgument`] for a null address.
    pub unsafe fn pack_raw(
        &self,
        stream: &CudaStream,
        src: CUdeviceptr,
        src_len: usize,
        dst: CUdeviceptr,
        dst_len: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract is the one of `run_raw`.
        unsafe {
            self.run_raw(
                "FusedPacker::pack_raw",
                Direction::Pack,
                stream,
                (src, src_len),
                (dst, dst_len),
            )
        }
    }

    /// Unpacks like [`FusedPacker::unpack`], from the packed buffer at device address `src`
    /// (`src_len` bytes) to the strided buffer at `dst` (`dst_len` bytes), without cudarc's
    /// event tracking. Checked as [`Packer::pack_raw`].
    ///
    /// # Safety
    /// As [`FusedPacker::pack_raw`].
    ///
    /// # Errors
    /// As [`FusedPacker::unpack`], and [`Error::InvalidArgument`] for a null address.
    pub unsafe fn unpack_raw(
        &self,
        stream: &CudaStream,
        src: CUdeviceptr,
        src_len: usize,
        dst: CUdeviceptr,
        dst_len: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract is the one of `run_raw`.
        unsafe {
            self.run_raw(
                "FusedPacker::unpack_raw",
                Direction::Unpack,
                stream,
                (src, src_len),
                (dst, dst_len),
            )
        }
    }

    fn run<T, U>(
        &self,
        op: &'static str,
        dir: Direction,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
    ) -> Result<()> {
        guard(op, || {
            check_buffers(op, &self.fused.dev, stream, src, dst)?;
            self.check_lengths(op, dir, src.num_bytes(), dst.num_bytes())?;
            if self.packed_size == 0 {
                return Ok(());
            }
            let (sp, _read) = src.device_ptr(stream);
            let (dp, _write) = dst.device_ptr_mut(stream);
            // SAFETY: as in `Packer::run`: context and lengths checked, cudarc's guards order
            // the launch against other uses of the buffers.
            unsafe { self.launch(op, dir, stream, sp, dp) }
        })
    }

    /// # Safety
    /// As [`FusedPacker::pack_raw`], for the strided and packed roles of `dir`.
    unsafe fn run_raw(
        &self,
        op: &'static str,
        dir: Direction,
        stream: &CudaStream,
        (src, src_len): (CUdeviceptr, usize),
        (dst, dst_len): (CUdeviceptr, usize),
    ) -> Result<()> {
        guard(op, || {
            self.fused
                .dev
                .check_context(op, "stream", stream.context())?;
            self.check_lengths(op, dir, src_len, dst_len)?;
            if self.packed_size == 0 {
                return Ok(());
            }
            check_addresses(op, src, dst)?;
            // SAFETY: the lengths were checked against the layout; the rest is the caller's
            // contract.
            unsafe { self.launch(op, dir, stream, src, dst) }
        })
    }

    fn check_lengths(
        &self,
        op: &'static str,
        dir: Direction,
        src_len: usize,
        dst_len: usize,
    ) -> Result<()> {
        check_lengths(
            op,
            dir,
            src_len,
            dst_len,
            (self.first, self.extent_end),
            self.packed_size,
        )
    }

    /// Launches the variant for the two addresses' word sizes.
    ///
    /// # Safety
    /// As [`launch`], with lengths checked by [`FusedPacker::check_lengths`].
    unsafe fn launch(
        &self,
        op: &'static str,
        dir: Direction,
        stream: &CudaStream,
        src: CUdeviceptr,
        dst: CUdeviceptr,
    ) -> Result<()> {
        let (words, i) = match dir {
            Direction::Pack => (self.words(src, dst), 0),
            Direction::Unpack => (self.words(dst, src), 1),
        };
        let v = self.variant(op, &words)?;
        // SAFETY: the variant is the regions' for these word sizes, so every byte it touches
        // is within the extent end and the packed size; the rest is this function's contract.
        unsafe { self.fused.launch(op, stream, &v, i, src, dst) }
    }
}

/// Copies many [`CopyRegion`]s strided to strided in one launch: each region's source plan
/// read in the source buffer and written, in the same shape, at its destination start in the
/// destination buffer, which may be the source buffer itself ([`copy_in_place`]). A halo rank
/// that is its own neighbour fills its ghost cells from its interior this way, with no packed
/// buffer in between. See [`crate::fused`] for the CPU reference ([`fused::copy`],
/// [`fused::copy_in_place`]).
///
/// Kernels are generated by [`codegen::generate_fused_copy`], compiled and cached like those of
/// a [`FusedPacker`], one variant per list of word sizes ([`CopyRegion::word_size`] of the two
/// addresses). Where the bytes one launch reads overlap the bytes it writes, or two regions
/// write the same bytes, those bytes get no defined value (the words move in no defined order);
/// a halo's interior and ghost cells are disjoint.
///
/// [`copy_in_place`]: FusedCopier::copy_in_place
pub struct FusedCopier {
    fused: FusedLaunch<1>,
    regions: Vec<CopyRegion>,
    spans: CopySpans,
    bytes: u64,
}

impl fmt::Debug for FusedCopier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FusedCopier")
            .field("regions", &self.regions)
            .field("arch", &self.fused.dev.arch)
            .finish()
    }
}

impl FusedCopier {
    /// A copier for `regions` on `ctx`'s device. Compiles the variant for 256-byte-aligned
    /// buffers (unless nothing is copied).
    ///
    /// # Errors
    /// The errors of [`fused::check_copy`] (a region whose destination exceeds `u64` or differs
    /// in shape from its source); otherwise as [`Packer::with_options`].
    pub fn new(
        ctx: &Arc<CudaContext>,
        regions: Vec<CopyRegion>,
        options: &GpuOptions,
    ) -> Result<Self> {
        const OP: &str = "FusedCopier::new";
        let spans = fused::copy_spans(OP, &regions)?;
        guard(OP, || {
            let c = Self {
                fused: FusedLaunch::new(Device::new(OP, ctx, options)?),
                bytes: regions.iter().map(CopyRegion::bytes).sum(),
                spans,
                regions,
            };
            if c.bytes > 0 {
                c.variant(OP, &c.words(256, 256))?;
            }
            Ok(c)
        })
    }

    /// The regions.
    pub fn regions(&self) -> &[CopyRegion] {
        &self.regions
    }

    /// Bytes one launch copies (the sum over the regions).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes the source buffer needs: the largest extent end of the source plans.
    pub fn src_extent_end(&self) -> u64 {
        self.spans.src.1
    }

    /// Bytes the destination buffer needs: the largest extent end of the destination plans.
    pub fn dst_extent_end(&self) -> u64 {
        self.spans.dst.1
    }

    /// Bytes a buffer needs for a copy within it: the larger of the two extent ends.
    pub fn extent_end(&self) -> u64 {
        self.spans.src.1.max(self.spans.dst.1)
    }

    /// The context the copier launches in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.fused.dev.ctx
    }

    /// The word size of each region for a source buffer at `src_addr` and a destination buffer
    /// at `dst_addr` (addresses or alignments, as [`CopyRegion::word_size`]).
    pub fn words(&self, src_addr: u64, dst_addr: u64) -> Vec<u32> {
        self.regions
            .iter()
            .map(|r| {
                if r.src().is_empty() {
                    1
                } else {
                    r.word_size(src_addr, dst_addr)
                }
            })
            .collect()
    }

    /// Thread blocks and threads per block of the launch for 256-byte-aligned buffers.
    ///
    /// # Errors
    /// As [`FusedCopier::new`].
    pub fn launch_dims(&self) -> Result<(u32, u32)> {
        let v = self.variant("FusedCopier::launch_dims", &self.words(256, 256))?;
        Ok((v.grid, v.block))
    }

    fn variant(&self, op: &'static str, words: &[u32]) -> Result<Arc<FusedVariant<1>>> {
        let plans = self.regions.iter().map(CopyRegion::src);
        self.fused.variant(op, plans, words, |budget, limits| {
            codegen::generate_fused_copy(&self.regions, words, budget, limits)
        })
    }

    /// Copies every region from `src` to `dst`, in one launch on `stream`.
    ///
    /// # Errors
    /// Checked before anything is launched: [`Error::InvalidArgument`] if the stream or a buffer
    /// belongs to another context; [`Error::OutOfBounds`] naming [`Buffer::Source`] if `src` is
    /// shorter than [`src_extent_end`](Self::src_extent_end), or [`Buffer::Destination`] if
    /// `dst` is shorter than [`dst_extent_end`](Self::dst_extent_end). Then the errors of
    /// compiling a new variant, and [`Error::Cuda`] if the launch fails.
    pub fn copy<T, U>(
        &self,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
    ) -> Result<()> {
        const OP: &str = "FusedCopier::copy";
        guard(OP, || {
            check_buffers(OP, &self.fused.dev, stream, src, dst)?;
            self.spans.check(OP, src.num_bytes(), dst.num_bytes())?;
            if self.bytes == 0 {
                return Ok(());
            }
            let (sp, _read) = src.device_ptr(stream);
            let (dp, _write) = dst.device_ptr_mut(stream);
            // SAFETY: as in `Packer::run`: context and lengths checked, cudarc's guards order
            // the launch against other uses of the buffers.
            unsafe { self.launch(OP, stream, sp, dp) }
        })
    }

    /// Copies every region within `buf` (source and destination), in one launch on `stream`.
    ///
    /// # Errors
    /// As [`FusedCopier::copy`], both sides checked against `buf`: too short for a source is
    /// [`Error::OutOfBounds`] naming [`Buffer::Source`], for a destination
    /// [`Buffer::Destination`].
    pub fn copy_in_place<T>(
        &self,
        stream: &CudaStream,
        buf: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        const OP: &str = "FusedCopier::copy_in_place";
        guard(OP, || {
            self.fused
                .dev
                .check_context(OP, "stream", stream.context())?;
            self.fused
                .dev
                .check_context(OP, "buffer", buf.stream().context())?;
            let len = buf.num_bytes();
            self.spans.check(OP, len, len)?;
            if self.bytes == 0 {
                return Ok(());
            }
            let (p, _write) = buf.device_ptr_mut(stream);
            // SAFETY: the buffer and the stream belong to the copier's context and the buffer's
            // length was checked against both sides; cudarc's write guard orders the launch
            // against other uses of the buffer. The launch's own reads and writes of the buffer
            // meet only where regions overlap, which leaves those bytes with undefined contents
            // and touches nothing outside the buffer.
            unsafe { self.launch(OP, stream, p, p) }
        })
    }

    /// Copies like [`FusedCopier::copy`], from the buffer at device address `src` (`src_len`
    /// bytes) to the buffer at `dst` (`dst_len` bytes), without cudarc's event tracking. `src`
    /// may equal `dst` (a copy within one buffer, as [`FusedCopier::copy_in_place`]).
    ///
    /// Checked before anything is launched: the stream's context, `src_len` against
    /// [`src_extent_end`](Self::src_extent_end) and `dst_len` against
    /// [`dst_extent_end`](Self::dst_extent_end), and that neither address is null when there
    /// is something to copy. Neither the addresses' context nor their allocations' lengths can
    /// be checked: that is the caller's part.
    ///
    /// # Safety
    /// `src` and `dst` must be device addresses in the copier's context, each the start of at
    /// least `src_len` and `dst_len` bytes of one live allocation; the two ranges may be the
    /// same or overlap. Both must stay allocated, and no other work may write either range (or
    /// read the destination range), until `stream` has run the launch: nothing here orders the
    /// launch against other streams or cudarc's tracked uses of the same memory.
    ///
    /// # Errors
    /// As [`FusedCopier::copy`], and [`Error::InvalidArgument`] for a null address.
    pub unsafe fn copy_raw(
        &self,
        stream: &CudaStream,
        src: CUdeviceptr,
        src_len: usize,
        dst: CUdeviceptr,
        dst_len: usize,
    ) -> Result<()> {
        const OP: &str = "FusedCopier::copy_raw";
        guard(OP, || {
            self.fused
                .dev
                .check_context(OP, "stream", stream.context())?;
            self.spans.check(OP, src_len, dst_len)?;
            if self.bytes == 0 {
                return Ok(());
            }
            check_addresses(OP, src, dst)?;
            // SAFETY: the lengths were checked against both sides; the rest is the caller's
            // contract.
            unsafe { self.launch(OP, stream, src, dst) }
        })
    }

    /// Launches the variant for the two addresses' word sizes.
    ///
    /// # Safety
    /// As [`launch`], with lengths checked against the copier's spans.
    unsafe fn launch(
        &self,
        op: &'static str,
        stream: &CudaStream,
        src: CUdeviceptr,
        dst: CUdeviceptr,
    ) -> Result<()> {
        let v = self.variant(op, &self.words(src, dst))?;
        // SAFETY: the variant is the regions' for these word sizes, so every byte it reads is
        // within the source extent end and every byte it writes within the destination extent
        // end; the rest is this function's contract.
        unsafe { self.fused.launch(op, stream, &v, 0, src, dst) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{LaunchShape, FLAT_THREADS};

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn packers_are_send_and_sync() {
        send_sync::<Packer>();
        send_sync::<FusedPacker>();
        send_sync::<FusedCopier>();
    }

    #[test]
    fn grid_budgets() {
        // Flat kernels get the full grid under Auto, whatever its size.
        assert_eq!(grid_budget(GridCap::Auto, 528, 132, 100, true), u64::MAX);
        assert_eq!(grid_budget(GridCap::Auto, 528, 132, 100, false), 528);
        assert_eq!(
            grid_budget(GridCap::Auto, 528, 132, 528 * 9, false),
            u64::MAX
        );
        // Explicit policies apply to both mappings.
        for flat in [false, true] {
            assert_eq!(grid_budget(GridCap::Full, 528, 132, 100, flat), u64::MAX);
            assert_eq!(
                grid_budget(GridCap::Waves(2), 528, 132, 1 << 20, flat),
                1056
            );
            assert_eq!(grid_budget(GridCap::PerSm(2), 528, 132, 1 << 20, flat), 264);
            assert_eq!(grid_budget(GridCap::PerSm(0), 528, 132, 1 << 20, flat), 132);
        }
        // The launch the flat shape of a contiguous 4 MiB copy gets by default: every block.
        let plan = StridedBlock::new(0, 4 << 20, vec![], vec![]).unwrap();
        let shape = LaunchShape::for_plan(&plan, 16, &GpuOptions::default().limits()).unwrap();
        assert_eq!(shape.block(), [FLAT_THREADS, 1, 1]);
        let full = u64::from(shape.grid()[0]);
        let cap = grid_budget(GridCap::Auto, 1056, 132, full, shape.is_flat());
        assert_eq!(codegen::cap_grid(shape.grid(), cap), [1024, 1, 1]);
    }

    #[test]
    fn options_and_policy() {
        let o = GpuOptions::default();
        assert_eq!(o.grid, GridCap::Auto);
        assert_eq!(o.max_threads_per_block, 1024);
        assert_eq!(o.limits().max_threads_per_block, 1024);
        let o = o
            .with_grid(GridCap::Waves(2))
            .with_max_threads_per_block(128)
            .with_nvrtc_options(["-lineinfo"]);
        assert_eq!(o.grid, GridCap::Waves(2));
        assert_eq!(o.nvrtc_options, vec!["-lineinfo".to_string()]);
        assert_eq!(
            nvrtc_options("sm_90", &o.nvrtc_options),
            vec![
                "--gpu-architecture=sm_90".to_string(),
                "-lineinfo".to_string()
            ]
        );
    }
}
