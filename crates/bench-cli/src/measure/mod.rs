//! The measuring machinery every subcommand shares.
//!
//! | module | what it holds |
//! |---|---|
//! | [`sizes`] | `8`, `1K`, `64M`, `1G`, the size flags every subcommand flattens (`-b -e -f -i`) and the sequence of sizes |
//! | [`dtype`] | `-d` names and the dispatch to the Rust element type |
//! | [`backend`] | `--backend`: which backends exist and which can run here |
//! | [`comms`] | the communicators of a run on each backend, and what each runs on |
//! | [`expected`] | inputs and expected results of the `#wrong` check |
//! | [`hooks`] | what a collective contributes to the engine (sizing, fill, the call, the answer) and what a backend does (buffers, timer) |
//! | [`engine`] | the benchmark engine: warm-up, timed loop, `#wrong`, statistics, one row per size; the backends' buffers and timers |
//! | [`timing`] | per-call time (wall clock, CUDA events), its spread over ranks, algbw and busbw |
//! | [`variant`] | the variants of a timed call (library, raw, checked, persistent, registered) |
//! | [`persistent`] | the `persistent` variant: every collective through the library's persistent plans |
//! | [`raw`] | the raw baselines: `MPI_Allreduce`, `ncclAllReduce`, `MPI_Allreduce` on device pointers |

pub mod backend;
pub mod comms;
pub mod dtype;
pub mod engine;
pub mod expected;
pub mod hooks;
pub mod persistent;
pub mod raw;
pub mod sizes;
pub mod timing;
pub mod variant;
