//! GPU packing: the kernels of [`crate::codegen`] compiled with NVRTC for the device's
//! compute capability, cached, and launched on a stream through [`cudarc`] (re-exported).
//!
//! | item | what it does |
//! |---|---|
//! | [`context`] | a CUDA context for a device, or an `Err` when the driver cannot be loaded |
//! | [`Packer`] | one plan: `pack`/`unpack` between cudarc device buffers on a stream |
//! | [`FusedPacker`] | many [`Region`]s (a halo's faces) packed or unpacked in one launch |
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

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

pub use cudarc;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, DriverError,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use crate::codegen::{self, Direction, Fnv64};
use crate::error::{invalid, Buffer, Error, Result};
use crate::fused::{self, Region};
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
    /// The full [`LaunchShape`](crate::LaunchShape) grid (up to the device limits): each thread
    /// moves one word of one block per grid-stride trip, and most threads make one trip.
    Full,
    /// At most this many waves, a wave being the thread blocks the device holds at once
    /// (multiprocessors x resident blocks per multiprocessor); threads then loop over several
    /// blocks, four loads in flight per thread.
    Waves(u32),
    /// The full grid when it has more than [`AUTO_FULL_ABOVE_WAVES`] waves, one wave otherwise;
    /// a fused launch decides by its largest region and shares the wave among its regions in
    /// proportion to their packed bytes. Measured on an H200 (docs/PACK-GPU-LOG.md): a long
    /// stream of small blocks is fastest with the full grid, while a grid of a few waves (a
    /// halo face, or a halo's faces fused) is faster as one wave of looping threads.
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
    /// Most threads in one thread block, a power of two from 32 to 1024 (default 512): the
    /// `max_threads_per_block` of the [`LaunchLimits`] the kernels' shapes are made under.
    pub max_threads_per_block: u32,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            nvrtc_options: Vec::new(),
            grid: GridCap::Auto,
            max_threads_per_block: 512,
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
    /// gets, under the grid policy.
    fn max_blocks(&self, threads: u32, full: u64) -> u64 {
        let wave = self.wave(threads);
        match self.options.grid {
            GridCap::Full => u64::MAX,
            GridCap::Waves(w) => wave.saturating_mul(u64::from(w.max(1))),
            GridCap::Auto if full > wave.saturating_mul(AUTO_FULL_ABOVE_WAVES) => u64::MAX,
            GridCap::Auto => wave,
        }
    }

    fn load(&self, op: &'static str, source: &str, names: [&str; 2]) -> Result<[CudaFunction; 2]> {
        let img = compile(source, &self.arch, &self.options.nvrtc_options)?;
        let module = self
            .ctx
            .load_module(Ptx::from_binary(img.to_vec()))
            .map_err(drv(op))?;
        let f = |n: &str| module.load_function(n).map_err(drv(op));
        Ok([f(names[0])?, f(names[1])?])
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

/// Launches `f(src, dst)` with the given shape.
fn launch(
    op: &'static str,
    stream: &CudaStream,
    f: &CudaFunction,
    grid: [u32; 3],
    block: [u32; 3],
    src: u64,
    dst: u64,
) -> Result<()> {
    let cfg = LaunchConfig {
        grid_dim: (grid[0], grid[1], grid[2]),
        block_dim: (block[0], block[1], block[2]),
        shared_mem_bytes: 0,
    };
    let mut b = stream.launch_builder(f);
    b.arg(&src).arg(&dst);
    // SAFETY: every generated kernel takes exactly `(const unsigned char*, unsigned char*)`,
    // matched by the two 64-bit device addresses pushed above. The callers checked, before this
    // call, that the strided buffer holds the plan's extent end and the packed buffer its packed
    // size, so every byte the kernel touches lies inside the two buffers; the block shape is the
    // one baked into the kernel and the grid is within the device's limits (LaunchShape).
    unsafe { b.launch(cfg) }.map_err(drv(op))?;
    Ok(())
}

/// Checks the stream and both buffers against the packer's context and the lengths against
/// the layout, in the order of [`crate::cpu::pack`]: strided extent first, then packed size.
#[allow(clippy::too_many_arguments)]
fn check_call<T, U>(
    op: &'static str,
    dev: &Device,
    dir: Direction,
    stream: &CudaStream,
    src: &impl DeviceSlice<T>,
    dst: &impl DeviceSlice<U>,
    span: (u64, u64),
    packed: u64,
) -> Result<()> {
    dev.check_context(op, "stream", stream.context())?;
    dev.check_context(op, "source buffer", src.stream().context())?;
    dev.check_context(op, "destination buffer", dst.stream().context())?;
    let (slen, dlen) = (src.num_bytes(), dst.num_bytes());
    let ((strided, slen_), (packed_buf, plen)) = match dir {
        Direction::Pack => ((Buffer::Source, slen), (Buffer::Destination, dlen)),
        Direction::Unpack => ((Buffer::Destination, dlen), (Buffer::Source, slen)),
    };
    if span.1 > slen_ as u64 {
        return Err(Error::OutOfBounds {
            op,
            buffer: strided,
            first: i128::from(span.0),
            end: i128::from(span.1),
            len: slen_,
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

    fn run<T, U>(
        &self,
        op: &'static str,
        dir: Direction,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
    ) -> Result<()> {
        guard(op, || {
            check_call(
                op,
                &self.dev,
                dir,
                stream,
                src,
                dst,
                (self.plan.start(), self.plan.extent_end()),
                self.plan.packed_size(),
            )?;
            if self.plan.is_empty() {
                return Ok(());
            }
            let (sp, _read) = src.device_ptr(stream);
            let (dp, _write) = dst.device_ptr_mut(stream);
            let w = self.plan.word_size(sp, dp);
            let v = self.variant(op, w)?;
            launch(op, stream, v.func(dir), v.grid, v.block, sp, dp)
        })
    }
}

/// Packs and unpacks many [`Region`]s (one strided buffer, one packed buffer) in one launch
/// each: a halo's 6 or 26 faces, say. See [`crate::fused`] for the layout and the CPU
/// reference; regions unpacked in one launch should not overlap in the strided buffer (the
/// order of overlapping writes is not defined).
pub struct FusedPacker {
    dev: Device,
    regions: Vec<Region>,
    packed_size: u64,
    extent_end: u64,
    first: u64,
    variants: Mutex<HashMap<Vec<u32>, Arc<FusedVariant>>>,
}

struct FusedVariant {
    funcs: [CudaFunction; 2],
    grid: u32,
    block: u32,
}

impl fmt::Debug for FusedPacker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FusedPacker")
            .field("regions", &self.regions)
            .field("arch", &self.dev.arch)
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
                dev: Device::new(OP, ctx, options)?,
                packed_size: fused::packed_size(&regions),
                extent_end: fused::extent_end(&regions),
                first,
                regions,
                variants: Mutex::new(HashMap::new()),
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

    fn variant(&self, op: &'static str, words: &[u32]) -> Result<Arc<FusedVariant>> {
        let mut map = lock(&self.variants);
        if let Some(v) = map.get(words) {
            return Ok(v.clone());
        }
        guard(op, || {
            let limits = self.dev.options.limits();
            // The grid policy looks at the largest region: a launch of many regions of a few
            // waves each (a halo's faces) is one wave of looping threads under `Auto`.
            let mut full = 0u64;
            let mut threads = 1;
            for (r, &w) in self.regions.iter().zip(words) {
                let shape = crate::LaunchShape::with_limits(r.plan(), w, &limits)?;
                if !shape.is_noop() {
                    full = full.max(shape.grid().iter().map(|&g| u64::from(g)).product::<u64>());
                    threads = threads.max(shape.threads_per_block());
                }
            }
            let budget = self.dev.max_blocks(threads, full);
            let k = codegen::generate_fused(&self.regions, words, budget, &limits)?;
            let funcs = self
                .dev
                .load(op, k.source(), [k.pack_name(), k.unpack_name()])?;
            let v = Arc::new(FusedVariant {
                funcs,
                grid: k.grid_blocks(),
                block: k.block_threads(),
            });
            map.insert(words.to_vec(), v.clone());
            Ok(v)
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

    fn run<T, U>(
        &self,
        op: &'static str,
        dir: Direction,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
    ) -> Result<()> {
        guard(op, || {
            check_call(
                op,
                &self.dev,
                dir,
                stream,
                src,
                dst,
                (self.first, self.extent_end),
                self.packed_size,
            )?;
            if self.packed_size == 0 {
                return Ok(());
            }
            let (sp, _read) = src.device_ptr(stream);
            let (dp, _write) = dst.device_ptr_mut(stream);
            let words = match dir {
                Direction::Pack => self.words(sp, dp),
                Direction::Unpack => self.words(dp, sp),
            };
            let v = self.variant(op, &words)?;
            if v.grid == 0 {
                return Ok(());
            }
            launch(
                op,
                stream,
                v.func(dir),
                [v.grid, 1, 1],
                [v.block, 1, 1],
                sp,
                dp,
            )
        })
    }
}

impl FusedVariant {
    fn func(&self, dir: Direction) -> &CudaFunction {
        match dir {
            Direction::Pack => &self.funcs[0],
            Direction::Unpack => &self.funcs[1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn packers_are_send_and_sync() {
        send_sync::<Packer>();
        send_sync::<FusedPacker>();
    }

    #[test]
    fn options_and_policy() {
        let o = GpuOptions::default();
        assert_eq!(o.grid, GridCap::Auto);
        assert_eq!(o.max_threads_per_block, 512);
        assert_eq!(o.limits().max_threads_per_block, 512);
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
