//! Checked mode: before a collective, the ranks agree that they are making the same call.
//!
//! MPI and NCCL trust every rank to pass arguments that fit together; when they do not (one rank passes
//! a longer buffer, another root, another operation), the result is a hang, a crash or a silently wrong
//! answer. In checked mode every collective first exchanges a small record of its arguments with one
//! all-gather of [`RECORD_LEN`] 64-bit integers per rank, and every rank evaluates the same rules on the
//! same table, so every rank returns the same verdict:
//!
//! - a rank whose own arguments are invalid returns its own error; the others return
//!   [`Error::PeerInvalid`] naming it (without checked mode, only the bad rank would return and the others
//!   would wait for it);
//! - ranks that disagree on the operation, element type, reduce operation, root, count or counts array
//!   return [`Error::Mismatch`] naming the ranks and their values;
//! - `all_to_all_v` adds a second all-gather of each rank's send and receive counts (`2 x size` integers
//!   per rank), so that `send_counts[j]` of rank `i` is checked against `recv_counts[i]` of rank `j`.
//!
//! A persistent plan (`*_init`) is agreed on twice in checked mode: on its arguments, like the
//! other forms, and after the backend made it, on whether its library accepted it on every rank
//! (`MPIX_*_init` or a CUDA graph capture may fail on one rank only): the rank that failed returns
//! its error, the others [`Error::PeerInvalid`].
//!
//! Point-to-point operations are not checked (they have no collective to agree through). Every rank of a
//! communicator must use the same mode: a checked rank and an unchecked rank do not make the same calls.
//!
//! The agreement waits for every rank, so a rank that never makes the call still blocks the others,
//! unless the communicator has a deadline ([`crate::deadline`]): then the agreement's all-gather is
//! polled against it like any other operation, and a missing rank is
//! [`Error::Timeout`] under the collective's name.
//!
//! # Turning it on
//!
//! [`Checked::new(comm)`](Checked::new) is the explicit way: a wrapper around any communicator of
//! this crate that is itself a [`Communicator`] (and a `DeviceCommunicator` where the wrapped one
//! is), and agrees on every collective whatever the wrapped communicator's own setting. Code
//! generic over [`Communicator`] takes it like any other backend, so checked mode is a choice made
//! where the communicator is built, not in the solver.
//!
//! Without the wrapper, a communicator's own flag decides, as before: `with_checked(on)` on
//! [`MpiComm`](crate::MpiComm) and the device communicators, else `COLLECTIVES_CHECK` (on for
//! `1`/`true`/`on`/`yes`, off for `0`/`false`/`off`/`no`), else on in debug builds and off in
//! release builds. That default is for debugging a whole program from the environment; the
//! wrapper is for code that wants the checks whatever the build and environment.
//!
//! Either way the cost is one small all-gather per collective (two for `all_to_all_v`; see
//! docs/PERFORMANCE.md), made once per call: a [`Checked`] around a communicator that already
//! agrees (its flag is on, or it is a `Checked` itself) does not agree a second time.

use crate::comm::Communicator;
use crate::element::{type_name_of_code, Element};
use crate::error::{Error, Result};
use crate::op::ReduceOp;
use crate::transport::Transport;

/// A communicator in checked mode: before every collective the ranks agree on the call (see the
/// [module documentation](self)), whatever the wrapped communicator's own setting.
///
/// `Checked<C>` is a [`Communicator`] with the wrapped one's buffers, backend and ranks, for each
/// communicator of this crate (`MpiComm`, `NcclComm`, `MpiCudaComm`, `MpiStagedComm`, and a
/// `Checked` of one), and a `DeviceCommunicator` where `C` is one. Its arguments are checked in the
/// same order and with the same errors as the wrapped communicator's, then agreed on, then made
/// by the same backend operation: a call that works unwrapped gives the same answer wrapped, and a
/// call whose arguments do not fit together across ranks returns an error on every rank instead
/// of hanging. [`checked`](Communicator::checked) says `true`; `split` and `dup` return
/// `Checked` communicators. Point-to-point operations are not agreed on (nothing to agree
/// through), as in checked mode by flag.
///
/// Every rank must wrap, or none: a rank in checked mode makes calls that the others do not.
///
/// ```no_run
/// use collectives_core::{Checked, Communicator, MpiComm, ReduceOp};
///
/// let universe = mpi::initialize().expect("MPI initializes once");
/// // Checked whatever `COLLECTIVES_CHECK` says, in debug and release builds alike.
/// let comm = Checked::new(MpiComm::world(&universe)?);
/// assert!(comm.checked());
/// let send = vec![1.0f64; 4];
/// let mut recv = vec![0.0; 4];
/// // A rank passing another length would get `Error::InvalidArgument`, and the others
/// // `Error::PeerInvalid` naming it, instead of a hang.
/// comm.all_reduce(&send[..], &mut recv[..], ReduceOp::Sum)?;
/// let world: MpiComm = comm.into_inner();
/// # drop(world);
/// # Ok::<(), collectives_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Checked<C> {
    inner: C,
}

impl<C: Communicator> Checked<C> {
    /// `comm` in checked mode. Collective only in the sense that every rank must wrap its
    /// communicator alike; it makes no call.
    pub fn new(comm: C) -> Self {
        Checked { inner: comm }
    }

    /// The wrapped communicator (its own [`checked`](Communicator::checked) setting unchanged).
    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// The wrapped communicator back, as it was given (its own setting unchanged).
    pub fn into_inner(self) -> C {
        self.inner
    }
}

/// Checked mode's agreement on `call` over `mpi` (the communicator's transport): one all-gather
/// of every rank's [`Call::record`] (and, for `all_to_all_v`, a second of the counts), then the
/// same verdict on every rank: this rank's own error first (`local`), else a peer's rejection or
/// a mismatch ([`verdict`], [`pair_verdict`]), else `local`'s value.
///
/// On a communicator refused after a timeout: the local error if there is one, else
/// [`Error::Unusable`], without any communication.
pub(crate) fn agree<R>(mpi: &dyn Transport, call: Call<'_>, local: Result<R>) -> Result<R> {
    let op = call.op().name();
    if !mpi.is_usable() {
        let value = local?;
        mpi.ensure_usable(op)?;
        return Ok(value);
    }
    let mine = call.record(local.is_ok());
    let mut table = vec![0i64; RECORD_LEN * mpi.ranks()];
    mpi.all_gather_i64(op, &mine, &mut table)?;
    let value = local?;
    verdict(op, &table)?;
    if call.needs_pair_check() {
        let mine = call.pair_record();
        let mut table = vec![0i64; mine.len() * mpi.ranks()];
        mpi.all_gather_i64(op, &mine, &mut table)?;
        pair_verdict(op, &table, mpi.ranks())?;
    }
    Ok(value)
}

/// Outside checked mode: this rank's own result, [`Error::Unusable`] after a timeout, and for
/// `split` and `dup` (which have no non-blocking twin) under a deadline a polled barrier, so a
/// missing peer is a timeout there too (the agreement is that meeting in checked mode).
pub(crate) fn pass<R>(mpi: &dyn Transport, call: Call<'_>, local: Result<R>) -> Result<R> {
    let op = call.op().name();
    let value = local?;
    mpi.ensure_usable(op)?;
    if matches!(call.op(), OpKind::Split | OpKind::Dup) {
        mpi.arrive(op)?;
    }
    Ok(value)
}

/// Integers per rank in the agreement record.
pub const RECORD_LEN: usize = 8;

/// The environment variable that switches checked mode.
pub const ENV_VAR: &str = "COLLECTIVES_CHECK";

/// Whether checked mode is on for new communicators: `COLLECTIVES_CHECK`, else on in debug builds.
pub fn enabled_by_default() -> bool {
    parse_env(std::env::var(ENV_VAR).ok().as_deref()).unwrap_or(cfg!(debug_assertions))
}

fn parse_env(value: Option<&str>) -> Option<bool> {
    match value?.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

pub use crate::operation::OpKind;

/// The name of the operation whose code is `code` in an agreement record.
fn name_of_code(code: i64) -> String {
    OpKind::ALL
        .iter()
        .find(|k| k.code() == code)
        .map(|k| k.name().to_string())
        .unwrap_or_else(|| format!("operation code {code}"))
}

/// What one rank is about to call, as far as the ranks must agree on it.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    op: OpKind,
    type_code: Option<i64>,
    reduce: Option<ReduceOp>,
    root: Option<usize>,
    count: Option<usize>,
    counts: Option<&'a [usize]>,
    all_to_all: Option<(&'a [usize], &'a [usize])>,
}

impl<'a> Call<'a> {
    /// A call of `op`.
    pub fn new(op: OpKind) -> Self {
        Call {
            op,
            type_code: None,
            reduce: None,
            root: None,
            count: None,
            counts: None,
            all_to_all: None,
        }
    }
    /// On elements of type `T`.
    pub fn element<T: Element>(mut self) -> Self {
        self.type_code = Some(T::type_code());
        self
    }
    /// With reduce operation `op`.
    pub fn reduce(mut self, op: ReduceOp) -> Self {
        self.reduce = Some(op);
        self
    }
    /// With root `root`.
    pub fn root(mut self, root: usize) -> Self {
        self.root = Some(root);
        self
    }
    /// With a count every rank must pass alike.
    pub fn count(mut self, count: usize) -> Self {
        self.count = Some(count);
        self
    }
    /// With a counts array every rank must pass alike.
    pub fn counts(mut self, counts: &'a [usize]) -> Self {
        self.counts = Some(counts);
        self
    }
    /// With all-to-all send and receive counts, checked pairwise across ranks.
    pub fn all_to_all(mut self, send_counts: &'a [usize], recv_counts: &'a [usize]) -> Self {
        self.all_to_all = Some((send_counts, recv_counts));
        self
    }
    /// The operation.
    pub fn op(&self) -> OpKind {
        self.op
    }
    /// Whether a second exchange ([`pair_record`](Self::pair_record)) is needed after the first one agreed.
    pub fn needs_pair_check(&self) -> bool {
        self.all_to_all.is_some()
    }

    /// This rank's record for the first exchange; `local_ok` says whether its own arguments passed.
    pub fn record(&self, local_ok: bool) -> [i64; RECORD_LEN] {
        let opt = |v: Option<usize>| v.map_or(-1, |v| v as i64);
        [
            self.op.code(),
            self.type_code.unwrap_or(-1),
            self.reduce.map_or(-1, ReduceOp::code),
            opt(self.root),
            opt(self.count),
            self.counts.map_or(0, fingerprint),
            i64::from(!local_ok),
            0,
        ]
    }

    /// This rank's record for the second exchange: its send counts, then its receive counts
    /// (`2 x size` integers; counts arrays were checked to have `size` entries).
    pub fn pair_record(&self) -> Vec<i64> {
        let (s, r) = self.all_to_all.unwrap_or((&[], &[]));
        s.iter().chain(r).map(|&c| c as i64).collect()
    }
}

/// FNV-1a over the length and the values: equal arrays give equal fingerprints.
fn fingerprint(counts: &[usize]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in std::iter::once(counts.len()).chain(counts.iter().copied()) {
        for b in (v as u64).to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h as i64
}

const FIELDS: [(usize, &str); 6] = [
    (0, "operation"),
    (1, "element type"),
    (2, "reduce operation"),
    (3, "root"),
    (4, "count"),
    (5, "counts array"),
];

const MAX_LISTED: usize = 16;

/// Decide from the gathered table (`size` records of [`RECORD_LEN`]) whether the call goes ahead.
///
/// Every rank evaluates this on the same table, so every rank reaches the same verdict. A rank whose own
/// arguments failed returns its own error before calling this.
///
/// # Errors
/// [`Error::PeerInvalid`] when a rank rejected its own arguments; [`Error::Mismatch`] naming the first
/// field the ranks disagree on, with the values of rank 0 and of every rank that differs from it.
pub fn verdict(op: &'static str, table: &[i64]) -> Result<()> {
    let rows: Vec<&[i64]> = table.chunks_exact(RECORD_LEN).collect();
    let bad: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r[6] != 0)
        .map(|(i, _)| i)
        .collect();
    if !bad.is_empty() {
        return Err(Error::PeerInvalid { op, ranks: bad });
    }
    for (field, name) in FIELDS {
        let first = rows[0][field];
        if rows.iter().all(|r| r[field] == first) {
            continue;
        }
        let show = |v: i64| -> String {
            match field {
                0 => name_of_code(v),
                1 if v < 0 => "none".into(),
                1 => type_name_of_code(v),
                2 => ReduceOp::from_code(v).map_or_else(|| "none".into(), |o| o.name().into()),
                3 | 4 if v < 0 => "none".into(),
                5 => format!("fingerprint {:016x}", v as u64),
                _ => v.to_string(),
            }
        };
        let values = rows
            .iter()
            .enumerate()
            .filter(|(i, r)| *i == 0 || r[field] != first)
            .take(MAX_LISTED)
            .map(|(i, r)| (i, show(r[field])))
            .collect();
        return Err(Error::Mismatch {
            op,
            field: name,
            values,
        });
    }
    Ok(())
}

/// Decide from the gathered send/receive counts of an all-to-all (`size` rows of `2 x size`) whether
/// every pair of ranks agrees.
///
/// # Errors
/// [`Error::Mismatch`] naming the first pair `(i, j)` where rank `i` sends a different count to `j` than
/// `j` expects from `i`.
pub fn pair_verdict(op: &'static str, table: &[i64], size: usize) -> Result<()> {
    let row = |i: usize| &table[i * 2 * size..(i + 1) * 2 * size];
    for i in 0..size {
        for j in 0..size {
            let sends = row(i)[j];
            let expects = row(j)[size + i];
            if sends != expects {
                return Err(Error::Mismatch {
                    op,
                    field: "send/receive counts",
                    values: vec![
                        (i, format!("sends {sends} to rank {j}")),
                        (j, format!("expects {expects} from rank {i}")),
                    ],
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(records: &[[i64; RECORD_LEN]]) -> Vec<i64> {
        records.iter().flatten().copied().collect()
    }

    #[test]
    fn env_values() {
        assert_eq!(parse_env(Some("1")), Some(true));
        assert_eq!(parse_env(Some(" ON ")), Some(true));
        assert_eq!(parse_env(Some("0")), Some(false));
        assert_eq!(parse_env(Some("off")), Some(false));
        assert_eq!(parse_env(Some("maybe")), None);
        assert_eq!(parse_env(None), None);
    }

    #[test]
    fn agreeing_ranks_pass() {
        let c = Call::new(OpKind::AllReduce)
            .element::<f64>()
            .reduce(ReduceOp::Sum)
            .count(4);
        assert!(verdict(
            "all_reduce",
            &table(&[c.record(true), c.record(true), c.record(true)])
        )
        .is_ok());
    }

    #[test]
    fn count_mismatch_names_ranks_and_values() {
        let a = Call::new(OpKind::AllReduce)
            .element::<f64>()
            .reduce(ReduceOp::Sum)
            .count(4);
        let b = Call::new(OpKind::AllReduce)
            .element::<f64>()
            .reduce(ReduceOp::Sum)
            .count(5);
        let e = verdict(
            "all_reduce",
            &table(&[a.record(true), b.record(true), a.record(true)]),
        )
        .unwrap_err();
        assert_eq!(
            e,
            Error::Mismatch {
                op: "all_reduce",
                field: "count",
                values: vec![(0, "4".into()), (1, "5".into())]
            }
        );
    }

    #[test]
    fn operation_element_op_and_root_mismatches() {
        let base = Call::new(OpKind::AllReduce)
            .element::<f64>()
            .reduce(ReduceOp::Sum)
            .count(4);
        let other_op = Call::new(OpKind::Broadcast)
            .element::<f64>()
            .root(0)
            .count(4);
        let e = verdict(
            "all_reduce",
            &table(&[base.record(true), other_op.record(true)]),
        )
        .unwrap_err();
        assert!(
            matches!(&e, Error::Mismatch { field: "operation", values, .. }
            if values == &vec![(0, "all_reduce".to_string()), (1, "broadcast".to_string())])
        );

        let other_ty = Call::new(OpKind::AllReduce)
            .element::<f32>()
            .reduce(ReduceOp::Sum)
            .count(4);
        let e = verdict(
            "all_reduce",
            &table(&[base.record(true), other_ty.record(true)]),
        )
        .unwrap_err();
        assert!(
            matches!(&e, Error::Mismatch { field: "element type", values, .. } if values[1].1 == "f32")
        );

        let other_red = Call::new(OpKind::AllReduce)
            .element::<f64>()
            .reduce(ReduceOp::Max)
            .count(4);
        let e = verdict(
            "all_reduce",
            &table(&[base.record(true), other_red.record(true)]),
        )
        .unwrap_err();
        assert!(
            matches!(&e, Error::Mismatch { field: "reduce operation", values, .. } if values[1].1 == "max")
        );

        let r0 = Call::new(OpKind::Broadcast)
            .element::<u8>()
            .root(0)
            .count(1);
        let r1 = Call::new(OpKind::Broadcast)
            .element::<u8>()
            .root(1)
            .count(1);
        let e = verdict("broadcast", &table(&[r0.record(true), r1.record(true)])).unwrap_err();
        assert!(matches!(&e, Error::Mismatch { field: "root", .. }));
    }

    #[test]
    fn counts_arrays_compare_by_content() {
        let a = [1usize, 0, 3];
        let b = [1usize, 0, 3];
        let c = [1usize, 3, 0];
        let ca = Call::new(OpKind::AllGatherV).element::<i32>().counts(&a);
        let cb = Call::new(OpKind::AllGatherV).element::<i32>().counts(&b);
        let cc = Call::new(OpKind::AllGatherV).element::<i32>().counts(&c);
        assert!(verdict("all_gather_v", &table(&[ca.record(true), cb.record(true)])).is_ok());
        let e = verdict("all_gather_v", &table(&[ca.record(true), cc.record(true)])).unwrap_err();
        assert!(matches!(
            e,
            Error::Mismatch {
                field: "counts array",
                ..
            }
        ));
    }

    #[test]
    fn invalid_peers_are_named() {
        let c = Call::new(OpKind::AllReduce)
            .element::<f64>()
            .reduce(ReduceOp::Sum)
            .count(4);
        let e = verdict(
            "all_reduce",
            &table(&[c.record(true), c.record(false), c.record(false)]),
        )
        .unwrap_err();
        assert_eq!(
            e,
            Error::PeerInvalid {
                op: "all_reduce",
                ranks: vec![1, 2]
            }
        );
    }

    #[test]
    fn pairwise_all_to_all_counts() {
        // 2 ranks: rank 0 sends [1, 2], receives [1, 3]; rank 1 sends [3, 4], receives [2, 4].
        let ok = [1, 2, 1, 3, 3, 4, 2, 4];
        assert!(pair_verdict("all_to_all_v", &ok, 2).is_ok());
        // rank 1 expects 5 from rank 0, which sends 2.
        let bad = [1, 2, 1, 3, 3, 4, 5, 4];
        let e = pair_verdict("all_to_all_v", &bad, 2).unwrap_err();
        assert_eq!(
            e,
            Error::Mismatch {
                op: "all_to_all_v",
                field: "send/receive counts",
                values: vec![
                    (0, "sends 2 to rank 1".into()),
                    (1, "expects 5 from rank 0".into())
                ],
            }
        );
    }

    #[test]
    fn listing_is_capped() {
        let a = Call::new(OpKind::Broadcast)
            .element::<u8>()
            .root(0)
            .count(1);
        let b = Call::new(OpKind::Broadcast)
            .element::<u8>()
            .root(0)
            .count(2);
        let mut rows = vec![a.record(true)];
        rows.extend(std::iter::repeat(b.record(true)).take(40));
        match verdict("broadcast", &table(&rows)).unwrap_err() {
            Error::Mismatch { values, .. } => assert_eq!(values.len(), MAX_LISTED),
            other => panic!("{other:?}"),
        }
    }
}
