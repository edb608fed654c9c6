"""``generate()``: lossless RACER decoding of one prompt on a Hugging Face causal LM.

The loop (docs/explanation/spec.md, "One decoding step"): prefill the prompt and pick the first root;
then, until a stopping rule fires, ask the drafter for a draft tree rooted at the root,
verify it in one forward pass (:mod:`racer_ref.verify`), emit the accepted drafts plus the
next root, update the drafter (copy-logit table from the verified logits, automaton from
the committed tokens) and keep only the accepted path in the KV cache.

With ``temperature=0`` the output equals ``model.generate(do_sample=False)`` token for token;
with ``temperature > 0`` it has the distribution of plain sampling (lossless rule, spec
"Sampling") with temperature and top-p. The logits processors of the model's generation
config (repetition penalty, ...), or those given as ``logits_processor`` (top-k, ...), are
applied to every draft-tree node with its own prefix (:mod:`racer_ref.processing`).
Batch size 1 only.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
import torch

from racer_ref.drafter import claim
from racer_ref.metrics import mean_accepted_tokens
from racer_ref.processing import as_tree_processor, default_processors
from racer_ref.sampling import check_sampling_arguments, sample, target_probs
from racer_ref.tree import METHODS, DraftTree
from racer_ref.verify import (accept_greedy, accept_sampling, argmax_from_topk, forward_prompt, forward_tree,
                              keep_accepted)

#: The drafting methods ``generate()`` accepts, ``"ar"`` (root-only trees) included: the
#: same tuple as ``racer_ref.Drafter``'s (defined once, in :mod:`racer_ref.tree`).
METHODS = METHODS
#: The paper's capacity, and the default on a GPU (``capacity=None``).
DEFAULT_GPU_CAPACITY = 64
#: The default elsewhere: on a CPU a verify pass costs more with every node, and 16 nodes
#: (about 1.6-1.8 one-token passes with racer_ref.speedups.cpu_kernels) pay off where 64 do not.
#: Fixed rather than "auto" so that a seed reproduces a sampled output.
DEFAULT_CPU_CAPACITY = 16

#: Keys of :attr:`GenerationResult.timings` (seconds).
TIMING_KEYS = ("prefill", "drafting", "forward", "acceptance", "bookkeeping", "total")


@dataclass
class GenerationResult:
    """What one :func:`generate` call produced.

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
        """MAT (:func:`racer_ref.metrics.mean_accepted_tokens`): 1.00 for ``"ar"``, NaN without steps."""
        return mean_accepted_tokens(self.accepted_lengths)


def clip_draft_tree(tree: DraftTree, max_depth: int) -> DraftTree:
    """Drop every node deeper than ``max_depth`` (keeps BFS order; the result is a valid tree).

    Used so that a step never emits more than ``max_new_tokens`` or fills the context beyond
    its length: accepting a drafts emits ``a + 1`` tokens, so depth <= room - 1.
    """
    keep = tree.depths <= max_depth  # (n,) bool; ancestors are shallower, so prefix-closed
    if keep.all():
        return tree
    return tree.subtree(np.flatnonzero(keep))


def _prompt_ids(tokenizer: Any, prompt: Any, vocab_size: int) -> List[int]:
    """Validate ``prompt`` and return its token ids (batch size 1)."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("prompt: a string prompt needs a tokenizer (or pass token ids)")
        ids = list(tokenizer(prompt)["input_ids"])
    else:
        if isinstance(prompt, torch.Tensor):
            if prompt.is_floating_point() or prompt.is_complex() or prompt.dtype == torch.bool:
                raise TypeError(f"prompt: expected integer token ids, got dtype {prompt.dtype}")
            array = prompt.detach().cpu().numpy()
        elif isinstance(prompt, np.ndarray):
            array = prompt
        elif isinstance(prompt, Sequence) and not isinstance(prompt, (bytes, bytearray)):
            # dtype=object keeps Python ints as they are: numpy would turn [1, 2**63] into
            # float64 and [2**63] into uint64.
            try:
                array = np.asarray(prompt, dtype=object)
            except ValueError as error:  # ragged nesting
                raise ValueError(f"prompt: not a sequence of token ids ({error})") from None
        else:
            raise TypeError(f"prompt: expected a string, a sequence of token ids or a 1-D tensor, "
                            f"got {type(prompt).__name__}")
        if array.ndim == 2 and array.shape[0] == 1:
            array = array[0]  # a (1, n) batch
        if array.ndim != 1:
            raise ValueError(f"prompt: batch size 1 only; expected a 1-D sequence of ids or a (1, n) "
                             f"batch, got shape {tuple(array.shape)}")
        values = array.tolist()  # Python ints: no wrap-around of uint64 or huge ids
        if array.dtype.kind not in "iu":
            # An object array (from a list) may hold ints of any size: check each element.
            if array.dtype != object:
                kinds = {f"dtype {array.dtype}"} if values else set()
            else:
                kinds = {type(v).__name__ for v in values
                         if isinstance(v, bool) or not isinstance(v, (int, np.integer))}
            if kinds:
                raise TypeError(f"prompt: expected integer token ids, got {', '.join(sorted(kinds))}")
        ids = [int(v) for v in values]
    if not ids:
        raise ValueError("prompt: empty; give at least one token")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"prompt: token ids must lie in [0, {vocab_size}); got {bad[:5]}")
    return ids


def _eos_ids(model: Any, eos_token_id: Any) -> List[int]:
    """``eos_token_id`` as a list (``None``: the model's generation config, as ``model.generate``)."""
    if eos_token_id is None:
        config = getattr(model, "generation_config", None)
        eos_token_id = getattr(config, "eos_token_id", None)
        if eos_token_id is None:
            return []
    if isinstance(eos_token_id, torch.Tensor):
        eos_token_id = eos_token_id.reshape(-1).tolist()
    values = [eos_token_id] if isinstance(eos_token_id, (int, np.integer)) else eos_token_id
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"eos_token_id: expected an int or a list of ints, got {eos_token_id!r}")
    values = list(values)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"eos_token_id: expected an int or a list of ints, got {eos_token_id!r}")
    return [int(v) for v in values]


def _make_cache(model: Any, cache: Any) -> Any:
    """An empty ``DynamicCache`` of full-attention layers, or a clear ``ValueError``.

    Without a cache from the caller we make one whose layers write in place
    (:class:`racer_ref.speedups.kv_cache.GrowingLayer`): same numbers, no whole-cache copy per step.
    """
    from transformers import DynamicCache
    from transformers import cache_utils
    from transformers.cache_utils import DynamicLayer

    from racer_ref.speedups.kv_cache import GrowingLayer, growing_cache

    # The model's own layout tells sliding-window and other layers apart. A cache given
    # as DynamicCache() has no layers until the first forward pass (they are then all
    # DynamicLayer), so the layout is checked whatever cache the caller passes.
    layout = growing_cache(model)
    # Attention layers (full, sliding-window, quantized...) share CacheLayerMixin; a Mamba-style
    # model's layers are all linear-attention (recurrent state) layers.
    attention = getattr(cache_utils, "CacheLayerMixin", DynamicLayer)
    if not any(isinstance(layer, attention) for layer in layout.layers):
        raise ValueError(f"model: {type(model).__name__} has no attention layers ({model.config.model_type}); "
                         "racer-ref verifies a draft tree through tree attention, so it needs a transformer "
                         "with full-attention layers")
    if cache is None:
        cache = layout
    if type(cache) is not DynamicCache:
        raise ValueError(f"cache: only an empty transformers DynamicCache is supported, got {type(cache).__name__}")
    if not hasattr(cache, "layers"):
        raise ValueError("cache: needs a DynamicCache with per-layer tensors (transformers >= 4.56)")
    for layer in list(layout.layers) + list(cache.layers):
        if type(layer) not in (DynamicLayer, GrowingLayer):
            raise ValueError(
                f"cache: layer type {type(layer).__name__} is not supported (sliding-window, linear-attention "
                "and quantized layers cannot keep an accepted tree path); only full-attention DynamicLayer"
            )
    if cache.get_seq_length() != 0:
        raise ValueError("cache: must be empty; generate() prefills it with the prompt")
    return cache


def _check_int(name: str, value: Any, low: int) -> None:
    """``TypeError`` unless ``value`` is an int (bool refused), ``ValueError`` below ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")


def _check_explicit_eos(eos: List[int], vocab_size: int) -> None:
    """An ``eos_token_id`` given by the caller must be a token the model can produce."""
    bad = [t for t in eos if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"eos_token_id: token ids must lie in [0, {vocab_size}); got {bad[:5]}")


class _StopStrings:
    """Finds the first token at which the generated text contains one of the stop strings.

    Each check decodes only a tail of the output, long enough to hold the longest stop
    string ending inside the newest token's text: it starts at ``2 * longest + 4`` tokens
    and doubles while the tail's text (without the broken character a cut through a
    multi-byte character leaves at its start) is too short. One character can take several
    byte-level tokens (an emoji four), so a window in tokens alone can miss a stop string;
    this one is measured in characters, and its cost does not grow with the output.
    """

    def __init__(self, tokenizer: Any, stop: Union[str, Iterable[str], None]):
        if isinstance(stop, (bytes, bytearray)) or (
                stop is not None and not isinstance(stop, str) and not hasattr(stop, "__iter__")):
            raise TypeError(f"stop: expected a string or a list of strings, got {type(stop).__name__}")
        self.stop = [stop] if isinstance(stop, str) else list(stop or [])
        kinds = sorted({type(s).__name__ for s in self.stop if not isinstance(s, str)})
        if kinds:
            raise TypeError(f"stop: expected a string or a list of strings, got a list with {', '.join(kinds)}")
        if any(not s for s in self.stop):
            raise ValueError(f"stop: expected non-empty strings, got {stop!r}")
        if self.stop and tokenizer is None:
            raise ValueError("stop: stop strings need a tokenizer")
        self.tokenizer = tokenizer
        self.longest = max((len(s) for s in self.stop), default=0)

    def hit(self, output: List[int]) -> bool:
        """True if a stop string ends in the text of the last token of ``output``."""
        if not self.stop:
            return False
        # The tail must hold the newest token's text and the longest - 1 characters before it.
        need = self.longest + len(self.tokenizer.decode(output[-1:]).strip("\ufffd"))
        window = 2 * self.longest + 4
        while True:
            text = self.tokenizer.decode(output[-window:])
            if window >= len(output) or len(text.lstrip("\ufffd")) >= need:
                return any(s in text for s in self.stop)
            window *= 2


# ----------------------------------------------------------------------------- the boundary
def _criteria_hit(criteria: Any, ids: List[int], scores: torch.Tensor, device: Any) -> bool:
    """Ask transformers-style stopping criteria about the sequence ``ids`` (prompt + new)."""
    hit = criteria(torch.tensor([ids], device=device), scores)  # (1, P + N), (1, vocab)
    return bool(hit.any()) if isinstance(hit, torch.Tensor) else bool(hit)


# generate() checks every argument once, here, before any work; the loop trusts the result.

#: Settings of ``model.generation_config`` that a sampling ``model.generate`` applies and
#: generate() does not take from the config (it has its own ``temperature`` and ``top_p``;
#: pass the others as ``logits_processor``), with their neutral values: a setting away from
#: them makes the two differ when sampling, so we warn. The greedy processors (repetition
#: penalty, ``no_repeat_ngram_size``, ...) are applied (:func:`default_processors`).
UNAPPLIED_SAMPLING_SETTINGS = {
    "top_k": (None, 0), "typical_p": (None, 1.0), "min_p": (None, 0.0), "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
}


def _check_generation_config(model: Any, temperature: float, processors_given: bool) -> None:
    """Warn about every setting of the model's generation config that ``model.generate``
    would apply and ``generate()`` does not (they change the output or its distribution)."""
    config = getattr(model, "generation_config", None)
    if config is None:
        return
    settings = UNAPPLIED_SAMPLING_SETTINGS if temperature > 0 and not processors_given else {}
    ignored = [f"{name}={getattr(config, name)!r}" for name, neutral in settings.items()
               if getattr(config, name, None) not in neutral]
    if ignored:
        warnings.warn(f"model.generation_config: {', '.join(ignored)} not applied by racer_ref.generate "
                      "when sampling (pass them as logits_processor), so its distribution differs from "
                      "model.generate's", stacklevel=4)
    if getattr(config, "cache_implementation", None) not in (None, "dynamic"):
        warnings.warn(f"model.generation_config: cache_implementation={config.cache_implementation!r} is not "
                      "used: racer_ref.generate keeps its KV cache in a DynamicCache (the numbers are the same)",
                      stacklevel=4)



class RootOnlyDrafter:
    """The drafter of method ``"ar"``: every tree is the root alone (plain autoregressive
    decoding through the same loop). It learns nothing, so it asks for no top-k (``breadth 0``)."""

    method = "ar"
    breadth = 0

    def draft(self, root: int, last_topk: Any = None) -> DraftTree:
        return DraftTree.root_only(root)

    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        """Nothing to learn."""

    def commit(self, token_ids: Any) -> None:
        """Nothing to learn."""


#: generate()'s drafter parameters and their values when neither the caller nor a given
#: drafter sets them (the paper's: capacity 64, breadth k = 8, n-grams of 10, 10,000 nodes).
DRAFTER_DEFAULTS = {"capacity": 64, "breadth": 8, "ngram": 10, "max_nodes": 10_000, "backend": "rust",
                    "tree": "paper"}


def _drafter(drafter: Any, vocab_size: int, method: Optional[str], **given: Any) -> Any:
    """The drafter of this call: the given one, or a new one for ``method``.

    ``given`` holds the drafter parameters the caller passed (``None``: not passed). Each is
    checked for kind and range whether or not a drafter is given; with a drafter, a value
    that contradicts it (or one it has no such setting for) is refused, never ignored.
    """
    from racer_ref.drafter import BACKENDS, Drafter

    for name, low in (("capacity", 1), ("breadth", 1), ("ngram", 2), ("max_nodes", 1)):
        if given[name] is not None:
            _check_int(name, given[name], low)
    if given["breadth"] is not None and given["breadth"] > vocab_size:
        raise ValueError(f"breadth: expected an int in [1, vocab_size = {vocab_size}], got {given['breadth']!r}")
    if given["backend"] is not None and given["backend"] not in BACKENDS:
        raise ValueError(f"backend: must be one of {BACKENDS}, got {given['backend']!r}")
    if given["tree"] is not None and given["tree"] not in ("expected", "paper"):
        raise ValueError(f'tree: must be "expected" or "paper", got {given["tree"]!r}')
    if drafter is None:
        method = "racer" if method is None else method
        if method == "ar":
            return RootOnlyDrafter()
        settings = {name: DRAFTER_DEFAULTS[name] if value is None else value for name, value in given.items()}
        return Drafter(method, vocab_size, settings.pop("capacity"), settings.pop("breadth"), **settings)
    missing = [name for name in ("draft", "observe", "commit") if not callable(getattr(drafter, name, None))]
    if missing:
        raise TypeError(f"drafter: expected a racer_ref.Drafter (draft, observe, commit), "
                        f"got {type(drafter).__name__} without {', '.join(missing)}")
    if getattr(drafter, "vocab_size", vocab_size) != vocab_size:
        raise ValueError(f"drafter: built for vocab_size {drafter.vocab_size}, the model has {vocab_size}")
    for name, value in {"method": method, **given}.items():
        own = getattr(drafter, name, None)
        if value is None or value == own or (name == "breadth" and own is None):
            continue  # (breadth is the k of the top-k rows passed to a drafter without one)
        if own is not None:
            raise ValueError(f"{name}: {value!r} contradicts the given drafter's {name} {own!r}; "
                             "leave it out, or build the drafter with it")
        warnings.warn(f"{name}: {value!r} is not used: the given {type(drafter).__name__} has no {name} "
                      "(the drafter decides)", stacklevel=4)
    return drafter


def _topk_width(drafter: Any, breadth: Optional[int], vocab_size: int) -> int:
    """k, the top-k ids kept per verified logits row: the drafter's breadth (its copy-logit
    rows; 0 for "ar"), or ``breadth`` for a drafter of the caller's that has none."""
    own = getattr(drafter, "breadth", None)
    k = own if own is not None else (DRAFTER_DEFAULTS["breadth"] if breadth is None else breadth)
    return min(int(k), vocab_size)


@dataclass
class _Call:
    """One ``generate()`` call, its arguments checked: what the loop needs and trusts."""

    prompt_ids: np.ndarray  # (P,) int64
    max_new_tokens: int
    room: float  # new tokens that fit in the context length (inf when the model has none)
    cache: Any
    drafter: Any
    k: int  # top-k ids kept per verified logits row (the drafter's breadth; 0 for "ar")
    temperature: float
    top_p: float
    generator: Optional[torch.Generator]
    observe_rejected: bool
    processors: Any  # a TreeLogitsProcessor, or None: the logits are the target's scores
    output: "_Output"

    def choose(self, logits_row: torch.Tensor) -> int:
        """The root: argmax (greedy) or a sample of the target distribution (spec step 1)."""
        if self.temperature == 0:
            return int(logits_row.argmax())
        return sample(target_probs(logits_row[None], self.temperature, self.top_p)[0], self.generator)


def _check_call(model: Any, tokenizer: Any, prompt: Any, max_new_tokens: Any, method: Any, capacity: Any,
                breadth: Any, ngram: Any, max_nodes: Any, backend: Any, temperature: Any, top_p: Any,
                eos_token_id: Any, stop: Any, streamer: Any, callback: Any, drafter: Any,
                observe_rejected: Any, seed: Any, generator: Any, cache: Any, logits_processor: Any = None,
                stopping_criteria: Any = None, tree: Any = None) -> _Call:
    """Check every argument of :func:`generate` (its "Raises" section) and bundle them."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(model.config, "is_encoder_decoder", False):
        raise ValueError("model: encoder-decoder models are not supported; use a decoder-only causal LM")
    if method is not None and method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    _check_int("max_new_tokens", max_new_tokens, 0)
    check_sampling_arguments(temperature, top_p)
    _check_generation_config(model, temperature, logits_processor is not None)
    vocab_size = int(config.vocab_size)
    prompt_ids = _prompt_ids(tokenizer, prompt, vocab_size)
    max_length = getattr(config, "max_position_embeddings", None)
    if max_length is not None and len(prompt_ids) >= max_length:
        raise ValueError(f"prompt: {len(prompt_ids)} tokens leave no room in the context length {max_length}")
    eos = set(_eos_ids(model, eos_token_id))
    if eos_token_id is not None:
        _check_explicit_eos(sorted(eos), vocab_size)
    stops = _StopStrings(tokenizer, stop)
    cache = _make_cache(model, cache)
    if generator is not None and (not isinstance(generator, torch.Generator) or generator.device.type != "cpu"):
        raise ValueError("generator: expected a CPU torch.Generator (the draws are made on the CPU)")
    if seed is not None:
        _check_int("seed", seed, -(2**63))
        if seed >= 2**64:  # torch.Generator.manual_seed takes [-2**63, 2**64)
            raise ValueError(f"seed: expected an int in [-2**63, 2**64), got {seed!r}")
    if generator is None and seed is not None:
        generator = torch.Generator().manual_seed(int(seed))
    if not isinstance(observe_rejected, bool):
        raise TypeError(f"observe_rejected: expected a bool, got {type(observe_rejected).__name__}")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback: expected a callable, got {type(callback).__name__}")
    if streamer is not None and not (callable(getattr(streamer, "put", None))
                                     and callable(getattr(streamer, "end", None))):
        raise TypeError(f"streamer: expected an object with put() and end(), got {type(streamer).__name__}")
    if stopping_criteria is not None and not callable(stopping_criteria):
        raise TypeError(f"stopping_criteria: expected a callable, got {type(stopping_criteria).__name__}")
    if logits_processor is None:  # what model.generate(do_sample=False) applies, from the model's config
        logits_processor = default_processors(model, prompt_ids, max_new_tokens, eos_token_id)
    processors = as_tree_processor(logits_processor)  # None: raw logits are the target's scores
    auto = capacity == "auto"
    if auto and drafter is not None:
        raise ValueError("capacity: 'auto' builds its own drafter; leave capacity out with drafter=")
    if capacity is None and drafter is None:  # the device's default (a given drafter brings its own)
        capacity = DEFAULT_GPU_CAPACITY if model.device.type == "cuda" else DEFAULT_CPU_CAPACITY
    drafter = _drafter(drafter, vocab_size, method, capacity=DEFAULT_GPU_CAPACITY if auto else capacity, breadth=breadth, ngram=ngram,
                       max_nodes=max_nodes, backend=backend, tree=tree)
    if auto and not isinstance(drafter, RootOnlyDrafter):
        # A speed-up, imported only when asked for: the loop itself knows fixed capacities.
        from racer_ref.speedups.capacity import AdaptiveDrafter, auto_controller

        drafter = AdaptiveDrafter(drafter, auto_controller(model, max_capacity=DEFAULT_GPU_CAPACITY))
    return _Call(
        prompt_ids=np.asarray(prompt_ids, dtype=np.int64), max_new_tokens=max_new_tokens,
        room=(max_length if max_length is not None else math.inf) - len(prompt_ids), cache=cache,
        drafter=drafter, k=_topk_width(drafter, breadth, vocab_size),
        temperature=temperature, top_p=top_p, generator=generator, observe_rejected=observe_rejected,
        processors=processors,
        output=_Output(eos, stops, max_new_tokens, streamer, callback, stopping_criteria, prompt_ids, model.device),
    )


class _Output:
    """The new tokens, the stopping rules (EOS, stop strings, ``max_new_tokens``) and the
    streaming of each committed block."""

    def __init__(self, eos: set, stops: _StopStrings, max_new_tokens: int, streamer: Any,
                 callback: Optional[Callable[[List[int]], None]], criteria: Any = None,
                 prompt_ids: Sequence[int] = (), device: Any = None) -> None:
        self.token_ids: List[int] = []
        self.criteria, self.prompt_ids, self.device = criteria, list(prompt_ids), device
        self.eos, self.max_new_tokens = eos, max_new_tokens
        self.stops = stops if stops.stop else None  # no stop strings: nothing to decode
        self.streamer, self.callback = streamer, callback
        self.stop_reason: Optional[str] = None  # set by the first stopping rule that fires

    def emit(self, block: List[int], scores: Optional[torch.Tensor] = None) -> int:
        """Append a block of new tokens, cut at the first stopping rule; return how many
        were kept (``stop_reason`` says whether a rule fired). ``scores``:
        ``(len(block), vocab)``, the scores that chose each token (read by
        ``stopping_criteria`` only)."""
        output = self.token_ids
        for n_kept, token in enumerate(block, start=1):
            output.append(token)
            criteria_hit = self.criteria is not None and _criteria_hit(
                self.criteria, self.prompt_ids + output, scores[n_kept - 1:n_kept], self.device)
            if token in self.eos:
                self.stop_reason = "eos"
            elif self.stops is not None and self.stops.hit(output):
                self.stop_reason = "stop_string"
            elif criteria_hit:
                self.stop_reason = "stopping_criteria"
            elif len(output) >= self.max_new_tokens:
                self.stop_reason = "max_new_tokens"
            if self.stop_reason is not None:
                block = block[:n_kept]
                break
        if self.streamer is not None:
            self.streamer.put(torch.tensor(block))
        if self.callback is not None:
            self.callback(list(block))
        return len(block)


class _Clock:
    """Adds the wall time since the previous lap to one of :data:`TIMING_KEYS`."""

    def __init__(self, model: Any) -> None:
        self.timings = dict.fromkeys(TIMING_KEYS, 0.0)
        # GPU work is asynchronous: a lap that ends with target work waits for it first.
        self.sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
        self.started = self.last = time.perf_counter()

    def skip(self) -> None:
        """Start the next lap now, adding the time since the last one to no key."""
        self.last = time.perf_counter()

    def lap(self, key: str, sync: bool = False) -> None:
        if sync:
            self.sync()
        now = time.perf_counter()
        self.timings[key] += now - self.last
        self.last = now


def generate(
    model: Any,
    tokenizer: Any = None,
    prompt: Any = None,
    max_new_tokens: int = 128,
    method: Optional[str] = None,
    capacity: Union[int, str, None] = None,
    breadth: Optional[int] = None,
    ngram: Optional[int] = None,
    max_nodes: Optional[int] = None,
    backend: Optional[str] = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    eos_token_id: Any = None,
    stop: Union[str, Sequence[str], None] = None,
    streamer: Any = None,
    callback: Optional[Callable[[List[int]], None]] = None,
    drafter: Any = None,
    observe_rejected: bool = True,
    seed: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    cache: Any = None,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
    tree: Optional[str] = None,
) -> GenerationResult:
    """Decode one prompt with RACER (or another drafter) and the target's verification.

    Args:
        model: a transformers causal LM (decoder-only, full attention), in eval mode, on any
            device and dtype, eager or SDPA attention.
        tokenizer: its tokenizer; needed for a string prompt, ``stop`` and ``text``.
        prompt: a string (tokenized as is, no chat template), or token ids: a sequence, a
            1-D tensor or a ``(1, n)`` tensor. Batch size 1 only.
        max_new_tokens: at most this many new tokens (>= 0).
        method: one of :data:`METHODS`: ``"racer"`` (the default), ``"retrieval"``,
            ``"logits"``, ``"logits-last"``, ``"pld"`` or ``"ar"`` (no drafts: one token per
            forward pass through the same loop).
        capacity: draft-tree nodes per verify pass, root included (>= 1; the paper's 64), or
            ``"auto"``: per step, the capacity with the most tokens per second on this device
            (:mod:`racer_ref.speedups.capacity`, which profiles the model once per process).
            ``None`` (default): 64 on a GPU, 16 elsewhere, where a 64-node verify pass costs
            several one-token passes (a given ``drafter`` brings its own). ``"auto"`` without a
            ``drafter`` only; its choices follow measured times, so a seed does not reproduce a
            sampled output with it.
        breadth: k, the copy-logit table's top-k (in ``[1, vocab_size]``; default 8).
        ngram, max_nodes, backend: passed to ``racer_ref.Drafter`` (defaults 10, 10,000,
            ``"rust"``). For every drafter parameter ``None`` means the default, or with
            ``drafter`` the drafter's own setting: a value that contradicts the given
            drafter raises ``ValueError`` instead of being ignored.
        tree: ``"paper"`` (default: the paper's merge) or ``"expected"`` (the draft tree
            with the most expected accepted tokens, docs/explanation/expected-tree.md),
            passed to ``racer_ref.Drafter`` like the parameters above.
        temperature: 0 for greedy decoding; > 0 samples with the lossless rule.
        top_p: nucleus sampling threshold in (0, 1] (with ``temperature > 0``).
        eos_token_id: int or list of ints; ``None`` takes the model's generation config
            (as ``model.generate`` does); ``[]`` disables EOS.
        stop: stop string(s); generation stops after the token that completes one (that
            token is kept). Only generated text is searched.
        streamer: a transformers streamer (``put(tensor)``, ``end()``); like
            ``model.generate`` it first receives the prompt, then each committed block.
        callback: called with each committed block of new token ids (a list of int).
        drafter: a ``racer_ref.Drafter`` to use and keep across calls (the paper's shared
            mode); ``None`` builds a fresh one for this request (the default, per-request).
        observe_rejected: update the copy-logit table from every verified node (True, as
            the paper) or from accepted nodes only.
        seed, generator: randomness for sampling (a CPU ``torch.Generator`` wins over seed);
            neither means torch's global generator.
        cache: an empty ``transformers.DynamicCache`` to fill (default: a new one).

    Returns:
        a :class:`GenerationResult`.

    Raises:
        ValueError: empty prompt, token ids outside ``[0, vocab_size)`` (prompt or an
            explicit ``eos_token_id``), a batch, a prompt that fills the context length,
            ``max_new_tokens < 0``, drafter parameters out of range (``capacity < 1``,
            ``breadth`` outside ``[1, vocab_size]``, ``ngram < 2``, ``max_nodes < 1``, an unknown
            ``backend``, checked for ``"ar"`` and with a given ``drafter`` too; the upper limits
            by the drafter that is built), a drafter parameter or ``method`` that contradicts the
            given ``drafter``, an unknown method, bad sampling arguments, an
            unsupported cache (static, quantized, sliding-window...) or an encoder-decoder
            model.
        TypeError: an argument of the wrong kind: prompt, ``eos_token_id``, ``stop``, a
            non-integer ``max_new_tokens`` / ``capacity`` / ``breadth`` / ``seed``, a
            non-number ``temperature`` / ``top_p``, a non-bool ``observe_rejected``, a
            ``callback`` that is not callable, a ``streamer`` without ``put``/``end``, a
            ``drafter`` without ``draft``/``observe``/``commit``.
        All of them before any work is done (no forward pass, no drafter update).

    Stopping rules: the first EOS (kept in ``token_ids``) or stop string inside an accepted
    block ends generation; ``max_new_tokens`` is never exceeded; prompt + output never
    exceed ``model.config.max_position_embeddings`` tokens, so no position id at or beyond
    it is ever fed (draft trees are clipped in depth to fit; ``stop_reason="max_length"``).
    """
    clock = _Clock(model)
    call = _check_call(model, tokenizer, prompt, max_new_tokens, method, capacity, breadth, ngram, max_nodes,
                       backend, temperature, top_p, eos_token_id, stop, streamer, callback, drafter,
                       observe_rejected, seed, generator, cache, logits_processor, stopping_criteria, tree)
    clock.skip()  # the checks count in "total" only
    drafter, cache, out, k = call.drafter, call.cache, call.output, call.k
    output = out.token_ids  # new tokens, the root of the next step last
    result = GenerationResult(token_ids=output, text=None, timings=clock.timings,
                              method=getattr(drafter, "method", None) or method or "racer")
    committed = 0  # output tokens already committed to the drafter (the prompt is, at prefill)
    # A Drafter serves one generate() call at a time: a second caller is refused at once.
    with claim(drafter), torch.inference_mode():
        if streamer is not None:
            streamer.put(torch.tensor(call.prompt_ids[None]))
        clock.lap("bookkeeping")
        done = call.max_new_tokens == 0
        if not done:
            # ---- prefill: the prompt fills the cache and predicts the first root ----------
            prompt_t = torch.from_numpy(call.prompt_ids).to(model.device)  # (P,)
            logits = forward_prompt(model, cache, prompt_t)  # (P, vocab)
            processors = call.processors
            root_scores = logits[-1] if processors is None else processors.root_scores(prompt_t, logits[-1])
            root = call.choose(root_scores)
            clock.lap("prefill", sync=True)
            # Copy-logit rows for every prompt position; the automaton learns the prompt.
            topk = logits.topk(k, dim=-1).indices.cpu().numpy()  # (P, k) int64
            last_topk = topk[-1]  # (k,) the row that produced the root ("logits-last")
            drafter.observe(call.prompt_ids, topk)
            drafter.commit(call.prompt_ids)
            clock.lap("drafting")
            out.emit([root], root_scores[None])
            done = out.stop_reason is not None
            clock.lap("bookkeeping")
        while not done:
            # Room left for this step's block (accepted drafts + next root).
            room = min(call.max_new_tokens, call.room) - len(output)
            if room <= 0:
                out.stop_reason = "max_length"
                break
            # ---- draft ----------------------------------------------------------------------
            tree = drafter.draft(root, last_topk=last_topk)
            if int(tree.tokens[0]) != root:
                raise RuntimeError(f"drafter returned a tree rooted at {tree.tokens[0]}, expected {root}")
            tree = clip_draft_tree(tree, room - 1)
            clock.lap("drafting")
            # ---- verify: one forward pass over the whole tree -------------------------------
            past_length = cache.get_seq_length()  # L = prompt + output - 1
            logits = forward_tree(model, cache, tree)  # (n, vocab)
            clock.lap("forward", sync=True)
            # ---- accept ---------------------------------------------------------------------
            # Every node's top-k feeds the copy-logit table; the same top-k gives the argmax.
            topk_values, topk_ids = logits.topk(k, dim=-1)  # (n, k) each
            scores = logits  # (n, vocab) the target's scores: the logits, or each node's processed scores
            if processors is not None:
                committed_t = torch.tensor(call.prompt_ids.tolist() + output[:-1], device=model.device)  # before the root
                scores = processors(committed_t, tree, logits)
            if call.temperature == 0:
                predicted = None if processors is not None else argmax_from_topk(logits, topk_values, topk_ids)
                accepted, next_root = accept_greedy(scores, tree, predicted)
            else:
                probs = target_probs(scores, call.temperature, call.top_p)  # (n, vocab)
                accepted, next_root = accept_sampling(probs, tree, call.generator)
            result.tree_sizes.append(len(tree))
            clock.lap("acceptance")
            # ---- commit: cache, output, drafter ---------------------------------------------
            keep_accepted(cache, past_length, accepted)
            rows = scores[accepted] if out.criteria is not None else None  # row j chose token j
            kept = out.emit(tree.tokens[accepted[1:]].tolist() + [next_root], rows)
            done = out.stop_reason is not None
            # a counts what this step committed (cut by a stopping rule), a_raw what was accepted.
            result.accepted_lengths.append(kept - 1)
            result.raw_accepted_lengths.append(len(accepted) - 1)
            root = next_root
            clock.lap("bookkeeping")
            topk = topk_ids.cpu().numpy()  # (n, k) int64
            last_topk = topk[accepted[-1]]  # (k,) the row that produced the next root
            observed = np.arange(len(tree)) if call.observe_rejected else np.asarray(accepted)
            drafter.observe(tree.tokens[observed], topk[observed])
            # The drafter learns every committed token except the newest (the next root):
            # exactly the tokens now in the KV cache.
            if not done:
                drafter.commit(np.asarray(output[committed:-1], dtype=np.int64))
                committed = len(output) - 1
            clock.lap("drafting")
        if committed < len(output):
            # The last tokens are output too: a shared drafter should know them next call.
            drafter.commit(np.asarray(output[committed:], dtype=np.int64))
        if streamer is not None:
            streamer.end()
    result.stop_reason = out.stop_reason or "max_new_tokens"
    if tokenizer is not None:
        result.text = tokenizer.decode(output, skip_special_tokens=True)
    clock.lap("bookkeeping")
    clock.timings["total"] = clock.last - clock.started
    return result
