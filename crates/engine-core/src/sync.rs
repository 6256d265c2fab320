//! Locking shared by the engine's modules.

use std::sync::{Mutex, MutexGuard};

/// Lock `m`, whatever a panic elsewhere left in it: every guarded change in the engine is
/// a single insert, removal or replacement, which a panic cannot leave half-done.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
