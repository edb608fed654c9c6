"""The benchmark runs committed under docs/data/bench are figures a reader can trust (issue 13).

The documentation draws its headline tables from these folders, so a run whose timings are
a measurement error must not be committed: a drafting method's speedup over our own ``ar``
cannot exceed its MAT (each step costs at least one ``ar`` pass and yields MAT tokens), and
every run records the hardware and, from the runs of 2026-12-01 on, the machine's load.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from racer_ref.harness.summary import IMPLAUSIBLE_SLACK, implausible_speedups

RUNS = sorted(p for p in (Path(__file__).resolve().parents[1] / "docs" / "data" / "bench").iterdir() if p.is_dir())


def test_there_are_committed_runs():
    assert len(RUNS) >= 2, "docs/data/bench should hold the Spec-Bench and HumanEval runs the docs quote"


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_committed_run_is_plausible_and_says_where_it_ran(run: Path):
    meta = json.loads((run / "meta.json").read_text())
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line.strip()]
    assert rows, f"{run.name}: results.jsonl is empty"
    assert implausible_speedups(rows) == [], (
        f"{run.name}: a speedup over ar above the MAT: rerun it on a quiet machine before committing it")
    for key in ("cpu", "cpu_count", "torch_threads", "date", "dtype", "max_new_tokens"):
        assert meta.get(key) is not None, f"{run.name}: meta.json lacks {key!r}"
    if meta["date"] >= "2026-12-01":
        assert meta.get("load_average") is not None, f"{run.name}: meta.json lacks the machine's load"
    # Every greedy output of a drafting method was checked against ar, token for token.
    for row in rows:
        if row["method"] not in ("ar", "hf-greedy", "hf-pld") and float(meta.get("temperature", 0)) == 0:
            assert row.get("matches_ar") is True, f"{run.name}: {row['method']} differs from ar on {row['prompt_id']}"


def test_tutorial_08_transcript_quotes_plausible_speedups():
    """The committed transcript of tutorial 08 is what a reader sees on the docs page: its
    benchmark table must not show a speedup above the MAT (a run on a busy machine)."""
    transcript = Path(__file__).resolve().parents[1] / "tutorials" / "transcripts" / "08_racer_on_a_real_model.txt"
    text = transcript.read_text(encoding="utf-8")
    assert "measurement error" not in text, "tutorial 08's transcript was recorded on a busy machine"
    rows = re.findall(r"^  (\w+) +(\S+) \((\d+)\) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+)x +(True|False)$", text, re.M)
    assert len(rows) >= 4, "tutorial 08's benchmark table not found in its transcript"
    for prompt, method, capacity, steps, mat, tokens_per_s, speedup, same in rows:
        assert same == "True", f"{prompt} {method} ({capacity}) differs from ar"
        assert float(speedup) <= float(mat) * (1 + IMPLAUSIBLE_SLACK), (
            f"{prompt} {method} ({capacity}): {speedup}x with MAT {mat}: rerun tutorial 08 on a quiet machine")
