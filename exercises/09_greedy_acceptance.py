"""Exercise 09: greedy acceptance (tutorial 7, spec step 6).

After the verify pass, ``predicted[u]`` is the target's argmax at node u: its choice for
the token after u, on u's own path. Walk from the root: if the current node has a child
carrying the predicted token, accept that child and continue from it; otherwise stop. The
last accepted node's prediction is the next root (the "bonus" token).

Check your code:  racer-ref check exercises/09_greedy_acceptance.py
(the named cases, then random trees and predictions against racer_ref.tree.accept_greedy,
the walk racer_ref.verify.accept_greedy runs; numpy only, no torch needed).
"""

from __future__ import annotations

from typing import List, Sequence, Tuple


def accept_greedy(
    predicted: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
) -> Tuple[List[int], int]:
    """Greedy acceptance by walking the draft tree.

    Args:
        predicted: ``(n,)`` argmax of the target's logits at each node.
        tokens, parents: the flattened draft tree (breadth-first, ``parents[0] == -1``).

    Returns:
        ``(accepted, next_root)``: the accepted node indices root first (``accepted[0] ==
        0``; accepted length a = ``len(accepted) - 1``) and the next root's token.
    """
    ...
