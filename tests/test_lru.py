"""The twin's recency list (``racer_ref.reference.lru.RecencyList``), against a plain list.

The Rust list (``rust/src/lru.rs``) has the same cases as unit tests; here they run on the
twin, plus a property test that drives the list and a Python list model with the same random
operations, and the undo of touches and removals (``racer_ref.reference.undo``: ``WatchedList``,
``snapshot``, ``restore``) interrupted at every line.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from hypothesis import given
from hypothesis import strategies as st

from racer_ref.reference import undo as undo_module
from racer_ref.reference.lru import RecencyList


class Item:
    __slots__ = ("name", "newer", "older")

    def __init__(self, name: int) -> None:
        self.name = name
        self.newer: Optional[Item] = None
        self.older: Optional[Item] = None

    def __repr__(self) -> str:
        return f"Item({self.name})"


def order(lru: RecencyList) -> List[int]:
    return [item.name for item in lru.iter()]


def test_touch_moves_to_head_and_tail_is_least_recent() -> None:
    items = [Item(i) for i in range(4)]
    lru = RecencyList()
    for s in (1, 2, 3):
        lru.touch(items[s])
    assert order(lru) == [3, 2, 1]
    assert lru.least_recent() is items[1]
    lru.touch(items[1])
    assert order(lru) == [1, 3, 2]
    assert lru.least_recent() is items[2]
    assert lru.most_recent() is items[1]
    assert lru.len() == len(lru) == 3
    lru.check()


def test_remove_head_middle_tail() -> None:
    items = [Item(i) for i in range(8)]
    lru = RecencyList()
    for s in range(5):
        lru.touch(items[s])
    lru.remove(items[2])  # middle
    assert order(lru) == [4, 3, 1, 0]
    lru.remove(items[4])  # head
    lru.remove(items[0])  # tail
    assert order(lru) == [3, 1]
    assert lru.least_recent() is items[1]
    lru.remove(items[7])  # never linked: no-op
    assert lru.len() == 2
    lru.remove(items[3])
    lru.remove(items[1])
    assert lru.is_empty()
    assert lru.least_recent() is None and lru.most_recent() is None
    assert items[3].newer is None and items[3].older is None
    lru.check()


def test_clear_then_reuse() -> None:
    a, b = Item(3), Item(0)
    lru = RecencyList()
    lru.touch(a)
    lru.touch(b)
    lru.clear()
    assert lru.is_empty() and not lru.contains(a) and not lru.contains(b)
    assert (a.newer, a.older, b.newer, b.older) == (None, None, None, None)
    lru.touch(a)
    assert order(lru) == [3]


def test_check_catches_a_broken_link() -> None:
    items = [Item(i) for i in range(3)]
    lru = RecencyList()
    for item in items:
        lru.touch(item)
    items[1].newer = None  # as if a touch had stopped half-way
    try:
        lru.check()
    except RuntimeError as error:
        assert "newer link" in str(error)
    else:
        raise AssertionError("check() missed a broken link")


@given(st.lists(st.tuples(st.sampled_from(["touch", "remove"]), st.integers(0, 7)), max_size=60))
def test_matches_a_list_model(ops) -> None:
    items = [Item(i) for i in range(8)]
    lru = RecencyList()
    model: List[int] = []  # most recent first
    for op, s in ops:
        if s in model:
            model.remove(s)
        if op == "touch":
            model.insert(0, s)
            lru.touch(items[s])
        else:
            lru.remove(items[s])
        assert order(lru) == model
        assert lru.len() == len(model)
        assert lru.least_recent() is (items[model[-1]] if model else None)
        assert lru.most_recent() is (items[model[0]] if model else None)
        assert all(lru.contains(items[i]) == (i in model) for i in range(8))
        lru.check()


@given(
    st.lists(st.integers(0, 5), max_size=8),
    st.lists(st.tuples(st.sampled_from(["touch", "remove"]), st.integers(0, 5)), min_size=1, max_size=6),
)
def test_restore_undoes_touches_and_removes_in_reverse(start, ops) -> None:
    items = [Item(i) for i in range(6)]
    lru = RecencyList()
    for s in start:
        lru.touch(items[s])
    before = order(lru)
    undo: list = []
    watched = undo_module.WatchedList(lru, undo)
    for op, s in ops:
        if op == "touch":
            watched.touch(items[s])
        elif lru.contains(items[s]):
            undo.append((undo_module.restore, (lru, undo_module.snapshot(lru, items[s]))))
            lru.remove(items[s])
    while undo:
        function, args = undo.pop()
        function(*args)
    assert order(lru) == before
    lru.check()
    assert all(lru.contains(items[i]) == (i in before) for i in range(6))


def test_restore_after_a_touch_stopped_at_any_line() -> None:
    # A KeyboardInterrupt at the n-th line of touch(): restore() must still give back the
    # list as it was, whatever part of the links had been written.
    # The tail, the middle, the head's neighbour, the head itself (a no-op), a new item.
    for target in (0, 2, 3, 4, 5):
        for n in range(1, 40):
            items = [Item(i) for i in range(6)]
            lru = RecencyList()
            for item in items[:5]:
                lru.touch(item)
            before = order(lru)
            undo: list = []
            watched = undo_module.WatchedList(lru, undo)
            fired = _interrupt_at_line(n, lambda: watched.touch(items[target]))
            if not fired:
                # n is past the end of touch(): it completed; the sweep is over.
                assert order(lru)[0] == target and n > 1
                break
            while undo:
                function, args = undo.pop()
                function(*args)
            assert order(lru) == before, (target, n)
            lru.check()
        else:
            raise AssertionError("touch() never completed within 40 lines")


def _interrupt_at_line(n: int, call) -> bool:
    """Run ``call()`` with a KeyboardInterrupt raised at the n-th line event of lru.py;
    True if it was raised."""
    import racer_ref.reference.lru as module

    count = [0]

    def local(frame, event, arg):
        if event == "line":
            count[0] += 1
            if count[0] == n:
                raise KeyboardInterrupt
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename == module.__file__ else None

    sys.settrace(tracer)
    try:
        call()
    except KeyboardInterrupt:
        return True
    finally:
        sys.settrace(None)
    return False
