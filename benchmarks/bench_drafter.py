"""Benchmark: time to build one draft tree, Rust core vs Python twin.

What is timed: one full drafting step through the public API, ``racer_ref.Drafter.draft``
(retrieval from the automaton, logits tree from the copy-logit table, merge, flatten into
numpy arrays, wrap into a ``DraftTree``), with the paper's defaults: capacity 64, k = 8,
n = 10 and an automaton of max_nodes = 10,000 that is full (warmed on a real token stream).

The token stream is GSM8K (questions and answers) tokenized with the default model's
tokenizer. The copy-logit table is filled without running a model: row v holds the k most
frequent successors of v in the warm-up stream (a bigram model; padded with the most frequent
tokens). Then, for each token of a held-out part of the stream, we time ``draft(token)`` and
(untimed) commit the token, as a decoding loop would.

Printed: (A) Rust alone, --steps roots: median and p95; (B) Rust and Python on the same
--python-steps roots in alternating blocks (same machine load for both), their medians and
p95s, the ratio of the medians, and whether all trees were identical; (C) the Rust cost of
the step's other two calls, observe and commit. The CPU may be shared: run it twice.

Both draft trees are measured, one after the other (``--tree both``, the default): the
expected tree (``tree="expected"``, with its acceptance estimates) and the paper's merge
(``tree="paper"``, the default of ``racer_ref.Drafter``, which runs no estimates). The
estimates start from their priors here (no verify pass labels them), which does not change
the cost of a step.

Targets (issues 3 and 18): Rust median under 50 us per step for each tree, Rust at least 30x
faster than Python.

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
    from racer_ref.harness.models import load_default_tokenizer

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
                ngram=args.ngram, max_nodes=args.max_nodes, backend=backend, tree=args.tree)
    d.observe(table_tokens, table_rows)
    for chunk in np.array_split(warm, max(1, len(warm) // 4096)):
        d.commit(chunk)
    return d


def time_steps(drafter, roots) -> tuple[list[float], list[tuple], list[int], list[int]]:
    """Microseconds of ``draft(root)`` per root; commit(root) between steps (untimed).

    Trees are dropped after each step, as in a decoding loop (keeping thousands of them
    alive would make every step allocate fresh memory); we keep a fingerprint
    (tokens, parents, sources) and the sizes.
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
    p.add_argument("--block", type=int, default=100, help="roots per alternating block in the comparison")
    p.add_argument("--max-chars", type=int, default=400_000, help="characters of GSM8K to tokenize")
    p.add_argument("--tree", default="both", choices=("both", "expected", "paper"),
                   help="which draft tree to time (default both, one after the other)")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    if args.tree == "both":
        figures = {}
        for tree in ("expected", "paper"):
            print(f"=== tree={tree!r}")
            one = argparse.Namespace(**{**vars(args), "tree": tree, "json": None})
            code, figures[tree] = run(one)
            if code:
                return code
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
        return 0
    code, results = run(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return code


def run(args: argparse.Namespace) -> tuple:
    """One tree: sections A, B, C; returns (exit code, figures)."""
    stream, vocab_size = token_stream(args.max_chars)
    need = args.warm_tokens + max(args.steps, args.python_steps)
    if len(stream) < need:
        print(f"stream has {len(stream)} tokens, need {need}: raise --max-chars", file=sys.stderr)
        return 2, {}
    warm, test = stream[: args.warm_tokens], stream[args.warm_tokens:]
    table_tokens, table_rows = bigram_topk(warm, vocab_size, args.breadth)
    print(f"token stream: {len(stream)} GSM8K tokens (vocab {vocab_size}); warm-up {len(warm)}, "
          f"copy-logit rows {len(table_tokens)}")

    results = {}
    # A. Rust alone, in a tight loop: the headline figure.
    t0 = time.perf_counter()
    rust = make_drafter("rust", args, vocab_size, warm, table_tokens, table_rows)
    warm_s = time.perf_counter() - t0
    times, prints, nodes, retrieval = time_steps(rust, test[: args.steps])
    med, p95 = summary(times)
    results["rust"] = dict(median_us=med, p95_us=p95, steps=args.steps, mean_nodes=float(np.mean(nodes)),
                           mean_retrieval_nodes=float(np.mean(retrieval)),
                           automaton_nodes=rust.automaton_nodes, warmup_s=warm_s)
    print(f"rust   : median {med:9.1f} us   p95 {p95:9.1f} us   ({args.steps} steps; "
          f"{np.mean(nodes):.1f} nodes/tree, {np.mean(retrieval):.1f} from retrieval; automaton "
          f"{rust.automaton_nodes} nodes; warm-up {warm_s:.1f} s)")

    # B. Rust and Python on the same roots, in alternating blocks of --block roots (each
    # backend in its own loop, so each keeps its own data in cache as it would in a real
    # decoding loop, while both see the same machine load); the trees must be identical.
    t0 = time.perf_counter()
    pair = {b: make_drafter(b, args, vocab_size, warm, table_tokens, table_rows) for b in ("rust", "python")}
    warm_s = time.perf_counter() - t0
    paired = {"rust": [], "python": []}
    fingerprints = {"rust": [], "python": []}
    roots = test[: args.python_steps]
    for start in range(0, len(roots), args.block):
        for b in ("rust", "python"):
            times, prints, _, _ = time_steps(pair[b], roots[start:start + args.block])
            paired[b] += times
            fingerprints[b] += prints
    same = fingerprints["rust"] == fingerprints["python"]
    (py_med, py_p95), (rs_med, rs_p95) = summary(paired["python"]), summary(paired["rust"])
    ratio = py_med / rs_med
    results["python"] = dict(median_us=py_med, p95_us=py_p95, steps=args.python_steps, warmup_s=warm_s)
    results["paired_rust"] = dict(median_us=rs_med, p95_us=rs_p95)
    results["ratio_median"] = ratio
    results["identical_trees"] = same
    print(f"python : median {py_med:9.1f} us   p95 {py_p95:9.1f} us   ({args.python_steps} steps, "
          f"alternating blocks with Rust on the same roots; Rust there: median {rs_med:.1f} us, "
          f"p95 {rs_p95:.1f} us; warm-up {warm_s:.1f} s)")

    # The other two calls of a decoding step (Rust, public API): observe(every node of the
    # tree with its top-k ids) and commit(root).
    d = make_drafter("rust", args, vocab_size, warm, table_tokens, table_rows)
    rng = np.random.default_rng(0)
    clock = time.perf_counter_ns
    obs, com = [], []
    for root in test[: args.steps].tolist():
        tokens = d.draft(root).tokens
        topk = rng.integers(0, vocab_size, (len(tokens), args.breadth))
        t0 = clock()
        d.observe(tokens, topk)
        t1 = clock()
        d.commit([root])
        t2 = clock()
        obs.append((t1 - t0) / 1000.0)
        com.append((t2 - t1) / 1000.0)
    obs_med, com_med = summary(obs)[0], summary(com)[0]
    results.update(rust_observe_median_us=obs_med, rust_commit_median_us=com_med)

    print(f"ratio (Python median / Rust median, same roots, alternating blocks): {ratio:.0f}x   "
          f"identical trees: {same}")
    print(f"Rust, the other calls of a step (medians): observe(tree nodes, their top-k) "
          f"{obs_med:.1f} us; commit(root) {com_med:.1f} us")
    ok_speed = results["rust"]["median_us"] < 50.0
    ok_ratio = ratio >= 30.0
    print(f"targets: Rust median < 50 us: {'yes' if ok_speed else 'NO'};  >= 30x faster than "
          f"Python: {'yes' if ok_ratio else 'NO'}")
    return 0, results


if __name__ == "__main__":
    sys.exit(main())
