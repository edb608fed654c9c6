"""MkDocs hook: the site's figures, drawn at build time from the code itself.

Every figure is computed by racer-ref's Python twin (or read from committed benchmark
results) and drawn with matplotlib into an SVG that is added to the site as a generated
file; nothing is committed as an image, so a figure cannot show an outdated algorithm.

    figures/trie-failure-links.svg   the automaton of "abcabdab" (ngram 3): the trie, and its
                                     failure links drawn as the tree they form, with the
                                     matching state, failure chain and borders for root 'c'
    figures/lru-list.svg             a full trie with recency ranks and its doubly linked
                                     recency list (head = most recent, tail = leaf evicted next)
    figures/kv-cache-step.svg        one verify pass in the KV cache: prefix + tree tokens, then
                                     the accepted path gathered into consecutive slots
    figures/logits-tree-shape.svg    the logits tree of Eq. 3 (k = 8, C = 64, distinct tokens)
    figures/draft-tree.svg           a merged draft tree: sources and the accepted path
    figures/tree-mask.svg            its tree attention mask
    figures/acceptance.svg           MAT per method from docs/data/bench/*.jsonl, when present
    figures/accept-walk.svg          greedy acceptance walking that draft tree (accept_greedy)
    figures/timing.svg               milliseconds per token by phase, per method, of one
                                     committed benchmark run (TIMING_RUN)

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
def _parse_states(automaton):
    """[(string, freq, fail, lru rank)] per node of ``automaton`` and its matching state."""
    dump = automaton.dump()
    ids = lambda s: tuple(int(t) for t in s.split())  # noqa: E731
    pattern = re.compile(r"state \[([\d ]*)\] freq=(\d+) fail=\[([\d ]*)\] lru=(\d+)")
    states = [(ids(m.group(1)), int(m.group(2)), ids(m.group(3)), int(m.group(4)))
              for m in map(pattern.match, dump.splitlines()) if m]
    matching = ids(re.search(r"matching=\[([\d ]*)\]", dump).group(1))
    return states, matching


def _node(ax, x, y, label, face="white", edge="#666666", lw=1.0, size=620, fontsize=9):
    ax.scatter([x], [y], s=size, c=face, edgecolors=edge, linewidths=lw, zorder=3)
    ax.text(x, y, label, ha="center", va="center", fontsize=fontsize, zorder=4)


def trie_failure_links():
    """Two panels with the same nodes: the trie (left) and its failure links (right), drawn
    as the tree they form (each node hangs under its failure link), so that no link crosses
    another and the failure chain of the matching state is a path up to the root."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from racer_ref.reference import Automaton

    letters = "abcd"
    automaton = Automaton(max_nodes=100, ngram=3)
    automaton.extend([letters.index(c) for c in "abcabdab"])
    states, matching = _parse_states(automaton)
    freq = {s: f for s, f, _, _ in states}
    fail = {s: f for s, _, f, _ in states}
    chain = [matching]
    while chain[-1] != ():
        chain.append(fail[chain[-1]])
    root = letters.index("c")
    borders = [s + (root,) for s in chain if s + (root,) in freq and len(s) + 1 >= 2]
    show = lambda s: "".join(letters[t] for t in s) or "∅"  # noqa: E731

    def style(s):
        face = "#ccddaa" if s in borders else ("#fff2cc" if s in chain else "white")
        return dict(face=face, edge="#222222" if s == matching else "#666666",
                    lw=2.5 if s == matching else 1.0)

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"wspace": 0.08})
    for ax, parent_of, title, edge in (
        (left, lambda s: s[:-1], "the trie: node string, its frequency at the lower right", "trie"),
        (right, lambda s: fail[s], "failure links: each node hangs under fail(node)", "fail"),
    ):
        # Children sorted by string, so that both panels read in the same order.
        order = [()] + sorted(fail, key=lambda s: (len(s), s))
        if edge == "fail":  # a parent must come before its children for the layout
            order = [()]
            while len(order) < len(fail) + 1:
                order += sorted((s for s in fail if fail[s] in order and s not in order),
                                key=lambda s: (len(s), s))
        index = {s: i for i, s in enumerate(order)}
        parents = [-1] + [index[parent_of(s)] for s in order[1:]]
        x, depth = tree_layout(parents)
        y = -depth
        for i, p in enumerate(parents):
            if p < 0:
                continue
            s = order[i]
            on_chain = s in chain and edge == "fail"
            if edge == "trie":
                ax.plot([x[p], x[i]], [y[p], y[i]], color="#444444", lw=1.2, zorder=1)
            else:  # an arrow from the node up to its failure link
                ax.annotate("", xy=(x[p], y[p]), xytext=(x[i], y[i]), zorder=1,
                            arrowprops=dict(arrowstyle="-|>", ls="--", shrinkA=11, shrinkB=11,
                                            color="#222222" if on_chain else "#ee7733",
                                            lw=2.2 if on_chain else 1.2))
        for s, i in index.items():
            _node(ax, x[i], y[i], show(s), **style(s))
            if s != () and edge == "trie":
                ax.text(x[i] + 0.2, y[i] - 0.26, str(freq[s]), ha="left", va="center", fontsize=7,
                        color="#555555", zorder=4,
                        bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none"))
        ax.set_title(title, fontsize=10)
        ax.set_xlim(x.min() - 0.7, x.max() + 0.7)
        ax.set_ylim(y.min() - 0.6, 0.5)
        ax.axis("off")
    fig.legend(
        handles=[
            Line2D([], [], color="#ee7733", ls="--", marker=">", ms=4, label="failure link"),
            Line2D([], [], color="#222222", ls="--", lw=2.2, label="failure chain of the matching state"),
            Patch(facecolor="white", edgecolor="#222222", lw=2.5, label=f"matching state '{show(matching)}'"),
            Patch(facecolor="#fff2cc", edgecolor="#666666", label="on its failure chain"),
            Patch(facecolor="#ccddaa", edgecolor="#666666", label="borders for root 'c'"),
        ],
        loc="lower center", fontsize=8, frameon=False, ncol=5, bbox_to_anchor=(0.5, -0.04),
    )
    fig.suptitle("Automaton of 'abcabdab' (ngram = 3)", fontsize=11)
    return fig


def lru_list_figure():
    """A full 6-node trie with each node's recency rank, and its recency list: a doubly
    linked list over the same nodes, head = most recent, tail = the leaf evicted next."""
    from racer_ref.reference import Automaton

    letters = "abcd"
    automaton = Automaton(max_nodes=6, ngram=3)
    automaton.extend([letters.index(c) for c in "abcab"])
    states, _ = _parse_states(automaton)
    rank = {s: r for s, _, _, r in states}
    show = lambda s: "".join(letters[t] for t in s) or "∅"  # noqa: E731
    tail = max(rank, key=rank.get)
    order = [()] + sorted(rank, key=lambda s: (len(s), s))
    index = {s: i for i, s in enumerate(order)}
    parents = [-1] + [index[s[:-1]] for s in order[1:]]
    x, depth = tree_layout(parents)
    x = x - x.mean()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.4), gridspec_kw={"height_ratios": [3, 1.4]})
    for i, p in enumerate(parents):
        if p >= 0:
            top.plot([x[p], x[i]], [-depth[p], -depth[i]], color="#444444", lw=1.2, zorder=1)
    for s, i in index.items():
        red = s == tail
        _node(top, x[i], -depth[i], show(s), face="#f4cccc" if red else "white",
              edge="#aa3333" if red else "#666666", lw=2.2 if red else 1.0)
        if s != ():
            top.text(x[i] + 0.3, -depth[i], f"rank {rank[s]}", ha="left", va="center", fontsize=8,
                     color="#333333", bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none"))
    top.set_title("A full trie (max_nodes = 6, ngram = 3) after 'abcab': recency rank, 0 = most recent.\n"
                  "Invariant: a parent is more recent than its children (rank(parent) < rank(child))",
                  fontsize=9.5)
    top.set_xlim(x.min() - 1, x.max() + 1.6)
    top.set_ylim(-depth.max() - 0.5, 0.5)
    top.axis("off")
    # The recency list, head first.
    by_rank = sorted(rank, key=rank.get)
    width, gap = 0.9, 0.7
    for k, s in enumerate(by_rank):
        x0 = k * (width + gap)
        red = s == tail
        bottom.add_patch(plt.Rectangle((x0, 0), width, 0.6, fc="#f4cccc" if red else "white",
                                       ec="#aa3333" if red else "#444444", lw=2 if red else 1))
        bottom.text(x0 + width / 2, 0.3, show(s), ha="center", va="center", fontsize=10)
        bottom.text(x0 + width / 2, -0.2, f"rank {k}", ha="center", va="center", fontsize=7.5, color="#555555")
        if k + 1 < len(by_rank):
            x1 = x0 + width + gap
            bottom.annotate("", xy=(x1, 0.42), xytext=(x0 + width, 0.42),
                            arrowprops=dict(arrowstyle="-|>", lw=0.9, color="#444444", shrinkA=1, shrinkB=1))
            bottom.annotate("", xy=(x0 + width, 0.18), xytext=(x1, 0.18),
                            arrowprops=dict(arrowstyle="-|>", lw=0.9, color="#999999", shrinkA=1, shrinkB=1))
    last = (len(by_rank) - 1) * (width + gap)
    bottom.text(width / 2, 0.95, "head: most recent\n(touch moves a node here)", ha="center", va="bottom", fontsize=8)
    bottom.text(last + width / 2, 0.95, "tail: least recent,\na leaf: evicted next", ha="center",
                va="bottom", fontsize=8, color="#aa3333")
    bottom.text(last / 2 + width / 2, -0.55, "older → (dark)      ← newer (grey): each change is O(1)",
                ha="center", va="center", fontsize=7.5, color="#555555")
    bottom.set_xlim(-0.8, last + width + 0.8)
    bottom.set_ylim(-0.8, 1.5)
    bottom.axis("off")
    return fig


def kv_cache_step_figure():
    """One verify pass in the KV cache: the prefix (L entries) and the n tree tokens written
    by one forward pass, then the accepted path gathered into consecutive slots."""
    from matplotlib.patches import Patch

    tree, words, accepted = example_draft_tree()
    n = len(words)
    prefix = DRAFT_TEXT.split()[:-1]  # the committed tokens; the root is the tree's node 0
    L = len(prefix)
    shown = 3  # prefix slots drawn before an ellipsis
    width, gap = 1.0, 0.12
    fig, ax = plt.subplots(figsize=(12, 5))

    def slot(col, row, text, face, edge="#555555", lw=0.8, below=None, colour="black"):
        x0 = col * (width + gap)
        ax.add_patch(plt.Rectangle((x0, row), width, 0.8, fc=face, ec=edge, lw=lw))
        ax.text(x0 + width / 2, row + 0.4, text, ha="center", va="center", fontsize=7.5, color=colour)
        if below is not None:
            ax.text(x0 + width / 2, row - 0.18, below, ha="center", va="center", fontsize=6.5, color="#555555")
        return x0 + width / 2

    prefix_face = "#dddddd"
    rows = {"after": 3.2, "kept": 0.0}
    centres = {}
    for name, row in rows.items():
        for c in range(shown):
            slot(c, row, prefix[c], prefix_face, below=f"{c}")
        ax.text(shown * (width + gap) + width / 2, row + 0.4, "…", ha="center", va="center", fontsize=12)
        slot(shown + 1, row, prefix[-1], prefix_face, below=f"{L - 1}")
    first = shown + 2
    for i in range(n):
        src = int(tree.sources[i])
        keep = i in accepted
        centres[i] = slot(first + i, rows["after"], words[i], SOURCE_COLOURS[src],
                          edge="#000000" if keep else "#777777", lw=2.4 if keep else 0.8,
                          below=f"{L + i}\npos {L + int(tree.depths[i])}",
                          colour="white" if src in (1, 3) else "black")
    for k, i in enumerate(accepted):
        x_new = slot(first + k, rows["kept"], words[i], SOURCE_COLOURS[int(tree.sources[i])],
                     edge="#000000", lw=2.4, below=f"{L + k}\npos {L + k}",
                     colour="white" if int(tree.sources[i]) in (1, 3) else "black")
        ax.annotate("", xy=(x_new, rows["kept"] + 0.85), xytext=(centres[i], rows["after"] - 0.45),
                    arrowprops=dict(arrowstyle="-|>", color="#aa3377", lw=1.2, shrinkA=2, shrinkB=2))
    end = first + n
    ax.text(-0.1, rows["after"] + 1.0,
            f"1. One verify pass reads the {n} tree tokens (BFS order) after the L = {L} cached ones and "
            f"writes their keys and values into slots {L}..{L + n - 1}.\n"
            "Position id = L + depth (siblings share one); the tree mask lets each token see the "
            "prefix, its ancestors and itself. Under each slot: its index and position id.",
            fontsize=8.5, ha="left", va="bottom")
    ax.text(-0.1, rows["kept"] - 0.55,
            f"2. keep_accepted: the root and the {len(accepted) - 1} accepted drafts "
            f"(nodes {', '.join(map(str, accepted))}) are gathered into slots {L}..{L + len(accepted) - 1};\n"
            f"the cache is cut after them (length {L + len(accepted)}) and the other nodes are dropped. "
            "The next root is not cached yet: the next verify pass starts with it.",
            fontsize=8.5, ha="left", va="top")
    ax.legend(handles=[Patch(facecolor=prefix_face, edgecolor="#555555", label="prefix (already cached)")]
              + [Patch(facecolor=SOURCE_COLOURS[s], edgecolor="#555555", label=f"tree node: {SOURCE_NAMES[s]}")
                 for s in sorted({int(s) for s in tree.sources})]
              + [Patch(facecolor="white", edgecolor="#000000", lw=2.4, label="accepted path")],
              loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=5, fontsize=8, frameon=False)
    ax.set_xlim(-0.2, end * (width + gap))
    ax.set_ylim(-1.4, 4.7)
    ax.axis("off")
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


def accept_walk_figure():
    """Greedy acceptance on the draft tree of :func:`draft_tree_figure`: the walk of
    ``racer_ref.tree.accept_greedy`` from the root along the target's argmax, each step
    accepting the child that carries it, until no child does; that argmax is the bonus token.

    The target's argmax at a node is the true continuation ``DRAFT_TRUTH`` at its depth (the
    same stand-in for the model as the figures' table of top-k)."""
    from matplotlib.patches import Patch

    from racer_ref.verify import accept_greedy

    tree, words, _ = example_draft_tree()
    vocab = dict(zip(words, tree.tokens.tolist()))
    truth = DRAFT_TRUTH.split()
    # What the target predicts after each node: the true next word at that depth (-1: none).
    predicted = [vocab.get(truth[d], -1) if d < len(truth) else -1 for d in tree.depths.tolist()]
    accepted, next_root = accept_greedy(None, tree, predicted=predicted)
    bonus = next(w for w in truth if vocab.get(w, -1) == next_root) if next_root in vocab.values() \
        else truth[len(accepted) - 1]
    parents = tree.parents.tolist()
    x, depth = tree_layout(parents)
    fig, (ax, side) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [2.3, 1]})
    for i, p in enumerate(parents):
        if p >= 0:
            on_path = i in accepted and p in accepted
            ax.plot([x[p], x[i]], [-depth[p], -depth[i]], color="#aa3377" if on_path else "#bbbbbb",
                    lw=3 if on_path else 1, zorder=1)
    for i, w in enumerate(words):
        walked = i in accepted
        ax.scatter([x[i]], [-depth[i]], s=900, c="#f2d4e6" if walked else "white",
                   edgecolors="#aa3377" if walked else "#999999", linewidths=2.5 if walked else 0.8, zorder=2)
        ax.text(x[i], -depth[i], f"{i}\n{w}", ha="center", va="center", fontsize=7,
                color="black" if walked else "#777777", zorder=3)
    # The bonus token hangs under the last accepted node: not in the tree, the target's own choice.
    last = accepted[-1]
    bx, by = x[last], -depth[last] - 1
    ax.plot([x[last], bx], [-depth[last], by], color="#aa3377", lw=1.5, ls="--", zorder=1)
    ax.scatter([bx], [by], s=900, c="white", edgecolors="#aa3377", linewidths=1.5, linestyle="--", zorder=2)
    ax.text(bx, by, f"bonus\n{bonus}", ha="center", va="center", fontsize=7, zorder=3)
    for k, i in enumerate(accepted):
        ax.text(x[i] - 0.42, -depth[i] + 0.22, str(k + 1), ha="center", va="center", fontsize=8,
                color="white", zorder=4, bbox=dict(boxstyle="circle,pad=0.2", fc="#aa3377", ec="none"))
    ax.set_xlim(x.min() - 0.8, x.max() + 0.6)
    ax.set_ylim(-depth.max() - 1.5, 0.6)
    ax.axis("off")
    ax.legend(handles=[Patch(facecolor="#f2d4e6", edgecolor="#aa3377", lw=2.5, label="accepted (walked)"),
                       Patch(facecolor="white", edgecolor="#999999", label="drafted, not accepted")],
              loc="lower left", fontsize=8, frameon=False)
    lines = []
    for k, i in enumerate(accepted):
        want = words[accepted[k + 1]] if k + 1 < len(accepted) else bonus
        if k + 1 < len(accepted):
            lines.append(f"{k + 1}. at node {i} '{words[i]}': argmax '{want}'\n"
                         f"    child {accepted[k + 1]} carries it: accept")
        else:
            lines.append(f"{k + 1}. at node {i} '{words[i]}': argmax '{want}'\n"
                         f"    no child carries it: stop")
    lines.append(f"accepted a = {len(accepted) - 1} drafts: "
                 f"'{' '.join(words[i] for i in accepted[1:])}'\n"
                 f"+ the bonus token '{bonus}' = {len(accepted)} tokens\n"
                 f"from one verify pass; '{bonus}' is the next root")
    side.text(0.0, 1.0, "\n\n".join(lines), ha="left", va="top", fontsize=9, family="monospace",
              transform=side.transAxes)
    side.axis("off")
    fig.suptitle("Greedy acceptance: walk down from the root along the target's argmax "
                 "(racer_ref.tree.accept_greedy)", fontsize=10)
    return fig


#: The committed benchmark run that the timing figure shows (docs/data/bench/<name>/).
TIMING_RUN = "humaneval-cpu-gqa"
#: The phases of results.jsonl's ``timings`` (``other``: model.generate's baselines, which
#: time only prefill and forward).
TIMING_PHASES = ("prefill", "drafting", "forward", "acceptance", "bookkeeping", "other")


def timing_figure(run: str = TIMING_RUN):
    """Where the time goes, per method, in one committed benchmark run: milliseconds per new
    token split into the decoding loop's phases (the ``timings`` of results.jsonl), with the
    tokens per second, the speedup over ``ar`` and the MAT of each method."""
    path = BENCH_DATA / run / "results.jsonl"
    if not path.exists():
        fig, ax = plt.subplots(figsize=(6, 1.2))
        ax.text(0.5, 0.5, f"no benchmark results committed for {run} ({path.relative_to(ROOT)})",
                ha="center", va="center", fontsize=9)
        ax.axis("off")
        return fig
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    tokens = {m: sum(r["new_tokens"] for r in rows if r["method"] == m) for m in methods}
    per_token = {m: [1000 * sum(r["timings"].get(ph, 0.0) for r in rows if r["method"] == m) / tokens[m]
                     for ph in TIMING_PHASES] for m in methods}
    wall = {m: sum(r["wall_s"] for r in rows if r["method"] == m) for m in methods}
    steps = {m: sum(r["steps"] for r in rows if r["method"] == m) for m in methods}
    accepted = {m: sum(sum(r["accepted_lengths"] or []) for r in rows if r["method"] == m) for m in methods}
    base = wall.get("ar", wall[methods[0]]) / tokens.get("ar", tokens[methods[0]])
    colours = ["#bbbbbb", "#ccbb44", "#4477aa", "#228833", "#ee6677", "#66ccee"]
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(methods) + 1.6))
    for j, ph in enumerate(TIMING_PHASES):
        left = [sum(per_token[m][:j]) for m in methods]
        ax.barh(methods, [per_token[m][j] for m in methods], left=left, color=colours[j], label=ph)
    for i, m in enumerate(methods):
        speedup = base / (wall[m] / tokens[m])
        mat = (accepted[m] + steps[m]) / max(1, steps[m])
        ax.text(sum(per_token[m]), i, f"  {tokens[m] / wall[m]:.1f} tok/s, {speedup:.2f}x ar, MAT {mat:.2f}",
                va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, max(sum(v) for v in per_token.values()) * 1.55)
    ax.set_xlabel("milliseconds per new token (all prompts pooled)")
    prompts = len({r["prompt_id"] for r in rows})
    ax.set_title(f"Where the time goes: {run}, {prompts} prompts, "
                 f"{rows[0]['new_tokens']} new tokens each (docs/data/bench/{run})", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=len(TIMING_PHASES), fontsize=9, frameon=False)
    fig.tight_layout()
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
    "figures/lru-list.svg": lru_list_figure,
    "figures/kv-cache-step.svg": kv_cache_step_figure,
    "figures/logits-tree-shape.svg": logits_tree_shape,
    "figures/draft-tree.svg": draft_tree_figure,
    "figures/tree-mask.svg": tree_mask_figure,
    "figures/acceptance.svg": acceptance_figure,
    "figures/accept-walk.svg": accept_walk_figure,
    "figures/timing.svg": timing_figure,
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
