//! The GPU side of the direct path's channels ([`crate::direct`] keeps their protocol).
//!
//! A lent message of a lone `MPI_Sendrecv` waits out two kernel launches in a row: the
//! sender's pack, then, once its note has come, the receiver's unpack. A *channel* between an
//! ordered pair of ranks and a tag orders the two on the GPUs instead, so that both go out at
//! the call's start as one graph per rank:
//!
//! - the sender packs message `k` into one of two *slots* (its own lent staging, the one it
//!   lent for message `k - 2`, which the receiver has mapped already), and the pack's last
//!   thread block stores `k` into the receiver's *flag* word for that slot (the receiver's
//!   device memory, mapped into the sender over CUDA IPC);
//! - the receiver's unpack from that slot is launched *armed* at its own call's start: its
//!   blocks wait on the GPU until their flag reaches `k`, or a *call-off* word does (written
//!   from a stream of its own where the note says the message came another way), or a
//!   patience of [`PATIENCE_NS`] passes (a *give-up* word in mapped host memory says so).
//!
//! Whatever the kernels did, the receive's result is the one of its note: a message the note
//! says came through the channel is unpacked again (waiting as long as it takes) where the
//! armed unpack gave up, and one that came another way is unpacked as on the other landings,
//! after the armed kernel on the same stream, over whatever it wrote.
//!
//! Each GPU keeps one 2 MiB allocation of the direct path's kind for the words (32 bytes per
//! receive channel: the two slots' flags and the call-off word; 8 per send channel: the pack's
//! block counter), exported to peers, and 64 KiB of mapped host memory: per receive channel
//! the give-up word and the value a call-off copies into the call-off word (an asynchronous
//! copy on a non-blocking stream of its own: the waiting kernel holds the legacy stream).

use rustc_hash::FxHashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use datatype_pack::gpu::cudarc::driver::sys::{self, CUdeviceptr};
use datatype_pack::gpu::{self as dgpu, ChannelRecv, ChannelSend};
use datatype_pack::StridedBlock;

use crate::engine::{DeviceAlloc, Gpu, HostAlloc};
use crate::error::{cuda, Error, Result};
use crate::ipc::Export;
use crate::log::log;
use crate::sync::lock;

/// How long an armed unpack's blocks wait for their flag before they give up: a peer that
/// comes later than this to its call costs the receive a second unpack, not a GPU held
/// spinning.
pub const PATIENCE_NS: u64 = 2_000_000;

/// The patience of an unpack launched again, once the note said the message came through
/// the channel and the armed one gave up: its flag comes once the peer's pack has run.
pub const AGAIN_NS: u64 = 60_000_000_000;

/// Bytes of a receive channel's cell: the flags of slots 0 and 1, the call-off word, one
/// spare.
const RECV_CELL: u64 = 32;

/// Bytes of a send channel's cell: the pack's block counter (4 bytes used).
const SEND_CELL: u64 = 8;

/// Bytes of the host words (16 per receive channel).
const HOST_PAGE: usize = 64 << 10;

/// Bytes of a receive channel's host words: the give-up word, the call-off value.
const HOST_CELL: usize = 16;

/// One GPU's channel words ([module docs](self)).
struct Words {
    /// The device allocation (the direct path's kind, zeroed, kept for the process's life).
    dev: DeviceAlloc,
    export: Export,
    /// Bytes of `dev` handed out.
    used: u64,
    /// The give-up words (mapped host memory, zeroed).
    host: HostAlloc,
    host_used: usize,
    /// A non-blocking stream for calls-off (the armed kernel holds the legacy stream).
    side: usize,
}

// SAFETY: the addresses and the stream handle are the driver's, valid from any thread; the
// words are used under their map's mutex.
unsafe impl Send for Words {}

fn words() -> &'static Mutex<FxHashMap<usize, Words>> {
    static W: OnceLock<Mutex<FxHashMap<usize, Words>>> = OnceLock::new();
    W.get_or_init(|| Mutex::new(FxHashMap::default()))
}

fn refused(what: &str) -> Error {
    Error::Unsupported {
        op: "channel",
        message: what.to_owned(),
    }
}

/// `g`'s words, made on first use; `f` runs with them under the map's lock.
fn with_words<T>(g: &Gpu, f: impl FnOnce(&mut Words) -> Result<T>) -> Result<T> {
    let mut map = lock(words());
    if let Some(w) = map.get_mut(&g.ordinal()) {
        return f(w);
    }
    g.bind()?;
    let dev = g.device_alloc(1, true, &[])?;
    let export = dev
        .export()
        .ok_or_else(|| refused("no IPC handle for the words"))?;
    // SAFETY: a fresh allocation of this context (current), `len` bytes long.
    cuda("cuMemsetD8", unsafe {
        sys::cuMemsetD8_v2(dev.ptr(), 0, dev.len())
    })?;
    let host = g.host_alloc(HOST_PAGE)?;
    let (h, _, len) = host.addresses();
    // SAFETY: a fresh pinned host allocation of `len` bytes, not used by any kernel yet.
    unsafe { std::ptr::write_bytes(h.cast::<u8>(), 0, len) };
    let mut side: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the context is current; `side` is a valid out-pointer.
    cuda("cuStreamCreate", unsafe {
        sys::cuStreamCreate(
            &mut side,
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
        )
    })?;
    let w = map.entry(g.ordinal()).or_insert(Words {
        dev,
        export,
        used: 0,
        host,
        host_used: 0,
        side: side as usize,
    });
    f(w)
}

/// A receive channel's words in its receiver's memory ([module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvCell {
    /// The flags of slots 0 and 1 (8 bytes each), then the call-off word, on the device.
    pub dev: CUdeviceptr,
    /// The give-up word: its host address and the device address kernels write it at; the
    /// call-off value's host word follows it.
    pub gave_up: (usize, CUdeviceptr),
}

impl RecvCell {
    /// The flag of the slot of message `k`.
    pub fn flag(&self, k: u64) -> CUdeviceptr {
        self.dev + 8 * (k % 2)
    }

    /// The call-off word.
    pub fn cancel(&self) -> CUdeviceptr {
        self.dev + 16
    }

    /// Clears the give-up word before an unpack is launched again.
    pub fn clear_gave_up(&self) {
        // SAFETY: as in `gave_up`; no kernel waiting on this cell runs now (its stream was
        // waited for).
        unsafe { std::ptr::write_volatile(self.gave_up.0 as *mut u64, 0) }
    }

    /// Whether the armed unpack of message `k` gave up waiting (read once its stream has run).
    pub fn gave_up(&self, k: u64) -> bool {
        // SAFETY: a word of the mapped host page, kept for the process's life; a kernel may
        // have written it, hence the volatile read.
        unsafe { std::ptr::read_volatile(self.gave_up.0 as *const u64) == k }
    }
}

/// A fresh receive cell of `g`, and the words' allocation as peers map it, `offset` at this
/// cell (`None` once its words are used up or cannot be made).
pub fn recv_cell(g: &Gpu) -> Option<(RecvCell, Export)> {
    let made = with_words(g, |w| {
        if w.used + RECV_CELL > w.dev.len() as u64 || w.host_used + HOST_CELL > HOST_PAGE {
            return Err(refused("channel words used up"));
        }
        let at = w.used;
        w.used += RECV_CELL;
        let (h, d, _) = w.host.addresses();
        let gave_up = (h as usize + w.host_used, d + w.host_used as u64);
        w.host_used += HOST_CELL;
        let cell = RecvCell {
            dev: w.dev.ptr() + at,
            gave_up,
        };
        let export = Export {
            offset: w.export.offset + at,
            len: RECV_CELL,
            ..w.export
        };
        Ok((cell, export))
    });
    made.inspect_err(|e| log!("direct path: no channel words: {e}"))
        .ok()
}

/// A fresh block counter of `g` for a send channel's packs.
pub fn send_counter(g: &Gpu) -> Option<CUdeviceptr> {
    with_words(g, |w| {
        if w.used + SEND_CELL > w.dev.len() as u64 {
            return Err(refused("channel words used up"));
        }
        let at = w.used;
        w.used += SEND_CELL;
        Ok(w.dev.ptr() + at)
    })
    .ok()
}

/// Whether the peer memory mapped here at `ptr` is on `g`'s own device (two ranks of one GPU,
/// which a channel never joins unless testing asks for it).
pub fn same_device(g: &Gpu, ptr: CUdeviceptr) -> bool {
    let mut ordinal: i32 = -1;
    // SAFETY: `ordinal` is a valid out-pointer for this attribute (an int); `ptr` is only
    // asked about.
    let rc = unsafe {
        sys::cuPointerGetAttribute(
            std::ptr::addr_of_mut!(ordinal).cast::<c_void>(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
    };
    rc != sys::CUresult::CUDA_SUCCESS || usize::try_from(ordinal).ok() == Some(g.ordinal())
}

/// The send side of a channel's launch: the plan of the send buffer `buf` (`buf_len` bytes to
/// its allocation's end), packed into the slot at `slot` (`slot_len` bytes) as message `seq`,
/// whose last block stores `seq` at `flag` (the receiver's, mapped) counting blocks at
/// `counter`.
#[derive(Debug, Clone, Copy)]
pub struct Pack<'a> {
    /// The send's layout.
    pub plan: &'a StridedBlock,
    /// The send buffer and its bytes to its allocation's end.
    pub buf: (CUdeviceptr, usize),
    /// The slot and its length.
    pub slot: (CUdeviceptr, usize),
    /// The message's number.
    pub seq: u64,
    /// This rank's block counter.
    pub counter: CUdeviceptr,
    /// The receiver's flag of this slot, mapped here.
    pub flag: CUdeviceptr,
}

/// The receive side of a channel's launch: the peer's slot mapped at `slot` (`slot_len`
/// bytes), unpacked into the receive buffer `buf` by the plan once `cell`'s flag reaches `seq`.
#[derive(Debug, Clone, Copy)]
pub struct Unpack<'a> {
    /// The receive's layout.
    pub plan: &'a StridedBlock,
    /// The receive buffer and its bytes to its allocation's end.
    pub buf: (CUdeviceptr, usize),
    /// The peer's slot, mapped here, and its length.
    pub slot: (CUdeviceptr, usize),
    /// The message's number.
    pub seq: u64,
    /// The receive channel's words.
    pub cell: RecvCell,
}

/// Launches `pack` then `unpack` (either may be absent) on `g`'s stream as one graph, the
/// unpack armed with [`PATIENCE_NS`] (or `patience_ns`).
///
/// # Safety
/// Every address is live memory `g`'s kernels reach, as long as the fields say, until the
/// stream has run the launch; the slot of `pack` is this rank's own and written by nothing
/// else meanwhile; the receive buffer of `unpack` is the program's, which MPI leaves to the
/// receive until it completes; `flag` is the receiver's flag of the slot.
pub unsafe fn launch(
    g: &Gpu,
    pack: Option<Pack<'_>>,
    unpack: Option<Unpack<'_>>,
    patience_ns: Option<u64>,
) -> Result<()> {
    let packers = (
        pack.map(|p| g.packer(p.plan)).transpose()?,
        unpack.map(|u| g.packer(u.plan)).transpose()?,
    );
    let send = pack.map(|p| ChannelSend {
        src: p.buf.0,
        src_len: p.buf.1,
        dst: p.slot.0,
        dst_len: p.slot.1,
        seq: p.seq,
        arrived: p.counter,
        flag: p.flag,
    });
    let recv = unpack.map(|u| ChannelRecv {
        src: u.slot.0,
        src_len: u.slot.1,
        dst: u.buf.0,
        dst_len: u.buf.1,
        seq: u.seq,
        flag: u.cell.flag(u.seq),
        cancel: u.cell.cancel(),
        gave_up: u.cell.gave_up.1,
        patience_ns: patience_ns.unwrap_or(PATIENCE_NS),
    });
    g.bind()?;
    // SAFETY: the caller's contract covers every address of both sides.
    unsafe {
        dgpu::launch_channel(
            g.stream(),
            packers.0.as_deref().zip(send.as_ref()),
            packers.1.as_deref().zip(recv.as_ref()),
        )
    }
    .map_err(Error::from)
}

/// Calls off the armed unpack of message `k` waiting on `cell` (its note said the message
/// came another way): `k` copied into the call-off word on the GPU's side stream, not waited
/// for. The copy reads the cell's host word when it runs: a later call-off may have raised it,
/// and every value it ever holds is one to call off.
pub fn call_off(g: &Arc<Gpu>, cell: &RecvCell, k: u64) -> Result<()> {
    let side = with_words(g, |w| Ok(w.side))?;
    let value = (cell.gave_up.0 + 8) as *mut u64;
    // SAFETY: the cell's call-off value, a word of the mapped host page kept for the process's
    // life; a copy in flight may read it (it holds only values to call off).
    unsafe { std::ptr::write_volatile(value, k) };
    g.bind()?;
    // SAFETY: the side stream is this context's; the call-off word is this context's device
    // memory and `value` pinned host memory, both kept for the process's life.
    cuda("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(
            cell.cancel(),
            value.cast::<c_void>().cast_const(),
            8,
            side as sys::CUstream,
        )
    })
}
