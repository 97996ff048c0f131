//! Halo exchange of a 3-D block per rank on device memory, over any device communicator of
//! `collectives-core` (NCCL, CUDA-aware MPI, staged MPI) and the GPU packers of `datatype-pack`:
//! fused pack launches, then for each neighbour rank either the communicator's grouped exchange
//! (`DeviceCommunicator::exchange_bytes`) and a fused unpack, or, for a neighbour on the same
//! node whose GPU this one reaches, one launch that reads the neighbour's packed bytes over CUDA
//! IPC straight into the ghost cells; pipelined in chunks, with direct copies where a rank is its
//! own neighbour. On NCCL the whole exchange is stream-ordered; on the MPI backends the host
//! waits for each chunk's transfer (MPI knows no streams).
//!
//! | module | what it holds |
//! |---|---|
//! | [`spec`] | [`HaloSpec`]: cells per rank `[nx, ny, nz]`, radius, quantities (f64), [`Neighbours::Faces`] or [`Neighbours::All`] and their [`Direction`]s, optional process grid, pipeline chunks |
//! | [`grid`] | [`ProcessGrid`], [`dims_create`]: the periodic 3-D grid of ranks (like `MPI_Dims_create`) and each rank's neighbours |
//! | [`boxes`] | [`CellBox`]es of a rank's padded block: what it sends ([`send_box`]) and receives ([`ghost_box`]), wrap sources ([`wrap_box`]), as `datatype_pack` plans ([`box_plan`]) |
//! | [`plan`] | [`HaloPlan`]: the regions a rank packs and unpacks, its [`Message`]s per chunk, its [`LocalCopy`]s and wrap copies |
//! | [`reference`](mod@reference) | the CPU reference: [`initial_field`], [`expected_field`] (every ghost cell computed from the global field) and [`exchange_on_cpu`] (the whole exchange on the CPU) |
//! | [`exchange`](mod@exchange) | [`HaloExchange`]: the exchange on a device communicator ([`NcclComm`](collectives_core::NcclComm) by default): [`exchange`](HaloExchange::exchange), [`exchange_timed`](HaloExchange::exchange_timed) and its [`HaloTimes`] |
//! | [`peer`] | [`HaloTransport`]: how neighbour ranks are reached: CUDA IPC on the same node where possible, else the communicator ([`Auto`](HaloTransport::Auto)), or the communicator only ([`Comm`](HaloTransport::Comm)) |
//!
//! Every item is also re-exported at the crate root. Errors are `collectives-core`'s
//! [`Error`](collectives_core::Error); the facade crate `collectives` re-exports this crate as
//! `collectives::halo`.
//!
//! # Layout
//!
//! A rank's field is `quantities x (nz + 2r) x (ny + 2r) x (nx + 2r)` f64 values, `[q][z][y][x]`
//! (x fastest): `n` interior cells per axis surrounded by `r` ghost cells on both sides. The
//! ranks form a periodic grid `[px, py, pz]`; rank `x + px (y + py z)` holds the block at
//! `[x, y, z]`. Interior cell `i` of a rank at coordinate `c` (one axis) is global cell
//! `c n + i`.
//!
//! # One exchange
//!
//! 1. **Local copies**: where a rank is its own neighbour (a periodic grid of one rank along
//!    every axis a direction moves on), one launch copies the interior cells straight into its own ghost cells
//!    (`datatype_pack::gpu::FusedCopier`): no buffer, no message.
//! 2. **Pack**: the interior slabs the other ranks need (6 faces, or 26 faces, edges and
//!    corners) are packed into the send buffer, one fused launch per chunk
//!    (`datatype_pack::gpu::FusedPacker`).
//! 3. **Transfer**: per chunk, one grouped exchange (one NCCL group, or MPI's non-blocking sends and
//!    receives completed together) of one send and one receive per neighbour rank: a
//!    rank that is the neighbour in several directions gets one message holding all of those
//!    regions. Messages carry exactly the packed bytes: no padding.
//! 4. **Unpack**: per chunk, one launch scatters the received bytes into the ghost cells.
//! 5. **Pull** (instead of 3 and 4, for neighbours on the same node): with
//!    [`HaloTransport::Auto`] (the default), two ranks of one node whose GPUs can reach each
//!    other's memory (the same GPU, or peer access) agree when the exchange is made to skip
//!    NCCL: each maps the other's send buffer (CUDA IPC) and, per chunk, once the sender's
//!    *ready* flag for this exchange arrives, one launch reads the sender's packed bytes and
//!    writes them into its own ghost cells: transfer and unpack in one pass, no receive buffer.
//!    A *consumed* flag back to the sender keeps the next exchange's pack from overwriting the
//!    send buffer while it is read. The flags are 64-bit counters written into the other
//!    rank's memory with `cuStreamWriteValue64` and waited for with `cuStreamWaitValue64`: the
//!    streams order themselves, the host never waits. Pairs that cannot (another node, no peer
//!    access, a rank that chose [`HaloTransport::Comm`]) use the communicator; both kinds mix freely.
//! 6. **Wrap copies** (26 neighbours, on a grid with a single rank along some axis and several
//!    along another): an edge or corner whose direction moves along such an axis holds the
//!    same values as ghost cells one period further in, which the face (or edge) across the
//!    other axes brings; so it gets no message of its own, and one launch copies it from
//!    there once everything is in ([`wrap_box`], [`HaloPlan::wraps`]). On a grid two ranks
//!    wide, the 26-neighbour exchange sends the two x faces only, like the 6-face one.
//!
//! When both x neighbours are the same rank (a periodic grid two ranks wide), the two x faces
//! travel interleaved row by row, so that the receiver writes whole runs of `2 radius` ghost
//! cells rather than two columns of `radius`-cell pieces (see [`HaloPlan`]).
//!
//! The packs, and with one chunk the pulls, run on the communicator's stream. The chunks
//! ([`HaloSpec::chunks`], default [`DEFAULT_CHUNKS`]) make a pipeline on streams of the
//! exchange's own: chunk `k + 1` is packed while chunk `k` is on the wire (or being pulled)
//! and chunk `k - 1` is being unpacked; the transfers' and the pulls' streams have the
//! device's highest priority, so their kernels get multiprocessors ahead of the copy kernels.
//! The local copies run on a side stream once everything is packed, beside the transfers and
//! pulls; beside pulls, with at most [`LOCAL_BLOCKS_PER_SM`] thread blocks per multiprocessor
//! so as to leave the pulls the device. A stream is forked only when it has work, and every
//! forked stream waits for the communicator's stream first, which waits for it last, so
//! to the caller the exchange is one stream-ordered operation like every NCCL operation of
//! this crate: [`HaloExchange::exchange`] returns without waiting and the field is ready when
//! the communicator's stream gets there ([`NcclComm::synchronize`](collectives_core::DeviceCommunicator::synchronize)).
//! [`HaloExchange::exchange_timed`] runs the same steps one after the other on the
//! communicator's stream, waits, and returns the time of each step (CUDA events): where the
//! time goes, not what the pipeline costs.
//!
//! ```no_run
//! use collectives_core::{device, DeviceCommunicator, MpiComm, NcclComm};
//! use collectives_halo::{HaloExchange, HaloSpec, Neighbours};
//!
//! let universe = collectives_core::mpi::initialize().expect("MPI initializes once");
//! let world = MpiComm::world(&universe)?;
//! let comm = NcclComm::from_mpi(&world, None)?;
//! let spec = HaloSpec::cube(64, 3, 8, Neighbours::All);
//! let mut halo = HaloExchange::new(&comm, spec)?;
//! let mut field = device::alloc_zeros::<f64>(comm.stream(), halo.field_len())?;
//! halo.exchange(&mut field)?;
//! comm.synchronize()?;
//! # Ok::<(), collectives_core::Error>(())
//! ```
#![deny(missing_docs)]

pub mod boxes;
mod error;
pub mod exchange;
pub mod grid;
pub mod peer;
pub mod plan;
pub mod reference;
pub mod spec;

pub use boxes::{box_plan, box_plan_of, ghost_box, send_box, wrap_box, CellBox};
pub use exchange::{HaloExchange, HaloTimes, LOCAL_BLOCKS_PER_SM};
pub use grid::{dims_create, ProcessGrid};
pub use peer::HaloTransport;
pub use plan::{HaloPlan, LocalCopy, Message, MESSAGE_ALIGN};
pub use reference::{
    exchange_on_cpu, expected_field, global_cell, global_cells, initial_field, reference_value,
    GHOST_FILL,
};
pub use spec::{directions, Direction, HaloSpec, Neighbours, DEFAULT_CHUNKS, MAX_CHUNKS};
