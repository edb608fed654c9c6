"""A KV cache layer that writes new entries in place instead of re-concatenating.

transformers' ``DynamicLayer`` appends a forward pass's keys and values with ``torch.cat``,
which copies the *whole* cache of that layer every time. Speculative decoding appends every
step and then cuts the rejected nodes off again (:func:`racer_ref.verify.keep_accepted`), so
each verify pass pays for a full copy of the cache in every layer: for SmolLM2-135M at 400
cached tokens that is 18 MB per pass, 1-4% of a CPU verify pass (``benchmarks/bench_capacity.py``:
its ``ours`` variant writes in place, ``hf`` appends).

``generate()`` makes its cache from these layers for a model prepared by ``speed_up_model``
(:func:`racer_ref.verify.make_cache`); pass ``cache=growing_cache(model)`` to have them
without it.

:class:`GrowingLayer` keeps each layer's keys and values at the front of a larger buffer and
writes the new entries into the free slots behind them; ``keys``/``values`` are views of the
filled part, so everything that reads or slices them (attention, :func:`keep_accepted`,
``crop``) works as before. When the buffer is full it is replaced by one twice the size
(amortised O(1) per token, like a Python list). The numbers in the cache are the same as with
``DynamicLayer``: outputs are bit-identical (tested).
"""

from __future__ import annotations

from typing import Any, Tuple

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

#: The smallest buffer a layer allocates, in tokens.
MIN_SLOTS = 256


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``keys``/``values`` are views of a preallocated buffer.

    Attributes:
        keys, values: ``(batch, kv_heads, length, head_dim)`` views of the buffers (as in
            ``DynamicLayer``); assigning a shorter view of them (cropping) is allowed, and
            assigning any other tensor makes the next :meth:`update` copy it into a new buffer.

    Unlike ``DynamicLayer``, the tensors it returns share memory with the cache: after a crop,
    the next update writes over the slots that an earlier returned tensor still shows (as
    with transformers' ``StaticCache``). Clone what you want to keep. Calls that autograd
    records (grad enabled, inputs that require grad) take ``DynamicLayer``'s path, since
    autograd must keep each pass's tensors unchanged; so do appends whose batch, heads, head
    size, dtype or device differ from the entries already cached (``torch.cat``'s error).
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._key_buffer = None  # (batch, kv_heads, slots, head_dim), allocated on first update
        self._value_buffer = None

    def _views_of_buffers(self) -> bool:
        """Whether ``keys``/``values`` still start at the front of the buffers, with their strides."""
        kb, vb = self._key_buffer, self._value_buffer
        return (
            kb is not None
            and self.keys.data_ptr() == kb.data_ptr()
            and self.values.data_ptr() == vb.data_ptr()
            and self.keys.stride() == kb.stride()
            and self.values.stride() == vb.stride()
            and self.keys.shape[:2] == kb.shape[:2]
        )

    @staticmethod
    def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
        """Same batch, heads, head size, dtype and device (the length may differ)."""
        sa, sb = a.shape, b.shape
        return sa[0] == sb[0] and sa[1] == sb[1] and sa[3] == sb[3] and a.dtype == b.dtype and a.device == b.device

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Append ``(batch, kv_heads, n, head_dim)`` keys and values; return all of them.

        Returns:
            ``(keys, values)``, each ``(batch, kv_heads, length + n, head_dim)``, views of the
            buffers (not contiguous across heads once the buffer has spare slots).

        Raises:
            RuntimeError: as ``DynamicLayer`` (``torch.cat``) does, when the new entries do not
                fit the cached ones; the cache is then unchanged.
        """
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        recorded = (key_states.requires_grad or value_states.requires_grad) and torch.is_grad_enabled()
        fits = length == 0 or (self._same_layout(self.keys, key_states) and self._same_layout(self.values, value_states))
        if recorded or not fits:
            # DynamicLayer's path: a fresh tensor per pass (or torch.cat's error, before any change).
            keys, values = super().update(key_states, value_states, *args, **kwargs)
            self._key_buffer = self._value_buffer = None  # the next plain update adopts these
            return keys, values
        n = key_states.shape[-2]
        kb = self._key_buffer
        if (
            kb is None
            or length + n > kb.shape[-2]
            or not (self._views_of_buffers() if length else self._same_layout(kb, key_states))
            or (kb.is_inference() and not torch.is_inference_mode_enabled())  # not writable here
        ):
            # New buffers: twice what is needed now, with the entries so far at the front.
            slots = max(2 * (length + n), MIN_SLOTS)
            key_buffer = key_states.new_empty(key_states.shape[:2] + (slots, key_states.shape[-1]))
            value_buffer = value_states.new_empty(value_states.shape[:2] + (slots, value_states.shape[-1]))
            if length:
                key_buffer[:, :, :length] = self.keys
                value_buffer[:, :, :length] = self.values
            self._key_buffer, self._value_buffer = key_buffer, value_buffer
        self._key_buffer[:, :, length:length + n] = key_states
        self._value_buffer[:, :, length:length + n] = value_states
        self.keys = self._key_buffer[:, :, :length + n]
        self.values = self._value_buffer[:, :, :length + n]
        return self.keys, self.values

    def offload(self) -> None:
        """Move the entries to the CPU and free the buffers (the next update makes new ones)."""
        super().offload()
        if self.is_initialized:
            self._key_buffer = self._value_buffer = None

    def reset(self) -> None:
        """Forget the entries and the buffers (the next update starts afresh)."""
        super().reset()
        self._key_buffer = self._value_buffer = None


def growing_cache(model: Any) -> DynamicCache:
    """An empty ``DynamicCache`` for ``model`` whose plain full-attention layers are
    :class:`GrowingLayer` (other layer kinds, such as sliding-window layers, stay as they are).

    Raises:
        TypeError: ``model`` has no transformers ``config``.
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "get_text_config"):
        raise TypeError(f"model: expected a transformers model with a config, got {type(model).__name__}")
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
