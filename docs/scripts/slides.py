"""The course's slide deck, built from the syllabus page and the site's figures.

    python docs/scripts/slides.py --out slides-out/racer-ref-slides.pptx [--figures DIR]

``make slides`` runs it after ``make figures``. The deck is a PowerPoint file (python-pptx,
in the ``dev`` extra) that a teacher edits in PowerPoint, LibreOffice Impress, Keynote or
Google Slides. Its one source is ``docs/syllabus.md``, so the slides cannot drift from the
syllabus:

* a title slide, and an overview slide from the table "The plan at a glance";
* per ``## Unit N: title`` section: a slide with the unit's learning goals and its first
  figure, a slide for each further figure, and a slide with its written questions; the
  speaker notes carry the unit's prerequisites, material, times and class plan;
* a closing slide from the capstone section (options, deliverables, rubric).

A figure is referenced in the page as ``![alt](figures/NAME.svg)`` (the site's generated
SVG) and placed on the slide as ``NAME.png`` from ``--figures DIR``, the folder that
``make figures`` (``docs/hooks/figures.py --out DIR``) writes. Without ``--figures`` the
figures are drawn into a temporary folder first.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
SYLLABUS = ROOT / "docs" / "syllabus.md"
DEFAULT_OUT = Path("slides-out") / "racer-ref-slides.pptx"

UNIT = re.compile(r"^## Unit (\d+): (.+)$")
FIGURE = re.compile(r"^!\[([^\]]*)\]\(figures/([\w.-]+)\.svg\)\s*$")
NOTE = re.compile(r"^\*\*(Prerequisites|Material|Time|Class session[^*]*?):?\*\*:?\s*(.*)$")


@dataclass
class Unit:
    """One unit of the syllabus: what its slides show."""

    number: int
    title: str
    goals: List[str] = field(default_factory=list)
    questions: List[str] = field(default_factory=list)
    figures: List[Tuple[str, str]] = field(default_factory=list)  # (figure name, alt text)
    notes: List[str] = field(default_factory=list)


@dataclass
class Syllabus:
    title: str
    overview: List[str]
    units: List[Unit]
    capstone: List[str]


def plain(markdown: str) -> str:
    """Inline Markdown -> slide text: links keep their text; emphasis and code marks go."""
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", markdown)
    text = text.replace("**", "").replace("`", "")
    text = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\1", text)  # *emphasis*
    return re.sub(r"\s+", " ", text).strip()


def _items(lines: Sequence[str], marker: re.Pattern) -> List[str]:
    """The items of a Markdown list (``marker`` starts an item; indented lines continue it)."""
    items: List[str] = []
    for line in lines:
        m = marker.match(line)
        if m:
            items.append(line[m.end():].strip())
        elif items and line.startswith(" ") and line.strip():
            items[-1] += " " + line.strip()
        elif items and not line.strip():
            items.append("")  # a blank line ends the item
    return [item for item in items if item]


def _sections(lines: Sequence[str], level: str) -> Dict[str, List[str]]:
    """{heading: its lines} for the headings that start with ``level`` ("### ")."""
    out: Dict[str, List[str]] = {}
    current: Optional[str] = None
    for line in lines:
        if line.startswith(level):
            current = line[len(level):].strip()
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


BULLET = re.compile(r"^- ")
NUMBERED = re.compile(r"^\d+\. ")


def _table_rows(lines: Sequence[str]) -> List[List[str]]:
    """The cells of each row of the Markdown tables in ``lines``."""
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in lines if line.startswith("|")]


def _capstone(lines: Sequence[str]) -> List[str]:
    """The capstone slide's items: each option's bold title, each deliverable up to its first
    colon, and the rubric's criteria with their points."""
    items = [f"Option {plain(m.group(1))}" for m in
             (re.match(r"\*\*([^*]+)\*\*", item) for item in _items(lines, BULLET)) if m]
    start = next((i for i, line in enumerate(lines) if line.startswith("**Deliverables")), None)
    if start is not None:
        items += [f"Deliverable: {plain(d).split(':')[0]}" for d in _items(lines[start:], NUMBERED)]
    rubric = [f"{plain(cells[0])} ({cells[1]})" for cells in _table_rows(lines)
              if len(cells) > 1 and cells[1].isdigit()]
    if rubric:
        items.append(f"Rubric: {', '.join(rubric)}")
    return items


def parse(text: str) -> Syllabus:
    """The deck's content from the syllabus page's Markdown.

    Raises:
        ValueError: the page has no ``# `` title, no unit, a unit without learning goals or
            written questions, or units not numbered 1, 2, 3, ...
    """
    lines = text.splitlines()
    titles = [line[2:].strip() for line in lines if line.startswith("# ")]
    if not titles:
        raise ValueError("syllabus: no '# ' title")
    # Split at the "## " headings.
    chapters: List[Tuple[str, List[str]]] = []
    for line in lines:
        if line.startswith("## "):
            chapters.append((line, []))
        elif chapters:
            chapters[-1][1].append(line)
    units: List[Unit] = []
    overview: List[str] = []
    capstone: List[str] = []
    for heading, body in chapters:
        m = UNIT.match(heading)
        if m:
            unit = Unit(int(m.group(1)), plain(m.group(2)))
            subsections = _sections(body, "### ")
            unit.goals = [plain(g) for g in _items(subsections.get("Learning goals", []), BULLET)]
            questions = subsections.get("Written questions", [])
            unit.questions = [plain(q) for q in _items(questions, NUMBERED)]
            unit.figures = [(f.group(2), f.group(1)) for f in map(FIGURE.match, body) if f]
            # The bold-led paragraphs before the first "### ": prerequisites, material, ...
            end = next((i for i, line in enumerate(body) if line.startswith("### ")), len(body))
            paragraphs = " ".join(line.strip() or "\n" for line in body[:end]).split("\n")
            unit.notes = [plain(p) for p in paragraphs if NOTE.match(p.strip())]
            if not unit.goals or not unit.questions:
                raise ValueError(f"syllabus: unit {unit.number} needs '### Learning goals' and "
                                 f"'### Written questions' lists")
            units.append(unit)
        elif heading.startswith("## The plan at a glance"):
            # | unit | topic | tutorial | exercises | ... : the rows that start with a number.
            for cells in _table_rows(body):
                if cells[0].isdigit():
                    overview.append(f"{cells[0]}. {plain(cells[1])}: tutorial {cells[2]}, "
                                    f"exercises {cells[3]}")
        elif heading.startswith("## Capstone"):
            capstone = _capstone(body)
    if not units:
        raise ValueError("syllabus: no '## Unit N: title' section")
    if [u.number for u in units] != list(range(1, len(units) + 1)):
        raise ValueError(f"syllabus: units numbered {[u.number for u in units]}, "
                         f"expected 1, 2, 3, ...")
    return Syllabus(titles[0], overview, units, capstone)


# ------------------------------------------------------------------------------- the deck
#: The mean width of a character in ems, for the text-fit estimate. The deck's font is the
#: default theme's Calibri; LibreOffice without it renders DejaVu Sans, which is wider: at
#: 0.46 unit 8's goals ran off the bottom of their slide there, at 0.5 every slide fits
#: (tests/test_lecture.py renders both decks).
CHAR_WIDTH = 0.5
def _font_size(items: Sequence[str], width: float, height: float = 5.7) -> int:
    """The largest point size (12 to 28) at which ``items`` fit a box of ``width`` x
    ``height`` inches, estimating a character at CHAR_WIDTH times the size wide and a line at 1.2 sizes
    high, plus 8 pt after each paragraph."""
    for size in range(28, 12, -1):
        per_line = max(1, int((width * 72 - 14) / (CHAR_WIDTH * size)))
        lines = sum(-(-(len(item) + 4) // per_line) for item in items)
        if lines * 1.2 * size + 8 * len(items) <= 0.9 * height * 72:
            return size
    return 12


def build(syllabus: Syllabus, figures: Path, out: Path) -> Path:
    """Write the deck to ``out`` (a ``.pptx``) from ``syllabus`` and the PNGs in ``figures``.

    Raises:
        FileNotFoundError: a figure the syllabus shows has no ``NAME.png`` in ``figures``.
    """
    from PIL import Image
    from pptx import Presentation
    from pptx.util import Inches, Pt

    deck = Presentation()
    deck.slide_width, deck.slide_height = Inches(13.333), Inches(7.5)
    title_only = deck.slide_layouts[5]

    def slide(title: str, notes: Sequence[str] = ()):
        s = deck.slides.add_slide(title_only)
        s.shapes.title.text = title
        s.shapes.title.text_frame.paragraphs[0].font.size = Pt(30)
        s.shapes.title.left, s.shapes.title.top = Inches(0.5), Inches(0.3)
        s.shapes.title.width, s.shapes.title.height = Inches(12.3), Inches(1.0)
        if notes:
            s.notes_slide.notes_text_frame.text = "\n".join(notes)
        return s

    def text(s, items: Sequence[str], left: float, width: float, numbered: bool = False) -> None:
        box = s.shapes.add_textbox(Inches(left), Inches(1.4), Inches(width), Inches(5.7)).text_frame
        box.word_wrap = True
        size = _font_size(items, width)
        for i, item in enumerate(items):
            p = box.paragraphs[0] if i == 0 else box.add_paragraph()
            p.space_after = Pt(8)
            # "Label (...): rest" -> the label in bold.
            label, sep, rest = item.partition(": ") if not numbered else ("", "", item)
            if sep and len(label) < 70:
                run = p.add_run()
                run.text, run.font.bold, run.font.size = label + ": ", True, Pt(size)
            else:
                rest = item
            run = p.add_run()
            run.text = (f"{i + 1}. " if numbered else "") + rest
            run.font.size = Pt(size)

    def picture(s, name: str, left: float, top: float, width: float, height: float) -> None:
        path = figures / f"{name}.png"
        if not path.exists():
            raise FileNotFoundError(f"figure {name!r}: no {path} (run `make figures` or "
                                    f"python docs/hooks/figures.py --out {figures})")
        w, h = Image.open(path).size
        scale = min(width / w, height / h)
        s.shapes.add_picture(str(path), Inches(left + (width - w * scale) / 2), Inches(top),
                             Inches(w * scale), Inches(h * scale))

    first = deck.slides.add_slide(deck.slide_layouts[0])
    first.shapes.title.text = "Speculative decoding with RACER"
    first.placeholders[1].text = (f"A course in {len(syllabus.units)} units, with racer-ref\n"
                                  f"(slides built from the {syllabus.title.lower()} page)")
    # The layout's placeholders are placed for a 10-inch slide: centre them on this one.
    for shape, top in ((first.shapes.title, 2.0), (first.placeholders[1], 3.8)):
        shape.left, shape.top = Inches(1.0), Inches(top)
        shape.width, shape.height = deck.slide_width - Inches(2.0), Inches(1.6)
    if syllabus.overview:
        text(slide("The units"), syllabus.overview, 0.6, 12.1)
    for unit in syllabus.units:
        name = f"Unit {unit.number}: {unit.title}"
        s = slide(name, unit.notes)
        if unit.figures:
            text(s, unit.goals, 0.5, 6.4)
            picture(s, unit.figures[0][0], 7.1, 1.4, 5.8, 5.7)
        else:
            text(s, unit.goals, 0.6, 12.1)
        for fig, alt in unit.figures[1:]:
            f = slide(name, [alt])
            picture(f, fig, 0.8, 1.4, 11.7, 5.8)
        text(slide(f"{name}: written questions", unit.notes), unit.questions, 0.6, 12.1, numbered=True)
    if syllabus.capstone:
        text(slide("Capstone project"), syllabus.capstone, 0.6, 12.1)
    out.parent.mkdir(parents=True, exist_ok=True)
    deck.save(str(out))
    return out


def draw_figures(out: Path, dpi: int = 200) -> Path:
    """Draw the site's figures as PNG into ``out`` (docs/hooks/figures.py's ``write_figures``)."""
    hook = ROOT / "docs" / "hooks" / "figures.py"
    spec = importlib.util.spec_from_file_location("racer_ref_site_figures", hook)
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    figures.write_figures(out, ["png"], dpi)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Build the course's slide deck from docs/syllabus.md.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"the .pptx to write (default {DEFAULT_OUT})")
    parser.add_argument("--figures", type=Path, default=None, metavar="DIR",
                        help="the PNGs of `make figures` (default: draw them into a temporary folder)")
    parser.add_argument("--syllabus", type=Path, default=SYLLABUS,
                        help="the syllabus page (default docs/syllabus.md)")
    args = parser.parse_args(argv)
    try:
        import pptx  # noqa: F401
    except ImportError:
        print("slides: python-pptx is missing; install the dev extra (pip install 'racer-ref[dev]') "
              "or pip install python-pptx", file=sys.stderr)
        return 2
    syllabus = parse(args.syllabus.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        figures = args.figures if args.figures is not None else draw_figures(Path(tmp))
        out = build(syllabus, figures, args.out)
    print(f"wrote {out}: {len(pptx.Presentation(str(out)).slides)} slides, {len(syllabus.units)} units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
