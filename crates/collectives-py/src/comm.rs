//! `collectives.Communicator`: the MPI host communicator on NumPy arrays, with every collective
//! and point-to-point operation, blocking and non-blocking.
//!
//! Each method holds its arrays' buffers (`HostBuf`), allocates the result array where none was
//! passed, checks that the buffers fit together, and calls the generic function of [`ops`] for
//! the element type found. The GIL stays held during a blocking call (releasing and taking it
//! back would cost more than a small collective; the communicator is not `Send`).

use std::time::Duration;

use collectives_core::{Communicator as _, MpiComm, ReduceOp};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::buffer::{empty, pair, HostBuf};
use crate::element::dispatch;
use crate::errors::{IntoPyResult, InvalidArgumentError};
use crate::ops::{self, nb};
use crate::request::{start, Request};

/// The reduce operations, also accepted as strings (`"sum"`, `"prod"`, `"min"`, `"max"`, `"avg"`).
#[pyclass(eq, eq_int, module = "collectives", name = "ReduceOp")]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PyReduceOp {
    /// Sum.
    #[pyo3(name = "SUM")]
    Sum,
    /// Product.
    #[pyo3(name = "PROD")]
    Prod,
    /// Minimum.
    #[pyo3(name = "MIN")]
    Min,
    /// Maximum.
    #[pyo3(name = "MAX")]
    Max,
    /// Arithmetic mean (the sum divided by the number of ranks; floating-point and complex only).
    #[pyo3(name = "AVG")]
    Avg,
}

impl From<PyReduceOp> for ReduceOp {
    fn from(op: PyReduceOp) -> ReduceOp {
        match op {
            PyReduceOp::Sum => ReduceOp::Sum,
            PyReduceOp::Prod => ReduceOp::Prod,
            PyReduceOp::Min => ReduceOp::Min,
            PyReduceOp::Max => ReduceOp::Max,
            PyReduceOp::Avg => ReduceOp::Avg,
        }
    }
}

/// `op=` as a `ReduceOp`, a string, or absent (sum). On the hot path: type checks only, no
/// Python exception made and no allocation for the usual spellings.
fn reduce_op(op: Option<&Bound<'_, PyAny>>) -> PyResult<ReduceOp> {
    let Some(op) = op else {
        return Ok(ReduceOp::Sum);
    };
    if let Ok(op) = op.cast::<PyReduceOp>() {
        return Ok((*op.borrow()).into());
    }
    if let Ok(s) = op.cast::<PyString>() {
        return match s.to_str()? {
            "sum" => Ok(ReduceOp::Sum),
            "prod" => Ok(ReduceOp::Prod),
            "min" => Ok(ReduceOp::Min),
            "max" => Ok(ReduceOp::Max),
            "avg" => Ok(ReduceOp::Avg),
            other => other
                .parse::<ReduceOp>()
                .map_err(|e| InvalidArgumentError::new_err(format!("op: {e}"))),
        };
    }
    Err(InvalidArgumentError::new_err(format!(
        "op: expected a collectives.ReduceOp or one of 'sum', 'prod', 'min', 'max', 'avg', got {}",
        op.repr()?
    )))
}

/// The array to receive into: the one passed, or a new one of `n` elements of `elem`.
fn out<'py>(
    py: Python<'py>,
    recv: Option<Bound<'py, PyAny>>,
    elem: crate::element::Elem,
    n: usize,
) -> PyResult<Bound<'py, PyAny>> {
    match recv {
        Some(r) => Ok(r),
        None => empty(py, elem, n),
    }
}

/// `checked=`, `timeout=` and `progress=` applied to a communicator.
pub fn configure(
    mut comm: MpiComm,
    checked: Option<bool>,
    timeout: Option<f64>,
    progress: Option<bool>,
) -> PyResult<MpiComm> {
    if let Some(on) = checked {
        comm = comm.with_checked(on);
    }
    if let Some(t) = timeout {
        if !t.is_finite() || t < 0.0 {
            return Err(InvalidArgumentError::new_err(format!(
                "timeout: expected seconds >= 0 (0: no deadline), got {t}"
            )));
        }
        comm = comm.with_timeout((t > 0.0).then(|| Duration::from_secs_f64(t)));
    }
    if let Some(on) = progress {
        comm = comm.with_progress(on).py()?;
    }
    Ok(comm)
}

/// The sum of a counts array (for the size of a result).
fn total(counts: &[usize]) -> usize {
    counts.iter().sum()
}

/// A communicator over MPI on host memory: NumPy arrays (or any C-contiguous buffer of a
/// supported dtype) in, results in NumPy arrays. Made by `collectives.world()` or
/// `collectives.from_mpi4py(comm)`; it owns a duplicate of the MPI communicator, freed when it is
/// garbage-collected (drop communicators in the same order on every rank: freeing is collective).
///
/// Collectives must be called by every rank in the same order. Methods with a receive buffer
/// take `recv=None` to allocate it and return the receive array (`None` on ranks where there is
/// none, such as non-roots of `gather`). The `i_*` forms return a `Request`.
#[pyclass(unsendable, module = "collectives")]
#[derive(Debug)]
pub struct Communicator {
    /// The core's communicator.
    pub inner: MpiComm,
}

#[pymethods]
impl Communicator {
    /// This rank's index, `0..size`.
    #[getter]
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    /// Number of ranks.
    #[getter]
    fn size(&self) -> usize {
        self.inner.size()
    }

    /// The backend's name (`"mpi"`).
    #[getter]
    fn backend(&self) -> &'static str {
        self.inner.backend().name()
    }

    /// Whether checked mode (cross-rank agreement before each collective) is on.
    #[getter]
    fn checked(&self) -> bool {
        self.inner.checked()
    }

    /// The deadline in seconds, or None.
    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.inner.timeout().map(|d| d.as_secs_f64())
    }

    /// False once an operation timed out: every later operation raises `UnusableError`.
    #[getter]
    fn usable(&self) -> bool {
        self.inner.is_usable()
    }

    fn __repr__(&self) -> String {
        format!(
            "<collectives.Communicator rank {} of {}, {}, checked={}, timeout={:?}>",
            self.inner.rank(),
            self.inner.size(),
            self.inner.backend().name(),
            self.inner.checked(),
            self.inner.timeout()
        )
    }

    /// A new communicator over the same ranks whose messages never mix with this one's, with
    /// this one's settings unless given. Collective.
    #[pyo3(signature = (*, checked=None, timeout=None, progress=None))]
    fn dup(
        &self,
        checked: Option<bool>,
        timeout: Option<f64>,
        progress: Option<bool>,
    ) -> PyResult<Communicator> {
        let inner = configure(self.inner.dup().py()?, checked, timeout, progress)?;
        Ok(Communicator { inner })
    }

    /// Split into sub-communicators: ranks passing the same `color` form one, ordered by `key`
    /// (then rank); `color=None` takes part but joins none and gets None. Collective.
    #[pyo3(signature = (color, key=0))]
    fn split(&self, color: Option<u32>, key: i32) -> PyResult<Option<Communicator>> {
        Ok(self
            .inner
            .split(color, key)
            .py()?
            .map(|inner| Communicator { inner }))
    }

    /// Block until every rank has entered the barrier.
    fn barrier(&self) -> PyResult<()> {
        self.inner.barrier().py()
    }

    /// Copy `buf` of rank `root` into `buf` of every rank; returns `buf`.
    #[pyo3(signature = (buf, root=0))]
    fn broadcast<'py>(&self, buf: Bound<'py, PyAny>, root: usize) -> PyResult<Bound<'py, PyAny>> {
        let mut b = HostBuf::acquire(&buf, "buf", true)?;
        dispatch!(b.elem, ops::broadcast, (&self.inner, &mut b, root)).py()?;
        Ok(buf)
    }

    /// Reduce `send` of every rank into `recv` on `root` (allocated there when None); returns
    /// `recv` on the root, None elsewhere.
    #[pyo3(signature = (send, recv=None, op=None, root=0))]
    fn reduce<'py>(
        &self,
        send: &Bound<'py, PyAny>,
        recv: Option<Bound<'py, PyAny>>,
        op: Option<&Bound<'py, PyAny>>,
        root: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let op = reduce_op(op)?;
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = if self.inner.rank() == root {
            Some(out(send.py(), recv, s.elem, s.len)?)
        } else {
            None
        };
        let mut r = recv
            .as_ref()
            .map(|r| HostBuf::acquire(r, "recv", true))
            .transpose()?;
        if let Some(r) = &r {
            pair(&s, r, "reduce")?;
        }
        dispatch!(s.elem, ops::reduce, (&self.inner, &s, r.as_mut(), op, root)).py()?;
        Ok(recv)
    }

    /// Reduce `send` of every rank into `recv` of every rank (allocated when None); returns `recv`.
    #[pyo3(signature = (send, recv=None, op=None))]
    fn all_reduce<'py>(
        &self,
        send: &Bound<'py, PyAny>,
        recv: Option<Bound<'py, PyAny>>,
        op: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = reduce_op(op)?;
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = out(send.py(), recv, s.elem, s.len)?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "all_reduce")?;
        dispatch!(s.elem, ops::all_reduce, (&self.inner, &s, &mut r, op)).py()?;
        Ok(recv)
    }

    /// `all_reduce` with `buf` as both input and output; returns `buf`.
    #[pyo3(signature = (buf, op=None))]
    fn all_reduce_in_place<'py>(
        &self,
        buf: Bound<'py, PyAny>,
        op: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = reduce_op(op)?;
        let mut b = HostBuf::acquire(&buf, "buf", true)?;
        dispatch!(b.elem, ops::all_reduce_in_place, (&self.inner, &mut b, op)).py()?;
        Ok(buf)
    }

    /// Concatenate `send` of every rank, in rank order, into `recv` (`size * len(send)`
    /// elements, allocated when None); returns `recv`.
    #[pyo3(signature = (send, recv=None))]
    fn all_gather<'py>(
        &self,
        send: &Bound<'py, PyAny>,
        recv: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = out(send.py(), recv, s.elem, s.len * self.inner.size())?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "all_gather")?;
        dispatch!(s.elem, ops::all_gather, (&self.inner, &s, &mut r)).py()?;
        Ok(recv)
    }

    /// Uneven `all_gather`: rank `i` contributes `counts[i]` elements, gathered back to back
    /// without padding into `recv` (`sum(counts)` elements, allocated when None). With
    /// `counts=None` the ranks first all-gather their lengths (one more collective); returns
    /// `recv`.
    #[pyo3(signature = (send, counts=None, recv=None))]
    fn all_gather_v<'py>(
        &self,
        send: &Bound<'py, PyAny>,
        counts: Option<Vec<usize>>,
        recv: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = HostBuf::acquire(send, "send", false)?;
        let counts = match counts {
            Some(c) => c,
            None => self.lengths(s.len)?,
        };
        let recv = out(send.py(), recv, s.elem, total(&counts))?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "all_gather_v")?;
        dispatch!(
            s.elem,
            ops::all_gather_v,
            (&self.inner, &s, &mut r, &counts)
        )
        .py()?;
        Ok(recv)
    }

    /// Concatenate `send` of every rank into `recv` on `root` (allocated there when None);
    /// returns `recv` on the root, None elsewhere.
    #[pyo3(signature = (send, recv=None, root=0))]
    fn gather<'py>(
        &self,
        send: &Bound<'py, PyAny>,
        recv: Option<Bound<'py, PyAny>>,
        root: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = if self.inner.rank() == root {
            Some(out(send.py(), recv, s.elem, s.len * self.inner.size())?)
        } else {
            None
        };
        let mut r = recv
            .as_ref()
            .map(|r| HostBuf::acquire(r, "recv", true))
            .transpose()?;
        if let Some(r) = &r {
            pair(&s, r, "gather")?;
        }
        dispatch!(s.elem, ops::gather, (&self.inner, &s, r.as_mut(), root)).py()?;
        Ok(recv)
    }

    /// Uneven `gather`: `counts` (every rank passes it) as in `all_gather_v`.
    #[pyo3(signature = (send, counts, recv=None, root=0))]
    fn gather_v<'py>(
        &self,
        send: &Bound<'py, PyAny>,
        counts: Vec<usize>,
        recv: Option<Bound<'py, PyAny>>,
        root: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = if self.inner.rank() == root {
            Some(out(send.py(), recv, s.elem, total(&counts))?)
        } else {
            None
        };
        let mut r = recv
            .as_ref()
            .map(|r| HostBuf::acquire(r, "recv", true))
            .transpose()?;
        if let Some(r) = &r {
            pair(&s, r, "gather_v")?;
        }
        dispatch!(
            s.elem,
            ops::gather_v,
            (&self.inner, &s, r.as_mut(), &counts, root)
        )
        .py()?;
        Ok(recv)
    }

    /// Split `send` on `root` (`size * len(recv)` elements; ignored elsewhere) into equal
    /// blocks, block `i` into `recv` of rank `i`; returns `recv`.
    #[pyo3(signature = (send, recv, root=0))]
    fn scatter<'py>(
        &self,
        send: Option<Bound<'py, PyAny>>,
        recv: Bound<'py, PyAny>,
        root: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        let s = self.root_send(send, root, &r, "scatter")?;
        dispatch!(
            r.elem,
            ops::scatter,
            (&self.inner, s.as_ref(), &mut r, root)
        )
        .py()?;
        Ok(recv)
    }

    /// Uneven `scatter`: rank `i` receives `counts[i]` elements (every rank passes `counts`).
    #[pyo3(signature = (send, counts, recv, root=0))]
    fn scatter_v<'py>(
        &self,
        send: Option<Bound<'py, PyAny>>,
        counts: Vec<usize>,
        recv: Bound<'py, PyAny>,
        root: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        let s = self.root_send(send, root, &r, "scatter_v")?;
        dispatch!(
            r.elem,
            ops::scatter_v,
            (&self.inner, s.as_ref(), &mut r, &counts, root)
        )
        .py()?;
        Ok(recv)
    }

    /// Reduce `send` (`size * len(recv)` elements) across ranks and give block `rank` of the
    /// result to each rank (`recv` allocated when None); returns `recv`.
    #[pyo3(signature = (send, recv=None, op=None))]
    fn reduce_scatter<'py>(
        &self,
        send: &Bound<'py, PyAny>,
        recv: Option<Bound<'py, PyAny>>,
        op: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = reduce_op(op)?;
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = out(send.py(), recv, s.elem, s.len / self.inner.size())?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "reduce_scatter")?;
        dispatch!(s.elem, ops::reduce_scatter, (&self.inner, &s, &mut r, op)).py()?;
        Ok(recv)
    }

    /// Block `j` of `send` goes to rank `j`, arriving as block `rank` of its `recv` (same
    /// length, allocated when None); returns `recv`.
    #[pyo3(signature = (send, recv=None))]
    fn all_to_all<'py>(
        &self,
        send: &Bound<'py, PyAny>,
        recv: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = out(send.py(), recv, s.elem, s.len)?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "all_to_all")?;
        dispatch!(s.elem, ops::all_to_all, (&self.inner, &s, &mut r)).py()?;
        Ok(recv)
    }

    /// Uneven `all_to_all`: `send_counts[j]` elements to rank `j`, `recv_counts[i]` from rank
    /// `i`, back to back (`recv` of `sum(recv_counts)` allocated when None); returns `recv`.
    #[pyo3(signature = (send, send_counts, recv_counts, recv=None))]
    fn all_to_all_v<'py>(
        &self,
        send: &Bound<'py, PyAny>,
        send_counts: Vec<usize>,
        recv_counts: Vec<usize>,
        recv: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = out(send.py(), recv, s.elem, total(&recv_counts))?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "all_to_all_v")?;
        dispatch!(
            s.elem,
            ops::all_to_all_v,
            (&self.inner, &s, &send_counts, &mut r, &recv_counts)
        )
        .py()?;
        Ok(recv)
    }

    /// Send `buf` to rank `dest`.
    #[pyo3(signature = (buf, dest, tag=0))]
    fn send(&self, buf: &Bound<'_, PyAny>, dest: usize, tag: i32) -> PyResult<()> {
        let b = HostBuf::acquire(buf, "buf", false)?;
        dispatch!(b.elem, ops::send, (&self.inner, &b, dest, tag)).py()
    }

    /// Receive exactly `len(buf)` elements from rank `source` into `buf`; returns `buf`.
    #[pyo3(signature = (buf, source, tag=0))]
    fn recv<'py>(
        &self,
        buf: Bound<'py, PyAny>,
        source: usize,
        tag: i32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut b = HostBuf::acquire(&buf, "buf", true)?;
        dispatch!(b.elem, ops::recv, (&self.inner, &mut b, source, tag)).py()?;
        Ok(buf)
    }

    /// Send `send` to `dest` and receive exactly `len(recv)` elements from `source`, without
    /// deadlock; returns `recv`.
    #[pyo3(signature = (send, dest, recv, source, tag=0))]
    fn send_recv<'py>(
        &self,
        send: &Bound<'py, PyAny>,
        dest: usize,
        recv: Bound<'py, PyAny>,
        source: usize,
        tag: i32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = HostBuf::acquire(send, "send", false)?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "send_recv")?;
        dispatch!(
            s.elem,
            ops::send_recv,
            (&self.inner, &s, dest, &mut r, source, tag)
        )
        .py()?;
        Ok(recv)
    }

    // ---- non-blocking forms: the same arguments, a Request back ----

    /// Start a `barrier`.
    fn i_barrier(slf: &Bound<'_, Self>) -> PyResult<Request> {
        let this = slf.borrow();
        let c = &this.inner;
        // SAFETY: the operation borrows only the communicator, which the Request keeps alive.
        let p = unsafe { start(|sc| c.i_barrier(sc)) }.py()?;
        Ok(Request::new(p, Vec::new(), None, slf.clone().unbind()))
    }

    /// Start a `broadcast`.
    #[pyo3(signature = (buf, root=0))]
    fn i_broadcast(slf: &Bound<'_, Self>, buf: Bound<'_, PyAny>, root: usize) -> PyResult<Request> {
        let mut b = HostBuf::acquire(&buf, "buf", true)?;
        let this = slf.borrow();
        let c = &this.inner;
        // SAFETY: the Request below owns `b` and the communicator and completes the operation
        // before releasing them.
        let p =
            unsafe { start(|sc| dispatch!(b.elem, nb::broadcast, (c, sc, &mut b, root))) }.py()?;
        Ok(Request::new(
            p,
            vec![b],
            Some(buf.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start a `reduce`.
    #[pyo3(signature = (send, recv=None, op=None, root=0))]
    fn i_reduce(
        slf: &Bound<'_, Self>,
        send: &Bound<'_, PyAny>,
        recv: Option<Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
        root: usize,
    ) -> PyResult<Request> {
        let op = reduce_op(op)?;
        let this = slf.borrow();
        let c = &this.inner;
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = if c.rank() == root {
            Some(out(send.py(), recv, s.elem, s.len)?)
        } else {
            None
        };
        let mut r = recv
            .as_ref()
            .map(|r| HostBuf::acquire(r, "recv", true))
            .transpose()?;
        if let Some(r) = &r {
            pair(&s, r, "reduce")?;
        }
        // SAFETY: as in `i_broadcast`.
        let p =
            unsafe { start(|sc| dispatch!(s.elem, nb::reduce, (c, sc, &s, r.as_mut(), op, root))) }
                .py()?;
        let bufs = [Some(s), r].into_iter().flatten().collect();
        Ok(Request::new(
            p,
            bufs,
            recv.map(Bound::unbind),
            slf.clone().unbind(),
        ))
    }

    /// Start an `all_reduce`; `Avg` is finished when the request completes.
    #[pyo3(signature = (send, recv=None, op=None))]
    fn i_all_reduce(
        slf: &Bound<'_, Self>,
        send: &Bound<'_, PyAny>,
        recv: Option<Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Request> {
        let op = reduce_op(op)?;
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = out(send.py(), recv, s.elem, s.len)?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "all_reduce")?;
        let this = slf.borrow();
        let c = &this.inner;
        // SAFETY: as in `i_broadcast`.
        let p = unsafe { start(|sc| dispatch!(s.elem, nb::all_reduce, (c, sc, &s, &mut r, op))) }
            .py()?;
        Ok(Request::new(
            p,
            vec![s, r],
            Some(recv.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start an `all_reduce_in_place`.
    #[pyo3(signature = (buf, op=None))]
    fn i_all_reduce_in_place(
        slf: &Bound<'_, Self>,
        buf: Bound<'_, PyAny>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Request> {
        let op = reduce_op(op)?;
        let mut b = HostBuf::acquire(&buf, "buf", true)?;
        let this = slf.borrow();
        let c = &this.inner;
        // SAFETY: as in `i_broadcast`.
        let p =
            unsafe { start(|sc| dispatch!(b.elem, nb::all_reduce_in_place, (c, sc, &mut b, op))) }
                .py()?;
        Ok(Request::new(
            p,
            vec![b],
            Some(buf.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start an `all_gather`.
    #[pyo3(signature = (send, recv=None))]
    fn i_all_gather(
        slf: &Bound<'_, Self>,
        send: &Bound<'_, PyAny>,
        recv: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Request> {
        let this = slf.borrow();
        let c = &this.inner;
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = out(send.py(), recv, s.elem, s.len * c.size())?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "all_gather")?;
        // SAFETY: as in `i_broadcast`.
        let p =
            unsafe { start(|sc| dispatch!(s.elem, nb::all_gather, (c, sc, &s, &mut r))) }.py()?;
        Ok(Request::new(
            p,
            vec![s, r],
            Some(recv.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start an `all_gather_v` (with `counts=None`, the lengths are all-gathered first, blocking).
    #[pyo3(signature = (send, counts=None, recv=None))]
    fn i_all_gather_v(
        slf: &Bound<'_, Self>,
        send: &Bound<'_, PyAny>,
        counts: Option<Vec<usize>>,
        recv: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Request> {
        let this = slf.borrow();
        let c = &this.inner;
        let s = HostBuf::acquire(send, "send", false)?;
        let counts = match counts {
            Some(k) => k,
            None => this.lengths(s.len)?,
        };
        let recv = out(send.py(), recv, s.elem, total(&counts))?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "all_gather_v")?;
        // SAFETY: as in `i_broadcast`.
        let p = unsafe {
            start(|sc| dispatch!(s.elem, nb::all_gather_v, (c, sc, &s, &mut r, &counts)))
        }
        .py()?;
        Ok(Request::new(
            p,
            vec![s, r],
            Some(recv.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start a `gather`.
    #[pyo3(signature = (send, recv=None, root=0))]
    fn i_gather(
        slf: &Bound<'_, Self>,
        send: &Bound<'_, PyAny>,
        recv: Option<Bound<'_, PyAny>>,
        root: usize,
    ) -> PyResult<Request> {
        let this = slf.borrow();
        let c = &this.inner;
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = if c.rank() == root {
            Some(out(send.py(), recv, s.elem, s.len * c.size())?)
        } else {
            None
        };
        let mut r = recv
            .as_ref()
            .map(|r| HostBuf::acquire(r, "recv", true))
            .transpose()?;
        if let Some(r) = &r {
            pair(&s, r, "gather")?;
        }
        // SAFETY: as in `i_broadcast`.
        let p = unsafe { start(|sc| dispatch!(s.elem, nb::gather, (c, sc, &s, r.as_mut(), root))) }
            .py()?;
        let bufs = [Some(s), r].into_iter().flatten().collect();
        Ok(Request::new(
            p,
            bufs,
            recv.map(Bound::unbind),
            slf.clone().unbind(),
        ))
    }

    /// Start a `gather_v`.
    #[pyo3(signature = (send, counts, recv=None, root=0))]
    fn i_gather_v(
        slf: &Bound<'_, Self>,
        send: &Bound<'_, PyAny>,
        counts: Vec<usize>,
        recv: Option<Bound<'_, PyAny>>,
        root: usize,
    ) -> PyResult<Request> {
        let this = slf.borrow();
        let c = &this.inner;
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = if c.rank() == root {
            Some(out(send.py(), recv, s.elem, total(&counts))?)
        } else {
            None
        };
        let mut r = recv
            .as_ref()
            .map(|r| HostBuf::acquire(r, "recv", true))
            .transpose()?;
        if let Some(r) = &r {
            pair(&s, r, "gather_v")?;
        }
        // SAFETY: as in `i_broadcast`.
        let p = unsafe {
            start(|sc| dispatch!(s.elem, nb::gather_v, (c, sc, &s, r.as_mut(), &counts, root)))
        }
        .py()?;
        let bufs = [Some(s), r].into_iter().flatten().collect();
        Ok(Request::new(
            p,
            bufs,
            recv.map(Bound::unbind),
            slf.clone().unbind(),
        ))
    }

    /// Start a `scatter`.
    #[pyo3(signature = (send, recv, root=0))]
    fn i_scatter(
        slf: &Bound<'_, Self>,
        send: Option<Bound<'_, PyAny>>,
        recv: Bound<'_, PyAny>,
        root: usize,
    ) -> PyResult<Request> {
        let this = slf.borrow();
        let c = &this.inner;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        let s = this.root_send(send, root, &r, "scatter")?;
        // SAFETY: as in `i_broadcast`.
        let p = unsafe {
            start(|sc| dispatch!(r.elem, nb::scatter, (c, sc, s.as_ref(), &mut r, root)))
        }
        .py()?;
        let bufs = [s, Some(r)].into_iter().flatten().collect();
        Ok(Request::new(
            p,
            bufs,
            Some(recv.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start a `scatter_v`.
    #[pyo3(signature = (send, counts, recv, root=0))]
    fn i_scatter_v(
        slf: &Bound<'_, Self>,
        send: Option<Bound<'_, PyAny>>,
        counts: Vec<usize>,
        recv: Bound<'_, PyAny>,
        root: usize,
    ) -> PyResult<Request> {
        let this = slf.borrow();
        let c = &this.inner;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        let s = this.root_send(send, root, &r, "scatter_v")?;
        // SAFETY: as in `i_broadcast`.
        let p = unsafe {
            start(|sc| {
                dispatch!(
                    r.elem,
                    nb::scatter_v,
                    (c, sc, s.as_ref(), &mut r, &counts, root)
                )
            })
        }
        .py()?;
        let bufs = [s, Some(r)].into_iter().flatten().collect();
        Ok(Request::new(
            p,
            bufs,
            Some(recv.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start a `reduce_scatter`.
    #[pyo3(signature = (send, recv=None, op=None))]
    fn i_reduce_scatter(
        slf: &Bound<'_, Self>,
        send: &Bound<'_, PyAny>,
        recv: Option<Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Request> {
        let op = reduce_op(op)?;
        let this = slf.borrow();
        let c = &this.inner;
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = out(send.py(), recv, s.elem, s.len / c.size())?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "reduce_scatter")?;
        // SAFETY: as in `i_broadcast`.
        let p =
            unsafe { start(|sc| dispatch!(s.elem, nb::reduce_scatter, (c, sc, &s, &mut r, op))) }
                .py()?;
        Ok(Request::new(
            p,
            vec![s, r],
            Some(recv.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start an `all_to_all`.
    #[pyo3(signature = (send, recv=None))]
    fn i_all_to_all(
        slf: &Bound<'_, Self>,
        send: &Bound<'_, PyAny>,
        recv: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Request> {
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = out(send.py(), recv, s.elem, s.len)?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "all_to_all")?;
        let this = slf.borrow();
        let c = &this.inner;
        // SAFETY: as in `i_broadcast`.
        let p =
            unsafe { start(|sc| dispatch!(s.elem, nb::all_to_all, (c, sc, &s, &mut r))) }.py()?;
        Ok(Request::new(
            p,
            vec![s, r],
            Some(recv.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start an `all_to_all_v`.
    #[pyo3(signature = (send, send_counts, recv_counts, recv=None))]
    fn i_all_to_all_v(
        slf: &Bound<'_, Self>,
        send: &Bound<'_, PyAny>,
        send_counts: Vec<usize>,
        recv_counts: Vec<usize>,
        recv: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Request> {
        let s = HostBuf::acquire(send, "send", false)?;
        let recv = out(send.py(), recv, s.elem, total(&recv_counts))?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "all_to_all_v")?;
        let this = slf.borrow();
        let c = &this.inner;
        // SAFETY: as in `i_broadcast`.
        let p = unsafe {
            start(|sc| {
                dispatch!(
                    s.elem,
                    nb::all_to_all_v,
                    (c, sc, &s, &send_counts, &mut r, &recv_counts)
                )
            })
        }
        .py()?;
        Ok(Request::new(
            p,
            vec![s, r],
            Some(recv.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start a `send`.
    #[pyo3(signature = (buf, dest, tag=0))]
    fn i_send(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        dest: usize,
        tag: i32,
    ) -> PyResult<Request> {
        let b = HostBuf::acquire(buf, "buf", false)?;
        let this = slf.borrow();
        let c = &this.inner;
        // SAFETY: as in `i_broadcast`.
        let p = unsafe { start(|sc| dispatch!(b.elem, nb::send, (c, sc, &b, dest, tag))) }.py()?;
        Ok(Request::new(p, vec![b], None, slf.clone().unbind()))
    }

    /// Start a `recv`; a message of another length is an error at completion.
    #[pyo3(signature = (buf, source, tag=0))]
    fn i_recv(
        slf: &Bound<'_, Self>,
        buf: Bound<'_, PyAny>,
        source: usize,
        tag: i32,
    ) -> PyResult<Request> {
        let mut b = HostBuf::acquire(&buf, "buf", true)?;
        let this = slf.borrow();
        let c = &this.inner;
        // SAFETY: as in `i_broadcast`.
        let p = unsafe { start(|sc| dispatch!(b.elem, nb::recv, (c, sc, &mut b, source, tag))) }
            .py()?;
        Ok(Request::new(
            p,
            vec![b],
            Some(buf.unbind()),
            slf.clone().unbind(),
        ))
    }

    /// Start a `send_recv`.
    #[pyo3(signature = (send, dest, recv, source, tag=0))]
    fn i_send_recv(
        slf: &Bound<'_, Self>,
        send: &Bound<'_, PyAny>,
        dest: usize,
        recv: Bound<'_, PyAny>,
        source: usize,
        tag: i32,
    ) -> PyResult<Request> {
        let s = HostBuf::acquire(send, "send", false)?;
        let mut r = HostBuf::acquire(&recv, "recv", true)?;
        pair(&s, &r, "send_recv")?;
        let this = slf.borrow();
        let c = &this.inner;
        // SAFETY: as in `i_broadcast`.
        let p = unsafe {
            start(|sc| {
                dispatch!(
                    s.elem,
                    nb::send_recv,
                    (c, sc, &s, dest, &mut r, source, tag)
                )
            })
        }
        .py()?;
        Ok(Request::new(
            p,
            vec![s, r],
            Some(recv.unbind()),
            slf.clone().unbind(),
        ))
    }
}

impl Communicator {
    /// Every rank's `len`, all-gathered (for `all_gather_v` without counts).
    fn lengths(&self, len: usize) -> PyResult<Vec<usize>> {
        let mut all = vec![0u64; self.inner.size()];
        self.inner.all_gather(&[len as u64], &mut all[..]).py()?;
        Ok(all.into_iter().map(|n| n as usize).collect())
    }

    /// The send buffer of a scatter on the root (required there), None elsewhere (ignored).
    fn root_send(
        &self,
        send: Option<Bound<'_, PyAny>>,
        root: usize,
        recv: &HostBuf,
        op: &str,
    ) -> PyResult<Option<HostBuf>> {
        if self.inner.rank() != root {
            return Ok(None);
        }
        let Some(send) = send else {
            // The core's own error for a missing root buffer.
            return Ok(None);
        };
        let s = HostBuf::acquire(&send, "send", false)?;
        pair(&s, recv, op)?;
        Ok(Some(s))
    }
}
