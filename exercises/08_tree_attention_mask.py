"""Exercise 08: tree attention mask, position ids and retrieve_indices (tutorial 6, step 4).

A flattened draft tree is given by ``parents`` (breadth-first, root first, ``parents[0] ==
-1``). In one verify pass every node may attend to the whole cached prefix and, inside the
tree, exactly to itself and its ancestors::

       0 1 2 3        0 = root, 1 and 2 its children, 3 a child of 1
    0  x . . .
    1  x x . .
    2  x . x .
    3  x x . x

Node i sits at position ``L + depth(i)`` (L = tokens in the KV cache), and
``retrieve_indices`` lists, per leaf in node order, the node indices of its root-to-leaf
path, padded with -1 to ``max depth + 1`` columns.

Check your code:  racer-ref check exercises/08_tree_attention_mask.py
(the named cases, then random draft trees against the Rust core's arrays).
"""

from __future__ import annotations

from typing import List, Sequence


def tree_attention_mask(parents: Sequence[int]) -> List[List[bool]]:
    """``mask[i][j]`` is True iff j is i or an ancestor of i; shape ``(n, n)``."""
    ...


def position_ids(parents: Sequence[int], past_length: int) -> List[int]:
    """``past_length + depth(i)`` for every node i."""
    ...


def retrieve_indices(parents: Sequence[int]) -> List[List[int]]:
    """One row per leaf (a node without children, in node order): the root-to-leaf node
    indices, root first, padded with -1 to ``max depth + 1`` columns."""
    ...
