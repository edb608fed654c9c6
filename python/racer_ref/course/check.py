"""``racer-ref check exercises/NN_*.py``: check a student's exercise against the reference.

Each exercise in ``exercises/`` is one concept of the tutorials with the bodies left as
``...``. The checker loads the student's file, refuses it while a body is still ``...``,
then runs, in order, until the first divergence:

1. the **named cases** the Rust core and the Python twin pass in the test suite
   (``racer_ref.course.cases``: hand-checked, with their derivation in comments), then
2. **differential cases**: seeded random inputs on which the student's answer must equal
   the Rust core's (or, for the verification loop, ``racer_ref.verify``'s).

The first diverging case is printed with its inputs, what was expected, and a hint; the
exit status is 0 when every case passes, 1 otherwise (2 for a file it cannot check)::

    $ racer-ref check my_06_logits_tree.py     # root children halved once too often
    exercise 06 (the logits tree of Eq. 3): 11 named cases, 300 random cases
    FAIL breadth_eq3: child_breadth(2, 0, parent_is_root=True) = 1, expected 2
    hint: max(1, floor(b / 2 ** (j + [parent is not root]))): b >> shift.

The cases run in-process on the student's module; nothing is written anywhere.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import random
import re
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

Path_ = Tuple[int, ...]
CaseIter = Iterator[Tuple[str, Callable[[], None]]]


class Mismatch(Exception):
    """A case where the student's answer differs from the reference's."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def expect(got: Any, want: Any, what: str, hint: str = "") -> None:
    """Raise ``Mismatch`` unless ``got == want``."""
    if got != want:
        raise Mismatch(f"{what} = {got!r}, expected {want!r}", hint)


@dataclass(frozen=True)
class Exercise:
    number: str
    title: str
    #: names the student's module must define
    names: Tuple[str, ...]
    #: (named cases, random cases): each yields (case name, thunk)
    named: Callable[[ModuleType], CaseIter]
    random: Callable[[ModuleType], CaseIter]
    #: hint printed when a case raises instead of answering
    hint: str


# ======================================================================================
# The automaton: helpers shared by exercises 01-03.
# ======================================================================================


def _core_automaton(max_nodes: int, ngram: int, min_border_depth: int = 2):
    from racer_ref._core import Automaton

    return Automaton(max_nodes, ngram, min_border_depth)


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


# --------------------------------------------------------------------------------------
# 01. Trie insert with frequencies.
# --------------------------------------------------------------------------------------

HINT_01 = ("for each new token, walk the windows from the longest (ngram - 1) down to 0: "
           "child = windows[i].children[token] (create it with freq 0 if missing, and count "
           "it in self.nodes), add 1 to child.freq, and make it the new windows[i + 1]; "
           "windows[0] stays the root. Update self.windows only after the loop.")


def _compare_trie(trie, core, where: str) -> None:
    states = _states(core)
    expect(len(trie), len(states), f"{where}: len(trie)",
           "every substring of length <= ngram is one node (root excluded); "
           "count a node once, when you create it.")
    for path, (freq, _, _) in states.items():
        expect(trie.freq(path), freq, f"{where}: trie.freq({path})", HINT_01)


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
            for k, step in enumerate(case.steps):
                trie.extend(list(step.tokens))
                core.extend(list(step.tokens))
                where = f"step {k} (tokens {list(step.tokens)}, ngram {case.ngram})"
                if step.nodes is not None:
                    expect(len(trie), step.nodes, f"{where}: len(trie)")
                for path, freq in step.freqs.items():
                    expect(trie.freq(path), freq, f"{where}: trie.freq({path})", HINT_01)
                _compare_trie(trie, core, where)

        yield case.name, run


def _random_01(mod: ModuleType) -> CaseIter:
    for seed in range(40):
        def run(seed=seed) -> None:
            rnd = random.Random(seed)
            ngram, alphabet = rnd.randint(2, 6), rnd.randint(1, 6)
            trie, core = mod.Trie(ngram), _core_automaton(10**6, ngram)
            committed: List[int] = []
            for _ in range(rnd.randint(1, 6)):
                chunk = _phrase_stream(rnd, alphabet, rnd.randint(0, 12))
                trie.extend(chunk)
                core.extend(chunk)
                committed += chunk
                _compare_trie(trie, core, f"ngram {ngram}, after committing {committed}")
            absent = tuple(committed[-1:]) + (alphabet + 7,)
            expect(trie.freq(absent), 0, f"trie.freq({absent}) (never committed)")

        yield f"random{seed:03d}", run


# --------------------------------------------------------------------------------------
# 02. Failure links (eager build).
# --------------------------------------------------------------------------------------

HINT_02 = ("fail(s) is the state of the longest proper suffix of s that is in the trie. "
           "Go breadth-first (shallow states first): fail of a depth-1 state is (); for "
           "s = p + (t,), walk q = fail(p), fail(q), ... until q + (t,) is present (that is "
           "fail(s)) or q is () and () + (t,) is absent (then fail(s) = ()).")


def _compare_links(links: Dict[Path_, Path_], states, named: Dict[Path_, Path_], where: str) -> None:
    if not isinstance(links, dict):
        raise Mismatch(f"{where}: failure_links returned {type(links).__name__}, expected a dict")
    for path, link in named.items():
        expect(links.get(path), link, f"{where}: fail({path})", HINT_02)
    expect(sorted(links), sorted(states), f"{where}: the keys of the result (one per state)")
    for path, (_, link, _) in states.items():
        expect(links[path], link, f"{where}: fail({path})", HINT_02)


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

        yield case.name, run


def _random_02(mod: ModuleType) -> CaseIter:
    for seed in range(60):
        def run(seed=seed) -> None:
            rnd = random.Random(seed)
            ngram = rnd.randint(2, 5)
            core = _core_automaton(rnd.randint(ngram, 40), ngram)
            core.extend(_phrase_stream(rnd, rnd.randint(1, 5), rnd.randint(1, 50)))
            states = _states(core)
            _compare_links(mod.failure_links(set(states)), states, {}, f"trie {sorted(states)}")

        yield f"random{seed:03d}", run


# --------------------------------------------------------------------------------------
# 03. Lazy failure links.
# --------------------------------------------------------------------------------------

HINT_03 = ("changed(token) must bump epochs[token % EPOCH_SLOTS]; fail(node) returns "
           "node.fail while node.fail_stamp equals the epoch of node.token, else recomputes "
           "(depth 1: the root; deeper: walk fail(parent), fail(fail(parent)), ... for a "
           "child node.token) and stores the link with the current epoch as its stamp.")


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

        def link(path: Path_) -> Optional[Path_]:
            got = self.trie.fail(self.nodes[path])
            return inverse.get(id(got), f"a node that is not in the trie: {got!r}")  # type: ignore[return-value]

        for path, want in named.items():
            expect(link(path), want, f"{where}: fail({path})", HINT_03)
        for path in sorted(states, key=len):
            expect(link(path), states[path][1], f"{where}: fail({path})", HINT_03)
        # No change since: every link again, now from the cache.
        before = _CountingDict.lookups
        for path in states:
            self.trie.fail(self.nodes[path])
        expect(_CountingDict.lookups - before, 0,
               f"{where}: children lookups while asking every link a second time with no change",
               "a link whose stamp equals the current epoch of its token must come from the "
               "cache (node.fail) without looking at any children.")


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

        yield case.name, run


def _random_03(mod: ModuleType) -> CaseIter:
    for seed in range(40):
        def run(seed=seed) -> None:
            rnd = random.Random(seed)
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

        yield f"random{seed:03d}", run


# ======================================================================================
# 04. The O(1) LRU list.
# ======================================================================================

HINT_04 = ("keep newer[slot] / older[slot] links plus head and tail; touch unlinks the slot "
           "if present (patch its neighbours, or head/tail) and relinks it at the head; "
           "remove unlinks it; a slot is on the list iff it is the head or has a newer "
           "neighbour (or keep a flag).")


def _check_lru(lru, model: List[int], where: str) -> None:
    expect(list(lru.order()), model, f"{where}: order() (most recent first)", HINT_04)
    expect(len(lru), len(model), f"{where}: len()", HINT_04)
    expect(lru.most_recent(), model[0] if model else None, f"{where}: most_recent()", HINT_04)
    expect(lru.least_recent(), model[-1] if model else None, f"{where}: least_recent()", HINT_04)


def _apply_lru(lru, model: List[int], op: str, slot: int) -> None:
    if op == "touch":
        lru.touch(slot)
        if slot in model:
            model.remove(slot)
        model.insert(0, slot)
    else:
        lru.remove(slot)
        if slot in model:
            model.remove(slot)


def _named_04(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import LRU_CASES

    for case in LRU_CASES:
        def run(case=case) -> None:
            lru, model = mod.LruList(case.capacity), []
            for k, (op, slot) in enumerate(case.ops):
                _apply_lru(lru, model, op, slot)
                _check_lru(lru, model, f"after {list(case.ops[: k + 1])}")
            expect(list(lru.order()), list(case.order), "order() at the end", HINT_04)
            for slot in range(case.capacity):
                expect(slot in lru, slot in case.order, f"{slot} in lru", HINT_04)

        yield case.name, run


def _random_04(mod: ModuleType) -> CaseIter:
    for seed in range(40):
        def run(seed=seed) -> None:
            rnd = random.Random(seed)
            capacity = rnd.randint(1, 12)
            lru, model, ops = mod.LruList(capacity), [], []
            for _ in range(200):
                op = "touch" if rnd.random() < 0.65 else "remove"
                slot = rnd.randrange(capacity)
                ops.append((op, slot))
                _apply_lru(lru, model, op, slot)
                _check_lru(lru, model, f"capacity {capacity}, after ...{ops[-8:]}")
                probe = rnd.randrange(capacity)
                expect(probe in lru, probe in model, f"capacity {capacity}, after ...{ops[-8:]}: {probe} in lru")

        yield f"random{seed:03d}", run

    def scale() -> None:
        # 300,000 operations on 100,000 slots: about a second when each is O(1).
        capacity = 100_000
        lru, rnd = mod.LruList(capacity), random.Random(0)
        start = time.perf_counter()
        for i in range(300_000):
            lru.touch(rnd.randrange(capacity)) if i % 3 else lru.remove(rnd.randrange(capacity))
        seconds = time.perf_counter() - start
        print(f"  (scale: 300,000 operations on 100,000 slots took {seconds:.2f} s)")

    yield "scale100k", scale


# ======================================================================================
# 05. The copy-logit table.
# ======================================================================================

HINT_05 = ("allocate ids = zeros((vocab_size, k)) and seen = zeros(vocab_size, bool); observe "
           "writes ids[v] = topk_ids[i][:k] and seen[v] = True in order (so the last "
           "occurrence wins); row(v) is [] while not seen[v].")


def _named_05(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import TABLE_CASES

    for case in TABLE_CASES:
        def run(case=case) -> None:
            table = mod.CopyLogitTable(case.vocab_size, case.k)
            for token_ids, topk_ids in case.observes:
                table.observe(list(token_ids), [list(r) for r in topk_ids])
            for token, want in case.rows.items():
                expect(list(table.row(token)), want,
                       f"after observe{list(case.observes)}: row({token})", HINT_05)

        yield case.name, run


def _random_05(mod: ModuleType) -> CaseIter:
    import numpy as np

    from racer_ref._core import CopyLogitTable

    for seed in range(60):
        def run(seed=seed) -> None:
            rnd = random.Random(seed)
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
                    expect(list(table.row(v)), core.row(v),
                           f"vocab_size {vocab}, k {k}, after observe calls {calls}: row({v})", HINT_05)

        yield f"random{seed:03d}", run


# ======================================================================================
# 06-08. Logits tree, merged draft tree, tree attention mask.
# ======================================================================================

HINT_06 = ("expand breadth-first from a queue of (node, breadth), the root with breadth k; "
           "node v's children are rows[v][:b] in rank order, child j with breadth "
           "max(1, b >> (j + [parent is not root])); stop as soon as the tree holds capacity "
           "nodes; a (parent, token) already present is neither added nor expanded again.")
HINT_07 = ("insert the retrieval paths first (walk existing children, create the missing "
           "ones with source 1); then run the logits tree of exercise 06 over that tree: an "
           "existing child costs nothing, gets source |= 2, and is expanded only if it did "
           "not have the logits bit yet; finally flatten breadth-first, each node's children "
           "in insertion order.")
HINT_08 = ("parents come before children: row i of the mask is row parents[i] plus i itself; "
           "depth(i) = depth(parents[i]) + 1; a leaf is a node that is nobody's parent, and "
           "its row walks up from the leaf to the root, written from column depth down to 0.")


def _core_tree(root: int, capacity: int, paths, rows: Optional[Dict[int, List[int]]], vocab: int, k: int,
               root_topk=None):
    """The Rust core's flattened draft tree (a ``DraftTree``)."""
    import numpy as np

    from racer_ref._core import CopyLogitTable, build_draft_tree
    from racer_ref.reference.draft_tree import DraftTree

    table = None
    if rows is not None:
        table = CopyLogitTable(vocab, k)
        if rows:
            table.observe(list(rows), [rows[t] for t in rows])
    topk = None if root_topk is None else np.array(root_topk)
    return DraftTree(*build_draft_tree(root, capacity, [list(p) for p in paths], table, topk))


def _random_rows(rnd: random.Random, vocab: int, k: int) -> Dict[int, List[int]]:
    return {rnd.randrange(vocab): [rnd.randrange(vocab) for _ in range(k)]
            for _ in range(rnd.randint(0, vocab + 1))}


def _as_lists(result: Any, count: int, what: str) -> List[List[int]]:
    if not isinstance(result, (tuple, list)) or len(result) != count:
        raise Mismatch(f"{what} returned {result!r}, expected a tuple of {count} lists")
    return [[int(v) for v in part] for part in result]


def _named_06(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import LOGITS_TREE_CASES
    from racer_ref.reference.logits_tree import child_breadth

    def breadth() -> None:
        for b in range(1, 17):
            for j in range(10):
                for is_root in (True, False):
                    expect(mod.child_breadth(b, j, is_root), child_breadth(b, j, is_root),
                           f"child_breadth({b}, {j}, parent_is_root={is_root})",
                           "max(1, floor(b / 2 ** (j + [parent is not root]))): b >> shift.")

    yield "breadth_eq3", breadth
    for case in LOGITS_TREE_CASES:
        if case.root_topk is not None:
            continue  # last-logit mode is not part of the exercise

        def run(case=case) -> None:
            what = f"logits_tree(root={case.root}, capacity={case.capacity}, rows={case.rows}, k={case.k})"
            if len(case.rows) > 12:
                what = f"logits_tree(root=0, capacity={case.capacity}, k={case.k}, all tokens distinct)"
            tokens, parents = _as_lists(mod.logits_tree(case.root, case.capacity, case.rows, case.k), 2, what)
            if "per_depth" in case.expect:
                depths = [0] * len(parents)
                for i in range(1, len(parents)):
                    depths[i] = depths[parents[i]] + 1
                per_depth = [depths.count(d) for d in range(max(depths) + 1)]
                expect(per_depth, case.expect["per_depth"], f"{what}: nodes per depth", HINT_06)
            for name, got in (("tokens", tokens), ("parents", parents)):
                if name in case.expect:
                    expect(got, case.expect[name], f"{what}: {name}", HINT_06)
            core = _core_tree(case.root, case.capacity, (), case.rows, case.vocab_size, case.k)
            expect((tokens, parents), (core.tokens.tolist(), core.parents.tolist()),
                   f"{what}: (tokens, parents)", HINT_06)

        yield case.name, run


def _random_06(mod: ModuleType) -> CaseIter:
    for seed in range(300):
        def run(seed=seed) -> None:
            rnd = random.Random(seed)
            vocab = rnd.randint(1, 10)
            k = rnd.randint(1, min(vocab, 4))
            rows = _random_rows(rnd, vocab, k)
            root, capacity = rnd.randrange(vocab), rnd.randint(1, 40)
            what = f"logits_tree(root={root}, capacity={capacity}, rows={rows}, k={k})"
            got = _as_lists(mod.logits_tree(root, capacity, rows, k), 2, what)
            core = _core_tree(root, capacity, (), rows, vocab, k)
            expect(tuple(got), (core.tokens.tolist(), core.parents.tolist()), f"{what}: (tokens, parents)", HINT_06)

        yield f"random{seed:03d}", run


def _draft_case(mod: ModuleType, root, capacity, paths, rows, vocab, k, want: Dict[str, list]) -> None:
    rows = rows or {}
    what = f"draft_tree(root={root}, capacity={capacity}, retrieval_paths={[list(p) for p in paths]}, rows={rows}, k={k})"
    tokens, parents, sources = _as_lists(mod.draft_tree(root, capacity, [list(p) for p in paths], rows, k), 3, what)
    for name, got in (("tokens", tokens), ("parents", parents), ("sources", sources)):
        if name in want:
            expect(got, want[name], f"{what}: {name}", HINT_07)
    core = _core_tree(root, capacity, paths, rows or None, vocab, k)
    expect((tokens, parents, sources), (core.tokens.tolist(), core.parents.tolist(), core.sources.tolist()),
           f"{what}: (tokens, parents, sources)", HINT_07)


def _named_07(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import DRAFT_TREE_CASES, LOGITS_TREE_CASES

    for case in DRAFT_TREE_CASES + [c for c in LOGITS_TREE_CASES if c.root_topk is None and len(c.rows) <= 12]:
        yield case.name, lambda case=case: _draft_case(
            mod, case.root, case.capacity, case.paths, case.rows, case.vocab_size, case.k, case.expect)


def _random_07(mod: ModuleType) -> CaseIter:
    for seed in range(300):
        def run(seed=seed) -> None:
            rnd = random.Random(seed)
            vocab = rnd.randint(2, 10)
            k = rnd.randint(1, min(vocab, 4))
            root, capacity = rnd.randrange(vocab), rnd.randint(1, 24)
            paths = [[root] + [rnd.randrange(vocab) for _ in range(rnd.randint(0, 4))]
                     for _ in range(rnd.randint(0, 4))]
            _draft_case(mod, root, capacity, paths, _random_rows(rnd, vocab, k), vocab, k, {})

        yield f"random{seed:03d}", run


def _mask_case(mod: ModuleType, tree, past_length: int) -> None:
    parents = tree.parents.tolist()
    what = f"parents {parents}"
    mask = [[bool(v) for v in row] for row in mod.tree_attention_mask(parents)]
    expect(mask, tree.attention_mask.tolist(), f"tree_attention_mask({what})", HINT_08)
    expect([int(v) for v in mod.position_ids(parents, past_length)], (past_length + tree.depths).tolist(),
           f"position_ids({what}, past_length={past_length})", HINT_08)
    expect([[int(v) for v in row] for row in mod.retrieve_indices(parents)], tree.retrieve_indices.tolist(),
           f"retrieve_indices({what})", HINT_08)


def _named_08(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import DRAFT_TREE_CASES, LOGITS_TREE_CASES

    for case in DRAFT_TREE_CASES + LOGITS_TREE_CASES:
        tree = _core_tree(case.root, case.capacity, case.paths, case.rows, case.vocab_size, case.k, case.root_topk)
        for name in ("attention_mask", "retrieve_indices"):
            if name in case.expect:  # the hand-checked arrays, not just the core's
                assert getattr(tree, name).tolist() == case.expect[name], case.name
        yield case.name, lambda tree=tree: _mask_case(mod, tree, 5)


def _random_08(mod: ModuleType) -> CaseIter:
    for seed in range(200):
        def run(seed=seed) -> None:
            rnd = random.Random(seed)
            vocab = rnd.randint(2, 10)
            k = rnd.randint(1, min(vocab, 4))
            root = rnd.randrange(vocab)
            paths = [[root] + [rnd.randrange(vocab) for _ in range(rnd.randint(0, 4))] for _ in range(rnd.randint(0, 3))]
            tree = _core_tree(root, rnd.randint(1, 24), paths, _random_rows(rnd, vocab, k), vocab, k)
            _mask_case(mod, tree, rnd.randint(0, 100))

        yield f"random{seed:03d}", run


# ======================================================================================
# 09. Greedy acceptance; 10. KV compaction (against racer_ref.verify).
# ======================================================================================

HINT_09 = ("start at node 0 with accepted = [0]; at node u look for a child c (parents[c] == u) "
           "with tokens[c] == predicted[u]; if there is one, append it and continue from it; "
           "otherwise return (accepted, predicted[u]).")
HINT_10 = ("the result is torch.cat([keys[:, :, :L], keys[:, :, [L + u for u in accepted]]], "
           "dim=2): the prefix unchanged, then the accepted nodes' slots in path order.")


def _accept_case(mod: ModuleType, predicted, tokens, parents) -> None:
    import torch

    from racer_ref.verify import accept_greedy

    tree = _tree_from_parents(tokens, parents)
    logits = torch.zeros(len(predicted), max(list(predicted) + list(tokens)) + 1)
    logits[torch.arange(len(predicted)), torch.tensor(list(predicted))] = 1.0
    want = accept_greedy(logits, tree)
    what = f"accept_greedy(predicted={list(predicted)}, tokens={list(tokens)}, parents={list(parents)})"
    got = mod.accept_greedy(list(predicted), list(tokens), list(parents))
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Mismatch(f"{what} returned {got!r}, expected (accepted, next_root)")
    expect(([int(u) for u in got[0]], int(got[1])), (want[0], want[1]), what, HINT_09)


def _tree_from_parents(tokens, parents):
    import numpy as np

    from racer_ref.reference.draft_tree import DraftTree

    n = len(parents)
    depths = [0] * n
    mask = np.eye(n, dtype=bool)
    for i in range(1, n):
        depths[i] = depths[parents[i]] + 1
        mask[i] |= mask[parents[i]]
    return DraftTree(np.array(tokens, dtype=np.int64), np.array(parents, dtype=np.int64),
                     np.array(depths, dtype=np.int64), mask, np.zeros((0, 0), dtype=np.int64),
                     np.zeros(n, dtype=np.uint8))


def _named_09(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import ACCEPT_CASES

    for case in ACCEPT_CASES:
        def run(case=case) -> None:
            what = f"accept_greedy(predicted={list(case.predicted)}, tokens={list(case.tokens)}, parents={list(case.parents)})"
            got = mod.accept_greedy(list(case.predicted), list(case.tokens), list(case.parents))
            if not isinstance(got, (tuple, list)) or len(got) != 2:
                raise Mismatch(f"{what} returned {got!r}, expected (accepted, next_root)")
            expect(([int(u) for u in got[0]], int(got[1])), (list(case.accepted), case.next_root), what, HINT_09)
            _accept_case(mod, case.predicted, case.tokens, case.parents)

        yield case.name, run


def _random_09(mod: ModuleType) -> CaseIter:
    for seed in range(200):
        def run(seed=seed) -> None:
            rnd = random.Random(seed)
            vocab = rnd.randint(2, 6)
            k = rnd.randint(1, min(vocab, 3))
            tree = _core_tree(rnd.randrange(vocab), rnd.randint(1, 20), (), _random_rows(rnd, vocab, k), vocab, k)
            tokens = tree.tokens.tolist()
            # Mostly predict a child's token, so that paths get accepted.
            predicted = [rnd.choice([tokens[c] for c in range(len(tokens)) if tree.parents[c] == u] or [vocab])
                         if rnd.random() < 0.8 else rnd.randrange(vocab + 1) for u in range(len(tokens))]
            _accept_case(mod, predicted, tokens, tree.parents.tolist())

        yield f"random{seed:03d}", run


def _compact_case(mod: ModuleType, past_length: int, tree_size: int, accepted: Sequence[int],
                  slots: Optional[Sequence[int]]) -> None:
    import torch
    from types import SimpleNamespace

    from racer_ref.verify import keep_accepted

    total = past_length + tree_size
    # Entry s of every (batch, head) holds the value s in every dimension, so a wrong slot shows.
    keys = torch.arange(total, dtype=torch.float32)[None, None, :, None].expand(1, 2, total, 3).clone()
    keys = keys + torch.tensor([0.0, 1000.0])[None, :, None, None]
    what = f"keep_accepted(keys of {total} slots, past_length={past_length}, accepted={list(accepted)})"
    got = mod.keep_accepted(keys.clone(), past_length, list(accepted))
    if not isinstance(got, torch.Tensor):
        raise Mismatch(f"{what} returned {type(got).__name__}, expected a tensor")
    want_len = past_length + len(accepted)
    expect(tuple(got.shape), (1, 2, want_len, 3), f"{what}: shape", HINT_10)
    layer = SimpleNamespace(keys=keys.clone(), values=keys.clone())
    keep_accepted(SimpleNamespace(layers=[layer]), past_length, list(accepted))
    if slots is not None:
        expect(layer.keys[0, 0, :, 0].long().tolist(), list(slots), f"{what}: reference slots")
    expect(got[0, 0, :, 0].long().tolist(), layer.keys[0, 0, :, 0].long().tolist(),
           f"{what}: the slots kept (head 0)", HINT_10)
    if not torch.equal(got, layer.keys):
        raise Mismatch(f"{what}: the values differ from racer_ref.verify.keep_accepted's in another head",
                       HINT_10)


def _named_10(mod: ModuleType) -> CaseIter:
    from racer_ref.course.cases.trees import COMPACT_CASES

    for case in COMPACT_CASES:
        yield case.name, lambda case=case: _compact_case(mod, case.past_length, case.tree_size,
                                                        case.accepted, case.slots)


def _random_10(mod: ModuleType) -> CaseIter:
    for seed in range(100):
        def run(seed=seed) -> None:
            rnd = random.Random(seed)
            vocab = rnd.randint(2, 6)
            tree = _core_tree(rnd.randrange(vocab), rnd.randint(1, 20), (), _random_rows(rnd, vocab, 2 if vocab > 1 else 1), vocab, min(2, vocab))
            # A random root-to-node path of the tree.
            node, path = rnd.randrange(len(tree)), []
            while node >= 0:
                path.append(node)
                node = int(tree.parents[node])
            _compact_case(mod, rnd.randint(0, 9), len(tree), path[::-1], None)

        yield f"random{seed:03d}", run


EXERCISES: Dict[str, Exercise] = {
    e.number: e
    for e in [
        Exercise("01", "trie insert with frequencies", ("Trie",), _named_01, _random_01,
                 "Trie.extend must commit every token (see the module docstring)."),
        Exercise("02", "failure links (eager build)", ("failure_links",), _named_02, _random_02, HINT_02),
        Exercise("03", "lazy failure links", ("LazyTrie",), _named_03, _random_03, HINT_03),
        Exercise("04", "the O(1) LRU list", ("LruList",), _named_04, _random_04, HINT_04),
        Exercise("05", "the copy-logit table", ("CopyLogitTable",), _named_05, _random_05, HINT_05),
        Exercise("06", "the logits tree of Eq. 3", ("child_breadth", "logits_tree"), _named_06, _random_06, HINT_06),
        Exercise("07", "the merged draft tree", ("draft_tree",), _named_07, _random_07, HINT_07),
        Exercise("08", "tree attention mask, position ids, retrieve_indices",
                 ("tree_attention_mask", "position_ids", "retrieve_indices"), _named_08, _random_08, HINT_08),
        Exercise("09", "greedy acceptance", ("accept_greedy",), _named_09, _random_09, HINT_09),
        Exercise("10", "KV compaction", ("keep_accepted",), _named_10, _random_10, HINT_10),
    ]
}


# ======================================================================================
# The runner.
# ======================================================================================


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


def load(path: Path) -> ModuleType:
    """Import the student's file as a fresh module (not added to ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(f"racer_ref_exercise_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def exercise_of(path: Path) -> Exercise:
    match = re.match(r"(\d\d)_", path.name)
    if not match or match.group(1) not in EXERCISES:
        known = ", ".join(f"{n} ({e.title})" for n, e in EXERCISES.items())
        raise ValueError(f"path: expected a file named NN_*.py with NN one of {known}; got {path.name}")
    return EXERCISES[match.group(1)]


def run_exercise(module: ModuleType, exercise: Exercise, out: Any = None) -> bool:
    """Run the named, then the random cases; print the first divergence. True if all pass."""
    out = sys.stdout if out is None else out
    missing = [n for n in exercise.names if not hasattr(module, n)]
    if missing:
        print(f"FAIL: the file does not define {', '.join(missing)}", file=out)
        return False
    named, randoms = list(exercise.named(module)), list(exercise.random(module))
    print(f"exercise {exercise.number} ({exercise.title}): {len(named)} named cases, "
          f"{len(randoms)} random cases", file=out)
    for kind, cases in (("named", named), ("random", randoms)):
        for name, thunk in cases:
            try:
                thunk()
            except Mismatch as mismatch:
                print(f"FAIL {name}: {mismatch}", file=out)
                print(f"hint: {mismatch.hint or exercise.hint}", file=out)
                return False
            except Exception:  # the student's code raised: show where, in their file
                tb = traceback.format_exc().rstrip().splitlines()
                print(f"FAIL {name}: your code raised an exception:", file=out)
                print("\n".join("    " + line for line in tb[-6:]), file=out)
                print(f"hint: {exercise.hint}", file=out)
                return False
        print(f"  {kind} cases: all {len(cases)} pass", file=out)
    print(f"PASS: exercise {exercise.number} agrees with the reference on every case.", file=out)
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``racer-ref check FILE...``: 0 if every file passes, 1 if one fails, 2 on bad usage."""
    parser = argparse.ArgumentParser(
        prog="racer-ref check",
        description="Check an exercise (exercises/NN_*.py) against the cases the Rust core and "
                    "the Python twin pass; print the first diverging case with a hint.")
    parser.add_argument("files", nargs="+", type=Path, help="exercise files, e.g. exercises/06_logits_tree.py")
    args = parser.parse_args(argv)
    status = 0
    for path in args.files:
        try:
            exercise = exercise_of(path)
            source = path.read_text(encoding="utf-8")
        except (ValueError, OSError) as error:
            print(f"racer-ref check: {error}", file=sys.stderr)
            return 2
        todo = unwritten(source)
        if todo:
            print(f"exercise {exercise.number} ({exercise.title}): not written yet: "
                  f"{', '.join(todo)} (a body is still `...`)")
            status = 1
            continue
        try:
            module = load(path)
        except Exception:
            print(f"FAIL: {path} does not import:")
            print("\n".join("    " + line for line in traceback.format_exc().rstrip().splitlines()[-6:]))
            status = 1
            continue
        if not run_exercise(module, exercise):
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
