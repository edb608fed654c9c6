"""Tutorial 1: n-grams and the trie.

Why start here. Speculative decoding makes a model generate faster by guessing several next
tokens cheaply and checking all the guesses in one forward pass (see "Speculative decoding
from zero"). RACER's cheapest guesses come from the text itself: if the context was followed
by "sat on the" last time, that is a good guess for this time. To find such repeats at every
step in O(1) work, RACER keeps every short token sequence (n-gram) of the text in a trie
with its count. This tutorial builds that trie.

**What you will learn**

* what the n-grams of a context are, and how to count them by brute force;
* how RACER's automaton keeps every n-gram (length <= `ngram`) of the committed tokens in a
  trie with frequencies, updated in O(n) work per committed token (the *open windows*);
* how to read the automaton's canonical `dump()`, and check it against brute force;
* how `retrieve(root, capacity)` reads "what came next last time" off the trie;
* that the Rust core (`racer_ref.Automaton`) and the Python twin give the same automaton.

Run it with `python tutorials/01_ngrams_and_the_trie.py` (a second; no model needed).
"""

# --8<-- [start:tokens]
import re
from collections import Counter

import racer_ref
from racer_ref.reference import Automaton

# A language model sees token ids, not words. We make our own tiny tokenizer: one id per
# distinct word, in order of first appearance, so the ids are easy to follow.
text = "the cat sat on the mat . the cat ate the rat ."
words = text.split()
vocab = {}
for w in words:
    vocab.setdefault(w, len(vocab))
tokens = [vocab[w] for w in words]
id_to_word = {i: w for w, i in vocab.items()}


def show(ids):
    """Token ids -> the words they stand for, e.g. [0, 1] -> 'the cat'."""
    return " ".join(id_to_word[i] for i in ids)


print("── 1. Tokens")
print("text:  ", text)
print("tokens:", tokens)
# --8<-- [end:tokens]

# --8<-- [start:count]
# An n-gram is a run of n consecutive tokens. RACER keeps every n-gram of length 1..NGRAM
# of the context (NGRAM is 10 by default; 3 keeps this example small). Brute force: slide
# a window of every length over the tokens and count.
NGRAM = 3
counts = Counter(
    tuple(tokens[start:start + length])
    for length in range(1, NGRAM + 1)
    for start in range(len(tokens) - length + 1)
)
print("\n── 2. Counting n-grams by brute force")
print(f"{len(counts)} distinct n-grams of length 1..{NGRAM}; the repeated ones:")
for gram, count in sorted(counts.items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0])):
    if count > 1:
        print(f"  {count} x  {show(gram)}")
# --8<-- [end:count]

# --8<-- [start:trie]
# The automaton stores the same n-grams in a trie: one node per distinct n-gram, the child
# of the node of the n-gram without its last token. freq(node) counts occurrences.
# `extend` commits tokens; `dump()` is a canonical text of the whole automaton: one line
# per node, depth-first, with its frequency (and failure link and LRU rank, the subjects of
# tutorials 2-4). We parse the lines we need.
automaton = Automaton(max_nodes=1000, ngram=NGRAM)
automaton.extend(tokens)

STATE = re.compile(r"state \[([\d ]*)\] freq=(\d+)")


def trie_of(automaton):
    """{n-gram (tuple of ids): freq} for every node of the automaton, parsed from dump()."""
    nodes = {}
    for line in automaton.dump().splitlines():
        m = STATE.match(line)
        if m:
            nodes[tuple(int(t) for t in m.group(1).split())] = int(m.group(2))
    return nodes


trie = trie_of(automaton)
print("\n── 3. The trie (depth-first; each line: the node's n-gram and its frequency)")
for gram, freq in trie.items():  # dump() order: depth-first, children by token id
    print(f"  {'    ' * (len(gram) - 1)}{id_to_word[gram[-1]]:<5} {freq}")
print(f"len(automaton) = {len(automaton)} nodes (the root is not counted)")
# The trie holds exactly the brute-force n-grams, with the same counts.
assert trie == dict(counts), "the trie must hold exactly the counted n-grams"
print("trie == brute-force counts:", trie == dict(counts))
# --8<-- [end:trie]

# --8<-- [start:windows]
# Why is that cheap? After committing a token t, the n-grams that gained an occurrence are
# the ones *ending* at t: lengths 1..NGRAM. The automaton keeps the "open windows" (the
# nodes of the last 1, 2, ..., NGRAM-1 tokens) and extends each by one child for t. That is
# at most NGRAM steps per token, however long the text: O(1) per token.
print("\n── 4. One token at a time: the nodes each commit changes")
step = Automaton(max_nodes=1000, ngram=NGRAM)
for t in tokens[:8]:
    before = trie_of(step)
    step.extend([t])
    after = trie_of(step)
    # Every node whose frequency moved, shortest first; "new" marks a created node.
    changed = sorted((g for g in after if after[g] != before.get(g, 0)), key=len)
    described = [show(g) + (" (new)" if g not in before else "") for g in changed]
    print(f"  commit {id_to_word[t]!r:6} -> +1 on: {' | '.join(described)}")
    # At most NGRAM nodes change, and they are exactly the n-grams ending at this token.
    assert len(changed) <= NGRAM and all(g[-1] == t for g in changed)
# --8<-- [end:windows]

# --8<-- [start:retrieve]
# Retrieval: the model just predicted the root "cat". Which continuations did the context
# have after "... the cat"? retrieve(root, capacity) returns root-to-leaf paths of the
# retrieval tree (at most `capacity` nodes, root included), best first. Tutorial 2 shows how
# the automaton finds them with failure links. A deeper trie gives longer drafts, so we use
# ngram=5 here (RACER's default is 10).
context = tokens[:-2]  # "the cat sat on the mat . the cat ate the": the model just wrote "the"
automaton = Automaton(max_nodes=1000, ngram=5)
automaton.extend(context)
print("\n── 5. Retrieval")
print("context:", show(context))
for root_word in ("cat", "mat", "rat"):
    paths = automaton.retrieve(vocab[root_word], 8)
    print(f"  root {root_word!r:6} -> paths {[show(p) for p in paths]}")
# "the cat" occurred twice, followed by "sat on the" and "ate the": both are drafted.
# "the rat" never occurred: the root alone, nothing to draft.
assert [show(p) for p in automaton.retrieve(vocab["cat"], 8)] == ["cat sat on the", "cat ate the"]
assert automaton.retrieve(vocab["rat"], 8) == [[vocab["rat"]]]
# --8<-- [end:retrieve]

# --8<-- [start:rust]
# The Rust core has the same class, the same methods and the same results: the test suite
# compares the two dumps after every operation on random streams. Here, once:
try:  # the Rust core: `make setup` builds it in a clone, the course wheel ships it (docs: Course kit)
    from racer_ref import _core
except ImportError:  # a source checkout with only numpy: everything above ran on the twin
    _core = None
print("\n── 6. The same automaton in Rust")
if _core is None:
    print("  Rust core not built (racer_ref._core missing): skipping the side-by-side with the "
          "Rust automaton; `make setup` builds it, or install the course wheel")
else:
    python_twin = Automaton(max_nodes=1000, ngram=NGRAM)
    rust_core = racer_ref.Automaton(max_nodes=1000, ngram=NGRAM)
    python_twin.extend(tokens)
    rust_core.extend(tokens)
    print("racer_ref.Automaton(...).dump() == racer_ref.reference.Automaton(...).dump():",
          rust_core.dump() == python_twin.dump())
    assert rust_core.dump() == python_twin.dump()
# --8<-- [end:rust]
