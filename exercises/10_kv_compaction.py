"""Exercise 10: KV compaction (tutorial 7, spec step 7).

After a verify pass each layer's cache holds the L prefix entries followed by the n tree
nodes in breadth-first order. The accepted nodes are generally not contiguous, so gather
them into slots L, L+1, ... and cut the cache right after them::

    before:  [ prefix (L) | 0 1 2 3 4 5 6 ... n-1 ]      accepted = [0, 2, 5]
    after:   [ prefix (L) | 0 2 5 ]

Check your code:  racer-ref check exercises/10_kv_compaction.py
(the named cases, then random trees against racer_ref.verify.keep_accepted).
"""

from __future__ import annotations

from typing import Sequence

import torch


def keep_accepted(keys: torch.Tensor, past_length: int, accepted: Sequence[int]) -> torch.Tensor:
    """The cache of one layer with only the accepted path kept after the prefix.

    Args:
        keys: ``(batch, heads, L + n, head_dim)`` keys (or values) after the verify pass.
        past_length: L, the cache length before the pass.
        accepted: accepted node indices, root first (``accepted[0] == 0``).

    Returns:
        ``(batch, heads, L + len(accepted), head_dim)``: the prefix, then the accepted
        nodes' entries in path order.
    """
    ...
