"""Issue 27, items 4a and 4b: a drafter (and its automaton and table) is never copied.

A drafter holds one request's state and its in-use lock: a shallow copy shared both (so
committing to the copy moved the original, and claiming the copy succeeded while the
original was claimed), and a deep copy of the twin's linked automaton recursed once per
node. Now ``copy.copy``, ``copy.deepcopy`` and ``pickle`` raise the same ``TypeError`` on
both backends, whatever the size of the automaton.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import racer_ref._core as core
import racer_ref.reference as twin
from racer_ref import Drafter

BACKENDS = ("rust", "python")
COPIES = {"copy.copy": copy.copy, "copy.deepcopy": copy.deepcopy, "pickle": pickle.dumps}


def _message(cls: str) -> str:
    return (f"^{cls}: cannot be copied or pickled \\(it holds one request's drafting state\\); "
            f"build a new {cls} with the same settings instead$")


def _big_drafter(backend: str) -> Drafter:
    """A racer drafter whose automaton holds thousands of nodes."""
    d = Drafter("racer", vocab_size=5000, capacity=16, breadth=4, ngram=10, backend=backend)
    text = np.random.default_rng(0).integers(0, 5000, 1000)
    d.commit(text)
    d.observe(text, np.tile(np.arange(4), (len(text), 1)))
    assert d.automaton_nodes > 5000
    return d


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_drafter_copies_are_refused_on_both_backends(backend, how):
    d = _big_drafter(backend)
    before = (d.num_committed, d.automaton_nodes, d.draft(3).tokens.tolist())
    with pytest.raises(TypeError, match=_message("Drafter")):
        COPIES[how](d)
    # The original is untouched and still works (and still guards itself).
    assert (d.num_committed, d.automaton_nodes, d.draft(3).tokens.tolist()) == before
    with d.claim():
        d.commit([1, 2])
    assert d.num_committed == before[0] + 2


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_backends_inner_drafters_refuse_copies_too(backend, how):
    # racer_ref.Drafter's backend objects: the twin's used to recurse past the limit.
    inner = _big_drafter(backend)._impl
    with pytest.raises(TypeError, match=_message("Drafter")):
        COPIES[how](inner)


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("module", [core, twin], ids=["rust", "python"])
def test_automaton_and_table_copies_are_refused(module, how):
    a = module.Automaton(max_nodes=20_000, ngram=10)
    a.extend(list(range(3000)))  # thousands of nodes, a chain as deep as ngram
    assert len(a) > 10_000
    with pytest.raises(TypeError, match=_message("Automaton")):
        COPIES[how](a)
    assert len(a) > 10_000 and a.retrieve(2999, 4) == [[2999]]
    table = module.CopyLogitTable(vocab_size=10, k=2)
    with pytest.raises(TypeError, match=_message("CopyLogitTable")):
        COPIES[how](table)
