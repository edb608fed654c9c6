"""The benchmark harness behind ``racer-ref bench``: every method on every prompt, side by side.

For each prompt (after a warm-up on the first one) we run every method, in an order that
rotates from prompt to prompt (so no method always runs first, right after another one
heated the caches), check each greedy output against ``ar`` token for token, and append one
line per (prompt, turn, method) to ``results.jsonl``. At the end :func:`summarize` writes
``summary.md`` and three PNG plots.

Methods:

=============  =============================================================================
``ar``         our loop with root-only trees (plain greedy decoding, the speedup baseline)
``hf-greedy``  ``model.generate(do_sample=False)``
``hf-pld``     ``model.generate(prompt_lookup_num_tokens=10, max_matching_ngram_size=2)``
``pld``        our loop, prompt lookup drafter (one chain of up to 10 tokens)
``logits``     copy-logit tree only (Token Recycling style)
``logits-last`` last-logit tree (LogitSpec-style ablation)
``retrieval``  retrieval tree only (Aho-Corasick automaton)
``racer``      retrieval tree + copy-logit tree (RACER)
=============  =============================================================================

Definitions (docs/explanation/spec.md, "Terms"): a **step** is one target forward pass after the
prefill (for ``hf-*`` the forward calls counted by a hook); **MAT** is the mean of ``a + 1``
over all steps of all prompts; **speedup** of a method over a baseline is token-weighted:
``(sum wall_s / sum new_tokens)`` of the baseline divided by the same for the method, over
the (prompt, turn) pairs both ran. ``wall_s`` is the wall time of one call from token ids to
output ids (prefill included, model loading and tokenization excluded).

The evaluation protocol, every part of it recorded in ``meta.json`` and the summary:

* **Turns** (``turns="all"``, ``--turns all``, the default): a multi-turn question (MT-Bench,
  Spec-Bench's eight MT-Bench categories) is a conversation, as MT-Bench and Spec-Bench run
  it: turn 2 is asked after turn 1's answer (chat template: user turn 1, assistant answer 1,
  user turn 2), so its prompt holds text the model wrote, which retrieval can find again.
  Every method must see the same turn-2 prompt, so the answer put into the conversation is
  the **context method**'s (``ar`` when it runs, else the first method): since every method
  is lossless, a greedy method's own answer is the same text, and where it is not (a near
  tie, e.g. ``hf-greedy``) the row says so (``context_is_own_answer``). ``turns="first"``
  decodes the first turn only.
* **Drafter state** (``drafter_state``): per request by default (a fresh drafter for every
  generation, each turn its own request); ``"shared"`` keeps one drafter per method across
  every prompt and turn, warm-up included, as the paper's evaluation did (docs/explanation/
  spec.md, "State lifetime").
* **Warm-up** (``warmup``, ``warmup_tokens``): before timing, every method runs the first
  question (all the turns that the run decodes) ``warmup`` times with ``warmup_tokens`` new
  tokens each, unrecorded. The default is one short run (16 tokens) that only loads kernels
  and caches; the paper's protocol is three full runs of question 0 with shared state
  (``warmup=3, warmup_tokens=None``), which the shared drafter then remembers.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from racer_ref.harness.baselines import HF_METHODS, hf_generate, sync
from racer_ref.harness.datasets import Prompt, answer_text, encode_conversation
from racer_ref.harness.plots import write_plots
from racer_ref.harness.summary import RUN_METHODS, read_results, summary_tables
from racer_ref.reference.limits import DEFAULT_BREADTH, DEFAULT_CAPACITY, MAX_CAPACITY, check_capacity

#: How long drafter state lives in a benchmark (docs/explanation/spec.md, "State lifetime").
DRAFTER_STATES = ("per-request", "shared")

#: Which turns of a multi-turn question a benchmark decodes (``--turns``).
TURNS = ("all", "first")

#: New tokens of each warm-up run unless told (``--warmup-tokens``).
DEFAULT_WARMUP_TOKENS = 16

#: Methods whose drafter builds trees, so that ``capacity`` (and ``auto``) applies.
TREE_METHODS = ("racer", "retrieval", "logits", "logits-last")


def split_method(name: str) -> tuple:
    """``"racer@16"`` -> ``("racer", 16)``, ``"racer@auto"`` -> ``("racer", "auto")``,
    ``"racer"`` -> ``("racer", None)`` (None: the run's ``--capacity``).

    Raises:
        ValueError: an unknown method, a bad capacity, or a capacity on a method without a
            draft tree of variable size (``ar``, ``pld``, ``hf-*``).
    """
    base, _, cap = name.partition("@")
    if base not in RUN_METHODS:
        raise ValueError(f"methods: expected names from {', '.join(RUN_METHODS)} (or 'all'), "
                         f"optionally with @CAPACITY for {', '.join(TREE_METHODS)}; got {name!r}")
    if not cap:
        return base, None
    if base not in TREE_METHODS:
        raise ValueError(f"methods: {base!r} takes no @capacity (only {', '.join(TREE_METHODS)} do)")
    return base, parse_capacity(cap)


def parse_methods(text: Union[str, Sequence[str]]) -> List[str]:
    """``"ar,racer,racer@16"`` or ``"all"`` (or ``"all,racer@16"``) -> a list of method
    names, duplicates removed, order kept. ``NAME@CAPACITY`` (an int or ``auto``) runs a tree method at that capacity
    instead of the run's ``capacity``, so several capacities can be compared in one run.

    Raises:
        ValueError: an unknown name, a bad ``@capacity``, or an empty list.
    """
    names = [m.strip() for m in (text.split(",") if isinstance(text, str) else text) if m.strip()]
    # "all" stands for every plain method, wherever it appears (e.g. "all,racer@16").
    names = [m for name in names for m in (RUN_METHODS if name == "all" else (name,))]
    if not names:
        raise ValueError(f"methods: expected a comma-separated list from {', '.join(RUN_METHODS)} "
                         f"(or 'all'), got {text!r}")
    for name in names:
        split_method(name)
    return list(dict.fromkeys(names))


def parse_capacity(text: Union[str, int]) -> Union[int, str]:
    """``"64"`` -> 64, ``"auto"`` -> ``"auto"``.

    Raises:
        ValueError: not ``auto`` and not an integer, or an integer out of the drafter's range
            (:func:`racer_ref.reference.limits.check_capacity`, its message).
    """
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"capacity: must be an int in [1, {MAX_CAPACITY}] or 'auto', got {text!r}") from None
    return check_capacity(value)


# ----------------------------------------------------------------------------- one call


@dataclass
class RunOutput:
    """One method on one prompt: the result object plus what the harness measured."""

    result: Any  # GenerationResult or BaselineResult
    wall_s: float
    capacity: Union[int, str, None]
    capacity_used: Optional[Dict[int, int]] = None
    compiled_passes: int = 0  # passes that ran compiled (racer_ref.speedups.compiled)


class MethodRunner:
    """Runs any method of :data:`RUN_METHODS` on token ids with fixed settings.

    Args:
        model, tokenizer: the target model and its tokenizer.
        max_new_tokens: new tokens per prompt (>= 1).
        capacity: tree capacity for :data:`TREE_METHODS`, or ``"auto"``
            (:mod:`racer_ref.speedups.capacity`; one controller per method, shared across prompts so
            that acceptance seen earlier informs later choices).
        temperature: 0 = greedy.
        eos_token_id: stop token(s) (default: the model's generation config).
        backend: drafter backend, ``"rust"`` or ``"python"``.
        max_auto_capacity: largest capacity ``auto`` may pick.
        drafter_state: ``"per-request"`` (a fresh drafter for every prompt) or ``"shared"``
            (one drafter per method, kept across every prompt this runner decodes).
        tree: ``"paper"`` (default) or ``"expected"``, the draft tree of the tree methods
            (docs/explanation/expected-tree.md).

    ``calibration`` collects, per method name, the acceptance estimates' calibration record
    (``Drafter.acceptance_stats()``) summed over the runs.

    Raises:
        ValueError: an unknown ``drafter_state``.
    """

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int = 128,
                 capacity: Union[int, str] = DEFAULT_CAPACITY, temperature: float = 0.0,
                 eos_token_id: Any = None, backend: str = "rust", max_auto_capacity: int = DEFAULT_CAPACITY,
                 breadth: int = DEFAULT_BREADTH, drafter_state: str = "per-request", tree: str = "paper") -> None:
        if drafter_state not in DRAFTER_STATES:
            raise ValueError(f"drafter_state: expected one of {', '.join(DRAFTER_STATES)}, "
                             f"got {drafter_state!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.capacity = parse_capacity(str(capacity))
        self.temperature = temperature
        self.eos_token_id = eos_token_id
        self.backend = backend
        self.max_auto_capacity = max_auto_capacity
        self.breadth = breadth
        self.controllers: Dict[str, Any] = {}
        self.drafter_state = drafter_state
        self.drafters: Dict[str, Any] = {}  # shared mode: method name -> its one drafter
        self.tree = tree
        self.calibration: Dict[str, Dict[str, Any]] = {}

    def controller(self, method: str) -> Any:
        """The ``auto`` capacity controller of ``method`` (profiles the model on first use;
        the profile is shared, the acceptance estimates are per method)."""
        if method not in self.controllers:
            from racer_ref.speedups.capacity import auto_controller

            self.controllers[method] = auto_controller(self.model, max_capacity=self.max_auto_capacity)
        return self.controllers[method]

    def _drafter(self, method: str, capacity: Union[int, str, None],
                 own_capacity: Union[int, str, None]) -> Any:
        """The drafter for one run of ``method``: a fresh one, or in shared mode the method's
        one drafter (created on first use). For ``auto`` capacity the drafter (built at the
        largest candidate capacity) is wrapped, for this run only, in an ``AdaptiveDrafter``."""
        from racer_ref.drafter import Drafter

        ctrl = None
        if capacity == "auto":
            ctrl = self.controller(f"{method}@auto" if own_capacity else method)
        key = f"{method}@{capacity}"
        inner = self.drafters.get(key) if self.drafter_state == "shared" else None
        if inner is None:
            vocab = int(self.model.config.get_text_config().vocab_size
                        if hasattr(self.model.config, "get_text_config") else self.model.config.vocab_size)
            size = max(ctrl.candidates) if ctrl is not None else (int(capacity) if capacity is not None else 64)
            inner = Drafter(method=method, vocab_size=vocab, capacity=size, breadth=self.breadth,
                            backend=self.backend, tree=self.tree)
            inner.attach_estimator()  # for the calibration record (the acceptance estimates)
            if self.drafter_state == "shared":
                self.drafters[key] = inner
        if ctrl is not None:
            from racer_ref.speedups.capacity import AdaptiveDrafter

            return AdaptiveDrafter(inner, ctrl)
        return inner

    def _collect_calibration(self, name: str, drafter: Any) -> None:
        """Add the run's calibration record to ``calibration[name]`` (shared mode: the
        drafter's record so far, which already holds the earlier runs)."""
        while drafter is not None and not hasattr(drafter, "acceptance_stats") and hasattr(drafter, "inner"):
            drafter = drafter.inner
        if drafter is None or not hasattr(drafter, "acceptance_stats"):
            return
        keys = ("calibration_seen", "calibration_accepted", "calibration_predicted")
        stats = drafter.acceptance_stats()
        old = self.calibration.get(name)
        if old is None or self.drafter_state == "shared":
            self.calibration[name] = {k: list(stats[k]) for k in keys}
        else:
            for k in keys:
                old[k] = [a + b for a, b in zip(old[k], stats[k])]

    def run(self, method: str, prompt_ids: Sequence[int], max_new_tokens: Optional[int] = None,
            seed: Optional[int] = None, drafter_wrapper: Optional[Callable[[Any], Any]] = None,
            callback: Optional[Callable[[List[int]], None]] = None) -> RunOutput:
        """Generate for one prompt and time it.

        Args:
            method: one of :data:`RUN_METHODS`, optionally ``NAME@CAPACITY`` (see
                :func:`parse_methods`).
            prompt_ids: token ids (chat template already applied).
            max_new_tokens: override the runner's setting.
            seed: sampling seed (ignored when greedy).
            drafter_wrapper: wraps the drafter (e.g. ``trace.StepRecorder``) for our methods.
            callback: receives committed token blocks (our methods only).

        Raises:
            ValueError: unknown method.
        """
        method, own_capacity = split_method(method)
        n = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        if method in HF_METHODS:
            if self.temperature != 0:
                raise ValueError(f"method {method}: the hf-* baselines are greedy only (temperature 0)")
            from racer_ref.speedups.cpu_kernels import stock_path

            # Stock transformers stands for itself: PyTorch's own kernels, the model's own forward.
            with stock_path(self.model):
                sync(self.model)
                tic = time.perf_counter()
                result = hf_generate(self.model, self.tokenizer, prompt_ids, n, method, self.eos_token_id)
                sync(self.model)
            return RunOutput(result, time.perf_counter() - tic, None)

        from racer_ref.decoding import generate

        capacity: Union[int, str, None] = None
        if method in TREE_METHODS:
            capacity = self.capacity if own_capacity is None else own_capacity
        drafter = None
        if method != "ar" and (capacity == "auto" or self.drafter_state == "shared"
                               or drafter_wrapper is not None or method in TREE_METHODS):
            drafter = self._drafter(method, capacity, own_capacity)
        if drafter_wrapper is not None and drafter is not None:
            drafter = drafter_wrapper(drafter)
        gen_seed = seed if self.temperature > 0 else None
        sync(self.model)
        tic = time.perf_counter()
        # A drafter made here carries the method and its settings; otherwise generate() makes one.
        # (``ar`` drafts nothing: generate() warns about drafter settings passed with it.)
        settings = dict(drafter=drafter) if drafter is not None else dict(method=method) if method == "ar" else dict(
            method=method, capacity=int(capacity) if isinstance(capacity, int) else DEFAULT_CAPACITY,
            breadth=self.breadth, backend=self.backend)
        result = generate(
            self.model, self.tokenizer, list(prompt_ids), max_new_tokens=n, temperature=self.temperature,
            eos_token_id=self.eos_token_id, seed=gen_seed, callback=callback, **settings,
        )
        sync(self.model)
        wall = time.perf_counter() - tic
        if hasattr(drafter, "finalize"):
            drafter.finalize(result)
        self._collect_calibration(f"{method}@{own_capacity}" if own_capacity else method, drafter)
        used = None
        if capacity == "auto" and drafter is not None:
            steps = getattr(drafter, "steps", None) or getattr(getattr(drafter, "inner", None), "steps", [])
            used = {}
            for step in steps:
                if step.capacity is not None:
                    used[step.capacity] = used.get(step.capacity, 0) + 1
            used = dict(sorted(used.items()))
        return RunOutput(result, wall, capacity, used)


# ----------------------------------------------------------------------------- the loop


def method_order(methods: Sequence[str], index: int) -> List[str]:
    """Methods for prompt ``index``: the list rotated by ``index`` places."""
    k = index % len(methods)
    return list(methods[k:]) + list(methods[:k])


def _json_number(x: float) -> Optional[float]:
    """``x``, or ``None`` (JSON ``null``) for NaN, which JSON has no word for."""
    return None if math.isnan(x) else x


def first_mismatch(a: Sequence[int], b: Sequence[int]) -> Optional[int]:
    """Index of the first position where ``a`` and ``b`` differ (a length difference counts),
    or None when equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


#: A difference of two greedy outputs is called a near-tie when, at the first differing new
#: token, the two competing logits of the stock model lie within this fraction of the larger
#: one's magnitude (at least 1): about 1000 float32 epsilons (summation order through a few
#: dozen layers moves fp32 logits by ~1e-5 relative), about 10 of fp16's and 5 of bf16's.
NEAR_TIE_RELATIVE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2}


def explain_difference(model: Any, prompt_ids: Sequence[int], reference: Sequence[int],
                       other: Sequence[int], tokenizer: Any = None) -> Optional[Dict[str, Any]]:
    """Why two greedy outputs for one prompt differ: the first differing new token, the two
    competing tokens, and the gap between their logits under the stock model there.

    Greedy decoding is exact, so two correct greedy decoders of one model can only part where
    two logits tie or nearly tie: they sum in another order (other kernels, a tree pass
    instead of a one-token pass), and a difference of float rounding picks the other token.

    Args:
        model: the target model (run on PyTorch's stock path, one pass over the prompt and the
            shared prefix of the outputs).
        prompt_ids: the prompt's token ids.
        reference, other: the two outputs (new tokens only), e.g. ``hf-greedy``'s and ours.
        tokenizer: to add the two tokens' text (optional).

    Returns:
        ``None`` when the outputs are equal; else ``{"position", "reference_token",
        "other_token", "reference_logit", "other_logit", "logit_gap", "relative_gap",
        "near_tie", "dtype"}`` (and ``"texts"`` with a tokenizer). ``position`` counts new
        tokens from 0; where one output is a prefix of the other (one stopped earlier), the
        tokens and logits are ``None`` and ``near_tie`` is ``False``.
    """
    import torch

    from racer_ref.speedups.cpu_kernels import stock_path

    position = first_mismatch(list(other), list(reference))
    if position is None:
        return None
    dtype = str(model.dtype).replace("torch.", "")
    out: Dict[str, Any] = {"position": int(position), "dtype": dtype, "reference_token": None,
                           "other_token": None, "reference_logit": None, "other_logit": None,
                           "logit_gap": None, "relative_gap": None, "near_tie": False}
    if position >= min(len(reference), len(other)):
        return out
    a, b = int(reference[position]), int(other[position])
    context = list(prompt_ids) + list(reference[:position])
    with stock_path(model), torch.inference_mode():
        ids = torch.tensor([context], device=model.device)
        logits = model(input_ids=ids).logits[0, -1].float()  # (vocab,)
    la, lb = float(logits[a]), float(logits[b])
    gap = abs(la - lb)
    relative = gap / max(1.0, abs(la), abs(lb))
    out.update(reference_token=a, other_token=b, reference_logit=la, other_logit=lb,
               logit_gap=gap, relative_gap=relative,
               near_tie=bool(relative <= NEAR_TIE_RELATIVE.get(dtype, 1e-4)))
    if tokenizer is not None:
        out["texts"] = [tokenizer.decode([a]), tokenizer.decode([b])]
    return out


def describe_difference(d: Dict[str, Any]) -> str:
    """One line for :func:`explain_difference`'s result."""
    if d["reference_token"] is None:
        return f"at new token {d['position']} one output ends (a stop came earlier)"
    texts = d.get("texts") or [str(d["reference_token"]), str(d["other_token"])]
    kind = "a near-tie" if d["near_tie"] else "NOT a near-tie"
    return (f"at new token {d['position']}: {texts[0]!r} (logit {d['reference_logit']:.6g}) vs {texts[1]!r} "
            f"(logit {d['other_logit']:.6g}), gap {d['logit_gap']:.3g} ({d['relative_gap']:.2g} relative, "
            f"{d['dtype']}): {kind}")


def parse_turns(value: str) -> str:
    """``"all"`` or ``"first"`` (see :data:`TURNS`), case and spaces ignored.

    Raises:
        ValueError: anything else.
    """
    text = value.strip().lower() if isinstance(value, str) else value
    if text not in TURNS:
        raise ValueError(f"turns: expected one of {', '.join(TURNS)}, got {value!r}")
    return text


def _warmup_runs(warmup: Union[bool, int]) -> int:
    """``warmup`` as a number of runs: True -> 1, False -> 0, an int >= 0 as is."""
    if isinstance(warmup, bool):
        return int(warmup)
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup: expected a bool or an integer >= 0 (warm-up runs), got {warmup!r}")
    return warmup


def conversation_turns(runner: "MethodRunner", tokenizer: Any, prompt: Prompt, methods: Sequence[str],
                       n_turns: int, context_method: str, order_start: int, repeats: int = 1,
                       seed: int = 0, max_new_tokens: Optional[int] = None,
                       before_run: Optional[Callable[[int, str], None]] = None) -> Iterable[tuple]:
    """Decode turns ``1..n_turns`` of ``prompt`` with every method; yield, per turn,
    ``(turn, prompt_ids, outputs, walls)``.

    Turn ``t``'s prompt is :func:`~racer_ref.harness.datasets.encode_conversation` of the first
    ``t`` user messages and ``context_method``'s answers to the turns before (the same ids for
    every method). Within a turn the methods run in :func:`method_order` from
    ``order_start + t - 1`` (so the rotation goes on across turns and prompts), ``repeats``
    rounds, each round rotated once more.

    Yields:
        ``turn`` (1-based), ``prompt_ids`` (list of int), ``outputs`` (method -> the first
        round's :class:`RunOutput`), ``walls`` (method -> every round's wall seconds).
    """
    answers: List[str] = []
    for t in range(n_turns):
        ids = encode_conversation(tokenizer, prompt.turns[: t + 1], answers, prompt.chat)
        outputs: Dict[str, RunOutput] = {}
        walls: Dict[str, List[float]] = {m: [] for m in methods}
        for rep in range(repeats):
            for method in method_order(methods, order_start + t + rep):
                if before_run is not None:
                    before_run(t + 1, method)
                before = _compiled_calls(runner.model)
                o = runner.run(method, ids, max_new_tokens=max_new_tokens, seed=seed + t)
                o.compiled_passes = _compiled_calls(runner.model) - before  # passes run compiled
                walls[method].append(o.wall_s)
                outputs.setdefault(method, o)
        yield t + 1, ids, outputs, walls
        if t + 1 < n_turns:
            answers.append(answer_text(tokenizer, outputs[context_method].result.token_ids))


def _compiled_calls(model: Any) -> int:
    """How many passes the model's compiled passes (racer_ref.speedups.compiled) have run."""
    compiled = getattr(getattr(model, "__dict__", {}).get("forward"), "compiled", None)
    return int(compiled.calls) if compiled is not None else 0


def run_bench(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Prompt],
    methods: Sequence[str],
    out_dir: Union[str, Path],
    max_new_tokens: int = 128,
    capacity: Union[int, str] = DEFAULT_CAPACITY,
    temperature: float = 0.0,
    seed: int = 0,
    warmup: Union[bool, int] = True,
    progress: bool = True,
    eos_token_id: Any = None,
    backend: str = "rust",
    meta: Optional[Dict[str, Any]] = None,
    plots: bool = True,
    repeats: int = 1,
    drafter_state: str = "per-request",
    turns: str = "all",
    warmup_tokens: Optional[int] = DEFAULT_WARMUP_TOKENS,
    tree: str = "paper",
) -> List[Dict[str, Any]]:
    """Run every method on every prompt (every turn of it) and write ``results.jsonl``,
    ``meta.json``, ``summary.md`` and the plots into ``out_dir``.

    Args:
        model, tokenizer: the target model (batch size 1) and its tokenizer.
        prompts: from :mod:`racer_ref.harness.datasets`.
        methods: names from :data:`RUN_METHODS`; ``ar`` should be among them for ``matches_ar``
            and the speedup over ``ar``.
        out_dir: created if missing; ``results.jsonl`` is overwritten.
        max_new_tokens: new tokens per generation (>= 1), i.e. per turn.
        capacity: an int in ``[1, 4096]`` or ``"auto"``.
        temperature: 0 = greedy (``matches_ar`` is only checked then).
        seed: sampling seed base (generation g, counting turns, uses ``seed + g``).
        warmup: warm-up runs of the first prompt before timing, unrecorded (True = 1, False =
            0; the paper: 3). Each runs every method on every turn this run decodes.
        progress: show a progress bar (tqdm, on stderr).
        eos_token_id: stop token(s) (default: the model's generation config).
        backend: drafter backend.
        meta: extra fields for ``meta.json`` / the summary header.
        plots: write the PNG plots.
        repeats: run every (prompt, turn, method) this many times (rounds over the methods,
            each round in a new rotation) and keep the shortest wall time: other processes can
            only add time, so the minimum is the least disturbed measurement (>= 1).
        drafter_state: ``"per-request"`` (default) or ``"shared"``: one drafter per method
            for the whole run, warm-up included (the paper's evaluation; results then depend
            on prompt order, and with ``repeats > 1`` a repeat sees its prompt again).
        turns: ``"all"`` (default): every turn of a multi-turn question, turn ``t`` after the
            context method's answers to the earlier ones (module docstring); ``"first"``: the
            first turn only.
        warmup_tokens: new tokens per warm-up run (>= 1), or None for ``max_new_tokens``.
        tree: ``"paper"`` (default) or ``"expected"``: the tree methods' draft tree.

    Returns:
        the rows written to ``results.jsonl`` (one per prompt, turn and method; ``turn``
        counts from 1).

    Raises:
        ValueError: no prompts, bad methods, capacity, ``max_new_tokens``, ``repeats``,
            ``drafter_state``, ``turns``, ``warmup`` or ``warmup_tokens`` (before anything is
            written).
    """
    methods = parse_methods(methods)
    capacity = parse_capacity(str(capacity))
    turns = parse_turns(turns)
    n_warmup = _warmup_runs(warmup)
    if not prompts:
        raise ValueError("prompts: no prompts selected")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an integer >= 1, got {max_new_tokens!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: expected an integer >= 1, got {repeats!r}")
    if warmup_tokens is not None and (isinstance(warmup_tokens, bool) or not isinstance(warmup_tokens, int)
                                      or warmup_tokens < 1):
        raise ValueError(f"warmup_tokens: expected an integer >= 1 or None (= max_new_tokens), "
                         f"got {warmup_tokens!r}")
    runner = MethodRunner(model, tokenizer, max_new_tokens=max_new_tokens, capacity=capacity,  # checks drafter_state
                          temperature=temperature, eos_token_id=eos_token_id, backend=backend,
                          drafter_state=drafter_state, tree=tree)
    if temperature and any(m in HF_METHODS for m in methods):
        raise ValueError("methods: hf-greedy and hf-pld are greedy only; drop them or use temperature 0")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Later turns are asked after this method's answers, the same text for every method.
    context_method = "ar" if "ar" in methods else methods[0]
    n_turns = [len(p.turns) if turns == "all" else 1 for p in prompts]
    warm_tokens = max_new_tokens if warmup_tokens is None else min(warmup_tokens, max_new_tokens)
    info = run_metadata(model, max_new_tokens=max_new_tokens, capacity=capacity,
                        temperature=temperature, seed=seed, methods=methods, n_prompts=len(prompts),
                        n_generations=sum(n_turns), backend=backend, repeats=repeats,
                        drafter_state=drafter_state, turns=turns, tree=tree,
                        multi_turn_prompts=sum(1 for n in n_turns if n > 1),
                        context_method=context_method if max(n_turns) > 1 else None,
                        warmup_runs=n_warmup, warmup_tokens=warm_tokens if n_warmup else None)
    info.update(meta or {})
    (out / "meta.json").write_text(json.dumps(info, indent=2) + "\n")

    from tqdm.auto import tqdm

    total = (sum(n_turns) * repeats + n_warmup * n_turns[0]) * len(methods)
    bar = tqdm(total=total, desc="bench", unit="run", disable=not progress, dynamic_ncols=True)

    def tick(label: str) -> Callable[[int, str], None]:
        def before_run(turn: int, method: str) -> None:
            bar.set_postfix_str(f"{label} turn {turn} {method}")
        return before_run

    for w in range(n_warmup):
        for _ in conversation_turns(runner, tokenizer, prompts[0], methods, n_turns[0], context_method,
                                    order_start=w, seed=seed, max_new_tokens=warm_tokens,
                                    before_run=tick("warm-up")):
            bar.update(len(methods))
    rows: List[Dict[str, Any]] = []
    generation = 0  # counts (prompt, turn) pairs: the method rotation and the seeds go on with it
    with open(out / "results.jsonl", "w") as f:
        for i, prompt in enumerate(prompts):
            own = {m: True for m in methods}  # every earlier answer in the context is this method's own
            for turn, ids, outputs, walls in conversation_turns(
                    runner, tokenizer, prompt, methods, n_turns[i], context_method,
                    order_start=generation, repeats=repeats, seed=seed + generation,
                    before_run=tick(prompt.prompt_id)):
                generation += 1
                bar.update(len(methods) * repeats)
                greedy = temperature == 0
                ar_ids = outputs["ar"].result.token_ids if "ar" in outputs and greedy else None
                hf_ids = outputs["hf-greedy"].result.token_ids if "hf-greedy" in outputs else None
                context_ids = outputs[context_method].result.token_ids
                for method in methods:
                    o = outputs[method]
                    o.wall_s = min(walls[method])
                    r = o.result
                    mismatch = first_mismatch(r.token_ids, ar_ids) if ar_ids is not None else None
                    new = len(r.token_ids)
                    row = {
                        "method": method,
                        "prompt_id": prompt.prompt_id,
                        "category": prompt.category,
                        "turn": turn,
                        "prompt_tokens": len(ids),
                        "new_tokens": new,
                        "steps": int(r.steps),
                        "wall_s": round(o.wall_s, 6),
                        "wall_s_runs": [round(w, 6) for w in walls[method]] if repeats > 1 else None,
                        "tokens_per_s": round(new / o.wall_s, 4) if o.wall_s > 0 else None,
                        "mean_accepted_tokens": _json_number(r.mean_accepted_tokens),
                        "accepted_lengths": [int(a) for a in r.accepted_lengths],
                        "matches_ar": (mismatch is None) if ar_ids is not None else None,
                        "first_mismatch": mismatch,
                        # Against stock transformers: where and why the output differs (a near-tie?).
                        "differs_from_hf": (explain_difference(model, ids, hf_ids, r.token_ids, tokenizer)
                                            if hf_ids is not None and method != "hf-greedy" else None),
                        # Turn >= 2: was every earlier answer in this prompt the method's own?
                        "context_from": context_method if turn > 1 else None,
                        "context_is_own_answer": own[method] if turn > 1 and greedy else None,
                        "capacity": o.capacity,
                        "compiled_passes": o.compiled_passes,  # > 0: compiled passes were used
                        "capacity_used": {str(k): v for k, v in o.capacity_used.items()} if o.capacity_used else None,
                        "stop_reason": getattr(r, "stop_reason", None),
                        "timings": {k: round(float(v), 6) for k, v in (r.timings or {}).items()},
                        "text": r.text,
                    }
                    rows.append(row)
                    f.write(json.dumps(row) + "\n")
                    own[method] = own[method] and list(r.token_ids) == list(context_ids)
                f.flush()
    bar.close()
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    if runner.drafters:
        # What each shared drafter knows at the end: every prompt and output it committed.
        info["shared_drafters"] = {k: {"committed_tokens": d.num_committed, "automaton_nodes": d.automaton_nodes}
                                   for k, d in runner.drafters.items()}
    if runner.controllers:
        info["capacity_auto"] = {m: c.report() for m, c in runner.controllers.items()}
        info["capacity_auto_text"] = {m: c.describe() for m, c in runner.controllers.items()}
    if runner.calibration:
        info["calibration"] = runner.calibration  # predicted vs observed acceptance, per method
    if info.get("cpu_kernels"):
        from racer_ref.speedups.cpu_kernels import kernels_report

        info["cpu_kernels"] = kernels_report(runner.model)  # again: the compiled passes' call counts
    info["compiled_passes_by_method"] = {m: sum(r["compiled_passes"] for r in rows if r["method"] == m) > 0
                                         for m in methods}  # whether each method ran compiled passes
    (out / "meta.json").write_text(json.dumps(info, indent=2) + "\n")
    summarize(out, plots=plots)
    return rows


def run_metadata(model: Any, **fields: Any) -> Dict[str, Any]:
    """Environment and settings recorded next to the results (``meta.json``)."""
    import torch
    import transformers

    from racer_ref.speedups.cpu_kernels import cpu_name, kernels_report, routed_layer_count

    name = getattr(model.config, "_name_or_path", "") or type(model).__name__
    device = str(model.device)
    if model.device.type == "cuda":
        device += f" ({torch.cuda.get_device_name(model.device)})"
    info = {
        "model": Path(str(name)).name or str(name),
        "model_class": type(model).__name__,
        "device": device,
        "dtype": str(model.dtype).replace("torch.", ""),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "torch_threads": torch.get_num_threads(),
        "routed_linears": routed_layer_count(model),
        "cpu_kernels": kernels_report(model),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    info.update(fields)
    return info


# ----------------------------------------------------------------------------- summary


def _generation(row: Dict[str, Any]) -> str:
    """``"81"`` for a first turn, ``"81 turn 2"`` for a later one."""
    turn = row.get("turn") or 1
    return row["prompt_id"] if turn == 1 else f"{row['prompt_id']} turn {turn}"


def summarize(out_dir: Union[str, Path], plots: bool = True) -> str:
    """(Re)write ``summary.md`` (and the PNG plots) from ``results.jsonl`` and ``meta.json``.

    Returns:
        the Markdown text.

    Raises:
        FileNotFoundError: no ``results.jsonl`` in ``out_dir``.
    """
    out = Path(out_dir)
    rows = read_results(out)
    meta: Dict[str, Any] = {}
    if (out / "meta.json").is_file():
        meta = json.loads((out / "meta.json").read_text())
    methods = meta.get("methods")
    lines = ["# racer-ref benchmark", ""]
    keys = ["model", "device", "dtype", "attn_implementation", "torch_threads", "prepacked_linears", "routed_linears",
            "cpu", "load_average", "load_average_end", "source",
            "max_new_tokens", "capacity", "tree", "temperature", "turns", "context_method", "drafter_state",
            "warmup_runs", "warmup_tokens", "seed", "repeats", "torch", "transformers", "date"]
    for k in keys:
        if k in meta and meta[k] is not None:
            lines.append(f"- {k.replace('_', ' ')}: {meta[k]}")
    kernels = meta.get("cpu_kernels")
    if kernels and kernels.get("choice"):
        lines.append("- cpu kernels (" + str(kernels.get("cpu_capability")) + "): " + "; ".join(
            f"{g} " + ", ".join(f"{c} rows {k}" for c, k in cl.items()) for g, cl in kernels["choice"].items())
            + ("; direct forward" if kernels.get("fast_forward") else "")
            + (f"; compiled passes of {kernels['compiled_passes']['sizes']} tokens"
               if kernels.get("compiled_passes") else ""))
    if meta.get("compiled_passes_by_method") is not None:
        lines.append("- compiled passes used: " + ", ".join(
            f"{m} {'yes' if used else 'no'}" for m, used in meta["compiled_passes_by_method"].items()))
    generations = len({(r["prompt_id"], r.get("turn", 1)) for r in rows})
    lines.append(f"- prompts: {len(set(r['prompt_id'] for r in rows))}; generations (prompt, turn): "
                 f"{generations}; runs: {len(rows)}")
    warm = meta.get("warmup_runs")
    warm_text = ("no warm-up" if warm == 0 else "warm-up first" if warm is None
                 else f"{warm} warm-up run{'s' if warm > 1 else ''} of the first prompt first")
    lines.append("- MAT = mean tokens per step (a + 1) over all steps; speedup = token-weighted "
                 f"ratio of seconds per new token; {warm_text}, method order rotated per generation"
                 + ("; wall time = the shortest of the repeats" if (meta.get("repeats") or 1) > 1 else ""))
    if meta.get("context_method"):
        lines.append(f"- turn 2 and later: asked after `{meta['context_method']}`'s answers to the earlier "
                     "turns (the same prompt for every method)")
    for m, text in (meta.get("capacity_auto_text") or {}).items():
        lines.append(f"- `{m}` {text}")
    text = "\n".join(lines) + "\n\n" + summary_tables(rows, methods)
    mismatches = [r for r in rows if r.get("matches_ar") is False]
    if mismatches:
        text += ("\n### Outputs that differ from `ar`\n\n" + "\n".join(
            f"- `{r['method']}` on {_generation(r)}: first difference at new token {r['first_mismatch']}"
            for r in mismatches) + "\n")
    foreign = [r for r in rows if r.get("context_is_own_answer") is False]
    if foreign:
        text += (f"\n### Turns asked after another method's answer ({len(foreign)} runs)\n\n"
                 "Every method gets the same later-turn prompt, built from the context method's answers; "
                 "these methods had answered an earlier turn differently:\n\n" + "\n".join(
                     f"- `{r['method']}` on {r['prompt_id']} turn {r['turn']} (context from `{r['context_from']}`)"
                     for r in foreign) + "\n")
    differ = [r for r in rows if r.get("differs_from_hf")]
    checked = [r for r in rows if "differs_from_hf" in r and r["method"] != "hf-greedy"]
    if differ:
        text += (f"\n### Outputs that differ from `hf-greedy` ({len(differ)} of {len(checked)} runs)\n\n"
                 "Greedy outputs can part only where two logits (nearly) tie, since our kernels sum in "
                 "another order than stock PyTorch:\n\n" + "\n".join(
                     f"- `{r['method']}` on {_generation(r)}: {describe_difference(r['differs_from_hf'])}"
                     for r in differ) + "\n")
    if plots:
        names = write_plots(rows, out, methods)
        if meta.get("calibration"):
            from racer_ref.harness.plots import plot_calibration

            names.append(plot_calibration(meta["calibration"], out))
        text += "\n### Plots\n\n" + "\n".join(f"![{n}]({n})" for n in names) + "\n"
    (out / "summary.md").write_text(text)
    return text
