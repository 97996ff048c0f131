//! The datatype cache: each committed datatype the IR can express, decoded once at
//! `MPI_Type_commit` and dropped at `MPI_Type_free`, with its plans per element count.

use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::sync::{Arc, Mutex, OnceLock};

use datatype_pack::{mpi_decode, StridedBlock, Type};
use mpi::ffi;

use crate::handle::key;

/// What MPI says of a datatype, kept to notice a handle that was freed and reused behind the
/// interposer's back (through an interface it does not see).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// `MPI_Type_size_x`.
    pub size: i64,
    /// `MPI_Type_get_extent_x`: lower bound.
    pub lb: i64,
    /// `MPI_Type_get_extent_x`: extent.
    pub extent: i64,
}

impl Signature {
    /// The signature of `dt`, or `None` if MPI refuses.
    ///
    /// # Safety
    /// MPI initialized; `dt` a live datatype handle.
    #[allow(clippy::useless_conversion)] // MPI_Count is the MPI's type
    pub unsafe fn of(dt: ffi::MPI_Datatype) -> Option<Signature> {
        let mut size: ffi::MPI_Count = 0;
        let (mut lb, mut extent): (ffi::MPI_Count, ffi::MPI_Count) = (0, 0);
        // SAFETY: the caller's contract; the out-pointers are valid.
        let rc1 = unsafe { ffi::PMPI_Type_size_x(dt, &mut size) };
        // SAFETY: as above.
        let rc2 = unsafe { ffi::PMPI_Type_get_extent_x(dt, &mut lb, &mut extent) };
        (rc1 == 0 && rc2 == 0).then(|| Signature {
            size: i64::from(size),
            lb: i64::from(lb),
            extent: i64::from(extent),
        })
    }
}

/// One decoded datatype.
#[derive(Debug)]
pub struct Layout {
    /// The layout of one element, canonical, relative to the buffer address.
    pub one: Type,
    /// MPI's signature of the datatype at commit.
    pub signature: Signature,
    plans: Mutex<FxHashMap<u64, Option<Arc<StridedBlock>>>>,
}

/// Elements per message above which plans are not kept (each count is its own plan).
const PLAN_CACHE_LIMIT: usize = 64;

impl Layout {
    /// A layout of one element with MPI's signature.
    pub fn new(one: Type, signature: Signature) -> Layout {
        Layout {
            one,
            signature,
            plans: Mutex::new(FxHashMap::default()),
        }
    }

    /// Packed bytes of one element.
    pub fn element_size(&self) -> u64 {
        u64::try_from(self.signature.size).unwrap_or(0)
    }

    /// The plan of `count` elements placed one extent apart, or `None` where the plan cannot be
    /// lowered (a negative stride, bytes before the buffer address) or is contiguous (nothing
    /// to gain: the real MPI moves it as it is).
    pub fn plan(&self, count: u64) -> Option<Arc<StridedBlock>> {
        let mut plans = lock(&self.plans);
        if let Some(p) = plans.get(&count) {
            return p.clone();
        }
        let t = Type::stream(count, self.signature.extent, self.one.clone());
        let p = StridedBlock::from_type(&t)
            .ok()
            .filter(|p| !p.is_contiguous() && p.packed_size() == self.element_size() * count)
            .map(Arc::new);
        if plans.len() >= PLAN_CACHE_LIMIT {
            plans.clear();
        }
        plans.insert(count, p.clone());
        p
    }

    /// The plan of `count` elements, contiguous or not (a short receive's whole elements).
    pub fn raw_plan(&self, count: u64) -> Option<StridedBlock> {
        let t = Type::stream(count, self.signature.extent, self.one.clone());
        StridedBlock::from_type(&t).ok()
    }
}

pub use crate::sync::lock;

fn cache() -> &'static Mutex<FxHashMap<u64, Arc<Layout>>> {
    static CACHE: OnceLock<Mutex<FxHashMap<u64, Arc<Layout>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(FxHashMap::default()))
}

thread_local! {
    /// Set while the decoder runs: the datatypes it frees (from `MPI_Type_get_contents`, which
    /// may hand back the very handles a program holds) must not drop cache entries.
    static DECODING: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is inside the decoder.
pub fn decoding() -> bool {
    DECODING.with(Cell::get)
}

/// Decodes the just-committed `dt` into the cache. Returns what happened, for the log.
///
/// # Safety
/// MPI initialized; `dt` a live, committed datatype handle.
pub unsafe fn on_commit(dt: ffi::MPI_Datatype) -> String {
    if decoding() {
        return "inside the decoder".to_owned();
    }
    DECODING.with(|d| d.set(true));
    // SAFETY: the caller's contract.
    let decoded = unsafe { mpi_decode::decode_raw(dt) };
    DECODING.with(|d| d.set(false));
    // SAFETY: the caller's contract.
    let sig = unsafe { Signature::of(dt) };
    let k = key(dt);
    match (decoded, sig) {
        (Ok(one), Some(signature)) => {
            let mut text = format!("decoded: {} bytes per element", signature.size);
            let layout = Arc::new(Layout::new(one, signature));
            lock(cache()).insert(k, layout.clone());
            if let Some(plan) = layout.plan(1) {
                if let Some(dev) = crate::engine::precompile(&plan) {
                    text.push_str(&format!("; kernels compiled for device {dev}"));
                }
            }
            text
        }
        (Err(e), _) => {
            lock(cache()).remove(&k);
            format!("passes through: {e}")
        }
        (_, None) => {
            lock(cache()).remove(&k);
            "passes through: MPI gave no size or extent".to_owned()
        }
    }
}

/// Drops `dt`'s entry (before the real `MPI_Type_free` releases the handle). Returns whether
/// there was one.
pub fn on_free(dt: ffi::MPI_Datatype) -> bool {
    if decoding() {
        return false;
    }
    lock(cache()).remove(&key(dt)).is_some()
}

/// The cached layout of `dt`, if it was decoded and MPI still describes it the same way.
///
/// # Safety
/// MPI initialized; `dt` a datatype handle the caller passed to MPI (live, as MPI requires).
pub unsafe fn lookup(dt: ffi::MPI_Datatype) -> Option<Arc<Layout>> {
    let k = key(dt);
    let layout = {
        let c = lock(cache());
        if c.is_empty() {
            return None;
        }
        c.get(&k)?.clone()
    };
    // SAFETY: the caller's contract.
    match unsafe { Signature::of(dt) } {
        Some(s) if s == layout.signature => Some(layout),
        _ => {
            lock(cache()).remove(&k);
            None
        }
    }
}

/// Decoded datatypes in the cache.
pub fn cached() -> usize {
    lock(cache()).len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datatype_pack::construct::vector;

    fn sig(size: i64, extent: i64) -> Signature {
        Signature {
            size,
            lb: 0,
            extent,
        }
    }

    #[test]
    fn plans_per_count_and_contiguous_ones_refused() {
        // 3 blocks of 8 bytes, 32 apart: extent 72.
        let l = Layout::new(vector(3, 1, 4, 8).unwrap(), sig(24, 72));
        let p = l.plan(2).unwrap();
        assert_eq!(p.packed_size(), 48);
        assert_eq!(l.plan(2), Some(p));
        assert_eq!(l.element_size(), 24);
        // A dense element whose copies touch: contiguous, the real MPI's business.
        let dense = Layout::new(Type::dense(8), sig(8, 8));
        assert_eq!(dense.plan(10), None);
        // A resized dense element with a gap between copies is not.
        let gappy = Layout::new(Type::dense(8), sig(8, 16));
        assert_eq!(gappy.plan(4).unwrap().packed_size(), 32);
        // A size that disagrees with MPI's is refused.
        let wrong = Layout::new(vector(3, 1, 4, 8).unwrap(), sig(16, 72));
        assert_eq!(wrong.plan(1), None);
    }

    #[test]
    fn many_counts_stay_bounded() {
        let l = Layout::new(vector(2, 1, 2, 4).unwrap(), sig(8, 12));
        for c in 1..200 {
            assert!(l.plan(c).is_some());
        }
        assert!(lock(&l.plans).len() <= PLAN_CACHE_LIMIT);
    }
}
