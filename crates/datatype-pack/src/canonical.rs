//! Canonicalization: named rewrite passes, run to a fixed point by [`canonicalize`].
//!
//! Every default pass preserves the packed byte sequence exactly: the same bytes, in the same
//! order. So two sides of a transfer may canonicalize independently and still agree on what a
//! packed buffer means.
//!
//! | pass | rewrite |
//! |---|---|
//! | [`collapse_empty`] | a layout with a zero count or zero extent anywhere becomes [`Type::empty`] |
//! | [`drop_unit_streams`] | a stream of count 1 vanishes; its offset moves to its child |
//! | [`hoist_offsets`] | all offsets are summed into the outermost node |
//! | [`fold_dense`] | `count` copies of a dense block of `e` bytes at stride `e` become one dense block |
//! | [`merge_streams`] | `[n1 x s1] [n2 x s2]` with `s1 == s2 * n2` becomes `[n1*n2 x s2]` |
//!
//! The canonical form of a non-empty layout is therefore: one offset (on the outermost node),
//! streams of count >= 2 of which no adjacent pair merges and the innermost does not fold into
//! the dense block, over one dense block. (A rewrite whose result would overflow is skipped, so
//! absurd hand-built layouts may keep a foldable level; the constructors never produce those.)
//! Layouts built differently but selecting the same bytes in the same order canonicalize
//! identically in the usual cases (subarrays, vectors, views); degenerate layouts with zero or
//! overlapping strides may keep different but equivalent forms.
//!
//! [`sort_by_stride`] is *not* a default pass: reordering stream levels keeps the set of bytes
//! but changes the order in which they are packed. Use it only when both ends of a transfer use
//! the same sorted plan (for example a packed buffer that is unpacked with the very same layout),
//! never when the other side packs with the original order (such as an MPI peer using the
//! datatype itself).

use crate::ir::{Chain, Level, Type};

/// A rewrite pass: takes a layout, returns one that packs the same bytes (in the same order, for
/// the default passes).
pub type Pass = fn(Type) -> Type;

/// A layout that selects no byte (a count of 0 or an extent of 0 anywhere) becomes the one empty
/// layout, [`Type::empty`].
pub fn collapse_empty(t: Type) -> Type {
    if t.is_empty() {
        Type::empty()
    } else {
        t
    }
}

/// Removes every stream of count 1, adding its offset to the node below it.
pub fn drop_unit_streams(t: Type) -> Type {
    let mut c = t.chain();
    // Walk innermost first so a removed stream's offset lands on the node below it.
    let mut kept_rev: Vec<Level> = Vec::with_capacity(c.streams.len());
    for &l in c.streams.iter().rev() {
        if l.count == 1 {
            let below = match kept_rev.last_mut() {
                Some(k) => &mut k.offset,
                None => &mut c.dense_offset,
            };
            if let Some(sum) = below.checked_add(l.offset) {
                *below = sum;
                continue;
            }
        }
        kept_rev.push(l);
    }
    kept_rev.reverse();
    c.streams = kept_rev;
    c.into_type()
}

/// Moves every offset to the outermost node, so the layout has one start offset.
pub fn hoist_offsets(t: Type) -> Type {
    let mut c = t.chain();
    let total: i128 =
        c.streams.iter().map(|l| i128::from(l.offset)).sum::<i128>() + i128::from(c.dense_offset);
    let Ok(total) = i64::try_from(total) else {
        return c.into_type();
    };
    for l in &mut c.streams {
        l.offset = 0;
    }
    c.dense_offset = 0;
    match c.streams.first_mut() {
        Some(l) => l.offset = total,
        None => c.dense_offset = total,
    }
    c.into_type()
}

/// Folds the innermost stream into the dense block when its stride equals the block's extent:
/// `[n x e] dense e` becomes `dense n*e`. Repeats while the new innermost stream folds too.
pub fn fold_dense(t: Type) -> Type {
    let mut c = t.chain();
    while let Some(&l) = c.streams.last() {
        let e = c.dense_extent;
        if e == 0 || i64::try_from(e) != Ok(l.stride) {
            break;
        }
        let (Some(ext), Some(off)) = (l.count.checked_mul(e), l.offset.checked_add(c.dense_offset))
        else {
            break;
        };
        c.dense_extent = ext;
        c.dense_offset = off;
        c.streams.pop();
    }
    c.into_type()
}

/// Merges adjacent stream levels `[n1 x s1] [n2 x s2]` with `s1 == s2 * n2` into one level
/// `[n1*n2 x s2]` (the outer stream just continues the inner one). Repeats until no adjacent pair
/// merges.
pub fn merge_streams(t: Type) -> Type {
    let mut c = t.chain();
    let streams = &mut c.streams;
    let mut i = streams.len();
    // Scan pairs (i-2, i-1) from the innermost outward; after a merge, recheck the same position.
    while i >= 2 {
        let (outer, inner) = (streams[i - 2], streams[i - 1]);
        let continues = i64::try_from(inner.count)
            .ok()
            .and_then(|n| inner.stride.checked_mul(n))
            .is_some_and(|span| span == outer.stride);
        match (
            continues,
            outer.count.checked_mul(inner.count),
            outer.offset.checked_add(inner.offset),
        ) {
            (true, Some(count), Some(offset)) => {
                streams[i - 2] = Level {
                    offset,
                    stride: inner.stride,
                    count,
                };
                streams.remove(i - 1);
                i = i.min(streams.len());
            }
            _ => i -= 1,
        }
    }
    c.into_type()
}

/// Reorders the stream levels so that strides grow outward (the innermost stream has the
/// smallest stride, by absolute value; equal strides keep their order), with all offsets
/// hoisted. The result selects the same bytes but **packs them in a different order**: see the
/// [module docs](self) for when that is allowed. Run [`canonicalize`] afterwards to merge the
/// levels the reordering made adjacent.
pub fn sort_by_stride(t: Type) -> Type {
    let mut c: Chain = t.chain();
    // Each level takes its own offset along: offsets only add up, in any order. Hoisting them
    // afterwards (when their sum fits) leaves the one offset on the new outermost node.
    c.streams
        .sort_by_key(|l| std::cmp::Reverse(l.stride.unsigned_abs()));
    hoist_offsets(c.into_type())
}

/// The default passes, in the order [`canonicalize`] applies them in one round.
pub const DEFAULT_PASSES: &[(&str, Pass)] = &[
    ("collapse_empty", collapse_empty),
    ("drop_unit_streams", drop_unit_streams),
    ("hoist_offsets", hoist_offsets),
    ("fold_dense", fold_dense),
    ("merge_streams", merge_streams),
];

/// Runs [`DEFAULT_PASSES`] until none changes the layout. Preserves the packed byte sequence.
pub fn canonicalize(t: Type) -> Type {
    let mut t = t;
    loop {
        let before = t.clone();
        for (_, pass) in DEFAULT_PASSES {
            t = pass(t);
        }
        if t == before {
            return t;
        }
    }
}

/// Whether `t` is already in canonical form (`canonicalize(t) == t`).
pub fn is_canonical(t: &Type) -> bool {
    canonicalize(t.clone()) == *t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(offset: i64, extent: u64) -> Type {
        Type::Dense { offset, extent }
    }

    fn s(offset: i64, stride: i64, count: u64, child: Type) -> Type {
        Type::Stream {
            offset,
            stride,
            count,
            child: Box::new(child),
        }
    }

    #[test]
    fn collapse_empty_cases() {
        assert_eq!(collapse_empty(s(5, 8, 0, d(3, 4))), Type::empty());
        assert_eq!(collapse_empty(s(5, 8, 3, d(3, 0))), Type::empty());
        assert_eq!(collapse_empty(d(7, 0)), Type::empty());
        let t = s(5, 8, 3, d(3, 4));
        assert_eq!(collapse_empty(t.clone()), t);
    }

    #[test]
    fn drop_unit_streams_folds_offsets_down() {
        assert_eq!(drop_unit_streams(s(5, 8, 1, d(3, 4))), d(8, 4));
        assert_eq!(
            drop_unit_streams(s(1, 100, 4, s(10, 8, 1, s(20, 2, 3, d(0, 1))))),
            s(1, 100, 4, s(30, 2, 3, d(0, 1)))
        );
        // Nested unit streams all vanish.
        assert_eq!(drop_unit_streams(s(1, 9, 1, s(2, 9, 1, d(4, 2)))), d(7, 2));
        // Nothing to do.
        let t = s(1, 100, 4, d(0, 1));
        assert_eq!(drop_unit_streams(t.clone()), t);
    }

    #[test]
    fn hoist_offsets_sums_into_the_top() {
        assert_eq!(
            hoist_offsets(s(1, 100, 4, s(-10, 8, 2, d(3, 1)))),
            s(-6, 100, 4, s(0, 8, 2, d(0, 1)))
        );
        assert_eq!(hoist_offsets(d(3, 1)), d(3, 1));
        // An unrepresentable sum leaves the layout alone.
        let t = s(i64::MAX, 1, 2, d(1, 1));
        assert_eq!(hoist_offsets(t.clone()), t);
    }

    #[test]
    fn fold_dense_cases() {
        assert_eq!(fold_dense(s(8, 4, 5, d(1, 4))), d(9, 20));
        // Folds repeatedly: [3 x 20] [5 x 4] dense 4 -> dense 60.
        assert_eq!(fold_dense(s(0, 20, 3, s(0, 4, 5, d(0, 4)))), d(0, 60));
        // Stride differs from the extent: no fold.
        let t = s(0, 8, 5, d(0, 4));
        assert_eq!(fold_dense(t.clone()), t);
        // Only the innermost stream is a candidate.
        let t = s(0, 4, 5, s(0, 16, 2, d(0, 4)));
        assert_eq!(fold_dense(t.clone()), t);
        // Negative stride equal in magnitude does not fold (it reverses the order).
        let t = s(0, -4, 5, d(0, 4));
        assert_eq!(fold_dense(t.clone()), t);
    }

    #[test]
    fn merge_streams_cases() {
        // [2 x 24] [3 x 8]: 24 == 8 * 3, one stream of 6 at stride 8.
        assert_eq!(
            merge_streams(s(1, 24, 2, s(2, 8, 3, d(0, 4)))),
            s(3, 8, 6, d(0, 4))
        );
        // Three levels merge into one.
        assert_eq!(
            merge_streams(s(0, 48, 2, s(0, 24, 2, s(0, 8, 3, d(0, 4))))),
            s(0, 8, 12, d(0, 4))
        );
        // Non-adjacent in memory: no merge.
        let t = s(0, 32, 2, s(0, 8, 3, d(0, 4)));
        assert_eq!(merge_streams(t.clone()), t);
        // Negative strides merge when they continue each other.
        assert_eq!(
            merge_streams(s(0, -24, 2, s(0, -8, 3, d(0, 4)))),
            s(0, -8, 6, d(0, 4))
        );
    }

    #[test]
    fn sort_by_stride_orders_and_keeps_the_offset() {
        let t = s(7, 8, 3, s(2, 24, 2, d(1, 4)));
        let sorted = sort_by_stride(t);
        assert_eq!(sorted, s(10, 24, 2, s(0, 8, 3, d(0, 4))));
        // Sorting then canonicalizing merges the now-adjacent levels.
        assert_eq!(canonicalize(sorted), s(10, 8, 6, d(0, 4)));
        assert_eq!(sort_by_stride(d(3, 2)), d(3, 2));
    }

    #[test]
    fn sort_by_stride_keeps_offsets_whose_sum_exceeds_i64() {
        // The bytes i64::MAX + 16 and i64::MAX + 19: the offsets cannot be hoisted into one.
        // Sorting moves the stride-3 level outward; its offset of 16 must come along (it was
        // once overwritten by the old outermost offset, giving a plan 16 bytes off).
        let t = s(i64::MAX, 0, 1, s(16, 3, 2, d(0, 1)));
        let sorted = sort_by_stride(t.clone());
        assert_eq!(sorted, s(16, 3, 2, s(i64::MAX, 0, 1, d(0, 1))));
        let first = i128::from(i64::MAX) + 16;
        assert_eq!(sorted.byte_range().unwrap(), Some(first..first + 4));
        assert_eq!(sorted.byte_range(), t.byte_range());
        // Such a layout starts beyond any u64 plan start: refused, not planned elsewhere.
        assert!(crate::plan::StridedBlock::from_type_sorted(&t).is_err());
        assert!(crate::plan::StridedBlock::from_type(&t).is_err());
    }

    #[test]
    fn canonicalize_reaches_a_fixed_point() {
        // [1 x _] [4 x 8] [1 x _] dense 8 with scattered offsets -> dense 32 at the summed offset.
        let t = s(3, 1000, 1, s(4, 8, 4, s(5, 77, 1, d(6, 8))));
        assert_eq!(canonicalize(t), d(18, 32));
        // Merge then fold: [2 x 24] [3 x 8] dense 8 -> dense 48.
        assert_eq!(canonicalize(s(0, 24, 2, s(0, 8, 3, d(0, 8)))), d(0, 48));
        // Merge enabled by a dropped unit stream in between.
        assert_eq!(
            canonicalize(s(0, 24, 2, s(0, 5, 1, s(0, 8, 3, d(0, 4))))),
            s(0, 8, 6, d(0, 4))
        );
        assert_eq!(canonicalize(s(9, 8, 0, d(0, 4))), Type::empty());
        let c = s(16, 64, 3, d(0, 8));
        assert!(is_canonical(&c));
        assert!(!is_canonical(&s(0, 64, 3, d(16, 8))));
    }
}
