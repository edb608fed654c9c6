"""RACER inside ``model.generate()``: a ``custom_generate`` callable for transformers.

    from racer_ref.integrations.hf import racer_decoding

    out = model.generate(**inputs, custom_generate=racer_decoding, max_new_tokens=128)

transformers (>= 4.56) prepares everything as usual (generation config, the logits
processors and the stopping criteria it builds from it, the prompt) and then hands decoding
to :func:`racer_decoding` instead of its own loop. We run :func:`racer_ref.generate` (the
same loop, no second one) with transformers' logits processors applied to every draft-tree
node (:mod:`racer_ref.integrations.processing`) and its stopping criteria asked after every new token,
and return what ``model.generate`` returns: the ``(1, P + N)`` int64 tensor of prompt and
new tokens, or with ``return_dict_in_generate=True`` a :class:`RacerDecoderOnlyOutput`
(transformers' ``GenerateDecoderOnlyOutput`` plus the acceptance statistics).

Drafter settings are keyword arguments of ``generate()`` (transformers after 4.56 passes
the keys of this function's signature through): ``method``, ``backend``, the drafter
parameters of :data:`racer_ref.drafter.DRAFTER_PARAMETERS` (``capacity``, ``breadth``,
``ngram``, ``max_nodes``, ``tree``), ``drafter``, ``observe_rejected``, ``probe``. With
transformers 4.56 bind them first: ``functools.partial(racer_decoding, capacity=32)``.
"""

from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from racer_ref import missing_hf_extra

try:
    import torch
    from transformers.generation.utils import GenerateDecoderOnlyOutput, GenerationMixin
except ModuleNotFoundError as _exc:  # the core install: say which extra brings torch
    _missing = missing_hf_extra("racer_ref.integrations.hf")
    if _missing is None:
        raise
    raise _missing from _exc

from racer_ref.decoding import generate
from racer_ref.drafter import DRAFTER_PARAMETERS
from racer_ref.verify import make_cache


@dataclass
class RacerDecoderOnlyOutput(GenerateDecoderOnlyOutput):
    """``GenerateDecoderOnlyOutput`` with RACER's acceptance statistics.

    Attributes (besides ``sequences``, ``scores`` and ``past_key_values``):
        accepted_lengths: per verify step, the accepted length ``a`` (drafts accepted, root
            excluded).
        tree_sizes: per verify step, the draft-tree nodes fed to the target.
        mean_accepted_tokens: MAT, the mean of ``a + 1`` over verify steps (NaN without steps).
        timings: seconds per phase, as :attr:`racer_ref.GenerationResult.timings`.
    """

    accepted_lengths: Optional[List[int]] = None
    tree_sizes: Optional[List[int]] = None
    mean_accepted_tokens: Optional[float] = None
    timings: Optional[Dict[str, float]] = None


#: The output's KV-cache field: ``cache`` in transformers 5, ``past_key_values`` before.
_CACHE_FIELD = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"

#: generate() settings racer_decoding cannot honour, with the value each must keep.
_REFUSED_CONFIG = {
    "num_beams": 1, "num_return_sequences": 1, "output_attentions": False, "output_hidden_states": False,
    "output_logits": False, "prompt_lookup_num_tokens": None, "assistant_early_exit": None,
    "penalty_alpha": None, "dola_layers": None, "token_healing": False,
}

#: model kwargs that transformers prepares for its own loop and that we may leave aside.
_PREPARED_KWARGS = ("attention_mask", "position_ids", "logits_to_keep", "use_cache", "cache",
                    "past_key_values", "cache_position")


class _AfterPrompt:
    """A streamer that ignores its first ``put``: transformers has already sent it the prompt."""

    def __init__(self, streamer: Any) -> None:
        self.streamer, self.first = streamer, True

    def put(self, value: torch.Tensor) -> None:
        if self.first:
            self.first = False
            return
        self.streamer.put(value)

    def end(self) -> None:
        self.streamer.end()


def _keep_tokenizer_for_racer_decoding() -> None:
    """Let ``generate(stop_strings=..., tokenizer=tok, custom_generate=racer_decoding)`` work.

    transformers 5 sets ``generate()``'s ``tokenizer`` aside and then, for a callable
    ``custom_generate``, keeps only that callable's own keywords, so the tokenizer is lost
    before transformers builds its stop-string criterion ("could not locate a tokenizer").
    We wrap ``GenerationMixin._extract_generation_mode_kwargs`` once to put the tokenizer
    back for :func:`racer_decoding` (or a ``functools.partial`` of it) only; every other
    call is unchanged. transformers versions without that method need nothing.
    """
    original = getattr(GenerationMixin, "_extract_generation_mode_kwargs", None)
    if original is None or getattr(original, "racer_keeps_tokenizer", False):
        return

    @functools.wraps(original)
    def extract(self: Any, custom_generate: Any, kwargs: Dict[str, Any], *args: Any, **kw: Any) -> Dict[str, Any]:
        tokenizer = kwargs.get("tokenizer")
        out = original(self, custom_generate, kwargs, *args, **kw)
        if tokenizer is not None and racer_decoding in (custom_generate, getattr(custom_generate, "func", None)):
            out.setdefault("tokenizer", tokenizer)
        return out

    extract.racer_keeps_tokenizer = True  # type: ignore[attr-defined]
    GenerationMixin._extract_generation_mode_kwargs = extract  # type: ignore[method-assign]


def _generate_frame_locals() -> Dict[str, Any]:
    """The local variables of the ``GenerationMixin.generate`` call that called us, if it did.

    transformers 5.x hands a callable ``custom_generate`` neither the ``streamer`` (it has
    already sent it the prompt) nor the ``assistant_model``; they are still local variables
    of ``generate()``, one frame up. Without that frame (a direct call) nothing is found.
    """
    frame = sys._getframe(2)  # 0: this function, 1: racer_decoding, 2: its caller
    code = frame.f_code
    if code.co_name == "generate" and code.co_filename.replace("\\", "/").endswith("generation/utils.py"):
        return dict(frame.f_locals)
    return {}


def _refuse(model: Any, input_ids: torch.Tensor, generation_config: Any, model_kwargs: Dict[str, Any],
            synced_gpus: bool, caller: Dict[str, Any]) -> None:
    """``ValueError`` naming the first setting we cannot honour; nothing done yet."""
    if getattr(model.config, "is_encoder_decoder", False):
        raise ValueError("racer_decoding: encoder-decoder models are not supported; use a decoder-only causal LM")
    if caller.get("assistant_model") is not None:
        raise ValueError("assistant_model: racer_decoding drafts with RACER, not with an assistant model")
    if synced_gpus:
        raise ValueError("synced_gpus: racer_decoding runs on one process")
    for name, allowed in _REFUSED_CONFIG.items():
        value = getattr(generation_config, name, allowed)
        if value not in (allowed, None, 0, False):
            raise ValueError(f"{name}={value!r}: not supported by racer_decoding (it needs {allowed!r})")
    if getattr(generation_config, "cache_implementation", None) not in (None, "dynamic"):
        raise ValueError(f"cache_implementation={generation_config.cache_implementation!r}: racer_decoding keeps "
                         "the accepted tree path in a DynamicCache; leave cache_implementation unset")
    # (after num_beams and num_return_sequences, which transformers turns into a batch)
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"racer_decoding: batch size 1 only; got input_ids of shape {tuple(input_ids.shape)}")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise ValueError("attention_mask: padding is not supported by racer_decoding (batch size 1, no padding)")
    for name in ("cache", "past_key_values"):
        cache = model_kwargs.get(name)
        if cache is not None and (not hasattr(cache, "get_seq_length") or cache.get_seq_length() != 0):
            raise ValueError(f"{name}: racer_decoding starts from an empty cache (it prefills the prompt itself)")
    others = sorted(k for k, v in model_kwargs.items() if k not in _PREPARED_KWARGS and v is not None)
    if others:
        raise ValueError(f"racer_decoding: model inputs {others} are not supported (token ids only)")


def racer_decoding(
    model: Any,
    input_ids: torch.LongTensor,
    logits_processor: Any,
    stopping_criteria: Any,
    generation_config: Any,
    synced_gpus: bool = False,
    streamer: Any = None,
    method: Optional[str] = None,
    backend: Optional[str] = None,
    drafter: Any = None,
    observe_rejected: Optional[bool] = None,
    probe: Optional[bool] = None,
    tokenizer: Any = None,
    **model_kwargs: Any,
) -> Any:
    """RACER decoding for ``model.generate(custom_generate=racer_decoding)``.

    transformers calls it with what it prepared; the drafter settings are keyword arguments
    of ``model.generate`` (see :func:`racer_ref.generate` for their meaning): ``method``,
    ``backend``, ``drafter``, ``observe_rejected``, ``probe`` and each drafter parameter of
    :data:`racer_ref.drafter.DRAFTER_PARAMETERS` (in the signature, taken from ``model_kwargs``).

    Args:
        model: the transformers causal LM (decoder-only, full attention).
        input_ids: ``(1, P)`` int64 prompt ids.
        logits_processor: transformers' ``LogitsProcessorList`` (repetition penalty,
            top-k, ... and with ``do_sample`` the sampling warpers), applied to every
            draft-tree node with its own prefix.
        stopping_criteria: transformers' ``StoppingCriteriaList`` (``max_length``, EOS,
            ``max_time``, stop strings, yours), asked after every new token.
        generation_config: the prepared ``GenerationConfig``; ``do_sample`` picks lossless
            sampling (from the processed scores) or greedy decoding (their argmax).
        streamer: a transformers streamer; it gets each accepted block.
        tokenizer: ``generate()``'s ``tokenizer``; transformers has already built the
            stop-string criterion in ``stopping_criteria`` with it.

    Returns:
        ``(1, P + N)`` int64 on ``input_ids``' device, as ``model.generate``; with
        ``return_dict_in_generate=True`` a :class:`RacerDecoderOnlyOutput` (``scores``
        with ``output_scores=True``: the processed scores that chose each new token,
        ``(1, vocab)`` float32 each; ``cache`` (``past_key_values`` before transformers 5)
        the KV cache: the prompt and all new tokens but the last).

    Raises:
        ValueError: a setting that cannot be honoured, named: batch size > 1, ``num_beams``
            > 1, ``num_return_sequences`` > 1, an ``assistant_model``,
            ``prompt_lookup_num_tokens``, ``output_attentions`` / ``output_hidden_states`` /
            ``output_logits``, padding in ``attention_mask``, a non-empty or non-dynamic
            cache, model inputs other than token ids, an encoder-decoder model, and a logits
            processor that cannot be applied per node (:data:`racer_ref.integrations.processing.REFUSED`).
            Raised before any forward pass.
    """
    caller = _generate_frame_locals()
    parameters = {name: model_kwargs.pop(name) for name in DRAFTER_PARAMETERS if name in model_kwargs}
    if streamer is None and caller.get("streamer") is not None:
        streamer = _AfterPrompt(caller["streamer"])  # transformers 5.x: it has seen the prompt
    elif streamer is not None:
        streamer = _AfterPrompt(streamer)  # transformers 4.56 passes it after sending the prompt
    _refuse(model, input_ids, generation_config, model_kwargs, synced_gpus, caller)
    prompt_length = input_ids.shape[1]
    max_new_tokens = max(int(generation_config.max_length) - prompt_length, 0)
    want_dict = bool(generation_config.return_dict_in_generate)
    keep_scores = want_dict and bool(generation_config.output_scores)
    scores: List[torch.Tensor] = []

    def stop(ids: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        """transformers' criteria, asked after each new token (its scores kept if asked).

        As transformers' own loop, the criteria get the scores so far (a tuple) with
        ``output_scores`` and ``None`` without."""
        if keep_scores:
            scores.append(row.to(torch.float32))
        return stopping_criteria(ids.to(input_ids.device), tuple(scores) if keep_scores else None)

    # The drafter settings given (None: racer_ref.generate's default, or the drafter's own).
    settings = {name: value for name, value in dict(
        method=method, backend=backend, drafter=drafter, observe_rejected=observe_rejected, probe=probe,
        **parameters).items() if value is not None}
    cache = make_cache(model, None)  # kept for the output's past_key_values
    result = generate(
        model, prompt=input_ids[0], max_new_tokens=max_new_tokens,
        temperature=1.0 if generation_config.do_sample else 0.0,  # the warpers are in logits_processor
        eos_token_id=[],  # EOS is one of transformers' stopping criteria
        streamer=streamer, cache=cache, logits_processor=logits_processor, stopping_criteria=stop, **settings,
    )
    new = torch.tensor(result.token_ids, dtype=torch.long, device=input_ids.device)  # (N,)
    sequences = torch.cat([input_ids, new[None]], dim=1)  # (1, P + N)
    if not want_dict:
        return sequences
    return RacerDecoderOnlyOutput(
        sequences=sequences,
        scores=tuple(scores) if keep_scores else None,
        **{_CACHE_FIELD: cache if generation_config.use_cache else None},
        accepted_lengths=list(result.accepted_lengths),
        tree_sizes=list(result.tree_sizes),
        mean_accepted_tokens=result.mean_accepted_tokens,
        timings=dict(result.timings),
    )


# The drafter parameters stand in the signature (transformers passes the keys it names through).
_signature = inspect.signature(racer_decoding)
_parameters = list(_signature.parameters.values())
racer_decoding.__signature__ = _signature.replace(parameters=[  # type: ignore[attr-defined]
    *_parameters[:-1], *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in DRAFTER_PARAMETERS),
    _parameters[-1]])  # **model_kwargs last

_keep_tokenizer_for_racer_decoding()
