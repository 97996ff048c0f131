//! Channel launches: a plan's pack that signals a flag once every thread block has packed, and
//! a plan's unpack that waits on the GPU for such a flag ([`codegen::generate_channel`]),
//! launched together as one CUDA graph on one stream.
//!
//! Two processes on two GPUs exchanging a message each way launch, each, its pack into a slot
//! of its own memory and its unpack from the peer's slot (mapped over CUDA IPC) at once; the
//! pack stores the message's number into the peer's flag, the peer's unpack waits for it. No
//! host waits for the other's kernel, and each side launches once.
//!
//! The pack is launched with the grid of the plan's own kernels ([`Packer::pack_raw`]'s). The
//! unpack's blocks spin on the flag, so its grid is capped at one wave of the device (the
//! blocks of its size the device holds at once, by threads and blocks per multiprocessor):
//! every block waits at the same time, and the spinning holds no more of the GPU than it must.
//! Any grid would be correct (the flag is stored by work that never waits for this kernel's
//! blocks: a pack earlier on the stream, another GPU's pack, a copy), so where registers or
//! other work leave fewer blocks resident, the rest wait to be scheduled and nothing hangs. A waiting
//! unpack ends without writing anything when a call-off word reaches its number, or after its
//! patience (measured with the GPU's global timer), saying so in a give-up word.
//!
//! A plan with nothing to move is refused ([`Error::InvalidArgument`](crate::Error::InvalidArgument)):
//! its kernels would not be launched, so no pack would store the flag.
//!
//! The graph of a pair of kernels (or of one alone) is kept per kernels and dimensions, its
//! nodes' arguments set before each launch (the message's number changes every time). A stream
//! being captured gets the two kernels launched one after the other instead. CUDA orders every
//! launch of a graph behind its earlier launches, even on other streams: channels meant to wait
//! at the same time on different streams of one process need packers of their own (their
//! kernels, and so their graphs, are then distinct).

use rustc_hash::FxHashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{self, CUdeviceptr, CUgraph, CUgraphExec, CUgraphNode};
use cudarc::driver::{CudaFunction, CudaStream, DriverError, LaunchConfig, PushKernelArg};

use crate::codegen::{self, Direction};
use crate::error::{invalid, Result};

use super::compile::lock;
use super::driver::{drv, guard};
use super::launch::{check_addresses, check_lengths, Generated, Kernels};
use super::packer::Packer;
use super::relaunch::{kernel_node, launchable};

/// The sender's side of one message through a channel: pack the strided buffer at `src` into
/// the slot at `dst`, then store `seq` into `flag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelSend {
    /// The strided buffer's base address.
    pub src: CUdeviceptr,
    /// Bytes from `src` to the end of its allocation.
    pub src_len: usize,
    /// The slot's address (packed bytes).
    pub dst: CUdeviceptr,
    /// The slot's length.
    pub dst_len: usize,
    /// The message's number, stored into `flag` once every block has packed.
    pub seq: u64,
    /// A 4-byte block counter in the sender's memory, 0 between launches (the last block sets
    /// it back).
    pub arrived: CUdeviceptr,
    /// The receiver's 8-byte flag word (its memory, mapped here).
    pub flag: CUdeviceptr,
}

/// The receiver's side of one message through a channel: wait until `*flag >= seq` (or
/// `*cancel >= seq`, or `patience_ns` pass: then `*gave_up = seq`), then unpack the slot at
/// `src` into the strided buffer at `dst`.
///
/// Each thread block of the unpack waits and decides for itself, the flag checked first: a
/// launch called off or given up about when its flag arrived may have unpacked some blocks and
/// not others (unpacking again, or otherwise, writes every byte of the layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelRecv {
    /// The slot's address (the sender's memory, mapped here).
    pub src: CUdeviceptr,
    /// The slot's length.
    pub src_len: usize,
    /// The strided buffer's base address.
    pub dst: CUdeviceptr,
    /// Bytes from `dst` to the end of its allocation.
    pub dst_len: usize,
    /// The message's number.
    pub seq: u64,
    /// The 8-byte flag word the sender's pack stores `seq` into.
    pub flag: CUdeviceptr,
    /// An 8-byte call-off word: at `seq` or more, the wait ends and nothing is unpacked.
    pub cancel: CUdeviceptr,
    /// An 8-byte word the kernel stores `seq` into where its patience ran out.
    pub gave_up: CUdeviceptr,
    /// How long the blocks wait for their flag, in nanoseconds of the GPU's global timer.
    pub patience_ns: u64,
}

impl Packer {
    /// Compiles and loads the channel kernels for `word_size` now rather than on first use.
    ///
    /// # Errors
    /// As [`Packer::prepare`].
    pub fn prepare_channel(&self, word_size: u32) -> Result<()> {
        self.channel_variant("Packer::prepare_channel", word_size)
            .map(|_| ())
    }

    /// The channel kernels for word size `w`, with the grid of the plan's own kernels (the
    /// pack's; at most `u32::MAX` blocks, which the pack counts in a 32-bit word).
    fn channel_variant(&self, op: &'static str, w: u32) -> Result<Arc<Kernels<2>>> {
        self.channel.kernels(op, &w, |dev| {
            let k = codegen::generate_channel(self.plan(), w, &dev.options.limits())?;
            let grid = codegen::cap_grid(dev.plan_grid(k.shape()), u64::from(u32::MAX));
            let block = k.shape().block();
            Ok(Generated {
                kernels: k,
                grid,
                block,
            })
        })
    }

    /// The checks of one side of a channel launch on `stream` (context, a non-empty plan,
    /// lengths, addresses, then each of `words`: an address and the alignment it needs), and
    /// its kernel with its dimensions: the channel pack (`dir` pack) with the plan's grid, or
    /// the unpack with that grid capped at one wave.
    fn channel_side(
        &self,
        op: &'static str,
        stream: &CudaStream,
        dir: Direction,
        (src, src_len): (CUdeviceptr, usize),
        (dst, dst_len): (CUdeviceptr, usize),
        words: &[(CUdeviceptr, u64)],
    ) -> Result<Side> {
        self.channel
            .dev
            .check_context(op, "stream", stream.context())?;
        if self.plan().is_empty() {
            return Err(invalid(op, "an empty plan has nothing to signal"));
        }
        let plan = self.plan();
        check_lengths(
            op,
            dir,
            src_len,
            dst_len,
            (plan.start(), plan.extent_end()),
            plan.packed_size(),
        )?;
        check_addresses(op, src, dst)?;
        for &(w, align) in words {
            if w == 0 || w % align != 0 {
                return Err(invalid(
                    op,
                    format!("a flag, counter or call-off word at {w:#x} is null or not {align}-byte aligned"),
                ));
            }
        }
        let (strided, packed) = match dir {
            Direction::Pack => (src, dst),
            Direction::Unpack => (dst, src),
        };
        let k = self.channel_variant(op, plan.word_size(strided, packed))?;
        let block = k.block;
        let grid = match dir {
            Direction::Pack => k.grid,
            // Spinning blocks: no more than the device holds at once.
            Direction::Unpack => {
                let threads = block.iter().product();
                codegen::cap_grid(k.grid, self.channel.dev.wave(threads))
            }
        };
        Ok(Side {
            func: k.funcs[usize::from(dir == Direction::Unpack)].clone(),
            grid,
            block,
        })
    }
}

/// A kept graph: one or two kernel nodes (the unpack after the pack) and its executable graph.
struct ChannelGraph {
    graph: CUgraph,
    exec: CUgraphExec,
    nodes: Vec<CUgraphNode>,
    /// The kernels the nodes launch, kept loaded with the graph.
    _funcs: Vec<CudaFunction>,
}

// SAFETY: the handles are the driver's, valid from any thread of the process; a graph is only
// used under its map's mutex.
unsafe impl Send for ChannelGraph {}

impl Drop for ChannelGraph {
    fn drop(&mut self) {
        // SAFETY: made by `ChannelGraph::new` and destroyed once, here (a null `exec` was never
        // instantiated); launches in flight keep what they need.
        unsafe {
            if !self.exec.is_null() {
                sys::cuGraphExecDestroy(self.exec);
            }
            sys::cuGraphDestroy(self.graph);
        }
    }
}

impl ChannelGraph {
    /// A graph of one node per entry of `params`, each after the one before.
    fn new(
        params: &[sys::CUDA_KERNEL_NODE_PARAMS],
        funcs: Vec<CudaFunction>,
    ) -> std::result::Result<Self, DriverError> {
        let mut graph: CUgraph = std::ptr::null_mut();
        // SAFETY: `graph` is a valid out-pointer; flags must be 0.
        unsafe { sys::cuGraphCreate(&mut graph, 0) }.result()?;
        let mut g = ChannelGraph {
            graph,
            exec: std::ptr::null_mut(),
            nodes: Vec::with_capacity(params.len()),
            _funcs: funcs,
        };
        for p in params {
            let mut node: CUgraphNode = std::ptr::null_mut();
            let (deps, n) = match g.nodes.last() {
                Some(prev) => (prev as *const CUgraphNode, 1),
                None => (std::ptr::null(), 0),
            };
            // SAFETY: `g.graph` is live; `deps` points at `n` nodes of it; `p` and the
            // arguments it points at are valid for the call, which copies them. On an error
            // `g` is dropped, which destroys the graph.
            unsafe { sys::cuGraphAddKernelNode_v2(&mut node, g.graph, deps, n, p) }.result()?;
            g.nodes.push(node);
        }
        // SAFETY: `g.graph` holds the nodes; `g.exec` is a valid out-pointer.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut g.exec, g.graph, 0) }.result()?;
        Ok(g)
    }
}

/// Graphs kept at most; more are made after dropping all.
const GRAPHS_KEPT: usize = 64;

/// A kept graph's key: the kernels (0 for a side left out) and their dimensions.
type GraphKey = (usize, usize, [u32; 3], [u32; 3]);

fn graphs() -> &'static Mutex<FxHashMap<GraphKey, ChannelGraph>> {
    static G: OnceLock<Mutex<FxHashMap<GraphKey, ChannelGraph>>> = OnceLock::new();
    G.get_or_init(|| Mutex::new(FxHashMap::default()))
}

/// Launches on `stream` the pack of `send` (with its packer, if any), then the waiting unpack
/// of `recv` (if any), as one CUDA graph whose second node follows the first: the unpack's
/// spinning blocks never keep the pack from the GPU. Checked first, each side as
/// [`Packer::pack_raw`] and [`Packer::unpack_raw`] check theirs, and the words (flag, counter,
/// call-off, give-up) non-null and aligned; nothing is launched where a check fails. A plan
/// with nothing to move is refused (its pack could not signal).
///
/// # Safety
/// Every address is live device memory the stream's context reaches (the flag and the slot of
/// a receive may be another GPU's, mapped), of the lengths given, until the stream has run the
/// launch; the send's slot and the receive's strided buffer are written by nothing else
/// meanwhile; the counter is the send's own, 0 (as every such launch leaves it); the slot a
/// receive reads holds the message its flag numbers once the flag reaches `seq`.
///
/// # Errors
/// The checks above ([`Error::InvalidArgument`](crate::Error::InvalidArgument),
/// [`Error::OutOfBounds`](crate::Error::OutOfBounds),
/// [`Error::BufferTooSmall`](crate::Error::BufferTooSmall)); compiling the kernels;
/// [`Error::Cuda`](crate::Error::Cuda) where the graph or the launch fails.
pub unsafe fn launch_channel(
    stream: &CudaStream,
    send: Option<(&Packer, &ChannelSend)>,
    recv: Option<(&Packer, &ChannelRecv)>,
) -> Result<()> {
    const OP: &str = "launch_channel";
    guard(OP, || {
        let packed = send
            .map(|(p, s)| {
                p.channel_side(
                    OP,
                    stream,
                    Direction::Pack,
                    (s.src, s.src_len),
                    (s.dst, s.dst_len),
                    &[(s.arrived, 4), (s.flag, 8)],
                )
            })
            .transpose()?;
        let unpacked = recv
            .map(|(p, r)| {
                p.channel_side(
                    OP,
                    stream,
                    Direction::Unpack,
                    (r.src, r.src_len),
                    (r.dst, r.dst_len),
                    &[(r.flag, 8), (r.cancel, 8), (r.gave_up, 8)],
                )
            })
            .transpose()?;
        // The arguments, each a value the node's argument array points at.
        let mut sa = send.map_or([0u64; 5], |(_, s)| [s.src, s.dst, s.seq, s.arrived, s.flag]);
        let mut ra = recv.map_or([0u64; 7], |(_, r)| {
            [
                r.src,
                r.dst,
                r.seq,
                r.flag,
                r.cancel,
                r.gave_up,
                r.patience_ns,
            ]
        });
        let mut sp: Vec<*mut c_void> = sa.iter_mut().map(|a| (a as *mut u64).cast()).collect();
        let mut rp: Vec<*mut c_void> = ra.iter_mut().map(|a| (a as *mut u64).cast()).collect();
        let mut params = Vec::with_capacity(2);
        let mut funcs = Vec::with_capacity(2);
        if let Some(p) = &packed {
            params.push(kernel_node(&p.func, p.grid, p.block, &mut sp));
            funcs.push(p.func.clone());
        }
        if let Some(u) = &unpacked {
            params.push(kernel_node(&u.func, u.grid, u.block, &mut rp));
            funcs.push(u.func.clone());
        }
        if params.is_empty() {
            return Ok(());
        }
        if !launchable(stream) {
            return launch_plain(
                stream,
                packed.as_ref().zip(send),
                unpacked.as_ref().zip(recv),
            );
        }
        stream.context().bind_to_thread().map_err(drv(OP))?;
        let key: GraphKey = (
            packed.as_ref().map_or(0, |p| p.func.cu_function() as usize),
            unpacked
                .as_ref()
                .map_or(0, |u| u.func.cu_function() as usize),
            packed.as_ref().map_or([0; 3], |p| p.grid),
            unpacked.as_ref().map_or([0; 3], |u| u.grid),
        );
        let mut map = lock(graphs());
        if !map.contains_key(&key) {
            if map.len() >= GRAPHS_KEPT {
                map.clear();
            }
            let g = ChannelGraph::new(&params, funcs).map_err(drv(OP))?;
            map.insert(key, g);
        }
        let g = &map[&key];
        for (&n, p) in g.nodes.iter().zip(&params) {
            // SAFETY: the executable graph is live and `n` its node for this kernel (the key
            // names the kernels and dimensions); `p` and the arguments it points at live
            // through the call, which copies them.
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(g.exec, n, p) }
                .result()
                .map_err(drv(OP))?;
        }
        // SAFETY: every node holds this launch's arguments (set above), whose soundness is the
        // caller's contract; the stream is live and not capturing.
        unsafe { sys::cuGraphLaunch(g.exec, stream.cu_stream()) }
            .result()
            .map_err(drv(OP))
    })
}

/// One side of a channel launch, checked: its kernel (which keeps its module loaded) and the
/// dimensions it is launched with.
struct Side {
    func: CudaFunction,
    grid: [u32; 3],
    block: [u32; 3],
}

/// [`launch_channel`]'s kernels launched one after the other on a stream being captured.
fn launch_plain(
    stream: &CudaStream,
    send: Option<(&Side, (&Packer, &ChannelSend))>,
    recv: Option<(&Side, (&Packer, &ChannelRecv))>,
) -> Result<()> {
    let cfg = |k: &Side| LaunchConfig {
        grid_dim: (k.grid[0], k.grid[1], k.grid[2]),
        block_dim: (k.block[0], k.block[1], k.block[2]),
        shared_mem_bytes: 0,
    };
    if let Some((k, (_, s))) = send {
        let mut b = stream.launch_builder(&k.func);
        b.arg(&s.src)
            .arg(&s.dst)
            .arg(&s.seq)
            .arg(&s.arrived)
            .arg(&s.flag);
        // SAFETY: the channel pack takes (src, dst, seq, arrived, flag), five 64-bit values as
        // pushed; the addresses were checked and are sound ([`launch_channel`]'s contract).
        unsafe { b.launch(cfg(k)) }.map_err(drv("launch_channel"))?;
    }
    if let Some((k, (_, r))) = recv {
        let mut b = stream.launch_builder(&k.func);
        b.arg(&r.src)
            .arg(&r.dst)
            .arg(&r.seq)
            .arg(&r.flag)
            .arg(&r.cancel)
            .arg(&r.gave_up)
            .arg(&r.patience_ns);
        // SAFETY: the channel unpack takes (src, dst, seq, flag, cancel, gave_up, patience),
        // seven 64-bit values as pushed; as above.
        unsafe { b.launch(cfg(k)) }.map_err(drv("launch_channel"))?;
    }
    Ok(())
}
