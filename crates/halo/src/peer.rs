//! Neighbours on the same node, reached through CUDA IPC instead of NCCL.
//!
//! When two ranks of a node can reach each other's GPU memory (the same GPU, or peer access),
//! the receiver reads the sender's packed bytes straight out of the sender's send buffer and
//! scatters them into its own ghost cells in one launch (a "pull"): there is no receive buffer,
//! no NCCL transfer and no separate unpack. Two 64-bit flags per pair and chunk, written with
//! `cuStreamWriteValue64` into the other rank's inbox and waited on with `cuStreamWaitValue64`,
//! order the ranks' streams without involving the host:
//!
//! - **ready**: after the sender packed chunk `k` of exchange `e`, it writes `e` into the
//!   receiver's inbox slot `(sender, k)`; the receiver's pull of chunk `k` waits for it.
//! - **consumed**: after the receiver pulled every chunk of exchange `e`, it writes `e` into the
//!   sender's inbox slot `(receiver, chunks)`; the sender's next pack waits for it, so the send
//!   buffer is never overwritten while a peer still reads it.
//!
//! Which pairs use IPC is agreed by both ranks of the pair when the exchange is made
//! ([`HaloExchange::new`](crate::HaloExchange::new)); every other neighbour goes through NCCL as before.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_uint;
use std::sync::Arc;
use std::time::Duration;

use collectives_core::deadline::{self, Polled};
use collectives_core::ipc::{self, DeviceAlloc, Mapping, HANDLE_WORDS};
use collectives_core::{Communicator, DeviceCommunicator, Error, ReduceOp, Result};
use cudarc::driver::sys::{self as cu, CUdevice_attribute, CUresult};
use cudarc::driver::{CudaContext, CudaStream};
use datatype_pack::fused::Region;
use datatype_pack::gpu::{FusedPacker, GpuOptions};

use crate::error::pack_error;
use crate::grid::ProcessGrid;
use crate::plan::HaloPlan;
use crate::spec::HaloSpec;

const OP: &str = "halo_peer";

/// How long a drop waits for the neighbours where the communicator has no deadline (the MPI
/// backends without `COLLECTIVES_TIMEOUT`): NCCL's default deadline.
const DROP_WAIT: Duration = Duration::from_secs(300);

/// How a [`HaloExchange`](super::HaloExchange) reaches its neighbour ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HaloTransport {
    /// CUDA IPC for neighbours on the same node whose GPU this rank's GPU can reach (the same
    /// GPU or peer access), agreed pair by pair; the communicator's sends and receives for the
    /// others.
    #[default]
    Auto,
    /// The communicator's grouped sends and receives
    /// ([`DeviceCommunicator::exchange_bytes`]:
    /// NCCL's, or MPI's on the MPI device backends) for every neighbour rank.
    Comm,
}

impl HaloTransport {
    /// `auto` or `comm`.
    pub const fn name(self) -> &'static str {
        match self {
            HaloTransport::Auto => "auto",
            HaloTransport::Comm => "comm",
        }
    }
}

/// A neighbour this rank pulls from.
struct Sender {
    rank: usize,
    send: Mapping,
    send_len: usize,
    inbox: Mapping,
    /// Per chunk: the launch that reads this sender's chunk from its send buffer into the
    /// ghost cells (`None`: no message in that chunk).
    pulls: Vec<Option<FusedPacker>>,
}

/// A neighbour that pulls from this rank.
struct Receiver {
    rank: usize,
    inbox: Mapping,
    /// Whether the receiver pulls a message of this rank in each chunk.
    chunks: Vec<bool>,
}

/// The IPC side of one exchange: this rank's send buffer (exportable), its inbox of flags, the
/// mappings of its IPC neighbours' send buffers and inboxes, and the pull launches.
pub(crate) struct PeerLinks {
    ctx: Arc<CudaContext>,
    rank: usize,
    chunks: usize,
    /// Flags per writer rank: `chunks` ready flags, then one consumed flag.
    inbox: Option<DeviceAlloc>,
    send: Option<DeviceAlloc>,
    senders: Vec<Sender>,
    receivers: Vec<Receiver>,
    ipc: BTreeSet<usize>,
    epoch: u64,
    /// The streams the flags are used on, waited for (with `deadline`) when dropped.
    streams: Vec<Arc<CudaStream>>,
    deadline: Duration,
}

/// What every rank of a node tells the others, as words.
const INFO_WORDS: usize = 4 + 2 * HANDLE_WORDS;

/// Whether this rank's GPU reaches the GPU with `uuid` (the same GPU, or peer access).
fn reaches(ctx: &Arc<CudaContext>, mine: [u64; 2], uuid: [u64; 2]) -> bool {
    uuid == mine || ipc::peer_access(ctx, uuid) == Some(true)
}

impl PeerLinks {
    /// Allocate the send buffer (`send_bytes`) and agree with the other ranks of the node which
    /// neighbour pairs use IPC; map their buffers and compile the pull launches. Collective
    /// over `comm`'s ranks (it splits the node's ranks off with MPI).
    ///
    /// A pair uses IPC only when both ranks choose [`HaloTransport::Auto`], both GPUs reach each
    /// other and both support 64-bit stream memory operations; when opening any mapping fails
    /// on any rank of the node, no pair of the node uses IPC.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        comm: &impl DeviceCommunicator,
        spec: &HaloSpec,
        grid: &ProcessGrid,
        plan: &HaloPlan,
        transport: HaloTransport,
        options: &GpuOptions,
        streams: Vec<Arc<CudaStream>>,
    ) -> Result<Self> {
        let ctx = comm.context().clone();
        let (rank, size, chunks) = (comm.rank(), comm.size(), plan.chunks());
        let send = DeviceAlloc::zeroed(OP, &ctx, plan.send_bytes() as usize)?;
        let inbox = DeviceAlloc::zeroed(OP, &ctx, size * (chunks + 1) * 8)?;
        let mut links = Self {
            ctx: ctx.clone(),
            rank,
            chunks,
            inbox: Some(inbox),
            send: Some(send),
            senders: Vec::new(),
            receivers: Vec::new(),
            ipc: BTreeSet::new(),
            epoch: 0,
            streams,
            deadline: comm.deadline().unwrap_or(DROP_WAIT),
        };
        let node = comm.mpi().split_shared()?;
        let uuid = ctx.uuid().map(|u| ipc::uuid_words(&u)).unwrap_or([0, 0]);
        let memops = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)
            .unwrap_or(0)
            == 1;
        let wants = transport == HaloTransport::Auto && memops && node.size() > 1;
        let mut info = [0u64; INFO_WORDS];
        info[0] = rank as u64;
        info[1] = u64::from(wants);
        info[2..4].copy_from_slice(&uuid);
        let mut exported = true;
        if wants {
            let handles = links
                .send
                .as_ref()
                .map(|a| a.handle_words(OP))
                .zip(links.inbox.as_ref().map(|a| a.handle_words(OP)));
            match handles {
                Some((Ok(s), Ok(i))) => {
                    info[4..4 + HANDLE_WORDS].copy_from_slice(&s);
                    info[4 + HANDLE_WORDS..].copy_from_slice(&i);
                }
                _ => exported = false,
            }
        }
        info[1] &= u64::from(exported);
        let mut all = vec![0u64; INFO_WORDS * node.size()];
        node.all_gather(&info[..], &mut all[..])?;
        let nodes: Vec<&[u64]> = all.chunks(INFO_WORDS).collect();
        // Which node ranks this rank reaches, then which pairs both ends accept.
        let me = node.rank();
        let mut mask = 0u64;
        for (j, other) in nodes.iter().enumerate().take(64) {
            if j != me && info[1] == 1 && other[1] == 1 && reaches(&ctx, uuid, [other[2], other[3]])
            {
                mask |= 1 << j;
            }
        }
        let mut masks = vec![0u64; node.size()];
        node.all_gather(&[mask][..], &mut masks[..])?;
        let mut by_rank: BTreeMap<usize, &[u64]> = BTreeMap::new();
        for (j, other) in nodes.iter().enumerate().take(64) {
            if mask & (1 << j) != 0 && masks[j] & (1 << me) != 0 {
                by_rank.insert(other[0] as usize, other);
            }
        }
        let opened = links.open(spec, grid, plan, &by_rank, options);
        // Every rank of the node learns whether every rank opened its mappings.
        let failed = u64::from(opened.is_err());
        let mut any = [0u64];
        node.all_reduce(&[failed][..], &mut any[..], ReduceOp::Max)?;
        if any[0] != 0 {
            if let Err(e) = &opened {
                tracing::warn!("halo exchange: CUDA IPC between neighbours not used: {e}");
            }
            links.senders.clear();
            links.receivers.clear();
            links.ipc.clear();
        }
        node.barrier()?;
        drop(node);
        Ok(links)
    }

    fn open(
        &mut self,
        spec: &HaloSpec,
        grid: &ProcessGrid,
        plan: &HaloPlan,
        by_rank: &BTreeMap<usize, &[u64]>,
        options: &GpuOptions,
    ) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| Error::cuda(OP, e))?;
        let inbox = |words: &[u64]| Mapping::open(OP, &words[4 + HANDLE_WORDS..]);
        let peers: BTreeSet<usize> = plan
            .sends()
            .iter()
            .chain(plan.recvs())
            .map(|m| m.peer)
            .filter(|p| by_rank.contains_key(p))
            .collect();
        for &peer in &peers {
            let words = by_rank[&peer];
            let mut chunks = vec![false; self.chunks];
            for m in plan.sends().iter().filter(|m| m.peer == peer) {
                chunks[m.chunk] = true;
            }
            if chunks.iter().any(|&c| c) {
                self.receivers.push(Receiver {
                    rank: peer,
                    inbox: inbox(words)?,
                    chunks,
                });
            }
            let recvs: Vec<_> = plan.recvs().iter().filter(|m| m.peer == peer).collect();
            if !recvs.is_empty() {
                let theirs = HaloPlan::new(spec, grid, peer)?;
                let mut pulls: Vec<Option<FusedPacker>> = (0..self.chunks).map(|_| None).collect();
                for m in recvs {
                    let sent = theirs
                        .sends()
                        .iter()
                        .find(|s| s.peer == self.rank && s.chunk == m.chunk)
                        .filter(|s| s.bytes == m.bytes)
                        .ok_or_else(|| {
                            Error::invalid(
                                OP,
                                format!(
                                    "rank {peer}'s plan has no message of {} bytes for this rank in chunk {}",
                                    m.bytes, m.chunk
                                ),
                            )
                        })?;
                    let regions: Vec<Region> = plan
                        .chunk_recv_regions(m.chunk)
                        .iter()
                        .filter(|r| {
                            r.packed_offset() >= m.offset && r.packed_offset() < m.offset + m.bytes
                        })
                        .map(|r| {
                            Region::new(
                                r.plan().clone(),
                                r.packed_offset() - m.offset + sent.offset,
                            )
                        })
                        .collect();
                    pulls[m.chunk] = Some(
                        FusedPacker::with_regions(&self.ctx, regions, options)
                            .map_err(|e| pack_error(OP, e))?,
                    );
                }
                self.senders.push(Sender {
                    rank: peer,
                    send: Mapping::open(OP, &words[4..4 + HANDLE_WORDS])?,
                    send_len: (theirs.send_bytes() as usize).max(1),
                    inbox: inbox(words)?,
                    pulls,
                });
            }
            self.ipc.insert(peer);
        }
        Ok(())
    }

    /// Whether messages to and from `peer` go through IPC.
    pub(crate) fn is_ipc(&self, peer: usize) -> bool {
        self.ipc.contains(&peer)
    }

    /// The send buffer: its device address and length.
    pub(crate) fn send_buffer(&self) -> (u64, usize) {
        self.send.as_ref().map_or((0, 0), |s| (s.ptr(), s.bytes()))
    }

    /// Start the next exchange.
    pub(crate) fn begin(&mut self) {
        self.epoch += 1;
    }

    fn slot(&self, base: u64, writer: usize, k: usize) -> u64 {
        base + ((writer * (self.chunks + 1) + k) * 8) as u64
    }

    fn inbox_ptr(&self) -> u64 {
        self.inbox.as_ref().map_or(0, |i| i.ptr())
    }

    fn wait(&self, stream: &CudaStream, addr: u64, value: u64) -> Result<()> {
        // SAFETY: `addr` is an 8-byte slot of this rank's inbox (device memory that lives as
        // long as self); the stream belongs to the exchange's context.
        Error::check_cuda(OP, "cuStreamWaitValue64", unsafe {
            cu::cuStreamWaitValue64_v2(
                stream.cu_stream(),
                addr,
                value,
                cu::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as c_uint,
            )
        })
    }

    fn write(&self, stream: &CudaStream, addr: u64, value: u64) -> Result<()> {
        // SAFETY: `addr` is an 8-byte slot of a neighbour's inbox mapped into this process (it
        // lives as long as self); the default flags put a memory barrier before the write, so
        // the stream's earlier writes (a pack) or reads (a pull) are done when it lands.
        Error::check_cuda(OP, "cuStreamWriteValue64", unsafe {
            cu::cuStreamWriteValue64_v2(
                stream.cu_stream(),
                addr,
                value,
                cu::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as c_uint,
            )
        })
    }

    /// On `stream`: wait until every IPC receiver has pulled the previous exchange's bytes out
    /// of the send buffer. Enqueue before the first pack.
    pub(crate) fn wait_consumed(&self, stream: &CudaStream) -> Result<()> {
        for r in &self.receivers {
            let slot = self.slot(self.inbox_ptr(), r.rank, self.chunks);
            self.wait(stream, slot, self.epoch - 1)?;
        }
        Ok(())
    }

    /// On `stream`, after the pack of chunk `k`: tell every IPC receiver of chunk `k` that it
    /// may pull.
    pub(crate) fn signal_ready(&self, stream: &CudaStream, k: usize) -> Result<()> {
        for r in self.receivers.iter().filter(|r| r.chunks[k]) {
            self.write(stream, self.slot(r.inbox.ptr(), self.rank, k), self.epoch)?;
        }
        Ok(())
    }

    /// On `stream`: for every IPC sender of chunk `k`, wait for its ready flag, then read its
    /// packed bytes into the ghost cells of `field` (`field_bytes` bytes).
    pub(crate) fn pull(
        &self,
        stream: &CudaStream,
        k: usize,
        field: u64,
        field_bytes: usize,
    ) -> Result<()> {
        for s in &self.senders {
            let Some(p) = &s.pulls[k] else {
                continue;
            };
            self.wait(stream, self.slot(self.inbox_ptr(), s.rank, k), self.epoch)?;
            // SAFETY: the source is the sender's send buffer (`send_len` bytes, mapped for as long
            // as self lives), complete for this exchange once its ready flag arrived (waited for
            // just above) and not rewritten before this rank's consumed flag; the regions read
            // lie inside it (they are the sender's plan's offsets for this rank's message). The
            // field is the caller's, `field_bytes` bytes on this context, and the regions written
            // are this rank's ghost cells for this sender and chunk, disjoint from every other
            // launch of the exchange.
            unsafe { p.unpack_raw(stream, s.send.ptr(), s.send_len, field, field_bytes) }
                .map_err(|e| pack_error("halo_pull", e))?;
        }
        Ok(())
    }

    /// On `stream`, after every pull: tell every IPC sender that its send buffer is free.
    pub(crate) fn signal_consumed(&self, stream: &CudaStream) -> Result<()> {
        for s in &self.senders {
            self.write(
                stream,
                self.slot(s.inbox.ptr(), self.rank, self.chunks),
                self.epoch,
            )?;
        }
        Ok(())
    }

    /// Poll `done` until it says yes or the deadline passes, through the core's one waiting loop.
    fn poll(&self, mut done: impl FnMut() -> bool) -> bool {
        let polled = deadline::poll(self.deadline, || Ok::<bool, Error>(done()));
        matches!(polled, Ok(Polled::Done))
    }

    /// Whether every IPC receiver has consumed the last exchange.
    fn all_consumed(&self) -> bool {
        self.receivers.iter().all(|r| {
            let mut v = 0u64;
            let slot = self.slot(self.inbox_ptr(), r.rank, self.chunks);
            // SAFETY: reads 8 bytes of this rank's inbox into a local.
            let rc = unsafe {
                cu::cuMemcpyDtoH_v2(
                    (&mut v as *mut u64).cast(),
                    slot,
                    std::mem::size_of::<u64>(),
                )
            };
            rc == CUresult::CUDA_SUCCESS && v >= self.epoch
        })
    }
}

impl Drop for PeerLinks {
    /// Waits (up to the communicator's deadline) until this rank's launches are done and every
    /// IPC receiver has pulled the last exchange, then frees; if the wait fails, the send
    /// buffer and the inbox are leaked rather than freed under a peer that may still use them.
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        let events: Vec<_> = self
            .streams
            .iter()
            .filter_map(|s| s.record_event(None).ok())
            .collect();
        let ours = self.poll(|| events.iter().all(|e| e.try_is_complete().unwrap_or(true)));
        let theirs = ours && self.poll(|| self.all_consumed());
        if !(ours && theirs) {
            tracing::warn!(
                "halo exchange dropped before its neighbours finished with it: its send buffer and \
                 flags are leaked"
            );
            std::mem::forget(self.send.take());
            std::mem::forget(self.inbox.take());
        }
        self.senders.clear();
        self.receivers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_have_names() {
        assert_eq!(HaloTransport::default(), HaloTransport::Auto);
        assert_eq!(HaloTransport::Auto.name(), "auto");
        assert_eq!(HaloTransport::Comm.name(), "comm");
    }
}
