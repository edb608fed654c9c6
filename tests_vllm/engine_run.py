"""Run one vLLM engine on the test prompts and print what it did as one JSON line.

Used by test_vllm.py (one subprocess per engine, so that engines never share a process, a
metrics registry or memory); runnable alone:

    .venv-vllm/bin/python tests_vllm/engine_run.py --method racer --model DIR

Methods: ``plain`` (no speculative decoding), ``racer`` (racer_ref.integrations.vllm.RacerProposer),
``racer-retrieval`` (racer_ref.integrations.vllm.RacerRetrievalProposer), ``ngram`` (vLLM's own prompt
lookup). Greedy, float32, ``enforce_eager``. Printed: the generated token ids of each prompt
run alone (batch of 1, one after another) and of all prompts submitted at once (a batch),
wall seconds and generated tokens of both phases, vLLM's speculative-decoding counters
(drafts, draft tokens, accepted tokens) per phase, and, for RACER, the proposer's own
counters (read from the worker with ``collective_rpc``).
"""

from __future__ import annotations

import argparse
import json
import os
import time

# Offline and quiet: no usage reports, no downloads.
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: plenty for 135M
# collective_rpc sends proposer_stats (a function) to the worker by pickle: allowed for this
# local test process only.
os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")

#: Prompts with something to copy (lists, code, a repeated sentence) and one without.
PROMPTS = [
    "List the days of the week, one per line. Then list them again in reverse order.\n\nMonday\n",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"
    "    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\ndef factorial(n):\n",
    "Repeat the sentence five times. The quick brown fox jumps over the lazy dog. "
    "The quick brown fox jumps over the lazy dog.",
    "Write a short story about a robot who learns to paint.",
]

SPECULATIVE = {
    "plain": None,
    "racer": {"method": "custom_class", "model": "racer_ref.integrations.vllm.RacerProposer"},
    "racer-retrieval": {"method": "custom_class", "model": "racer_ref.integrations.vllm.RacerRetrievalProposer"},
    "ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5},
}


def spec_counters(llm) -> dict:
    """vLLM's speculative-decoding counters (totals since the engine started)."""
    names = {"vllm:spec_decode_num_drafts": "drafts",
             "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted_tokens"}
    out = dict.fromkeys(names.values(), 0)
    for metric in llm.get_metrics():
        if metric.name in names:
            out[names[metric.name]] += int(metric.value)
    return out


def delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after}


def proposer_stats(worker) -> dict:
    """Run on the worker (collective_rpc): the RACER proposer's counters and live drafters."""
    drafter = worker.model_runner.drafter
    return dict(drafter.stats, live_drafters=len(drafter.drafters), created=drafter.drafters.created)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=sorted(SPECULATIVE), required=True)
    parser.add_argument("--model", required=True, help="a Hugging Face model folder")
    parser.add_argument("--k", type=int, default=5, help="num_speculative_tokens")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()

    from vllm import LLM, SamplingParams

    spec = SPECULATIVE[args.method]
    if spec is not None:
        spec = dict(spec, num_speculative_tokens=args.k)
    started = time.perf_counter()
    llm = LLM(model=args.model, dtype="float32", enforce_eager=True, max_model_len=1024,
              max_num_seqs=len(PROMPTS), seed=0, speculative_config=spec, disable_log_stats=False)
    start_s = time.perf_counter() - started
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=False)
    llm.generate(["Hello"], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)  # warm-up

    result = {"method": args.method, "k": args.k, "start_s": start_s}
    # Batch of 1: each prompt alone, one after another.
    before = spec_counters(llm)
    t0 = time.perf_counter()
    single = [list(llm.generate([p], params, use_tqdm=False)[0].outputs[0].token_ids) for p in PROMPTS]
    result["single"] = {"tokens": single, "wall_s": time.perf_counter() - t0,
                        "new_tokens": sum(map(len, single)), "spec": delta(spec_counters(llm), before)}
    # A batch: every prompt submitted at once (the engine runs them concurrently).
    before = spec_counters(llm)
    t0 = time.perf_counter()
    outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    batch = [list(o.outputs[0].token_ids) for o in outputs]
    result["batch"] = {"tokens": batch, "wall_s": time.perf_counter() - t0,
                       "new_tokens": sum(map(len, batch)), "spec": delta(spec_counters(llm), before)}
    if args.method.startswith("racer"):
        result["proposer"] = llm.collective_rpc(proposer_stats)[0]
    print("ENGINE_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
