//! Python buffers (NumPy arrays, or anything with the buffer protocol) as host buffers of the
//! library: acquired with `PyObject_GetBuffer`, checked for a supported dtype, C-contiguity and
//! alignment, and released when dropped; and result arrays allocated with NumPy.

use std::cell::RefCell;
use std::ffi::CStr;
use std::fmt::Write as _;
use std::mem::ManuallyDrop;

use collectives_core::Element;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::element::{Elem, SUPPORTED};
use crate::errors::{InvalidArgumentError, UnsupportedError};

/// A Python buffer held for the library: the exporter (a NumPy array) cannot resize or free its
/// memory until this is dropped, which releases it (`PyBuffer_Release`, under the GIL, which every
/// owner of a `HostBuf` holds: it is neither `Send` nor `Sync`).
pub struct HostBuf {
    /// Boxed so that its address stays the one the exporter filled in (some exporters point
    /// `shape` into the struct itself) for as long as it is held; the box goes back to
    /// [`SPARE`] when released.
    view: ManuallyDrop<Box<ffi::Py_buffer>>,
    /// The element type its format names.
    pub elem: Elem,
    /// Number of elements.
    pub len: usize,
}

impl std::fmt::Debug for HostBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuf")
            .field("elem", &self.elem)
            .field("len", &self.len)
            .field("at", &self.view.buf)
            .finish()
    }
}

impl HostBuf {
    /// Hold `obj`'s buffer for reading (`writable` false: a send buffer) or writing (a receive
    /// buffer). `what` names the argument in messages (`"send"`, `"recv"`, `"buf"`).
    ///
    /// # Errors
    /// `InvalidArgumentError` for an object without the buffer protocol, a read-only object as a
    /// writable buffer, memory that is not C-contiguous (naming `np.ascontiguousarray`) or not
    /// aligned for its dtype; `UnsupportedError` for a dtype the library has no element type for.
    pub fn acquire(obj: &Bound<'_, PyAny>, what: &str, writable: bool) -> PyResult<HostBuf> {
        let py = obj.py();
        let flags = if writable {
            ffi::PyBUF_RECORDS
        } else {
            ffi::PyBUF_RECORDS_RO
        };
        let mut view = spare();
        // SAFETY: `obj` is a live object (borrowed for this call, GIL held) and `view` points to a
        // zeroed `Py_buffer` that outlives the call; on success the exporter filled it in and we
        // own one export, given back in `Drop`.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } != 0 {
            let cause = PyErr::take(py)
                .map(|e| e.to_string())
                .unwrap_or_else(|| "no buffer".to_owned());
            recycle(view);
            let msg = if writable && obj.hasattr("flags").unwrap_or(false) && is_read_only(obj) {
                format!("{what}: the array is read-only, and {what} is written into; pass a writable array ({cause})")
            } else {
                format!(
                    "{what}: expected a NumPy array or another object with the buffer protocol, \
                     got {} ({cause})",
                    type_name(obj)
                )
            };
            return Err(InvalidArgumentError::new_err(msg));
        }
        // From here `held` releases the view on every path.
        let held = Held(view);
        let v = &*held.0;
        let format: &CStr = if v.format.is_null() {
            c"B"
        } else {
            // SAFETY: we asked for PyBUF_FORMAT, so a non-null `format` is a NUL-terminated string
            // owned by the exporter for the life of the view.
            unsafe { CStr::from_ptr(v.format) }
        };
        let itemsize = usize::try_from(v.itemsize).unwrap_or(0);
        let Some(elem) = Elem::from_format(format, itemsize) else {
            return Err(UnsupportedError::new_err(format!(
                "{what}: dtype {} (buffer format {:?}, {itemsize} bytes) is not an element type \
                 of collectives; use one of {SUPPORTED}",
                dtype_name(obj),
                format.to_string_lossy()
            )));
        };
        // SAFETY: `v` is a filled-in view; PyBuffer_IsContiguous reads its shape and strides.
        if unsafe { ffi::PyBuffer_IsContiguous(v, b'C' as std::ffi::c_char) } == 0 {
            return Err(InvalidArgumentError::new_err(format!(
                "{what}: array of shape {} with strides {} is not C-contiguous; pass \
                 np.ascontiguousarray({what}) (for a receive buffer, receive into a contiguous \
                 array and copy it back)",
                // SAFETY: we asked for PyBUF_STRIDES, so shape and strides hold `ndim` values.
                unsafe { dims(v.shape, v.ndim) },
                // SAFETY: as above.
                unsafe { dims(v.strides, v.ndim) },
            )));
        }
        if (v.buf as usize) % elem.align() != 0 {
            return Err(InvalidArgumentError::new_err(format!(
                "{what}: the data at {:p} is not aligned for {}; pass a copy ({what}.copy())",
                v.buf,
                elem.numpy_name()
            )));
        }
        let len = usize::try_from(v.len).unwrap_or(0) / itemsize;
        Ok(HostBuf {
            view: ManuallyDrop::new(held.take()),
            elem,
            len,
        })
    }

    /// The elements, to read.
    ///
    /// # Safety
    /// `T` must be the Rust type of [`elem`](Self::elem) (what [`dispatch!`](crate::element::dispatch)
    /// gives), and nothing may write the memory while the slice lives (from Rust: the slice
    /// borrows `self`; from Python: the buffer's exporter is the caller's, whom the docs ask not
    /// to touch arrays in flight).
    pub unsafe fn slice<T: Element>(&self) -> &[T] {
        debug_assert_eq!(std::mem::size_of::<T>(), self.elem.size());
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the view holds `len` elements of `T` (format checked against `T`'s size and
        // alignment at acquisition), C-contiguous, kept alive by the export we hold.
        unsafe { std::slice::from_raw_parts(self.view.buf.cast::<T>(), self.len) }
    }

    /// The elements, to write.
    ///
    /// # Safety
    /// As [`slice`](Self::slice), and `self` must have been acquired writable; nothing else may
    /// read or write the memory while the slice lives.
    pub unsafe fn slice_mut<T: Element>(&mut self) -> &mut [T] {
        debug_assert_eq!(std::mem::size_of::<T>(), self.elem.size());
        debug_assert_eq!(self.view.readonly, 0);
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `slice`; the exporter granted a writable view (PyBUF_WRITABLE).
        unsafe { std::slice::from_raw_parts_mut(self.view.buf.cast::<T>(), self.len) }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        // SAFETY: `self.view` is never used again: moved out exactly once, here.
        let mut view = unsafe { ManuallyDrop::take(&mut self.view) };
        // SAFETY: the view was filled in by a successful PyObject_GetBuffer and is released once,
        // here, with the GIL held (a HostBuf never leaves the thread that holds it).
        unsafe { ffi::PyBuffer_Release(&mut *view) };
        recycle(view);
    }
}

thread_local! {
    /// Released views, kept for the next acquisitions: the hot path allocates nothing. Boxes,
    /// not values: each moves whole into a `HostBuf`, whose view must keep its address.
    #[allow(clippy::vec_box)]
    static SPARE: RefCell<Vec<Box<ffi::Py_buffer>>> = const { RefCell::new(Vec::new()) };
}

/// How many released views [`SPARE`] keeps.
const SPARE_KEPT: usize = 16;

/// A view to fill in: a released one, or a new one.
fn spare() -> Box<ffi::Py_buffer> {
    SPARE
        .with(|s| s.borrow_mut().pop())
        .unwrap_or_else(|| Box::new(ffi::Py_buffer::new()))
}

/// Keep a released (or never filled-in) view for [`spare`].
fn recycle(view: Box<ffi::Py_buffer>) {
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARE_KEPT {
            s.push(view);
        }
    });
}

/// A view being checked: released if the checks fail.
struct Held(Box<ffi::Py_buffer>);

impl Held {
    fn take(self) -> Box<ffi::Py_buffer> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped, so the box is moved out exactly once.
        unsafe { std::ptr::read(&me.0) }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: as for `HostBuf`'s drop (the box itself is freed, not recycled: errors are
        // not the hot path).
        unsafe { ffi::PyBuffer_Release(&mut *self.0) };
    }
}

/// `(4, 3)` from a shape or strides array of `ndim` values.
///
/// # Safety
/// `p` points to `ndim` values, or is null.
unsafe fn dims(p: *const ffi::Py_ssize_t, ndim: std::ffi::c_int) -> String {
    let n = usize::try_from(ndim).unwrap_or(0);
    let values: &[ffi::Py_ssize_t] = if p.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(p, n) }
    };
    let mut s = String::from("(");
    for (i, x) in values.iter().enumerate() {
        let _ = write!(s, "{}{x}", if i > 0 { ", " } else { "" });
    }
    if values.len() == 1 {
        s.push(',');
    }
    s.push(')');
    s
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

fn dtype_name(obj: &Bound<'_, PyAny>) -> String {
    obj.getattr("dtype")
        .and_then(|d| d.str())
        .map(|s| s.to_string())
        .unwrap_or_else(|_| type_name(obj))
}

fn is_read_only(obj: &Bound<'_, PyAny>) -> bool {
    obj.getattr("flags")
        .and_then(|f| f.getattr("writeable"))
        .and_then(|w| w.extract::<bool>())
        .map(|w| !w)
        .unwrap_or(false)
}

/// `numpy.empty` and one dtype object per element, looked up once.
struct Numpy {
    empty: Py<PyAny>,
    dtypes: Vec<Py<PyAny>>,
}

static NUMPY: PyOnceLock<Numpy> = PyOnceLock::new();

const ALL: [Elem; Elem::COUNT] = [
    Elem::I8,
    Elem::U8,
    Elem::I32,
    Elem::U32,
    Elem::I64,
    Elem::U64,
    Elem::F16,
    Elem::F32,
    Elem::F64,
    Elem::C64,
    Elem::C128,
];

/// A new one-dimensional NumPy array of `n` elements of `elem` (uninitialized, as `numpy.empty`).
///
/// # Errors
/// NumPy cannot be imported, or cannot allocate.
pub fn empty<'py>(py: Python<'py>, elem: Elem, n: usize) -> PyResult<Bound<'py, PyAny>> {
    let np = NUMPY.get_or_try_init(py, || -> PyResult<Numpy> {
        let numpy = py.import("numpy").map_err(|e| {
            PyBufferError::new_err(format!(
                "allocating a result array needs NumPy (pip install numpy): {e}"
            ))
        })?;
        let dtype = numpy.getattr("dtype")?;
        let dtypes = ALL
            .iter()
            .map(|e| dtype.call1((e.numpy_name(),)).map(Bound::unbind))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Numpy {
            empty: numpy.getattr("empty")?.unbind(),
            dtypes,
        })
    })?;
    let args = PyTuple::new(
        py,
        [
            n.into_pyobject(py)?.into_any(),
            np.dtypes[elem.index()].bind(py).clone(),
        ],
    )?;
    np.empty.bind(py).call1(args)
}

impl HostBuf {
    /// The byte range the buffer covers.
    fn range(&self) -> std::ops::Range<usize> {
        let start = self.view.buf as usize;
        start..start + self.len * self.elem.size()
    }
}

/// Check that a receive buffer fits its send buffer: the same element type, and no shared
/// memory (what Rust's borrow rules refuse at compile time; in place is its own method).
///
/// # Errors
/// `InvalidArgumentError` naming both dtypes, or the overlap.
pub fn pair(send: &HostBuf, recv: &HostBuf, op: &str) -> PyResult<()> {
    if send.elem != recv.elem {
        return Err(InvalidArgumentError::new_err(format!(
            "{op}: send is {} but recv is {}; pass arrays of one dtype",
            send.elem.numpy_name(),
            recv.elem.numpy_name()
        )));
    }
    let (a, b) = (send.range(), recv.range());
    if !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end {
        return Err(InvalidArgumentError::new_err(format!(
            "{op}: send and recv share memory; use separate arrays (or the in-place form)"
        )));
    }
    Ok(())
}
