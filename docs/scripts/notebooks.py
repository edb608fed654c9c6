"""Write every tutorial (tutorials/NN_*.py) as a Jupyter notebook (notebooks/NN_*.ipynb).

The .py files stay the one source: this script turns each into jupytext's percent format
(the module docstring becomes a Markdown cell, each ``# --8<-- [start:NAME]`` section a code
cell, the snippet markers are dropped) and writes it with jupytext, after a first cell
that installs racer-ref when the notebook runs on Google Colab (and does nothing
elsewhere). ``tests/test_notebooks.py`` checks that the committed notebooks equal what
this script writes, and executes them.

    python docs/scripts/notebooks.py            # or: make notebooks
    python docs/scripts/notebooks.py --check    # exit 1 if a notebook is out of date
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "tutorials"
NOTEBOOKS = ROOT / "notebooks"

#: The first code cell: install racer-ref on Colab only. The tutorials need the package and
#: its Rust extension; set RACER_REF_PIP to what pip should install (a git URL of the
#: repository, a wheel, or the package name once it is published).
COLAB_CELL = '''\
# Colab only: install racer-ref (skipped everywhere else, e.g. in a clone after `make setup`).
import os
import subprocess
import sys

if "google.colab" in sys.modules:
    # What pip installs: a git URL of the racer-ref repository (git+https://...), a wheel,
    # or the package name. A source install builds the Rust extension: we install a Rust
    # toolchain first (about two minutes), then the package.
    RACER_REF_PIP = os.environ.get("RACER_REF_PIP", "racer-ref")
    if not os.path.exists(os.path.expanduser("~/.cargo/bin/cargo")):
        subprocess.run("curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal",
                       shell=True, check=True)
    os.environ["PATH"] = os.path.expanduser("~/.cargo/bin") + os.pathsep + os.environ["PATH"]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", RACER_REF_PIP], check=True)'''

MARKER = re.compile(r"^# --8<-- \[(start|end):(\w+)\]\s*$")


def percent_source(path: Path) -> str:
    """The tutorial as a jupytext percent script: docstring -> Markdown, sections -> code."""
    text = path.read_text(encoding="utf-8")
    module = ast.parse(text)
    doc = ast.get_docstring(module, clean=True) or ""
    # The code after the docstring, as lines.
    body = text.splitlines()[module.body[0].end_lineno:] if doc else text.splitlines()
    title, _, rest = doc.partition("\n")
    markdown = [f"# {title.strip()}", ""] + rest.strip("\n").splitlines()
    markdown.append("")
    markdown.append(f"This notebook is generated from `tutorials/{path.name}` "
                    "(`make notebooks`); the docs show the same code with what it prints.")
    cells = ["# %% [markdown]\n" + "\n".join(f"# {line}".rstrip() for line in markdown),
             "# %%\n" + COLAB_CELL]
    current: list = []
    for line in body:
        m = MARKER.match(line)
        if m and m.group(1) == "start":
            if "".join(current).strip():
                cells.append("# %%\n" + "\n".join(current).strip("\n"))
            current = []
        elif m:
            cells.append("# %%\n" + "\n".join(current).strip("\n"))
            current = []
        else:
            current.append(line)
    if "".join(current).strip():
        cells.append("# %%\n" + "\n".join(current).strip("\n"))
    return "\n\n".join(cells) + "\n"


def notebook(path: Path) -> nbformat.NotebookNode:
    nb = jupytext.reads(percent_source(path), fmt="py:percent")
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "colab": {"provenance": []},
    }
    # Stable cell ids (nbformat would draw random ones): the same text on every run.
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
    return nb


def render(path: Path) -> str:
    """The .ipynb text for ``path`` (stable: no outputs, no execution counts)."""
    return jupytext.writes(notebook(path), fmt="ipynb")


def tutorials() -> list:
    return sorted(TUTORIALS.glob("[0-9][0-9]_*.py"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report out-of-date notebooks")
    parser.add_argument("--out", type=Path, default=NOTEBOOKS, help="folder (default notebooks/)")
    args = parser.parse_args(argv)
    stale = []
    args.out.mkdir(parents=True, exist_ok=True)
    for path in tutorials():
        target = args.out / (path.stem + ".ipynb")
        text = render(path)
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            continue
        stale.append(target)
        if not args.check:
            target.write_text(text, encoding="utf-8")
            print("wrote", target.relative_to(ROOT) if target.is_relative_to(ROOT) else target)
    if args.check and stale:
        print("out of date (run `make notebooks`):", *[p.name for p in stale])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
