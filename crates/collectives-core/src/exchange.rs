//! A grouped exchange: sends of byte parts of one buffer and receives into byte parts of another,
//! each part to or from one peer, posted together and complete together. It is what a halo
//! exchange, or any neighbourhood exchange of pieces of one packed buffer, asks of a backend;
//! every backend offers it: [`MpiComm::exchange_bytes`](crate::MpiComm::exchange_bytes) on host
//! memory, and `DeviceCommunicator::exchange_bytes` on device memory (NCCL's grouped send and
//! receive, or MPI's).
//!
//! Parts to the same peer are matched in the order given on both sides, as NCCL's grouped calls
//! and MPI's non-overtaking messages are. The MPI backends send every part with the tag
//! [`MpiComm::tag_ub`](crate::MpiComm::tag_ub), the largest the MPI allows: a program that also
//! sends its own messages on the same communicator keeps that tag for the exchange.

use crate::error::{Error, Result};

/// One part of a grouped exchange: `len` bytes at byte `offset` of a buffer, sent to or received
/// from `peer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExchangePart {
    /// The other rank.
    pub peer: usize,
    /// Where the part starts in its buffer, in bytes.
    pub offset: usize,
    /// Its length in bytes.
    pub len: usize,
}

impl ExchangePart {
    /// Parts to or from the given `(peer, len)`s laid end to end in one buffer, in that order,
    /// from offset 0: one contiguous piece per message.
    ///
    /// ```
    /// use collectives_core::ExchangePart;
    ///
    /// let parts = ExchangePart::end_to_end([(1, 8), (0, 4)]);
    /// assert_eq!(parts[1], ExchangePart { peer: 0, offset: 8, len: 4 });
    /// ```
    pub fn end_to_end(peers_and_lens: impl IntoIterator<Item = (usize, usize)>) -> Vec<Self> {
        let mut offset = 0;
        peers_and_lens
            .into_iter()
            .map(|(peer, len)| {
                let part = ExchangePart { peer, offset, len };
                offset += len;
                part
            })
            .collect()
    }
}

/// The bytes of a buffer `parts` reach: the end of the part that ends last (0 without parts).
pub(crate) fn extent(parts: &[ExchangePart]) -> usize {
    parts.iter().map(|p| p.offset + p.len).max().unwrap_or(0)
}

/// Check that every part of `parts` (of the `what` buffer: "send" or "receive") lies inside a
/// buffer of `len` bytes and names a rank below `ranks`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the first part that does not.
pub(crate) fn check_parts(
    op: &'static str,
    what: &str,
    parts: &[ExchangePart],
    len: usize,
    ranks: usize,
) -> Result<()> {
    for (i, p) in parts.iter().enumerate() {
        if p.peer >= ranks {
            return Err(Error::invalid(
                op,
                format!(
                    "{what} part {i} names rank {} of a communicator of {ranks}",
                    p.peer
                ),
            ));
        }
        if !p.offset.checked_add(p.len).is_some_and(|end| end <= len) {
            return Err(Error::invalid(
                op,
                format!(
                    "{what} part {i} ({} bytes at offset {}) ends past the {len}-byte {what} buffer",
                    p.len, p.offset
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(peer: usize, offset: usize, len: usize) -> ExchangePart {
        ExchangePart { peer, offset, len }
    }

    #[test]
    fn the_extent_is_where_the_last_part_ends() {
        assert_eq!(extent(&[]), 0);
        assert_eq!(extent(&[part(0, 8, 4), part(1, 0, 8)]), 12);
        assert_eq!(extent(&[part(0, 0, 0), part(1, 5, 0)]), 5);
    }

    #[test]
    fn parts_outside_the_buffer_or_the_ranks_are_refused() {
        assert!(check_parts("x", "send", &[part(1, 0, 8), part(0, 8, 8)], 16, 2).is_ok());
        let past = check_parts("x", "send", &[part(0, 0, 8), part(1, 9, 8)], 16, 2).unwrap_err();
        assert!(matches!(past, Error::InvalidArgument { .. }), "{past}");
        assert!(past.to_string().contains("send part 1"), "{past}");
        let rank = check_parts("x", "receive", &[part(2, 0, 1)], 16, 2).unwrap_err();
        assert!(rank.to_string().contains("rank 2"), "{rank}");
        let wraps = check_parts("x", "send", &[part(0, usize::MAX, 2)], 16, 2).unwrap_err();
        assert!(matches!(wraps, Error::InvalidArgument { .. }), "{wraps}");
    }
}
