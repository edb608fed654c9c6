"""Where the milliseconds of one verify pass go: stock transformers against racer-ref's CPU path.

    .venv/bin/python benchmarks/profile_pass.py              # 16 tree tokens, default model, 2 threads
    .venv/bin/python benchmarks/profile_pass.py --nodes 1 --passes 20

Runs ``--passes`` verify passes of ``--nodes`` chain tokens after ``--prefix`` cached tokens
under ``torch.profiler`` for each variant (``hf``: sdpa, DynamicCache, stock kernels, the
model's own forward; ``ours``: what ``racer-ref`` uses on a CPU, see
``benchmarks/bench_capacity.py``), and prints the self CPU time per pass grouped by what it
is for: the linear layers, attention, norms, rotary embedding, the top-k over the vocabulary,
the rest of the operators, and the Python between them (wall time minus operator time).
The profiler adds a little time per operator; compare the variants, not absolute figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

try:  # the package as installed by `make setup`, else straight from the source tree
    import racer_ref  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

#: Operator name fragments per group (first match wins).
GROUPS = [
    ("linear layers", ("aten::mm", "aten::addmm", "mkldnn::_linear_pointwise", "mkl::_mkl_linear", "aten::bmm")),
    ("attention", ("scaled_dot_product", "flash_attention", "aten::softmax")),
    ("norms", ("rms_norm", "aten::pow", "aten::mean", "aten::rsqrt")),
    ("rotary embedding", ("aten::cos", "aten::sin", "aten::cat", "aten::neg")),
    ("top-k over the vocabulary", ("aten::topk",)),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--prefix", type=int, default=256)
    p.add_argument("--passes", type=int, default=10)
    args = p.parse_args()

    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import DynamicCache

    from racer_ref.harness.models import load_model
    from racer_ref.speedups.attention import use_sdpa_gqa
    from racer_ref.speedups.capacity import chain_tree
    from racer_ref.speedups.cpu_kernels import cpu_name, speed_up_model, stock_path
    from racer_ref.speedups.kv_cache import growing_cache
    from racer_ref.verify import forward_prompt, forward_tree

    torch.set_num_threads(args.threads)
    model, _ = load_model(args.model)
    stock_attn = model.config._attn_implementation
    use_sdpa_gqa(model)
    ours_attn = model.config._attn_implementation
    handle = speed_up_model(model, enabled=True)
    print(handle.describe())
    vocab = int(model.config.vocab_size)
    tree = chain_tree(args.nodes, vocab, seed=args.nodes)
    prompt = torch.as_tensor(np.random.default_rng(0).integers(0, vocab, args.prefix))
    print(f"{args.nodes}-node verify pass after {args.prefix} cached tokens, {args.threads} threads, "
          f"CPU {cpu_name()} ({torch.backends.cpu.get_cpu_capability()}), load average "
          f"{os.getloadavg()[0]:.2f}; ms per pass (self CPU time under torch.profiler)")
    results = {}
    for variant in ("hf", "ours"):
        ctx = stock_path(model) if variant == "hf" else None
        if ctx is not None:
            ctx.__enter__()
        model.set_attn_implementation(stock_attn if variant == "hf" else ours_attn)
        with torch.inference_mode():
            cache = DynamicCache(config=model.config) if variant == "hf" else growing_cache(model)
            forward_prompt(model, cache, prompt)

            def one() -> None:
                logits = forward_tree(model, cache, tree)
                logits.topk(8, dim=-1).indices.cpu()
                for layer in cache.layers:
                    layer.keys = layer.keys[:, :, :args.prefix]
                    layer.values = layer.values[:, :, :args.prefix]

            for _ in range(3):
                one()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                tic = time.perf_counter()
                for _ in range(args.passes):
                    one()
                wall = (time.perf_counter() - tic) / args.passes * 1e3
        if ctx is not None:
            ctx.__exit__(None, None, None)
        grouped = {name: 0.0 for name, _ in GROUPS}
        grouped["other operators"] = 0.0
        for ev in prof.key_averages():
            ms = ev.self_cpu_time_total / 1e3 / args.passes
            for name, keys in GROUPS:
                if any(k in ev.key for k in keys):
                    grouped[name] += ms
                    break
            else:
                grouped["other operators"] += ms
        ops = sum(grouped.values())
        grouped["Python and dispatch (wall - operators)"] = max(0.0, wall - ops)
        grouped["wall time per pass"] = wall
        results[variant] = grouped
    print(f"{'':42} {'hf':>9} {'ours':>9}")
    for key in results["hf"]:
        print(f"{key:42} {results['hf'][key]:9.1f} {results['ours'][key]:9.1f}")


if __name__ == "__main__":
    main()
