//! The [`Communicator`] implementation of the MPI host backend.
//!
//! Every method follows the same steps: open a tracing span named after the operation; check the
//! arguments locally (lengths, ranks, the reduce operation for the element, counts that fit MPI's `int`);
//! in checked mode agree with the other ranks ([`MpiComm::agree`]); make the MPI call; turn its return
//! code into a `Result`; finish (`Avg`'s division).

use std::ffi::c_int;
use std::ptr;

use mpi::ffi;

use super::comm::MpiComm;
use super::raw::{self, ptr, ptr_mut};
use super::request::MpiPending;
use crate::check;
use crate::check::check_op;
use crate::checked::{Call, OpKind};
use crate::comm::{Communicator, Tag};
use crate::element::Element;
use crate::error::Result;
use crate::op::{BackendKind, ReduceOp};
use crate::request::{Request, Scope};

const BACKEND: BackendKind = BackendKind::MpiHost;

impl MpiComm {
    fn peer(&self, op: &'static str, what: &str, rank: usize, tag: Tag) -> Result<c_int> {
        check::rank_in_range(op, what, rank, self.size)?;
        check::tag(op, tag, self.tag_ub)?;
        Ok(rank as c_int)
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
        Ok(Some(comm.with_checked(self.checked)))
    }
}

fn null_mut() -> *mut std::ffi::c_void {
    ptr::null_mut()
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
        // SAFETY: a valid communicator.
        raw::check("barrier", unsafe { ffi::MPI_Barrier(self.raw) })
    }

    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        const OP: &str = "broadcast";
        let _span = tracing::trace_span!("broadcast").entered();
        let local = check::rank_in_range(OP, "root", root, self.size)
            .and_then(|()| raw::count(OP, buf.len()));
        let n = self.agree(
            Call::new(OpKind::Broadcast)
                .element::<T>()
                .root(root)
                .count(buf.len()),
            local,
        )?;
        // SAFETY: `buf` holds `n` elements of `T`, described by its datatype; root checked in range.
        raw::check(OP, unsafe {
            ffi::MPI_Bcast(
                ptr_mut(buf),
                n,
                raw::datatype::<T>(),
                root as c_int,
                self.raw,
            )
        })
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
        let is_root = self.rank == root;
        let local = (|| {
            check_op::<T>(OP, op, BACKEND)?;
            check::rank_in_range(OP, "root", root, self.size)?;
            let recv = check::at_root(OP, "recv", is_root, recv, send.len(), "the length of send")?;
            Ok((raw::count(OP, send.len())?, recv))
        })();
        let call = Call::new(OpKind::Reduce)
            .element::<T>()
            .reduce(op)
            .root(root)
            .count(send.len());
        let (n, mut recv) = self.agree(call, local)?;
        let recv_ptr = recv.as_deref_mut().map_or_else(null_mut, ptr_mut);
        // SAFETY: `send` holds `n` elements; on the root `recv` holds `n` too (checked), elsewhere MPI
        // ignores the receive buffer; root in range; the datatype describes `T`.
        raw::check(OP, unsafe {
            ffi::MPI_Reduce(
                ptr(send),
                recv_ptr,
                n,
                raw::datatype::<T>(),
                raw::op(op),
                root as c_int,
                self.raw,
            )
        })?;
        if let Some(recv) = recv {
            raw::finish_avg(op, recv, self.size);
        }
        Ok(())
    }

    fn all_reduce<T: Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce";
        let _span = tracing::trace_span!("all_reduce").entered();
        let local = check_op::<T>(OP, op, BACKEND)
            .and_then(|()| check::same_len(OP, "send", send.len(), "recv", recv.len()))
            .and_then(|()| raw::count(OP, send.len()));
        let n = self.agree(
            Call::new(OpKind::AllReduce)
                .element::<T>()
                .reduce(op)
                .count(send.len()),
            local,
        )?;
        // SAFETY: both buffers hold `n` elements of `T` (checked), described by its datatype; the call
        // returns before the borrows end.
        raw::check(OP, unsafe {
            ffi::MPI_Allreduce(
                ptr(send),
                ptr_mut(recv),
                n,
                raw::datatype::<T>(),
                raw::op(op),
                self.raw,
            )
        })?;
        raw::finish_avg(op, recv, self.size);
        Ok(())
    }

    fn all_reduce_in_place<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce_in_place";
        let _span = tracing::trace_span!("all_reduce_in_place").entered();
        let local = check_op::<T>(OP, op, BACKEND).and_then(|()| raw::count(OP, buf.len()));
        let n = self.agree(
            Call::new(OpKind::AllReduceInPlace)
                .element::<T>()
                .reduce(op)
                .count(buf.len()),
            local,
        )?;
        // SAFETY: `buf` holds `n` elements of `T`; MPI_IN_PLACE (from the MPI's own header) makes MPI
        // read and write `buf` only.
        raw::check(OP, unsafe {
            ffi::MPI_Allreduce(
                raw::in_place(),
                ptr_mut(buf),
                n,
                raw::datatype::<T>(),
                raw::op(op),
                self.raw,
            )
        })?;
        raw::finish_avg(op, buf, self.size);
        Ok(())
    }

    fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        const OP: &str = "all_gather";
        let _span = tracing::trace_span!("all_gather").entered();
        let local =
            check::blocks_len(OP, "recv", recv.len(), self.size, send.len()).and_then(|()| {
                raw::count(OP, recv.len())?;
                raw::count(OP, send.len())
            });
        let n = self.agree(
            Call::new(OpKind::AllGather)
                .element::<T>()
                .count(send.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        // SAFETY: `send` holds `n` and `recv` holds `size * n` elements of `T` (checked).
        raw::check(OP, unsafe {
            ffi::MPI_Allgather(ptr(send), n, dt, ptr_mut(recv), n, dt, self.raw)
        })
    }

    fn all_gather_v<T: Element>(&self, send: &[T], recv: &mut [T], counts: &[usize]) -> Result<()> {
        const OP: &str = "all_gather_v";
        let _span = tracing::trace_span!("all_gather_v").entered();
        let local = (|| {
            let total = check::v_counts(OP, "send", send.len(), counts, self.rank, self.size)?;
            check::len_is(OP, "recv", recv.len(), total, "the sum of counts")?;
            raw::counts_displs(OP, counts)
        })();
        let (c, d) = self.agree(
            Call::new(OpKind::AllGatherV).element::<T>().counts(counts),
            local,
        )?;
        let dt = raw::datatype::<T>();
        // SAFETY: `send` holds counts[rank] elements and `recv` the sum of counts, laid out at the packed
        // displacements `d` (all checked, all within int range).
        raw::check(OP, unsafe {
            ffi::MPI_Allgatherv(
                ptr(send),
                c[self.rank],
                dt,
                ptr_mut(recv),
                c.as_ptr(),
                d.as_ptr(),
                dt,
                self.raw,
            )
        })
    }

    fn gather<T: Element>(&self, send: &[T], recv: Option<&mut [T]>, root: usize) -> Result<()> {
        const OP: &str = "gather";
        let _span = tracing::trace_span!("gather").entered();
        let is_root = self.rank == root;
        let local = (|| {
            check::rank_in_range(OP, "root", root, self.size)?;
            let recv = check::at_root(
                OP,
                "recv",
                is_root,
                recv,
                self.size.saturating_mul(send.len()),
                &format!("{} ranks x {} elements", self.size, send.len()),
            )?;
            if let Some(b) = &recv {
                raw::count(OP, b.len())?;
            }
            Ok((raw::count(OP, send.len())?, recv))
        })();
        let (n, recv) = self.agree(
            Call::new(OpKind::Gather)
                .element::<T>()
                .root(root)
                .count(send.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        let recv_ptr = recv.map_or_else(null_mut, ptr_mut);
        // SAFETY: `send` holds `n` elements; on the root `recv` holds `size * n` (checked); MPI ignores the
        // receive buffer elsewhere.
        raw::check(OP, unsafe {
            ffi::MPI_Gather(ptr(send), n, dt, recv_ptr, n, dt, root as c_int, self.raw)
        })
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
        let is_root = self.rank == root;
        let local = (|| {
            check::rank_in_range(OP, "root", root, self.size)?;
            let total = check::v_counts(OP, "send", send.len(), counts, self.rank, self.size)?;
            let recv = check::at_root(OP, "recv", is_root, recv, total, "the sum of counts")?;
            Ok((raw::counts_displs(OP, counts)?, recv))
        })();
        let call = Call::new(OpKind::GatherV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let ((c, d), recv) = self.agree(call, local)?;
        let dt = raw::datatype::<T>();
        let recv_ptr = recv.map_or_else(null_mut, ptr_mut);
        // SAFETY: `send` holds counts[rank] elements; on the root `recv` holds the sum of counts at the
        // packed displacements (checked); elsewhere MPI ignores the receive arguments.
        raw::check(OP, unsafe {
            ffi::MPI_Gatherv(
                ptr(send),
                c[self.rank],
                dt,
                recv_ptr,
                c.as_ptr(),
                d.as_ptr(),
                dt,
                root as c_int,
                self.raw,
            )
        })
    }

    fn scatter<T: Element>(&self, send: Option<&[T]>, recv: &mut [T], root: usize) -> Result<()> {
        const OP: &str = "scatter";
        let _span = tracing::trace_span!("scatter").entered();
        let is_root = self.rank == root;
        let local = (|| {
            check::rank_in_range(OP, "root", root, self.size)?;
            let send = check::at_root(
                OP,
                "send",
                is_root,
                send,
                self.size.saturating_mul(recv.len()),
                &format!("{} ranks x {} elements", self.size, recv.len()),
            )?;
            if let Some(b) = &send {
                raw::count(OP, b.len())?;
            }
            Ok((raw::count(OP, recv.len())?, send))
        })();
        let (n, send) = self.agree(
            Call::new(OpKind::Scatter)
                .element::<T>()
                .root(root)
                .count(recv.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        let send_ptr = send.map_or(ptr::null(), ptr);
        // SAFETY: `recv` holds `n` elements; on the root `send` holds `size * n` (checked); MPI ignores the
        // send buffer elsewhere.
        raw::check(OP, unsafe {
            ffi::MPI_Scatter(
                send_ptr,
                n,
                dt,
                ptr_mut(recv),
                n,
                dt,
                root as c_int,
                self.raw,
            )
        })
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
        let is_root = self.rank == root;
        let local = (|| {
            check::rank_in_range(OP, "root", root, self.size)?;
            let total = check::v_counts(OP, "recv", recv.len(), counts, self.rank, self.size)?;
            let send = check::at_root(OP, "send", is_root, send, total, "the sum of counts")?;
            Ok((raw::counts_displs(OP, counts)?, send))
        })();
        let call = Call::new(OpKind::ScatterV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let ((c, d), send) = self.agree(call, local)?;
        let dt = raw::datatype::<T>();
        let send_ptr = send.map_or(ptr::null(), ptr);
        // SAFETY: `recv` holds counts[rank] elements; on the root `send` holds the sum of counts at the
        // packed displacements (checked); elsewhere MPI ignores the send arguments.
        raw::check(OP, unsafe {
            ffi::MPI_Scatterv(
                send_ptr,
                c.as_ptr(),
                d.as_ptr(),
                dt,
                ptr_mut(recv),
                c[self.rank],
                dt,
                root as c_int,
                self.raw,
            )
        })
    }

    fn reduce_scatter<T: Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        const OP: &str = "reduce_scatter";
        let _span = tracing::trace_span!("reduce_scatter").entered();
        let local = (|| {
            check_op::<T>(OP, op, BACKEND)?;
            check::blocks_len(OP, "send", send.len(), self.size, recv.len())?;
            raw::count(OP, send.len())?;
            raw::count(OP, recv.len())
        })();
        let n = self.agree(
            Call::new(OpKind::ReduceScatter)
                .element::<T>()
                .reduce(op)
                .count(recv.len()),
            local,
        )?;
        // SAFETY: `send` holds `size * n` and `recv` holds `n` elements of `T` (checked).
        raw::check(OP, unsafe {
            ffi::MPI_Reduce_scatter_block(
                ptr(send),
                ptr_mut(recv),
                n,
                raw::datatype::<T>(),
                raw::op(op),
                self.raw,
            )
        })?;
        raw::finish_avg(op, recv, self.size);
        Ok(())
    }

    fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        const OP: &str = "all_to_all";
        let _span = tracing::trace_span!("all_to_all").entered();
        let local = (|| {
            check::same_len(OP, "send", send.len(), "recv", recv.len())?;
            let block = check::equal_blocks(OP, "send", send.len(), self.size)?;
            raw::count(OP, send.len())?;
            raw::count(OP, block)
        })();
        let n = self.agree(
            Call::new(OpKind::AllToAll).element::<T>().count(send.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        // SAFETY: both buffers hold `size` blocks of `n` elements of `T` (checked).
        raw::check(OP, unsafe {
            ffi::MPI_Alltoall(ptr(send), n, dt, ptr_mut(recv), n, dt, self.raw)
        })
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
        let local = (|| {
            let s_total = check::counts(OP, "send_counts", send_counts, self.size)?;
            let r_total = check::counts(OP, "recv_counts", recv_counts, self.size)?;
            check::len_is(OP, "send", send.len(), s_total, "the sum of send_counts")?;
            check::len_is(OP, "recv", recv.len(), r_total, "the sum of recv_counts")?;
            Ok((
                raw::counts_displs(OP, send_counts)?,
                raw::counts_displs(OP, recv_counts)?,
            ))
        })();
        let call = Call::new(OpKind::AllToAllV)
            .element::<T>()
            .all_to_all(send_counts, recv_counts);
        let ((sc, sd), (rc, rd)) = self.agree(call, local)?;
        let dt = raw::datatype::<T>();
        // SAFETY: `send` and `recv` hold the sums of their counts at packed displacements (checked).
        raw::check(OP, unsafe {
            ffi::MPI_Alltoallv(
                ptr(send),
                sc.as_ptr(),
                sd.as_ptr(),
                dt,
                ptr_mut(recv),
                rc.as_ptr(),
                rd.as_ptr(),
                dt,
                self.raw,
            )
        })
    }

    fn send<T: Element>(&self, buf: &[T], dest: usize, tag: Tag) -> Result<()> {
        const OP: &str = "send";
        let _span = tracing::trace_span!("send").entered();
        let dest = self.peer(OP, "destination", dest, tag)?;
        let n = raw::count(OP, buf.len())?;
        // SAFETY: `buf` holds `n` elements of `T`; destination and tag checked in range.
        raw::check(OP, unsafe {
            ffi::MPI_Send(ptr(buf), n, raw::datatype::<T>(), dest, tag, self.raw)
        })
    }

    fn recv<T: Element>(&self, buf: &mut [T], source: usize, tag: Tag) -> Result<()> {
        const OP: &str = "recv";
        let _span = tracing::trace_span!("recv").entered();
        let source = self.peer(OP, "source", source, tag)?;
        let n = raw::count(OP, buf.len())?;
        let mut status = raw::status();
        let dt = raw::datatype::<T>();
        // SAFETY: `buf` has room for `n` elements of `T` (a longer message is MPI_ERR_TRUNCATE, not an
        // overflow); `status` is a valid out-pointer.
        raw::check(OP, unsafe {
            ffi::MPI_Recv(ptr_mut(buf), n, dt, source, tag, self.raw, &mut status)
        })?;
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
        if dest == self.rank && source == self.rank {
            // A message to oneself: Open MPI copies it locally and truncates silently, so check here.
            check::same_len(
                OP,
                "send (to this rank itself)",
                send.len(),
                "recv",
                recv.len(),
            )?;
        }
        let dest = self.peer(OP, "destination", dest, tag)?;
        let source = self.peer(OP, "source", source, tag)?;
        let (sn, rn) = (raw::count(OP, send.len())?, raw::count(OP, recv.len())?);
        let dt = raw::datatype::<T>();
        let mut status = raw::status();
        // SAFETY: `send` holds `sn` and `recv` has room for `rn` elements of `T`; ranks and tag checked.
        raw::check(OP, unsafe {
            ffi::MPI_Sendrecv(
                ptr(send),
                sn,
                dt,
                dest,
                tag,
                ptr_mut(recv),
                rn,
                dt,
                source,
                tag,
                self.raw,
                &mut status,
            )
        })?;
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
        let local = check_op::<T>(OP, op, BACKEND)
            .and_then(|()| check::same_len(OP, "send", send.len(), "recv", recv.len()))
            .and_then(|()| raw::count(OP, send.len()));
        let n = self.agree(
            Call::new(OpKind::AllReduce)
                .element::<T>()
                .reduce(op)
                .count(send.len()),
            local,
        )?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Iallreduce overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        // SAFETY: both buffers hold `n` elements of `T` and stay borrowed for 's, and the scope completes
        // the request before 's ends, so MPI never touches them after the borrows end.
        raw::check(OP, unsafe {
            ffi::MPI_Iallreduce(
                ptr(send),
                ptr_mut(recv),
                n,
                raw::datatype::<T>(),
                raw::op(op),
                self.raw,
                &mut request,
            )
        })?;
        let pending = MpiPending::<T>::new(request, OP).average(op, recv, self.size);
        Ok(scope.register(Box::new(pending)))
    }

    fn i_broadcast<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        root: usize,
    ) -> Result<Request<'s>> {
        const OP: &str = "i_broadcast";
        let _span = tracing::trace_span!("i_broadcast").entered();
        let local = check::rank_in_range(OP, "root", root, self.size)
            .and_then(|()| raw::count(OP, buf.len()));
        let n = self.agree(
            Call::new(OpKind::Broadcast)
                .element::<T>()
                .root(root)
                .count(buf.len()),
            local,
        )?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Ibcast overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        // SAFETY: `buf` holds `n` elements and stays borrowed for 's; the scope completes the request
        // before 's ends.
        raw::check(OP, unsafe {
            ffi::MPI_Ibcast(
                ptr_mut(buf),
                n,
                raw::datatype::<T>(),
                root as c_int,
                self.raw,
                &mut request,
            )
        })?;
        Ok(scope.register(Box::new(MpiPending::<T>::new(request, OP))))
    }

    fn i_all_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
    ) -> Result<Request<'s>> {
        const OP: &str = "i_all_gather";
        let _span = tracing::trace_span!("i_all_gather").entered();
        let local =
            check::blocks_len(OP, "recv", recv.len(), self.size, send.len()).and_then(|()| {
                raw::count(OP, recv.len())?;
                raw::count(OP, send.len())
            });
        let n = self.agree(
            Call::new(OpKind::AllGather)
                .element::<T>()
                .count(send.len()),
            local,
        )?;
        let dt = raw::datatype::<T>();
        // SAFETY: an MPI_Request handle may start as any value; MPI_Iallgather overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        // SAFETY: `send` holds `n` and `recv` `size * n` elements, borrowed for 's; the scope completes the
        // request before 's ends.
        raw::check(OP, unsafe {
            ffi::MPI_Iallgather(
                ptr(send),
                n,
                dt,
                ptr_mut(recv),
                n,
                dt,
                self.raw,
                &mut request,
            )
        })?;
        Ok(scope.register(Box::new(MpiPending::<T>::new(request, OP))))
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
        let dest = self.peer(OP, "destination", dest, tag)?;
        let n = raw::count(OP, buf.len())?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Isend overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        // SAFETY: `buf` holds `n` elements, borrowed for 's; the scope completes the request before 's ends.
        raw::check(OP, unsafe {
            ffi::MPI_Isend(
                ptr(buf),
                n,
                raw::datatype::<T>(),
                dest,
                tag,
                self.raw,
                &mut request,
            )
        })?;
        Ok(scope.register(Box::new(MpiPending::<T>::new(request, OP))))
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
        let source = self.peer(OP, "source", source, tag)?;
        let n = raw::count(OP, buf.len())?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Irecv overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        // SAFETY: `buf` has room for `n` elements, borrowed for 's; the scope completes the request before
        // 's ends.
        raw::check(OP, unsafe {
            ffi::MPI_Irecv(
                ptr_mut(buf),
                n,
                raw::datatype::<T>(),
                source,
                tag,
                self.raw,
                &mut request,
            )
        })?;
        Ok(scope.register(Box::new(
            MpiPending::<T>::new(request, OP).expect(buf.len()),
        )))
    }
}
