"""generate() on the real default model (SmolLM2-135M-Instruct, fp32, CPU): equal to greedy.

Kept short (two prompts, 24 new tokens) so that it runs in the normal suite; what breaks when
the tree mask or the KV-cache gather is wrong is shown on tiny models in test_generate.py.
"""

from __future__ import annotations

import pytest
import torch
from transformers import TextIteratorStreamer

from racer_ref.decoding import generate
from racer_ref.harness.models import load_default_model

NEW = 24
PASSAGE = ("The old lighthouse keeper climbed the spiral stairs every evening, lit the great lamp, "
           "and watched the ships pass safely through the narrow channel below.")
PROMPTS = {
    "open": "The capital of France is",
    "verbatim": f"Repeat the text exactly.\nText: {PASSAGE}\nRepeat: {PASSAGE}\nRepeat:",
}


@pytest.fixture(scope="module")
def default_model():
    before = torch.get_num_threads()
    # One thread: several times faster than two when other jobs share the two cores.
    torch.set_num_threads(1)
    model, tokenizer = load_default_model()
    yield model, tokenizer
    torch.set_num_threads(before)


def greedy(model, tokenizer, prompt):
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False)
    return out[0, ids.shape[1]:].tolist()


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_default_model_racer_equals_greedy(default_model, name):
    model, tokenizer = default_model
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    result = generate(model, tokenizer, PROMPTS[name], max_new_tokens=NEW, streamer=streamer)
    expected = greedy(model, tokenizer, PROMPTS[name])
    assert result.token_ids == expected
    assert result.text == tokenizer.decode(expected, skip_special_tokens=True)
    assert "".join(streamer) == result.text  # a transformers streamer works as with model.generate
    if name == "verbatim":
        # the repeated passage is drafted by retrieval and accepted in long blocks
        assert result.mean_accepted_tokens >= 4.0
        assert PASSAGE.startswith(result.text.strip())


def test_default_model_with_cpu_kernels_equals_stock_greedy(default_model):
    """The measured CPU kernels and the direct forward keep greedy tokens equal to stock
    transformers' on the real model (fp32: identical except at float near-ties, none here)."""
    from racer_ref.speedups.cpu_kernels import speed_up_model, stock_path

    model, tokenizer = default_model
    prior = getattr(model, "racer_cpu_kernels", None)
    if prior is not None:  # generate() installed the fast path in an earlier test: back to stock
        prior.fast_forward.restore()
        prior.restore()
        del model.racer_cpu_kernels
    assert "forward" not in model.__dict__
    expected = {name: greedy(model, tokenizer, prompt) for name, prompt in PROMPTS.items()}
    handle = speed_up_model(model, enabled=True, rounds=1, budget_s=1.0)
    try:
        assert handle.layers and handle.fast_forward is not None
        for name, prompt in PROMPTS.items():
            for method in ("racer", "ar"):
                result = generate(model, tokenizer, prompt, max_new_tokens=NEW, method=method)
                assert result.token_ids == expected[name], (name, method)
            with stock_path(model):  # the stock path really is stock: model.generate as before
                assert greedy(model, tokenizer, prompt) == expected[name]
        assert handle.fast_forward.calls > 0
    finally:
        handle.fast_forward.restore()
        handle.restore()
        del model.racer_cpu_kernels
