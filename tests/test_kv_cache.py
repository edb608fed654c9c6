"""``racer_ref.speedups.kv_cache``: KV cache layers that write in place, bit-identical to DynamicLayer."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from models import greedy_reference, make_tree, single_thread, tiny_model  # noqa: F401
from racer_ref.decoding import generate
from racer_ref.verify import make_cache as _make_cache
from racer_ref.speedups.kv_cache import MIN_SLOTS, GrowingLayer, growing_cache
from racer_ref.verify import forward_prompt, forward_tree, keep_accepted

PROMPT = [3, 9, 27, 81, 5, 15, 45, 7]
TOKENS = [5, 17, 17, 40, 3, 99, 12, 8]
PARENTS = [-1, 0, 0, 1, 1, 2, 3, 3]


def kv(n, seed, heads=2, dim=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, heads, n, dim, generator=g), torch.randn(1, heads, n, dim, generator=g)


def test_update_appends_in_place_and_grows_by_doubling():
    layer, plain = GrowingLayer(), DynamicLayer()
    keys, values = layer.update(*kv(3, 0))
    plain.update(*kv(3, 0))
    buffer = layer._key_buffer
    assert buffer.shape == (1, 2, MIN_SLOTS, 4) and keys.data_ptr() == buffer.data_ptr()
    assert keys.shape == (1, 2, 3, 4) and layer.get_seq_length() == 3
    for step in range(1, 60):  # 3 + 59 * 5 = 298 entries: one reallocation past 256
        keys, values = layer.update(*kv(5, step))
        plain.update(*kv(5, step))
        assert torch.equal(keys, plain.keys) and torch.equal(values, plain.values)
    assert layer.get_seq_length() == 298 and layer._key_buffer.shape[2] == 2 * 258  # doubled when 258 did not fit
    assert layer.keys.data_ptr() == layer._key_buffer.data_ptr()


def test_cropping_keeps_the_buffer_and_a_foreign_tensor_is_adopted():
    layer = GrowingLayer()
    layer.update(*kv(10, 0))
    buffer = layer._key_buffer
    layer.crop(-4)  # a view of the first 6 entries
    layer.update(*kv(2, 1))
    assert layer._key_buffer is buffer and layer.get_seq_length() == 8
    assert torch.equal(layer.keys[:, :, 6:], kv(2, 1)[0])  # written over the cropped slots
    before = layer.keys.clone()
    layer.keys, layer.values = layer.keys[:, :, 2:].clone(), layer.values[:, :, 2:].clone()  # not a buffer view
    keys, _ = layer.update(*kv(1, 2))
    assert layer._key_buffer is not buffer and keys.data_ptr() == layer._key_buffer.data_ptr()
    assert torch.equal(keys[:, :, :6], before[:, :, 2:]) and torch.equal(keys[:, :, 6:], kv(1, 2)[0])
    layer.reset()
    assert layer.get_seq_length() == 0 and layer._key_buffer is None
    assert layer.update(*kv(1, 3))[0].shape == (1, 2, 1, 4)


@pytest.mark.parametrize("kind", ["llama", "gpt2", "qwen2"])
def test_tree_pass_and_accepted_path_are_bit_identical_to_dynamic_layers(kind):
    model = tiny_model(kind)
    results = []
    for cache in (DynamicCache(config=model.config), growing_cache(model)):
        with torch.no_grad():
            forward_prompt(model, cache, torch.tensor(PROMPT))
            first = forward_tree(model, cache, make_tree(TOKENS, PARENTS))
            keep_accepted(cache, len(PROMPT), [0, 2, 5])
            second = forward_tree(model, cache, make_tree(TOKENS[:4], PARENTS[:4]))
        results.append((first, second, [layer.keys.clone() for layer in cache.layers]))
    (f0, s0, k0), (f1, s1, k1) = results
    assert torch.equal(f0, f1) and torch.equal(s0, s1)
    assert all(torch.equal(a, b) for a, b in zip(k0, k1))
    assert k1[0].shape[2] == len(PROMPT) + 3 + 4


def test_generate_uses_growing_layers_for_a_prepared_model_and_still_takes_a_plain_cache():
    model = tiny_model("llama")
    truth = greedy_reference(model, PROMPT * 4, 20)
    # A plain model: transformers' own cache (the student's route has no speed-up on it).
    assert all(type(layer) is DynamicLayer for layer in _make_cache(model, None).layers)
    assert generate(model, None, PROMPT * 4, max_new_tokens=20).token_ids == truth
    # A model prepared by speed_up_model (which leaves its handle there): layers that write in place.
    model.racer_cpu_kernels = object()
    assert all(type(layer) is GrowingLayer for layer in _make_cache(model, None).layers)
    assert generate(model, None, PROMPT * 4, max_new_tokens=20).token_ids == truth
    cache = DynamicCache(config=model.config)
    assert generate(model, None, PROMPT * 4, max_new_tokens=20, cache=cache).token_ids == truth
    assert all(type(layer) is DynamicLayer for layer in cache.layers)
    # And a growing cache passed in, on a plain model.
    del model.racer_cpu_kernels
    cache = growing_cache(model)
    assert generate(model, None, PROMPT * 4, max_new_tokens=20, cache=cache).token_ids == truth
    assert all(type(layer) is GrowingLayer for layer in cache.layers)


def test_growing_cache_needs_a_model():
    for fake in (object(), type("Fake", (), {"config": object()})()):
        with pytest.raises(TypeError, match="model: expected a transformers model"):
            growing_cache(fake)


def test_a_buffer_from_inference_mode_is_replaced_outside_it():
    layer, plain = GrowingLayer(), DynamicLayer()
    with torch.inference_mode():
        layer.update(*kv(4, 0))
        plain.update(*kv(4, 0))
    with torch.no_grad():  # writing into an inference tensor here would raise
        keys, values = layer.update(*kv(2, 1))
        plain.update(*kv(2, 1))
    assert not layer._key_buffer.is_inference()
    assert torch.equal(keys, plain.keys) and torch.equal(values, plain.values)


def test_recorded_passes_keep_their_tensors_for_backward():
    layer = GrowingLayer()
    layer.update(*kv(3, 0))  # a plain prefix in the buffer
    grads = []
    for seed in (1, 2):  # two recorded passes through the same cache, then one backward
        k, v = (t.requires_grad_() for t in kv(2, seed))
        keys, values = layer.update(k, v)
        grads.append(k)
        loss = (keys.sum() + values.sum()) if seed == 1 else loss + keys.sum() + values.sum()
    loss.backward()
    assert all(torch.equal(k.grad, torch.full_like(k, 2.0 if k is grads[0] else 1.0)) for k in grads)
    assert layer.get_seq_length() == 7 and layer._key_buffer is None  # DynamicLayer's path
    keys, _ = layer.update(*kv(1, 3))  # back to no recording: adopted into a new buffer
    assert keys.data_ptr() == layer._key_buffer.data_ptr() and keys.shape[2] == 8


def test_odd_appends_behave_like_dynamic_layer():
    layer = GrowingLayer()
    assert layer.update(*kv(0, 0))[0].shape == (1, 2, 0, 4)  # nothing to append, nothing to fail
    layer.update(*kv(3, 1, heads=2))
    before = layer.keys.clone()
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        layer.update(*kv(1, 2, heads=3))  # other heads than the cached entries: torch.cat's error
    assert torch.equal(layer.keys, before)  # unchanged
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        layer.update(*(t.expand(2, -1, -1, -1) for t in kv(2, 3)))  # batch 2 cannot follow batch 1
    # ... unless the cache was emptied first: then the new batch size is taken, not broadcast
    layer.crop(-layer.get_seq_length())
    keys, _ = layer.update(*(t.expand(2, -1, -1, -1) for t in kv(1, 4)))
    assert keys.shape == (2, 2, 1, 4)
    layer.crop(-1)
    keys, _ = layer.update(*kv(1, 5))
    assert keys.shape == (1, 2, 1, 4) and torch.equal(keys, kv(1, 5)[0])


def test_offload_frees_the_buffers():
    layer = GrowingLayer()
    layer.update(*kv(5, 0))
    layer.offload()
    assert layer._key_buffer is None and layer.keys.shape == (1, 2, 5, 4)
    layer.prefetch()
    keys, _ = layer.update(*kv(1, 1))
    assert keys.shape == (1, 2, 6, 4) and keys.data_ptr() == layer._key_buffer.data_ptr()
