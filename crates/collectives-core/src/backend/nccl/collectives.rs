//! The raw operations of the NCCL backend ([`Backend`]): the front end ([`crate::frontend`]) has
//! checked the arguments and agreed on the call (through MPI). Each operation enqueues on the
//! communicator's stream, taking device pointers through cudarc so the buffers' other streams are
//! ordered around ours, and turns the result code into a `Result`. Zero-length operations enqueue
//! nothing. NCCL has no gather, scatter, all-to-all or uneven collectives: those are grouped sends
//! and receives (or, for `all_gather_v`, grouped broadcasts) here. Every non-blocking form enqueues
//! exactly what its blocking form enqueues and records an event after it (`track`); its request
//! is complete when the event is. `i_barrier` is an all-reduce of one value, like `barrier`, with
//! no wait for the stream.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;

use cudarc::driver::CudaSlice;
use nccl_sys as sys;

use super::comm::{GroupGuard, NcclComm, UnevenAlgorithm};
use super::persistent::GRAPHS_FROM;
use super::raw;
use super::request::NcclPending;
use crate::comm::Communicator;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::exchange::ExchangePart;
use crate::frontend::Operation;
use crate::frontend::{replay, Backend, PlanCall, PlanOp, Start};
use crate::memory::{Dev, DevMut};
use crate::op::{BackendKind, ReduceOp};
use crate::operation::{Name, Op, OpKind};
use crate::record;
use crate::request::{Request, Scope};
use crate::rules::{CountLimit, Rules};
use crate::transport::Transport;

const BACKEND: BackendKind = BackendKind::Nccl;

fn cptr(p: u64) -> *const c_void {
    p as usize as *const c_void
}

fn mptr(p: u64) -> *mut c_void {
    p as usize as *mut c_void
}

/// One point-to-point transfer inside a group: element offset, element count, peer.
#[derive(Clone, Copy)]
struct Part {
    offset: usize,
    len: usize,
    peer: usize,
}

/// Packed parts: block `i` of `counts` at the prefix-sum offset, exchanged with rank `i`.
fn packed(counts: &[usize]) -> Vec<Part> {
    let mut offset = 0;
    counts
        .iter()
        .enumerate()
        .map(|(peer, &len)| {
            let p = Part { offset, len, peer };
            offset += len;
            p
        })
        .collect()
}

impl NcclComm {
    /// [`DeviceCommunicator::exchange_bytes`](crate::DeviceCommunicator::exchange_bytes) on
    /// NCCL: one group of a send of every part of `sends` and then a receive of every part of
    /// `recvs`, in the order given, each part's bytes as `ncclUint8`, enqueued on `stream`.
    ///
    /// # Safety
    /// As the trait method's.
    pub(super) unsafe fn grouped_exchange(
        &self,
        op: &'static str,
        stream: &cudarc::driver::CudaStream,
        send: u64,
        sends: &[ExchangePart],
        recv: u64,
        recvs: &[ExchangePart],
    ) -> Result<()> {
        let send_fn = sys::nccl_fn!(self.lib, ncclSend)?;
        let recv_fn = sys::nccl_fn!(self.lib, ncclRecv)?;
        let raw_stream = stream.cu_stream() as sys::cudaStream_t;
        if sends.is_empty() && recvs.is_empty() {
            return Ok(());
        }
        let group = self.posted(op, self.group()?, sends, |p| {
            // SAFETY: the part lies inside the send buffer, the peer is a rank of the
            // communicator and the stream one of its context (the caller's promise); the
            // communicator is borrowed for the whole call.
            unsafe {
                send_fn(
                    (send + p.offset as u64) as usize as *const c_void,
                    p.len,
                    sys::ncclUint8,
                    p.peer as c_int,
                    self.raw,
                    raw_stream,
                )
            }
        })?;
        let group = self.posted(op, group, recvs, |p| {
            // SAFETY: as above, inside the receive buffer; the peer posts a send of the same
            // length (the caller's promise).
            unsafe {
                recv_fn(
                    (recv + p.offset as u64) as usize as *mut c_void,
                    p.len,
                    sys::ncclUint8,
                    p.peer as c_int,
                    self.raw,
                    raw_stream,
                )
            }
        })?;
        group.end()
    }
}

impl NcclComm {
    /// The stream the raw operations enqueue on: the communicator's, or the capture stream while a
    /// persistent plan is being captured.
    fn raw_stream(&self) -> sys::cudaStream_t {
        self.capturing
            .get()
            .unwrap_or(self.stream.cu_stream() as sys::cudaStream_t)
    }

    /// The argument rules of this communicator: NCCL counts wire values in `size_t`, and its tags
    /// (none: grouped sends and receives match in order) take any non-negative `i32`.
    fn rules(&self) -> Rules {
        Rules {
            backend: BACKEND,
            rank: self.rank,
            size: self.size,
            device: Some(self.ctx.ordinal()),
            limit: CountLimit::WireValues(usize::MAX),
            tag_ub: i32::MAX,
        }
    }

    /// Post `post(part)` for every part inside the open `group`: the first call that fails
    /// closes the group (dropped, not ended) and is the error; otherwise the group, to post more
    /// into or end.
    fn posted<'g, P>(
        &self,
        op: &'static str,
        group: GroupGuard<'g>,
        parts: impl IntoIterator<Item = P>,
        mut post: impl FnMut(P) -> sys::ncclResult_t,
    ) -> Result<GroupGuard<'g>> {
        for p in parts {
            let rc = post(p);
            if rc != sys::ncclSuccess && rc != sys::ncclInProgress {
                drop(group);
                return Err(self.error(op, rc));
            }
        }
        Ok(group)
    }

    /// Enqueue grouped sends of `send`'s parts and receives into `recv`'s parts (counts in elements).
    fn exchange<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Dev<'_, T>>,
        sends: &[Part],
        recv: Option<&mut DevMut<'_, T>>,
        recvs: &[Part],
    ) -> Result<()> {
        if sends.iter().chain(recvs).all(|p| p.len == 0) {
            return Ok(());
        }
        let lanes = T::WIRE.lanes;
        let size = std::mem::size_of::<T>() as u64;
        let dt = raw::datatype::<T>();
        let stream = self.raw_stream();
        let send_fn = sys::nccl_fn!(self.lib, ncclSend).map_err(raw::unavailable)?;
        let recv_fn = sys::nccl_fn!(self.lib, ncclRecv).map_err(raw::unavailable)?;
        let s = send.map(|b| b.device_ptr(&self.stream));
        let r = recv.map(|b| b.device_ptr_mut(&self.stream));
        let (sb, rb) = (s.as_ref().map(|(b, _)| *b), r.as_ref().map(|(b, _)| *b));
        // Parts with their buffer's address: none where the buffer is absent.
        let sends = sends
            .iter()
            .filter(|p| p.len > 0)
            .filter_map(|p| Some((sb?, p)));
        let recvs = recvs
            .iter()
            .filter(|p| p.len > 0)
            .filter_map(|p| Some((rb?, p)));
        let group = self.posted(op, self.group()?, sends, |(base, p)| {
            // SAFETY: the part lies inside `send` (offsets and lengths were checked against its
            // length); peer in range; enqueued on this communicator's stream inside a group.
            unsafe {
                send_fn(
                    cptr(base + p.offset as u64 * size),
                    p.len * lanes,
                    dt,
                    p.peer as c_int,
                    self.raw,
                    stream,
                )
            }
        })?;
        let group = self.posted(op, group, recvs, |(base, p)| {
            // SAFETY: the part lies inside `recv` (checked); peer in range; enqueued in the group.
            unsafe {
                recv_fn(
                    mptr(base + p.offset as u64 * size),
                    p.len * lanes,
                    dt,
                    p.peer as c_int,
                    self.raw,
                    stream,
                )
            }
        })?;
        group.end()
    }

    /// One element from `send` to every other rank, and one from every other rank into `recv` at
    /// the sender's rank, in one group: what connects every point-to-point channel.
    pub(super) fn exchange_with_every_peer(
        &self,
        op: &'static str,
        send: &CudaSlice<u8>,
        recv: &mut CudaSlice<u8>,
    ) -> Result<()> {
        let peers = (0..self.size).filter(|&p| p != self.rank);
        let sends: Vec<Part> = peers
            .clone()
            .map(|peer| Part {
                offset: 0,
                len: 1,
                peer,
            })
            .collect();
        let recvs: Vec<Part> = peers
            .map(|peer| Part {
                offset: peer,
                len: 1,
                peer,
            })
            .collect();
        self.exchange::<u8>(op, Some(send), &sends, Some(recv), &recvs)
    }

    pub(super) fn enqueue_all_reduce<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Dev<'_, T>>,
        recv: &mut DevMut<'_, T>,
        red: ReduceOp,
        n: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.ensure_live(op)?;
        let s = send.map(|b| b.device_ptr(&self.stream));
        let (r, _r) = recv.device_ptr_mut(&self.stream);
        let src = s.as_ref().map_or(r, |(p, _)| *p);
        let path = self.one_shot_for::<T>(n, red);
        self.one_shot.last.set(Some(path.map(drop)));
        if let Ok(path) = path {
            // SAFETY: both buffers hold `n` wire values (`n / lanes` elements) of `T` on this
            // communicator's device, which is the path's stream; the guards keep them ordered on
            // it until the launch has run; `src == r` is the in-place form, which the path takes.
            return unsafe { path.launch::<T>(src, r, n / T::WIRE.lanes, red) };
        }
        let f = sys::nccl_fn!(self.lib, ncclAllReduce).map_err(raw::unavailable)?;
        // SAFETY: both buffers hold `n` wire values of the datatype on this communicator's device
        // (checked); `src == dst` is NCCL's in-place form; enqueued on this communicator's stream.
        let rc = unsafe {
            f(
                cptr(src),
                mptr(r),
                n,
                raw::datatype::<T>(),
                raw::redop(red, self.size()),
                self.raw,
                self.raw_stream(),
            )
        };
        self.settle(op, rc)
    }

    /// Enqueue one NCCL collective of `n` wire values on the device addresses of `send` and
    /// `recv` (nothing when `n` is 0): once the communicator is known live, `find` loads the entry
    /// point and `call(f, send, recv, stream)` makes the call; an absent buffer's address is the
    /// other's (NCCL's in-place form, or a receive pointer it ignores off the root).
    fn enqueue<T: Element, F>(
        &self,
        op: &'static str,
        n: usize,
        send: Option<&Dev<'_, T>>,
        recv: Option<&mut DevMut<'_, T>>,
        find: impl FnOnce() -> Result<F>,
        call: impl FnOnce(F, u64, u64, sys::cudaStream_t) -> sys::ncclResult_t,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.ensure_live(op)?;
        let f = find()?;
        let s = send.map(|b| b.device_ptr(&self.stream));
        let r = recv.map(|b| b.device_ptr_mut(&self.stream));
        let (s_ptr, r_ptr) = (s.as_ref().map(|(p, _)| *p), r.as_ref().map(|(p, _)| *p));
        let (src, dst) = (s_ptr.or(r_ptr), r_ptr.or(s_ptr));
        let rc = call(f, src.unwrap_or(0), dst.unwrap_or(0), self.raw_stream());
        self.settle(op, rc)
    }

    /// `all_gather_v` as one in-place broadcast per rank, grouped: rank `r` broadcasts its block
    /// straight into block `r` of every `recv` (no memory beyond the buffers).
    fn enqueue_broadcasts<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: &mut DevMut<'_, T>,
        counts: &[usize],
    ) -> Result<()> {
        if counts.iter().all(|&c| c == 0) {
            return Ok(());
        }
        self.ensure_live(op)?;
        let f = sys::nccl_fn!(self.lib, ncclBroadcast).map_err(raw::unavailable)?;
        let (lanes, size) = (T::WIRE.lanes, std::mem::size_of::<T>() as u64);
        let (dt, stream) = (raw::datatype::<T>(), self.raw_stream());
        let (s, _s) = send.device_ptr(&self.stream);
        let (r, _r) = recv.device_ptr_mut(&self.stream);
        let group = self.group()?;
        for part in packed(counts).into_iter().filter(|p| p.len > 0) {
            let dst = r + part.offset as u64 * size;
            let src = if part.peer == self.rank { s } else { dst };
            // SAFETY: block `peer` of `recv` holds `counts[peer]` elements (recv's length is the sum of
            // the counts, checked) and on the root `send` holds as many; enqueued in a group on this
            // communicator's stream.
            let rc = unsafe {
                f(
                    cptr(src),
                    mptr(dst),
                    part.len * lanes,
                    dt,
                    part.peer as c_int,
                    self.raw,
                    stream,
                )
            };
            if rc != sys::ncclSuccess {
                drop(group);
                return Err(raw::error(self.lib, self.raw, op, rc));
            }
        }
        group.end()
    }

    fn track<'s>(&'s self, scope: &'s Scope<'s, '_>, op: &'static str) -> Result<Request<'s>> {
        self.track_keeping(scope, op, None)
    }

    /// [`track`](Self::track), keeping `scratch` alive until the operation completes.
    fn track_keeping<'s>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        op: &'static str,
        scratch: Option<CudaSlice<f32>>,
    ) -> Result<Request<'s>> {
        let event = self
            .stream
            .record_event(None)
            .map_err(|e| Error::cuda(op, e))?;
        Ok(scope.register(Box::new(NcclPending {
            comm: self,
            event,
            op,
            done: false,
            scratch,
            _buffers: PhantomData,
        })))
    }
}

impl Backend for NcclComm {
    type Memory = crate::memory::Device;
    type Staging<'c, T: Element> = ();

    fn kind(&self) -> BackendKind {
        BACKEND
    }

    fn ranks(&self) -> (usize, usize) {
        (self.rank, self.size)
    }

    fn rules(&self) -> Rules {
        NcclComm::rules(self)
    }

    fn transport(&self) -> &dyn Transport {
        &self.mpi
    }

    /// NCCL's own collective, except where NCCL has none: grouped sends and receives (gather,
    /// scatter, all-to-all and the v-forms), or grouped broadcasts for an `all_gather_v` where the
    /// uneven algorithm picks them; a non-blocking barrier is an all-reduce of one value.
    fn record_path(&self, op: OpKind, start: Start, bytes: usize) -> record::Path {
        let name = match op {
            OpKind::AllGatherV => match self.uneven.choose(self.size, bytes) {
                UnevenAlgorithm::Broadcasts => "broadcasts",
                _ => "grouped-p2p",
            },
            OpKind::Gather
            | OpKind::GatherV
            | OpKind::Scatter
            | OpKind::ScatterV
            | OpKind::AllToAll
            | OpKind::AllToAllV => "grouped-p2p",
            OpKind::Barrier if start != Start::Blocking => "all-reduce",
            OpKind::Barrier => "all-reduce+synchronize",
            OpKind::AllReduce | OpKind::AllReduceInPlace => self.one_shot.last_path(),
            _ => "native",
        };
        record::Path::direct(name)
    }

    /// Every operation is enqueued on the communicator's stream: the record times it there.
    fn record_stream(&self) -> record::Stream {
        Some(self.stream.clone())
    }

    /// NCCL averages itself (`ncclAvg`).
    fn native_avg(&self) -> bool {
        true
    }

    fn raw_split(&self, op: &'static str, color: Option<i32>, key: i32) -> Result<Option<Self>> {
        let mpi = self.mpi.raw_split(op, color, key)?;
        let c = color.unwrap_or(sys::NCCL_SPLIT_NOCOLOR);
        self.ensure_live(op)?;
        let f = sys::nccl_fn!(self.lib, ncclCommSplit).map_err(raw::unavailable)?;
        let mut config = sys::config_initializer();
        config.blocking = 1;
        let mut new: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: a live (blocking) communicator and valid out-pointers that outlive the call, which
        // returns only once the split is complete; every rank calls it (collective).
        let rc = unsafe { f(self.raw, c, key, &mut new, &mut config) };
        self.settle(op, rc)?;
        let Some(mpi) = mpi else { return Ok(None) };
        if new.is_null() {
            return Err(Error::invalid(
                op,
                "NCCL returned no communicator for a color",
            ));
        }
        let stream = super::comm::default_stream(&self.ctx);
        let sync_event = self.ctx.new_event(None).map_err(|e| Error::cuda(op, e))?;
        let comm = NcclComm {
            lib: self.lib,
            raw: new,
            init_parent: std::ptr::null_mut(),
            ctx: self.ctx.clone(),
            stream,
            capturing: std::cell::Cell::new(None),
            rank: mpi.rank(),
            size: mpi.size(),
            mpi,
            timeout: self.timeout,
            aborted: std::cell::Cell::new(false),
            sync_event,
            aborting: std::cell::RefCell::new(None),
            uneven: self.uneven,
            one_shot: super::one_shot::OneShotSlot::off("not set up yet"),
        };
        // NCCL and MPI order the new ranks by (key, old rank) alike; check rather than assume.
        let f = sys::nccl_fn!(self.lib, ncclCommUserRank).map_err(raw::unavailable)?;
        let mut nccl_rank: c_int = -1;
        // SAFETY: a live, initialized communicator and a valid out-pointer.
        let rc = unsafe { f(comm.raw, &mut nccl_rank) };
        if rc != sys::ncclSuccess {
            return Err(raw::error(self.lib, comm.raw, op, rc));
        }
        if nccl_rank < 0 || nccl_rank as usize != comm.rank {
            return Err(Error::invalid(
                op,
                format!(
                    "NCCL gave rank {nccl_rank} where MPI gave rank {}",
                    comm.rank
                ),
            ));
        }
        let mut comm = comm;
        comm.connect_peers(op)?;
        comm.set_up_one_shot()?;
        Ok(Some(comm))
    }

    /// A split into one color, ordered by rank.
    fn raw_dup(&self, op: &'static str) -> Result<Self> {
        self.raw_split(op, Some(0), self.rank as i32)?
            .ok_or_else(|| Error::invalid(op, "split returned no communicator"))
    }

    /// The collective captured into a CUDA graph (NCCL 2.9 and later), launched at each start;
    /// with an older NCCL, the front end's replay of the enqueue (see [`super::persistent`]).
    fn raw_init<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        call: PlanCall<'s, Self, T>,
    ) -> Result<Box<dyn PlanOp + 's>> {
        if self.lib.version() < GRAPHS_FROM {
            return Ok(replay(self, scope, call));
        }
        Ok(Box::new(self.graph_plan(op, &call)?))
    }

    /// NCCL's collective where it has one; grouped sends and receives where it has none (see
    /// the module documentation).
    fn run<T: Element>(
        &self,
        name: Name,
        op: &mut Operation<'_, '_, Self, T>,
        n: usize,
        (): (),
    ) -> Result<()> {
        let s = name.as_str();
        let (dt, wire, comm) = (raw::datatype::<T>(), raw::wire::<T>(n), self.raw);
        let each = || vec![n; self.size];
        let one = |len, peer| {
            [Part {
                offset: 0,
                len,
                peer,
            }]
        };
        match op {
            Op::Barrier => self.raw_barrier(s),
            Op::Broadcast { buf, root } => {
                let root = *root as c_int;
                let find = || sys::nccl_fn!(self.lib, ncclBroadcast).map_err(raw::unavailable);
                self.enqueue(s, wire, None, Some(&mut **buf), find, |f, p, _, st| {
                    // SAFETY: `buf` holds `n` wire values on this device; root in range; in place.
                    unsafe { f(cptr(p), mptr(p), wire, dt, root, comm, st) }
                })
            }
            Op::Reduce {
                send,
                recv,
                op: red,
                root,
            } => {
                let (red, root) = (raw::redop(*red, self.size()), *root as c_int);
                let find = || sys::nccl_fn!(self.lib, ncclReduce).map_err(raw::unavailable);
                self.enqueue(
                    s,
                    wire,
                    Some(*send),
                    recv.as_deref_mut(),
                    find,
                    |f, p, q, st| {
                        // SAFETY: `send` holds `n` wire values; on the root `recv` does too (checked);
                        // elsewhere NCCL ignores the receive pointer (we pass `send`'s, never written).
                        unsafe { f(cptr(p), mptr(q), wire, dt, red, root, comm, st) }
                    },
                )
            }
            Op::AllReduce { send, recv, op } => {
                self.enqueue_all_reduce(s, Some(*send), &mut **recv, *op, wire)
            }
            Op::AllReduceInPlace { buf, op } => {
                self.enqueue_all_reduce(s, None, &mut **buf, *op, wire)
            }
            Op::AllGather { send, recv } => {
                let find = || sys::nccl_fn!(self.lib, ncclAllGather).map_err(raw::unavailable);
                self.enqueue(
                    s,
                    wire,
                    Some(*send),
                    Some(&mut **recv),
                    find,
                    |f, p, q, st| {
                        // SAFETY: `send` holds `n` and `recv` `size * n` wire values on this device
                        // (checked).
                        unsafe { f(cptr(p), mptr(q), wire, dt, comm, st) }
                    },
                )
            }
            Op::AllGatherV { send, recv, counts } => {
                self.all_gather_v(s, *send, &mut **recv, counts)
            }
            Op::Gather { send, recv, root } => {
                self.rooted(s, Some(*send), recv.as_deref_mut(), &each(), *root, true)
            }
            Op::GatherV {
                send,
                recv,
                counts,
                root,
            } => self.rooted(s, Some(*send), recv.as_deref_mut(), counts, *root, true),
            Op::Scatter { send, recv, root } => {
                self.rooted(s, *send, Some(&mut **recv), &each(), *root, false)
            }
            Op::ScatterV {
                send,
                recv,
                counts,
                root,
            } => self.rooted(s, *send, Some(&mut **recv), counts, *root, false),
            Op::ReduceScatter { send, recv, op } => {
                let red = raw::redop(*op, self.size());
                let find = || sys::nccl_fn!(self.lib, ncclReduceScatter).map_err(raw::unavailable);
                self.enqueue(
                    s,
                    wire,
                    Some(*send),
                    Some(&mut **recv),
                    find,
                    |f, p, q, st| {
                        // SAFETY: `send` holds `size * n` and `recv` `n` wire values on this device
                        // (checked).
                        unsafe { f(cptr(p), mptr(q), wire, dt, red, comm, st) }
                    },
                )
            }
            Op::AllToAll { send, recv } => {
                let parts = packed(&vec![send.len() / self.size.max(1); self.size]);
                self.exchange(s, Some(*send), &parts, Some(&mut **recv), &parts)
            }
            Op::AllToAllV {
                send,
                send_counts,
                recv,
                recv_counts,
            } => {
                let (sends, recvs) = (packed(send_counts), packed(recv_counts));
                self.exchange(s, Some(*send), &sends, Some(&mut **recv), &recvs)
            }
            Op::Send { buf, dest, .. } => self.exchange(s, Some(*buf), &one(n, *dest), None, &[]),
            Op::Recv { buf, source, .. } => {
                self.exchange::<T>(s, None, &[], Some(&mut **buf), &one(n, *source))
            }
            Op::SendRecv {
                send,
                dest,
                recv,
                source,
                ..
            } => {
                let recvs = one(recv.len(), *source);
                self.exchange(s, Some(*send), &one(n, *dest), Some(&mut **recv), &recvs)
            }
        }
    }

    fn start<'s, T: Element>(
        &'s self,
        name: Name,
        scope: &'s Scope<'s, '_>,
        op: Operation<'s, '_, Self, T>,
        n: usize,
        average: bool,
        (): (),
    ) -> Result<Request<'s>> {
        debug_assert!(
            !average,
            "NCCL averages natively: nothing to divide at completion"
        );
        if let Op::Barrier = op {
            return self.raw_i_barrier(name.as_str(), scope);
        }
        // Stream-ordered: the non-blocking form is the blocking enqueue, then an event after it.
        let mut op = op;
        self.run(name, &mut op, n, ())?;
        self.track(scope, name.as_str())
    }
}

/// The operations `run` and `start` make of more than one call.
impl NcclComm {
    pub(super) fn raw_barrier(&self, op: &'static str) -> Result<()> {
        let mut one = self
            .stream
            .alloc_zeros::<f32>(1)
            .map_err(|e| Error::cuda(op, e))?;
        self.enqueue_all_reduce(op, None, &mut one, ReduceOp::Sum, 1)?;
        self.wait_for_stream(op)
    }

    /// Grouped broadcasts or grouped sends and receives, whichever the uneven algorithm picks.
    fn all_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: &mut DevMut<'_, T>,
        counts: &[usize],
    ) -> Result<()> {
        let total: usize = counts.iter().sum();
        match self
            .uneven
            .choose(self.size, total.saturating_mul(std::mem::size_of::<T>()))
        {
            UnevenAlgorithm::Broadcasts => self.enqueue_broadcasts(op, send, recv, counts),
            _ => {
                let mine = counts[self.rank];
                let sends: Vec<Part> = (0..self.size)
                    .map(|peer| Part {
                        offset: 0,
                        len: mine,
                        peer,
                    })
                    .collect();
                self.exchange(op, Some(send), &sends, Some(recv), &packed(counts))
            }
        }
    }

    /// A gather (`to_root`: every rank's `send` into block `i` of the root's `recv`) or a
    /// scatter (block `i` of the root's `send` into every rank's `recv`) as grouped sends and
    /// receives, block `i` holding `counts[i]` elements at its packed offset.
    fn rooted<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Dev<'_, T>>,
        recv: Option<&mut DevMut<'_, T>>,
        counts: &[usize],
        root: usize,
        to_root: bool,
    ) -> Result<()> {
        let blocks = if self.rank == root {
            packed(counts)
        } else {
            Vec::new()
        };
        let whole = |len| {
            [Part {
                offset: 0,
                len,
                peer: root,
            }]
        };
        if to_root {
            let sends = whole(send.map_or(0, |b| b.len()));
            self.exchange(op, send, &sends, recv, &blocks)
        } else {
            let recvs = whole(recv.as_ref().map_or(0, |b| b.len()));
            self.exchange(op, send, &blocks, recv, &recvs)
        }
    }

    /// An all-reduce of one value, enqueued; the request completes once every rank's is done.
    pub(super) fn raw_i_barrier<'s>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
    ) -> Result<Request<'s>> {
        let mut one = self
            .stream
            .alloc_zeros::<f32>(1)
            .map_err(|e| Error::cuda(op, e))?;
        self.enqueue_all_reduce(op, None, &mut one, ReduceOp::Sum, 1)?;
        self.track_keeping(scope, op, Some(one))
    }
}
