"""Tutorial 6: one draft tree from two sources, its attention mask and position ids.

**What you will learn**

* how RACER merges the retrieval tree (automaton) and the logits tree (copy-logit table)
  into one draft tree of at most `capacity` nodes, where shared nodes cost nothing;
* the flat arrays the target model consumes: `tokens`, `parents`, `depths`, `sources`,
  `retrieve_indices`, and the tree attention mask;
* why position ids are `L + depth`, and what each node may attend to;
* how greedy acceptance walks the tree, and that the Rust core builds the same tree.

Run it with `python tutorials/06_draft_tree.py` (a second; no model needed).
"""

# --8<-- [start:context]
import numpy as np

import racer_ref
from racer_ref.reference import Automaton

# A few lines of code, one word per token. The model has just predicted "return" (the
# root); everything before it is committed and sits in the KV cache: L tokens.
text = ("def add ( a , b ) : return a + b ; "
        "def sub ( a , b ) : return a - b ; "
        "def diff ( a , b ) : return")
truth = "a - b ; def".split()  # what the target model will in fact write next
words = text.split()
vocab = {w: i for i, w in enumerate(dict.fromkeys(words + truth))}
id_to_word = {i: w for w, i in vocab.items()}
tokens = [vocab[w] for w in words]
committed, root = tokens[:-1], tokens[-1]
L = len(committed)


def show(ids):
    return " ".join(id_to_word[int(i)] for i in ids)


# A stand-in for the target's top-k at each position (tutorial 7 uses a real model): the
# word that really came next, then other words seen after the same word, then frequent ones.
K = 3
follow = {}
for a, b in zip(tokens, tokens[1:]):
    follow.setdefault(a, []).append(b)
frequent = sorted(set(tokens), key=lambda t: (-tokens.count(t), t))
topk = []
for i, t in enumerate(committed):
    row = [tokens[i + 1]]
    for c in follow[t] + frequent:
        if c not in row:
            row.append(c)
    topk.append(row[:K])
print("── 1. Context")
print(f"  committed (L = {L}): {show(committed)}")
print(f"  root: {id_to_word[root]!r}    the target will continue with: {' '.join(truth)!r}")
# --8<-- [end:context]

# --8<-- [start:sources]
# The two sources, separately. ngram = 4 keeps the retrieval paths short (default 10).
automaton = Automaton(ngram=4)
automaton.extend(committed)
print("\n── 2. The two sources")
print("  retrieval paths:", [show(p) for p in automaton.retrieve(root, 16)])
drafter = racer_ref.Drafter(method="racer", vocab_size=len(vocab), capacity=16, breadth=K,
                            ngram=4, backend="python", tree="paper")  # the paper's merge
drafter.observe(committed, np.array(topk))  # the forward passes over the context (step 8)
drafter.commit(committed)                   # the committed tokens (step 9)
for w in ("return", "a", "-", "b"):
    print(f"  copy-logit row {w!r:9}: {show(drafter.table_row(vocab[w]))}")
# --8<-- [end:sources]


# --8<-- [start:merge]
# One call builds the merged tree: retrieval paths first, then the logits tree grows
# breadth-first (Eq. 3) into the remaining capacity; a (parent, token) pair that already
# exists costs nothing and becomes "both".
SOURCE_NAMES = {0: "root", 1: "retrieval", 2: "logits", 3: "both"}  # tree.sources codes


def draw(tree):
    children = {i: [] for i in range(len(tree))}
    for i in range(1, len(tree)):
        children[int(tree.parents[i])].append(i)

    def walk(i, indent):
        print(f"  {indent}{i}: {id_to_word[int(tree.tokens[i])]}  [{SOURCE_NAMES[int(tree.sources[i])]}]")
        for c in children[i]:
            walk(c, indent + "    ")

    walk(0, "")


tree = drafter.draft(root)
print(f"\n── 3. The merged draft tree ({len(tree)} nodes, capacity 16)")
draw(tree)
counts = {name: int((tree.sources == code).sum()) for code, name in SOURCE_NAMES.items() if code}
print("  nodes by source:", counts)
assert len(tree) == 16
# --8<-- [end:merge]

# --8<-- [start:arrays]
# The flat arrays, breadth-first, root first. Position ids are L + depth: siblings share a
# position, as each would have if its path were fed on its own.
print("\n── 4. Flattened breadth-first")
print("  node  token   parent  depth  position id  source")
for i in range(len(tree)):
    print(f"  {i:4}  {id_to_word[int(tree.tokens[i])]:6}  {int(tree.parents[i]):6}  "
          f"{int(tree.depths[i]):5}  {L + int(tree.depths[i]):11}  {SOURCE_NAMES[int(tree.sources[i])]}")
# Parents come before children, and depth(child) = depth(parent) + 1.
assert all(tree.parents[i] < i and tree.depths[i] == tree.depths[tree.parents[i]] + 1
           for i in range(1, len(tree)))
# --8<-- [end:arrays]

# --8<-- [start:mask]
# The tree attention mask: node i sees node j iff j is i or an ancestor of i (and every node
# sees the whole cached prefix, not drawn). Rebuilt here from `parents` alone.
print("\n── 5. Tree attention mask (x: may attend)")
n = len(tree)
print("             " + "".join(f"{j:3}" for j in range(n)))
for i in range(n):
    print(f"  {i:2} {id_to_word[int(tree.tokens[i])]:>6}  " + "".join(
        "  x" if tree.attention_mask[i, j] else "  ." for j in range(n)))
expected = np.zeros((n, n), dtype=bool)
for i in range(n):
    j = i
    while j >= 0:  # walk up: i, its parent, ..., the root
        expected[i, j] = True
        j = int(tree.parents[j])
assert (tree.attention_mask == expected).all()
print("  mask == 'ancestor or self' rebuilt from parents:", True)
# --8<-- [end:mask]

# --8<-- [start:paths]
# retrieve_indices: one row per root-to-leaf path (node indices, padded with -1).
print("\n── 6. retrieve_indices (one row per leaf)")
for row in tree.retrieve_indices:
    nodes = [int(i) for i in row if i >= 0]
    print(f"  {str(row.tolist()):28} {show(tree.tokens[nodes])}")
# --8<-- [end:paths]

# --8<-- [start:accept]
# Greedy acceptance, with the target's real continuation standing in for its argmax at
# each node: from the root, follow the child carrying the predicted token, stop otherwise.
node, accepted = 0, [0]
for predicted in truth:
    match = [c for c in range(n) if tree.parents[c] == node and id_to_word[int(tree.tokens[c])] == predicted]
    if not match:
        break
    node = match[0]
    accepted.append(node)
a = len(accepted) - 1
print("\n── 7. Acceptance")
print(f"  accepted nodes {accepted}: {show(tree.tokens[accepted])!r}   accepted length a = {a}")
print(f"  emitted this step: {a + 1} tokens; the next root is {truth[a]!r}, predicted at node {accepted[-1]}")
# --8<-- [end:accept]

# --8<-- [start:rust]
try:  # the Rust core: `make setup` builds it in a clone, the course wheel ships it (docs: Course kit)
    from racer_ref import _core
except ImportError:  # a source checkout with only numpy: everything above ran on the twin
    _core = None
if _core is None:
    print("\n── 8. The Rust core builds the same arrays: skipped")
    print("  Rust core not built (racer_ref._core missing): skipping the side-by-side with the "
          "Rust drafter; `make setup` builds it, or install the course wheel")
else:
    fast = racer_ref.Drafter(method="racer", vocab_size=len(vocab), capacity=16, breadth=K,
                             ngram=4, backend="rust", tree="paper")
    fast.observe(committed, np.array(topk))
    fast.commit(committed)
    rust_tree = fast.draft(root)
    same = all(np.array_equal(getattr(tree, f), getattr(rust_tree, f))
               for f in ("tokens", "parents", "depths", "attention_mask", "retrieve_indices", "sources"))
    print("\n── 8. The Rust core builds the same arrays:", same)
    assert same
# --8<-- [end:rust]
