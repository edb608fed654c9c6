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


# ---- the decoding loop's step: checked once, at generate()'s boundary ----------------------


def _tiny():
    from models import tiny_model

    return tiny_model("llama")


def test_the_loop_steps_the_twin_without_rechecking():
    import racer_ref

    model, prompt = _tiny(), [5, 6, 7, 8, 9] * 4
    run = lambda: racer_ref.generate(model, None, prompt, max_new_tokens=12, backend="python",  # noqa: E731
                                     capacity=16)
    run()  # warm-up
    calls = _profile(run)
    checks = {name for (module, name) in calls if module == "limits"}
    # The drafter's settings are checked once, when it is built; no step checks its ids.
    assert checks == {"choice_value", "int_value", "int_or_default", "check_table_size", "check_capacity"}
    assert calls[("drafter", "draft_trusted")] >= 2 and calls[("drafter", "draft")] == 0
    assert calls[("drafter", "observe")] == calls[("drafter", "commit")] == 0
    # The request's own drafter: nothing to refuse or undo (an interrupt ends both).
    assert not any(module == "undo" for module, _ in calls) and not any(n == "_check_intact" for _, n in calls)
    # A shared drafter: a torn one is refused once per request, at the claim, and every
    # commit is all or nothing; the step does not check its ids either.
    shared = racer_ref.Drafter("racer", vocab_size=128, capacity=16, backend="python")
    calls = _profile(lambda: racer_ref.generate(model, None, prompt, max_new_tokens=12, drafter=shared))
    assert calls[("undo", "check_intact")] == 1 and not any(n == "_check_intact" for _, n in calls)
    assert calls[("undo", "all_or_nothing")] == calls[("drafter", "commit_trusted")] >= 2
    assert calls[("drafter", "observe")] == calls[("drafter", "commit")] == calls[("drafter", "draft")] == 0


def test_the_loop_refuses_a_torn_twin_before_any_work():
    import pytest

    import racer_ref

    model, prompt = _tiny(), [5, 6, 7, 8, 9] * 4
    racer_ref.generate(model, None, prompt, max_new_tokens=1)  # the model's exactness probe, once per model
    d = racer_ref.Drafter("racer", vocab_size=128, capacity=16, backend="python")
    d._impl.automaton._torn = True  # as an interrupted rollback leaves it
    calls = []
    hook = model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(RuntimeError, match=r"^Automaton: .* call reset\(\)"):
            racer_ref.generate(model, None, prompt, max_new_tokens=4, drafter=d)
    finally:
        hook.remove()
    assert calls == [] and d.num_committed == 0
    d.reset()
    assert len(racer_ref.generate(model, None, prompt, max_new_tokens=4, drafter=d).token_ids) == 4


def test_the_loop_refuses_logits_wider_than_the_vocabulary():
    import pytest

    import racer_ref
    from models import tiny_model

    model = tiny_model("llama", seed=1)
    model.config.vocab_size = 100  # the logits keep 128 entries: ids 100..127 are no tokens
    import importlib.util

    for backend in ["python"] + (["rust"] if importlib.util.find_spec("racer_ref._core") else []):
        with pytest.raises(ValueError, match="^model: 128 logits per position, more than its config's vocab_size 100"):
            racer_ref.generate(model, None, [5, 6, 7], max_new_tokens=4, backend=backend)
