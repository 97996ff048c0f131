//! Micro-benchmarks of what the front end adds to every call: the element/operation rule, the
//! argument checks, and checked mode's cross-rank agreement on a world of one rank (MPI is started
//! once for the whole run). `cargo bench -p collectives-core`; under `cargo test --benches` each
//! runs once.

use collectives_core::check::{check_op, counts, equal_blocks, same_len};
use collectives_core::{BackendKind, Communicator, MpiComm, ReduceOp};
use criterion::{black_box, Criterion};
use num_complex::Complex;

fn rules(c: &mut Criterion) {
    let mut g = c.benchmark_group("rules");
    g.bench_function("check_op f64 sum mpi", |b| {
        b.iter(|| check_op::<f64>("all_reduce", black_box(ReduceOp::Sum), BackendKind::MpiHost))
    });
    g.bench_function("check_op complex64 max nccl (refused)", |b| {
        b.iter(|| {
            check_op::<Complex<f32>>("all_reduce", black_box(ReduceOp::Max), BackendKind::Nccl)
                .is_err()
        })
    });
    g.bench_function("same_len", |b| {
        b.iter(|| {
            same_len(
                "all_reduce",
                "send",
                black_box(1024),
                "recv",
                black_box(1024),
            )
        })
    });
    g.bench_function("equal_blocks", |b| {
        b.iter(|| equal_blocks("all_gather", "recv", black_box(4096), black_box(4)))
    });
    let cs: Vec<usize> = (1..=64).collect();
    g.bench_function("counts of 64 ranks", |b| {
        b.iter(|| counts("all_gather_v", "counts", black_box(&cs), 64))
    });
    g.finish();
}

fn agreement(c: &mut Criterion, universe: &mpi::environment::Universe) {
    let plain = MpiComm::world(universe)
        .expect("a world communicator")
        .with_checked(false);
    let checked = MpiComm::world(universe)
        .expect("a world communicator")
        .with_checked(true);
    let x = [1.0f64; 8];
    let mut y = [0.0f64; 8];
    let mut g = c.benchmark_group("all_reduce 8 f64, 1 rank");
    g.bench_function("checked off", |b| {
        b.iter(|| plain.all_reduce(&x[..], &mut y[..], ReduceOp::Sum))
    });
    g.bench_function("checked on (agreement)", |b| {
        b.iter(|| checked.all_reduce(&x[..], &mut y[..], ReduceOp::Sum))
    });
    g.finish();
}

fn main() {
    let universe = mpi::initialize().expect("MPI starts once");
    let mut c = Criterion::default().configure_from_args();
    rules(&mut c);
    agreement(&mut c, &universe);
    c.final_summary();
}
