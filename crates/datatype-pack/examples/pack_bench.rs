//! GPU pack throughput of the generated kernels against copy baselines, on one GPU (no MPI):
//! [`datatype_pack::bench`], which `collbench pack` also runs.
//!
//! ```text
//! cargo run --release -p datatype-pack --example pack_bench [-- --quick] [--sweep | --sweep-only]
//! ```

use datatype_pack::bench::{self, Options};

fn main() -> Result<(), datatype_pack::Error> {
    let has = |flag: &str| std::env::args().any(|a| a == flag);
    let sweep_only = has("--sweep-only");
    let options = Options::default()
        .with_quick(has("--quick"))
        .with_sweep(sweep_only || has("--sweep"))
        .with_table(!sweep_only);
    bench::run(&options, &mut |line| println!("{line}"))
}
