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
use crate::frontend::{replay, run_each, start_each, Backend, PlanCall, PlanOp, Start};
use crate::op::{BackendKind, ReduceOp};
use crate::operation::{Name, OpKind};
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
        run_each!(self, name, op, n)
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
        start_each!(self, name, scope, op, n, average)
    }
}

/// Each operation of `run` and `start`, with its fields as arguments.
#[allow(clippy::too_many_arguments)]
impl MpiComm {
    pub(super) fn raw_barrier(&self, op: &'static str) -> Result<()> {
        // SAFETY: a barrier takes no buffer; both forms on this communicator.
        unsafe {
            self.run(op, [], |_, form| {
                either!(form, MPI_Barrier / MPI_Ibarrier(self.raw))
            })
        }
        .map(drop)
    }

    pub(super) fn raw_broadcast<T: Element>(
        &self,
        op: &'static str,
        buf: &mut [T],
        root: usize,
        n: usize,
    ) -> Result<()> {
        let (n, dt) = (raw::int(n), raw::datatype::<T>());
        // SAFETY: `buf` holds `n` elements of `T`, described by its datatype; root checked in range.
        unsafe {
            self.run(op, [Region::in_out(buf)], |p, form| {
                either!(
                    form,
                    MPI_Bcast / MPI_Ibcast(p[0], n, dt, root as c_int, self.raw)
                )
            })
        }
        .map(drop)
    }

    pub(super) fn raw_reduce<T: Element>(
        &self,
        op: &'static str,
        send: &[T],
        recv: Option<&mut [T]>,
        red: ReduceOp,
        root: usize,
        n: usize,
    ) -> Result<()> {
        let (n, dt, mop) = (raw::int(n), raw::datatype::<T>(), raw::op(red));
        let regions = [Region::send(send), Region::recv_opt(recv)];
        // SAFETY: `send` holds `n` elements; on the root `recv` holds `n` too (checked), elsewhere MPI
        // ignores the (null) receive buffer; root in range; the datatype describes `T`.
        unsafe {
            self.run(op, regions, |p, form| {
                either!(
                    form,
                    MPI_Reduce / MPI_Ireduce(p[0], p[1], n, dt, mop, root as c_int, self.raw)
                )
            })
        }
        .map(drop)
    }

    pub(super) fn raw_all_reduce<T: Element>(
        &self,
        op: &'static str,
        send: Option<&[T]>,
        recv: &mut [T],
        red: ReduceOp,
        n: usize,
    ) -> Result<()> {
        let (n, dt, mop) = (raw::int(n), raw::datatype::<T>(), raw::op(red));
        match send {
            // SAFETY: both buffers hold `n` elements of `T` (checked), described by its datatype;
            // `run` returns before the borrows end.
            Some(send) => unsafe {
                self.run(op, [Region::send(send), Region::recv(recv)], |p, form| {
                    either!(
                        form,
                        MPI_Allreduce / MPI_Iallreduce(p[0], p[1], n, dt, mop, self.raw)
                    )
                })
            },
            // SAFETY: `recv` holds `n` elements of `T`; MPI_IN_PLACE (from the MPI's own header)
            // makes MPI read and write `recv` (or its copy) only.
            None => unsafe {
                let place = raw::in_place();
                self.run(op, [Region::in_out(recv)], |p, form| {
                    either!(
                        form,
                        MPI_Allreduce / MPI_Iallreduce(place, p[0], n, dt, mop, self.raw)
                    )
                })
            },
        }
        .map(drop)
    }

    pub(super) fn raw_all_gather<T: Element>(
        &self,
        op: &'static str,
        send: &[T],
        recv: &mut [T],
        n: usize,
    ) -> Result<()> {
        let (n, dt) = (raw::int(n), raw::datatype::<T>());
        // SAFETY: `send` holds `n` and `recv` holds `size * n` elements of `T` (checked).
        unsafe {
            self.run(op, [Region::send(send), Region::recv(recv)], |p, form| {
                either!(
                    form,
                    MPI_Allgather / MPI_Iallgather(p[0], n, dt, p[1], n, dt, self.raw)
                )
            })
        }
        .map(drop)
    }

    pub(super) fn raw_all_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<()> {
        let dt = raw::datatype::<T>();
        let regions = [Region::send(send), Region::recv(recv)];
        // SAFETY: `send` holds counts[rank] elements and `recv` the sum of counts, laid out at the packed
        // displacements `d` (all checked, all within int range).
        unsafe {
            self.run_v(op, regions, counts, |p, Packed { mine, c, d }, form| {
                either!(
                    form,
                    MPI_Allgatherv / MPI_Iallgatherv(p[0], mine, dt, p[1], c, d, dt, self.raw)
                )
            })
        }
    }

    pub(super) fn raw_gather<T: Element>(
        &self,
        op: &'static str,
        send: &[T],
        recv: Option<&mut [T]>,
        root: usize,
        n: usize,
    ) -> Result<()> {
        let (n, dt, root) = (raw::int(n), raw::datatype::<T>(), root as c_int);
        // SAFETY: `send` holds `n` elements; on the root `recv` holds `size * n` (checked); MPI ignores
        // the (null) receive buffer elsewhere.
        unsafe {
            self.run(
                op,
                [Region::send(send), Region::recv_opt(recv)],
                |p, form| {
                    either!(
                        form,
                        MPI_Gather / MPI_Igather(p[0], n, dt, p[1], n, dt, root, self.raw)
                    )
                },
            )
        }
        .map(drop)
    }

    pub(super) fn raw_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &[T],
        recv: Option<&mut [T]>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        let (dt, root) = (raw::datatype::<T>(), root as c_int);
        let regions = [Region::send(send), Region::recv_opt(recv)];
        // SAFETY: `send` holds counts[rank] elements; on the root `recv` holds the sum of counts at the
        // packed displacements (checked); elsewhere MPI ignores the receive arguments.
        unsafe {
            self.run_v(op, regions, counts, |p, Packed { mine, c, d }, form| {
                either!(
                    form,
                    MPI_Gatherv / MPI_Igatherv(p[0], mine, dt, p[1], c, d, dt, root, self.raw)
                )
            })
        }
    }

    pub(super) fn raw_scatter<T: Element>(
        &self,
        op: &'static str,
        send: Option<&[T]>,
        recv: &mut [T],
        root: usize,
        n: usize,
    ) -> Result<()> {
        let (n, dt, root) = (raw::int(n), raw::datatype::<T>(), root as c_int);
        // SAFETY: `recv` holds `n` elements; on the root `send` holds `size * n` (checked); MPI ignores
        // the (null) send buffer elsewhere.
        unsafe {
            self.run(
                op,
                [Region::send_opt(send), Region::recv(recv)],
                |p, form| {
                    either!(
                        form,
                        MPI_Scatter / MPI_Iscatter(p[0], n, dt, p[1], n, dt, root, self.raw)
                    )
                },
            )
        }
        .map(drop)
    }

    pub(super) fn raw_scatter_v<T: Element>(
        &self,
        op: &'static str,
        send: Option<&[T]>,
        recv: &mut [T],
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        let (dt, root) = (raw::datatype::<T>(), root as c_int);
        let regions = [Region::send_opt(send), Region::recv(recv)];
        // SAFETY: `recv` holds counts[rank] elements; on the root `send` holds the sum of counts at the
        // packed displacements (checked); elsewhere MPI ignores the send arguments.
        unsafe {
            self.run_v(op, regions, counts, |p, Packed { mine, c, d }, form| {
                either!(
                    form,
                    MPI_Scatterv / MPI_Iscatterv(p[0], c, d, dt, p[1], mine, dt, root, self.raw)
                )
            })
        }
    }

    pub(super) fn raw_reduce_scatter<T: Element>(
        &self,
        op: &'static str,
        send: &[T],
        recv: &mut [T],
        red: ReduceOp,
        n: usize,
    ) -> Result<()> {
        let (n, dt, mop) = (raw::int(n), raw::datatype::<T>(), raw::op(red));
        // SAFETY: `send` holds `size * n` and `recv` holds `n` elements of `T` (checked).
        unsafe {
            self.run(op, [Region::send(send), Region::recv(recv)], |p, form| {
                either!(
                    form,
                    MPI_Reduce_scatter_block
                        / MPI_Ireduce_scatter_block(p[0], p[1], n, dt, mop, self.raw)
                )
            })
        }
        .map(drop)
    }

    pub(super) fn raw_all_to_all<T: Element>(
        &self,
        op: &'static str,
        send: &[T],
        recv: &mut [T],
        n: usize,
    ) -> Result<()> {
        let (n, dt) = (raw::int(n), raw::datatype::<T>());
        // SAFETY: both buffers hold `size` blocks of `n` elements of `T` (checked).
        unsafe {
            self.run(op, [Region::send(send), Region::recv(recv)], |p, form| {
                either!(
                    form,
                    MPI_Alltoall / MPI_Ialltoall(p[0], n, dt, p[1], n, dt, self.raw)
                )
            })
        }
        .map(drop)
    }

    pub(super) fn raw_all_to_all_v<T: Element>(
        &self,
        op: &'static str,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<()> {
        let ((sc, sd), (rc, rd)) = (raw::packed(send_counts), raw::packed(recv_counts));
        let dt = raw::datatype::<T>();
        let regions = [
            Region::send(send),
            Region::recv(recv),
            Region::send(&sc),
            Region::send(&sd),
            Region::send(&rc),
            Region::send(&rd),
        ];
        // SAFETY: `send` and `recv` hold the sums of their counts at packed displacements (checked);
        // `p[2..6]` are the four arrays.
        unsafe {
            self.run(op, regions, |p, form| {
                let [sc, sd, rc, rd] = [p[2], p[3], p[4], p[5]].map(|a| a.cast::<c_int>());
                either!(
                    form,
                    MPI_Alltoallv / MPI_Ialltoallv(p[0], sc, sd, dt, p[1], rc, rd, dt, self.raw)
                )
            })
        }
        .map(drop)
    }

    pub(super) fn raw_send<T: Element>(
        &self,
        op: &'static str,
        buf: &[T],
        dest: usize,
        tag: Tag,
        n: usize,
    ) -> Result<()> {
        let (n, dt, dest) = (raw::int(n), raw::datatype::<T>(), dest as c_int);
        // SAFETY: `buf` holds `n` elements of `T`; destination and tag checked in range.
        unsafe {
            self.run(op, [Region::send(buf)], |p, form| {
                either!(form, MPI_Send / MPI_Isend(p[0], n, dt, dest, tag, self.raw))
            })
        }
        .map(drop)
    }

    pub(super) fn raw_recv<T: Element>(
        &self,
        op: &'static str,
        buf: &mut [T],
        source: usize,
        tag: Tag,
        n: usize,
    ) -> Result<()> {
        let (n, dt, source) = (raw::int(n), raw::datatype::<T>(), source as c_int);
        let len = buf.len();
        // SAFETY: `buf` has room for `n` elements of `T` (a longer message is MPI_ERR_TRUNCATE, not an
        // overflow); the status is a valid out-pointer.
        let status = unsafe {
            self.run(op, [Region::recv(buf)], |p, form| match form {
                Form::Blocking(status) => ffi::MPI_Recv(p[0], n, dt, source, tag, self.raw, status),
                Form::Start(r) => ffi::MPI_Irecv(p[0], n, dt, source, tag, self.raw, r),
            })
        }?;
        raw::received(op, &status, dt, len)
    }

    pub(super) fn raw_send_recv<T: Element>(
        &self,
        op: &'static str,
        send: &[T],
        dest: usize,
        recv: &mut [T],
        source: usize,
        tag: Tag,
        (sn, rn): (usize, usize),
    ) -> Result<()> {
        let (sn, rn, dt) = (raw::int(sn), raw::int(rn), raw::datatype::<T>());
        let (dest, source) = (dest as c_int, source as c_int);
        // SAFETY: `send` holds `sn` and `recv` has room for `rn` elements of `T`; ranks and tag checked.
        let status = unsafe {
            self.exchange(
                op,
                (Region::send(send), sn, dest),
                (Region::recv(&mut *recv), rn, source),
                dt,
                tag,
            )
        }?;
        raw::received(op, &status, dt, recv.len())
    }

    pub(super) fn raw_i_all_reduce<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
        red: ReduceOp,
        average: bool,
        n: usize,
    ) -> Result<Request<'s>> {
        let (n, dt, mop) = (raw::int(n), raw::datatype::<T>(), raw::op(red));
        // SAFETY: both buffers hold `n` elements of `T` and stay borrowed for 's, and the scope completes
        // the request before 's ends, so MPI never touches them after the borrows end.
        let pending = unsafe {
            self.start::<T, 2>(
                op,
                [Region::send(send), Region::recv(&mut *recv)],
                |p, r| ffi::MPI_Iallreduce(p[0], p[1], n, dt, mop, self.raw, r),
            )
        }?;
        let finish = if average { ReduceOp::Avg } else { red };
        Ok(scope.register(Box::new(pending.average(finish, recv, self.size))))
    }

    pub(super) fn raw_i_broadcast<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        root: usize,
        n: usize,
    ) -> Result<Request<'s>> {
        let (n, dt) = (raw::int(n), raw::datatype::<T>());
        // SAFETY: `buf` holds `n` elements and stays borrowed for 's; the scope completes the request
        // before 's ends.
        let pending = unsafe {
            self.start::<T, 1>(op, [Region::in_out(buf)], |p, r| {
                ffi::MPI_Ibcast(p[0], n, dt, root as c_int, self.raw, r)
            })
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_all_gather<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
        n: usize,
    ) -> Result<Request<'s>> {
        let (n, dt) = (raw::int(n), raw::datatype::<T>());
        // SAFETY: `send` holds `n` and `recv` `size * n` elements, borrowed for 's; the scope completes the
        // request before 's ends.
        let pending = unsafe {
            self.start::<T, 2>(op, [Region::send(send), Region::recv(recv)], |p, r| {
                ffi::MPI_Iallgather(p[0], n, dt, p[1], n, dt, self.raw, r)
            })
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_send<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: usize,
        tag: Tag,
        n: usize,
    ) -> Result<Request<'s>> {
        let (n, dt, dest) = (raw::int(n), raw::datatype::<T>(), dest as c_int);
        // SAFETY: `buf` holds `n` elements, borrowed for 's; the scope completes the request before 's ends.
        let pending = unsafe {
            self.start::<T, 1>(op, [Region::send(buf)], |p, r| {
                ffi::MPI_Isend(p[0], n, dt, dest, tag, self.raw, r)
            })
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_recv<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        source: usize,
        tag: Tag,
        n: usize,
    ) -> Result<Request<'s>> {
        let (n, dt, source) = (raw::int(n), raw::datatype::<T>(), source as c_int);
        let len = buf.len();
        // SAFETY: `buf` has room for `n` elements, borrowed for 's; the scope completes the request before
        // 's ends.
        let pending = unsafe {
            self.start::<T, 1>(op, [Region::recv(buf)], |p, r| {
                ffi::MPI_Irecv(p[0], n, dt, source, tag, self.raw, r)
            })
        }?;
        Ok(scope.register(Box::new(pending.expect(len))))
    }

    pub(super) fn raw_i_barrier<'s>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
    ) -> Result<Request<'s>> {
        Ok(scope.register(Box::new(self.start_barrier(op)?)))
    }

    pub(super) fn raw_i_reduce<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        mut recv: Option<&'s mut [T]>,
        red: ReduceOp,
        average: bool,
        root: usize,
        n: usize,
    ) -> Result<Request<'s>> {
        let regions = (Region::send(send), Region::recv_opt(recv.as_deref_mut()));
        // SAFETY: `send` holds `n` elements and on the root `recv` too (checked), both borrowed
        // for 's; the scope completes the request before 's ends.
        let mut pending =
            unsafe { self.start_reduce::<T>(op, regions.0, regions.1, red, root, n) }?;
        if let Some(recv) = recv.filter(|_| average) {
            pending = pending.average(ReduceOp::Avg, recv, self.size);
        }
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_all_reduce_in_place<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        red: ReduceOp,
        average: bool,
        n: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: `buf` holds `n` elements, borrowed for 's; the scope completes the request
        // before 's ends.
        let pending =
            unsafe { self.start_all_reduce_in_place::<T>(op, Region::in_out(&mut *buf), red, n) }?;
        let finish = if average { ReduceOp::Avg } else { red };
        Ok(scope.register(Box::new(pending.average(finish, buf, self.size))))
    }

    pub(super) fn raw_i_reduce_scatter<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
        red: ReduceOp,
        average: bool,
        n: usize,
    ) -> Result<Request<'s>> {
        let regions = (Region::send(send), Region::recv(&mut *recv));
        // SAFETY: `send` holds `size * n` and `recv` `n` elements (checked), borrowed for 's; the
        // scope completes the request before 's ends.
        let pending = unsafe { self.start_reduce_scatter::<T>(op, regions.0, regions.1, red, n) }?;
        let finish = if average { ReduceOp::Avg } else { red };
        Ok(scope.register(Box::new(pending.average(finish, recv, self.size))))
    }

    pub(super) fn raw_i_all_to_all<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
        n: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: both buffers hold `size` blocks of `n` elements (checked), borrowed for 's; the
        // scope completes the request before 's ends.
        let pending =
            unsafe { self.start_all_to_all::<T>(op, Region::send(send), Region::recv(recv), n) }?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_all_to_all_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        send_counts: &[usize],
        recv: &'s mut [T],
        recv_counts: &[usize],
    ) -> Result<Request<'s>> {
        // SAFETY: both buffers hold the sums of their counts (checked), borrowed for 's; the scope
        // completes the request before 's ends.
        let pending = unsafe {
            self.start_all_to_all_v::<T>(
                op,
                Region::send(send),
                send_counts,
                Region::recv(recv),
                recv_counts,
            )
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_all_gather_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
        counts: &[usize],
    ) -> Result<Request<'s>> {
        // SAFETY: `send` holds counts[rank] and `recv` the sum of counts (checked), borrowed for
        // 's; the scope completes the request before 's ends.
        let pending = unsafe {
            self.start_all_gather_v::<T>(op, Region::send(send), Region::recv(recv), counts)
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_gather<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: Option<&'s mut [T]>,
        root: usize,
        n: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: `send` holds `n` and on the root `recv` `size * n` elements (checked), borrowed
        // for 's; the scope completes the request before 's ends.
        let pending = unsafe {
            self.start_gather::<T>(op, Region::send(send), Region::recv_opt(recv), root, n)
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_gather_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: Option<&'s mut [T]>,
        counts: &[usize],
        root: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: `send` holds counts[rank] and on the root `recv` the sum of counts (checked),
        // borrowed for 's; the scope completes the request before 's ends.
        let pending = unsafe {
            self.start_gather_v::<T>(op, Region::send(send), Region::recv_opt(recv), counts, root)
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_scatter<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s [T]>,
        recv: &'s mut [T],
        root: usize,
        n: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: `recv` holds `n` and on the root `send` `size * n` elements (checked), borrowed
        // for 's; the scope completes the request before 's ends.
        let pending = unsafe {
            self.start_scatter::<T>(op, Region::send_opt(send), Region::recv(recv), root, n)
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_scatter_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s [T]>,
        recv: &'s mut [T],
        counts: &[usize],
        root: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: `recv` holds counts[rank] and on the root `send` the sum of counts (checked),
        // borrowed for 's; the scope completes the request before 's ends.
        let pending = unsafe {
            self.start_scatter_v::<T>(op, Region::send_opt(send), Region::recv(recv), counts, root)
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    pub(super) fn raw_i_send_recv<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        dest: usize,
        recv: &'s mut [T],
        source: usize,
        tag: Tag,
        (sn, rn): (usize, usize),
    ) -> Result<Request<'s>> {
        // SAFETY: `send` holds `sn` and `recv` has room for `rn` elements, borrowed for 's; ranks
        // and tag checked; the scope completes the request before 's ends.
        let pending = unsafe {
            self.start_send_recv::<T>(
                op,
                (Region::send(send), sn, dest),
                (Region::recv(recv), rn, source),
                tag,
            )
        }?;
        Ok(scope.register(Box::new(pending)))
    }
}

/// The non-blocking starts shared by every MPI backend: each makes one `MPI_I*` call on the
/// regions it is given (host slices, the staged backends' pinned buffers, or device addresses on a
/// CUDA-aware MPI) and returns the operation in flight, which the caller registers in its scope
/// (wrapped, on the device backends, with what completion must do there). Counts arrays travel
/// with the operation, since MPI reads them until it completes.
///
/// # Safety (every function here)
/// The regions hold what the collective needs for the (checked) counts, and their memory stays
/// valid and untouched by anyone else for `'s`: the pending operation is completed before `'s`
/// ends. Roots are in range.
impl MpiComm {
    /// `MPI_Ibarrier`.
    pub(crate) fn start_barrier<'s>(&self, op: &'static str) -> Result<MpiPending<'s, u8>> {
        // SAFETY: a barrier takes no buffer.
        unsafe { self.start::<u8, 0>(op, [], |_, r| ffi::MPI_Ibarrier(self.raw, r)) }
    }

    /// `MPI_Ireduce` of `n` elements (`recv` absent off the root).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn start_reduce<'s, T: Element>(
        &self,
        op: &'static str,
        send: Region<'_>,
        recv: Region<'_>,
        red: ReduceOp,
        root: usize,
        n: usize,
    ) -> Result<MpiPending<'s, T>> {
        let (n, dt, mop, root) = (
            raw::int(n),
            raw::datatype::<T>(),
            raw::op(red),
            root as c_int,
        );
        // SAFETY: the function's contract.
        unsafe {
            self.start(op, [send, recv], |p, r| {
                ffi::MPI_Ireduce(p[0], p[1], n, dt, mop, root, self.raw, r)
            })
        }
    }

    /// `MPI_Iallreduce` of `n` elements with `MPI_IN_PLACE`.
    pub(crate) unsafe fn start_all_reduce_in_place<'s, T: Element>(
        &self,
        op: &'static str,
        buf: Region<'_>,
        red: ReduceOp,
        n: usize,
    ) -> Result<MpiPending<'s, T>> {
        let (n, dt, mop, place) = (
            raw::int(n),
            raw::datatype::<T>(),
            raw::op(red),
            raw::in_place(),
        );
        // SAFETY: the function's contract; MPI_IN_PLACE (from the MPI's own header) makes MPI read
        // and write `buf` (or its copy) only.
        unsafe {
            self.start(op, [buf], |p, r| {
                ffi::MPI_Iallreduce(place, p[0], n, dt, mop, self.raw, r)
            })
        }
    }

    /// `MPI_Ireduce_scatter_block` into blocks of `n` elements.
    pub(crate) unsafe fn start_reduce_scatter<'s, T: Element>(
        &self,
        op: &'static str,
        send: Region<'_>,
        recv: Region<'_>,
        red: ReduceOp,
        n: usize,
    ) -> Result<MpiPending<'s, T>> {
        let (n, dt, mop) = (raw::int(n), raw::datatype::<T>(), raw::op(red));
        // SAFETY: the function's contract.
        unsafe {
            self.start(op, [send, recv], |p, r| {
                ffi::MPI_Ireduce_scatter_block(p[0], p[1], n, dt, mop, self.raw, r)
            })
        }
    }

    /// `MPI_Ialltoall` of blocks of `n` elements.
    pub(crate) unsafe fn start_all_to_all<'s, T: Element>(
        &self,
        op: &'static str,
        send: Region<'_>,
        recv: Region<'_>,
        n: usize,
    ) -> Result<MpiPending<'s, T>> {
        let (n, dt) = (raw::int(n), raw::datatype::<T>());
        // SAFETY: the function's contract.
        unsafe {
            self.start(op, [send, recv], |p, r| {
                ffi::MPI_Ialltoall(p[0], n, dt, p[1], n, dt, self.raw, r)
            })
        }
    }

    /// `MPI_Ialltoallv` with packed displacements.
    pub(crate) unsafe fn start_all_to_all_v<'s, T: Element>(
        &self,
        op: &'static str,
        send: Region<'_>,
        send_counts: &[usize],
        recv: Region<'_>,
        recv_counts: &[usize],
    ) -> Result<MpiPending<'s, T>> {
        let ((sc, sd), (rc, rd)) = (raw::packed(send_counts), raw::packed(recv_counts));
        let dt = raw::datatype::<T>();
        let regions = [
            send,
            recv,
            Region::send(&sc),
            Region::send(&sd),
            Region::send(&rc),
            Region::send(&rd),
        ];
        // SAFETY: the function's contract; `p[2..6]` are the four arrays, which travel with the
        // operation (or are copied under a deadline).
        let pending = unsafe {
            self.start::<T, 6>(op, regions, |p, r| {
                let [sc, sd, rc, rd] = [p[2], p[3], p[4], p[5]].map(|a| a.cast::<c_int>());
                ffi::MPI_Ialltoallv(p[0], sc, sd, dt, p[1], rc, rd, dt, self.raw, r)
            })
        }?;
        Ok(pending.holding(vec![sc, sd, rc, rd]))
    }

    /// `MPI_Iallgatherv` with packed displacements.
    pub(crate) unsafe fn start_all_gather_v<'s, T: Element>(
        &self,
        op: &'static str,
        send: Region<'_>,
        recv: Region<'_>,
        counts: &[usize],
    ) -> Result<MpiPending<'s, T>> {
        let dt = raw::datatype::<T>();
        // SAFETY: the function's contract.
        unsafe {
            self.start_v(op, [send, recv], counts, |p, Packed { mine, c, d }, r| {
                ffi::MPI_Iallgatherv(p[0], mine, dt, p[1], c, d, dt, self.raw, r)
            })
        }
    }

    /// `MPI_Igather` of blocks of `n` elements (`recv` absent off the root).
    pub(crate) unsafe fn start_gather<'s, T: Element>(
        &self,
        op: &'static str,
        send: Region<'_>,
        recv: Region<'_>,
        root: usize,
        n: usize,
    ) -> Result<MpiPending<'s, T>> {
        let (n, dt, root) = (raw::int(n), raw::datatype::<T>(), root as c_int);
        // SAFETY: the function's contract.
        unsafe {
            self.start(op, [send, recv], |p, r| {
                ffi::MPI_Igather(p[0], n, dt, p[1], n, dt, root, self.raw, r)
            })
        }
    }

    /// `MPI_Igatherv` with packed displacements (`recv` absent off the root).
    pub(crate) unsafe fn start_gather_v<'s, T: Element>(
        &self,
        op: &'static str,
        send: Region<'_>,
        recv: Region<'_>,
        counts: &[usize],
        root: usize,
    ) -> Result<MpiPending<'s, T>> {
        let (dt, root) = (raw::datatype::<T>(), root as c_int);
        // SAFETY: the function's contract.
        unsafe {
            self.start_v(op, [send, recv], counts, |p, Packed { mine, c, d }, r| {
                ffi::MPI_Igatherv(p[0], mine, dt, p[1], c, d, dt, root, self.raw, r)
            })
        }
    }

    /// `MPI_Iscatter` of blocks of `n` elements (`send` absent off the root).
    pub(crate) unsafe fn start_scatter<'s, T: Element>(
        &self,
        op: &'static str,
        send: Region<'_>,
        recv: Region<'_>,
        root: usize,
        n: usize,
    ) -> Result<MpiPending<'s, T>> {
        let (n, dt, root) = (raw::int(n), raw::datatype::<T>(), root as c_int);
        // SAFETY: the function's contract.
        unsafe {
            self.start(op, [send, recv], |p, r| {
                ffi::MPI_Iscatter(p[0], n, dt, p[1], n, dt, root, self.raw, r)
            })
        }
    }

    /// `MPI_Iscatterv` with packed displacements (`send` absent off the root).
    pub(crate) unsafe fn start_scatter_v<'s, T: Element>(
        &self,
        op: &'static str,
        send: Region<'_>,
        recv: Region<'_>,
        counts: &[usize],
        root: usize,
    ) -> Result<MpiPending<'s, T>> {
        let (dt, root) = (raw::datatype::<T>(), root as c_int);
        // SAFETY: the function's contract.
        unsafe {
            self.start_v(op, [send, recv], counts, |p, Packed { mine, c, d }, r| {
                ffi::MPI_Iscatterv(p[0], c, d, dt, p[1], mine, dt, root, self.raw, r)
            })
        }
    }

    /// `MPI_Irecv` into `recv` and `MPI_Isend` of `send`, completed together; the receive's
    /// length is checked at completion.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn start_send_recv<'s, T: Element>(
        &self,
        op: &'static str,
        (send, sn, dest): (Region<'_>, usize, usize),
        (recv, rn, source): (Region<'_>, usize, usize),
        tag: Tag,
    ) -> Result<MpiPending<'s, T>> {
        let dt = raw::datatype::<T>();
        // SAFETY: the function's contract; ranks and tag checked.
        let pending = unsafe {
            self.start_pair::<T>(
                op,
                (send, raw::int(sn), dest as c_int),
                (recv, raw::int(rn), source as c_int),
                dt,
                tag,
            )
        }?;
        Ok(pending.expect(rn))
    }
}

/// What a `*v` collective with one count per rank passes to MPI besides its buffers: this rank's
/// count, and the counts and packed displacements of every rank (`c_int` arrays that MPI reads).
struct Packed {
    /// This rank's count.
    mine: c_int,
    /// Every rank's count.
    c: *mut c_int,
    /// Every rank's packed displacement.
    d: *mut c_int,
}

/// The `*v` collectives' common part: `counts` packed into the arrays of [`Packed`], which go to
/// MPI as two more regions after the send and receive buffers.
impl MpiComm {
    /// [`MpiComm::run`] of a `*v` collective: `call` gets the addresses of the send and receive
    /// buffers, [`Packed`] and the form.
    ///
    /// # Safety
    /// As [`MpiComm::run`], for `call` and the two regions; `counts` holds one count a rank, the
    /// rules checked against MPI's `int`.
    unsafe fn run_v(
        &self,
        op: &'static str,
        regions: [Region<'_>; 2],
        counts: &[usize],
        call: impl FnOnce([*mut c_void; 2], Packed, Form<'_>) -> c_int,
    ) -> Result<()> {
        let (c, d) = raw::packed(counts);
        let mine = c[self.rank];
        let [send, recv] = regions;
        let regions = [send, recv, Region::send(&c), Region::send(&d)];
        // SAFETY: the function's contract; `p[2]`, `p[3]` are `c` and `d`, which outlive the call.
        unsafe {
            self.run(op, regions, |p, form| {
                let (c, d) = (p[2].cast::<c_int>(), p[3].cast::<c_int>());
                call([p[0], p[1]], Packed { mine, c, d }, form)
            })
        }
        .map(drop)
    }

    /// [`MpiComm::start`] of a `*v` collective: `call` gets the addresses of the send and receive
    /// buffers, [`Packed`] and the request; the arrays travel with the operation, since MPI reads
    /// them until it completes.
    ///
    /// # Safety
    /// As [`MpiComm::start`], for `call` and the two regions; `counts` holds one count a rank,
    /// the rules checked against MPI's `int`.
    unsafe fn start_v<'s, T: Element>(
        &self,
        op: &'static str,
        regions: [Region<'_>; 2],
        counts: &[usize],
        call: impl FnOnce([*mut c_void; 2], Packed, &mut ffi::MPI_Request) -> c_int,
    ) -> Result<MpiPending<'s, T>> {
        let (c, d) = raw::packed(counts);
        let mine = c[self.rank];
        let [send, recv] = regions;
        let regions = [send, recv, Region::send(&c), Region::send(&d)];
        // SAFETY: the function's contract; `p[2]`, `p[3]` are `c` and `d`, which travel with the
        // operation.
        let pending = unsafe {
            self.start::<T, 4>(op, regions, |p, r| {
                let (c, d) = (p[2].cast::<c_int>(), p[3].cast::<c_int>());
                call([p[0], p[1]], Packed { mine, c, d }, r)
            })
        }?;
        Ok(pending.holding(vec![c, d]))
    }
}
