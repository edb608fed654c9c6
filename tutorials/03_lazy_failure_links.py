"""Tutorial 3: lazy failure links.

**What you will learn**

* eviction in brief: the trie has room for `max_nodes` nodes, and when it is full the least
  recently used leaf makes room (tutorial 4 shows how that is done in O(1));
* why RACER's trie needs failure links that follow a trie changing at every token;
* the textbook *eager* Aho-Corasick build (breadth-first over the whole trie), and why
  rebuilding it at every step is too slow;
* how a failure link goes stale: a node is created or evicted that changes "the longest
  suffix present";
* the *epoch cache*: one counter per token value, bumped when a node ending with that token
  is created or evicted; a cached link is valid while its stamp equals its token's counter;
* that racer-ref's *lazy* links (computed on demand, cached, invalidated per token value)
  always equal an eager build, while computing only a few links per step.

Run it with `python tutorials/03_lazy_failure_links.py` (a few seconds; no model needed).
"""

# --8<-- [start:evict]
import re
from collections import deque

import numpy as np

from racer_ref.reference import Automaton

LETTERS = "abcd"
STATE = re.compile(r"state \[([\d ]*)\] freq=(\d+) fail=\[([\d ]*)\]")


def show(ids):
    return "".join(LETTERS[i] for i in ids) or "∅"


def links(automaton):
    """{string: fail(string)} for every node, from dump() (strings are tuples of ids)."""
    ids = lambda s: tuple(int(t) for t in s.split())  # noqa: E731
    return {ids(m.group(1)): ids(m.group(3)) for m in map(STATE.match, automaton.dump().splitlines()) if m}


# Eviction, in brief. The trie has room for max_nodes nodes. Every commit *touches* the
# nodes of its open windows (tutorial 1): they become the most recently used. When a new
# node is needed and the trie is full, the least recently used node is recycled, and it is
# always a leaf: a node is touched right before its parent, so a parent is never less
# recent than its children (tutorial 4 keeps the recency order in a linked list, O(1)).
automaton = Automaton(max_nodes=5, ngram=3)
print("── 1. Eviction: a 5-node trie (ngram = 3), one commit at a time")
before = set()
for letter in "abcabd":
    automaton.extend([LETTERS.index(letter)])
    after = set(links(automaton))
    created = sorted(show(s) for s in after - before)
    evicted = sorted(show(s) for s in before - after)
    print(f"  commit {letter}: nodes {' '.join(sorted(show(s) for s in after)):<18} "
          f"created {', '.join(created) or '-':<10} evicted {', '.join(evicted) or '-'}")
    assert len(automaton) <= 5
    before = after
# --8<-- [end:evict]


# --8<-- [start:eager]
# The textbook build: visit the trie breadth-first, so that a node's parent (and every
# shorter string) already has its link; then apply the recurrence of tutorial 2. It touches
# every node: O(len(trie)) per rebuild.
def eager_failure_links(nodes):
    children = {}
    for s in nodes:
        children.setdefault(s[:-1], []).append(s)
    fail = {}
    queue = deque(children.get((), []))
    while queue:
        s = queue.popleft()
        if len(s) == 1:
            fail[s] = ()
        else:
            f = fail[s[:-1]]
            while f + s[-1:] not in nodes and f != ():
                f = fail[f]
            fail[s] = f + s[-1:] if f + s[-1:] in nodes else ()
        queue.extend(children.get(s, []))
    return fail
# --8<-- [end:eager]


# --8<-- [start:stale]
# A trie barely larger than one window (max_nodes = 6, ngram = 5) over a random stream of
# two letters: eviction happens at almost every token. After every commit we compare each
# surviving node's failure link with its link one step earlier, and explain the changes.
rng = np.random.default_rng(0)
stream = rng.integers(0, 2, size=200).tolist()
automaton = Automaton(max_nodes=6, ngram=5)
before = links(automaton)
events = []
for step, t in enumerate(stream):
    automaton.extend([t])
    after = links(automaton)
    for s, f in after.items():
        if s in before and before[s] != f:
            # The old target vanished (evicted), or a longer suffix appeared (created).
            gone = before[s] != () and before[s] not in after
            why = f"{show(before[s])} was evicted" if gone else f"{show(f)} was created"
            events.append(f"  step {step:3}: fail({show(s)}) {show(before[s])} -> {show(f)}  ({why})")
    # The lazy links always equal a fresh eager build over the current trie.
    assert after == eager_failure_links(set(after)), f"stale failure link at step {step}"
    before = after
print(f"\n── 2. Failure links change as the trie changes (first 6 of {len(events)} changes)")
print("\n".join(events[:6]))
print(f"  after each of the {len(stream)} commits, lazy links == eager build: True")
# --8<-- [end:stale]

# --8<-- [start:epoch]
# The epoch cache. fail(s) depends only on which proper suffixes of s are in the trie, and
# every non-empty suffix of s ends with s's last token. So a link can only go stale when a
# node ending with that token is created or evicted. One counter (an epoch) per token value,
# bumped by each such change; a cached link stays valid while its stamp equals the current
# epoch of its token. (The automaton shares 1,024 counters, token t using t % 1024: sharing
# only costs extra recomputation, never a wrong link.)
class EpochCache:
    """Lazy failure links: computed on demand by the recurrence, cached with an epoch."""

    def __init__(self):
        self.epochs = {}  # token -> how many nodes ending with it were created or evicted
        self.cache = {}   # string -> (its link, the epoch of its last token back then)
        self.hits = self.computed = 0

    def changed(self, token):
        """A node ending with `token` was created or evicted."""
        self.epochs[token] = self.epochs.get(token, 0) + 1

    def fail(self, s, nodes):
        epoch = self.epochs.get(s[-1], 0)
        if s in self.cache and self.cache[s][1] == epoch:
            self.hits += 1
            return self.cache[s][0]
        self.computed += 1
        link = ()
        if len(s) > 1:  # the recurrence of tutorial 2, asking the cache for shorter links
            f = self.fail(s[:-1], nodes)
            while f + s[-1:] not in nodes and f != ():
                f = self.fail(f, nodes)
            link = f + s[-1:] if f + s[-1:] in nodes else ()
        self.cache[s] = (link, epoch)
        return link


# The same 200 commits as above. After each, the created and evicted nodes bump their
# token's epoch; then we ask for every link and compare with the eager build.
automaton, lazy, nodes = Automaton(max_nodes=6, ngram=5), EpochCache(), set()
for t in stream:
    automaton.extend([t])
    now = set(links(automaton))
    for s in now ^ nodes:  # created or evicted by this commit
        lazy.changed(s[-1])
    nodes = now
    assert {s: lazy.fail(s, nodes) for s in nodes} == eager_failure_links(nodes)
print("\n── 3. The epoch cache, on the same 200 commits (every link asked after each)")
print(f"  links computed: {lazy.computed}, served from the cache: {lazy.hits}; "
      f"all equal the eager build: True")
# --8<-- [end:epoch]

# --8<-- [start:often]
# How often is a link anything but "drop the first token" (tutorial 2)? The open windows
# insert every suffix of a string with it and touch it after it, so the LRU evicts longer
# strings first. Only a trie too small for one step's windows (ngram = 10 touches up to
# 1 + 2 + ... + 10 = 55 nodes per token) evicts a suffix that a longer string still needs.
print("\n── 4. Links that are not 'drop the first token' (ngram = 10, 1,000 tokens of 3 letters)")
stream = rng.integers(0, 3, size=1_000).tolist()
for max_nodes in (20, 100):
    automaton = Automaton(max_nodes=max_nodes, ngram=10)
    jumps = total = 0
    for t in stream:
        automaton.extend([t])
        current = links(automaton)
        jumps += sum(1 for s, f in current.items() if f != s[1:])
        total += len(current)
    assert current == eager_failure_links(set(current))
    print(f"  max_nodes = {max_nodes:3}: {jumps:6} of {total} links (summed over all steps)")
# --8<-- [end:often]

# --8<-- [start:work]
# How much work does each approach do? A decoding-like loop on a repetitive stream: each
# step retrieves for the next token (which walks one failure chain), then commits it.
# Eager: rebuild every link each step (visit all nodes). Lazy: compute a link only when
# retrieval asks for it and the cached one is stale.
phrases = [rng.integers(0, 200, size=int(rng.integers(5, 30))).tolist() for _ in range(40)]
stream = [t for _ in range(300) for t in phrases[int(rng.integers(0, len(phrases)))]][:20_000]
automaton = Automaton(max_nodes=2_000, ngram=10)
eager_visits = 0
for t in stream:
    automaton.retrieve(t, 64)
    eager_visits += len(automaton)  # an eager rebuild would visit every node once
    automaton.extend([t])
stats = automaton.stats()
computed = stats["fail_misses"]
print("\n── 5. Work per decoding step,", len(stream), "steps, max_nodes = 2,000, ngram = 10")
print(f"  eager rebuild each step: {eager_visits / len(stream):8.1f} links computed per step")
print(f"  lazy, cached:            {computed / len(stream):8.1f} links computed per step "
      f"({stats['fail_hits'] / len(stream):.1f} cache hits)")
print(f"  evictions: {stats['evictions']}, nodes now: {len(automaton)}")
assert computed * 20 < eager_visits
# --8<-- [end:work]
