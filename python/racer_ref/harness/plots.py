"""The three PNG plots of a ``racer-ref bench`` run (matplotlib, Agg backend): MAT per
category, speedups, and the distribution of tokens per step."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from racer_ref.harness.summary import RUN_METHODS, aggregate, speedup



def _save(fig: Any, ax: Any, title: str, path: Path) -> str:
    """Title, lay out, write (120 dpi) and close one figure; return its file name."""
    import matplotlib.pyplot as plt

    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path.name

def write_plots(rows: Sequence[Dict[str, Any]], out_dir: Union[str, Path],
                methods: Optional[Sequence[str]] = None) -> List[str]:
    """``mat_per_category.png``, ``speedup.png``, ``accepted_lengths.png`` (matplotlib, Agg).

    Returns:
        the file names written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    present = list(dict.fromkeys(r["method"] for r in rows))
    methods = [m for m in (methods or RUN_METHODS) if m in present]
    categories = list(dict.fromkeys(r["category"] for r in rows)) + ["overall"]
    colors = plt.get_cmap("tab10")
    written = []

    # 1. MAT per category and method (grouped bars).
    fig, ax = plt.subplots(figsize=(max(7, 0.3 * len(categories) * max(1, len(methods)) + 1.5), 4))
    width = 0.8 / max(1, len(methods))
    x = np.arange(len(categories))
    for j, m in enumerate(methods):
        vals = [aggregate(r for r in rows if r["method"] == m and (c == "overall" or r["category"] == c)).mat
                for c in categories]
        ax.bar(x + (j - (len(methods) - 1) / 2) * width, vals, width, label=m, color=colors(j % 10))
    ax.set_xticks(x)
    ax.set_xticklabels(categories, rotation=30, ha="right")
    ax.set_ylabel("MAT (tokens per step)")
    ax.axhline(1.0, color="#888888", lw=0.8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    written.append(_save(fig, ax, "Mean accepted tokens per step", out / "mat_per_category.png"))

    # 2. Speedup per method over ar and over hf-greedy.
    baselines = [b for b in ("ar", "hf-greedy") if b in methods]
    if baselines:
        fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(methods)), 3.6))
        width = 0.8 / len(baselines)
        x = np.arange(len(methods))
        for j, b in enumerate(baselines):
            vals = [speedup(rows, m, b) for m in methods]
            bars = ax.bar(x + (j - (len(baselines) - 1) / 2) * width, vals, width, label=f"over {b}",
                          color=["#4c72b0", "#dd8452"][j])
            for rect, v in zip(bars, vals):
                if not math.isnan(v):
                    ax.text(rect.get_x() + rect.get_width() / 2, rect.get_height(), f"{v:.2f}",
                            ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="#888888", lw=0.8)
        ax.set_xticks(x)
        ax.set_xticklabels(methods, rotation=20, ha="right")
        ax.set_ylabel("speedup (token-weighted)")
        ax.legend(fontsize=8)
        written.append(_save(fig, ax, "Wall-clock speedup", out / "speedup.png"))

    # 3. Histogram of tokens per step (a + 1) per method.
    fig, ax = plt.subplots(figsize=(8, 3.6))
    longest = max([max(r["accepted_lengths"], default=0) for r in rows] + [0]) + 1
    bins = np.arange(1, longest + 2)
    shown = [m for m in methods if m not in ("ar", "hf-greedy")] or methods
    width = 0.8 / max(1, len(shown))
    for j, m in enumerate(shown):
        lengths = [a + 1 for r in rows if r["method"] == m for a in r["accepted_lengths"]]
        if not lengths:
            continue
        counts, _ = np.histogram(lengths, bins=bins)
        ax.bar(bins[:-1] + (j - (len(shown) - 1) / 2) * width, counts / counts.sum(), width,
               label=m, color=colors(methods.index(m) % 10))
    ax.set_xlabel("tokens per step (a + 1)")
    ax.set_xticks(bins[:-1])
    ax.set_ylabel("fraction of steps")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    written.append(_save(fig, ax, "Accepted lengths", out / "accepted_lengths.png"))
    return written


def plot_calibration(calibration: Dict[str, Dict[str, Any]], out_dir: Union[str, Path]) -> str:
    """``calibration.png``: predicted vs observed acceptance of the draft-tree candidates.

    Args:
        calibration: per method name, ``calibration_seen``, ``calibration_accepted`` and
            ``calibration_predicted`` (sum of predictions) per bin of predicted probability
            (``Drafter.acceptance_stats()``, summed over runs).

    Returns:
        the file name written. A well calibrated estimate lies on the diagonal.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4.5))
    ax.plot([0, 1], [0, 1], color="#888888", lw=0.8, ls="--", label="perfect")
    colors = plt.get_cmap("tab10")
    for j, (name, rec) in enumerate(calibration.items()):
        seen = np.asarray(rec["calibration_seen"], dtype=float)
        keep = seen > 0
        if not keep.any():
            continue
        predicted = np.asarray(rec["calibration_predicted"], dtype=float)[keep] / seen[keep]
        observed = np.asarray(rec["calibration_accepted"], dtype=float)[keep] / seen[keep]
        ax.plot(predicted, observed, marker="o", color=colors(j % 10),
                label=f"{name} ({int(seen.sum())} labels)")
    ax.set_xlabel("predicted acceptance (mean per bin)")
    ax.set_ylabel("observed acceptance")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, frameon=False)
    return _save(fig, ax, "Calibration of the acceptance estimates", Path(out_dir) / "calibration.png")
