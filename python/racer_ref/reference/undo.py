"""All or nothing: an interrupted call changes nothing (the twin's Ctrl-C safety).

A Ctrl-C in a notebook raises ``KeyboardInterrupt`` between *any* two lines. If it lands
half-way through a change (a recency-list touch with one link updated and not the other,
an automaton extended but the drafter's count not yet), every later call would trip over
it. So the public operations that change the twin (``Automaton.extend``, ``Drafter.commit``)
run their change through ``all_or_nothing``, a wrapper: the automaton and the drafter
themselves are the paper's algorithm and record nothing (the decoding loop's own drafter
commits without the wrapper, see ``Drafter.trusted_step``).

The wrapper keeps a write-ahead *undo log*: before each change is made, it appends how to
take it back (a function and its arguments)::

    undo log:  [old fields] [old child of [a]] [old links of [a b]] [revive [c]] ...
               played last <----------------------------------------- played first

How can a wrapper see each change before it happens? A commit changes very few things:

* the automaton's small fields (windows, matching state, node count, counters, epochs):
  saved whole, once per call;
* per committed token, the child ``token`` of each open window (its count goes up, or it is
  created; Part 2 of the automaton): saved before the automaton's ``_extend_one``;
* the recency list (a touch, or the removal of an evicted node, Part 4): while the call runs
  the automaton's list is a ``WatchedList``, which saves the links a touch or a removal will
  write (``snapshot``) and, for a removal, how to hang the evicted node back in the trie;
* the drafter's history length and count: saved once per call.

If the call is interrupted anywhere, the log is played backwards and the exception re-raised:
every entry restores *old values*, so it is right whether its change was made, never made,
or made half-way. The owner is then exactly as before the call (tests/test_interrupts.py
interrupts every line, this module's included).

Only a second interrupt during that rollback can leave a mix. For that case the owner's
``_torn`` flag is set while changes are in flight and cleared when they are complete or
fully undone; a torn object refuses every call with a ``RuntimeError`` that says to call
``reset()`` (``check_intact``), instead of silently losing state later.

The Rust core needs none of this: nothing interrupts a Rust call half-way.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

#: An undo log: (function, arguments) pairs, played backwards on an interrupt.
UndoLog = List[Tuple[Callable[..., Any], tuple]]
#: What ``snapshot`` returns: (item, its newer, its older, head, tail, length).
Snapshot = Tuple[Any, Any, Any, Any, Any, int]


def all_or_nothing(owner: Any, apply: Callable[..., None], *args: Any) -> None:
    """Run ``apply(*args)``, a change of ``owner`` (an ``Automaton``, or a ``Drafter`` and its
    automaton), watched: if anything interrupts it (``KeyboardInterrupt`` included), undo
    every change it made and re-raise. ``owner._torn`` is True while changes are in flight."""
    undo: UndoLog = []
    try:
        # Set on the try's first line and cleared on its last, so that whatever line an
        # interrupt hits, the `except` below sees it and undoes what was done.
        owner._torn = True
        _watch(owner, undo)
        apply(*args)
        _unwatch(owner)
        owner._torn = False
    except BaseException:
        # BaseException: KeyboardInterrupt is not an Exception, and is the point here.
        _unwatch(owner)
        rollback(owner, undo)
        raise


def rollback(owner: Any, undo: UndoLog) -> None:
    """Play ``undo`` backwards (newest change first), then clear ``owner._torn``."""
    # Interrupted here, the flag stays set: the next call asks for reset().
    owner._torn = True
    while undo:
        function, args = undo.pop()
        function(*args)
    owner._torn = False


def check_intact(*owners: Any) -> None:
    """Raise ``RuntimeError(owner.TORN)`` for the first of ``owners`` (``None`` skipped) left
    torn: its message says what was interrupted and to call ``reset()``."""
    for owner in owners:
        if owner is not None and owner._torn:
            raise RuntimeError(owner.TORN)


# ======================================================================================
# Watching a change: save what it will write, before it writes it.
# ======================================================================================


def _parts(owner: Any) -> Tuple[Any, Any]:
    """``(drafter or None, automaton or None)`` of ``owner``."""
    # A Drafter holds its automaton (None for the methods without one); an Automaton is one.
    if hasattr(owner, "num_committed"):
        return owner, owner.automaton
    return None, owner


def _watch(owner: Any, undo: UndoLog) -> None:
    """Save what the change may write (see the module's docstring) and start watching the rest."""
    drafter, automaton = _parts(owner)
    if drafter is not None:
        undo.append((_restore_drafter, (drafter, len(drafter.history), drafter.num_committed)))
    if automaton is None:
        return
    # The small fields, whole: windows and the matching state (each step assigns new ones,
    # so keeping the old objects is enough), the node count, copies of the counters and of
    # the failure-link epochs (1,024 ints).
    undo.append((_restore_fields, (
        automaton, automaton._windows, automaton._matching, automaton._len,
        dict(automaton._stats), list(automaton._epochs),
    )))
    plain_step = type(automaton)._extend_one

    def watched_step(token: int) -> None:
        # One token changes, in the trie, only the child `token` of each open window (one
        # more occurrence, or a new node), and what an eviction removes (WatchedList).
        for window in automaton._windows:
            if window is not None and window.alive:
                child = window.children.get(token)
                undo.append((_put_back, (window, token, child, 0 if child is None else child.freq)))
        plain_step(automaton, token)

    # An instance attribute is found before the class's method: the automaton's own
    # `self._extend_one(token)` now calls watched_step, until _unwatch removes it.
    automaton._extend_one = watched_step
    automaton._lru = WatchedList(automaton._lru, undo)


def _unwatch(owner: Any) -> None:
    """Stop watching (the automaton's own step and list again); safe to call twice."""
    automaton = _parts(owner)[1]
    if automaton is not None:
        vars(automaton).pop("_extend_one", None)
        if isinstance(automaton._lru, WatchedList):
            automaton._lru = automaton._lru.lru


class WatchedList:
    """The automaton's recency list while a change is watched: ``touch`` and ``remove``
    first log how to take them back, then call the list's own. Everything else is the list's."""

    def __init__(self, lru: Any, undo: UndoLog) -> None:
        self.lru, self.undo = lru, undo

    def touch(self, item: Any) -> None:
        # Touching the head changes nothing (RecencyList.touch returns at once).
        if item is not self.lru.head:
            self.undo.append((restore, (self.lru, snapshot(self.lru, item))))
        self.lru.touch(item)

    def remove(self, item: Any) -> None:
        # The automaton removes a node from its list only to evict it (Part 4): the undo
        # puts its links back, and hangs it back under its parent, alive.
        self.undo.append((restore, (self.lru, snapshot(self.lru, item))))
        self.undo.append((_revive, (item,)))
        self.lru.remove(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lru, name)


# ======================================================================================
# The undo of each change: each writes back old values, whatever was already done.
# ======================================================================================


def _restore_drafter(drafter: Any, length: int, num_committed: int) -> None:
    """Undo of a drafter's commit: cut the history back, put the old count back."""
    del drafter.history[length:]
    drafter.num_committed = num_committed


def _restore_fields(automaton: Any, windows, matching, length, stats, epochs) -> None:  # type: ignore[no-untyped-def]
    """Undo: put back the automaton's fields saved at the start of the call."""
    automaton._windows, automaton._matching, automaton._len = windows, matching, length
    automaton._stats, automaton._epochs = stats, epochs


def _put_back(window: Any, token: int, child: Optional[Any], freq: int) -> None:
    """Undo of one token at one window: its child ``token`` as it was (none, or ``child``
    with count ``freq``)."""
    if child is None:
        # Pop with a default: fine if the child was never created.
        window.children.pop(token, None)
    else:
        window.children[token] = child
        child.freq = freq


def _revive(node: Any) -> None:
    """Undo of an eviction: hang ``node`` back under its parent and mark it alive."""
    node.parent.children[node.token] = node
    node.alive = True


# ----------------------------------------------------------------------------------------
# The recency list's undo. `touch(x)` and `remove(x)` write nothing but: x's two links, the
# facing links of x's neighbours, the old head's `newer`, and head / tail / length. So if we
# write those down *before* the call, we can always put them back, whether the call
# finished, never started, or stopped half-way (a Ctrl-C between two lines).
# ----------------------------------------------------------------------------------------


def snapshot(lru: Any, item: Any) -> Snapshot:
    """Everything ``lru.touch(item)`` or ``lru.remove(item)`` could change, to ``restore`` it."""
    # Six values, O(1). The neighbours' own links need not be saved: we know what they
    # were (they pointed at `item`), and restore() writes exactly that back.
    return (item, item.newer, item.older, lru.head, lru.tail, lru._len)


def restore(lru: Any, snap: Snapshot) -> None:
    """Undo one ``touch`` or ``remove`` of the snapshot's item, done or half-done.

    Call it on the list as it was right after that operation: snapshots are restored in the
    reverse order of the operations they were taken before.
    """
    item, newer, older, head, tail, length = snap
    # Picture a touch of x stopped after its unlink, before its push:
    #
    #   before:   [h] <-> ... <-> [a] <-> [x] <-> [b] <-> ...      (head h)
    #   now:      [h] <-> ... <-> [a] <-> [b] <-> ...      x alone
    #
    # Writing the old values back, whatever was already done, re-threads x between a and b.
    # The item's own links, and its neighbours' links facing it.
    item.newer, item.older = newer, older
    if newer is not None:
        newer.older = item
    if older is not None:
        older.newer = item
    # A push at the head set the old head's `newer`; a head has none.
    if head is not None:
        head.newer = None
    # And the list's own three fields (all other items' links were never touched).
    lru.head, lru.tail, lru._len = head, tail, length
