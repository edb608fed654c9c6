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
//! * a new candidate costs one unit of budget and is queued for expansion ([`Offer::Added`]);
//! * a candidate that already exists (same parent, same token) costs nothing, is not
//!   duplicated, gains the logits bit (retrieval becomes "both") and is queued too, so the
//!   logits tree keeps growing beneath retrieval nodes ([`Offer::Merged`]);
//! * a node the logits tree already expanded (a repeated id within one row) is skipped
//!   ([`Offer::Repeated`]).
//!
//! Last-logit mode (ablation): the root's children come from `root_topk`, the top-k ids of
//! the logits that produced the root, instead of the root's table row; deeper nodes use the
//! table as usual.

use std::collections::VecDeque;

use crate::copy_logit::CopyLogitTable;
use crate::{NodeId, TokenId};

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

/// What became of a candidate (parent, token) offered to the tree (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// A new node was created (it cost one unit of budget); it will be expanded.
    Added(NodeId),
    /// The node was already in the tree from retrieval only: free, now marked as drafted
    /// by both trees, and it will be expanded.
    Merged(NodeId),
    /// The logits tree had already put this node in (a repeated id in one row): skipped.
    Repeated,
}

/// What the logits tree needs from the tree it grows into. Node 0 is the root.
///
/// ```
/// use std::collections::VecDeque;
/// use racer_ref::copy_logit::CopyLogitTable;
/// use racer_ref::logits_tree::{grow_logits_tree, GrowInto, Offer};
/// use racer_ref::{NodeId, TokenId};
///
/// /// A minimal tree: (parent, token) per node, no merging of retrieval nodes.
/// struct Edges(Vec<(NodeId, TokenId)>, usize);
/// impl GrowInto for Edges {
///     fn is_full(&self) -> bool { self.0.len() >= self.1 }
///     fn token(&self, u: NodeId) -> TokenId { self.0[u as usize].1 }
///     fn offer(&mut self, parent: NodeId, token: TokenId) -> Offer {
///         if self.0.contains(&(parent, token)) { return Offer::Repeated; }
///         self.0.push((parent, token));
///         Offer::Added(self.0.len() as NodeId - 1)
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
    /// Offer the child (`parent`, `token`) as a logits-tree node. Called only when the tree
    /// is not full, so a new node always fits.
    fn offer(&mut self, parent: NodeId, token: TokenId) -> Offer;
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
            match tree.offer(u, t) {
                Offer::Added(c) | Offer::Merged(c) => queue.push_back((c, cb)),
                Offer::Repeated => {}
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
