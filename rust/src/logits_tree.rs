//! The logits tree (racer-spec.md step 3, the paper's Eq. 3).
//!
//! Starting from the root we expand breadth-first with the copy-logit table. A node with
//! token `v` and breadth `b` gets the children `table[v][0..b)` in rank order, and child `j`
//! gets breadth `max(1, floor(b / 2^(j + [parent is not root])))`; the root's breadth is `k`.
//! With all tokens distinct, k = 8 and C = 64 this gives 1/8/19/24/12 nodes at depths 0..4.
//!
//! The logits tree grows *into* a [`TreeBuilder`] that may already hold the retrieval tree.
//! Conceptually the logits tree is an endless breadth-first sequence of (parent, token)
//! candidates; we walk it and stop the moment the merged tree is full:
//!
//! * a new candidate costs one unit of budget and is queued for expansion;
//! * a candidate that already exists (same parent, same token) costs nothing, is not
//!   duplicated, gains the logits bit (retrieval becomes "both") and is queued too, so the
//!   logits tree keeps growing beneath retrieval nodes;
//! * a node the logits tree already expanded (a repeated id within one row) is skipped.
//!
//! Last-logit mode (ablation): the root's children come from `root_topk`, the top-k ids of
//! the logits that produced the root, instead of the root's table row; deeper nodes use the
//! table as usual.

use crate::copy_logit::CopyLogitTable;
use crate::draft_tree::{Insert, TreeBuilder, SOURCE_LOGITS};

/// Breadth of child `j` (0-based rank) of a node with breadth `b` (paper Eq. 3):
/// `max(1, floor(b / 2^(j + [parent is not root])))`.
#[inline]
pub fn child_breadth(b: usize, j: usize, parent_is_root: bool) -> usize {
    let shift = j + usize::from(!parent_is_root);
    if shift >= usize::BITS as usize {
        1
    } else {
        (b >> shift).max(1)
    }
}

/// Grow the logits tree into `tree` (root = arena node 0) until the tree is full or no
/// node is left to expand. `root_topk` (at least `table.k()` ids) replaces the root's row.
pub fn grow_logits_tree(tree: &mut TreeBuilder, table: &CopyLogitTable, root_topk: Option<&[u32]>) {
    // The queue lives in the builder so it is allocated once per drafter, not per step.
    let mut queue = std::mem::take(&mut tree.queue);
    queue.clear();
    queue.push_back((0u32, table.k() as u32));
    'bfs: while let Some((u, b)) = queue.pop_front() {
        let row: &[u32] = match (u, root_topk) {
            (0, Some(rt)) => rt,
            _ => table.row(tree.token(u)),
        };
        // Only the first b ranks are children (b <= k, and a seen row has exactly k ids).
        let row = &row[..row.len().min(b as usize)];
        for (j, &t) in row.iter().enumerate() {
            // The tree is full: every later candidate is cut off, existing ones included.
            if tree.is_full() {
                break 'bfs;
            }
            let cb = child_breadth(b as usize, j, u == 0) as u32;
            match tree.insert_child(u, t, SOURCE_LOGITS) {
                Insert::Added(c) => queue.push_back((c, cb)),
                // Already in the tree from retrieval: free, and it keeps expanding. Already
                // expanded by the logits tree (a repeated id in this row): skip.
                Insert::Existing { node, had } => {
                    if had & SOURCE_LOGITS == 0 {
                        queue.push_back((node, cb));
                    }
                }
                Insert::Full => break 'bfs,
            }
        }
    }
    tree.queue = queue;
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
