//! `wait_all` on the MPI host backend: a set of requests completes together (one `MPI_Waitall` on
//! their MPI requests, `MPI_Testall` polled under a deadline) with the bytes each operation must
//! deliver; under a deadline, a peer that never sends makes `wait_all` return `Error::Timeout`
//! within the deadline plus one second, and the communicator answers `Error::Unusable` afterwards,
//! while the operations of the set that did complete are finished (copied back). The rank that plays
//! the silent peer stays in a plain sleep (no MPI call), as in `mpi_deadline`.
//! Run: `mpirun -n N target/debug/deps/mpi_wait_all-*` (or `cargo xtask test`).

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use std::time::{Duration, Instant};

use collectives::{scope, wait_all, Communicator, Error, MpiComm, ReduceOp, Request};
use common::{case, Case, T};

/// The deadline of the case with a silent peer.
const DEADLINE: Duration = Duration::from_secs(1);
/// How long the silent peer stays away: well past the deadline.
const AWAY: Duration = Duration::from_millis(2500);
/// A deadline that correct calls never come near.
const GENEROUS: Duration = Duration::from_secs(60);
/// The rank that plays the silent peer.
const ABSENT: usize = 1;
/// The sizes of the messages of one window, in bytes: empty, odd, around the eager limits.
const SIZES: [usize; 6] = [0, 1, 7, 1000, 4096 + 3, 100_003];

/// The byte `i` of message `k` from rank `from` to rank `to`.
fn byte(from: usize, to: usize, k: usize, i: usize) -> u8 {
    (from * 31 + to * 7 + k * 13 + i) as u8
}

fn message(from: usize, to: usize, k: usize) -> Vec<u8> {
    (0..SIZES[k]).map(|i| byte(from, to, k, i)).collect()
}

/// A duplicate of the test's communicator with `deadline` (collective).
fn with_deadline(t: &T, deadline: Option<Duration>) -> Option<MpiComm> {
    t.ok(t.comm.dup(), "dup").map(|c| c.with_timeout(deadline))
}

/// Every rank sends every message of [`SIZES`] to every rank (itself included) and receives as
/// many, the whole window completed by one `wait_all` (or, with `by_scope`, by the scope's end);
/// the bytes are checked.
fn window(t: &T, c: &MpiComm, by_scope: bool, what: &str) {
    let (rank, size) = (c.rank(), c.size());
    let sends: Vec<Vec<Vec<u8>>> = (0..size)
        .map(|to| (0..SIZES.len()).map(|k| message(rank, to, k)).collect())
        .collect();
    let mut recvs: Vec<Vec<Vec<u8>>> = (0..size)
        .map(|_| SIZES.iter().map(|&n| vec![0xA5u8; n]).collect())
        .collect();
    let r = scope(|s| -> collectives::Result<()> {
        let mut set: Vec<Request<'_>> = Vec::new();
        for (from, bufs) in recvs.iter_mut().enumerate() {
            for (k, b) in bufs.iter_mut().enumerate() {
                set.push(c.i_recv(s, &mut b[..], from, k as i32)?);
            }
        }
        for (to, msgs) in sends.iter().enumerate() {
            for (k, m) in msgs.iter().enumerate() {
                set.push(c.i_send(s, &m[..], to, k as i32)?);
            }
        }
        if by_scope {
            drop(set);
            Ok(())
        } else {
            wait_all(set)
        }
    });
    if t.ok(r.and_then(|x| x), what).is_none() {
        return;
    }
    for (from, bufs) in recvs.iter().enumerate() {
        for (k, b) in bufs.iter().enumerate() {
            t.eq(
                b,
                &message(from, rank, k),
                &format!("{what}: message {k} from rank {from}"),
            );
        }
    }
}

/// A window of sends and receives of different sizes, completed by `wait_all`, without and with a
/// deadline (the copies MPI works on under a deadline are copied back after the `MPI_Testall`).
fn window_of_sizes(t: &T) {
    for (deadline, what) in [
        (None, "window"),
        (Some(GENEROUS), "window under a deadline"),
    ] {
        if let Some(c) = with_deadline(t, deadline) {
            window(t, &c, false, what);
            window(t, &c, false, &format!("{what}, again"));
            t.check(c.is_usable(), || format!("{what}: usable afterwards"));
        }
    }
}

/// The scope's end completes a window of dropped requests through the same path.
fn window_by_scope_end(t: &T) {
    for (deadline, what) in [
        (None, "scope end"),
        (Some(GENEROUS), "scope end under a deadline"),
    ] {
        if let Some(c) = with_deadline(t, deadline) {
            window(t, &c, true, what);
        }
    }
}

/// One set of point-to-point operations, `send_recv` pairs and collectives, on two communicators
/// (one with a deadline, one without): every result is right, the finishing steps included (the
/// division of an `Avg`, the length check of a receive).
fn mixed_set(t: &T) {
    let (Some(plain), Some(timed)) = (with_deadline(t, None), with_deadline(t, Some(GENEROUS)))
    else {
        return;
    };
    let (rank, size) = (t.rank(), t.size());
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    let send = vec![rank as f64 + 1.0; 33];
    let mut avg = vec![0.0f64; 33];
    let mut sum = vec![0i32; 5];
    let mine = vec![rank as i32 + 1; 5];
    let ring_out = message(rank, next, 4);
    let mut ring_in = vec![0u8; SIZES[4]];
    let pair_out = vec![rank as u32; 300];
    let mut pair_in = vec![0u32; 300];
    let r = scope(|s| -> collectives::Result<()> {
        let set = vec![
            plain.i_all_reduce(s, &send[..], &mut avg[..], ReduceOp::Avg)?,
            timed.i_all_reduce(s, &mine[..], &mut sum[..], ReduceOp::Sum)?,
            plain.i_barrier(s)?,
            timed.i_recv(s, &mut ring_in[..], prev, 9)?,
            timed.i_send(s, &ring_out[..], next, 9)?,
            plain.i_send_recv(s, &pair_out[..], next, &mut pair_in[..], prev, 10)?,
        ];
        wait_all(set)
    });
    if t.ok(r.and_then(|x| x), "mixed set").is_none() {
        return;
    }
    let mean = (size + 1) as f64 / 2.0;
    t.eq(&avg, &vec![mean; 33], "Avg finished after wait_all");
    let total = (size * (size + 1) / 2) as i32;
    t.eq(&sum, &vec![total; 5], "Sum");
    t.eq(&ring_in, &message(prev, rank, 4), "ring message");
    t.eq(&pair_in, &vec![prev as u32; 300], "send_recv pair");

    // A receive whose message is shorter than its buffer fails its length check in the set; the
    // other operations of the set still complete.
    let short = vec![3u8; 10];
    let mut long = vec![0u8; 11];
    let other_out = vec![4u8; 6];
    let mut other_in = vec![0u8; 6];
    let r = scope(|s| -> collectives::Result<()> {
        let set = vec![
            plain.i_recv(s, &mut long[..], prev, 11)?,
            plain.i_send(s, &short[..], next, 11)?,
            plain.i_recv(s, &mut other_in[..], prev, 12)?,
            plain.i_send(s, &other_out[..], next, 12)?,
        ];
        wait_all(set)
    });
    t.err(r.and_then(|x| x), "a short message in the set", |e| {
        !matches!(e, Error::Timeout { .. } | Error::Unusable { .. })
    });
    t.eq(&other_in, &other_out, "the rest of the set completed");
}

/// An empty set, and sets of requests that are already complete (tested to completion, or whose
/// set is waited for after they completed in MPI), return at once with the right bytes.
fn empty_and_completed(t: &T) {
    for deadline in [None, Some(GENEROUS)] {
        let Some(c) = with_deadline(t, deadline) else {
            return;
        };
        let what = if deadline.is_some() {
            " (deadline)"
        } else {
            ""
        };
        let r = scope(|_| wait_all(Vec::new()));
        t.ok(r.and_then(|x| x), &format!("empty set{what}"));
        t.ok(
            wait_all(std::iter::empty()),
            &format!("empty iterator{what}"),
        );

        let me = t.rank();
        let out = message(me, me, 3);
        let mut tested = vec![0u8; SIZES[3]];
        let mut late = vec![0u8; SIZES[3]];
        let r = scope(|s| -> collectives::Result<()> {
            let mut recv = c.i_recv(s, &mut tested[..], me, 21)?;
            let send = c.i_send(s, &out[..], me, 21)?;
            let start = Instant::now();
            while !recv.test()? {
                if start.elapsed() > GENEROUS {
                    break;
                }
            }
            // The first pair is complete (`recv` tested so); the second completes inside MPI
            // before the set is waited for, by the barrier's progress.
            let recv_late = c.i_recv(s, &mut late[..], me, 22)?;
            let send_late = c.i_send(s, &out[..], me, 22)?;
            c.barrier()?;
            wait_all([recv, send, recv_late, send_late])?;
            // Waiting for a set of requests that are all complete.
            let again = c.i_barrier(s)?;
            again.wait()?;
            wait_all(Vec::new())
        });
        t.ok(r.and_then(|x| x), &format!("completed requests{what}"));
        t.eq(&tested, &out, &format!("tested receive{what}"));
        t.eq(
            &late,
            &out,
            &format!("receive completed before its set{what}"),
        );
        t.check(c.is_usable(), || format!("usable{what}"));
    }
}

/// Under a deadline, a set with a receive from a rank that never sends: `wait_all` returns
/// `Timeout` within the deadline plus one second, the operations of the set that completed are
/// finished (a message to itself arrives), and the communicator is refused afterwards.
fn silent_peer(t: &T) {
    let Some(c) = with_deadline(t, Some(DEADLINE)) else {
        return;
    };
    let me = t.rank();
    if me == ABSENT {
        std::thread::sleep(AWAY);
        return;
    }
    let mut never = vec![0i64; 64];
    let out = message(me, me, 4);
    let mut mine = vec![0u8; SIZES[4]];
    let mut took = Duration::ZERO;
    let r = scope(|s| -> collectives::Result<()> {
        let set = vec![
            c.i_recv(s, &mut never[..], ABSENT, 31)?,
            c.i_recv(s, &mut mine[..], me, 32)?,
            c.i_send(s, &out[..], me, 32)?,
        ];
        let start = Instant::now();
        let r = wait_all(set);
        took = start.elapsed();
        r
    });
    t.err(
        r.and_then(|x| x),
        "wait_all with a silent peer",
        |e| matches!(e, Error::Timeout { op: "i_recv", after } if *after == DEADLINE),
    );
    t.check(took >= DEADLINE, || {
        format!("returned after {took:?}, before the deadline")
    });
    t.check(took < DEADLINE + Duration::from_secs(1), || {
        format!("returned after {took:?}, more than the deadline plus 1 s")
    });
    if me == 0 {
        println!(
            "  wait_all with a silent peer: Err(Timeout) after {:.3} s (deadline {DEADLINE:?})",
            took.as_secs_f64()
        );
    }
    t.eq(
        &never,
        &vec![0i64; 64],
        "the silent receive's buffer untouched",
    );
    t.eq(
        &mine,
        &out,
        "the completed receive of the set was copied back",
    );
    t.check(!c.is_usable(), || "is_usable() after the timeout".into());
    let start = Instant::now();
    t.err(c.barrier(), "barrier after the timeout", |e| {
        matches!(e, Error::Unusable { op: "barrier", timed_out: "i_recv", after } if *after == DEADLINE)
    });
    let r = scope(|s| c.i_send(s, &out[..], me, 33).map(drop));
    t.err(r.and_then(|x| x), "i_send after the timeout", |e| {
        matches!(e, Error::Unusable { op: "i_send", .. })
    });
    let refused = start.elapsed();
    t.check(refused < Duration::from_millis(100), || {
        format!("refusing took {refused:?}: not at once")
    });
}

fn main() {
    let cases: Vec<Case> = vec![
        case("window_of_sizes", window_of_sizes),
        case("window_by_scope_end", window_by_scope_end),
        case("mixed_set", mixed_set),
        case("empty_and_completed", empty_and_completed),
        case("silent_peer", silent_peer).min_ranks(2),
    ];
    common::run(&cases)
}
