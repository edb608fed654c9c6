"""Copy-logit table (docs/explanation/spec.md step 8), Rust core and Python twin, one table of cases."""

from __future__ import annotations

import numpy as np
import pytest

from racer_ref import _core
from racer_ref.reference.copy_logit import CopyLogitTable as PyTable

TABLES = {"rust": _core.CopyLogitTable, "python": PyTable}


@pytest.fixture(params=sorted(TABLES))
def make_table(request):
    """Constructor of the table for one backend."""
    return TABLES[request.param]


def snapshot(table) -> list[list[int]]:
    """Every row of a table (empty for unseen rows)."""
    return [table.row(v) for v in range(table.vocab_size)]


def test_unseen_rows_are_empty(make_table):
    table = make_table(7, 3)
    assert (table.vocab_size, table.k, table.num_seen) == (7, 3, 0)
    assert snapshot(table) == [[]] * 7
    assert not table.is_seen(0)
    # ids outside the vocabulary read as unseen
    assert table.row(7) == [] and table.row(-1) == []


def test_observe_writes_first_k_columns_last_occurrence_wins(make_table):
    table = make_table(10, 2)
    table.observe(np.array([4, 5, 4]), np.array([[1, 2, 3], [6, 7, 8], [9, 0, 1]]))
    assert table.row(4) == [9, 0]
    assert table.row(5) == [6, 7]
    assert table.num_seen == 2
    assert table.is_seen(4) and not table.is_seen(1)
    # A later observe overwrites, the other rows stay.
    table.observe([5], [[3, 3]])
    assert table.row(5) == [3, 3] and table.row(4) == [9, 0]
    table.reset()
    assert snapshot(table) == [[]] * 10 and table.num_seen == 0


@pytest.mark.parametrize(
    "token_ids, topk_ids",
    [
        (np.array([1, 2], dtype=np.int32), np.array([[3, 4], [5, 6]], dtype=np.int32)),
        (np.array([1, 2], dtype=np.uint8), np.array([[3, 4], [5, 6]], dtype=np.uint16)),
        ([1, 2], [[3, 4], [5, 6]]),
        ((1, 2), ((3, 4), (5, 6))),
        # non-contiguous views: every other element of a wider array
        (np.array([1, 9, 2])[::2], np.array([[3, 0, 4, 0], [5, 0, 6, 0]])[:, ::2]),
        # Fortran order
        (np.array([1, 2]), np.asfortranarray(np.array([[3, 4], [5, 6]]))),
    ],
    ids=["int32", "uint8-uint16", "lists", "tuples", "strided", "fortran"],
)
def test_observe_accepts_integer_array_likes(make_table, token_ids, topk_ids):
    table = make_table(10, 2)
    table.observe(token_ids, topk_ids)
    assert table.row(1) == [3, 4] and table.row(2) == [5, 6]


def test_observe_accepts_torch_tensors(make_table):
    torch = pytest.importorskip("torch")
    table = make_table(10, 2)
    values, indices = torch.topk(torch.tensor([[0.1, 0.5, 0.2, 0.9], [0.4, 0.3, 0.2, 0.1]]), 3)
    table.observe(torch.tensor([7, 8]), indices)
    assert table.row(7) == [3, 1] and table.row(8) == [0, 1]


def test_empty_observe_is_a_no_op(make_table):
    table = make_table(5, 2)
    table.observe([], np.zeros((0, 2), dtype=np.int64))
    table.observe(np.array([], dtype=np.int64), np.zeros((0, 3), dtype=np.int64))
    assert table.num_seen == 0


BAD_OBSERVE = [
    # (token_ids, topk_ids, exception, words in the message)
    ([1], [[1]], ValueError, ["topk_ids", "(1, 1)"]),  # k' < k
    ([1, 2], [[1, 2]], ValueError, ["topk_ids", "n = len(token_ids) = 2"]),  # rows != n
    ([[1]], [[1, 2]], ValueError, ["token_ids", "1-D"]),
    ([1], [1, 2], ValueError, ["topk_ids", "2-D"]),
    ([1.0], [[1, 2]], TypeError, ["token_ids", "float64"]),
    ([1], [[1.5, 2.0]], TypeError, ["topk_ids", "float64"]),
    (np.array([True]), [[1, 2]], TypeError, ["token_ids", "bool"]),
    ([10], [[1, 2]], ValueError, ["token_ids", "10", "[0, 10)"]),
    ([-1], [[1, 2]], ValueError, ["token_ids", "-1"]),
    ([1, 2], [[1, 2], [3, 10]], ValueError, ["topk_ids", "10", "[1, 1]"]),
    ([1], [[-5, 2]], ValueError, ["topk_ids", "-5"]),
]


@pytest.mark.parametrize("token_ids, topk_ids, exc, words", BAD_OBSERVE)
def test_bad_observe_raises_before_any_change(make_table, token_ids, topk_ids, exc, words):
    table = make_table(10, 2)
    table.observe([1, 3], [[5, 6], [7, 8]])
    before = snapshot(table)
    with pytest.raises(exc) as info:
        table.observe(token_ids, topk_ids)
    for word in words:
        assert word in str(info.value)
    assert snapshot(table) == before
    assert table.num_seen == 2


def test_columns_past_k_are_ignored(make_table):
    table = make_table(10, 2)
    # column 2 is out of range but not kept
    table.observe([1], [[3, 4, 99]])
    assert table.row(1) == [3, 4]


@pytest.mark.parametrize(
    "vocab_size, k, word",
    [(0, 1, "vocab_size"), (-3, 1, "vocab_size"), (5, 0, "^k: must be in"), (5, 6, "^k: must be in"),
     (1 << 28, 2, "vocab_size")],
)
def test_constructor_rejects(make_table, vocab_size, k, word):
    with pytest.raises(ValueError, match=word):
        make_table(vocab_size, k)


def test_backends_agree_on_random_streams():
    rng = np.random.default_rng(0)
    for _ in range(50):
        vocab, k = int(rng.integers(1, 30)), 0
        k = int(rng.integers(1, min(vocab, 5) + 1))
        tables = [make(vocab, k) for make in TABLES.values()]
        for _ in range(5):
            n = int(rng.integers(0, 12))
            tokens = rng.integers(0, vocab, n)
            topk = rng.integers(0, vocab, (n, k + int(rng.integers(0, 3))))
            for t in tables:
                t.observe(tokens, topk)
        assert snapshot(tables[0]) == snapshot(tables[1])
        assert tables[0].num_seen == tables[1].num_seen


@pytest.mark.parametrize("vocab_size, k, exc, text", [
    (True, 1, TypeError, "vocab_size: must be an int, got bool"),
    (10, True, TypeError, "k: must be an int, got bool"),
    (10.0, 2, TypeError, "vocab_size: must be an int, got float"),
    (2**64, 1, ValueError, "vocab_size: is out of range"),
])
def test_regress_constructor_reads_ints_like_the_automaton(make_table, vocab_size, k, exc, text):
    with pytest.raises(exc, match=text):
        make_table(vocab_size, k)


def test_regress_row_lookups_refuse_non_ints(make_table):
    table = make_table(10, 2)
    table.observe([1], [[2, 3]])
    for token, exc in [(True, TypeError), (1.5, TypeError), (2**64, ValueError)]:
        with pytest.raises(exc, match="token: "):
            table.row(token)
        with pytest.raises(exc, match="token: "):
            table.is_seen(token)
    assert table.row(np.int64(1)) == [2, 3] and table.is_seen(np.uint8(1))
