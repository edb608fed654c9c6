"""``racer_ref.Drafter``: the drafting side of RACER behind one class, Rust or Python.

The benchmarks, the tutorials and a drafter shared across ``generate()`` calls draft through
this class (``generate()`` without ``drafter=`` builds the backend's drafter itself, for the
request alone); it dispatches to the Rust core (``racer_ref._core.Drafter``, the default) or
to the teaching twin (``racer_ref.reference.drafter.Drafter``). Both give identical draft trees.

See ``racer_ref.reference.drafter`` for how every method works, and docs/explanation/spec.md steps
2-4, 8 and 9 for the rules.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import weakref
from threading import get_ident
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Optional, TypeVar

import numpy as np

from racer_ref.tree import METHODS, DraftTree  # noqa: F401 (METHODS: racer_ref.drafter.METHODS)
from racer_ref.reference.limits import NoCopy  # the twin's copy rule, one home (both backends refuse copies)

#: The two implementations.
BACKENDS = ("rust", "python")

_F = TypeVar("_F", bound=Callable[..., Any])


def check_backend(backend: Any) -> None:
    """``TypeError`` (not a string) or ``ValueError`` naming ``backend`` unless it is one of
    :data:`BACKENDS`."""
    if not isinstance(backend, str):
        raise TypeError(f"backend: must be a str, got {type(backend).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f'backend: must be "rust" or "python", got {backend!r}')


class _Claim:
    """A running ``Drafter.claim()``: its thread and a name for messages. Only the claim's
    generator holds it, so the drafter's weak reference to it dies with the claim, however
    it ends (even if a Ctrl-C cuts its clean-up short)."""

    def __init__(self, by: str) -> None:
        self.thread = get_ident()
        self.holder = f"{by} in thread {threading.current_thread().name!r}"


class DrafterInUseError(RuntimeError):
    """A ``Drafter`` was called while another thread (or an outer ``generate()`` call) was
    using it. One drafter serves one request at a time; see ``Drafter``, "Threads"."""


class DrafterForkedError(RuntimeError):
    """A ``Drafter`` was called in a child process forked while another thread of the
    parent was using it. That thread does not exist in the child, so its request stopped
    half-way there; the drafter refuses every call but ``reset()``, which makes it usable
    (empty, as new). See ``Drafter``, "Fork"."""


def _one_caller(method: _F) -> _F:
    """Run ``method`` only if no other thread is using the drafter; else refuse at once.

    The lock is an ``RLock`` taken with ``acquire(blocking=False)``: it is never waited
    for, and any other thread is refused with ``DrafterInUseError``. Under a ``claim()``
    the claiming thread already holds it: its own calls skip it. (``generate()`` claims a
    shared drafter once per call and steps it through ``claim()``'s step, not through these
    methods: a decoding step takes no lock here; the Rust core's own per-call lock is the only one.)
    """

    @functools.wraps(method)
    def guarded(self: "Drafter", *args: Any, **kwargs: Any) -> Any:
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


class Drafter(NoCopy):
    """Builds one draft tree per decoding step for one drafting method.

    Methods (docs/explanation/spec.md, "Methods we compare against"):

    * ``"racer"``: retrieval tree (Aho-Corasick automaton) first, the logits tree
      (copy-logit table) fills the remaining capacity;
    * ``"retrieval"``: the automaton only; ``"logits"``: the copy-logit table only
      (Token Recycling style); ``"logits-last"``: the root's children from the logits
      that produced the root (``last_topk``), deeper nodes from the table;
    * ``"pld"``: prompt lookup: one chain, copied after the most recent earlier occurrence
      of the last n-gram of (committed tokens + root), n = 3 down to 1, up to 10 tokens;
    * ``"ar"``: the root only (plain autoregressive decoding).

    How the capacity is filled (``tree``, beyond the paper; docs/explanation/expected-tree.md):
    ``"paper"`` (the default, which measured as good or better) is the paper's merge
    (retrieval first, then the logits tree by Eq. 3); ``"expected"`` keeps the ``capacity``
    candidates with the highest estimated path probability, from the union of the
    retrieval and logits candidates.
    ``"expected"`` learns acceptance estimates from every verify pass (the ``observe()``
    call about the last draft) and gives the last draft's ``path_probs`` and
    ``expected_tokens``; the paper's tree does so only after ``attach_estimator()`` (what
    ``capacity="auto"`` calls), and otherwise neither runs nor loads the estimates.

    ``DraftTree.sources`` marks automaton and PLD nodes as retrieval, copy-logit nodes
    (``logits``, ``logits-last``) as logits, and nodes proposed by both trees of ``racer``
    as both. Node order: breadth-first, each node's children in insertion order (retrieval
    paths in the automaton's order, then logits children by rank), identical on both
    backends.

    Args:
        method, vocab_size, capacity, breadth, ngram, max_nodes, min_border_depth: the
            drafter's parameters, passed as given to the backend; both take the same
            arguments with the same defaults and limits, documented on the twin,
            :class:`racer_ref.reference.drafter.Drafter` (``method`` one of ``METHODS``;
            paper values capacity 64, breadth 8, ngram 10, max_nodes 10,000; ``tree``
            ``"expected"`` or ``"paper"``).
        backend: ``"rust"`` (fast, the default) or ``"python"`` (the teaching twin);
            keyword only.

    ``None`` for a parameter means its default; ``vocab_size`` has no default.

    Raises:
        ValueError: unknown method or backend, or a parameter out of range.
        TypeError: ``backend`` not a string (``None`` means ``"rust"``).
        TypeError: ``vocab_size`` missing, ``method`` not a string, or a parameter that is
            not an int (bool and float included). Both backends raise the same errors.

    State lifetime: one drafter holds one automaton, copy-logit table and history; use a
    new drafter (or ``reset()``) per request, or keep it across requests for the paper's
    shared mode.

    Threads: a drafter serves **one caller at a time**. ``generate(..., drafter=d)`` holds
    ``d`` for the whole call (``claim()``), because the call drafts, observes and commits
    many times and ``d`` holds that request's state: interleaving two requests' steps
    would mix their automata even if each step were serialised. A second thread that
    calls ``generate()`` with ``d``, or any of ``d``'s methods, ``num_committed`` or
    ``automaton_nodes``, while ``d`` is in use, is **refused at once** (never blocked)
    with ``DrafterInUseError`` (a ``RuntimeError``) saying who holds it; nothing changes.
    Give each thread its own drafter, or wait for the other call to return. The fixed
    settings (``method``, ``vocab_size``, ``capacity``, ``breadth``, ``ngram``,
    ``max_nodes``, ``backend``) and ``repr()`` can be read at any time.

    Fork: in a child process made by ``os.fork()`` (``multiprocessing``'s ``"fork"``
    start method included) only the thread that forked exists. A drafter that *another*
    thread was using at that moment (a ``generate()`` call, or one method call) holds, in
    the child, the state of a request that stopped half-way (on the ``"python"`` backend
    possibly half a step). So the child gets that drafter unlocked but marked: every call
    to it, ``generate(..., drafter=d)`` included, raises ``DrafterForkedError`` (a
    ``RuntimeError``) naming the call that was cut off, until ``d.reset()``, which is
    allowed and makes it usable again (empty, as new). Every other drafter stays exactly
    as it was: one nobody was using, and one the forking thread itself is using (its call
    goes on in the child).

    Copies: a drafter holds one request's state and its in-use lock, so ``copy.copy``,
    ``copy.deepcopy`` and ``pickle`` raise ``TypeError`` on both backends; build a new
    ``Drafter`` with the same settings instead.
    """

    def __init__(self, *args: Any, backend: Optional[str] = "rust", **kwargs: Any) -> None:
        backend = "rust" if backend is None else backend  # None means the default, as for the others
        check_backend(backend)
        if backend == "rust":
            from racer_ref._core import Drafter as impl
        else:
            from racer_ref.reference.drafter import Drafter as impl  # type: ignore[assignment]
        self.backend = backend
        self._impl = impl(*args, **kwargs)
        # The Rust core returns a tuple of arrays; the twin already returns a DraftTree.
        self._returns_tuple = backend == "rust"
        # The fixed settings, read once: reading them later needs no access to the core,
        # so it is safe while another thread uses the drafter.
        impl_ = self._impl
        self._settings = dict(
            method=impl_.method, vocab_size=int(impl_.vocab_size), capacity=int(impl_.capacity),
            breadth=int(impl_.breadth), ngram=int(impl_.ngram), max_nodes=int(impl_.max_nodes),
            tree=str(impl_.tree),
        )
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
        _DRAFTERS.add(self)  # for the at-fork hook (weakly: the set keeps no drafter alive)
        # The step the decoding loop calls under its claim (see claim() below): the
        # backend's methods without the public methods' lock and checks.
        self._step = core_step(impl_) if backend == "rust" else impl_.trusted_step()

    @contextlib.contextmanager
    def claim(self, by: str = "generate()") -> Iterator["Drafter"]:
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

    @property
    def method(self) -> str:
        """The drafting method."""
        return self._settings["method"]

    @property
    def vocab_size(self) -> int:
        """The target model's vocabulary size."""
        return self._settings["vocab_size"]

    @property
    def capacity(self) -> int:
        """Maximum draft-tree nodes, root included."""
        return self._settings["capacity"]

    @property
    def breadth(self) -> int:
        """``k``: copy-logit ids per row and the root's breadth."""
        return self._settings["breadth"]

    @property
    def ngram(self) -> int:
        """The automaton's n-gram length ``n``."""
        return self._settings["ngram"]

    @property
    def max_nodes(self) -> int:
        """The automaton's node budget."""
        return self._settings["max_nodes"]

    @property
    def tree(self) -> str:
        """How the capacity is filled: ``"expected"`` or ``"paper"``."""
        return self._settings["tree"]

    @property
    def path_probs(self) -> Optional[np.ndarray]:
        """``(n,)`` float64: each node's estimated path probability in the last draft
        (node order, the root 1.0), until the ``observe()`` call about that draft; ``None``
        then, before any draft, and for ``"pld"`` / ``"ar"``.

        Raises:
            DrafterInUseError: another thread is using the drafter.
        """
        return self._path_probs()

    @_one_caller
    def _path_probs(self) -> Optional[np.ndarray]:
        return self._impl.path_probs

    @property
    def expected_tokens(self) -> Optional[float]:
        """``E[a + 1] = 1 + sum of the last draft's path probabilities`` (root excluded),
        or ``None`` as for ``path_probs``."""
        return self._expected_tokens()

    @_one_caller
    def _expected_tokens(self) -> Optional[float]:
        return self._impl.expected_tokens

    @_one_caller
    def acceptance_stats(self) -> Optional[dict]:
        """The learned acceptance estimates: integer ``seen`` / ``accepted`` counts per
        bucket, and the calibration record (``calibration_seen``, ``calibration_accepted``,
        ``calibration_predicted`` = sum of predictions, per bin of 0.1 of predicted
        probability), ``num_labels``; ``None`` when no estimates are attached (see
        ``attach_estimator``). Identical on both backends."""
        stats = self._impl.acceptance_stats()
        return None if stats is None else dict(stats)

    @_one_caller
    def attach_estimator(self) -> None:
        """Attach the acceptance estimates (beyond the paper;
        docs/explanation/expected-tree.md): from now on every draft carries
        ``path_probs`` / ``expected_tokens`` and every ``observe()`` about the last draft
        is learned from. ``tree="expected"`` attaches them at construction; the capacity
        controller of ``capacity="auto"`` calls this. Attaching twice keeps what was
        learned.

        Raises:
            DrafterInUseError: another thread is using the drafter (see "Threads").
        """
        self._impl.attach_estimator()

    @property
    def num_committed(self) -> int:
        """Tokens committed since construction or the last ``reset()``.

        Raises:
            DrafterInUseError: another thread is using the drafter.
        """
        return self._num_committed()

    @_one_caller
    def _num_committed(self) -> int:
        return int(self._impl.num_committed)

    @property
    def automaton_nodes(self) -> int:
        """Trie nodes in the automaton (root excluded); 0 for methods without one.

        Raises:
            DrafterInUseError: another thread is using the drafter.
        """
        return self._automaton_nodes()

    @_one_caller
    def _automaton_nodes(self) -> int:
        return int(self._impl.automaton_nodes)

    @_one_caller
    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        """Update the copy-logit table (docs/explanation/spec.md step 8).

        Row ``token_ids[i]`` becomes ``topk_ids[i, :breadth]``; a token repeated in one call
        keeps its last row. When the rows are about the last draft (all its nodes in order,
        or its accepted path), the acceptance estimates learn from them first
        (docs/explanation/expected-tree.md). Which tokens to pass is the caller's choice: every prompt
        position after prefill; after a verify pass every tree node (the paper's default,
        rejected ones included) or only the accepted ones.

        Args:
            token_ids: ``(n,)`` integer ids the target was fed (numpy array, list, ...).
            topk_ids: ``(n, k')`` integer ids, ``k' >= breadth``: the top-k' ids of the
                target's logits at each position, best first.

        Raises:
            ValueError: wrong shapes, or an id outside ``[0, vocab_size)``.
            TypeError: a non-integer dtype. On error nothing changes.
            DrafterInUseError: another thread is using the drafter (see "Threads").
        """
        self._impl.observe(token_ids, topk_ids)

    @_one_caller
    def commit(self, token_ids: Any) -> None:
        """Add tokens that became output to the automaton / PLD history (spec step 9).

        Args:
            token_ids: ``(n,)`` integer ids in output order (root + accepted drafts).

        Raises:
            ValueError: not 1-D or an id outside ``[0, vocab_size)``.
            TypeError: a non-integer dtype. On error nothing changes.
            DrafterInUseError: another thread is using the drafter (see "Threads").
        """
        self._impl.commit(token_ids)

    @_one_caller
    def draft(self, root: int, last_topk: Any = None, capacity: Optional[int] = None) -> DraftTree:
        """Build this step's draft tree (docs/explanation/spec.md steps 2-4).

        Args:
            root: the token the target just predicted (node 0 of the tree).
            last_topk: ``(k',)`` integer top-k' ids (``k' >= breadth``) of the logits that
                produced the root; required by ``"logits-last"``, ignored (but validated)
                by the other methods.
            capacity: this step's capacity in ``[1, 4096]`` (``None``: the drafter's). With
                ``tree="expected"`` the tree at ``capacity`` is exactly the first
                ``capacity`` nodes of the tree at the drafter's capacity.

        Returns:
            A ``DraftTree`` with ``min(capacity, reachable unique nodes)`` nodes.

        Raises:
            ValueError: root or an id outside ``[0, vocab_size)``; ``last_topk`` too short,
                or missing for ``"logits-last"``.
            TypeError: a non-integer root or dtype.
            DrafterInUseError: another thread is using the drafter (see "Threads").
        """
        tree = self._impl.draft(root, last_topk, capacity)
        return DraftTree(*tree) if self._returns_tuple else tree

    @_one_caller
    def table_row(self, token: int) -> list[int]:
        """Copy-logit row of ``token`` (``[]`` when unseen or when the method has no table)."""
        return list(self._impl.table_row(token))

    @_one_caller
    def reset(self) -> None:
        """Forget the automaton, the copy-logit table and the history.

        Also the way back for a drafter cut off by a fork (see "Fork"): the only call such
        a drafter accepts, after which it works again.

        Raises:
            DrafterInUseError: another thread is using the drafter (see "Threads").
        """
        self._impl.reset()
        self._forked = None  # after the reset: an interrupted reset leaves the mark

    def __repr__(self) -> str:
        # From the fixed settings only, so that repr() works while the drafter is in use.
        settings = ", ".join(f"{k}={v!r}" for k, v in self._settings.items())
        return f"Drafter({settings}, backend={self.backend!r})"


#: Every ``Drafter`` alive in this process, for the at-fork hook below.
_DRAFTERS: "weakref.WeakSet[Drafter]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """``os.register_at_fork(after_in_child=...)``: runs in a forked child, in its only
    thread; marks the drafters that another thread was using (``Drafter._after_fork``)."""
    for drafter in list(_DRAFTERS):
        drafter._after_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


def core_step(core: Any) -> SimpleNamespace:
    """What the decoding loop calls each step on a Rust ``racer_ref._core.Drafter``: its
    ``observe`` and ``commit`` (which check their arguments in Rust, for a few
    nanoseconds), and ``draft`` with its six arrays wrapped in a ``DraftTree``."""
    return SimpleNamespace(observe=core.observe, commit=core.commit,
                           draft=lambda root, last_topk=None: DraftTree(*core.draft(root, last_topk)))


@contextlib.contextmanager
def claim(drafter: Any, by: str = "generate()") -> Iterator[Any]:
    """Hold ``drafter`` for one request of the decoding loop and give the loop its step.

    For a ``Drafter``: ``drafter.claim(by)``, then an object whose ``draft``, ``observe``
    and ``commit`` go straight to the backend, without the public methods' checks (the
    loop passes the model's own ids, its vocabulary checked at the boundary, and the
    twin's roots as ints); for a subclass that overrides ``draft``, ``observe`` or
    ``commit``, the drafter itself. The twin refuses a drafter that an interrupt left torn
    here, once per request (an interrupt ends the request). Any other drafter (``None``, one
    that brings its own draft/observe/commit) is given as it is, unclaimed.
    """
    if not isinstance(drafter, Drafter):
        yield drafter
        return
    # A subclass that overrides draft, observe or commit is stepped through them (under the claim).
    overrides = any(getattr(type(drafter), name) is not getattr(Drafter, name)
                    for name in ("draft", "observe", "commit"))
    with drafter.claim(by):
        if drafter.backend == "python":
            from racer_ref.reference.undo import check_intact

            impl = drafter._impl
            check_intact(impl, impl.automaton, impl.table)
        yield drafter if overrides else drafter._step
