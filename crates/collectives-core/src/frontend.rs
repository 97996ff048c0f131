//! The front end: every operation of every backend goes through here, once.
//!
//! [`Backend`] is what a backend implements: raw operations whose arguments the front end has already
//! checked, and the few facts the front end needs (rank, size, rules, the MPI communicator that
//! carries the agreement, how `Avg` is done, pinned host buffers). [`Frontend`] is checked mode's
//! policy over a backend: every backend is one (agreeing when its checked-mode flag is on), and so
//! is the wrapper [`Checked`] (always agreeing). Every `Frontend` is a [`Communicator`] through the
//! one implementation below, which for each operation:
//!
//! 1. opens a tracing span named after the operation;
//! 2. checks the arguments against the rules table ([`crate::rules`]) with the backend's parameters
//!    (count limit, tag bound, device), in the same order on every backend;
//! 3. takes what the call must hold before the ranks agree (the staged backends' pinned host
//!    buffers: a rank that cannot get them fails in the agreement, not alone afterwards);
//! 4. in checked mode, agrees with the other ranks on the call ([`Frontend::agree`], the one
//!    agreement of [`crate::checked`]);
//! 5. makes the backend's raw operation ([`Frontend::raw`]);
//! 6. finishes `Avg` where the backend reduces with a sum (divides by the number of ranks).
//!
//! Persistent plans (`*_init`) run steps 1 to 4 once, when the plan is made, and hand the checked
//! call to [`Backend::raw_init`] as a [`PlanCall`]: by default a plan that issues the backend's
//! non-blocking raw operation at each start ([`replay`]); a backend with something better (MPI's
//! persistent collectives, a CUDA graph) overrides it.
//!
//! [`Backend`] and [`Frontend`] are `pub` inside this private module: nothing outside the crate can
//! name them, so no one else can call a raw operation with unchecked arguments or implement them,
//! while the blanket implementation of the public [`Communicator`] trait can use them.
//!
//! Errors are mapped where they arise: the rules and the agreement return this crate's
//! [`Error`](crate::Error) values, the raw operations turn their library's codes into them.

use crate::checked::{self, Call, Checked, OpKind};
use crate::comm::{Communicator, Tag};
use crate::element::Element;
use crate::error::Result;
use crate::memory::{Buffer, Space};
use crate::op::{BackendKind, ReduceOp};
use crate::persistent::{Persistent, PlanPath};
use crate::record::{self, Form};
use crate::request::{Pending, Request, Scope};
use crate::rules::Rules;
use crate::transport::Transport;
use std::ops::Deref;
use std::ptr::NonNull;

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
    /// What the per-call record ([`crate::record`]) says of a call of `op` (its plain name:
    /// `all_reduce` for `all_reduce`, `i_all_reduce` and `all_reduce_init`) started as `start`,
    /// whose largest buffer on this rank holds `bytes` bytes: the path the backend takes. By
    /// default the library's own operation on the caller's buffers ([`record::Path::NATIVE`]).
    fn record_path(&self, _op: &'static str, _start: Start, _bytes: usize) -> record::Path {
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
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        call: PlanCall<'s, Self, T>,
    ) -> Result<Box<dyn PlanOp + 's>> {
        Ok(replay(self, op, scope, call))
    }
}

/// Checked mode's policy: which backend a communicator's raw operations go to, and whether (and
/// how) the ranks agree on each call before it.
///
/// Two implementations, and only these: every [`Backend`] is its own front end and agrees when
/// its checked-mode flag is on (`with_checked`, else `COLLECTIVES_CHECK`, else debug builds), and
/// [`Checked<F>`] always agrees. [`Communicator`] is implemented once, for every `Frontend`; it
/// calls the raw operations on [`raw`](Self::raw), so the wrapper delegates none of them.
pub trait Frontend: Sized {
    /// The backend whose raw operations make the calls.
    type Raw: Backend;
    /// That backend.
    fn raw(&self) -> &Self::Raw;
    /// A communicator of this kind around `raw`, a communicator made from this one (`split`,
    /// `dup`): a checked communicator makes checked ones.
    fn wrap(raw: Self::Raw) -> Self;
    /// Whether the ranks agree on each collective before it is made.
    fn is_checked(&self) -> bool;
    /// Checked mode's agreement on `call` when [`is_checked`](Self::is_checked), else only the
    /// local result: see [`checked::agree`] and [`checked::pass`].
    fn agree<R>(&self, call: Call<'_>, local: Result<R>) -> Result<R>;
}

impl<B: Backend> Frontend for B {
    type Raw = B;

    fn raw(&self) -> &B {
        self
    }

    fn wrap(raw: B) -> B {
        raw
    }

    fn is_checked(&self) -> bool {
        self.transport().checked_by_flag()
    }

    fn agree<R>(&self, call: Call<'_>, local: Result<R>) -> Result<R> {
        let mpi = self.transport();
        if mpi.checked_by_flag() {
            checked::agree(mpi, call, local)
        } else {
            checked::pass(mpi, call, local)
        }
    }
}

/// The wrapper agrees on every collective, once: where the communicator it wraps agrees already
/// (its flag is on, or it is a `Checked` itself), through that one's agreement; else through its
/// own over the backend's transport. Two layers never make two agreements, so ranks whose layers
/// differ only in that (a `Checked` around a communicator whose flag differs between ranks) still
/// make the same calls.
impl<F: Frontend> Frontend for Checked<F> {
    type Raw = F::Raw;

    fn raw(&self) -> &F::Raw {
        self.inner().raw()
    }

    fn wrap(raw: F::Raw) -> Self {
        Checked::new(F::wrap(raw))
    }

    fn is_checked(&self) -> bool {
        true
    }

    fn agree<R>(&self, call: Call<'_>, local: Result<R>) -> Result<R> {
        if self.inner().is_checked() {
            self.inner().agree(call, local)
        } else {
            checked::agree(self.raw().transport(), call, local)
        }
    }
}

/// A backend's buffer type for elements `T`, as the front end `F` names it.
type Buf<'b, F, T> = RawBuf<'b, <F as Frontend>::Raw, T>;
/// What front end `F`'s backend writes for elements `T`.
type BufMut<'b, F, T> = RawBufMut<'b, <F as Frontend>::Raw, T>;
/// What a call of front end `F` holds from before the agreement until its raw operation.
type Staging<'c, F, T> = <<F as Frontend>::Raw as Backend>::Staging<'c, T>;

/// A persistent collective as a backend gets it: checked counts, and the buffers the plan borrows
/// for its life. `red` is the operation the backend runs (`Sum` for an `Avg` it does not do
/// natively) and `average` whether each completion divides by the number of ranks.
#[allow(missing_docs)] // the fields are the collectives' arguments, as in the raw operations
pub enum PlanCall<'s, B: Backend, T: Element> {
    Barrier,
    Broadcast {
        buf: BufPtr<RawBufMut<'s, B, T>>,
        root: usize,
        n: usize,
    },
    Reduce {
        send: BufPtr<RawBufMut<'s, B, T>>,
        recv: Option<BufPtr<RawBufMut<'s, B, T>>>,
        red: ReduceOp,
        average: bool,
        root: usize,
        n: usize,
    },
    /// In place on `recv` when `send` is `None`.
    AllReduce {
        send: Option<BufPtr<RawBufMut<'s, B, T>>>,
        recv: BufPtr<RawBufMut<'s, B, T>>,
        red: ReduceOp,
        average: bool,
        n: usize,
    },
    AllGather {
        send: BufPtr<RawBufMut<'s, B, T>>,
        recv: BufPtr<RawBufMut<'s, B, T>>,
        n: usize,
    },
    AllGatherV {
        send: BufPtr<RawBufMut<'s, B, T>>,
        recv: BufPtr<RawBufMut<'s, B, T>>,
        counts: Vec<usize>,
    },
    Gather {
        send: BufPtr<RawBufMut<'s, B, T>>,
        recv: Option<BufPtr<RawBufMut<'s, B, T>>>,
        root: usize,
        n: usize,
    },
    GatherV {
        send: BufPtr<RawBufMut<'s, B, T>>,
        recv: Option<BufPtr<RawBufMut<'s, B, T>>>,
        counts: Vec<usize>,
        root: usize,
    },
    Scatter {
        send: Option<BufPtr<RawBufMut<'s, B, T>>>,
        recv: BufPtr<RawBufMut<'s, B, T>>,
        root: usize,
        n: usize,
    },
    ScatterV {
        send: Option<BufPtr<RawBufMut<'s, B, T>>>,
        recv: BufPtr<RawBufMut<'s, B, T>>,
        counts: Vec<usize>,
        root: usize,
    },
    ReduceScatter {
        send: BufPtr<RawBufMut<'s, B, T>>,
        recv: BufPtr<RawBufMut<'s, B, T>>,
        red: ReduceOp,
        average: bool,
        n: usize,
    },
    AllToAll {
        send: BufPtr<RawBufMut<'s, B, T>>,
        recv: BufPtr<RawBufMut<'s, B, T>>,
        n: usize,
    },
    AllToAllV {
        send: BufPtr<RawBufMut<'s, B, T>>,
        send_counts: Vec<usize>,
        recv: BufPtr<RawBufMut<'s, B, T>>,
        recv_counts: Vec<usize>,
    },
}

impl<B: Backend, T: Element> std::fmt::Debug for PlanCall<'_, B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            PlanCall::Barrier => "Barrier",
            PlanCall::Broadcast { .. } => "Broadcast",
            PlanCall::Reduce { .. } => "Reduce",
            PlanCall::AllReduce { .. } => "AllReduce",
            PlanCall::AllGather { .. } => "AllGather",
            PlanCall::AllGatherV { .. } => "AllGatherV",
            PlanCall::Gather { .. } => "Gather",
            PlanCall::GatherV { .. } => "GatherV",
            PlanCall::Scatter { .. } => "Scatter",
            PlanCall::ScatterV { .. } => "ScatterV",
            PlanCall::ReduceScatter { .. } => "ReduceScatter",
            PlanCall::AllToAll { .. } => "AllToAll",
            PlanCall::AllToAllV { .. } => "AllToAllV",
        };
        f.write_str(name)
    }
}

/// A buffer borrowed for `'s` as one of lifetime `'s` (what requests and plans keep).
fn keep<'s, 'b, F: Frontend, T: Element>(buf: &'s Buf<'b, F, T>) -> &'s Buf<'s, F, T>
where
    Buf<'b, F, T>: 's,
{
    <<F::Raw as Backend>::Memory as Space>::shorten(buf)
}

/// A writable buffer borrowed for `'s` as one of lifetime `'s`.
fn keep_mut<'s, 'b, F: Frontend, T: Element>(
    buf: &'s mut BufMut<'b, F, T>,
) -> &'s mut BufMut<'s, F, T>
where
    BufMut<'b, F, T>: 's,
{
    <<F::Raw as Backend>::Memory as Space>::shorten_mut(buf)
}

/// The default persistent plan: each start issues the backend's non-blocking raw operation on the
/// plan's buffers (with fresh staging), and completes it through the request path, deadline and
/// `Avg` finishing included.
pub(crate) fn replay<'s, 'e, B: Backend, T: Element>(
    comm: &'s B,
    op: &'static str,
    scope: &'s Scope<'s, 'e>,
    call: PlanCall<'s, B, T>,
) -> Box<dyn PlanOp + 's> {
    Box::new(Replay {
        comm,
        op,
        scope,
        call,
        pending: None,
    })
}

struct Replay<'s, 'e, B: Backend, T: Element> {
    comm: &'s B,
    op: &'static str,
    scope: &'s Scope<'s, 'e>,
    call: PlanCall<'s, B, T>,
    /// The run in flight, taken out of the scope: the plan's own slot in the same scope completes
    /// it before `'s` ends if nothing else does.
    pending: Option<Box<dyn Pending + 's>>,
}

/// A writable buffer, to read: a plan's send buffer (a plan borrows its send buffers mutably, as
/// the caller changes them between runs).
fn read_of<'a, 's, B: Backend, T: Element>(buf: &'a RawBufMut<'s, B, T>) -> &'a RawBuf<'s, B, T> {
    <B::Memory as Space>::read(buf)
}

fn len_of<'s, B: Backend, T: Element>(p: &BufPtr<RawBufMut<'s, B, T>>) -> usize {
    // SAFETY: the plan borrows the buffer for 's and no run is in flight while a run is being
    // started, so nothing writes it; the reference ends here.
    unsafe { p.get() }.len()
}

impl<'s, B: Backend, T: Element> PlanOp for Replay<'s, '_, B, T> {
    fn start(&mut self) -> Result<()> {
        let (b, op, s) = (self.comm, self.op, self.scope);
        let stage = |lens| b.stage::<T>(op, Start::Collective, lens);
        let len = len_of::<B, T>;
        let opt = |p: &Option<BufPtr<RawBufMut<'s, B, T>>>| p.as_ref().map(len);
        // SAFETY: (every `get`/`get_mut` below) the plan borrows each buffer mutably for 's; the
        // front end starts a run only when the previous one is complete, and between runs the
        // caller reaches the buffers only through the plan, which it cannot do while this call
        // borrows it. The references made here go to the one run in flight, which completes
        // before 's ends (by `wait`, or by the plan's slot in this scope), so they are the only
        // ones in use until then.
        let request = unsafe {
            match &self.call {
                PlanCall::Barrier => b.raw_i_barrier(op, s),
                PlanCall::Broadcast { buf, root, n } => {
                    let st = stage([Some(len(buf)), None])?;
                    b.raw_i_broadcast(op, s, buf.get_mut(), *root, *n, st)
                }
                PlanCall::Reduce {
                    send,
                    recv,
                    red,
                    average,
                    root,
                    n,
                } => {
                    let st = stage([Some(len(send)), opt(recv)])?;
                    let recv = recv.map(|r| r.get_mut());
                    b.raw_i_reduce(
                        op,
                        s,
                        read_of::<B, T>(send.get()),
                        recv,
                        *red,
                        *average,
                        *root,
                        *n,
                        st,
                    )
                }
                PlanCall::AllReduce {
                    send: Some(send),
                    recv,
                    red,
                    average,
                    n,
                } => {
                    let st = stage(lens2(len(send), len(recv)))?;
                    b.raw_i_all_reduce(
                        op,
                        s,
                        read_of::<B, T>(send.get()),
                        recv.get_mut(),
                        *red,
                        *average,
                        *n,
                        st,
                    )
                }
                PlanCall::AllReduce {
                    send: None,
                    recv,
                    red,
                    average,
                    n,
                } => {
                    let st = stage([Some(len(recv)), None])?;
                    b.raw_i_all_reduce_in_place(op, s, recv.get_mut(), *red, *average, *n, st)
                }
                PlanCall::AllGather { send, recv, n } => {
                    let st = stage(lens2(len(send), len(recv)))?;
                    b.raw_i_all_gather(op, s, read_of::<B, T>(send.get()), recv.get_mut(), *n, st)
                }
                PlanCall::AllGatherV { send, recv, counts } => {
                    let st = stage(lens2(len(send), len(recv)))?;
                    b.raw_i_all_gather_v(
                        op,
                        s,
                        read_of::<B, T>(send.get()),
                        recv.get_mut(),
                        counts,
                        st,
                    )
                }
                PlanCall::Gather {
                    send,
                    recv,
                    root,
                    n,
                } => {
                    let st = stage([Some(len(send)), opt(recv)])?;
                    let recv = recv.map(|r| r.get_mut());
                    b.raw_i_gather(op, s, read_of::<B, T>(send.get()), recv, *root, *n, st)
                }
                PlanCall::GatherV {
                    send,
                    recv,
                    counts,
                    root,
                } => {
                    let st = stage([Some(len(send)), opt(recv)])?;
                    let recv = recv.map(|r| r.get_mut());
                    b.raw_i_gather_v(op, s, read_of::<B, T>(send.get()), recv, counts, *root, st)
                }
                PlanCall::Scatter {
                    send,
                    recv,
                    root,
                    n,
                } => {
                    let st = stage([opt(send), Some(len(recv))])?;
                    let send = send.map(|p| read_of::<B, T>(p.get()));
                    b.raw_i_scatter(op, s, send, recv.get_mut(), *root, *n, st)
                }
                PlanCall::ScatterV {
                    send,
                    recv,
                    counts,
                    root,
                } => {
                    let st = stage([opt(send), Some(len(recv))])?;
                    let send = send.map(|p| read_of::<B, T>(p.get()));
                    b.raw_i_scatter_v(op, s, send, recv.get_mut(), counts, *root, st)
                }
                PlanCall::ReduceScatter {
                    send,
                    recv,
                    red,
                    average,
                    n,
                } => {
                    let st = stage(lens2(len(send), len(recv)))?;
                    let (send, recv) = (read_of::<B, T>(send.get()), recv.get_mut());
                    b.raw_i_reduce_scatter(op, s, send, recv, *red, *average, *n, st)
                }
                PlanCall::AllToAll { send, recv, n } => {
                    let st = stage(lens2(len(send), len(recv)))?;
                    b.raw_i_all_to_all(op, s, read_of::<B, T>(send.get()), recv.get_mut(), *n, st)
                }
                PlanCall::AllToAllV {
                    send,
                    send_counts,
                    recv,
                    recv_counts,
                } => {
                    let st = stage(lens2(len(send), len(recv)))?;
                    let (send, recv) = (read_of::<B, T>(send.get()), recv.get_mut());
                    b.raw_i_all_to_all_v(op, s, send, send_counts, recv, recv_counts, st)
                }
            }
        }?;
        self.pending = request.detach();
        Ok(())
    }

    fn wait(&mut self) -> Result<()> {
        match self.pending.take() {
            Some(mut p) => p.wait(),
            None => Ok(()),
        }
    }

    fn test(&mut self) -> Result<bool> {
        let Some(p) = self.pending.as_mut() else {
            return Ok(true);
        };
        match p.test() {
            Ok(false) => Ok(false),
            done => {
                self.pending = None;
                done
            }
        }
    }

    fn path(&self) -> PlanPath {
        PlanPath::Replay
    }
}

/// Make the backend's plan for `call` and hand it to `scope`, with the buffers the caller may reach
/// between runs.
fn plan<'s, F: Frontend, T: Element>(
    f: &'s F,
    op: &'static str,
    scope: &'s Scope<'s, '_>,
    call: PlanCall<'s, F::Raw, T>,
    send: Option<BufPtr<BufMut<'s, F, T>>>,
    recv: Option<BufPtr<BufMut<'s, F, T>>>,
) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
    let b = f.raw();
    let bytes = plan_bytes::<F::Raw, T>(&call);
    let kind = plan_kind(&call);
    let raw = agree_init(f, op, kind, b.raw_init(op, scope, call))?;
    let rec = plan_record(b, op, bytes);
    Ok(Persistent::new(scope, op, raw, send, recv, rec))
}

/// In checked mode, agree on the outcome of the library's own init (`MPIX_*_init`, a graph
/// capture): a rank whose library refused the plan returns its error and the others
/// [`Error::PeerInvalid`](crate::Error::PeerInvalid) naming it, instead of their `start` waiting
/// for a rank that has no plan. Unchecked, only this rank's result.
fn agree_init<F: Frontend, R>(f: &F, op: &'static str, kind: OpKind, made: Result<R>) -> Result<R> {
    let made = made.and_then(|raw| crate::persistent::test_hook::refuse(op).map(|()| raw));
    f.agree(Call::new(kind), made)
}

/// The agreement's name of a plan's collective.
fn plan_kind<B: Backend, T: Element>(call: &PlanCall<'_, B, T>) -> OpKind {
    match call {
        PlanCall::Barrier => OpKind::Barrier,
        PlanCall::Broadcast { .. } => OpKind::Broadcast,
        PlanCall::Reduce { .. } => OpKind::Reduce,
        PlanCall::AllReduce { send: Some(_), .. } => OpKind::AllReduce,
        PlanCall::AllReduce { send: None, .. } => OpKind::AllReduceInPlace,
        PlanCall::AllGather { .. } => OpKind::AllGather,
        PlanCall::AllGatherV { .. } => OpKind::AllGatherV,
        PlanCall::Gather { .. } => OpKind::Gather,
        PlanCall::GatherV { .. } => OpKind::GatherV,
        PlanCall::Scatter { .. } => OpKind::Scatter,
        PlanCall::ScatterV { .. } => OpKind::ScatterV,
        PlanCall::ReduceScatter { .. } => OpKind::ReduceScatter,
        PlanCall::AllToAll { .. } => OpKind::AllToAll,
        PlanCall::AllToAllV { .. } => OpKind::AllToAllV,
    }
}

/// What a plan's starts say in the per-call record, when recording is on.
fn plan_record<B: Backend>(b: &B, op: &'static str, bytes: usize) -> Option<record::PlanRecord> {
    record::enabled().then(|| record::PlanRecord {
        backend: b.kind(),
        bytes,
        staged: b
            .record_path(record::base(op), Start::Collective, bytes)
            .staged,
        stream: b.record_stream(),
    })
}

/// The largest buffer of a plan on this rank, in bytes.
fn plan_bytes<'s, B: Backend, T: Element>(call: &PlanCall<'s, B, T>) -> usize {
    let len = |p: &BufPtr<RawBufMut<'s, B, T>>| Some(len_of::<B, T>(p));
    let opt = |p: &Option<BufPtr<RawBufMut<'s, B, T>>>| p.as_ref().map(len_of::<B, T>);
    let lens = match call {
        PlanCall::Barrier => [None, None],
        PlanCall::Broadcast { buf, .. } => [len(buf), None],
        PlanCall::Reduce { send, recv, .. } | PlanCall::Gather { send, recv, .. } => {
            [len(send), opt(recv)]
        }
        PlanCall::GatherV { send, recv, .. } => [len(send), opt(recv)],
        PlanCall::AllReduce { send, recv, .. } => [opt(send), len(recv)],
        PlanCall::Scatter { send, recv, .. } | PlanCall::ScatterV { send, recv, .. } => {
            [opt(send), len(recv)]
        }
        PlanCall::AllGather { send, recv, .. }
        | PlanCall::AllGatherV { send, recv, .. }
        | PlanCall::ReduceScatter { send, recv, .. }
        | PlanCall::AllToAll { send, recv, .. }
        | PlanCall::AllToAllV { send, recv, .. } => [len(send), len(recv)],
    };
    bytes_of::<T>(&lens)
}

/// The largest of a call's buffers on this rank (`None`: absent here), in bytes.
fn bytes_of<T: Element>(lens: &[Option<usize>]) -> usize {
    let most = lens.iter().flatten().copied().max().unwrap_or(0);
    most.saturating_mul(std::mem::size_of::<T>())
}

/// Call `f` once: the body of a recorded method, as a closure that may hand out the borrows it
/// was given.
fn once<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// The one hook around the body of every front-end method (whose `OP` names it): enter the
/// tracing span named `OP`, open the per-call record ([`crate::record`]) (when recording is off, one relaxed atomic load; the
/// buffer lengths `[lens]` of elements `T` and the backend's stream are read only when on), run
/// `body` (a `Result`), close the record with the backend's path for the call.
macro_rules! recorded {
    ($b:expr, $form:expr, $start:expr, $t:ty, [$($len:expr),*], $body:block) => {{
        let _span = tracing::trace_span!(OP).entered();
        let b = Frontend::raw($b);
        let span = record::Span::open(|| bytes_of::<$t>(&[$($len),*]), || b.record_stream());
        let result = once(move || -> Result<_> { $body });
        span.close(result.is_ok(), OP, $form, b.kind(), |bytes| {
            b.record_path(record::base(OP), $start, bytes)
        });
        result
    }};
}

/// A plan as a backend implements it: issue one run, complete it.
///
/// The front end calls [`start`](Self::start) only while no run is in flight, and
/// [`wait`](Self::wait)/[`test`](Self::test) only while one is; it tracks which.
pub trait PlanOp {
    /// Issue one run on the plan's buffers.
    fn start(&mut self) -> Result<()>;
    /// Block until the run in flight is complete, finishing step (the division of `Avg`) included.
    fn wait(&mut self) -> Result<()>;
    /// Whether the run in flight is complete (finishing step done when it says so), without blocking.
    fn test(&mut self) -> Result<bool>;
    /// How the plan runs.
    fn path(&self) -> PlanPath;
}

/// A buffer a plan borrows for `'s`, by address, so that it can be handed out again for each run
/// and to the caller between runs.
pub struct BufPtr<X: ?Sized>(NonNull<X>);

impl<X: ?Sized> std::fmt::Debug for BufPtr<X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BufPtr({:p})", self.0)
    }
}

impl<X: ?Sized> Clone for BufPtr<X> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<X: ?Sized> Copy for BufPtr<X> {}

impl<X: ?Sized> BufPtr<X> {
    /// A buffer the plan borrows mutably for its life (a send buffer is only read by the runs, but
    /// the caller changes it between them).
    pub fn new(buf: &mut X) -> Self {
        BufPtr(NonNull::from(buf))
    }

    /// The buffer, to read.
    ///
    /// # Safety
    /// The buffer is still borrowed by the plan (`'a` does not outlast that borrow), and nothing
    /// writes it while the reference lives.
    pub unsafe fn get<'a>(self) -> &'a X {
        // SAFETY: the caller's promise; the pointer came from a reference.
        unsafe { self.0.as_ref() }
    }

    /// The buffer, to write.
    ///
    /// # Safety
    /// The buffer is still borrowed by the plan (`'a` does
    /// not outlast that borrow), and nothing else reads or writes it while the reference lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_mut<'a>(self) -> &'a mut X {
        let mut p = self.0;
        // SAFETY: the caller's promise; the pointer came from a mutable reference.
        unsafe { p.as_mut() }
    }
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
fn prepare_all_reduce<'c, F: Frontend, T: Element>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: &Buf<F, T>,
    recv: &BufMut<F, T>,
    op: ReduceOp,
) -> Result<(usize, Staging<'c, F, T>)> {
    let local = f.raw().rules().all_reduce::<T, _, _>(name, send, recv, op);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |_| {
        lens2(send.len(), recv.len())
    });
    let call = Call::new(OpKind::AllReduce)
        .element::<T>()
        .reduce(op)
        .count(send.len());
    f.agree(call, local)
}

/// `all_reduce_in_place`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_all_reduce_in_place<'c, F: Frontend, T: Element>(
    f: &'c F,
    name: &'static str,
    start: Start,
    buf: &BufMut<F, T>,
    op: ReduceOp,
) -> Result<(usize, Staging<'c, F, T>)> {
    let local = f.raw().rules().all_reduce_in_place::<T, _>(name, buf, op);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |_| [Some(buf.len()), None]);
    let call = Call::new(OpKind::AllReduceInPlace)
        .element::<T>()
        .reduce(op)
        .count(buf.len());
    f.agree(call, local)
}

/// `all_gather`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_all_gather<'c, F: Frontend, T: Element>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: &Buf<F, T>,
    recv: &BufMut<F, T>,
) -> Result<(usize, Staging<'c, F, T>)> {
    let local = f.raw().rules().all_gather::<T, _, _>(name, send, recv);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |_| {
        lens2(send.len(), recv.len())
    });
    let call = Call::new(OpKind::AllGather)
        .element::<T>()
        .count(send.len());
    f.agree(call, local)
}

/// `reduce_scatter`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_reduce_scatter<'c, F: Frontend, T: Element>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: &Buf<F, T>,
    recv: &BufMut<F, T>,
    op: ReduceOp,
) -> Result<(usize, Staging<'c, F, T>)> {
    let local = f
        .raw()
        .rules()
        .reduce_scatter::<T, _, _>(name, send, recv, op);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |_| {
        lens2(send.len(), recv.len())
    });
    let call = Call::new(OpKind::ReduceScatter)
        .element::<T>()
        .reduce(op)
        .count(recv.len());
    f.agree(call, local)
}

/// `all_to_all`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_all_to_all<'c, F: Frontend, T: Element>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: &Buf<F, T>,
    recv: &BufMut<F, T>,
) -> Result<(usize, Staging<'c, F, T>)> {
    let local = f.raw().rules().all_to_all::<T, _, _>(name, send, recv);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |_| {
        lens2(send.len(), recv.len())
    });
    let call = Call::new(OpKind::AllToAll).element::<T>().count(send.len());
    f.agree(call, local)
}

/// `broadcast`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_broadcast<'c, F: Frontend, T: Element>(
    f: &'c F,
    name: &'static str,
    start: Start,
    buf: &BufMut<F, T>,
    root: usize,
) -> Result<(usize, Staging<'c, F, T>)> {
    let local = f.raw().rules().broadcast::<T, _>(name, buf, root);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |_| [Some(buf.len()), None]);
    let call = Call::new(OpKind::Broadcast)
        .element::<T>()
        .root(root)
        .count(buf.len());
    f.agree(call, local)
}

/// `all_gather_v`'s rules, staging and agreement, shared by its blocking and non-blocking forms.
fn prepare_all_gather_v<'c, F: Frontend, T: Element>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: &Buf<F, T>,
    recv: &BufMut<F, T>,
    counts: &[usize],
) -> Result<((), Staging<'c, F, T>)> {
    let local = f
        .raw()
        .rules()
        .all_gather_v::<T, _, _>(name, send, recv, counts);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |_| {
        lens2(send.len(), recv.len())
    });
    let call = Call::new(OpKind::AllGatherV).element::<T>().counts(counts);
    f.agree(call, local)
}

/// What a rooted collective's prepare step gives: the count, the root-only buffer on the root, and
/// the staging.
type Rooted<'c, F, T, R> = Result<((usize, Option<R>), Staging<'c, F, T>)>;

/// `reduce`'s rules, staging and agreement, shared by its blocking and non-blocking forms: the
/// count and, on the root, its receive buffer.
fn prepare_reduce<'c, 'b, F: Frontend, T: Element, R: Deref<Target = BufMut<'b, F, T>>>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: &Buf<F, T>,
    recv: Option<R>,
    op: ReduceOp,
    root: usize,
) -> Rooted<'c, F, T, R> {
    let local = f
        .raw()
        .rules()
        .reduce::<T, _, _, _>(name, send, recv, op, root);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |(_, r)| {
        [Some(send.len()), r.as_ref().map(|r| r.len())]
    });
    let call = Call::new(OpKind::Reduce)
        .element::<T>()
        .reduce(op)
        .root(root)
        .count(send.len());
    f.agree(call, local)
}

/// `gather`'s rules, staging and agreement, shared by its blocking and non-blocking forms: the
/// count and, on the root, its receive buffer.
fn prepare_gather<'c, 'b, F: Frontend, T: Element, R: Deref<Target = BufMut<'b, F, T>>>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: &Buf<F, T>,
    recv: Option<R>,
    root: usize,
) -> Rooted<'c, F, T, R> {
    let local = f.raw().rules().gather::<T, _, _, _>(name, send, recv, root);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |(_, r)| {
        [Some(send.len()), r.as_ref().map(|r| r.len())]
    });
    let call = Call::new(OpKind::Gather)
        .element::<T>()
        .root(root)
        .count(send.len());
    f.agree(call, local)
}

/// `scatter`'s rules, staging and agreement, shared by its blocking and non-blocking forms: the
/// count and, on the root, its send buffer.
fn prepare_scatter<'c, F: Frontend, T: Element, X: ?Sized + Buffer<T>, S: Deref<Target = X>>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: Option<S>,
    recv: &BufMut<F, T>,
    root: usize,
) -> Rooted<'c, F, T, S> {
    let local = f
        .raw()
        .rules()
        .scatter::<T, _, _, _>(name, send, recv, root);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |(_, s)| {
        [s.as_ref().map(|s| s.len()), Some(recv.len())]
    });
    let call = Call::new(OpKind::Scatter)
        .element::<T>()
        .root(root)
        .count(recv.len());
    f.agree(call, local)
}

/// `gather_v`'s rules, staging and agreement, shared by its blocking, non-blocking and persistent
/// forms: on the root, its receive buffer.
fn prepare_gather_v<'c, 'b, F: Frontend, T: Element, R: Deref<Target = BufMut<'b, F, T>>>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: &Buf<F, T>,
    recv: Option<R>,
    counts: &[usize],
    root: usize,
) -> Result<(Option<R>, Staging<'c, F, T>)> {
    let local = f
        .raw()
        .rules()
        .gather_v::<T, _, _, _>(name, send, recv, counts, root);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |r| {
        [Some(send.len()), r.as_ref().map(|r| r.len())]
    });
    let call = Call::new(OpKind::GatherV)
        .element::<T>()
        .root(root)
        .counts(counts);
    f.agree(call, local)
}

/// `scatter_v`'s rules, staging and agreement, shared by its blocking, non-blocking and persistent
/// forms: on the root, its send buffer.
fn prepare_scatter_v<'c, F: Frontend, T: Element, X: ?Sized + Buffer<T>, S: Deref<Target = X>>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: Option<S>,
    recv: &BufMut<F, T>,
    counts: &[usize],
    root: usize,
) -> Result<(Option<S>, Staging<'c, F, T>)> {
    let local = f
        .raw()
        .rules()
        .scatter_v::<T, _, _, _>(name, send, recv, counts, root);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |s| {
        [s.as_ref().map(|s| s.len()), Some(recv.len())]
    });
    let call = Call::new(OpKind::ScatterV)
        .element::<T>()
        .root(root)
        .counts(counts);
    f.agree(call, local)
}

/// `all_to_all_v`'s rules, staging and agreement, shared by its blocking, non-blocking and
/// persistent forms.
fn prepare_all_to_all_v<'c, F: Frontend, T: Element>(
    f: &'c F,
    name: &'static str,
    start: Start,
    send: &Buf<F, T>,
    send_counts: &[usize],
    recv: &BufMut<F, T>,
    recv_counts: &[usize],
) -> Result<((), Staging<'c, F, T>)> {
    let local = f
        .raw()
        .rules()
        .all_to_all_v::<T, _, _>(name, send, send_counts, recv, recv_counts);
    let local = staged::<_, T, _>(f.raw(), name, start, local, |_| {
        lens2(send.len(), recv.len())
    });
    let call = Call::new(OpKind::AllToAllV)
        .element::<T>()
        .all_to_all(send_counts, recv_counts);
    f.agree(call, local)
}

impl<F: Frontend> Communicator for F {
    type Memory = <F::Raw as Backend>::Memory;

    fn backend(&self) -> BackendKind {
        self.raw().kind()
    }

    fn rank(&self) -> usize {
        self.raw().ranks().0
    }

    fn size(&self) -> usize {
        self.raw().ranks().1
    }

    fn checked(&self) -> bool {
        self.is_checked()
    }

    fn barrier(&self) -> Result<()> {
        const OP: &str = "barrier";
        recorded!(self, Form::Blocking, Start::Blocking, u8, [], {
            self.agree(Call::new(OpKind::Barrier), Ok(()))?;
            self.raw().raw_barrier(OP)
        })
    }

    fn broadcast<T: Element>(&self, buf: &mut BufMut<F, T>, root: usize) -> Result<()> {
        const OP: &str = "broadcast";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(buf.len())],
            {
                let (n, staging) = prepare_broadcast::<_, T>(self, OP, Start::Blocking, buf, root)?;
                self.raw().raw_broadcast(OP, buf, root, n, staging)
            }
        )
    }

    fn reduce<T: Element>(
        &self,
        send: &Buf<F, T>,
        recv: Option<&mut BufMut<F, T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "reduce";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(send.len()), recv.as_ref().map(|b| b.len())],
            {
                let ((n, mut recv), staging) =
                    prepare_reduce::<_, T, _>(self, OP, Start::Blocking, send, recv, op, root)?;
                let (run, divide) = reduction(self.raw(), op);
                self.raw()
                    .raw_reduce(OP, send, recv.as_deref_mut(), run, root, n, staging)?;
                match recv {
                    Some(recv) if divide => self.raw().divide(OP, recv),
                    _ => Ok(()),
                }
            }
        )
    }

    fn all_reduce<T: Element>(
        &self,
        send: &Buf<F, T>,
        recv: &mut BufMut<F, T>,
        op: ReduceOp,
    ) -> Result<()> {
        const OP: &str = "all_reduce";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, staging) =
                    prepare_all_reduce::<_, T>(self, OP, Start::Blocking, send, recv, op)?;
                let (run, divide) = reduction(self.raw(), op);
                self.raw()
                    .raw_all_reduce(OP, Some(send), recv, run, n, staging)?;
                if divide {
                    self.raw().divide(OP, recv)?;
                }
                Ok(())
            }
        )
    }

    fn all_reduce_in_place<T: Element>(&self, buf: &mut BufMut<F, T>, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce_in_place";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(buf.len())],
            {
                let (n, staging) =
                    prepare_all_reduce_in_place::<_, T>(self, OP, Start::Blocking, buf, op)?;
                let (run, divide) = reduction(self.raw(), op);
                self.raw().raw_all_reduce(OP, None, buf, run, n, staging)?;
                if divide {
                    self.raw().divide(OP, buf)?;
                }
                Ok(())
            }
        )
    }

    fn all_gather<T: Element>(&self, send: &Buf<F, T>, recv: &mut BufMut<F, T>) -> Result<()> {
        const OP: &str = "all_gather";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, staging) =
                    prepare_all_gather::<_, T>(self, OP, Start::Blocking, send, recv)?;
                self.raw().raw_all_gather(OP, send, recv, n, staging)
            }
        )
    }

    fn all_gather_v<T: Element>(
        &self,
        send: &Buf<F, T>,
        recv: &mut BufMut<F, T>,
        counts: &[usize],
    ) -> Result<()> {
        const OP: &str = "all_gather_v";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let ((), staging) =
                    prepare_all_gather_v::<_, T>(self, OP, Start::Blocking, send, recv, counts)?;
                self.raw().raw_all_gather_v(OP, send, recv, counts, staging)
            }
        )
    }

    fn gather<T: Element>(
        &self,
        send: &Buf<F, T>,
        recv: Option<&mut BufMut<F, T>>,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "gather";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(send.len()), recv.as_ref().map(|b| b.len())],
            {
                let ((n, recv), staging) =
                    prepare_gather::<_, T, _>(self, OP, Start::Blocking, send, recv, root)?;
                self.raw().raw_gather(OP, send, recv, root, n, staging)
            }
        )
    }

    fn gather_v<T: Element>(
        &self,
        send: &Buf<F, T>,
        recv: Option<&mut BufMut<F, T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        const OP: &str = "gather_v";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(send.len()), recv.as_ref().map(|b| b.len())],
            {
                let (recv, staging) = prepare_gather_v::<_, T, _>(
                    self,
                    OP,
                    Start::Blocking,
                    send,
                    recv,
                    counts,
                    root,
                )?;
                self.raw()
                    .raw_gather_v(OP, send, recv, counts, root, staging)
            }
        )
    }

    fn scatter<T: Element>(
        &self,
        send: Option<&Buf<F, T>>,
        recv: &mut BufMut<F, T>,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "scatter";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [send.as_ref().map(|b| b.len()), Some(recv.len())],
            {
                let ((n, send), staging) =
                    prepare_scatter::<_, T, _, _>(self, OP, Start::Blocking, send, recv, root)?;
                self.raw().raw_scatter(OP, send, recv, root, n, staging)
            }
        )
    }

    fn scatter_v<T: Element>(
        &self,
        send: Option<&Buf<F, T>>,
        recv: &mut BufMut<F, T>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        const OP: &str = "scatter_v";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [send.as_ref().map(|b| b.len()), Some(recv.len())],
            {
                let (send, staging) = prepare_scatter_v::<_, T, _, _>(
                    self,
                    OP,
                    Start::Blocking,
                    send,
                    recv,
                    counts,
                    root,
                )?;
                self.raw()
                    .raw_scatter_v(OP, send, recv, counts, root, staging)
            }
        )
    }

    fn reduce_scatter<T: Element>(
        &self,
        send: &Buf<F, T>,
        recv: &mut BufMut<F, T>,
        op: ReduceOp,
    ) -> Result<()> {
        const OP: &str = "reduce_scatter";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, staging) =
                    prepare_reduce_scatter::<_, T>(self, OP, Start::Blocking, send, recv, op)?;
                let (run, divide) = reduction(self.raw(), op);
                self.raw()
                    .raw_reduce_scatter(OP, send, recv, run, n, staging)?;
                if divide {
                    self.raw().divide(OP, recv)?;
                }
                Ok(())
            }
        )
    }

    fn all_to_all<T: Element>(&self, send: &Buf<F, T>, recv: &mut BufMut<F, T>) -> Result<()> {
        const OP: &str = "all_to_all";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, staging) =
                    prepare_all_to_all::<_, T>(self, OP, Start::Blocking, send, recv)?;
                self.raw().raw_all_to_all(OP, send, recv, n, staging)
            }
        )
    }

    fn all_to_all_v<T: Element>(
        &self,
        send: &Buf<F, T>,
        send_counts: &[usize],
        recv: &mut BufMut<F, T>,
        recv_counts: &[usize],
    ) -> Result<()> {
        const OP: &str = "all_to_all_v";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let ((), staging) = prepare_all_to_all_v::<_, T>(
                    self,
                    OP,
                    Start::Blocking,
                    send,
                    send_counts,
                    recv,
                    recv_counts,
                )?;
                self.raw()
                    .raw_all_to_all_v(OP, send, send_counts, recv, recv_counts, staging)
            }
        )
    }

    fn send<T: Element>(&self, buf: &Buf<F, T>, dest: usize, tag: Tag) -> Result<()> {
        const OP: &str = "send";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(buf.len())],
            {
                let n = self
                    .raw()
                    .rules()
                    .point::<T, _>(OP, "destination", buf, dest, tag)?;
                let staging = self
                    .raw()
                    .stage::<T>(OP, Start::Blocking, [Some(n), None])?;
                self.raw().raw_send(OP, buf, dest, tag, n, staging)
            }
        )
    }

    fn recv<T: Element>(&self, buf: &mut BufMut<F, T>, source: usize, tag: Tag) -> Result<()> {
        const OP: &str = "recv";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(buf.len())],
            {
                let n = self
                    .raw()
                    .rules()
                    .point::<T, _>(OP, "source", buf, source, tag)?;
                let staging = self
                    .raw()
                    .stage::<T>(OP, Start::Blocking, [Some(n), None])?;
                self.raw().raw_recv(OP, buf, source, tag, n, staging)
            }
        )
    }

    fn send_recv<T: Element>(
        &self,
        send: &Buf<F, T>,
        dest: usize,
        recv: &mut BufMut<F, T>,
        source: usize,
        tag: Tag,
    ) -> Result<()> {
        const OP: &str = "send_recv";
        recorded!(
            self,
            Form::Blocking,
            Start::Blocking,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (sn, rn) = self
                    .raw()
                    .rules()
                    .send_recv::<T, _, _>(OP, send, dest, recv, source, tag)?;
                let staging = self.raw().stage::<T>(OP, Start::Blocking, lens2(sn, rn))?;
                self.raw()
                    .raw_send_recv(OP, send, dest, recv, source, tag, (sn, rn), staging)
            }
        )
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>> {
        const OP: &str = "split";
        recorded!(self, Form::Blocking, Start::Blocking, u8, [], {
            let local = Rules::color(OP, color);
            let color = self.agree(Call::new(OpKind::Split), local)?;
            Ok(self.raw().raw_split(OP, color, key)?.map(F::wrap))
        })
    }

    fn dup(&self) -> Result<Self> {
        const OP: &str = "dup";
        recorded!(self, Form::Blocking, Start::Blocking, u8, [], {
            self.agree(Call::new(OpKind::Dup), Ok(()))?;
            self.raw().raw_dup(OP).map(F::wrap)
        })
    }

    fn i_all_reduce<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<F, T>,
        recv: &'s mut BufMut<F, T>,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        let send = keep::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "i_all_reduce";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, staging) =
                    prepare_all_reduce::<_, T>(self, OP, Start::Collective, send, recv, op)?;
                let (run, divide) = reduction(self.raw(), op);
                self.raw()
                    .raw_i_all_reduce(OP, scope, send, recv, run, divide, n, staging)
            }
        )
    }

    fn i_broadcast<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut BufMut<F, T>,
        root: usize,
    ) -> Result<Request<'s>> {
        let buf = keep_mut::<F, T>(buf);
        const OP: &str = "i_broadcast";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(buf.len())],
            {
                let (n, staging) =
                    prepare_broadcast::<_, T>(self, OP, Start::Collective, buf, root)?;
                self.raw().raw_i_broadcast(OP, scope, buf, root, n, staging)
            }
        )
    }

    fn i_all_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<F, T>,
        recv: &'s mut BufMut<F, T>,
    ) -> Result<Request<'s>> {
        let send = keep::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "i_all_gather";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, staging) =
                    prepare_all_gather::<_, T>(self, OP, Start::Collective, send, recv)?;
                self.raw()
                    .raw_i_all_gather(OP, scope, send, recv, n, staging)
            }
        )
    }

    fn i_barrier<'s>(&'s self, scope: &'s Scope<'s, '_>) -> Result<Request<'s>> {
        const OP: &str = "i_barrier";
        recorded!(self, Form::NonBlocking, Start::Collective, u8, [], {
            self.agree(Call::new(OpKind::Barrier), Ok(()))?;
            self.raw().raw_i_barrier(OP, scope)
        })
    }

    fn i_reduce<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<F, T>,
        recv: Option<&'s mut BufMut<F, T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<Request<'s>> {
        let send = keep::<F, T>(send);
        let recv = recv.map(keep_mut::<F, T>);
        const OP: &str = "i_reduce";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(send.len()), recv.as_ref().map(|b| b.len())],
            {
                let ((n, recv), staging) =
                    prepare_reduce::<_, T, _>(self, OP, Start::Collective, send, recv, op, root)?;
                let (run, divide) = reduction(self.raw(), op);
                self.raw()
                    .raw_i_reduce(OP, scope, send, recv, run, divide, root, n, staging)
            }
        )
    }

    fn i_all_reduce_in_place<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut BufMut<F, T>,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        let buf = keep_mut::<F, T>(buf);
        const OP: &str = "i_all_reduce_in_place";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(buf.len())],
            {
                let (n, staging) =
                    prepare_all_reduce_in_place::<_, T>(self, OP, Start::Collective, buf, op)?;
                let (run, divide) = reduction(self.raw(), op);
                self.raw()
                    .raw_i_all_reduce_in_place(OP, scope, buf, run, divide, n, staging)
            }
        )
    }

    fn i_reduce_scatter<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<F, T>,
        recv: &'s mut BufMut<F, T>,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        let send = keep::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "i_reduce_scatter";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, staging) =
                    prepare_reduce_scatter::<_, T>(self, OP, Start::Collective, send, recv, op)?;
                let (run, divide) = reduction(self.raw(), op);
                self.raw()
                    .raw_i_reduce_scatter(OP, scope, send, recv, run, divide, n, staging)
            }
        )
    }

    fn i_all_to_all<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<F, T>,
        recv: &'s mut BufMut<F, T>,
    ) -> Result<Request<'s>> {
        let send = keep::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "i_all_to_all";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, staging) =
                    prepare_all_to_all::<_, T>(self, OP, Start::Collective, send, recv)?;
                self.raw()
                    .raw_i_all_to_all(OP, scope, send, recv, n, staging)
            }
        )
    }

    fn i_all_to_all_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<F, T>,
        send_counts: &[usize],
        recv: &'s mut BufMut<F, T>,
        recv_counts: &[usize],
    ) -> Result<Request<'s>> {
        let send = keep::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "i_all_to_all_v";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let ((), staging) = prepare_all_to_all_v::<_, T>(
                    self,
                    OP,
                    Start::Collective,
                    send,
                    send_counts,
                    recv,
                    recv_counts,
                )?;
                self.raw().raw_i_all_to_all_v(
                    OP,
                    scope,
                    send,
                    send_counts,
                    recv,
                    recv_counts,
                    staging,
                )
            }
        )
    }

    fn i_all_gather_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<F, T>,
        recv: &'s mut BufMut<F, T>,
        counts: &[usize],
    ) -> Result<Request<'s>> {
        let send = keep::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "i_all_gather_v";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let ((), staging) =
                    prepare_all_gather_v::<_, T>(self, OP, Start::Collective, send, recv, counts)?;
                self.raw()
                    .raw_i_all_gather_v(OP, scope, send, recv, counts, staging)
            }
        )
    }

    fn i_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<F, T>,
        recv: Option<&'s mut BufMut<F, T>>,
        root: usize,
    ) -> Result<Request<'s>> {
        let send = keep::<F, T>(send);
        let recv = recv.map(keep_mut::<F, T>);
        const OP: &str = "i_gather";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(send.len()), recv.as_ref().map(|b| b.len())],
            {
                let ((n, recv), staging) =
                    prepare_gather::<_, T, _>(self, OP, Start::Collective, send, recv, root)?;
                self.raw()
                    .raw_i_gather(OP, scope, send, recv, root, n, staging)
            }
        )
    }

    fn i_gather_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<F, T>,
        recv: Option<&'s mut BufMut<F, T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<Request<'s>> {
        let send = keep::<F, T>(send);
        let recv = recv.map(keep_mut::<F, T>);
        const OP: &str = "i_gather_v";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [Some(send.len()), recv.as_ref().map(|b| b.len())],
            {
                let (recv, staging) = prepare_gather_v::<_, T, _>(
                    self,
                    OP,
                    Start::Collective,
                    send,
                    recv,
                    counts,
                    root,
                )?;
                self.raw()
                    .raw_i_gather_v(OP, scope, send, recv, counts, root, staging)
            }
        )
    }

    fn i_scatter<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Buf<F, T>>,
        recv: &'s mut BufMut<F, T>,
        root: usize,
    ) -> Result<Request<'s>> {
        let send = send.map(keep::<F, T>);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "i_scatter";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [send.as_ref().map(|b| b.len()), Some(recv.len())],
            {
                let ((n, send), staging) =
                    prepare_scatter::<_, T, _, _>(self, OP, Start::Collective, send, recv, root)?;
                self.raw()
                    .raw_i_scatter(OP, scope, send, recv, root, n, staging)
            }
        )
    }

    fn i_scatter_v<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Buf<F, T>>,
        recv: &'s mut BufMut<F, T>,
        counts: &[usize],
        root: usize,
    ) -> Result<Request<'s>> {
        let send = send.map(keep::<F, T>);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "i_scatter_v";
        recorded!(
            self,
            Form::NonBlocking,
            Start::Collective,
            T,
            [send.as_ref().map(|b| b.len()), Some(recv.len())],
            {
                let (send, staging) = prepare_scatter_v::<_, T, _, _>(
                    self,
                    OP,
                    Start::Collective,
                    send,
                    recv,
                    counts,
                    root,
                )?;
                self.raw()
                    .raw_i_scatter_v(OP, scope, send, recv, counts, root, staging)
            }
        )
    }

    fn i_send_recv<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s Buf<F, T>,
        dest: usize,
        recv: &'s mut BufMut<F, T>,
        source: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        let send = keep::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "i_send_recv";
        recorded!(
            self,
            Form::NonBlocking,
            Start::PointToPoint,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (sn, rn) = self
                    .raw()
                    .rules()
                    .send_recv::<T, _, _>(OP, send, dest, recv, source, tag)?;
                let staging = self
                    .raw()
                    .stage::<T>(OP, Start::PointToPoint, lens2(sn, rn))?;
                self.raw().raw_i_send_recv(
                    OP,
                    scope,
                    send,
                    dest,
                    recv,
                    source,
                    tag,
                    (sn, rn),
                    staging,
                )
            }
        )
    }

    fn i_send<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s Buf<F, T>,
        dest: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        let buf = keep::<F, T>(buf);
        const OP: &str = "i_send";
        recorded!(
            self,
            Form::NonBlocking,
            Start::PointToPoint,
            T,
            [Some(buf.len())],
            {
                let n = self
                    .raw()
                    .rules()
                    .point::<T, _>(OP, "destination", buf, dest, tag)?;
                let staging = self
                    .raw()
                    .stage::<T>(OP, Start::PointToPoint, [Some(n), None])?;
                self.raw().raw_i_send(OP, scope, buf, dest, tag, n, staging)
            }
        )
    }

    fn i_recv<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut BufMut<F, T>,
        source: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        let buf = keep_mut::<F, T>(buf);
        const OP: &str = "i_recv";
        recorded!(
            self,
            Form::NonBlocking,
            Start::PointToPoint,
            T,
            [Some(buf.len())],
            {
                let n = self
                    .raw()
                    .rules()
                    .point::<T, _>(OP, "source", buf, source, tag)?;
                let staging = self
                    .raw()
                    .stage::<T>(OP, Start::PointToPoint, [Some(n), None])?;
                self.raw()
                    .raw_i_recv(OP, scope, buf, source, tag, n, staging)
            }
        )
    }

    fn barrier_init<'s>(&'s self, scope: &'s Scope<'s, '_>) -> Result<Persistent<'s>> {
        const OP: &str = "barrier_init";
        recorded!(self, Form::Init, Start::Collective, u8, [], {
            self.agree(Call::new(OpKind::Barrier), Ok(()))?;
            let made = self.raw().raw_init::<u8>(OP, scope, PlanCall::Barrier);
            let raw = agree_init(self, OP, OpKind::Barrier, made)?;
            let rec = plan_record(self.raw(), OP, 0);
            Ok(Persistent::new(scope, OP, raw, None, None, rec))
        })
    }

    fn broadcast_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut BufMut<F, T>,
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let buf = keep_mut::<F, T>(buf);
        const OP: &str = "broadcast_init";
        recorded!(self, Form::Init, Start::Collective, T, [Some(buf.len())], {
            let (n, _) = prepare_broadcast::<_, T>(self, OP, Start::Collective, buf, root)?;
            let buf = BufPtr::new(buf);
            let call = PlanCall::Broadcast { buf, root, n };
            plan(self, OP, scope, call, None, Some(buf))
        })
    }

    fn reduce_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<F, T>,
        recv: Option<&'s mut BufMut<F, T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = keep_mut::<F, T>(send);
        let recv = recv.map(keep_mut::<F, T>);
        const OP: &str = "reduce_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [Some(send.len()), recv.as_ref().map(|b| b.len())],
            {
                let ((n, recv), _) = prepare_reduce::<_, T, _>(
                    self,
                    OP,
                    Start::Collective,
                    read_of::<F::Raw, T>(send),
                    recv,
                    op,
                    root,
                )?;
                let (red, average) = reduction(self.raw(), op);
                let (send, recv) = (BufPtr::new(send), recv.map(BufPtr::new));
                let call = PlanCall::Reduce {
                    send,
                    recv,
                    red,
                    average,
                    root,
                    n,
                };
                plan(self, OP, scope, call, Some(send), recv)
            }
        )
    }

    fn all_reduce_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<F, T>,
        recv: &'s mut BufMut<F, T>,
        op: ReduceOp,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = keep_mut::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "all_reduce_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, _) = prepare_all_reduce::<_, T>(
                    self,
                    OP,
                    Start::Collective,
                    read_of::<F::Raw, T>(send),
                    recv,
                    op,
                )?;
                let (red, average) = reduction(self.raw(), op);
                let (send, recv) = (BufPtr::new(send), BufPtr::new(recv));
                let call = PlanCall::AllReduce {
                    send: Some(send),
                    recv,
                    red,
                    average,
                    n,
                };
                plan(self, OP, scope, call, Some(send), Some(recv))
            }
        )
    }

    fn all_reduce_in_place_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut BufMut<F, T>,
        op: ReduceOp,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let buf = keep_mut::<F, T>(buf);
        const OP: &str = "all_reduce_in_place_init";
        recorded!(self, Form::Init, Start::Collective, T, [Some(buf.len())], {
            let (n, _) = prepare_all_reduce_in_place::<_, T>(self, OP, Start::Collective, buf, op)?;
            let (red, average) = reduction(self.raw(), op);
            let buf = BufPtr::new(buf);
            let call = PlanCall::AllReduce {
                send: None,
                recv: buf,
                red,
                average,
                n,
            };
            plan(self, OP, scope, call, None, Some(buf))
        })
    }

    fn all_gather_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<F, T>,
        recv: &'s mut BufMut<F, T>,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = keep_mut::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "all_gather_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, _) = prepare_all_gather::<_, T>(
                    self,
                    OP,
                    Start::Collective,
                    read_of::<F::Raw, T>(send),
                    recv,
                )?;
                let (send, recv) = (BufPtr::new(send), BufPtr::new(recv));
                let call = PlanCall::AllGather { send, recv, n };
                plan(self, OP, scope, call, Some(send), Some(recv))
            }
        )
    }

    fn all_gather_v_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<F, T>,
        recv: &'s mut BufMut<F, T>,
        counts: &[usize],
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = keep_mut::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "all_gather_v_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let ((), _) = prepare_all_gather_v::<_, T>(
                    self,
                    OP,
                    Start::Collective,
                    read_of::<F::Raw, T>(send),
                    recv,
                    counts,
                )?;
                let (send, recv) = (BufPtr::new(send), BufPtr::new(recv));
                let counts = counts.to_vec();
                let call = PlanCall::AllGatherV { send, recv, counts };
                plan(self, OP, scope, call, Some(send), Some(recv))
            }
        )
    }

    fn gather_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<F, T>,
        recv: Option<&'s mut BufMut<F, T>>,
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = keep_mut::<F, T>(send);
        let recv = recv.map(keep_mut::<F, T>);
        const OP: &str = "gather_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [Some(send.len()), recv.as_ref().map(|b| b.len())],
            {
                let ((n, recv), _) = prepare_gather::<_, T, _>(
                    self,
                    OP,
                    Start::Collective,
                    read_of::<F::Raw, T>(send),
                    recv,
                    root,
                )?;
                let (send, recv) = (BufPtr::new(send), recv.map(BufPtr::new));
                let call = PlanCall::Gather {
                    send,
                    recv,
                    root,
                    n,
                };
                plan(self, OP, scope, call, Some(send), recv)
            }
        )
    }

    fn gather_v_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<F, T>,
        recv: Option<&'s mut BufMut<F, T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = keep_mut::<F, T>(send);
        let recv = recv.map(keep_mut::<F, T>);
        const OP: &str = "gather_v_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [Some(send.len()), recv.as_ref().map(|b| b.len())],
            {
                let (recv, _) = prepare_gather_v::<_, T, _>(
                    self,
                    OP,
                    Start::Collective,
                    read_of::<F::Raw, T>(send),
                    recv,
                    counts,
                    root,
                )?;
                let (send, recv) = (BufPtr::new(send), recv.map(BufPtr::new));
                let counts = counts.to_vec();
                let call = PlanCall::GatherV {
                    send,
                    recv,
                    counts,
                    root,
                };
                plan(self, OP, scope, call, Some(send), recv)
            }
        )
    }

    fn scatter_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s mut BufMut<F, T>>,
        recv: &'s mut BufMut<F, T>,
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = send.map(keep_mut::<F, T>);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "scatter_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [send.as_ref().map(|b| b.len()), Some(recv.len())],
            {
                let ((n, send), _) =
                    prepare_scatter::<_, T, _, _>(self, OP, Start::Collective, send, recv, root)?;
                let (send, recv) = (send.map(BufPtr::new), BufPtr::new(recv));
                let call = PlanCall::Scatter {
                    send,
                    recv,
                    root,
                    n,
                };
                plan(self, OP, scope, call, send, Some(recv))
            }
        )
    }

    fn scatter_v_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s mut BufMut<F, T>>,
        recv: &'s mut BufMut<F, T>,
        counts: &[usize],
        root: usize,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = send.map(keep_mut::<F, T>);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "scatter_v_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [send.as_ref().map(|b| b.len()), Some(recv.len())],
            {
                let (send, _) = prepare_scatter_v::<_, T, _, _>(
                    self,
                    OP,
                    Start::Collective,
                    send,
                    recv,
                    counts,
                    root,
                )?;
                let (send, recv) = (send.map(BufPtr::new), BufPtr::new(recv));
                let counts = counts.to_vec();
                let call = PlanCall::ScatterV {
                    send,
                    recv,
                    counts,
                    root,
                };
                plan(self, OP, scope, call, send, Some(recv))
            }
        )
    }

    fn reduce_scatter_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<F, T>,
        recv: &'s mut BufMut<F, T>,
        op: ReduceOp,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = keep_mut::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "reduce_scatter_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, _) = prepare_reduce_scatter::<_, T>(
                    self,
                    OP,
                    Start::Collective,
                    read_of::<F::Raw, T>(send),
                    recv,
                    op,
                )?;
                let (red, average) = reduction(self.raw(), op);
                let (send, recv) = (BufPtr::new(send), BufPtr::new(recv));
                let call = PlanCall::ReduceScatter {
                    send,
                    recv,
                    red,
                    average,
                    n,
                };
                plan(self, OP, scope, call, Some(send), Some(recv))
            }
        )
    }

    fn all_to_all_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<F, T>,
        recv: &'s mut BufMut<F, T>,
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = keep_mut::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "all_to_all_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let (n, _) = prepare_all_to_all::<_, T>(
                    self,
                    OP,
                    Start::Collective,
                    read_of::<F::Raw, T>(send),
                    recv,
                )?;
                let (send, recv) = (BufPtr::new(send), BufPtr::new(recv));
                let call = PlanCall::AllToAll { send, recv, n };
                plan(self, OP, scope, call, Some(send), Some(recv))
            }
        )
    }

    fn all_to_all_v_init<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s mut BufMut<F, T>,
        send_counts: &[usize],
        recv: &'s mut BufMut<F, T>,
        recv_counts: &[usize],
    ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
        let send = keep_mut::<F, T>(send);
        let recv = keep_mut::<F, T>(recv);
        const OP: &str = "all_to_all_v_init";
        recorded!(
            self,
            Form::Init,
            Start::Collective,
            T,
            [Some(send.len()), Some(recv.len())],
            {
                let ((), _) = prepare_all_to_all_v::<_, T>(
                    self,
                    OP,
                    Start::Collective,
                    read_of::<F::Raw, T>(send),
                    send_counts,
                    recv,
                    recv_counts,
                )?;
                let (send, recv) = (BufPtr::new(send), BufPtr::new(recv));
                let call = PlanCall::AllToAllV {
                    send,
                    send_counts: send_counts.to_vec(),
                    recv,
                    recv_counts: recv_counts.to_vec(),
                };
                plan(self, OP, scope, call, Some(send), Some(recv))
            }
        )
    }
}
