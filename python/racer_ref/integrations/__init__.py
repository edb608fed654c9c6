"""Integrations: RACER inside other libraries' loops, and drafters built on the core.

* ``hf``: ``racer_decoding``, RACER inside ``model.generate(custom_generate=...)`` (transformers);
* ``processing``: transformers logits processors applied to every draft-tree node;
* ``vllm``: RACER as a vLLM speculative proposer (and the ``vllm.general_plugins`` entry point);
* ``chain``: ``ChainDrafter``, the best chain of a draft tree (for engines that verify chains).

The decoding loop (:mod:`racer_ref.decoding`) imports none of them; ``generate()`` loads
``processing`` only when there are logits processors to apply.
"""
