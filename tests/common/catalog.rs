//! The bad-input catalog, written once against the `Communicator` trait and run on every backend: each
//! case passes something wrong and checks that every rank returns the same typed error, with no panic
//! and no hang, and that the communicator is still usable afterwards. Cases where only some ranks are
//! wrong run in checked mode, the mode that turns them into errors on every rank (the wrong rank gets
//! its own error, the others `PeerInvalid` or `Mismatch`).
//!
//! What each backend may refuse differs only where the backends differ (which element/operation pairs
//! reduce, MPI's `int` counts): those expectations are written here, from the backends' documented
//! tables, not taken from the library.
//!
//! Not here because they do not compile (tests/ui): a send and a receive buffer that overlap, on host
//! or device memory, and a call on a finalized communicator (`finalize` takes it by value). A
//! buffer on another GPU than the communicator's needs device buffers and two visible GPUs: it is
//! in [`device_cases`], which the device test binaries add where two GPUs are visible.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use collectives::{scope, BackendKind, Communicator, Error, ReduceOp};
use half::bf16;
use num_complex::Complex;

use super::suite::Backend;
use super::{case, checked, Case, T};

/// How a binary hands a case its communicator: `checked` says whether the case needs checked mode.
pub type With<C> = fn(&T, bool, &mut dyn FnMut(&C));

/// One entry of the catalog: name, fewest ranks, checked mode, body.
struct Entry<C> {
    name: &'static str,
    min_ranks: usize,
    checked: bool,
    body: fn(&T, &C),
}

fn local<C>(name: &'static str, body: fn(&T, &C)) -> Entry<C> {
    Entry {
        name,
        min_ranks: 1,
        checked: false,
        body,
    }
}

fn agreed<C>(name: &'static str, min_ranks: usize, body: fn(&T, &C)) -> Entry<C> {
    Entry {
        name,
        min_ranks,
        checked: true,
        body,
    }
}

/// Every case of the catalog for backend `C`, named `{prefix}_{case}`.
pub fn cases<C: Backend + 'static>(prefix: &str, with: With<C>) -> Vec<Case> {
    let entries: Vec<Entry<C>> = vec![
        local("all_reduce_lengths", all_reduce_lengths),
        local("persistent_started_twice", persistent_started_twice),
        local("persistent_init_lengths", persistent_init_lengths),
        local("reduce_root_without_recv", reduce_root_without_recv),
        local("reduce_root_recv_length", reduce_root_recv_length),
        local("all_gather_recv_length", all_gather_recv_length),
        local("gather_scatter_root_lengths", gather_scatter_root_lengths),
        local("scatter_root_without_send", scatter_root_without_send),
        local("v_counts_against_lengths", v_counts_against_lengths),
        local("reduce_scatter_lengths", reduce_scatter_lengths),
        local("all_to_all_lengths", all_to_all_lengths),
        local("counts_array_of_wrong_length", counts_array_of_wrong_length),
        local("counts_whose_sum_overflows", counts_whose_sum_overflows),
        local("count_above_mpi_int", count_above_mpi_int),
        Entry {
            name: "displacement_above_mpi_int",
            min_ranks: 3,
            checked: false,
            body: displacement_above_mpi_int,
        },
        local("root_out_of_range", root_out_of_range),
        local("peer_out_of_range", peer_out_of_range),
        local("negative_tag", negative_tag),
        local("tag_above_tag_ub", tag_above_tag_ub),
        local(
            "send_recv_to_self_check_order",
            send_recv_to_self_check_order,
        ),
        local("complex_min_max", complex_min_max),
        local("element_op_pairs_per_backend", element_op_pairs_per_backend),
        local(
            "received_message_of_another_length",
            received_message_of_another_length,
        ),
        local("split_color_above_mpi_int", split_color_above_mpi_int),
        local("split_with_no_color_anywhere", split_with_no_color_anywhere),
        local("non_blocking_bad_arguments", non_blocking_bad_arguments),
        agreed(
            "local_errors_in_checked_mode",
            1,
            all_reduce_lengths_checked,
        ),
        agreed("one_rank_length_mismatch", 2, one_rank_length_mismatch),
        agreed("one_rank_root_out_of_range", 2, one_rank_root_out_of_range),
        agreed("cross_rank_count_mismatch", 2, cross_rank_count_mismatch),
        agreed(
            "cross_rank_counts_array_mismatch",
            2,
            cross_rank_counts_array_mismatch,
        ),
        agreed(
            "cross_rank_reduce_op_mismatch",
            2,
            cross_rank_reduce_op_mismatch,
        ),
        agreed(
            "cross_rank_operation_mismatch",
            2,
            cross_rank_operation_mismatch,
        ),
        agreed(
            "cross_rank_element_type_mismatch",
            2,
            cross_rank_element_type_mismatch,
        ),
        agreed("in_place_on_one_rank_only", 2, in_place_on_one_rank_only),
        agreed("cross_rank_root_mismatch", 2, cross_rank_root_mismatch),
        agreed(
            "all_to_all_v_pairwise_mismatch",
            2,
            all_to_all_v_pairwise_mismatch,
        ),
        agreed(
            "non_blocking_cross_rank_mismatch",
            2,
            non_blocking_cross_rank_mismatch,
        ),
        agreed(
            "persistent_init_refused_on_one_rank",
            2,
            persistent_init_refused_on_one_rank,
        ),
        Entry {
            name: "use_after_a_timeout",
            min_ranks: 2,
            checked: false,
            body: use_after_a_timeout,
        },
    ];
    to_cases(prefix, with, entries)
}

/// The cases of the catalog that need checked mode (ranks whose arguments differ), for a
/// communicator in checked mode by construction (`Checked<C>`), named `{prefix}_{case}`.
pub fn agreed_cases<C: Backend + 'static>(prefix: &str, with: With<C>) -> Vec<Case> {
    cases(prefix, with)
        .into_iter()
        .filter(|c| c.checked)
        .collect()
}

/// The cases only device backends have, for a run where at least two GPUs are visible: a buffer on
/// another GPU than the communicator's.
pub fn device_cases<C: Backend + 'static>(prefix: &str, with: With<C>) -> Vec<Case> {
    to_cases(
        prefix,
        with,
        vec![local("buffer_on_another_gpu", buffer_on_another_gpu)],
    )
}

/// How many GPUs this process sees (0 without a CUDA driver).
pub fn visible_gpus() -> usize {
    collectives::cudarc::driver::CudaContext::device_count().map_or(0, |n| n as usize)
}

fn to_cases<C: Backend + 'static>(
    prefix: &str,
    with: With<C>,
    entries: Vec<Entry<C>>,
) -> Vec<Case> {
    entries
        .into_iter()
        .map(|e| {
            let Entry {
                name,
                min_ranks,
                checked: on,
                body,
            } = e;
            let run = move |t: &T| with(t, on, &mut |c: &C| body(t, c));
            let name = format!("{prefix}_{name}");
            if on {
                checked(name, min_ranks, run)
            } else {
                case(name, run).min_ranks(min_ranks)
            }
        })
        .collect()
}

fn invalid(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument { .. })
}

/// An `InvalidArgument` whose message contains `needle`.
pub fn invalid_mentioning(needle: &str) -> impl FnOnce(&Error) -> bool + '_ {
    move |e| matches!(e, Error::InvalidArgument { msg, .. } if msg.contains(needle))
}

fn unsupported(element: &'static str, op: ReduceOp) -> impl FnOnce(&Error) -> bool {
    move |e| matches!(e, Error::Unsupported { element: el, reduce_op: Some(o), .. } if *el == element && *o == op)
}

fn peer_invalid(ranks: Vec<usize>) -> impl FnOnce(&Error) -> bool {
    move |e| matches!(e, Error::PeerInvalid { ranks: r, .. } if *r == ranks)
}

fn mismatch(field: &'static str) -> impl FnOnce(&Error) -> bool {
    move |e| matches!(e, Error::Mismatch { field: f, .. } if *f == field)
}

/// Whether MPI's C interface (an `int` per count and displacement) limits this backend.
fn int_counts(c: &impl Communicator) -> bool {
    c.backend() != BackendKind::Nccl
}

/// After an error every rank is still in step: a good all-reduce works and is right.
fn still_in_step<C: Backend>(t: &T, c: &C, what: &str) {
    let mut x = c.up(&[1i32, 2]);
    t.ok(
        c.all_reduce_in_place::<i32>(C::w(&mut x), ReduceOp::Sum),
        what,
    );
    let n = c.size() as i32;
    t.eq(&c.down::<i32>(C::r(&x)), &vec![n, 2 * n], what);
}

// ---- Every rank passes the same bad input: every rank refuses it locally. ----

fn all_reduce_lengths<C: Backend>(t: &T, c: &C) {
    let four = c.up(&[1.0f64; 4]);
    let mut three = c.up(&[0.0f64; 3]);
    t.err(
        c.all_reduce::<f64>(C::r(&four), C::w(&mut three), ReduceOp::Sum),
        "all_reduce",
        invalid_mentioning("send has 4 elements but recv has 3"),
    );
    still_in_step(t, c, "after all_reduce lengths");
}

/// A persistent plan started while its run is in flight: every rank gets `PlanActive`, and nothing
/// reaches the library (a second run issued on some backend would put the ranks out of step, which
/// the check afterwards would see); the first run completes with the right answer.
fn persistent_started_twice<C: Backend>(t: &T, c: &C) {
    let size = c.size() as f64;
    let mut send = c.up(&[c.rank() as f64 + 1.0; 4]);
    let mut recv = c.up(&[0.0f64; 4]);
    let r = scope(|s| -> collectives::Result<()> {
        let mut plan =
            c.all_reduce_init::<f64>(s, C::w(&mut send), C::w(&mut recv), ReduceOp::Sum)?;
        plan.start()?;
        t.err(plan.start(), "a persistent plan started twice", |e| {
            matches!(
                e,
                Error::PlanActive {
                    op: "all_reduce_init",
                    ..
                }
            )
        });
        plan.wait()?;
        t.eq(
            &c.down_mut::<f64>(plan.recv()?),
            &vec![size * (size + 1.0) / 2.0; 4],
            "the run started once",
        );
        // Started again after its wait: a normal second run.
        plan.start()?;
        plan.wait()
    });
    t.ok(r.and_then(|x| x), "persistent_started_twice");
    still_in_step(t, c, "after a persistent plan started twice");
}

/// Bad lengths at `*_init`: the same error as the blocking form, before any plan exists.
fn persistent_init_lengths<C: Backend>(t: &T, c: &C) {
    let size = c.size();
    let mut four = c.up(&[1.0f64; 4]);
    let mut three = c.up(&[0.0f64; 3]);
    let mut short = c.up(&vec![0.0f64; 4 * size - 1]);
    let r = scope(|s| {
        t.err(
            c.all_reduce_init::<f64>(s, C::w(&mut four), C::w(&mut three), ReduceOp::Sum)
                .map(drop),
            "all_reduce_init",
            invalid_mentioning("send has 4 elements but recv has 3"),
        );
    });
    t.ok(r, "all_reduce_init scope");
    let r = scope(|s| {
        t.err(
            c.reduce_init::<f64>(s, C::w(&mut four), None, ReduceOp::Sum, c.rank())
                .map(drop),
            "reduce_init with the root passing no recv",
            invalid_mentioning("root must pass a recv buffer"),
        );
    });
    t.ok(r, "reduce_init scope");
    let r = scope(|s| {
        t.err(
            c.all_gather_init::<f64>(s, C::w(&mut four), C::w(&mut short))
                .map(drop),
            "all_gather_init",
            invalid_mentioning(&format!("{size} ranks x 4 elements")),
        );
    });
    t.ok(r, "all_gather_init scope");
    still_in_step(t, c, "after persistent init lengths");
}

fn all_reduce_lengths_checked<C: Backend>(t: &T, c: &C) {
    all_reduce_lengths(t, c);
    root_out_of_range(t, c);
    counts_array_of_wrong_length(t, c);
}

fn reduce_root_without_recv<C: Backend>(t: &T, c: &C) {
    let four = c.up(&[1.0f64; 4]);
    t.err(
        c.reduce::<f64>(C::r(&four), None, ReduceOp::Sum, c.rank()),
        "reduce with the root passing no recv",
        invalid_mentioning("root must pass a recv buffer"),
    );
    still_in_step(t, c, "after reduce");
}

fn reduce_root_recv_length<C: Backend>(t: &T, c: &C) {
    let four = c.up(&[1.0f64; 4]);
    let mut three = c.up(&[0.0f64; 3]);
    t.err(
        c.reduce::<f64>(C::r(&four), Some(C::w(&mut three)), ReduceOp::Sum, c.rank()),
        "reduce with a short recv at the root",
        invalid_mentioning("recv has 3 elements"),
    );
}

fn all_gather_recv_length<C: Backend>(t: &T, c: &C) {
    let size = c.size();
    let four = c.up(&[1.0f64; 4]);
    let mut short = c.up(&vec![0.0f64; 4 * size - 1]);
    t.err(
        c.all_gather::<f64>(C::r(&four), C::w(&mut short)),
        "all_gather",
        invalid_mentioning(&format!("{size} ranks x 4 elements")),
    );
}

fn gather_scatter_root_lengths<C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let four = c.up(&[1.0f64; 4]);
    let mut short = c.up(&vec![0.0f64; 4 * size - 1]);
    t.err(
        c.gather::<f64>(C::r(&four), Some(C::w(&mut short)), rank),
        "gather at the root",
        invalid_mentioning(&format!("{size} ranks x 4 elements")),
    );
    let mut four_out = c.up(&[0.0f64; 4]);
    t.err(
        c.scatter::<f64>(Some(C::r(&short)), C::w(&mut four_out), rank),
        "scatter at the root",
        invalid_mentioning(&format!("{size} ranks x 4 elements")),
    );
}

fn scatter_root_without_send<C: Backend>(t: &T, c: &C) {
    let mut three = c.up(&[0.0f64; 3]);
    t.err(
        c.scatter::<f64>(None, C::w(&mut three), c.rank()),
        "scatter with the root passing no send",
        invalid_mentioning("root must pass a send buffer"),
    );
}

fn v_counts_against_lengths<C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let counts = vec![2usize; size];
    let four = c.up(&[1.0f64; 4]);
    let two = c.up(&[1.0f64; 2]);
    let mut short = c.up(&vec![0.0f64; 2 * size - 1]);
    t.err(
        c.all_gather_v::<f64>(C::r(&four), C::w(&mut short), &counts),
        "all_gather_v: send is not counts[rank]",
        invalid_mentioning(&format!("counts[{rank}] is 2")),
    );
    t.err(
        c.all_gather_v::<f64>(C::r(&two), C::w(&mut short), &counts),
        "all_gather_v: recv is not the sum",
        invalid_mentioning("the sum of counts"),
    );
    t.err(
        c.gather_v::<f64>(C::r(&two), Some(C::w(&mut short)), &counts, rank),
        "gather_v: recv at the root is not the sum",
        invalid_mentioning("the sum of counts"),
    );
    let mut three = c.up(&[0.0f64; 3]);
    t.err(
        c.scatter_v::<f64>(None, C::w(&mut three), &counts, (rank + 1) % size),
        "scatter_v: recv is not counts[rank]",
        invalid_mentioning(&format!("counts[{rank}] is 2")),
    );
}

fn reduce_scatter_lengths<C: Backend>(t: &T, c: &C) {
    let four = c.up(&[1.0f64; 4]);
    let mut three = c.up(&[0.0f64; 3]);
    t.err(
        c.reduce_scatter::<f64>(C::r(&four), C::w(&mut three), ReduceOp::Sum),
        "reduce_scatter",
        invalid_mentioning("ranks x 3 elements"),
    );
}

fn all_to_all_lengths<C: Backend>(t: &T, c: &C) {
    let size = c.size();
    if size > 1 {
        let odd_send = c.up(&vec![0.0f64; 4 * size + 1]);
        let mut odd = c.up(&vec![0.0f64; 4 * size + 1]);
        t.err(
            c.all_to_all::<f64>(C::r(&odd_send), C::w(&mut odd)),
            "all_to_all: not a multiple of the ranks",
            invalid_mentioning("not a multiple"),
        );
    }
    let four = c.up(&[1.0f64; 4]);
    let mut three = c.up(&[0.0f64; 3]);
    t.err(
        c.all_to_all::<f64>(C::r(&four), C::w(&mut three)),
        "all_to_all: lengths",
        invalid,
    );
    let counts = vec![3usize; size]; // the sums, 3 x size, are never 4
    t.err(
        c.all_to_all_v::<f64>(C::r(&four), &counts, C::w(&mut three), &counts),
        "all_to_all_v: lengths",
        invalid_mentioning("the sum of send_counts"),
    );
}

fn counts_array_of_wrong_length<C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let counts = vec![1usize; size + 1];
    let send = c.up(&[1i32; 1]);
    let mut recv = c.up(&vec![0i32; size + 1]);
    let what = format!("{} entries; it needs one per rank ({size})", size + 1);
    t.err(
        c.all_gather_v::<i32>(C::r(&send), C::w(&mut recv), &counts),
        "all_gather_v",
        invalid_mentioning(&what),
    );
    t.err(
        c.gather_v::<i32>(C::r(&send), Some(C::w(&mut recv)), &counts, rank),
        "gather_v",
        invalid_mentioning(&what),
    );
    let mut one = c.up(&[0i32; 1]);
    t.err(
        c.scatter_v::<i32>(Some(C::r(&recv)), C::w(&mut one), &counts, rank),
        "scatter_v",
        invalid_mentioning(&what),
    );
    let short = vec![1usize; size.saturating_sub(1)];
    let empty = c.up::<i32>(&[]);
    let mut empty_out = c.up::<i32>(&[]);
    t.err(
        c.all_to_all_v::<i32>(C::r(&empty), &short, C::w(&mut empty_out), &short),
        "all_to_all_v",
        invalid_mentioning("one per rank"),
    );
}

/// Counts whose sum does not fit a `usize`: refused before anything is sized from them.
fn counts_whose_sum_overflows<C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    // This rank's own count is 1, so its one-element buffers match; another entry makes the sum overflow.
    let mut counts = vec![1usize; size];
    counts[(rank + 1) % size] = usize::MAX;
    if size == 1 {
        counts = vec![usize::MAX];
    }
    let one = c.up(&[1u8]);
    let mut out = c.up(&[0u8]);
    let overflow = |e: &Error| matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("overflows") || msg.contains("counts[0] is"));
    t.err(
        c.all_gather_v::<u8>(C::r(&one), C::w(&mut out), &counts),
        "all_gather_v",
        overflow,
    );
    t.err(
        c.gather_v::<u8>(C::r(&one), Some(C::w(&mut out)), &counts, rank),
        "gather_v",
        overflow,
    );
    t.err(
        c.scatter_v::<u8>(Some(C::r(&one)), C::w(&mut out), &counts, rank),
        "scatter_v",
        overflow,
    );
    let mut big = vec![0usize; size];
    big[0] = usize::MAX;
    if size > 1 {
        big[1] = 1;
    } else {
        big.push(1);
    }
    t.err(
        c.all_to_all_v::<u8>(C::r(&one), &big, C::w(&mut out), &big),
        "all_to_all_v",
        |e| {
            matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("overflows") || msg.contains("one per rank"))
        },
    );
    still_in_step(t, c, "after overflowing counts");
}

/// 2^31 elements in one call: one more than MPI's `int` count (MPI backends); NCCL counts in `size_t`.
fn count_above_mpi_int<C: Backend>(t: &T, c: &C) {
    if !int_counts(c) {
        return;
    }
    let n = 1usize << 31;
    let mut big = c.zeros::<u8>(n);
    t.err(c.all_reduce_in_place::<u8>(C::w(&mut big), ReduceOp::Sum), "all_reduce_in_place", |e| {
        matches!(e, Error::CountOverflow { count, limit, .. } if *count == n && *limit == i32::MAX as usize)
    });
    t.err(c.broadcast::<u8>(C::w(&mut big), 0), "broadcast", |e| {
        matches!(e, Error::CountOverflow { .. })
    });
    t.err(c.send::<u8>(C::r(&big), 0, 0), "send", |e| {
        matches!(e, Error::CountOverflow { .. })
    });
    drop(big);
    still_in_step(t, c, "after a count above MPI's int");
}

/// Each count fits an `int` but a displacement does not: rank 2's block starts past 2^31 - 1 (MPI
/// backends, 3 ranks or more; the buffers are zeros that are never written).
fn displacement_above_mpi_int<C: Backend>(t: &T, c: &C) {
    if !int_counts(c) {
        return;
    }
    let (rank, size) = (c.rank(), c.size());
    let counts: Vec<usize> = (0..size)
        .map(|r| if r < 2 { (1 << 30) + 1 } else { 1 })
        .collect();
    let send = c.zeros::<u8>(counts[rank]);
    let mut recv = c.zeros::<u8>(counts.iter().sum());
    t.err(
        c.all_gather_v::<u8>(C::r(&send), C::w(&mut recv), &counts),
        "all_gather_v with a displacement above MPI's int",
        |e| matches!(e, Error::CountOverflow { count, .. } if *count == (1 << 31) + 2),
    );
    drop((send, recv));
    still_in_step(t, c, "after a displacement above MPI's int");
}

fn root_out_of_range<C: Backend>(t: &T, c: &C) {
    let size = c.size();
    let mut buf = c.up(&[0u8; 4]);
    let mut big = c.up(&vec![0u8; 4 * size]);
    let oob = format!("root {size} is out of range");
    t.err(
        c.broadcast::<u8>(C::w(&mut buf), size),
        "broadcast",
        invalid_mentioning(&oob),
    );
    t.err(
        c.reduce::<u8>(C::r(&buf), None, ReduceOp::Sum, size),
        "reduce",
        invalid_mentioning(&oob),
    );
    t.err(
        c.gather::<u8>(C::r(&buf), Some(C::w(&mut big)), size + 3),
        "gather",
        invalid_mentioning("out of range"),
    );
    t.err(
        c.scatter::<u8>(None, C::w(&mut buf), usize::MAX),
        "scatter",
        invalid_mentioning("out of range"),
    );
    let empty = c.up::<u8>(&[]);
    t.err(
        c.gather_v::<u8>(C::r(&empty), None, &vec![0; size], size),
        "gather_v",
        invalid_mentioning(&oob),
    );
    let mut empty_out = c.up::<u8>(&[]);
    t.err(
        c.scatter_v::<u8>(None, C::w(&mut empty_out), &vec![0; size], size),
        "scatter_v",
        invalid_mentioning(&oob),
    );
}

fn peer_out_of_range<C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let mut buf = c.up(&[0u8; 4]);
    t.err(
        c.send::<u8>(C::r(&buf), size, 0),
        "send",
        invalid_mentioning(&format!("destination {size} is out of range")),
    );
    t.err(
        c.recv::<u8>(C::w(&mut buf), size + 1, 0),
        "recv",
        invalid_mentioning("source"),
    );
    let send = c.up(&[0u8; 4]);
    t.err(
        c.send_recv::<u8>(C::r(&send), rank, C::w(&mut buf), usize::MAX, 0),
        "send_recv",
        invalid_mentioning("source"),
    );
}

fn negative_tag<C: Backend>(t: &T, c: &C) {
    let buf = c.up(&[0u8; 4]);
    for tag in [-1, i32::MIN] {
        t.err(
            c.send::<u8>(C::r(&buf), 0, tag),
            "send",
            invalid_mentioning(&format!("tag {tag} is outside 0..")),
        );
    }
    let mut out = c.up(&[0u8; 4]);
    t.err(
        c.recv::<u8>(C::w(&mut out), 0, -7),
        "recv",
        invalid_mentioning("tag -7"),
    );
}

/// A tag above the MPI's `MPI_TAG_UB` (the backend's largest tag).
fn tag_above_tag_ub<C: Backend>(t: &T, c: &C) {
    let ub = c.tag_ub();
    let buf = c.up(&[0u8; 4]);
    if ub < i32::MAX {
        t.err(
            c.send::<u8>(C::r(&buf), 0, ub + 1),
            "send",
            invalid_mentioning(&format!("tag {} is outside 0..={ub}", ub + 1)),
        );
    } else {
        // The largest tag is `i32::MAX`: no tag lies above it, and that one is taken.
        let (rank, size) = (c.rank(), c.size());
        let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
        let mut out = c.up(&[1u8; 4]);
        t.ok(
            c.send_recv::<u8>(C::r(&buf), next, C::w(&mut out), prev, ub),
            "send_recv with the largest tag",
        );
        t.eq(
            &c.down::<u8>(C::r(&out)),
            &vec![0u8; 4],
            "send_recv with the largest tag",
        );
    }
}

/// A message to this rank itself with a bad tag and unequal lengths: the tag is checked first, on
/// every backend (peers and tag, then lengths).
fn send_recv_to_self_check_order<C: Backend>(t: &T, c: &C) {
    let rank = c.rank();
    let send = c.up(&[1u8; 3]);
    let mut recv = c.up(&[0u8; 2]);
    t.err(
        c.send_recv::<u8>(C::r(&send), rank, C::w(&mut recv), rank, -1),
        "bad tag and unequal lengths",
        invalid_mentioning("tag -1"),
    );
    t.err(
        c.send_recv::<u8>(C::r(&send), rank, C::w(&mut recv), rank, 0),
        "unequal lengths",
        invalid_mentioning("has 3 elements but recv has 2"),
    );
}

fn complex_min_max<C: Backend>(t: &T, c: &C) {
    let z = c.up(&[Complex::new(1.0f64, 2.0); 3]);
    let mut out = c.up(&[Complex::new(0.0f64, 0.0); 3]);
    for op in [ReduceOp::Max, ReduceOp::Min] {
        t.err(
            c.all_reduce::<Complex<f64>>(C::r(&z), C::w(&mut out), op),
            "all_reduce",
            unsupported("complex<f64>", op),
        );
        t.err(
            c.all_reduce_in_place::<Complex<f64>>(C::w(&mut out), op),
            "all_reduce_in_place",
            unsupported("complex<f64>", op),
        );
        t.err(
            c.reduce::<Complex<f64>>(C::r(&z), None, op, (c.rank() + 1) % c.size()),
            "reduce",
            unsupported("complex<f64>", op),
        );
    }
    still_in_step(t, c, "after complex min/max");
}

/// The pairs one family of backends reduces and the other refuses (README, "Backends"): MPI adds no
/// 16-bit floats and averages no integers; NCCL multiplies complex numbers lane by lane, so it
/// refuses complex products. Where a pair is allowed the answer is checked.
fn element_op_pairs_per_backend<C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let nccl = c.backend() == BackendKind::Nccl;
    let h = c.up(&[bf16::from_f32(1.0); 2]);
    let mut hout = c.up(&[bf16::from_f32(0.0); 2]);
    let r = c.all_reduce::<bf16>(C::r(&h), C::w(&mut hout), ReduceOp::Sum);
    if nccl {
        t.ok(r, "bf16 sum on NCCL");
        t.eq(
            &c.down::<bf16>(C::r(&hout)),
            &vec![bf16::from_f32(size as f32); 2],
            "bf16 sum on NCCL",
        );
    } else {
        t.err(r, "bf16 sum on MPI", unsupported("bf16", ReduceOp::Sum));
    }
    let i = c.up(&[6i32 * size as i32; 2]);
    let mut iout = c.up(&[0i32; 2]);
    let r = c.all_reduce::<i32>(C::r(&i), C::w(&mut iout), ReduceOp::Avg);
    if nccl {
        t.ok(r, "i32 avg on NCCL");
        t.eq(
            &c.down::<i32>(C::r(&iout)),
            &vec![6 * size as i32; 2],
            "i32 avg on NCCL",
        );
    } else {
        t.err(r, "i32 avg on MPI", unsupported("i32", ReduceOp::Avg));
    }
    let factor = if rank % 2 == 0 {
        Complex::new(0.0f64, 1.0)
    } else {
        Complex::new(1.0, 1.0)
    };
    let z = c.up(&[factor; 3]);
    let mut zout = c.up(&[Complex::new(0.0f64, 0.0); 3]);
    let r = c.all_reduce::<Complex<f64>>(C::r(&z), C::w(&mut zout), ReduceOp::Prod);
    if nccl {
        t.err(
            r,
            "complex prod on NCCL",
            unsupported("complex<f64>", ReduceOp::Prod),
        );
    } else {
        t.ok(r, "complex prod on MPI");
        let expected = (0..size).fold(Complex::new(1.0f64, 0.0), |acc, r| {
            acc * if r % 2 == 0 {
                Complex::new(0.0, 1.0)
            } else {
                Complex::new(1.0, 1.0)
            }
        });
        t.eq(
            &c.down::<Complex<f64>>(C::r(&zout)),
            &vec![expected; 3],
            "complex prod on MPI",
        );
    }
    still_in_step(t, c, "after per-backend pairs");
}

/// A message longer or shorter than the receive buffer: an error, never a truncated or partly
/// written buffer taken for a whole one. NCCL transfers have no envelope to check (a shorter send
/// leaves its receiver waiting): checked mode is what catches that there, so NCCL skips this case.
fn received_message_of_another_length<C: Backend>(t: &T, c: &C) {
    if c.backend() == BackendKind::Nccl {
        return;
    }
    let (rank, size) = (c.rank(), c.size());
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    let three = c.up(&[1u32, 2, 3]);
    let mut recv = c.up(&[0u32; 2]);
    t.err(
        c.send_recv::<u32>(C::r(&three), next, C::w(&mut recv), prev, 5),
        "a longer message",
        |e| matches!(e, Error::Mpi { .. } | Error::InvalidArgument { .. }),
    );
    let got = c.down::<u32>(C::r(&recv));
    t.check(got == [0, 0] || got == [1, 2], || {
        format!("a truncated receive wrote {got:?}")
    });
    let one = c.up(&[1u32]);
    let mut recv = c.up(&[0u32; 2]);
    t.err(c.send_recv::<u32>(C::r(&one), next, C::w(&mut recv), prev, 6), "a shorter message", |e| {
        // From another rank the received count is checked; from this rank itself the lengths are.
        matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("received 1 elements") || msg.contains("has 1 elements but recv has 2"))
    });
    still_in_step(t, c, "after a message of another length");
}

/// A color above MPI's largest (`i32::MAX`), on every rank: refused on every rank.
fn split_color_above_mpi_int<C: Backend>(t: &T, c: &C) {
    t.err(
        c.split(Some(u32::MAX), 0).map(|s| s.is_some()),
        "split with color u32::MAX",
        invalid_mentioning("color"),
    );
    still_in_step(t, c, "after a bad split");
}

/// Every rank passes no color: a valid split that gives no rank a communicator (MPI returns
/// `MPI_COMM_NULL` everywhere), the same answer on every rank.
fn split_with_no_color_anywhere<C: Backend>(t: &T, c: &C) {
    if let Some(s) = t.ok(c.split(None, 0), "split with no color") {
        t.check(s.is_none(), || {
            "a rank without a color got a communicator".into()
        });
    }
    still_in_step(t, c, "after a split with no color");
}

/// The non-blocking forms check their arguments as the blocking ones do, before anything starts.
fn non_blocking_bad_arguments<C: Backend>(t: &T, c: &C) {
    let size = c.size();
    let four = c.up(&[1.0f64; 4]);
    let mut three = c.up(&[0.0f64; 3]);
    let mut short = c.up(&vec![0.0f64; 4 * size - 1]);
    let mut bytes = c.up(&[0u8; 2]);
    let mut two = c.up(&[0.0f64; 2]);
    let r = scope(|s| {
        t.err(
            c.i_all_reduce::<f64>(s, C::r(&four), C::w(&mut three), ReduceOp::Sum)
                .map(|_| ()),
            "i_all_reduce lengths",
            invalid_mentioning("send has 4 elements but recv has 3"),
        );
        t.err(
            c.i_all_gather::<f64>(s, C::r(&four), C::w(&mut short))
                .map(|_| ()),
            "i_all_gather lengths",
            invalid_mentioning("ranks x 4 elements"),
        );
        t.err(
            c.i_broadcast::<u8>(s, C::w(&mut bytes), size).map(|_| ()),
            "i_broadcast root",
            invalid_mentioning("out of range"),
        );
        t.err(
            c.i_send::<f64>(s, C::r(&four), 0, -1).map(|_| ()),
            "i_send tag",
            invalid_mentioning("tag -1"),
        );
        t.err(
            c.i_recv::<f64>(s, C::w(&mut two), size, 0).map(|_| ()),
            "i_recv source",
            invalid_mentioning("source"),
        );
    });
    t.ok(r, "the scope");
    non_blocking_like_blocking(t, c);
    still_in_step(t, c, "after non-blocking bad arguments");
}

/// The non-blocking start refuses with the blocking form's error, under its own name.
fn like_blocking<R>(
    t: &T,
    what: &str,
    blocking: collectives::Result<()>,
    started: collectives::Result<R>,
) {
    match (blocking, started) {
        (Err(b), Err(n)) => {
            t.eq(&n.op(), &format!("i_{}", b.op()).as_str(), what);
            t.eq(&n.to_string(), &format!("i_{b}"), what);
        }
        (b, n) => t.fail(format!(
            "{what}: expected both to fail, got {:?} and {:?}",
            b.err(),
            n.err()
        )),
    }
}

/// The non-blocking forms added after the first five: each refuses what its blocking form refuses.
fn non_blocking_like_blocking<C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let four = c.up(&[1.0f64; 4]);
    let two = c.up(&[1.0f64; 2]);
    let mut three = c.up(&[0.0f64; 3]);
    let mut short = c.up(&vec![0.0f64; 4 * size - 1]);
    let mut short_v = c.up(&vec![0.0f64; 2 * size - 1]);
    let mut four_out = c.up(&[0.0f64; 4]);
    let mut complex = c.up(&[Complex::new(1.0f64, 2.0); 3]);
    let counts = vec![2usize; size];
    let threes = vec![3usize; size];
    let sum = ReduceOp::Sum;
    let b = c.reduce::<f64>(C::r(&four), None, sum, rank);
    let n = scope(|s| c.i_reduce::<f64>(s, C::r(&four), None, sum, rank).map(drop)).and_then(|r| r);
    like_blocking(t, "i_reduce: the root passes no recv", b, n);
    let b = c.reduce::<f64>(C::r(&four), Some(C::w(&mut three)), sum, rank);
    let n = scope(|s| {
        c.i_reduce::<f64>(s, C::r(&four), Some(C::w(&mut three)), sum, rank)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_reduce: a short recv at the root", b, n);
    let b = c.reduce::<f64>(C::r(&four), None, sum, size);
    let n = scope(|s| c.i_reduce::<f64>(s, C::r(&four), None, sum, size).map(drop)).and_then(|r| r);
    like_blocking(t, "i_reduce: root out of range", b, n);

    let b = c.all_reduce_in_place::<Complex<f64>>(C::w(&mut complex), ReduceOp::Max);
    let n = scope(|s| {
        c.i_all_reduce_in_place::<Complex<f64>>(s, C::w(&mut complex), ReduceOp::Max)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_all_reduce_in_place: max of complex numbers", b, n);

    let b = c.reduce_scatter::<f64>(C::r(&four), C::w(&mut three), sum);
    let n = scope(|s| {
        c.i_reduce_scatter::<f64>(s, C::r(&four), C::w(&mut three), sum)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_reduce_scatter: lengths", b, n);

    let b = c.all_to_all::<f64>(C::r(&four), C::w(&mut three));
    let n = scope(|s| {
        c.i_all_to_all::<f64>(s, C::r(&four), C::w(&mut three))
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_all_to_all: lengths", b, n);
    let b = c.all_to_all_v::<f64>(C::r(&four), &threes, C::w(&mut three), &threes);
    let n = scope(|s| {
        c.i_all_to_all_v::<f64>(s, C::r(&four), &threes, C::w(&mut three), &threes)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_all_to_all_v: lengths", b, n);
    let ones = vec![1usize; size + 1];
    let b = c.all_to_all_v::<f64>(C::r(&four), &ones, C::w(&mut four_out), &ones);
    let n = scope(|s| {
        c.i_all_to_all_v::<f64>(s, C::r(&four), &ones, C::w(&mut four_out), &ones)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_all_to_all_v: counts arrays of the wrong length", b, n);

    let b = c.all_gather_v::<f64>(C::r(&four), C::w(&mut short_v), &counts);
    let n = scope(|s| {
        c.i_all_gather_v::<f64>(s, C::r(&four), C::w(&mut short_v), &counts)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_all_gather_v: send is not counts[rank]", b, n);

    let b = c.gather::<f64>(C::r(&four), Some(C::w(&mut short)), rank);
    let n = scope(|s| {
        c.i_gather::<f64>(s, C::r(&four), Some(C::w(&mut short)), rank)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_gather: a short recv at the root", b, n);
    let b = c.gather_v::<f64>(C::r(&two), Some(C::w(&mut short_v)), &counts, rank);
    let n = scope(|s| {
        c.i_gather_v::<f64>(s, C::r(&two), Some(C::w(&mut short_v)), &counts, rank)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_gather_v: recv at the root is not the sum", b, n);

    let b = c.scatter::<f64>(None, C::w(&mut three), rank);
    let n = scope(|s| {
        c.i_scatter::<f64>(s, None, C::w(&mut three), rank)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_scatter: the root passes no send", b, n);
    let b = c.scatter_v::<f64>(None, C::w(&mut three), &counts, (rank + 1) % size);
    let n = scope(|s| {
        c.i_scatter_v::<f64>(s, None, C::w(&mut three), &counts, (rank + 1) % size)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_scatter_v: recv is not counts[rank]", b, n);

    let b = c.send_recv::<f64>(C::r(&four), rank, C::w(&mut four_out), size, 0);
    let n = scope(|s| {
        c.i_send_recv::<f64>(s, C::r(&four), rank, C::w(&mut four_out), size, 0)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_send_recv: source out of range", b, n);
    let b = c.send_recv::<f64>(C::r(&four), rank, C::w(&mut four_out), rank, -1);
    let n = scope(|s| {
        c.i_send_recv::<f64>(s, C::r(&four), rank, C::w(&mut four_out), rank, -1)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_send_recv: negative tag", b, n);
    let b = c.send_recv::<f64>(C::r(&four), rank, C::w(&mut three), rank, 0);
    let n = scope(|s| {
        c.i_send_recv::<f64>(s, C::r(&four), rank, C::w(&mut three), rank, 0)
            .map(drop)
    })
    .and_then(|r| r);
    like_blocking(t, "i_send_recv: to itself with unequal lengths", b, n);
}

// ---- Only some ranks are wrong: checked mode makes every rank return. ----

fn one_rank_length_mismatch<C: Backend>(t: &T, c: &C) {
    let rank = c.rank();
    let send = c.up(&[1.0f32; 4]);
    let mut recv = c.up(&vec![0.0f32; if rank == 1 { 5 } else { 4 }]);
    let r = c.all_reduce::<f32>(C::r(&send), C::w(&mut recv), ReduceOp::Sum);
    if rank == 1 {
        t.err(
            r,
            "the wrong rank",
            invalid_mentioning("send has 4 elements but recv has 5"),
        );
    } else {
        t.err(r, "the other ranks", peer_invalid(vec![1]));
    }
    still_in_step(t, c, "after one rank's length mismatch");
}

fn one_rank_root_out_of_range<C: Backend>(t: &T, c: &C) {
    let root = if c.rank() == 1 { 99 } else { 0 };
    let mut buf = c.up(&[0u8; 3]);
    let r = c.broadcast::<u8>(C::w(&mut buf), root);
    if c.rank() == 1 {
        t.err(r, "the wrong rank", invalid_mentioning("root 99"));
    } else {
        t.err(r, "the other ranks", peer_invalid(vec![1]));
    }
    still_in_step(t, c, "after one rank's root out of range");
}

fn cross_rank_count_mismatch<C: Backend>(t: &T, c: &C) {
    let n = if c.rank() == 1 { 5 } else { 4 };
    let send = c.up(&vec![1.0f64; n]);
    let mut recv = c.up(&vec![0.0f64; n]);
    t.err(c.all_reduce::<f64>(C::r(&send), C::w(&mut recv), ReduceOp::Sum), "all_reduce", |e| {
        matches!(e, Error::Mismatch { field: "count", values, .. } if values.contains(&(0, "4".into())) && values.contains(&(1, "5".into())))
    });
    let mut b = c.up(&vec![0i32; n]);
    t.err(
        c.broadcast::<i32>(C::w(&mut b), 0),
        "broadcast",
        mismatch("count"),
    );
    still_in_step(t, c, "after a count mismatch");
}

fn cross_rank_counts_array_mismatch<C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let counts: Vec<usize> = (0..size)
        .map(|r| if rank == 1 && r == 0 { 2 } else { 1 })
        .collect();
    let mine = c.up(&vec![0i32; counts[rank]]);
    let mut all = c.up(&vec![0i32; counts.iter().sum()]);
    t.err(
        c.all_gather_v::<i32>(C::r(&mine), C::w(&mut all), &counts),
        "all_gather_v",
        mismatch("counts array"),
    );
    still_in_step(t, c, "after a counts-array mismatch");
}

fn cross_rank_reduce_op_mismatch<C: Backend>(t: &T, c: &C) {
    let op = if c.rank() == 1 {
        ReduceOp::Max
    } else {
        ReduceOp::Sum
    };
    let mut x = c.up(&[1i32; 3]);
    t.err(c.all_reduce_in_place::<i32>(C::w(&mut x), op), "reduce operation", |e| {
        matches!(e, Error::Mismatch { field: "reduce operation", values, .. } if values.contains(&(1, "max".into())))
    });
    still_in_step(t, c, "after a reduce-operation mismatch");
}

fn cross_rank_operation_mismatch<C: Backend>(t: &T, c: &C) {
    let mut x = c.up(&[1i32; 3]);
    let r = if c.rank() == 1 {
        c.broadcast::<i32>(C::w(&mut x), 0)
    } else {
        c.all_reduce_in_place::<i32>(C::w(&mut x), ReduceOp::Sum)
    };
    t.err(r, "broadcast against all_reduce", mismatch("operation"));
    still_in_step(t, c, "after an operation mismatch");
}

fn cross_rank_element_type_mismatch<C: Backend>(t: &T, c: &C) {
    let r = if c.rank() == 1 {
        let mut x = c.up(&[1.0f32; 3]);
        c.all_reduce_in_place::<f32>(C::w(&mut x), ReduceOp::Sum)
    } else {
        let mut x = c.up(&[1.0f64; 3]);
        c.all_reduce_in_place::<f64>(C::w(&mut x), ReduceOp::Sum)
    };
    t.err(r, "f32 against f64", mismatch("element type"));
    still_in_step(t, c, "after an element-type mismatch");
}

/// In place on one rank, out of place on the others: MPI requires all or none.
fn in_place_on_one_rank_only<C: Backend>(t: &T, c: &C) {
    let mut x = c.up(&[1i32; 3]);
    let r = if c.rank() == 1 {
        c.all_reduce_in_place::<i32>(C::w(&mut x), ReduceOp::Sum)
    } else {
        let send = c.up(&[1i32; 3]);
        c.all_reduce::<i32>(C::r(&send), C::w(&mut x), ReduceOp::Sum)
    };
    t.err(r, "in place on rank 1 only", mismatch("operation"));
    still_in_step(t, c, "after in place on one rank");
}

fn cross_rank_root_mismatch<C: Backend>(t: &T, c: &C) {
    let root = usize::from(c.rank() == 1);
    let mut b = c.up(&[0u8; 2]);
    t.err(
        c.broadcast::<u8>(C::w(&mut b), root),
        "broadcast",
        mismatch("root"),
    );
    still_in_step(t, c, "after a root mismatch");
}

fn all_to_all_v_pairwise_mismatch<C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let send_counts = vec![1usize; size];
    // Rank 1 expects 2 elements from rank 0, which sends 1.
    let recv_counts: Vec<usize> = (0..size)
        .map(|i| if rank == 1 && i == 0 { 2 } else { 1 })
        .collect();
    let send = c.up(&vec![0u8; size]);
    let mut recv = c.up(&vec![0u8; recv_counts.iter().sum()]);
    t.err(c.all_to_all_v::<u8>(C::r(&send), &send_counts, C::w(&mut recv), &recv_counts), "all_to_all_v", |e| {
        matches!(e, Error::Mismatch { field: "send/receive counts", values, .. }
            if *values == vec![(0, "sends 1 to rank 1".to_string()), (1, "expects 2 from rank 0".to_string())])
    });
    still_in_step(t, c, "after a pairwise counts mismatch");
}

/// A non-blocking all-reduce whose count differs on rank 1: refused on every rank when it is
/// started, not left to complete wrongly.
/// The library refuses a plan on rank 1 only (the test hook stands for an `MPIX_*_init` or a graph
/// capture that fails there): in checked mode rank 1 returns the refusal and every other rank
/// `PeerInvalid` naming it, at init, instead of waiting in `start` for a rank without a plan.
fn persistent_init_refused_on_one_rank<C: Backend>(t: &T, c: &C) {
    let mut send = c.up(&[1.0f64; 4]);
    let mut recv = c.up(&[0.0f64; 4]);
    let r = scope(|s| {
        if c.rank() == 1 {
            collectives::persistent::test_hook::refuse_next_init();
        }
        let made = c
            .all_reduce_init::<f64>(s, C::w(&mut send), C::w(&mut recv), ReduceOp::Sum)
            .map(drop);
        if c.rank() == 1 {
            t.err(made, "all_reduce_init refused here", |e| {
                matches!(
                    e,
                    Error::Unavailable {
                        what: "all_reduce_init",
                        ..
                    }
                )
            });
        } else {
            t.err(
                made,
                "all_reduce_init refused on rank 1",
                peer_invalid(vec![1]),
            );
        }
        if c.rank() == 1 {
            collectives::persistent::test_hook::refuse_next_init();
        }
        t.err(
            c.barrier_init(s).map(drop),
            "barrier_init refused on rank 1",
            |e| matches!(e, Error::Unavailable { .. } | Error::PeerInvalid { .. }),
        );
    });
    t.ok(r, "persistent init refused scope");
    still_in_step(t, c, "after a plan refused on one rank");
}

fn non_blocking_cross_rank_mismatch<C: Backend>(t: &T, c: &C) {
    let n = if c.rank() == 1 { 5 } else { 4 };
    let send = c.up(&vec![1.0f64; n]);
    let mut recv = c.up(&vec![0.0f64; n]);
    let r = scope(|s| {
        c.i_all_reduce::<f64>(s, C::r(&send), C::w(&mut recv), ReduceOp::Sum)?
            .wait()
    });
    t.err(r.and_then(|x| x), "i_all_reduce", mismatch("count"));
    still_in_step(t, c, "after a non-blocking mismatch");

    // The forms added later agree as their blocking forms do: a root, a reduce operation, and the
    // pairwise counts of an all-to-all-v.
    let (rank, size) = (c.rank(), c.size());
    let root = if rank == 1 { 0 } else { size - 1 };
    let send = c.up(&[1.0f64; 4]);
    let mut recv = c.up(&[0.0f64; 4]);
    let r = scope(|s| {
        c.i_reduce::<f64>(
            s,
            C::r(&send),
            (rank == root).then_some(C::w(&mut recv)),
            ReduceOp::Sum,
            root,
        )?
        .wait()
    });
    t.err(r.and_then(|x| x), "i_reduce", mismatch("root"));
    let op = if rank == 1 {
        ReduceOp::Max
    } else {
        ReduceOp::Sum
    };
    let mut buf = c.up(&[1.0f64; 4]);
    let r = scope(|s| {
        c.i_all_reduce_in_place::<f64>(s, C::w(&mut buf), op)?
            .wait()
    });
    t.err(
        r.and_then(|x| x),
        "i_all_reduce_in_place",
        mismatch("reduce operation"),
    );
    let send_counts = vec![1usize; size];
    let recv_counts: Vec<usize> = (0..size)
        .map(|i| if rank == 1 && i == 0 { 2 } else { 1 })
        .collect();
    let send = c.up(&vec![0u8; size]);
    let mut recv = c.up(&vec![0u8; recv_counts.iter().sum()]);
    let r = scope(|s| {
        c.i_all_to_all_v::<u8>(s, C::r(&send), &send_counts, C::w(&mut recv), &recv_counts)?
            .wait()
    });
    t.err(
        r.and_then(|x| x),
        "i_all_to_all_v",
        mismatch("send/receive counts"),
    );
    still_in_step(t, c, "after the non-blocking mismatches");
}

/// A peer that never sends: on every rank the receive, or on a stream-ordered backend (NCCL) the
/// first host wait after it, times out within its deadline plus a second, and the communicator
/// refuses every later call with `Unusable`, on every backend (NCCL aborts it, MPI leaves the receive
/// in flight). The communicator the case was given, on the same device and stream, is untouched.
fn use_after_a_timeout<C: Backend>(t: &T, c: &C) {
    let after = Duration::from_millis(500);
    let Some(timed) = t.ok(
        c.with_deadline(t.comm, after),
        "a communicator with a deadline",
    ) else {
        return;
    };
    let (rank, size) = (timed.rank(), timed.size());
    let mut buf = timed.up(&[0u8; 4]);
    let start = Instant::now();
    // Every rank receives from its neighbour and nobody sends.
    let r = timed
        .recv::<u8>(C::w(&mut buf), (rank + 1) % size, 77)
        .and_then(|()| timed.settle());
    let took = start.elapsed();
    let timed_out = matches!(r, Err(Error::Timeout { .. }));
    if size == 1 && C::STREAM_ORDERED {
        // NCCL refuses a receive from this rank with no send at once; MPI waits for the deadline.
        t.check(r.is_err(), || {
            format!("a receive from this rank nobody sends: expected an error, got {r:?}")
        });
    } else {
        t.err(
            r,
            "a receive nobody sends to, then the first wait",
            |e| matches!(e, Error::Timeout { after: a, .. } if *a == after),
        );
    }
    t.check(took < after + Duration::from_secs(1), || {
        format!("the error came after {took:?}, more than {after:?} + 1 s")
    });
    if timed_out {
        t.err(
            timed.all_reduce_in_place::<u8>(C::w(&mut buf), ReduceOp::Sum),
            "an all-reduce after the timeout",
            |e| matches!(e, Error::Unusable { .. }),
        );
        t.err(timed.barrier(), "a barrier after the timeout", |e| {
            matches!(e, Error::Unusable { .. })
        });
        if C::STREAM_ORDERED {
            t.err(timed.settle(), "a wait after the timeout", |e| {
                matches!(e, Error::Unusable { .. })
            });
        }
    }
    drop(timed);
    still_in_step(
        t,
        c,
        "the original communicator after another one timed out",
    );
}

/// A buffer on another GPU than the communicator's: refused, naming both devices.
fn buffer_on_another_gpu<C: Backend>(t: &T, c: &C) {
    let Some(other) = c.on_other_device::<f32>(4) else {
        return t.fail("no buffer on another GPU could be made".into());
    };
    let mine = c.up(&[1.0f32; 4]);
    let mut out = c.up(&[0.0f32; 4]);
    t.err(
        c.all_reduce::<f32>(C::r(&other), C::w(&mut out), ReduceOp::Sum),
        "send on another GPU",
        invalid_mentioning("send is on device"),
    );
    let mut other = other;
    t.err(
        c.all_reduce::<f32>(C::r(&mine), C::w(&mut other), ReduceOp::Sum),
        "recv on another GPU",
        invalid_mentioning("recv is on device"),
    );
    still_in_step(t, c, "after a buffer on another GPU");
}
