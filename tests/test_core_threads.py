"""The Rust extension's objects under concurrent calls (issue 15, item 3, Rust side).

Each ``racer_ref._core`` object locks its core for the Rust part of a call: calls from
several threads are serialised (under the GIL), and a call that finds the object busy is
refused at once with a ``RuntimeError`` that says it is in use, never PyO3's bare
"Already borrowed" nor a panic.
"""

from __future__ import annotations

import gc
import sys
import threading

import numpy as np
import pytest

core = pytest.importorskip("racer_ref._core")

IN_USE = "in use by another call"


def _hammer(target, threads: int = 4) -> list[BaseException]:
    """Run ``target(i)`` in ``threads`` threads at once, switching threads as often as the
    interpreter allows; return the exceptions they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run(i: int) -> None:
        start.wait()
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - every failure is the test's result
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(old)
    return errors


def test_one_drafter_shared_by_threads_serialises_calls():
    # A fresh process's first calls import numpy.asarray inside the call: the case that
    # gave "Already borrowed" before. Lists go through numpy.asarray on every call.
    d = core.Drafter("racer", vocab_size=50, capacity=16, breadth=3, ngram=4, max_nodes=60)
    steps = 300

    def loop(i: int) -> None:
        rng = np.random.default_rng(i)
        for _ in range(steps):
            root = int(rng.integers(0, 50))
            tokens, parents, *_ = d.draft(root)
            assert tokens[0] == root and len(tokens) <= 16 and parents[0] == -1
            d.observe(tokens.tolist(), rng.integers(0, 50, (len(tokens), 3)).tolist())
            d.commit([root, int(rng.integers(0, 50))])

    assert _hammer(loop) == []
    # Nothing exceeded its bounds, and no call was lost.
    assert d.automaton_nodes <= 60
    assert d.num_committed == 4 * steps * 2


def test_one_automaton_shared_by_threads_stays_within_max_nodes():
    a = core.Automaton(max_nodes=60, ngram=4)

    def loop(i: int) -> None:
        rng = np.random.default_rng(i)
        for _ in range(300):
            a.extend(rng.integers(0, 20, 3))
            root = int(rng.integers(0, 20))
            assert all(p[0] == root for p in a.retrieve(root, 8))

    assert _hammer(loop) == []
    assert len(a) <= 60
    assert a.stats()["committed_tokens"] == 4 * 300 * 3


def test_busy_object_is_refused_at_once_with_a_clear_error():
    """Python code that runs *inside* a call (here a garbage-collector callback, which
    CPython 3.11 runs when the call allocates the result lists) finds the object busy."""
    a = core.Automaton(32, 3)
    a.extend([1, 2, 3, 1, 2])
    seen: list[str] = []

    def callback(phase: str, info: dict) -> None:
        try:
            a.len()
            seen.append("ok")
        except RuntimeError as e:
            seen.append(str(e))

    gc.callbacks.append(callback)
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        kept = [a.retrieve(3, 8) for _ in range(50)]
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(callback)
    assert kept[-1] == [[3, 1]]
    refused = [s for s in seen if s != "ok"]
    if not refused:
        pytest.skip("no garbage collection ran inside a call on this interpreter")
    assert all(s.startswith(f"Automaton: {IN_USE}") and "thread" in s for s in refused), refused
    # The refused calls changed nothing; the object works normally afterwards.
    assert a.len() == len(a) and a.retrieve(3, 8) == [[3, 1]]
