"""Benchmark: what verifying one chain instead of the whole tree costs RACER, in MAT.

vLLM verifies one chain of K draft tokens per request and step; RACER verifies a tree. With
our own loop (``racer_ref.generate``, greedy) on the same prompts we decode with

* ``tree``: the RACER draft tree (capacity --capacity, the paper's 64), verified whole;
* ``chain@K``: the best chain of that same tree (``racer_ref.integrations.chain.ChainDrafter``: the
  first-child path, retrieval first, then copy-logit), K = each of --lengths: what the
  vLLM proposer (``racer_ref.integrations.vllm``) proposes;

and print MAT (mean accepted tokens per verify step, pooled over the prompts of a dataset)
and whether every output equals the tree's. MAT counts forward passes, not seconds: the
figures do not depend on the machine's load. Per-request drafters (a new one per prompt).

    .venv/bin/python benchmarks/bench_chain.py                       # defaults below
    .venv/bin/python benchmarks/bench_chain.py --datasets humaneval --limit 10 --lengths 3,5,10
"""

from __future__ import annotations

import argparse
import sys

from racer_ref import Drafter, generate
from racer_ref.integrations.chain import ChainDrafter
from racer_ref.harness.datasets import encode_prompt, load_prompts
from racer_ref.harness.models import load_default_model
from racer_ref.metrics import mean_accepted_tokens
from racer_ref.reference.limits import DEFAULT_CAPACITY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="humaneval,mtbench", help="comma-separated dataset names")
    parser.add_argument("--limit", type=int, default=8, help="prompts per dataset (first N)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--capacity", type=int, default=DEFAULT_CAPACITY)
    parser.add_argument("--lengths", default="5,10", help="chain lengths K, comma-separated")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]

    model, tokenizer = load_default_model()
    vocab = model.config.vocab_size
    print(f"default model, greedy, max_new_tokens={args.max_new_tokens}, tree capacity {args.capacity}, "
          f"{args.limit} prompts per dataset, a new drafter per prompt")
    print(f"{'dataset':10s} {'variant':9s} {'MAT':>5s} {'steps':>6s} {'tokens':>7s}  same output as tree")
    for dataset in args.datasets.split(","):
        prompts = load_prompts(dataset=dataset, limit=args.limit)
        variants = ["tree"] + [f"chain@{k}" for k in lengths]
        accepted = {v: [] for v in variants}
        tokens = {v: 0 for v in variants}
        same = {v: 0 for v in variants}
        for prompt in prompts:
            ids = encode_prompt(tokenizer, prompt.text, chat=prompt.chat)
            outputs = {}
            for v in variants:
                drafter = Drafter("racer", vocab, args.capacity)
                if v != "tree":
                    drafter = ChainDrafter(drafter, int(v.split("@")[1]))
                result = generate(model, prompt=ids, max_new_tokens=args.max_new_tokens, drafter=drafter)
                accepted[v] += result.accepted_lengths
                tokens[v] += len(result.token_ids)
                outputs[v] = result.token_ids
            for v in variants:
                same[v] += outputs[v] == outputs["tree"]
            print(f"  {dataset} {prompt.prompt_id}: done", file=sys.stderr, flush=True)
        for v in variants:
            mat = mean_accepted_tokens(accepted[v])
            print(f"{dataset:10s} {v:9s} {mat:5.2f} {len(accepted[v]):6d} {tokens[v]:7d}  {same[v]}/{len(prompts)}")


if __name__ == "__main__":
    main()
