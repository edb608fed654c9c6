"""racer-ref: a minimal, educational and fast reference implementation of RACER
speculative decoding (Retrieval-Augmented Contextual Rapid Speculative Decoding).

Public names (imported lazily, so that ``import racer_ref`` does not load torch):

* ``Automaton``: the Rust Aho-Corasick n-gram automaton (``racer_ref._core``);
  its pure-Python twin is ``racer_ref.reference.Automaton``.
* ``Drafter``, ``DraftTree``: the drafting side (automaton + copy-logit table + draft tree);
  ``DrafterInUseError``: a drafter called by a second thread while in use.
* ``generate``, ``GenerationResult``: lossless RACER decoding on a Hugging Face causal LM.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it; loaded on first access (PEP 562).
_LAZY = {
    "Automaton": "racer_ref._core",
    "Drafter": "racer_ref.drafter",
    "DrafterInUseError": "racer_ref.drafter",
    "DraftTree": "racer_ref.reference.draft_tree",
    "generate": "racer_ref.generate",
    "GenerationResult": "racer_ref.generate",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'racer_ref' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
