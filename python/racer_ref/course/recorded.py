"""Recorded reference answers: the checker of a handout, without the answers' source.

``racer-ref check`` compares a student's answer with the reference's (the Rust core, the
Python twin, ``racer_ref.verify``), and the reference is the solution of every exercise. A
handout for students (``make handout``) therefore carries no reference at all: at build time
the checker runs every named and differential case once on the instructor's solutions, with
:class:`Recorder` between the checker and the reference, and every answer the reference gave
is written to one JSON file (``recorded.json``). In the handout, :class:`Replay` answers the
checker from that file: the same cases, the same messages and hints, no twin source.

The checker asks the reference for seven names (``racer_ref.course.check.REFERENCE_NAMES``);
each answer is stored under a key made of everything that determines it:

* ``Automaton(max_nodes, ngram, min_border_depth)``: ``stats()`` and ``dump()`` after the
  chunks given to ``extend`` so far;
* ``CopyLogitTable(vocab_size, k)``: ``row(token)`` after the ``observe`` calls so far;
* ``build_draft_tree(root, capacity, paths, table, root_topk)``: the tree's arrays;
* ``child_breadth(b, j, parent_is_root)``, ``accept_greedy(predicted, tokens, parents)``: the
  value; ``keep_accepted(keys, past_length, accepted)``: the slots kept (a gather along the
  slot axis, applied to the keys given).

The cases are seeded, and what the checker asks the reference never depends on the student's
answers (only on the case), so a recording on correct solutions holds every answer any
student's run can ask for. An answer that is not there raises :class:`NotRecorded` (a bug
of the handout, or an exercise recorded without torch), which the handout's ``check.py``
reports as such rather than as the student's mistake.

::

    answers = record(Path("tests/check_solutions"))      # at build time (twin or core)
    Path("recorded.json").write_text(json.dumps(answers))
    install(Replay(answers))                              # in the handout: no reference needed
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np

__all__ = ["FORMAT", "NotRecorded", "Recorder", "Replay", "install", "record"]

#: The version of the file's layout (``answers["format"]``).
FORMAT = 1

#: The exercise whose cases ask each name (for the message when an answer is missing).
_EXERCISE_OF = {"Automaton": "01-03", "CopyLogitTable": "05-10", "build_draft_tree": "06-10",
                "DraftTree": "06-10", "child_breadth": "06", "accept_greedy": "09", "keep_accepted": "10"}


class NotRecorded(BaseException):
    """The handout has no recorded answer for a question the checker asked. A
    ``BaseException``, so that it ends the check instead of counting as the student's
    exception."""


def _plain(value: Any) -> Any:
    """``value`` as JSON-able lists, ints and floats (numpy arrays and scalars included)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _key(*parts: Any) -> str:
    """A short, stable key for ``parts`` (the SHA-256 of their JSON, 20 hex digits)."""
    text = json.dumps(_plain(list(parts)), separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class _Store:
    """The answers, ``name -> key -> value``, recorded or replayed."""

    def __init__(self, answers: Dict[str, Dict[str, Any]], recording: bool) -> None:
        self.answers = answers
        self.recording = recording

    def put(self, name: str, key: str, value: Any) -> Any:
        self.answers.setdefault(name, {})[key] = _plain(value)
        return value

    def get(self, name: str, key: str, what: str) -> Any:
        try:
            return self.answers[name][key]
        except KeyError:
            if name not in self.answers:
                raise NotRecorded(f"this handout holds no recorded answers of {name} (exercise "
                                  f"{_EXERCISE_OF.get(name, '?')}): it was built where that exercise "
                                  "could not be checked (torch missing?)") from None
            raise NotRecorded(f"this handout holds no recorded answer for {what}: a bug of the handout, "
                              "tell your teacher") from None

    def answer(self, name: str, key: str, what: str, real: Optional[Callable[[], Any]]) -> Any:
        """``real()``, recorded under ``name`` and ``key``; replaying (``real`` None), the recorded answer."""
        return self.get(name, key, what) if real is None else self.put(name, key, real())


# --------------------------------------------------------------------------------------
# The objects the checker gets: recording (around the real reference) or replaying.
# --------------------------------------------------------------------------------------


class _Automaton:
    """``Automaton`` seen by the checker: ``extend``, then ``stats()`` / ``dump()``."""

    def __init__(self, store: _Store, real: Any, args: Sequence[int]) -> None:
        self._store, self._real, self._args = store, real, [int(a) for a in args]
        self._chunks: List[List[int]] = []

    def extend(self, tokens: Iterable[int]) -> None:
        tokens = [int(t) for t in tokens]
        self._chunks.append(tokens)
        if self._real is not None:
            self._real.extend(tokens)

    def _answer(self, method: str) -> Any:
        return self._store.answer(f"Automaton.{method}", _key(self._args, self._chunks),
                                  f"Automaton{tuple(self._args)}.{method}() after extend{self._chunks}",
                                  None if self._real is None else getattr(self._real, method))

    def stats(self) -> Dict[str, Any]:
        return dict(self._answer("stats"))

    def dump(self) -> str:
        return self._answer("dump")


class _CopyLogitTable:
    """``CopyLogitTable`` seen by the checker: ``observe``, then ``row(token)``."""

    def __init__(self, store: _Store, real: Any, args: Sequence[int]) -> None:
        self._store, self._real, self._args = store, real, [int(a) for a in args]
        self._observed: List[Any] = []

    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        self._observed.append([_plain(token_ids), _plain(topk_ids)])
        if self._real is not None:
            self._real.observe(token_ids, topk_ids)

    @property
    def key(self) -> List[Any]:
        return [self._args, self._observed]

    def row(self, token: int) -> List[int]:
        return list(self._store.answer("CopyLogitTable.row", _key(self.key, int(token)), f"CopyLogitTable.row({token})",
                                       None if self._real is None else lambda: list(self._real.row(token))))


class RecordedTree:
    """A flattened draft tree as recorded: the arrays of ``racer_ref.tree.DraftTree`` (numpy,
    same dtypes) without its code."""

    FIELDS = ("tokens", "parents", "depths", "attention_mask", "retrieve_indices", "sources")

    def __init__(self, tokens: Any, parents: Any, depths: Any, attention_mask: Any,
                 retrieve_indices: Any = None, sources: Any = None) -> None:
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.parents = np.asarray(parents, dtype=np.int64)
        self.depths = np.asarray(depths, dtype=np.int64)
        self.attention_mask = np.asarray(attention_mask, dtype=bool).reshape(len(self.tokens), -1)
        self.retrieve_indices = np.asarray([] if retrieve_indices is None else retrieve_indices,
                                           dtype=np.int64)
        self.sources = np.asarray([] if sources is None else sources, dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_plain(cls, plain: Dict[str, Any]) -> "RecordedTree":
        """From :func:`_tree_plain`'s dict (the mask as one string of 0s and 1s per row)."""
        fields = dict(plain)
        fields["attention_mask"] = [[c == "1" for c in row] for row in fields["attention_mask"]]
        return cls(**fields)


def _tree_plain(tree: Any) -> Dict[str, Any]:
    """A tree's arrays as JSON-able lists; the n x n mask as n strings of 0s and 1s."""
    plain = {name: _plain(getattr(tree, name)) for name in RecordedTree.FIELDS}
    plain["attention_mask"] = ["".join("1" if v else "0" for v in row) for row in plain["attention_mask"]]
    return plain


class _Reference:
    """The callable for ``racer_ref.course.check.REFERENCE``: recording when ``real`` (the
    checker's default reference) is given, replaying otherwise."""

    def __init__(self, answers: Dict[str, Dict[str, Any]], real: Optional[Callable[[str], Any]]) -> None:
        self.answers = answers
        self.store = _Store(answers, recording=real is not None)
        self.real = real

    def __call__(self, name: str) -> Any:
        try:
            return getattr(self, f"_{name}")()
        except AttributeError:
            raise ValueError(f"name: the checker asked for {name!r}, which racer_ref.course.recorded "
                             "does not know") from None

    def _Automaton(self) -> Callable[..., _Automaton]:
        return lambda *args: _Automaton(self.store, self.real and self.real("Automaton")(*args), args)

    def _CopyLogitTable(self) -> Callable[..., _CopyLogitTable]:
        return lambda *args: _CopyLogitTable(self.store, self.real and self.real("CopyLogitTable")(*args), args)

    def _DraftTree(self) -> type:
        return RecordedTree

    def _build_draft_tree(self) -> Callable[..., RecordedTree]:
        def build(root: int, capacity: int, paths: Any, table: Optional[_CopyLogitTable], topk: Any) -> RecordedTree:
            def real() -> Dict[str, Any]:
                tree = self.real("build_draft_tree")(root, capacity, paths, None if table is None else table._real, topk)
                return _tree_plain(tree if hasattr(tree, "tokens") else self.real("DraftTree")(*tree))  # (the core: arrays)

            return RecordedTree.from_plain(self.store.answer(
                "build_draft_tree", _key(root, capacity, paths, None if table is None else table.key, topk),
                f"build_draft_tree(root={root}, capacity={capacity}, paths={_plain(paths)}, ...)", self.real and real))
        return build

    def _child_breadth(self) -> Callable[[int, int, bool], int]:
        def breadth(b: int, j: int, parent_is_root: bool) -> int:
            return self.store.answer("child_breadth", _key(b, j, bool(parent_is_root)),
                                     f"child_breadth({b}, {j}, {parent_is_root})",
                                     self.real and (lambda: int(self.real("child_breadth")(b, j, parent_is_root))))
        return breadth

    def _accept_greedy(self) -> Callable[..., Any]:
        def accept(predicted: Sequence[int], tokens: Sequence[int], parents: Sequence[int]) -> Any:
            def real() -> List[Any]:
                accepted, next_root = self.real("accept_greedy")(predicted, tokens, parents)
                return [list(accepted), int(next_root)]

            accepted, next_root = self.store.answer("accept_greedy", _key(predicted, tokens, parents),
                                                    f"accept_greedy({list(predicted)}, {list(tokens)}, {list(parents)})",
                                                    self.real and real)
            return list(accepted), int(next_root)
        return accept

    def _keep_accepted(self) -> Callable[..., Any]:
        def keep(keys: Any, past_length: int, accepted: Sequence[int]) -> Any:
            import torch

            def real() -> List[int]:  # which slots survive: keep_accepted on keys whose slot s holds s
                probe = torch.arange(keys.shape[2], dtype=torch.float64)[None, None, :, None]
                return self.real("keep_accepted")(probe, past_length, list(accepted))[0, 0, :, 0].long().tolist()

            slots = self.store.answer("keep_accepted", _key(list(keys.shape), past_length, list(accepted)),
                                      f"keep_accepted(shape {tuple(keys.shape)}, {past_length}, {list(accepted)})",
                                      self.real and real)
            return keys[:, :, torch.tensor(slots, dtype=torch.long)].clone()
        return keep


class Recorder(_Reference):
    """Between the checker and its default reference: answers as the reference does and
    stores every answer in ``answers``."""

    def __init__(self, answers: Optional[Dict[str, Dict[str, Any]]] = None) -> None:
        from racer_ref.course import check

        super().__init__({} if answers is None else answers, check._default_reference)


class Replay(_Reference):
    """Answers the checker from recorded ``answers`` (the content of ``recorded.json``)."""

    def __init__(self, answers: Dict[str, Any]) -> None:
        if not isinstance(answers, dict) or answers.get("format") != FORMAT:
            raise ValueError(f"answers: expected recorded answers of format {FORMAT}, got "
                             f"{answers.get('format') if isinstance(answers, dict) else type(answers).__name__!r}")
        super().__init__(answers["answers"], None)
        self.exercises = list(answers.get("exercises", []))


def install(reference: Optional[_Reference]) -> None:
    """Make the checker ask ``reference`` (``None``: its default reference again)."""
    from racer_ref.course import check

    check.REFERENCE = reference


def _solution(solutions: Path, number: str) -> Optional[Path]:
    found = sorted(solutions.glob(f"{number}_*.py"))
    return found[0] if found else None


def record(solutions: Path, numbers: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Run every case of each exercise (all of ``EXERCISES`` unless ``numbers``) on the
    solution ``solutions/NN_*.py``, recording the reference's answers. An exercise that this
    installation cannot check (torch missing for 09 and 10) is left out, and so is one with no
    solution file; a solution that fails a case raises ``ValueError`` (its answers would be
    the reference's for the cases before only). Returns ``{"format", "exercises", "skipped",
    "answers"}`` for :class:`Replay`."""
    from racer_ref.course import check

    solutions = Path(solutions)
    if not solutions.is_dir():
        raise ValueError(f"solutions: {solutions} is not a directory")
    recorder = Recorder()
    done: List[str] = []
    skipped: Dict[str, str] = {}
    previous = check.REFERENCE
    try:
        install(recorder)
        for number in numbers or list(check.EXERCISES):
            exercise = check.EXERCISES[number]
            path = _solution(solutions, number)
            reason = check.cannot_check(exercise) or (None if path else f"no {number}_*.py in {solutions}")
            if reason is not None:
                skipped[number] = reason
                continue
            result = check.run_cases(check.load(path), exercise, every=True)
            if result.failures:
                first = next(iter(result.failures.values()))
                raise ValueError(f"solutions: {path.name} fails case {first.case}: {first.message}")
            done.append(number)
    finally:
        check.REFERENCE = previous
    return {"format": FORMAT, "exercises": done, "skipped": skipped, "answers": recorder.answers}
