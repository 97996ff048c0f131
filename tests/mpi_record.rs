//! The per-call record (`collectives::record`) on the MPI host backend, on the ranks it is launched
//! with: a known sequence of calls (blocking, non-blocking, persistent init and starts, a call
//! under a deadline, a refused call) must come back as the entries, counts, sizes and paths it
//! implies, on every rank. Run: `mpirun -n N target/debug/deps/mpi_record-*` (or `cargo xtask
//! test`). The record is switched on and emptied by each case, and switched off at its end, so
//! that the runner's own calls between cases are not in it.

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use std::time::Duration;

use collectives::record::{self, Entry, Form};
use collectives::{scope, BackendKind, Communicator, PlanPath, ReduceOp};
use common::{case, checked, Case, T};

/// Run `body` with the record on and empty; return what it recorded.
fn recorded(body: impl FnOnce()) -> Vec<Entry> {
    record::set_enabled(true);
    record::reset();
    body();
    let entries = record::snapshot();
    record::set_enabled(false);
    entries
}

/// The one entry for `op` called as `form` with `bytes`; a failure if there is not exactly one.
fn one<'a>(t: &T, entries: &'a [Entry], op: &str, form: Form, bytes: usize) -> Option<&'a Entry> {
    let found: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.op == op && e.form == form && e.bytes == bytes)
        .collect();
    if found.len() != 1 {
        t.fail(format!(
            "{op} {form:?} {bytes} bytes: {} entries, expected 1, in {entries:#?}",
            found.len()
        ));
        return None;
    }
    Some(found[0])
}

fn calls(t: &T, entries: &[Entry], op: &str, form: Form, bytes: usize, expected: u64) {
    if let Some(e) = one(t, entries, op, form, bytes) {
        t.eq(
            &e.calls,
            &expected,
            &format!("calls of {op} {form:?} {bytes}"),
        );
        t.eq(&e.host.count, &expected, &format!("host times of {op}"));
        t.check(e.host.min <= e.host.max, || format!("{op}: min > max"));
        t.check(e.host.total >= e.host.max, || format!("{op}: total < max"));
        t.eq(
            &e.backend,
            &BackendKind::MpiHost,
            &format!("backend of {op}"),
        );
        t.eq(&e.staged, &false, &format!("staged of {op}"));
        t.eq(
            &e.device.count,
            &0,
            &format!("device times of {op} on the host"),
        );
    }
}

fn known_sequence(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    let c = t.comm;
    let entries = recorded(|| {
        let send = vec![1.0f64; 4];
        let mut recv = vec![0.0f64; 4];
        for _ in 0..3 {
            t.ok(
                c.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum),
                "all_reduce",
            );
        }
        let mut big = vec![1.0f64; 8];
        t.ok(
            c.all_reduce_in_place(&mut big[..], ReduceOp::Sum),
            "in place",
        );
        // Refused on this rank before any communication: not counted.
        t.err(
            c.all_reduce(&send[..], &mut big[..], ReduceOp::Sum),
            "lengths differ",
            |_| true,
        );
        t.ok(c.barrier(), "barrier");
        let mine = vec![rank as u8; 3];
        let mut all = vec![0u8; 3 * size];
        for _ in 0..2 {
            let r = scope(|s| c.i_all_gather(s, &mine[..], &mut all[..])?.wait());
            t.ok(r.and_then(|x| x), "i_all_gather");
        }
        // Uneven: rank r sends r + 1 values; the root's buffer holds them all.
        let counts: Vec<usize> = (1..=size).collect();
        let part = vec![1i32; rank + 1];
        let mut whole = vec![0i32; counts.iter().sum()];
        let root_buf = (rank == 0).then_some(&mut whole[..]);
        t.ok(c.gather_v(&part[..], root_buf, &counts, 0), "gather_v");
        // A plan made once and started four times.
        let mut local = vec![1.0f32; 16];
        let mut global = vec![0.0f32; 16];
        let r = scope(|s| -> collectives::Result<()> {
            let mut plan = c.all_reduce_init(s, &mut local[..], &mut global[..], ReduceOp::Sum)?;
            for _ in 0..4 {
                plan.start()?;
                plan.wait()?;
            }
            Ok(())
        });
        t.ok(r.and_then(|x| x), "persistent all_reduce");
        // Under a deadline the host backend polls the non-blocking twin on copies.
        if let Some(d) = t.ok(c.dup(), "dup") {
            let d = d.with_timeout(Some(Duration::from_secs(60)));
            t.ok(
                d.all_reduce(&send[..], &mut recv[..], ReduceOp::Max),
                "polled",
            );
        }
    });

    calls(t, &entries, "all_reduce_in_place", Form::Blocking, 64, 1);
    calls(t, &entries, "barrier", Form::Blocking, 0, 1);
    calls(t, &entries, "i_all_gather", Form::NonBlocking, 3 * size, 2);
    let gathered = if rank == 0 {
        size * (size + 1) / 2
    } else {
        rank + 1
    };
    calls(t, &entries, "gather_v", Form::Blocking, 4 * gathered, 1);
    calls(t, &entries, "all_reduce_init", Form::Init, 64, 1);
    calls(t, &entries, "all_reduce_init", Form::Start, 64, 4);
    calls(t, &entries, "dup", Form::Blocking, 0, 1);
    // The four blocking all-reduces of 32 bytes (and no other): three native, one polled under
    // the deadline.
    let paths: Vec<(&str, u64)> = entries
        .iter()
        .filter(|e| e.op == "all_reduce")
        .map(|e| (e.path, e.calls))
        .collect();
    t.eq(
        &paths,
        &vec![("native", 3), ("polled", 1)],
        "paths of all_reduce",
    );
    if let Some(start) = one(t, &entries, "all_reduce_init", Form::Start, 64) {
        let expected = match with_plan_path(t) {
            Some(PlanPath::Persistent { .. }) => "persistent",
            _ => "replay",
        };
        t.eq(&start.path, &expected, "the plan's path in the record");
    }
    t.eq(&entries.len(), &9, "entries");
    // The text table has a header, one line per entry, and the rank.
    record::set_enabled(true);
    let table = record::table();
    record::set_enabled(false);
    t.check(table.lines().count() == 2 + entries.len(), || {
        format!("table of {} entries:\n{table}", entries.len())
    });
    let world = rank; // the case's communicator is a duplicate of MPI_COMM_WORLD
    t.check(table.contains(&format!("rank {world} ")), || {
        format!("rank {world} in\n{table}")
    });
}

/// The path an all-reduce plan takes on this communicator (made and dropped, not recorded).
fn with_plan_path(t: &T) -> Option<PlanPath> {
    let mut a = vec![0.0f32; 1];
    let mut b = vec![0.0f32; 1];
    let r = scope(|s| {
        t.comm
            .all_reduce_init(s, &mut a[..], &mut b[..], ReduceOp::Sum)
            .map(|p| p.path())
    });
    t.ok(r.and_then(|x| x), "path probe")
}

fn off_records_nothing(t: &T) {
    record::set_enabled(true);
    record::reset();
    record::set_enabled(false);
    let send = vec![1u64; 2];
    let mut recv = vec![0u64; 2];
    t.ok(
        t.comm.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum),
        "all_reduce",
    );
    t.eq(&record::snapshot(), &Vec::new(), "record while off");
}

fn checked_mode_records_the_call_not_the_agreement(t: &T) {
    // The agreement's all-gather is the checked communicator's own, not a call of the front end.
    let send = vec![1i32; 5];
    let mut recv = vec![0i32; 5];
    let entries = recorded(|| {
        t.ok(
            t.comm.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum),
            "checked all_reduce",
        );
    });
    t.eq(&entries.len(), &1, "entries");
    calls(t, &entries, "all_reduce", Form::Blocking, 20, 1);
}

fn main() {
    let cases: Vec<Case> = vec![
        case("record_known_sequence", known_sequence),
        case("record_off_records_nothing", off_records_nothing),
        checked(
            "record_checked_mode",
            1,
            checked_mode_records_the_call_not_the_agreement,
        ),
    ];
    common::run(&cases)
}
