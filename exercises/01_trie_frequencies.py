"""Exercise 01: the n-gram trie with frequencies (tutorial 1, spec step 9).

Commit tokens one by one into a trie that holds every substring of length <= ngram of the
committed tokens, with its frequency (how many times it occurred). Keep the up to ngram
"open windows" (the nodes of the last 1, 2, ..., ngram committed tokens) and extend each by
one node with the new token: O(ngram) work per token. There is no eviction here (that is
exercise 04); the trie may grow without bound.

    committed: a b a c   (ngram = 3)       (root) -> a:2 -> b:1 -> a:1
                                                        `-> c:1
                                                  -> b:1 -> a:1 -> c:1
                                                  -> c:1

Check your code:  racer-ref check exercises/01_trie_frequencies.py
(it runs the automaton's named cases and compares your trie, node by node from self.root:
its strings, freq, depth, parent and token, with the Rust core's on random token streams).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple


class Node:
    """One trie state: the token on the edge from its parent, its depth and frequency."""

    def __init__(self, token: int, parent: Optional["Node"], depth: int) -> None:
        self.token = token
        self.parent = parent
        self.depth = depth
        self.freq = 0
        self.children: Dict[int, Node] = {}


class Trie:
    """Every substring of length <= ``ngram`` of the committed tokens, with its frequency.

    Args:
        ngram: the window length n (>= 2); bounds the depth of the trie.
    """

    def __init__(self, ngram: int) -> None:
        self.ngram = ngram
        self.root = Node(-1, None, 0)
        # windows[i] = the node of the last i committed tokens (None while fewer than i
        # tokens are committed); windows[0] is always the root.
        self.windows: List[Optional[Node]] = [self.root] + [None] * ngram
        # Number of nodes, the root excluded.
        self.nodes = 0

    def extend(self, tokens: Iterable[int]) -> None:
        """Commit ``tokens`` (ints): for each, extend every open window by one node.

        After committing token t, for every i in 1..ngram, the node of the last i committed
        tokens exists and its ``freq`` counts one more occurrence; ``self.windows`` and
        ``self.nodes`` are up to date.
        """
        ...

    def freq(self, path: Tuple[int, ...]) -> int:
        """Frequency of the string ``path`` (0 if it is not in the trie)."""
        node = self.root
        for token in path:
            node = node.children.get(token)
            if node is None:
                return 0
        return node.freq

    def __len__(self) -> int:
        return self.nodes
