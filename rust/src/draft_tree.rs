//! The draft tree: merging the retrieval tree and the logits tree, then flattening (one
//! decoding step, steps 2-4).
//!
//! A [`TreeBuilder`] is a token trie rooted at the root with at most `capacity` nodes.
//! Nodes live in an arena in creation order; each keeps its children as a linked list in
//! insertion order, which fixes the breadth-first order of the flattened tree:
//!
//! ```text
//!   retrieval paths, in the order the automaton returns them      ->  children appended
//!   logits tree, breadth-first, each row in rank order             ->  children appended
//!   flatten: BFS from the root, each node's children in insertion order
//! ```
//!
//! Merging (**ours**): inserting a (parent, token) pair that already exists costs no budget
//! and creates nothing; the node's source gains the new bit (retrieval | logits = both).
//! The tree therefore ends with exactly `min(capacity, reachable unique nodes)` nodes. (The
//! official code charges the budget before merging and can return fewer than `C` nodes.)
//!
//! The Python twin (`racer_ref/reference/draft_tree.py`) follows the same steps and gives
//! identical arrays, node order included.
//!
//! ```
//! use racer_ref::draft_tree::{build_draft_tree, SOURCE_BOTH, SOURCE_LOGITS, SOURCE_RETRIEVAL};
//! use racer_ref::copy_logit::CopyLogitTable;
//!
//! // Retrieval paths 0-1-2 and 0-3; copy-logit rows 0 = [1, 4] and 1 = [2, 5].
//! let mut table = CopyLogitTable::new(10, 2)?;
//! table.observe(&[0, 1], &[1, 4, 2, 5], [2, 2])?;
//! let paths = [vec![0, 1, 2], vec![0, 3]];
//! let tree = build_draft_tree(0, 10, &paths, Some(&table), None)?;
//! // Breadth-first: 0 | 1 3 4 | 2 5. Node 1 (token 1) was proposed by both trees.
//! assert_eq!(tree.tokens, vec![0, 1, 3, 4, 2, 5]);
//! assert_eq!(tree.parents, vec![-1, 0, 0, 0, 1, 1]);
//! assert_eq!(tree.sources[1], SOURCE_BOTH);
//! assert_eq!(tree.sources[2], SOURCE_RETRIEVAL);
//! assert_eq!(tree.sources[3], SOURCE_LOGITS);
//! # Ok::<(), racer_ref::error::Error>(())
//! ```

use std::collections::VecDeque;

use crate::copy_logit::CopyLogitTable;
use crate::error::{Error, Result};
use crate::logits_tree::{grow_logits_tree, GrowInto};
use crate::{NodeId, TokenId, MAX_TOKEN_ID};

pub use crate::logits_tree::Insert;
pub use crate::{check_capacity, MAX_CAPACITY};
pub use crate::{SOURCE_BOTH, SOURCE_LOGITS, SOURCE_RETRIEVAL, SOURCE_ROOT};

/// "No node" in the arena links.
const NONE: NodeId = u32::MAX;

/// One arena node. Children form a singly linked list in insertion order (`first_child`,
/// `next_sibling`), with `last_child` so that an append is O(1).
#[derive(Debug, Clone, Copy)]
struct Node {
    token: TokenId,
    parent: NodeId,
    depth: u32,
    source: u8,
    first_child: NodeId,
    last_child: NodeId,
    next_sibling: NodeId,
}

impl Node {
    fn new(token: TokenId, parent: NodeId, depth: u32, source: u8) -> Node {
        Node {
            token,
            parent,
            depth,
            source,
            first_child: NONE,
            last_child: NONE,
            next_sibling: NONE,
        }
    }
}

/// A draft tree flattened breadth-first, root first (step 4): the arrays of
/// `racer_ref.DraftTree`, ready to become numpy arrays without conversion. Node `i` is
/// the `i`-th node in breadth-first order; the root is node 0.
///
/// ```
/// use racer_ref::draft_tree::build_draft_tree;
/// // One retrieval path 7-8-9 and a second branch 7-5: n = 4 nodes, 2 leaves.
/// let f = build_draft_tree(7, 64, &[vec![7, 8, 9], vec![7, 5]], None, None)?;
/// assert_eq!(f.tokens, vec![7, 8, 5, 9]);
/// assert_eq!(f.parents, vec![-1, 0, 0, 1]);
/// assert_eq!(f.depths, vec![0, 1, 1, 2]);
/// // Row 3 of the mask: node 3 sees itself, its parent 1 and the root.
/// assert_eq!(&f.attention_mask[12..16], &[true, true, false, true]);
/// // One row per leaf (nodes 2 and 3, in BFS order), padded with -1: computed on
/// // demand, since the verification loop never reads it.
/// assert_eq!(f.retrieve_indices(), (vec![0, 2, -1, 0, 1, 3], 2, 3));
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlatTree {
    /// `(n,)` token ids, `tokens[0]` is the root.
    pub tokens: Vec<TokenId>,
    /// `(n,)` parent index, -1 at the root, `parents[i] < i` otherwise.
    pub parents: Vec<i64>,
    /// `(n,)` depth below the root (position id = tokens in the KV cache + depth).
    pub depths: Vec<i64>,
    /// `(n, n)` row-major tree attention mask: `[i, j]` iff j is i or an ancestor of i.
    pub attention_mask: Vec<bool>,
    /// `(n,)` the `SOURCE_*` value of each node (retrieval, logits, both; the root 0).
    pub sources: Vec<u8>,
}

impl FlatTree {
    /// Number of nodes `n`, root included.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the tree has no node at all; false for every tree the builder makes (a
    /// draft tree holds at least its root), true only for `FlatTree::default()`.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// `retrieve_indices`, row-major, with its shape: one row per root-to-leaf path,
    /// leaves in breadth-first order, node indices from the root down, padded with -1.
    /// Returns `(values, num_leaves, width)` with `width = max_depth + 1`.
    ///
    /// Not part of the drafting hot path: the verification loop walks the tree from the
    /// root and never needs it, so it is computed here, on demand (as the Python
    /// `DraftTree.retrieve_indices` is). Empty for an empty tree.
    pub fn retrieve_indices(&self) -> (Vec<i64>, usize, usize) {
        let n = self.len();
        if n == 0 {
            return (Vec::new(), 0, 0);
        }
        // A node is a leaf when no node names it as parent.
        let mut is_leaf = vec![true; n];
        for &p in &self.parents[1..] {
            is_leaf[p as usize] = false;
        }
        let num_leaves = is_leaf.iter().filter(|&&leaf| leaf).count();
        let width = *self.depths.iter().max().unwrap_or(&0) as usize + 1;
        let mut values = vec![-1; num_leaves * width];
        let leaves = (0..n).filter(|&i| is_leaf[i]);
        for (row, leaf) in leaves.enumerate() {
            // Walk up from the leaf: column d holds the ancestor at depth d.
            let mut j = leaf as i64;
            for d in (0..=self.depths[leaf] as usize).rev() {
                values[row * width + d] = j;
                j = self.parents[j as usize];
            }
        }
        (values, num_leaves, width)
    }
}

/// Check one token of a draft tree given as any integer: in `[0, vocab_size)` with a
/// copy-logit table, in `[0, 2**32)` without one. The message gives the half-open range.
///
/// ```
/// use racer_ref::draft_tree::check_tree_token;
/// assert_eq!(check_tree_token("root", 9, Some(10)), Ok(9));
/// let e = check_tree_token("root_topk", 10, Some(10)).unwrap_err();
/// assert_eq!(e.to_string(), "root_topk: token id 10 is outside [0, 10)");
/// assert!(check_tree_token("root", 1 << 32, None).is_err());
/// ```
pub fn check_tree_token(
    arg: &'static str,
    value: i64,
    vocab_size: Option<usize>,
) -> Result<TokenId> {
    let high = vocab_size.map_or(i64::from(MAX_TOKEN_ID) + 1, |v| v as i64);
    if (0..high).contains(&value) {
        // In range, and high <= 2^32: the cast is exact.
        Ok(value as TokenId)
    } else {
        Err(Error::value(
            arg,
            format!("token id {value} is outside [0, {high})"),
        ))
    }
}

/// Check that a retrieval path is not empty and starts with the root.
fn check_path_start(path: &[TokenId], root: TokenId) -> Result<()> {
    match path.first() {
        Some(&t) if t == root => Ok(()),
        Some(&t) => Err(Error::value(
            "retrieval_paths",
            format!("every path must start with the root {root}, got {t}"),
        )),
        None => Err(Error::value("retrieval_paths", "empty path")),
    }
}

/// A token trie with at most `capacity` nodes, plus reusable scratch space so that a
/// drafter can build one tree per step without allocating anything but the output.
///
/// ```
/// use racer_ref::draft_tree::{Insert, TreeBuilder};
/// let mut b = TreeBuilder::new();
/// b.reset(5, 3)?;                                  // root 5, room for 3 nodes
/// b.add_retrieval_path(&[5, 6])?;                  // node 1
/// assert_eq!(b.insert_child(0, 6, 2), Insert::Existing { node: 1, had: 1 });
/// assert_eq!(b.insert_child(0, 8, 2), Insert::Added(2));
/// assert!(b.is_full());
/// assert_eq!(b.insert_child(1, 9, 2), Insert::Full);
/// assert_eq!(b.flatten().tokens, vec![5, 6, 8]);
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct TreeBuilder {
    nodes: Vec<Node>,
    capacity: usize,
    // Scratch for the logits tree and for flattening, kept between steps.
    queue: VecDeque<(NodeId, usize)>,
    order: Vec<NodeId>,
    new_index: Vec<u32>,
    flat: FlatTree,
}

impl TreeBuilder {
    /// An empty builder; call [`TreeBuilder::reset`] (or [`TreeBuilder::build`]) first.
    pub fn new() -> Self {
        Self::default()
    }

    /// Start a new tree holding only `root`, with room for `capacity` nodes.
    ///
    /// Errors: `capacity` outside `[1, MAX_CAPACITY]`.
    pub fn reset(&mut self, root: TokenId, capacity: usize) -> Result<()> {
        check_capacity(i64::try_from(capacity).unwrap_or(i64::MAX))?;
        self.start(root, capacity);
        Ok(())
    }

    /// [`TreeBuilder::reset`] for a capacity already checked.
    fn start(&mut self, root: TokenId, capacity: usize) {
        self.nodes.clear();
        self.capacity = capacity;
        self.nodes.push(Node::new(root, NONE, 0, SOURCE_ROOT));
    }

    /// Number of nodes so far (root included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True before the first reset.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// True when no new node fits.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.nodes.len() >= self.capacity
    }

    /// Token of arena node `u` (panics if `u >= len()`, like slice indexing).
    #[inline]
    pub fn token(&self, u: NodeId) -> TokenId {
        self.nodes[u as usize].token
    }

    /// The child of `parent` carrying `token`, if any. Linear in the number of children:
    /// with C = 64 nodes that is cheaper than any hash.
    #[inline]
    pub fn child(&self, parent: NodeId, token: TokenId) -> Option<NodeId> {
        let mut c = self.nodes[parent as usize].first_child;
        while c != NONE {
            let node = &self.nodes[c as usize];
            if node.token == token {
                return Some(c);
            }
            c = node.next_sibling;
        }
        None
    }

    /// Find or create the child (`parent`, `token`) and add `source` to its source bits.
    /// Only a new node costs budget, so an existing child is found even when the tree is
    /// full; see [`Insert`]. The one way into the tree: the retrieval paths, the logits
    /// tree (through [`GrowInto`]) and the expected tree all insert with it, as in the twin.
    pub fn insert_child(&mut self, parent: NodeId, token: TokenId, source: u8) -> Insert {
        if let Some(c) = self.child(parent, token) {
            let node = &mut self.nodes[c as usize];
            let had = node.source;
            node.source |= source;
            return Insert::Existing { node: c, had };
        }
        if self.is_full() {
            return Insert::Full;
        }
        Insert::Added(self.push_child(parent, token, source))
    }

    /// Create the child (`parent`, `token`), known to be absent, in a tree that is not full.
    fn push_child(&mut self, parent: NodeId, token: TokenId, source: u8) -> NodeId {
        debug_assert!(!self.is_full() && self.child(parent, token).is_none());
        let id = self.nodes.len() as NodeId;
        let depth = self.nodes[parent as usize].depth + 1;
        self.nodes.push(Node::new(token, parent, depth, source));
        // Append to the parent's child list: insertion order is the BFS order later.
        let p = &mut self.nodes[parent as usize];
        let last = p.last_child;
        p.last_child = id;
        if last == NONE {
            p.first_child = id;
        } else {
            self.nodes[last as usize].next_sibling = id;
        }
        id
    }

    /// Insert one retrieval path (`path[0]` must be the root) with source retrieval.
    /// Stops at the first new node that does not fit.
    ///
    /// Errors: an empty path, or one that does not start with the root.
    pub fn add_retrieval_path(&mut self, path: &[TokenId]) -> Result<()> {
        check_path_start(path, self.nodes[0].token)?;
        self.add_path_trusted(path);
        Ok(())
    }

    /// [`TreeBuilder::add_retrieval_path`] for a path known to start with the root.
    fn add_path_trusted(&mut self, path: &[TokenId]) {
        let mut u = 0;
        for &t in &path[1..] {
            match self.insert_child(u, t, SOURCE_RETRIEVAL) {
                Insert::Added(c) | Insert::Existing { node: c, .. } => u = c,
                // The rest of the path is below a node that does not exist: nothing of it
                // can be inserted (the kept set stays prefix-closed).
                Insert::Full => break,
            }
        }
    }

    /// Build one draft tree (steps 2-4): the root, then every retrieval path in order,
    /// then (when `table` is given) the logits tree filling the remaining capacity; then
    /// flatten. `root_topk` replaces the root's table row (last-logit mode).
    ///
    /// Errors (nothing is built): capacity outside `[1, MAX_CAPACITY]`; a token (root, path
    /// or `root_topk`) outside the table's vocabulary; `root_topk` shorter than the
    /// table's `k`; a path that is empty or does not start with the root.
    ///
    /// ```
    /// use racer_ref::draft_tree::TreeBuilder;
    /// let mut b = TreeBuilder::new();
    /// let tree = b.build(3, 64, &[vec![3, 4, 5]], None, None)?;
    /// assert_eq!(tree.tokens, vec![3, 4, 5]);
    /// assert!(b.build(3, 64, &[vec![4]], None, None).is_err()); // not from the root
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn build<P: AsRef<[TokenId]>>(
        &mut self,
        root: TokenId,
        capacity: usize,
        retrieval_paths: &[P],
        table: Option<&CopyLogitTable>,
        root_topk: Option<&[TokenId]>,
    ) -> Result<&FlatTree> {
        // Validate everything first, in the twin's order.
        check_capacity(i64::try_from(capacity).unwrap_or(i64::MAX))?;
        if let Some(tab) = table {
            let vocab = Some(tab.vocab_size());
            check_tree_token("root", i64::from(root), vocab)?;
            for p in retrieval_paths {
                for &v in p.as_ref() {
                    check_tree_token("retrieval_paths", i64::from(v), vocab)?;
                }
            }
            if let Some(rt) = root_topk {
                for &v in rt {
                    check_tree_token("root_topk", i64::from(v), vocab)?;
                }
                if rt.len() < tab.k() {
                    return Err(Error::value(
                        "root_topk",
                        format!("expected at least k = {} ids, got {}", tab.k(), rt.len()),
                    ));
                }
            }
        }
        for p in retrieval_paths {
            check_path_start(p.as_ref(), root)?;
        }
        let paths = retrieval_paths.iter().map(AsRef::as_ref);
        Ok(self.build_trusted(root, capacity, paths, table, root_topk))
    }

    /// [`TreeBuilder::build`] for arguments the caller has already checked (a
    /// [`crate::drafter::Drafter`] checks them once at its boundary and trusts its own
    /// automaton's paths).
    pub(crate) fn build_trusted<'p>(
        &mut self,
        root: TokenId,
        capacity: usize,
        retrieval_paths: impl Iterator<Item = &'p [TokenId]>,
        table: Option<&CopyLogitTable>,
        root_topk: Option<&[TokenId]>,
    ) -> &FlatTree {
        // Step 2: the retrieval tree first, path by path, in the automaton's order.
        self.start(root, capacity);
        for p in retrieval_paths {
            debug_assert!(check_path_start(p, root).is_ok());
            self.add_path_trusted(p);
        }
        // Step 3: the logits tree fills the rest (its queue is kept between steps).
        if let Some(tab) = table {
            let mut queue = std::mem::take(&mut self.queue);
            grow_logits_tree(self, tab, root_topk, &mut queue);
            self.queue = queue;
        }
        // Step 4: flatten.
        self.flatten()
    }
    /// Flatten breadth-first, root first, children in insertion order (step 4).
    /// The arrays live in the builder and are overwritten by the next call, so a drafter
    /// allocates nothing per step; clone the result to keep it.
    pub fn flatten(&mut self) -> &FlatTree {
        let n = self.nodes.len();
        let (nodes, order, new_index) = (&self.nodes, &mut self.order, &mut self.new_index);
        // BFS order over the arena. The arena is in creation order (retrieval paths, then
        // the logits tree), which is not breadth-first: a retrieval path goes deep before
        // its siblings exist. `order` itself is the queue: `head` walks it while children
        // are appended behind.
        order.clear();
        order.push(0);
        let mut head = 0;
        while head < order.len() {
            let mut c = nodes[order[head] as usize].first_child;
            head += 1;
            while c != NONE {
                order.push(c);
                c = nodes[c as usize].next_sibling;
            }
        }
        // Arena slot -> BFS position, to renumber the parents. A parent always comes
        // before its children in BFS order, so `parents[i] < i`.
        new_index.clear();
        new_index.resize(n, 0);
        for (i, &u) in order.iter().enumerate() {
            new_index[u as usize] = i as u32;
        }
        // The output arrays are the builder's own, cleared and refilled: no allocation once
        // they have reached the largest tree size.
        let f = &mut self.flat;
        f.tokens.clear();
        f.parents.clear();
        f.depths.clear();
        f.sources.clear();
        for &u in order.iter() {
            let node = &nodes[u as usize];
            f.tokens.push(node.token);
            f.parents.push(if node.parent == NONE {
                -1
            } else {
                new_index[node.parent as usize] as i64
            });
            f.depths.push(node.depth as i64);
            f.sources.push(node.source);
        }
        // Attention mask: row i = row parent(i) + i. Ancestors of i all precede its parent
        // p, so only the first p + 1 entries of row p need copying.
        f.attention_mask.clear();
        f.attention_mask.resize(n * n, false);
        for i in 0..n {
            if i > 0 {
                let p = f.parents[i] as usize;
                f.attention_mask.copy_within(p * n..p * n + p + 1, i * n);
            }
            f.attention_mask[i * n + i] = true;
        }
        &self.flat
    }
}

/// The logits tree sees the builder through this trait (see [`crate::logits_tree`]).
impl GrowInto for TreeBuilder {
    #[inline]
    fn is_full(&self) -> bool {
        TreeBuilder::is_full(self)
    }

    #[inline]
    fn token(&self, u: NodeId) -> TokenId {
        TreeBuilder::token(self, u)
    }

    #[inline]
    fn insert_child(&mut self, parent: NodeId, token: TokenId, source: u8) -> Insert {
        TreeBuilder::insert_child(self, parent, token, source)
    }
}

/// One-shot convenience: build a draft tree with a fresh [`TreeBuilder`]
/// (see [`TreeBuilder::build`]).
///
/// ```
/// use racer_ref::draft_tree::build_draft_tree;
/// let tree = build_draft_tree(1, 2, &[vec![1, 2, 3]], None, None)?;
/// assert_eq!(tree.tokens, vec![1, 2]); // capacity 2 cuts the path
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
pub fn build_draft_tree<P: AsRef<[TokenId]>>(
    root: TokenId,
    capacity: usize,
    retrieval_paths: &[P],
    table: Option<&CopyLogitTable>,
    root_topk: Option<&[TokenId]>,
) -> Result<FlatTree> {
    TreeBuilder::new()
        .build(root, capacity, retrieval_paths, table, root_topk)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_PATHS: &[&[u32]] = &[];

    fn table(vocab: usize, k: usize, rows: &[(u32, &[u32])]) -> CopyLogitTable {
        let mut t = CopyLogitTable::new(vocab as i64, k as i64).unwrap();
        for (tok, row) in rows {
            t.observe(&[*tok], row, [1, row.len()]).unwrap();
        }
        t
    }

    /// Check every structural invariant of a flat tree.
    fn check(f: &FlatTree) {
        let n = f.len();
        assert!(n >= 1);
        assert_eq!(f.parents[0], -1);
        assert_eq!(f.depths[0], 0);
        assert_eq!(f.sources[0], SOURCE_ROOT);
        for i in 1..n {
            let p = f.parents[i];
            assert!(p >= 0 && (p as usize) < i);
            assert_eq!(f.depths[i], f.depths[p as usize] + 1);
            // BFS: depths never decrease
            assert!(f.depths[i] >= f.depths[i - 1]);
            assert!(f.sources[i] >= 1 && f.sources[i] <= 3);
        }
        for i in 0..n {
            let mut anc = vec![false; n];
            let mut j = i as i64;
            while j >= 0 {
                anc[j as usize] = true;
                j = f.parents[j as usize];
            }
            assert_eq!(&f.attention_mask[i * n..(i + 1) * n], &anc[..]);
        }
        let leaves: Vec<usize> = (0..n)
            .filter(|&i| !f.parents.contains(&(i as i64)))
            .collect();
        let (paths, num_leaves, width) = f.retrieve_indices();
        assert_eq!(leaves.len(), num_leaves);
        for (r, &leaf) in leaves.iter().enumerate() {
            let row = &paths[r * width..(r + 1) * width];
            let d = f.depths[leaf] as usize;
            assert_eq!(row[d], leaf as i64);
            assert_eq!(row[0], 0);
            for x in 1..=d {
                assert_eq!(f.parents[row[x] as usize], row[x - 1]);
            }
            assert!(row[d + 1..].iter().all(|&v| v == -1));
        }
    }

    fn depth_counts(f: &FlatTree) -> Vec<usize> {
        let mut c = vec![0; *f.depths.iter().max().unwrap() as usize + 1];
        for &d in &f.depths {
            c[d as usize] += 1;
        }
        c
    }

    /// A table where every token's row is k fresh tokens: all tokens distinct.
    fn distinct_table(k: usize, depth: usize) -> (CopyLogitTable, u32) {
        let vocab = 1 + (0..depth).map(|d| k.pow(d as u32 + 1)).sum::<usize>();
        let mut t = CopyLogitTable::new(vocab as i64, k as i64).unwrap();
        let mut next = 1u32;
        let mut frontier = vec![0u32];
        for _ in 0..depth {
            let mut nf = vec![];
            for &v in &frontier {
                let row: Vec<u32> = (next..next + k as u32).collect();
                next += k as u32;
                t.observe(&[v], &row, [1, k]).unwrap();
                nf.extend(row);
            }
            frontier = nf;
        }
        (t, 0)
    }

    #[test]
    fn paper_shapes() {
        let (t, root) = distinct_table(8, 4);
        let f = build_draft_tree(root, 64, NO_PATHS, Some(&t), None).unwrap();
        check(&f);
        assert_eq!(depth_counts(&f), vec![1, 8, 19, 24, 12]);
        let (t, root) = distinct_table(4, 4);
        let f = build_draft_tree(root, 21, NO_PATHS, Some(&t), None).unwrap();
        check(&f);
        assert_eq!(depth_counts(&f), vec![1, 4, 8, 8]);
    }

    #[test]
    fn retrieval_then_logits_merge() {
        // root 0; retrieval paths 0-1-2 and 0-3; table row 0 = [1, 4], row 1 = [2, 5].
        let t = table(10, 2, &[(0, &[1, 4]), (1, &[2, 5])]);
        let paths: Vec<Vec<u32>> = vec![vec![0, 1, 2], vec![0, 3]];
        let f = build_draft_tree(0, 10, &paths, Some(&t), None).unwrap();
        check(&f);
        // BFS: 0 | 1 3 4 | 2 5
        assert_eq!(f.tokens, vec![0, 1, 3, 4, 2, 5]);
        assert_eq!(f.parents, vec![-1, 0, 0, 0, 1, 1]);
        assert_eq!(
            f.sources,
            vec![
                SOURCE_ROOT,
                SOURCE_BOTH,
                SOURCE_RETRIEVAL,
                SOURCE_LOGITS,
                SOURCE_BOTH,
                SOURCE_LOGITS
            ]
        );
        assert_eq!(
            f.retrieve_indices(),
            (vec![0, 2, -1, 0, 3, -1, 0, 1, 4, 0, 1, 5], 4, 3)
        );
        // capacity 4: retrieval takes 4 nodes; logits adds nothing and marks nothing.
        let f = build_draft_tree(0, 4, &paths, Some(&t), None).unwrap();
        assert_eq!(f.tokens, vec![0, 1, 3, 2]);
        assert_eq!(f.sources, vec![0, 1, 1, 1]);
        // capacity 5: one new logits node (4) fits; 1 became "both" on the way.
        let f = build_draft_tree(0, 5, &paths, Some(&t), None).unwrap();
        assert_eq!(f.tokens, vec![0, 1, 3, 4, 2]);
        assert_eq!(f.sources, vec![0, 3, 1, 2, 1]);
    }

    #[test]
    fn last_logit_root_row() {
        let t = table(10, 2, &[(0, &[1, 4]), (7, &[8, 9])]);
        let f = build_draft_tree(0, 10, NO_PATHS, Some(&t), Some(&[7, 6, 5])).unwrap();
        // root children from root_topk[..2] = 7, 6; 7 (breadth 2, root parent) -> 8, 9
        assert_eq!(f.tokens, vec![0, 7, 6, 8, 9]);
        assert_eq!(f.parents, vec![-1, 0, 0, 1, 1]);
    }

    #[test]
    fn errors() {
        let t = table(10, 2, &[]);
        assert!(build_draft_tree(0, 0, NO_PATHS, Some(&t), None).is_err());
        assert!(build_draft_tree(0, MAX_CAPACITY + 1, NO_PATHS, None, None).is_err());
        assert!(build_draft_tree(10, 4, NO_PATHS, Some(&t), None).is_err());
        assert!(build_draft_tree(1, 4, &[vec![2u32, 3]], None, None).is_err());
        assert!(build_draft_tree(1, 4, &[Vec::<u32>::new()], None, None).is_err());
        assert!(build_draft_tree(1, 4, &[vec![1u32, 30]], Some(&t), None).is_err());
        assert!(build_draft_tree(1, 4, NO_PATHS, Some(&t), Some(&[1])).is_err());
        assert!(build_draft_tree(1, 4, NO_PATHS, Some(&t), Some(&[1, 10])).is_err());
    }

    #[test]
    fn root_only_and_truncated_retrieval() {
        let f = build_draft_tree(5, 1, &[vec![5u32, 6, 7]], None, None).unwrap();
        assert_eq!(f.tokens, vec![5]);
        assert_eq!(f.retrieve_indices(), (vec![0], 1, 1));
        assert_eq!(f.attention_mask, vec![true]);
        let f = build_draft_tree(5, 2, &[vec![5u32, 6, 7], vec![5, 8]], None, None).unwrap();
        assert_eq!(f.tokens, vec![5, 6]);
    }

    #[test]
    fn random_trees_are_well_formed() {
        // xorshift: no dev-dependency needed.
        let mut s = 0x9E3779B97F4A7C15u64;
        let mut rnd = |m: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % m
        };
        for _ in 0..2000 {
            let vocab = 1 + rnd(12) as usize;
            let k = 1 + rnd(vocab.min(4) as u64) as usize;
            let mut t = CopyLogitTable::new(vocab as i64, k as i64).unwrap();
            for _ in 0..rnd(2 * vocab as u64) {
                let row: Vec<u32> = (0..k).map(|_| rnd(vocab as u64) as u32).collect();
                t.observe(&[rnd(vocab as u64) as u32], &row, [1, k])
                    .unwrap();
            }
            let root = rnd(vocab as u64) as u32;
            let cap = 1 + rnd(30) as usize;
            let paths: Vec<Vec<u32>> = (0..rnd(4))
                .map(|_| {
                    let mut p = vec![root];
                    p.extend((0..rnd(5)).map(|_| rnd(vocab as u64) as u32));
                    p
                })
                .collect();
            let f = build_draft_tree(root, cap, &paths, Some(&t), None).unwrap();
            check(&f);
            assert!(f.len() <= cap);
        }
    }
}
