//! The bad-input catalog: each case passes something wrong and checks that every rank returns the right
//! error, with no panic and no hang. Cases where only some ranks are wrong run in checked mode, the mode
//! that turns them into errors on every rank (the wrong rank gets its own error, the others
//! `PeerInvalid` or `Mismatch`).
//! Run: `mpirun -n N target/debug/deps/mpi_bad_input-*` (or `cargo xtask test`).

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use collectives::{Communicator, Error, HostArray, ReduceOp};
use common::{case, checked, Case, T};
use half::f16;
use num_complex::Complex;

fn invalid(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument { .. })
}

fn invalid_mentioning<'a>(needle: &'a str) -> impl FnOnce(&Error) -> bool + 'a {
    move |e| matches!(e, Error::InvalidArgument { msg, .. } if msg.contains(needle))
}

fn peer_invalid(ranks: Vec<usize>) -> impl FnOnce(&Error) -> bool {
    move |e| matches!(e, Error::PeerInvalid { ranks: r, .. } if *r == ranks)
}

fn mismatch(field: &'static str) -> impl FnOnce(&Error) -> bool {
    move |e| matches!(e, Error::Mismatch { field: f, .. } if *f == field)
}

/// Every rank passes lengths that do not fit together: every rank refuses locally.
fn length_mismatch_each_collective(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    let c = t.comm;
    let four = vec![1.0f64; 4];
    let mut three = vec![0.0f64; 3];
    t.err(
        c.all_reduce(&four[..], &mut three[..], ReduceOp::Sum),
        "all_reduce",
        invalid_mentioning("send has 4 elements but recv has 3"),
    );
    t.err(
        c.reduce(&four[..], Some(&mut three[..]), ReduceOp::Sum, rank),
        "reduce at root",
        invalid,
    );
    t.err(
        c.reduce(&four[..], None, ReduceOp::Sum, rank),
        "reduce root without recv",
        invalid_mentioning("root must pass"),
    );
    let mut short = vec![0.0f64; 4 * size - 1];
    t.err(
        c.all_gather(&four[..], &mut short[..]),
        "all_gather",
        invalid_mentioning("ranks x 4 elements"),
    );
    t.err(
        c.gather(&four[..], Some(&mut short[..]), rank),
        "gather at root",
        invalid,
    );
    let mut four_out = vec![0.0f64; 4];
    t.err(
        c.scatter(Some(&short[..]), &mut four_out[..], rank),
        "scatter at root",
        invalid,
    );
    t.err(
        c.scatter(None, &mut three[..], rank),
        "scatter root without send",
        invalid_mentioning("root must pass"),
    );
    let counts = vec![2usize; size];
    t.err(
        c.all_gather_v(&four[..], &mut short[..], &counts),
        "all_gather_v send",
        invalid_mentioning(&format!("counts[{rank}] is 2")),
    );
    let two = vec![1.0f64; 2];
    t.err(
        c.all_gather_v(&two[..], &mut short[..], &counts),
        "all_gather_v recv",
        invalid_mentioning("the sum of counts"),
    );
    t.err(
        c.gather_v(&four[..], Some(&mut short[..]), &counts, rank),
        "gather_v",
        invalid,
    );
    t.err(
        c.scatter_v(None, &mut three[..], &counts, (rank + 1) % size),
        "scatter_v recv",
        invalid,
    );
    t.err(
        c.reduce_scatter(&four[..], &mut three[..], ReduceOp::Sum),
        "reduce_scatter",
        invalid,
    );
    let mut odd = vec![0.0f64; 4 * size + 1];
    let odd_send = vec![0.0f64; 4 * size + 1];
    if size > 1 {
        t.err(
            c.all_to_all(&odd_send[..], &mut odd[..]),
            "all_to_all not a multiple",
            invalid_mentioning("not a multiple"),
        );
    }
    t.err(
        c.all_to_all(&four[..], &mut three[..]),
        "all_to_all lengths",
        invalid,
    );
    t.err(
        c.all_to_all_v(&four[..], &counts, &mut three[..], &counts),
        "all_to_all_v",
        invalid,
    );
}

fn root_out_of_range(t: &T) {
    let size = t.size();
    let c = t.comm;
    let mut buf = vec![0u8; 4];
    let mut big = vec![0u8; 4 * size];
    let oob_msg = format!("root {size} is out of range");
    let oob = invalid_mentioning(&oob_msg);
    t.err(
        c.broadcast(&mut buf[..], size),
        "broadcast",
        invalid_mentioning(&format!("root {size} is out of range")),
    );
    t.err(
        c.reduce(&[1u8][..], None, ReduceOp::Sum, size),
        "reduce",
        invalid_mentioning("out of range"),
    );
    t.err(
        c.gather(&buf[..], Some(&mut big[..]), size + 3),
        "gather",
        invalid_mentioning("out of range"),
    );
    t.err(
        c.scatter(None, &mut buf[..], usize::MAX),
        "scatter",
        invalid_mentioning("out of range"),
    );
    t.err(
        c.gather_v(&buf[..0], None, &vec![0; size], size),
        "gather_v",
        oob,
    );
    t.err(
        c.send(&buf[..], size, 0),
        "send to a rank out of range",
        invalid_mentioning("destination"),
    );
    t.err(
        c.recv(&mut buf[..], size + 1, 0),
        "recv from a rank out of range",
        invalid_mentioning("source"),
    );
    t.err(
        c.send(&buf[..], 0, -1),
        "negative tag",
        invalid_mentioning("tag -1"),
    );
    if c.tag_ub() < i32::MAX {
        t.err(
            c.send(&buf[..], 0, c.tag_ub() + 1),
            "tag above MPI_TAG_UB",
            invalid,
        );
    }
    t.err(
        c.send(&buf[..], 0, i32::MIN),
        "tag i32::MIN",
        invalid_mentioning("outside 0.."),
    );
}

fn counts_array_of_wrong_length(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    let c = t.comm;
    let counts = vec![1usize; size + 1];
    let send = vec![1i32; 1];
    let mut recv = vec![0i32; size + 1];
    let what = format!("{} entries; it needs one per rank ({size})", size + 1);
    t.err(
        c.all_gather_v(&send[..], &mut recv[..], &counts),
        "all_gather_v",
        invalid_mentioning(&what),
    );
    t.err(
        c.gather_v(&send[..], Some(&mut recv[..]), &counts, rank),
        "gather_v",
        invalid_mentioning(&what),
    );
    t.err(
        c.scatter_v(Some(&recv[..]), &mut recv.clone()[..1], &counts, rank),
        "scatter_v",
        invalid_mentioning(&what),
    );
    let short = vec![1usize; size.saturating_sub(1)];
    t.err(
        c.all_to_all_v(&send[..0], &short, &mut recv[..0], &short),
        "all_to_all_v",
        invalid_mentioning("one per rank"),
    );
}

fn unsupported_element_op_pairs(t: &T) {
    let c = t.comm;
    let z = vec![Complex::new(1.0f64, 2.0); 3];
    let mut out = vec![Complex::new(0.0f64, 0.0); 3];
    for op in [ReduceOp::Max, ReduceOp::Min] {
        t.err(c.all_reduce(&z[..], &mut out[..], op), "complex max/min", |e| {
            matches!(e, Error::Unsupported { element: "complex<f64>", reduce_op: Some(o), .. } if *o == op)
        });
        t.err(
            c.all_reduce_in_place(&mut out[..], op),
            "complex max/min in place",
            |e| matches!(e, Error::Unsupported { .. }),
        );
        t.err(
            c.reduce_scatter(&z[..0], &mut out[..0], op),
            "complex reduce_scatter max/min",
            |e| matches!(e, Error::Unsupported { .. }),
        );
    }
    let h = vec![f16::from_f32(1.0); 2];
    let mut hout = vec![f16::from_f32(0.0); 2];
    t.err(
        c.all_reduce(&h[..], &mut hout[..], ReduceOp::Sum),
        "f16 sum on MPI",
        |e| matches!(e, Error::Unsupported { element: "f16", .. }),
    );
    t.err(
        c.all_reduce(&[1i32][..], &mut [0i32][..], ReduceOp::Avg),
        "integer avg on MPI",
        |e| {
            matches!(
                e,
                Error::Unsupported {
                    element: "i32",
                    reduce_op: Some(ReduceOp::Avg),
                    ..
                }
            )
        },
    );
    // f16 still moves through MPI: a broadcast is exact.
    let mut b = vec![f16::from_f32(t.rank() as f32 + 0.5); 2];
    t.ok(c.broadcast(&mut b[..], 0), "f16 broadcast");
    t.eq(&b, &vec![f16::from_f32(0.5); 2], "f16 broadcast");
}

fn count_overflow(t: &T) {
    // 2^31 bytes: one more than MPI's int count. The allocation is zeroed lazily and never touched.
    let n = 1usize << 31;
    let mut big = vec![0u8; n];
    t.err(t.comm.all_reduce_in_place(&mut big[..], ReduceOp::Sum), "all_reduce of 2^31 elements", |e| {
        matches!(e, Error::CountOverflow { count, limit, .. } if *count == n && *limit == i32::MAX as usize)
    });
    t.err(
        t.comm.broadcast(&mut big[..], 0),
        "broadcast of 2^31 elements",
        |e| matches!(e, Error::CountOverflow { .. }),
    );
    t.err(t.comm.send(&big[..], 0, 0), "send of 2^31 elements", |e| {
        matches!(e, Error::CountOverflow { .. })
    });
}

fn non_contiguous_ndarray(t: &T) {
    let a = ndarray::Array2::<f64>::zeros((4, 6));
    let col = a.column(2);
    t.err(
        col.host_slice().map(|s| s.len()),
        "a column view",
        invalid_mentioning("as_standard_layout"),
    );
    t.err(
        a.t().host_slice().map(|s| s.len()),
        "a transposed view",
        invalid_mentioning("not contiguous in row-major order"),
    );
    // The fix the error names works.
    let fixed = col.as_standard_layout();
    let mut out = vec![0.0; 4];
    if let Some(s) = t.ok(fixed.host_slice(), "as_standard_layout") {
        t.ok(
            t.comm.all_reduce(s, &mut out[..], ReduceOp::Sum),
            "all_reduce of the fixed view",
        );
    }
}

fn received_message_of_another_length(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    // Each rank sends 3 elements but expects 2: MPI reports truncation.
    let mut recv = vec![0u32; 2];
    t.err(
        t.comm
            .send_recv(&[1u32, 2, 3][..], next, &mut recv[..], prev, 5),
        "longer message",
        |e| matches!(e, Error::Mpi { .. } | Error::InvalidArgument { .. }),
    );
    t.check(recv == [0, 0] || recv == [1, 2], || {
        format!("a truncated receive wrote {recv:?}")
    });
    // Each rank sends 1 element but expects 2: a short message is refused too.
    let mut recv = vec![0u32; 2];
    t.err(t.comm.send_recv(&[1u32][..], next, &mut recv[..], prev, 6), "shorter message", |e| {
        // From another rank: the received count is checked; from this rank itself: the lengths are.
        matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("received 1 elements") || msg.contains("has 1 elements but recv has 2"))
    });
}

// ---- Only some ranks are wrong: checked mode makes every rank return. ----

fn one_rank_length_mismatch(t: &T) {
    let rank = t.rank();
    let send = vec![1.0f32; 4];
    let mut recv = vec![0.0f32; if rank == 1 { 5 } else { 4 }];
    let r = t.comm.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum);
    if rank == 1 {
        t.err(
            r,
            "the wrong rank",
            invalid_mentioning("send has 4 elements but recv has 5"),
        );
    } else {
        t.err(r, "the other ranks", peer_invalid(vec![1]));
    }
    // Every rank is still in step: a good call afterwards works.
    let mut x = [1u8];
    t.ok(
        t.comm.all_reduce_in_place(&mut x[..], ReduceOp::Sum),
        "a good call afterwards",
    );
    t.eq(&(x[0] as usize), &t.size(), "a good call afterwards");
}

fn one_rank_root_out_of_range(t: &T) {
    let root = if t.rank() == 1 { 99 } else { 0 };
    let mut buf = vec![0u8; 3];
    let r = t.comm.broadcast(&mut buf[..], root);
    if t.rank() == 1 {
        t.err(r, "the wrong rank", invalid_mentioning("root 99"));
    } else {
        t.err(r, "the other ranks", peer_invalid(vec![1]));
    }
}

fn cross_rank_count_mismatch(t: &T) {
    let n = if t.rank() == 1 { 5 } else { 4 };
    let send = vec![1.0f64; n];
    let mut recv = vec![0.0f64; n];
    let r = t.comm.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum);
    t.err(r, "all_reduce", |e| {
        matches!(e, Error::Mismatch { field: "count", values, .. } if values.contains(&(0, "4".into())) && values.contains(&(1, "5".into())))
    });
    let mut b = vec![0i32; n];
    t.err(
        t.comm.broadcast(&mut b[..], 0),
        "broadcast",
        mismatch("count"),
    );
    let counts: Vec<usize> = (0..t.size())
        .map(|r| if t.rank() == 1 && r == 0 { 2 } else { 1 })
        .collect();
    let mine = vec![0i32; counts[t.rank()]];
    let mut all = vec![0i32; counts.iter().sum()];
    t.err(
        t.comm.all_gather_v(&mine[..], &mut all[..], &counts),
        "all_gather_v",
        mismatch("counts array"),
    );
}

fn cross_rank_op_mismatch(t: &T) {
    let op = if t.rank() == 1 {
        ReduceOp::Max
    } else {
        ReduceOp::Sum
    };
    let mut x = vec![1i64; 3];
    t.err(t.comm.all_reduce_in_place(&mut x[..], op), "reduce operation", |e| {
        matches!(e, Error::Mismatch { field: "reduce operation", values, .. } if values.contains(&(1, "max".into())))
    });
    // Different collectives altogether.
    let r = if t.rank() == 1 {
        t.comm.broadcast(&mut x[..], 0)
    } else {
        t.comm.all_reduce_in_place(&mut x[..], ReduceOp::Sum)
    };
    t.err(r, "operation", mismatch("operation"));
    // Different element types.
    let r = if t.rank() == 1 {
        t.comm
            .all_reduce_in_place(&mut [1.0f32; 3][..], ReduceOp::Sum)
    } else {
        t.comm
            .all_reduce_in_place(&mut [1.0f64; 3][..], ReduceOp::Sum)
    };
    t.err(r, "element type", mismatch("element type"));
    // In place on one rank, out of place on the others: MPI requires all or none.
    let r = if t.rank() == 1 {
        t.comm.all_reduce_in_place(&mut x[..], ReduceOp::Sum)
    } else {
        t.comm.all_reduce(&[1i64; 3][..], &mut x[..], ReduceOp::Sum)
    };
    t.err(r, "in place on one rank only", mismatch("operation"));
}

fn cross_rank_root_mismatch(t: &T) {
    let root = usize::from(t.rank() == 1);
    let mut b = vec![0u8; 2];
    t.err(
        t.comm.broadcast(&mut b[..], root),
        "broadcast",
        mismatch("root"),
    );
}

fn all_to_all_v_pairwise_mismatch(t: &T) {
    let (rank, size) = (t.rank(), t.size());
    let send_counts = vec![1usize; size];
    // Rank 1 expects 2 elements from rank 0, which sends 1.
    let recv_counts: Vec<usize> = (0..size)
        .map(|i| if rank == 1 && i == 0 { 2 } else { 1 })
        .collect();
    let send = vec![0u8; size];
    let mut recv = vec![0u8; recv_counts.iter().sum()];
    t.err(t.comm.all_to_all_v(&send[..], &send_counts, &mut recv[..], &recv_counts), "all_to_all_v", |e| {
        matches!(e, Error::Mismatch { field: "send/receive counts", values, .. }
            if *values == vec![(0, "sends 1 to rank 1".to_string()), (1, "expects 2 from rank 0".to_string())])
    });
}

fn main() {
    let cases: Vec<Case> = vec![
        case(
            "length_mismatch_each_collective",
            length_mismatch_each_collective,
        ),
        checked(
            "length_mismatch_each_collective_checked",
            1,
            length_mismatch_each_collective,
        ),
        case("root_out_of_range", root_out_of_range),
        case("counts_array_of_wrong_length", counts_array_of_wrong_length),
        case("unsupported_element_op_pairs", unsupported_element_op_pairs),
        case("count_overflow", count_overflow),
        checked("count_overflow_checked", 1, count_overflow),
        case("non_contiguous_ndarray", non_contiguous_ndarray),
        case(
            "received_message_of_another_length",
            received_message_of_another_length,
        ),
        checked("one_rank_length_mismatch", 2, one_rank_length_mismatch),
        checked("one_rank_root_out_of_range", 2, one_rank_root_out_of_range),
        checked("cross_rank_count_mismatch", 2, cross_rank_count_mismatch),
        checked("cross_rank_op_mismatch", 2, cross_rank_op_mismatch),
        checked("cross_rank_root_mismatch", 2, cross_rank_root_mismatch),
        checked(
            "all_to_all_v_pairwise_mismatch",
            2,
            all_to_all_v_pairwise_mismatch,
        ),
    ];
    common::run(&cases)
}
