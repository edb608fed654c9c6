"""Stop strings are found in the text as it reads after the prompt (issue: a stop string that
begins with a space was missed as the first generated word of a SentencePiece-style
tokenizer, which drops the first token's leading space when it is decoded alone).

The tokenizer is built offline: a word-level model whose pieces carry SentencePiece's
``▁`` word marker (Metaspace pre-tokenizer and decoder), as Llama-2, Mistral and Gemma's do.
"""

from __future__ import annotations

import functools

import pytest

from models import tiny_model
from racer_ref.decoding import generate
from racer_ref.decoding import StopStrings

VOCAB = 128
PROMPT = [5, 6, 7, 8, 9, 10, 11, 12] * 3 + [5, 6, 7]


@functools.lru_cache(maxsize=None)
def sentencepiece_style_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{f"\u2581w{i}": i + 1 for i in range(VOCAB - 1)}}  # token i + 1 reads " w{i}"
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")


@functools.lru_cache(maxsize=None)
def model():
    return tiny_model("llama", vocab_size=VOCAB)


def test_the_tokenizer_drops_the_first_leading_space():
    tok = sentencepiece_style_tokenizer()
    assert tok.decode([4, 5]) == "w3 w4"  # the space before w3 is gone: the fault's cause
    assert tok.decode([3, 4, 5]) == "w2 w3 w4"


@pytest.mark.parametrize("method", ["racer", "ar"])
def test_a_stop_string_with_a_leading_space_stops_at_the_first_word(method):
    tok = sentencepiece_style_tokenizer()
    free = generate(model(), tok, PROMPT, max_new_tokens=12, method=method)
    first = tok.convert_ids_to_tokens(free.token_ids[0]).replace("\u2581", " ")  # " w<n>"
    assert first.startswith(" w")
    result = generate(model(), tok, PROMPT, max_new_tokens=12, method=method, stop=first)
    assert result.stop_reason == "stop_string"
    assert result.token_ids == free.token_ids[:1]


def test_stop_string_text_reads_after_the_prompt():
    tok = sentencepiece_style_tokenizer()
    stops = StopStrings(tok, [" w3"], prompt_ids=[1, 2])
    assert stops.text([4], 1) == " w3"
    assert stops.hit([4])
    assert stops.text([9, 4, 5], 2) == " w3 w4"  # a tail inside the output reads after the tokens before it
    assert not stops.hit([9, 5])
    assert StopStrings(tok, ["w1 w3"], prompt_ids=[2]).hit([4]) is False  # the prompt's text is never searched
