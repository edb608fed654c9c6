"""Shared pytest configuration: backends and the hypothesis profile.

Fixtures:

* ``backend_name``: ``"rust"`` or ``"python"`` (every test that uses it runs once per
  backend). Other fixtures can depend on it to pick their own per-backend objects.
* ``backend``: the ``Automaton`` class of that backend (``racer_ref.Automaton`` from the
  Rust extension, or the teaching twin ``racer_ref.reference.Automaton``).

Hypothesis profiles (choose with ``RACER_REF_HYPOTHESIS=<name>``): ``default`` keeps the
whole suite within a few minutes on 2 cores; ``thorough`` runs many more examples.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("RACER_REF_HYPOTHESIS", "default"))

BACKENDS = ("rust", "python")


def automaton_class(name: str) -> Any:
    """The ``Automaton`` class of backend ``name`` (``"rust"`` or ``"python"``)."""
    if name == "rust":
        from racer_ref._core import Automaton
    elif name == "python":
        from racer_ref.reference.automaton import Automaton
    else:
        raise ValueError(f"backend: must be one of {BACKENDS}, got {name!r}")
    return Automaton


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def backend(backend_name: str) -> Any:
    return automaton_class(backend_name)
