"""Type stubs for the Rust extension ``racer_ref._core`` (hand-written; the tests check them
against the binary). Each class mirrors a pure-Python twin in ``racer_ref.reference``."""

from typing import Dict, Iterable, List, Optional, SupportsIndex

__version__: str

class Automaton:
    """The Aho-Corasick n-gram automaton of RACER's retrieval tree (racer-spec.md, "The
    automaton", steps 2 and 9). Twin: ``racer_ref.reference.Automaton``.

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
        at most ``capacity`` distinct nodes, root included. ``[[root]]`` without borders."""
    def borders(self, root: int) -> List[List[int]]:
        """The borders' token strings for ``root``, longest first."""
    def reset(self) -> None:
        """Forget everything (trie, windows, matching state, counters)."""
    def len(self) -> int:
        """Trie nodes in use, the root excluded."""
    def __len__(self) -> int: ...
    def stats(self) -> Dict[str, int]:
        """nodes, max_nodes, ngram, min_border_depth, committed_tokens, inserts, evictions,
        retrieves, fail_hits, fail_misses, matching_depth."""
    def dump(self) -> str:
        """Canonical text of the whole automaton (same as the Python twin's)."""
