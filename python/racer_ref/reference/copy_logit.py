"""The copy-logit table, written to be read (twin of ``rust/src/copy_logit.rs``).

Where it comes from: docs/explanation/spec.md, the "copy-logit table" term and step 8.

The idea in one picture. Every time the target model reads a token ``v`` it also tells us,
for free, what it thinks comes next (its logits at that position). We remember the best
``k`` of those guesses, one row per token id::

    token id      row (top-k next-token ids, best first)
    --------      ---------------------------------------
       0          (empty: never seen)
       1          (empty: never seen)
     ...
     "the"  ->    [" cat", " dog", " end", ...]     <- written when the target last read "the"
     ...

Later, when a draft tree reaches a node with token ``v``, we "copy" row ``v`` as that node's
children: the logits of the last time the target saw ``v`` are a good guess for this time.

Two details that matter:

* rows of tokens we have never seen are **empty**, not ``[0, 0, ...]``: an empty row
  drafts nothing, whereas zeros would draft token 0 over and over;
* the table only stores what it is given. *Which* rows to pass is the verification loop's
  decision: every prompt position after prefill, and after a verify pass every tree node
  (rejected ones included, as in the paper) or only the accepted ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# The checks live in ``limits`` (one home per rule, as the Rust core's copy_logit.rs and
# error.rs); the table calls them once per public call.
from racer_ref.reference.limits import NoCopy, check_observe, check_table_size, int_value
from racer_ref.reference.undo import check_intact


class CopyLogitTable(NoCopy):
    """Dense ``[vocab_size, k]`` copy-logit table with a per-row ``seen`` flag.

    Args:
        vocab_size: number of token ids (rows), ``>= 1``.
        k: ids kept per row (the breadth; paper 8), in ``[1, vocab_size]``.

    Raises:
        ValueError: ``vocab_size < 1``, ``k`` outside ``[1, vocab_size]``, or
            ``vocab_size * k > MAX_TABLE_ENTRIES``.
    """

    def __init__(self, vocab_size: int, k: int) -> None:
        # Validate before allocating anything (floats and bools: TypeError).
        vocab_size, k = int_value(vocab_size, "vocab_size"), int_value(k, "k")
        check_table_size(vocab_size, k, "k")
        self.vocab_size = int(vocab_size)
        self.k = int(k)
        # The ids themselves: one row per token. np.zeros is lazy (calloc), so a large
        # vocabulary costs memory only for the rows we actually write.
        self.ids = np.zeros((vocab_size, k), dtype=np.int64)
        # seen[v] says whether row v holds real ids. Without it we could not tell an
        # unseen row from a row of token 0s.
        self.seen = np.zeros(vocab_size, dtype=bool)
        # True only if putting old rows back after an interrupt was itself interrupted
        # (see observe); then every call asks for reset().
        self._torn = False

    #: What a torn table says (``undo.check_intact``): it may hold a row marked seen whose
    #: ids are half old, half new.
    TORN = ("CopyLogitTable: an earlier observe() was interrupted while it was being "
            "undone, so the table is inconsistent; call reset() to start afresh")

    def _check_intact(self) -> None:
        """Raise ``RuntimeError`` naming ``reset()`` if the table is torn (see ``observe``)."""
        check_intact(self)

    @property
    def num_seen(self) -> int:
        """Number of rows written since the last reset."""
        self._check_intact()
        return int(self.seen.sum())

    def is_seen(self, token: int) -> bool:
        """Whether row ``token`` has been written (False outside the vocabulary)."""
        token = int_value(token, "token")
        self._check_intact()
        return 0 <= token < self.vocab_size and bool(self.seen[token])

    def row(self, token: int) -> list[int]:
        """Row ``token`` as a list of ``k`` ids, best first; ``[]`` if never seen."""
        if not self.is_seen(token):
            return []
        return self.ids[int(token)].tolist()

    def row_trusted(self, token: int) -> list[int]:
        """``row()`` for a token id the caller checked (a draft-tree node): no checks, the
        Rust core's ``row``. The logits tree reads one row per node through here."""
        return self.ids[token].tolist() if self.seen[token] else []

    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        """Write ``table[token_ids[i]] = topk_ids[i, :k]`` for every i (spec step 8).

        Args:
            token_ids: ``(n,)`` integer ids the target model was fed.
            topk_ids: ``(n, k')`` integer ids with ``k' >= k``: row i holds the top-k' ids
                of the target's logits at position i, best first. Only the first ``k``
                columns are kept, so a wider top-k is fine.

        A token repeated in ``token_ids`` keeps its last row (its most recent occurrence).

        Raises:
            ValueError: wrong number of dimensions, ``topk_ids.shape != (n, k' >= k)``,
                or an id outside ``[0, vocab_size)`` (only the kept columns are checked).
            TypeError: a non-integer dtype.
            RuntimeError: the table is torn (see ``reset()``).
            All checks run before the first write: on error the table is unchanged.

        All or nothing: if the writes are interrupted (``KeyboardInterrupt`` included),
        the old rows are put back before the exception propagates.
        """
        # Steps 1-3: validate everything before we touch the table.
        tokens, kept = check_observe(token_ids, topk_ids, self.vocab_size, self.k)
        self._check_intact()
        self.observe_trusted(tokens, kept)

    def observe_trusted(self, tokens: np.ndarray, kept: np.ndarray) -> None:
        """Steps 4-5 of ``observe`` for what ``check_observe`` returned (the Rust core's
        ``observe_trusted``): ``(n,)`` ids and their ``(n, k)`` kept rows. The drafter,
        which checked them at its own boundary, writes through here."""
        # Step 4: which row each token ends with. A dict keeps the *last* value written
        # for a key, so "the last occurrence wins" falls out (numpy's fancy assignment
        # with repeated indices would not promise an order; now there are none).
        last = {v: i for i, v in enumerate(tokens.tolist())}
        rows = np.fromiter(last, dtype=np.int64, count=len(last))  # (m,) distinct ids
        new_rows = kept[np.fromiter(last.values(), dtype=np.int64, count=len(last))]  # (m, k)
        # Step 5: write, after keeping the old rows (fancy indexing copies them), so that
        # an interrupt between the two writes can be undone: the table then holds either
        # all the new rows or none of them.
        old_ids, old_seen = self.ids[rows], self.seen[rows]
        try:
            # Two numpy writes (each one call into C, not interruptible half-way); an
            # interrupt can only come before, between or after them.
            self.ids[rows] = new_rows
            self.seen[rows] = True
        except BaseException:
            # Torn until both old halves are back (a second interrupt here keeps it set).
            self._torn = True
            self.ids[rows] = old_ids
            self.seen[rows] = old_seen
            self._torn = False
            raise

    def reset(self) -> None:
        """Forget every row: all rows are empty again (also the way out of a torn table)."""
        self.seen[:] = False
        self._torn = False

    def __repr__(self) -> str:
        return (
            f"CopyLogitTable(vocab_size={self.vocab_size}, k={self.k}, "
            f"num_seen={self.num_seen})"
        )


if __name__ == "__main__":
    # A walkthrough: a 10-token vocabulary, k = 3.
    table = CopyLogitTable(vocab_size=10, k=3)
    print("a fresh table:", table)
    print("row 4 before anything is observed:", table.row(4), "(empty, not [0, 0, 0])")
    # The target read tokens 4, 7, 4; after each it predicted a top-4 (we keep 3).
    fed = np.array([4, 7, 4])
    topk = np.array([[1, 2, 3, 9], [5, 6, 0, 9], [8, 1, 2, 9]])
    print("\nobserve(token_ids =", fed.tolist(), ", topk_ids =", topk.tolist(), ")")
    table.observe(fed, topk)
    for v in (4, 7, 1):
        print(f"  row {v}: {table.row(v)}")
    print("token 4 was fed twice: its row is the later one, [8, 1, 2]")
    print("\nbad input changes nothing:")
    try:
        table.observe([1], [[1, 2, 10]])
    except ValueError as error:
        print("  ValueError:", error)
    print("  row 1 is still", table.row(1))
