"""The O(1) recency list behind the automaton's LRU eviction: the pure-Python twin.

This is the teaching version of ``rust/src/lru.rs`` (``RecencyList``), with the same names:
``touch``, ``remove``, ``least_recent``, ``most_recent``, ``iter``, ``contains``, ``len``,
``is_empty``, ``clear``. Source: the docs' "The O(1) LRU" page and the automaton's LRU
eviction rule (the paper's Section 3: when the trie is full, recycle the least recently
used leaf).

The automaton must answer "which node was used least recently?" and "this node was just
used" in O(1), thousands of times per second. A doubly linked list does both: every item
knows its two neighbours, so moving an item to the front, or taking one out, changes a
fixed handful of links, whatever the length of the list::

      head (most recent)                                        tail (least recent)
    None <- [7] <-> [3] <-> [12] <-> [1] <-> ... <-> [5] <-> [9] -> None
              ^ touch(12): unlink 12 (3 and 1 now point at each other),
                           then push it in front of 7, at the head
                                                                ^ evict: take the tail

The list is *intrusive*: the links live on the items themselves, in two attributes
``newer`` (towards the head) and ``older`` (towards the tail), exactly as the Rust list keeps
one ``Link { newer, older }`` per arena slot. So there is no hash map from an item to its
place on the list: the item *is* its place. Any object with those two attributes (set to
``None`` when it is not on the list) can be an item; the automaton's ``_Node`` has them.

The list knows nothing of tries. The invariant that makes its tail a trie leaf,
"a parent is never less recent than its children", is kept by the automaton, which touches
a node and then each of its ancestors, bottom-up: the parent is touched last, so it ends
up nearer the head than any child. The tail then has no child at all (a child would be
even less recent than the tail, and nothing is), so evicting it never orphans a subtree.

Like the Rust list, this one knows nothing of undo: when ``Automaton.extend`` is interrupted
(Ctrl-C), the twin's wrapper ``undo.all_or_nothing`` takes its touches and removals back
(``undo.WatchedList``, ``undo.snapshot`` and ``undo.restore``; the automaton's Part 7).

Run ``python -m racer_ref.reference.lru`` for a walkthrough that prints each stage.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional


class RecencyList:
    """A doubly linked recency list; every operation is O(1) (pure Python).

    Items are any objects with ``newer`` and ``older`` attributes, both ``None`` while the
    item is off the list. The head is the most recent item, the tail the least recent.

    An item is on the list if and only if it has a newer neighbour or it is the head: the
    same rule as the Rust list, so no separate "on the list" flag is needed.
    """

    __slots__ = ("head", "tail", "_len")

    def __init__(self) -> None:
        # An empty list: no head, no tail. `None` plays the role of Rust's NIL.
        self.head: Any = None
        self.tail: Any = None
        self._len = 0

    def clear(self) -> None:
        """Unlink every item (O(length): each item's links are reset to ``None``)."""
        item = self.head
        while item is not None:
            # Read the next one before we erase the link that leads to it.
            older = item.older
            item.newer = item.older = None
            item = older
        self.head = self.tail = None
        self._len = 0

    def len(self) -> int:
        """Number of items on the list."""
        return self._len

    def __len__(self) -> int:
        return self._len

    def is_empty(self) -> bool:
        """Whether the list is empty."""
        return self._len == 0

    def contains(self, item: Any) -> bool:
        """Whether ``item`` is on the list (O(1): the item's own link tells)."""
        # Every item but the head has a newer neighbour; the head is recognised by identity.
        return item is self.head or item.newer is not None

    def least_recent(self) -> Any:
        """The least recently used item (the tail), or ``None`` when empty."""
        return self.tail

    def most_recent(self) -> Any:
        """The most recently used item (the head), or ``None`` when empty."""
        return self.head

    def touch(self, item: Any) -> None:
        """Make ``item`` the most recent one, adding it to the list if it is not there yet.

        Two O(1) halves: unlink it from where it is (its two neighbours then point at each
        other), then push it at the head. At most six links change, whatever the length.
        """
        if item is self.head:
            # Already the most recent: nothing to do. (Unlinking the head only to push it
            # straight back would be wasted work.)
            return
        if item.newer is not None:
            # On the list (it has a newer neighbour: it is not the head): close the gap.
            self._unlink(item)
        # Now off the list, whether it was on it or new: it joins at the head.
        self._push_front(item)

    def remove(self, item: Any) -> None:
        """Take ``item`` off the list (no-op if it is not on it)."""
        if self.contains(item):
            self._unlink(item)

    def iter(self) -> Iterator[Any]:
        """Items from the most recent (head) to the least recent (tail)."""
        item = self.head
        while item is not None:
            # Read the link first: the caller may remove `item` while we are paused here.
            older = item.older
            yield item
            item = older

    def __iter__(self) -> Iterator[Any]:
        return self.iter()

    # ----------------------------------------------------------------------------------
    # The two primitives. Every change of the list is one of them or both (touch).
    #
    #   _unlink(x):      [a] <-> [x] <-> [b]     becomes     [a] <-> [b]        x alone
    #   _push_front(x):  None <- [h] ...         becomes     None <- [x] <-> [h] ...
    # ----------------------------------------------------------------------------------

    def _push_front(self, item: Any) -> None:
        """Link ``item`` (not on the list) in front of the head."""
        old_head = self.head
        # Nothing is newer than the head; the old head is the next older one.
        item.newer = None
        item.older = old_head
        if old_head is not None:
            # ... and it points back at its new, newer neighbour.
            old_head.newer = item
        else:
            # The list was empty: the new item is the tail as well.
            self.tail = item
        self.head = item
        self._len += 1

    def _unlink(self, item: Any) -> None:
        """Take ``item`` (on the list) out, joining its two neighbours."""
        newer, older = item.newer, item.older
        # The newer side: a neighbour, or (when item is the head) the head pointer itself.
        if newer is not None:
            newer.older = older
        else:
            self.head = older
        # The older side: a neighbour, or (when item is the tail) the tail pointer.
        if older is not None:
            older.newer = newer
        else:
            self.tail = newer
        # Off the list: both links None (that is how contains() tells).
        item.newer = item.older = None
        self._len -= 1

    # ----------------------------------------------------------------------------------
    # Self-check, for the tests: O(length), so never called on the fast path.
    # ----------------------------------------------------------------------------------

    def check(self) -> None:
        """Raise ``RuntimeError`` unless the links form one consistent list of ``len()``.

        Checked: the head has no newer and the tail no older neighbour; walking from the
        head, each item's ``older`` neighbour points back at it; the walk ends at the tail
        after exactly ``len()`` items. (Plain ``if`` tests, not ``assert``: they must hold
        under ``python -O`` too.)
        """
        # An empty list has neither end; a non-empty one has both.
        if (self.head is None) != (self.tail is None) or (self.head is None) != (self._len == 0):
            raise RuntimeError("recency list: head, tail and length disagree")
        if self.head is not None and self.head.newer is not None:
            raise RuntimeError("recency list: the head has a newer neighbour")
        # Walk from the head to the tail along `older`, checking each `newer` on the way.
        count, item, last = 0, self.head, None
        while item is not None:
            count += 1
            # A torn list can contain a cycle: stop after len() items instead of looping.
            if count > self._len:
                raise RuntimeError(f"recency list: more than len() = {self._len} items (a cycle?)")
            if item.newer is not last:
                raise RuntimeError("recency list: an item's newer link does not point back")
            last, item = item, item.older
        # The walk must end exactly at the tail, after exactly len() items.
        if last is not self.tail or count != self._len:
            raise RuntimeError(
                f"recency list: the walk from the head ends after {count} items, "
                f"len() = {self._len}, or not at the tail"
            )


# ======================================================================================
# Walkthrough: python -m racer_ref.reference.lru
# ======================================================================================


class _Item:
    """A minimal list item: a name and the two links."""

    __slots__ = ("name", "newer", "older")

    def __init__(self, name: str) -> None:
        self.name = name
        self.newer: Optional[_Item] = None
        self.older: Optional[_Item] = None

    def __repr__(self) -> str:
        return self.name


def _walkthrough() -> None:
    def show(lru: RecencyList) -> str:
        return "head " + " <-> ".join(map(repr, lru.iter())) + " tail" if lru.len() else "(empty)"

    # Five items named like trie strings, so that "parent" means "prefix": a is the
    # parent of ab, ab of abc, b of bc. We touch them as the automaton would, bottom-up.
    items = {name: _Item(name) for name in ("a", "ab", "abc", "b", "bc")}
    lru = RecencyList()
    print("Stage 1. Touch five items; each new one goes to the head:")
    for name in ("bc", "b", "abc", "ab", "a"):
        lru.touch(items[name])
        print(f"    touch({name:3})  {show(lru)}")
    print("    (bottom-up: 'abc' before 'ab' before 'a', so each parent is nearer the head)")

    print("\nStage 2. Touch 'bc' then its parent 'b' again: both move to the head, O(1) each:")
    lru.touch(items["bc"])
    lru.touch(items["b"])
    print("   ", show(lru))
    print("    least recent:", lru.least_recent(), "  most recent:", lru.most_recent())

    # The tail is abc, then ab: each time a node without children, as the invariant says.
    print("\nStage 3. Evict the least recent item twice (a trie leaf every time):")
    for _ in range(2):
        victim = lru.least_recent()
        lru.remove(victim)
        print(f"    remove({victim!r:3})  {show(lru)}")

    lru.check()
    print("    check(): the links are consistent")


if __name__ == "__main__":
    _walkthrough()
