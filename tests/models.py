"""Tiny seeded random causal LMs built from configs (no download), and test drafters.

The models are small enough for CPU tests (2 layers, hidden 64) and use a small vocabulary
so that greedy decoding of a random model repeats itself now and then, which gives the
drafters something to find. Weights are scaled up from the default initialisation so that
greedy output is neither constant nor a tie-break between near-equal logits.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np
import pytest
import torch

from racer_ref.tree import SOURCE_LOGITS, SOURCE_ROOT, DraftTree

KINDS = ("llama", "gpt2", "qwen2")


@pytest.fixture(autouse=True)
def single_thread() -> Iterator[None]:
    """Tiny models run an order of magnitude faster on one thread than on two busy cores.

    Import it into a test module (``from models import single_thread``) to make it apply
    there; the previous thread count is restored afterwards.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_model(
    kind: str = "llama",
    vocab_size: int = 128,
    seed: int = 0,
    scale: float = 3.0,
    max_positions: int = 256,
    attn: str = "sdpa",
    dtype: torch.dtype = torch.float32,
    eos_token_id: Optional[int] = None,
) -> torch.nn.Module:
    """A seeded random ``kind`` model (``"llama"``, ``"gpt2"`` or ``"qwen2"``) in eval mode.

    ``eos_token_id`` goes into the generation config, so both ``model.generate`` and
    ``racer_ref.generate`` stop on it by default.
    """
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM)

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, bos_token_id=None, eos_token_id=eos_token_id, pad_token_id=None)
    if kind == "llama":
        config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=max_positions,
                             tie_word_embeddings=False, **common)
        model = LlamaForCausalLM(config)
    elif kind == "gpt2":
        config = GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=max_positions, **common)
        model = GPT2LMHeadModel(config)
    elif kind == "qwen2":
        config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=max_positions,
                             tie_word_embeddings=True, **common)
        model = Qwen2ForCausalLM(config)
    else:
        raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.mul_(scale)
    if attn == "sdpa_gqa":
        from racer_ref.speedups.attention import register

        register()
    model.config._attn_implementation = attn
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = eos_token_id if eos_token_id is not None else 0
    return model.to(dtype).eval()


def greedy_reference(model: torch.nn.Module, prompt: Sequence[int], max_new_tokens: int, **kwargs) -> List[int]:
    """``model.generate(do_sample=False)``'s new tokens: the oracle every method must match."""
    ids = torch.tensor([list(prompt)])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, **kwargs)
    return out[0, len(prompt):].tolist()


def make_tree(tokens: Sequence[int], parents: Sequence[int]) -> DraftTree:
    """A valid DraftTree from BFS-ordered ``tokens`` and ``parents`` (``parents[0] == -1``)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    parents = np.asarray(parents, dtype=np.int64)
    n = len(tokens)
    depths = np.zeros(n, dtype=np.int64)
    mask = np.zeros((n, n), dtype=bool)
    for i in range(n):
        assert i == 0 or 0 <= parents[i] < i
        depths[i] = 0 if i == 0 else depths[parents[i]] + 1
        mask[i] = mask[parents[i]] if i else mask[i]
        mask[i, i] = True
    leaves = [i for i in range(n) if i not in set(parents.tolist())]
    rows = []
    for leaf in leaves:
        path = [leaf]
        while parents[path[-1]] >= 0:
            path.append(int(parents[path[-1]]))
        rows.append(path[::-1])
    retrieve = np.full((len(rows), int(depths.max()) + 1), -1, dtype=np.int64)
    for r, path in enumerate(rows):
        retrieve[r, : len(path)] = path
    sources = np.full(n, SOURCE_LOGITS, dtype=np.uint8)
    sources[0] = SOURCE_ROOT
    return DraftTree(tokens, parents, depths, mask, retrieve, sources)


class OracleDrafter:
    """Drafts the true continuation (from a precomputed oracle) hidden among wrong siblings.

    For root at output position i, the tree has ``wrong`` decoy chains first and the true
    chain of ``depth`` tokens last, so the accepted path is never the first branch; at each
    level of the true chain a wrong sibling is added before the true child too. Tokens it is
    fed are recorded so tests can check the observe/commit protocol.
    """

    method = "oracle"

    def __init__(self, prompt: Sequence[int], continuation: Sequence[int], vocab_size: int,
                 depth: int = 4, wrong: int = 2, corrupt_every: int = 0):
        self.sequence = list(prompt) + list(continuation)
        self.vocab_size = vocab_size
        self.depth, self.wrong, self.corrupt_every = depth, wrong, corrupt_every
        self.committed: List[int] = []
        self.observed: List[int] = []
        self.sizes: List[int] = []  # nodes of every tree drafted, before any clipping

    def reset(self) -> None:
        self.committed, self.observed, self.sizes = [], [], []

    def observe(self, token_ids, topk_ids) -> None:
        assert len(token_ids) == len(topk_ids)
        self.observed.extend(np.asarray(token_ids).tolist())

    def commit(self, token_ids) -> None:
        self.committed.extend(np.asarray(token_ids).tolist())

    def _wrong(self, token: int, salt: int) -> int:
        return (token + 1 + salt) % self.vocab_size

    def draft(self, root: int, last_topk=None) -> DraftTree:
        pos = len(self.committed)  # the root sits at this position of the full sequence
        truth = self.sequence[pos + 1 : pos + 1 + self.depth]
        if self.corrupt_every and truth and (len(self.sizes) + 1) % self.corrupt_every == 0:
            truth = truth[: len(truth) // 2] + [self._wrong(t, 7) for t in truth[len(truth) // 2 :]]
        tokens, parents = [root], [-1]

        def add(token: int, parent: int) -> int:
            tokens.append(token)
            parents.append(parent)
            return len(tokens) - 1

        # decoy chains below the root, before the true child
        for w in range(self.wrong):
            first = self._wrong(truth[0] if truth else root, w)
            if truth and first == truth[0]:
                continue
            add(self._wrong(first, 3), add(first, 0))
        parent = 0
        for level, token in enumerate(truth):
            sib = self._wrong(token, 11 + level)
            if level > 0 and sib != token:
                add(sib, parent)  # a wrong sibling before the true child
            parent = add(token, parent)
        order = _bfs_order(parents)
        self.sizes.append(len(tokens))
        return make_tree([tokens[i] for i in order], _remap_parents(parents, order))


def _bfs_order(parents: List[int]) -> List[int]:
    children: Dict[int, List[int]] = {}
    for node, parent in enumerate(parents):
        if parent >= 0:
            children.setdefault(parent, []).append(node)
    order, queue = [], [0]
    while queue:
        node = queue.pop(0)
        order.append(node)
        queue.extend(children.get(node, []))
    return order


def _remap_parents(parents: List[int], order: List[int]) -> List[int]:
    new = {old: i for i, old in enumerate(order)}
    return [-1 if parents[old] < 0 else new[parents[old]] for old in order]
