//! `collbench`: collective benchmarks over the collectives library, run under `mpirun`, with nccl-tests'
//! flags and columns.
//!
//! Three folders by role. [`cmd`] uses the other two; [`measure`] hands its rows to [`output`], whose
//! writers read the measurement's variant names and time spreads; no file imports one that imports it
//! back.
//!
//! | folder | role | modules |
//! |---|---|---|
//! | [`cmd`] | the subcommands: each sizes, fills, runs and checks its buffers over the machinery and hands its results to the output layer | [`cmd::coll`] (every collective's hooks over the engine), [`cmd::p2p`], [`cmd::halo`], [`cmd::overlap`], [`cmd::pack`], [`cmd::allgatherv`], [`cmd::doctor`] with [`cmd::network`] |
//! | [`measure`] | the measuring machinery: sizes, element types, backends and their communicators, the engine (warm-up, timed loop, `#wrong`, statistics), its hooks, the timers, the variants of a timed call | [`measure::sizes`], [`measure::dtype`], [`measure::backend`], [`measure::comms`], [`measure::expected`], [`measure::hooks`], [`measure::engine`], [`measure::timing`], [`measure::variant`], [`measure::persistent`], [`measure::raw`] |
//! | [`output`] | the output layer: the one result model ([`output::record`]) and what writes it: nccl-tests' table, OSU's tables, the other subcommands' tables and records ([`output::sink`]), CSV, JSON, SVG plots, closing summaries, the progress bar | [`output::record`], [`output::report`], [`output::sink`], [`output::osu`], [`output::summary`], [`output::plot`], [`output::progress`] |
//!
//! [`cli`] is the command line (clap) and its check into a [`cli::Plan`]; [`app`] is the program:
//! MPI start-up, the dispatch to a subcommand, errors printed once, exit codes.
#![deny(missing_docs)]

pub mod app;
pub mod cli;
pub mod cmd;
pub mod measure;
pub mod output;
