//! The front end: every operation of every backend goes through here, once.
//!
//! Each public method of [`Communicator`] builds one [`Op`] (the operation as a value: which
//! collective, its buffers, counts, root and reduce operation) and hands it to one of three ways
//! of running it: [`run`] (blocking), [`start`] (non-blocking, `i_*`) and [`init`] (a persistent
//! plan, `*_init`). All three run the same pipeline, each step one `match` over the value (or none):
//!
//! 1. the tracing span and the per-call record ([`recorded`]);
//! 2. the rules ([`check`]): the arguments against the rules table ([`crate::rules`]) with the
//!    backend's parameters (count limit, tag bound, device), in the same order on every backend;
//! 3. staging ([`stage`]): what the call must hold before the ranks agree (the staged backends'
//!    pinned host buffers: a rank that cannot get them fails in the agreement, not alone after);
//! 4. in checked mode, the agreement with the other ranks ([`Frontend::agree`] on [`call`]);
//! 5. the backend's raw operation ([`execute`], [`start_op`], or the plan's [`Backend::raw_init`]);
//! 6. finishing: `Avg` divided by the number of ranks where the backend reduces with a sum.
//!
//! [`Backend`] is what a backend implements (`backend.rs`); [`Frontend`] is checked mode's policy
//! over a backend: every backend is one (agreeing when its checked-mode flag is on), and so is the
//! wrapper [`Checked`] (always agreeing). Plans: `plan.rs`.
//!
//! [`Backend`] and [`Frontend`] are `pub` inside this private module: nothing outside the crate can
//! name them, so no one else can call a raw operation with unchecked arguments or implement them,
//! while the blanket implementation of the public [`Communicator`] trait can use them.
//!
//! Errors are mapped where they arise: the rules and the agreement return this crate's
//! [`Error`](crate::Error) values, the raw operations turn their library's codes into them.

mod backend;
mod plan;

pub use crate::persistent::{BufPtr, PlanOp};
pub use backend::{Backend, PlanCall, RawBuf, RawBufMut, Start};
pub(crate) use plan::lend;
pub(crate) use plan::replay;

use crate::checked::{self, Call, Checked};
use crate::comm::{Communicator, Tag};
use crate::element::Element;
use crate::error::Result;
use crate::memory::{Buffer, Space};
use crate::op::{BackendKind, ReduceOp};
use crate::operation::{Name, Op, OpKind};
use crate::persistent::Persistent;
use crate::record::{self, Form};
use crate::request::{Request, Scope};
use crate::rules::Rules;

/// An operation on the caller's buffers, borrowed for `'s`, with counts arrays borrowed for `'c`:
/// what a blocking or non-blocking call runs.
pub type Operation<'s, 'c, B, T> =
    Op<&'s RawBuf<'s, B, T>, &'s mut RawBufMut<'s, B, T>, &'c [usize]>;
/// An operation as a persistent plan holds it: its buffers by address, its counts owned (or, to
/// start a run, borrowed from the plan: `C = &[usize]`).
pub type Plan<'s, B, T, C = Vec<usize>> =
    Op<BufPtr<RawBufMut<'s, B, T>>, BufPtr<RawBufMut<'s, B, T>>, C>;
/// An operation as a `*_init` method receives it: every buffer borrowed mutably for the plan's
/// life (the caller changes the send buffers between runs).
type Lent<'s, 'c, B, T> = Op<&'s mut RawBufMut<'s, B, T>, &'s mut RawBufMut<'s, B, T>, &'c [usize]>;

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

/// The stream, device, MPI communicator and deadline of the wrapped communicator; `with_stream`
/// keeps the wrapper.
#[cfg(feature = "cuda")]
impl<C> crate::comm::DeviceCommunicator for Checked<C>
where
    C: crate::comm::DeviceCommunicator + Frontend,
{
    fn stream(&self) -> &std::sync::Arc<cudarc::driver::CudaStream> {
        self.inner().stream()
    }

    fn context(&self) -> &std::sync::Arc<cudarc::driver::CudaContext> {
        self.inner().context()
    }

    fn mpi(&self) -> &crate::MpiComm {
        self.inner().mpi()
    }

    fn deadline(&self) -> Option<std::time::Duration> {
        self.inner().deadline()
    }

    fn synchronize(&self) -> Result<()> {
        self.inner().synchronize()
    }

    fn with_stream(self, stream: std::sync::Arc<cudarc::driver::CudaStream>) -> Result<Self> {
        self.into_inner().with_stream(stream).map(Checked::new)
    }

    /// The wrapped communicator's: a grouped exchange is not collective (only the ranks its parts
    /// name take part), so there is no call for checked mode to agree on.
    unsafe fn exchange_bytes(
        &self,
        op: &'static str,
        stream: &cudarc::driver::CudaStream,
        send: u64,
        sends: &[crate::ExchangePart],
        recv: u64,
        recvs: &[crate::ExchangePart],
    ) -> Result<()> {
        // SAFETY: the trait method's contract, passed on unchanged.
        unsafe {
            self.inner()
                .exchange_bytes(op, stream, send, sends, recv, recvs)
        }
    }
}

/// A backend's buffer type for elements `T`, as the front end `F` names it.
type Buf<'b, F, T> = RawBuf<'b, <F as Frontend>::Raw, T>;
/// What front end `F`'s backend writes for elements `T`.
type BufMut<'b, F, T> = RawBufMut<'b, <F as Frontend>::Raw, T>;
/// What a call of front end `F` holds from before the agreement until its raw operation.
type Staging<'c, F, T> = <<F as Frontend>::Raw as Backend>::Staging<'c, T>;

/// A writable buffer, to read: a plan's send buffer (a plan borrows its send buffers mutably, as
/// the caller changes them between runs).
fn read_of<'a, 's, B: Backend, T: Element>(buf: &'a RawBufMut<'s, B, T>) -> &'a RawBuf<'s, B, T> {
    <B::Memory as Space>::read(buf)
}

/// The lengths of an operation's buffers on this rank, read one then written one (`None`:
/// absent here): what staging takes, and (in bytes) the record's size.
fn lens<B: Backend, T: Element>(op: &Operation<'_, '_, B, T>) -> [Option<usize>; 2] {
    op.lens(|b| Buffer::<T>::len(&**b), |b| Buffer::<T>::len(&**b))
}

/// The largest of a call's buffers on this rank (`None`: absent here), in bytes.
fn bytes_of<T: Element>(lens: [Option<usize>; 2]) -> usize {
    let most = lens.iter().flatten().copied().max().unwrap_or(0);
    most.saturating_mul(std::mem::size_of::<T>())
}

/// How a call of `name` starts, which decides whether a backend stages it through host memory.
fn start_of(name: Name) -> Start {
    match name.form {
        Form::Blocking => Start::Blocking,
        _ if !name.kind.is_collective() => Start::PointToPoint,
        _ => Start::Collective,
    }
}

/// The reduce operation the backend runs for `red` (if the operation reduces), and whether `Avg`
/// is finished by dividing afterwards.
fn reduction<B: Backend>(b: &B, red: Option<ReduceOp>) -> (ReduceOp, bool) {
    match red {
        Some(ReduceOp::Avg) if !b.native_avg() => (ReduceOp::Sum, true),
        Some(red) => (red, false),
        None => (ReduceOp::Sum, false),
    }
}

/// Step 1: enter the tracing span named after the method, open the per-call record
/// ([`crate::record`]; when recording is off, one relaxed atomic load: `bytes` and the backend's
/// stream are read only when on), run `body` on `op`, close the record with the backend's path.
#[inline]
fn recorded<F: Frontend, O, R>(
    f: &F,
    name: Name,
    op: O,
    bytes: impl FnOnce(&O) -> usize,
    body: impl FnOnce(O) -> Result<R>,
) -> Result<R> {
    let _span = name.span().entered();
    let b = f.raw();
    let span = record::Span::open(|| bytes(&op), || b.record_stream());
    let result = body(op);
    span.close(
        result.is_ok(),
        name.as_str(),
        name.form,
        b.kind(),
        |bytes| b.record_path(name.kind, start_of(name), bytes),
    );
    result
}

/// Step 2, the rules: check `op` against this rank's rules, drop the root-only buffers a rank
/// other than the root passed, and return the count the backend gets (elements per rank or per
/// block; for `send_recv`, the count sent; 0 where counts arrays say it).
fn check<B: Backend, T: Element>(
    rules: &Rules,
    name: &'static str,
    op: &mut Operation<'_, '_, B, T>,
) -> Result<usize> {
    match op {
        Op::Barrier => Ok(0),
        Op::Broadcast { buf, root } => rules.broadcast::<T, _>(name, &**buf, *root),
        Op::Reduce {
            send,
            recv,
            op,
            root,
        } => {
            let (n, kept) = rules.reduce::<T, _, _, _>(name, *send, recv.take(), *op, *root)?;
            *recv = kept;
            Ok(n)
        }
        Op::AllReduce { send, recv, op } => rules.all_reduce::<T, _, _>(name, *send, &**recv, *op),
        Op::AllReduceInPlace { buf, op } => rules.all_reduce_in_place::<T, _>(name, &**buf, *op),
        Op::AllGather { send, recv } => rules.all_gather::<T, _, _>(name, *send, &**recv),
        Op::AllGatherV { send, recv, counts } => rules
            .all_gather_v::<T, _, _>(name, *send, &**recv, counts)
            .map(|()| 0),
        Op::Gather { send, recv, root } => {
            let (mine, theirs) = (("send", *send), ("recv", recv.take()));
            let (n, kept) = rules.gather_or_scatter::<T, _, _, _>(name, mine, theirs, *root)?;
            *recv = kept;
            Ok(n)
        }
        Op::GatherV {
            send,
            recv,
            counts,
            root,
        } => {
            let (mine, theirs) = (("send", *send), ("recv", recv.take()));
            *recv = rules.gather_or_scatter_v::<T, _, _, _>(name, mine, theirs, counts, *root)?;
            Ok(0)
        }
        Op::Scatter { send, recv, root } => {
            let (mine, theirs) = (("recv", &**recv), ("send", send.take()));
            let (n, kept) = rules.gather_or_scatter::<T, _, _, _>(name, mine, theirs, *root)?;
            *send = kept;
            Ok(n)
        }
        Op::ScatterV {
            send,
            recv,
            counts,
            root,
        } => {
            let (mine, theirs) = (("recv", &**recv), ("send", send.take()));
            *send = rules.gather_or_scatter_v::<T, _, _, _>(name, mine, theirs, counts, *root)?;
            Ok(0)
        }
        Op::ReduceScatter { send, recv, op } => {
            rules.reduce_scatter::<T, _, _>(name, *send, &**recv, *op)
        }
        Op::AllToAll { send, recv } => rules.all_to_all::<T, _, _>(name, *send, &**recv),
        Op::AllToAllV {
            send,
            send_counts,
            recv,
            recv_counts,
        } => rules
            .all_to_all_v::<T, _, _>(name, *send, send_counts, &**recv, recv_counts)
            .map(|()| 0),
        Op::Send { buf, dest, tag } => rules.point::<T, _>(name, "destination", *buf, *dest, *tag),
        Op::Recv { buf, source, tag } => rules.point::<T, _>(name, "source", &**buf, *source, *tag),
        Op::SendRecv {
            send,
            dest,
            recv,
            source,
            tag,
        } => rules
            .send_recv::<T, _, _>(name, *send, *dest, &**recv, *source, *tag)
            .map(|(sent, _)| sent),
    }
}

/// Step 3, staging: the backend's hold on what a call of buffers `lens` needs (none for a call
/// without buffers).
fn stage<B: Backend, T: Element>(
    b: &B,
    name: Name,
    lens: [Option<usize>; 2],
) -> Result<B::Staging<'_, T>> {
    if lens == [None, None] {
        return Ok(Default::default());
    }
    b.stage::<T>(name.as_str(), start_of(name), lens)
}

/// Step 4's record: what the ranks agree on in checked mode.
fn call<'a, B: Backend, T: Element>(op: &'a Operation<'_, '_, B, T>) -> Call<'a> {
    let len = |b: &&RawBuf<'_, B, T>| Buffer::<T>::len(&**b);
    let len_mut = |b: &&mut RawBufMut<'_, B, T>| Buffer::<T>::len(&**b);
    let call = Call::new(op.kind());
    let on = call.element::<T>();
    match op {
        Op::Barrier | Op::Send { .. } | Op::Recv { .. } | Op::SendRecv { .. } => call,
        Op::Broadcast { buf, root } => on.root(*root).count(len_mut(buf)),
        Op::Reduce { send, op, root, .. } => on.reduce(*op).root(*root).count(len(send)),
        Op::AllReduce { send, op, .. } => on.reduce(*op).count(len(send)),
        Op::AllReduceInPlace { buf, op } => on.reduce(*op).count(len_mut(buf)),
        Op::AllGather { send, .. } | Op::AllToAll { send, .. } => on.count(len(send)),
        Op::AllGatherV { counts, .. } => on.counts(counts),
        Op::Gather { send, root, .. } => on.root(*root).count(len(send)),
        Op::GatherV { counts, root, .. } | Op::ScatterV { counts, root, .. } => {
            on.root(*root).counts(counts)
        }
        Op::Scatter { recv, root, .. } => on.root(*root).count(len_mut(recv)),
        Op::ReduceScatter { recv, op, .. } => on.reduce(*op).count(len_mut(recv)),
        Op::AllToAllV {
            send_counts,
            recv_counts,
            ..
        } => on.all_to_all(send_counts, recv_counts),
    }
}

/// Steps 2 to 4 on `op`, the same for every form: rules, staging, agreement (collectives only:
/// point-to-point calls have no common call to agree on). The count and the staging.
fn prepare<'f, F: Frontend, T: Element>(
    f: &'f F,
    name: Name,
    op: &mut Operation<'_, '_, F::Raw, T>,
) -> Result<(usize, Staging<'f, F, T>)> {
    let b = f.raw();
    let local = check::<F::Raw, T>(&b.rules(), name.as_str(), op)
        .and_then(|n| Ok((n, stage::<F::Raw, T>(b, name, lens::<F::Raw, T>(op))?)));
    if name.kind.is_collective() {
        f.agree(call::<F::Raw, T>(op), local)
    } else {
        local
    }
}

/// Steps 5 and 6 of a blocking call: the backend runs the operation, then `Avg` is divided
/// where the backend summed.
pub(crate) fn execute<B: Backend, T: Element>(
    b: &B,
    name: Name,
    mut op: Operation<'_, '_, B, T>,
    n: usize,
    staging: B::Staging<'_, T>,
) -> Result<()> {
    let divide = to_run(b, &mut op);
    b.run(name, &mut op, n, staging)?;
    match op.result_mut() {
        Some(buf) if divide => b.divide(name.as_str(), buf),
        _ => Ok(()),
    }
}

/// Step 5 of a non-blocking call or of one run of a replayed plan: the backend starts the
/// operation in `scope`; the request finishes `Avg` at completion.
pub(super) fn start_op<'s, B: Backend, T: Element>(
    b: &'s B,
    name: Name,
    scope: &'s Scope<'s, '_>,
    mut op: Operation<'s, '_, B, T>,
    n: usize,
    staging: B::Staging<'s, T>,
) -> Result<Request<'s>> {
    let average = to_run(b, &mut op);
    b.start(name, scope, op, n, average, staging)
}

/// Give `op` the reduce operation the backend runs (`Sum` for an `Avg` it does not reduce
/// natively); whether the result is then divided by the number of ranks.
fn to_run<R, W, C, B: Backend>(b: &B, op: &mut Op<R, W, C>) -> bool {
    let Some(red) = op.reduce_op_mut() else {
        return false;
    };
    let (run, divide) = reduction(b, Some(*red));
    *red = run;
    divide
}

/// Run `op` as a blocking call.
fn run<F: Frontend, T: Element>(f: &F, op: Operation<'_, '_, F::Raw, T>) -> Result<()> {
    let name = Name::new(op.kind(), Form::Blocking);
    let bytes = |op: &Operation<'_, '_, F::Raw, T>| bytes_of::<T>(lens::<F::Raw, T>(op));
    recorded(f, name, op, bytes, |mut op| {
        let (n, staging) = prepare(f, name, &mut op)?;
        execute(f.raw(), name, op, n, staging)
    })
}

/// Start `op` as a non-blocking call whose request lives in `scope`.
fn start<'s, F: Frontend, T: Element>(
    f: &'s F,
    scope: &'s Scope<'s, '_>,
    op: Operation<'s, '_, F::Raw, T>,
) -> Result<Request<'s>> {
    let name = Name::new(op.kind(), Form::NonBlocking);
    let bytes = |op: &Operation<'s, '_, F::Raw, T>| bytes_of::<T>(lens::<F::Raw, T>(op));
    recorded(f, name, op, bytes, |mut op| {
        let (n, staging) = prepare(f, name, &mut op)?;
        start_op(f.raw(), name, scope, op, n, staging)
    })
}

/// Make the persistent plan of `op`: the rules, staging and agreement once, then the backend's
/// plan ([`Backend::raw_init`]; by default the replay of the non-blocking call), handed to `scope`
/// with the buffers the caller may reach between runs.
fn init<'s, F: Frontend, T: Element>(
    f: &'s F,
    scope: &'s Scope<'s, '_>,
    op: Lent<'s, '_, F::Raw, T>,
) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
    let name = Name::new(op.kind(), Form::Init);
    let bytes = |op: &Lent<'s, '_, F::Raw, T>| {
        bytes_of::<T>(op.lens(|b| Buffer::<T>::len(&**b), |b| Buffer::<T>::len(&**b)))
    };
    recorded(f, name, op, bytes, |op| {
        let b = f.raw();
        let plan: Plan<'s, F::Raw, T> = op.map(BufPtr::new, BufPtr::new, <[usize]>::to_vec);
        // SAFETY: the plan borrows every buffer for 's and nothing runs on them yet; the
        // references live only for the checks below.
        let mut view =
            unsafe { plan::lend::<F::Raw, T>(plan.by_ref().map(|p| *p, |p| *p, |c| &c[..])) };
        let (n, _) = prepare(f, name, &mut view)?;
        let kept = lens::<F::Raw, T>(&view);
        let plan = plan.retain(kept);
        let [send, recv] = plan.slots();
        let mut plan = plan;
        let average = to_run(b, &mut plan);
        let bytes = bytes_of::<T>(kept);
        let call = PlanCall {
            op: plan,
            n,
            average,
        };
        let made = b.raw_init(name.as_str(), scope, call);
        let made =
            made.and_then(|raw| crate::persistent::test_hook::refuse(name.as_str()).map(|()| raw));
        // In checked mode, agree on the outcome of the library's own init (`MPIX_*_init`, a graph
        // capture): a rank whose library refused the plan returns its error and the others
        // `PeerInvalid` naming it, instead of their `start` waiting for a rank that has no plan.
        let raw = f.agree(Call::new(name.kind), made)?;
        let rec = record::enabled().then(|| record::PlanRecord {
            backend: b.kind(),
            bytes,
            staged: b.record_path(name.kind, Start::Collective, bytes).staged,
            stream: b.record_stream(),
        });
        Ok(Persistent::new(scope, name.as_str(), raw, send, recv, rec))
    })
}

/// The type of an argument of role `$role` in a method of form `$form` (`b` blocking, `nb`
/// non-blocking, `init` persistent): `read`, `write` (a buffer read or written), `read_opt`,
/// `write_opt` (one present on the root only), `counts`, or the argument's own type.
macro_rules! arg {
    (b, read) => { &Buf<F, T> };
    (b, write) => { &mut BufMut<F, T> };
    (b, read_opt) => { Option<&Buf<F, T>> };
    (b, write_opt) => { Option<&mut BufMut<F, T>> };
    (nb, read) => { &'s Buf<F, T> };
    (nb, write) => { &'s mut BufMut<F, T> };
    (nb, read_opt) => { Option<&'s Buf<F, T>> };
    (nb, write_opt) => { Option<&'s mut BufMut<F, T>> };
    (init, read) => { &'s mut BufMut<F, T> };
    (init, write) => { &'s mut BufMut<F, T> };
    (init, read_opt) => { Option<&'s mut BufMut<F, T>> };
    (init, write_opt) => { Option<&'s mut BufMut<F, T>> };
    ($form:ident, counts) => { &[usize] };
    ($form:ident, $ty:ty) => { $ty };
}

/// An argument `$x` of role `$role` as the operation value holds it: buffers borrowed for one
/// lifetime (see [`keep`]), the rest as given.
macro_rules! lend {
    (init, read, $x:ident) => {
        keep_mut::<F, T>($x)
    };
    (init, read_opt, $x:ident) => {
        $x.map(keep_mut::<F, T>)
    };
    ($form:ident, read, $x:ident) => {
        keep::<F, T>($x)
    };
    ($form:ident, read_opt, $x:ident) => {
        $x.map(keep::<F, T>)
    };
    ($form:ident, write, $x:ident) => {
        keep_mut::<F, T>($x)
    };
    ($form:ident, write_opt, $x:ident) => {
        $x.map(keep_mut::<F, T>)
    };
    ($form:ident, $role:tt, $x:ident) => {
        $x
    };
}

/// The methods of one operation, each a constructor of its [`Op`] handed to [`run`], [`start`] or
/// [`init`]: `Kind: blocking, non_blocking, persistent (argument: role, ...)`, the arguments in
/// the trait's order (`_` where the operation has no persistent form).
macro_rules! methods {
    ($kind:ident: $b:ident, $nb:ident, _ ($($arg:ident: $role:tt),*)) => {
        fn $b<T: Element>(&self, $($arg: arg!(b, $role)),*) -> Result<()> {
            run(self, Op::$kind { $($arg: lend!(b, $role, $arg)),* })
        }

        fn $nb<'s, T: Element>(
            &'s self,
            scope: &'s Scope<'s, '_>,
            $($arg: arg!(nb, $role)),*
        ) -> Result<Request<'s>> {
            start(self, scope, Op::$kind { $($arg: lend!(nb, $role, $arg)),* })
        }
    };
    ($kind:ident: $b:ident, $nb:ident, $init:ident ($($arg:ident: $role:tt),*)) => {
        methods!($kind: $b, $nb, _ ($($arg: $role),*));

        fn $init<'s, T: Element>(
            &'s self,
            scope: &'s Scope<'s, '_>,
            $($arg: arg!(init, $role)),*
        ) -> Result<Persistent<'s, BufMut<'s, F, T>>> {
            init(self, scope, Op::$kind { $($arg: lend!(init, $role, $arg)),* })
        }
    };
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
        run::<F, u8>(self, Op::Barrier)
    }

    fn i_barrier<'s>(&'s self, scope: &'s Scope<'s, '_>) -> Result<Request<'s>> {
        start::<F, u8>(self, scope, Op::Barrier)
    }

    fn barrier_init<'s>(&'s self, scope: &'s Scope<'s, '_>) -> Result<Persistent<'s>> {
        init::<F, u8>(self, scope, Op::Barrier).map(Persistent::bufferless)
    }

    methods!(Broadcast: broadcast, i_broadcast, broadcast_init (buf: write, root: usize));
    methods!(Reduce: reduce, i_reduce, reduce_init (send: read, recv: write_opt, op: ReduceOp, root: usize));
    methods!(AllReduce: all_reduce, i_all_reduce, all_reduce_init (send: read, recv: write, op: ReduceOp));
    methods!(AllReduceInPlace: all_reduce_in_place, i_all_reduce_in_place, all_reduce_in_place_init (buf: write, op: ReduceOp));
    methods!(AllGather: all_gather, i_all_gather, all_gather_init (send: read, recv: write));
    methods!(AllGatherV: all_gather_v, i_all_gather_v, all_gather_v_init (send: read, recv: write, counts: counts));
    methods!(Gather: gather, i_gather, gather_init (send: read, recv: write_opt, root: usize));
    methods!(GatherV: gather_v, i_gather_v, gather_v_init (send: read, recv: write_opt, counts: counts, root: usize));
    methods!(Scatter: scatter, i_scatter, scatter_init (send: read_opt, recv: write, root: usize));
    methods!(ScatterV: scatter_v, i_scatter_v, scatter_v_init (send: read_opt, recv: write, counts: counts, root: usize));
    methods!(ReduceScatter: reduce_scatter, i_reduce_scatter, reduce_scatter_init (send: read, recv: write, op: ReduceOp));
    methods!(AllToAll: all_to_all, i_all_to_all, all_to_all_init (send: read, recv: write));
    methods!(AllToAllV: all_to_all_v, i_all_to_all_v, all_to_all_v_init (send: read, send_counts: counts, recv: write, recv_counts: counts));
    methods!(Send: send, i_send, _ (buf: read, dest: usize, tag: Tag));
    methods!(Recv: recv, i_recv, _ (buf: write, source: usize, tag: Tag));
    methods!(SendRecv: send_recv, i_send_recv, _ (send: read, dest: usize, recv: write, source: usize, tag: Tag));

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>> {
        let name = Name::new(OpKind::Split, Form::Blocking);
        recorded(
            self,
            name,
            (),
            |()| 0,
            |()| {
                let local = Rules::color(name.as_str(), color);
                let color = self.agree(Call::new(OpKind::Split), local)?;
                Ok(self
                    .raw()
                    .raw_split(name.as_str(), color, key)?
                    .map(F::wrap))
            },
        )
    }

    fn dup(&self) -> Result<Self> {
        let name = Name::new(OpKind::Dup, Form::Blocking);
        recorded(
            self,
            name,
            (),
            |()| 0,
            |()| {
                self.agree(Call::new(OpKind::Dup), Ok(()))?;
                self.raw().raw_dup(name.as_str()).map(F::wrap)
            },
        )
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
