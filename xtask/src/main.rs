//! `cargo xtask`: the project's task runner.
//!
//! | subcommand | what it does                                                            |
//! |------------|-------------------------------------------------------------------------|
//! | `deps`     | checks Open MPI (headers, `mpirun`) and libclang; installs them with apt as root |
//! | `test`     | `deps`, then `cargo test`, then examples and `mpi_*` tests under `mpirun -n 1..4` |
//! | `bench`    | `deps`, then `collbench allreduce --backend all` under `mpirun -n 2`     |
//! | `fuzz`     | `deps`, then the long fuzz runs: a million layouts against the oracle, ten thousand MPI datatypes against `MPI_Pack` |
//! | `nccl-bindings` | regenerates (or `--check`s) nccl-sys's bindings from a pinned `nccl.h` |
//! | `help`     | prints the usage                                                        |
//!
//! It needs no system library, so it builds before anything else on a bare machine.

mod artifacts;
mod bench;
mod deps;
mod exec;
mod fuzz;
mod host;
mod mpirun;
mod nccl_bindings;
mod results;
mod summary;
mod test;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Usage text printed by `cargo xtask help` and on a bad command line.
const USAGE: &str = "\
usage: cargo xtask <subcommand> [options]

subcommands:
  deps                      check Open MPI headers, mpirun and libclang; install them
                            with apt-get when running as root on Debian/Ubuntu
  test [options] [-- ARGS]  deps, cargo test (ARGS go to cargo test), then every example
                            and every tests/mpi_* binary under mpirun -n 1,2,3,4
      --ranks 1,2           rank counts to launch with (default 1,2,3,4)
      --skip-unit           skip the cargo test step
  bench [ARGS]              deps, then mpirun -n 2 collbench allreduce --backend all ARGS
                            (ARGS default to -b 8 -e 64M -f 2)
  fuzz [options]            deps, then the long fuzz runs, with counts and times: random
                            layouts against an element-by-element oracle (release build),
                            then random nested MPI datatypes decoded and packed against
                            MPI_Pack/MPI_Unpack under mpirun
      --cases N             layouts (default 1000000; 0 skips them)
      --types N             MPI datatypes (default 10000; 0 skips them)
      --seed S              seed of both generators (decimal or 0x hex; default: each
                            fuzzer's fixed seed)
      --ranks K             ranks the datatypes are shared out on (default 2)
  nccl-bindings --header H [--check]  regenerate nccl-sys's bindings from nccl.h H (or compare)
  help                      print this text

environment:
  XTASK_MPI_TIMEOUT=SECS    wall-clock limit of one mpirun launch (default 300; 3600 for fuzz)
  XTASK_JOBS=N              cargo build jobs (default 2)
  COLLECTIVES_GPU_EXAMPLES=1  also run the examples named *nccl*, *cuda* or *gpu*
";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(subcommand) = args.next() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest: Vec<String> = args.collect();
    match subcommand.as_str() {
        "deps" => deps::run(),
        "test" => test::run(&rest),
        "bench" => bench::run(&rest),
        "fuzz" => fuzz::run(&rest),
        "nccl-bindings" => nccl_bindings::run(&rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("xtask: unknown subcommand `{other}`\n");
            eprint!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// The workspace root (the parent of this package's directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The `cargo` that launched us (`$CARGO`), else `cargo` from `PATH`.
pub fn cargo() -> PathBuf {
    std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from)
}

/// The `-j` value for cargo builds: `$XTASK_JOBS`, default 2.
pub fn jobs() -> String {
    std::env::var("XTASK_JOBS")
        .ok()
        .filter(|j| !j.is_empty() && j.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or_else(|| "2".to_owned())
}
