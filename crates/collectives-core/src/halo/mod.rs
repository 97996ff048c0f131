//! Halo exchange of a 3-D block per rank on device memory (feature `nccl`): one fused pack
//! launch, grouped point-to-point transfers, one fused unpack launch into the ghost cells.
//!
//! | item | what it is |
//! |---|---|
//! | [`HaloSpec`] | cells per rank `[nx, ny, nz]`, radius, quantities (f64), [`Neighbours::Faces`] or [`Neighbours::All`], optional process grid |
//! | [`ProcessGrid`], [`dims_create`] | the periodic 3-D grid of ranks (like `MPI_Dims_create`) and each rank's neighbours |
//! | [`HaloPlan`] | the regions a rank packs and unpacks (subarrays lowered to `datatype_pack` plans) and its [`Message`]s |
//! | [`HaloExchange`] | the exchange on an [`NcclComm`](crate::NcclComm): [`exchange`](HaloExchange::exchange), or its three steps, and [`HaloTimes`] |
//! | [`initial_field`], [`expected_field`], [`exchange_on_cpu`] | the reference: every ghost cell computed from the global field, and the whole exchange on the CPU |
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
//! 1. **Pack**: the interior slabs every neighbour needs (6 faces, or 26 faces, edges and
//!    corners) are packed from the field into one send buffer by one kernel launch
//!    (`datatype_pack::gpu::FusedPacker`).
//! 2. **Transfer**: one message per neighbour *rank*, inside one NCCL group: a rank that is the
//!    neighbour in several directions (a grid of 1 or 2 ranks along an axis, periodic) gets one
//!    message holding all of those regions, and a rank that is its own neighbour sends to itself
//!    (NCCL allows a send and a receive to the same rank inside a group). Messages carry exactly
//!    the packed bytes: no padding.
//! 3. **Unpack**: one launch scatters the receive buffer into the ghost cells.
//!
//! Everything is enqueued on the communicator's stream; [`HaloExchange::exchange`] returns
//! without waiting (like every NCCL operation of this crate), and the field is ready when the
//! stream gets there ([`NcclComm::synchronize`](crate::NcclComm::synchronize)).
//! [`HaloExchange::exchange_timed`] also waits and returns the time of each step, measured
//! with CUDA events.
//!
//! ```no_run
//! use collectives_core::halo::{HaloExchange, HaloSpec, Neighbours};
//! use collectives_core::{device, MpiComm, NcclComm};
//!
//! let universe = mpi::initialize().expect("MPI initializes once");
//! let world = MpiComm::world(&universe)?;
//! let comm = NcclComm::from_mpi(&world, None)?;
//! let spec = HaloSpec::cube(64, 3, 8, Neighbours::All);
//! let mut halo = HaloExchange::new(&comm, spec)?;
//! let mut field = device::alloc_zeros::<f64>(comm.stream(), halo.field_len())?;
//! halo.exchange(&mut field)?;
//! comm.synchronize()?;
//! # Ok::<(), collectives_core::Error>(())
//! ```

mod exchange;
mod geometry;

pub use exchange::{HaloExchange, HaloTimes};
pub use geometry::{
    box_plan, dims_create, directions, exchange_on_cpu, expected_field, ghost_box, global_cell,
    global_cells, initial_field, reference_value, send_box, CellBox, Direction, HaloPlan, HaloSpec,
    Message, Neighbours, ProcessGrid, GHOST_FILL, MESSAGE_ALIGN,
};
