"""Replay recorded decoding steps through the ``--capacity auto`` controller, offline.

    # 1. record every step of a RACER run at capacity 64 (needs the model; a few minutes)
    .venv/bin/python benchmarks/replay_capacity.py record \\
        --questions ../shared/data/spec_bench/question.jsonl --per-category 3 --out bench-out/steps-sb.jsonl
    .venv/bin/python benchmarks/replay_capacity.py record --dataset humaneval --limit 20 \\
        --out bench-out/steps-he.jsonl
    # 2. replay them (no model; seconds): fixed capacities, the best per-context choice in
    #    hindsight, and the controller under several settings, with noisy step times
    .venv/bin/python benchmarks/replay_capacity.py replay bench-out/steps-sb.jsonl

Why this works: in greedy decoding a step that verifies a C-node tree tells exactly how many
tokens every smaller capacity would have given (``capacity.tokens_if_truncated``: the
controller's smaller trees are prefixes of the bigger one). So one run at C = 64 records, per
step, its draft context and ``{C: a + 1}`` for every candidate C <= 64. The replay then walks
those steps in order and charges each capacity a step time ``T(C) = t1 * ratio(C) + overhead``
(``--ratios``: measured with ``benchmarks/bench_capacity.py``; the defaults are our 2-core Xeon,
fp32, prepacked weights), times a slow load drift and a random factor per step. The speedup is
against one-token decoding under the same load.

What it simplifies: at another capacity the steps would fall at other positions of the text
and the drafter would have seen other verified nodes; the replay keeps the recorded sequence.
It ranks policies well (it reproduced the order of the real runs); its absolute numbers run
a few percent above the real ones.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Dict, List

try:  # the package as installed by `make setup`, else straight from the source tree
    import racer_ref  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

#: T(C) / T(1) on our 2-vCPU Xeon, SmolLM2 fp32, prepacked weights
#: (benchmarks/bench_capacity.py --prepack on, medians of 8 rounds).
DEFAULT_RATIOS = "1=1,2=1.09,3=1.15,4=1.26,6=1.41,8=1.45,12=1.61,16=1.69,24=2.0,32=2.17,48=3.0,64=3.5"


def record(args: argparse.Namespace) -> None:
    import torch

    from racer_ref.speedups.capacity import AdaptiveDrafter, CapacityController, DEFAULT_CANDIDATES, tokens_if_truncated
    from racer_ref.harness.datasets import encode_prompt, load_prompts, select
    from racer_ref.drafter import Drafter
    from racer_ref.decoding import generate
    from racer_ref.harness.models import load_model

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    prompts = select(load_prompts(dataset=args.dataset, questions=args.questions),
                     per_category=args.per_category, limit=args.limit)
    candidates = [c for c in DEFAULT_CANDIDATES if c <= args.capacity]
    vocab = int(model.config.vocab_size)
    out = open(args.out, "w")

    class Recorder(AdaptiveDrafter):
        prompt_id = ""

        def _on_step(self, step):  # type: ignore[no-untyped-def]
            super()._on_step(step)
            if not step.accepted:
                return
            observed = tokens_if_truncated(step.tree, step.accepted, candidates)
            if len(step.tree) < (step.capacity or 0):  # nothing more to draft: larger C equal
                observed.update({c: len(step.accepted) for c in candidates if c >= len(step.tree)})
            out.write(json.dumps({"prompt_id": self.prompt_id, "context": self.contexts[step.step],
                                  "tokens": observed}) + "\n")

    for prompt in prompts:
        ids = encode_prompt(tokenizer, prompt.text, chat=prompt.chat)
        fixed = CapacityController({args.capacity: 1.0}, explore_every=0, start=args.capacity)
        drafter = Recorder(Drafter(method="racer", vocab_size=vocab, capacity=args.capacity), fixed)
        drafter.prompt_id = prompt.prompt_id
        result = generate(model, None, ids, max_new_tokens=args.max_new_tokens, method="racer",
                          capacity=args.capacity, drafter=drafter)
        drafter.finalize(result)
        print(f"{prompt.prompt_id}: {result.steps} steps, MAT {result.mean_accepted_tokens:.2f}", flush=True)
    out.close()


def parse_ratios(text: str) -> Dict[int, float]:
    pairs = (item.split("=") for item in text.split(","))
    return {int(c): float(r) for c, r in pairs}


def replay(args: argparse.Namespace) -> None:
    from racer_ref.speedups.capacity import CapacityController

    rows = [json.loads(line) for line in open(args.steps)]
    for r in rows:
        r["tokens"] = {int(c): v for c, v in r["tokens"].items()}
    ratios = parse_ratios(args.ratios)
    caps = sorted(c for c in ratios if all(c in r["tokens"] for r in rows))
    profile = {c: args.t1_ms * ratios[c] / 1e3 for c in caps}  # what the controller is told
    step_s = {c: profile[c] + args.overhead_ms / 1e3 for c in caps}  # what a step really costs

    def speedup(choose, controller=None, seed=0) -> float:
        """Token-weighted speedup over one-token decoding under the same load."""
        rnd = random.Random(seed)
        tokens = spent = baseline = 0.0
        for i, r in enumerate(rows):
            load = 1 + args.drift * (0.5 + 0.5 * math.sin(i / 150.0))
            c = choose(r)
            dt = step_s[c] * load * math.exp(rnd.gauss(0, args.noise))
            got = r["tokens"][c]
            tokens += got
            spent += dt
            baseline += got * step_s[1] * load
            if controller is not None:
                controller.update_tokens({k: v for k, v in r["tokens"].items() if k <= c}, r["context"])
                controller.update_time(c, dt)
        return baseline / spent

    print(f"{len(rows)} steps from {args.steps}; T1 {args.t1_ms} ms + {args.overhead_ms} ms per step, "
          f"noise sigma {args.noise}, drift {args.drift}")
    print("fixed capacity: " + "  ".join(f"{c}: {speedup(lambda r, c=c: c):.3f}" for c in caps))
    by_context: Dict[str, List[dict]] = collections.defaultdict(list)
    for r in rows:
        by_context[r["context"]].append(r)
    best = {}
    for ctx, rs in by_context.items():
        best[ctx] = max(caps, key=lambda c: sum(r["tokens"][c] for r in rs) / (len(rs) * step_s[c]))
        mats = "  ".join(f"{c}: {sum(r['tokens'][c] for r in rs) / len(rs):.2f}" for c in caps)
        print(f"  {ctx}: {len(rs)} steps, best C {best[ctx]} in hindsight; MAT by C: {mats}")
    print(f"best per context, in hindsight: {speedup(lambda r: best[r['context']]):.3f}")
    print("controller (mean of 3 noise seeds):")
    for min_timed in (None, 3):
        for every in (8, 16, 32):
            for cost in (1.25, 1.5, 2.0):
                runs = []
                for seed in range(3):
                    ctrl = CapacityController(profile, explore_every=every, explore_cost=cost, min_timed=min_timed)
                    runs.append(speedup(lambda r, ctrl=ctrl: ctrl.next_capacity(r["context"]), ctrl, seed))
                print(f"  min_timed {str(min_timed):>4}  explore_every {every:2d}  explore_cost {cost:4.2f}: "
                      f"{statistics.mean(runs):.3f} (seeds {' '.join(f'{x:.3f}' for x in runs)})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="run RACER at capacity --capacity and record every step")
    r.add_argument("--model", default=None)
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset")
    src.add_argument("--questions")
    r.add_argument("--per-category", type=int, default=None)
    r.add_argument("--limit", type=int, default=None)
    r.add_argument("--capacity", type=int, default=64)
    r.add_argument("--max-new-tokens", type=int, default=128)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--out", required=True)
    y = sub.add_parser("replay", help="replay recorded steps through fixed and adaptive policies")
    y.add_argument("steps")
    y.add_argument("--ratios", default=DEFAULT_RATIOS, help="C=T(C)/T(1),...")
    y.add_argument("--t1-ms", type=float, default=45.0)
    y.add_argument("--overhead-ms", type=float, default=3.0)
    y.add_argument("--noise", type=float, default=0.15, help="sigma of the per-step log-normal factor")
    y.add_argument("--drift", type=float, default=0.2, help="amplitude of the slow load drift")
    args = p.parse_args()
    record(args) if args.command == "record" else replay(args)


if __name__ == "__main__":
    main()
