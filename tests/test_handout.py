"""``make handout``: the students' zip, its checker from recorded answers, and no answers in it.

The zip is built once (docs/scripts/handout.py, as ``make handout`` runs it), unzipped, and
checked in a NEW virtual environment that holds numpy only (no system site packages, no
racer-ref, no torch, no Rust core):

* the stubs of exercises/ are each reported "not written yet";
* the instructor's solutions (tests/check_solutions/) get full marks, every case of every
  function, from the recorded answers (the solutions import the twin, so they run from a copy
  of the handout to which the twin is added for them; the checker still answers from the
  recording: check.py installs it);
* a wrong answer gets the checker's diagnosis from the recorded answers alone;
* no file of the zip is the twin's or defines its classes and functions.

Exercises 09 and 10 are checked against ``racer_ref.verify`` (torch): in the numpy venv
exercise 10 is refused with what to install; their solutions get full marks in this
environment (with torch) from the same zip. About 20 s (the venv: a few seconds; pip
installs numpy from its cache where it can).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from racer_ref.course import check
from racer_ref.course.recorded import FORMAT, NotRecorded, Recorder, Replay, install

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "tests" / "check_solutions"
NUMPY_ONLY = [f"{n:02d}" for n in range(1, 9)]
#: Distinctive definitions of the twin (and the tree contract / verification code the checker
#: compares with): none may appear in the handout.
TWIN_DEFINITIONS = ["class TreeBuilder", "def grow_logits_tree", "class RecencyList", "class Automaton",
                    "def tree_attention_mask(parents: np.ndarray)", "def leaf_paths", "def keep_accepted(cache",
                    "def eager_failure_links(paths", "def count_occurrences",
                    "def build_draft_tree("]


@pytest.fixture(scope="module")
def zip_path(tmp_path_factory) -> Path:
    """``make handout`` (with this environment's python), or its script where make is missing."""
    out = tmp_path_factory.mktemp("handout") / "racer-ref-handout.zip"
    if shutil.which("make"):
        command = ["make", "--no-print-directory", "handout", f"HANDOUT={out}", f"HANDOUT_PY={sys.executable}"]
    else:
        command = [sys.executable, str(ROOT / "docs" / "scripts" / "handout.py"), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "recorded exercises 01, 02, 03, 04, 05, 06, 07, 08, 09, 10" in done.stdout, done.stdout
    return out


@pytest.fixture(scope="module")
def handout(zip_path: Path) -> Path:
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(zip_path.parent)
    return zip_path.parent / "racer-ref-handout"


@pytest.fixture(scope="module")
def numpy_python(tmp_path_factory) -> Path:
    """The python of a new venv that holds numpy only (pip run from this environment)."""
    venv = tmp_path_factory.mktemp("venv") / "numpy-only"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    import numpy

    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                          "--disable-pip-version-check", f"numpy=={numpy.__version__}"],
                         capture_output=True, text=True, timeout=300)
    if pip.returncode != 0:
        pytest.skip(f"numpy could not be installed into a new venv (offline, no pip cache?): {pip.stderr[-300:]}")
    found = subprocess.run([str(python), "-c", "import importlib.util as u; print([m for m in "
                            "('numpy', 'racer_ref', 'torch') if u.find_spec(m)])"],
                           capture_output=True, text=True, cwd="/", timeout=60, env=clean_env())
    assert found.stdout.strip() == "['numpy']", found
    return python


def clean_env() -> dict:
    """This environment without the variables that would put this checkout on sys.path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def run_check(python: Path, handout: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "check.py", *args], cwd=handout, capture_output=True, text=True,
                          env=clean_env(), timeout=300)


def with_twin_for_solutions(handout: Path, tmp: Path) -> Path:
    """A copy of the handout to which the repository's racer_ref is added (but the Rust core),
    because the instructor's solutions import the twin; its check.py still answers from the
    recording."""
    copy = tmp / "racer-ref-handout"
    shutil.copytree(handout, copy)
    shutil.copytree(ROOT / "python" / "racer_ref", copy / "racer_ref", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("_core*", "__pycache__", "check.py", "recorded.py"))
    shutil.copytree(SOLUTIONS, copy / "solutions")
    return copy


def live_totals(numbers) -> dict:
    """Cases per exercise and function, run here against the checker's default reference."""
    out = {}
    for number in numbers:
        path = next(SOLUTIONS.glob(f"{number}_*.py"))
        result = check.run_cases(check.load(path), check.EXERCISES[number], every=True)
        assert not result.failures, number
        out[number] = result.total
    return out


def test_the_zip_holds_no_twin(zip_path: Path) -> None:
    with zipfile.ZipFile(zip_path) as zf:
        names = zf.namelist()
        texts = {n: zf.read(n).decode("utf-8") for n in names if n.endswith((".py", ".json", ".md", ".ipynb"))}
    assert all(n.startswith("racer-ref-handout/") for n in names)
    inside = {n.split("/", 1)[1] for n in names}
    assert {"check.py", "README.md", "racer_ref/course/check.py", "racer_ref/course/recorded.json",
            "exercises/01_trie_frequencies.py", "exercises/10_kv_compaction.py",
            "tutorials/03_lazy_failure_links.py", "notebooks/07_verification_loop.ipynb"} <= inside
    assert not [n for n in inside if n.startswith(("racer_ref/reference", "racer_ref/tree.py",
                                                    "racer_ref/verify.py", "racer_ref/_core", "tests/"))]
    for name, text in texts.items():
        if name.endswith(".py"):
            for definition in TWIN_DEFINITIONS:
                assert definition not in text, f"{name} holds the twin's {definition!r}"
    # The shipped notebooks carry no outputs (what running the twin printed).
    for name, text in texts.items():
        if name.endswith(".ipynb"):
            assert all(not c.get("outputs") for c in json.loads(text)["cells"]), name
    recorded = json.loads(texts["racer-ref-handout/racer_ref/course/recorded.json"])
    assert recorded["format"] == FORMAT and recorded["exercises"] == [f"{n:02d}" for n in range(1, 11)]


def builder():
    """docs/scripts/handout.py as a module."""
    sys.path.insert(0, str(ROOT / "docs" / "scripts"))
    try:
        import handout as module
    finally:
        sys.path.remove(str(ROOT / "docs" / "scripts"))
    return module


def test_the_readme_says_what_is_recorded_and_the_tutorials_can_stay_out() -> None:
    answers = {"format": FORMAT, "exercises": NUMPY_ONLY, "answers": {},
               "skipped": {"09": "needs torch", "10": "needs torch"}}
    contents = builder().files(answers, tutorials=False)
    readme = contents["README.md"]
    assert "Recorded in this handout: exercises 01, 02, 03, 04, 05, 06, 07, 08. Not recorded: 09, 10 (" in readme
    assert "Not in this handout" in readme
    assert not [p for p in contents if p.startswith(("tutorials/", "notebooks/"))]
    assert "exercises/09_greedy_acceptance.py" in contents


def test_the_build_refuses_a_file_that_defines_the_twin() -> None:
    builder_ = builder()
    twin = (ROOT / "python" / "racer_ref" / "reference" / "lru.py").read_text(encoding="utf-8")
    with pytest.raises(SystemExit, match="RecencyList"):
        builder_.check_no_twin({"exercises/04_lru.py": twin})
    with pytest.raises(SystemExit, match="must not be in the handout"):
        builder_.check_no_twin({"racer_ref/reference/lru.py": "x = 1\n"})
    # An exercise's blank with the twin's name is no answer.
    builder_.check_no_twin({"exercises/05_copy_logit_table.py":
                           (ROOT / "exercises" / "05_copy_logit_table.py").read_text(encoding="utf-8")})


def test_the_stubs_are_not_written_yet_in_a_numpy_only_venv(handout: Path, numpy_python: Path) -> None:
    assert subprocess.run([str(numpy_python), "-c", "import racer_ref.reference"], cwd=handout,
                          capture_output=True, timeout=60, env=clean_env()).returncode == 1  # no twin in the handout
    stubs = [str(next((handout / "exercises").glob(f"{n}_*.py")).relative_to(handout)) for n in NUMPY_ONLY]
    done = run_check(numpy_python, handout, *stubs)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if "not written yet" in line]
    assert [line.split()[1] for line in lines] == NUMPY_ONLY, done.stdout
    ten = run_check(numpy_python, handout, "exercises/10_kv_compaction.py")
    assert ten.returncode == 2 and "works on torch tensors" in ten.stderr and "ask your teacher" in ten.stderr, ten.stderr


def test_the_solutions_get_full_marks_in_a_numpy_only_venv(handout: Path, numpy_python: Path, tmp_path: Path) -> None:
    copy = with_twin_for_solutions(handout, tmp_path)
    files = [f"solutions/{next(SOLUTIONS.glob(f'{n}_*.py')).name}" for n in NUMPY_ONLY]
    done = run_check(numpy_python, copy, "--json", *files)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    result = json.loads(done.stdout)
    want = live_totals(NUMPY_ONLY)
    assert result["score"] == 1.0 and result["passed"] == result["total"] == sum(sum(t.values()) for t in want.values())
    for number, file in zip(NUMPY_ONLY, result["files"]):
        assert file["exercise"] == number and file["status"] == "pass"
        assert {f: v["total"] for f, v in file["functions"].items()} == want[number]


def test_exercises_09_and_10_replay_where_torch_is(handout: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    copy = with_twin_for_solutions(handout, tmp_path)
    files = [f"solutions/{next(SOLUTIONS.glob(f'{n}_*.py')).name}" for n in ("09", "10")]
    done = run_check(Path(sys.executable), copy, "--json", *files)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    result = json.loads(done.stdout)
    assert result["score"] == 1.0 and [f["passed"] for f in result["files"]] == [
        sum(t.values()) for t in live_totals(["09", "10"]).values()]
    # The pristine handout (no racer_ref.verify) reads the stub of 10 as unwritten.
    stub = run_check(Path(sys.executable), handout, "exercises/10_kv_compaction.py")
    assert stub.returncode == 1 and "not written yet: keep_accepted" in stub.stdout, stub.stdout + stub.stderr


def test_a_wrong_answer_gets_its_diagnosis_from_the_recording(handout: Path, numpy_python: Path) -> None:
    wrong = handout / "my_06_wrong.py"
    wrong.write_text('"""Exercise 06, with the root\'s children halved once too often."""\n\n\n'
                     "def child_breadth(b, j, parent_is_root):\n"
                     "    return max(1, b >> (j + 1))\n\n\n"
                     "def logits_tree(root, capacity, rows, k):\n"
                     "    return [root], [-1]\n", encoding="utf-8")
    done = run_check(numpy_python, handout, "--json", wrong.name)
    assert done.returncode == 1, done.stderr
    functions = json.loads(done.stdout)["files"][0]["functions"]
    assert functions["child_breadth"]["first_failure"]["diagnosis"] == "06.root_halved"
    assert functions["child_breadth"]["first_failure"]["message"] == \
        "child_breadth(2, 0, parent_is_root=True) = 1, expected 2"
    assert functions["logits_tree"]["passed"] < functions["logits_tree"]["total"]
    printed = run_check(numpy_python, handout, wrong.name)
    assert printed.returncode == 1 and "FAIL breadth_eq3" in printed.stdout and "hint:" in printed.stdout


def test_replay_refuses_what_was_not_recorded() -> None:
    empty = Replay({"format": FORMAT, "exercises": [], "answers": {}})
    with pytest.raises(NotRecorded, match="no recorded answers of CopyLogitTable.row"):
        empty("CopyLogitTable")(4, 2).row(0)
    with pytest.raises(ValueError, match="^answers: expected recorded answers of format 1"):
        Replay({"format": 99})
    with pytest.raises(ValueError, match="^name: the checker asked for 'Drafter'"):
        empty("Drafter")


def test_record_then_replay_in_process() -> None:
    recorder = Recorder()
    install(recorder)
    try:
        table = check._reference("CopyLogitTable")(5, 2)
        table.observe([1, 3], [[4, 0, 2], [1, 1, 1]])
        assert table.row(1) == [4, 0] and table.row(3) == [1, 1] and table.row(0) == []
        tree = check._core_tree(1, 6, [[1, 3, 1]], {1: [4, 0], 3: [1, 1]}, 5, 2)
    finally:
        install(None)
    replay = Replay({"format": FORMAT, "exercises": [], "answers": recorder.answers})
    install(replay)
    try:
        again = check._core_tree(1, 6, [[1, 3, 1]], {1: [4, 0], 3: [1, 1]}, 5, 2)
        other = check._reference("CopyLogitTable")(5, 2)
        other.observe([1, 3], [[4, 0, 2], [1, 1, 1]])
        assert other.row(3) == [1, 1]
    finally:
        install(None)
    for name in ("tokens", "parents", "depths", "attention_mask", "retrieve_indices", "sources"):
        assert getattr(again, name).tolist() == getattr(tree, name).tolist(), name
    assert again.tokens.tolist() == [1, 3, 4, 0, 1] and again.parents.tolist() == [-1, 0, 0, 0, 1]
