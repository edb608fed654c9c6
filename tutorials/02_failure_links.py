"""Tutorial 2: failure links, the matching state and borders.

**What you will learn**

* what a failure link is: the longest proper suffix of a node's string that is also in the
  trie, and how to find it by brute force;
* the Aho-Corasick recurrence that computes it from the parent's link, and that it gives the
  same links as brute force;
* the matching state (the longest suffix of the context that is a trie path) and its
  failure chain: every suffix of the context present in the trie, longest first;
* how the chain gives the borders of a root, and how the retrieval tree grows below them.

Run it with `python tutorials/02_failure_links.py` (a second; no model needed).
"""

# --8<-- [start:setup]
import re

from racer_ref.reference import Automaton

# Letters stand for token ids (a=0, b=1, ...) so the strings stay short. The context and
# ngram = 3 are those of the explanation page "The Aho-Corasick automaton".
LETTERS = "abcdefgh"
context = [LETTERS.index(c) for c in "abcabdab"]


def show(ids):
    """Token ids -> letters, e.g. [0, 1] -> 'ab'; the empty string (the root) -> '∅'."""
    return "".join(LETTERS[i] for i in ids) or "∅"


automaton = Automaton(max_nodes=1000, ngram=3)
automaton.extend(context)

# dump() gives, per node, its string and its failure link (both as token-id lists).
STATE = re.compile(r"state \[([\d ]*)\] freq=(\d+) fail=\[([\d ]*)\]")


def parse(dump):
    """(strings -> fail, matching state) from a dump: strings are tuples of token ids."""
    ids = lambda s: tuple(int(t) for t in s.split())  # noqa: E731
    fail = {ids(m.group(1)): ids(m.group(3)) for m in map(STATE.match, dump.splitlines()) if m}
    matching = ids(re.search(r"matching=\[([\d ]*)\]", dump).group(1))
    return fail, matching


fail, matching = parse(automaton.dump())
print("── 1. The trie of 'abcabdab' (ngram = 3) and each node's failure link")
for s, f in fail.items():
    print(f"  {'  ' * (len(s) - 1)}{show(s):<4} fail -> {show(f)}")
# --8<-- [end:setup]

# --8<-- [start:brute]
# Definition: fail(s) = the longest PROPER suffix of s that is itself a node (the root, the
# empty string, if none is). Brute force tries the suffixes from longest to shortest.
def fail_brute_force(s, nodes):
    for k in range(1, len(s)):
        if s[k:] in nodes:
            return s[k:]
    return ()


# With the open windows of tutorial 1, every suffix of a node's string is inserted with it,
# so here fail(s) is simply "drop the first token". LRU eviction can remove a suffix while a
# longer string survives; then the link jumps further (tutorial 3 shows it happen).
nodes = set(fail)
brute = {s: fail_brute_force(s, nodes) for s in nodes}
print("\n── 2. Brute force agrees with the automaton on all", len(nodes), "links:", brute == fail)
assert brute == fail
# --8<-- [end:brute]


# --8<-- [start:recurrence]
# Aho-Corasick computes the same links without trying every suffix. For s = parent + t:
# walk the parent's failure chain until a state has a child t; that child is fail(s).
# It works because a suffix of s, minus its last token t, is a suffix of the parent.
def fail_recurrence(s, nodes, fail_of):
    if len(s) == 1:
        return ()  # a one-token string has only the empty proper suffix
    parent, t = s[:-1], s[-1]
    f = fail_of(parent)
    while f + (t,) not in nodes and f != ():
        f = fail_of(f)
    return f + (t,) if f + (t,) in nodes else ()


memo = {}


def fail_of(s):
    """fail(s) by the recurrence, each link computed once (this memo is a 'lazy' cache)."""
    if s not in memo:
        memo[s] = fail_recurrence(s, nodes, fail_of)
    return memo[s]


print("\n── 3. The recurrence agrees too:", all(fail_of(s) == fail[s] for s in nodes))
assert all(fail_of(s) == fail[s] for s in nodes)
# --8<-- [end:recurrence]

# --8<-- [start:chain]
# The matching state is the longest suffix of the context that is a trie path. Following
# failure links from it lists every suffix of the context present in the trie, longest
# first, down to the root.
chain = [matching]
while chain[-1] != ():
    chain.append(fail[chain[-1]])
print("\n── 4. Matching state and its failure chain")
print("  context:", show(context), "  matching state:", show(matching))
print("  chain:  ", " -> ".join(show(s) for s in chain))
assert [show(s) for s in chain] == ["dab", "ab", "b", "∅"]
# --8<-- [end:chain]

# --8<-- [start:borders]
# The model now predicts the root 'c'. A border is a state on the chain with a child for
# the root, at depth >= 2 (min_border_depth): "a suffix of the context followed by the
# root occurred before". The retrieval tree is what grows below the borders.
root = LETTERS.index("c")
print("\n── 5. Borders for the root 'c'")
borders = []
for s in chain:
    child = s + (root,)
    if child in nodes and len(child) >= 2:
        borders.append(child)
        below = sorted(show(n[len(child):]) for n in nodes if n[:len(child)] == child and n != child)
        print(f"  {show(s):>3} + c = {show(child):<4} is a border; below it: {below or 'nothing (depth = ngram)'}")
    elif child in nodes:
        print(f"  {show(s):>3} + c = {show(child):<4} has depth 1: not a border")
    else:
        print(f"  {show(s):>3} + c = {show(child):<4} is not in the trie")
paths = automaton.retrieve(root, 8)
print("  retrieve('c', capacity=8) ->", [show(p) for p in paths])
assert [show(b) for b in borders] == ["abc", "bc"] and [show(p) for p in paths] == ["ca"]
# --8<-- [end:borders]
