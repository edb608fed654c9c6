"""Limits and the paper's defaults: the one Python home of each number (twin of ``rust/src/lib.rs``).

Every module of racer-ref that needs one of these numbers imports it from here, so that a
reader finds each rule in one place per language. The values equal the Rust crate's
constants of the same names.
"""

#: The largest token id any structure accepts (token ids are 32-bit, ``u32`` in Rust).
MAX_TOKEN_ID = 2**32 - 1

#: The largest accepted capacity ``C`` (draft-tree nodes, root included). The tree attention
#: mask has ``C * C`` entries, so this bounds its memory.
MAX_CAPACITY = 4096

# The paper's defaults (racer-spec "Paper figures": C = 64, k = 8, n = 10, max_nodes = 10,000).
#: Capacity ``C``: draft-tree nodes per verify pass, root included.
DEFAULT_CAPACITY = 64
#: Breadth ``k``: next-token ids kept per row of the copy-logit table.
DEFAULT_BREADTH = 8
#: ``n``: the longest n-gram window the automaton inserts (its depth bound).
DEFAULT_NGRAM = 10
#: ``max_nodes``: the automaton's node budget before LRU eviction.
DEFAULT_MAX_NODES = 10_000
#: The shallowest border depth: a border is a state of depth >= 2 (a one-token match is no evidence).
DEFAULT_MIN_BORDER_DEPTH = 2
