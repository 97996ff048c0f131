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
use super::comm::MpiCudaComm;
use super::raw::{dptr, dptr_mut};
use super::request::CudaPending;
use super::route;
use crate::backend::cuda_common::{self, Leases, ThroughHost};
use crate::backend::mpi_device;
use crate::backend::mpi_host::collectives::{Blocking, Started};
use crate::backend::mpi_host::request::{MpiPending, Region};
use crate::comm::Communicator;
use crate::element::Element;
use crate::error::Result;

use crate::frontend::{replay, Backend, Operation, PlanCall, PlanOp, Start};
use crate::memory::{Dev, DevMut};
use crate::op::{BackendKind, ReduceOp};
use crate::operation::{Name, OpKind};
use crate::record;
use crate::request::{Request, Scope};
use crate::rules::Rules;
use crate::transport::Transport;

const BACKEND: BackendKind = BackendKind::MpiCuda;

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

    /// The path of a call that reduces (`reduces`) on buffers at `at` ([`route`]), noted for the
    /// record: through host memory, with the pinned buffers leased for it, or the device path
    /// (`None`). `lens` are the buffers' lengths, for the leases.
    fn host_route<'c, T: Element>(
        &'c self,
        op: &'static str,
        reduces: bool,
        at: &Addresses,
        lens: [Option<usize>; 2],
    ) -> Result<Option<Leases<'c, T>>> {
        let why = self.paths.through_host(reduces, || {
            at.device.iter().flatten().any(|&p| route::from_pool(p))
        });
        let Some(why) = why else {
            self.last.set(route::DEVICE);
            return Ok(None);
        };
        self.last.set(why.path());
        cuda_common::pin(&self.pool, op, lens).map(Some)
    }

    /// The device addresses of `op`'s buffers, each taken once on the communicator's stream after
    /// the buffers' own streams (`foreign`); the stream is not yet synchronized ([`Self::sync`]
    /// before MPI gets them: MPI knows no streams). Taking them once matters per message: each
    /// `device_ptr` enqueues a wait on the stream, and an event recorded there would cost the
    /// synchronize a round trip to the GPU.
    fn addresses<T: Element>(
        &self,
        name: &'static str,
        read: Option<&Dev<'_, T>>,
        written: Option<&mut DevMut<'_, T>>,
    ) -> Result<Addresses> {
        let streams: Vec<_> = read
            .map(|b| b.stream().clone())
            .into_iter()
            .chain(written.as_ref().map(|b| b.stream().clone()))
            .collect();
        self.foreign(name, &streams.iter().collect::<Vec<_>>())?;
        let nonempty = |len: usize, p: usize| (len > 0).then_some(p as u64);
        let len = written.as_ref().map_or(0, |b| b.len());
        let r = read.map(|b| (b.len(), dptr(b, &self.stream)));
        let w = written.map(|b| (b.len(), dptr_mut(b, &self.stream)));
        Ok(Addresses {
            read: r.map(|(_, p)| Region::Device(p.cast_mut())),
            written: w.map(|(_, p)| Region::Device(p)),
            device: [
                r.and_then(|(n, p)| nonempty(n, p as usize)),
                w.and_then(|(n, p)| nonempty(n, p as usize)),
            ],
            len,
        })
    }
}

/// A call's buffers as MPI gets them ([`MpiCudaComm::addresses`]).
struct Addresses {
    /// The read buffer's region.
    read: Option<Region<'static>>,
    /// The written buffer's region.
    written: Option<Region<'static>>,
    /// The device addresses of the buffers that hold elements (read, written), for the route.
    device: [Option<u64>; 2],
    /// The written buffer's length in elements.
    len: usize,
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

    /// Under a deadline the staged path; otherwise the path the call took: through pinned host
    /// memory (a non-blocking collective where the MPI's take no device buffers, and the calls
    /// [`route`] sends there, with why) or device pointers handed to MPI.
    fn record_path(&self, _op: OpKind, _start: Start, _bytes: usize) -> record::Path {
        if self.staged.is_some() {
            record::Path::staged("staged")
        } else {
            self.last.get()
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
        let s = name.as_str();
        let shape = op.shape();
        let (read, mut written) = op.buffers_mut();
        let lens = [read.map(|b| b.len()), written.as_ref().map(|b| b.len())];
        let at = self.addresses(s, read.copied(), written.as_mut().map(|w| &mut ***w))?;
        if let Some(staging) = self.host_route(s, shape.reduce_op().is_some(), &at, lens)? {
            let written = written.map(|w| &mut **w);
            return self
                .through_host()
                .run(s, &shape, read.copied(), written, n, staging);
        }
        self.sync(s)?;
        // SAFETY: device addresses of buffers sized for the checked counts, their producers
        // complete (synchronized), borrowed until the call returns; a CUDA-aware MPI, and no
        // deadline on this path (`staged` is `None`), so nothing copies them on the host.
        unsafe {
            self.mpi
                .call::<T, Blocking>(s, shape.fill(at.read, at.written), n, at.len)
        }
        .map(drop)
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
        let s = name.as_str();
        // Leased by the front end: a non-blocking collective the MPI takes no device buffers in.
        let leased = staging.iter().any(Option::is_some);
        let mut op = op;
        let staging = if leased {
            self.last.set(record::Path::staged("through-host"));
            staging
        } else {
            let reduces = op.shape().reduce_op().is_some();
            let (read, mut written) = op.buffers_mut();
            let lens = [read.map(|b| b.len()), written.as_ref().map(|b| b.len())];
            let at = self.addresses(s, read.copied(), written.as_mut().map(|w| &mut ***w))?;
            match self.host_route(s, reduces, &at, lens)? {
                Some(staging) => staging,
                None => {
                    self.sync(s)?;
                    let (shape, _, written) = op.split();
                    // SAFETY: device addresses of buffers sized for the checked counts, their
                    // producers complete (synchronized), borrowed for 's; the scope completes
                    // the request before 's ends; no deadline on this path, so nothing copies
                    // them on the host.
                    let inner = unsafe {
                        self.mpi
                            .call::<T, Started>(s, shape.fill(at.read, at.written), n, at.len)
                    }?;
                    return Ok(self.register(scope, inner, written.filter(|_| average)));
                }
            }
        };
        let pending = self.through_host().start(s, op, n, average, staging)?;
        Ok(scope.register(Box::new(pending)))
    }
}
