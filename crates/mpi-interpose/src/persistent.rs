//! Persistent requests of the interposer (`MPI_Send_init`, `MPI_Recv_init`): each keeps a
//! staging buffer for its life, the real MPI's persistent request moves the staging's bytes,
//! its send is packed at each `MPI_Start`/`MPI_Startall` (all of one call queued before one
//! launch and one wait per GPU) and its receive unpacked at each completion. A persistent
//! handle does not change when its request completes, so completion is told by the waits' and
//! tests' flags, indices and index lists ([`take_started`]), and only a request seen started
//! is unpacked. With the direct path, a send may be packed into fresh staging at a start and
//! lent instead ([`choose`], [`pack`], [`lend_packed`]): a persistent request of the real MPI
//! for its message of 0 bytes then starts, and is waited for, in its place ([`swap_in`]).

use rustc_hash::FxHashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use datatype_pack::StridedBlock;
use mpi::ffi;

use crate::config;
use crate::direct;
use crate::engine::{Engine, Staging};
use crate::handle::key;
use crate::log::log;
use crate::message::{Receive, ERR_INTERN};
use crate::path::{self, not_waited, queue_and_launch, take, wait_launched};
use crate::sync::lock;

/// A send the interposer packs at each start of a persistent request (`MPI_Send_init`): the
/// caller's buffer and its plan, and the staging the real MPI's request sends from. With the
/// direct path, also a persistent request of the real MPI for the message of 0 bytes that
/// follows a lent start ([`Outgoing::marker`]), started and completed in the program's
/// request's place ([`swap_in`]).
#[derive(Debug)]
pub struct Outgoing {
    engine: Engine,
    plan: Arc<StridedBlock>,
    buf: *const c_void,
    /// The buffer the real MPI sends from.
    pub staging: Staging,
    /// Its size in bytes, as MPI's count.
    pub bytes: c_int,
    op: &'static str,
    /// The persistent request of the 0-byte message of the direct path (`MPI_Send_init` of the
    /// same destination, tag and communicator), where the path serves this send.
    pub marker: Option<ffi::MPI_Request>,
    /// Whether the last start was lent on the direct path (its marker was started instead).
    lent: bool,
    /// A start's fresh staging, packed, and its message's destination, tag and number, until
    /// [`lend_packed`] lends it or packs the request's own staging instead.
    fresh: Option<(Staging, (c_int, c_int, u64))>,
    /// The direct path's allocations its last starts packed into, the latest last (at most
    /// [`RECENT`]): asked for again, oldest first ([`Engine::lend_staging_for`]).
    recent: Vec<u64>,
}

/// Allocations a persistent send remembers ([`Outgoing::recent`]): a loan comes back once its
/// receiver is done, which may be after the next start, so a start finds one of the last few
/// back.
const RECENT: usize = 3;

/// Remembers `at` as the latest of `recent`, keeping at most [`RECENT`].
fn remember(recent: &mut Vec<u64>, at: u64) {
    recent.retain(|&a| a != at);
    recent.push(at);
    if recent.len() > RECENT {
        recent.remove(0);
    }
}

// SAFETY: the user's buffer address is only used by the thread that starts the request; MPI's
// rules keep the buffer alive until the request is freed.
unsafe impl Send for Outgoing {}

impl Outgoing {
    /// The engine of its buffer.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether its last start was lent on the direct path (its pack not waited for there).
    pub fn lent(&self) -> bool {
        self.lent
    }
}

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

/// Started persistent receives that `MPI_Request_get_status` saw complete and unpacked
/// ([`settle_seen`]): the code and the status's count in bytes, until the wait or test that
/// completes them.
fn seen() -> &'static Mutex<FxHashMap<u64, (c_int, c_int)>> {
    static S: OnceLock<Mutex<FxHashMap<u64, (c_int, c_int)>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(FxHashMap::default()))
}

/// What a wait or test completed among the interposer's persistent requests
/// ([`take_started`]).
#[derive(Debug, Default)]
pub struct Completed {
    /// Receives to unpack, with their slot and handle, to be put back ([`put_back`]).
    pub recvs: Vec<(usize, u64, Receive)>,
    /// The engines of sends lent at their start, whose packs must be waited for.
    pub lent: Vec<Engine>,
    /// Receives already unpacked when `MPI_Request_get_status` saw them complete: their slot,
    /// code and status's count in bytes.
    pub seen: Vec<(usize, c_int, c_int)>,
}

fn kept() -> &'static Mutex<FxHashMap<u64, Kept>> {
    static T: OnceLock<Mutex<FxHashMap<u64, Kept>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(FxHashMap::default()))
}

/// Persistent requests kept, read without the lock on every wait and test.
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// Persistent sends with a marker ([`Outgoing::marker`]), read without the lock by
/// [`swap_in`].
pub static LENT: AtomicUsize = AtomicUsize::new(0);

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

/// Before `MPI_Start`/`MPI_Startall` hands `handles` to the real MPI, first step: each of the
/// interposer's persistent sends among them that the direct path may serve (`counted`, per
/// handle: its destination, tag and number) gets fresh staging to be packed into and lent
/// ([`pack`], [`lend_packed`]). Whether every send of the interposer among `handles` got one
/// (and there is one): its packs need then not be waited for.
pub fn choose(handles: &[u64], counted: &[Option<(c_int, c_int, u64)>]) -> bool {
    if counted.iter().any(Option::is_some) {
        // Loans the receivers are done with go back to the pool first.
        direct::read_mail();
    }
    let mut map = lock(kept());
    let (mut sends, mut fresh) = (0, 0);
    for (i, h) in handles.iter().enumerate() {
        let Some(Kept {
            work: Persistent::Send(o),
            ..
        }) = map.get_mut(h)
        else {
            continue;
        };
        sends += 1;
        o.lent = false;
        let key = counted
            .get(i)
            .copied()
            .flatten()
            .filter(|_| o.marker.is_some());
        o.fresh = key.and_then(|k| Some((o.engine.lend_staging_for(&o.plan, &o.recent).ok()?, k)));
        if let Some(at) = o.fresh.as_ref().and_then(|(f, _)| f.lend_address()) {
            remember(&mut o.recent, at);
        }
        fresh += usize::from(o.fresh.is_some());
    }
    sends > 0 && fresh == sends
}

/// Packs the interposer's persistent sends among `handles`, each into the fresh staging
/// [`choose`] gave it or its own, all queued before one launch per GPU
/// ([`crate::path::queue_and_launch`]), then marks the interposer's requests among them
/// started. The packs are waited for where `wait` (a send's own staging is read by the real
/// MPI); where not, every send must be lendable ([`choose`]: the loans' events order the
/// peers' unpacks after the packs, and a send not lent waits for its stream before its staging
/// goes anywhere, [`lend_packed`]). Returns 0, or the code of a failed pack, when nothing must
/// be started (the requests stay inactive, their fresh staging dropped).
///
/// # Safety
/// MPI initialized; `handles` are the requests the caller starts, whose send buffers hold
/// what they send (MPI's contract for a start).
pub unsafe fn pack(handles: &[u64], wait: bool) -> c_int {
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
    // its staging (its own, untouched by the real MPI while the request is inactive, or fresh)
    // is written by its pack alone, so the packs of one batch write distinct bytes; fresh
    // staging not waited for here is kept until its stream is waited for or its loan ends.
    let settled = unsafe {
        let launched = queue_and_launch(
            &mut sends,
            |(_, o)| &o.engine,
            |(_, o), batch| {
                let into = match &mut o.fresh {
                    Some((fresh, _)) => fresh,
                    None => &mut o.staging,
                };
                o.engine
                    .enqueue_pack(&o.plan, o.buf, into, batch)
                    .map_err(|e| {
                        log!("{}: the pack at the start failed: {e}", o.op);
                        ERR_INTERN
                    })
            },
        );
        if wait {
            wait_launched(&sends, |(_, o)| &o.engine, launched)
        } else {
            let settled = not_waited(launched);
            if settled.iter().any(Result::is_err) {
                // Nothing is lent after a failure: the fresh staging is dropped once idle.
                for (_, o) in &sends {
                    if let Err(e) = o.engine.wait() {
                        log!("{}: the wait after a failed start failed: {e}", o.op);
                    }
                }
            }
            settled
        }
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
    } else {
        for h in handles {
            if let Some(Kept {
                work: Persistent::Send(o),
                ..
            }) = map.get_mut(h)
            {
                o.fresh = None;
            }
        }
    }
    rc
}

/// Per handle among `handles`: whether it is a persistent send packed into fresh staging by
/// [`pack`], to be lent.
pub fn packed_fresh(handles: &[u64]) -> Vec<bool> {
    let map = lock(kept());
    handles
        .iter()
        .map(|h| matches!(map.get(h), Some(Kept { work: Persistent::Send(o), .. }) if o.fresh.is_some()))
        .collect()
}

/// The sends among `handles` that [`pack`] packed into fresh staging: each is lent where its
/// receive's ready message comes ([`direct::lend_started`]; its marker then starts in its
/// place, [`swap_in`]), else its own staging is packed too and the real request goes. Returns
/// the handles of the sends whose pack into their own staging failed (not to be started).
///
/// # Safety
/// As [`pack`].
pub unsafe fn lend_packed(handles: &[u64]) -> Vec<u64> {
    let mut failed = Vec::new();
    // One event for the loans of this start, recorded after all its packs (queued by [`pack`]
    // before any loan): each lend queues nothing before the next.
    let mut recorded = None;
    let mut map = lock(kept());
    for h in handles {
        let Some(Kept {
            work: Persistent::Send(o),
            ..
        }) = map.get_mut(h)
        else {
            continue;
        };
        let Some((fresh, key)) = o.fresh.take() else {
            continue;
        };
        match direct::lend_started(o.op, key, &o.engine, &o.plan, fresh, &mut recorded) {
            Ok(()) => o.lent = true,
            Err(fresh) => {
                // SAFETY: the caller's contract; the request's own staging is untouched by
                // the real MPI while it is inactive; waited for below.
                let again = unsafe { o.engine.enqueue_pack(&o.plan, o.buf, &mut o.staging, None) };
                // The wait covers the fresh staging's pack too (the same stream, queued
                // before): only then does it go back to its pool.
                if let Err(e) = again.and(o.engine.wait()) {
                    log!("{}: the pack at the start failed: {e}", o.op);
                    failed.push(*h);
                }
                drop(fresh);
            }
        }
    }
    failed
}

/// The interposer's persistent requests among `reqs` whose start was lent, their handles
/// swapped for their markers' in the caller's array while the real MPI starts, waits for or
/// tests them; put back when dropped.
pub struct Swapped {
    reqs: *mut ffi::MPI_Request,
    swaps: Vec<(usize, ffi::MPI_Request)>,
}

impl Drop for Swapped {
    fn drop(&mut self) {
        for &(i, program) in &self.swaps {
            // SAFETY: slot `i` of the caller's array, which `swap_in` read and wrote.
            unsafe { *self.reqs.add(i) = program };
        }
    }
}

/// Swaps the handles of the lent persistent sends among the `n` requests at `reqs` for their
/// markers' ([`Outgoing::marker`]) until the result is dropped.
///
/// # Safety
/// `reqs` points at `n` handles (or `n` is 0), writable, and outlives the result.
pub unsafe fn swap_in(reqs: *mut ffi::MPI_Request, n: c_int) -> Swapped {
    let mut swapped = Swapped {
        reqs,
        swaps: Vec::new(),
    };
    let n = usize::try_from(n).unwrap_or(0);
    if reqs.is_null() || n == 0 || LENT.load(Ordering::SeqCst) == 0 {
        return swapped;
    }
    let map = lock(kept());
    for i in 0..n {
        // SAFETY: the caller's contract.
        let program = unsafe { *reqs.add(i) };
        if let Some(Kept {
            work:
                Persistent::Send(Outgoing {
                    marker: Some(m),
                    lent: true,
                    ..
                }),
            ..
        }) = map.get(&key(program))
        {
            // SAFETY: as above.
            unsafe { *reqs.add(i) = *m };
            swapped.swaps.push((i, program));
        }
    }
    swapped
}

/// After the real start: announces the interposer's persistent receives among `handles` to the
/// direct path (`counted`: their source, tag and number), their real receives now posted.
///
/// # Safety
/// MPI initialized.
pub unsafe fn announce_started(handles: &[u64], counted: &[Option<(c_int, c_int, u64)>]) {
    let mut map = lock(kept());
    for (h, c) in handles.iter().zip(counted) {
        if let (
            Some((source, tag, seq)),
            Some(Kept {
                work: Persistent::Recv(r),
                ..
            }),
        ) = (c, map.get_mut(h))
        {
            // SAFETY: the caller's contract; the receive is posted and kept until it completes.
            unsafe { direct::announce(r, *source, *tag, Some(*seq), false) };
        }
    }
}

/// After the real `MPI_Start`/`MPI_Startall` failed: the interposer's requests among `handles`
/// are not active.
pub fn not_started(handles: &[u64]) {
    mark(&mut lock(kept()), handles, false);
}

/// The interposer's persistent sends among `handles` whose start was lent.
pub fn lent_among(handles: &[u64]) -> Vec<u64> {
    let map = lock(kept());
    handles
        .iter()
        .filter(|h| matches!(map.get(h), Some(Kept { work: Persistent::Send(o), .. }) if o.lent))
        .copied()
        .collect()
}

/// Waits for the packs of the lent starts among `handles` (a start that failed after lending:
/// the program has its buffers back).
pub fn wait_lent(handles: &[u64]) {
    let map = lock(kept());
    for h in handles {
        if let Some(Kept {
            work: Persistent::Send(o),
            ..
        }) = map.get(h)
        {
            if o.lent {
                if let Err(e) = o.engine.wait() {
                    log!("{}: the wait for a direct pack failed: {e}", o.op);
                }
            }
        }
    }
}

/// The interposer's requests among `handles` are active: the real MPI started them (a start
/// that failed after starting some, [`pack`] having marked none).
pub fn started_anyway(handles: &[u64]) {
    mark(&mut lock(kept()), handles, true);
}

/// Marks the interposer's requests among `handles` active or not (a new start is not seen
/// complete yet).
fn mark(map: &mut FxHashMap<u64, Kept>, handles: &[u64], active: bool) {
    let mut seen = lock(seen());
    for h in handles {
        if let Some(k) = map.get_mut(h) {
            k.active = active;
            seen.remove(h);
        }
    }
}

/// The real MPI's request of persistent send `handle` where its active start was lent (its
/// marker), for a call that asks about the request without completing it.
pub fn marker_if_lent(handle: u64) -> Option<ffi::MPI_Request> {
    match lock(kept()).get(&handle) {
        Some(Kept {
            work: Persistent::Send(o),
            active: true,
        }) if o.lent => o.marker,
        _ => None,
    }
}

/// `MPI_Request_get_status` said persistent request `handle` is complete (its `status` just
/// written): an active receive is unpacked now and remembered as seen, so that the wait or test
/// that completes it neither unpacks it again nor reads another status; an active lent send's
/// pack is waited for. The code for the call, or `None` where `handle` is not a persistent
/// request of the interposer.
///
/// # Safety
/// MPI initialized; `status` is writable, the request's, just written by the real MPI.
pub unsafe fn settle_seen(handle: u64, status: *mut ffi::MPI_Status) -> Option<c_int> {
    if KEPT.load(Ordering::SeqCst) == 0 {
        return None;
    }
    if let Some(&(code, n)) = lock(seen()).get(&handle) {
        // SAFETY: the caller's contract.
        unsafe { direct::set_bytes(status, u64::try_from(n).unwrap_or(0)) };
        return Some(code);
    }
    let r = {
        let mut map = lock(kept());
        match map.get(&handle)? {
            Kept {
                work: Persistent::Recv(_),
                active: true,
            } => match map.remove(&handle) {
                Some(Kept {
                    work: Persistent::Recv(r),
                    ..
                }) => r,
                _ => return None,
            },
            Kept {
                work: Persistent::Send(o),
                active: true,
            } if o.lent => {
                let e = o.engine.clone();
                drop(map);
                if let Err(e) = e.wait() {
                    log!("MPI_Request_get_status: the wait for a direct pack failed: {e}");
                }
                return Some(0);
            }
            _ => return Some(0),
        }
    };
    // SAFETY: the receive completed with `status` (the caller's contract).
    let (code, n, r) = unsafe { path::settle_receive(r, status) };
    if let Some(r) = r {
        lock(kept()).insert(
            handle,
            Kept {
                work: Persistent::Recv(r),
                active: true,
            },
        );
    }
    lock(seen()).insert(handle, (code, n));
    Some(code)
}

/// Whether started persistent receive `handle` was seen complete and unpacked
/// ([`settle_seen`]); forgets it (`MPI_Request_free`).
pub fn take_seen(handle: u64) -> bool {
    lock(seen()).remove(&handle).is_some()
}

/// After a wait or test: the interposer's started persistent requests among `handles` that the
/// call completed (`completed(i)` for array slot `i`) are marked inactive; their receives are
/// taken out, with their slot and handle, to be unpacked and put back ([`put_back`]) (those
/// `MPI_Request_get_status` already unpacked are only said), and the engines of their sends
/// that were lent given, whose packs (not waited for at the start) must be waited for before
/// the program has its buffers back.
pub fn take_started(handles: &[u64], completed: impl Fn(usize) -> bool) -> Completed {
    let mut done = Completed::default();
    if KEPT.load(Ordering::SeqCst) == 0 {
        return done;
    }
    let mut map = lock(kept());
    let mut seen = lock(seen());
    for (i, h) in handles.iter().enumerate() {
        let Some(k) = map.get_mut(h).filter(|k| k.active && completed(i)) else {
            continue;
        };
        k.active = false;
        if let Persistent::Send(o) = &k.work {
            if o.lent {
                done.lent.push(o.engine.clone());
            }
        }
        if let Some((code, n)) = seen.remove(h) {
            done.seen.push((i, code, n));
            continue;
        }
        if matches!(k.work, Persistent::Recv(_)) {
            if let Some(Kept {
                work: Persistent::Recv(r),
                ..
            }) = map.remove(h)
            {
                done.recvs.push((i, *h, r));
            }
        }
    }
    done
}

/// Before a wait for `handles`: [`path::pull_early`] for the interposer's started persistent
/// receives among them; how many still wait for their notes.
///
/// # Safety
/// As [`path::pull_early`].
pub unsafe fn pull_early(handles: &[u64]) -> usize {
    if KEPT.load(Ordering::SeqCst) == 0 {
        return 0;
    }
    let mut map = lock(kept());
    let mut rs: Vec<(usize, &mut Receive)> = map
        .iter_mut()
        .filter_map(|(h, k)| match k {
            Kept {
                work: Persistent::Recv(r),
                active: true,
            } => Some((handles.iter().position(|x| x == h)?, r)),
            _ => None,
        })
        .collect();
    rs.sort_by_key(|(i, _)| *i);
    // SAFETY: the caller's contract.
    unsafe { path::pull_early(rs.into_iter().map(|(_, r)| r).collect()) }
}

/// Whether persistent receive `handle` claimed its note before completing
/// ([`path::claimed_early`]).
pub fn claimed_early(handle: u64) -> bool {
    matches!(
        lock(kept()).get(&handle),
        Some(Kept { work: Persistent::Recv(r), .. }) if r.early.is_some()
    )
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
    let (_, plan, engine, method) = unsafe { take(op, buf, count, dt, host_pack, None) }?;
    match engine.staging_for(&plan, method) {
        Ok(staging) => Some(Outgoing {
            bytes: c_int::try_from(plan.packed_size()).ok()?,
            engine,
            plan,
            buf,
            staging,
            op,
            marker: None,
            lent: false,
            fresh: None,
            recent: Vec::new(),
        }),
        Err(e) => {
            log!("{op}: passes through: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_remembers_its_last_allocations_oldest_first() {
        let mut recent = Vec::new();
        for at in [10, 20, 10, 30, 40] {
            remember(&mut recent, at);
        }
        // 10 came again after 20 (moved to the end), then 30 and 40 pushed 20 out.
        assert_eq!(recent, vec![10, 30, 40]);
        remember(&mut recent, 30);
        assert_eq!(recent, vec![10, 40, 30]);
    }
}
