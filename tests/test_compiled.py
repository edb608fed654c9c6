"""Compiled verify passes (racer_ref.speedups.compiled): equal to the eager fast path, lossless
decoding through them, padding, the fallback on a recompile, and bad arguments.

Compiling costs seconds per size even for the tiny model, so one module-scoped model is
compiled once (``autotune=False``: only the small operators are fused) and one test compiles a
size with inductor's C++ matrix kernels (``autotune=True``), the path the real model takes.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from models import greedy_reference, make_tree, tiny_model
from racer_ref.decoding import generate
from racer_ref.speedups import cpu_kernels as ck
from racer_ref.speedups.compiled import compile_passes

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="inductor needs a C++ compiler")

PROMPT = list(range(5, 30))


@pytest.fixture(scope="module")
def compiled_model():
    model = tiny_model("llama")
    want = {n: greedy_reference(model, PROMPT, n) for n in (40,)}
    fast = ck.install_fast_forward(model)
    assert fast is not None
    passes = compile_passes(model, (4, 1), autotune=False)
    return model, fast, passes, want


def eager_and_compiled(model, fast, passes, tree, prefix=PROMPT):
    """Logits of ``tree`` after ``prefix``, eager and compiled, and the cache lengths after."""
    from racer_ref.speedups.kv_cache import growing_cache
    from racer_ref.verify import forward_prompt, forward_tree

    out = {}
    for use in (False, True):
        passes.enabled = use
        with torch.inference_mode():
            cache = growing_cache(model)
            forward_prompt(model, cache, torch.tensor(prefix))
            logits = forward_tree(model, cache, tree)
        out[use] = (logits, cache.get_seq_length())
    passes.enabled = True
    return out


def test_compile_passes_reports_sizes_and_checks(compiled_model):
    model, fast, passes, _ = compiled_model
    assert passes.sizes == [1, 4] and fast.compiled is passes
    assert set(passes.compile_seconds) == {1, 4} and all(t > 0 for t in passes.compile_seconds.values())
    assert all(0 <= e <= 1e-4 for e in passes.max_rel_error.values())
    assert passes.size_for(1) == 1 and passes.size_for(2) == 4 and passes.size_for(4) == 4
    assert passes.size_for(5) is None
    model.racer_cpu_kernels = ck.apply_cpu_kernels(model, enabled=False)
    model.racer_cpu_kernels.fast_forward = fast
    report = ck.kernels_report(model)["compiled_passes"]
    assert report["sizes"] == [1, 4] and set(report["compile_seconds"]) == {"1", "4"}


@pytest.mark.parametrize("n", [1, 3, 4])
def test_compiled_pass_equals_eager_including_padding(compiled_model, n):
    model, fast, passes, _ = compiled_model
    parents = [-1, 0, 0, 1][:n]
    tree = make_tree([7, 8, 9, 10][:n], parents)
    calls = passes.calls
    out = eager_and_compiled(model, fast, passes, tree)
    assert passes.calls == calls + 1  # the compiled run really ran compiled
    (want, want_len), (got, got_len) = out[False], out[True]
    assert got.shape == want.shape == (n, 128)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got_len == want_len == len(PROMPT) + n  # padding rows never reach the cache


def test_trees_larger_than_every_size_take_the_eager_path(compiled_model):
    model, fast, passes, _ = compiled_model
    tree = make_tree([7, 8, 9, 10, 11, 12], [-1, 0, 0, 1, 2, 3])
    calls, eager = passes.calls, fast.calls
    out = eager_and_compiled(model, fast, passes, tree)
    assert passes.calls == calls and fast.calls == eager + 4  # 2 prefills, 2 eager tree passes
    torch.testing.assert_close(out[True][0], out[False][0], rtol=0, atol=0)


@pytest.mark.parametrize("capacity", [1, 4, 8])
def test_greedy_through_compiled_passes_is_lossless(compiled_model, capacity):
    model, fast, passes, want = compiled_model
    calls = passes.calls
    result = generate(model, None, PROMPT, max_new_tokens=40, capacity=capacity)
    assert result.token_ids == want[40]
    assert passes.calls > calls and passes.fallbacks == 0


def test_a_call_that_would_recompile_falls_back_to_the_eager_path(compiled_model):
    model, fast, passes, _ = compiled_model
    saved = list(passes.sizes)
    passes.sizes = [1, 4, 6]  # pretend 6 was compiled: its first call would compile
    try:
        tree = make_tree([7, 8, 9, 10, 11, 12], [-1, 0, 0, 1, 2, 3])
        fallbacks = passes.fallbacks
        out = eager_and_compiled(model, fast, passes, tree)
        assert passes.fallbacks == fallbacks + 1
        assert "recompile" in passes.last_fallback
        torch.testing.assert_close(out[True][0], out[False][0], rtol=0, atol=0)
        assert out[True][1] == out[False][1] == len(PROMPT) + 6
    finally:
        passes.sizes = saved


def test_restore_stops_the_compiled_path():
    model = tiny_model("llama", seed=1)
    fast = ck.install_fast_forward(model)
    passes = compile_passes(model, (1,), autotune=False)
    passes.restore()
    assert fast.compiled is None and not passes.enabled and passes.sizes == []
    assert generate(model, None, PROMPT, max_new_tokens=8).token_ids == greedy_reference(model, PROMPT, 8)
    assert passes.calls == 0


def test_autotuned_cpp_kernels_equal_eager():
    """The real model's path: inductor's C++ matrix kernels timed against ATen's."""
    model = tiny_model("qwen2", seed=2)
    fast = ck.install_fast_forward(model)
    passes = compile_passes(model, (2,), autotune=True)
    tree = make_tree([7, 8], [-1, 0])
    out = eager_and_compiled(model, fast, passes, tree)
    torch.testing.assert_close(out[True][0], out[False][0], rtol=1e-5, atol=1e-5)
    assert passes.calls == 1 and out[True][1] == len(PROMPT) + 2


@pytest.mark.parametrize("sizes", [(), (0,), (1025,), ("a",), (True,), None])
def test_bad_sizes_are_refused_before_anything_changes(sizes):
    model = tiny_model("llama", seed=3)
    fast = ck.install_fast_forward(model)
    with pytest.raises(ValueError, match="sizes"):
        compile_passes(model, sizes)
    assert fast.compiled is None


def test_a_model_without_the_direct_forward_is_refused():
    model = tiny_model("gpt2")
    with pytest.raises(ValueError, match="direct forward"):
        compile_passes(model, (1,))
    llama = tiny_model("llama", seed=4, dtype=torch.float64)
    fast = ck.install_fast_forward(llama)
    with pytest.raises(ValueError, match="float32" if fast is not None else "direct forward"):
        compile_passes(llama, (1,))
    assert fast is None or fast.compiled is None


def test_cli_compile_argument():
    import argparse

    from racer_ref.app.cli import _compile_arg

    assert _compile_arg("off") is None
    assert _compile_arg("auto") == "auto"
    assert _compile_arg("16,1,16") == [1, 16]
    for bad in ("", "0", "1,x", "2000", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="pass sizes"):
            _compile_arg(bad)


def test_cli_default_capacity_is_the_largest_compiled_size(compiled_model):
    from racer_ref.app.cli import default_capacity

    model, fast, passes, _ = compiled_model
    assert default_capacity(None, model) == 4
    assert default_capacity(8, model) == 8 and default_capacity("auto", model) == "auto"
    assert default_capacity(None, tiny_model("llama", seed=5)) == 16  # no compiled passes: the CPU default
