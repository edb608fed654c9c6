"""Cost of one verify pass against the draft-tree size: stock transformers (``T_hf``) against
racer-ref's CPU path (``T``), on the same model in one run, interleaved.

    .venv/bin/python benchmarks/bench_capacity.py                  # default model, CPU, fp32, 2 threads
    .venv/bin/python benchmarks/bench_capacity.py --variants hf,ours,no-kernels,no-fast-forward
    .venv/bin/python benchmarks/bench_capacity.py --mat 64=3.34 16=2.6   # + predicted speedups
    .venv/bin/python benchmarks/bench_capacity.py --device cuda --dtype fp16 --variants hf,ours
    .venv/bin/python benchmarks/bench_capacity.py --compile 1,2,4,8,16 --rounds 7   # + compiled passes

Variants (one model, switched between passes):

- ``hf``: what stock transformers does: ``sdpa`` attention, a ``DynamicCache``, PyTorch's own
  linear kernels, the model's own forward. At n = 1 this is one step of ``model.generate``.
- ``ours``: ``sdpa_gqa`` attention (``racer_ref.speedups.attention``), the in-place cache
  (``racer_ref.speedups.kv_cache``), the linear kernels chosen by ``racer_ref.speedups.cpu_kernels``
  and its direct forward.
- ``no-kernels`` / ``no-fast-forward``: ``ours`` without the one or the other (what each adds).
- ``compiled`` (with ``--compile SIZES``): ``ours`` with the passes of those sizes compiled by
  inductor (``racer_ref.speedups.compiled``, opt-in; about two minutes per size to compile);
  a pass of n nodes runs in the smallest compiled size >= n, other passes as ``ours``.

A pass is one forward over a chain of n tree tokens after ``--prefix`` cached tokens (with the
4-D tree mask for n > 1, exactly as ``racer_ref.verify.forward_tree``), plus the top-k over the
vocabulary that every RACER step does. Every (n, variant) is timed once per round, rounds
interleaved, so that load from other processes hits all alike; we print the median and the
minimum (other processes only ever add time: on a busy machine the minimum is the less
disturbed figure) and the ratios. The machine's load average is printed before and after: only
quote figures measured on a quiet machine.

Targets (issue 13, SmolLM2-135M fp32, 2 threads): T(1) <= 0.8 T_hf(1), T(8) <= 1.4 T(1),
T(16) <= 1.8 T(1).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

try:  # the package as installed by `make setup`, else straight from the source tree
    import racer_ref  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

VARIANTS = ("hf", "ours", "no-kernels", "no-fast-forward", "compiled")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sizes", default="1,2,4,8,16,32,64")
    p.add_argument("--prefix", type=int, default=256, help="tokens in the KV cache")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--variants", default="hf,ours", help=f"comma-separated, from {', '.join(VARIANTS)}")
    p.add_argument("--mat", nargs="*", default=[], metavar="C=MAT")
    p.add_argument("--compile", default="", metavar="SIZES",
                   help="comma-separated pass sizes to compile (adds the 'compiled' variant)")
    args = p.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    compile_sizes = [int(s) for s in args.compile.split(",") if s.strip()]
    if compile_sizes and "compiled" not in variants:
        variants.append("compiled")
    if "compiled" in variants and not compile_sizes:
        p.error("--variants compiled needs --compile SIZES")
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        p.error(f"--variants: expected names from {VARIANTS}, got {args.variants!r}")

    import numpy as np
    import torch
    from transformers import DynamicCache

    from racer_ref.speedups.attention import register, use_sdpa_gqa
    from racer_ref.speedups.capacity import chain_tree
    from racer_ref.speedups.kv_cache import growing_cache
    from racer_ref.harness.models import load_model
    from racer_ref.speedups.cpu_kernels import apply_cpu_kernels, cpu_name, install_fast_forward
    from racer_ref.verify import forward_prompt, forward_tree

    torch.set_num_threads(args.threads)
    model, _ = load_model(args.model, device=args.device, dtype=args.dtype)
    vocab = int(model.config.vocab_size)
    sizes = [int(s) for s in args.sizes.split(",")]
    register()
    stock_attn = model.config._attn_implementation
    gqa = use_sdpa_gqa(model)
    ours_attn = model.config._attn_implementation
    kernels = apply_cpu_kernels(model, enabled=True)
    fast = install_fast_forward(model)
    print(kernels.describe())
    print(f"direct forward: {'installed' if fast else 'not available for this model'}; "
          f"attention {stock_attn} -> {ours_attn if gqa else stock_attn}")
    compiled = None
    if compile_sizes:
        from racer_ref.speedups.compiled import compile_passes

        if fast is None:
            p.error("--compile: this model has no direct forward to compile")
        compiled = compile_passes(model, compile_sizes)
        print("compiled passes:", compiled.report())

    def setup(variant: str) -> None:
        stock = variant == "hf"
        kernels.enabled = bool(kernels.layers) and variant not in ("hf", "no-kernels")
        if fast is not None:
            fast.enabled = variant not in ("hf", "no-fast-forward")
        if compiled is not None:
            compiled.enabled = variant == "compiled"
        attn = stock_attn if stock else ours_attn
        if model.config._attn_implementation != attn:
            model.set_attn_implementation(attn)

    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    samples = {(n, v): [] for n in sizes for v in variants}
    load_before = os.getloadavg()
    with torch.inference_mode():
        prompt = torch.as_tensor(np.random.default_rng(0).integers(0, vocab, args.prefix), device=model.device)
        caches = {}
        for v in variants:
            setup(v)
            caches[v] = DynamicCache(config=model.config) if v == "hf" else growing_cache(model)
            forward_prompt(model, caches[v], prompt)
        trees = {n: chain_tree(n, vocab, seed=n) for n in sizes}

        def one_pass(n: int, v: str) -> None:
            cache = caches[v]
            logits = forward_tree(model, cache, trees[n])  # (n, vocab)
            logits.topk(8, dim=-1).indices.cpu()  # what every RACER step reads off the logits
            for layer in cache.layers:  # drop the tree again: back to the prefix only
                layer.keys = layer.keys[:, :, :args.prefix]
                layer.values = layer.values[:, :, :args.prefix]

        for n, v in samples:  # warm-up
            setup(v)
            one_pass(n, v)
        for _ in range(args.rounds):
            for n, v in samples:
                setup(v)
                sync()
                tic = time.perf_counter()
                one_pass(n, v)
                sync()
                samples[(n, v)].append(time.perf_counter() - tic)
    load_after = os.getloadavg()
    capability = torch.backends.cpu.get_cpu_capability() if args.device == "cpu" else args.device
    print(f"verify pass vs tree size: {Path(str(model.config._name_or_path)).name}, {args.device} {args.dtype}, "
          f"{torch.get_num_threads()} threads, CPU {cpu_name()} ({capability}), {args.prefix} cached tokens, "
          f"{args.rounds} interleaved rounds; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          f"({os.cpu_count()} CPUs)")
    med = {k: statistics.median(t) * 1e3 for k, t in samples.items()}
    low = {k: min(t) * 1e3 for k, t in samples.items()}
    head = f"{'n':>4}"
    for v in variants:
        head += f" {v + ' med':>18} {'min':>7} {'/T(1)':>6}"
    ours = [v for v in ("ours", "compiled") if v in variants]
    if "hf" in variants:
        for v in ours:
            head += f" {(v + '/hf med')[:14]:>14} {'min':>6}"
    print(head)
    for n in sizes:
        row = f"{n:>4}"
        for v in variants:
            one = (sizes[0], v)
            row += f" {med[(n, v)]:>18.1f} {low[(n, v)]:>7.1f} {low[(n, v)] / low[one]:>6.2f}"
        if "hf" in variants:
            for v in ours:
                row += f" {med[(n, v)] / med[(n, 'hf')]:>14.2f} {low[(n, v)] / low[(n, 'hf')]:>6.2f}"
        print(row)
    print("(ms; /T(1) is each variant's minimum over its own minimum at the smallest size)")
    if compiled is not None:
        print(f"compiled passes run: {compiled.calls}, sent to the eager path: {compiled.fallbacks}")
    for v in ours:
        if "hf" in variants and {1, 8, 16} <= set(sizes):
            checks = [("T(1) <= 0.8 T_hf(1)", low[(1, v)] / low[(1, "hf")], 0.8),
                      ("T(8) <= 1.4 T(1)", low[(8, v)] / low[(1, v)], 1.4),
                      ("T(16) <= 1.8 T(1)", low[(16, v)] / low[(1, v)], 1.8)]
            print(f"targets, {v} (minima): " + "; ".join(f"{name}: {value:.2f} {'met' if value <= bound else 'NOT met'}"
                                                        for name, value, bound in checks))
    for item in args.mat:
        c, mat = item.split("=")
        c, mat = int(c), float(mat)
        for v in variants:
            if (c, v) in low and (1, v) in low:
                print(f"capacity {c}, {v}: MAT {mat:.2f} -> predicted speedup over its own one-token decoding "
                      f"{mat * low[(1, v)] / low[(c, v)]:.2f}x (min)")
                if v != "hf" and (1, "hf") in low:
                    print(f"capacity {c}, {v}: predicted speedup over stock one-token decoding "
                          f"{mat * low[(1, 'hf')] / low[(c, v)]:.2f}x (min)")


if __name__ == "__main__":
    main()
