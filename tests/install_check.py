"""Checks a fresh install of racer-ref from outside the source tree (``make test-install``,
``make test-wheel``).

Run with the interpreter of a new virtual environment into which ``pip install .`` (``core``),
``pip install '.[hf]'`` (``hf``) or ``pip install dist/racer_ref-*.whl`` (``wheel``) put the
package:

    python tests/install_check.py core     # Rust core, Drafter, twin, numpy only
    python tests/install_check.py hf       # plus torch, transformers and the decoding loop
    python tests/install_check.py wheel    # core, from the binary wheel, no Rust on PATH

It exits non-zero with a message on the first thing that does not hold.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path


def check_core() -> None:
    import racer_ref
    from racer_ref import _core  # the Rust extension, built by pip through maturin

    if "site-packages" not in Path(racer_ref.__file__).resolve().parts:
        raise SystemExit(f"racer_ref was imported from the source tree ({racer_ref.__file__}), not the install")
    drafter = racer_ref.Drafter("racer", vocab_size=100, capacity=8)
    tree = drafter.draft(5)
    assert list(tree.tokens) == [5], tree.tokens  # nothing observed yet: the root alone
    assert isinstance(racer_ref.Automaton(ngram=4, max_nodes=100), _core.Automaton)
    files = importlib.metadata.files("racer-ref") or []
    assert any(f.name == "LICENSE" for f in files), "the wheel carries no LICENSE file"
    help_text = subprocess.run([Path(sys.executable).with_name("racer-ref"), "--help"],
                               capture_output=True, text=True, check=True).stdout
    assert "generate" in help_text, help_text
    print(f"core: racer_ref {racer_ref.__version__} from {Path(racer_ref.__file__).parent}")


def check_core_only() -> None:
    """Without the hf extra: no torch is imported, and the torch-side names say what to install."""
    import racer_ref

    assert importlib.util.find_spec("torch") is None, "torch is installed: not a core-only environment"
    try:
        racer_ref.generate
    except ImportError as exc:
        assert "racer-ref[hf]" in str(exc), exc
    else:
        raise SystemExit("racer_ref.generate imported without torch")
    run = subprocess.run([Path(sys.executable).with_name("racer-ref"), "generate", "Hello"],
                         capture_output=True, text=True)
    assert run.returncode != 0 and "racer-ref[hf]" in run.stderr, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr, run.stderr
    print("core only: racer_ref.generate and `racer-ref generate` name the hf extra")


def check_wheel() -> None:
    """The binary wheel (``make wheel``): installed without a Rust toolchain, abi3, manylinux,
    and its Rust core answers like the twin."""
    import shutil

    import racer_ref
    from racer_ref import _core
    from racer_ref.reference import Automaton as TwinAutomaton

    for tool in ("cargo", "rustc"):
        assert shutil.which(tool) is None, f"{tool} is on PATH ({shutil.which(tool)}): not a Rust-free environment"
    wheel = importlib.metadata.distribution("racer-ref").read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    assert "Root-Is-Purelib: false" in wheel, wheel
    assert tags and all(t.startswith("cp310-abi3-manylinux") for t in tags), tags
    assert "site-packages" in Path(_core.__file__).resolve().parts, _core.__file__
    # A tiny automaton: after 1 2 3 1 2 4 1, the next root 2 continues the border "1 2".
    paths = {}
    for name, cls in (("rust", racer_ref.Automaton), ("twin", TwinAutomaton)):
        automaton = cls(ngram=4, max_nodes=100)
        automaton.extend([1, 2, 3, 1, 2, 4, 1])
        paths[name] = sorted(automaton.retrieve(2, 8))
    assert paths["rust"] == paths["twin"] == [[2, 3, 1], [2, 4, 1]], paths
    print(f"wheel: {', '.join(tags)}; Rust core {Path(_core.__file__).name}, no cargo or rustc on PATH")


def check_hf() -> None:
    import torch
    import transformers

    from racer_ref import generate  # noqa: F401  (the decoding loop imports)
    from racer_ref.harness.models import load_model  # noqa: F401

    print(f"hf: torch {torch.__version__}, transformers {transformers.__version__}")


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "core":
        check_core()
        check_core_only()
    elif mode == "hf":
        check_core()
        check_hf()
    elif mode == "wheel":
        check_wheel()
        check_core()
        check_core_only()
    else:
        raise SystemExit("usage: python tests/install_check.py core|hf|wheel")
