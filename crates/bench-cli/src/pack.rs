//! `collbench pack`: GPU pack throughput of the generated kernels against copy baselines, and NVRTC
//! compile times, on one GPU (no MPI needed). The measurement itself is [`bench`](mod@bench).

pub mod bench;

use clap::Args;

use bench::Options;

/// Flags of `collbench pack`.
#[derive(Debug, Args)]
pub struct PackArgs {
    /// Totals up to 1 MiB and the faces of a 128^3 grid, instead of 64 MiB (which allocates
    /// about 32 GiB of source) and 512^3.
    #[arg(long)]
    pub quick: bool,
    /// Also sweep launch configurations (threads per block x grid cap).
    #[arg(long)]
    pub sweep: bool,
    /// Only the compile times and the sweep, no throughput table.
    #[arg(long = "sweep-only")]
    pub sweep_only: bool,
    /// The CUDA device.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

impl PackArgs {
    /// The benchmark's options.
    pub fn options(&self) -> Options {
        Options::default()
            .with_device(self.device)
            .with_quick(self.quick)
            .with_sweep(self.sweep || self.sweep_only)
            .with_table(!self.sweep_only)
    }
}

/// Run the benchmark, printing Markdown tables as the rows come.
///
/// # Errors
/// No CUDA driver or NVRTC, no such device, allocations or compiles that fail.
pub fn run(args: &PackArgs) -> anyhow::Result<()> {
    println!(
        "# collbench pack: one GPU; rows: contiguous 4 MiB, 2-D vectors at stride 512, the 6 \
         faces of a grid with radius 3 (fused); columns: ours, D2D copy (the ceiling), \
         cuMemcpy2DAsync, one copy per block, one thread per word"
    );
    bench::run(&args.options(), &mut |line| println!("{line}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: PackArgs,
    }

    #[test]
    fn flags() {
        let w = Wrap::try_parse_from(["x"]).unwrap();
        assert_eq!(w.args.options(), Options::default());
        let w = Wrap::try_parse_from(["x", "--quick", "--sweep-only", "--device", "1"]).unwrap();
        let o = w.args.options();
        assert!(o.quick && o.sweep && !o.table);
        assert_eq!(o.device, 1);
    }
}
