//! Operations in flight: an `MPI_Request` plus what to do when it completes, and the one place where
//! every MPI backend waits for a request against a deadline.
//!
//! Under a deadline ([`MpiComm::with_timeout`](super::MpiComm::with_timeout)) an operation runs as
//! MPI's non-blocking twin, polled with `MPI_Test` by [`crate::deadline::poll`]. An operation that
//! times out is still in flight inside MPI, which keeps the addresses of its buffers and may read or
//! write them whenever it makes progress, until the process ends: the caller's buffers cannot be
//! handed to it, because the caller may free or reuse them after the error. So under a deadline MPI
//! works on copies that the operation owns ([`Staging`]): inputs are copied in before the call,
//! outputs copied out after it completes, and after a timeout the copies are leaked, never freed. The
//! communicator is then refused ([`Health`], [`Error::Unusable`]).

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::Duration;

use mpi::ffi;

use super::progress::InFlight;
use super::raw;
use crate::deadline::{self, Polled};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::ReduceOp;
use crate::request::{Member, Pending, SetMember};

/// One buffer of an MPI call, as bytes, with the direction MPI moves data through it.
#[derive(Debug)]
pub(crate) enum Region<'a> {
    /// Read by MPI (send buffers, counts and displacement arrays).
    In(&'a [u8]),
    /// Written by MPI (receive buffers).
    Out(&'a mut [u8]),
    /// Read and written (in-place operations).
    InOut(&'a mut [u8]),
    /// No buffer on this rank (a root-only argument elsewhere): MPI gets a null pointer.
    Absent,
    /// Device memory, by address: MPI works on it directly (CUDA-aware MPI). Never under a
    /// deadline (the device backends stage through host memory there), so never copied.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // used by the device backends
    Device(*mut c_void),
}

impl<'a> Region<'a> {
    /// A buffer MPI reads.
    pub(crate) fn send<T: bytemuck::Pod>(buf: &'a [T]) -> Self {
        Region::In(bytemuck::cast_slice(buf))
    }

    /// A buffer MPI writes.
    pub(crate) fn recv<T: bytemuck::Pod>(buf: &'a mut [T]) -> Self {
        Region::Out(bytemuck::cast_slice_mut(buf))
    }

    /// A buffer MPI reads and writes.
    pub(crate) fn in_out<T: bytemuck::Pod>(buf: &'a mut [T]) -> Self {
        Region::InOut(bytemuck::cast_slice_mut(buf))
    }

    /// The buffer an operation writes: read too where `in_out` (a broadcast, an in-place
    /// all-reduce), so that a copy made under a deadline carries its contents in.
    pub(crate) fn written<T: bytemuck::Pod>(in_out: bool, buf: &'a mut [T]) -> Self {
        if in_out {
            Region::in_out(buf)
        } else {
            Region::recv(buf)
        }
    }

    /// The address MPI gets when it works on the buffer itself ([`raw::ptr`]'s rules for empty ones).
    pub(crate) fn direct(self) -> *mut c_void {
        match self {
            Region::In(b) => raw::ptr(b).cast_mut(),
            Region::Out(b) | Region::InOut(b) => raw::ptr_mut(b),
            Region::Absent => std::ptr::null_mut(),
            Region::Device(p) => p,
        }
    }
}

impl Default for Region<'_> {
    /// No buffer: what a root-only argument is off the root.
    fn default() -> Self {
        Region::Absent
    }
}

/// A copy of one region, owned by the operation; 8-byte words so any element type is aligned.
#[derive(Debug)]
struct Copy {
    words: Vec<u64>,
    bytes: usize,
    /// Where the result goes once the operation completes (outputs only).
    back: Option<*mut u8>,
}

/// Copies of an operation's regions that MPI works on instead of the caller's buffers; see the
/// [module documentation](self).
#[derive(Debug, Default)]
pub(crate) struct Staging {
    copies: Vec<Copy>,
}

impl Staging {
    /// Copy the inputs of `regions` and give MPI the addresses of the copies (the same rules as
    /// [`Region::direct`] for empty and absent regions).
    ///
    /// The caller's output buffers must stay valid, and untouched by anything else, until
    /// [`finish`](Self::finish) or [`abandon`](Self::abandon).
    pub(crate) fn new<const N: usize>(regions: [Region<'_>; N]) -> (Self, [*mut c_void; N]) {
        let mut staging = Staging::default();
        let pointers = regions.map(|region| {
            let (data, back): (&[u8], Option<*mut u8>) = match region {
                Region::Absent => return std::ptr::null_mut(),
                Region::Device(p) => return p,
                Region::In(b) if b.is_empty() => return Region::In(b).direct(),
                Region::Out(b) | Region::InOut(b) if b.is_empty() => return raw::ptr_mut(b),
                Region::In(b) => (b, None),
                Region::Out(b) => {
                    let back = Some(b.as_mut_ptr());
                    let bytes = b.len();
                    staging.copies.push(Copy {
                        words: vec![0; bytes.div_ceil(8)],
                        bytes,
                        back,
                    });
                    return staging.last();
                }
                Region::InOut(b) => {
                    let back = Some(b.as_mut_ptr());
                    (&*b, back)
                }
            };
            let mut words = vec![0u64; data.len().div_ceil(8)];
            bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..data.len()].copy_from_slice(data);
            staging.copies.push(Copy {
                words,
                bytes: data.len(),
                back,
            });
            staging.last()
        });
        (staging, pointers)
    }

    fn last(&mut self) -> *mut c_void {
        let copy = self.copies.last_mut().expect("a copy was just pushed");
        copy.words.as_mut_ptr().cast()
    }

    /// The operation completed: copy the outputs back to the caller's buffers and free the copies.
    pub(crate) fn finish(self) {
        for copy in &self.copies {
            if let Some(back) = copy.back {
                let bytes = &bytemuck::cast_slice::<u64, u8>(&copy.words)[..copy.bytes];
                // SAFETY: `back` addresses the caller's output buffer of `copy.bytes` bytes, valid and
                // untouched by others until now (`new`'s contract); the copy is a separate allocation.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), back, copy.bytes) };
            }
        }
    }

    /// The operation is still in flight inside MPI and will never be waited for: keep the copies
    /// alive for the rest of the process, since MPI may still read or write them.
    pub(crate) fn abandon(self) {
        std::mem::forget(self.copies);
    }
}

/// How an MPI operation is made: its blocking call (with a status for receives), or its non-blocking
/// twin, started into a request.
#[derive(Debug)]
pub(crate) enum Form<'a> {
    /// The blocking call.
    Blocking(&'a mut ffi::MPI_Status),
    /// The non-blocking twin.
    Start(&'a mut ffi::MPI_Request),
}

/// A null-initialized request handle for an `MPI_I*` call to fill.
pub(crate) fn new_request() -> ffi::MPI_Request {
    // SAFETY: an MPI_Request handle may start as any value; the MPI_I* call overwrites it.
    unsafe { std::mem::zeroed() }
}

/// Complete `requests`: `MPI_Wait`/`MPI_Waitall` without a deadline, else `MPI_Test`/`MPI_Testall`
/// polled until `timeout` passes. `Ok(true)` when they completed (`statuses` filled, one per
/// request), `Ok(false)` when some are still in flight after the deadline. This is the one waiting
/// loop of the MPI backends.
///
/// # Errors
/// [`Error::Mpi`] from the wait or test, with the failing request's own code where MPI reports it
/// in a status (`MPI_ERR_IN_STATUS`).
pub(crate) fn wait_requests(
    op: &'static str,
    requests: &mut [ffi::MPI_Request],
    statuses: &mut [ffi::MPI_Status],
    timeout: Option<Duration>,
) -> Result<bool> {
    assert_eq!(requests.len(), statuses.len(), "one status per request");
    let n = c_int::try_from(requests.len()).expect("a handful of requests");
    let (reqs, stats) = (requests.as_mut_ptr(), statuses.as_mut_ptr());
    let code = |rc: c_int, statuses: &[ffi::MPI_Status]| {
        if rc == 0 || n == 1 {
            return rc;
        }
        statuses
            .iter()
            .map(|s| s.MPI_ERROR)
            .find(|&e| e != 0)
            .unwrap_or(rc)
    };
    let Some(timeout) = timeout else {
        // SAFETY: `requests` came from successful MPI_I* calls (or are MPI_REQUEST_NULL once complete);
        // `statuses` has room for one status per request.
        let rc = unsafe {
            if n == 1 {
                ffi::MPI_Wait(reqs, stats)
            } else {
                ffi::MPI_Waitall(n, reqs, stats)
            }
        };
        raw::check(op, code(rc, statuses))?;
        return Ok(true);
    };
    let polled = deadline::poll(timeout, || {
        let mut flag: c_int = 0;
        // SAFETY: as for the wait; `flag` is a valid out-pointer. MPI sets the requests to
        // MPI_REQUEST_NULL once complete, and the loop stops then.
        let rc = unsafe {
            if n == 1 {
                ffi::MPI_Test(reqs, &mut flag, stats)
            } else {
                ffi::MPI_Testall(n, reqs, &mut flag, stats)
            }
        };
        // SAFETY: `stats` points at `statuses`, which MPI has finished writing.
        let statuses = unsafe { std::slice::from_raw_parts(stats, requests.len()) };
        raw::check(op, code(rc, statuses))?;
        Ok::<bool, Error>(flag != 0)
    })?;
    Ok(polled == Polled::Done)
}

/// The operation name of the errors of [`wait_set`] itself.
const WAIT_ALL: &str = "wait_all";

/// Complete `members` together: the requests of members with the same deadline in one
/// [`wait_requests`] (one `MPI_Waitall`, or `MPI_Testall` polled against the deadline), then
/// each member's finishing step. The first error wins; every member is still completed or
/// given up.
///
/// # Errors
/// As [`wait_requests`] (every member of that deadline given up), else the first member's error
/// (its finishing step's, or its [`Error::Timeout`] after the deadline).
fn wait_set(members: &mut [SetMember<'_>]) -> Result<()> {
    let mut deadlines: Vec<Option<Duration>> = Vec::new();
    for m in members.iter() {
        let t = m.member.timeout();
        if !deadlines.contains(&t) {
            deadlines.push(t);
        }
    }
    let mut first = Ok(());
    for timeout in deadlines {
        let r = wait_group(members, timeout);
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// [`wait_set`] for the members of `members` whose deadline is `timeout`.
fn wait_group(members: &mut [SetMember<'_>], timeout: Option<Duration>) -> Result<()> {
    let group = || members_with(timeout);
    let mut requests = Vec::new();
    let mut spans = Vec::with_capacity(members.len());
    for m in members.iter_mut().filter(group()) {
        let own = m.member.requests();
        spans.push(requests.len()..requests.len() + own.len());
        requests.extend_from_slice(own);
    }
    if requests.is_empty() {
        return Ok(());
    }
    let mut statuses = vec![raw::status(); requests.len()];
    let waited = wait_requests(WAIT_ALL, &mut requests, &mut statuses, timeout);
    // MPI wrote the handles of the requests it completed (MPI_REQUEST_NULL): each member keeps
    // its own up to date, for a later test or wait.
    for (m, span) in members.iter_mut().filter(group()).zip(&spans) {
        m.member.requests().copy_from_slice(&requests[span.clone()]);
    }
    let mut first = Ok(());
    let mut keep = |r: Result<()>| {
        if first.is_ok() {
            first = r;
        }
    };
    let group = members.iter_mut().filter(group());
    match waited {
        Ok(true) => {
            for (m, span) in group.zip(spans) {
                keep(m.member.finish_set(&statuses[span]));
            }
        }
        Ok(false) => {
            let after = timeout.expect("only a wait with a deadline times out");
            for m in group {
                keep(m.member.deadline_passed(after));
            }
        }
        Err(e) => {
            for m in group {
                m.member.abandon_set();
            }
            keep(Err(e));
        }
    }
    first
}

/// Whether a member's deadline is `timeout`.
fn members_with(timeout: Option<Duration>) -> impl Fn(&&mut SetMember<'_>) -> bool {
    move |m| m.member.timeout() == timeout
}

/// Whether a communicator may still be used. Shared by the MPI communicators that make up one
/// communicator of a device backend, so a timeout in any of them refuses all of them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Health(Rc<Cell<Option<(&'static str, Duration)>>>);

impl Health {
    /// [`Error::Unusable`] once an operation timed out.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        match self.0.get() {
            None => Ok(()),
            Some((timed_out, after)) => Err(Error::Unusable {
                op,
                timed_out,
                after,
            }),
        }
    }

    /// Whether no operation timed out.
    pub(crate) fn is_usable(&self) -> bool {
        self.0.get().is_none()
    }

    /// Record that `op` timed out after `after` (the first timeout is kept) and return its error.
    pub(crate) fn timed_out(&self, op: &'static str, after: Duration) -> Error {
        if self.0.get().is_none() {
            self.0.set(Some((op, after)));
        }
        Error::Timeout { op, after }
    }
}

/// One non-blocking MPI operation on buffers borrowed for `'s`: one request, or several completed
/// together (a send and a receive).
pub(crate) struct MpiPending<'s, T: Element> {
    /// The requests; a receive whose length is checked comes first.
    pub(crate) requests: Vec<ffi::MPI_Request>,
    /// Counts and displacements arrays MPI reads until completion (the v-forms).
    arrays: Vec<Vec<c_int>>,
    pub(crate) op: &'static str,
    /// For `Avg`: the receive buffer to divide by the number of ranks once complete.
    pub(crate) average: Option<(*mut T, usize, usize)>,
    /// For receives: the exact number of elements expected.
    pub(crate) expect: Option<usize>,
    pub(crate) done: bool,
    /// Under a deadline: the copies MPI works on, and how long a wait may take.
    deadline: Option<(Staging, Duration)>,
    /// The communicator's health, refused when a wait times out.
    health: Health,
    /// Counts this operation for the communicator's progress engine until it completes.
    in_flight: Option<InFlight>,
    pub(crate) _buffers: PhantomData<&'s mut [T]>,
}

impl<'s, T: Element> MpiPending<'s, T> {
    /// An operation that waits against the deadline of `deadline`, on its copies, where there is one.
    pub(crate) fn with_deadline(
        request: ffi::MPI_Request,
        op: &'static str,
        deadline: Option<(Staging, Duration)>,
        health: Health,
    ) -> Self {
        MpiPending {
            requests: vec![request],
            arrays: Vec::new(),
            op,
            average: None,
            expect: None,
            done: false,
            deadline,
            health,
            in_flight: None,
            _buffers: PhantomData,
        }
    }

    pub(crate) fn average(mut self, reduce: ReduceOp, buf: &mut [T], size: usize) -> Self {
        if reduce == ReduceOp::Avg {
            self.average = Some((buf.as_mut_ptr(), buf.len(), size));
        }
        self
    }

    /// Finish a reduction into `buf` (`None`: no result on this rank) at completion: divide by
    /// `size` where `reduce` (`None`: the operation does not reduce) is `Avg`, or where the
    /// front end summed an `Avg` (`average`).
    pub(crate) fn finishing(
        self,
        reduce: Option<ReduceOp>,
        average: bool,
        buf: Option<&mut [T]>,
        size: usize,
    ) -> Self {
        match (reduce, buf) {
            (Some(red), Some(buf)) => {
                let finish = if average { ReduceOp::Avg } else { red };
                self.average(finish, buf, size)
            }
            _ => self,
        }
    }

    /// Count this operation for a progress engine until it completes (`None`: no engine).
    pub(crate) fn tracked(mut self, ticket: Option<InFlight>) -> Self {
        self.in_flight = ticket;
        self
    }

    pub(crate) fn expect(mut self, n: usize) -> Self {
        self.expect = Some(n);
        self
    }

    /// Keep `arrays` (counts, displacements) alive until the operation completes: MPI reads them
    /// while it is in flight.
    pub(crate) fn holding(mut self, arrays: Vec<Vec<c_int>>) -> Self {
        self.arrays = arrays;
        self
    }

    fn complete(&mut self, status: &ffi::MPI_Status) -> Result<()> {
        self.done = true;
        self.in_flight = None;
        if let Some((staging, _)) = self.deadline.take() {
            staging.finish();
        }
        if let Some(n) = self.expect {
            raw::received(self.op, status, raw::datatype::<T>(), n)?;
        }
        if let Some((ptr, len, size)) = self.average.take() {
            // SAFETY: the buffer is borrowed mutably for 's by this operation and nothing else touches it;
            // MPI has completed, so no one writes it any more; `ptr`/`len` came from that borrow.
            let buf = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
            T::divide_all(buf, size);
        }
        Ok(())
    }

    /// The operation failed or timed out and will not be waited for again.
    fn give_up(&mut self) {
        self.done = true;
        self.in_flight = None;
        if let Some((staging, _)) = self.deadline.take() {
            staging.abandon();
        }
    }
}

impl<T: Element> Pending for MpiPending<'_, T> {
    fn wait(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        let mut status = vec![raw::status(); self.requests.len()];
        let timeout = self.deadline.as_ref().map(|(_, t)| *t);
        match wait_requests(self.op, &mut self.requests, &mut status, timeout) {
            Ok(true) => self.complete(&status[0]),
            Ok(false) => {
                self.give_up();
                let after = timeout.expect("only a wait with a deadline times out");
                Err(self.health.timed_out(self.op, after))
            }
            Err(e) => {
                self.give_up();
                Err(e)
            }
        }
    }

    fn test(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let mut status = vec![raw::status(); self.requests.len()];
        let mut flag = 0;
        let n = c_int::try_from(self.requests.len()).expect("a handful of requests");
        let (reqs, stats) = (self.requests.as_mut_ptr(), status.as_mut_ptr());
        // SAFETY: the requests came from successful MPI_I* calls (completed ones are
        // MPI_REQUEST_NULL) and have not all completed (`done` is false); `flag` and `stats` are
        // valid out-pointers, one status per request.
        let rc = unsafe {
            if n == 1 {
                ffi::MPI_Test(reqs, &mut flag, stats)
            } else {
                ffi::MPI_Testall(n, reqs, &mut flag, stats)
            }
        };
        if rc != 0 {
            self.give_up();
            let code = status
                .iter()
                .map(|s| s.MPI_ERROR)
                .find(|&e| e != 0 && n > 1)
                .unwrap_or(rc);
            return Err(raw::error(self.op, code));
        }
        if flag == 0 {
            return Ok(false);
        }
        self.complete(&status[0]).map(|()| true)
    }

    fn set_member(&mut self) -> Option<SetMember<'_>> {
        Some(SetMember::new(self, wait_set))
    }
}

impl<T: Element> Member for MpiPending<'_, T> {
    fn requests(&mut self) -> &mut [ffi::MPI_Request] {
        if self.done {
            &mut []
        } else {
            &mut self.requests
        }
    }

    fn timeout(&self) -> Option<Duration> {
        self.deadline.as_ref().map(|(_, t)| *t)
    }

    fn finish_set(&mut self, statuses: &[ffi::MPI_Status]) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.complete(&statuses[0])
    }

    fn deadline_passed(&mut self, after: Duration) -> Result<()> {
        match Pending::test(self) {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.give_up();
                Err(self.health.timed_out(self.op, after))
            }
            Err(e) => Err(e),
        }
    }

    fn abandon_set(&mut self) {
        if !self.done {
            self.give_up();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_copies_inputs_and_returns_outputs() {
        let send = [1.5f64, 2.5, -3.0];
        let mut recv = [0u8; 5];
        let mut both = [7i32, 8];
        let (staging, p) = Staging::new([
            Region::send(&send[..]),
            Region::recv(&mut recv[..]),
            Region::in_out(&mut both[..]),
            Region::Absent,
        ]);
        assert_ne!(p[0], send.as_ptr().cast_mut().cast(), "MPI gets a copy");
        assert!(p[3].is_null());
        // SAFETY: the copies hold 3 f64, 5 bytes (rounded up to a word) and 2 i32, as staged above.
        unsafe {
            assert_eq!(std::slice::from_raw_parts(p[0].cast::<f64>(), 3), send);
            std::ptr::copy_nonoverlapping([1u8, 2, 3, 4, 5].as_ptr(), p[1].cast::<u8>(), 5);
            assert_eq!(std::slice::from_raw_parts(p[2].cast::<i32>(), 2), [7, 8]);
            *p[2].cast::<i32>().add(1) = 9;
        }
        assert_eq!(recv, [0; 5], "nothing is copied back before completion");
        staging.finish();
        assert_eq!(recv, [1, 2, 3, 4, 5]);
        assert_eq!(both, [7, 9]);
    }

    #[test]
    fn empty_and_absent_regions_are_not_copied() {
        let empty: [f32; 0] = [];
        let mut out: Vec<u8> = Vec::new();
        let (staging, p) = Staging::new([
            Region::send(&empty[..]),
            Region::recv(&mut out[..]),
            Region::Absent,
        ]);
        assert!(staging.copies.is_empty());
        assert_eq!(p[0].cast_const(), raw::ptr(&empty[..]));
        assert_ne!(p[0], raw::in_place(), "never a sentinel");
        assert!(p[2].is_null());
        staging.abandon();
    }

    #[test]
    fn health_keeps_the_first_timeout() {
        let health = Health::default();
        let shared = health.clone();
        assert!(health.check("barrier").is_ok());
        let e = health.timed_out("all_reduce", Duration::from_secs(2));
        assert_eq!(
            e,
            Error::Timeout {
                op: "all_reduce",
                after: Duration::from_secs(2)
            }
        );
        let _ = shared.timed_out("send", Duration::from_secs(9));
        assert!(!shared.is_usable());
        assert_eq!(
            health.check("barrier"),
            Err(Error::Unusable {
                op: "barrier",
                timed_out: "all_reduce",
                after: Duration::from_secs(2)
            })
        );
    }
}
