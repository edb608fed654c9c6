"""The per-step figures of a decoding run, defined once (the result, the benchmarks, the CLI):
:class:`GenerationResult`, what one ``generate()`` call returns, and MAT.

A **step** is one target forward pass after the prefill; its **accepted length** ``a`` is
the number of drafted tokens it committed (the root excluded), so the step committed
``a + 1`` tokens. This module depends on nothing but the standard library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional


def mean_accepted_tokens(accepted_lengths: Iterable[int]) -> float:
    """MAT: the mean of ``a + 1`` over steps, i.e. committed tokens per target forward pass.

    Args:
        accepted_lengths: ``a`` of each step (ints >= 0), of one call or pooled over many.

    Returns:
        the mean (1.0 for plain autoregressive decoding); NaN when there are no steps (the
        mean of nothing: no forward pass after the prefill, e.g. ``max_new_tokens <= 1``).
        JSON files (``racer-ref bench``) store that NaN as ``null``.
    """
    lengths = list(accepted_lengths)
    if not lengths:
        return math.nan
    return sum(lengths) / len(lengths) + 1.0


#: Keys of :attr:`GenerationResult.timings` (seconds).
TIMING_KEYS = ("prefill", "drafting", "forward", "acceptance", "bookkeeping", "total")


@dataclass
class GenerationResult:
    """What one :func:`racer_ref.generate` call produced.

    Attributes:
        token_ids: the new tokens only (prompt excluded), including a final EOS token if one
            stopped generation (as ``model.generate`` returns it).
        text: ``tokenizer.decode(token_ids, skip_special_tokens=True)``, or ``None`` without
            a tokenizer.
        accepted_lengths: per verify step, the accepted length ``a``: drafted tokens the
            step committed (root excluded), after the cut of a stopping rule (EOS, a stop
            string, ``max_new_tokens``), so ``sum(a + 1) == len(token_ids) - 1`` (the first
            token comes from the prefill). MAT and the benchmarks use it.
        raw_accepted_lengths: per verify step, drafted tokens the target accepted before
            that cut (equal to ``accepted_lengths`` but for a step a stopping rule cut).
        tree_sizes: per verify step, the number of draft-tree nodes fed to the target.
        timings: seconds spent in ``prefill`` (prompt forward pass and first root),
            ``drafting`` (the drafter's draft/observe/commit), ``forward`` (verify passes),
            ``acceptance`` (walking the tree, sampling), ``bookkeeping`` (KV-cache
            compaction, stopping rules, streaming), and ``total`` (wall time of the call).
        stop_reason: ``"eos"``, ``"stop_string"``, ``"stopping_criteria"``,
            ``"max_new_tokens"`` or ``"max_length"`` (the model's context length is full).
        method: the drafting method used.
    """

    token_ids: List[int]
    text: Optional[str]
    accepted_lengths: List[int] = field(default_factory=list)
    raw_accepted_lengths: List[int] = field(default_factory=list)
    tree_sizes: List[int] = field(default_factory=list)
    timings: Dict[str, float] = field(default_factory=dict)
    stop_reason: str = "max_new_tokens"
    method: str = "racer"

    @property
    def steps(self) -> int:
        """Number of verify steps (target forward passes after the prefill)."""
        return len(self.accepted_lengths)

    @property
    def mean_accepted_tokens(self) -> float:
        """MAT (:func:`mean_accepted_tokens`): 1.00 for ``"ar"``, NaN without steps."""
        return mean_accepted_tokens(self.accepted_lengths)
