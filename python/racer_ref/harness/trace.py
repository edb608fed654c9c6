"""Draw what happened at each decoding step: draft trees, their sources and the accepted path.

The steps come from :class:`racer_ref.harness.records.StepRecorder` (a drafter wrapper that records
every step's tree and accepted path); this module only renders them.

Renderers:

* :func:`render_step` / :func:`print_trace`: a terminal view (rich). Single-child chains are
  drawn on one line, so a deep retrieval path reads like text::

      step 3 · 64 nodes (retrieval 21 · logits 40 · both 2) · accepted 4
      ' the' ✓
      ├── ' cat' ✓ → ' sat' ✓ → ' on' ✓ → ' the' ✓ → ' mat'      retrieval
      ├── ' dog' → ' ran'                                           logits
      ...

  Colours: root bold, retrieval cyan, logits yellow, both magenta; accepted nodes green
  with a check mark.
* :func:`save_trace`: the same view as HTML (``.html``, through rich's recorder), or one
  step drawn as a picture (``.png`` / ``.svg`` / ``.pdf``, matplotlib).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from racer_ref.harness.records import StepRecorder, TraceStep, accepted_path  # noqa: F401 (old racer_ref.trace names)
from racer_ref.tree import (
    SOURCE_BOTH,
    SOURCE_LOGITS,
    SOURCE_RETRIEVAL,
    SOURCE_ROOT,
    DraftTree,
)

#: Name and rich style of each ``sources`` value.
SOURCE_STYLE = {
    SOURCE_ROOT: ("root", "bold"),
    SOURCE_RETRIEVAL: ("retrieval", "cyan"),
    SOURCE_LOGITS: ("logits", "yellow"),
    SOURCE_BOTH: ("both", "magenta"),
}
#: Matplotlib colours for the same sources (picture output).
SOURCE_COLOR = {SOURCE_ROOT: "#dddddd", SOURCE_RETRIEVAL: "#8fd3f4", SOURCE_LOGITS: "#f6e08a",
                SOURCE_BOTH: "#e3a6f0"}


# ----------------------------------------------------------------------------- terminal


def token_label(tokenizer: Any, token: int) -> str:
    """A token as a short quoted string (``repr`` of its text; ``#id`` without a tokenizer)."""
    if tokenizer is None:
        return f"#{token}"
    text = tokenizer.decode([int(token)])
    return repr(text) if text else f"#{token}"


def source_counts(tree: DraftTree) -> Dict[str, int]:
    """Nodes per source name (root excluded)."""
    counts = {name: 0 for code, (name, _) in SOURCE_STYLE.items() if code != SOURCE_ROOT}
    for code in tree.sources[1:].tolist():
        counts[SOURCE_STYLE[int(code)][0]] += 1
    return counts


def step_header(step: TraceStep) -> str:
    """One line: step, nodes per source, accepted length."""
    counts = " · ".join(f"{k} {v}" for k, v in source_counts(step.tree).items() if v)
    a = max(0, len(step.accepted) - 1)
    extra = f" · capacity {step.capacity}" if step.capacity is not None else ""
    ms = f" · {step.seconds * 1e3:.0f} ms" if step.seconds is not None else ""
    nodes = f"{len(step.tree)} node{'s' if len(step.tree) != 1 else ''}"
    return (f"step {step.step} · {nodes}" + (f" ({counts})" if counts else "")
            + f" · accepted {a}{extra}{ms}")


def render_step(step: TraceStep, tokenizer: Any = None, max_nodes: Optional[int] = None) -> Any:
    """A ``rich.tree.Tree`` of one step; chains of single children share a line.

    Args:
        step: the recorded step.
        tokenizer: to show token text (ids otherwise).
        max_nodes: draw at most this many nodes (accepted ones always), then ``… n more``.

    Returns:
        a ``rich.tree.Tree`` (print it with a rich ``Console``).
    """
    from rich.text import Text
    from rich.tree import Tree

    tree = step.tree
    kids = tree.children()
    on_path = set(step.accepted)
    tokens = tree.tokens.tolist()
    sources = tree.sources.tolist()
    budget = [max_nodes if max_nodes is not None else len(tree)]
    hidden = [0]

    def label(node: int) -> Any:
        name, style = SOURCE_STYLE[int(sources[node])]
        text = Text(token_label(tokenizer, tokens[node]), style=style)
        if node in on_path:
            text.stylize("bold green")
            text.append(" ✓", style="bold green")
        return text

    def chain_text(node: int) -> tuple:
        """Label of ``node`` and of its single-child descendants; returns (text, last node)."""
        text = label(node)
        budget[0] -= 1
        while len(kids[node]) == 1 and (budget[0] > 0 or kids[node][0] in on_path):
            node = kids[node][0]
            text.append(" → ", style="dim")
            text.append_text(label(node))
            budget[0] -= 1
        name = SOURCE_STYLE[int(sources[node])][0]
        if node != 0:
            text.append(f"   {name}", style="dim")
        return text, node

    root_text = label(0)
    root_text.append(f"   {step_header(step)}", style="dim")
    out = Tree(root_text, guide_style="dim")

    def grow(branch: Any, node: int) -> None:
        # Accepted child first, so the accepted path reads straight down.
        order = sorted(kids[node], key=lambda c: c not in on_path)
        for child in order:
            if budget[0] <= 0 and child not in on_path:
                hidden[0] += _subtree_size(kids, child)
                continue
            text, last = chain_text(child)
            sub = branch.add(text)
            grow(sub, last)

    grow(out, 0)
    if hidden[0]:
        out.add(Text(f"… {hidden[0]} more nodes", style="dim"))
    return out


def _subtree_size(kids: List[List[int]], node: int) -> int:
    size, stack = 0, [node]
    while stack:
        n = stack.pop()
        size += 1
        stack.extend(kids[n])
    return size


def legend() -> Any:
    """A one-line colour legend."""
    from rich.text import Text

    text = Text("sources: ")
    for code in (SOURCE_RETRIEVAL, SOURCE_LOGITS, SOURCE_BOTH):
        name, style = SOURCE_STYLE[code]
        text.append(name, style=style)
        text.append("  ")
    text.append("accepted ✓", style="bold green")
    return text


def print_trace(steps: Sequence[TraceStep], tokenizer: Any = None, console: Any = None,
                max_nodes: Optional[int] = None) -> None:
    """Print every step's tree (see :func:`render_step`) to ``console`` (default: stdout)."""
    from rich.console import Console

    console = console or Console()
    console.print(legend())
    for step in steps:
        console.print(render_step(step, tokenizer, max_nodes=max_nodes))


# ----------------------------------------------------------------------------- files


def save_trace(steps: Sequence[TraceStep], path: Union[str, Path], tokenizer: Any = None,
               step: Optional[int] = None, max_nodes: Optional[int] = None) -> Path:
    """Save the trace: ``.html`` (every step, as in the terminal) or a picture of one step.

    Args:
        steps: recorded steps (non-empty).
        path: ``*.html``, ``*.png``, ``*.svg`` or ``*.pdf``.
        tokenizer: for token text.
        step: the step to draw in a picture (default: the one with the longest accepted
            path, the first such on ties).
        max_nodes: as in :func:`render_step` (HTML only).

    Returns:
        the path written.

    Raises:
        ValueError: no steps, an unknown suffix, or ``step`` out of range.
    """
    path = Path(path)
    if not steps:
        raise ValueError("steps: nothing to save (no verify step was recorded)")
    suffix = path.suffix.lower()
    if suffix == ".html":
        from rich.console import Console

        console = Console(record=True, width=160, file=open(os.devnull, "w"))
        print_trace(steps, tokenizer, console=console, max_nodes=max_nodes)
        console.save_html(str(path), inline_styles=True)
        console.file.close()
        return path
    if suffix not in (".png", ".svg", ".pdf"):
        raise ValueError(f"path: expected a .html, .png, .svg or .pdf file, got {path.name!r}")
    if step is None:
        step = max(range(len(steps)), key=lambda i: (len(steps[i].accepted), -i))
    if not 0 <= step < len(steps):
        raise ValueError(f"step: expected an index in [0, {len(steps)}), got {step}")
    draw_step(steps[step], path, tokenizer)
    return path


def draw_step(step: TraceStep, path: Union[str, Path], tokenizer: Any = None) -> None:
    """Draw one step's draft tree with matplotlib (Agg): depth left to right, one row per
    leaf, boxes coloured by source, the accepted path in thick green edges."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tree = step.tree
    kids = tree.children()
    # y of a leaf = its rank among leaves (DFS order); y of an inner node = mean of its children.
    order, stack = [], [0]
    while stack:
        order.append(stack.pop())
        stack.extend(reversed(kids[order[-1]]))
    leaves = [node for node in order if not kids[node]]
    y = {node: float(rank) for rank, node in enumerate(leaves)}
    for node in range(len(tree) - 1, -1, -1):  # a child comes after its parent: placed first
        if kids[node]:
            y[node] = float(np.mean([y[c] for c in kids[node]]))
    depth = tree.depths.tolist()
    n_rows = max(1, len(leaves))
    fig_h = max(2.5, 0.28 * n_rows + 1.0)
    fig_w = max(4.0, 1.6 * (max(depth) + 1) + 1.0)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    on_path = set(step.accepted)
    for node, parent in enumerate(tree.parents.tolist()):
        if parent < 0:
            continue
        good = node in on_path and parent in on_path
        ax.plot([depth[parent], depth[node]], [y[parent], y[node]],
                color="#2e9e44" if good else "#bbbbbb", lw=2.5 if good else 0.8, zorder=1)
    for node in range(len(tree)):
        text = token_label(tokenizer, int(tree.tokens[node]))
        if len(text) > 14:
            text = text[:13] + "…"
        ax.text(depth[node], y[node], text, ha="center", va="center", fontsize=7, zorder=2,
                fontweight="bold" if node in on_path else "normal",
                bbox=dict(boxstyle="round,pad=0.25", fc=SOURCE_COLOR[int(tree.sources[node])],
                          ec="#2e9e44" if node in on_path else "#888888",
                          lw=1.8 if node in on_path else 0.6))
    ax.set_xlim(-0.6, max(depth) + 0.6)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_xticks(range(max(depth) + 1))
    ax.set_xlabel("depth below the root")
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(fc=SOURCE_COLOR[c], ec="#888888", label=SOURCE_STYLE[c][0])
                       for c in (SOURCE_RETRIEVAL, SOURCE_LOGITS, SOURCE_BOTH)],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    ax.set_title(step_header(step), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
