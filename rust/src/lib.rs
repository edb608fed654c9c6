//! racer-ref: the hot parts of RACER speculative decoding, in Rust.
//!
//! RACER drafts one token tree per decoding step from two sources that need no extra model:
//! an Aho-Corasick automaton over the n-grams of the context (the *retrieval tree*) and a
//! copy-logit table of the target model's own past top-k predictions (the *logits tree*).
//! The target model then checks the whole tree in one forward pass. This crate is the
//! drafting side; the verification loop (a model, a KV cache) is the caller's.
//!
//! # One decoding step
//!
//! The module docs refer to these steps by number (the project's documentation explains
//! each at length):
//!
//! 1. **Root**: the token the target model just predicted (greedy or sampled).
//! 2. **Retrieval tree**: the automaton's borders for the root (suffixes of the committed
//!    tokens followed by the root) and the most frequent continuations below them
//!    ([`automaton::Automaton::retrieve`]).
//! 3. **Logits tree**: the copy-logit table fills the rest of the capacity, breadth-first,
//!    with the breadth rule of the paper's Eq. 3 ([`logits_tree`]).
//! 4. **Flatten** breadth-first into the arrays of a [`draft_tree::FlatTree`].
//! 5. **Verify**: one forward pass of the target over the tree (the caller's).
//! 6. **Accept** the longest path that matches the target's choices (the caller's).
//! 7. **Commit** the root and the accepted tokens (the caller's).
//! 8. **Update the copy-logit table** with the target's top-k at every verified node
//!    ([`copy_logit::CopyLogitTable::observe`]).
//! 9. **Update the automaton** with the committed tokens
//!    ([`automaton::Automaton::extend`]).
//!
//! One module per concept:
//!
//! * [`automaton`]: the Aho-Corasick n-gram automaton with lazy failure links and O(1) LRU
//!   eviction (the retrieval tree, and committing tokens);
//! * [`lru`]: the O(1) recency list behind that eviction;
//! * [`copy_logit`]: the dense copy-logit table;
//! * [`logits_tree`]: the logits tree's breadth rule (paper Eq. 3), grown into a draft tree;
//! * [`draft_tree`]: merging the retrieval and logits trees, and flattening;
//! * [`chain`]: the best chain of a draft tree (for engines that verify chains only);
//! * [`drafter`]: one drafter per method (racer, retrieval, logits, logits-last, pld, ar);
//! * [`expected_tree`]: beyond the paper, the acceptance estimates and the tree with the
//!   most expected accepted tokens, in an [`expected_tree::Estimator`] that a drafter
//!   attaches only on request (the paper's step never runs it);
//! * [`error`]: the one error type.
//!
//! The paper's defaults ([`DEFAULT_CAPACITY`], [`DEFAULT_BREADTH`], [`DEFAULT_NGRAM`],
//! [`DEFAULT_MAX_NODES`], [`DEFAULT_MIN_BORDER_DEPTH`]), the limits and the capacity check
//! live here, the error type in [`error`]: one home per rule. Public entry points check
//! their arguments once; inside a step nothing is checked again.
//!
//! Imports go one way: `drafter` uses everything; `expected_tree` uses `draft_tree`;
//! `draft_tree` uses `logits_tree`, which uses `copy_logit`; `automaton` uses `lru`. Nothing here knows of torch or Python unless
//! the `python` feature is on; then the private `py` module holds only thin PyO3 wrappers
//! (the `racer_ref._core` extension module) that convert arguments and call this core.
//!
//! # A drafting step
//!
//! ```
//! use racer_ref::draft_tree::{SOURCE_BOTH, SOURCE_LOGITS, SOURCE_RETRIEVAL};
//! use racer_ref::drafter::{Drafter, DrafterConfig, Method};
//!
//! let mut drafter = Drafter::new(DrafterConfig::new(Method::Racer, 100))?;
//! // The committed tokens so far (prompt + output): the automaton learns their n-grams.
//! drafter.commit(&[5, 6, 7, 8, 9, 5, 6])?;
//! // The target model read token 7 once and predicted these top-8 next tokens there
//! // (row-major, shape (1, 8)): the copy-logit row of 7.
//! drafter.observe(&[7], &[8, 1, 2, 3, 4, 10, 11, 12], [1, 8])?;
//! // The target now predicts 7 after "... 5 6": the root. "5 6 7" occurred before, followed
//! // by 8 9 5 6, so the automaton proposes the path 7 8 9 5 6; the copy-logit row of 7
//! // proposes 8 (the same child: "both") and 1 2 3 4 10 11 12 beside it.
//! let tree = drafter.draft(7, None)?;
//! assert_eq!(&tree.tokens[..4], &[7, 8, 1, 2]);
//! assert_eq!(&tree.sources[1..4], &[SOURCE_BOTH, SOURCE_LOGITS, SOURCE_LOGITS]);
//! let retrieved: Vec<u32> = (1..tree.len())
//!     .filter(|&i| tree.sources[i] == SOURCE_RETRIEVAL)
//!     .map(|i| tree.tokens[i])
//!     .collect();
//! assert_eq!(retrieved, vec![9, 5, 6]); // deeper on the retrieval path
//! assert!(tree.len() <= racer_ref::DEFAULT_CAPACITY);
//! # Ok::<(), racer_ref::error::Error>(())
//! ```
//!
//! `examples/drafting_loop.rs` runs a whole decoding loop (a toy n-gram "target model",
//! greedy verification) and checks that the output equals plain greedy decoding:
//! `cargo run --example drafting_loop`.

#![deny(missing_docs)]

pub mod automaton;
pub mod chain;
pub mod copy_logit;
pub mod draft_tree;
pub mod drafter;
pub mod error;
pub mod expected_tree;
pub mod logits_tree;
pub mod lru;

#[cfg(feature = "python")]
mod py;

/// The crate README's example runs as a doc test, so the registry page cannot drift.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use error::{Error, Result};

/// A token id of the target model's vocabulary.
///
/// A plain `u32` (not a newtype), so that token streams are ordinary `&[u32]` slices; the
/// alias says in a signature which `u32`s are tokens.
pub type TokenId = u32;

/// A token id as a caller may hold it before it is checked: a [`TokenId`], or the `i64`
/// a Python int or a numpy array arrives as (possibly negative). The checks of
/// [`copy_logit`] read either and name the offending value as it was given; the public
/// API takes [`TokenId`]s (the PyO3 layer checks its `i64`s with the same functions).
pub trait Id: Copy + Into<i64> {}
impl Id for TokenId {}
impl Id for i64 {}

/// A node of a draft tree, by its index: in a [`draft_tree::TreeBuilder`] the slot in its
/// arena (creation order), in a [`draft_tree::FlatTree`] the breadth-first position. The
/// root is node 0 in both.
pub type NodeId = u32;

/// The largest token id any structure accepts (ids are 32-bit).
pub const MAX_TOKEN_ID: TokenId = u32::MAX;

// The draft tree's `sources` values (the twin's are in `racer_ref/tree.py`), here so that
// `logits_tree` and `draft_tree` share them without importing each other both ways;
// `draft_tree` re-exports them.

/// `sources` value of the root (drafted by neither tree).
pub const SOURCE_ROOT: u8 = 0;
/// `sources` bit: the node came from the retrieval tree (or the PLD chain).
pub const SOURCE_RETRIEVAL: u8 = 1;
/// `sources` bit: the node came from the logits tree.
pub const SOURCE_LOGITS: u8 = 2;
/// `sources` value of a node proposed by both trees.
///
/// ```
/// use racer_ref::draft_tree::{SOURCE_BOTH, SOURCE_LOGITS, SOURCE_RETRIEVAL};
/// assert_eq!(SOURCE_BOTH & SOURCE_RETRIEVAL, SOURCE_RETRIEVAL);
/// assert_eq!(SOURCE_BOTH & SOURCE_LOGITS, SOURCE_LOGITS);
/// ```
pub const SOURCE_BOTH: u8 = SOURCE_RETRIEVAL | SOURCE_LOGITS;

/// The largest accepted capacity `C`: nodes of a draft tree, root included (tokens per
/// verify pass; the paper uses 64). Also bounds a retrieval tree, which is part of a draft
/// tree. The tree attention mask has `C^2` entries, so this bounds its memory (16 MiB).
///
/// ```
/// use racer_ref::automaton::Automaton;
/// let mut a = Automaton::new(100, 3, 2)?;
/// assert!(a.retrieve(1, racer_ref::MAX_CAPACITY).is_ok());
/// assert!(a.retrieve(1, racer_ref::MAX_CAPACITY + 1).is_err());
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
pub const MAX_CAPACITY: usize = 4096;

/// The paper's capacity `C`: draft-tree nodes per verify pass, root included.
pub const DEFAULT_CAPACITY: usize = 64;

/// The paper's breadth `k`: next-token ids kept per row of the copy-logit table (and the
/// root's breadth in the logits tree).
pub const DEFAULT_BREADTH: usize = 8;

/// The paper's `n`: the longest n-gram window the automaton inserts (its depth bound).
pub const DEFAULT_NGRAM: usize = 10;

/// The paper's node budget of the automaton before LRU eviction.
pub const DEFAULT_MAX_NODES: usize = 10_000;

/// The shallowest border depth: a border is a state of depth >= 2 (a one-token match is
/// no evidence).
pub const DEFAULT_MIN_BORDER_DEPTH: usize = 2;

/// Check a capacity argument (`1 <= capacity <= MAX_CAPACITY`) and return it as `usize`.
///
/// The one capacity check of the crate: draft trees, retrieval trees and drafters use it.
///
/// ```
/// assert_eq!(racer_ref::check_capacity(64), Ok(64));
/// let e = racer_ref::check_capacity(0).unwrap_err();
/// assert_eq!(e.to_string(), "capacity: must be in [1, 4096], got 0");
/// ```
pub fn check_capacity(capacity: i64) -> Result<usize> {
    if (1..=MAX_CAPACITY as i64).contains(&capacity) {
        Ok(capacity as usize)
    } else {
        Err(Error::value(
            "capacity",
            format!("must be in [1, {MAX_CAPACITY}], got {capacity}"),
        ))
    }
}
