"""``--capacity auto``: choose the draft-tree capacity that gives the most tokens per second.

This goes beyond the paper, which fixes the capacity at C = 64 (tuned for a 7B model on a
GPU, where a verify pass over 64 tokens costs about as much as over 1). On a CPU, or for a
small model, the cost of a verify pass grows with the number of tree nodes, and the best
capacity is a trade-off:

    tokens/s (C)  =  E[a + 1 | C]  /  T(C)

with ``E[a + 1 | C]`` the expected tokens per step (accepted drafts + the bonus token) and
``T(C)`` the wall time of one step. Both come from numbers we already have:

* ``E[a + 1 | C]``: the drafter's own acceptance estimates (docs/explanation/expected-tree.md).
  Each step the drafter drafts its full tree; every node carries its estimated path
  probability, and the expected tree at capacity C is the root plus the C - 1 most
  probable nodes, so ``E[a + 1 | C] = 1 + sum of the C - 1 largest path probabilities``
  (:func:`expected_tokens_by_capacity`). No running averages, no exploration: the
  estimates learn from every verify pass whatever the capacity. This is exact for
  ``tree="expected"``; with the paper's merge (the default) the tree at C is the paper's,
  not the C most probable nodes, so the prediction is an approximation.
* ``T(C)``: :func:`profile_forward` times the target's verify pass over trees of several
  sizes on this device (once per model, device and dtype). While generating we time every
  step: a capacity with a few (``min_timed``) recent measured steps gets their median; the
  others get their profile times a scale (the median ratio of measured step to profile over
  the recent steps), which absorbs drafting and the load of the machine.

:class:`AdaptiveDrafter` then drafts again at the chosen C and records the predicted and
the realised tokens per step (``CapacityController.report()``).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter, deque
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from racer_ref.reference.limits import DEFAULT_CAPACITY
from racer_ref.tree import SOURCE_RETRIEVAL, DraftTree, tree_attention_mask
from racer_ref.harness.records import DrafterWrapper, TraceStep

#: Capacities considered by default (the root counts; 1 = plain autoregressive decoding).
DEFAULT_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)

# Profiles already measured in this process: (model id, device, dtype, sizes) -> seconds.
_PROFILES: Dict[Tuple[Any, ...], Dict[int, float]] = {}


# ----------------------------------------------------------------------------- profiling


def chain_tree(n: int, vocab_size: int, seed: int = 0) -> DraftTree:
    """A chain of ``n`` random tokens as a draft tree (the cost of a verify pass depends on
    the node count, not on the shape)."""
    rng = np.random.default_rng(seed)
    parents = np.arange(-1, n - 1, dtype=np.int64)
    return DraftTree(
        tokens=rng.integers(0, vocab_size, n).astype(np.int64),
        parents=parents,
        depths=np.arange(n, dtype=np.int64),
        attention_mask=tree_attention_mask(parents),
        retrieve_indices=np.arange(n, dtype=np.int64)[None],
        sources=np.r_[0, np.full(n - 1, SOURCE_RETRIEVAL)].astype(np.uint8),
    )


def profile_forward(model: Any, sizes: Sequence[int] = DEFAULT_CANDIDATES, prefix_length: int = 256,
                    repeats: int = 3, use_cache: bool = True) -> Dict[int, float]:
    """Seconds of one verify pass over ``n`` tree tokens, for each ``n`` in ``sizes``, after
    ``prefix_length`` cached tokens, on the model's device and dtype (includes the top-k and
    argmax over the logits that every step does). Sizes are timed in interleaved rounds; we
    keep each size's fastest round and make the result non-decreasing in ``n`` (both against
    the noise of a busy machine).

    Args:
        model: the target model.
        sizes: tree sizes (>= 1).
        prefix_length: tokens in the KV cache (>= 1; clipped to the context length).
        repeats: timed passes per size (>= 1), after one untimed warm-up pass per size.
        use_cache: reuse a profile measured earlier in this process.

    Returns:
        ``{n: seconds}``.

    Raises:
        ValueError: a size < 1, ``repeats`` < 1 or ``prefix_length`` < 1.
    """
    import torch

    from racer_ref.verify import make_cache
    from racer_ref.speedups.cpu_kernels import routed_layer_count
    from racer_ref.exactness import input_device, plain_pass

    sizes = sorted({int(s) for s in sizes})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"sizes: expected integers >= 1, got {sizes}")
    if repeats < 1 or prefix_length < 1:
        raise ValueError("repeats and prefix_length: expected integers >= 1")
    # What changes the cost of a pass: the model, where and how it runs, what is measured.
    key = (id(model), str(model.device), str(model.dtype), getattr(model.config, "_attn_implementation", None),
           routed_layer_count(model), _kernel_state(model), tuple(sizes), prefix_length, repeats)
    if use_cache and key in _PROFILES:
        return dict(_PROFILES[key])
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    vocab = int(config.vocab_size)
    max_len = getattr(config, "max_position_embeddings", None) or getattr(config, "max_seq_len", None) or 10**9
    prefix_length = max(1, min(prefix_length, max_len - max(sizes) - 1))
    sync = torch.cuda.synchronize if input_device(model).type == "cuda" else (lambda: None)
    rng = np.random.default_rng(0)
    trees = {n: chain_tree(n, vocab, seed=n) for n in sizes}
    forward = _verify_pass(model)
    samples: Dict[int, List[float]] = {n: [] for n in sizes}
    with torch.inference_mode():
        cache = make_cache(model, None)  # the kind of cache generate() uses for this model
        prompt = torch.as_tensor(rng.integers(0, vocab, prefix_length), device=input_device(model))
        plain_pass(model, cache, prompt)  # (a model that keeps no KV cache is refused here, by name)
        for n in sizes:  # warm-up: one untimed pass per size (allocator, kernels)
            _pass(forward, model, cache, trees[n], prefix_length, 8)
        # Rounds over all sizes, so that a burst of load from other processes hits every
        # size alike instead of spoiling one.
        for _ in range(repeats):
            for n in sizes:
                sync()
                tic = time.perf_counter()
                _pass(forward, model, cache, trees[n], prefix_length, 8)
                sync()
                samples[n].append(time.perf_counter() - tic)
    # Other processes can only add time, so the fastest round is the least disturbed one.
    fastest = [min(samples[n]) for n in sizes]
    # A pass over more tokens never costs less: where a smaller size measured slower than a
    # larger one, that was noise; keep the smallest time seen at this size or any larger one.
    out = {n: min(fastest[i:]) for i, n in enumerate(sizes)}
    _PROFILES[key] = dict(out)
    return out


def _kernel_state(model: Any) -> Any:
    """What of racer_ref.speedups.cpu_kernels is switched on now (it changes a pass's cost)."""
    handle = getattr(model, "racer_cpu_kernels", None)
    if handle is None:
        return None
    fast = getattr(handle, "fast_forward", None)
    return (handle.enabled, repr(handle.choice), fast is not None and fast.enabled)


def _verify_pass(model: Any) -> Any:
    """The verify pass that ``generate()`` runs on ``model``: ``forward_tree``, or for a model
    that decodes with chains (:mod:`racer_ref.exactness`: ALiBi, or a failed probe)
    ``forward_chain``, which is also the one such a model can run at all (Bloom cannot take a
    tree's 4-D mask)."""
    from racer_ref.exactness import known_cause
    from racer_ref.verify import forward_chain, forward_tree

    plan = getattr(model, "racer_plan", None)
    chains = known_cause(model)[0] is not None or (plan is not None and plan.mode != "tree")
    return forward_chain if chains else forward_tree


def _pass(forward: Any, model: Any, cache: Any, tree: DraftTree, prefix_length: int, k: int) -> None:
    logits = forward(model, cache, tree)  # (n, vocab)
    logits.topk(k, dim=-1).indices.cpu()
    logits.argmax(dim=-1).tolist()
    for layer in cache.layers:  # drop the tree again: back to the prefix only
        layer.keys = layer.keys[:, :, :prefix_length]
        layer.values = layer.values[:, :, :prefix_length]


# ----------------------------------------------------------------------------- controller


def expected_tokens_by_capacity(path_probs: Any, capacities: Sequence[int]) -> Dict[int, float]:
    """``E[a + 1 | C]`` for each capacity ``C``, from one full draft's path probabilities.

    The expected tree keeps the nodes with the highest path probability, so the tree at
    capacity ``C`` is the root plus the ``C - 1`` most probable nodes of the full draft:

        E[a + 1 | C] = 1 + sum of the C - 1 largest path probabilities (root excluded)

    A capacity beyond the draft's size gives the whole draft.

    Args:
        path_probs: ``(n,)`` path probabilities, root first (``Drafter.path_probs``).
        capacities: capacities (>= 1).

    Returns:
        ``{C: E[a + 1 | C]}``.
    """
    probs = np.sort(np.asarray(path_probs, dtype=np.float64)[1:])[::-1]  # (n - 1,) best first
    cumulative = np.concatenate([[1.0], 1.0 + np.cumsum(probs)])  # [C - 1] -> E[a + 1 | C]
    return {int(c): float(cumulative[min(int(c), len(cumulative)) - 1]) for c in capacities}


class CapacityController:
    """Picks each step's capacity from the drafter's own estimates and the measured costs:

        C* = argmax over the candidates C of  E[a + 1 | C] / T(C)

    ``E[a + 1 | C]`` comes from this step's draft (:func:`expected_tokens_by_capacity`),
    ``T(C)`` from :meth:`step_seconds`. Ties go to the smaller capacity.

    Args:
        forward_seconds: ``{capacity: seconds per verify pass}`` (:func:`profile_forward`).
        window: measured step times kept per capacity (the most recent ones; they count for
            ``4 * window`` steps), and half the number of steps behind the time scale.
        min_timed: measured recent steps a capacity needs before their median replaces its
            scaled profile as ``T(C)``; ``None``: never.

    Raises:
        ValueError: empty ``forward_seconds``, a capacity < 1, or ``min_timed`` out of range.
    """

    def __init__(self, forward_seconds: Dict[int, float], window: int = 16,
                 min_timed: Optional[int] = 3) -> None:
        if not forward_seconds or min(forward_seconds) < 1:
            raise ValueError("forward_seconds: expected {capacity >= 1: seconds}, non-empty")
        if min_timed is not None and (not isinstance(min_timed, int) or min_timed < 1):
            raise ValueError(f"min_timed: expected None or an int >= 1, got {min_timed!r}")
        self.candidates = sorted(int(c) for c in forward_seconds)
        self.forward_seconds = {int(c): float(s) for c, s in forward_seconds.items()}
        self.window, self.min_timed = window, min_timed
        self.scale = 1.0  # measured step time / profiled forward time (median of recent steps)
        # (step number, seconds) of the recent measured steps at each capacity
        self.step_times: Dict[int, Deque[Tuple[int, float]]] = {
            c: deque(maxlen=self.window) for c in self.candidates}
        self._ratios: Deque[float] = deque(maxlen=2 * self.window)
        self.steps = 0
        self.used: List[int] = []
        # Per step with an estimate: the predicted and the realised a + 1.
        self.predicted: List[float] = []
        self.realised: List[int] = []

    @property
    def choice(self) -> int:
        """The capacity used most often so far (the largest candidate before any step)."""
        if not self.used:
            return self.candidates[-1]
        return Counter(self.used).most_common(1)[0][0]

    def step_seconds(self, capacity: int) -> float:
        """``T(C)``: the profiled verify pass times the measured scale (the median ratio of
        measured step time to profile over the recent steps at any capacity). With
        ``min_timed`` set, the median of the measured steps at C replaces it when at least
        ``min_timed`` of them are recent (among the last ``4 * window`` steps)."""
        if self.min_timed is not None:
            recent = [t for step, t in self.step_times[capacity] if self.steps - step <= 4 * self.window]
            if len(recent) >= self.min_timed:
                return statistics.median(recent)
        return self.forward_seconds[capacity] * self.scale

    def choose(self, path_probs: Any) -> Tuple[int, Optional[float]]:
        """This step's capacity and its predicted ``E[a + 1]``, from the full draft's
        ``path_probs`` (``None``, a drafter without estimates: the largest candidate, no
        prediction)."""
        self.steps += 1
        if path_probs is None:
            capacity, predicted = self.candidates[-1], None
        else:
            expected = expected_tokens_by_capacity(path_probs, self.candidates)
            capacity = max(self.candidates, key=lambda c: (expected[c] / self.step_seconds(c), -c))
            predicted = expected[capacity]
        self.used.append(capacity)
        return capacity, predicted

    def update_tokens(self, predicted: Optional[float], realised: int) -> None:
        """Record one step's predicted and realised ``a + 1`` (for the report)."""
        if predicted is not None:
            self.predicted.append(float(predicted))
            self.realised.append(int(realised))

    def update_time(self, capacity: int, seconds: float) -> None:
        """Fold in one step's measured wall time at ``capacity`` nodes."""
        ref = self.forward_seconds.get(capacity)
        if ref is None or ref <= 0 or seconds <= 0:
            return
        self.step_times[capacity].append((self.steps, seconds))
        self._ratios.append(seconds / ref)
        self.scale = statistics.median(self._ratios)

    def report(self) -> Dict[str, Any]:
        """What was chosen: the most used capacity, capacities used (count per capacity),
        per candidate the profiled and current ms per step, and the predicted vs realised
        tokens per step (means over the steps with a prediction)."""
        n = len(self.predicted)
        return {
            "choice": self.choice,
            "used": dict(sorted(Counter(self.used).items())),
            "forward_ms": {c: round(s * 1e3, 2) for c, s in self.forward_seconds.items()},
            "step_ms": {c: round(self.step_seconds(c) * 1e3, 2) for c in self.candidates},
            "time_scale": round(self.scale, 3),
            "predicted_tokens_per_step": round(sum(self.predicted) / n, 3) if n else None,
            "realised_tokens_per_step": round(sum(self.realised) / n, 3) if n else None,
            "steps_predicted": n,
        }

    def describe(self) -> str:
        """One human line about the choices."""
        used = Counter(self.used)
        total = max(1, sum(used.values()))
        common = ", ".join(f"{c} ({100 * k / total:.0f}%)" for c, k in used.most_common(3))
        rep = self.report()
        return (f"capacity auto: used {common} of {total} steps; tokens per step predicted "
                f"{rep['predicted_tokens_per_step']}, realised {rep['realised_tokens_per_step']}; "
                "step ms by C (profiled): "
                + " ".join(f"{c}:{self.step_seconds(c) * 1e3:.0f}({s * 1e3:.0f})"
                           for c, s in self.forward_seconds.items()))


class AdaptiveDrafter(DrafterWrapper):
    """Wraps a drafter built at the largest candidate capacity; each step it drafts the full
    tree, lets the :class:`CapacityController` pick ``C`` from the tree's path probabilities,
    and drafts again at ``C`` (``inner.draft(..., capacity=C)``: with ``tree="expected"``
    that is exactly the ``C`` most probable nodes of the full tree, so the prediction is
    the tree's own ``E[a + 1]``). Drafting costs microseconds, a verify pass milliseconds.

    Args:
        inner: a ``racer_ref.Drafter`` whose capacity is at least the largest candidate
            that should be reachable (any other drafter: its full tree every step).
        controller: the shared controller (it may outlive this request).
    """

    def __init__(self, inner: Any, controller: CapacityController) -> None:
        super().__init__(inner)
        self.controller = controller
        # The controller reads the drafter's acceptance estimates (beyond the paper's step).
        attach = getattr(inner, "attach_estimator", None)
        if attach is not None:
            attach()
        self.predicted: List[Optional[float]] = []  # per recorded step, aligned with `steps`

    def reset(self) -> None:
        super().reset()
        self.predicted = []

    def _draft(self, root: int, last_topk: Any) -> tuple:
        full = self.inner.draft(root, last_topk=last_topk)
        probs = getattr(self.inner, "path_probs", None)
        capacity, predicted = self.controller.choose(probs)
        self.predicted.append(predicted)
        if probs is None or capacity >= len(full):
            return full, capacity
        return self.inner.draft(root, last_topk=last_topk, capacity=capacity), capacity

    def _on_step(self, step: TraceStep) -> None:
        if not step.accepted:
            return
        predicted = self.predicted[step.step] if step.step < len(self.predicted) else None
        self.controller.update_tokens(predicted, len(step.accepted))

    def _on_timed(self, step: TraceStep) -> None:
        if step.capacity is not None and step.seconds is not None:
            self.controller.update_time(step.capacity, step.seconds)


def auto_controller(model: Any, max_capacity: int = DEFAULT_CAPACITY, candidates: Sequence[int] = DEFAULT_CANDIDATES,
                    prefix_length: int = 256, repeats: int = 3) -> CapacityController:
    """Profile this model on its device (cached per process) and build a controller over the
    candidates up to ``max_capacity``.

    Raises:
        ValueError: ``max_capacity`` < 1.
    """
    if max_capacity < 1:
        raise ValueError(f"max_capacity: expected an int >= 1, got {max_capacity}")
    sizes = [c for c in candidates if c <= max_capacity] or [max_capacity]
    return CapacityController(profile_forward(model, sizes, prefix_length=prefix_length, repeats=repeats))
