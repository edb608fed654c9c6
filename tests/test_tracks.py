"""The short tracks page (docs/tracks.md) names exercises, tutorials, questions and lecture
slides that exist: the lecture's timetable is the deck's (docs/scripts/lecture.py), and every
"unit N: questions" reference is a written question of the syllabus with an answer."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACKS = (ROOT / "docs" / "tracks.md").read_text(encoding="utf-8")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _section(title: str) -> str:
    return TRACKS.split(f"## {title}\n")[1].split("\n## ")[0]


def test_every_exercise_and_tutorial_named_exists():
    exercises = set(re.findall(r"\b(\d\d_\w+\.py)\b", TRACKS))
    files = {p.name for p in (ROOT / "exercises").glob("[0-9][0-9]_*.py")}
    tutorials = {p.name for p in (ROOT / "tutorials").glob("[0-9][0-9]_*.py")}
    assert exercises and exercises <= files | tutorials, exercises - files - tutorials
    for page in re.findall(r"\]\((tutorials/[\w-]+\.md)", TRACKS):
        assert (ROOT / "docs" / page).is_file(), page


def test_the_one_day_lab_uses_exercises_07_to_09_and_the_take_home_10():
    one_day = _section("The one-day track")
    lab = one_day.split("### The lab")[1].split("### Take-home")[0]
    assert re.findall(r"`exercises/(\d\d)_\w+\.py`", lab) == ["07", "08", "09"]
    take_home = one_day.split("### Take-home")[1].split("### ")[0]
    assert re.findall(r"`exercises/(\d\d)_\w+\.py`", take_home) == ["10"]
    # The lab's timetable fills three hours.
    rows = re.findall(r"^\| (\d+)-(\d+) \|", lab, re.M)
    assert rows[0][0] == "0" and rows[-1][1] == "180"
    assert all(a[1] == b[0] for a, b in zip(rows, rows[1:]))


def test_the_lecture_timetable_is_the_decks():
    lecture = _load("racer_ref_site_lecture", ROOT / "docs" / "scripts" / "lecture.py")
    table = _section("The one-day track").split("### The lecture")[1].split("### ")[0]
    rows = re.findall(r"^\| (\d+)-(\d+) \| ([^|]+?) \|", table, re.M)
    assert [(int(a), int(b), title) for a, b, title in rows] == \
        [(s.minutes[0], s.minutes[1], s.title) for s in lecture.LECTURE]


def test_every_question_asked_is_a_written_question_with_an_answer():
    slides = _load("racer_ref_site_slides", ROOT / "docs" / "scripts" / "slides.py")
    syllabus = slides.parse((ROOT / "docs" / "syllabus.md").read_text(encoding="utf-8"))
    count = {u.number: len(u.questions) for u in syllabus.units}
    asked = []
    # "unit 7: 1, 2, 4" (the tables of questions) and "unit 7, questions 1 and 2" (the timetable).
    pattern = r"unit (\d)(?::|, questions?) ((?:\d(?:-\d)?(?:, | and )?)+)"
    for unit, numbers in re.findall(pattern, TRACKS):
        for part in re.split(r", | and ", numbers.strip(", ")):
            first, _, last = part.partition("-")
            asked += [(int(unit), q) for q in range(int(first), int(last or first) + 1)]
    assert len(asked) > 30
    for unit, question in asked:
        assert 1 <= question <= count[unit], (unit, question)
    # The one-day track's exit question is unit 1, question 4, quoted as the syllabus asks it.
    exit_question = next(q for q in syllabus.units[0].questions if q.startswith("Why can a bad draft"))
    assert exit_question == syllabus.units[0].questions[3]
    assert exit_question.replace("?", "") in TRACKS.replace("\n", " ")


def test_the_lecture_notes_ask_questions_that_exist():
    lecture = _load("racer_ref_site_lecture", ROOT / "docs" / "scripts" / "lecture.py")
    slides = _load("racer_ref_site_slides", ROOT / "docs" / "scripts" / "slides.py")
    syllabus = slides.parse((ROOT / "docs" / "syllabus.md").read_text(encoding="utf-8"))
    count = {u.number: len(u.questions) for u in syllabus.units}
    cited = [(int(u), int(q)) for s in lecture.LECTURE
             for u, q in re.findall(r"unit (\d), question (\d)", s.notes)]
    assert len(cited) >= 10
    assert all(1 <= q <= count[u] for u, q in cited), cited
