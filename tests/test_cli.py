"""The ``racer-ref`` command line and the demo, end to end on a tiny random model folder."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from models import single_thread, tiny_model  # noqa: F401
from racer_ref.app import cli
from racer_ref.app.demo import DEMO_MAX_NEW_TOKENS


@pytest.fixture(scope="module")
def tokenizer():
    from racer_ref.harness.models import load_default_tokenizer

    return load_default_tokenizer()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    """A local Hugging Face folder: tiny random Llama + the default model's tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-model")
    tiny_model("llama", vocab_size=len(tokenizer), seed=2, scale=4.0, max_positions=512).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_entry_point_is_declared():
    tomllib = pytest.importorskip("tomllib")
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["racer-ref"] == "racer_ref.app.cli:main"
    assert callable(cli.main)


def test_parser_defaults_and_choices():
    args = cli.build_parser().parse_args(["generate", "hi"])
    assert (args.method, args.capacity, args.max_new_tokens, args.temperature, args.baseline) == \
        ("racer", None, 128, 0.0, "hf-greedy")  # None: the device's default, resolved at load
    cpu, gpu = type("M", (), {"device": torch.device("cpu")})(), type("M", (), {"device": torch.device("cuda")})()
    assert (cli.default_capacity(None, cpu), cli.default_capacity(None, gpu), cli.default_capacity(8, cpu)) == \
        (16, 64, 8)
    # With compiled passes: the largest size built, also one measured not faster (left eager).
    def with_passes(sizes, not_faster):
        model = type("M", (), {"device": torch.device("cpu")})()
        model.forward = type("F", (), {"compiled": type("P", (), {"sizes": sizes, "not_faster": not_faster})()})()
        return model
    assert (cli.default_capacity(None, with_passes([1, 8], [])), cli.default_capacity(None, with_passes([1], [16])),
            cli.default_capacity(None, with_passes([], [1, 16])), cli.default_capacity(4, with_passes([1], [16]))) == \
        (8, 16, 16, 4)
    args = cli.build_parser().parse_args(["bench", "--dataset", "humaneval", "--methods", "ar,racer",
                                          "--capacity", "auto", "--limit", "3"])
    assert (args.methods, args.capacity, args.limit, args.out) == (["ar", "racer"], "auto", 3, "bench-out")
    assert args.cpu_kernels == "auto"


def test_every_option_with_a_default_shows_it_in_help():
    import argparse

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    silent = [f"{name} {action.option_strings[0]}" for name, sub in commands.items() for action in sub._actions
              if action.option_strings and action.default not in (None, False, argparse.SUPPRESS)
              and "default" not in (action.help or "")]
    assert silent == []
    assert "(default 128)" in commands["generate"].format_help()
    assert "(default racer)" in commands["generate"].format_help()
    assert f"(default {DEMO_MAX_NEW_TOKENS})" in commands["demo"].format_help()


@pytest.mark.parametrize("argv, message", [
    (["generate", "--capacity", "0", "hi"], "argument --capacity: capacity: must be in [1, 4096], got 0"),
    (["generate", "--capacity", "x", "hi"], "capacity: must be an int in [1, 4096] or 'auto', got 'x'"),
    (["generate", "--method", "hf-pld", "hi"], 'argument --method: method: unknown method "hf-pld"; expected one of'),
    (["bench", "--methods", "ar,foo", "--dataset", "humaneval"], "methods: expected names from ar, hf-greedy"),
    (["bench", "--methods", "ar"], "one of the arguments --dataset --questions is required"),
    (["bench", "--dataset", "humaneval", "--questions", "x.jsonl"], "not allowed with argument"),
    # Refused when parsing, before the model loads (they used to end in a traceback after it).
    (["generate", "--temperature", "-1", "hi"], "--temperature: expected 0 (greedy) or a finite number > 0, got '-1'"),
    (["generate", "--temperature", "nan", "hi"], "--temperature: expected 0 (greedy) or a finite number > 0"),
    (["generate", "--max-new-tokens", "-1", "hi"], "--max-new-tokens: expected an integer >= 1, got '-1'"),
    (["demo", "--max-new-tokens", "0"], "--max-new-tokens: expected an integer >= 1, got '0'"),
    (["generate", "--threads", "0", "hi"], "--threads: expected an integer >= 1"),
    (["generate", "--trace-out", "tree.txt", "hi"], "--trace-out: expected a .html, .png, .svg or .pdf file"),
    (["generate", "--trace-max-nodes", "0", "hi"], "--trace-max-nodes: expected an integer >= 1"),
    (["bench", "--dataset", "humaneval", "--repeats", "0"], "--repeats: expected an integer >= 1"),
    (["bench", "--dataset", "humaneval", "--limit", "-2"], "--limit: expected an integer >= 1"),
    (["bench", "--dataset", "humaneval", "--per-category", "0"], "--per-category: expected an integer >= 1"),
    (["generate", "--seed", str(2**64), "hi"], "--seed: expected an integer in [-2**63, 2**64)"),
    (["generate", "--seed", "1.5", "hi"], "--seed: expected an integer in [-2**63, 2**64), got '1.5'"),
])
def test_bad_arguments_exit_with_a_clear_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_generate_streams_traces_and_compares_with_greedy(model_dir, tmp_path, capsys):
    png = tmp_path / "tree.png"
    html = tmp_path / "trace.html"
    argv = ["generate", "--model", str(model_dir), "--device", "cpu", "--max-new-tokens", "10",
            "--capacity", "8", "--trace", "--trace-out", str(png), "Tell me a story."]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "step 0 · " in out and "accepted" in out
    assert "racer        10 new tokens" in out and "hf-greedy    10 new tokens     9 steps  MAT  1.00" in out
    assert "speedup of racer over hf-greedy:" in out and "output identical: yes" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert cli.main(argv[:-3] + ["--trace-out", str(html), "--baseline", "none", "Tell me a story."]) == 0
    out = capsys.readouterr().out
    assert "speedup" not in out and "<html" in html.read_text().lower()


def test_generate_auto_capacity_against_our_own_greedy_loop(model_dir, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("A prompt from standard input."))
    argv = ["generate", "--model", str(model_dir), "--device", "cpu", "--max-new-tokens", "8",
            "--capacity", "auto", "--baseline", "ar", "--no-chat", "-"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # the console wraps long lines
    assert "capacity auto: used " in flat and "tokens per step predicted " in flat  # predicted vs realised
    assert "speedup of racer over ar:" in out and "output identical: yes" in out


def test_bench_writes_results_and_summary(model_dir, tmp_path, capsys):
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in [
        {"question_id": 1, "category": "a", "turns": ["Say one thing.", "Now another."]},
        {"question_id": 2, "category": "a", "turns": ["Say two things."]},
        {"question_id": 3, "category": "b", "turns": ["Count to three."]},
    ]))
    out = tmp_path / "out"
    argv = ["bench", "--model", str(model_dir), "--device", "cpu", "--methods", "ar,hf-greedy,racer",
            "--questions", str(questions), "--per-category", "1", "--max-new-tokens", "6",
            "--capacity", "16", "--out", str(out), "--no-progress"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # --turns all (the default): question 1's second turn is a generation of its own.
    assert [(r["prompt_id"], r["turn"], r["method"]) for r in rows] == [
        (q, t, m) for q, t in [("1", 1), ("1", 2), ("3", 1)] for m in ("ar", "hf-greedy", "racer")]
    assert all(r["matches_ar"] and r["new_tokens"] == 6 for r in rows)
    assert printed == (out / "summary.md").read_text() + "\n"
    assert "| `racer` | 3 | 18 |" in printed and f"- source: {questions}" in printed
    assert "### Per turn" in printed and "- turns: all" in printed
    # --cpu-kernels auto (the default) routed the tiny Llama's 15 linear layers where packed kernels exist
    from racer_ref.speedups.cpu_kernels import available_kernels

    routed = 15 if len(available_kernels()) > 1 else 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["command"] == "racer-ref " + " ".join(argv) and meta["turns"] == "all"
    assert (meta["warmup_runs"], meta["warmup_tokens"], meta["context_method"]) == (1, 6, "ar")
    assert meta["routed_linears"] == routed and f"- routed linears: {routed}" in printed
    assert meta["cpu_kernels"]["fast_forward"] is True and len(meta["load_average"]) == 3
    if routed:
        assert set(meta["cpu_kernels"]["choice"]) == {"layers", "lm_head"} and "- cpu kernels (" in printed
    # --attn auto (the default): the tiny Llama groups its 4 query heads over 2 key/value heads
    assert json.loads((out / "meta.json").read_text())["attn_implementation"] == "sdpa_gqa"
    assert cli.main(argv[:-3] + ["--out", str(tmp_path / "off"), "--cpu-kernels", "off", "--attn", "sdpa",
                              "--no-progress"]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "off" / "meta.json").read_text())["routed_linears"] == 0
    assert json.loads((tmp_path / "off" / "meta.json").read_text())["cpu_kernels"] is None
    assert json.loads((tmp_path / "off" / "meta.json").read_text())["attn_implementation"] == "sdpa"
    assert all(json.loads(line)["matches_ar"] for line in (tmp_path / "off" / "results.jsonl").read_text().splitlines())
    assert cli.main(["summarize", str(out), "--no-plots"]) == 0
    assert "### Overall" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no results.jsonl"):
        cli.main(["summarize", str(tmp_path)])


@pytest.fixture
def transformers_log():
    """The records transformers logs at WARNING or above during the test (its ``warning_once``
    memory cleared first, so that a message an earlier test caused counts again)."""
    import logging

    from transformers.utils import logging as hf_logging

    hf_logging.warning_once.cache_clear()
    records: list = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def test_plain_runs_print_no_warnings(tokenizer, tmp_path, capsys, transformers_log):
    """generate, bench and demo with plain settings: no Python warning and nothing logged by
    transformers (it warned about a missing attention mask on every call once, for a model
    whose pad token is its EOS token, as the default model's)."""
    import warnings

    folder = tmp_path / "tiny-eos"
    tiny = tiny_model("llama", vocab_size=len(tokenizer), seed=2, scale=4.0, max_positions=512,
                      eos_token_id=tokenizer.eos_token_id)  # pad token = EOS token
    tiny.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    model = ["--model", str(folder), "--device", "cpu", "--capacity", "8"]
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "a", "turns": ["Say one thing."]}) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["generate", "--max-new-tokens", "6", *model, "Tell me a story."]) == 0
        assert cli.main(["bench", "--methods", "ar,hf-greedy,hf-pld,racer", "--questions", str(questions),
                         "--max-new-tokens", "6", "--out", str(tmp_path / "out"), "--no-progress", "--no-plots",
                         *model]) == 0
        assert cli.main(["demo", "--max-new-tokens", "4", *model]) == 0
    assert "output identical: yes" in capsys.readouterr().out
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
    assert [r.getMessage() for r in transformers_log] == []


def test_bench_reports_data_errors_without_a_traceback(tmp_path):
    with pytest.raises(SystemExit, match="questions: no such file"):
        cli.main(["bench", "--questions", str(tmp_path / "missing.jsonl"), "--methods", "ar"])


def test_demo_runs_racer_against_greedy(model_dir):
    from rich.console import Console

    from racer_ref.app.demo import DEMO_PROMPTS
    from racer_ref.harness.models import load_model

    model, tok = load_model(model_dir)
    console = Console(record=True, width=200, file=open("/dev/null", "w"))
    rows = cli.run_demo(model, tok, max_new_tokens=8, capacity=8, console=console)
    assert [r["prompt"] for r in rows] == [p.label for p in DEMO_PROMPTS] == ["passage", "code", "turn 2"]
    assert all(r["same_output"] and r["racer_tokens"] == r["greedy_tokens"] == 8 for r in rows)
    assert all(r["greedy_steps"] == 7 and r["speedup"] > 0 for r in rows)
    # Two timed runs of each method, interleaved; the faster one is reported.
    for r in rows:
        assert len(r["racer_runs_s"]) == len(r["greedy_runs_s"]) == 2
        assert r["racer_s"] == min(r["racer_runs_s"]) and r["greedy_s"] == min(r["greedy_runs_s"])
        # Every accepted draft is counted once, by the tree that proposed it.
        assert sum(r["accepted_from"].values()) == round((r["racer_mat"] - 1) * r["racer_steps"])
        assert r["why"].startswith(f"{sum(r['accepted_from'].values())} accepted drafts") or \
            r["why"].startswith("no draft was accepted")
    text = console.export_text()
    assert "RACER (capacity 8) vs plain greedy (model.generate), up to 8 new tokens" in text
    assert "same output" in text and "2 timed runs per method, interleaved" in text
    assert "mean speedup over model.generate: " in text and "load average (1 min): " in text
    # The prompts are printed as written: code in square brackets is not taken for markup.
    assert "words = [w.strip('.,;:!?') for w in text.split()]" in text
    mean = sum(r["speedup"] for r in rows) / 3
    assert f"mean speedup over model.generate: {mean:.2f}x" in text


def test_demo_second_turn_continues_the_first(model_dir, monkeypatch):
    """The follow-up's prompt is the first prompt, the first answer as the assistant's
    message, then the follow-up (the chat template of a two-turn conversation)."""
    from rich.console import Console

    from racer_ref.app import demo
    from racer_ref.harness.datasets import encode_conversation
    from racer_ref.harness.models import load_model

    model, tok = load_model(model_dir)
    seen = []
    real = demo.TextStreamer

    class Recording(real):
        def finish(self):
            seen.append(list(self.ids))
            super().finish()

    monkeypatch.setattr(demo, "TextStreamer", Recording)
    prompts = [demo.DemoPrompt("a", "Rewrite: the cat sat."), ("b", "Shorter, please.", "a")]
    console = Console(record=True, width=200, file=open("/dev/null", "w"))
    rows = demo.run_demo(model, tok, max_new_tokens=6, capacity=8, prompts=prompts, console=console,
                         repeats=1)
    assert [r["prompt"] for r in rows] == ["a", "b"] and all(len(r["racer_runs_s"]) == 1 for r in rows)
    answer = tok.decode(seen[0], skip_special_tokens=True)
    two_turns = encode_conversation(tok, ["Rewrite: the cat sat.", "Shorter, please."], [answer])
    assert rows[1]["copy_tokens"] <= 6 and len(two_turns) > len(encode_conversation(tok, ["Shorter, please."], []))
    with pytest.raises(ValueError, match="'b' follows 'z'"):
        demo.run_demo(model, tok, max_new_tokens=2, prompts=[("b", "x", "z")], console=console)
    with pytest.raises(ValueError, match="repeats"):
        demo.run_demo(model, tok, max_new_tokens=2, console=console, repeats=0)


def test_longest_copy_and_why_line():
    from racer_ref.app.demo import longest_copy, why_line

    assert longest_copy([5, 1, 2, 3, 4, 9], [7, 2, 3, 4, 8, 1]) == (1, 3)  # "2 3 4"
    assert longest_copy([1, 2], [3, 4]) == (0, 0)
    line = why_line({"retrieval": 6, "logits": 3, "both": 1}, "the cat sat", 3, "the user's message")
    assert line.startswith("10 accepted drafts: 60% from retrieval") and "30% from the copy-logit table" in line
    assert line.endswith("10% from both; longest run copied from the user's message: 3 tokens, 'the cat sat'")
    assert why_line({"retrieval": 0, "logits": 0, "both": 0}, "", 0, "x").startswith("no draft was accepted")


def test_accepted_sources_counts_the_accepted_nodes():
    import numpy as np

    from racer_ref.app.demo import accepted_sources
    from racer_ref.harness.records import TraceStep
    from racer_ref.tree import SOURCE_BOTH, SOURCE_LOGITS, SOURCE_RETRIEVAL, SOURCE_ROOT, DraftTree

    # root 4 -> 1 (retrieval) -> 2 (both); root -> 9 (copy-logit table)
    tree = DraftTree(np.array([4, 1, 2, 9]), np.array([-1, 0, 1, 0]), np.array([0, 1, 2, 1]),
                     np.ones((4, 4), dtype=bool), None,
                     np.array([SOURCE_ROOT, SOURCE_RETRIEVAL, SOURCE_BOTH, SOURCE_LOGITS], dtype=np.uint8))
    steps = [TraceStep(0, tree, accepted=[0, 1, 2]), TraceStep(1, tree, accepted=[0, 3]), TraceStep(2, tree, [0])]
    assert accepted_sources(steps) == {"retrieval": 1, "logits": 1, "both": 1}


def test_demo_flags_a_busy_machine():
    from racer_ref.app.demo import timing_warnings

    assert timing_warnings(2.4, 2) == []  # load 2.4 on 2 CPUs: the demo's own threads
    busy = timing_warnings(2.6, 2)
    assert len(busy) == 1 and "load average 2.6 on 2 CPUs" in busy[0]
    assert timing_warnings(None, None) == [] and timing_warnings(9.0, None) == []  # unknown


def test_text_streamer_never_prints_half_characters(tokenizer):
    import io

    ids = tokenizer("héllo wörld 🙂 done")["input_ids"]
    buf = io.StringIO()
    streamer = cli.TextStreamer(tokenizer, out=buf)
    for token in ids:
        streamer([token])
        assert "\ufffd" not in buf.getvalue()
    streamer.finish()
    assert buf.getvalue() == "héllo wörld 🙂 done\n"


def test_loading_a_model_prints_no_progress_bar(model_dir, capfd):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from racer_ref.harness.models import load_model

    assert hf_logging.is_progress_bar_enabled()
    AutoModelForCausalLM.from_pretrained(model_dir)  # transformers alone draws one
    assert "Loading weights" in capfd.readouterr().err
    load_model(model_dir)
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # turned back on for the caller's own loads


def test_version(capsys):
    import racer_ref

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"racer-ref {racer_ref.__version__}"


def test_generate_flags_a_busy_machine(model_dir, monkeypatch, capsys):
    """The speedup line of ``racer-ref generate`` comes with the demo's busy-machine warning."""
    import racer_ref.app.demo

    monkeypatch.setattr(racer_ref.app.demo, "_load_average", lambda: 99.0)
    args = ["generate", "--max-new-tokens", "4", "--model", str(model_dir), "--device", "cpu", "--capacity", "8", "hi"]
    assert cli.main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "warning: The machine was busy (load average 99.0" in out
    monkeypatch.setattr(racer_ref.app.demo, "_load_average", lambda: 0.0)
    assert cli.main(args) == 0
    assert "The machine was busy" not in capsys.readouterr().out
