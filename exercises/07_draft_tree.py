"""Exercise 07: the merged draft tree (tutorial 6, spec steps 2-4).

First insert the retrieval paths (each starts with the root) in order, walking shared
prefixes instead of duplicating them; stop a path at the first new node that does not fit.
Then grow the logits tree of exercise 06 *into* that tree: a proposed child that already
exists (same parent, same token) costs no budget and is not duplicated; it gains the
"logits" source bit (a retrieval node becomes "both") and is expanded by the logits tree as
well, unless the logits tree expanded it already. Finally flatten breadth-first, each
node's children in insertion order.

Sources: 0 root, 1 retrieval, 2 logits, 3 both (= 1 | 2).

Check your code:  racer-ref check exercises/07_draft_tree.py
(the named cases, then random paths and tables against the Rust core).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

ROOT, RETRIEVAL, LOGITS, BOTH = 0, 1, 2, 3


def child_breadth(b: int, j: int, parent_is_root: bool) -> int:
    """Eq. 3 (your answer to exercise 06)."""
    return max(1, b >> (j + (0 if parent_is_root else 1)))


def draft_tree(
    root: int,
    capacity: int,
    retrieval_paths: Sequence[Sequence[int]],
    rows: Dict[int, List[int]],
    k: int,
) -> Tuple[List[int], List[int], List[int]]:
    """The merged draft tree, flattened breadth-first, root first.

    Args:
        root: the root token.
        capacity: most nodes, root included.
        retrieval_paths: root-to-leaf token paths, each starting with ``root``.
        rows: the copy-logit table (token -> row); ``{}`` for no logits tree.
        k: the root's breadth.

    Returns:
        ``(tokens, parents, sources)``, one entry per node.
    """
    ...
