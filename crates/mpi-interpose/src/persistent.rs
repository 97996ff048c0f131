//! Persistent requests of the interposer (`MPI_Send_init`, `MPI_Recv_init`): each keeps a
//! staging buffer for its life, the real MPI's persistent request moves the staging's bytes,
//! its send is packed at each `MPI_Start`/`MPI_Startall` (all of one call queued before one
//! launch and one wait per GPU) and its receive unpacked at each completion. A persistent
//! handle does not change when its request completes, so completion is told by the waits' and
//! tests' flags, indices and index lists ([`take_started`]), and only a request seen started
//! is unpacked.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use datatype_pack::StridedBlock;
use mpi::ffi;

use crate::config;
use crate::engine::{Engine, Staging};
use crate::log::log;
use crate::path::{queue_and_wait, take, Receive, ERR_INTERN};
use crate::sync::lock;

/// A send the interposer packs at each start of a persistent request (`MPI_Send_init`): the
/// caller's buffer and its plan, and the staging the real MPI's request sends from.
#[derive(Debug)]
pub struct Outgoing {
    engine: Engine,
    plan: StridedBlock,
    buf: *const c_void,
    /// The buffer the real MPI sends from.
    pub staging: Staging,
    /// Its size in bytes, as MPI's count.
    pub bytes: c_int,
    op: &'static str,
}

// SAFETY: the user's buffer address is only used by the thread that starts the request; MPI's
// rules keep the buffer alive until the request is freed.
unsafe impl Send for Outgoing {}

/// A persistent request of the interposer (`MPI_Send_init`, `MPI_Recv_init`), kept until
/// `MPI_Request_free`: its send is packed at each `MPI_Start`, its receive unpacked at each
/// completion. The real MPI's request moves the staging's bytes.
#[derive(Debug)]
pub enum Persistent {
    /// Packed at each start.
    Send(Outgoing),
    /// Unpacked at each completion.
    Recv(Receive),
}

/// A persistent request and whether it was started and has not completed since.
#[derive(Debug)]
struct Kept {
    work: Persistent,
    active: bool,
}

fn kept() -> &'static Mutex<HashMap<u64, Kept>> {
    static T: OnceLock<Mutex<HashMap<u64, Kept>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Persistent requests kept, read without the lock on every wait and test.
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// Keeps the persistent request the real MPI just made, not started.
pub fn keep(request: u64, work: Persistent) {
    let stale = lock(kept()).insert(
        request,
        Kept {
            work,
            active: false,
        },
    );
    if stale.is_none() {
        KEPT.fetch_add(1, Ordering::SeqCst);
    }
}

/// Whether any of `handles` is a persistent request of the interposer.
pub fn any_kept(handles: &[u64]) -> bool {
    KEPT.load(Ordering::SeqCst) > 0 && {
        let map = lock(kept());
        handles.iter().any(|h| map.contains_key(h))
    }
}

/// Removes a persistent request (`MPI_Request_free`): its work, and whether it was active.
pub fn release(request: u64) -> Option<(Persistent, bool)> {
    let k = lock(kept()).remove(&request)?;
    KEPT.fetch_sub(1, Ordering::SeqCst);
    Some((k.work, k.active))
}

/// Before `MPI_Start`/`MPI_Startall` hands `handles` to the real MPI: packs the interposer's
/// persistent sends among them into their staging, all queued before one launch and one wait
/// per GPU ([`queue_and_wait`]), then marks the interposer's requests among them started.
/// Returns 0, or the code of a failed pack, when nothing must be started (the requests stay
/// inactive).
///
/// # Safety
/// MPI initialized; `handles` are the requests the caller starts, whose send buffers hold
/// what they send (MPI's contract for a start).
pub unsafe fn start(handles: &[u64]) -> c_int {
    let mut sends: Vec<(u64, Outgoing)> = Vec::new();
    {
        let mut map = lock(kept());
        for h in handles {
            if !matches!(map.get(h), Some(k) if matches!(k.work, Persistent::Send(_))) {
                continue;
            }
            if let Some(Kept {
                work: Persistent::Send(o),
                ..
            }) = map.remove(h)
            {
                sends.push((*h, o));
            }
        }
    }
    // SAFETY: each send's buffer is readable where its plan says (the caller's contract) and
    // its staging is its own, untouched by the real MPI while the request is inactive; the
    // stagings are distinct, so the packs of one batch write distinct bytes.
    let settled = unsafe {
        queue_and_wait(
            &mut sends,
            |(_, o)| &o.engine,
            |(_, o), batch| {
                o.engine
                    .enqueue_pack(&o.plan, o.buf, &mut o.staging, batch)
                    .map_err(|e| {
                        log!("{}: the pack at the start failed: {e}", o.op);
                        ERR_INTERN
                    })
            },
        )
    };
    let mut rc = 0;
    let mut map = lock(kept());
    for ((h, o), s) in sends.into_iter().zip(settled) {
        match s {
            Ok(()) => log!(
                "{}: packed {} bytes from a {} at the start",
                o.op,
                o.bytes,
                o.engine.describe()
            ),
            Err(code) => rc = code,
        }
        map.insert(
            h,
            Kept {
                work: Persistent::Send(o),
                active: false,
            },
        );
    }
    if rc == 0 {
        mark(&mut map, handles, true);
    }
    rc
}

/// After the real `MPI_Start`/`MPI_Startall` failed: the interposer's requests among `handles`
/// are not active.
pub fn not_started(handles: &[u64]) {
    mark(&mut lock(kept()), handles, false);
}

/// Marks the interposer's requests among `handles` active or not.
fn mark(map: &mut HashMap<u64, Kept>, handles: &[u64], active: bool) {
    for h in handles {
        if let Some(k) = map.get_mut(h) {
            k.active = active;
        }
    }
}

/// After a wait or test: the interposer's started persistent requests among `handles` that the
/// call completed (`completed(i)` for array slot `i`) are marked inactive; their receives are
/// taken out, with their slot and handle, to be unpacked and put back ([`put_back`]).
pub fn take_started(
    handles: &[u64],
    completed: impl Fn(usize) -> bool,
) -> Vec<(usize, u64, Receive)> {
    if KEPT.load(Ordering::SeqCst) == 0 {
        return Vec::new();
    }
    let mut map = lock(kept());
    let mut recvs = Vec::new();
    for (i, h) in handles.iter().enumerate() {
        let Some(k) = map.get_mut(h).filter(|k| k.active && completed(i)) else {
            continue;
        };
        k.active = false;
        if matches!(k.work, Persistent::Recv(_)) {
            if let Some(Kept {
                work: Persistent::Recv(r),
                ..
            }) = map.remove(h)
            {
                recvs.push((i, *h, r));
            }
        }
    }
    recvs
}

/// Puts a persistent receive taken by [`take_started`] back, inactive.
pub fn put_back(request: u64, r: Receive) {
    lock(kept()).insert(
        request,
        Kept {
            work: Persistent::Recv(r),
            active: false,
        },
    );
}

/// A persistent send's plan and staging, or `None` to pass `MPI_Send_init` through.
///
/// # Safety
/// MPI initialized; the arguments are the caller's send triple.
pub unsafe fn prepare_send_init(
    op: &'static str,
    buf: *const c_void,
    count: c_int,
    dt: ffi::MPI_Datatype,
) -> Option<Outgoing> {
    let host_pack = config::get().host_pack.send;
    // SAFETY: the caller's contract.
    let (_, plan, engine, method) = unsafe { take(op, buf, count, dt, host_pack) }?;
    match engine.staging_for(&plan, method) {
        Ok(staging) => Some(Outgoing {
            bytes: c_int::try_from(plan.packed_size()).ok()?,
            engine,
            plan,
            buf,
            staging,
            op,
        }),
        Err(e) => {
            log!("{op}: passes through: {e}");
            None
        }
    }
}
