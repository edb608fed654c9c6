"""The pure-Python teaching twin of racer-ref's Rust core.

Same API, same results, written to be read: every class here mirrors one in
``rust/src/`` (see docs, "Rust core and Python twin side by side"). This package
never imports the Rust extension.

The names below are imported lazily (PEP 562), so that running a module as a
walkthrough (``python -m racer_ref.reference.automaton``) does not import it twice.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> module that defines it (the twin's, but DraftTree: the contract both backends return)
_LAZY = {
    "Automaton": "racer_ref.reference.automaton",
    "CopyLogitTable": "racer_ref.reference.copy_logit",
    "DraftTree": "racer_ref.tree",
    "build_draft_tree": "racer_ref.reference.draft_tree",
    "best_chain": "racer_ref.reference.chain",
    "Drafter": "racer_ref.reference.drafter",
    "RecencyList": "racer_ref.reference.lru",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'racer_ref.reference' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
