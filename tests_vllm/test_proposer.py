"""racer_ref.integrations.vllm.RacerProposer without an engine: the per-request bookkeeping, on the
arrays vLLM passes (fake batches), checked against a racer_ref drafter fed by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import racer_ref.integrations.vllm as rv
from racer_ref import Drafter
from racer_ref.integrations.chain import ChainDrafter

VOCAB = 50


def config(k=3, max_num_seqs=4, max_model_len=64):
    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=max_model_len, get_vocab_size=lambda: VOCAB),
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs))


@pytest.fixture
def hooked(monkeypatch):
    monkeypatch.setattr(rv, "_HOOKED", True)


class Batch:
    """vLLM's per-row arrays: token_ids_cpu (rows, max_model_len), num_tokens_no_spec."""

    def __init__(self, rows, max_model_len=64):
        self.token_ids = np.zeros((rows, max_model_len), dtype=np.int32)
        self.num = np.zeros(rows, dtype=np.int32)

    def set(self, row, tokens):
        self.token_ids[row, :len(tokens)] = tokens
        self.num[row] = len(tokens)


def test_refused_without_the_runner_hooks():
    with pytest.raises(RuntimeError, match="VLLM_PLUGINS"):
        rv.RacerProposer(config())


def test_propose_needs_request_ids(hooked):
    p = rv.RacerProposer(config())
    batch = Batch(1)
    batch.set(0, [1, 2, 3])
    with pytest.raises(RuntimeError, match="no request ids"):
        p.propose([[3]], batch.num, batch.token_ids)


def test_chains_equal_a_drafter_fed_by_hand_per_request(hooked):
    """Two requests in one batch: each gets its own automaton and copy-logit table, and its
    chain is the best chain of a racer_ref Drafter fed the same tokens and top-k."""
    p = rv.RacerProposer(config(k=3))
    texts = {"a": [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5], "b": [20, 21, 22, 23, 20, 21]}
    batch = Batch(2)
    for row, rid in enumerate(texts):
        batch.set(row, texts[rid])
    # Prefill step: one logits row per request (the last prompt position).
    logits = torch.zeros(2, VOCAB)
    logits[0, 6] = 3; logits[0, 40] = 2  # the target after a's last prompt token, 9
    logits[1, 22] = 3; logits[1, 41] = 2
    p.begin_step(["a", "b"], set())
    p.observe_logits(logits, None, None)
    chains = p.propose([[texts["a"][-1]], [texts["b"][-1]]], batch.num, batch.token_ids)
    refs = {}
    for rid, chain in zip(texts, chains):
        ref = ChainDrafter(Drafter("racer", VOCAB, 64, 8), 3)
        row = 0 if rid == "a" else 1
        tokens = texts[rid]
        ref.observe([tokens[-2]], logits[row:row + 1].topk(8).indices.numpy())
        ref.commit(tokens[:-1])
        tree = ref.draft(tokens[-1])
        assert chain == tree.tokens[1:].tolist()
        refs[rid] = ref
    assert chains[0] == [6, 7, 8]  # a's 5 was followed by 6 7 8 before
    assert chains[1] == [22, 23, 20]
    assert len(p.drafters) == 2 and p.stats["observed_rows"] == 2 and p.stats["misaligned"] == 0


def test_verified_rows_feed_the_copy_logit_table(hooked):
    """A decode step with drafts: every verified position's top-k lands in the table of that
    request, the fed token being the last committed token, then each draft."""
    p = rv.RacerProposer(config(k=2))
    batch = Batch(1)
    prompt = [1, 2, 3]
    batch.set(0, prompt + [4])
    p.begin_step(["r"], set())
    p.observe_logits(torch.zeros(1, VOCAB), None, None)
    p.propose([[4]], batch.num, batch.token_ids)
    # vLLM verified drafts [10, 11] after root 4 and accepted 10, then sampled 12.
    batch.set(0, prompt + [4, 10, 12])
    logits = torch.zeros(3, VOCAB)
    logits[0, 10] = 1; logits[1, 12] = 1; logits[2, 30] = 1
    p.begin_step(["r"], set())
    p.observe_logits(logits, [2], torch.tensor([10, 11]))
    p.propose([[10, 12]], batch.num, batch.token_ids)
    drafter = p.drafters.get("r")[0]
    assert drafter.table_row(4)[0] == 10
    assert drafter.table_row(10)[0] == 12
    assert drafter.table_row(11)[0] == 30  # the rejected draft's row too (paper default)
    assert p.stats["misaligned"] == 0 and p.stats["observed_rows"] == 1 + 3
    # Told the wrong drafts: the rows are not trusted, and counted.
    batch.set(0, prompt + [4, 10, 12, 13])
    p.begin_step(["r"], set())
    p.observe_logits(torch.zeros(2, VOCAB), [1], torch.tensor([7]))
    p.propose([[13]], batch.num, batch.token_ids)
    assert p.stats["misaligned"] == 0  # [13] accepted no draft: nothing to contradict
    batch.set(0, prompt + [4, 10, 12, 13, 14, 15])
    p.begin_step(["r"], set())
    p.observe_logits(torch.zeros(2, VOCAB), [1], torch.tensor([7]))  # but 14 was accepted
    p.propose([[14, 15]], batch.num, batch.token_ids)
    assert p.stats["misaligned"] == 1


def test_drafters_are_freed_and_bounded(hooked):
    p = rv.RacerProposer(config(max_num_seqs=2))
    batch = Batch(2)
    batch.set(0, [1, 2, 3])
    batch.set(1, [4, 5, 6])
    p.begin_step(["x", "y"], set())
    p.propose([[3], [6]], batch.num, batch.token_ids)
    assert "x" in p.drafters and "y" in p.drafters
    p.begin_step(["y"], {"x"})  # x finished
    p.propose([[6]], batch.num[1:], batch.token_ids[1:])
    assert "x" not in p.drafters and len(p.drafters) == 1
    # Three live requests, room for two: the least recently used is dropped.
    batch = Batch(3)
    for row in range(3):
        batch.set(row, [1, 2, 3])
    p.begin_step(["y", "z", "w"], set())
    p.propose([[3], [3], [3]], batch.num, batch.token_ids)
    assert len(p.drafters) == 2 and "y" not in p.drafters and p.drafters.dropped == 1


def test_rows_without_a_sample_and_full_rows_get_no_draft(hooked):
    p = rv.RacerProposer(config(k=4, max_model_len=8))
    batch = Batch(2, max_model_len=8)
    batch.set(0, [1, 2, 3])  # a prefill chunk: nothing sampled
    batch.set(1, [1, 2, 1, 2, 1, 2, 1, 2])  # at max_model_len
    p.begin_step(["a", "b"], set())
    assert p.propose([[], [2]], batch.num, batch.token_ids) == [[], []]
    assert len(p.drafters) == 0


def test_retrieval_proposer_reads_no_topk(hooked):
    p = rv.RacerRetrievalProposer(config())
    p.observe_logits(torch.zeros(1, VOCAB), None, None)
    assert not p.wants_topk and p._rows == []


# ---- issue 32, item 6: one bad row (vLLM's -1 placeholder, an id >= vocab_size) -------------

A = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5]
B = [20, 21, 22, 23, 20, 21]


def step(p, rows, logits=None, num_draft_tokens=None, draft_token_ids=None):
    """One engine step on fake arrays: ``rows`` is ``[(request id, tokens, sampled), ...]``."""
    batch = Batch(len(rows))
    for row, (_, tokens, _) in enumerate(rows):
        batch.set(row, tokens)
    p.begin_step([rid for rid, _, _ in rows], set())
    p.observe_logits(logits, num_draft_tokens, draft_token_ids)
    return p.propose([sampled for _, _, sampled in rows], batch.num, batch.token_ids)


def prefill_logits(top, width=VOCAB):
    """One logits row per request, each with its own best token, the rest without ties."""
    logits = torch.randn(len(top), width, generator=torch.Generator().manual_seed(0))
    for row, token in enumerate(top):
        logits[row, token] = 10.0
    return logits


def drafter_state(p, rid):
    drafter, committed = p.drafters.get(rid)
    return [committed, drafter.num_committed, drafter.automaton_nodes,
            [drafter.table_row(t) for t in range(VOCAB)]]


@pytest.mark.parametrize("bad", [-1, VOCAB])
def test_a_bad_row_proposes_nothing_and_the_others_keep_their_drafts(hooked, bad):
    with_bad, without = rv.RacerProposer(config(k=3)), rv.RacerProposer(config(k=3))
    logits = prefill_logits([6, 22])
    chains = step(with_bad, [("a", A, [5]), ("b", [20, 21, 22, bad], [bad])], logits)
    alone = step(without, [("a", A, [5])], logits[:1])
    assert alone == [[6, 7, 8]]
    assert chains == [alone[0], []]
    assert with_bad.stats["bad_rows"] == 1 and without.stats["bad_rows"] == 0
    assert "b" not in with_bad.drafters  # nothing was built, observed or committed for it
    assert with_bad.stats["proposals"] == 1 and with_bad.stats["observed_rows"] == 1


@pytest.mark.parametrize("bad", [-1, VOCAB])
def test_after_a_bad_step_a_request_goes_on_as_if_it_had_not_happened(hooked, bad):
    """Request b's second step holds a bad id at its newest position (async scheduling's
    placeholder, not yet filled in); its third step is good again. Its drafter is exactly
    the drafter of a run whose second batch did not hold b at all."""
    with_bad, without = rv.RacerProposer(config(k=3)), rv.RacerProposer(config(k=3))
    for p in (with_bad, without):
        step(p, [("a", A, [5]), ("b", B, [21])], prefill_logits([6, 22]))
    before = drafter_state(with_bad, "b")
    second = step(with_bad, [("a", A + [6], [6]), ("b", B + [bad], [bad])], prefill_logits([7, 0]))
    alone = step(without, [("a", A + [6], [6])], prefill_logits([7]))
    assert second == [alone[0], []] and with_bad.stats["bad_rows"] == 1
    assert drafter_state(with_bad, "b") == before  # nothing committed or observed from it
    rows = [("a", A + [6, 7], [7]), ("b", B + [22], [22])]
    third = [step(p, rows, prefill_logits([8, 23])) for p in (with_bad, without)]
    assert third[0] == third[1]
    assert third[0][1] == [23, 20, 21]  # b's automaton knows 22 23 20 21 from its prompt
    assert drafter_state(with_bad, "b") == drafter_state(without, "b")
    assert drafter_state(with_bad, "b")[1] == len(B)  # B but its root (21) at first, the 21 now


@pytest.mark.parametrize("where", ["draft -1", "top-k id == vocab_size"])
def test_a_bad_verified_row_proposes_nothing_and_the_others_keep_their_drafts(hooked, where):
    """The sampling step's side (observe_logits): row b's verified drafts hold vLLM's -1, or
    the logits are wider than the vocabulary and b's top-1 is an id past it."""
    with_bad, without = rv.RacerProposer(config(k=3)), rv.RacerProposer(config(k=3))
    for p in (with_bad, without):
        assert step(p, [("a", A, [5]), ("b", B, [21])], prefill_logits([6, 22])) == [[6, 7, 8], [22, 23, 20]]
    b_before = drafter_state(with_bad, "b")
    # a verified [6, 7, 8] and accepted them all (bonus 9); b verified three drafts, accepted none.
    logits = prefill_logits([7, 8, 9, 6] + [30, 31, 32, 33], width=VOCAB + 1)
    logits[:4, VOCAB] = -float("inf")  # a's rows never pick the id past the vocabulary
    b_drafts = [22, 23, 20]
    if where == "draft -1":
        b_drafts = [-1, -1, -1]
        logits[4:, VOCAB] = -float("inf")
    else:
        logits[4, VOCAB] = 100.0  # b's first verified position: top-1 is id VOCAB
    rows = [("a", A + [6, 7, 8, 9], [6, 7, 8, 9]), ("b", B + [30], [30])]
    chains = step(with_bad, rows, logits, [3, 3], torch.tensor([6, 7, 8] + b_drafts))
    alone = step(without, rows[:1], logits[:4], [3], torch.tensor([6, 7, 8]))
    assert chains == [alone[0], []]
    assert len(alone[0]) == 3
    assert with_bad.stats["bad_rows"] == 1 and without.stats["bad_rows"] == 0
    assert with_bad.stats["misaligned"] == 0
    assert drafter_state(with_bad, "a") == drafter_state(without, "a")
    assert drafter_state(with_bad, "b") == b_before  # nothing observed or committed from b
