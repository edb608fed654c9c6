"""Benchmark: time to build one draft tree, Rust core vs Python twin.

What is timed: one full drafting step through the public API, ``racer_ref.Drafter.draft``
(retrieval from the automaton, logits tree from the copy-logit table, merge, flatten into
numpy arrays, wrap into a ``DraftTree``), with the paper's defaults: capacity 64, k = 8,
n = 10 and an automaton of max_nodes = 10,000 that is full (warmed on a real token stream).

The token stream is GSM8K (questions and answers) tokenized with the default model's
tokenizer. The copy-logit table is filled without running a model: row v holds the k most
frequent successors of v in the warm-up stream (a bigram model; padded with the most frequent
tokens), so every row is seen and the logits tree is always full. Then, for each token of a
held-out part of the stream, we time ``draft(token)`` and (untimed) commit the token, as a
decoding loop would.

Targets (issue 3): Rust median under 50 us per step, Rust at least 30x faster than Python.

    .venv/bin/python benchmarks/bench_drafter.py                 # defaults
    .venv/bin/python benchmarks/bench_drafter.py --method logits --steps 20000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """``$RACER_REF_SHARED/data`` or ``<repo>/../shared/data``."""
    root = os.environ.get("RACER_REF_SHARED")
    return (Path(root) if root else REPO.parent / "shared") / "data"


def token_stream(max_chars: int) -> np.ndarray:
    """GSM8K questions and answers as one token stream (int64)."""
    from racer_ref.models import load_default_tokenizer

    tokenizer = load_default_tokenizer()
    texts = []
    with open(shared_data_dir() / "gsm8k" / "test.jsonl") as f:
        for line in f:
            row = json.loads(line)
            texts.append(f"Question: {row['question']}\nAnswer: {row['answer']}\n\n")
    text = "".join(texts)[:max_chars]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64), len(tokenizer)


def bigram_topk(stream: np.ndarray, vocab_size: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For every token seen in ``stream`` (except the last), its k most frequent successors,
    padded with the stream's most frequent tokens. Returns ``(token_ids, topk_ids)``."""
    pairs = stream[:-1] * vocab_size + stream[1:]
    keys, counts = np.unique(pairs, return_counts=True)
    first, second = keys // vocab_size, keys % vocab_size
    # sort by (first token, descending count)
    order = np.lexsort((-counts, first))
    first, second = first[order], second[order]
    frequent = np.argsort(-np.bincount(stream, minlength=vocab_size))[: 2 * k]
    tokens = np.unique(first)
    starts = np.searchsorted(first, tokens)
    ends = np.append(starts[1:], len(first))
    rows = np.empty((len(tokens), k), dtype=np.int64)
    for i, (s, e) in enumerate(zip(starts, ends)):
        row = list(second[s:min(e, s + k)])
        for t in frequent:
            if len(row) == k:
                break
            if t not in row:
                row.append(t)
        rows[i] = row
    return tokens, rows


def make_drafter(backend, args, vocab_size, warm, table_tokens, table_rows):
    from racer_ref import Drafter

    d = Drafter(args.method, vocab_size=vocab_size, capacity=args.capacity, breadth=args.breadth,
                ngram=args.ngram, max_nodes=args.max_nodes, backend=backend)
    d.observe(table_tokens, table_rows)
    for chunk in np.array_split(warm, max(1, len(warm) // 4096)):
        d.commit(chunk)
    return d


def time_steps(drafter, roots) -> tuple[list[float], list[tuple], list[int], list[int]]:
    """Microseconds of ``draft(root)`` per root; commit(root) between steps (untimed).

    Trees are dropped after each step, as in a decoding loop (keeping thousands of them
    alive would make every step allocate fresh memory); we keep a fingerprint
    (tokens, parents, sources) to compare the backends, and the sizes.
    """
    times, prints, nodes, retrieval = [], [], [], []
    clock = time.perf_counter_ns
    for root in roots.tolist():
        t0 = clock()
        tree = drafter.draft(root)
        times.append((clock() - t0) / 1000.0)
        prints.append((tree.tokens.tobytes(), tree.parents.tobytes(), tree.sources.tobytes()))
        nodes.append(len(tree))
        retrieval.append(int(np.count_nonzero(tree.sources & 1)))
        del tree
        drafter.commit([root])
    return times, prints, nodes, retrieval


def summary(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[min(len(times) - 1, int(0.95 * len(times)))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", default="racer")
    p.add_argument("--capacity", type=int, default=64)
    p.add_argument("--breadth", type=int, default=8)
    p.add_argument("--ngram", type=int, default=10)
    p.add_argument("--max-nodes", type=int, default=10_000)
    p.add_argument("--warm-tokens", type=int, default=60_000, help="tokens committed before timing")
    p.add_argument("--steps", type=int, default=5_000, help="timed Rust steps")
    p.add_argument("--python-steps", type=int, default=1_000, help="timed Python steps")
    p.add_argument("--max-chars", type=int, default=400_000, help="characters of GSM8K to tokenize")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = p.parse_args(argv)

    stream, vocab_size = token_stream(args.max_chars)
    need = args.warm_tokens + max(args.steps, args.python_steps)
    if len(stream) < need:
        print(f"stream has {len(stream)} tokens, need {need}: raise --max-chars", file=sys.stderr)
        return 2
    warm, test = stream[: args.warm_tokens], stream[args.warm_tokens:]
    table_tokens, table_rows = bigram_topk(warm, vocab_size, args.breadth)
    print(f"token stream: {len(stream)} GSM8K tokens (vocab {vocab_size}); warm-up {len(warm)}, "
          f"copy-logit rows {len(table_tokens)}")

    results = {}
    prints_by_backend = {}
    for backend, steps in (("rust", args.steps), ("python", args.python_steps)):
        t0 = time.perf_counter()
        d = make_drafter(backend, args, vocab_size, warm, table_tokens, table_rows)
        warm_s = time.perf_counter() - t0
        times, prints, nodes, retrieval = time_steps(d, test[:steps])
        med, p95 = summary(times)
        nodes, retrieval = np.mean(nodes), np.mean(retrieval)
        results[backend] = dict(median_us=med, p95_us=p95, steps=steps, mean_nodes=float(nodes),
                                mean_retrieval_nodes=float(retrieval), automaton_nodes=d.automaton_nodes,
                                warmup_s=warm_s, times=times)
        prints_by_backend[backend] = prints
        print(f"{backend:6s}: median {med:9.1f} us   p95 {p95:9.1f} us   ({steps} steps; "
              f"{nodes:.1f} nodes/tree, {retrieval:.1f} from retrieval; automaton "
              f"{d.automaton_nodes} nodes; warm-up {warm_s:.1f} s)")

    # The two backends must have built the same trees.
    n = min(len(prints_by_backend["rust"]), len(prints_by_backend["python"]))
    same = prints_by_backend["rust"][:n] == prints_by_backend["python"][:n]
    # The ratio compares the same roots: Rust's first n steps against Python's n steps.
    rust_same, _ = summary(results["rust"].pop("times")[:n])
    ratio = results["python"]["median_us"] / rust_same
    results["ratio_median"] = ratio
    results["python"].pop("times")
    results["identical_trees"] = same

    # The other two calls of a decoding step (Rust): observe(every node of a 64-node tree
    # with its top-k) and commit(root). Plus the bare extension call for draft, without
    # the DraftTree wrapper.
    d = make_drafter("rust", args, vocab_size, warm, table_tokens, table_rows)
    rng = np.random.default_rng(0)
    clock = time.perf_counter_ns
    raw, obs, com = [], [], []
    for root in test[: args.steps].tolist():
        topk = rng.integers(0, vocab_size, (args.capacity, args.breadth))
        t0 = clock()
        arrays = d._impl.draft(root)
        t1 = clock()
        d.observe(arrays[0], topk[: len(arrays[0])])
        t2 = clock()
        d.commit([root])
        t3 = clock()
        raw.append((t1 - t0) / 1000.0)
        obs.append((t2 - t1) / 1000.0)
        com.append((t3 - t2) / 1000.0)
    raw_med, obs_med, com_med = summary(raw)[0], summary(obs)[0], summary(com)[0]
    results.update(rust_raw_call_median_us=raw_med, rust_observe_median_us=obs_med,
                   rust_commit_median_us=com_med)

    print(f"ratio (Python median / Rust median on the same {n} roots): {ratio:.0f}x   "
          f"identical trees: {same}")
    print(f"Rust, other calls: bare extension draft (tuple of arrays, no DraftTree) "
          f"{raw_med:.1f} us; observe(tree nodes, their top-k) {obs_med:.1f} us; "
          f"commit(root) {com_med:.1f} us (medians)")
    ok_speed = results["rust"]["median_us"] < 50.0
    ok_ratio = ratio >= 30.0
    print(f"targets: Rust median < 50 us: {'yes' if ok_speed else 'NO'};  >= 30x faster than "
          f"Python: {'yes' if ok_ratio else 'NO'}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
