"""``pip install .`` builds with cargo's target folder outside the source tree
(``build_backend/racer_ref_build.py``, maturin's PEP 517 backend otherwise)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def backend(monkeypatch):
    pytest.importorskip("maturin")
    tomllib = pytest.importorskip("tomllib")
    system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert (system["build-backend"], system["backend-path"]) == ("racer_ref_build", ["build_backend"])
    monkeypatch.syspath_prepend(str(ROOT / "build_backend"))
    sys.modules.pop("racer_ref_build", None)
    import racer_ref_build

    return racer_ref_build


def test_a_wheel_is_built_in_a_temporary_target_folder(backend, monkeypatch, tmp_path):
    seen = []

    def fake_build(wheel_directory, config_settings=None, metadata_directory=None):
        target = Path(os.environ["CARGO_TARGET_DIR"])
        seen.append((target, target.is_dir(), wheel_directory))
        return "racer_ref-0.1.0-cp310-abi3-linux_x86_64.whl"

    monkeypatch.setattr(backend, "_maturin_build_wheel", fake_build)
    monkeypatch.delenv("CARGO_TARGET_DIR", raising=False)
    assert backend.build_wheel(str(tmp_path)) == "racer_ref-0.1.0-cp310-abi3-linux_x86_64.whl"
    (target, existed, wheels), = seen
    assert existed and ROOT not in target.parents and wheels == str(tmp_path)
    assert not target.exists() and "CARGO_TARGET_DIR" not in os.environ  # removed afterwards
    monkeypatch.setenv("CARGO_TARGET_DIR", str(tmp_path / "cache"))  # the caller's own: kept
    backend.build_wheel(str(tmp_path))
    assert seen[-1][0] == tmp_path / "cache" and os.environ["CARGO_TARGET_DIR"] == str(tmp_path / "cache")


def test_every_other_hook_is_maturins(backend):
    import maturin

    for hook in ("build_sdist", "build_editable", "get_requires_for_build_wheel",
                 "prepare_metadata_for_build_wheel"):
        assert getattr(backend, hook) is getattr(maturin, hook)
