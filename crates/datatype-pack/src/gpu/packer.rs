//! [`Packer`]: one plan's generated `pack`/`unpack` kernels, launched between device buffers.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};

use crate::codegen::{self, Direction};
use crate::error::Result;
use crate::plan::StridedBlock;

use super::driver::guard;
use super::launch::{check_lengths, Call, Device, Generated, Kernels, Launcher};
use super::options::GpuOptions;
use super::relaunch::Batch;

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
    /// The kernel sets of the plan, one per word size.
    launcher: Launcher<u32, 2>,
    /// Its channel kernels, one set per word size, compiled on first use
    /// ([`super::channel`]).
    pub(super) channel: Launcher<u32, 2>,
    plan: StridedBlock,
}

impl fmt::Debug for Packer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packer")
            .field("plan", &self.plan)
            .field("arch", &self.launcher.dev.arch)
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
    /// [`Error::Cuda`](crate::Error::Cuda) if the driver cannot describe the device or load the module;
    /// [`Error::Compile`](crate::Error::Compile) (with the log and options) or [`Error::LibraryNotFound`](crate::Error::LibraryNotFound) from
    /// [`compile`](super::compile()).
    pub fn with_options(
        ctx: &Arc<CudaContext>,
        plan: &StridedBlock,
        options: &GpuOptions,
    ) -> Result<Self> {
        const OP: &str = "Packer::new";
        guard(OP, || {
            let dev = Device::new(OP, ctx, options)?;
            let p = Self {
                launcher: Launcher::new(dev.clone()),
                channel: Launcher::new(dev),
                plan: plan.clone(),
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
        &self.launcher.dev.ctx
    }

    /// The word sizes whose kernels are compiled and loaded, ascending.
    pub fn compiled_word_sizes(&self) -> Vec<u32> {
        self.launcher.compiled()
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
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `word_size` does not suit the plan; the errors of
    /// [`compile`](super::compile()); [`Error::Cuda`](crate::Error::Cuda) if the module does not load.
    pub fn prepare(&self, word_size: u32) -> Result<()> {
        self.variant("Packer::prepare", word_size).map(|_| ())
    }

    fn variant(&self, op: &'static str, w: u32) -> Result<Arc<Kernels<2>>> {
        self.launcher.kernels(op, &w, |dev| {
            let k = codegen::generate_with_limits(&self.plan, w, &dev.options.limits())?;
            let (grid, block) = (dev.plan_grid(k.shape()), k.shape().block());
            Ok(Generated {
                kernels: k,
                grid,
                block,
            })
        })
    }

    /// Packs the plan's bytes of `src` (strided) into the front of `dst`, on `stream`
    /// (asynchronously, like a kernel launch).
    ///
    /// # Errors
    /// Checked before anything is launched: [`Error::InvalidArgument`](crate::Error::InvalidArgument) if the stream or a buffer
    /// belongs to another context; [`Error::OutOfBounds`](crate::Error::OutOfBounds) if `src` is shorter than the extent
    /// end; [`Error::BufferTooSmall`](crate::Error::BufferTooSmall) if `dst` is shorter than the packed size. Then the errors
    /// of compiling a new variant, and [`Error::Cuda`](crate::Error::Cuda) if the launch fails.
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
    /// As [`Packer::pack`], with `src` the packed buffer (too short: [`Error::BufferTooSmall`](crate::Error::BufferTooSmall))
    /// and `dst` the strided one (too short: [`Error::OutOfBounds`](crate::Error::OutOfBounds)).
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
    /// As [`Packer::pack`], and [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a null address.
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
    /// As [`Packer::unpack`], and [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a null address.
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

    /// The launch of `dir`: the lengths against the plan, the kernel for the two addresses'
    /// word size.
    fn call<R>(&self, op: &'static str, dir: Direction, f: impl FnOnce(&Call<'_, 2>) -> R) -> R {
        let check = |src_len: usize, dst_len: usize| {
            check_lengths(
                op,
                dir,
                src_len,
                dst_len,
                (self.plan.start(), self.plan.extent_end()),
                self.plan.packed_size(),
            )
        };
        let pick = |src: CUdeviceptr, dst: CUdeviceptr| {
            let i = match dir {
                Direction::Pack => 0,
                Direction::Unpack => 1,
            };
            Ok((self.variant(op, self.plan.word_size(src, dst))?, i))
        };
        // SAFETY: the kernels are the plan's for the addresses' word size, so every byte they
        // touch is within the extent end (strided side) and the packed size (packed side),
        // which `check` measures against the buffers of `dir`'s roles.
        f(&unsafe { Call::new(&check, self.plan.is_empty(), &pick) })
    }

    fn run<T, U>(
        &self,
        op: &'static str,
        dir: Direction,
        stream: &CudaStream,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<U>,
    ) -> Result<()> {
        self.call(op, dir, |c| self.launcher.run(op, stream, src, dst, c))
    }

    /// Records the pack of [`Packer::pack_raw`] into `batch` (on the batch's stream), checked
    /// as there, to be launched with the batch's other launches by [`Batch::launch`].
    ///
    /// # Safety
    /// As [`Packer::pack_raw`], until the batch's stream has run [`Batch::launch`]; no other
    /// launch of the batch touches the bytes this one writes or reads.
    ///
    /// # Errors
    /// As [`Packer::pack_raw`] (nothing is recorded then).
    pub unsafe fn record_pack_raw(
        &self,
        batch: &mut Batch,
        src: CUdeviceptr,
        src_len: usize,
        dst: CUdeviceptr,
        dst_len: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe {
            self.record(
                "Packer::record_pack_raw",
                Direction::Pack,
                batch,
                (src, src_len),
                (dst, dst_len),
            )
        }
    }

    /// Records the unpack of [`Packer::unpack_raw`] into `batch`, as
    /// [`Packer::record_pack_raw`].
    ///
    /// # Safety
    /// As [`Packer::record_pack_raw`].
    ///
    /// # Errors
    /// As [`Packer::unpack_raw`] (nothing is recorded then).
    pub unsafe fn record_unpack_raw(
        &self,
        batch: &mut Batch,
        src: CUdeviceptr,
        src_len: usize,
        dst: CUdeviceptr,
        dst_len: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe {
            self.record(
                "Packer::record_unpack_raw",
                Direction::Unpack,
                batch,
                (src, src_len),
                (dst, dst_len),
            )
        }
    }

    /// # Safety
    /// As [`Packer::record_pack_raw`], for the strided and packed roles of `dir`.
    unsafe fn record(
        &self,
        op: &'static str,
        dir: Direction,
        batch: &mut Batch,
        src: (CUdeviceptr, usize),
        dst: (CUdeviceptr, usize),
    ) -> Result<()> {
        self.call(op, dir, |c| {
            // SAFETY: this function's contract is `Launcher::record_raw`'s.
            unsafe { self.launcher.record_raw(op, batch, src, dst, c) }
        })
    }

    /// # Safety
    /// As [`Packer::pack_raw`], for the strided and packed roles of `dir`.
    unsafe fn run_raw(
        &self,
        op: &'static str,
        dir: Direction,
        stream: &CudaStream,
        src: (CUdeviceptr, usize),
        dst: (CUdeviceptr, usize),
    ) -> Result<()> {
        self.call(op, dir, |c| {
            // SAFETY: this function's contract is `Launcher::run_raw`'s.
            unsafe { self.launcher.run_raw(op, stream, src, dst, c) }
        })
    }
}
