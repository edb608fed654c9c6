"""Interrupt injection for the teaching twin: a KeyboardInterrupt at the n-th line.

``interrupt_at_line(n, call)`` runs ``call()`` under ``sys.settrace`` and raises
``KeyboardInterrupt`` at the n-th "line" event inside the twin's modules
(``racer_ref/reference/*.py``), as a Ctrl-C landing between two lines would. Sweeping n over
1, 2, 3, ... until the call completes uninterrupted visits every line the call executes.

The checks below return lists of failure messages instead of asserting, so that they also
run under ``python -O`` (where ``assert`` is compiled out); see test_interrupts.py.
"""

from __future__ import annotations

import os
import random
import sys
from typing import Callable, List

import racer_ref.reference as reference

TWIN_DIR = os.path.dirname(reference.__file__)


def interrupt_at_line(n: int, call: Callable[[], object]) -> bool:
    """Run ``call()``, raising KeyboardInterrupt at its n-th line event in the twin.

    Returns True if the interrupt was raised (and propagated out of ``call``), False if
    ``call`` finished first. Any other exception propagates.
    """
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
            if count == n:
                # Raised from the trace function, it appears at this line of the traced
                # frame, exactly like a KeyboardInterrupt from a signal handler.
                raise KeyboardInterrupt(f"injected at line event {n}")
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(TWIN_DIR) else None

    sys.settrace(tracer)
    try:
        call()
    except KeyboardInterrupt as error:
        if "injected" not in str(error):
            raise
        return True
    finally:
        sys.settrace(None)
    return False


def stream(seed: int, length: int, alphabet: int) -> List[int]:
    rnd = random.Random(seed)
    return [rnd.randrange(alphabet) for _ in range(length)]


def sweep_automaton_extend(
    max_nodes: int = 12, ngram: int = 4, seed: int = 0, stride: int = 1, length: int = 3
) -> List[str]:
    """Interrupt ``Automaton.extend`` at every line (every ``stride``-th), on a full trie.

    After each interrupt: the self-check passes, ``dump()`` and ``stats()`` equal those of
    a twin that never saw the call, and the same later calls give the same results.
    """
    from racer_ref.reference.automaton import Automaton

    failures: List[str] = []
    prefix, tokens, later = stream(seed, 30, 3), stream(seed + 1, length, 3), stream(seed + 2, 4, 3)
    n = 1
    while True:
        victim, twin = Automaton(max_nodes, ngram), Automaton(max_nodes, ngram)
        victim.extend(prefix)
        twin.extend(prefix)
        fired = interrupt_at_line(n, lambda: victim.extend(tokens))
        if not fired:
            # Past the last line: the call completed, so it must equal the full call.
            twin.extend(tokens)
        failures += compare_automata(victim, twin, f"extend interrupted at line {n}" if fired else "extend completed")
        # Both must go on identically (and the interrupted one must not be "torn").
        for t in later:
            victim.extend([t])
            twin.extend([t])
        failures += compare_automata(victim, twin, f"later calls after line {n}")
        if not fired:
            if n < 50:
                failures.append(f"extend completed after only {n} lines: the sweep saw nothing")
            return failures
        n += stride


def compare_automata(a, b, where: str) -> List[str]:
    """Failure messages if ``a`` and ``b`` differ or ``a`` breaks an invariant."""
    out = []
    try:
        a._check_invariants()
    except RuntimeError as error:
        return [f"{where}: {error}"]
    if a.dump() != b.dump():
        out.append(f"{where}: dump() differs from an uninterrupted twin")
    if a.stats() != b.stats():
        out.append(f"{where}: stats() differ: {a.stats()} vs {b.stats()}")
    for root in range(3):
        if a.retrieve(root, 8) != b.retrieve(root, 8):
            out.append(f"{where}: retrieve({root}, 8) differs")
    if len(a) > a.max_nodes:
        out.append(f"{where}: {len(a)} nodes > max_nodes = {a.max_nodes}")
    return out


def sweep_automaton_queries(stride: int = 1) -> List[str]:
    """Interrupt ``retrieve`` and ``reset`` at every line.

    An interrupted query changes only the failure-link cache and its counters: ``dump()``
    (which recomputes every link it prints) must equal an uninterrupted twin's. An
    interrupted ``reset()`` must either have finished or leave a torn automaton that says
    to call ``reset()``, after which it works.
    """
    from racer_ref.reference.automaton import Automaton

    failures: List[str] = []
    prefix = stream(5, 40, 3)
    for name in ("retrieve", "reset"):
        n = 1
        while True:
            victim, twin = Automaton(12, 4), Automaton(12, 4)
            victim.extend(prefix)
            twin.extend(prefix)
            call = (lambda: victim.retrieve(1, 8)) if name == "retrieve" else victim.reset
            fired = interrupt_at_line(n, call)
            # An interrupt at reset()'s first line stops it before it changes anything;
            # from its second line on, reset() is under way and the flag says so.
            if name == "reset" and (victim._torn or not fired):
                twin.reset()
                if fired:
                    try:
                        victim.extend([1])
                        failures.append(f"reset interrupted at line {n}: a torn automaton accepted extend()")
                    except RuntimeError as error:
                        if "reset()" not in str(error):
                            failures.append(f"reset interrupted at line {n}: unclear error {error}")
                    victim.reset()
            try:
                victim._check_invariants()
            except RuntimeError as error:
                failures.append(f"{name} interrupted at line {n}: {error}")
            else:
                if victim.dump() != twin.dump():
                    failures.append(f"{name} interrupted at line {n}: dump() differs")
                victim.extend(prefix[:9])
                twin.extend(prefix[:9])
                if victim.dump() != twin.dump() or victim.retrieve(2, 8) != twin.retrieve(2, 8):
                    failures.append(f"{name} interrupted at line {n}: later calls differ")
            if not fired:
                break
            n += stride
    return failures


def double_interrupt_automaton() -> List[str]:
    """A second interrupt *during the rollback*: the automaton must say it is torn and name
    ``reset()`` on every later call, and work again after ``reset()``."""
    from racer_ref.reference import automaton as module
    from racer_ref.reference import undo

    failures: List[str] = []
    original = undo.restore
    calls = 0

    def failing_restore(lru, snapshot):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt("second Ctrl-C, during the rollback")
        original(lru, snapshot)

    victim = module.Automaton(12, 4)
    victim.extend(stream(0, 30, 3))
    undo.restore = failing_restore
    try:
        fired = interrupt_at_line(400, lambda: victim.extend(stream(1, 6, 3)))
    except KeyboardInterrupt:
        fired = True  # the second interrupt propagated out of the rollback
    finally:
        undo.restore = original
    if not fired or calls < 3:
        return [f"double interrupt: not set up as intended (fired={fired}, restores={calls})"]
    for name, call in (("extend", lambda: victim.extend([1])), ("retrieve", lambda: victim.retrieve(1, 4)),
                       ("borders", lambda: victim.borders(1)), ("dump", victim.dump), ("len", victim.len),
                       ("stats", victim.stats)):
        try:
            call()
            failures.append(f"double interrupt: {name}() worked on a torn automaton")
        except RuntimeError as error:
            if "reset()" not in str(error):
                failures.append(f"double interrupt: {name}() error does not name reset(): {error}")
    if "torn" not in repr(victim):
        failures.append(f"double interrupt: repr() does not say torn: {victim!r}")
    victim.reset()
    fresh = module.Automaton(12, 4)
    for a in (victim, fresh):
        a.extend(stream(2, 20, 3))
    failures += compare_automata(victim, fresh, "after reset()")
    return failures


def drafter_state(d) -> tuple:
    """Everything a twin Drafter holds, comparable with ==."""
    automaton = None if d.automaton is None else (d.automaton.dump(), d.automaton.stats())
    table = None if d.table is None else (d.table.ids.tolist(), d.table.seen.tolist())
    return automaton, table, list(d.history), d.num_committed


def sweep_drafter(method: str, stride: int = 1) -> List[str]:
    """Interrupt the twin Drafter's ``observe``, ``commit`` and ``reset`` at every line.

    After each interrupt the drafter equals an uninterrupted one that never saw the call
    (``reset``: that saw it, if it started), and the next drafts are the same.
    """
    import numpy as np

    from racer_ref.reference.drafter import Drafter

    failures: List[str] = []
    vocab = 6
    context = np.array(stream(7, 30, 4))
    topk = np.array([stream(8 + i, 2, vocab) for i in range(30)])
    calls = {
        "observe": lambda d: d.observe(context[:12], topk[:12]),
        "commit": lambda d: d.commit(context[:5]),
        "reset": lambda d: d.reset(),
    }
    for name, call in calls.items():
        n = 1
        while True:
            drafters = [Drafter(method, vocab_size=vocab, capacity=8, breadth=2, ngram=4, max_nodes=12)
                        for _ in range(2)]
            for d in drafters:
                d.observe(context, topk)
                d.commit(context)
            victim, twin = drafters
            fired = interrupt_at_line(n, lambda: call(victim))
            where = f"{method}: {name} interrupted at line {n}" if fired else f"{method}: {name} completed"
            if not fired or (name == "reset" and victim._torn):
                if name == "reset" and fired:
                    try:
                        victim.draft(1)
                        failures.append(f"{where}: a torn drafter accepted draft()")
                    except RuntimeError as error:
                        if "reset()" not in str(error):
                            failures.append(f"{where}: unclear error {error}")
                    victim.reset()
                call(twin)
            if drafter_state(victim) != drafter_state(twin):
                failures.append(f"{where}: state differs from an uninterrupted drafter")
            for d in drafters:
                d.commit(context[:3])
            if victim.draft(2).tokens.tolist() != twin.draft(2).tokens.tolist():
                failures.append(f"{where}: the next draft differs")
            if not fired:
                break
            n += stride
    return failures


def double_interrupt_drafter() -> List[str]:
    """A second interrupt during the twin Drafter's rollback: every later call names
    ``reset()``, and ``reset()`` recovers; the same for the copy-logit table."""
    import numpy as np

    from racer_ref.reference.copy_logit import CopyLogitTable
    from racer_ref.reference.drafter import Drafter

    from racer_ref.reference import undo

    failures: List[str] = []
    original = undo.restore

    def failing_restore(lru, snapshot):
        raise KeyboardInterrupt("second Ctrl-C, during the rollback")

    d = Drafter("racer", vocab_size=6, capacity=8, breadth=2, ngram=4, max_nodes=12)
    d.commit(stream(0, 30, 4))
    undo.restore = failing_restore
    try:
        interrupt_at_line(600, lambda: d.commit([1, 2, 3, 1, 2, 3]))
    except KeyboardInterrupt:
        pass
    finally:
        undo.restore = original
    if not d._torn:
        return ["double interrupt (drafter): not set up as intended (not torn)"]
    for name, call in (("draft", lambda: d.draft(1)), ("commit", lambda: d.commit([1])),
                       ("observe", lambda: d.observe([1], [[2, 3]])), ("table_row", lambda: d.table_row(1)),
                       ("automaton_nodes", lambda: d.automaton_nodes)):
        try:
            call()
            failures.append(f"double interrupt (drafter): {name} worked on a torn drafter")
        except RuntimeError as error:
            if "reset()" not in str(error):
                failures.append(f"double interrupt (drafter): {name} error does not name reset(): {error}")
    d.reset()
    fresh = Drafter("racer", vocab_size=6, capacity=8, breadth=2, ngram=4, max_nodes=12)
    for x in (d, fresh):
        x.commit(stream(3, 20, 4))
    if drafter_state(d) != drafter_state(fresh) or d.draft(1).tokens.tolist() != fresh.draft(1).tokens.tolist():
        failures.append("double interrupt (drafter): reset() did not give a fresh drafter")

    # The table: interrupt the first write, then the putting back of the old rows.
    table = CopyLogitTable(6, 2)
    table.observe([1, 2], [[3, 4], [5, 0]])
    old_ids = table.ids

    class Failing(np.ndarray):
        writes = 0

        def __setitem__(self, key, value):
            Failing.writes += 1
            if Failing.writes in (1, 2):
                raise KeyboardInterrupt(f"write {Failing.writes}")
            super().__setitem__(key, value)

    table.ids = old_ids.view(Failing)
    try:
        table.observe([1, 3], [[0, 1], [2, 2]])
    except KeyboardInterrupt:
        pass
    table.ids = old_ids
    try:
        table.row(1)
        failures.append("double interrupt (table): row() worked on a torn table")
    except RuntimeError as error:
        if "reset()" not in str(error):
            failures.append(f"double interrupt (table): error does not name reset(): {error}")
    table.reset()
    if table.row(1) != [] or table.num_seen != 0:
        failures.append("double interrupt (table): reset() did not empty the table")
    return failures
