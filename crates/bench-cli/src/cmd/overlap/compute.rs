//! The computation `collbench overlap` puts between the start of an operation and its wait: a
//! dummy loop on the CPU (host buffers), or a kernel on a second stream of the GPU (device
//! buffers), each sized in seconds. As OSU's `dummy_compute`, with `tests > 0` the computation is
//! cut into that many equal parts with one test of the operation after each part (on the GPU: the
//! kernel runs while the host makes the tests), and the time spent in the tests is returned.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use collectives_core::cudarc::driver::PushKernelArg;
use collectives_core::cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig};
use collectives_core::cudarc::nvrtc::Ptx;

/// Time spent computing and testing, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spent {
    /// From the start of the computation to its end, the tests included (OSU's `tcomp`).
    pub compute: f64,
    /// Inside the tests (OSU's `test_time`).
    pub test: f64,
}

/// Where the computation runs.
#[derive(Debug)]
pub enum Compute {
    /// The host: a loop of floating-point arithmetic that checks the clock between chunks.
    Cpu,
    /// The GPU: a one-thread kernel spinning on `clock64()` on its own stream.
    Gpu(GpuSpin),
}

impl Compute {
    /// Compute for about `seconds`, with `tests` calls of `test` spread over it.
    ///
    /// # Errors
    /// The first error of `test`; CUDA errors of the kernel.
    pub fn run(
        &self,
        seconds: f64,
        tests: usize,
        test: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Spent> {
        match self {
            Compute::Cpu => cpu(seconds, tests, test),
            Compute::Gpu(g) => g.run(seconds, tests, test),
        }
    }

    /// `cpu` or `gpu`, for the header.
    pub fn name(&self) -> &'static str {
        match self {
            Compute::Cpu => "cpu",
            Compute::Gpu(_) => "gpu",
        }
    }
}

/// Arithmetic steps between two readings of the clock (well under a microsecond).
const CHUNK: u32 = 64;

/// Busy the core for `seconds` with arithmetic that the compiler cannot drop, reading the clock
/// between chunks of `CHUNK` steps (OSU's `do_compute_cpu` reads it between matrix passes).
pub fn spin(seconds: f64) {
    let start = Instant::now();
    let mut x = 1.0f64;
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..CHUNK {
            x = black_box(x * 1.000_000_1 + 1e-9);
        }
    }
    black_box(x);
}

fn cpu(
    seconds: f64,
    tests: usize,
    test: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Spent> {
    let start = Instant::now();
    let mut in_tests = 0.0;
    if tests == 0 {
        spin(seconds);
    } else {
        for _ in 0..tests {
            spin(seconds / tests as f64);
            let t = Instant::now();
            test()?;
            in_tests += t.elapsed().as_secs_f64();
        }
    }
    Ok(Spent {
        compute: start.elapsed().as_secs_f64(),
        test: in_tests,
    })
}

/// The kernel: one thread spins until `cycles` clock cycles have passed.
pub const SPIN_SOURCE: &str = r#"
extern "C" __global__ void collbench_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"#;

/// A spinning kernel on its own stream, calibrated in clock cycles per second.
#[derive(Debug)]
pub struct GpuSpin {
    stream: Arc<CudaStream>,
    func: CudaFunction,
    cycles_per_second: f64,
}

impl GpuSpin {
    /// Compile the kernel with NVRTC for `ctx`'s device, make a stream for it and calibrate it.
    ///
    /// # Errors
    /// NVRTC and CUDA errors.
    pub fn new(ctx: &Arc<CudaContext>) -> anyhow::Result<Self> {
        let arch = datatype_pack::gpu::device_arch(ctx)?;
        let image = datatype_pack::gpu::compile(SPIN_SOURCE, &arch, &[])
            .context("compiling the compute kernel")?;
        let module = ctx.load_module(Ptx::from_binary(image.to_vec()))?;
        let func = module.load_function("collbench_spin")?;
        let stream = ctx.new_stream()?;
        let mut spin = GpuSpin {
            stream,
            func,
            cycles_per_second: 1e9,
        };
        // The first launch loads the module; the second measures.
        const CYCLES: i64 = 20_000_000;
        spin.launch(CYCLES)?;
        spin.stream.synchronize()?;
        let start = Instant::now();
        spin.launch(CYCLES)?;
        spin.stream.synchronize()?;
        let took = start.elapsed().as_secs_f64();
        if took > 0.0 {
            spin.cycles_per_second = CYCLES as f64 / took;
        }
        Ok(spin)
    }

    fn launch(&self, cycles: i64) -> anyhow::Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.func);
        b.arg(&cycles);
        // SAFETY: the kernel takes exactly one `long long`, pushed above as an i64; it touches
        // no memory; one block of one thread is within every device's limits.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    fn run(
        &self,
        seconds: f64,
        tests: usize,
        test: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Spent> {
        let start = Instant::now();
        self.launch((seconds * self.cycles_per_second).round() as i64)?;
        let mut in_tests = 0.0;
        for _ in 0..tests {
            let t = Instant::now();
            test()?;
            in_tests += t.elapsed().as_secs_f64();
        }
        self.stream.synchronize()?;
        Ok(Spent {
            compute: start.elapsed().as_secs_f64(),
            test: in_tests,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_compute_lasts_and_counts_its_tests() {
        let mut calls = 0;
        let spent = Compute::Cpu
            .run(2e-3, 4, &mut || {
                calls += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(calls, 4);
        assert!(spent.compute >= 2e-3, "{spent:?}");
        assert!(spent.test >= 0.0 && spent.test <= spent.compute);
        let spent = Compute::Cpu.run(1e-3, 0, &mut || unreachable!()).unwrap();
        assert!(spent.compute >= 1e-3 && spent.test == 0.0);
        let r = Compute::Cpu.run(1e-4, 2, &mut || anyhow::bail!("boom"));
        assert!(r.is_err());
    }
}
