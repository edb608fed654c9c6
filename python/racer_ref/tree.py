"""``DraftTree``: the one thing the decoding loop knows about drafters.

Every drafter (the Rust core, the Python twin in ``racer_ref.reference``, a wrapper that
records or truncates trees) returns its draft tree as these flat arrays, breadth-first and
root first; the loop (:mod:`racer_ref.decoding`, :mod:`racer_ref.verify`) reads nothing
else. This module depends on numpy only, so both sides can import it.

A 6-node tree and its arrays::

    0 root                      tokens   [r, a, e, b, d, c]     (token ids)
    |-- 1 a                     parents  [-1, 0, 0, 1, 1, 3]
    |   |-- 3 b                 depths   [0, 1, 1, 2, 2, 3]     (position id = L + depth)
    |   |   `-- 5 c             sources  [root, retrieval, logits, ...]
    |   `-- 4 d                 attention_mask[i, j]: j is i or an ancestor of i
    `-- 2 e
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

#: The drafting methods (both backends of ``racer_ref.Drafter``, and ``generate()``):
#: ``"racer"`` retrieval tree + logits tree; ``"retrieval"`` the automaton only; ``"logits"``
#: the copy-logit table only; ``"logits-last"`` the root's children from the logits that
#: produced it; ``"pld"`` prompt lookup; ``"ar"`` the root only (plain decoding).
METHODS = ("racer", "retrieval", "logits", "logits-last", "pld", "ar")

#: ``sources`` values. The root is neither drafted by retrieval nor by logits.
SOURCE_ROOT = 0
#: The node came from the retrieval tree (Aho-Corasick automaton, or the PLD chain).
SOURCE_RETRIEVAL = 1
#: The node came from the logits tree (copy-logit table).
SOURCE_LOGITS = 2
#: Both trees proposed this node (``SOURCE_RETRIEVAL | SOURCE_LOGITS``).
SOURCE_BOTH = 3

#: The name of each ``sources`` value.
SOURCE_NAMES = {SOURCE_ROOT: "root", SOURCE_RETRIEVAL: "retrieval",
                 SOURCE_LOGITS: "logits", SOURCE_BOTH: "both"}


class DraftTree:
    """A draft tree flattened breadth-first, root first (spec, "One decoding step", step 4).

    Read-only by convention: drafters build a new tree, nobody edits one in place. (A plain
    slotted class: building one costs a few hundred nanoseconds, a frozen dataclass several
    times more, which the drafting hot path would pay every step.)

    Attributes:
        tokens: ``(n,)`` int64 token ids; ``tokens[0]`` is the root.
        parents: ``(n,)`` int64 parent node index; ``parents[0] == -1`` and
            ``parents[i] < i`` for every other node.
        depths: ``(n,)`` int64 depth below the root (root 0). Position id of node i
            is ``L + depths[i]`` with L the number of tokens in the KV cache.
        attention_mask: ``(n, n)`` bool tree attention mask: ``[i, j]`` is True iff
            j is i or an ancestor of i.
        retrieve_indices: ``(num_leaves, max_depth + 1)`` int64, one row per
            root-to-leaf path (node indices, root first, leaves in node order), padded
            with -1. The loop does not need it (it walks the tree from the root), so a tree
            built here without it computes it on first read.
        sources: ``(n,)`` uint8: ``SOURCE_ROOT``, ``SOURCE_RETRIEVAL``,
            ``SOURCE_LOGITS`` or ``SOURCE_BOTH``.
    """

    __slots__ = ("tokens", "parents", "depths", "attention_mask", "_retrieve_indices", "sources")

    def __init__(self, tokens: np.ndarray, parents: np.ndarray, depths: np.ndarray,
                 attention_mask: np.ndarray, retrieve_indices: Optional[np.ndarray],
                 sources: np.ndarray) -> None:
        self.tokens = tokens
        self.parents = parents
        self.depths = depths
        self.attention_mask = attention_mask
        self._retrieve_indices = retrieve_indices  # None: computed on first read
        self.sources = sources

    @property
    def retrieve_indices(self) -> np.ndarray:
        if self._retrieve_indices is None:
            self._retrieve_indices = leaf_paths(self.parents, self.depths)
        return self._retrieve_indices

    def __len__(self) -> int:
        """Number of nodes ``n`` (root included)."""
        return int(self.tokens.shape[0])

    def __repr__(self) -> str:
        return f"DraftTree({len(self)} nodes, tokens={self.tokens.tolist()}, parents={self.parents.tolist()})"

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> "DraftTree":
        """Wrap six arrays given in field order (tokens, parents, depths, attention_mask,
        retrieve_indices, sources), as the Rust core returns them. No checks (this is the
        drafting hot path): call :meth:`validate` for those."""
        return cls(*arrays)

    @classmethod
    def root_only(cls, root: int) -> "DraftTree":
        """The one-node tree of plain autoregressive decoding (method ``"ar"``)."""
        return cls(np.array([root], dtype=np.int64), np.array([-1], dtype=np.int64),
                   np.zeros(1, dtype=np.int64), tree_attention_mask(np.array([-1])), None,
                   np.array([SOURCE_ROOT], dtype=np.uint8))

    def children(self) -> List[List[int]]:
        """``children[u]``: the node indices whose parent is u, in breadth-first (= draft
        priority) order."""
        children: List[List[int]] = [[] for _ in range(len(self))]
        for node, parent in enumerate(self.parents.tolist()):
            if parent >= 0:
                children[parent].append(node)
        return children

    def validate(self, vocab_size: Optional[int] = None, *, contract: bool = True) -> None:
        """Check every structural invariant; raise ``ValueError`` naming the first broken one.

        Checked: dtypes and shapes; root first with parent -1; ``parents[i] < i``;
        depths consistent with parents and non-decreasing (breadth-first); no two
        children of one node share a token (a trie); the attention mask row i is
        exactly i and its ancestors; one ``retrieve_indices`` row per leaf, leaves in
        node order, each a root-to-leaf path padded with -1 (when given: computed ones are
        right by construction); sources in range; and, when ``vocab_size`` is given, every
        token in ``[0, vocab_size)``.
        Not called on construction (the drafting hot path); tests and users call it.

        With ``contract=False`` only what the verification loop relies on is checked: the
        shapes of tokens, parents, depths and mask, the root's parent and depth, parents
        before children, depths, tokens and the mask. Other integer dtypes, another order
        with parents first, repeated siblings and any ``sources`` pass
        (``racer_ref.guard.CheckedDrafter`` checks a caller's drafter so).
        """
        def fail(msg: str) -> None:
            raise ValueError(f"invalid DraftTree: {msg}")

        n = len(self)
        # dtypes and shapes first: the rest indexes with these arrays.
        for name, want in (("tokens", np.int64), ("parents", np.int64),
                           ("depths", np.int64), ("_retrieve_indices", np.int64),
                           ("attention_mask", np.bool_), ("sources", np.uint8)):
            array = getattr(self, name)
            if contract and array is not None and array.dtype != want:
                fail(f"{name.lstrip('_')} has dtype {array.dtype}, expected {np.dtype(want)}")
        if n < 1:
            fail("no root")
        shaped = ("tokens", "parents", "depths", "sources") if contract else ("tokens", "parents", "depths")
        for name in shaped:
            if getattr(self, name).shape != (n,):
                fail(f"{name} has shape {getattr(self, name).shape}, expected ({n},)")
        if self.attention_mask.shape != (n, n):
            fail(f"attention_mask has shape {self.attention_mask.shape}, expected ({n}, {n})")
        parents, depths = self.parents, self.depths
        # The root: parent -1, depth 0, source root.
        if parents[0] != -1 or depths[0] != 0 or (contract and self.sources[0] != SOURCE_ROOT):
            fail("node 0 must be the root (parent -1, depth 0, source root)")
        idx = np.arange(n)
        # Every other node's parent precedes it.
        if ((parents[1:] < 0) | (parents[1:] >= idx[1:])).any():
            fail("a parent does not precede its child")
        # Depth = parent's depth + 1, and breadth-first order never goes back up.
        if (depths[1:] != depths[parents[1:]] + 1).any():
            fail("depths are not consistent with parents")
        if contract and (np.diff(depths) < 0).any():
            fail("nodes are not in breadth-first order")
        if contract and ((self.sources[1:] < SOURCE_RETRIEVAL) | (self.sources[1:] > SOURCE_BOTH)).any():
            fail("a non-root node has source outside {1, 2, 3}")
        # A trie: (parent, token) pairs are unique.
        if contract and len(set(zip(parents.tolist(), self.tokens.tolist()))) != n:
            fail("two children of one node carry the same token")
        if vocab_size is not None and ((self.tokens < 0) | (self.tokens >= vocab_size)).any():
            fail(f"a token is outside [0, {vocab_size})")
        if not np.array_equal(self.attention_mask, tree_attention_mask(parents)):
            fail("attention_mask row i is not exactly i and its ancestors")
        # retrieve_indices: one row per leaf (in node order), root to leaf, -1 padded. A tree
        # built without them computes them from parents and depths when read: nothing to check.
        if not contract or self._retrieve_indices is None:
            return
        expected_paths = leaf_paths(parents, depths)
        if self.retrieve_indices.shape != expected_paths.shape:
            fail(f"retrieve_indices has shape {self.retrieve_indices.shape}, "
                 f"expected {expected_paths.shape}")
        for row, path in zip(self.retrieve_indices, expected_paths):
            if not np.array_equal(row, path):
                leaf = path[path >= 0][-1]
                fail(f"retrieve_indices row for leaf {leaf} is not its root-to-leaf path")

    def subtree(self, keep: Any) -> "DraftTree":
        """The draft tree made of the nodes ``keep`` of this one (a prefix-closed set),
        checked: :meth:`subtree_trusted` after the checks.

        Args:
            keep: node indices (any order, duplicates allowed); must hold the root and,
                with every node, its parent.

        Raises:
            ValueError: ``keep`` lacks the root or holds a node without its parent.
        """
        old = np.unique(np.asarray(keep, dtype=np.int64))  # (m,) kept nodes, BFS order
        if len(old) == 0 or old[0] != 0:
            raise ValueError("keep: must contain the root (node 0)")
        if old[-1] >= len(self):
            raise ValueError(f"keep: node {int(old[-1])} is not in a tree of {len(self)} nodes")
        tree = self.subtree_trusted(old)
        if (tree.parents[1:] < 0).any():
            raise ValueError("keep: every kept node needs its parent kept too")
        return tree

    def subtree_trusted(self, keep: np.ndarray) -> "DraftTree":
        """The draft tree made of the nodes ``keep`` of this one, unchecked (:meth:`subtree` checks).

        The kept nodes stay in breadth-first order; the attention mask is the kept block
        of this one (a node's ancestors are all kept) and parents are renumbered. (The
        loop's depth clip, ``racer_ref.tree.clip_draft_tree``, keeps a prefix of the
        arrays and needs no renumbering.)::

            keep = {0, 1, 2, 4}        0 -- 1 -- 3            0 -- 1
                                        `-- 2 -- 4     ->      `-- 2 -- 4

        Args:
            keep: ``(m,)`` int64 node indices, sorted and unique: the root first, and with
                every node its parent.
        """
        # new_index[old node] = its index in the subtree (-1: dropped).
        new_index = np.full(len(self), -1, dtype=np.int64)
        new_index[keep] = np.arange(len(keep))
        # The root's parent -1 stays -1; every other parent is renumbered.
        old_parents = self.parents[keep]
        parents = np.where(old_parents >= 0, new_index[np.maximum(old_parents, 0)], -1)
        return DraftTree(
            tokens=self.tokens[keep],
            parents=parents.astype(np.int64),
            depths=self.depths[keep],
            attention_mask=self.attention_mask[np.ix_(keep, keep)],
            retrieve_indices=None,
            sources=self.sources[keep],
        )

    def pretty(self) -> str:
        """The tree as indented text, one node per line: ``index token [source]``."""
        children = self.children()
        lines: list[str] = []

        def walk(i: int, prefix: str, tail: str) -> None:
            source = SOURCE_NAMES.get(int(self.sources[i]), "?")
            lines.append(f"{tail}{i}: {int(self.tokens[i])} [{source}]")
            kids = children[i]
            for c, kid in enumerate(kids):
                last = c == len(kids) - 1
                walk(kid, prefix + ("    " if last else "|   "), prefix + ("`-- " if last else "|-- "))

        walk(0, "", "")
        return "\n".join(lines)


def tree_attention_mask(parents: np.ndarray) -> np.ndarray:
    """The tree attention mask of a tree given by its parents (the one builder in Python)::

               0 1 2 3          0 = root, 1 and 2 its children, 3 a child of 1
            0  x . . .
            1  x x . .          row 3 = row 1 (its parent) + itself
            2  x . x .
            3  x x . x

    Args:
        parents: ``(n,)`` int parent node indices: ``parents[0] == -1``, ``parents[i] < i``.

    Returns:
        ``(n, n)`` bool: ``[i, j]`` is True iff j is i or an ancestor of i.
    """
    n = len(parents)
    mask = np.eye(n, dtype=bool)
    for i in range(1, n):  # parents come first, so row parent(i) is complete: copy it, add i
        mask[i] |= mask[parents[i]]
    return mask


def leaf_paths(parents: np.ndarray, depths: np.ndarray) -> np.ndarray:
    """``retrieve_indices`` of a tree: one row per leaf (a node without children), in node
    order, listing node indices from the root down to the leaf, padded with -1.

    Args:
        parents, depths: ``(n,)`` int64, as in :class:`DraftTree`.

    Returns:
        ``(num_leaves, max_depth + 1)`` int64.
    """
    n = len(parents)
    is_leaf = np.ones(n, dtype=bool)
    is_leaf[parents[1:]] = False
    leaves = np.flatnonzero(is_leaf).tolist()
    paths = np.full((len(leaves), int(depths.max()) + 1), -1, dtype=np.int64)
    parent_of = parents.tolist()
    for row, leaf in enumerate(leaves):
        node = leaf
        # Walk up from the leaf, filling the row from its depth back to column 0.
        for d in range(int(depths[leaf]), -1, -1):
            paths[row, d] = node
            node = parent_of[node]
    return paths


def clip_draft_tree(tree: DraftTree, max_depth: int) -> DraftTree:
    """The nodes before the first one deeper than ``max_depth``: in breadth-first order,
    every node down to ``max_depth`` (and any prefix is a tree: a parent precedes its children).

    Used so that a step never emits more than ``max_new_tokens`` or fills the context beyond
    its length: accepting a drafts emits ``a + 1`` tokens, so depth <= room - 1.
    """
    deeper = np.flatnonzero(tree.depths > max_depth)
    if len(deeper) == 0:
        return tree
    n = int(deeper[0])  # keep nodes 0 .. n-1: their arrays, and the mask's top-left block
    return DraftTree(tree.tokens[:n], tree.parents[:n], tree.depths[:n], tree.attention_mask[:n, :n],
                     None, tree.sources[:n])


def accept_greedy(logits: Any, tree: DraftTree, predicted: Optional[Sequence[int]] = None) -> Tuple[List[int], int]:
    """Greedy acceptance by walking the tree (spec step 6), on numpy alone.

    At node u the target's choice is ``argmax(logits[u])``; if u has a child with that token
    we accept the child and continue from it, otherwise we stop. A trie has at most one child
    per token, so the walk is unique and finds the longest path the target agrees with.

    Args:
        logits: ``(n, vocab)``, a torch tensor (the verify pass's) or a numpy array.
        predicted: ``argmax(logits[u])`` for every node if the caller has it already
            (:func:`racer_ref.verify.argmax_from_topk`); computed here otherwise.

    Returns:
        ``(accepted, next_root)``: the accepted node indices root first (``accepted[0] == 0``,
        accepted length ``a = len(accepted) - 1``) and the token the last accepted node
        predicts, which is the next step's root.
    """
    if predicted is None:
        # One device->host copy for the whole tree: n small ints.
        predicted = logits.argmax(-1).tolist()  # (n,) as a list of ints (torch or numpy)
    accepted = [0]
    node = 0
    while True:
        # The child of `node` carrying the predicted token, if the drafter proposed it.
        match = np.flatnonzero((tree.parents == node) & (tree.tokens == predicted[node]))
        if len(match) == 0:
            return accepted, predicted[node]
        node = int(match[0])
        accepted.append(node)
