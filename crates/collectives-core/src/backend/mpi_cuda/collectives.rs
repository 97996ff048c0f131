//! The [`Communicator`] implementation of the CUDA-aware MPI backend.
//!
//! Every method follows the host backend's steps with device pointers: open a tracing span; check the
//! arguments (lengths, ranks, the reduce operation for the element, counts that fit MPI's `int`, every
//! buffer on the communicator's device); agree in checked mode; take the buffers on the communicator's
//! stream and synchronize it (MPI knows no streams); make the MPI call on the device addresses; turn
//! its return code into a `Result`; finish (`Avg`'s division).

use std::ffi::{c_int, c_void};
use std::ptr;

use cudarc::driver::{CudaSlice, SyncOnDrop};
use mpi::ffi;

use super::comm::MpiCudaComm;
use super::raw::{dptr, dptr_mut};
use super::request::CudaPending;
use crate::backend::cuda_common::{stage_in, Lease, StagedPending};
use crate::backend::mpi_host::raw as host;
use crate::backend::mpi_host::request::MpiPending;
use crate::checked::{Call, OpKind};
use crate::comm::{Communicator, Tag};
use crate::element::Element;
use crate::error::Result;
use crate::op::{BackendKind, ReduceOp};
use crate::request::{Request, Scope};

const BACKEND: BackendKind = BackendKind::MpiCuda;

fn null_mut() -> *mut c_void {
    ptr::null_mut()
}

impl MpiCudaComm {
    /// A pinned host buffer of `len` elements when non-blocking collectives stage through host
    /// memory (see the module documentation), else `None`.
    fn staging<T: Element>(&self, op: &'static str, len: usize) -> Result<Option<Lease<'_, T>>> {
        if self.nbc_on_device {
            return Ok(None);
        }
        self.pool.lease::<T>(op, len).map(Some)
    }

    /// Two pinned host buffers (send, receive) as [`staging`](Self::staging) gives one.
    #[allow(clippy::type_complexity)]
    fn staging2<T: Element>(
        &self,
        op: &'static str,
        send: usize,
        recv: usize,
    ) -> Result<Option<(Lease<'_, T>, Lease<'_, T>)>> {
        Ok(match self.staging::<T>(op, send)? {
            Some(s) => Some((s, self.pool.lease::<T>(op, recv)?)),
            None => None,
        })
    }

    /// The received-count check and the averaging of a non-blocking operation, registered in `scope`.
    fn register<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        inner: MpiPending<'s, T>,
        average: Option<&'s mut CudaSlice<T>>,
    ) -> Request<'s> {
        let average = average.map(|buf| (self, buf));
        scope.register(Box::new(CudaPending { inner, average }))
    }
}

impl Communicator for MpiCudaComm {
    type Buf<T: Element> = CudaSlice<T>;

    fn backend(&self) -> BackendKind {
        BACKEND
    }

    fn rank(&self) -> usize {
        self.mpi.rank()
    }

    fn size(&self) -> usize {
        self.mpi.size()
    }

    fn checked(&self) -> bool {
        self.mpi.checked()
    }

    fn barrier(&self) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.barrier();
        }
        const OP: &str = "barrier";
        let _span = tracing::trace_span!("barrier").entered();
        self.mpi.agree(Call::new(OpKind::Barrier), Ok(()))?;
        self.sync(OP)?;
        // SAFETY: a valid communicator.
        host::check(OP, unsafe { ffi::MPI_Barrier(self.mpi.as_raw()) })
    }

    fn broadcast<T: Element>(&self, buf: &mut CudaSlice<T>, root: usize) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.broadcast(buf, root);
        }
        const OP: &str = "broadcast";
        let _span = tracing::trace_span!("broadcast").entered();
        let local = self.args().broadcast(OP, buf, root);
        let n = self.mpi.agree(
            Call::new(OpKind::Broadcast)
                .element::<T>()
                .root(root)
                .count(buf.len()),
            local,
        )?;
        self.foreign(OP, &[buf.stream()])?;
        let (p, _g) = dptr_mut(buf, &self.stream);
        self.sync(OP)?;
        // SAFETY: `p` addresses `n` elements of `T` on this device (checked), which the CUDA-aware MPI
        // reads (root) or writes (others) before returning; its producers are complete (synchronized).
        host::check(OP, unsafe {
            ffi::MPI_Bcast(
                p,
                n,
                host::datatype::<T>(),
                root as c_int,
                self.mpi.as_raw(),
            )
        })
    }

    fn reduce<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: Option<&mut CudaSlice<T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.reduce(send, recv, op, root);
        }
        const OP: &str = "reduce";
        let _span = tracing::trace_span!("reduce").entered();
        let local = self.args().reduce(OP, send, recv, op, root);
        let call = Call::new(OpKind::Reduce)
            .element::<T>()
            .reduce(op)
            .root(root)
            .count(send.len());
        let (n, mut recv) = self.mpi.agree(call, local)?;
        let mut streams = vec![send.stream()];
        let recv_stream = recv.as_ref().map(|r| r.stream().clone());
        streams.extend(recv_stream.as_ref());
        self.foreign(OP, &streams)?;
        {
            let (s, _s) = dptr(send, &self.stream);
            let r: Option<(*mut c_void, SyncOnDrop<'_>)> =
                recv.as_deref_mut().map(|r| dptr_mut(r, &self.stream));
            let recv_ptr = r.as_ref().map_or_else(null_mut, |(p, _)| *p);
            self.sync(OP)?;
            // SAFETY: `send` holds `n` elements on this device; on the root `recv` holds `n` too
            // (checked), elsewhere MPI ignores the receive buffer; both synchronized; root in range.
            host::check(OP, unsafe {
                ffi::MPI_Reduce(
                    s,
                    recv_ptr,
                    n,
                    host::datatype::<T>(),
                    host::op(op),
                    root as c_int,
                    self.mpi.as_raw(),
                )
            })?;
        }
        match recv {
            Some(recv) => self.finish_avg(OP, op, recv),
            None => Ok(()),
        }
    }

    fn all_reduce<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        op: ReduceOp,
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.all_reduce(send, recv, op);
        }
        const OP: &str = "all_reduce";
        let _span = tracing::trace_span!("all_reduce").entered();
        let local = self.args().all_reduce(OP, send, recv, op);
        let n = self.mpi.agree(
            Call::new(OpKind::AllReduce)
                .element::<T>()
                .reduce(op)
                .count(send.len()),
            local,
        )?;
        self.foreign(OP, &[send.stream(), recv.stream()])?;
        {
            let (s, _s) = dptr(send, &self.stream);
            let (r, _r) = dptr_mut(recv, &self.stream);
            self.sync(OP)?;
            // SAFETY: both buffers hold `n` elements of `T` on this device (checked), their producers
            // are complete (synchronized), and MPI is done with them when it returns.
            host::check(OP, unsafe {
                ffi::MPI_Allreduce(
                    s,
                    r,
                    n,
                    host::datatype::<T>(),
                    host::op(op),
                    self.mpi.as_raw(),
                )
            })?;
        }
        self.finish_avg(OP, op, recv)
    }

    fn all_reduce_in_place<T: Element>(&self, buf: &mut CudaSlice<T>, op: ReduceOp) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.all_reduce_in_place(buf, op);
        }
        const OP: &str = "all_reduce_in_place";
        let _span = tracing::trace_span!("all_reduce_in_place").entered();
        let local = self.args().all_reduce_in_place(OP, buf, op);
        let n = self.mpi.agree(
            Call::new(OpKind::AllReduceInPlace)
                .element::<T>()
                .reduce(op)
                .count(buf.len()),
            local,
        )?;
        self.foreign(OP, &[buf.stream()])?;
        {
            let (p, _g) = dptr_mut(buf, &self.stream);
            self.sync(OP)?;
            // SAFETY: `p` addresses `n` elements of `T` on this device, synchronized; MPI_IN_PLACE
            // (from the MPI's own header) makes MPI read and write `buf` only.
            host::check(OP, unsafe {
                ffi::MPI_Allreduce(
                    host::in_place(),
                    p,
                    n,
                    host::datatype::<T>(),
                    host::op(op),
                    self.mpi.as_raw(),
                )
            })?;
        }
        self.finish_avg(OP, op, buf)
    }

    fn all_gather<T: Element>(&self, send: &CudaSlice<T>, recv: &mut CudaSlice<T>) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.all_gather(send, recv);
        }
        const OP: &str = "all_gather";
        let _span = tracing::trace_span!("all_gather").entered();
        let local = self.args().all_gather(OP, send, recv);
        let n = self.mpi.agree(
            Call::new(OpKind::AllGather)
                .element::<T>()
                .count(send.len()),
            local,
        )?;
        self.foreign(OP, &[send.stream(), recv.stream()])?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(OP)?;
        // SAFETY: `send` holds `n` and `recv` `size * n` elements on this device (checked), synchronized.
        host::check(OP, unsafe {
            ffi::MPI_Allgather(s, n, dt, r, n, dt, self.mpi.as_raw())
        })
    }

    fn all_gather_v<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        counts: &[usize],
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.all_gather_v(send, recv, counts);
        }
        const OP: &str = "all_gather_v";
        let _span = tracing::trace_span!("all_gather_v").entered();
        let rank = self.mpi.rank();
        let local = self.args().all_gather_v(OP, send, recv, counts);
        let (c, d) = self.mpi.agree(
            Call::new(OpKind::AllGatherV).element::<T>().counts(counts),
            local,
        )?;
        self.foreign(OP, &[send.stream(), recv.stream()])?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(OP)?;
        // SAFETY: `send` holds counts[rank] elements and `recv` the sum of counts at the packed
        // displacements (checked), on this device, synchronized.
        host::check(OP, unsafe {
            ffi::MPI_Allgatherv(
                s,
                c[rank],
                dt,
                r,
                c.as_ptr(),
                d.as_ptr(),
                dt,
                self.mpi.as_raw(),
            )
        })
    }

    fn gather<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: Option<&mut CudaSlice<T>>,
        root: usize,
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.gather(send, recv, root);
        }
        const OP: &str = "gather";
        let _span = tracing::trace_span!("gather").entered();
        let local = self.args().gather(OP, send, recv, root);
        let call = Call::new(OpKind::Gather)
            .element::<T>()
            .root(root)
            .count(send.len());
        let (n, recv) = self.mpi.agree(call, local)?;
        let recv_stream = recv.as_ref().map(|r| r.stream().clone());
        let mut streams = vec![send.stream()];
        streams.extend(recv_stream.as_ref());
        self.foreign(OP, &streams)?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let r = recv.map(|r| dptr_mut(r, &self.stream));
        let recv_ptr = r.as_ref().map_or_else(null_mut, |(p, _)| *p);
        self.sync(OP)?;
        // SAFETY: `send` holds `n` elements; on the root `recv` holds `size * n` (checked); MPI ignores
        // the receive buffer elsewhere; on this device, synchronized.
        host::check(OP, unsafe {
            ffi::MPI_Gather(s, n, dt, recv_ptr, n, dt, root as c_int, self.mpi.as_raw())
        })
    }

    fn gather_v<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: Option<&mut CudaSlice<T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.gather_v(send, recv, counts, root);
        }
        const OP: &str = "gather_v";
        let _span = tracing::trace_span!("gather_v").entered();
        let rank = self.mpi.rank();
        let local = self.args().gather_v(OP, send, recv, counts, root);
        let call = Call::new(OpKind::GatherV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let ((c, d), recv) = self.mpi.agree(call, local)?;
        let recv_stream = recv.as_ref().map(|r| r.stream().clone());
        let mut streams = vec![send.stream()];
        streams.extend(recv_stream.as_ref());
        self.foreign(OP, &streams)?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let r = recv.map(|r| dptr_mut(r, &self.stream));
        let recv_ptr = r.as_ref().map_or_else(null_mut, |(p, _)| *p);
        self.sync(OP)?;
        // SAFETY: `send` holds counts[rank] elements; on the root `recv` holds the sum of counts at the
        // packed displacements (checked); elsewhere MPI ignores the receive arguments.
        host::check(OP, unsafe {
            ffi::MPI_Gatherv(
                s,
                c[rank],
                dt,
                recv_ptr,
                c.as_ptr(),
                d.as_ptr(),
                dt,
                root as c_int,
                self.mpi.as_raw(),
            )
        })
    }

    fn scatter<T: Element>(
        &self,
        send: Option<&CudaSlice<T>>,
        recv: &mut CudaSlice<T>,
        root: usize,
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.scatter(send, recv, root);
        }
        const OP: &str = "scatter";
        let _span = tracing::trace_span!("scatter").entered();
        let local = self.args().scatter(OP, send, recv, root);
        let call = Call::new(OpKind::Scatter)
            .element::<T>()
            .root(root)
            .count(recv.len());
        let (n, send) = self.mpi.agree(call, local)?;
        let mut streams = vec![recv.stream()];
        streams.extend(send.map(|s| s.stream()));
        self.foreign(OP, &streams)?;
        let dt = host::datatype::<T>();
        let s = send.map(|s| dptr(s, &self.stream));
        let send_ptr = s.as_ref().map_or(ptr::null(), |(p, _)| *p);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(OP)?;
        // SAFETY: `recv` holds `n` elements; on the root `send` holds `size * n` (checked); MPI ignores
        // the send buffer elsewhere; on this device, synchronized.
        host::check(OP, unsafe {
            ffi::MPI_Scatter(send_ptr, n, dt, r, n, dt, root as c_int, self.mpi.as_raw())
        })
    }

    fn scatter_v<T: Element>(
        &self,
        send: Option<&CudaSlice<T>>,
        recv: &mut CudaSlice<T>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.scatter_v(send, recv, counts, root);
        }
        const OP: &str = "scatter_v";
        let _span = tracing::trace_span!("scatter_v").entered();
        let rank = self.mpi.rank();
        let local = self.args().scatter_v(OP, send, recv, counts, root);
        let call = Call::new(OpKind::ScatterV)
            .element::<T>()
            .root(root)
            .counts(counts);
        let ((c, d), send) = self.mpi.agree(call, local)?;
        let mut streams = vec![recv.stream()];
        streams.extend(send.map(|s| s.stream()));
        self.foreign(OP, &streams)?;
        let dt = host::datatype::<T>();
        let s = send.map(|s| dptr(s, &self.stream));
        let send_ptr = s.as_ref().map_or(ptr::null(), |(p, _)| *p);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(OP)?;
        // SAFETY: `recv` holds counts[rank] elements; on the root `send` holds the sum of counts at
        // the packed displacements (checked); elsewhere MPI ignores the send arguments.
        host::check(OP, unsafe {
            ffi::MPI_Scatterv(
                send_ptr,
                c.as_ptr(),
                d.as_ptr(),
                dt,
                r,
                c[rank],
                dt,
                root as c_int,
                self.mpi.as_raw(),
            )
        })
    }

    fn reduce_scatter<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        op: ReduceOp,
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.reduce_scatter(send, recv, op);
        }
        const OP: &str = "reduce_scatter";
        let _span = tracing::trace_span!("reduce_scatter").entered();
        let local = self.args().reduce_scatter(OP, send, recv, op);
        let n = self.mpi.agree(
            Call::new(OpKind::ReduceScatter)
                .element::<T>()
                .reduce(op)
                .count(recv.len()),
            local,
        )?;
        self.foreign(OP, &[send.stream(), recv.stream()])?;
        {
            let (s, _s) = dptr(send, &self.stream);
            let (r, _r) = dptr_mut(recv, &self.stream);
            self.sync(OP)?;
            // SAFETY: `send` holds `size * n` and `recv` `n` elements of `T` on this device (checked),
            // synchronized.
            host::check(OP, unsafe {
                ffi::MPI_Reduce_scatter_block(
                    s,
                    r,
                    n,
                    host::datatype::<T>(),
                    host::op(op),
                    self.mpi.as_raw(),
                )
            })?;
        }
        self.finish_avg(OP, op, recv)
    }

    fn all_to_all<T: Element>(&self, send: &CudaSlice<T>, recv: &mut CudaSlice<T>) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.all_to_all(send, recv);
        }
        const OP: &str = "all_to_all";
        let _span = tracing::trace_span!("all_to_all").entered();
        let local = self.args().all_to_all(OP, send, recv);
        let n = self.mpi.agree(
            Call::new(OpKind::AllToAll).element::<T>().count(send.len()),
            local,
        )?;
        self.foreign(OP, &[send.stream(), recv.stream()])?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(OP)?;
        // SAFETY: both buffers hold `size` blocks of `n` elements on this device (checked), synchronized.
        host::check(OP, unsafe {
            ffi::MPI_Alltoall(s, n, dt, r, n, dt, self.mpi.as_raw())
        })
    }

    fn all_to_all_v<T: Element>(
        &self,
        send: &CudaSlice<T>,
        send_counts: &[usize],
        recv: &mut CudaSlice<T>,
        recv_counts: &[usize],
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.all_to_all_v(send, send_counts, recv, recv_counts);
        }
        const OP: &str = "all_to_all_v";
        let _span = tracing::trace_span!("all_to_all_v").entered();
        let local = self
            .args()
            .all_to_all_v(OP, send, send_counts, recv, recv_counts);
        let call = Call::new(OpKind::AllToAllV)
            .element::<T>()
            .all_to_all(send_counts, recv_counts);
        let ((sc, sd), (rc, rd)) = self.mpi.agree(call, local)?;
        self.foreign(OP, &[send.stream(), recv.stream()])?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(OP)?;
        // SAFETY: `send` and `recv` hold the sums of their counts at packed displacements (checked), on
        // this device, synchronized.
        host::check(OP, unsafe {
            ffi::MPI_Alltoallv(
                s,
                sc.as_ptr(),
                sd.as_ptr(),
                dt,
                r,
                rc.as_ptr(),
                rd.as_ptr(),
                dt,
                self.mpi.as_raw(),
            )
        })
    }

    fn send<T: Element>(&self, buf: &CudaSlice<T>, dest: usize, tag: Tag) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.send(buf, dest, tag);
        }
        const OP: &str = "send";
        let _span = tracing::trace_span!("send").entered();
        let (dest, n) = self.args().point(OP, "destination", buf, dest, tag)?;
        self.foreign(OP, &[buf.stream()])?;
        let (p, _g) = dptr(buf, &self.stream);
        self.sync(OP)?;
        // SAFETY: `p` addresses `n` elements of `T` on this device, synchronized; destination and tag
        // checked in range.
        host::check(OP, unsafe {
            ffi::MPI_Send(p, n, host::datatype::<T>(), dest, tag, self.mpi.as_raw())
        })
    }

    fn recv<T: Element>(&self, buf: &mut CudaSlice<T>, source: usize, tag: Tag) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.recv(buf, source, tag);
        }
        const OP: &str = "recv";
        let _span = tracing::trace_span!("recv").entered();
        let (source, n) = self.args().point(OP, "source", buf, source, tag)?;
        self.foreign(OP, &[buf.stream()])?;
        let expected = buf.len();
        let dt = host::datatype::<T>();
        let mut status = host::status();
        let (p, _g) = dptr_mut(buf, &self.stream);
        self.sync(OP)?;
        // SAFETY: `p` has room for `n` elements of `T` on this device (a longer message is
        // MPI_ERR_TRUNCATE, not an overflow), synchronized; `status` is a valid out-pointer.
        host::check(OP, unsafe {
            ffi::MPI_Recv(p, n, dt, source, tag, self.mpi.as_raw(), &mut status)
        })?;
        host::received(OP, &status, dt, expected)
    }

    fn send_recv<T: Element>(
        &self,
        send: &CudaSlice<T>,
        dest: usize,
        recv: &mut CudaSlice<T>,
        source: usize,
        tag: Tag,
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.send_recv(send, dest, recv, source, tag);
        }
        const OP: &str = "send_recv";
        let _span = tracing::trace_span!("send_recv").entered();
        let [dest, source, sn, rn] = self.args().send_recv(OP, send, dest, recv, source, tag)?;
        self.foreign(OP, &[send.stream(), recv.stream()])?;
        let expected = recv.len();
        let dt = host::datatype::<T>();
        let mut status = host::status();
        {
            let (s, _s) = dptr(send, &self.stream);
            let (r, _r) = dptr_mut(recv, &self.stream);
            self.sync(OP)?;
            // SAFETY: `send` holds `sn` and `recv` has room for `rn` elements of `T` on this device,
            // synchronized; ranks and tag checked.
            host::check(OP, unsafe {
                ffi::MPI_Sendrecv(
                    s,
                    sn,
                    dt,
                    dest,
                    tag,
                    r,
                    rn,
                    dt,
                    source,
                    tag,
                    self.mpi.as_raw(),
                    &mut status,
                )
            })?;
        }
        host::received(OP, &status, dt, expected)
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>> {
        let _span = tracing::trace_span!("split").entered();
        self.sync("split")?;
        self.mpi
            .split(color, key)?
            .map(|m| self.derived(m))
            .transpose()
    }

    fn dup(&self) -> Result<Self> {
        let _span = tracing::trace_span!("dup").entered();
        self.sync("dup")?;
        self.derived(self.mpi.dup()?)
    }

    fn i_all_reduce<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s CudaSlice<T>,
        recv: &'s mut CudaSlice<T>,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        if let Some(staged) = &self.staged {
            return staged.i_all_reduce(scope, send, recv, op);
        }
        const OP: &str = "i_all_reduce";
        let _span = tracing::trace_span!("i_all_reduce").entered();
        let local = self
            .args()
            .all_reduce(OP, send, recv, op)
            .and_then(|n| Ok((n, self.staging2::<T>(OP, send.len(), recv.len())?)));
        let (n, staging) = self.mpi.agree(
            Call::new(OpKind::AllReduce)
                .element::<T>()
                .reduce(op)
                .count(send.len()),
            local,
        )?;
        if let Some((mut hs, mut hr)) = staging {
            stage_in(OP, &self.stream, send, hs.host_mut())?;
            // SAFETY: an MPI_Request handle may start as any value; MPI_Iallreduce overwrites it.
            let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
            // SAFETY: both pinned host buffers hold `n` elements of `T` and travel with the operation
            // in flight until it completes.
            host::check(OP, unsafe {
                ffi::MPI_Iallreduce(
                    host::ptr(hs.host()),
                    host::ptr_mut(hr.host_mut()),
                    n,
                    host::datatype::<T>(),
                    host::op(op),
                    self.mpi.as_raw(),
                    &mut request,
                )
            })?;
            let inner =
                MpiPending::<T>::new(request, OP).average(op, hr.host_mut(), self.mpi.size());
            return Ok(scope.register(Box::new(StagedPending {
                inner,
                stream: &self.stream,
                keep: vec![hs],
                back: Some((hr, recv)),
            })));
        }
        self.foreign(OP, &[send.stream(), recv.stream()])?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Iallreduce overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        {
            let (s, _s) = dptr(send, &self.stream);
            let (r, _r) = dptr_mut(recv, &self.stream);
            self.sync(OP)?;
            // SAFETY: both buffers hold `n` elements on this device (checked), synchronized, and stay
            // borrowed for 's; the scope completes the request before 's ends.
            host::check(OP, unsafe {
                ffi::MPI_Iallreduce(
                    s,
                    r,
                    n,
                    host::datatype::<T>(),
                    host::op(op),
                    self.mpi.as_raw(),
                    &mut request,
                )
            })?;
        }
        let average = (op == ReduceOp::Avg).then_some(recv);
        Ok(self.register(scope, MpiPending::<T>::new(request, OP), average))
    }

    fn i_broadcast<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut CudaSlice<T>,
        root: usize,
    ) -> Result<Request<'s>> {
        if let Some(staged) = &self.staged {
            return staged.i_broadcast(scope, buf, root);
        }
        const OP: &str = "i_broadcast";
        let _span = tracing::trace_span!("i_broadcast").entered();
        let local = self
            .args()
            .broadcast(OP, buf, root)
            .and_then(|n| Ok((n, self.staging::<T>(OP, buf.len())?)));
        let (n, staging) = self.mpi.agree(
            Call::new(OpKind::Broadcast)
                .element::<T>()
                .root(root)
                .count(buf.len()),
            local,
        )?;
        if let Some(mut h) = staging {
            let is_root = self.mpi.rank() == root;
            if is_root {
                stage_in(OP, &self.stream, buf, h.host_mut())?;
            }
            // SAFETY: an MPI_Request handle may start as any value; MPI_Ibcast overwrites it.
            let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
            // SAFETY: the pinned host buffer holds `n` elements and travels with the operation.
            host::check(OP, unsafe {
                ffi::MPI_Ibcast(
                    host::ptr_mut(h.host_mut()),
                    n,
                    host::datatype::<T>(),
                    root as c_int,
                    self.mpi.as_raw(),
                    &mut request,
                )
            })?;
            let (keep, back) = if is_root {
                (vec![h], None)
            } else {
                (Vec::new(), Some((h, buf)))
            };
            return Ok(scope.register(Box::new(StagedPending {
                inner: MpiPending::<T>::new(request, OP),
                stream: &self.stream,
                keep,
                back,
            })));
        }
        self.foreign(OP, &[buf.stream()])?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Ibcast overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        let (p, _g) = dptr_mut(buf, &self.stream);
        self.sync(OP)?;
        // SAFETY: `p` addresses `n` elements on this device, synchronized, borrowed for 's; the scope
        // completes the request before 's ends.
        host::check(OP, unsafe {
            ffi::MPI_Ibcast(
                p,
                n,
                host::datatype::<T>(),
                root as c_int,
                self.mpi.as_raw(),
                &mut request,
            )
        })?;
        Ok(self.register(scope, MpiPending::<T>::new(request, OP), None))
    }

    fn i_all_gather<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        send: &'s CudaSlice<T>,
        recv: &'s mut CudaSlice<T>,
    ) -> Result<Request<'s>> {
        if let Some(staged) = &self.staged {
            return staged.i_all_gather(scope, send, recv);
        }
        const OP: &str = "i_all_gather";
        let _span = tracing::trace_span!("i_all_gather").entered();
        let local = self
            .args()
            .all_gather(OP, send, recv)
            .and_then(|n| Ok((n, self.staging2::<T>(OP, send.len(), recv.len())?)));
        let (n, staging) = self.mpi.agree(
            Call::new(OpKind::AllGather)
                .element::<T>()
                .count(send.len()),
            local,
        )?;
        let dt = host::datatype::<T>();
        if let Some((mut hs, mut hr)) = staging {
            stage_in(OP, &self.stream, send, hs.host_mut())?;
            // SAFETY: an MPI_Request handle may start as any value; MPI_Iallgather overwrites it.
            let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
            // SAFETY: `hs` holds `n` and `hr` `size * n` elements (checked), both travelling with the
            // operation in flight until it completes.
            host::check(OP, unsafe {
                ffi::MPI_Iallgather(
                    host::ptr(hs.host()),
                    n,
                    dt,
                    host::ptr_mut(hr.host_mut()),
                    n,
                    dt,
                    self.mpi.as_raw(),
                    &mut request,
                )
            })?;
            return Ok(scope.register(Box::new(StagedPending {
                inner: MpiPending::<T>::new(request, OP),
                stream: &self.stream,
                keep: vec![hs],
                back: Some((hr, recv)),
            })));
        }
        self.foreign(OP, &[send.stream(), recv.stream()])?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Iallgather overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(OP)?;
        // SAFETY: `send` holds `n` and `recv` `size * n` elements on this device, synchronized, both
        // borrowed for 's; the scope completes the request before 's ends.
        host::check(OP, unsafe {
            ffi::MPI_Iallgather(s, n, dt, r, n, dt, self.mpi.as_raw(), &mut request)
        })?;
        Ok(self.register(scope, MpiPending::<T>::new(request, OP), None))
    }

    fn i_send<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s CudaSlice<T>,
        dest: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        if let Some(staged) = &self.staged {
            return staged.i_send(scope, buf, dest, tag);
        }
        const OP: &str = "i_send";
        let _span = tracing::trace_span!("i_send").entered();
        let (dest, n) = self.args().point(OP, "destination", buf, dest, tag)?;
        self.foreign(OP, &[buf.stream()])?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Isend overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        let (p, _g) = dptr(buf, &self.stream);
        self.sync(OP)?;
        // SAFETY: `p` addresses `n` elements on this device, synchronized, borrowed for 's; the scope
        // completes the request before 's ends.
        host::check(OP, unsafe {
            ffi::MPI_Isend(
                p,
                n,
                host::datatype::<T>(),
                dest,
                tag,
                self.mpi.as_raw(),
                &mut request,
            )
        })?;
        Ok(self.register(scope, MpiPending::<T>::new(request, OP), None))
    }

    fn i_recv<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut CudaSlice<T>,
        source: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        if let Some(staged) = &self.staged {
            return staged.i_recv(scope, buf, source, tag);
        }
        const OP: &str = "i_recv";
        let _span = tracing::trace_span!("i_recv").entered();
        let (source, n) = self.args().point(OP, "source", buf, source, tag)?;
        self.foreign(OP, &[buf.stream()])?;
        let expected = buf.len();
        // SAFETY: an MPI_Request handle may start as any value; MPI_Irecv overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        let (p, _g) = dptr_mut(buf, &self.stream);
        self.sync(OP)?;
        // SAFETY: `p` has room for `n` elements on this device, synchronized, borrowed for 's; the
        // scope completes the request before 's ends.
        host::check(OP, unsafe {
            ffi::MPI_Irecv(
                p,
                n,
                host::datatype::<T>(),
                source,
                tag,
                self.mpi.as_raw(),
                &mut request,
            )
        })?;
        Ok(self.register(
            scope,
            MpiPending::<T>::new(request, OP).expect(expected),
            None,
        ))
    }
}
