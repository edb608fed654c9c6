"""The docs page "One step, in the code" cannot drift: docs/scripts/route.py traces one decode
again and its output must equal docs/includes/one-step-route.md, which the page includes.

The route's limits are checked too (``route.TARGETS``): at most 1,150 lines in 12 files and 31
file changes with the Python twin, at most 500 lines in 5 files with the Rust core; and
``max_new_tokens``, followed from ``generate()`` through the calls that pass it on, comes back
into a file it had left at most ``route.MAX_RETURNS`` (2) times.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "scripts"))
import route  # noqa: E402

RUST = importlib.util.find_spec("racer_ref._core") is not None


def sections(text: str) -> dict:
    """The committed include, split per backend (each section starts with "**With ")."""
    parts = text.split("**With ")
    return {("rust" if "Rust core" in p.split("\n")[0] else "python"): "**With " + p for p in parts[1:]}


@pytest.fixture(scope="module")
def traces():
    return {b: route.trace(b) for b in (["python", "rust"] if RUST else ["python"])}


@pytest.fixture(scope="module")
def journeys():
    return {b: route.journey(b) for b in (["python", "rust"] if RUST else ["python"])}


def test_the_page_includes_the_route(traces, journeys):
    page = (ROOT / "docs" / "explanation" / "one-step.md").read_text(encoding="utf-8")
    assert '--8<-- "docs/includes/one-step-route.md"' in page
    committed = sections(route.INCLUDE.read_text(encoding="utf-8"))
    assert set(committed) == {"python", "rust"}
    for backend, order in traces.items():
        fresh = route.markdown(backend, order, journeys[backend])
        assert committed[backend].rstrip("\n") == fresh.rstrip("\n"), (
            f"docs/includes/one-step-route.md is stale for backend={backend}: "
            "run python docs/scripts/route.py --write")


def test_the_route_is_the_loop_and_the_drafter(traces):
    fig = route.figures(traces["python"])
    files = [path for path, _, _ in fig["per_file"]]
    assert files[0] == "decoding.py"  # the student starts with the loop
    assert "integrations/processing.py" not in files  # no processor code without processors
    assert not any(path.startswith("integrations/") for path in files)
    assert fig["functions"] == len({(p, f, s) for p, f, s, _ in traces["python"]})
    assert fig["lines"] <= sum(end - start + 1 for _, _, start, end in traces["python"])


#: The files of the twin's route: the loop and its boundary, the drafting it makes, verification
#: and the draft-tree contract (as with the Rust core), then the paper's step in the twin, one
#: module per Rust module, and the twin's limits (the Drafter checks its arguments there, once,
#: when built).
TWIN_FILES = {"decoding.py", "options.py", "drafter.py", "verify.py", "tree.py", "reference/drafter.py",
              "reference/limits.py", "reference/copy_logit.py", "reference/automaton.py", "reference/lru.py",
              "reference/draft_tree.py", "reference/logits_tree.py"}


def test_twin_route_meets_the_line_and_change_targets(traces):
    fig = route.figures(traces["python"])
    lines, _, changes = route.TARGETS["python"]
    assert fig["lines"] <= lines and fig["changes"] <= changes, (fig["lines"], fig["changes"])


def test_twin_route_is_the_paper_step(traces):
    """No speed-up, no estimate, no interrupt undo, no facade on the way: exactly TWIN_FILES."""
    files = {path for path, _, _ in route.figures(traces["python"])["per_file"]}
    assert files == TWIN_FILES


def test_twin_route_meets_the_file_target(traces):
    assert route.figures(traces["python"])["files"] <= route.TARGETS["python"][1]


def test_max_new_tokens_comes_back_to_a_file_at_most_twice(journeys):
    for backend, passed in journeys.items():
        assert passed[:2] == [("decoding.py", "generate"), ("options.py", "resolve")], passed
        assert route.returns(passed) <= route.MAX_RETURNS, (backend, passed)


def test_the_return_count_sees_a_return():
    passed = [("decoding.py", "generate"), ("options.py", "resolve"), ("limits.py", "at_least"),
              ("options.py", "_drafter"), ("options.py", "_given"), ("limits.py", "int_value")]
    assert route.returns(passed) == 2


@pytest.mark.skipif(not RUST, reason="the Rust extension is not built")
def test_rust_route_meets_the_targets(traces):
    fig = route.figures(traces["rust"])
    lines, files, _ = route.TARGETS["rust"]
    assert fig["lines"] <= lines and fig["files"] <= files, (fig["lines"], fig["files"])
    assert not any(path.startswith(("reference/", "speedups/", "integrations/")) for path, _, _ in fig["per_file"])
