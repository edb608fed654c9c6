"""The draft tree, written to be read (twin of ``rust/src/draft_tree.rs``).

Where it comes from: docs/explanation/spec.md steps 2-4.

The draft tree is a token trie rooted at the **root** (the token the target just
predicted). Every node is one token fed to the target in the next verify pass, so the
number of nodes is bounded by the **capacity** ``C`` (root included).

We build it in three moves::

    1. retrieval paths       root-a-b-c, root-a-d, root-e      (from the automaton, in order)
    2. logits tree           breadth-first from the root       (from the copy-logit table)
    3. flatten               breadth-first, root first         (numpy arrays for the target)

    after 1 (retrieval)    after 2 (C = 7, root's row = [a, x])     3: flattened (BFS)
    root                   root                                     0 root
    |-- a                  |-- a   (both: proposed twice, kept once)  1 a  2 e  3 x
    |   |-- b              |   |-- b                                  4 b  5 d
    |   |   `-- c          |   |   `-- c                              6 c
    |   `-- d              |   `-- d
    `-- e                  |-- e
                           `-- x   (logits: the 7th and last node)

Merging (**ours**, spec step 3): when the logits tree proposes a child that already exists
(same parent, same token) it costs nothing and is not duplicated; the node's source just
gains the "logits" bit, so a retrieval node becomes "both". That is why the tree always
ends with exactly ``min(C, reachable unique nodes)`` nodes.

Node order. Each node keeps its children in insertion order (retrieval paths in the order
the automaton returned them, then logits children in rank order). Flattening is a plain
breadth-first walk that visits each node's children in that order. The Rust core does the
same, so both give identical arrays.

The result is a ``DraftTree``: the only thing the verification loop knows about drafters.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import numpy as np

from racer_ref.reference.copy_logit import CopyLogitTable
from racer_ref.reference.limits import (
    MAX_TOKEN_ID,
    as_int_array,
    check_capacity,
    int_value,
)
from racer_ref.reference.logits_tree import grow_logits_tree
from racer_ref.tree import (SOURCE_BOTH, SOURCE_LOGITS, SOURCE_RETRIEVAL, SOURCE_ROOT,  # noqa: F401
                            DraftTree, tree_attention_mask)

# The limits (MAX_CAPACITY, MAX_TOKEN_ID) and the checks live in ``limits``, as the Rust
# core's lib.rs; ``build_draft_tree`` checks its arguments there once, and the builder
# trusts them (the drafter calls ``build_trusted`` with what it checked itself).

class TreeBuilder:
    """A token trie with at most ``capacity`` nodes, grown from the root.

    Nodes are numbered in creation order (0 is the root) and stored column-wise in
    plain lists. Each node's children live in a dict ``token -> node``: a dict finds a
    child in one step *and* remembers insertion order, which is the order the flattened
    tree will list them in.

    Args:
        root: the root token.
        capacity: maximum number of nodes, root included, in ``[1, MAX_CAPACITY]``.
    """

    def __init__(self, root: int, capacity: int) -> None:
        self._start(int_value(root, "root"), check_capacity(capacity))

    @classmethod
    def trusted(cls, root: int, capacity: int) -> "TreeBuilder":
        """A builder for a root and a capacity the caller checked (no checks)."""
        builder = cls.__new__(cls)
        builder._start(root, capacity)
        return builder

    def _start(self, root: int, capacity: int) -> None:
        self.capacity = capacity
        # One entry per node, node 0 being the root.
        self.tokens: list[int] = [root]
        self.parents: list[int] = [-1]
        self.depths: list[int] = [0]
        self.sources: list[int] = [SOURCE_ROOT]
        self.children: list[dict[int, int]] = [{}]

    def __len__(self) -> int:
        return len(self.tokens)

    def is_full(self) -> bool:
        """True when no new node fits."""
        return len(self.tokens) >= self.capacity

    def insert_child(self, parent: int, token: int, source: int) -> tuple[Optional[int], Optional[int]]:
        """Find or create the child (``parent``, ``token``); add ``source`` to its bits.
        The one way into the tree (the Rust core's ``TreeBuilder::insert_child``): for the
        retrieval paths, the logits tree and the expected tree alike.

        Returns ``(node, had)``:

        * ``(new node, None)``: created; it cost one unit of budget;
        * ``(node, old source)``: it already existed; it cost nothing;
        * ``(None, None)``: it does not exist and the tree is full.
        """
        existing = self.children[parent].get(token)
        if existing is not None:
            # Merging: no new node, just one more source bit (retrieval | logits = both).
            had = self.sources[existing]
            self.sources[existing] = had | source
            return existing, had
        if self.is_full():
            return None, None
        # A new node at the end of the arena, appended to its parent's children.
        node = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.sources.append(source)
        self.children.append({})
        self.children[parent][token] = node
        return node, None

    def add_retrieval_path(self, path: Sequence[int]) -> None:
        """Insert one root-to-leaf retrieval path (``path[0]`` is the root).

        Shared prefixes are walked, not duplicated. If the tree fills up we stop this
        path at the first new node that does not fit (the automaton never returns more
        than ``capacity`` nodes, so this is only a safety net).
        """
        node = 0
        for token in path[1:]:
            child, _ = self.insert_child(node, token, SOURCE_RETRIEVAL)
            if child is None:
                return
            node = child

    def flatten(self) -> DraftTree:
        """Flatten breadth-first, root first, children in insertion order (step 4)."""
        # Breadth-first order of the creation-order node numbers.
        order = [0]
        for node in order:  # the list grows while we walk it: a queue without popping
            order.extend(self.children[node].values())
        n = len(order)
        # new_index[old] = position of node `old` in the flattened tree.
        new_index = [0] * n
        for i, old in enumerate(order):
            new_index[old] = i
        tokens = np.array([self.tokens[old] for old in order], dtype=np.int64)
        parents = np.array(
            [-1] + [new_index[self.parents[old]] for old in order[1:]], dtype=np.int64
        )
        depths = np.array([self.depths[old] for old in order], dtype=np.int64)
        sources = np.array([self.sources[old] for old in order], dtype=np.uint8)
        # Tree attention mask: node i sees itself and its ancestors (racer_ref.tree).
        attention_mask = tree_attention_mask(parents)
        # retrieve_indices: one row per leaf, its root-to-leaf node indices padded with -1
        # (racer_ref.tree.leaf_paths); nothing in the loop reads it, so it is built on demand.
        return DraftTree(tokens, parents, depths, attention_mask, None, sources)


def _check_token(arg: str, token: Any, vocab_size: Optional[int]) -> int:
    """One token id: an integer in ``[0, vocab_size)`` (or ``[0, 2**32)`` without a vocabulary)."""
    value = int_value(token, arg)
    high = MAX_TOKEN_ID + 1 if vocab_size is None else vocab_size
    if not 0 <= value < high:
        raise ValueError(f"{arg}: token id {value} is outside [0, {high})")
    return value


def build_draft_tree(
    root: int,
    capacity: int,
    retrieval_paths: Optional[Iterable[Sequence[int]]] = (),
    table: Optional[CopyLogitTable] = None,
    root_topk: Optional[Any] = None,
) -> DraftTree:
    """Build one draft tree (docs/explanation/spec.md steps 2-4).

    Args:
        root: the root token (node 0).
        capacity: maximum number of nodes, root included, in ``[1, MAX_CAPACITY]``.
        retrieval_paths: root-to-leaf token paths, each starting with ``root``, inserted
            first and in order (source retrieval); ``None`` means none.
        table: a ``CopyLogitTable``; when given, the logits tree fills the remaining
            capacity (source logits, or both where it meets a retrieval node).
        root_topk: last-logit mode: at least ``table.k`` ids replacing the root's row.

    Returns:
        The flattened ``DraftTree`` with ``min(capacity, reachable unique nodes)`` nodes.

    Raises:
        TypeError: a non-integer root, capacity or token; a ``table`` of another type.
        ValueError: capacity out of range; a token outside ``[0, table.vocab_size)``
            (``[0, 2**32)`` without a table); a path that is empty or does not start with
            the root; ``root_topk`` shorter than ``table.k`` or with ids out of range.
    """
    # Everything is validated before we build anything (same order as the Rust core).
    if table is not None and not isinstance(table, CopyLogitTable):
        raise TypeError(f"table: must be a CopyLogitTable or None, got {type(table).__name__}")
    vocab_size = None if table is None else table.vocab_size
    root = _check_token("root", root, vocab_size)
    capacity = check_capacity(capacity)
    if retrieval_paths is None:
        retrieval_paths = ()
    paths = [[_check_token("retrieval_paths", t, vocab_size) for t in p] for p in retrieval_paths]
    topk: Optional[list[int]] = None
    if root_topk is not None and table is not None:
        ids = as_int_array(root_topk, "root_topk", 1).tolist()
        topk = [_check_token("root_topk", t, vocab_size) for t in ids]
        if len(topk) < table.k:
            raise ValueError(f"root_topk: expected at least k = {table.k} ids, got {len(topk)}")
    for p in paths:
        if not p:
            raise ValueError("retrieval_paths: empty path")
        if p[0] != root:
            raise ValueError(f"retrieval_paths: every path must start with the root {root}, got {p[0]}")

    return build_trusted(root, capacity, paths, table, topk)


def build_trusted(
    root: int,
    capacity: int,
    paths: Iterable[Sequence[int]] = (),
    table: Optional[CopyLogitTable] = None,
    root_topk: Optional[Sequence[int]] = None,
) -> DraftTree:
    """``build_draft_tree`` without the checks (the Rust core's ``build_trusted``): the
    caller checked every argument (the drafter: once, at its own boundary). Paths are
    lists of ints, each starting with the root."""
    # Step 2: the retrieval tree first, path by path.
    tree = TreeBuilder.trusted(root, capacity)
    for p in paths:
        tree.add_retrieval_path(p)
    # Step 3: the logits tree fills the rest.
    if table is not None:
        grow_logits_tree(tree, table, root_topk)
    # Step 4: flatten breadth-first.
    return tree.flatten()


if __name__ == "__main__":
    # A walkthrough: retrieval paths, a copy-logit table, the merged tree, its arrays.
    from racer_ref.reference.copy_logit import CopyLogitTable

    root = 0
    paths = [[0, 1, 2, 3], [0, 1, 4], [0, 5]]
    print("retrieval paths:", paths)
    tree = build_draft_tree(root, capacity=8, retrieval_paths=paths)
    print("retrieval tree alone:\n" + tree.pretty())

    table = CopyLogitTable(vocab_size=10, k=2)
    table.observe([0, 1, 6], [[1, 6], [2, 7], [8, 9]])
    print("\ncopy-logit rows: 0 ->", table.row(0), " 1 ->", table.row(1), " 6 ->", table.row(6))
    tree = build_draft_tree(root, capacity=8, retrieval_paths=paths, table=table)
    print("merged tree, capacity 8 (1 and 1-2 are 'both': proposed twice, stored once):")
    print(tree.pretty())
    tree.validate(vocab_size=10)
    print("\nflattened arrays:")
    for name in ("tokens", "parents", "depths", "sources"):
        print(f"  {name:8s} {getattr(tree, name).tolist()}")
    print("  attention_mask\n" + "\n".join("    " + "".join("x" if v else "." for v in r)
                                          for r in tree.attention_mask))
    print("  retrieve_indices\n" + "\n".join(f"    {r.tolist()}" for r in tree.retrieve_indices))
