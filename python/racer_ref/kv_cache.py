"""A KV cache layer that writes new entries in place instead of re-concatenating.

transformers' ``DynamicLayer`` appends a forward pass's keys and values with ``torch.cat``,
which copies the *whole* cache of that layer every time. Speculative decoding appends every
step and then cuts the rejected nodes off again (:func:`racer_ref.verify.keep_accepted`), so
each verify pass pays for a full copy of the cache in every layer: for SmolLM2-135M at 400
cached tokens that is 18 MB per pass, 1-4% of a CPU verify pass (measured with
``benchmarks/bench_capacity.py --cache both``).

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

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Append ``(batch, kv_heads, n, head_dim)`` keys and values; return all of them.

        Returns:
            ``(keys, values)``, each ``(batch, kv_heads, length + n, head_dim)``, views of the
            buffers (not contiguous across heads once the buffer has spare slots).
        """
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        n = key_states.shape[-2]
        if length + n > (0 if self._key_buffer is None else self._key_buffer.shape[-2]) or (
            length and not self._views_of_buffers()
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
    if config is None:
        raise TypeError(f"model: expected a transformers model with a config, got {type(model).__name__}")
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
