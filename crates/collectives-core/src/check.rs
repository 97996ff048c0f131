//! Argument rules shared by every backend, as functions of lengths and ranks.
//!
//! Each function returns [`Error::InvalidArgument`] with the numbers. The crate's rules table
//! composes them into each operation's rules, which every backend's operations pass before any
//! library call, in every build.

use crate::element::Element;
use crate::error::{Error, Result};
use crate::memory::Buffer;
use crate::op::{refusal, BackendKind, ReduceOp};

/// `root` (or a peer) must be a rank of the communicator.
///
/// # Errors
/// [`Error::InvalidArgument`] when `rank >= size`.
pub fn rank_in_range(op: &'static str, what: &str, rank: usize, size: usize) -> Result<()> {
    if rank < size {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("{what} {rank} is out of range for a communicator of {size} ranks"),
        ))
    }
}

/// Two buffers of equal length.
///
/// # Errors
/// [`Error::InvalidArgument`] when `a != b`.
pub fn same_len(op: &'static str, a_name: &str, a: usize, b_name: &str, b: usize) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("{a_name} has {a} elements but {b_name} has {b}; they must be equal"),
        ))
    }
}

/// A buffer holding `size` blocks of `block` elements: `len == size * block`.
///
/// # Errors
/// [`Error::InvalidArgument`] when the length differs (or the product overflows).
pub fn blocks_len(
    op: &'static str,
    name: &str,
    len: usize,
    size: usize,
    block: usize,
) -> Result<()> {
    match size.checked_mul(block) {
        Some(n) if n == len => Ok(()),
        _ => Err(Error::invalid(
            op,
            format!("{name} has {len} elements; it must hold {size} ranks x {block} elements"),
        )),
    }
}

/// A buffer of `size` equal blocks: `len` divisible by `size`. Returns the block length.
///
/// # Errors
/// [`Error::InvalidArgument`] when `len % size != 0`.
pub fn equal_blocks(op: &'static str, name: &str, len: usize, size: usize) -> Result<usize> {
    if size > 0 && len % size == 0 {
        Ok(len / size)
    } else {
        Err(Error::invalid(
            op,
            format!("{name} has {len} elements, not a multiple of the {size} ranks"),
        ))
    }
}

/// A counts array: one entry per rank; returns the sum.
///
/// # Errors
/// [`Error::InvalidArgument`] when `counts.len() != size` or the sum overflows.
pub fn counts(op: &'static str, name: &str, counts: &[usize], size: usize) -> Result<usize> {
    if counts.len() != size {
        return Err(Error::invalid(
            op,
            format!(
                "{name} has {} entries; it needs one per rank ({size})",
                counts.len()
            ),
        ));
    }
    counts
        .iter()
        .try_fold(0usize, |acc, &c| acc.checked_add(c))
        .ok_or_else(|| Error::invalid(op, format!("the sum of {name} overflows")))
}

/// A buffer that must hold exactly `expected` elements, as a counts array says.
///
/// # Errors
/// [`Error::InvalidArgument`] when `len != expected`.
pub fn len_is(
    op: &'static str,
    name: &str,
    len: usize,
    expected: usize,
    because: &str,
) -> Result<()> {
    if len == expected {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("{name} has {len} elements but {because} is {expected}"),
        ))
    }
}

/// The buffer the root must pass.
///
/// # Errors
/// [`Error::InvalidArgument`] when it is `None`.
pub fn root_buffer<B>(op: &'static str, name: &str, buf: Option<B>) -> Result<B> {
    buf.ok_or_else(|| Error::invalid(op, format!("the root must pass a {name} buffer")))
}

/// A buffer (or stream) `name` on device `theirs` used with a communicator on device `mine`.
///
/// # Errors
/// [`Error::InvalidArgument`] when the two differ.
pub fn same_device(op: &'static str, name: &str, theirs: usize, mine: usize) -> Result<()> {
    if theirs == mine {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("{name} is on device {theirs} but the communicator is on device {mine}"),
        ))
    }
}

/// A tag in `0..=tag_ub`.
///
/// # Errors
/// [`Error::InvalidArgument`] when it is negative or above `tag_ub`.
pub fn tag(op: &'static str, tag: i32, tag_ub: i32) -> Result<()> {
    if (0..=tag_ub).contains(&tag) {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("tag {tag} is outside 0..={tag_ub}"),
        ))
    }
}

/// Convert a count to a backend's count type, whose largest value is `limit`.
///
/// # Errors
/// [`Error::CountOverflow`] when `count > limit`.
pub fn count_fits(op: &'static str, count: usize, limit: usize) -> Result<usize> {
    if count <= limit {
        Ok(count)
    } else {
        Err(Error::CountOverflow { op, count, limit })
    }
}

/// A v-collective's counts on this rank: one per rank, this rank's own buffer (`mine`, called
/// `name`) holding `counts[rank]`; returns the sum.
///
/// # Errors
/// [`Error::InvalidArgument`] when the counts array has the wrong length, its sum overflows, or this
/// rank's buffer does not hold its count.
pub fn v_counts(
    op: &'static str,
    name: &str,
    mine: usize,
    counts: &[usize],
    rank: usize,
    size: usize,
) -> Result<usize> {
    let total = self::counts(op, "counts", counts, size)?;
    len_is(op, name, mine, counts[rank], &format!("counts[{rank}]"))?;
    Ok(total)
}

/// The buffer only the root passes (a gather's receive buffer, a scatter's send buffer): on the
/// root it must be there and hold `expected` elements; elsewhere it is ignored (`None`).
///
/// # Errors
/// [`Error::InvalidArgument`] when the root passes none or one of another length.
pub fn at_root<T: Element, B: Buffer<T> + ?Sized, R: std::ops::Deref<Target = B>>(
    op: &'static str,
    name: &str,
    is_root: bool,
    buf: Option<R>,
    expected: usize,
    because: &str,
) -> Result<Option<R>> {
    if !is_root {
        return Ok(None);
    }
    let buf = root_buffer(op, name, buf)?;
    len_is(op, name, buf.len(), expected, because)?;
    Ok(Some(buf))
}

/// Check that `op` can reduce elements of type `T` on `backend`.
///
/// # Errors
/// [`Error::Unsupported`] naming the element, the operation, the backend and the reason.
pub fn check_op<T: Element>(
    op_name: &'static str,
    op: ReduceOp,
    backend: BackendKind,
) -> Result<()> {
    match refusal(T::KIND, op, backend) {
        None => Ok(()),
        Some(reason) => Err(Error::Unsupported {
            op: op_name,
            element: T::NAME,
            reduce_op: Some(op),
            backend,
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use num_complex::Complex;

    use super::*;

    fn msg(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::InvalidArgument { msg, .. }) => msg,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn device_rule() {
        assert!(same_device("x", "send", 1, 1).is_ok());
        assert_eq!(
            msg(same_device("x", "send", 1, 0)),
            "send is on device 1 but the communicator is on device 0"
        );
    }

    #[test]
    fn rank_rules() {
        assert!(rank_in_range("x", "root", 3, 4).is_ok());
        assert_eq!(
            msg(rank_in_range("x", "root", 4, 4)),
            "root 4 is out of range for a communicator of 4 ranks"
        );
    }

    #[test]
    fn length_rules_carry_the_numbers() {
        assert!(same_len("x", "send", 3, "recv", 3).is_ok());
        assert_eq!(
            msg(same_len("x", "send", 3, "recv", 4)),
            "send has 3 elements but recv has 4; they must be equal"
        );
        assert!(blocks_len("x", "recv", 12, 4, 3).is_ok());
        assert!(msg(blocks_len("x", "recv", 11, 4, 3)).contains("4 ranks x 3 elements"));
        assert!(blocks_len("x", "recv", 0, usize::MAX, 2).is_err());
        assert_eq!(equal_blocks("x", "send", 12, 4).unwrap(), 3);
        assert!(equal_blocks("x", "send", 13, 4).is_err());
        assert!(len_is("x", "send", 2, 2, "counts[1]").is_ok());
        assert!(msg(len_is("x", "send", 3, 2, "counts[1]")).contains("counts[1] is 2"));
    }

    #[test]
    fn counts_rules() {
        assert_eq!(counts("x", "counts", &[1, 0, 3], 3).unwrap(), 4);
        assert!(
            msg(counts("x", "counts", &[1, 2], 3)).contains("2 entries; it needs one per rank (3)")
        );
        assert!(counts("x", "counts", &[usize::MAX, 1], 2).is_err());
    }

    #[test]
    fn v_counts_and_root_buffers() {
        assert_eq!(v_counts("x", "send", 3, &[1, 3, 0], 1, 3).unwrap(), 4);
        assert!(msg(v_counts("x", "send", 2, &[1, 3, 0], 1, 3)).contains("counts[1] is 3"));
        assert!(msg(v_counts("x", "send", 1, &[1, 3], 0, 3)).contains("one per rank"));
        let mut buf = [0u8; 4];
        assert!(
            at_root::<u8, [u8], _>("x", "recv", false, None::<&mut [u8]>, 9, "nine")
                .unwrap()
                .is_none()
        );
        assert!(
            at_root::<u8, [u8], _>("x", "recv", true, Some(&mut buf[..]), 4, "four")
                .unwrap()
                .is_some()
        );
        assert!(msg(at_root::<u8, [u8], _>(
            "x",
            "recv",
            true,
            Some(&mut buf[..]),
            5,
            "five"
        ))
        .contains("but five is 5"));
        assert!(msg(at_root::<u8, [u8], _>(
            "x",
            "recv",
            true,
            None::<&mut [u8]>,
            5,
            "five"
        ))
        .contains("root must pass"));
    }

    #[test]
    fn tags_roots_and_count_limits() {
        assert!(tag("send", 0, 32767).is_ok());
        assert!(tag("send", -1, 32767).is_err());
        assert!(tag("send", 32768, 32767).is_err());
        assert!(root_buffer("gather", "receive", Some(1)).is_ok());
        assert!(msg(root_buffer::<u8>("gather", "receive", None))
            .contains("root must pass a receive buffer"));
        assert_eq!(count_fits("x", 5, 5).unwrap(), 5);
        assert_eq!(
            count_fits("x", 6, 5).unwrap_err(),
            Error::CountOverflow {
                op: "x",
                count: 6,
                limit: 5
            }
        );
    }

    #[test]
    fn complex_min_max_never() {
        for b in [
            BackendKind::MpiHost,
            BackendKind::MpiCuda,
            BackendKind::MpiStaged,
            BackendKind::Nccl,
        ] {
            for op in [ReduceOp::Min, ReduceOp::Max] {
                let err = check_op::<Complex<f64>>("all_reduce", op, b).unwrap_err();
                match err {
                    Error::Unsupported {
                        element,
                        reduce_op,
                        backend,
                        ..
                    } => {
                        assert_eq!(element, "complex<f64>");
                        assert_eq!(reduce_op, Some(op));
                        assert_eq!(backend, b);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }
}
