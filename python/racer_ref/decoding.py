"""``generate()``: lossless RACER decoding of one prompt on a Hugging Face causal LM.

The loop (racer-spec.md, "One decoding step"): prefill the prompt and pick the first root;
then, until a stopping rule fires, ask the drafter for a draft tree rooted at the root,
verify it in one forward pass (:mod:`racer_ref.verify`), emit the accepted drafts plus the
next root, update the drafter (copy-logit table from the verified logits, automaton from
the committed tokens) and keep only the accepted path in the KV cache.

With ``temperature=0`` the output equals ``model.generate(do_sample=False)`` token for token;
with ``temperature > 0`` it has the distribution of plain sampling (lossless rule, spec
"Sampling") with temperature and top-p only (no top-k). Other settings of the model's
generation config (repetition penalty, ...) are not applied. Batch size 1 only.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
import torch

from racer_ref.tree import SOURCE_ROOT, DraftTree
from racer_ref.sampling import check_sampling_arguments, sample, target_probs
from racer_ref.verify import (accept_greedy, accept_sampling, argmax_from_topk, forward_prompt, forward_tree,
                              keep_accepted)

#: Every ``method`` generate() accepts: the drafters of ``racer_ref.Drafter`` plus plain
#: autoregressive decoding (``"ar"``: root-only trees through the same loop).
METHODS = ("racer", "retrieval", "logits", "logits-last", "pld", "ar")
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
        accepted_lengths: per verify step, the accepted length ``a`` (drafted tokens the
            target accepted, root excluded), before any cut by a stopping rule.
        tree_sizes: per verify step, the number of draft-tree nodes fed to the target.
        timings: seconds spent in ``prefill`` (prompt forward pass and first root),
            ``drafting`` (the drafter's draft/observe/commit), ``forward`` (verify passes),
            ``acceptance`` (walking the tree, sampling), ``bookkeeping`` (KV-cache
            compaction, stopping rules, streaming), and ``total`` (wall time of the call).
        stop_reason: ``"eos"``, ``"stop_string"``, ``"max_new_tokens"`` or ``"max_length"``
            (the model's context length is full).
        method: the drafting method used.
    """

    token_ids: List[int]
    text: Optional[str]
    accepted_lengths: List[int] = field(default_factory=list)
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
        """MAT: the mean of ``a + 1`` over verify steps (1.00 for ``"ar"``); NaN without steps."""
        if not self.accepted_lengths:
            return math.nan
        return float(np.mean(self.accepted_lengths) + 1.0)


def root_only_tree(root: int) -> DraftTree:
    """The one-node draft tree of plain autoregressive decoding (method ``"ar"``)."""
    return DraftTree(
        tokens=np.array([root], dtype=np.int64),
        parents=np.array([-1], dtype=np.int64),
        depths=np.array([0], dtype=np.int64),
        attention_mask=np.ones((1, 1), dtype=bool),
        retrieve_indices=np.zeros((1, 1), dtype=np.int64),
        sources=np.array([SOURCE_ROOT], dtype=np.uint8),
    )


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
    from transformers.cache_utils import DynamicLayer

    from racer_ref.speedups.kv_cache import GrowingLayer, growing_cache

    # The model's own layout tells sliding-window and other layers apart. A cache given
    # as DynamicCache() has no layers until the first forward pass (they are then all
    # DynamicLayer), so the layout is checked whatever cache the caller passes.
    layout = growing_cache(model)
    if cache is None:
        cache = layout
    if type(cache) is not DynamicCache:
        raise ValueError(f"cache: only an empty transformers DynamicCache is supported, got {type(cache).__name__}")
    if not hasattr(cache, "layers"):
        raise ValueError("cache: needs a DynamicCache with per-layer tensors (transformers >= 4.56)")
    if cache.get_seq_length() != 0:
        raise ValueError("cache: must be empty; generate() prefills it with the prompt")
    for layer in list(layout.layers) + list(cache.layers):
        if type(layer) not in (DynamicLayer, GrowingLayer):
            raise ValueError(
                f"cache: layer type {type(layer).__name__} is not supported (sliding-window, linear-attention "
                "and quantized layers cannot keep an accepted tree path); only full-attention DynamicLayer"
            )
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
    """Finds the first token at which the generated text contains one of the stop strings."""

    def __init__(self, tokenizer: Any, stop: Union[str, Iterable[str], None]):
        if stop is not None and not isinstance(stop, str) and not hasattr(stop, "__iter__"):
            raise TypeError(f"stop: expected a string or a list of strings, got {type(stop).__name__}")
        self.stop = [stop] if isinstance(stop, str) else list(stop or [])
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop: expected non-empty strings, got {stop!r}")
        if self.stop and tokenizer is None:
            raise ValueError("stop: stop strings need a tokenizer")
        self.tokenizer = tokenizer
        # A stop string of s characters ends inside the last s tokens that carry text; the
        # margin covers tokens that decode to nothing on their own (partial UTF-8 bytes).
        self.window = 2 * max((len(s) for s in self.stop), default=0) + 4

    def hit(self, output: List[int]) -> bool:
        """True if a stop string ends at the last token of ``output``."""
        if not self.stop:
            return False
        text = self.tokenizer.decode(output[-self.window :])
        return any(s in text for s in self.stop)


def generate(
    model: Any,
    tokenizer: Any = None,
    prompt: Any = None,
    max_new_tokens: int = 128,
    method: str = "racer",
    capacity: Union[int, str, None] = None,
    breadth: int = 8,
    ngram: int = 10,
    max_nodes: int = 10_000,
    backend: str = "rust",
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
) -> GenerationResult:
    """Decode one prompt with RACER (or another drafter) and the target's verification.

    Args:
        model: a transformers causal LM (decoder-only, full attention), in eval mode, on any
            device and dtype, eager or SDPA attention.
        tokenizer: its tokenizer; needed for a string prompt, ``stop`` and ``text``.
        prompt: a string (tokenized as is, no chat template), or token ids: a sequence, a
            1-D tensor or a ``(1, n)`` tensor. Batch size 1 only.
        max_new_tokens: at most this many new tokens (>= 0).
        method: ``"racer"``, ``"retrieval"``, ``"logits"``, ``"logits-last"``, ``"pld"`` or
            ``"ar"`` (no drafts: one token per forward pass through the same loop).
        capacity: draft-tree nodes per verify pass, root included (>= 1; the paper's 64), or
            ``"auto"``: per step, the capacity with the most tokens per second on this device
            (:mod:`racer_ref.speedups.capacity`, which profiles the model once per process).
            ``None`` (default): 64 on a GPU, 16 elsewhere, where a 64-node verify pass costs
            several one-token passes (a given ``drafter`` brings its own). ``"auto"`` without a
            ``drafter`` only; its choices follow measured times, so a seed does not reproduce a
            sampled output with it.
        breadth: k, the copy-logit table's top-k (>= 1; paper 8).
        ngram, max_nodes, backend: passed to ``racer_ref.Drafter``.
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
            ``max_new_tokens < 0``, ``capacity < 1``, ``breadth < 1``, drafter parameters out
            of range (checked for ``"ar"`` too), an unknown method, bad sampling arguments, an
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
    started = time.perf_counter()
    # ---- validate everything before any work ------------------------------------------
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(model.config, "is_encoder_decoder", False):
        raise ValueError("model: encoder-decoder models are not supported; use a decoder-only causal LM")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    _check_int("max_new_tokens", max_new_tokens, 0)
    if capacity == "auto" and drafter is not None:
        raise ValueError("capacity: 'auto' builds its own drafter; leave capacity out with drafter=")
    if capacity is None:  # the device's default (a given drafter brings its own capacity)
        capacity = DEFAULT_GPU_CAPACITY if model.device.type == "cuda" or drafter is not None else DEFAULT_CPU_CAPACITY
    auto = capacity == "auto"
    if not auto:
        _check_int("capacity", capacity, 1)
    _check_int("breadth", breadth, 1)
    check_sampling_arguments(temperature, top_p)
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
    if drafter is None:
        from racer_ref.drafter import Drafter

        # Built for "ar" too, so that its arguments are checked alike; "ar" drafts nothing.
        drafter = Drafter(method=method, vocab_size=vocab_size, capacity=DEFAULT_GPU_CAPACITY if auto else capacity,
                          breadth=breadth, ngram=ngram, max_nodes=max_nodes, backend=backend)
        if method == "ar":
            drafter = None
        elif auto:
            # A speed-up, imported only when asked for: the loop itself knows fixed capacities.
            from racer_ref.speedups.capacity import AdaptiveDrafter, auto_controller

            drafter = AdaptiveDrafter(drafter, auto_controller(model, max_capacity=DEFAULT_GPU_CAPACITY))
    else:
        missing = [name for name in ("draft", "observe", "commit") if not callable(getattr(drafter, name, None))]
        if missing:
            raise TypeError(f"drafter: expected a racer_ref.Drafter (draft, observe, commit), "
                            f"got {type(drafter).__name__} without {', '.join(missing)}")
        if getattr(drafter, "vocab_size", vocab_size) != vocab_size:
            raise ValueError(f"drafter: built for vocab_size {drafter.vocab_size}, the model has {vocab_size}")
    method = getattr(drafter, "method", method) if drafter is not None else method
    # Copy-logit rows are the top-k ids of the target's logits, k = the drafter's breadth.
    k = min(int(getattr(drafter, "breadth", breadth)), vocab_size)
    limit = max_length if max_length is not None else math.inf

    timings = dict.fromkeys(TIMING_KEYS, 0.0)
    result = GenerationResult(token_ids=[], text=None, timings=timings, method=method)
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)

    def choose(logits_row: torch.Tensor) -> int:
        """The root: argmax (greedy) or a sample of the target distribution (spec step 1)."""
        if temperature == 0:
            return int(logits_row.argmax())
        return sample(target_probs(logits_row[None], temperature, top_p)[0], generator)

    output = result.token_ids  # new tokens, root of the next step last
    last_topk = None  # top-k ids of the logits row that produced the root ("logits-last")
    drafted = 0  # output tokens already committed to the drafter (the prompt is, at prefill)

    def emit(block: List[int]) -> bool:
        """Append a block of new tokens; cut it at the first stopping rule. True = stop."""
        stopped = False
        for n_kept, token in enumerate(block, start=1):
            output.append(token)
            if token in eos:
                result.stop_reason, stopped = "eos", True
            elif stops.hit(output):
                result.stop_reason, stopped = "stop_string", True
            elif len(output) >= max_new_tokens:
                result.stop_reason, stopped = "max_new_tokens", True
            if stopped:
                block = block[:n_kept]
                break
        if streamer is not None:
            streamer.put(torch.tensor(block))
        if callback is not None:
            callback(list(block))
        return stopped

    # A Drafter serves one generate() call at a time: a second caller is refused at once.
    from racer_ref.drafter import claim

    with claim(drafter), torch.inference_mode():
        if streamer is not None:
            streamer.put(torch.tensor([prompt_ids]))
        done = max_new_tokens == 0
        if not done:
            # ---- prefill: the prompt fills the cache and predicts the first root ------
            tic = time.perf_counter()
            prompt_t = torch.tensor(prompt_ids, device=model.device)  # (P,)
            logits = forward_prompt(model, cache, prompt_t)  # (P, vocab)
            root = choose(logits[-1])
            sync()
            timings["prefill"] += time.perf_counter() - tic
            if drafter is not None:
                # Copy-logit table rows for every prompt position; the automaton learns the prompt.
                tic = time.perf_counter()
                topk = logits.topk(k, dim=-1).indices.cpu().numpy()  # (P, k) int64
                last_topk = topk[-1]  # (k,) the row that produced the root
                drafter.observe(np.asarray(prompt_ids, dtype=np.int64), topk)
                drafter.commit(np.asarray(prompt_ids, dtype=np.int64))
                timings["drafting"] += time.perf_counter() - tic
            tic = time.perf_counter()
            done = emit([root])
            timings["bookkeeping"] += time.perf_counter() - tic
        while not done:
            # Room left for this step's block (accepted drafts + next root).
            room = min(max_new_tokens - len(output), limit - len(prompt_ids) - len(output))
            if room <= 0:
                result.stop_reason = "max_length"
                break
            # ---- draft ------------------------------------------------------------------
            tic = time.perf_counter()
            tree = root_only_tree(root) if drafter is None else drafter.draft(root, last_topk=last_topk)
            if int(tree.tokens[0]) != root:
                raise RuntimeError(f"drafter returned a tree rooted at {tree.tokens[0]}, expected {root}")
            tree = clip_draft_tree(tree, room - 1)
            timings["drafting"] += time.perf_counter() - tic
            # ---- verify -----------------------------------------------------------------
            tic = time.perf_counter()
            past_length = cache.get_seq_length()  # L = prompt + output - 1
            logits = forward_tree(model, cache, tree)  # (n, vocab)
            sync()
            timings["forward"] += time.perf_counter() - tic
            # ---- accept -----------------------------------------------------------------
            tic = time.perf_counter()
            if drafter is not None:
                # Every node's top-k feeds the copy-logit table; one top-k also gives the argmax.
                topk_values, topk_ids = logits.topk(k, dim=-1)  # (n, k) each
            if temperature == 0:
                predicted = None if drafter is None else argmax_from_topk(logits, topk_values, topk_ids)
                accepted, next_root = accept_greedy(logits, tree, predicted)
            else:
                accepted, next_root = accept_sampling(target_probs(logits, temperature, top_p), tree, generator)
            timings["acceptance"] += time.perf_counter() - tic
            result.accepted_lengths.append(len(accepted) - 1)
            result.tree_sizes.append(len(tree))
            # ---- commit: cache, output, drafter ------------------------------------------
            tic = time.perf_counter()
            keep_accepted(cache, past_length, accepted)
            done = emit(tree.tokens[accepted[1:]].tolist() + [next_root])
            root = next_root
            timings["bookkeeping"] += time.perf_counter() - tic
            if drafter is not None:
                tic = time.perf_counter()
                topk = topk_ids.cpu().numpy()  # (n, k) int64
                last_topk = topk[accepted[-1]]  # (k,) the row that produced the next root
                observed = np.arange(len(tree)) if observe_rejected else np.asarray(accepted)
                drafter.observe(tree.tokens[observed], topk[observed])
                # The drafter learns every committed token except the newest (the next root):
                # exactly the tokens now in the KV cache.
                if not done:
                    drafter.commit(np.asarray(output[drafted:-1], dtype=np.int64))
                    drafted = len(output) - 1
                timings["drafting"] += time.perf_counter() - tic
        if drafter is not None and drafted < len(output):
            # The last tokens are output too: a shared drafter should know them next call.
            drafter.commit(np.asarray(output[drafted:], dtype=np.int64))
        if streamer is not None:
            streamer.end()
    if tokenizer is not None:
        result.text = tokenizer.decode(output, skip_special_tokens=True)
    timings["total"] = time.perf_counter() - started
    return result

