//! Buffer registration on an NCCL communicator: the small-message fast path.
//!
//! NCCL recognises registered memory by its address in later collectives, so nothing in the
//! collectives changes; what changes is where the buffers come from and what NCCL knows about them.
//!
//! | type | made by | NCCL calls | collective? | needs |
//! |---|---|---|---|---|
//! | [`Registration`] | [`NcclComm::register`] on any `CudaSlice` | `ncclCommRegister` / `ncclCommDeregister` | no | NCCL 2.19 |
//! | [`NcclBuffer`] with [`RegisterMode::None`] | [`NcclComm::alloc_registered`] | `ncclMemAlloc` / `ncclMemFree` | no | NCCL 2.19 |
//! | [`NcclBuffer`] with [`RegisterMode::Buffer`] | [`NcclComm::alloc_registered`] | the above and `ncclCommRegister` | no | NCCL 2.19 |
//! | [`NcclBuffer`] with [`RegisterMode::Window`] | [`NcclComm::alloc_registered`], [`NcclComm::alloc_symmetric`] | the above and `ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)` | yes | NCCL 2.27 |
//!
//! An [`NcclBuffer`] dereferences to a `CudaSlice<T>`: it is passed to every collective as any
//! device buffer is. The slice is cudarc's view of memory that NCCL allocated
//! (`CudaStream::upgrade_device_ptr`); it is never dropped by cudarc (which would hand NCCL's
//! memory to `cuMemFreeAsync`): the buffer takes it back with `CudaSlice::leak` before it
//! deregisters and frees the memory with `ncclMemFree`.
//!
//! A window is registered by every rank of the communicator together. Allocation and registration
//! are wrapped in agreements over the communicator's MPI communicator, so a rank that cannot
//! allocate, or whose NCCL lacks the entry points, makes every rank return an error instead of
//! leaving the others waiting inside NCCL. Every rank registers the largest size any rank asked
//! for, so the windows have the same size everywhere (NCCL maps them at the same offset on every
//! rank).
//!
//! Limits, by construction of the `CudaSlice` API:
//! - `&mut CudaSlice<T>` allows `std::mem::swap`/`replace`. A slice moved out of an [`NcclBuffer`]
//!   is detected when the buffer is dropped (the address it holds differs from the one NCCL
//!   allocated): the buffer then leaks NCCL's memory instead of freeing it (never a double free),
//!   and cudarc's drop of the moved-out slice asks `cuMemFreeAsync` to free memory it did not
//!   allocate, which the driver refuses with an error recorded on the context. Moving the slice out
//!   of a [`Registration`] and dropping it frees memory NCCL still has registered until the
//!   registration drops. Neither is a use of the API, but neither is prevented by the types.
//! - Window deregistration (`ncclCommWindowDeregister`) is made on every rank as each window drops:
//!   windows must be dropped in the same order on every rank, as they were made.

use std::ffi::c_void;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use cudarc::driver::{CudaSlice, DevicePtr};
use nccl_sys as sys;

use super::comm::NcclComm;
use super::raw;
use crate::comm::{Communicator, DeviceCommunicator};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::ReduceOp;

/// How the memory of an [`NcclBuffer`] is made known to NCCL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RegisterMode {
    /// Memory from `ncclMemAlloc`, not registered.
    #[default]
    None,
    /// Memory from `ncclMemAlloc`, registered with `ncclCommRegister` (user buffer registration:
    /// NCCL copies less and, across nodes, skips its network staging). Local to the rank.
    Buffer,
    /// Memory from `ncclMemAlloc`, registered on every rank as a symmetric window
    /// (`ncclCommWindowRegister` with `NCCL_WIN_COLL_SYMMETRIC`), which lets NCCL 2.27 and later
    /// run its symmetric kernels (lowest latency for small messages inside an NVLink domain).
    /// Collective.
    Window,
}

impl RegisterMode {
    /// Every mode, in order.
    pub const ALL: [RegisterMode; 3] = [
        RegisterMode::None,
        RegisterMode::Buffer,
        RegisterMode::Window,
    ];

    /// Its name: `none`, `buffer`, `window`.
    pub const fn name(self) -> &'static str {
        match self {
            RegisterMode::None => "none",
            RegisterMode::Buffer => "buffer",
            RegisterMode::Window => "window",
        }
    }

    /// The NCCL entry points the mode calls, in the order they are resolved.
    pub const fn entry_points(self) -> &'static [&'static str] {
        match self {
            RegisterMode::None => &["ncclMemAlloc", "ncclMemFree"],
            RegisterMode::Buffer => &[
                "ncclMemAlloc",
                "ncclMemFree",
                "ncclCommRegister",
                "ncclCommDeregister",
            ],
            RegisterMode::Window => &[
                "ncclMemAlloc",
                "ncclMemFree",
                "ncclCommWindowRegister",
                "ncclCommWindowDeregister",
            ],
        }
    }

    /// The oldest NCCL release that has every entry point of the mode (from
    /// [`nccl_sys::OPTIONAL_SYMBOLS`]).
    pub fn needs(self) -> sys::Version {
        self.entry_points()
            .iter()
            .filter_map(|s| sys::symbol_introduced_in(s))
            .max()
            .unwrap_or(sys::OLDEST_SUPPORTED)
    }
}

impl fmt::Display for RegisterMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The entry points of one mode, resolved.
#[derive(Clone, Copy)]
struct Entries {
    mem_alloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> sys::ncclResult_t,
    mem_free: unsafe extern "C" fn(*mut c_void) -> sys::ncclResult_t,
}

/// Resolve what every mode needs; a missing entry point is [`Error::Unavailable`] naming the
/// release that introduced it.
fn entries(lib: &sys::Library) -> Result<Entries> {
    Ok(Entries {
        mem_alloc: sys::nccl_fn!(lib, ncclMemAlloc).map_err(raw::unavailable)?,
        mem_free: sys::nccl_fn!(lib, ncclMemFree).map_err(raw::unavailable)?,
    })
}

/// What a registration holds, to undo it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handle {
    /// Nothing registered.
    None,
    /// An `ncclCommRegister` handle (null when NCCL chose not to register, which it may).
    Buffer(*mut c_void),
    /// A window (null when the communicator has no symmetric support: NCCL then registers nothing).
    Window(sys::ncclWindow_t),
}

impl NcclComm {
    /// Register `buf` with this communicator (`ncclCommRegister`): later collectives on it (or on
    /// any part of it) find it registered. The registration borrows the buffer and dereferences to
    /// it, so it is passed to the collectives in its place; it is undone (`ncclCommDeregister`)
    /// when it drops. Local to this rank: other ranks need not register theirs.
    ///
    /// NCCL decides what registration buys: inside a node it maps peers' registered buffers
    /// directly only for memory from `cuMem*` allocations ([`NcclComm::alloc_registered`] gives
    /// such memory); for cudarc's stream-ordered allocations it may register nothing.
    ///
    /// ```no_run
    /// use collectives_core::{Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp};
    ///
    /// let universe = mpi::initialize().expect("MPI initializes once");
    /// let comm = NcclComm::from_mpi(&MpiComm::world(&universe)?, None)?;
    /// let mut x = comm.stream().clone_htod(&[1.0f32; 256]).expect("device memory");
    /// let mut reg = comm.register(&mut x)?;
    /// comm.all_reduce_in_place(&mut *reg, ReduceOp::Sum)?;
    /// comm.synchronize()?;
    /// drop(reg); // ncclCommDeregister
    /// # Ok::<(), collectives_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the loaded NCCL has no `ncclCommRegister` (older than 2.19);
    /// [`Error::InvalidArgument`] for a buffer on another device; [`Error::Unusable`] after an
    /// abort; [`Error::Nccl`] from NCCL.
    pub fn register<'b, T: Element>(
        &'b self,
        buf: &'b mut CudaSlice<T>,
    ) -> Result<Registration<'b, T>> {
        const OP: &str = "register";
        let _span = tracing::debug_span!("nccl_register").entered();
        self.ensure_live(OP)?;
        let f = sys::nccl_fn!(self.lib, ncclCommRegister).map_err(raw::unavailable)?;
        sys::nccl_fn!(self.lib, ncclCommDeregister).map_err(raw::unavailable)?;
        if buf.ordinal() != self.ctx.ordinal() {
            return Err(Error::invalid(
                OP,
                format!(
                    "the buffer is on device {} but the communicator on device {}",
                    buf.ordinal(),
                    self.ctx.ordinal()
                ),
            ));
        }
        let bytes = buf.len() * std::mem::size_of::<T>();
        let mut handle: *mut c_void = std::ptr::null_mut();
        if bytes > 0 {
            let addr = {
                let (p, _sync) = buf.device_ptr(&self.stream);
                p
            };
            self.ctx.bind_to_thread().map_err(|e| Error::cuda(OP, e))?;
            // SAFETY: a live communicator; `addr..addr + bytes` is the buffer's device memory on the
            // communicator's device, which the registration keeps borrowed (and so alive) until it
            // deregisters; `handle` is a valid out-pointer.
            let rc = unsafe { f(self.raw, addr as usize as *mut c_void, bytes, &mut handle) };
            self.settle(OP, rc)?;
        }
        Ok(Registration {
            comm: self,
            buf,
            addr_bytes: bytes,
            handle,
        })
    }

    /// `len` elements of `T` in memory from `ncclMemAlloc` (zeroed), registered as `mode` says,
    /// usable as a device buffer of every collective (it dereferences to a `CudaSlice<T>`). Freed
    /// (deregistered, then `ncclMemFree`) when it drops, after the stream's work on it completes.
    ///
    /// With [`RegisterMode::Window`] the call is collective (every rank calls it, in the same
    /// order with respect to other windows) and agreed: either every rank gets its window or every
    /// rank gets an error. Each rank registers the largest size any rank asked for.
    ///
    /// ```no_run
    /// use collectives_core::{Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp, RegisterMode};
    ///
    /// let universe = mpi::initialize().expect("MPI initializes once");
    /// let comm = NcclComm::from_mpi(&MpiComm::world(&universe)?, None)?;
    /// let send = comm.alloc_registered::<f32>(1024, RegisterMode::Window)?;
    /// let mut recv = comm.alloc_registered::<f32>(1024, RegisterMode::Window)?;
    /// comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
    /// comm.synchronize()?;
    /// # Ok::<(), collectives_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the loaded NCCL lacks an entry point of the mode
    /// ([`RegisterMode::needs`]: 2.19, windows 2.27); [`Error::CountOverflow`] for an impossible
    /// size; [`Error::Unusable`] after an abort; [`Error::Nccl`] and [`Error::Cuda`] from the
    /// libraries. For windows, on every rank: [`Error::InvalidArgument`] naming the failure of
    /// another rank.
    pub fn alloc_registered<T: Element>(
        &self,
        len: usize,
        mode: RegisterMode,
    ) -> Result<NcclBuffer<'_, T>> {
        let _span = tracing::debug_span!("nccl_alloc_registered", mode = mode.name()).entered();
        match mode {
            RegisterMode::Window => self.alloc_window(len),
            _ => self.alloc_local(len, mode),
        }
    }

    /// [`alloc_registered`](Self::alloc_registered) with [`RegisterMode::Window`]: a symmetric
    /// buffer. Collective.
    ///
    /// # Errors
    /// As [`alloc_registered`](Self::alloc_registered).
    pub fn alloc_symmetric<T: Element>(&self, len: usize) -> Result<NcclBuffer<'_, T>> {
        self.alloc_registered(len, RegisterMode::Window)
    }

    /// `ncclMemAlloc` of `bytes` (at least one), zeroed, as a slice of `len` elements.
    fn nccl_alloc<T: Element>(
        &self,
        op: &'static str,
        fns: Entries,
        len: usize,
        bytes: usize,
    ) -> Result<(*mut c_void, usize, CudaSlice<T>)> {
        self.ensure_live(op)?;
        let bytes = bytes.max(1);
        self.ctx.bind_to_thread().map_err(|e| Error::cuda(op, e))?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; ncclMemAlloc allocates on the current device, which
        // is the communicator's (bound above).
        let rc = unsafe { (fns.mem_alloc)(&mut ptr, bytes) };
        if rc != sys::ncclSuccess {
            return Err(raw::error(self.lib, self.raw, op, rc));
        }
        if ptr.is_null() {
            return Err(Error::invalid(op, "ncclMemAlloc returned no memory"));
        }
        // SAFETY: `ptr` is a live device allocation of at least `bytes` bytes on this stream's
        // device; the byte slice lives only to be zeroed and is leaked (never freed by cudarc).
        let mut zero = unsafe {
            self.stream
                .upgrade_device_ptr::<u8>(ptr as usize as u64, bytes)
        };
        let zeroed = self.stream.memset_zeros(&mut zero);
        zero.leak();
        if let Err(e) = zeroed {
            // SAFETY: the allocation came from ncclMemAlloc above and nothing else refers to it.
            unsafe { (fns.mem_free)(ptr) };
            return Err(Error::cuda(op, e));
        }
        // SAFETY: `ptr` holds at least `len * size_of::<T>()` zeroed bytes (`bytes` was computed
        // from `len` and only grown), a valid `T` since elements are Pod. The slice is owned by the
        // NcclBuffer made from it, which leaks it instead of letting cudarc free it.
        let slice = unsafe {
            self.stream
                .upgrade_device_ptr::<T>(ptr as usize as u64, len)
        };
        Ok((ptr, bytes, slice))
    }

    fn alloc_local<T: Element>(&self, len: usize, mode: RegisterMode) -> Result<NcclBuffer<'_, T>> {
        const OP: &str = "alloc_registered";
        let fns = entries(self.lib)?;
        let reg = if mode == RegisterMode::Buffer {
            Some((
                sys::nccl_fn!(self.lib, ncclCommRegister).map_err(raw::unavailable)?,
                sys::nccl_fn!(self.lib, ncclCommDeregister).map_err(raw::unavailable)?,
            ))
        } else {
            None
        };
        let bytes = byte_len::<T>(OP, len)?;
        let (ptr, alloc_bytes, slice) = self.nccl_alloc::<T>(OP, fns, len, bytes)?;
        let mut buffer = NcclBuffer {
            comm: self,
            slice: ManuallyDrop::new(slice),
            ptr,
            bytes: alloc_bytes,
            mode,
            handle: Handle::None,
            free: fns.mem_free,
        };
        if let Some((register, _)) = reg {
            let mut handle: *mut c_void = std::ptr::null_mut();
            // SAFETY: a live communicator; `ptr..ptr + alloc_bytes` is the allocation above, owned by
            // `buffer`, which deregisters before it frees; `handle` is a valid out-pointer.
            let rc = unsafe { register(self.raw, ptr, alloc_bytes, &mut handle) };
            // On error `buffer` drops here and frees the memory.
            self.settle(OP, rc)?;
            buffer.handle = Handle::Buffer(handle);
        }
        Ok(buffer)
    }

    fn alloc_window<T: Element>(&self, len: usize) -> Result<NcclBuffer<'_, T>> {
        const OP: &str = "alloc_symmetric";
        // 1. What can fail on one rank alone, before any rank allocates: entry points, size.
        let local = (|| {
            self.ensure_live(OP)?;
            let fns = entries(self.lib)?;
            let register =
                sys::nccl_fn!(self.lib, ncclCommWindowRegister).map_err(raw::unavailable)?;
            sys::nccl_fn!(self.lib, ncclCommWindowDeregister).map_err(raw::unavailable)?;
            Ok::<_, Error>((fns, register, byte_len::<T>(OP, len)?))
        })();
        let bytes = local.as_ref().map_or(0, |l| l.2) as u64;
        // Min of `ok` and of `MAX - bytes` (so the largest size) in one reduction.
        let [ok, max_bytes] = self.agree_min(OP, [u64::from(local.is_ok()), u64::MAX - bytes])?;
        let (fns, register, _) = local?;
        if ok == 0 {
            return Err(peer_failed(OP, "check its NCCL for window registration"));
        }
        let common = usize::try_from(u64::MAX - max_bytes).map_err(|_| Error::CountOverflow {
            op: OP,
            count: len,
            limit: usize::MAX / std::mem::size_of::<T>().max(1),
        })?;
        // 2. Allocate the common size everywhere, and agree that every rank could.
        let allocated = self.nccl_alloc::<T>(OP, fns, len, common);
        let [ok, _] = self.agree_min(OP, [u64::from(allocated.is_ok()), 0])?;
        let (ptr, alloc_bytes, slice) = allocated?;
        let mut buffer = NcclBuffer {
            comm: self,
            slice: ManuallyDrop::new(slice),
            ptr,
            bytes: alloc_bytes,
            mode: RegisterMode::Window,
            handle: Handle::None,
            free: fns.mem_free,
        };
        if ok == 0 {
            // `buffer` drops: nothing registered, the memory is freed.
            return Err(peer_failed(OP, "it could not allocate"));
        }
        // 3. Register everywhere (NCCL exchanges the handles between ranks), then agree.
        let mut win: sys::ncclWindow_t = std::ptr::null_mut();
        // SAFETY: a live communicator, every rank calling with the same size at this point (agreed
        // above); `ptr..ptr + alloc_bytes` is from ncclMemAlloc and owned by `buffer`, which
        // deregisters before freeing; `win` is a valid out-pointer.
        let rc = unsafe {
            register(
                self.raw,
                ptr,
                alloc_bytes,
                &mut win,
                sys::NCCL_WIN_COLL_SYMMETRIC as std::ffi::c_int,
            )
        };
        let registered = self.settle(OP, rc);
        let [ok, _] = self.agree_min(OP, [u64::from(registered.is_ok()), 0])?;
        match (registered, ok) {
            (Ok(()), 1) => {
                buffer.handle = Handle::Window(win);
                Ok(buffer)
            }
            (Err(e), _) => Err(e), // not registered here: `buffer` frees the memory
            (Ok(()), _) => {
                // Registered here but not on another rank: deregistering would wait for that
                // rank inside NCCL, so the window and its memory are left to the communicator's
                // teardown.
                buffer.abandon();
                Err(peer_failed(OP, "its window registration failed"))
            }
        }
    }

    /// The element-wise minimum of `v` over the ranks (unchecked MPI on the host).
    fn agree_min(&self, op: &'static str, v: [u64; 2]) -> Result<[u64; 2]> {
        let mut out = [0u64; 2];
        let _span = tracing::trace_span!("agree", op).entered();
        self.mpi.all_reduce(&v[..], &mut out[..], ReduceOp::Min)?;
        Ok(out)
    }
}

fn peer_failed(op: &'static str, what: &str) -> Error {
    Error::invalid(
        op,
        format!("another rank failed ({what}; see its error); no rank registered a window"),
    )
}

fn byte_len<T: Element>(op: &'static str, len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or(Error::CountOverflow {
            op,
            count: len,
            limit: usize::MAX / std::mem::size_of::<T>().max(1),
        })
}

/// A buffer registered with an NCCL communicator by [`NcclComm::register`]; dereferences to the
/// buffer, and deregisters (`ncclCommDeregister`) when it drops.
pub struct Registration<'b, T> {
    comm: &'b NcclComm,
    buf: &'b mut CudaSlice<T>,
    addr_bytes: usize,
    handle: *mut c_void,
}

crate::memory::forward_device_slice!(Registration<'_, T>, buf);

impl<T> fmt::Debug for Registration<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("len", &self.buf.len())
            .field("bytes", &self.addr_bytes)
            .field("registered", &!self.handle.is_null())
            .finish()
    }
}

impl<T> Registration<'_, T> {
    /// Whether NCCL registered the buffer: it may decline (`NCCL_LOCAL_REGISTER=0`, memory it
    /// cannot map, an empty buffer) and then returns no handle; collectives still work.
    pub fn is_registered(&self) -> bool {
        !self.handle.is_null()
    }

    /// Deregister now, reporting NCCL's error.
    ///
    /// # Errors
    /// [`Error::Nccl`] from `ncclCommDeregister`; [`Error::Unusable`] after an abort (nothing to
    /// undo then: the communicator's registrations went with it).
    pub fn deregister(mut self) -> Result<()> {
        self.undo()
    }

    fn undo(&mut self) -> Result<()> {
        const OP: &str = "deregister";
        let handle = std::mem::replace(&mut self.handle, std::ptr::null_mut());
        if handle.is_null() {
            return Ok(());
        }
        self.comm.ensure_live(OP)?;
        let f = sys::nccl_fn!(self.comm.lib, ncclCommDeregister).map_err(raw::unavailable)?;
        // Work enqueued on the buffer must be done before NCCL forgets it.
        self.comm.synchronize()?;
        // SAFETY: a live communicator and a handle ncclCommRegister returned for it, deregistered
        // once (the field was cleared above).
        let rc = unsafe { f(self.comm.raw, handle) };
        self.comm.settle(OP, rc)
    }
}

impl<T> Deref for Registration<'_, T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        self.buf
    }
}

impl<T> DerefMut for Registration<'_, T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        self.buf
    }
}

impl<T> Drop for Registration<'_, T> {
    fn drop(&mut self) {
        // Errors (a timed-out wait, an aborted communicator) cannot be reported from a drop;
        // `deregister` reports them.
        let _ = self.undo();
    }
}

/// Device memory from `ncclMemAlloc`, registered with an NCCL communicator as
/// [`NcclComm::alloc_registered`] says ([`RegisterMode`]). Dereferences to a `CudaSlice<T>`, the
/// collectives' device buffer; freed when it drops (after the communicator's stream has finished
/// with it: deregistered, then `ncclMemFree`).
pub struct NcclBuffer<'c, T> {
    comm: &'c NcclComm,
    /// cudarc's view of `ptr`; never dropped by cudarc (taken back with `leak`).
    slice: ManuallyDrop<CudaSlice<T>>,
    ptr: *mut c_void,
    bytes: usize,
    mode: RegisterMode,
    handle: Handle,
    free: unsafe extern "C" fn(*mut c_void) -> sys::ncclResult_t,
}

crate::memory::forward_device_slice!(NcclBuffer<'_, T>, slice);

impl<T> fmt::Debug for NcclBuffer<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NcclBuffer")
            .field("len", &self.slice.len())
            .field("bytes", &self.bytes)
            .field("mode", &self.mode)
            .field("symmetric", &self.is_symmetric())
            .finish()
    }
}

impl<T> NcclBuffer<'_, T> {
    /// How the memory is registered.
    pub fn mode(&self) -> RegisterMode {
        self.mode
    }

    /// Bytes allocated and registered (for windows, the largest size any rank asked for; at least
    /// one).
    pub fn allocated_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether NCCL gave a symmetric window: a [`RegisterMode::Window`] buffer on a communicator
    /// where NCCL supports symmetric memory (it registers nothing, and says so only in its log,
    /// where it does not).
    pub fn is_symmetric(&self) -> bool {
        matches!(self.handle, Handle::Window(w) if !w.is_null())
    }

    /// Whether `ncclCommRegister` registered the memory ([`RegisterMode::Buffer`]; NCCL may
    /// decline, as [`Registration::is_registered`] says).
    pub fn is_registered(&self) -> bool {
        matches!(self.handle, Handle::Buffer(h) if !h.is_null())
    }

    /// The raw window handle of a symmetric buffer (null otherwise), for callers of NCCL's
    /// window API (`ncclPutSignal`, device communicators) through `nccl_sys`.
    pub fn window(&self) -> sys::ncclWindow_t {
        match self.handle {
            Handle::Window(w) => w,
            _ => std::ptr::null_mut(),
        }
    }

    /// Deregister and free now, reporting errors. For windows, collective like the drop.
    ///
    /// # Errors
    /// As [`synchronize`](crate::DeviceCommunicator::synchronize) (the memory is then left
    /// allocated: work may still use it), [`Error::Nccl`] from deregistration or `ncclMemFree`.
    pub fn release(self) -> Result<()> {
        let mut me = ManuallyDrop::new(self);
        me.teardown()
    }

    /// Leave the registration and the memory as they are, for good (the communicator's teardown
    /// releases what NCCL holds); the slice is leaked too.
    fn abandon(mut self) {
        self.handle = Handle::None;
        // SAFETY: `slice` is taken once, here, and `self` is forgotten below so Drop never sees it.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        slice.leak();
        std::mem::forget(self);
    }

    /// Deregister, then free. Called once (by `release` or `drop`).
    fn teardown(&mut self) -> Result<()> {
        const OP: &str = "release";
        // SAFETY: called once per buffer (release forgets `self`; drop runs once), so `slice` is
        // taken once.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        let held = {
            let (p, _sync) = slice.device_ptr(slice.stream());
            p
        };
        // The memory is ours to free only if the slice still holds it; a slice swapped in from
        // elsewhere is leaked rather than freed by a party that did not allocate it.
        let ours = held as usize == self.ptr as usize;
        slice.leak();
        let handle = std::mem::replace(&mut self.handle, Handle::None);
        // After an abort the communicator (and with it every registration) is gone; work on the
        // stream may still touch the memory, so it is not freed.
        self.comm.ensure_live(OP)?;
        self.comm.synchronize()?;
        let mut result = Ok(());
        match handle {
            Handle::None => {}
            Handle::Buffer(h) => {
                if let Ok(f) = sys::nccl_fn!(self.comm.lib, ncclCommDeregister) {
                    // SAFETY: a live communicator, its stream drained, and a handle from
                    // ncclCommRegister (or null, which NCCL ignores), deregistered once.
                    let rc = unsafe { f(self.comm.raw, h) };
                    result = self.comm.settle("deregister", rc);
                }
            }
            Handle::Window(w) => {
                if let Ok(f) = sys::nccl_fn!(self.comm.lib, ncclCommWindowDeregister) {
                    // SAFETY: a live communicator, its stream drained, and a window from
                    // ncclCommWindowRegister (or null, which NCCL ignores), deregistered once, in
                    // the same order on every rank (documented).
                    let rc = unsafe { f(self.comm.raw, w) };
                    result = self.comm.settle("deregister", rc);
                }
            }
        }
        if ours && result.is_ok() {
            // SAFETY: memory from ncclMemAlloc, no longer registered, no work left on it (stream
            // drained), and no slice refers to it any more (leaked above).
            let rc = unsafe { (self.free)(self.ptr) };
            if rc != sys::ncclSuccess {
                result = Err(raw::error(self.comm.lib, self.comm.raw, OP, rc));
            }
        }
        result
    }
}

impl<T> Deref for NcclBuffer<'_, T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> DerefMut for NcclBuffer<'_, T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Drop for NcclBuffer<'_, T> {
    fn drop(&mut self) {
        // Errors cannot be reported from a drop; `release` reports them.
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_name_their_entry_points_and_releases() {
        assert_eq!(
            RegisterMode::ALL.map(RegisterMode::name),
            ["none", "buffer", "window"]
        );
        assert_eq!(RegisterMode::None.needs(), sys::Version::new(2, 19, 0));
        assert_eq!(RegisterMode::Buffer.needs(), sys::Version::new(2, 19, 0));
        assert_eq!(RegisterMode::Window.needs(), sys::Version::new(2, 27, 0));
        for mode in RegisterMode::ALL {
            for name in mode.entry_points() {
                assert!(
                    sys::symbol_introduced_in(name).is_some(),
                    "{name} is an entry point of the pinned header"
                );
            }
        }
    }

    #[test]
    fn a_missing_window_entry_point_is_a_typed_error_naming_the_release() {
        // What `nccl_fn!` returns on an NCCL 2.26 for ncclCommWindowRegister, through the
        // conversion every registration call uses.
        let e = raw::unavailable(sys::Error::Unsupported {
            symbol: "ncclCommWindowRegister",
            needs: RegisterMode::Window.needs(),
            found: sys::Version::new(2, 26, 6),
        });
        match &e {
            Error::Unavailable { what, message } => {
                assert_eq!(*what, "NCCL");
                assert!(message.contains("ncclCommWindowRegister"), "{message}");
                assert!(message.contains("2.27"), "{message}");
                assert!(message.contains("2.26.6"), "{message}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn peer_failure_says_no_window_was_registered() {
        let e = peer_failed("alloc_symmetric", "it could not allocate");
        assert!(matches!(
            e,
            Error::InvalidArgument {
                op: "alloc_symmetric",
                ..
            }
        ));
        assert!(e.to_string().contains("no rank registered a window"), "{e}");
    }

    #[test]
    fn byte_length_overflow_is_an_error() {
        assert_eq!(byte_len::<f64>("x", 3).unwrap(), 24);
        assert!(matches!(
            byte_len::<f64>("x", usize::MAX),
            Err(Error::CountOverflow { op: "x", .. })
        ));
    }
}
