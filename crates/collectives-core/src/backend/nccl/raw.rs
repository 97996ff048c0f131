//! Plumbing for NCCL calls: the library, result codes, wire types and operations.

use std::ffi::CStr;

use nccl_sys as sys;

use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::ReduceOp;

/// The process-wide NCCL library, or why it cannot be used.
pub(crate) fn library() -> Result<&'static sys::Library> {
    sys::library().map_err(Error::from)
}

/// Turn a missing optional entry point into our error type.
pub(crate) fn unavailable(e: sys::Error) -> Error {
    Error::from(e)
}

/// `ncclGetErrorString` of a code.
pub(crate) fn error_name(lib: &sys::Library, code: sys::ncclResult_t) -> String {
    let Ok(f) = sys::nccl_fn!(lib, ncclGetErrorString) else {
        return format!("ncclResult {code}");
    };
    // SAFETY: ncclGetErrorString returns a pointer to a static NUL-terminated string for any code.
    let p = unsafe { f(code) };
    if p.is_null() {
        return format!("ncclResult {code}");
    }
    // SAFETY: non-null, NUL-terminated, static (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `ncclGetLastError` of a communicator (or of the process, for a null one).
pub(crate) fn last_error(lib: &sys::Library, comm: sys::ncclComm_t) -> String {
    let Ok(f) = sys::nccl_fn!(lib, ncclGetLastError) else {
        return String::new();
    };
    // SAFETY: ncclGetLastError accepts any communicator handle, or null, and returns a NUL-terminated
    // string that stays valid until the next NCCL call on this thread; it is copied at once.
    let p = unsafe { f(comm) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated (see above); copied before any other NCCL call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The [`Error::Nccl`] for a result code.
pub(crate) fn error(
    lib: &sys::Library,
    comm: sys::ncclComm_t,
    op: &'static str,
    code: sys::ncclResult_t,
) -> Error {
    Error::Nccl {
        op,
        code,
        name: error_name(lib, code),
        message: last_error(lib, comm),
    }
}

/// What to do when NCCL's bootstrap fails, for this host: the interface NCCL's rules take here
/// (`NCCL_SOCKET_IFNAME` as set, else its defaults) and the variable that chooses it.
pub(crate) fn bootstrap_hint() -> String {
    let set = std::env::var("NCCL_SOCKET_IFNAME").ok();
    let family = std::env::var("NCCL_SOCKET_FAMILY").ok();
    let ifaces = crate::netif::interfaces().unwrap_or_default();
    let choice = crate::netif::nccl_choice(&ifaces, set.as_deref(), family.as_deref());
    hint_for(
        &choice,
        crate::netif::preferred(&ifaces).map(|i| i.name.as_str()),
    )
}

/// [`bootstrap_hint`] from NCCL's choice and the interface to pin to, when there is one.
fn hint_for(choice: &crate::netif::NcclChoice, preferred: Option<&str>) -> String {
    let tried = match choice.bootstrap() {
        Some((name, addr)) => format!(
            "NCCL's bootstrap used interface {name} ({addr}), chosen by {}",
            choice.rule
        ),
        None => format!("no interface matches {} here", choice.rule),
    };
    let pin = preferred.map_or_else(
        || "the interface that reaches the other nodes".to_owned(),
        |p| format!("={p}"),
    );
    format!(
        "{tried}; if that does not reach every other node, set NCCL_SOCKET_IFNAME={pin} on every \
         rank (`collbench doctor` names each node's interfaces and the settings)"
    )
}

/// `e` with [`bootstrap_hint`] added to an [`Error::Nccl`]'s message: for the calls that set up a
/// communicator, whose failure is most often the network.
pub(crate) fn with_bootstrap_hint(e: Error) -> Error {
    match e {
        Error::Nccl {
            op,
            code,
            name,
            message,
        } => {
            let hint = bootstrap_hint();
            Error::Nccl {
                op,
                code,
                name,
                message: if message.is_empty() {
                    hint
                } else {
                    format!("{message}; {hint}")
                },
            }
        }
        other => other,
    }
}

/// NCCL's wire type for `T` (complex numbers: their real type, twice as many).
pub(crate) fn datatype<T: Element>() -> sys::ncclDataType_t {
    T::WIRE.dtype.nccl_code() as sys::ncclDataType_t
}

/// The wire count of `len` elements, which the rules ([`crate::rules`]) checked to fit `size_t`.
pub(crate) fn wire<T: Element>(len: usize) -> usize {
    len.saturating_mul(T::WIRE.lanes)
}

/// NCCL's reduction for `op` on a communicator of `ranks` ranks (checked against the element
/// beforehand).
///
/// On one rank the mean is the sum, and is asked for as such: NCCL 2.28 runs a mean on one rank
/// through a kernel that splits the elements over its blocks by floor division and leaves the
/// last few unwritten (NVIDIA/nccl issue 1950, fixed in 2.29.7), while a sum on one rank is a
/// copy. The mean of one contribution is that contribution, so nothing changes but correctness.
pub(crate) fn redop(op: ReduceOp, ranks: usize) -> sys::ncclRedOp_t {
    match op {
        ReduceOp::Sum => sys::ncclSum,
        ReduceOp::Avg if ranks == 1 => sys::ncclSum,
        ReduceOp::Prod => sys::ncclProd,
        ReduceOp::Max => sys::ncclMax,
        ReduceOp::Min => sys::ncclMin,
        ReduceOp::Avg => sys::ncclAvg,
    }
}

#[cfg(test)]
mod tests {
    use half::bf16;
    use num_complex::Complex;

    use super::*;

    #[test]
    fn bootstrap_failures_name_the_interface_and_the_variable() {
        use crate::netif::NcclChoice;
        let choice = NcclChoice {
            rule: "default (step `^docker,lo`)".into(),
            chosen: vec![("eth0".into(), "10.77.0.1".parse().unwrap())],
        };
        let hint = hint_for(&choice, Some("eth0"));
        assert!(hint.starts_with(
            "NCCL's bootstrap used interface eth0 (10.77.0.1), chosen by default (step `^docker,lo`); "
        ), "{hint}");
        assert!(
            hint.contains("set NCCL_SOCKET_IFNAME==eth0 on every rank"),
            "{hint}"
        );
        let none = NcclChoice {
            rule: "NCCL_SOCKET_IFNAME=ens9".into(),
            chosen: vec![],
        };
        let hint = hint_for(&none, None);
        assert!(
            hint.starts_with("no interface matches NCCL_SOCKET_IFNAME=ens9 here;"),
            "{hint}"
        );
        let e = with_bootstrap_hint(Error::Nccl {
            op: "from_mpi",
            code: 2,
            name: "unhandled system error".into(),
            message: "socketStartConnect: Connect to 172.17.0.1<4242> failed".into(),
        });
        let text = e.to_string();
        assert!(
            text.starts_with("from_mpi: NCCL error 2 (unhandled system error): socketStartConnect"),
            "{text}"
        );
        assert!(text.contains("NCCL_SOCKET_IFNAME="), "{text}");
        let t = Error::Timeout {
            op: "from_mpi",
            after: std::time::Duration::from_secs(1),
        };
        assert_eq!(with_bootstrap_hint(t.clone()).to_string(), t.to_string());
    }

    #[test]
    fn wire_types_and_counts() {
        assert_eq!(datatype::<f32>(), sys::ncclFloat32);
        assert_eq!(datatype::<bf16>(), sys::ncclBfloat16);
        assert_eq!(datatype::<Complex<f64>>(), sys::ncclFloat64);
        assert_eq!(wire::<Complex<f64>>(5), 10);
        assert_eq!(wire::<u8>(5), 5);
    }

    #[test]
    fn uneven_algorithm_by_size() {
        use super::super::UnevenAlgorithm as A;
        assert_eq!(A::Auto.choose(4, 0), A::GroupedP2p);
        assert_eq!(A::Auto.choose(4, A::BROADCASTS_FROM - 1), A::GroupedP2p);
        assert_eq!(A::Auto.choose(4, A::BROADCASTS_FROM), A::Broadcasts);
        assert_eq!(A::Auto.choose(2, usize::MAX), A::GroupedP2p);
        assert_eq!(A::GroupedP2p.choose(8, usize::MAX), A::GroupedP2p);
        assert_eq!(A::Broadcasts.choose(1, 0), A::Broadcasts);
    }

    #[test]
    fn reduce_ops_match_nccl_h() {
        for ranks in [1, 2, 4] {
            assert_eq!(redop(ReduceOp::Sum, ranks), 0);
            assert_eq!(redop(ReduceOp::Prod, ranks), 1);
            assert_eq!(redop(ReduceOp::Max, ranks), 2);
            assert_eq!(redop(ReduceOp::Min, ranks), 3);
        }
        assert_eq!(redop(ReduceOp::Avg, 2), 4);
        assert_eq!(redop(ReduceOp::Avg, 4), 4);
    }

    #[test]
    fn a_mean_on_one_rank_is_asked_for_as_a_sum() {
        assert_eq!(redop(ReduceOp::Avg, 1), sys::ncclSum);
    }
}
