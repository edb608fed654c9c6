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

from racer_ref.reference.automaton import int_value

#: The largest table we agree to allocate: ``vocab_size * k`` entries (the Rust core uses
#: the same limit: 2**28 entries, 1 GiB of 32-bit ids).
MAX_TABLE_ENTRIES = 1 << 28


def as_int_array(value: Any, arg: str, ndim: int) -> np.ndarray:
    """Turn ``value`` (numpy array, list, tensor...) into an integer numpy array.

    We accept anything ``np.asarray`` understands, as long as it has ``ndim`` dimensions
    and an integer dtype. The argument's name ``arg`` goes into every error message.

    Raises:
        ValueError: wrong number of dimensions.
        TypeError: a non-integer dtype (floats and bools are refused: a token id
            ``3.0`` is almost certainly a bug upstream).
    """
    # np.asarray does not copy an array that is already a numpy array. Ragged nesting such
    # as [[1], [2, 3]] makes it raise a ValueError that does not say which argument.
    try:
        array = np.asarray(value)
    except ValueError as error:
        raise ValueError(f"{arg}: not an array of ids ({error})") from None
    # The shape is checked first, then the dtype (the Rust core checks in the same order).
    if array.ndim != ndim:
        raise ValueError(f"{arg}: expected a {ndim}-D array, got shape {tuple(array.shape)}")
    # An empty list becomes float64 in numpy; it holds no ids, so we let it through.
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"{arg}: expected integer token ids, got dtype {array.dtype}")
    return array


def check_token_ids(arg: str, ids: np.ndarray, vocab_size: int) -> None:
    """Raise ``ValueError`` naming ``arg`` if any id lies outside ``[0, vocab_size)``."""
    # A boolean mask of the bad entries; nothing to do when there are none.
    bad = (ids < 0) | (ids >= vocab_size)
    if bad.any():
        # Report the first offender, with its (flat) index, like the Rust core does.
        index = int(np.flatnonzero(bad.ravel())[0])
        value = int(ids.ravel()[index])
        raise ValueError(
            f"{arg}: token id {value} at index {index} is outside "
            f"[0, vocab_size) = [0, {vocab_size})"
        )


def check_token_id(arg: str, token: Any, vocab_size: int) -> int:
    """Validate one token id (a Python or numpy integer) and return it as ``int``.

    Raises:
        TypeError: not an integer (bool and float included).
        ValueError: outside ``[0, vocab_size)``.
    """
    # int_value accepts int, numpy integers and anything with __index__, but not bool.
    value = int_value(token, arg)
    if not 0 <= value < vocab_size:
        raise ValueError(
            f"{arg}: token id {value} is outside [0, vocab_size) = [0, {vocab_size})"
        )
    return value


def check_observe(token_ids: Any, topk_ids: Any, vocab_size: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate the arguments of ``CopyLogitTable.observe`` for a ``[vocab_size, k]`` table.

    Returns ``(tokens, kept)``: the ``(n,)`` ids and the ``(n, k)`` kept top-k columns.
    Drafters without a table call it too, so every method rejects the same input.

    Raises:
        ValueError, TypeError: see ``CopyLogitTable.observe``.
    """
    # Step 1: turn both arguments into integer arrays of the right rank.
    tokens = as_int_array(token_ids, "token_ids", 1)
    topk = as_int_array(topk_ids, "topk_ids", 2)
    # Step 2: the shapes must agree: one top-k row per fed token, at least k wide.
    n = tokens.shape[0]
    rows, cols = topk.shape
    if rows != n or cols < k:
        raise ValueError(
            f"topk_ids: expected shape (n, k') with n = len(token_ids) = {n} and "
            f"k' >= k = {k}, got ({rows}, {cols})"
        )
    # We keep only the first k columns; the rest may hold anything.
    kept = topk[:, : k]
    # Step 3: every id we are about to store must be a real token id.
    check_token_ids("token_ids", tokens, vocab_size)
    if kept.size:
        bad = (kept < 0) | (kept >= vocab_size)
        if bad.any():
            # Name the first bad entry by its [row, column], as the Rust core does.
            i, j = (int(x) for x in np.argwhere(bad)[0])
            raise ValueError(
                f"topk_ids: token id {int(kept[i, j])} at [{i}, {j}] is outside "
                f"[0, vocab_size) = [0, {vocab_size})"
            )
    return tokens, kept


def check_table_size(vocab_size: int, k: int, k_arg: str = "k") -> None:
    """Check the sizes of a ``[vocab_size, k]`` table (ints already); ``k_arg`` is the name
    the caller gave ``k`` (a table's ``"k"``, a drafter's ``"breadth"``), so that the
    message names the caller's argument (the Rust core's ``CopyLogitTable::check_params``).

    Raises:
        ValueError: ``vocab_size < 1``, ``k`` outside ``[1, vocab_size]``, or
            ``vocab_size * k > MAX_TABLE_ENTRIES``.
    """
    if vocab_size < 1:
        raise ValueError(f"vocab_size: must be >= 1, got {vocab_size}")
    if not 1 <= k <= vocab_size:
        raise ValueError(f"{k_arg}: must be in [1, vocab_size] = [1, {vocab_size}], got {k}")
    if vocab_size * k > MAX_TABLE_ENTRIES:
        raise ValueError(
            f"vocab_size: vocab_size * {k_arg} = {vocab_size} * {k} exceeds the table "
            f"limit of {MAX_TABLE_ENTRIES} entries"
        )


class CopyLogitTable:
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

    def _check_intact(self) -> None:
        """Raise ``RuntimeError`` naming ``reset()`` if the table is torn (see ``observe``)."""
        # A torn table may hold a row marked seen whose ids are half old, half new.
        if self._torn:
            raise RuntimeError(
                "CopyLogitTable: an earlier observe() was interrupted while it was being "
                "undone, so the table is inconsistent; call reset() to start afresh"
            )

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
