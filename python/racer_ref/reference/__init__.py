"""The pure-Python teaching twin of racer-ref's Rust core.

Same API, same results, written to be read: every class here mirrors one in
``rust/src/`` (see docs, "Rust core and Python twin side by side"). This package
never imports the Rust extension.
"""

from racer_ref.reference.automaton import Automaton
from racer_ref.reference.copy_logit import CopyLogitTable
from racer_ref.reference.draft_tree import DraftTree, build_draft_tree
from racer_ref.reference.drafter import Drafter

__all__ = ["Automaton", "CopyLogitTable", "DraftTree", "Drafter", "build_draft_tree"]
