"""Step records: drafter wrappers that see (or change) every decoding step without a hook in the loop.

:class:`DrafterWrapper` wraps a drafter (anything with ``observe`` / ``commit`` / ``draft``,
such as ``racer_ref.Drafter``) and passes ``generate(..., drafter=wrapper)`` every call
through. It needs no hook in the verification loop: ``generate()`` commits ``root +
accepted drafts`` to the drafter after each step (see the spec page, "One decoding step",
step 9), so walking the last tree with those tokens finds the accepted path.

* :class:`StepRecorder` records every step (:class:`TraceStep`: tree, accepted path,
  committed tokens, wall time); ``racer_ref.harness.trace`` draws them;
  the command line (``racer-ref generate --trace``) and the benchmarks record with it.
* ``racer_ref.speedups.capacity.AdaptiveDrafter`` chooses the capacity of every step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from racer_ref.tree import DraftTree


@dataclass
class TraceStep:
    """One verify step.

    Attributes:
        step: 0-based step index within the request.
        tree: the draft tree fed to the target (after any truncation by the wrapper).
        accepted: accepted node indices, root first (``accepted[0] == 0``); accepted length
            ``a = len(accepted) - 1``.
        committed: the tokens committed by this step (root + accepted drafts).
        capacity: the capacity asked for (None when the wrapper does not choose it).
        seconds: wall time from this step's ``draft`` call to the next one (None for the
            last step).
    """

    step: int
    tree: DraftTree
    accepted: List[int] = field(default_factory=list)
    committed: List[int] = field(default_factory=list)
    capacity: Optional[int] = None
    seconds: Optional[float] = None


def accepted_path(tree: DraftTree, committed: Sequence[int]) -> List[int]:
    """Node indices of ``tree`` spelling ``committed`` from the root, as far as they match.

    Args:
        tree: a draft tree.
        committed: tokens, ``committed[0]`` expected to be the root.

    Returns:
        ``[0, u1, u2, ...]`` (``[]`` if ``committed`` does not start with the root).
    """
    tokens = tree.tokens.tolist()
    if not len(committed) or int(committed[0]) != tokens[0]:
        return []
    children = tree.children()
    path, node = [0], 0
    for token in committed[1:]:
        # The child of `node` carrying the next committed token, if the tree has one.
        node = next((c for c in children[node] if tokens[c] == int(token)), -1)
        if node < 0:
            break
        path.append(node)
    return path


class DrafterWrapper:
    """A drafter that forwards to ``inner`` and sees every step; subclasses add behaviour.

    The verification loop calls ``draft(root)`` once per step, then ``commit`` with the
    tokens the step committed: ``root + accepted drafts`` while generation goes on, and
    after the last step ``root + accepted drafts + next root`` (cut at EOS / stop string).
    So a step's accepted path is known for sure at the next ``draft`` call; for the last
    step, call :meth:`finalize` with the ``GenerationResult`` (``MethodRunner`` does). Attributes
    the wrapper lacks (``method``, ``capacity``...) come from ``inner``.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.steps: List[TraceStep] = []
        self._pending: Optional[TraceStep] = None  # drafted, not yet committed
        self._awaiting: Optional[TraceStep] = None  # committed, accepted path not yet known
        self._t_draft = 0.0

    # -- the drafter interface -------------------------------------------------------------
    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        self.inner.observe(token_ids, topk_ids)

    def commit(self, token_ids: Any) -> None:
        if self._pending is not None:
            self._pending.committed = [int(t) for t in np.asarray(token_ids).reshape(-1).tolist()]
            self._awaiting, self._pending = self._pending, None
        self.inner.commit(token_ids)

    def draft(self, root: int, last_topk: Any = None) -> DraftTree:
        now = time.perf_counter()
        if self._awaiting is not None:  # a regular commit: exactly root + accepted drafts
            self._resolve(self._awaiting, None)
        if self.steps and self.steps[-1].seconds is None:
            self.steps[-1].seconds = now - self._t_draft
            self._on_timed(self.steps[-1])
        self._t_draft = now
        tree, capacity = self._draft(root, last_topk)
        self._pending = TraceStep(step=len(self.steps), tree=tree, capacity=capacity)
        self.steps.append(self._pending)
        return tree

    def reset(self) -> None:
        self.inner.reset()
        self.steps = []
        self._pending = self._awaiting = None

    def finalize(self, result: Any) -> None:
        """Align the recorded steps with ``result`` (a ``GenerationResult``) after a call:
        resolve the last step with its accepted length, and cut each recorded tree to the
        nodes actually verified (``result.tree_sizes``: the loop clips trees in depth near
        ``max_new_tokens``, which keeps a breadth-first prefix)."""
        lengths = list(getattr(result, "accepted_lengths", []))
        if self._awaiting is not None:
            self._resolve(self._awaiting, lengths[-1] if lengths else None)
            self._awaiting = None
        for step, size in zip(self.steps[-len(lengths):] if lengths else [], getattr(result, "tree_sizes", [])):
            if len(step.tree) > size:
                step.tree = step.tree.subtree(range(size))

    def _resolve(self, step: TraceStep, accepted_length: Optional[int]) -> None:
        block = step.committed if accepted_length is None else step.committed[: accepted_length + 1]
        step.accepted = accepted_path(step.tree, block)
        self._on_step(step)

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found on the wrapper itself.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- hooks -----------------------------------------------------------------------------
    def _draft(self, root: int, last_topk: Any) -> tuple:
        """Return ``(tree, capacity asked for or None)``."""
        return self.inner.draft(root, last_topk=last_topk), None

    def _on_step(self, step: TraceStep) -> None:
        """Called once the step's accepted path is known."""

    def _on_timed(self, step: TraceStep) -> None:
        """Called once the step's wall time is known (at the next ``draft``)."""


class StepRecorder(DrafterWrapper):
    """Records every step (tree + accepted path) of the drafter it wraps; see :class:`TraceStep`.

    Example::

        rec = StepRecorder(racer_ref.Drafter("racer", vocab_size=V))
        result = racer_ref.generate(model, tok, ids, drafter=rec)
        rec.finalize(result)
        print_trace(rec.steps, tok)      # racer_ref.harness.trace
    """
