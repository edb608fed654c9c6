"""The pure-Python teaching twin of racer-ref's Rust core.

Same API, same results, written to be read: every class here mirrors one in
``rust/src/`` (see docs, "Rust core and Python twin side by side"). This package
never imports the Rust extension.
"""

from racer_ref.reference.automaton import Automaton
from racer_ref.reference.draft_tree import DraftTree

__all__ = ["Automaton", "DraftTree"]
