"""generate() on tiny random models: token-for-token equal to model.generate's greedy output.

Every method, every model family, with the real drafters and with test drafters that hide
the true continuation behind wrong branches; stopping rules; the KV cache after every step;
bad input.
"""

from __future__ import annotations

import copy
import functools
import warnings
from typing import List

import numpy as np
import pytest
import torch
from transformers import DynamicCache

import racer_ref.decoding as decoding_module
from models import KINDS, OracleDrafter, greedy_reference, make_tree, single_thread, tiny_model  # noqa: F401
from racer_ref import Drafter
from racer_ref.decoding import generate
from racer_ref.tree import clip_draft_tree
from racer_ref.drafter import DEFAULT_CPU_CAPACITY
from racer_ref.metrics import TIMING_KEYS
from racer_ref.tree import METHODS

VOCAB = 128
NEW = 40


@functools.lru_cache(maxsize=None)
def model(kind: str, **kwargs) -> torch.nn.Module:
    return tiny_model(kind, **kwargs)


def random_prompt(seed: int, length: int = 12) -> List[int]:
    return torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


PROMPTS = {
    "random-a": random_prompt(0),
    "random-b": random_prompt(1, 20),
    "one-token": [7],
    # a passage repeated verbatim: retrieval drafts long copies of it
    "repetitive": (random_prompt(2, 9) * 4)[:34],
}


@functools.lru_cache(maxsize=None)
def reference(kind: str, prompt_name: str, new: int = NEW) -> tuple:
    return tuple(greedy_reference(model(kind), PROMPTS[prompt_name], new))


# ---- equality with model.generate ----------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_method_equals_greedy_model_generate(kind, method):
    for name, prompt in PROMPTS.items():
        result = generate(model(kind), None, prompt, max_new_tokens=NEW, method=method)
        assert result.token_ids == list(reference(kind, name)), (kind, method, name)
        assert result.stop_reason == "max_new_tokens"
        assert len(result.accepted_lengths) == result.steps == len(result.tree_sizes)
        assert all(size <= 64 for size in result.tree_sizes)
        # new tokens = first root + (a + 1) per step
        assert 1 + sum(a + 1 for a in result.accepted_lengths) == NEW
        if method == "ar":
            assert set(result.tree_sizes) == {1} and result.mean_accepted_tokens == 1.0


@pytest.mark.parametrize("method", ["racer", "pld", "logits-last"])
def test_python_backend_equals_greedy(method):
    result = generate(model("llama"), None, PROMPTS["repetitive"], max_new_tokens=NEW, method=method,
                      backend="python")
    assert result.token_ids == list(reference("llama", "repetitive"))


@pytest.mark.parametrize("capacity, breadth", [(1, 8), (2, 1), (5, 2), (200, 16)])
def test_capacities_and_breadths_equal_greedy(capacity, breadth):
    result = generate(model("qwen2"), None, PROMPTS["random-b"], max_new_tokens=NEW, capacity=capacity,
                      breadth=breadth)
    assert result.token_ids == list(reference("qwen2", "random-b"))
    assert max(result.tree_sizes) <= capacity


@pytest.mark.parametrize("kind", KINDS)
def test_accepted_path_is_not_the_first_branch(kind):
    """The oracle drafter puts decoys first, so the accepted path is never node 1's branch;
    every step must still accept the full true chain (a correct mask, positions and cache
    give the true chain exactly the logits of the plain sequence)."""
    prompt, depth = PROMPTS["random-a"], 5
    truth = list(reference(kind, "random-a"))
    calls = []
    original = decoding_module.accept_greedy

    def spy(logits, tree, predicted=None):
        assert predicted == logits.argmax(dim=-1).tolist()  # read off the top-k, exactly argmax
        accepted, nxt = original(logits, tree, predicted)
        calls.append((accepted, tree))
        return accepted, nxt

    drafter = OracleDrafter(prompt, truth, VOCAB, depth=depth, wrong=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decoding_module, "accept_greedy", spy)
        result = generate(model(kind), None, prompt, max_new_tokens=NEW, drafter=drafter)
    assert result.token_ids == truth
    assert result.accepted_lengths[:-1] == [depth] * (len(result.accepted_lengths) - 1)
    assert all(accepted[1] != 1 for accepted, _ in calls[:-1])
    # the drafter learnt exactly the committed tokens (prompt + output), in order
    assert drafter.committed == prompt + truth


@pytest.mark.parametrize("kind", KINDS)
def test_partially_wrong_drafts_still_equal_greedy(kind):
    prompt, truth = PROMPTS["random-b"], list(reference(kind, "random-b"))
    drafter = OracleDrafter(prompt, truth, VOCAB, depth=6, wrong=3, corrupt_every=2)
    result = generate(model(kind), None, prompt, max_new_tokens=NEW, drafter=drafter)
    assert result.token_ids == truth
    assert 3 in result.accepted_lengths and 6 in result.accepted_lengths


@pytest.mark.parametrize("attn", ["eager", "sdpa", "sdpa_gqa"])
def test_eager_and_sdpa_equal_greedy(attn):
    m = model("llama", attn=attn)
    prompt = PROMPTS["repetitive"]
    assert generate(m, None, prompt, max_new_tokens=NEW).token_ids == greedy_reference(m, prompt, NEW)


def test_repeated_passage_mostly_accepted_and_broken_mask_or_cache_fail():
    """On a prompt repeating a passage the drafts are mostly accepted. With the tree mask
    replaced by a plain causal mask, or the KV cache cropped instead of gathered, the same
    run no longer matches greedy decoding or accepts far fewer tokens."""
    kind, prompt = "llama", PROMPTS["repetitive"]
    truth = list(reference(kind, "repetitive"))
    assert len(set(truth)) >= 8  # not a constant stream: wrong logits would show
    good = generate(model(kind), None, prompt, max_new_tokens=NEW, capacity=64)  # the paper's tree
    assert good.token_ids == truth
    drafted_accepted = sum(good.accepted_lengths) / (len(truth) - 1)  # share of tokens that were drafts
    assert good.mean_accepted_tokens >= 3.0 and drafted_accepted >= 0.6

    def causal_bias(tree_mask, past_length, dtype):
        n = tree_mask.shape[0]
        causal = torch.ones(n, n, dtype=torch.bool, device=tree_mask.device).tril()
        bias = torch.zeros(n, past_length + n, dtype=dtype)
        bias[:, past_length:].masked_fill_(~causal, torch.finfo(dtype).min)
        return bias[None, None]

    def crop_only(cache, past_length, accepted):  # keeps the first a + 1 nodes in BFS order
        cache.crop(past_length + len(accepted) - cache.get_seq_length())

    import racer_ref.verify as verify_module

    for name, broken in [("tree_attention_bias", causal_bias), ("keep_accepted", crop_only)]:
        with pytest.MonkeyPatch.context() as mp:
            target = verify_module if name == "tree_attention_bias" else decoding_module
            mp.setattr(target, name, broken)
            bad = generate(model(kind), None, prompt, max_new_tokens=NEW, capacity=64)
        assert bad.token_ids != truth or bad.mean_accepted_tokens < good.mean_accepted_tokens / 2, name


# ---- the KV cache after every step ----------------------------------------------------------


@pytest.mark.parametrize("drafting", ["racer", "oracle"])
@pytest.mark.parametrize("kind", KINDS)
def test_cache_holds_committed_tokens_minus_root_after_every_step(kind, drafting):
    """Compared with a fresh prefill of (committed tokens - root) after every step; the
    oracle's accepted nodes are never contiguous in BFS order, so the gather is exercised."""
    m, prompt, truth = model(kind), PROMPTS["random-b"], list(reference(kind, "random-b"))
    drafter = OracleDrafter(prompt, truth, VOCAB, depth=4, wrong=2) if drafting == "oracle" else None
    cache = DynamicCache(config=m.config)
    snapshots = []
    output: List[int] = []

    def callback(block):
        output.extend(block)
        snapshots.append((list(output), cache.get_seq_length(),
                          [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]))

    result = generate(m, None, prompt, max_new_tokens=NEW, cache=cache, callback=callback, capacity=16,
                      drafter=drafter)
    assert output == result.token_ids == truth
    assert len(snapshots) == result.steps + 1 and result.steps >= 3
    for out, length, layers in snapshots[:-1]:  # the last block may be cut by max_new_tokens
        committed = prompt + out
        assert length == len(committed) - 1
        fresh = DynamicCache(config=m.config)
        with torch.no_grad():
            m(torch.tensor([committed[:-1]]), cache=fresh, use_cache=True)
        for (keys, values), layer in zip(layers, fresh.layers):
            torch.testing.assert_close(keys, layer.keys, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(values, layer.values, atol=1e-5, rtol=1e-4)


# ---- stopping rules -------------------------------------------------------------------------


def first_new_token_index(tokens: List[int], start: int) -> int:
    """Smallest index >= start whose token does not occur earlier in ``tokens``."""
    for i in range(start, len(tokens)):
        if tokens[i] not in tokens[:i]:
            return i
    raise AssertionError("no fresh token")


@pytest.mark.parametrize("kind", KINDS)
def test_eos_inside_an_accepted_block(kind):
    prompt, truth = PROMPTS["random-a"], list(reference(kind, "random-a"))
    depth = 5
    # Blocks: [0] (prefill root), then [1..6], [7..12], ...; index 2 or later, not a block end.
    stop_at = next(i for i in range(2, len(truth)) if truth[i] not in truth[:i] and i % (depth + 1) != 0)
    eos = truth[stop_at]
    m = tiny_model(kind, eos_token_id=eos)
    expected = greedy_reference(m, prompt, NEW)
    assert expected == truth[: stop_at + 1]  # model.generate keeps the EOS token
    drafter = OracleDrafter(prompt, truth, VOCAB, depth=depth)
    result = generate(m, None, prompt, max_new_tokens=NEW, drafter=drafter)
    assert result.token_ids == expected and result.stop_reason == "eos"
    assert result.raw_accepted_lengths[-1] == depth  # the EOS sat inside the last accepted block
    # ... and the statistics count only what was committed, up to the EOS (issue 15 item 2)
    assert result.accepted_lengths[-1] < depth
    assert sum(a + 1 for a in result.accepted_lengths) == len(result.token_ids) - 1
    # a list of EOS ids, and the real drafters
    for method in ("racer", "ar"):
        assert generate(m, None, prompt, max_new_tokens=NEW, method=method,
                        eos_token_id=[VOCAB - 1, eos]).token_ids == expected
    assert generate(m, None, prompt, max_new_tokens=NEW, eos_token_id=torch.tensor(eos)).token_ids == expected
    # eos_token_id=[] disables the model's default
    assert generate(m, None, prompt, max_new_tokens=NEW, eos_token_id=[]).token_ids == truth


@pytest.mark.parametrize("method", ["racer", "oracle", "ar"])
@pytest.mark.parametrize("max_new_tokens", [0, 1, 2, 3])
def test_small_max_new_tokens(method, max_new_tokens):
    prompt, truth = PROMPTS["repetitive"], list(reference("llama", "repetitive"))
    drafter = OracleDrafter(prompt, truth, VOCAB, depth=6) if method == "oracle" else None
    result = generate(model("llama"), None, prompt, max_new_tokens=max_new_tokens,
                      method=None if method == "oracle" else method, drafter=drafter)
    assert result.token_ids == truth[:max_new_tokens]
    assert result.stop_reason == "max_new_tokens"
    if method == "ar":
        assert result.steps == max(0, max_new_tokens - 1)
    elif method == "oracle":  # one step takes the whole clipped true chain
        assert result.steps == min(1, max_new_tokens - 1 if max_new_tokens else 0)
    else:
        assert result.steps <= max(0, max_new_tokens - 1)
    # trees are clipped so a step never drafts beyond the tokens still allowed
    assert all(size <= 64 for size in result.tree_sizes)
    if method == "oracle" and max_new_tokens >= 2:
        assert result.tree_sizes[0] < drafter.sizes[0]


def test_clip_draft_tree_keeps_a_valid_tree():
    tree = make_tree([9, 1, 2, 3, 4, 5, 6], [-1, 0, 0, 1, 1, 2, 3])
    clipped = clip_draft_tree(tree, 1)
    assert clipped.tokens.tolist() == [9, 1, 2] and clipped.parents.tolist() == [-1, 0, 0]
    assert clipped.retrieve_indices.tolist() == [[0, 1], [0, 2]]
    assert clipped.attention_mask.tolist() == [[True, False, False], [True, True, False], [True, False, True]]
    assert clip_draft_tree(tree, 0).tokens.tolist() == [9]
    assert clip_draft_tree(tree, 3) is tree


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_prompt_ending_near_the_maximum_position(kind):
    max_positions = 48
    m = tiny_model(kind, max_positions=max_positions)
    fed = []
    hook = m.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append(int(kwargs["position_ids"].max()) if kwargs.get("position_ids")
                                                is not None else kwargs["input_ids"].shape[1] - 1),
        with_kwargs=True)
    try:
        prompt = (random_prompt(3, 8) * 5)[:40]  # repetitive: the drafts would run past the end
        room = max_positions - len(prompt)
        result = generate(m, None, prompt, max_new_tokens=30)
        assert result.stop_reason == "max_length" and len(result.token_ids) == room
        # the last token's position (max_positions - 1) is emitted, never fed
        assert max(fed) == max_positions - 2
        fed.clear()
        assert result.token_ids == greedy_reference(m, prompt, room)
        one = generate(m, None, random_prompt(4, max_positions - 1), max_new_tokens=5)
        assert len(one.token_ids) == 1 and one.stop_reason == "max_length" and one.steps == 0
    finally:
        hook.remove()
    with pytest.raises(ValueError, match="context length"):
        generate(m, None, random_prompt(4, max_positions), max_new_tokens=5)


class CharTokenizer:
    """Decodes token i to one distinct character; enough for stop strings and ``text``."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(0x4E00 + int(i)) for i in ids)

    def __call__(self, text):
        return {"input_ids": [ord(c) - 0x4E00 for c in text]}


def test_stop_strings_cut_inside_a_block_and_across_tokens():
    tok = CharTokenizer()
    prompt, truth = PROMPTS["random-a"], list(reference("llama", "random-a"))
    i = first_new_token_index(truth, 3)
    j = next(j for j in range(2, len(truth)) if tok.decode(truth[j - 1 : j + 1]) not in tok.decode(truth[:j]))
    for stop, end in [(tok.decode([truth[i]]), i), ([tok.decode(truth[j - 1 : j + 1]), "no such"], j)]:
        result = generate(model("llama"), tok, prompt, max_new_tokens=NEW, stop=stop,
                          drafter=OracleDrafter(prompt, truth, VOCAB, depth=5))
        assert result.token_ids == truth[: end + 1] and result.stop_reason == "stop_string"
        assert result.text == tok.decode(truth[: end + 1])
    # a string prompt goes through the tokenizer as is
    text_prompt = tok.decode(prompt)
    assert generate(model("llama"), tok, text_prompt, max_new_tokens=NEW).token_ids == truth


# ---- streaming, state, results --------------------------------------------------------------


class RecordingStreamer:
    def __init__(self):
        self.puts, self.ended = [], 0

    def put(self, value):
        self.puts.append(value.tolist())

    def end(self):
        self.ended += 1


def test_streamer_and_callback_see_the_committed_blocks():
    prompt = PROMPTS["repetitive"]
    streamer, blocks = RecordingStreamer(), []
    result = generate(model("gpt2"), None, prompt, max_new_tokens=NEW, streamer=streamer, callback=blocks.append)
    assert streamer.puts[0] == [prompt] and streamer.ended == 1
    assert sum(streamer.puts[1:], []) == result.token_ids == sum(blocks, [])
    assert [len(b) for b in blocks[1:]] == [a + 1 for a in result.accepted_lengths]


def test_two_calls_on_one_object_equal_fresh_objects():
    m = model("llama")
    a1 = generate(m, None, PROMPTS["random-a"], max_new_tokens=NEW)
    b1 = generate(m, None, PROMPTS["repetitive"], max_new_tokens=NEW)
    a2 = generate(m, None, PROMPTS["random-a"], max_new_tokens=NEW)
    fresh = tiny_model("llama")
    b2 = generate(fresh, None, PROMPTS["repetitive"], max_new_tokens=NEW)
    assert (a1.token_ids, a1.accepted_lengths) == (a2.token_ids, a2.accepted_lengths)
    assert (b1.token_ids, b1.accepted_lengths) == (b2.token_ids, b2.accepted_lengths)
    # shared mode: one drafter across calls stays lossless; after reset() it is fresh again
    shared = Drafter("racer", vocab_size=VOCAB, capacity=DEFAULT_CPU_CAPACITY)  # generate()'s on a CPU
    s1 = generate(m, None, PROMPTS["random-a"], max_new_tokens=NEW, drafter=shared)
    s2 = generate(m, None, PROMPTS["repetitive"], max_new_tokens=NEW, drafter=shared)
    assert s1.token_ids == a1.token_ids and s2.token_ids == b1.token_ids
    assert shared.num_committed == len(PROMPTS["random-a"]) + NEW + len(PROMPTS["repetitive"]) + NEW
    shared.reset()
    s3 = generate(m, None, PROMPTS["repetitive"], max_new_tokens=NEW, drafter=shared)
    assert (s3.token_ids, s3.accepted_lengths) == (b1.token_ids, b1.accepted_lengths)


def test_accepted_only_copy_logit_updates_equal_greedy():
    result = generate(model("gpt2"), None, PROMPTS["random-b"], max_new_tokens=NEW, observe_rejected=False)
    assert result.token_ids == list(reference("gpt2", "random-b"))


def test_result_fields():
    result = generate(model("qwen2"), None, torch.tensor([PROMPTS["random-a"]]), max_new_tokens=NEW)
    assert result.token_ids == list(reference("qwen2", "random-a")) and result.text is None
    assert set(result.timings) == set(TIMING_KEYS) and all(v >= 0 for v in result.timings.values())
    parts = sum(v for k, v in result.timings.items() if k != "total")
    assert 0 < parts <= result.timings["total"]
    assert result.mean_accepted_tokens == pytest.approx(np.mean(result.accepted_lengths) + 1)
    assert result.method == "racer"
    assert np.isnan(generate(model("qwen2"), None, [1], max_new_tokens=1).mean_accepted_tokens)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("attn", ["eager", "sdpa", "sdpa_gqa"])
def test_half_precision_runs(dtype, attn):
    m = tiny_model("llama", dtype=dtype, attn=attn)
    result = generate(m, None, PROMPTS["repetitive"], max_new_tokens=16)
    assert len(result.token_ids) == 16 and all(0 <= t < VOCAB for t in result.token_ids)
    # the first tokens agree with plain greedy decoding in the same dtype
    assert result.token_ids[:4] == greedy_reference(m, PROMPTS["repetitive"], 4)


def test_sampling_with_the_racer_drafter_is_reproducible():
    kwargs = dict(max_new_tokens=NEW, temperature=0.9, top_p=0.9)
    runs = [generate(model("gpt2"), None, PROMPTS["repetitive"], seed=s, **kwargs) for s in (1, 1, 2)]
    assert runs[0].token_ids == runs[1].token_ids != runs[2].token_ids
    g = torch.Generator().manual_seed(1)
    assert generate(model("gpt2"), None, PROMPTS["repetitive"], generator=g, **kwargs).token_ids == runs[0].token_ids


# ---- bad input ------------------------------------------------------------------------------


def bad_calls():
    from transformers import MistralConfig, MistralForCausalLM, StaticCache

    m = model("llama")
    sliding = MistralForCausalLM(MistralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                               num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                               sliding_window=16)).eval()
    filled = DynamicCache(config=m.config)
    with torch.no_grad():
        m(torch.tensor([[1, 2]]), cache=filled, use_cache=True)
    p = PROMPTS["random-a"]
    return [
        (ValueError, "empty", dict(model=m, prompt=[])),
        (ValueError, "empty", dict(model=m, prompt=torch.tensor([], dtype=torch.long))),
        (ValueError, r"\[0, 128\)", dict(model=m, prompt=[1, 2, VOCAB])),
        (ValueError, r"\[0, 128\)", dict(model=m, prompt=[-1, 2])),
        (TypeError, "integer", dict(model=m, prompt=torch.tensor([1.0, 2.0]))),
        (ValueError, "batch size 1", dict(model=m, prompt=torch.tensor([p, p]))),
        (ValueError, "batch size 1", dict(model=m, prompt=[p, p])),
        (ValueError, "tokenizer", dict(model=m, prompt="hello")),
        (TypeError, "prompt", dict(model=m, prompt=3.5)),
        (ValueError, "max_new_tokens", dict(model=m, prompt=p, max_new_tokens=-1)),
        (ValueError, "capacity", dict(model=m, prompt=p, capacity=0)),
        (TypeError, "capacity: must be an int, got str", dict(model=m, prompt=p, capacity="fast")),
        (ValueError, "capacity: 'auto' builds its own drafter",
         dict(model=m, prompt=p, capacity="auto", drafter=Drafter("racer", vocab_size=VOCAB))),
        (ValueError, "breadth", dict(model=m, prompt=p, breadth=0)),
        (ValueError, "method", dict(model=m, prompt=p, method="medusa")),
        (ValueError, "temperature", dict(model=m, prompt=p, temperature=-1.0)),
        (ValueError, "top_p", dict(model=m, prompt=p, temperature=1.0, top_p=0.0)),
        (ValueError, "stop", dict(model=m, prompt=p, stop="x")),
        (ValueError, "stop", dict(model=m, prompt=p, stop=[""], tokenizer=CharTokenizer())),
        (TypeError, "eos_token_id", dict(model=m, prompt=p, eos_token_id="x")),
        (TypeError, "eos_token_id", dict(model=m, prompt=p, eos_token_id=[1.5])),
        (ValueError, "generator", dict(model=m, prompt=p, temperature=1.0, generator=123)),
        (ValueError, "StaticCache", dict(model=m, prompt=p, cache=StaticCache(config=m.config, max_cache_len=64))),
        (ValueError, "empty", dict(model=m, prompt=p, cache=filled)),
        (ValueError, "SlidingWindow", dict(model=sliding, prompt=p)),
        (ValueError, "vocab_size", dict(model=m, prompt=p, drafter=Drafter("racer", vocab_size=VOCAB + 1))),
    ] + regress_bad_calls(m, sliding, p)


def regress_bad_calls(m, sliding, p):
    """Bad input found by adversarial testing (test_regress_): wrong kinds are a TypeError
    naming the argument, and nothing is silently accepted or raised after a forward pass."""
    return [
        (ValueError, r"batch size 1.*shape \(\)", dict(model=m, prompt=torch.tensor(5))),
        (ValueError, r"prompt: token id 9223372036854775808 at index 1 is outside", dict(model=m, prompt=[1, 2**63])),  # no float64 / wrap
        (ValueError, r"prompt: token id 18446744073709551616 at index 0 is outside", dict(model=m, prompt=[2**64])),
        (TypeError, "prompt: expected integer token ids, got list", dict(model=m, prompt=[[1], [2, 3]])),
        (TypeError, "prompt: expected integer token ids, got bool", dict(model=m, prompt=[1, True])),
        (TypeError, "max_new_tokens: must be an int, got float", dict(model=m, prompt=p, max_new_tokens=2.0)),
        (TypeError, "capacity: must be an int, got float", dict(model=m, prompt=p, capacity=64.0)),
        (ValueError, "capacity: is out of range", dict(model=m, prompt=p, method="racer", capacity=2**64)),
        (ValueError, "backend", dict(model=m, prompt=p, method="ar", backend="gpu")),
        (ValueError, "ngram", dict(model=m, prompt=p, method="ar", ngram=1)),
        (TypeError, "temperature: expected a number", dict(model=m, prompt=p, temperature="1")),
        (ValueError, "temperature", dict(model=m, prompt=p, temperature=1e-40)),
        (ValueError, "eos_token_id", dict(model=m, prompt=p, eos_token_id=-1)),
        (ValueError, "eos_token_id", dict(model=m, prompt=p, eos_token_id=[3, VOCAB])),
        (TypeError, "stop: expected a string", dict(model=m, prompt=p, stop=5)),
        (TypeError, "seed", dict(model=m, prompt=p, temperature=1.0, seed=1.5)),
        (ValueError, "seed", dict(model=m, prompt=p, temperature=1.0, seed=2**70)),
        (TypeError, "callback", dict(model=m, prompt=p, callback=5)),
        (TypeError, "streamer", dict(model=m, prompt=p, streamer=5)),
        (TypeError, "observe_rejected", dict(model=m, prompt=p, observe_rejected="no")),
        (TypeError, "drafter: expected a racer_ref.Drafter", dict(model=m, prompt=p, drafter=5)),
        # DynamicCache() has no layers yet: the sliding-window model must still be refused
        (ValueError, "SlidingWindow", dict(model=sliding, prompt=p, cache=DynamicCache())),
    ]


def test_bad_input_is_refused_before_any_work():
    """(Includes the test_regress_ cases of regress_bad_calls.)"""
    for error, message, kwargs in bad_calls():
        calls = []
        hook = kwargs["model"].register_forward_pre_hook(lambda *a, calls=calls: calls.append(1))
        drafter = OracleDrafter([], [], VOCAB)
        try:
            with pytest.raises(error, match=message):
                generate(**{"drafter": drafter if "method" not in kwargs else None, **kwargs})
        finally:
            hook.remove()
        assert calls == [] and drafter.committed == [] and drafter.observed == [], message


def test_a_given_drafter_sets_breadth_and_must_root_its_tree():
    logits_drafter = Drafter("logits", vocab_size=VOCAB, breadth=3, capacity=20)
    result = generate(model("gpt2"), None, PROMPTS["random-a"], max_new_tokens=NEW, drafter=logits_drafter)
    assert result.token_ids == list(reference("gpt2", "random-a")) and result.method == "logits"
    assert len(logits_drafter.table_row(PROMPTS["random-a"][0])) == 3

    class WrongRoot(OracleDrafter):
        def draft(self, root, last_topk=None):
            return make_tree([(root + 1) % VOCAB], [-1])

    with pytest.raises(RuntimeError, match="rooted at"):
        generate(model("gpt2"), None, PROMPTS["random-a"], max_new_tokens=5, drafter=WrongRoot([], [], VOCAB))


def test_racer_ref_generate_is_the_function_after_importing_the_loop_module():
    import racer_ref

    # The loop's module is racer_ref.decoding, so importing it cannot rebind the package's
    # `generate` to a module: racer_ref.generate is the function, and help() shows its docstring.
    assert racer_ref.generate is decoding_module.generate
    assert racer_ref.generate.__doc__.startswith("Decode one prompt with RACER")
    ours = racer_ref.generate(model("llama"), None, PROMPTS["random-a"], max_new_tokens=8)
    assert ours.token_ids == list(reference("llama", "random-a"))[:8]


def test_moved_module_paths_import_the_new_modules(monkeypatch):
    import importlib
    import sys

    import racer_ref.harness.models
    import racer_ref.speedups.kv_cache

    monkeypatch.delitem(sys.modules, "racer_ref.models", raising=False)  # imported by an earlier test
    with pytest.warns(DeprecationWarning, match="racer_ref.models moved to racer_ref.harness.models"):
        old = importlib.import_module("racer_ref.models")
    assert old is racer_ref.harness.models
    import racer_ref.harness.records

    monkeypatch.delitem(sys.modules, "racer_ref.hooks", raising=False)
    with pytest.warns(DeprecationWarning, match="racer_ref.hooks moved to racer_ref.harness.records"):
        from racer_ref.hooks import StepRecorder
    assert StepRecorder is racer_ref.harness.records.StepRecorder
    for name, new in racer_ref.MOVED_MODULES.items():
        assert importlib.import_module(name) is importlib.import_module(new), name
    assert racer_ref.kv_cache is racer_ref.speedups.kv_cache


def test_arguments_that_contradict_a_given_drafter_are_refused():
    """Issue 15 item 5: with drafter=d, method/capacity/ngram/max_nodes/backend were ignored."""
    m, p = model("llama"), PROMPTS["random-a"]
    d = Drafter("racer", vocab_size=VOCAB, capacity=16, breadth=4)
    calls = []
    hook = m.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        for name, value in [("method", "logits"), ("capacity", 64), ("breadth", 8), ("ngram", 4),
                            ("max_nodes", 50), ("backend", "python")]:
            with pytest.raises(ValueError, match=f"^{name}: .* contradicts the given drafter's {name}"):
                generate(m, None, p, max_new_tokens=4, drafter=d, **{name: value})
        # Out of range is out of range, whether or not a drafter is given.
        for name, value in [("capacity", 0), ("breadth", 0), ("breadth", VOCAB + 1), ("ngram", 1),
                            ("max_nodes", 0), ("backend", "nonsense")]:
            for drafter in (d, None):
                with pytest.raises(ValueError, match=f"^{name}: "):
                    generate(m, None, p, max_new_tokens=4, drafter=drafter, **{name: value})
    finally:
        hook.remove()
    assert calls == [] and d.num_committed == 0
    # The drafter's own values agree with it, so they are accepted.
    result = generate(m, None, p, max_new_tokens=6, drafter=d, method="racer", capacity=16, breadth=4,
                      ngram=10, max_nodes=10_000, backend="rust")
    assert result.token_ids == list(reference("llama", "random-a"))[:6] and result.method == "racer"


# -------------------------------------------------------------------------------------- issue 15


class ByteTokenizer:
    """One token per byte (ids 0-255): an emoji is four tokens, as in byte-level BPE."""

    def __call__(self, text):
        return {"input_ids": list(text.encode())}

    def decode(self, ids, skip_special_tokens=False):
        return bytes(int(t) for t in ids).decode("utf-8", errors="replace")


def successor_model(successor: dict, default: int) -> torch.nn.Module:
    """A one-layer Llama over 256 byte tokens whose greedy next token depends on the current
    token only: ``successor.get(t, default)`` (embeddings one-hot, the layer's writes zeroed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=8, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                         tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, pad_token_id=None)
    m = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        m.model.embed_tokens.weight.copy_(torch.eye(256))
        m.model.layers[0].self_attn.o_proj.weight.zero_()
        m.model.layers[0].mlp.down_proj.weight.zero_()
        m.lm_head.weight.zero_()
        for t in range(256):
            m.lm_head.weight[successor.get(t, default), t] = 1.0
    return m


EMOJI = "\N{GRINNING FACE}".encode()  # four bytes, four tokens


def emoji_model():
    # "a" -> the emoji's four bytes, over and over: the output is 😀😀😀...
    cycle = {ord("a"): EMOJI[0], EMOJI[0]: EMOJI[1], EMOJI[1]: EMOJI[2], EMOJI[2]: EMOJI[3], EMOJI[3]: EMOJI[0]}
    return successor_model(cycle, default=ord("b"))


@pytest.mark.parametrize("method", ["ar", "racer", "pld"])
def test_stop_string_of_many_tokens_per_character_is_found(method):
    """Issue 15 item 1: a stop string of five emoji (20 byte tokens) was never found."""
    stop = "\N{GRINNING FACE}" * 5
    result = generate(emoji_model(), ByteTokenizer(), "a", max_new_tokens=100, method=method, stop=stop,
                      eos_token_id=[])
    assert result.stop_reason == "stop_string"
    assert result.token_ids == list(EMOJI) * 5 and result.text == stop
    # Issue 15 item 2: the steps count what was committed, not drafts after the stop string.
    assert sum(a + 1 for a in result.accepted_lengths) == len(result.token_ids) - 1
    assert result.mean_accepted_tokens == pytest.approx((len(result.token_ids) - 1) / result.steps)


def test_stop_string_check_decodes_a_bounded_tail():
    """A stop string that never comes: each check decodes a tail of bounded length, whatever
    the length of the output (no cost growing with it)."""
    tokenizer = ByteTokenizer()
    lengths = []
    decode = tokenizer.decode
    tokenizer.decode = lambda ids, **kw: lengths.append(len(ids)) or decode(ids, **kw)
    result = generate(emoji_model(), tokenizer, "a", max_new_tokens=400, method="ar", stop="\N{GRINNING FACE}x",
                      eos_token_id=[])
    assert result.stop_reason == "max_new_tokens" and len(result.token_ids) == 400
    assert len(lengths) > 400 and max(lengths[:-1]) <= 16  # the last decode is the result's text


def test_accepted_lengths_count_what_was_committed():
    """Issue 15 item 2: EOS inside an accepted block cut the output, not the statistics."""
    prompt, truth = PROMPTS["repetitive"], list(reference("llama", "repetitive"))
    # An EOS inside the first step's block of 8 accepted drafts (not its last token).
    cut, eos = next((i + 1, t) for i, t in enumerate(truth) if 2 <= i <= 7 and t not in truth[:i])
    drafter = OracleDrafter(prompt, truth, VOCAB, depth=8)
    result = generate(model("llama"), None, prompt, max_new_tokens=NEW, drafter=drafter, eos_token_id=eos)
    assert result.token_ids == truth[:cut] and result.stop_reason == "eos"
    assert sum(a + 1 for a in result.accepted_lengths) == cut - 1
    assert result.raw_accepted_lengths[:-1] == result.accepted_lengths[:-1]
    assert sum(a + 1 for a in result.raw_accepted_lengths) > cut - 1  # the oracle's drafts ran past it
    assert result.mean_accepted_tokens == pytest.approx((cut - 1) / result.steps)


def test_stop_must_be_text():
    """Issue 15 item 7: stop=b"x" was a ValueError about empty strings."""
    for stop in (b"x", bytearray(b"x"), ["ok", b"x"], [3]):
        with pytest.raises(TypeError, match="stop: expected a string or a list of strings"):
            generate(model("llama"), CharTokenizer(), PROMPTS["random-a"], max_new_tokens=4, stop=stop)


def test_a_model_without_attention_is_refused_with_our_message():
    """Issue 15 item 7: a Mamba model got transformers' own message about cache layers."""
    from transformers import MambaConfig, MambaForCausalLM

    mamba = MambaForCausalLM(MambaConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, state_size=4)).eval()
    with pytest.raises(ValueError, match="model: MambaForCausalLM has no attention layers"):
        generate(mamba, None, PROMPTS["random-a"], max_new_tokens=4)


def test_generation_config_settings_we_do_not_apply_are_warned_about():
    """Issue 15 item 7 and its last paragraph: settings model.generate applies and we do
    not (static cache, repetition penalty, ...) were silently ignored."""
    m = model("llama")
    saved = m.generation_config
    try:
        m.generation_config = copy.deepcopy(saved)
        m.generation_config.cache_implementation = "static"
        with pytest.warns(UserWarning, match="cache_implementation='static' is not used"):
            generate(m, None, PROMPTS["random-a"], max_new_tokens=4)
        m.generation_config = copy.deepcopy(saved)
        # The greedy processors are applied now (racer_ref.integrations.processing): equal to model.generate, no warning.
        m.generation_config.repetition_penalty = 1.3
        m.generation_config.no_repeat_ngram_size = 3
        m.generation_config.suppress_tokens = [5]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ours = generate(m, None, PROMPTS["random-a"], max_new_tokens=8).token_ids
        assert ours == greedy_reference(m, PROMPTS["random-a"], 8)
        m.generation_config = copy.deepcopy(saved)
        m.generation_config.top_k = 20  # applies to sampling only
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            generate(m, None, PROMPTS["random-a"], max_new_tokens=4)
        with pytest.warns(UserWarning, match="top_k=20"):
            generate(m, None, PROMPTS["random-a"], max_new_tokens=4, temperature=1.0, seed=0)
    finally:
        m.generation_config = saved


def test_capacity_defaults_to_the_devices_and_auto_is_lossless():
    m = model("llama")
    prompt = PROMPTS["repetitive"]
    truth = list(reference("llama", "repetitive"))
    default = generate(m, None, prompt, max_new_tokens=NEW)  # on a CPU: DEFAULT_CPU_CAPACITY
    assert default.token_ids == truth and max(default.tree_sizes) <= DEFAULT_CPU_CAPACITY == 16
    paper = generate(m, None, prompt, max_new_tokens=NEW, capacity=64)
    assert paper.token_ids == truth and max(paper.tree_sizes) > 16
    auto = generate(m, None, prompt, max_new_tokens=NEW, capacity="auto")
    assert auto.token_ids == truth and max(auto.tree_sizes) <= 64


def test_ar_warns_about_drafter_settings_it_does_not_use():
    """``method="ar"`` drafts nothing: a drafter setting passed with it is named in a warning, not dropped silently."""
    m, p = tiny_model(), [5, 6, 7, 8] * 3
    want = generate(m, None, p, max_new_tokens=3, method="ar").token_ids
    for name, value in (("capacity", 4), ("breadth", 2), ("ngram", 3), ("backend", "python"), ("tree", "expected")):
        with pytest.warns(UserWarning, match=rf"^{name}: .* is not used: method 'ar' drafts nothing"):
            assert generate(m, None, p, max_new_tokens=3, method="ar", **{name: value}).token_ids == want
