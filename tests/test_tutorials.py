"""Every tutorial runs, prints what its docs page shows, and its page includes all of it.

* Each ``tutorials/NN_*.py`` runs in a fresh interpreter (as a student would run it) within a
  time limit and exits 0; the tutorials assert their own claims as they go. Tutorials 07
  and 08 (minutes on a loaded CPU) run as their notebook instead, in a fresh Jupyter kernel:
  the same code, executed once.
* Its output must equal the committed transcript ``tutorials/transcripts/NN_*.txt`` that the
  docs page shows (``@output``): exactly for the deterministic tutorials; for those that run
  a model (timings, and greedy text that may differ in a near-tie between CPUs) the section
  headers must match and the lines that state their checks must be printed.
* Tutorials 01-07 also run with numpy alone (no Rust core built, no torch): the parts that
  need them say they are skipped and why.
* Its docs page ``docs/tutorials/NN-*.md`` includes every snippet section of the script, and
  nothing else, so page and code cannot drift apart.

After changing a tutorial on purpose, rewrite the transcripts and look at the diff::

    RACER_REF_UPDATE_TRANSCRIPTS=1 .venv/bin/python -m pytest tests/test_tutorials.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_notebooks import EXECUTED_BY_TEST_TUTORIALS, execute_notebook

REPO = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((REPO / "tutorials").glob("[0-9][0-9]_*.py"))
TRANSCRIPTS = REPO / "tutorials" / "transcripts"
PAGES = REPO / "docs" / "tutorials"
UPDATE = os.environ.get("RACER_REF_UPDATE_TRANSCRIPTS") == "1"

#: Tutorials whose output depends on floating point or the clock: only their section headers
#: are compared with the transcript, and the marker lines below must be printed.
APPROXIMATE = {"07", "08"}
#: Lines (regular expressions) each of these tutorials must print: the claims they check.
MARKERS = {
    "01": [r"^trie == brute-force counts: True$", r"dump\(\) == .*dump\(\): True$"],
    "02": [r"agrees with the automaton on all 15 links: True$", r"chain: +dab -> ab -> b -> ∅$"],
    "03": [r"lazy links == eager build: True$"],
    "04": [r"invariant held after every commit"],
    "05": [r"k = 8, capacity = 64: 1 / 8 / 19 / 24 / 12$", r"k = 4, capacity = 21: 1 / 4 / 8 / 8$",
           r"Rust shapes == Python shapes: True$"],
    "06": [r"mask == 'ancestor or self' rebuilt from parents: True$",
           r"The Rust core builds the same arrays: True$"],
    "07": [r"identical to the toy's greedy output: True$", r"^  identical to greedy: True$"]
    + [rf"^  {m} +identical to greedy: True" for m in ("ar", "pld", "retrieval", "logits", "logits-last", "racer")],
    "08": [r"^  racer output identical to ar: True$"],
}
#: Seconds before a tutorial counts as hung (they take seconds; the margin is for loaded CI).
TIMEOUT = {"08": 900, "07": 300}  # generous: a loaded 2-core machine is 5-10x slower


def number(path: Path) -> str:
    return path.name[:2]


def run(path: Path) -> str:
    if number(path) in EXECUTED_BY_TEST_TUTORIALS:
        # The expensive tutorials run once, as their notebook (generated from this very
        # script and checked to be up to date by test_notebooks.py).
        return execute_notebook(REPO / "notebooks" / (path.stem + ".ipynb"),
                                timeout=TIMEOUT.get(number(path), 120))
    env = dict(os.environ)
    # The package from this checkout, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "2")
    env["PYTHONIOENCODING"] = "utf-8"
    proc = subprocess.run(
        [sys.executable, str(path)], cwd=REPO, env=env, capture_output=True, text=True,
        encoding="utf-8", timeout=TIMEOUT.get(number(path), 120),
    )
    assert proc.returncode == 0, f"{path.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


#: Run a script as if neither the Rust core nor torch were installed (a source checkout
#: with only numpy): importing them raises ImportError.
WITHOUT_CORE_AND_TORCH = ("import runpy, sys\n"
                          "for name in ('racer_ref._core', 'torch', 'transformers'):\n"
                          "    sys.modules[name] = None\n"
                          "runpy.run_path(sys.argv[1], run_name='__main__')\n")
#: What each tutorial must print in that case (the parts it skips, and why).
SKIP_MESSAGES = {
    "01": [r"Rust core not built \(racer_ref\._core missing\): skipping the side-by-side with the Rust automaton"],
    "05": [r"Rust core not built \(racer_ref\._core missing\): skipping"],
    "06": [r"Rust core not built \(racer_ref\._core missing\): skipping"],
    "07": [r"identical to the toy's greedy output: True$",
           r"torch and transformers not installed: skipping the tiny Llama"],
}


@pytest.mark.parametrize("path", [p for p in TUTORIALS if number(p) <= "07"], ids=lambda p: p.stem)
def test_tutorial_runs_with_numpy_only(path):
    env = dict(os.environ, PYTHONIOENCODING="utf-8", OMP_NUM_THREADS="2")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", WITHOUT_CORE_AND_TORCH, str(path)], cwd=REPO, env=env,
                          capture_output=True, text=True, encoding="utf-8", timeout=120)
    assert proc.returncode == 0, f"{path.name} failed without the Rust core and torch:\n{proc.stderr[-3000:]}"
    for message in SKIP_MESSAGES.get(number(path), []):
        assert re.search(message, proc.stdout, re.M), f"{path.name} did not print {message!r}"
    if number(path) not in SKIP_MESSAGES:  # nothing to skip: the same output as with the core
        assert proc.stdout == (TRANSCRIPTS / (path.stem + ".txt")).read_text(encoding="utf-8")


def headers(text: str) -> list:
    """The section header lines ("── N. title") of a tutorial's output."""
    return re.findall(r"^── \d+\..*$", text, re.M)


def sections(path: Path) -> list:
    return re.findall(r"^# --8<-- \[start:(\w+)\]", path.read_text(encoding="utf-8"), re.M)


def page_of(path: Path) -> Path:
    pages = list(PAGES.glob(f"{number(path)}-*.md"))
    assert len(pages) == 1, f"expected one docs page docs/tutorials/{number(path)}-*.md, got {pages}"
    return pages[0]


def test_tutorials_are_numbered_from_01_without_gaps():
    assert [number(p) for p in TUTORIALS] == [f"{i:02d}" for i in range(1, len(TUTORIALS) + 1)]
    assert len(TUTORIALS) >= 8


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs_and_prints_its_transcript(path):
    out = run(path)
    for marker in MARKERS.get(number(path), []):
        assert re.search(marker, out, re.M), f"{path.name} did not print a line matching {marker!r}"
    transcript = TRANSCRIPTS / (path.stem + ".txt")
    if UPDATE:
        TRANSCRIPTS.mkdir(exist_ok=True)
        transcript.write_text(out, encoding="utf-8")
    assert transcript.is_file(), f"missing {transcript}; run with RACER_REF_UPDATE_TRANSCRIPTS=1"
    expected = transcript.read_text(encoding="utf-8")
    hint = f"{path.name} no longer prints {transcript.name}; if intended, RACER_REF_UPDATE_TRANSCRIPTS=1"
    if number(path) in APPROXIMATE:
        assert headers(out) == headers(expected), hint
    else:
        assert out == expected, hint


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_page_includes_every_section_and_its_output(path):
    text = path.read_text(encoding="utf-8")
    assert "**What you will learn**" in text.split('"""')[1], f"{path.name}: no 'What you will learn'"
    defined = sections(path)
    assert len(defined) == len(set(defined)), f"{path.name}: a snippet section is defined twice"
    assert re.findall(r"^# --8<-- \[end:(\w+)\]", text, re.M) == defined, f"{path.name}: unbalanced markers"
    page = page_of(path).read_text(encoding="utf-8")
    rel = path.relative_to(REPO).as_posix()
    included = re.findall(rf'--8<-- "{re.escape(rel)}:(\w+)"', page)
    assert sorted(included) == sorted(defined), f"{page_of(path).name} must include each section once"
    assert f"@docstring {rel}" in page
    # Every printed section ("── N.") is shown on the page.
    printed = re.findall(r"^── (\d+)\.", (TRANSCRIPTS / (path.stem + ".txt")).read_text(encoding="utf-8"), re.M)
    shown = re.findall(rf"^\s*@output tutorials/transcripts/{re.escape(path.stem)}\.txt (\d+)\s*$", page, re.M)
    assert sorted(shown, key=int) == printed, f"{page_of(path).name} must show each printed section once"
