"""Optional speed-ups: same outputs, less time. A student can skip this whole folder.

The decoding loop (:mod:`racer_ref.decoding`) and the verification functions
(:mod:`racer_ref.verify`) are complete without anything here; each module below makes one
part of a step cheaper and says where it plugs in:

* :mod:`racer_ref.speedups.kv_cache`: a KV-cache layer that writes new entries in place
  instead of re-concatenating the whole cache per verify pass. Plugs in where
  ``generate()`` makes its cache (no ``cache=`` given) for a model that ``speed_up_model``
  prepared, or as ``cache=growing_cache(model)``; outputs bit-identical.
* :mod:`racer_ref.speedups.attention`: grouped-query tree attention without copying the
  KV cache per query head (CPU). Plugs in as a transformers attention implementation
  (``use_sdpa_gqa(model)``, ``racer-ref --attn``).
* :mod:`racer_ref.speedups.cpu_kernels`: on a CPU, the linear kernels (PyTorch's stock,
  oneDNN prepacked, MKL packed) timed on the loaded model and chosen per call shape, and a
  direct forward for Llama-like models without transformers' per-layer overhead. Plugs in on
  the model (``speed_up_model(model)``, ``racer-ref --cpu-kernels``), with the KV cache above.
* :mod:`racer_ref.speedups.compiled`: on a CPU, the passes of chosen sizes compiled by
  inductor with the weights frozen (its own C++ matrix kernels), built once per machine with
  AOTInductor (:mod:`racer_ref.speedups.compiled_cache`: a few minutes the first time, seconds
  to load after). Plugs in on the direct forward (``load_or_compile(model, sizes)``,
  ``racer-ref --compile auto``, the default; ``racer_ref.generate`` loads what is cached).
* :mod:`racer_ref.speedups.capacity`: ``--capacity auto``, a drafter wrapper that picks the
  draft-tree capacity giving the most tokens per second. Plugs in as the ``drafter=``
  argument of ``generate()`` (it wraps a ``racer_ref.Drafter``).

Nothing in the loop imports this package (the boundary, :mod:`racer_ref.options`, and the
drafting it makes, :func:`racer_ref.drafter.make_drafting`, plug each part in when it is asked for); everything here may import the loop, never the other way round.
"""
