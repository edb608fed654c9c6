"""``racer_ref.Drafter``: the drafting side of RACER behind one class, Rust or Python, and
the one function that makes the drafting object of a ``generate()`` call.

The benchmarks, the tutorials and a drafter shared across ``generate()`` calls draft through
this class; it dispatches to the Rust core (``racer_ref._core.Drafter``, the default) or
to the teaching twin (``racer_ref.reference.drafter.Drafter``). Both give identical draft
trees. ``generate()`` without ``drafter=`` builds the backend's drafter itself, for the
request alone (:func:`make_drafting`), and steps it without this class.

Who may call a drafter (one thread at a time, fork safety, a claim per ``generate()`` call)
is :mod:`racer_ref.guard`'s business.

See ``racer_ref.reference.drafter`` for how every method works, and docs/explanation/spec.md steps
2-4, 8 and 9 for the rules.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from types import ModuleType, SimpleNamespace
from typing import Any, Dict, Optional, Tuple

import numpy as np

from racer_ref.guard import Guarded, given_drafter, hold, one_caller
from racer_ref.reference.limits import (DEFAULT_BREADTH, DEFAULT_CAPACITY, DEFAULT_CPU_CAPACITY, DEFAULT_MAX_NODES,
                                        DEFAULT_NGRAM, NoCopy, choice_value)
from racer_ref.tree import METHODS, DraftTree

#: The two implementations, and the module of each (the same names in both).
BACKENDS = {"rust": "racer_ref._core", "python": "racer_ref.reference"}

#: The drafter parameters that ``generate()``, ``custom_generate`` and this class share, with
#: their defaults (the paper's, :mod:`racer_ref.reference.limits`) and what each is. Both
#: backends take them with these defaults and limits (documented on the twin); each is a
#: read-only attribute of a ``Drafter``, and a keyword option of ``generate()`` whose ``None``
#: means this default (for ``capacity``, the device's), or with ``drafter=`` the drafter's own.
DRAFTER_PARAMETERS: Dict[str, Tuple[Any, str]] = {
    "capacity": (DEFAULT_CAPACITY, "Maximum draft-tree nodes, root included (an int in [1, 4096])."),
    "breadth": (DEFAULT_BREADTH, "``k``: copy-logit ids per row and the root's breadth (an int in [1, vocab_size])."),
    "ngram": (DEFAULT_NGRAM, "The automaton's n-gram length ``n`` (an int in [2, 256])."),
    "max_nodes": (DEFAULT_MAX_NODES, "The automaton's node budget (an int in [ngram, 2**31 - 1])."),
    "tree": ("paper", 'How the capacity is filled: ``"paper"`` or ``"expected"``.'),
}

#: The capacity on a GPU when ``capacity=None``: the paper's.
DEFAULT_GPU_CAPACITY = DEFAULT_CAPACITY


def backend_name(backend: Any) -> str:
    """``backend`` checked: ``"rust"`` (also for ``None``) or ``"python"``; else ``TypeError``
    (not a string) or ``ValueError``."""
    return choice_value(backend, "backend", tuple(BACKENDS), "rust")


def implementation(backend: Any) -> ModuleType:
    """The one backend switch: the module that implements ``backend`` (checked by
    :func:`backend_name`), ``racer_ref._core`` or the twin ``racer_ref.reference`` (the same
    class names in both)."""
    plain = backend is None or (type(backend) is str and backend in BACKENDS)  # plainly valid: no call
    return importlib.import_module(BACKENDS[(backend or "rust") if plain else backend_name(backend)])


def core_step(core: Any) -> SimpleNamespace:
    """What the decoding loop calls each step on a Rust core's drafter (the twin's is its
    ``trusted_step()``): its ``observe`` and ``commit`` (which check their arguments in Rust,
    for a few nanoseconds), and ``draft`` with its six arrays wrapped in a ``DraftTree``."""
    return SimpleNamespace(observe=core.observe, commit=core.commit,
                           draft=lambda root, last_topk=None: DraftTree(*core.draft(root, last_topk)))


class Drafter(Guarded, NoCopy):
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

    Attributes: ``method``, ``vocab_size``, ``backend`` and each of
    :data:`DRAFTER_PARAMETERS` (``capacity``, ``breadth``, ``ngram``, ``max_nodes``, ``tree``):
    the fixed settings, read-only, readable at any time.

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
        impl = implementation(backend).Drafter(*args, **kwargs)
        self.backend = "rust" if backend is None else str(backend)  # None means the default, as for the others
        self._impl = impl
        # The fixed settings, read once: reading them later needs no access to the core,
        # so it is safe while another thread uses the drafter.
        self._settings = {"method": str(impl.method), "vocab_size": int(impl.vocab_size),
                          **{name: type(default)(getattr(impl, name)) for name, (default, _) in DRAFTER_PARAMETERS.items()}}
        self._guard()  # one caller at a time, fork safety (racer_ref.guard)
        # The step the decoding loop calls under its claim (racer_ref.guard.hold): the
        # backend's methods without the public methods' lock and checks, or this drafter
        # itself where a subclass overrides draft, observe or commit.
        overrides = any(getattr(type(self), name) is not getattr(Drafter, name) for name in ("draft", "observe", "commit"))
        self._step = self if overrides else impl.trusted_step() if hasattr(impl, "trusted_step") else core_step(impl)
        # The twin refuses, once per claim, a drafter that an interrupt left torn.
        self._intact = None
        if hasattr(impl, "trusted_step"):
            from racer_ref.reference.undo import check_intact

            self._intact = lambda: check_intact(impl, impl.automaton, impl.table)

    @property
    def method(self) -> str:
        """The drafting method."""
        return self._settings["method"]

    @property
    def vocab_size(self) -> int:
        """The target model's vocabulary size."""
        return self._settings["vocab_size"]

    @property
    def path_probs(self) -> Optional[np.ndarray]:
        """``(n,)`` float64: each node's estimated path probability in the last draft
        (node order, the root 1.0), until the ``observe()`` call about that draft; ``None``
        then, before any draft, and for ``"pld"`` / ``"ar"``.

        Raises:
            DrafterInUseError: another thread is using the drafter.
        """
        return self._path_probs()

    @one_caller
    def _path_probs(self) -> Optional[np.ndarray]:
        return self._impl.path_probs

    @property
    def expected_tokens(self) -> Optional[float]:
        """``E[a + 1] = 1 + sum of the last draft's path probabilities`` (root excluded),
        or ``None`` as for ``path_probs``."""
        return self._expected_tokens()

    @one_caller
    def _expected_tokens(self) -> Optional[float]:
        return self._impl.expected_tokens

    @one_caller
    def acceptance_stats(self) -> Optional[dict]:
        """The learned acceptance estimates: integer ``seen`` / ``accepted`` counts per
        bucket, and the calibration record (``calibration_seen``, ``calibration_accepted``,
        ``calibration_predicted`` = sum of predictions, per bin of 0.1 of predicted
        probability), ``num_labels``; ``None`` when no estimates are attached (see
        ``attach_estimator``). Identical on both backends."""
        stats = self._impl.acceptance_stats()
        return None if stats is None else dict(stats)

    @one_caller
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

    @one_caller
    def _num_committed(self) -> int:
        return int(self._impl.num_committed)

    @property
    def automaton_nodes(self) -> int:
        """Trie nodes in the automaton (root excluded); 0 for methods without one.

        Raises:
            DrafterInUseError: another thread is using the drafter.
        """
        return self._automaton_nodes()

    @one_caller
    def _automaton_nodes(self) -> int:
        return int(self._impl.automaton_nodes)

    @one_caller
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

    @one_caller
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

    @one_caller
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
        return tree if isinstance(tree, DraftTree) else DraftTree(*tree)  # (the Rust core: six arrays)

    @one_caller
    def table_row(self, token: int) -> list[int]:
        """Copy-logit row of ``token`` (``[]`` when unseen or when the method has no table)."""
        return list(self._impl.table_row(token))

    @one_caller
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



for _name, (_default, _doc) in DRAFTER_PARAMETERS.items():  # capacity, breadth, ...: read-only settings
    setattr(Drafter, _name, property(lambda self, name=_name: self._settings[name], doc=_doc))


# ----------------------------------------------------------------------------- generate()'s drafting
#: The drafting of ``method="ar"``: every tree is the root alone (plain autoregressive
#: decoding through the same loop). It learns nothing, so it asks for no top-k (``k = 0``).
ROOT_ONLY = SimpleNamespace(draft=lambda root, last_topk=None: DraftTree.root_only(root),
                            observe=lambda token_ids, topk_ids: None, commit=lambda token_ids: None)


def make_drafting(model: Any, drafter: Any, vocab_size: int, method: Optional[str],
                  given: Dict[str, Any]) -> Tuple[Any, int, str]:
    """``(drafting, k, method)`` of one ``generate()`` call (``given``: ``backend`` and the
    :data:`DRAFTER_PARAMETERS` as passed, ``None`` if not): a context manager that gives the
    loop a new drafter's step (this request's alone; :data:`ROOT_ONLY` for ``"ar"``), the
    caller's drafter claimed, or for ``capacity="auto"`` an ``AdaptiveDrafter``; the breadth
    of the top-k rows; the method. The drafter's rules raise before any state changes."""
    auto = isinstance(given["capacity"], str) and given["capacity"] == "auto"
    if drafter is not None:
        return _callers_drafting(drafter, vocab_size, method, given, auto)
    settings = {name: default if given[name] is None else given[name] for name, (default, _) in DRAFTER_PARAMETERS.items()}
    if auto:
        settings["capacity"] = DEFAULT_GPU_CAPACITY  # the largest it may choose
    elif given["capacity"] is None:  # the device's default
        settings["capacity"] = DEFAULT_GPU_CAPACITY if model.device.type == "cuda" else DEFAULT_CPU_CAPACITY
    method = "racer" if method is None else method  # (checked by the drafter built below)
    if isinstance(method, str) and method == "ar":
        return _root_only_drafting(vocab_size, settings, given)
    if auto:
        from racer_ref.speedups.capacity import AdaptiveDrafter, auto_controller

        built = Drafter(method, vocab_size, backend=given["backend"], **settings)
        auto_drafter = AdaptiveDrafter(built, auto_controller(model, max_capacity=DEFAULT_GPU_CAPACITY))
        return contextlib.nullcontext(auto_drafter), settings["breadth"], method  # this call's alone
    impl = implementation(given["backend"]).Drafter(method, vocab_size, **settings)  # checks each parameter
    # owned: this request's alone, so the twin keeps no undo; the Rust core's step is wrapped
    step = impl.trusted_step(owned=True) if hasattr(impl, "trusted_step") else core_step(impl)
    return contextlib.nullcontext(step), settings["breadth"], method


def _callers_drafting(drafter: Any, vocab_size: int, method: Optional[str], given: Dict[str, Any],
                      auto: bool) -> Tuple[Any, int, str]:
    """:func:`make_drafting` for the caller's ``drafter``: checked (no setting passed may
    contradict it, :func:`racer_ref.guard.given_drafter`) and claimed for the call."""
    if method is not None:
        choice_value(method, "method", METHODS, "racer")
    if auto:
        raise ValueError("capacity: 'auto' builds its own drafter; leave capacity out with drafter=")
    _check_settings(vocab_size, given)
    drafter = given_drafter(drafter, vocab_size, {"method": method, **given})
    own_breadth = getattr(drafter, "breadth", None)  # None for a drafter of the caller's without one
    k = own_breadth if own_breadth is not None else (given["breadth"] or DEFAULT_BREADTH)
    return hold(drafter), k, getattr(drafter, "method", None) or method or "racer"


def _root_only_drafting(vocab_size: int, settings: Dict[str, Any], given: Dict[str, Any]) -> Tuple[Any, int, str]:
    """:func:`make_drafting` for ``"ar"``: no drafter, but its settings are checked all the
    same, and each one passed is named in a warning (it is not used)."""
    _check_settings(vocab_size, {**settings, "backend": given["backend"]})
    for name in (n for n in given if given[n] is not None):
        warnings.warn(f"{name}: {given[name]!r} is not used: method 'ar' drafts nothing (one token per pass)",
                      stacklevel=5)
    return contextlib.nullcontext(ROOT_ONLY), 0, "ar"


def _check_settings(vocab_size: int, given: Dict[str, Any]) -> None:
    """Check the drafter parameters in ``given`` (``None``: not passed) where no ``Drafter``
    is built to check them (a drafter of the caller's, ``"ar"``): by the twin's rules, which
    are the Rust core's, in one throwaway twin (its table and automaton allocate nothing yet)."""
    backend_name(given["backend"])
    passed = {name: given[name] for name in DRAFTER_PARAMETERS if given[name] is not None}
    if passed:
        if "max_nodes" in passed and "ngram" not in passed:
            passed["ngram"] = 2  # (a drafter's own ngram is its own; max_nodes >= 2 at least)
        implementation("python").Drafter("racer", vocab_size, **passed)
