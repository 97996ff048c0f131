//! Every collective of the NCCL backend, for f32, f64, bf16, i32, u8 and complex<f64>, through the same
//! suite as the host backend (tests/common/suite.rs), and the bad-input catalog
//! (tests/common/catalog.rs), on GPUs. One rank per GPU:
//! `mpirun -n 2 target/release/deps/nccl_collectives-*`. Without a CUDA driver or libnccl it reports
//! that it was skipped and passes nothing.

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use std::cell::OnceCell;

use collectives::backend::nccl::{cuda_driver_present, UnevenAlgorithm};
use collectives::{Checked, NcclComm};
use common::suite;
use common::{case, catalog, Case, T};
use half::bf16;
use num_complex::Complex;

thread_local! {
    /// One NCCL communicator for the whole run (made collectively by the first test on every rank).
    static NCCL: OnceCell<NcclComm> = const { OnceCell::new() };
    /// One in checked mode (checked mode agrees through MPI), shared the same way: a case that
    /// refuses bad input on some ranks must leave it in step for the next.
    static CHECKED: OnceCell<NcclComm> = const { OnceCell::new() };
    /// `Checked` around one whose own flag is off (the wrapper alone agrees), shared the same way.
    static WRAPPED: OnceCell<Checked<NcclComm>> = const { OnceCell::new() };
}

/// The run's communicator in `cell`, made by `make` from the case's MPI communicator when the
/// first case asks (NCCL set-up takes seconds on several GPUs: once per kind, not per case).
fn shared<C>(
    cell: &'static std::thread::LocalKey<OnceCell<C>>,
    t: &T,
    make: impl FnOnce(NcclComm) -> C,
    body: impl FnOnce(&C),
) {
    cell.with(|cell| {
        if cell.get().is_none() {
            match NcclComm::from_mpi(t.comm, None) {
                Ok(c) => {
                    let _ = cell.set(make(c));
                }
                Err(e) => return t.fail(format!("NcclComm::from_mpi: {e}")),
            }
        }
        if let Some(c) = cell.get() {
            body(c)
        }
    })
}

fn with_nccl(t: &T, body: impl FnOnce(&NcclComm)) {
    shared(&NCCL, t, |c| c, body)
}

/// The run's checked NCCL communicator.
fn with_checked_nccl(t: &T, body: impl FnOnce(&NcclComm)) {
    shared(&CHECKED, t, |c| c.with_checked(true), body)
}

/// The run's `Checked` around an NCCL communicator whose flag is off.
fn with_wrapped_nccl(t: &T, body: impl FnOnce(&Checked<NcclComm>)) {
    shared(&WRAPPED, t, |c| Checked::new(c.with_checked(false)), body)
}

/// The bad-input catalog's communicator through the wrapper.
fn with_wrapped_catalog(t: &T, _checked: bool, body: &mut dyn FnMut(&Checked<NcclComm>)) {
    with_wrapped_nccl(t, |c| body(c))
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

/// The bad-input catalog's communicator: the shared one, or a checked one of its own.
fn with_catalog(t: &T, checked: bool, body: &mut dyn FnMut(&NcclComm)) {
    if checked {
        with_checked_nccl(t, |c| body(c))
    } else {
        with_nccl(t, |c| body(c))
    }
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
            case(concat!("nccl_persistent_", $name), |t| {
                with_nccl(t, |c| suite::persistent::<$v, NcclComm>(t, c))
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
        case("nccl_views", |t| with_nccl(t, |c| suite::views(t, c))),
        case("nccl_uneven_grouped_p2p", |t| {
            uneven_with(t, UnevenAlgorithm::GroupedP2p)
        }),
        case("nccl_uneven_broadcasts", |t| {
            uneven_with(t, UnevenAlgorithm::Broadcasts)
        }),
    ]);
    cases.extend([case("nccl_wrapped_suite", |t| {
        with_wrapped_nccl(t, |c| {
            suite::reductions::<f64, Checked<NcclComm>>(t, c);
            suite::movement::<Complex<f64>, Checked<NcclComm>>(t, c);
            suite::uneven::<f32, Checked<NcclComm>>(t, c);
            suite::barrier_split_dup(t, c);
            suite::non_blocking_all::<f64, Checked<NcclComm>>(t, c);
            suite::persistent::<f64, Checked<NcclComm>>(t, c);
        })
    })]);
    cases.extend(catalog::cases("nccl", with_catalog));
    cases.extend(catalog::agreed_cases("nccl_wrapped", with_wrapped_catalog));
    if catalog::visible_gpus() >= 2 {
        cases.extend(catalog::device_cases("nccl", with_catalog));
    }
    common::run(&cases)
}
