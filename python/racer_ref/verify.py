"""Verification: one forward pass over a draft tree, keep what the target agrees with.

This is docs/explanation/spec.md steps 5 (verify), 6 (accept) and 7 (commit, the KV-cache half), plus
the lossless acceptance rule of its "Sampling" section. It knows drafters only through the
flat arrays of a :class:`~racer_ref.tree.DraftTree`. Read it top to bottom.

The picture for one step, with L tokens already in the KV cache and a 6-node draft tree::

    committed tokens:  t0 t1 ... t(L-1) | root            (root = last prediction, not cached)
    draft tree:        node 0 = root                       BFS order, root first
                        |-- 1 "the" --- 3 "cat" --- 5 "sat"
                        `-- 2 "a"   --- 4 "dog"
    position ids:      L + depth       = [L, L+1, L+1, L+2, L+2, L+3]
    attention:         every node sees the whole cached prefix and itself and its ancestors;
                       node 5 sees 0, 1, 3, 5 but not its cousins 2 and 4.

One forward pass gives a row of logits per node. Row u is the target's prediction for the
token after node u *on u's own path*, so walking the tree from the root and following the
child the target predicts finds the longest draft path the target agrees with (step 6).
The last accepted node's prediction becomes the next root, for free.

How :func:`racer_ref.generate` strings these functions together (greedy case)::

    logits = forward_prompt(model, cache, prompt)          # cache: the prompt
    root = argmax(logits[-1])
    while not stopped:
        tree = drafter.draft(root)                         # any drafter: only arrays
        L = cache.get_seq_length()
        logits = forward_tree(model, cache, tree)          # cache: prompt.. + n tree nodes
        accepted, root = accept_greedy(logits, tree)
        keep_accepted(cache, L, accepted)                  # cache: prompt.. + accepted path
        emit(tree.tokens[accepted[1:]] + [root])

Everything here works on batch size 1 and a transformers ``DynamicCache`` whose layers hold
``keys`` / ``values`` tensors of shape (1, heads, seq, head_dim) (transformers >= 4.56).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, List, Optional, Tuple

import numpy as np
import torch

from racer_ref.tree import DraftTree, accept_greedy  # noqa: F401 (documented here too: the walk of step 6 lives in tree.py, numpy only)


@functools.lru_cache(maxsize=None)
def cache_keyword(model_class: type) -> str:
    """Name of the forward argument that takes the KV cache, looked up once per model class:
    transformers 5 renamed ``past_key_values`` to ``cache``; we pass what ``forward`` declares."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


@functools.lru_cache(maxsize=None)
def takes_position_ids(model_class: type) -> bool:
    """Whether ``forward`` declares ``position_ids`` (not Bloom, MPT, ``BartForCausalLM``)."""
    return "position_ids" in inspect.signature(model_class.forward).parameters


# ----------------------------------------------------------------------------- the KV cache
def make_cache(model: Any, cache: Any) -> Any:
    """The empty ``DynamicCache`` the prefill fills, of full-attention layers only (else a
    ``ValueError``): the caller's, or a new one; for a model prepared by ``speed_up_model``,
    one whose layers write in place (:mod:`racer_ref.speedups.kv_cache`, the same numbers)."""
    from transformers import DynamicCache, cache_utils
    from transformers.cache_utils import DynamicLayer

    # The model's own layout tells sliding-window and linear-attention layers apart (a given
    # DynamicCache() has no layers before its first forward pass).
    layout = DynamicCache(config=model.config)
    attention = getattr(cache_utils, "CacheLayerMixin", DynamicLayer)  # what attention layers share
    if not any(isinstance(layer, attention) for layer in layout.layers):
        raise ValueError(f"model: {type(model).__name__} has no attention layers ({model.config.model_type}); "
                         "racer-ref verifies a draft tree through tree attention, so it needs a transformer "
                         "with full-attention layers")
    for layer in layout.layers:
        if type(layer) is not DynamicLayer:
            raise ValueError(UNSUPPORTED_LAYER.format(type(layer).__name__) + f" (model: {type(model).__name__})")
    if cache is not None:
        return _given_cache(cache, len(layout.layers))
    if getattr(model, "racer_cpu_kernels", None) is not None:  # prepared by speed_up_model
        from racer_ref.speedups.kv_cache import growing_cache

        return growing_cache(model)
    return layout


#: The error for a cache layer that cannot keep an accepted tree path.
UNSUPPORTED_LAYER = ("cache: layer type {} is not supported (sliding-window, linear-attention and quantized "
                     "layers cannot keep an accepted tree path); only full-attention DynamicLayer")


def _given_cache(cache: Any, num_layers: int) -> Any:
    """The caller's ``cache``, after checking that it is an empty ``DynamicCache`` of
    full-attention layers (plain, or writing in place), one per layer of the model's
    ``num_layers`` (or none yet: ``DynamicCache()`` makes them at the first forward pass)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    from racer_ref.speedups.kv_cache import GrowingLayer

    if type(cache) is not DynamicCache:
        raise ValueError(f"cache: only an empty transformers DynamicCache is supported, got {type(cache).__name__}")
    if not hasattr(cache, "layers"):
        raise ValueError("cache: needs a DynamicCache with per-layer tensors (transformers >= 4.56)")
    if cache.get_seq_length() != 0:
        raise ValueError("cache: must be empty; generate() prefills it with the prompt")
    if cache.layers and len(cache.layers) != num_layers:
        raise ValueError(f"cache: {len(cache.layers)} layers, the model has {num_layers}")
    for layer in cache.layers:
        if type(layer) not in (DynamicLayer, GrowingLayer):
            raise ValueError(UNSUPPORTED_LAYER.format(type(layer).__name__))
    return cache


def forward_prompt(model: torch.nn.Module, cache, prompt_ids: torch.Tensor) -> torch.Tensor:
    """A plain causal pass as ``model.generate`` feeds tokens: the prefill (empty cache, before
    spec step 1), or a chain after the cache. Positions follow the cache, counted from 0 (as
    generate passes them where ``forward`` takes ``position_ids``: RoBERTa's own start at 2).

    Args:
        prompt_ids: ``(L,)`` int64 token ids on the model's device.

    Returns:
        ``(L, vocab)`` logits; row i predicts the token after ``prompt_ids[i]``, now in the cache.
    """
    kwargs = {cache_keyword(type(model)): cache}  # transformers builds the triangular mask itself
    if takes_position_ids(type(model)):
        start = cache.get_seq_length()
        kwargs["position_ids"] = torch.arange(start, start + len(prompt_ids), device=prompt_ids.device)[None]
    out = model(input_ids=prompt_ids[None], use_cache=True, **kwargs)  # logits (1, L, vocab)
    return out.logits[0]  # (L, vocab)


def tree_attention_bias(tree_mask: torch.Tensor, past_length: int, dtype: torch.dtype) -> torch.Tensor:
    """The 4-D additive attention mask of one verify pass (spec step 4, "tree attention mask").

    transformers hands a 4-D mask to the attention kernels untouched. Both eager attention
    (``scores + mask``) and SDPA (a float ``attn_mask`` is added to the scores) read it as an
    additive bias: 0 where a query may look, the dtype's most negative value where it may not.

    Args:
        tree_mask: ``(n, n)`` bool, ``[i, j]`` True iff j is i or an ancestor of i.
        past_length: L, the number of tokens in the KV cache.
        dtype: the model's floating dtype (the bias is added to scores of that dtype).

    Returns:
        ``(1, 1, n, L + n)`` tensor of ``dtype`` on ``tree_mask``'s device.
    """
    n = tree_mask.shape[0]
    # Start with "everything visible": the cached prefix columns stay 0 for every node.
    bias = torch.zeros(n, past_length + n, dtype=dtype, device=tree_mask.device)  # (n, L + n)
    # Inside the tree, hide every node that is not the query itself or one of its ancestors.
    bias[:, past_length:].masked_fill_(~tree_mask, torch.finfo(dtype).min)  # (n, n) block of (n, L + n)
    return bias[None, None]  # (1, 1, n, L + n)


def forward_tree(model: torch.nn.Module, cache, tree: DraftTree) -> torch.Tensor:
    """Verify: one forward pass of the target over all n draft-tree nodes (spec step 5).

    The n new keys/values are appended to the cache in BFS order, after the L cached ones;
    :func:`keep_accepted` later keeps only the accepted path.

    Returns:
        ``(n, vocab)`` logits; row u predicts the token after node u on u's own path.
    """
    device = cache.layers[0].keys.device  # the model's (also when accelerate offloads its weights)
    past_length = cache.get_seq_length()  # L
    tokens = torch.as_tensor(tree.tokens, device=device)  # (n,) int64
    depths = torch.as_tensor(tree.depths, device=device)  # (n,) int64
    tree_mask = torch.as_tensor(tree.attention_mask, device=device)  # (n, n) bool
    # A node at depth d sits d tokens after the root, and the root comes right after the cache.
    position_ids = (past_length + depths)[None]  # (1, n)
    # A lone root sees the whole prefix and itself: plain causal attention, so we let
    # transformers take its one-token path (no mask to build or add; plain decoding).
    bias = None if tree.tokens.shape[0] == 1 else tree_attention_bias(tree_mask, past_length, model.dtype)  # (1, 1, n, L + n)
    out = model(
        input_ids=tokens[None],  # (1, n)
        attention_mask=bias,  # (1, 1, n, L + n), or None for a lone root
        position_ids=position_ids,  # (1, n)
        use_cache=True,
        **{cache_keyword(type(model)): cache},
    )  # logits (1, n, vocab)
    return out.logits[0]  # (n, vocab)


def forward_chain(model: torch.nn.Module, cache, tree: DraftTree) -> torch.Tensor:
    """Verify a chain (each node the child of the one before, or the root alone) as
    ``model.generate`` feeds tokens (:func:`forward_prompt`: no mask, positions from the
    cache). Exact for models whose positions come from cache slots (ALiBi), where a branching
    tree is not (:mod:`racer_ref.exactness`).

    Returns:
        ``(n, vocab)`` logits; row u predicts the token after node u.
    """
    return forward_prompt(model, cache, torch.as_tensor(tree.tokens, device=cache.layers[0].keys.device))


def argmax_from_topk(logits: torch.Tensor, topk_values: torch.Tensor, topk_ids: torch.Tensor) -> List[int]:
    """``logits.argmax(dim=-1)`` as a list, read off a top-k the caller computed anyway.

    Where a row's best value is unique (strictly above its second), top-k's first id *is*
    that row's argmax; ties and NaNs ask ``argmax`` itself, so the result is always exactly
    argmax's (which picks the first of equal maxima). Saves a pass over the vocabulary per
    row: on a CPU, about 0.9 ms per step of 12 nodes with SmolLM2's 49,152 tokens.

    Args:
        logits: ``(n, vocab)`` float.
        topk_values, topk_ids: ``logits.topk(k, dim=-1)``, each ``(n, k)``, sorted, any k >= 1.

    Returns:
        n ints, the argmax of each row.
    """
    if topk_ids.shape[-1] < 2:  # no second value to rule out a tie
        return logits.argmax(dim=-1).tolist()
    unique = topk_values[:, 0] > topk_values[:, 1]  # (n,) bool; False for ties and NaN
    if bool(unique.all()):
        return topk_ids[:, 0].tolist()
    return torch.where(unique, topk_ids[:, 0], logits.argmax(dim=-1)).tolist()


def accept_sampling(
    probs: torch.Tensor, tree: DraftTree, generator: Optional[torch.Generator] = None
) -> Tuple[List[int], int]:
    """Lossless acceptance for deterministic multi-drafts (spec "Sampling").

    At node u with target distribution p, try the distinct children in BFS order. Child c is
    accepted with probability ``p(c) / mass``, where mass is what p has left after the
    children already rejected at u. If c is rejected its probability is set to 0 (mass drops
    by p(c)) and the next child is tried. If every child is rejected, the next root is
    sampled from p restricted to the tokens never rejected.

    Why this is lossless: write ``m_i = 1 - p(c_1) - ... - p(c_{i-1})``. We reach child i
    when children 1..i-1 were all rejected, with probability ``prod_j (1 - p(c_j) / m_j)
    = prod_j m_{j+1} / m_j = m_i``, and then accept it with ``p(c_i) / m_i``: child i comes
    out with probability ``p(c_i)``. A token x that is no child comes out with probability
    ``m_last * p(x) / m_last = p(x)``. So the output has the target's distribution,
    whatever the drafts are; the drafts only decide how many tokens one pass yields.

    Args:
        probs: ``(n, vocab)`` float target distributions (after temperature / top-p), one
            row per node; each row sums to 1.
        generator: a CPU ``torch.Generator`` for the uniform draws and the final sample.

    Returns:
        ``(accepted, next_root)`` as in :func:`accept_greedy`.
    """
    parents = torch.as_tensor(tree.parents[1:], device=probs.device)  # (n-1,)
    child_tokens = torch.as_tensor(tree.tokens[1:], device=probs.device)  # (n-1,)
    # p_parent(child token) for every non-root node, gathered on the device, copied once.
    p_draft = [0.0] + probs[parents, child_tokens].tolist()  # (n,) as a list; [0] unused
    tokens = tree.tokens.tolist()
    children = tree.children()
    accepted = [0]
    node = 0
    while True:
        mass = 1.0  # probability not yet rejected at this node
        rejected: List[int] = []  # tokens whose probability is now 0
        for child in children[node]:
            # Accept with probability p(c) / mass (uniform draw in [0, 1) from the generator).
            if torch.rand((), generator=generator).item() * mass < p_draft[child]:
                break
            mass = max(mass - p_draft[child], 0.0)
            rejected.append(tokens[child])
        else:
            # No child accepted: sample the next root from what is left of p at `node`.
            # (copy=True: never write into `probs` itself, even when it already is on the CPU)
            residual = probs[node].to(device="cpu", dtype=torch.float32, copy=True)  # (vocab,)
            residual[rejected] = 0.0  # (vocab,) with the rejected children's mass removed
            if residual.sum() <= 0:  # only by rounding: all mass sat on rejected children
                return accepted, rejected[-1]
            return accepted, int(torch.multinomial(residual, 1, generator=generator))
        node = child
        accepted.append(node)


def keep_accepted(cache, past_length: int, accepted: List[int]) -> None:
    """Keep the accepted path's KV entries, in consecutive slots, and drop the rest (step 7).

    After :func:`forward_tree` every layer holds L prefix entries followed by the n tree
    nodes in BFS order. The accepted nodes are generally not contiguous (node 0, then maybe
    2, 5, 11), so we gather them into slots L, L+1, ... and cut the cache after them::

        before:  [ prefix (L) | 0 1 2 3 4 5 6 ... n-1 ]      accepted = [0, 2, 5]
        after:   [ prefix (L) | 0 2 5 ]

    Args:
        cache: a ``DynamicCache`` that has just gone through :func:`forward_tree`.
        past_length: L, the cache length before that forward pass.
        accepted: node indices of the accepted path, root first.
    """
    # Nodes already in their final slot need no copy: the root always is (node 0 -> slot L),
    # and so is every path that starts 0, 1, 2, ... in BFS order (a chain, or plain decoding).
    # Skipping them matters on a CPU: a gather over every layer costs about a millisecond.
    start = 0
    while start < len(accepted) and accepted[start] == start:
        start += 1
    end = past_length + len(accepted)
    if start < len(accepted):
        device = cache.layers[0].keys.device
        # Slots of the accepted nodes still to move, in path order.
        slots = torch.tensor(accepted[start:], device=device) + past_length  # (a + 1 - start,)
        for layer in cache.layers:
            index = slots.to(layer.keys.device)  # a no-op unless layers sit on several GPUs
            # Gather first (advanced indexing copies), then write into the consecutive slots.
            layer.keys[:, :, past_length + start:end] = layer.keys[:, :, index]  # (1, heads, a + 1 - start, head_dim)
            layer.values[:, :, past_length + start:end] = layer.values[:, :, index]
    for layer in cache.layers:
        if layer.keys.shape[2] != end:
            # Drop the rejected nodes: the cache now ends with the accepted path.
            layer.keys = layer.keys[:, :, :end]  # (1, heads, L + a + 1, head_dim)
            layer.values = layer.values[:, :, :end]  # (1, heads, L + a + 1, head_dim)
