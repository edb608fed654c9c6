"""Benchmark of the retrieval automaton: Rust core vs Python twin, and memory over 1M tokens.

A deterministic real token stream (Spec-Bench questions, then GSM8K test questions and
answers, tokenized with the default model's tokenizer, SmolLM2) drives a simulated
decoding loop with the paper's settings (max_nodes=10,000, ngram=10, capacity=64):

    per step:  paths = automaton.retrieve(root, 64)          # root = the next real token
               a = accepted length: the longest retrieved path that matches the tokens that
                   really follow (the target model's greedy output, simulated)
               automaton.extend(root + the a accepted tokens)

Only ``retrieve`` and ``extend`` are timed, through the Python API (the acceptance check
stands in for the target model), in one clock interval per step (an ``extend`` and the next
``retrieve``), with the garbage collector off for both backends alike. Printed:

* median and p95 microseconds per step for Rust and for Python, each backend running alone
  on the same steps (several rounds, alternating order), and their ratio;
* the same steps with the two backends interleaved in blocks (they must agree; Rust then
  runs with colder CPU caches, closer to life between two forward passes of a model);
* one ``extend`` call of many tokens per backend (the core's speed without a Python call per
  step);
* the resident memory (RSS) of the process while the Rust automaton consumes a
  1,000,000-token stream (the real text, cycled), to show that it stays flat once full.

Targets (issue 2): Rust median < 20 us/step, Rust >= 30x faster, flat memory.

Run:  .venv/bin/python benchmarks/bench_automaton.py          (about a minute on 2 cores)
Data: $RACER_REF_SHARED/data or ../shared/data next to the repository.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

# Idle OpenBLAS threads (numpy) must not compete for this machine's few cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    root = os.environ.get("RACER_REF_SHARED")
    path = Path(root) if root else REPO.parent / "shared"
    data = path / "data"
    if not data.is_dir():
        sys.exit(f"shared data not found at {data}; set RACER_REF_SHARED to the shared/ folder")
    return data


def real_texts(data: Path) -> List[str]:
    """Spec-Bench questions (all turns), then GSM8K test questions with their answers."""
    texts = []
    with open(data / "spec_bench" / "question.jsonl", encoding="utf-8") as f:
        for line in f:
            texts.extend(json.loads(line)["turns"])
    with open(data / "gsm8k" / "test.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            texts.append(row["question"] + "\n" + row["answer"])
    return texts


def token_stream() -> Tuple[List[int], str]:
    from racer_ref.harness.models import DEFAULT_MODEL_NAME, load_default_tokenizer

    tokenizer = load_default_tokenizer()
    ids: List[int] = []
    for text in real_texts(shared_data_dir()):
        ids.extend(tokenizer.encode(text + "\n\n", add_special_tokens=False))
    return ids, DEFAULT_MODEL_NAME


def rss_mib() -> Tuple[float, float]:
    """(current RSS, peak RSS) of this process in MiB, from /proc/self/status."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return fields.get("VmRSS", float("nan")), fields.get("VmHWM", float("nan"))


def accepted_length(paths: Sequence[Sequence[int]], future: Sequence[int]) -> int:
    """Drafts accepted by greedy verification: the longest path prefix (after the root)
    that equals the tokens that really follow."""
    best = 0
    for path in paths:
        a = 0
        while a + 1 < len(path) and a < len(future) and path[a + 1] == future[a]:
            a += 1
        best = max(best, a)
    return best


def simulate(
    automaton, stream: Sequence[int], start: int, steps: int, capacity: int,
    times: Optional[np.ndarray] = None, on_tokens: Callable[[int], None] = lambda pos: None,
) -> Tuple[int, int]:
    """Run up to ``steps`` decoding steps from ``stream[start]``, writing the microseconds
    of each step (one retrieve + one extend) into ``times``; returns (tokens committed,
    steps). ``on_tokens(pos)`` is called after each step (untimed).

    One clock interval per step: it holds the ``extend`` of the step's accepted tokens and
    the ``retrieve`` of the next root, back to back (the acceptance check, untimed, needs the
    paths in between). That is the same two calls per step as "retrieve, then extend" but
    charges the clock's own cost (about 0.05 us a reading here) once per step, not twice.
    The first ``retrieve`` is untimed; each timed step commits one block and drafts once.
    The garbage collector is off while timing (see ``timed``)."""
    clock = time.perf_counter_ns
    pos = start
    end = len(stream) - 1
    n = 0
    if steps <= 0 or pos >= end:
        return 0, 0
    paths = automaton.retrieve(stream[pos], capacity)
    with timed():
        while n < steps and pos < end:
            a = accepted_length(paths, stream[pos + 1 : pos + 1 + 16])
            block = stream[pos : pos + 1 + a]
            nxt = pos + 1 + a
            # The last step of the stream has no next root: it drafts for its own root again.
            root = stream[nxt] if nxt < end else stream[pos]
            t0 = clock()
            automaton.extend(block)
            paths = automaton.retrieve(root, capacity)
            t1 = clock()
            if times is not None:
                times[n] = (t1 - t0) / 1000
            pos = nxt
            n += 1
            on_tokens(pos)
    return pos - start, n


class timed:
    """``with timed():`` turns Python's garbage collector off for a timed loop, the same for
    both backends (the twin allocates far more objects, so a collection would otherwise land
    in its timings unevenly), and back on afterwards if it was on."""

    def __enter__(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was_enabled:
            gc.enable()
        gc.collect()


def simulate_side_by_side(
    rust, python, stream: Sequence[int], start: int, steps: int, capacity: int, block: int = 200
) -> Tuple[np.ndarray, np.ndarray, int, int]:
    """The same decoding steps on both backends, alternating blocks of ``block`` steps so
    that both see the same machine load while each keeps its own data in cache."""
    times = np.zeros((2, steps))
    positions = [start, start]
    done = 0
    while done < steps:
        n = min(block, steps - done)
        counts = []
        for k, automaton in enumerate((rust, python)):
            tokens, ran = simulate(automaton, stream, positions[k], n, capacity, times[k, done:])
            positions[k] += tokens
            counts.append(ran)
        # Identical automata make identical drafts, hence identical acceptance.
        assert positions[0] == positions[1] and counts[0] == counts[1], "backends disagree"
        done += counts[0]
        if counts[0] < n:
            break
    return times[0, :done], times[1, :done], positions[0] - start, done


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-nodes", type=int, default=10_000)
    parser.add_argument("--ngram", type=int, default=10)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--warmup-tokens", type=int, default=20_000,
                        help="tokens committed before timing, so that the trie is full")
    parser.add_argument("--steps", type=int, default=3_000,
                        help="timed steps, the same ones for both backends")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed rounds per backend (fresh automaton each)")
    parser.add_argument("--bulk-tokens", type=int, default=20_000,
                        help="tokens of the one-call extend comparison")
    parser.add_argument("--stream-tokens", type=int, default=1_000_000,
                        help="length of the memory run (Rust only)")
    parser.add_argument("--memory-run", metavar="STREAM_NPY", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_run:
        memory_run(args)
        return

    from racer_ref import Automaton as RustAutomaton
    from racer_ref.reference import Automaton as PythonAutomaton

    stream, model = token_stream()
    print(f"token stream: {len(stream):,} tokens (Spec-Bench + GSM8K test, {model} tokenizer)")
    print(f"settings: max_nodes={args.max_nodes:,} ngram={args.ngram} capacity={args.capacity}; "
          f"warm-up {args.warmup_tokens:,} tokens, then {args.steps:,} timed steps")

    # ---- speed: each backend alone on the same steps, after the same warm-up --------------
    classes = {"rust": RustAutomaton, "python": PythonAutomaton}
    times = {"rust": [], "python": []}
    for r in range(args.rounds):
        # Alternate the order between rounds so that slow drifts of the machine's load
        # affect both backends alike.
        for name in (("rust", "python") if r % 2 == 0 else ("python", "rust")):
            automaton = classes[name](args.max_nodes, args.ngram)
            automaton.extend(stream[: args.warmup_tokens])
            gc.collect()
            us = np.zeros(args.steps)
            tokens, steps = simulate(automaton, stream, args.warmup_tokens, args.steps, args.capacity, us)
            times[name].append(us[:steps])
    st = automaton.stats()
    print(f"timed: {steps:,} steps x {args.rounds} rounds per backend, {tokens:,} tokens "
          f"({tokens / steps:.2f} tokens/step), trie full ({st['nodes']:,} nodes, "
          f"{st['evictions']:,} evictions so far)")
    medians = {}
    for name in ("rust", "python"):
        us = np.concatenate(times[name])
        medians[name] = np.median(us)
        print(f"{name:>8}: median {medians[name]:8.2f} us/step   p95 {np.percentile(us, 95):8.2f} us/step")
    print(f"   ratio: Python / Rust = {medians['python'] / medians['rust']:.1f}x (medians)")

    # ---- the same steps interleaved: both agree; Rust with colder caches ------------------
    rust, python = RustAutomaton(args.max_nodes, args.ngram), PythonAutomaton(args.max_nodes, args.ngram)
    for automaton in (rust, python):
        automaton.extend(stream[: args.warmup_tokens])
    rust_us, python_us, tokens, steps = simulate_side_by_side(
        rust, python, stream, args.warmup_tokens, args.steps, args.capacity
    )
    print(f"interleaved in blocks of 200 steps (same trees, same acceptance on both): Rust median "
          f"{np.median(rust_us):.2f} us/step, p95 {np.percentile(rust_us, 95):.2f} us/step; the "
          f"twin's work between blocks evicts Rust's data from the CPU caches, as a model's "
          f"forward pass would")

    # ---- the same work without a Python -> Rust call per step ---------------------------
    chunk = stream[args.warmup_tokens + tokens : args.warmup_tokens + tokens + args.bulk_tokens]
    per_token = []
    for automaton in (rust, python):
        t0 = time.perf_counter()
        automaton.extend(chunk)
        per_token.append((time.perf_counter() - t0) / len(chunk) * 1e6)
    print(f"bulk extend of {len(chunk):,} tokens in one call (full trie): Rust {per_token[0]:.2f} "
          f"us/token, Python {per_token[1]:.2f} us/token, ratio {per_token[1] / per_token[0]:.1f}x")
    assert rust.dump() == python.dump(), "the backends disagree"

    # ---- memory: a long stream through the Rust automaton, in a fresh process ------------
    # (This process holds the tokenizer and whatever the twin freed, which would hide the
    # automaton's own few MiB in the RSS.)
    cycled = (stream * (args.stream_tokens // len(stream) + 2))[: args.stream_tokens + 64]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stream.npy"
        np.save(path, np.asarray(cycled, dtype=np.int64))
        cmd = [sys.executable, __file__, "--memory-run", str(path),
               "--max-nodes", str(args.max_nodes), "--ngram", str(args.ngram),
               "--capacity", str(args.capacity), "--stream-tokens", str(args.stream_tokens)]
        subprocess.run(cmd, check=True)


def memory_run(args: argparse.Namespace) -> None:
    """Simulated decoding of ``--stream-tokens`` tokens with the Rust automaton, printing
    the process's RSS along the way (run in a fresh process by ``main``)."""
    from racer_ref import Automaton as RustAutomaton

    stream = np.load(args.memory_run).tolist()
    # Preallocated and written once, so that the timings do not grow the process.
    times = np.full(args.stream_tokens, np.nan)
    gc.collect()
    base, _ = rss_mib()
    automaton = RustAutomaton(args.max_nodes, args.ngram)
    marks = [m for m in (1_000, 10_000, 100_000, 250_000, 500_000, 750_000) if m < args.stream_tokens]
    marks.append(args.stream_tokens)
    print(f"memory: Rust, simulated decoding of {args.stream_tokens:,} tokens (the text cycled) "
          f"in a fresh process; RSS before the automaton {base:.1f} MiB")
    state = {"next": 0}

    def report(pos: int) -> None:
        while state["next"] < len(marks) and pos >= marks[state["next"]]:
            rss, _ = rss_mib()
            print(f"   after {marks[state['next']]:>9,} tokens: RSS {rss:7.1f} MiB "
                  f"({rss - base:+5.1f} MiB), trie nodes {automaton.len():,}")
            state["next"] += 1

    t0 = time.perf_counter()
    tokens, steps = simulate(automaton, stream, 0, args.stream_tokens, args.capacity, times, report)
    elapsed = time.perf_counter() - t0
    rss, peak = rss_mib()
    us = times[:steps]
    st = automaton.stats()
    print(f"   {tokens:,} tokens in {steps:,} steps ({elapsed:.1f} s including the simulation): "
          f"median {np.median(us):.2f} us/step, p95 {np.percentile(us, 95):.2f} us/step, "
          f"{tokens / steps:.2f} tokens/step, {st['evictions']:,} evictions")
    print(f"   peak RSS {peak:.1f} MiB; RSS now {rss:.1f} MiB ({rss - base:+.1f} MiB since before "
          f"the automaton)")


if __name__ == "__main__":
    main()
