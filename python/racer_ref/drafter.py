"""``racer_ref.Drafter``: the drafting side of RACER behind one class, Rust or Python.

The verification loop, the benchmarks and the tutorials all draft through this class; it
dispatches to the Rust core (``racer_ref._core.Drafter``, the default) or to the
teaching twin (``racer_ref.reference.drafter.Drafter``). Both give identical draft trees.

See ``racer_ref.reference.drafter`` for how every method works, and docs/explanation/spec.md steps
2-4, 8 and 9 for the rules.
"""

from __future__ import annotations

from typing import Any, Optional

from racer_ref.tree import METHODS, DraftTree  # noqa: F401 (METHODS: racer_ref.drafter.METHODS)

_from_arrays = DraftTree.from_arrays

#: The two implementations.
BACKENDS = ("rust", "python")


class Drafter:
    """Builds one draft tree per decoding step for one drafting method.

    Methods (docs/explanation/spec.md, "Peers to measure against"):

    * ``"racer"``: retrieval tree (Aho-Corasick automaton) first, the logits tree
      (copy-logit table) fills the remaining capacity;
    * ``"retrieval"``: the automaton only; ``"logits"``: the copy-logit table only
      (Token Recycling style); ``"logits-last"``: the root's children from the logits
      that produced the root (``last_topk``), deeper nodes from the table;
    * ``"pld"``: prompt lookup: one chain, copied after the most recent earlier occurrence
      of the last n-gram of (committed tokens + root), n = 3 down to 1, up to 10 tokens;
    * ``"ar"``: the root only (plain autoregressive decoding).

    ``DraftTree.sources`` marks automaton and PLD nodes as retrieval, copy-logit nodes
    (``logits``, ``logits-last``) as logits, and nodes proposed by both trees of ``racer``
    as both. Node order: breadth-first, each node's children in insertion order (retrieval
    paths in the automaton's order, then logits children by rank), identical on both
    backends.

    Args:
        method, vocab_size, capacity, breadth, ngram, max_nodes, min_border_depth: the
            drafter's parameters, passed as given to the backend; both take the same
            arguments with the same defaults and limits, documented on the twin,
            :class:`racer_ref.reference.drafter.Drafter` (``method`` one of ``METHODS``;
            paper values capacity 64, breadth 8, ngram 10, max_nodes 10,000).
        backend: ``"rust"`` (fast, the default) or ``"python"`` (the teaching twin);
            keyword only.

    ``None`` for a parameter means its default; ``vocab_size`` has no default.

    Raises:
        ValueError: unknown method or backend, or a parameter out of range.
        TypeError: ``vocab_size`` missing, ``method`` not a string, or a parameter that is
            not an int (bool and float included). Both backends raise the same errors.

    State lifetime: one drafter holds one automaton, copy-logit table and history; use a
    new drafter (or ``reset()``) per request, or keep it across requests for the paper's
    shared mode.
    """

    def __init__(self, *args: Any, backend: str = "rust", **kwargs: Any) -> None:
        if backend == "rust":
            from racer_ref._core import Drafter as impl
        elif backend == "python":
            from racer_ref.reference.drafter import Drafter as impl  # type: ignore[assignment]
        else:
            raise ValueError(f'backend: must be "rust" or "python", got {backend!r}')
        self.backend = backend
        self._impl = impl(*args, **kwargs)
        # The Rust core returns a tuple of arrays; the twin already returns a DraftTree.
        self._returns_tuple = backend == "rust"

    @property
    def method(self) -> str:
        """The drafting method."""
        return self._impl.method

    @property
    def vocab_size(self) -> int:
        """The target model's vocabulary size."""
        return int(self._impl.vocab_size)

    @property
    def capacity(self) -> int:
        """Maximum draft-tree nodes, root included."""
        return int(self._impl.capacity)

    @property
    def breadth(self) -> int:
        """``k``: copy-logit ids per row and the root's breadth."""
        return int(self._impl.breadth)

    @property
    def ngram(self) -> int:
        """``n``: the automaton's n-gram length."""
        return int(self._impl.ngram)

    @property
    def max_nodes(self) -> int:
        """The automaton's node budget."""
        return int(self._impl.max_nodes)

    @property
    def num_committed(self) -> int:
        """Tokens committed since construction or the last ``reset()``."""
        return int(self._impl.num_committed)

    @property
    def automaton_nodes(self) -> int:
        """Trie nodes in the automaton (root excluded); 0 for methods without one."""
        return int(self._impl.automaton_nodes)

    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        """Update the copy-logit table (docs/explanation/spec.md step 8).

        Row ``token_ids[i]`` becomes ``topk_ids[i, :breadth]``; a token repeated in one call
        keeps its last row. Which tokens to pass is the caller's choice: every prompt
        position after prefill; after a verify pass every tree node (the paper's default,
        rejected ones included) or only the accepted ones.

        Args:
            token_ids: ``(n,)`` integer ids the target was fed (numpy array, list, ...).
            topk_ids: ``(n, k')`` integer ids, ``k' >= breadth``: the top-k' ids of the
                target's logits at each position, best first.

        Raises:
            ValueError: wrong shapes, or an id outside ``[0, vocab_size)``.
            TypeError: a non-integer dtype. On error nothing changes.
        """
        self._impl.observe(token_ids, topk_ids)

    def commit(self, token_ids: Any) -> None:
        """Add tokens that became output to the automaton / PLD history (spec step 9).

        Args:
            token_ids: ``(n,)`` integer ids in output order (root + accepted drafts).

        Raises:
            ValueError: not 1-D or an id outside ``[0, vocab_size)``.
            TypeError: a non-integer dtype. On error nothing changes.
        """
        self._impl.commit(token_ids)

    def draft(self, root: int, last_topk: Any = None) -> DraftTree:
        """Build this step's draft tree (docs/explanation/spec.md steps 2-4).

        Args:
            root: the token the target just predicted (node 0 of the tree).
            last_topk: ``(k',)`` integer top-k' ids (``k' >= breadth``) of the logits that
                produced the root; required by ``"logits-last"``, ignored (but validated)
                by the other methods.

        Returns:
            A ``DraftTree`` with ``min(capacity, reachable unique nodes)`` nodes.

        Raises:
            ValueError: root or an id outside ``[0, vocab_size)``; ``last_topk`` too short,
                or missing for ``"logits-last"``.
            TypeError: a non-integer root or dtype.
        """
        tree = self._impl.draft(root, last_topk)
        return _from_arrays(tree) if self._returns_tuple else tree

    def table_row(self, token: int) -> list[int]:
        """Copy-logit row of ``token`` (``[]`` when unseen or when the method has no table)."""
        return list(self._impl.table_row(token))

    def reset(self) -> None:
        """Forget the automaton, the copy-logit table and the history."""
        self._impl.reset()

    def __repr__(self) -> str:
        return f"{self._impl!r}"[:-1] + f", backend={self.backend!r})"
