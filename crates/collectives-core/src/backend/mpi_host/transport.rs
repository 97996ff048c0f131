//! The host communicator as checked mode's transport ([`Transport`]): the agreement of every
//! backend goes through an [`MpiComm`].

use super::MpiComm;
use crate::comm::Communicator;
use crate::error::Result;
use crate::transport::Transport;

impl Transport for MpiComm {
    fn checked_by_flag(&self) -> bool {
        MpiComm::checked_by_flag(self)
    }

    fn is_usable(&self) -> bool {
        MpiComm::is_usable(self)
    }

    fn ensure_usable(&self, op: &'static str) -> Result<()> {
        MpiComm::ensure_usable(self, op)
    }

    fn ranks(&self) -> usize {
        self.size()
    }

    fn all_gather_i64(&self, op: &'static str, mine: &[i64], table: &mut [i64]) -> Result<()> {
        MpiComm::all_gather_i64(self, op, mine, table)
    }

    fn arrive(&self, op: &'static str) -> Result<()> {
        MpiComm::arrive(self, op)
    }
}
