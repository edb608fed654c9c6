"""The expected tree and the acceptance estimates: the twin's rules, and Rust == Python.

docs/explanation/expected-tree.md; racer_ref/reference/expected_tree.py (the twin) and
rust/src/expected_tree.rs (the core).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import racer_ref
from racer_ref import Drafter
from racer_ref.reference.copy_logit import CopyLogitTable
from racer_ref.reference.expected_tree import (
    AcceptanceEstimates,
    RetrievalTrie,
    build_expected_tree,
    candidate_bucket,
    candidate_children,
    learn,
)
from racer_ref.tree import SOURCE_BOTH, SOURCE_LOGITS, SOURCE_RETRIEVAL

BACKENDS = ("rust", "python")
_PYTHON_DIR = str(Path(racer_ref.__file__).resolve().parents[1])  # the package's source root


def small_example():
    table = CopyLogitTable(vocab_size=10, k=2)
    table.observe([0, 1, 2], [[1, 2], [3, 4], [5, 6]])
    # "0 1 3" followed this context 3 times out of 4, "0 2" once.
    trie = RetrievalTrie(0, [[0, 1, 3], [0, 2]], [[4, 3, 3], [4, 1]])
    return table, trie


def test_candidates_merge_retrieval_and_row():
    table, trie = small_example()
    # Root: retrieval children 1 and 2 (both also in row 0 = [1, 2]): both "both".
    assert candidate_children(0, 0, trie, table, None) == [[1, 0, 1], [2, 1, 3]]
    # Node 1 (trie node 1): retrieval child 3 (rank 0 in row 1 = [3, 4]), then 4 from the row.
    assert candidate_children(1, 1, trie, table, None) == [[3, 0, 2], [4, 1, -1]]
    # Not a retrieval node: the row alone; last-logit mode replaces the root's row only.
    assert candidate_children(2, -1, trie, table, None) == [[5, 0, -1], [6, 1, -1]]
    assert candidate_children(0, 0, trie, table, [7, 1]) == [[1, 1, 1], [2, -1, 3], [7, 0, -1]]
    # Buckets: logits rank 0 at depth 1 is bucket 0; both rank 0 at ratio 3/4 is 44 + 3.
    assert candidate_bucket(0, 0, 0, 1) == 0 and candidate_bucket(0, 3, 4, 1) == 47


def test_expected_tree_keeps_the_most_probable_nodes():
    table, trie = small_example()
    est = AcceptanceEstimates()
    tree, ann = build_expected_tree(0, 5, trie, table, None, est)
    tree.validate(vocab_size=10)
    # Priors: both rank 0 ratio 3/4 -> 5/6; both rank 1 ratio 1/4 -> 3/7; under 1: both
    # rank 0 ratio 1 -> 5/6 (path 25/36), logits rank 1 depth 2 -> 1/3 (path 5/18).
    assert tree.tokens.tolist() == [0, 1, 2, 3, 4]
    assert tree.sources.tolist() == [0, SOURCE_BOTH, SOURCE_BOTH, SOURCE_BOTH, SOURCE_LOGITS]
    assert ann.path == pytest.approx([1.0, 5 / 6, 3 / 7, 25 / 36, 5 / 18])
    assert ann.expected_tokens() == pytest.approx(1 + 5 / 6 + 3 / 7 + 25 / 36 + 5 / 18)
    # Every node is at most as probable as its parent, and the root is 1.
    assert all(ann.path[i] <= ann.path[p] for i, p in enumerate(tree.parents.tolist()) if p >= 0)
    # A smaller capacity keeps a prefix of the same best-first order.
    small, ann3 = build_expected_tree(0, 3, trie, table, None, est)
    assert small.tokens.tolist() == [0, 1, 3] and ann3.path == pytest.approx([1.0, 5 / 6, 25 / 36])


def test_learning_labels_every_candidate_of_every_observed_node():
    table, trie = small_example()
    est = AcceptanceEstimates()
    tree, ann = build_expected_tree(0, 5, trie, table, None, est)
    # The target chose 1 after the root, 4 after node 1; rows of nodes 2, 3, 4 choose 9.
    topk = np.array([[1, 0], [4, 0], [9, 0], [9, 0], [9, 0]])
    n = learn(ann, tree.tokens.tolist(), topk, table, est)
    # The accepted path is 0 -> 1 -> 4 (each the top-1 of its parent); only its nodes'
    # candidates are samples: root two (1, 2), node 1 two (3, 4), node 4 (unseen row) none.
    # Nodes 2 and 3 are off the path: their rows teach nothing.
    assert n == 4 and est.num_labels == 4
    both_r0_q3 = candidate_bucket(0, 3, 4, 1)  # root -> 1 (3 of 4): accepted
    assert both_r0_q3 == candidate_bucket(0, 3, 3, 2)  # 1 -> 3 (3 of 3): rejected, same bucket
    assert (est.seen[both_r0_q3], est.accepted[both_r0_q3]) == (2, 1)
    logits_r1_d2 = candidate_bucket(1, 0, 0, 2)  # 1 -> 4: accepted
    assert (est.seen[logits_r1_d2], est.accepted[logits_r1_d2]) == (1, 1)
    # The accepted path alone works too; rows about another tree teach nothing.
    assert learn(ann, [0, 1, 4], topk[[0, 1, 4]], table, est) == 4
    assert learn(ann, [5, 1], topk[:2], table, est) == 0
    assert learn(ann, [0, 7], topk[:2], table, est) == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_drafter_settings_and_errors(backend):
    assert Drafter("racer", vocab_size=20, backend=backend).tree == "paper"  # the default
    d = Drafter("racer", vocab_size=20, capacity=8, breadth=2, tree="expected", backend=backend)
    assert d.tree == "expected" and "tree='expected'" in repr(d._impl)
    with pytest.raises(ValueError, match='tree: unknown tree'):
        Drafter("racer", vocab_size=20, tree="best", backend=backend)
    with pytest.raises(TypeError, match="tree: must be a str"):
        Drafter("racer", vocab_size=20, tree=1, backend=backend)
    with pytest.raises(ValueError, match=r"capacity: must be in \[1, 4096\], got 0"):
        d.draft(3, capacity=0)
    assert d.path_probs is None and d.expected_tokens is None
    d.commit([1, 2, 3, 1])
    d.observe([2], [[3, 9]])
    tree = d.draft(2)
    assert d.path_probs.shape == (len(tree),) and d.path_probs[0] == 1.0
    assert d.expected_tokens == pytest.approx(d.path_probs.sum())
    d.observe(tree.tokens, np.tile([3, 1], (len(tree), 1)))
    assert d.path_probs is None  # learned from once
    stats = d.acceptance_stats()
    assert stats["num_labels"] > 0 and sum(stats["calibration_seen"]) == stats["num_labels"]
    d.reset()
    assert d.acceptance_stats()["num_labels"] == 0
    # pld and ar have no estimates.
    p = Drafter("pld", vocab_size=20, backend=backend)
    p.draft(1)
    assert p.path_probs is None


def _run_pair(method, tree, seed, cap=16, k=4, vocab=30, steps=50, attach=True):
    """Drive both backends through the same steps; every output must be identical.
    ``attach``: attach the estimates to a paper drafter (tree="expected" always has them)."""
    rng = np.random.default_rng(seed)
    ds = [Drafter(method, vocab_size=vocab, capacity=cap, breadth=k, ngram=4, tree=tree, backend=b)
          for b in BACKENDS]
    if attach:
        for d in ds:
            d.attach_estimator()
    text = rng.integers(0, 8, 400)
    rows = np.array([[(t + j) % vocab for j in range(k)] for t in text[1:31]])
    for d in ds:
        d.commit(text[:30])
        d.observe(text[:30], rows)
    for s in range(steps):
        root = int(text[30 + s])
        last = rng.integers(0, vocab, k)
        capacity = int(rng.integers(1, cap + 1)) if s % 3 == 0 else None
        a, b = [d.draft(root, last, capacity=capacity) for d in ds]
        assert a.tokens.tolist() == b.tokens.tolist()
        assert a.parents.tolist() == b.parents.tolist() and a.sources.tolist() == b.sources.tolist()
        pa, pb = [d.path_probs for d in ds]
        assert (pa is None) == (pb is None)
        if pa is not None:
            assert pa.tolist() == pb.tolist()  # bit-identical
        assert ds[0].expected_tokens == ds[1].expected_tokens
        # The target's choice: the true next token half of the time.
        choice = [int(text[31 + s]) if rng.random() < 0.5 else int(rng.integers(0, vocab)) for _ in range(len(a))]
        topk = np.column_stack([choice, rng.integers(0, vocab, (len(a), k - 1))])
        observed = np.arange(len(a)) if s % 4 else np.array([0])  # every node, or the root only
        for d in ds:
            d.observe(a.tokens[observed], topk[observed])
            d.commit([root])
    sa, sb = [d.acceptance_stats() for d in ds]
    assert sa == sb
    return None if sa is None else sa["num_labels"]


@pytest.mark.parametrize("tree", ["expected", "paper"])
@pytest.mark.parametrize("method", ["racer", "retrieval", "logits", "logits-last"])
def test_rust_and_python_build_identical_trees_and_estimates(method, tree):
    labels = [_run_pair(method, tree, seed) for seed in range(3)]
    assert all(n > 0 for n in labels)


@pytest.mark.parametrize("method", ["racer", "retrieval", "logits", "logits-last"])
def test_the_paper_step_runs_no_estimates_and_drafts_the_same_trees(method):
    # Without attach_estimator() the paper's drafter has no estimates, on both backends...
    assert [_run_pair(method, "paper", seed, attach=False) for seed in range(3)] == [None] * 3
    # ...and drafts exactly the trees it drafts with them (the estimates only annotate).
    for seed in range(2):
        rng = np.random.default_rng(seed)
        text = rng.integers(0, 8, 200)
        rows = rng.integers(0, 30, (100, 4))
        ds = [Drafter(method, vocab_size=30, capacity=12, breadth=4, ngram=4, backend=b)
              for b in BACKENDS for _ in range(2)]
        for d in ds[1::2]:
            d.attach_estimator()
        for d in ds:
            d.commit(text[:100])
            d.observe(text[:100], rows)
        for root in range(8):
            trees = [d.draft(root, rows[root]) for d in ds]
            assert all(t.tokens.tolist() == trees[0].tokens.tolist() for t in trees)
            assert all(t.sources.tolist() == trees[0].sources.tolist() for t in trees)
            topk = rng.integers(0, 30, (len(trees[0]), 4))
            for d in ds:
                d.observe(trees[0].tokens, topk)


def test_the_paper_step_does_not_import_the_estimates():
    # A fresh interpreter: one paper draft on the twin must not load expected_tree.
    code = (
        "import sys\n"
        "from racer_ref import Drafter\n"
        "d = Drafter('racer', vocab_size=30, capacity=8, breadth=2, backend='python')\n"
        "d.commit([1, 2, 3, 1, 2]); d.observe([2], [[3, 4]]); d.draft(2)\n"
        "print('racer_ref.reference.expected_tree' in sys.modules)\n"
        "d.attach_estimator(); d.draft(2)\n"
        "print('racer_ref.reference.expected_tree' in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_PYTHON_DIR, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_paper_tree_is_unchanged_by_the_estimates():
    # tree="paper" builds the paper's merge whatever was learned.
    from racer_ref.reference.draft_tree import build_draft_tree

    d = Drafter("racer", vocab_size=30, capacity=12, breadth=3, tree="paper", backend="python")
    rng = np.random.default_rng(1)
    text = rng.integers(0, 8, 200)
    d.commit(text[:100])
    d.observe(text[:100], rng.integers(0, 30, (100, 3)))
    for root in range(8):
        t = d.draft(root)
        paths = d._impl.automaton.retrieve(root, 12)
        ref = build_draft_tree(root, 12, paths, d._impl.table)
        assert t.tokens.tolist() == ref.tokens.tolist() and t.sources.tolist() == ref.sources.tolist()
        d.observe(t.tokens, rng.integers(0, 30, (len(t), 3)))
    assert SOURCE_RETRIEVAL | SOURCE_LOGITS == SOURCE_BOTH
