//! The logits tree (one decoding step, step 3; the paper's Eq. 3).
//!
//! Starting from the root we expand breadth-first with the copy-logit table. A node with
//! token `v` and breadth `b` gets the children `table[v][0..b)` in rank order, and child `j`
//! gets breadth `max(1, floor(b / 2^(j + [parent is not root])))`; the root's breadth is `k`.
//! With all tokens distinct, k = 8 and C = 64 this gives 1/8/19/24/12 nodes at depths 0..4.
//!
//! The logits tree grows *into* a tree that may already hold the retrieval tree (a
//! [`crate::draft_tree::TreeBuilder`]; this module sees it only through the [`GrowInto`]
//! trait, so that it depends on the copy-logit table alone and the draft tree depends on
//! it, not the other way round). Conceptually the logits tree is an endless breadth-first
//! sequence of (parent, token) candidates; we walk it and stop the moment the tree is full:
//!
//! * a new candidate costs one unit of budget and is queued for expansion ([`Insert::Added`]);
//! * a candidate that already exists (same parent, same token) costs nothing, is not
//!   duplicated, gains the logits bit (retrieval becomes "both") and is queued too, so the
//!   logits tree keeps growing beneath retrieval nodes ([`Insert::Existing`] without the
//!   logits bit before);
//! * a node the logits tree already expanded (a repeated id within one row) is skipped
//!   ([`Insert::Existing`] that had the logits bit already).
//!
//! Last-logit mode (ablation): the root's children come from `root_topk`, the top-k ids of
//! the logits that produced the root, instead of the root's table row; deeper nodes use the
//! table as usual.

use std::collections::VecDeque;

use crate::copy_logit::CopyLogitTable;
use crate::{NodeId, TokenId, SOURCE_LOGITS};

/// Breadth of child `j` (0-based rank) of a node with breadth `b` (paper Eq. 3):
/// `max(1, floor(b / 2^(j + [parent is not root])))`.
///
/// ```
/// use racer_ref::logits_tree::child_breadth;
/// // The root (breadth k = 8) gives its children 8 4 2 1 1 1 1 1 ...
/// let root: Vec<usize> = (0..8).map(|j| child_breadth(8, j, true)).collect();
/// assert_eq!(root, [8, 4, 2, 1, 1, 1, 1, 1]);
/// // ... and a node of breadth 8 below the root gives 4 2 1 1 ...
/// assert_eq!(child_breadth(8, 0, false), 4);
/// ```
#[inline]
pub fn child_breadth(b: usize, j: usize, parent_is_root: bool) -> usize {
    let shift = j + usize::from(!parent_is_root);
    // A shift of the word size or more is undefined for `>>`; the quotient is 0 anyway,
    // and every child keeps breadth at least 1.
    if shift >= usize::BITS as usize {
        1
    } else {
        (b >> shift).max(1)
    }
}

/// What [`GrowInto::insert_child`] did (the draft tree's
/// [`crate::draft_tree::TreeBuilder::insert_child`]).
///
/// ```
/// use racer_ref::draft_tree::{Insert, TreeBuilder, SOURCE_LOGITS, SOURCE_RETRIEVAL};
/// let mut b = TreeBuilder::new();
/// b.reset(0, 2)?;
/// assert_eq!(b.insert_child(0, 5, SOURCE_RETRIEVAL), Insert::Added(1));
/// // The same child again costs nothing; it is now drafted by both trees.
/// assert_eq!(b.insert_child(0, 5, SOURCE_LOGITS), Insert::Existing { node: 1, had: SOURCE_RETRIEVAL });
/// assert_eq!(b.insert_child(0, 6, SOURCE_LOGITS), Insert::Full); // capacity 2 is reached
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insert {
    /// A new node was created (it cost one unit of budget).
    Added(NodeId),
    /// The child already existed (it cost nothing).
    Existing {
        /// The existing child.
        node: NodeId,
        /// Its source bits before this insertion.
        had: u8,
    },
    /// The child does not exist and the tree is full.
    Full,
}

/// What the logits tree needs from the tree it grows into. Node 0 is the root.
///
/// ```
/// use std::collections::VecDeque;
/// use racer_ref::copy_logit::CopyLogitTable;
/// use racer_ref::logits_tree::{grow_logits_tree, GrowInto, Insert};
/// use racer_ref::{NodeId, TokenId};
///
/// /// A minimal tree: (parent, token) per node, every node from the logits tree.
/// struct Edges(Vec<(NodeId, TokenId)>, usize);
/// impl GrowInto for Edges {
///     fn is_full(&self) -> bool { self.0.len() >= self.1 }
///     fn token(&self, u: NodeId) -> TokenId { self.0[u as usize].1 }
///     fn insert_child(&mut self, parent: NodeId, token: TokenId, source: u8) -> Insert {
///         if let Some(node) = self.0.iter().position(|&e| e == (parent, token)) {
///             return Insert::Existing { node: node as NodeId, had: source };
///         }
///         if self.is_full() { return Insert::Full; }
///         self.0.push((parent, token));
///         Insert::Added(self.0.len() as NodeId - 1)
///     }
/// }
/// let mut table = CopyLogitTable::new(10, 2)?;
/// table.observe(&[0, 1], &[1, 2, 3, 4], [2, 2])?;
/// let mut tree = Edges(vec![(0, 0)], 4); // the root, token 0; room for 4 nodes
/// grow_logits_tree(&mut tree, &table, None, &mut VecDeque::new());
/// assert_eq!(tree.0, vec![(0, 0), (0, 1), (0, 2), (1, 3)]);
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
pub trait GrowInto {
    /// Whether no new node fits (the capacity is reached).
    fn is_full(&self) -> bool;
    /// The token of node `u`.
    fn token(&self, u: NodeId) -> TokenId;
    /// Find or create the child (`parent`, `token`) and add `source` to its source bits
    /// (see [`Insert`]). The logits tree calls it only when the tree is not full.
    fn insert_child(&mut self, parent: NodeId, token: TokenId, source: u8) -> Insert;
}

/// Grow the logits tree into `tree` (root = node 0) until the tree is full or no node is
/// left to expand. `root_topk` (at least `table.k()` ids) replaces the root's row.
/// `queue` is scratch space, cleared first, so that a drafter allocates it once.
///
/// ```
/// use std::collections::VecDeque;
/// use racer_ref::copy_logit::CopyLogitTable;
/// use racer_ref::draft_tree::TreeBuilder;
/// use racer_ref::logits_tree::grow_logits_tree;
///
/// let mut table = CopyLogitTable::new(10, 2)?;
/// table.observe(&[0, 1], &[1, 2, 3, 4], [2, 2])?; // row 0 = [1, 2], row 1 = [3, 4]
/// let mut tree = TreeBuilder::new();
/// tree.reset(0, 8)?;
/// grow_logits_tree(&mut tree, &table, None, &mut VecDeque::new());
/// // Root 0 (breadth 2) -> 1 (breadth 2), 2 (breadth 1); 1 -> 3 (breadth 1), 4.
/// assert_eq!(tree.flatten().tokens, vec![0, 1, 2, 3, 4]);
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
pub fn grow_logits_tree<T: GrowInto>(
    tree: &mut T,
    table: &CopyLogitTable,
    root_topk: Option<&[TokenId]>,
    queue: &mut VecDeque<(NodeId, usize)>,
) {
    // Breadth-first: (node, its breadth b). The root's breadth is k.
    queue.clear();
    queue.push_back((0, table.k()));
    'bfs: while let Some((u, b)) = queue.pop_front() {
        // Last-logit mode swaps the root's row only; every other node reads its own row.
        let row: &[TokenId] = match (u, root_topk) {
            (0, Some(rt)) => rt,
            _ => table.row(tree.token(u)),
        };
        // Only the first b ranks are children (b <= k, and a seen row has exactly k ids;
        // an unseen row is empty and the node stays a leaf).
        let row = &row[..row.len().min(b)];
        for (j, &t) in row.iter().enumerate() {
            // Full: the walk ends here, as in the twin. Candidates already in the tree
            // would cost nothing, but they are not visited either, so a retrieval node the
            // walk has not reached keeps the source "retrieval".
            if tree.is_full() {
                break 'bfs;
            }
            let cb = child_breadth(b, j, u == 0);
            match tree.insert_child(u, t, SOURCE_LOGITS) {
                // A new node (one unit of budget), or a retrieval node now "both" (free):
                // expand it later.
                Insert::Added(c) => queue.push_back((c, cb)),
                Insert::Existing { node, had } if had & SOURCE_LOGITS == 0 => {
                    queue.push_back((node, cb))
                }
                // The logits tree had put it in already (a repeated id in one row): skip.
                // (Full cannot happen: the tree was not full above.)
                Insert::Existing { .. } | Insert::Full => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breadth_rule() {
        // root children: 8 4 2 1 1 1 1 1
        let root: Vec<usize> = (0..8).map(|j| child_breadth(8, j, true)).collect();
        assert_eq!(root, vec![8, 4, 2, 1, 1, 1, 1, 1]);
        // non-root parent with b = 8: 4 2 1 1 ...
        let inner: Vec<usize> = (0..4).map(|j| child_breadth(8, j, false)).collect();
        assert_eq!(inner, vec![4, 2, 1, 1]);
        assert_eq!(child_breadth(1, 0, false), 1);
        assert_eq!(child_breadth(8, 200, false), 1);
    }
}
