//! CUDA IPC for the direct path ([`crate::direct`]): a receiver exports the allocation its
//! buffer lies in (`cuIpcGetMemHandle`, kept per allocation), a sender maps a peer's exported
//! allocation into its own context (`cuIpcOpenMemHandle`, kept per peer and handle).
//!
//! A handle names one allocation: an address freed and allocated again gets a new handle, so
//! the exporter keys its handles by the driver's buffer id (`CU_POINTER_ATTRIBUTE_BUFFER_ID`)
//! and the importer by the handle's bytes. Allocations the legacy IPC cannot export
//! (stream-ordered pools, virtual-memory mappings) give no handle: their receives take the
//! byte path.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use datatype_pack::gpu::cudarc::driver::sys::{self, CUdeviceptr};

use crate::memory::DeviceBuffer;
use crate::sync::lock;

/// The bytes of an IPC memory handle.
pub type Handle = [u8; 64];

/// Mappings of peers' allocations kept open at most; the oldest is closed past this.
const OPEN_KEEP: usize = 64;

/// An exported allocation: its handle, where the buffer starts in it, and the bytes from there
/// to the allocation's end.
#[derive(Debug, Clone, Copy)]
pub struct Export {
    /// The allocation's handle.
    pub handle: Handle,
    /// The buffer's offset from the allocation's base.
    pub offset: u64,
    /// Bytes from the buffer to the allocation's end.
    pub len: u64,
}

fn exported() -> &'static Mutex<HashMap<(u64, u64), Handle>> {
    static E: OnceLock<Mutex<HashMap<(u64, u64), Handle>>> = OnceLock::new();
    E.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The export of the allocation `d` lies in, or `None` where the driver gives no handle. The
/// calling thread must have `d`'s context current.
pub fn export(d: &DeviceBuffer) -> Option<Export> {
    let ok = sys::CUresult::CUDA_SUCCESS;
    let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
    // SAFETY: two valid out-pointers; the driver fills them for an address it allocated.
    if unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, d.ptr) } != ok || d.ptr < base {
        return None;
    }
    let mut id: u64 = 0;
    // SAFETY: the buffer id attribute is an `unsigned long long`; `id` is a valid out-pointer.
    let rc = unsafe {
        sys::cuPointerGetAttribute(
            (&mut id as *mut u64).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID,
            d.ptr,
        )
    };
    if rc != ok {
        return None;
    }
    let key = (base, id);
    let cached = lock(exported()).get(&key).copied();
    let handle = match cached {
        Some(h) => h,
        None => {
            let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
            // SAFETY: `base` is the start of a live allocation of this context; `h` is a valid
            // out-pointer.
            if unsafe { sys::cuIpcGetMemHandle(&mut h, base) } != ok {
                return None;
            }
            let bytes: Handle = h.reserved.map(|c| c as u8);
            lock(exported()).insert(key, bytes);
            bytes
        }
    };
    Some(Export {
        handle,
        offset: d.ptr - base,
        len: d.len,
    })
}

/// Peers' allocations mapped here, oldest first, and the peers whose handles did not open.
#[derive(Default)]
struct Opened {
    maps: Vec<((i32, Handle), CUdeviceptr)>,
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
    if let Some(at) = o
        .maps
        .iter()
        .position(|(k, _)| k.0 == peer && k.1 == *handle)
    {
        return Some(o.maps[at].1);
    }
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
    if rc != sys::CUresult::CUDA_SUCCESS {
        o.refused.push(peer);
        return None;
    }
    if o.maps.len() >= OPEN_KEEP {
        let (_, old) = o.maps.remove(0);
        // SAFETY: `old` was mapped by cuIpcOpenMemHandle here, and every copy into it was
        // waited for before the call that made it returned.
        unsafe { sys::cuIpcCloseMemHandle(old) };
    }
    o.maps.push(((peer, *handle), base));
    Some(base)
}
