//! What [`FusedPacker`](super::FusedPacker) and [`FusedCopier`](super::FusedCopier) add to the
//! shared launching path ([`Launcher`]): the grid budget of a fused launch, which the generator
//! shares out among the regions, so it is fixed before the source is generated.

use std::sync::Arc;

use crate::codegen;
use crate::error::Result;
use crate::plan::{LaunchLimits, StridedBlock};

use super::launch::{Generated, KernelSource, Kernels, Launcher};

/// What a fused kernel generator produced, with its 1-D launch shape.
pub(super) trait FusedSource<const N: usize>: KernelSource<N> {
    fn grid_blocks(&self) -> u32;
    fn block_threads(&self) -> u32;
}

impl FusedSource<2> for codegen::FusedKernels {
    fn grid_blocks(&self) -> u32 {
        codegen::FusedKernels::grid_blocks(self)
    }
    fn block_threads(&self) -> u32 {
        codegen::FusedKernels::block_threads(self)
    }
}

impl FusedSource<1> for codegen::FusedCopyKernels {
    fn grid_blocks(&self) -> u32 {
        codegen::FusedCopyKernels::grid_blocks(self)
    }
    fn block_threads(&self) -> u32 {
        codegen::FusedCopyKernels::block_threads(self)
    }
}

/// The fused kernels for `words` (one word size per plan of `plans`), compiled and loaded by
/// `launcher` on first use from the source `generate` makes for a budget of thread blocks and
/// the launch limits.
pub(super) fn fused_kernels<'a, K: FusedSource<N>, const N: usize>(
    launcher: &Launcher<Vec<u32>, N>,
    op: &'static str,
    plans: impl Iterator<Item = &'a StridedBlock>,
    words: &[u32],
    generate: impl FnOnce(u64, &LaunchLimits) -> Result<K>,
) -> Result<Arc<Kernels<N>>> {
    launcher.kernels(op, words, |dev| {
        let limits = dev.options.limits();
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
        let budget = dev.max_blocks(threads, full, true);
        let k = generate(budget, &limits)?;
        let (grid, block) = ([k.grid_blocks(), 1, 1], [k.block_threads(), 1, 1]);
        Ok(Generated {
            kernels: k,
            grid,
            block,
        })
    })
}
