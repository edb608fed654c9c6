//! The best chain of a draft tree: what a chain-only verifier (vLLM's speculative decoding)
//! can check of a RACER tree.
//!
//! A draft tree is flattened breadth-first with each node's children in draft priority
//! order: retrieval paths first (best path first), then the logits tree's children by
//! copy-logit rank ([`crate::draft_tree`]). Following the *first* child from the root
//! therefore reads the highest-ranked path of the tree: the most frequent retrieval
//! continuation while there is one, then the copy-logit table's top-1 prediction. An
//! engine that verifies one chain of `K` draft tokens per request per step gets the first
//! `K` nodes of that path.
//!
//! ```text
//!     0 root            parents [-1, 0, 0, 1, 1, 3]      best_chain(parents, 3) = [1, 3, 5]
//!     |-- 1 a                                            best_chain(parents, 2) = [1, 3]
//!     |   |-- 3 b
//!     |   |   `-- 5 c
//!     |   `-- 4 d
//!     `-- 2 e
//! ```

use crate::error::{Error, Result};
use crate::NodeId;

/// The node indices of the first-child path below the root of a breadth-first draft tree,
/// at most `length` of them (the root excluded), root side first.
///
/// `parents` is a [`crate::draft_tree::FlatTree`]'s parent array: `parents[0] == -1` and
/// `0 <= parents[i] < i` for every other node. One pass: in breadth-first order the first
/// child of node `u` is the first node after `u` whose parent is `u`, and it comes before
/// every child of any later node of the path, so the scan never goes back.
/// O(n) time for a tree of n nodes.
///
/// Errors: `Error::Value` naming `parents` when it is empty, its first entry is not -1,
/// or a parent does not precede its node.
///
/// ```
/// use racer_ref::chain::best_chain;
/// assert_eq!(best_chain(&[-1, 0, 0, 1, 1, 3], 3)?, vec![1, 3, 5]);
/// assert_eq!(best_chain(&[-1, 0, 0, 1, 1, 3], 8)?, vec![1, 3, 5]); // the path ends at 5
/// assert_eq!(best_chain(&[-1], 4)?, Vec::<u32>::new());           // the root alone
/// assert!(best_chain(&[-1, 1], 4).is_err());                      // node 1 is its own parent
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
pub fn best_chain(parents: &[i64], length: usize) -> Result<Vec<NodeId>> {
    // Check the whole array first: no result from a malformed tree.
    match parents.first() {
        None => {
            return Err(Error::value(
                "parents",
                "must hold the root (got an empty array)",
            ))
        }
        Some(&p) if p != -1 => {
            return Err(Error::value(
                "parents",
                format!("parents[0] must be -1 (the root), got {p}"),
            ))
        }
        _ => {}
    }
    for (i, &p) in parents.iter().enumerate().skip(1) {
        if p < 0 || p >= i as i64 {
            let msg =
                format!("parents[{i}] must be in [0, {i}) (a parent precedes its node), got {p}");
            return Err(Error::value("parents", msg));
        }
    }
    let mut chain = Vec::with_capacity(length.min(parents.len()));
    let mut tip: i64 = 0; // the last node of the path so far (the root at first)
    for (i, &p) in parents.iter().enumerate().skip(1) {
        if chain.len() == length {
            break;
        }
        if p == tip {
            chain.push(i as NodeId);
            tip = i as i64;
        }
    }
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_first_children() {
        // 0 -> {1, 2}, 1 -> {3, 4}, 2 -> {5}, 4 -> {6}: the path is 0 1 3 (3 is a leaf).
        let parents = [-1, 0, 0, 1, 1, 2, 4];
        assert_eq!(best_chain(&parents, 10).unwrap(), vec![1, 3]);
        assert_eq!(best_chain(&parents, 1).unwrap(), vec![1]);
        assert_eq!(best_chain(&parents, 0).unwrap(), Vec::<NodeId>::new());
    }

    #[test]
    fn a_chain_tree_is_its_own_chain() {
        let parents: Vec<i64> = (-1..9).collect(); // 0 - 1 - 2 ... - 9
        assert_eq!(
            best_chain(&parents, 9).unwrap(),
            (1..10).collect::<Vec<_>>()
        );
        assert_eq!(best_chain(&parents, 4).unwrap(), vec![1, 2, 3, 4]);
    }

    #[test]
    fn refuses_malformed_parents() {
        let msg = |p: &[i64]| best_chain(p, 3).unwrap_err().to_string();
        assert_eq!(msg(&[]), "parents: must hold the root (got an empty array)");
        assert_eq!(
            msg(&[0, 0]),
            "parents: parents[0] must be -1 (the root), got 0"
        );
        assert_eq!(
            msg(&[-1, 0, 2]),
            "parents: parents[2] must be in [0, 2) (a parent precedes its node), got 2"
        );
        assert_eq!(
            msg(&[-1, -1]),
            "parents: parents[1] must be in [0, 1) (a parent precedes its node), got -1"
        );
    }
}
