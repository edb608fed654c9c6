"""The best chain of a RACER draft tree, for engines that verify chains only.

A serving engine such as vLLM checks one chain of ``K`` draft tokens per request and step;
it has no tree attention for model-free drafts. RACER there proposes the highest-ranked path
of its tree: the first-child path from the root (retrieval first, then copy-logit), found by
the Rust core (``racer_ref._core.best_chain``; twin ``racer_ref.reference.chain.best_chain``).

``ChainDrafter`` gives our own loop the same drafts, so that one can measure what chain-only
verification costs: ``generate(model, prompt=ids, drafter=ChainDrafter(Drafter("racer",
vocab), 5))`` decodes with the best 5-token chain of each RACER tree, and its MAT compares
with the full tree's on the same prompts (``benchmarks/bench_chain.py``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from racer_ref.drafter import implementation
from racer_ref.tree import DraftTree


def chain_function(backend: str) -> Callable[[Any, int], Any]:
    """``best_chain(parents, length)`` of ``backend`` (``"rust"`` or ``"python"``; the one
    backend switch, :func:`racer_ref.drafter.implementation`).

    Raises:
        TypeError, ValueError: not a backend's name (:func:`racer_ref.drafter.backend_name`).
    """
    return implementation(backend).best_chain


class ChainDrafter:
    """A drafter whose every draft is the best chain of another drafter's tree.

    ``observe`` and ``commit`` go to the wrapped drafter unchanged (it learns exactly what it
    would learn alone); ``draft`` asks it for its tree and keeps the root and the
    first-child path below it, at most ``length`` tokens: what vLLM verifies of RACER.

    Args:
        drafter: a ``racer_ref.Drafter`` (any method; ``"racer"`` for RACER).
        length: ``K``, draft tokens per step (>= 1), as vLLM's ``num_speculative_tokens``.

    Raises:
        TypeError: ``length`` not an int, or ``drafter`` without draft/observe/commit.
        ValueError: ``length < 1``.
    """

    def __init__(self, drafter: Any, length: int) -> None:
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
            raise TypeError(f"length: must be an int, got {type(length).__name__}")
        if length < 1:
            raise ValueError(f"length: must be >= 1, got {length}")
        missing = [n for n in ("draft", "observe", "commit") if not callable(getattr(drafter, n, None))]
        if missing:
            raise TypeError(f"drafter: expected a racer_ref.Drafter, got {type(drafter).__name__} "
                            f"without {', '.join(missing)}")
        self.drafter = drafter
        self.length = int(length)
        self._best_chain = chain_function(getattr(drafter, "backend", "rust"))

    @property
    def method(self) -> str:
        """``"<method>-chain"``, e.g. ``"racer-chain"``."""
        return f"{self.drafter.method}-chain"

    @property
    def vocab_size(self) -> int:
        return self.drafter.vocab_size

    @property
    def breadth(self) -> int:
        """The wrapped drafter's breadth (the top-k width generate() passes to observe)."""
        return self.drafter.breadth

    def draft(self, root: int, last_topk: Any = None) -> DraftTree:
        """The root and the best chain of the wrapped drafter's tree for ``root``."""
        tree = self.drafter.draft(root, last_topk)
        nodes = np.asarray(self._best_chain(tree.parents, self.length), dtype=np.int64)
        return tree.subtree(np.concatenate([[0], nodes]))

    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        self.drafter.observe(token_ids, topk_ids)

    def commit(self, token_ids: Any) -> None:
        self.drafter.commit(token_ids)

    def __repr__(self) -> str:
        return f"ChainDrafter({self.drafter!r}, length={self.length})"
