"""The boundary of ``generate()``: every argument checked once, resolved into one :class:`Options`.

:func:`racer_ref.generate` calls :func:`resolve` first; everything that can be wrong is refused
here, naming the argument, before any work (no forward pass, no drafter update), and the loop
(:mod:`racer_ref.decoding`) trusts the frozen :class:`Options`. This module only checks and
resolves: each thing a call needs is made where its concept lives (the KV cache by
:func:`racer_ref.verify.make_cache`, the drafting by :func:`racer_ref.drafter.make_drafting`,
the logits processors by :mod:`racer_ref.integrations.processing`, a CPU model's attention by
:mod:`racer_ref.speedups.attention`, the exactness plan by :mod:`racer_ref.exactness`), and
each rule it shares with the drafter is the drafter's (:mod:`racer_ref.reference.limits`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np
import torch

from racer_ref.drafter import DRAFTER_PARAMETERS, make_drafting
from racer_ref.exactness import make_plan
from racer_ref.reference.limits import at_least, check_token_ids, int_value
from racer_ref.sampling import check_sampling_arguments
from racer_ref.verify import forward_tree, make_cache

#: generate()'s keyword options and their defaults (each described on :class:`Options`):
#: the one list of its parameters after ``model, tokenizer, prompt, max_new_tokens``. A drafter
#: parameter's ``None`` means the drafter's default (:data:`racer_ref.drafter.DRAFTER_PARAMETERS`;
#: the capacity depends on the device), or with ``drafter`` the drafter's own setting.
OPTIONS: Dict[str, Any] = {
    "method": None, **dict.fromkeys(DRAFTER_PARAMETERS), "backend": None,
    "temperature": 0.0, "top_p": 1.0, "eos_token_id": None, "stop": None, "streamer": None,
    "callback": None, "drafter": None, "observe_rejected": True, "seed": None, "generator": None,
    "cache": None, "logits_processor": None, "stopping_criteria": None, "probe": True,
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
    - the drafter parameters of :data:`racer_ref.drafter.DRAFTER_PARAMETERS`, passed to the
      drafter (the Rust core's or the twin's ``Drafter``, which checks them):
      ``capacity`` (draft-tree nodes per verify pass, root included; ``None``: 64 on a GPU,
      16 elsewhere, where a 64-node verify pass costs several one-token passes; or
      ``"auto"``: per step, the capacity with the most tokens per second on this device,
      :mod:`racer_ref.speedups.capacity`, which profiles the model once per process; without
      ``drafter`` only; a seed does not reproduce a sampled output with it), ``breadth``
      (k, the copy-logit table's top-k), ``ngram``, ``max_nodes`` and ``tree`` (``"paper"``
      or ``"expected"``, docs/explanation/expected-tree.md); and ``backend`` (``"rust"``,
      the default, or ``"python"``). ``None`` means the default, or with ``drafter`` the
      drafter's own setting: a value that contradicts it raises ``ValueError``, never ignored.
    - ``temperature``: 0 for greedy decoding (the default); a finite number >=
      :data:`racer_ref.sampling.MIN_TEMPERATURE` samples with the lossless rule.
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
            ``observe``, ``commit``; :func:`racer_ref.drafter.make_drafting`).
        k: top-k ids kept per verified logits row (the drafter's breadth; 0 for ``"ar"``).
        method: the drafting method, for the result.
        temperature, top_p, generator: sampling (``temperature == 0``: greedy).
        observe_rejected: feed every verified node to the copy-logit table (or the accepted only).
        processors: a ``TreeLogitsProcessor``, or ``None``: the logits are the target's scores.
        eos: the EOS token ids.
        stops: the stop strings (a tuple), or ``None`` without any.
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
    stops: Optional[Tuple[str, ...]]
    stopping_criteria: Any
    streamer: Any
    callback: Any


def resolve(model: Any, tokenizer: Any, prompt: Any, max_new_tokens: Any, options: Dict[str, Any]) -> Options:
    """Check every argument of :func:`racer_ref.generate` (``options``: the keyword options
    given; the others take :data:`OPTIONS`) once, by the rule at its parameter on
    :class:`Options`, and resolve them into :class:`Options`. ``ValueError`` (out of range,
    contradicting another, an unsupported cache or model) or ``TypeError`` (the wrong kind, an
    unknown option), naming the argument, before any work (no forward pass, no drafter update)."""
    unknown = [name for name in options if name not in OPTIONS]
    if unknown:
        raise TypeError(f"generate() got an unexpected keyword argument {unknown[0]!r}")
    a = {**OPTIONS, **options}
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(model.config, "is_encoder_decoder", False):
        raise ValueError("model: encoder-decoder models are not supported; use a decoder-only causal LM")
    vocab_size = int(config.vocab_size)
    # The drafter's rules (racer_ref.reference.limits) give each message; a value that plainly
    # keeps them (an int >= 0, ids in range) needs no call. (method: checked when the drafter is made)
    if type(max_new_tokens) is not int or max_new_tokens < 0:
        at_least(max_new_tokens, "max_new_tokens", 0)
    ids = _prompt_ids(tokenizer, prompt)
    if ids.dtype == object or ids.min() < 0 or ids.max() >= vocab_size:
        check_token_ids("prompt", ids, vocab_size)
    prompt_ids = ids.astype(np.int64)
    if "temperature" in options or "top_p" in options:  # (the defaults, greedy, need no check)
        check_sampling_arguments(a["temperature"], a["top_p"])
    max_length = getattr(config, "max_position_embeddings", None) or getattr(config, "max_seq_len", None)  # (MPT)
    if max_length is not None and len(prompt_ids) >= max_length:
        raise ValueError(f"prompt: {len(prompt_ids)} tokens leave no room in the context length {max_length}")
    generation_config = getattr(model, "generation_config", None)  # what model.generate reads
    if a["temperature"] > 0 and a["logits_processor"] is None:
        from racer_ref.integrations.processing import warn_unapplied_sampling

        warn_unapplied_sampling(generation_config)
    if getattr(generation_config, "cache_implementation", None) not in (None, "dynamic"):
        warnings.warn(f"model.generation_config: cache_implementation={generation_config.cache_implementation!r} "
                      "is not used: racer_ref.generate keeps its KV cache in a DynamicCache (the numbers are "
                      "the same)", stacklevel=3)
    if a["eos_token_id"] is not None:
        eos = _eos_ids(a["eos_token_id"], vocab_size)
    else:  # the model's generation config, as model.generate (its ids are the model's own: no range check)
        config_eos = getattr(generation_config, "eos_token_id", None)
        eos = [] if config_eos is None else _eos_ids(config_eos)
    stops = None if a["stop"] is None else _stop_strings(tokenizer, a["stop"])
    # Would model.generate(do_sample=False) apply processors from the config (a key not in NO_PROCESSOR_KEYS)?
    processes = (generation_config is not None and hasattr(model, "_get_logits_processor")
                 and not set(generation_config.to_diff_dict()) <= NO_PROCESSOR_KEYS)
    cache = make_cache(model, a["cache"])
    generator = None if a["generator"] is None and a["seed"] is None else _generator(a["generator"], a["seed"])
    for name in ("observe_rejected", "probe"):
        if not isinstance(a[name], (bool, np.bool_)):
            raise TypeError(f"{name}: expected a bool, got {type(a[name]).__name__}")
    if any(a[name] is not None for name in ("callback", "stopping_criteria", "streamer")):
        _check_hooks(a["callback"], a["stopping_criteria"], a["streamer"])
    processors = None  # plain decoding: the raw logits are the target's scores, no processor code runs
    if a["logits_processor"] is not None or processes:
        from racer_ref.integrations.processing import tree_processor

        processors = tree_processor(model, a["logits_processor"], prompt_ids.tolist(), max_new_tokens,
                                    a["eos_token_id"])
    given = {name: a[name] for name in (*DRAFTER_PARAMETERS, "backend")}
    drafting, k, method = make_drafting(model, a["drafter"], vocab_size, a["method"], given)
    # Every argument is checked: now the model's attention may change (on a CPU, once per model but for SDPA).
    if model.device.type == "cpu" and not getattr(model, "racer_cpu_checked", False):
        from racer_ref.speedups.attention import prepare_cpu_attention

        prepare_cpu_attention(model)
    # How this model verifies exactly (racer_ref.exactness), planned again when what it depends on changes.
    key = (model.dtype, model.device, getattr(model.config, "_attn_implementation", None), bool(a["probe"]),
           id(getattr(model, "racer_cpu_kernels", None)), id(model.__dict__.get("forward")), model.training)
    plan = getattr(model, "racer_plan", None)
    if plan is None or plan.key != key:
        plan = make_plan(model, vocab_size, key)  # a probe of one forward pass
    drafting, forward = plan.apply(drafting) if plan.wraps else (drafting, forward_tree)
    return Options(
        prompt_ids=prompt_ids, vocab_size=vocab_size, max_new_tokens=max_new_tokens,
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


def _prompt_ids(tokenizer: Any, prompt: Any) -> np.ndarray:
    """``prompt`` checked (batch size 1, integer ids): its ``(P,)`` ids, int64 (objects past 64 bits)."""
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
    try:
        return np.asarray(ids, dtype=np.int64)
    except OverflowError:
        return np.asarray(ids, dtype=object)


def _ids_of_array(prompt: Any) -> List[int]:
    """The token ids of a prompt given as a tensor, a numpy array or another sequence."""
    if isinstance(prompt, torch.Tensor):
        if prompt.is_floating_point() or prompt.is_complex() or prompt.dtype == torch.bool:
            raise TypeError(f"prompt: expected integer token ids, got dtype {prompt.dtype}")
        array = prompt.detach().cpu().numpy()
    elif isinstance(prompt, np.ndarray):
        array = prompt
    elif isinstance(prompt, Sequence) and not isinstance(prompt, (bytes, bytearray)):
        try:  # dtype=object keeps Python ints as they are: numpy would turn [1, 2**63] into float64
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
    if array.dtype.kind not in "iu":  # an object array (from a list) may hold anything: check each element
        kinds = ({f"dtype {array.dtype}"} if values else set()) if array.dtype != object else {
            type(v).__name__ for v in values if isinstance(v, bool) or not isinstance(v, (int, np.integer))}
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
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in values):
        raise TypeError(f"eos_token_id: expected an int or a list of ints, got {eos_token_id!r}")
    ids = sorted({int(v) for v in values})
    if vocab_size is not None and ids:
        check_token_ids("eos_token_id", np.asarray(ids, dtype=object), vocab_size)  # the drafter's rule, in its words
    return ids


def _stop_strings(tokenizer: Any, stop: Any) -> Optional[Tuple[str, ...]]:
    """``stop`` checked: a tuple of non-empty strings, or ``None`` when there are none."""
    if isinstance(stop, (bytes, bytearray)) or (not isinstance(stop, str) and not hasattr(stop, "__iter__")):
        raise TypeError(f"stop: expected a string or a list of strings, got {type(stop).__name__}")
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    kinds = sorted({type(s).__name__ for s in stops if not isinstance(s, str)})
    if kinds:
        raise TypeError(f"stop: expected a string or a list of strings, got a list with {', '.join(kinds)}")
    if any(not s for s in stops):
        raise ValueError(f"stop: expected non-empty strings, got {stop!r}")
    if stops and tokenizer is None:
        raise ValueError("stop: stop strings need a tokenizer")
    return stops or None


def _generator(generator: Any, seed: Any) -> Optional[torch.Generator]:
    """The CPU generator of the draws: the given one, or one seeded with ``seed``, or ``None``."""
    if generator is not None and (not isinstance(generator, torch.Generator) or generator.device.type != "cpu"):
        raise ValueError("generator: expected a CPU torch.Generator (the draws are made on the CPU)")
    if seed is not None and not -(2**63) <= int_value(seed, "seed", wide=True) < 2**64:  # manual_seed's range
        raise ValueError(f"seed: must be in [-2**63, 2**64), got {seed!r}")
    if generator is None and seed is not None:
        generator = torch.Generator().manual_seed(int(seed))
    return generator
