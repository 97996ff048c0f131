//! The argument rules of every collective, in one table for every backend.
//!
//! [`Rules`] knows what the rules need of a communicator: its backend (whose reductions apply), its
//! rank and size, its device (device backends), the largest count its library takes ([`CountLimit`]:
//! MPI's `int`, NCCL's `size_t` of wire values) and its largest tag. Each method checks one
//! operation's arguments, in the same order on every backend, and returns what the library call
//! needs: the count, and on the root the root-only buffer. Nothing here communicates: a rank's own
//! verdict is what checked mode then shares with the others ([`crate::checked`]).
//!
//! The order, for every operation: the reduce operation for the element; root and peer ranks and the
//! tag; the lengths (counts arrays first, then the buffers against them); every buffer on the
//! communicator's device; the counts against the backend's limit.

use std::ops::Deref;

use crate::check;
use crate::comm::Tag;
use crate::element::Element;
use crate::error::Result;
use crate::memory::Buffer;
use crate::op::{BackendKind, ReduceOp};

/// The largest count one library call takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountLimit {
    /// At most this many elements (MPI's `int` counts and displacements).
    Elements(usize),
    /// At most this many wire values ([`WireForm`](crate::WireForm) lanes, NCCL's `size_t`).
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    WireValues(usize),
}

impl CountLimit {
    /// The largest number of elements of `T` in one call.
    pub(crate) fn elements<T: Element>(self) -> usize {
        match self {
            CountLimit::Elements(n) => n,
            CountLimit::WireValues(n) => n / T::WIRE.lanes.max(1),
        }
    }
}

/// What the rules know of the communicator that checks them.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// The backend, whose reduction rules apply.
    pub(crate) backend: BackendKind,
    /// This rank.
    pub(crate) rank: usize,
    /// The number of ranks.
    pub(crate) size: usize,
    /// The communicator's CUDA device (device backends), which every buffer must be on.
    pub(crate) device: Option<usize>,
    /// The largest count of one call.
    pub(crate) limit: CountLimit,
    /// The largest tag.
    pub(crate) tag_ub: Tag,
}

impl Rules {
    fn count<T: Element>(&self, op: &'static str, n: usize) -> Result<usize> {
        check::count_fits(op, n, self.limit.elements::<T>())
    }

    /// Every count and every packed displacement of a counts array fit the limit (the array was
    /// checked to have one entry per rank and a sum that does not overflow).
    fn counts_displs<T: Element>(&self, op: &'static str, counts: &[usize]) -> Result<()> {
        let mut displ = 0usize;
        for &n in counts {
            self.count::<T>(op, n)?;
            self.count::<T>(op, displ)?;
            displ += n;
        }
        Ok(())
    }

    /// `buf` lies on the communicator's device (always true of host memory).
    fn placed<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        name: &str,
        buf: &B,
    ) -> Result<()> {
        match (buf.device(), self.device) {
            (Some(theirs), Some(mine)) => check::same_device(op, name, theirs, mine),
            _ => Ok(()),
        }
    }

    /// The buffers of a gather or scatter: this rank's own (`mine`, with its name) placed, and the
    /// root's (`theirs`, with its name and the root) given on the root only, of `expected`
    /// elements (`because` says why), and placed.
    fn rooted<T: Element, M: Buffer<T> + ?Sized, W: Buffer<T> + ?Sized, R: Deref<Target = W>>(
        &self,
        op: &'static str,
        (mine_name, mine): (&str, &M),
        (theirs_name, theirs, root): (&str, Option<R>, usize),
        expected: usize,
        because: &str,
    ) -> Result<Option<R>> {
        self.placed(op, mine_name, mine)?;
        let theirs = check::at_root(
            op,
            theirs_name,
            self.rank == root,
            theirs,
            expected,
            because,
        )?;
        self.placed_opt(op, theirs_name, theirs.as_deref())?;
        Ok(theirs)
    }

    fn placed_opt<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        name: &str,
        buf: Option<&B>,
    ) -> Result<()> {
        buf.map_or(Ok(()), |b| self.placed(op, name, b))
    }

    fn both_placed<T: Element, B: Buffer<T> + ?Sized, W: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        send: &B,
        recv: &W,
    ) -> Result<()> {
        self.placed(op, "send", send)?;
        self.placed(op, "recv", recv)
    }

    fn root(&self, op: &'static str, root: usize) -> Result<()> {
        check::rank_in_range(op, "root", root, self.size)
    }

    /// A peer rank and a tag of a point-to-point operation.
    pub(crate) fn peer(&self, op: &'static str, what: &str, rank: usize, tag: Tag) -> Result<()> {
        check::rank_in_range(op, what, rank, self.size)?;
        check::tag(op, tag, self.tag_ub)
    }

    /// A `split` color: any `u32` up to MPI's largest color (`i32::MAX`); `None` joins none.
    pub(crate) fn color(op: &'static str, color: Option<u32>) -> Result<Option<i32>> {
        color
            .map(|c| {
                i32::try_from(c).map_err(|_| {
                    crate::error::Error::invalid(
                        op,
                        format!("color {c} exceeds MPI's largest color {}", i32::MAX),
                    )
                })
            })
            .transpose()
    }

    /// `broadcast`: the count.
    pub(crate) fn broadcast<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        buf: &B,
        root: usize,
    ) -> Result<usize> {
        self.root(op, root)?;
        self.placed(op, "buf", buf)?;
        self.count::<T>(op, buf.len())
    }

    /// `reduce`: the count, and `recv` on the root.
    pub(crate) fn reduce<
        T: Element,
        B: Buffer<T> + ?Sized,
        W: Buffer<T> + ?Sized,
        R: Deref<Target = W>,
    >(
        &self,
        op: &'static str,
        send: &B,
        recv: Option<R>,
        red: ReduceOp,
        root: usize,
    ) -> Result<(usize, Option<R>)> {
        check::check_op::<T>(op, red, self.backend)?;
        self.root(op, root)?;
        self.placed(op, "send", send)?;
        let recv = check::at_root(
            op,
            "recv",
            self.rank == root,
            recv,
            send.len(),
            "the length of send",
        )?;
        self.placed_opt(op, "recv", recv.as_deref())?;
        Ok((self.count::<T>(op, send.len())?, recv))
    }

    /// `all_reduce`: the count.
    pub(crate) fn all_reduce<T: Element, B: Buffer<T> + ?Sized, W: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        send: &B,
        recv: &W,
        red: ReduceOp,
    ) -> Result<usize> {
        check::check_op::<T>(op, red, self.backend)?;
        check::same_len(op, "send", send.len(), "recv", recv.len())?;
        self.both_placed(op, send, recv)?;
        self.count::<T>(op, send.len())
    }

    /// `all_reduce_in_place`: the count.
    pub(crate) fn all_reduce_in_place<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        buf: &B,
        red: ReduceOp,
    ) -> Result<usize> {
        check::check_op::<T>(op, red, self.backend)?;
        self.placed(op, "buf", buf)?;
        self.count::<T>(op, buf.len())
    }

    /// `all_gather`: the count of one block.
    pub(crate) fn all_gather<T: Element, B: Buffer<T> + ?Sized, W: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        send: &B,
        recv: &W,
    ) -> Result<usize> {
        check::blocks_len(op, "recv", recv.len(), self.size, send.len())?;
        self.both_placed(op, send, recv)?;
        self.count::<T>(op, recv.len())?;
        self.count::<T>(op, send.len())
    }

    /// `all_gather_v`: every count and displacement fits.
    pub(crate) fn all_gather_v<T: Element, B: Buffer<T> + ?Sized, W: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        send: &B,
        recv: &W,
        counts: &[usize],
    ) -> Result<()> {
        let total = check::v_counts(op, "send", send.len(), counts, self.rank, self.size)?;
        check::len_is(op, "recv", recv.len(), total, "the sum of counts")?;
        self.both_placed(op, send, recv)?;
        self.counts_displs::<T>(op, counts)
    }

    /// `gather` (this rank's `send`, the root's `recv`) or `scatter` (this rank's `recv`, the
    /// root's `send`), each buffer with its name: the root in range, the buffers (see `rooted`),
    /// then the root's buffer's count and this rank's, which is the count of one block returned;
    /// the root's buffer, dropped on another rank.
    pub(crate) fn gather_or_scatter<
        T: Element,
        M: Buffer<T> + ?Sized,
        W: Buffer<T> + ?Sized,
        R: Deref<Target = W>,
    >(
        &self,
        op: &'static str,
        (mine_name, mine): (&str, &M),
        (theirs_name, theirs): (&str, Option<R>),
        root: usize,
    ) -> Result<(usize, Option<R>)> {
        self.root(op, root)?;
        let theirs = self.rooted(
            op,
            (mine_name, mine),
            (theirs_name, theirs, root),
            self.size.saturating_mul(mine.len()),
            &format!("{} ranks x {} elements", self.size, mine.len()),
        )?;
        if let Some(t) = &theirs {
            self.count::<T>(op, t.len())?;
        }
        Ok((self.count::<T>(op, mine.len())?, theirs))
    }

    /// `gather_v` or `scatter_v`, as [`gather_or_scatter`](Self::gather_or_scatter) with
    /// `counts[i]` elements from (or to) rank `i`: this rank's buffer holds its count, the root's
    /// the sum, and every count and displacement fits.
    pub(crate) fn gather_or_scatter_v<
        T: Element,
        M: Buffer<T> + ?Sized,
        W: Buffer<T> + ?Sized,
        R: Deref<Target = W>,
    >(
        &self,
        op: &'static str,
        (mine_name, mine): (&str, &M),
        (theirs_name, theirs): (&str, Option<R>),
        counts: &[usize],
        root: usize,
    ) -> Result<Option<R>> {
        self.root(op, root)?;
        let total = check::v_counts(op, mine_name, mine.len(), counts, self.rank, self.size)?;
        let theirs = self.rooted(
            op,
            (mine_name, mine),
            (theirs_name, theirs, root),
            total,
            "the sum of counts",
        )?;
        self.counts_displs::<T>(op, counts)?;
        Ok(theirs)
    }

    /// `reduce_scatter`: the count of one block.
    pub(crate) fn reduce_scatter<T: Element, B: Buffer<T> + ?Sized, W: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        send: &B,
        recv: &W,
        red: ReduceOp,
    ) -> Result<usize> {
        check::check_op::<T>(op, red, self.backend)?;
        check::blocks_len(op, "send", send.len(), self.size, recv.len())?;
        self.both_placed(op, send, recv)?;
        self.count::<T>(op, send.len())?;
        self.count::<T>(op, recv.len())
    }

    /// `all_to_all`: the count of one block.
    pub(crate) fn all_to_all<T: Element, B: Buffer<T> + ?Sized, W: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        send: &B,
        recv: &W,
    ) -> Result<usize> {
        check::same_len(op, "send", send.len(), "recv", recv.len())?;
        let block = check::equal_blocks(op, "send", send.len(), self.size)?;
        self.both_placed(op, send, recv)?;
        self.count::<T>(op, send.len())?;
        self.count::<T>(op, block)
    }

    /// `all_to_all_v`: every count and displacement of both sides fits.
    pub(crate) fn all_to_all_v<T: Element, B: Buffer<T> + ?Sized, W: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        send: &B,
        send_counts: &[usize],
        recv: &W,
        recv_counts: &[usize],
    ) -> Result<()> {
        let s_total = check::counts(op, "send_counts", send_counts, self.size)?;
        let r_total = check::counts(op, "recv_counts", recv_counts, self.size)?;
        check::len_is(op, "send", send.len(), s_total, "the sum of send_counts")?;
        check::len_is(op, "recv", recv.len(), r_total, "the sum of recv_counts")?;
        self.both_placed(op, send, recv)?;
        self.counts_displs::<T>(op, send_counts)?;
        self.counts_displs::<T>(op, recv_counts)
    }

    /// `send` (`"destination"`) or `recv` (`"source"`): the count.
    pub(crate) fn point<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        what: &str,
        buf: &B,
        peer: usize,
        tag: Tag,
    ) -> Result<usize> {
        self.peer(op, what, peer, tag)?;
        self.placed(op, "buf", buf)?;
        self.count::<T>(op, buf.len())
    }

    /// `send_recv`: the send and receive counts. A message to this rank itself must fit exactly
    /// (Open MPI copies it locally and truncates silently).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_recv<T: Element, B: Buffer<T> + ?Sized, W: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        send: &B,
        dest: usize,
        recv: &W,
        source: usize,
        tag: Tag,
    ) -> Result<(usize, usize)> {
        self.peer(op, "destination", dest, tag)?;
        self.peer(op, "source", source, tag)?;
        if dest == self.rank && source == self.rank {
            check::same_len(
                op,
                "send (to this rank itself)",
                send.len(),
                "recv",
                recv.len(),
            )?;
        }
        self.both_placed(op, send, recv)?;
        Ok((
            self.count::<T>(op, send.len())?,
            self.count::<T>(op, recv.len())?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use num_complex::Complex;

    use super::*;
    use crate::error::Error;

    fn mpi(rank: usize, size: usize) -> Rules {
        Rules {
            backend: BackendKind::MpiHost,
            rank,
            size,
            device: None,
            limit: CountLimit::Elements(10),
            tag_ub: 100,
        }
    }

    #[test]
    fn wire_limits_count_lanes() {
        assert_eq!(CountLimit::WireValues(10).elements::<Complex<f32>>(), 5);
        assert_eq!(CountLimit::WireValues(10).elements::<f32>(), 10);
        assert_eq!(CountLimit::Elements(10).elements::<Complex<f32>>(), 10);
    }

    #[test]
    fn order_is_op_then_lengths_then_count() {
        let r = mpi(0, 2);
        let big = [0i32; 11];
        let small = [0i32; 3];
        // A bad reduce operation wins over a length mismatch.
        let e = r
            .all_reduce::<Complex<f32>, [Complex<f32>], [Complex<f32>]>(
                "all_reduce",
                &[Complex::new(0.0, 0.0)][..],
                &[][..],
                ReduceOp::Max,
            )
            .unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }));
        // A length mismatch wins over a count above the limit.
        let e = r
            .all_reduce::<i32, [i32], [i32]>("all_reduce", &big[..], &small[..], ReduceOp::Sum)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }));
        let e = r
            .all_reduce::<i32, [i32], [i32]>("all_reduce", &big[..], &big[..], ReduceOp::Sum)
            .unwrap_err();
        assert!(matches!(
            e,
            Error::CountOverflow {
                count: 11,
                limit: 10,
                ..
            }
        ));
    }

    #[test]
    fn displacements_against_the_limit() {
        let r = mpi(0, 3);
        let send = [0u8; 6];
        let recv = [0u8; 13];
        let e = r
            .all_gather_v::<u8, [u8], [u8]>("all_gather_v", &send[..], &recv[..], &[6, 6, 1])
            .unwrap_err();
        assert!(matches!(e, Error::CountOverflow { count: 12, .. }));
        // A displacement of exactly the limit fits; one past it does not.
        let recv = [0u8; 12];
        assert!(r
            .all_gather_v::<u8, [u8], [u8]>("all_gather_v", &send[..], &recv[..], &[6, 4, 2])
            .is_ok());
        let recv = [0u8; 11];
        let e = r
            .all_gather_v::<u8, [u8], [u8]>("all_gather_v", &[0u8; 10][..], &recv[..], &[10, 1, 0])
            .unwrap_err();
        assert!(matches!(e, Error::CountOverflow { count: 11, .. }));
    }

    #[test]
    fn root_buffers_only_on_the_root() {
        let r = mpi(1, 2);
        let send = [0u8; 2];
        let (n, recv) = r
            .reduce::<u8, [u8], [u8], &mut [u8]>("reduce", &send[..], None, ReduceOp::Sum, 0)
            .unwrap();
        assert_eq!((n, recv.is_none()), (2, true));
        let e = r
            .reduce::<u8, [u8], [u8], &mut [u8]>("reduce", &send[..], None, ReduceOp::Sum, 1)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }));
    }

    #[test]
    fn peers_and_tags() {
        let r = mpi(0, 2);
        assert!(r
            .point::<u8, [u8]>("send", "destination", &[0u8][..], 1, 100)
            .is_ok());
        assert!(r
            .point::<u8, [u8]>("send", "destination", &[0u8][..], 2, 0)
            .is_err());
        assert!(r
            .point::<u8, [u8]>("send", "destination", &[0u8][..], 1, 101)
            .is_err());
        let e = r
            .send_recv::<u8, [u8], [u8]>("send_recv", &[0u8; 2][..], 0, &[0u8; 3][..], 0, 0)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("itself")));
    }
}
