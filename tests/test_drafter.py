"""racer_ref.Drafter: every method on both backends, Rust == Python, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import racer_ref
from racer_ref import Drafter, DraftTree
from racer_ref.tree import SOURCE_BOTH, SOURCE_LOGITS, SOURCE_RETRIEVAL
from racer_ref.reference.drafter import METHODS, prompt_lookup

FIELDS = ("tokens", "parents", "depths", "attention_mask", "retrieve_indices", "sources")


def same_tree(a: DraftTree, b: DraftTree) -> None:
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x, y), (name, x, y)


def node_paths(tree: DraftTree) -> list[tuple[int, ...]]:
    """Each node as its root-to-node token path."""
    out: list[tuple[int, ...]] = []
    for i in range(len(tree)):
        p = int(tree.parents[i])
        out.append((out[p] if p >= 0 else ()) + (int(tree.tokens[i]),))
    return out


def test_public_names():
    assert racer_ref.Drafter is Drafter
    assert racer_ref.DraftTree is DraftTree
    assert set(METHODS) == {"racer", "retrieval", "logits", "logits-last", "pld", "ar"}


@pytest.mark.parametrize("method", METHODS)
def test_every_method_returns_a_valid_draft_tree(backend_name, method):
    d = Drafter(method, vocab_size=50, capacity=16, breadth=4, backend=backend_name)
    assert (d.method, d.vocab_size, d.capacity, d.breadth, d.backend) == (method, 50, 16, 4, backend_name)
    stream = np.array([3, 4, 5, 6, 7, 3, 4, 5, 6, 8, 3, 4], dtype=np.int64)
    d.observe(stream, np.stack([np.roll(stream, -1), stream, stream + 1, stream + 2], axis=1))
    d.commit(stream)
    assert d.num_committed == len(stream)
    tree = d.draft(5, last_topk=np.array([6, 9, 1, 2, 3]))
    assert isinstance(tree, DraftTree)
    tree.validate(50)
    assert tree.tokens[0] == 5 and len(tree) <= 16
    if method == "ar":
        assert len(tree) == 1


def test_exact_trees_per_method(backend_name):
    """Hand-checked trees for one context: committed 1 2 3 4 1 5 6 1 2 3 4, root 1."""
    committed = [1, 2, 3, 4, 1, 5, 6, 1, 2, 3, 4]
    # Copy-logit rows: after token t the target predicted (the true next token, 9).
    topk = np.array([[t, 9] for t in committed[1:] + [1]])
    trees = {}
    for method in METHODS:
        d = Drafter(method, vocab_size=20, capacity=8, breadth=2, ngram=4, backend=backend_name)
        d.observe(committed, topk)
        d.commit(committed)
        trees[method] = d.draft(1, last_topk=[5, 2])
    # Row 1 = [2, 9] (the last 1 was followed by 2), row 2 = [3, 9], row 3 = [4, 9], ...
    # logits: root b=2 -> 2 (b=2), 9 (b=1); 2 -> 3 (b=1), 9 (b=1); 3 -> 4; 4 -> 1; 1 -> 2
    assert trees["logits"].tokens.tolist() == [1, 2, 9, 3, 9, 4, 1, 2]
    assert trees["logits"].parents.tolist() == [-1, 0, 0, 1, 1, 3, 5, 6]
    # logits-last: the root's children are 5, 2 (from last_topk), then the table.
    assert trees["logits-last"].tokens.tolist() == [1, 5, 2, 6, 9, 3, 1, 4]
    # pld: context ... 2 3 4 + root 1; last 3-gram "3 4 1" occurred at 2 -> copy 5 6 1 2 3 4 1
    assert trees["pld"].tokens.tolist() == [1, 5, 6, 1, 2, 3, 4, 1]
    assert (trees["pld"].sources[1:] == SOURCE_RETRIEVAL).all()
    assert trees["ar"].tokens.tolist() == [1]
    # retrieval (n = 4): the context suffix "3 4" + root 1 continues with "5" and "5 6".
    retrieval = trees["retrieval"]
    assert retrieval.tokens.tolist()[:2] == [1, 5]
    assert (retrieval.sources[1:] == SOURCE_RETRIEVAL).all()
    # racer: the retrieval tree first (all of it fits), then the logits tree fills up to
    # the capacity with nodes of the pure logits tree, merging where they coincide.
    racer = trees["racer"]
    assert len(racer) == 8
    paths = {name: node_paths(tree) for name, tree in trees.items()}
    with_bit = lambda name, bit: {p for p, s in zip(paths[name], trees[name].sources) if s & bit}
    assert with_bit("racer", SOURCE_RETRIEVAL) == set(paths["retrieval"][1:])
    d = Drafter("logits", vocab_size=20, capacity=64, breadth=2, backend=backend_name)
    d.observe(committed, topk)
    assert with_bit("racer", SOURCE_LOGITS) <= set(node_paths(d.draft(1)))
    assert with_bit("racer", SOURCE_LOGITS)


@pytest.mark.parametrize(
    "context, expected",
    [
        ([1, 2, 3, 4, 5, 6, 9, 2, 3, 4], [5, 6, 9, 2, 3, 4]),  # 3-gram "2 3 4"
        ([7, 1, 7, 2, 7], [2, 7]),  # the most recent earlier match wins
        ([8, 5, 1, 2, 5], [1, 2, 5]),  # falls back to a 1-gram
        ([1, 2, 3], []),  # no match
        ([5], []),
        ([], []),
        (list(range(30)) + [0], list(range(1, 11))),  # at most 10 tokens
        ([4, 4, 4, 4], [4]),  # overlapping: the most recent "4 4 4" is at 0
    ],
)
def test_prompt_lookup(context, expected):
    assert prompt_lookup(context) == expected


@pytest.mark.parametrize("capacity, expected", [(1, [9]), (3, [9, 1, 2]), (64, [9, 1, 2, 3, 9])])
def test_pld_chain_is_capped_by_capacity(backend_name, capacity, expected):
    d = Drafter("pld", vocab_size=10, capacity=capacity, backend=backend_name)
    d.commit([9, 1, 2, 3])
    assert d.draft(9).tokens.tolist() == expected


def test_racer_merges_shared_prefixes(backend_name):
    d = Drafter("racer", vocab_size=50, capacity=8, breadth=2, backend=backend_name)
    d.commit([5, 6, 7, 8, 1, 5])
    d.observe([6], [[7, 9]])
    tree = d.draft(6)
    tree.validate(50)
    # 6 -> 7 comes from both trees and is stored once; 9 only from the copy-logit row.
    children = {int(t): int(s) for t, s, p in zip(tree.tokens, tree.sources, tree.parents) if p == 0}
    assert children == {7: SOURCE_BOTH, 9: SOURCE_LOGITS}
    assert tree.tokens.tolist() == [6, 7, 9, 8, 1, 5]


def test_logits_last_needs_last_topk(backend_name):
    d = Drafter("logits-last", vocab_size=10, breadth=2, backend=backend_name)
    with pytest.raises(ValueError, match="last_topk"):
        d.draft(1)
    with pytest.raises(ValueError, match="at least"):
        d.draft(1, last_topk=[2])
    assert d.draft(1, last_topk=np.array([2, 3], dtype=np.int32)).tokens.tolist() == [1, 2, 3]


def test_reset_forgets_everything(backend_name):
    for method in METHODS:
        d = Drafter(method, vocab_size=30, capacity=12, breadth=3, backend=backend_name)
        fresh = d.draft(2, last_topk=[1, 2, 3])
        d.commit([1, 2, 3, 1, 2, 3, 1])
        d.observe([2, 3], [[3, 1, 4], [1, 2, 5]])
        d.reset()
        assert d.num_committed == 0 and d.table_row(2) == []
        same_tree(d.draft(2, last_topk=[1, 2, 3]), fresh)


# --------------------------------------------------------------------------------------
# Rust == Python on simulated decoding runs
# --------------------------------------------------------------------------------------


def simulate(method, backend, seed, steps=40, vocab=12, capacity=24, breadth=3, ngram=5):
    """A fake decoding loop: draft, observe every tree node, commit root + a random
    accepted path. Returns every draft tree."""
    rng = np.random.default_rng(seed)
    d = Drafter(method, vocab_size=vocab, capacity=capacity, breadth=breadth, ngram=ngram,
                max_nodes=60, backend=backend)
    # A repetitive prompt so that retrieval and PLD find matches.
    phrase = rng.integers(0, vocab, 6)
    prompt = np.concatenate([phrase, rng.integers(0, vocab, 4), phrase[:4]])
    d.observe(prompt, rng.integers(0, vocab, (len(prompt), breadth + 1)))
    d.commit(prompt[:-1])
    root = int(prompt[-1])
    trees = []
    for _ in range(steps):
        tree = d.draft(root, last_topk=rng.integers(0, vocab, breadth))
        trees.append(tree)
        # the target "saw" every node (rejected ones included)
        d.observe(tree.tokens, rng.integers(0, vocab, (len(tree), breadth)))
        row = tree.retrieve_indices[rng.integers(0, len(tree.retrieve_indices))]
        path = row[row >= 0][: int(rng.integers(1, len(row[row >= 0]) + 1))]
        d.commit(tree.tokens[path])
        root = int(rng.integers(0, vocab)) if rng.random() < 0.5 else int(tree.tokens[path[-1]])
    return trees, d.automaton_nodes, [d.table_row(v) for v in range(vocab)]


@pytest.mark.parametrize("method", METHODS)
def test_rust_equals_python_in_decoding_runs(method):
    for seed in range(20):
        rust, rust_nodes, rust_rows = simulate(method, "rust", seed)
        python, python_nodes, python_rows = simulate(method, "python", seed)
        assert (rust_nodes, rust_rows) == (python_nodes, python_rows)
        assert (rust_nodes > 0) == (method in ("racer", "retrieval"))
        assert len(rust) == len(python)
        for a, b in zip(rust, python):
            same_tree(a, b)
        if seed == 0:
            for t in python:
                t.validate(12)


# --------------------------------------------------------------------------------------
# Bad input: a clear error, and nothing changes
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, exc, word",
    [
        (dict(method="nope"), ValueError, "method"),
        (dict(backend="c++"), ValueError, "backend"),
        (dict(vocab_size=None), TypeError, "vocab_size"),
        (dict(vocab_size=0), ValueError, "vocab_size"),
        (dict(capacity=0), ValueError, "capacity"),
        (dict(capacity=-5), ValueError, "capacity"),
        (dict(capacity=5000), ValueError, "capacity"),
        (dict(breadth=0), ValueError, "breadth"),
        (dict(breadth=101), ValueError, "breadth"),
        (dict(ngram=1), ValueError, "ngram"),
        (dict(max_nodes=0), ValueError, "max_nodes"),
        (dict(capacity=2.0), TypeError, ""),
    ],
)
@pytest.mark.parametrize("method", ["racer", "pld"])
def test_constructor_rejects(backend_name, method, kwargs, exc, word):
    args = dict(method=method, vocab_size=100, backend=backend_name)
    args.update(kwargs)
    with pytest.raises(exc, match=word or None):
        Drafter(**args)


BAD_OBSERVE = [
    ([1], [[1, 2]], ValueError),  # k' < breadth = 3
    ([1, 2], [[1, 2, 3]], ValueError),  # rows != n
    ([1.0], [[1, 2, 3]], TypeError),
    ([1], [[1.0, 2.0, 3.0]], TypeError),
    ([[1]], [[1, 2, 3]], ValueError),
    ([30], [[1, 2, 3]], ValueError),
    ([1], [[1, 2, 30]], ValueError),
    ([1], [[-1, 2, 3]], ValueError),
]
BAD_COMMIT = [([1, 30], ValueError), ([-1], ValueError), ([1.5], TypeError), ([[1, 2]], ValueError)]
BAD_DRAFT = [
    (30, None, ValueError),
    (-1, None, ValueError),
    (2**70, None, ValueError),
    (1.5, None, TypeError),
    (1, [1, 2], ValueError),  # shorter than breadth
    (1, [1, 2, 30], ValueError),
    (1, [1.0, 2.0, 3.0], TypeError),
]


@pytest.mark.parametrize("method", METHODS)
def test_bad_input_changes_nothing(backend_name, method):
    d = Drafter(method, vocab_size=30, capacity=12, breadth=3, backend=backend_name)
    d.commit([1, 2, 3, 1, 2])
    d.observe([1, 2, 3], [[2, 4, 5], [3, 6, 7], [1, 8, 9]])
    before = d.draft(3, last_topk=[1, 2, 3])
    rows = [d.table_row(v) for v in range(30)]
    for token_ids, topk_ids, exc in BAD_OBSERVE:
        with pytest.raises(exc):
            d.observe(token_ids, topk_ids)
    for token_ids, exc in BAD_COMMIT:
        with pytest.raises(exc):
            d.commit(token_ids)
    for root, last_topk, exc in BAD_DRAFT:
        with pytest.raises(exc):
            d.draft(root, last_topk)
    assert [d.table_row(v) for v in range(30)] == rows
    assert d.num_committed == 5
    same_tree(d.draft(3, last_topk=[1, 2, 3]), before)


def test_error_messages_match_across_backends():
    drafters = [Drafter("racer", vocab_size=30, breadth=3, backend=b) for b in ("rust", "python")]
    for token_ids, topk_ids, exc in BAD_OBSERVE:
        messages = []
        for d in drafters:
            with pytest.raises(exc) as info:
                d.observe(token_ids, topk_ids)
            messages.append(str(info.value))
        assert messages[0] == messages[1]


# --------------------------------------------------------------------------------------
# The stubs describe the binary, and the twins offer the same API.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["CopyLogitTable", "Drafter"])
def test_stub_matches_binary(name):
    import ast
    from pathlib import Path

    import racer_ref._core as core
    import racer_ref.reference as reference

    stub_file = Path(racer_ref.__file__).with_name("_core.pyi")
    tree = ast.parse(stub_file.read_text())
    stub = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    stub_names = {n.name for n in stub.body if isinstance(n, ast.FunctionDef) and n.name != "__init__"}
    binary_names = {n for n in dir(getattr(core, name)) if not n.startswith("_")}
    assert stub_names == binary_names
    twin = getattr(reference, name)(10, 2) if name == "CopyLogitTable" else reference.Drafter(vocab_size=10)
    assert binary_names <= set(dir(twin))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "build_draft_tree" in functions and callable(core.build_draft_tree)


# --------------------------------------------------------------------------------------
# Differential test: arbitrary call sequences on tiny vocabularies (hypothesis).
# --------------------------------------------------------------------------------------


@st.composite
def call_sequences(draw):
    vocab = draw(st.integers(1, 6))
    breadth = draw(st.integers(1, vocab))
    ngram = draw(st.integers(2, 4))
    config = dict(
        method=draw(st.sampled_from(METHODS)), vocab_size=vocab, capacity=draw(st.integers(1, 12)),
        breadth=breadth, ngram=ngram, max_nodes=draw(st.integers(ngram, 20)),
    )
    token = st.integers(0, vocab - 1)
    row = st.lists(token, min_size=breadth, max_size=breadth + 1)
    calls = draw(st.lists(st.one_of(
        st.tuples(st.just("commit"), st.lists(token, max_size=8)),
        st.tuples(st.just("observe"), st.lists(st.tuples(token, row), max_size=4)),
        st.tuples(st.just("draft"), token, row),
    ), max_size=15))
    return config, calls


@given(call_sequences())
def test_backends_agree_on_any_call_sequence(case):
    config, calls = case
    drafters = [Drafter(**config, backend=b) for b in ("rust", "python")]
    for call in calls:
        if call[0] == "commit":
            for d in drafters:
                d.commit(np.array(call[1], dtype=np.int64))
        elif call[0] == "observe":
            width = min((len(r) for _, r in call[1]), default=config["breadth"])
            tokens = np.array([t for t, _ in call[1]], dtype=np.int64)
            topk = np.array([r[:width] for _, r in call[1]], dtype=np.int64).reshape(len(tokens), width)
            for d in drafters:
                d.observe(tokens, topk)
        else:
            trees = [d.draft(call[1], last_topk=call[2]) for d in drafters]
            same_tree(*trees)
            trees[1].validate(config["vocab_size"])
    assert drafters[0].num_committed == drafters[1].num_committed
    assert drafters[0].automaton_nodes == drafters[1].automaton_nodes


# --------------------------------------------------------------------------------------
# Regressions found by adversarial testing: integer arguments are read alike on both
# backends (bool and float refused, ints past 64 bits a ValueError, None = default).
# --------------------------------------------------------------------------------------


def raised(call) -> tuple[str, str]:
    """``(exception class name, message)`` of ``call()``, or ``("ok", repr(result))``."""
    try:
        return "ok", repr(call())
    except Exception as error:  # noqa: BLE001 - we compare whatever was raised
        return type(error).__name__, str(error)


REGRESS_CONSTRUCTOR = [
    (dict(vocab_size=True), "TypeError", "vocab_size: must be an int, got bool"),
    (dict(vocab_size=10.0), "TypeError", "vocab_size: must be an int, got float"),
    (dict(vocab_size=2**64), "ValueError", "vocab_size: is out of range"),
    (dict(vocab_size=50, capacity=True), "TypeError", "capacity: must be an int, got bool"),
    (dict(vocab_size=50, capacity=2**64), "ValueError", "capacity: is out of range"),
    (dict(vocab_size=50, breadth=8.0), "TypeError", "breadth: must be an int, got float"),
    (dict(vocab_size=50, breadth=2**63), "ValueError", "breadth: is out of range"),
    (dict(vocab_size=50, ngram=True), "TypeError", "ngram: must be an int, got bool"),
    (dict(vocab_size=50, max_nodes=2**64), "ValueError", "max_nodes: is out of range"),
    (dict(vocab_size=50, min_border_depth=True), "TypeError", "min_border_depth: must be an int"),
    (dict(vocab_size=50, method=3), "TypeError", "method: must be a str, got int"),
    # a kind error wins over a range error of an earlier argument, on both backends
    (dict(vocab_size=50, breadth=0, ngram=2.5), "TypeError", "ngram: must be an int"),
    # None means the default (as in Automaton), except for the required vocab_size
    (dict(vocab_size=50, capacity=None, ngram=None, min_border_depth=None), "ok", "capacity=64"),
]


@pytest.mark.parametrize("kwargs, kind, text", REGRESS_CONSTRUCTOR)
def test_regress_constructor_reads_ints_alike(kwargs, kind, text):
    outcomes = [raised(lambda b=b: Drafter(**kwargs, backend=b)) for b in ("rust", "python")]
    assert outcomes[0][0] == outcomes[1][0] == kind
    assert text in outcomes[0][1] and text in outcomes[1][1]
    if kind != "ok":
        assert outcomes[0][1] == outcomes[1][1]


@pytest.mark.parametrize("method", ["racer", "pld"])
def test_regress_root_and_table_row_refuse_bool_float_and_huge_ints(method):
    for backend in ("rust", "python"):
        d = Drafter(method, vocab_size=20, capacity=8, breadth=2, ngram=3, max_nodes=30, backend=backend)
        d.observe([1, 2], [[2, 3], [3, 4]])
        d.commit([1, 2, 1])
        before = (d.num_committed, d.table_row(1), d.draft(1).tokens.tolist())
        for root, exc, text in [(True, TypeError, "root: must be an int, got bool"),
                                (1.0, TypeError, "root: must be an int, got float"),
                                (2**64, ValueError, "root: is out of range")]:
            with pytest.raises(exc, match=text):
                d.draft(root)
        for token, exc in [(True, TypeError), (1.0, TypeError), (2**64, ValueError)]:
            with pytest.raises(exc, match="token: "):
                d.table_row(token)
        assert d.table_row(-1) == d.table_row(99) == []
        assert (d.num_committed, d.table_row(1), d.draft(1).tokens.tolist()) == before


def test_regress_ragged_and_uint64_ids_are_named_value_errors():
    for backend in ("rust", "python"):
        d = Drafter("racer", vocab_size=20, capacity=8, breadth=2, backend=backend)
        with pytest.raises(ValueError, match="token_ids: not an array of ids"):
            d.commit([[1], [2, 3]])
        with pytest.raises(ValueError, match="topk_ids: not an array of ids"):
            d.observe([1, 2], [[1, 2], [3]])
        # uint64 ids past 2**63 (also what numpy makes of the Python int 2**63) must not
        # wrap to small or negative ids: they are out of range, reported as huge.
        for ids in (np.array([2**64 - 1], dtype=np.uint64), np.array([2**64 - 1], dtype=">u8"), [2**63]):
            with pytest.raises(ValueError, match=r"token_ids: token id \d{19,} at index 0"):
                d.commit(ids)
            with pytest.raises(ValueError, match=r"topk_ids: token id \d{19,} at \[0, 1\]"):
                d.observe([1], np.array([[1, 2**63]], dtype=np.uint64))
        assert d.num_committed == 0 and d.table_row(1) == []
