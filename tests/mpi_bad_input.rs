//! The bad-input catalog (tests/common/catalog.rs) on the host backend, plus what only host buffers
//! have (ndarray views). Every case passes something wrong and checks that every rank returns the
//! right typed error, with no panic and no hang. The device backends run the same catalog in
//! tests/cuda_mpi_collectives.rs and tests/nccl_collectives.rs.
//! Run: `mpirun -n N target/debug/deps/mpi_bad_input-*` (or `cargo xtask test`).

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;

use catalog::invalid_mentioning;
use collectives::{Checked, Communicator, HostArray, MpiComm, ReduceOp};
use common::{case, catalog, Case, T};

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

/// The catalog's communicator for `Checked<MpiComm>`: a duplicate with its own checked-mode flag
/// off, so every agreement these cases see is the wrapper's.
fn with_wrapped(t: &T, _checked: bool, body: &mut dyn FnMut(&Checked<MpiComm>)) {
    match t.comm.dup() {
        Ok(c) => body(&Checked::new(c.with_checked(false))),
        Err(e) => t.fail(format!("dup: {e}")),
    }
}

fn main() {
    // The harness makes each case's communicator in the checked mode the case asks for.
    let with: catalog::With<MpiComm> = |t, _checked, body| body(t.comm);
    let mut cases: Vec<Case> = catalog::cases("mpi", with);
    // The whole catalog again through the wrapper: the cases that need checked mode get it from
    // `Checked` alone, and the others return the same errors through it.
    cases.extend(catalog::cases("mpi_wrapped", with_wrapped));
    cases.push(case("mpi_non_contiguous_ndarray", non_contiguous_ndarray));
    common::run(&cases)
}
