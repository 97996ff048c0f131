//! Micro-benchmark of the GPU packer on one halo face: a 3 x 64 x 64 face of a 70^3 grid of f64
//! (radius 3), packed and unpacked by the generated kernels, each call followed by a stream
//! synchronization (what one face of a halo exchange costs end to end); and the host time of
//! one launch of its pack on the legacy default stream (what a caller waits before it can go
//! on), by the packer's raw call through its kept graph and by a plain launch, beside the
//! driver's own launch of the same one-node graph and the driver calls the raw call makes
//! before it. `cargo bench -p datatype-pack --bench gpu_pack`; under `cargo test --benches`
//! each runs once.
//!
//! Without a CUDA driver, NVRTC or device it prints why and exits successfully, so that the bench
//! builds and "passes" on any machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use datatype_pack::canonical::canonicalize;
use datatype_pack::construct::subarray;
use datatype_pack::gpu::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use datatype_pack::gpu::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use datatype_pack::gpu::{self, GpuOptions, Packer};
use datatype_pack::{Order, StridedBlock};

/// Grid cells per side, halo included.
const SIDE: usize = 70;

/// The stream, the packer of the face, the grid and the packed buffer.
type Setup = (Arc<CudaStream>, Packer, CudaSlice<u8>, CudaSlice<u8>);

/// What the bench measures with, or why it cannot run here.
fn setup() -> Result<Setup, String> {
    gpu::driver_available().map_err(|e| format!("no CUDA driver: {e}"))?;
    gpu::nvrtc_available().map_err(|e| format!("no NVRTC: {e}"))?;
    let ctx = gpu::context(0).map_err(|e| format!("no CUDA device: {e}"))?;
    let face = subarray(&[SIDE as u64; 3], &[3, 64, 64], &[3, 3, 3], Order::C, 8)
        .map_err(|e| format!("face: {e}"))?;
    let plan = StridedBlock::from_type(&canonicalize(face)).map_err(|e| format!("plan: {e}"))?;
    let packer = Packer::new(&ctx, &plan).map_err(|e| format!("packer: {e}"))?;
    let stream = ctx.new_stream().map_err(|e| format!("stream: {e}"))?;
    let src = stream
        .alloc_zeros::<u8>(SIDE * SIDE * SIDE * 8)
        .map_err(|e| format!("allocation: {e}"))?;
    let dst = stream
        .alloc_zeros::<u8>(plan.packed_size() as usize)
        .map_err(|e| format!("allocation: {e}"))?;
    Ok((stream, packer, src, dst))
}

fn main() {
    let (stream, packer, mut src, mut dst) = match setup() {
        Ok(s) => s,
        Err(why) => {
            println!("gpu_pack: skipped: {why}");
            return;
        }
    };
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("gpu pack face");
    g.throughput(Throughput::Bytes(packer.packed_size()));
    g.bench_function("pack", |b| {
        b.iter(|| {
            packer.pack(&stream, &src, &mut dst).expect("pack");
            stream.synchronize().expect("synchronize");
        })
    });
    g.bench_function("unpack", |b| {
        b.iter(|| {
            packer.unpack(&stream, &dst, &mut src).expect("unpack");
            stream.synchronize().expect("synchronize");
        })
    });
    g.finish();
    launch_host_time(&mut c, &stream, &mut src, &mut dst);
    c.final_summary();
}

/// Launches timed per batch before the stream is waited for (untimed), so that the queue
/// never fills.
const LAUNCHES_PER_WAIT: u64 = 32;

/// Times `launch` alone, `iters` times, waiting for `stream` every [`LAUNCHES_PER_WAIT`]
/// launches outside the timed spans.
fn timed(stream: &CudaStream, iters: u64, mut launch: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(LAUNCHES_PER_WAIT);
        let t = Instant::now();
        for _ in 0..n {
            launch();
        }
        total += t.elapsed();
        stream.synchronize().expect("synchronize");
        left -= n;
    }
    total
}

/// The host time of one launch of the face's pack on the legacy default stream: the packer's
/// raw call through its kept one-node graph (its arguments held), the same packer's plain
/// launch (`cuLaunchKernel`); the raw call through the kept graph and the driver's launch of a
/// graph captured from the pack, both on a stream of their own; and the two driver calls the
/// graph path makes before its launch (is the stream capturing; is the context current).
fn launch_host_time(
    c: &mut Criterion,
    own: &CudaStream,
    src: &mut CudaSlice<u8>,
    dst: &mut CudaSlice<u8>,
) {
    let ctx = own.context().clone();
    let legacy = ctx.default_stream();
    let face = subarray(&[SIDE as u64; 3], &[3, 64, 64], &[3, 3, 3], Order::C, 8).expect("face");
    let plan = StridedBlock::from_type(&canonicalize(face)).expect("plan");
    let graphs = Packer::with_options(&ctx, &plan, &GpuOptions::default().with_relaunch(true))
        .expect("packer");
    let plain = Packer::with_options(&ctx, &plan, &GpuOptions::default().with_relaunch(false))
        .expect("packer");
    let (src_len, dst_len) = (src.len(), dst.len());
    own.synchronize().expect("synchronize");
    let (sp, _read) = src.device_ptr(own);
    let (dp, _write) = dst.device_ptr_mut(own);
    // The graph captured from one plain launch of the pack, on a stream of its own.
    let cap = ctx.new_stream().expect("stream");
    cap.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("capture");
    // SAFETY: both addresses are whole allocations of this context of the lengths passed,
    // which outlive every launch below (each batch is waited for before the next and the
    // buffers are dropped after this function); only these launches touch them meanwhile.
    unsafe { plain.pack_raw(&cap, sp, src_len, dp, dst_len) }.expect("captured pack");
    let graph = cap
        .end_capture(CUgraphInstantiate_flags(0))
        .expect("end capture")
        .expect("the capture holds the pack");
    let mut g = c.benchmark_group("gpu pack face launch, host time, legacy stream");
    g.bench_function("packer raw call, kept graph", |b| {
        b.iter_custom(|iters| {
            timed(&legacy, iters, || {
                // SAFETY: as the capture's.
                unsafe { graphs.pack_raw(&legacy, sp, src_len, dp, dst_len) }.expect("pack")
            })
        })
    });
    g.bench_function("packer raw call, plain launch", |b| {
        b.iter_custom(|iters| {
            timed(&legacy, iters, || {
                // SAFETY: as the capture's.
                unsafe { plain.pack_raw(&legacy, sp, src_len, dp, dst_len) }.expect("pack")
            })
        })
    });
    g.bench_function("packer raw call, kept graph, a stream of its own", |b| {
        b.iter_custom(|iters| {
            timed(&cap, iters, || {
                // SAFETY: as the capture's.
                unsafe { graphs.pack_raw(&cap, sp, src_len, dp, dst_len) }.expect("pack")
            })
        })
    });
    g.bench_function("driver graph launch, a stream of its own", |b| {
        // The captured graph launches on its own stream (cudarc's graph is bound to it).
        b.iter_custom(|iters| timed(&cap, iters, || graph.launch().expect("graph launch")))
    });
    g.bench_function("is the stream capturing", |b| {
        b.iter(|| legacy.capture_status().expect("capture status"))
    });
    g.bench_function("is the context current", |b| {
        b.iter(|| ctx.bind_to_thread().expect("bind"))
    });
    g.finish();
}
