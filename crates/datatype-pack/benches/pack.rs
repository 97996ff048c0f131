//! Micro-benchmarks of the packing pipeline on the CPU: building the IR, canonicalizing it, planning
//! it, and the reference packer against the naive walk. `cargo bench -p datatype-pack`; under
//! `cargo test --benches` each runs once. The GPU packer is measured by `collbench pack` on a GPU.

use criterion::{black_box, Criterion, Throughput};
use datatype_pack::canonical::canonicalize;
use datatype_pack::construct::{hvector, subarray, vector};
use datatype_pack::{cpu, Order, StridedBlock, Type};

/// A face of a 64^3 grid of f64 with a halo of 3: the shape a halo exchange packs.
fn face() -> Type {
    subarray(&[70, 70, 70], &[3, 64, 64], &[3, 3, 3], Order::C, 8).expect("a valid subarray")
}

fn pipeline(c: &mut Criterion) {
    let mut g = c.benchmark_group("ir");
    g.bench_function("vector 1024 x 4 of 8 B", |b| {
        b.iter(|| vector(black_box(1024), 4, 16, 8))
    });
    g.bench_function("subarray face", |b| b.iter(face));
    let nested = hvector(16, 1, 4096, vector(64, 2, 8, 8).expect("vector")).expect("hvector");
    g.bench_function("canonicalize nested hvector", |b| {
        b.iter(|| canonicalize(black_box(nested.clone())))
    });
    let f = face();
    g.bench_function("canonicalize face", |b| {
        b.iter(|| canonicalize(black_box(f.clone())))
    });
    let canon = canonicalize(f.clone());
    g.bench_function("plan face", |b| {
        b.iter(|| StridedBlock::from_type(black_box(&canon)))
    });
    g.finish();
}

fn cpu_pack(c: &mut Criterion) {
    let f = face();
    let plan = StridedBlock::from_type(&canonicalize(f.clone())).expect("a plan");
    let src: Vec<u8> = (0..70 * 70 * 70 * 8).map(|i| i as u8).collect();
    let mut dst = vec![0u8; plan.packed_size() as usize];
    let mut g = c.benchmark_group("cpu pack face");
    g.throughput(Throughput::Bytes(plan.packed_size()));
    g.bench_function("plan", |b| b.iter(|| cpu::pack(&plan, &src, &mut dst)));
    g.bench_function("naive walk", |b| {
        b.iter(|| cpu::pack_naive(&f, &src, &mut dst))
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    pipeline(&mut c);
    cpu_pack(&mut c);
    c.final_summary();
}
