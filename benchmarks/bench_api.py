"""The README's Python call against ``method="ar"`` on a long GSM8K few-shot prompt, decode time only.

    .venv/bin/python benchmarks/bench_api.py                  # the defaults (the CPU fast path on)
    .venv/bin/python benchmarks/bench_api.py --stock          # PyTorch's stock path (RACER_REF_CPU_KERNELS=off)
    .venv/bin/python benchmarks/bench_api.py --capacity auto  # one more generate() option

Builds a GSM8K few-shot prompt (``racer_ref.harness.datasets.few_shot_prompt``: ``--shots``
solved examples, then question ``--index``) from ``../shared/data/gsm8k`` (or
``$RACER_REF_DATA``; the script says so and stops when the data is absent), loads the default
model as the README does, and runs ``racer_ref.generate(model, tokenizer, ids,
max_new_tokens=96)`` and the same with ``method="ar"`` in alternating order, ``--rounds``
times each, after one warm-up call of each. It prints, per method, the best decode time (the
call's ``total`` minus its ``prefill`` timing), the steps, MAT and the time per verify pass,
then the ratio ``ar / racer`` of the best decode times, and checks that both outputs are
identical (a mismatch exits 1). Where the time goes: ``forward`` (the verify passes) against
the drafting, acceptance and bookkeeping timings of the racer calls.

Timing is only meaningful on a quiet machine: the load average before and after is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

try:  # the package as installed by `make setup`, else straight from the source tree
    import racer_ref  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shots", type=int, default=4, help="solved examples before the question (default 4)")
    p.add_argument("--index", type=int, default=0, help="the GSM8K question asked (default 0)")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--capacity", default=None, help="a generate() capacity (default: generate()'s own)")
    p.add_argument("--stock", action="store_true", help="RACER_REF_CPU_KERNELS=off: PyTorch's stock path")
    args = p.parse_args()
    if args.stock:
        os.environ["RACER_REF_CPU_KERNELS"] = "off"

    import torch

    import racer_ref
    from racer_ref.harness.datasets import _read_jsonl, dataset_path, few_shot_prompt  # noqa: PLC2701
    from racer_ref.harness.load import busy_warnings, load_average, load_report
    from racer_ref.harness.models import load_default_model

    try:
        rows = _read_jsonl(dataset_path("gsm8k-long"))
    except FileNotFoundError as exc:
        print(f"bench_api: {exc} (the GSM8K prompts live in the shared data folder; set $RACER_REF_DATA)")
        return 2
    torch.set_num_threads(args.threads)
    model, tokenizer = load_default_model()
    ids = tokenizer(few_shot_prompt(rows, args.index, args.shots), return_tensors="pt").input_ids
    extra = {} if args.capacity is None else {"capacity": args.capacity if args.capacity == "auto" else int(args.capacity)}
    print(f"prompt: GSM8K {args.shots}-shot question {args.index}, {ids.shape[1]} tokens; "
          f"{args.max_new_tokens} new tokens; {args.threads} threads; {'stock path' if args.stock else 'defaults'}"
          + (f"; {extra}" if extra else ""))
    before = load_average()

    def call(method: str):
        options = {"method": method} if method == "ar" else dict(extra)
        return racer_ref.generate(model, tokenizer, ids, max_new_tokens=args.max_new_tokens, **options)

    best, outputs, timings = {}, {}, {}
    for round_ in range(args.rounds + 1):  # round 0 warms up (the first call also installs the fast path)
        for method in ("ar", "racer"):
            out = call(method)
            decode = out.timings["total"] - out.timings["prefill"]
            outputs.setdefault(method, out.token_ids)
            if out.token_ids != outputs[method]:
                print(f"bench_api: {method} gave another output in round {round_}")
                return 1
            if round_ and decode < best.get(method, (float("inf"),))[0]:
                best[method] = (decode, len(out.accepted_lengths), out)
    after = load_average()
    print(load_report(before, after, os.cpu_count()))
    for line in busy_warnings(before, after, os.cpu_count()):
        print(line)
    for method, (decode, steps, out) in best.items():
        t = out.timings
        print(f"{method:6s} decode {decode:.3f} s, {steps} passes, MAT {len(out.token_ids) / max(steps, 1):.2f}, "
              f"{t['forward'] / max(steps, 1) * 1e3:.1f} ms per verify pass; forward {t['forward']:.3f} s, "
              f"drafting {t['drafting']:.3f} s, acceptance {t['acceptance']:.3f} s, bookkeeping {t['bookkeeping']:.3f} s")
    (ar, ar_steps, _), (rc, rc_steps, _) = best["ar"], best["racer"]
    print(f"racer over ar: {ar / rc:.3f}x (decode time); a racer pass costs "
          f"{(best['racer'][2].timings['forward'] / rc_steps) / (best['ar'][2].timings['forward'] / ar_steps):.2f} "
          f"one-token passes; outputs identical: {outputs['ar'] == outputs['racer']}")
    fast = getattr(model, "racer_cpu_kernels", None)
    print("cpu fast path:", "off" if fast is None else fast.describe())
    return 0 if outputs["ar"] == outputs["racer"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
