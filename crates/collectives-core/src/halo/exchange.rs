//! [`HaloExchange`]: the exchange on the NCCL backend.

use std::ffi::{c_int, c_void, CStr};
use std::fmt;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, DevicePtr, DevicePtrMut};
use datatype_pack::gpu::{FusedPacker, GpuOptions};
use nccl_sys as sys;

use super::geometry::{pack_error, HaloPlan, HaloSpec, Neighbours, ProcessGrid};
use crate::backend::nccl::NcclComm;
use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::op::ReduceOp;

const OP: &str = "halo_exchange";

fn cuda(op: &'static str, e: cudarc::driver::DriverError) -> Error {
    Error::Cuda {
        op,
        message: e.to_string(),
    }
}

fn unavailable(e: sys::Error) -> Error {
    Error::Unavailable {
        what: "NCCL",
        message: e.to_string(),
    }
}

fn nccl_error(lib: &sys::Library, op: &'static str, code: sys::ncclResult_t) -> Error {
    let name = sys::nccl_fn!(lib, ncclGetErrorString)
        .ok()
        .map(|f| {
            // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
            let p = unsafe { f(code) };
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: non-null, NUL-terminated and static (see above).
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        })
        .unwrap_or_default();
    Error::Nccl {
        op,
        code,
        name,
        message: String::new(),
    }
}

/// Time of each step of one exchange, in milliseconds, from CUDA events on the communicator's
/// stream.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HaloTimes {
    /// The fused pack launch.
    pub pack_ms: f64,
    /// The grouped send/receive of every message.
    pub transfer_ms: f64,
    /// The fused unpack launch.
    pub unpack_ms: f64,
}

impl HaloTimes {
    /// The whole exchange.
    pub fn total_ms(&self) -> f64 {
        self.pack_ms + self.transfer_ms + self.unpack_ms
    }
}

/// A halo exchange over an [`NcclComm`]: plans, compiled pack and unpack kernels, and the send and
/// receive buffers, made once and reused by every [`exchange`](Self::exchange). See the
/// [module docs](super).
pub struct HaloExchange<'c> {
    comm: &'c NcclComm,
    spec: HaloSpec,
    grid: ProcessGrid,
    plan: HaloPlan,
    pack: FusedPacker,
    unpack: FusedPacker,
    send_buf: CudaSlice<u8>,
    recv_buf: CudaSlice<u8>,
    field_len: usize,
    events: Option<[CudaEvent; 4]>,
}

impl fmt::Debug for HaloExchange<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HaloExchange")
            .field("spec", &self.spec)
            .field("grid", &self.grid)
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

/// The spec as numbers every rank must agree on.
fn spec_words(spec: &HaloSpec) -> [u64; 9] {
    let d = spec.dims.unwrap_or([0; 3]);
    [
        spec.n[0] as u64,
        spec.n[1] as u64,
        spec.n[2] as u64,
        spec.radius as u64,
        spec.quantities as u64,
        u64::from(spec.neighbours == Neighbours::All),
        d[0] as u64,
        d[1] as u64,
        d[2] as u64,
    ]
}

impl<'c> HaloExchange<'c> {
    /// The exchange of `spec` over `comm`'s ranks. Collective: every rank calls it with the same
    /// spec. Compiles the pack and unpack kernels (NVRTC) and allocates the send and receive
    /// buffers on the communicator's device.
    ///
    /// # Errors
    /// On every rank, when any rank's spec is refused ([`HaloSpec::validate`], a process grid
    /// that does not hold the ranks) or the ranks pass different specs:
    /// [`Error::InvalidArgument`]. Then, on the ranks where they happen:
    /// [`Error::Unavailable`] without NVRTC; [`Error::Cuda`] when compiling, loading or
    /// allocating fails; MPI errors of the agreement.
    pub fn new(comm: &'c NcclComm, spec: HaloSpec) -> Result<Self> {
        let _span = tracing::debug_span!("halo_new").entered();
        let (rank, size) = (comm.rank(), comm.size());
        let local = ProcessGrid::new(size, spec.dims)
            .and_then(|grid| HaloPlan::new(&spec, &grid, rank).map(|plan| (grid, plan)));
        // Every rank learns whether every rank's spec is good and equal before anyone goes on.
        let mine = spec_words(&spec);
        let mut words = [0u64; 10];
        words[0] = u64::from(local.is_err());
        words[1..].copy_from_slice(&mine);
        let mut high = [0u64; 10];
        let mut low = [0u64; 10];
        comm.mpi()
            .all_reduce(&words[..], &mut high[..], ReduceOp::Max)?;
        comm.mpi()
            .all_reduce(&words[..], &mut low[..], ReduceOp::Min)?;
        let (grid, plan) = local?;
        if high[0] != 0 {
            return Err(Error::invalid(
                OP,
                "another rank refused its halo spec (see its error)",
            ));
        }
        if high[1..] != low[1..] {
            return Err(Error::invalid(
                OP,
                format!(
                    "the ranks pass different halo specs: per field [nx, ny, nz, radius, \
                     quantities, all, px, py, pz] the smallest is {:?} and the largest {:?}; \
                     this rank passed {mine:?}",
                    &low[1..],
                    &high[1..]
                ),
            ));
        }
        let ctx = comm.context();
        let opts = GpuOptions::default();
        let pack = FusedPacker::with_regions(ctx, plan.send_regions().to_vec(), &opts)
            .map_err(|e| pack_error(OP, e))?;
        let unpack = FusedPacker::with_regions(ctx, plan.recv_regions().to_vec(), &opts)
            .map_err(|e| pack_error(OP, e))?;
        let stream = comm.stream();
        let alloc = |bytes: u64| {
            stream
                .alloc_zeros::<u8>((bytes as usize).max(1))
                .map_err(|e| cuda(OP, e))
        };
        let send_buf = alloc(plan.send_bytes())?;
        let recv_buf = alloc(plan.recv_bytes())?;
        let field_len = spec.field_len()?;
        Ok(Self {
            comm,
            spec,
            grid,
            plan,
            pack,
            unpack,
            send_buf,
            recv_buf,
            field_len,
            events: None,
        })
    }

    /// The spec.
    pub fn spec(&self) -> &HaloSpec {
        &self.spec
    }

    /// The process grid.
    pub fn grid(&self) -> &ProcessGrid {
        &self.grid
    }

    /// This rank's plan: regions and messages.
    pub fn plan(&self) -> &HaloPlan {
        &self.plan
    }

    /// The communicator.
    pub fn comm(&self) -> &'c NcclComm {
        self.comm
    }

    /// Elements (f64) a field must have: [`HaloSpec::field_len`].
    pub fn field_len(&self) -> usize {
        self.field_len
    }

    fn check_field(&self, op: &'static str, field: &CudaSlice<f64>) -> Result<()> {
        if field.len() != self.field_len {
            return Err(Error::invalid(
                op,
                format!(
                    "the field has {} elements but {} quantities of {:?} padded cells need {}",
                    field.len(),
                    self.spec.quantities,
                    self.spec.padded(),
                    self.field_len
                ),
            ));
        }
        let (mine, theirs) = (self.comm.context().ordinal(), field.ordinal());
        if mine != theirs {
            return Err(Error::invalid(
                op,
                format!("the field is on device {theirs} but the communicator is on device {mine}"),
            ));
        }
        Ok(())
    }

    /// Enqueue the whole exchange on the communicator's stream: pack, transfer, unpack. Returns
    /// once enqueued; the ghost cells are filled when the stream gets there. Every rank calls it
    /// (it contains the transfers).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `field` has the wrong length or lies on another device
    /// (checked before anything is enqueued); then the errors of [`pack`](Self::pack),
    /// [`transfer`](Self::transfer) and [`unpack`](Self::unpack).
    pub fn exchange(&mut self, field: &mut CudaSlice<f64>) -> Result<()> {
        let _span = tracing::trace_span!("halo_exchange").entered();
        self.check_field(OP, field)?;
        self.pack(field)?;
        self.transfer()?;
        self.unpack(field)
    }

    /// [`exchange`](Self::exchange), timed: CUDA events around each step, then a wait for the
    /// stream ([`NcclComm::synchronize`], with its deadline).
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange); [`Error::Cuda`] from the events;
    /// [`Error::Timeout`] and [`Error::Nccl`] from the wait.
    pub fn exchange_timed(&mut self, field: &mut CudaSlice<f64>) -> Result<HaloTimes> {
        const OP_T: &str = "halo_exchange_timed";
        let _span = tracing::trace_span!("halo_exchange_timed").entered();
        self.check_field(OP_T, field)?;
        if self.events.is_none() {
            let ctx = self.comm.context();
            let ev = || {
                ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(|e| cuda(OP_T, e))
            };
            self.events = Some([ev()?, ev()?, ev()?, ev()?]);
        }
        let stream = self.comm.stream().clone();
        let record = |this: &Self, i: usize| -> Result<()> {
            match &this.events {
                Some(ev) => ev[i].record(&stream).map_err(|e| cuda(OP_T, e)),
                None => Ok(()),
            }
        };
        record(self, 0)?;
        self.pack(field)?;
        record(self, 1)?;
        self.transfer()?;
        record(self, 2)?;
        self.unpack(field)?;
        record(self, 3)?;
        self.comm.synchronize()?;
        let Some(ev) = &self.events else {
            return Ok(HaloTimes::default());
        };
        let ms = |a: usize, b: usize| -> Result<f64> {
            ev[a]
                .elapsed_ms(&ev[b])
                .map(f64::from)
                .map_err(|e| cuda(OP_T, e))
        };
        Ok(HaloTimes {
            pack_ms: ms(0, 1)?,
            transfer_ms: ms(1, 2)?,
            unpack_ms: ms(2, 3)?,
        })
    }

    /// Step 1: enqueue the fused pack of every send region of `field` into the send buffer.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a field of the wrong length or device;
    /// [`Error::Cuda`] when the launch (or compiling a kernel variant) fails.
    pub fn pack(&mut self, field: &CudaSlice<f64>) -> Result<()> {
        const OP_P: &str = "halo_pack";
        self.check_field(OP_P, field)?;
        self.pack
            .pack(self.comm.stream(), field, &mut self.send_buf)
            .map_err(|e| pack_error(OP_P, e))
    }

    /// Step 2: enqueue the transfers, one NCCL group holding one send and one receive per
    /// neighbour rank (possibly this rank). Every rank calls it.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when libnccl lacks `ncclSend`/`ncclRecv`; [`Error::Nccl`] when
    /// NCCL refuses a call or the group.
    pub fn transfer(&mut self) -> Result<()> {
        const OP_X: &str = "halo_transfer";
        let _span = tracing::trace_span!("halo_transfer").entered();
        let comm = self.comm;
        let lib = comm.library();
        let send_fn = sys::nccl_fn!(lib, ncclSend).map_err(unavailable)?;
        let recv_fn = sys::nccl_fn!(lib, ncclRecv).map_err(unavailable)?;
        let stream = comm.stream();
        let raw_stream = stream.cu_stream() as sys::cudaStream_t;
        let (sp, _read) = self.send_buf.device_ptr(stream);
        let (rp, _write) = self.recv_buf.device_ptr_mut(stream);
        let group = comm.group()?;
        for m in self.plan.sends().iter().filter(|m| m.bytes > 0) {
            // SAFETY: the message's bytes lie inside the send buffer (the plan sized it to the
            // end of the last region); the peer is a rank of the communicator (the process grid
            // holds exactly its ranks); the call is enqueued on the communicator's stream inside
            // a group, and the communicator is borrowed for the whole call.
            let rc = unsafe {
                send_fn(
                    (sp + m.offset) as usize as *const c_void,
                    m.bytes as usize,
                    sys::ncclUint8,
                    m.peer as c_int,
                    comm.as_raw(),
                    raw_stream,
                )
            };
            if rc != sys::ncclSuccess && rc != sys::ncclInProgress {
                drop(group);
                return Err(nccl_error(lib, OP_X, rc));
            }
        }
        for m in self.plan.recvs().iter().filter(|m| m.bytes > 0) {
            // SAFETY: as above, inside the receive buffer; the sender posts a message of the same
            // length (both sides derive it from the same spec, agreed at creation).
            let rc = unsafe {
                recv_fn(
                    (rp + m.offset) as usize as *mut c_void,
                    m.bytes as usize,
                    sys::ncclUint8,
                    m.peer as c_int,
                    comm.as_raw(),
                    raw_stream,
                )
            };
            if rc != sys::ncclSuccess && rc != sys::ncclInProgress {
                drop(group);
                return Err(nccl_error(lib, OP_X, rc));
            }
        }
        group.end()
    }

    /// Step 3: enqueue the fused unpack of the receive buffer into the ghost cells of `field`.
    ///
    /// # Errors
    /// As [`pack`](Self::pack).
    pub fn unpack(&mut self, field: &mut CudaSlice<f64>) -> Result<()> {
        const OP_U: &str = "halo_unpack";
        self.check_field(OP_U, field)?;
        self.unpack
            .unpack(self.comm.stream(), &self.recv_buf, field)
            .map_err(|e| pack_error(OP_U, e))
    }
}
