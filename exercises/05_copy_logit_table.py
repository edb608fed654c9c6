"""Exercise 05: the copy-logit table (tutorial 5, spec step 8).

For every token id v the table keeps the top-k next-token ids the target predicted right
after its most recent verified occurrence of v: a dense ``[vocab_size, k]`` int array plus
a per-row "seen" flag (an unseen row is empty, not a row of token 0s).

Check your code:  racer-ref check exercises/05_copy_logit_table.py
(named cases, then random observe() calls against the Rust core's table).
"""

from __future__ import annotations

from typing import List, Sequence

import numpy as np


class CopyLogitTable:
    """Dense ``[vocab_size, k]`` copy-logit table with a per-row ``seen`` flag.

    Args:
        vocab_size: number of token ids (rows), >= 1.
        k: ids kept per row (the breadth; paper 8), in ``[1, vocab_size]``.
    """

    def __init__(self, vocab_size: int, k: int) -> None:
        self.vocab_size = vocab_size
        self.k = k
        ...

    def observe(self, token_ids: Sequence[int], topk_ids: Sequence[Sequence[int]]) -> None:
        """Write ``table[token_ids[i]] = topk_ids[i][:k]`` for every i, in order.

        Args:
            token_ids: ``(n,)`` ids the target was fed.
            topk_ids: ``(n, k')`` ids, ``k' >= k``: row i is the target's top-k' after
                position i, best first. Only the first k columns are kept. A token repeated
                in ``token_ids`` keeps its last row.
        """
        ...

    def row(self, token: int) -> List[int]:
        """Row ``token`` as a list of k ids, best first; ``[]`` if never seen."""
        ...
