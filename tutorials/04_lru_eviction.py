"""Tutorial 4: LRU eviction.

**What you will learn**

* why the trie has a fixed capacity (`max_nodes`) and what happens when it is full: the
  least recently used *leaf* is recycled;
* how to read the recency order (the `lru=` rank in `dump()`, 0 = most recent);
* the invariant "a parent is never less recent than its children", which makes the least
  recently used node a leaf, so eviction is O(1) and never orphans a subtree;
* what eviction costs: forgotten counts, and nothing else; memory stays flat.

Run it with `python tutorials/04_lru_eviction.py` (a few seconds; no model needed).
"""

# --8<-- [start:small]
import re

import numpy as np

from racer_ref.reference import Automaton

LETTERS = "abcdefgh"
STATE = re.compile(r"state \[([\d ]*)\] freq=(\d+) fail=\[([\d ]*)\] lru=(\d+)")


def show(ids):
    return "".join(LETTERS[i] for i in ids) or "∅"


def nodes(automaton):
    """{string: (freq, lru rank)} for every node, from dump() (strings are tuples of ids)."""
    out = {}
    for m in map(STATE.match, automaton.dump().splitlines()):
        if m:
            out[tuple(int(t) for t in m.group(1).split())] = (int(m.group(2)), int(m.group(4)))
    return out


# Room for 6 nodes, windows of up to 3 tokens. We commit one token at a time and print the
# nodes from the most recent (rank 0) to the least recent, and what got evicted.
automaton = Automaton(max_nodes=6, ngram=3)
print("── 1. A 6-node trie, one commit at a time (nodes most recent first)")
before = {}
for letter in "abcabdd":
    automaton.extend([LETTERS.index(letter)])
    after = nodes(automaton)
    by_recency = sorted(after, key=lambda s: after[s][1])
    evicted = sorted(show(s) for s in before if s not in after)
    print(f"  commit {letter}: {' '.join(show(s) for s in by_recency):<22} "
          f"evicted: {', '.join(evicted) or '-'}")
    assert len(automaton) <= 6
    before = after
# --8<-- [end:small]

# --8<-- [start:invariant]
# Each touch of a node is followed by touches of its parent, grandparent, ... (bottom-up),
# so a parent always ends up more recent than its children: rank(parent) < rank(child).
# Then the least recent node has no child at all (a child would be even less recent), and
# eviction can take the tail of the recency list without searching: O(1).
def check_invariant(automaton):
    info = nodes(automaton)
    for s, (_, rank) in info.items():
        if len(s) > 1:
            assert info[s[:-1]][1] < rank, f"parent {show(s[:-1])} less recent than {show(s)}"
    tail = max(info, key=lambda s: info[s][1])
    assert not any(len(s) == len(tail) + 1 and s[:-1] == tail for s in info), "tail is not a leaf"
    assert len(automaton) <= automaton.stats()["max_nodes"]


rng = np.random.default_rng(0)
stream = rng.integers(0, 4, size=2_000).tolist()
print("\n── 2. The invariant on 2,000 random tokens of 4 letters")
for max_nodes, ngram in ((10, 3), (30, 5), (100, 10)):
    automaton = Automaton(max_nodes=max_nodes, ngram=ngram)
    for t in stream:
        automaton.extend([t])
        check_invariant(automaton)
    stats = automaton.stats()
    print(f"  max_nodes = {max_nodes:3}, ngram = {ngram:2}: invariant held after every commit; "
          f"{stats['evictions']:5} evictions, {len(automaton)} nodes")
# --8<-- [end:invariant]

# --8<-- [start:counts]
# What eviction forgets: the count of a recycled string restarts when it is re-created.
# Brute force counts every occurrence; the automaton only those since the last eviction.
automaton = Automaton(max_nodes=30, ngram=5)
automaton.extend(stream)
info = nodes(automaton)
text = show(stream)
print("\n── 3. Counts after eviction (max_nodes = 30): automaton vs brute force")
for s in sorted(info, key=lambda s: (-info[s][0], s))[:5]:
    occurrences = sum(1 for i in range(len(text)) if text.startswith(show(s), i))
    print(f"  {show(s):<5} freq = {info[s][0]:4}   occurrences in the whole stream = {occurrences}")
    assert info[s][0] <= occurrences
# --8<-- [end:counts]

# --8<-- [start:flat]
# Memory: once full, the trie stays at max_nodes; new nodes reuse evicted slots.
automaton = Automaton(max_nodes=1_000, ngram=10)
print("\n── 4. Size over a 20,000-token stream (max_nodes = 1,000)")
stream = rng.integers(0, 50, size=20_000).tolist()
for start in range(0, 20_000, 5_000):
    automaton.extend(stream[start:start + 5_000])
    stats = automaton.stats()
    print(f"  after {start + 5_000:6} tokens: {len(automaton):5} nodes, "
          f"{stats['inserts']:6} created, {stats['evictions']:6} evicted")
assert len(automaton) == 1_000
# --8<-- [end:flat]
