//! A peer that is silent and a peer that is dead, for real: the last rank first sleeps through a
//! collective, then through a receive posted to it, then leaves the job with `exit(0)` and never comes back. The other ranks must return
//! `Error::Timeout` within the deadline plus one second (from the call itself, or on a stream-ordered
//! backend from the first host wait after it), answer `Error::Unusable` afterwards, and the job must
//! end. A peer that left may instead be reported by the library itself before the deadline (NCCL's
//! network transport sees the closed connection: `Error::Nccl` with `ncclRemoteError`).
//!
//! This cannot run in the shared runner (`super::run`): its bookkeeping is collective over every
//! rank, and one rank is gone. The survivors keep their own: a host communicator without the
//! leaving rank, split off before anything else happens.
//!
//! Open MPI's `mpirun` ends the whole job when a rank exits without `MPI_Finalize`, unless
//! `orte_allowed_exit_without_sync` is 1 (`--mca orte_allowed_exit_without_sync 1`, or
//! `OMPI_MCA_orte_allowed_exit_without_sync=1` in `mpirun`'s environment); `cargo xtask test` and the
//! GPU suite set it for `*dead_peer` binaries. Without it the binary says so and fails. On 1 rank
//! there is no peer to lose: the silent case becomes a receive from this rank that nobody sends,
//! which must return an error (MPI: `Timeout` at the deadline; NCCL: refused at once) and not hang.
#![allow(dead_code)]

use std::io::Write;
use std::time::{Duration, Instant};

use collectives::{Communicator, Error, MpiComm, ReduceOp};

use super::suite::Backend;

/// The deadline of the timed communicators.
pub const DEADLINE: Duration = Duration::from_secs(1);
/// How long the silent peer sleeps: well past the deadline.
pub const SILENT: Duration = Duration::from_millis(2500);
/// `ncclRemoteError`: NCCL's code for a peer that exited or a network error.
pub const REMOTE_ERROR: u32 = 6;
/// The variable that lets a rank leave an Open MPI job without ending it.
pub const EXIT_WITHOUT_SYNC: &str = "OMPI_MCA_orte_allowed_exit_without_sync";

/// Failures of this rank, printed with the rank's number.
struct Log {
    rank: usize,
    failures: Vec<String>,
}

impl Log {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            let what = what();
            eprintln!("[rank {}] {what}", self.rank);
            self.failures.push(what);
        }
    }

    /// `r` is a timeout of the deadline, seen after the deadline and before it plus one second.
    fn timed_out<V: std::fmt::Debug>(&mut self, r: Result<V, Error>, took: Duration, what: &str) {
        let ok = matches!(&r, Err(Error::Timeout { after, .. }) if *after == DEADLINE);
        self.check(ok, || format!("{what}: expected Err(Timeout), got {r:?}"));
        self.check(took >= DEADLINE && took < DEADLINE + Duration::from_secs(1), || {
            format!("{what}: returned after {took:?}, not within [{DEADLINE:?}, {DEADLINE:?} + 1 s)")
        });
        if ok {
            println!(
                "  [rank {}] {what}: Err(Timeout) after {:.3} s (deadline {DEADLINE:?})",
                self.rank,
                took.as_secs_f64()
            );
        }
    }

    /// `r` is a timeout as for [`timed_out`](Self::timed_out), or the library's own report that the
    /// peer is gone (NCCL's network transport sees the closed connection: `ncclRemoteError`), seen
    /// before the deadline plus one second.
    fn timed_out_or_gone<V: std::fmt::Debug>(
        &mut self,
        r: Result<V, Error>,
        took: Duration,
        what: &str,
    ) {
        let gone = matches!(&r, Err(Error::Nccl { code, .. }) if *code == REMOTE_ERROR);
        if !gone {
            return self.timed_out(r, took, what);
        }
        self.check(took < DEADLINE + Duration::from_secs(1), || {
            format!("{what}: the peer's exit was reported after {took:?}")
        });
        println!(
            "  [rank {}] {what}: {} after {:.3} s",
            self.rank,
            r.err().map(|e| e.to_string()).unwrap_or_default(),
            took.as_secs_f64()
        );
    }

    /// `r` is `Unusable`.
    fn unusable<V: std::fmt::Debug>(&mut self, r: Result<V, Error>, what: &str) {
        let ok = matches!(&r, Err(Error::Unusable { .. }));
        self.check(ok, || format!("{what}: expected Err(Unusable), got {r:?}"));
    }
}

/// Run both cases with communicators from `make` (collective over the given host communicator,
/// with the given deadline), print `mpi-tests: N passed, M failed` on rank 0 and exit.
pub fn run<C: Backend>(backend: &str, make: impl Fn(&MpiComm, Duration) -> Result<C, Error>) -> ! {
    let universe = mpi::initialize().expect("MPI initializes once");
    let world = MpiComm::world(&universe)
        .expect("dup of MPI_COMM_WORLD")
        .with_checked(false);
    let (rank, size) = (world.rank(), world.size());
    let leaver = size - 1;
    let allowed = std::env::var(EXIT_WITHOUT_SYNC).is_ok_and(|v| v.trim() == "1");
    if size > 1 && !allowed {
        if rank == 0 {
            println!(
                "{backend} dead peer: a rank can only leave the job for real under mpirun with \
                 {EXIT_WITHOUT_SYNC}=1 (or --mca orte_allowed_exit_without_sync 1)"
            );
            println!("mpi-tests: 0 passed, 1 failed ({size} ranks)");
        }
        drop(world);
        drop(universe);
        std::process::exit(1);
    }
    // The survivors' own communicator, made while every rank is here.
    let survivors = world
        .split((rank != leaver || size == 1).then_some(0), rank as i32)
        .expect("split off the survivors");
    let mut log = Log {
        rank,
        failures: Vec::new(),
    };
    // Per case, whether it failed on this rank.
    let mut failed = Vec::new();

    // 1. A silent peer: the last rank sleeps through an all-reduce, then makes it itself.
    let before = log.failures.len();
    match make(&world, DEADLINE) {
        Err(e) => log.check(false, || format!("a communicator with a deadline: {e}")),
        Ok(timed) => {
            let mut buf = timed.up(&[1u32; 16]);
            if size == 1 {
                // MPI waits for the send until the deadline; NCCL sees at once that no send to
                // self matches and says so. Either way an error, never a hang.
                let start = Instant::now();
                let r = timed
                    .recv::<u32>(C::w(&mut buf), 0, 5)
                    .and_then(|()| timed.settle());
                let took = start.elapsed();
                log.check(
                    r.is_err() && took < DEADLINE + Duration::from_secs(1),
                    || format!("a receive from this rank nobody sends: {r:?} after {took:?}"),
                );
                println!("  [rank 0] a receive from this rank nobody sends: {r:?} after {took:?}");
            } else if rank == leaver {
                std::thread::sleep(SILENT);
                // The others gave up long ago: this call (and on NCCL the wait after it) may
                // complete against what they left in flight or time out waiting for peers that
                // aborted, but it must come back.
                let start = Instant::now();
                let r = timed
                    .all_reduce_in_place::<u32>(C::w(&mut buf), ReduceOp::Sum)
                    .and_then(|()| timed.settle());
                let took = start.elapsed();
                log.check(took < DEADLINE + Duration::from_secs(1), || {
                    format!("the late all-reduce returned after {took:?} ({r:?})")
                });
            } else {
                // On NCCL the call returns once enqueued; the first host wait times out.
                let start = Instant::now();
                let r = timed
                    .all_reduce_in_place::<u32>(C::w(&mut buf), ReduceOp::Sum)
                    .and_then(|()| timed.settle());
                log.timed_out(
                    r,
                    start.elapsed(),
                    "an all-reduce the last rank sleeps through",
                );
                let r = timed.barrier();
                log.unusable(r, "a barrier after the timeout");
            }
        }
    }
    failed.push(i32::from(log.failures.len() > before));
    // Everyone is here again (the sleeper has woken up).
    world.barrier().expect("the barrier after the silent case");

    // 2. A silent peer, point to point: rank 0 receives from the last rank, which sleeps first. A
    //    receive from a peer never met before must not block the host while connecting to it
    //    (NCCL's blocking communicators do, unless the peers were connected at creation).
    if size > 1 {
        let before = log.failures.len();
        match make(&world, DEADLINE) {
            Err(e) => log.check(false, || format!("a communicator with a deadline: {e}")),
            Ok(timed) => {
                let mut buf = timed.up(&[1u32; 16]);
                if rank == 0 {
                    let start = Instant::now();
                    let r = timed
                        .recv::<u32>(C::w(&mut buf), leaver, 6)
                        .and_then(|()| timed.settle());
                    log.timed_out(r, start.elapsed(), "a receive from the rank that sleeps");
                    let r = timed.send::<u32>(C::r(&buf), leaver, 6);
                    log.unusable(r, "a send after the timeout");
                } else if rank == leaver {
                    std::thread::sleep(SILENT);
                    let start = Instant::now();
                    let r = timed
                        .send::<u32>(C::r(&buf), 0, 6)
                        .and_then(|()| timed.settle());
                    let took = start.elapsed();
                    log.check(took < DEADLINE + Duration::from_secs(1), || {
                        format!("the late send returned after {took:?} ({r:?})")
                    });
                }
            }
        }
        failed.push(i32::from(log.failures.len() > before));
        world
            .barrier()
            .expect("the barrier after the point-to-point case");
    }

    // 3. A dead peer: the last rank leaves the job; the others' all-reduce must time out.
    if size > 1 {
        let before = log.failures.len();
        let timed = make(&world, DEADLINE);
        world
            .barrier()
            .expect("the barrier before the last rank leaves");
        if rank == leaver {
            println!("  [rank {rank}] leaving the job now (exit 0, no MPI_Finalize)");
            let _ = std::io::stdout().flush();
            std::process::exit(0);
        }
        match timed {
            Err(e) => log.check(false, || format!("a communicator with a deadline: {e}")),
            Ok(timed) => {
                let mut buf = timed.up(&[1u32; 16]);
                let start = Instant::now();
                let r = timed
                    .all_reduce_in_place::<u32>(C::w(&mut buf), ReduceOp::Sum)
                    .and_then(|()| timed.settle());
                log.timed_out_or_gone(r, start.elapsed(), "an all-reduce with a dead peer");
                let r = timed.all_reduce_in_place::<u32>(C::w(&mut buf), ReduceOp::Sum);
                log.unusable(r, "an all-reduce after the timeout");
                // The communicator is left to leak, as a program that exits after a timeout
                // may: the exit waits for its abort (running on a thread of its own).
                std::mem::forget(timed);
            }
        }
        failed.push(i32::from(log.failures.len() > before));
    }

    // Bookkeeping among the survivors only.
    let survivors = survivors.expect("a survivor has the survivors' communicator");
    let mut any = vec![0i32; failed.len()];
    survivors
        .all_reduce(&failed[..], &mut any[..], ReduceOp::Max)
        .expect("the survivors' all-reduce");
    let names: &[&str] = if size > 1 {
        &["silent peer", "silent peer point to point", "dead peer"]
    } else {
        &["silent peer"]
    };
    let bad = any.iter().filter(|&&f| f != 0).count();
    if rank == 0 {
        for (name, f) in names.iter().zip(&any) {
            let verdict = if *f == 0 { "ok" } else { "FAILED" };
            println!("test {backend}_{} ... {verdict}", name.replace(' ', "_"));
        }
        let left = if size > 1 { ", 1 left the job" } else { "" };
        println!(
            "mpi-tests: {} passed, {bad} failed ({size} ranks{left})",
            any.len() - bad
        );
    }
    let _ = std::io::stdout().flush();
    // No MPI_Finalize: it would wait for the rank that left.
    std::process::exit(i32::from(bad > 0));
}
