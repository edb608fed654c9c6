"""Issue 32, item 5: ``os.fork()`` while another thread is using a ``racer_ref.Drafter``.

In the child only the forking thread exists. A drafter that another thread was using at
the fork (a ``generate()`` call, or a single method call) is unlocked there but marked: every
call, ``generate(..., drafter=d)`` included, raises ``DrafterForkedError`` naming the call
that was cut off (never ``DrafterInUseError`` naming a thread the child does not have),
until ``d.reset()``, which makes it usable. Drafters nobody else was using come to the child
exactly as they were. Real forks, both backends; the child reports through a pipe.
"""

from __future__ import annotations

import json
import os
import select
import signal
import threading
import warnings
from typing import Any, Callable, Dict, List

import numpy as np
import pytest

from models import single_thread  # noqa: F401
from racer_ref import Drafter
from racer_ref.decoding import generate
from test_drafter_threads import MAX_NODES, NEW, check_bounds, greedy, model, prompt

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def outcome(call: Callable[[], Any]) -> List[Any]:
    """``["ok", value]``, or ``[exception class name, message]``: JSON for the pipe."""
    try:
        return ["ok", call()]
    except Exception as error:  # noqa: BLE001 (reported to the parent, which asserts)
        return [type(error).__name__, str(error)]


def in_child(check: Callable[[], Dict[str, Any]], timeout: float = 300) -> Dict[str, Any]:
    """Fork; the child runs ``check()`` and sends its dict back as JSON, then exits at once
    (``os._exit``: it must never return into pytest). Returns the child's dict."""
    read, write = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a process with threads may deadlock the child.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(read)
            try:
                report = {"report": check()}
            except BaseException as error:  # noqa: BLE001
                report = {"crash": f"{type(error).__name__}: {error}"}
            os.write(write, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([read], [], [], timeout)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                pytest.fail(f"the forked child did not answer within {timeout} s")
            chunk = os.read(read, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    answer = json.loads(b"".join(chunks))
    assert "crash" not in answer, answer["crash"]
    return answer["report"]


def state(d: Drafter) -> List[Any]:
    """What a drafter holds, read through its public methods."""
    return [d.num_committed, d.automaton_nodes, [d.table_row(t) for t in range(0, 128, 7)]]


@pytest.mark.parametrize("backend", ["rust", "python"])
def test_a_request_cut_off_by_fork_is_refused_in_the_child_until_reset(backend) -> None:
    busy = Drafter(vocab_size=128, max_nodes=MAX_NODES, ngram=4, backend=backend)
    idle = Drafter(vocab_size=128, max_nodes=MAX_NODES, ngram=4, backend=backend)
    expected = {seed: list(greedy(seed)) for seed in (0, 1, 2)}
    assert generate(model(), None, prompt(2), max_new_tokens=NEW, drafter=idle).token_ids == expected[2]
    idle_before = state(idle)
    inside, release = threading.Event(), threading.Event()

    def hold(block: List[int]) -> None:
        # generate() calls this after each block, while it holds `busy`.
        inside.set()
        release.wait(300)

    result: Dict[str, Any] = {}

    def request() -> None:
        result["tokens"] = generate(model(), None, prompt(0), max_new_tokens=NEW, drafter=busy,
                                    callback=hold).token_ids

    thread = threading.Thread(target=request, name="first-request")
    thread.start()
    try:
        assert inside.wait(300)

        def check() -> Dict[str, Any]:
            report = {
                # Cut off: refused, naming the call that was cut off, whatever is called.
                "generate": outcome(lambda: generate(model(), None, prompt(1), max_new_tokens=NEW,
                                                     drafter=busy).token_ids),
                "num_committed": outcome(lambda: busy.num_committed),
                "draft": outcome(lambda: busy.draft(1).tokens.tolist()),
                "settings": [busy.method, busy.vocab_size],  # still readable
                # Drafters nobody else was using are exactly as they were.
                "idle": outcome(lambda: state(idle)),
                # reset() is allowed, and afterwards the drafter works, from empty.
                "reset": outcome(busy.reset),
            }
            report["after_reset"] = outcome(lambda: busy.num_committed)
            report["generate_after_reset"] = outcome(
                lambda: generate(model(), None, prompt(1), max_new_tokens=NEW, drafter=busy).token_ids)
            report["bounds"] = outcome(lambda: check_bounds(busy))
            report["idle_generate"] = outcome(
                lambda: generate(model(), None, prompt(1), max_new_tokens=NEW, drafter=idle).token_ids)
            return report

        child = in_child(check)
    finally:
        release.set()
        thread.join(300)
    for name in ("generate", "num_committed", "draft"):
        kind, message = child[name]
        assert kind == "DrafterForkedError", (name, child[name])
        assert "forked while generate() in thread 'first-request' was using this drafter" in message
        assert "Call reset() to make it usable again" in message
    assert child["settings"] == ["racer", 128]
    assert child["idle"] == ["ok", idle_before]
    assert child["reset"] == ["ok", None]
    assert child["after_reset"] == ["ok", 0]
    assert child["generate_after_reset"] == ["ok", expected[1]]
    assert child["bounds"] == ["ok", None]
    assert child["idle_generate"] == ["ok", expected[1]]
    # The parent is untouched: its request finishes with greedy's tokens, and its drafters
    # keep their state (the child's reset was the child's own).
    assert not thread.is_alive()
    assert result["tokens"] == expected[0]
    assert busy.num_committed > 0
    assert state(idle) == idle_before


class Blocking:
    """Token ids whose conversion to an array waits for ``release``: a method call that is
    still inside the drafter (holding it) when the main thread forks."""

    def __init__(self, ids: List[int]) -> None:
        self.ids, self.inside, self.release = ids, threading.Event(), threading.Event()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        self.inside.set()
        self.release.wait(300)
        return np.asarray(self.ids, dtype=np.int64)


@pytest.mark.parametrize("backend", ["rust", "python"])
def test_a_single_call_cut_off_by_fork_is_refused_in_the_child_until_reset(backend) -> None:
    d = Drafter(vocab_size=128, max_nodes=MAX_NODES, ngram=4, backend=backend)
    d.commit([5, 6, 7, 5, 6])
    ids = Blocking([5, 6])
    thread = threading.Thread(target=lambda: d.observe(ids, np.full((2, 8), 9, dtype=np.int64)))
    thread.start()
    try:
        assert ids.inside.wait(300)

        def check() -> Dict[str, Any]:
            report = {"commit": outcome(lambda: d.commit([1])), "reset": outcome(d.reset)}
            report["after_reset"] = outcome(lambda: (d.commit([1, 2, 1]), d.num_committed, d.table_row(5))[1:])
            return report

        child = in_child(check)
    finally:
        ids.release.set()
        thread.join(300)
    kind, message = child["commit"]
    assert kind == "DrafterForkedError"
    assert "forked while a call from another thread was using this drafter" in message
    assert child["reset"] == ["ok", None]
    assert child["after_reset"] == ["ok", [3, []]]  # empty after the reset, then working
    # In the parent the call went through.
    assert not thread.is_alive()
    assert d.num_committed == 5 and d.table_row(5) == [9] * 8
