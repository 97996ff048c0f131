//! The raw operations of the MPI host backend ([`Backend`]): the front end ([`crate::frontend`]) has
//! checked the arguments and agreed on the call; each operation here makes its MPI call through
//! [`MpiComm::run`] (blocking, or polled against the deadline on copies) or [`MpiComm::start`], and
//! turns the return code into a `Result`.

use mpi::ffi;
use std::ffi::{c_int, c_void};

use super::comm::MpiComm;
use super::raw::{self, either};
use super::request::{Form, MpiPending, Region};
use crate::comm::Tag;
use crate::element::Element;
use crate::error::Result;
use crate::frontend::Operation;
use crate::frontend::{replay, Backend, PlanCall, PlanOp, Start};
use crate::op::{BackendKind, ReduceOp};
use crate::operation::{Name, Op, OpKind};
use crate::record;
use crate::request::{Request, Scope};
use crate::rules::{CountLimit, Rules};
use crate::transport::Transport;

const BACKEND: BackendKind = BackendKind::MpiHost;

impl MpiComm {
    /// The argument rules of this communicator.
    pub(crate) fn rules(&self) -> Rules {
        Rules {
            backend: BACKEND,
            rank: self.rank,
            size: self.size,
            device: None,
            limit: CountLimit::Elements(raw::count_limit()),
            tag_ub: self.tag_ub,
        }
    }

    fn new_comm(&self, op: &'static str, raw: ffi::MPI_Comm) -> Result<Option<MpiComm>> {
        // SAFETY: reading the predefined null handle, a constant.
        if raw == unsafe { ffi::RSMPI_COMM_NULL } {
            return Ok(None);
        }
        // SAFETY: `raw` was just created by MPI for this rank and is owned by nobody else.
        let comm = unsafe { MpiComm::adopt(raw) }.map_err(|e| match e {
            crate::Error::Mpi {
                code,
                class,
                message,
                ..
            } => crate::Error::Mpi {
                op,
                code,
                class,
                message,
            },
            other => other,
        })?;
        Ok(Some(
            comm.with_checked(self.checked)
                .with_timeout(self.timeout)
                .sharing_progress(self),
        ))
    }
}

impl Backend for MpiComm {
    type Memory = crate::memory::Host;
    type Staging<'c, T: Element> = ();

    fn kind(&self) -> BackendKind {
        BACKEND
    }

    fn ranks(&self) -> (usize, usize) {
        (self.rank, self.size)
    }

    fn rules(&self) -> Rules {
        MpiComm::rules(self)
    }

    fn transport(&self) -> &dyn Transport {
        self
    }

    /// Without a deadline MPI's own call on the caller's buffers; under one its non-blocking twin on
    /// copies, polled against the deadline.
    fn record_path(&self, _op: OpKind, _start: Start, _bytes: usize) -> record::Path {
        match self.timeout {
            None => record::Path::NATIVE,
            Some(_) => record::Path::direct("polled"),
        }
    }

    /// MPI has no average: the front end sums and divides.
    fn native_avg(&self) -> bool {
        false
    }

    fn divide<T: Element>(&self, _op: &'static str, buf: &mut [T]) -> Result<()> {
        raw::finish_avg(ReduceOp::Avg, buf, self.size);
        Ok(())
    }

    fn raw_split(&self, op: &'static str, color: Option<i32>, key: i32) -> Result<Option<Self>> {
        self.ensure_usable(op)?;
        let c = color.unwrap_or_else(raw::undefined);
        // SAFETY: an MPI_Comm handle may start as any value; MPI_Comm_split overwrites it.
        let mut new: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: valid communicator; `new` is a valid out-pointer.
        raw::check(op, unsafe {
            ffi::MPI_Comm_split(self.raw, c, key, &mut new)
        })?;
        self.new_comm(op, new)
    }

    fn raw_dup(&self, op: &'static str) -> Result<Self> {
        self.ensure_usable(op)?;
        // SAFETY: an MPI_Comm handle may start as any value; MPI_Comm_dup overwrites it.
        let mut new: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: valid communicator; `new` is a valid out-pointer.
        raw::check(op, unsafe { ffi::MPI_Comm_dup(self.raw, &mut new) })?;
        self.new_comm(op, new)?
            .ok_or_else(|| crate::Error::invalid(op, "MPI returned MPI_COMM_NULL"))
    }

    /// MPI's persistent collective where the library has it and no deadline is set; else the
    /// front end's replay of the non-blocking call (see [`super::persistent`]).
    fn raw_init<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        call: PlanCall<'s, Self, T>,
    ) -> Result<Box<dyn PlanOp + 's>> {
        self.ensure_usable(op)?;
        if self.timeout.is_none() {
            if let Some(plan) = self.persistent_plan(op, &call)? {
                return Ok(Box::new(plan));
            }
        }
        Ok(replay(self, scope, call))
    }

    fn run<T: Element>(
        &self,
        name: Name,
        op: &mut Operation<'_, '_, Self, T>,
        n: usize,
        (): (),
    ) -> Result<()> {
        let shape = op.shape();
        let (read, written) = op.buffers_mut();
        let len = written.as_ref().map_or(0, |w| w.len());
        let regions = shape.fill(
            read.map(|r| Region::send(r)),
            written.map(|w| Region::written(shape.in_out(), w)),
        );
        // SAFETY: the regions are the caller's buffers, sized for the checked counts and borrowed
        // until the call returns (complete).
        unsafe { self.call::<T, Blocking>(name.as_str(), regions, n, len) }.map(drop)
    }

    fn start<'s, T: Element>(
        &'s self,
        name: Name,
        scope: &'s Scope<'s, '_>,
        op: Operation<'s, '_, Self, T>,
        n: usize,
        average: bool,
        (): (),
    ) -> Result<Request<'s>> {
        let (shape, read, mut written) = op.split();
        let len = written.as_ref().map_or(0, |w| w.len());
        let regions = shape.fill(
            read.map(Region::send),
            written
                .as_deref_mut()
                .map(|w| Region::written(shape.in_out(), w)),
        );
        // SAFETY: the regions are the caller's buffers, sized for the checked counts and borrowed
        // for 's; the scope completes the request before 's ends.
        let pending = unsafe { self.call::<T, Started>(name.as_str(), regions, n, len) }?;
        let pending = pending.finishing(shape.reduce_op(), average, written, self.size);
        Ok(scope.register(Box::new(pending)))
    }
}

/// How [`MpiComm::call`] makes an operation's MPI call: to completion ([`Blocking`]) or started
/// ([`Started`]). The one difference, on MPI, between a blocking operation and a non-blocking one.
pub(crate) trait Mode<'s, T: Element> {
    /// What the call gives back: the status, or the operation in flight.
    type Out;

    /// The call `call` on `regions`: [`MpiComm::run`] or [`MpiComm::start`].
    ///
    /// # Safety
    /// As [`MpiComm::run`] (blocking) or [`MpiComm::start`] (started).
    unsafe fn one<const N: usize>(
        comm: &MpiComm,
        op: &'static str,
        regions: [Region<'_>; N],
        call: impl FnOnce([*mut c_void; N], Form<'_>) -> c_int,
    ) -> Result<Self::Out>;

    /// A send and a receive together: [`MpiComm::exchange`] or [`MpiComm::start_pair`].
    ///
    /// # Safety
    /// As [`MpiComm::exchange`] (blocking) or [`MpiComm::start_pair`] (started).
    unsafe fn pair(
        comm: &MpiComm,
        op: &'static str,
        send: (Region<'_>, c_int, c_int),
        recv: (Region<'_>, c_int, c_int),
        tag: Tag,
    ) -> Result<Self::Out>;

    /// Keep `arrays` (counts, displacements) until the operation is complete.
    fn hold(out: Self::Out, arrays: Vec<Vec<c_int>>) -> Self::Out;

    /// Check that a receive got at most `len` elements: now, or at completion.
    fn received(out: Self::Out, op: &'static str, len: usize) -> Result<Self::Out>;
}

/// The blocking call (polled on copies under a deadline); gives the status.
pub(crate) struct Blocking;

/// The non-blocking call; gives the operation in flight, which the caller registers.
pub(crate) struct Started;

impl<T: Element> Mode<'_, T> for Blocking {
    type Out = ffi::MPI_Status;

    unsafe fn one<const N: usize>(
        comm: &MpiComm,
        op: &'static str,
        regions: [Region<'_>; N],
        call: impl FnOnce([*mut c_void; N], Form<'_>) -> c_int,
    ) -> Result<Self::Out> {
        // SAFETY: the function's contract.
        unsafe { comm.run(op, regions, call) }
    }

    unsafe fn pair(
        comm: &MpiComm,
        op: &'static str,
        send: (Region<'_>, c_int, c_int),
        recv: (Region<'_>, c_int, c_int),
        tag: Tag,
    ) -> Result<Self::Out> {
        // SAFETY: the function's contract.
        unsafe { comm.exchange(op, send, recv, raw::datatype::<T>(), tag) }
    }

    fn hold(out: Self::Out, _arrays: Vec<Vec<c_int>>) -> Self::Out {
        out
    }

    fn received(out: Self::Out, op: &'static str, len: usize) -> Result<Self::Out> {
        raw::received(op, &out, raw::datatype::<T>(), len)?;
        Ok(out)
    }
}

impl<'s, T: Element> Mode<'s, T> for Started {
    type Out = MpiPending<'s, T>;

    unsafe fn one<const N: usize>(
        comm: &MpiComm,
        op: &'static str,
        regions: [Region<'_>; N],
        call: impl FnOnce([*mut c_void; N], Form<'_>) -> c_int,
    ) -> Result<Self::Out> {
        // SAFETY: the function's contract.
        unsafe { comm.start::<T, N>(op, regions, |p, r| call(p, Form::Start(r))) }
    }

    unsafe fn pair(
        comm: &MpiComm,
        op: &'static str,
        send: (Region<'_>, c_int, c_int),
        recv: (Region<'_>, c_int, c_int),
        tag: Tag,
    ) -> Result<Self::Out> {
        // SAFETY: the function's contract.
        unsafe { comm.start_pair::<T>(op, send, recv, raw::datatype::<T>(), tag) }
    }

    fn hold(out: Self::Out, arrays: Vec<Vec<c_int>>) -> Self::Out {
        out.holding(arrays)
    }

    fn received(out: Self::Out, _op: &'static str, len: usize) -> Result<Self::Out> {
        Ok(out.expect(len))
    }
}

/// The one place an operation becomes its MPI call, for every MPI backend and both forms: the
/// host backend's slices, the staged paths' pinned buffers and a CUDA-aware MPI's device
/// addresses all come here as regions.
impl MpiComm {
    /// Make the MPI call of `op` on its regions, as `M` says (blocking, or started). `n` is the
    /// count the rules returned (per rank or per block; for `send_recv`, the count sent); `len`
    /// the written buffer's length in elements, which a receive checks what arrived against.
    ///
    /// # Errors
    /// As [`MpiComm::run`] or [`MpiComm::start`]; a receive's [`Error::Mpi`](crate::Error::Mpi)
    /// for a truncated message.
    ///
    /// # Safety
    /// The regions hold what the collective needs for the checked counts (a root-only buffer is
    /// absent, or [`Region::Absent`], off the root) and stay valid, and untouched by anyone else,
    /// until the call returns (blocking) or the operation completes (started); ranks, roots and
    /// tags are in range.
    pub(crate) unsafe fn call<'s, T: Element, M: Mode<'s, T>>(
        &self,
        name: &'static str,
        op: Op<Region<'_>, Region<'_>, &[usize]>,
        n: usize,
        len: usize,
    ) -> Result<M::Out> {
        let (n, dt, c) = (raw::int(n), raw::datatype::<T>(), self.raw);
        let mop = raw::op(op.reduce_op().unwrap_or(ReduceOp::Sum));
        // SAFETY: the function's contract, in every arm; each closure makes the one MPI call of
        // the operation (or its non-blocking twin) on the addresses of its regions, in order.
        unsafe {
            match op {
                Op::Barrier => M::one(self, name, [], |_, f| {
                    either!(f, MPI_Barrier / MPI_Ibarrier(c))
                }),
                Op::Broadcast { buf, root } => {
                    let root = root as c_int;
                    M::one(self, name, [buf], |p, f| {
                        either!(f, MPI_Bcast / MPI_Ibcast(p[0], n, dt, root, c))
                    })
                }
                Op::Reduce {
                    send, recv, root, ..
                } => {
                    let (recv, root) = (recv.unwrap_or_default(), root as c_int);
                    M::one(self, name, [send, recv], |p, f| {
                        either!(f, MPI_Reduce / MPI_Ireduce(p[0], p[1], n, dt, mop, root, c))
                    })
                }
                Op::AllReduce { send, recv, .. } => M::one(self, name, [send, recv], |p, f| {
                    either!(f, MPI_Allreduce / MPI_Iallreduce(p[0], p[1], n, dt, mop, c))
                }),
                Op::AllReduceInPlace { buf, .. } => {
                    // MPI_IN_PLACE (from the MPI's own header): MPI reads and writes `buf` only.
                    let place = raw::in_place();
                    M::one(self, name, [buf], |p, f| {
                        either!(
                            f,
                            MPI_Allreduce / MPI_Iallreduce(place, p[0], n, dt, mop, c)
                        )
                    })
                }
                Op::AllGather { send, recv } => M::one(self, name, [send, recv], |p, f| {
                    either!(
                        f,
                        MPI_Allgather / MPI_Iallgather(p[0], n, dt, p[1], n, dt, c)
                    )
                }),
                Op::AllGatherV { send, recv, counts } => self.call_v::<T, M>(
                    name,
                    [send, recv],
                    counts,
                    |p, Packed { mine, cs, ds }, f| {
                        either!(
                            f,
                            MPI_Allgatherv / MPI_Iallgatherv(p[0], mine, dt, p[1], cs, ds, dt, c)
                        )
                    },
                ),
                Op::Gather { send, recv, root } => {
                    let (recv, root) = (recv.unwrap_or_default(), root as c_int);
                    M::one(self, name, [send, recv], |p, f| {
                        either!(
                            f,
                            MPI_Gather / MPI_Igather(p[0], n, dt, p[1], n, dt, root, c)
                        )
                    })
                }
                Op::GatherV {
                    send,
                    recv,
                    counts,
                    root,
                } => {
                    let (recv, root) = (recv.unwrap_or_default(), root as c_int);
                    self.call_v::<T, M>(
                        name,
                        [send, recv],
                        counts,
                        |p, Packed { mine, cs, ds }, f| {
                            either!(
                                f,
                                MPI_Gatherv
                                    / MPI_Igatherv(p[0], mine, dt, p[1], cs, ds, dt, root, c)
                            )
                        },
                    )
                }
                Op::Scatter { send, recv, root } => {
                    let (send, root) = (send.unwrap_or_default(), root as c_int);
                    M::one(self, name, [send, recv], |p, f| {
                        either!(
                            f,
                            MPI_Scatter / MPI_Iscatter(p[0], n, dt, p[1], n, dt, root, c)
                        )
                    })
                }
                Op::ScatterV {
                    send,
                    recv,
                    counts,
                    root,
                } => {
                    let (send, root) = (send.unwrap_or_default(), root as c_int);
                    self.call_v::<T, M>(
                        name,
                        [send, recv],
                        counts,
                        |p, Packed { mine, cs, ds }, f| {
                            either!(
                                f,
                                MPI_Scatterv
                                    / MPI_Iscatterv(p[0], cs, ds, dt, p[1], mine, dt, root, c)
                            )
                        },
                    )
                }
                Op::ReduceScatter { send, recv, .. } => M::one(self, name, [send, recv], |p, f| {
                    either!(
                        f,
                        MPI_Reduce_scatter_block
                            / MPI_Ireduce_scatter_block(p[0], p[1], n, dt, mop, c)
                    )
                }),
                Op::AllToAll { send, recv } => M::one(self, name, [send, recv], |p, f| {
                    either!(f, MPI_Alltoall / MPI_Ialltoall(p[0], n, dt, p[1], n, dt, c))
                }),
                Op::AllToAllV {
                    send,
                    send_counts,
                    recv,
                    recv_counts,
                } => {
                    let ((sc, sd), (rc, rd)) = (raw::packed(send_counts), raw::packed(recv_counts));
                    let arrays = [&sc, &sd, &rc, &rd].map(|a| Region::send(a));
                    let [a0, a1, a2, a3] = arrays;
                    let out = M::one(self, name, [send, recv, a0, a1, a2, a3], |p, f| {
                        let [sc, sd, rc, rd] = [p[2], p[3], p[4], p[5]].map(|a| a.cast::<c_int>());
                        either!(
                            f,
                            MPI_Alltoallv / MPI_Ialltoallv(p[0], sc, sd, dt, p[1], rc, rd, dt, c)
                        )
                    })?;
                    Ok(M::hold(out, vec![sc, sd, rc, rd]))
                }
                Op::Send { buf, dest, tag } => {
                    let dest = dest as c_int;
                    M::one(self, name, [buf], |p, f| {
                        either!(f, MPI_Send / MPI_Isend(p[0], n, dt, dest, tag, c))
                    })
                }
                Op::Recv { buf, source, tag } => {
                    let source = source as c_int;
                    let out = M::one(self, name, [buf], |p, f| match f {
                        Form::Blocking(status) => {
                            ffi::MPI_Recv(p[0], n, dt, source, tag, c, status)
                        }
                        Form::Start(r) => ffi::MPI_Irecv(p[0], n, dt, source, tag, c, r),
                    })?;
                    M::received(out, name, len)
                }
                Op::SendRecv {
                    send,
                    dest,
                    recv,
                    source,
                    tag,
                } => {
                    let (dest, source) = (dest as c_int, source as c_int);
                    let out = M::pair(
                        self,
                        name,
                        (send, n, dest),
                        (recv, raw::int(len), source),
                        tag,
                    )?;
                    M::received(out, name, len)
                }
            }
        }
    }

    /// [`call`](Self::call) of a `*v` collective: `call` gets the addresses of the send and
    /// receive buffers, [`Packed`] and the form; the arrays go to MPI as two more regions and
    /// are kept until the operation completes.
    ///
    /// # Safety
    /// As [`call`](Self::call); `counts` holds one count a rank, the rules checked against
    /// MPI's `int`.
    unsafe fn call_v<'s, T: Element, M: Mode<'s, T>>(
        &self,
        name: &'static str,
        [send, recv]: [Region<'_>; 2],
        counts: &[usize],
        call: impl FnOnce([*mut c_void; 2], Packed, Form<'_>) -> c_int,
    ) -> Result<M::Out> {
        let (cs, ds) = raw::packed(counts);
        let mine = cs[self.rank];
        let regions = [send, recv, Region::send(&cs), Region::send(&ds)];
        // SAFETY: the function's contract; `p[2]`, `p[3]` are the arrays, which outlive a blocking
        // call and travel with a started one.
        let out = unsafe {
            M::one(self, name, regions, |p, form| {
                let (cs, ds) = (p[2].cast::<c_int>(), p[3].cast::<c_int>());
                call([p[0], p[1]], Packed { mine, cs, ds }, form)
            })
        }?;
        Ok(M::hold(out, vec![cs, ds]))
    }
}

/// What a `*v` collective with one count per rank passes to MPI besides its buffers: this rank's
/// count, and the counts and packed displacements of every rank (`c_int` arrays that MPI reads).
struct Packed {
    /// This rank's count.
    mine: c_int,
    /// Every rank's count.
    cs: *mut c_int,
    /// Every rank's packed displacement.
    ds: *mut c_int,
}
