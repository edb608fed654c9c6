"""The logits tree, written to be read (twin of ``rust/src/logits_tree.rs``).

Where it comes from: docs/explanation/spec.md step 3, the paper's Eq. 3.

The retrieval tree can only propose continuations that already occurred in the context.
The logits tree fills the rest of the draft tree from the copy-logit table: starting at the
root we keep asking "what did the target predict after this token last time?".

Not every node gets the same number of children. A node has a *breadth* ``b``; its
children are the first ``b`` ids of its table row, and child ``j`` (rank j, 0-based) gets

    breadth(child j) = max(1, floor(b / 2 ** (j + [parent is not root])))      (Eq. 3)

with the root's breadth equal to ``k``. Better-ranked children get more breadth, so the
tree is bushy where the target was confident and thin elsewhere. With k = 4::

    root (b=4)
    |-- c0 (b=4) -- 2 1 1 1         <- children of c0 get 4/2, 4/4, 4/8 -> 1, 4/16 -> 1
    |-- c1 (b=2) -- 1 1
    |-- c2 (b=1) -- 1
    `-- c3 (b=1) -- 1

We expand breadth-first, so the budget (the capacity ``C``) goes to shallow nodes first.
With all tokens distinct: k = 4, C = 21 gives 1/4/8/8 nodes at depths 0..3, and
k = 8, C = 64 gives 1/8/19/24/12 at depths 0..4.

Merging with the retrieval tree (**ours**). The logits tree grows *into* a tree that may
already hold the retrieval paths. Think of the logits tree as an endless breadth-first list
of (parent, token) candidates; we walk it and stop the moment the merged tree is full:

* a new candidate costs one unit of budget and waits in the queue to be expanded;
* a candidate already in the tree (same parent, same token) costs nothing and is not
  duplicated; it gains the "logits" source bit (a retrieval node becomes "both") and is
  queued as well, so the logits tree keeps growing underneath retrieval nodes;
* a node the logits tree already expanded (the same id twice in one row) is skipped.

Last-logit mode (the paper's ablation, LogitSpec style): the root's children come from
``root_topk``, the top-k ids of the logits that *produced* the root, instead of the root's
table row. Deeper nodes still use the table.
"""

from __future__ import annotations

from collections import deque
from typing import Optional, Sequence

from racer_ref.tree import SOURCE_LOGITS


def child_breadth(b: int, j: int, parent_is_root: bool) -> int:
    """Breadth of child ``j`` (0-based rank) of a node with breadth ``b`` (paper Eq. 3).

    ``max(1, floor(b / 2 ** (j + [parent is not root])))``.
    """
    # The root's children are halved one time less than everybody else's.
    shift = j + (0 if parent_is_root else 1)
    # b >> shift is floor(b / 2**shift) for non-negative integers.
    return max(1, b >> shift)


def grow_logits_tree(tree, table, root_topk: Optional[Sequence[int]] = None) -> None:
    """Grow the logits tree into ``tree`` until it is full or nothing is left to expand.

    Args:
        tree: a ``racer_ref.reference.draft_tree.TreeBuilder`` holding at least the root
            (node 0), possibly the retrieval tree too. It is modified in place through
            ``tree.is_full()``, ``tree.tokens`` and ``tree.insert_child(parent, token,
            source)``, as in the Rust core.
        table: a ``CopyLogitTable``; node ``v`` is expanded from its row (``table.row_trusted(v)``).
        root_topk: last-logit mode: at least ``table.k`` ids replacing the root's row.

    Everything was checked by the caller (``build_draft_tree`` or the drafter).
    """
    # The breadth-first queue holds (node, breadth). The root starts with breadth k.
    queue = deque([(0, table.k)])
    while queue:
        node, b = queue.popleft()
        # Which ids are this node's candidate children? Normally its table row...
        if node == 0 and root_topk is not None:
            # ...but in last-logit mode the root uses the logits that produced it.
            row = root_topk
        else:
            # (every token of the tree was checked when it went in: no checks here)
            row = table.row_trusted(tree.tokens[node])
        # Only the first b ranks become children (an unseen token has an empty row).
        for j, token in enumerate(row[:b]):
            # The tree is full: every later candidate is cut off, existing ones included.
            if tree.is_full():
                return
            # Eq. 3: the breadth this child will expand with.
            breadth = child_breadth(b, j, parent_is_root=(node == 0))
            # `had`: None for a brand-new node (it cost one unit of budget), else the
            # node's sources before (a retrieval node becomes "both", free).
            child, had = tree.insert_child(node, token, SOURCE_LOGITS)
            # Expand it later, unless the logits tree had put it in already (the same
            # id twice in one row): skip that one.
            if had is None or not had & SOURCE_LOGITS:
                queue.append((child, breadth))

if __name__ == "__main__":
    # A walkthrough: the breadth rule, then a small logits tree and a merge.
    from racer_ref.reference.copy_logit import CopyLogitTable
    from racer_ref.reference.draft_tree import TreeBuilder

    print("Eq. 3, breadth of the root's 8 children:",
          [child_breadth(8, j, True) for j in range(8)])
    print("        breadth of the children of an inner node with b = 8:",
          [child_breadth(8, j, False) for j in range(8)])

    # Tokens 0..9; every row is written by hand.
    table = CopyLogitTable(vocab_size=10, k=2)
    table.observe([0, 1, 2], [[1, 2], [3, 4], [5, 6]])
    print("\ntable rows 0, 1, 2:", table.row(0), table.row(1), table.row(2))

    tree = TreeBuilder(root=0, capacity=6)
    grow_logits_tree(tree, table)
    print("\nlogits tree from root 0, capacity 6:")
    print(tree.flatten().pretty())

    tree = TreeBuilder(root=0, capacity=6)
    tree.add_retrieval_path([0, 2, 9])
    grow_logits_tree(tree, table)
    print("\nthe same after the retrieval path 0-2-9 (node 2 is now 'both'):")
    print(tree.flatten().pretty())
