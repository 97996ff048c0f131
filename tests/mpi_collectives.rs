//! Every collective of the MPI host backend on the ranks it is launched with, for f32, f64, i32, u8 and
//! complex<f64>, checked against answers computed here from rank-dependent inputs.
//! Run: `mpirun -n N target/debug/deps/mpi_collectives-*` (or `cargo xtask test`).

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use collectives::{scope, Checked, Communicator, MpiComm, ReduceOp};
use common::suite;
use common::{case, checked, Case, T};
use num_complex::Complex;

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

fn persistent_paths(t: &T) {
    // Open MPI 4.1 has MPIX_*_init, MPI 4 has MPI_*_init: the plan uses them, and names them.
    let mut send = vec![t.rank() as f64; 4];
    let mut recv = vec![0.0; 4];
    let r = scope(|s| -> collectives::Result<()> {
        let mut plan = t
            .comm
            .all_reduce_init(s, &mut send[..], &mut recv[..], ReduceOp::Sum)?;
        match plan.path() {
            collectives::PlanPath::Persistent { function } => t
                .check(function.ends_with("Allreduce_init"), || {
                    format!("persistent all_reduce made by {function}")
                }),
            other => t.fail(format!("all_reduce_init runs as {other}, not persistent")),
        }
        // Started twice: refused on this rank, nothing issued; the first run is unaffected.
        plan.start()?;
        t.err(plan.start(), "a second start", |e| {
            matches!(
                e,
                collectives::Error::PlanActive {
                    op: "all_reduce_init",
                    ..
                }
            )
        });
        t.err(plan.recv(), "the buffers of an active plan", |e| {
            matches!(e, collectives::Error::PlanActive { .. })
        });
        plan.wait()?;
        plan.wait()?; // a wait without a run in flight returns at once
        let n = t.size() as f64;
        t.eq(
            &plan.recv()?.to_vec(),
            &vec![n * (n - 1.0) / 2.0; 4],
            "all_reduce_init",
        );
        Ok(())
    });
    t.ok(r.and_then(|x| x), "persistent path");
    // Under a deadline the plan replays the non-blocking call (MPI works on copies there).
    let Some(d) = t.ok(t.comm.dup(), "dup") else {
        return;
    };
    let d = d.with_timeout(Some(std::time::Duration::from_secs(60)));
    let r = scope(|s| -> collectives::Result<()> {
        let plan = d.all_reduce_init(s, &mut send[..], &mut recv[..], ReduceOp::Sum)?;
        t.eq(
            &plan.path(),
            &collectives::PlanPath::Replay,
            "path under a deadline",
        );
        Ok(())
    });
    t.ok(r.and_then(|x| x), "persistent path under a deadline");
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
    // The suite's calls again, through a checked communicator: agreement must not refuse them.
    suite::reductions::<f64, MpiComm>(t, t.comm);
    suite::movement::<i32, MpiComm>(t, t.comm);
    suite::uneven::<u8, MpiComm>(t, t.comm);
    suite::barrier_split_dup(t, t.comm);
    suite::non_blocking_all::<f64, MpiComm>(t, t.comm);
    suite::persistent::<f64, MpiComm>(t, t.comm);
}

/// A duplicate of the case's communicator with its own checked-mode flag set to `on`.
fn dup_with_flag(t: &T, on: bool) -> Option<MpiComm> {
    t.ok(t.comm.dup(), "dup").map(|c| c.with_checked(on))
}

fn checked_wrapper_agrees_on_good_calls(t: &T) {
    // The suite through `Checked` around a communicator whose own flag is off: the wrapper makes
    // every agreement, and must not refuse good calls or change their answers.
    let Some(inner) = dup_with_flag(t, false) else {
        return;
    };
    let c = Checked::new(inner);
    t.check(c.checked(), || "Checked says it is checked".into());
    t.check(!c.inner().checked(), || {
        "the wrapped communicator keeps its own setting".into()
    });
    suite::reductions::<f64, Checked<MpiComm>>(t, &c);
    suite::reductions::<Complex<f64>, Checked<MpiComm>>(t, &c);
    suite::movement::<i32, Checked<MpiComm>>(t, &c);
    suite::uneven::<u8, Checked<MpiComm>>(t, &c);
    suite::point_to_point::<f32, Checked<MpiComm>>(t, &c);
    suite::barrier_split_dup(t, &c);
    suite::non_blocking_all::<f64, Checked<MpiComm>>(t, &c);
    suite::persistent::<f64, Checked<MpiComm>>(t, &c);
    // Communicators made from a checked one are checked.
    if let Some(d) = t.ok(c.dup(), "dup") {
        t.check(d.checked(), || "dup of a Checked is checked".into());
    }
    if let Some(Some(s)) = t.ok(c.split(Some(0), 0), "split") {
        t.check(s.checked(), || "split of a Checked is checked".into());
    }
    let inner = c.into_inner();
    t.check(!inner.checked(), || {
        "into_inner gives the communicator back".into()
    });
}

fn checked_wrapper_agrees_once(t: &T) {
    // A wrapper around a communicator that agrees already (its flag on, or a wrapper) adds no
    // second agreement: ranks whose flags differ under the wrapper still make the same calls,
    // and a wrapper of a wrapper works like one.
    let Some(inner) = dup_with_flag(t, t.rank() % 2 == 0) else {
        return;
    };
    let c = Checked::new(inner);
    suite::reductions::<f64, Checked<MpiComm>>(t, &c);
    suite::barrier_split_dup(t, &c);
    suite::persistent::<i32, Checked<MpiComm>>(t, &c);
    let Some(inner) = dup_with_flag(t, false) else {
        return;
    };
    let cc = Checked::new(Checked::new(inner));
    t.check(cc.checked(), || "Checked<Checked<_>> is checked".into());
    suite::movement::<f64, Checked<Checked<MpiComm>>>(t, &cc);
    suite::barrier_split_dup(t, &cc);
}

fn checked_wrapper_under_a_deadline(t: &T) {
    // Under a deadline the agreement is polled like any operation; split and dup meet there
    // (an unchecked communicator meets in a polled barrier instead).
    let Some(inner) = dup_with_flag(t, false) else {
        return;
    };
    let c = Checked::new(inner.with_timeout(Some(std::time::Duration::from_secs(60))));
    suite::barrier_split_dup(t, &c);
    suite::non_blocking_all::<f64, Checked<MpiComm>>(t, &c);
    suite::persistent::<f64, Checked<MpiComm>>(t, &c);
    let Some(plain) = dup_with_flag(t, false) else {
        return;
    };
    let plain = plain.with_timeout(Some(std::time::Duration::from_secs(60)));
    suite::barrier_split_dup(t, &plain);
}

fn non_blocking_under_a_deadline(t: &T) {
    // Under a deadline MPI works on copies, polled against it: the same answers must come back.
    let Some(d) = t.ok(t.comm.dup(), "dup") else {
        return;
    };
    let d = d.with_timeout(Some(std::time::Duration::from_secs(60)));
    suite::non_blocking_all::<f64, MpiComm>(t, &d);
    suite::non_blocking_all::<Complex<f64>, MpiComm>(t, &d);
    suite::non_blocking_all::<u8, MpiComm>(t, &d);
    // Persistent plans replay the non-blocking calls there (MPI's persistent requests would keep
    // the caller's buffers past a timeout).
    suite::persistent::<f64, MpiComm>(t, &d);
    suite::persistent::<Complex<f64>, MpiComm>(t, &d);
}

/// The grouped exchange on host memory (`MpiComm::exchange_bytes`): every rank sends every rank
/// (itself included) a part whose length and bytes depend on both ranks, and two parts in a row to
/// its right neighbour, which must arrive in order; checked against the bytes computed here, with
/// and without a deadline. Parts outside their buffer or naming no rank are refused on every rank.
fn grouped_exchange(t: &T) {
    use collectives::{Error, ExchangePart};
    let (rank, size) = (t.rank(), t.size());
    let suite::ExchangeLayout {
        send,
        sends,
        want,
        recvs,
    } = suite::exchange_layout(rank, size);
    let deadline = t
        .ok(t.comm.dup(), "dup")
        .map(|d| d.with_timeout(Some(std::time::Duration::from_secs(60))));
    for (name, comm) in [
        ("no deadline", Some(t.comm)),
        ("a deadline", deadline.as_ref()),
    ] {
        let Some(comm) = comm else { continue };
        let mut recv = vec![0u8; want.len()];
        t.ok(comm.exchange_bytes(&send, &sends, &mut recv, &recvs), name);
        t.check(recv == want, || {
            format!("{name}: received {recv:?}, expected {want:?}")
        });
    }
    let mut recv = vec![0u8; want.len()];
    let right = (rank + 1) % size;
    let past = [ExchangePart {
        peer: right,
        offset: send.len() - 2,
        len: 3,
    }];
    t.err(
        t.comm.exchange_bytes(&send, &past, &mut recv, &[]),
        "a part past the send buffer",
        |e| matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("send part 0")),
    );
    let nobody = [ExchangePart {
        peer: size,
        offset: 0,
        len: 1,
    }];
    t.err(
        t.comm.exchange_bytes(&send, &[], &mut recv, &nobody),
        "a part from no rank",
        |e| matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("receive part 0")),
    );
}

/// The suite's generic tests on this backend, for one element type.
macro_rules! suite_cases {
    ($v:ty, $name:literal) => {
        [
            case(concat!("reductions_", $name), |t| {
                suite::reductions::<$v, MpiComm>(t, t.comm)
            }),
            case(concat!("movement_", $name), |t| {
                suite::movement::<$v, MpiComm>(t, t.comm)
            }),
            case(concat!("uneven_", $name), |t| {
                suite::uneven::<$v, MpiComm>(t, t.comm)
            }),
            case(concat!("point_to_point_", $name), |t| {
                suite::point_to_point::<$v, MpiComm>(t, t.comm)
            }),
            case(concat!("non_blocking_", $name), |t| {
                suite::non_blocking::<$v, MpiComm>(t, t.comm)
            }),
            case(concat!("persistent_", $name), |t| {
                suite::persistent::<$v, MpiComm>(t, t.comm)
            }),
        ]
    };
}

fn main() {
    let mut cases: Vec<Case> = Vec::new();
    cases.extend(suite_cases!(f32, "f32"));
    cases.extend(suite_cases!(f64, "f64"));
    cases.extend(suite_cases!(i32, "i32"));
    cases.extend(suite_cases!(u8, "u8"));
    cases.extend(suite_cases!(Complex<f64>, "complex_f64"));
    cases.extend([
        case("non_blocking_avg", non_blocking_avg_divides_at_completion),
        case(
            "non_blocking_under_a_deadline",
            non_blocking_under_a_deadline,
        ),
        case("barrier_split_dup", |t| suite::barrier_split_dup(t, t.comm)),
        case("grouped_exchange", grouped_exchange),
        case("ndarray_views", ndarray_views),
        case("persistent_paths", persistent_paths),
        checked(
            "checked_mode_agrees_on_good_calls",
            1,
            checked_mode_agrees_on_good_calls,
        ),
        case(
            "checked_wrapper_agrees_on_good_calls",
            checked_wrapper_agrees_on_good_calls,
        ),
        case("checked_wrapper_agrees_once", checked_wrapper_agrees_once),
        case(
            "checked_wrapper_under_a_deadline",
            checked_wrapper_under_a_deadline,
        ),
    ]);
    common::run(&cases)
}
