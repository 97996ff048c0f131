//! The raw operations of the staged backend ([`Backend`]). The front end ([`crate::frontend`]) has
//! checked the arguments, leased the pinned host buffers ([`Backend::stage`]) and agreed on the
//! call; each operation here copies the inputs to the host buffers and waits, runs the host
//! backend's operation on them (on an unchecked communicator: the agreement was made already; it
//! also finishes `Avg` on the host copy, so `Avg` is native here), and copies the results back and
//! waits. Blocking operations
//! are complete on return, their pinned buffers back in the pool. All-reduces move in chunks, the copies
//! of one chunk overlapping MPI's work on another. Non-blocking forms copy their inputs in, start the
//! host communicator's `MPI_I*` on the pinned buffers and copy the output back once complete
//! ([`ThroughHost`], shared with the CUDA-aware backend).

use std::ffi::c_int;

use cudarc::driver::CudaEvent;
use mpi::ffi;

use super::comm::MpiStagedComm;
use super::raw;
use super::request::StagedPending;
use crate::backend::cuda_common::{self, pinned, Lease, Leases, ThroughHost};
use crate::backend::mpi_device;
use crate::backend::mpi_host::raw as host;
use crate::backend::mpi_host::request::Region;
use crate::comm::{Communicator, Tag};
use crate::element::Element;
use crate::error::{Error, Result};

use crate::backend::mpi_host::MpiComm;
use crate::frontend::{
    self, replay, run_each, start_each, Backend, Operation, PlanCall, PlanOp, Start,
};
use crate::memory::{Dev, DevMut};
use crate::op::{BackendKind, ReduceOp};
use crate::operation::{Name, Op, OpKind};
use crate::record;
use crate::record::Form;
use crate::request::{Request, Scope};
use crate::rules::Rules;
use crate::transport::Transport;

impl MpiStagedComm {
    /// The non-blocking collectives' path: pinned buffers and the host communicator.
    fn through_host(&self) -> ThroughHost<'_> {
        ThroughHost {
            host: &self.host,
            stream: &self.stream,
        }
    }

    /// Enqueue the copy of `range` of `src` into the same range of `host`, and an event after it.
    fn chunk_down<T: Element>(
        &self,
        op: &'static str,
        src: &Dev<'_, T>,
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
        send: Option<(&Dev<'_, T>, Lease<'_, T>)>,
        recv: &mut DevMut<'_, T>,
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
        send: Option<(&Dev<'_, T>, &mut Lease<'_, T>)>,
        recv: &mut DevMut<'_, T>,
        out: &mut Lease<'_, T>,
        red: ReduceOp,
        ranges: &[std::ops::Range<usize>],
    ) -> Result<()> {
        let mut send = send;
        if let Some((s, _)) = &send {
            self.foreign(op, *s)?;
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
                    Some((s, lease)) => {
                        self.chunk_down(op, *s, lease.host_mut(), ranges[j].clone())
                    }
                    None => self.chunk_down(op, recv, out.host_mut(), ranges[j].clone()),
                }?;
                events.push(event);
            }
            events[k].synchronize().map_err(|e| Error::cuda(op, e))?;
            let r = ranges[k].clone();
            match &send {
                Some((_, lease)) => {
                    let send = &lease.host()[r.clone()];
                    let recv = &mut out.host_mut()[r.clone()];
                    self.on_host(
                        Op::AllReduce {
                            send,
                            recv,
                            op: red,
                        },
                        r.len(),
                    )?
                }
                None => {
                    let buf = &mut out.host_mut()[r.clone()];
                    self.on_host(Op::AllReduceInPlace { buf, op: red }, r.len())?
                }
            }
            cuda_common::upload(op, &self.stream, &out.host()[r.clone()], recv, r)?;
        }
        self.sync(op)
    }
}

impl MpiStagedComm {
    /// Run `op` on the host communicator, on pinned host buffers that hold what the device buffers
    /// hold: the call was checked (and agreed) as the device call, so only the host backend's run
    /// of it and the finishing of `Avg` remain, and the call is recorded once, as this backend's.
    fn on_host<T: Element>(&self, op: Operation<'_, '_, MpiComm, T>, n: usize) -> Result<()> {
        let name = Name::new(op.kind(), Form::Blocking);
        frontend::execute(&self.host, name, op, n, ())
    }
}

impl Backend for MpiStagedComm {
    type Memory = crate::memory::Device;
    type Staging<'c, T: Element> = Leases<'c, T>;

    fn kind(&self) -> BackendKind {
        self.kind
    }

    fn ranks(&self) -> (usize, usize) {
        (self.mpi.rank(), self.mpi.size())
    }

    fn rules(&self) -> Rules {
        mpi_device::rules(self.kind, self.ctx.ordinal(), &self.mpi)
    }

    fn transport(&self) -> &dyn Transport {
        &self.mpi
    }

    /// The host backend finishes `Avg` on the host copy, before the copy back.
    /// Every operation goes through pinned host memory.
    fn record_path(&self, _op: OpKind, _start: Start, _bytes: usize) -> record::Path {
        record::Path::staged("staged")
    }

    fn native_avg(&self) -> bool {
        true
    }

    /// Every operation stages every buffer present on this rank.
    fn stage<T: Element>(
        &self,
        op: &'static str,
        _: Start,
        lens: [Option<usize>; 2],
    ) -> Result<Leases<'_, T>> {
        cuda_common::pin(&self.pool, op, lens)
    }

    fn raw_split(&self, op: &'static str, color: Option<i32>, key: i32) -> Result<Option<Self>> {
        self.sync(op)?;
        match self.mpi.raw_split(op, color, key)? {
            Some(m) => self.derived(m).map(Some),
            None => Ok(None),
        }
    }

    fn raw_dup(&self, op: &'static str) -> Result<Self> {
        self.sync(op)?;
        self.derived(self.mpi.raw_dup(op)?)
    }

    /// No persistent form of its own: each run of a plan replays `start`.
    fn raw_init<'s, T: Element>(
        &'s self,
        _: &'static str,
        scope: &'s Scope<'s, '_>,
        call: PlanCall<'s, Self, T>,
    ) -> Result<Box<dyn PlanOp + 's>> {
        Ok(replay(self, scope, call))
    }

    fn run<T: Element>(
        &self,
        name: Name,
        op: &mut Operation<'_, '_, Self, T>,
        n: usize,
        staging: Leases<'_, T>,
    ) -> Result<()> {
        run_each!(self, name, op, n, staging)
    }

    fn start<'s, T: Element>(
        &'s self,
        name: Name,
        scope: &'s Scope<'s, '_>,
        op: Operation<'s, '_, Self, T>,
        n: usize,
        average: bool,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        start_each!(self, name, scope, op, n, average, staging)
    }
}

/// Each operation of `run` and `start`, with its fields as arguments.
#[allow(clippy::too_many_arguments)]
impl MpiStagedComm {
    pub(super) fn raw_barrier(&self, op: &'static str) -> Result<()> {
        self.sync(op)?;
        self.on_host::<u8>(Op::Barrier, 0)
    }

    pub(super) fn raw_broadcast<T: Element>(
        &self,
        op: &'static str,
        buf: &mut DevMut<'_, T>,
        root: usize,
        n: usize,
        [h, _]: Leases<'_, T>,
    ) -> Result<()> {
        let mut h = pinned(op, h)?;
        let is_root = self.mpi.rank() == root;
        if is_root {
            self.stage_in(op, buf, h.host_mut())?;
        }
        self.on_host(
            Op::Broadcast {
                buf: h.host_mut(),
                root,
            },
            n,
        )?;
        if !is_root {
            self.stage_out(op, h.host(), buf)?;
        }
        Ok(())
    }

    pub(super) fn raw_reduce<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: Option<&mut DevMut<'_, T>>,
        red: ReduceOp,
        root: usize,
        n: usize,
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let mut hs = pinned(op, hs)?;
        self.stage_in(op, send, hs.host_mut())?;
        match recv {
            Some(recv) => {
                let mut hr = pinned(op, hr)?;
                let on_root = Some(hr.host_mut());
                self.on_host(
                    Op::Reduce {
                        send: hs.host(),
                        recv: on_root,
                        op: red,
                        root,
                    },
                    n,
                )?;
                self.stage_out(op, hr.host(), recv)
            }
            None => self.on_host(
                Op::Reduce {
                    send: hs.host(),
                    recv: None,
                    op: red,
                    root,
                },
                n,
            ),
        }
    }

    pub(super) fn raw_all_reduce<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Dev<'_, T>>,
        recv: &mut DevMut<'_, T>,
        red: ReduceOp,
        _: usize,
        [h0, h1]: Leases<'_, T>,
    ) -> Result<()> {
        match send {
            Some(send) => {
                let (hs, hr) = (pinned(op, h0)?, pinned(op, h1)?);
                self.pipelined_all_reduce(op, Some((send, hs)), recv, hr, red)
            }
            None => self.pipelined_all_reduce(op, None, recv, pinned(op, h0)?, red),
        }
    }

    pub(super) fn raw_all_gather<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: &mut DevMut<'_, T>,
        n: usize,
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let (mut hs, mut hr) = (pinned(op, hs)?, pinned(op, hr)?);
        self.stage_in(op, send, hs.host_mut())?;
        self.on_host(
            Op::AllGather {
                send: hs.host(),
                recv: hr.host_mut(),
            },
            n,
        )?;
        self.stage_out(op, hr.host(), recv)
    }

    pub(super) fn raw_all_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: &mut DevMut<'_, T>,
        counts: &[usize],
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let (mut hs, mut hr) = (pinned(op, hs)?, pinned(op, hr)?);
        self.stage_in(op, send, hs.host_mut())?;
        self.on_host(
            Op::AllGatherV {
                send: hs.host(),
                recv: hr.host_mut(),
                counts,
            },
            0,
        )?;
        self.stage_out(op, hr.host(), recv)
    }

    pub(super) fn raw_gather<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: Option<&mut DevMut<'_, T>>,
        root: usize,
        n: usize,
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let mut hs = pinned(op, hs)?;
        self.stage_in(op, send, hs.host_mut())?;
        match recv {
            Some(recv) => {
                let mut hr = pinned(op, hr)?;
                self.on_host(
                    Op::Gather {
                        send: hs.host(),
                        recv: Some(hr.host_mut()),
                        root,
                    },
                    n,
                )?;
                self.stage_out(op, hr.host(), recv)
            }
            None => self.on_host(
                Op::Gather {
                    send: hs.host(),
                    recv: None,
                    root,
                },
                n,
            ),
        }
    }

    pub(super) fn raw_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: Option<&mut DevMut<'_, T>>,
        counts: &[usize],
        root: usize,
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let mut hs = pinned(op, hs)?;
        self.stage_in(op, send, hs.host_mut())?;
        match recv {
            Some(recv) => {
                let mut hr = pinned(op, hr)?;
                let on_root = Some(hr.host_mut());
                self.on_host(
                    Op::GatherV {
                        send: hs.host(),
                        recv: on_root,
                        counts,
                        root,
                    },
                    0,
                )?;
                self.stage_out(op, hr.host(), recv)
            }
            None => self.on_host(
                Op::GatherV {
                    send: hs.host(),
                    recv: None,
                    counts,
                    root,
                },
                0,
            ),
        }
    }

    pub(super) fn raw_scatter<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Dev<'_, T>>,
        recv: &mut DevMut<'_, T>,
        root: usize,
        n: usize,
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let mut hr = pinned(op, hr)?;
        match send {
            Some(send) => {
                let mut hs = pinned(op, hs)?;
                self.stage_in(op, send, hs.host_mut())?;
                self.on_host(
                    Op::Scatter {
                        send: Some(hs.host()),
                        recv: hr.host_mut(),
                        root,
                    },
                    n,
                )?;
            }
            None => self.on_host(
                Op::Scatter {
                    send: None,
                    recv: hr.host_mut(),
                    root,
                },
                n,
            )?,
        }
        self.stage_out(op, hr.host(), recv)
    }

    pub(super) fn raw_scatter_v<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Dev<'_, T>>,
        recv: &mut DevMut<'_, T>,
        counts: &[usize],
        root: usize,
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let mut hr = pinned(op, hr)?;
        match send {
            Some(send) => {
                let mut hs = pinned(op, hs)?;
                self.stage_in(op, send, hs.host_mut())?;
                let send = Some(hs.host());
                self.on_host(
                    Op::ScatterV {
                        send,
                        recv: hr.host_mut(),
                        counts,
                        root,
                    },
                    0,
                )?;
            }
            None => self.on_host(
                Op::ScatterV {
                    send: None,
                    recv: hr.host_mut(),
                    counts,
                    root,
                },
                0,
            )?,
        }
        self.stage_out(op, hr.host(), recv)
    }

    pub(super) fn raw_reduce_scatter<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: &mut DevMut<'_, T>,
        red: ReduceOp,
        n: usize,
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let (mut hs, mut hr) = (pinned(op, hs)?, pinned(op, hr)?);
        self.stage_in(op, send, hs.host_mut())?;
        self.on_host(
            Op::ReduceScatter {
                send: hs.host(),
                recv: hr.host_mut(),
                op: red,
            },
            n,
        )?;
        self.stage_out(op, hr.host(), recv)
    }

    pub(super) fn raw_all_to_all<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: &mut DevMut<'_, T>,
        n: usize,
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let (mut hs, mut hr) = (pinned(op, hs)?, pinned(op, hr)?);
        self.stage_in(op, send, hs.host_mut())?;
        self.on_host(
            Op::AllToAll {
                send: hs.host(),
                recv: hr.host_mut(),
            },
            n,
        )?;
        self.stage_out(op, hr.host(), recv)
    }

    pub(super) fn raw_all_to_all_v<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        send_counts: &[usize],
        recv: &mut DevMut<'_, T>,
        recv_counts: &[usize],
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let (mut hs, mut hr) = (pinned(op, hs)?, pinned(op, hr)?);
        self.stage_in(op, send, hs.host_mut())?;
        let (hsend, hrecv) = (hs.host(), hr.host_mut());
        self.on_host(
            Op::AllToAllV {
                send: hsend,
                send_counts,
                recv: hrecv,
                recv_counts,
            },
            0,
        )?;
        self.stage_out(op, hr.host(), recv)
    }

    pub(super) fn raw_send<T: Element>(
        &self,
        op: &'static str,
        buf: &Dev<'_, T>,
        dest: usize,
        tag: Tag,
        n: usize,
        [h, _]: Leases<'_, T>,
    ) -> Result<()> {
        let mut h = pinned(op, h)?;
        self.mpi.ensure_usable(op)?;
        self.stage_in(op, buf, h.host_mut())?;
        self.on_host(
            Op::Send {
                buf: h.host(),
                dest,
                tag,
            },
            n,
        )
    }

    pub(super) fn raw_recv<T: Element>(
        &self,
        op: &'static str,
        buf: &mut DevMut<'_, T>,
        source: usize,
        tag: Tag,
        n: usize,
        [h, _]: Leases<'_, T>,
    ) -> Result<()> {
        let mut h = pinned(op, h)?;
        self.on_host(
            Op::Recv {
                buf: h.host_mut(),
                source,
                tag,
            },
            n,
        )?;
        self.stage_out(op, h.host(), buf)
    }

    pub(super) fn raw_send_recv<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        dest: usize,
        recv: &mut DevMut<'_, T>,
        source: usize,
        tag: Tag,
        (sn, _): (usize, usize),
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let (mut hs, mut hr) = (pinned(op, hs)?, pinned(op, hr)?);
        self.mpi.ensure_usable(op)?;
        self.stage_in(op, send, hs.host_mut())?;
        let (hsend, hrecv) = (hs.host(), hr.host_mut());
        self.on_host(
            Op::SendRecv {
                send: hsend,
                dest,
                recv: hrecv,
                source,
                tag,
            },
            sn,
        )?;
        self.stage_out(op, hr.host(), recv)
    }

    pub(super) fn raw_i_all_reduce<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: &'s mut DevMut<'s, T>,
        red: ReduceOp,
        average: bool,
        n: usize,
        [hs, hr]: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let (mut hs, mut hr) = (pinned(op, hs)?, pinned(op, hr)?);
        let n = host::int(n);
        self.stage_in(op, send, hs.host_mut())?;
        let (dt, mop, comm) = (host::datatype::<T>(), host::op(red), self.host.as_raw());
        // SAFETY: both pinned host buffers hold `n` elements of `T` and are owned by the operation in
        // flight until it completes (they travel in the pending operation the scope waits for).
        let inner = unsafe {
            self.host.start::<T, 2>(
                op,
                [Region::send(hs.host()), Region::recv(hr.host_mut())],
                |p, r| ffi::MPI_Iallreduce(p[0], p[1], n, dt, mop, comm, r),
            )
        }?
        .average(
            if average { ReduceOp::Avg } else { red },
            hr.host_mut(),
            self.mpi.size(),
        );
        Ok(scope.register(Box::new(StagedPending {
            inner,
            stream: &self.stream,
            keep: vec![hs],
            back: Some((hr, recv)),
        })))
    }

    pub(super) fn raw_i_broadcast<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut DevMut<'s, T>,
        root: usize,
        n: usize,
        [h, _]: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let mut h = pinned(op, h)?;
        let n = host::int(n);
        let is_root = self.mpi.rank() == root;
        if is_root {
            self.stage_in(op, buf, h.host_mut())?;
        }
        let (dt, comm) = (host::datatype::<T>(), self.host.as_raw());
        // SAFETY: the pinned host buffer holds `n` elements and is owned by the operation in flight.
        let inner = unsafe {
            self.host
                .start::<T, 1>(op, [Region::in_out(h.host_mut())], |p, r| {
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

    pub(super) fn raw_i_all_gather<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: &'s mut DevMut<'s, T>,
        n: usize,
        [hs, hr]: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let (mut hs, mut hr) = (pinned(op, hs)?, pinned(op, hr)?);
        let n = host::int(n);
        self.stage_in(op, send, hs.host_mut())?;
        let (dt, comm) = (host::datatype::<T>(), self.host.as_raw());
        // SAFETY: `hs` holds `n` and `hr` `size * n` elements (checked), both owned by the operation in
        // flight until it completes.
        let inner = unsafe {
            self.host.start::<T, 2>(
                op,
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

    pub(super) fn raw_i_send<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s Dev<'s, T>,
        dest: usize,
        tag: Tag,
        n: usize,
        [h, _]: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let mut h = pinned(op, h)?;
        let (n, dest) = (host::int(n), host::int(dest));
        self.mpi.ensure_usable(op)?;
        self.stage_in(op, buf, h.host_mut())?;
        let (dt, comm) = (host::datatype::<T>(), self.host.as_raw());
        // SAFETY: the pinned host buffer holds `n` elements and is owned by the operation in flight.
        let inner = unsafe {
            self.host
                .start::<T, 1>(op, [Region::send(h.host())], |p, r| {
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

    pub(super) fn raw_i_recv<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut DevMut<'s, T>,
        source: usize,
        tag: Tag,
        n: usize,
        [h, _]: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let mut h = pinned(op, h)?;
        let (n, source) = (host::int(n), host::int(source));
        // The previous contents of the device buffer are replaced: nothing to copy in. Work still
        // queued on the stream may read the buffer, so the copy back waits for it (stream order).
        let (dt, comm) = (host::datatype::<T>(), self.host.as_raw());
        // SAFETY: the pinned host buffer has room for `n` elements and is owned by the operation in
        // flight.
        let inner = unsafe {
            self.host
                .start::<T, 1>(op, [Region::recv(h.host_mut())], |p, r| {
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

    pub(super) fn raw_i_barrier<'s>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
    ) -> Result<Request<'s>> {
        Ok(scope.register(Box::new(self.through_host().barrier(op)?)))
    }

    pub(super) fn raw_i_reduce<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: Option<&'s mut DevMut<'s, T>>,
        red: ReduceOp,
        average: bool,
        root: usize,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let finish = if average { ReduceOp::Avg } else { red };
        let pending =
            self.through_host()
                .start(op, Some(send), recv, staging, finish, |s, r| {
                    // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                    // operation in flight until it completes.
                    unsafe { self.host.start_reduce::<T>(op, s, r, red, root, n) }
                })?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_all_reduce_in_place<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut DevMut<'s, T>,
        red: ReduceOp,
        average: bool,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let finish = if average { ReduceOp::Avg } else { red };
        let pending = self
            .through_host()
            .start_in_place(op, buf, staging, finish, |b| {
                // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                // operation in flight until it completes.
                unsafe { self.host.start_all_reduce_in_place::<T>(op, b, red, n) }
            })?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_reduce_scatter<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: &'s mut DevMut<'s, T>,
        red: ReduceOp,
        average: bool,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let finish = if average { ReduceOp::Avg } else { red };
        let pending =
            self.through_host()
                .start(op, Some(send), Some(recv), staging, finish, |s, r| {
                    // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                    // operation in flight until it completes.
                    unsafe { self.host.start_reduce_scatter::<T>(op, s, r, red, n) }
                })?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_all_to_all<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: &'s mut DevMut<'s, T>,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let pending = self.through_host().start(
            op,
            Some(send),
            Some(recv),
            staging,
            ReduceOp::Sum,
            |s, r| {
                // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                // operation in flight until it completes.
                unsafe { self.host.start_all_to_all::<T>(op, s, r, n) }
            },
        )?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_all_to_all_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        send_counts: &[usize],
        recv: &'s mut DevMut<'s, T>,
        recv_counts: &[usize],
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let pending = self.through_host().start(
            op,
            Some(send),
            Some(recv),
            staging,
            ReduceOp::Sum,
            |s, r| {
                // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                // operation in flight until it completes.
                unsafe {
                    self.host
                        .start_all_to_all_v::<T>(op, s, send_counts, r, recv_counts)
                }
            },
        )?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_all_gather_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: &'s mut DevMut<'s, T>,
        counts: &[usize],
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let pending = self.through_host().start(
            op,
            Some(send),
            Some(recv),
            staging,
            ReduceOp::Sum,
            |s, r| {
                // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                // operation in flight until it completes.
                unsafe { self.host.start_all_gather_v::<T>(op, s, r, counts) }
            },
        )?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_gather<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: Option<&'s mut DevMut<'s, T>>,
        root: usize,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let pending =
            self.through_host()
                .start(op, Some(send), recv, staging, ReduceOp::Sum, |s, r| {
                    // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                    // operation in flight until it completes.
                    unsafe { self.host.start_gather::<T>(op, s, r, root, n) }
                })?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_gather_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: Option<&'s mut DevMut<'s, T>>,
        counts: &[usize],
        root: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let pending =
            self.through_host()
                .start(op, Some(send), recv, staging, ReduceOp::Sum, |s, r| {
                    // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                    // operation in flight until it completes.
                    unsafe { self.host.start_gather_v::<T>(op, s, r, counts, root) }
                })?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_scatter<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Dev<'s, T>>,
        recv: &'s mut DevMut<'s, T>,
        root: usize,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let pending =
            self.through_host()
                .start(op, send, Some(recv), staging, ReduceOp::Sum, |s, r| {
                    // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                    // operation in flight until it completes.
                    unsafe { self.host.start_scatter::<T>(op, s, r, root, n) }
                })?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_scatter_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Dev<'s, T>>,
        recv: &'s mut DevMut<'s, T>,
        counts: &[usize],
        root: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let pending =
            self.through_host()
                .start(op, send, Some(recv), staging, ReduceOp::Sum, |s, r| {
                    // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                    // operation in flight until it completes.
                    unsafe { self.host.start_scatter_v::<T>(op, s, r, counts, root) }
                })?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_send_recv<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        dest: usize,
        recv: &'s mut DevMut<'s, T>,
        source: usize,
        tag: Tag,
        (sn, rn): (usize, usize),
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let pending = self.through_host().start(
            op,
            Some(send),
            Some(recv),
            staging,
            ReduceOp::Sum,
            |s, r| {
                // SAFETY: the regions are pinned host buffers sized for the checked counts, owned by the
                // operation in flight until it completes.
                unsafe {
                    self.host
                        .start_send_recv::<T>(op, (s, sn, dest), (r, rn, source), tag)
                }
            },
        )?;
        Ok(scope.register(Box::new(pending)))
    }
}
