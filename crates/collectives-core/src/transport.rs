//! Checked mode's transport: what the agreement ([`crate::checked`]) needs of the communicator it
//! goes through, so that the agreement and the front end depend on this and not on a backend. The
//! host MPI communicator implements it (`backend/mpi_host/transport.rs`) and carries the agreement
//! of every backend today. `pub` inside a private module, like the front end's `Backend`: nothing
//! outside the crate can name it.

use crate::error::Result;

/// What checked mode's agreement needs of the communicator it goes through (a backend's
/// `transport`).
pub trait Transport {
    /// The communicator's own checked-mode setting (`with_checked`, else `COLLECTIVES_CHECK`).
    fn checked_by_flag(&self) -> bool;
    /// Whether no operation on it timed out.
    fn is_usable(&self) -> bool;
    /// [`Error::Unusable`](crate::Error::Unusable) once an operation on it timed out.
    fn ensure_usable(&self, op: &'static str) -> Result<()>;
    /// The number of ranks.
    fn ranks(&self) -> usize;
    /// All-gather `mine` (the same length on every rank) into `table`, rank by rank, against the
    /// communicator's deadline.
    fn all_gather_i64(&self, op: &'static str, mine: &[i64], table: &mut [i64]) -> Result<()>;
    /// Under a deadline, meet every rank in a polled barrier (before `split` and `dup`, which have
    /// no non-blocking twin); without one, only [`ensure_usable`](Self::ensure_usable).
    fn arrive(&self, op: &'static str) -> Result<()>;
}
