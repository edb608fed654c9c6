"""The GPU check: lossless decoding in fp32 and fp16, then the benchmark, in one table.

Run on a CUDA machine from the repository root, after ``make setup``::

    .venv/bin/python benchmarks/gpu_check.py              # about 6-8 minutes on one GPU

What it does (issue 5, "GPU check"):

1. **Lossless**, for fp32 and fp16: the default model (SmolLM2-135M-Instruct) on the GPU;
   every method of our loop (``ar``, ``pld``, ``logits``, ``logits-last``, ``retrieval``,
   ``racer``) on a few Spec-Bench and HumanEval prompts, each output compared token for token
   with ``model.generate(do_sample=False)`` in the same dtype. (In fp16 a tree pass and a
   one-token pass can round differently, so a near-tie may flip an argmax; the table shows
   how often that happened.)
2. **Benchmark**, in fp16: ``ar``, ``hf-greedy``, ``hf-pld``, ``racer`` (capacity 64) on the
   first 20 HumanEval problems and 26 Spec-Bench questions (2 per category, first turn),
   128 new tokens, greedy; written by ``racer_ref.harness.bench`` into ``--out`` (results.jsonl,
   summary.md, plots).

It then prints one Markdown table with both parts. A time budget (``--budget-s``, default
450 s for the benchmark part) stops adding prompts when it runs out, and says so.

Try it without a GPU (tiny and quick; checks that the script runs, not the GPU)::

    .venv/bin/python benchmarks/gpu_check.py --device cpu --dry-run

Nothing here is needed for the test suite to pass.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

try:  # the package as installed by `make setup`, else straight from the source tree
    import racer_ref  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

LOSSLESS_METHODS = ("ar", "pld", "logits", "logits-last", "retrieval", "racer")
BENCH_METHODS = ("ar", "hf-greedy", "hf-pld", "racer")


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default=None, help="a local model folder (default: the default model)")
    p.add_argument("--out", default=os.environ.get("OUT", "bench-out") + "/gpu-check")
    p.add_argument("--dry-run", action="store_true", help="2 prompts per part, 8 tokens, fp32 only on CPU")
    p.add_argument("--budget-s", type=float, default=450.0, help="time budget of the benchmark part")
    p.add_argument("--lossless-prompts", type=int, default=4, help="prompts per set in part 1")
    p.add_argument("--lossless-tokens", type=int, default=48)
    p.add_argument("--capacity", type=int, default=64)
    return p.parse_args(argv)


def lossless(model: Any, tokenizer: Any, prompts: List[Any], max_new_tokens: int,
             capacity: int) -> Dict[str, List[bool]]:
    """For each method, one bool per prompt: output identical to ``model.generate`` greedy."""
    from racer_ref.harness.baselines import hf_generate
    from racer_ref.harness.datasets import encode_prompt
    from racer_ref.decoding import generate

    same: Dict[str, List[bool]] = {m: [] for m in LOSSLESS_METHODS}
    for prompt in prompts:
        ids = encode_prompt(tokenizer, prompt.text, prompt.chat)
        reference = hf_generate(model, tokenizer, ids, max_new_tokens, "hf-greedy").token_ids
        for method in LOSSLESS_METHODS:
            settings = {} if method == "ar" else {"capacity": capacity}  # ar drafts nothing
            out = generate(model, tokenizer, ids, max_new_tokens=max_new_tokens, method=method, **settings)
            same[method].append(out.token_ids == reference)
    return same


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    import torch

    from racer_ref.harness.bench import run_bench
    from racer_ref.harness.summary import aggregate, read_results, speedup
    from racer_ref.harness.datasets import load_prompts
    from racer_ref.harness.models import load_model

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; use --device cpu --dry-run to try the script", file=sys.stderr)
        return 2
    started = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n_lossless = 1 if args.dry_run else args.lossless_prompts
    lossless_tokens = 8 if args.dry_run else args.lossless_tokens
    lossless_prompts = (load_prompts(dataset="specbench", per_category=1, limit=n_lossless)
                        + load_prompts(dataset="humaneval", limit=n_lossless))
    dtypes = ["fp32"] if args.dry_run else ["fp32", "fp16"]
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device

    table: List[List[str]] = []
    # ---- part 1: lossless ---------------------------------------------------------------
    for dtype in dtypes:
        tic = time.perf_counter()
        model, tokenizer = load_model(args.model, device=args.device, dtype=dtype)
        same = lossless(model, tokenizer, lossless_prompts, lossless_tokens, args.capacity)
        for method, flags in same.items():
            table.append(["lossless", dtype, f"`{method}`", str(len(flags)), "", "", "", "",
                          f"{sum(flags)}/{len(flags)}"])
        print(f"[gpu_check] lossless {dtype}: {time.perf_counter() - tic:.0f} s", file=sys.stderr, flush=True)
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()

    # ---- part 2: benchmark ----------------------------------------------------------------
    bench_dtype = "fp32" if args.dry_run else "fp16"
    model, tokenizer = load_model(args.model, device=args.device, dtype=bench_dtype)
    sets = [("humaneval", load_prompts(dataset="humaneval", limit=2 if args.dry_run else 20)),
            ("specbench", load_prompts(dataset="specbench", per_category=2, limit=2 if args.dry_run else None))]
    budget_end = time.perf_counter() + args.budget_s
    cut = []
    for name, prompts in sets:
        done: List[Any] = []
        rows: List[Dict[str, Any]] = []
        # In chunks, so that the budget can stop it between prompts.
        chunk = 5
        for start in range(0, len(prompts), chunk):
            if time.perf_counter() > budget_end:
                cut.append(f"{name}: {len(done)}/{len(prompts)} prompts (time budget)")
                break
            part = prompts[start:start + chunk]
            run_bench(model, tokenizer, part, list(BENCH_METHODS), out / f"{name}-{start}",
                      max_new_tokens=8 if args.dry_run else 128, capacity=args.capacity,
                      warmup=start == 0, progress=False, turns="first",
                      meta={"source": f"{name} (gpu_check)"}, plots=False)
            rows += read_results(out / f"{name}-{start}")
            done += part
        # One results file and summary per set.
        folder = out / name
        folder.mkdir(exist_ok=True)
        import json

        with open(folder / "results.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        from racer_ref.harness.bench import summarize

        summarize(folder, plots=True)
        for method in BENCH_METHODS:
            agg = aggregate(r for r in rows if r["method"] == method)
            table.append([
                "bench", f"{name} ({len(done)})", f"`{method}`", str(agg.prompts), f"{agg.mat:.2f}",
                f"{agg.tokens_per_s:.1f}", f"{speedup(rows, method, 'ar'):.2f}x",
                f"{speedup(rows, method, 'hf-greedy'):.2f}x",
                f"{agg.matches}/{agg.checked}",
            ])

    header = ["part", "dtype / set", "method", "prompts", "MAT", "tokens/s", "speedup vs ar",
              "speedup vs hf-greedy", "same output (lossless: vs model.generate; bench: vs ar)"]
    lines = [f"GPU check on {device_name}; model {getattr(model.config, '_name_or_path', '')}; "
             f"capacity {args.capacity}; bench dtype {bench_dtype}; torch {torch.__version__}; "
             f"total {time.perf_counter() - started:.0f} s"
             + (f"; CUT: {'; '.join(cut)}" if cut else ""),
             "",
             "| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in table]
    text = "\n".join(lines) + "\n"
    (out / "gpu_check.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
