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
    from racer_ref.reference.lru import RecencyList

    failures: List[str] = []
    original = RecencyList.restore
    calls = 0

    def failing_restore(self, snapshot):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt("second Ctrl-C, during the rollback")
        original(self, snapshot)

    victim = module.Automaton(12, 4)
    victim.extend(stream(0, 30, 3))
    RecencyList.restore = failing_restore  # type: ignore[method-assign]
    try:
        fired = interrupt_at_line(400, lambda: victim.extend(stream(1, 6, 3)))
    except KeyboardInterrupt:
        fired = True  # the second interrupt propagated out of the rollback
    finally:
        RecencyList.restore = original  # type: ignore[method-assign]
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
