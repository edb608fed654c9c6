"""All or nothing: an interrupted call changes nothing (the twin's Ctrl-C safety).

A Ctrl-C in a notebook raises ``KeyboardInterrupt`` between *any* two lines. If it lands
half-way through a change (a recency-list touch with one link updated and not the other,
an automaton extended but the drafter's count not yet), every later call would trip over
it. So each public operation that changes the twin's state works in two phases:

    compute:  read and check all the input (this may raise; nothing has changed);
    apply:    make the changes, but before each one append to an *undo log* how to take
              it back (a function and its arguments; "write-ahead").

    undo log:  [restore fields] [restore links of [a]] [old freq of [a b]] ...
                played last <----------------------------------- played first

``all_or_nothing(owner, apply)`` runs the apply phase. If it is interrupted anywhere, the
log is played backwards and the exception re-raised: every entry restores *old values*,
so it is right whether its change was made, never made, or made half-way. The owner is
then exactly as before the call (tests/test_interrupts.py interrupts every line).

Only a second interrupt during that rollback can leave a mix. For that case the owner's
``_torn`` flag is set while changes are in flight and cleared when they are complete or
fully undone; a torn object refuses every call with a ``RuntimeError`` that says to call
``reset()`` (``check_intact``), instead of silently losing state later.

The Rust core needs none of this: nothing interrupts a Rust call half-way.
"""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

#: An undo log: (function, arguments) pairs, played backwards on an interrupt.
UndoLog = List[Tuple[Callable[..., Any], tuple]]


def all_or_nothing(owner: Any, apply: Callable[[UndoLog], None]) -> None:
    """Run ``apply(undo)``, which logs the undo of each change before making it; if
    anything interrupts it (``KeyboardInterrupt`` included), undo every logged change and
    re-raise. ``owner._torn`` is True while changes are in flight."""
    undo: UndoLog = []
    try:
        # Set on the try's first line and cleared on its last, so that whatever line an
        # interrupt hits, the `except` below sees it and undoes what was done.
        owner._torn = True
        apply(undo)
        owner._torn = False
    except BaseException:
        # BaseException: KeyboardInterrupt is not an Exception, and is the point here.
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
