//! MPI derived datatypes decoded into datatype-pack's IR (`pack::mpi_decode`), checked against
//! MPI itself: the CPU pack of the decoded layout must equal `MPI_Pack` of the same buffer with the
//! original datatype, byte for byte, for named types, contiguous, vector (also with negative
//! strides), hvector (of vectors), subarrays (C and Fortran order, of derived elements), resized
//! and dup types, and counts above one; so must the planned CPU pack (every placed layout has a
//! plan, negative strides as reversed dimensions). `decode_negative_strides` covers vectors,
//! hvectors and nests of them with negative strides. Where the decoded layout selects each byte
//! once, its unpack must equal `MPI_Unpack` too. Irregular types (indexed, struct, ...) must be refused as
//! `Unsupported`, also when nested.
//!
//! `decode_fuzz` does the same for random nests of up to six constructors from a seeded
//! generator: `COLLECTIVES_FUZZ_TYPES` types (default 1000) from the seed `COLLECTIVES_FUZZ_SEED`,
//! both printed; `cargo xtask fuzz` runs ten thousand.
//!
//! Every rank runs the same cases on its own, except that the fuzz cases are shared out among
//! the ranks. Run: `mpirun -n N target/debug/deps/mpi_datatype_decode-*` (or `cargo xtask test`).

#![allow(clippy::useless_vec)] // the shared suite (tests/common) builds buffers as vectors

mod common;

use std::ffi::c_int;

use collectives::pack::canonical::canonicalize;
use collectives::pack::construct::{self, Order};
use collectives::pack::{cpu, mpi_decode, Error as PackError, StridedBlock, Type};
use collectives::{Communicator, ReduceOp};
use common::{case, Case, T};
use mpi::datatype::{Datatype, DatatypeRef, Equivalence, UncommittedDatatype, UserDatatype};
use mpi::ffi;
use mpi::raw::FromRaw;
use num_complex::Complex64;

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

/// `(lb, extent)` and `(true_lb, true_extent)` of a datatype; the true bounds of a type of
/// size zero (which an MPI may report as sentinels far out of range) as `(0, 0)`.
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
    if type_size(dt) == 0 {
        return ((lb, ext), (0, 0));
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
    // The placed layout starts inside the buffer, so it has a plan (negative strides as
    // reversed dimensions), and the planned packer agrees too.
    let plan = match StridedBlock::from_type(&placed) {
        Ok(p) => Some(p),
        Err(e) => {
            t.fail(format!("{what}: no plan for {placed}: {e}"));
            None
        }
    };
    if let Some(plan) = &plan {
        let mut planned = vec![0u8; packed];
        match cpu::pack(plan, &buf, &mut planned) {
            Ok(_) => t.check(planned == theirs, || {
                format!("{what}: cpu::pack of plan {plan:?} differs from MPI_Pack")
            }),
            Err(e) => t.fail(format!("{what}: cpu::pack: {e}")),
        }
    }
    if packed > 0 && packed == theirs.len() && selects_each_byte_once(&placed, len, packed) {
        against_mpi_unpack(
            t,
            what,
            dt,
            count,
            base as usize,
            &theirs,
            &placed,
            plan.as_ref(),
        );
    }
    Some(layout)
}

/// Whether `layout` (inside a buffer of `len` bytes) selects each of its `packed` bytes once.
fn selects_each_byte_once(layout: &Type, len: usize, packed: usize) -> bool {
    let mut mark = vec![0u8; len];
    cpu::unpack_naive(layout, &vec![1u8; packed], &mut mark).is_ok()
        && mark.iter().filter(|&&m| m == 1).count() == packed
}

thread_local! {
    /// How many layouts [`against_mpi_unpack`] has compared with `MPI_Unpack` on this rank.
    static UNPACK_COMPARISONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Checks that unpacking `packed` (what `MPI_Pack` produced) with the decoded layout `placed`
/// writes what `MPI_Unpack(packed, count, dt)` writes at `base` bytes into a buffer of the same
/// length, and leaves every other byte alone. Only for layouts that select each byte once: MPI
/// leaves unpacking into overlapping bytes undefined.
#[allow(clippy::too_many_arguments)]
fn against_mpi_unpack<D: Datatype>(
    t: &T,
    what: &str,
    dt: &D,
    count: usize,
    base: usize,
    packed: &[u8],
    placed: &Type,
    plan: Option<&StridedBlock>,
) {
    let len = placed
        .byte_range()
        .ok()
        .flatten()
        .map_or(0, |r| r.end.max(0) as usize);
    let fill: Vec<u8> = (0..len.max(base + 1))
        .map(|i| (i.wrapping_mul(7) as u8) ^ 0x5a)
        .collect();
    let mut theirs = fill.clone();
    let mut position: c_int = 0;
    // SAFETY: `theirs` holds every byte the `count` copies touch from `base` bytes before the
    // address passed (it is as long as the decoded layout's end, which the pack comparison
    // above matched against MPI); `packed` holds `packed.len()` bytes.
    let rc = unsafe {
        ffi::MPI_Unpack(
            packed.as_ptr().cast(),
            packed.len() as c_int,
            &mut position,
            theirs.as_mut_ptr().add(base).cast(),
            count as c_int,
            dt.as_raw(),
            ffi::RSMPI_COMM_SELF,
        )
    };
    t.eq(&rc, &0, &format!("{what}: MPI_Unpack"));
    UNPACK_COMPARISONS.with(|n| n.set(n.get() + 1));
    t.eq(
        &(position as usize),
        &packed.len(),
        &format!("{what}: MPI_Unpack position"),
    );
    let mut ours = fill.clone();
    match cpu::unpack_naive(placed, packed, &mut ours) {
        Ok(_) => t.check(ours == theirs, || {
            format!("{what}: unpack_naive of {placed} differs from MPI_Unpack")
        }),
        Err(e) => t.fail(format!("{what}: unpack_naive: {e}")),
    }
    if let Some(plan) = plan {
        let mut ours = fill;
        match cpu::unpack(plan, packed, &mut ours) {
            Ok(_) => t.check(ours == theirs, || {
                format!("{what}: cpu::unpack of plan {plan:?} differs from MPI_Unpack")
            }),
            Err(e) => t.fail(format!("{what}: cpu::unpack: {e}")),
        }
    }
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

/// Vectors, hvectors and nests with negative strides: `MPI_Pack` packs block 0 first, at the
/// highest address; the decoded layout, its plan (with reversed dimensions) and both CPU packers
/// must pack the same bytes in the same order. Strides of minus the block length are left out
/// (Open MPI 4.1 packs those ascending, see the decoder's module docs).
fn negative_strides(t: &T) {
    let f64t = f64::equivalent_datatype();
    let i32t = i32::equivalent_datatype();
    let u8t = u8::equivalent_datatype();
    for (count, block, stride) in [(3, 1, -2), (4, 2, -3), (5, 1, -7), (2, 3, -5), (6, 1, -1)] {
        if stride == -block {
            continue;
        }
        let v = UserDatatype::vector(count, block, stride, &f64t);
        let what = format!("vector({count}, {block}, {stride}) f64");
        if let Some(l) = against_mpi_pack(t, &what, &v, 1) {
            t.eq(
                &l,
                &canonicalize(
                    construct::vector(count as u64, block as u64, stride.into(), 8).unwrap(),
                ),
                &format!("{what} equals construct::vector"),
            );
            let lo = l.byte_range().ok().flatten().map_or(0, |r| r.start);
            match StridedBlock::from_type(&l.displaced(-lo as i64).unwrap()) {
                Ok(p) => t.check(p.has_reversed(), || {
                    format!("{what}: plan {p:?} not reversed")
                }),
                Err(e) => t.fail(format!("{what}: plan: {e}")),
            }
        }
        against_mpi_pack(t, &format!("{what}, count 3"), &v, 3);
    }
    // A reversal of single bytes and of 4-byte elements.
    against_mpi_pack(
        t,
        "vector(9, 1, -2) u8",
        &UserDatatype::vector(9, 1, -2, &u8t),
        1,
    );
    against_mpi_pack(
        t,
        "vector(4, 1, -2) i32, count 2",
        &UserDatatype::vector(4, 1, -2, &i32t),
        2,
    );
    // Hvectors with negative byte strides, of basic types and of vectors.
    against_mpi_pack(
        t,
        "hvector(3, 2, -40) f64",
        &UserDatatype::heterogeneous_vector(3, 2, -40, &f64t),
        1,
    );
    against_mpi_pack(
        t,
        "hvector(4, 1, -13) i32 (unaligned)",
        &UserDatatype::heterogeneous_vector(4, 1, -13, &i32t),
        2,
    );
    let column = UserDatatype::vector(5, 1, 6, &f64t);
    against_mpi_pack(
        t,
        "hvector(3, 1, -1000) of columns",
        &UserDatatype::heterogeneous_vector(3, 1, -1000, &column),
        1,
    );
    // Nests: negative outside positive, positive outside negative, negative in negative.
    let down = UserDatatype::vector(3, 2, -4, &i32t);
    against_mpi_pack(
        t,
        "vector(2, 1, 5) of a descending vector",
        &UserDatatype::vector(2, 1, 5, &down),
        1,
    );
    against_mpi_pack(
        t,
        "hvector(3, 2, 200) of a descending vector",
        &UserDatatype::heterogeneous_vector(3, 2, 200, &down),
        2,
    );
    against_mpi_pack(
        t,
        "hvector(2, 1, -300) of a descending vector",
        &UserDatatype::heterogeneous_vector(2, 1, -300, &down),
        1,
    );
    let nested = UserDatatype::vector(3, 1, -3, &UserDatatype::vector(2, 1, -2, &f64t));
    against_mpi_pack(t, "vector(3, 1, -3) of vector(2, 1, -2)", &nested, 2);
    against_mpi_pack(
        t,
        "contiguous 3 of a descending vector",
        &UserDatatype::contiguous(3, &down),
        1,
    );
    // A subarray of descending vectors, and a descending vector of subarrays.
    let s = subarray(&[4, 3], &[2, 2], &[1, 1], Order::C, &down);
    against_mpi_pack(t, "subarray of descending vectors", &s, 1);
    let face = subarray(&[6, 6], &[3, 1], &[2, 4], Order::C, &f64t);
    let r = resized(&face, 0, 8);
    against_mpi_pack(
        t,
        "vector(3, 1, -4) of resized subarrays",
        &UserDatatype::vector(3, 1, -4, &r),
        1,
    );
    // A descending vector resized, repeated with a count.
    against_mpi_pack(
        t,
        "resized descending vector, count 3",
        &resized(&down, -32, 48),
        3,
    );
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

    /// A count: 0 one time in 40 (a zero anywhere makes the whole type empty), else 1 to 4.
    fn count(&mut self) -> i32 {
        if self.below(40) == 0 {
            0
        } else {
            1 + self.below(4)
        }
    }
}

/// Types generated by a plain `cargo test` or `cargo xtask test` run.
const DEFAULT_FUZZ_TYPES: u64 = 1000;

/// The seed used when `COLLECTIVES_FUZZ_SEED` is not set.
const DEFAULT_FUZZ_SEED: u64 = 0x5eed_1234_abcd_0001;

/// Nesting stops once a type's size or true extent passes this many bytes.
const GROWTH_LIMIT: i64 = 1 << 14;

/// `MPI_Type_size_x` in bytes.
fn type_size<D: Datatype>(dt: &D) -> i64 {
    let mut size: ffi::MPI_Count = 0;
    // SAFETY: a live datatype and a valid out-pointer.
    assert_eq!(unsafe { ffi::MPI_Type_size_x(dt.as_raw(), &mut size) }, 0);
    size
}

/// A generated datatype, how it was built, and the outermost irregular combiner in it: the one
/// the decoder meets first and must name when it refuses the type.
struct Generated {
    dt: UserDatatype,
    name: String,
    irregular: Option<&'static str>,
}

fn basic(g: &mut Lcg) -> (DatatypeRef<'static>, &'static str) {
    match g.below(7) {
        0 => (f64::equivalent_datatype(), "f64"),
        1 => (f32::equivalent_datatype(), "f32"),
        2 => (i32::equivalent_datatype(), "i32"),
        3 => (u8::equivalent_datatype(), "u8"),
        4 => (i16::equivalent_datatype(), "i16"),
        5 => (i64::equivalent_datatype(), "i64"),
        _ => (Complex64::equivalent_datatype(), "complex f64"),
    }
}

/// A random nest of up to `levels` constructors over a basic type: contiguous, vector and
/// hvector (zero counts, negative and zero strides), subarray (C and Fortran, 1 to 3
/// dimensions), resized (negative lower bounds, padded and overlapping extents) and dup, and,
/// with `irregular`, now and then an indexed, hindexed, indexed-block, hindexed-block or struct
/// level.
fn random_nest(g: &mut Lcg, levels: i32, irregular: bool) -> Generated {
    let (base, base_name) = basic(g);
    let mut cur = if g.below(4) == 0 {
        Generated {
            dt: base.dup(),
            name: format!("dup({base_name})"),
            irregular: None,
        }
    } else {
        let n = 1 + g.below(3);
        Generated {
            dt: UserDatatype::contiguous(n, &base),
            name: format!("contiguous({n}, {base_name})"),
            irregular: None,
        }
    };
    for _ in 0..levels {
        let ((_, ext), (_, text)) = extents(&cur.dt);
        if text > GROWTH_LIMIT || type_size(&cur.dt) > GROWTH_LIMIT {
            break;
        }
        let name = &cur.name;
        let (dt, name, outer): (UserDatatype, String, Option<&'static str>) =
            match g.below(if irregular { 18 } else { 17 }) {
                0..=2 => {
                    let n = g.count();
                    (
                        UserDatatype::contiguous(n, &cur.dt),
                        format!("contiguous({n}, {name})"),
                        None,
                    )
                }
                3..=5 => {
                    let (n, b) = (g.count(), g.count());
                    // Negative strides avoid -b: Open MPI 4.1 packs a vector whose stride is
                    // minus its block length as if it were contiguous (ascending), unlike the
                    // standard.
                    let s = match g.below(8) {
                        0 | 1 => -(b + 1 + g.below(3)),
                        2 if b > 0 => 0,
                        _ => b + g.below(4),
                    };
                    (
                        UserDatatype::vector(n, b, s, &cur.dt),
                        format!("vector({n}, {b}, {s}, {name})"),
                        None,
                    )
                }
                6..=8 => {
                    let (n, b) = (g.count(), g.count());
                    let gap = g.below(40) as i64;
                    let s = match g.below(8) {
                        0 | 1 => -(i64::from(b) * ext + 1 + gap),
                        _ => i64::from(b) * ext + gap,
                    };
                    (
                        UserDatatype::heterogeneous_vector(n, b, s as isize, &cur.dt),
                        format!("hvector({n}, {b}, {s}, {name})"),
                        None,
                    )
                }
                9..=11 => {
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
                    (
                        subarray(&sizes, &subs, &starts, order, &cur.dt),
                        format!("subarray({sizes:?}, {subs:?}, {starts:?}, {order:?}, {name})"),
                        None,
                    )
                }
                12..=14 => {
                    let lb = g.below(17) as isize - 8;
                    let e = match g.below(4) {
                        // Copies that overlap.
                        0 => (text / 2).max(1),
                        // Exactly the true extent.
                        1 => text.max(1),
                        // Padded.
                        _ => (text + g.below(24) as i64).max(1),
                    } as isize;
                    (
                        resized(&cur.dt, lb, e),
                        format!("resized({name}, {lb}, {e})"),
                        None,
                    )
                }
                15 | 16 => (cur.dt.dup(), format!("dup({name})"), None),
                _ => irregular_level(g, &cur),
            };
        cur = Generated {
            dt,
            name,
            irregular: outer.or(cur.irregular),
        };
    }
    cur
}

/// One level of a combiner the decoder does not support, over `cur`.
fn irregular_level(g: &mut Lcg, cur: &Generated) -> (UserDatatype, String, Option<&'static str>) {
    let name = &cur.name;
    let k = 1 + g.below(3) as usize;
    let lens: Vec<c_int> = (0..k).map(|_| g.below(4)).collect();
    let displs: Vec<c_int> = (0..k).map(|_| g.below(9)).collect();
    let bytes: Vec<isize> = (0..k).map(|_| g.below(65) as isize).collect();
    match g.below(5) {
        0 => (
            UserDatatype::indexed(&lens, &displs, &cur.dt),
            format!("indexed({lens:?}, {displs:?}, {name})"),
            Some("MPI_COMBINER_INDEXED"),
        ),
        1 => (
            UserDatatype::heterogeneous_indexed(&lens, &bytes, &cur.dt),
            format!("hindexed({lens:?}, {bytes:?}, {name})"),
            Some("MPI_COMBINER_HINDEXED"),
        ),
        2 => {
            let b = 1 + g.below(3);
            (
                UserDatatype::indexed_block(b, &displs, &cur.dt),
                format!("indexed_block({b}, {displs:?}, {name})"),
                Some("MPI_COMBINER_INDEXED_BLOCK"),
            )
        }
        3 => {
            let b = 1 + g.below(3);
            (
                UserDatatype::heterogeneous_indexed_block(b, &bytes, &cur.dt),
                format!("hindexed_block({b}, {bytes:?}, {name})"),
                Some("MPI_COMBINER_HINDEXED_BLOCK"),
            )
        }
        _ => {
            // `cur` and up to two other small nests, at byte displacements.
            let mut members = vec![cur.dt.dup()];
            let mut names = vec![name.clone()];
            for _ in 1..k {
                let levels = g.below(3);
                let other = random_nest(g, levels, false);
                members.push(other.dt);
                names.push(other.name);
            }
            (
                UserDatatype::structured(&lens, &bytes, &members),
                format!("struct({lens:?}, {bytes:?}, [{}])", names.join(", ")),
                Some("MPI_COMBINER_STRUCT"),
            )
        }
    }
}

/// A number from the environment, decimal or `0x` hexadecimal (underscores allowed).
fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim().replace('_', "");
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// `COLLECTIVES_FUZZ_TYPES` random nests (default [`DEFAULT_FUZZ_TYPES`]) from the seed
/// `COLLECTIVES_FUZZ_SEED` (default [`DEFAULT_FUZZ_SEED`]). Every rank generates every type (the
/// generator asks MPI for extents, so the sequence is the same on all ranks) and checks its share,
/// types `i` with `i % size == rank`: regular types decode and pack (and unpack) as `MPI_Pack`
/// (and `MPI_Unpack`) do, byte for byte; types with an irregular level are refused as
/// `Unsupported`, naming the outermost irregular combiner.
fn fuzz(t: &T) {
    let types = env_number("COLLECTIVES_FUZZ_TYPES").unwrap_or(DEFAULT_FUZZ_TYPES);
    let seed = env_number("COLLECTIVES_FUZZ_SEED").unwrap_or(DEFAULT_FUZZ_SEED);
    let started = std::time::Instant::now();
    let mut g = Lcg(seed);
    // Checked here: compared with MPI, refused as irregular, of size zero, also unpacked.
    let mut mine = [0u64; 4];
    let unpacked_before = UNPACK_COMPARISONS.with(std::cell::Cell::get);
    for i in 0..types {
        let levels = 1 + g.below(6);
        let generated = random_nest(&mut g, levels, true);
        let count = if g.below(25) == 0 {
            0
        } else {
            1 + g.below(3) as usize
        };
        if i % t.size() as u64 != t.rank() as u64 {
            continue;
        }
        let what = format!(
            "fuzz type {i} (seed {seed:#x}): {} x {count}",
            generated.name
        );
        match generated.irregular {
            None => {
                if let Some(layout) = against_mpi_pack(t, &what, &generated.dt, count) {
                    mine[0] += 1;
                    mine[2] += u64::from(layout.is_empty());
                }
            }
            Some(combiner) => {
                let needle = format!("{combiner} is not a regular layout");
                is_unsupported(
                    t,
                    &what,
                    mpi_decode::decode_count(&generated.dt, count as u64),
                    &needle,
                );
                is_unsupported(t, &what, mpi_decode::decode(&generated.dt), &needle);
                mine[1] += 1;
            }
        }
    }
    mine[3] = UNPACK_COMPARISONS.with(std::cell::Cell::get) - unpacked_before;
    let mut all = [0u64; 4];
    if let Err(e) = t.comm.all_reduce(&mine[..], &mut all[..], ReduceOp::Sum) {
        t.fail(format!("summing the fuzz counts: {e}"));
    }
    t.eq(
        &(all[0] + all[1]),
        &types,
        "fuzz types checked over all ranks",
    );
    if t.rank() == 0 {
        println!(
            "fuzz-types: seed {seed:#x}, {} ranks: {} decoded and packed as MPI_Pack packs ({} \
             of size zero; {} selecting each byte once also unpacked as MPI_Unpack unpacks), {} \
             refused as irregular",
            t.size(),
            all[0],
            all[2],
            all[3],
            all[1]
        );
        println!(
            "fuzz-types: {types} types checked in {:.1} s",
            started.elapsed().as_secs_f64()
        );
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
        case("decode_negative_strides", negative_strides),
        case(
            "decode_irregular_types_are_unsupported",
            irregular_types_are_unsupported,
        ),
        case("decode_fuzz", fuzz),
        case("decode_plans_for_the_gpu", decoded_plans_for_the_gpu),
    ];
    common::run(&cases)
}
