"""The one-day track's lecture deck (docs/scripts/lecture.py, `make lecture`).

The deck tests need python-pptx (the `dev` extra). The rendering test also needs LibreOffice
Impress and poppler (Debian: ``apt-get install --no-install-recommends libreoffice-impress
poppler-utils``): it converts the deck to PDF with ``soffice --headless``, each page to PNG
with ``pdftoppm``, and looks at the pictures; it skips, saying which program is missing,
where they are not installed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


lecture = _load("racer_ref_site_lecture", ROOT / "docs" / "scripts" / "lecture.py")
EMU_PER_INCH = 914400
#: The figures the lecture must show (issue 33): the automaton with failure links, the draft
#: tree, its attention mask, the accept walk and a timing plot.
REQUIRED_FIGURES = {"trie-failure-links", "draft-tree", "tree-mask", "accept-walk", "timing"}


@pytest.fixture(scope="module")
def deck(tmp_path_factory):
    pptx = pytest.importorskip("pptx", reason="python-pptx (the dev extra) builds the lecture deck")
    out = tmp_path_factory.mktemp("lecture")
    figures = lecture._slides_module().draw_figures(out / "figures", dpi=60)
    path = lecture.build(figures, out / "racer-ref-lecture.pptx")
    return pptx.Presentation(str(path)), figures, path


def test_the_timetable_fills_75_minutes_without_gaps():
    minutes = [s.minutes for s in lecture.LECTURE]
    assert minutes[0][0] == 0 and minutes[-1][1] == 75
    assert all(a[1] == b[0] for a, b in zip(minutes, minutes[1:])), minutes
    assert all(start < end for start, end in minutes)


def test_every_slide_has_a_title_and_speaker_notes(deck):
    presentation, _, _ = deck
    slides = list(presentation.slides)
    assert len(slides) == 1 + len(lecture.LECTURE) == 13
    assert [s.shapes.title.text for s in slides[1:]] == [s.title for s in lecture.LECTURE]
    for s, spec in zip(slides[1:], lecture.LECTURE):
        notes = s.notes_slide.notes_text_frame.text
        assert notes.startswith(f"[minutes {spec.minutes[0]}-{spec.minutes[1]} of 75] ")
        assert len(notes) > 200, s.shapes.title.text
    assert "docs/tracks.md" in slides[0].notes_slide.notes_text_frame.text


def test_the_lecture_shows_the_sites_figures(deck):
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    presentation, figures, _ = deck
    png = {hashlib.sha256(p.read_bytes()).hexdigest(): p.stem for p in figures.glob("*.png")}
    shown = [png[hashlib.sha256(shape.image.blob).hexdigest()]
             for s in presentation.slides for shape in s.shapes if shape.shape_type == MSO_SHAPE_TYPE.PICTURE]
    assert shown == [s.figure for s in lecture.LECTURE if s.figure]
    assert REQUIRED_FIGURES <= set(shown)
    site = _load("racer_ref_site_figures", ROOT / "docs" / "hooks" / "figures.py")
    assert set(shown) <= {Path(name).stem for name in site.FIGURES}


def test_every_shape_is_inside_its_slide_and_no_text_is_small(deck):
    presentation, _, _ = deck
    width, height = presentation.slide_width, presentation.slide_height
    assert (width / EMU_PER_INCH, height / EMU_PER_INCH) == pytest.approx((13.333, 7.5), abs=1e-3)
    for s in presentation.slides:
        for shape in s.shapes:
            assert shape.left >= 0 and shape.top >= 0, s.shapes.title.text
            assert shape.left + shape.width <= width and shape.top + shape.height <= height, s.shapes.title.text
            if shape.has_text_frame and shape != s.shapes.title and s != presentation.slides[0]:
                sizes = {run.font.size.pt for p in shape.text_frame.paragraphs for run in p.runs}
                assert sizes and min(sizes) >= lecture.MIN_POINTS, (s.shapes.title.text, sizes)


def test_both_title_slides_are_centred(deck, tmp_path):
    """The title layout's placeholders are made for a 10-inch slide; both decks centre them on
    their 13.333-inch slides (the lecture's and `make slides`'s)."""
    import pptx

    presentation, figures, _ = deck
    syllabus = lecture._slides_module().parse((ROOT / "docs" / "syllabus.md").read_text(encoding="utf-8"))
    course = pptx.Presentation(str(lecture._slides_module().build(syllabus, figures, tmp_path / "s.pptx")))
    for deck_ in (presentation, course):
        for shape in deck_.slides[0].placeholders:
            assert shape.left + shape.width / 2 == pytest.approx(deck_.slide_width / 2, abs=EMU_PER_INCH / 100)
            assert shape.width >= 11 * EMU_PER_INCH


def test_the_lab_slide_names_exercises_that_exist():
    lab = next(s for s in lecture.LECTURE if s.title.startswith("The lab"))
    names = re.findall(r"\((\d\d_\w+\.py)\)", " ".join(lab.bullets))
    assert names == ["07_draft_tree.py", "08_tree_attention_mask.py", "09_greedy_acceptance.py"]
    assert all((ROOT / "exercises" / name).is_file() for name in names)


def test_text_that_does_not_fit_is_refused(tmp_path, deck):
    _, figures, _ = deck
    crowded = lecture.Slide("Too much", notes="n", minutes=(0, 75), bullets=["word " * 400])
    with pytest.raises(ValueError, match="does not fit at 18 pt"):
        lecture.build(figures, tmp_path / "x.pptx", [crowded])
    with pytest.raises(ValueError, match="no speaker notes"):
        lecture.build(figures, tmp_path / "x.pptx", [lecture.Slide("Silent", notes=" ", minutes=(0, 75))])


def test_main_writes_the_deck(tmp_path, capsys, deck):
    _, figures, _ = deck
    out = tmp_path / "lecture.pptx"
    assert lecture.main(["--figures", str(figures), "--out", str(out)]) == 0
    assert out.stat().st_size > 50_000
    assert re.search(r"wrote .*lecture\.pptx: 13 slides", capsys.readouterr().out)


# -------------------------------------------------------------------- rendered by LibreOffice
RENDER_DPI = 30


def _render(path: Path, tmp: Path) -> list:
    """The pages of the deck at ``path`` as PIL images, rendered by LibreOffice and poppler
    (skips the test where either is missing)."""
    from PIL import Image

    for program, package in (("soffice", "libreoffice-impress"), ("pdftoppm", "poppler-utils")):
        if shutil.which(program) is None:
            pytest.skip(f"{program} not installed ({package}): the rendering check needs LibreOffice Impress "
                        f"and poppler (apt-get install --no-install-recommends libreoffice-impress poppler-utils)")
    # A profile of its own, so that a LibreOffice already running (a teacher's) is not used.
    env = dict(os.environ, HOME=str(tmp))
    subprocess.run(["soffice", f"-env:UserInstallation={(tmp / 'profile').as_uri()}", "--headless",
                    "--convert-to", "pdf", "--outdir", str(tmp), str(path)],
                   check=True, capture_output=True, env=env, timeout=180)
    pdf = tmp / (path.stem + ".pdf")
    assert pdf.is_file(), "soffice wrote no PDF"
    subprocess.run(["pdftoppm", "-r", str(RENDER_DPI), "-png", str(pdf), str(tmp / "page")],
                   check=True, capture_output=True, timeout=60)
    return [Image.open(page) for page in sorted(tmp.glob("page-*.png"))]


def _problems(pages: list) -> list:
    """What is wrong with the rendered pages, as sentences (empty: nothing).

    A page is blank, or shows nothing below its title band, or has ink in its margins: every
    text box of the deck ends 0.3 inch above the slide's bottom edge and wraps its lines, so
    text that overflows its box runs into that margin (or off the page).
    """
    problems = []
    margin = 0.2 * RENDER_DPI
    for number, image in enumerate(pages, start=1):
        grey = image.convert("L")
        box = grey.point(lambda v: 255 if v < 200 else 0).getbbox()  # the non-white pixels
        if box is None:
            problems.append(f"slide {number} renders blank")
            continue
        if box[3] <= 3.0 * RENDER_DPI:
            problems.append(f"slide {number} shows nothing below its title")
        if box[0] < margin or box[1] < margin or box[2] > image.size[0] - margin:
            problems.append(f"slide {number}: ink at the top, left or right edge {box}")
        if box[3] > image.size[1] - margin:
            problems.append(f"slide {number}: text overflows at the bottom {box}")
    return problems


def _ink(image) -> float:
    """The share of dark pixels of a rendered page."""
    grey = image.convert("L")
    return sum(grey.histogram()[:200]) / (grey.size[0] * grey.size[1])


def test_the_rendered_deck_has_a_page_per_slide_none_blank_none_overflowing(deck, tmp_path):
    presentation, _, path = deck
    pages = _render(path, tmp_path)
    assert len(pages) == len(presentation.slides) == 13
    assert {image.size for image in pages} == {(round(13.333 * RENDER_DPI), round(7.5 * RENDER_DPI))}
    assert _problems(pages) == []
    # A figure slide shows its figure: far more ink than a text slide's letters.
    for image, spec in zip(pages[1:], lecture.LECTURE):
        if spec.figure:
            assert _ink(image) > 0.02, f"{spec.title}: its figure {spec.figure} does not show"


def test_the_course_deck_renders_too(deck, tmp_path):
    """`make slides`'s deck (docs/scripts/slides.py), rendered the same way: a page per slide,
    none blank, no text out of its box. (Its text-fit estimate once let unit 8's goals run
    off the slide in LibreOffice.)"""
    import pptx

    _, figures, _ = deck
    slides = lecture._slides_module()
    syllabus = slides.parse((ROOT / "docs" / "syllabus.md").read_text(encoding="utf-8"))
    path = slides.build(syllabus, figures, tmp_path / "racer-ref-slides.pptx")
    pages = _render(path, tmp_path)
    assert len(pages) == len(pptx.Presentation(str(path)).slides) == 22
    assert _problems(pages) == []


def test_the_rendering_check_sees_overflowing_text(deck, tmp_path, monkeypatch):
    """The check above would catch text running out of its box: a deck whose one slide holds
    far too much text (allowed at 12 pt here) is reported."""
    _, figures, _ = deck
    monkeypatch.setattr(lecture, "MIN_POINTS", 12)
    crowded = lecture.Slide("Too much", notes="n", minutes=(0, 75),
                            bullets=[f"line {i}: " + "words " * 30 for i in range(14)])
    path = lecture.build(figures, tmp_path / "crowded.pptx", [crowded])
    problems = _problems(_render(path, tmp_path))
    assert any(p.startswith("slide 2: text overflows at the bottom") for p in problems), problems
