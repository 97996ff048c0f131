//! A one-shot all-reduce between GPUs of one node that reach each other's memory: for the small
//! messages (a solver's dot products) where NCCL's fixed cost dominates.
//!
//! # How it works
//! At creation ([`OneShot::offer`], collective) every rank allocates one block of device memory
//! (data slots of [`OneShot::capacity`] bytes for two epochs, a flag area and its epoch counters),
//! exports it with CUDA IPC, and maps every peer's. Each call is one kernel of 16 thread blocks on
//! the communicator's stream. Block `b` of rank `r`, in its call number `e` (its epoch):
//!
//! 1. writes its part of the input into slot `r` of epoch `e mod 2` on every peer (stores over
//!    the link, which do not wait for an answer);
//! 2. writes `e` into flag `(b, r)` of every rank (`st.release.sys`), then waits until its own
//!    flags `(b, p)` of every rank `p` reach `e` (`ld.acquire.sys`, its own memory);
//! 3. reads part `b` of every slot of epoch `e mod 2` in its own memory (its own part from the
//!    input), combines them in rank order 0, 1, ... and writes its part of the output. Every rank
//!    computes the same operations on the same bits in the same order: the results agree bit for
//!    bit across ranks.
//!
//! The data crosses the link once, as stores. Reading every peer's slot over the link after the
//! flags instead (one slot per rank, pulled) costs a second crossing: 0.3-1.3 µs more per call
//! back to back from 8 B to 32 KiB on 2 to 4 H100, and 1.4-1.8 times the time at 256 KiB
//! (docs/PERFORMANCE.md, 2026-11-27).
//!
//! # Memory ordering, argued
//! - *Data before flag.* The stores of step 1 are ordered before the flag store of step 2 by
//!   `__syncthreads` (a CTA barrier, cumulative) and the store's release semantics at system
//!   scope; a reader that observes the flag with an acquire load at system scope, followed by a
//!   CTA barrier, observes the stores (PTX memory model: release -> observe -> acquire forms a
//!   synchronizes-with edge; barriers extend it to the other threads of both blocks). This holds
//!   whichever GPU's memory the data lies in.
//! - *No stale flag.* Flags only grow (epochs count calls; comparisons are wrap-safe), and a
//!   block waits for a value equal to or above its own epoch, so a flag left from an earlier call
//!   (at most `e - 1`) never satisfies call `e`. A peer may already be at `e + 1`: it got there
//!   only because this block's flag said `e`, and it writes the other epoch's slots.
//! - *No slot reused too early.* Rank `r` writes the slots of epoch `e mod 2` again at call
//!   `e + 2`, after its call `e + 1` completed, in which every block saw every rank's flag
//!   `e + 1`: each rank had started its call `e + 1`, so, the calls being kernels in order on one
//!   stream, each had finished call `e`, the last reader of those slots (whatever part of them
//!   each block read: message sizes may change between calls). This is why the grid never
//!   changes (every block's epoch advances every call) and why every call runs on the stream
//!   this value was made with.
//! - *A peer that never comes.* The wait gives up after the communicator's deadline (the GPU's
//!   `%globaltimer`), sets a word of mapped host memory and skips the reduction; the host reports
//!   [`Error::Timeout`] after the stream completes, and every later call is refused (the epochs of
//!   the ranks no longer agree). The kernel that gives up also sets an *abandoned* word on every
//!   rank, which every wait reads before each look at the peers' flags: a rank that comes late
//!   finds their flags of its epoch already set (written before they waited), and fails as well
//!   instead of completing against peers that left (whose communicators are aborted), so no rank
//!   is left believing all went well. One window stays: a rank that passes its wait in the
//!   moment a peer's deadline runs out completes while that peer fails; the peer's communicator
//!   is then aborted and this rank's next call (or its teardown barrier) times out.
//! - *Teardown.* A rank frees its memory when dropped only after a barrier of every rank (under
//!   the communicator's deadline at that time) proves no peer still reads or writes it. A rank
//!   whose path was refused (a timeout, an abort) joins the barrier once its stream drained, so
//!   its peers are not kept waiting; if the barrier fails, or MPI is finalized, the memory stays
//!   allocated instead.
//!
//! # Where it is offered
//! Only where every rank has a GPU of its own on this node with peer access to every other
//! rank's GPU, and there are at most [`MAX_RANKS`] ranks: otherwise [`OneShot::offer`]
//! returns [`Offer::NotOffered`] with the reason, the same on every rank. No NVLink multicast.
//!
//! An [`NcclComm`](crate::NcclComm) sets the path up when it is made and takes it for its small
//! all-reduces (see [`crate::backend::nccl::one_shot`]); it can also be called directly.

mod kernel;
mod mapped;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaStream, DeviceSlice, LaunchConfig, PushKernelArg,
};

use crate::comm::{Communicator, DeviceCommunicator};
use crate::deadline::{self, Polled};
use crate::element::{DType, Element};
use crate::error::{Error, Result};
use crate::ipc;
use crate::memory::{DeviceBuffer, DeviceBufferMut};
use crate::op::ReduceOp;

pub use kernel::MAX_RANKS;

const OP: &str = "one_shot";

/// Bytes of one data slot unless asked otherwise: the largest message the path takes.
pub const DEFAULT_CAPACITY: usize = 256 << 10;

/// What [`OneShot::offer`] found: the path, or why it is not offered here (the same on every rank).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Offer {
    /// The path is ready.
    Ready(OneShot),
    /// The path is not offered on this communicator, and why.
    NotOffered(String),
}

/// The one-shot all-reduce of one communicator's ranks (see the [module documentation](self)).
pub struct OneShot {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    rank: usize,
    size: usize,
    layout: Layout,
    local: Option<ipc::DeviceAlloc>,
    peers: Vec<ipc::Mapping>,
    /// Device array: every rank's data base, then every rank's flag base.
    table: Option<ipc::DeviceAlloc>,
    failed: mapped::MappedWord,
    /// The event [`OneShot::synchronize`] records and polls, made once.
    sync_event: CudaEvent,
    arch: String,
    timeout: Cell<Duration>,
    refused: Cell<bool>,
    mpi: crate::MpiComm,
}

impl std::fmt::Debug for OneShot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneShot")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("capacity", &self.layout.capacity)
            .field("arch", &self.arch)
            .finish_non_exhaustive()
    }
}

/// Where a rank's block of memory lays out its parts: the data slots of both epochs, the flags,
/// one word a kernel that gave up sets on every rank, then the counters (16-byte aligned).
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Bytes of one data slot.
    capacity: usize,
    /// Data slots of one epoch: one per rank.
    ranks: usize,
}

impl Layout {
    fn flags(self) -> usize {
        2 * self.ranks * self.capacity
    }

    fn counters(self) -> usize {
        self.flags() + (kernel::BLOCKS as usize * MAX_RANKS + 1) * 4 + 12
    }

    fn bytes(self) -> usize {
        self.counters() + kernel::BLOCKS as usize * 4
    }
}

fn poisoned() -> Error {
    Error::Cuda {
        op: OP,
        message: "the kernel cache's lock was poisoned by a panic".to_owned(),
    }
}

/// Whether every rank of `mpi` says yes.
fn everyone(mpi: &crate::MpiComm, yes: bool) -> Result<bool> {
    let mut v = [i32::from(yes)];
    mpi.all_reduce_in_place(&mut v[..], ReduceOp::Min)?;
    Ok(v[0] == 1)
}

impl OneShot {
    /// Sets up the path for `comm`'s ranks with data slots of `capacity` bytes (the largest
    /// message it takes; [`DEFAULT_CAPACITY`] is a good start), or says why it is not offered.
    /// Collective: every rank of `comm` calls it, in the same order as its other collectives.
    ///
    /// # Errors
    /// An MPI error during the agreements, or a CUDA error copying the pointer table after every
    /// rank made and mapped its memory. A rank that cannot allocate, export or map memory makes
    /// the path [`Offer::NotOffered`] on every rank, with its error as the reason.
    pub fn offer<C: DeviceCommunicator>(comm: &C, capacity: usize) -> Result<Offer> {
        let timeout = comm.deadline().unwrap_or(Duration::from_secs(300));
        let mpi = comm.mpi().dup()?.with_timeout(Some(timeout));
        let ctx = comm.context().clone();
        let (rank, size) = (mpi.rank(), mpi.size());
        ctx.bind_to_thread().map_err(|e| Error::cuda(OP, e))?;

        // Which GPU each rank holds, and whether this rank's reaches every other.
        let mine = ipc::uuid_of(ctx.cu_device()).unwrap_or([0, 0]);
        let mut uuids = vec![0u64; 2 * size];
        mpi.all_gather(&mine[..], &mut uuids[..])?;
        let mut local_reason = None;
        if size > MAX_RANKS {
            local_reason = Some(format!("{size} ranks (at most {MAX_RANKS})"));
        }
        for p in (0..size).filter(|&p| p != rank) {
            let theirs = [uuids[2 * p], uuids[2 * p + 1]];
            if local_reason.is_some() {
                break;
            }
            local_reason = match ipc::peer_access(&ctx, theirs) {
                _ if theirs == mine => Some(format!("ranks {rank} and {p} share a GPU")),
                None => Some(format!("rank {p}'s GPU is not on rank {rank}'s node")),
                Some(false) => Some(format!(
                    "rank {rank}'s GPU has no peer access to rank {p}'s"
                )),
                Some(true) => None,
            };
        }
        if !everyone(&mpi, local_reason.is_none())? {
            return Ok(Offer::NotOffered(local_reason.unwrap_or_else(|| {
                "another rank's GPU lacks peer access to a peer, or ranks span nodes or share a GPU"
                    .to_owned()
            })));
        }

        // Memory, exported and mapped. Every rank goes on only when every rank could.
        let dev_attr = |a| ctx.attribute(a).map_err(|e| Error::cuda(OP, e));
        use cudarc::driver::sys::CUdevice_attribute as A;
        let arch = format!(
            "compute_{}{}",
            dev_attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            dev_attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?
        );
        let layout = Layout {
            capacity,
            ranks: size,
        };
        let setup = || -> Result<(ipc::DeviceAlloc, [u64; ipc::HANDLE_WORDS], mapped::MappedWord)> {
            let local = ipc::DeviceAlloc::zeroed(OP, &ctx, layout.bytes())?;
            let words = local.handle_words(OP)?;
            Ok((local, words, mapped::MappedWord::new(&ctx)?))
        };
        let made = setup();
        let ok = everyone(&mpi, made.is_ok())?;
        let (local, words, failed) = match (made, ok) {
            (Ok(m), true) => m,
            // Every rank takes the same branch: the one that failed says why, the others that
            // another rank could not (an error on one rank only would leave the others going on).
            (Err(e), _) => return Ok(Offer::NotOffered(format!("rank {rank}: {e}"))),
            (Ok(_), false) => {
                return Ok(Offer::NotOffered(
                    "another rank could not allocate or export its memory".to_owned(),
                ))
            }
        };
        let mut all_words = vec![0u64; ipc::HANDLE_WORDS * size];
        mpi.all_gather(&words[..], &mut all_words[..])?;
        let opened: Result<Vec<(usize, ipc::Mapping)>> = (0..size)
            .filter(|&p| p != rank)
            .map(|p| {
                ipc::Mapping::open(
                    OP,
                    &all_words[p * ipc::HANDLE_WORDS..(p + 1) * ipc::HANDLE_WORDS],
                )
                .map(|m| (p, m))
            })
            .collect();
        let ok = everyone(&mpi, opened.is_ok())?;
        let opened = match (opened, ok) {
            (Ok(o), true) => o,
            (Err(e), _) => return Ok(Offer::NotOffered(format!("rank {rank}: {e}"))),
            (Ok(_), false) => {
                return Ok(Offer::NotOffered(
                    "another rank could not map a peer's memory".to_owned(),
                ))
            }
        };
        let mut bases = vec![0u64; size];
        bases[rank] = local.ptr();
        for (p, m) in &opened {
            bases[*p] = m.ptr();
        }
        let mut table_host: Vec<u64> = bases.clone();
        table_host.extend(bases.iter().map(|b| b + layout.flags() as u64));
        let table = ipc::DeviceAlloc::zeroed(OP, &ctx, table_host.len() * 8)?;
        // SAFETY: `table` holds `table_host.len()` u64 words; the copy is synchronous.
        let rc = unsafe {
            cudarc::driver::sys::cuMemcpyHtoD_v2(
                table.ptr(),
                table_host.as_ptr().cast(),
                table_host.len() * 8,
            )
        };
        Error::check_cuda(OP, "cuMemcpyHtoD of the pointer table", rc)?;
        let sync_event = ctx.new_event(None).map_err(|e| Error::cuda(OP, e))?;
        Ok(Offer::Ready(OneShot {
            sync_event,
            ctx,
            stream: comm.stream().clone(),
            rank,
            size,
            layout,
            local: Some(local),
            peers: opened.into_iter().map(|(_, m)| m).collect(),
            table: Some(table),
            failed,
            arch,
            timeout: Cell::new(timeout),
            refused: Cell::new(false),
            mpi,
        }))
    }

    /// The largest message, in bytes, the path takes.
    pub fn capacity(&self) -> usize {
        self.layout.capacity
    }

    /// The stream every call runs on (the communicator's when the path was made).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Change the deadline of the kernel's wait for its peers and of [`OneShot::synchronize`],
    /// for calls enqueued from now on (a communicator's `with_timeout` passes its own here).
    pub fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }

    /// Whether a kernel gave up waiting for a peer: the ranks' epochs no longer agree, and every
    /// later call is refused. Read after the stream passed the calls in question.
    pub fn has_failed(&self) -> bool {
        self.failed.get() != 0
    }

    /// Refuse every later call, and free nothing a peer may still read or write when dropped:
    /// for the owner of a communicator that timed out or was aborted elsewhere.
    pub fn refuse(&self) {
        self.refused.set(true);
    }

    /// Whether the path takes `T` with `op` (averages of integers are left to other paths).
    pub fn offers<T: Element>(&self, op: ReduceOp) -> bool {
        (T::WIRE.lanes == 1 || matches!(op, ReduceOp::Sum | ReduceOp::Avg))
            && kernel::source(T::WIRE.dtype, op).is_some()
    }

    /// The kernel for `dtype` and `op` on this GPU: compiled once per process and device (every
    /// communicator on the device shares it), at its first use.
    fn function(&self, dtype: DType, op: ReduceOp) -> Result<CudaFunction> {
        type Cache = Mutex<HashMap<(usize, DType, ReduceOp), CudaFunction>>;
        static KERNELS: OnceLock<Cache> = OnceLock::new();
        let key = (self.ctx.ordinal(), dtype, op);
        let cache = KERNELS.get_or_init(Default::default);
        if let Some(f) = cache.lock().map_err(|_| poisoned())?.get(&key) {
            return Ok(f.clone());
        }
        let src = kernel::source(dtype, op).ok_or_else(|| Error::InvalidArgument {
            op: OP,
            msg: format!("{op:?} of {dtype:?} is not offered"),
        })?;
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![format!("--gpu-architecture={}", self.arch)],
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|e| Error::Cuda {
            op: OP,
            message: format!("NVRTC: {e}"),
        })?;
        let module = self.ctx.load_module(ptx).map_err(|e| Error::cuda(OP, e))?;
        let f = module
            .load_function(kernel::NAME)
            .map_err(|e| Error::cuda(OP, e))?;
        cache.lock().map_err(|_| poisoned())?.insert(key, f.clone());
        Ok(f)
    }

    fn refusal(&self) -> Error {
        Error::Unusable {
            op: OP,
            timed_out: OP,
            after: self.timeout.get(),
        }
    }

    /// Enqueues `recv = op(send of every rank)` on the communicator's stream, like an NCCL call:
    /// it returns once enqueued; [`OneShot::synchronize`] waits for it. Every rank calls it with
    /// the same length, type and operation, in the same order as its other one-shot calls.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for buffers of different lengths or larger than
    /// [`OneShot::capacity`], or a type and operation the path does not offer; [`Error::Unusable`]
    /// after a timeout; a CUDA error from compiling or launching.
    pub fn all_reduce<T: Element>(
        &self,
        send: &(impl DeviceBuffer<T> + ?Sized),
        recv: &mut (impl DeviceBufferMut<T> + ?Sized),
        op: ReduceOp,
    ) -> Result<()> {
        let len = DeviceSlice::len(send);
        if DeviceSlice::len(recv) != len {
            return Err(Error::InvalidArgument {
                op: OP,
                msg: format!("send has {len} elements, recv {}", DeviceSlice::len(recv)),
            });
        }
        let (s, _s) = send.device_ptr(&self.stream);
        let (r, _r) = recv.device_ptr_mut(&self.stream);
        // SAFETY: both addresses hold `len` elements of `T`, alive and not touched by other work
        // until the stream passes this launch (the guards order them on the stream).
        unsafe { self.launch::<T>(s, r, len, op) }
    }

    /// [`OneShot::all_reduce`] with the result in `buf`.
    ///
    /// # Errors
    /// As [`OneShot::all_reduce`].
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut (impl DeviceBufferMut<T> + ?Sized),
        op: ReduceOp,
    ) -> Result<()> {
        let len = DeviceSlice::len(buf);
        let (p, _p) = buf.device_ptr_mut(&self.stream);
        // SAFETY: as in all_reduce; each block reads its part of the input before it writes the
        // same part of the output, and no other block touches that part.
        unsafe { self.launch::<T>(p, p, len, op) }
    }

    /// [`OneShot::all_reduce`] on device addresses, for a backend that has already taken them
    /// from its buffers (on [`OneShot::stream`]).
    ///
    /// # Safety
    /// `send` and `recv` hold `len` elements of `T` each, stay allocated and untouched by other
    /// work until the stream passes this launch; they may be the same address.
    ///
    /// # Errors
    /// As [`OneShot::all_reduce`].
    pub unsafe fn launch<T: Element>(
        &self,
        send: u64,
        recv: u64,
        len: usize,
        op: ReduceOp,
    ) -> Result<()> {
        if self.refused.get() || self.failed.get() != 0 {
            self.refused.set(true);
            return Err(self.refusal());
        }
        let bytes = len * std::mem::size_of::<T>();
        if bytes > self.layout.capacity {
            return Err(Error::InvalidArgument {
                op: OP,
                msg: format!(
                    "{bytes} bytes exceed the one-shot capacity of {}",
                    self.layout.capacity
                ),
            });
        }
        if !self.offers::<T>(op) {
            return Err(Error::InvalidArgument {
                op: OP,
                msg: format!("{op:?} of {} is not offered", T::NAME),
            });
        }
        let f = self.function(T::WIRE.dtype, op)?;
        let n = (len * T::WIRE.lanes) as u64;
        let slot_elems = (self.layout.capacity / T::WIRE.dtype.size()) as u64;
        let table = self.table.as_ref().map_or(0, |t| t.ptr());
        let flags = table + 8 * self.size as u64;
        let counters = self.local.as_ref().map_or(0, |l| l.ptr()) + self.layout.counters() as u64;
        let (rank, size) = (self.rank as u32, self.size as u32);
        let timeout_ns = u64::try_from(self.timeout.get().as_nanos()).unwrap_or(u64::MAX);
        let cfg = LaunchConfig {
            grid_dim: (kernel::BLOCKS, 1, 1),
            block_dim: (kernel::THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&f);
        b.arg(&send)
            .arg(&recv)
            .arg(&n)
            .arg(&table)
            .arg(&flags)
            .arg(&counters)
            .arg(&rank)
            .arg(&size)
            .arg(&slot_elems)
            .arg(&timeout_ns)
            .arg(&self.failed.device);
        // SAFETY: the arguments match the kernel's parameters one for one (two element
        // pointers, u64 n, two u64 pointer tables, the counters, two u32, two u64, the mapped
        // word); every address is live: the buffers by this function's contract, the table,
        // slots, flags and counters owned by `self` (mapped peers' until drop); `n` elements fit
        // a slot (checked above).
        unsafe { b.launch(cfg) }.map_err(|e| Error::cuda(OP, e))?;
        Ok(())
    }

    /// Whether the stream finished every call enqueued so far within the deadline (and a margin),
    /// refused or not: for teardown, which must know that no kernel of this rank still touches a
    /// peer's slots.
    fn drained(&self) -> bool {
        self.poll_stream().is_ok_and(|p| p != Polled::TimedOut)
    }

    /// Waits for the stream to pass every call enqueued so far, under the deadline and a margin
    /// over it, so that a peer that never came is reported by the kernel (which leaves the stream
    /// clean) rather than by this wait.
    fn poll_stream(&self) -> Result<Polled> {
        let event = &self.sync_event;
        event.record(&self.stream).map_err(|e| Error::cuda(OP, e))?;
        let limit = self.timeout.get() + Duration::from_millis(200);
        deadline::poll(limit, || Ok::<_, Error>(event.is_complete()))
    }

    /// Waits for every call enqueued so far, under the communicator's deadline, spinning then
    /// yielding ([`deadline::poll`]).
    ///
    /// # Errors
    /// [`Error::Timeout`] when the stream did not finish in time, or a peer's part did not
    /// arrive in time (the kernel gave up); [`Error::Unusable`] for every call after that.
    pub fn synchronize(&self) -> Result<()> {
        if self.refused.get() {
            return Err(self.refusal());
        }
        let polled = self.poll_stream()?;
        if polled == Polled::TimedOut || self.failed.get() != 0 {
            self.refused.set(true);
            return Err(Error::Timeout {
                op: OP,
                after: self.timeout.get(),
            });
        }
        Ok(())
    }
}

impl Drop for OneShot {
    fn drop(&mut self) {
        // Peers may still be reading or writing this rank's slots: free them only once every
        // rank's stream is past its last call, which a barrier of every rank then proves;
        // otherwise leak them.
        // A refused rank takes part too once its stream drained (its kernels gave up or ended),
        // so that its peers are not kept waiting for it. The barrier runs under the deadline the
        // communicator has now, not the one the path was made with.
        self.mpi.set_timeout(Some(self.timeout.get()));
        let drained = !mpi::environment::is_finalized() && self.drained();
        let all_done = drained && self.mpi.barrier().is_ok();
        let _ = self.ctx.bind_to_thread();
        if !all_done {
            if let Some(l) = self.local.take() {
                l.leak();
            }
            let _ = self.stream.synchronize();
        }
        self.peers.clear();
        self.table.take();
    }
}
