//! The subcommands of `collbench`: what each measures, over [`crate::measure`], written by
//! [`crate::output`].
//!
//! | module | subcommand |
//! |---|---|
//! | [`coll`] | `collbench allreduce`, `allgather`, ... and `coll NAME`: every collective's hooks over the engine (one file each) and the bus-bandwidth table |
//! | [`p2p`] | `collbench p2p`: OSU-style latency and bandwidth between ranks 0 and 1 on every backend |
//! | [`halo`] | `collbench halo`: the 3-D halo exchange per step, against the same bytes sent contiguously |
//! | [`overlap`] | `collbench overlap`: OSU's overlap of every non-blocking collective with computation, progress engine off and on |
//! | [`pack`] | `collbench pack`: GPU pack throughput against copy baselines (one GPU, no MPI) |
//! | [`allgatherv`] | `collbench allgatherv`: NCCL's uneven all-gather algorithms against padding |
//! | [`doctor`] | `collbench doctor`: MPI library, CUDA-awareness and how it was decided, NCCL, GPUs per rank, backends that work, the network, the launcher |
//! | [`network`] | the doctor's network section (interfaces per node, what NCCL and Open MPI would take, the settings that pin them) and its launcher check |

pub mod allgatherv;
pub mod coll;
pub mod doctor;
pub mod halo;
pub mod network;
pub mod overlap;
pub mod p2p;
pub mod pack;
