"""The long-context bench set (``racer-ref bench --dataset gsm8k-long``): GSM8K few-shot
prompts of 1,000 to 4,000 tokens, read from the shared data folder by path."""

from __future__ import annotations

import pytest

from racer_ref.harness.datasets import (DATASETS, LONG_CONTEXT_QUESTIONS, LONG_CONTEXT_SHOTS, few_shot_prompt,
                                        load_dataset, load_prompts, long_context_prompts)

ROWS = [{"question": f"q{i}?", "answer": f"a{i}\n#### {i}"} for i in range(30)]


def test_few_shot_prompt_puts_the_following_rows_first_then_asks():
    assert few_shot_prompt(ROWS[:4], 2, 2) == ("Question: q3?\nAnswer: a3\n#### 3\n\n"
                                               "Question: q0?\nAnswer: a0\n#### 0\n\n"
                                               "Question: q2?\nAnswer:")
    with pytest.raises(ValueError, match="shots: expected 1 <= shots < 4"):
        few_shot_prompt(ROWS[:4], 0, 4)
    with pytest.raises(ValueError, match="index: expected 0 <= index < 4"):
        few_shot_prompt(ROWS[:4], 4, 1)


def test_long_context_prompts_one_category_per_shot_count():
    prompts = long_context_prompts(ROWS, shots=(2, 5), questions=3)
    assert [p.prompt_id for p in prompts] == [f"gsm8k-long/{k}-shot/{i}" for k in (2, 5) for i in range(3)]
    assert [p.category for p in prompts] == ["2-shot"] * 3 + ["5-shot"] * 3
    assert not any(p.chat for p in prompts)
    assert prompts[4].text.count("Question: ") == 6 and prompts[4].text.endswith("Question: q1?\nAnswer:")
    with pytest.raises(ValueError, match="at least 40 GSM8K rows, got 30"):
        long_context_prompts(ROWS, questions=40)


@pytest.fixture(scope="module")
def long_set():
    assert "gsm8k-long" in DATASETS
    try:
        return load_dataset("gsm8k-long")
    except FileNotFoundError as exc:
        pytest.skip(f"the GSM8K data is not here: {exc}")


def test_long_context_set_is_1000_to_4000_tokens_on_the_default_tokenizer(long_set):
    from racer_ref.harness.datasets import encode_prompt
    from racer_ref.harness.models import load_default_tokenizer

    assert len(long_set) == len(LONG_CONTEXT_SHOTS) * LONG_CONTEXT_QUESTIONS
    tokenizer = load_default_tokenizer()
    lengths = {k: [len(encode_prompt(tokenizer, p.text, p.chat)) for p in long_set if p.category == f"{k}-shot"]
               for k in LONG_CONTEXT_SHOTS}
    assert all(len(v) == LONG_CONTEXT_QUESTIONS for v in lengths.values())
    assert (min(lengths[8]), max(lengths[8])) == (1280, 2034)
    assert (min(lengths[12]), max(lengths[12])) == (1956, 2937)
    assert (min(lengths[16]), max(lengths[16])) == (2453, 3812)
    assert all(1000 <= n <= 4000 for v in lengths.values() for n in v)
    picked = load_prompts(dataset="gsm8k-long", per_category=1)
    assert [p.prompt_id for p in picked] == [f"gsm8k-long/{k}-shot/0" for k in LONG_CONTEXT_SHOTS]
