//! Micro-benchmark of the GPU packer on one halo face: a 3 x 64 x 64 face of a 70^3 grid of f64
//! (radius 3), packed and unpacked by the generated kernels, each call followed by a stream
//! synchronization (what one face of a halo exchange costs end to end). `cargo bench -p
//! datatype-pack --bench gpu_pack`; under `cargo test --benches` each runs once.
//!
//! Without a CUDA driver, NVRTC or device it prints why and exits successfully, so that the bench
//! builds and "passes" on any machine.

use std::sync::Arc;

use criterion::{Criterion, Throughput};
use datatype_pack::canonical::canonicalize;
use datatype_pack::construct::subarray;
use datatype_pack::gpu::cudarc::driver::{CudaSlice, CudaStream};
use datatype_pack::gpu::{self, Packer};
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
    c.final_summary();
}
