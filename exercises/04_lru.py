"""Exercise 04: the O(1) LRU list (tutorial 4; rust/src/lru.rs).

The automaton recycles its least recently used leaf when it is full. It keeps every trie
node on a recency list, a doubly linked list over slots ``0..capacity-1`` (a node's arena
index): each slot knows its more recent and less recent neighbour, and the list knows its
head (most recent) and tail (least recent). Every operation is O(1): no scan, no list
insert in the middle, no ``list.remove``.

    most recent                                 least recent
      head -> [7] <-> [2] <-> [5] <-> [0] <- tail

Write it with two integer arrays (``newer``, ``older``; ``NIL`` for "none"), as the Rust
core does, or with your own node objects.

Check your code:  racer-ref check exercises/04_lru.py
(named cases, then long random operation sequences against a reference list).
"""

from __future__ import annotations

from typing import List, Optional

#: Marks "no slot".
NIL = -1


class LruList:
    """A recency list over slots ``0..capacity-1``.

    Args:
        capacity: number of slots (>= 1).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        ...

    def touch(self, slot: int) -> None:
        """Make ``slot`` the most recent one, adding it to the list if it is not there."""
        ...

    def remove(self, slot: int) -> None:
        """Take ``slot`` off the list (no-op if it is not on it)."""
        ...

    def least_recent(self) -> Optional[int]:
        """The tail (the slot to recycle), or None when the list is empty."""
        ...

    def most_recent(self) -> Optional[int]:
        """The head, or None when the list is empty."""
        ...

    def __contains__(self, slot: int) -> bool:
        ...

    def __len__(self) -> int:
        ...

    def order(self) -> List[int]:
        """Slots from the most recent to the least recent (O(len); for tests and dumps)."""
        ...
