"""Type stubs for the Rust extension ``racer_ref._core`` (hand-written; the tests check them
against the binary). Each class mirrors a pure-Python twin in ``racer_ref.reference``.

Threads: every object takes an internal lock for the Rust part of each call (arguments are
converted before). Under the GIL, calls on one object from several threads are therefore
serialised, each call whole; a call that finds the object busy anyway (a free-threaded
interpreter, or Python code running inside a call, such as a garbage-collector callback)
raises ``RuntimeError`` saying the object is in use, at once."""

from typing import Dict, Iterable, List, Optional, SupportsIndex

__version__: str

class Automaton:
    """The Aho-Corasick n-gram automaton of RACER's retrieval tree (docs/explanation/spec.md,
    steps 2 and 9). Twin: ``racer_ref.reference.Automaton``.

    Args:
        max_nodes: most trie nodes kept, root excluded; int in ``[ngram, 2**31 - 1]``.
        ngram: window length n, int in ``[2, 256]``.
        min_border_depth: least depth of a border, int in ``[1, ngram]``.
        (``None`` means the default.)

    Raises:
        TypeError: an argument is not an int (bool and float included).
        ValueError: an argument is out of range; the message names it.
    """

    def __init__(
        self,
        max_nodes: Optional[int] = 10_000,
        ngram: Optional[int] = 10,
        min_border_depth: Optional[int] = 2,
    ) -> None: ...
    @property
    def max_nodes(self) -> int: ...
    @property
    def ngram(self) -> int: ...
    @property
    def min_border_depth(self) -> int: ...
    def extend(self, tokens: Iterable[SupportsIndex]) -> None:
        """Commit tokens (ints in ``[0, 2**32 - 1]``; a list, tuple, 1-D integer numpy
        array or any iterable). Everything is checked first: on ``TypeError`` /
        ``ValueError`` nothing is committed."""
    def retrieve(self, root: int, capacity: int) -> List[List[int]]:
        """Root-to-leaf token paths of the retrieval tree, each starting with ``root``;
        at most ``capacity`` distinct nodes, root included (an int in ``[1, 4096]``,
        ``MAX_CAPACITY``). ``[[root]]`` without borders."""
    def borders(self, root: int) -> List[List[int]]:
        """The borders' token strings for ``root``, longest first."""
    def reset(self) -> None:
        """Forget everything (trie, windows, matching state, counters)."""
    def len(self) -> int:
        """Trie nodes in use, the root excluded."""
    def __len__(self) -> int: ...
    def stats(self) -> Dict[str, int]:
        """nodes, max_nodes, ngram, min_border_depth, committed_tokens, inserts, evictions,
        retrieves, fail_hits, fail_misses, matching_depth. The failure-link cache counters
        (fail_hits, fail_misses) are the only ones that differ from the twin's: ``retrieve``
        here finds the borders from the open windows and follows no failure links."""
    def dump(self) -> str:
        """Canonical text of the whole automaton (same as the Python twin's)."""

# ---------------------------------------------------------------------------------------
# Drafting side: copy-logit table, draft tree, drafters (rust/src/py/drafter.rs).
# Twins: racer_ref.reference.CopyLogitTable, .build_draft_tree, .Drafter.
# Integer arguments accept numpy arrays of any integer dtype and layout, lists, tuples
# and anything numpy.asarray understands; float or bool dtypes raise TypeError.
# ---------------------------------------------------------------------------------------

from typing import Any, Sequence, Tuple

import numpy as np

#: Largest accepted capacity of a draft tree and of a retrieval tree (4096).
MAX_CAPACITY: int

#: tokens (n,) int64, parents (n,) int64, depths (n,) int64, attention_mask (n, n) bool,
#: retrieve_indices None (``DraftTree`` computes it on first read), sources (n,) uint8.
DraftTreeArrays = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, None, np.ndarray]

class CopyLogitTable:
    """Dense ``[vocab_size, k]`` copy-logit table with a per-row seen flag (docs/explanation/spec.md
    step 8); ``k`` is the breadth. Twin: ``racer_ref.reference.CopyLogitTable``.

    Raises:
        TypeError: an argument is not an int.
        ValueError: ``vocab_size < 1``, ``k`` outside ``[1, vocab_size]`` or
            ``vocab_size * k > 2**28``; the message names the argument (``k:``).
    """

    def __init__(self, vocab_size: int, k: int) -> None: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def k(self) -> int: ...
    @property
    def num_seen(self) -> int: ...
    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        """Row ``token_ids[i]`` := ``topk_ids[i, :k]``; shapes ``(n,)`` and ``(n, k' >= k)``.
        Validated first (ValueError / TypeError); the last occurrence of a token wins."""
    def row(self, token: int) -> List[int]:
        """The ``k`` ids of row ``token``, best first; ``[]`` if never seen."""
    def is_seen(self, token: int) -> bool: ...
    def reset(self) -> None:
        """Empty every row."""

def build_draft_tree(
    root: int,
    capacity: int,
    retrieval_paths: Optional[Iterable[Sequence[int]]] = None,
    table: Optional[CopyLogitTable] = None,
    root_topk: Optional[Any] = None,
) -> DraftTreeArrays:
    """Retrieval paths first, then the logits tree from ``table`` fills the capacity;
    flattened breadth-first (docs/explanation/spec.md steps 2-4). ``root_topk`` (last-logit
    mode, read only with a table): at least ``table.k`` ids replacing the root's row.
    Twin: ``racer_ref.reference.build_draft_tree`` (which returns a ``DraftTree``).

    Raises:
        TypeError: a non-integer root, capacity or token.
        ValueError: capacity outside ``[1, MAX_CAPACITY]``; a token outside
            ``[0, table.vocab_size)`` (``[0, 2**32)`` without a table); a path that is
            empty or does not start with the root; ``root_topk`` shorter than ``table.k``.
    """

class Drafter:
    """One drafter per method: ``racer``, ``retrieval``, ``logits``, ``logits-last``,
    ``pld``, ``ar``. Use ``racer_ref.Drafter`` (documented there), which wraps this class
    and returns ``DraftTree`` objects."""

    def __init__(
        self,
        method: str = "racer",
        vocab_size: Optional[int] = None,
        capacity: int = 64,
        breadth: int = 8,
        ngram: int = 10,
        max_nodes: int = 10_000,
        min_border_depth: int = 2,
        tree: str = "paper",
    ) -> None: ...
    @property
    def method(self) -> str: ...
    @property
    def tree(self) -> str: ...
    @property
    def path_probs(self) -> Optional[Any]:
        """``(n,)`` float64 path probabilities of the last draft, or None."""
    @property
    def expected_tokens(self) -> Optional[float]:
        """``E[a + 1]`` of the last draft, or None."""
    def acceptance_stats(self) -> Optional[Dict[str, Any]]:
        """The acceptance estimates' counts and calibration record; None when no
        estimates are attached."""
    def attach_estimator(self) -> None:
        """Attach the acceptance estimates (``tree="expected"`` attaches them at
        construction); the paper's step runs without them."""
    @property
    def vocab_size(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def breadth(self) -> int: ...
    @property
    def ngram(self) -> int: ...
    @property
    def max_nodes(self) -> int: ...
    @property
    def num_committed(self) -> int: ...
    @property
    def automaton_nodes(self) -> int: ...
    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        """Copy-logit update: ``(n,)`` ids and ``(n, k' >= breadth)`` top-k ids."""
    def commit(self, token_ids: Any) -> None:
        """Committed output tokens ``(n,)``: automaton and PLD history."""
    def draft(self, root: int, last_topk: Optional[Any] = None, capacity: Optional[int] = None) -> DraftTreeArrays:
        """The six ``DraftTree`` arrays for this step."""
    def table_row(self, token: int) -> List[int]:
        """Copy-logit row of ``token`` (``[]`` if unseen or the method has no table)."""
    def reset(self) -> None:
        """Forget the automaton, the copy-logit table and the history."""

# ---------------------------------------------------------------------------------------
# The best chain of a draft tree (rust/src/py/chain.rs). Twin: racer_ref.reference.best_chain.
# ---------------------------------------------------------------------------------------

def best_chain(parents: Any, length: int) -> np.ndarray:
    """``(m,)`` int64 node indices of the first-child path below the root of a breadth-first
    draft tree, ``m <= length``, root side first, root excluded (the highest-ranked path:
    retrieval first, then copy-logit). ``parents``: ``(n,)`` integer ``DraftTree.parents``.

    Raises:
        TypeError: ``length`` not an int, or a non-integer dtype.
        ValueError: ``parents`` not 1-D, empty, not starting with -1, or with a parent that
            does not precede its node; ``length < 0``.
    """
