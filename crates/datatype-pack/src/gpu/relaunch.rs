//! Launching kernels through CUDA graphs kept for reuse, their arguments set before each launch:
//! one kernel at a time ([`GpuOptions::relaunch`](super::GpuOptions::relaunch)), or several
//! packers' launches gathered into a [`Batch`] and launched as one graph.
//!
//! A kernel gets graphs of one kernel node, instantiated on first launch and kept (up to
//! [`EXECS_KEPT`] per kernel, each holding the arguments of its last launch); a launch takes
//! the one whose node already holds its arguments and dimensions (the same buffers as a
//! launch before, as in a loop, also one alternating between a few stagings) and launches it
//! (`cuGraphLaunch`) without setting them; where none does, a new one or the least recently
//! launched one, its node's arguments set (`cuGraphExecKernelNodeSetParams`). The driver then replays a prepared launch instead of
//! building one. On an H100 (docs/logs/2026-11-27-floor) that took 1.7 µs of host time against
//! 3.7 µs for `cuLaunchKernel`, and a pack of 512 KiB launched and waited for 7.6 µs against
//! 10.1 µs. A batch's graph has one node per launch (the launches must not touch the same
//! bytes), independent or in a line of launch-order edges (see [`Batch`]), and
//! is kept per order and sequence of kernels, so that the same calls in a loop (a halo
//! exchange's unpacks) reuse it; up to [`EXECS_KEPT`] executable graphs are kept per
//! order and sequence, each holding the arguments of its last launch, so that a loop
//! alternating between a few sets of buffers (double-buffered staging) sets none.
//!
//! What it changes besides the time: launches of one executable graph run in the order they
//! were made, also across streams, so launches of one kernel on two streams that share a kept
//! graph no longer overlap. A stream being captured into a graph gets plain launches (a graph
//! launch there would nest).

use rustc_hash::FxHashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{self, CUdeviceptr, CUgraph, CUgraphExec, CUgraphNode};
use cudarc::driver::{CudaFunction, CudaStream, DriverError, LaunchConfig, PushKernelArg};

use crate::error::Result;

use super::compile::lock;
use super::driver::{drv, guard};

/// Batch graphs kept at most, over all contexts; more are made after dropping all.
const BATCH_GRAPHS_KEPT: usize = 64;

/// A graph of kernel nodes, ordered as its batch's [`Order`] says (none for a single kernel),
/// and the executable graph made from it, with what each node launches now (its parameters as
/// made or last set).
struct KernelGraph {
    graph: CUgraph,
    nodes: Vec<CUgraphNode>,
    exec: CUgraphExec,
    set: Vec<Option<NodeLaunch>>,
}

/// What a kernel node launches: the kernel, its dimensions and its two arguments. A node whose
/// parameters already are these is launched again without setting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeLaunch {
    func: usize,
    grid: [u32; 3],
    block: [u32; 3],
    src: CUdeviceptr,
    dst: CUdeviceptr,
}

impl From<&Launch> for NodeLaunch {
    fn from(l: &Launch) -> Self {
        NodeLaunch {
            func: l.func.cu_function() as usize,
            grid: l.grid,
            block: l.block,
            src: l.src,
            dst: l.dst,
        }
    }
}

// SAFETY: the handles are the driver's, valid from any thread of the process; a `KernelGraph`
// is only used under its map's mutex.
unsafe impl Send for KernelGraph {}

/// One launch: the kernel (which keeps its module loaded), its dimensions and its two
/// arguments.
struct Launch {
    func: CudaFunction,
    grid: [u32; 3],
    block: [u32; 3],
    src: CUdeviceptr,
    dst: CUdeviceptr,
}

/// The driver's node parameters of `launches`, whose argument arrays point into `addresses`
/// (which must outlive their use).
fn node_params(
    launches: &[Launch],
    addresses: &mut [[CUdeviceptr; 2]],
    args: &mut [[*mut c_void; 2]],
) -> Vec<sys::CUDA_KERNEL_NODE_PARAMS> {
    launches
        .iter()
        .zip(addresses.iter_mut())
        .zip(args.iter_mut())
        .map(|((l, a), p)| {
            *a = [l.src, l.dst];
            let [s, d] = a;
            *p = [
                (s as *mut CUdeviceptr).cast(),
                (d as *mut CUdeviceptr).cast(),
            ];
            kernel_node(&l.func, l.grid, l.block, p)
        })
        .collect()
}

/// The driver's parameters of a kernel node launching `func` with `grid` and `block`, its
/// arguments pointed at by `args` (which must outlive their use).
pub(super) fn kernel_node(
    func: &CudaFunction,
    grid: [u32; 3],
    block: [u32; 3],
    args: &mut [*mut c_void],
) -> sys::CUDA_KERNEL_NODE_PARAMS {
    sys::CUDA_KERNEL_NODE_PARAMS {
        func: func.cu_function(),
        gridDimX: grid[0],
        gridDimY: grid[1],
        gridDimZ: grid[2],
        blockDimX: block[0],
        blockDimY: block[1],
        blockDimZ: block[2],
        sharedMemBytes: 0,
        kernelParams: args.as_mut_ptr(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

impl KernelGraph {
    /// A graph of one kernel node per entry of `params`, instantiated, its nodes ordered as
    /// `order` says. Its nodes hold `launches`, which `params` describe (so its first launch
    /// sets none).
    fn new(
        params: &[sys::CUDA_KERNEL_NODE_PARAMS],
        launches: &[Launch],
        order: Order,
    ) -> std::result::Result<Self, DriverError> {
        let mut graph: CUgraph = std::ptr::null_mut();
        // SAFETY: `graph` is a valid out-pointer; flags must be 0.
        unsafe { sys::cuGraphCreate(&mut graph, 0) }.result()?;
        let mut g = KernelGraph {
            graph,
            nodes: Vec::with_capacity(params.len()),
            exec: std::ptr::null_mut(),
            set: launches.iter().map(|l| Some(NodeLaunch::from(l))).collect(),
        };
        for p in params {
            let mut node: CUgraphNode = std::ptr::null_mut();
            // SAFETY: `g.graph` is live; the node has no dependencies (edges come below); `p`
            // and the arguments it points at are valid for the call, which copies them. On an
            // error `g` is dropped, which destroys the graph.
            unsafe { sys::cuGraphAddKernelNode_v2(&mut node, g.graph, std::ptr::null(), 0, p) }
                .result()?;
            g.nodes.push(node);
        }
        if order == Order::Launches {
            // Each node launched once every block of the one before has begun: an edge of the
            // launch order (a programmatic dependency from its launch-order port), which does
            // not wait for the kernel before to finish.
            let edge = sys::CUgraphEdgeData {
                from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER as u8,
                to_port: 0,
                type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
                reserved: [0; 5],
            };
            for pair in g.nodes.windows(2) {
                // SAFETY: both nodes are `g.graph`'s; one edge, described by `edge`, which the
                // call copies.
                unsafe { sys::cuGraphAddDependencies_v2(g.graph, &pair[0], &pair[1], &edge, 1) }
                    .result()?;
            }
        }
        // SAFETY: `g.graph` holds the nodes; `g.exec` is a valid out-pointer.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut g.exec, g.graph, 0) }.result()?;
        Ok(g)
    }

    /// Sets the parameters of every node whose launch differs from `launches` (same kernels,
    /// new dimensions or arguments; a node launching the same as last time keeps its
    /// parameters, which saves the driver call) and launches the graph on `stream`.
    ///
    /// # Safety
    /// `params` are those the graph was made with but for dimensions and arguments, one per
    /// node, and `launches` what they describe; the launch is sound; `stream` is live and not
    /// capturing.
    unsafe fn launch(
        &mut self,
        params: &[sys::CUDA_KERNEL_NODE_PARAMS],
        launches: &[Launch],
        stream: &CudaStream,
    ) -> std::result::Result<(), DriverError> {
        let mut set_now = 0;
        for (((&node, p), l), set) in self
            .nodes
            .iter()
            .zip(params)
            .zip(launches)
            .zip(self.set.iter_mut())
        {
            let now = NodeLaunch::from(l);
            if *set == Some(now) {
                continue;
            }
            *set = None;
            // SAFETY: the executable graph is live and `node` is its node for this kernel;
            // `p` and its arguments live through the call, which copies them.
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.exec, node, p) }.result()?;
            *set = Some(now);
            set_now += 1;
        }
        COUNTS.nodes_set.fetch_add(set_now, Ordering::Relaxed);
        // SAFETY: the executable graph is live and every node holds its launch's parameters
        // (set above, or held already); the caller's contract for the stream.
        unsafe { sys::cuGraphLaunch(self.exec, stream.cu_stream()) }.result()
    }
}

impl Drop for KernelGraph {
    fn drop(&mut self) {
        // SAFETY: the handles were made by `KernelGraph::new` and are destroyed once, here (a
        // null `exec` was never instantiated); launches already queued keep what they need
        // (the driver releases an executable graph in flight when it completes).
        unsafe {
            if !self.exec.is_null() {
                sys::cuGraphExecDestroy(self.exec);
            }
            sys::cuGraphDestroy(self.graph);
        }
    }
}

/// Whether `stream` may take a graph launch: not being captured (and the driver can say so).
/// The legacy default stream (the null handle) never is: the driver refuses to capture it,
/// and where another stream captures in a mode that forbids work on it, a direct launch fails
/// as the graph's would; it is not asked (a driver call saved on every launch).
pub(super) fn launchable(stream: &CudaStream) -> bool {
    stream.cu_stream().is_null()
        || matches!(
            stream.capture_status(),
            Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
        )
}

/// The one-node graphs of a launcher's kernels, keyed by kernel: up to [`EXECS_KEPT`]
/// executable graphs per kernel, each holding the arguments of its last launch (so a loop
/// alternating between a few buffers, a send packing into one of two stagings, sets none),
/// made on first launch and destroyed with the launcher (before its kernels' modules are
/// unloaded).
#[derive(Default)]
pub(super) struct Graphs {
    map: Mutex<FxHashMap<usize, Vec<(KernelGraph, u64)>>>,
}

impl Graphs {
    /// Launches `func` on `stream` with `grid`, `block` and the arguments `(src, dst)` through
    /// one of its graphs (the parameters made as a batch's, [`node_params`]): one that holds
    /// them already where there is one, else a new one while fewer than [`EXECS_KEPT`] are
    /// kept, else the least recently launched one, its node set again. Returns `Ok(false)`,
    /// launching nothing, when the stream is being captured (or the driver cannot say), for
    /// the caller to launch the kernel directly.
    ///
    /// # Safety
    /// `func` is a kernel of the stream's context taking `(const unsigned char*, unsigned
    /// char*)` whose launch with these dimensions and addresses is sound (the caller's
    /// launch contract); it stays loaded as long as this `Graphs` lives.
    pub(super) unsafe fn launch(
        &self,
        stream: &CudaStream,
        func: &CudaFunction,
        grid: [u32; 3],
        block: [u32; 3],
        (src, dst): (CUdeviceptr, CUdeviceptr),
    ) -> std::result::Result<bool, DriverError> {
        if !launchable(stream) {
            return Ok(false);
        }
        stream.context().bind_to_thread()?;
        let one = [Launch {
            func: func.clone(),
            grid,
            block,
            src,
            dst,
        }];
        let (mut addresses, mut args) = ([[0; 2]], [[std::ptr::null_mut(); 2]]);
        let params = node_params(&one, &mut addresses, &mut args);
        let mut map = lock(&self.map);
        let execs = map.entry(func.cu_function() as usize).or_default();
        let picked = pick(
            execs.iter().map(|(k, t)| (k.set.as_slice(), *t)),
            &[NodeLaunch::from(&one[0])],
            EXECS_KEPT,
        );
        let at = match picked {
            Pick::Holds(i) | Pick::Reset(i) => i,
            Pick::New => {
                execs.push((KernelGraph::new(&params, &one, Order::Free)?, 0));
                execs.len() - 1
            }
        };
        let (graph, last) = &mut execs[at];
        *last = next_tick();
        // SAFETY: the graph's one node launches `func` (a new one was just made with these
        // parameters); the caller's contract for the launch; the stream is not capturing.
        unsafe { graph.launch(&params, &one, stream) }?;
        COUNTS.single.fetch_add(1, Ordering::Relaxed);
        if matches!(picked, Pick::Holds(_)) {
            COUNTS.single_held.fetch_add(1, Ordering::Relaxed);
        }
        Ok(true)
    }
}

/// Executable graphs kept per kernel (single launches) and per order and sequence of kernels
/// (batches), each holding the arguments of its last launch: a loop that alternates between a
/// few sets of buffers (double-buffered staging, a persistent request's few loans) finds one
/// that holds its arguments already.
const EXECS_KEPT: usize = 4;

/// A batch's executable graphs (up to [`EXECS_KEPT`]), each with the tick of its last
/// launch, and the kernels their nodes launch (kept loaded with them).
struct BatchGraph {
    execs: Vec<(KernelGraph, u64)>,
    _funcs: Vec<CudaFunction>,
}

/// Which executable graph of a batch launches `want`.
#[derive(Debug, PartialEq, Eq)]
enum Pick {
    /// This one holds these launches already: launched as it is.
    Holds(usize),
    /// None does and there is room: a new one.
    New,
    /// None does: the least recently launched one, its nodes set again.
    Reset(usize),
}

/// Picks among graphs given by what their nodes launch now and their last launch's tick.
fn pick<'a>(
    execs: impl Iterator<Item = (&'a [Option<NodeLaunch>], u64)>,
    want: &[NodeLaunch],
    room: usize,
) -> Pick {
    let mut oldest: Option<(usize, u64)> = None;
    let mut n = 0;
    for (i, (set, tick)) in execs.enumerate() {
        n += 1;
        if set.len() == want.len() && set.iter().zip(want).all(|(s, w)| *s == Some(*w)) {
            return Pick::Holds(i);
        }
        if oldest.map_or(true, |(_, t)| tick < t) {
            oldest = Some((i, tick));
        }
    }
    match oldest {
        Some((i, _)) if n >= room => Pick::Reset(i),
        _ => Pick::New,
    }
}

/// How the graph launches of this process went, for profiles: batches launched and whether a
/// kept executable graph held their arguments, one-kernel graph launches (launches that
/// succeeded), and the nodes whose parameters had to be set (`cuGraphExecKernelNodeSetParams`,
/// a cost a loop over the same buffers avoids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphCounts {
    /// Batches launched as one graph ([`Batch::launch`]).
    pub batches: u64,
    /// Of those, launched on a kept graph whose nodes held their arguments already.
    pub held: u64,
    /// Of those, launched on the least recently used kept graph, some nodes set again.
    pub reset: u64,
    /// Of those, launched on a graph made for them.
    pub made: u64,
    /// Single kernels launched through their one-node graph.
    pub single: u64,
    /// Of those, launched on a kept graph whose node held their arguments already.
    pub single_held: u64,
    /// Nodes whose parameters were set before a launch, over both kinds.
    pub nodes_set: u64,
}

/// The counters behind [`graph_counts`].
struct Counters {
    batches: AtomicU64,
    held: AtomicU64,
    reset: AtomicU64,
    made: AtomicU64,
    single: AtomicU64,
    single_held: AtomicU64,
    nodes_set: AtomicU64,
}

static COUNTS: Counters = Counters {
    batches: AtomicU64::new(0),
    held: AtomicU64::new(0),
    reset: AtomicU64::new(0),
    made: AtomicU64::new(0),
    single: AtomicU64::new(0),
    single_held: AtomicU64::new(0),
    nodes_set: AtomicU64::new(0),
};

/// The graph launches of this process so far ([`GraphCounts`]).
pub fn graph_counts() -> GraphCounts {
    let c = &COUNTS;
    GraphCounts {
        batches: c.batches.load(Ordering::Relaxed),
        held: c.held.load(Ordering::Relaxed),
        reset: c.reset.load(Ordering::Relaxed),
        made: c.made.load(Ordering::Relaxed),
        single: c.single.load(Ordering::Relaxed),
        single_held: c.single_held.load(Ordering::Relaxed),
        nodes_set: c.nodes_set.load(Ordering::Relaxed),
    }
}

/// A count of graph launches, telling the least recently launched graph.
fn next_tick() -> u64 {
    static TICK: AtomicU64 = AtomicU64::new(0);
    TICK.fetch_add(1, Ordering::Relaxed) + 1
}

/// What a batch graph is kept by: how its nodes are ordered, and its kernels in order.
type BatchKey = (Order, Vec<usize>);

/// How the kernels of a batch are ordered in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Order {
    /// Independent nodes ([`Batch::new`]).
    Free,
    /// Each node launched once every block of the one before has begun
    /// ([`Batch::in_launch_order`]).
    Launches,
}

/// The first driver with launch-order edges (`cuGraphAddDependencies_v2`): CUDA 12.3, as
/// `cuDriverGetVersion` writes it.
const LAUNCH_ORDER_DRIVER: i32 = 12030;

/// Whether a driver of this version (`cuDriverGetVersion`'s number) has launch-order edges.
fn has_launch_order(driver_version: i32) -> bool {
    driver_version >= LAUNCH_ORDER_DRIVER
}

/// Set once the driver refused launch-order edges: later batches asked for launch order get
/// independent nodes without asking again.
static LAUNCH_ORDER_REFUSED: AtomicBool = AtomicBool::new(false);

/// The order a batch asked for `order` gets: launch order only where the driver has it (CUDA
/// 12.3 or later, asked once per process; an older driver lacks the function, which the
/// bindings would panic on) and has not refused it; else independent nodes.
fn usable(order: Order) -> Order {
    static DRIVER_HAS_IT: OnceLock<bool> = OnceLock::new();
    if order != Order::Launches || LAUNCH_ORDER_REFUSED.load(Ordering::Relaxed) {
        return Order::Free;
    }
    let has = *DRIVER_HAS_IT.get_or_init(|| {
        const OP: &str = "cuDriverGetVersion";
        let version = guard(OP, || {
            let mut v = 0;
            // SAFETY: `v` is a valid out-pointer; `cuDriverGetVersion` may be called before
            // `cuInit` and is in every driver (a library that does not load panics, which
            // `guard` turns into an error).
            unsafe { sys::cuDriverGetVersion(&mut v) }
                .result()
                .map_err(drv(OP))?;
            Ok(v)
        });
        version.is_ok_and(has_launch_order)
    });
    if has {
        Order::Launches
    } else {
        Order::Free
    }
}

/// The batch graphs, by [`BatchKey`].
fn batch_graphs() -> &'static Mutex<FxHashMap<BatchKey, BatchGraph>> {
    static G: OnceLock<Mutex<FxHashMap<BatchKey, BatchGraph>>> = OnceLock::new();
    G.get_or_init(|| Mutex::new(FxHashMap::default()))
}

/// Kernel launches of one or more packers on one stream, gathered by
/// [`Packer::record_pack_raw`](super::Packer::record_pack_raw) and
/// [`Packer::record_unpack_raw`](super::Packer::record_unpack_raw) (checked there), then
/// launched together by [`Batch::launch`]: one graph launch for all of them, the graph kept
/// for the next batch of the same kernels. The launches may run at the same time and in any
/// order, so they must not touch the same bytes (receive buffers of distinct receives, say).
///
/// The driver spreads a graph's independent nodes over internal streams and joins them, which
/// costs host time on every launch; a straight line of nodes launches as one stream's work (on
/// an H100 host of the same kind, four nodes in about 3-4 µs against about 7-8 µs,
/// docs/logs/2026-11-27-lean runs 32-33), but with plain edges its kernels run one at a time
/// (four unpacks from a peer's memory waited for in 15 µs against 2, run 35). A batch made by
/// [`Batch::in_launch_order`] is a straight line whose edges only order the launches (each
/// kernel starts once every block of the one before has begun): its kernels still run
/// together, and it launches as cheaply as a line (3.1-3.4 µs for those four unpacks, run 37).
pub struct Batch {
    stream: Arc<CudaStream>,
    launches: Vec<Launch>,
    order: Order,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("launches", &self.launches.len())
            .field("order", &self.order)
            .finish_non_exhaustive()
    }
}

impl Batch {
    /// An empty batch for `stream`, its kernels free to run at the same time.
    pub fn new(stream: &Arc<CudaStream>) -> Self {
        Batch {
            stream: stream.clone(),
            launches: Vec::new(),
            order: Order::Free,
        }
    }

    /// An empty batch for `stream` whose kernels are launched one after another, in the order
    /// recorded, each once every thread block of the one before has begun (a straight line of
    /// launch-order edges, `CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER`): they run together, as
    /// [`Batch::new`]'s do, and the graph launches as one stream's work (see [`Batch`]). Such
    /// edges let kernels overlap on GPUs of compute capability 9.0 or later; before, the
    /// kernels may run one after another.
    /// They need a driver of CUDA 12.3 or later (`cuGraphAddDependencies_v2`): under an
    /// older driver (asked once per process), or once the driver has returned an error for
    /// them, the batch's graph has independent nodes.
    pub fn in_launch_order(stream: &Arc<CudaStream>) -> Self {
        Batch {
            order: Order::Launches,
            ..Batch::new(stream)
        }
    }

    /// The launches recorded so far.
    pub fn len(&self) -> usize {
        self.launches.len()
    }

    /// Whether no launch is recorded.
    pub fn is_empty(&self) -> bool {
        self.launches.is_empty()
    }

    /// The stream the batch launches on.
    pub(super) fn stream(&self) -> &CudaStream {
        &self.stream
    }

    /// Records a launch (checked by the caller).
    pub(super) fn push(
        &mut self,
        func: CudaFunction,
        grid: [u32; 3],
        block: [u32; 3],
        (src, dst): (CUdeviceptr, CUdeviceptr),
    ) {
        self.launches.push(Launch {
            func,
            grid,
            block,
            src,
            dst,
        });
    }

    /// Launches every recorded kernel on the batch's stream, as one graph (kept for the next
    /// batch of the same kernels in the same order); on a stream being captured, one plain
    /// launch each. Nothing for an empty batch.
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) when the driver fails to make or launch the graph;
    /// launches queued before the failure stay queued.
    pub fn launch(self) -> Result<()> {
        const OP: &str = "Batch::launch";
        if self.launches.is_empty() {
            return Ok(());
        }
        guard(OP, || {
            let stream = &self.stream;
            if !launchable(stream) {
                for l in &self.launches {
                    let cfg = LaunchConfig {
                        grid_dim: (l.grid[0], l.grid[1], l.grid[2]),
                        block_dim: (l.block[0], l.block[1], l.block[2]),
                        shared_mem_bytes: 0,
                    };
                    let mut b = stream.launch_builder(&l.func);
                    b.arg(&l.src).arg(&l.dst);
                    // SAFETY: each launch was checked and promised sound when recorded
                    // (`Packer::record_*_raw`'s contract): a generated kernel taking the two
                    // addresses, with the dimensions it was made for.
                    unsafe { b.launch(cfg) }.map_err(drv(OP))?;
                }
                return Ok(());
            }
            stream.context().bind_to_thread().map_err(drv(OP))?;
            let n = self.launches.len();
            let mut addresses = vec![[0; 2]; n];
            let mut args = vec![[std::ptr::null_mut(); 2]; n];
            let params = node_params(&self.launches, &mut addresses, &mut args);
            let key: Vec<usize> = self
                .launches
                .iter()
                .map(|l| l.func.cu_function() as usize)
                .collect();
            let order = usable(self.order);
            let key = (order, key);
            let mut graphs = lock(batch_graphs());
            if !graphs.contains_key(&key) && graphs.len() >= BATCH_GRAPHS_KEPT {
                graphs.clear();
            }
            let g = graphs.entry(key).or_insert_with(|| BatchGraph {
                execs: Vec::new(),
                _funcs: self.launches.iter().map(|l| l.func.clone()).collect(),
            });
            let want: Vec<NodeLaunch> = self.launches.iter().map(NodeLaunch::from).collect();
            let picked = pick(
                g.execs.iter().map(|(k, t)| (k.set.as_slice(), *t)),
                &want,
                EXECS_KEPT,
            );
            let at = match picked {
                Pick::Holds(i) | Pick::Reset(i) => i,
                Pick::New => {
                    let made = KernelGraph::new(&params, &self.launches, order)
                        .or_else(|e| match order {
                            // Launch-order edges refused by the driver: independent nodes,
                            // now and for every later batch (this graph is kept under the
                            // launch-order key until the graphs are dropped).
                            Order::Launches => {
                                LAUNCH_ORDER_REFUSED.store(true, Ordering::Relaxed);
                                KernelGraph::new(&params, &self.launches, Order::Free)
                            }
                            Order::Free => Err(e),
                        })
                        .map_err(drv(OP))?;
                    g.execs.push((made, 0));
                    g.execs.len() - 1
                }
            };
            let tick = next_tick();
            let (graph, last) = &mut g.execs[at];
            *last = tick;
            // SAFETY: the graph was made for these kernels in this order; each launch was
            // promised sound when recorded; the stream is live and not capturing.
            unsafe { graph.launch(&params, &self.launches, stream) }.map_err(drv(OP))?;
            COUNTS.batches.fetch_add(1, Ordering::Relaxed);
            let counter = match picked {
                Pick::Holds(_) => &COUNTS.held,
                Pick::Reset(_) => &COUNTS.reset,
                Pick::New => &COUNTS.made,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(src: CUdeviceptr) -> NodeLaunch {
        NodeLaunch {
            func: 7,
            grid: [1, 1, 1],
            block: [256, 1, 1],
            src,
            dst: 0x100,
        }
    }

    #[test]
    fn launch_order_needs_a_driver_of_cuda_12_3() {
        assert!(!has_launch_order(12020));
        assert!(!has_launch_order(11080));
        assert!(has_launch_order(12030));
        assert!(has_launch_order(13000));
        // Independent nodes are asked for as they are, whatever the driver.
        assert_eq!(usable(Order::Free), Order::Free);
    }

    #[test]
    fn a_graph_holding_the_launches_is_picked_as_it_is() {
        let a = [Some(node(1)), Some(node(2))];
        let b = [Some(node(3)), Some(node(4))];
        let execs = [(&a[..], 5), (&b[..], 9)];
        assert_eq!(
            pick(execs.into_iter(), &[node(3), node(4)], 4),
            Pick::Holds(1)
        );
        assert_eq!(
            pick(execs.into_iter(), &[node(1), node(2)], 4),
            Pick::Holds(0)
        );
    }

    #[test]
    fn other_launches_get_a_new_graph_until_the_room_is_full_then_the_oldest() {
        let a = [Some(node(1))];
        let b = [Some(node(2))];
        let unset = [None];
        assert_eq!(pick(std::iter::empty(), &[node(1)], 4), Pick::New);
        assert_eq!(pick([(&a[..], 5)].into_iter(), &[node(9)], 4), Pick::New);
        let full = [(&a[..], 8), (&b[..], 3)];
        assert_eq!(pick(full.into_iter(), &[node(9)], 2), Pick::Reset(1));
        // A node left unset by a failed launch never holds anything.
        assert_eq!(
            pick([(&unset[..], 1)].into_iter(), &[node(1)], 1),
            Pick::Reset(0)
        );
    }
}
