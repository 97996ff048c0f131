//! What a backend implements: raw, already-checked operations and the few facts the front end
//! needs of it.

use super::{Operation, Plan};
use crate::element::Element;
use crate::error::Result;
use crate::memory::Space;
use crate::op::BackendKind;
use crate::operation::{Name, OpKind};
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

    /// Run `op` to completion: a blocking call. Its arguments passed the rules on this rank (and,
    /// in checked mode, the agreement of every rank), so nothing here checks them again; its
    /// reduce operation is the one to run (`Sum` for an `Avg` the backend does not reduce
    /// natively: the front end divides afterwards). `n` is the count the rules returned, in
    /// elements (per rank or per block; for `send_recv`, the count sent; 0 where counts arrays
    /// give the counts). `name` is the method called, for errors.
    fn run<T: Element>(
        &self,
        name: Name,
        op: &mut Operation<'_, '_, Self, T>,
        n: usize,
        staging: Self::Staging<'_, T>,
    ) -> Result<()>;
    /// Start `op` as [`run`](Self::run) would run it, its request registered in `scope`: a
    /// non-blocking call, or one run of a replayed plan. `average`: divide by the number of ranks
    /// when it completes (only where [`native_avg`](Self::native_avg) is false).
    #[allow(clippy::too_many_arguments)]
    fn start<'s, T: Element>(
        &'s self,
        name: Name,
        scope: &'s Scope<'s, '_>,
        op: Operation<'s, '_, Self, T>,
        n: usize,
        average: bool,
        staging: Self::Staging<'s, T>,
    ) -> Result<Request<'s>>;
    /// `split` with a color that fits MPI's (`None`: join none).
    fn raw_split(&self, op: &'static str, color: Option<i32>, key: i32) -> Result<Option<Self>>;
    /// `dup`.
    fn raw_dup(&self, op: &'static str) -> Result<Self>;

    /// Make the persistent plan of `call` (checked, and agreed in checked mode), whose runs
    /// complete before `'s` ends: the backend's persistent form where it has one, else the front
    /// end's replay of [`start`](Self::start) at each run (`frontend::replay`). `name` is the
    /// method called, for errors.
    fn raw_init<'s, T: Element>(
        &'s self,
        name: &'static str,
        scope: &'s Scope<'s, '_>,
        call: PlanCall<'s, Self, T>,
    ) -> Result<Box<dyn PlanOp + 's>>;
}

/// A persistent collective as a backend's plan gets it: the checked operation on the buffers the
/// plan borrows for its life (by address), its reduce operation the one the backend runs (`Sum` for
/// an `Avg` it does not reduce natively), with the count the rules returned and whether each
/// completion divides by the number of ranks. Point-to-point operations have no persistent form.
pub struct PlanCall<'s, B: Backend, T: Element> {
    /// The operation, its counts arrays owned by the plan.
    pub op: Plan<'s, B, T>,
    /// The count the rules returned, in elements (0 where counts arrays give the counts).
    pub n: usize,
    /// Whether each completion divides the result by the number of ranks.
    pub average: bool,
}
