"""racer-ref: a minimal, educational and fast reference implementation of RACER
speculative decoding (Retrieval-Augmented Contextual Rapid Speculative Decoding).

Public names (imported lazily, so that ``import racer_ref`` does not load torch):

* ``Automaton``: the Rust Aho-Corasick n-gram automaton (``racer_ref._core``);
  its pure-Python twin is ``racer_ref.reference.Automaton``.
* ``Drafter``, ``DraftTree``: the drafting side (automaton + copy-logit table + draft tree);
  ``DrafterInUseError``: a drafter called by a second thread while in use;
  ``DrafterForkedError``: a drafter called in a forked child while another thread of the
  parent was using it at the fork (``reset()`` makes it usable).
* ``generate``, ``GenerationResult``: lossless RACER decoding on a Hugging Face causal LM.
* ``METHODS``: the drafting methods, ``"ar"`` (plain decoding) included.

The package in two tiers (imports run one way: app -> harness -> decoding -> drafter -> core).
The top level is the core a student reads:

* ``decoding.py``: the decoding loop; ``options.py``: its boundary (every argument checked
  once, resolved into one frozen ``Options``);
* ``verify.py`` (the KV cache, one forward pass over the tree, acceptance), ``tree.py`` (the
  draft-tree contract), ``drafter.py`` (the drafter facade over both backends, and the
  drafting of a ``generate()`` call), ``guard.py`` (one caller at a time, fork safety, a
  drafter of the caller's claimed and checked), ``sampling.py``, ``metrics.py``,
  ``exactness.py`` (how a model verifies exactly).

Sub-packages:

* ``reference/``: the pure-Python teaching twin of the Rust core;
* ``integrations/``: transformers ``custom_generate`` (``hf``), tree logits processors
  (``processing``), vLLM (``vllm``), the chain drafter (``chain``);
* ``speedups/``: optional speed-ups that plug in through ``options.py`` (the loop works without them);
* ``app/``: the ``racer-ref`` command line and the demo;
* ``course/``: the course kit's checker (``racer-ref check``) and the shared test cases;
* ``harness/``: models, datasets, baselines, benchmarks, step records and traces for the command line.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it; loaded on first access (PEP 562).
_LAZY = {
    "Automaton": "racer_ref._core",
    "Drafter": "racer_ref.drafter",
    "DrafterInUseError": "racer_ref.guard",
    "DrafterForkedError": "racer_ref.guard",
    "DraftTree": "racer_ref.tree",
    "generate": "racer_ref.decoding",
    "GenerationResult": "racer_ref.metrics",
    "METHODS": "racer_ref.tree",
}

__all__ = sorted(_LAZY) + ["__version__"]

#: Modules that moved (CHANGELOG.md, 0.2.0): the old path still imports the module at its
#: new place (the same module object), with a DeprecationWarning.
MOVED_MODULES = {
    "racer_ref.models": "racer_ref.harness.models",
    "racer_ref.datasets": "racer_ref.harness.datasets",
    "racer_ref.baselines": "racer_ref.harness.baselines",
    "racer_ref.bench": "racer_ref.harness.bench",
    "racer_ref.trace": "racer_ref.harness.trace",
    "racer_ref.kv_cache": "racer_ref.speedups.kv_cache",
    "racer_ref.attention": "racer_ref.speedups.attention",
    "racer_ref.capacity": "racer_ref.speedups.capacity",
    "racer_ref.check": "racer_ref.course.check",
    "racer_ref.cases": "racer_ref.course.cases",
    "racer_ref.cases.automaton": "racer_ref.course.cases.automaton",
    "racer_ref.cases.trees": "racer_ref.course.cases.trees",

    # Integrations in their own sub-package, modules named for what they hold (CHANGELOG.md, Unreleased).
    "racer_ref.hf": "racer_ref.integrations.hf",
    "racer_ref.processing": "racer_ref.integrations.processing",
    "racer_ref.vllm": "racer_ref.integrations.vllm",
    "racer_ref.chain": "racer_ref.integrations.chain",
    "racer_ref.hooks": "racer_ref.harness.records",

    # The applications out of the core's top level; the step records to the harness, the
    # check of a caller's drafter to racer_ref.guard (CHANGELOG.md, Unreleased).
    "racer_ref.cli": "racer_ref.app.cli",
    "racer_ref.demo": "racer_ref.app.demo",
    "racer_ref.wrappers": "racer_ref.harness.records",
}


#: The packages of the ``hf`` extra that the decoding loop imports.
HF_EXTRA_MODULES = ("torch", "transformers")
#: What to run when they are missing.
HF_EXTRA_HINT = "pip install 'racer-ref[hf]'"


def missing_hf_extra(what: str) -> Any:
    """The ``ImportError`` for ``what`` when a package of the ``hf`` extra is not installed,
    or ``None`` when they all are."""
    missing = [m for m in HF_EXTRA_MODULES if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return ImportError(f"{what} needs {' and '.join(missing)}, which the core install of racer-ref "
                       f"leaves out: {HF_EXTRA_HINT}")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        try:
            module = importlib.import_module(_LAZY[name])
        except ModuleNotFoundError as exc:
            if exc.name in HF_EXTRA_MODULES:
                raise missing_hf_extra(f"racer_ref.{name}") from exc
            raise
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'racer_ref' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module path of :data:`MOVED_MODULES` as the module at its new path."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        new = MOVED_MODULES[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there (see CHANGELOG.md)",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)  # its own __spec__ and __name__ are kept

    def exec_module(self, module: Any) -> None:
        """Nothing to run: the module at the new path is already imported."""


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    # First, so that a moved package's submodule (racer_ref.cases.automaton) is not found a
    # second time, as a copy, through the new package's __path__.
    sys.meta_path.insert(0, _MovedModules())
