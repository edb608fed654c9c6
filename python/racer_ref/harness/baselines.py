"""Peers measured through transformers' own ``model.generate``: ``hf-greedy`` and ``hf-pld``.

``hf-greedy`` is plain greedy decoding (``do_sample=False``); ``hf-pld`` is transformers'
prompt lookup decoding (``prompt_lookup_num_tokens=10, max_matching_ngram_size=2``), the PLD
peer named in docs/explanation/spec.md ("Peers to measure against").

To make their numbers comparable with ours we count the model's forward calls with a hook on
``model.forward``: the first call is the prefill, every later call is one **step**. From the
KV-cache length seen at the start of consecutive steps we recover each step's tokens per step
``a + 1`` (for ``hf-greedy`` always 1), so MAT is defined exactly as for RACER
(docs/explanation/spec.md, "Terms": mean of ``a + 1`` over all decoding steps).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

from racer_ref.metrics import mean_accepted_tokens

#: Methods implemented here.
HF_METHODS = ("hf-greedy", "hf-pld")


@dataclass
class BaselineResult:
    """What a ``model.generate`` baseline produced; same field names as ``GenerationResult``.

    Attributes:
        token_ids: the new tokens (list of int), EOS included when generation stopped on it.
        text: ``token_ids`` decoded (special tokens skipped).
        accepted_lengths: per step (forward call after the prefill), draft tokens accepted
            (``a``, root excluded); the last step is clipped to ``max_new_tokens``.
        mean_accepted_tokens: MAT (:func:`racer_ref.metrics.mean_accepted_tokens`; NaN
            when there are no steps).
        timings: seconds: ``prefill`` (first forward), ``forward`` (later forwards),
            ``other`` (everything else inside ``model.generate``), ``total``.
        steps: number of forward calls after the prefill.
    """

    token_ids: List[int]
    text: str
    accepted_lengths: List[int]
    mean_accepted_tokens: float
    timings: Dict[str, float] = field(default_factory=dict)
    steps: int = 0


def sync(model: Any) -> None:
    """Wait for ``model``'s CUDA device (nothing elsewhere), so that a timer reads finished work."""
    device = getattr(model, "device", None)
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.synchronize(device)


class ForwardCounter:
    """Counts and times ``model.forward`` calls and records the cache length at each.

    Use as a context manager around ``model.generate``::

        with ForwardCounter(model) as fc:
            out = model.generate(...)
        fc.calls          # [(n_input_tokens, cached_tokens_before, seconds), ...]
    """

    def __init__(self, model: Any):
        self.model = model
        self.calls: List[List[float]] = []
        self._handles: List[Any] = []
        self._t0 = 0.0

    def _pre(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        n_in = int(ids.shape[-1]) if ids is not None else int(kwargs["inputs_embeds"].shape[1])
        cache = kwargs.get("past_key_values", kwargs.get("cache"))  # transformers 4 / 5
        cached = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else -1
        if cached < 0:  # no cache object: fall back on cache_position / position_ids
            pos = kwargs.get("cache_position")
            if pos is None:
                pos = kwargs.get("position_ids")
            cached = int(pos.reshape(-1)[0]) if pos is not None else 0
        sync(self.model)
        self._t0 = time.perf_counter()
        self.calls.append([n_in, cached, 0.0])

    def _post(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        sync(self.model)
        self.calls[-1][2] = time.perf_counter() - self._t0

    def __enter__(self) -> "ForwardCounter":
        self.calls = []
        self._handles = [
            self.model.register_forward_pre_hook(self._pre, with_kwargs=True),
            self.model.register_forward_hook(self._post, with_kwargs=True),
        ]
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def tokens_per_step(calls: Sequence[Sequence[float]], prompt_length: int, new_tokens: int) -> List[int]:
    """Tokens per step ``a + 1`` of each forward call after the prefill.

    Step ``i`` starts with ``start_i`` tokens cached (every committed token but the newest);
    it commits ``start_{i+1} - start_i`` tokens. The last step commits the rest, up to
    ``prompt_length + new_tokens`` committed tokens (so clipping to ``max_new_tokens`` and
    stopping at EOS are respected). Tokens the prefill call itself produced (one, or more
    when transformers verifies candidates in the same call) belong to no step.
    """
    starts = []
    for c in calls[1:]:
        # A call that starts below the one before recomputes the cache (Phi-3's LongRoPE switch:
        # generate drops it and runs the whole sequence again): it commits one token.
        starts.append(int(c[1]) if not starts or int(c[1]) >= starts[-1] else starts[-1] + 1)
    out = [b - a for a, b in zip(starts, starts[1:])]
    if starts:
        out.append(max(1, prompt_length + new_tokens - 1 - starts[-1]))
    return out


def hf_generate(
    model: Any,
    tokenizer: Any,
    prompt: Union[Sequence[int], Any],
    max_new_tokens: int = 128,
    method: str = "hf-greedy",
    eos_token_id: Optional[Union[int, List[int]]] = None,
    prompt_lookup_num_tokens: int = 10,
    max_matching_ngram_size: int = 2,
) -> BaselineResult:
    """Greedy generation with ``model.generate`` (``hf-greedy``) or with its prompt lookup
    decoding (``hf-pld``), counting forward calls.

    Args:
        model: a Hugging Face causal LM (batch size 1).
        tokenizer: its tokenizer (for ``text`` only).
        prompt: token ids (a sequence of int or a 1-D / (1, L) tensor); chat templates are the
            caller's business (:func:`racer_ref.harness.datasets.encode_prompt`).
        max_new_tokens: >= 1.
        method: ``"hf-greedy"`` or ``"hf-pld"``.
        eos_token_id: stop token(s); default: the model's generation config.
        prompt_lookup_num_tokens, max_matching_ngram_size: ``hf-pld`` settings (tokens copied
            per step, longest n-gram matched).

    Returns:
        :class:`BaselineResult`.

    Raises:
        ValueError: unknown ``method``, ``max_new_tokens`` < 1, or an empty prompt.
    """
    import torch

    if method not in HF_METHODS:
        raise ValueError(f"method: expected one of {', '.join(HF_METHODS)}, got {method!r}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an integer >= 1, got {max_new_tokens!r}")
    ids = torch.as_tensor(prompt, dtype=torch.long).reshape(1, -1).to(model.device)  # (1, L)
    if ids.shape[1] == 0:
        raise ValueError("prompt: expected at least one token")
    kwargs: Dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=False,
                                  num_beams=1, temperature=None, top_p=None, top_k=None)
    if eos_token_id is not None:
        kwargs["eos_token_id"] = eos_token_id
    pad = model.generation_config.pad_token_id
    if pad is None:
        pad = eos_token_id if isinstance(eos_token_id, int) else model.generation_config.eos_token_id
        if isinstance(pad, list):
            pad = pad[0]
    kwargs["pad_token_id"] = pad
    if method == "hf-pld":
        kwargs.update(prompt_lookup_num_tokens=prompt_lookup_num_tokens,
                      max_matching_ngram_size=max_matching_ngram_size)
    counter = ForwardCounter(model)
    t0 = time.perf_counter()
    with counter, torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)  # (1, L + new)
    sync(model)
    total = time.perf_counter() - t0
    new = [int(t) for t in out[0, ids.shape[1]:].tolist()]
    per_step = tokens_per_step(counter.calls, ids.shape[1], len(new))
    accepted = [max(0, k - 1) for k in per_step]
    prefill = counter.calls[0][2] if counter.calls else 0.0
    fwd = sum(c[2] for c in counter.calls[1:])
    return BaselineResult(
        token_ids=new,
        text=tokenizer.decode(new, skip_special_tokens=True),
        accepted_lengths=accepted,
        mean_accepted_tokens=mean_accepted_tokens(accepted),
        timings={"prefill": prefill, "forward": fwd, "other": max(0.0, total - prefill - fwd),
                 "total": total},
        steps=len(per_step),
    )
