//! What a backend implements: raw, already-checked operations and the few facts the front end
//! needs of it.

use super::plan::{replay, PlanCall};
use crate::comm::Tag;
use crate::element::Element;
use crate::error::Result;
use crate::memory::Space;
use crate::op::{BackendKind, ReduceOp};
use crate::operation::OpKind;
use crate::persistent::PlanOp;
use crate::record;
use crate::request::{Request, Scope};
use crate::rules::Rules;
use crate::transport::Transport;

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

/// What backend `B` reads for elements `T`.
pub type RawBuf<'b, B, T> = <<B as Backend>::Memory as Space>::Buf<'b, T>;
/// What backend `B` writes for elements `T`.
pub type RawBufMut<'b, B, T> = <<B as Backend>::Memory as Space>::BufMut<'b, T>;

/// A backend: raw, already-checked operations and what the front end needs to know of it.
///
/// Each raw operation is called only after the rules for its operation passed on this rank (and, in
/// checked mode, on every rank): buffer lengths fit the collective, ranks and tags are in range, the
/// reduce operation is valid for the element on this backend, counts fit the backend's limit and
/// buffers are on the communicator's device. `op` is the operation's name for errors. Counts `n`
/// are in elements, as the rules returned them.
pub trait Backend: Sized {
    /// Where this backend's buffers live; [`RawBuf<Self, T>`](RawBuf) is its buffer type.
    type Memory: Space;
    /// What a call holds from before the agreement until its raw operation (or its completion):
    /// pinned host buffers where the backend stages through host memory, else nothing.
    type Staging<'c, T: Element>: Default
    where
        Self: 'c;

    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// This rank and the number of ranks.
    fn ranks(&self) -> (usize, usize);
    /// The rules' parameters for this communicator.
    fn rules(&self) -> Rules;
    /// The MPI communicator over the same ranks that checked mode's agreement goes through (the
    /// communicator itself on host MPI); its checked-mode flag (`with_checked`,
    /// `COLLECTIVES_CHECK`) says whether this backend, unwrapped, agrees.
    fn transport(&self) -> &dyn Transport;
    /// Whether the backend reduces `Avg` itself; otherwise the front end sums and calls
    /// [`divide`](Self::divide).
    fn native_avg(&self) -> bool;
    /// Divide every element of `buf` by the number of ranks (the second half of `Avg`); called
    /// only where [`native_avg`](Self::native_avg) is false.
    fn divide<T: Element>(&self, _op: &'static str, _buf: &mut RawBufMut<Self, T>) -> Result<()> {
        Ok(())
    }
    /// What the per-call record ([`crate::record`]) says of a call of `op` (in any form) started
    /// as `start`, whose largest buffer on this rank holds `bytes` bytes: the path (algorithm)
    /// the backend takes. By default the library's own operation on the caller's buffers
    /// ([`record::Path::NATIVE`]).
    fn record_path(&self, _op: OpKind, _start: Start, _bytes: usize) -> record::Path {
        record::Path::NATIVE
    }
    /// The stream on which the per-call record times this backend's calls with CUDA events:
    /// backends whose operations only enqueue work on a stream. By default none.
    fn record_stream(&self) -> record::Stream {
        None
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
        buf: &mut RawBufMut<Self, T>,
        root: usize,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `reduce` of `n` elements; `recv` is there on the root only.
    #[allow(clippy::too_many_arguments)]
    fn raw_reduce<T: Element>(
        &self,
        op: &'static str,
        send: &RawBuf<Self, T>,
        recv: Option<&mut RawBufMut<Self, T>>,
        red: ReduceOp,
        root: usize,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `all_reduce` of `n` elements, in place on `recv` when `send` is `None`.
    fn raw_all_reduce<T: Element>(
        &self,
        op: &'static str,
        send: Option<&RawBuf<Self, T>>,
        recv: &mut RawBufMut<Self, T>,
        red: ReduceOp,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `all_gather` of blocks of `n` elements.
    fn raw_all_gather<T: Element>(
        &self,
        op: &'static str,
        send: &RawBuf<Self, T>,
        recv: &mut RawBufMut<Self, T>,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `all_gather_v`.
    fn raw_all_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &RawBuf<Self, T>,
        recv: &mut RawBufMut<Self, T>,
        counts: &[usize],
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `gather` of blocks of `n` elements; `recv` is there on the root only.
    fn raw_gather<T: Element>(
        &self,
        op: &'static str,
        send: &RawBuf<Self, T>,
        recv: Option<&mut RawBufMut<Self, T>>,
        root: usize,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `gather_v`; `recv` is there on the root only.
    fn raw_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &RawBuf<Self, T>,
        recv: Option<&mut RawBufMut<Self, T>>,
        counts: &[usize],
        root: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `scatter` of blocks of `n` elements; `send` is there on the root only.
    fn raw_scatter<T: Element>(
        &self,
        op: &'static str,
        send: Option<&RawBuf<Self, T>>,
        recv: &mut RawBufMut<Self, T>,
        root: usize,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `scatter_v`; `send` is there on the root only.
    fn raw_scatter_v<T: Element>(
        &self,
        op: &'static str,
        send: Option<&RawBuf<Self, T>>,
        recv: &mut RawBufMut<Self, T>,
        counts: &[usize],
        root: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `reduce_scatter` into blocks of `n` elements.
    fn raw_reduce_scatter<T: Element>(
        &self,
        op: &'static str,
        send: &RawBuf<Self, T>,
        recv: &mut RawBufMut<Self, T>,
        red: ReduceOp,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `all_to_all` of blocks of `n` elements.
    fn raw_all_to_all<T: Element>(
        &self,
        op: &'static str,
        send: &RawBuf<Self, T>,
        recv: &mut RawBufMut<Self, T>,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `all_to_all_v`.
    fn raw_all_to_all_v<T: Element>(
        &self,
        op: &'static str,
        send: &RawBuf<Self, T>,
        send_counts: &[usize],
        recv: &mut RawBufMut<Self, T>,
        recv_counts: &[usize],
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `send` of `n` elements.
    fn raw_send<T: Element>(
        &self,
        op: &'static str,
        buf: &RawBuf<Self, T>,
        dest: usize,
        tag: Tag,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// `recv` of exactly `n` elements.
    fn raw_recv<T: Element>(
        &self,
        op: &'static str,
        buf: &mut RawBufMut<Self, T>,
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
        send: &RawBuf<Self, T>,
        dest: usize,
        recv: &mut RawBufMut<Self, T>,
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
        send: &'s RawBuf<'s, Self, T>,
        recv: &'s mut RawBufMut<'s, Self, T>,
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
        buf: &'s mut RawBufMut<'s, Self, T>,
        root: usize,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start an `all_gather` of blocks of `n` elements.
    fn raw_i_all_gather<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s RawBuf<'s, Self, T>,
        recv: &'s mut RawBufMut<'s, Self, T>,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `send` of `n` elements.
    #[allow(clippy::too_many_arguments)]
    fn raw_i_send<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s RawBuf<'s, Self, T>,
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
        buf: &'s mut RawBufMut<'s, Self, T>,
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
        send: &'s RawBuf<'s, Self, T>,
        recv: Option<&'s mut RawBufMut<'s, Self, T>>,
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
        buf: &'s mut RawBufMut<'s, Self, T>,
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
        send: &'s RawBuf<'s, Self, T>,
        recv: &'s mut RawBufMut<'s, Self, T>,
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
        send: &'s RawBuf<'s, Self, T>,
        recv: &'s mut RawBufMut<'s, Self, T>,
        n: usize,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start an `all_to_all_v`.
    #[allow(clippy::too_many_arguments)]
    fn raw_i_all_to_all_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s RawBuf<'s, Self, T>,
        send_counts: &[usize],
        recv: &'s mut RawBufMut<'s, Self, T>,
        recv_counts: &[usize],
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start an `all_gather_v`.
    fn raw_i_all_gather_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s RawBuf<'s, Self, T>,
        recv: &'s mut RawBufMut<'s, Self, T>,
        counts: &[usize],
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// Start a `gather` of blocks of `n` elements (`recv` on the root only).
    #[allow(clippy::too_many_arguments)]
    fn raw_i_gather<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s RawBuf<'s, Self, T>,
        recv: Option<&'s mut RawBufMut<'s, Self, T>>,
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
        send: &'s RawBuf<'s, Self, T>,
        recv: Option<&'s mut RawBufMut<'s, Self, T>>,
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
        send: Option<&'s RawBuf<'s, Self, T>>,
        recv: &'s mut RawBufMut<'s, Self, T>,
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
        send: Option<&'s RawBuf<'s, Self, T>>,
        recv: &'s mut RawBufMut<'s, Self, T>,
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
        send: &'s RawBuf<'s, Self, T>,
        dest: usize,
        recv: &'s mut RawBufMut<'s, Self, T>,
        source: usize,
        tag: Tag,
        counts: (usize, usize),
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;

    /// Make the persistent plan of `call` (checked, and agreed in checked mode), whose runs
    /// complete before `'s` ends. By default each start issues the non-blocking raw operation
    /// ([`replay`]); backends override this where they have a persistent form.
    fn raw_init<'s, T: Element>(
        &'s self,
        _op: &'static str,
        scope: &'s Scope<'s, '_>,
        call: PlanCall<'s, Self, T>,
    ) -> Result<Box<dyn PlanOp + 's>> {
        Ok(replay(self, scope, call))
    }
}
