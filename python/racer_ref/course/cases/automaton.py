"""Named, hand-checked cases for the automaton, run on both backends by tests/test_automaton.py
and against a student's code by ``racer-ref check`` (exercises 01-03).

Each case builds ``Automaton(max_nodes, ngram, min_border_depth)`` and runs its steps; a
step commits ``tokens`` and then checks whatever it specifies. Strings (trie paths) are
tuples of token ids; ``()`` is the root. The comments show the hand derivation.

Also here: ``parse_dump``, which turns ``dump()`` into a dict, and the brute-force oracles
``eager_failure_links`` and ``count_occurrences`` (used by the tests and the checker).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from racer_ref.reference.limits import DEFAULT_MAX_NODES, DEFAULT_MIN_BORDER_DEPTH, DEFAULT_NGRAM

Path = Tuple[int, ...]


@dataclass(frozen=True)
class Step:
    tokens: Tuple[int, ...] = ()
    nodes: Optional[int] = None
    evictions: Optional[int] = None
    matching: Optional[Path] = None
    freqs: Dict[Path, int] = field(default_factory=dict)
    fails: Dict[Path, Path] = field(default_factory=dict)
    absent: Tuple[Path, ...] = ()
    #: The full recency order, most recent first.
    lru: Optional[Tuple[Path, ...]] = None
    borders: Dict[int, List[Path]] = field(default_factory=dict)
    #: (root, capacity, expected paths)
    retrieve: Tuple[Tuple[int, int, List[List[int]]], ...] = ()


@dataclass(frozen=True)
class Case:
    name: str
    steps: Tuple[Step, ...]
    max_nodes: int = DEFAULT_MAX_NODES
    ngram: int = DEFAULT_NGRAM
    min_border_depth: int = DEFAULT_MIN_BORDER_DEPTH


CASES = [
    Case(
        "basic010_empty",
        max_nodes=16,
        ngram=3,
        steps=(
            Step(nodes=0, matching=(), borders={7: []}, retrieve=((7, 64, [[7]]), (7, 1, [[7]]))),
        ),
    ),
    # "1 2 1 2 1", ngram 3: every substring of length <= 3 with its number of occurrences.
    # Matching state [1 2 1]; chain [1 2 1] -> [2 1] -> [1] -> (); for root 2 the borders
    # are [2 1 2] (depth 3 = ngram, no children) and [1 2] (child 1, freq 2).
    Case(
        "basic020_counts",
        max_nodes=100,
        ngram=3,
        steps=(
            Step(
                tokens=(1, 2, 1, 2, 1),
                nodes=6,
                evictions=0,
                matching=(1, 2, 1),
                freqs={(1,): 3, (2,): 2, (1, 2): 2, (2, 1): 2, (1, 2, 1): 2, (2, 1, 2): 1},
                fails={
                    (1,): (),
                    (2,): (),
                    (1, 2): (2,),
                    (2, 1): (1,),
                    (1, 2, 1): (2, 1),
                    (2, 1, 2): (1, 2),
                },
                # Root 1 would need [2 1 1] or [1 1] (absent); [1] alone is too shallow.
                borders={2: [(2, 1, 2), (1, 2)], 1: [], 3: []},
                retrieve=((2, 64, [[2, 1]]), (1, 64, [[1]]), (3, 64, [[3]])),
            ),
        ),
    ),
    # A prompt shorter than ngram: the official code inserts nothing yet; we can already
    # retrieve the repeat. [4 5 6 4]: border [4 5] for root 5, continuation 6 4.
    Case(
        "basic030_short_prompt",
        ngram=10,
        steps=(
            Step(
                tokens=(4, 5, 6, 4),
                nodes=9,
                matching=(4, 5, 6, 4),
                freqs={(4,): 2, (4, 5, 6, 4): 1},
                fails={(4, 5, 6, 4): (5, 6, 4), (5, 6, 4): (6, 4), (6, 4): (4,), (4, 5): (5,)},
                borders={5: [(4, 5)], 6: []},
                retrieve=((5, 64, [[5, 6, 4]]), (6, 64, [[6]])),
            ),
        ),
    ),
    # Context 5 1 2 3 7 9 1 2 4 7 5 1 2 3 7 9 1, ngram 4. Matching [3 7 9 1]; root 2 has
    # the borders [7 9 1 2] (no children), [9 1 2] (-> 4) and [1 2] (-> 3 x2, -> 4 x1).
    # Merged below the root: 3 (freq 2), 4 (freq max(1, 1)); below 3: 7 (freq 2), below
    # 4: 7 (freq 1). Frequency beats depth: 3, then 7 under 3, then 4, then 7 under 4.
    Case(
        "retrieve010_merge_borders",
        max_nodes=1000,
        ngram=4,
        steps=(
            Step(
                tokens=(5, 1, 2, 3, 7, 9, 1, 2, 4, 7, 5, 1, 2, 3, 7, 9, 1),
                matching=(3, 7, 9, 1),
                borders={2: [(7, 9, 1, 2), (9, 1, 2), (1, 2)]},
                retrieve=(
                    (2, 1, [[2]]),
                    (2, 2, [[2, 3]]),
                    (2, 3, [[2, 3, 7]]),
                    (2, 4, [[2, 3, 7], [2, 4]]),
                    (2, 5, [[2, 3, 7], [2, 4, 7]]),
                    (2, 64, [[2, 3, 7], [2, 4, 7]]),
                    (42, 64, [[42]]),
                ),
            ),
        ),
    ),
    # 9 1 3 9 1 2 9, ngram 4: matching [9 1 2 9]; for root 1 the only border is [9 1]
    # (children 3 and 2, each followed by 9, all freq 1). Ties: shallower first, then the
    # smaller token (2 before 3), then the earlier parent (9 under 2 before 9 under 3).
    Case(
        "retrieve020_ties",
        max_nodes=100,
        ngram=4,
        steps=(
            Step(
                tokens=(9, 1, 3, 9, 1, 2, 9),
                matching=(9, 1, 2, 9),
                borders={1: [(9, 1)]},
                retrieve=(
                    (1, 2, [[1, 2]]),
                    (1, 3, [[1, 2], [1, 3]]),
                    (1, 4, [[1, 2, 9], [1, 3]]),
                    (1, 64, [[1, 2, 9], [1, 3, 9]]),
                ),
            ),
        ),
    ),
    # min_border_depth = 1: the root's own child counts as a border (no context needed).
    Case(
        "retrieve030_min_border_depth_1",
        max_nodes=100,
        ngram=3,
        min_border_depth=1,
        steps=(
            Step(
                tokens=(1, 2, 3),
                borders={2: [(2,)], 1: [(1,)]},
                retrieve=((2, 64, [[2, 3]]), (1, 64, [[1, 2, 3]])),
            ),
        ),
    ),
    Case(
        "retrieve031_min_border_depth_2",
        max_nodes=100,
        ngram=3,
        steps=(Step(tokens=(1, 2, 3), borders={2: [], 1: []}, retrieve=((2, 64, [[2]]),)),),
    ),
    # max_nodes 2, ngram 2, tokens 1 2 3 (LRU lists most recent first):
    #   1: create [1]                                   lru [1]
    #   2: window [1] -> create [1 2]                   lru [1] [1 2]
    #      root -> [2] missing, full: evict the tail [1 2] (a new window: it closes)
    #                                                   lru [2] [1]
    #   3: window [2] -> [2 3] missing, full: touch [2], evict [1]; create [2 3]
    #                                                   lru [2] [2 3]
    #      root -> [3] missing, full: evict [2 3] (closes); create [3]    lru [3] [2]
    Case(
        "evict010_tiny",
        max_nodes=2,
        ngram=2,
        steps=(
            Step(tokens=(1, 2), nodes=2, evictions=1, matching=(2,), lru=((2,), (1,)), absent=((1, 2),)),
            Step(
                tokens=(3,),
                nodes=2,
                evictions=3,
                matching=(3,),
                lru=((3,), (2,)),
                absent=((1,), (2, 3)),
                fails={(2,): (), (3,): ()},
                borders={3: []},
            ),
        ),
    ),
    # max_nodes 3, ngram 2, tokens 1 2 | 1 | 3:
    #   1 2: [1] [1 2] [2]                          lru [2] [1] [1 2]
    #   1:   window [2] -> [2 1] missing: touch [2], evict [1 2]; create [2 1];
    #        root -> [1] exists: freq 2             lru [1] [2] [2 1]
    #   3:   window [1] -> [1 3] missing: touch [1], evict [2 1]; create [1 3];
    #        root -> [3] missing: evict [2]; create [3]    lru [3] [1] [1 3]
    Case(
        "evict020_parent_stays_more_recent",
        max_nodes=3,
        ngram=2,
        steps=(
            Step(tokens=(1, 2), nodes=3, evictions=0, lru=((2,), (1,), (1, 2))),
            Step(
                tokens=(1,),
                nodes=3,
                evictions=1,
                matching=(2, 1),
                freqs={(1,): 2, (2, 1): 1},
                lru=((1,), (2,), (2, 1)),
                absent=((1, 2),),
            ),
            Step(
                tokens=(3,),
                nodes=3,
                evictions=3,
                matching=(1, 3),
                freqs={(1,): 2, (1, 3): 1, (3,): 1},
                fails={(1, 3): (3,)},
                lru=((3,), (1,), (1, 3)),
                absent=((2,), (2, 1)),
            ),
        ),
    ),
    # A failure link must follow the trie: max_nodes 3, ngram 3.
    #   0 1 0: [0] [0 1] [1], then window [0 1] -> [0 1 0] evicts [1] (window 1 closes);
    #          root -> [0] exists.  Now fail([0 1]) = () since [1] is gone.
    #   1:     window [0] -> [0 1] exists (freq 2); root -> [1] missing: evict [0 1 0],
    #          create [1].  Now fail([0 1]) = [1] again (a longer suffix reappeared).
    Case(
        "fail010_longer_suffix_reappears",
        max_nodes=3,
        ngram=3,
        steps=(
            Step(
                tokens=(0, 1, 0),
                evictions=1,
                matching=(0, 1, 0),
                fails={(0, 1): (), (0, 1, 0): (0,)},
                absent=((1,),),
                lru=((0,), (0, 1), (0, 1, 0)),
            ),
            Step(
                tokens=(1,),
                evictions=2,
                matching=(0, 1),
                freqs={(0,): 2, (0, 1): 2, (1,): 1},
                fails={(0, 1): (1,)},
                absent=((0, 1, 0),),
                lru=((1,), (0,), (0, 1)),
            ),
        ),
    ),
    # Token ids use the full 32-bit range; 1 and 1025 share a failure-link epoch slot.
    Case(
        "tokens010_full_range",
        max_nodes=100,
        ngram=3,
        steps=(
            Step(
                tokens=(4294967295, 1, 1025, 4294967295, 1),
                matching=(1025, 4294967295, 1),
                fails={(1025, 4294967295, 1): (4294967295, 1), (1, 1025): (1025,)},
                borders={1025: [(4294967295, 1, 1025), (1, 1025)]},
                # [4294967295 1 1025] is at depth ngram: only [1 1025] has a child.
                retrieve=((1025, 64, [[1025, 4294967295]]),),
            ),
        ),
    ),
]

_HEAD = re.compile(r"nodes=(\d+) committed_tokens=(\d+) matching=\[([0-9 ]*)\]$")
_STATE = re.compile(r"state \[([0-9 ]*)\] freq=(\d+) fail=\[([0-9 ]*)\] lru=(\d+)$")


def _path(text: str) -> Path:
    return tuple(int(t) for t in text.split())


def parse_dump(text: str) -> dict:
    """``dump()`` as a dict: ``matching`` (path), ``open_windows`` (list of lengths),
    ``nodes`` (int), ``committed_tokens`` (int) and ``states``: path -> (freq, fail, lru)."""
    lines = text.splitlines()
    head = _HEAD.match(lines[1])
    assert head, lines[1]
    out = {
        "nodes": int(head.group(1)),
        "committed_tokens": int(head.group(2)),
        "matching": _path(head.group(3)),
        "open_windows": [int(i) for i in lines[2].split("=", 1)[1].strip("[]").split()],
        "states": {},
    }
    assert lines[3] == "state [] root", lines[3]
    for line in lines[4:]:
        m = _STATE.match(line)
        assert m, line
        out["states"][_path(m.group(1))] = (int(m.group(2)), _path(m.group(3)), int(m.group(4)))
    return out


def eager_failure_links(paths: Sequence[Path]) -> Dict[Path, Path]:
    """The textbook eager Aho-Corasick build over the trie of ``paths`` (a prefix-closed
    set of non-empty token tuples): breadth-first, fail(p + t) = goto(fail(p), t)."""
    present = set(paths)
    children: Dict[Path, List[int]] = {(): []}
    for p in paths:
        children.setdefault(p, [])
        children.setdefault(p[:-1], []).append(p[-1])
    fail: Dict[Path, Path] = {}
    queue: deque = deque()
    for t in children[()]:
        fail[(t,)] = ()
        queue.append((t,))
    while queue:
        p = queue.popleft()
        for t in children[p]:
            q = fail[p]
            while q + (t,) not in present and q != ():
                q = fail[q]
            fail[p + (t,)] = q + (t,) if q + (t,) in present else ()
            queue.append(p + (t,))
    return fail


def count_occurrences(context: Sequence[int], path: Path) -> int:
    """How many times ``path`` occurs as a contiguous run of ``context``."""
    k = len(path)
    return sum(1 for i in range(len(context) - k + 1) if tuple(context[i : i + k]) == path)
