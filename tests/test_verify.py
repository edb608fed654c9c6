"""The verification module on tiny random models: tree mask, positions, cache, acceptance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from models import KINDS, make_tree, single_thread, tiny_model  # noqa: F401 (single_thread: autouse fixture)
from racer_ref.course.cases.trees import ACCEPT_CASES
from racer_ref.verify import (accept_greedy, forward_prompt, forward_tree, keep_accepted,
                              tree_attention_bias)


PROMPT = [5, 17, 33, 2, 90, 41, 7, 7, 64, 12, 3]
#                    0   1   2   3   4   5   6   7   8   9
TREE_TOKENS = [ 40, 11, 12, 13, 21, 22, 31, 32, 33, 41]
TREE_PARENTS = [-1, 0, 0, 0, 1, 1, 2, 4, 4, 7]
#   0 -+- 1 -+- 4 -+- 7 --- 9
#      |     |     `- 8
#      |     `- 5
#      +- 2 --- 6
#      `- 3


def path_to(parents, node):
    path = [node]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return path[::-1]


def prefilled(model, prompt=PROMPT):
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        forward_prompt(model, cache, torch.tensor(prompt))
    return cache


def tree_logits(model, tokens, parents=TREE_PARENTS, prompt=PROMPT):
    cache = prefilled(model, prompt)
    with torch.no_grad():
        return forward_tree(model, cache, make_tree(tokens, parents)), cache


def test_tree_attention_bias_is_additive_prefix_plus_ancestors():
    tree = make_tree(TREE_TOKENS, TREE_PARENTS)
    bias = tree_attention_bias(torch.as_tensor(tree.attention_mask), 4, torch.float16)
    assert bias.shape == (1, 1, 10, 14) and bias.dtype == torch.float16
    assert (bias[0, 0, :, :4] == 0).all()  # the prefix is visible to every node
    visible = bias[0, 0, :, 4:] == 0
    for node in range(10):
        assert sorted(np.flatnonzero(visible[node].numpy()).tolist()) == sorted(path_to(TREE_PARENTS, node))
    assert (bias[0, 0, :, 4:][~visible] == torch.finfo(torch.float16).min).all()


@pytest.mark.parametrize("attn", ["sdpa", "eager", "sdpa_gqa"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_node_logits_equal_running_its_path_alone(kind, attn):
    model = tiny_model(kind, attn=attn)
    logits, _ = tree_logits(model, TREE_TOKENS)
    assert logits.shape == (10, 128)
    for node in range(10):
        path_tokens = [TREE_TOKENS[i] for i in path_to(TREE_PARENTS, node)]
        with torch.no_grad():
            alone = model(torch.tensor([PROMPT + path_tokens])).logits[0, -1]
        torch.testing.assert_close(logits[node], alone, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_perturbing_a_sibling_changes_only_its_subtree(kind):
    model = tiny_model(kind)
    base, _ = tree_logits(model, TREE_TOKENS)
    perturbed_tokens = list(TREE_TOKENS)
    perturbed_tokens[2] = 99  # node 2: its subtree is {2, 6}
    perturbed, _ = tree_logits(model, perturbed_tokens)
    subtree = {2, 6}
    for node in range(10):
        if node in subtree:
            assert (perturbed[node] - base[node]).abs().max() > 1e-3
        else:
            torch.testing.assert_close(perturbed[node], base[node], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("accepted", [
    [0, 1, 4, 8],  # not contiguous in BFS order: 4 and 8 move, 0 and 1 stay
    [0, 2, 6],  # everything after the root moves
    [0, 1],  # already in place: only the rest is cut off
    [0],  # nothing accepted
    [0, 1, 4, 7, 9],  # the deepest path
])
@pytest.mark.parametrize("kind", KINDS)
def test_keep_accepted_leaves_the_cache_of_prefix_plus_path(kind, accepted):
    model = tiny_model(kind)
    logits, cache = tree_logits(model, TREE_TOKENS)
    keep_accepted(cache, len(PROMPT), accepted)
    assert cache.get_seq_length() == len(PROMPT) + len(accepted)
    reference = prefilled(model, PROMPT + [TREE_TOKENS[i] for i in accepted])
    for ours, theirs in zip(cache.layers, reference.layers):
        torch.testing.assert_close(ours.keys, theirs.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.values, theirs.values, atol=1e-5, rtol=1e-5)
    # The compacted cache keeps working: the next token's logits equal a fresh run's.
    with torch.no_grad():
        nxt = forward_tree(model, cache, make_tree([77, 5], [-1, 0]))
        fresh = model(torch.tensor([PROMPT + [TREE_TOKENS[i] for i in accepted] + [77, 5]])).logits[0, -2:]
    torch.testing.assert_close(nxt, fresh, atol=2e-4, rtol=1e-4)


def fake_logits(predictions, vocab=128):
    logits = torch.zeros(len(predictions), vocab)
    logits[torch.arange(len(predictions)), torch.tensor(predictions)] = 1.0
    return logits


@pytest.mark.parametrize("case", ACCEPT_CASES, ids=[c.name for c in ACCEPT_CASES])
def test_accept_greedy_named_case(case):
    """racer_ref/course/cases/trees.py (also run by ``racer-ref check``): the walk follows the
    predicted child, not the first branch, and stops at the first miss."""
    tree = make_tree(list(case.tokens), list(case.parents))
    assert accept_greedy(fake_logits(list(case.predicted)), tree) == (list(case.accepted), case.next_root)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("attn", ["sdpa", "eager", "sdpa_gqa"])
def test_half_precision_tree_pass_matches_path_alone(dtype, attn):
    model = tiny_model("llama", attn=attn, dtype=dtype)
    logits, _ = tree_logits(model, TREE_TOKENS)
    assert logits.dtype == dtype
    for node in (3, 9):
        path_tokens = [TREE_TOKENS[i] for i in path_to(TREE_PARENTS, node)]
        with torch.no_grad():
            alone = model(torch.tensor([PROMPT + path_tokens])).logits[0, -1]
        torch.testing.assert_close(logits[node].float(), alone.float(), atol=0.1, rtol=0.05)


@pytest.mark.parametrize("kind", KINDS)
def test_a_lone_root_takes_the_plain_causal_path(kind, monkeypatch):
    """A one-node tree needs no tree mask: forward_tree lets transformers decode one token."""
    import racer_ref.verify as verify

    model = tiny_model(kind)
    cache = prefilled(model, PROMPT)

    def no_bias(*args, **kwargs):
        raise AssertionError("a lone root must not build a tree mask")

    monkeypatch.setattr(verify, "tree_attention_bias", no_bias)
    with torch.no_grad():
        logits = forward_tree(model, cache, make_tree([TREE_TOKENS[0]], [-1]))
        alone = model(torch.tensor([PROMPT + [TREE_TOKENS[0]]])).logits[0, -1]
    assert logits.shape == (1, 128) and cache.get_seq_length() == len(PROMPT) + 1
    torch.testing.assert_close(logits[0], alone, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("k", [1, 2, 8])
def test_argmax_from_topk_is_exactly_argmax_with_ties_and_nans(k):
    from racer_ref.verify import argmax_from_topk

    g = torch.Generator().manual_seed(k)
    logits = torch.randn(6, 50, generator=g)
    logits[1, [7, 3]] = 9.0  # a tie at the top: argmax takes the first (3), top-k may not
    logits[2, 20:] = 9.5  # many tied maxima
    logits[3, 11] = float("nan")  # argmax treats NaN as the maximum
    logits[4, 40] = float("inf")
    values, ids = logits.topk(k, dim=-1)
    assert argmax_from_topk(logits, values, ids) == logits.argmax(dim=-1).tolist()
    assert argmax_from_topk(logits, values, ids)[1:3] == [3, 20]
    clean = torch.randn(5, 50, generator=g)
    assert argmax_from_topk(clean, *clean.topk(k, dim=-1)) == clean.argmax(dim=-1).tolist()
