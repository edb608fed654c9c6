"""The summary of a ``racer-ref bench`` run: totals, MAT and speedups per method and category.

Reads the ``results.jsonl`` / ``meta.json`` that :func:`racer_ref.harness.bench.run_bench`
writes into the tables of ``summary.md`` (:func:`racer_ref.harness.bench.summarize`,
``racer-ref summarize``); :mod:`racer_ref.harness.plots` draws the plots from the same rows. Definitions: a **step** is one target forward pass after
the prefill; **MAT** is the mean of ``a + 1`` over all steps of all prompts; the
**speedup** of a method over a baseline is token-weighted, ``(sum wall_s / sum new_tokens)``
of the baseline divided by the same for the method, over the generations both ran (a
generation is one (prompt, turn) pair: a two-turn question gives two rows per method, told
apart by their ``turn``, 1 when a row has none).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from racer_ref.metrics import mean_accepted_tokens

#: Every method ``racer-ref bench`` runs, in the order tables list them: the drafting methods
#: of :data:`racer_ref.tree.METHODS` (``"ar"`` first) and the ``model.generate`` baselines of
#: :data:`racer_ref.harness.baselines.HF_METHODS` (``tests/test_bench.py`` checks it is exactly these).
RUN_METHODS = ("ar", "hf-greedy", "hf-pld", "pld", "logits", "logits-last", "retrieval", "racer")


def read_results(out_dir: Union[str, Path]) -> List[Dict[str, Any]]:
    """Rows of ``out_dir/results.jsonl``."""
    with open(Path(out_dir) / "results.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass
class Aggregate:
    """Totals of one method over a set of rows."""

    prompts: int
    new_tokens: int
    steps: int
    tokens_in_steps: int  # sum of a + 1 over steps
    wall_s: float
    matches: int
    checked: int

    accepted_lengths: List[int]  # pooled over the rows

    @property
    def mat(self) -> float:
        """MAT over all steps of all rows (:func:`racer_ref.metrics.mean_accepted_tokens`)."""
        return mean_accepted_tokens(self.accepted_lengths)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else math.nan

    @property
    def s_per_token(self) -> float:
        return self.wall_s / self.new_tokens if self.new_tokens else math.nan


def aggregate(rows: Iterable[Dict[str, Any]]) -> Aggregate:
    """Sum a set of rows (of one method)."""
    rows = list(rows)
    return Aggregate(
        prompts=len(rows),
        new_tokens=sum(r["new_tokens"] for r in rows),
        steps=sum(r["steps"] for r in rows),
        tokens_in_steps=sum(sum(r["accepted_lengths"]) + len(r["accepted_lengths"]) for r in rows),
        wall_s=sum(r["wall_s"] for r in rows),
        matches=sum(1 for r in rows if r.get("matches_ar") is True),
        checked=sum(1 for r in rows if r.get("matches_ar") is not None),
        accepted_lengths=[a for r in rows for a in r["accepted_lengths"]],
    )


def turn_of(row: Dict[str, Any]) -> int:
    """The row's turn (1-based; rows written before turns existed count as turn 1)."""
    return int(row.get("turn") or 1)


def speedup(rows: Sequence[Dict[str, Any]], method: str, baseline: str,
            category: Optional[str] = None, turn: Optional[int] = None) -> float:
    """Token-weighted speedup of ``method`` over ``baseline`` on the generations (prompt,
    turn) both ran, optionally of one category and / or one turn: ``(W_b / N_b) / (W_m / N_m)``.
    NaN if either is missing."""
    def pick(m: str) -> Dict[Tuple[str, int], Dict[str, Any]]:
        return {(r["prompt_id"], turn_of(r)): r for r in rows
                if r["method"] == m and (category is None or r["category"] == category)
                and (turn is None or turn_of(r) == turn)}

    a, b = pick(method), pick(baseline)
    common = [p for p in a if p in b]
    if not common:
        return math.nan
    ma, mb = aggregate(a[p] for p in common), aggregate(b[p] for p in common)
    if not (ma.new_tokens and mb.new_tokens and ma.wall_s > 0):
        return math.nan
    return mb.s_per_token / ma.s_per_token


#: Slack allowed above the MAT before a speedup over ``ar`` counts as a measurement error.
IMPLAUSIBLE_SLACK = 0.05


def implausible_speedups(rows: Sequence[Dict[str, Any]]) -> List[Tuple[str, float, float]]:
    """``(method, speedup over ar, MAT)`` for every method whose speedup over our own ``ar``
    exceeds its MAT by more than :data:`IMPLAUSIBLE_SLACK`.

    A step of a drafting method yields MAT tokens on average and costs at least a one-token
    pass of ``ar`` (same kernels, same loop), so its speedup over ``ar`` cannot exceed its MAT:
    a larger figure means the machine's load changed between the timed runs. Such a run is
    not a figure to quote or commit.
    """
    out = []
    for m in dict.fromkeys(r["method"] for r in rows):
        if m in ("ar", "hf-greedy", "hf-pld"):
            continue
        agg = aggregate(r for r in rows if r["method"] == m)
        sp = speedup(rows, m, "ar")
        if agg.mat == agg.mat and sp == sp and sp > agg.mat * (1 + IMPLAUSIBLE_SLACK):
            out.append((m, sp, agg.mat))
    return out


def _fmt(x: float, digits: int = 2, suffix: str = "") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}{suffix}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def summary_tables(rows: Sequence[Dict[str, Any]], methods: Optional[Sequence[str]] = None) -> str:
    """The Markdown tables of :func:`summarize` (overall, MAT per category, speedups per
    category), without the header."""
    present = list(dict.fromkeys(r["method"] for r in rows))
    methods = [m for m in (methods or RUN_METHODS) if m in present] + [m for m in present if m not in (methods or RUN_METHODS)]
    categories = list(dict.fromkeys(r["category"] for r in rows))
    parts = []

    def figures(m: str, sub: Iterable[Dict[str, Any]], turn: Optional[int] = None) -> List[str]:
        agg = aggregate(sub)
        return [str(agg.prompts), str(agg.new_tokens), str(agg.steps), _fmt(agg.mat), _fmt(agg.tokens_per_s, 1),
                _fmt(speedup(rows, m, "ar", turn=turn), 2, "x"), _fmt(speedup(rows, m, "hf-greedy", turn=turn), 2, "x")]

    overall = []
    for m in methods:
        agg = aggregate(r for r in rows if r["method"] == m)
        overall.append([f"`{m}`"] + figures(m, (r for r in rows if r["method"] == m))
                       + [f"{agg.matches}/{agg.checked}" if agg.checked else "n/a"])
    turns = sorted({turn_of(r) for r in rows})
    parts.append("### Overall\n\n" + _table(
        ["method", "generations" if len(turns) > 1 else "prompts", "new tokens", "steps", "MAT", "tokens/s",
         "speedup vs ar", "speedup vs hf-greedy", "matches ar"], overall))
    if len(turns) > 1:
        per_turn = []
        for m in methods:
            for t in turns + [None]:
                sub = [r for r in rows if r["method"] == m and (t is None or turn_of(r) == t)]
                if sub:
                    per_turn.append([f"`{m}`", "all" if t is None else str(t)] + figures(m, sub, t))
        parts.append("### Per turn\n\nTurn 1 counts every prompt, a later turn only the questions that have "
                     "it.\n\n" + _table(
            ["method", "turn", "generations", "new tokens", "steps", "MAT", "tokens/s", "speedup vs ar",
             "speedup vs hf-greedy"], per_turn))
    if categories:
        head = ["category"] + [f"`{m}`" for m in methods]

        def per_category(cell: Any) -> str:  # cell(method, category or None for the overall row)
            return _table(head, [[c] + [cell(m, None if c == "**overall**" else c) for m in methods]
                                 for c in categories + ["**overall**"]])

        parts.append("### MAT per category\n\n" + per_category(lambda m, c: _fmt(aggregate(
            r for r in rows if r["method"] == m and (c is None or r["category"] == c)).mat)))
        for base in ("ar", "hf-greedy"):
            if base in methods:
                parts.append(f"### Speedup over `{base}` per category (token-weighted)\n\n"
                             + per_category(lambda m, c: _fmt(speedup(rows, m, base, c), 2, "x")))
    flagged = implausible_speedups(rows)
    if flagged:
        parts.insert(0, "!!! warning \"Timing figures not to be trusted\"\n    " + "; ".join(
            f"`{m}` runs {sp:.2f}x over `ar` with MAT {mat:.2f}" for m, sp, mat in flagged)
            + ": a speedup over `ar` above the MAT is a measurement error (the machine's load changed "
            "during the run). Rerun on a quiet machine before quoting any wall-clock figure of this run.")
    return "\n\n".join(parts) + "\n"
