//! The [`Communicator`] implementation of the MPI host backend.
//!
//! Every method follows the same steps: open a tracing span named after the operation; check the
//! arguments locally (lengths, ranks, the reduce operation for the element, counts that fit MPI's `int`);
//! in checked mode agree with the other ranks ([`MpiComm::agree`]); make the MPI call through
//! [`MpiComm::run`] (blocking, or polled against the deadline on copies) or [`MpiComm::start`]; turn
//! its return code into a `Result`; finish (`Avg`'s division).

use mpi::ffi;
use std::ffi::c_int;

use super::comm::MpiComm;
use super::raw::{self, either};
use super::request::{Form, Region};
use crate::checked::{Call, OpKind};
use crate::comm::{Communicator, Tag};
use crate::element::Element;
use crate::error::Result;
use crate::op::{BackendKind, ReduceOp};
use crate::request::{Request, Scope};
use crate::rules::{CountLimit, Rules};

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
        let comm = unsafe { MpiComm::from_raw(raw) }.map_err(|e| match e {
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
            comm.with_checked(self.checked).with_timeout(self.timeout),
        ))
    }
}

impl Communicator for MpiComm {
    type Buf<T: Element> = [T];

    fn backend(&self) -> BackendKind {
        BACKEND
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn checked(&self) -> bool {
        self.checked
    }

    fn barrier(&self) -> Result<()> {
        let _span = tracing::trace_span!("barrier").entered();
        self.agree(Call::new(OpKind::Barrier), Ok(()))?;
        // SAFETY: a barrier takes no buffer; both forms on this communicator.
        unsafe {
            self.run("barrier", [], |_, form| {
                either!(form, MPI_Barrier / MPI_Ibarrier(self.raw))
            })
        }
        .map(drop)
    }

    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        const OP: &str = "broadcast";
        let _span = tracing::trace_span!("broadcast").entered();
        let local = self.rules().broadcast::<T, _>(OP, buf, root).map(raw::int);
        let n = self.agree(
            Call::new(OpKind::Broadcast)
                .element::<T>()
                .root(root)
                .count(buf.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        // SAFETY: `buf` holds `n` elements of `T`, described by its datatype; root checked in range.
        unsafe {
            self.run(OP, [Region::in_out(buf)], |p, form| {
                either!(
                    form,
                    MPI_Bcast / MPI_Ibcast(p[0], n, dt, root as c_int, self.raw)
                )
            })
        }
        .map(drop)
    }

    fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "reduce";
        let _span = tracing::trace_span!("reduce").entered();
        let local = self
            .rules()
            .reduce::<T, _, _>(OP, send, recv, op, root)
            .map(|(n, recv)| (raw::int(n), recv));
        let call = Call::new(OpKind::Reduce)
            .element::<T>()
            .reduce(op)
            .root(root)
            .count(send.len());
        let (n, mut recv) = self.agree(call, local)?;
        let (dt, mop) = (raw::datatype::<T>(), raw::op(op));
        let regions = [Region::send(send), Region::recv_opt(recv.as_deref_mut())];
        // SAFETY: `send` holds `n` elements; on the root `recv` holds `n` too (checked), elsewhere MPI
        // ignores the (null) receive buffer; root in range; the datatype describes `T`.
        unsafe {
            self.run(OP, regions, |p, form| {
                either!(
                    form,
                    MPI_Reduce / MPI_Ireduce(p[0], p[1], n, dt, mop, root as c_int, self.raw)
                )
            })
        }?;
        if let Some(recv) = recv {
            raw::finish_avg(op, recv, self.size);
        }
        Ok(())
    }

    fn all_reduce<T: Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce";
        let _span = tracing::trace_span!("all_reduce").entered();
        let local = self
            .rules()
            .all_reduce::<T, _>(OP, send, recv, op)
            .map(raw::int);
        let n = self.agree(
            Call::new(OpKind::AllReduce)
                .element::<T>()
                .reduce(op)
                .count(send.len()),
            local,
        )?;
        let (dt, mop) = (raw::datatype::<T>(), raw::op(op));
        // SAFETY: both buffers hold `n` elements of `T` (checked), described by its datatype; `run`
        // returns before the borrows end.
        unsafe {
            self.run(OP, [Region::send(send), Region::recv(recv)], |p, form| {
                either!(
                    form,
                    MPI_Allreduce / MPI_Iallreduce(p[0], p[1], n, dt, mop, self.raw)
                )
            })
        }?;
        raw::finish_avg(op, recv, self.size);
        Ok(())
    }

    fn all_reduce_in_place<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce_in_place";
        let _span = tracing::trace_span!("all_reduce_in_place").entered();
        let local = self
            .rules()
            .all_reduce_in_place::<T, _>(OP, buf, op)
            .map(raw::int);
        let n = self.agree(
            Call::new(OpKind::AllReduceInPlace)
                .element::<T>()
                .reduce(op)
                .count(buf.len()),
            local,
        )?;
        let (dt, mop, place) = (raw::datatype::<T>(), raw::op(op), raw::in_place());
        // SAFETY: `buf` holds `n` elements of `T`; MPI_IN_PLACE (from the MPI's own header) makes MPI
        // read and write `buf` (or its copy) only.
        unsafe {
            self.run(OP, [Region::in_out(buf)], |p, form| {
                either!(
                    form,
                    MPI_Allreduce / MPI_Iallreduce(place, p[0], n, dt, mop, self.raw)
                )
            })
        }?;
        raw::finish_avg(op, buf, self.size);
        Ok(())
    }

    fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        const OP: &str = "all_gather";
        let _span = tracing::trace_span!("all_gather").entered();
        let local = self
            .rules()
            .all_gather::<T, _>(OP, send, recv)
            .map(raw::int);
        let n = self.agree(
            Call::new(OpKind::AllGather)
                .element::<T>()
                .count(send.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        // SAFETY: `send` holds `n` and `recv` holds `size * n` elements of `T` (checked).
        unsafe {
            self.run(OP, [Region::send(send), Region::recv(recv)], |p, form| {
                either!(
                    form,
                    MPI_Allgather / MPI_Iallgather(p[0], n, dt, p[1], n, dt, self.raw)
                )
            })
        }
        .map(drop)
    }

    fn all_gather_v<T: Element>(&self, send: &[T], recv: &mut [T], counts: &[usize]) -> Result<()> {
        const OP: &str = "all_gather_v";
        let _span = tracing::trace_span!("all_gather_v").entered();
        let local = self
            .rules()
            .all_gather_v::<T, _>(OP, send, recv, counts)
            .map(|()| raw::packed(counts));
        let (c, d) = self.agree(
            Call::new(OpKind::AllGatherV).element::<T>().counts(counts),
            local,
        )?;
        let dt = raw::datatype::<T>();
        let mine = c[self.rank];
        let regions = [
            Region::send(send),
            Region::recv(recv),
            Region::send(&c),
            Region::send(&d),
        ];
        // SAFETY: `send` holds counts[rank] elements and `recv` the sum of counts, laid out at the packed
        // displacements `d` (all checked, all within int range); `p[2]`, `p[3]` are `c` and `d`.
        unsafe {
            self.run(OP, regions, |p, form| {
                let (c, d) = (p[2].cast::<c_int>(), p[3].cast::<c_int>());
                either!(
                    form,
                    MPI_Allgatherv / MPI_Iallgatherv(p[0], mine, dt, p[1], c, d, dt, self.raw)
                )
            })
        }
        .map(drop)
    }

    fn gather<T: Element>(&self, send: &[T], recv: Option<&mut [T]>, root: usize) -> Result<()> {
        const OP: &str = "gather";
        let _span = tracing::trace_span!("gather").entered();
        let local = self
            .rules()
            .gather::<T, _, _>(OP, send, recv, root)
            .map(|(n, recv)| (raw::int(n), recv));
        let (n, recv) = self.agree(
            Call::new(OpKind::Gather)
                .element::<T>()
                .root(root)
                .count(send.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        let root = root as c_int;
        // SAFETY: `send` holds `n` elements; on the root `recv` holds `size * n` (checked); MPI ignores the
        // (null) receive buffer elsewhere.
        unsafe {
            self.run(
                OP,
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

    fn gather_v<T: Element>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        const OP: &str = "gather_v";
        let _span = tracing::trace_span!("gather_v").entered();
        let local = self
            .rules()
            .gather_v::<T, _, _>(OP, send, recv, counts, root)
            .map(|recv| (raw::packed(counts), recv));
        let call = Call::new(OpKind::GatherV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let ((c, d), recv) = self.agree(call, local)?;
        let dt = raw::datatype::<T>();
        let (mine, root) = (c[self.rank], root as c_int);
        let regions = [
            Region::send(send),
            Region::recv_opt(recv),
            Region::send(&c),
            Region::send(&d),
        ];
        // SAFETY: `send` holds counts[rank] elements; on the root `recv` holds the sum of counts at the
        // packed displacements (checked); elsewhere MPI ignores the receive arguments.
        unsafe {
            self.run(OP, regions, |p, form| {
                let (c, d) = (p[2].cast::<c_int>(), p[3].cast::<c_int>());
                either!(
                    form,
                    MPI_Gatherv / MPI_Igatherv(p[0], mine, dt, p[1], c, d, dt, root, self.raw)
                )
            })
        }
        .map(drop)
    }

    fn scatter<T: Element>(&self, send: Option<&[T]>, recv: &mut [T], root: usize) -> Result<()> {
        const OP: &str = "scatter";
        let _span = tracing::trace_span!("scatter").entered();
        let local = self
            .rules()
            .scatter::<T, _, _>(OP, send, recv, root)
            .map(|(n, send)| (raw::int(n), send));
        let (n, send) = self.agree(
            Call::new(OpKind::Scatter)
                .element::<T>()
                .root(root)
                .count(recv.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        let root = root as c_int;
        // SAFETY: `recv` holds `n` elements; on the root `send` holds `size * n` (checked); MPI ignores the
        // (null) send buffer elsewhere.
        unsafe {
            self.run(
                OP,
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

    fn scatter_v<T: Element>(
        &self,
        send: Option<&[T]>,
        recv: &mut [T],
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        const OP: &str = "scatter_v";
        let _span = tracing::trace_span!("scatter_v").entered();
        let local = self
            .rules()
            .scatter_v::<T, _, _>(OP, send, recv, counts, root)
            .map(|send| (raw::packed(counts), send));
        let call = Call::new(OpKind::ScatterV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let ((c, d), send) = self.agree(call, local)?;
        let dt = raw::datatype::<T>();
        let (mine, root) = (c[self.rank], root as c_int);
        let regions = [
            Region::send_opt(send),
            Region::recv(recv),
            Region::send(&c),
            Region::send(&d),
        ];
        // SAFETY: `recv` holds counts[rank] elements; on the root `send` holds the sum of counts at the
        // packed displacements (checked); elsewhere MPI ignores the send arguments.
        unsafe {
            self.run(OP, regions, |p, form| {
                let (c, d) = (p[2].cast::<c_int>(), p[3].cast::<c_int>());
                either!(
                    form,
                    MPI_Scatterv / MPI_Iscatterv(p[0], c, d, dt, p[1], mine, dt, root, self.raw)
                )
            })
        }
        .map(drop)
    }

    fn reduce_scatter<T: Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        const OP: &str = "reduce_scatter";
        let _span = tracing::trace_span!("reduce_scatter").entered();
        let local = self
            .rules()
            .reduce_scatter::<T, _>(OP, send, recv, op)
            .map(raw::int);
        let n = self.agree(
            Call::new(OpKind::ReduceScatter)
                .element::<T>()
                .reduce(op)
                .count(recv.len()),
            local,
        )?;
        let (dt, mop) = (raw::datatype::<T>(), raw::op(op));
        // SAFETY: `send` holds `size * n` and `recv` holds `n` elements of `T` (checked).
        unsafe {
            self.run(OP, [Region::send(send), Region::recv(recv)], |p, form| {
                either!(
                    form,
                    MPI_Reduce_scatter_block
                        / MPI_Ireduce_scatter_block(p[0], p[1], n, dt, mop, self.raw)
                )
            })
        }?;
        raw::finish_avg(op, recv, self.size);
        Ok(())
    }

    fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        const OP: &str = "all_to_all";
        let _span = tracing::trace_span!("all_to_all").entered();
        let local = self
            .rules()
            .all_to_all::<T, _>(OP, send, recv)
            .map(raw::int);
        let n = self.agree(
            Call::new(OpKind::AllToAll).element::<T>().count(send.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        // SAFETY: both buffers hold `size` blocks of `n` elements of `T` (checked).
        unsafe {
            self.run(OP, [Region::send(send), Region::recv(recv)], |p, form| {
                either!(
                    form,
                    MPI_Alltoall / MPI_Ialltoall(p[0], n, dt, p[1], n, dt, self.raw)
                )
            })
        }
        .map(drop)
    }

    fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<()> {
        const OP: &str = "all_to_all_v";
        let _span = tracing::trace_span!("all_to_all_v").entered();
        let local = self
            .rules()
            .all_to_all_v::<T, _>(OP, send, send_counts, recv, recv_counts)
            .map(|()| (raw::packed(send_counts), raw::packed(recv_counts)));
        let call = Call::new(OpKind::AllToAllV)
            .element::<T>()
            .all_to_all(send_counts, recv_counts);
        let ((sc, sd), (rc, rd)) = self.agree(call, local)?;
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
            self.run(OP, regions, |p, form| {
                let [sc, sd, rc, rd] = [p[2], p[3], p[4], p[5]].map(|a| a.cast::<c_int>());
                either!(
                    form,
                    MPI_Alltoallv / MPI_Ialltoallv(p[0], sc, sd, dt, p[1], rc, rd, dt, self.raw)
                )
            })
        }
        .map(drop)
    }

    fn send<T: Element>(&self, buf: &[T], dest: usize, tag: Tag) -> Result<()> {
        const OP: &str = "send";
        let _span = tracing::trace_span!("send").entered();
        let n = raw::int(
            self.rules()
                .point::<T, _>(OP, "destination", buf, dest, tag)?,
        );
        let dest = dest as c_int;
        let dt = raw::datatype::<T>();
        // SAFETY: `buf` holds `n` elements of `T`; destination and tag checked in range.
        unsafe {
            self.run(OP, [Region::send(buf)], |p, form| {
                either!(form, MPI_Send / MPI_Isend(p[0], n, dt, dest, tag, self.raw))
            })
        }
        .map(drop)
    }

    fn recv<T: Element>(&self, buf: &mut [T], source: usize, tag: Tag) -> Result<()> {
        const OP: &str = "recv";
        let _span = tracing::trace_span!("recv").entered();
        let n = raw::int(self.rules().point::<T, _>(OP, "source", buf, source, tag)?);
        let source = source as c_int;
        let dt = raw::datatype::<T>();
        // SAFETY: `buf` has room for `n` elements of `T` (a longer message is MPI_ERR_TRUNCATE, not an
        // overflow); the status is a valid out-pointer.
        let status = unsafe {
            self.run(OP, [Region::recv(buf)], |p, form| match form {
                Form::Blocking(status) => ffi::MPI_Recv(p[0], n, dt, source, tag, self.raw, status),
                Form::Start(r) => ffi::MPI_Irecv(p[0], n, dt, source, tag, self.raw, r),
            })
        }?;
        raw::received(OP, &status, dt, buf.len())
    }

    fn send_recv<T: Element>(
        &self,
        send: &[T],
        dest: usize,
        recv: &mut [T],
        source: usize,
        tag: Tag,
    ) -> Result<()> {
        const OP: &str = "send_recv";
        let _span = tracing::trace_span!("send_recv").entered();
        let (sn, rn) = self
            .rules()
            .send_recv::<T, _>(OP, send, dest, recv, source, tag)?;
        let (sn, rn) = (raw::int(sn), raw::int(rn));
        let (dest, source) = (dest as c_int, source as c_int);
        let dt = raw::datatype::<T>();
        // SAFETY: `send` holds `sn` and `recv` has room for `rn` elements of `T`; ranks and tag checked.
        let status = unsafe {
            self.exchange(
                OP,
                (Region::send(send), sn, dest),
                (Region::recv(&mut *recv), rn, source),
                dt,
                tag,
            )
        }?;
        raw::received(OP, &status, dt, recv.len())
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>> {
        const OP: &str = "split";
        let _span = tracing::trace_span!("split").entered();
        let local = match color {
            None => Ok(raw::undefined()),
            Some(c) => i32::try_from(c).map_err(|_| {
                crate::Error::invalid(
                    OP,
                    format!("color {c} exceeds MPI's largest color {}", i32::MAX),
                )
            }),
        };
        let c = self.agree(Call::new(OpKind::Split), local)?;
        self.arrive(OP)?;
        // SAFETY: an MPI_Comm handle may start as any value; MPI_Comm_split overwrites it.
        let mut new: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: valid communicator; `new` is a valid out-pointer.
        raw::check(OP, unsafe {
            ffi::MPI_Comm_split(self.raw, c, key, &mut new)
        })?;
        self.new_comm(OP, new)
    }

    fn dup(&self) -> Result<Self> {
        const OP: &str = "dup";
        let _span = tracing::trace_span!("dup").entered();
        self.agree(Call::new(OpKind::Dup), Ok(()))?;
        self.arrive(OP)?;
        // SAFETY: an MPI_Comm handle may start as any value; MPI_Comm_dup overwrites it.
        let mut new: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: valid communicator; `new` is a valid out-pointer.
        raw::check(OP, unsafe { ffi::MPI_Comm_dup(self.raw, &mut new) })?;
        self.new_comm(OP, new)?
            .ok_or_else(|| crate::Error::invalid(OP, "MPI returned MPI_COMM_NULL"))
    }

    fn i_all_reduce<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_reduce";
        let _span = tracing::trace_span!("i_all_reduce").entered();
        let local = self
            .rules()
            .all_reduce::<T, _>(OP, send, recv, op)
            .map(raw::int);
        let n = self.agree(
            Call::new(OpKind::AllReduce)
                .element::<T>()
                .reduce(op)
                .count(send.len()),
            local,
        )?;
        let (dt, mop) = (raw::datatype::<T>(), raw::op(op));
        // SAFETY: both buffers hold `n` elements of `T` and stay borrowed for 's, and the scope completes
        // the request before 's ends, so MPI never touches them after the borrows end.
        let pending = unsafe {
            self.start::<T, 2>(
                OP,
                [Region::send(send), Region::recv(&mut *recv)],
                |p, r| ffi::MPI_Iallreduce(p[0], p[1], n, dt, mop, self.raw, r),
            )
        }?;
        Ok(scope.register(Box::new(pending.average(op, recv, self.size))))
    }

    fn i_broadcast<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        root: usize,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_broadcast";
        let _span = tracing::trace_span!("i_broadcast").entered();
        let local = self.rules().broadcast::<T, _>(OP, buf, root).map(raw::int);
        let n = self.agree(
            Call::new(OpKind::Broadcast)
                .element::<T>()
                .root(root)
                .count(buf.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        // SAFETY: `buf` holds `n` elements and stays borrowed for 's; the scope completes the request
        // before 's ends.
        let pending = unsafe {
            self.start::<T, 1>(OP, [Region::in_out(buf)], |p, r| {
                ffi::MPI_Ibcast(p[0], n, dt, root as c_int, self.raw, r)
            })
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    fn i_all_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_gather";
        let _span = tracing::trace_span!("i_all_gather").entered();
        let local = self
            .rules()
            .all_gather::<T, _>(OP, send, recv)
            .map(raw::int);
        let n = self.agree(
            Call::new(OpKind::AllGather)
                .element::<T>()
                .count(send.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        // SAFETY: `send` holds `n` and `recv` `size * n` elements, borrowed for 's; the scope completes the
        // request before 's ends.
        let pending = unsafe {
            self.start::<T, 2>(OP, [Region::send(send), Region::recv(recv)], |p, r| {
                ffi::MPI_Iallgather(p[0], n, dt, p[1], n, dt, self.raw, r)
            })
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    fn i_send<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_send";
        let _span = tracing::trace_span!("i_send").entered();
        let n = raw::int(
            self.rules()
                .point::<T, _>(OP, "destination", buf, dest, tag)?,
        );
        let dest = dest as c_int;
        let dt = raw::datatype::<T>();
        // SAFETY: `buf` holds `n` elements, borrowed for 's; the scope completes the request before 's ends.
        let pending = unsafe {
            self.start::<T, 1>(OP, [Region::send(buf)], |p, r| {
                ffi::MPI_Isend(p[0], n, dt, dest, tag, self.raw, r)
            })
        }?;
        Ok(scope.register(Box::new(pending)))
    }

    fn i_recv<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        source: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_recv";
        let _span = tracing::trace_span!("i_recv").entered();
        let n = raw::int(self.rules().point::<T, _>(OP, "source", buf, source, tag)?);
        let source = source as c_int;
        let dt = raw::datatype::<T>();
        let len = buf.len();
        // SAFETY: `buf` has room for `n` elements, borrowed for 's; the scope completes the request before
        // 's ends.
        let pending = unsafe {
            self.start::<T, 1>(OP, [Region::recv(buf)], |p, r| {
                ffi::MPI_Irecv(p[0], n, dt, source, tag, self.raw, r)
            })
        }?;
        Ok(scope.register(Box::new(pending.expect(len))))
    }
}
