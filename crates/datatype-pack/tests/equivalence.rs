//! Equivalent constructions canonicalize identically (and so lower to the same plan).

use datatype_pack::canonical::canonicalize;
use datatype_pack::construct::{contiguous, from_strides, hvector, subarray, vector, Order};
use datatype_pack::{cpu, StridedBlock, Type};
use proptest::prelude::*;

const ELEMS: [u64; 6] = [1, 2, 3, 4, 8, 16];

/// `(size, subsize, start)` with `start + subsize <= size`, subsize at least 1.
fn dim(max: u64) -> impl Strategy<Value = (u64, u64, u64)> {
    (1..=max)
        .prop_flat_map(|size| (Just(size), 1..=size))
        .prop_flat_map(|(size, sub)| (Just(size), Just(sub), 0..=size - sub))
}

fn elem() -> impl Strategy<Value = u64> {
    proptest::sample::select(&ELEMS[..])
}

/// Asserts that two layouts canonicalize to the same form and pack the same bytes.
fn same(a: &Type, b: &Type) -> Result<(), TestCaseError> {
    let (ca, cb) = (canonicalize(a.clone()), canonicalize(b.clone()));
    prop_assert_eq!(&ca, &cb, "{} vs {}", a, b);
    prop_assert_eq!(
        StridedBlock::from_type(a).unwrap(),
        StridedBlock::from_type(b).unwrap()
    );
    // And the canonical form really is what both describe, byte for byte.
    let end = a.byte_range().unwrap().map_or(0, |r| r.end) as usize;
    let src: Vec<u8> = (0..end).map(|i| (i % 251) as u8).collect();
    let n = a.packed_size().unwrap() as usize;
    let (mut pa, mut pb) = (vec![0u8; n], vec![0u8; n]);
    cpu::pack_naive(a, &src, &mut pa).unwrap();
    cpu::pack_naive(b, &src, &mut pb).unwrap();
    prop_assert_eq!(pa, pb);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// A 3-D C-order subarray is a vector of rows repeated by an hvector over planes.
    #[test]
    fn subarray_3d_is_hvector_of_vector(
        (z, y, x) in (dim(6), dim(6), dim(6)),
        e in elem(),
    ) {
        let sizes = [z.0, y.0, x.0];
        let sub = subarray(&sizes, &[z.1, y.1, x.1], &[z.2, y.2, x.2], Order::C, e).unwrap();
        let plane = (y.0 * x.0 * e) as i64;
        let rows = vector(y.1, x.1, x.0 as i64, e).unwrap();
        let built = hvector(z.1, 1, plane, rows)
            .unwrap()
            .displaced(((z.2 * y.0 + y.2) * x.0 + x.2) as i64 * e as i64)
            .unwrap();
        same(&sub, &built)?;
    }

    /// Fortran order is C order with the dimensions reversed.
    #[test]
    fn subarray_fortran_is_reversed_c(
        dims in proptest::collection::vec(dim(5), 1..=4),
        e in elem(),
    ) {
        let sizes: Vec<u64> = dims.iter().map(|d| d.0).collect();
        let subs: Vec<u64> = dims.iter().map(|d| d.1).collect();
        let starts: Vec<u64> = dims.iter().map(|d| d.2).collect();
        let f = subarray(&sizes, &subs, &starts, Order::Fortran, e).unwrap();
        let rev = |v: &[u64]| v.iter().rev().copied().collect::<Vec<_>>();
        let c = subarray(&rev(&sizes), &rev(&subs), &rev(&starts), Order::C, e).unwrap();
        prop_assert_eq!(&f, &c);
        same(&f, &c)?;
    }

    /// A 2-D subarray is a displaced vector.
    #[test]
    fn subarray_2d_is_vector((r, c) in (dim(9), dim(9)), e in elem()) {
        let sub = subarray(&[r.0, c.0], &[r.1, c.1], &[r.2, c.2], Order::C, e).unwrap();
        let v = vector(r.1, c.1, c.0 as i64, e)
            .unwrap()
            .displaced(((r.2 * c.0 + c.2) * e) as i64)
            .unwrap();
        same(&sub, &v)?;
    }

    /// A plane of a 3-D array (one index fixed) is a 2-D subarray of the plane's own array.
    #[test]
    fn subarray_of_a_2d_plane((z, y, x) in (dim(6), dim(6), dim(6)), e in elem()) {
        let sizes = [z.0, y.0, x.0];
        // The plane z = z.2.
        let in3d = subarray(&sizes, &[1, y.1, x.1], &[z.2, y.2, x.2], Order::C, e).unwrap();
        let in2d = subarray(&[y.0, x.0], &[y.1, x.1], &[y.2, x.2], Order::C, e)
            .unwrap()
            .displaced((z.2 * y.0 * x.0 * e) as i64)
            .unwrap();
        same(&in3d, &in2d)?;
        // The plane y = y.2: rows of x.1 elements, one per z, a plane apart; as a 2-D array
        // whose rows are the planes.
        let in3d = subarray(&sizes, &[z.1, 1, x.1], &[z.2, y.2, x.2], Order::C, e).unwrap();
        let in2d = subarray(&[z.0, y.0 * x.0], &[z.1, x.1], &[z.2, y.2 * x.0 + x.2], Order::C, e)
            .unwrap();
        same(&in3d, &in2d)?;
        // The plane x = x.2: single elements, a row apart in y, a plane apart in z.
        let in3d = subarray(&sizes, &[z.1, y.1, 1], &[z.2, y.2, x.2], Order::C, e).unwrap();
        let built = hvector(z.1, 1, (y.0 * x.0 * e) as i64, vector(y.1, 1, x.0 as i64, e).unwrap())
            .unwrap()
            .displaced((((z.2 * y.0 + y.2) * x.0 + x.2) * e) as i64)
            .unwrap();
        same(&in3d, &built)?;
    }

    /// Contiguous data is a vector whose block length equals its stride, a full subarray, and
    /// a C-contiguous array view.
    #[test]
    fn contiguous_equivalents(n in 0u64..20, b in 1u64..20, e in elem()) {
        let c = contiguous(e, n * b).unwrap();
        same(&c, &vector(n, b, b as i64, e).unwrap())?;
        same(&c, &hvector(n, b, (b * e) as i64, Type::dense(e)).unwrap())?;
        if n > 0 {
            same(&c, &subarray(&[n, b], &[n, b], &[0, 0], Order::C, e).unwrap())?;
        }
        let view = from_strides(&[n as usize, b as usize], &[b as isize, 1], e as usize).unwrap();
        same(&c, &view)?;
    }

    /// An array view of a slice `a[z0.., y0.., x0..]` (shape = subsizes, strides of the whole
    /// array, displaced to the slice's first element) is the subarray.
    #[test]
    fn sliced_view_is_subarray((z, y, x) in (dim(5), dim(5), dim(5)), e in elem()) {
        let sizes = [z.0, y.0, x.0];
        let sub = subarray(&sizes, &[z.1, y.1, x.1], &[z.2, y.2, x.2], Order::C, e).unwrap();
        let strides = [(y.0 * x.0) as isize, x.0 as isize, 1];
        let shape = [z.1 as usize, y.1 as usize, x.1 as usize];
        let view = from_strides(&shape, &strides, e as usize)
            .unwrap()
            .displaced((((z.2 * y.0 + y.2) * x.0 + x.2) * e) as i64)
            .unwrap();
        same(&sub, &view)?;
    }
}

#[test]
fn canonical_forms_of_common_layouts() {
    // A full 3-D array is one dense block.
    let full = subarray(&[3, 4, 5], &[3, 4, 5], &[0, 0, 0], Order::C, 8).unwrap();
    assert_eq!(canonicalize(full), Type::dense(480));
    // Full rows of a 2-D slab fold into one block.
    let slab = subarray(&[3, 4, 5], &[2, 4, 5], &[1, 0, 0], Order::C, 8).unwrap();
    assert_eq!(canonicalize(slab), Type::dense(320).with_offset(160));
    // A column of a 2-D array.
    let col = subarray(&[6, 5], &[6, 1], &[0, 2], Order::C, 4).unwrap();
    assert_eq!(
        canonicalize(col),
        Type::stream(6, 20, Type::dense(4)).with_offset(8)
    );
}
