"""MAT of the two draft trees side by side: the expected tree vs the paper's merge.

MAT (mean accepted tokens per verify pass) is deterministic under greedy decoding, so one
run measures it exactly whatever the load of the machine. Every variant decodes every
prompt with a fresh drafter (per request); each output is checked against plain greedy
decoding (``ar``), token for token.

    python benchmarks/mat_trees.py --questions ../shared/data/spec_bench/question.jsonl \\
        --per-category 3 --out bench-out/mat-spec.json
    python benchmarks/mat_trees.py --dataset humaneval --limit 20 --out bench-out/mat-he.json

Prints one line per variant: MAT pooled over all steps of all prompts, and whether every
output equals ``ar``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from racer_ref import Drafter, generate
from racer_ref.harness.datasets import encode_prompt, load_prompts
from racer_ref.harness.models import load_default_model
from racer_ref.metrics import mean_accepted_tokens


def report(args, variants, caps, lengths, lossless, done) -> None:
    """Print (and write) the figures over the first ``done`` prompts."""
    rows = []
    print(f"--- after {done} prompts")
    for v in variants:
        method, tree, c = v
        rows.append(dict(method=method, tree=tree, capacity=c, mat=mean_accepted_tokens(lengths[v]),
                         steps=len(lengths[v]), lossless=lossless[v]))
        print(f"{method:10s} {tree:9s} C={c:3d}  MAT {rows[-1]['mat']:.3f}  steps {len(lengths[v]):5d}  "
              f"lossless {lossless[v]}")
    for c in caps:
        get = {(r["method"], r["tree"]): r["mat"] for r in rows if r["capacity"] == c}
        if ("racer", "expected") in get and ("racer", "paper") in get:
            print(f"C={c:3d}: expected / paper = {get['racer', 'expected'] / get['racer', 'paper']:.3f}")
    sys.stdout.flush()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(source=args.dataset or args.questions, per_category=args.per_category,
                           limit=args.limit, max_new_tokens=args.max_new_tokens, prompts=done, rows=rows),
                      f, indent=1)


def add_prompt_set_args(p: argparse.ArgumentParser) -> None:
    """The prompt set, output length and capacities (shared with ``mat_bound.py``)."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset")
    src.add_argument("--questions")
    p.add_argument("--per-category", type=int, default=None)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--capacities", default="4,8,16,64")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_prompt_set_args(p)
    p.add_argument("--methods", default="racer,logits,retrieval",
                   help="tree methods; racer runs with both trees, the others with --peer-trees")
    p.add_argument("--peer-trees", default="expected,paper")
    p.add_argument("--peer-capacities", default=None, help="capacities of the peers (default --capacities)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--out", default=None, help="write the figures as JSON here (after every prompt)")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    prompts = load_prompts(dataset=args.dataset, questions=args.questions,
                           per_category=args.per_category, limit=args.limit)
    model, tokenizer = load_default_model()
    vocab = int(model.config.vocab_size)
    caps = [int(c) for c in args.capacities.split(",")]
    variants = []
    for method in args.methods.split(","):
        trees = ("expected", "paper") if method == "racer" else tuple(args.peer_trees.split(","))
        own = caps if method == "racer" or not args.peer_capacities else [
            int(c) for c in args.peer_capacities.split(",")]
        for tree in trees:
            for c in own:
                variants.append((method, tree, c))
    lengths = {v: [] for v in variants}
    lossless = {v: True for v in variants}
    tic = time.perf_counter()
    for i, prompt in enumerate(prompts):
        ids = encode_prompt(tokenizer, prompt.text)
        ref = generate(model, tokenizer, ids, max_new_tokens=args.max_new_tokens, method="ar").token_ids
        for v in variants:
            method, tree, c = v
            d = Drafter(method, vocab_size=vocab, capacity=c, breadth=8, tree=tree)
            r = generate(model, tokenizer, ids, max_new_tokens=args.max_new_tokens, drafter=d)
            lengths[v].extend(r.accepted_lengths)
            lossless[v] &= list(r.token_ids) == list(ref)
        print(f"[{i + 1}/{len(prompts)}] {time.perf_counter() - tic:.0f} s", file=sys.stderr, flush=True)
        report(args, variants, caps, lengths, lossless, i + 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
