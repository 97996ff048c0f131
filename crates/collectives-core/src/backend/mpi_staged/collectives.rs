//! The [`Communicator`] implementation of the staged backend.
//!
//! Every method: open a tracing span; check the arguments (the host backend's rules plus buffers on
//! this communicator's device) and lease the pinned host buffers; agree in checked mode; copy the
//! inputs to the host buffers and wait; run the host backend's operation on them (an unchecked
//! communicator: the agreement was made already); copy the results back and wait. Blocking operations
//! are complete on return, their pinned buffers back in the pool. All-reduces move in chunks, the copies
//! of one chunk overlapping MPI's work on another.

use std::ffi::c_int;
use std::ops::Deref;

use cudarc::driver::{CudaEvent, CudaSlice};
use mpi::ffi;

use super::comm::MpiStagedComm;
use super::raw;
use super::request::StagedPending;
use crate::backend::cuda_common::{self, Lease};
use crate::backend::mpi_host::raw as host;
use crate::backend::mpi_host::request::Region;
use crate::checked::{Call, OpKind};
use crate::comm::{Communicator, Tag};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::{BackendKind, ReduceOp};
use crate::request::{Request, Scope};

const BACKEND: BackendKind = BackendKind::MpiStaged;

impl MpiStagedComm {
    /// The root's buffer, where this rank has one, with a pinned host buffer of its length.
    fn leased<'c, T: Element, B: Deref<Target = CudaSlice<T>>>(
        &'c self,
        op: &'static str,
        buf: Option<B>,
    ) -> Result<Option<(Lease<'c, T>, B)>> {
        buf.map(|b| Ok((self.lease::<T>(op, b.len())?, b)))
            .transpose()
    }

    /// Enqueue the copy of `range` of `src` into the same range of `host`, and an event after it.
    fn chunk_down<T: Element>(
        &self,
        op: &'static str,
        src: &CudaSlice<T>,
        host: &mut [T],
        range: std::ops::Range<usize>,
    ) -> Result<CudaEvent> {
        cuda_common::download(op, &self.stream, src, range.clone(), &mut host[range])?;
        self.stream
            .record_event(None)
            .map_err(|e| Error::cuda(op, e))
    }

    /// The all-reduce of `send` (or of `recv` in place) into `recv` in chunks: the copy of chunk
    /// `k + 1` to the host runs while MPI reduces chunk `k`, and the copy of chunk `k` back to the
    /// device while MPI reduces chunk `k + 1`.
    fn pipelined_all_reduce<T: Element>(
        &self,
        op: &'static str,
        send: Option<(&CudaSlice<T>, Lease<'_, T>)>,
        recv: &mut CudaSlice<T>,
        mut out: Lease<'_, T>,
        red: ReduceOp,
    ) -> Result<()> {
        let n = recv.len();
        if n == 0 {
            return Ok(());
        }
        let ranges = raw::chunks(n, self.chunk_bytes / std::mem::size_of::<T>());
        // The leases stay here until the stream is known to be done with them.
        let (src, mut staged_send) = match send {
            Some((s, lease)) => (Some(s), Some(lease)),
            None => (None, None),
        };
        let send = src.zip(staged_send.as_mut());
        let result = self.chunked(op, send, recv, &mut out, red, &ranges);
        if result.is_err() {
            // Copies may still be in flight to or from the pinned buffers, which go back to the pool
            // when this returns: let them finish first (the error reported is the first one).
            let _ = self.stream.synchronize();
        }
        result
    }

    fn chunked<T: Element>(
        &self,
        op: &'static str,
        send: Option<(&CudaSlice<T>, &mut Lease<'_, T>)>,
        recv: &mut CudaSlice<T>,
        out: &mut Lease<'_, T>,
        red: ReduceOp,
        ranges: &[std::ops::Range<usize>],
    ) -> Result<()> {
        let mut send = send;
        if let Some((s, _)) = &send {
            self.foreign(op, s)?;
        }
        self.foreign(op, recv)?;
        let mut events = Vec::with_capacity(ranges.len());
        for k in 0..ranges.len() {
            // Chunk k is on its way (k = 0: start it now); start chunk k + 1 before waiting for it.
            for j in [k, k + 1] {
                if j != events.len() || j >= ranges.len() {
                    continue;
                }
                let event = match &mut send {
                    Some((s, lease)) => self.chunk_down(op, s, lease.host_mut(), ranges[j].clone()),
                    None => self.chunk_down(op, recv, out.host_mut(), ranges[j].clone()),
                }?;
                events.push(event);
            }
            events[k].synchronize().map_err(|e| Error::cuda(op, e))?;
            let r = ranges[k].clone();
            match &send {
                Some((_, lease)) => self.host.all_reduce(
                    &lease.host()[r.clone()],
                    &mut out.host_mut()[r.clone()],
                    red,
                )?,
                None => self
                    .host
                    .all_reduce_in_place(&mut out.host_mut()[r.clone()], red)?,
            }
            cuda_common::upload(op, &self.stream, &out.host()[r.clone()], recv, r)?;
        }
        self.sync(op)
    }

    fn all_reduce_args<'c, T: Element>(
        &'c self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
        red: ReduceOp,
    ) -> Result<(Lease<'c, T>, Lease<'c, T>)> {
        self.args().all_reduce(op, send, recv, red)?;
        Ok((self.lease(op, send.len())?, self.lease(op, recv.len())?))
    }

    fn all_gather_args<'c, T: Element>(
        &'c self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
    ) -> Result<(Lease<'c, T>, Lease<'c, T>)> {
        self.args().all_gather(op, send, recv)?;
        Ok((self.lease(op, send.len())?, self.lease(op, recv.len())?))
    }
}

impl Communicator for MpiStagedComm {
    type Buf<T: Element> = CudaSlice<T>;

    fn backend(&self) -> BackendKind {
        BACKEND
    }

    fn rank(&self) -> usize {
        self.mpi.rank()
    }

    fn size(&self) -> usize {
        self.mpi.size()
    }

    fn checked(&self) -> bool {
        self.mpi.checked()
    }

    fn barrier(&self) -> Result<()> {
        const OP: &str = "barrier";
        let _span = tracing::trace_span!("barrier").entered();
        self.mpi.agree(Call::new(OpKind::Barrier), Ok(()))?;
        self.sync(OP)?;
        self.host.barrier()
    }

    fn broadcast<T: Element>(&self, buf: &mut CudaSlice<T>, root: usize) -> Result<()> {
        const OP: &str = "broadcast";
        let _span = tracing::trace_span!("broadcast").entered();
        let local = self
            .args()
            .broadcast(OP, buf, root)
            .and_then(|_| self.lease::<T>(OP, buf.len()));
        let mut h = self.mpi.agree(
            Call::new(OpKind::Broadcast)
                .element::<T>()
                .root(root)
                .count(buf.len()),
            local,
        )?;
        let is_root = self.mpi.rank() == root;
        if is_root {
            self.stage_in(OP, buf, h.host_mut())?;
        }
        self.host.broadcast(h.host_mut(), root)?;
        if !is_root {
            self.stage_out(OP, h.host(), buf)?;
        }
        Ok(())
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
            .args()
            .reduce(OP, send, recv, op, root)
            .and_then(|(_, recv)| Ok((self.lease::<T>(OP, send.len())?, self.leased(OP, recv)?)));
        let call = Call::new(OpKind::Reduce)
            .element::<T>()
            .reduce(op)
            .root(root)
            .count(send.len());
        let (mut hs, recv) = self.mpi.agree(call, local)?;
        self.stage_in(OP, send, hs.host_mut())?;
        match recv {
            Some((mut hr, recv)) => {
                self.host.reduce(hs.host(), Some(hr.host_mut()), op, root)?;
                self.stage_out(OP, hr.host(), recv)
            }
            None => self.host.reduce(hs.host(), None, op, root),
        }
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
        let (hs, hr) = self.mpi.agree(
            Call::new(OpKind::AllReduce)
                .element::<T>()
                .reduce(op)
                .count(send.len()),
            local,
        )?;
        self.pipelined_all_reduce(OP, Some((send, hs)), recv, hr, op)
    }

    fn all_reduce_in_place<T: Element>(&self, buf: &mut CudaSlice<T>, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce_in_place";
        let _span = tracing::trace_span!("all_reduce_in_place").entered();
        let local = self
            .args()
            .all_reduce_in_place(OP, buf, op)
            .and_then(|_| self.lease::<T>(OP, buf.len()));
        let h = self.mpi.agree(
            Call::new(OpKind::AllReduceInPlace)
                .element::<T>()
                .reduce(op)
                .count(buf.len()),
            local,
        )?;
        self.pipelined_all_reduce(OP, None, buf, h, op)
    }

    fn all_gather<T: Element>(&self, send: &CudaSlice<T>, recv: &mut CudaSlice<T>) -> Result<()> {
        const OP: &str = "all_gather";
        let _span = tracing::trace_span!("all_gather").entered();
        let local = self.all_gather_args(OP, send, recv);
        let (mut hs, mut hr) = self.mpi.agree(
            Call::new(OpKind::AllGather)
                .element::<T>()
                .count(send.len()),
            local,
        )?;
        self.stage_in(OP, send, hs.host_mut())?;
        self.host.all_gather(hs.host(), hr.host_mut())?;
        self.stage_out(OP, hr.host(), recv)
    }

    fn all_gather_v<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        counts: &[usize],
    ) -> Result<()> {
        const OP: &str = "all_gather_v";
        let _span = tracing::trace_span!("all_gather_v").entered();
        let local = self
            .args()
            .all_gather_v(OP, send, recv, counts)
            .and_then(|_| Ok((self.lease(OP, send.len())?, self.lease(OP, recv.len())?)));
        let (mut hs, mut hr) = self.mpi.agree(
            Call::new(OpKind::AllGatherV).element::<T>().counts(counts),
            local,
        )?;
        self.stage_in(OP, send, hs.host_mut())?;
        self.host.all_gather_v(hs.host(), hr.host_mut(), counts)?;
        self.stage_out(OP, hr.host(), recv)
    }

    fn gather<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: Option<&mut CudaSlice<T>>,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "gather";
        let _span = tracing::trace_span!("gather").entered();
        let local = self
            .args()
            .gather(OP, send, recv, root)
            .and_then(|(_, recv)| Ok((self.lease::<T>(OP, send.len())?, self.leased(OP, recv)?)));
        let call = Call::new(OpKind::Gather)
            .element::<T>()
            .root(root)
            .count(send.len());
        let (mut hs, recv) = self.mpi.agree(call, local)?;
        self.stage_in(OP, send, hs.host_mut())?;
        match recv {
            Some((mut hr, recv)) => {
                self.host.gather(hs.host(), Some(hr.host_mut()), root)?;
                self.stage_out(OP, hr.host(), recv)
            }
            None => self.host.gather(hs.host(), None, root),
        }
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
        let local = self
            .args()
            .gather_v(OP, send, recv, counts, root)
            .and_then(|(_, recv)| Ok((self.lease::<T>(OP, send.len())?, self.leased(OP, recv)?)));
        let call = Call::new(OpKind::GatherV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let (mut hs, recv) = self.mpi.agree(call, local)?;
        self.stage_in(OP, send, hs.host_mut())?;
        match recv {
            Some((mut hr, recv)) => {
                self.host
                    .gather_v(hs.host(), Some(hr.host_mut()), counts, root)?;
                self.stage_out(OP, hr.host(), recv)
            }
            None => self.host.gather_v(hs.host(), None, counts, root),
        }
    }

    fn scatter<T: Element>(
        &self,
        send: Option<&CudaSlice<T>>,
        recv: &mut CudaSlice<T>,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "scatter";
        let _span = tracing::trace_span!("scatter").entered();
        let local = self
            .args()
            .scatter(OP, send, recv, root)
            .and_then(|(_, send)| Ok((self.lease::<T>(OP, recv.len())?, self.leased(OP, send)?)));
        let call = Call::new(OpKind::Scatter)
            .element::<T>()
            .root(root)
            .count(recv.len());
        let (mut hr, send) = self.mpi.agree(call, local)?;
        match send {
            Some((mut hs, send)) => {
                self.stage_in(OP, send, hs.host_mut())?;
                self.host.scatter(Some(hs.host()), hr.host_mut(), root)?;
            }
            None => self.host.scatter(None, hr.host_mut(), root)?,
        }
        self.stage_out(OP, hr.host(), recv)
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
        let local = self
            .args()
            .scatter_v(OP, send, recv, counts, root)
            .and_then(|(_, send)| Ok((self.lease::<T>(OP, recv.len())?, self.leased(OP, send)?)));
        let call = Call::new(OpKind::ScatterV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let (mut hr, send) = self.mpi.agree(call, local)?;
        match send {
            Some((mut hs, send)) => {
                self.stage_in(OP, send, hs.host_mut())?;
                self.host
                    .scatter_v(Some(hs.host()), hr.host_mut(), counts, root)?;
            }
            None => self.host.scatter_v(None, hr.host_mut(), counts, root)?,
        }
        self.stage_out(OP, hr.host(), recv)
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
            .args()
            .reduce_scatter(OP, send, recv, op)
            .and_then(|_| Ok((self.lease(OP, send.len())?, self.lease(OP, recv.len())?)));
        let (mut hs, mut hr) = self.mpi.agree(
            Call::new(OpKind::ReduceScatter)
                .element::<T>()
                .reduce(op)
                .count(recv.len()),
            local,
        )?;
        self.stage_in(OP, send, hs.host_mut())?;
        self.host.reduce_scatter(hs.host(), hr.host_mut(), op)?;
        self.stage_out(OP, hr.host(), recv)
    }

    fn all_to_all<T: Element>(&self, send: &CudaSlice<T>, recv: &mut CudaSlice<T>) -> Result<()> {
        const OP: &str = "all_to_all";
        let _span = tracing::trace_span!("all_to_all").entered();
        let local = self
            .args()
            .all_to_all(OP, send, recv)
            .and_then(|_| Ok((self.lease(OP, send.len())?, self.lease(OP, recv.len())?)));
        let (mut hs, mut hr) = self.mpi.agree(
            Call::new(OpKind::AllToAll).element::<T>().count(send.len()),
            local,
        )?;
        self.stage_in(OP, send, hs.host_mut())?;
        self.host.all_to_all(hs.host(), hr.host_mut())?;
        self.stage_out(OP, hr.host(), recv)
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
            .args()
            .all_to_all_v(OP, send, send_counts, recv, recv_counts)
            .and_then(|_| Ok((self.lease(OP, send.len())?, self.lease(OP, recv.len())?)));
        let call = Call::new(OpKind::AllToAllV)
            .element::<T>()
            .all_to_all(send_counts, recv_counts);
        let (mut hs, mut hr) = self.mpi.agree(call, local)?;
        self.stage_in(OP, send, hs.host_mut())?;
        self.host
            .all_to_all_v(hs.host(), send_counts, hr.host_mut(), recv_counts)?;
        self.stage_out(OP, hr.host(), recv)
    }

    fn send<T: Element>(&self, buf: &CudaSlice<T>, dest: usize, tag: Tag) -> Result<()> {
        const OP: &str = "send";
        let _span = tracing::trace_span!("send").entered();
        self.args().point(OP, "destination", buf, dest, tag)?;
        let mut h = self.lease::<T>(OP, buf.len())?;
        self.mpi.ensure_usable(OP)?;
        self.stage_in(OP, buf, h.host_mut())?;
        self.host.send(h.host(), dest, tag)
    }

    fn recv<T: Element>(&self, buf: &mut CudaSlice<T>, source: usize, tag: Tag) -> Result<()> {
        const OP: &str = "recv";
        let _span = tracing::trace_span!("recv").entered();
        self.args().point(OP, "source", buf, source, tag)?;
        let mut h = self.lease::<T>(OP, buf.len())?;
        self.host.recv(h.host_mut(), source, tag)?;
        self.stage_out(OP, h.host(), buf)
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
        self.args().send_recv(OP, send, dest, recv, source, tag)?;
        let mut hs = self.lease::<T>(OP, send.len())?;
        let mut hr = self.lease::<T>(OP, recv.len())?;
        self.mpi.ensure_usable(OP)?;
        self.stage_in(OP, send, hs.host_mut())?;
        self.host
            .send_recv(hs.host(), dest, hr.host_mut(), source, tag)?;
        self.stage_out(OP, hr.host(), recv)
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>> {
        let _span = tracing::trace_span!("split").entered();
        self.sync("split")?;
        match self.mpi.split(color, key)? {
            Some(m) => self.derived(m).map(Some),
            None => Ok(None),
        }
    }

    fn dup(&self) -> Result<Self> {
        let _span = tracing::trace_span!("dup").entered();
        self.sync("dup")?;
        self.derived(self.mpi.dup()?)
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
        let (mut hs, mut hr) = self.mpi.agree(
            Call::new(OpKind::AllReduce)
                .element::<T>()
                .reduce(op)
                .count(send.len()),
            local,
        )?;
        let n = host::int(send.len());
        self.stage_in(OP, send, hs.host_mut())?;
        let (dt, mop, comm) = (host::datatype::<T>(), host::op(op), self.host.as_raw());
        // SAFETY: both pinned host buffers hold `n` elements of `T` and are owned by the operation in
        // flight until it completes (they travel in the pending operation the scope waits for).
        let inner = unsafe {
            self.host.start::<T, 2>(
                OP,
                [Region::send(hs.host()), Region::recv(hr.host_mut())],
                |p, r| ffi::MPI_Iallreduce(p[0], p[1], n, dt, mop, comm, r),
            )
        }?
        .average(op, hr.host_mut(), self.mpi.size());
        Ok(scope.register(Box::new(StagedPending {
            inner,
            stream: &self.stream,
            keep: vec![hs],
            back: Some((hr, recv)),
        })))
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
            .args()
            .broadcast(OP, buf, root)
            .and_then(|n| Ok((n, self.lease::<T>(OP, buf.len())?)));
        let (n, mut h) = self.mpi.agree(
            Call::new(OpKind::Broadcast)
                .element::<T>()
                .root(root)
                .count(buf.len()),
            local,
        )?;
        let is_root = self.mpi.rank() == root;
        if is_root {
            self.stage_in(OP, buf, h.host_mut())?;
        }
        let (dt, comm) = (host::datatype::<T>(), self.host.as_raw());
        // SAFETY: the pinned host buffer holds `n` elements and is owned by the operation in flight.
        let inner = unsafe {
            self.host
                .start::<T, 1>(OP, [Region::in_out(h.host_mut())], |p, r| {
                    ffi::MPI_Ibcast(p[0], n, dt, root as c_int, comm, r)
                })
        }?;
        let (keep, back) = if is_root {
            (vec![h], None)
        } else {
            (Vec::new(), Some((h, buf)))
        };
        Ok(scope.register(Box::new(StagedPending {
            inner,
            stream: &self.stream,
            keep,
            back,
        })))
    }

    fn i_all_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s CudaSlice<T>,
        recv: &'s mut CudaSlice<T>,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_gather";
        let _span = tracing::trace_span!("i_all_gather").entered();
        let local = self.all_gather_args(OP, send, recv);
        let (mut hs, mut hr) = self.mpi.agree(
            Call::new(OpKind::AllGather)
                .element::<T>()
                .count(send.len()),
            local,
        )?;
        let n = host::int(send.len());
        self.stage_in(OP, send, hs.host_mut())?;
        let (dt, comm) = (host::datatype::<T>(), self.host.as_raw());
        // SAFETY: `hs` holds `n` and `hr` `size * n` elements (checked), both owned by the operation in
        // flight until it completes.
        let inner = unsafe {
            self.host.start::<T, 2>(
                OP,
                [Region::send(hs.host()), Region::recv(hr.host_mut())],
                |p, r| ffi::MPI_Iallgather(p[0], n, dt, p[1], n, dt, comm, r),
            )
        }?;
        Ok(scope.register(Box::new(StagedPending {
            inner,
            stream: &self.stream,
            keep: vec![hs],
            back: Some((hr, recv)),
        })))
    }

    fn i_send<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s CudaSlice<T>,
        dest: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_send";
        let _span = tracing::trace_span!("i_send").entered();
        let (dest, n) = self.args().point(OP, "destination", buf, dest, tag)?;
        let mut h = self.lease::<T>(OP, buf.len())?;
        self.mpi.ensure_usable(OP)?;
        self.stage_in(OP, buf, h.host_mut())?;
        let (dt, comm) = (host::datatype::<T>(), self.host.as_raw());
        // SAFETY: the pinned host buffer holds `n` elements and is owned by the operation in flight.
        let inner = unsafe {
            self.host
                .start::<T, 1>(OP, [Region::send(h.host())], |p, r| {
                    ffi::MPI_Isend(p[0], n, dt, dest, tag, comm, r)
                })
        }?;
        Ok(scope.register(Box::new(StagedPending {
            inner,
            stream: &self.stream,
            keep: vec![h],
            back: None,
        })))
    }

    fn i_recv<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut CudaSlice<T>,
        source: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_recv";
        let _span = tracing::trace_span!("i_recv").entered();
        let (source, n) = self.args().point(OP, "source", buf, source, tag)?;
        let mut h = self.lease::<T>(OP, buf.len())?;
        // The previous contents of the device buffer are replaced: nothing to copy in. Work still
        // queued on the stream may read the buffer, so the copy back waits for it (stream order).
        let (dt, comm) = (host::datatype::<T>(), self.host.as_raw());
        // SAFETY: the pinned host buffer has room for `n` elements and is owned by the operation in
        // flight.
        let inner = unsafe {
            self.host
                .start::<T, 1>(OP, [Region::recv(h.host_mut())], |p, r| {
                    ffi::MPI_Irecv(p[0], n, dt, source, tag, comm, r)
                })
        }?;
        let expected = buf.len();
        Ok(scope.register(Box::new(StagedPending {
            inner: inner.expect(expected),
            stream: &self.stream,
            keep: Vec::new(),
            back: Some((h, buf)),
        })))
    }
}
