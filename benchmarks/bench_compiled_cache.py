"""Compiled CPU passes built once per machine (racer_ref.speedups.compiled_cache): what the
first process pays, how soon a second one decodes, pass speed, disk and memory.

    python benchmarks/bench_compiled_cache.py            # the default model, sizes 1 and 16
    python benchmarks/bench_compiled_cache.py --tiny     # the tests' tiny Llama (seconds)

Each step runs in a fresh subprocess (threads fixed by --threads) against a fresh cache folder
(``--cache``, default a new temporary one, so the first step really builds):

1. build: load the model, the CPU fast path (``speed_up_model``), ``load_or_compile`` of the
   sizes: build seconds; then per-pass milliseconds eager (the fast path) vs compiled, for
   each size kept, a pass of that many tree rows after a 64-token prefix (median of
   --repeats); a size the build measured no faster than eager is not kept (its figures shown).
2. load: a fresh process, from its start (before ``import torch``) to the first decoded token
   of ``racer_ref.generate`` with the cached passes; then 32 more tokens and its peak RSS.
3. eager: the same without compiled passes (``RACER_REF_COMPILE=off``): peak RSS.

Prints the load average with every figure (2 shared cores make them noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r'''
import json, os, resource, sys, time
t0 = float(sys.argv[1]); step = sys.argv[2]; sizes = json.loads(sys.argv[3]); tiny = sys.argv[4] == "1"
repeats = int(sys.argv[5])
import torch
torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
if tiny:
    sys.path.insert(0, os.path.join(os.environ["BENCH_ROOT"], "tests"))
    from models import tiny_model
    from racer_ref.speedups.cpu_kernels import install_fast_forward
    model, tok = tiny_model("llama"), None
    install_fast_forward(model)
    prompt = list(range(5, 40))
else:
    from racer_ref.harness.models import load_default_model
    from racer_ref.speedups.cpu_kernels import speed_up_model
    model, tok = load_default_model()
    speed_up_model(model)
    prompt = tok("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")["input_ids"]
from racer_ref.speedups.compiled import load_or_compile
out = {"load_average": os.getloadavg()[0]}
if step == "build":
    tic = time.perf_counter()
    passes = load_or_compile(model, sizes)
    out["build_s"] = time.perf_counter() - tic
    out["sizes"] = passes.sizes if passes else []
    out["build_pass_ms"] = passes.report()["pass_ms"] if passes else {}
    out["not_faster"] = passes.not_faster if passes else list(sizes)
    from transformers import DynamicCache
    from racer_ref.tree import tree_attention_mask
    from racer_ref.verify import tree_attention_bias
    fast = model.forward
    ms = {}
    for size in out["sizes"]:  # (a size measured not faster at build time is not loaded)
        ids = torch.randint(0, int(model.config.vocab_size), (1, size), generator=torch.Generator().manual_seed(size))
        pos = torch.arange(64, 64 + size)[None]
        chain = torch.from_numpy(tree_attention_mask(list(range(-1, size - 1))))
        mask = None if size == 1 else tree_attention_bias(chain, 64, torch.float32)
        for kind in ("eager", "compiled"):
            passes.enabled = kind == "compiled"
            times = []
            for _ in range(repeats):
                cache = DynamicCache(config=model.config)
                with torch.inference_mode():
                    fast._forward(torch.arange(64)[None] % int(model.config.vocab_size), None, None, cache)
                    tic = time.perf_counter()
                    fast._forward(ids, mask, pos, cache)
                    times.append(time.perf_counter() - tic)
            ms[f"{kind} {size}"] = round(sorted(times)[len(times) // 2] * 1e3, 2)
        passes.enabled = True
    out["pass_ms"] = ms
    out["load_average_end"] = os.getloadavg()[0]
else:
    import racer_ref
    passes = load_or_compile(model, sizes, build=False)
    out["compiled_sizes"] = passes.sizes if passes else []
    result = racer_ref.generate(model, tok, prompt, max_new_tokens=1, capacity=1)
    out["first_token_s"] = time.time() - t0
    tic = time.perf_counter()
    result = racer_ref.generate(model, tok, prompt, max_new_tokens=32)
    out["decode_32_s"] = time.perf_counter() - tic
    out["compiled_calls"] = passes.calls if passes else 0
    out["tokens"] = list(result.token_ids)
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("BENCH " + json.dumps(out), flush=True)
'''


def child(step: str, args: argparse.Namespace, env: dict) -> dict:
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD, repr(t0), step, json.dumps(args.sizes),
                           "1" if args.tiny else "0", str(args.repeats)],
                          env=env, capture_output=True, text=True)
    for line in proc.stderr.splitlines():
        if "compiled passes" in line:
            print(f"  [{step}] {line}", file=sys.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{step} failed:\n{proc.stderr[-3000:]}")
    got = [line for line in proc.stdout.splitlines() if line.startswith("BENCH ")]
    return json.loads(got[-1][6:])


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="the tests' tiny random Llama instead of the default model")
    ap.add_argument("--sizes", default="1,16", type=lambda s: sorted({int(x) for x in s.split(",")}))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--cache", default=None, help="cache root (default: a new temporary folder, removed after)")
    args = ap.parse_args()
    root = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="racer-compiled-"))
    env = dict(os.environ, RACER_REF_CACHE=str(root), BENCH_THREADS=str(args.threads),
               BENCH_ROOT=str(Path(__file__).resolve().parent.parent))
    if not args.tiny:  # the default model is converted once under the user's cache: reuse it there
        from racer_ref.harness.models import DEFAULT_MODEL_NAME, cache_dir

        if not (root / DEFAULT_MODEL_NAME).exists() and (cache_dir() / DEFAULT_MODEL_NAME).exists():
            root.mkdir(parents=True, exist_ok=True)
            os.symlink(cache_dir() / DEFAULT_MODEL_NAME, root / DEFAULT_MODEL_NAME)
    print(f"model: {'tiny llama' if args.tiny else 'default'}; sizes {args.sizes}; {args.threads} threads; "
          f"cache {root}; load {os.getloadavg()[0]:.2f}")
    try:
        build = child("build", args, env)
        print(f"first process: built sizes {build['sizes']} in {build['build_s']:.1f} s "
              f"(load {build['load_average']:.2f})")
        for size in build["sizes"]:
            e, c = build["pass_ms"][f"eager {size}"], build["pass_ms"][f"compiled {size}"]
            print(f"  pass of {size:>2} rows: eager {e:.2f} ms, compiled {c:.2f} ms ({e / c:.2f}x)")
        for size in build["not_faster"]:
            ms = build["build_pass_ms"].get(str(size))
            print(f"  pass of {size:>2} rows: not used, measured at build {ms} (compiled not faster than eager)")
        print(f"  (load at the end {build['load_average_end']:.2f}); build process peak RSS {build['peak_rss_mb']:.0f} MB")
        entries = root / "compiled"
        print(f"cache on disk: {du(entries) / 2**20:.0f} MB in {entries}")
        load = child("load", args, env)
        print(f"second process: first decoded token {load['first_token_s']:.1f} s after start, compiled sizes "
              f"{load['compiled_sizes']}, 32 tokens in {load['decode_32_s']:.2f} s, {load['compiled_calls']} compiled "
              f"passes (load {load['load_average']:.2f})")
        eager = child("eager", args, dict(env, RACER_REF_COMPILE="off"))
        print(f"peak RSS: eager default {eager['peak_rss_mb']:.0f} MB, with compiled passes {load['peak_rss_mb']:.0f} MB "
              f"({load['peak_rss_mb'] / eager['peak_rss_mb']:.2f}x)")
        print(f"same 32 tokens eager and compiled: {eager['tokens'] == load['tokens']} "
              f"(first token eager {eager['first_token_s']:.1f} s)")
    finally:
        if not args.cache:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
