//! The [`Communicator`] trait: one set of collectives, implemented by every backend.
//!
//! Each backend says where its buffers live through [`Communicator::Memory`], and takes
//! [`Buf<C, T>`](Buf) to read and [`BufMut<C, T>`](BufMut) to write: host backends `[T]`, device
//! backends device memory (see [`crate::memory`]). Generic solver code written once against the
//! trait compiles for all of them:
//!
//! ```
//! use collectives_core::{Buf, BufMut, Communicator, ReduceOp, Result};
//!
//! /// The global sum of every rank's partial sums, for any backend.
//! fn global_sum<C: Communicator>(comm: &C, partial: &Buf<C, f64>, total: &mut BufMut<C, f64>) -> Result<()> {
//!     comm.all_reduce(partial, total, ReduceOp::Sum)
//! }
//! ```
//!
//! Rules shared by every implementation:
//! - every argument is checked before any library call, always (not only in debug builds): lengths per
//!   collective, root and peer ranks, the reduce operation for the element type, counts arrays of length
//!   [`size`](Communicator::size) that agree with the buffers, counts that fit the backend's count type;
//! - in checked mode (see [`crate::checked`]; [`Checked`](crate::Checked) wraps any communicator in
//!   it) the ranks also agree on the call before it is made, so a call whose arguments do not fit
//!   together across ranks returns an error on every rank instead of hanging;
//! - under a deadline (always on NCCL; opt-in on the MPI backends, see [`crate::deadline`] and
//!   [`MpiComm::with_timeout`](crate::MpiComm::with_timeout)) a peer that dies or never makes the
//!   matching call is [`Error::Timeout`](crate::Error::Timeout) instead of a hang, and every operation
//!   on an MPI communicator after that is [`Error::Unusable`](crate::Error::Unusable); without one, an
//!   MPI operation waits for its peers for as long as it takes. These two errors are not repeated in
//!   each method's `# Errors`;
//! - buffers are laid out packed in rank order: block `i` of a gather/scatter/all-to-all buffer belongs to
//!   rank `i`, and the v-variants place blocks back to back, so no padding is ever needed.

#[cfg(feature = "cuda")]
use std::sync::Arc;
#[cfg(feature = "cuda")]
use std::time::Duration;

#[cfg(feature = "cuda")]
use cudarc::driver::{CudaContext, CudaStream};

#[cfg(feature = "cuda")]
use crate::backend::mpi_host::MpiComm;
use crate::element::Element;
use crate::error::Result;
#[cfg(feature = "cuda")]
use crate::exchange::ExchangePart;
use crate::memory::Space;
use crate::op::{BackendKind, ReduceOp};
use crate::persistent::Persistent;
use crate::request::{Request, Scope};

/// A message tag for point-to-point operations (`0..=32767` works on every MPI).
pub type Tag = i32;

/// The buffer type that communicator `C` reads for elements `T`, borrowing memory for `'b`: `[T]`
/// for a host communicator, device memory for a device one (see [`crate::memory`]). In a
/// signature the lifetime may be left out: `&Buf<C, f64>`.
pub type Buf<'b, C, T> = <<C as Communicator>::Memory as Space>::Buf<'b, T>;
/// The buffer type that communicator `C` writes for elements `T` (`[T]` on the host; a writable
/// device buffer, not a read-only view, on a device).
pub type BufMut<'b, C, T> = <<C as Communicator>::Memory as Space>::BufMut<'b, T>;

/// Collectives and point-to-point operations over a group of ranks.
///
/// All operations return [`Error`](crate::Error) values for bad input; none panics. Collective
/// operations must be called by every rank of the communicator in the same order. Every operation
/// may also return [`Error::Timeout`](crate::Error::Timeout) under a deadline and, on the MPI
/// backends, [`Error::Unusable`](crate::Error::Unusable) once an earlier operation timed out (see the
/// [module documentation](self)).
pub trait Communicator: Sized {
    /// Where this communicator's buffers live ([`Host`](crate::Host) or
    /// [`Device`](crate::Device)); [`Buf<Self, T>`](Buf) is its buffer type for elements `T`.
    type Memory: Space;

    /// Which backend this is.
    fn backend(&self) -> BackendKind;
    /// This rank's index, `0..size`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Whether checked mode (cross-rank agreement before each collective) is on: always for a
    /// [`Checked`](crate::Checked) communicator, else the communicator's own setting
    /// (`with_checked`, else `COLLECTIVES_CHECK`, else on in debug builds).
    fn checked(&self) -> bool;

    /// Block until every rank has entered the barrier.
    ///
    /// # Errors
    /// Library errors; [`Mismatch`](crate::Error::Mismatch) in checked mode when ranks call different operations.
    fn barrier(&self) -> Result<()>;

    /// Copy `buf` of rank `root` into `buf` of every rank. Every rank passes the same length.
    ///
    /// # Errors
    /// Root out of range; count overflow; library errors; cross-rank disagreement in checked mode.
    fn broadcast<T: Element>(&self, buf: &mut BufMut<Self, T>, root: usize) -> Result<()>;

    /// Reduce `send` of every rank into `recv` on `root`. `recv` is needed on the root only (same length
    /// as `send`) and ignored elsewhere.
    ///
    /// # Errors
    /// Root out of range; missing or wrong-length `recv` on the root; operation not valid for `T` on this
    /// backend; count overflow; library errors; cross-rank disagreement in checked mode.
    fn reduce<T: Element>(
        &self,
        send: &Buf<Self, T>,
        recv: Option<&mut BufMut<Self, T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()>;

    /// Reduce `send` of every rank into `recv` of every rank (`send` and `recv` of equal length).
    ///
    /// # Errors
    /// Lengths differ; operation not valid for `T` on this backend; count overflow; library errors;
    /// cross-rank disagreement in checked mode.
    fn all_reduce<T: Element>(
        &self,
        send: &Buf<Self, T>,
        recv: &mut BufMut<Self, T>,
        op: ReduceOp,
    ) -> Result<()>;

    /// [`all_reduce`](Self::all_reduce) with `buf` as both input and output.
    ///
    /// # Errors
    /// As [`all_reduce`](Self::all_reduce).
    fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut BufMut<Self, T>,
        op: ReduceOp,
    ) -> Result<()>;

    /// Concatenate `send` of every rank, in rank order, into `recv` of every rank
    /// (`recv.len() == size * send.len()`).
    ///
    /// # Errors
    /// Wrong lengths; count overflow; library errors; cross-rank disagreement in checked mode.
    fn all_gather<T: Element>(&self, send: &Buf<Self, T>, recv: &mut BufMut<Self, T>)
        -> Result<()>;

    /// Uneven [`all_gather`](Self::all_gather): rank `i` contributes `counts[i]` elements (zero allowed);
    /// `recv` holds them back to back (`recv.len() == counts.iter().sum()`). Every rank passes the same
    /// `counts`.
    ///
    /// # Errors
    /// `counts.len() != size`; `send.len() != counts[rank]`; wrong `recv` length; count overflow; library
    /// errors; cross-rank disagreement in checked mode.
    fn all_gather_v<T: Element>(
        &self,
        send: &Buf<Self, T>,
        recv: &mut BufMut<Self, T>,
        counts: &[usize],
    ) -> Result<()>;

    /// Concatenate `send` of every rank into `recv` on `root` (`size * send.len()`; ignored elsewhere).
    ///
    /// # Errors
    /// As [`all_gather`](Self::all_gather), plus root out of range and a missing `recv` on the root.
    fn gather<T: Element>(
        &self,
        send: &Buf<Self, T>,
        recv: Option<&mut BufMut<Self, T>>,
        root: usize,
    ) -> Result<()>;

    /// Uneven [`gather`](Self::gather); `counts` as in [`all_gather_v`](Self::all_gather_v), passed by every rank.
    ///
    /// # Errors
    /// As [`all_gather_v`](Self::all_gather_v), plus root out of range and a missing `recv` on the root.
    fn gather_v<T: Element>(
        &self,
        send: &Buf<Self, T>,
        recv: Option<&mut BufMut<Self, T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<()>;

    /// Split `send` on `root` (`size * recv.len()`; ignored elsewhere) into equal blocks, block `i` to rank `i`.
    ///
    /// # Errors
    /// Root out of range; missing or wrong-length `send` on the root; count overflow; library errors;
    /// cross-rank disagreement in checked mode.
    fn scatter<T: Element>(
        &self,
        send: Option<&Buf<Self, T>>,
        recv: &mut BufMut<Self, T>,
        root: usize,
    ) -> Result<()>;

    /// Uneven [`scatter`](Self::scatter): rank `i` receives `counts[i]` elements; every rank passes `counts`.
    ///
    /// # Errors
    /// As [`scatter`](Self::scatter), plus `counts.len() != size` and `recv.len() != counts[rank]`.
    fn scatter_v<T: Element>(
        &self,
        send: Option<&Buf<Self, T>>,
        recv: &mut BufMut<Self, T>,
        counts: &[usize],
        root: usize,
    ) -> Result<()>;

    /// Reduce `send` (`size * recv.len()` elements) across ranks and give block `rank` of the result to
    /// each rank.
    ///
    /// # Errors
    /// Wrong lengths; operation not valid for `T`; count overflow; library errors; cross-rank disagreement
    /// in checked mode.
    fn reduce_scatter<T: Element>(
        &self,
        send: &Buf<Self, T>,
        recv: &mut BufMut<Self, T>,
        op: ReduceOp,
    ) -> Result<()>;

    /// Block `j` of `send` goes to rank `j`, arriving as block `rank` of its `recv`. Both buffers hold
    /// `size` equal blocks.
    ///
    /// # Errors
    /// Lengths differ or are not a multiple of `size`; count overflow; library errors; cross-rank
    /// disagreement in checked mode.
    fn all_to_all<T: Element>(&self, send: &Buf<Self, T>, recv: &mut BufMut<Self, T>)
        -> Result<()>;

    /// Uneven [`all_to_all`](Self::all_to_all): this rank sends `send_counts[j]` elements to rank `j` and
    /// receives `recv_counts[i]` from rank `i`, blocks back to back in rank order. `send_counts[j]` of rank
    /// `i` must equal `recv_counts[i]` of rank `j` (checked mode verifies it).
    ///
    /// # Errors
    /// Counts arrays of the wrong length or not matching the buffers; count overflow; library errors;
    /// cross-rank disagreement in checked mode.
    fn all_to_all_v<T: Element>(
        &self,
        send: &Buf<Self, T>,
        send_counts: &[usize],
        recv: &mut BufMut<Self, T>,
        recv_counts: &[usize],
    ) -> Result<()>;

    /// Send `buf` to rank `dest`.
    ///
    /// # Errors
    /// `dest` out of range; tag out of range; count overflow; library errors.
    fn send<T: Element>(&self, buf: &Buf<Self, T>, dest: usize, tag: Tag) -> Result<()>;

    /// Receive exactly `buf.len()` elements from rank `source`.
    ///
    /// # Errors
    /// `source` out of range; tag out of range; a message of another length; library errors.
    fn recv<T: Element>(&self, buf: &mut BufMut<Self, T>, source: usize, tag: Tag) -> Result<()>;

    /// Send `send` to `dest` and receive exactly `recv.len()` elements from `source`, without deadlock.
    ///
    /// # Errors
    /// As [`send`](Self::send) and [`recv`](Self::recv).
    fn send_recv<T: Element>(
        &self,
        send: &Buf<Self, T>,
        dest: usize,
        recv: &mut BufMut<Self, T>,
        source: usize,
        tag: Tag,
    ) -> Result<()>;

    /// Split into sub-communicators: ranks passing the same `color` form one, ordered by `key` (then by
    /// rank). `None` as the color takes part in the call but joins none, and gets `Ok(None)`.
    ///
    /// # Errors
    /// Color out of the backend's range; library errors; cross-rank disagreement in checked mode.
    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>>;

    /// A new communicator with the same ranks, whose messages never mix with this one's.
    ///
    /// # Errors
    /// Library errors.
    fn dup(&self) -> Result<Self>;

    /// Start an [`all_reduce`](Self::all_reduce); the buffers stay borrowed until `scope` ends.
    ///
    /// # Errors
    /// As [`all_reduce`](Self::all_reduce), for errors found when starting; completion errors come from
    /// [`Request::wait`] or the scope.
    fn i_all_reduce<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<Self, T>,
        recv: &'s mut BufMut<Self, T>,
        op: ReduceOp,
    ) -> Result<Request<'s>>;

    /// Start a [`broadcast`](Self::broadcast).
    ///
    /// # Errors
    /// As [`broadcast`](Self::broadcast), for errors found when starting.
    fn i_broadcast<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut BufMut<Self, T>,
        root: usize,
    ) -> Result<Request<'s>>;

    /// Start an [`all_gather`](Self::all_gather).
    ///
    /// # Errors
    /// As [`all_gather`](Self::all_gather), for errors found when starting.
    fn i_all_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<Self, T>,
        recv: &'s mut BufMut<Self, T>,
    ) -> Result<Request<'s>>;

    /// Start a [`barrier`](Self::barrier): the request completes once every rank has started it.
    ///
    /// # Errors
    /// As [`barrier`](Self::barrier), for errors found when starting; completion errors come from
    /// [`Request::wait`] or the scope.
    fn i_barrier<'s>(&'s self, scope: &'s Scope<'s, '_>) -> Result<Request<'s>>;

    /// Start a [`reduce`](Self::reduce); `Avg` is finished when the request completes.
    ///
    /// # Errors
    /// As [`reduce`](Self::reduce), for errors found when starting; completion errors come from
    /// [`Request::wait`] or the scope.
    fn i_reduce<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<Self, T>,
        recv: Option<&'s mut BufMut<Self, T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<Request<'s>>;

    /// Start an [`all_reduce_in_place`](Self::all_reduce_in_place); `Avg` is finished when the
    /// request completes.
    ///
    /// # Errors
    /// As [`all_reduce_in_place`](Self::all_reduce_in_place), for errors found when starting;
    /// completion errors come from [`Request::wait`] or the scope.
    fn i_all_reduce_in_place<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut BufMut<Self, T>,
        op: ReduceOp,
    ) -> Result<Request<'s>>;

    /// Start a [`reduce_scatter`](Self::reduce_scatter); `Avg` is finished when the request
    /// completes.
    ///
    /// # Errors
    /// As [`reduce_scatter`](Self::reduce_scatter), for errors found when starting; completion
    /// errors come from [`Request::wait`] or the scope.
    fn i_reduce_scatter<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<Self, T>,
        recv: &'s mut BufMut<Self, T>,
        op: ReduceOp,
    ) -> Result<Request<'s>>;

    /// Start an [`all_to_all`](Self::all_to_all).
    ///
    /// # Errors
    /// As [`all_to_all`](Self::all_to_all), for errors found when starting; completion errors come
    /// from [`Request::wait`] or the scope.
    fn i_all_to_all<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<Self, T>,
        recv: &'s mut BufMut<Self, T>,
    ) -> Result<Request<'s>>;

    /// Start an [`all_to_all_v`](Self::all_to_all_v). The counts arrays are read when starting
    /// (the request keeps what it needs of them).
    ///
    /// # Errors
    /// As [`all_to_all_v`](Self::all_to_all_v), for errors found when starting; completion errors
    /// come from [`Request::wait`] or the scope.
    fn i_all_to_all_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<Self, T>,
        send_counts: &[usize],
        recv: &'s mut BufMut<Self, T>,
        recv_counts: &[usize],
    ) -> Result<Request<'s>>;

    /// Start an [`all_gather_v`](Self::all_gather_v); `counts` is read when starting.
    ///
    /// # Errors
    /// As [`all_gather_v`](Self::all_gather_v), for errors found when starting; completion errors
    /// come from [`Request::wait`] or the scope.
    fn i_all_gather_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<Self, T>,
        recv: &'s mut BufMut<Self, T>,
        counts: &[usize],
    ) -> Result<Request<'s>>;

    /// Start a [`gather`](Self::gather).
    ///
    /// # Errors
    /// As [`gather`](Self::gather), for errors found when starting; completion errors come from
    /// [`Request::wait`] or the scope.
    fn i_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<Self, T>,
        recv: Option<&'s mut BufMut<Self, T>>,
        root: usize,
    ) -> Result<Request<'s>>;

    /// Start a [`gather_v`](Self::gather_v); `counts` is read when starting.
    ///
    /// # Errors
    /// As [`gather_v`](Self::gather_v), for errors found when starting; completion errors come
    /// from [`Request::wait`] or the scope.
    fn i_gather_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<Self, T>,
        recv: Option<&'s mut BufMut<Self, T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<Request<'s>>;

    /// Start a [`scatter`](Self::scatter).
    ///
    /// # Errors
    /// As [`scatter`](Self::scatter), for errors found when starting; completion errors come from
    /// [`Request::wait`] or the scope.
    fn i_scatter<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Buf<Self, T>>,
        recv: &'s mut BufMut<Self, T>,
        root: usize,
    ) -> Result<Request<'s>>;

    /// Start a [`scatter_v`](Self::scatter_v); `counts` is read when starting.
    ///
    /// # Errors
    /// As [`scatter_v`](Self::scatter_v), for errors found when starting; completion errors come
    /// from [`Request::wait`] or the scope.
    fn i_scatter_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Buf<Self, T>>,
        recv: &'s mut BufMut<Self, T>,
        counts: &[usize],
        root: usize,
    ) -> Result<Request<'s>>;

    /// Start a [`send_recv`](Self::send_recv): the send and the receive complete together; a
    /// message of another length is an error at completion.
    ///
    /// # Errors
    /// As [`send_recv`](Self::send_recv), for errors found when starting; completion errors come
    /// from [`Request::wait`] or the scope.
    fn i_send_recv<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<Self, T>,
        dest: usize,
        recv: &'s mut BufMut<Self, T>,
        source: usize,
        tag: Tag,
    ) -> Result<Request<'s>>;

    /// Start a [`send`](Self::send).
    ///
    /// # Errors
    /// As [`send`](Self::send), for errors found when starting.
    fn i_send<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s Buf<Self, T>,
        dest: usize,
        tag: Tag,
    ) -> Result<Request<'s>>;

    /// Start a [`recv`](Self::recv); a message of another length is an error at completion.
    ///
    /// # Errors
    /// As [`recv`](Self::recv), for errors found when starting.
    fn i_recv<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut BufMut<Self, T>,
        source: usize,
        tag: Tag,
    ) -> Result<Request<'s>>;
    /// A persistent [`barrier`](Self::barrier): checked (and in checked mode agreed) once, run with
    /// [`Persistent::start`] and [`Persistent::wait`] as often as needed; see
    /// [`crate::persistent`]. The plan lives in `scope`, which completes a run still in flight when
    /// it ends.
    ///
    /// # Errors
    /// As [`barrier`](Self::barrier), and the backend's error when it cannot make the plan.
    fn barrier_init<'s>(&'s self, scope: &'s Scope<'s, '_>) -> Result<Persistent<'s>>;

    /// A persistent [`broadcast`](Self::broadcast) of `buf` (the plan's receive buffer); see
    /// [`barrier_init`](Self::barrier_init). Each run broadcasts what the root's buffer holds when
    /// it starts.
    ///
    /// # Errors
    /// As [`broadcast`](Self::broadcast), checked once here.
    fn broadcast_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut BufMut<Self, T>,
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`reduce`](Self::reduce); see [`barrier_init`](Self::barrier_init). The send
    /// buffer is borrowed mutably so that it can be changed between runs
    /// ([`Persistent::send_mut`]); each run reads it as it is when the run starts.
    ///
    /// # Errors
    /// As [`reduce`](Self::reduce), checked once here.
    fn reduce_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<Self, T>,
        recv: Option<&'s mut BufMut<Self, T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`all_reduce`](Self::all_reduce); see [`reduce_init`](Self::reduce_init).
    /// `Avg` is finished (divided) at every completion where the backend sums.
    ///
    /// # Errors
    /// As [`all_reduce`](Self::all_reduce), checked once here.
    fn all_reduce_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<Self, T>,
        recv: &'s mut BufMut<Self, T>,
        op: ReduceOp,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`all_reduce_in_place`](Self::all_reduce_in_place) (`buf` is the plan's
    /// receive buffer); see [`reduce_init`](Self::reduce_init).
    ///
    /// # Errors
    /// As [`all_reduce_in_place`](Self::all_reduce_in_place), checked once here.
    fn all_reduce_in_place_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut BufMut<Self, T>,
        op: ReduceOp,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`all_gather`](Self::all_gather); see [`reduce_init`](Self::reduce_init).
    ///
    /// # Errors
    /// As [`all_gather`](Self::all_gather), checked once here.
    fn all_gather_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<Self, T>,
        recv: &'s mut BufMut<Self, T>,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`all_gather_v`](Self::all_gather_v); see [`reduce_init`](Self::reduce_init).
    ///
    /// # Errors
    /// As [`all_gather_v`](Self::all_gather_v), checked once here.
    fn all_gather_v_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<Self, T>,
        recv: &'s mut BufMut<Self, T>,
        counts: &[usize],
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`gather`](Self::gather); see [`reduce_init`](Self::reduce_init).
    ///
    /// # Errors
    /// As [`gather`](Self::gather), checked once here.
    fn gather_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<Self, T>,
        recv: Option<&'s mut BufMut<Self, T>>,
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`gather_v`](Self::gather_v); see [`reduce_init`](Self::reduce_init).
    ///
    /// # Errors
    /// As [`gather_v`](Self::gather_v), checked once here.
    fn gather_v_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<Self, T>,
        recv: Option<&'s mut BufMut<Self, T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`scatter`](Self::scatter); see [`reduce_init`](Self::reduce_init).
    ///
    /// # Errors
    /// As [`scatter`](Self::scatter), checked once here.
    fn scatter_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s mut BufMut<Self, T>>,
        recv: &'s mut BufMut<Self, T>,
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`scatter_v`](Self::scatter_v); see [`reduce_init`](Self::reduce_init).
    ///
    /// # Errors
    /// As [`scatter_v`](Self::scatter_v), checked once here.
    fn scatter_v_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s mut BufMut<Self, T>>,
        recv: &'s mut BufMut<Self, T>,
        counts: &[usize],
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`reduce_scatter`](Self::reduce_scatter); see
    /// [`reduce_init`](Self::reduce_init).
    ///
    /// # Errors
    /// As [`reduce_scatter`](Self::reduce_scatter), checked once here.
    fn reduce_scatter_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<Self, T>,
        recv: &'s mut BufMut<Self, T>,
        op: ReduceOp,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`all_to_all`](Self::all_to_all); see [`reduce_init`](Self::reduce_init).
    ///
    /// # Errors
    /// As [`all_to_all`](Self::all_to_all), checked once here.
    fn all_to_all_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<Self, T>,
        recv: &'s mut BufMut<Self, T>,
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;

    /// A persistent [`all_to_all_v`](Self::all_to_all_v); see [`reduce_init`](Self::reduce_init).
    ///
    /// # Errors
    /// As [`all_to_all_v`](Self::all_to_all_v), checked once here.
    fn all_to_all_v_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<Self, T>,
        send_counts: &[usize],
        recv: &'s mut BufMut<Self, T>,
        recv_counts: &[usize],
    ) -> Result<Persistent<'s, BufMut<'s, Self, T>>>;
}

/// What the communicators on device memory share ([`NcclComm`](crate::NcclComm),
/// [`MpiCudaComm`](crate::MpiCudaComm), [`MpiStagedComm`](crate::MpiStagedComm)): a CUDA stream
/// that orders their device work, the MPI communicator underneath, a deadline, and a wait for the
/// stream.
///
/// ```no_run
/// use collectives_core::{DeviceCommunicator, Result};
///
/// /// Wait for the communicator's work, whichever device backend it is.
/// fn drain<C: DeviceCommunicator>(comm: &C) -> Result<()> {
///     comm.synchronize()
/// }
/// ```
#[cfg(feature = "cuda")]
pub trait DeviceCommunicator: Communicator {
    /// The stream every operation of this communicator is ordered on.
    fn stream(&self) -> &Arc<CudaStream>;

    /// The CUDA context (device) of this communicator: its stream's.
    fn context(&self) -> &Arc<CudaContext> {
        self.stream().context()
    }

    /// The MPI communicator over the same ranks (checked mode's agreement, host barriers, the
    /// raw handle).
    fn mpi(&self) -> &MpiComm;

    /// The deadline of waits and blocking operations, if any (always one on NCCL; the MPI
    /// communicator's on the MPI backends).
    fn deadline(&self) -> Option<Duration> {
        self.mpi().timeout()
    }

    /// Wait until the work enqueued on the stream so far is complete.
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda); on NCCL also
    /// [`Error::Timeout`](crate::Error::Timeout) (after aborting the communicator) and
    /// [`Error::Nccl`](crate::Error::Nccl) for an asynchronous error.
    fn synchronize(&self) -> Result<()> {
        self.stream()
            .synchronize()
            .map_err(|e| crate::Error::cuda("synchronize", e))
    }

    /// Use `stream` (of this communicator's device) for every operation from now on, instead of
    /// the communicator's own: work the caller enqueues there is ordered with the collectives
    /// without events. Waits for the work on the old stream first.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the stream belongs to another
    /// device; the errors of
    /// [`synchronize`](Self::synchronize).
    fn with_stream(self, stream: Arc<CudaStream>) -> Result<Self>;

    /// The grouped exchange ([`crate::exchange`]) on device memory: send every part of `sends`
    /// (bytes of the device buffer at address `send`) to its peer and receive every part of
    /// `recvs` (into the device buffer at address `recv`) from its peer, ordered after the work
    /// enqueued on `stream` so far; nothing at all when both are empty. What a halo exchange, or
    /// any neighbourhood exchange of pieces of one packed buffer, needs of a backend.
    ///
    /// On NCCL the parts are one group of `ncclSend`/`ncclRecv` of `ncclUint8`, enqueued on
    /// `stream`: it returns at once and the bytes are in place when the stream gets there. The
    /// MPI backends wait for `stream` (MPI knows no streams) and return with the bytes in place:
    /// [`MpiCudaComm`](crate::MpiCudaComm) on the device addresses where its MPI can take them
    /// (not cudarc's pool memory unless
    /// [`device_pool_memory`](crate::backend::mpi_cuda::MpiCudaBuilder::device_pool_memory);
    /// never under a deadline), otherwise, like [`MpiStagedComm`](crate::MpiStagedComm) always,
    /// through pinned host copies of the parts; a part a rank sends itself is copied on the
    /// device into the part it receives from itself.
    ///
    /// # Errors
    /// [`Error::Unavailable`](crate::Error::Unavailable) when the loaded NCCL lacks
    /// `ncclSend`/`ncclRecv`; [`Error::Nccl`](crate::Error::Nccl) (named `op`) from a send, a
    /// receive or the group's end; on MPI, [`Error::Cuda`](crate::Error::Cuda) from the waits and
    /// copies and the errors of [`MpiComm::exchange_bytes`] after its checks
    /// ([`Error::Timeout`](crate::Error::Timeout) under the deadline among them).
    ///
    /// # Safety
    /// Every part lies inside its buffer (`offset + len` bytes from the address at most) and
    /// names a rank of the communicator; the buffers are device memory of this communicator's
    /// context (or 0 where there are no parts) and stay valid, and nothing else writes the parts
    /// (or, for receives, reads them), until the exchange completes (on NCCL: until `stream`
    /// gets past it); `stream` is a stream of this communicator's context, ordered after whatever
    /// produced the sent bytes; every peer posts, in an exchange of its own, the matching
    /// receive or send of the same length.
    unsafe fn exchange_bytes(
        &self,
        op: &'static str,
        stream: &CudaStream,
        send: u64,
        sends: &[ExchangePart],
        recv: u64,
        recvs: &[ExchangePart],
    ) -> Result<()>;
}
