//! The one locking rule of the interposer's shared maps.

use std::sync::{Mutex, MutexGuard};

/// A mutex guard even if another thread panicked while holding it (the maps stay consistent:
/// every update is one insert or remove).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
