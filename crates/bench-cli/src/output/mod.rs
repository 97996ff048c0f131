//! The output layer: one result model and every format it is written in.
//!
//! | module | what it holds |
//! |---|---|
//! | [`record`] | the one result model: a measured size ([`record::Row`]) and the [`record::Record`] every subcommand writes, CSV and JSON from one serde schema, `--format` and where rank 0 writes |
//! | [`sink`] | the output of the subcommands with tables of their own (`p2p`, `halo`, `overlap`, `pack`, `allgatherv`): their table lines, and their records as CSV and JSON, written on rank 0 |
//! | [`report`] | the engine collectives' writer: nccl-tests' table, OSU's tables, CSV and JSON records |
//! | [`osu`] | OSU's flags (`--osu`) and table formats |
//! | [`summary`] | the closing summaries: the fastest backend per size (`--backend all`) and the variants compared |
//! | [`plot`] | SVG plots of bandwidth and latency against size (`collbench plot`) |
//! | [`progress`] | the progress bar on a terminal |

pub mod osu;
pub mod plot;
pub mod progress;
pub mod record;
pub mod report;
pub mod sink;
pub mod summary;
