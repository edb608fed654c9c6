"""CPU kernels (racer_ref.speedups.cpu_kernels): the choice logic, the routed layers, the fast forward.

The choice logic is tested with a mocked timer (``measure=``), so it is deterministic; the
kernels themselves are checked against stock ``F.linear`` on tiny random models, and greedy
decoding through them against ``model.generate``.
"""

from __future__ import annotations

import json

import pytest
import torch

from models import greedy_reference, single_thread, tiny_model  # noqa: F401
from racer_ref.decoding import generate
from racer_ref.speedups import cpu_kernels as ck

HAVE = ck.available_kernels()
needs_packed = pytest.mark.skipif(len(HAVE) < 2, reason="this PyTorch build has no packed linear kernels")


def linears(model):
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def logits(model, n_tokens, seed=0):
    ids = torch.randint(0, 128, (1, n_tokens), generator=torch.Generator().manual_seed(seed))
    with torch.inference_mode():
        return model(input_ids=ids).logits[0]


def table_measure(table, calls=None):
    """A mocked timer: seconds from ``table[group][kernel]`` (a number, or {rows: seconds})."""

    def measure(group, kernel, rows):
        if calls is not None:
            calls.append((group, kernel, rows))
        t = table[group][kernel]
        return t[rows] if isinstance(t, dict) else t

    return measure


def forced(kernel_by_class):
    """A timer under which ``kernel_by_class[shape class]`` is the clear winner for both groups."""
    rows_class = {r: c for c, rows in ck.TIMED_ROWS.items() for r in rows}

    def measure(group, kernel, rows):
        return 1.0 if kernel == kernel_by_class[rows_class[rows]] else 2.0

    return measure


# ----------------------------------------------------------------------------- choice logic


def test_choose_kernels_fastest_margin_and_ties():
    timings = {"layers": {"1": {"stock": 1.0, "onednn": 0.8, "mkl": 0.9},
                          "2-64": {"stock": 1.0, "onednn": 0.99, "mkl": 1.2},  # 1% better: within margin
                          "65+": {"stock": 1.0, "onednn": 0.5, "mkl": 0.5}}}  # a tie: KERNELS order
    assert ck.choose_kernels(timings) == {"layers": {"1": "onednn", "2-64": "stock", "65+": "onednn"}}
    assert ck.choose_kernels(timings, margin=0.0)["layers"]["2-64"] == "onednn"
    assert ck.choose_kernels({"g": {"1": {"stock": 1.0, "mkl": 1.5}}}) == {"g": {"1": "stock"}}
    with pytest.raises(ValueError, match="margin"):
        ck.choose_kernels(timings, margin=1.0)
    with pytest.raises(ValueError, match="timings"):
        ck.choose_kernels({"g": {"1": {}}})


def test_shape_classes():
    assert [ck.shape_class(r) for r in (1, 2, 16, 64, 65, 4096)] == ["1", "2-64", "2-64", "2-64", "65+", "65+"]
    with pytest.raises(ValueError, match="rows"):
        ck.shape_class(0)


@needs_packed
def test_choice_from_mocked_timer_is_applied_per_group_and_class():
    model = tiny_model("llama")
    calls = []
    table = {"layers": {"stock": {1: 5, 4: 5, 16: 5, 48: 5, 128: 5},
                        "onednn": {1: 3, 4: 9, 16: 9, 48: 9, 128: 9},
                        "mkl": {1: 9, 4: 2, 16: 2, 48: 2, 128: 9}},
             "lm_head": {"stock": 1.0, "onednn": 2.0, "mkl": 3.0}}
    handle = ck.apply_cpu_kernels(model, enabled=True, rounds=2, measure=table_measure(table, calls))
    want = {"layers": {"1": "onednn", "2-64": "mkl", "65+": "stock"}}
    if "mkl" not in HAVE:
        want = {"layers": {"1": "onednn", "2-64": "stock", "65+": "stock"}}
    if "onednn" not in HAVE:
        want = {"layers": {"1": "stock", "2-64": "mkl", "65+": "stock"}}
    assert handle.choice == {**want, "lm_head": {"1": "stock", "2-64": "stock", "65+": "stock"}}
    # Two interleaved rounds: every (group, row count, kernel) timed twice, round by round.
    per_round = len(calls) // 2
    assert calls[:per_round] == calls[per_round:] and handle.rounds == 2
    assert {c[2] for c in calls} == {1, 4, 16, 48, 128}
    assert handle.timings["layers"]["2-64"]["stock"] == 15  # summed over the timed rows 4, 16, 48
    assert handle.kernel_for("layers", 1) == want["layers"]["1"]
    assert handle.kernel_for("layers", 300) == "stock"
    assert handle.kernel_for("lm_head", 8) == "stock"
    handle.enabled = False
    assert handle.kernel_for("layers", 1) == "stock"
    report = handle.report()
    json.dumps(report)  # JSON-ready for meta.json
    assert report["choice"] == handle.choice and report["layers"] == 15  # 2 blocks x 7 + lm_head
    assert report["timings_ms"]["layers"]["1"]["onednn"] == 3000.0
    assert set(report["max_rel_error"]) == set(HAVE) - {"stock"}
    assert all(e <= ck.TOLERANCE for e in report["max_rel_error"].values())
    assert "cpu_capability" in report and report["cpu"]


@needs_packed
def test_budget_stops_further_rounds():
    model = tiny_model("llama")
    def slow(group, kernel, rows):  # the mocked kernels take no time, but the round does
        return 1.0

    handle = ck.apply_cpu_kernels(model, enabled=True, rounds=5, measure=slow, budget_s=1e-9)
    assert handle.rounds == 1 and handle.choice["layers"]["1"] == "stock"  # all equal: stock


# ----------------------------------------------------------------------------- routed layers


@needs_packed
@pytest.mark.parametrize("kernel", [k for k in HAVE if k != "stock"])
@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2"])
def test_each_kernel_close_to_stock_and_greedy_equal(kind, kernel):
    model = tiny_model(kind)
    sizes = (1, 5, 70)
    before = {n: logits(model, n) for n in sizes}
    prompt = list(range(3, 12))
    want = greedy_reference(model, prompt, 20)
    handle = ck.apply_cpu_kernels(model, enabled=True, measure=forced(dict.fromkeys(ck.SHAPE_CLASSES, kernel)))
    assert handle.choice["lm_head" if "lm_head" in handle.choice else "layers"]["1"] == kernel
    if kind != "gpt2":  # GPT-2's Conv1D layers are not nn.Linear; only its lm_head is routed
        assert handle.choice["layers"] == dict.fromkeys(ck.SHAPE_CLASSES, kernel)
    assert ck.routed_layer_count(model) == len(handle.layers) == len(linears(model))
    for n, ref in before.items():
        got = logits(model, n)
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    assert generate(model, None, prompt, max_new_tokens=20).token_ids == want
    assert generate(model, None, prompt, max_new_tokens=20, method="ar").token_ids == want
    # Switched off for a while: stock again, bit for bit.
    handle.enabled = False
    for n, ref in before.items():
        assert torch.equal(logits(model, n), ref), n
    handle.enabled = True
    handle.restore()
    assert ck.routed_layer_count(model) == 0 and all("forward" not in m.__dict__ for m in linears(model))
    for n, ref in before.items():
        assert torch.equal(logits(model, n), ref), n


@needs_packed
def test_the_chosen_kernel_really_runs(monkeypatch):
    model = tiny_model("llama")
    handle = ck.apply_cpu_kernels(model, enabled=True,
                                  measure=forced({"1": HAVE[1], "2-64": "stock", "65+": HAVE[1]}))
    seen = []
    real = ck._product
    monkeypatch.setattr(ck, "_product", lambda kernel, x, layer, packed: seen.append((kernel, x.shape[0]))
                        or real(kernel, x, layer, packed))
    logits(model, 1)
    assert seen and all(s == (HAVE[1], 1) for s in seen) and len(seen) == len(handle.layers)
    seen.clear()
    logits(model, 8)  # stock for 2-64 rows: nn.Linear's own path, not _product
    assert seen == []
    logits(model, 66)
    assert len(seen) == len(handle.layers) and {s[1] for s in seen} == {66}


@needs_packed
def test_autograd_and_other_dtypes_take_the_stock_path():
    model = tiny_model("llama")
    ids = torch.tensor([[1, 2, 3, 4]])
    want = model(input_ids=ids).logits
    ck.apply_cpu_kernels(model, enabled=True, measure=forced(dict.fromkeys(ck.SHAPE_CLASSES, HAVE[1])))
    got = model(input_ids=ids).logits  # grad enabled, weights require grad: recorded, stock path
    assert torch.equal(got, want)
    got.sum().backward()
    assert model.lm_head.weight.grad is not None
    layer = linears(model)[0]
    x = torch.randn(3, layer.in_features, dtype=torch.float64)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="same dtype"):
        layer(x)  # not fp32: nn.Linear's own path, and its own error


def test_opt_out_and_unsupported_models(monkeypatch):
    model = tiny_model("llama")
    handle = ck.apply_cpu_kernels(model, enabled=False)
    assert handle.layers == [] and handle.reason == "switched off" and ck.routed_layer_count(model) == 0
    assert handle.describe().startswith("cpu kernels: stock")
    monkeypatch.setenv(ck.ENV_SWITCH, "off")
    handle = ck.apply_cpu_kernels(model)
    assert handle.layers == [] and ck.ENV_SWITCH in handle.reason
    monkeypatch.delenv(ck.ENV_SWITCH)
    half = tiny_model("llama", dtype=torch.bfloat16)
    handle = ck.apply_cpu_kernels(half, enabled=True)
    assert handle.layers == [] and "float32" in handle.reason
    assert ck.cpu_kernel_support(torch.nn.Sequential(torch.nn.ReLU()))[0] is False
    json.dumps(handle.report())


@needs_packed
def test_bad_arguments_and_double_application():
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="kernels"):
        ck.apply_cpu_kernels(model, kernels=("stock", "cublas"))
    with pytest.raises(ValueError, match="rounds"):
        ck.apply_cpu_kernels(model, rounds=0)
    with pytest.raises(ValueError, match="budget_s"):
        ck.apply_cpu_kernels(model, budget_s=0)
    assert ck.routed_layer_count(model) == 0
    ck.apply_cpu_kernels(model, enabled=True, measure=forced(dict.fromkeys(ck.SHAPE_CLASSES, HAVE[1])))
    with pytest.raises(ValueError, match="already routed"):
        ck.apply_cpu_kernels(model, enabled=True)


@needs_packed
def test_real_timer_runs_and_keeps_outputs_close():
    model = tiny_model("qwen2")
    ref = logits(model, 6)
    handle = ck.apply_cpu_kernels(model, enabled=True, rounds=2)
    assert set(handle.timings) == {"layers", "lm_head"}
    for group in handle.timings.values():
        assert set(group) == set(ck.SHAPE_CLASSES)
        for times in group.values():
            assert set(times) == set(HAVE) and all(t > 0 for t in times.values())
    torch.testing.assert_close(logits(model, 6), ref, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- fast forward


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_fast_forward_equals_model_forward_and_greedy(kind):
    from racer_ref.speedups.kv_cache import growing_cache
    from racer_ref.verify import forward_prompt, forward_tree

    from models import make_tree

    model = tiny_model(kind)
    prompt = list(range(5, 30))
    want = greedy_reference(model, prompt, 24)
    tree = make_tree([7, 8, 9, 10, 11, 12], [-1, 0, 0, 1, 2, 3])
    outs = {}
    for fast in (False, True):
        ff = ck.install_fast_forward(model) if fast else None
        assert (ff is not None) == fast
        with torch.inference_mode():
            cache = growing_cache(model)
            pre = forward_prompt(model, cache, torch.tensor(prompt))
            one = forward_tree(model, cache, make_tree([3], [-1]))
            tr = forward_tree(model, cache, tree)
        outs[fast] = (pre, one, tr)
        if fast:
            assert ff.calls == 3
    for a, b in zip(outs[False], outs[True]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    assert generate(model, None, prompt, max_new_tokens=24).token_ids == want
    calls = ff.calls
    assert greedy_reference(model, prompt, 5) == want[:5]  # model.generate: its own forward
    assert ff.fallbacks > 0 and ff.calls == calls
    ff.restore()
    assert "forward" not in model.__dict__


def test_fast_forward_refuses_unknown_architectures_and_training_mode():
    assert ck.install_fast_forward(tiny_model("gpt2")) is None
    assert "GPT2LMHeadModel" in ck.fast_forward_support(tiny_model("gpt2"))[1]
    model = tiny_model("llama").train()
    assert ck.install_fast_forward(model) is None and "training" in ck.fast_forward_support(model)[1]


def test_fast_forward_falls_back_for_calls_it_does_not_compute():
    model = tiny_model("llama")
    ff = ck.install_fast_forward(model)
    ids = torch.tensor([[1, 2, 3, 4]])
    want = type(model).forward(model, input_ids=ids).logits
    # grad enabled, no cache, an extra argument: all the model's own forward
    assert torch.equal(model(input_ids=ids).logits, want)
    with torch.inference_mode():
        model(input_ids=ids, output_hidden_states=True)
        model(ids)
    assert ff.calls == 0 and ff.fallbacks == 3
