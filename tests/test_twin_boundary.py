"""Issue 25, items 1 and 2: the twin checks each argument once, at its public entry point,
and the paper's step runs nothing but retrieval, the logits tree, the merge and flattening.

Profiles one drafting step of the twin (observe, commit, draft) and counts the calls into
``racer_ref.reference.limits`` (the checks) and which modules run at all.
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np

from racer_ref.reference.drafter import Drafter


def _profile(call):
    """Calls of functions of the twin during ``call()``: Counter of (module, name)."""
    calls: Counter = Counter()

    def prof(frame, event, arg):
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith("racer_ref.reference"):
                calls[(module.rsplit(".", 1)[-1], frame.f_code.co_name)] += 1

    sys.setprofile(prof)
    try:
        call()
    finally:
        sys.setprofile(None)
    return calls


def _drafter():
    rng = np.random.default_rng(0)
    d = Drafter("racer", vocab_size=50, capacity=16, breadth=4, ngram=5)
    text = rng.integers(0, 10, 300)
    d.commit(text)
    d.observe(text, rng.integers(0, 50, (len(text), 4)))
    return d, rng


def test_a_paper_step_checks_each_argument_once():
    d, rng = _drafter()
    tree = d.draft(3)
    topk = rng.integers(0, 50, (len(tree), 4))
    seen: set = set()
    calls = _profile(lambda: d.draft(3))
    seen |= set(calls)
    checks = {name: n for (module, name), n in calls.items() if module == "limits"}
    # root: one int check and one range check; nothing inside the step checks again.
    assert checks == {"int_value": 1, "check_token_id": 1}
    calls = _profile(lambda: d.observe(tree.tokens, topk))
    seen |= set(calls)
    checks = {name: n for (module, name), n in calls.items() if module == "limits"}
    assert checks == {"check_observe": 1, "as_int_array": 2, "check_token_ids": 1}
    calls = _profile(lambda: d.commit(tree.tokens[:3]))
    seen |= set(calls)
    checks = {name: n for (module, name), n in calls.items() if module == "limits"}
    assert checks == {"as_int_array": 1, "check_token_ids": 1}
    # The table's and the tree builder's own checks are not run again inside the step.
    assert not {("copy_logit", "row"), ("copy_logit", "is_seen"), ("copy_logit", "observe"),
                ("draft_tree", "build_draft_tree"), ("automaton", "retrieve_counted")} & seen
    assert ("draft_tree", "build_trusted") in seen and ("logits_tree", "grow_logits_tree") in seen


def test_the_paper_step_runs_no_estimates_and_the_expected_tree_does():
    d, rng = _drafter()
    steps = lambda: (d.draft(3), d.observe([3], rng.integers(0, 50, (1, 4))), d.commit([3]))  # noqa: E731
    assert not {m for m, _ in _profile(steps)} & {"expected_tree"}
    d.attach_estimator()
    modules = {m for m, _ in _profile(steps)}
    assert "expected_tree" in modules
    assert d.acceptance_stats() is not None
