//! racer-ref core: the hot parts of RACER speculative decoding, in Rust.
//!
//! One module per concept (see `docs/` and `../shared/docs/racer-spec.md`):
//!
//! * [`automaton`]: the Aho-Corasick n-gram automaton with lazy failure links and O(1) LRU
//!   eviction (spec: "The automaton", step 2 and step 9);
//! * [`lru`]: the O(1) recency list behind that eviction;
//! * [`copy_logit`]: the dense copy-logit table (step 8);
//! * [`logits_tree`]: the logits tree's breadth rule, paper Eq. 3 (step 3);
//! * [`draft_tree`]: merging retrieval and logits trees, flattening (steps 2-4);
//! * [`drafter`]: one drafter per method (racer, retrieval, logits, logits-last, pld, ar);
//! * [`error`]: the one error type, turned into Python `ValueError`/`TypeError` by `py`.
//!
//! The crate knows nothing of torch or Python unless the `python` feature is on; then `py`
//! holds only thin PyO3 wrappers (the `racer_ref._core` extension module).

pub mod automaton;
pub mod copy_logit;
pub mod draft_tree;
pub mod drafter;
pub mod error;
pub mod logits_tree;
pub mod lru;

#[cfg(feature = "python")]
mod py;
