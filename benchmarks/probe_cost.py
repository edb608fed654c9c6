"""Benchmark: what the exactness probe (racer_ref.exactness) costs, against a 128-token decode.

Before a model object's first verify pass ``racer_ref.generate`` probes it once: a 4-token
prefill, a 6-node tree pass and one-token passes along one path (5 small forward passes). The
issue's bound is 5% of a 128-token RACER decode of the default model. This script loads the
default model (SmolLM2-135M-Instruct, fp32, CPU, stock kernels as a plain Python user has
them), then alternates, ``--rounds`` times: one probe (``make_plan`` on a fresh key) and one
128-token greedy RACER decode with ``probe=False`` (so that the decode itself holds no probe),
and prints the median of each, their ratio, the CPU and the load average before and after.

    .venv/bin/python benchmarks/probe_cost.py
    .venv/bin/python benchmarks/probe_cost.py --rounds 7 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from racer_ref import generate
from racer_ref.exactness import make_plan
from racer_ref.harness.models import load_default_model
from racer_ref.speedups.cpu_kernels import cpu_name

PROMPT = ("Rewrite this function with a list comprehension, keeping its name and docstring:\n\n"
          "def squares(numbers):\n    \"\"\"The squares of the even numbers.\"\"\"\n    result = []\n"
          "    for n in numbers:\n        if n % 2 == 0:\n            result.append(n * n)\n    return result\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    model, tokenizer = load_default_model()
    ids = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    vocab = model.config.vocab_size
    generate(model, None, ids, 16)  # warm-up (the first call also makes the model's plan)
    load_before = os.getloadavg()[0]
    probes, decodes, steps = [], [], 0
    for round_ in range(args.rounds):
        start = time.perf_counter()
        plan = make_plan(model, vocab, key=("probe_cost", round_))
        probes.append(time.perf_counter() - start)
        result = generate(model, None, ids, args.max_new_tokens, probe=False)
        decodes.append(result.timings["total"])
        steps = len(result.accepted_lengths)
    load_after = os.getloadavg()[0]
    probe, decode = statistics.median(probes), statistics.median(decodes)
    print(f"CPU: {cpu_name()}, {torch.get_num_threads()} threads; load average {load_before:.2f} before, "
          f"{load_after:.2f} after")
    print(f"plan: mode {plan.mode}, probe's largest relative error {plan.error:.2g}")
    print(f"probe: median {probe * 1e3:.1f} ms over {args.rounds} rounds (min {min(probes) * 1e3:.1f} ms)")
    print(f"RACER decode of {args.max_new_tokens} new tokens: median {decode:.3f} s ({steps} steps)")
    print(f"probe / decode: {probe / decode:.1%} (bound: 5%)")


if __name__ == "__main__":
    main()
