"""The benchmark and command-line harness: models, prompts, baselines, benchmarks, traces.

Serves the ``racer-ref`` command line and the benchmark scripts; it calls
:func:`racer_ref.generate` and nothing in the decoding loop imports it.

* :mod:`racer_ref.harness.models`: load the default model (SmolLM2-135M-Instruct) or a local
  Hugging Face model, offline.
* :mod:`racer_ref.harness.datasets`: prompts of the benchmark sets (Spec-Bench, HumanEval, ...).
* :mod:`racer_ref.harness.baselines`: ``model.generate`` baselines (greedy, prompt lookup)
  and forward-pass counting.
* :mod:`racer_ref.harness.bench`: the runner behind ``racer-ref bench``.
* :mod:`racer_ref.harness.trace`: per-step draft trees, drawn for the terminal, HTML or a picture.
* :mod:`racer_ref.harness.load`: the load average and the busy-machine warning printed with
  every timing (the demo, ``racer-ref generate``, tutorial 08).
"""
