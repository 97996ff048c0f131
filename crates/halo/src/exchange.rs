//! [`HaloExchange`]: the exchange on a device communicator.

use std::fmt;
use std::sync::Arc;

use collectives_core::ipc::DeviceAlloc;
use collectives_core::{
    check, Communicator, DeviceCommunicator, Error, ExchangePart, NcclComm, ReduceOp, Result,
};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtrMut};
use datatype_pack::gpu::{FusedCopier, FusedPacker, GpuOptions, GridCap};

use crate::error::pack_error;
use crate::grid::ProcessGrid;
use crate::peer::{HaloTransport, PeerLinks};
use crate::plan::{HaloPlan, Message};
use crate::spec::{HaloSpec, Neighbours};

const OP: &str = "halo_exchange";

/// Time of each step of one exchange run step by step ([`HaloExchange::exchange_timed`]), in
/// milliseconds, from CUDA events on the communicator's stream.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HaloTimes {
    /// The fused pack launches (every chunk).
    pub pack_ms: f64,
    /// The local copies (directions in which the rank is its own neighbour) and the wrap
    /// copies after the receives ([`HaloPlan::wraps`]).
    pub local_ms: f64,
    /// The grouped sends and receives of every message (every chunk).
    pub transfer_ms: f64,
    /// The fused unpack launches of what NCCL received (every chunk).
    pub unpack_ms: f64,
    /// Neighbours on the same node reached through CUDA IPC ([`HaloTransport::Auto`]): the
    /// waits for their ready flags and the launches that read their packed bytes straight into
    /// the ghost cells (transfer and unpack in one).
    pub pull_ms: f64,
}

impl HaloTimes {
    /// The sum of the steps: the exchange without any overlap.
    pub fn total_ms(&self) -> f64 {
        self.pack_ms + self.local_ms + self.transfer_ms + self.unpack_ms + self.pull_ms
    }
}

/// Thread blocks per multiprocessor of the local copies of an exchange that pulls from IPC
/// neighbours, under the [`GridCap::Full`] policy (the default,
/// [`HaloExchange::default_options`]).
///
/// The local copies run on their own stream beside the pulls, which are on the critical path;
/// they are not. With a full grid they held most of the multiprocessors' thread slots for
/// their 35 us, and the pulls, whose reads over NVLink need many threads in flight, got few:
/// capped, the 6-face exchange on 2xH200 went from 151 to 138 us. Beside NCCL transfers (a
/// few multiprocessors) the full grid stays faster (220 against 247 us), and so does a rank
/// that is its own only neighbour (docs/PERFORMANCE.md).
pub const LOCAL_BLOCKS_PER_SM: u32 = 2;

/// The options of the local copier: `opts`, with the full grid capped at
/// [`LOCAL_BLOCKS_PER_SM`] when the exchange `pulls` from IPC neighbours; any other grid
/// policy as given.
fn local_options(opts: &GpuOptions, pulls: bool) -> GpuOptions {
    match opts.grid {
        GridCap::Full if pulls => opts.clone().with_grid(GridCap::PerSm(LOCAL_BLOCKS_PER_SM)),
        _ => opts.clone(),
    }
}

/// The streams an exchange forks from the communicator's stream ([`HaloExchange::exchange`]).
#[derive(Debug, Clone, Copy)]
struct StreamsUsed {
    /// The local copies.
    side: bool,
    /// NCCL transfers and the unpacks of what they bring.
    wire: bool,
    /// Pulls apart from the packs: only with more than one chunk, so that the pull of chunk
    /// `k` overlaps the pack of chunk `k + 1`.
    puller: bool,
}

/// Events that order the streams of one exchange (no timing).
struct Sync {
    start: CudaEvent,
    packed: Vec<CudaEvent>,
    received: Vec<CudaEvent>,
    side_done: CudaEvent,
    wire_done: CudaEvent,
    unpack_done: CudaEvent,
    pull_done: CudaEvent,
}

/// A halo exchange over a device communicator `C` ([`NcclComm`] unless named): plans, compiled pack, unpack and copy kernels, the send
/// and receive buffers, the CUDA IPC links to neighbours on the same node and four streams,
/// made once and reused by every [`exchange`](Self::exchange). See the [module docs](super).
pub struct HaloExchange<'c, C: DeviceCommunicator = NcclComm> {
    comm: &'c C,
    spec: HaloSpec,
    grid: ProcessGrid,
    plan: HaloPlan,
    /// Per chunk; `None` for a chunk without regions. The unpacks cover what NCCL receives.
    pack: Vec<Option<FusedPacker>>,
    unpack: Vec<Option<FusedPacker>>,
    local: Option<FusedCopier>,
    /// The wrap copies, after every pull and unpack ([`HaloPlan::wraps`]).
    wrap: Option<FusedCopier>,
    /// Raw addresses of the buffers: the exchange orders its streams with its own events, so
    /// cudarc's per-buffer event tracking is bypassed. The send buffer belongs to `links`.
    send_ptr: u64,
    send_len: usize,
    recv_ptr: u64,
    /// Packs and local copies.
    side: Arc<CudaStream>,
    /// The transfers of the pipelined exchange, at the device's highest stream priority so that
    /// NCCL's kernels get multiprocessors ahead of the pack, copy and unpack kernels.
    wire: Arc<CudaStream>,
    /// Unpacks.
    unpacker: Arc<CudaStream>,
    /// Pulls from neighbours reached through CUDA IPC, at the highest priority too.
    puller: Arc<CudaStream>,
    sync: Sync,
    field_len: usize,
    /// Around the steps of [`exchange_timed`](Self::exchange_timed).
    timing: [CudaEvent; 7],
    transport: HaloTransport,
    /// Dropped after everything that enqueues work using its buffers.
    links: PeerLinks,
    /// What the communicator's transfers receive, from `cuMemAlloc` so that a CUDA-aware MPI
    /// can take its address (it cannot map cudarc's pool memory). Dropped last: `cuMemFree`
    /// waits for the device.
    recv_buf: DeviceAlloc,
}

impl<C: DeviceCommunicator> fmt::Debug for HaloExchange<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HaloExchange")
            .field("spec", &self.spec)
            .field("grid", &self.grid)
            .field("plan", &self.plan)
            .field("transport", &self.transport)
            .field("ipc_peers", &self.ipc_peers())
            .finish_non_exhaustive()
    }
}

/// The spec as numbers every rank must agree on.
fn spec_words(spec: &HaloSpec) -> [u64; 10] {
    let d = spec.dims.unwrap_or([0; 3]);
    [
        spec.n[0] as u64,
        spec.n[1] as u64,
        spec.n[2] as u64,
        spec.radius as u64,
        spec.quantities as u64,
        u64::from(spec.neighbours == Neighbours::All),
        d[0] as u64,
        d[1] as u64,
        d[2] as u64,
        spec.chunks as u64,
    ]
}

impl HaloExchange<'_> {
    /// The kernels' options [`HaloExchange::new`] uses: the defaults with [`GridCap::Full`]. A
    /// full grid lets blocks retire all along a launch, so NCCL's kernels (on a stream of
    /// higher priority) get multiprocessors while a pack, copy or unpack runs; on 2xH200 it made
    /// the pipelined exchange 3 to 25 us faster than `GridCap::Auto`'s one wave of looping
    /// threads (docs/PERFORMANCE.md).
    pub fn default_options() -> GpuOptions {
        GpuOptions::default().with_grid(GridCap::Full)
    }
}

impl<'c, C: DeviceCommunicator> HaloExchange<'c, C> {
    /// The exchange of `spec` over `comm`'s ranks with [`HaloExchange::default_options`].
    /// Collective: every rank calls it with the same spec. Compiles the pack, unpack and copy
    /// kernels (NVRTC), allocates the send and receive buffers on the communicator's device and
    /// creates four streams; agrees with the other ranks of the node which
    /// neighbours are reached through CUDA IPC ([`HaloTransport`]).
    ///
    /// # Errors
    /// As [`with_options`](Self::with_options).
    pub fn new(comm: &'c C, spec: HaloSpec) -> Result<Self> {
        Self::with_options(comm, spec, &HaloExchange::default_options())
    }

    /// [`new`](Self::new) with the kernels' [`GpuOptions`] (grid policy, block size, NVRTC
    /// options), which may differ between ranks.
    ///
    /// # Errors
    /// As [`with_transport`](Self::with_transport).
    pub fn with_options(comm: &'c C, spec: HaloSpec, options: &GpuOptions) -> Result<Self> {
        Self::with_transport(comm, spec, options, HaloTransport::Auto)
    }

    /// [`with_options`](Self::with_options) with the way neighbour ranks are reached
    /// ([`HaloTransport`]), which may differ between ranks: a pair of ranks uses CUDA IPC only
    /// when both choose [`HaloTransport::Auto`].
    ///
    /// # Errors
    /// On every rank, when any rank's spec is refused ([`HaloSpec::validate`], a process grid
    /// that does not hold the ranks) or the ranks pass different specs:
    /// [`Error::InvalidArgument`]. Then, on the ranks where they happen:
    /// [`Error::Unavailable`] without NVRTC; [`Error::Cuda`] when compiling, loading,
    /// allocating or creating streams and events fails; MPI errors of the agreement.
    pub fn with_transport(
        comm: &'c C,
        spec: HaloSpec,
        options: &GpuOptions,
        transport: HaloTransport,
    ) -> Result<Self> {
        let _span = tracing::debug_span!("halo_new").entered();
        let (rank, size) = (comm.rank(), comm.size());
        let local = ProcessGrid::new(size, spec.dims)
            .and_then(|grid| HaloPlan::new(&spec, &grid, rank).map(|plan| (grid, plan)));
        // Every rank learns whether every rank's spec is good and equal before anyone goes on.
        let mine = spec_words(&spec);
        let mut words = [0u64; 11];
        words[0] = u64::from(local.is_err());
        words[1..].copy_from_slice(&mine);
        let mut high = [0u64; 11];
        let mut low = [0u64; 11];
        comm.mpi()
            .all_reduce(&words[..], &mut high[..], ReduceOp::Max)?;
        comm.mpi()
            .all_reduce(&words[..], &mut low[..], ReduceOp::Min)?;
        let (grid, plan) = local?;
        if high[0] != 0 {
            return Err(Error::invalid(
                OP,
                "another rank refused its halo spec (see its error)",
            ));
        }
        if high[1..] != low[1..] {
            return Err(Error::invalid(
                OP,
                format!(
                    "the ranks pass different halo specs: per field [nx, ny, nz, radius, \
                     quantities, all, px, py, pz, chunks] the smallest is {:?} and the largest \
                     {:?}; this rank passed {mine:?}",
                    &low[1..],
                    &high[1..]
                ),
            ));
        }
        let ctx = comm.context();
        let opts = options.clone();
        let stream = comm.stream();
        let side = ctx.new_stream().map_err(|e| Error::cuda(OP, e))?;
        let unpacker = ctx.new_stream().map_err(|e| Error::cuda(OP, e))?;
        ctx.bind_to_thread().map_err(|e| Error::cuda(OP, e))?;
        let (_least, greatest) =
            cudarc::driver::result::stream::get_priority_range().map_err(|e| Error::cuda(OP, e))?;
        let wire = ctx
            .new_stream_with_priority(greatest)
            .map_err(|e| Error::cuda(OP, e))?;
        // Pulls are on the critical path like NCCL's kernels: their blocks go first too.
        let puller = ctx
            .new_stream_with_priority(greatest)
            .map_err(|e| Error::cuda(OP, e))?;
        // Collective: agrees with the node's other ranks which neighbours are reached by IPC.
        let links = PeerLinks::new(
            comm,
            &spec,
            &grid,
            &plan,
            transport,
            &opts,
            vec![stream.clone(), side.clone(), puller.clone()],
        )?;
        let packers = |regions: &dyn Fn(usize) -> Vec<datatype_pack::fused::Region>| {
            (0..plan.chunks())
                .map(|k| {
                    let r = regions(k);
                    if r.is_empty() {
                        return Ok(None);
                    }
                    FusedPacker::with_regions(ctx, r, &opts)
                        .map(Some)
                        .map_err(|e| pack_error(OP, e))
                })
                .collect::<Result<Vec<_>>>()
        };
        let pack = packers(&|k| plan.chunk_send_regions(k).to_vec())?;
        // NCCL unpacks only what does not come through IPC.
        let nccl_regions = |k: usize| {
            let theirs: Vec<_> = plan
                .recvs()
                .iter()
                .filter(|m| m.chunk == k && links.is_ipc(m.peer))
                .map(|m| m.offset..m.offset + m.bytes)
                .collect();
            plan.chunk_recv_regions(k)
                .iter()
                .filter(|r| !theirs.iter().any(|span| span.contains(&r.packed_offset())))
                .cloned()
                .collect()
        };
        let unpack = packers(&nccl_regions)?;
        let pulls = plan.recvs().iter().any(|m| links.is_ipc(m.peer));
        let local = if plan.locals().is_empty() {
            None
        } else {
            Some(
                FusedCopier::new(ctx, plan.copy_regions()?, &local_options(&opts, pulls))
                    .map_err(|e| pack_error(OP, e))?,
            )
        };
        // Alone on the device at the end of the exchange: the grid policy as given.
        let wrap = if plan.wraps().is_empty() {
            None
        } else {
            Some(
                FusedCopier::new(ctx, plan.wrap_regions()?, &opts)
                    .map_err(|e| pack_error(OP, e))?,
            )
        };
        let recv_buf = DeviceAlloc::zeroed(OP, ctx, plan.recv_bytes() as usize)?;
        let recv_ptr = recv_buf.ptr();
        let (send_ptr, send_len) = links.send_buffer();
        // The buffer is zeroed on the communicator's stream; the side streams start from it.
        comm.synchronize()?;
        let ev = || {
            ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .map_err(|e| Error::cuda(OP, e))
        };
        let timed = || {
            ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| Error::cuda(OP, e))
        };
        let timing = [
            timed()?,
            timed()?,
            timed()?,
            timed()?,
            timed()?,
            timed()?,
            timed()?,
        ];
        let chunks = plan.chunks();
        let sync = Sync {
            start: ev()?,
            packed: (0..chunks).map(|_| ev()).collect::<Result<_>>()?,
            received: (0..chunks).map(|_| ev()).collect::<Result<_>>()?,
            side_done: ev()?,
            wire_done: ev()?,
            unpack_done: ev()?,
            pull_done: ev()?,
        };
        let field_len = spec.field_len()?;
        Ok(Self {
            comm,
            spec,
            grid,
            plan,
            pack,
            unpack,
            local,
            wrap,
            send_ptr,
            send_len,
            recv_ptr,
            side,
            wire,
            unpacker,
            puller,
            sync,
            field_len,
            timing,
            transport,
            links,
            recv_buf,
        })
    }

    /// The spec.
    pub fn spec(&self) -> &HaloSpec {
        &self.spec
    }

    /// The process grid.
    pub fn grid(&self) -> &ProcessGrid {
        &self.grid
    }

    /// This rank's plan: regions, messages and local copies.
    pub fn plan(&self) -> &HaloPlan {
        &self.plan
    }

    /// The communicator.
    pub fn comm(&self) -> &'c C {
        self.comm
    }

    /// The transport this rank chose ([`with_transport`](Self::with_transport)).
    pub fn transport(&self) -> HaloTransport {
        self.transport
    }

    /// The neighbour ranks reached through CUDA IPC (both ranks of each pair agreed), in rank
    /// order; every other neighbour rank is reached through NCCL.
    pub fn ipc_peers(&self) -> Vec<usize> {
        let mut peers: Vec<usize> = self
            .plan
            .sends()
            .iter()
            .chain(self.plan.recvs())
            .map(|m| m.peer)
            .filter(|&p| self.links.is_ipc(p))
            .collect();
        peers.sort_unstable();
        peers.dedup();
        peers
    }

    /// Elements (f64) a field must have: [`HaloSpec::field_len`].
    pub fn field_len(&self) -> usize {
        self.field_len
    }

    fn check_field(&self, op: &'static str, field: &CudaSlice<f64>) -> Result<()> {
        if field.len() != self.field_len {
            return Err(Error::invalid(
                op,
                format!(
                    "the field has {} elements but {} quantities of {:?} padded cells need {}",
                    field.len(),
                    self.spec.quantities,
                    self.spec.padded(),
                    self.field_len
                ),
            ));
        }
        check::same_device(
            op,
            "the field",
            field.ordinal(),
            self.comm.context().ordinal(),
        )
    }

    /// Enqueue the whole exchange, pipelined (see the [module docs](super)): starts and ends on
    /// the communicator's stream. Returns once enqueued; the ghost cells are filled when the
    /// communicator's stream gets there. Every rank calls it (it contains the transfers), as
    /// often as the others: a neighbour reached through CUDA IPC waits on the device for this
    /// rank's flags, and a rank that stops exchanging leaves it waiting until
    /// [`DeviceCommunicator::synchronize`]'s deadline reports [`Error::Timeout`] (on NCCL; the MPI
    /// backends wait under their deadline, if one is set).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `field` has the wrong length or lies on another device
    /// (checked before anything is enqueued); [`Error::Cuda`] when a launch or an event fails;
    /// [`Error::Unavailable`] when libnccl lacks `ncclSend`/`ncclRecv`; [`Error::Nccl`] when
    /// NCCL refuses a call or a group. Whatever was enqueued before an error is still joined
    /// back into the communicator's stream.
    pub fn exchange(&mut self, field: &mut CudaSlice<f64>) -> Result<()> {
        let _span = tracing::trace_span!("halo_exchange").entered();
        self.check_field(OP, field)?;
        let main = self.comm.stream().clone();
        let (fp, _write) = field.device_ptr_mut(&main);
        let field_bytes = self.field_len * 8;
        let ev = |e: cudarc::driver::DriverError| Error::cuda(OP, e);
        self.links.begin();
        let streams = self.streams_used();
        if streams.wire || streams.puller {
            self.sync.start.record(&main).map_err(ev)?;
        }
        if streams.wire {
            self.wire.wait(&self.sync.start).map_err(ev)?;
            self.unpacker.wait(&self.sync.start).map_err(ev)?;
        }
        if streams.puller {
            self.puller.wait(&self.sync.start).map_err(ev)?;
        }
        let enqueued = self.enqueue_pipeline(&main, streams, fp, field_bytes);
        // Join the side streams back into the communicator's stream whatever happened, so that
        // nothing enqueued outlives the exchange as seen from that stream.
        let joined = self.join(&main, streams);
        enqueued.and(joined)
    }

    /// Which streams besides the communicator's an exchange uses: every hop between streams
    /// costs microseconds on the critical path, so none is forked for nothing.
    fn streams_used(&self) -> StreamsUsed {
        let nccl = |m: &Message| !self.links.is_ipc(m.peer);
        let ipc = |m: &Message| self.links.is_ipc(m.peer);
        StreamsUsed {
            side: self.local.is_some(),
            wire: self.plan.sends().iter().any(nccl) || self.plan.recvs().iter().any(nccl),
            puller: self.plan.chunks() > 1 && self.plan.recvs().iter().any(ipc),
        }
    }

    /// Enqueues one exchange. On the communicator's stream: every chunk's pack (once the IPC
    /// receivers are done with the previous exchange's bytes), each followed by its ready
    /// flags; with a single chunk, then the pulls from IPC neighbours too (they wait for the
    /// peers' packs anyway). On the side stream, once everything is packed, the local copies,
    /// which overlap the transfers and pulls. The other streams as their names say. Last,
    /// after the pulls (on their stream) and the unpacks, the wrap copies.
    fn enqueue_pipeline(
        &self,
        main: &CudaStream,
        streams: StreamsUsed,
        field: u64,
        field_bytes: usize,
    ) -> Result<()> {
        let ev = |e: cudarc::driver::DriverError| Error::cuda(OP, e);
        let chunks = self.plan.chunks();
        self.links.wait_consumed(main)?;
        for k in 0..chunks {
            self.pack_chunk(main, k, field, field_bytes)?;
            if streams.wire || (streams.side && k + 1 == chunks) {
                self.sync.packed[k].record(main).map_err(ev)?;
            }
            self.links.signal_ready(main, k)?;
        }
        if streams.side {
            self.side.wait(&self.sync.packed[chunks - 1]).map_err(ev)?;
            self.copy_locals(&self.side, field, field_bytes)?;
        }
        // Pulls: chunk k of each IPC neighbour once that neighbour packed it.
        let pull_on = if streams.puller { &*self.puller } else { main };
        for k in 0..chunks {
            self.links.pull(pull_on, k, field, field_bytes)?;
        }
        self.links.signal_consumed(pull_on)?;
        if streams.wire {
            // Wire stream: chunk k goes on the wire once packed.
            for k in 0..chunks {
                self.wire.wait(&self.sync.packed[k]).map_err(ev)?;
                self.transfer_chunk(&self.wire, k)?;
                self.sync.received[k].record(&self.wire).map_err(ev)?;
            }
            // Unpack stream: chunk k is unpacked once received.
            for k in 0..chunks {
                self.unpacker.wait(&self.sync.received[k]).map_err(ev)?;
                self.unpack_chunk(&self.unpacker, k, field, field_bytes)?;
            }
        }
        if self.wrap.is_some() {
            // Every message is in (pulled on `pull_on`, unpacked on the unpack stream): the
            // edges and corners they carry go into place, while the local copies may still
            // run on the side stream (they write other ghost cells and read none of these).
            if streams.wire {
                self.sync.unpack_done.record(&self.unpacker).map_err(ev)?;
                pull_on.wait(&self.sync.unpack_done).map_err(ev)?;
            }
            self.copy_wraps(pull_on, field, field_bytes)?;
        }
        Ok(())
    }

    fn join(&self, main: &Arc<CudaStream>, streams: StreamsUsed) -> Result<()> {
        let ev = |e: cudarc::driver::DriverError| Error::cuda(OP, e);
        if streams.side {
            self.sync.side_done.record(&self.side).map_err(ev)?;
            main.wait(&self.sync.side_done).map_err(ev)?;
        }
        if streams.wire {
            self.sync.wire_done.record(&self.wire).map_err(ev)?;
            self.sync.unpack_done.record(&self.unpacker).map_err(ev)?;
            main.wait(&self.sync.wire_done).map_err(ev)?;
            main.wait(&self.sync.unpack_done).map_err(ev)?;
        }
        if streams.puller {
            self.sync.pull_done.record(&self.puller).map_err(ev)?;
            main.wait(&self.sync.pull_done).map_err(ev)?;
        }
        Ok(())
    }

    fn pack_chunk(
        &self,
        stream: &CudaStream,
        k: usize,
        field: u64,
        field_bytes: usize,
    ) -> Result<()> {
        const OP_P: &str = "halo_pack";
        let Some(p) = &self.pack[k] else {
            return Ok(());
        };
        // SAFETY: `field` is the device address of a field of `field_bytes` bytes on the
        // packer's context (checked by check_field), borrowed mutably by the caller for the
        // whole exchange and ordered before and after it through the communicator's stream;
        // the send buffer is ours, `send_len` bytes, and only this exchange's streams touch it,
        // ordered by its events, and IPC neighbours read it only between this exchange's ready
        // flags and their consumed flags, which the first pack waits for.
        unsafe { p.pack_raw(stream, field, field_bytes, self.send_ptr, self.send_len) }
            .map_err(|e| pack_error(OP_P, e))
    }

    fn unpack_chunk(
        &self,
        stream: &CudaStream,
        k: usize,
        field: u64,
        field_bytes: usize,
    ) -> Result<()> {
        const OP_U: &str = "halo_unpack";
        let Some(u) = &self.unpack[k] else {
            return Ok(());
        };
        // SAFETY: as in pack_chunk, with the receive buffer read and the field's ghost cells
        // written; the ghost regions of different chunks and of the local copies are disjoint.
        unsafe {
            u.unpack_raw(
                stream,
                self.recv_ptr,
                self.recv_buf.bytes(),
                field,
                field_bytes,
            )
        }
        .map_err(|e| pack_error(OP_U, e))
    }

    /// The local copies (interior cells into this rank's own ghost cells).
    fn copy_locals(&self, stream: &CudaStream, field: u64, field_bytes: usize) -> Result<()> {
        self.copy_in_field(
            self.local.as_ref(),
            "halo_local_copy",
            stream,
            field,
            field_bytes,
        )
    }

    /// The wrap copies (ghost cells that messages filled into edge and corner ghost cells);
    /// enqueued after every pull and unpack, on the same stream or behind an event.
    fn copy_wraps(&self, stream: &CudaStream, field: u64, field_bytes: usize) -> Result<()> {
        self.copy_in_field(
            self.wrap.as_ref(),
            "halo_wrap_copy",
            stream,
            field,
            field_bytes,
        )
    }

    fn copy_in_field(
        &self,
        copier: Option<&FusedCopier>,
        op: &'static str,
        stream: &CudaStream,
        field: u64,
        field_bytes: usize,
    ) -> Result<()> {
        let Some(c) = copier else {
            return Ok(());
        };
        // SAFETY: as in pack_chunk. Both copiers read and write the same field: a local copy
        // reads interior cells and writes ghost cells; a wrap copy reads ghost cells that
        // messages filled (it runs after them) and writes edge and corner ghost cells. What a
        // copy reads and writes are disjoint, and no other launch of the exchange writes the
        // ghost cells they write.
        unsafe { c.copy_raw(stream, field, field_bytes, field, field_bytes) }
            .map_err(|e| pack_error(op, e))
    }

    /// Enqueue the sends and receives of chunk `k` on `stream`: one NCCL group holding one send
    /// and one receive per neighbour rank ([`DeviceCommunicator::exchange_bytes`]).
    fn transfer_chunk(&self, stream: &CudaStream, k: usize) -> Result<()> {
        const OP_X: &str = "halo_transfer";
        let _span = tracing::trace_span!("halo_transfer", chunk = k).entered();
        let nccl = |m: &&Message| m.chunk == k && !self.links.is_ipc(m.peer);
        let part = |m: &Message| ExchangePart {
            peer: m.peer,
            offset: m.offset as usize,
            len: m.bytes as usize,
        };
        let sends: Vec<_> = self.plan.sends().iter().filter(nccl).map(part).collect();
        let recvs: Vec<_> = self.plan.recvs().iter().filter(nccl).map(part).collect();
        // SAFETY: every message's bytes lie inside its buffer (the plan sized both to the end of
        // the last region); the peers are ranks of the communicator (the process grid holds
        // exactly its ranks); `stream` is a stream of the communicator's context, ordered after
        // the pack of the chunk; the buffers live as long as the exchange and its work; the
        // sender and the receiver of a message derive it from the same spec, agreed at
        // creation, so each send meets a receive of the same length in the same chunk.
        unsafe {
            self.comm
                .exchange_bytes(OP_X, stream, self.send_ptr, &sends, self.recv_ptr, &recvs)
        }
    }

    /// The exchange step by step on the communicator's stream, timed: CUDA events around every
    /// pack, the local copies, every transfer, every unpack, the pulls and the wrap copies, then a wait for the stream
    /// ([`DeviceCommunicator::synchronize`], with its deadline). It fills the same ghost cells as
    /// [`exchange`](Self::exchange) but without overlap: it shows where the time goes.
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange); [`Error::Cuda`] from the events;
    /// [`Error::Timeout`] and [`Error::Nccl`] from the wait.
    pub fn exchange_timed(&mut self, field: &mut CudaSlice<f64>) -> Result<HaloTimes> {
        const OP_T: &str = "halo_exchange_timed";
        let _span = tracing::trace_span!("halo_exchange_timed").entered();
        self.check_field(OP_T, field)?;
        let ev = |e: cudarc::driver::DriverError| Error::cuda(OP_T, e);
        let main = self.comm.stream().clone();
        let chunks = self.plan.chunks();
        let t = &self.timing;
        {
            let (fp, _write) = field.device_ptr_mut(&main);
            let bytes = self.field_len * 8;
            self.links.begin();
            self.links.wait_consumed(&main)?;
            t[0].record(&main).map_err(ev)?;
            for k in 0..chunks {
                self.pack_chunk(&main, k, fp, bytes)?;
                self.links.signal_ready(&main, k)?;
            }
            t[1].record(&main).map_err(ev)?;
            self.copy_locals(&main, fp, bytes)?;
            t[2].record(&main).map_err(ev)?;
            for k in 0..chunks {
                self.transfer_chunk(&main, k)?;
            }
            t[3].record(&main).map_err(ev)?;
            for k in 0..chunks {
                self.unpack_chunk(&main, k, fp, bytes)?;
            }
            t[4].record(&main).map_err(ev)?;
            for k in 0..chunks {
                self.links.pull(&main, k, fp, bytes)?;
            }
            self.links.signal_consumed(&main)?;
            t[5].record(&main).map_err(ev)?;
            self.copy_wraps(&main, fp, bytes)?;
            t[6].record(&main).map_err(ev)?;
        }
        self.comm.synchronize()?;
        let ms = |a: usize, b: usize| -> Result<f64> {
            t[a].elapsed_ms(&t[b]).map(f64::from).map_err(ev)
        };
        Ok(HaloTimes {
            pack_ms: ms(0, 1)?,
            local_ms: ms(1, 2)? + ms(5, 6)?,
            transfer_ms: ms(2, 3)?,
            unpack_ms: ms(3, 4)?,
            pull_ms: ms(4, 5)?,
        })
    }
}
