"""Offline replay (racer_ref.harness.replay): it reproduces the live loop's accepted lengths
exactly, and its bound is never beaten by any drafter."""

from __future__ import annotations

import numpy as np
import pytest
from models import single_thread, tiny_model  # noqa: F401  (single_thread: autouse)

from racer_ref import Drafter, generate
from racer_ref.harness.replay import Recording, accepted_bound, bound_mat, fewest_steps, record, replay
from racer_ref.metrics import mean_accepted_tokens

# A prompt that repeats itself, so that retrieval and the copy-logit table both find drafts.
PROMPTS = [[5, 9, 14, 3, 5, 9, 14, 3, 5, 9, 7, 1, 2, 5, 9, 14], [40, 41, 42, 40, 41, 43, 40, 41]]
VARIANTS = [("racer", "paper"), ("racer", "expected"), ("logits", "paper"), ("retrieval", "paper"),
            ("retrieval", "expected")]


@pytest.fixture(scope="module")
def recordings():
    model = tiny_model("llama", vocab_size=128, seed=0)
    return model, [record(model, prompt, max_new_tokens=48) for prompt in PROMPTS]


@pytest.mark.parametrize("method,tree", VARIANTS)
def test_replay_reproduces_generate_without_rejected_rows(recordings, method, tree):
    model, recs = recordings
    total = 0
    for prompt, rec in zip(PROMPTS, recs):
        live = generate(model, None, prompt, max_new_tokens=48, observe_rejected=False,
                        drafter=Drafter(method, vocab_size=128, capacity=6, tree=tree))
        assert list(live.token_ids) == rec.output_ids  # lossless: the recording is the greedy text
        offline = replay(rec, Drafter(method, vocab_size=128, capacity=6, tree=tree))
        assert offline == list(live.accepted_lengths)
        total += sum(offline)
    assert total > 0  # the prompts give the drafters something to accept


@pytest.mark.parametrize("capacity", [2, 4, 8])
def test_no_drafter_beats_the_bound(recordings, capacity):
    _, recs = recordings
    for rec in recs:
        bound = accepted_bound(rec, capacity)
        assert sum(a + 1 for a in bound) == len(rec.output_ids) - 1  # it covers the whole text
        assert max(bound) <= capacity - 1
        for method, tree in VARIANTS:
            for backend in ("rust", "python"):
                lengths = replay(rec, Drafter(method, vocab_size=128, capacity=capacity, tree=tree,
                                              backend=backend))
                assert len(bound) <= len(lengths), (method, tree, backend)
                assert bound_mat(rec, capacity) >= mean_accepted_tokens(lengths)


def test_bound_at_capacity_one_is_plain_decoding(recordings):
    _, recs = recordings
    assert accepted_bound(recs[0], 1) == [0] * (len(recs[0].output_ids) - 1)


def periodic_recording(n: int) -> Recording:
    """1 2 3 1 2 3 ... whose every row names the true next token first."""
    full = [1 + i % 3 for i in range(6 + n)]
    topk = np.array([[full[i + 1] if i + 1 < len(full) else 0, 7] for i in range(len(full))], dtype=np.int64)
    return Recording(full[:6], full[6:], topk, vocab_size=8)


def test_bound_of_a_text_the_table_predicts_everywhere():
    # Every continuation is a chain of rank-0 rows, so each step accepts capacity - 1 tokens
    # until the end: 13 output tokens, 12 to cover after the first root.
    rec = periodic_recording(13)
    assert accepted_bound(rec, 4, breadth=2) == [3, 3, 3]
    assert accepted_bound(rec, 8, breadth=2) == [7, 3]
    assert bound_mat(rec, 4, breadth=2) == 4.0


def test_fewest_steps_is_not_greedy():
    assert fewest_steps([2, 3, 0, 0, 0, 0]) == [0, 3]  # greedy would take 2, 0, 0
    assert fewest_steps([0, 0, 0]) == [0, 0]
    assert fewest_steps([1, 0, 0]) == [1]
    with pytest.raises(ValueError, match="reach: entry 0 is 3"):
        fewest_steps([3, 0, 0])
    with pytest.raises(ValueError, match="reach: entry 1 is -1"):
        fewest_steps([0, -1, 0])


def test_a_malformed_recording_is_refused():
    good = periodic_recording(4)
    with pytest.raises(ValueError, match="output_ids"):
        Recording(good.prompt_ids, [], good.topk_ids[:6], vocab_size=8)
    with pytest.raises(ValueError, match=r"topk_ids: expected shape \(10, k >= 1\), got \(9, 2\)"):
        Recording(good.prompt_ids, good.output_ids, good.topk_ids[:9], vocab_size=8)
    with pytest.raises(ValueError, match="vocab_size = 3"):
        Recording(good.prompt_ids, good.output_ids, good.topk_ids, vocab_size=3)
    with pytest.raises(ValueError, match="2-D integer"):
        Recording(good.prompt_ids, good.output_ids, good.topk_ids.astype(float), vocab_size=8)


def test_bad_arguments_are_named(recordings):
    model, recs = recordings
    with pytest.raises(ValueError, match="capacity"):
        accepted_bound(recs[0], 0)
    with pytest.raises(ValueError, match="breadth"):
        accepted_bound(recs[0], 4, breadth=9)
    with pytest.raises(ValueError, match="max_new_tokens"):
        record(model, PROMPTS[0], max_new_tokens=1)
    with pytest.raises(ValueError, match="k: "):
        record(model, PROMPTS[0], max_new_tokens=4, k=0)
    with pytest.raises(ValueError, match="breadth 16 exceeds"):
        replay(recs[0], Drafter("racer", vocab_size=128, breadth=16))
