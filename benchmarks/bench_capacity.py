"""Cost of one verify pass against the draft-tree size, on this machine (what ``--capacity
auto`` measures), and what it means for the speedup.

    .venv/bin/python benchmarks/bench_capacity.py                 # default model, CPU, fp32
    .venv/bin/python benchmarks/bench_capacity.py --device cuda --dtype fp16
    .venv/bin/python benchmarks/bench_capacity.py --mat 64=3.34 16=2.6   # + predicted speedups
    .venv/bin/python benchmarks/bench_capacity.py --prepack both         # MKL prepacked weights too
    .venv/bin/python benchmarks/bench_capacity.py --prepack on --attn both  # sdpa vs sdpa_gqa attention
    .venv/bin/python benchmarks/bench_capacity.py --prepack on --cache both # DynamicLayer vs GrowingLayer

For each tree size n it prints the median and the minimum over ``--rounds`` interleaved rounds
of one verify pass (forward over n tree tokens after ``--prefix`` cached tokens, plus the
top-k and argmax every step does), and the ratio ``T(n) / T(1)``. On a busy machine the
minimum is the less disturbed figure (other processes only ever add time).

With ``--mat C=MAT ...`` (MAT measured by ``racer-ref bench`` at capacity C) it also prints the
speedup over one-token decoding that the cost model predicts, ``MAT * T(1) / T(C)``,
ignoring drafting and bookkeeping (a few percent of a step on a CPU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

try:  # the package as installed by `make setup`, else straight from the source tree
    import racer_ref  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sizes", default="1,2,4,8,11,16,24,32,48,64,96,128")
    p.add_argument("--prefix", type=int, default=256, help="tokens in the KV cache")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--mat", nargs="*", default=[], metavar="C=MAT")
    p.add_argument("--prepack", default="off", choices=["off", "on", "both"],
                   help="MKL prepacked weights (racer_ref.speedups.prepack): off, on, or both interleaved")
    p.add_argument("--attn", default="sdpa_gqa", choices=["sdpa", "sdpa_gqa", "both"],
                   help="attention: transformers' sdpa, racer_ref.speedups.attention's sdpa_gqa, or both interleaved")
    p.add_argument("--cache", default="growing", choices=["dynamic", "growing", "both"],
                   help="KV cache layers: transformers' DynamicLayer, racer_ref.speedups.kv_cache's GrowingLayer, or both")
    args = p.parse_args()

    import itertools

    import numpy as np
    import torch
    from transformers import DynamicCache

    from racer_ref.speedups.capacity import _pass, chain_tree
    from racer_ref.speedups.kv_cache import growing_cache
    from racer_ref.harness.models import load_model
    from racer_ref.verify import forward_prompt

    torch.set_num_threads(args.threads)
    model, _ = load_model(args.model, device=args.device, dtype=args.dtype)
    vocab = int(model.config.vocab_size)
    sizes = [int(s) for s in args.sizes.split(",")]
    packs = {"off": ["off"], "on": ["on"], "both": ["off", "on"]}[args.prepack]
    attns = ["sdpa", "sdpa_gqa"] if args.attn == "both" else [args.attn]
    caches = ["dynamic", "growing"] if args.cache == "both" else [args.cache]
    if "sdpa_gqa" in attns:
        from racer_ref.speedups.attention import register

        register()
    handle = None
    if args.prepack != "off":
        from racer_ref.speedups.prepack import prepack_linear_weights

        handle = prepack_linear_weights(model)
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    # A variant: (prepack, attention, cache kind); one sample list per (tree size, variant).
    variants = list(itertools.product(packs, attns, caches))
    samples = {(n, v): [] for n in sizes for v in variants}

    def setup(variant: tuple) -> None:
        pack, attn, _ = variant
        if handle is not None:
            handle.enabled = pack == "on"
        if model.config._attn_implementation != attn:
            model.set_attn_implementation(attn)

    with torch.inference_mode():
        prompt = torch.as_tensor(np.random.default_rng(0).integers(0, vocab, args.prefix), device=model.device)
        kv = {}
        for kind in caches:
            kv[kind] = growing_cache(model) if kind == "growing" else DynamicCache(config=model.config)
            forward_prompt(model, kv[kind], prompt)
        trees = {n: chain_tree(n, vocab, seed=n) for n in sizes}
        for n, v in samples:  # warm-up
            setup(v)
            _pass(model, kv[v[2]], trees[n], args.prefix, 8)
        for _ in range(args.rounds):
            for n, v in samples:
                setup(v)
                sync()
                tic = time.perf_counter()
                _pass(model, kv[v[2]], trees[n], args.prefix, 8)
                sync()
                samples[(n, v)].append(time.perf_counter() - tic)
    print(f"verify pass vs tree size: {args.device} {args.dtype}, {torch.get_num_threads()} threads, "
          f"{args.prefix} cached tokens, {args.rounds} interleaved rounds; T1 = the plain 1-token pass "
          f"of the first variant")
    base = (1, variants[0])
    base_med = statistics.median(samples[base]) if base in samples else None
    base_min = min(samples[base]) if base in samples else None
    print(f"{'n':>5} {'prepack':>8} {'attention':>10} {'cache':>8} {'median ms':>10} {'min ms':>8} "
          f"{'med/T1':>7} {'min/T1':>7}")
    for (n, (pack, attn, kind)), times in samples.items():
        med, low = statistics.median(times) * 1e3, min(times) * 1e3
        r_med = f"{med / (base_med * 1e3):7.2f}" if base_med else "      -"
        r_min = f"{low / (base_min * 1e3):7.2f}" if base_min else "      -"
        print(f"{n:>5} {pack:>8} {attn:>10} {kind:>8} {med:>10.1f} {low:>8.1f} {r_med} {r_min}")
    for item in args.mat:
        c, mat = item.split("=")
        c, mat = int(c), float(mat)
        for v in variants:
            if (c, v) in samples and base_min:
                t = samples[(c, v)]
                print(f"capacity {c}, prepack {v[0]}, {v[1]}, {v[2]} cache: MAT {mat:.2f} -> predicted "
                      f"speedup over one-token decoding {mat * base_min / min(t):.2f}x (min) / "
                      f"{mat * base_med / statistics.median(t):.2f}x (median)")

if __name__ == "__main__":
    main()
