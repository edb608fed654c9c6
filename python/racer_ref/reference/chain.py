"""The best chain of a draft tree: what an engine that verifies chains only can use.

Twin of ``rust/src/chain.rs`` (``racer_ref._core.best_chain``): same arguments, same
results, same errors.

Why a chain? RACER drafts a *tree* and checks all of its paths in one forward pass with a
tree attention mask. Serving engines such as vLLM verify one *chain* of ``K`` draft tokens
per request and step. To run RACER there we keep the single path of the tree that the
drafter ranks highest. We do not need to score anything to find it: the tree is flattened
breadth-first and every node's children are stored in draft priority order (retrieval paths
first, the most frequent one first; then the logits tree's children by copy-logit rank). So
the best path is simply "always take the first child"::

    0 root            parents [-1, 0, 0, 1, 1, 3]
    |-- 1 a           first child of 0 is 1, of 1 is 3, of 3 is 5, 5 has none
    |   |-- 3 b       best_chain(parents, 3) == [1, 3, 5]
    |   |   `-- 5 c   best_chain(parents, 2) == [1, 3]
    |   `-- 4 d
    `-- 2 e

Run ``python -m racer_ref.reference.chain`` for a walkthrough on a real RACER tree.
"""

from __future__ import annotations

from typing import Any, List

import numpy as np


def best_chain(parents: Any, length: int) -> List[int]:
    """The node indices of the first-child path below the root, at most ``length`` of them.

    Args:
        parents: ``(n,)`` integer parent indices of a breadth-first draft tree
            (``DraftTree.parents``): ``parents[0] == -1`` and ``0 <= parents[i] < i``.
        length: the most nodes to return (``K``, the engine's draft length), ``>= 0``.

    Returns:
        Node indices, root side first, root excluded; shorter than ``length`` when the
        path ends at a leaf first. ``tokens[chain]`` are the draft tokens.

    Raises:
        TypeError: ``length`` is not an int, or ``parents`` has a non-integer dtype.
        ValueError: ``parents`` is not 1-D, is empty, does not start with -1, or has a parent
            that does not precede its node; ``length < 0``. Nothing is computed on error.
    """
    # Same reading of the arguments as the Rust shim: integer arrays only, ints only.
    array = np.asarray(parents)
    if array.ndim != 1:
        raise ValueError(f"parents: expected a 1-D array, got shape {array.shape}")
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"parents: expected integer token ids, got dtype {array.dtype}")
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
        raise TypeError(f"length: must be an int, got {type(length).__name__}")
    if length < 0:
        raise ValueError(f"length: must be >= 0, got {length}")
    values = array.astype(np.int64).tolist()
    # Check the whole tree before answering: no result from a malformed one.
    if not values:
        raise ValueError("parents: must hold the root (got an empty array)")
    if values[0] != -1:
        raise ValueError(f"parents: parents[0] must be -1 (the root), got {values[0]}")
    for i, p in enumerate(values[1:], start=1):
        if not 0 <= p < i:
            raise ValueError(f"parents: parents[{i}] must be in [0, {i}) (a parent precedes its node), got {p}")
    # One pass. In breadth-first order the first child of node u is the first node after
    # u whose parent is u, and it comes before every child of a later node on the path, so
    # we never need to look back.
    chain: List[int] = []
    tip = 0  # the last node of the path so far: the root at first
    for i, p in enumerate(values[1:], start=1):
        if len(chain) == length:
            break
        if p == tip:
            chain.append(i)
            tip = i
    return chain


if __name__ == "__main__":
    from racer_ref.reference.drafter import Drafter

    # A small RACER drafter that has seen "5 6 7 8 9 5 6 7" and one copy-logit row.
    drafter = Drafter("racer", vocab_size=20, capacity=8, breadth=2)
    drafter.commit([5, 6, 7, 8, 9, 5, 6])
    drafter.observe([7], [[8, 11]])
    tree = drafter.draft(7)
    print("the RACER tree for root 7:")
    print(tree.pretty())
    chain = best_chain(tree.parents, 3)
    print(f"best chain of 3: nodes {chain}, tokens {tree.tokens[chain].tolist()}")
