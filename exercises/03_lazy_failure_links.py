"""Exercise 03: lazy failure links (tutorial 3).

RACER's trie changes at every token, so rebuilding all failure links (exercise 02) per
step is too slow. Compute a link only when it is asked for, and cache it. A cached link of
s can only go stale when a node *ending with s's last token* is created or evicted (every
non-empty suffix of s ends with that token). So keep one counter (an "epoch") per token,
bumped by every such change, and trust a cached link while its stamp equals the epoch of
its token. (The twin shares 1024 counters among all tokens, ``t % 1024``: sharing only
causes extra recomputation, never a wrong link.)

The trie below is given: ``add`` creates a node, ``evict`` removes a leaf, and both call
``changed(token)``. Look children up only through ``node.children`` (the checker counts
those lookups to see that you use your cache).

Check your code:  racer-ref check exercises/03_lazy_failure_links.py
(the automaton's named cases, then random inserts and evictions; after each one every link
must equal the eager build, and asking again without a change must hit the cache).
"""

from __future__ import annotations

from typing import Dict, List, Optional

#: Number of epoch counters; token t uses counter t % EPOCH_SLOTS.
EPOCH_SLOTS = 1024


class Node:
    def __init__(self, token: int, parent: Optional["Node"], depth: int) -> None:
        self.token = token
        self.parent = parent
        self.depth = depth
        self.children: Dict[int, Node] = {}
        # The cached failure link and the epoch it was computed in (-1: never).
        self.fail: Optional[Node] = None
        self.fail_stamp = -1


class LazyTrie:
    """A trie whose failure links are computed on demand and cached."""

    def __init__(self) -> None:
        self.root = Node(-1, None, 0)
        self.epochs: List[int] = [0] * EPOCH_SLOTS

    def add(self, parent: Node, token: int) -> Node:
        """Create the child ``token`` of ``parent`` (it must not exist yet)."""
        child = Node(token, parent, parent.depth + 1)
        parent.children[token] = child
        self.changed(token)
        return child

    def evict(self, leaf: Node) -> None:
        """Remove ``leaf`` (a node without children) from the trie."""
        del leaf.parent.children[leaf.token]
        self.changed(leaf.token)

    def changed(self, token: int) -> None:
        """A node whose string ends with ``token`` was created or evicted: cached links of
        nodes ending with ``token`` may be stale now."""
        ...

    def fail(self, node: Node) -> Node:
        """The failure link of ``node`` (not the root): from the cache if its stamp is still
        current, else computed with the classic recurrence (using ``fail`` of shallower
        nodes) and cached with the current epoch of ``node.token``."""
        ...
