"""The guard between a drafter and the decoding loop: who may call a drafter, and what the
loop gets from a drafter of the caller's.

* One caller at a time: :class:`Guarded`, the base of ``racer_ref.Drafter``, holds its
  lock and its claim (``Drafter.claim()``), refuses a second thread at once
  (:class:`DrafterInUseError`) and marks a drafter cut off by a fork
  (:class:`DrafterForkedError`); :func:`one_caller` guards each public method.
* One ``generate()`` call: :func:`hold` claims a caller's ``racer_ref.Drafter`` for the call
  and gives the loop its step; :func:`given_drafter` checks any ``drafter=`` first, and wraps
  one whose class racer_ref does not define in a :class:`CheckedDrafter`, which checks
  every tree before the target sees it.

A drafter that ``generate()`` builds for one request needs none of this: nobody else sees it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import warnings
import weakref
from threading import get_ident
from typing import Any, Callable, Dict, Iterator, Optional, TypeVar

import numpy as np

from racer_ref.tree import DraftTree

_F = TypeVar("_F", bound=Callable[..., Any])


class DrafterInUseError(RuntimeError):
    """A ``Drafter`` was called while another thread (or an outer ``generate()`` call) was
    using it. One drafter serves one request at a time; see ``Drafter``, "Threads"."""


class DrafterForkedError(RuntimeError):
    """A ``Drafter`` was called in a child process forked while another thread of the
    parent was using it. That thread does not exist in the child, so its request stopped
    half-way there; the drafter refuses every call but ``reset()``, which makes it usable
    (empty, as new). See ``Drafter``, "Fork"."""


class _Claim:
    """A running ``Drafter.claim()``: its thread and a name for messages. Only the claim's
    generator holds it, so the drafter's weak reference to it dies with the claim, however
    it ends (even if a Ctrl-C cuts its clean-up short)."""

    def __init__(self, by: str) -> None:
        self.thread = get_ident()
        self.holder = f"{by} in thread {threading.current_thread().name!r}"


def one_caller(method: _F) -> _F:
    """Run ``method`` only if no other thread is using the drafter; else refuse at once.

    The lock is an ``RLock`` taken with ``acquire(blocking=False)``: it is never waited
    for, and any other thread is refused with ``DrafterInUseError``. Under a ``claim()``
    the claiming thread already holds it: its own calls skip it. (``generate()`` claims a
    shared drafter once per call and steps it through :func:`hold`'s step, not through these
    methods: a decoding step takes no lock here; the Rust core's own per-call lock is the only one.)
    """

    @functools.wraps(method)
    def guarded(self: "Guarded", *args: Any, **kwargs: Any) -> Any:
        # Cut off by a fork (see Drafter, "Fork"): everything but reset() is refused.
        if self._forked is not None and method.__name__ != "reset":
            raise self._forked_error()
        claim = self._claim()
        if claim is not None and claim.thread == get_ident():
            return method(self, *args, **kwargs)
        lock = self._lock
        if not lock.acquire(False):
            raise self._in_use_error()
        try:
            return method(self, *args, **kwargs)
        finally:
            lock.release()

    return guarded  # type: ignore[return-value]


class Guarded:
    """One caller at a time, and fork safety: the guard of ``racer_ref.Drafter``.

    A subclass calls :meth:`_guard` in its ``__init__`` and sets ``_step`` (what the loop
    calls under a claim: the backend's step, or the drafter itself where a subclass overrides
    ``draft``, ``observe`` or ``commit``) and ``_intact`` (``None``, or a check that raises
    for a drafter an interrupt left torn).
    """

    _step: Any
    _intact: Optional[Callable[[], None]]

    def _guard(self) -> None:
        # One caller at a time (see "Threads"): the lock is held for one method call, or
        # for a whole claim(); _claim() is the running claim (a _Claim), or None.
        # Never waited for (acquire(blocking=False)). An RLock: if a Ctrl-C ever lands
        # between acquire() and the `try` that releases it, the thread that pressed it (a
        # notebook's only thread) can still use its drafter. A nested claim is refused by
        # the _claim() check.
        self._lock = threading.RLock()
        self._claim: Callable[[], Optional[_Claim]] = lambda: None
        # Who was using the drafter when this process was forked from its parent, or None
        # (see "Fork" and _after_fork); set only in a child, cleared by reset().
        self._forked: Optional[str] = None
        _GUARDED.add(self)  # for the at-fork hook (weakly: the set keeps no drafter alive)

    @contextlib.contextmanager
    def claim(self, by: str = "generate()") -> Iterator[Any]:
        """Hold the drafter for a sequence of calls by this thread (one request).

        ``generate()`` wraps its whole decoding loop in ``with drafter.claim():``. Inside,
        this thread calls the drafter freely; every other thread, and a nested
        ``claim()`` (a ``generate()`` call with this drafter from a callback, say), gets
        ``DrafterInUseError`` at once.

        Args:
            by: who claims it, for the error message others get (e.g. ``"generate()"``).

        Raises:
            DrafterInUseError: the drafter is in use (by another thread, or already
                claimed by this one).
            DrafterForkedError: in a forked child, another thread of the parent was using
                the drafter at the fork (see "Fork"); ``reset()`` first.
        """
        running = self._claim()
        if running is not None and running.thread == get_ident():  # a claim inside this thread's own
            raise DrafterInUseError(
                f"Drafter: already in use by {running.holder}; one drafter serves one request "
                "at a time (a callback or streamer calling generate() with the same drafter?)"
            )
        if self._forked is not None:
            raise self._forked_error()
        if not self._lock.acquire(False):
            raise self._in_use_error()
        claim = _Claim(by)  # held here only: the weak reference below dies with this claim
        try:
            self._claim = weakref.ref(claim)
            yield self
        finally:
            # (A Ctrl-C landing just before this release leaves the lock with this thread,
            # which re-enters it; other threads are refused until a new Drafter.)
            self._lock.release()

    def _in_use_error(self) -> DrafterInUseError:
        # A claim names itself; a single method call of another thread leaves no claim.
        running = self._claim()
        return DrafterInUseError(
            f"Drafter: in use by {running.holder if running else 'a call from another thread'}; a drafter serves one "
            "request at a time (it holds that request's automaton, copy-logit table and "
            "history). Give each thread its own Drafter, or call it after that call returns."
        )

    def _forked_error(self) -> DrafterForkedError:
        return DrafterForkedError(
            f"Drafter: this process was forked while {self._forked} was using this drafter; "
            "that thread does not exist in this child process, so its request stopped half-way "
            "and the drafter holds its unfinished state. Call reset() to make it usable again "
            "(it empties the drafter), or build a new Drafter."
        )

    def _after_fork(self) -> None:
        """In a forked child (the at-fork hook): if another thread was using the drafter
        at the fork, give it a fresh lock and no claim, and mark it (see "Fork")."""
        # The lock comes to the child as it was. Free, or held by this thread (the one that
        # forked, whose call goes on here): acquire succeeds, and nothing changes.
        if self._lock.acquire(False):
            self._lock.release()
            return
        # Held by a thread that does not exist here: it will never be released.
        running = self._claim()
        self._forked = running.holder if running is not None else "a call from another thread"
        self._lock = threading.RLock()
        self._claim = lambda: None


#: Every guarded drafter alive in this process, for the at-fork hook below.
_GUARDED: "weakref.WeakSet[Guarded]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """``os.register_at_fork(after_in_child=...)``: runs in a forked child, in its only
    thread; marks the drafters that another thread was using (``Guarded._after_fork``)."""
    for drafter in list(_GUARDED):
        drafter._after_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def hold(drafter: Any, by: str = "generate()") -> Iterator[Any]:
    """Hold a drafter of the caller's for one request of the decoding loop and give the loop its step.

    For a ``racer_ref.Drafter``: ``drafter.claim(by)``, then its step, whose ``draft``,
    ``observe`` and ``commit`` go straight to the backend, without the public methods' checks
    (the loop passes the model's own ids, its vocabulary checked at the boundary); for a
    subclass that overrides ``draft``, ``observe`` or ``commit``, the drafter itself. The twin
    refuses a drafter that an interrupt left torn here, once per request (an interrupt ends
    the request). Any other drafter is given as it is, unclaimed.
    """
    if not isinstance(drafter, Guarded):
        yield drafter
        return
    with drafter.claim(by):
        if drafter._intact is not None:
            drafter._intact()
        yield drafter._step


def given_drafter(drafter: Any, vocab_size: int, given: Dict[str, Any]) -> Any:
    """The caller's ``drafter``, checked: it drafts, it fits the model's vocabulary, and no
    parameter in ``given`` (``None``: not passed) contradicts its own setting. A drafter
    whose class racer_ref does not define comes back wrapped in a :class:`CheckedDrafter`.

    Raises:
        TypeError: a class, a raw Rust core, or an object without draft/observe/commit.
        ValueError: a breadth or vocabulary that does not fit the model, or a parameter
            that contradicts the drafter's own.
    """
    if isinstance(drafter, type):
        raise TypeError(f"drafter: expected a drafter, got the class {drafter.__name__} (build one first)")
    if type(drafter).__module__ == "racer_ref._core":
        raise TypeError("drafter: the Rust core's Drafter returns arrays; pass racer_ref.Drafter(..., "
                        "backend=\"rust\"), which wraps it")
    missing = [name for name in ("draft", "observe", "commit") if not callable(getattr(drafter, name, None))]
    if missing:
        raise TypeError(f"drafter: expected a racer_ref.Drafter (draft, observe, commit), "
                        f"got {type(drafter).__name__} without {', '.join(missing)}")
    own_breadth = getattr(drafter, "breadth", None)
    if own_breadth is not None and (isinstance(own_breadth, bool) or not isinstance(own_breadth, (int, np.integer))
                                    or not 1 <= own_breadth <= vocab_size):
        raise ValueError(f"drafter: its breadth must be an int in [1, vocab_size = {vocab_size}], got {own_breadth!r}")
    if getattr(drafter, "vocab_size", vocab_size) != vocab_size:
        raise ValueError(f"drafter: built for vocab_size {drafter.vocab_size}, the model has {vocab_size}")
    for name, value in given.items():
        own = getattr(drafter, name, None)
        if value is None or value == own or (name == "breadth" and own is None):
            continue  # (breadth is the k of the top-k rows passed to a drafter without one)
        if own is not None:
            raise ValueError(f"{name}: {value!r} contradicts the given drafter's {name} {own!r}; "
                             "leave it out, or build the drafter with it")
        warnings.warn(f"{name}: {value!r} is not used: the given {type(drafter).__name__} has no {name} "
                      "(the drafter decides)", stacklevel=6)
    if isinstance(drafter, Guarded) or type(drafter).__module__.startswith("racer_ref."):
        return drafter  # racer_ref's own drafters and wrappers build valid trees (a Drafter is claimed)
    return CheckedDrafter(drafter, vocab_size)


class CheckedDrafter:
    """A drafter of the caller's whose every draft tree is checked before the target sees it.

    ``generate()`` trusts the drafters of racer_ref; it wraps any other ``drafter=`` in this
    class, so that a tree the loop cannot verify losslessly is a ``RuntimeError`` naming the
    drafter, never a wrong output or an error deep in the model. Checked is what the loop
    relies on (:meth:`DraftTree.validate` with ``contract=False``: the root, parents before
    children, depths, tokens in ``[0, vocab_size)``, the mask) and that the tree is rooted
    at the step's root; the rest of the contract (dtypes, breadth-first order, a trie,
    ``sources``) is not the loop's business.

    Args:
        inner: the caller's drafter (``draft``, ``observe``, ``commit``).
        vocab_size: the model's vocabulary size: every token must lie in ``[0, vocab_size)``.
    """

    def __init__(self, inner: Any, vocab_size: int) -> None:
        self.inner, self.vocab_size = inner, vocab_size

    def draft(self, root: int, last_topk: Any = None) -> DraftTree:
        tree = self.inner.draft(root, last_topk=last_topk)
        name = type(self.inner).__name__
        if not isinstance(tree, DraftTree):
            raise RuntimeError(f"drafter: {name}.draft() returned {type(tree).__name__}, "
                               "not a racer_ref.tree.DraftTree")
        try:
            DraftTree(*(np.asarray(a) for a in (tree.tokens, tree.parents, tree.depths, tree.attention_mask)),
                      None, np.asarray(tree.sources)).validate(self.vocab_size, contract=False)
        except (TypeError, ValueError) as error:
            raise RuntimeError(f"drafter: {name}.draft() returned a tree the loop cannot verify: {error}") from None
        if int(tree.tokens[0]) != root:
            raise RuntimeError(f"drafter: {name}.draft() returned a tree rooted at {int(tree.tokens[0])}, "
                               f"expected {root}")
        return tree

    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        self.inner.observe(token_ids, topk_ids)

    def commit(self, token_ids: Any) -> None:
        self.inner.commit(token_ids)

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found on the wrapper itself (method, breadth, ...).
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
