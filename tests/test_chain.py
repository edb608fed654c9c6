"""The best chain of a draft tree (rust/src/chain.rs, its twin racer_ref.reference.chain) and
ChainDrafter: what the vLLM proposer drafts, in our own loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models import greedy_reference, tiny_model
from racer_ref import Drafter, generate
from racer_ref._core import best_chain as rust_chain
from racer_ref.integrations.chain import ChainDrafter
from racer_ref.reference.chain import best_chain as twin_chain

CHAINS = {"rust": rust_chain, "python": twin_chain}


@pytest.fixture(params=sorted(CHAINS))
def best_chain(request):
    return CHAINS[request.param]


def chain_list(fn, parents, length):
    return [int(i) for i in fn(parents, length)]


def test_follows_first_children(best_chain):
    parents = [-1, 0, 0, 1, 1, 3]  # 0 -> {1, 2}, 1 -> {3, 4}, 3 -> {5}
    assert chain_list(best_chain, parents, 3) == [1, 3, 5]
    assert chain_list(best_chain, parents, 2) == [1, 3]
    assert chain_list(best_chain, parents, 9) == [1, 3, 5]
    assert chain_list(best_chain, np.array(parents, dtype=np.int32), 0) == []
    assert chain_list(best_chain, [-1], 4) == []


@pytest.mark.parametrize("parents, length, error, match", [
    ([], 3, ValueError, "parents: must hold the root"),
    ([0, 0], 3, ValueError, r"parents: parents\[0\] must be -1"),
    ([-1, 0, 2], 3, ValueError, r"parents: parents\[2\] must be in \[0, 2\)"),
    ([[-1, 0]], 3, ValueError, "parents: expected a 1-D array"),
    ([-1.0, 0.0], 3, TypeError, "parents: expected integer"),
    ([-1, 0], -1, ValueError, "length: must be >= 0, got -1"),
    ([-1, 0], 2.0, TypeError, "length: must be an int"),
    ([-1, 0], True, TypeError, "length: must be an int"),
])
def test_errors_name_the_argument(best_chain, parents, length, error, match):
    with pytest.raises(error, match=match):
        best_chain(parents, length)


@st.composite
def bfs_trees(draw):
    """Parent arrays of random breadth-first trees (each node's parent precedes it, depths
    never decrease)."""
    n = draw(st.integers(1, 40))
    parents, depth = [-1], [0]
    for i in range(1, n):
        # A parent at least as deep as the previous node's parent keeps the order breadth-first.
        low = parents[i - 1] if i > 1 else 0
        p = draw(st.integers(max(low, 0), i - 1))
        parents.append(p)
        depth.append(depth[p] + 1)
    return parents


@settings(max_examples=200, deadline=None)
@given(bfs_trees(), st.integers(0, 12))
def test_rust_equals_twin_and_the_first_child_path(parents, length):
    got = chain_list(rust_chain, parents, length)
    assert got == twin_chain(parents, length)
    # The oracle: walk down taking the smallest-index child.
    expect, node = [], 0
    while len(expect) < length:
        kids = [i for i, p in enumerate(parents) if p == node]
        if not kids:
            break
        node = kids[0]
        expect.append(node)
    assert got == expect


def test_the_chain_of_a_racer_tree_is_retrieval_first_then_copy_logit():
    d = Drafter("racer", vocab_size=20, capacity=16, breadth=2)
    d.commit([5, 6, 7, 8, 9, 5, 6])
    d.observe([7, 9], [[8, 11], [12, 13]])
    chain = ChainDrafter(d, 4)
    tree = chain.draft(7)
    tree.validate(20)
    # "7 8 9 5 6" was committed: the automaton continues 8 9 5 6 after root 7.
    assert tree.tokens.tolist() == [7, 8, 9, 5, 6]
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3]
    d2 = Drafter("logits", vocab_size=20, capacity=16, breadth=2)
    d2.observe([7, 8], [[8, 11], [12, 13]])
    # No automaton: the copy-logit table's top-1 at each step, 7 -> 8 -> 12.
    assert ChainDrafter(d2, 4).draft(7).tokens.tolist() == [7, 8, 12]


def test_chain_drafter_arguments():
    d = Drafter("racer", vocab_size=20)
    with pytest.raises(ValueError, match="length: must be >= 1"):
        ChainDrafter(d, 0)
    with pytest.raises(TypeError, match="length: must be an int"):
        ChainDrafter(d, 2.5)
    with pytest.raises(TypeError, match="drafter: expected"):
        ChainDrafter(object(), 3)
    assert ChainDrafter(d, 3).method == "racer-chain"


@pytest.mark.parametrize("backend", ["rust", "python"])
def test_generate_with_the_best_chain_equals_greedy(backend):
    model = tiny_model("llama")
    prompt = (torch.randint(0, 128, (9,), generator=torch.Generator().manual_seed(2)).tolist() * 4)[:34]
    chain = ChainDrafter(Drafter("racer", 128, 64, backend=backend), 5)
    result = generate(model, prompt=prompt, max_new_tokens=40, drafter=chain)
    assert result.token_ids == greedy_reference(model, prompt, 40)
    assert result.method == "racer-chain"
    assert max(result.tree_sizes) <= 6 and max(result.accepted_lengths) >= 2  # copies were accepted
