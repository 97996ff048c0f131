//! Packing and unpacking for the interposer's byte path: the GPU (generated kernels on a
//! device buffer) and the CPU reference (host buffers, in the testing mode), with the staging
//! buffers the real MPI sends from and receives into.
//!
//! On the GPU every operation enqueues its kernels and copies on the stream and then waits for
//! the stream once ([`Gpu::run`]); the unpacks of receives completed by one call are all queued
//! first ([`Engine::enqueue_unpack`]) and waited for once per GPU ([`Engine::wait`]). `MPI_Pack`
//! into device memory and `MPI_Unpack` from it move the bytes between the two buffers directly,
//! without staging. Kernels are launched through one-node CUDA graphs
//! ([`datatype_pack::gpu::GpuOptions::relaunch`]) unless `COLLECTIVES_INTERPOSE_RELAUNCH=0`.

use rustc_hash::FxHashMap;
use std::cell::OnceCell;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use datatype_pack::construct::vector;
use datatype_pack::fused::CopyRegion;
use datatype_pack::gpu::cudarc::driver::sys::{self, CUdeviceptr};
use datatype_pack::gpu::cudarc::driver::{CudaContext, CudaStream};
use datatype_pack::gpu::{self as dgpu, FusedCopier, GpuOptions, Packer};
use datatype_pack::{cpu, StridedBlock};

use crate::config;
use crate::error::{cuda, Error, Result};
use crate::ipc::{self, Export};
use crate::log::log;
use crate::memory::DeviceBuffer;
use crate::model::{Costs, Measured, Method};
use crate::profile::{self, Phase};
use crate::sync::lock;
use crate::target::{self, Target};

/// Idle staging buffers kept per GPU and kind, for reuse.
const POOL_KEEP: usize = 16;

/// The size the direct path's staging allocations are rounded up to: the driver's granule of
/// device memory, so that no two share one ([`Gpu::device_alloc`]).
const LEND_GRANULE: usize = 2 << 20;

/// How long a wait polls the stream before it leaves the rest to `cuStreamSynchronize`, where
/// the context's scheduling would put the thread to sleep or yield ([`Gpu::wait`]).
const POLL_LIMIT: Duration = Duration::from_millis(1);

/// One GPU's context, stream, packers and staging pools.
#[derive(Debug)]
pub struct Gpu {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// The primary context's scheduling flags (`CU_CTX_SCHED_*`) when the GPU was first used.
    sched: Option<u32>,
    packers: Mutex<FxHashMap<StridedBlock, Arc<Packer>>>,
    /// Copiers of the write landing, per plan shape (start 0): a send's layout straight into
    /// a peer's receive buffer ([`Engine::write`]).
    copiers: Mutex<FxHashMap<StridedBlock, Arc<FusedCopier>>>,
    /// Handles of program allocations offered to peers ([`Engine::offer`]), per base: the
    /// buffer id asked for and the handle (`None` where the driver gave none); an allocation
    /// at the same base with another id replaces it.
    exports: Mutex<FxHashMap<u64, (u64, Option<ipc::Handle>)>>,
    /// Events peers wait for on lent staging ([`Engine::lend`]), kept for the next loan.
    events: Mutex<Vec<ipc::Event>>,
    device_pool: Mutex<Vec<DeviceAlloc>>,
    /// Device allocations of the direct path's staging (exported to peers, never handed to the
    /// real MPI), kept for the process's life.
    lend_pool: Mutex<Vec<DeviceAlloc>>,
    host_pool: Mutex<Vec<HostAlloc>>,
    costs: OnceLock<Costs>,
}

/// A device allocation of the staging pool, with its CUDA IPC export once asked for.
///
/// An allocation is either the real MPI's to read and write or the direct path's to lend
/// (`lend`), never both: a CUDA-aware MPI maps a sender's device buffers into the receiving
/// process itself, and the driver refuses a second mapping of the same memory there
/// (`CUDA_ERROR_ALREADY_MAPPED`).
#[derive(Debug)]
pub(crate) struct DeviceAlloc {
    ptr: CUdeviceptr,
    len: usize,
    lend: bool,
    ipc: OnceCell<Box<Export>>,
}

impl DeviceAlloc {
    /// The allocation's device address.
    pub(crate) fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The allocation's export ([`ipc::export`]), asked of the driver until it gives one, then
    /// kept: the allocation is whole (`cuMemAlloc`'s), so its handle and offset never change.
    /// Its context must be current.
    pub(crate) fn export(&self) -> Option<Export> {
        if let Some(e) = self.ipc.get() {
            return Some(**e);
        }
        let e = ipc::export(self.ptr, self.len as u64)?;
        let _ = self.ipc.set(Box::new(e));
        Some(e)
    }
}

/// A mapped pinned host allocation of the staging pool: its host address and the device
/// address kernels reach it by.
#[derive(Debug)]
pub(crate) struct HostAlloc {
    host: *mut c_void,
    dev: CUdeviceptr,
    len: usize,
}

// SAFETY: the allocation is owned by the pool or by one `Staging` at a time; the pointer is
// only an address, valid from any thread of the process.
unsafe impl Send for HostAlloc {}

impl HostAlloc {
    /// Its host address, its device address and its length in bytes.
    pub(crate) fn addresses(&self) -> (*mut c_void, CUdeviceptr, usize) {
        (self.host, self.dev, self.len)
    }
}

fn take<T>(pool: &Mutex<Vec<T>>, len: usize, size: impl Fn(&T) -> usize) -> Option<T> {
    let mut p = lock(pool);
    let best = p
        .iter()
        .enumerate()
        .filter(|(_, a)| size(a) >= len)
        .min_by_key(|(_, a)| size(a))
        .map(|(i, _)| i)?;
    Some(p.swap_remove(best))
}

/// The GPUs used so far, by ordinal.
fn gpus() -> &'static Mutex<FxHashMap<usize, Arc<Gpu>>> {
    static GPUS: OnceLock<Mutex<FxHashMap<usize, Arc<Gpu>>>> = OnceLock::new();
    GPUS.get_or_init(|| Mutex::new(FxHashMap::default()))
}

/// The scheduling flags (`CU_CTX_SCHED_*`) of `ctx`'s device's primary context.
fn sched_flags(ctx: &CudaContext) -> Option<u32> {
    let (mut flags, mut active): (std::ffi::c_uint, std::ffi::c_int) = (0, 0);
    // SAFETY: the context's device handle, and two valid out-pointers.
    let rc = unsafe { sys::cuDevicePrimaryCtxGetState(ctx.cu_device(), &mut flags, &mut active) };
    (rc == sys::CUresult::CUDA_SUCCESS)
        .then_some(flags & sys::CUctx_flags::CU_CTX_SCHED_MASK as u32)
}

/// Whether a wait under scheduling flags `sched` polls the stream first: where the driver
/// would yield the thread or block it on an interrupt (spin and auto, which spins while the
/// process has no more contexts than cores, are the driver's own).
fn polls(sched: Option<u32>) -> bool {
    matches!(sched, Some(f) if f == sys::CUctx_flags::CU_CTX_SCHED_YIELD as u32
        || f == sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC as u32)
}

/// The name of scheduling flags `sched`, for the profile.
fn sched_name(sched: Option<u32>) -> &'static str {
    use sys::CUctx_flags as F;
    [
        (F::CU_CTX_SCHED_AUTO, "auto"),
        (F::CU_CTX_SCHED_SPIN, "spin"),
        (F::CU_CTX_SCHED_YIELD, "yield"),
        (F::CU_CTX_SCHED_BLOCKING_SYNC, "blocking-sync"),
    ]
    .into_iter()
    .find(|(f, _)| sched == Some(*f as u32))
    .map_or("unknown", |(_, name)| name)
}

/// One line per GPU used: its context's scheduling and how the interposer waits for it.
pub fn waits() -> Vec<String> {
    let mut v: Vec<(usize, String)> = lock(gpus())
        .values()
        .map(|g| {
            let how = if polls(g.sched) {
                "polls cuStreamQuery, then cuStreamSynchronize"
            } else {
                "cuStreamSynchronize"
            };
            (
                g.ordinal,
                format!(
                    "device {}: context scheduling {}; waits: {how}",
                    g.ordinal,
                    sched_name(g.sched)
                ),
            )
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, l)| l).collect()
}

/// The profile's line on the graph launches of this process (datatype-pack's
/// [`dgpu::graph_counts`]), where there were any: how often a kept graph held a batch's
/// arguments, and how many nodes had their parameters set.
pub fn graphs() -> Option<String> {
    let c = dgpu::graph_counts();
    (c.batches + c.single > 0).then(|| {
        format!(
            "graphs: {} batches launched ({} held their arguments, {} reset, {} made), {} single kernels ({} held their arguments); {} nodes set",
            c.batches, c.held, c.reset, c.made, c.single, c.single_held, c.nodes_set
        )
    })
}

impl Gpu {
    /// The GPU of device `ordinal`, made on first use.
    ///
    /// # Errors
    /// The driver cannot open the context or a stream.
    pub fn get(ordinal: usize) -> Result<Arc<Gpu>> {
        let mut g = lock(gpus());
        if let Some(gpu) = g.get(&ordinal) {
            return Ok(gpu.clone());
        }
        let ctx = dgpu::context(ordinal)?;
        // The legacy default stream: a pack runs after everything the program queued on its
        // own blocking streams (a copy into the send buffer that `cudaMemcpy` returned from
        // before its DMA ended, say), and an unpack ends before anything queued after the
        // receive; MPI's semantics for a buffer handed to a call, kept on device memory.
        let stream = ctx.default_stream();
        let sched = sched_flags(&ctx);
        let gpu = Arc::new(Gpu {
            ordinal,
            ctx,
            stream,
            sched,
            packers: Mutex::new(FxHashMap::default()),
            copiers: Mutex::new(FxHashMap::default()),
            exports: Mutex::new(FxHashMap::default()),
            events: Mutex::new(Vec::new()),
            device_pool: Mutex::new(Vec::new()),
            lend_pool: Mutex::new(Vec::new()),
            host_pool: Mutex::new(Vec::new()),
            costs: OnceLock::new(),
        });
        g.insert(ordinal, gpu.clone());
        Ok(gpu)
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The stream the interposer queues its work on (the context's legacy default stream).
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Whether `d` is memory this GPU's kernels reach: an allocation of its device in its
    /// primary context (or in none the driver names).
    fn accepts(&self, d: &DeviceBuffer) -> bool {
        d.ordinal == self.ordinal && (d.context == 0 || d.context == self.ctx.cu_ctx() as usize)
    }

    /// The cost table for messages on this GPU: the settings' table, or, with
    /// `COLLECTIVES_INTERPOSE_CALIBRATE=1`, its GPU entries measured here once (then
    /// `COLLECTIVES_INTERPOSE_COSTS` again on top).
    pub fn costs(&self) -> Costs {
        *self.costs.get_or_init(|| {
            let cfg = config::get();
            if !cfg.calibrate {
                return cfg.costs;
            }
            match self.measure() {
                Ok(m) => {
                    let mut c = cfg.costs.calibrated(m);
                    if let Some(spec) = &cfg.costs_spec {
                        c.apply(spec);
                    }
                    log!("device {}: calibrated: {m:?} -> {c:?}", self.ordinal);
                    c
                }
                Err(e) => {
                    log!(
                        "device {}: calibration failed, the table stays: {e}",
                        self.ordinal
                    );
                    cfg.costs
                }
            }
        })
    }

    /// Times a tiny and a 4 MiB pack (1 KiB blocks) between device buffers and into mapped
    /// host memory, and a tiny and a 4 MiB DMA copy to pinned host memory; best of 3 each.
    fn measure(&self) -> Result<Measured> {
        const BYTES: u64 = 4 << 20;
        let big = StridedBlock::from_type(&vector(4096, 1, 2, 1024)?)?;
        let tiny = StridedBlock::from_type(&vector(2, 1, 2, 8)?)?;
        let src = self.device_alloc(usize_of(big.extent_end())?, false, &[])?;
        let dev = self.device_alloc(usize_of(BYTES)?, false, &[])?;
        let host = self.host_alloc(usize_of(BYTES)?)?;
        let result = (|| {
            let (pb, pt) = (self.packer(&big)?, self.packer(&tiny)?);
            let best = |f: &dyn Fn() -> Result<()>| -> Result<f64> {
                f()?; // warm-up
                let mut t = f64::INFINITY;
                for _ in 0..3 {
                    let start = std::time::Instant::now();
                    f()?;
                    t = t.min(start.elapsed().as_secs_f64() * 1e6);
                }
                Ok(t)
            };
            let pack = |p: &Packer, dst: u64, dst_len: usize| -> Result<()> {
                // SAFETY: `src` and `dst` are this GPU's staging allocations (device, or mapped
                // host by its device address), of the lengths given, used by nothing else
                // until the stream is synchronized here.
                unsafe { p.pack_raw(&self.stream, src.ptr, src.len, dst, dst_len) }?;
                self.wait()
            };
            Ok(Measured {
                bytes: BYTES,
                tiny_pack_us: best(&|| pack(&pt, dev.ptr, dev.len))?,
                pack_us: best(&|| pack(&pb, dev.ptr, dev.len))?,
                mapped_us: best(&|| pack(&pb, host.dev, host.len))?,
                tiny_dma_us: best(&|| self.memcpy(host.host as u64, dev.ptr, 16))?,
                dma_us: best(&|| self.memcpy(host.host as u64, dev.ptr, BYTES as usize))?,
            })
        })();
        self.give_back_device(src);
        self.give_back_device(dev);
        self.give_back_host(host);
        result
    }

    /// Makes the GPU's context current on this thread.
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| Error::Cuda {
            op: "bind",
            call: "cuCtxSetCurrent",
            message: format!("{e:?}"),
        })
    }

    /// Waits until the stream has run everything enqueued on it. Where the context's
    /// scheduling would yield or sleep ([`polls`]), polls the stream first, for up to
    /// [`POLL_LIMIT`]; then, or otherwise, `cuStreamSynchronize`.
    pub(crate) fn wait(&self) -> Result<()> {
        if polls(self.sched) {
            self.bind()?;
            let start = Instant::now();
            loop {
                // SAFETY: the stream is this context's (current, bound above); asking whether
                // it is idle changes nothing.
                let rc = unsafe { sys::cuStreamQuery(self.stream.cu_stream()) };
                match rc {
                    sys::CUresult::CUDA_SUCCESS => return Ok(()),
                    sys::CUresult::CUDA_ERROR_NOT_READY if start.elapsed() < POLL_LIMIT => {
                        std::hint::spin_loop();
                    }
                    sys::CUresult::CUDA_ERROR_NOT_READY => break,
                    other => return cuda("cuStreamQuery", other),
                }
            }
        }
        self.stream.synchronize().map_err(|e| Error::Cuda {
            op: "wait",
            call: "cuStreamSynchronize",
            message: format!("{e:?}"),
        })
    }

    /// Runs `enqueue` (kernels and copies queued on the stream), then waits for the stream,
    /// whatever `enqueue` returned: nothing is left running on the buffers when this returns.
    fn run(&self, enqueue: impl FnOnce() -> Result<()>) -> Result<()> {
        let queued = enqueue();
        let waited = profile::time(Phase::Wait, || self.wait());
        queued.and(waited)
    }

    /// The packer of `plan` (compiled on first use, kept), launching through one-node graphs
    /// unless `COLLECTIVES_INTERPOSE_RELAUNCH=0`: the interposer launches one kernel at a time
    /// on one stream per GPU and waits for it, where a graph launch saves most.
    ///
    /// # Errors
    /// NVRTC or the driver fail.
    pub fn packer(&self, plan: &StridedBlock) -> Result<Arc<Packer>> {
        if let Some(p) = lock(&self.packers).get(plan) {
            return Ok(p.clone());
        }
        let options = GpuOptions::default().with_relaunch(config::get().relaunch);
        let p = Arc::new(Packer::with_options(&self.ctx, plan, &options)?);
        lock(&self.packers).insert(plan.clone(), p.clone());
        Ok(p)
    }

    /// The copier of the write landing for plans of `shape` (a plan moved to start 0), compiled
    /// on first use and kept, launching as [`Gpu::packer`]'s kernels do.
    ///
    /// # Errors
    /// NVRTC or the driver fail.
    fn copier(&self, shape: &StridedBlock) -> Result<Arc<FusedCopier>> {
        if let Some(c) = lock(&self.copiers).get(shape) {
            return Ok(c.clone());
        }
        let options = GpuOptions::default().with_relaunch(config::get().relaunch);
        let regions = vec![CopyRegion::new(shape.clone(), 0)];
        let c = Arc::new(FusedCopier::new(&self.ctx, regions, &options)?);
        lock(&self.copiers).insert(shape.clone(), c.clone());
        Ok(c)
    }

    /// A device allocation of at least `len` bytes for the real MPI or (`lend`) the direct
    /// path, from its pool where one is there: the first of `prefer` (addresses of the direct
    /// path's allocations) that is, else the smallest that fits.
    pub(crate) fn device_alloc(
        &self,
        len: usize,
        lend: bool,
        prefer: &[u64],
    ) -> Result<DeviceAlloc> {
        let pool = if lend {
            &self.lend_pool
        } else {
            &self.device_pool
        };
        if lend && !prefer.is_empty() {
            let mut p = lock(pool);
            let found = prefer
                .iter()
                .find_map(|&ptr| p.iter().position(|a| a.ptr == ptr && a.len >= len));
            if let Some(i) = found {
                return Ok(p.swap_remove(i));
            }
        }
        if let Some(a) = take(pool, len, |a| a.len) {
            return Ok(a);
        }
        self.bind()?;
        // The direct path's allocations are whole multiples of the driver's 2 MiB granule: the
        // driver places smaller ones side by side in one granule, whose pieces' IPC handles a
        // peer cannot all open (the second is `CUDA_ERROR_ALREADY_MAPPED`:
        // docs/logs/2026-11-27-pull/run18).
        let len = if lend {
            len.max(1).div_ceil(LEND_GRANULE) * LEND_GRANULE
        } else {
            len.max(256)
        };
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: the context is current; `ptr` is a valid out-pointer.
        cuda("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, len) })?;
        Ok(DeviceAlloc {
            ptr,
            len,
            lend,
            ipc: OnceCell::new(),
        })
    }

    pub(crate) fn host_alloc(&self, len: usize) -> Result<HostAlloc> {
        if let Some(a) = take(&self.host_pool, len, |a| a.len) {
            return Ok(a);
        }
        self.bind()?;
        let len = len.max(256);
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: the context is current; `host` is a valid out-pointer.
        cuda("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(
                &mut host,
                len,
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
            )
        })?;
        let mut dev: CUdeviceptr = 0;
        // SAFETY: `host` was just allocated mapped; `dev` is a valid out-pointer.
        let rc = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0) };
        if let Err(e) = cuda("cuMemHostGetDevicePointer", rc) {
            // SAFETY: `host` came from cuMemHostAlloc and is not used elsewhere.
            unsafe { sys::cuMemFreeHost(host) };
            return Err(e);
        }
        Ok(HostAlloc { host, dev, len })
    }

    /// Puts `a` back into its pool, or frees it where the real MPI's pool is full. The direct
    /// path's allocations are always kept: a peer may still have one mapped.
    fn give_back_device(&self, a: DeviceAlloc) {
        if a.lend {
            lock(&self.lend_pool).push(a);
            return;
        }
        let mut p = lock(&self.device_pool);
        if p.len() < POOL_KEEP {
            p.push(a);
        } else if self.bind().is_ok() {
            // SAFETY: `a` came from cuMemAlloc, and its last use (on our stream) was synchronized.
            unsafe { sys::cuMemFree_v2(a.ptr) };
        }
    }

    fn give_back_host(&self, a: HostAlloc) {
        let mut p = lock(&self.host_pool);
        if p.len() < POOL_KEEP {
            p.push(a);
        } else if self.bind().is_ok() {
            // SAFETY: `a` came from cuMemHostAlloc and nothing uses it any more.
            unsafe { sys::cuMemFreeHost(a.host) };
        }
    }

    /// Enqueues a copy of `len` bytes on the stream (host or device addresses).
    fn copy(&self, dst: u64, src: u64, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: both addresses are the starts of at least `len` bytes (checked by the
        // callers), in this context or in host memory under unified addressing; the copy is
        // ordered on our stream, and the stream is waited for before either buffer is used
        // again or given back (the callers run it inside `Gpu::run`, or wait after it).
        cuda("cuMemcpyAsync", unsafe {
            sys::cuMemcpyAsync(dst, src, len, self.stream.cu_stream())
        })
    }

    /// A copy of `len` bytes, waited for.
    fn memcpy(&self, dst: u64, src: u64, len: usize) -> Result<()> {
        self.copy(dst, src, len)?;
        self.wait()
    }
}

/// At `MPI_Type_commit`: when the calling thread has a current CUDA context (the program uses
/// the GPU already), compile the kernels of one element of `plan` for that device now rather
/// than at the first message. Best effort: `None` when there is nothing to do or it failed.
pub fn precompile(plan: &StridedBlock) -> Option<usize> {
    if !dgpu::driver_present() {
        return None;
    }
    let ordinal = std::panic::catch_unwind(|| {
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; asking for the current context initializes nothing.
        let rc = unsafe { sys::cuCtxGetCurrent(&mut ctx) };
        if rc != sys::CUresult::CUDA_SUCCESS || ctx.is_null() {
            return None;
        }
        let mut dev: sys::CUdevice = 0;
        // SAFETY: a context is current; a valid out-pointer.
        let rc = unsafe { sys::cuCtxGetDevice(&mut dev) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            return None;
        }
        usize::try_from(dev).ok()
    })
    .ok()??;
    Gpu::get(ordinal).ok()?.packer(plan).ok()?;
    Some(ordinal)
}

/// A buffer the real MPI sends from or receives into; given back to its pool when dropped.
#[derive(Debug)]
pub enum Staging {
    /// Host memory of the CPU path.
    Cpu(Vec<u8>),
    /// Device memory (the device method).
    Device(Arc<Gpu>, Option<DeviceAlloc>),
    /// Mapped pinned host memory (one-shot).
    Host(Arc<Gpu>, Option<HostAlloc>),
    /// Device memory and pinned host memory (staged).
    Both(Arc<Gpu>, Option<DeviceAlloc>, Option<HostAlloc>),
    /// Not made yet, for this method: a blocking receive's, which the direct path may serve
    /// without one (made where its bytes come through the real MPI,
    /// [`crate::message::Receive::make_staging`]).
    Later(Method),
}

// SAFETY: a staging buffer is owned by one request or call at a time; its addresses are valid
// from any thread.
unsafe impl Send for Staging {}

fn lost() -> Error {
    Error::Unsupported {
        op: "staging",
        message: "a staging buffer of another engine, or given back".to_owned(),
    }
}

impl Staging {
    /// A staging buffer of `n` bytes on `g` for `method`, from its pools.
    ///
    /// # Errors
    /// An allocation fails (what was allocated goes back to the pool).
    fn new(g: &Arc<Gpu>, method: Method, n: usize) -> Result<Staging> {
        Ok(match method {
            Method::Device => Staging::Device(g.clone(), Some(g.device_alloc(n, false, &[])?)),
            Method::OneShot => Staging::Host(g.clone(), Some(g.host_alloc(n)?)),
            Method::Staged => {
                // Owned by the staging from here, so that a failure below gives it back.
                let mut s = Staging::Both(g.clone(), Some(g.device_alloc(n, false, &[])?), None);
                if let Staging::Both(_, _, h) = &mut s {
                    *h = Some(g.host_alloc(n)?);
                }
                s
            }
        })
    }

    /// The address kernels read or write the packed bytes at, and its length: the device
    /// buffer, or the mapped host buffer's device address.
    pub(crate) fn kernel_side(&self) -> Option<(u64, usize)> {
        match self {
            Staging::Device(_, Some(a)) | Staging::Both(_, Some(a), Some(_)) => {
                Some((a.ptr, a.len))
            }
            Staging::Host(_, Some(h)) => Some((h.dev, h.len)),
            _ => None,
        }
    }

    /// The device address of the direct path's staging ([`Engine::lend_staging_for`]), by
    /// which the same allocation may be asked for again; `None` for any other.
    pub fn lend_address(&self) -> Option<u64> {
        match self {
            Staging::Device(_, Some(a)) if a.lend => Some(a.ptr),
            _ => None,
        }
    }

    /// The address the real MPI uses (never of the direct path's staging,
    /// [`Engine::lend_staging_for`]).
    pub fn mpi_ptr(&mut self) -> *mut c_void {
        match self {
            Staging::Cpu(v) => v.as_mut_ptr().cast(),
            Staging::Device(_, Some(d)) => {
                debug_assert!(!d.lend, "the direct path's staging handed to the real MPI");
                d.ptr as *mut c_void
            }
            Staging::Host(_, Some(h)) | Staging::Both(_, _, Some(h)) => h.host,
            _ => std::ptr::null_mut(),
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        match self {
            Staging::Cpu(_) | Staging::Later(_) => {}
            Staging::Device(g, d) => {
                if let Some(d) = d.take() {
                    g.give_back_device(d);
                }
            }
            Staging::Host(g, h) => {
                if let Some(h) = h.take() {
                    g.give_back_host(h);
                }
            }
            Staging::Both(g, d, h) => {
                if let Some(d) = d.take() {
                    g.give_back_device(d);
                }
                if let Some(h) = h.take() {
                    g.give_back_host(h);
                }
            }
        }
    }
}

/// What a peer reads a lent staging by ([`Engine::lend`]): the export of its allocation and
/// the handle of the event recorded after the pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lent {
    /// The staging's allocation, exported.
    pub staging: Export,
    /// The event's IPC handle.
    pub event: ipc::Handle,
}

/// A staging buffer lent to a peer, with the event recorded after its pack: both go back to
/// their pools once the peer is done with them (the event once every loan it covers is).
#[derive(Debug)]
pub struct Loan {
    staging: Staging,
    /// None for a channel's slot ([`crate::channel`]), which a flag orders instead.
    _event: Option<Arc<Recorded>>,
}

impl Loan {
    /// A channel's slot lent with no event: the peer's unpack waits for a flag the pack writes.
    pub fn of_slot(staging: Staging) -> Loan {
        Loan {
            staging,
            _event: None,
        }
    }

    /// The staging, once the peer is done with it (its event, if any, back to the pool).
    pub fn into_staging(self) -> Staging {
        self.staging
    }
}

/// A peer's event a GPU's stream waits for: the GPU's ordinal, the peer and the event's handle.
pub type Waited = (usize, i32, ipc::Handle);

/// An IPC event of a GPU's pool, recorded on its stream after packs that one or more loans
/// lend ([`Engine::lend`]); back to the pool when the last of them is dropped.
#[derive(Debug)]
pub struct Recorded {
    gpu: Arc<Gpu>,
    event: Option<ipc::Event>,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        if let Some(e) = self.event.take() {
            lock(&self.gpu.events).push(e);
        }
    }
}

/// Who packs a buffer.
#[derive(Debug, Clone)]
pub enum Engine {
    /// The CPU reference, on a host buffer (testing mode).
    Cpu,
    /// Generated kernels on a device buffer.
    Gpu(Arc<Gpu>, DeviceBuffer),
}

fn usize_of(v: u64) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::Unsupported {
        op: "engine",
        message: format!("{v} bytes do not fit usize"),
    })
}

/// Whether the byte ranges `[a.0, a.1)` and `[b.0, b.1)` share no byte.
fn disjoint(a: (u64, u64), b: (u64, u64)) -> bool {
    a.1 <= b.0 || b.1 <= a.0
}

/// The packed side of `MPI_Pack`/`MPI_Unpack` when the kernels can use it in place: device
/// memory `g` reaches, not overlapping the bytes of `plan` in `d`.
fn in_place(
    g: &Gpu,
    d: &DeviceBuffer,
    plan: &StridedBlock,
    packed: Option<DeviceBuffer>,
    n: usize,
) -> Option<DeviceBuffer> {
    let layout = (d.ptr + plan.start(), d.ptr + plan.extent_end());
    packed.filter(|p| g.accepts(p) && disjoint(layout, (p.ptr, p.ptr + n as u64)))
}

/// Enqueues the pack of `plan` from the device buffer `d` into device address `dst` (`dst_len`
/// bytes there). With a `batch` the kernel is recorded there instead of launched.
///
/// # Safety
/// `dst` is a device address `g` reaches (device memory of its context, or mapped host memory
/// by its device address), the start of `dst_len` bytes not overlapping the layout's bytes in
/// `d`, used by nothing else until the stream is waited for; a `batch` is for `g`'s stream,
/// launched before that wait, and its other launches write other bytes.
unsafe fn enqueue_pack(
    g: &Gpu,
    d: &DeviceBuffer,
    plan: &StridedBlock,
    dst: u64,
    dst_len: usize,
    batch: Option<&mut dgpu::Batch>,
) -> Result<()> {
    let packer = profile::time(Phase::Packer, || g.packer(plan))?;
    profile::mark("pack: kernels found");
    let src_len = usize_of(d.len)?;
    profile::time(launch_phase(&batch), || match batch {
        // SAFETY: as below; the batch is launched on this GPU's stream (its caller's
        // contract), after everything queued here so far.
        Some(b) => unsafe { packer.record_pack_raw(b, d.ptr, src_len, dst, dst_len) },
        // SAFETY: `d.ptr` is a device address of this GPU with `d.len` bytes to its
        // allocation's end (asked of the driver); `dst` is as this function's contract says.
        None => unsafe { packer.pack_raw(&g.stream, d.ptr, src_len, dst, dst_len) },
    })?;
    Ok(())
}

/// The profile's phase of a kernel launched now ([`Phase::Launch`]) or recorded into a batch
/// ([`Phase::Record`]).
fn launch_phase(batch: &Option<&mut dgpu::Batch>) -> Phase {
    if batch.is_some() {
        Phase::Record
    } else {
        Phase::Launch
    }
}

/// Enqueues the unpack of the `n` packed bytes at device address `src` into the device buffer
/// `d`; a contiguous `plan` (a short message's whole elements) is one copy. With a `batch` the
/// kernel is recorded there instead of launched.
///
/// # Safety
/// `src` is a device address `g` reaches, the start of at least `n` bytes not overlapping the
/// layout's bytes in `d`, which nothing else writes until the stream is waited for; `d` is
/// writable where `plan` says (MPI's contract for a receive buffer); a `batch` is for `g`'s
/// stream, launched before that wait, and its other launches write other bytes.
unsafe fn enqueue_unpack(
    g: &Gpu,
    d: &DeviceBuffer,
    plan: &StridedBlock,
    src: u64,
    n: usize,
    batch: Option<&mut dgpu::Batch>,
) -> Result<()> {
    if plan.is_contiguous() {
        return profile::time(Phase::Copy, || g.copy(d.ptr + plan.start(), src, n));
    }
    let packer = profile::time(Phase::Packer, || g.packer(plan))?;
    profile::mark("unpack: kernels found");
    let dst_len = usize_of(d.len)?;
    profile::time(launch_phase(&batch), || match batch {
        // SAFETY: as below; the batch is launched on this GPU's stream (its caller's
        // contract), after everything queued here so far.
        Some(b) => unsafe { packer.record_unpack_raw(b, src, n, d.ptr, dst_len) },
        // SAFETY: `src` is as this function's contract says; `d` is this GPU's device buffer
        // with `d.len` bytes to its allocation's end.
        None => unsafe { packer.unpack_raw(&g.stream, src, n, d.ptr, dst_len) },
    })?;
    Ok(())
}

impl Engine {
    /// The engine for a buffer on `dev` (or on the host, with `None`).
    ///
    /// # Errors
    /// The GPU's context cannot be made, or the buffer belongs to another context than the
    /// device's primary one (where packers and staging live).
    pub fn for_buffer(dev: Option<DeviceBuffer>) -> Result<Engine> {
        match dev {
            None => Ok(Engine::Cpu),
            Some(d) => {
                let gpu = Gpu::get(d.ordinal)?;
                if !gpu.accepts(&d) {
                    return Err(Error::Unsupported {
                        op: "engine",
                        message: format!(
                            "the buffer belongs to a CUDA context other than device {}'s primary one",
                            d.ordinal
                        ),
                    });
                }
                Ok(Engine::Gpu(gpu, d))
            }
        }
    }

    /// The cost table for this buffer's messages ([`Gpu::costs`]; the settings' table for host
    /// buffers).
    pub fn costs(&self) -> Costs {
        match self {
            Engine::Cpu => config::get().costs,
            Engine::Gpu(g, _) => g.costs(),
        }
    }

    /// A short name for the log.
    pub fn describe(&self) -> String {
        match self {
            Engine::Cpu => "host buffer, CPU reference packer".to_owned(),
            Engine::Gpu(g, _) => format!("device {} buffer", g.ordinal()),
        }
    }

    fn check_span(&self, plan: &StridedBlock) -> Result<()> {
        if let Engine::Gpu(_, d) = self {
            if plan.extent_end() > d.len {
                return Err(Error::Unsupported {
                    op: "engine",
                    message: format!(
                        "the layout reaches {} bytes past the address, the allocation ends {} bytes after it",
                        plan.extent_end(),
                        d.len
                    ),
                });
            }
        }
        Ok(())
    }

    /// Packs `plan` from the buffer at `buf` into a new staging buffer for `method`.
    ///
    /// # Safety
    /// `buf` with `plan` describes memory the caller may read (MPI's contract for a send
    /// buffer); for the GPU engine `buf` is the device buffer the engine was made for.
    ///
    /// # Errors
    /// The allocation is too short for the layout, or a CUDA/NVRTC failure.
    pub unsafe fn pack(
        &self,
        plan: &StridedBlock,
        buf: *const c_void,
        method: Method,
    ) -> Result<Staging> {
        self.check_span(plan)?;
        let n = usize_of(plan.packed_size())?;
        let mut staging = match self {
            Engine::Cpu => Staging::Cpu(vec![0u8; n]),
            Engine::Gpu(g, _) => profile::time(Phase::Staging, || Staging::new(g, method, n))?,
        };
        // SAFETY: the caller's contract; the staging is fresh, used by nothing else, and the
        // stream is waited for below, whatever was queued.
        let queued = unsafe { self.enqueue_pack(plan, buf, &mut staging, None) };
        queued.and(self.wait())?;
        Ok(staging)
    }

    /// Queues the pack of `plan` from the buffer at `buf` into `staging` (a staging buffer of
    /// this engine for at least `plan.packed_size()` bytes) on the GPU's stream without waiting
    /// for it (the CPU engine packs at once); with a `batch` (from [`Engine::new_batch`] of an
    /// engine of the same GPU) the kernel is recorded there, for [`dgpu::Batch::launch`],
    /// unless the staging is staged through host memory (its copy must follow the kernel: the
    /// kernel is launched at once, the copy queued after it). The staging must not be read,
    /// nor the buffer written, before [`Engine::wait`], whatever this returned.
    ///
    /// # Safety
    /// As [`Engine::pack`]; `staging` came from this engine ([`Engine::staging_for`] with a
    /// plan at least as large) and nothing else uses it until that wait; the other launches of
    /// `batch` write other bytes.
    ///
    /// # Errors
    /// As [`Engine::pack`].
    pub unsafe fn enqueue_pack(
        &self,
        plan: &StridedBlock,
        buf: *const c_void,
        staging: &mut Staging,
        batch: Option<&mut dgpu::Batch>,
    ) -> Result<()> {
        self.check_span(plan)?;
        let n = usize_of(plan.packed_size())?;
        match (self, staging) {
            (Engine::Cpu, Staging::Cpu(out)) => {
                // SAFETY: the caller's contract: the layout's bytes are readable from `buf`.
                let src = unsafe {
                    std::slice::from_raw_parts(buf.cast::<u8>(), usize_of(plan.extent_end())?)
                };
                let len = n.min(out.len());
                cpu::pack(plan, src, &mut out[..len])?;
                Ok(())
            }
            (Engine::Gpu(g, d), staging) => {
                let (dst, dst_len) = staging.kernel_side().ok_or_else(lost)?;
                if let Staging::Both(_, Some(dev), Some(host)) = staging {
                    // SAFETY: `dst` is the staging's device side with `dst_len` bytes, used
                    // by nothing else until the wait (the caller's contract).
                    unsafe { enqueue_pack(g, d, plan, dst, dst_len, None) }?;
                    // Staged: the copy to pinned host memory, after the kernel.
                    return profile::time(Phase::Copy, || g.copy(host.host as u64, dev.ptr, n));
                }
                // SAFETY: as above; a batch is this GPU's, launched before the wait, and its
                // other launches write other bytes (the caller's contract).
                unsafe { enqueue_pack(g, d, plan, dst, dst_len, batch) }
            }
            (Engine::Cpu, _) => Err(Error::Unsupported {
                op: "pack",
                message: "staging buffer of another engine".to_owned(),
            }),
        }
    }

    /// A staging buffer of `plan.packed_size()` bytes for `method`, to receive into or to pack
    /// into, with the packer for `plan` compiled ahead (so that a compile error passes the call
    /// through before anything is posted).
    ///
    /// # Errors
    /// As [`Engine::pack`].
    pub fn staging_for(&self, plan: &StridedBlock, method: Method) -> Result<Staging> {
        self.staging(plan, Some(method), &[])
    }

    /// Staging for the direct path's loans of `plan`'s packed bytes ([`Engine::lend`]): device
    /// memory of this engine's GPU that the real MPI never reads or writes (host memory for the
    /// CPU engine, testing). The first allocation of `prefer` ([`Staging::lend_address`]s) back
    /// in the pool is taken where there is one: a persistent send that packs into the same few
    /// allocations at each start launches kernels whose arguments its graphs hold already, and
    /// its receiver unpacks from memory it has mapped.
    ///
    /// # Errors
    /// As [`Engine::staging_for`].
    pub fn lend_staging_for(&self, plan: &StridedBlock, prefer: &[u64]) -> Result<Staging> {
        self.staging(plan, None, prefer)
    }

    /// Staging of `method` for the real MPI, or (`None`) the direct path's, `prefer` as
    /// [`Engine::lend_staging_for`]'s.
    fn staging(
        &self,
        plan: &StridedBlock,
        method: Option<Method>,
        prefer: &[u64],
    ) -> Result<Staging> {
        self.check_span(plan)?;
        let n = usize_of(plan.packed_size())?;
        match self {
            Engine::Cpu => Ok(Staging::Cpu(vec![0u8; n])),
            Engine::Gpu(g, d) => {
                let staging = profile::time(Phase::Staging, || match method {
                    Some(m) => Staging::new(g, m, n),
                    None => Ok(Staging::Device(
                        g.clone(),
                        Some(g.device_alloc(n, true, prefer)?),
                    )),
                })?;
                let (src, _) = staging.kernel_side().ok_or_else(lost)?;
                profile::time(Phase::Packer, || {
                    g.packer(plan)?.prepare(plan.word_size(src, d.ptr))?;
                    Ok(staging)
                })
            }
        }
    }

    /// Unpacks the first `plan.packed_size()` bytes of `staging` into the buffer at `buf`,
    /// and waits for it. A contiguous `plan` (a short message's whole elements) is one copy.
    ///
    /// # Safety
    /// As [`Engine::enqueue_unpack`].
    ///
    /// # Errors
    /// As [`Engine::pack`].
    pub unsafe fn unpack(
        &self,
        plan: &StridedBlock,
        staging: &mut Staging,
        buf: *mut c_void,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        let queued = unsafe { self.enqueue_unpack(plan, staging, buf, None) };
        let waited = self.wait();
        queued.and(waited)
    }

    /// A batch for the kernels of several messages of one call on this GPU (packs,
    /// [`Engine::enqueue_pack`]; unpacks, [`Engine::enqueue_unpack`]), launched as one graph in
    /// launch order ([`dgpu::Batch::in_launch_order`]): the kernels run together, as
    /// independent nodes would, and the graph launches as one stream's work, in about half the
    /// host time of independent nodes (the unpacks of four lent faces, run 37,
    /// docs/logs/2026-11-27-lean: 3.1-3.4 µs against 6.8 µs on the same kind of host). `None`
    /// for the CPU engine and with `COLLECTIVES_INTERPOSE_RELAUNCH=0` (the kernels are then
    /// launched one by one).
    pub fn new_batch(&self) -> Option<dgpu::Batch> {
        match self {
            Engine::Gpu(g, _) if config::get().relaunch => {
                Some(dgpu::Batch::in_launch_order(&g.stream))
            }
            _ => None,
        }
    }

    /// Queues the unpack of the first `plan.packed_size()` bytes of `staging` into the buffer
    /// at `buf` on the GPU's stream without waiting for it (the CPU engine unpacks at once);
    /// with a `batch` (from [`Engine::new_batch`] of an engine of the same GPU) its kernel is
    /// recorded there, for [`dgpu::Batch::launch`], while its copies (staged bytes, a
    /// contiguous plan) are queued at once, ahead of the batch. Several receives completed by
    /// one call queue theirs one after the other and wait once ([`Engine::wait`]); the staging
    /// must not be dropped, nor the buffer read, before that wait, whatever this returned (a
    /// failed call may have queued a copy).
    ///
    /// # Safety
    /// `buf` with `plan` describes memory the caller may write (MPI's contract for a receive
    /// buffer); for the GPU engine `buf` is the device buffer the engine was made for;
    /// `staging` came from [`Engine::staging_for`] of this engine with a plan at least as
    /// large, and holds the received bytes; the other launches of `batch` write other bytes
    /// (MPI's rule for the buffers of distinct receives).
    ///
    /// # Errors
    /// As [`Engine::pack`].
    pub unsafe fn enqueue_unpack(
        &self,
        plan: &StridedBlock,
        staging: &mut Staging,
        buf: *mut c_void,
        batch: Option<&mut dgpu::Batch>,
    ) -> Result<()> {
        self.check_span(plan)?;
        let n = usize_of(plan.packed_size())?;
        if n == 0 {
            return Ok(());
        }
        match (self, staging) {
            (Engine::Cpu, Staging::Cpu(v)) => {
                // SAFETY: the caller's contract: the layout's bytes are writable at `buf`.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(buf.cast::<u8>(), usize_of(plan.extent_end())?)
                };
                cpu::unpack(plan, &v[..n.min(v.len())], dst)?;
                Ok(())
            }
            (Engine::Gpu(g, d), staging) => {
                let (src, _) = staging.kernel_side().ok_or_else(lost)?;
                // Staged: the copy from pinned host memory, before the kernel.
                if let Staging::Both(_, Some(a), Some(h)) = staging {
                    profile::time(Phase::Copy, || g.copy(a.ptr, h.host as u64, n))?;
                }
                // SAFETY: `src` is the staging's kernel side, holding at least `n` received
                // bytes once the copy above ran (the caller's contract), used by nothing else
                // until the wait; `d` is the caller's receive buffer; `batch` is this GPU's,
                // launched after this call and its other launches write other buffers.
                unsafe { enqueue_unpack(g, d, plan, src, n, batch) }
            }
            (Engine::Cpu, _) => Err(Error::Unsupported {
                op: "unpack",
                message: "staging buffer of another engine".to_owned(),
            }),
        }
    }

    /// Lends `staging` (device staging of this engine's GPU, a pack into it queued) to a peer
    /// process: exports its allocation over CUDA IPC and records an event of the GPU's pool
    /// after the pack, which the peer's stream waits for before it unpacks from the staging
    /// ([`Engine::enqueue_pull`]). `recorded` is an event already recorded after this pack
    /// (loans of one start, nothing queued between them), used instead where it is of this GPU;
    /// where not, it becomes the event recorded here. The [`Loan`] keeps both until the peer is
    /// done. Gives the staging back where it cannot be lent (the CPU engine, host staging, no
    /// handle, no event).
    pub fn lend(
        &self,
        staging: Staging,
        recorded: &mut Option<Arc<Recorded>>,
    ) -> std::result::Result<(Loan, Lent), Staging> {
        let Some((g, export)) = self.export_of(&staging) else {
            return Err(staging);
        };
        let event = match recorded {
            Some(r) if Arc::ptr_eq(&r.gpu, g) => r.clone(),
            _ => {
                let Some(event) = lock(&g.events).pop().or_else(ipc::new_event) else {
                    return Err(staging);
                };
                profile::mark("lend: event taken");
                // SAFETY: an event of this context (made by `ipc::new_event` with it current),
                // recorded on this GPU's stream, after the pack queued there.
                let rc = unsafe { sys::cuEventRecord(event.event, g.stream.cu_stream()) };
                profile::mark("lend: event recorded");
                if rc != sys::CUresult::CUDA_SUCCESS {
                    lock(&g.events).push(event);
                    return Err(staging);
                }
                let r = Arc::new(Recorded {
                    gpu: g.clone(),
                    event: Some(event),
                });
                *recorded = Some(r.clone());
                r
            }
        };
        let Some(handle) = event.event.as_ref().map(|e| e.handle) else {
            return Err(staging);
        };
        let lent = Lent {
            staging: export,
            event: handle,
        };
        Ok((
            Loan {
                staging,
                _event: Some(event),
            },
            lent,
        ))
    }

    /// What a peer needs to be greeted with before it announces receives to this process
    /// ([`Engine::reaches`]): the export of `staging`'s allocation (device staging of this
    /// engine's GPU) and the handle of an event of the GPU's pool; `None` where either is
    /// missing.
    pub fn greeting(&self, staging: &Staging) -> Option<Lent> {
        let (g, export) = self.export_of(staging)?;
        let event = lock(&g.events).pop().or_else(ipc::new_event)?;
        let handle = event.handle;
        lock(&g.events).push(event);
        Some(Lent {
            staging: export,
            event: handle,
        })
    }

    /// The GPU of `staging` (the direct path's staging of this engine's GPU,
    /// [`Engine::lend_staging_for`]) and the export of its allocation, with the GPU's context
    /// current; `None` where either is missing (the CPU engine, the real MPI's staging, no
    /// handle).
    pub(crate) fn export_of(&self, staging: &Staging) -> Option<(&Arc<Gpu>, Export)> {
        let (Engine::Gpu(g, _), Staging::Device(_, Some(a))) = (self, staging) else {
            return None;
        };
        if !a.lend {
            return None;
        }
        g.bind().ok()?;
        Some((g, a.export()?))
    }

    /// Whether this engine's GPU maps the allocation and opens the event of `greeting`, from
    /// rank `peer` (both are kept open for its loans).
    pub fn reaches(&self, peer: i32, greeting: &Lent) -> bool {
        let Engine::Gpu(g, _) = self else {
            return false;
        };
        g.bind().is_ok()
            && ipc::open(peer, &greeting.staging.handle).is_some()
            && ipc::open_event(peer, &greeting.event).is_some()
    }

    /// Queues the unpack of `plan` from the staging rank `peer` lent ([`Engine::lend`]),
    /// mapped here over CUDA IPC, into the buffer at `buf`: the GPU's stream first waits for
    /// the peer's event (its pack), then the unpack runs, recorded into `batch` where given,
    /// as [`Engine::enqueue_unpack`]. The caller waits for the stream before the receive
    /// completes and before it tells the peer that it is done with the staging. The stream
    /// waits for an event once per `waited` (the events it waits for in one completion: loans
    /// of one start share an event, whose record stays until every one of them is done).
    ///
    /// # Safety
    /// As [`Engine::enqueue_unpack`] for `buf` and `batch`; `lent` is the peer's note for this
    /// receive, whose staging the peer keeps until told it is done; `waited` holds only events
    /// this stream waited for since the notes now being unpacked were read.
    ///
    /// # Errors
    /// The CPU engine, a staging shorter than the plan, a handle or event that does not open
    /// here, or a CUDA/NVRTC failure.
    pub unsafe fn enqueue_pull(
        &self,
        plan: &StridedBlock,
        peer: i32,
        lent: &Lent,
        buf: *mut c_void,
        batch: Option<&mut dgpu::Batch>,
        waited: &mut Vec<Waited>,
    ) -> Result<()> {
        let Engine::Gpu(g, d) = self else {
            return Err(Error::Unsupported {
                op: "direct unpack",
                message: "a host buffer".to_owned(),
            });
        };
        self.check_span(plan)?;
        if d.ptr != buf as u64 {
            return Err(lost());
        }
        let n = plan.packed_size();
        if lent.staging.len < n {
            return Err(Error::Unsupported {
                op: "direct unpack",
                message: format!("{n} bytes to unpack, {} lent", lent.staging.len),
            });
        }
        let base = profile::time(Phase::Loan, || -> Result<u64> {
            g.bind()?;
            let refused = |what: &str| Error::Unsupported {
                op: "direct unpack",
                message: format!("rank {peer}'s {what} does not open here"),
            };
            let base = ipc::open(peer, &lent.staging.handle).ok_or_else(|| refused("staging"))?;
            profile::mark("pull: staging mapped");
            let w = (g.ordinal, peer, lent.event);
            if !waited.contains(&w) {
                let event = ipc::open_event(peer, &lent.event).ok_or_else(|| refused("event"))?;
                // SAFETY: an event opened in this context, waited for by this context's stream.
                cuda("cuStreamWaitEvent", unsafe {
                    sys::cuStreamWaitEvent(g.stream.cu_stream(), event, 0)
                })?;
                waited.push(w);
            }
            Ok(base)
        })?;
        profile::mark("peer's event waited on");
        // SAFETY: `base + offset` is the peer's staging mapped here, holding the `n` packed
        // bytes once its event has passed (waited for above, on this stream), kept by the peer
        // until this process is done with it; `d` is the caller's receive buffer.
        unsafe { enqueue_unpack(g, d, plan, base + lent.staging.offset, usize_of(n)?, batch) }
    }

    /// The offer of this receive buffer (the engine's device buffer, `plan` its layout) to its
    /// sender's kernel ([`Target`], the direct path's write landing): the export of its
    /// allocation (asked once per allocation), where the driver gives the allocation's id and
    /// a handle, the layout's blocks are at least [`target::MIN_BLOCK`] bytes and lie within the
    /// allocation, and the GPU's stream is idle. The last
    /// keeps the ordering a receive has on the other landings: their unpack runs on this
    /// stream after the program's earlier work there, while the sender's kernel is ordered
    /// only on its own GPU, so a receive offers its buffer only when no work queued here
    /// before it is still to run. `None` for the CPU engine, and wherever any of these fails.
    pub fn offer(&self, plan: &StridedBlock) -> Option<Target> {
        let Engine::Gpu(g, d) = self else {
            return None;
        };
        if d.id == 0
            || plan.block_len() < target::MIN_BLOCK
            || plan.packed_size() == 0
            || self.check_span(plan).is_err()
        {
            return None;
        }
        g.bind().ok()?;
        // SAFETY: the stream is this context's (current, bound above); asking whether it is
        // idle changes nothing.
        if unsafe { sys::cuStreamQuery(g.stream.cu_stream()) } != sys::CUresult::CUDA_SUCCESS {
            return None;
        }
        let handle = {
            let mut exports = lock(&g.exports);
            let e = exports.entry(d.base).or_insert((0, None));
            if e.0 != d.id {
                *e = (d.id, ipc::export(d.base, 0).map(|x| x.handle));
            }
            e.1
        };
        Some(Target {
            alloc: Export {
                handle: handle?,
                offset: d.ptr - d.base,
                len: d.len,
            },
            id: d.id,
            base: d.base,
            plan: plan.clone(),
        })
    }

    /// The write landing's copy: `plan`'s bytes of this engine's buffer `buf` written straight
    /// into rank `peer`'s receive buffer that `target` offers (mapped here over CUDA IPC), in
    /// the same shape, by one kernel on this GPU's stream, waited for: once this returns, the
    /// bytes are in the peer's buffer and the program may write its own.
    ///
    /// # Safety
    /// `buf` with `plan` describes memory the caller may read (MPI's contract for a send
    /// buffer), the device buffer this engine was made for; `target` is the ready message of
    /// the receive this send is matched to, whose buffer its process leaves to the sender until
    /// the note that follows this copy.
    ///
    /// # Errors
    /// The CPU engine, a target of another shape, an allocation that does not open here, or a
    /// CUDA/NVRTC failure (bytes may then be partly written: the receive then unpacks all of
    /// them from a loan, over them).
    pub unsafe fn write(
        &self,
        plan: &StridedBlock,
        buf: *const c_void,
        peer: i32,
        target: &Target,
    ) -> Result<()> {
        let refused = |message: String| Error::Unsupported {
            op: "direct write",
            message,
        };
        let Engine::Gpu(g, d) = self else {
            return Err(refused("a host buffer".to_owned()));
        };
        self.check_span(plan)?;
        if d.ptr != buf as u64 {
            return Err(lost());
        }
        if !target.fits(plan) {
            return Err(refused(format!("rank {peer}'s receive has another shape")));
        }
        let shape = plan.moved_to(0)?;
        g.bind()?;
        let base = profile::time(Phase::Loan, || {
            ipc::open_target(peer, &target.alloc.handle, (target.id, target.base))
        })
        .ok_or_else(|| refused(format!("rank {peer}'s buffer does not open here")))?;
        profile::mark("write: peer's buffer mapped");
        let copier = profile::time(Phase::Packer, || g.copier(&shape))?;
        let (src, dst) = (plan.start(), target.plan.start());
        let (src_len, dst_len) = (usize_of(d.len - src)?, usize_of(target.alloc.len - dst)?);
        g.run(|| {
            // SAFETY: `d.ptr + src` starts the `d.len - src` bytes from the layout's first byte
            // to the end of this engine's allocation, read by the copy only where `plan` says
            // (the caller's contract); `base + offset + dst` starts the `alloc.len - dst` bytes
            // of the peer's receive buffer from its layout's first byte to its allocation's
            // end, mapped here, written only where the receive's plan says and left to this
            // send until its note (the caller's contract); `run` waits for the stream.
            let launched = profile::time(Phase::Launch, || unsafe {
                copier.copy_raw(
                    &g.stream,
                    d.ptr + src,
                    src_len,
                    base + target.alloc.offset + dst,
                    dst_len,
                )
            });
            profile::mark("write: launched");
            launched.map_err(Error::from)
        })
    }

    /// Waits for everything queued on the GPU's stream (nothing for the CPU engine).
    ///
    /// # Errors
    /// The wait fails.
    pub fn wait(&self) -> Result<()> {
        match self {
            Engine::Cpu => Ok(()),
            Engine::Gpu(g, _) => profile::time(Phase::Wait, || g.wait()),
        }
    }

    /// The device ordinal of a GPU engine: engines with the same one share a stream, so one
    /// [`Engine::wait`] covers all their queued work.
    pub fn ordinal(&self) -> Option<usize> {
        match self {
            Engine::Cpu => None,
            Engine::Gpu(g, _) => Some(g.ordinal()),
        }
    }

    /// `MPI_Pack`'s work: packs `plan` from `buf` to `out` (`out_len` bytes there), device or
    /// host memory; `out_dev` is where `out` lives when it is device memory. Device memory of
    /// this GPU is packed into directly, anything else through a device staging buffer.
    ///
    /// # Safety
    /// As [`Engine::pack`] for `buf`; `out` is writable for `out_len` bytes; `out_dev` is the
    /// driver's answer for `out`, with `out_len` no more than its length.
    ///
    /// # Errors
    /// `out_len` is short, or as [`Engine::pack`].
    pub unsafe fn pack_to(
        &self,
        plan: &StridedBlock,
        buf: *const c_void,
        out: *mut c_void,
        out_len: u64,
        out_dev: Option<DeviceBuffer>,
    ) -> Result<()> {
        let n = plan.packed_size();
        if out_len < n {
            return Err(Error::Unsupported {
                op: "MPI_Pack",
                message: format!("{n} packed bytes do not fit the {out_len} left"),
            });
        }
        let n = usize_of(n)?;
        match self {
            Engine::Cpu => {
                // SAFETY: the caller's contract.
                let mut staging = unsafe { self.pack(plan, buf, Method::OneShot) }?;
                // SAFETY: `out` is writable for at least `n` bytes, the staging holds `n`.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        staging.mpi_ptr().cast::<u8>(),
                        out.cast::<u8>(),
                        n,
                    )
                };
                Ok(())
            }
            Engine::Gpu(g, d) => {
                self.check_span(plan)?;
                if let Some(o) = in_place(g, d, plan, out_dev, n) {
                    // SAFETY: `o` is device memory of this GPU with `out_len` (at least `n`)
                    // writable bytes, apart from the layout's bytes; nothing else uses it
                    // during the call.
                    return g.run(|| unsafe {
                        enqueue_pack(g, d, plan, o.ptr, usize_of(out_len)?, None)
                    });
                }
                let staging = profile::time(Phase::Staging, || Staging::new(g, Method::Device, n))?;
                let (dst, dst_len) = staging.kernel_side().ok_or_else(lost)?;
                g.run(|| {
                    // SAFETY: `dst` is the staging's device address with `dst_len` bytes,
                    // fresh from the pool, used by nothing else until the stream is waited for.
                    unsafe { enqueue_pack(g, d, plan, dst, dst_len, None) }?;
                    profile::time(Phase::Copy, || g.copy(out as u64, dst, n))
                })
            }
        }
    }

    /// `MPI_Unpack`'s work: unpacks `plan` into `buf` from `input` (`in_len` bytes there),
    /// device or host memory; `input_dev` is where `input` lives when it is device memory.
    /// Device memory of this GPU is unpacked from directly, anything else through a device
    /// staging buffer.
    ///
    /// # Safety
    /// As [`Engine::unpack`] for `buf`; `input` is readable for `in_len` bytes; `input_dev` is
    /// the driver's answer for `input`, with `in_len` no more than its length.
    ///
    /// # Errors
    /// `in_len` is short, or as [`Engine::unpack`].
    pub unsafe fn unpack_from(
        &self,
        plan: &StridedBlock,
        input: *const c_void,
        in_len: u64,
        input_dev: Option<DeviceBuffer>,
        buf: *mut c_void,
    ) -> Result<()> {
        let n = plan.packed_size();
        if in_len < n {
            return Err(Error::Unsupported {
                op: "MPI_Unpack",
                message: format!("{n} packed bytes are more than the {in_len} left"),
            });
        }
        let n = usize_of(n)?;
        match self {
            Engine::Cpu => {
                let mut staging = self.staging_for(plan, Method::Device)?;
                let Staging::Cpu(v) = &mut staging else {
                    return Err(lost());
                };
                // SAFETY: `input` is readable for at least `n` bytes; `v` holds `n`.
                unsafe { std::ptr::copy_nonoverlapping(input.cast::<u8>(), v.as_mut_ptr(), n) };
                // SAFETY: the caller's contract; the staging holds the packed bytes.
                unsafe { self.unpack(plan, &mut staging, buf) }
            }
            Engine::Gpu(g, d) => {
                self.check_span(plan)?;
                if n == 0 {
                    return Ok(());
                }
                if let Some(i) = in_place(g, d, plan, input_dev, n) {
                    // SAFETY: `i` is device memory of this GPU with at least `n` readable
                    // bytes, apart from the layout's bytes; nothing else writes it during
                    // the call; `d` is the caller's receive buffer.
                    return g.run(|| unsafe { enqueue_unpack(g, d, plan, i.ptr, n, None) });
                }
                let staging = self.staging_for(plan, Method::Device)?;
                let (src, _) = staging.kernel_side().ok_or_else(lost)?;
                g.run(|| {
                    profile::time(Phase::Copy, || g.copy(src, input as u64, n))?;
                    // SAFETY: `src` is the staging's device address, holding the `n` packed
                    // bytes once the copy above ran, used by nothing else; `d` is the
                    // caller's receive buffer.
                    unsafe { enqueue_unpack(g, d, plan, src, n, None) }
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_apart_or_not() {
        assert!(disjoint((0, 8), (8, 16)));
        assert!(disjoint((8, 16), (0, 8)));
        assert!(!disjoint((0, 9), (8, 16)));
        assert!(!disjoint((4, 6), (0, 16)));
    }

    #[test]
    fn waits_poll_only_where_the_driver_would_not_spin() {
        use sys::CUctx_flags as F;
        assert!(!polls(None));
        assert!(!polls(Some(F::CU_CTX_SCHED_AUTO as u32)));
        assert!(!polls(Some(F::CU_CTX_SCHED_SPIN as u32)));
        assert!(polls(Some(F::CU_CTX_SCHED_YIELD as u32)));
        assert!(polls(Some(F::CU_CTX_SCHED_BLOCKING_SYNC as u32)));
        assert_eq!(
            sched_name(Some(F::CU_CTX_SCHED_BLOCKING_SYNC as u32)),
            "blocking-sync"
        );
        assert_eq!(sched_name(None), "unknown");
    }
}
