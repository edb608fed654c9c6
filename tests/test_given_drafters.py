"""Drafters of the caller's, and the drafter settings of every method: what a hostile-input
trial found after the minimal route (issue 25) and how each case is answered now.

- A drafter whose class racer_ref does not define has every tree checked before the target
  sees it (``racer_ref.guard.CheckedDrafter``): a tree the loop cannot verify is a
  ``RuntimeError`` naming the drafter, never a wrong output or an error deep in the model.
- A ``racer_ref.Drafter`` subclass that overrides ``draft`` is stepped through its override.
- ``method="ar"`` refuses out-of-range drafter settings as every other method does.
- A claim whose clean-up a Ctrl-C cut short leaves the drafter usable.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from transformers import DynamicCache

import racer_ref
import racer_ref.guard as guard
from models import greedy_reference, tiny_model
from racer_ref.tree import DraftTree, tree_attention_mask

VOCAB = 128
PROMPT = [5, 6, 7, 8, 5, 6, 7, 8, 5]


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def truth(model):
    return greedy_reference(model, PROMPT, 30)


class ChainOracle:
    """Drafts the next two true tokens as a chain; ``bad`` spoils one part of the tree."""

    vocab_size = VOCAB

    def __init__(self, truth, bad: str = "") -> None:
        self.truth, self.bad, self.n = truth, bad, 0

    def observe(self, token_ids, topk_ids) -> None:
        pass

    def commit(self, token_ids) -> None:
        self.n += len(token_ids)

    def draft(self, root, last_topk=None):
        i = self.n - len(PROMPT)
        tokens = [root] + self.truth[i + 1:i + 3] if i >= 0 else [root]
        parents = np.arange(-1, len(tokens) - 1)
        depths = np.arange(len(tokens))
        mask = tree_attention_mask(parents)
        if self.bad == "depths" and len(tokens) == 3:
            depths = np.array([0, 1, 1])
        if self.bad == "mask":
            mask = np.ones_like(mask)
        if self.bad == "token":
            tokens = [root, VOCAB + 3]
            parents, depths, mask = np.array([-1, 0]), np.array([0, 1]), tree_attention_mask(np.array([-1, 0]))
        if self.bad == "root":
            tokens = [(root + 1) % VOCAB] + tokens[1:]
        if self.bad == "parents" and len(tokens) == 3:
            parents = np.array([-1, 2, 0])
        if self.bad == "tuple":
            return (np.array(tokens),)
        sources = np.array([0] + [1] * (len(tokens) - 1), dtype=np.uint8)
        return DraftTree(np.array(tokens), parents, depths, mask, None, sources)


def test_a_good_tree_of_the_callers_gives_greedy_output(model, truth):
    assert racer_ref.generate(model, None, PROMPT, 30, drafter=ChainOracle(truth)).token_ids == truth


@pytest.mark.parametrize("bad, message", [
    ("depths", "depths are not consistent with parents"),
    ("mask", "attention_mask row i is not exactly i and its ancestors"),
    ("token", r"a token is outside \[0, 128\)"),
    ("parents", "a parent does not precede its child"),
    ("root", "rooted at"),
    ("tuple", r"tuple, not a racer_ref\.tree\.DraftTree"),
])
def test_a_tree_the_loop_cannot_verify_is_refused_naming_the_drafter(model, truth, bad, message):
    with pytest.raises(RuntimeError, match=rf"^drafter: ChainOracle\.draft\(\) returned .*{message}"):
        racer_ref.generate(model, None, PROMPT, 30, drafter=ChainOracle(truth, bad))


@pytest.mark.parametrize("backend", ["rust", "python"])
def test_a_drafter_subclass_is_stepped_through_its_overrides(model, backend):
    class RootOnly(racer_ref.Drafter):
        drafts = 0

        def draft(self, root, last_topk=None, capacity=None):
            RootOnly.drafts += 1
            return DraftTree.root_only(root)

    d = RootOnly("racer", vocab_size=VOCAB, capacity=16, backend=backend)
    result = racer_ref.generate(model, None, PROMPT, 12, drafter=d)
    assert RootOnly.drafts == len(result.tree_sizes) == 11 and set(result.tree_sizes) == {1}
    assert result.token_ids == greedy_reference(model, PROMPT, 12)


@pytest.mark.parametrize("settings, error, message", [
    (dict(capacity=5000), ValueError, r"capacity: must be in \[1, 4096\], got 5000"),
    (dict(ngram=300), ValueError, r"ngram: must be in \[2, 256\], got 300"),
    (dict(max_nodes=5), ValueError, r"max_nodes: must be in \[ngram, "),
    (dict(tree=1), TypeError, "tree: must be a str, got int"),
    (dict(tree="x"), ValueError, "tree: unknown tree .x.; expected one of \"expected\", \"paper\""),
])
@pytest.mark.parametrize("method", ["ar", "racer"])
def test_every_method_refuses_the_same_drafter_settings(model, method, settings, error, message):
    with pytest.raises(error, match=message):
        racer_ref.generate(model, None, PROMPT, 2, method=method, **settings)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(drafter=racer_ref.Drafter), TypeError, "drafter: expected a drafter, got the class Drafter"),
    (dict(method=1), TypeError, "method: must be a str, got int"),
    (dict(method=np.array(["racer", "pld"])), TypeError, "method: must be a str, got ndarray"),
    (dict(capacity=np.array([5, 6])), TypeError, "capacity: must be an int, got ndarray"),
    (dict(prompt="hello", tokenizer=5), TypeError, "prompt: a string prompt needs a tokenizer .* tokenizer=int"),
])
def test_odd_kinds_are_named_before_any_work(model, kwargs, error, message):
    calls = []
    hook = model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(error, match=message):
            racer_ref.generate(model, **{"prompt": PROMPT, "max_new_tokens": 4, **kwargs})
    finally:
        hook.remove()
    assert calls == []


def test_a_drafter_of_the_callers_must_have_a_usable_breadth_and_not_be_a_raw_core(model, truth):
    bad = ChainOracle(truth)
    bad.breadth = -1
    with pytest.raises(ValueError, match=r"drafter: its breadth must be an int in \[1, vocab_size = 128\], got -1"):
        racer_ref.generate(model, None, PROMPT, 4, drafter=bad)
    from racer_ref._core import Drafter as Core

    with pytest.raises(TypeError, match="drafter: the Rust core's Drafter returns arrays"):
        racer_ref.generate(model, None, PROMPT, 4, drafter=Core("racer", VOCAB))


def test_observe_rejected_takes_a_numpy_bool(model, truth):
    result = racer_ref.generate(model, None, PROMPT, 30, observe_rejected=np.bool_(False))
    assert result.token_ids == truth


def test_a_cache_with_another_number_of_layers_is_refused_before_any_work(model):
    for layers in (1, 4):
        cache = DynamicCache(config=model.config)
        cache.layers = (cache.layers + [type(cache.layers[0])() for _ in range(2)])[:layers]
        with pytest.raises(ValueError, match=f"cache: {layers} layers, the model has 2"):
            racer_ref.generate(model, None, PROMPT, 4, cache=cache)


def test_the_facade_reads_backend_none_as_rust_and_refuses_other_kinds():
    assert racer_ref.Drafter("racer", vocab_size=10, backend=None).backend == "rust"
    with pytest.raises(TypeError, match="backend: must be a str, got int"):
        racer_ref.Drafter("racer", vocab_size=10, backend=1)
    twin = racer_ref.Drafter(np.str_("pld"), vocab_size=10, backend="python")
    assert type(twin.method) is str and type(twin._impl.tree) is str


@pytest.mark.parametrize("backend", ["rust", "python"])
def test_a_claim_cut_short_in_its_clean_up_leaves_the_drafter_usable(model, backend):
    """A Ctrl-C on the claim's clean-up line, before the lock is released (a tracer raises it there)."""
    d = racer_ref.Drafter("racer", vocab_size=VOCAB, capacity=16, backend=backend)
    claim_code = racer_ref.Drafter.claim.__wrapped__.__code__
    lines = [i for i, line in enumerate(open(guard.__file__), 1) if "self._lock.release()" in line]
    target = next(i for i in lines if claim_code.co_firstlineno < i)

    def local(frame, event, arg):
        if event == "line" and frame.f_lineno == target:
            sys.settrace(None)
            raise KeyboardInterrupt
        return local

    sys.settrace(lambda frame, event, arg: local if frame.f_code is claim_code else None)
    try:
        with pytest.raises(KeyboardInterrupt):
            racer_ref.generate(model, None, PROMPT, 10, drafter=d)
    finally:
        sys.settrace(None)
    d.reset()
    assert racer_ref.generate(model, None, PROMPT, 10, drafter=d).token_ids == greedy_reference(model, PROMPT, 10)
