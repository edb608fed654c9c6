"""RACER inside ``model.generate()`` (racer_ref.integrations.hf) and logits processors on a draft tree
(racer_ref.integrations.processing), on tiny random models: equal to plain ``model.generate``.

Greedy: token for token, for each processor. Sampling: the target distribution of every
tree node equals plain decoding's after the same tokens (exactly, from the model's own
forward pass on that prefix), and a two-sample chi-square test on sampled outputs.
"""

from __future__ import annotations

import functools
import warnings
from typing import List

import numpy as np
import pytest
import torch
from transformers import (LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList,
                          StopStringCriteria)

from models import make_tree, single_thread, tiny_model  # noqa: F401  (single_thread: autouse)
from racer_ref.decoding import generate
from racer_ref.integrations.hf import RacerDecoderOnlyOutput, racer_decoding
from racer_ref.integrations.processing import TreeLogitsProcessor, processors_from_generation_config

# A prompt that repeats itself, so that the drafters find something and trees get deep.
PROMPT = [7, 3, 9, 12, 5, 7, 3, 9, 12, 5, 7, 3]
NEW = 40


@functools.lru_cache(maxsize=None)
def model(kind: str = "llama", eos: int = -1) -> torch.nn.Module:
    return tiny_model(kind, eos_token_id=None if eos < 0 else eos)


def plain(m, prompt=PROMPT, **kwargs) -> torch.Tensor:
    ids = torch.tensor([prompt])
    return m.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)


def racer(m, prompt=PROMPT, **kwargs):
    return plain(m, prompt, custom_generate=racer_decoding, **kwargs)


def new_tokens(out: torch.Tensor) -> List[int]:
    return out[0, len(PROMPT):].tolist()


@functools.lru_cache(maxsize=None)
def _baseline(kind: str) -> tuple:
    return tuple(new_tokens(plain(model(kind), max_new_tokens=NEW, do_sample=False)))


def baseline(kind: str = "llama") -> List[int]:
    """Greedy new tokens of the tiny ``kind`` model without EOS or processors."""
    return list(_baseline(kind))


def settings_for(name: str, kind: str) -> dict:
    """Settings of one processor, chosen so that it changes this model's greedy output."""
    base = baseline(kind)
    frequent = max(set(base), key=base.count)
    return {
        "repetition_penalty": dict(repetition_penalty=1.8),
        "no_repeat_ngram_size": dict(no_repeat_ngram_size=2),
        "bad_words_ids": dict(bad_words_ids=[[frequent], [base[3], base[4]]]),
        "suppress_tokens": dict(suppress_tokens=[frequent, base[0]]),
        "sequence_bias": dict(sequence_bias={(base[1], base[2]): -20.0, (frequent,): -5.0}),
        "begin_suppress_tokens": dict(begin_suppress_tokens=[base[0]]),
    }[name]


PROCESSORS = ("repetition_penalty", "no_repeat_ngram_size", "bad_words_ids", "suppress_tokens",
              "sequence_bias", "begin_suppress_tokens")


@pytest.mark.parametrize("kind", ("llama", "gpt2"))
def test_greedy_custom_generate_equals_model_generate(kind):
    m = model(kind)
    expected = plain(m, max_new_tokens=NEW, do_sample=False)
    out = racer(m, max_new_tokens=NEW, do_sample=False)
    assert out.dtype == torch.int64 and out.shape == expected.shape == (1, len(PROMPT) + NEW)
    assert torch.equal(out, expected)
    stats = racer(m, max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True)
    assert isinstance(stats, RacerDecoderOnlyOutput)
    assert torch.equal(stats.sequences, expected)
    assert stats.mean_accepted_tokens > 1.5  # drafts were accepted: not plain decoding in disguise
    assert sum(a + 1 for a in stats.accepted_lengths) + 1 >= NEW  # the prefill gives the first token


@pytest.mark.parametrize("name", PROCESSORS)
@pytest.mark.parametrize("kind", ("llama", "qwen2"))
def test_greedy_with_each_processor_equals_model_generate(kind, name):
    m = model(kind)
    settings = settings_for(name, kind)
    expected = plain(m, max_new_tokens=NEW, do_sample=False, **settings)
    assert new_tokens(expected) != baseline(kind), "the processor must change the output for the test to bite"
    out = racer(m, max_new_tokens=NEW, do_sample=False, **settings)
    assert torch.equal(out, expected)
    # racer_ref.generate honours the same settings through processors_from_generation_config.
    processors = processors_from_generation_config(m, PROMPT, **settings)
    assert generate(m, prompt=PROMPT, max_new_tokens=NEW, logits_processor=processors).token_ids == new_tokens(expected)


def test_racer_ref_generate_honours_the_models_generation_config():
    m = tiny_model("llama")  # its own copy: the generation config is changed
    m.generation_config.repetition_penalty = 1.8
    m.generation_config.no_repeat_ngram_size = 3
    expected = new_tokens(plain(m, max_new_tokens=NEW, do_sample=False))
    assert expected != baseline()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # honoured, so nothing to warn about
        assert generate(m, prompt=PROMPT, max_new_tokens=NEW).token_ids == expected
    # logits_processor=[] applies none: the output of the bare model.
    assert generate(m, prompt=PROMPT, max_new_tokens=NEW, logits_processor=[]).token_ids == baseline()


def test_min_new_tokens_holds_eos_back():
    base = baseline()
    first = next(k for k in range(2, NEW) if base[k] not in base[:k])
    m = model("llama", base[first])  # an EOS the model produces early
    short = plain(m, max_new_tokens=NEW, do_sample=False)
    assert short.shape[1] == len(PROMPT) + first + 1  # it stops there
    for settings in (dict(min_new_tokens=first + 6), dict(min_length=len(PROMPT) + first + 4)):
        expected = plain(m, max_new_tokens=NEW, do_sample=False, **settings)
        assert expected.shape[1] > short.shape[1]
        assert torch.equal(racer(m, max_new_tokens=NEW, do_sample=False, **settings), expected)


def test_output_scores_equal_model_generate():
    m = model()
    kwargs = dict(max_new_tokens=12, do_sample=False, return_dict_in_generate=True, output_scores=True,
                  repetition_penalty=1.8)
    expected, out = plain(m, **kwargs), racer(m, **kwargs)
    assert torch.equal(out.sequences, expected.sequences)
    assert len(out.scores) == len(expected.scores) == 12
    for ours, theirs in zip(out.scores, expected.scores):
        assert ours.shape == theirs.shape == (1, 128) and ours.dtype == torch.float32
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    assert out.cache.get_seq_length() == len(PROMPT) + 12 - 1  # all but the newest token


# ---- sampling: the target distribution of every node -----------------------------------------

SAMPLING = {
    "top_k": dict(top_k=5),
    "top_p": dict(top_p=0.7, top_k=0),
    "temperature": dict(temperature=0.6, top_k=0),
    "repetition_penalty": dict(repetition_penalty=1.8, top_k=0),
    "no_repeat_ngram_size": dict(no_repeat_ngram_size=2, top_k=0),
    "min_new_tokens": dict(min_new_tokens=5, top_k=0),
    "bad_words_ids": dict(bad_words_ids=[[7], [9, 12]], top_k=0),
    "suppress_tokens": dict(suppress_tokens=[3, 5], top_k=0),
    "everything": dict(top_k=20, top_p=0.9, temperature=0.8, repetition_penalty=1.3, no_repeat_ngram_size=3,
                       bad_words_ids=[[9, 12]], suppress_tokens=[5], min_new_tokens=5),
}


@pytest.mark.parametrize("name", sorted(SAMPLING))
def test_every_tree_node_gets_the_distribution_of_plain_sampling(name):
    """Row u of one verify pass, processed with u's prefix, equals plain decoding's scores
    after the same tokens (the model run on that whole prefix, the processors applied to it)."""
    m = model("llama", eos=3)
    committed = PROMPT + [7, 3]  # prompt + output so far; the last token is the root
    processors = processors_from_generation_config(m, PROMPT, do_sample=True, **SAMPLING[name])
    tree = make_tree([3, 9, 5, 12, 9, 7, 3], [-1, 0, 0, 1, 1, 2, 5])
    from racer_ref.verify import make_cache as _make_cache
    from racer_ref.verify import forward_prompt, forward_tree

    cache = _make_cache(m, None)
    with torch.no_grad():
        forward_prompt(m, cache, torch.tensor(committed[:-1]))
        logits = forward_tree(m, cache, make_tree([committed[-1]] + tree.tokens[1:].tolist(), tree.parents.tolist()))
        ours = TreeLogitsProcessor(processors)(torch.tensor(committed[:-1]), tree, logits)
        for u in range(len(tree)):
            path, node = [], u
            while node > 0:
                path.append(int(tree.tokens[node]))
                node = int(tree.parents[node])
            prefix = torch.tensor([committed + path[::-1]])  # (1, L + 1 + depth)
            row = m(prefix).logits[:, -1].float()  # plain decoding's logits after this prefix
            theirs = processors(prefix, row)[0]
            assert torch.equal(torch.isinf(ours[u]), torch.isinf(theirs)), (name, u)
            torch.testing.assert_close(ours[u].softmax(-1), theirs.softmax(-1), rtol=1e-4, atol=1e-5)


def chi_square_p(a: List[tuple], b: List[tuple]) -> float:
    """p-value of a two-sample chi-square test that ``a`` and ``b`` come from one distribution."""
    keys = sorted(set(a) | set(b))
    table = np.array([[a.count(k) for k in keys], [b.count(k) for k in keys]], dtype=np.float64)
    rare = table.sum(axis=0) < 10  # outcomes too rare for the test are pooled into one column
    table = np.concatenate([table[:, ~rare], table[:, rare].sum(axis=1, keepdims=True)], axis=1)
    table = table[:, table.sum(axis=0) > 0]
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    dof = table.shape[1] - 1
    assert dof >= 1, "too few samples for the test"
    # The chi-square survival function: the regularized upper incomplete gamma Q(dof/2, x/2).
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                         torch.tensor(statistic / 2.0, dtype=torch.float64)))


def sample_outputs(m, n: int, seed: int, **kwargs) -> List[tuple]:
    torch.manual_seed(seed)
    return [tuple(new_tokens(plain(m, max_new_tokens=3, do_sample=True, **kwargs))[1:]) for _ in range(n)]


def test_sampled_outputs_have_the_distribution_of_model_generate():
    """New tokens 2 and 3 of 3 (drawn through accepted drafts or residual samples) under several
    processors: RACER's and plain sampling's samples pass a chi-square test, while RACER with
    the processors dropped (what decoding.py did before) fails it."""
    m = model("llama")
    settings = dict(temperature=1.3, top_k=6, repetition_penalty=2.0, no_repeat_ngram_size=2, suppress_tokens=[3])
    n = 160
    theirs = sample_outputs(m, n, seed=1, **settings)
    ours = sample_outputs(m, n, seed=2, custom_generate=racer_decoding, **settings)
    # racer_ref.generate without the processors (what it did before): the test sees the difference.
    dropped = [tuple(generate(m, prompt=PROMPT, max_new_tokens=3, temperature=1.3, seed=s).token_ids[1:])
               for s in range(n)]
    for position in (0, 1):  # new tokens 2 and 3, each a marginal with a handful of outcomes
        def at(samples):
            return [sample[position] for sample in samples]

        assert chi_square_p(at(ours), at(theirs)) > 1e-3
        assert chi_square_p(at(dropped), at(theirs)) < 1e-6


# ---- stopping criteria, streamers, drafter settings ---------------------------------------------


def char_tokenizer():
    """A tokenizer of 128 one-character tokens, enough for stop strings and streamers."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {chr(0x41 + i): i for i in range(128)}  # 'A', 'B', ... one character per id
    tok = Tokenizer(models.WordLevel(vocab, unk_token="A"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def test_stop_strings_eos_max_time_and_own_criteria():
    m, tokenizer = model(), char_tokenizer()
    base = baseline()
    text = tokenizer.decode(base)
    stop = text[9:11]  # a two-character string that first ends at new token 11 or before
    criteria = StoppingCriteriaList([StopStringCriteria(tokenizer, [stop])])
    expected = plain(m, max_new_tokens=NEW, do_sample=False, stopping_criteria=criteria)
    assert len(PROMPT) < expected.shape[1] <= len(PROMPT) + 11
    out = racer(m, max_new_tokens=NEW, do_sample=False,
                stopping_criteria=StoppingCriteriaList([StopStringCriteria(tokenizer, [stop])]))
    assert torch.equal(out, expected)
    # EOS from the generation config, and max_time (the first token already takes longer).
    eos_model = model("llama", base[5])
    assert torch.equal(racer(eos_model, max_new_tokens=NEW, do_sample=False),
                       plain(eos_model, max_new_tokens=NEW, do_sample=False))
    assert racer(m, max_new_tokens=NEW, do_sample=False, max_time=1e-9).shape[1] == len(PROMPT) + 1

    class AtToken(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            assert scores is None  # as transformers' loop passes it without output_scores
            return input_ids[:, -1] == base[7]

    expected = plain(m, max_new_tokens=NEW, do_sample=False, stopping_criteria=StoppingCriteriaList([AtToken()]))
    assert torch.equal(racer(m, max_new_tokens=NEW, do_sample=False,
                             stopping_criteria=StoppingCriteriaList([AtToken()])), expected)


def test_stop_strings_with_the_tokenizer_given_to_generate():
    """``generate(stop_strings=[...], tokenizer=tok)``, the usual way to pass stop strings:
    transformers 5 lost the tokenizer for a callable ``custom_generate`` and refused."""
    m, tokenizer = model(), char_tokenizer()
    stop = tokenizer.decode(baseline())[9:11]
    expected = plain(m, max_new_tokens=NEW, do_sample=False, stop_strings=[stop], tokenizer=tokenizer)
    assert len(PROMPT) < expected.shape[1] <= len(PROMPT) + 11
    assert tokenizer.decode(expected[0, len(PROMPT):]).endswith(stop)
    out = racer(m, max_new_tokens=NEW, do_sample=False, stop_strings=[stop], tokenizer=tokenizer)
    assert torch.equal(out, expected)
    bound = functools.partial(racer_decoding, capacity=8)
    assert torch.equal(plain(m, max_new_tokens=NEW, do_sample=False, stop_strings=[stop], tokenizer=tokenizer,
                             custom_generate=bound), expected)
    with pytest.raises(ValueError, match="could not locate a tokenizer"):  # still transformers' own check
        racer(m, max_new_tokens=NEW, do_sample=False, stop_strings=[stop])


class Recorder:
    def __init__(self):
        self.puts: List[List[int]] = []
        self.ended = 0

    def put(self, value):
        self.puts.append(value.reshape(-1).tolist())

    def end(self):
        self.ended += 1


def test_streamer_gets_the_prompt_once_then_every_new_token():
    m = model()
    theirs, ours = Recorder(), Recorder()
    plain(m, max_new_tokens=NEW, do_sample=False, streamer=theirs)
    racer(m, max_new_tokens=NEW, do_sample=False, streamer=ours)
    assert ours.puts[0] == theirs.puts[0] == PROMPT
    assert sum(ours.puts[1:], []) == sum(theirs.puts[1:], []) == baseline()
    assert len(ours.puts) < len(theirs.puts)  # accepted blocks of several tokens
    assert ours.ended == theirs.ended == 1
    from transformers import TextIteratorStreamer

    tokenizer = char_tokenizer()
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True)
    racer(m, max_new_tokens=NEW, do_sample=False, streamer=streamer)
    assert "".join(streamer) == tokenizer.decode(baseline())


def test_drafter_settings_come_in_as_generate_keywords():
    m = model()
    expected = plain(m, max_new_tokens=NEW, do_sample=False)
    ar = racer(m, max_new_tokens=NEW, do_sample=False, method="ar", return_dict_in_generate=True)
    assert torch.equal(ar.sequences, expected) and ar.mean_accepted_tokens == 1.0
    small = racer(m, max_new_tokens=NEW, do_sample=False, capacity=2, backend="python", return_dict_in_generate=True)
    assert torch.equal(small.sequences, expected) and max(small.tree_sizes) <= 2
    bound = functools.partial(racer_decoding, capacity=3)  # the transformers 4.56 way
    out = plain(m, max_new_tokens=NEW, do_sample=False, custom_generate=bound, return_dict_in_generate=True)
    assert torch.equal(out.sequences, expected) and max(out.tree_sizes) <= 3


def test_unsupported_settings_are_refused_by_name():
    m = model()
    ids = torch.tensor([PROMPT, PROMPT])
    with pytest.raises(ValueError, match="batch size 1"):
        m.generate(ids, custom_generate=racer_decoding, max_new_tokens=4)
    cases = {
        "num_beams": dict(num_beams=2),
        "num_return_sequences": dict(num_return_sequences=2, do_sample=True),
        "output_attentions": dict(output_attentions=True, return_dict_in_generate=True),
        "output_logits": dict(output_logits=True, return_dict_in_generate=True),
        "assistant_model": dict(assistant_model=model("gpt2")),
        "UnbatchedClassifierFreeGuidanceLogitsProcessor": dict(guidance_scale=1.5),
        "cache_implementation": dict(cache_implementation="static"),
        "prompt_lookup_num_tokens": dict(prompt_lookup_num_tokens=3),
    }
    for name, kwargs in cases.items():
        with pytest.raises(ValueError, match=name):
            racer(m, max_new_tokens=4, **kwargs)
    padded = torch.tensor([[0] + PROMPT])
    with pytest.raises(ValueError, match="attention_mask"):
        m.generate(padded, attention_mask=torch.tensor([[0] + [1] * len(PROMPT)]),
                   custom_generate=racer_decoding, max_new_tokens=4)


def test_own_processors_are_applied_per_node_with_a_warning():
    m = model()
    banned = baseline()[4]

    class Ban(LogitsProcessor):
        def __call__(self, input_ids, scores):
            assert input_ids.shape[0] == 1  # row by row: a batch of one, as in plain decoding
            return scores.index_fill(1, torch.tensor([banned]), -float("inf"))

    expected = plain(m, max_new_tokens=NEW, do_sample=False, logits_processor=LogitsProcessorList([Ban()]))
    assert banned not in new_tokens(expected)
    with pytest.warns(UserWarning, match="Ban"):
        out = racer(m, max_new_tokens=NEW, do_sample=False, logits_processor=LogitsProcessorList([Ban()]))
    assert torch.equal(out, expected)
    with pytest.raises(TypeError, match="logits_processor"):
        generate(m, prompt=PROMPT, max_new_tokens=4, logits_processor=object())
    with pytest.raises(TypeError, match="stopping_criteria"):
        generate(m, prompt=PROMPT, max_new_tokens=4, stopping_criteria=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # transformers' own processors: no warning
        TreeLogitsProcessor(processors_from_generation_config(m, PROMPT, repetition_penalty=1.2))
