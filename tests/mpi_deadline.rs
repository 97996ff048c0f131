//! Deadlines on the MPI host backend: every operation is still correct when it runs as its polled
//! non-blocking twin, and a peer that is late, silent or never calls makes the other ranks return
//! `Error::Timeout` within the deadline plus one second, after which the communicator answers
//! `Error::Unusable` at once. The rank that plays the dead peer stays in a plain sleep (no MPI call)
//! and then takes part in the runner's bookkeeping again, so the job ends normally and `mpirun`
//! exits 0; the timed-out operations stay in flight inside MPI, on copies it owns. A rank that really
//! leaves the job (exit without `MPI_Finalize`) is `mpi_dead_peer`'s case.
//! Run: `mpirun -n N target/debug/deps/mpi_deadline-*` (or `cargo xtask test`).

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use std::time::{Duration, Instant};

use collectives::{scope, Communicator, Error, MpiComm, ReduceOp};
use common::{case, checked, suite, Case, T};

/// The deadline of the cases that wait for a missing peer.
const DEADLINE: Duration = Duration::from_secs(1);
/// How long the missing peer stays away: well past the deadline.
const AWAY: Duration = Duration::from_millis(2500);
/// A deadline that correct calls never come near.
const GENEROUS: Duration = Duration::from_secs(60);
/// The rank that plays the dead or late peer.
const ABSENT: usize = 1;

/// A duplicate of the test's communicator with `deadline` (collective).
fn with_deadline(t: &T, deadline: Duration) -> Option<MpiComm> {
    t.ok(t.comm.dup(), "dup")
        .map(|c| c.with_timeout(Some(deadline)))
}

/// `r` is `Err(Timeout { op, after: DEADLINE })` and took at least the deadline and less than the
/// deadline plus one second.
fn timed_out<V: std::fmt::Debug>(
    t: &T,
    r: Result<V, Error>,
    took: Duration,
    op: &'static str,
    what: &str,
) {
    t.err(
        r,
        what,
        |e| matches!(e, Error::Timeout { op: o, after } if *o == op && *after == DEADLINE),
    );
    t.check(took >= DEADLINE, || {
        format!("{what}: returned after {took:?}, before the deadline")
    });
    t.check(took < DEADLINE + Duration::from_secs(1), || {
        format!("{what}: returned after {took:?}, more than the deadline plus 1 s")
    });
    if t.rank() == 0 {
        println!(
            "  {what}: Err(Timeout) after {:.3} s (deadline {DEADLINE:?})",
            took.as_secs_f64()
        );
    }
}

/// After a timeout in `timed_out_op`, every operation on `c` is refused at once (this rank's own
/// argument errors first).
fn refused(t: &T, c: &MpiComm, timed_out_op: &'static str) {
    let unusable = |op: &'static str| {
        move |e: &Error| {
            matches!(e, Error::Unusable { op: o, timed_out, after }
                if *o == op && *timed_out == timed_out_op && *after == DEADLINE)
        }
    };
    t.check(!c.is_usable(), || "is_usable() after a timeout".into());
    let start = Instant::now();
    let send = [1.0f64; 4];
    let mut recv = [0.0f64; 4];
    t.err(c.barrier(), "barrier after timeout", unusable("barrier"));
    t.err(
        c.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum),
        "all_reduce after timeout",
        unusable("all_reduce"),
    );
    t.err(
        c.send(&send[..], 0, 5),
        "send after timeout",
        unusable("send"),
    );
    t.err(
        c.recv(&mut recv[..], 0, 5),
        "recv after timeout",
        unusable("recv"),
    );
    t.err(
        c.send_recv(&send[..], 0, &mut recv[..], 0, 5),
        "send_recv after timeout",
        unusable("send_recv"),
    );
    t.err(c.dup(), "dup after timeout", unusable("dup"));
    t.err(
        c.split(Some(0), 0),
        "split after timeout",
        unusable("split"),
    );
    let r = scope(|s| c.i_send(s, &send[..], 0, 5).map(drop));
    t.err(
        r.and_then(|x| x),
        "i_send after timeout",
        unusable("i_send"),
    );
    // This rank's own argument error still comes first.
    let mut three = [0.0f64; 3];
    t.err(
        c.all_reduce(&send[..], &mut three[..], ReduceOp::Sum),
        "bad all_reduce after timeout",
        |e| matches!(e, Error::InvalidArgument { .. }),
    );
    let took = start.elapsed();
    t.check(took < Duration::from_millis(100), || {
        format!("refusing 10 calls took {took:?}: not at once")
    });
}

/// Every operation through the polled path gives the answers of the blocking one.
fn polled_path_is_correct(t: &T) {
    let Some(c) = with_deadline(t, GENEROUS) else {
        return;
    };
    t.eq(&c.timeout(), &Some(GENEROUS), "timeout()");
    suite::reductions::<f64, MpiComm>(t, &c);
    suite::reductions::<i32, MpiComm>(t, &c);
    suite::movement::<f32, MpiComm>(t, &c);
    suite::uneven::<u8, MpiComm>(t, &c);
    suite::point_to_point::<f64, MpiComm>(t, &c);
    suite::non_blocking::<f64, MpiComm>(t, &c);
    suite::barrier_split_dup(t, &c);
    if let Some(d) = t.ok(c.dup(), "dup") {
        t.eq(&d.timeout(), &Some(GENEROUS), "dup inherits the deadline");
    }
    if let Some(Some(s)) = t.ok(c.split(Some(0), 0), "split") {
        t.eq(&s.timeout(), &Some(GENEROUS), "split inherits the deadline");
    }
    t.check(c.is_usable(), || "usable after correct calls".into());
}

/// Checked mode's agreement runs through the polled path too and still refuses bad calls.
fn checked_agreement_with_deadline(t: &T) {
    let Some(c) = with_deadline(t, GENEROUS) else {
        return;
    };
    suite::reductions::<f64, MpiComm>(t, &c);
    suite::uneven::<i32, MpiComm>(t, &c);
    // Rank 0 asks for another root: every rank gets Mismatch, none times out.
    let root = usize::from(t.rank() == 0 && t.size() > 1);
    let mut buf = vec![0u8; 3];
    let r = c.broadcast(&mut buf[..], root);
    if t.size() > 1 {
        t.err(r, "broadcast with two roots", |e| {
            matches!(e, Error::Mismatch { field: "root", .. })
        });
    } else {
        t.ok(r, "broadcast");
    }
    t.check(c.is_usable(), || "usable after a mismatch".into());
}

/// A receive nobody sends to (on any number of ranks, one included): the blocking receive and a
/// request's wait both time out, and the communicator is refused afterwards.
fn receive_without_sender(t: &T) {
    let Some(c) = with_deadline(t, DEADLINE) else {
        return;
    };
    let me = t.rank();
    let mut buf = vec![0i64; 8];
    let start = Instant::now();
    let r = c.recv(&mut buf[..], me, 77);
    timed_out(t, r, start.elapsed(), "recv", "recv from nobody");
    t.eq(
        &buf,
        &vec![0i64; 8],
        "recv buffer untouched after the timeout",
    );
    refused(t, &c, "recv");

    let Some(c) = with_deadline(t, DEADLINE) else {
        return;
    };
    let mut buf = vec![0i64; 8];
    let mut took = Duration::ZERO;
    let r = scope(|s| {
        let request = c.i_recv(s, &mut buf[..], me, 78)?;
        let start = Instant::now();
        let r = request.wait();
        took = start.elapsed();
        r
    });
    timed_out(
        t,
        r.and_then(|x| x),
        took,
        "i_recv",
        "i_recv wait for nobody",
    );
    refused(t, &c, "i_recv");
}

/// (a) Rank 1 sleeps past the deadline before an all-reduce: the others return `Timeout` within the
/// deadline plus one second and are refused afterwards. Rank 1 then makes its call, which completes
/// with the right sum (the others' contributions are still in flight in MPI) or times out itself.
fn late_rank(t: &T) {
    let Some(c) = with_deadline(t, DEADLINE) else {
        return;
    };
    let (rank, size) = (t.rank(), t.size());
    let send = vec![rank as f64 + 1.0; 16];
    let mut recv = vec![0.0; 16];
    if rank == ABSENT {
        std::thread::sleep(AWAY);
        let r = c.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum);
        println!("  the late rank's own all_reduce: {r:?}");
        match r {
            Ok(()) => {
                let total = (size * (size + 1) / 2) as f64;
                t.eq(&recv, &vec![total; 16], "the late rank's sum");
            }
            Err(Error::Timeout {
                op: "all_reduce", ..
            }) => refused(t, &c, "all_reduce"),
            Err(e) => t.fail(format!("the late rank: unexpected error {e}")),
        }
        return;
    }
    let start = Instant::now();
    let r = c.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum);
    timed_out(
        t,
        r,
        start.elapsed(),
        "all_reduce",
        "all_reduce with a late rank",
    );
    t.eq(&recv, &vec![0.0; 16], "recv untouched after the timeout");
    refused(t, &c, "all_reduce");
}

/// (b) Rank 1 never calls (it stays in a plain sleep, as a dead or stuck process would, then leaves
/// the communicator alone): a barrier times out on the others.
fn silent_rank_barrier(t: &T) {
    let Some(c) = with_deadline(t, DEADLINE) else {
        return;
    };
    if t.rank() == ABSENT {
        std::thread::sleep(AWAY);
        return;
    }
    let start = Instant::now();
    let r = c.barrier();
    timed_out(t, r, start.elapsed(), "barrier", "barrier without rank 1");
    refused(t, &c, "barrier");
}

/// (b) in checked mode: the agreement's all-gather, the first exchange of the call, is where the
/// missing rank is noticed; it times out under the collective's name.
fn silent_rank_checked(t: &T) {
    let Some(c) = with_deadline(t, DEADLINE) else {
        return;
    };
    t.check(c.checked(), || "the case runs in checked mode".into());
    if t.rank() == ABSENT {
        std::thread::sleep(AWAY);
        return;
    }
    let send = vec![1i32; 5];
    let mut recv = vec![0i32; 5 * t.size()];
    let start = Instant::now();
    let r = c.all_gather(&send[..], &mut recv[..]);
    timed_out(
        t,
        r,
        start.elapsed(),
        "all_gather",
        "checked all_gather without rank 1",
    );
    refused(t, &c, "all_gather");
}

/// (b) for a request: the wait of a non-blocking all-reduce times out; the scope ends normally.
fn silent_rank_request(t: &T) {
    let Some(c) = with_deadline(t, DEADLINE) else {
        return;
    };
    if t.rank() == ABSENT {
        std::thread::sleep(AWAY);
        return;
    }
    let send = vec![2.0f32; 32];
    let mut recv = vec![0.0f32; 32];
    let mut took = Duration::ZERO;
    let r = scope(|s| {
        let request = c.i_all_reduce(s, &send[..], &mut recv[..], ReduceOp::Sum)?;
        let start = Instant::now();
        let r = request.wait();
        took = start.elapsed();
        r
    });
    timed_out(
        t,
        r.and_then(|x| x),
        took,
        "i_all_reduce",
        "i_all_reduce wait without rank 1",
    );
    t.eq(&recv, &vec![0.0f32; 32], "recv untouched after the timeout");
    refused(t, &c, "i_all_reduce");
}

/// `COLLECTIVES_TIMEOUT` sets the deadline of new communicators; unset, there is none.
fn deadline_from_the_environment(t: &T) {
    let world = mpi::topology::SimpleCommunicator::world();
    std::env::set_var(collectives::deadline::TIMEOUT_ENV, " 7.5 ");
    let c = t.ok(MpiComm::from_rsmpi(&world), "from_rsmpi");
    t.eq(
        &c.map(|c| c.timeout()),
        &Some(Some(Duration::from_millis(7500))),
        "COLLECTIVES_TIMEOUT=7.5",
    );
    std::env::set_var(collectives::deadline::TIMEOUT_ENV, "0");
    let c = t.ok(MpiComm::from_rsmpi(&world), "from_rsmpi");
    t.eq(
        &c.map(|c| c.timeout()),
        &Some(None),
        "COLLECTIVES_TIMEOUT=0",
    );
    std::env::remove_var(collectives::deadline::TIMEOUT_ENV);
    let c = t.ok(MpiComm::from_rsmpi(&world), "from_rsmpi");
    t.eq(
        &c.map(|c| c.timeout()),
        &Some(None),
        "COLLECTIVES_TIMEOUT unset",
    );
}

/// What the polled path costs per small all-reduce, printed (the answer is checked, not the time).
fn polling_cost(t: &T) {
    const ROUNDS: usize = 2000;
    let Some(polled) = with_deadline(t, GENEROUS) else {
        return;
    };
    let Some(blocking) = t.ok(t.comm.dup(), "dup").map(|c| c.with_timeout(None)) else {
        return;
    };
    let send = vec![1.0f64; 8];
    let mut recv = vec![0.0f64; 8];
    let mut per_call = Vec::new();
    for c in [&blocking, &polled] {
        t.ok(c.barrier(), "barrier");
        let start = Instant::now();
        for _ in 0..ROUNDS {
            if t.ok(
                c.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum),
                "all_reduce",
            )
            .is_none()
            {
                return;
            }
        }
        per_call.push(start.elapsed().as_secs_f64() / ROUNDS as f64 * 1e6);
        t.eq(&recv, &vec![t.size() as f64; 8], "sum");
    }
    if t.rank() == 0 {
        println!(
            "  all_reduce of 8 f64 on {} ranks: {:.2} us blocking, {:.2} us polled against a deadline",
            t.size(),
            per_call[0],
            per_call[1]
        );
    }
}

fn main() {
    let cases: Vec<Case> = vec![
        case("polled_path_is_correct", polled_path_is_correct),
        checked(
            "checked_agreement_with_deadline",
            1,
            checked_agreement_with_deadline,
        ),
        case("receive_without_sender", receive_without_sender),
        case(
            "deadline_from_the_environment",
            deadline_from_the_environment,
        ),
        case("polling_cost", polling_cost),
        case("late_rank", late_rank).min_ranks(2),
        case("silent_rank_barrier", silent_rank_barrier).min_ranks(2),
        checked("silent_rank_checked", 2, silent_rank_checked),
        case("silent_rank_request", silent_rank_request).min_ranks(2),
    ];
    common::run(&cases)
}
