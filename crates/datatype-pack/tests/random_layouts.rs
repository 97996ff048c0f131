//! Random nested layouts: the canonical plan packs exactly what the naive tree walk packs,
//! unpack inverts pack, and layouts that reach outside their buffers are refused. Vectors,
//! views and hvectors take negative strides as well as positive ones: their plans have reversed
//! dimensions and must pack in the layout's order (MPI_Pack's) all the same.

use datatype_pack::canonical::{canonicalize, is_canonical};
use datatype_pack::construct::{contiguous, from_strides, hvector, subarray, vector, Order};
use datatype_pack::{cpu, Buffer, Error, StridedBlock, Type};
use proptest::prelude::*;

/// How a random layout is built; kept so a failing case prints its construction.
#[derive(Debug, Clone)]
enum Recipe {
    Contiguous {
        elem: u64,
        count: u64,
    },
    Vector {
        count: u64,
        blocklen: u64,
        stride: i64,
        elem: u64,
    },
    Subarray {
        sizes: Vec<u64>,
        subsizes: Vec<u64>,
        starts: Vec<u64>,
        order: Order,
        elem: u64,
    },
    View {
        shape: Vec<usize>,
        strides: Vec<isize>,
        elem: usize,
    },
    Hvector {
        count: u64,
        blocklen: u64,
        stride: i64,
        child: Box<Recipe>,
    },
    Displace {
        by: i64,
        child: Box<Recipe>,
    },
}

impl Recipe {
    fn build(&self) -> Type {
        match self {
            Recipe::Contiguous { elem, count } => contiguous(*elem, *count).unwrap(),
            Recipe::Vector {
                count,
                blocklen,
                stride,
                elem,
            } => vector(*count, *blocklen, *stride, *elem).unwrap(),
            Recipe::Subarray {
                sizes,
                subsizes,
                starts,
                order,
                elem,
            } => subarray(sizes, subsizes, starts, *order, *elem).unwrap(),
            Recipe::View {
                shape,
                strides,
                elem,
            } => from_strides(shape, strides, *elem).unwrap(),
            Recipe::Hvector {
                count,
                blocklen,
                stride,
                child,
            } => hvector(*count, *blocklen, *stride, child.build()).unwrap(),
            Recipe::Displace { by, child } => child.build().displaced(*by).unwrap(),
        }
    }
}

fn elem() -> impl Strategy<Value = u64> {
    proptest::sample::select(&[1u64, 2, 3, 4, 8, 16][..])
}

/// A count in `0..max`, zero only now and then (a zero anywhere empties the whole layout).
fn count(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0), 15 => 1..max]
}

fn subarray_recipe() -> impl Strategy<Value = Recipe> {
    let dim = (1u64..=4)
        .prop_flat_map(|size| (Just(size), count(size + 1)))
        .prop_flat_map(|(size, sub)| (Just(size), Just(sub), 0..=size - sub));
    (
        proptest::collection::vec(dim, 1..=3),
        prop_oneof![Just(Order::C), Just(Order::Fortran)],
        elem(),
    )
        .prop_map(|(dims, order, elem)| Recipe::Subarray {
            sizes: dims.iter().map(|d| d.0).collect(),
            subsizes: dims.iter().map(|d| d.1).collect(),
            starts: dims.iter().map(|d| d.2).collect(),
            order,
            elem,
        })
}

fn leaf() -> impl Strategy<Value = Recipe> {
    prop_oneof![
        (elem(), count(6)).prop_map(|(elem, count)| Recipe::Contiguous { elem, count }),
        (count(5), count(4), -8i64..8, elem()).prop_map(|(count, blocklen, stride, elem)| {
            Recipe::Vector {
                count,
                blocklen,
                stride,
                elem,
            }
        }),
        subarray_recipe(),
        (
            proptest::collection::vec((count(4).prop_map(|n| n as usize), -10isize..10), 0..=3),
            1usize..=8
        )
            .prop_map(|(dims, elem)| Recipe::View {
                shape: dims.iter().map(|d| d.0).collect(),
                strides: dims.iter().map(|d| d.1).collect(),
                elem,
            }),
    ]
}

/// Trees of depth 1 to 4: a leaf constructor under up to three hvector / displacement levels.
fn recipe() -> impl Strategy<Value = Recipe> {
    prop_oneof![1 => leaf(), 4 => nested()]
}

fn nested() -> impl Strategy<Value = Recipe> {
    leaf().prop_recursive(3, 16, 1, |inner| {
        prop_oneof![
            (count(4), 1u64..3, -160i64..160, inner.clone()).prop_map(
                |(count, blocklen, stride, child)| Recipe::Hvector {
                    count,
                    blocklen,
                    stride,
                    child: Box::new(child),
                }
            ),
            (-24i64..40, inner).prop_map(|(by, child)| Recipe::Displace {
                by,
                child: Box::new(child),
            }),
        ]
    })
}

/// A layout built from a random recipe, moved so that its lowest byte is at `lead`, with a
/// source buffer `tail` bytes longer than it needs.
fn placed() -> impl Strategy<Value = (Recipe, Type, Vec<u8>)> {
    (recipe(), 0i64..17, 0usize..9, any::<u64>()).prop_map(|(r, lead, tail, seed)| {
        let t = r.build();
        let t = match t.byte_range().unwrap() {
            Some(range) => t.displaced(lead - range.start as i64).unwrap(),
            None => t,
        };
        let end = t.byte_range().unwrap().map_or(0, |r| r.end as usize);
        let src = bytes(end + tail, seed);
        (r, t, src)
    })
}

fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Which bytes of a buffer of `len` bytes the layout selects, by the naive walk.
fn mask(t: &Type, len: usize) -> Vec<bool> {
    let n = t.packed_size().unwrap() as usize;
    let mut m = vec![0u8; len];
    cpu::unpack_naive(t, &vec![1u8; n], &mut m).unwrap();
    m.into_iter().map(|b| b == 1).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// The canonical plan packs exactly the bytes the naive walk of the original tree packs, and
    /// canonicalization keeps size and bounds and reaches a fixed point.
    #[test]
    fn canonical_pack_equals_naive_pack((_recipe, t, src) in placed()) {
        let canon = canonicalize(t.clone());
        prop_assert!(is_canonical(&canon));
        prop_assert!(canon.depth() <= t.depth());
        prop_assert_eq!(canon.packed_size().unwrap(), t.packed_size().unwrap());
        prop_assert_eq!(canon.byte_range().unwrap(), t.byte_range().unwrap());

        let n = t.packed_size().unwrap() as usize;
        let mut want = vec![0u8; n];
        prop_assert_eq!(cpu::pack_naive(&t, &src, &mut want).unwrap(), n as u64);

        let plan = StridedBlock::from_type(&t).unwrap();
        prop_assert_eq!(plan.packed_size(), n as u64);
        prop_assert_eq!(
            plan.extent_end(),
            t.byte_range().unwrap().map_or(0, |r| r.end as u64)
        );
        let mut got = vec![0u8; n];
        prop_assert_eq!(cpu::pack(&plan, &src, &mut got).unwrap(), n as u64);
        prop_assert_eq!(&got, &want);

        // Through the type directly, and through the un-canonicalized plan.
        let mut via_type = vec![0u8; n];
        cpu::pack(&t, &src, &mut via_type).unwrap();
        prop_assert_eq!(&via_type, &want);
        let mut via_lower = vec![0u8; n];
        cpu::pack(&StridedBlock::lower(&t).unwrap(), &src, &mut via_lower).unwrap();
        prop_assert_eq!(&via_lower, &want);
    }

    /// unpack(pack(x)) restores exactly the selected bytes and leaves every other byte alone,
    /// for the canonical plan, the stride-sorted plan and the naive pair.
    #[test]
    fn unpack_inverts_pack((_recipe, t, src) in placed(), seed in any::<u64>()) {
        let selected = mask(&t, src.len());
        let before = bytes(src.len(), seed ^ 0x5555);
        let expect: Vec<u8> = (0..src.len())
            .map(|i| if selected[i] { src[i] } else { before[i] })
            .collect();
        let n = t.packed_size().unwrap() as usize;

        for plan in [
            StridedBlock::from_type(&t).unwrap(),
            StridedBlock::from_type_sorted(&t).unwrap(),
        ] {
            let mut packed = vec![0u8; n];
            cpu::pack(&plan, &src, &mut packed).unwrap();
            let mut dst = before.clone();
            prop_assert_eq!(cpu::unpack(&plan, &packed, &mut dst).unwrap(), n as u64);
            prop_assert_eq!(&dst, &expect);
        }

        let mut packed = vec![0u8; n];
        cpu::pack_naive(&t, &src, &mut packed).unwrap();
        let mut dst = before.clone();
        cpu::unpack_naive(&t, &packed, &mut dst).unwrap();
        prop_assert_eq!(&dst, &expect);
    }

    /// A strided buffer one or more bytes too short, a layout starting before its buffer, or a
    /// packed buffer too short: refused with the numbers, before any byte is written.
    #[test]
    fn reaching_outside_is_an_error((_recipe, t, src) in placed(), cut in 1usize..8, shift in 1i64..8) {
        let Some(range) = t.byte_range().unwrap() else {
            return Ok(());
        };
        let (first, end) = (range.start, range.end);
        let n = t.packed_size().unwrap() as usize;
        let plan = StridedBlock::from_type(&t).unwrap();

        // Strided buffer too short.
        let short = &src[..(end as usize).saturating_sub(cut)];
        let mut dst = vec![0xEEu8; n];
        let want = Error::OutOfBounds { op: "pack", buffer: Buffer::Source, first, end, len: short.len() };
        prop_assert_eq!(cpu::pack(&t, short, &mut dst), Err(want.clone()));
        prop_assert_eq!(cpu::pack(&plan, short, &mut dst), Err(want));
        prop_assert_eq!(
            cpu::pack_naive(&t, short, &mut dst),
            Err(Error::OutOfBounds { op: "pack_naive", buffer: Buffer::Source, first, end, len: short.len() })
        );
        prop_assert!(dst.iter().all(|&b| b == 0xEE));
        let mut short_dst = short.to_vec();
        prop_assert_eq!(
            cpu::unpack(&plan, &vec![0u8; n], &mut short_dst),
            Err(Error::OutOfBounds { op: "unpack", buffer: Buffer::Destination, first, end, len: short.len() })
        );
        prop_assert!(cpu::unpack_naive(&t, &vec![0u8; n], &mut short_dst).is_err());
        prop_assert_eq!(&short_dst[..], short);

        // Starting before the buffer.
        let before = t.clone().displaced(-first as i64 - shift).unwrap();
        let mut dst = vec![0xEEu8; n];
        let err = cpu::pack(&before, &src, &mut dst).unwrap_err();
        prop_assert!(
            matches!(err, Error::OutOfBounds { first, .. } if first == -i128::from(shift)),
            "{err:?}"
        );
        let naive = cpu::pack_naive(&before, &src, &mut dst);
        prop_assert!(matches!(naive, Err(Error::OutOfBounds { .. })), "{:?}", naive);
        prop_assert!(dst.iter().all(|&b| b == 0xEE));

        // Packed buffer too short.
        if n > 0 {
            let mut dst = vec![0xEEu8; n - 1];
            let want = Error::BufferTooSmall {
                op: "pack",
                buffer: Buffer::Destination,
                needed: n as u64,
                len: n - 1,
            };
            prop_assert_eq!(cpu::pack(&plan, &src, &mut dst), Err(want));
            let naive = cpu::pack_naive(&t, &src, &mut dst);
            prop_assert!(matches!(naive, Err(Error::BufferTooSmall { .. })), "{:?}", naive);
            prop_assert!(dst.iter().all(|&b| b == 0xEE));
            let mut out = src.clone();
            prop_assert_eq!(
                cpu::unpack(&plan, &vec![0u8; n - 1], &mut out),
                Err(Error::BufferTooSmall { op: "unpack", buffer: Buffer::Source, needed: n as u64, len: n - 1 })
            );
            prop_assert_eq!(&out, &src);
        }
    }

    /// The word size divides every offset a packer forms, from buffers aligned as it was told.
    #[test]
    fn word_size_divides_every_offset((_recipe, t, _src) in placed(), a in 0u32..6, b in 0u32..6) {
        let plan = StridedBlock::from_type(&t).unwrap();
        let (sa, da) = (1u64 << a, 1u64 << b);
        let w = u64::from(plan.word_size(sa, da));
        prop_assert!(w.is_power_of_two() && w <= 16);
        prop_assert!(w <= sa && w <= da);
        prop_assert_eq!(plan.block_len() % w, 0);
        prop_assert_eq!(plan.start() % w, 0);
        for (&c, &s) in plan.counts().iter().zip(plan.strides()) {
            if c > 1 {
                prop_assert_eq!(s % w, 0);
            }
        }
    }
}

#[test]
fn naive_reports_the_same_bounds_as_pack_for_a_known_layout() {
    // A displaced subarray whose lowest byte lies before the buffer: both packers report the
    // same range.
    let t = subarray(&[4, 4], &[2, 2], &[1, 1], Order::C, 2)
        .unwrap()
        .displaced(-12)
        .unwrap();
    let mut dst = [0u8; 8];
    let e1 = cpu::pack(&t, &[0u8; 32], &mut dst).unwrap_err();
    let e2 = cpu::pack_naive(&t, &[0u8; 32], &mut dst).unwrap_err();
    assert!(
        matches!(
            e1,
            Error::OutOfBounds {
                first: -2,
                end: 10,
                len: 32,
                ..
            }
        ),
        "{e1:?}"
    );
    assert!(
        matches!(
            e2,
            Error::OutOfBounds {
                first: -2,
                end: 10,
                len: 32,
                ..
            }
        ),
        "{e2:?}"
    );
}
