"""The draft tree as the verification loop sees it: a handful of flat numpy arrays.

This dataclass is the only thing the verification loop knows about drafters
(racer-spec.md, step 4, "Flatten"). Every drafter, Rust or Python, returns one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: ``sources`` values. The root is neither drafted by retrieval nor by logits.
SOURCE_ROOT = 0
#: The node came from the retrieval tree (Aho-Corasick automaton).
SOURCE_RETRIEVAL = 1
#: The node came from the logits tree (copy-logit table).
SOURCE_LOGITS = 2
#: Both trees proposed this node (``SOURCE_RETRIEVAL | SOURCE_LOGITS``).
SOURCE_BOTH = 3


@dataclass(frozen=True)
class DraftTree:
    """A draft tree flattened breadth-first, root first (racer-spec.md step 4).

    Attributes:
        tokens: ``(n,)`` int64 token ids; ``tokens[0]`` is the root.
        parents: ``(n,)`` int64 parent node index; ``parents[0] == -1`` and
            ``parents[i] < i`` for every other node.
        depths: ``(n,)`` int64 depth below the root (root 0). Position id of node i
            is ``L + depths[i]`` with L the number of tokens in the KV cache.
        attention_mask: ``(n, n)`` bool tree attention mask: ``[i, j]`` is True iff
            j is i or an ancestor of i.
        retrieve_indices: ``(num_leaves, max_depth + 1)`` int64, one row per
            root-to-leaf path (node indices, root first), padded with -1.
        sources: ``(n,)`` uint8: ``SOURCE_ROOT``, ``SOURCE_RETRIEVAL``,
            ``SOURCE_LOGITS`` or ``SOURCE_BOTH``.
    """

    tokens: np.ndarray
    parents: np.ndarray
    depths: np.ndarray
    attention_mask: np.ndarray
    retrieve_indices: np.ndarray
    sources: np.ndarray

    def __len__(self) -> int:
        """Number of nodes ``n`` (root included)."""
        return int(self.tokens.shape[0])
