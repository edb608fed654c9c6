"""Shared pytest configuration: backends and the hypothesis profile.

Fixtures:

* ``backend_name``: ``"rust"`` or ``"python"`` (every test that uses it runs once per
  backend). Other fixtures can depend on it to pick their own per-backend objects.
* ``backend``: the ``Automaton`` class of that backend (``racer_ref.Automaton`` from the
  Rust extension, or the teaching twin ``racer_ref.reference.Automaton``).

Markers:

* ``shared_data(*names)``: the test reads these prompt sets (``"specbench"``, ``"gsm8k"``,
  ``"mgsm"``) from the shared data folder (``../shared/data`` next to the checkout, or
  ``$RACER_REF_SHARED/data``). Where a file is absent, as in a clone on its own, the test is
  skipped with a reason that says where the data comes from.

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

#: The prompt sets of the shared data folder that tests read: their file under ``data/`` (as
#: ``racer_ref.harness.datasets.dataset_path`` finds it) and where each comes from
#: (docs/benchmarks.md, "Prompt sets", says how to get them).
SHARED_DATA = {
    "specbench": ("spec_bench/question.jsonl",
                  "the Spec-Bench questions (hemingkx/Spec-Bench on GitHub, Apache-2.0 licence)"),
    "gsm8k": ("gsm8k/test.jsonl", "the GSM8K test split (openai/grade-school-math on GitHub, MIT licence)"),
    "mgsm": ("mgsm/mgsm_en.tsv", "MGSM in English (google-research/url-nlp on GitHub, CC-BY-4.0 licence)"),
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "shared_data(*names): reads these prompt sets from the shared data folder; "
        "skipped with a reason where they are absent")


def missing_shared_data(name: str) -> str:
    """Why prompt set ``name`` cannot be read: ``""`` when its file is there, else a skip reason."""
    from racer_ref.harness.datasets import dataset_path

    try:
        if dataset_path(name).is_file():
            return ""
    except FileNotFoundError:  # no shared data folder at all
        pass
    rel, source = SHARED_DATA[name]
    return (f"needs ../shared/data/{rel} (or $RACER_REF_SHARED/data/{rel}): {source}; "
            "docs/benchmarks.md, 'Prompt sets', says where to get it")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("shared_data"):
        for name in mark.args:
            reason = missing_shared_data(name)
            if reason:
                pytest.skip(reason)


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
