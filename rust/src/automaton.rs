//! The Aho-Corasick n-gram automaton that RACER's retrieval tree comes from
//! (step 2 of a decoding step, the retrieval tree, and step 9, updating the automaton; see
//! the crate documentation for the steps).
//!
//! The pure-Python twin `racer_ref.reference.automaton` explains every idea here at length,
//! with diagrams; this file comments the decisions. Both must give the same `dump()` and the
//! same `retrieve()` after every operation (the differential tests check it).
//!
//! # What the automaton holds
//!
//! * A **trie** over token ids. Node = state; the state's string is the path from the root.
//!   `freq(s)` = how many times the string of `s` occurred in the committed tokens (step
//!   9, "ours"), unless `s` was evicted meanwhile, in which case it counts from its re-creation.
//!   Depth is bounded by `ngram`, so every operation is O(ngram) = O(1) per token.
//! * The **open windows**: `windows[i]` is the state of the last `i` committed tokens, for
//!   `i = 0..=ngram` (`windows[0]` is the root), or closed when that string is not in the trie.
//!   Committing a token `t` extends each open window `i < ngram` by one node (`+1` on the
//!   child for `t`, created if missing), giving the windows `i + 1` of the next step.
//! * The **matching state**: the longest suffix of the committed tokens that is a trie path,
//!   i.e. the longest open window.
//! * **Lazy failure links**: `fail(s)` = the longest proper suffix of `s` that is a trie path.
//!   Computed on demand by the textbook recurrence, cached per node, and invalidated by a
//!   per-token epoch (see [`Automaton::fail`]).
//! * An **LRU list** of the non-root nodes (`crate::lru`), touched bottom-up so that a parent
//!   is never less recent than its children; when `len() == max_nodes` and a node must be
//!   created, the least recently used node (always a leaf) is recycled.
//!
//! # Decisions (shared with the Python twin, and documented for users)
//!
//! * `len()` counts trie nodes **without** the root; `max_nodes` bounds `len()`, and must be
//!   at least `ngram` so that one full window fits.
//! * `retrieve(root, capacity)`: `capacity` counts **every distinct node of the retrieval
//!   tree, the root included**, as the draft tree's capacity `C` does. `capacity = 1` gives
//!   `[[root]]`, and so does a root with no border.
//! * Windows are processed longest first. An eviction can close a window (its node is
//!   recycled); a closed window is simply not extended, so the invariant "window `i` is open
//!   iff the last `i` committed tokens are a trie path" always holds, and nothing dangles.
//! * Ranking of retrieval candidates: frequency (higher first), then depth (shallower first),
//!   then the rank of the parent in the selection (earlier first), then the token id (smaller
//!   first). A continuation found below several borders is one node whose frequency is the
//!   largest of theirs.
//!
//! # Where this file is faster than the twin (same results)
//!
//! * Children are found through one hash map for the whole trie, which holds only the
//!   children of nodes with two children or more; an only child is read from its parent
//!   (most deep n-grams never repeat, so most lookups and inserts skip the hash map).
//! * Before an eviction the extended path is touched only if its last node is the LRU tail.
//! * Retrieval finds the borders from the open windows, which are exactly the states on the
//!   matching state's failure chain, instead of walking that chain (`collect_borders`); the
//!   twin walks the failure links, as does `borders()` here, and debug builds compare both.
//! * Retrieval keeps one candidate per sibling list on its heap, and never more siblings
//!   than nodes it may still keep; `retrieve_into` reuses its buffers.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::{Error, Result};
use crate::lru::RecencyList;
use crate::{check_capacity, TokenId, MAX_TOKEN_ID};

/// A trie state (node), named by its slot in the arena (the name is BurntSushi's
/// aho-corasick's). Only the automaton makes them; [`Automaton::matching_state`] and
/// [`Automaton::borders`] hand them out, and [`Automaton::path`], [`Automaton::depth`],
/// [`Automaton::freq`] and [`Automaton::fail`] read them.
///
/// A newtype over the slot number (`u32`, as compact as the bare number: the arena and the
/// links stay 4 bytes per id), so that a state cannot be confused with a token id, a
/// depth or a rank in a signature or a struct field.
///
/// ```
/// use racer_ref::automaton::{Automaton, ROOT};
/// let mut a = Automaton::new(100, 3, 2)?;
/// a.extend(&[4, 5]);
/// let s = a.matching_state();
/// assert_ne!(s, ROOT);
/// assert_eq!(a.path(s), vec![4, 5]);
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct StateID(u32);

impl StateID {
    /// The state in arena slot `slot` (slots are below `MAX_NODES_LIMIT + 1 < 2**32`).
    #[inline]
    fn from_slot(slot: usize) -> StateID {
        StateID(slot as u32)
    }

    /// The arena slot of the state: a number that says nothing about the state's string,
    /// and changes when the state is evicted and its string comes back.
    #[inline]
    pub fn slot(self) -> usize {
        self.0 as usize
    }
}

/// The root state (the empty string). It is never evicted and not counted by `len()`.
pub const ROOT: StateID = StateID(0);
/// "No state".
const NONE: StateID = StateID(u32::MAX);
/// "No node" in the links of the retrieval search's kept nodes and candidates, which are
/// ranks (indices into `Scratch::kept` and `Scratch::siblings`), not states.
const NO_RANK: u32 = u32::MAX;
/// Largest accepted `ngram` (depth bound of the trie).
pub const MAX_NGRAM: i64 = 256;
/// Largest accepted `max_nodes` (2**31 - 1: slot numbers stay below `NONE` with room to
/// spare). The capacity of a retrieval tree is bounded by [`crate::MAX_CAPACITY`] instead.
pub const MAX_NODES_LIMIT: i64 = (1 << 31) - 1;
/// Number of failure-link epochs; a token `t` uses epoch `t % EPOCH_SLOTS`.
pub const EPOCH_SLOTS: usize = 1024;
/// A cache stamp that no epoch ever reaches.
const NO_STAMP: u64 = u64::MAX;

// ---------------------------------------------------------------------------------------
// Child map: (parent, token) -> child, in one hash map for the whole trie (the twin uses a
// dict per node), for the children of nodes with two children or more (see `child`).
// std's SipHash is DoS-resistant but slower; keys are our own slot numbers and token ids,
// so a multiplicative hash is enough. Its final xor-shift folds the high half of the
// product into the low bits, which hashbrown uses for the bucket index.
// (A hand-written linear-probing table measured slower than std's SwissTable here.)
// ---------------------------------------------------------------------------------------

#[derive(Default, Clone, Copy)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        let h = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }
}

type ChildMap = HashMap<u64, StateID, BuildHasherDefault<KeyHasher>>;

#[inline]
fn child_key(parent: StateID, token: u32) -> u64 {
    (u64::from(parent.0) << 32) | u64::from(token)
}

#[inline]
fn epoch_slot(token: u32) -> usize {
    token as usize % EPOCH_SLOTS
}

/// One trie node. Children are threaded as a doubly linked sibling list (for enumeration and
/// O(1) unlinking); lookups go through the child map.
#[derive(Clone, Copy, Debug)]
struct Node {
    token: u32,
    parent: StateID,
    depth: u32,
    freq: u64,
    first_child: StateID,
    next_sibling: StateID,
    prev_sibling: StateID,
    /// Cached failure link, valid iff `fail_stamp == epochs[epoch_slot(token)]`.
    fail: StateID,
    fail_stamp: u64,
    /// Bumped each time the slot is recycled, so a window can tell that its node is gone.
    generation: u32,
}

impl Node {
    fn root() -> Node {
        Node {
            token: 0,
            parent: NONE,
            depth: 0,
            freq: 0,
            first_child: NONE,
            next_sibling: NONE,
            prev_sibling: NONE,
            fail: NONE,
            fail_stamp: NO_STAMP,
            generation: 0,
        }
    }
}

/// An open window: a state plus the generation of its slot when the window was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WindowRef {
    state: StateID,
    generation: u32,
}

const CLOSED: WindowRef = WindowRef {
    state: NONE,
    generation: 0,
};
const ROOT_WINDOW: WindowRef = WindowRef {
    state: ROOT,
    generation: 0,
};

/// Counters, reported by `stats()`.
///
/// ```
/// use racer_ref::automaton::Automaton;
/// let mut a = Automaton::new(100, 3, 2)?;
/// a.extend(&[1, 2, 3]);
/// a.retrieve(2, 8)?;
/// let st = a.stats();
/// assert_eq!((st.committed_tokens, st.inserts, st.evictions, st.retrieves), (3, 6, 0, 1));
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Tokens committed by `extend` since construction or `reset()`.
    pub committed_tokens: u64,
    /// Trie nodes created.
    pub inserts: u64,
    /// Trie nodes recycled by LRU eviction.
    pub evictions: u64,
    /// Calls to `retrieve`.
    pub retrieves: u64,
    /// Failure-link lookups answered from the cache.
    pub fail_hits: u64,
    /// Failure-link lookups that had to be (re)computed.
    pub fail_misses: u64,
}

/// Root-to-leaf token paths stored flat: path `k` is `tokens[starts[k]..starts[k + 1]]`.
/// `retrieve_into` refills one of these, so a warm decoding loop allocates nothing.
///
/// ```
/// use racer_ref::automaton::Paths;
/// let p = Paths { tokens: vec![4, 5, 6, 4, 7], starts: vec![0, 3, 5], freqs: vec![3, 2, 1, 3, 1] };
/// assert_eq!(p.len(), 2);
/// assert_eq!(p.get(1), &[4, 7]);
/// assert_eq!(p.iter().collect::<Vec<_>>(), vec![&[4, 5, 6][..], &[4, 7][..]]);
/// assert_eq!(p.to_vecs(), vec![vec![4, 5, 6], vec![4, 7]]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Paths {
    /// The tokens of every path, one path after the other, each starting with the root.
    pub tokens: Vec<TokenId>,
    /// Start of each path in `tokens`, then `tokens.len()` (empty when there is no path).
    pub starts: Vec<usize>,
    /// Parallel to `tokens`: the frequency of each node in the retrieval tree (the merged
    /// frequency it was selected with; for the root the largest border frequency, 0
    /// without a border). Read by the acceptance estimates (`crate::expected_tree`) only,
    /// so a drafter without them leaves it empty (the paper's step writes no frequency).
    pub freqs: Vec<u64>,
}

impl Paths {
    /// Number of paths.
    pub fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Whether there is no path at all (a retrieval always returns at least `[root]`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Path `k` (root first). Panics if `k >= len()`, like slice indexing.
    pub fn get(&self, k: usize) -> &[TokenId] {
        &self.tokens[self.starts[k]..self.starts[k + 1]]
    }

    /// The paths in order, as slices.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[TokenId]> + '_ {
        (0..self.len()).map(move |k| self.get(k))
    }

    /// The paths as owned vectors.
    pub fn to_vecs(&self) -> Vec<Vec<TokenId>> {
        self.iter().map(<[TokenId]>::to_vec).collect()
    }
}

// ---------------------------------------------------------------------------------------
// Retrieval scratch space, kept between calls so that a step allocates only its result.
// ---------------------------------------------------------------------------------------

/// A candidate node of the retrieval tree: a continuation (relative to the root) and the
/// trie nodes (one per border that has it) it stands for, stored in `pool[start..start+len]`.
/// `next` indexes its next-best sibling in `Scratch::siblings` (`NONE` if it is the last).
#[derive(Clone, Copy, Debug)]
struct Candidate {
    freq: u64,
    depth: u32,
    parent_rank: u32,
    token: u32,
    start: u32,
    len: u32,
    next: u32,
}

impl Candidate {
    #[inline]
    fn key(&self) -> (u64, std::cmp::Reverse<(u32, u32, u32)>) {
        (
            self.freq,
            std::cmp::Reverse((self.depth, self.parent_rank, self.token)),
        )
    }
}

impl Ord for Candidate {
    /// The max-heap pops the best candidate: higher frequency, then shallower, then earlier
    /// parent, then smaller token. `(parent_rank, token)` is unique, so this is a total order.
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Candidate {}

/// A node kept in the retrieval tree; `rank` = its index in `kept`.
#[derive(Clone, Copy, Debug)]
struct Kept {
    token: u32,
    depth: u32,
    freq: u64,
    first_child: u32,
    last_child: u32,
    next_sibling: u32,
}

#[derive(Clone, Debug, Default)]
struct Scratch {
    heap: BinaryHeap<Candidate>,
    /// Sibling lists of candidates, each sorted best first (see `expand`).
    siblings: Vec<Candidate>,
    pool: Vec<StateID>,
    gather: Vec<(u32, u64, StateID)>,
    kept: Vec<Kept>,
    /// Depth-first walk: (kept index, entering?), and the current path.
    stack: Vec<(u32, bool)>,
    path: Vec<u32>,
    path_freqs: Vec<u64>,
}

// ---------------------------------------------------------------------------------------
// The automaton.
// ---------------------------------------------------------------------------------------

/// The Aho-Corasick n-gram automaton with lazy failure links and O(1) LRU eviction.
///
/// See the module documentation for the semantics; the Python class `racer_ref.Automaton`
/// wraps this type one to one.
///
/// ```
/// use racer_ref::automaton::Automaton;
/// let mut a = Automaton::new(10_000, 10, 2)?;
/// // Step 9: commit tokens. "the cat sat . the cat" as ids 1 2 3 4 1 2.
/// a.extend(&[1, 2, 3, 4, 1, 2]);
/// // Step 2: the retrieval tree for the root 3 ("sat"): the context ends in "the cat", which
/// // was followed by "sat . the cat" before.
/// assert_eq!(a.retrieve(3, 8)?, vec![vec![3, 4, 1, 2]]);
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Automaton {
    max_nodes: usize,
    ngram: usize,
    min_border_depth: usize,
    nodes: Vec<Node>,
    children: ChildMap,
    recency: RecencyList,
    free: Vec<StateID>,
    len: usize,
    /// `windows[i]`: the state of the last `i` committed tokens, or `CLOSED`.
    windows: Vec<WindowRef>,
    next_windows: Vec<WindowRef>,
    matching: StateID,
    epochs: Vec<u64>,
    stats: Stats,
    scratch: Scratch,
}

impl Automaton {
    /// A new, empty automaton.
    ///
    /// * `max_nodes`: most trie nodes kept (root excluded), in `[ngram, 2**31 - 1]`
    ///   (paper: 10,000);
    /// * `ngram`: the window length n, in `[2, 256]` (paper: 10);
    /// * `min_border_depth`: the least depth of a border, in `[1, ngram]` (2 by default).
    ///
    /// Errors: `Error::Value` naming the first argument out of range.
    ///
    /// ```
    /// use racer_ref::automaton::Automaton;
    /// let a = Automaton::new(10_000, 10, 2)?; // the paper's settings
    /// assert_eq!((a.max_nodes(), a.ngram(), a.min_border_depth(), a.len()), (10_000, 10, 2, 0));
    /// assert!(Automaton::new(5, 10, 2).is_err()); // max_nodes < ngram: one window would not fit
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn new(max_nodes: i64, ngram: i64, min_border_depth: i64) -> Result<Self> {
        if !(2..=MAX_NGRAM).contains(&ngram) {
            return Err(Error::value(
                "ngram",
                format!("must be in [2, {MAX_NGRAM}], got {ngram}"),
            ));
        }
        if !(ngram..=MAX_NODES_LIMIT).contains(&max_nodes) {
            return Err(Error::value(
                "max_nodes",
                format!(
                    "must be in [ngram, {MAX_NODES_LIMIT}] = [{ngram}, {MAX_NODES_LIMIT}] so that \
                     one window of ngram tokens fits, got {max_nodes}"
                ),
            ));
        }
        if !(1..=ngram).contains(&min_border_depth) {
            return Err(Error::value(
                "min_border_depth",
                format!("must be in [1, ngram] = [1, {ngram}], got {min_border_depth}"),
            ));
        }
        let (max_nodes, ngram) = (max_nodes as usize, ngram as usize);
        let reserve = max_nodes.min(1 << 16) + 1;
        let mut a = Automaton {
            max_nodes,
            ngram,
            min_border_depth: min_border_depth as usize,
            nodes: Vec::with_capacity(reserve),
            children: ChildMap::with_capacity_and_hasher(reserve, Default::default()),
            recency: RecencyList::new(),
            free: Vec::new(),
            len: 0,
            windows: vec![CLOSED; ngram + 1],
            next_windows: vec![CLOSED; ngram + 1],
            matching: ROOT,
            epochs: vec![0; EPOCH_SLOTS],
            stats: Stats::default(),
            scratch: Scratch::default(),
        };
        a.reset();
        Ok(a)
    }

    /// Forget everything (trie, windows, matching state, counters); keeps allocated memory.
    ///
    /// ```
    /// use racer_ref::automaton::Automaton;
    /// let mut a = Automaton::new(100, 3, 2)?;
    /// a.extend(&[1, 2, 3]);
    /// a.reset();
    /// assert!(a.is_empty() && a.stats().committed_tokens == 0);
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn reset(&mut self) {
        self.nodes.clear();
        self.nodes.push(Node::root());
        self.children.clear();
        self.recency.clear();
        self.free.clear();
        self.len = 0;
        self.windows.fill(CLOSED);
        self.windows[0] = ROOT_WINDOW;
        self.next_windows.fill(CLOSED);
        self.matching = ROOT;
        self.epochs.fill(0);
        self.stats = Stats::default();
    }

    /// Trie nodes in use, the root excluded (`<= max_nodes`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the trie holds only the root.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The node budget: most trie nodes kept, root excluded.
    pub fn max_nodes(&self) -> usize {
        self.max_nodes
    }

    /// The window length n: the trie's depth bound.
    pub fn ngram(&self) -> usize {
        self.ngram
    }

    /// The least depth of a border (2 in the paper: a border holds at least one context
    /// token before the root).
    pub fn min_border_depth(&self) -> usize {
        self.min_border_depth
    }

    /// Counters since construction or the last `reset()`.
    ///
    /// ```
    /// use racer_ref::automaton::Automaton;
    /// let mut a = Automaton::new(4, 2, 2)?;
    /// a.extend(&[1, 2, 3, 4]); // 7 strings of length <= 2, room for 4: evictions
    /// let st = a.stats();
    /// assert_eq!(st.committed_tokens, 4);
    /// assert_eq!(st.inserts - st.evictions, a.len() as u64);
    /// assert!(st.evictions > 0 && a.len() == 4);
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The matching state: the longest suffix of the committed tokens that is a trie path.
    ///
    /// ```
    /// use racer_ref::automaton::{Automaton, ROOT};
    /// let mut a = Automaton::new(100, 3, 2)?;
    /// assert_eq!(a.matching_state(), ROOT);
    /// a.extend(&[5, 6, 7, 8]);
    /// // The longest suffix that is a trie path, at most ngram = 3 tokens:
    /// let s = a.matching_state();
    /// assert_eq!((a.path(s), a.depth(s), a.freq(s)), (vec![6, 7, 8], 3, 1));
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn matching_state(&self) -> StateID {
        self.matching
    }

    /// Depth of a state (0 for the root).
    pub fn depth(&self, s: StateID) -> usize {
        self.nodes[s.slot()].depth as usize
    }

    /// Frequency of a state (0 for the root).
    pub fn freq(&self, s: StateID) -> u64 {
        self.nodes[s.slot()].freq
    }

    /// The string (token ids from the root) of a state.
    pub fn path(&self, mut s: StateID) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.depth(s));
        while s != ROOT {
            out.push(self.nodes[s.slot()].token);
            s = self.nodes[s.slot()].parent;
        }
        out.reverse();
        out
    }

    /// The child of `s` for `token`, if present.
    ///
    /// Most nodes have no child or one (deep n-grams rarely repeat), and reading the node we
    /// are at is cheap, while a hash probe costs a cache miss or two. So the child map only
    /// holds the children of nodes with two children or more; an only child is found
    /// through `first_child`. (Inserting and evicting keep this so.)
    #[inline]
    ///
    /// ```
    /// use racer_ref::automaton::{Automaton, ROOT};
    /// let mut a = Automaton::new(100, 3, 2)?;
    /// a.extend(&[1, 2, 1, 3]);
    /// let one = a.child(ROOT, 1).unwrap();
    /// assert_eq!(a.freq(one), 2);
    /// assert!(a.child(one, 2).is_some() && a.child(one, 3).is_some() && a.child(one, 4).is_none());
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn child(&self, s: StateID, token: u32) -> Option<StateID> {
        let first = self.nodes[s.slot()].first_child;
        if first == NONE {
            return None;
        }
        let only = &self.nodes[first.slot()];
        if only.next_sibling == NONE {
            return (only.token == token).then_some(first);
        }
        self.children.get(&child_key(s, token)).copied()
    }

    /// Check one token id given as any integer (`i64`, `u64`, `i32`, ...); `index` names
    /// the element of a sequence in the message. Generic so that a numpy array of any
    /// integer dtype is checked in its own type, with the value it holds in the message.
    ///
    /// Errors: `Error::Value` naming `arg` for a value outside `[0, MAX_TOKEN_ID]`.
    ///
    /// ```
    /// use racer_ref::automaton::Automaton;
    /// assert_eq!(Automaton::check_token("root", None, 7i64), Ok(7));
    /// let e = Automaton::check_token("tokens", Some(2), -1i64).unwrap_err();
    /// assert_eq!(e.to_string(), "tokens: element 2 must be in [0, 4294967295], got -1");
    /// assert!(Automaton::check_token("tokens", None, u64::MAX).is_err());
    /// ```
    pub fn check_token<T>(arg: &'static str, index: Option<usize>, value: T) -> Result<TokenId>
    where
        T: TryInto<TokenId> + Copy + std::fmt::Display,
    {
        // MAX_TOKEN_ID is u32::MAX, so "fits in a u32" is exactly the allowed range.
        value.try_into().map_err(|_| {
            let what = index.map_or_else(String::new, |i| format!("element {i} "));
            Error::value(
                arg,
                format!("{what}must be in [0, {MAX_TOKEN_ID}], got {value}"),
            )
        })
    }

    // -----------------------------------------------------------------------------------
    // Step 9: commit tokens.
    // -----------------------------------------------------------------------------------

    /// Commit `tokens` one by one (step 9, **ours**): each open window of length
    /// `< ngram` is extended by one node (`freq += 1`), and the matching state advances.
    ///
    /// ```
    /// use racer_ref::automaton::{Automaton, ROOT};
    /// let mut a = Automaton::new(100, 3, 2)?;
    /// a.extend(&[1, 2, 1, 2]);
    /// // Every substring of length <= 3 is in the trie at once, counted: "1 2" twice.
    /// let s = a.child(a.child(ROOT, 1).unwrap(), 2).unwrap();
    /// assert_eq!(a.freq(s), 2);
    /// assert_eq!(a.len(), 6); // 1, 2, 1 2, 2 1, 1 2 1, 2 1 2
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn extend(&mut self, tokens: &[u32]) {
        for &t in tokens {
            self.extend_one(t);
        }
    }

    fn extend_one(&mut self, token: u32) {
        self.stats.committed_tokens += 1;
        // The windows of the next step are built in a second buffer (swapped in at the
        // end), so that window i + 1 of the next step never overwrites window i + 1 of
        // this one before it is read. Window 0, the empty string, is always open.
        self.next_windows.fill(CLOSED);
        self.next_windows[0] = ROOT_WINDOW;
        // Longest window first: a creation for window i makes a string of length i + 1, so
        // it can never re-create a string of a shorter window still to be processed, and
        // "window open <=> string present" holds for the next step.
        for i in (0..self.ngram).rev() {
            let w = self.windows[i];
            if !self.is_open(w) {
                continue;
            }
            let parent = w.state;
            let child = match self.child(parent, token) {
                // The string was seen before: one more occurrence (freq counts them).
                Some(c) => {
                    self.nodes[c.slot()].freq += 1;
                    c
                }
                // A new string: a new node, after making room if the budget is spent.
                None => {
                    if self.len == self.max_nodes {
                        // The victim must not be on the path we are extending. The tail is
                        // a leaf, so of that path only `parent` itself can be the tail; then
                        // touch the path (<= ngram - 1 nodes; the trie has max_nodes >=
                        // ngram) so another node becomes the tail. The twin always touches
                        // here; the final order is the same, since `touch_path(child)`
                        // below moves the whole path to the head again.
                        if self.recency.least_recent() == Some(parent.0) {
                            self.touch_path(parent);
                        }
                        self.evict_lru_leaf();
                    }
                    self.insert(parent, token)
                }
            };
            // Bottom-up: child, parent, ..., so a parent is never less recent than a child.
            self.touch_path(child);
            let generation = self.nodes[child.slot()].generation;
            self.next_windows[i + 1] = WindowRef {
                state: child,
                generation,
            };
        }
        std::mem::swap(&mut self.windows, &mut self.next_windows);
        // A later creation in this step may have recycled an earlier window's node; the
        // generation check in `is_open` skips it.
        self.matching = (0..=self.ngram)
            .rev()
            .map(|i| self.windows[i])
            .find(|&w| self.is_open(w))
            .map_or(ROOT, |w| w.state);
    }

    #[inline]
    fn is_open(&self, w: WindowRef) -> bool {
        w.state != NONE && self.nodes[w.state.slot()].generation == w.generation
    }

    /// Touch `s` and its ancestors, bottom-up (the root is not on the LRU list).
    #[inline]
    fn touch_path(&mut self, mut s: StateID) {
        // Separate borrows, so the loop keeps both in registers.
        let (nodes, recency) = (&self.nodes, &mut self.recency);
        while s != ROOT {
            recency.touch(s.0);
            s = nodes[s.slot()].parent;
        }
    }

    fn insert(&mut self, parent: StateID, token: u32) -> StateID {
        let depth = self.nodes[parent.slot()].depth + 1;
        // The new node goes to the front of the parent's sibling list (O(1); sibling
        // order never matters: lookups use the child map, and the dump sorts by token).
        let sibling = self.nodes[parent.slot()].first_child;
        // Reuse a slot freed by an eviction before growing the arena, so the arena never
        // holds more than max_nodes + 1 slots.
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.nodes.push(Node::root());
                StateID::from_slot(self.nodes.len() - 1)
            }
        };
        // The slot keeps its generation: windows made before the eviction that freed it
        // must still see it as closed (the eviction bumped it).
        let generation = self.nodes[slot.slot()].generation;
        self.nodes[slot.slot()] = Node {
            token,
            parent,
            depth,
            freq: 1,
            first_child: NONE,
            next_sibling: sibling,
            prev_sibling: NONE,
            fail: NONE,
            fail_stamp: NO_STAMP,
            generation,
        };
        if sibling != NONE {
            self.nodes[sibling.slot()].prev_sibling = slot;
            // The parent now has two children or more: they go into the child map (an only
            // child is found through `first_child`; see `child`).
            if self.nodes[sibling.slot()].next_sibling == NONE {
                let old = self.nodes[sibling.slot()].token;
                self.children.insert(child_key(parent, old), sibling);
            }
            self.children.insert(child_key(parent, token), slot);
        }
        self.nodes[parent.slot()].first_child = slot;
        // A new string ending in `token` may be a longer proper suffix of some node's string.
        self.epochs[epoch_slot(token)] += 1;
        self.len += 1;
        self.stats.inserts += 1;
        slot
    }

    /// Recycle the least recently used node. It is a leaf because of the touch order.
    fn evict_lru_leaf(&mut self) {
        let Some(v) = self.recency.least_recent().map(StateID) else {
            return;
        };
        let node = self.nodes[v.slot()];
        debug_assert_eq!(node.first_child, NONE, "the LRU tail must be a leaf");
        self.recency.remove(v.0);
        if node.prev_sibling != NONE || node.next_sibling != NONE {
            // It had a sibling, so it was in the child map.
            self.children.remove(&child_key(node.parent, node.token));
        }
        if node.prev_sibling != NONE {
            self.nodes[node.prev_sibling.slot()].next_sibling = node.next_sibling;
        } else {
            self.nodes[node.parent.slot()].first_child = node.next_sibling;
        }
        if node.next_sibling != NONE {
            self.nodes[node.next_sibling.slot()].prev_sibling = node.prev_sibling;
        }
        // Two children became one: the one left leaves the child map.
        let first = self.nodes[node.parent.slot()].first_child;
        if first != NONE && self.nodes[first.slot()].next_sibling == NONE {
            let only = self.nodes[first.slot()].token;
            self.children.remove(&child_key(node.parent, only));
        }
        // A string ending in `token` vanished: failure links that pointed at it are stale.
        self.epochs[epoch_slot(node.token)] += 1;
        let slot = &mut self.nodes[v.slot()];
        slot.generation = slot.generation.wrapping_add(1);
        slot.parent = NONE;
        slot.fail = NONE;
        slot.fail_stamp = NO_STAMP;
        self.free.push(v);
        self.len -= 1;
        self.stats.evictions += 1;
    }

    // -----------------------------------------------------------------------------------
    // Lazy failure links.
    // -----------------------------------------------------------------------------------

    /// The failure link of `s` (not the root): its longest proper suffix that is a trie path.
    ///
    /// Computed by the Aho-Corasick recurrence (walk the parent's failure chain for a child
    /// with `s`'s token) and cached. The value depends only on which strings ending in
    /// `s`'s last token are present, so the cache carries the epoch of that token, bumped
    /// whenever a node ending in it (or in a token with the same `% EPOCH_SLOTS`) is created
    /// or evicted. Equal to an eager AC build over the current trie at all times.
    ///
    /// ```
    /// use racer_ref::automaton::Automaton;
    /// let mut a = Automaton::new(100, 3, 2)?;
    /// a.extend(&[1, 2, 3, 2, 3]);
    /// let s = a.matching_state(); // "3 2 3"
    /// let f = a.fail(s);
    /// assert_eq!(a.path(f), vec![2, 3]); // its longest proper suffix in the trie
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn fail(&mut self, s: StateID) -> StateID {
        debug_assert!(s != ROOT);
        let node = self.nodes[s.slot()];
        let epoch = self.epochs[epoch_slot(node.token)];
        if node.fail_stamp == epoch {
            self.stats.fail_hits += 1;
            return node.fail;
        }
        self.stats.fail_misses += 1;
        let f = if node.depth == 1 {
            ROOT
        } else {
            // depth >= 2, so the parent is not the root. Recursion depth <= ngram.
            let mut t = self.fail(node.parent);
            // The textbook recurrence: the longest proper suffix of the parent's string
            // that can be extended by our token gives ours; shorter ones are tried in
            // turn, down to the root (where the empty suffix extends to depth 1 or not
            // at all).
            loop {
                if let Some(c) = self.child(t, node.token) {
                    break c;
                }
                if t == ROOT {
                    break ROOT;
                }
                t = self.fail(t);
            }
        };
        let n = &mut self.nodes[s.slot()];
        n.fail = f;
        n.fail_stamp = epoch;
        f
    }

    // -----------------------------------------------------------------------------------
    // Step 2: the retrieval tree.
    // -----------------------------------------------------------------------------------

    /// The borders for `root`, longest first: for each state on the failure chain of the
    /// matching state (all suffixes of the committed tokens present in the trie, the root
    /// included), its child for `root` if that child has depth >= `min_border_depth`.
    ///
    /// This is the Aho-Corasick definition, walked through the (lazy) failure links, as the
    /// twin does. `retrieve` gets the same states faster from the open windows (see
    /// `collect_borders`).
    ///
    /// ```
    /// use racer_ref::automaton::Automaton;
    /// let mut a = Automaton::new(100, 4, 2)?;
    /// a.extend(&[7, 1, 2, 9, 1]);
    /// // Suffixes of the context followed by root 2, of depth >= 2: "9 1 2" does not occur,
    /// // "1 2" does.
    /// let b: Vec<Vec<u32>> = a.borders(2).into_iter().map(|s| a.path(s)).collect();
    /// assert_eq!(b, vec![vec![1, 2]]);
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn borders(&mut self, root: u32) -> Vec<StateID> {
        let mut out = Vec::new();
        self.borders_by_failure_links(root, &mut out);
        out
    }

    fn borders_by_failure_links(&mut self, root: u32, out: &mut Vec<StateID>) {
        let mut s = self.matching;
        loop {
            if let Some(c) = self.child(s, root) {
                if self.nodes[c.slot()].depth as usize >= self.min_border_depth {
                    out.push(c);
                }
            }
            if s == ROOT {
                break;
            }
            s = self.fail(s);
        }
    }

    /// The borders for `root` (see [`Automaton::borders`]), from the open windows.
    ///
    /// The failure chain of the matching state visits every suffix of the committed tokens
    /// that is a trie path, longest first. Those are exactly the open windows: window `i` is
    /// open iff the last `i` committed tokens are a trie path (module docs), and the matching
    /// state is the longest open window. So the borders are the open windows' children for
    /// `root`, longest window first, with no failure link to follow or recompute (an insert
    /// or eviction invalidates cached links, so the walk recomputes about ten per step).
    /// A window of `i` tokens gives a border of depth `i + 1`; windows of `ngram` tokens
    /// have no children. Debug builds check the result against the failure-link walk.
    fn collect_borders(&mut self, root: u32, out: &mut Vec<StateID>) {
        let start = out.len();
        let shortest = self.min_border_depth.saturating_sub(1);
        for i in (shortest..self.ngram).rev() {
            let w = self.windows[i];
            if !self.is_open(w) {
                continue;
            }
            if let Some(c) = self.child(w.state, root) {
                out.push(c);
            }
        }
        if cfg!(debug_assertions) {
            let mut by_links = Vec::new();
            self.borders_by_failure_links(root, &mut by_links);
            debug_assert_eq!(
                &out[start..],
                &by_links[..],
                "borders: windows vs failure links"
            );
        }
    }

    /// The retrieval tree for `root` (step 2) as root-to-leaf token paths, each starting
    /// with `root`.
    ///
    /// The subtrees below all borders are merged by continuation (a continuation under
    /// several borders is one node, with the largest of their frequencies) and searched
    /// best-first; the `capacity - 1` best nodes are kept (frequency, then shallower, then
    /// earlier parent, then smaller token). Frequencies never grow along a path, so the kept
    /// set is prefix-closed. `capacity` counts the root: at most `capacity` distinct nodes.
    /// Paths come in depth-first order, children in selection order (best path first).
    ///
    /// Errors: `Error::Value` if `capacity` is not in `[1, MAX_CAPACITY]` (4096).
    ///
    /// ```
    /// use racer_ref::automaton::Automaton;
    /// let mut a = Automaton::new(100, 4, 2)?;
    /// a.extend(&[1, 2, 3, 4, 1, 2, 5, 1]);
    /// // Root 2 after "... 1": border "1 2", continued by 3 4 (once) and 5 1 (once).
    /// assert_eq!(a.retrieve(2, 64)?, vec![vec![2, 3, 4], vec![2, 5, 1]]); // depth <= ngram
    /// assert_eq!(a.retrieve(2, 2)?, vec![vec![2, 3]]); // capacity counts the root
    /// assert_eq!(a.retrieve(8, 64)?, vec![vec![8]]);   // no border: the root alone
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn retrieve(&mut self, root: u32, capacity: usize) -> Result<Vec<Vec<u32>>> {
        let mut out = Paths::default();
        self.retrieve_into(root, capacity, &mut out)?;
        Ok(out.to_vecs())
    }

    /// [`Automaton::retrieve`] into a reusable buffer (`out` is cleared first), so that a
    /// warm decoding loop allocates nothing.
    ///
    /// ```
    /// use racer_ref::automaton::{Automaton, Paths};
    /// let mut a = Automaton::new(100, 4, 2)?;
    /// a.extend(&[1, 2, 3, 1]);
    /// let mut paths = Paths::default();
    /// a.retrieve_into(2, 8, &mut paths)?;
    /// assert_eq!(paths.get(0), &[2, 3, 1]);
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn retrieve_into(&mut self, root: TokenId, capacity: usize, out: &mut Paths) -> Result<()> {
        check_capacity(i64::try_from(capacity).unwrap_or(i64::MAX))?;
        self.retrieve_trusted(root, capacity, out, true);
        Ok(())
    }

    /// [`Automaton::retrieve_into`] for a capacity the caller has already checked (a
    /// [`crate::drafter::Drafter`] checks its capacity once, when it is built). `counted`:
    /// also write `out.freqs` (for the acceptance estimates); otherwise it is left empty.
    pub(crate) fn retrieve_trusted(
        &mut self,
        root: TokenId,
        capacity: usize,
        out: &mut Paths,
        counted: bool,
    ) {
        debug_assert!(check_capacity(capacity as i64).is_ok());
        self.stats.retrieves += 1;
        // The scratch space is taken out of `self` for the call, so that `expand` can read
        // the trie (`&self`) while it writes the scratch; it goes back at the end, with
        // its allocations, for the next step.
        let mut sc = std::mem::take(&mut self.scratch);
        sc.heap.clear();
        sc.siblings.clear();
        sc.pool.clear();
        sc.kept.clear();
        // The borders are the trie nodes the root of the retrieval tree stands for: all
        // of them together are kept node 0, so their children are merged by token below.
        self.collect_borders(root, &mut sc.pool);
        let root_freq = sc
            .pool
            .iter()
            .map(|s| self.nodes[s.slot()].freq)
            .max()
            .unwrap_or(0);
        sc.kept.push(Kept {
            token: root,
            depth: 0,
            freq: root_freq,
            first_child: NO_RANK,
            last_child: NO_RANK,
            next_sibling: NO_RANK,
        });
        // capacity 1 is the root alone; no border at all leaves the heap empty and gives
        // `[[root]]` as well.
        if capacity > 1 {
            let n_borders = sc.pool.len();
            self.expand(&mut sc, 0, 0, n_borders, capacity - 1);
        }
        // Best-first search: pop the best candidate, keep it, offer its children. A child
        // is never better than its parent (frequencies do not grow along a path), so the
        // kept set is prefix-closed and equals "the capacity - 1 best nodes".
        while sc.kept.len() < capacity {
            // An empty heap: every reachable continuation is kept already.
            let Some(c) = sc.heap.pop() else { break };
            // Its next-best sibling takes its place among the candidates.
            if c.next != NO_RANK {
                sc.heap.push(sc.siblings[c.next as usize]);
            }
            let rank = sc.kept.len() as u32;
            sc.kept.push(Kept {
                token: c.token,
                depth: c.depth,
                freq: c.freq,
                first_child: NO_RANK,
                last_child: NO_RANK,
                next_sibling: NO_RANK,
            });
            // Append to the parent's children: siblings end up in selection order.
            let p = c.parent_rank as usize;
            if sc.kept[p].last_child == NO_RANK {
                sc.kept[p].first_child = rank;
            } else {
                let last = sc.kept[p].last_child as usize;
                sc.kept[last].next_sibling = rank;
            }
            sc.kept[p].last_child = rank;
            // Offer the children only if one of them could still be kept.
            if sc.kept.len() < capacity {
                let room = capacity - sc.kept.len();
                self.expand(&mut sc, rank, c.start as usize, c.len as usize, room);
            }
        }
        Self::write_paths(&mut sc, out, counted);
        self.scratch = sc;
    }

    /// Offer the children of kept node `rank` (the trie nodes `pool[start..start+len]`,
    /// merged by token) as candidates.
    ///
    /// The twin pushes every child on its heap. Here the children are sorted best first
    /// (siblings share depth and parent, so frequency then token decides) and only the best
    /// one enters the heap; popping it pushes the next one. The heap then holds at most one
    /// candidate per kept node, and the selection is the same. `room` = how many more nodes
    /// may still be kept (>= 1).
    fn expand(&self, sc: &mut Scratch, rank: u32, start: usize, len: usize, room: usize) {
        let depth = sc.kept[rank as usize].depth + 1;
        let first = sc.siblings.len();
        let candidate = |freq, token, begin: usize, end: usize| Candidate {
            freq,
            depth,
            parent_rank: rank,
            token,
            start: begin as u32,
            len: (end - begin) as u32,
            next: NO_RANK,
        };
        if len == 1 {
            // One trie node: its children have distinct tokens, nothing to merge.
            let mut c = self.nodes[sc.pool[start].slot()].first_child;
            while c != NONE {
                let n = &self.nodes[c.slot()];
                let begin = sc.pool.len();
                sc.pool.push(c);
                sc.siblings
                    .push(candidate(n.freq, n.token, begin, begin + 1));
                c = n.next_sibling;
            }
        } else {
            // Several trie nodes (one per border): merge their children by token.
            sc.gather.clear();
            for k in start..start + len {
                let mut c = self.nodes[sc.pool[k].slot()].first_child;
                while c != NONE {
                    let n = &self.nodes[c.slot()];
                    sc.gather.push((n.token, n.freq, c));
                    c = n.next_sibling;
                }
            }
            sc.gather.sort_unstable();
            let mut i = 0;
            while i < sc.gather.len() {
                let token = sc.gather[i].0;
                let begin = sc.pool.len();
                let mut freq = 0;
                while i < sc.gather.len() && sc.gather[i].0 == token {
                    freq = freq.max(sc.gather[i].1);
                    sc.pool.push(sc.gather[i].2);
                    i += 1;
                }
                sc.siblings
                    .push(candidate(freq, token, begin, sc.pool.len()));
            }
        }
        let list = &mut sc.siblings[first..];
        if list.is_empty() {
            return;
        }
        // Best first (the heap's order reversed: a max-heap pops the greatest). Only `room`
        // more nodes can be kept at all, so a child below the `room` best of its siblings
        // never will be: keep those alone.
        let best_first = |a: &Candidate, b: &Candidate| b.cmp(a);
        if list.len() > room {
            list.select_nth_unstable_by(room - 1, best_first);
            sc.siblings.truncate(first + room);
        }
        let list = &mut sc.siblings[first..];
        list.sort_unstable_by(best_first);
        for k in 0..list.len() - 1 {
            list[k].next = (first + k + 1) as u32;
        }
        sc.heap.push(sc.siblings[first]);
    }

    /// The kept tree's root-to-leaf paths, depth-first, children in selection order, and
    /// when `counted` their nodes' frequencies.
    fn write_paths(sc: &mut Scratch, out: &mut Paths, counted: bool) {
        out.tokens.clear();
        out.starts.clear();
        out.freqs.clear();
        sc.path.clear();
        sc.path_freqs.clear();
        sc.stack.clear();
        sc.stack.push((0, true));
        while let Some((k, entering)) = sc.stack.pop() {
            let node = sc.kept[k as usize];
            if !entering {
                sc.path.pop();
                sc.path_freqs.pop();
                continue;
            }
            sc.path.push(node.token);
            sc.path_freqs.push(node.freq);
            sc.stack.push((k, false));
            if node.first_child == NO_RANK {
                out.starts.push(out.tokens.len());
                out.tokens.extend_from_slice(&sc.path);
                if counted {
                    out.freqs.extend_from_slice(&sc.path_freqs);
                }
                continue;
            }
            // Push the children in reverse so that the first child is visited first.
            let at = sc.stack.len();
            let mut c = node.first_child;
            while c != NO_RANK {
                sc.stack.push((c, true));
                c = sc.kept[c as usize].next_sibling;
            }
            sc.stack[at..].reverse();
        }
        out.starts.push(out.tokens.len());
    }

    // -----------------------------------------------------------------------------------
    // Canonical dump.
    // -----------------------------------------------------------------------------------

    /// A canonical text of the whole automaton, independent of slot numbers: parameters,
    /// the matching state, the open windows, then one line per state in depth-first order
    /// (children by token id) with its frequency, failure link and LRU rank (0 = most
    /// recent). Fills the failure-link cache as a side effect (through [`Automaton::fail`]).
    ///
    /// ```
    /// use racer_ref::automaton::Automaton;
    /// let mut a = Automaton::new(10, 2, 2)?;
    /// a.extend(&[4, 5]);
    /// let text = a.dump();
    /// assert!(text.starts_with("Automaton(max_nodes=10, ngram=2, min_border_depth=2)\n"));
    /// assert!(text.contains("state [4 5] freq=1 fail=[5] lru=2\n"));
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn dump(&mut self) -> String {
        // Slot numbers differ between the backends (and between runs with evictions), so
        // the dump names every state by its token string and orders states by token ids:
        // two automata with the same content give the same text.
        let mut order = Vec::with_capacity(self.len + 1);
        let mut stack = vec![ROOT];
        let mut kids = Vec::new();
        while let Some(s) = stack.pop() {
            order.push(s);
            kids.clear();
            let mut c = self.nodes[s.slot()].first_child;
            while c != NONE {
                kids.push((self.nodes[c.slot()].token, c));
                c = self.nodes[c.slot()].next_sibling;
            }
            // Pushed in decreasing token order, so the smallest token is popped first.
            kids.sort_unstable_by(|a, b| b.cmp(a));
            stack.extend(kids.iter().map(|&(_, c)| c));
        }
        // LRU rank of every live slot: 0 = most recently used. Free slots keep u32::MAX
        // and never appear (they are not reachable from the root).
        let mut rank = vec![u32::MAX; self.nodes.len()];
        for (r, s) in self.recency.iter().enumerate() {
            rank[s as usize] = r as u32;
        }
        let fmt_path = |p: Vec<u32>| {
            let v: Vec<String> = p.iter().map(u32::to_string).collect();
            format!("[{}]", v.join(" "))
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Automaton(max_nodes={}, ngram={}, min_border_depth={})",
            self.max_nodes, self.ngram, self.min_border_depth
        );
        let _ = writeln!(
            out,
            "nodes={} committed_tokens={} matching={}",
            self.len,
            self.stats.committed_tokens,
            fmt_path(self.path(self.matching))
        );
        let open: Vec<String> = (1..=self.ngram)
            .filter(|&i| self.is_open(self.windows[i]))
            .map(|i| i.to_string())
            .collect();
        let _ = writeln!(out, "open_windows=[{}]", open.join(" "));
        for s in order {
            if s == ROOT {
                let _ = writeln!(out, "state [] root");
                continue;
            }
            let f = self.fail(s);
            let node = self.nodes[s.slot()];
            let _ = writeln!(
                out,
                "state {} freq={} fail={} lru={}",
                fmt_path(self.path(s)),
                node.freq,
                fmt_path(self.path(f)),
                rank[s.slot()]
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap as StdMap, HashSet};

    /// Every trie string (root excluded) with its state.
    fn strings(a: &Automaton) -> StdMap<Vec<u32>, StateID> {
        let mut out = StdMap::new();
        let mut stack = vec![ROOT];
        while let Some(s) = stack.pop() {
            if s != ROOT {
                out.insert(a.path(s), s);
            }
            let mut c = a.nodes[s.slot()].first_child;
            while c != NONE {
                stack.push(c);
                c = a.nodes[c.slot()].next_sibling;
            }
        }
        out
    }

    /// Check every invariant against brute force; `context` = all committed tokens.
    fn check(a: &mut Automaton, context: &[u32]) {
        let present = strings(a);
        assert_eq!(present.len(), a.len());
        // The child map holds exactly the children of nodes with >= 2 children.
        let mut in_map = 0;
        for &s in present.values() {
            let node = a.nodes[s.slot()];
            let has_sibling = node.prev_sibling != NONE || node.next_sibling != NONE;
            assert_eq!(
                a.children.get(&child_key(node.parent, node.token)) == Some(&s),
                has_sibling
            );
            in_map += usize::from(has_sibling);
        }
        assert_eq!(a.children.len(), in_map);
        assert!(a.len() <= a.max_nodes());
        assert_eq!(a.recency.len(), a.len());
        // Failure links = longest proper suffix present (what an eager AC build gives).
        for (p, &s) in &present {
            let want: Vec<u32> = (1..p.len())
                .map(|k| p[k..].to_vec())
                .find(|q| present.contains_key(q))
                .unwrap_or_default();
            let got = a.fail(s);
            assert_eq!(a.path(got), want, "fail of {p:?}");
        }
        // LRU: a parent is never less recent than its child.
        let rank: StdMap<StateID, usize> = a
            .recency
            .iter()
            .enumerate()
            .map(|(r, s)| (StateID(s), r))
            .collect();
        for &s in present.values() {
            let p = a.nodes[s.slot()].parent;
            if p != ROOT {
                assert!(rank[&p] < rank[&s], "parent less recent than child");
            }
            if p != ROOT {
                assert!(a.freq(p) >= a.freq(s), "frequency grows along a path");
            }
        }
        // Matching state = longest suffix of the context (<= ngram) present.
        let want = (1..=a.ngram().min(context.len()))
            .rev()
            .map(|k| context[context.len() - k..].to_vec())
            .find(|q| present.contains_key(q))
            .unwrap_or_default();
        assert_eq!(a.path(a.matching_state()), want);
    }

    /// Deterministic pseudo-random stream (no external crates).
    fn lcg_stream(seed: u64, len: usize, alphabet: u32) -> Vec<u32> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 33) % u64::from(alphabet)) as u32
            })
            .collect()
    }

    #[test]
    fn rejects_bad_arguments() {
        assert!(matches!(
            Automaton::new(10, 1, 1),
            Err(Error::Value { arg: "ngram", .. })
        ));
        assert!(matches!(
            Automaton::new(10, 257, 2),
            Err(Error::Value { arg: "ngram", .. })
        ));
        assert!(matches!(
            Automaton::new(9, 10, 2),
            Err(Error::Value {
                arg: "max_nodes",
                ..
            })
        ));
        assert!(matches!(
            Automaton::new(-1, 10, 2),
            Err(Error::Value {
                arg: "max_nodes",
                ..
            })
        ));
        assert!(matches!(
            Automaton::new(100, 10, 0),
            Err(Error::Value {
                arg: "min_border_depth",
                ..
            })
        ));
        assert!(matches!(
            Automaton::new(100, 10, 11),
            Err(Error::Value {
                arg: "min_border_depth",
                ..
            })
        ));
        assert!(Automaton::new(10, 10, 10).is_ok());
        let mut a = Automaton::new(100, 3, 2).unwrap();
        assert!(matches!(
            a.retrieve(1, 0),
            Err(Error::Value {
                arg: "capacity",
                ..
            })
        ));
        assert_eq!(a.stats().retrieves, 0);
        assert!(matches!(
            Automaton::check_token("root", None, -1),
            Err(Error::Value { arg: "root", .. })
        ));
        assert!(Automaton::check_token("tokens", Some(2), 1i64 << 32)
            .unwrap_err()
            .to_string()
            .contains("element 2"));
        assert_eq!(
            Automaton::check_token("root", None, (1i64 << 32) - 1),
            Ok(u32::MAX)
        );
    }

    #[test]
    fn frequencies_count_occurrences() {
        // "a b a b a" with a=1, b=2, ngram=3: every substring of length <= 3 with its count.
        let mut a = Automaton::new(100, 3, 2).unwrap();
        a.extend(&[1, 2, 1, 2, 1]);
        let s = strings(&a);
        let f = |p: &[u32]| a.freq(s[p]);
        assert_eq!(f(&[1]), 3);
        assert_eq!(f(&[2]), 2);
        assert_eq!(f(&[1, 2]), 2);
        assert_eq!(f(&[2, 1]), 2);
        assert_eq!(f(&[1, 2, 1]), 2);
        assert_eq!(f(&[2, 1, 2]), 1);
        assert_eq!(a.len(), 6);
        assert_eq!(a.path(a.matching_state()), vec![1, 2, 1]);
        check(&mut a, &[1, 2, 1, 2, 1]);
    }

    #[test]
    fn retrieve_merges_borders_and_respects_capacity() {
        // Context "5 1 2 3 . 9 1 2 4 . 5 1 2 3 . 9 1" (dots = 7), ngram 4.
        let ctx = [5, 1, 2, 3, 7, 9, 1, 2, 4, 7, 5, 1, 2, 3, 7, 9, 1];
        let mut a = Automaton::new(1000, 4, 2).unwrap();
        a.extend(&ctx);
        // Matching state [3 7 9 1] (it occurred before); chain: [3 7 9 1] -> [7 9 1] ->
        // [9 1] -> [1] -> root. Root token 2 gives the borders [7 9 1 2] (depth 4 = ngram,
        // no children), [9 1 2] (child 4) and [1 2] (children 3 twice, 4 once); [2] is
        // too shallow.
        assert_eq!(a.path(a.matching_state()), vec![3, 7, 9, 1]);
        let b: Vec<Vec<u32>> = a.borders(2).into_iter().map(|s| a.path(s)).collect();
        assert_eq!(b, vec![vec![7, 9, 1, 2], vec![9, 1, 2], vec![1, 2]]);
        // Merged candidates below the root: 3 (freq 2) and 4 (max(1, 1) = 1). After 3 is
        // kept, its child 7 (freq 2, from [1 2 3 7]) beats 4 (freq 1).
        assert_eq!(a.retrieve(2, 1).unwrap(), vec![vec![2]]);
        assert_eq!(a.retrieve(2, 2).unwrap(), vec![vec![2, 3]]);
        assert_eq!(a.retrieve(2, 3).unwrap(), vec![vec![2, 3, 7]]);
        assert_eq!(a.retrieve(2, 4).unwrap(), vec![vec![2, 3, 7], vec![2, 4]]);
        // Everything: 5 nodes; [2 4 7] comes from [1 2 4 7].
        assert_eq!(
            a.retrieve(2, 64).unwrap(),
            vec![vec![2, 3, 7], vec![2, 4, 7]]
        );
        // Unknown root: no border.
        assert_eq!(a.retrieve(42, 64).unwrap(), vec![vec![42]]);
    }

    #[test]
    fn eviction_keeps_invariants_on_random_streams() {
        for (seed, max_nodes, ngram, alphabet) in [
            (1, 4, 3, 3),
            (2, 5, 4, 2),
            (3, 12, 4, 4),
            (4, 30, 5, 3),
            (5, 7, 7, 5),
            (6, 2, 2, 3),
        ] {
            let mut a = Automaton::new(max_nodes, ngram, 2).unwrap();
            let stream = lcg_stream(seed, 400, alphabet);
            for k in 0..stream.len() {
                a.extend(&stream[k..k + 1]);
                check(&mut a, &stream[..k + 1]);
                // Borders: suffixes present + root, depth >= 2 (brute force).
                let present: HashSet<Vec<u32>> = strings(&a).into_keys().collect();
                for root in 0..alphabet {
                    let got: Vec<Vec<u32>> =
                        a.borders(root).into_iter().map(|s| a.path(s)).collect();
                    let ctx = &stream[..k + 1];
                    let want: Vec<Vec<u32>> = (0..ngram as usize)
                        .rev()
                        .filter_map(|l| {
                            if l > ctx.len() {
                                return None;
                            }
                            let mut q = ctx[ctx.len() - l..].to_vec();
                            q.push(root);
                            (q.len() >= 2 && present.contains(&q)).then_some(q)
                        })
                        .collect();
                    assert_eq!(got, want);
                    let paths = a.retrieve(root, 5).unwrap();
                    let mut distinct: HashSet<Vec<u32>> = HashSet::new();
                    for p in &paths {
                        assert_eq!(p[0], root);
                        for d in 1..=p.len() {
                            distinct.insert(p[..d].to_vec());
                        }
                    }
                    assert!(distinct.len() <= 5);
                }
            }
            assert!(
                a.stats().evictions > 0,
                "max_nodes={max_nodes} should evict"
            );
        }
    }

    #[test]
    fn memory_is_bounded_and_reset_clears() {
        let mut a = Automaton::new(50, 4, 2).unwrap();
        a.extend(&lcg_stream(9, 5000, 20));
        assert_eq!(a.len(), 50);
        assert!(a.nodes.len() <= 51);
        let st = a.stats();
        assert_eq!(st.committed_tokens, 5000);
        assert_eq!(st.inserts - st.evictions, 50);
        a.reset();
        assert_eq!(a.len(), 0);
        assert_eq!(a.stats(), Stats::default());
        assert_eq!(a.retrieve(3, 8).unwrap(), vec![vec![3]]);
        assert!(a.dump().ends_with("state [] root\n"));
    }

    #[test]
    fn retrieval_is_prefix_closed_and_ranked() {
        let mut a = Automaton::new(10_000, 6, 2).unwrap();
        let s = lcg_stream(11, 3000, 6);
        a.extend(&s);
        for cap in [1, 2, 3, 8, 64] {
            let paths = a.retrieve(s[s.len() - 1], cap).unwrap();
            let mut distinct = HashSet::new();
            for p in &paths {
                for d in 1..=p.len() {
                    distinct.insert(p[..d].to_vec());
                }
            }
            assert!(distinct.len() <= cap);
            // No path is a prefix of another (root-to-leaf paths).
            for (i, p) in paths.iter().enumerate() {
                for (j, q) in paths.iter().enumerate() {
                    assert!(i == j || !q.starts_with(p));
                }
            }
        }
    }
}
