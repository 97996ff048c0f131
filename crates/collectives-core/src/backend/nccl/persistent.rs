//! Persistent collectives on NCCL: the raw operation is captured once into a CUDA graph
//! (`cuStreamBeginCapture`/`cuStreamEndCapture` on a stream made for the capture where the
//! communicator is on the legacy default stream, which cannot be captured; else on the
//! communicator's stream; then `cuGraphInstantiate`), and each run is `cuGraphLaunch` on the
//! communicator's stream followed by an event, which
//! `wait` polls with the communicator's deadline and NCCL's asynchronous error, as for a request.
//!
//! NCCL supports the capture of its collectives, grouped calls included, from 2.9 on; with an older
//! library the plan replays the enqueue per run instead. Capture runs in
//! `CU_STREAM_CAPTURE_MODE_RELAXED`, so that NCCL may make the setup calls it needs on first use.
//!
//! Ordering against other streams: cudarc orders a buffer's users through events recorded on the
//! buffer. During the capture that tracking is switched off on the context (a wait on an event
//! recorded outside the capture would break it), and at each launch the buffers are taken through
//! cudarc as for any enqueued operation, so the launch waits for their last writers and later
//! users wait for the launch. While a plan is being made, other threads that use the same CUDA
//! context from other streams should not rely on cudarc's event tracking.

use std::sync::Arc;

use cudarc::driver::{
    result, sys as cu, CudaContext, CudaEvent, CudaSlice, CudaStream, DriverError,
};

use super::comm::NcclComm;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::frontend::{lend, Backend, BufPtr, PlanCall, PlanOp};
use crate::memory::DevMut;
use crate::op::ReduceOp;
use crate::operation::{Name, Op};
use crate::persistent::PlanPath;
use crate::record::Form;

/// The first NCCL whose collectives can be captured into CUDA graphs.
pub(super) const GRAPHS_FROM: nccl_sys::Version = nccl_sys::Version::new(2, 9, 0);

/// A collective captured into a CUDA graph.
pub(super) struct GraphPlan<'s, T: Element> {
    comm: &'s NcclComm,
    op: &'static str,
    /// `None` where nothing was captured (zero-length operations).
    graph: Option<Graph>,
    reads: Vec<BufPtr<DevMut<'s, T>>>,
    writes: Vec<BufPtr<DevMut<'s, T>>>,
    /// Recorded after the launch of the run in flight.
    event: Option<CudaEvent>,
    /// `barrier`'s one value, reduced by every run.
    _scratch: Option<CudaSlice<f32>>,
}

/// A captured graph and its executable, owned here rather than by cudarc's `CudaGraph`, which
/// would keep the capture stream (and with it cudarc's cross-stream tracking) alive for the plan's
/// life.
struct Graph {
    ctx: Arc<CudaContext>,
    graph: cu::CUgraph,
    exec: cu::CUgraphExec,
}

impl Graph {
    /// End the capture on `stream` and instantiate what it recorded (`None`: nothing was).
    fn end_capture(
        ctx: &Arc<CudaContext>,
        stream: &CudaStream,
    ) -> Result<Option<Graph>, DriverError> {
        ctx.bind_to_thread()?;
        // SAFETY: `stream` is a live stream of `ctx` on which a capture was begun.
        let graph = unsafe { result::stream::end_capture(stream.cu_stream()) }?;
        if graph.is_null() {
            return Ok(None);
        }
        // SAFETY: `graph` is the valid graph the capture just returned.
        match unsafe { result::graph::instantiate(graph, cu::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => Ok(Some(Graph {
                ctx: ctx.clone(),
                graph,
                exec,
            })),
            Err(e) => {
                // SAFETY: the graph is ours and nothing else refers to it.
                let _ = unsafe { result::graph::destroy(graph) };
                Err(e)
            }
        }
    }

    /// Launch the executable on `stream`.
    fn launch(&self, stream: &CudaStream) -> Result<(), DriverError> {
        self.ctx.bind_to_thread()?;
        // SAFETY: a live executable graph of this context and a live stream of it.
        unsafe { result::graph::launch(self.exec, stream.cu_stream()) }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the executable and the graph are ours, made once and destroyed once here;
            // launches in flight keep their own reference to the executable's work (CUDA defers
            // the destruction until they complete).
            unsafe {
                let _ = result::graph::exec_destroy(self.exec);
                let _ = result::graph::destroy(self.graph);
            }
        }
    }
}

/// Switches cudarc's event tracking off for the life of the guard, back on (if it was) after.
struct Untracked<'a>(&'a cudarc::driver::CudaContext, bool);

impl Drop for Untracked<'_> {
    fn drop(&mut self) {
        if self.1 {
            // SAFETY: tracking was on before the guard turned it off; every buffer was created with
            // it on, so turning it back on restores the state the buffers were made under.
            unsafe { self.0.enable_event_tracking() };
        }
    }
}

impl NcclComm {
    /// Capture `call` into a graph on this communicator's stream.
    ///
    /// # Errors
    /// [`Error::Unusable`] on an aborted communicator; [`Error::Cuda`] from the capture or the
    /// instantiation; [`Error::Nccl`] from the enqueued calls.
    pub(super) fn graph_plan<'s, T: Element>(
        &'s self,
        op: &'static str,
        call: &PlanCall<'s, Self, T>,
    ) -> Result<GraphPlan<'s, T>> {
        self.ensure_live(op)?;
        let mut scratch = match call.op {
            Op::Barrier => Some(
                self.stream
                    .alloc_zeros::<f32>(1)
                    .map_err(|e| Error::cuda(op, e))?,
            ),
            _ => None,
        };
        let (read, written) = call.op.buffers();
        let (reads, writes): Buffers<'s, T> = (
            read.into_iter().copied().collect(),
            written.into_iter().copied().collect(),
        );
        // Nothing of this stream's earlier work may end up in the graph, and nothing is in flight
        // on it from here on but what is captured.
        self.stream.synchronize().map_err(|e| Error::cuda(op, e))?;
        let ctx = self.stream.context().clone();
        // The legacy default stream (a communicator's default) cannot be captured: capture on a
        // stream made for the capture and dropped after it, so that the context goes back to one
        // stream (and cudarc to no event tracking) once the plan is made. The graph is launched on
        // the communicator's stream.
        let side = if self.stream.cu_stream().is_null() {
            Some(ctx.new_stream().map_err(|e| Error::cuda(op, e))?)
        } else {
            None
        };
        let capture = side.as_ref().unwrap_or(&self.stream);
        let tracking = ctx.is_event_tracking();
        // SAFETY: only this capture uses the context's tracking in this thread while it is off; the
        // buffers captured are ordered at each launch instead (see the module documentation).
        unsafe { ctx.disable_event_tracking() };
        let untracked = Untracked(&ctx, tracking);
        capture
            .begin_capture(cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(|e| Error::cuda(op, e))?;
        if side.is_some() {
            self.capturing
                .set(Some(capture.cu_stream() as nccl_sys::cudaStream_t));
        }
        let enqueued = self.enqueue_plan(op, call, scratch.as_mut());
        self.capturing.set(None);
        // The capture is ended on every path, so the stream is usable again.
        let ended = Graph::end_capture(&ctx, capture).map_err(|e| Error::cuda(op, e));
        drop(untracked);
        drop(side);
        enqueued?;
        let graph = ended?;
        Ok(GraphPlan {
            comm: self,
            op,
            graph,
            reads,
            writes,
            event: None,
            _scratch: scratch,
        })
    }

    /// Enqueue `call` as its blocking form does (without waiting for it): a barrier as an
    /// all-reduce of one word of `scratch`, every other operation through [`Backend::run`].
    fn enqueue_plan<'s, T: Element>(
        &self,
        op: &'static str,
        call: &PlanCall<'s, Self, T>,
        scratch: Option<&mut CudaSlice<f32>>,
    ) -> Result<()> {
        if let Op::Barrier = call.op {
            return match scratch {
                Some(one) => self.enqueue_all_reduce(op, None, one, ReduceOp::Sum, 1),
                None => Ok(()),
            };
        }
        // SAFETY: the plan borrows the buffers mutably for its life and nothing else uses them
        // during the capture; the references end with this call (NCCL keeps the addresses in the
        // graph, used at each launch, while the plan still borrows them).
        let mut lent = unsafe { lend::<Self, T>(call.view()) };
        self.run(Name::new(lent.kind(), Form::Init), &mut lent, call.n, ())
    }
}

/// The buffers a plan reads (and only reads) and those it writes.
type Buffers<'s, T> = (Vec<BufPtr<DevMut<'s, T>>>, Vec<BufPtr<DevMut<'s, T>>>);

impl<T: Element> PlanOp for GraphPlan<'_, T> {
    fn start(&mut self) -> Result<()> {
        let (op, stream) = (self.op, &self.comm.stream);
        self.comm.ensure_live(op)?;
        // The launch waits for the buffers' last writers on other streams, and their next users
        // wait for the launch (cudarc's events, recorded when the guards drop).
        let mut guards = Vec::with_capacity(self.reads.len() + self.writes.len());
        // SAFETY: the plan borrows the buffers mutably for its life; no run is in flight and the
        // caller cannot reach them during this call; the references end with it.
        unsafe {
            for p in &self.reads {
                guards.push(p.get().device_ptr(stream).1);
            }
            for p in &self.writes {
                guards.push(p.get_mut().device_ptr_mut(stream).1);
            }
        }
        if let Some(graph) = &self.graph {
            graph.launch(stream).map_err(|e| Error::cuda(op, e))?;
        }
        drop(guards);
        let event = stream.record_event(None).map_err(|e| Error::cuda(op, e))?;
        self.event = Some(event);
        Ok(())
    }

    fn wait(&mut self) -> Result<()> {
        let Some(event) = self.event.take() else {
            return Ok(());
        };
        let op = self.op;
        self.comm.wait_for(op, || {
            event.try_is_complete().map_err(|e| Error::cuda(op, e))
        })
    }

    fn test(&mut self) -> Result<bool> {
        let Some(event) = &self.event else {
            return Ok(true);
        };
        let complete = event
            .try_is_complete()
            .map_err(|e| Error::cuda(self.op, e))?;
        if !complete {
            self.comm.async_error(self.op)?;
            return Ok(false);
        }
        self.event = None;
        Ok(true)
    }

    fn path(&self) -> PlanPath {
        PlanPath::CudaGraph
    }
}
