"""Tutorial 5: the copy-logit table and the logits tree.

**What you will learn**

* what the copy-logit table stores: for every token, the top-k next tokens the target
  predicted right after its most recent occurrence, and how a forward pass updates it;
* the breadth rule of the paper's Eq. 3, and the tree shapes it gives (1/8/19/24/12 for
  k = 8 and capacity 64);
* how a drafter grows a logits tree from the table, breadth-first, until the capacity is used;
* copy-logit vs last-logit (the ablation that expands the root from the logits that
  produced it);
* that the Rust core builds exactly the same trees.

Run it with `python tutorials/05_copy_logit_and_logits_tree.py` (a second; no model needed).
"""

# --8<-- [start:table]
import numpy as np

import racer_ref
from racer_ref.reference.copy_logit import CopyLogitTable
from racer_ref.reference.logits_tree import child_breadth

# A forward pass fed the tokens below, and for each position the target's logits ranked
# some next tokens highest (we write its top-3 by hand; a real model gives them with
# torch.topk). The table keeps, per token id, the top-k of the most recent position where
# that token was fed.
words = "the cat sat on the mat and a dog ate was is down in top".split()
vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
id_to_word = {i: w for w, i in vocab.items()}
fed = ["the", "cat", "sat", "on", "the"]
top3 = [["cat", "dog", "mat"],   # after "the" (1st time)
        ["sat", "was", "is"],    # after "cat"
        ["on", "down", "in"],    # after "sat"
        ["the", "a", "top"],     # after "on"
        ["mat", "cat", "dog"]]   # after "the" (2nd time): overwrites the 1st row

table = CopyLogitTable(vocab_size=len(vocab), k=3)
table.observe([vocab[w] for w in fed], [[vocab[w] for w in row] for row in top3])
print("── 1. The copy-logit table after one forward pass (k = 3)")
for w in ("the", "cat", "sat", "on", "dog"):
    row = [id_to_word[i] for i in table.row(vocab[w])]
    print(f"  table[{w!r:6}] = {row if row else '[]  (never fed: an empty row drafts nothing)'}")
assert [id_to_word[i] for i in table.row(vocab["the"])] == ["mat", "cat", "dog"]  # last write wins
# --8<-- [end:table]

# --8<-- [start:eq3]
# Eq. 3: a node with breadth b takes the first b ids of its row as children; child j
# (0-based) gets breadth max(1, floor(b / 2**(j + [parent is not root]))). The root has
# breadth k.
print("\n── 2. Eq. 3: the breadth of each child, k = 8")
print("  children of the root (b = 8):   ", [child_breadth(8, j, True) for j in range(8)])
for b in (8, 4, 2, 1):
    print(f"  children of an inner node b = {b}:", [child_breadth(b, j, False) for j in range(b)])
# --8<-- [end:eq3]


# --8<-- [start:shape]
# The shape of the logits tree when every token is distinct: we fill the table so that row
# v holds the ids k*v+1 .. k*v+k, so no two nodes share a token and nothing merges. The
# drafter grows the tree breadth-first from the root until the capacity is used.
def logits_tree_shape(k, capacity, backend="python"):
    rows = 5_000  # enough rows for every node these small trees expand
    drafter = racer_ref.Drafter(method="logits", vocab_size=k * rows + k + 1,
                                capacity=capacity, breadth=k, backend=backend,
                                tree="paper")  # the paper's Eq. 3 tree (see expected-tree.md)
    ids = np.arange(rows)
    drafter.observe(ids, k * ids[:, None] + 1 + np.arange(k)[None, :])
    tree = drafter.draft(0)
    return np.bincount(tree.depths).tolist()


print("\n── 3. Logits tree shapes (nodes per depth, all tokens distinct)")
for k, capacity in ((8, 64), (4, 21), (8, 32), (3, 20)):
    shape = logits_tree_shape(k, capacity)
    print(f"  k = {k}, capacity = {capacity:2}: {' / '.join(map(str, shape))}")
    assert sum(shape) == capacity  # distinct tokens: the capacity is always filled
assert logits_tree_shape(8, 64) == [1, 8, 19, 24, 12]
assert logits_tree_shape(4, 21) == [1, 4, 8, 8]
# --8<-- [end:shape]


# --8<-- [start:small]
# A real logits tree from the table of section 1 (k = 3, capacity 8), root "the".
def draw(tree, name=lambda t: id_to_word[t]):
    """The tree as indented text: index, token and source of each node."""
    sources = {0: "root", 1: "retrieval", 2: "logits", 3: "both"}
    children = {i: [] for i in range(len(tree))}
    for i in range(1, len(tree)):
        children[int(tree.parents[i])].append(i)

    def walk(i, indent):
        print(f"  {indent}{i}: {name(int(tree.tokens[i]))}  [{sources[int(tree.sources[i])]}]")
        for c in children[i]:
            walk(c, indent + "    ")

    walk(0, "")


drafter = racer_ref.Drafter(method="logits", vocab_size=len(vocab), capacity=8, breadth=3,
                            backend="python", tree="paper")
drafter.observe([vocab[w] for w in fed], [[vocab[w] for w in row] for row in top3])
tree = drafter.draft(vocab["the"])
print("\n── 4. The logits tree for the root 'the' (k = 3, capacity 8)")
draw(tree)
# "the" has breadth 3: its children are mat (b = 3), cat (b = 1), dog (b = 1). mat and dog
# were never fed (empty rows); cat (b = 1) gets its first id, sat; and so on down the chain.
# A path may repeat a token ("the" again at node 6): the tree is a trie of paths.
assert [id_to_word[int(t)] for t in tree.tokens] == ["the", "mat", "cat", "dog", "sat", "on", "the", "mat"]
# --8<-- [end:small]

# --8<-- [start:last]
# Last-logit (method "logits-last"): the root's children come from the top-k of the logits
# that PRODUCED the root (passed as last_topk), not from the root's own table row.
last = racer_ref.Drafter(method="logits-last", vocab_size=len(vocab), capacity=8, breadth=3,
                         backend="python", tree="paper")
last.observe([vocab[w] for w in fed], [[vocab[w] for w in row] for row in top3])
# The logits that produced the root "the" (after "on") ranked: the, a, top.
tree = last.draft(vocab["the"], last_topk=[vocab[w] for w in ("the", "a", "top")])
print("\n── 5. Last-logit: the root's children from the logits that produced it")
draw(tree)
# Those logits were predicting the root's own position, so their best id is the root itself:
# last-logit drafts "the the ...", alternatives to the root rather than continuations of it.
assert id_to_word[int(tree.tokens[1])] == "the"
# --8<-- [end:last]

# --8<-- [start:rust]
try:  # the Rust core: `make setup` builds it in a clone, the course wheel ships it (docs: Course kit)
    from racer_ref import _core
except ImportError:  # a source checkout with only numpy: everything above ran on the twin
    _core = None
print("\n── 6. The Rust core builds the same trees")
if _core is None:
    print("  Rust core not built (racer_ref._core missing): skipping the side-by-side with the "
          "Rust drafter; `make setup` builds it, or install the course wheel")
else:
    same = all(
        logits_tree_shape(k, c, backend="rust") == logits_tree_shape(k, c, backend="python")
        for k, c in ((8, 64), (4, 21), (3, 20))
    )
    print("  Rust shapes == Python shapes:", same)
    assert same
# --8<-- [end:rust]
