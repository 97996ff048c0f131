//! What the engine runs over: a collective's hooks ([`Collective`]: how to size, fill, run and check
//! its buffers, and its bus-bandwidth factor; one file under [`crate::cmd::coll`]) and a backend's
//! ([`BenchBackend`]: how to hold a buffer, upload and download it, and how to time a loop), with
//! where one rank stands ([`Ctx`]) and one size's buffers ([`Shape`]).

use collectives_core::{Buf, BufMut, Communicator, MpiComm, ReduceOp};

use crate::measure::backend::Backend;
use crate::measure::expected::{moved, BenchElement};
use crate::measure::timing;
use crate::measure::variant::Variant;

/// The buffer type that backend `B`'s communicator reads, for elements `T`.
pub type BufOf<'b, B, T> = Buf<'b, <B as BenchBackend>::Comm, T>;
/// The buffer type that backend `B`'s communicator writes (what a plan holds).
pub type BufMutOf<'b, B, T> = BufMut<'b, <B as BenchBackend>::Comm, T>;

/// One step of a timed plan: [`crate::measure::hooks::BenchBackend::time_plan`] calls it with `Start` and
/// `Wait` in the order its timer needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// [`Plan::start`](crate::measure::persistent::Plan::start).
    Start,
    /// [`Plan::wait`](crate::measure::persistent::Plan::wait).
    Wait,
}

/// Where one rank stands in a run: what the hooks need to size, fill and check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctx {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub nranks: usize,
    /// The root of rooted collectives (`-r`).
    pub root: usize,
    /// The reduce operation of reducing collectives (`-o`).
    pub op: ReduceOp,
}

impl Ctx {
    /// Where `comm`'s rank stands, with root `root` and reduce operation `op`.
    pub fn of<C: Communicator>(comm: &C, root: usize, op: ReduceOp) -> Ctx {
        Ctx {
            rank: comm.rank(),
            nranks: comm.size(),
            root,
            op,
        }
    }

    /// Whether this rank is the root.
    pub fn is_root(&self) -> bool {
        self.rank == self.root
    }

    /// `full` on the root, 0 elsewhere: a rooted collective's buffer that only the root holds.
    pub fn on_root(&self, full: usize) -> usize {
        if self.is_root() {
            full
        } else {
            0
        }
    }
}

/// The buffers of one size on one rank, in elements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// The `count` column: elements of the row (nccl-tests' count; `size` = count x element size).
    pub count: usize,
    /// Elements of this rank's send buffer.
    pub send: usize,
    /// Elements of this rank's receive buffer (0 where the rank receives nothing).
    pub recv: usize,
    /// Per-rank element counts of the uneven (`v`) collectives; empty for the others.
    pub counts: Vec<usize>,
}

impl Shape {
    /// `count` elements in both buffers.
    pub fn flat(count: usize) -> Shape {
        Shape {
            count,
            send: count,
            recv: count,
            counts: Vec::new(),
        }
    }

    /// `count` rounded down to whole blocks of `nranks`, with `send` blocks in the send buffer and
    /// `recv` blocks in the receive buffer.
    pub fn blocks(count: usize, nranks: usize, send: usize, recv: usize) -> Shape {
        let per = count / nranks;
        Shape {
            count: per * nranks,
            send: per * send,
            recv: per * recv,
            counts: Vec::new(),
        }
    }
}

/// How a backend holds buffers and times loops: host memory and the wall clock, or device memory
/// and CUDA events on the communicator's stream.
pub trait BenchBackend {
    /// The measured communicator.
    type Comm: Communicator;
    /// An owned buffer of `T` that borrows as the communicator's buffer type.
    type Owned<T: BenchElement>;
    /// The measured communicator.
    fn comm(&self) -> &Self::Comm;
    /// Barriers and the reductions of times and wrong counts: never measured, never checked.
    fn ctl(&self) -> &MpiComm;
    /// Which backend this is.
    fn backend(&self) -> Backend;
    /// A buffer holding `host`.
    ///
    /// # Errors
    /// Allocation and copy errors.
    fn upload<T: BenchElement>(&self, host: &[T]) -> anyhow::Result<Self::Owned<T>>;
    /// The contents of `buf`, after the work ordered before this call has completed.
    ///
    /// # Errors
    /// Copy and synchronization errors.
    fn download<T: BenchElement>(&self, buf: &Self::Owned<T>) -> anyhow::Result<Vec<T>>;
    /// `buf` as the communicator's buffer type.
    fn buf<T: BenchElement>(buf: &Self::Owned<T>) -> &Buf<'_, Self::Comm, T>;
    /// `buf` as the communicator's buffer type, mutably.
    fn buf_mut<T: BenchElement>(buf: &mut Self::Owned<T>) -> &mut BufMut<'_, Self::Comm, T>;
    /// Which call this backend times ([`Variant`]): the library's unless it says otherwise.
    fn variant(&self) -> Variant {
        Variant::Library
    }
    /// The backend's own all-reduce on the measured communicator's handle and these buffers (the
    /// `raw` variant; `send` `None`: in place), without the library's front end.
    ///
    /// # Errors
    /// No raw call on this backend; the backend's errors.
    fn raw_all_reduce<T: BenchElement>(
        &self,
        send: Option<&Self::Owned<T>>,
        buf: &mut Self::Owned<T>,
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        let _ = (send, buf, op);
        anyhow::bail!("{} has no raw all-reduce", self.backend().name())
    }
    /// The contents of `buf` (the communicator's buffer type, as a persistent plan lends it), after
    /// the work ordered before this call has completed.
    ///
    /// # Errors
    /// Copy and synchronization errors.
    fn download_buf<T: BenchElement>(&self, buf: &BufMutOf<Self, T>) -> anyhow::Result<Vec<T>>;
    /// Seconds taken by each of `iters` runs of a persistent plan (`run(Step::Start)` starts one,
    /// `run(Step::Wait)` completes it; a wait without a run in flight returns at once). By default
    /// each run is timed from its start to the end of its wait; the caller waits once more after.
    ///
    /// # Errors
    /// The first error of `run`; timer errors.
    fn time_plan(
        &self,
        iters: usize,
        run: &mut dyn FnMut(Step) -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<f64>> {
        self.time_iters(iters, true, &mut || {
            run(Step::Start)?;
            run(Step::Wait)
        })
    }
    /// Seconds taken by each of `iters` calls of `f`: with `blocking`, each call is waited for
    /// (stream synchronized) before the next starts and timed to its completion; otherwise the
    /// calls run back to back.
    ///
    /// # Errors
    /// The first error of `f`; timer errors.
    fn time_iters(
        &self,
        iters: usize,
        blocking: bool,
        f: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<f64>>;
}

/// A collective's hooks (nccl-tests' per-collective file): sizing, fill, the call, the expected
/// answer and the bus-bandwidth factor.
pub trait Collective {
    /// Its name, as nccl-tests names it (`allreduce`, `reducescatter`, ...).
    const NAME: &'static str;
    /// Whether it reduces (then `-o` applies and the `redop` column names the operation).
    const REDUCES: bool = false;
    /// Whether it has a root (then `-r` applies and the `root` column names it).
    const ROOTED: bool = false;
    /// Whether the library offers an in-place form (then the in-place columns are measured).
    const IN_PLACE: bool = false;
    /// Whether it moves data at all (`barrier` does not: one row, size 0).
    const SIZED: bool = true;

    /// `busbw = algbw x factor` for `nranks` ranks; `(n-1)/n` unless the collective says otherwise
    /// (the collectives that move one block per rank pair).
    fn busbw_factor(nranks: usize) -> f64 {
        timing::n_minus_one_over_n(nranks)
    }
    /// The buffers for about `count` elements (bytes / element size), on this rank.
    fn shape(count: usize, ctx: &Ctx) -> Shape;
    /// The value at element `i` of this rank's send buffer: [`moved`] unless the collective reduces.
    fn input<T: BenchElement>(ctx: &Ctx, shape: &Shape, i: usize) -> T {
        let _ = shape;
        moved(ctx.rank, i)
    }
    /// The value expected at element `i` of this rank's receive buffer (in place: of the one buffer),
    /// computed from [`input`](Self::input) of every rank; `None` where the element is not checked.
    fn expected<T: BenchElement>(ctx: &Ctx, shape: &Shape, i: usize) -> Option<T>;
    /// What this rank's receive buffer holds before the out-of-place call, where it matters (a
    /// broadcast's one buffer holds the root's data on the root); `None`: anything (the engine puts a
    /// value there that no input has, so untouched elements count as wrong).
    fn recv_init<T: BenchElement>(ctx: &Ctx, shape: &Shape, input: &[T]) -> Option<Vec<T>> {
        let _ = (ctx, shape, input);
        None
    }
    /// The out-of-place call (or the collective's only form).
    ///
    /// # Errors
    /// The library's errors.
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()>;
    /// The backend's own call on the same handle and buffers (the `raw` variant: the send buffer,
    /// or none in place), where the collective has one.
    ///
    /// # Errors
    /// The backend's errors; an error where the collective has no raw baseline.
    fn run_raw<B: BenchBackend, T: BenchElement>(
        b: &B,
        ctx: &Ctx,
        send: Option<&B::Owned<T>>,
        recv: &mut B::Owned<T>,
    ) -> anyhow::Result<()> {
        let _ = (b, ctx, send, recv);
        anyhow::bail!("{} has no raw baseline", Self::NAME)
    }
    /// The in-place call on `buf` (filled as the send buffer), where [`IN_PLACE`](Self::IN_PLACE).
    ///
    /// # Errors
    /// The library's errors; an error where the collective has no in-place form.
    fn run_in_place<B: BenchBackend, T: BenchElement>(
        b: &B,
        ctx: &Ctx,
        shape: &Shape,
        buf: &mut B::Owned<T>,
    ) -> anyhow::Result<()> {
        let _ = (b, ctx, shape, buf);
        anyhow::bail!("{} has no in-place form", Self::NAME)
    }
}

/// The buffers of one out-of-place call as the communicator takes them, with where this rank
/// stands and their sizes: what [`Collective::run`] gets.
pub struct Bufs<'a, B: BenchBackend, T: BenchElement> {
    /// Where this rank stands.
    pub ctx: &'a Ctx,
    /// The buffers' sizes.
    pub shape: &'a Shape,
    /// The send buffer.
    pub send: &'a BufOf<'a, B, T>,
    /// The receive buffer.
    pub recv: &'a mut BufMutOf<'a, B, T>,
}

impl<B: BenchBackend, T: BenchElement> std::fmt::Debug for Bufs<'_, B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bufs")
            .field("ctx", self.ctx)
            .field("shape", self.shape)
            .finish_non_exhaustive()
    }
}

/// This rank's send buffer for `shape`, filled with the collective's inputs.
pub fn fill<K: Collective, T: BenchElement>(ctx: &Ctx, shape: &Shape) -> Vec<T> {
    (0..shape.send).map(|i| K::input(ctx, shape, i)).collect()
}

/// Elements of `got` (this rank's output) that differ from the expected answer by more than `rel`
/// relative (0: exactly): nccl-tests' `#wrong`.
pub fn count_wrong<K: Collective, T: BenchElement>(
    ctx: &Ctx,
    shape: &Shape,
    got: &[T],
    rel: f64,
) -> u64 {
    got.iter()
        .enumerate()
        .filter(|&(i, &g)| K::expected::<T>(ctx, shape, i).is_some_and(|w| !g.within(w, rel)))
        .count() as u64
}
