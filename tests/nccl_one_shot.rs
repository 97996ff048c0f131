//! The one-shot all-reduce between GPUs (`collectives::one_shot`) against answers computed here
//! in the kernel's order (rank 0, 1, ...; 16-bit floats summed in `f32` and rounded once), bit for
//! bit: every offered type and operation, 1 element up to the capacity, odd sizes, in place and
//! out of place; 10,000 calls back to back on changing data, every result kept; a rank that
//! never comes (others get `Timeout`, then `Unusable`). One rank per GPU:
//! `mpirun -n 4 target/release/deps/nccl_one_shot-*`. With `ONE_SHOT_EXPECT_READY=1` a path not
//! offered is a failure (set where every GPU pair has peer access); without it, the reason is
//! printed and the correctness cases pass nothing.

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use std::time::{Duration, Instant};

use collectives::backend::nccl::cuda_driver_present;
use collectives::cudarc::driver::CudaSlice;
use collectives::one_shot::{Offer, OneShot, DEFAULT_CAPACITY};
use collectives::{device, Communicator, DeviceCommunicator, Element, Error, NcclComm, ReduceOp};
use common::{case, Case, T};
use half::{bf16, f16};
use num_complex::Complex;

/// An element type with its arithmetic as the kernel does it.
trait Exact: Element + Copy {
    /// The accumulator (`f32` for 16-bit floats).
    type Acc: Copy;
    fn value(rank: usize, i: usize, seed: usize, op: ReduceOp) -> Self;
    fn load(self) -> Self::Acc;
    fn store(a: Self::Acc) -> Self;
    fn combine(a: Self::Acc, b: Self::Acc, op: ReduceOp) -> Self::Acc;
    fn divide(a: Self::Acc, n: usize) -> Self::Acc;
}

/// Small values whose products over 4 ranks stay exact and in range.
fn small(rank: usize, i: usize, seed: usize) -> i64 {
    ((rank * 7 + i * 13 + seed * 5) % 5) as i64 + 1
}

macro_rules! exact_int {
    ($t:ty) => {
        impl Exact for $t {
            type Acc = $t;
            fn value(rank: usize, i: usize, seed: usize, _op: ReduceOp) -> Self {
                small(rank, i, seed) as $t
            }
            fn load(self) -> $t {
                self
            }
            fn store(a: $t) -> Self {
                a
            }
            fn combine(a: $t, b: $t, op: ReduceOp) -> $t {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                    _ => unreachable!("integers are not averaged"),
                }
            }
            fn divide(a: $t, _n: usize) -> $t {
                a
            }
        }
    };
}
exact_int!(i8);
exact_int!(u8);
exact_int!(i32);
exact_int!(u32);
exact_int!(i64);
exact_int!(u64);

/// Floats with fractions (so sums round), near 1 for products.
fn fraction(rank: usize, i: usize, seed: usize, op: ReduceOp) -> f64 {
    let k = (rank * 31 + i * 17 + seed * 11) % 97;
    match op {
        ReduceOp::Prod => 1.0 + k as f64 / 193.0,
        _ => (k as f64 - 48.0) / 7.0 + 1e-3 * i as f64,
    }
}

macro_rules! exact_float {
    ($t:ty, $acc:ty, $from:expr, $to:expr, $of:expr) => {
        impl Exact for $t {
            type Acc = $acc;
            fn value(rank: usize, i: usize, seed: usize, op: ReduceOp) -> Self {
                $of(fraction(rank, i, seed, op))
            }
            fn load(self) -> $acc {
                $from(self)
            }
            fn store(a: $acc) -> Self {
                $to(a)
            }
            fn combine(a: $acc, b: $acc, op: ReduceOp) -> $acc {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                    _ => unreachable!(),
                }
            }
            fn divide(a: $acc, n: usize) -> $acc {
                a / n as $acc
            }
        }
    };
}
exact_float!(f32, f32, |x| x, |a| a, |v: f64| v as f32);
exact_float!(f64, f64, |x| x, |a| a, |v: f64| v);
exact_float!(f16, f32, f16::to_f32, f16::from_f32, f16::from_f64);
exact_float!(bf16, f32, bf16::to_f32, bf16::from_f32, bf16::from_f64);

/// Complex numbers: two lanes of their real type, summed lane by lane.
macro_rules! exact_complex {
    ($r:ty) => {
        impl Exact for Complex<$r> {
            type Acc = Complex<$r>;
            fn value(rank: usize, i: usize, seed: usize, op: ReduceOp) -> Self {
                Complex::new(
                    fraction(rank, i, seed, op) as $r,
                    fraction(rank + 5, i, seed + 1, op) as $r,
                )
            }
            fn load(self) -> Self {
                self
            }
            fn store(a: Self) -> Self {
                a
            }
            fn combine(a: Self, b: Self, _op: ReduceOp) -> Self {
                Complex::new(a.re + b.re, a.im + b.im)
            }
            fn divide(a: Self, n: usize) -> Self {
                Complex::new(a.re / n as $r, a.im / n as $r)
            }
        }
    };
}
exact_complex!(f32);
exact_complex!(f64);

fn input<E: Exact>(rank: usize, len: usize, seed: usize, op: ReduceOp) -> Vec<E> {
    (0..len).map(|i| E::value(rank, i, seed, op)).collect()
}

fn expected<E: Exact>(size: usize, len: usize, seed: usize, op: ReduceOp) -> Vec<E> {
    (0..len)
        .map(|i| {
            let mut acc = E::value(0, i, seed, op).load();
            for r in 1..size {
                acc = E::combine(acc, E::value(r, i, seed, op).load(), op);
            }
            if op == ReduceOp::Avg {
                acc = E::divide(acc, size);
            }
            E::store(acc)
        })
        .collect()
}

fn bits<E: Element>(v: &[E]) -> &[u8] {
    bytemuck::cast_slice(v)
}

fn same<E: Element>(t: &T, got: &[E], want: &[E], what: &str) {
    if bits(got) != bits(want) {
        let first = got
            .iter()
            .zip(want)
            .position(|(g, w)| bytemuck::bytes_of(g) != bytemuck::bytes_of(w));
        t.fail(format!(
            "{what}: wrong (first at {first:?}: got {:?}, want {:?}; lengths {} and {})",
            first.map(|i| got[i]),
            first.map(|i| want[i]),
            got.len(),
            want.len()
        ));
    }
}

/// Every rank says yes.
fn all(t: &T, yes: bool) -> bool {
    let mut v = [i32::from(yes)];
    t.comm
        .all_reduce_in_place(&mut v[..], ReduceOp::Min)
        .expect("MPI agrees");
    v[0] == 1
}

/// The path on a fresh NCCL communicator with `deadline`, or `None` (reason printed, and a
/// failure where it must be offered).
fn with_path(t: &T, deadline: Duration, body: impl FnOnce(&NcclComm, &OneShot)) {
    let Some(comm) = t.ok(NcclComm::from_mpi(t.comm, None), "NcclComm::from_mpi") else {
        return;
    };
    let comm = comm.with_timeout(deadline);
    match t.ok(OneShot::offer(&comm, DEFAULT_CAPACITY), "OneShot::offer") {
        Some(Offer::Ready(path)) => {
            body(&comm, &path);
            drop(path);
        }
        Some(Offer::NotOffered(why)) => {
            if t.rank() == 0 {
                println!("  one-shot not offered: {why}");
            }
            if std::env::var("ONE_SHOT_EXPECT_READY").as_deref() == Ok("1") {
                t.fail(format!("not offered: {why}"));
            }
        }
        None => {}
    }
    drop(comm);
}

/// One type: every offered operation, every size, in place and out of place.
fn every_case<E: Exact>(t: &T, comm: &NcclComm, path: &OneShot) {
    let (rank, size) = (comm.rank(), comm.size());
    let stream = comm.stream();
    let most = path.capacity() / std::mem::size_of::<E>();
    let sizes = [
        1,
        2,
        3,
        7,
        31,
        256,
        1000,
        4097,
        65_537.min(most),
        most - 1,
        most,
    ];
    for op in [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ] {
        if !path.offers::<E>(op) {
            continue;
        }
        for (seed, &len) in sizes.iter().enumerate() {
            let what = format!("{} {op:?} of {len}", E::NAME);
            let host = input::<E>(rank, len, seed, op);
            let want = expected::<E>(size, len, seed, op);
            let (Some(send), Some(mut recv)) = (
                t.ok(device::upload(stream, &host), "upload"),
                t.ok(device::alloc_zeros::<E>(stream, len), "alloc"),
            ) else {
                return;
            };
            t.ok(path.all_reduce(&send, &mut recv, op), &what);
            t.ok(path.synchronize(), &what);
            let got = t
                .ok(device::download(stream, &recv), "download")
                .unwrap_or_default();
            same(t, &got, &want, &format!("{what}, out of place"));
            let mut buf = send;
            t.ok(path.all_reduce_in_place(&mut buf, op), &what);
            t.ok(path.synchronize(), &what);
            let got = t
                .ok(device::download(stream, &buf), "download")
                .unwrap_or_default();
            same(t, &got, &want, &format!("{what}, in place"));
        }
    }
}

const BACK_TO_BACK: usize = 10_000;

fn back_to_back(t: &T, comm: &NcclComm, path: &OneShot) {
    let (rank, size) = (comm.rank(), comm.size());
    let stream = comm.stream();
    // Lengths that change from call to call, so that consecutive calls split the slots between
    // the thread blocks differently (a slot reused before every block of every peer left it
    // shows as a wrong element), with seven inputs of changing data.
    const LENS: [usize; 5] = [64, 1, 4099, 17, 1000];
    const MAX: usize = 4099;
    const KINDS: usize = 7;
    let len = |i: usize| LENS[i % LENS.len()];
    // Where call i's result goes: the lengths of the calls before it, summed.
    let at: Vec<usize> = (0..=BACK_TO_BACK)
        .scan(0, |next, i| {
            let here = *next;
            *next += len(i);
            Some(here)
        })
        .collect();
    let inputs: Vec<CudaSlice<f32>> = (0..KINDS)
        .filter_map(|k| {
            t.ok(
                device::upload(stream, &input::<f32>(rank, MAX, k, ReduceOp::Sum)),
                "upload",
            )
        })
        .collect();
    let Some(mut results) = t.ok(
        device::alloc_zeros::<f32>(stream, at[BACK_TO_BACK]),
        "alloc",
    ) else {
        return;
    };
    let Some(mut out) = t.ok(device::alloc_zeros::<f32>(stream, MAX), "alloc") else {
        return;
    };
    if inputs.len() != KINDS {
        return;
    }
    let start = Instant::now();
    for i in 0..BACK_TO_BACK {
        let n = len(i);
        let mut o = out.slice_mut(..n);
        if path
            .all_reduce(&inputs[i % KINDS].slice(..n), &mut o, ReduceOp::Sum)
            .is_err()
        {
            t.fail(format!("call {i} failed"));
            break;
        }
        let mut slot = results.slice_mut(at[i]..at[i] + n);
        if let Err(e) = stream.memcpy_dtod(&o, &mut slot) {
            t.fail(format!("copy {i}: {e}"));
            break;
        }
    }
    t.ok(path.synchronize(), "back to back");
    let took = start.elapsed();
    let got = t
        .ok(device::download(stream, &results), "download")
        .unwrap_or_default();
    let wants: Vec<Vec<f32>> = (0..KINDS)
        .map(|k| expected::<f32>(size, MAX, k, ReduceOp::Sum))
        .collect();
    let wrong = (0..BACK_TO_BACK)
        .filter(|&i| got.get(at[i]..at[i] + len(i)) != Some(&wants[i % KINDS][..len(i)]))
        .count();
    t.check(wrong == 0, || {
        format!("{wrong} of {BACK_TO_BACK} back-to-back results wrong")
    });
    if rank == 0 {
        println!(
            "  {BACK_TO_BACK} calls back to back (each with a copy of its result) in {:.1} ms",
            took.as_secs_f64() * 1e3
        );
    }
}

/// The last rank skips one call: the others get `Timeout` within their deadline, then
/// `Unusable`.
fn a_rank_that_never_comes(t: &T, comm: &NcclComm, path: &OneShot) {
    let (rank, size) = (comm.rank(), comm.size());
    let stream = comm.stream();
    let Some(mut buf) = t.ok(device::upload(stream, &[1.0f32; 8]), "upload") else {
        return;
    };
    if rank == size - 1 {
        return;
    }
    let start = Instant::now();
    t.ok(path.all_reduce_in_place(&mut buf, ReduceOp::Sum), "enqueue");
    let r = path.synchronize();
    let took = start.elapsed();
    if rank == 0 {
        println!(
            "  a rank that never comes: {r:?} after {:.3} s",
            took.as_secs_f64()
        );
    }
    t.err(r, "a call the last rank skips", |e| {
        matches!(e, Error::Timeout { .. })
    });
    t.check(took < Duration::from_secs(3), || {
        format!("the timeout took {took:?} for a 1 s deadline")
    });
    t.err(
        path.all_reduce_in_place(&mut buf, ReduceOp::Sum),
        "a call after the timeout",
        |e| matches!(e, Error::Unusable { .. }),
    );
}

/// Through the library's own `all_reduce`: sizes on both sides of the byte limit, out of place
/// and in place, and the exact mean of `f64` (sum, then one division) where the path takes it.
/// An NCCL communicator that takes the path in its all-reduces: the path is chosen only when
/// asked for, so the measured limit is asked for unless the run gives one (returned).
fn asking_for_the_path(t: &T) -> (collectives::Result<NcclComm>, Option<String>) {
    use collectives::backend::nccl::one_shot::{MAX_BYTES_ENV, MEASURED_MAX_BYTES};
    let given = std::env::var(MAX_BYTES_ENV).ok();
    if given.is_none() {
        std::env::set_var(MAX_BYTES_ENV, MEASURED_MAX_BYTES.to_string());
    }
    let made = NcclComm::from_mpi(t.comm, None);
    if given.is_none() {
        std::env::remove_var(MAX_BYTES_ENV);
    }
    (made, given)
}

fn inside_all_reduce(t: &T) {
    use collectives::backend::nccl::one_shot::MEASURED_MAX_BYTES;
    let (made, given) = asking_for_the_path(t);
    let Some(comm) = t.ok(made, "NcclComm::from_mpi") else {
        return;
    };
    let (rank, size) = (comm.rank(), comm.size());
    let limit = comm.one_shot_max_bytes();
    if rank == 0 {
        println!(
            "  library all_reduce: one-shot up to {limit} B ({})",
            comm.one_shot_refusal().unwrap_or("offered")
        );
    }
    if std::env::var("ONE_SHOT_EXPECT_READY").as_deref() == Ok("1") && given.is_none() {
        t.eq(&limit, &MEASURED_MAX_BYTES, "the limit asked for, offered");
    }
    let stream = comm.stream();
    let around = [
        1,
        2,
        3,
        1000,
        (limit / 4).max(4) - 1,
        (limit / 4).max(4),
        (limit / 4).max(4) + 1,
    ];
    for (seed, &len) in around.iter().enumerate() {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg] {
            let what = format!("library all_reduce {op:?} of {len} f64");
            let host = input::<f64>(rank, len, seed, op);
            let want = expected::<f64>(size, len, seed, op);
            let (Some(send), Some(mut recv)) = (
                t.ok(device::upload(stream, &host), "upload"),
                t.ok(device::alloc_zeros::<f64>(stream, len), "alloc"),
            ) else {
                return;
            };
            t.ok(comm.all_reduce(&send, &mut recv, op), &what);
            t.ok(comm.synchronize(), &what);
            let got = t
                .ok(device::download(stream, &recv), "download")
                .unwrap_or_default();
            // Above the limit NCCL reduces, in its own order and, for the mean, natively: the
            // answer is then compared within rounding.
            if len * 8 <= limit || op == ReduceOp::Max {
                same(t, &got, &want, &what);
            } else {
                let close = got.len() == want.len()
                    && got
                        .iter()
                        .zip(&want)
                        .all(|(g, w)| (g - w).abs() <= 1e-12 * w.abs().max(1.0));
                t.check(close, || {
                    format!("{what}: not within rounding of the host's")
                });
            }
            let mut buf = send;
            t.ok(comm.all_reduce_in_place(&mut buf, op), &what);
            t.ok(comm.synchronize(), &what);
            let again = t
                .ok(device::download(stream, &buf), "download")
                .unwrap_or_default();
            if len * 8 <= limit {
                t.check(again == got, || {
                    format!("{what}: in place differs from out of place")
                });
            }
        }
    }
    t.ok(comm.barrier(), "barrier");
    t.ok(comm.finalize(), "finalize");
}

/// A persistent plan that captures a CUDA graph declines the path, and says so with a typed
/// reason; the plan's runs are right, and the next blocking all-reduce takes the path again.
fn declined_inside_a_graph(t: &T) {
    use collectives::backend::nccl::one_shot::Declined;
    let Some(comm) = t.ok(asking_for_the_path(t).0, "NcclComm::from_mpi") else {
        return;
    };
    if comm.one_shot_max_bytes() == 0 {
        if t.rank() == 0 {
            println!("  one-shot not offered: {:?}", comm.one_shot_refusal());
        }
        return;
    }
    let (rank, size) = (comm.rank(), comm.size());
    let n = 64;
    let input = |k: usize| -> Vec<f32> { (0..n).map(|i| (rank * n + i + k) as f32).collect() };
    let want = |k: usize| -> Vec<f32> {
        (0..n)
            .map(|i| (0..size).map(|r| (r * n + i + k) as f32).sum())
            .collect()
    };
    let stream = comm.stream().clone();
    let (Some(mut send), Some(mut recv)) = (
        t.ok(device::upload(&stream, &input(0)), "upload"),
        t.ok(device::alloc_zeros::<f32>(&stream, n), "alloc"),
    ) else {
        return;
    };
    t.ok(
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum),
        "all_reduce",
    );
    t.ok(comm.synchronize(), "synchronize");
    t.eq(
        &comm.one_shot_declined(),
        &None,
        "a blocking all-reduce takes the path",
    );
    let r = collectives::scope(|s| {
        let Some(mut plan) = t.ok(
            comm.all_reduce_init(s, &mut send, &mut recv, ReduceOp::Sum),
            "all_reduce_init",
        ) else {
            return;
        };
        t.eq(
            &comm.one_shot_declined(),
            &Some(Declined::CapturingGraph),
            "the plan's capture into a graph",
        );
        for k in 1..4 {
            let run = (|| -> collectives::Result<()> {
                device::copy_to_device(&stream, &input(k), plan.send_mut()?)?;
                plan.start()?;
                plan.wait()?;
                let got = device::download(&stream, plan.recv()?)?;
                t.eq(&got, &want(k), &format!("the plan's run {k}"));
                Ok(())
            })();
            t.ok(run, &format!("the plan's run {k}"));
        }
    });
    t.ok(r, "scope");
    t.ok(
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum),
        "all_reduce after the plan",
    );
    t.ok(comm.synchronize(), "synchronize");
    t.eq(
        &comm.one_shot_declined(),
        &None,
        "the path again after the plan",
    );
    let got = t.ok(device::download(&stream, &recv), "download");
    t.eq(&got, &Some(want(3)), "the all-reduce after the plan");
    t.ok(comm.finalize(), "finalize");
}

fn main() {
    if !cuda_driver_present() || collectives::nccl_sys::library().is_err() {
        println!("nccl_one_shot: needs a CUDA driver and libnccl; skipped");
        println!("mpi-tests: 0 passed, 0 failed (no GPU)");
        return;
    }
    let long = Duration::from_secs(60);
    let cases: Vec<Case> = vec![
        case("one_shot_offered_alike_on_every_rank", move |t| {
            with_path(t, long, |_, path| {
                t.check(all(t, true), || "ranks disagree".to_owned());
                t.check(path.capacity() == DEFAULT_CAPACITY, || {
                    format!("capacity {}", path.capacity())
                });
            })
        }),
        case("one_shot_floats", move |t| {
            with_path(t, long, |c, p| {
                every_case::<f32>(t, c, p);
                every_case::<f64>(t, c, p);
                every_case::<f16>(t, c, p);
                every_case::<bf16>(t, c, p);
            })
        }),
        case("one_shot_integers", move |t| {
            with_path(t, long, |c, p| {
                every_case::<i8>(t, c, p);
                every_case::<u8>(t, c, p);
                every_case::<i32>(t, c, p);
                every_case::<u32>(t, c, p);
                every_case::<i64>(t, c, p);
                every_case::<u64>(t, c, p);
            })
        }),
        case("one_shot_complex_as_lanes", move |t| {
            with_path(t, long, |c, p| {
                every_case::<Complex<f32>>(t, c, p);
                every_case::<Complex<f64>>(t, c, p);
                t.check(!p.offers::<Complex<f32>>(ReduceOp::Prod), || {
                    "complex products are not lane by lane".to_owned()
                });
            })
        }),
        case("one_shot_refuses_what_it_cannot_take", move |t| {
            with_path(t, long, |c, p| {
                let stream = c.stream();
                let too_many = p.capacity() / 4 + 1;
                if let (Some(s), Some(mut r)) = (
                    t.ok(device::alloc_zeros::<f32>(stream, too_many), "alloc"),
                    t.ok(device::alloc_zeros::<f32>(stream, too_many), "alloc"),
                ) {
                    t.err(
                        p.all_reduce(&s, &mut r, ReduceOp::Sum),
                        "over capacity",
                        |e| matches!(e, Error::InvalidArgument { .. }),
                    );
                }
                if let (Some(s), Some(mut r)) = (
                    t.ok(device::alloc_zeros::<i32>(stream, 4), "alloc"),
                    t.ok(device::alloc_zeros::<i32>(stream, 5), "alloc"),
                ) {
                    t.err(
                        p.all_reduce(&s, &mut r, ReduceOp::Sum),
                        "lengths differ",
                        |e| matches!(e, Error::InvalidArgument { .. }),
                    );
                    let mut same_len = s.clone();
                    t.err(
                        p.all_reduce_in_place(&mut same_len, ReduceOp::Avg),
                        "integer average",
                        |e| matches!(e, Error::InvalidArgument { .. }),
                    );
                }
            })
        }),
        case("one_shot_inside_the_library_all_reduce", inside_all_reduce),
        case("one_shot_declined_inside_a_graph", declined_inside_a_graph),
        case("one_shot_back_to_back", move |t| {
            with_path(t, long, |c, p| back_to_back(t, c, p))
        }),
        case("one_shot_a_rank_that_never_comes", |t| {
            with_path(t, Duration::from_secs(1), |c, p| {
                a_rank_that_never_comes(t, c, p)
            })
        })
        .min_ranks(2),
    ];
    common::run(&cases)
}
