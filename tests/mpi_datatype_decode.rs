//! MPI derived datatypes decoded into datatype-pack's IR (`pack::mpi_decode`), checked against
//! MPI itself: the CPU pack of the decoded layout must equal `MPI_Pack` of the same buffer with the
//! original datatype, byte for byte, for named types, contiguous, vector (also with negative
//! strides), hvector (of vectors), subarrays (C and Fortran order, of derived elements), resized
//! and dup types, counts above one, and a generated pool of nested types. Irregular types
//! (indexed, struct, ...) must be refused as `Unsupported`, also when nested.
//! Every rank runs the same cases on its own. Run: `mpirun -n N target/debug/deps/mpi_datatype_decode-*`
//! (or `cargo xtask test`).

#![allow(clippy::useless_vec)] // the shared suite (tests/common) builds buffers as vectors

mod common;

use std::ffi::c_int;

use collectives::pack::canonical::canonicalize;
use collectives::pack::construct::{self, Order};
use collectives::pack::{cpu, mpi_decode, Error as PackError, StridedBlock, Type};
use common::{case, Case, T};
use mpi::datatype::{Datatype, Equivalence, UncommittedDatatype, UserDatatype};
use mpi::ffi;
use mpi::raw::FromRaw;

/// A datatype made through `mpi::ffi`, committed and owned by rsmpi (freed on drop).
fn commit(mut raw: ffi::MPI_Datatype) -> UserDatatype {
    // SAFETY: `raw` is a live datatype just created by the caller; committing it in place is
    // what MPI_Type_commit does, and the committed handle is handed to rsmpi, which frees it.
    unsafe {
        assert_eq!(ffi::MPI_Type_commit(&mut raw), 0);
        UserDatatype::from_raw(raw)
    }
}

fn subarray<D: Datatype>(
    sizes: &[c_int],
    subsizes: &[c_int],
    starts: &[c_int],
    order: Order,
    old: &D,
) -> UserDatatype {
    let order = match order {
        Order::C => ffi::MPI_ORDER_C as c_int,
        Order::Fortran => ffi::MPI_ORDER_FORTRAN as c_int,
    };
    // SAFETY: an all-zero handle is a valid value for MPI to overwrite.
    let mut t: ffi::MPI_Datatype = unsafe { std::mem::zeroed() };
    // SAFETY: the three arrays have `sizes.len()` entries each; `old` is a live datatype.
    let rc = unsafe {
        ffi::MPI_Type_create_subarray(
            sizes.len() as c_int,
            sizes.as_ptr(),
            subsizes.as_ptr(),
            starts.as_ptr(),
            order,
            old.as_raw(),
            &mut t,
        )
    };
    assert_eq!(rc, 0, "MPI_Type_create_subarray");
    commit(t)
}

fn resized<D: Datatype>(old: &D, lb: isize, extent: isize) -> UserDatatype {
    // SAFETY: an all-zero handle is a valid value for MPI to overwrite.
    let mut t: ffi::MPI_Datatype = unsafe { std::mem::zeroed() };
    // SAFETY: `old` is a live datatype; `t` a valid out-pointer.
    let rc = unsafe { ffi::MPI_Type_create_resized(old.as_raw(), lb, extent, &mut t) };
    assert_eq!(rc, 0, "MPI_Type_create_resized");
    commit(t)
}

/// `(lb, extent)` and `(true_lb, true_extent)` of a datatype.
fn extents<D: Datatype>(dt: &D) -> ((i64, i64), (i64, i64)) {
    let (mut lb, mut ext, mut tlb, mut text): (
        ffi::MPI_Count,
        ffi::MPI_Count,
        ffi::MPI_Count,
        ffi::MPI_Count,
    ) = (0, 0, 0, 0);
    // SAFETY: a live datatype and valid out-pointers.
    unsafe {
        assert_eq!(
            ffi::MPI_Type_get_extent_x(dt.as_raw(), &mut lb, &mut ext),
            0
        );
        assert_eq!(
            ffi::MPI_Type_get_true_extent_x(dt.as_raw(), &mut tlb, &mut text),
            0
        );
    }
    ((lb, ext), (tlb, text))
}

/// Checks that the CPU pack of `decode_count(dt, count)` equals `MPI_Pack(buf, count, dt)`.
/// Returns the decoded layout.
fn against_mpi_pack<D: Datatype>(t: &T, what: &str, dt: &D, count: usize) -> Option<Type> {
    let ((_, extent), (tlb, text)) = extents(dt);
    let layout = match mpi_decode::decode_count(dt, count as u64) {
        Ok(l) => l,
        Err(e) => {
            t.fail(format!("{what}: decode_count: {e}"));
            return None;
        }
    };
    if count == 1 {
        match mpi_decode::decode(dt) {
            Ok(one) => t.eq(&one, &layout, &format!("{what}: decode = decode_count(1)")),
            Err(e) => t.fail(format!("{what}: decode: {e}")),
        }
    }
    // The bytes every copy touches, relative to the buffer address handed to MPI.
    let span = (count.max(1) as i64 - 1) * extent;
    let low = tlb + span.min(0);
    let high = tlb + text + span.max(0);
    let base = (-low).max(0);
    let len = (base + high).max(1) as usize;
    let buf: Vec<u8> = (0..len)
        .map(|i| (i.wrapping_mul(131) ^ (i >> 8).wrapping_mul(29)) as u8)
        .collect();
    let mut size: c_int = 0;
    // SAFETY: MPI_COMM_SELF and a live datatype; `size` a valid out-pointer.
    let rc =
        unsafe { ffi::MPI_Pack_size(count as c_int, dt.as_raw(), ffi::RSMPI_COMM_SELF, &mut size) };
    t.eq(&rc, &0, &format!("{what}: MPI_Pack_size"));
    let mut theirs = vec![0u8; size.max(1) as usize];
    let mut position: c_int = 0;
    // SAFETY: `buf` holds every byte the `count` copies touch, from `base` bytes before the
    // address passed to the last byte (computed from MPI's own extents above); `theirs` holds
    // MPI_Pack_size bytes.
    let rc = unsafe {
        ffi::MPI_Pack(
            buf.as_ptr().add(base as usize).cast(),
            count as c_int,
            dt.as_raw(),
            theirs.as_mut_ptr().cast(),
            theirs.len() as c_int,
            &mut position,
            ffi::RSMPI_COMM_SELF,
        )
    };
    t.eq(&rc, &0, &format!("{what}: MPI_Pack"));
    theirs.truncate(position.max(0) as usize);
    let placed = match layout.clone().displaced(base) {
        Ok(p) => p,
        Err(e) => {
            t.fail(format!("{what}: displaced: {e}"));
            return None;
        }
    };
    let packed = placed.packed_size().unwrap_or(u64::MAX) as usize;
    t.eq(&packed, &theirs.len(), &format!("{what}: packed size"));
    let mut ours = vec![0u8; packed];
    match cpu::pack_naive(&placed, &buf, &mut ours) {
        Ok(_) => t.check(ours == theirs, || {
            format!("{what}: pack_naive of {layout} differs from MPI_Pack")
        }),
        Err(e) => t.fail(format!("{what}: pack_naive: {e}")),
    }
    // Where the layout has a plan (no negative stride), the planned packer agrees too.
    if let Ok(plan) = StridedBlock::from_type(&placed) {
        let mut planned = vec![0u8; packed];
        match cpu::pack(&plan, &buf, &mut planned) {
            Ok(_) => t.check(planned == theirs, || {
                format!("{what}: cpu::pack of plan {plan:?} differs from MPI_Pack")
            }),
            Err(e) => t.fail(format!("{what}: cpu::pack: {e}")),
        }
    }
    Some(layout)
}

fn named_types(t: &T) {
    against_mpi_pack(t, "f64", &f64::equivalent_datatype(), 1);
    against_mpi_pack(t, "f64 x 5", &f64::equivalent_datatype(), 5);
    against_mpi_pack(t, "i32 x 3", &i32::equivalent_datatype(), 3);
    against_mpi_pack(t, "u8 x 7", &u8::equivalent_datatype(), 7);
    against_mpi_pack(t, "i16", &i16::equivalent_datatype(), 1);
    t.eq(
        &mpi_decode::decode(&f64::equivalent_datatype()).ok(),
        &Some(Type::dense(8)),
        "f64 decodes to 8 dense bytes",
    );
    t.eq(
        &mpi_decode::decode_count(&i32::equivalent_datatype(), 0).ok(),
        &Some(Type::empty()),
        "zero elements",
    );
}

fn contiguous_vector_hvector(t: &T) {
    let f64t = f64::equivalent_datatype();
    let i32t = i32::equivalent_datatype();
    against_mpi_pack(
        t,
        "contiguous 5 f64",
        &UserDatatype::contiguous(5, &f64t),
        1,
    );
    let v = UserDatatype::vector(4, 3, 7, &f64t);
    if let Some(l) = against_mpi_pack(t, "vector 4x3 stride 7 f64", &v, 1) {
        t.eq(
            &l,
            &canonicalize(construct::vector(4, 3, 7, 8).unwrap()),
            "vector equals construct::vector",
        );
    }
    against_mpi_pack(t, "vector 4x3 stride 7 f64, count 3", &v, 3);
    against_mpi_pack(
        t,
        "vector negative stride",
        &UserDatatype::vector(3, 2, -5, &i32t),
        2,
    );
    against_mpi_pack(
        t,
        "vector count 0",
        &UserDatatype::vector(0, 2, 5, &i32t),
        1,
    );
    // An hvector of vectors: each block a 5 x 1 column of a 5 x 6 f64 matrix.
    let column = UserDatatype::vector(5, 1, 6, &f64t);
    let hv = UserDatatype::heterogeneous_vector(3, 2, 1000, &column);
    against_mpi_pack(t, "hvector 3x2 of vector columns", &hv, 1);
    against_mpi_pack(t, "hvector of vectors, count 2", &hv, 2);
    against_mpi_pack(
        t,
        "hvector with an unaligned stride",
        &UserDatatype::heterogeneous_vector(4, 1, 13, &i32t),
        1,
    );
    // Contiguous of a vector: copies one vector extent apart.
    against_mpi_pack(
        t,
        "contiguous 3 of vector",
        &UserDatatype::contiguous(3, &v),
        1,
    );
    // Dup.
    against_mpi_pack(t, "dup of vector", &v.dup(), 2);
}

fn subarrays(t: &T) {
    let f64t = f64::equivalent_datatype();
    for order in [Order::C, Order::Fortran] {
        let sizes = [6, 7, 8];
        let subs = [2, 3, 4];
        let starts = [1, 4, 3];
        let s = subarray(&sizes, &subs, &starts, order, &f64t);
        let what = format!("3-D subarray {order:?}");
        if let Some(l) = against_mpi_pack(t, &what, &s, 1) {
            let want = construct::subarray(&[6, 7, 8], &[2, 3, 4], &[1, 4, 3], order, 8).unwrap();
            t.eq(
                &l,
                &canonicalize(want),
                &format!("{what} equals construct::subarray"),
            );
        }
        // Two whole arrays: the second starts one whole-array extent later.
        against_mpi_pack(t, &format!("{what}, count 2"), &s, 2);
        // A subarray of 2-element contiguous elements.
        let pair = UserDatatype::contiguous(2, &i32::equivalent_datatype());
        let s = subarray(&[5, 4], &[2, 2], &[3, 1], order, &pair);
        against_mpi_pack(
            t,
            &format!("2-D subarray {order:?} of contiguous pairs"),
            &s,
            1,
        );
        // The x-face of a halo: one element in x.
        let s = subarray(&[10, 10, 10], &[4, 4, 1], &[3, 3, 3], order, &f64t);
        against_mpi_pack(t, &format!("x face {order:?}"), &s, 1);
    }
    // A 1-D subarray of one element.
    let s = subarray(&[9], &[1], &[8], Order::C, &f64t);
    against_mpi_pack(t, "1-D subarray of one element", &s, 3);
}

fn resized_and_dup(t: &T) {
    let f64t = f64::equivalent_datatype();
    // A column of a 4 x 6 matrix resized to one element, so that a contiguous of 6 columns
    // packs the matrix column by column (a transpose): the classic use of resized.
    let column = UserDatatype::vector(4, 1, 6, &f64t);
    let col = resized(&column, 0, 8);
    against_mpi_pack(t, "resized column", &col, 1);
    against_mpi_pack(t, "resized column, count 6", &col, 6);
    let transpose = UserDatatype::contiguous(6, &col);
    against_mpi_pack(
        t,
        "contiguous of resized columns (transpose)",
        &transpose,
        1,
    );
    // A subarray resized so that repetitions overlap, and one with a negative lower bound.
    let s = subarray(&[4, 5], &[2, 2], &[1, 1], Order::C, &f64t);
    against_mpi_pack(
        t,
        "subarray resized to 24 bytes, count 3",
        &resized(&s, 0, 24),
        3,
    );
    against_mpi_pack(t, "resized with lb -16, count 3", &resized(&s, -16, 200), 3);
    let r = resized(&i32::equivalent_datatype(), 0, 12);
    against_mpi_pack(
        t,
        "vector of a padded element",
        &UserDatatype::vector(3, 2, 4, &r),
        2,
    );
    against_mpi_pack(t, "dup of resized", &col.dup(), 4);
}

fn is_unsupported(t: &T, what: &str, r: Result<Type, PackError>, needle: &str) {
    match r {
        Err(PackError::Unsupported { message, .. }) if message.contains(needle) => {}
        Err(e) => t.fail(format!("{what}: wrong error: {e}")),
        Ok(l) => t.fail(format!("{what}: expected Unsupported, got {l}")),
    }
}

fn irregular_types_are_unsupported(t: &T) {
    let f64t = f64::equivalent_datatype();
    let idx = UserDatatype::indexed(&[1, 2], &[0, 5], &f64t);
    is_unsupported(
        t,
        "indexed",
        mpi_decode::decode(&idx),
        "MPI_COMBINER_INDEXED",
    );
    let hidx = UserDatatype::heterogeneous_indexed(&[1, 2], &[0, 40], &f64t);
    is_unsupported(
        t,
        "hindexed",
        mpi_decode::decode(&hidx),
        "MPI_COMBINER_HINDEXED",
    );
    let blk = UserDatatype::indexed_block(2, &[0, 4], &f64t);
    is_unsupported(
        t,
        "indexed block",
        mpi_decode::decode(&blk),
        "MPI_COMBINER_INDEXED_BLOCK",
    );
    let i32t = i32::equivalent_datatype();
    let st = UserDatatype::structured(&[1, 1], &[0, 8], &[f64t, i32t]);
    is_unsupported(t, "struct", mpi_decode::decode(&st), "MPI_COMBINER_STRUCT");
    // Nested under regular types: still refused, and the inner handles are freed (a leak would
    // show in MPI's own accounting, a double free would crash).
    let nested = UserDatatype::vector(3, 1, 4, &idx);
    is_unsupported(
        t,
        "vector of indexed",
        mpi_decode::decode(&nested),
        "INDEXED",
    );
    let deeper = subarray(&[3, 3], &[1, 2], &[1, 0], Order::C, &nested);
    is_unsupported(
        t,
        "subarray of vector of indexed",
        mpi_decode::decode(&deeper),
        "INDEXED",
    );
    for _ in 0..100 {
        let _ = mpi_decode::decode(&deeper);
    }
}

/// A small deterministic generator (64-bit LCG).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> i32 {
        (self.next() % n.max(1)) as i32
    }
}

/// A random nest of regular datatypes, 1 to 3 constructors over a basic type.
fn random_type(g: &mut Lcg) -> (String, UserDatatype) {
    let base = match g.below(4) {
        0 => f64::equivalent_datatype(),
        1 => i32::equivalent_datatype(),
        2 => u8::equivalent_datatype(),
        _ => i16::equivalent_datatype(),
    };
    let mut name = String::from("basic");
    let mut cur = UserDatatype::contiguous(1 + g.below(3), &base);
    for _ in 0..1 + g.below(3) {
        let ((_, ext), (_, text)) = extents(&cur);
        cur = match g.below(6) {
            0 => {
                let n = 1 + g.below(4);
                name = format!("contiguous({n}, {name})");
                UserDatatype::contiguous(n, &cur)
            }
            1 => {
                let (n, b) = (1 + g.below(4), 1 + g.below(3));
                // Negative strides avoid -b: Open MPI 4.1 packs a vector whose stride is minus
                // its block length as if it were contiguous (ascending), unlike the standard.
                let s = if g.below(5) == 0 {
                    -(b + 1 + g.below(3))
                } else {
                    b + g.below(4)
                };
                name = format!("vector({n}, {b}, {s}, {name})");
                UserDatatype::vector(n, b, s, &cur)
            }
            2 => {
                let (n, b) = (1 + g.below(4), 1 + g.below(3));
                let s = b as i64 * ext + g.below(40) as i64;
                name = format!("hvector({n}, {b}, {s}, {name})");
                UserDatatype::heterogeneous_vector(n, b, s as isize, &cur)
            }
            3 => {
                let nd = 1 + g.below(3) as usize;
                let sizes: Vec<c_int> = (0..nd).map(|_| 1 + g.below(5)).collect();
                let subs: Vec<c_int> = sizes.iter().map(|&s| 1 + g.below(s as u64)).collect();
                let starts: Vec<c_int> = sizes
                    .iter()
                    .zip(&subs)
                    .map(|(&s, &u)| g.below((s - u + 1) as u64))
                    .collect();
                let order = if g.below(2) == 0 {
                    Order::C
                } else {
                    Order::Fortran
                };
                name = format!("subarray({sizes:?}, {subs:?}, {starts:?}, {order:?}, {name})");
                subarray(&sizes, &subs, &starts, order, &cur)
            }
            4 => {
                let lb = g.below(17) as isize - 8;
                let e = (text + g.below(24) as i64).max(1) as isize;
                name = format!("resized({name}, {lb}, {e})");
                resized(&cur, lb, e)
            }
            _ => {
                name = format!("dup({name})");
                cur.dup()
            }
        };
    }
    (name, cur)
}

fn generated_pool(t: &T) {
    let mut g = Lcg(0x5eed_1234_abcd_0001);
    for i in 0..1000 {
        let (name, dt) = random_type(&mut g);
        let count = 1 + g.below(3) as usize;
        against_mpi_pack(t, &format!("pool {i}: {name} x {count}"), &dt, count);
    }
}

fn decoded_plans_for_the_gpu(t: &T) {
    // The x face of a 3-D f64 grid with 8 quantities, as a code would describe it: one plan,
    // 8-byte blocks (the GPU packer's input).
    let f64t = f64::equivalent_datatype();
    let s = subarray(
        &[8, 20, 20, 20],
        &[8, 16, 16, 3],
        &[0, 2, 2, 2],
        Order::C,
        &f64t,
    );
    match mpi_decode::decode(&s).and_then(|l| StridedBlock::from_type(&l)) {
        Ok(p) => {
            t.eq(&p.block_len(), &24, "x-face block length");
            t.eq(&p.counts(), &&[16u64, 16, 8][..], "x-face counts");
            t.eq(
                &p.packed_size(),
                &(8 * 16 * 16 * 3 * 8),
                "x-face packed size",
            );
        }
        Err(e) => t.fail(format!("x face plan: {e}")),
    }
}

fn main() {
    let cases: Vec<Case> = vec![
        case("decode_named_types", named_types),
        case(
            "decode_contiguous_vector_hvector",
            contiguous_vector_hvector,
        ),
        case("decode_subarrays", subarrays),
        case("decode_resized_and_dup", resized_and_dup),
        case(
            "decode_irregular_types_are_unsupported",
            irregular_types_are_unsupported,
        ),
        case("decode_generated_pool", generated_pool),
        case("decode_plans_for_the_gpu", decoded_plans_for_the_gpu),
    ];
    common::run(&cases)
}
