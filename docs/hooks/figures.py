"""MkDocs hook: the site's figures, drawn at build time from the code itself.

Every figure is computed by racer-ref's Python twin (or read from committed benchmark
results) and drawn with matplotlib into an SVG that is added to the site as a generated
file; nothing is committed as an image, so a figure cannot show an outdated algorithm.

    figures/trie-failure-links.svg   the automaton of "abcabdab" (ngram 3), failure links,
                                     matching state, failure chain and borders for root 'c'
    figures/logits-tree-shape.svg    the logits tree of Eq. 3 (k = 8, C = 64, distinct tokens)
    figures/draft-tree.svg           a merged draft tree: sources and the accepted path
    figures/tree-mask.svg            its tree attention mask
    figures/acceptance.svg           MAT per method from docs/data/bench/*.jsonl, when present

For slides: ``python docs/hooks/figures.py --out DIR`` (or ``make figures``) writes each of
them as PNG (200 dpi), SVG and PDF into DIR (``--formats``, ``--dpi`` to choose).
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
BENCH_DATA = ROOT / "docs" / "data" / "bench"


def _importable() -> None:
    """Make ``racer_ref`` importable from the source tree, even when it is not installed.

    (MkDocs restores ``sys.path`` after loading a hook, so this runs at build time.)
    """
    if str(ROOT / "python") not in sys.path:
        sys.path.insert(0, str(ROOT / "python"))


import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# Colours of the draft-tree sources (root, retrieval, logits, both): Paul Tol's colour-blind
# safe "bright" scheme; logits (yellow) and both (green) also differ in lightness.
SOURCE_COLOURS = {0: "#bbbbbb", 1: "#4477aa", 2: "#ccbb44", 3: "#228833"}
SOURCE_NAMES = {0: "root", 1: "retrieval", 2: "logits", 3: "both"}


# --------------------------------------------------------------------------------------
# A tidy tree layout: leaves on consecutive slots, parents centred over their children.
# --------------------------------------------------------------------------------------
def tree_layout(parents: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
    """x, y of each node of a tree given by ``parents`` (-1 at the root, BFS order)."""
    n = len(parents)
    children: List[List[int]] = [[] for _ in range(n)]
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    x = np.zeros(n)
    depth = np.zeros(n)
    next_leaf = [0.0]

    def place(i: int, d: int) -> None:
        depth[i] = d
        if not children[i]:
            x[i] = next_leaf[0]
            next_leaf[0] += 1
            return
        for c in children[i]:
            place(c, d + 1)
        x[i] = (x[children[i][0]] + x[children[i][-1]]) / 2

    place(0, 0)
    return x, depth


def to_svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


# --------------------------------------------------------------------------------------
# 1. The trie with failure links (the example of the automaton page and tutorial 2).
# --------------------------------------------------------------------------------------
def trie_failure_links():
    from racer_ref.reference import Automaton

    letters = "abcd"
    automaton = Automaton(max_nodes=100, ngram=3)
    automaton.extend([letters.index(c) for c in "abcabdab"])
    dump = automaton.dump()
    ids = lambda s: tuple(int(t) for t in s.split())  # noqa: E731
    pattern = re.compile(r"state \[([\d ]*)\] freq=(\d+) fail=\[([\d ]*)\]")
    states = [(ids(m.group(1)), int(m.group(2)), ids(m.group(3)))
              for m in map(pattern.match, dump.splitlines()) if m]
    matching = ids(re.search(r"matching=\[([\d ]*)\]", dump).group(1))
    order = [()] + [s for s, _, _ in states]
    index = {s: i for i, s in enumerate(order)}
    parents = [-1] + [index[s[:-1]] for s in order[1:]]
    freq = {s: f for s, f, _ in states}
    fail = {s: f for s, _, f in states}
    # The failure chain of the matching state and the borders for root 'c'.
    chain = [matching]
    while chain[-1] != ():
        chain.append(fail[chain[-1]])
    root = letters.index("c")
    borders = [s + (root,) for s in chain if s + (root,) in index and len(s) + 1 >= 2]
    x, depth = tree_layout(parents)
    y = -depth
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for i, p in enumerate(parents):
        if p >= 0:
            ax.plot([x[p], x[i]], [y[p], y[i]], color="#444444", lw=1.2, zorder=1)
    for s, f in fail.items():
        i, j = index[s], index[f]
        to_root = f == ()
        ax.annotate(
            "", xy=(x[j], y[j]), xytext=(x[i], y[i]),
            arrowprops=dict(arrowstyle="-|>", color="#cccccc" if to_root else "#ee7733",
                            lw=0.8 if to_root else 1.3, ls="--",
                            connectionstyle="arc3,rad=0.25", shrinkA=9, shrinkB=9),
            zorder=0,
        )
    for s, i in index.items():
        on_chain = s in chain
        face = "#ccddaa" if s in borders else ("#fff2cc" if on_chain else "white")
        edge = "#222222" if s == matching else "#666666"
        ax.scatter([x[i]], [y[i]], s=620, c=face, edgecolors=edge,
                   linewidths=2.5 if s == matching else 1, zorder=2)
        label = "∅" if s == () else "".join(letters[t] for t in s)
        ax.text(x[i], y[i], label, ha="center", va="center", fontsize=9, zorder=3)
        if s != ():
            ax.text(x[i], y[i] - 0.3, f"{freq[s]}", ha="center", va="center", fontsize=7,
                    color="#555555")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            Line2D([], [], color="#ee7733", ls="--", label="failure link"),
            Line2D([], [], color="#cccccc", ls="--", label="failure link to the root"),
            Patch(facecolor="white", edgecolor="#222222", lw=2.5, label="matching state 'dab'"),
            Patch(facecolor="#fff2cc", edgecolor="#666666", label="its failure chain"),
            Patch(facecolor="#ccddaa", edgecolor="#666666", label="borders for root 'c'"),
        ],
        loc="lower left", fontsize=7, frameon=False, bbox_to_anchor=(0.0, -0.28), ncol=3,
    )
    ax.set_title("Trie of 'abcabdab' (ngram = 3): node string, frequency below", fontsize=10)
    ax.axis("off")
    ax.set_ylim(y.min() - 0.5, 0.4)
    return fig


# --------------------------------------------------------------------------------------
# 2. The logits tree shape of Eq. 3.
# --------------------------------------------------------------------------------------
def logits_tree_shape(k: int = 8, capacity: int = 64):
    from racer_ref import Drafter

    # Row v of the table holds the ids 8v+1 .. 8v+8: every node of the tree is distinct.
    rows = 700
    drafter = Drafter(method="logits", vocab_size=k * rows + k + 1, capacity=capacity,
                      breadth=k, backend="python")
    token_ids = np.arange(rows)
    drafter.observe(token_ids, k * token_ids[:, None] + 1 + np.arange(k)[None, :])
    tree = drafter.draft(0)
    parents = tree.parents.tolist()
    # Breadth of each node by Eq. 3 (root k; child j of p: max(1, b_p >> (j + [p != root]))).
    breadth = [k] + [0] * (len(parents) - 1)
    rank: Dict[int, int] = {}
    for i in range(1, len(parents)):
        p = parents[i]
        j = rank.get(p, 0)
        rank[p] = j + 1
        breadth[i] = max(1, breadth[p] >> (j + (p != 0)))
    counts = np.bincount(tree.depths).tolist()
    x, depth = tree_layout(parents)
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for i, p in enumerate(parents):
        if p >= 0:
            ax.plot([x[p], x[i]], [-depth[p], -depth[i]], color="#888888", lw=0.8, zorder=1)
    colours = plt.get_cmap("viridis")(np.log2(np.array(breadth)) / np.log2(k))
    ax.scatter(x, -depth, s=150, c=colours, edgecolors="#333333", linewidths=0.6, zorder=2)
    for i, b in enumerate(breadth):
        ax.text(x[i], -depth[i], str(b), ha="center", va="center", fontsize=6,
                color="white" if b < k else "black", zorder=3)
    for d, c in enumerate(counts):
        ax.text(x.max() + 1.5, -d, f"depth {d}: {c}", va="center", fontsize=8)
    ax.set_title(f"Logits tree, k = {k}, C = {capacity}, all tokens distinct: "
                 f"{' / '.join(map(str, counts))} nodes per depth (labels: breadth b)", fontsize=10)
    ax.axis("off")
    return fig


# --------------------------------------------------------------------------------------
# 3 and 4. A merged draft tree with sources and the accepted path, and its mask.
# --------------------------------------------------------------------------------------
DRAFT_TEXT = (
    "def add ( a , b ) : return a + b ; "
    "def sub ( a , b ) : return a - b ; "
    "def diff ( a , b ) : return"
)
DRAFT_TRUTH = "a - b ; def"


def example_draft_tree():
    """(tree, words, accepted node indices) for the figures: a short code context."""
    from racer_ref import Drafter

    words = DRAFT_TEXT.split() + DRAFT_TRUTH.split()
    vocab: Dict[str, int] = {}
    for w in words:
        vocab.setdefault(w, len(vocab))
    context = [vocab[w] for w in DRAFT_TEXT.split()]
    truth = [vocab[w] for w in DRAFT_TRUTH.split()]
    k = 3
    # ngram = 4 keeps the retrieval paths short, so that the logits tree shows too.
    drafter = Drafter(method="racer", vocab_size=len(vocab), capacity=16, breadth=k,
                      ngram=4, backend="python")
    # A stand-in for the target's top-k at each context position: the word that really came
    # next, then the words that followed the same word elsewhere, then the most frequent.
    follow: Dict[int, List[int]] = {}
    for a, b in zip(context, context[1:]):
        follow.setdefault(a, []).append(b)
    frequent = [t for t, _ in sorted(((t, context.count(t)) for t in set(context)),
                                     key=lambda kv: (-kv[1], kv[0]))]
    topk = []
    for i, t in enumerate(context[:-1]):
        row = [context[i + 1]]
        for c in follow.get(t, []) + frequent:
            if c not in row:
                row.append(c)
        topk.append(row[:k])
    drafter.observe(context[:-1], np.array(topk))
    # The last context token is the root: committed tokens are everything before it.
    drafter.commit(context[:-1])
    tree = drafter.draft(context[-1])
    # The accepted path: follow the true continuation down the tree.
    children: Dict[int, List[int]] = {}
    for i, p in enumerate(tree.parents.tolist()):
        children.setdefault(p, []).append(i)
    accepted = [0]
    for t in truth:
        nxt = [c for c in children.get(accepted[-1], []) if tree.tokens[c] == t]
        if not nxt:
            break
        accepted.append(nxt[0])
    id_to_word = {i: w for w, i in vocab.items()}
    return tree, [id_to_word[int(t)] for t in tree.tokens], accepted


def draft_tree_figure():
    tree, words, accepted = example_draft_tree()
    parents = tree.parents.tolist()
    x, depth = tree_layout(parents)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for i, p in enumerate(parents):
        if p >= 0:
            on_path = i in accepted and p in accepted
            ax.plot([x[p], x[i]], [-depth[p], -depth[i]], color="#222222" if on_path else "#999999",
                    lw=3 if on_path else 1, zorder=1)
    for i, w in enumerate(words):
        src = int(tree.sources[i])
        ax.scatter([x[i]], [-depth[i]], s=900, c=SOURCE_COLOURS[src],
                   edgecolors="#000000" if i in accepted else "#666666",
                   linewidths=3 if i in accepted else 0.8, zorder=2)
        ax.text(x[i], -depth[i], f"{i}\n{w}", ha="center", va="center", fontsize=7,
                color="white" if src in (1, 3) else "black", zorder=3)
    from matplotlib.patches import Patch

    # Only the sources that occur in this tree (here no node is retrieval-only: every
    # retrieval node was proposed by the logits tree too, so it is "both").
    present = sorted({int(s) for s in tree.sources})
    ax.legend(handles=[Patch(facecolor=SOURCE_COLOURS[s], edgecolor="#666666", label=SOURCE_NAMES[s])
                       for s in present],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_title(f"Draft tree for root 'return' after '... def diff ( a , b ) :' "
                 f"({len(words)} nodes, capacity 16, k = 3, ngram = 4)\naccepted: "
                 f"{' '.join(words[i] for i in accepted[1:])!r} (a = {len(accepted) - 1})",
                 fontsize=9)
    ax.set_ylim(-depth.max() - 0.5, 0.5)
    ax.set_xlim(x.min() - 0.6, x.max() + 0.6)
    ax.axis("off")
    return fig


def tree_mask_figure():
    tree, words, accepted = example_draft_tree()
    mask = tree.attention_mask
    n = len(words)
    fig, ax = plt.subplots(figsize=(5.2, 5))
    ax.imshow(mask, cmap="Blues", vmin=0, vmax=1.4)
    labels = [f"{i} {w}" for i, w in enumerate(words)]
    ax.set_xticks(range(n), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(n), labels, fontsize=7)
    ax.set_xlabel("key (node j)")
    ax.set_ylabel("query (node i)")
    for i in accepted:
        ax.add_patch(plt.Rectangle((-0.5, i - 0.5), n, 1, fill=False, ec="#aa3377", lw=1.2))
    ax.set_title("mask[i, j]: j is i or an ancestor of i\n(accepted path's rows outlined)",
                 fontsize=9)
    return fig


# --------------------------------------------------------------------------------------
# 5. Acceptance from committed benchmark results (docs/data/bench/<name>/results.jsonl).
# --------------------------------------------------------------------------------------
def acceptance_figure():
    """Per committed run: MAT per method (bars) and the distribution of the tokens per step
    a + 1 over all steps (how often a step emitted 1, 2, 3, ... tokens), from results.jsonl."""
    runs = sorted(BENCH_DATA.glob("*/results.jsonl"))
    if not runs:
        fig, ax = plt.subplots(figsize=(6, 1.2))
        ax.text(0.5, 0.5, "no benchmark results committed yet (docs/data/bench/<set>/results.jsonl)",
                ha="center", va="center", fontsize=9)
        ax.axis("off")
        return fig
    fig, axes = plt.subplots(len(runs), 2, figsize=(10, 3.2 * len(runs)), squeeze=False)
    for (ax_mat, ax_hist), path in zip(axes, runs):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        methods = [m for m in dict.fromkeys(r["method"] for r in rows)]
        lengths = {m: [a for r in rows if r["method"] == m for a in r.get("accepted_lengths") or []]
                   for m in methods}
        # MAT over all steps of all prompts: the mean of a + 1 (docs/explanation/spec.md, Terms).
        mat = [float(np.mean(lengths[m]) + 1) if lengths[m] else
               sum(r["mean_accepted_tokens"] * r["steps"] for r in rows if r["method"] == m)
               / max(1, sum(r["steps"] for r in rows if r["method"] == m)) for m in methods]
        ax_mat.barh(methods, mat, color="#4477aa")
        for i, v in enumerate(mat):
            ax_mat.text(v, i, f" {v:.2f}", va="center", fontsize=8)
        ax_mat.invert_yaxis()
        ax_mat.set_xlim(0, max(mat) * 1.2)
        ax_mat.set_xlabel("MAT (mean of a + 1 over all steps)")
        ax_mat.set_title(f"{path.parent.name}: {len({r['prompt_id'] for r in rows})} prompts", fontsize=9)
        # Tokens per step, a + 1, as everywhere else (racer_ref.bench's plots, MAT).
        top = max((max(v) for v in lengths.values() if v), default=0) + 1
        for m in methods:
            if lengths[m] and m not in ("ar", "hf-greedy"):
                share = np.bincount(np.asarray(lengths[m]) + 1, minlength=top + 1) / len(lengths[m])
                ax_hist.plot(np.arange(1, top + 1), share[1:], marker="o", ms=3, label=m)
        from matplotlib.ticker import MaxNLocator

        ax_hist.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax_hist.set_xlabel("tokens per step (a + 1)")
        ax_hist.set_ylabel("share of steps")
        ax_hist.legend(fontsize=7, frameon=False)
        ax_hist.set_title("distribution of tokens per step", fontsize=9)
    fig.tight_layout()
    return fig


FIGURES: Dict[str, Callable[[], "plt.Figure"]] = {
    "figures/trie-failure-links.svg": trie_failure_links,
    "figures/logits-tree-shape.svg": logits_tree_shape,
    "figures/draft-tree.svg": draft_tree_figure,
    "figures/tree-mask.svg": tree_mask_figure,
    "figures/acceptance.svg": acceptance_figure,
}


def on_files(files, config):
    from mkdocs.structure.files import File

    _importable()
    plt.rcParams["svg.hashsalt"] = "racer-ref"  # stable ids: identical SVGs on every build
    for name, draw in FIGURES.items():
        files.append(File.generated(config, name, content=to_svg(draw())))
    return files


def write_figures(out: Path, formats: Sequence[str] = ("png", "svg", "pdf"), dpi: int = 200) -> List[Path]:
    """Write every figure of the site into ``out`` in each of ``formats`` (PNG at ``dpi``:
    200 dpi makes the 9-inch-wide figures 1800 px wide, sharp on a 1080p slide)."""
    _importable()
    plt.rcParams["svg.hashsalt"] = "racer-ref"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in FIGURES.items():
        fig = draw()
        for fmt in formats:
            path = out / f"{Path(name).stem}.{fmt}"
            # A white background: slides are not always white, and the SVGs are transparent.
            fig.savefig(path, format=fmt, dpi=dpi, bbox_inches="tight", facecolor="white",
                        metadata={"Date": None} if fmt == "svg" else None)
            written.append(path)
        plt.close(fig)
    return written


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Write every figure of the site for slides.")
    parser.add_argument("out_dir", nargs="?", type=Path, help="(same as --out)")
    parser.add_argument("--out", type=Path, default=None, help="folder (default figures-out)")
    parser.add_argument("--formats", default="png,svg,pdf", help="comma-separated (default png,svg,pdf)")
    parser.add_argument("--dpi", type=int, default=200, help="PNG resolution (default 200)")
    args = parser.parse_args(argv)
    out = args.out or args.out_dir or Path("figures-out")
    for path in write_figures(out, [f for f in args.formats.split(",") if f], args.dpi):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
