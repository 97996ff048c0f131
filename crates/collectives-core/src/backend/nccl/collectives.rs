//! The [`Communicator`] implementation of the NCCL backend.
//!
//! Each method: open a tracing span; check arguments (lengths, ranks, the reduce operation for the
//! element, buffers on this communicator's device); agree in checked mode (through MPI); enqueue on the
//! communicator's stream, taking device pointers through cudarc so the buffers' other streams are
//! ordered around ours; turn the result code into a `Result`. Zero-length operations enqueue nothing.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use nccl_sys as sys;

use super::comm::{NcclComm, UnevenAlgorithm};
use super::raw;
use super::request::NcclPending;
use crate::checked::{Call, OpKind};
use crate::comm::{Buffer, Communicator, Tag};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::{BackendKind, ReduceOp};
use crate::request::{Request, Scope};
use crate::rules::{CountLimit, Rules};

const BACKEND: BackendKind = BackendKind::Nccl;

impl<T: Element> Buffer<T> for CudaSlice<T> {
    fn len(&self) -> usize {
        CudaSlice::len(self)
    }
    fn device(&self) -> Option<usize> {
        Some(self.ordinal())
    }
}

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
    fn raw_stream(&self) -> sys::cudaStream_t {
        self.stream.cu_stream() as sys::cudaStream_t
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

    /// Enqueue grouped sends of `send`'s parts and receives into `recv`'s parts (counts in elements).
    fn exchange<T: Element>(
        &self,
        op: &'static str,
        send: Option<&CudaSlice<T>>,
        sends: &[Part],
        recv: Option<&mut CudaSlice<T>>,
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
        let group = self.group()?;
        for p in sends.iter().filter(|p| p.len > 0) {
            let Some((base, _)) = &s else { break };
            // SAFETY: the part lies inside `send` (offsets and lengths were checked against its
            // length); peer in range; enqueued on this communicator's stream inside a group.
            let rc = unsafe {
                send_fn(
                    cptr(base + p.offset as u64 * size),
                    p.len * lanes,
                    dt,
                    p.peer as c_int,
                    self.raw,
                    stream,
                )
            };
            if rc != sys::ncclSuccess && rc != sys::ncclInProgress {
                drop(group);
                return Err(raw::error(self.lib, self.raw, op, rc));
            }
        }
        for p in recvs.iter().filter(|p| p.len > 0) {
            let Some((base, _)) = &r else { break };
            // SAFETY: the part lies inside `recv` (checked); peer in range; enqueued in the group.
            let rc = unsafe {
                recv_fn(
                    mptr(base + p.offset as u64 * size),
                    p.len * lanes,
                    dt,
                    p.peer as c_int,
                    self.raw,
                    stream,
                )
            };
            if rc != sys::ncclSuccess && rc != sys::ncclInProgress {
                drop(group);
                return Err(raw::error(self.lib, self.raw, op, rc));
            }
        }
        group.end()
    }

    fn enqueue_all_reduce<T: Element>(
        &self,
        op: &'static str,
        send: Option<&CudaSlice<T>>,
        recv: &mut CudaSlice<T>,
        red: ReduceOp,
        n: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.ensure_live(op)?;
        let f = sys::nccl_fn!(self.lib, ncclAllReduce).map_err(raw::unavailable)?;
        let s = send.map(|b| b.device_ptr(&self.stream));
        let (r, _r) = recv.device_ptr_mut(&self.stream);
        let src = s.as_ref().map_or(r, |(p, _)| *p);
        // SAFETY: both buffers hold `n` wire values of the datatype on this communicator's device
        // (checked); `src == dst` is NCCL's in-place form; enqueued on this communicator's stream.
        let rc = unsafe {
            f(
                cptr(src),
                mptr(r),
                n,
                raw::datatype::<T>(),
                raw::redop(red),
                self.raw,
                self.raw_stream(),
            )
        };
        self.settle(op, rc)
    }

    fn all_reduce_args<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
        red: ReduceOp,
    ) -> Result<usize> {
        self.rules()
            .all_reduce::<T, _>(op, send, recv, red)
            .map(raw::wire::<T>)
    }

    fn enqueue_broadcast<T: Element>(
        &self,
        op: &'static str,
        buf: &mut CudaSlice<T>,
        root: usize,
        n: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.ensure_live(op)?;
        let f = sys::nccl_fn!(self.lib, ncclBroadcast).map_err(raw::unavailable)?;
        let (p, _g) = buf.device_ptr_mut(&self.stream);
        // SAFETY: `buf` holds `n` wire values on this device; root in range; in place.
        let rc = unsafe {
            f(
                cptr(p),
                mptr(p),
                n,
                raw::datatype::<T>(),
                root as c_int,
                self.raw,
                self.raw_stream(),
            )
        };
        self.settle(op, rc)
    }

    fn enqueue_all_gather<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        n: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.ensure_live(op)?;
        let f = sys::nccl_fn!(self.lib, ncclAllGather).map_err(raw::unavailable)?;
        let (s, _s) = send.device_ptr(&self.stream);
        let (r, _r) = recv.device_ptr_mut(&self.stream);
        // SAFETY: `send` holds `n` and `recv` `size * n` wire values on this device (checked).
        let rc = unsafe {
            f(
                cptr(s),
                mptr(r),
                n,
                raw::datatype::<T>(),
                self.raw,
                self.raw_stream(),
            )
        };
        self.settle(op, rc)
    }

    /// `all_gather_v` as one in-place broadcast per rank, grouped: rank `r` broadcasts its block
    /// straight into block `r` of every `recv` (no memory beyond the buffers).
    fn enqueue_broadcasts<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
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

    fn register<'s>(&'s self, scope: &'s Scope<'s, '_>, op: &'static str) -> Result<Request<'s>> {
        let event = self
            .stream
            .record_event(None)
            .map_err(|e| Error::cuda(op, e))?;
        Ok(scope.register(Box::new(NcclPending {
            comm: self,
            event,
            op,
            done: false,
            _buffers: PhantomData,
        })))
    }
}

impl Communicator for NcclComm {
    type Buf<T: Element> = CudaSlice<T>;

    fn backend(&self) -> BackendKind {
        BACKEND
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn checked(&self) -> bool {
        self.mpi.checked()
    }

    fn barrier(&self) -> Result<()> {
        const OP: &str = "barrier";
        let _span = tracing::trace_span!("barrier").entered();
        self.mpi.agree(Call::new(OpKind::Barrier), Ok(()))?;
        let mut one = self
            .stream
            .alloc_zeros::<f32>(1)
            .map_err(|e| Error::cuda(OP, e))?;
        self.enqueue_all_reduce(OP, None, &mut one, ReduceOp::Sum, 1)?;
        self.synchronize()
    }

    fn broadcast<T: Element>(&self, buf: &mut CudaSlice<T>, root: usize) -> Result<()> {
        const OP: &str = "broadcast";
        let _span = tracing::trace_span!("broadcast").entered();
        let local = self
            .rules()
            .broadcast::<T, _>(OP, buf, root)
            .map(raw::wire::<T>);
        let n = self.mpi.agree(
            Call::new(OpKind::Broadcast)
                .element::<T>()
                .root(root)
                .count(buf.len()),
            local,
        )?;
        self.enqueue_broadcast(OP, buf, root, n)
    }

    fn reduce<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: Option<&mut CudaSlice<T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "reduce";
        let _span = tracing::trace_span!("reduce").entered();
        let local = self
            .rules()
            .reduce::<T, _, _>(OP, send, recv, op, root)
            .map(|(n, recv)| (raw::wire::<T>(n), recv));
        let (n, recv) = self.mpi.agree(
            Call::new(OpKind::Reduce)
                .element::<T>()
                .reduce(op)
                .root(root)
                .count(send.len()),
            local,
        )?;
        if n == 0 {
            return Ok(());
        }
        self.ensure_live(OP)?;
        let f = sys::nccl_fn!(self.lib, ncclReduce).map_err(raw::unavailable)?;
        let (s, _s) = send.device_ptr(&self.stream);
        let r = recv.map(|b| b.device_ptr_mut(&self.stream));
        let dst = r.as_ref().map_or(s, |(p, _)| *p);
        // SAFETY: `send` holds `n` wire values; on the root `recv` does too (checked); elsewhere NCCL
        // ignores the receive pointer (we pass `send`'s, never written).
        let rc = unsafe {
            f(
                cptr(s),
                mptr(dst),
                n,
                raw::datatype::<T>(),
                raw::redop(op),
                root as c_int,
                self.raw,
                self.raw_stream(),
            )
        };
        self.settle(OP, rc)
    }

    fn all_reduce<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        op: ReduceOp,
    ) -> Result<()> {
        const OP: &str = "all_reduce";
        let _span = tracing::trace_span!("all_reduce").entered();
        let local = self.all_reduce_args(OP, send, recv, op);
        let n = self.mpi.agree(
            Call::new(OpKind::AllReduce)
                .element::<T>()
                .reduce(op)
                .count(send.len()),
            local,
        )?;
        self.enqueue_all_reduce(OP, Some(send), recv, op, n)
    }

    fn all_reduce_in_place<T: Element>(&self, buf: &mut CudaSlice<T>, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce_in_place";
        let _span = tracing::trace_span!("all_reduce_in_place").entered();
        let local = self
            .rules()
            .all_reduce_in_place::<T, _>(OP, buf, op)
            .map(raw::wire::<T>);
        let n = self.mpi.agree(
            Call::new(OpKind::AllReduceInPlace)
                .element::<T>()
                .reduce(op)
                .count(buf.len()),
            local,
        )?;
        self.enqueue_all_reduce(OP, None, buf, op, n)
    }

    fn all_gather<T: Element>(&self, send: &CudaSlice<T>, recv: &mut CudaSlice<T>) -> Result<()> {
        const OP: &str = "all_gather";
        let _span = tracing::trace_span!("all_gather").entered();
        let local = self
            .rules()
            .all_gather::<T, _>(OP, send, recv)
            .map(raw::wire::<T>);
        let n = self.mpi.agree(
            Call::new(OpKind::AllGather)
                .element::<T>()
                .count(send.len()),
            local,
        )?;
        self.enqueue_all_gather(OP, send, recv, n)
    }

    fn all_gather_v<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        counts: &[usize],
    ) -> Result<()> {
        const OP: &str = "all_gather_v";
        let _span = tracing::trace_span!("all_gather_v").entered();
        let local = self.rules().all_gather_v::<T, _>(OP, send, recv, counts);
        self.mpi.agree(
            Call::new(OpKind::AllGatherV).element::<T>().counts(counts),
            local,
        )?;
        let total: usize = counts.iter().sum();
        match self
            .uneven
            .choose(self.size, total * std::mem::size_of::<T>())
        {
            UnevenAlgorithm::Broadcasts => self.enqueue_broadcasts(OP, send, recv, counts),
            _ => {
                let mine = counts[self.rank];
                let sends: Vec<Part> = (0..self.size)
                    .map(|peer| Part {
                        offset: 0,
                        len: mine,
                        peer,
                    })
                    .collect();
                self.exchange(OP, Some(send), &sends, Some(recv), &packed(counts))
            }
        }
    }

    fn gather<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: Option<&mut CudaSlice<T>>,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "gather";
        let _span = tracing::trace_span!("gather").entered();
        let counts = vec![send.len(); self.size];
        let is_root = self.rank == root;
        let local = self
            .rules()
            .gather::<T, _, _>(OP, send, recv, root)
            .map(|(_, recv)| recv);
        let recv = self.mpi.agree(
            Call::new(OpKind::Gather)
                .element::<T>()
                .root(root)
                .count(send.len()),
            local,
        )?;
        let sends = [Part {
            offset: 0,
            len: send.len(),
            peer: root,
        }];
        let recvs = if is_root { packed(&counts) } else { Vec::new() };
        self.exchange(OP, Some(send), &sends, recv, &recvs)
    }

    fn gather_v<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: Option<&mut CudaSlice<T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        const OP: &str = "gather_v";
        let _span = tracing::trace_span!("gather_v").entered();
        let is_root = self.rank == root;
        let local = self
            .rules()
            .gather_v::<T, _, _>(OP, send, recv, counts, root);
        let recv = self.mpi.agree(
            Call::new(OpKind::GatherV)
                .element::<T>()
                .root(root)
                .counts(counts),
            local,
        )?;
        let sends = [Part {
            offset: 0,
            len: send.len(),
            peer: root,
        }];
        let recvs = if is_root { packed(counts) } else { Vec::new() };
        self.exchange(OP, Some(send), &sends, recv, &recvs)
    }

    fn scatter<T: Element>(
        &self,
        send: Option<&CudaSlice<T>>,
        recv: &mut CudaSlice<T>,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "scatter";
        let _span = tracing::trace_span!("scatter").entered();
        let counts = vec![recv.len(); self.size];
        let is_root = self.rank == root;
        let local = self
            .rules()
            .scatter::<T, _, _>(OP, send, recv, root)
            .map(|(_, send)| send);
        let send = self.mpi.agree(
            Call::new(OpKind::Scatter)
                .element::<T>()
                .root(root)
                .count(recv.len()),
            local,
        )?;
        let sends = if is_root { packed(&counts) } else { Vec::new() };
        let recvs = [Part {
            offset: 0,
            len: recv.len(),
            peer: root,
        }];
        self.exchange(OP, send, &sends, Some(recv), &recvs)
    }

    fn scatter_v<T: Element>(
        &self,
        send: Option<&CudaSlice<T>>,
        recv: &mut CudaSlice<T>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        const OP: &str = "scatter_v";
        let _span = tracing::trace_span!("scatter_v").entered();
        let is_root = self.rank == root;
        let local = self
            .rules()
            .scatter_v::<T, _, _>(OP, send, recv, counts, root);
        let send = self.mpi.agree(
            Call::new(OpKind::ScatterV)
                .element::<T>()
                .root(root)
                .counts(counts),
            local,
        )?;
        let sends = if is_root { packed(counts) } else { Vec::new() };
        let recvs = [Part {
            offset: 0,
            len: recv.len(),
            peer: root,
        }];
        self.exchange(OP, send, &sends, Some(recv), &recvs)
    }

    fn reduce_scatter<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        op: ReduceOp,
    ) -> Result<()> {
        const OP: &str = "reduce_scatter";
        let _span = tracing::trace_span!("reduce_scatter").entered();
        let local = self
            .rules()
            .reduce_scatter::<T, _>(OP, send, recv, op)
            .map(raw::wire::<T>);
        let n = self.mpi.agree(
            Call::new(OpKind::ReduceScatter)
                .element::<T>()
                .reduce(op)
                .count(recv.len()),
            local,
        )?;
        if n == 0 {
            return Ok(());
        }
        self.ensure_live(OP)?;
        let f = sys::nccl_fn!(self.lib, ncclReduceScatter).map_err(raw::unavailable)?;
        let (s, _s) = send.device_ptr(&self.stream);
        let (r, _r) = recv.device_ptr_mut(&self.stream);
        // SAFETY: `send` holds `size * n` and `recv` `n` wire values on this device (checked).
        let rc = unsafe {
            f(
                cptr(s),
                mptr(r),
                n,
                raw::datatype::<T>(),
                raw::redop(op),
                self.raw,
                self.raw_stream(),
            )
        };
        self.settle(OP, rc)
    }

    fn all_to_all<T: Element>(&self, send: &CudaSlice<T>, recv: &mut CudaSlice<T>) -> Result<()> {
        const OP: &str = "all_to_all";
        let _span = tracing::trace_span!("all_to_all").entered();
        let local = self.rules().all_to_all::<T, _>(OP, send, recv);
        self.mpi.agree(
            Call::new(OpKind::AllToAll).element::<T>().count(send.len()),
            local,
        )?;
        let parts = packed(&vec![send.len() / self.size; self.size]);
        self.exchange(OP, Some(send), &parts, Some(recv), &parts)
    }

    fn all_to_all_v<T: Element>(
        &self,
        send: &CudaSlice<T>,
        send_counts: &[usize],
        recv: &mut CudaSlice<T>,
        recv_counts: &[usize],
    ) -> Result<()> {
        const OP: &str = "all_to_all_v";
        let _span = tracing::trace_span!("all_to_all_v").entered();
        let local = self
            .rules()
            .all_to_all_v::<T, _>(OP, send, send_counts, recv, recv_counts);
        self.mpi.agree(
            Call::new(OpKind::AllToAllV)
                .element::<T>()
                .all_to_all(send_counts, recv_counts),
            local,
        )?;
        self.exchange(
            OP,
            Some(send),
            &packed(send_counts),
            Some(recv),
            &packed(recv_counts),
        )
    }

    fn send<T: Element>(&self, buf: &CudaSlice<T>, dest: usize, tag: Tag) -> Result<()> {
        const OP: &str = "send";
        let _span = tracing::trace_span!("send").entered();
        self.rules()
            .point::<T, _>(OP, "destination", buf, dest, tag)?;
        self.exchange(
            OP,
            Some(buf),
            &[Part {
                offset: 0,
                len: buf.len(),
                peer: dest,
            }],
            None,
            &[],
        )
    }

    fn recv<T: Element>(&self, buf: &mut CudaSlice<T>, source: usize, tag: Tag) -> Result<()> {
        const OP: &str = "recv";
        let _span = tracing::trace_span!("recv").entered();
        self.rules().point::<T, _>(OP, "source", buf, source, tag)?;
        let len = buf.len();
        self.exchange::<T>(
            OP,
            None,
            &[],
            Some(buf),
            &[Part {
                offset: 0,
                len,
                peer: source,
            }],
        )
    }

    fn send_recv<T: Element>(
        &self,
        send: &CudaSlice<T>,
        dest: usize,
        recv: &mut CudaSlice<T>,
        source: usize,
        tag: Tag,
    ) -> Result<()> {
        const OP: &str = "send_recv";
        let _span = tracing::trace_span!("send_recv").entered();
        self.rules()
            .send_recv::<T, _>(OP, send, dest, recv, source, tag)?;
        let len = recv.len();
        self.exchange(
            OP,
            Some(send),
            &[Part {
                offset: 0,
                len: send.len(),
                peer: dest,
            }],
            Some(recv),
            &[Part {
                offset: 0,
                len,
                peer: source,
            }],
        )
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>> {
        const OP: &str = "split";
        let _span = tracing::trace_span!("split").entered();
        let mpi = self.mpi.split(color, key)?;
        let c = match color {
            None => sys::NCCL_SPLIT_NOCOLOR,
            Some(c) => c as c_int, // fits: the MPI split above refused colors beyond i32::MAX
        };
        self.ensure_live(OP)?;
        let f = sys::nccl_fn!(self.lib, ncclCommSplit).map_err(raw::unavailable)?;
        let mut config = sys::config_initializer();
        config.blocking = 1;
        let mut new: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: a live (blocking) communicator and valid out-pointers that outlive the call, which
        // returns only once the split is complete; every rank calls it (collective).
        let rc = unsafe { f(self.raw, c, key, &mut new, &mut config) };
        self.settle(OP, rc)?;
        let Some(mpi) = mpi else { return Ok(None) };
        if new.is_null() {
            return Err(Error::invalid(
                OP,
                "NCCL returned no communicator for a color",
            ));
        }
        let stream = self.ctx.new_stream().map_err(|e| Error::cuda(OP, e))?;
        let comm = NcclComm {
            lib: self.lib,
            raw: new,
            init_parent: std::ptr::null_mut(),
            ctx: self.ctx.clone(),
            stream,
            rank: mpi.rank(),
            size: mpi.size(),
            mpi,
            timeout: self.timeout,
            aborted: std::cell::Cell::new(false),
            refusal: std::cell::Cell::new(super::comm::ABORTED_BY_CALL),
            uneven: self.uneven,
        };
        // NCCL and MPI order the new ranks by (key, old rank) alike; check rather than assume.
        let f = sys::nccl_fn!(self.lib, ncclCommUserRank).map_err(raw::unavailable)?;
        let mut nccl_rank: c_int = -1;
        // SAFETY: a live, initialized communicator and a valid out-pointer.
        let rc = unsafe { f(comm.raw, &mut nccl_rank) };
        if rc != sys::ncclSuccess {
            return Err(raw::error(self.lib, comm.raw, OP, rc));
        }
        if nccl_rank < 0 || nccl_rank as usize != comm.rank {
            return Err(Error::invalid(
                OP,
                format!(
                    "NCCL gave rank {nccl_rank} where MPI gave rank {}",
                    comm.rank
                ),
            ));
        }
        Ok(Some(comm))
    }

    fn dup(&self) -> Result<Self> {
        self.split(Some(0), self.rank as i32)?
            .ok_or_else(|| Error::invalid("dup", "split returned no communicator"))
    }

    fn i_all_reduce<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s CudaSlice<T>,
        recv: &'s mut CudaSlice<T>,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_reduce";
        let _span = tracing::trace_span!("i_all_reduce").entered();
        let local = self.all_reduce_args(OP, send, recv, op);
        let n = self.mpi.agree(
            Call::new(OpKind::AllReduce)
                .element::<T>()
                .reduce(op)
                .count(send.len()),
            local,
        )?;
        self.enqueue_all_reduce(OP, Some(send), recv, op, n)?;
        self.register(scope, OP)
    }

    fn i_broadcast<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut CudaSlice<T>,
        root: usize,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_broadcast";
        let _span = tracing::trace_span!("i_broadcast").entered();
        let local = self
            .rules()
            .broadcast::<T, _>(OP, buf, root)
            .map(raw::wire::<T>);
        let n = self.mpi.agree(
            Call::new(OpKind::Broadcast)
                .element::<T>()
                .root(root)
                .count(buf.len()),
            local,
        )?;
        self.enqueue_broadcast(OP, buf, root, n)?;
        self.register(scope, OP)
    }

    fn i_all_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s CudaSlice<T>,
        recv: &'s mut CudaSlice<T>,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_gather";
        let _span = tracing::trace_span!("i_all_gather").entered();
        let local = self
            .rules()
            .all_gather::<T, _>(OP, send, recv)
            .map(raw::wire::<T>);
        let n = self.mpi.agree(
            Call::new(OpKind::AllGather)
                .element::<T>()
                .count(send.len()),
            local,
        )?;
        self.enqueue_all_gather(OP, send, recv, n)?;
        self.register(scope, OP)
    }

    fn i_send<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s CudaSlice<T>,
        dest: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        self.send(buf, dest, tag)?;
        self.register(scope, "i_send")
    }

    fn i_recv<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut CudaSlice<T>,
        source: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        self.recv(buf, source, tag)?;
        self.register(scope, "i_recv")
    }
}
