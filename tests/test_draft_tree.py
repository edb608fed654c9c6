"""Merged draft tree (docs/explanation/spec.md steps 2-4): hand-written trees, properties over 10^5
random cases, Rust == Python, and bad input."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from racer_ref import _core
from racer_ref.course.cases.trees import DRAFT_TREE_CASES
from racer_ref.reference import draft_tree as ref_tree
from racer_ref.reference.copy_logit import CopyLogitTable as PyTable
from racer_ref.tree import (
    SOURCE_BOTH,
    SOURCE_LOGITS,
    SOURCE_RETRIEVAL,
    SOURCE_ROOT,
    DraftTree,
)
from racer_ref.reference.logits_tree import child_breadth

BACKENDS = ("rust", "python")
FIELDS = ("tokens", "parents", "depths", "attention_mask", "retrieve_indices", "sources")
R, L, B = SOURCE_RETRIEVAL, SOURCE_LOGITS, SOURCE_BOTH


def make_table(backend, vocab_size, k, rows):
    table = (_core.CopyLogitTable if backend == "rust" else PyTable)(vocab_size, k)
    if rows:
        table.observe(list(rows), [rows[t] for t in rows])
    return table


def build(backend, root, capacity, paths=(), table=None, root_topk=None) -> DraftTree:
    if backend == "rust":
        return DraftTree(*_core.build_draft_tree(root, capacity, paths, table, root_topk))
    return ref_tree.build_draft_tree(root, capacity, paths, table, root_topk)


def node_paths(tree: DraftTree) -> list[tuple[int, ...]]:
    """Each node as its root-to-node token path."""
    out: list[tuple[int, ...]] = []
    for i in range(len(tree)):
        p = int(tree.parents[i])
        out.append((out[p] if p >= 0 else ()) + (int(tree.tokens[i]),))
    return out


# --------------------------------------------------------------------------------------
# Hand-written trees
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", DRAFT_TREE_CASES, ids=[c.name for c in DRAFT_TREE_CASES])
def test_named_case(backend, case):
    """The hand-checked trees of racer_ref/course/cases/trees.py (also run by ``racer-ref check``)."""
    table = None if case.rows is None else make_table(backend, case.vocab_size, case.k, case.rows)
    tree = build(backend, case.root, case.capacity, [list(p) for p in case.paths], table)
    tree.validate(None if case.rows is None else case.vocab_size)
    for name, want in case.expect.items():
        assert getattr(tree, name).tolist() == want, f"{case.name}: {name}"


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------

BAD_BUILD = [
    # (root, capacity, paths, table rows or None, root_topk, exception, word)
    (0, 0, [], None, None, ValueError, "capacity"),
    (0, -1, [], None, None, ValueError, "capacity"),
    (0, 4097, [], None, None, ValueError, "capacity"),
    (0, 2.5, [], None, None, TypeError, "capacity: must be an int"),
    (1.5, 4, [], None, None, TypeError, "root: must be an int"),
    (-1, 4, [], None, None, ValueError, "root"),
    (10, 4, [], {}, None, ValueError, "root"),
    (0, 4, [[1, 2]], None, None, ValueError, "start with the root"),
    (0, 4, [[]], None, None, ValueError, "empty path"),
    (0, 4, [[0, 10]], {}, None, ValueError, "retrieval_paths"),
    (0, 4, [[0, -2]], None, None, ValueError, "retrieval_paths"),
    (0, 4, [], {}, [1], ValueError, "root_topk"),
    (0, 4, [], {}, [1, 10], ValueError, "root_topk"),
    # regressions: bool is not an int, 2-D top-k ids are not flattened, tables are typed
    (True, 4, [], None, None, TypeError, "root: must be an int, got bool"),
    (0, True, [], None, None, TypeError, "capacity: must be an int, got bool"),
    (0, 4, [[0, True]], None, None, TypeError, "retrieval_paths: must be an int, got bool"),
    (0, 2**64, [], None, None, ValueError, "capacity: is out of range"),
    (0, 4, [], {}, [[1, 2]], ValueError, "root_topk: expected a 1-D array"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("root, capacity, paths, rows, topk, exc, word", BAD_BUILD)
def test_bad_build_input(backend, root, capacity, paths, rows, topk, exc, word):
    """(Includes the test_regress_ cases at the end of BAD_BUILD.)"""
    table = None if rows is None else make_table(backend, 10, 2, rows)
    with pytest.raises(exc, match=word):
        build(backend, root, capacity, paths, table, topk)


# --------------------------------------------------------------------------------------
# The validator itself must catch broken trees
# --------------------------------------------------------------------------------------


def _corruptions():
    def edit(field, fn):
        def apply(t):
            arrays = {f: getattr(t, f).copy() for f in FIELDS}
            fn(arrays[field])
            return DraftTree(**arrays)

        return apply

    def swap_rows(a):
        a[[0, 1]] = a[[1, 0]]

    return {
        "parent-after-child": edit("parents", lambda a: a.__setitem__(1, 3)),
        "bad-depth": edit("depths", lambda a: a.__setitem__(2, 5)),
        "mask-missing-ancestor": edit("attention_mask", lambda a: a.__setitem__((4, 1), False)),
        "mask-extra": edit("attention_mask", lambda a: a.__setitem__((2, 1), True)),
        "retrieve-wrong-path": edit("retrieve_indices", lambda a: a.__setitem__((2, 1), 2)),
        "retrieve-order": edit("retrieve_indices", swap_rows),
        "bad-source": edit("sources", lambda a: a.__setitem__(1, 0)),
        "duplicate-child": edit("tokens", lambda a: a.__setitem__(2, a[1])),
        "token-out-of-vocab": edit("tokens", lambda a: a.__setitem__(3, 10)),
        "wrong-dtype": lambda t: DraftTree(**{**{f: getattr(t, f) for f in FIELDS},
                                              "tokens": t.tokens.astype(np.int32)}),
    }


@pytest.mark.parametrize("name", sorted(_corruptions()))
def test_validate_catches(name):
    good = build("python", 0, 10, [[0, 1, 2], [0, 3]], make_table("python", 10, 2, {0: [1, 4], 1: [2, 5]}))
    good.validate(10)
    with pytest.raises(ValueError, match="invalid DraftTree"):
        _corruptions()[name](good).validate(10)


def test_pretty_shows_structure_and_sources():
    tree = build("python", 0, 10, [[0, 1, 2], [0, 3]], make_table("python", 10, 2, {0: [1, 4], 1: [2, 5]}))
    assert tree.pretty().splitlines() == [
        "0: 0 [root]",
        "|-- 1: 1 [both]",
        "|   |-- 4: 2 [both]",
        "|   `-- 5: 5 [logits]",
        "|-- 2: 3 [retrieval]",
        "`-- 3: 4 [logits]",
    ]


# --------------------------------------------------------------------------------------
# Properties over random cases
# --------------------------------------------------------------------------------------


def reachable_upto(root, paths, rows, k, limit, root_topk=None) -> set[tuple[int, ...]]:
    """An independent oracle: the union of the retrieval prefixes and the (possibly
    infinite) logits tree, enumerated until it holds ``limit`` nodes."""
    union = {(root,)}
    for p in paths:
        for d in range(2, len(p) + 1):
            union.add(tuple(p[:d]))
    queue, expanded = deque([((root,), k)]), {(root,)}
    while queue and len(union) < limit:
        path, b = queue.popleft()
        row = root_topk[:k] if (len(path) == 1 and root_topk is not None) else rows.get(path[-1], [])
        for j, t in enumerate(row[:b]):
            child = path + (t,)
            union.add(child)
            if child not in expanded:
                expanded.add(child)
                queue.append((child, child_breadth(b, j, len(path) == 1)))
    return union


def random_case(rng):
    vocab = int(rng.integers(1, 9))
    k = int(rng.integers(1, min(vocab, 4) + 1))
    rows = {int(v): rng.integers(0, vocab, k).tolist()
            for v in rng.integers(0, vocab, int(rng.integers(0, vocab + 1)))}
    root = int(rng.integers(0, vocab))
    paths = [[root] + rng.integers(0, vocab, int(rng.integers(0, 6))).tolist()
             for _ in range(int(rng.integers(0, 4)))]
    capacity = int(rng.integers(1, 25))
    topk = rng.integers(0, vocab, k).tolist() if rng.random() < 0.2 else None
    return vocab, k, rows, root, paths, capacity, topk


def check_properties(tree: DraftTree, vocab, k, rows, root, paths, capacity, topk):
    n = len(tree)
    tokens, parents, depths, sources = tree.tokens, tree.parents, tree.depths, tree.sources
    # never above capacity; exactly min(capacity, reachable unique nodes)
    union = reachable_upto(root, paths, rows, k, capacity, topk)
    assert n == min(capacity, len(union))
    # parents precede children, depths follow parents, root first
    assert parents[0] == -1 and depths[0] == 0 and tokens[0] == root and sources[0] == SOURCE_ROOT
    idx = np.arange(1, n)
    assert (parents[1:] < idx).all() and (parents[1:] >= 0).all()
    assert (depths[1:] == depths[parents[1:]] + 1).all()
    # mask row i is exactly i and its ancestors (built independently here)
    anc = np.eye(n, dtype=bool)
    for i in range(1, n):
        anc[i] |= anc[parents[i]]
    assert np.array_equal(tree.attention_mask, anc)
    # every retrieve_indices row is a root-to-leaf path, one per leaf
    is_leaf = np.ones(n, dtype=bool)
    is_leaf[parents[1:]] = False
    ri = tree.retrieve_indices
    assert ri.shape == (int(is_leaf.sum()), int(depths.max()) + 1)
    leaf_of_row = ri[np.arange(len(ri)), depths[is_leaf]]
    assert (leaf_of_row == np.flatnonzero(is_leaf)).all()
    for row in ri:
        valid = row[row >= 0]
        assert valid[0] == 0 and (parents[valid[1:]] == valid[:-1]).all()
        assert (row[len(valid):] == -1).all()
    # tokens in range, and every node is a unique path of the union
    assert ((tokens >= 0) & (tokens < vocab)).all()
    node_set = node_paths(tree)
    assert len(set(node_set)) == n and set(node_set) <= union
    # sources: retrieval bit iff the node lies on a retrieval path
    retrieval = {tuple(p[:d]) for p in paths for d in range(2, len(p) + 1)}
    for path, s in zip(node_set[1:], sources[1:].tolist()):
        assert s in (R, L, B)
        if not s & L:
            assert path in retrieval
        assert bool(s & R) == (path in retrieval)
    # retrieval comes first: if it fits, all of it is in the tree
    if len(retrieval) + 1 <= capacity:
        assert retrieval <= set(node_set)


def test_properties_100k_random_cases_rust():
    rng = np.random.default_rng(2026)
    tables: dict = {}
    for case in range(100_000):
        vocab, k, rows, root, paths, capacity, topk = random_case(rng)
        table = None
        if case % 5:  # one case in five has no table (retrieval only)
            table = make_table("rust", vocab, k, rows)
        else:
            rows, topk = {}, None
        tree = DraftTree(*_core.build_draft_tree(root, capacity, paths, table, topk))
        if case % 10 == 0:  # the full (slower) property check on a tenth...
            check_properties(tree, vocab, k, rows, root, paths, capacity, topk)
        else:  # ...the essential invariants on the rest
            n = len(tree)
            assert n <= capacity and tree.parents[0] == -1
            assert (tree.parents[1:] < np.arange(1, n)).all()
            assert (tree.depths[1:] == tree.depths[tree.parents[1:]] + 1).all()
            assert ((tree.tokens >= 0) & (tree.tokens < vocab)).all()
            assert n == min(capacity, len(reachable_upto(root, paths, rows, k, capacity, topk)))
    del tables


def test_rust_equals_python_random_cases():
    rng = np.random.default_rng(7)
    for case in range(20_000):
        vocab, k, rows, root, paths, capacity, topk = random_case(rng)
        trees = []
        for backend in BACKENDS:
            table = make_table(backend, vocab, k, rows) if case % 4 else None
            trees.append(build(backend, root, capacity, paths, table, topk))
        for name in FIELDS:
            a, b = getattr(trees[0], name), getattr(trees[1], name)
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert np.array_equal(a, b), name
        if case % 50 == 0:
            trees[1].validate(vocab)
            check_properties(trees[1], vocab, k, rows if case % 4 else {}, root, paths, capacity,
                             topk if case % 4 else None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_regress_none_paths_and_a_wrong_table_type(backend):
    # retrieval_paths=None means "no paths" on both backends, as in the stub
    tree = build(backend, 3, 4, None, None, None)
    assert tree.tokens.tolist() == [3]
    with pytest.raises(TypeError, match="CopyLogitTable"):
        build(backend, 3, 4, [], 5, None)


def test_subtree_of_a_prefix_closed_set():
    #   0:5 -- 1:6 -- 3:8           keep {0, 2, 4}:   0:5 -- 1:7 -- 2:9
    #     `--- 2:7 -- 4:9
    tree = build("python", 5, 8, [[5, 6, 8], [5, 7, 9]])
    sub = tree.subtree([4, 0, 2, 2])
    sub.validate()
    assert sub.tokens.tolist() == [5, 7, 9] and sub.parents.tolist() == [-1, 0, 1]
    assert sub.retrieve_indices.tolist() == [[0, 1, 2]]
    assert sub.sources.tolist() == tree.sources[[0, 2, 4]].tolist()
    same = tree.subtree(range(len(tree)))
    assert all(np.array_equal(getattr(same, f), getattr(tree, f)) for f in FIELDS)
    # The loop's unchecked path (sorted nodes it built itself) gives the same tree.
    trusted = tree.subtree_trusted(np.array([0, 2, 4]))
    assert all(np.array_equal(getattr(trusted, f), getattr(sub, f)) for f in FIELDS)
    for keep, word in [([], "root"), ([1, 3], "root"), ([0, 3], "parent"), ([0, 9], "not in a tree")]:
        with pytest.raises(ValueError, match=word):
            tree.subtree(keep)
