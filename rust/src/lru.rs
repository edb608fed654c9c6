//! An O(1) recency list over arena slots: the "least recently used" half of the automaton's
//! LRU eviction (the automaton's node budget, step 9 of a decoding step).
//!
//! The automaton keeps its trie nodes in a `Vec` and names them by slot (`u32`). This list
//! threads those slots on an intrusive doubly linked list, most recent at the head, least
//! recent at the tail, so that "touch" (move to the head), "remove" and "who is least
//! recent?" are all O(1) with no allocation once the slots exist:
//!
//! ```text
//!   head (most recent)                                   tail (least recent)
//!     [7] <-> [3] <-> [12] <-> [1] <-> ... <-> [5] <-> [9]
//! ```
//!
//! The list knows nothing of tries; the automaton decides the order of touches (bottom-up, so
//! that a parent is never less recent than its children and the tail is always a leaf).

/// Marks "no slot" in a link.
const NIL: u32 = u32::MAX;

/// A slot's neighbours. A slot is on the list iff it has a newer neighbour or is the head
/// (so no separate flag: 8 bytes per slot).
#[derive(Clone, Copy, Debug)]
struct Link {
    /// The next more recent slot (towards the head), or `NIL`.
    newer: u32,
    /// The next less recent slot (towards the tail), or `NIL`.
    older: u32,
}

const UNLINKED: Link = Link {
    newer: NIL,
    older: NIL,
};

/// A doubly linked recency list over slots `0..capacity`; every operation is O(1).
///
/// ```
/// use racer_ref::lru::RecencyList;
/// let mut lru = RecencyList::new();
/// for slot in [1, 2, 3] {
///     lru.touch(slot);                      // 3 is now the most recent
/// }
/// lru.touch(1);                             // 1 moves to the head
/// assert_eq!(lru.iter().collect::<Vec<_>>(), vec![1, 3, 2]);
/// assert_eq!(lru.least_recent(), Some(2));  // the eviction victim
/// lru.remove(2);
/// assert_eq!(lru.least_recent(), Some(3));
/// ```
#[derive(Clone, Debug, Default)]
pub struct RecencyList {
    links: Vec<Link>,
    head: u32,
    tail: u32,
    len: usize,
}

impl RecencyList {
    /// An empty list.
    pub fn new() -> Self {
        RecencyList {
            links: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    /// Unlink every slot (keeps the allocated memory).
    pub fn clear(&mut self) {
        self.links.clear();
        self.head = NIL;
        self.tail = NIL;
        self.len = 0;
    }

    /// Number of slots on the list.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `slot` is on the list.
    pub fn contains(&self, slot: u32) -> bool {
        self.head == slot
            || self
                .links
                .get(slot as usize)
                .is_some_and(|l| l.newer != NIL)
    }

    /// The least recently used slot (the tail), if any.
    pub fn least_recent(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    /// The most recently used slot (the head), if any.
    pub fn most_recent(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// Make `slot` the most recent one, adding it to the list if it is not there yet.
    #[inline]
    pub fn touch(&mut self, slot: u32) {
        let old_head = self.head;
        // Already the most recent: nothing moves. This is the common case when the
        // automaton touches a path it has just touched.
        if old_head == slot {
            return;
        }
        let s = slot as usize;
        // Links grow with the arena, on demand: a slot the list has never seen is unlinked.
        if s >= self.links.len() {
            self.links.resize(s + 1, UNLINKED);
        }
        // Work on a local slice: the compiler can then keep its pointer in a register.
        let links = &mut self.links[..];
        let Link { newer, older } = links[s];
        if newer != NIL {
            // On the list and not the head (checked above): close the gap it leaves.
            // `newer` is then a real slot, so only the older side can be the tail.
            links[newer as usize].older = older;
            if older != NIL {
                links[older as usize].newer = newer;
            } else {
                self.tail = newer;
            }
        } else {
            // Not on the list yet: it joins.
            self.len += 1;
        }
        // Push at the head.
        links[s] = Link {
            newer: NIL,
            older: old_head,
        };
        if old_head != NIL {
            links[old_head as usize].newer = slot;
        } else {
            self.tail = slot;
        }
        self.head = slot;
    }

    /// Take `slot` off the list (no-op if it is not on it).
    #[inline]
    pub fn remove(&mut self, slot: u32) {
        // `unlink` assumes the slot is on the list; a slot that is not has nothing to undo.
        if self.contains(slot) {
            self.unlink(slot);
        }
    }

    /// Slots from the most recent to the least recent.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            if at == NIL {
                return None;
            }
            let here = at;
            at = self.links[here as usize].older;
            Some(here)
        })
    }

    /// Take `slot` (on the list) off it: its neighbours point at each other, and the head
    /// or the tail moves when `slot` was one of them.
    fn unlink(&mut self, slot: u32) {
        let Link { newer, older, .. } = self.links[slot as usize];
        if newer != NIL {
            self.links[newer as usize].older = older;
        } else {
            self.head = older;
        }
        if older != NIL {
            self.links[older as usize].newer = newer;
        } else {
            self.tail = newer;
        }
        // Unlinked again, so `contains` says no and a later `touch` adds it afresh.
        self.links[slot as usize] = UNLINKED;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(l: &RecencyList) -> Vec<u32> {
        l.iter().collect()
    }

    #[test]
    fn touch_moves_to_head_and_tail_is_least_recent() {
        let mut l = RecencyList::new();
        for s in [1, 2, 3] {
            l.touch(s);
        }
        assert_eq!(order(&l), vec![3, 2, 1]);
        assert_eq!(l.least_recent(), Some(1));
        l.touch(1);
        assert_eq!(order(&l), vec![1, 3, 2]);
        assert_eq!(l.least_recent(), Some(2));
        assert_eq!(l.most_recent(), Some(1));
        assert_eq!(l.len(), 3);
    }

    #[test]
    fn remove_head_middle_tail() {
        let mut l = RecencyList::new();
        for s in 0..5 {
            l.touch(s);
        }
        l.remove(2); // middle
        assert_eq!(order(&l), vec![4, 3, 1, 0]);
        l.remove(4); // head
        l.remove(0); // tail
        assert_eq!(order(&l), vec![3, 1]);
        assert_eq!(l.least_recent(), Some(1));
        l.remove(7); // never linked: no-op
        assert_eq!(l.len(), 2);
        l.remove(3);
        l.remove(1);
        assert!(l.is_empty());
        assert_eq!(l.least_recent(), None);
        assert_eq!(l.most_recent(), None);
    }

    #[test]
    fn clear_then_reuse() {
        let mut l = RecencyList::new();
        l.touch(3);
        l.touch(0);
        l.clear();
        assert!(l.is_empty());
        assert!(!l.contains(3));
        l.touch(3);
        assert_eq!(order(&l), vec![3]);
    }
}
