//! NCCL buffer registration on GPUs: every collective on buffers from `ncclMemAlloc` that are not
//! registered, registered (`ncclCommRegister`) and symmetric windows (`ncclCommWindowRegister`),
//! against answers computed here; and `NcclComm::register` on cudarc's buffers. One rank per GPU:
//! `mpirun -n 2 target/release/deps/nccl_register-*`. Without a CUDA driver or libnccl it reports
//! that it was skipped and passes nothing. A mode the loaded NCCL lacks (windows before 2.27) must
//! give `Error::Unavailable` naming the release, on every rank.

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use std::ops::DerefMut;

use collectives::backend::nccl::cuda_driver_present;
use collectives::cudarc::driver::CudaSlice;
use collectives::{
    device, Communicator, DeviceBuffer, DeviceBufferMut, DeviceCommunicator, Error, NcclComm,
    ReduceOp, RegisterMode,
};
use common::{case, Case, T};

const N: usize = 37;

/// Whether every rank says yes (over the test's MPI communicator).
fn all(t: &T, yes: bool) -> bool {
    let mut v = [i32::from(yes)];
    t.comm
        .all_reduce_in_place(&mut v[..], ReduceOp::Min)
        .expect("MPI agrees");
    v[0] == 1
}

fn down(t: &T, c: &NcclComm, buf: &CudaSlice<f32>, what: &str) -> Vec<f32> {
    t.ok(c.synchronize(), what);
    t.ok(device::download(c.stream(), buf), what)
        .unwrap_or_default()
}

fn same(t: &T, got: &[f32], expected: &[f32], what: &str) {
    if got != expected {
        let first = got.iter().zip(expected).position(|(g, e)| g != e);
        t.fail(format!(
            "{what}: {} of {} values wrong (first at {first:?}; lengths {} and {})",
            got.iter().zip(expected).filter(|(g, e)| g != e).count(),
            expected.len(),
            got.len(),
            expected.len()
        ));
    }
}

/// Every collective on buffers made by `up`, checked against the answer computed here.
fn every_collective<B: DerefMut<Target = CudaSlice<f32>>>(
    t: &T,
    c: &NcclComm,
    mode: &str,
    up: &dyn Fn(&[f32]) -> Result<B, Error>,
) {
    let (rank, size) = (c.rank(), c.size());
    let root = size - 1;
    let f = |x: usize| x as f32;
    // Buffers are made in the same order on every rank (windows are collective), and every rank
    // goes on only when all could make theirs.
    let make = |host: &[f32], what: &str| {
        let b = t.ok(up(host), &format!("{mode}: allocating {what}"));
        if all(t, b.is_some()) {
            b
        } else {
            None
        }
    };

    // all_reduce, out of place and in place.
    let input: Vec<f32> = (0..N).map(|i| f((rank + 1) * (i + 1))).collect();
    let summed: Vec<f32> = (0..N).map(|i| f((i + 1) * size * (size + 1) / 2)).collect();
    let (Some(send), Some(mut recv)) = (make(&input, "send"), make(&vec![0.0; N], "recv")) else {
        return;
    };
    t.ok(c.all_reduce(&*send, &mut *recv, ReduceOp::Sum), mode);
    same(
        t,
        &down(t, c, &recv, mode),
        &summed,
        &format!("{mode}: all_reduce"),
    );
    let Some(mut buf) = make(&input, "in-place buffer") else {
        return;
    };
    t.ok(c.all_reduce_in_place(&mut *buf, ReduceOp::Sum), mode);
    same(
        t,
        &down(t, c, &buf, mode),
        &summed,
        &format!("{mode}: all_reduce_in_place"),
    );

    // broadcast from the last rank, reduce to it.
    let host: Vec<f32> = (0..N)
        .map(|i| if rank == root { f(i + 7) } else { 0.0 })
        .collect();
    let Some(mut b) = make(&host, "broadcast buffer") else {
        return;
    };
    t.ok(c.broadcast(&mut *b, root), mode);
    let expected: Vec<f32> = (0..N).map(|i| f(i + 7)).collect();
    same(
        t,
        &down(t, c, &b, mode),
        &expected,
        &format!("{mode}: broadcast"),
    );
    let Some(mut r) = make(&vec![0.0; N], "reduce recv") else {
        return;
    };
    t.ok(
        c.reduce(
            &*send,
            (rank == root).then_some(&mut *r),
            ReduceOp::Sum,
            root,
        ),
        mode,
    );
    if rank == root {
        same(
            t,
            &down(t, c, &r, mode),
            &summed,
            &format!("{mode}: reduce"),
        );
    }

    // all_gather, gather, all_gather_v.
    let mine: Vec<f32> = (0..N).map(|i| f(rank * 1000 + i)).collect();
    let gathered: Vec<f32> = (0..size * N).map(|j| f((j / N) * 1000 + j % N)).collect();
    let (Some(s), Some(mut g)) = (
        make(&mine, "gather send"),
        make(&vec![0.0; size * N], "gather recv"),
    ) else {
        return;
    };
    t.ok(c.all_gather(&*s, &mut *g), mode);
    same(
        t,
        &down(t, c, &g, mode),
        &gathered,
        &format!("{mode}: all_gather"),
    );
    let Some(mut g2) = make(&vec![0.0; size * N], "gather recv") else {
        return;
    };
    t.ok(
        c.gather(&*s, (rank == root).then_some((*g2).as_buf_mut()), root),
        mode,
    );
    if rank == root {
        same(
            t,
            &down(t, c, &g2, mode),
            &gathered,
            &format!("{mode}: gather"),
        );
    }
    let counts: Vec<usize> = (0..size).map(|r| r + 1).collect();
    let total: usize = counts.iter().sum();
    let mine_v: Vec<f32> = (0..=rank).map(|i| f(rank * 1000 + i)).collect();
    let expected_v: Vec<f32> = (0..size)
        .flat_map(|r| (0..=r).map(move |i| f(r * 1000 + i)))
        .collect();
    let (Some(sv), Some(mut gv)) = (make(&mine_v, "v send"), make(&vec![0.0; total], "v recv"))
    else {
        return;
    };
    t.ok(c.all_gather_v(&*sv, &mut *gv, &counts), mode);
    same(
        t,
        &down(t, c, &gv, mode),
        &expected_v,
        &format!("{mode}: all_gather_v"),
    );

    // reduce_scatter, scatter, all_to_all.
    let wide: Vec<f32> = (0..size * N).map(|j| f(rank + j)).collect();
    let scattered: Vec<f32> = (0..N)
        .map(|i| f(size * (rank * N + i) + size * (size - 1) / 2))
        .collect();
    let (Some(w), Some(mut rs)) = (
        make(&wide, "wide send"),
        make(&vec![0.0; N], "scatter recv"),
    ) else {
        return;
    };
    t.ok(c.reduce_scatter(&*w, &mut *rs, ReduceOp::Sum), mode);
    same(
        t,
        &down(t, c, &rs, mode),
        &scattered,
        &format!("{mode}: reduce_scatter"),
    );
    let Some(mut sc) = make(&vec![0.0; N], "scatter recv") else {
        return;
    };
    t.ok(
        c.scatter((rank == root).then_some((*w).as_buf()), &mut *sc, root),
        mode,
    );
    let from_root: Vec<f32> = (0..N).map(|i| f(root + rank * N + i)).collect();
    same(
        t,
        &down(t, c, &sc, mode),
        &from_root,
        &format!("{mode}: scatter"),
    );
    let to_all: Vec<f32> = (0..size * N)
        .map(|j| f(rank * 10000 + (j / N) * 100 + j % N))
        .collect();
    let from_all: Vec<f32> = (0..size * N)
        .map(|j| f((j / N) * 10000 + rank * 100 + j % N))
        .collect();
    let (Some(a), Some(mut b2)) = (
        make(&to_all, "all-to-all send"),
        make(&vec![0.0; size * N], "all-to-all recv"),
    ) else {
        return;
    };
    t.ok(c.all_to_all(&*a, &mut *b2), mode);
    same(
        t,
        &down(t, c, &b2, mode),
        &from_all,
        &format!("{mode}: all_to_all"),
    );
    t.ok(c.synchronize(), mode);
}

/// The buffers of one mode: `ncclMemAlloc`, registered as `mode` says, holding `host`.
fn with_mode(t: &T, c: &NcclComm, mode: RegisterMode) {
    let name = mode.name();
    let needs = mode.needs();
    if c.library().version() < needs {
        // The typed refusal, on every rank (a window's is agreed inside the call).
        t.err(
            c.alloc_registered::<f32>(N, mode).map(|_| ()),
            &format!("{name} on NCCL {}", c.library().version()),
            |e| matches!(e, Error::Unavailable { message, .. } if message.contains(&needs.to_string()[..4])),
        );
        return;
    }
    let up = |host: &[f32]| {
        let mut b = c.alloc_registered::<f32>(host.len(), mode)?;
        device::copy_to_device(c.stream(), host, &mut b)?;
        Ok(b)
    };
    every_collective(t, c, name, &up);
    if mode == RegisterMode::Window {
        if let Some(b) = t.ok(c.alloc_symmetric::<f32>(N), "a window") {
            println!(
                "rank {}: window of {} bytes; symmetric: {}",
                c.rank(),
                b.allocated_bytes(),
                b.is_symmetric()
            );
            t.ok(b.release(), "releasing a window");
        }
    }
}

fn with_comm(t: &T, body: impl FnOnce(&NcclComm)) {
    match NcclComm::from_mpi(t.comm, None) {
        Ok(c) => {
            body(&c);
            t.ok(c.finalize(), "finalize");
        }
        Err(e) => t.fail(format!("NcclComm::from_mpi: {e}")),
    }
}

fn main() {
    if !cuda_driver_present() || collectives::nccl_sys::library().is_err() {
        println!("nccl_register: needs a CUDA driver and libnccl; skipped");
        println!("mpi-tests: 0 passed, 0 failed (no GPU)");
        return;
    }
    let cases: Vec<Case> = vec![
        case("nccl_register_none", |t| {
            with_comm(t, |c| with_mode(t, c, RegisterMode::None))
        }),
        case("nccl_register_buffer", |t| {
            with_comm(t, |c| with_mode(t, c, RegisterMode::Buffer))
        }),
        case("nccl_register_window", |t| {
            with_comm(t, |c| with_mode(t, c, RegisterMode::Window))
        }),
        case("nccl_register_cudarc_buffers", |t| {
            with_comm(t, |c| {
                let (rank, size) = (c.rank(), c.size());
                let input: Vec<f32> = (0..N).map(|i| ((rank + 1) * (i + 1)) as f32).collect();
                let summed: Vec<f32> = (0..N)
                    .map(|i| ((i + 1) * size * (size + 1) / 2) as f32)
                    .collect();
                let (Some(mut s), Some(mut r)) = (
                    t.ok(device::upload(c.stream(), &input), "upload"),
                    t.ok(device::alloc_zeros::<f32>(c.stream(), N), "alloc"),
                ) else {
                    return;
                };
                if c.library().version() < RegisterMode::Buffer.needs() {
                    t.err(c.register(&mut s).map(|_| ()), "register", |e| {
                        matches!(e, Error::Unavailable { .. })
                    });
                    return;
                }
                let (Some(sr), Some(mut rr)) = (
                    t.ok(c.register(&mut s), "register send"),
                    t.ok(c.register(&mut r), "register recv"),
                ) else {
                    return;
                };
                println!(
                    "rank {rank}: cudarc buffers registered: {}",
                    sr.is_registered()
                );
                t.ok(c.all_reduce(&sr, &mut rr, ReduceOp::Sum), "all_reduce");
                same(
                    t,
                    &down(t, c, &rr, "all_reduce"),
                    &summed,
                    "registered all_reduce",
                );
                t.ok(c.all_reduce_in_place(&mut rr, ReduceOp::Sum), "in place");
                let twice: Vec<f32> = summed.iter().map(|x| x * size as f32).collect();
                same(
                    t,
                    &down(t, c, &rr, "in place"),
                    &twice,
                    "registered all_reduce_in_place",
                );
                t.ok(rr.deregister(), "deregister recv");
                t.ok(sr.deregister(), "deregister send");
            })
        }),
    ];
    common::run(&cases)
}
