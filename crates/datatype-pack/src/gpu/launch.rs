//! What every launcher shares: the device it launches on (its architecture, multiprocessors and
//! options), the grid budget of a launch, the launch itself, and the checks of a call's stream,
//! buffers and lengths before anything is launched.

use std::sync::Arc;

use cudarc::driver::sys::{CUdevice_attribute, CUdeviceptr};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, DeviceSlice, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use crate::codegen::Direction;
use crate::error::{invalid, Buffer, Error, Result};

use super::compile::compile;
use super::driver::{device_arch, drv};
use super::options::{GpuOptions, GridCap, AUTO_FULL_ABOVE_WAVES};

/// What a packer knows about its device.
#[derive(Debug, Clone)]
pub(super) struct Device {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) arch: String,
    pub(super) sms: u64,
    pub(super) threads_per_sm: u64,
    pub(super) blocks_per_sm: u64,
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
    pub(super) fn wave(&self, threads: u32) -> u64 {
        let per_sm = (self.threads_per_sm / u64::from(threads.max(1)))
            .min(self.blocks_per_sm)
            .max(1);
        self.sms * per_sm
    }

    /// The most thread blocks of `threads` threads a launch whose full grid has `full` blocks
    /// gets, under the grid policy; `flat` for a flat kernel.
    pub(super) fn max_blocks(&self, threads: u32, full: u64, flat: bool) -> u64 {
        grid_budget(self.options.grid, self.wave(threads), self.sms, full, flat)
    }

    pub(super) fn load<const N: usize>(
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

/// Launches `f(src, dst)` with the given shape.
///
/// # Safety
/// `f` is a generated kernel taking `(const unsigned char*, unsigned char*)`, loaded in the
/// context of `stream`; `grid` is within the device's limits and `block` is the shape baked into
/// the kernel. `src` and `dst` are device addresses in that context of buffers that hold every
/// byte the kernel touches from them (the callers checked the lengths against the layout), stay
/// allocated until the stream has run the launch, and are not written by other work before then
/// (nor is the written range read by it).
pub(super) unsafe fn launch(
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
pub(super) fn check_buffers<T, U>(
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
