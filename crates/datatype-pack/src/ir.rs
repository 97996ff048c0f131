//! The stride IR: a layout as a chain of strided streams over one dense block, in bytes.
//!
//! A [`Type`] describes which bytes of a buffer a layout selects, and in which order they are
//! packed. It is relative to a *base*: byte 0 of the buffer the layout is applied to.
//!
//! * `Dense { offset, extent }` at base `b` selects the bytes `b + offset .. b + offset + extent`,
//!   in address order.
//! * `Stream { offset, stride, count, child }` at base `b` selects `child` at the bases
//!   `b + offset + i * stride` for `i = 0, 1, .., count - 1`, in that order.
//!
//! The packed form of a layout is the concatenation of its selected bytes in that order. Each
//! `Stream` has exactly one child, so every `Type` is a chain: zero or more streams (outermost
//! first) over one dense block.
//!
//! Offsets and strides are signed (`i64`) so that views and MPI vectors with negative strides
//! can be described: a stream with a negative stride packs its copies from the highest address
//! down, copy 0 first, as `MPI_Pack` packs a vector with a negative stride. Every packer handles
//! them; a [`StridedBlock`](crate::plan::StridedBlock) carries them as reversed dimensions (see
//! [`crate::plan`]).

use std::fmt;
use std::ops::Range;

use crate::error::{overflow, Result};

/// A layout in bytes: strided streams over a dense block. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Type {
    /// `extent` contiguous bytes starting `offset` bytes after the base.
    Dense {
        /// Bytes from the base to the first selected byte.
        offset: i64,
        /// Number of contiguous bytes selected.
        extent: u64,
    },
    /// `count` copies of `child`, the `i`-th at `offset + i * stride` bytes after the base.
    Stream {
        /// Bytes from the base to the base of the first copy of `child`.
        offset: i64,
        /// Bytes between the bases of consecutive copies of `child`.
        stride: i64,
        /// Number of copies of `child`.
        count: u64,
        /// The layout repeated by this stream.
        child: Box<Type>,
    },
}

impl Type {
    /// `extent` contiguous bytes at offset 0.
    pub fn dense(extent: u64) -> Self {
        Type::Dense { offset: 0, extent }
    }

    /// `count` copies of `child`, `stride` bytes apart, at offset 0.
    pub fn stream(count: u64, stride: i64, child: Type) -> Self {
        Type::Stream {
            offset: 0,
            stride,
            count,
            child: Box::new(child),
        }
    }

    /// The empty layout (selects no byte). Every empty layout canonicalizes to this one.
    pub fn empty() -> Self {
        Type::Dense {
            offset: 0,
            extent: 0,
        }
    }

    /// This node's own offset (not including those of its descendants).
    pub fn offset(&self) -> i64 {
        match self {
            Type::Dense { offset, .. } | Type::Stream { offset, .. } => *offset,
        }
    }

    /// This layout with its top-level offset replaced by `offset`.
    #[must_use]
    pub fn with_offset(mut self, new_offset: i64) -> Self {
        match &mut self {
            Type::Dense { offset, .. } | Type::Stream { offset, .. } => *offset = new_offset,
        }
        self
    }

    /// This layout moved by `delta` bytes (its top-level offset increased by `delta`).
    ///
    /// # Errors
    /// [`Error::Overflow`](crate::Error::Overflow) if the new offset does not fit an `i64`.
    pub fn displaced(self, delta: i64) -> Result<Self> {
        let new = self
            .offset()
            .checked_add(delta)
            .ok_or_else(|| overflow("displaced", format!("offset {} + {delta}", self.offset())))?;
        Ok(self.with_offset(new))
    }

    /// Number of stream levels above the dense block.
    pub fn depth(&self) -> usize {
        let mut t = self;
        let mut d = 0;
        while let Type::Stream { child, .. } = t {
            d += 1;
            t = child;
        }
        d
    }

    /// Whether the layout selects no byte (a zero count or a zero extent anywhere in the chain).
    pub fn is_empty(&self) -> bool {
        match self {
            Type::Dense { extent, .. } => *extent == 0,
            Type::Stream { count, child, .. } => *count == 0 || child.is_empty(),
        }
    }

    /// The sum of the offsets of every node of the chain: where the first selected byte lies
    /// relative to the base (for a non-empty layout).
    ///
    /// # Errors
    /// [`Error::Overflow`](crate::Error::Overflow) if the sum does not fit an `i64`.
    pub fn total_offset(&self) -> Result<i64> {
        let mut t = self;
        let mut sum = 0i64;
        loop {
            sum = sum
                .checked_add(t.offset())
                .ok_or_else(|| overflow("total_offset", "sum of offsets exceeds i64"))?;
            match t {
                Type::Dense { .. } => return Ok(sum),
                Type::Stream { child, .. } => t = child,
            }
        }
    }

    /// Number of bytes the layout packs into (bytes selected, counted with multiplicity); 0 for
    /// an empty layout, however large the layout under a zero count.
    ///
    /// # Errors
    /// [`Error::Overflow`](crate::Error::Overflow) if the size does not fit a `u64`.
    pub fn packed_size(&self) -> Result<u64> {
        match self {
            Type::Dense { extent, .. } => Ok(*extent),
            // Nothing below a zero count is selected: its size, even one beyond u64, is moot.
            Type::Stream { count: 0, .. } => Ok(0),
            Type::Stream { count, child, .. } => {
                let c = child.packed_size()?;
                count
                    .checked_mul(c)
                    .ok_or_else(|| overflow("packed_size", format!("{count} x {c} bytes")))
            }
        }
    }

    /// The half-open range of bytes, relative to the base, from the lowest to one past the
    /// highest byte the layout touches; `None` for an empty layout. Negative strides and offsets
    /// are accounted for, so the range may start below zero.
    ///
    /// # Errors
    /// [`Error::Overflow`](crate::Error::Overflow) if a bound does not fit an `i128` (only for
    /// absurd hand-built layouts; the constructors keep bounds within `i64`).
    pub fn byte_range(&self) -> Result<Option<Range<i128>>> {
        let of = || overflow("byte_range", "layout bounds exceed i128");
        match self {
            Type::Dense { offset, extent } => {
                if *extent == 0 {
                    return Ok(None);
                }
                let lo = i128::from(*offset);
                Ok(Some(lo..lo + i128::from(*extent)))
            }
            Type::Stream {
                offset,
                stride,
                count,
                child,
            } => {
                if *count == 0 {
                    return Ok(None);
                }
                let Some(r) = child.byte_range()? else {
                    return Ok(None);
                };
                let span = i128::from(count - 1)
                    .checked_mul(i128::from(*stride))
                    .ok_or_else(of)?;
                let (lo_add, hi_add) = if span < 0 { (span, 0) } else { (0, span) };
                let o = i128::from(*offset);
                let lo = r
                    .start
                    .checked_add(o)
                    .and_then(|v| v.checked_add(lo_add))
                    .ok_or_else(of)?;
                let hi = r
                    .end
                    .checked_add(o)
                    .and_then(|v| v.checked_add(hi_add))
                    .ok_or_else(of)?;
                Ok(Some(lo..hi))
            }
        }
    }

    /// The true extent: the length of [`byte_range`](Self::byte_range), 0 for an empty layout.
    ///
    /// This is what MPI calls the extent of a datatype that has no explicit lower/upper bound
    /// markers and no alignment padding; [`crate::construct::hvector`] places the copies of a
    /// block this far apart.
    ///
    /// # Errors
    /// [`Error::Overflow`](crate::Error::Overflow) if the extent does not fit a `u64`.
    pub fn true_extent(&self) -> Result<u64> {
        match self.byte_range()? {
            None => Ok(0),
            Some(r) => u64::try_from(r.end - r.start)
                .map_err(|_| overflow("true_extent", "extent exceeds u64")),
        }
    }

    /// The chain flattened: its stream levels, outermost first, and its dense block.
    pub fn chain(&self) -> Chain {
        let mut t = self;
        let mut streams = Vec::new();
        loop {
            match t {
                Type::Dense { offset, extent } => {
                    return Chain {
                        streams,
                        dense_offset: *offset,
                        dense_extent: *extent,
                    }
                }
                Type::Stream {
                    offset,
                    stride,
                    count,
                    child,
                } => {
                    streams.push(Level {
                        offset: *offset,
                        stride: *stride,
                        count: *count,
                    });
                    t = child;
                }
            }
        }
    }
}

/// One stream level of a [`Chain`]: `count` copies of what lies below, `stride` bytes apart,
/// the first at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Level {
    /// Bytes from the base to the first copy.
    pub offset: i64,
    /// Bytes between consecutive copies.
    pub stride: i64,
    /// Number of copies.
    pub count: u64,
}

impl Level {
    /// A level at offset 0.
    pub fn new(stride: i64, count: u64) -> Self {
        Level {
            offset: 0,
            stride,
            count,
        }
    }
}

/// A [`Type`] flattened into a list: stream levels (outermost first) over a dense block.
/// [`Type::chain`] and [`Chain::into_type`] convert losslessly.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Chain {
    /// The stream levels, outermost first.
    pub streams: Vec<Level>,
    /// The dense block's offset.
    pub dense_offset: i64,
    /// The dense block's extent in bytes.
    pub dense_extent: u64,
}

impl Chain {
    /// Rebuilds the [`Type`] this chain describes.
    pub fn into_type(self) -> Type {
        let mut t = Type::Dense {
            offset: self.dense_offset,
            extent: self.dense_extent,
        };
        for l in self.streams.into_iter().rev() {
            t = Type::Stream {
                offset: l.offset,
                stride: l.stride,
                count: l.count,
                child: Box::new(t),
            };
        }
        t
    }
}

impl fmt::Display for Type {
    /// A one-line form, outermost first: `+8 [4 x 64] [3 x 8] dense 16`, where `+o` is a
    /// non-zero offset and `[n x s]` a stream of `n` copies with stride `s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = self;
        let mut first = true;
        loop {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            if t.offset() != 0 {
                write!(f, "{:+} ", t.offset())?;
            }
            match t {
                Type::Dense { extent, .. } => return write!(f, "dense {extent}"),
                Type::Stream {
                    stride,
                    count,
                    child,
                    ..
                } => {
                    write!(f, "[{count} x {stride}]")?;
                    t = child;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ranges() {
        let t = Type::stream(3, 16, Type::dense(4)).with_offset(8);
        assert_eq!(t.packed_size().unwrap(), 12);
        assert_eq!(t.byte_range().unwrap(), Some(8..8 + 32 + 4));
        assert_eq!(t.true_extent().unwrap(), 36);
        assert_eq!(t.depth(), 1);
        assert_eq!(t.total_offset().unwrap(), 8);
        assert!(!t.is_empty());
    }

    #[test]
    fn negative_stride_range() {
        let t = Type::stream(3, -16, Type::dense(4)).with_offset(100);
        assert_eq!(t.byte_range().unwrap(), Some(68..104));
    }

    #[test]
    fn empty_layouts() {
        assert!(Type::empty().is_empty());
        assert_eq!(Type::empty().byte_range().unwrap(), None);
        let t = Type::stream(0, 16, Type::dense(4));
        assert!(t.is_empty());
        assert_eq!(t.packed_size().unwrap(), 0);
        assert_eq!(t.true_extent().unwrap(), 0);
        let t = Type::stream(5, 16, Type::dense(0));
        assert!(t.is_empty());
        assert_eq!(t.byte_range().unwrap(), None);
    }

    #[test]
    fn packed_size_overflow_is_an_error() {
        let t = Type::stream(u64::MAX, 0, Type::dense(2));
        assert!(matches!(
            t.packed_size(),
            Err(crate::Error::Overflow { .. })
        ));
    }

    #[test]
    fn an_empty_layout_packs_nothing_even_over_an_oversized_child() {
        // 2^62 x 8 bytes overflows u64, but under a zero count nothing is selected.
        let huge = Type::stream(1 << 62, 0, Type::stream(8, 0, Type::dense(1)));
        assert!(huge.packed_size().is_err());
        let t = Type::stream(0, 0, huge.clone());
        assert!(t.is_empty());
        assert_eq!(t.packed_size(), Ok(0));
        assert_eq!(Type::stream(3, 8, t.clone()).packed_size(), Ok(0));
        assert_eq!(
            Type::stream(1 << 62, 8, Type::stream(1 << 62, 8, t)).packed_size(),
            Ok(0)
        );
    }

    #[test]
    fn chain_round_trip_and_display() {
        let t =
            Type::stream(4, 64, Type::stream(3, 8, Type::dense(2)).with_offset(-2)).with_offset(8);
        let c = t.chain();
        assert_eq!(
            c.streams,
            vec![
                Level {
                    offset: 8,
                    stride: 64,
                    count: 4
                },
                Level {
                    offset: -2,
                    stride: 8,
                    count: 3
                }
            ]
        );
        assert_eq!((c.dense_offset, c.dense_extent), (0, 2));
        assert_eq!(c.into_type(), t);
        assert_eq!(t.to_string(), "+8 [4 x 64] -2 [3 x 8] dense 2");
    }

    #[test]
    fn displaced_checks_overflow() {
        assert_eq!(Type::dense(1).displaced(5).unwrap().offset(), 5);
        assert!(Type::dense(1).with_offset(i64::MAX).displaced(1).is_err());
    }
}
