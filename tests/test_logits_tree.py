"""Logits tree (docs/explanation/spec.md step 3, paper Eq. 3) on both backends."""

from __future__ import annotations

import numpy as np
import pytest

from racer_ref import _core
from racer_ref.course.cases.trees import LOGITS_TREE_CASES
from racer_ref.reference import draft_tree as ref_tree
from racer_ref.reference.copy_logit import CopyLogitTable as PyTable
from racer_ref.tree import SOURCE_LOGITS, DraftTree
from racer_ref.reference.logits_tree import child_breadth

BACKENDS = ("rust", "python")


def make_table(backend: str, vocab_size: int, k: int, rows: dict[int, list[int]]):
    """A copy-logit table of one backend with the given rows written."""
    table = (_core.CopyLogitTable if backend == "rust" else PyTable)(vocab_size, k)
    if rows:
        tokens = list(rows)
        table.observe(tokens, [rows[t] for t in tokens])
    return table


def logits_tree(backend: str, root: int, capacity: int, table, root_topk=None) -> DraftTree:
    """The logits tree alone: no retrieval paths."""
    if backend == "rust":
        return DraftTree(*_core.build_draft_tree(root, capacity, [], table, root_topk))
    return ref_tree.build_draft_tree(root, capacity, [], table, root_topk)


def test_breadth_rule_eq3():
    # The root's children are halved once less than an inner node's.
    assert [child_breadth(8, j, True) for j in range(8)] == [8, 4, 2, 1, 1, 1, 1, 1]
    assert [child_breadth(8, j, False) for j in range(8)] == [4, 2, 1, 1, 1, 1, 1, 1]
    assert [child_breadth(4, j, False) for j in range(4)] == [2, 1, 1, 1]
    assert [child_breadth(5, j, True) for j in range(5)] == [5, 2, 1, 1, 1]
    assert child_breadth(1, 0, False) == 1 and child_breadth(3, 60, False) == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", LOGITS_TREE_CASES, ids=[c.name for c in LOGITS_TREE_CASES])
def test_named_case(backend, case):
    """The hand-checked trees of racer_ref/course/cases/trees.py (also run by ``racer-ref check``)."""
    table = make_table(backend, case.vocab_size, case.k, case.rows)
    topk = None if case.root_topk is None else np.array(case.root_topk)
    tree = logits_tree(backend, case.root, case.capacity, table, topk)
    tree.validate(case.vocab_size)
    for name, want in case.expect.items():
        got = np.bincount(tree.depths).tolist() if name == "per_depth" else getattr(tree, name).tolist()
        assert got == want, f"{case.name}: {name}"
    if "per_depth" in case.expect:
        assert len(tree) == case.capacity
        assert (tree.sources[1:] == SOURCE_LOGITS).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "root_topk, exc, word",
    [([7], ValueError, "at least"), ([7, 10], ValueError, "10"), ([7.0, 1.0], TypeError, "float")],
)
def test_bad_root_topk(backend, root_topk, exc, word):
    table = make_table(backend, 10, 2, {})
    with pytest.raises(exc, match=word):
        logits_tree(backend, 0, 10, table, root_topk=root_topk)


def test_backends_agree_on_random_tables():
    rng = np.random.default_rng(1)
    for _ in range(2000):
        vocab = int(rng.integers(1, 10))
        k = int(rng.integers(1, min(vocab, 4) + 1))
        rows = {int(v): rng.integers(0, vocab, k).tolist()
                for v in rng.integers(0, vocab, int(rng.integers(0, vocab + 1)))}
        root, capacity = int(rng.integers(0, vocab)), int(rng.integers(1, 40))
        topk = rng.integers(0, vocab, k).tolist() if rng.random() < 0.3 else None
        trees = [logits_tree(b, root, capacity, make_table(b, vocab, k, rows), topk) for b in BACKENDS]
        for name in ("tokens", "parents", "depths", "sources", "retrieve_indices", "attention_mask"):
            np.testing.assert_array_equal(getattr(trees[0], name), getattr(trees[1], name))
