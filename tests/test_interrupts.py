"""Issue 15, item 4: an interrupt (Ctrl-C) inside the teaching twin never leaves it broken.

Every public operation that changes the twin is all-or-nothing: a KeyboardInterrupt raised
at *any* line inside it (injected with ``sys.settrace``, see interrupts.py) leaves the
object exactly as an uninterrupted twin that never saw the call: same ``dump()``, same
``stats()``, same later results, and its structural self-check passes. Only a second
interrupt during the rollback leaves a torn object, which then refuses every call with an
error naming ``reset()``. The same sweeps run once more under ``python -O`` (no asserts
there: the checks return failure messages), since the twin must not rely on ``assert``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import interrupts


def test_extend_interrupted_at_every_line_changes_nothing() -> None:
    # A full trie (max_nodes 12) over 3 letters: every extend evicts, so the sweep goes
    # through creation, eviction, touches and the window bookkeeping.
    # ~1,300 lines: every one of them.
    assert interrupts.sweep_automaton_extend(max_nodes=12, ngram=4, seed=0) == []
    # A deeper trie, longer call (~5,000 lines): every 7th.
    assert interrupts.sweep_automaton_extend(max_nodes=40, ngram=6, seed=3, stride=7, length=6) == []


def test_queries_and_reset_interrupted_at_every_line() -> None:
    assert interrupts.sweep_automaton_queries() == []


def test_an_interrupted_rollback_is_detected_and_reset_recovers() -> None:
    assert interrupts.double_interrupt_automaton() == []


def test_the_sweeps_also_hold_under_python_O() -> None:
    here = os.path.dirname(__file__)
    code = (
        "import sys, interrupts as t\n"
        "assert False, 'asserts are on: not running under -O'\n"
    )
    # First make sure that -O really compiles asserts out (the line above must not fire).
    run = subprocess.run([sys.executable, "-O", "-c", code], cwd=here, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    code = (
        "import interrupts as t\n"
        "f = t.sweep_automaton_extend(stride=3) + t.sweep_automaton_queries(stride=5)\n"
        "f += t.double_interrupt_automaton() + t.sweep_drafter('racer', stride=11)\n"
        "f += t.double_interrupt_drafter()\n"
        "print('\\n'.join(f) or 'ok')\n"
        "raise SystemExit(1 if f else 0)\n"
    )
    run = subprocess.run([sys.executable, "-O", "-c", code], cwd=here, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout[-3000:] + run.stderr[-3000:]


def test_drafter_operations_interrupted_at_every_line() -> None:
    # racer: automaton + table; pld: history; logits: table only.
    for method in ("racer", "pld", "logits"):
        assert interrupts.sweep_drafter(method, stride=3 if method == "racer" else 1) == []


def test_an_interrupted_drafter_rollback_is_detected_and_reset_recovers() -> None:
    assert interrupts.double_interrupt_drafter() == []


def test_the_plain_commit_records_nothing_and_the_wrapper_leaves_nothing_behind() -> None:
    # Issue 35, item 3: the undo is a wrapper (undo.all_or_nothing). The automaton's and the
    # drafter's own commit (extend_trusted, Drafter._commit: the decoding loop's) run no
    # line of undo.py, and after a wrapped call, completed or interrupted, the automaton
    # holds its own step and its own recency list again.
    import sys

    import numpy as np

    from racer_ref.reference import undo
    from racer_ref.reference.automaton import Automaton
    from racer_ref.reference.drafter import Drafter
    from racer_ref.reference.lru import RecencyList

    d = Drafter("racer", vocab_size=6, capacity=8, breadth=2, ngram=4, max_nodes=12)
    seen = []
    sys.setprofile(lambda frame, event, arg: seen.append(frame.f_code.co_filename)
                   if event == "call" else None)
    try:
        d.trusted_step(owned=True).commit(np.array(interrupts.stream(0, 40, 4)))
        d.automaton.extend_trusted(interrupts.stream(1, 20, 4))
    finally:
        sys.setprofile(None)
    assert undo.__file__ not in seen and d.num_committed == 40
    for a in (Automaton(12, 4), d.automaton):
        a.extend(interrupts.stream(2, 30, 3))
        assert interrupts.interrupt_at_line(40, lambda: a.extend(interrupts.stream(3, 6, 3)))
        assert "_extend_one" not in vars(a) and type(a._lru) is RecencyList
    d.commit([1, 2, 3])
    assert interrupts.interrupt_at_line(40, lambda: d.commit([1, 2, 3, 1, 2]))
    assert "_extend_one" not in vars(d.automaton) and type(d.automaton._lru) is RecencyList
