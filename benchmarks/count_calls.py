"""Count the calls one decoding step makes inside racer_ref, and into the Rust core.

    .venv/bin/python benchmarks/count_calls.py                  # ar and racer, 64 tokens
    .venv/bin/python benchmarks/count_calls.py --methods racer --top 40

A tiny seeded random Llama (tests/models.py, no download) generates once to warm up, then
once under ``sys.setprofile``. Every Python function call whose code lives in the
``racer_ref`` package is counted (the "hops" of a step), and every call of a method of a
``racer_ref._core`` object (a language crossing into Rust), each divided by the number of
decoding steps. Prefill and the argument checks of ``generate()`` are included, so the
per-step figures carry a small fixed part (shown below 0.1 per step).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
try:  # the package as installed by `make setup`, else straight from the source tree
    import racer_ref  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(ROOT / "python"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1] if __doc__ else None)
    parser.add_argument("--methods", nargs="+", default=["ar", "racer"])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--top", type=int, default=25, help="functions listed per method")
    args = parser.parse_args()

    import torch
    from models import tiny_model

    from racer_ref import generate
    from racer_ref.metrics import mean_accepted_tokens

    torch.set_num_threads(1)
    model = tiny_model("llama")
    prompt = torch.randint(0, 128, (20,), generator=torch.Generator().manual_seed(0)).tolist()
    for method in args.methods:
        generate(model, None, prompt, max_new_tokens=8, method=method)  # warm-up
        python_calls: collections.Counter = collections.Counter()
        rust_calls: collections.Counter = collections.Counter()

        def profile(frame, event, arg):  # noqa: ANN001
            if event == "call":
                path = frame.f_code.co_filename
                if "racer_ref" in path:
                    python_calls[f"{path.split('racer_ref/')[-1]}:{frame.f_code.co_name}"] += 1
            elif event == "c_call":
                owner = getattr(arg, "__self__", None)
                if type(owner).__module__ == "racer_ref._core":
                    rust_calls[f"{type(owner).__name__}.{arg.__name__}"] += 1

        sys.setprofile(profile)
        try:
            result = generate(model, None, prompt, max_new_tokens=args.max_new_tokens, method=method)
        finally:
            sys.setprofile(None)
        steps = len(result.accepted_lengths)
        print(f"{method}: {steps} steps, MAT {mean_accepted_tokens(result.accepted_lengths):.2f}; per step: "
              f"{sum(python_calls.values()) / steps:.1f} Python calls in racer_ref, "
              f"{sum(rust_calls.values()) / steps:.2f} calls into the Rust core")
        for name, count in (rust_calls + python_calls).most_common(args.top):
            print(f"  {count / steps:6.2f}  {name}")


if __name__ == "__main__":
    main()
