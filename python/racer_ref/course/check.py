"""``racer-ref check FILE``: check a student's exercise against the reference, and teach.

Each exercise in ``exercises/`` is one concept of the tutorials with the bodies left as
``...``. The checker loads the student's file, reports the functions (or classes) whose body
is still ``...`` as not written yet and grades the others: it runs, in order, until the
first divergence:

1. the **named cases** the Rust core and the Python twin pass in the test suite
   (``racer_ref.course.cases``: hand-checked, with their derivation in comments), then
2. **differential cases**: seeded random inputs on which the student's answer must equal
   the Rust core's (for greedy acceptance, ``racer_ref.tree.accept_greedy``'s; for KV
   compaction, ``racer_ref.verify``'s). Where the Rust core is not built (a source checkout
   with only numpy), the Python twin answers instead: the test suite holds the two
   identical. Exercise 10 compares against ``racer_ref.verify``, which needs torch: without
   it, it is refused (exit status 2) with what to install, rather than failed.

The first diverging case is printed with what went wrong (its inputs, what was expected,
what came back, the wrong cell of a mask by row and column), then hints in stages, chosen
for the kind of mistake diagnosed (not the solution):

* stage 1 (always): the diagnosis, e.g. "the longest window is never extended";
* stage 2 (``--hint 2``): a nudge on the concept behind that mistake;
* stage 3 (``--hint 3``): where in the tutorials to read, with a small worked example.

::

    $ racer-ref check my_06_logits_tree.py     # root children halved once too often
    exercise 06 (the logits tree of Eq. 3): 11 named cases, 300 random cases
    FAIL breadth_eq3: child_breadth(2, 0, parent_is_root=True) = 1, expected 2
    hint: the root's children are halved once too often: the root's first child keeps breadth b.
    (a nudge: racer-ref check --hint 2 my_06_logits_tree.py)

Any file name works: the exercise is read from ``--exercise NN``, else an ``EXERCISE = "NN"``
line, else the module docstring's first words ("Exercise NN"), else the first two-digit
number in the file name (``my_04_lru.py``). ``--json`` prints a machine-readable result
instead, for autograders: every case is run; a score per function (the share of its cases
passed), per file (the mean of its functions') and overall (the mean of the files', weighted
per exercise with ``--weight NN=W`` or ``--weights FILE``, 1 by default). Exit status: 0
when every case passes, 1 otherwise, 2 for a file it cannot check. The cases run in-process
on the student's module; nothing is written anywhere. A file that calls ``sys.exit()`` (at
import or in a function) fails instead of ending the checker. An LRU list whose links go
round in a circle, or an acceptance walk that never ends, is named at once: ``order()`` and
``accept_greedy`` run under a bound on the lines they may execute, proportional to the size
of the list or tree (:func:`_within_steps`). Beyond that, on Unix, an import or a case that
runs longer than :data:`CASE_SECONDS` fails as too slow (an endless loop), and the
function's remaining cases are then not run. (``os._exit()`` still ends it.)
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import json
import random
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from racer_ref.course.hints import HINTS, READ, Hint

__all__ = ["EXERCISES", "HINTS", "READ", "Hint", "Mismatch", "exercise_of", "json_result", "load", "main",
           "pending", "read_weights", "run_exercise", "unwritten"]

Path_ = Tuple[int, ...]


class Mismatch(Exception):
    """A case where the student's answer differs from the reference's.

    ``kind`` names the diagnosed mistake (a key of :data:`HINTS`, e.g. ``"01.depth"``);
    ``detail`` is an optional second line that explains the failing value."""

    def __init__(self, message: str, kind: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.detail = detail


def expect(got: Any, want: Any, what: str, kind: str = "") -> None:
    """Raise ``Mismatch(kind)`` unless ``got == want``."""
    if got != want:
        raise Mismatch(f"{what} = {got!r}, expected {want!r}", kind)


@dataclass(frozen=True)
class Case:
    """One case: its name, the function (or class) of the exercise it checks, and a thunk that
    raises :class:`Mismatch` on a divergence (it may return a note to print)."""

    name: str
    function: str
    run: Callable[[], Optional[str]]


CaseIter = Iterator[Case]


def _seeded(count: int, function: str, run: Callable[[random.Random], Optional[str]]) -> CaseIter:
    """The differential cases ``random000``... of ``function``: ``run`` on ``random.Random(seed)``."""
    for seed in range(count):
        yield Case(f"random{seed:03d}", function, lambda seed=seed: run(random.Random(seed)))


@dataclass(frozen=True)
class Exercise:
    number: str
    title: str
    #: names the student's module must define
    names: Tuple[str, ...]
    #: named cases, random cases
    named: Callable[[ModuleType], CaseIter]
    random: Callable[[ModuleType], CaseIter]
    #: stage 3: where to read, with a small worked example
    read: str
    #: modules the reference answers need beyond numpy (checked before the file is run)
    needs: Tuple[str, ...] = ()


def _diagnosed(run: Callable[[], Optional[str]], diagnose: Callable[[], Optional[Mismatch]]) -> Optional[str]:
    """Run ``run``; a :class:`Mismatch` without a kind gets the kind (and detail) that
    ``diagnose`` finds by looking at the student's whole answer."""
    try:
        return run()
    except Mismatch as mismatch:
        if not mismatch.kind:
            found = diagnose()
            if found is not None:
                mismatch.kind = found.kind
                extra = found.detail or str(found)
                if not mismatch.detail and extra not in str(mismatch):
                    mismatch.detail = extra
        raise


# ======================================================================================
# The automaton: helpers shared by exercises 01-03.
# ======================================================================================


#: Where the reference answers come from, when set: a callable ``name -> object`` that
#: replaces :func:`_default_reference` (the handout's recorded answers,
#: ``racer_ref.course.recorded``, set it). ``None``: the Rust core, else the Python twin.
REFERENCE: Optional[Callable[[str], Any]] = None


def _reference(name: str) -> Any:
    """The reference's ``name``: from :data:`REFERENCE` when set, else
    :func:`_default_reference`. Every reference answer the checker compares with goes
    through here (the names: :data:`REFERENCE_NAMES`)."""
    if REFERENCE is not None:
        return REFERENCE(name)
    return _default_reference(name)


#: Reference names that only Python provides (not the Rust core): name -> its loader.
_PYTHON_REFERENCE: Dict[str, Callable[[], Any]] = {
    "DraftTree": lambda: importlib.import_module("racer_ref.tree").DraftTree,
    "child_breadth": lambda: importlib.import_module("racer_ref.reference.logits_tree").child_breadth,
    "accept_greedy": lambda: _verify_accept,
    "keep_accepted": lambda: _verify_keep,
}
#: Every name the checker asks :func:`_reference` for.
REFERENCE_NAMES = ("Automaton", "CopyLogitTable", "build_draft_tree") + tuple(_PYTHON_REFERENCE)


def _default_reference(name: str) -> Any:
    """The Rust core's ``name`` (``Automaton``, ``CopyLogitTable``, ``build_draft_tree``), or
    the Python twin's where the core is not built (the test suite holds the two identical);
    the Python-only names of :data:`_PYTHON_REFERENCE` from their modules."""
    if name in _PYTHON_REFERENCE:
        return _PYTHON_REFERENCE[name]()
    try:
        from racer_ref import _core
    except ImportError:
        import racer_ref.reference as twin

        return getattr(twin, name)
    return getattr(_core, name)


def _core_automaton(max_nodes: int, ngram: int, min_border_depth: int = 2):
    return _reference("Automaton")(max_nodes, ngram, min_border_depth)


def _states(automaton) -> Dict[Path_, Tuple[int, Path_, int]]:
    """path -> (freq, fail, lru rank) of every state of an automaton (via ``dump()``)."""
    from racer_ref.course.cases.automaton import parse_dump

    return parse_dump(automaton.dump())["states"]


def _phrase_stream(rnd: random.Random, alphabet: int, length: int) -> List[int]:
    """A token stream with repeats: random walks over a few phrases, as text has."""
    phrases = [[rnd.randrange(alphabet) for _ in range(rnd.randint(2, 6))] for _ in range(5)]
    stream: List[int] = []
    while len(stream) < length:
        stream.extend(rnd.choice(phrases) if rnd.random() < 0.7 else [rnd.randrange(alphabet)])
    return stream[:length]


def _by_length(paths) -> List[Path_]:
    return sorted(paths, key=lambda p: (len(p), p))


# --------------------------------------------------------------------------------------
# 01. Trie insert with frequencies.
# --------------------------------------------------------------------------------------


def _trie_nodes(trie) -> Tuple[Any, Dict[Path_, Any]]:
    """The root and path -> node of the student's trie, walked from ``trie.root`` (the root
    excluded from the dict)."""
    root = getattr(trie, "root", None)
    if root is None or not isinstance(getattr(root, "children", None), dict):
        raise Mismatch("the trie has no self.root with a children dict", "01.structure")
    out: Dict[Path_, Any] = {}
    stack: List[Tuple[Path_, Any]] = [((), root)]
    while stack and len(out) < 100_000:
        path, node = stack.pop()
        for token, child in node.children.items():
            out[path + (token,)] = child
            stack.append((path + (token,), child))
    return root, out


def _occurs(path: Path_, committed: Sequence[int]) -> bool:
    n = len(path)
    return any(tuple(committed[i:i + n]) == path for i in range(len(committed) - n + 1))


def _trie_mistake(trie, states, ngram: int, committed: Sequence[int]) -> Optional[Mismatch]:
    """The first mistake in the student's trie against the core's ``states``, diagnosed."""
    root, nodes = _trie_nodes(trie)
    extra = _by_length(set(nodes) - set(states))
    missing = _by_length(set(states) - set(nodes))
    if extra:
        never = [p for p in extra if not _occurs(p, committed)]
        if never:
            return Mismatch(f"your trie holds {never[0]}, which never occurs in the committed "
                            f"tokens {list(committed)}", "01.never_committed")
        return Mismatch(f"your trie holds {extra[0]}, longer than ngram = {ngram}", "01.too_deep")
    if missing:
        depths = {len(p) for p in missing}
        if not any(len(p) == 1 for p in nodes):
            return Mismatch(f"your trie has no string of length 1, e.g. {missing[0]}", "01.root_window")
        if depths == {ngram}:
            return Mismatch(f"none of the {len(missing)} strings of length ngram = {ngram} "
                            f"(e.g. {missing[0]}) is in your trie", "01.longest_window")
        return Mismatch(f"{missing[0]} occurs in the committed tokens but is not in your trie", "01.missing")
    diffs = [(p, trie.freq(p), states[p][0]) for p in _by_length(states) if trie.freq(p) != states[p][0]]
    if diffs:
        path, got, want = diffs[0]
        kind = ("01.freq_once" if all(g == 1 for _, g, _ in diffs)
                else "01.freq_too_high" if all(g > w for _, g, w in diffs) else "01.freq")
        return Mismatch(f"trie.freq({path}) = {got}, expected {want}", kind)
    for path in _by_length(nodes):
        node = nodes[path]
        depth, token = getattr(node, "depth", None), getattr(node, "token", None)
        if depth != len(path):
            return Mismatch(f"the node of {path}: depth = {depth!r}, expected {len(path)}", "01.depth")
        if getattr(node, "parent", None) is not nodes.get(path[:-1], root):
            return Mismatch(f"the node of {path}: parent is not the node of {path[:-1]}", "01.parent")
        if token != path[-1]:
            return Mismatch(f"the node of {path}: token = {token!r}, expected {path[-1]!r}", "01.token")
    if len(trie) != len(states):
        return Mismatch(f"len(trie) = {len(trie)}, expected {len(states)}", "01.count")
    return None


def _check_trie(trie, core, ngram: int, committed: Sequence[int], where: str) -> None:
    mistake = _trie_mistake(trie, _states(core), ngram, committed)
    if mistake is not None:
        raise Mismatch(f"{where}: {mistake}", mistake.kind, mistake.detail)


def _named_01(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.automaton import CASES

    for case in CASES:
        core = _core_automaton(case.max_nodes, case.ngram, case.min_border_depth)
        for step in case.steps:
            core.extend(list(step.tokens))
        if core.stats()["evictions"]:
            continue  # eviction is exercise 04's business

        def run(case=case) -> None:
            trie = mod.Trie(case.ngram)
            core = _core_automaton(10**6, case.ngram)
            committed: List[int] = []
            for k, step in enumerate(case.steps):
                trie.extend(list(step.tokens))
                core.extend(list(step.tokens))
                committed += list(step.tokens)
                where = f"step {k} (tokens {list(step.tokens)}, ngram {case.ngram})"

                def named(step=step, where=where) -> None:
                    if step.nodes is not None:
                        expect(len(trie), step.nodes, f"{where}: len(trie)")
                    for path, freq in step.freqs.items():
                        expect(trie.freq(path), freq, f"{where}: trie.freq({path})")

                _diagnosed(named, lambda: _trie_mistake(trie, _states(core), case.ngram, committed))
                _check_trie(trie, core, case.ngram, committed, where)

        yield Case(case.name, "Trie", run)


def _random_01(mod: ModuleType) -> CaseIter:
    def run(rnd: random.Random) -> None:
        ngram, alphabet = rnd.randint(2, 6), rnd.randint(1, 6)
        trie, core = mod.Trie(ngram), _core_automaton(10**6, ngram)
        committed: List[int] = []
        for _ in range(rnd.randint(1, 6)):
            chunk = _phrase_stream(rnd, alphabet, rnd.randint(0, 12))
            trie.extend(chunk)
            core.extend(chunk)
            committed += chunk
            _check_trie(trie, core, ngram, committed, f"ngram {ngram}, after committing {committed}")
        absent = tuple(committed[-1:]) + (alphabet + 7,)
        expect(trie.freq(absent), 0, f"trie.freq({absent}) (never committed)", "01.freq")

    yield from _seeded(40, "Trie", run)


# --------------------------------------------------------------------------------------
# 02. Failure links (eager build).
# --------------------------------------------------------------------------------------


def _link_mistake(states, path: Path_, got: Any, want: Path_, what: str) -> Mismatch:
    """``what = got, expected want`` for the link of ``path``, with the kind of mistake."""
    message = f"{what} = {got!r}, expected {want!r}"
    if not isinstance(got, tuple) or (got and got not in states):
        return Mismatch(message, "02.not_a_state", f"{got!r} is not a state of the trie")
    if got == path:
        return Mismatch(message, "02.self_link")
    if got != path[len(path) - len(got):]:
        return Mismatch(message, "02.not_a_suffix", f"{got} is not a suffix of {path}")
    if got == () and path[1:] not in states:
        return Mismatch(message, "02.gave_up", f"{path[1:]} is not in the trie, but its suffix "
                                               f"{want} is")
    if len(got) < len(want):
        return Mismatch(message, "02.too_short", f"{want} is a longer proper suffix of {path} in the trie")
    return Mismatch(message, "02.link")


def _compare_links(links: Dict[Path_, Path_], states, named: Dict[Path_, Path_], where: str) -> None:
    if not isinstance(links, dict):
        raise Mismatch(f"{where}: failure_links returned {type(links).__name__}, expected a dict", "02.keys")
    for path, link in list(named.items()) + [(p, states[p][1]) for p in _by_length(states)]:
        if path not in links:
            raise Mismatch(f"{where}: the result has no key {path}", "02.keys")
        if links[path] != link:
            raise _link_mistake(states, path, links[path], link, f"{where}: fail({path})")
    expect(sorted(links), sorted(states), f"{where}: the keys of the result (one per state)", "02.keys")


def _named_02(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.automaton import CASES

    for case in CASES:
        def run(case=case) -> None:
            core = _core_automaton(case.max_nodes, case.ngram, case.min_border_depth)
            for k, step in enumerate(case.steps):
                core.extend(list(step.tokens))
                states = _states(core)
                _compare_links(mod.failure_links(set(states)), states, step.fails,
                               f"step {k}: trie {sorted(states)}")

        yield Case(case.name, "failure_links", run)


def _random_02(mod: ModuleType) -> CaseIter:
    def run(rnd: random.Random) -> None:
        ngram = rnd.randint(2, 5)
        core = _core_automaton(rnd.randint(ngram, 40), ngram)
        core.extend(_phrase_stream(rnd, rnd.randint(1, 5), rnd.randint(1, 50)))
        states = _states(core)
        _compare_links(mod.failure_links(set(states)), states, {}, f"trie {sorted(states)}")

    yield from _seeded(60, "failure_links", run)


# --------------------------------------------------------------------------------------
# 03. Lazy failure links.
# --------------------------------------------------------------------------------------


class _CountingDict(dict):
    """A children dict that counts lookups (to see that cached links are reused)."""

    lookups = 0

    def get(self, key, default=None):  # type: ignore[override]
        _CountingDict.lookups += 1
        return super().get(key, default)

    def __getitem__(self, key):
        _CountingDict.lookups += 1
        return super().__getitem__(key)

    def __contains__(self, key):
        _CountingDict.lookups += 1
        return super().__contains__(key)


class _LazyDriver:
    """Keeps a student's ``LazyTrie`` equal to a trie given as a set of paths."""

    def __init__(self, mod: ModuleType) -> None:
        self.trie = mod.LazyTrie()
        self.trie.root.children = _CountingDict()
        self.nodes: Dict[Path_, Any] = {(): self.trie.root}
        self.log: List[str] = []
        #: the right links at the previous check (to recognise a stale cached link)
        self.previous: Dict[Path_, Path_] = {}

    def sync(self, paths) -> None:
        present = set(paths)
        # Evict deepest first (always leaves), then create shallowest first.
        for path in sorted(set(self.nodes) - present - {()}, key=len, reverse=True):
            self.trie.evict(self.nodes.pop(path))
            self.log.append(f"evict {path}")
        for path in sorted(present - set(self.nodes), key=len):
            node = self.trie.add(self.nodes[path[:-1]], path[-1])
            node.children = _CountingDict()
            self.nodes[path] = node
            self.log.append(f"add {path}")

    def check(self, states, named: Dict[Path_, Path_], where: str) -> None:
        inverse = {id(node): path for path, node in self.nodes.items()}
        ops = "; ".join(self.log[-6:])
        where = f"{where} (last operations: {ops})"

        for path, want in list(named.items()) + [(p, states[p][1]) for p in sorted(states, key=len)]:
            node = self.trie.fail(self.nodes[path])
            got = inverse.get(id(node))
            what = f"{where}: fail({path})"
            if got is None:
                raise Mismatch(f"{what} = a node that is not in the trie: {node!r}, expected {want!r}",
                               "03.not_in_trie")
            if got == want:
                continue
            if self.previous.get(path) == got:
                raise Mismatch(f"{what} = {got!r}, expected {want!r}", "03.stale",
                               f"{got} was the right link before the last operations; they changed it")
            mistake = _link_mistake(states, path, got, want, what)
            raise Mismatch(str(mistake), "03.recompute", mistake.detail)
        self.previous = {p: states[p][1] for p in states}
        # No change since: every link again, now from the cache.
        before = _CountingDict.lookups
        for path in states:
            self.trie.fail(self.nodes[path])
        expect(_CountingDict.lookups - before, 0,
               f"{where}: children lookups while asking every link a second time with no change",
               "03.cache")


def _named_03(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.automaton import CASES

    for case in CASES:
        def run(case=case) -> None:
            core = _core_automaton(case.max_nodes, case.ngram, case.min_border_depth)
            driver = _LazyDriver(mod)
            for k, step in enumerate(case.steps):
                core.extend(list(step.tokens))
                states = _states(core)
                driver.sync(states)
                driver.check(states, step.fails, f"step {k}")

        yield Case(case.name, "LazyTrie", run)


def _random_03(mod: ModuleType) -> CaseIter:
    def run(rnd: random.Random) -> None:
        ngram = rnd.randint(2, 5)
        # 1 and 1025 share an epoch counter (1025 % 1024 == 1).
        symbols = [0, 1, 2, 1025][: rnd.randint(1, 4)]
        core = _core_automaton(rnd.randint(ngram, ngram + 10), ngram)
        driver = _LazyDriver(mod)
        committed: List[int] = []
        for _ in range(rnd.randint(5, 40)):
            token = rnd.choice(symbols)
            core.extend([token])
            committed.append(token)
            states = _states(core)
            driver.sync(states)
            driver.check(states, {}, f"after committing {committed[-12:]} (ngram {ngram})")

    yield from _seeded(40, "LazyTrie", run)


# ======================================================================================
# 04. The O(1) LRU list.
# ======================================================================================


class _Runaway(BaseException):
    """Raised in the student's code by :func:`_within_steps` (a ``BaseException``, so that an
    ``except Exception`` in a student's loop does not swallow it)."""


def _within_steps(call: Callable[[], Any], steps: int) -> Any:
    """``call()``, stopped with :class:`_Runaway` after ``steps`` executed lines of Python: a
    bound on the work (a walk over a list of m slots needs a few lines per slot), so an
    endless walk is caught at once, whatever the machine's speed."""
    count = 0

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
            if count > steps:
                raise _Runaway
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        return call()
    finally:
        sys.settrace(previous)


def _older_walk(lru, capacity: int) -> str:
    """``head -> ... -> s (again)`` along the student's ``older`` links, when the list is kept
    in the arrays the exercise suggests and they go round in a circle; else ``""``."""
    older, slot, seen = getattr(lru, "older", None), getattr(lru, "head", None), []
    try:
        while isinstance(slot, int) and 0 <= slot < capacity and slot not in seen:
            seen.append(slot)
            slot = older[slot]
    except Exception:
        return ""
    return f"following older from the head: {' -> '.join(map(str, seen + [slot]))} (again)" if slot in seen else ""


def _check_lru(lru, model: List[int], capacity: int, where: str, last: Optional[Tuple[str, int, bool]]) -> None:
    """``last``: the operation just applied, (op, slot, was the slot on the list), or None."""
    by_op = "04.empty"
    if last is not None:
        op, slot, present = last
        by_op = ("04.touch_present" if present else "04.touch_new") if op == "touch" else \
                ("04.remove" if present else "04.remove_absent")
    steps = 20 * capacity + 100  # order() walks at most capacity slots
    try:
        order = _within_steps(lambda: list(lru.order()), steps)
    except _Runaway:
        raise Mismatch(f"{where}: order() has not reached the end of the list after {steps} steps, with at "
                       f"most {capacity} slots on it: the links go round in a circle", "04.cycle",
                       _older_walk(lru, capacity)) from None
    if last is not None and last[0] == "remove" and last[2] and last[1] in order:
        by_op = "04.not_removed"
    expect(order, model, f"{where}: order() (most recent first)", by_op)
    expect(len(lru), len(model), f"{where}: len()", "04.len")
    expect(lru.most_recent(), model[0] if model else None, f"{where}: most_recent()", "04.ends")
    expect(lru.least_recent(), model[-1] if model else None, f"{where}: least_recent()", "04.ends")


def _apply_lru(lru, model: List[int], op: str, slot: int) -> Tuple[str, int, bool]:
    present = slot in model
    if op == "touch":
        lru.touch(slot)
        if present:
            model.remove(slot)
        model.insert(0, slot)
    else:
        lru.remove(slot)
        if present:
            model.remove(slot)
    return op, slot, present


def _named_04(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import LRU_CASES

    for case in LRU_CASES:
        def run(case=case) -> None:
            lru, model = mod.LruList(case.capacity), []
            _check_lru(lru, model, case.capacity, f"a new LruList({case.capacity})", None)
            for k, (op, slot) in enumerate(case.ops):
                last = _apply_lru(lru, model, op, slot)
                _check_lru(lru, model, case.capacity, f"after {list(case.ops[: k + 1])}", last)
            assert model == list(case.order), case.name  # the hand-checked order
            for slot in range(case.capacity):
                expect(slot in lru, slot in case.order, f"{slot} in lru", "04.membership")

        yield Case(case.name, "LruList", run)


def _random_04(mod: ModuleType) -> CaseIter:
    def run(rnd: random.Random) -> None:
        capacity = rnd.randint(1, 12)
        lru, model, ops = mod.LruList(capacity), [], []
        for _ in range(200):
            op = "touch" if rnd.random() < 0.65 else "remove"
            slot = rnd.randrange(capacity)
            ops.append((op, slot))
            last = _apply_lru(lru, model, op, slot)
            _check_lru(lru, model, capacity, f"capacity {capacity}, after ...{ops[-8:]}", last)
            probe = rnd.randrange(capacity)
            expect(probe in lru, probe in model, f"capacity {capacity}, after ...{ops[-8:]}: {probe} in lru",
                   "04.membership")

    yield from _seeded(40, "LruList", run)

    def scale() -> str:
        # 300,000 operations on 100,000 slots: about a second when each is O(1).
        capacity = 100_000
        lru, rnd = mod.LruList(capacity), random.Random(0)
        slots = [rnd.randrange(capacity) for _ in range(300_000)]
        start = time.perf_counter()
        for i, slot in enumerate(slots):
            lru.touch(slot) if i % 3 else lru.remove(slot)
        seconds = time.perf_counter() - start
        on: Dict[int, int] = {}  # slot -> time of its last touch, for the slots on the list
        for i, slot in enumerate(slots):
            if i % 3:
                on[slot] = i
            else:
                on.pop(slot, None)
        expect(len(lru), len(on), "after 300,000 operations on 100,000 slots: len()", "04.len")
        expect(lru.most_recent(), max(on, key=on.__getitem__), "after 300,000 operations: most_recent()", "04.ends")
        expect(lru.least_recent(), min(on, key=on.__getitem__), "after 300,000 operations: least_recent()", "04.ends")
        return f"scale: 300,000 operations on 100,000 slots took {seconds:.2f} s"

    yield Case("scale100k", "LruList", scale)


# ======================================================================================
# 05. The copy-logit table.
# ======================================================================================


def _row_mistake(table, token: int, got: List[int], want: List[int], calls, k: int, vocab: int,
                 what: str) -> Mismatch:
    """Diagnose a wrong ``table.row(token)``; ``calls``: the observe calls so far."""
    message = f"{what} = {got!r}, expected {want!r}"
    if want:  # a neighbour's row where token's should be: an index off by one
        for near in (token - 1, token + 1):
            if 0 <= near < vocab and list(table.row(near)) == want != (_rows_seen(calls, near, k) or [[]])[-1]:
                return Mismatch(message, "05.row_index", f"row({near}) gives the row observed for token {token}")
    if not want:
        return Mismatch(message, "05.unseen")
    if not got:
        return Mismatch(message, "05.lost")
    if len(got) < len(want) and got == want[:len(got)]:
        return Mismatch(message, "05.row_short", f"{len(got)} of the k = {len(want)} ids")
    if len(got) > len(want):
        return Mismatch(message, "05.width", f"k = {len(want)}")
    if got in _rows_seen(calls, token, k)[:-1]:
        return Mismatch(message, "05.not_last", f"{got} is the row of an earlier occurrence")
    return Mismatch(message, "05.row")


def _rows_seen(calls, token: int, k: int) -> List[List[int]]:
    return [list(row[:k]) for ids, topk in calls for t, row in zip(ids, topk) if t == token]


def _named_05(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import TABLE_CASES

    for case in TABLE_CASES:
        def run(case=case) -> None:
            table = mod.CopyLogitTable(case.vocab_size, case.k)
            for token_ids, topk_ids in case.observes:
                table.observe(list(token_ids), [list(r) for r in topk_ids])
            for token, want in case.rows.items():
                got = list(table.row(token))
                if got != want:
                    raise _row_mistake(table, token, got, want, case.observes, case.k, case.vocab_size,
                                       f"after observe{list(case.observes)}: row({token})")

        yield Case(case.name, "CopyLogitTable", run)


def _random_05(mod: ModuleType) -> CaseIter:
    import numpy as np

    CopyLogitTable = _reference("CopyLogitTable")

    def run(rnd: random.Random) -> None:
        vocab = rnd.randint(1, 12)
        k = rnd.randint(1, vocab)
        table, core, calls = mod.CopyLogitTable(vocab, k), CopyLogitTable(vocab, k), []
        for _ in range(rnd.randint(1, 4)):
            n, width = rnd.randint(0, 6), rnd.randint(k, vocab)
            ids = [rnd.randrange(vocab) for _ in range(n)]
            topk = [[rnd.randrange(vocab) for _ in range(width)] for _ in range(n)]
            calls.append((ids, topk))
            table.observe(ids, topk)
            core.observe(np.array(ids, dtype=np.int64), np.array(topk, dtype=np.int64).reshape(n, width))
            for v in range(vocab):
                got, want = list(table.row(v)), core.row(v)
                if got != want:
                    raise _row_mistake(table, v, got, want, calls, k, vocab,
                                       f"vocab_size {vocab}, k {k}, after observe calls {calls}: row({v})")

    yield from _seeded(60, "CopyLogitTable", run)


# ======================================================================================
# 06-08. Logits tree, merged draft tree, tree attention mask.
# ======================================================================================


def _core_tree(root: int, capacity: int, paths, rows: Optional[Dict[int, List[int]]], vocab: int, k: int,
               root_topk=None):
    """The Rust core's (or the twin's) flattened draft tree (a ``DraftTree``)."""
    import numpy as np

    DraftTree = _reference("DraftTree")
    table = None
    if rows is not None:
        table = _reference("CopyLogitTable")(vocab, k)
        if rows:
            table.observe(list(rows), [rows[t] for t in rows])
    topk = None if root_topk is None else np.array(root_topk)
    tree = _reference("build_draft_tree")(root, capacity, [list(p) for p in paths], table, topk)
    return tree if isinstance(tree, DraftTree) else DraftTree(*tree)  # the core returns its arrays


def _random_rows(rnd: random.Random, vocab: int, k: int) -> Dict[int, List[int]]:
    return {rnd.randrange(vocab): [rnd.randrange(vocab) for _ in range(k)]
            for _ in range(rnd.randint(0, vocab + 1))}


def _as_lists(result: Any, count: int, what: str, kind: str) -> List[List[int]]:
    if not isinstance(result, (tuple, list)) or len(result) != count:
        raise Mismatch(f"{what} returned {result!r}, expected a tuple of {count} lists", kind)
    return [[int(v) for v in part] for part in result]


def _tree_paths(tokens: List[int], parents: List[int]) -> Optional[List[Path_]]:
    """The token path of every node, or None when parents are not breadth-first."""
    if not parents or parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents) if i):
        return None
    paths: List[Path_] = []
    for i, p in enumerate(parents):
        paths.append((tokens[0],) if i == 0 else paths[p] + (tokens[i],))
    return paths


def _tree_mistake(number: str, got: Tuple[List[int], List[int]], want: Tuple[List[int], List[int]],
                  capacity: int, what: str, retrieval=()) -> Mismatch:
    """Diagnose a wrong (tokens, parents) of exercise 06 or 07 against the core's."""
    message = f"{what} = {got!r}, expected {want!r}"
    if len(got[0]) != len(got[1]):
        return Mismatch(message, f"{number}.parents_order", "tokens and parents differ in length")
    paths, wanted = _tree_paths(*got), _tree_paths(*want)
    assert wanted is not None
    if paths is None:
        return Mismatch(message, f"{number}.parents_order")
    if len(paths) > capacity:
        return Mismatch(message, f"{number}.capacity", f"{len(paths)} nodes, capacity {capacity}")
    if len(set(paths)) < len(paths):
        twice = next(p for p in paths if paths.count(p) > 1)
        return Mismatch(message, f"{number}.duplicate", f"the path {list(twice)} is there twice")
    for path in retrieval:
        if tuple(path) not in set(paths):
            return Mismatch(message, f"{number}.retrieval", f"the retrieval path {list(path)} is missing")
    if set(paths) == set(wanted):
        return Mismatch(message, f"{number}.order")
    if set(paths) < set(wanted):
        first = _by_length(set(wanted) - set(paths))[0]
        return Mismatch(message, f"{number}.too_few", f"the node of the path {list(first)} is missing")
    first = _by_length(set(paths) - set(wanted))[0]
    return Mismatch(message, f"{number}.children", f"the path {list(first)} should not be in the tree")


def _breadth_kind(got: int, b: int, j: int, is_root: bool) -> str:
    if got < 1:
        return "06.floor"
    if is_root and got == max(1, b >> (j + 1)):
        return "06.root_halved"
    if not is_root and got == max(1, b >> j):
        return "06.not_halved"
    return "06.breadth"


def _named_06(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import LOGITS_TREE_CASES

    child_breadth = _reference("child_breadth")

    def breadth() -> None:
        for b in range(1, 17):
            for j in range(10):
                for is_root in (True, False):
                    got, want = mod.child_breadth(b, j, is_root), child_breadth(b, j, is_root)
                    expect(got, want, f"child_breadth({b}, {j}, parent_is_root={is_root})",
                           _breadth_kind(got, b, j, is_root))

    yield Case("breadth_eq3", "child_breadth", breadth)
    for case in LOGITS_TREE_CASES:
        if case.root_topk is not None:
            continue  # last-logit mode is not part of the exercise
        what = f"logits_tree(root={case.root}, capacity={case.capacity}, rows={case.rows}, k={case.k})"
        if len(case.rows) > 12:
            what = f"logits_tree(root=0, capacity={case.capacity}, k={case.k}, all tokens distinct)"
        yield Case(case.name, "logits_tree", lambda case=case, what=what: _tree_case(
            mod, "06", case.root, case.capacity, (), case.rows, case.vocab_size, case.k, case.expect, what))


def _random_06(mod: ModuleType) -> CaseIter:
    def run(rnd: random.Random) -> None:
        vocab = rnd.randint(1, 10)
        k = rnd.randint(1, min(vocab, 4))
        rows = _random_rows(rnd, vocab, k)
        root, capacity = rnd.randrange(vocab), rnd.randint(1, 40)
        _tree_case(mod, "06", root, capacity, (), rows, vocab, k, {},
                   f"logits_tree(root={root}, capacity={capacity}, rows={rows}, k={k})")

    yield from _seeded(300, "logits_tree", run)


def _tree_case(mod: ModuleType, number: str, root, capacity, paths, rows, vocab, k, want: Dict[str, list],
               what: str = "") -> None:
    """One case of exercise 06 (``logits_tree``, no ``paths``) or 07 (``draft_tree``): the hand-checked
    values of ``want`` first, then the core's tree (and in 07 its sources)."""
    if number == "06":
        got = _as_lists(mod.logits_tree(root, capacity, rows, k), 2, what, "06.parents_order")
        core = _core_tree(root, capacity, (), rows, vocab, k)
    else:
        rows = rows or {}
        what = (f"draft_tree(root={root}, capacity={capacity}, retrieval_paths={[list(p) for p in paths]}, "
                f"rows={rows}, k={k})")
        got = _as_lists(mod.draft_tree(root, capacity, [list(p) for p in paths], rows, k), 3, what,
                        "07.parents_order")
        core = _core_tree(root, capacity, paths, rows or None, vocab, k)
    tokens, parents = got[0], got[1]
    core_tp = (core.tokens.tolist(), core.parents.tolist())

    def diagnose() -> Mismatch:
        if number == "07" and (tokens, parents) == core_tp:
            return Mismatch(f"{what}: sources = {got[2]}, expected {core.sources.tolist()}", "07.sources")
        return _tree_mistake(number, (tokens, parents), core_tp, capacity, what, paths)

    def named() -> None:
        if number == "06" and "per_depth" in want:
            depths = [0] * len(parents)
            for i in range(1, len(parents)):
                depths[i] = depths[parents[i]] + 1
            expect([depths.count(d) for d in range(max(depths) + 1)], want["per_depth"], f"{what}: nodes per depth")
        for name, value in zip(("tokens", "parents", "sources"), got):  # (06 has no sources)
            if name in want:
                expect(value, want[name], f"{what}: {name}")

    _diagnosed(named, diagnose)
    if (tokens, parents) != core_tp:
        raise _tree_mistake(number, (tokens, parents), core_tp, capacity, f"{what}: (tokens, parents)", paths)
    if number == "07":
        expect(got[2], core.sources.tolist(), f"{what}: sources", "07.sources")


def _named_07(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import DRAFT_TREE_CASES, LOGITS_TREE_CASES

    for case in DRAFT_TREE_CASES + [c for c in LOGITS_TREE_CASES if c.root_topk is None and len(c.rows) <= 12]:
        yield Case(case.name, "draft_tree", lambda case=case: _tree_case(
            mod, "07", case.root, case.capacity, case.paths, case.rows, case.vocab_size, case.k, case.expect))


def _random_07(mod: ModuleType) -> CaseIter:
    def run(rnd: random.Random) -> None:
        vocab = rnd.randint(2, 10)
        k = rnd.randint(1, min(vocab, 4))
        root, capacity = rnd.randrange(vocab), rnd.randint(1, 24)
        paths = [[root] + [rnd.randrange(vocab) for _ in range(rnd.randint(0, 4))]
                 for _ in range(rnd.randint(0, 4))]
        _tree_case(mod, "07", root, capacity, paths, _random_rows(rnd, vocab, k), vocab, k, {})

    yield from _seeded(300, "draft_tree", run)


def _mask_mistake(got: Any, want: List[List[bool]], parents: List[int], what: str) -> Optional[Mismatch]:
    """The first wrong cell of a tree attention mask, by row and column (not two matrices)."""
    n = len(want)
    try:
        mask = [[bool(v) for v in row] for row in got]
    except TypeError:
        return Mismatch(f"{what} returned {got!r}, expected an n x n nested list of bools", "08.shape")
    if len(mask) != n or any(len(row) != n for row in mask):
        shape = (len(mask), len(mask[0]) if mask else 0)
        return Mismatch(f"{what}: shape {shape}, expected ({n}, {n})", "08.shape")
    wrong = [(i, j) for i in range(n) for j in range(n) if mask[i][j] != want[i][j]]
    if not wrong:
        return None
    i, j = wrong[0]
    path, node = [], i
    while node >= 0:
        path.append(node)
        node = parents[node]
    relation = ("the diagonal: a node attends to itself" if i == j
                else f"node {j} is an ancestor of node {i}" if want[i][j]
                else f"node {j} is not an ancestor of node {i}")
    message = (f"{what}: row {i}, column {j} is {mask[i][j]}, expected {want[i][j]} "
               f"({relation}; {len(wrong)} of {n * n} cells are wrong)")
    detail = f"node {i}'s path to the root: {' -> '.join(map(str, path))}"
    if mask == [list(col) for col in zip(*want)]:
        return Mismatch(message, "08.transposed", detail)
    if all(a == b for a, b in wrong):
        return Mismatch(message, "08.self", detail)
    return Mismatch(message, "08.ancestors", detail)


def _mask_cases(mod: ModuleType, name: str, tree, past_length: int) -> CaseIter:
    parents = tree.parents.tolist()
    what = f"parents {parents}"

    def mask() -> None:
        mistake = _mask_mistake(mod.tree_attention_mask(parents), tree.attention_mask.tolist(), parents,
                                f"tree_attention_mask({what})")
        if mistake is not None:
            raise mistake

    def positions() -> None:
        got = [int(v) for v in mod.position_ids(parents, past_length)]
        want = (past_length + tree.depths).tolist()
        call = f"position_ids({what}, past_length={past_length})"
        if len(got) != len(want):
            raise Mismatch(f"{call} = {got}, expected {want}", "08.shape")
        if got != want:
            i = next(i for i in range(len(got)) if got[i] != want[i])
            shift = {g - w for g, w in zip(got, want)}
            kind = ("08.past_length" if got == tree.depths.tolist() and past_length
                    else "08.depth" if len(shift) == 1 else "08.positions")
            raise Mismatch(f"{call} = {got}, expected {want}", kind,
                           f"node {i} (depth {int(tree.depths[i])}): {got[i]}, expected {want[i]}")

    def retrieve() -> None:
        got = [[int(v) for v in row] for row in mod.retrieve_indices(parents)]
        want = tree.retrieve_indices.tolist()
        call = f"retrieve_indices({what})"
        if len(got) != len(want):
            raise Mismatch(f"{call} = {got}, expected {want}", "08.leaves",
                           f"{len(got)} rows, expected {len(want)} (one per leaf)")
        for r, (g, w) in enumerate(zip(got, want)):
            if g != w:
                raise Mismatch(f"{call}: row {r} = {g}, expected {w}", "08.retrieve")

    yield Case(name, "tree_attention_mask", mask)
    yield Case(name, "position_ids", positions)
    yield Case(name, "retrieve_indices", retrieve)


def _named_08(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import DRAFT_TREE_CASES, LOGITS_TREE_CASES

    for case in DRAFT_TREE_CASES + LOGITS_TREE_CASES:
        tree = _core_tree(case.root, case.capacity, case.paths, case.rows, case.vocab_size, case.k, case.root_topk)
        for name in ("attention_mask", "retrieve_indices"):
            if name in case.expect:  # the hand-checked arrays, not just the core's
                assert getattr(tree, name).tolist() == case.expect[name], case.name
        yield from _mask_cases(mod, case.name, tree, 5)


def _random_08(mod: ModuleType) -> CaseIter:
    for seed in range(200):
        rnd = random.Random(seed)
        vocab = rnd.randint(2, 10)
        k = rnd.randint(1, min(vocab, 4))
        root = rnd.randrange(vocab)
        paths = [[root] + [rnd.randrange(vocab) for _ in range(rnd.randint(0, 4))] for _ in range(rnd.randint(0, 3))]
        tree = _core_tree(root, rnd.randint(1, 24), paths, _random_rows(rnd, vocab, k), vocab, k)
        yield from _mask_cases(mod, f"random{seed:03d}", tree, rnd.randint(0, 100))


# ======================================================================================
# 09. Greedy acceptance (numpy); 10. KV compaction (against racer_ref.verify, torch).
# ======================================================================================


def _accept_kind(got: List[int], got_next: int, want: List[int], want_next: int, parents) -> str:
    if not got or got[0] != 0:
        return "09.root"
    if any(not 0 <= u < len(parents) for u in got) or any(parents[b] != a for a, b in zip(got, got[1:])):
        return "09.not_a_path"
    if got == want:
        return "09.next_root"
    if got == want[:len(got)]:
        return "09.stops_early"
    if want == got[:len(want)]:
        return "09.too_far"
    return "09.wrong_child"


def _student_accept(mod: ModuleType, predicted, tokens, parents, what: str) -> Any:
    """The student's ``accept_greedy``, within a bound on its steps: a walk over n nodes that
    scans the children of each node it accepts needs at most a few lines per node pair."""
    steps = 20 * (len(tokens) + 1) ** 2 + 200
    try:
        return _within_steps(lambda: mod.accept_greedy(list(predicted), list(tokens), list(parents)), steps)
    except _Runaway:
        raise Mismatch(f"{what} has not returned after {steps} steps on a tree of {len(tokens)} nodes: the walk "
                       "never ends", "09.endless") from None


def _expect_accept(got: Any, want: Tuple[List[int], int], parents, what: str) -> None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Mismatch(f"{what} returned {got!r}, expected (accepted, next_root)", "09.root")
    answer = ([int(u) for u in got[0]], int(got[1]))
    if answer != (list(want[0]), int(want[1])):
        raise Mismatch(f"{what} = {answer!r}, expected {(list(want[0]), int(want[1]))!r}",
                       _accept_kind(answer[0], answer[1], list(want[0]), int(want[1]), list(parents)))


def _verify_accept(predicted, tokens, parents) -> Tuple[List[int], int]:
    """``racer_ref.tree.accept_greedy``'s (accepted, next_root) (the walk the loop runs) for
    one-hot numpy logits whose argmax at node u is ``predicted[u]``: the reference of exercise
    09, numpy only, no torch."""
    from types import SimpleNamespace

    import numpy as np

    from racer_ref.tree import accept_greedy

    tree = SimpleNamespace(tokens=np.array(tokens), parents=np.array(parents))  # all the walk reads
    logits = np.zeros((len(predicted), max(list(predicted) + list(tokens)) + 1))
    logits[np.arange(len(predicted)), list(predicted)] = 1.0
    accepted, next_root = accept_greedy(logits, tree)
    return [int(u) for u in accepted], int(next_root)


def _accept_case(mod: ModuleType, predicted, tokens, parents, named: Optional[Tuple[List[int], int]] = None) -> None:
    """The student's walk against the hand-checked ``named`` (accepted, next_root) if given, then the reference's."""
    what = f"accept_greedy(predicted={list(predicted)}, tokens={list(tokens)}, parents={list(parents)})"
    if named is not None:
        _expect_accept(_student_accept(mod, predicted, tokens, parents, what), named, parents, what)
    want = _reference("accept_greedy")(list(predicted), list(tokens), list(parents))
    _expect_accept(_student_accept(mod, predicted, tokens, parents, what), (want[0], want[1]), parents, what)


def _named_09(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import ACCEPT_CASES

    for case in ACCEPT_CASES:
        yield Case(case.name, "accept_greedy", lambda case=case: _accept_case(
            mod, case.predicted, case.tokens, case.parents, (list(case.accepted), case.next_root)))


def _random_09(mod: ModuleType) -> CaseIter:
    def run(rnd: random.Random) -> None:
        vocab = rnd.randint(2, 6)
        k = rnd.randint(1, min(vocab, 3))
        tree = _core_tree(rnd.randrange(vocab), rnd.randint(1, 20), (), _random_rows(rnd, vocab, k), vocab, k)
        tokens = tree.tokens.tolist()
        # Mostly predict a child's token, so that paths get accepted.
        predicted = [rnd.choice([tokens[c] for c in range(len(tokens)) if tree.parents[c] == u] or [vocab])
                     if rnd.random() < 0.8 else rnd.randrange(vocab + 1) for u in range(len(tokens))]
        _accept_case(mod, predicted, tokens, tree.parents.tolist())

    yield from _seeded(200, "accept_greedy", run)


def _verify_keep(keys, past_length: int, accepted: Sequence[int]):
    """What ``racer_ref.verify.keep_accepted`` leaves of ``keys`` (a (batch, heads, slots,
    dim) tensor) in one cache layer (the reference of exercise 10)."""
    from types import SimpleNamespace

    from racer_ref.verify import keep_accepted

    layer = SimpleNamespace(keys=keys.clone(), values=keys.clone())
    keep_accepted(SimpleNamespace(layers=[layer]), past_length, list(accepted))
    return layer.keys


def _compact_case(mod: ModuleType, past_length: int, tree_size: int, accepted: Sequence[int],
                  slots: Optional[Sequence[int]]) -> None:
    import torch

    total = past_length + tree_size
    # Entry s of every (batch, head) holds the value s in every dimension, so a wrong slot shows.
    keys = torch.arange(total, dtype=torch.float32)[None, None, :, None].expand(1, 2, total, 3).clone()
    keys = keys + torch.tensor([0.0, 1000.0])[None, :, None, None]
    what = f"keep_accepted(keys of {total} slots, past_length={past_length}, accepted={list(accepted)})"
    got = mod.keep_accepted(keys.clone(), past_length, list(accepted))
    if not isinstance(got, torch.Tensor):
        raise Mismatch(f"{what} returned {type(got).__name__}, expected a tensor", "10.shape")
    want_len = past_length + len(accepted)
    expect(tuple(got.shape), (1, 2, want_len, 3), f"{what}: shape", "10.shape")
    reference = _reference("keep_accepted")(keys.clone(), past_length, list(accepted))
    if slots is not None:
        expect(reference[0, 0, :, 0].long().tolist(), list(slots), f"{what}: reference slots")
    kept, want = got[0, 0, :, 0].long().tolist(), reference[0, 0, :, 0].long().tolist()
    if kept != want:
        kind = ("10.prefix" if kept[:past_length] != want[:past_length]
                else "10.contiguous" if kept == list(range(want_len))
                else "10.offset" if kept[past_length:] == list(accepted) else "10.slots")
        raise Mismatch(f"{what}: the slots kept (head 0) = {kept!r}, expected {want!r}", kind)
    if not torch.equal(got, reference):
        raise Mismatch(f"{what}: the values differ from racer_ref.verify.keep_accepted's in another head",
                       "10.heads")


def _named_10(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import COMPACT_CASES

    for case in COMPACT_CASES:
        yield Case(case.name, "keep_accepted", lambda case=case: _compact_case(
            mod, case.past_length, case.tree_size, case.accepted, case.slots))


def _random_10(mod: ModuleType) -> CaseIter:
    def run(rnd: random.Random) -> None:
        vocab = rnd.randint(2, 6)
        tree = _core_tree(rnd.randrange(vocab), rnd.randint(1, 20), (), _random_rows(rnd, vocab, 2 if vocab > 1 else 1), vocab, min(2, vocab))
        # A random root-to-node path of the tree.
        node, path = rnd.randrange(len(tree)), []
        while node >= 0:
            path.append(node)
            node = int(tree.parents[node])
        _compact_case(mod, rnd.randint(0, 9), len(tree), path[::-1], None)

    yield from _seeded(100, "keep_accepted", run)


EXERCISES: Dict[str, Exercise] = {
    e.number: e
    for e in [
        Exercise("01", "trie insert with frequencies", ("Trie",), _named_01, _random_01, READ["01"]),
        Exercise("02", "failure links (eager build)", ("failure_links",), _named_02, _random_02, READ["02"]),
        Exercise("03", "lazy failure links", ("LazyTrie",), _named_03, _random_03, READ["03"]),
        Exercise("04", "the O(1) LRU list", ("LruList",), _named_04, _random_04, READ["04"]),
        Exercise("05", "the copy-logit table", ("CopyLogitTable",), _named_05, _random_05, READ["05"]),
        Exercise("06", "the logits tree of Eq. 3", ("child_breadth", "logits_tree"), _named_06, _random_06, READ["06"]),
        Exercise("07", "the merged draft tree", ("draft_tree",), _named_07, _random_07, READ["07"]),
        Exercise("08", "tree attention mask, position ids, retrieve_indices",
                 ("tree_attention_mask", "position_ids", "retrieve_indices"), _named_08, _random_08, READ["08"]),
        Exercise("09", "greedy acceptance", ("accept_greedy",), _named_09, _random_09, READ["09"]),
        Exercise("10", "KV compaction", ("keep_accepted",), _named_10, _random_10, READ["10"], ("torch",)),
    ]
}


# ======================================================================================
# The runner.
# ======================================================================================


def cannot_check(exercise: Exercise) -> Optional[str]:
    """Why this installation cannot check ``exercise`` (a module its reference answers need is
    missing), or ``None``."""
    for name in exercise.needs:
        try:
            importlib.import_module(name)
        except ImportError:
            if REFERENCE is not None:  # a handout: the answers are recorded, the student's code needs torch
                return (f"exercise {exercise.number} ({exercise.title}) works on {name} tensors, which are not "
                        f"installed: if the handout's README lists {exercise.number} as recorded, install torch's "
                        "CPU build (see the README); if not, this handout cannot check it: ask your teacher")
            return (f"exercise {exercise.number} ({exercise.title}) is checked against racer_ref.verify, "
                    f"which needs {name}: pip install 'racer-ref[hf]' (or torch alone)")
    return None


def unwritten(source: str) -> List[str]:
    """Names of the functions and methods of ``source`` whose body is still only ``...``
    (after an optional docstring)."""
    out: List[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = [s for s in child.body
                        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                and isinstance(s.value.value, str))]
                if any(isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                       and s.value.value is Ellipsis for s in body):
                    out.append(prefix + child.name)

    visit(ast.parse(source), "")
    return out


def pending(exercise: Exercise, source: str) -> Dict[str, List[str]]:
    """The functions (or classes) of ``exercise`` that ``source`` has not written yet, each
    with its bodies still ``...`` (a class with one such method is not written yet); their
    cases are not run. A file that does not parse has nothing pending: ``load`` reports it."""
    try:
        todo = unwritten(source)
    except (SyntaxError, ValueError):  # (Python 3.10 raises ValueError for a NUL byte)
        return {}
    found = {name: [t for t in todo if t == name or t.startswith(name + ".")] for name in exercise.names}
    return {name: methods for name, methods in found.items() if methods}


#: Seconds an import or one case may run before it fails as too slow (an endless loop, or
#: far from the expected complexity: a correct solution's slowest case takes about a second).
CASE_SECONDS = 60


class TooSlow(BaseException):
    """Raised inside the student's code when :data:`CASE_SECONDS` are up. A ``BaseException``,
    so that an ``except Exception`` in the student's loop does not swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`TooSlow` in the code run inside after ``seconds`` (Unix main thread only:
    elsewhere there is no limit)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise TooSlow(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def load(path: Path) -> ModuleType:
    """Import the student's file as a fresh module (not added to ``sys.modules``), within
    :data:`CASE_SECONDS`."""
    name = re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(f"racer_ref_exercise_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    with time_limit(CASE_SECONDS):
        spec.loader.exec_module(module)
    return module


def import_error(path: Path) -> str:
    """Why ``load(path)`` failed (called in its ``except``): for a syntax error the line and
    its caret; for ``sys.exit()``, a loop or an exception, the last lines of the traceback."""
    kind, error, _ = sys.exc_info()
    if isinstance(error, SyntaxError):
        lines = traceback.format_exception_only(kind, error)
        return f"{path} does not import:\n" + "".join(lines).rstrip()
    if isinstance(error, SystemExit):
        return f"{path} does not import: it calls sys.exit({error.code!r}) when imported; keep only definitions at the top level"
    if isinstance(error, TooSlow):
        return f"{path} does not import: importing it is {error} (an endless loop at the top level?)"
    # The frames in the student's file (not the import machinery's), then the error.
    lines = _in_file(error, path.resolve()) or traceback.format_exception_only(kind, error)
    return f"{path} does not import:\n" + "".join(lines).rstrip()


def _in_file(error: BaseException, mine: Path) -> List[str]:
    """The last 3 frames of ``error``'s traceback in the file ``mine``, then the error; [] without any."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve() == mine]
    return traceback.format_list(frames[-3:]) + traceback.format_exception_only(type(error), error) if frames else []


def exercise_of(path: Path, source: str = "", forced: Optional[str] = None) -> Exercise:
    """The exercise a file answers, from (first found): ``forced`` (``--exercise``), an
    ``EXERCISE = "NN"`` line, the module docstring's first words ``Exercise NN``, or the first
    two-digit number in the file name (``04_lru.py``, ``my_04_lru.py``, ``lru_04.py``). Raises
    ``ValueError``."""
    found, how = None, ""
    if forced is not None:
        found, how = forced[:2], "--exercise"
    if found is None:
        match = re.search(r"""^EXERCISE\s*=\s*["'](\d\d)""", source, re.MULTILINE)
        if match:
            found, how = match.group(1), "the EXERCISE line"
    if found is None:
        try:
            doc = ast.get_docstring(ast.parse(source)) or ""
        except SyntaxError:
            doc = ""
        match = re.match(r"\s*Exercise (\d\d)\b", doc)
        if match:
            found, how = match.group(1), "the module docstring"
    if found is None:
        match = re.search(r"(?<!\d)(\d\d)(?!\d)", path.name)
        if match:
            found, how = match.group(1), "the file name"
    known = ", ".join(f"{n} ({e.title})" for n, e in EXERCISES.items())
    if found is None:
        raise ValueError(f"path: cannot tell which exercise {path.name} answers: pass --exercise NN, "
                         f"or put EXERCISE = \"NN\" in the file, or name it with the number, like NN_*.py as "
                         f"in exercises/ or my_NN_*.py, with NN one of {known}")
    if found not in EXERCISES:
        raise ValueError(f"{'exercise' if how == '--exercise' else 'path'}: {how} names exercise {found}, "
                         f"expected one of {known}")
    return EXERCISES[found]


@dataclass
class Failure:
    """The first failing case of one function of an exercise."""

    case: str
    message: str
    kind: str
    detail: str = ""
    traceback: List[str] = field(default_factory=list)

    def as_dict(self) -> Dict[str, Any]:
        hint = HINTS.get(self.kind)
        return {"case": self.case, "message": self.message, "detail": self.detail, "diagnosis": self.kind,
                "hint": hint.diagnosis if hint else "", "nudge": hint.nudge if hint else "",
                "traceback": self.traceback}


@dataclass
class Result:
    """What running an exercise's cases gave: per function, cases passed and run."""

    exercise: Exercise
    named: int = 0
    random: int = 0
    passed: Dict[str, int] = field(default_factory=dict)
    total: Dict[str, int] = field(default_factory=dict)
    failures: Dict[str, Failure] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    #: the first failure in running order
    first: Optional[Failure] = None
    #: the functions not written yet (their cases were not run), with their ``...`` bodies
    unwritten: Dict[str, List[str]] = field(default_factory=dict)

    def score(self, name: str) -> float:
        """The share of ``name``'s cases passed (0 for a function not written yet)."""
        return self.passed[name] / self.total[name] if self.total[name] else 0.0


def _run_case(case: Case, mine: Path) -> Tuple[Optional[Failure], Optional[str]]:
    """Run one case; ``mine``: the student's file (a traceback shows its frames only)."""
    try:
        with time_limit(CASE_SECONDS):
            return None, case.run()
    except TooSlow as error:
        return Failure(case.name, f"your code is too slow: {error} (an endless loop?)", "slow"), None
    except SystemExit as error:
        return Failure(case.name, f"your code called sys.exit({error.code!r}); a function must return its "
                       "answer", "raised", traceback=traceback.format_exc().rstrip().splitlines()[-6:]), None
    except Mismatch as mismatch:
        return Failure(case.name, str(mismatch), mismatch.kind or "raised", mismatch.detail), None
    except Exception as error:
        tb = _in_file(error, mine)
        if not tb:  # raised in the checker, using what the student's code returned
            return Failure(case.name, f"what your code returned cannot be used: {type(error).__name__}: {error}",
                           "returned"), None
        return Failure(case.name, f"your code raised an exception: {type(error).__name__}: {error}",
                       "raised", traceback="".join(tb).rstrip().splitlines()), None


def run_cases(module: ModuleType, exercise: Exercise, every: bool, out: Any = None,
              unwritten: Optional[Dict[str, List[str]]] = None) -> Result:
    """Run the named, then the random cases, except those of the functions ``unwritten``
    (:func:`pending`). With ``every`` False, stop at the first failure and print progress to
    ``out``; with ``every`` True, run them all, printing nothing."""
    result = Result(exercise, unwritten=dict(unwritten or {}))
    named, randoms = list(exercise.named(module)), list(exercise.random(module))
    result.named, result.random = len(named), len(randoms)
    for case in named + randoms:
        result.total[case.function] = result.total.get(case.function, 0) + 1
        result.passed.setdefault(case.function, 0)
    if out is not None:
        print(f"exercise {exercise.number} ({exercise.title}): {len(named)} named cases, "
              f"{len(randoms)} random cases", file=out)
        if result.unwritten:
            print(f"  not written yet: {', '.join(result.unwritten)} (their cases are not run)", file=out)
    mine = Path(module.__file__ or "").resolve()
    slow: Dict[str, Failure] = {}  # functions that ran out of time: their other cases are not run
    for kind, cases in (("named", named), ("random", randoms)):
        cases = [case for case in cases if case.function not in result.unwritten]
        for case in cases:
            if case.function in slow:
                failure, note = slow[case.function], None
            elif every:  # what the student's code prints must not end up in the JSON
                with contextlib.redirect_stdout(io.StringIO()):
                    failure, note = _run_case(case, mine)
            else:
                failure, note = _run_case(case, mine)
            if note:
                result.notes.append(note)
                if out is not None:
                    print(f"  ({note})", file=out)
            if failure is None:
                result.passed[case.function] += 1
                continue
            if failure.kind == "slow":
                slow[case.function] = failure
            result.failures.setdefault(case.function, failure)
            result.first = result.first or failure
            if not every:
                return result
        if out is not None and cases:
            print(f"  {kind} cases: all {len(cases)} pass", file=out)
    return result


def print_failure(failure: Failure, exercise: Exercise, level: int, path: Path, out: Any) -> None:
    """The failing case, then the hints up to stage ``level`` (1-3)."""
    print(f"FAIL {failure.case}: {failure.message}", file=out)
    if failure.traceback:
        print("\n".join("    " + line for line in failure.traceback), file=out)
    if failure.detail:
        print(f"    ({failure.detail})", file=out)
    hint = HINTS.get(failure.kind, HINTS["raised"])
    print(f"hint: {hint.diagnosis}", file=out)
    if level >= 2:
        print(f"hint 2: {hint.nudge}", file=out)
    if level >= 3:
        print(f"hint 3: read {exercise.read}", file=out)
    if level < 3:
        what = "a nudge" if level == 1 else "where to read, with a worked example"
        print(f"({what}: racer-ref check --hint {level + 1} {path})", file=out)


def run_exercise(module: ModuleType, exercise: Exercise, out: Any = None, level: int = 1,
                 path: Path = Path("FILE"), unwritten: Optional[Dict[str, List[str]]] = None) -> bool:
    """Run the named, then the random cases (not those of the functions ``unwritten``); print
    the first divergence with hints up to stage ``level``. True if all pass and all are written."""
    out = sys.stdout if out is None else out
    missing = [n for n in exercise.names if not hasattr(module, n)]
    if missing:
        print(f"FAIL: the file does not define {', '.join(missing)}", file=out)
        return False
    result = run_cases(module, exercise, every=False, out=out, unwritten=unwritten)
    if result.first is not None:
        print_failure(result.first, exercise, level, path, out)
        return False
    if result.unwritten:
        done = [n for n in exercise.names if n not in result.unwritten]
        print(f"PASS so far: {', '.join(done)} agree{'s' if len(done) == 1 else ''} with the reference on every "
              f"case; not written yet: {_todo(result.unwritten)}.", file=out)
        return False
    print(f"PASS: exercise {exercise.number} agrees with the reference on every case.", file=out)
    return True


def _todo(unwritten: Dict[str, List[str]]) -> str:
    return ", ".join(m for methods in unwritten.values() for m in methods) + " (a body is still `...`)"


def json_result(path: Path, forced: Optional[str] = None) -> Dict[str, Any]:
    """The machine-readable result of one file: every case of every written function is run,
    with ``passed`` / ``total`` cases and a ``score`` per function; the file's ``score`` is
    the mean of its functions' (each function counts the same, whatever its number of cases;
    one not written yet scores 0)."""
    out: Dict[str, Any] = {"file": str(path), "exercise": None, "title": None, "status": "error",
                           "passed": 0, "total": 0, "score": 0.0, "functions": {}, "unwritten": [],
                           "notes": [], "error": None}
    try:
        source = path.read_text(encoding="utf-8")
        exercise = exercise_of(path, source, forced)
    except (ValueError, OSError) as error:
        out["error"] = str(error)
        return out
    out.update(exercise=exercise.number, title=exercise.title)
    out["error"] = cannot_check(exercise)
    if out["error"] is not None:
        return out
    todo = pending(exercise, source)
    out["unwritten"] = [m for methods in todo.values() for m in methods]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            module = load(path)
    except (Exception, SystemExit, TooSlow):
        out["error"] = import_error(path)
        return out
    result = run_cases(module, exercise, every=True, unwritten=todo)
    functions = {}
    for name in result.total:
        failure = result.failures.get(name)
        functions[name] = {"passed": result.passed[name], "total": result.total[name],
                           "score": round(result.score(name), 4), "not_written": result.unwritten.get(name, []),
                           "first_failure": failure.as_dict() if failure else None}
    passed, total = sum(result.passed.values()), sum(result.total.values())
    score = sum(result.score(name) for name in result.total) / len(result.total) if result.total else 0.0
    out.update(status="pass" if passed == total else "fail", passed=passed, total=total,
               score=round(score, 4), functions=functions, notes=result.notes)
    return out


def read_weights(text: str) -> Dict[str, float]:
    """Exercise weights from ``NN=W`` items (``--weight 04=2``, or a ``--weights`` file: one
    or more per line, ``#`` starts a comment). Raises ``ValueError``."""
    weights: Dict[str, float] = {}
    for item in re.sub(r"#.*", "", text).replace(",", " ").split():
        number, _, weight = item.partition("=")
        try:
            value = float(weight)
        except ValueError:
            value = -1.0
        if number not in EXERCISES or not value >= 0:
            raise ValueError(f"{item!r}: expected NN=W, an exercise NN of {', '.join(EXERCISES)} and a weight W >= 0")
        weights[number] = value
    return weights


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``racer-ref check FILE...``: 0 if every file passes, 1 if one fails, 2 on bad usage."""
    parser = argparse.ArgumentParser(
        prog="racer-ref check",
        description="Check an exercise (a copy of exercises/NN_*.py, any name) against the cases the "
                    "Rust core and the Python twin pass; print the first diverging case, what kind of "
                    "mistake it looks like, and hints in stages.")
    parser.add_argument("files", nargs="+", type=Path, help="exercise files, e.g. exercises/06_logits_tree.py")
    parser.add_argument("--hint", type=int, default=1, choices=(1, 2, 3),
                        help="hint stage: 1 what went wrong and the kind of mistake (default), 2 adds a "
                             "nudge on the concept, 3 adds where to read with a worked example")
    parser.add_argument("--exercise", metavar="NN", choices=sorted(EXERCISES),
                        help="the exercise the files answer (default: from an EXERCISE = \"NN\" line, the "
                             "module docstring 'Exercise NN', or a two-digit number in the file name)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object for autograders instead: every case is run; per file "
                             "and per function, passed and total cases, a score, and the first failure "
                             "with its diagnosis")
    parser.add_argument("--weights", metavar="FILE", type=Path,
                        help="with --json: the weight of each exercise in the overall score, as NN=W "
                             "items (e.g. a line 04=2; # comments); an exercise not named weighs 1")
    parser.add_argument("--weight", metavar="NN=W", action="append", default=[],
                        help="with --json: one exercise's weight (repeatable; overrides --weights)")
    args = parser.parse_args(argv)
    if args.json:
        try:
            weights = read_weights(args.weights.read_text(encoding="utf-8") if args.weights else "")
            weights.update(read_weights(" ".join(args.weight)))
        except (ValueError, OSError) as error:
            parser.error(f"--weights/--weight: {error}")
        results = [json_result(path, args.exercise) for path in args.files]
        for r in results:
            r["weight"] = weights.get(r["exercise"], 1.0)
        passed, total = sum(r["passed"] for r in results), sum(r["total"] for r in results)
        weight = sum(r["weight"] for r in results)
        score = sum(r["weight"] * r["score"] for r in results) / weight if weight else 0.0
        print(json.dumps({"passed": passed, "total": total, "score": round(score, 4), "files": results},
                         indent=2))
        if any(r["status"] == "error" and (r["exercise"] is None or cannot_check(EXERCISES[r["exercise"]]))
               for r in results):
            return 2
        return 0 if all(r["status"] == "pass" for r in results) else 1
    status = 0
    for path in args.files:
        try:
            source = path.read_text(encoding="utf-8")
            exercise = exercise_of(path, source, args.exercise)
        except (ValueError, OSError) as error:
            print(f"racer-ref check: {error}", file=sys.stderr)
            return 2
        reason = cannot_check(exercise)
        if reason is not None:
            print(f"racer-ref check: {reason}", file=sys.stderr)
            return 2
        todo = pending(exercise, source)
        if len(todo) == len(exercise.names):  # nothing to check yet
            print(f"exercise {exercise.number} ({exercise.title}): not written yet: {_todo(todo)}")
            status = 1
            continue
        try:
            module = load(path)
        except (Exception, SystemExit, TooSlow):
            first, *rest = import_error(path).splitlines()
            print(f"FAIL: {first}")
            for line in rest:
                print("    " + line)
            status = 1
            continue
        if not run_exercise(module, exercise, level=args.hint, path=path, unwritten=todo):
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
