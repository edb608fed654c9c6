"""The boundary of ``generate()``: every argument checked once, resolved into one :class:`Options`.

:func:`racer_ref.generate` calls :func:`resolve` first, with its arguments as they were
given; everything that can be wrong is refused here, naming the argument, before any work
(no forward pass, no drafter update). The decoding loop (:mod:`racer_ref.decoding`) then
reads the frozen :class:`Options` and trusts it.

Resolution is also where the optional parts plug in, so that the loop does not know them:

* the KV cache: transformers' ``DynamicCache``, or for a model prepared by ``speed_up_model``
  one whose layers write in place (:mod:`racer_ref.speedups.kv_cache`); the loop only calls
  ``cache.get_seq_length()``;
* the drafter: a new one for this request alone, whose step (``draft``, ``observe``,
  ``commit``) the loop calls directly, or the caller's ``drafter``, claimed for the call;
* ``capacity="auto"``: the drafter is wrapped in an ``AdaptiveDrafter``
  (:mod:`racer_ref.speedups.capacity`) that chooses each step's capacity, seen by the loop
  as any drafter;
* logits processors: a ``TreeLogitsProcessor`` (:mod:`racer_ref.integrations.processing`)
  only when there is a processor to apply; plain greedy decoding runs no processor code;
* the stop strings: a :class:`StopStrings`, or ``None`` when there are none;
* attention on a CPU: a grouped-query model with ``"sdpa"`` attention is switched to the
  registered ``"sdpa_gqa"`` (:mod:`racer_ref.speedups.attention`: the same attention, to
  float rounding, without transformers' ``repeat_kv`` copy of the whole KV cache per layer
  on every tree pass; one-token calls are unchanged). ``model.set_attn_implementation("sdpa")``
  switches back; ``$RACER_REF_CPU_KERNELS=off`` leaves the model as it is, and so does a model
  that ``speed_up_model`` prepared or that has ``racer_cpu_kernels_off = True`` (the command
  line chooses its attention with ``--attn``, and sets that with ``--cpu-kernels off``).

The CPU fast path (``racer_ref.speedups.cpu_kernels.speed_up_model``: measured kernels and a
direct forward) is then installed on a real float32 model on the CPU, once per model, with one
``racer_ref`` log line; it changes float rounding only, and ``model.generate`` uses it too
(:func:`racer_ref.speedups.cpu_kernels.speed_up_by_default`). ``$RACER_REF_CPU_KERNELS=off``
keeps PyTorch's stock path.
"""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np
import torch

from racer_ref.drafter import Drafter, check_backend, claim, core_step
from racer_ref.reference.drafter import TREES
from racer_ref.reference.drafter import Drafter as Twin
from racer_ref.reference.limits import DEFAULT_BREADTH, DEFAULT_CAPACITY, DEFAULT_MAX_NODES, DEFAULT_NGRAM, choice_value
from racer_ref.exactness import make_plan
from racer_ref.tree import METHODS, DraftTree
from racer_ref.verify import forward_tree

#: The capacity on a GPU when ``capacity=None``: the paper's.
DEFAULT_GPU_CAPACITY = DEFAULT_CAPACITY
#: The default elsewhere: on a CPU a verify pass costs more with every node, and 16 nodes
#: (about 1.6-1.8 one-token passes with racer_ref.speedups.cpu_kernels) pay off where 64 do not.
#: Fixed rather than "auto" so that a seed reproduces a sampled output.
DEFAULT_CPU_CAPACITY = 16

#: generate()'s keyword options and their defaults (each described on :class:`Options`):
#: the one list of its parameters after ``model, tokenizer, prompt, max_new_tokens``. A drafter
#: parameter's ``None`` means the drafter's default (:data:`DRAFTER_DEFAULTS`; the capacity
#: depends on the device), or with ``drafter`` the drafter's own setting.
OPTIONS: Dict[str, Any] = {
    "method": None, "capacity": None, "breadth": None, "ngram": None, "max_nodes": None, "backend": None,
    "temperature": 0.0, "top_p": 1.0, "eos_token_id": None, "stop": None, "streamer": None,
    "callback": None, "drafter": None, "observe_rejected": True, "seed": None, "generator": None,
    "cache": None, "logits_processor": None, "stopping_criteria": None, "tree": None, "probe": True,
}

#: generate()'s drafter parameters and their values when neither the caller nor a given
#: drafter sets them (the paper's, from :mod:`racer_ref.reference.limits`).
DRAFTER_DEFAULTS = {"capacity": DEFAULT_CAPACITY, "breadth": DEFAULT_BREADTH, "ngram": DEFAULT_NGRAM,
                    "max_nodes": DEFAULT_MAX_NODES, "backend": "rust", "tree": "paper"}

#: Settings of ``model.generation_config`` that a sampling ``model.generate`` applies and
#: generate() does not take from the config (it has its own ``temperature`` and ``top_p``;
#: pass the others as ``logits_processor``), with their neutral values: a setting away from
#: them makes the two differ when sampling, so we warn. The greedy processors (repetition
#: penalty, ``no_repeat_ngram_size``, ...) are applied.
UNAPPLIED_SAMPLING_SETTINGS = {
    "top_k": (None, 0), "typical_p": (None, 1.0), "min_p": (None, 0.0), "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
}

#: Generation-config keys that build no logits processor of greedy decoding: a config that
#: differs from transformers' defaults in these only needs no processor code at all. Any
#: other key sends the config through transformers' own processor builder.
NO_PROCESSOR_KEYS = frozenset({
    "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "max_length",
    "max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "min_p", "typical_p",
    "epsilon_cutoff", "eta_cutoff", "use_cache", "cache_implementation", "return_dict_in_generate",
    "output_scores", "output_logits", "output_attentions", "output_hidden_states", "transformers_version",
    "_from_model_config",
})


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


class StopStrings:
    """Finds the first token at which the generated text contains one of the stop strings.

    The text is the one that reads after the prompt: each check decodes the tail of the
    output *with a few tokens before it* and keeps what follows their text. Decoded alone,
    the first token of a SentencePiece-style tokenizer (Llama-2, Mistral, Gemma) loses its
    leading space, so a stop string such as ``" any"`` would be missed as the first word.

    The tail is long enough to hold the longest stop string ending inside the newest
    token's text: it starts at ``2 * longest + 4`` tokens and doubles while its text
    (without the broken character a cut through a multi-byte character leaves at its start)
    is too short. One character can take several byte-level tokens (an emoji four), so a
    window in tokens alone can miss a stop string; this one is measured in characters, and
    its cost does not grow with the output.
    """

    #: Tokens decoded before the tail, whose text is then cut off.
    CONTEXT = 4

    def __init__(self, tokenizer: Any, stop: Sequence[str], prompt_ids: Sequence[int]) -> None:
        self.tokenizer, self.stop = tokenizer, list(stop)
        self.longest = max(len(s) for s in self.stop)
        self.prompt_tail = list(prompt_ids)[-self.CONTEXT:]

    def text(self, output: List[int], window: int) -> str:
        """The text of the last ``window`` tokens of ``output`` as it reads after what precedes them."""
        start = max(len(output) - window, 0)
        context = (self.prompt_tail + output[max(start - self.CONTEXT, 0):start])[-self.CONTEXT:]
        head, whole = self.tokenizer.decode(context), self.tokenizer.decode(context + output[start:])
        # A context that ends inside a multi-byte character reads differently alone: decode the tail alone.
        return whole[len(head):] if whole.startswith(head) else self.tokenizer.decode(output[start:])

    def hit(self, output: List[int]) -> bool:
        """True if a stop string ends in the text of the last token of ``output``."""
        # The tail must hold the newest token's text and the longest - 1 characters before it.
        need = self.longest + len(self.text(output, 1).strip("\ufffd"))
        window = 2 * self.longest + 4
        while True:
            text = self.text(output, window)
            if window >= len(output) or len(text.lstrip("\ufffd")) >= need:
                return any(s in text for s in self.stop)
            window *= 2


@dataclass(frozen=True)
class Options:
    """One ``generate()`` call, its arguments checked and resolved: what the loop reads.

    This is the one place where ``generate()``'s parameters are described;
    [`resolve`][racer_ref.options.resolve] checks each of them (naming it in the error,
    before any work) and resolves it into the attributes below.

    **The parameters of** [`racer_ref.generate`][racer_ref.decoding.generate]:

    - ``model``: a transformers causal LM (decoder-only, full attention), in eval mode, on
      any device and dtype, eager or SDPA attention.
    - ``tokenizer``: its tokenizer; needed for a string prompt, ``stop`` and the ``text``.
    - ``prompt``: a string (tokenized as is, no chat template), or token ids in
      ``[0, vocab_size)``: a sequence, a 1-D tensor or a ``(1, n)`` tensor. Batch size 1
      only; it must leave room in ``model.config.max_position_embeddings``.
    - ``max_new_tokens``: at most this many new tokens (an int >= 0; default 128).
    - ``method``: one of :data:`racer_ref.tree.METHODS`: ``"racer"`` (the default),
      ``"retrieval"``, ``"logits"``, ``"logits-last"``, ``"pld"`` or ``"ar"`` (no drafts: one
      token per forward pass through the same loop).
    - ``capacity``: draft-tree nodes per verify pass, root included (an int >= 1; the
      paper's 64), or ``"auto"``: per step, the capacity with the most tokens per second on
      this device (:mod:`racer_ref.speedups.capacity`, which profiles the model once per
      process; without ``drafter`` only; its choices follow measured times, so a seed does
      not reproduce a sampled output with it). ``None`` (default): 64 on a GPU, 16
      elsewhere, where a 64-node verify pass costs several one-token passes (a given
      ``drafter`` brings its own).
    - ``breadth``: k, the copy-logit table's top-k (in ``[1, vocab_size]``; default 8).
    - ``ngram``, ``max_nodes``, ``backend``: passed to the drafter (``ngram >= 2``,
      ``max_nodes >= 1``; defaults: the paper's 10 and 10,000 from
      :mod:`racer_ref.reference.limits`, and ``"rust"``).
    - ``tree``: ``"paper"`` (default: the paper's merge) or ``"expected"`` (the draft tree
      with the most expected accepted tokens, docs/explanation/expected-tree.md), passed to
      the drafter like the parameters above (the Rust core's or the twin's ``Drafter``).
      For every drafter parameter ``None`` means the default, or with ``drafter`` the
      drafter's own setting: a value that contradicts it raises ``ValueError``, never ignored.
    - ``temperature``: 0 for greedy decoding (the default); a finite number >=
      :data:`MIN_TEMPERATURE` samples with the lossless rule.
    - ``top_p``: nucleus sampling threshold in ``(0, 1]`` (with ``temperature > 0``).
    - ``eos_token_id``: an int or a list of ints; ``None`` takes the model's generation
      config (as ``model.generate`` does); ``[]`` disables EOS. The first EOS inside an
      accepted block ends generation (it is kept in ``token_ids``).
    - ``stop``: stop string(s), non-empty; generation stops after the token that completes
      one (that token is kept). Only generated text is searched, as it reads after the prompt.
    - ``streamer``: a transformers streamer (``put(tensor)``, ``end()``); like
      ``model.generate`` it first receives the prompt, then each committed block.
    - ``callback``: called with each committed block of new token ids (a list of int).
    - ``drafter``: a ``racer_ref.Drafter`` (anything with ``draft``, ``observe``, ``commit``) to
      use and keep across calls (the paper's shared mode); ``None`` builds a fresh one for
      this request (the default, per-request).
    - ``observe_rejected``: update the copy-logit table from every verified node (True, as
      the paper) or from accepted nodes only.
    - ``seed``, ``generator``: randomness for sampling (a CPU ``torch.Generator`` wins over
      ``seed``, an int in ``[-2**63, 2**64)``); neither means torch's global generator.
    - ``cache``: an empty ``transformers.DynamicCache`` of full-attention layers to fill
      (default: a new one; for a model prepared by ``speed_up_model``, one whose layers
      write in place, :mod:`racer_ref.speedups.kv_cache`).
    - ``logits_processor``: transformers logits processors applied to every draft-tree node
      (``None``: those of the model's generation config, as ``model.generate``).
    - ``stopping_criteria``: ``criteria(ids (1, P + N), scores (1, vocab)) -> bool``, asked
      after every new token (transformers' ``StoppingCriteriaList`` fits).
    - ``probe``: check once per model object, before its first verify pass, that a branching
      tree pass is exact (:mod:`racer_ref.exactness`: one forward pass of 11 tokens); a model
      that fails it decodes with chain drafts or one token a step, saying so once in one line.
      ``False`` skips the check for a model known to pass: on a model that would fail it, the
      output then differs from greedy decoding's, with no notice.

    ``max_new_tokens`` is never exceeded, and prompt + output never exceed
    ``model.config.max_position_embeddings`` (MPT: ``max_seq_len``) tokens, so no position id at or beyond it is
    ever fed (draft trees are clipped in depth to fit; ``stop_reason="max_length"``).

    Attributes:
        prompt_ids: ``(P,)`` int64 prompt token ids.
        vocab_size: the model's vocabulary size (its config's); token ids lie in ``[0, vocab_size)``.
        max_new_tokens: at most this many new tokens.
        room: new tokens that fit in the model's context length (``inf`` without one).
        cache: the empty ``DynamicCache`` the prefill fills.
        device: where the inputs go (the model's execution device, also when offloaded).
        forward: the verify pass, ``forward(model, cache, tree) -> (n, vocab)`` logits:
            :func:`racer_ref.verify.forward_tree`, or what :mod:`racer_ref.exactness` plans.
        drafting: a context manager that gives the loop what drafts each tree (``draft``,
            ``observe``, ``commit``): a new drafter's step (nothing to hold: it is this
            call's alone), or the caller's drafter, claimed for the call.
        k: top-k ids kept per verified logits row (the drafter's breadth; 0 for ``"ar"``).
        method: the drafting method, for the result.
        temperature, top_p, generator: sampling (``temperature == 0``: greedy).
        observe_rejected: feed every verified node to the copy-logit table (or the accepted only).
        processors: a ``TreeLogitsProcessor``, or ``None``: the logits are the target's scores.
        eos: the EOS token ids.
        stops: a :class:`StopStrings`, or ``None`` without stop strings.
        stopping_criteria, streamer, callback: as given (``None`` when not).
    """

    prompt_ids: np.ndarray
    vocab_size: int
    max_new_tokens: int
    room: float
    cache: Any
    device: torch.device
    forward: Any
    drafting: Any
    k: int
    method: str
    temperature: float
    top_p: float
    generator: Optional[torch.Generator]
    observe_rejected: bool
    processors: Any
    eos: FrozenSet[int]
    stops: Optional[StopStrings]
    stopping_criteria: Any
    streamer: Any
    callback: Any


def resolve(model: Any, tokenizer: Any, prompt: Any, max_new_tokens: Any, options: Dict[str, Any]) -> Options:
    """Check every argument of :func:`racer_ref.generate` and resolve them into :class:`Options`.

    ``options``: the keyword options as given (the others take :data:`OPTIONS`). Each argument
    is checked once, by the rule at its parameter on :class:`Options`; one not given is not.

    Raises:
        ValueError: a value out of range or contradicting another (a drafter parameter or
            ``method`` against the given ``drafter``), an unsupported cache or model.
        TypeError: a value of the wrong kind, or an unknown option. The message names the
            argument; all are raised before any work is done (no forward pass, no drafter update).
    """
    unknown = [name for name in options if name not in OPTIONS]
    if unknown:
        raise TypeError(f"generate() got an unexpected keyword argument {unknown[0]!r}")
    a = {**OPTIONS, **options, "tokenizer": tokenizer, "prompt": prompt, "max_new_tokens": max_new_tokens}
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(model.config, "is_encoder_decoder", False):
        raise ValueError("model: encoder-decoder models are not supported; use a decoder-only causal LM")
    method = a["method"]
    if method is not None and not (isinstance(method, str) and method in METHODS):
        error = ValueError if isinstance(method, str) else TypeError
        raise error(f"method: expected one of {METHODS}, got {method!r}")
    _check_int("max_new_tokens", max_new_tokens, 0)
    if "temperature" in options or "top_p" in options:  # (the defaults, greedy, need no check)
        check_sampling_arguments(a["temperature"], a["top_p"])
    vocab_size = int(config.vocab_size)
    prompt_ids = _prompt_ids(tokenizer, prompt, vocab_size)
    max_length = getattr(config, "max_position_embeddings", None) or getattr(config, "max_seq_len", None)  # (MPT)
    if max_length is not None and len(prompt_ids) >= max_length:
        raise ValueError(f"prompt: {len(prompt_ids)} tokens leave no room in the context length {max_length}")
    generation_config = getattr(model, "generation_config", None)  # what model.generate reads
    if a["temperature"] > 0 and a["logits_processor"] is None:
        _check_sampling_config(generation_config)
    if getattr(generation_config, "cache_implementation", None) not in (None, "dynamic"):
        warnings.warn(f"model.generation_config: cache_implementation={generation_config.cache_implementation!r} "
                      "is not used: racer_ref.generate keeps its KV cache in a DynamicCache (the numbers are "
                      "the same)", stacklevel=3)
    if a["eos_token_id"] is not None:
        eos = _eos_ids(a["eos_token_id"], vocab_size)
    else:  # the model's generation config, as model.generate (its ids are the model's own: no range check)
        config_eos = getattr(generation_config, "eos_token_id", None)
        eos = [] if config_eos is None else _eos_ids(config_eos)
    stops = None if a["stop"] is None else _stop_strings(tokenizer, a["stop"], prompt_ids)
    cache = make_cache(model, a["cache"])
    generator = None if a["generator"] is None and a["seed"] is None else _generator(a["generator"], a["seed"])
    for name in ("observe_rejected", "probe"):
        if not isinstance(a[name], (bool, np.bool_)):
            raise TypeError(f"{name}: expected a bool, got {type(a[name]).__name__}")
    if any(a[name] is not None for name in ("callback", "stopping_criteria", "streamer")):
        _check_hooks(a["callback"], a["stopping_criteria"], a["streamer"])
    processors = None  # plain decoding: the raw logits are the target's scores, no processor code runs
    if a["logits_processor"] is not None or _config_processes(model):
        processors = _tree_processor(model, a["logits_processor"], prompt_ids, max_new_tokens, a["eos_token_id"])
    drafting, k, method = _drafter(model, a["drafter"], vocab_size, method, a)
    # Every argument is checked: now the model's attention may change (on a CPU; after the first
    # call with this model only an SDPA model has something to do there).
    if model.device.type == "cpu" and not getattr(model, "racer_cpu_checked", False):
        _cpu_attention(model)
    # How this model verifies exactly (racer_ref.exactness), planned again when what it depends on changes.
    key = (model.dtype, model.device, getattr(model.config, "_attn_implementation", None), bool(a["probe"]),
           id(getattr(model, "racer_cpu_kernels", None)), id(model.__dict__.get("forward")), model.training)
    plan = getattr(model, "racer_plan", None)
    if plan is None or plan.key != key:
        plan = make_plan(model, vocab_size, key)  # a probe of one forward pass
    drafting, forward = plan.apply(drafting) if plan.wraps else (drafting, forward_tree)
    return Options(
        prompt_ids=np.asarray(prompt_ids, dtype=np.int64), vocab_size=vocab_size, max_new_tokens=max_new_tokens,
        room=(max_length if max_length is not None else math.inf) - len(prompt_ids), cache=cache,
        device=plan.device, forward=forward, drafting=drafting, k=min(int(k), vocab_size), method=method,
        temperature=a["temperature"], top_p=a["top_p"], generator=generator,
        observe_rejected=bool(a["observe_rejected"]), processors=processors, eos=frozenset(eos), stops=stops,
        stopping_criteria=a["stopping_criteria"], streamer=a["streamer"], callback=a["callback"],
    )


# ----------------------------------------------------------------------------- one argument each
def _check_hooks(callback: Any, stopping_criteria: Any, streamer: Any) -> None:
    """``TypeError`` unless each one given is callable (a streamer: has ``put`` and ``end``)."""
    for name, value in (("callback", callback), ("stopping_criteria", stopping_criteria)):
        if value is not None and not callable(value):
            raise TypeError(f"{name}: expected a callable, got {type(value).__name__}")
    if streamer is not None and not (callable(getattr(streamer, "put", None))
                                     and callable(getattr(streamer, "end", None))):
        raise TypeError(f"streamer: expected an object with put() and end(), got {type(streamer).__name__}")


#: The smallest positive temperature: the logits are divided by it in float32, so it must
#: be a normal float32 number (below it, 1 / temperature is not representable).
MIN_TEMPERATURE = float(torch.finfo(torch.float32).tiny)


def check_sampling_arguments(temperature: float, top_p: float) -> None:
    """Check ``temperature`` (0 = greedy, or in ``[MIN_TEMPERATURE, inf)``) and ``top_p``
    (in ``(0, 1]``). Any real number is accepted: int, float, numpy scalar; not bool.

    Raises:
        TypeError: a value that is not a real number.
        ValueError: a value out of range (NaN and infinities included).
    """
    for name, value in (("temperature", temperature), ("top_p", top_p)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(temperature) or not (temperature == 0 or temperature >= MIN_TEMPERATURE):
        raise ValueError(f"temperature: expected 0 (greedy) or a finite number >= {MIN_TEMPERATURE:.3g}, "
                         f"got {temperature!r}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p: expected a number in (0, 1], got {top_p!r}")


def _check_int(name: str, value: Any, low: int) -> None:
    """``TypeError`` unless ``value`` is an int (bool refused), ``ValueError`` below ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")


def _prompt_ids(tokenizer: Any, prompt: Any, vocab_size: int) -> List[int]:
    """Validate ``prompt`` and return its token ids (batch size 1)."""
    if isinstance(prompt, str):
        if not callable(tokenizer):
            raise (ValueError if tokenizer is None else TypeError)(
                f"prompt: a string prompt needs a tokenizer (or token ids), got tokenizer={type(tokenizer).__name__}")
        ids = list(tokenizer(prompt)["input_ids"])
    elif isinstance(prompt, list) and all(type(t) is int for t in prompt):
        ids = prompt  # a list of Python ints: nothing to convert
    else:
        ids = _ids_of_array(prompt)
    if not ids:
        raise ValueError("prompt: empty; give at least one token")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"prompt: token ids must lie in [0, {vocab_size}); got {bad[:5]}")
    return ids


def _ids_of_array(prompt: Any) -> List[int]:
    """The token ids of a prompt given as a tensor, a numpy array or another sequence."""
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
    return [int(v) for v in values]


def _eos_ids(eos_token_id: Any, vocab_size: Optional[int] = None) -> List[int]:
    """``eos_token_id`` (an int, a list of ints or a tensor) as a sorted list; with
    ``vocab_size`` (ids given by the caller) each must be a token the model can produce."""
    if isinstance(eos_token_id, torch.Tensor):
        eos_token_id = eos_token_id.reshape(-1).tolist()
    values = [eos_token_id] if isinstance(eos_token_id, (int, np.integer)) else eos_token_id
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"eos_token_id: expected an int or a list of ints, got {eos_token_id!r}")
    values = list(values)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"eos_token_id: expected an int or a list of ints, got {eos_token_id!r}")
    ids = sorted({int(v) for v in values})
    bad = [t for t in ids if vocab_size is not None and not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"eos_token_id: token ids must lie in [0, {vocab_size}); got {bad[:5]}")
    return ids


def _stop_strings(tokenizer: Any, stop: Any, prompt_ids: List[int]) -> Optional[StopStrings]:
    """``stop`` checked: a :class:`StopStrings`, or ``None`` when there are none."""
    if isinstance(stop, (bytes, bytearray)) or (
            stop is not None and not isinstance(stop, str) and not hasattr(stop, "__iter__")):
        raise TypeError(f"stop: expected a string or a list of strings, got {type(stop).__name__}")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    kinds = sorted({type(s).__name__ for s in stops if not isinstance(s, str)})
    if kinds:
        raise TypeError(f"stop: expected a string or a list of strings, got a list with {', '.join(kinds)}")
    if any(not s for s in stops):
        raise ValueError(f"stop: expected non-empty strings, got {stop!r}")
    if stops and tokenizer is None:
        raise ValueError("stop: stop strings need a tokenizer")
    return StopStrings(tokenizer, stops, prompt_ids) if stops else None


def _generator(generator: Any, seed: Any) -> Optional[torch.Generator]:
    """The CPU generator of the draws: the given one, or one seeded with ``seed``, or ``None``."""
    if generator is not None and (not isinstance(generator, torch.Generator) or generator.device.type != "cpu"):
        raise ValueError("generator: expected a CPU torch.Generator (the draws are made on the CPU)")
    if seed is not None:
        _check_int("seed", seed, -(2**63))
        if seed >= 2**64:  # torch.Generator.manual_seed takes [-2**63, 2**64)
            raise ValueError(f"seed: expected an int in [-2**63, 2**64), got {seed!r}")
    if generator is None and seed is not None:
        generator = torch.Generator().manual_seed(int(seed))
    return generator


def _check_sampling_config(config: Any) -> None:
    """Warn about every sampling setting of the model's generation ``config`` that a sampling
    ``model.generate`` would apply and ``generate()`` does not (they change the distribution)."""
    ignored = [f"{name}={getattr(config, name)!r}" for name, neutral in UNAPPLIED_SAMPLING_SETTINGS.items()
               if getattr(config, name, None) not in neutral]
    if ignored:
        warnings.warn(f"model.generation_config: {', '.join(ignored)} not applied by racer_ref.generate "
                      "when sampling (pass them as logits_processor), so its distribution differs from "
                      "model.generate's", stacklevel=4)


def _config_processes(model: Any) -> bool:
    """Whether ``model.generate(do_sample=False)`` would apply logits processors from the
    model's generation config: a setting away from transformers' defaults that is not one
    of :data:`NO_PROCESSOR_KEYS`."""
    config = getattr(model, "generation_config", None)
    return (config is not None and hasattr(model, "_get_logits_processor")
            and not set(config.to_diff_dict()) <= NO_PROCESSOR_KEYS)


def _tree_processor(model: Any, logits_processor: Any, prompt_ids: List[int], max_new_tokens: int,
                    eos_token_id: Any) -> Any:
    """The processors applied to every draft-tree node (:mod:`racer_ref.integrations.processing`):
    ``logits_processor``, or with ``None`` those ``model.generate(do_sample=False)`` applies
    from the model's generation config. ``None`` when that leaves none to apply."""
    from racer_ref.integrations.processing import as_tree_processor, default_processors

    if logits_processor is None:
        logits_processor = default_processors(model, prompt_ids, max_new_tokens, eos_token_id)
    return as_tree_processor(logits_processor)  # None: raw logits are the target's scores


def _cpu_attention(model: Any) -> None:
    """On a CPU, plug in tree attention without KV copies, then the CPU fast path on a real
    model (:func:`racer_ref.speedups.cpu_kernels.speed_up_by_default`). Both honour the CLI's
    opt-out, ``$RACER_REF_CPU_KERNELS=off``."""
    from racer_ref.speedups.cpu_kernels import speed_up_by_default, switched_off

    if switched_off() or getattr(model, "racer_cpu_kernels_off", False):  # (the CLI's --cpu-kernels off)
        return
    # A model prepared by speed_up_model (the command line, the demo, the user) has its attention chosen.
    prepared = getattr(model, "racer_cpu_kernels", None) is not None
    sdpa = getattr(model.config, "_attn_implementation", None) == "sdpa"
    if sdpa and not prepared and hasattr(model, "set_attn_implementation"):
        from racer_ref.speedups.attention import use_sdpa_gqa

        use_sdpa_gqa(model)  # only a grouped-query model; others are left as they are
    if not prepared:
        speed_up_by_default(model)  # a real float32 model: measured kernels and a direct forward
    # A later call with this model skips all this, unless it is still on sdpa (not grouped-query).
    with contextlib.suppress(AttributeError, TypeError):  # (a model that takes no attributes: checked every call)
        model.racer_cpu_checked = getattr(model.config, "_attn_implementation", None) != "sdpa"


def make_cache(model: Any, cache: Any) -> Any:
    """The empty ``DynamicCache`` the prefill fills, of full-attention layers only (else a
    ``ValueError``): the caller's, or a new one; for a model prepared by ``speed_up_model``,
    one whose layers write in place (:mod:`racer_ref.speedups.kv_cache`, the same numbers)."""
    from transformers import DynamicCache, cache_utils
    from transformers.cache_utils import DynamicLayer

    # The model's own layout tells sliding-window and linear-attention layers apart (a given
    # DynamicCache() has no layers before its first forward pass).
    layout = DynamicCache(config=model.config)
    attention = getattr(cache_utils, "CacheLayerMixin", DynamicLayer)  # what attention layers share
    if not any(isinstance(layer, attention) for layer in layout.layers):
        raise ValueError(f"model: {type(model).__name__} has no attention layers ({model.config.model_type}); "
                         "racer-ref verifies a draft tree through tree attention, so it needs a transformer "
                         "with full-attention layers")
    for layer in layout.layers:
        if type(layer) is not DynamicLayer:
            raise ValueError(UNSUPPORTED_LAYER.format(type(layer).__name__) + f" (model: {type(model).__name__})")
    if cache is not None:
        return _given_cache(cache, len(layout.layers))
    if getattr(model, "racer_cpu_kernels", None) is not None:  # prepared by speed_up_model
        from racer_ref.speedups.kv_cache import growing_cache

        return growing_cache(model)
    return layout


#: The error for a cache layer that cannot keep an accepted tree path.
UNSUPPORTED_LAYER = ("cache: layer type {} is not supported (sliding-window, linear-attention and quantized "
                     "layers cannot keep an accepted tree path); only full-attention DynamicLayer")


def _given_cache(cache: Any, num_layers: int) -> Any:
    """The caller's ``cache``, after checking that it is an empty ``DynamicCache`` of
    full-attention layers (plain, or writing in place), one per layer of the model's
    ``num_layers`` (or none yet: ``DynamicCache()`` makes them at the first forward pass)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    from racer_ref.speedups.kv_cache import GrowingLayer

    if type(cache) is not DynamicCache:
        raise ValueError(f"cache: only an empty transformers DynamicCache is supported, got {type(cache).__name__}")
    if not hasattr(cache, "layers"):
        raise ValueError("cache: needs a DynamicCache with per-layer tensors (transformers >= 4.56)")
    if cache.get_seq_length() != 0:
        raise ValueError("cache: must be empty; generate() prefills it with the prompt")
    if cache.layers and len(cache.layers) != num_layers:
        raise ValueError(f"cache: {len(cache.layers)} layers, the model has {num_layers}")
    for layer in cache.layers:
        if type(layer) not in (DynamicLayer, GrowingLayer):
            raise ValueError(UNSUPPORTED_LAYER.format(type(layer).__name__))
    return cache


def _drafter(model: Any, drafter: Any, vocab_size: int, method: Optional[str],
             a: Dict[str, Any]) -> Tuple[Any, int, str]:
    """The drafting of this call (``Options.drafting``), the breadth ``k`` and the method.

    Usually a new drafter of the chosen backend is built for this request alone (the Rust
    core's or the twin's ``Drafter``, which checks the drafter parameters itself, naming
    each), and the loop calls its step directly: no lock, no checks, no undo kept. A given
    drafter, ``"ar"`` and ``capacity="auto"`` go through :func:`_checked_drafter`.
    """
    given = {name: a[name] for name in DRAFTER_DEFAULTS}
    if given["capacity"] is None and drafter is None:  # the device's default (a given drafter brings its own)
        given["capacity"] = DEFAULT_GPU_CAPACITY if model.device.type == "cuda" else DEFAULT_CPU_CAPACITY
    method = "racer" if method is None and drafter is None else method
    if drafter is not None or method == "ar" or isinstance(given["capacity"], str):  # "auto" (or a wrong kind)
        return _checked_drafter(model, drafter, vocab_size, method, given, a)
    settings = {name: DRAFTER_DEFAULTS[name] if value is None else value for name, value in given.items()}
    backend = settings.pop("backend")
    if backend == "python":
        step = Twin(method, vocab_size, **settings).trusted_step(owned=True)
    elif backend == "rust":
        from racer_ref._core import Drafter as Core  # (imported here: a twin-only install has no Rust core)

        step = core_step(Core(method, vocab_size, **settings))
    else:
        check_backend(backend)  # raises: neither backend
    return contextlib.nullcontext(step), settings["breadth"], method


def _checked_drafter(model: Any, drafter: Any, vocab_size: int, method: Optional[str],
                     given: Dict[str, Any], a: Dict[str, Any]) -> Tuple[Any, int, str]:
    """``_drafter`` for a drafter of the caller's, for ``"ar"`` (``drafter`` None) or for
    ``capacity="auto"``.

    ``"auto"`` wraps a new ``racer_ref.Drafter`` in an ``AdaptiveDrafter``
    (:mod:`racer_ref.speedups.capacity`, imported only when asked for: the loop knows fixed
    capacities). Otherwise :func:`_check_drafter_settings` checks the parameters the caller
    passed (``None``: not passed), since no ``Drafter`` is built to check them; with a
    drafter a value that contradicts it (or one it has no such setting for) is refused,
    never ignored, and with ``"ar"`` (root-only trees) a drafter setting is named in a warning.
    """
    if isinstance(given["capacity"], str) and given["capacity"] == "auto":
        if drafter is not None:
            raise ValueError("capacity: 'auto' builds its own drafter; leave capacity out with drafter=")
        given["capacity"] = DEFAULT_GPU_CAPACITY  # the largest it may choose
        if method != "ar":
            from racer_ref.speedups.capacity import AdaptiveDrafter, auto_controller

            settings = {name: DRAFTER_DEFAULTS[name] if value is None else value for name, value in given.items()}
            built = Drafter(method, vocab_size, **settings)
            auto = AdaptiveDrafter(built, auto_controller(model, max_capacity=DEFAULT_GPU_CAPACITY))
            return contextlib.nullcontext(auto), settings["breadth"], method  # this call's alone
    _check_drafter_settings(given, vocab_size)
    if drafter is None:
        # "ar" builds no drafter: a throwaway twin checks the rest of the drafter rules (upper
        # bounds, max_nodes >= ngram), with the messages every other method gives.
        Twin("racer", vocab_size, **{n: given[n] for n in ("capacity", "breadth", "ngram", "max_nodes", "tree")})
        for name in (n for n in DRAFTER_DEFAULTS if a[n] is not None):
            warnings.warn(f"{name}: {a[name]!r} is not used: method 'ar' drafts nothing (one token per pass)",
                          stacklevel=5)
        return contextlib.nullcontext(RootOnlyDrafter()), 0, "ar"
    breadth = a["breadth"]
    drafter = _given_drafter(drafter, vocab_size, {"method": method, **given})
    own_breadth = getattr(drafter, "breadth", None)  # None for a drafter of the caller's without one
    k = own_breadth if own_breadth is not None else (breadth or DRAFTER_DEFAULTS["breadth"])
    return claim(drafter), k, getattr(drafter, "method", None) or method or "racer"


def _check_drafter_settings(given: Dict[str, Any], vocab_size: int) -> None:
    """Check each drafter parameter passed (``None``: not passed) for kind and range."""
    for name, low in (("capacity", 1), ("breadth", 1), ("ngram", 2), ("max_nodes", 1)):
        if given[name] is not None:
            _check_int(name, given[name], low)
    if given["breadth"] is not None and given["breadth"] > vocab_size:
        raise ValueError(f"breadth: expected an int in [1, vocab_size = {vocab_size}], got {given['breadth']!r}")
    if given["backend"] is not None:
        check_backend(given["backend"])
    choice_value(given["tree"], "tree", TREES, "paper")  # the twin's rule, one home


def _given_drafter(drafter: Any, vocab_size: int, given: Dict[str, Any]) -> Any:
    """The caller's ``drafter``, checked: it drafts, it fits the model's vocabulary, and no
    parameter in ``given`` (``None``: not passed) contradicts its own setting. A drafter
    whose class racer_ref does not define comes back wrapped in a
    :class:`racer_ref.wrappers.CheckedDrafter`, which checks each of its trees."""
    if isinstance(drafter, type):
        raise TypeError(f"drafter: expected a drafter, got the class {drafter.__name__} (build one first)")
    if type(drafter).__module__ == "racer_ref._core":
        raise TypeError("drafter: the Rust core's Drafter returns arrays; pass racer_ref.Drafter(..., "
                        "backend=\"rust\"), which wraps it")
    missing = [name for name in ("draft", "observe", "commit") if not callable(getattr(drafter, name, None))]
    if missing:
        raise TypeError(f"drafter: expected a racer_ref.Drafter (draft, observe, commit), "
                        f"got {type(drafter).__name__} without {', '.join(missing)}")
    own_breadth = getattr(drafter, "breadth", None)
    if own_breadth is not None and (isinstance(own_breadth, bool) or not isinstance(own_breadth, (int, np.integer))
                                    or not 1 <= own_breadth <= vocab_size):
        raise ValueError(f"drafter: its breadth must be an int in [1, vocab_size = {vocab_size}], got {own_breadth!r}")
    if getattr(drafter, "vocab_size", vocab_size) != vocab_size:
        raise ValueError(f"drafter: built for vocab_size {drafter.vocab_size}, the model has {vocab_size}")
    for name, value in given.items():
        own = getattr(drafter, name, None)
        if value is None or value == own or (name == "breadth" and own is None):
            continue  # (breadth is the k of the top-k rows passed to a drafter without one)
        if own is not None:
            raise ValueError(f"{name}: {value!r} contradicts the given drafter's {name} {own!r}; "
                             "leave it out, or build the drafter with it")
        warnings.warn(f"{name}: {value!r} is not used: the given {type(drafter).__name__} has no {name} "
                      "(the drafter decides)", stacklevel=5)
    from racer_ref.wrappers import CheckedDrafter

    if isinstance(drafter, Drafter) or type(drafter).__module__.startswith("racer_ref."):
        return drafter  # racer_ref's own drafters and wrappers build valid trees (a Drafter is claimed)

    return CheckedDrafter(drafter, vocab_size)
