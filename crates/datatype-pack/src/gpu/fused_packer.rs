//! [`FusedPacker`]: many regions (a halo's faces) packed into, or unpacked from, one buffer in
//! one launch.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};

use crate::codegen::{self, Direction};
use crate::error::Result;
use crate::fused::{self, Region};
use crate::plan::StridedBlock;

use super::driver::guard;
use super::fused_launch::fused_kernels;
use super::launch::{check_lengths, Call, Device, Kernels, Launcher};
use super::options::GpuOptions;

/// Packs and unpacks many [`Region`]s (one strided buffer, one packed buffer) in one launch
/// each: a halo's 6 or 26 faces, say. See [`crate::fused`] for the layout and the CPU
/// reference; regions unpacked in one launch should not overlap in the strided buffer (the
/// order of overlapping writes is not defined).
pub struct FusedPacker {
    /// The kernel sets of the regions, one per list of word sizes.
    launcher: Launcher<Vec<u32>, 2>,
    regions: Vec<Region>,
    packed_size: u64,
    extent_end: u64,
    first: u64,
}

impl fmt::Debug for FusedPacker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FusedPacker")
            .field("regions", &self.regions)
            .field("arch", &self.launcher.dev.arch)
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
    /// [`Packer::with_options`](super::Packer::with_options).
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
                launcher: Launcher::new(Device::new(OP, ctx, options)?),
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
        Ok((v.grid[0], v.block[0]))
    }

    /// Compiles and loads the kernels for the word sizes `words` (one per region, as
    /// [`FusedPacker::words`] gives them for a pair of buffers) now rather than on the first
    /// launch that needs them, as [`Packer::prepare`](super::Packer::prepare) does for one plan.
    /// Packers are `Send + Sync` and the compile cache is shared, so several threads can prepare
    /// the variants of many packers at once (NVRTC compiles distinct programs concurrently).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `words` does not have one word
    /// size per region or a word size does not suit its region; the errors of
    /// [`compile`](super::compile()); [`Error::Cuda`](crate::Error::Cuda) if the module does not
    /// load.
    pub fn prepare(&self, words: &[u32]) -> Result<()> {
        self.variant("FusedPacker::prepare", words).map(|_| ())
    }

    /// The word-size lists (one word size per region) whose kernels are compiled and loaded,
    /// in ascending order.
    pub fn compiled_words(&self) -> Vec<Vec<u32>> {
        self.launcher.compiled()
    }

    fn variant(&self, op: &'static str, words: &[u32]) -> Result<Arc<Kernels<2>>> {
        let plans = self.regions.iter().map(Region::plan);
        fused_kernels(&self.launcher, op, plans, words, |budget, limits| {
            codegen::generate_fused(&self.regions, words, budget, limits)
        })
    }

    /// Packs every region of `src` (strided) into its range of `dst` (packed), in one launch
    /// on `stream`.
    ///
    /// # Errors
    /// As [`Packer::pack`](super::Packer::pack), against [`extent_end`](Self::extent_end) and
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
    /// As [`Packer::unpack`](super::Packer::unpack).
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
    /// [`Packer::pack_raw`](super::Packer::pack_raw), against [`extent_end`](Self::extent_end) and
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
    /// As [`FusedPacker::pack`], and [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a null address.
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
    /// event tracking. Checked as [`Packer::pack_raw`](super::Packer::pack_raw).
    ///
    /// # Safety
    /// As [`FusedPacker::pack_raw`].
    ///
    /// # Errors
    /// As [`FusedPacker::unpack`], and [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a null address.
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

    /// The launch of `dir`: the lengths against the regions, the kernels for the two
    /// addresses' word sizes.
    fn call<R>(&self, op: &'static str, dir: Direction, f: impl FnOnce(&Call<'_, 2>) -> R) -> R {
        let check = |src_len: usize, dst_len: usize| {
            check_lengths(
                op,
                dir,
                src_len,
                dst_len,
                (self.first, self.extent_end),
                self.packed_size,
            )
        };
        let pick = |src: CUdeviceptr, dst: CUdeviceptr| {
            let (words, i) = match dir {
                Direction::Pack => (self.words(src, dst), 0),
                Direction::Unpack => (self.words(dst, src), 1),
            };
            Ok((self.variant(op, &words)?, i))
        };
        // SAFETY: the kernels are the regions' for the addresses' word sizes, so every byte they
        // touch is within the extent end (strided side) and the packed size (packed side),
        // which `check` measures against the buffers of `dir`'s roles.
        f(&unsafe { Call::new(&check, self.packed_size == 0, &pick) })
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

    /// # Safety
    /// As [`FusedPacker::pack_raw`], for the strided and packed roles of `dir`.
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
