//! `collbench`: collective benchmarks over the collectives library, run under `mpirun`, with nccl-tests'
//! flags and columns.
//!
//! | module | what it holds |
//! |---|---|
//! | [`cli`] | the command line (clap) and its check into a [`cli::Plan`] |
//! | [`sizes`] | `8`, `1K`, `64M`, `1G` and the sequence of sizes (`-b -e -f -i`) |
//! | [`dtype`] | `-d` names and the dispatch to the Rust element type |
//! | [`backend`] | `--backend`: which backends exist and which can run here |
//! | [`expected`] | inputs and expected results of the `#wrong` check |
//! | [`timing`] | per-call time (wall clock, CUDA events), its spread over ranks, algbw and busbw |
//! | [`engine`] | the benchmark engine: buffers per backend, warm-up, timed loop, `#wrong`, statistics, rows |
//! | [`coll`] | every collective's hooks over the engine (one file each) and the bus-bandwidth table |
//! | [`variant`] | the variants of a timed call (library, raw, checked) and their comparison |
//! | [`persistent`] | the `persistent` variant: every collective through the library's persistent plans |
//! | [`raw`] | the raw baselines: `MPI_Allreduce`, `ncclAllReduce`, `MPI_Allreduce` on device pointers |
//! | [`comms`] | the communicators of a run on each backend, and what each runs on |
//! | [`pack`] | `collbench pack`: GPU pack throughput against copy baselines (one GPU, no MPI) |
//! | [`halo`] | `collbench halo`: the 3-D halo exchange per step, against the same bytes sent contiguously |
//! | [`fastest`] | the closing summary of `--backend all`: the fastest backend per size |
//! | [`overlap`] | `collbench overlap`: OSU's overlap of every non-blocking collective with computation, progress engine off and on |
//! | [`p2p`] | `collbench p2p`: OSU-style latency and bandwidth between ranks 0 and 1 on every backend |
//! | [`doctor`] | `collbench doctor`: MPI library, CUDA-awareness and how it was decided, NCCL, GPUs per rank, backends that work, the network, the launcher |
//! | [`network`] | the doctor's network section (interfaces per node, what NCCL and Open MPI would take, the settings that pin them) and its launcher check |
//! | [`record`] | the one schema of results (CSV and JSON), and the machine they ran on |
//! | [`report`] | the collectives' output: nccl-tests' table, OSU's tables, CSV and JSON records |
//! | [`osu`] | OSU's flags (`--osu`) and table formats |
//! | [`plot`] | SVG plots of bandwidth and latency against size (`collbench plot`) |
//! | [`progress`] | the progress bar on a terminal |
//! | [`app`] | the program: MPI start-up, errors printed once, exit codes |
#![deny(missing_docs)]

pub mod allgatherv;
pub mod app;
pub mod backend;
pub mod cli;
pub mod coll;
pub mod comms;
pub mod doctor;
pub mod dtype;
pub mod engine;
pub mod expected;
pub mod fastest;
pub mod halo;
pub mod network;
pub mod osu;
pub mod overlap;
pub mod p2p;
pub mod pack;
pub mod persistent;
pub mod plot;
pub mod progress;
pub mod raw;
pub mod record;
pub mod report;
pub mod sizes;
pub mod timing;
pub mod variant;
