//! Every collective of the MPI host backend on the ranks it is launched with, for f32, f64, i32, u8 and
//! complex<f64>, checked against answers computed here from rank-dependent inputs.
//! Run: `mpirun -n N target/debug/deps/mpi_collectives-*` (or `cargo xtask test`).

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use collectives::{scope, Communicator, Element, ReduceOp};
use common::{case, checked, Case, T};
use num_complex::Complex;

/// Test values: small integers, so sums and products are exact in every type.
trait Val: Element + Copy {
    fn from_i(i: i64) -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    fn div(self, n: usize) -> Self;
    const ORDERED: bool = true;
    const AVG: bool = true;
}

macro_rules! real_val {
    ($t:ty, $avg:expr) => {
        impl Val for $t {
            fn from_i(i: i64) -> Self {
                i as $t
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn min(self, o: Self) -> Self {
                if o < self {
                    o
                } else {
                    self
                }
            }
            fn max(self, o: Self) -> Self {
                if o > self {
                    o
                } else {
                    self
                }
            }
            fn div(self, n: usize) -> Self {
                self / (n as $t)
            }
            const AVG: bool = $avg;
        }
    };
}
real_val!(f32, true);
real_val!(f64, true);
real_val!(i32, false);
real_val!(u8, false);

impl Val for Complex<f64> {
    fn from_i(i: i64) -> Self {
        Complex::new(i as f64, (i % 3) as f64 - 1.0)
    }
    fn add(self, o: Self) -> Self {
        self + o
    }
    fn mul(self, o: Self) -> Self {
        self * o
    }
    fn min(self, _: Self) -> Self {
        unreachable!("complex numbers are not ordered")
    }
    fn max(self, _: Self) -> Self {
        unreachable!("complex numbers are not ordered")
    }
    fn div(self, n: usize) -> Self {
        self / n as f64
    }
    const ORDERED: bool = false;
}

/// Input of rank `r`, element `i`, for operation `op` (products use 1 and 2 only, to stay exact).
fn input<V: Val>(op: ReduceOp, r: usize, i: usize) -> V {
    match op {
        ReduceOp::Prod => V::from_i(((r + i) % 2 + 1) as i64),
        _ => V::from_i(((r * 7 + i * 3) % 11 + 1) as i64),
    }
}

fn inputs<V: Val>(op: ReduceOp, r: usize, n: usize) -> Vec<V> {
    (0..n).map(|i| input(op, r, i)).collect()
}

/// The reduction over all ranks of element `i`, computed here.
fn reduced<V: Val>(op: ReduceOp, size: usize, i: usize) -> V {
    let mut acc = input::<V>(op, 0, i);
    for r in 1..size {
        let x = input::<V>(op, r, i);
        acc = match op {
            ReduceOp::Sum | ReduceOp::Avg => acc.add(x),
            ReduceOp::Prod => acc.mul(x),
            ReduceOp::Min => acc.min(x),
            ReduceOp::Max => acc.max(x),
            _ => unreachable!(),
        };
    }
    if op == ReduceOp::Avg {
        acc.div(size)
    } else {
        acc
    }
}

fn ops<V: Val>() -> Vec<ReduceOp> {
    let mut ops = vec![ReduceOp::Sum, ReduceOp::Prod];
    if V::ORDERED {
        ops.extend([ReduceOp::Min, ReduceOp::Max]);
    }
    if V::AVG {
        ops.push(ReduceOp::Avg);
    }
    ops
}

/// Element `i` of rank `r`'s contribution to the gathers and all-to-alls: unique per (r, i).
fn tagged<V: Val>(r: usize, i: usize) -> V {
    V::from_i((r * 100 + i) as i64 % 251)
}

const LENS: [usize; 3] = [0, 1, 37];

fn reductions<V: Val>(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    for op in ops::<V>() {
        for n in LENS {
            let expected: Vec<V> = (0..n).map(|i| reduced(op, size, i)).collect();
            let send = inputs::<V>(op, rank, n);
            let what = format!("{} n={n} {op}", V::NAME);

            let mut recv = vec![V::from_i(0); n];
            t.ok(t.comm.all_reduce(&send[..], &mut recv[..], op), &what);
            t.eq(&recv, &expected, &format!("all_reduce {what}"));

            let mut buf = send.clone();
            t.ok(t.comm.all_reduce_in_place(&mut buf[..], op), &what);
            t.eq(&buf, &expected, &format!("all_reduce_in_place {what}"));

            let root = size - 1;
            let mut recv = vec![V::from_i(0); n];
            let is_root = rank == root;
            t.ok(
                t.comm
                    .reduce(&send[..], is_root.then_some(&mut recv[..]), op, root),
                &what,
            );
            if is_root {
                t.eq(&recv, &expected, &format!("reduce {what}"));
            }

            // reduce_scatter: block b of rank r's input holds input(op, r, b * n + i).
            let send = inputs::<V>(op, rank, n * size);
            let mut recv = vec![V::from_i(0); n];
            t.ok(t.comm.reduce_scatter(&send[..], &mut recv[..], op), &what);
            let expected: Vec<V> = (0..n).map(|i| reduced(op, size, rank * n + i)).collect();
            t.eq(&recv, &expected, &format!("reduce_scatter {what}"));
        }
    }
}

fn movement<V: Val>(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    let name = V::NAME;
    for n in LENS {
        for root in [0, size - 1] {
            let mut buf: Vec<V> = if rank == root {
                (0..n).map(|i| tagged(root, i)).collect()
            } else {
                vec![V::from_i(0); n]
            };
            t.ok(t.comm.broadcast(&mut buf[..], root), "broadcast");
            let expected: Vec<V> = (0..n).map(|i| tagged(root, i)).collect();
            t.eq(
                &buf,
                &expected,
                &format!("broadcast {name} n={n} root={root}"),
            );
        }

        let send: Vec<V> = (0..n).map(|i| tagged(rank, i)).collect();
        let all: Vec<V> = (0..size)
            .flat_map(|r| (0..n).map(move |i| tagged::<V>(r, i)))
            .collect();
        let mut recv = vec![V::from_i(0); n * size];
        t.ok(t.comm.all_gather(&send[..], &mut recv[..]), "all_gather");
        t.eq(&recv, &all, &format!("all_gather {name} n={n}"));

        for root in [0, size - 1] {
            let mut recv = vec![V::from_i(0); n * size];
            let is_root = rank == root;
            t.ok(
                t.comm
                    .gather(&send[..], is_root.then_some(&mut recv[..]), root),
                "gather",
            );
            if is_root {
                t.eq(&recv, &all, &format!("gather {name} n={n} root={root}"));
            }
            let mut mine = vec![V::from_i(0); n];
            t.ok(
                t.comm
                    .scatter(is_root.then_some(&all[..]), &mut mine[..], root),
                "scatter",
            );
            t.eq(&mine, &send, &format!("scatter {name} n={n} root={root}"));
        }

        // all_to_all: block j of rank r is [tagged(r, j * n + i)]; block r of rank j receives it.
        let send: Vec<V> = (0..n * size).map(|i| tagged(rank, i)).collect();
        let mut recv = vec![V::from_i(0); n * size];
        t.ok(t.comm.all_to_all(&send[..], &mut recv[..]), "all_to_all");
        let expected: Vec<V> = (0..size)
            .flat_map(|r| (0..n).map(move |i| tagged::<V>(r, rank * n + i)))
            .collect();
        t.eq(&recv, &expected, &format!("all_to_all {name} n={n}"));
    }
}

/// Uneven counts with zero-length contributions: rank r contributes (2r) % 3 (+ `extra` on rank 1).
fn uneven_counts(size: usize, extra: usize) -> Vec<usize> {
    (0..size)
        .map(|r| (2 * r) % 3 + if r == 1 { extra } else { 0 })
        .collect()
}

fn uneven<V: Val>(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    let name = V::NAME;
    for extra in [0, 40] {
        let counts = uneven_counts(size, extra);
        let total: usize = counts.iter().sum();
        let send: Vec<V> = (0..counts[rank]).map(|i| tagged(rank, i)).collect();
        let all: Vec<V> = (0..size)
            .flat_map(|r| (0..counts[r]).map(move |i| tagged::<V>(r, i)))
            .collect();

        let mut recv = vec![V::from_i(0); total];
        t.ok(
            t.comm.all_gather_v(&send[..], &mut recv[..], &counts),
            "all_gather_v",
        );
        t.eq(
            &recv,
            &all,
            &format!("all_gather_v {name} counts={counts:?}"),
        );

        for root in [0, size - 1] {
            let is_root = rank == root;
            let mut recv = vec![V::from_i(0); total];
            t.ok(
                t.comm
                    .gather_v(&send[..], is_root.then_some(&mut recv[..]), &counts, root),
                "gather_v",
            );
            if is_root {
                t.eq(
                    &recv,
                    &all,
                    &format!("gather_v {name} counts={counts:?} root={root}"),
                );
            }
            let mut mine = vec![V::from_i(0); counts[rank]];
            t.ok(
                t.comm
                    .scatter_v(is_root.then_some(&all[..]), &mut mine[..], &counts, root),
                "scatter_v",
            );
            t.eq(
                &mine,
                &send,
                &format!("scatter_v {name} counts={counts:?} root={root}"),
            );
        }

        // all_to_all_v: rank r sends (r + j + extra) % 4 elements to rank j, zeros included.
        let count = |from: usize, to: usize| (from + to + extra) % 4;
        let send_counts: Vec<usize> = (0..size).map(|j| count(rank, j)).collect();
        let recv_counts: Vec<usize> = (0..size).map(|i| count(i, rank)).collect();
        // Element k of the block from r to j is tagged(r, 10 * j + k).
        let send: Vec<V> = (0..size)
            .flat_map(|j| (0..count(rank, j)).map(move |k| tagged::<V>(rank, 10 * j + k)))
            .collect();
        let expected: Vec<V> = (0..size)
            .flat_map(|i| (0..count(i, rank)).map(move |k| tagged::<V>(i, 10 * rank + k)))
            .collect();
        let mut recv = vec![V::from_i(0); expected.len()];
        t.ok(
            t.comm
                .all_to_all_v(&send[..], &send_counts, &mut recv[..], &recv_counts),
            "all_to_all_v",
        );
        t.eq(
            &recv,
            &expected,
            &format!("all_to_all_v {name} extra={extra}"),
        );
    }
}

fn point_to_point<V: Val>(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    for n in LENS {
        let send: Vec<V> = (0..n).map(|i| tagged(rank, i)).collect();
        let from_prev: Vec<V> = (0..n).map(|i| tagged(prev, i)).collect();
        let mut recv = vec![V::from_i(0); n];
        t.ok(
            t.comm.send_recv(&send[..], next, &mut recv[..], prev, 7),
            "send_recv",
        );
        t.eq(&recv, &from_prev, &format!("send_recv {} n={n}", V::NAME));

        // Blocking ring: even ranks send first, odd ranks receive first (a single rank talks to itself
        // through the non-blocking test below instead).
        if size > 1 {
            let mut recv = vec![V::from_i(0); n];
            if rank % 2 == 0 {
                t.ok(t.comm.send(&send[..], next, 3), "send");
                t.ok(t.comm.recv(&mut recv[..], prev, 3), "recv");
            } else {
                t.ok(t.comm.recv(&mut recv[..], prev, 3), "recv");
                t.ok(t.comm.send(&send[..], next, 3), "send");
            }
            t.eq(
                &recv,
                &from_prev,
                &format!("send/recv ring {} n={n}", V::NAME),
            );
        }
    }
}

fn non_blocking<V: Val>(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    let n = 1000;
    let op = ReduceOp::Sum;
    let send = inputs::<V>(op, rank, n);
    let mut recv = vec![V::from_i(0); n];
    let mut bcast: Vec<V> = if rank == 0 {
        (0..n).map(|i| tagged(0, i)).collect()
    } else {
        vec![V::from_i(0); n]
    };
    let mine: Vec<V> = (0..7).map(|i| tagged(rank, i)).collect();
    let mut gathered = vec![V::from_i(0); 7 * size];
    let ring_send: Vec<V> = (0..5).map(|i| tagged(rank, i)).collect();
    let mut ring_recv = vec![V::from_i(0); 5];
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    let computed = scope(|s| {
        let reduce = t.ok(
            t.comm.i_all_reduce(s, &send[..], &mut recv[..], op),
            "i_all_reduce",
        );
        let bc = t.ok(t.comm.i_broadcast(s, &mut bcast[..], 0), "i_broadcast");
        let ga = t.ok(
            t.comm.i_all_gather(s, &mine[..], &mut gathered[..]),
            "i_all_gather",
        );
        let rr = t.ok(t.comm.i_recv(s, &mut ring_recv[..], prev, 11), "i_recv");
        let ss = t.ok(t.comm.i_send(s, &ring_send[..], next, 11), "i_send");
        // Compute while the operations are in flight.
        let busy: f64 = (1..=200_000u32).map(|k| 1.0 / f64::from(k)).sum();
        if let Some(mut r) = reduce {
            // Poll, then wait: both must work.
            let _ = t.ok(r.test(), "test");
            t.ok(r.wait(), "wait i_all_reduce");
        }
        for (r, what) in [
            (bc, "i_broadcast"),
            (ga, "i_all_gather"),
            (rr, "i_recv"),
            (ss, "i_send"),
        ] {
            if let Some(r) = r {
                t.ok(r.wait(), what);
            }
        }
        busy
    });
    let busy = t.ok(computed, "scope").unwrap_or(0.0);
    t.check(busy > 12.0, || format!("computation in flight gave {busy}"));
    let expected: Vec<V> = (0..n).map(|i| reduced(op, size, i)).collect();
    t.eq(&recv, &expected, &format!("i_all_reduce {}", V::NAME));
    let expected: Vec<V> = (0..n).map(|i| tagged(0, i)).collect();
    t.eq(&bcast, &expected, "i_broadcast");
    let expected: Vec<V> = (0..size)
        .flat_map(|r| (0..7).map(move |i| tagged::<V>(r, i)))
        .collect();
    t.eq(&gathered, &expected, "i_all_gather");
    let expected: Vec<V> = (0..5).map(|i| tagged(prev, i)).collect();
    t.eq(&ring_recv, &expected, "i_recv ring");
}

fn non_blocking_avg_divides_at_completion(t: &T) {
    let size = t.size();
    let send = [t.rank() as f64; 3];
    let mut recv = vec![0.0; 3];
    let r = scope(|s| {
        let req = t
            .comm
            .i_all_reduce(s, &send[..], &mut recv[..], ReduceOp::Avg)?;
        req.wait()
    });
    t.ok(r.and_then(|x| x), "i_all_reduce avg");
    let mean = (0..size).map(|r| r as f64).sum::<f64>() / size as f64;
    t.eq(&recv, &vec![mean; 3], "i_all_reduce avg");
    // A request left to the scope completes (and divides) when the scope ends.
    let mut recv = vec![0.0; 3];
    let r = scope(|s| {
        t.comm
            .i_all_reduce(s, &send[..], &mut recv[..], ReduceOp::Avg)
            .map(drop)
    });
    t.ok(r.and_then(|x| x), "i_all_reduce avg left to the scope");
    t.eq(&recv, &vec![mean; 3], "i_all_reduce avg left to the scope");
}

fn barrier_split_dup(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    t.ok(t.comm.barrier(), "barrier");
    // Even and odd ranks, each ordered by descending world rank.
    let Some(Some(sub)) = t.ok(
        t.comm.split(Some((rank % 2) as u32), -(rank as i32)),
        "split",
    ) else {
        t.fail("split returned no communicator".into());
        return;
    };
    let members: Vec<usize> = (0..size).filter(|r| r % 2 == rank % 2).rev().collect();
    t.eq(&sub.size(), &members.len(), "split size");
    t.eq(
        &Some(sub.rank()),
        &members.iter().position(|&r| r == rank),
        "split rank",
    );
    let mut sum = [0i64];
    t.ok(
        sub.all_reduce(&[rank as i64][..], &mut sum[..], ReduceOp::Sum),
        "all_reduce on split",
    );
    t.eq(
        &sum[0],
        &members.iter().map(|&r| r as i64).sum::<i64>(),
        "all_reduce on split",
    );
    let mut order = vec![0i64; members.len()];
    t.ok(
        sub.all_gather(&[rank as i64][..], &mut order[..]),
        "all_gather on split",
    );
    t.eq(
        &order,
        &members.iter().map(|&r| r as i64).collect::<Vec<_>>(),
        "split order by key",
    );

    // A rank passing no color takes part but joins nothing.
    let color = if rank == 0 { None } else { Some(1) };
    match t.ok(t.comm.split(color, 0), "split with no color") {
        Some(None) => t.check(rank == 0, || "only rank 0 passed no color".into()),
        Some(Some(c)) => t.eq(&c.size(), &(size - 1), "split without rank 0"),
        None => {}
    }

    let Some(d) = t.ok(t.comm.dup(), "dup") else {
        return;
    };
    t.eq(&(d.rank(), d.size()), &(rank, size), "dup rank and size");
    let mut x = vec![1u32; 4];
    t.ok(
        d.all_reduce_in_place(&mut x[..], ReduceOp::Sum),
        "all_reduce on dup",
    );
    t.eq(&x, &vec![size as u32; 4], "all_reduce on dup");
    t.ok(d.finalize(), "finalize");
}

fn ndarray_views(t: &T) {
    use collectives::{HostArray, HostArrayMut};
    let size = t.size();
    let a =
        ndarray::Array2::<f64>::from_shape_fn((3, 4), |(i, j)| (t.rank() * 12 + i * 4 + j) as f64);
    let mut b = ndarray::Array2::<f64>::zeros((3, 4));
    let (Some(send), Some(recv)) = (
        t.ok(a.host_slice(), "host_slice"),
        t.ok(b.host_slice_mut(), "host_slice_mut"),
    ) else {
        return;
    };
    t.ok(
        t.comm.all_reduce(send, recv, ReduceOp::Sum),
        "all_reduce of arrays",
    );
    let expected = ndarray::Array2::<f64>::from_shape_fn((3, 4), |(i, j)| {
        (0..size).map(|r| (r * 12 + i * 4 + j) as f64).sum()
    });
    t.eq(&b, &expected, "all_reduce of arrays");
}

fn checked_mode_agrees_on_good_calls(t: &T) {
    // The whole suite's calls again, through a checked communicator: agreement must not refuse them.
    reductions::<f64>(t);
    movement::<i32>(t);
    uneven::<u8>(t);
    barrier_split_dup(t);
}

fn main() {
    let cases: Vec<Case> = vec![
        case("reductions_f32", reductions::<f32>),
        case("reductions_f64", reductions::<f64>),
        case("reductions_i32", reductions::<i32>),
        case("reductions_u8", reductions::<u8>),
        case("reductions_complex_f64", reductions::<Complex<f64>>),
        case("movement_f32", movement::<f32>),
        case("movement_f64", movement::<f64>),
        case("movement_i32", movement::<i32>),
        case("movement_u8", movement::<u8>),
        case("movement_complex_f64", movement::<Complex<f64>>),
        case("uneven_f32", uneven::<f32>),
        case("uneven_f64", uneven::<f64>),
        case("uneven_i32", uneven::<i32>),
        case("uneven_u8", uneven::<u8>),
        case("uneven_complex_f64", uneven::<Complex<f64>>),
        case("point_to_point_f32", point_to_point::<f32>),
        case("point_to_point_f64", point_to_point::<f64>),
        case("point_to_point_i32", point_to_point::<i32>),
        case("point_to_point_u8", point_to_point::<u8>),
        case("point_to_point_complex_f64", point_to_point::<Complex<f64>>),
        case("non_blocking_f32", non_blocking::<f32>),
        case("non_blocking_f64", non_blocking::<f64>),
        case("non_blocking_i32", non_blocking::<i32>),
        case("non_blocking_u8", non_blocking::<u8>),
        case("non_blocking_complex_f64", non_blocking::<Complex<f64>>),
        case("non_blocking_avg", non_blocking_avg_divides_at_completion),
        case("barrier_split_dup", barrier_split_dup),
        case("ndarray_views", ndarray_views),
        checked(
            "checked_mode_agrees_on_good_calls",
            1,
            checked_mode_agrees_on_good_calls,
        ),
    ];
    common::run(&cases)
}
