"""The notebooks (notebooks/NN_*.ipynb) are generated from the tutorials and run like them.

* Each committed notebook equals what ``docs/scripts/notebooks.py`` writes from its
  tutorial today (the .py file is the one source; ``make notebooks`` regenerates).
* Its first code cell installs racer-ref on Colab and does nothing elsewhere.
* Executed in a Jupyter kernel, notebooks 01-06 print exactly their tutorial's transcript.
  Notebooks 07 and 08 (a tiny model, the real model) are executed by
  tests/test_tutorials.py in place of their scripts, so that their minutes are spent once.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

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


def execute_notebook(path: Path, timeout: int = 600) -> str:
    """Run every cell of ``path`` in a fresh python3 kernel (cwd: the repository); return
    what the cells printed to stdout, in order. A cell that raises fails the call."""
    import nbformat
    from nbclient import NotebookClient

    os.environ.setdefault("OMP_NUM_THREADS", "2")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO)}}).execute()
    return "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                   for out in cell.get("outputs", [])
                   if out.get("output_type") == "stream" and out.get("name") == "stdout")


def test_every_tutorial_has_an_up_to_date_notebook():
    gen = generator()
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == [notebook_of(t).name for t in TUTORIALS]
    for tutorial in TUTORIALS:
        committed = notebook_of(tutorial).read_text(encoding="utf-8")
        assert committed == gen.render(tutorial), f"{notebook_of(tutorial).name} is stale: run `make notebooks`"


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=lambda p: p.stem)
def test_notebook_opens_in_jupyter_and_colab(tutorial):
    nb = json.loads(notebook_of(tutorial).read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4 and nb["metadata"]["kernelspec"]["name"] == "python3"
    first, install = nb["cells"][0], nb["cells"][1]
    assert first["cell_type"] == "markdown" and "".join(first["source"]).startswith(f"# Tutorial {int(tutorial.name[:2])}:")
    assert install["cell_type"] == "code"
    source = "".join(install["source"])
    assert 'if "google.colab" in sys.modules:' in source and "pip" in source
    # Every line of the tutorial's code is in a cell; no snippet marker is.
    code = "\n".join("".join(c["source"]) for c in nb["cells"][2:])
    assert "--8<--" not in code
    text = tutorial.read_text(encoding="utf-8")
    for line in text.split('"""', 2)[2].splitlines():
        if line.strip() and "--8<--" not in line:
            assert line in code, f"{tutorial.name}: {line!r} is missing from the notebook"


@pytest.mark.parametrize("tutorial", [t for t in TUTORIALS if t.name[:2] not in EXECUTED_BY_TEST_TUTORIALS],
                         ids=lambda p: p.stem)
def test_notebook_prints_its_transcript(tutorial):
    out = execute_notebook(notebook_of(tutorial), timeout=300)
    assert out == (TRANSCRIPTS / (tutorial.stem + ".txt")).read_text(encoding="utf-8")
