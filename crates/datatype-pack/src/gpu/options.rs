//! Launch options of the packers: [`GpuOptions`] (NVRTC options, grid policy, threads per
//! block) and the grid policy [`GridCap`].

use crate::plan::LaunchLimits;
#[cfg(doc)]
use crate::plan::LaunchShape;

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
    /// (docs/logs/PACK-GPU-LOG.md) for kernels by axes: a long stream of small blocks is fastest
    /// with the full grid, while a grid of a few waves is faster as one wave of looping threads.
    Auto,
}

/// [`GridCap::Auto`] launches the full grid above this many waves.
pub const AUTO_FULL_ABOVE_WAVES: u64 = 8;

/// Tuning and compile options of a [`Packer`](super::Packer) or [`FusedPacker`](super::FusedPacker).
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
    /// Launch each kernel through a one-node CUDA graph whose arguments are set before each
    /// launch (default off): about 2 µs less host time per launch and 2.4 µs less per launch
    /// waited for on an H100, for a caller that launches and waits for one kernel at a time.
    /// Launches of one kernel then run in order also across streams; a stream being captured
    /// gets plain launches. See the `relaunch` module.
    pub relaunch: bool,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            nvrtc_options: Vec::new(),
            grid: GridCap::Auto,
            max_threads_per_block: 1024,
            relaunch: false,
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

    /// These options with kernels launched through one-node graphs, or not
    /// ([`GpuOptions::relaunch`]).
    pub fn with_relaunch(mut self, relaunch: bool) -> Self {
        self.relaunch = relaunch;
        self
    }

    /// These options with thread blocks of at most `threads` threads.
    pub fn with_max_threads_per_block(mut self, threads: u32) -> Self {
        self.max_threads_per_block = threads;
        self
    }

    pub(super) fn limits(&self) -> LaunchLimits {
        LaunchLimits {
            max_threads_per_block: self.max_threads_per_block,
            ..LaunchLimits::CUDA
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::compile::nvrtc_options;
    use super::*;

    #[test]
    fn options_and_policy() {
        let o = GpuOptions::default();
        assert_eq!(o.grid, GridCap::Auto);
        assert_eq!(o.max_threads_per_block, 1024);
        assert!(!o.relaunch);
        assert!(o.clone().with_relaunch(true).relaunch);
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
