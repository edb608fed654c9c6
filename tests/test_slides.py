"""The syllabus page and the slide deck built from it (docs/scripts/slides.py, `make slides`).

The syllabus tests need nothing beyond the standard library; the deck tests need python-pptx
(the `dev` extra) and skip with that reason without it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYLLABUS = ROOT / "docs" / "syllabus.md"
INSTRUCTOR = ROOT / "docs" / "instructor.md"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


slides = _load("racer_ref_site_slides", ROOT / "docs" / "scripts" / "slides.py")


@pytest.fixture(scope="module")
def syllabus():
    return slides.parse(SYLLABUS.read_text(encoding="utf-8"))


def test_every_unit_has_goals_questions_and_notes(syllabus):
    assert [u.number for u in syllabus.units] == list(range(1, 10))
    for unit in syllabus.units:
        assert 3 <= len(unit.questions) <= 5, unit.number
        assert all("?" in q for q in unit.questions), unit.number
        kinds = [n.split(":")[0] for n in unit.notes]
        assert kinds[:3] == ["Prerequisites", "Material", "Time"], (unit.number, kinds)
        assert kinds[3].startswith("Class session"), (unit.number, kinds)
    assert len(syllabus.overview) == len(syllabus.units)
    assert any(c.startswith("Option A") for c in syllabus.capstone)
    assert any(c.startswith("Rubric: correctness (30)") for c in syllabus.capstone)


def test_every_tutorial_and_exercise_has_learning_goals(syllabus):
    goals = " ".join(g for u in syllabus.units for g in u.goals)
    for path in sorted((ROOT / "exercises").glob("[0-9][0-9]_*.py")):
        assert f"Exercise {path.name[:2]} ({path.name})" in goals, path.name
    for path in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py")):
        assert f"Tutorial {path.name[:2]} (" in goals, path.name


def test_the_rubric_adds_up_to_100():
    text = SYLLABUS.read_text(encoding="utf-8").split("## Capstone project")[1]
    points = [int(m.group(1)) for m in re.finditer(r"^\| [a-z ]+ \| (\d+) \|", text, re.M)]
    assert len(points) == 5 and sum(points) == 100


def test_every_question_has_an_answer(syllabus):
    text = INSTRUCTOR.read_text(encoding="utf-8")
    for unit in syllabus.units:
        section = text.split(f"## Unit {unit.number}: {unit.title}\n")[1].split("\n## ")[0]
        numbers = [int(n) for n in re.findall(r"^(\d+)\. ", section, re.M)]
        assert numbers == list(range(1, len(unit.questions) + 1)), unit.number


def test_every_figure_is_one_the_site_draws(syllabus):
    figures = _load("racer_ref_site_figures", ROOT / "docs" / "hooks" / "figures.py")
    drawn = {Path(name).stem for name in figures.FIGURES}
    shown = {name for u in syllabus.units for name, _ in u.figures}
    assert shown and shown <= drawn, shown - drawn


def test_parse_refuses_a_unit_without_questions():
    page = "# Syllabus\n\n## Unit 1: A\n\n### Learning goals\n\n- one\n"
    with pytest.raises(ValueError, match="unit 1 needs"):
        slides.parse(page)
    page += ("\n### Written questions\n\n1. why?\n\n"
             "## Unit 3: B\n\n### Learning goals\n\n- x\n\n### Written questions\n\n1. y?\n")
    with pytest.raises(ValueError, match=r"numbered \[1, 3\]"):
        slides.parse(page)


# ------------------------------------------------------------------------------ the deck
@pytest.fixture(scope="module")
def deck(tmp_path_factory, syllabus):
    pptx = pytest.importorskip("pptx", reason="python-pptx (the dev extra) builds the slide deck")
    out = tmp_path_factory.mktemp("slides")
    figures = slides.draw_figures(out / "figures", dpi=60)
    path = slides.build(syllabus, figures, out / "racer-ref-slides.pptx")
    return pptx.Presentation(str(path)), figures


def _texts(slide):
    return [p.text for shape in slide.shapes if shape.has_text_frame and shape != slide.shapes.title
            for p in shape.text_frame.paragraphs]


def test_deck_has_one_goals_and_one_questions_slide_per_unit(deck, syllabus):
    presentation, _ = deck
    titles = [s.shapes.title.text for s in presentation.slides]
    expected = ["Speculative decoding with RACER", "The units"]
    for unit in syllabus.units:
        name = f"Unit {unit.number}: {unit.title}"
        expected += [name] * max(1, len(unit.figures)) + [f"{name}: written questions"]
    assert titles == expected + ["Capstone project"]
    by_title = {}
    for s in presentation.slides:
        by_title.setdefault(s.shapes.title.text, s)
    for unit in syllabus.units:
        name = f"Unit {unit.number}: {unit.title}"
        goals = " ".join(_texts(by_title[name]))
        assert all(g in goals for g in unit.goals), unit.number
        questions = _texts(by_title[f"{name}: written questions"])
        assert questions == [f"{i}. {q}" for i, q in enumerate(unit.questions, 1)]
        notes = by_title[name].notes_slide.notes_text_frame.text
        assert notes.startswith("Prerequisites:") and "\nTime: reading" in notes


def test_deck_shows_each_units_figures(deck, syllabus):
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    presentation, figures = deck
    png = {p.stem: hashlib.sha256(p.read_bytes()).hexdigest() for p in figures.glob("*.png")}
    shown = []  # (unit title, sha256 of the image) in slide order
    for s in presentation.slides:
        for shape in s.shapes:
            if shape.shape_type == MSO_SHAPE_TYPE.PICTURE:
                shown.append((s.shapes.title.text, hashlib.sha256(shape.image.blob).hexdigest()))
                # Inside the slide.
                assert shape.left >= 0 and shape.top >= 0
                assert shape.left + shape.width <= presentation.slide_width
                assert shape.top + shape.height <= presentation.slide_height
    expected = [(f"Unit {u.number}: {u.title}", png[name])
                for u in syllabus.units for name, _ in u.figures]
    assert shown == expected


def test_main_writes_the_deck(tmp_path, capsys, deck):
    _, figures = deck
    out = tmp_path / "deck.pptx"
    assert slides.main(["--figures", str(figures), "--out", str(out)]) == 0
    assert out.stat().st_size > 50_000
    assert re.search(r"wrote .*deck\.pptx: \d+ slides, 9 units", capsys.readouterr().out)


def test_a_missing_figure_is_named(tmp_path, syllabus):
    pytest.importorskip("pptx", reason="python-pptx (the dev extra) builds the slide deck")
    with pytest.raises(FileNotFoundError, match="make figures"):
        slides.build(syllabus, tmp_path, tmp_path / "deck.pptx")
