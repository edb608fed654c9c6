"""Tree attention for grouped-query models without copying the KV cache (CPU speed-up).

Why this exists
---------------
Most current small models use *grouped-query attention* (GQA): several query heads share one
key/value head (SmolLM2-135M: 9 query heads, 3 key/value heads). A verify pass gives the
attention layers a 4-D tree mask (:func:`racer_ref.verify.tree_attention_bias`). With a mask,
transformers' ``"sdpa"`` attention does not ask PyTorch's kernel to handle the groups itself
(on CUDA that would fall back to a slow kernel); instead it *copies* every layer's cached keys
and values once per query head in the group (``repeat_kv``): for SmolLM2 that is three times
the whole cache, in every layer, on every verify pass. One-token decoding is not affected
(transformers folds the group into the query axis there).

On a CPU, PyTorch's ``scaled_dot_product_attention(..., enable_gqa=True)`` takes the mask and
the groups directly. Measured on a 2-core VM (one layer, 9/3 heads of 64, float mask, 600
cached tokens): 12 tree tokens 565 -> 230 us, 32 tokens 918 -> 625 us; a whole SmolLM2 verify
pass of 4-16 tokens 3-11% faster (``benchmarks/bench_capacity.py --attn both``).

What it does
------------
:func:`sdpa_gqa_attention_forward` is registered with transformers' ``AttentionInterface``
under the name ``"sdpa_gqa"`` (and ``sdpa``'s mask builder with ``AttentionMaskInterface``),
so a model switches to it with ``model.set_attn_implementation("sdpa_gqa")`` or
:func:`use_sdpa_gqa`. It calls PyTorch's kernel with ``enable_gqa=True`` only where that is
the faster path (CPU tensors, a mask, more than one query, a grouped model, no dropout, no
extra position bias or soft-capping) and hands every other call, unchanged, to transformers'
own ``sdpa_attention_forward``. The arithmetic is the same attention: outputs agree with
``"sdpa"`` to float rounding (tested), and greedy decoding is unchanged.
:func:`prepare_cpu_attention` is what ``generate()`` does with it on a CPU (once per model).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Optional, Tuple

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

#: The name under which the attention function is registered with transformers.
SDPA_GQA = "sdpa_gqa"

def _has_enable_gqa() -> bool:
    """Whether this PyTorch's SDPA takes ``enable_gqa`` (added in 2.5; older: always fall back)."""
    try:
        return "enable_gqa" in inspect.signature(torch.nn.functional.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):  # a builtin without a signature: probe it
        q = torch.zeros(1, 2, 1, 4)
        kv = torch.zeros(1, 1, 1, 4)
        try:
            torch.nn.functional.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
        except TypeError:
            return False
        return True


def sdpa_gqa_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    is_causal: Optional[bool] = None,
    **kwargs: Any,
) -> Tuple[torch.Tensor, None]:
    """One attention layer, transformers' ``AttentionInterface`` signature.

    Args:
        module: the attention layer (read: ``num_key_value_groups``).
        query: ``(batch, heads, q, head_dim)``.
        key, value: ``(batch, kv_heads, kv, head_dim)``; ``heads = kv_heads * groups``.
        attention_mask: ``(batch or 1, 1, q, kv)`` additive float or bool mask, or ``None``.
        dropout, scaling, is_causal, kwargs: as for transformers' ``sdpa_attention_forward``.

    Returns:
        ``((batch, q, heads, head_dim) contiguous output, None)``, like ``"sdpa"``.
    """
    groups = getattr(module, "num_key_value_groups", 1)
    if (
        groups > 1
        and query.shape[2] > 1
        and attention_mask is not None
        and query.device.type == "cpu"
        and not dropout
        and kwargs.get("position_bias") is None
        and kwargs.get("softcap") is None
        and not kwargs.get("output_attentions", False)
        and _ENABLE_GQA
    ):
        # The kernel reads query head h against key/value head h // groups: no copies.
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=0.0, scale=scaling, enable_gqa=True
        )  # (batch, heads, q, head_dim)
        return out.transpose(1, 2).contiguous(), None  # (batch, q, heads, head_dim)
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
    )


_ENABLE_GQA = _has_enable_gqa()


def register() -> None:
    """Register ``"sdpa_gqa"`` with transformers (idempotent): the attention function, and
    ``"sdpa"``'s mask builder for the calls where transformers builds the mask itself."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(SDPA_GQA, sdpa_gqa_attention_forward)
    AttentionMaskInterface.register(SDPA_GQA, sdpa_mask)


def use_sdpa_gqa(model: Any) -> bool:
    """Switch ``model`` from ``"sdpa"`` to ``"sdpa_gqa"`` attention where that can help.

    It switches only a model whose config says ``"sdpa"`` and that groups its query heads
    (``num_key_value_heads < num_attention_heads``); any other model is left as it is.

    Args:
        model: a transformers causal LM.

    Returns:
        ``True`` if the model now uses ``"sdpa_gqa"`` (also when it already did).

    Raises:
        TypeError: ``model`` has no transformers ``config``.
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation") or not hasattr(model, "set_attn_implementation"):
        raise TypeError(f"model: expected a transformers model with a config, got {type(model).__name__}")
    current = config._attn_implementation
    if current == SDPA_GQA:
        return True
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if current != "sdpa" or not heads or not kv_heads or kv_heads >= heads or not _ENABLE_GQA:
        return False
    register()
    model.set_attn_implementation(SDPA_GQA)
    return model.config._attn_implementation == SDPA_GQA


def prepare_cpu_attention(model: Any) -> None:
    """What ``generate()`` does to a model on a CPU before its first verify pass (after every
    argument is checked): a grouped-query model on ``"sdpa"`` switches to ``"sdpa_gqa"``
    (:func:`use_sdpa_gqa`: the same attention, to float rounding, without ``repeat_kv``'s
    copy of the KV cache per layer on every tree pass), then a real float32 model gets the CPU
    fast path (:func:`racer_ref.speedups.cpu_kernels.speed_up_by_default`, once per model, one
    ``racer_ref`` log line). Neither for a model that ``speed_up_model`` prepared (its attention
    is chosen), nor with ``$RACER_REF_CPU_KERNELS=off`` or ``model.racer_cpu_kernels_off = True``
    (the command line's ``--cpu-kernels off``). Sets ``model.racer_cpu_checked`` so that a later
    call skips it, unless the model is still on ``"sdpa"``."""
    from racer_ref.speedups.cpu_kernels import speed_up_by_default, switched_off

    if switched_off() or getattr(model, "racer_cpu_kernels_off", False):  # (the CLI's --cpu-kernels off)
        return
    # A model prepared by speed_up_model (the command line, the demo, the user) has its attention chosen.
    prepared = getattr(model, "racer_cpu_kernels", None) is not None
    sdpa = getattr(model.config, "_attn_implementation", None) == "sdpa"
    if sdpa and not prepared and hasattr(model, "set_attn_implementation"):
        use_sdpa_gqa(model)  # only a grouped-query model; others are left as they are
    if not prepared:
        from racer_ref.speedups.compiled import load_cached_passes

        # a real float32 model: measured kernels, a direct forward, compiled passes if cached
        speed_up_by_default(model, also=load_cached_passes)
    # A later call with this model skips all this, unless it is still on sdpa (not grouped-query).
    with contextlib.suppress(AttributeError, TypeError):  # (a model that takes no attributes: checked every call)
        model.racer_cpu_checked = getattr(model.config, "_attn_implementation", None) != "sdpa"
