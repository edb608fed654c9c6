"""Benchmark harness, hf-* baselines, trace recording and ``--capacity auto``.

Models: a tiny seeded random Llama (tests/models.py) with the default model's vocabulary, so
that the real SmolLM2 tokenizer and chat template work with it; everything runs in seconds.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from models import OracleDrafter, greedy_reference, make_tree, single_thread, tiny_model  # noqa: F401
from racer_ref.harness import bench as B
from racer_ref.harness import summary as S
from racer_ref.harness.baselines import ForwardCounter, hf_generate, tokens_per_step
from racer_ref.speedups.capacity import (AdaptiveDrafter, CapacityController, expected_tokens_by_capacity,
                                         profile_forward)
from racer_ref.harness.datasets import Prompt, encode_prompt
from racer_ref.harness.trace import render_step, save_trace
from racer_ref.harness.records import StepRecorder, accepted_path

PROMPTS = [
    Prompt("p0", "prose", "Repeat after me: the cat sat on the mat, the cat sat on the mat."),
    Prompt("p1", "code", "def add(a, b):\n    return a + b\n\ndef add(a, b):"),
    Prompt("p2", "prose", "One two three four, one two three four, one two"),
]


@pytest.fixture(scope="module")
def tokenizer():
    from racer_ref.harness.models import load_default_tokenizer

    return load_default_tokenizer()


@pytest.fixture(scope="module")
def lm(tokenizer):
    """Tiny random Llama over SmolLM2's vocabulary (EOS never chosen: random weights)."""
    return tiny_model("llama", vocab_size=len(tokenizer), seed=1, scale=4.0, max_positions=512)


# ----------------------------------------------------------------------------- small parts


def test_parse_methods_and_capacity():
    assert B.parse_methods("ar, racer,ar") == ["ar", "racer"]
    assert B.parse_methods("all") == list(B.RUN_METHODS)
    assert B.parse_methods("all,racer@16,ar") == list(B.RUN_METHODS) + ["racer@16"]
    for bad in ("", "ar,nope", "hf"):
        with pytest.raises(ValueError, match="methods: expected"):
            B.parse_methods(bad)
    assert B.parse_methods("racer@16,racer@auto,racer") == ["racer@16", "racer@auto", "racer"]
    assert B.split_method("logits@8") == ("logits", 8) and B.split_method("pld") == ("pld", None)
    with pytest.raises(ValueError, match="'ar' takes no @capacity"):
        B.parse_methods("ar@4")
    with pytest.raises(ValueError, match=r"capacity: must be in \[1, 4096\], got 0"):
        B.parse_methods("racer@0")
    assert B.parse_capacity("auto") == "auto" and B.parse_capacity(" AUTO ") == "auto"
    assert B.parse_capacity("16") == 16
    for bad in ("0", "4097"):
        with pytest.raises(ValueError, match=r"capacity: must be in \[1, 4096\], got " + bad):
            B.parse_capacity(bad)
    for bad in ("x", "1.5"):
        with pytest.raises(ValueError, match=r"capacity: must be an int in \[1, 4096\] or 'auto'"):
            B.parse_capacity(bad)


def test_method_order_rotates_every_position():
    methods = ["a", "b", "c", "d"]
    orders = [B.method_order(methods, i) for i in range(4)]
    assert orders[1] == ["b", "c", "d", "a"]
    for pos in range(4):  # every method runs at every position once
        assert sorted(o[pos] for o in orders) == methods


def test_first_mismatch():
    assert B.first_mismatch([1, 2, 3], [1, 2, 3]) is None
    assert B.first_mismatch([1, 2, 3], [1, 5, 3]) == 1
    assert B.first_mismatch([1, 2], [1, 2, 3]) == 2


def _row(method, pid, cat, new, wall, accepted, matches=True):
    return {"method": method, "prompt_id": pid, "category": cat, "new_tokens": new, "wall_s": wall,
            "steps": len(accepted), "accepted_lengths": accepted, "matches_ar": matches}


def test_speedup_is_token_weighted_not_a_mean_of_ratios():
    rows = [
        _row("ar", "a", "x", 10, 1.0, [0] * 9), _row("ar", "b", "y", 30, 2.0, [0] * 29),
        _row("racer", "a", "x", 10, 0.25, [1, 2, 0, 3]), _row("racer", "b", "y", 30, 1.0, [4] * 6),
    ]
    # Per prompt racer is 4x and 2x faster (a mean of ratios: 3x); token-weighted:
    # ar 3.0 s / 40 tokens, racer 1.25 s / 40 tokens -> 2.4x.
    assert S.speedup(rows, "racer", "ar") == pytest.approx(2.4)
    assert S.speedup(rows, "racer", "ar", category="x") == pytest.approx(4.0)
    assert S.speedup(rows, "ar", "racer") == pytest.approx(1 / 2.4)
    assert math.isnan(S.speedup(rows, "racer", "hf-greedy"))
    # only prompts both methods ran count
    assert S.speedup(rows[:3], "racer", "ar") == pytest.approx(4.0)
    agg = S.aggregate(r for r in rows if r["method"] == "racer")
    assert agg.steps == 10 and agg.tokens_in_steps == (1 + 2 + 0 + 3 + 4) + 6 * 5
    assert agg.mat == pytest.approx(40 / 10)


def test_summarize_from_results_file(tmp_path):
    rows = [
        _row("ar", "a", "x", 10, 1.0, [0] * 9), _row("ar", "b", "y", 30, 2.0, [0] * 29),
        _row("racer", "a", "x", 10, 0.5, [1, 2, 0, 3]), _row("racer", "b", "y", 30, 0.5, [4] * 6, False),
    ]
    rows[3]["first_mismatch"] = 7
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = B.summarize(tmp_path)
    assert "| `racer` | 2 | 40 | 10 | 4.00 | 40.0 | 3.00x | n/a | 1/2 |" in text
    assert "| `ar` | 2 | 40 | 38 | 1.00 | 13.3 | 1.00x | n/a | 2/2 |" in text
    assert "| x | 1.00 | 2.50 |" in text  # MAT per category: racer on x = (6 + 4) / 4
    assert "`racer` on b: first difference at new token 7" in text
    for name in ("mat_per_category.png", "speedup.png", "accepted_lengths.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "summary.md").read_text() == text


def test_tokens_per_step_from_cache_lengths():
    # prefill of 5 tokens, then steps starting at 5, 6, 9, 10 cached tokens; 8 new tokens
    calls = [(5, 0, 0.1), (1, 5, 0.0), (4, 6, 0.0), (2, 9, 0.0), (3, 10, 0.0)]
    assert tokens_per_step(calls, 5, 8) == [1, 3, 1, 2]
    assert tokens_per_step(calls[:1], 5, 1) == []
    # transformers 5 may verify candidates in the prefill call: here it gave 3 tokens, so
    # the first step starts with 7 cached tokens.
    calls = [(9, 0, 0.1), (3, 7, 0.0), (2, 9, 0.0)]
    assert tokens_per_step(calls, 5, 8) == [2, 3]


# ----------------------------------------------------------------------------- hf baselines


def test_hf_greedy_counts_forward_calls(lm, tokenizer):
    ids = encode_prompt(tokenizer, PROMPTS[0].text)
    r = hf_generate(lm, tokenizer, ids, 12, "hf-greedy")
    assert r.token_ids == greedy_reference(lm, ids, 12)
    assert r.steps == 11 and r.accepted_lengths == [0] * 11 and r.mean_accepted_tokens == 1.0
    assert r.text == tokenizer.decode(r.token_ids, skip_special_tokens=True)
    assert r.timings["prefill"] > 0 and r.timings["total"] >= r.timings["prefill"] + r.timings["forward"]


def test_hf_pld_is_lossless_and_its_steps_are_forward_calls(lm, tokenizer):
    # The random model repeats itself after this prompt, so prompt lookup finds some copies.
    ids = [30410] * 20
    ids = ids + greedy_reference(lm, ids, 16)
    truth = greedy_reference(lm, ids, 16)
    r = hf_generate(lm, tokenizer, ids, 16, "hf-pld")
    assert r.token_ids == truth
    # Independent account: record every forward call's input ids and rebuild each step's
    # accepted length from the candidates it verified and the final output.
    inputs = []
    hook = lm.register_forward_pre_hook(
        lambda m, a, k: inputs.append(k["input_ids"][0].tolist()), with_kwargs=True)
    try:
        with ForwardCounter(lm) as fc:
            hf_generate(lm, tokenizer, ids, 16, "hf-pld")
    finally:
        hook.remove()
    assert r.steps == len(fc.calls) - 1 == len(inputs) - 1
    full = ids + truth
    expected = []
    for (n_in, start, _), step_ids in zip(fc.calls[1:], inputs[1:]):
        assert step_ids[0] == full[start]  # the step's first token is the newest committed one
        a = 0
        while a + 1 < len(step_ids) and start + 1 + a < len(full) and step_ids[1 + a] == full[start + 1 + a]:
            a += 1
        expected.append(a)
    assert r.accepted_lengths[:-1] == expected[:-1]
    assert r.accepted_lengths[-1] <= expected[-1]  # the last step is clipped to max_new_tokens
    assert max(r.accepted_lengths) >= 1 and r.steps < 15
    assert r.mean_accepted_tokens == pytest.approx((sum(r.accepted_lengths) + r.steps) / r.steps)


def test_hf_generate_bad_input(lm, tokenizer):
    with pytest.raises(ValueError, match="method: expected one of hf-greedy, hf-pld"):
        hf_generate(lm, tokenizer, [1, 2], 4, "greedy")
    with pytest.raises(ValueError, match="max_new_tokens: expected an integer >= 1"):
        hf_generate(lm, tokenizer, [1, 2], 0)
    with pytest.raises(ValueError, match="prompt: expected at least one token"):
        hf_generate(lm, tokenizer, [], 4)


# ----------------------------------------------------------------------------- run_bench


def test_run_bench_end_to_end(lm, tokenizer, tmp_path):
    methods = ["ar", "hf-greedy", "hf-pld", "pld", "racer", "logits"]
    rows = B.run_bench(lm, tokenizer, PROMPTS, methods, tmp_path, max_new_tokens=10, capacity=8,
                       progress=False, meta={"source": "unit test"})
    assert len(rows) == len(PROMPTS) * len(methods)
    on_disk = S.read_results(tmp_path)
    assert on_disk == json.loads(json.dumps(rows))
    required = {"method", "prompt_id", "category", "new_tokens", "steps", "wall_s",
                "mean_accepted_tokens", "matches_ar"}
    for row in rows:
        assert required <= set(row)
        assert row["new_tokens"] == 10 and row["wall_s"] > 0
        assert row["matches_ar"] is True, row
        assert row["steps"] == len(row["accepted_lengths"])
        if row["steps"]:
            assert row["mean_accepted_tokens"] == pytest.approx(np.mean(row["accepted_lengths"]) + 1)
        assert row["capacity"] == (8 if row["method"] in B.TREE_METHODS else None)
    ar = [r for r in rows if r["method"] == "ar"]
    assert all(r["steps"] == 9 and r["mean_accepted_tokens"] == 1.0 for r in ar)
    for r in ar:  # every method's text is the same greedy output
        same = [x["text"] for x in rows if x["prompt_id"] == r["prompt_id"]]
        assert len(set(same)) == 1
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["methods"] == methods and meta["source"] == "unit test" and meta["max_new_tokens"] == 10
    summary = (tmp_path / "summary.md").read_text()
    assert "- source: unit test" in summary and "### MAT per category" in summary
    for m in methods:
        assert f"| `{m}` | 3 | 30 |" in summary


def test_run_bench_refuses_bad_settings(lm, tokenizer, tmp_path):
    with pytest.raises(ValueError, match="prompts: no prompts"):
        B.run_bench(lm, tokenizer, [], ["ar"], tmp_path, progress=False)
    with pytest.raises(ValueError, match="greedy only"):
        B.run_bench(lm, tokenizer, PROMPTS, ["hf-greedy"], tmp_path, temperature=0.7, progress=False)
    with pytest.raises(ValueError, match="max_new_tokens"):
        B.run_bench(lm, tokenizer, PROMPTS, ["ar"], tmp_path, max_new_tokens=0, progress=False)
    assert not (tmp_path / "results.jsonl").exists()


# ----------------------------------------------------------------------------- trace


def test_accepted_path_walks_the_committed_tokens():
    tree = make_tree([5, 1, 2, 3, 4], [-1, 0, 0, 1, 2])  # 5 -> {1 -> 3, 2 -> 4}
    assert accepted_path(tree, [5, 2, 4]) == [0, 2, 4]
    assert accepted_path(tree, [5, 2, 9]) == [0, 2]
    assert accepted_path(tree, [5]) == [0]
    assert accepted_path(tree, [6, 2]) == []


def test_step_recorder_sees_every_step_and_its_accepted_path(lm, tokenizer):
    prompt = encode_prompt(tokenizer, "abc", chat=False)
    truth = greedy_reference(lm, prompt, 14)
    oracle = OracleDrafter(prompt, truth, len(tokenizer), depth=3)
    rec = StepRecorder(oracle)
    from racer_ref.decoding import generate

    result = generate(lm, tokenizer, prompt, max_new_tokens=14, drafter=rec)
    rec.finalize(result)
    assert result.token_ids == truth
    assert len(rec.steps) == result.steps
    # near max_new_tokens the loop clips trees in depth; the recorder keeps what was verified
    assert [len(s.tree) for s in rec.steps] == result.tree_sizes
    assert len(oracle.sizes) == result.steps and oracle.sizes[-1] > result.tree_sizes[-1]
    assert [len(s.accepted) - 1 for s in rec.steps] == result.accepted_lengths
    assert result.accepted_lengths[0] == 3  # the oracle's chain is accepted in full
    for s in rec.steps:
        assert [int(s.tree.tokens[i]) for i in s.accepted] == s.committed[: len(s.accepted)]
    assert all(s.seconds > 0 for s in rec.steps[:-1])
    from rich.console import Console

    console = Console(record=True, width=200, file=open("/dev/null", "w"))
    console.print(render_step(rec.steps[0], tokenizer))
    out = console.export_text()
    assert "accepted 3" in out and out.count("✓") == 4  # root + 3 accepted drafts


def test_save_trace_html_and_png(lm, tokenizer, tmp_path):
    prompt = encode_prompt(tokenizer, "abc", chat=False)
    truth = greedy_reference(lm, prompt, 8)
    rec = StepRecorder(OracleDrafter(prompt, truth, len(tokenizer), depth=2))
    from racer_ref.decoding import generate

    rec.finalize(generate(lm, tokenizer, prompt, max_new_tokens=8, drafter=rec))
    html = save_trace(rec.steps, tmp_path / "t.html", tokenizer)
    assert "step 0" in html.read_text() and "accepted 2" in html.read_text()
    png = save_trace(rec.steps, tmp_path / "t.png", tokenizer)
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match=r"expected a .html, .png"):
        save_trace(rec.steps, tmp_path / "t.txt", tokenizer)
    with pytest.raises(ValueError, match="nothing to save"):
        save_trace([], tmp_path / "t.html")
    with pytest.raises(ValueError, match=r"step: expected an index"):
        save_trace(rec.steps, tmp_path / "t.png", step=99)


# ----------------------------------------------------------------------------- capacity auto


def test_expected_tokens_by_capacity():
    # Path probabilities of a full draft, root first: the tree at C keeps the C - 1 best.
    got = expected_tokens_by_capacity([1.0, 0.5, 0.9, 0.2], [1, 2, 3, 4, 10])
    assert got == pytest.approx({1: 1.0, 2: 1.9, 3: 2.4, 4: 2.6, 10: 2.6})


def test_controller_maximises_expected_tokens_per_second():
    ctrl = CapacityController({1: 1.0, 2: 1.1, 4: 2.0}, min_timed=None)
    # E = 1, 1.9, 2.8 -> per second 1.0, 1.73, 1.4: C = 2, predicting 1.9 tokens.
    assert ctrl.choose([1.0, 0.9, 0.8, 0.1]) == (2, pytest.approx(1.9))
    # E = 1, 1.1: 1.0 per second both: the smaller capacity wins the tie.
    assert ctrl.choose([1.0, 0.1]) == (1, 1.0)
    # No estimates (a drafter without path probabilities): the largest candidate.
    assert ctrl.choose(None) == (4, None)
    # A capacity that turns out twice cheaper than profiled wins: T(4) = 1.0 measured (and
    # the others as profiled).
    ctrl = CapacityController({1: 1.0, 2: 1.1, 4: 2.0}, min_timed=1)
    for c, t in ((1, 1.0), (2, 1.1), (4, 1.0)):
        ctrl.update_time(c, t)
    assert ctrl.step_seconds(4) == 1.0 and ctrl.choose([1.0, 0.9, 0.8, 0.1])[0] == 4
    ctrl.update_tokens(2.8, 3)
    ctrl.update_tokens(None, 1)  # no prediction: not counted
    rep = ctrl.report()
    assert rep["used"] == {4: 1} and rep["predicted_tokens_per_step"] == 2.8
    assert rep["realised_tokens_per_step"] == 3.0 and rep["steps_predicted"] == 1
    assert "capacity auto: used 4 (100%)" in ctrl.describe()
    with pytest.raises(ValueError, match="min_timed"):
        CapacityController({1: 1.0}, min_timed=0)
    with pytest.raises(ValueError, match="forward_seconds"):
        CapacityController({})


@pytest.mark.parametrize("backend", ["rust", "python"])
def test_expected_tree_at_a_smaller_capacity_is_the_best_prefix(tokenizer, backend):
    from racer_ref import Drafter

    rng = np.random.default_rng(0)
    d = Drafter("racer", vocab_size=len(tokenizer), capacity=64, backend=backend, tree="expected")
    text = rng.integers(0, 200, 300)
    text = np.concatenate([text, text[:150]])
    d.observe(text, rng.integers(0, 200, (len(text), 8)))
    d.commit(text)
    for root in range(0, 200, 23):
        full = d.draft(int(root))
        probs = d.path_probs
        assert probs[0] == 1.0 and np.all(probs[1:] <= probs[full.parents[1:]])
        expected = expected_tokens_by_capacity(probs, [1, 2, 5, 16, 33])
        for c in (1, 2, 5, 16, 33):
            t = d.draft(int(root), capacity=c)
            t.validate(vocab_size=len(tokenizer))
            assert len(t) == min(c, len(full))
            # The same nodes as the c most probable of the full tree, so the same E[a + 1].
            assert d.expected_tokens == pytest.approx(expected[c])


def test_adaptive_drafter_is_lossless_and_predicts(lm, tokenizer):
    from racer_ref import Drafter
    from racer_ref.decoding import generate

    prompt = encode_prompt(tokenizer, "One two three four, one two three four, one two", chat=False)
    truth = greedy_reference(lm, prompt, 32)
    ctrl = CapacityController({1: 1.0, 4: 1.3, 16: 2.5}, min_timed=None)
    drafter = AdaptiveDrafter(Drafter("racer", vocab_size=len(tokenizer), capacity=16, tree="expected"), ctrl)
    result = generate(lm, tokenizer, prompt, max_new_tokens=32, drafter=drafter)
    drafter.finalize(result)
    assert result.token_ids == truth
    assert [s.capacity for s in drafter.steps] == ctrl.used
    assert all(len(s.tree) <= s.capacity for s in drafter.steps)
    rep = ctrl.report()
    assert rep["steps_predicted"] == len(drafter.steps)
    assert rep["realised_tokens_per_step"] == pytest.approx(
        sum(len(s.accepted) for s in drafter.steps) / len(drafter.steps), abs=1e-3)
    assert rep["predicted_tokens_per_step"] >= 1.0
    # A drafter without estimates gets its full tree every step.
    ctrl = CapacityController({1: 1.0, 4: 1.0}, min_timed=None)
    oracle = AdaptiveDrafter(OracleDrafter(prompt, truth, len(tokenizer), depth=4, wrong=1), ctrl)
    result = generate(lm, tokenizer, prompt, max_new_tokens=24, drafter=oracle)
    assert result.token_ids == truth[:24] and set(ctrl.used) == {4}


def test_profile_forward_measures_every_size(lm):
    prof = profile_forward(lm, [1, 4, 16], prefix_length=32, repeats=1, use_cache=False)
    assert sorted(prof) == [1, 4, 16] and all(v > 0 for v in prof.values())
    assert prof[1] <= prof[4] <= prof[16]  # made monotone: a bigger pass never costs less
    with pytest.raises(ValueError, match="sizes"):
        profile_forward(lm, [0, 4])


def test_run_bench_capacity_variants_auto_and_repeats(lm, tokenizer, tmp_path):
    methods = ["ar", "racer@4", "racer@auto"]
    rows = B.run_bench(lm, tokenizer, PROMPTS[:2], methods, tmp_path, max_new_tokens=8,
                       capacity=64, progress=False, warmup=False, repeats=2)
    assert [r["method"] for r in rows] == methods * 2
    for r in rows:
        assert r["matches_ar"] is True
        assert len(r["wall_s_runs"]) == 2 and r["wall_s"] == min(r["wall_s_runs"])
    fixed = [r for r in rows if r["method"] == "racer@4"]
    assert all(r["capacity"] == 4 for r in fixed)
    auto = [r for r in rows if r["method"] == "racer@auto"]
    assert all(r["capacity"] == "auto" and sum(r["capacity_used"].values()) == r["steps"] for r in auto)
    meta = json.loads((tmp_path / "meta.json").read_text())
    report = meta["capacity_auto"]["racer@auto"]
    assert str(report["choice"]) in report["step_ms"] and meta["repeats"] == 2
    summary = (tmp_path / "summary.md").read_text()
    assert "`racer@auto` capacity auto: used " in summary and "shortest of the repeats" in summary
    assert "tokens per step predicted " in summary  # predicted vs realised
    # the controller saw every step of both repeats (the rows keep the first run's)
    assert sum(report["used"].values()) == 2 * sum(r["steps"] for r in auto)
    assert report["steps_predicted"] == 2 * sum(r["steps"] for r in auto)
    # The acceptance estimates' calibration, per method, as a plot.
    cal = meta["calibration"]["racer@4"]
    # (the tiny random model rarely gives a root with candidates: few or no labels here)
    assert len(cal["calibration_seen"]) == len(cal["calibration_predicted"]) == 10
    assert all(a <= n for a, n in zip(cal["calibration_accepted"], cal["calibration_seen"]))
    assert (tmp_path / "calibration.png").is_file() and "calibration.png" in summary
    assert "| `racer@4` | 2 | 16 |" in summary


def test_shared_drafter_state_keeps_one_drafter_per_method(lm, tokenizer, tmp_path):
    # The paper's evaluation mode: one drafter per method across all prompts. The same
    # prompt run twice drafts from what the first run left, so the second run's retrieval
    # finds the whole continuation; per request, both runs are the same.
    prompts = [PROMPTS[0], Prompt("p0-again", "prose", PROMPTS[0].text)]
    methods = ["ar", "retrieval", "racer@auto"]
    shared = B.run_bench(lm, tokenizer, prompts, methods, tmp_path / "shared", max_new_tokens=12,
                         capacity=16, progress=False, warmup=False, drafter_state="shared")
    fresh = B.run_bench(lm, tokenizer, prompts, methods, tmp_path / "fresh", max_new_tokens=12,
                        capacity=16, progress=False, warmup=False)
    assert all(r["matches_ar"] is True for r in shared + fresh)

    def mat(rows, method, pid):
        return next(r["mean_accepted_tokens"] for r in rows if r["method"] == method and r["prompt_id"] == pid)

    assert mat(fresh, "retrieval", "p0") == mat(fresh, "retrieval", "p0-again")
    assert mat(shared, "retrieval", "p0") == mat(fresh, "retrieval", "p0")
    assert mat(shared, "retrieval", "p0-again") > mat(shared, "retrieval", "p0")
    auto = [r for r in shared if r["method"] == "racer@auto"]
    assert all(sum(r["capacity_used"].values()) == r["steps"] for r in auto)
    assert json.loads((tmp_path / "shared" / "meta.json").read_text())["drafter_state"] == "shared"
    assert "- drafter state: per-request" in (tmp_path / "fresh" / "summary.md").read_text()
    runner = B.MethodRunner(lm, tokenizer, max_new_tokens=4, capacity=8, drafter_state="shared")
    runner.run("racer", [1, 2, 3])
    first = runner.drafters["racer@8"]
    runner.run("racer", [1, 2, 3])
    assert runner.drafters == {"racer@8": first}
    with pytest.raises(ValueError, match="drafter_state"):
        B.MethodRunner(lm, tokenizer, drafter_state="global")


@pytest.mark.shared_data("specbench")
def test_gpu_check_script_dry_run_on_cpu(tmp_path, tokenizer):
    """benchmarks/gpu_check.py is only run on a GPU machine; its --dry-run runs it on the CPU."""
    import importlib.util
    from pathlib import Path

    folder = tmp_path / "model"
    tiny_model("llama", vocab_size=len(tokenizer), seed=3, scale=4.0, max_positions=512).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    path = Path(__file__).parents[1] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--device", "cpu", "--dry-run", "--model", str(folder), "--out", str(tmp_path / "o")]) == 0
    table = (tmp_path / "o" / "gpu_check.md").read_text()
    for method in module.LOSSLESS_METHODS:
        assert f"| lossless | fp32 | `{method}` | 2 |  |  |  |  | 2/2 |" in table
    for name in ("humaneval", "specbench"):
        for method in module.BENCH_METHODS:
            assert f"| bench | {name} (2) | `{method}` | 2 |" in table
        assert len(S.read_results(tmp_path / "o" / name)) == 2 * len(module.BENCH_METHODS)
    assert "CUT" not in table


# ----------------------------------------------------------------------------- the protocol: turns, state, warm-up


TWO_TURNS = [
    Prompt("q1", "writing", "Write one line about cats.", follow_ups=("Now the same about dogs.",)),
    Prompt("q2", "translation", "Translate: le chat."),
    Prompt("q3", "roleplay", "Pretend to be a pirate.", follow_ups=("What is your ship called?",)),
]


def _record_runs(monkeypatch):
    """Wrap MethodRunner.run to record (method, prompt ids, max_new_tokens) of every call."""
    calls = []
    original = B.MethodRunner.run

    def run(self, method, prompt_ids, max_new_tokens=None, **kwargs):
        calls.append((method, list(prompt_ids), max_new_tokens))
        return original(self, method, prompt_ids, max_new_tokens=max_new_tokens, **kwargs)

    monkeypatch.setattr(B.MethodRunner, "run", run)
    return calls


def test_two_turn_questions_ask_turn_two_after_ars_answer(lm, tokenizer, tmp_path, monkeypatch):
    from racer_ref.harness.datasets import answer_text, encode_conversation, encode_prompt

    calls = _record_runs(monkeypatch)
    methods = ["ar", "hf-greedy", "racer"]
    rows = B.run_bench(lm, tokenizer, TWO_TURNS, methods, tmp_path, max_new_tokens=10, capacity=8,
                       progress=False, warmup=1, warmup_tokens=4)
    # Two generations per method for each two-turn question, one for the one-turn prompt.
    assert len(rows) == (2 + 1 + 2) * len(methods)
    assert [(r["prompt_id"], r["turn"]) for r in rows[:: len(methods)]] == [
        ("q1", 1), ("q1", 2), ("q2", 1), ("q3", 1), ("q3", 2)]
    # The warm-up ran every method on both turns of the first question, with 4 new tokens.
    warm = [c for c in calls if c[2] == 4]
    assert calls[: len(warm)] == warm and sorted(c[0] for c in warm) == sorted(methods * 2)
    timed = calls[len(warm):]
    assert len(timed) == len(rows)
    by_turn = {}
    for method, ids, _ in timed:
        by_turn.setdefault(len(ids), set()).add(method)
    for prompt in (TWO_TURNS[0], TWO_TURNS[2]):
        ar1 = next(r for r in rows if r["prompt_id"] == prompt.prompt_id and r["method"] == "ar" and r["turn"] == 1)
        first_ids = encode_prompt(tokenizer, prompt.text)
        assert ar1["prompt_tokens"] == len(first_ids)
        # ar's token ids, rebuilt from the timed call for turn 1 (the rows keep the text).
        expected = encode_conversation(tokenizer, prompt.turns, [ar1["text"].strip()])
        seen = [ids for m, ids, _ in timed if ids[: len(first_ids)] == first_ids and len(ids) > len(first_ids)]
        # Every method saw the same turn-2 prompt: turn 1's prompt, ar's answer, the follow-up.
        assert len(seen) == len(methods) and all(ids == expected for ids in seen)
        text = tokenizer.decode(expected)
        assert ar1["text"].strip() in text and text.rstrip().endswith("assistant")
        assert prompt.follow_ups[0] in text
        two = [r for r in rows if r["prompt_id"] == prompt.prompt_id and r["turn"] == 2]
        assert all(r["prompt_tokens"] == len(expected) and r["context_from"] == "ar" for r in two)
        assert all(r["matches_ar"] is True and r["context_is_own_answer"] is True for r in two)
        assert answer_text(tokenizer, tokenizer(ar1["text"])["input_ids"]) == ar1["text"].strip()
    assert all(r["context_from"] is None and r["context_is_own_answer"] is None for r in rows if r["turn"] == 1)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert (meta["turns"], meta["context_method"], meta["n_prompts"], meta["n_generations"]) == ("all", "ar", 3, 5)
    assert (meta["warmup_runs"], meta["warmup_tokens"], meta["drafter_state"]) == (1, 4, "per-request")
    assert meta["multi_turn_prompts"] == 2
    summary = (tmp_path / "summary.md").read_text()
    assert "### Per turn" in summary and "- turns: all" in summary and "- warmup runs: 1" in summary
    assert "| `ar` | 2 | 2 | 20 | 18 | 1.00 |" in summary  # ar's turn 2: 2 generations, 20 tokens
    assert "| `racer` | all | 5 | 50 |" in summary
    assert "| `racer` | 5 | 50 |" in summary  # overall: 5 generations


def test_first_turn_only_keeps_one_generation_per_question(lm, tokenizer, tmp_path, monkeypatch):
    calls = _record_runs(monkeypatch)
    rows = B.run_bench(lm, tokenizer, TWO_TURNS, ["ar", "racer"], tmp_path, max_new_tokens=6, capacity=8,
                       progress=False, warmup=False, turns="first")
    assert [(r["prompt_id"], r["turn"]) for r in rows] == [(p.prompt_id, 1) for p in TWO_TURNS for _ in "ab"]
    assert len(calls) == len(rows)
    assert all("Now the same about dogs" not in tokenizer.decode(ids) for _, ids, _ in calls)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["turns"] == "first" and meta["context_method"] is None and meta["n_generations"] == 3
    assert meta["warmup_runs"] == 0 and meta["warmup_tokens"] is None
    assert "### Per turn" not in (tmp_path / "summary.md").read_text()


def test_turn_two_context_comes_from_the_first_method_without_ar(lm, tokenizer, tmp_path, monkeypatch):
    calls = _record_runs(monkeypatch)
    rows = B.run_bench(lm, tokenizer, TWO_TURNS[:1], ["retrieval", "racer"], tmp_path, max_new_tokens=6,
                       capacity=8, progress=False, warmup=False)
    assert {r["context_from"] for r in rows if r["turn"] == 2} == {"retrieval"}
    assert all(r["matches_ar"] is None for r in rows)
    turn2 = [ids for _, ids, _ in calls[2:]]
    assert len(turn2) == 2 and turn2[0] == turn2[1]
    assert json.loads((tmp_path / "meta.json").read_text())["context_method"] == "retrieval"


def test_shared_state_carries_every_turn_and_the_warm_up(lm, tokenizer, tmp_path):
    # What a shared drafter knows at the end: every prompt and output it committed, warm-up
    # included; per request no drafter outlives its generation.
    prompts = [TWO_TURNS[1], TWO_TURNS[0]]  # the warm-up question has one turn
    methods = ["ar", "retrieval", "racer"]
    shared = B.run_bench(lm, tokenizer, prompts, methods, tmp_path / "shared", max_new_tokens=8, capacity=16,
                         progress=False, warmup=2, warmup_tokens=5, drafter_state="shared")
    fresh = B.run_bench(lm, tokenizer, prompts, methods, tmp_path / "fresh", max_new_tokens=8, capacity=16,
                        progress=False, warmup=2, warmup_tokens=5)
    assert all(r["matches_ar"] is True for r in shared + fresh)
    meta = json.loads((tmp_path / "shared" / "meta.json").read_text())
    warm_prompt = next(r["prompt_tokens"] for r in shared if r["prompt_id"] == "q2")
    for method in ("retrieval", "racer"):
        mine = [r for r in shared if r["method"] == method]
        assert len(mine) == 3  # q2, q1 turn 1, q1 turn 2
        committed = sum(r["prompt_tokens"] + r["new_tokens"] for r in mine) + 2 * (warm_prompt + 5)
        assert meta["shared_drafters"][f"{method}@16"]["committed_tokens"] == committed
        assert meta["shared_drafters"][f"{method}@16"]["automaton_nodes"] > 0
    assert "shared_drafters" not in json.loads((tmp_path / "fresh" / "meta.json").read_text())
    # The same generations, so the per-request tokens agree; the shared automaton has seen
    # q2 (three times) and q1's first turn before q1's second turn: retrieval drafts there
    # from more, and its trees differ.
    key = lambda rows, m: [(r["prompt_id"], r["turn"], r["text"]) for r in rows if r["method"] == m]  # noqa: E731
    assert key(shared, "racer") == key(fresh, "racer")
    steps = lambda rows, m: [r["accepted_lengths"] for r in rows if r["method"] == m]  # noqa: E731
    assert steps(shared, "retrieval") != steps(fresh, "retrieval")


def test_protocol_options_are_checked_before_anything_is_written(lm, tokenizer, tmp_path):
    for kwargs, message in [
        (dict(turns="both"), r"turns: expected one of all, first, got 'both'"),
        (dict(warmup=-1), r"warmup: expected a bool or an integer >= 0"),
        (dict(warmup=1.5), r"warmup: expected a bool or an integer >= 0"),
        (dict(warmup_tokens=0), r"warmup_tokens: expected an integer >= 1 or None"),
        (dict(drafter_state="global"), r"drafter_state: expected one of per-request, shared"),
    ]:
        with pytest.raises(ValueError, match=message):
            B.run_bench(lm, tokenizer, TWO_TURNS, ["ar"], tmp_path / "x", progress=False, **kwargs)
    assert not (tmp_path / "x").exists()
    assert B.parse_turns(" First ") == "first"


@pytest.mark.parametrize("argv, named", [
    (["--turns", "both"], "--turns"),
    (["--warmup", "-1"], "--warmup"),
    (["--warmup", "two"], "--warmup"),
    (["--warmup-tokens", "0"], "--warmup-tokens"),
    (["--drafter-state", "global"], "--drafter-state"),
])
def test_bench_cli_names_the_bad_argument(argv, named, capsys):
    from racer_ref.app.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--dataset", "specbench"] + argv)
    err = capsys.readouterr().err
    assert f"argument {named}:" in err


def test_bench_cli_protocol_defaults_and_values():
    from racer_ref.app.cli import build_parser

    args = build_parser().parse_args(["bench", "--dataset", "specbench"])
    assert (args.turns, args.warmup, args.warmup_tokens, args.drafter_state) == ("all", 1, 16, "per-request")
    args = build_parser().parse_args(["bench", "--dataset", "specbench", "--turns", "first", "--warmup", "3",
                                      "--warmup-tokens", "full", "--drafter-state", "shared"])
    assert (args.turns, args.warmup, args.warmup_tokens, args.drafter_state) == ("first", 3, None, "shared")


def test_speedups_and_mat_per_turn_from_rows(tmp_path):
    # One question, two turns: rows of a turn pair only with the same turn of the baseline.
    rows = [
        _row("ar", "q", "w", 10, 1.0, [0] * 9), _row("ar", "q", "w", 10, 2.0, [0] * 9),
        _row("racer", "q", "w", 10, 0.5, [1, 2, 0, 3]), _row("racer", "q", "w", 10, 0.5, [4, 4]),
    ]
    rows[1]["turn"] = rows[3]["turn"] = 2
    assert S.speedup(rows, "racer", "ar", turn=1) == pytest.approx(2.0)
    assert S.speedup(rows, "racer", "ar", turn=2) == pytest.approx(4.0)
    assert S.speedup(rows, "racer", "ar") == pytest.approx(3.0)  # 3 s vs 1 s for 20 tokens each
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = B.summarize(tmp_path, plots=False)
    assert "| `racer` | 1 | 1 | 10 | 4 | 2.50 | 20.0 | 2.00x | n/a |" in text
    assert "| `racer` | 2 | 1 | 10 | 2 | 5.00 | 20.0 | 4.00x | n/a |" in text
    assert "| `racer` | all | 2 | 20 | 6 | 3.33 | 20.0 | 3.00x | n/a |" in text
    assert "| `racer` | 2 | 20 | 6 | 3.33 |" in text  # overall: 2 generations of one question


def test_the_run_methods_are_the_drafting_methods_and_the_baselines():
    """One list of drafting methods (racer_ref.tree.METHODS); the harness's list only orders them with the baselines."""
    from racer_ref.harness.baselines import HF_METHODS
    from racer_ref.harness.summary import RUN_METHODS
    from racer_ref.tree import METHODS

    assert sorted(RUN_METHODS) == sorted(METHODS + HF_METHODS) and RUN_METHODS[0] == "ar"
