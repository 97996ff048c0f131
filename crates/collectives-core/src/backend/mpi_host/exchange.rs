//! The grouped exchange of the MPI backends ([`crate::exchange`]): on host memory
//! ([`MpiComm::exchange_bytes`]), and under it the one the two MPI backends on device memory share,
//! on any [`Region`]s: every receive posted, then every send, then one wait for all of them
//! (`MPI_Waitall`, or `MPI_Testall` polled against the deadline on copies).

use std::ffi::{c_int, c_void};

use mpi::ffi;

use super::comm::MpiComm;
use super::raw;
use super::request::{new_request, wait_requests, Region};
use crate::comm::Communicator;
use crate::error::Result;
use crate::exchange::{check_parts, ExchangePart};

const OP: &str = "exchange_bytes";

impl MpiComm {
    /// Send every part of `sends` (bytes of `send`) to its peer and receive every part of `recvs`
    /// (into bytes of `recv`) from its peer, all posted together and complete together
    /// ([`crate::exchange`]): the neighbourhood exchange of pieces of one packed buffer that a
    /// halo exchange makes. Not collective: only the ranks named by some part take part, each
    /// posting the matching receive or send of the same length; parts to the same peer match in
    /// order. Honours the communicator's deadline.
    ///
    /// ```no_run
    /// use collectives_core::{Communicator, ExchangePart, MpiComm};
    ///
    /// let universe = mpi::initialize().expect("MPI initializes once");
    /// let comm = MpiComm::world(&universe)?;
    /// let (rank, size) = (comm.rank(), comm.size());
    /// // A ring: 4 bytes to the right neighbour, 4 from the left one.
    /// let send = [rank as u8; 4];
    /// let mut recv = [0u8; 4];
    /// let right = ExchangePart { peer: (rank + 1) % size, offset: 0, len: 4 };
    /// let left = ExchangePart { peer: (rank + size - 1) % size, offset: 0, len: 4 };
    /// comm.exchange_bytes(&send, &[right], &mut recv, &[left])?;
    /// assert_eq!(recv, [((rank + size - 1) % size) as u8; 4]);
    /// # Ok::<(), collectives_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when a part lies outside its
    /// buffer or names no rank of the communicator (before anything is posted), or when a
    /// receive gets a message of another length; [`Error::Timeout`](crate::Error::Timeout)
    /// after the deadline (the communicator refused from then on);
    /// [`Error::Unusable`](crate::Error::Unusable) after an earlier timeout;
    /// [`Error::Mpi`](crate::Error::Mpi).
    pub fn exchange_bytes(
        &self,
        send: &[u8],
        sends: &[ExchangePart],
        recv: &mut [u8],
        recvs: &[ExchangePart],
    ) -> Result<()> {
        check_parts(OP, "send", sends, send.len(), self.size())?;
        check_parts(OP, "receive", recvs, recv.len(), self.size())?;
        // SAFETY: every part lies inside its buffer and names a rank of this communicator
        // (checked above); both buffers are borrowed until the exchange completes.
        unsafe { self.exchange_regions(OP, Region::In(send), sends, Region::Out(recv), recvs) }
    }

    /// The grouped exchange on `send` and `recv` as MPI gets them ([`Region::Device`] for device
    /// memory under a CUDA-aware MPI), with the tag [`tag_ub`](Self::tag_ub): receives posted
    /// first, then sends, then one wait for all, each receive's length checked.
    ///
    /// # Errors
    /// As [`exchange_bytes`](Self::exchange_bytes) after its checks;
    /// [`Error::CountOverflow`](crate::Error::CountOverflow) for a part of more than `i32::MAX`
    /// bytes (before anything is posted).
    ///
    /// # Safety
    /// Every part lies inside its region and names a rank of this communicator; a device region is
    /// never passed under a deadline, and its memory is complete (its producers waited for) and
    /// stays valid until this returns.
    pub(crate) unsafe fn exchange_regions(
        &self,
        op: &'static str,
        send: Region<'_>,
        sends: &[ExchangePart],
        recv: Region<'_>,
        recvs: &[ExchangePart],
    ) -> Result<()> {
        let counts = recvs
            .iter()
            .chain(sends)
            .map(|p| raw::count(op, p.len))
            .collect::<Result<Vec<c_int>>>()?;
        let (deadline, [s, r]) = self.staged(op, [send, recv])?;
        let (dt, tag) = (raw::datatype::<u8>(), self.tag_ub());
        let mut requests = vec![new_request(); counts.len()];
        let mut posted = Ok(());
        for (i, (p, &n)) in recvs.iter().chain(sends).zip(&counts).enumerate() {
            let peer = p.peer as c_int;
            // SAFETY: the part lies inside its region (the caller's promise), whose address (or
            // that of its copy under a deadline) MPI gets; the peer is a rank of the
            // communicator; the request is a valid out-pointer, waited for below.
            let rc = unsafe {
                if i < recvs.len() {
                    let at = r.cast::<u8>().add(p.offset).cast::<c_void>();
                    ffi::MPI_Irecv(at, n, dt, peer, tag, self.raw, &mut requests[i])
                } else {
                    let at = s.cast::<u8>().add(p.offset).cast::<c_void>();
                    ffi::MPI_Isend(at, n, dt, peer, tag, self.raw, &mut requests[i])
                }
            };
            posted = raw::check(op, rc);
            if posted.is_err() {
                requests.truncate(i);
                break;
            }
        }
        // Whatever was posted is completed (or, under the deadline, left to MPI with its copies)
        // before the buffers go back to the caller.
        let mut statuses = vec![raw::status(); requests.len()];
        match deadline {
            Some((staging, timeout)) => {
                self.complete(op, staging, &mut requests, &mut statuses, timeout)?
            }
            None => {
                wait_requests(op, &mut requests, &mut statuses, None)?;
            }
        }
        posted?;
        for (p, status) in recvs.iter().zip(&statuses) {
            raw::received(op, status, dt, p.len)?;
        }
        Ok(())
    }
}
