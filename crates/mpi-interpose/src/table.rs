//! The request table: which outstanding MPI requests the interposer started, and what must
//! happen when each completes (a receive's unpack, a staging buffer's release).
//!
//! Requests are keyed by their handle's bits. A request is the interposer's from the moment its
//! `MPI_Isend`/`MPI_Irecv` returns until a wait or test completes it; the real MPI then sets the
//! caller's handle to `MPI_REQUEST_NULL`, which is how completion is told for every wait and
//! test alike ([`RequestTable::take_completed`]). An entry is removed as it completes, before
//! the real MPI can hand the same handle out again.

use rustc_hash::FxHashMap;

/// Outstanding requests of the interposer, each with its pending work `P`.
#[derive(Debug)]
pub struct RequestTable<P> {
    pending: FxHashMap<u64, P>,
}

impl<P> Default for RequestTable<P> {
    fn default() -> Self {
        Self {
            pending: FxHashMap::default(),
        }
    }
}

impl<P> RequestTable<P> {
    /// Records `work` for the request `handle`. A previous entry of the same handle (which can
    /// only be stale) is returned.
    pub fn insert(&mut self, handle: u64, work: P) -> Option<P> {
        self.pending.insert(handle, work)
    }

    /// Whether any of `handles` is the interposer's.
    pub fn any(&self, handles: &[u64]) -> bool {
        !self.pending.is_empty() && handles.iter().any(|h| self.pending.contains_key(h))
    }

    /// Whether `handle` is the interposer's.
    pub fn contains(&self, handle: u64) -> bool {
        self.pending.contains_key(&handle)
    }

    /// The entry of `handle`.
    pub fn get(&self, handle: u64) -> Option<&P> {
        self.pending.get(&handle)
    }

    /// The entries of `handles` that `pick` finds something in, each once, in the order of
    /// `handles`.
    pub fn pick_mut<'a, T>(
        &'a mut self,
        handles: &[u64],
        mut pick: impl FnMut(&'a mut P) -> Option<T>,
    ) -> Vec<T> {
        let mut found: Vec<(usize, T)> = self
            .pending
            .iter_mut()
            .filter_map(|(h, p)| Some((handles.iter().position(|x| x == h)?, p)))
            .filter_map(|(i, p)| Some((i, pick(p)?)))
            .collect();
        found.sort_by_key(|(i, _)| *i);
        found.into_iter().map(|(_, t)| t).collect()
    }

    /// Removes and returns the entry of `handle`.
    pub fn remove(&mut self, handle: u64) -> Option<P> {
        self.pending.remove(&handle)
    }

    /// Outstanding requests.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no request is outstanding.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// After a wait or test: the requests of `before` (the handles passed in) that are the
    /// interposer's and that the real MPI completed (their slot in `after` is now `null`),
    /// removed from the table, with their index in the array.
    ///
    /// # Panics
    /// Never; `before` and `after` of different lengths are compared over the shorter.
    pub fn take_completed(&mut self, before: &[u64], after: &[u64], null: u64) -> Vec<(usize, P)> {
        let mut done = Vec::new();
        for (i, (&b, &a)) in before.iter().zip(after).enumerate() {
            if b != null && a == null {
                if let Some(p) = self.pending.remove(&b) {
                    done.push((i, p));
                }
            }
        }
        done
    }
}

/// Where the status of array slot `index` is, after `MPI_Waitsome`/`MPI_Testsome`: the position
/// `j` with `indices[j] == index` among the first `outcount`.
pub fn status_slot_of_some(indices: &[i32], outcount: i32, index: usize) -> Option<usize> {
    let n = usize::try_from(outcount).ok()?.min(indices.len());
    indices[..n]
        .iter()
        .position(|&i| usize::try_from(i).ok() == Some(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NULL: u64 = 0;

    #[test]
    fn completed_requests_are_those_set_to_null() {
        let mut t = RequestTable::default();
        assert!(t.is_empty());
        t.insert(10, "recv a");
        t.insert(20, "send b");
        t.insert(30, "recv c");
        assert_eq!(t.len(), 3);
        // 99 is not ours; 10 and 99 complete, 30 stays, 20 is not in this call.
        let before = [99, 10, 30];
        assert!(t.any(&before));
        assert!(!t.any(&[99, 98]));
        let after = [NULL, NULL, 30];
        let done = t.take_completed(&before, &after, NULL);
        assert_eq!(done, vec![(1, "recv a")]);
        assert!(!t.contains(10) && t.contains(20) && t.contains(30));
        // A slot that was already null is not a completion.
        assert!(t.take_completed(&[NULL], &[NULL], NULL).is_empty());
        // Completion removes: the same handle, reused by the MPI later, is not ours.
        assert!(t.take_completed(&[10], &[NULL], NULL).is_empty());
        assert_eq!(t.take_completed(&[30, 20], &[NULL, NULL], NULL).len(), 2);
        assert!(t.is_empty());
    }

    #[test]
    fn picked_entries_come_in_the_order_of_the_handles() {
        let mut t = RequestTable::default();
        for (h, w) in [
            (10, "recv a"),
            (20, "send b"),
            (30, "recv c"),
            (40, "recv d"),
        ] {
            t.insert(h, w.to_owned());
        }
        // 99 is not ours, 40 is not asked for, 20 is not picked; the order is the array's.
        let picked = t.pick_mut(&[30, 99, 20, 10], |w| w.starts_with("recv").then_some(w));
        assert_eq!(picked, vec!["recv c", "recv a"]);
        for w in picked {
            w.push_str(" (claimed)");
        }
        assert_eq!(t.get(30).map(String::as_str), Some("recv c (claimed)"));
        assert_eq!(t.get(40).map(String::as_str), Some("recv d"));
        assert_eq!(t.get(99), None);
        assert!(t.pick_mut(&[], Some).is_empty());
    }

    #[test]
    fn reinsert_returns_the_stale_entry() {
        let mut t = RequestTable::default();
        assert_eq!(t.insert(7, 1), None);
        assert_eq!(t.insert(7, 2), Some(1));
        assert_eq!(t.remove(7), Some(2));
        assert_eq!(t.remove(7), None);
    }

    #[test]
    fn waitsome_status_positions() {
        let indices = [4, 0, 2, 77];
        assert_eq!(status_slot_of_some(&indices, 3, 0), Some(1));
        assert_eq!(status_slot_of_some(&indices, 3, 2), Some(2));
        assert_eq!(status_slot_of_some(&indices, 3, 1), None);
        // Beyond outcount, and MPI_UNDEFINED (negative), find nothing.
        assert_eq!(status_slot_of_some(&indices, 3, 77), None);
        assert_eq!(status_slot_of_some(&indices, -32766, 4), None);
        assert_eq!(status_slot_of_some(&indices, 10, 77), Some(3));
    }
}
