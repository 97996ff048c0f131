//! The raw operations of the CUDA-aware MPI backend ([`Backend`]). The front end
//! ([`crate::frontend`]) has checked the arguments and agreed on the call; each operation here takes
//! the buffers on the communicator's stream and synchronizes it (MPI knows no streams), makes the MPI
//! call on the device addresses and turns its return code into a `Result`. The front end finishes
//! `Avg` ([`Backend::divide`]).
//!
//! Two paths through host memory, decided here and nowhere else: under a deadline every operation
//! is the staged communicator's raw operation (its pinned buffers leased by [`Backend::stage`]), and
//! where the MPI's non-blocking collectives take no device buffers those stage through pinned host
//! memory too.

use std::ffi::{c_int, c_void};
use std::ptr;

use cudarc::driver::SyncOnDrop;
use mpi::ffi;

use super::comm::MpiCudaComm;
use super::raw::{dptr, dptr_mut};
use super::request::CudaPending;
use crate::backend::cuda_common::{self, pinned, stage_in, Leases, StagedPending, ThroughHost};
use crate::backend::mpi_device;
use crate::backend::mpi_host::raw as host;
use crate::backend::mpi_host::request::{MpiPending, Region};
use crate::comm::{Communicator, Tag};
use crate::element::Element;
use crate::error::Result;

use crate::frontend::{replay, run_each, start_each, Backend, Operation, PlanCall, PlanOp, Start};
use crate::memory::{Dev, DevMut};
use crate::op::{BackendKind, ReduceOp};
use crate::operation::{Name, OpKind};
use crate::record;
use crate::request::{Request, Scope};
use crate::rules::Rules;
use crate::transport::Transport;

const BACKEND: BackendKind = BackendKind::MpiCuda;

fn null_mut() -> *mut c_void {
    ptr::null_mut()
}

impl MpiCudaComm {
    /// The received-count check and the averaging of a non-blocking operation, registered in `scope`.
    fn register<'s, T: Element>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        inner: MpiPending<'s, T>,
        average: Option<&'s mut DevMut<'s, T>>,
    ) -> Request<'s> {
        let average = average.map(|buf| (self, buf));
        scope.register(Box::new(CudaPending { inner, average }))
    }

    /// The non-blocking collectives' path through pinned host memory, on this communicator's MPI.
    fn through_host(&self) -> ThroughHost<'_> {
        ThroughHost {
            host: &self.mpi,
            stream: &self.stream,
        }
    }

    /// Start a non-blocking operation with `start(send region, recv region)`, on the path
    /// [`Backend::stage`] chose: where it leased pinned buffers (non-blocking collectives on an MPI
    /// that takes no device memory in them), through host memory, `Avg` finished on the host copy;
    /// else on the device addresses once the stream's work is done, `Avg` finished on the device
    /// at completion.
    #[allow(clippy::too_many_arguments)]
    fn start_nbc<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Dev<'s, T>>,
        mut recv: Option<&'s mut DevMut<'s, T>>,
        staging: Leases<'s, T>,
        average: bool,
        start: impl FnOnce(Region<'_>, Region<'_>) -> Result<MpiPending<'s, T>>,
    ) -> Result<Request<'s>> {
        if staging.iter().any(Option::is_some) {
            let finish = if average {
                ReduceOp::Avg
            } else {
                ReduceOp::Sum
            };
            let pending = self
                .through_host()
                .start(op, send, recv, staging, finish, start)?;
            return Ok(scope.register(Box::new(pending)));
        }
        let streams: Vec<_> = send
            .map(|b| b.stream())
            .into_iter()
            .chain(recv.as_ref().map(|b| b.stream()))
            .collect();
        self.foreign(op, &streams)?;
        let inner = {
            let s = send.map(|b| dptr(b, &self.stream));
            let r = recv.as_deref_mut().map(|b| dptr_mut(b, &self.stream));
            self.sync(op)?;
            let s = s.map_or(Region::Absent, |(p, _)| Region::Device(p.cast_mut()));
            let r = r
                .as_ref()
                .map_or(Region::Absent, |(p, _)| Region::Device(*p));
            start(s, r)?
        };
        Ok(self.register(scope, inner, recv.filter(|_| average)))
    }

    /// [`start_nbc`](Self::start_nbc) for an operation in place on `buf`.
    fn start_nbc_in_place<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut DevMut<'s, T>,
        staging: Leases<'s, T>,
        average: bool,
        start: impl FnOnce(Region<'_>) -> Result<MpiPending<'s, T>>,
    ) -> Result<Request<'s>> {
        if staging.iter().any(Option::is_some) {
            let finish = if average {
                ReduceOp::Avg
            } else {
                ReduceOp::Sum
            };
            let pending = self
                .through_host()
                .start_in_place(op, buf, staging, finish, start)?;
            return Ok(scope.register(Box::new(pending)));
        }
        self.foreign(op, &[buf.stream()])?;
        let inner = {
            let (p, _g) = dptr_mut(buf, &self.stream);
            self.sync(op)?;
            start(Region::Device(p))?
        };
        Ok(self.register(scope, inner, average.then_some(buf)))
    }
}

impl Backend for MpiCudaComm {
    type Memory = crate::memory::Device;
    type Staging<'c, T: Element> = Leases<'c, T>;

    fn kind(&self) -> BackendKind {
        BACKEND
    }

    fn ranks(&self) -> (usize, usize) {
        (self.mpi.rank(), self.mpi.size())
    }

    fn rules(&self) -> Rules {
        mpi_device::rules(BACKEND, self.ctx.ordinal(), &self.mpi)
    }

    fn transport(&self) -> &dyn Transport {
        &self.mpi
    }

    /// Under a deadline the staged path; a non-blocking collective where the MPI's take no device
    /// buffers, through pinned host memory; otherwise device pointers handed to MPI.
    fn record_path(&self, _op: OpKind, start: Start, _bytes: usize) -> record::Path {
        if self.staged.is_some() {
            record::Path::staged("staged")
        } else if start == Start::Collective && !self.nbc_on_device {
            record::Path::staged("through-host")
        } else {
            record::Path::direct("device-pointers")
        }
    }

    /// MPI sums and the front end divides, except on the staged path under a deadline, which
    /// finishes `Avg` on its host copy.
    fn native_avg(&self) -> bool {
        self.staged.is_some()
    }

    fn divide<T: Element>(&self, op: &'static str, buf: &mut DevMut<'_, T>) -> Result<()> {
        self.finish_avg(op, ReduceOp::Avg, buf)
    }

    /// The staged path's buffers under a deadline; pinned buffers for a non-blocking collective
    /// where the MPI's non-blocking collectives take no device buffers; else none.
    fn stage<T: Element>(
        &self,
        op: &'static str,
        start: Start,
        lens: [Option<usize>; 2],
    ) -> Result<Leases<'_, T>> {
        if let Some(staged) = &self.staged {
            return staged.stage(op, start, lens);
        }
        if start == Start::Collective && !self.nbc_on_device {
            return cuda_common::pin(&self.pool, op, lens);
        }
        Ok([None, None])
    }

    fn raw_split(&self, op: &'static str, color: Option<i32>, key: i32) -> Result<Option<Self>> {
        self.sync(op)?;
        self.mpi
            .raw_split(op, color, key)?
            .map(|m| self.derived(m))
            .transpose()
    }

    fn raw_dup(&self, op: &'static str) -> Result<Self> {
        self.sync(op)?;
        self.derived(self.mpi.raw_dup(op)?)
    }

    /// No persistent form of its own: each run of a plan replays `start`.
    fn raw_init<'s, T: Element>(
        &'s self,
        _: &'static str,
        scope: &'s Scope<'s, '_>,
        call: PlanCall<'s, Self, T>,
    ) -> Result<Box<dyn PlanOp + 's>> {
        Ok(replay(self, scope, call))
    }

    fn run<T: Element>(
        &self,
        name: Name,
        op: &mut Operation<'_, '_, Self, T>,
        n: usize,
        staging: Leases<'_, T>,
    ) -> Result<()> {
        if let Some(staged) = &self.staged {
            return staged.run(name, op, n, staging);
        }
        run_each!(self, name, op, n)
    }

    fn start<'s, T: Element>(
        &'s self,
        name: Name,
        scope: &'s Scope<'s, '_>,
        op: Operation<'s, '_, Self, T>,
        n: usize,
        average: bool,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        if let Some(staged) = &self.staged {
            return staged.start(name, scope, op, n, average, staging);
        }
        start_each!(self, name, scope, op, n, average, staging)
    }
}

/// Each operation of `run` and `start`, with its fields as arguments.
#[allow(clippy::too_many_arguments)]
impl MpiCudaComm {
    pub(super) fn raw_barrier(&self, op: &'static str) -> Result<()> {
        self.sync(op)?;
        // SAFETY: a valid communicator.
        host::check(op, unsafe { ffi::MPI_Barrier(self.mpi.as_raw()) })
    }

    pub(super) fn raw_broadcast<T: Element>(
        &self,
        op: &'static str,
        buf: &mut DevMut<'_, T>,
        root: usize,
        n: usize,
    ) -> Result<()> {
        let n = host::int(n);
        self.foreign(op, &[buf.stream()])?;
        let (p, _g) = dptr_mut(buf, &self.stream);
        self.sync(op)?;
        // SAFETY: `p` addresses `n` elements of `T` on this device (checked), which the CUDA-aware MPI
        // reads (root) or writes (others) before returning; its producers are complete (synchronized).
        host::check(op, unsafe {
            ffi::MPI_Bcast(
                p,
                n,
                host::datatype::<T>(),
                root as c_int,
                self.mpi.as_raw(),
            )
        })
    }

    pub(super) fn raw_reduce<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: Option<&mut DevMut<'_, T>>,
        red: ReduceOp,
        root: usize,
        n: usize,
    ) -> Result<()> {
        let n = host::int(n);
        let mut streams = vec![send.stream()];
        let recv_stream = recv.as_ref().map(|r| r.stream().clone());
        streams.extend(recv_stream.as_ref());
        self.foreign(op, &streams)?;
        let (s, _s) = dptr(send, &self.stream);
        let r: Option<(*mut c_void, SyncOnDrop<'_>)> = recv.map(|r| dptr_mut(r, &self.stream));
        let recv_ptr = r.as_ref().map_or_else(null_mut, |(p, _)| *p);
        self.sync(op)?;
        // SAFETY: `send` holds `n` elements on this device; on the root `recv` holds `n` too
        // (checked), elsewhere MPI ignores the receive buffer; both synchronized; root in range.
        host::check(op, unsafe {
            ffi::MPI_Reduce(
                s,
                recv_ptr,
                n,
                host::datatype::<T>(),
                host::op(red),
                root as c_int,
                self.mpi.as_raw(),
            )
        })
    }

    pub(super) fn raw_all_reduce<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Dev<'_, T>>,
        recv: &mut DevMut<'_, T>,
        red: ReduceOp,
        n: usize,
    ) -> Result<()> {
        let n = host::int(n);
        let mut streams = vec![recv.stream().clone()];
        streams.extend(send.map(|s| s.stream().clone()));
        self.foreign(op, &streams.iter().collect::<Vec<_>>())?;
        let s = send.map(|s| dptr(s, &self.stream));
        let (r, _r) = dptr_mut(recv, &self.stream);
        // MPI_IN_PLACE (from the MPI's own header) makes MPI read and write `recv` only.
        let src = s
            .as_ref()
            .map_or_else(|| host::in_place().cast_const(), |(p, _)| *p);
        self.sync(op)?;
        // SAFETY: both buffers (or `recv` alone, in place) hold `n` elements of `T` on this device
        // (checked), their producers are complete (synchronized), and MPI is done with them when it
        // returns.
        host::check(op, unsafe {
            ffi::MPI_Allreduce(
                src,
                r,
                n,
                host::datatype::<T>(),
                host::op(red),
                self.mpi.as_raw(),
            )
        })
    }

    pub(super) fn raw_all_gather<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: &mut DevMut<'_, T>,
        n: usize,
    ) -> Result<()> {
        let n = host::int(n);
        self.foreign(op, &[send.stream(), recv.stream()])?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(op)?;
        // SAFETY: `send` holds `n` and `recv` `size * n` elements on this device (checked), synchronized.
        host::check(op, unsafe {
            ffi::MPI_Allgather(s, n, dt, r, n, dt, self.mpi.as_raw())
        })
    }

    pub(super) fn raw_all_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: &mut DevMut<'_, T>,
        counts: &[usize],
    ) -> Result<()> {
        let (c, d) = host::packed(counts);
        let rank = self.mpi.rank();
        self.foreign(op, &[send.stream(), recv.stream()])?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(op)?;
        // SAFETY: `send` holds counts[rank] elements and `recv` the sum of counts at the packed
        // displacements (checked), on this device, synchronized.
        host::check(op, unsafe {
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

    pub(super) fn raw_gather<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: Option<&mut DevMut<'_, T>>,
        root: usize,
        n: usize,
    ) -> Result<()> {
        let n = host::int(n);
        let recv_stream = recv.as_ref().map(|r| r.stream().clone());
        let mut streams = vec![send.stream()];
        streams.extend(recv_stream.as_ref());
        self.foreign(op, &streams)?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let r = recv.map(|r| dptr_mut(r, &self.stream));
        let recv_ptr = r.as_ref().map_or_else(null_mut, |(p, _)| *p);
        self.sync(op)?;
        // SAFETY: `send` holds `n` elements; on the root `recv` holds `size * n` (checked); MPI ignores
        // the receive buffer elsewhere; on this device, synchronized.
        host::check(op, unsafe {
            ffi::MPI_Gather(s, n, dt, recv_ptr, n, dt, root as c_int, self.mpi.as_raw())
        })
    }

    pub(super) fn raw_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: Option<&mut DevMut<'_, T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        let (c, d) = host::packed(counts);
        let rank = self.mpi.rank();
        let recv_stream = recv.as_ref().map(|r| r.stream().clone());
        let mut streams = vec![send.stream()];
        streams.extend(recv_stream.as_ref());
        self.foreign(op, &streams)?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let r = recv.map(|r| dptr_mut(r, &self.stream));
        let recv_ptr = r.as_ref().map_or_else(null_mut, |(p, _)| *p);
        self.sync(op)?;
        // SAFETY: `send` holds counts[rank] elements; on the root `recv` holds the sum of counts at the
        // packed displacements (checked); elsewhere MPI ignores the receive arguments.
        host::check(op, unsafe {
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

    pub(super) fn raw_scatter<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Dev<'_, T>>,
        recv: &mut DevMut<'_, T>,
        root: usize,
        n: usize,
    ) -> Result<()> {
        let n = host::int(n);
        let mut streams = vec![recv.stream()];
        streams.extend(send.map(|s| s.stream()));
        self.foreign(op, &streams)?;
        let dt = host::datatype::<T>();
        let s = send.map(|s| dptr(s, &self.stream));
        let send_ptr = s.as_ref().map_or(ptr::null(), |(p, _)| *p);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(op)?;
        // SAFETY: `recv` holds `n` elements; on the root `send` holds `size * n` (checked); MPI ignores
        // the send buffer elsewhere; on this device, synchronized.
        host::check(op, unsafe {
            ffi::MPI_Scatter(send_ptr, n, dt, r, n, dt, root as c_int, self.mpi.as_raw())
        })
    }

    pub(super) fn raw_scatter_v<T: Element>(
        &self,
        op: &'static str,
        send: Option<&Dev<'_, T>>,
        recv: &mut DevMut<'_, T>,
        counts: &[usize],
        root: usize,
    ) -> Result<()> {
        let (c, d) = host::packed(counts);
        let rank = self.mpi.rank();
        let mut streams = vec![recv.stream()];
        streams.extend(send.map(|s| s.stream()));
        self.foreign(op, &streams)?;
        let dt = host::datatype::<T>();
        let s = send.map(|s| dptr(s, &self.stream));
        let send_ptr = s.as_ref().map_or(ptr::null(), |(p, _)| *p);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(op)?;
        // SAFETY: `recv` holds counts[rank] elements; on the root `send` holds the sum of counts at
        // the packed displacements (checked); elsewhere MPI ignores the send arguments.
        host::check(op, unsafe {
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

    pub(super) fn raw_reduce_scatter<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: &mut DevMut<'_, T>,
        red: ReduceOp,
        n: usize,
    ) -> Result<()> {
        let n = host::int(n);
        self.foreign(op, &[send.stream(), recv.stream()])?;
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(op)?;
        // SAFETY: `send` holds `size * n` and `recv` `n` elements of `T` on this device (checked),
        // synchronized.
        host::check(op, unsafe {
            ffi::MPI_Reduce_scatter_block(
                s,
                r,
                n,
                host::datatype::<T>(),
                host::op(red),
                self.mpi.as_raw(),
            )
        })
    }

    pub(super) fn raw_all_to_all<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        recv: &mut DevMut<'_, T>,
        n: usize,
    ) -> Result<()> {
        let n = host::int(n);
        self.foreign(op, &[send.stream(), recv.stream()])?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(op)?;
        // SAFETY: both buffers hold `size` blocks of `n` elements on this device (checked), synchronized.
        host::check(op, unsafe {
            ffi::MPI_Alltoall(s, n, dt, r, n, dt, self.mpi.as_raw())
        })
    }

    pub(super) fn raw_all_to_all_v<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        send_counts: &[usize],
        recv: &mut DevMut<'_, T>,
        recv_counts: &[usize],
    ) -> Result<()> {
        let ((sc, sd), (rc, rd)) = (host::packed(send_counts), host::packed(recv_counts));
        self.foreign(op, &[send.stream(), recv.stream()])?;
        let dt = host::datatype::<T>();
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(op)?;
        // SAFETY: `send` and `recv` hold the sums of their counts at packed displacements (checked), on
        // this device, synchronized.
        host::check(op, unsafe {
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

    pub(super) fn raw_send<T: Element>(
        &self,
        op: &'static str,
        buf: &Dev<'_, T>,
        dest: usize,
        tag: Tag,
        n: usize,
    ) -> Result<()> {
        let (n, dest) = (host::int(n), host::int(dest));
        self.foreign(op, &[buf.stream()])?;
        let (p, _g) = dptr(buf, &self.stream);
        self.sync(op)?;
        // SAFETY: `p` addresses `n` elements of `T` on this device, synchronized; destination and tag
        // checked in range.
        host::check(op, unsafe {
            ffi::MPI_Send(p, n, host::datatype::<T>(), dest, tag, self.mpi.as_raw())
        })
    }

    pub(super) fn raw_recv<T: Element>(
        &self,
        op: &'static str,
        buf: &mut DevMut<'_, T>,
        source: usize,
        tag: Tag,
        n: usize,
    ) -> Result<()> {
        let (n, source) = (host::int(n), host::int(source));
        self.foreign(op, &[buf.stream()])?;
        let expected = buf.len();
        let dt = host::datatype::<T>();
        let mut status = host::status();
        let (p, _g) = dptr_mut(buf, &self.stream);
        self.sync(op)?;
        // SAFETY: `p` has room for `n` elements of `T` on this device (a longer message is
        // MPI_ERR_TRUNCATE, not an overflow), synchronized; `status` is a valid out-pointer.
        host::check(op, unsafe {
            ffi::MPI_Recv(p, n, dt, source, tag, self.mpi.as_raw(), &mut status)
        })?;
        host::received(op, &status, dt, expected)
    }

    pub(super) fn raw_send_recv<T: Element>(
        &self,
        op: &'static str,
        send: &Dev<'_, T>,
        dest: usize,
        recv: &mut DevMut<'_, T>,
        source: usize,
        tag: Tag,
        (sn, rn): (usize, usize),
    ) -> Result<()> {
        let [dest, source, sn, rn] = [dest, source, sn, rn].map(host::int);
        self.foreign(op, &[send.stream(), recv.stream()])?;
        let expected = recv.len();
        let dt = host::datatype::<T>();
        let mut status = host::status();
        {
            let (s, _s) = dptr(send, &self.stream);
            let (r, _r) = dptr_mut(recv, &self.stream);
            self.sync(op)?;
            // SAFETY: `send` holds `sn` and `recv` has room for `rn` elements of `T` on this device,
            // synchronized; ranks and tag checked.
            host::check(op, unsafe {
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
        host::received(op, &status, dt, expected)
    }

    pub(super) fn raw_i_all_reduce<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: &'s mut DevMut<'s, T>,
        red: ReduceOp,
        average: bool,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let n = host::int(n);
        if let [Some(mut hs), hr] = staging {
            let mut hr = pinned(op, hr)?;
            stage_in(op, &self.stream, send, hs.host_mut())?;
            // SAFETY: an MPI_Request handle may start as any value; MPI_Iallreduce overwrites it.
            let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
            // SAFETY: both pinned host buffers hold `n` elements of `T` and travel with the operation
            // in flight until it completes.
            host::check(op, unsafe {
                ffi::MPI_Iallreduce(
                    host::ptr(hs.host()),
                    host::ptr_mut(hr.host_mut()),
                    n,
                    host::datatype::<T>(),
                    host::op(red),
                    self.mpi.as_raw(),
                    &mut request,
                )
            })?;
            let finish = if average { ReduceOp::Avg } else { red };
            let inner =
                MpiPending::<T>::new(request, op).average(finish, hr.host_mut(), self.mpi.size());
            return Ok(scope.register(Box::new(StagedPending {
                inner,
                stream: &self.stream,
                keep: vec![hs],
                back: Some((hr, recv)),
            })));
        }
        self.foreign(op, &[send.stream(), recv.stream()])?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Iallreduce overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        {
            let (s, _s) = dptr(send, &self.stream);
            let (r, _r) = dptr_mut(recv, &self.stream);
            self.sync(op)?;
            // SAFETY: both buffers hold `n` elements on this device (checked), synchronized, and stay
            // borrowed for 's; the scope completes the request before 's ends.
            host::check(op, unsafe {
                ffi::MPI_Iallreduce(
                    s,
                    r,
                    n,
                    host::datatype::<T>(),
                    host::op(red),
                    self.mpi.as_raw(),
                    &mut request,
                )
            })?;
        }
        let average = average.then_some(recv);
        Ok(self.register(scope, MpiPending::<T>::new(request, op), average))
    }

    pub(super) fn raw_i_broadcast<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut DevMut<'s, T>,
        root: usize,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let n = host::int(n);
        if let [Some(mut h), _] = staging {
            let is_root = self.mpi.rank() == root;
            if is_root {
                stage_in(op, &self.stream, buf, h.host_mut())?;
            }
            // SAFETY: an MPI_Request handle may start as any value; MPI_Ibcast overwrites it.
            let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
            // SAFETY: the pinned host buffer holds `n` elements and travels with the operation.
            host::check(op, unsafe {
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
                inner: MpiPending::<T>::new(request, op),
                stream: &self.stream,
                keep,
                back,
            })));
        }
        self.foreign(op, &[buf.stream()])?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Ibcast overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        let (p, _g) = dptr_mut(buf, &self.stream);
        self.sync(op)?;
        // SAFETY: `p` addresses `n` elements on this device, synchronized, borrowed for 's; the scope
        // completes the request before 's ends.
        host::check(op, unsafe {
            ffi::MPI_Ibcast(
                p,
                n,
                host::datatype::<T>(),
                root as c_int,
                self.mpi.as_raw(),
                &mut request,
            )
        })?;
        Ok(self.register(scope, MpiPending::<T>::new(request, op), None))
    }

    pub(super) fn raw_i_all_gather<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: &'s mut DevMut<'s, T>,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        let n = host::int(n);
        let dt = host::datatype::<T>();
        if let [Some(mut hs), hr] = staging {
            let mut hr = pinned(op, hr)?;
            stage_in(op, &self.stream, send, hs.host_mut())?;
            // SAFETY: an MPI_Request handle may start as any value; MPI_Iallgather overwrites it.
            let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
            // SAFETY: `hs` holds `n` and `hr` `size * n` elements (checked), both travelling with the
            // operation in flight until it completes.
            host::check(op, unsafe {
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
                inner: MpiPending::<T>::new(request, op),
                stream: &self.stream,
                keep: vec![hs],
                back: Some((hr, recv)),
            })));
        }
        self.foreign(op, &[send.stream(), recv.stream()])?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Iallgather overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        let (s, _s) = dptr(send, &self.stream);
        let (r, _r) = dptr_mut(recv, &self.stream);
        self.sync(op)?;
        // SAFETY: `send` holds `n` and `recv` `size * n` elements on this device, synchronized, both
        // borrowed for 's; the scope completes the request before 's ends.
        host::check(op, unsafe {
            ffi::MPI_Iallgather(s, n, dt, r, n, dt, self.mpi.as_raw(), &mut request)
        })?;
        Ok(self.register(scope, MpiPending::<T>::new(request, op), None))
    }

    pub(super) fn raw_i_send<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s Dev<'s, T>,
        dest: usize,
        tag: Tag,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        // Point-to-point operations take device addresses: no pinned buffers are leased for them.
        debug_assert!(staging.iter().all(Option::is_none));
        let (n, dest) = (host::int(n), host::int(dest));
        self.foreign(op, &[buf.stream()])?;
        // SAFETY: an MPI_Request handle may start as any value; MPI_Isend overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        let (p, _g) = dptr(buf, &self.stream);
        self.sync(op)?;
        // SAFETY: `p` addresses `n` elements on this device, synchronized, borrowed for 's; the scope
        // completes the request before 's ends.
        host::check(op, unsafe {
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
        Ok(self.register(scope, MpiPending::<T>::new(request, op), None))
    }

    pub(super) fn raw_i_recv<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut DevMut<'s, T>,
        source: usize,
        tag: Tag,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        // Point-to-point operations take device addresses: no pinned buffers are leased for them.
        debug_assert!(staging.iter().all(Option::is_none));
        let (n, source) = (host::int(n), host::int(source));
        self.foreign(op, &[buf.stream()])?;
        let expected = buf.len();
        // SAFETY: an MPI_Request handle may start as any value; MPI_Irecv overwrites it.
        let mut request: ffi::MPI_Request = unsafe { std::mem::zeroed() };
        let (p, _g) = dptr_mut(buf, &self.stream);
        self.sync(op)?;
        // SAFETY: `p` has room for `n` elements on this device, synchronized, borrowed for 's; the
        // scope completes the request before 's ends.
        host::check(op, unsafe {
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
            MpiPending::<T>::new(request, op).expect(expected),
            None,
        ))
    }

    pub(super) fn raw_i_barrier<'s>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
    ) -> Result<Request<'s>> {
        Ok(scope.register(Box::new(self.through_host().barrier(op)?)))
    }

    pub(super) fn raw_i_reduce<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: Option<&'s mut DevMut<'s, T>>,
        red: ReduceOp,
        average: bool,
        root: usize,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc(op, scope, Some(send), recv, staging, average, |s, r| {
            // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
            // deadline) sized for the checked counts, valid until the operation completes.
            unsafe { self.mpi.start_reduce::<T>(op, s, r, red, root, n) }
        })
    }

    pub(super) fn raw_i_all_reduce_in_place<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut DevMut<'s, T>,
        red: ReduceOp,
        average: bool,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc_in_place(op, scope, buf, staging, average, |b| {
            // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
            // deadline) sized for the checked counts, valid until the operation completes.
            unsafe { self.mpi.start_all_reduce_in_place::<T>(op, b, red, n) }
        })
    }

    pub(super) fn raw_i_reduce_scatter<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: &'s mut DevMut<'s, T>,
        red: ReduceOp,
        average: bool,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc(
            op,
            scope,
            Some(send),
            Some(recv),
            staging,
            average,
            |s, r| {
                // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
                // deadline) sized for the checked counts, valid until the operation completes.
                unsafe { self.mpi.start_reduce_scatter::<T>(op, s, r, red, n) }
            },
        )
    }

    pub(super) fn raw_i_all_to_all<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: &'s mut DevMut<'s, T>,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc(op, scope, Some(send), Some(recv), staging, false, |s, r| {
            // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
            // deadline) sized for the checked counts, valid until the operation completes.
            unsafe { self.mpi.start_all_to_all::<T>(op, s, r, n) }
        })
    }

    pub(super) fn raw_i_all_to_all_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        send_counts: &[usize],
        recv: &'s mut DevMut<'s, T>,
        recv_counts: &[usize],
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc(op, scope, Some(send), Some(recv), staging, false, |s, r| {
            // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
            // deadline) sized for the checked counts, valid until the operation completes.
            unsafe {
                self.mpi
                    .start_all_to_all_v::<T>(op, s, send_counts, r, recv_counts)
            }
        })
    }

    pub(super) fn raw_i_all_gather_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: &'s mut DevMut<'s, T>,
        counts: &[usize],
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc(op, scope, Some(send), Some(recv), staging, false, |s, r| {
            // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
            // deadline) sized for the checked counts, valid until the operation completes.
            unsafe { self.mpi.start_all_gather_v::<T>(op, s, r, counts) }
        })
    }

    pub(super) fn raw_i_gather<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: Option<&'s mut DevMut<'s, T>>,
        root: usize,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc(op, scope, Some(send), recv, staging, false, |s, r| {
            // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
            // deadline) sized for the checked counts, valid until the operation completes.
            unsafe { self.mpi.start_gather::<T>(op, s, r, root, n) }
        })
    }

    pub(super) fn raw_i_gather_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        recv: Option<&'s mut DevMut<'s, T>>,
        counts: &[usize],
        root: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc(op, scope, Some(send), recv, staging, false, |s, r| {
            // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
            // deadline) sized for the checked counts, valid until the operation completes.
            unsafe { self.mpi.start_gather_v::<T>(op, s, r, counts, root) }
        })
    }

    pub(super) fn raw_i_scatter<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Dev<'s, T>>,
        recv: &'s mut DevMut<'s, T>,
        root: usize,
        n: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc(op, scope, send, Some(recv), staging, false, |s, r| {
            // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
            // deadline) sized for the checked counts, valid until the operation completes.
            unsafe { self.mpi.start_scatter::<T>(op, s, r, root, n) }
        })
    }

    pub(super) fn raw_i_scatter_v<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s Dev<'s, T>>,
        recv: &'s mut DevMut<'s, T>,
        counts: &[usize],
        root: usize,
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc(op, scope, send, Some(recv), staging, false, |s, r| {
            // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
            // deadline) sized for the checked counts, valid until the operation completes.
            unsafe { self.mpi.start_scatter_v::<T>(op, s, r, counts, root) }
        })
    }

    pub(super) fn raw_i_send_recv<'s, T: Element>(
        &'s self,
        op: &'static str,
        scope: &'s Scope<'s, '_>,
        send: &'s Dev<'s, T>,
        dest: usize,
        recv: &'s mut DevMut<'s, T>,
        source: usize,
        tag: Tag,
        (sn, rn): (usize, usize),
        staging: Leases<'s, T>,
    ) -> Result<Request<'s>> {
        self.start_nbc(op, scope, Some(send), Some(recv), staging, false, |s, r| {
            // SAFETY: the regions are pinned host buffers or device addresses (a CUDA-aware MPI, no
            // deadline) sized for the checked counts, valid until the operation completes.
            unsafe {
                self.mpi
                    .start_send_recv::<T>(op, (s, sn, dest), (r, rn, source), tag)
            }
        })
    }
}
