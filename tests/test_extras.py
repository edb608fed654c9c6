"""The core install (no torch): the torch-side names and commands say which extra to install."""

from __future__ import annotations

import importlib.util

import pytest

import racer_ref
from racer_ref.app import cli


@pytest.fixture
def without_torch(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "torch" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_missing_hf_extra_names_the_extra(without_torch):
    error = racer_ref.missing_hf_extra("racer_ref.generate")
    assert isinstance(error, ImportError)
    assert str(error) == ("racer_ref.generate needs torch, which the core install of racer-ref "
                          "leaves out: pip install 'racer-ref[hf]'")


def test_nothing_missing_with_the_hf_extra():
    assert racer_ref.missing_hf_extra("racer_ref.generate") is None


@pytest.mark.parametrize("argv", [["generate", "Hello"], ["bench", "--dataset", "humaneval"], ["demo"]])
def test_commands_name_the_extra_without_torch(without_torch, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert str(exc.value) == (f"racer-ref {argv[0]}: error: racer-ref {argv[0]} needs torch, which the core "
                              "install of racer-ref leaves out: pip install 'racer-ref[hf]'")


def test_importing_the_hf_integration_without_torch_names_the_extra():
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"  # as if torch were not installed
            "try:\n    import racer_ref.integrations.hf\nexcept ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("racer_ref.integrations.hf needs torch, which the core install of racer-ref leaves out: "
                           "pip install 'racer-ref[hf]'")
