//! The front end: every operation of every backend goes through here, once.
//!
//! [`Backend`] is what a backend implements: raw operations whose arguments the front end has already
//! checked, and the few facts the front end needs (rank, size, rules, agreement, how `Avg` is done,
//! pinned host buffers). Every type that implements it is a [`Communicator`] through the one
//! implementation below, which for each operation:
//!
//! 1. opens a tracing span named after the operation;
//! 2. checks the arguments against the rules table ([`crate::rules`]) with the backend's parameters
//!    (count limit, tag bound, device), in the same order on every backend;
//! 3. takes what the call must hold before the ranks agree (the staged backends' pinned host
//!    buffers: a rank that cannot get them fails in the agreement, not alone afterwards);
//! 4. in checked mode, agrees with the other ranks on the call ([`crate::checked`]);
//! 5. makes the backend's raw operation;
//! 6. finishes `Avg` where the backend reduces with a sum (divides by the number of ranks).
//!
//! [`Backend`] is `pub` inside this private module: nothing outside the crate can name it, so no
//! one else can call a raw operation with unchecked arguments or implement it, while the blanket
//! implementation of the public [`Communicator`] trait can use it.
//!
//! Errors are mapped where they arise: the rules and the agreement return this crate's
//! [`Error`](crate::Error) values, the raw operations turn their library's codes into them.

use crate::checked::{Call, OpKind};
use crate::comm::{Buffer, Communicator, Tag};
use crate::element::Element;
use crate::error::Result;
use crate::op::{BackendKind, ReduceOp};
use crate::request::{Request, Scope};
use crate::rules::Rules;
use std::ops::Deref;

/// How an operation is started, which decides whether a backend stages it through host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A blocking operation.
    Blocking,
    /// A non-blocking collective.
    Collective,
    /// A non-blocking send or receive.
    PointToPoint,
}

/// A backend: raw, already-checked operations and what the front end needs to know of it.
///
/// Each raw operation is called only after the rules for its operation passed on this rank (and, in
/// checked mode, on every rank): buffer lengths fit the collective, ranks and tags are in range, the
/// reduce operation is valid for the element on this backend, counts fit the backend's limit and
/// buffers are on the communicator's device. `op` is the operation's name for errors. Counts `n`
/// are in elements, as the rules returned them.
pub trait Backend: Sized {
    /// The buffer type for elements `T`.
    type Buf<T: Element>: ?Sized + Buffer<T>;
    /// What a call holds from before the agreement until its raw operation (or its completion):
    /// pinned host buffers where the backend stages through host memory, else nothing.
    type Staging<'c, T: Element>: Default
    where
        Self: 'c;

    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// This rank and the number of ranks.
    fn ranks(&self) -> (usize, usize);
    /// Whether checked mode is on.
    fn is_checked(&self) -> bool;
    /// The rules' parameters for this communicator.
    fn rules(&self) -> Rules;
    /// Checked mode's agreement on `call` (or, unchecked, only the local result); see
    /// [`MpiComm::agree`](crate::MpiComm).
    fn agree<R>(&self, call: Call<'_>, local: Result<R>) -> Result<R>;
    /// Whether the backend reduces `Avg` itself; otherwise the front end sums and calls
    /// [`divide`](Self::divide).
    fn native_avg(&self) -> bool;
    /// Divide every element of `buf` by the number of ranks (the second half of `Avg`); called
    /// only where [`native_avg`](Self::native_avg) is false.
    fn divide<T: Element>(&self, _op: &'static str, _buf: &mut Self::Buf<T>) -> Result<()> {
        Ok(())
    }
    /// Take the host buffers a call of `start` needs for buffers of `lens` elements (`None`: the
    /// buffer is absent on this rank); by default none.
    fn stage<T: Element>(
        &self,
        _op: &'static str,
        _start: Start,
        _lens: [Option<usize>; 2],
    ) -> Result<Self::Staging<'_, T>> {
        Ok(Default::default())
    }

    /// `barrier`.
    fn raw_barrier(&self, op: &'static str) -> Result<()>;
    /// `broadcast` of `n` elements.
    fn raw_broadcast<T: Element>(
        &self,
        op: &'static str,
        buf: &mut Self::Buf<T>,
        root: usize,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `reduce` of `n` elements; `recv` is there on the root only.
    #[allow(clippy::too_many_arguments)]
    fn raw_reduce<T: Element>(
        &self,
        op: &'static str,
        send: &Self::Buf<T>,
        recv: Option<&mut Self::Buf<T>>,
        red: ReduceOp,
        root: usize,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `all_reduce` of `n` elements, in place on `recv` when `send` is `None`.
    fn raw_all_reduce<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Self::Buf<T>>,
        recv: &mut Self::Buf<T>,
        red: ReduceOp,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `all_gather` of blocks of `n` elements.
    fn raw_all_gather<T: Element>(
        &self,
        op: &'static str,
        send: &Self::Buf<T>,
        recv: &mut Self::Buf<T>,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `all_gather_v`.
    fn raw_all_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &Self::Buf<T>,
        recv: &mut Self::Buf<T>,
        counts: &[usize],
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `gather` of blocks of `n` elements; `recv` is there on the root only.
    fn raw_gather<T: Element>(
        &self,
        op: &'static str,
        send: &Self::Buf<T>,
        recv: Option<&mut Self::Buf<T>>,
        root: usize,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `gather_v`; `recv` is there on the root only.
    fn raw_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &Self::Buf<T>,
        recv: Option<&mut Self::Buf<T>>,
        counts: &[usize],
        root: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `scatter` of blocks of `n` elements; `send` is there on the root only.
    fn raw_scatter<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Self::Buf<T>>,
        recv: &mut Self::Buf<T>,
        root: usize,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `scatter_v`; `send` is there on the root only.
    fn raw_scatter_v<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Self::Buf<T>>,
        recv: &mut Self::Buf<T>,
        counts: &[usize],
        root: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `reduce_scatter` into blocks of `n` elements.
    fn raw_reduce_scatter<T: Element>(
        &self,
        op: &'static str,
        send: &Self::Buf<T>,
        recv: &mut Self::Buf<T>,
        red: ReduceOp,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `all_to_all` of blocks of `n` elements.
    fn raw_all_to_all<T: Element>(
        &self,
        op: &'static str,
        send: &Self::Buf<T>,
        recv: &mut Self::Buf<T>,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `all_to_all_v`.
    fn raw_all_to_all_v<T: Element>(
        &self,
        op: &'static str,
        send: &Self::Buf<T>,
        send_counts: &[usize],
        recv: &mut Self::Buf<T>,
        recv_counts: &[usize],
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `send` of `n` elements.
    fn raw_send<T: Element>(
        &self,
        op: &'static str,
        buf: &Self::Buf<T>,
        dest: usize,
        tag: Tag,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `recv` of exactly `n` elements.
    fn raw_recv<T: Element>(
        &self,
        op: &'static str,
        buf: &mut Self::Buf<T>,
        source: usize,
        tag: Tag,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `send_recv` of `counts = (sent, received)` elements.
    #[allow(clippy::too_many_arguments)]
    fn raw_send_recv<T: Element>(
        &self,
        op: &'static str,
        send: &Self::Buf<T>,
        dest: usize,
        recv: &mut Self::Buf<T>,
        source: usize,
        tag: Tag,
        counts: (usize, usize),
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `split` with a color that fits MPI's (`None`: join none).
    fn raw_split(&self, op: &'static str, color: Option<i32>, key: i32) -> Result<Option<Self>>;
    /// `dup`.
    fn raw_dup(&self, op: &'static str) -> Result<Self>;
    /// Start an `all_reduce` of `n` elements; `average`: divide by the number of ranks on completion.
    #[allow(clippy::too_many_arguments)]
    fn raw_i_all_reduce<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: &'s mut Self::Buf<T>,
        red: ReduceOp,
        average: bool,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `broadcast` of `n` elements.
    fn raw_i_broadcast<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut Self::Buf<T>,
        root: usize,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start an `all_gather` of blocks of `n` elements.
    fn raw_i_all_gather<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: &'s mut Self::Buf<T>,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `send` of `n` elements.
    #[allow(clippy::too_many_arguments)]
    fn raw_i_send<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s Self::Buf<T>,
        dest: usize,
        tag: Tag,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `recv` of exactly `n` elements.
    #[allow(clippy::too_many_arguments)]
    fn raw_i_recv<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut Self::Buf<T>,
        source: usize,
        tag: Tag,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `barrier`.
    fn raw_i_barrier<'s>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
    ) -> Result<Request<'s>>;
    /// Start a `reduce` of `n` elements (`recv` on the root only); `average`: divide on completion.
    #[allow(clippy::too_many_arguments)]
    fn raw_i_reduce<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: Option<&'s mut Self::Buf<T>>,
        red: ReduceOp,
        average: bool,
        root: usize,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start an in-place `all_reduce` of `n` elements; `average`: divide on completion.
    #[allow(clippy::too_many_arguments)]
    fn raw_i_all_reduce_in_place<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut Self::Buf<T>,
        red: ReduceOp,
        average: bool,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `reduce_scatter` into blocks of `n` elements; `average`: divide on completion.
    #[allow(clippy::too_many_arguments)]
    fn raw_i_reduce_scatter<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: &'s mut Self::Buf<T>,
        red: ReduceOp,
        average: bool,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start an `all_to_all` of blocks of `n` elements.
    fn raw_i_all_to_all<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: &'s mut Self::Buf<T>,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start an `all_to_all_v`.
    #[allow(clippy::too_many_arguments)]
    fn raw_i_all_to_all_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        send_counts: &[usize],
        recv: &'s mut Self::Buf<T>,
        recv_counts: &[usize],
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start an `all_gather_v`.
    fn raw_i_all_gather_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: &'s mut Self::Buf<T>,
        counts: &[usize],
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `gather` of blocks of `n` elements (`recv` on the root only).
    #[allow(clippy::too_many_arguments)]
    fn raw_i_gather<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: Option<&'s mut Self::Buf<T>>,
        root: usize,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `gather_v` (`recv` on the root only).
    #[allow(clippy::too_many_arguments)]
    fn raw_i_gather_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: Option<&'s mut Self::Buf<T>>,
        counts: &[usize],
        root: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `scatter` of blocks of `n` elements (`send` on the root only).
    #[allow(clippy::too_many_arguments)]
    fn raw_i_scatter<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Self::Buf<T>>,
        recv: &'s mut Self::Buf<T>,
        root: usize,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `scatter_v` (`send` on the root only).
    #[allow(clippy::too_many_arguments)]
    fn raw_i_scatter_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Self::Buf<T>>,
        recv: &'s mut Self::Buf<T>,
        counts: &[usize],
        root: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `send_recv` of `counts = (sent, received)` elements.
    #[allow(clippy::too_many_arguments)]
    fn raw_i_send_recv<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        dest: usize,
        recv: &'s mut Self::Buf<T>,
        source: usize,
        tag: Tag,
        counts: (usize, usize),
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
}

/// The reduce operation the backend runs for `red`, and whether the front end divides afterwards.
fn reduction<B: Backend>(b: &B, red: ReduceOp) -> (ReduceOp, bool) {
    if red == ReduceOp::Avg && !b.native_avg() {
        (ReduceOp::Sum, true)
    } else {
        (red, false)
    }
}

/// Local result then staging: a rank that cannot stage reports it like a bad argument.
fn staged<'c, B: Backend, T: Element, R>(
    b: &'c B,
    op: &'static str,
    start: Start,
    local: Result<R>,
    lens: impl FnOnce(&R) -> [Option<usize>; 2],
) -> Result<(R, B::Staging<'c, T>)> {
    let value = local?;
    let staging = b.stage::<T>(op, start, lens(&value))?;
    Ok((value, staging))
}

fn lens2(a: usize, b: usize) -> [Option<usize>; 2] {
    [Some(a), Some(b)]
}

/// `all_reduce`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_all_reduce<'c, B: Backend, T: Element>(
    b: &'c B,
    name: &'static str,
    start: Start,
    send: &B::Buf<T>,
    recv: &B::Buf<T>,
    op: ReduceOp,
) -> Result<(usize, B::Staging<'c, T>)> {
    let local = b.rules().all_reduce::<T, _>(name, send, recv, op);
    let local = staged::<_, T, _>(b, name, start, local, |_| lens2(send.len(), recv.len()));
    let call = Call::new(OpKind::AllReduce)
        .element::<T>()
        .reduce(op)
        .count(send.len());
    b.agree(call, local)
}

/// `all_reduce_in_place`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_all_reduce_in_place<'c, B: Backend, T: Element>(
    b: &'c B,
    name: &'static str,
    start: Start,
    buf: &B::Buf<T>,
    op: ReduceOp,
) -> Result<(usize, B::Staging<'c, T>)> {
    let local = b.rules().all_reduce_in_place::<T, _>(name, buf, op);
    let local = staged::<_, T, _>(b, name, start, local, |_| [Some(buf.len()), None]);
    let call = Call::new(OpKind::AllReduceInPlace)
        .element::<T>()
        .reduce(op)
        .count(buf.len());
    b.agree(call, local)
}

/// `all_gather`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_all_gather<'c, B: Backend, T: Element>(
    b: &'c B,
    name: &'static str,
    start: Start,
    send: &B::Buf<T>,
    recv: &B::Buf<T>,
) -> Result<(usize, B::Staging<'c, T>)> {
    let local = b.rules().all_gather::<T, _>(name, send, recv);
    let local = staged::<_, T, _>(b, name, start, local, |_| lens2(send.len(), recv.len()));
    let call = Call::new(OpKind::AllGather)
        .element::<T>()
        .count(send.len());
    b.agree(call, local)
}

/// `reduce_scatter`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_reduce_scatter<'c, B: Backend, T: Element>(
    b: &'c B,
    name: &'static str,
    start: Start,
    send: &B::Buf<T>,
    recv: &B::Buf<T>,
    op: ReduceOp,
) -> Result<(usize, B::Staging<'c, T>)> {
    let local = b.rules().reduce_scatter::<T, _>(name, send, recv, op);
    let local = staged::<_, T, _>(b, name, start, local, |_| lens2(send.len(), recv.len()));
    let call = Call::new(OpKind::ReduceScatter)
        .element::<T>()
        .reduce(op)
        .count(recv.len());
    b.agree(call, local)
}

/// `all_to_all`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_all_to_all<'c, B: Backend, T: Element>(
    b: &'c B,
    name: &'static str,
    start: Start,
    send: &B::Buf<T>,
    recv: &B::Buf<T>,
) -> Result<(usize, B::Staging<'c, T>)> {
    let local = b.rules().all_to_all::<T, _>(name, send, recv);
    let local = staged::<_, T, _>(b, name, start, local, |_| lens2(send.len(), recv.len()));
    let call = Call::new(OpKind::AllToAll).element::<T>().count(send.len());
    b.agree(call, local)
}

/// `broadcast`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_broadcast<'c, B: Backend, T: Element>(
    b: &'c B,
    name: &'static str,
    start: Start,
    buf: &B::Buf<T>,
    root: usize,
) -> Result<(usize, B::Staging<'c, T>)> {
    let local = b.rules().broadcast::<T, _>(name, buf, root);
    let local = staged::<_, T, _>(b, name, start, local, |_| [Some(buf.len()), None]);
    let call = Call::new(OpKind::Broadcast)
        .element::<T>()
        .root(root)
        .count(buf.len());
    b.agree(call, local)
}

/// `all_gather_v`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_all_gather_v<'c, B: Backend, T: Element>(
    b: &'c B,
    name: &'static str,
    start: Start,
    send: &B::Buf<T>,
    recv: &B::Buf<T>,
    counts: &[usize],
) -> Result<((), B::Staging<'c, T>)> {
    let local = b.rules().all_gather_v::<T, _>(name, send, recv, counts);
    let local = staged::<_, T, _>(b, name, start, local, |_| lens2(send.len(), recv.len()));
    let call = Call::new(OpKind::AllGatherV).element::<T>().counts(counts);
    b.agree(call, local)
}

/// What a rooted collective's prepare step gives: the count, the root-only buffer on the root, and
/// the staging.
type Rooted<'c, B, T, R> = Result<((usize, Option<R>), <B as Backend>::Staging<'c, T>)>;

/// `reduce`'s rules, staging and agreement, shared by its blocking and non-blocking forms: the
/// count and, on the root, its receive buffer.
fn prepare_reduce<'c, B: Backend, T: Element, R: Deref<Target = B::Buf<T>>>(
    b: &'c B,
    name: &'static str,
    start: Start,
    send: &B::Buf<T>,
    recv: Option<R>,
    op: ReduceOp,
    root: usize,
) -> Rooted<'c, B, T, R> {
    let local = b.rules().reduce::<T, _, _>(name, send, recv, op, root);
    let local = staged::<_, T, _>(b, name, start, local, |(_, r)| {
        [Some(send.len()), r.as_ref().map(|r| r.len())]
    });
    let call = Call::new(OpKind::Reduce)
        .element::<T>()
        .reduce(op)
        .root(root)
        .count(send.len());
    b.agree(call, local)
}

/// `gather`'s rules, staging and agreement, shared by its blocking and non-blocking forms: the
/// count and, on the root, its receive buffer.
fn prepare_gather<'c, B: Backend, T: Element, R: Deref<Target = B::Buf<T>>>(
    b: &'c B,
    name: &'static str,
    start: Start,
    send: &B::Buf<T>,
    recv: Option<R>,
    root: usize,
) -> Rooted<'c, B, T, R> {
    let local = b.rules().gather::<T, _, _>(name, send, recv, root);
    let local = staged::<_, T, _>(b, name, start, local, |(_, r)| {
        [Some(send.len()), r.as_ref().map(|r| r.len())]
    });
    let call = Call::new(OpKind::Gather)
        .element::<T>()
        .root(root)
        .count(send.len());
    b.agree(call, local)
}

/// `scatter`'s rules, staging and agreement, shared by its blocking and non-blocking forms: the
/// count and, on the root, its send buffer.
fn prepare_scatter<'c, B: Backend, T: Element, S: Deref<Target = B::Buf<T>>>(
    b: &'c B,
    name: &'static str,
    start: Start,
    send: Option<S>,
    recv: &B::Buf<T>,
    root: usize,
) -> Rooted<'c, B, T, S> {
    let local = b.rules().scatter::<T, _, _>(name, send, recv, root);
    let local = staged::<_, T, _>(b, name, start, local, |(_, s)| {
        [s.as_ref().map(|s| s.len()), Some(recv.len())]
    });
    let call = Call::new(OpKind::Scatter)
        .element::<T>()
        .root(root)
        .count(recv.len());
    b.agree(call, local)
}

impl<B: Backend> Communicator for B {
    type Buf<T: Element> = B::Buf<T>;

    fn backend(&self) -> BackendKind {
        self.kind()
    }

    fn rank(&self) -> usize {
        self.ranks().0
    }

    fn size(&self) -> usize {
        self.ranks().1
    }

    fn checked(&self) -> bool {
        self.is_checked()
    }

    fn barrier(&self) -> Result<()> {
        const OP: &str = "barrier";
        let _span = tracing::trace_span!("barrier").entered();
        self.agree(Call::new(OpKind::Barrier), Ok(()))?;
        self.raw_barrier(OP)
    }

    fn broadcast<T: Element>(&self, buf: &mut Self::Buf<T>, root: usize) -> Result<()> {
        const OP: &str = "broadcast";
        let _span = tracing::trace_span!("broadcast").entered();
        let (n, staging) = prepare_broadcast::<_, T>(self, OP, Start::Blocking, buf, root)?;
        self.raw_broadcast(OP, buf, root, n, staging)
    }

    fn reduce<T: Element>(
        &self,
        send: &Self::Buf<T>,
        recv: Option<&mut Self::Buf<T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "reduce";
        let _span = tracing::trace_span!("reduce").entered();
        let ((n, mut recv), staging) =
            prepare_reduce::<_, T, _>(self, OP, Start::Blocking, send, recv, op, root)?;
        let (run, divide) = reduction(self, op);
        self.raw_reduce(OP, send, recv.as_deref_mut(), run, root, n, staging)?;
        match recv {
            Some(recv) if divide => self.divide(OP, recv),
            _ => Ok(()),
        }
    }

    fn all_reduce<T: Element>(
        &self,
        send: &Self::Buf<T>,
        recv: &mut Self::Buf<T>,
        op: ReduceOp,
    ) -> Result<()> {
        const OP: &str = "all_reduce";
        let _span = tracing::trace_span!("all_reduce").entered();
        let (n, staging) = prepare_all_reduce::<_, T>(self, OP, Start::Blocking, send, recv, op)?;
        let (run, divide) = reduction(self, op);
        self.raw_all_reduce(OP, Some(send), recv, run, n, staging)?;
        if divide {
            self.divide(OP, recv)?;
        }
        Ok(())
    }

    fn all_reduce_in_place<T: Element>(&self, buf: &mut Self::Buf<T>, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce_in_place";
        let _span = tracing::trace_span!("all_reduce_in_place").entered();
        let (n, staging) = prepare_all_reduce_in_place::<_, T>(self, OP, Start::Blocking, buf, op)?;
        let (run, divide) = reduction(self, op);
        self.raw_all_reduce(OP, None, buf, run, n, staging)?;
        if divide {
            self.divide(OP, buf)?;
        }
        Ok(())
    }

    fn all_gather<T: Element>(&self, send: &Self::Buf<T>, recv: &mut Self::Buf<T>) -> Result<()> {
        const OP: &str = "all_gather";
        let _span = tracing::trace_span!("all_gather").entered();
        let (n, staging) = prepare_all_gather::<_, T>(self, OP, Start::Blocking, send, recv)?;
        self.raw_all_gather(OP, send, recv, n, staging)
    }

    fn all_gather_v<T: Element>(
        &self,
        send: &Self::Buf<T>,
        recv: &mut Self::Buf<T>,
        counts: &[usize],
    ) -> Result<()> {
        const OP: &str = "all_gather_v";
        let _span = tracing::trace_span!("all_gather_v").entered();
        let ((), staging) =
            prepare_all_gather_v::<_, T>(self, OP, Start::Blocking, send, recv, counts)?;
        self.raw_all_gather_v(OP, send, recv, counts, staging)
    }

    fn gather<T: Element>(
        &self,
        send: &Self::Buf<T>,
        recv: Option<&mut Self::Buf<T>>,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "gather";
        let _span = tracing::trace_span!("gather").entered();
        let ((n, recv), staging) =
            prepare_gather::<_, T, _>(self, OP, Start::Blocking, send, recv, root)?;
        self.raw_gather(OP, send, recv, root, n, staging)
    }

    fn gather_v<T: Element>(
        &self,
        send: &Self::Buf<T>,
        recv: Option<&mut Self::Buf<T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        const OP: &str = "gather_v";
        let _span = tracing::trace_span!("gather_v").entered();
        let local = self
            .rules()
            .gather_v::<T, _, _>(OP, send, recv, counts, root);
        let local = staged::<_, T, _>(self, OP, Start::Blocking, local, |r| {
            [Some(send.len()), r.as_ref().map(|r| r.len())]
        });
        let call = Call::new(OpKind::GatherV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let (recv, staging) = self.agree(call, local)?;
        self.raw_gather_v(OP, send, recv, counts, root, staging)
    }

    fn scatter<T: Element>(
        &self,
        send: Option<&Self::Buf<T>>,
        recv: &mut Self::Buf<T>,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "scatter";
        let _span = tracing::trace_span!("scatter").entered();
        let ((n, send), staging) =
            prepare_scatter::<_, T, _>(self, OP, Start::Blocking, send, recv, root)?;
        self.raw_scatter(OP, send, recv, root, n, staging)
    }

    fn scatter_v<T: Element>(
        &self,
        send: Option<&Self::Buf<T>>,
        recv: &mut Self::Buf<T>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        const OP: &str = "scatter_v";
        let _span = tracing::trace_span!("scatter_v").entered();
        let local = self
            .rules()
            .scatter_v::<T, _, _>(OP, send, recv, counts, root);
        let local = staged::<_, T, _>(self, OP, Start::Blocking, local, |s| {
            [s.map(|s| s.len()), Some(recv.len())]
        });
        let call = Call::new(OpKind::ScatterV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let (send, staging) = self.agree(call, local)?;
        self.raw_scatter_v(OP, send, recv, counts, root, staging)
    }

    fn reduce_scatter<T: Element>(
        &self,
        send: &Self::Buf<T>,
        recv: &mut Self::Buf<T>,
        op: ReduceOp,
    ) -> Result<()> {
        const OP: &str = "reduce_scatter";
        let _span = tracing::trace_span!("reduce_scatter").entered();
        let (n, staging) =
            prepare_reduce_scatter::<_, T>(self, OP, Start::Blocking, send, recv, op)?;
        let (run, divide) = reduction(self, op);
        self.raw_reduce_scatter(OP, send, recv, run, n, staging)?;
        if divide {
            self.divide(OP, recv)?;
        }
        Ok(())
    }

    fn all_to_all<T: Element>(&self, send: &Self::Buf<T>, recv: &mut Self::Buf<T>) -> Result<()> {
        const OP: &str = "all_to_all";
        let _span = tracing::trace_span!("all_to_all").entered();
        let (n, staging) = prepare_all_to_all::<_, T>(self, OP, Start::Blocking, send, recv)?;
        self.raw_all_to_all(OP, send, recv, n, staging)
    }

    fn all_to_all_v<T: Element>(
        &self,
        send: &Self::Buf<T>,
        send_counts: &[usize],
        recv: &mut Self::Buf<T>,
        recv_counts: &[usize],
    ) -> Result<()> {
        const OP: &str = "all_to_all_v";
        let _span = tracing::trace_span!("all_to_all_v").entered();
        let local = self
            .rules()
            .all_to_all_v::<T, _>(OP, send, send_counts, recv, recv_counts);
        let local = staged::<_, T, _>(self, OP, Start::Blocking, local, |_| {
            lens2(send.len(), recv.len())
        });
        let call = Call::new(OpKind::AllToAllV)
            .element::<T>()
            .all_to_all(send_counts, recv_counts);
        let ((), staging) = self.agree(call, local)?;
        self.raw_all_to_all_v(OP, send, send_counts, recv, recv_counts, staging)
    }

    fn send<T: Element>(&self, buf: &Self::Buf<T>, dest: usize, tag: Tag) -> Result<()> {
        const OP: &str = "send";
        let _span = tracing::trace_span!("send").entered();
        let n = self
            .rules()
            .point::<T, _>(OP, "destination", buf, dest, tag)?;
        let staging = self.stage::<T>(OP, Start::Blocking, [Some(n), None])?;
        self.raw_send(OP, buf, dest, tag, n, staging)
    }

    fn recv<T: Element>(&self, buf: &mut Self::Buf<T>, source: usize, tag: Tag) -> Result<()> {
        const OP: &str = "recv";
        let _span = tracing::trace_span!("recv").entered();
        let n = self.rules().point::<T, _>(OP, "source", buf, source, tag)?;
        let staging = self.stage::<T>(OP, Start::Blocking, [Some(n), None])?;
        self.raw_recv(OP, buf, source, tag, n, staging)
    }

    fn send_recv<T: Element>(
        &self,
        send: &Self::Buf<T>,
        dest: usize,
        recv: &mut Self::Buf<T>,
        source: usize,
        tag: Tag,
    ) -> Result<()> {
        const OP: &str = "send_recv";
        let _span = tracing::trace_span!("send_recv").entered();
        let (sn, rn) = self
            .rules()
            .send_recv::<T, _>(OP, send, dest, recv, source, tag)?;
        let staging = self.stage::<T>(OP, Start::Blocking, lens2(sn, rn))?;
        self.raw_send_recv(OP, send, dest, recv, source, tag, (sn, rn), staging)
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>> {
        const OP: &str = "split";
        let _span = tracing::trace_span!("split").entered();
        let local = Rules::color(OP, color);
        let color = self.agree(Call::new(OpKind::Split), local)?;
        self.raw_split(OP, color, key)
    }

    fn dup(&self) -> Result<Self> {
        const OP: &str = "dup";
        let _span = tracing::trace_span!("dup").entered();
        self.agree(Call::new(OpKind::Dup), Ok(()))?;
        self.raw_dup(OP)
    }

    fn i_all_reduce<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: &'s mut Self::Buf<T>,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_reduce";
        let _span = tracing::trace_span!("i_all_reduce").entered();
        let (n, staging) = prepare_all_reduce::<_, T>(self, OP, Start::Collective, send, recv, op)?;
        let (run, divide) = reduction(self, op);
        self.raw_i_all_reduce(OP, scope, send, recv, run, divide, n, staging)
    }

    fn i_broadcast<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut Self::Buf<T>,
        root: usize,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_broadcast";
        let _span = tracing::trace_span!("i_broadcast").entered();
        let (n, staging) = prepare_broadcast::<_, T>(self, OP, Start::Collective, buf, root)?;
        self.raw_i_broadcast(OP, scope, buf, root, n, staging)
    }

    fn i_all_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: &'s mut Self::Buf<T>,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_gather";
        let _span = tracing::trace_span!("i_all_gather").entered();
        let (n, staging) = prepare_all_gather::<_, T>(self, OP, Start::Collective, send, recv)?;
        self.raw_i_all_gather(OP, scope, send, recv, n, staging)
    }

    fn i_barrier<'s>(&'s self, scope: &'s Scope<'s, '_>) -> Result<Request<'s>> {
        const OP: &str = "i_barrier";
        let _span = tracing::trace_span!("i_barrier").entered();
        self.agree(Call::new(OpKind::Barrier), Ok(()))?;
        self.raw_i_barrier(OP, scope)
    }

    fn i_reduce<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: Option<&'s mut Self::Buf<T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_reduce";
        let _span = tracing::trace_span!("i_reduce").entered();
        let ((n, recv), staging) =
            prepare_reduce::<_, T, _>(self, OP, Start::Collective, send, recv, op, root)?;
        let (run, divide) = reduction(self, op);
        self.raw_i_reduce(OP, scope, send, recv, run, divide, root, n, staging)
    }

    fn i_all_reduce_in_place<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut Self::Buf<T>,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_reduce_in_place";
        let _span = tracing::trace_span!("i_all_reduce_in_place").entered();
        let (n, staging) =
            prepare_all_reduce_in_place::<_, T>(self, OP, Start::Collective, buf, op)?;
        let (run, divide) = reduction(self, op);
        self.raw_i_all_reduce_in_place(OP, scope, buf, run, divide, n, staging)
    }

    fn i_reduce_scatter<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: &'s mut Self::Buf<T>,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_reduce_scatter";
        let _span = tracing::trace_span!("i_reduce_scatter").entered();
        let (n, staging) =
            prepare_reduce_scatter::<_, T>(self, OP, Start::Collective, send, recv, op)?;
        let (run, divide) = reduction(self, op);
        self.raw_i_reduce_scatter(OP, scope, send, recv, run, divide, n, staging)
    }

    fn i_all_to_all<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: &'s mut Self::Buf<T>,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_to_all";
        let _span = tracing::trace_span!("i_all_to_all").entered();
        let (n, staging) = prepare_all_to_all::<_, T>(self, OP, Start::Collective, send, recv)?;
        self.raw_i_all_to_all(OP, scope, send, recv, n, staging)
    }

    fn i_all_to_all_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        send_counts: &[usize],
        recv: &'s mut Self::Buf<T>,
        recv_counts: &[usize],
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_to_all_v";
        let _span = tracing::trace_span!("i_all_to_all_v").entered();
        let local = self
            .rules()
            .all_to_all_v::<T, _>(OP, send, send_counts, recv, recv_counts);
        let local = staged::<_, T, _>(self, OP, Start::Collective, local, |_| {
            lens2(send.len(), recv.len())
        });
        let call = Call::new(OpKind::AllToAllV)
            .element::<T>()
            .all_to_all(send_counts, recv_counts);
        let ((), staging) = self.agree(call, local)?;
        self.raw_i_all_to_all_v(OP, scope, send, send_counts, recv, recv_counts, staging)
    }

    fn i_all_gather_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: &'s mut Self::Buf<T>,
        counts: &[usize],
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_gather_v";
        let _span = tracing::trace_span!("i_all_gather_v").entered();
        let ((), staging) =
            prepare_all_gather_v::<_, T>(self, OP, Start::Collective, send, recv, counts)?;
        self.raw_i_all_gather_v(OP, scope, send, recv, counts, staging)
    }

    fn i_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: Option<&'s mut Self::Buf<T>>,
        root: usize,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_gather";
        let _span = tracing::trace_span!("i_gather").entered();
        let ((n, recv), staging) =
            prepare_gather::<_, T, _>(self, OP, Start::Collective, send, recv, root)?;
        self.raw_i_gather(OP, scope, send, recv, root, n, staging)
    }

    fn i_gather_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        recv: Option<&'s mut Self::Buf<T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_gather_v";
        let _span = tracing::trace_span!("i_gather_v").entered();
        let local = self
            .rules()
            .gather_v::<T, _, _>(OP, send, recv, counts, root);
        let local = staged::<_, T, _>(self, OP, Start::Collective, local, |r| {
            [Some(send.len()), r.as_ref().map(|r| r.len())]
        });
        let call = Call::new(OpKind::GatherV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let (recv, staging) = self.agree(call, local)?;
        self.raw_i_gather_v(OP, scope, send, recv, counts, root, staging)
    }

    fn i_scatter<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Self::Buf<T>>,
        recv: &'s mut Self::Buf<T>,
        root: usize,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_scatter";
        let _span = tracing::trace_span!("i_scatter").entered();
        let ((n, send), staging) =
            prepare_scatter::<_, T, _>(self, OP, Start::Collective, send, recv, root)?;
        self.raw_i_scatter(OP, scope, send, recv, root, n, staging)
    }

    fn i_scatter_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Self::Buf<T>>,
        recv: &'s mut Self::Buf<T>,
        counts: &[usize],
        root: usize,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_scatter_v";
        let _span = tracing::trace_span!("i_scatter_v").entered();
        let local = self
            .rules()
            .scatter_v::<T, _, _>(OP, send, recv, counts, root);
        let local = staged::<_, T, _>(self, OP, Start::Collective, local, |s| {
            [s.map(|s| s.len()), Some(recv.len())]
        });
        let call = Call::new(OpKind::ScatterV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let (send, staging) = self.agree(call, local)?;
        self.raw_i_scatter_v(OP, scope, send, recv, counts, root, staging)
    }

    fn i_send_recv<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Self::Buf<T>,
        dest: usize,
        recv: &'s mut Self::Buf<T>,
        source: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_send_recv";
        let _span = tracing::trace_span!("i_send_recv").entered();
        let (sn, rn) = self
            .rules()
            .send_recv::<T, _>(OP, send, dest, recv, source, tag)?;
        let staging = self.stage::<T>(OP, Start::PointToPoint, lens2(sn, rn))?;
        self.raw_i_send_recv(OP, scope, send, dest, recv, source, tag, (sn, rn), staging)
    }

    fn i_send<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s Self::Buf<T>,
        dest: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_send";
        let _span = tracing::trace_span!("i_send").entered();
        let n = self
            .rules()
            .point::<T, _>(OP, "destination", buf, dest, tag)?;
        let staging = self.stage::<T>(OP, Start::PointToPoint, [Some(n), None])?;
        self.raw_i_send(OP, scope, buf, dest, tag, n, staging)
    }

    fn i_recv<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut Self::Buf<T>,
        source: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_recv";
        let _span = tracing::trace_span!("i_recv").entered();
        let n = self.rules().point::<T, _>(OP, "source", buf, source, tag)?;
        let staging = self.stage::<T>(OP, Start::PointToPoint, [Some(n), None])?;
        self.raw_i_recv(OP, scope, buf, source, tag, n, staging)
    }
}
