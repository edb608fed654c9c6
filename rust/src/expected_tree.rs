//! The draft tree with the most expected accepted tokens (beyond the paper), and the
//! acceptance estimates it is built from.
//!
//! The Python twin (`racer_ref/reference/expected_tree.py`) explains the idea at length;
//! in short:
//!
//! ```text
//!   estimate   p(candidate) = P(target picks it | parent accepted), learned online:
//!              integer counts per feature bucket, p = (accepted + a0) / (seen + n0)
//!   choose     best-first search over the candidates (retrieval children, copy-logit
//!              row, or both) by path probability P = product of p from the root;
//!              keep C nodes (prefix-closed: a child never beats its parent)
//!   predict    E[a + 1] = 1 + sum of the kept nodes' path probabilities
//! ```
//!
//! Labels: after a verify pass, every candidate child of every verified node is a sample,
//! `label = (token == the target's top-1 at the parent)`. A [`crate::drafter::Drafter`]
//! with an [`Estimator`] attached keeps the [`Annotation`] of its last tree and learns
//! from the `observe` call about it ([`Estimator::learn`]). The paper's step attaches none.
//!
//! Both twins use the same buckets, priors, candidate order, tie-breaking (the candidate
//! offered first wins) and float operations in the same order, so trees, estimates and
//! path probabilities are bit-identical (the differential tests check it).
//!
//! ```
//! use racer_ref::copy_logit::CopyLogitTable;
//! use racer_ref::draft_tree::TreeBuilder;
//! use racer_ref::expected_tree::{AcceptanceEstimates, Annotation, ExpectedTree, RetrievalTrie};
//!
//! let mut table = CopyLogitTable::new(10, 2)?;
//! table.observe(&[0, 1, 2], &[1, 2, 3, 4, 5, 6], [3, 2])?;
//! // The automaton saw "0 1 3" three times and "0 2" once after this context.
//! let mut trie = RetrievalTrie::default();
//! trie.rebuild(0, &[0, 1, 3, 0, 2], &[0, 3, 5], &[4, 3, 3, 4, 1]);
//! let est = AcceptanceEstimates::new();
//! let (mut b, mut x, mut ann) = (TreeBuilder::new(), ExpectedTree::default(), Annotation::default());
//! let tree = x.build(&mut b, 0, 5, &trie, Some(&table), None, &est, &mut ann);
//! assert_eq!(tree.tokens, vec![0, 1, 2, 3, 4]);
//! assert!((ann.expected_tokens() - 3.234).abs() < 1e-3);
//! # Ok::<(), racer_ref::error::Error>(())
//! ```

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::automaton::Paths;
use crate::copy_logit::CopyLogitTable;
use crate::draft_tree::{FlatTree, Insert, TreeBuilder, SOURCE_LOGITS, SOURCE_RETRIEVAL};
use crate::{NodeId, TokenId};

/// Logits ranks with a bucket of their own (rank 7 and beyond share the last one).
pub const MAX_RANK: usize = 8;
/// Logits depths with a bucket of their own (depth 4 and deeper share the last one).
pub const MAX_DEPTH: usize = 4;
/// Levels of the retrieval ratio `freq(child) / freq(parent)`, in quarters.
pub const RATIO_LEVELS: usize = 4;
/// Levels of a retrieval parent's frequency: 1, 2-3, 4 or more.
pub const SUPPORT_LEVELS: usize = 3;
/// Logits ranks with a bucket of their own among nodes proposed by both trees.
pub const BOTH_RANKS: usize = 4;
/// First retrieval-only bucket (32).
pub const RETRIEVAL_OFFSET: usize = MAX_RANK * MAX_DEPTH;
/// First "both" bucket (44).
pub const BOTH_OFFSET: usize = RETRIEVAL_OFFSET + RATIO_LEVELS * SUPPORT_LEVELS;
/// Number of buckets (60).
pub const NUM_BUCKETS: usize = BOTH_OFFSET + BOTH_RANKS * RATIO_LEVELS;
/// A bucket that has seen this many samples halves both counts (old samples fade).
pub const HALVE_AT: u64 = 4096;
/// Calibration bins over the predicted probability (10 bins of 0.1).
pub const CALIBRATION_BINS: usize = 10;

/// "No node" in the links.
const NONE: u32 = u32::MAX;

/// `min(3, 4 * freq / parent_freq)`: the retrieval ratio in quarters.
#[inline]
pub fn ratio_level(freq: u64, parent_freq: u64) -> usize {
    ((RATIO_LEVELS as u64 * freq / parent_freq.max(1)) as usize).min(RATIO_LEVELS - 1)
}

/// 0, 1, 2 for a retrieval parent seen 1, 2-3, 4+ times.
#[inline]
pub fn support_level(parent_freq: u64) -> usize {
    match parent_freq {
        0 | 1 => 0,
        2 | 3 => 1,
        _ => 2,
    }
}

/// The bucket of a candidate child at `depth >= 1`: `rank` in the parent's copy-logit row
/// (-1: not in it), `freq` and `parent_freq` in the retrieval tree (`freq = 0`: not a
/// retrieval child).
///
/// ```
/// use racer_ref::expected_tree::candidate_bucket;
/// assert_eq!(candidate_bucket(0, 0, 0, 1), 0);     // logits rank 0, depth 1
/// assert_eq!(candidate_bucket(-1, 3, 4, 2), 32 + 3 * 3 + 2); // retrieval 3/4, support 4
/// assert_eq!(candidate_bucket(1, 1, 4, 1), 44 + 4 + 1);     // both, rank 1, ratio 1/4
/// ```
#[inline]
pub fn candidate_bucket(rank: i32, freq: u64, parent_freq: u64, depth: usize) -> usize {
    if freq > 0 && rank >= 0 {
        BOTH_OFFSET
            + (rank as usize).min(BOTH_RANKS - 1) * RATIO_LEVELS
            + ratio_level(freq, parent_freq)
    } else if freq > 0 {
        RETRIEVAL_OFFSET
            + ratio_level(freq, parent_freq) * SUPPORT_LEVELS
            + support_level(parent_freq)
    } else {
        (rank.max(0) as usize).min(MAX_RANK - 1) * MAX_DEPTH + depth.clamp(1, MAX_DEPTH) - 1
    }
}

/// `(prior_accepted, prior_seen)` of a bucket (see the twin): logits rank r `1 / (r + 2)`,
/// retrieval level q `(q + 1) / 5`, both `(q + 2) / (r + 6)`.
#[inline]
pub fn bucket_prior(bucket: usize) -> (u64, u64) {
    if bucket >= BOTH_OFFSET {
        let (rank, level) = (
            (bucket - BOTH_OFFSET) / RATIO_LEVELS,
            (bucket - BOTH_OFFSET) % RATIO_LEVELS,
        );
        (level as u64 + 2, rank as u64 + 6)
    } else if bucket >= RETRIEVAL_OFFSET {
        (((bucket - RETRIEVAL_OFFSET) / SUPPORT_LEVELS) as u64 + 1, 5)
    } else {
        (1, (bucket / MAX_DEPTH) as u64 + 2)
    }
}

/// Per-bucket acceptance counts and the calibration record.
///
/// ```
/// use racer_ref::expected_tree::AcceptanceEstimates;
/// let mut e = AcceptanceEstimates::new();
/// assert_eq!(e.estimate(0), 0.5);         // logits rank 0: prior 1 / 2
/// e.record(0, true);
/// assert_eq!(e.estimate(0), 2.0 / 3.0);   // (1 + 1) / (1 + 2)
/// assert_eq!((e.calibration_seen[5], e.calibration_accepted[5]), (1, 1));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptanceEstimates {
    /// Samples seen per bucket.
    pub seen: [u64; NUM_BUCKETS],
    /// Samples accepted (the target's choice) per bucket.
    pub accepted: [u64; NUM_BUCKETS],
    /// Samples per calibration bin (by the estimate they had before their label).
    pub calibration_seen: [u64; CALIBRATION_BINS],
    /// Accepted samples per calibration bin.
    pub calibration_accepted: [u64; CALIBRATION_BINS],
    /// Sum of the predictions per calibration bin.
    pub calibration_predicted: [f64; CALIBRATION_BINS],
    /// All samples since the last reset.
    pub num_labels: u64,
}

impl Default for AcceptanceEstimates {
    fn default() -> Self {
        Self::new()
    }
}

impl AcceptanceEstimates {
    /// No sample yet: every estimate is its prior.
    pub fn new() -> Self {
        AcceptanceEstimates {
            seen: [0; NUM_BUCKETS],
            accepted: [0; NUM_BUCKETS],
            calibration_seen: [0; CALIBRATION_BINS],
            calibration_accepted: [0; CALIBRATION_BINS],
            calibration_predicted: [0.0; CALIBRATION_BINS],
            num_labels: 0,
        }
    }

    /// Forget every sample.
    pub fn reset(&mut self) {
        *self = Self::new();
    }

    /// `P(accepted | parent accepted)` for a candidate in `bucket`.
    #[inline]
    pub fn estimate(&self, bucket: usize) -> f64 {
        let (a0, n0) = bucket_prior(bucket);
        (self.accepted[bucket] + a0) as f64 / (self.seen[bucket] + n0) as f64
    }

    /// One labelled sample of `bucket`.
    pub fn record(&mut self, bucket: usize, label: bool) {
        let p = self.estimate(bucket);
        let b = ((p * CALIBRATION_BINS as f64) as usize).min(CALIBRATION_BINS - 1);
        self.calibration_seen[b] += 1;
        self.calibration_accepted[b] += u64::from(label);
        self.calibration_predicted[b] += p;
        self.seen[bucket] += 1;
        self.accepted[bucket] += u64::from(label);
        self.num_labels += 1;
        if self.seen[bucket] >= HALVE_AT {
            self.seen[bucket] /= 2;
            self.accepted[bucket] /= 2;
        }
    }
}

/// Append `child` as the last child of `parent` in first-child / next-sibling lists (the
/// retrieval trie and the expected tree keep their children this way, in offer order).
fn append_child(first: &mut [u32], last: &mut [u32], next: &mut [u32], parent: u32, child: u32) {
    let p = parent as usize;
    if last[p] == NONE {
        first[p] = child;
    } else {
        next[last[p] as usize] = child;
    }
    last[p] = child;
}

/// The retrieval tree as a trie with frequencies (node 0 is the root), rebuilt each step
/// from the automaton's paths.
#[derive(Debug, Clone, Default)]
pub struct RetrievalTrie {
    tokens: Vec<TokenId>,
    freqs: Vec<u64>,
    first_child: Vec<u32>,
    last_child: Vec<u32>,
    next_sibling: Vec<u32>,
}

impl RetrievalTrie {
    /// Rebuild from paths given as `tokens` / `starts` / `freqs` (the layout of
    /// [`crate::automaton::Paths`]); with no path, the root alone with frequency 0.
    pub fn rebuild(&mut self, root: TokenId, tokens: &[TokenId], starts: &[usize], freqs: &[u64]) {
        self.tokens.clear();
        self.freqs.clear();
        self.first_child.clear();
        self.last_child.clear();
        self.next_sibling.clear();
        self.push(root, freqs.first().copied().unwrap_or(0));
        for w in starts.windows(2) {
            let mut node = 0u32;
            for i in w[0] + 1..w[1] {
                node = match self.child(node, tokens[i]) {
                    Some(c) => c,
                    None => {
                        let c = self.push(tokens[i], freqs[i]);
                        append_child(
                            &mut self.first_child,
                            &mut self.last_child,
                            &mut self.next_sibling,
                            node,
                            c,
                        );
                        c
                    }
                };
            }
        }
    }

    fn push(&mut self, token: TokenId, freq: u64) -> u32 {
        self.tokens.push(token);
        self.freqs.push(freq);
        self.first_child.push(NONE);
        self.last_child.push(NONE);
        self.next_sibling.push(NONE);
        (self.tokens.len() - 1) as u32
    }

    fn child(&self, node: u32, token: TokenId) -> Option<u32> {
        let mut c = self.first_child[node as usize];
        while c != NONE {
            if self.tokens[c as usize] == token {
                return Some(c);
            }
            c = self.next_sibling[c as usize];
        }
        None
    }
}

/// One candidate child: token, rank in the row (-1: none), retrieval child (-1: none).
#[derive(Debug, Clone, Copy)]
struct Cand {
    token: TokenId,
    rank: i32,
    rc: i32,
}

/// The candidate children of a node (`token`, trie node `link`, -1 for none) into `out`,
/// in the twin's order: retrieval children first, then the row's other ids by rank; an id
/// in both is one candidate; a repeated id in the row counts at its first rank.
fn candidate_children(
    token: TokenId,
    link: i32,
    trie: &RetrievalTrie,
    table: Option<&CopyLogitTable>,
    root_row: Option<&[TokenId]>,
    out: &mut Vec<Cand>,
) {
    out.clear();
    if link >= 0 {
        let mut c = trie.first_child[link as usize];
        while c != NONE {
            out.push(Cand {
                token: trie.tokens[c as usize],
                rank: -1,
                rc: c as i32,
            });
            c = trie.next_sibling[c as usize];
        }
    }
    let row: &[TokenId] = match (root_row, link) {
        (Some(r), 0) => r,
        _ => table.map_or(&[], |t| t.row(token)),
    };
    for (rank, &t) in row.iter().enumerate() {
        match out.iter_mut().find(|c| c.token == t) {
            Some(c) => {
                if c.rank < 0 {
                    c.rank = rank as i32;
                }
            }
            None => out.push(Cand {
                token: t,
                rank: rank as i32,
                rc: -1,
            }),
        }
    }
}

#[inline]
fn bucket_of(c: &Cand, link: i32, trie: &RetrievalTrie, depth: usize) -> usize {
    if c.rc >= 0 {
        let freq = trie.freqs[c.rc as usize];
        candidate_bucket(c.rank, freq, trie.freqs[link as usize], depth)
    } else {
        candidate_bucket(c.rank, 0, 0, depth)
    }
}

/// What a drafter remembers of its last tree, node by node in breadth-first order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Annotation {
    /// `(n,)` tokens of the tree.
    pub tokens: Vec<TokenId>,
    /// `(n,)` parents (-1 at the root).
    pub parents: Vec<i64>,
    /// `(n,)` depths.
    pub depths: Vec<i64>,
    /// `(n,)` the node's node in the retrieval trie, -1 if none (the root is 0).
    pub links: Vec<i32>,
    /// `(n,)` conditional acceptance estimate (1 at the root).
    pub cond: Vec<f64>,
    /// `(n,)` path probability (1 at the root).
    pub path: Vec<f64>,
    /// The root's row in last-logit mode.
    pub root_row: Option<Vec<TokenId>>,
}

impl Annotation {
    /// `E[a + 1] = 1 + sum of the path probabilities below the root`, in node order.
    pub fn expected_tokens(&self) -> f64 {
        let mut total = 1.0;
        for &q in self.path.iter().skip(1) {
            total += q;
        }
        total
    }

    fn start(&mut self, flat: &FlatTree, root_row: Option<&[TokenId]>) {
        self.tokens.clone_from(&flat.tokens);
        self.parents.clone_from(&flat.parents);
        self.depths.clone_from(&flat.depths);
        self.links.clear();
        self.cond.clear();
        self.path.clear();
        match root_row {
            Some(r) => {
                let v = self.root_row.get_or_insert_with(Vec::new);
                v.clear();
                v.extend_from_slice(r);
            }
            None => self.root_row = None,
        }
    }
}

/// A heap entry: a candidate with its path probability `q` and offer number `seq`.
#[derive(Debug, Clone, Copy)]
struct Offer {
    q: f64,
    seq: u32,
    parent: NodeId,
    cand: Cand,
    p: f64,
}

impl Ord for Offer {
    /// The max-heap pops the highest path probability, then the earliest offer.
    fn cmp(&self, other: &Self) -> Ordering {
        self.q
            .total_cmp(&other.q)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}
impl PartialOrd for Offer {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Offer {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Offer {}

/// Scratch space of the best-first search, kept between steps.
#[derive(Debug, Clone, Default)]
pub struct ExpectedTree {
    heap: BinaryHeap<Offer>,
    cands: Vec<Cand>,
    // Per created node (creation order): depth, trie node, estimate, path probability,
    // and its children in creation order (to reproduce the flattened order).
    depth: Vec<usize>,
    link: Vec<i32>,
    cond: Vec<f64>,
    path: Vec<f64>,
    first_child: Vec<u32>,
    last_child: Vec<u32>,
    next_sibling: Vec<u32>,
    order: Vec<u32>,
}

impl ExpectedTree {
    /// The `capacity` (>= 1, checked by the caller) nodes with the highest path probability
    /// (see the module docs), built into `builder` and flattened; `ann` receives the
    /// annotation in the flattened order.
    #[allow(clippy::too_many_arguments)]
    pub fn build<'b>(
        &mut self,
        builder: &'b mut TreeBuilder,
        root: TokenId,
        capacity: usize,
        trie: &RetrievalTrie,
        table: Option<&CopyLogitTable>,
        root_row: Option<&[TokenId]>,
        est: &AcceptanceEstimates,
        ann: &mut Annotation,
    ) -> &'b FlatTree {
        // `capacity` is in [1, MAX_CAPACITY] (checked by every caller): reset cannot fail.
        let _ = builder.reset(root, capacity);
        self.heap.clear();
        self.depth.clear();
        self.link.clear();
        self.cond.clear();
        self.path.clear();
        self.first_child.clear();
        self.last_child.clear();
        self.next_sibling.clear();
        self.new_node(0, 0, 1.0, 1.0);
        let mut seq = 0u32;
        self.offer_children(0, root, trie, table, root_row, est, &mut seq);
        while !builder.is_full() {
            let Some(o) = self.heap.pop() else { break };
            let source = if o.cand.rc >= 0 { SOURCE_RETRIEVAL } else { 0 }
                | if o.cand.rank >= 0 { SOURCE_LOGITS } else { 0 };
            let node = match builder.insert_child(o.parent, o.cand.token, source) {
                Insert::Added(c) => c,
                // Cannot happen: candidates of one node are distinct and each node is
                // expanded once; and the tree is not full.
                _ => continue,
            };
            let depth = self.depth[o.parent as usize] + 1;
            self.new_node(depth, o.cand.rc, o.p, o.q);
            append_child(
                &mut self.first_child,
                &mut self.last_child,
                &mut self.next_sibling,
                o.parent,
                node,
            );
            if !builder.is_full() {
                self.offer_children(node, o.cand.token, trie, table, root_row, est, &mut seq);
            }
        }
        // The flattened order: breadth-first, children in creation order (as flatten).
        self.order.clear();
        self.order.push(0);
        let mut head = 0;
        while head < self.order.len() {
            let mut c = self.first_child[self.order[head] as usize];
            head += 1;
            while c != NONE {
                self.order.push(c);
                c = self.next_sibling[c as usize];
            }
        }
        let flat = builder.flatten();
        ann.start(flat, root_row);
        for &u in &self.order {
            ann.links.push(self.link[u as usize]);
            ann.cond.push(self.cond[u as usize]);
            ann.path.push(self.path[u as usize]);
        }
        flat
    }

    fn new_node(&mut self, depth: usize, link: i32, p: f64, q: f64) {
        self.depth.push(depth);
        self.link.push(link);
        self.cond.push(p);
        self.path.push(q);
        self.first_child.push(NONE);
        self.last_child.push(NONE);
        self.next_sibling.push(NONE);
    }

    #[allow(clippy::too_many_arguments)]
    fn offer_children(
        &mut self,
        node: NodeId,
        token: TokenId,
        trie: &RetrievalTrie,
        table: Option<&CopyLogitTable>,
        root_row: Option<&[TokenId]>,
        est: &AcceptanceEstimates,
        seq: &mut u32,
    ) {
        let u = node as usize;
        let (link, depth, base) = (self.link[u], self.depth[u] + 1, self.path[u]);
        let row = if u == 0 { root_row } else { None };
        candidate_children(token, link, trie, table, row, &mut self.cands);
        for &c in &self.cands {
            let p = est.estimate(bucket_of(&c, link, trie, depth));
            self.heap.push(Offer {
                q: base * p,
                seq: *seq,
                parent: node,
                cand: c,
                p,
            });
            *seq += 1;
        }
    }
}

/// Annotate a tree built another way (the paper's merge) with the same estimates; a node
/// that is not among its parent's candidates gets the last logits-rank bucket.
fn annotate(
    flat: &FlatTree,
    trie: &RetrievalTrie,
    table: Option<&CopyLogitTable>,
    root_row: Option<&[TokenId]>,
    est: &AcceptanceEstimates,
    ann: &mut Annotation,
    cands: &mut Vec<Cand>,
) {
    ann.start(flat, root_row);
    ann.links.push(0);
    ann.cond.push(1.0);
    ann.path.push(1.0);
    let mut last_parent = -1i64;
    for i in 1..flat.len() {
        let u = flat.parents[i];
        let ui = u as usize;
        if u != last_parent {
            let row = if ui == 0 { root_row } else { None };
            candidate_children(flat.tokens[ui], ann.links[ui], trie, table, row, cands);
            last_parent = u;
        }
        let depth = flat.depths[i] as usize;
        let token = flat.tokens[i];
        let (bucket, link) = match cands.iter().find(|c| c.token == token) {
            Some(c) => (bucket_of(c, ann.links[ui], trie, depth), c.rc),
            None => (candidate_bucket(MAX_RANK as i32 - 1, 0, 0, depth), -1),
        };
        let p = est.estimate(bucket);
        ann.links.push(link);
        ann.cond.push(p);
        ann.path.push(ann.path[ui] * p);
    }
}

/// Scratch of [`Scratch::annotate`] and [`Scratch::learn`] (candidate lists), opaque
/// outside this module.
#[derive(Debug, Clone, Default)]
pub struct Scratch {
    cands: Vec<Cand>,
    rows: Vec<usize>,
    choice_at: Vec<i64>,
}

impl Scratch {
    /// Annotate the flattened tree `flat` with the estimates: each node's trie link,
    /// conditional estimate and path probability, into `ann` (see the twin's `annotate`).
    pub fn annotate(
        &mut self,
        flat: &FlatTree,
        trie: &RetrievalTrie,
        table: Option<&CopyLogitTable>,
        root_row: Option<&[TokenId]>,
        est: &AcceptanceEstimates,
        ann: &mut Annotation,
    ) {
        annotate(flat, trie, table, root_row, est, ann, &mut self.cands);
    }

    /// Turn one verify pass into samples (see the twin's `learn`): rows of `token_ids` /
    /// `topk_ids` (row-major, `topk_shape = (n, k')`, already validated) matched to the
    /// annotated tree (all its nodes in order, or its accepted path root first); each
    /// candidate child of each matched node on the accepted path (the root, then the child
    /// carrying its parent's top-1, ...) is one sample, labelled by the row's top-1.
    /// Returns the number of samples (0 if the rows are not about this tree). Call it
    /// before the copy-logit table takes the new rows.
    #[allow(clippy::too_many_arguments)]
    pub fn learn(
        &mut self,
        ann: &Annotation,
        trie: &RetrievalTrie,
        token_ids: &[TokenId],
        topk_ids: &[TokenId],
        topk_shape: [usize; 2],
        table: Option<&CopyLogitTable>,
        est: &mut AcceptanceEstimates,
    ) -> usize {
        let n = ann.tokens.len();
        self.rows.clear();
        if token_ids == &ann.tokens[..] {
            self.rows.extend(0..n);
        } else {
            if token_ids.first() != ann.tokens.first() {
                return 0;
            }
            self.rows.push(0);
            for &t in &token_ids[1..] {
                let prev = *self.rows.last().unwrap_or(&0);
                match (prev + 1..n).find(|&i| ann.parents[i] == prev as i64 && ann.tokens[i] == t) {
                    Some(i) => self.rows.push(i),
                    None => return 0,
                }
            }
        }
        let width = topk_shape[1];
        let mut count = 0;
        // The target's top-1 at each node of the accepted path (-1 elsewhere).
        self.choice_at.clear();
        self.choice_at.resize(n, -1);
        for (row, &u) in self.rows.iter().enumerate() {
            if u != 0 {
                let p = ann.parents[u] as usize;
                if self.choice_at[p] < 0 || i64::from(ann.tokens[u]) != self.choice_at[p] {
                    continue; // not on the accepted path
                }
            }
            let choice = i64::from(topk_ids[row * width]);
            self.choice_at[u] = choice;
            let depth = ann.depths[u] as usize + 1;
            let link = ann.links[u];
            let root_row = if u == 0 {
                ann.root_row.as_deref()
            } else {
                None
            };
            candidate_children(ann.tokens[u], link, trie, table, root_row, &mut self.cands);
            for c in &self.cands {
                est.record(
                    bucket_of(c, link, trie, depth),
                    i64::from(c.token) == choice,
                );
                count += 1;
            }
        }
        count
    }
}

/// A drafter's acceptance estimates and its last draft's annotation (the twin's
/// `Estimator`): what [`crate::drafter::TreeKind::Expected`] and `capacity="auto"` attach
/// to a drafter ([`crate::drafter::Drafter::attach_estimator`]). The paper's step never
/// runs it.
///
/// ```
/// use racer_ref::drafter::{Drafter, DrafterConfig, Method};
/// let mut d = Drafter::new(DrafterConfig { capacity: 8, ..DrafterConfig::new(Method::Logits, 20) })?;
/// d.observe(&[2], &[3, 9, 1, 1, 1, 1, 1, 1], [1, 8])?;
/// d.draft(2, None)?;
/// assert!(d.estimator().is_none()); // the paper's step: no estimates
/// d.attach_estimator();
/// d.draft(2, None)?;
/// assert!(d.estimator().unwrap().last_annotation().is_some());
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Estimator {
    estimates: AcceptanceEstimates,
    trie: RetrievalTrie,
    expected: ExpectedTree,
    annotation: Annotation,
    has_last: bool,
    scratch: Scratch,
}

impl Estimator {
    /// Nothing learned yet, no last draft.
    pub fn new() -> Self {
        Self::default()
    }

    /// The acceptance estimates learned so far.
    pub fn estimates(&self) -> &AcceptanceEstimates {
        &self.estimates
    }

    /// The last draft's annotation (path probabilities...), until the `observe` call
    /// about it; `None` after it, after a reset, and after a `pld` or `ar` draft.
    pub fn last_annotation(&self) -> Option<&Annotation> {
        self.has_last.then_some(&self.annotation)
    }

    /// Forget the last draft (a draft without estimates, or a failed one, follows).
    pub fn forget_last(&mut self) {
        self.has_last = false;
    }

    /// This step's tree into `builder` (arguments checked by the drafter): with `expected`
    /// the `capacity` nodes of highest path probability from the union of `paths` and the
    /// logits candidates, else the paper's merge; either way annotated for [`Self::learn`].
    #[allow(clippy::too_many_arguments)]
    pub fn draft<'b>(
        &mut self,
        builder: &'b mut TreeBuilder,
        root: TokenId,
        capacity: usize,
        paths: &Paths,
        table: Option<&CopyLogitTable>,
        root_row: Option<&[TokenId]>,
        expected: bool,
    ) -> &'b FlatTree {
        self.trie
            .rebuild(root, &paths.tokens, &paths.starts, &paths.freqs);
        self.has_last = true;
        if expected {
            return self.expected.build(
                builder,
                root,
                capacity,
                &self.trie,
                table,
                root_row,
                &self.estimates,
                &mut self.annotation,
            );
        }
        let flat = builder.build_trusted(root, capacity, paths.iter(), table, root_row);
        self.scratch.annotate(
            flat,
            &self.trie,
            table,
            root_row,
            &self.estimates,
            &mut self.annotation,
        );
        flat
    }

    /// Learn from the rows of one `observe` call (validated) if they are about the last
    /// draft; call it before the table takes them. The last draft is learned from once.
    pub fn learn(
        &mut self,
        token_ids: &[TokenId],
        topk_ids: &[TokenId],
        topk_shape: [usize; 2],
        table: Option<&CopyLogitTable>,
    ) {
        if std::mem::take(&mut self.has_last) {
            self.scratch.learn(
                &self.annotation,
                &self.trie,
                token_ids,
                topk_ids,
                topk_shape,
                table,
                &mut self.estimates,
            );
        }
    }

    /// Forget what was learned and the last draft.
    pub fn reset(&mut self) {
        self.estimates.reset();
        self.has_last = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_stay_in_range_and_priors_inside_0_1() {
        let mut seen = [false; NUM_BUCKETS];
        for rank in -1..10 {
            let pairs = (1..12u64).flat_map(|pf| (1..=pf).map(move |f| (f, pf)));
            for (f, pf) in std::iter::once((0, 0)).chain(pairs) {
                for depth in 1..7 {
                    if rank < 0 && f == 0 {
                        continue;
                    }
                    seen[candidate_bucket(rank, f, pf, depth)] = true;
                }
            }
        }
        // Every logits and "both" bucket is reachable; a retrieval parent seen once has
        // ratio 1 (level 3), and level 0 needs a parent seen 5 times or more.
        let unreachable = [32, 33, 35, 38];
        for (b, &s) in seen.iter().enumerate() {
            assert_eq!(s, !unreachable.contains(&b), "bucket {b}");
        }
        for b in 0..NUM_BUCKETS {
            let (a0, n0) = bucket_prior(b);
            assert!(0 < a0 && a0 < n0, "bucket {b}");
        }
    }

    #[test]
    fn halving_keeps_the_ratio() {
        let mut e = AcceptanceEstimates::new();
        for i in 0..HALVE_AT {
            e.record(3, i % 2 == 0);
        }
        assert_eq!((e.seen[3], e.accepted[3]), (HALVE_AT / 2, HALVE_AT / 4));
        assert_eq!(e.num_labels, HALVE_AT);
    }

    #[test]
    fn best_first_is_prefix_closed_and_learns() {
        let mut table = CopyLogitTable::new(10, 2).unwrap();
        table
            .observe(&[0, 1, 2], &[1, 2, 3, 4, 5, 6], [3, 2])
            .unwrap();
        let mut trie = RetrievalTrie::default();
        trie.rebuild(0, &[0, 1, 3, 0, 2], &[0, 3, 5], &[4, 3, 3, 4, 1]);
        let mut est = AcceptanceEstimates::new();
        let (mut b, mut x, mut ann) = (
            TreeBuilder::new(),
            ExpectedTree::default(),
            Annotation::default(),
        );
        let flat = x
            .build(&mut b, 0, 5, &trie, Some(&table), None, &est, &mut ann)
            .clone();
        assert_eq!(flat.tokens, vec![0, 1, 2, 3, 4]);
        for i in 1..flat.len() {
            assert!(ann.path[i] <= ann.path[flat.parents[i] as usize]);
        }
        // The target chose 1 after 0, 3 after 1: all rows observed.
        let topk = [1, 9, 5, 9, 3, 9, 0, 9, 0, 9];
        let mut s = Scratch::default();
        let n = s.learn(
            &ann,
            &trie,
            &flat.tokens,
            &topk,
            [5, 2],
            Some(&table),
            &mut est,
        );
        assert!(n > 0 && est.num_labels == n as u64);
        // Not this tree: nothing learned.
        assert_eq!(
            s.learn(&ann, &trie, &[7], &[1, 2], [1, 2], Some(&table), &mut est),
            0
        );
    }
}
