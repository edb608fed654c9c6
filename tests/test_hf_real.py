"""``model.generate(custom_generate=racer_decoding)`` on the real default model
(SmolLM2-135M-Instruct, fp32, CPU) against plain ``model.generate``: short (24 new tokens)."""

from __future__ import annotations

import pytest
import torch

from racer_ref.harness.models import load_default_model
from racer_ref.integrations.hf import racer_decoding

NEW = 24
PASSAGE = ("The old lighthouse keeper climbed the spiral stairs every evening, lit the great lamp, "
           "and watched the ships pass safely through the narrow channel below.")
PROMPT = f"Repeat the text exactly.\nText: {PASSAGE}\nRepeat: {PASSAGE}\nRepeat:"


@pytest.fixture(scope="module")
def default_model():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # faster than two threads when other jobs share the cores
    model, tokenizer = load_default_model()
    yield model, tokenizer
    torch.set_num_threads(before)


def test_custom_generate_equals_model_generate_on_the_default_model(default_model):
    model, tokenizer = default_model
    inputs = tokenizer(PROMPT, return_tensors="pt")
    expected = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, repetition_penalty=1.1)
    out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, repetition_penalty=1.1,
                         custom_generate=racer_decoding, return_dict_in_generate=True)
    assert out.sequences.dtype == torch.int64
    assert torch.equal(out.sequences, expected)
    assert out.mean_accepted_tokens >= 3.0  # the repeated passage is drafted and accepted in blocks
