"""Exercise 06: the logits tree of Eq. 3 (tutorial 5, spec step 3).

Starting at the root (breadth k), expand breadth-first with the copy-logit table: a node
with token v and breadth b gets the children ``table[v][0..b)`` in rank order, and child j
gets breadth ``max(1, floor(b / 2 ** (j + [parent is not root])))``. Stop when the tree has
``capacity`` nodes (root included) or nothing is left to expand. A child already in the
tree (the same id twice in one row) is not added again and not expanded again.

With all tokens distinct, k = 8 and C = 64 give 1 / 8 / 19 / 24 / 12 nodes at depths 0..4.

Check your code:  racer-ref check exercises/06_logits_tree.py
(the paper's shapes and the named cases, then random tables against the Rust core).
"""

from __future__ import annotations

from typing import Dict, List, Tuple


def child_breadth(b: int, j: int, parent_is_root: bool) -> int:
    """Breadth of child ``j`` (0-based rank) of a node with breadth ``b`` (Eq. 3)."""
    ...


def logits_tree(root: int, capacity: int, rows: Dict[int, List[int]], k: int) -> Tuple[List[int], List[int]]:
    """The logits tree alone, flattened breadth-first, root first.

    Args:
        root: the root token (node 0).
        capacity: most nodes, root included (>= 1).
        rows: the copy-logit table: token -> its row (k ids, best first); a token that is
            not a key has an empty row and no children.
        k: the breadth of the root.

    Returns:
        ``(tokens, parents)``: one entry per node in breadth-first order; ``parents[0]`` is
        -1 and every other parent precedes its child.
    """
    ...
