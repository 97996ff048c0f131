//! Committed MPI derived datatypes decoded into the IR, so the types an MPI code already has can be
//! packed by the CPU reference and the GPU kernels (feature `mpi`).
//!
//! The decoder walks the datatype's construction with `MPI_Type_get_envelope` and
//! `MPI_Type_get_contents` (through rsmpi's raw interface, [`mpi::ffi`]) and rebuilds it as a
//! [`Type`], in canonical form ([`canonicalize`]). Where MPI places copies of an inner type one
//! *extent* apart (contiguous, the blocks of a vector, the elements of a subarray), the extent is
//! asked of MPI (`MPI_Type_get_extent_x`), so resized types and predefined types with trailing
//! padding repeat exactly as MPI repeats them.
//!
//! | combiner | decoded as |
//! |---|---|
//! | named (predefined), `F90_REAL`/`F90_COMPLEX`/`F90_INTEGER` | a dense block of `MPI_Type_size` bytes, when its bytes have no gap |
//! | `DUP` | the duplicated type |
//! | `CONTIGUOUS` | `count` copies one extent apart |
//! | `VECTOR`, `HVECTOR` | `count` blocks `stride` elements (bytes) apart, each `blocklength` copies one extent apart |
//! | `SUBARRAY` | C or Fortran order, with starts; the elements one extent of the element type apart |
//! | `RESIZED` | the inner type: resizing changes where copies go (the extent), never which bytes one copy packs |
//! | `INDEXED`, `HINDEXED`, `INDEXED_BLOCK`, `HINDEXED_BLOCK`, `STRUCT`, `DARRAY`, any other | [`Error::Unsupported`] naming the combiner |
//!
//! Every decoded type is checked against MPI: its packed size must equal `MPI_Type_size_x`, or the
//! decoder returns [`Error::Unsupported`] rather than a layout that could differ from MPI's.
//!
//! The decoder follows the MPI standard's type maps. One divergence of an MPI library is known:
//! Open MPI 4.1 packs a vector whose stride is minus its block length (`MPI_Type_vector(2, 1, -1,
//! ..)`) as if it were contiguous in ascending order, and reports its lower bound as 0; the
//! decoded layout is the standard's (descending blocks).
//!
//! The datatypes that `MPI_Type_get_contents` hands out for derived inner types are freed before
//! the decoder returns (also on errors); predefined ones are never freed.
//!
//! ```no_run
//! use datatype_pack::mpi_decode;
//! use datatype_pack::StridedBlock;
//! use mpi::datatype::{Equivalence, UserDatatype};
//!
//! let _universe = mpi::initialize().expect("MPI initializes once");
//! // Every 4th double of 100: what a code would send with MPI_Type_vector.
//! let column = UserDatatype::vector(100, 1, 4, &f64::equivalent_datatype());
//! let layout = mpi_decode::decode(&column)?;
//! let plan = StridedBlock::from_type(&layout)?;
//! assert_eq!(plan.counts(), &[100]);
//! assert_eq!(plan.strides(), &[32]);
//! # Ok::<(), datatype_pack::Error>(())
//! ```

use std::ffi::{c_char, c_int};

use mpi::datatype::Datatype;
use mpi::ffi;

use crate::canonical::canonicalize;
use crate::error::{overflow, Error, Result};
use crate::ir::{Level, Type};

const OP: &str = "mpi_decode";

const NAMED: c_int = ffi::MPI_COMBINER_NAMED as c_int;
const DUP: c_int = ffi::MPI_COMBINER_DUP as c_int;
const CONTIGUOUS: c_int = ffi::MPI_COMBINER_CONTIGUOUS as c_int;
const VECTOR: c_int = ffi::MPI_COMBINER_VECTOR as c_int;
const HVECTOR: c_int = ffi::MPI_COMBINER_HVECTOR as c_int;
const INDEXED: c_int = ffi::MPI_COMBINER_INDEXED as c_int;
const HINDEXED: c_int = ffi::MPI_COMBINER_HINDEXED as c_int;
const INDEXED_BLOCK: c_int = ffi::MPI_COMBINER_INDEXED_BLOCK as c_int;
const HINDEXED_BLOCK: c_int = ffi::MPI_COMBINER_HINDEXED_BLOCK as c_int;
const STRUCT: c_int = ffi::MPI_COMBINER_STRUCT as c_int;
const SUBARRAY: c_int = ffi::MPI_COMBINER_SUBARRAY as c_int;
const DARRAY: c_int = ffi::MPI_COMBINER_DARRAY as c_int;
const F90_REAL: c_int = ffi::MPI_COMBINER_F90_REAL as c_int;
const F90_COMPLEX: c_int = ffi::MPI_COMBINER_F90_COMPLEX as c_int;
const F90_INTEGER: c_int = ffi::MPI_COMBINER_F90_INTEGER as c_int;
const RESIZED: c_int = ffi::MPI_COMBINER_RESIZED as c_int;
const ORDER_C: c_int = ffi::MPI_ORDER_C as c_int;
const ORDER_FORTRAN: c_int = ffi::MPI_ORDER_FORTRAN as c_int;

/// MPI's name of a combiner (`MPI_COMBINER_VECTOR`, ...), or `None` for a value this MPI does
/// not name in the standard's list.
pub fn combiner_name(combiner: c_int) -> Option<&'static str> {
    Some(match combiner {
        NAMED => "MPI_COMBINER_NAMED",
        DUP => "MPI_COMBINER_DUP",
        CONTIGUOUS => "MPI_COMBINER_CONTIGUOUS",
        VECTOR => "MPI_COMBINER_VECTOR",
        HVECTOR => "MPI_COMBINER_HVECTOR",
        INDEXED => "MPI_COMBINER_INDEXED",
        HINDEXED => "MPI_COMBINER_HINDEXED",
        INDEXED_BLOCK => "MPI_COMBINER_INDEXED_BLOCK",
        HINDEXED_BLOCK => "MPI_COMBINER_HINDEXED_BLOCK",
        STRUCT => "MPI_COMBINER_STRUCT",
        SUBARRAY => "MPI_COMBINER_SUBARRAY",
        DARRAY => "MPI_COMBINER_DARRAY",
        F90_REAL => "MPI_COMBINER_F90_REAL",
        F90_COMPLEX => "MPI_COMBINER_F90_COMPLEX",
        F90_INTEGER => "MPI_COMBINER_F90_INTEGER",
        RESIZED => "MPI_COMBINER_RESIZED",
        _ => return None,
    })
}

/// The layout of one element of `datatype` (the bytes `MPI_Pack` of one element packs, in its
/// order), relative to the buffer address passed to MPI, in canonical form.
///
/// # Errors
/// See [`decode_raw`].
pub fn decode<D: Datatype>(datatype: &D) -> Result<Type> {
    // SAFETY: rsmpi's `AsRaw` is an unsafe trait whose implementors promise a live handle, and a
    // `Datatype` exists only while MPI is initialized.
    unsafe { decode_raw(datatype.as_raw()) }
}

/// The layout of `count` elements of `datatype` (MPI's `(buf, count, datatype)` triple): element
/// `i` starts `i` extents after the first, as MPI places them. In canonical form.
///
/// # Errors
/// See [`decode_raw`]; [`Error::Overflow`] if the whole layout does not fit `i64` bounds.
pub fn decode_count<D: Datatype>(datatype: &D, count: u64) -> Result<Type> {
    // SAFETY: as in `decode`.
    unsafe { decode_count_raw(datatype.as_raw(), count) }
}

/// [`decode`] of a raw handle.
///
/// # Safety
/// MPI must be initialized (and not finalized) and `datatype` must be a live datatype handle
/// (predefined, or derived and not freed).
///
/// # Errors
/// * [`Error::Unsupported`] for an irregular combiner (indexed, struct, darray, ...) anywhere in
///   the construction, a predefined type whose bytes have a gap (`MPI_SHORT_INT`, ...), or a
///   decoded size that differs from `MPI_Type_size_x`;
/// * [`Error::Overflow`] if a byte offset, stride or size does not fit `i64`/`u64`;
/// * [`Error::Mpi`] if an MPI call returns an error code (with the default error handler
///   `MPI_ERRORS_ARE_FATAL`, MPI aborts first).
pub unsafe fn decode_raw(datatype: ffi::MPI_Datatype) -> Result<Type> {
    // SAFETY: the caller's contract.
    let t = unsafe { decode_tree(datatype, 0) }?;
    // SAFETY: as above.
    let size = unsafe { type_size(datatype) }?;
    check_size(&t, size)?;
    finish(t)
}

/// [`decode_count`] of a raw handle.
///
/// # Safety
/// As [`decode_raw`].
///
/// # Errors
/// As [`decode_count`].
pub unsafe fn decode_count_raw(datatype: ffi::MPI_Datatype, count: u64) -> Result<Type> {
    // SAFETY: the caller's contract.
    let one = unsafe { decode_tree(datatype, 0) }?;
    // SAFETY: as above.
    let size = unsafe { type_size(datatype) }?;
    check_size(&one, size)?;
    // SAFETY: as above.
    let (_, extent) = unsafe { extent_of(datatype) }?;
    finish(Type::stream(count, extent, one))
}

/// How deep a construction may nest before the decoder gives up (no real datatype comes close).
const MAX_DEPTH: usize = 64;

fn finish(t: Type) -> Result<Type> {
    t.packed_size()
        .map_err(|_| overflow(OP, "packed size exceeds u64"))?;
    if let Some(r) = t
        .byte_range()
        .map_err(|_| overflow(OP, "byte bounds exceed i128"))?
    {
        if r.start < i128::from(i64::MIN) || r.end > i128::from(i64::MAX) {
            return Err(overflow(
                OP,
                format!("byte bounds {}..{} exceed i64", r.start, r.end),
            ));
        }
    }
    Ok(canonicalize(t))
}

fn check_size(t: &Type, mpi_size: u64) -> Result<()> {
    let ours = t
        .packed_size()
        .map_err(|_| overflow(OP, "packed size exceeds u64"))?;
    if ours != mpi_size {
        return Err(unsupported(format!(
            "the decoded layout packs {ours} bytes but MPI_Type_size_x says {mpi_size}"
        )));
    }
    Ok(())
}

fn unsupported(message: String) -> Error {
    Error::Unsupported { op: OP, message }
}

fn describe(combiner: c_int) -> String {
    combiner_name(combiner).map_or_else(|| format!("combiner {combiner}"), str::to_string)
}

/// `MPI_Error_string` of `code`.
fn error_string(code: c_int) -> String {
    let mut buf = vec![0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: `buf` holds MPI_MAX_ERROR_STRING characters plus one, as MPI_Error_string needs;
    // `len` is a valid out-pointer. MPI_Error_string may be called at any time.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) };
    if rc != 0 {
        return String::new();
    }
    let len = usize::try_from(len).unwrap_or(0).min(buf.len());
    let bytes: Vec<u8> = buf[..len].iter().map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn mpi_call(call: &'static str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Mpi {
            op: OP,
            call,
            code: rc,
            message: error_string(rc),
        })
    }
}

/// `MPI_Type_size_x` in bytes.
///
/// # Safety
/// MPI initialized; `dt` live.
unsafe fn type_size(dt: ffi::MPI_Datatype) -> Result<u64> {
    let mut size: ffi::MPI_Count = 0;
    // SAFETY: the caller's contract; `size` is a valid out-pointer.
    mpi_call("MPI_Type_size_x", unsafe {
        ffi::MPI_Type_size_x(dt, &mut size)
    })?;
    u64::try_from(size).map_err(|_| {
        unsupported(format!(
            "MPI_Type_size_x returned {size} (MPI_UNDEFINED: the size does not fit MPI_Count)"
        ))
    })
}

/// `(lb, extent)` of `MPI_Type_get_extent_x`, in bytes.
///
/// # Safety
/// MPI initialized; `dt` live.
#[allow(clippy::useless_conversion)] // MPI_Count is the MPI's type (`long long` where seen)
unsafe fn extent_of(dt: ffi::MPI_Datatype) -> Result<(i64, i64)> {
    let (mut lb, mut extent): (ffi::MPI_Count, ffi::MPI_Count) = (0, 0);
    // SAFETY: the caller's contract; both out-pointers are valid.
    mpi_call("MPI_Type_get_extent_x", unsafe {
        ffi::MPI_Type_get_extent_x(dt, &mut lb, &mut extent)
    })?;
    Ok((i64::from(lb), i64::from(extent)))
}

/// `(true_lb, true_extent)` of `MPI_Type_get_true_extent_x`, in bytes.
///
/// # Safety
/// MPI initialized; `dt` live.
#[allow(clippy::useless_conversion)] // as in `extent_of`
unsafe fn true_extent_of(dt: ffi::MPI_Datatype) -> Result<(i64, i64)> {
    let (mut lb, mut extent): (ffi::MPI_Count, ffi::MPI_Count) = (0, 0);
    // SAFETY: the caller's contract; both out-pointers are valid.
    mpi_call("MPI_Type_get_true_extent_x", unsafe {
        ffi::MPI_Type_get_true_extent_x(dt, &mut lb, &mut extent)
    })?;
    Ok((i64::from(lb), i64::from(extent)))
}

/// What `MPI_Type_get_contents` returned for one derived datatype. The derived inner datatypes
/// are freed on drop.
struct Contents {
    combiner: c_int,
    ints: Vec<c_int>,
    addrs: Vec<ffi::MPI_Aint>,
    types: Vec<ffi::MPI_Datatype>,
    /// Which of `types` are derived (and so owned here).
    owned: Vec<bool>,
}

impl Drop for Contents {
    fn drop(&mut self) {
        for (t, &owned) in self.types.iter_mut().zip(&self.owned) {
            if owned {
                // SAFETY: `t` is a derived datatype that MPI_Type_get_contents created for us
                // and that nothing else holds; it is freed once, here.
                unsafe { ffi::MPI_Type_free(t) };
            }
        }
    }
}

/// The combiner of `dt`, and the lengths of its contents.
///
/// # Safety
/// MPI initialized; `dt` live.
unsafe fn envelope(dt: ffi::MPI_Datatype) -> Result<(c_int, [usize; 3])> {
    let (mut ni, mut na, mut nd, mut combiner): (c_int, c_int, c_int, c_int) = (0, 0, 0, 0);
    // SAFETY: the caller's contract; all four out-pointers are valid.
    mpi_call("MPI_Type_get_envelope", unsafe {
        ffi::MPI_Type_get_envelope(dt, &mut ni, &mut na, &mut nd, &mut combiner)
    })?;
    let n = |v: c_int| usize::try_from(v).unwrap_or(0);
    Ok((combiner, [n(ni), n(na), n(nd)]))
}

/// The contents of the derived datatype `dt` (not a named one: MPI refuses those).
///
/// # Safety
/// MPI initialized; `dt` live and derived.
unsafe fn contents(dt: ffi::MPI_Datatype, combiner: c_int, lens: [usize; 3]) -> Result<Contents> {
    let mut ints: Vec<c_int> = vec![0; lens[0]];
    let mut addrs: Vec<ffi::MPI_Aint> = vec![0; lens[1]];
    // SAFETY: an all-zero MPI_Datatype is a valid value for MPI to overwrite (a pointer or an
    // integer handle).
    let mut types: Vec<ffi::MPI_Datatype> = vec![unsafe { std::mem::zeroed() }; lens[2]];
    let c = |n: usize| c_int::try_from(n).unwrap_or(c_int::MAX);
    // SAFETY: the caller's contract; each array holds exactly the number of entries
    // MPI_Type_get_envelope reported for it.
    mpi_call("MPI_Type_get_contents", unsafe {
        ffi::MPI_Type_get_contents(
            dt,
            c(lens[0]),
            c(lens[1]),
            c(lens[2]),
            ints.as_mut_ptr(),
            addrs.as_mut_ptr(),
            types.as_mut_ptr(),
        )
    })?;
    let mut out = Contents {
        combiner,
        ints,
        addrs,
        owned: vec![false; types.len()],
        types,
    };
    for i in 0..out.types.len() {
        // SAFETY: MPI just returned this handle, live (predefined or newly created).
        let (inner, _) = unsafe { envelope(out.types[i]) }?;
        out.owned[i] = inner != NAMED;
    }
    Ok(out)
}

fn to_u64(what: &str, v: c_int) -> Result<u64> {
    u64::try_from(v).map_err(|_| unsupported(format!("negative {what} {v}")))
}

fn mul(a: i64, b: i64) -> Result<i64> {
    a.checked_mul(b)
        .ok_or_else(|| overflow(OP, format!("{a} x {b} exceeds i64")))
}

fn need(c: &Contents, ints: usize, addrs: usize, types: usize) -> Result<()> {
    if c.ints.len() < ints || c.addrs.len() < addrs || c.types.len() < types {
        return Err(unsupported(format!(
            "{} returned {} integers, {} addresses and {} datatypes; expected at least {ints}, \
             {addrs} and {types}",
            describe(c.combiner),
            c.ints.len(),
            c.addrs.len(),
            c.types.len()
        )));
    }
    Ok(())
}

/// The layout of one element of `dt`, not yet canonical.
///
/// # Safety
/// MPI initialized; `dt` live.
unsafe fn decode_tree(dt: ffi::MPI_Datatype, depth: usize) -> Result<Type> {
    if depth > MAX_DEPTH {
        return Err(unsupported(format!(
            "datatype nested more than {MAX_DEPTH} levels deep"
        )));
    }
    // SAFETY: the caller's contract.
    let (combiner, lens) = unsafe { envelope(dt) }?;
    match combiner {
        // SAFETY: the caller's contract.
        NAMED | F90_REAL | F90_COMPLEX | F90_INTEGER => unsafe { leaf(dt, combiner) },
        DUP | CONTIGUOUS | VECTOR | HVECTOR | SUBARRAY | RESIZED => {
            // SAFETY: the caller's contract; `dt` is derived (not NAMED).
            let c = unsafe { contents(dt, combiner, lens) }?;
            need(&c, 0, 0, 1)?;
            let inner_dt = c.types[0];
            // SAFETY: `inner_dt` is live until `c` drops at the end of this arm.
            let inner = unsafe { decode_tree(inner_dt, depth + 1) }?;
            // SAFETY: as above.
            let (_, extent) = unsafe { extent_of(inner_dt) }?;
            build(&c, inner, extent)
        }
        other => Err(unsupported(format!(
            "{} is not a regular layout (only named, dup, contiguous, vector, hvector, subarray \
             and resized types decode)",
            describe(other)
        ))),
    }
}

/// A predefined (or F90) type: a dense block when its bytes have no gap.
///
/// # Safety
/// MPI initialized; `dt` live.
unsafe fn leaf(dt: ffi::MPI_Datatype, combiner: c_int) -> Result<Type> {
    // SAFETY: the caller's contract.
    let size = unsafe { type_size(dt) }?;
    // SAFETY: as above.
    let (true_lb, true_extent) = unsafe { true_extent_of(dt) }?;
    if size == 0 {
        return Ok(Type::empty());
    }
    if true_lb != 0 || u64::try_from(true_extent).ok() != Some(size) {
        return Err(unsupported(format!(
            "{} type of {size} bytes spans bytes {true_lb}..{} (a pair type with a gap, such as \
             MPI_SHORT_INT)",
            describe(combiner),
            i128::from(true_lb) + i128::from(true_extent)
        )));
    }
    Ok(Type::dense(size))
}

/// The layout of a regular derived type from its contents, its inner layout and the inner
/// type's extent.
fn build(c: &Contents, inner: Type, extent: i64) -> Result<Type> {
    match c.combiner {
        DUP | RESIZED => Ok(inner),
        CONTIGUOUS => {
            need(c, 1, 0, 1)?;
            Ok(Type::stream(to_u64("count", c.ints[0])?, extent, inner))
        }
        VECTOR => {
            need(c, 3, 0, 1)?;
            let (count, blocklen) = (
                to_u64("count", c.ints[0])?,
                to_u64("blocklength", c.ints[1])?,
            );
            let stride = mul(i64::from(c.ints[2]), extent)?;
            Ok(Type::stream(
                count,
                stride,
                Type::stream(blocklen, extent, inner),
            ))
        }
        HVECTOR => {
            need(c, 2, 1, 1)?;
            let (count, blocklen) = (
                to_u64("count", c.ints[0])?,
                to_u64("blocklength", c.ints[1])?,
            );
            let stride = i64::try_from(c.addrs[0])
                .map_err(|_| overflow(OP, format!("stride {} exceeds i64", c.addrs[0])))?;
            Ok(Type::stream(
                count,
                stride,
                Type::stream(blocklen, extent, inner),
            ))
        }
        SUBARRAY => subarray(c, inner, extent),
        other => Err(unsupported(describe(other))),
    }
}

/// `MPI_Type_create_subarray(ndims, sizes, subsizes, starts, order, oldtype)`: integers are
/// `[ndims, sizes.., subsizes.., starts.., order]`.
fn subarray(c: &Contents, inner: Type, extent: i64) -> Result<Type> {
    need(c, 1, 0, 1)?;
    let nd = usize::try_from(c.ints[0])
        .map_err(|_| unsupported(format!("subarray of {} dimensions", c.ints[0])))?;
    need(c, 3 * nd + 2, 0, 1)?;
    let sizes = &c.ints[1..=nd];
    let subsizes = &c.ints[1 + nd..=2 * nd];
    let starts = &c.ints[1 + 2 * nd..=3 * nd];
    let order = c.ints[1 + 3 * nd];
    let mut fast_first: Vec<usize> = (0..nd).collect();
    match order {
        ORDER_C => fast_first.reverse(),
        ORDER_FORTRAN => {}
        other => return Err(unsupported(format!("subarray order {other}"))),
    }
    // Element strides in bytes, fastest dimension first; the element is the inner type, placed
    // one extent apart.
    let mut stride = extent;
    let mut offset = 0i64;
    let mut levels = Vec::with_capacity(nd);
    for &d in &fast_first {
        let (size, sub, start) = (sizes[d], subsizes[d], starts[d]);
        offset = offset
            .checked_add(mul(i64::from(start), stride)?)
            .ok_or_else(|| overflow(OP, "subarray start offset exceeds i64"))?;
        levels.push(Level::new(stride, to_u64("subsize", sub)?));
        stride = mul(stride, i64::from(size))?;
    }
    // Wrap the inner layout, fastest dimension innermost.
    let mut t = inner;
    for l in levels {
        t = Type::stream(l.count, l.stride, t);
    }
    t.displaced(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combiner_names() {
        assert_eq!(combiner_name(VECTOR), Some("MPI_COMBINER_VECTOR"));
        assert_eq!(combiner_name(STRUCT), Some("MPI_COMBINER_STRUCT"));
        assert_eq!(combiner_name(-12345), None);
        assert_eq!(describe(-12345), "combiner -12345");
    }

    fn contents(combiner: c_int, ints: Vec<c_int>, addrs: Vec<ffi::MPI_Aint>) -> Contents {
        Contents {
            combiner,
            ints,
            addrs,
            types: Vec::new(),
            owned: Vec::new(),
        }
    }

    /// `build` without MPI: the inner datatype list is only checked for length, so give one.
    fn build_one(c: Contents, inner: Type, extent: i64) -> Result<Type> {
        let mut c = c;
        // SAFETY: an all-zero handle is never passed to MPI here (`owned` is false).
        c.types.push(unsafe { std::mem::zeroed() });
        c.owned.push(false);
        build(&c, inner, extent)
    }

    #[test]
    fn vector_and_subarray_without_mpi() {
        let v = build_one(contents(VECTOR, vec![3, 2, 5], vec![]), Type::dense(4), 4).unwrap();
        assert_eq!(
            canonicalize(v),
            canonicalize(crate::construct::vector(3, 2, 5, 4).unwrap())
        );
        let ints = vec![3, 4, 5, 6, 2, 3, 2, 1, 1, 2, ORDER_C];
        let s = build_one(contents(SUBARRAY, ints, vec![]), Type::dense(8), 8).unwrap();
        let want =
            crate::construct::subarray(&[4, 5, 6], &[2, 3, 2], &[1, 1, 2], crate::Order::C, 8)
                .unwrap();
        assert_eq!(canonicalize(s), canonicalize(want));
        let ints = vec![2, 4, 5, 2, 3, 1, 2, ORDER_FORTRAN];
        let s = build_one(contents(SUBARRAY, ints, vec![]), Type::dense(8), 8).unwrap();
        let want = crate::construct::subarray(&[4, 5], &[2, 3], &[1, 2], crate::Order::Fortran, 8)
            .unwrap();
        assert_eq!(canonicalize(s), canonicalize(want));
        // Too few integers is an error, not a panic.
        assert!(matches!(
            build_one(contents(SUBARRAY, vec![3, 4], vec![]), Type::dense(8), 8),
            Err(Error::Unsupported { .. })
        ));
        assert!(matches!(
            build_one(contents(HVECTOR, vec![3, 1], vec![]), Type::dense(8), 8),
            Err(Error::Unsupported { .. })
        ));
    }
}
