//! CUDA IPC for the direct path ([`crate::direct`]): a sender exports the staging allocation it
//! packed a message into (`cuIpcGetMemHandle`, once per allocation, whose owner keeps it) and
//! an event recorded after the pack (`cuIpcGetEventHandle`, made once per event of its pool);
//! the receiver maps the allocation into its own context (`cuIpcOpenMemHandle`) and opens the
//! event (`cuIpcOpenEventHandle`), both kept per peer and handle. The direct path's
//! allocations are never freed, so a handle always names the same memory. For the write
//! landing a sender also maps the program allocation a receive offered ([`open_target`]),
//! kept per peer, handle and buffer id.

use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::{Mutex, OnceLock};

use datatype_pack::gpu::cudarc::driver::sys::{self, CUdeviceptr};

use crate::log::log;
use crate::sync::lock;

/// The bytes of an IPC memory handle.
pub type Handle = [u8; 64];

/// An exported allocation: its handle, where the buffer starts in it, and the bytes from there
/// to the allocation's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Export {
    /// The allocation's handle.
    pub handle: Handle,
    /// The buffer's offset from the allocation's base.
    pub offset: u64,
    /// Bytes from the buffer to the allocation's end.
    pub len: u64,
}

/// The export of the allocation of `len` bytes that `cuMemAlloc` gave at `base`, or `None`
/// where the driver gives no handle. The calling thread must have the allocation's context
/// current. Asked once per allocation: its owner keeps the answer
/// (`engine::DeviceAlloc::export`).
pub fn export(base: CUdeviceptr, len: u64) -> Option<Export> {
    let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
    // SAFETY: `base` is the start of a live allocation of this context (the caller's
    // contract); `h` is a valid out-pointer.
    if unsafe { sys::cuIpcGetMemHandle(&mut h, base) } != sys::CUresult::CUDA_SUCCESS {
        return None;
    }
    Some(Export {
        handle: h.reserved.map(|c| c as u8),
        offset: 0,
        len,
    })
}

/// An event of a sender's pool that peers can wait for: the driver's event and its handle.
#[derive(Debug)]
pub struct Event {
    /// The event (made with `CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING`).
    pub event: sys::CUevent,
    /// Its IPC handle.
    pub handle: Handle,
}

// SAFETY: an event handle is a value the driver lets any thread use; each is owned by one pool
// or by the loans of one record at a time.
unsafe impl Send for Event {}
// SAFETY: shared (by the loans of one record) only to be read; recorded and given back by the
// one owner it has then.
unsafe impl Sync for Event {}

/// A new event peers can wait for, in the current context; `None` where the driver refuses.
pub fn new_event() -> Option<Event> {
    let ok = sys::CUresult::CUDA_SUCCESS;
    let mut event: sys::CUevent = std::ptr::null_mut();
    let flags = sys::CUevent_flags_enum::CU_EVENT_INTERPROCESS as u32
        | sys::CUevent_flags_enum::CU_EVENT_DISABLE_TIMING as u32;
    // SAFETY: a valid out-pointer; the flags the driver requires of an IPC event.
    if unsafe { sys::cuEventCreate(&mut event, flags) } != ok {
        return None;
    }
    let mut h = sys::CUipcEventHandle_st { reserved: [0; 64] };
    // SAFETY: `event` was just made with the interprocess flag; `h` is a valid out-pointer.
    if unsafe { sys::cuIpcGetEventHandle(&mut h, event) } != ok {
        // SAFETY: the event was made above and is used by nothing else.
        unsafe { sys::cuEventDestroy_v2(event) };
        return None;
    }
    Some(Event {
        event,
        handle: h.reserved.map(|c| c as u8),
    })
}

fn opened_events() -> &'static Mutex<FxHashMap<(i32, Handle), usize>> {
    static E: OnceLock<Mutex<FxHashMap<(i32, Handle), usize>>> = OnceLock::new();
    E.get_or_init(|| Mutex::new(FxHashMap::default()))
}

/// The event `handle` that rank `peer` exported, opened in the current context on first use
/// and kept; `None` where the driver refuses it.
pub fn open_event(peer: i32, handle: &Handle) -> Option<sys::CUevent> {
    let mut o = lock(opened_events());
    if let Some(&e) = o.get(&(peer, *handle)) {
        return Some(e as sys::CUevent);
    }
    let h = sys::CUipcEventHandle_st {
        reserved: handle.map(|b| b as std::ffi::c_char),
    };
    let mut event: sys::CUevent = std::ptr::null_mut();
    // SAFETY: a handle a peer exported (the driver validates it), a valid out-pointer.
    let rc = unsafe { sys::cuIpcOpenEventHandle(&mut event, h) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        log!("direct path: rank {peer}'s event does not open here ({rc:?})");
        return None;
    }
    o.insert((peer, *handle), event as usize);
    Some(event)
}

/// Maps the allocation `handle` that a peer exported into the current context (peer access
/// enabled as needed): its base address here, and the driver's result.
fn map(handle: &Handle) -> (CUdeviceptr, sys::CUresult) {
    let h = sys::CUipcMemHandle_st {
        reserved: handle.map(|b| b as std::ffi::c_char),
    };
    let mut base: CUdeviceptr = 0;
    // SAFETY: a handle a peer exported (the driver validates it), a valid out-pointer.
    let rc = unsafe {
        sys::cuIpcOpenMemHandle_v2(
            &mut base,
            h,
            sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
        )
    };
    (base, rc)
}

/// Peers' allocations mapped here, and the peers whose handles did not open. A mapping is kept
/// for the process's life: the direct path's allocations it maps are never freed by their
/// owners ([`crate::engine`]), so there are no more of them than the peers' staging at its
/// peak, and none is closed while an unpack recorded for a later launch may still read it.
#[derive(Default)]
struct Opened {
    maps: FxHashMap<(i32, Handle), CUdeviceptr>,
    refused: Vec<i32>,
}

fn opened() -> &'static Mutex<Opened> {
    static O: OnceLock<Mutex<Opened>> = OnceLock::new();
    O.get_or_init(|| Mutex::new(Opened::default()))
}

/// The base address, in the current context, of the allocation `handle` that rank `peer`
/// exported, mapped on first use; `None` where the driver refuses it (another node, no peer
/// access), and from then on for that peer. The calling thread must have the context current
/// that the mapping is for (one context per process: the device's primary one).
pub fn open(peer: i32, handle: &Handle) -> Option<CUdeviceptr> {
    let mut o = lock(opened());
    if o.refused.contains(&peer) {
        return None;
    }
    if let Some(&base) = o.maps.get(&(peer, *handle)) {
        return Some(base);
    }
    let (base, rc) = map(handle);
    if rc != sys::CUresult::CUDA_SUCCESS {
        log!(
            "direct path: rank {peer}'s allocation does not open here ({rc:?}, {} open); rank {peer} is refused from now on",
            o.maps.len()
        );
        o.refused.push(peer);
        return None;
    }
    o.maps.insert((peer, *handle), base);
    Some(base)
}

/// How many peers' program allocations stay mapped here for the write landing
/// ([`open_target`]); past this, the least recently used is closed.
const TARGETS_KEPT: usize = 64;

/// Peers' program allocations mapped here for the write landing, by peer, handle and the
/// driver's buffer id, with their address here, their address in the peer and the use that
/// last wrote into them; and those that did not open.
#[derive(Default)]
struct Targets {
    maps: FxHashMap<TargetKey, Mapped>,
    refused: FxHashSet<TargetKey>,
    uses: u64,
}

/// A peer's allocation mapped here ([`Targets`]).
struct Mapped {
    here: CUdeviceptr,
    there: u64,
    used: u64,
}

/// A mapping's key in [`Targets`]: the peer, the allocation's handle and its buffer id there.
type TargetKey = (i32, Handle, u64);

impl Targets {
    /// The mappings to close before a new allocation of rank `peer` at address `there` (in the
    /// peer) is mapped: any other of that peer at that address (freed there: its address was
    /// given out again), and, where the rest would leave no room under [`TARGETS_KEPT`], the
    /// least recently used.
    fn to_close(&self, peer: i32, there: u64) -> Vec<TargetKey> {
        let mut gone: Vec<TargetKey> = self
            .maps
            .iter()
            .filter(|(o, m)| o.0 == peer && m.there == there)
            .map(|(&o, _)| o)
            .collect();
        if self.maps.len() - gone.len() >= TARGETS_KEPT {
            let lru = self
                .maps
                .iter()
                .filter(|(o, _)| !gone.contains(o))
                .min_by_key(|(_, m)| m.used)
                .map(|(&o, _)| o);
            gone.extend(lru);
        }
        gone
    }

    /// Closes the mapping of `k` (no kernel uses it: each was waited for before its call
    /// returned).
    fn close(&mut self, k: &TargetKey) {
        if let Some(m) = self.maps.remove(k) {
            // SAFETY: a mapping this module opened, used by no kernel any more.
            let rc = unsafe { sys::cuIpcCloseMemHandle(m.here) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                log!("write landing: closing a peer's allocation failed ({rc:?})");
            }
        }
    }
}

fn targets() -> &'static Mutex<Targets> {
    static T: OnceLock<Mutex<Targets>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(Targets::default()))
}

/// The base address, in the current context, of rank `peer`'s program allocation `handle`
/// (`(id, there)`: its buffer id and its address in the peer), which a receive of that rank
/// offered to be written into ([`crate::target::Target`]); mapped on first use and kept, up
/// to [`TARGETS_KEPT`] of them (the least recently used closed first). `None` where the driver
/// refuses it, and from then on for that allocation; other allocations of the peer are still
/// tried.
///
/// The program owns these allocations, unlike the direct path's staging: it may free one and
/// allocate again at the same address, which then has another buffer id and so another
/// mapping here; the mapping of the allocation that was there is closed then (as a CUDA-aware
/// MPI's cache of its peers' buffers does). A CUDA-aware MPI maps the same allocations for
/// its own transfers; the driver counts the openings of one handle in one context, so neither
/// mapping disturbs the other. A mapping is closed only between calls: every kernel that
/// wrote through it was waited for before its call returned. The calling thread must have the
/// context current.
pub fn open_target(peer: i32, handle: &Handle, (id, there): (u64, u64)) -> Option<CUdeviceptr> {
    let mut t = lock(targets());
    let k = (peer, *handle, id);
    t.uses += 1;
    let now = t.uses;
    if let Some(m) = t.maps.get_mut(&k) {
        m.used = now;
        return Some(m.here);
    }
    if t.refused.contains(&k) {
        return None;
    }
    for o in t.to_close(peer, there) {
        t.close(&o);
    }
    let (base, rc) = map(handle);
    if rc != sys::CUresult::CUDA_SUCCESS {
        log!("write landing: rank {peer}'s buffer does not open here ({rc:?}): its receives are lent to");
        t.refused.insert(k);
        return None;
    }
    t.maps.insert(
        k,
        Mapped {
            here: base,
            there,
            used: now,
        },
    );
    Some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(t: &mut Targets, peer: i32, h: u8, id: u64, there: u64) {
        t.uses += 1;
        let used = t.uses;
        t.maps.insert(
            (peer, [h; 64], id),
            Mapped {
                here: 0x1000 * used,
                there,
                used,
            },
        );
    }

    #[test]
    fn a_peer_allocation_given_out_again_closes_the_old_mapping() {
        let mut t = Targets::default();
        mapped(&mut t, 1, 1, 10, 0x7000);
        mapped(&mut t, 1, 2, 11, 0x9000);
        mapped(&mut t, 2, 3, 12, 0x7000);
        // Rank 1 offers a new allocation at 0x7000: the one mapped there is gone; rank 2's
        // allocation at the same address in its own process is not.
        assert_eq!(t.to_close(1, 0x7000), vec![(1, [1; 64], 10)]);
        // A new address closes nothing while there is room.
        assert!(t.to_close(1, 0xb000).is_empty());
    }

    #[test]
    fn at_capacity_the_least_recently_used_mapping_is_closed() {
        let mut t = Targets::default();
        for i in 0..TARGETS_KEPT as u64 {
            mapped(&mut t, 1, i as u8, i, 0x10_0000 * (i + 1));
        }
        // The first mapped is the least recently used...
        assert_eq!(t.to_close(1, 0xdead_0000), vec![(1, [0; 64], 0)]);
        // ...until it is used again.
        t.uses += 1;
        let now = t.uses;
        t.maps.get_mut(&(1, [0; 64], 0)).unwrap().used = now;
        assert_eq!(t.to_close(1, 0xdead_0000), vec![(1, [1; 64], 1)]);
        // A reused address frees a place itself: nothing else is closed.
        assert_eq!(t.to_close(1, 0x10_0000 * 3), vec![(1, [2; 64], 2)]);
    }
}
