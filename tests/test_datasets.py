"""Prompt sets: the named datasets, every file format, selection and the chat template."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from racer_ref.harness import datasets as D


# ----------------------------------------------------------------------------- named sets


@pytest.mark.parametrize(
    "name, count, first_id, first_category, snippet",
    [
        ("humaneval", 164, "HumanEval/0", "humaneval", "def has_close_elements("),
        ("mtbench", 80, "81", "writing", "Compose an engaging travel blog post"),
        # These three are read from the shared data folder (tests/conftest.py: shared_data).
        pytest.param("specbench", 480, "81", "writing", "Compose an engaging travel blog post",
                     marks=pytest.mark.shared_data("specbench")),
        pytest.param("gsm8k", 1319, "gsm8k/0", "gsm8k", "Janet\u2019s ducks lay 16 eggs",
                     marks=pytest.mark.shared_data("gsm8k")),
        pytest.param("mgsm", 250, "mgsm/0", "mgsm", "Janet\u2019s ducks lay 16 eggs",
                     marks=pytest.mark.shared_data("mgsm")),
    ],
)
def test_named_datasets_load_in_file_order(name, count, first_id, first_category, snippet):
    prompts = D.load_dataset(name)
    assert len(prompts) == count
    assert len({p.prompt_id for p in prompts}) == count  # ids are unique
    first = prompts[0]
    assert (first.prompt_id, first.category) == (first_id, first_category)
    assert snippet in first.text
    assert all(p.chat for p in prompts)


@pytest.mark.shared_data("specbench")
def test_specbench_categories_and_turns():
    prompts = D.load_dataset("specbench")
    counts = Counter(p.category for p in prompts)
    assert len(counts) == 13
    assert counts["translation"] == 80 and counts["writing"] == 10
    # Question 81 has two turns: the first is the prompt, the second a follow-up.
    assert "Rewrite your previous response" not in prompts[0].text
    assert len(prompts[0].turns) == 2 and prompts[0].turns[0] == prompts[0].text
    assert prompts[0].follow_ups[0].startswith("Rewrite your previous response")
    # The eight MT-Bench categories (80 questions) have two turns, the five others one.
    two = Counter(p.category for p in prompts if len(p.turns) == 2)
    assert sum(two.values()) == 80 and len(two) == 8 and "translation" not in two
    assert all(len(p.turns) == 1 for p in prompts if p.category in ("translation", "rag", "qa"))


@pytest.mark.shared_data("specbench")
def test_specbench_three_per_category_is_the_issue_subset():
    prompts = D.load_prompts(dataset="specbench", per_category=3)
    assert len(prompts) == 39
    assert set(Counter(p.category for p in prompts).values()) == {3}
    assert [p.prompt_id for p in prompts[:4]] == ["81", "82", "83", "91"]


def test_humaneval_first_twenty():
    prompts = D.load_prompts(dataset="humaneval", limit=20)
    assert [p.prompt_id for p in prompts] == [f"HumanEval/{i}" for i in range(20)]


def test_unknown_dataset_is_a_value_error():
    with pytest.raises(ValueError, match="dataset: expected one of"):
        D.dataset_path("nope")


def test_shared_dir_follows_the_environment(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("RACER_REF_SHARED", str(tmp_path))
    assert D.shared_dir() == tmp_path


# ----------------------------------------------------------------------------- formats


def _write_jsonl(path: Path, rows, gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def test_specbench_format(tmp_path):
    path = _write_jsonl(tmp_path / "q.jsonl", [
        {"question_id": 7, "category": "math", "turns": ["one", "two"]},
        {"question_id": 8, "category": "qa", "turns": ["three"]},
    ])
    assert D.read_questions(path) == [D.Prompt("7", "math", "one", follow_ups=("two",)),
                                      D.Prompt("8", "qa", "three")]
    assert D.read_questions(path)[0].turns == ("one", "two")


def test_gsm8k_format_uses_the_file_name_as_category(tmp_path):
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    path = _write_jsonl(folder / "test.jsonl", [{"question": "2+2?", "answer": "#### 4"},
                                                {"question": "3+3?", "answer": "#### 6"}])
    assert D.read_questions(path) == [D.Prompt("gsm8k/0", "gsm8k", "2+2?"),
                                      D.Prompt("gsm8k/1", "gsm8k", "3+3?")]


def test_humaneval_format_gzipped(tmp_path):
    path = _write_jsonl(tmp_path / "HumanEval.jsonl.gz",
                        [{"task_id": "HumanEval/9", "prompt": "def f():\n"}], gz=True)
    assert D.read_questions(path) == [D.Prompt("HumanEval/9", "humaneval", "def f():\n")]


def test_mgsm_tsv(tmp_path):
    path = tmp_path / "mgsm_en.tsv"
    path.write_text('A "quoted" question?\t3\n\nSecond one\t4\n')
    assert D.read_questions(path) == [D.Prompt("mgsm/0", "mgsm", 'A "quoted" question?'),
                                      D.Prompt("mgsm/2", "mgsm", "Second one")]


def test_plain_prompt_format(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl", [{"prompt": "hi", "id": "a", "chat": False},
                                                  {"prompt": "yo"}])
    assert D.read_questions(path) == [D.Prompt("a", "mine", "hi", chat=False), D.Prompt("1", "mine", "yo")]


def test_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="questions: no such file"):
        D.read_questions(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no rows"):
        D.read_questions(empty)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "ok"}\n{not json\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not valid JSON"):
        D.read_questions(broken)
    odd = _write_jsonl(tmp_path / "odd.jsonl", [{"text": "x"}])
    with pytest.raises(ValueError, match=r"unrecognised row format with keys \['text'\]"):
        D.read_questions(odd)
    no_turns = _write_jsonl(tmp_path / "nt.jsonl", [{"question_id": 1, "turns": []}])
    with pytest.raises(ValueError, match="'turns' must be a non-empty list"):
        D.read_questions(no_turns)
    empty_turn = _write_jsonl(tmp_path / "et.jsonl", [{"question_id": 1, "turns": ["a", ""]}])
    with pytest.raises(ValueError, match=r"row 0: 'turns' must be a non-empty list of non-empty strings"):
        D.read_questions(empty_turn)


# ----------------------------------------------------------------------------- selection


def test_select_per_category_then_limit_keeps_file_order():
    prompts = [D.Prompt(str(i), c, "t") for i, c in enumerate("aabacbbc")]
    picked = D.select(prompts, per_category=2)
    assert [p.prompt_id for p in picked] == ["0", "1", "2", "4", "5", "7"]
    assert [p.prompt_id for p in D.select(prompts, per_category=2, limit=3)] == ["0", "1", "2"]
    assert D.select(prompts) == prompts
    assert D.iter_categories(prompts) == ["a", "b", "c"]


@pytest.mark.parametrize("kwargs", [{"per_category": 0}, {"limit": -1}, {"limit": 1.5}])
def test_select_rejects_bad_bounds(kwargs):
    with pytest.raises(ValueError, match="expected an integer >= 1"):
        D.select([D.Prompt("0", "a", "t")], **kwargs)


def test_load_prompts_needs_exactly_one_source(tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        D.load_prompts()
    with pytest.raises(ValueError, match="exactly one"):
        D.load_prompts(dataset="humaneval", questions=tmp_path / "x.jsonl")


# ----------------------------------------------------------------------------- tokenizing


@pytest.fixture(scope="module")
def tokenizer():
    from racer_ref.harness.models import load_default_tokenizer

    return load_default_tokenizer()


def test_chat_template_wraps_one_user_turn(tokenizer):
    ids = D.encode_prompt(tokenizer, "Say hi.", chat=True)
    assert all(isinstance(t, int) for t in ids)
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n")


def test_raw_prompt_is_tokenized_as_is(tokenizer):
    ids = D.encode_prompt(tokenizer, "def f(x):", chat=False)
    assert ids == tokenizer("def f(x):")["input_ids"]
    assert tokenizer.decode(ids) == "def f(x):"


def test_empty_prompt_is_rejected(tokenizer):
    with pytest.raises(ValueError, match="text: expected a non-empty string"):
        D.encode_prompt(tokenizer, "")


def test_second_turn_follows_the_first_answer_in_the_chat_template(tokenizer):
    one = D.encode_conversation(tokenizer, ["Say hi."], [])
    assert one == D.encode_prompt(tokenizer, "Say hi.")
    ids = D.encode_conversation(tokenizer, ["Say hi.", "Now louder."], ["Hi there."])
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\nHi there.<|im_end|>\n"
                         "<|im_start|>user\nNow louder.<|im_end|>\n<|im_start|>assistant\n")
    # Turn 2's prompt starts with turn 1's prompt: the conversation only grows.
    assert ids[: len(one)] == one
    # Without the template the parts are joined by blank lines.
    raw = D.encode_conversation(tokenizer, ["a", "b"], ["c"], chat=False)
    assert tokenizer.decode(raw) == "a\n\nc\n\nb"


def test_encode_conversation_rejects_bad_input(tokenizer):
    with pytest.raises(ValueError, match="turns: expected a non-empty list"):
        D.encode_conversation(tokenizer, [], [])
    with pytest.raises(ValueError, match="turns: expected a non-empty list of non-empty strings"):
        D.encode_conversation(tokenizer, ["a", ""], ["x"])
    with pytest.raises(ValueError, match=r"answers: expected 1 strings \(one per earlier turn\), got 0"):
        D.encode_conversation(tokenizer, ["a", "b"], [])


def test_answer_text_drops_special_tokens_and_outer_space(tokenizer):
    ids = tokenizer("  Hello there.\n")["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert D.answer_text(tokenizer, ids) == "Hello there."
