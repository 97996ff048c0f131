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

use cudarc::driver::CudaEvent;

use super::comm::MpiStagedComm;
use super::raw;
use super::request::StagedPending;
use crate::backend::cuda_common::{self, pinned, Lease, Leases, ThroughHost};
use crate::backend::mpi_device;
use crate::comm::Communicator;
use crate::element::Element;
use crate::error::{Error, Result};

use crate::backend::mpi_host::MpiComm;
use crate::frontend::{self, replay, Backend, Operation, PlanCall, PlanOp, Start};
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

    /// Every operation goes through pinned host memory.
    fn record_path(&self, _op: OpKind, _start: Start, _bytes: usize) -> record::Path {
        record::Path::staged("staged")
    }

    /// The host backend finishes `Avg` on the host copy, before the copy back.
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

    /// Copy in what the operation reads, run the host backend's operation on the pinned buffers
    /// (`on_host`), copy out what it wrote; all-reduces in chunks (`pipelined_all_reduce`).
    fn run<T: Element>(
        &self,
        name: Name,
        op: &mut Operation<'_, '_, Self, T>,
        n: usize,
        [hs, hr]: Leases<'_, T>,
    ) -> Result<()> {
        let s = name.as_str();
        let shape = op.shape();
        let (read, written) = op.buffers_mut();
        let written = match (shape, written) {
            (Op::AllReduce { op: red, .. } | Op::AllReduceInPlace { op: red, .. }, Some(recv)) => {
                let send = match read {
                    Some(send) => Some((&**send, pinned(s, hs)?)),
                    None => None,
                };
                return self.pipelined_all_reduce(s, send, &mut **recv, pinned(s, hr)?, red);
            }
            (_, written) => written,
        };
        match shape.kind() {
            OpKind::Barrier => self.sync(s)?,
            OpKind::Send | OpKind::SendRecv => self.mpi.ensure_usable(s)?,
            _ => {}
        }
        let (_, writes) = shape.written_on(self.mpi.rank());
        let written_in = written.as_deref().map(|d| -> &Dev<'_, T> { &**d });
        let [hs, mut hr] =
            self.through_host()
                .stage_inputs(s, &shape, read.copied(), written_in, [hs, hr])?;
        self.on_host(
            shape.fill(
                hs.as_ref().map(|h| h.host()),
                hr.as_mut().map(|h| h.host_mut()),
            ),
            n,
        )?;
        match (hr, written) {
            (Some(h), Some(dev)) if writes => self.stage_out(s, h.host(), &mut **dev),
            _ => Ok(()),
        }
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
        if op.kind() == OpKind::Send {
            self.mpi.ensure_usable(name.as_str())?;
        }
        let pending: StagedPending<'s, T> =
            self.through_host()
                .start(name.as_str(), op, n, average, staging)?;
        Ok(scope.register(Box::new(pending)))
    }
}
