"""The build backend of ``pip install .``: maturin's, with cargo's build folder outside the tree.

maturin's PEP 517 backend runs cargo in the source tree, so a plain ``pip install .`` (or
``pip wheel .``, ``python -m build``) would leave cargo's ``target/`` folder, about 94 MB,
in the source tree. For a wheel we point ``CARGO_TARGET_DIR`` at a temporary folder that is
removed once maturin has copied the wheel out; a ``CARGO_TARGET_DIR`` set by the caller is
used as it is (to keep cargo's build cache between installs). Editable installs
(``pip install -e .``) keep ``target/`` in the tree, where cargo's incremental build
serves a developer's rebuilds; ``make setup`` calls maturin directly and is not affected.
Every other hook is maturin's own.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Mapping, Optional

from maturin import (  # noqa: F401  (the hooks pip asks for, unchanged)
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)
from maturin import build_wheel as _maturin_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    """maturin's ``build_wheel`` with cargo's target folder in a temporary folder."""
    if os.environ.get("CARGO_TARGET_DIR"):
        return _maturin_build_wheel(wheel_directory, config_settings, metadata_directory)
    with tempfile.TemporaryDirectory(prefix="racer-ref-cargo-") as target:
        os.environ["CARGO_TARGET_DIR"] = target
        try:
            return _maturin_build_wheel(wheel_directory, config_settings, metadata_directory)
        finally:
            del os.environ["CARGO_TARGET_DIR"]
