//! Plumbing of the staged backend: the pinned host buffers (a pool of leases), copies of element
//! ranges between device and pinned memory on a stream, and the chunk size of pipelined transfers.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, PinnedHostSlice};

use crate::backend::mpi_cuda::raw_cuda as cuda;
use crate::element::Element;
use crate::error::{Error, Result};

/// Environment variable: the chunk size of pipelined all-reduces, in bytes (suffixes `K`, `M`, `G`
/// are powers of 1024).
pub const CHUNK_ENV: &str = "COLLECTIVES_STAGED_CHUNK";

/// Environment variable: the most pinned host memory the pool keeps between operations, in bytes.
pub const POOL_ENV: &str = "COLLECTIVES_STAGED_POOL";

/// The chunk size when [`CHUNK_ENV`] is not set: 4 MiB was the best or close to it from 16 MiB to 256 MiB
/// on 2xH200 (docs/PERFORMANCE.md, "Staged MPI: the all-reduce chunk size").
pub const DEFAULT_CHUNK_BYTES: usize = 4 << 20;

/// The pool's limit when [`POOL_ENV`] is not set.
pub const DEFAULT_POOL_BYTES: usize = 1 << 30;

/// `4096`, `512K`, `4M`, `1G` (powers of 1024) as bytes; `None` for anything else or zero.
pub fn parse_bytes(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 10),
        (i, 'm' | 'M') => (&t[..i], 20),
        (i, 'g' | 'G') => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: usize = digits.trim().parse().ok()?;
    n.checked_mul(1usize << shift).filter(|&b| b > 0)
}

/// The value of a byte-count variable, else `default`.
pub(crate) fn env_bytes(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| parse_bytes(&v))
        .unwrap_or(default)
}

/// Element ranges of at most `chunk` elements (at least one) covering `0..len`.
pub fn chunks(len: usize, chunk: usize) -> Vec<Range<usize>> {
    let chunk = chunk.max(1);
    (0..len)
        .step_by(chunk)
        .map(|a| a..(a + chunk).min(len))
        .collect()
}

/// One pinned (page-locked, cacheable) host allocation.
pub(crate) struct Pinned {
    buf: PinnedHostSlice<u8>,
    /// `buf`'s address, taken once: the memory never moves.
    ptr: *mut u8,
}

impl Pinned {
    fn alloc(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Pinned> {
        const OP: &str = "pinned";
        // Cacheable pinned memory (flags 0): cudarc's default, write-combined memory, is slow for the
        // CPU to read, and MPI reads these buffers on the CPU.
        // SAFETY: the memory is zeroed below before any slice of it is made.
        let mut buf =
            unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }.map_err(|e| cuda(OP, e))?;
        let ptr = buf.as_mut_ptr().map_err(|e| cuda(OP, e))?;
        // SAFETY: `ptr` addresses `bytes` bytes of memory owned by `buf`, touched by nothing else yet.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Ok(Pinned { buf, ptr })
    }

    fn capacity(&self) -> usize {
        self.buf.len()
    }
}

/// Pinned buffers kept for reuse: allocating page-locked memory costs milliseconds per call.
pub(crate) struct Pool {
    ctx: Arc<CudaContext>,
    free: RefCell<Vec<Pinned>>,
    limit: Cell<usize>,
}

impl Pool {
    pub(crate) fn new(ctx: Arc<CudaContext>, limit: usize) -> Pool {
        Pool {
            ctx,
            free: RefCell::new(Vec::new()),
            limit: Cell::new(limit),
        }
    }

    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.set(limit);
        self.trim();
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit.get()
    }

    /// Bytes held for reuse now.
    pub(crate) fn held(&self) -> usize {
        self.free.borrow().iter().map(Pinned::capacity).sum()
    }

    /// A host buffer of `len` elements of `T`, from the pool or newly pinned.
    pub(crate) fn lease<T: Element>(&self, op: &'static str, len: usize) -> Result<Lease<'_, T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::CountOverflow {
                op,
                count: len,
                limit: usize::MAX / std::mem::size_of::<T>(),
            })?;
        if bytes == 0 {
            return Ok(Lease {
                pool: self,
                pinned: None,
                len: 0,
                _element: PhantomData,
            });
        }
        let reuse = {
            let mut free = self.free.borrow_mut();
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, p)| p.capacity() >= bytes)
                .min_by_key(|(_, p)| p.capacity())
                .map(|(i, _)| i);
            best.map(|i| free.swap_remove(i))
        };
        let pinned = match reuse {
            Some(p) => p,
            None => Pinned::alloc(&self.ctx, bytes.next_power_of_two().max(4096))?,
        };
        Ok(Lease {
            pool: self,
            pinned: Some(pinned),
            len,
            _element: PhantomData,
        })
    }

    fn give_back(&self, pinned: Pinned) {
        self.free.borrow_mut().push(pinned);
        self.trim();
    }

    /// Keep buffers, largest first, while their total fits the limit; free the others.
    fn trim(&self) {
        let mut free = self.free.borrow_mut();
        free.sort_by_key(|p| std::cmp::Reverse(p.capacity()));
        let mut total = 0usize;
        free.retain(|p| match total.checked_add(p.capacity()) {
            Some(t) if t <= self.limit.get() => {
                total = t;
                true
            }
            _ => false,
        });
    }
}

/// A pinned host buffer of `len` elements of `T`, back in its pool when dropped. Whoever holds it has
/// waited for the copies into and out of it before reading, writing or dropping it.
pub(crate) struct Lease<'p, T> {
    pool: &'p Pool,
    pinned: Option<Pinned>,
    len: usize,
    _element: PhantomData<T>,
}

impl<T: Element> Lease<'_, T> {
    /// The elements.
    pub(crate) fn host(&self) -> &[T] {
        match &self.pinned {
            // SAFETY: the allocation holds at least `len * size_of::<T>()` initialized bytes (zeroed
            // when pinned, written since only as whole `T`s, which are Pod), is page-aligned, and is
            // owned by this lease alone; the borrow of `self` keeps it alive.
            Some(p) => unsafe { std::slice::from_raw_parts(p.ptr.cast::<T>(), self.len) },
            None => &[],
        }
    }

    /// The elements, to write.
    pub(crate) fn host_mut(&mut self) -> &mut [T] {
        match &mut self.pinned {
            // SAFETY: as in `host`, and the exclusive borrow of `self` makes this the only view.
            Some(p) => unsafe { std::slice::from_raw_parts_mut(p.ptr.cast::<T>(), self.len) },
            None => &mut [],
        }
    }
}

impl<T> Drop for Lease<'_, T> {
    fn drop(&mut self) {
        if let Some(p) = self.pinned.take() {
            self.pool.give_back(p);
        }
    }
}

/// Enqueue on `stream` a copy of elements `range` of `dev` into `host` (of `range.len()` elements).
/// The copy runs asynchronously: `host` must not be read before the stream (or an event recorded after
/// the copy) is waited for.
pub(crate) fn download<T: Element>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    dev: &CudaSlice<T>,
    range: Range<usize>,
    host: &mut [T],
) -> Result<()> {
    crate::check::same_len(op, "host", host.len(), "device range", range.len())?;
    if range.is_empty() {
        return Ok(());
    }
    let size = std::mem::size_of::<T>();
    // SAFETY: `dev` holds exactly `len * size` bytes, read as bytes.
    let bytes = unsafe { dev.transmute::<u8>(dev.len() * size) }
        .ok_or_else(|| Error::invalid(op, "device buffer size"))?;
    let part = bytes
        .try_slice(range.start * size..range.end * size)
        .ok_or_else(|| Error::invalid(op, "range outside the device buffer"))?;
    stream
        .memcpy_dtoh(&part, bytemuck::cast_slice_mut::<T, u8>(host))
        .map_err(|e| cuda(op, e))
}

/// Enqueue on `stream` a copy of `host` into elements `range` of `dev`. Asynchronous: `host` must stay
/// unchanged until the stream is waited for.
pub(crate) fn upload<T: Element>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    host: &[T],
    dev: &mut CudaSlice<T>,
    range: Range<usize>,
) -> Result<()> {
    crate::check::same_len(op, "host", host.len(), "device range", range.len())?;
    if range.is_empty() {
        return Ok(());
    }
    let size = std::mem::size_of::<T>();
    let total = dev.len() * size;
    // SAFETY: `dev` holds exactly `total` bytes; any bytes written are a valid `T` (Pod).
    let mut bytes = unsafe { dev.transmute_mut::<u8>(total) }
        .ok_or_else(|| Error::invalid(op, "device buffer size"))?;
    let mut part = bytes
        .try_slice_mut(range.start * size..range.end * size)
        .ok_or_else(|| Error::invalid(op, "range outside the device buffer"))?;
    stream
        .memcpy_htod(bytemuck::cast_slice::<T, u8>(host), &mut part)
        .map_err(|e| cuda(op, e))
}

/// Where cudarc does not track the buffer's uses (event tracking off, or a single stream in its
/// context), copies on `stream` are not ordered after the buffer's own stream: wait for it here.
pub(crate) fn foreign<T>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    buf: &CudaSlice<T>,
) -> Result<()> {
    if Arc::ptr_eq(buf.stream(), stream) || buf.context().is_managing_stream_synchronization() {
        return Ok(());
    }
    buf.stream().synchronize().map_err(|e| cuda(op, e))
}

/// Copy `dev` into `host` on `stream` and wait for the copy.
pub(crate) fn stage_in<T: Element>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    dev: &CudaSlice<T>,
    host: &mut [T],
) -> Result<()> {
    foreign(op, stream, dev)?;
    download(op, stream, dev, 0..dev.len(), host)?;
    stream.synchronize().map_err(|e| cuda(op, e))
}

/// Copy `host` into `dev` on `stream` and wait for the copy.
pub(crate) fn stage_out<T: Element>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    host: &[T],
    dev: &mut CudaSlice<T>,
) -> Result<()> {
    foreign(op, stream, dev)?;
    let len = dev.len();
    upload(op, stream, host, dev, 0..len)?;
    stream.synchronize().map_err(|e| cuda(op, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("512K"), Some(512 << 10));
        assert_eq!(parse_bytes(" 4m "), Some(4 << 20));
        assert_eq!(parse_bytes("1G"), Some(1 << 30));
        assert_eq!(parse_bytes("0"), None);
        assert_eq!(parse_bytes("4X"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("M"), None);
        assert_eq!(parse_bytes("99999999999999999999G"), None);
    }

    #[test]
    fn chunks_cover_the_range() {
        assert_eq!(chunks(0, 4), Vec::<Range<usize>>::new());
        assert_eq!(chunks(3, 4), vec![0..3]);
        assert_eq!(chunks(8, 4), vec![0..4, 4..8]);
        assert_eq!(chunks(9, 4), vec![0..4, 4..8, 8..9]);
        assert_eq!(chunks(2, 0), vec![0..1, 1..2]);
    }
}
