//! Launching a kernel through a one-node CUDA graph, its arguments set before each launch
//! ([`GpuOptions::relaunch`](super::GpuOptions::relaunch)).
//!
//! Each kernel gets a graph of one kernel node, instantiated on its first launch and kept; a
//! later launch sets the node's arguments in the executable graph
//! (`cuGraphExecKernelNodeSetParams`) and launches it (`cuGraphLaunch`). The driver then
//! replays a prepared launch instead of building one. On an H100 (docs/logs/2026-11-27-floor)
//! setting and launching took 1.9 µs of host time against 3.6 µs for `cuLaunchKernel`, and a
//! pack of 512 KiB launched and waited for 8.1 µs against 10.0 µs.
//!
//! What it changes besides the time: launches of one executable graph run in the order they
//! were made, also across streams, so two streams launching the same kernel no longer overlap
//! those launches. A stream being captured into a graph gets a plain launch (a graph launch
//! there would nest).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::driver::sys::{self, CUdeviceptr, CUfunction, CUgraph, CUgraphExec, CUgraphNode};
use cudarc::driver::{CudaStream, DriverError};

use super::compile::lock;

/// One kernel's graph of one node and the executable graph made from it.
struct OneNode {
    graph: CUgraph,
    node: CUgraphNode,
    exec: CUgraphExec,
}

// SAFETY: the three are driver handles, valid from any thread of the process; a `OneNode` is
// only used under its map's mutex.
unsafe impl Send for OneNode {}

/// The one-node graphs of a launcher's kernels, keyed by kernel, made on first launch and
/// destroyed with the launcher (before its kernels' modules are unloaded).
#[derive(Default)]
pub(super) struct Graphs {
    map: Mutex<HashMap<usize, OneNode>>,
}

impl Graphs {
    /// Launches `func` on `stream` with `grid`, `block` and the arguments `(src, dst)` through
    /// its graph. Returns `Ok(false)`, launching nothing, when the stream is being captured (or
    /// the driver cannot say), for the caller to launch the kernel directly.
    ///
    /// # Safety
    /// `func` is a kernel of the stream's context taking `(const unsigned char*, unsigned
    /// char*)` whose launch with these dimensions and addresses is sound (the caller's
    /// launch contract); it stays loaded as long as this `Graphs` lives.
    pub(super) unsafe fn launch(
        &self,
        stream: &CudaStream,
        func: CUfunction,
        grid: [u32; 3],
        block: [u32; 3],
        (src, dst): (CUdeviceptr, CUdeviceptr),
    ) -> Result<bool, DriverError> {
        if !matches!(
            stream.capture_status(),
            Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
        ) {
            return Ok(false);
        }
        stream.context().bind_to_thread()?;
        let (mut s, mut d) = (src, dst);
        let mut args: [*mut c_void; 2] = [
            (&mut s as *mut CUdeviceptr).cast(),
            (&mut d as *mut CUdeviceptr).cast(),
        ];
        let params = sys::CUDA_KERNEL_NODE_PARAMS {
            func,
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
        };
        let mut map = lock(&self.map);
        let key = func as usize;
        if let Some(g) = map.get(&key) {
            // SAFETY: `g.exec` was instantiated from a graph whose node `g.node` launches this
            // very function in this context; `params` and the arguments it points at live
            // through the call, which copies them.
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(g.exec, g.node, &params) }.result()?;
        } else {
            let g = one_node(&params)?;
            map.insert(key, g);
        }
        let g = &map[&key];
        // SAFETY: the executable graph is live and its one node's arguments were just set (or
        // made) from this call's; the stream is live and not capturing.
        unsafe { sys::cuGraphLaunch(g.exec, stream.cu_stream()) }.result()?;
        Ok(true)
    }
}

/// A graph of one kernel node with `params`, and its executable graph.
fn one_node(params: &sys::CUDA_KERNEL_NODE_PARAMS) -> Result<OneNode, DriverError> {
    let mut graph: CUgraph = std::ptr::null_mut();
    // SAFETY: `graph` is a valid out-pointer; flags must be 0.
    unsafe { sys::cuGraphCreate(&mut graph, 0) }.result()?;
    let mut node: CUgraphNode = std::ptr::null_mut();
    let mut exec: CUgraphExec = std::ptr::null_mut();
    // SAFETY: `graph` was just created; the node has no dependencies; `params` (and the
    // arguments it points at) are valid for the call, which copies them.
    let made = unsafe {
        sys::cuGraphAddKernelNode_v2(&mut node, graph, std::ptr::null(), 0, params).result()
    }
    // SAFETY: `graph` holds the one node; `exec` is a valid out-pointer.
    .and_then(|()| unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) }.result());
    if let Err(e) = made {
        // SAFETY: `graph` was created above and is not used again.
        unsafe { sys::cuGraphDestroy(graph) };
        return Err(e);
    }
    Ok(OneNode { graph, node, exec })
}

impl Drop for Graphs {
    fn drop(&mut self) {
        for (_, g) in lock(&self.map).drain() {
            // SAFETY: each handle was made by `one_node` and is destroyed once, here; launches
            // already queued keep what they need (the driver defers the release).
            unsafe {
                sys::cuGraphExecDestroy(g.exec);
                sys::cuGraphDestroy(g.graph);
            }
        }
    }
}
