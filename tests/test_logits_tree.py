"""Logits tree (docs/explanation/spec.md step 3, paper Eq. 3) on both backends."""

from __future__ import annotations

import numpy as np
import pytest

from racer_ref import _core
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


def distinct_rows(k: int, depth: int) -> tuple[int, dict[int, list[int]]]:
    """Rows where every token's k children are fresh tokens: all tokens distinct."""
    rows: dict[int, list[int]] = {}
    frontier, fresh = [0], 1
    for _ in range(depth):
        next_frontier = []
        for v in frontier:
            rows[v] = list(range(fresh, fresh + k))
            fresh += k
            next_frontier += rows[v]
        frontier = next_frontier
    return fresh, rows


def test_breadth_rule_eq3():
    # The root's children are halved once less than an inner node's.
    assert [child_breadth(8, j, True) for j in range(8)] == [8, 4, 2, 1, 1, 1, 1, 1]
    assert [child_breadth(8, j, False) for j in range(8)] == [4, 2, 1, 1, 1, 1, 1, 1]
    assert [child_breadth(4, j, False) for j in range(4)] == [2, 1, 1, 1]
    assert [child_breadth(5, j, True) for j in range(5)] == [5, 2, 1, 1, 1]
    assert child_breadth(1, 0, False) == 1 and child_breadth(3, 60, False) == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "k, capacity, per_depth",
    [(8, 64, [1, 8, 19, 24, 12]), (4, 21, [1, 4, 8, 8]), (8, 9, [1, 8]), (8, 10, [1, 8, 1]),
     (2, 7, [1, 2, 3, 1]), (1, 5, [1, 1, 1, 1, 1])],
)
def test_paper_shapes_all_tokens_distinct(backend, k, capacity, per_depth):
    vocab_size, rows = distinct_rows(k, depth=len(per_depth))
    tree = logits_tree(backend, 0, capacity, make_table(backend, vocab_size, k, rows))
    tree.validate(vocab_size)
    assert np.bincount(tree.depths).tolist() == per_depth
    assert len(tree) == capacity
    assert (tree.sources[1:] == SOURCE_LOGITS).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_tree_by_hand(backend):
    # k = 2: root (b=2) -> 1 (b=2), 2 (b=1); 1 -> 3 (b=1), 4 (b=1); 2 -> 5; 3 -> 7.
    # 4, 5 and 7 were never seen: no children. 7 nodes are reachable, fewer than C = 10.
    table = make_table(backend, 10, 2, {0: [1, 2], 1: [3, 4], 2: [5, 6], 3: [7, 8]})
    tree = logits_tree(backend, 0, 10, table)
    tree.validate(10)
    assert tree.tokens.tolist() == [0, 1, 2, 3, 4, 5, 7]
    assert tree.parents.tolist() == [-1, 0, 0, 1, 1, 2, 3]
    assert tree.depths.tolist() == [0, 1, 1, 2, 2, 2, 3]
    assert tree.retrieve_indices.tolist() == [[0, 1, 4, -1], [0, 2, 5, -1], [0, 1, 3, 6]]
    # Capacity cuts the breadth-first order: the first 4 nodes.
    tree = logits_tree(backend, 0, 4, table)
    assert tree.tokens.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_unseen_root_gives_root_only(backend):
    tree = logits_tree(backend, 3, 64, make_table(backend, 10, 2, {0: [1, 2]}))
    assert tree.tokens.tolist() == [3]
    assert tree.retrieve_indices.tolist() == [[0]]
    assert tree.attention_mask.tolist() == [[True]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_repeated_id_in_a_row_is_one_node(backend):
    # Row 0 = [1, 1]: the second 1 is the same (parent, token): not duplicated, not re-expanded.
    table = make_table(backend, 10, 2, {0: [1, 1], 1: [2, 3]})
    tree = logits_tree(backend, 0, 10, table)
    assert tree.tokens.tolist() == [0, 1, 2, 3]
    assert tree.parents.tolist() == [-1, 0, 1, 1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cycle_fills_capacity(backend):
    # 0 -> 0 -> 0 ...: infinitely many reachable nodes, so exactly C of them.
    tree = logits_tree(backend, 0, 6, make_table(backend, 3, 1, {0: [0]}))
    assert tree.tokens.tolist() == [0] * 6
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3, 4]


@pytest.mark.parametrize("backend", BACKENDS)
def test_last_logit_mode_replaces_only_the_root_row(backend):
    table = make_table(backend, 10, 2, {0: [1, 4], 7: [8, 9], 6: [2, 3]})
    # root_topk has 3 ids; only the first k = 2 (7, 6) are the root's children.
    tree = logits_tree(backend, 0, 10, table, root_topk=np.array([7, 6, 5]))
    # 7 (b=2) -> 8, 9; 6 (b=1) -> 2
    assert tree.tokens.tolist() == [0, 7, 6, 8, 9, 2]
    assert tree.parents.tolist() == [-1, 0, 0, 1, 1, 2]
    # Without root_topk the root's own row is used.
    assert logits_tree(backend, 0, 10, table).tokens.tolist() == [0, 1, 4]


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
