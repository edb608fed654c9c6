"""The per-step figures of a decoding run, defined once (the result, the benchmarks, the CLI).

A **step** is one target forward pass after the prefill; its **accepted length** ``a`` is
the number of drafted tokens it committed (the root excluded), so the step committed
``a + 1`` tokens. This module depends on nothing but the standard library.
"""

from __future__ import annotations

import math
from typing import Iterable


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
