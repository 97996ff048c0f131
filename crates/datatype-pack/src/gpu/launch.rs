//! The one launching path of every launcher ([`Packer`](super::Packer),
//! [`FusedPacker`](super::FusedPacker), [`FusedCopier`](super::FusedCopier)): the device it
//! launches on (its architecture, multiprocessors and options) and the grid budget of a launch
//! under the grid policy; [`Launcher`], which compiles, loads and keeps each kernel set once
//! per key and launches it with its grid and thread block and the two buffers' addresses as
//! arguments; and the front ends every call passes through, which check the stream's and the
//! buffers' context, the lengths against the layout and the addresses before anything is
//! launched. A launcher contributes only its kernel generator, its key (the word sizes) and its
//! length check.

use rustc_hash::FxHashMap;
use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use crate::codegen::{self, Direction};
use crate::error::{invalid, Buffer, Error, Result};

use super::compile::{compile, lock};
use super::driver::{device_arch, drv, guard, Residency};
use super::options::{GpuOptions, GridCap, AUTO_FULL_ABOVE_WAVES};
use super::relaunch::{Batch, Graphs};

/// What a packer knows about its device.
#[derive(Debug, Clone)]
pub(super) struct Device {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) arch: String,
    pub(super) residency: Residency,
    pub(super) options: GpuOptions,
}

impl Device {
    pub(super) fn new(
        op: &'static str,
        ctx: &Arc<CudaContext>,
        options: &GpuOptions,
    ) -> Result<Self> {
        let t = options.max_threads_per_block;
        if !(32..=1024).contains(&t) || !t.is_power_of_two() {
            return Err(invalid(
                op,
                format!("max_threads_per_block {t} is not a power of two from 32 to 1024"),
            ));
        }
        Ok(Self {
            ctx: ctx.clone(),
            arch: device_arch(ctx)?,
            residency: Residency::of(ctx)?,
            options: options.clone(),
        })
    }

    /// Thread blocks of `threads` threads the device holds at once.
    pub(super) fn wave(&self, threads: u32) -> u64 {
        self.residency.wave(threads)
    }

    /// The most thread blocks of `threads` threads a launch whose full grid has `full` blocks
    /// gets, under the grid policy; `flat` for a flat kernel.
    pub(super) fn max_blocks(&self, threads: u32, full: u64, flat: bool) -> u64 {
        grid_budget(
            self.options.grid,
            self.wave(threads),
            self.residency.sms,
            full,
            flat,
        )
    }

    /// The grid a single plan's kernels of launch shape `shape` get under the grid policy: its
    /// full grid capped at [`Device::max_blocks`] ([`codegen::cap_grid`]).
    pub(super) fn plan_grid(&self, shape: &crate::plan::LaunchShape) -> [u32; 3] {
        let full = shape.grid().iter().map(|&g| u64::from(g)).product();
        codegen::cap_grid(
            shape.grid(),
            self.max_blocks(shape.threads_per_block(), full, shape.is_flat()),
        )
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

    pub(super) fn check_context(
        &self,
        op: &'static str,
        what: &str,
        ctx: &CudaContext,
    ) -> Result<()> {
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
pub(super) fn grid_budget(policy: GridCap, wave: u64, sms: u64, full: u64, flat: bool) -> u64 {
    match policy {
        GridCap::Full => u64::MAX,
        GridCap::Waves(w) => wave.saturating_mul(u64::from(w.max(1))),
        GridCap::PerSm(n) => sms.max(1).saturating_mul(u64::from(n.max(1))),
        GridCap::Auto if flat || full > wave.saturating_mul(AUTO_FULL_ABOVE_WAVES) => u64::MAX,
        GridCap::Auto => wave,
    }
}

/// A kernel set of one source, compiled and loaded in a launcher's context, with the grid and
/// thread block every launch of it uses (the block is the one baked into the code).
pub(super) struct Kernels<const N: usize> {
    pub(super) funcs: [CudaFunction; N],
    pub(super) grid: [u32; 3],
    pub(super) block: [u32; 3],
}

/// What a kernel generator produced: CUDA source and the names of its `N` kernels, each taking
/// `(const unsigned char* src, unsigned char* dst)` first ([`codegen::generate_channel`]'s take
/// more after them, and are launched only by [`super::channel`], never by [`Launcher::run`] and
/// its kin).
pub(super) trait KernelSource<const N: usize> {
    fn source(&self) -> &str;
    fn names(&self) -> [&str; N];
}

impl KernelSource<2> for codegen::PlanKernels {
    fn source(&self) -> &str {
        codegen::PlanKernels::source(self)
    }
    fn names(&self) -> [&str; 2] {
        [self.pack_name(), self.unpack_name()]
    }
}

impl KernelSource<2> for codegen::FusedKernels {
    fn source(&self) -> &str {
        codegen::FusedKernels::source(self)
    }
    fn names(&self) -> [&str; 2] {
        [self.pack_name(), self.unpack_name()]
    }
}

impl KernelSource<1> for codegen::FusedCopyKernels {
    fn source(&self) -> &str {
        codegen::FusedCopyKernels::source(self)
    }
    fn names(&self) -> [&str; 1] {
        [self.name()]
    }
}

/// A generated source and the dimensions to launch its kernels with.
pub(super) struct Generated<S> {
    pub(super) kernels: S,
    pub(super) grid: [u32; 3],
    pub(super) block: [u32; 3],
}

/// One call's promise to the front ends: which kernel of which set moves its bytes, and the
/// lengths the buffers must have for it.
pub(super) struct Call<'a, const N: usize> {
    /// `check(src_len, dst_len)`: accepts lengths in bytes that hold every byte the kernels
    /// touch, or says which buffer is too short.
    check: &'a dyn Fn(usize, usize) -> Result<()>,
    /// Nothing to move: the call checks and returns without launching.
    idle: bool,
    /// The kernel set and the index of the kernel for buffers at `(src, dst)`.
    pick: &'a dyn Fn(CUdeviceptr, CUdeviceptr) -> Result<(Arc<Kernels<N>>, usize)>,
}

impl<'a, const N: usize> Call<'a, N> {
    /// A call whose kernels are picked by `pick` and whose lengths are checked by `check`.
    ///
    /// # Safety
    /// Every kernel `pick` returns, launched on buffers at `(src, dst)` whose lengths `check`
    /// accepted, reads only bytes within the source length and writes only bytes within the
    /// destination length (the kernels are generated from the very layout `check` measures).
    pub(super) unsafe fn new(
        check: &'a dyn Fn(usize, usize) -> Result<()>,
        idle: bool,
        pick: &'a dyn Fn(CUdeviceptr, CUdeviceptr) -> Result<(Arc<Kernels<N>>, usize)>,
    ) -> Self {
        Self { check, idle, pick }
    }
}

/// What every launcher holds: its device and the kernel sets compiled so far, one per key (the
/// word sizes they move).
pub(super) struct Launcher<K, const N: usize> {
    /// The one-node graphs of [`GpuOptions::relaunch`]; declared first, so dropped before the
    /// kernels' modules.
    graphs: Graphs,
    pub(super) dev: Device,
    kernels: Mutex<FxHashMap<K, Arc<Kernels<N>>>>,
}

impl<K: Clone + Eq + Hash + Ord, const N: usize> Launcher<K, N> {
    pub(super) fn new(dev: Device) -> Self {
        Self {
            graphs: Graphs::default(),
            dev,
            kernels: Mutex::new(FxHashMap::default()),
        }
    }

    /// The keys whose kernels are compiled and loaded, in ascending order.
    pub(super) fn compiled(&self) -> Vec<K> {
        let mut k: Vec<K> = lock(&self.kernels).keys().cloned().collect();
        k.sort_unstable();
        k
    }

    /// The kernel set for `key`, generated by `generate` (given the device, for the grid
    /// policy), compiled and loaded on first use.
    pub(super) fn kernels<Q, S: KernelSource<N>>(
        &self,
        op: &'static str,
        key: &Q,
        generate: impl FnOnce(&Device) -> Result<Generated<S>>,
    ) -> Result<Arc<Kernels<N>>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut map = lock(&self.kernels);
        if let Some(k) = map.get(key) {
            return Ok(k.clone());
        }
        guard(op, || {
            let g = generate(&self.dev)?;
            let funcs = self.dev.load(op, g.kernels.source(), g.kernels.names())?;
            let k = Arc::new(Kernels {
                funcs,
                grid: g.grid,
                block: g.block,
            });
            map.insert(key.to_owned(), k.clone());
            Ok(k)
        })
    }

    /// Launches kernel `i` of `k` on `(src, dst)` with its own grid and block, unless the grid
    /// is empty; through its one-node graph with [`GpuOptions::relaunch`]. The one place where
    /// a kernel is launched.
    ///
    /// # Safety
    /// `k` is a kernel set of this launcher. `src` and `dst` are device addresses in its
    /// context of buffers that hold every byte the kernel touches from them, stay allocated
    /// until the stream has run the launch, and are not written by other work before then (nor
    /// is the written range read by it).
    unsafe fn launch(
        &self,
        op: &'static str,
        stream: &CudaStream,
        k: &Kernels<N>,
        i: usize,
        src: CUdeviceptr,
        dst: CUdeviceptr,
    ) -> Result<()> {
        if k.grid.contains(&0) {
            return Ok(());
        }
        if self.dev.options.relaunch {
            // SAFETY: the kernel takes the two addresses and this launch is sound (this
            // function's contract); it stays loaded while the launcher, which holds its set
            // and drops its graphs first, lives.
            let launched = unsafe {
                self.graphs
                    .launch(stream, &k.funcs[i], k.grid, k.block, (src, dst))
            }
            .map_err(drv(op))?;
            if launched {
                return Ok(());
            }
        }
        let cfg = LaunchConfig {
            grid_dim: (k.grid[0], k.grid[1], k.grid[2]),
            block_dim: (k.block[0], k.block[1], k.block[2]),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&k.funcs[i]);
        b.arg(&src).arg(&dst);
        // SAFETY: every generated kernel takes exactly `(const unsigned char*, unsigned char*)`,
        // matched by the two 64-bit device addresses pushed above; every byte the kernel touches
        // lies inside the two buffers, which stay allocated and untouched by other work until the
        // launch has run (this function's contract); the block shape is the one baked into the
        // kernel and the grid is within the device's limits (LaunchShape, codegen's partition).
        unsafe { b.launch(cfg) }.map_err(drv(op))?;
        Ok(())
    }

    /// The front end of a call on cudarc buffers: checks the stream's and both buffers'
    /// context, then the lengths, then launches the picked kernel with cudarc's event
    /// bookkeeping around it (the launch waits on the buffers' last writes and is recorded for
    /// their later uses).
    pub(super) fn run<T, U>(
        &self,
        op: &'static str,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
        call: &Call<'_, N>,
    ) -> Result<()> {
        guard(op, || {
            self.dev.check_context(op, "stream", stream.context())?;
            self.dev
                .check_context(op, "source buffer", src.stream().context())?;
            self.dev
                .check_context(op, "destination buffer", dst.stream().context())?;
            (call.check)(src.num_bytes(), dst.num_bytes())?;
            if call.idle {
                return Ok(());
            }
            let (sp, _read) = src.device_ptr(stream);
            let (dp, _write) = dst.device_ptr_mut(stream);
            let (k, i) = (call.pick)(sp, dp)?;
            // SAFETY: both buffers and the stream belong to the launcher's context (checked),
            // the buffers hold `num_bytes` bytes each, which `call.check` accepted for the
            // kernels `call.pick` returns (Call's contract), and cudarc's guards order the
            // launch after earlier writes of the buffers and record it for later uses; a shared
            // and a mutable borrow cannot be one buffer.
            unsafe { self.launch(op, stream, &k, i, sp, dp) }
        })
    }

    /// The front end of a call within one cudarc buffer (source and destination): as
    /// [`Launcher::run`], the buffer's length checked for both sides.
    pub(super) fn run_in_place<T>(
        &self,
        op: &'static str,
        stream: &CudaStream,
        buf: &mut impl DevicePtrMut<T>,
        call: &Call<'_, N>,
    ) -> Result<()> {
        guard(op, || {
            self.dev.check_context(op, "stream", stream.context())?;
            self.dev
                .check_context(op, "buffer", buf.stream().context())?;
            let len = buf.num_bytes();
            (call.check)(len, len)?;
            if call.idle {
                return Ok(());
            }
            let (p, _write) = buf.device_ptr_mut(stream);
            let (k, i) = (call.pick)(p, p)?;
            // SAFETY: the buffer and the stream belong to the launcher's context and the
            // buffer's length was accepted for both sides (Call's contract); cudarc's write
            // guard orders the launch against other uses of the buffer. The launch's own reads
            // and writes of the buffer meet only where the layout's regions overlap, which
            // leaves those bytes with undefined contents and touches nothing outside the buffer.
            unsafe { self.launch(op, stream, &k, i, p, p) }
        })
    }

    /// The front end of a call on raw device addresses: checks the stream's context, the
    /// lengths given and that neither address is null, then launches the picked kernel with no
    /// event bookkeeping.
    ///
    /// # Safety
    /// `src` and `dst` are device addresses in the launcher's context, each the start of at
    /// least `src_len` and `dst_len` bytes of one live allocation, which stay allocated, and
    /// are not written (the destination range not read) by other work, until `stream` has run
    /// the launch.
    pub(super) unsafe fn run_raw(
        &self,
        op: &'static str,
        stream: &CudaStream,
        (src, src_len): (CUdeviceptr, usize),
        (dst, dst_len): (CUdeviceptr, usize),
        call: &Call<'_, N>,
    ) -> Result<()> {
        guard(op, || {
            let Some((k, i)) =
                self.pick_raw(op, stream.context(), (src, src_len), (dst, dst_len), call)?
            else {
                return Ok(());
            };
            // SAFETY: the lengths were accepted for the picked kernel (Call's contract); that
            // the addresses are allocations of this context of those lengths, alive and unused
            // by other work until the launch has run, is this function's contract.
            unsafe { self.launch(op, stream, &k, i, src, dst) }
        })
    }

    /// The checks of a call on raw addresses, on a stream of `ctx`: the context, the lengths,
    /// then (unless the call is idle: `None`) the addresses, and the kernel picked for them.
    fn pick_raw(
        &self,
        op: &'static str,
        ctx: &CudaContext,
        (src, src_len): (CUdeviceptr, usize),
        (dst, dst_len): (CUdeviceptr, usize),
        call: &Call<'_, N>,
    ) -> Result<Option<(Arc<Kernels<N>>, usize)>> {
        self.dev.check_context(op, "stream", ctx)?;
        (call.check)(src_len, dst_len)?;
        if call.idle {
            return Ok(None);
        }
        check_addresses(op, src, dst)?;
        (call.pick)(src, dst).map(Some)
    }

    /// As [`Launcher::run_raw`] on the batch's stream, but the picked kernel is recorded into
    /// `batch` instead of launched ([`Batch::launch`] launches it).
    ///
    /// # Safety
    /// As [`Launcher::run_raw`], until the stream has run the batch's launch; the launch must
    /// not touch bytes another launch of the batch touches.
    pub(super) unsafe fn record_raw(
        &self,
        op: &'static str,
        batch: &mut Batch,
        (src, src_len): (CUdeviceptr, usize),
        (dst, dst_len): (CUdeviceptr, usize),
        call: &Call<'_, N>,
    ) -> Result<()> {
        guard(op, || {
            let picked = self.pick_raw(
                op,
                batch.stream().context(),
                (src, src_len),
                (dst, dst_len),
                call,
            )?;
            if let Some((k, i)) = picked.filter(|(k, _)| !k.grid.contains(&0)) {
                batch.push(k.funcs[i].clone(), k.grid, k.block, (src, dst));
            }
            Ok(())
        })
    }
}

/// Checks the lengths in bytes of a call's buffers against the layout, in the order of
/// [`crate::cpu::pack`]: the strided buffer against `span` (first byte, extent end) first, then
/// the packed buffer against `packed`.
pub(super) fn check_lengths(
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
pub(super) fn check_addresses(op: &'static str, src: CUdeviceptr, dst: CUdeviceptr) -> Result<()> {
    for (what, p) in [("source", src), ("destination", dst)] {
        if p == 0 {
            return Err(invalid(op, format!("the {what} address is null")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen;
    use crate::plan::{LaunchShape, StridedBlock, FLAT_THREADS};

    #[test]
    pub(super) fn grid_budgets() {
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
}
