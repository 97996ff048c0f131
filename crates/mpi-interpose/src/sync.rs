//! The locking rules of the interposer's shared maps: one mutex per map, and the gate between
//! completions and `MPI_Request_get_status`'s settles.
//!
//! The gate is taken to read by a completion (a wait, a test, `MPI_Request_free`) once the real
//! MPI has completed its requests, from taking them out of the interposer's tables until their
//! unpacks are done ([`completing`]); and to write by `MPI_Request_get_status` while it settles
//! a request it saw complete: takes a receive out, unpacks it, puts it back as settled
//! ([`settling`]). Where threads call MPI at once (`MPI_THREAD_MULTIPLE`), a wait then never
//! misses a receive that another thread's `MPI_Request_get_status` has taken out to unpack (it
//! would return before the unpack), nor does `MPI_Request_get_status` return while another
//! thread's wait is still unpacking the receive it asks about. Neither side holds it across a
//! call that blocks on a peer.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A mutex guard even if another thread panicked while holding it (the maps stay consistent:
/// every update is one insert or remove).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The gate between completions and settles (see the module's documentation).
static GATE: RwLock<()> = RwLock::new(());

/// The gate to read, for a completion.
pub fn completing() -> RwLockReadGuard<'static, ()> {
    GATE.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The gate to write, for a settle.
pub fn settling() -> RwLockWriteGuard<'static, ()> {
    GATE.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
