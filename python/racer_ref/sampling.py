"""The target distribution for sampled decoding: temperature, then top-p (nucleus).

We reuse transformers' own logits warpers so that "plain sampling from the target" means
exactly what ``model.generate(do_sample=True, temperature=..., top_p=..., top_k=0)`` means.
The lossless acceptance rule that consumes these distributions is
:func:`racer_ref.verify.accept_sampling` (docs/explanation/spec.md, "Sampling"); the
arguments are checked at the boundary by :func:`check_sampling_arguments`, this module's rule.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional

import torch
from transformers import TemperatureLogitsWarper, TopPLogitsWarper

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


def target_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Turn logits into the distribution that sampling draws from.

    Args:
        logits: ``(n, vocab)`` raw logits of any float dtype.
        temperature: > 0; the logits are divided by it.
        top_p: keep the smallest set of most likely tokens whose mass reaches ``top_p``
            (1.0 keeps everything).

    Returns:
        ``(n, vocab)`` float32 probabilities; each row sums to 1.
    """
    if temperature <= 0:
        raise ValueError(f"temperature: expected > 0 for sampling, got {temperature!r}")
    scores = logits.float()  # (n, vocab)
    # Shift each row so that its maximum is 0 (softmax and top-p do not change): dividing
    # by a tiny temperature then gives 0 and -inf, never +inf - inf = NaN.
    scores = scores - scores.max(dim=-1, keepdim=True).values  # (n, vocab), <= 0
    if temperature != 1.0:
        scores = TemperatureLogitsWarper(float(temperature))(None, scores)  # (n, vocab)
    if top_p < 1.0:
        scores = TopPLogitsWarper(float(top_p))(None, scores)  # (n, vocab), -inf outside the nucleus
    return torch.softmax(scores, dim=-1)  # (n, vocab)


def sample(probs: torch.Tensor, generator: Optional[torch.Generator] = None) -> int:
    """Draw one token id from a ``(vocab,)`` distribution with a CPU ``generator``."""
    return int(torch.multinomial(probs.float().cpu(), 1, generator=generator))
