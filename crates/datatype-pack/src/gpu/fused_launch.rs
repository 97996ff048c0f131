//! What [`FusedPacker`](super::FusedPacker) and [`FusedCopier`](super::FusedCopier) share:
//! the kernels of a fused launch, compiled per list of word sizes, and their launch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaFunction, CudaStream};

use crate::codegen;
use crate::error::Result;
use crate::plan::{LaunchLimits, StridedBlock};

use super::compile::lock;
use super::driver::guard;
use super::launch::{launch, Device};

/// The kernels of a fused launch, compiled for one list of word sizes, and its shape.
pub(super) struct FusedVariant<const N: usize> {
    pub(super) funcs: [CudaFunction; N],
    pub(super) grid: u32,
    pub(super) block: u32,
}

/// What a fused kernel generator produced: a source, its kernels' names, its launch shape.
pub(super) trait FusedSource<const N: usize> {
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
pub(super) struct FusedLaunch<const N: usize> {
    pub(super) dev: Device,
    pub(super) variants: Mutex<HashMap<Vec<u32>, Arc<FusedVariant<N>>>>,
}

impl<const N: usize> FusedLaunch<N> {
    pub(super) fn new(dev: Device) -> Self {
        Self {
            dev,
            variants: Mutex::new(HashMap::new()),
        }
    }

    /// The word-size lists whose kernels are compiled and loaded, in ascending order.
    pub(super) fn compiled_words(&self) -> Vec<Vec<u32>> {
        let mut w: Vec<Vec<u32>> = lock(&self.variants).keys().cloned().collect();
        w.sort_unstable();
        w
    }

    /// The variant for `words` (one word size per plan of `plans`), compiled and loaded on
    /// first use from the source `generate` makes for a budget of thread blocks and the launch
    /// limits.
    pub(super) fn variant<'a, K: FusedSource<N>>(
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
    pub(super) unsafe fn launch(
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
