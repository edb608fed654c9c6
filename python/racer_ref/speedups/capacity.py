"""``--capacity auto``: choose the draft-tree capacity that gives the most tokens per second.

This goes beyond the paper, which fixes the capacity at C = 64 (tuned for a 7B model on a
GPU, where a verify pass over 64 tokens costs about as much as over 1). On a CPU, or for a
small model, the cost of a verify pass grows with the number of tree nodes, and the best
capacity is a trade-off:

    tokens/s (C)  =  E[a + 1 | C]  /  T(C)

with ``E[a + 1 | C]`` the expected tokens per step (accepted drafts + the bonus token) and
``T(C)`` the wall time of one step. We estimate both:

* ``T(C)``: :func:`profile_forward` times the target's verify pass over trees of several
  sizes on this device (once per model, device and dtype). While generating we time every
  step: a capacity with a few (``min_timed``) recent measured steps gets their median; the
  others get their profile times a scale (the median ratio of measured step to profile over
  the recent steps), which absorbs drafting, acceptance and the load of the machine.
* ``E[a + 1 | C]``: the drafter always drafts at the largest candidate capacity (drafting
  costs microseconds), and :class:`AdaptiveDrafter` verifies only the first C nodes of that
  tree in a fixed priority order (root, retrieval nodes, then logits nodes, each
  breadth-first; every prefix of that order is a valid tree). Because a smaller capacity
  keeps a prefix of the same order, one verified step tells us exactly how many tokens every
  smaller capacity would have accepted. Larger capacities are extrapolated and explored: every
  ``explore_every`` steps (8) one step uses the largest candidate whose profiled pass costs
  at most ``explore_cost`` (2) times the current choice's, so exploring never costs more
  than one extra step in 8.

``benchmarks/replay_capacity.py`` replays recorded steps through the controller offline
(every step of a C = 64 run, with what each smaller capacity would have accepted). It favours
cheaper, rarer exploration (one step in 16 at 1.25 times the choice's cost) by about 5%, but
it cannot see that every verified node also feeds the copy-logit table: in a real Spec-Bench
run that setting settled on C = 1 for steps without retrieval (a table that learns from one
node per step drafts worse, which makes small trees look worse still) and was 2% slower than
the defaults kept here, which were measured in real runs.

Estimates are exponential moving averages, so the choice keeps adapting while generating.

Acceptance depends a lot on whether the automaton found anything: a step whose full draft has
retrieval nodes (the context plus the root occurred before) often accepts several tokens, a
step with only logits-tree nodes rarely more than one or two. So ``E[a + 1 | C]`` is kept per
*draft context* (:func:`draft_context`: "retrieval" or "no retrieval") and the capacity is
chosen per step for its context, as prompt lookup decoding verifies a single token when it
finds no match; the cost ``T(C)`` is shared.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter, deque
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from racer_ref.hooks import DrafterWrapper, TraceStep
from racer_ref.tree import SOURCE_BOTH, SOURCE_RETRIEVAL, DraftTree

#: Capacities considered by default (the root counts; 1 = plain autoregressive decoding).
DEFAULT_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)

# Profiles already measured in this process: (model id, device, dtype, sizes) -> seconds.
_PROFILES: Dict[Tuple[Any, ...], Dict[int, float]] = {}


# ----------------------------------------------------------------------------- trees


def priority_order(tree: DraftTree) -> np.ndarray:
    """Node indices in the order :class:`AdaptiveDrafter` keeps them: root, then retrieval
    (and both) nodes, then logits nodes, each group breadth-first; a node never comes before
    its parent (enforced, whatever the sources say).

    Returns:
        ``(n,)`` int64 permutation of ``range(n)``.
    """
    n = len(tree)
    src = tree.sources
    group = np.where((src == SOURCE_RETRIEVAL) | (src == SOURCE_BOTH), 1, 2)  # (n,)
    group[0] = 0
    # A node cannot be kept before its parent: its effective rank is the max over its path.
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((np.arange(n), group))] = np.arange(n)
    eff = rank.copy()
    parents = tree.parents
    for node in range(1, n):  # parents precede children in BFS order
        eff[node] = max(eff[node], eff[parents[node]])
    return np.lexsort((rank, tree.depths, eff)).astype(np.int64)


def truncate_tree(tree: DraftTree, capacity: int, order: Optional[np.ndarray] = None) -> DraftTree:
    """The first ``capacity`` nodes of ``tree`` in :func:`priority_order`, as a draft tree in
    breadth-first order (the kept set is prefix-closed, so it is a valid tree).

    Raises:
        ValueError: ``capacity`` < 1.
    """
    if capacity < 1:
        raise ValueError(f"capacity: expected an int >= 1, got {capacity}")
    if capacity >= len(tree):
        return tree
    order = priority_order(tree) if order is None else order
    return tree.subtree(order[:capacity])


def tokens_if_truncated(tree: DraftTree, accepted: Sequence[int],
                        capacities: Sequence[int]) -> Dict[int, int]:
    """Tokens per step (``a + 1``) each capacity would have given on this step.

    Args:
        tree: the verified tree (already truncated to the capacity used).
        accepted: its accepted node indices, root first.
        capacities: capacities to evaluate; only those <= ``len(tree)`` are exact and
            returned.

    Returns:
        ``{capacity: a + 1}``: the accepted path cut at its first node outside the first
        ``capacity`` nodes of :func:`priority_order`.
    """
    order = priority_order(tree)
    position = np.empty(len(tree), dtype=np.int64)
    position[order] = np.arange(len(tree))
    # A capacity C keeps the path up to (not including) the first node at position >= C.
    need = np.maximum.accumulate(position[list(accepted)]) if len(accepted) else np.array([0])
    out = {}
    for c in capacities:
        if c <= len(tree):
            out[int(c)] = int(np.searchsorted(need, c, side="left"))
    return out


def draft_context(tree: DraftTree) -> str:
    """The context a step's acceptance is estimated in: ``"retrieval"`` if the (full) draft
    tree has a node from the retrieval tree (source retrieval or both), else
    ``"no retrieval"``."""
    src = tree.sources[1:]
    return "retrieval" if bool(np.any((src == SOURCE_RETRIEVAL) | (src == SOURCE_BOTH))) else "no retrieval"


# ----------------------------------------------------------------------------- profiling


def chain_tree(n: int, vocab_size: int, seed: int = 0) -> DraftTree:
    """A chain of ``n`` random tokens as a draft tree (the cost of a verify pass depends on
    the node count, not on the shape)."""
    rng = np.random.default_rng(seed)
    return DraftTree(
        tokens=rng.integers(0, vocab_size, n).astype(np.int64),
        parents=np.arange(-1, n - 1, dtype=np.int64),
        depths=np.arange(n, dtype=np.int64),
        attention_mask=np.tril(np.ones((n, n), dtype=bool)),
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

    from racer_ref.speedups.kv_cache import growing_cache
    from racer_ref.speedups.cpu_kernels import routed_layer_count
    from racer_ref.verify import forward_prompt

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
    max_len = getattr(config, "max_position_embeddings", None) or 10**9
    prefix_length = max(1, min(prefix_length, max_len - max(sizes) - 1))
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    rng = np.random.default_rng(0)
    trees = {n: chain_tree(n, vocab, seed=n) for n in sizes}
    samples: Dict[int, List[float]] = {n: [] for n in sizes}
    with torch.inference_mode():
        cache = growing_cache(model)  # the kind of cache generate() uses
        prompt = torch.as_tensor(rng.integers(0, vocab, prefix_length), device=model.device)
        forward_prompt(model, cache, prompt)
        for n in sizes:  # warm-up: one untimed pass per size (allocator, kernels)
            _pass(model, cache, trees[n], prefix_length, 8)
        # Rounds over all sizes, so that a burst of load from other processes hits every
        # size alike instead of spoiling one.
        for _ in range(repeats):
            for n in sizes:
                sync()
                tic = time.perf_counter()
                _pass(model, cache, trees[n], prefix_length, 8)
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


def _pass(model: Any, cache: Any, tree: DraftTree, prefix_length: int, k: int) -> None:
    from racer_ref.verify import forward_tree

    logits = forward_tree(model, cache, tree)  # (n, vocab)
    logits.topk(k, dim=-1).indices.cpu()
    logits.argmax(dim=-1).tolist()
    for layer in cache.layers:  # drop the tree again: back to the prefix only
        layer.keys = layer.keys[:, :, :prefix_length]
        layer.values = layer.values[:, :, :prefix_length]


# ----------------------------------------------------------------------------- controller


def prior_tokens_per_step(capacity: int, slope: float = 0.3) -> float:
    """Our prior guess of ``E[a + 1 | C]`` before any step is seen: ``1 + slope * log2 C``
    (about 2.8 at C = 64, in line with the paper's MAT on Spec-Bench)."""
    return 1.0 + slope * math.log2(max(1, capacity))


class CapacityController:
    """Picks a capacity per step from measured costs and acceptance seen so far.

    Acceptance is estimated per *context* (any hashable; ``None`` by default, and
    :class:`AdaptiveDrafter` passes :func:`draft_context`), costs for all contexts together;
    ``choice`` and ``tokens`` are those of context ``None``, ``choices`` holds every context's.

    Args:
        forward_seconds: ``{capacity: seconds per verify pass}`` (:func:`profile_forward`).
        decay: weight of the past in the moving averages, in ``[0, 1)``.
        explore_every: every this many steps, try a larger candidate once (0: never): the
            largest one whose profiled pass costs at most ``explore_cost`` times the
            choice's, or else the next larger one.
        explore_cost: the exploration budget, as a multiple (>= 1) of the choice's cost.
        start: the first capacity (default: the best by the prior).
        window: measured step times kept per capacity (the most recent ones; they count
            for ``4 * window`` steps), and half the number of steps behind the scale.
        min_timed: measured recent steps a capacity needs before their median replaces its
            scaled profile as ``T(C)``; ``None``: never.

    Raises:
        ValueError: empty ``forward_seconds``, a capacity < 1, ``decay``, ``explore_every``,
            ``explore_cost`` or ``min_timed`` out of range.
    """

    def __init__(self, forward_seconds: Dict[int, float], decay: float = 0.97,
                 explore_every: int = 8, start: Optional[int] = None, window: int = 16,
                 min_timed: Optional[int] = 3, explore_cost: float = 2.0) -> None:
        if not forward_seconds or min(forward_seconds) < 1:
            raise ValueError("forward_seconds: expected {capacity >= 1: seconds}, non-empty")
        if not 0 <= decay < 1:
            raise ValueError(f"decay: expected a float in [0, 1), got {decay}")
        if not isinstance(explore_every, int) or explore_every < 0:
            raise ValueError(f"explore_every: expected an int >= 0, got {explore_every!r}")
        if not explore_cost >= 1:
            raise ValueError(f"explore_cost: expected a float >= 1, got {explore_cost!r}")
        if min_timed is not None and (not isinstance(min_timed, int) or min_timed < 1):
            raise ValueError(f"min_timed: expected None or an int >= 1, got {min_timed!r}")
        self.candidates = sorted(int(c) for c in forward_seconds)
        self.forward_seconds = {int(c): float(s) for c, s in forward_seconds.items()}
        self.decay = decay
        self.explore_every = explore_every
        self.explore_cost = float(explore_cost)
        self.window, self.min_timed = window, min_timed
        # EMA of a + 1 per capacity, per context; `tokens` is context None's.
        self.tokens_by_context: Dict[Any, Dict[int, float]] = {None: {}}
        self.tokens = self.tokens_by_context[None]
        self.scale = 1.0  # measured step time / profiled forward time (median of recent steps)
        # (step number, seconds) of the recent measured steps at each capacity
        self.step_times: Dict[int, Deque[Tuple[int, float]]] = {
            c: deque(maxlen=self.window) for c in self.candidates}
        self._ratios: Deque[float] = deque(maxlen=2 * self.window)
        self.steps = 0
        self.steps_by_context: Counter = Counter()
        self.used: List[int] = []
        self.used_by_context: Dict[Any, List[int]] = {}
        self.choices: Dict[Any, int] = {None: start if start is not None else self._best()}
        self.start = start
        self.explored = 0

    @property
    def choice(self) -> int:
        """The current choice for context ``None``."""
        return self.choices[None]

    # -- estimates ---------------------------------------------------------------------------
    def expected_tokens(self, capacity: int, context: Any = None) -> float:
        """``E[a + 1 | C]`` in ``context``: measured, or extrapolated from the largest measured
        smaller capacity with the prior's shape, or the prior."""
        tokens = self.tokens_by_context.get(context, {})
        if capacity in tokens:
            return tokens[capacity]
        seen = [c for c in tokens if c < capacity]
        if not seen:
            return prior_tokens_per_step(capacity)
        base = max(seen)
        return tokens[base] * prior_tokens_per_step(capacity) / prior_tokens_per_step(base)

    def step_seconds(self, capacity: int) -> float:
        """``T(C)``: the profiled verify pass times the measured scale (the median ratio of
        measured step time to profile over the recent steps at any capacity). With
        ``min_timed`` set, the median of the measured steps at C replaces it when at least
        ``min_timed`` of them are recent (among the last ``4 * window`` steps); old
        measurements are not trusted: a capacity timed during a burst of load and not used
        since would otherwise keep looking slow."""
        if self.min_timed is not None:
            recent = [t for step, t in self.step_times[capacity] if self.steps - step <= 4 * self.window]
            if len(recent) >= self.min_timed:
                return statistics.median(recent)
        return self.forward_seconds[capacity] * self.scale

    def tokens_per_second(self, capacity: int, context: Any = None) -> float:
        return self.expected_tokens(capacity, context) / self.step_seconds(capacity)

    def _best(self, context: Any = None) -> int:
        return max(self.candidates, key=lambda c: (self.tokens_per_second(c, context), -c))

    def _rechoose(self) -> None:
        for context in list(self.choices):
            self.choices[context] = self._best(context)

    # -- the loop ------------------------------------------------------------------------------
    def next_capacity(self, context: Any = None) -> int:
        """The capacity to verify at in the next step, whose draft is in ``context``."""
        self.steps += 1
        self.steps_by_context[context] += 1
        if context not in self.choices:
            self.choices[context] = self.start if self.start is not None else self._best(context)
        choice = self.choices[context]
        capacity = choice
        if self.explore_every and self.steps_by_context[context] % self.explore_every == 0:
            # Explore the largest capacity whose profiled pass costs at most explore_cost
            # times the choice's (or else the next larger one): one such step tells us
            # exactly what every capacity up to it would have accepted.
            budget = self.explore_cost * self.forward_seconds[choice]
            larger = [c for c in self.candidates if c > choice]
            affordable = [c for c in larger if self.forward_seconds[c] <= budget]
            if larger:
                capacity = max(affordable) if affordable else larger[0]
                self.explored += 1
        self.used.append(capacity)
        self.used_by_context.setdefault(context, []).append(capacity)
        return capacity

    def update_tokens(self, observed: Dict[int, int], context: Any = None) -> None:
        """Fold in one step's ``{capacity: a + 1}`` (:func:`tokens_if_truncated`), seen in
        ``context``."""
        tokens = self.tokens_by_context.setdefault(context, {})
        for c, v in observed.items():
            if c in self.forward_seconds:
                old = tokens.get(c)
                tokens[c] = float(v) if old is None else self.decay * old + (1 - self.decay) * v
        self.choices[context] = self._best(context)

    def update_time(self, capacity: int, seconds: float) -> None:
        """Fold in one step's measured wall time at ``capacity`` nodes."""
        ref = self.forward_seconds.get(capacity)
        if ref is None or ref <= 0 or seconds <= 0:
            return
        self.step_times[capacity].append((self.steps, seconds))
        self._ratios.append(seconds / ref)
        self.scale = statistics.median(self._ratios)
        self._rechoose()

    def report(self) -> Dict[str, Any]:
        """What was chosen and why: the final choice, capacities used (count per capacity),
        steps explored, and per candidate the forward ms, E[a + 1] and expected tokens/s."""
        return {
            "choice": self.choice,
            "used": dict(sorted(Counter(self.used).items())),
            "explored_steps": self.explored,
            "forward_ms": {c: round(s * 1e3, 2) for c, s in self.forward_seconds.items()},
            "step_ms": {c: round(self.step_seconds(c) * 1e3, 2) for c in self.candidates},
            "expected_tokens": {c: round(self.expected_tokens(c), 3) for c in self.candidates},
            "expected_tokens_per_s": {c: round(self.tokens_per_second(c), 2) for c in self.candidates},
            "time_scale": round(self.scale, 3),
            "contexts": {
                str(ctx): {
                    "choice": choice,
                    "steps": self.steps_by_context.get(ctx, 0),
                    "used": dict(sorted(Counter(self.used_by_context.get(ctx, [])).items())),
                    "expected_tokens": {c: round(self.expected_tokens(c, ctx), 3) for c in self.candidates},
                }
                for ctx, choice in self.choices.items() if ctx is not None
            },
        }

    def describe(self) -> str:
        """One human line about the choice."""
        used = Counter(self.used)
        total = max(1, sum(used.values()))
        common = ", ".join(f"{c} ({100 * k / total:.0f}%)" for c, k in used.most_common(3))
        contexts = [ctx for ctx in self.choices if ctx is not None]
        if contexts:
            chose = "; ".join(
                f"{ctx}: C={self.choices[ctx]} (expected {self.expected_tokens(self.choices[ctx], ctx):.2f} "
                f"tokens/step, {self.steps_by_context.get(ctx, 0)} steps)" for ctx in contexts)
        else:
            chose = (f"C={self.choice} (expected {self.expected_tokens(self.choice):.2f} "
                     f"tokens/step, {self.tokens_per_second(self.choice):.1f} tokens/s)")
        return (f"capacity auto: chose {chose}; used {common} "
                f"of {total} steps; step ms by C (profiled): "
                + " ".join(f"{c}:{self.step_seconds(c) * 1e3:.0f}({s * 1e3:.0f})"
                           for c, s in self.forward_seconds.items()))


class AdaptiveDrafter(DrafterWrapper):
    """Wraps a drafter built at the largest candidate capacity and verifies, each step, the
    first C nodes chosen by a :class:`CapacityController` (see the module docstring).

    Args:
        inner: a drafter (``racer_ref.Drafter``) whose capacity is at least the largest
            candidate that should be reachable.
        controller: the shared controller (it may outlive this request: acceptance seen in
            earlier requests keeps informing the choice).
        contextual: estimate acceptance per :func:`draft_context` of each step's full draft
            (default), or for all steps together (``False``).
    """

    def __init__(self, inner: Any, controller: CapacityController, contextual: bool = True) -> None:
        super().__init__(inner)
        self.controller = controller
        self.contextual = contextual
        self.contexts: List[Any] = []  # per recorded step, aligned with `steps`

    def reset(self) -> None:
        super().reset()
        self.contexts = []

    def _draft(self, root: int, last_topk: Any) -> tuple:
        full = self.inner.draft(root, last_topk=last_topk)
        context = draft_context(full) if self.contextual else None
        capacity = self.controller.next_capacity(context)
        self.contexts.append(context)
        return truncate_tree(full, capacity), capacity

    def _on_step(self, step: TraceStep) -> None:
        if not step.accepted:
            return
        context = self.contexts[step.step] if step.step < len(self.contexts) else None
        observed = tokens_if_truncated(step.tree, step.accepted, self.controller.candidates)
        if len(step.tree) < (step.capacity or 0):
            # The drafter had nothing more to offer: every larger capacity gives the same.
            a1 = len(step.accepted)
            observed.update({c: a1 for c in self.controller.candidates if c >= len(step.tree)})
        self.controller.update_tokens(observed, context)

    def _on_timed(self, step: TraceStep) -> None:
        if step.capacity is not None and step.seconds is not None:
            self.controller.update_time(step.capacity, step.seconds)


def auto_controller(model: Any, max_capacity: int = 64, candidates: Sequence[int] = DEFAULT_CANDIDATES,
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
