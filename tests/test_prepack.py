"""MKL prepacked weights (racer_ref.speedups.prepack): same outputs, right calls routed, clean errors."""

from __future__ import annotations

import pytest
import torch

from models import greedy_reference, single_thread, tiny_model  # noqa: F401
from racer_ref.decoding import generate
from racer_ref.speedups.prepack import (DEFAULT_MAX_ROWS, DEFAULT_MIN_ROWS, maybe_prepack, prepack_linear_weights,
                               prepack_support, prepacked_layer_count)

HAS_MKL = bool(torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear"))
needs_mkl = pytest.mark.skipif(not HAS_MKL, reason="this PyTorch build has no MKL packed GEMM")


def linears(model):
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def logits(model, n_tokens, seed=0):
    ids = torch.randint(0, 128, (1, n_tokens), generator=torch.Generator().manual_seed(seed))
    with torch.inference_mode():
        return model(input_ids=ids).logits[0]


@needs_mkl
def test_packed_rows_close_other_rows_bit_identical_and_restore():
    model = tiny_model("llama")
    before = {n: logits(model, n) for n in (1, 3, 4, 8, 32, 33)}
    handle = prepack_linear_weights(model)
    assert len(handle.layers) == len(linears(model)) == prepacked_layer_count(model) == 15  # 2x7 + lm_head
    for n, want in before.items():
        got = logits(model, n)
        if DEFAULT_MIN_ROWS <= n <= DEFAULT_MAX_ROWS:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        else:  # 1-token steps and prefill-sized calls take nn.Linear's own path
            assert torch.equal(got, want), n
    # The packed path really runs: switch it off and a packed-size pass changes in the last bits
    # or not at all, but switching it back gives the packed result again exactly.
    packed8 = logits(model, 8)
    handle.enabled = False
    assert torch.equal(logits(model, 8), before[8])
    handle.enabled = True
    assert torch.equal(logits(model, 8), packed8)
    handle.restore()
    assert prepacked_layer_count(model) == 0 and handle.layers == []
    assert all("forward" not in m.__dict__ for m in linears(model))
    for n, want in before.items():
        assert torch.equal(logits(model, n), want), n


@needs_mkl
@pytest.mark.parametrize("method", ["racer", "logits", "retrieval"])
def test_generate_with_prepacked_model_equals_greedy(method):
    model = tiny_model("llama")
    prompt = (torch.randint(0, 128, (9,), generator=torch.Generator().manual_seed(2)).tolist() * 4)[:34]
    want = greedy_reference(model, prompt, 40)
    handle = prepack_linear_weights(model)
    try:
        for capacity in (8, 16):  # verify passes inside the packed row range
            result = generate(model, None, prompt, max_new_tokens=40, method=method, capacity=capacity)
            assert result.token_ids == want, (method, capacity)
            assert max(result.tree_sizes) > DEFAULT_MIN_ROWS  # some passes did go through the packed path
    finally:
        handle.restore()


@needs_mkl
def test_non_contiguous_and_batched_inputs():
    model = tiny_model("llama")
    layer = linears(model)[0]
    x = torch.randn(layer.in_features, 8).t()  # (8, in) view, not contiguous
    y3 = torch.randn(2, 3, layer.in_features)  # 6 rows over two leading dimensions
    with torch.inference_mode():
        want_x, want_3 = layer(x), layer(y3)
        handle = prepack_linear_weights(model)
        got_x, got_3 = layer(x), layer(y3)
    handle.restore()
    assert got_x.shape == (8, layer.out_features) and got_3.shape == (2, 3, layer.out_features)
    torch.testing.assert_close(got_x, want_x, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_3, want_3, rtol=1e-4, atol=1e-4)


@needs_mkl
def test_grad_mode_uses_the_original_forward():
    model = tiny_model("llama")
    handle = prepack_linear_weights(model)
    try:
        layer = linears(model)[0]
        x = torch.randn(8, layer.in_features, requires_grad=True)
        y = layer(x)
        assert y.grad_fn is not None  # autograd path, not the packed (no-grad) product
        y.sum().backward()
        assert x.grad is not None and x.grad.shape == x.shape
    finally:
        handle.restore()


@needs_mkl
@pytest.mark.parametrize("kwargs, word", [({"min_rows": 0}, "min_rows"), ({"min_rows": 2.0}, "min_rows"),
                                          ({"min_rows": 8, "max_rows": 4}, "max_rows"),
                                          ({"max_rows": True}, "max_rows")])
def test_bad_row_ranges_raise_before_changing_the_model(kwargs, word):
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=word):
        prepack_linear_weights(model, **kwargs)
    assert prepacked_layer_count(model) == 0


@needs_mkl
def test_prepacking_twice_is_refused_and_the_first_packing_stays():
    model = tiny_model("llama")
    handle = prepack_linear_weights(model)
    with pytest.raises(ValueError, match="already prepacked"):
        prepack_linear_weights(model)
    assert prepacked_layer_count(model) == 15
    handle.restore()
    prepack_linear_weights(model).restore()  # after restore() it works again


def test_support_reasons_and_maybe_prepack_modes():
    half = tiny_model("llama", dtype=torch.float16)
    ok, why = prepack_support(half)
    assert not ok and "float32" in why
    assert maybe_prepack(half, "auto") is None and maybe_prepack(half, "off") is None
    with pytest.raises(RuntimeError, match="float32"):
        maybe_prepack(half, "on")
    assert prepacked_layer_count(half) == 0
    with pytest.raises(ValueError, match="prepack"):
        maybe_prepack(half, "yes")
    with pytest.raises(RuntimeError, match="no parameters"):
        prepack_linear_weights(torch.nn.Module())
    model = tiny_model("llama")
    assert maybe_prepack(model, "off") is None and prepacked_layer_count(model) == 0
    handle = maybe_prepack(model, "auto")
    assert (handle is not None) == HAS_MKL
    if handle is not None:
        assert prepacked_layer_count(model) == 15
        handle.restore()


@needs_mkl
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
def test_wrong_width_subclasses_empty_layers_and_autocast_keep_the_original_path():
    class Doubled(torch.nn.Linear):  # e.g. an adapter: its own forward must survive
        def forward(self, x):
            return super().forward(x) * 2

    model = torch.nn.Sequential(torch.nn.Linear(16, 8), Doubled(8, 8), torch.nn.Linear(0, 4))
    handle = prepack_linear_weights(model)
    try:
        assert handle.layers == [model[0]] and prepacked_layer_count(model) == 1
        with torch.inference_mode():
            with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
                model[0](torch.randn(8, 17))  # the same error as nn.Linear, not a wild read
            x = torch.randn(8, 8)
            assert torch.equal(model[1](x), torch.nn.functional.linear(x, model[1].weight, model[1].bias) * 2)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                assert model[0](torch.randn(8, 16)).dtype == torch.bfloat16
            assert model[0](torch.randn(8, 16)).dtype == torch.float32
    finally:
        handle.restore()
    with pytest.raises(ValueError, match="max_rows"):
        prepack_linear_weights(model, max_rows=2**63)
    assert prepacked_layer_count(model) == 0


def test_cli_prepack_on_where_impossible_exits_with_a_message(tmp_path):
    from racer_ref import cli

    folder = tmp_path / "half"
    tiny_model("llama", dtype=torch.float16).save_pretrained(folder)
    from racer_ref.harness.models import load_default_tokenizer

    load_default_tokenizer().save_pretrained(folder)
    with pytest.raises(SystemExit, match="--prepack on: model: cannot prepack: .*float32"):
        cli.main(["generate", "--model", str(folder), "--device", "cpu", "--dtype", "fp16",
                  "--prepack", "on", "--max-new-tokens", "2", "hi"])
