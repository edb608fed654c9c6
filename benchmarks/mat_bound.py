"""How far each draft tree is from the best any tree could do: offline replay and its bound.

For every prompt: one greedy run and one forward pass over its text (``harness.replay.record``),
then, per capacity and without the model, the replayed MAT of the paper's merge and of the
expected tree (racer), of the expected tree with *fitted* estimates (each bucket's acceptance
rate pooled over the whole run, fixed from the first step: the best this bucket model could
know), of the peers (logits, retrieval; the paper's merge), and the bound:
the MAT of the best possible sequence of trees over the same candidates
(``harness.replay.accepted_bound``). All figures use the replay protocol, the loop's
``observe_rejected=False``; ``benchmarks/mat_trees.py`` measures the default loop.

    python benchmarks/mat_bound.py --questions ../shared/data/spec_bench/question.jsonl \\
        --per-category 3 --out bench-out/mat-bound-spec.json
    python benchmarks/mat_bound.py --dataset humaneval --limit 20 --out bench-out/mat-bound-he.json

MAT is pooled over all steps of all prompts. Everything is deterministic: the load of the
machine does not change a figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from racer_ref import Drafter
from racer_ref.harness.datasets import encode_prompt, load_prompts
from racer_ref.harness.models import load_default_model
from racer_ref.harness.replay import accepted_bound, record, replay
from racer_ref.metrics import mean_accepted_tokens
from racer_ref.reference.expected_tree import NUM_BUCKETS, AcceptanceEstimates, bucket_prior

from mat_trees import add_prompt_set_args  # noqa: E402  (benchmarks/ is the script's folder)

COLUMNS = [("racer", "paper"), ("racer", "expected"), ("racer", "fitted"), ("logits", "paper"),
           ("retrieval", "paper")]


class FittedEstimates(AcceptanceEstimates):
    """Acceptance estimates fixed in advance: ``(accepted + a0) / (seen + n0)`` per bucket
    from counts pooled over a whole run; ``record`` learns nothing."""

    def __init__(self, seen, accepted) -> None:
        super().__init__()
        self.rates = [(accepted[b] + bucket_prior(b)[0]) / (seen[b] + bucket_prior(b)[1]) for b in range(NUM_BUCKETS)]

    def estimate(self, bucket: int) -> float:
        return self.rates[bucket]

    def record(self, bucket: int, label: bool) -> None:
        pass


def fitted_replay(recs, vocab, capacity):
    """The expected tree's replayed accepted lengths, online, then with fitted estimates."""
    seen, accepted, online = [0] * NUM_BUCKETS, [0] * NUM_BUCKETS, []
    for rec in recs:
        d = Drafter("racer", vocab_size=vocab, capacity=capacity, breadth=8, tree="expected")
        online += replay(rec, d)
        stats = d.acceptance_stats()
        seen = [a + b for a, b in zip(seen, stats["seen"])]
        accepted = [a + b for a, b in zip(accepted, stats["accepted"])]
    fitted = []
    for rec in recs:
        d = Drafter("racer", vocab_size=vocab, capacity=capacity, breadth=8, tree="expected", backend="python")
        d._impl.estimator.estimates = FittedEstimates(seen, accepted)  # the twin reads its estimates from here
        fitted += replay(rec, d)
    return online, fitted


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_prompt_set_args(p)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    caps = [int(c) for c in args.capacities.split(",")]
    prompts = load_prompts(dataset=args.dataset, questions=args.questions,
                           per_category=args.per_category, limit=args.limit)
    model, tokenizer = load_default_model()
    vocab = int(model.config.vocab_size)
    tic = time.perf_counter()
    recs = []
    for i, prompt in enumerate(prompts):
        recs.append(record(model, encode_prompt(tokenizer, prompt.text), args.max_new_tokens))
        print(f"[{i + 1}/{len(prompts)}] recorded, {time.perf_counter() - tic:.0f} s", file=sys.stderr, flush=True)
    rows = []
    head = " ".join(f"{m + '/' + t:>16s}" for m, t in COLUMNS)
    print(f"{'C':>4s} {head} {'expected/paper':>15s} {'fitted/paper':>13s} {'bound':>7s} {'bound/paper':>12s}")
    for c in caps:
        mats = {}
        online, fitted = fitted_replay(recs, vocab, c)
        mats["racer", "expected"], mats["racer", "fitted"] = mean_accepted_tokens(online), mean_accepted_tokens(fitted)
        for method, tree in COLUMNS:
            if (method, tree) in mats:
                continue
            lengths = []
            for rec in recs:
                lengths += replay(rec, Drafter(method, vocab_size=vocab, capacity=c, breadth=8, tree=tree))
            mats[method, tree] = mean_accepted_tokens(lengths)
        bound = mean_accepted_tokens([a for rec in recs for a in accepted_bound(rec, c)])
        paper = mats["racer", "paper"]
        print(f"{c:4d} " + " ".join(f"{mats[v]:16.3f}" for v in COLUMNS)
              + f" {mats['racer', 'expected'] / paper:15.3f} {mats['racer', 'fitted'] / paper:13.3f}"
              + f" {bound:7.3f} {bound / paper:12.3f}", flush=True)
        rows.append(dict(capacity=c, bound=bound, **{f"{m}/{t}": v for (m, t), v in mats.items()}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(source=args.dataset or args.questions, per_category=args.per_category, limit=args.limit,
                           max_new_tokens=args.max_new_tokens, prompts=len(recs), protocol="observe_rejected=False",
                           rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
