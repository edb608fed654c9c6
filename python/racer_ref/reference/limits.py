"""Limits, the paper's defaults and the argument checks: the one Python home of each rule
(twin of ``rust/src/lib.rs`` and ``rust/src/error.rs``).

Every module of racer-ref that needs one of these numbers imports it from here, so that a
reader finds each rule in one place per language. The values equal the Rust crate's
constants of the same names.

The checks below run at the boundary only: the public entry points (``Automaton``,
``CopyLogitTable``, ``build_draft_tree``, ``Drafter``) call them once per argument, and
what they checked is trusted inside (a drafter's step re-checks nothing). Bad input raises
a ``ValueError`` or ``TypeError`` that names the argument, before any state changes; the
messages are the Rust core's, word for word (``rust/src/error.rs`` writes them
``"<arg>: <what was wrong>"``).
"""

from __future__ import annotations

import operator
from typing import Any, NoReturn, Optional, Sequence

import numpy as np

#: The largest token id any structure accepts (token ids are 32-bit, ``u32`` in Rust).
MAX_TOKEN_ID = 2**32 - 1

#: The largest accepted capacity ``C`` (draft-tree nodes, root included). The tree attention
#: mask has ``C * C`` entries, so this bounds its memory.
MAX_CAPACITY = 4096

# The paper's defaults (racer-spec "Paper figures": C = 64, k = 8, n = 10, max_nodes = 10,000).
#: Capacity ``C``: draft-tree nodes per verify pass, root included.
DEFAULT_CAPACITY = 64
#: Breadth ``k``: next-token ids kept per row of the copy-logit table.
DEFAULT_BREADTH = 8
#: The capacity ``generate()`` uses on a CPU when ``capacity=None``: there a verify pass costs
#: more with every node, and 16 nodes (about 1.6-1.8 one-token passes with
#: racer_ref.speedups.cpu_kernels) pay off where the paper's 64 do not. Fixed rather than
#: "auto" so that a seed reproduces a sampled output.
DEFAULT_CPU_CAPACITY = 16
#: ``n``: the longest n-gram window the automaton inserts (its depth bound).
DEFAULT_NGRAM = 10
#: ``max_nodes``: the automaton's node budget before LRU eviction.
DEFAULT_MAX_NODES = 10_000
#: The shallowest border depth: a border is a state of depth >= 2 (a one-token match is no evidence).
DEFAULT_MIN_BORDER_DEPTH = 2

#: Largest accepted ``ngram`` (the trie's depth bound).
MAX_NGRAM = 256
#: Largest accepted ``max_nodes`` (2**31 - 1, as in the Rust core).
MAX_NODES_LIMIT = 2**31 - 1
#: The largest copy-logit table we agree to allocate: ``vocab_size * k`` entries (2**28
#: entries, 1 GiB of 32-bit ids).
MAX_TABLE_ENTRIES = 1 << 28


# --------------------------------------------------------------------------------------
# The checks. The kind first (TypeError), then the range (ValueError), in the same order
# and with the same messages as the Rust wrappers.
# --------------------------------------------------------------------------------------


def int_value(value: Any, arg: str, index: Optional[int] = None, wide: bool = False) -> int:
    """``value`` as a Python int; TypeError for bool and non-integers, ValueError past 64 bits
    (``wide``: any size, for a caller with its own range, such as ``generate()``'s ``seed``).

    Every integer argument of the twin (sizes, token ids, capacities) goes through here, so
    that all of them are refused the same way as in the Rust wrappers.
    """
    where = "" if index is None else f"element {index} "
    # bool is a subclass of int in Python, but True is not a token id: refuse it.
    if isinstance(value, bool):
        raise TypeError(f"{arg}: {where}must be an int, got bool")
    try:
        # operator.index accepts ints and numpy integers, and refuses floats and numpy bools.
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{arg}: {where}must be an int, got {type(value).__name__}") from None
    # The Rust side reads a 64-bit integer first; anything wider is out of every range.
    if not wide and not -(2**63) <= v < 2**63:
        raise ValueError(f"{arg}: {where}is out of range, got {v}")
    return v


def at_least(value: Any, arg: str, low: int) -> int:
    """``value`` as an int (:func:`int_value`); ValueError below ``low``."""
    v = int_value(value, arg)
    if v < low:
        raise ValueError(f"{arg}: must be >= {low}, got {v}")
    return v


def int_or_default(value: Any, arg: str, default: int) -> int:
    """``default`` for ``None`` (our convention for "not given"), else ``int_value``."""
    return default if value is None else int_value(value, arg)


def choice_value(value: Any, arg: str, choices: Sequence[str], default: str) -> str:
    """``default`` for ``None``, else ``value`` if it is one of the strings ``choices``
    (a drafter's ``method`` and ``tree``). TypeError for a non-string, ValueError for another
    string, which lists the choices."""
    if value is None:
        return default
    if not isinstance(value, str):
        raise TypeError(f"{arg}: must be a str, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{arg}: unknown {arg} {quoted(value)}; expected one of " + ", ".join(map(quoted, choices)))
    return str(value)  # a str subclass (numpy's str_) as a plain str, as the Rust core reads it


def quoted(text: str) -> str:
    """``text`` in double quotes, as the Rust core writes a string in a message (``{:?}``)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_token(arg: str, index: Optional[int], v: int) -> int:
    """Check that the int ``v`` is a token id in ``[0, MAX_TOKEN_ID]`` (no vocabulary known)."""
    if not 0 <= v <= MAX_TOKEN_ID:
        where = "" if index is None else f"element {index} "
        raise ValueError(f"{arg}: {where}must be in [0, {MAX_TOKEN_ID}], got {v}")
    return v


def check_capacity(capacity: Any) -> int:
    """Validate a capacity (``1 <= capacity <= MAX_CAPACITY``) and return it as ``int``
    (the crate's ``check_capacity``).

    Raises:
        TypeError: not an integer.
        ValueError: out of range.
    """
    value = int_value(capacity, "capacity")
    if not 1 <= value <= MAX_CAPACITY:
        raise ValueError(f"capacity: must be in [1, {MAX_CAPACITY}], got {value}")
    return value


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


# --------------------------------------------------------------------------------------
# Copies. A drafter, an automaton or a table holds one request's state; a shallow copy
# would share it (and a drafter's in-use lock), a deep copy of the automaton's linked
# nodes would recurse once per node. All three are refused, on both backends, with the
# same message (the Rust classes cannot be copied or pickled either).
# --------------------------------------------------------------------------------------


def refuse_copy(class_name: str) -> NoReturn:
    """Raise the ``TypeError`` that ``copy.copy``, ``copy.deepcopy`` and ``pickle`` get."""
    raise TypeError(
        f"{class_name}: cannot be copied or pickled (it holds one request's drafting state); "
        f"build a new {class_name} with the same settings instead"
    )


class NoCopy:
    """Mixin: ``copy.copy``, ``copy.deepcopy`` and ``pickle`` raise :func:`refuse_copy`'s
    ``TypeError`` naming the class.

    One method does it: without ``__copy__`` and ``__deepcopy__``, both ``copy`` functions
    fall back to ``__reduce_ex__``, as ``pickle`` does.
    """

    __slots__ = ()

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        refuse_copy(type(self).__name__)
