//! racer-ref core: the hot parts of RACER speculative decoding, in Rust.
//!
//! One module per concept (see `docs/` and `../shared/docs/racer-spec.md`):
//!
//! * [`automaton`]: the Aho-Corasick n-gram automaton with lazy failure links and O(1) LRU
//!   eviction (spec: "The automaton", step 2 and step 9);
//! * [`error`]: the one error type, turned into Python `ValueError`/`TypeError` by `py`.
//!
//! The crate knows nothing of torch or Python unless the `python` feature is on; then `py`
//! holds only thin PyO3 wrappers (the `racer_ref._core` extension module).

pub mod automaton;
pub mod error;
pub mod lru;

#[cfg(feature = "python")]
mod py;
