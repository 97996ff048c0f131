//! Every collective of the NCCL backend, for f32, f64, bf16, i32, u8 and complex<f64>, through the same
//! suite as the host backend (tests/common/suite.rs), on GPUs. One rank per GPU:
//! `mpirun -n 2 target/release/deps/nccl_collectives-*`. Without a CUDA driver or libnccl it reports
//! that it was skipped and passes nothing.

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use std::cell::OnceCell;

use collectives::backend::nccl::{cuda_driver_present, UnevenAlgorithm};
use collectives::{Communicator, Error, NcclComm, ReduceOp};
use common::suite::{self, Backend};
use common::{case, checked, Case, T};
use half::bf16;
use num_complex::Complex;

thread_local! {
    /// One NCCL communicator for the whole run (made collectively by the first test on every rank).
    static NCCL: OnceCell<NcclComm> = const { OnceCell::new() };
}

fn with_nccl(t: &T, body: impl FnOnce(&NcclComm)) {
    NCCL.with(|cell| {
        if cell.get().is_none() {
            match NcclComm::from_mpi(t.comm, None) {
                Ok(c) => {
                    let _ = cell.set(c);
                }
                Err(e) => return t.fail(format!("NcclComm::from_mpi: {e}")),
            }
        }
        if let Some(c) = cell.get() {
            body(c)
        }
    })
}

/// A checked NCCL communicator for one test (checked mode agrees through MPI).
fn with_checked_nccl(t: &T, body: impl FnOnce(&NcclComm)) {
    match NcclComm::from_mpi(t.comm, None) {
        Ok(c) => body(&c.with_checked(true)),
        Err(e) => t.fail(format!("NcclComm::from_mpi: {e}")),
    }
}

/// The uneven suite with the all-gather-v algorithm forced, so both paths run at every size.
fn uneven_with(t: &T, algorithm: UnevenAlgorithm) {
    match NcclComm::from_mpi(t.comm, None) {
        Ok(c) => {
            let c = c.with_uneven_algorithm(algorithm);
            suite::uneven::<f64, NcclComm>(t, &c);
            suite::uneven::<Complex<f64>, NcclComm>(t, &c);
        }
        Err(e) => t.fail(format!("NcclComm::from_mpi: {e}")),
    }
}

fn bad_input(t: &T) {
    with_nccl(t, |c| {
        let (rank, size) = (c.rank(), c.size());
        let four = c.up(&[1.0f64; 4]);
        let mut three = c.up(&[0.0f64; 3]);
        t.err(c.all_reduce(&four, &mut three, ReduceOp::Sum), "length mismatch", |e| {
            matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("send has 4 elements but recv has 3"))
        });
        let z = c.up(&[Complex::new(1.0f64, 1.0); 2]);
        let mut zo = c.up(&[Complex::new(0.0f64, 0.0); 2]);
        for op in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod] {
            t.err(
                c.all_reduce(&z, &mut zo, op),
                "complex max/min/prod on NCCL",
                |e| {
                    matches!(
                        e,
                        Error::Unsupported {
                            element: "complex<f64>",
                            ..
                        }
                    )
                },
            );
        }
        let mut b = c.up(&[0u8; 2]);
        t.err(c.broadcast(&mut b, size), "root out of range", |e| {
            matches!(e, Error::InvalidArgument { .. })
        });
        t.err(
            c.all_gather_v(&four, &mut three, &vec![4; size + 1]),
            "counts of wrong length",
            |e| matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("one per rank")),
        );
        t.err(c.send(&four, rank, -1), "negative tag", |e| {
            matches!(e, Error::InvalidArgument { .. })
        });
        // Nothing went wrong on the communicator: it still works.
        let mut x = c.up(&[1u32; 3]);
        t.ok(
            c.all_reduce_in_place(&mut x, ReduceOp::Sum),
            "a good call afterwards",
        );
        t.eq(&c.down(&x), &vec![size as u32; 3], "a good call afterwards");
    });
}

fn checked_mismatch(t: &T) {
    with_checked_nccl(t, |c| {
        let n = if c.rank() == 1 { 5 } else { 4 };
        let send = c.up(&vec![1.0f32; n]);
        let mut recv = c.up(&vec![0.0f32; n]);
        t.err(
            c.all_reduce(&send, &mut recv, ReduceOp::Sum),
            "cross-rank count mismatch",
            |e| matches!(e, Error::Mismatch { field: "count", .. }),
        );
        let mut x = c.up(&[2.0f64; 2]);
        t.ok(
            c.all_reduce_in_place(&mut x, ReduceOp::Sum),
            "in step afterwards",
        );
        t.eq(
            &c.down(&x),
            &vec![2.0 * c.size() as f64; 2],
            "in step afterwards",
        );
    });
}

macro_rules! suite_cases {
    ($v:ty, $name:literal) => {
        [
            case(concat!("nccl_reductions_", $name), |t| {
                with_nccl(t, |c| suite::reductions::<$v, NcclComm>(t, c))
            }),
            case(concat!("nccl_movement_", $name), |t| {
                with_nccl(t, |c| suite::movement::<$v, NcclComm>(t, c))
            }),
            case(concat!("nccl_uneven_", $name), |t| {
                with_nccl(t, |c| suite::uneven::<$v, NcclComm>(t, c))
            }),
            case(concat!("nccl_point_to_point_", $name), |t| {
                with_nccl(t, |c| suite::point_to_point::<$v, NcclComm>(t, c))
            }),
            case(concat!("nccl_non_blocking_", $name), |t| {
                with_nccl(t, |c| suite::non_blocking::<$v, NcclComm>(t, c))
            }),
        ]
    };
}

fn main() {
    if !cuda_driver_present() || collectives::nccl_sys::library().is_err() {
        println!("nccl_collectives: needs a CUDA driver and libnccl; skipped");
        println!("mpi-tests: 0 passed, 0 failed (no GPU)");
        return;
    }
    let mut cases: Vec<Case> = Vec::new();
    cases.extend(suite_cases!(f32, "f32"));
    cases.extend(suite_cases!(f64, "f64"));
    cases.extend(suite_cases!(bf16, "bf16"));
    cases.extend(suite_cases!(i32, "i32"));
    cases.extend(suite_cases!(u8, "u8"));
    cases.extend(suite_cases!(Complex<f64>, "complex_f64"));
    cases.extend([
        case("nccl_barrier_split_dup", |t| {
            with_nccl(t, |c| suite::barrier_split_dup(t, c))
        }),
        case("nccl_bad_input", bad_input),
        case("nccl_uneven_grouped_p2p", |t| {
            uneven_with(t, UnevenAlgorithm::GroupedP2p)
        }),
        case("nccl_uneven_broadcasts", |t| {
            uneven_with(t, UnevenAlgorithm::Broadcasts)
        }),
        checked("nccl_checked_mismatch", 2, checked_mismatch),
    ]);
    common::run(&cases)
}
