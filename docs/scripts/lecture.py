"""The one-day track's lecture: a 75-minute slide deck on RACER with speaker notes.

    python docs/scripts/lecture.py --out slides-out/racer-ref-lecture.pptx [--figures DIR]

``make lecture`` runs it after ``make figures``. Where ``make slides`` cuts the whole
syllabus into one goals slide and one questions slide per unit, this deck is a lecture: the
story of one decoding step told with the site's own figures (the automaton with its failure
links, the logits tree, the draft tree, its attention mask, the accept walk, the KV cache
and a timing plot of a committed benchmark run), and speaker notes on every slide that say
what to say, how long it takes and where the instructor finds the answers. Its timetable is
the lecture of the one-day track (``docs/tracks.md``).

The slides are the data in :data:`LECTURE` below; figures are ``NAME.png`` from
``--figures DIR`` (what ``make figures``, ``docs/hooks/figures.py --out DIR``, writes), or
drawn into a temporary folder first. Text is never smaller than :data:`MIN_POINTS`:
:func:`build` refuses a slide whose text would not fit at that size.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = Path("slides-out") / "racer-ref-lecture.pptx"
#: Slide size in inches (16:9).
WIDTH, HEIGHT = 13.333, 7.5
#: The smallest font size (points) of any text on the deck: readable from the back row.
MIN_POINTS = 18


def _slides_module():
    """docs/scripts/slides.py (its font-size estimate and figure drawing), loaded by path."""
    name = "racer_ref_site_slides"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("slides.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@dataclass
class Slide:
    """One slide of the lecture.

    Attributes:
        title: the slide's title.
        notes: the speaker notes (every slide has them): what to say, the minutes, where the
            answers are.
        bullets: text lines (a slide without a figure), or the lines beside a figure.
        figure: the name of one of the site's figures (``docs/hooks/figures.py``'s
            ``FIGURES``, without ``.svg``), shown large; ``None`` for a text slide.
        takeaway: one sentence under the figure.
        minutes: when the slide starts and ends in the 75 minutes, e.g. ``(5, 10)``.
    """

    title: str
    notes: str
    minutes: tuple
    bullets: List[str] = field(default_factory=list)
    figure: Optional[str] = None
    takeaway: str = ""


LECTURE: List[Slide] = [
    Slide("Why speculative decoding?", minutes=(0, 5), bullets=[
        "A decoder emits one token per forward pass: 100 tokens, 100 passes.",
        "On a GPU one pass is limited by memory bandwidth: every weight is read to multiply one "
        "vector. A pass over 64 tokens reads the same weights and costs about the same.",
        "Speculative decoding spends that spare width: guess several tokens cheaply, check all "
        "guesses in one pass, keep what the model agrees with.",
        "RACER guesses without a draft model or trained heads: from the text so far and from "
        "the model's own earlier top-k predictions.",
    ], notes=(
        "0-5 min. Start from the cost of one token. Ask: why would 64 tokens cost as much as "
        "one on a GPU? (memory-bound: the weights are read once either way). Mention that on a "
        "CPU this is not true; we come back to it at minute 60 with the timing plot. "
        "Reading for students: docs/explanation/speculative-decoding.md, 'The bottleneck it "
        "attacks'. Answer: instructor.md, unit 1, question 1.")),
    Slide("One decoding step", minutes=(5, 12), bullets=[
        "Root: the target's last prediction, committed but not yet in the KV cache.",
        "Draft: a tree of guesses from two sources, retrieval (an automaton over the text) "
        "and logits (a table of earlier top-k), at most C nodes (capacity).",
        "Verify: one forward pass over the flattened tree, on top of the KV cache.",
        "Accept: walk down from the root while a child carries the target's argmax; the "
        "argmax where the walk stops is the bonus token, the next root.",
        "Commit: keep the accepted path in the cache; update the table and the automaton.",
    ], notes=(
        "5-12 min. Draw one step on the board: root, a small tree, one pass, accept 2, bonus "
        "token. Every step emits a + 1 tokens for a accepted drafts, so a step is never worse "
        "than plain decoding in tokens. MAT (mean accepted tokens) = mean of a + 1 over steps. "
        "The nine rules are in docs/explanation/spec.md and speculative-decoding.md, 'One "
        "decoding step'. Ask unit 1, question 2 (a = 2: how many tokens? answer 3, "
        "instructor.md).")),
    Slide("Why the output does not change", minutes=(12, 17), bullets=[
        "Node u attends to the cached prefix and to exactly the nodes of its path: root, ..., "
        "its parent, itself (the tree attention mask).",
        "It is fed at position L + depth(u), where plain decoding of its path would put it.",
        "So its logits are those of plain decoding after that path: every accepted token is "
        "the target's own argmax.",
        "A bad draft costs compute, never correctness: greedy RACER emits exactly greedy "
        "decoding's tokens (up to floating point).",
    ], notes=(
        "12-17 min. This is the proof of losslessness for greedy decoding; do it on the board "
        "by induction along the accepted path. Answers: instructor.md, unit 1, questions 3 "
        "and 4; unit 8, question 5 for 'up to floating point'. The mask and the positions "
        "come back as a figure at minute 45.")),
    Slide("Retrieval: an automaton over the text", minutes=(17, 27), figure="trie-failure-links",
          takeaway="Each node hangs under its failure link; the failure chain of the matching "
                   "state lists every suffix of the context in the trie, longest first.",
          notes=(
              "17-27 min. The trie holds the n-grams of the text with their counts (open "
              "windows: each committed token extends the last n windows, O(n) work). The "
              "failure link of a state is its longest proper suffix in the trie. The matching "
              "state is the longest suffix of the context in the trie; its failure chain "
              "(dab -> ab -> b -> root here) finds the borders: suffixes followed by the "
              "root, and below them what followed last time. Ask: fail(abc), fail(bca), "
              "fail(dab)? (bc, ca, ab: instructor.md unit 3, question 1). Mention in one "
              "sentence each: LRU eviction keeps memory flat (unit 4), lazy links with "
              "per-token epochs avoid rebuilding every link per step (unit 5). Tutorials 01 "
              "and 02; exercises 01 and 02.")),
    Slide("Logits: the copy-logit table and Eq. 3", minutes=(27, 35), figure="logits-tree-shape",
          takeaway="Row t of the table holds the top-k the model predicted after token t; the "
                   "logits tree grows from it breadth-first, later children with smaller breadth.",
          notes=(
              "27-35 min. Every verify pass computes the top-k at every tree node, accepted or "
              "not: the table keeps them (last write wins), so rejected branches still teach "
              "the drafter. The logits tree expands a node by its row, breadths by Eq. 3, "
              "until capacity. Derive k = 4, C = 21 on the board first: 1 / 4 / 8 / 8 "
              "(instructor.md unit 6, question 2); the figure shows k = 8, C = 64. Tutorial "
              "05; exercises 05 and 06.")),
    Slide("One draft tree from both sources", minutes=(35, 42), figure="draft-tree",
          takeaway="Retrieval paths and the logits tree merge into one tree of at most C "
                   "nodes; a node both propose costs the budget once (green: both).",
          notes=(
              "35-42 min. Walk the figure: root 'return' after '... def diff ( a , b ) :'. "
              "Blue nodes came from retrieval, yellow from logits, green from both. The tree is "
              "flattened breadth-first into tokens, parents, depths and sources; parents[i] < i "
              "is what the rest of the code relies on (instructor.md unit 7, question 4). "
              "Tutorial 06; exercise 07 (the longest of the course).")),
    Slide("The tree attention mask", minutes=(42, 47), figure="tree-mask",
          bullets=["mask[i, j]: j is i or an ancestor of i.",
                   "Position ids: L + depth, so siblings share one.",
                   "Built from parents alone (exercise 08)."],
          notes=(
              "42-47 min. Read row 10 ('b') of the figure: its ancestors are 0, 1 and 5. Ask: "
              "for parents = [-1, 0, 0, 1, 1, 2], what are row 4, the position ids with L = "
              "10, and retrieve_indices? (instructor.md unit 7, question 2). Why L + depth and "
              "not L + i: unit 7, question 1. Exercise 08.")),
    Slide("The accept walk", minutes=(47, 53), figure="accept-walk",
          takeaway="One pass gave the argmax at every node: follow it down while a child "
                   "carries it; 3 drafts and the bonus ';' make 4 tokens from one pass.",
          notes=(
              "47-53 min. This is racer_ref.tree.accept_greedy on the draft tree of the "
              "previous slides (the figure is drawn by calling it). A trie has at most one "
              "child per token, so the walk is unique: no two paths are ever compared "
              "(instructor.md unit 8, question 4). The bonus token is the target's argmax at "
              "the last accepted node, computed by the same pass. Exercise 09.")),
    Slide("Keeping the KV cache right", minutes=(53, 58), figure="kv-cache-step",
          takeaway="The pass wrote L + n entries; keep_accepted gathers the accepted path "
                   "into the slots after the prefix and cuts the rest.",
          notes=(
              "53-58 min. Cutting the cache at L + a + 1 is not enough: the accepted nodes are "
              "not the first a + 1 slots in BFS order (instructor.md unit 8, question 1). The "
              "next root is not cached yet, hence len(prompt) + len(output) - 1 (question 2). "
              "Tutorial 07 writes the whole loop and checks it against model.generate. "
              "Exercise 10.")),
    Slide("Measuring: where the time goes", minutes=(58, 66), figure="timing",
          takeaway="The forward pass is nearly all of it; drafting costs about 1 ms a step. "
                   "Fewer, wider passes are the whole gain.",
          notes=(
              "58-66 min. A committed benchmark run on a 2-thread CPU (docs/benchmarks.md): "
              "RACER takes fewer passes (MAT about 2.4-2.8) but each costs more on a CPU, so "
              "the speedup is below the MAT. speedup = MAT * T1 / Tn. Ask: a speedup above the "
              "MAT? (a measurement error: instructor.md unit 9, question 4). Time only on a "
              "quiet machine: tutorial 08 and the demo print the load average and warn when "
              "the machine is busy; under load RACER can show 0.2-0.3x.")),
    Slide("What speed to expect", minutes=(66, 70), bullets=[
        "speedup ≈ MAT · T₁ / Tₙ: the tokens a step yields times the cost ratio of a "
        "1-token and an n-token pass.",
        "GPU: Tₙ ≈ T₁ up to n ≈ 64, so the paper's capacity 64 wins.",
        "CPU: a 64-token pass costs about 3-4 one-token passes; capacity 16 is the default.",
        "Copying text (editing code) gives a high MAT; fresh prose a low one.",
        "Check every output against plain greedy decoding, and say which machine.",
    ], notes=(
        "66-70 min. Tutorial 08, sections 4 and 5: the code prompt reaches MAT 3.5 at "
        "capacity 64, the prose prompt 1.42; a 64-token pass cost 3.1 one-token passes on its "
        "CPU. Ask unit 9, questions 1 and 2 (instructor.md). Why weight by tokens when "
        "pooling prompts: unit 9, question 5.")),
    Slide("The lab: three hours", minutes=(70, 75), bullets=[
        "Exercise 07 (07_draft_tree.py): build and flatten the merged tree.",
        "Exercise 08 (08_tree_attention_mask.py): mask, position ids, retrieve_indices.",
        "Exercise 09 (09_greedy_acceptance.py): the accept walk.",
        "Check each with racer-ref check FILE (--hint 2, --hint 3 for hints).",
        "Then tutorial 08: RACER on the default model, on a quiet machine.",
    ], notes=(
        "70-75 min. Hand out the lab (docs/tracks.md, one-day track): students work in pairs "
        "on copies of the exercise files; racer-ref check --json scores an unfinished file "
        "per function. Exit question on paper: why can a bad draft cost time but never "
        "change the output? (instructor.md unit 1, question 4). Take-home (1 hour): exercise "
        "10 and the written questions of unit 9.")),
]


def build(figures: Path, out: Path, lecture: Sequence[Slide] = LECTURE) -> Path:
    """Write the lecture deck to ``out`` (a ``.pptx``) with the PNGs in ``figures``.

    Raises:
        FileNotFoundError: a slide's figure has no ``NAME.png`` in ``figures``.
        ValueError: a slide has no speaker notes, or its text would not fit at
            :data:`MIN_POINTS`.
    """
    from PIL import Image
    from pptx import Presentation
    from pptx.util import Inches, Pt

    font_size = _slides_module()._font_size
    deck = Presentation()
    deck.slide_width, deck.slide_height = Inches(WIDTH), Inches(HEIGHT)

    def textbox(s, lines: Sequence[str], left: float, top: float, width: float, height: float,
                largest: int = 28, bullets: bool = True) -> None:
        size = min(largest, font_size(lines, width, height))
        if size < MIN_POINTS:
            raise ValueError(f"slide {s.shapes.title.text!r}: its text does not fit at "
                             f"{MIN_POINTS} pt; shorten it")
        frame = s.shapes.add_textbox(Inches(left), Inches(top), Inches(width), Inches(height)).text_frame
        frame.word_wrap = True
        for i, line in enumerate(lines):
            p = frame.paragraphs[0] if i == 0 else frame.add_paragraph()
            p.space_after = Pt(8)
            run = p.add_run()
            run.text = ("• " if bullets else "") + line
            run.font.size = Pt(size)

    def picture(s, name: str, left: float, top: float, width: float, height: float) -> None:
        path = figures / f"{name}.png"
        if not path.exists():
            raise FileNotFoundError(f"figure {name!r}: no {path} (run `make figures` or "
                                    f"python docs/hooks/figures.py --out {figures})")
        w, h = Image.open(path).size
        scale = min(width / w, height / h)
        s.shapes.add_picture(str(path), Inches(left + (width - w * scale) / 2),
                             Inches(top + (height - h * scale) / 2), Inches(w * scale), Inches(h * scale))

    def new_slide(title: str, notes: str, minutes: Optional[tuple] = None):
        if not notes.strip():
            raise ValueError(f"slide {title!r}: no speaker notes")
        s = deck.slides.add_slide(deck.slide_layouts[5])  # title only
        s.shapes.title.text = title
        s.shapes.title.text_frame.paragraphs[0].font.size = Pt(32)
        s.shapes.title.left, s.shapes.title.top = Inches(0.5), Inches(0.25)
        s.shapes.title.width, s.shapes.title.height = Inches(WIDTH - 1.0), Inches(0.95)
        if minutes:
            notes = f"[minutes {minutes[0]}-{minutes[1]} of 75] {notes}"
        s.notes_slide.notes_text_frame.text = notes
        return s

    first = deck.slides.add_slide(deck.slide_layouts[0])
    first.shapes.title.text = "Speculative decoding with RACER"
    first.placeholders[1].text = "A 75-minute lecture, with racer-ref\n(the one-day track of the course kit)"
    # The layout's placeholders are placed for a 10-inch slide: centre them on this one.
    for shape, top, height in ((first.shapes.title, 2.0, 1.6), (first.placeholders[1], 3.8, 1.6)):
        shape.left, shape.top, shape.width, shape.height = Inches(1.0), Inches(top), Inches(WIDTH - 2.0), Inches(height)
    first.notes_slide.notes_text_frame.text = (
        "The lecture of the one-day track (docs/tracks.md): 75 minutes, then a 3-hour lab on "
        "exercises 07-09 and a 1-hour take-home. Students have run `racer-ref demo` and read "
        "'Speculative decoding from zero' before class. Each slide's notes give its minutes, "
        "what to ask, and where the answers are (docs/instructor.md). Rebuild with "
        "`make lecture`; the figures are the site's, drawn from the code.")
    for spec in lecture:
        s = new_slide(spec.title, spec.notes, spec.minutes)
        top, bottom = 1.35, HEIGHT - 0.3
        if spec.figure is None:
            textbox(s, spec.bullets, 0.7, top, WIDTH - 1.4, bottom - top)
        elif spec.bullets:  # figure on the left, a few lines on the right
            picture(s, spec.figure, 0.4, top, 7.6, bottom - top)
            textbox(s, spec.bullets, 8.3, top + 0.6, WIDTH - 8.3 - 0.5, bottom - top - 0.6, largest=24)
        else:  # the figure large, its takeaway under it
            picture(s, spec.figure, 0.5, top, WIDTH - 1.0, bottom - top - 1.15)
            textbox(s, [spec.takeaway], 0.7, bottom - 1.05, WIDTH - 1.4, 1.05, largest=20, bullets=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    deck.save(str(out))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Build the one-day track's 75-minute lecture deck.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"the .pptx to write (default {DEFAULT_OUT})")
    parser.add_argument("--figures", type=Path, default=None, metavar="DIR",
                        help="the PNGs of `make figures` (default: draw them into a temporary folder)")
    args = parser.parse_args(argv)
    try:
        import pptx
    except ImportError:
        print("lecture: python-pptx is missing; install the dev extra (pip install 'racer-ref[dev]') "
              "or pip install python-pptx", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        figures = args.figures if args.figures is not None else _slides_module().draw_figures(Path(tmp))
        out = build(figures, args.out)
    print(f"wrote {out}: {len(pptx.Presentation(str(out)).slides)} slides")
    return 0


if __name__ == "__main__":
    sys.exit(main())
