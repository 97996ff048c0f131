//! Reduce operations, backends, and which (element, operation, backend) combinations are allowed.
//!
//! | element kind | Sum | Prod | Min, Max | Avg |
//! |---|---|---|---|---|
//! | integers | all | all | all | NCCL only (MPI has no average; an integer mean computed as sum-then-divide would silently truncate and can overflow) |
//! | `f32`, `f64` | all | all | all | all (MPI: a sum, then each receiving rank divides by the size) |
//! | `f16`, `bf16` | NCCL | NCCL | NCCL | NCCL (MPI has no standard 16-bit float type; they move through MPI as 16-bit words, but MPI cannot add them) |
//! | complex | all | MPI backends only (NCCL would multiply lane by lane: a wrong answer) | never (complex numbers are not ordered) | all (as for floats) |
//!
//! Anything outside the table is [`Error::Unsupported`](crate::Error::Unsupported), returned before any
//! library call by [`check_op`](crate::check::check_op).

use std::fmt;

use crate::element::ElementKind;

/// A reduction applied element-wise across ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Arithmetic mean (the sum divided by the number of ranks), to within the rounding of a sum:
    /// the MPI backends sum, then divide; NCCL averages natively (each value scaled by 1/n, then
    /// summed), which can differ from the quotient by a few ulps (on 3 ranks the mean of 1, 2, 3 in
    /// `f64` can be `1.9999999999999998`). NCCL's integer mean truncates.
    Avg,
}

impl ReduceOp {
    /// All operations, in a fixed order.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    /// Name as in nccl-tests' `redop` column.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }

    /// A stable code, used to check that ranks agree on the operation.
    pub const fn code(self) -> i64 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Min => 2,
            ReduceOp::Max => 3,
            ReduceOp::Avg => 4,
        }
    }

    /// The operation with the given [`code`](Self::code).
    pub fn from_code(code: i64) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|op| op.code() == code)
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ReduceOp {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ReduceOp::ALL
            .into_iter()
            .find(|op| op.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown reduce operation `{s}` (expected sum, prod, min, max or avg)")
            })
    }
}

/// The backends a [`Communicator`](crate::Communicator) can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendKind {
    /// MPI on host memory.
    MpiHost,
    /// A CUDA-aware MPI on device memory.
    MpiCuda,
    /// Device memory staged through pinned host memory and a host MPI.
    MpiStaged,
    /// NCCL on device memory.
    Nccl,
}

impl BackendKind {
    /// Whether MPI does the arithmetic of reductions on this backend.
    pub const fn reduces_with_mpi(self) -> bool {
        matches!(
            self,
            BackendKind::MpiHost | BackendKind::MpiCuda | BackendKind::MpiStaged
        )
    }

    /// Name as in collbench's `--backend` flag.
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::MpiHost => "mpi",
            BackendKind::MpiCuda => "cuda-mpi",
            BackendKind::MpiStaged => "mpi-staged",
            BackendKind::Nccl => "nccl",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why `op` cannot reduce `kind` on `backend`, or `None` when it can.
pub const fn refusal(
    kind: ElementKind,
    op: ReduceOp,
    backend: BackendKind,
) -> Option<&'static str> {
    let mpi = backend.reduces_with_mpi();
    match (kind, op) {
        (ElementKind::Complex, ReduceOp::Min | ReduceOp::Max) => {
            Some("complex numbers are not ordered")
        }
        (ElementKind::Complex, ReduceOp::Prod) if !mpi => {
            Some("complex travels as two real lanes here, so a product would multiply lane by lane")
        }
        (ElementKind::HalfFloat, _) if mpi => {
            Some("MPI has no standard 16-bit float type to reduce")
        }
        (ElementKind::Integer, ReduceOp::Avg) if mpi => {
            Some("MPI has no average; an integer mean as sum-then-divide would truncate silently")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};
    use num_complex::Complex;

    use super::*;
    use crate::element::Element;

    const BACKENDS: [BackendKind; 4] = [
        BackendKind::MpiHost,
        BackendKind::MpiCuda,
        BackendKind::MpiStaged,
        BackendKind::Nccl,
    ];

    fn allowed<T: Element>(op: ReduceOp, b: BackendKind) -> bool {
        refusal(T::KIND, op, b).is_none()
    }

    #[test]
    fn complex_allows_sum_and_avg_everywhere() {
        for b in BACKENDS {
            assert!(allowed::<Complex<f64>>(ReduceOp::Sum, b));
            assert!(allowed::<Complex<f64>>(ReduceOp::Avg, b));
            assert!(allowed::<Complex<f32>>(ReduceOp::Sum, b));
        }
    }

    #[test]
    fn complex_prod_only_where_mpi_multiplies() {
        assert!(allowed::<Complex<f64>>(
            ReduceOp::Prod,
            BackendKind::MpiHost
        ));
        assert!(allowed::<Complex<f64>>(
            ReduceOp::Prod,
            BackendKind::MpiCuda
        ));
        assert!(allowed::<Complex<f64>>(
            ReduceOp::Prod,
            BackendKind::MpiStaged
        ));
        assert!(!allowed::<Complex<f64>>(ReduceOp::Prod, BackendKind::Nccl));
    }

    #[test]
    fn half_floats_reduce_on_nccl_only() {
        for op in ReduceOp::ALL {
            assert!(allowed::<f16>(op, BackendKind::Nccl));
            assert!(allowed::<bf16>(op, BackendKind::Nccl));
            assert!(!allowed::<f16>(op, BackendKind::MpiHost));
            assert!(!allowed::<bf16>(op, BackendKind::MpiStaged));
        }
    }

    #[test]
    fn avg_on_mpi_for_floats_not_integers() {
        assert!(allowed::<f32>(ReduceOp::Avg, BackendKind::MpiHost));
        assert!(allowed::<f64>(ReduceOp::Avg, BackendKind::MpiHost));
        assert!(!allowed::<i32>(ReduceOp::Avg, BackendKind::MpiHost));
        assert!(!allowed::<u8>(ReduceOp::Avg, BackendKind::MpiCuda));
        assert!(allowed::<i32>(ReduceOp::Avg, BackendKind::Nccl));
    }

    #[test]
    fn reals_and_integers_allow_the_rest_everywhere() {
        for b in BACKENDS {
            for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
                assert!(allowed::<f32>(op, b));
                assert!(allowed::<f64>(op, b));
                assert!(allowed::<i32>(op, b));
                assert!(allowed::<u8>(op, b));
                assert!(allowed::<i64>(op, b));
            }
        }
    }

    #[test]
    fn names_codes_and_parsing_round_trip() {
        for op in ReduceOp::ALL {
            assert_eq!(ReduceOp::from_code(op.code()), Some(op));
            assert_eq!(op.name().parse::<ReduceOp>(), Ok(op));
        }
        assert!("mean".parse::<ReduceOp>().is_err());
        assert_eq!(ReduceOp::from_code(99), None);
    }
}
