"""Build the students' handout, ``dist/racer-ref-handout.zip`` (``make handout``): the
exercises and a checker that holds no answers.

The wheel (``make wheel``) holds the Rust core and the Python twin, ``racer_ref.reference``,
which is the solution of every exercise. The handout holds instead:

* ``exercises/``: the stubs (bodies ``...``) and their README;
* ``check.py`` and ``racer_ref/course/``: the checker (``racer_ref.course.check``, its hints
  and named cases) answering from ``racer_ref/course/recorded.json``, the reference's answers
  to every named and differential case, recorded here by running the checker on the
  instructor's solutions (``tests/check_solutions/``) with ``racer_ref.course.recorded``
  between the checker and the reference (the Rust core where built, else the twin). Exercise
  10 is recorded only where torch is installed (it is checked against
  ``racer_ref.verify``); the others need numpy only;
* ``tutorials/`` and ``notebooks/`` (outputs cleared): the reading; running them needs the
  racer-ref wheel, which holds the answers, so a teacher releases it after the exercises
  (``--no-tutorials`` leaves them out: tutorials 02-03 also show the eager failure-link
  build of exercise 02 as code);
* ``README.md``: what a student does with it.

Nothing of the twin is copied: no ``racer_ref/reference/``, no ``racer_ref/tree.py`` or
``verify.py``, and the named cases' brute-force oracles (``eager_failure_links``,
``count_occurrences``) are cut from their module. The build fails if a file of the handout
defines a function or class of the twin (:func:`forbidden_definitions`).

    python docs/scripts/handout.py                       # or: make handout
    python docs/scripts/handout.py --out /tmp/h.zip --no-tutorials

Needs numpy (and torch for exercise 10); runs from a source checkout.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "racer_ref"
sys.path.insert(0, str(ROOT / "python"))

#: The folder every path of the zip starts with.
TOP = "racer-ref-handout"
#: The checker's files copied as they are (relative to python/racer_ref).
CHECKER = ["course/__init__.py", "course/check.py", "course/hints.py", "course/recorded.py",
           "course/cases/__init__.py", "course/cases/trees.py"]
#: Cut from course/cases/automaton.py in the handout: oracles that answer exercises.
ORACLES = ("eager_failure_links", "count_occurrences")
#: Modules whose top-level functions and classes no handout file may define (the twin, the
#: tree contract's and the verification loop's code the checker compares with).
TWIN_SOURCES = sorted((PACKAGE / "reference").glob("*.py")) + [PACKAGE / "tree.py", PACKAGE / "verify.py"]
#: Names that are the twin's but too generic to flag (a tutorial's helper may share them).
GENERIC = {"main", "show", "__getattr__", "__dir__"}
#: Known definitions of a twin name in a handout file: (path, name) -> why it may stay.
ALLOWED = {("exercises/07_draft_tree.py", "child_breadth"):
           "exercise 07 gives Eq. 3 (exercise 06's one-line child_breadth) so that it can be done alone",
           ("tutorials/03_lazy_failure_links.py", "eager_failure_links"):
           "tutorial 03 shows the eager build (exercise 02) as code; --no-tutorials leaves it out"}

PACKAGE_INIT = '''"""racer-ref's exercise checker, as handed out to students: ``racer_ref.course`` only.

The rest of racer-ref (the Rust core, the Python twin, the decoding loop) is not here: the
checker answers from recorded cases (``racer_ref/course/recorded.json``). Run it with
``python check.py exercises/NN_*.py`` (README.md).
"""

__version__ = "{version}"
'''

LAUNCHER = '''#!/usr/bin/env python3
"""Check an exercise: ``python check.py exercises/06_logits_tree.py`` (as ``racer-ref check``).

The same checker as ``racer-ref check`` (options: ``--hint 2``, ``--hint 3``, ``--json``), with
the reference's answers read from recorded cases (racer_ref/course/recorded.json) instead of
computed by the reference, which this handout does not hold. Where a message says
``racer-ref check``, type ``python check.py``.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from racer_ref.course import check  # noqa: E402
from racer_ref.course.recorded import NotRecorded, Replay, install  # noqa: E402


def main(argv=None):
    """Exit status as ``racer-ref check``: 0 every case passes, 1 one fails, 2 cannot check."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["check"]:  # `python check.py check FILE`, as `racer-ref check FILE`
        argv = argv[1:]
    install(Replay(json.loads((HERE / "racer_ref" / "course" / "recorded.json").read_text(encoding="utf-8"))))
    try:
        return check.main(argv)
    except NotRecorded as error:
        print(f"check.py: {{error}}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
'''

README = '''# racer-ref exercises

Ten exercises, one concept of RACER speculative decoding each (`exercises/README.md` lists
them). Each file gives the signatures and docstrings and leaves the bodies as `...`: replace
them with your code, then check it.

## Set up (once)

    python3 -m venv .venv
    . .venv/bin/activate            # Windows: .venv\\Scripts\\activate
    pip install numpy               # exercises 01-09
    pip install torch --index-url https://download.pytorch.org/whl/cpu   # exercise 10 only (CPU build)

## Check an exercise

    python check.py exercises/06_logits_tree.py             # what went wrong + the diagnosis
    python check.py --hint 2 exercises/06_logits_tree.py    # + a nudge on the concept
    python check.py --hint 3 exercises/06_logits_tree.py    # + where to read, a worked example

This is `racer-ref check` (its messages say so: type `python check.py` instead). It runs the
course's named, hand-checked cases, then seeded random ones, and compares your answers with
the reference's, recorded when your teacher built this handout: the reference itself is
not here. A file whose bodies are still `...` is reported as "not written yet".

Recorded in this handout: exercises {recorded}.{skipped}

## Tutorials and notebooks

{tutorials}
'''

TUTORIALS_INCLUDED = '''`tutorials/` and `notebooks/` are the reading for the exercises (the notebooks are shipped
without outputs). Running them needs the racer-ref package, which your teacher gives you
when the exercises are done (it contains the answers): each notebook's first cell installs it
from the location your teacher sets in `RACER_REF_WHEEL`.'''

TUTORIALS_LEFT_OUT = '''Not in this handout: your teacher gives the tutorials with the racer-ref package, when the
exercises are done (it contains the answers).'''


def forbidden_definitions() -> Set[str]:
    """Top-level function and class names of the twin's modules (:data:`TWIN_SOURCES`) and the
    oracles (:data:`ORACLES`), but :data:`GENERIC` ones and private helpers."""
    names: Set[str] = set(ORACLES)
    for path in TWIN_SOURCES:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                names.add(node.name)
    return names - GENERIC


def _stub(node: ast.AST) -> bool:
    """A function whose body holds a ``...`` statement: an exercise's blank (as the checker's
    ``unwritten`` reads it)."""
    return any(isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and s.value.value is Ellipsis
               for s in getattr(node, "body", []))


def defined_names(source: str) -> Set[str]:
    """The function and class names ``source`` defines with code, at any depth: an exercise's
    blank (body ``...``) defines nothing, nor does a class whose every method is one."""
    names: Set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _stub(node):
            names.add(node.name)
        if isinstance(node, ast.ClassDef) and any(
                isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _stub(f) for f in ast.walk(node)):
            names.add(node.name)
    return names


def stripped_cases() -> str:
    """course/cases/automaton.py without :data:`ORACLES` and without its import of the twin's
    limits (their values written in instead)."""
    from racer_ref.reference import limits

    source = (PACKAGE / "course" / "cases" / "automaton.py").read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    cut: Dict[str, range] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in ORACLES:
            assert node.end_lineno is not None
            cut[node.name] = range(node.lineno - 1, node.end_lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "racer_ref.reference.limits":
            values = "".join(f"{alias.name} = {getattr(limits, alias.name)!r}\n" for alias in node.names)
            lines[node.lineno - 1] = "# (the twin's limits, racer_ref.reference.limits, written in)\n" + values
            for k in range(node.lineno, node.end_lineno or node.lineno):
                lines[k] = ""
    missing = sorted(set(ORACLES) - set(cut))
    if missing:
        raise SystemExit(f"course/cases/automaton.py: the oracles {missing} to cut are not there")
    for name, lines_of in cut.items():
        for k in lines_of:
            lines[k] = ""
        lines[lines_of.start] = f"# ({name} is cut from the handout: it answers an exercise)\n"
    return "".join(lines)


def notebook_without_outputs(path: Path) -> str:
    """The notebook's JSON with every code cell's outputs and execution count cleared."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def files(answers: Dict, tutorials: bool) -> Dict[str, str]:
    """path in the zip (below :data:`TOP`) -> text."""
    from racer_ref import __version__

    out: Dict[str, str] = {"check.py": LAUNCHER,
                           "racer_ref/__init__.py": PACKAGE_INIT.format(version=__version__),
                           "racer_ref/course/cases/automaton.py": stripped_cases(),
                           "racer_ref/course/recorded.json": json.dumps(answers, separators=(",", ":"), sort_keys=True)}
    for rel in CHECKER:
        out[f"racer_ref/{rel}"] = (PACKAGE / rel).read_text(encoding="utf-8")
    for path in sorted((ROOT / "exercises").iterdir()):
        if path.suffix in (".py", ".md"):
            out[f"exercises/{path.name}"] = path.read_text(encoding="utf-8")
    if tutorials:
        for path in sorted((ROOT / "tutorials").glob("*.py")):
            out[f"tutorials/{path.name}"] = path.read_text(encoding="utf-8")
        for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
            out[f"notebooks/{path.name}"] = notebook_without_outputs(path)
    skipped = answers.get("skipped", {})
    out["README.md"] = README.format(
        recorded=", ".join(answers["exercises"]) or "none",
        skipped=(f" Not recorded: {', '.join(sorted(skipped))} (they could not be checked where this handout "
                 "was built, e.g. without torch: ask your teacher)." if skipped else ""),
        tutorials=TUTORIALS_INCLUDED if tutorials else TUTORIALS_LEFT_OUT)
    return out


def check_no_twin(contents: Dict[str, str]) -> None:
    """Raise ``SystemExit`` if a handout file is the twin's or defines one of its names."""
    forbidden = forbidden_definitions()
    for path, text in contents.items():
        if re.search(r"(^|/)racer_ref/(reference/|tree\.py$|verify\.py$|_core)", path):
            raise SystemExit(f"{path}: the twin's source must not be in the handout")
        if path.endswith(".py"):
            found = {name for name in defined_names(text) & forbidden if (path, name) not in ALLOWED}
            if found:
                raise SystemExit(f"{path} defines {sorted(found)}, which the twin defines: "
                                 "the handout must not hold the answers")


def build(out: Path, solutions: Path, tutorials: bool = True, numbers: Optional[Sequence[str]] = None) -> Dict:
    """Record the answers, write the zip to ``out``; returns the recorded answers' summary."""
    from racer_ref.course.recorded import record

    answers = record(solutions, numbers)
    contents = files(answers, tutorials)
    check_no_twin(contents)
    out.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(contents):  # fixed order and dates: the same inputs, the same zip
            info = zipfile.ZipInfo(f"{TOP}/{path}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if path == "check.py" else 0o644) << 16
            zf.writestr(info, contents[path])
    out.write_bytes(buffer.getvalue())
    return {"exercises": answers["exercises"], "skipped": answers["skipped"], "files": len(contents)}


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist" / "racer-ref-handout.zip",
                        help="the zip to write (default: dist/racer-ref-handout.zip)")
    parser.add_argument("--solutions", type=Path, default=ROOT / "tests" / "check_solutions",
                        help="the instructor's solutions the answers are recorded on (NN_*.py)")
    parser.add_argument("--no-tutorials", action="store_true",
                        help="leave out tutorials/ and notebooks/ (they show some answers as code)")
    args = parser.parse_args(None if argv is None else list(argv))
    summary = build(args.out, args.solutions, tutorials=not args.no_tutorials)
    print(f"{args.out}: {summary['files']} files, {args.out.stat().st_size // 1024} KiB; "
          f"recorded exercises {', '.join(summary['exercises'])}")
    for number, why in sorted(summary["skipped"].items()):
        print(f"  not recorded: exercise {number}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
