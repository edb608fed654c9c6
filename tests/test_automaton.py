"""The automaton on both backends: named cases, input kinds, bad input, API and stubs.

The property-based comparison of the two backends is in test_automaton_differential.py.
"""

from __future__ import annotations

import ast
from pathlib import Path as FsPath
from typing import Any, Callable, List

import numpy as np
import pytest

from racer_ref.course.cases.automaton import CASES, Case, parse_dump
from conftest import automaton_class

REPO = FsPath(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------
# Named cases (hand-checked; see racer_ref/course/cases/automaton.py)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_named_case(backend: Any, case: Case) -> None:
    a = backend(case.max_nodes, case.ngram, case.min_border_depth)
    for k, step in enumerate(case.steps):
        a.extend(list(step.tokens))
        where = f"{case.name} step {k}"
        d = parse_dump(a.dump())
        states = d["states"]
        if step.nodes is not None:
            assert a.len() == len(a) == d["nodes"] == step.nodes, where
        if step.evictions is not None:
            assert a.stats()["evictions"] == step.evictions, where
        if step.matching is not None:
            assert d["matching"] == step.matching, where
        for path, freq in step.freqs.items():
            assert states[path][0] == freq, f"{where}: freq of {path}"
        for path, link in step.fails.items():
            assert states[path][1] == link, f"{where}: fail of {path}"
        for path in step.absent:
            assert path not in states, f"{where}: {path} should have been evicted"
        if step.lru is not None:
            order = sorted(states, key=lambda p: states[p][2])
            assert tuple(order) == step.lru, where
        for root, want in step.borders.items():
            assert a.borders(root) == [list(b) for b in want], f"{where}: borders for {root}"
        for root, capacity, want in step.retrieve:
            assert a.retrieve(root, capacity) == want, f"{where}: retrieve({root}, {capacity})"


# --------------------------------------------------------------------------------------
# Accepted input kinds: all give the same automaton as a plain list.
# --------------------------------------------------------------------------------------

TOKENS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6]

INPUT_KINDS: List[Callable[[List[int]], Any]] = [
    lambda t: list(t),
    lambda t: tuple(t),
    lambda t: iter(t),
    lambda t: (x for x in t),
    lambda t: np.array(t, dtype=np.int64),
    lambda t: np.array(t, dtype=np.int32),
    lambda t: np.array(t, dtype=np.uint32),
    lambda t: np.array(t, dtype=np.uint64),
    lambda t: np.array(t, dtype=np.uint8),
    lambda t: np.repeat(np.array(t, dtype=np.int16), 2)[::2],  # non-contiguous view
    lambda t: [np.int64(x) for x in t],
]


@pytest.mark.parametrize("make", INPUT_KINDS, ids=[f"kind{i}" for i in range(len(INPUT_KINDS))])
def test_extend_accepts_lists_arrays_and_iterables(backend: Any, make: Callable) -> None:
    ref = backend(64, 4)
    ref.extend(TOKENS)
    a = backend(64, 4)
    a.extend(make(TOKENS[:7]))
    a.extend([])
    a.extend(make(TOKENS[7:]))
    assert a.dump() == ref.dump()
    assert a.retrieve(5, 16) == ref.retrieve(5, 16)


def test_range_input(backend: Any) -> None:
    a, b = backend(64, 4), backend(64, 4)
    a.extend(range(10))
    b.extend(list(range(10)))
    assert a.dump() == b.dump()


# --------------------------------------------------------------------------------------
# Bad input: same exception class and message on both backends, raised before any change.
# --------------------------------------------------------------------------------------

BAD_CALLS = [
    # (id, exception, argument named in the message, call on an automaton)
    ("negative_token", ValueError, "tokens", lambda a: a.extend([1, 2, -1])),
    ("token_2_32", ValueError, "tokens", lambda a: a.extend([1, 2**32])),
    ("token_2_64", ValueError, "tokens", lambda a: a.extend([1, 2**64])),
    ("token_bool", TypeError, "tokens", lambda a: a.extend([1, True])),
    ("token_float", TypeError, "tokens", lambda a: a.extend([1, 2.0])),
    ("token_str", TypeError, "tokens", lambda a: a.extend("12")),
    ("token_none", TypeError, "tokens", lambda a: a.extend([1, None])),
    ("tokens_int", TypeError, "tokens", lambda a: a.extend(5)),
    ("tokens_none", TypeError, "tokens", lambda a: a.extend(None)),
    ("generator_late_error", ValueError, "tokens", lambda a: a.extend(x - 3 for x in range(5))),
    ("array_float", TypeError, "tokens", lambda a: a.extend(np.array([1.0, 2.0]))),
    ("array_bool", TypeError, "tokens", lambda a: a.extend(np.array([True, False]))),
    ("array_2d", ValueError, "tokens", lambda a: a.extend(np.array([[1, 2]]))),
    ("array_0d", ValueError, "tokens", lambda a: a.extend(np.array(3))),
    ("array_negative", ValueError, "tokens", lambda a: a.extend(np.array([1, -1]))),
    ("array_2_32", ValueError, "tokens", lambda a: a.extend(np.array([2**32], dtype=np.int64))),
    ("array_u64_huge", ValueError, "tokens", lambda a: a.extend(np.array([2**63], dtype=np.uint64))),
    ("root_negative", ValueError, "root", lambda a: a.retrieve(-1, 8)),
    ("root_2_32", ValueError, "root", lambda a: a.retrieve(2**32, 8)),
    ("root_float", TypeError, "root", lambda a: a.retrieve(1.0, 8)),
    ("root_bool", TypeError, "root", lambda a: a.retrieve(True, 8)),
    ("capacity_0", ValueError, "capacity", lambda a: a.retrieve(1, 0)),
    ("capacity_negative", ValueError, "capacity", lambda a: a.retrieve(1, -4)),
    ("capacity_2_31", ValueError, "capacity", lambda a: a.retrieve(1, 2**31)),
    ("capacity_float", TypeError, "capacity", lambda a: a.retrieve(1, 8.0)),
    ("capacity_none", TypeError, "capacity", lambda a: a.retrieve(1, None)),
    ("borders_root_negative", ValueError, "root", lambda a: a.borders(-2)),
]


@pytest.mark.parametrize("exc, arg, call", [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_input_raises_before_any_change(exc: type, arg: str, call: Callable) -> None:
    messages = []
    for name in ("rust", "python"):
        a = automaton_class(name)(32, 3)
        a.extend([1, 2, 3, 1, 2])
        a.retrieve(3, 8)
        dump_before, stats_before = a.dump(), a.stats()
        with pytest.raises(exc, match=arg) as info:
            call(a)
        assert type(info.value) is exc
        # Nothing changed: same counters, same dump.
        assert a.stats() == stats_before
        assert a.dump() == dump_before
        messages.append(str(info.value))
    assert messages[0] == messages[1], messages


BAD_CONSTRUCTORS = [
    ("ngram_1", ValueError, "ngram", dict(ngram=1)),
    ("ngram_0", ValueError, "ngram", dict(ngram=0, max_nodes=10)),
    ("ngram_257", ValueError, "ngram", dict(ngram=257)),
    ("ngram_float", TypeError, "ngram", dict(ngram=4.0)),
    ("ngram_bool", TypeError, "ngram", dict(ngram=True)),
    ("max_nodes_small", ValueError, "max_nodes", dict(max_nodes=9, ngram=10)),
    ("max_nodes_negative", ValueError, "max_nodes", dict(max_nodes=-1)),
    ("max_nodes_huge", ValueError, "max_nodes", dict(max_nodes=2**31)),
    ("max_nodes_2_70", ValueError, "max_nodes", dict(max_nodes=2**70)),
    ("max_nodes_str", TypeError, "max_nodes", dict(max_nodes="100")),
    ("min_border_depth_0", ValueError, "min_border_depth", dict(min_border_depth=0)),
    ("min_border_depth_over_ngram", ValueError, "min_border_depth", dict(ngram=4, min_border_depth=5)),
    ("min_border_depth_float", TypeError, "min_border_depth", dict(min_border_depth=2.5)),
]


@pytest.mark.parametrize(
    "exc, arg, kwargs", [c[1:] for c in BAD_CONSTRUCTORS], ids=[c[0] for c in BAD_CONSTRUCTORS]
)
def test_bad_constructor_arguments(exc: type, arg: str, kwargs: dict) -> None:
    messages = []
    for name in ("rust", "python"):
        with pytest.raises(exc, match=arg) as info:
            automaton_class(name)(**kwargs)
        assert type(info.value) is exc
        messages.append(str(info.value))
    assert messages[0] == messages[1], messages


def test_smallest_valid_arguments(backend: Any) -> None:
    # max_nodes == ngram: one window fits; the trie never exceeds it.
    a = backend(max_nodes=2, ngram=2, min_border_depth=1)
    a.extend([0, 1, 2, 0, 1, 2, 2, 2])
    assert a.len() <= 2
    a = backend(max_nodes=256, ngram=256, min_border_depth=256)
    a.extend(range(300))
    assert a.len() == 256


# --------------------------------------------------------------------------------------
# API
# --------------------------------------------------------------------------------------


def test_defaults_and_properties(backend: Any) -> None:
    a = backend()
    assert (a.max_nodes, a.ngram, a.min_border_depth) == (10_000, 10, 2)
    assert a.dump().splitlines()[0] == "Automaton(max_nodes=10000, ngram=10, min_border_depth=2)"
    assert "max_nodes=10000" in repr(a)
    b = backend(None, None, None)
    assert b.dump() == a.dump()


def test_stats_and_reset(backend: Any) -> None:
    a = backend(8, 3)
    a.extend([1, 2, 3, 4, 1, 2, 3, 5])
    a.retrieve(4, 8)
    s = a.stats()
    assert set(s) == {
        "nodes", "max_nodes", "ngram", "min_border_depth", "committed_tokens", "inserts",
        "evictions", "retrieves", "fail_hits", "fail_misses", "matching_depth",
    }
    assert s["nodes"] == a.len() == 8
    assert s["committed_tokens"] == 8
    assert s["inserts"] - s["evictions"] == 8
    assert s["evictions"] > 0
    assert s["retrieves"] == 1
    assert s["matching_depth"] == 3
    a.reset()
    fresh = backend(8, 3)
    assert a.dump() == fresh.dump()
    assert a.stats() == fresh.stats()
    assert a.retrieve(4, 8) == [[4]]


def test_failure_link_cache_is_used(backend: Any) -> None:
    # A second dump with no change in between answers every link from the cache.
    a = backend(100, 4)
    a.extend([1, 2, 3, 1, 2, 4])
    a.dump()
    misses = a.stats()["fail_misses"]
    a.dump()
    assert a.stats()["fail_misses"] == misses
    assert a.stats()["fail_hits"] >= a.len()


def test_retrieve_counts_the_root_in_capacity(backend: Any) -> None:
    a = backend(1000, 6)
    a.extend([7, 1, 2, 3, 4, 5] * 3 + [7])
    for capacity in range(1, 8):
        paths = a.retrieve(1, capacity)
        nodes = {tuple(p[:k]) for p in paths for k in range(1, len(p) + 1)}
        assert len(nodes) == min(capacity, 5)  # root 1, then 2 3 4 5 (depth 5 < ngram 6)
        assert all(p[0] == 1 for p in paths)


# --------------------------------------------------------------------------------------
# The stubs describe the binary.
# --------------------------------------------------------------------------------------


def test_stub_matches_binary() -> None:
    import racer_ref._core as core

    tree = ast.parse((REPO / "python" / "racer_ref" / "_core.pyi").read_text())
    stub = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Automaton")
    stub_names = {
        n.name for n in stub.body if isinstance(n, ast.FunctionDef) and n.name != "__init__"
    }
    binary_names = {
        n for n in dir(core.Automaton) if not n.startswith("_") or n in ("__len__",)
    }
    assert stub_names == binary_names
    twin = automaton_class("python")
    assert binary_names <= set(dir(twin()))


def test_regress_masked_array_reads_its_data_like_the_rust_core(backend: Any) -> None:
    # The twin used .tolist(), which turns masked entries into None (an unnamed TypeError);
    # both backends now read an ndarray subclass as np.asarray does.
    a = backend(50, 3)
    a.extend(np.ma.array([1, 2, 1, 2], mask=[0, 1, 0, 0]))
    assert a.stats()["committed_tokens"] == 4
    assert a.retrieve(1, 8) == [[1, 2]]
