//! `collbench halo`: the 3-D halo exchange of `collectives_halo` (fused pack, grouped
//! send/receive, fused unpack) timed per step, against the same bytes sent contiguously through the
//! same backend.
//!
//! Per rank: `n^3` interior cells (`--nx --ny --nz` for other shapes), radius `-r`, `-q` f64
//! quantities, 6 face or 26 neighbours, on a periodic process grid (`--dims`, default like
//! `MPI_Dims_create`), one row per pipeline depth of `--chunks` (a list). Columns, each the
//! maximum over ranks of the average over `-n` timed exchanges after `-w` warm-up ones:
//!
//! - `pack`, `local`, `transfer`, `unpack`, `pull`: CUDA events around each step of one
//!   exchange run step by step, the stream drained after each exchange
//!   (`HaloExchange::exchange_timed`): where the time goes, without overlap (`local`: the
//!   direct copies where a rank is its own neighbour; `transfer` and `unpack`: the neighbours
//!   reached through the backend; `pull`: those reached through CUDA IPC, read straight from their
//!   send buffers into the ghost cells);
//! - `transport`: `--transport` of the row (a list): `auto` reaches neighbours on the same
//!   node through CUDA IPC where both GPUs can, `comm` (or `nccl`, its older name) reaches every
//!   neighbour through the backend's grouped sends and receives;
//! - `total`: `-n` pipelined exchanges (`HaloExchange::exchange`) back to back between two
//!   events, divided by `-n` (what a solver's time step sees);
//! - `contig`: the baseline, the same bytes sent contiguously through the same backend: one
//!   contiguous device buffer per neighbour rank (this rank included when it is its own
//!   neighbour), of the bytes the exchange hands to that rank, in one group of `send`/`recv`
//!   calls (no pack, no unpack); `ratio` = total / contig;
//! - `contig/dir`: one contiguous buffer per direction (6 or 26 messages, several to the same
//!   rank when the grid is small), the way a code without a packer sends its faces;
//! - `#wrong`: after timing, one exchange of a field holding the global reference, every cell
//!   compared with `halo::expected_field` (with `-c 1`), summed over ranks.
//!
//! Backends: the device backends, `nccl` (stream-ordered; the default), `cuda-mpi` and
//! `mpi-staged` (the MPI's sends and receives, on device addresses or through pinned host
//! memory; the host waits for each transfer), one table each; `mpi` (host memory) is refused
//! with a note, and `all` runs those that can.
//!
//! `--format csv|json` writes the rows as the records of every collbench run (`record.rs`): per row
//! one record per column, the column in `variant` (`library` for `total`; `pack`, `local`,
//! `transfer`, `unpack`, `pull`, `contig`, `contig-dir`), the bytes per rank in `size_bytes`, the
//! shape, neighbours, depth, grid policy, transport and messages in `config`.
//!
//! `--mpi-datatypes` adds the baseline of the issue: a **CUDA-aware MPI** sending the two x faces
//! (blocks of `radius x 8` bytes) as `MPI_Type_create_subarray` datatypes straight from device
//! memory, one `MPI_Sendrecv` per face, timed with the wall clock. It must run under a
//! CUDA-aware MPI (`cuda_mpirun` on the GPU box); when the library does not say it is
//! CUDA-aware (`collectives_core::cuda_aware::detect`), it is skipped with a note rather than
//! handing device pointers to an MPI that would read them as host memory.

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use collectives_core::cudarc::driver::CudaSlice;
use collectives_core::ipc::DeviceAlloc;
use collectives_core::{
    device, Communicator, DeviceCommunicator, ExchangePart, MpiComm, MpiCudaComm, MpiStagedComm,
    NcclComm, ReduceOp,
};
use collectives_halo::{
    self as halo, directions, ghost_box, send_box, HaloExchange, HaloSpec, HaloTransport,
    Neighbours, ProcessGrid,
};
use datatype_pack::gpu::{GpuOptions, GridCap};

use crate::measure::backend::{self, Backend, BackendChoice};
use crate::measure::sizes::LoopArgs;
use crate::measure::timing;
use crate::output::record::Format;
use crate::output::record::{Document, Machine, Record};
use crate::output::sink::Sink;

/// Which neighbour sets to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// The 6 face neighbours.
    Faces,
    /// All 26 neighbours.
    All,
    /// Both, one row each.
    Both,
}

impl Mode {
    fn neighbours(self) -> Vec<Neighbours> {
        match self {
            Mode::Faces => vec![Neighbours::Faces],
            Mode::All => vec![Neighbours::All],
            Mode::Both => vec![Neighbours::Faces, Neighbours::All],
        }
    }
}

/// Flags of `collbench halo`.
#[derive(Debug, Args)]
pub struct HaloArgs {
    /// Interior cells per side per rank (n^3 per rank).
    #[arg(short = 'N', long = "cells", default_value_t = 256)]
    pub n: usize,
    /// Interior cells along x per rank (overrides --cells).
    #[arg(long)]
    pub nx: Option<usize>,
    /// Interior cells along y per rank (overrides --cells).
    #[arg(long)]
    pub ny: Option<usize>,
    /// Interior cells along z per rank (overrides --cells).
    #[arg(long)]
    pub nz: Option<usize>,
    /// Halo radius (ghost cells on each side).
    #[arg(short = 'r', long, default_value_t = 3)]
    pub radius: usize,
    /// f64 quantities per cell.
    #[arg(short = 'q', long, default_value_t = 8)]
    pub quantities: usize,
    /// Neighbours: faces (6), all (26) or both.
    #[arg(long, value_enum, default_value_t = Mode::Both)]
    pub neighbours: Mode,
    /// Process grid as PXxPYxPZ (e.g. 2x1x1); default: like MPI_Dims_create.
    #[arg(long, value_parser = parse_dims)]
    pub dims: Option<[usize; 3]>,
    /// Pipeline depths to measure, one row each (comma-separated, each 1 to 64).
    #[arg(long, value_delimiter = ',', default_values_t = [halo::DEFAULT_CHUNKS])]
    pub chunks: Vec<usize>,
    /// Grid policies of the pack, copy and unpack kernels to measure, one row each
    /// (comma-separated: auto, full, a number of waves, or sN for N thread blocks per
    /// multiprocessor; default: full, the library's default for halo exchanges, under which
    /// the local copies take LOCAL_BLOCKS_PER_SM blocks per multiprocessor).
    #[arg(long, value_delimiter = ',', default_values = ["full"], value_parser = parse_grid)]
    pub grid: Vec<GridCap>,
    /// How neighbour ranks are reached, one row each (comma-separated: auto = CUDA IPC on the
    /// same node where the GPUs can, the backend otherwise; comm (or nccl) = the backend's
    /// sends and receives for every neighbour).
    #[arg(long, value_delimiter = ',', default_values = ["auto"], value_parser = parse_transport)]
    pub transport: Vec<HaloTransport>,
    /// Backend: nccl, cuda-mpi, mpi-staged (or all).
    #[arg(long, default_value = "nccl")]
    pub backend: BackendChoice,
    /// Timed calls and warm-up calls per size: -n, -w.
    #[command(flatten)]
    pub loops: LoopArgs,
    /// Check the ghost cells against the global reference (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
    /// Also time a CUDA-aware MPI sending the x faces as MPI_Type_create_subarray datatypes from
    /// device memory (run under cuda_mpirun; skipped with a note when the MPI is not CUDA-aware).
    #[arg(long = "mpi-datatypes")]
    pub mpi_datatypes: bool,
    /// Timed rounds of the MPI datatype baseline (each sends both x faces; it is slow).
    #[arg(long = "mpi-iters", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub mpi_iters: u32,
    /// Output format: the table, or the records of every collbench run as CSV or JSON.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `auto`, `full`, a number of waves or `sN` (N thread blocks per multiprocessor) -> the grid
/// policy.
///
/// # Errors
/// A message naming the bad value.
pub fn parse_grid(s: &str) -> Result<GridCap, String> {
    match s.trim() {
        "auto" => Ok(GridCap::Auto),
        "full" => Ok(GridCap::Full),
        n => {
            let count = |c: &str| c.parse::<u32>().ok().filter(|&c| c > 0);
            match n.strip_prefix('s') {
                Some(c) => count(c).map(GridCap::PerSm),
                None => count(n).map(GridCap::Waves),
            }
            .ok_or_else(|| {
                format!(
                    "bad grid policy `{s}` (expected auto, full, a number of waves or sN, N \
                     blocks per multiprocessor)"
                )
            })
        }
    }
}

/// `auto` or `comm` (also `nccl`, its name while NCCL was the only backend) -> the transport.
///
/// # Errors
/// A message naming the bad value.
pub fn parse_transport(s: &str) -> Result<HaloTransport, String> {
    match s.trim() {
        "auto" => Ok(HaloTransport::Auto),
        "comm" | "nccl" => Ok(HaloTransport::Comm),
        _ => Err(format!("bad transport `{s}` (expected auto or comm)")),
    }
}

/// The name of a grid policy, as `--grid` takes it.
pub fn grid_name(g: GridCap) -> String {
    match g {
        GridCap::Full => "full".into(),
        GridCap::Waves(w) => w.to_string(),
        GridCap::PerSm(n) => format!("s{n}"),
        _ => "auto".into(),
    }
}

/// `2x1x1` -> `[2, 1, 1]`.
///
/// # Errors
/// A message naming the bad value.
pub fn parse_dims(s: &str) -> Result<[usize; 3], String> {
    let parts: Vec<&str> = s.split(['x', 'X', ',']).collect();
    let bad = || format!("bad process grid `{s}` (expected PXxPYxPZ such as 2x1x1)");
    if parts.len() != 3 {
        return Err(bad());
    }
    let mut d = [0usize; 3];
    for (slot, p) in d.iter_mut().zip(&parts) {
        *slot = p.trim().parse().map_err(|_| bad())?;
        if *slot == 0 {
            return Err(bad());
        }
    }
    Ok(d)
}

impl HaloArgs {
    /// The spec of one row (the first of `--chunks`).
    pub fn spec(&self, neighbours: Neighbours) -> HaloSpec {
        let n = [
            self.nx.unwrap_or(self.n),
            self.ny.unwrap_or(self.n),
            self.nz.unwrap_or(self.n),
        ];
        let spec = HaloSpec::new(n, self.radius, self.quantities, neighbours)
            .with_chunks(self.chunks.first().copied().unwrap_or(halo::DEFAULT_CHUNKS));
        match self.dims {
            Some(d) => spec.with_dims(d),
            None => spec,
        }
    }
}

/// Whether a backend can run the halo exchange: `None` when it can.
pub fn halo_unavailable(b: Backend) -> Option<String> {
    match b {
        Backend::Mpi => Some("the halo exchange works on device memory".into()),
        device => device.unavailable(),
    }
}

/// One row of the table (times in microseconds, maxima over ranks).
#[derive(Debug, Clone, PartialEq)]
pub struct HaloRow {
    /// The backend's `--backend` name.
    pub backend: &'static str,
    /// 6 or 26 neighbours.
    pub neighbours: Neighbours,
    /// Pipeline depth.
    pub chunks: usize,
    /// Grid policy of the kernels.
    pub grid: GridCap,
    /// The transport asked for.
    pub transport: HaloTransport,
    /// Neighbour ranks reached through CUDA IPC (the most over ranks).
    pub ipc_peers: usize,
    /// Bytes one rank hands to its neighbours per exchange, itself included (the largest over
    /// ranks).
    pub bytes: u64,
    /// Messages one rank sends per exchange (the largest over ranks).
    pub messages: usize,
    /// Pack step.
    pub pack_us: f64,
    /// Local copies.
    pub local_us: f64,
    /// Transfer step.
    pub transfer_us: f64,
    /// Unpack step.
    pub unpack_us: f64,
    /// Pulls from IPC neighbours.
    pub pull_us: f64,
    /// Back-to-back exchanges.
    pub total_us: f64,
    /// Contiguous baseline, one buffer per neighbour rank.
    pub contig_us: f64,
    /// Contiguous baseline, one buffer per direction.
    pub contig_dir_us: Option<f64>,
    /// Wrong cells over all ranks (`None` without a check).
    pub wrong: Option<u64>,
}

impl HaloRow {
    /// The row's records, one per column (see the module docs), on `nranks` ranks, for a grid of
    /// `spec`'s shape; times are the slowest rank's.
    pub fn records(&self, machine: &Machine, nranks: usize, spec: &HaloSpec) -> Vec<Record> {
        let [x, y, z] = spec.n;
        let config = format!(
            "cells={x}x{y}x{z};radius={};quantities={};neighbours={};chunks={};grid={};transport={};ipc_peers={};messages={}",
            spec.radius,
            spec.quantities,
            self.neighbours.name(),
            self.chunks,
            grid_name(self.grid),
            self.transport.name(),
            self.ipc_peers,
            self.messages
        );
        let steps = [
            ("library", Some(self.total_us)),
            ("pack", Some(self.pack_us)),
            ("local", Some(self.local_us)),
            ("transfer", Some(self.transfer_us)),
            ("unpack", Some(self.unpack_us)),
            ("pull", Some(self.pull_us)),
            ("contig", Some(self.contig_us)),
            ("contig-dir", self.contig_dir_us),
        ];
        steps
            .into_iter()
            .filter_map(|(variant, us)| {
                let mut r = Record::new(machine, "halo", "halo", self.backend);
                r.variant = variant.into();
                r.dtype = "double".into();
                r.ranks = nranks;
                r.size_bytes = self.bytes;
                r.count = self.bytes / 8;
                r.wrong = self.wrong;
                r.config = Some(config.clone());
                Some(r.timed(us?, 1.0))
            })
            .collect()
    }

    /// The header lines.
    pub fn header() -> [String; 1] {
        [format!(
            "#{:>9} {:>6} {:>5} {:>9} {:>4} {:>12} {:>5} {:>10} {:>10} {:>11} {:>10} {:>10} {:>10} {:>9} {:>10} {:>7} {:>11} {:>7} {:>8}",
            "neighbrs",
            "chunks",
            "grid",
            "transport",
            "ipc",
            "bytes/rank",
            "msgs",
            "pack(us)",
            "local(us)",
            "transfer(us)",
            "unpack(us)",
            "pull(us)",
            "total(us)",
            "GB/s",
            "contig(us)",
            "ratio",
            "c/dir(us)",
            "ratio",
            "#wrong"
        )]
    }

    /// The row's line.
    pub fn line(&self) -> String {
        let dir = self
            .contig_dir_us
            .map_or(("n/a".to_string(), "n/a".to_string()), |us| {
                (format!("{us:.2}"), format!("{:.2}", self.total_us / us))
            });
        format!(
            " {:>9} {:>6} {:>5} {:>9} {:>4} {:>12} {:>5} {:>10.2} {:>10.2} {:>11.2} {:>10.2} {:>10.2} {:>10.2} {:>9.2} {:>10.2} {:>7.2} {:>11} {:>7} {:>8}",
            self.neighbours.name(),
            self.chunks,
            grid_name(self.grid),
            self.transport.name(),
            self.ipc_peers,
            self.bytes,
            self.messages,
            self.pack_us,
            self.local_us,
            self.transfer_us,
            self.unpack_us,
            self.pull_us,
            self.total_us,
            self.bytes as f64 / self.total_us / 1e3,
            self.contig_us,
            self.total_us / self.contig_us,
            dir.0,
            dir.1,
            self.wrong.map_or("N/A".to_string(), |w| w.to_string())
        )
    }
}

/// The baseline's op name.
const CONTIG: &str = "halo_contiguous";

/// One contiguous device buffer per `(peer, bytes)` message, laid end to end in one allocation
/// (`cuMemAlloc`, whose address a CUDA-aware MPI can take): the allocation and each message's
/// part of it.
fn contiguous(
    comm: &impl DeviceCommunicator,
    sizes: &[(usize, u64)],
) -> anyhow::Result<(DeviceAlloc, Vec<ExchangePart>)> {
    let parts = ExchangePart::end_to_end(sizes.iter().map(|&(peer, bytes)| (peer, bytes as usize)));
    let bytes = parts.iter().map(|p| p.len).sum();
    Ok((DeviceAlloc::zeroed(CONTIG, comm.context(), bytes)?, parts))
}

/// One grouped exchange of the contiguous messages through the backend.
fn contiguous_exchange(
    comm: &impl DeviceCommunicator,
    (send, sends): &(DeviceAlloc, Vec<ExchangePart>),
    (recv, recvs): &(DeviceAlloc, Vec<ExchangePart>),
) -> anyhow::Result<()> {
    // SAFETY: every part lies inside its allocation (laid out by `contiguous`), and the peers
    // are ranks of the communicator (the process grid holds exactly its ranks); both
    // allocations are on the communicator's device and outlive the timing loop, which drains
    // the stream; each rank's sends to a peer mirror that peer's receives from it, in the
    // same order of directions with the same sizes.
    unsafe { comm.exchange_bytes(CONTIG, comm.stream(), send.ptr(), sends, recv.ptr(), recvs) }?;
    Ok(())
}

/// The contiguous baselines of one neighbour set (microseconds, maxima over ranks): one buffer
/// per neighbour rank, and one per direction.
fn contiguous_baselines<C: DeviceCommunicator>(
    comm: &C,
    ctl: &MpiComm,
    args: &HaloArgs,
    spec: &HaloSpec,
) -> anyhow::Result<(f64, f64)> {
    let rank = comm.rank();
    let grid = ProcessGrid::new(comm.size(), spec.dims)?;
    let plan = halo::HaloPlan::new(spec, &grid, rank)?;
    // One group of contiguous messages of these sizes, timed; its buffers freed before the next.
    let time = |send_sizes: &[(usize, u64)], recv_sizes: &[(usize, u64)]| -> anyhow::Result<f64> {
        let sends = contiguous(comm, send_sizes)?;
        let recvs = contiguous(comm, recv_sizes)?;
        timing::events_us(
            comm,
            ctl,
            args.loops.iters as usize,
            args.loops.warmup_iters as usize,
            || contiguous_exchange(comm, &sends, &recvs),
        )
    };
    let contig_us = time(&plan.send_bytes_by_peer(), &plan.recv_bytes_by_peer())?;

    let cells = |b: halo::CellBox| (b.cells() * spec.quantities * 8) as u64;
    let dirs = directions(spec.neighbours);
    let send_sizes: Vec<(usize, u64)> = dirs
        .iter()
        .map(|&d| (grid.neighbour(rank, d), cells(send_box(spec, d))))
        .collect();
    let recv_sizes: Vec<(usize, u64)> = dirs
        .iter()
        .map(|&d| {
            let back = d.map(|c| -c);
            (grid.neighbour(rank, back), cells(ghost_box(spec, back)))
        })
        .collect();
    let contig_dir_us = time(&send_sizes, &recv_sizes)?;
    Ok((contig_us, contig_dir_us))
}

/// One row on a device backend: the exchange of `spec` against the given baselines.
fn halo_row<C: DeviceCommunicator>(
    (comm, backend): (&C, &'static str),
    ctl: &MpiComm,
    args: &HaloArgs,
    spec: HaloSpec,
    (grid_cap, transport): (GridCap, HaloTransport),
    (contig_us, contig_dir_us): (f64, f64),
) -> anyhow::Result<HaloRow> {
    let opts = GpuOptions::default().with_grid(grid_cap);
    let mut ex = HaloExchange::with_transport(comm, spec, &opts, transport)
        .context("setting up the halo exchange")?;
    let grid = *ex.grid();
    let mut field = device::alloc_zeros::<f64>(comm.stream(), ex.field_len())?;

    // Per-step times: each exchange run step by step, timed with events and drained.
    for _ in 0..args.loops.warmup_iters {
        ex.exchange(&mut field)?;
    }
    comm.synchronize()?;
    ctl.barrier()?;
    let mut sum = halo::HaloTimes::default();
    for _ in 0..args.loops.iters {
        let t = ex.exchange_timed(&mut field)?;
        sum.pack_ms += t.pack_ms;
        sum.local_ms += t.local_ms;
        sum.transfer_ms += t.transfer_ms;
        sum.unpack_ms += t.unpack_ms;
        sum.pull_ms += t.pull_ms;
    }
    let per = 1000.0 / f64::from(args.loops.iters);
    let pack_us = timing::max_over_ranks(ctl, sum.pack_ms * per)?;
    let local_us = timing::max_over_ranks(ctl, sum.local_ms * per)?;
    let transfer_us = timing::max_over_ranks(ctl, sum.transfer_ms * per)?;
    let unpack_us = timing::max_over_ranks(ctl, sum.unpack_ms * per)?;
    let pull_us = timing::max_over_ranks(ctl, sum.pull_ms * per)?;

    // Pipelined, back to back.
    let total_us = timing::events_us(
        comm,
        ctl,
        args.loops.iters as usize,
        args.loops.warmup_iters as usize,
        || Ok(ex.exchange(&mut field)?),
    )?;

    let wrong = if args.check == 1 {
        Some(check(comm, ctl, &mut ex, &grid, &mut field)?)
    } else {
        None
    };
    let plan = ex.plan();
    let mut most = [0u64; 3];
    ctl.all_reduce(
        &[
            plan.payload_bytes(),
            plan.sends().len() as u64,
            ex.ipc_peers().len() as u64,
        ][..],
        &mut most[..],
        ReduceOp::Max,
    )?;
    Ok(HaloRow {
        backend,
        neighbours: spec.neighbours,
        chunks: spec.chunks,
        grid: grid_cap,
        transport,
        ipc_peers: most[2] as usize,
        bytes: most[0],
        messages: most[1] as usize,
        pack_us,
        local_us,
        transfer_us,
        unpack_us,
        pull_us,
        total_us,
        contig_us,
        contig_dir_us: Some(contig_dir_us),
        wrong,
    })
}

/// One exchange of the reference field; the cells that differ from the expected field, summed
/// over ranks.
fn check<C: DeviceCommunicator>(
    comm: &C,
    ctl: &MpiComm,
    ex: &mut HaloExchange<'_, C>,
    grid: &ProcessGrid,
    field: &mut CudaSlice<f64>,
) -> anyhow::Result<u64> {
    let spec = *ex.spec();
    let rank = comm.rank();
    let init = halo::initial_field(&spec, grid, rank)?;
    device::copy_to_device(comm.stream(), &init, field)?;
    drop(init);
    ex.exchange(field)?;
    comm.synchronize()?;
    let got = device::download(comm.stream(), field)?;
    let want = halo::expected_field(&spec, grid, rank)?;
    let mine = got.iter().zip(&want).filter(|(a, b)| a != b).count() as u64;
    let mut all = [0u64];
    ctl.all_reduce(&[mine][..], &mut all[..], ReduceOp::Sum)?;
    Ok(all[0])
}

/// A committed `MPI_Type_create_subarray` of the cells of `b`, every quantity, over a rank's
/// field of `spec` (f64, `[q][z][y][x]`); freed on drop.
struct MpiSubarray(mpi::ffi::MPI_Datatype);

impl MpiSubarray {
    fn new(spec: &HaloSpec, b: &halo::CellBox) -> anyhow::Result<Self> {
        use std::ffi::c_int;
        let p = spec.padded();
        let c = |v: usize| c_int::try_from(v).context("a subarray size beyond int");
        let sizes = [c(spec.quantities)?, c(p[2])?, c(p[1])?, c(p[0])?];
        let subs = [
            c(spec.quantities)?,
            c(b.size[2])?,
            c(b.size[1])?,
            c(b.size[0])?,
        ];
        let starts = [0, c(b.start[2])?, c(b.start[1])?, c(b.start[0])?];
        // SAFETY: an all-zero handle is a valid value for MPI to overwrite.
        let mut t: mpi::ffi::MPI_Datatype = unsafe { std::mem::zeroed() };
        // SAFETY: three arrays of 4 entries; the subarray lies inside the array (a box of the
        // padded block); RSMPI_DOUBLE is a predefined datatype; `t` is a valid out-pointer.
        let rc = unsafe {
            mpi::ffi::MPI_Type_create_subarray(
                4,
                sizes.as_ptr(),
                subs.as_ptr(),
                starts.as_ptr(),
                mpi::ffi::MPI_ORDER_C as c_int,
                mpi::ffi::RSMPI_DOUBLE,
                &mut t,
            )
        };
        if rc != 0 {
            bail!("MPI_Type_create_subarray failed with code {rc}");
        }
        // SAFETY: `t` was just created and is committed in place.
        let rc = unsafe { mpi::ffi::MPI_Type_commit(&mut t) };
        let made = Self(t);
        if rc != 0 {
            bail!("MPI_Type_commit failed with code {rc}");
        }
        Ok(made)
    }
}

impl Drop for MpiSubarray {
    fn drop(&mut self) {
        // SAFETY: a datatype this value created and nobody else frees.
        unsafe { mpi::ffi::MPI_Type_free(&mut self.0) };
    }
}

/// The baseline of a CUDA-aware MPI: both x faces of `spec`'s field sent as subarray datatypes
/// from device memory (one `MPI_Sendrecv` per face), `iters` rounds after one warm-up round;
/// milliseconds per round, the maximum over ranks. `Err(reason)` (on every rank) when the MPI
/// library is not known to be CUDA-aware on every rank.
fn mpi_datatype_x_faces<C: DeviceCommunicator>(
    comm: &C,
    ctl: &MpiComm,
    spec: &HaloSpec,
    iters: u32,
) -> anyhow::Result<Result<f64, String>> {
    use collectives_core::cudarc::driver::DevicePtrMut;
    use std::ffi::c_int;
    let awareness = collectives_core::cuda_aware::detect()?.awareness.clone();
    let mut yes = [i32::from(awareness.is_yes())];
    ctl.all_reduce_in_place(&mut yes[..], ReduceOp::Min)?;
    if yes[0] == 0 {
        return Ok(Err(format!(
            "the MPI library is not known to be CUDA-aware on every rank (here: {awareness}); \
             run under a CUDA-aware MPI (cuda_mpirun)"
        )));
    }
    let grid = ProcessGrid::new(comm.size(), spec.dims)?;
    let rank = comm.rank();
    let faces: Vec<_> = [[-1i8, 0, 0], [1, 0, 0]]
        .iter()
        .map(|&d| -> anyhow::Result<_> {
            let back = d.map(|c| -c);
            Ok((
                MpiSubarray::new(spec, &send_box(spec, d))?,
                grid.neighbour(rank, d),
                MpiSubarray::new(spec, &ghost_box(spec, back))?,
                grid.neighbour(rank, back),
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut field = device::alloc_zeros::<f64>(comm.stream(), spec.field_len()?)?;
    comm.synchronize()?;
    let (ptr, _guard) = field.device_ptr_mut(comm.stream());
    let round = || -> anyhow::Result<()> {
        for (send, dest, recv, source) in &faces {
            // SAFETY: `ptr` is the device address of a field of `spec` (allocated above and
            // idle: the stream was synchronized); both datatypes lie inside it and are disjoint
            // (an interior slab and a ghost slab); the MPI library is CUDA-aware on every rank
            // (agreed above), so it may read and write device memory; peers are ranks of `ctl`.
            let rc = unsafe {
                mpi::ffi::MPI_Sendrecv(
                    ptr as usize as *const std::ffi::c_void,
                    1,
                    send.0,
                    *dest as c_int,
                    7,
                    ptr as usize as *mut std::ffi::c_void,
                    1,
                    recv.0,
                    *source as c_int,
                    7,
                    ctl.as_raw(),
                    mpi::ffi::RSMPI_STATUS_IGNORE,
                )
            };
            if rc != 0 {
                bail!("MPI_Sendrecv of a subarray from device memory failed with code {rc}");
            }
        }
        Ok(())
    };
    round()?;
    ctl.barrier()?;
    let start = std::time::Instant::now();
    for _ in 0..iters {
        round()?;
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(iters);
    Ok(Ok(timing::max_over_ranks(ctl, ms)?))
}

/// Every row of the table on one device backend (`name`): per neighbour set its contiguous
/// baselines, then one row per transport, depth and grid policy; with `--mpi-datatypes`, the
/// CUDA-aware MPI's subarray faces beside the fastest row.
fn run_on<C: DeviceCommunicator>(
    comm: &C,
    name: &'static str,
    ctl: &MpiComm,
    args: &HaloArgs,
    sink: &mut Sink,
) -> anyhow::Result<()> {
    sink.table_lines(|| {
        let mut v = vec![format!("# backend {name}")];
        v.extend(HaloRow::header());
        v
    });
    // The fastest faces row (else the fastest row) against the MPI datatypes.
    let mut ours_total_us: Option<(Neighbours, f64)> = None;
    for nb in args.neighbours.neighbours() {
        let base = contiguous_baselines(comm, ctl, args, &args.spec(nb))?;
        let rows = args.transport.iter().flat_map(|&t| {
            args.chunks
                .iter()
                .flat_map(move |&c| args.grid.iter().map(move |&g| (t, c, g)))
        });
        for (transport, chunks, grid_cap) in rows {
            let spec = args.spec(nb).with_chunks(chunks);
            let row = halo_row((comm, name), ctl, args, spec, (grid_cap, transport), base)?;
            sink.result(
                || vec![row.line()],
                |machine, nranks| row.records(machine, nranks, &args.spec(nb)),
            );
            let better = match ours_total_us {
                None => true,
                Some((n, us)) => {
                    (nb == Neighbours::Faces && n != Neighbours::Faces)
                        || (nb == n && row.total_us < us)
                }
            };
            if better {
                ours_total_us = Some((nb, row.total_us));
            }
            if row.wrong.is_some_and(|w| w > 0) {
                bail!(
                    "{} ghost cells differ from the global reference ({} neighbours, {} chunks)",
                    row.wrong.unwrap_or(0),
                    nb.name(),
                    chunks
                );
            }
        }
    }
    if args.mpi_datatypes {
        let spec = args.spec(Neighbours::Faces);
        let mpi = mpi_datatype_x_faces(comm, ctl, &spec, args.mpi_iters)?;
        if !sink.table() {
            match &mpi {
                Ok(ms) => sink.doc_mut().notes.push(format!(
                    "mpi-datatypes: both x faces: {ms:.3} ms per round (-n {})",
                    args.mpi_iters
                )),
                Err(why) => sink
                    .doc_mut()
                    .notes
                    .push(format!("mpi-datatypes: skipped: {why}")),
            }
        }
        if sink.table() {
            let line = match (mpi, ours_total_us) {
                    (Ok(ms), Some((nb, us))) => format!(
                        "# mpi-datatypes (CUDA-aware MPI, MPI_Type_create_subarray from device memory, \
                         MPI_Sendrecv per face): both x faces: {ms:.3} ms per round (-n {}); ours, whole \
                         {}-neighbour exchange: {us:.2} us; ratio {:.0}x",
                        args.mpi_iters,
                        nb.count(),
                        ms * 1e3 / us
                    ),
                    (Ok(ms), None) => format!("# mpi-datatypes: both x faces: {ms:.3} ms per round"),
                    (Err(why), _) => format!("# mpi-datatypes: skipped: {why}"),
                };
            sink.lines([line]);
        }
    }
    Ok(())
}

/// Run the benchmark on every rank; rank 0 prints.
///
/// # Errors
/// Bad flags, no backend that can run the exchange, library errors, device memory.
pub fn run(universe: &mpi::environment::Universe, args: &HaloArgs) -> anyhow::Result<()> {
    let ctl = MpiComm::world(universe)?.with_checked(false);
    let (rank, size) = (ctl.rank(), ctl.size());
    // Flags first, identically on every rank.
    for nb in args.neighbours.neighbours() {
        for &chunks in &args.chunks {
            let spec = args.spec(nb).with_chunks(chunks);
            spec.validate()?;
            ProcessGrid::new(size, spec.dims)?;
        }
    }
    // The backends every rank can run.
    let candidates = args.backend.candidates();
    let local: Vec<Option<String>> = candidates.iter().map(|&b| halo_unavailable(b)).collect();
    let mut everywhere: Vec<i32> = local.iter().map(|r| i32::from(r.is_none())).collect();
    ctl.all_reduce_in_place(&mut everywhere[..], ReduceOp::Min)?;
    let agreed: Vec<(Backend, Option<String>)> = candidates
        .into_iter()
        .zip(local)
        .zip(everywhere)
        .map(|((b, why), all)| (b, backend::agreed_unavailable(why, all == 1)))
        .collect();
    let (backends, left_out) = backend::resolve_listed(args.backend, &agreed)?;

    let spec = args.spec(Neighbours::All);
    let grid = ProcessGrid::new(size, spec.dims)?;
    let mut machine = Machine::here();
    if backends.contains(&Backend::Nccl) {
        machine.nccl_version = collectives_core::nccl_sys::library()
            .ok()
            .map(|l| l.version().to_string());
    }
    let mut sink = Sink::open(
        rank,
        None,
        args.format,
        Document::new("halo", size, machine).with_settings([
            ("cells", serde_json::json!(spec.n)),
            ("radius", serde_json::json!(spec.radius)),
            ("quantities", serde_json::json!(spec.quantities)),
            ("grid", serde_json::json!(grid.dims())),
            ("iters", serde_json::json!(args.loops.iters)),
            ("warmup_iters", serde_json::json!(args.loops.warmup_iters)),
            ("check", serde_json::json!(args.check == 1)),
        ]),
    )?;
    sink.doc_mut().backends = backends.iter().map(|b| b.name().to_string()).collect();
    sink.doc_mut().method = vec![
        "pack/local/transfer/unpack/pull: CUDA events around each step of one exchange run step by step; library: -n pipelined exchanges back to back, per exchange; contig: the same bytes in one contiguous buffer per neighbour rank; contig-dir: one per direction; every time the slowest rank's".into(),
    ];
    sink.begin(|| {
        vec![
            format!(
            "# collbench halo: nranks {size}, grid {:?}, {:?} interior cells per rank, radius {}, {} f64 quantities, periodic",
            grid.dims(),
            spec.n,
            spec.radius,
            spec.quantities
            ),
            format!("#  pack/local/transfer/unpack/pull: CUDA events around each step of one exchange run step by step (stream drained after each; local = direct copies where a rank is its own neighbour; transfer/unpack = neighbours through the backend; pull = neighbours through CUDA IPC, read from their send buffers into the ghost cells); total: -n pipelined exchanges back to back after -w {}, per exchange (-n {})", args.loops.warmup_iters, args.loops.iters),
            "#  transport: auto = CUDA IPC to neighbours on the same node where both GPUs can, the backend otherwise; comm = the backend only; ipc: neighbour ranks reached through IPC".to_string(),
            "#  chunks: pipeline depth (every message to another rank cut into this many pieces); grid: the kernels' grid policy (auto, full, or waves); msgs: messages sent per exchange".to_string(),
            "#  contig: the same bytes in one contiguous buffer per neighbour rank (itself included), one group of send/recv through the same backend; ratio = total / contig".to_string(),
            "#  c/dir: one contiguous buffer per direction (6 or 26 messages); ratio = total / c/dir".to_string(),
            "#  times: maximum over ranks of the per-exchange average; GB/s = bytes/rank / total"
                .to_string(),
        ]
    });
    for (b, why) in &left_out {
        let note = format!("{}: left out: {why}", b.name());
        sink.note(note.clone(), Some(format!("#  {note}")), None);
    }
    // One backend's communicator: made (collective), checked mode off, measured, then freed.
    macro_rules! on {
        ($comm:ty, $b:expr) => {{
            let comm = <$comm>::from_mpi(&ctl, None)
                .with_context(|| format!("starting the {} backend", $b.name()))?
                .with_checked(false);
            run_on(&comm, $b.name(), &ctl, args, &mut sink)?;
            comm.finalize()?;
        }};
    }
    for b in backends {
        match b {
            Backend::Nccl => on!(NcclComm, b),
            Backend::CudaMpi => on!(MpiCudaComm, b),
            Backend::MpiStaged => on!(MpiStagedComm, b),
            Backend::Mpi => bail!("the halo exchange needs device memory: no mpi runner"),
        }
    }
    sink.finish(Vec::new)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: HaloArgs,
    }

    #[test]
    fn defaults_follow_the_issue() {
        let w = Wrap::try_parse_from(["x"]).unwrap();
        let s = w.args.spec(Neighbours::All);
        assert_eq!((s.n, s.radius, s.quantities), ([256; 3], 3, 8));
        assert_eq!(w.args.neighbours, Mode::Both);
        assert_eq!(w.args.backend, BackendChoice::One(Backend::Nccl));
        assert_eq!(s.dims, None);
        assert_eq!(w.args.chunks, vec![halo::DEFAULT_CHUNKS]);
        assert_eq!(s.chunks, halo::DEFAULT_CHUNKS);
        assert_eq!(w.args.transport, vec![HaloTransport::Auto]);
    }

    #[test]
    fn flags() {
        let w = Wrap::try_parse_from([
            "x",
            "-N",
            "32",
            "--nz",
            "16",
            "-r",
            "1",
            "-q",
            "3",
            "--neighbours",
            "faces",
            "--dims",
            "1x2x1",
            "-n",
            "4",
            "-w",
            "1",
            "-c",
            "0",
            "--chunks",
            "1,2,8",
        ])
        .unwrap();
        assert_eq!(w.args.chunks, vec![1, 2, 8]);
        assert_eq!(w.args.grid, vec![GridCap::Full]);
        assert_eq!(
            HaloExchange::default_options().grid,
            GridCap::Full,
            "collbench's default is the library's"
        );
        let g = Wrap::try_parse_from(["x", "--grid", "auto,full,2"]).unwrap();
        assert_eq!(
            g.args.grid,
            vec![GridCap::Auto, GridCap::Full, GridCap::Waves(2)]
        );
        assert_eq!(grid_name(GridCap::Waves(2)), "2");
        assert_eq!(parse_grid("s2"), Ok(GridCap::PerSm(2)));
        assert_eq!(grid_name(GridCap::PerSm(2)), "s2");
        assert!(parse_grid("s0").is_err() && parse_grid("s").is_err() && parse_grid("0").is_err());
        assert!(Wrap::try_parse_from(["x", "--grid", "0"]).is_err());
        let t = Wrap::try_parse_from(["x", "--transport", "nccl,auto"]).unwrap();
        assert_eq!(
            t.args.transport,
            vec![HaloTransport::Comm, HaloTransport::Auto]
        );
        assert!(Wrap::try_parse_from(["x", "--transport", "ipc"]).is_err());
        assert!(Wrap::try_parse_from(["x", "--chunks", "0"]).is_ok()); // refused by validate()
        assert_eq!(w.args.spec(Neighbours::All).chunks, 1);
        let s = w.args.spec(Neighbours::Faces);
        assert_eq!(s.n, [32, 32, 16]);
        assert_eq!(s.dims, Some([1, 2, 1]));
        assert_eq!(
            (w.args.loops.iters, w.args.loops.warmup_iters, w.args.check),
            (4, 1, 0)
        );
        assert!(Wrap::try_parse_from(["x", "--dims", "2x2"]).is_err());
        assert!(Wrap::try_parse_from(["x", "--dims", "0x1x1"]).is_err());
        assert!(Wrap::try_parse_from(["x", "-n", "0"]).is_err());
        assert!(Wrap::try_parse_from(["x", "--backend", "foo"]).is_err());
    }

    #[test]
    fn the_halo_exchange_runs_on_the_device_backends() {
        assert!(halo_unavailable(Backend::Mpi)
            .unwrap()
            .contains("device memory"));
        let row = HaloRow {
            backend: "nccl",
            neighbours: Neighbours::All,
            chunks: 4,
            grid: GridCap::Auto,
            transport: HaloTransport::Comm,
            ipc_peers: 0,
            bytes: 1_000_000,
            messages: 2,
            pack_us: 1.0,
            local_us: 0.5,
            transfer_us: 2.0,
            unpack_us: 1.0,
            pull_us: 0.0,
            total_us: 4.0,
            contig_us: 2.0,
            contig_dir_us: None,
            wrong: Some(0),
        };
        let l = row.line();
        assert!(
            l.contains("all") && l.contains("comm") && l.contains("250.00") && l.contains("2.00"),
            "{l}"
        );
        assert_eq!(
            HaloRow::header()[0].split_whitespace().count(),
            l.split_whitespace().count() + 1
        );
        let spec = HaloSpec::new([8, 8, 16], 3, 2, Neighbours::All);
        let recs = row.records(&Machine::default(), 2, &spec);
        let v: Vec<&str> = recs.iter().map(|r| r.variant.as_str()).collect();
        assert_eq!(
            v,
            ["library", "pack", "local", "transfer", "unpack", "pull", "contig"]
        );
        assert_eq!((recs[0].time_us, recs[0].algbw_gbps), (4.0, Some(250.0)));
        assert_eq!(
            recs[0].config.as_deref(),
            Some("cells=8x8x16;radius=3;quantities=2;neighbours=all;chunks=4;grid=auto;transport=comm;ipc_peers=0;messages=2")
        );
        let mut doc = Document::new("halo", 2, Machine::default());
        doc.records = recs;
        assert_eq!(Document::from_json(&doc.to_json()).unwrap(), doc);
    }
}

#[cfg(test)]
mod pinned {
    //! The text of `collbench halo`'s table, pinned byte for byte.
    use super::*;

    #[test]
    fn text_is_unchanged() {
        // Times of the steps, in the order of the columns.
        let [pack_us, local_us, transfer_us, unpack_us, pull_us, total_us, contig_us] =
            [1.0, 0.5, 2.0, 1.0, 0.0, 4.0, 2.0];
        let (neighbours, grid, transport) = (Neighbours::All, GridCap::Auto, HaloTransport::Comm);
        let row = HaloRow {
            backend: "nccl",
            neighbours,
            chunks: 4,
            grid,
            transport,
            ipc_peers: 0,
            bytes: 1_000_000,
            messages: 2,
            pack_us,
            local_us,
            transfer_us,
            unpack_us,
            pull_us,
            total_us,
            contig_us,
            contig_dir_us: None,
            wrong: Some(0),
        };
        let faces = HaloRow {
            neighbours: Neighbours::Faces,
            transport: HaloTransport::Auto,
            ipc_peers: 3,
            total_us: 123.456,
            contig_dir_us: Some(100.125),
            wrong: None,
            ..row.clone()
        };
        let mut v = HaloRow::header().to_vec();
        v.push(row.line());
        v.push(faces.line());
        crate::output::sink::tests::golden(&v, include_str!("../../tests/golden/halo.txt"));
    }
}
