"""Sampled decoding is lossless: what RACER emits has the target's own distribution.

Chi-square goodness-of-fit tests against exact distributions (no sampling on the reference
side), with fixed seeds so the outcome is deterministic. The same test run on two broken
acceptance rules rejects them, which shows it has the power to see a non-lossless rule.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest
import torch

from models import make_tree, single_thread, tiny_model  # noqa: F401 (single_thread: autouse fixture)
from racer_ref.decoding import generate
from racer_ref.sampling import check_sampling_arguments
from racer_ref.sampling import target_probs
from racer_ref.verify import accept_sampling



def chi_square_p_value(observed: Counter, expected: Dict, n: int) -> float:
    """p-value of Pearson's chi-square test; cells with expected count < 5 are pooled.

    An outcome with expected probability 0 gives p = 0. The survival function of the
    chi-square distribution is the regularised upper incomplete gamma Q(df/2, x/2).
    """
    if any(expected.get(cell, 0.0) <= 0 for cell in observed):
        return 0.0
    big = [c for c, p in expected.items() if p * n >= 5]
    small = [c for c, p in expected.items() if p * n < 5]
    obs = [observed.get(c, 0) for c in big]
    exp = [expected[c] * n for c in big]
    if small:
        obs.append(sum(observed.get(c, 0) for c in small))
        exp.append(sum(expected[c] for c in small) * n)
    obs_a, exp_a = np.array(obs, dtype=float), np.array(exp, dtype=float)
    stat = float(((obs_a - exp_a) ** 2 / exp_a).sum())
    df = len(obs) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def test_chi_square_helper_against_known_values():
    # chi2.sf(3.84, 1) = 0.05, chi2.sf(11.07, 5) = 0.05 (textbook table)
    obs = Counter({0: 60, 1: 40})
    assert chi_square_p_value(obs, {0: 0.5, 1: 0.5}, 100) == pytest.approx(0.0455, abs=1e-3)  # stat = 4
    assert chi_square_p_value(Counter({0: 50, 1: 50}), {0: 0.5, 1: 0.5}, 100) == pytest.approx(1.0)
    assert chi_square_p_value(Counter({2: 1}), {0: 0.5, 1: 0.5}, 1) == 0.0


# A draft tree over a 6-token vocabulary whose root has three children, two of which have
# children of their own; the target's distribution at each node is skewed towards drafts.
VOCAB = 6
TREE = make_tree([0, 1, 2, 3, 4, 5, 4], [-1, 0, 0, 0, 1, 1, 2])
PROBS = torch.tensor([
    [0.05, 0.30, 0.25, 0.20, 0.15, 0.05],  # node 0 (root): children 1, 2, 3
    [0.10, 0.10, 0.10, 0.10, 0.40, 0.20],  # node 1: children 4, 5
    [0.30, 0.20, 0.10, 0.10, 0.20, 0.10],  # node 2: child 4
    [1 / 6] * 6, [1 / 6] * 6, [1 / 6] * 6, [1 / 6] * 6,
])


def exact_first_two() -> Dict[Tuple[int, int], float]:
    """Exact law of (first emitted token, second or -1) of one step under plain sampling.

    The second token is emitted in this step only if the first is a drafted child; it then
    follows the child's row. (Tokens after a non-drafted first token belong to the next step.)
    """
    children = TREE.children()
    child_of = {int(TREE.tokens[c]): c for c in children[0]}
    law = {}
    for t1 in range(VOCAB):
        p1 = float(PROBS[0, t1])
        if t1 in child_of:
            for t2 in range(VOCAB):
                law[(t1, t2)] = p1 * float(PROBS[child_of[t1], t2])
        else:
            law[(t1, -1)] = p1
    return law


def emitted(accepted: List[int], next_root: int) -> Tuple[int, int]:
    block = TREE.tokens[accepted[1:]].tolist() + [next_root]
    return (block[0], block[1] if len(block) > 1 else -1)


def broken_no_renormalisation(probs, tree, generator):
    """Accepts child c with probability p(c), never renormalising after rejections."""
    children, tokens = tree.children(), tree.tokens.tolist()
    accepted, node = [0], 0
    while True:
        rejected = []
        for child in children[node]:
            if torch.rand((), generator=generator).item() < probs[node, tokens[child]].item():
                break
            rejected.append(tokens[child])
        else:
            row = probs[node].clone()
            row[rejected] = 0
            return accepted, int(torch.multinomial(row, 1, generator=generator))
        node = child
        accepted.append(node)


def broken_independent_paths(probs, tree, generator):
    """The not-lossless rule of the official first release: every root-to-leaf path is
    verified with its own independent samples and the longest accepted path wins."""
    best = None
    for row in tree.retrieve_indices.tolist():
        path = [n for n in row if n >= 0]
        accepted = [0]
        for node, child in zip(path, path[1:]):
            token = int(torch.multinomial(probs[node], 1, generator=generator))
            if token != tree.tokens[child]:
                break
            accepted.append(child)
        nxt = int(torch.multinomial(probs[accepted[-1]], 1, generator=generator))
        if best is None or len(accepted) > len(best[0]):
            best = (accepted, nxt)
    return best


def run_rule(rule: Callable, n: int, seed: int) -> Counter:
    generator = torch.Generator().manual_seed(seed)
    return Counter(emitted(*rule(PROBS, TREE, generator)) for _ in range(n))


def test_accept_sampling_emits_the_target_distribution():
    n = 5_000
    p_value = chi_square_p_value(run_rule(accept_sampling, n, seed=1), exact_first_two(), n)
    assert p_value > 1e-3
    torch.testing.assert_close(PROBS.sum(-1), torch.ones(len(PROBS)))  # the rows were not modified


@pytest.mark.parametrize("rule", [broken_no_renormalisation, broken_independent_paths])
def test_the_same_test_rejects_non_lossless_rules(rule):
    n = 5_000
    assert chi_square_p_value(run_rule(rule, n, seed=1), exact_first_two(), n) < 1e-6


def test_target_probs_matches_transformers_generate_warpers():
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0)) * 3
    ours = target_probs(logits, 0.7, 0.8)
    warped = LogitsProcessorList([TemperatureLogitsWarper(0.7), TopPLogitsWarper(0.8)])(None, logits.clone())
    torch.testing.assert_close(ours, torch.softmax(warped, -1))
    assert ((ours > 0).sum(-1) < 50).all()  # top-p really cut something
    torch.testing.assert_close(ours.sum(-1), torch.ones(4))


@pytest.mark.parametrize("temperature, top_p", [(-0.1, 1.0), (float("nan"), 1.0), (1.0, 0.0), (1.0, 1.5)])
def test_bad_sampling_arguments(temperature, top_p):
    with pytest.raises(ValueError):
        check_sampling_arguments(temperature, top_p)


class FixedTreeDrafter:
    """The same draft shape below every root: children ``first`` each with children ``second``."""

    method = "fixed"

    def __init__(self, first, second):
        self.first, self.second = list(first), list(second)

    def observe(self, token_ids, topk_ids):
        pass

    def commit(self, token_ids):
        pass

    def draft(self, root, last_topk=None):
        tokens, parents = [root] + self.first, [-1] + [0] * len(self.first)
        for i in range(len(self.first)):
            tokens += self.second
            parents += [1 + i] * len(self.second)
        return make_tree(tokens, parents)


@pytest.mark.parametrize("rule", ["lossless", "broken_independent_paths"])
def test_generate_sampling_matches_exact_marginals_of_the_target(rule, monkeypatch):
    """End to end: the 2nd and 3rd new tokens (the first drafted positions) follow the
    target's exact marginals, computed by enumerating every context. With the acceptance
    rule swapped for the official first release's, the same test fails."""
    if rule != "lossless":
        monkeypatch.setattr("racer_ref.decoding.accept_sampling", broken_independent_paths)
    vocab, temperature, top_p, prompt = 12, 0.8, 0.95, [1, 2, 3, 4, 5]
    model = tiny_model("llama", vocab_size=vocab, scale=2.0)
    with torch.no_grad():
        p1 = target_probs(model(torch.tensor([prompt])).logits[0, -1:], temperature, top_p)[0]  # (V,)
        ctx2 = torch.tensor([prompt + [a] for a in range(vocab)])
        p2 = target_probs(model(ctx2).logits[:, -1], temperature, top_p)  # (V, V): p(t2 | t1)
        ctx3 = torch.tensor([prompt + [a, b] for a in range(vocab) for b in range(vocab)])
        p3 = target_probs(model(ctx3).logits[:, -1], temperature, top_p).reshape(vocab, vocab, vocab)
    joint12 = p1[:, None] * p2  # (V, V)
    marginal2 = joint12.sum(0)  # (V,)
    marginal3 = (joint12[:, :, None] * p3).sum((0, 1))  # (V,)
    drafter = FixedTreeDrafter(marginal2.argsort(descending=True)[:3].tolist(),
                               marginal3.argsort(descending=True)[:2].tolist())
    n = 600
    second, third, accepted = Counter(), Counter(), 0
    for i in range(n):
        result = generate(model, None, prompt, max_new_tokens=3, temperature=temperature, top_p=top_p,
                          drafter=drafter, seed=i, eos_token_id=[])
        assert len(result.token_ids) == 3
        second[result.token_ids[1]] += 1
        third[result.token_ids[2]] += 1
        accepted += result.accepted_lengths[0]
    assert accepted > n * 0.2  # drafts were accepted often, so the rule was exercised
    p_second = chi_square_p_value(second, dict(enumerate(marginal2.tolist())), n)
    p_third = chi_square_p_value(third, dict(enumerate(marginal3.tolist())), n)
    if rule == "lossless":
        assert p_second > 1e-3 and p_third > 1e-3
    else:
        assert p_second < 1e-6


def test_generate_sampling_is_reproducible_with_a_seed():
    model = tiny_model("qwen2")
    drafter_args = ([3, 7, 9], [1, 2])
    runs = [generate(model, None, [4, 8, 15, 16, 23, 42], max_new_tokens=20, temperature=1.0, top_p=0.9,
                     drafter=FixedTreeDrafter(*drafter_args), seed=seed).token_ids for seed in (5, 5, 6)]
    assert runs[0] == runs[1] and len(runs[0]) == 20
    assert runs[0] != runs[2]


def test_regress_sampling_arguments_accept_any_real_number_and_type_check():
    check_sampling_arguments(np.float32(0.5), np.float64(0.9))  # numpy scalars are numbers
    check_sampling_arguments(0, 1)
    for temperature, top_p in [("1", 1.0), (None, 1.0), (True, 1.0), (1.0, "0.5"), (1.0, torch.tensor(0.5))]:
        with pytest.raises(TypeError):
            check_sampling_arguments(temperature, top_p)
    with pytest.raises(ValueError, match="temperature"):
        check_sampling_arguments(1e-40, 1.0)  # not a normal float32: 1 / t overflows


@pytest.mark.parametrize("top_p", [1.0, 0.5])
def test_regress_tiny_temperature_gives_the_argmax_not_nan(top_p):
    # Before: logits / 1e-37 overflowed float32 to +-inf and softmax returned NaN, so
    # torch.multinomial raised deep inside generate().
    logits = torch.tensor([[50.0, 49.0, -50.0, 10.0], [-3.0, 7.0, 7.0, 1.0]])
    probs = target_probs(logits, 1e-37, top_p)
    assert torch.isfinite(probs).all()
    assert probs[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert probs[1, 0] == probs[1, 3] == 0 and probs[1].sum() == pytest.approx(1.0)
