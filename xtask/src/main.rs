//! `cargo xtask`: the project's task runner.
//!
//! | subcommand | what it does                                                            |
//! |------------|-------------------------------------------------------------------------|
//! | `deps`     | checks every program of `deps::PROGRAMS`, Open MPI's headers and libclang; installs what is missing with apt as root |
//! | `test`     | `deps`, then `cargo test` and `cargo doc` (warnings are errors), then examples and `mpi_*` tests under `mpirun -n 1..4`, then the interposer's C checks, then the Python module's tests, the same on two namespace nodes (4 ranks) and under a one-machine Slurm, then the GPU suite where a GPU is present, then the README's set-up in a fresh Debian root |
//! | `bench`    | `deps`, then every collective on every backend here under `mpirun -n 2`: tables, JSON, SVG plots in `results/` |
//! | `gpu-stage` | release build of the GPU suite into `.gpu-box/`, with `run-all.sh` for a GPU machine without Rust |
//! | `gpu-suite` | only the GPU suite: built here, or `--staged DIR` as `run-all.sh` runs it |
//! | `fresh`    | the README's set-up, word for word, as root and as a user with sudo, in minimal Debian roots made by debootstrap |
//! | `interpose` | the MPI interposer's C checks, plain and under `LD_PRELOAD`: host buffers here, `--device` on a GPU machine (`--staged DIR` as `run-interpose.sh` runs them) |
//! | `fuzz`     | `deps`, then the long fuzz runs: a million layouts against the oracle, ten thousand MPI datatypes against `MPI_Pack` |
//! | `nccl-bindings` | regenerates (or `--check`s) nccl-sys's bindings from a pinned `nccl.h` |
//! | `help`     | prints the usage                                                        |
//!
//! It needs no system library beyond the C library, so it builds before anything else on a
//! bare machine; like any Rust program it needs a C compiler driver (`cc`) to link, which
//! rustup's toolchain does not bring (Debian/Ubuntu: `apt-get install gcc`). It runs no external
//! program to signal processes or to learn its user id: both are system calls.

mod artifacts;
mod bench;
mod binaries;
mod deps;
mod exec;
mod fresh;
mod fuzz;
mod gpu;
mod gpu_stage;
mod gpu_suite;
mod host;
mod interpose;
mod mpirun;
mod nccl_bindings;
mod netns;
mod omb;
mod python;
mod results;
mod slurm;
mod summary;
mod test;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Usage text printed by `cargo xtask help` and on a bad command line.
const USAGE: &str = "\
usage: cargo xtask <subcommand> [options]

subcommands:
  deps                      check every program xtask runs (required and optional, one
                            table: xtask/src/deps.rs), Open MPI's headers and libclang;
                            install what is missing with apt-get update and apt-get install
                            when running as root on Debian/Ubuntu, else print the command
  test [options] [-- ARGS]  deps, cargo test (ARGS go to cargo test), cargo doc with
                            rustdoc warnings as errors, then every example
                            and every tests/mpi_* binary under mpirun -n 1,2,3,4, then
                            two nodes in network namespaces (tests, examples,
                            collbench, OMB beside it) and a one-machine Slurm
                            (srun --mpi=pmix, sbatch, salloc + mpirun), each skipped
                            with one line where the machine cannot, then the GPU
                            suite (see gpu-suite) where a GPU is present
      --ranks 1,2           rank counts to launch with (default 1,2,3,4)
      --skip-unit           skip the cargo test and cargo doc steps
      --skip-gpu            skip the GPU suite even where a GPU is present
      --skip-nodes          skip the two-node (network namespace) stage
      --skip-slurm          skip the one-machine Slurm stage
      --skip-fresh          skip the fresh Debian root stage (see fresh)
  bench [ARGS]              deps, then every collective under mpirun -n 2 collbench --backend all
                            ARGS; tables, JSON and SVG plots in results/<date-time>/
                            (ARGS default to -b 8 -e 64M -f 2)
  gpu-stage                 release build of every binary, example and GPU test binary,
                            stripped, into .gpu-box/ with env.sh and the CUDA-aware Open MPI
                            of the GPU kit and run-all.sh: `bash .gpu-box/run-all.sh` on a
                            GPU machine without a Rust toolchain runs the GPU suite
  gpu-suite [options]       only the GPU suite, built here (debug), or as staged:
                            1. test binaries with ignored tests, with --ignored
                            2. nccl_* under mpirun -n 1..GPUs (nccl_halo on 2+ ranks with
                               HALO_EXPECT_IPC=1 where all GPU pairs have peer access)
                            3. cuda_mpi_* under mpirun -n 1..GPUs with
                               COLLECTIVES_EXPECT_CUDA_AWARE=0, under XTASK_CUDA_MPIRUN with =1,
                               and both on 2 ranks sharing GPU 0 (CUDA_VISIBLE_DEVICES=0)
                            4. GPU examples (*nccl*, *cuda*, *gpu*) under mpirun -n 1..GPUs
                            5. collbench p2p with its byte check on 2 ranks sharing GPU 0
                               (mpi-staged; cuda-mpi and mpi-staged under XTASK_CUDA_MPIRUN)
                            6. compute-sanitizer memcheck, racecheck, synccheck over gpu_pack
                               and nccl_collectives on 1 rank (a run passes with the program
                               and \"ERROR SUMMARY: 0 errors\")
                            7. the MPI interposer's C checks on device buffers (interpose
                               --device) on 2 ranks, and 4 with 4 GPUs
      --staged DIR          run the binaries DIR/suite.json lists (what run-all.sh does)
      --dry-run             print the steps' commands, run nothing
      --only TEXT           only the steps whose command contains TEXT (repeatable)
      --skip-sanitizer      leave out the compute-sanitizer runs
      --detect              print whether there is a GPU; exit 0 if so, 1 if not
  fresh [options]           the README's set-up commands in a minimal Debian 12 root
                            (debootstrap --variant=minbase bookworm, kept in target/fresh/base)
                            with the host's toolchain, CA store and a clone of HEAD: as root,
                            all as written; as a user with sudo, up to deps and the command
                            it prints; each step with its time and result. Needs root and
                            mount namespaces; skipped with one line without them
      --cold                make the base and the inner target directory again
      --as root|user        only as root, or only as the user
  fuzz [options]            deps, then the long fuzz runs, with counts and times: random
                            layouts against an element-by-element oracle (release build),
                            then random nested MPI datatypes decoded and packed against
                            MPI_Pack/MPI_Unpack under mpirun
      --cases N             layouts (default 1000000; 0 skips them)
      --types N             MPI datatypes (default 10000; 0 skips them)
      --seed S              seed of both generators (decimal or 0x hex; default: each
                            fuzzer's fixed seed)
      --ranks K             ranks the datatypes are shared out on (default 2)
  interpose [options]       the MPI interposer (crates/mpi-interpose): its C check program
                            built with mpicc, run under mpirun plain and with
                            LD_PRELOAD=libcollectives_interpose.so, results compared
                            (cargo xtask test runs the host flavour at its --ranks)
      --device              device buffers (a -DUSE_CUDA build) under mpirun and the
                            CUDA-aware XTASK_CUDA_MPIRUN, against the plain host build
      --staged DIR          the library and sources staged in DIR (run-interpose.sh)
      --ranks LIST          rank counts (default 1,2,3,4; 2 with --device)
      --bench               the benchmark (interpose_bench.c, 2 ranks) instead of the checks
      --profile             --bench, and each preloaded run once more with the interposer's
                            per-phase profile (COLLECTIVES_INTERPOSE_PROFILE=1)
  nccl-bindings --header H [--check]  regenerate nccl-sys's bindings from nccl.h H (or compare)
  help                      print this text

environment:
  XTASK_MPI_TIMEOUT=SECS    wall-clock limit of one mpirun launch or GPU step (default 300)
  XTASK_SANITIZER_TIMEOUT=SECS  limit of one compute-sanitizer run (default 900)
  XTASK_MPI_TIMEOUT=SECS    wall-clock limit of one mpirun launch (default 300; 3600 for fuzz)
  XTASK_JOBS=N              cargo build jobs (default 2)
  XTASK_GPUS=N              use N GPUs without detecting them; 0 skips the GPU suite
                            (detection: nvidia-smi -L, else /dev/nvidiaN with libcuda.so.1;
                            CUDA_VISIBLE_DEVICES caps the count)
  XTASK_CUDA_MPIRUN=PATH    a CUDA-aware mpirun for the cuda_mpi_* runs; its lib/ (or
                            XTASK_CUDA_MPIRUN_LIB) goes first in LD_LIBRARY_PATH, passed on
                            with -x (run-all.sh uses /opt/ompi-cuda/bin/mpirun when present)
  XTASK_COMPUTE_SANITIZER=PATH  compute-sanitizer when not on PATH or in /usr/local/cuda/bin
  HALO_EXPECT_IPC=0|1       override the peer-access decision for nccl_halo
  XTASK_GPU_KIT=DIR         gpu-stage: the directory with env.sh and ompi-cuda-*.tar.xz
                            (default ../shared/gpu-box beside the checkout)
  XTASK_FRESH_STEP_TIMEOUT=SECS  limit of one fresh-root step (default 2400)
  XTASK_STAGE_BUDGET_MIB=N  gpu-stage: fail when .gpu-box is larger (default 56)
  COLLECTIVES_GPU_EXAMPLES=1  also run the GPU examples at every --ranks count of `test`
  XTASK_PEERS=DIR           the folder with omb-7.4.tar.xz and build.sh (default
                            ../shared/peers beside the checkout)
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
        "gpu-stage" => gpu_stage::run(&rest),
        "gpu-suite" => gpu_suite::run(&rest),
        "fresh" => fresh::run(&rest),
        "fuzz" => fuzz::run(&rest),
        "interpose" => interpose::run(&rest),
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
