"""Offline replay: the MAT of a drafter on recorded greedy text, and the best MAT any draft
tree over the same candidates could reach.

Why. Under greedy decoding the accepted path of a verify pass is always a prefix of the
greedy continuation, so once we know that continuation (one plain greedy run) and the
target's top-k at every position of it (one forward pass over the whole text), we can
replay a drafter without the model: draft, walk the tree along the recorded tokens, feed the
drafter the recorded rows. That takes milliseconds instead of minutes, which is what
designing draft trees needs, and it lets us ask a question the live loop cannot answer:
*how many tokens per step could a perfect tree have accepted?*

The protocol is exactly ``generate(..., observe_rejected=False)``: after each step the
drafter observes the rows of the accepted path only (a rejected node's row depends on a
text that never exists, and the recording does not have it). The default loop
(``observe_rejected=True``) also writes those rows into the copy-logit table, so its MAT
differs a little; ``benchmarks/mat_trees.py`` measures that one.

The bound. With this protocol the drafter's candidates at a step depend only on where the
step starts: the automaton has committed every token before the root, and the copy-logit
table holds the recorded row of the last occurrence of every token before the root, whatever
the steps before were. So for every start position ``j`` we can compute ``reach[j]``, the
length of the longest prefix of the true continuation that is a path of candidate children
(the retrieval tree at the drafter's capacity, and the copy-logit rows: the candidates both
the paper's merge and the expected tree draw from), capped at ``capacity - 1``. A step at
``j`` can accept any ``a <= reach[j]`` and no more, with any tree of ``capacity`` nodes. The
fewest steps to cover the text then follow from a dynamic program over start positions, and
``MAT <= (tokens covered) / (fewest steps)`` for every tree rule, every capacity rule up to
``capacity`` and every acceptance estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Sequence

import numpy as np
import torch

from racer_ref.tree import clip_draft_tree
from racer_ref.metrics import mean_accepted_tokens
from racer_ref.reference.limits import DEFAULT_BREADTH, DEFAULT_MAX_NODES, DEFAULT_NGRAM
from racer_ref.tree import accept_greedy

__all__ = ["Recording", "record", "replay", "accepted_bound", "fewest_steps", "bound_mat"]


@dataclass(frozen=True)
class Recording:
    """A greedy run and the target's top-k at every position of it.

    Attributes:
        prompt_ids: the ``P`` prompt token ids.
        output_ids: the ``N`` greedy output token ids (``N >= 1``).
        topk_ids: ``(P + N, k)`` int64; row ``i`` is the target's top-k ids (best first)
            after token ``i`` of ``prompt_ids + output_ids``, as the loop computes them.
        vocab_size: the model's vocabulary size.

    Raises:
        ValueError: an empty prompt or output, ``topk_ids`` not of shape ``(P + N, k >= 1)``
            with integer ids, or an id outside ``[0, vocab_size)``.
    """

    prompt_ids: List[int]
    output_ids: List[int]
    topk_ids: np.ndarray
    vocab_size: int

    def __post_init__(self) -> None:
        """Refuse a recording the replay cannot read: ``ValueError`` naming the field."""
        if not self.prompt_ids:
            raise ValueError("prompt_ids: expected at least one token id")
        if not self.output_ids:
            raise ValueError("output_ids: expected at least one token id")
        topk = self.topk_ids
        if not isinstance(topk, np.ndarray) or topk.ndim != 2 or topk.dtype.kind not in "iu":
            raise ValueError("topk_ids: expected a 2-D integer numpy array")
        rows = len(self.prompt_ids) + len(self.output_ids)
        if topk.shape[0] != rows or topk.shape[1] < 1:
            raise ValueError(f"topk_ids: expected shape ({rows}, k >= 1), got {tuple(topk.shape)}")
        ids = np.concatenate([np.asarray(self.prompt_ids), np.asarray(self.output_ids), topk.ravel()])
        if ids.min() < 0 or ids.max() >= self.vocab_size:
            raise ValueError(f"topk_ids, prompt_ids, output_ids: ids must lie in [0, vocab_size = {self.vocab_size})")

    @property
    def k(self) -> int:
        """Columns of ``topk_ids``."""
        return int(self.topk_ids.shape[1])


def record(model: torch.nn.Module, prompt_ids: Sequence[int], max_new_tokens: int, k: int = 8) -> Recording:
    """Decode greedily (``method="ar"``), then run one forward pass over prompt and output.

    Args:
        model: a Hugging Face causal LM; prompt_ids: ``P >= 1`` token ids;
        max_new_tokens: ``N >= 2`` (a run needs at least one step after the prefill);
        k: columns of the recorded top-k, ``>= 1`` (the drafters read ``breadth <= k``).

    Raises:
        ValueError: ``max_new_tokens < 2`` or ``k < 1``.
    """
    from racer_ref import generate

    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 2:
        raise ValueError(f"max_new_tokens: expected an int >= 2, got {max_new_tokens!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k: expected an int >= 1, got {k!r}")
    prompt = [int(t) for t in prompt_ids]
    output = [int(t) for t in generate(model, None, prompt, max_new_tokens=max_new_tokens, method="ar").token_ids]
    with torch.inference_mode():
        ids = torch.tensor([prompt + output], device=model.device)
        logits = model(input_ids=ids).logits[0]  # (P + N, vocab)
    topk = logits.topk(k, dim=-1).indices.cpu().numpy().astype(np.int64)
    return Recording(prompt, output, topk, int(model.config.vocab_size))


def replay(rec: Recording, drafter: Any) -> List[int]:
    """The accepted length ``a`` of every step of ``generate(..., observe_rejected=False)``
    with this drafter on the recorded text, without the model.

    Args:
        rec: a :class:`Recording`; drafter: a fresh (or deliberately pre-warmed)
            :class:`racer_ref.Drafter` whose ``breadth <= rec.k``.

    Returns:
        one ``a`` per step; ``racer_ref.metrics.mean_accepted_tokens`` gives the MAT.

    Raises:
        ValueError: the drafter's breadth exceeds ``rec.k``.
    """
    if int(drafter.breadth) > rec.k:
        raise ValueError(f"drafter: breadth {drafter.breadth} exceeds the recording's k = {rec.k}")
    prompt, n, topk = rec.prompt_ids, len(rec.output_ids), rec.topk_ids
    full, p = prompt + rec.output_ids, len(prompt)
    # Prefill, as generate() does it: every prompt row, then the prompt is committed.
    drafter.observe(np.asarray(prompt, dtype=np.int64), topk[:p])
    drafter.commit(np.asarray(prompt, dtype=np.int64))
    lengths: List[int] = []
    j = 0  # output index of the root; output[: j + 1] is emitted
    while j < n - 1:
        root = full[p + j]
        tree = clip_draft_tree(drafter.draft(root, last_topk=topk[p + j - 1]), n - j - 2)
        # Greedy acceptance, as the loop does it (tree.accept_greedy); the target's choice
        # after a node at depth d is the recorded token d + 1 places after the root (right
        # on the accepted path, which is the only place acceptance reads it).
        predicted = [full[p + j + 1 + int(d)] for d in tree.depths]
        path, _ = accept_greedy(None, tree, predicted)
        a = len(path) - 1
        lengths.append(a)
        drafter.observe(tree.tokens[path], topk[p + j: p + j + a + 1])
        j += a + 1
        # Commit what became output, except the new root (exactly the tokens in the cache).
        drafter.commit(np.asarray(full[p + j - a - 1: p + j], dtype=np.int64))
    return lengths


def accepted_bound(rec: Recording, capacity: int, breadth: int = DEFAULT_BREADTH, ngram: int = DEFAULT_NGRAM,
                   max_nodes: int = DEFAULT_MAX_NODES) -> List[int]:
    """The accepted lengths of the best possible run at ``capacity``: the fewest steps any
    sequence of draft trees over the drafters' candidates needs (module docstring).

    Candidates are those of the ``racer`` method (retrieval tree and copy-logit rows), so the
    bound holds for ``racer``, ``retrieval`` and ``logits`` alike, with either tree rule.

    Args:
        rec: a :class:`Recording`; capacity: nodes per tree, root included, in ``[1, 4096]``;
        breadth, ngram, max_nodes: the drafter's settings (``breadth <= rec.k``).

    Returns:
        one ``a`` per step of the best run (the longest first step among equally short runs);
        its MAT (``mean_accepted_tokens``) is an upper bound on the replayed MAT.

    Raises:
        ValueError: ``capacity`` out of range or ``breadth > rec.k`` (and the drafter's own
            checks on ``breadth``, ``ngram``, ``max_nodes``).
    """
    from racer_ref.reference.drafter import Drafter as ReferenceDrafter
    from racer_ref.reference.expected_tree import RetrievalTrie, candidate_children

    if isinstance(breadth, int) and not isinstance(breadth, bool) and breadth > rec.k:
        raise ValueError(f"breadth: {breadth} exceeds the recording's k = {rec.k}")
    # The reference drafter validates the settings and holds the automaton and the table.
    state = ReferenceDrafter("racer", vocab_size=rec.vocab_size, capacity=capacity, breadth=breadth,
                             ngram=ngram, max_nodes=max_nodes)
    capacity = state.capacity
    prompt, n, topk = rec.prompt_ids, len(rec.output_ids), rec.topk_ids
    full, p = prompt + rec.output_ids, len(prompt)
    state.table.observe(np.asarray(prompt, dtype=np.int64), topk[:p])
    state.commit(np.asarray(prompt, dtype=np.int64))
    # reach[j]: the longest true continuation after the root at output index j that is a
    # path of candidate children (at most capacity - 1, and at most the n - j - 2 tokens a
    # step may still emit before the last one).
    reach = [0] * n
    for j in range(n - 1):
        root = full[p + j]
        paths, freqs = state.automaton.retrieve_counted(root, capacity)
        trie = RetrievalTrie(root, paths, freqs)
        token, link, a = root, 0, 0
        while a < min(capacity - 1, n - j - 2):
            truth = full[p + j + a + 1]
            hit = next((c for c in candidate_children(token, link, trie, state.table, None) if c[0] == truth), None)
            if hit is None:
                break
            token, link, a = truth, hit[2], a + 1
        reach[j] = a
        # Move the state to the next start position: one more row, one more committed token.
        state.table.observe(np.asarray([root], dtype=np.int64), topk[p + j: p + j + 1])
        state.commit(np.asarray([root], dtype=np.int64))
    return fewest_steps(reach)


def fewest_steps(reach: Sequence[int]) -> List[int]:
    """The accepted lengths of the shortest run, when a step whose root is at output index
    ``j`` may accept any ``a`` in ``[0, reach[j]]`` (dynamic programming, last index first).

    A run starts at ``j = 0``, moves to ``j + a + 1`` and ends at ``j = len(reach) - 1``.
    Among runs with equally few steps the one whose first steps are longest wins. Taking the
    longest ``a`` every time is not always shortest: with ``reach = [2, 3, 0, 0, 0, 0]``
    it takes 3 steps (2, 0, 0), the best run 2 (0, 3).

    Raises:
        ValueError: an entry below 0 or beyond the end (``j + reach[j] + 1 > len - 1``).
    """
    n = len(reach)
    for j in range(n - 1):
        if not 0 <= reach[j] <= n - 2 - j:
            raise ValueError(f"reach: entry {j} is {reach[j]}, expected 0..{n - 2 - j}")
    steps = [0] * n  # steps[j]: fewest steps from a root at j to the end
    best = [0] * n  # best[j]: the a that achieves it (the longest among equals)
    for j in range(n - 2, -1, -1):
        fewest, neg_a = min((steps[j + a + 1], -a) for a in range(reach[j] + 1))
        steps[j], best[j] = fewest + 1, -neg_a
    lengths, j = [], 0
    while j < n - 1:
        lengths.append(best[j])
        j += best[j] + 1
    return lengths


def bound_mat(rec: Recording, capacity: int, **settings: Any) -> float:
    """``mean_accepted_tokens(accepted_bound(rec, capacity, **settings))``."""
    return mean_accepted_tokens(accepted_bound(rec, capacity, **settings))
