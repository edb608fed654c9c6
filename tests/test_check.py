"""``racer-ref check``: the twin's own code passes every exercise, planted bugs fail with the
first diverging case and a hint, and the blank exercises are refused as unwritten."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from racer_ref.course import check
from racer_ref.app.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]
EXERCISES = sorted((REPO / "exercises").glob("[0-9][0-9]_*.py"))
SOLUTIONS = REPO / "tests" / "check_solutions"


def run_check(path: Path, capsys) -> tuple[int, str]:
    status = check.main([str(path)])
    return status, capsys.readouterr().out


#: A planted mistake is diagnosed well within 2 s by design (the first diverging case, an
#: endless walk stopped by a step bound): this generous bound only guards against a timeout.
GUARD_SECONDS = 10


def timed_check(path: Path, capsys) -> tuple[int, str]:
    start = time.perf_counter()
    status, out = run_check(path, capsys)
    seconds = time.perf_counter() - start
    assert seconds < GUARD_SECONDS, f"{seconds:.1f} s to diagnose:\n{out}"
    return status, out


def test_one_exercise_per_checker_entry():
    assert [p.name[:2] for p in EXERCISES] == sorted(check.EXERCISES) == [f"{i:02d}" for i in range(1, 11)]
    assert sorted(p.name for p in SOLUTIONS.glob("[0-9][0-9]_*.py")) == [p.name for p in EXERCISES]


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_blank_exercise_is_refused_as_unwritten(path, capsys):
    status, out = run_check(path, capsys)
    assert status == 1
    assert "not written yet" in out and "a body is still `...`" in out
    # Every name the checker needs is defined, with a docstring, and says how to check it.
    module = check.load(path)
    for name in check.EXERCISES[path.name[:2]].names:
        assert getattr(module, name).__doc__, f"{path.name}: {name} has no docstring"
    assert f"racer-ref check exercises/{path.name}" in module.__doc__


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem)
def test_the_twin_passes_every_case(path, capsys):
    status, out = run_check(path, capsys)
    assert status == 0, out
    assert re.search(r"named cases: all \d+ pass", out) and re.search(r"random cases: all \d+ pass", out)
    assert out.rstrip().endswith("agrees with the reference on every case.")


# A student's own answer to exercise 01 (not an adapter): the checker must accept it, and the
# classic bug (extending the windows in place, so one token extends a window twice) must fail.
STUDENT_01 = '''
class Node:
    def __init__(self, token, parent, depth):
        self.token, self.parent, self.depth, self.freq, self.children = token, parent, depth, 0, {}


class Trie:
    def __init__(self, ngram):
        self.ngram = ngram
        self.root = Node(-1, None, 0)
        self.windows = [self.root] + [None] * ngram
        self.nodes = 0

    def extend(self, tokens):
        for token in tokens:
            new = [self.root] + [None] * self.ngram
            for i in range(self.ngram - 1, -1, -1):
                window = self.windows[i]
                if window is None:
                    continue
                child = window.children.get(token)
                if child is None:
                    child = window.children[token] = Node(token, window, i + 1)
                    self.nodes += 1
                child.freq += 1
                new[i + 1] = child
            self.windows = new

    def freq(self, path):
        node = self.root
        for token in path:
            node = node.children.get(token)
            if node is None:
                return 0
        return node.freq

    def __len__(self):
        return self.nodes
'''


def test_a_students_own_answer_passes(tmp_path, capsys):
    path = tmp_path / "01_my_trie.py"
    path.write_text(STUDENT_01)
    status, out = run_check(path, capsys)
    assert status == 0, out


#: (file, text to replace, planted bug, the first diverging case, words of the message)
PLANTED = [
    ("01", STUDENT_01, ("                    self.nodes += 1\n                child.freq += 1",
                        "                    self.nodes += 1\n                    child.freq += 1"),
     "basic020_counts", ["trie.freq((1,)) = 1, expected 3"]),
    ("01", STUDENT_01, ("range(self.ngram - 1, -1, -1)", "range(self.ngram - 1, 0, -1)"),
     "basic020_counts", ["len(trie) = 0, expected 6"]),
    ("02", None, ("return eager_failure_links(sorted(paths, key=len))",
                  "return {p: p[1:] if p[1:] in paths else () for p in paths}"),
     "fail010_longer_suffix_reappears", ["fail((0, 1, 0)) = (), expected (0,)"]),
    ("03", None, ("self.epochs[token % EPOCH_SLOTS] += 1", "pass"),
     "fail010_longer_suffix_reappears", ["step 1 (last operations: ", "fail((0, 1)) = (), expected (1,)"]),
    ("03", None, ("        return self._fail(node)", "        node.fail_stamp = -2\n        return self._fail(node)"),
     "basic020_counts", ["children lookups while asking every link a second time"]),
    ("04", None, ("        if self.tail == NIL:\n            self.tail = slot", "        if self.tail == NIL:\n            pass"),
     "lru020_touch_adds_at_the_head", ["least_recent() = None, expected 2"]),
    ("04", None, ("        if older == NIL:\n            self.tail = newer\n        else:\n            self.newer[older] = newer",
                  "        if older != NIL:\n            self.newer[older] = newer"),
     "lru030_touch_moves_to_the_head", ["least_recent() = 0, expected 1"]),
    ("05", None, ("super().observe(np.array(token_ids, dtype=np.int64),\n                        np.array(topk_ids, dtype=np.int64)",
                  "super().observe(np.array(token_ids[::-1], dtype=np.int64),\n                        np.array(topk_ids[::-1], dtype=np.int64)"),
     "table020_last_occurrence_wins_first_k_columns", ["row(4) = [1, 2], expected [9, 0]"]),
    ("06", None, ("import child_breadth  # noqa: F401 (the answer)", "import child_breadth\n\n"
                  "def child_breadth(b, j, parent_is_root):\n    return max(1, b >> (j + 1))"),
     "breadth_eq3", ["child_breadth(2, 0, parent_is_root=True) = 1, expected 2"]),
    ("07", None, ("tree.sources.tolist()", "[min(s, 2) for s in tree.sources.tolist()]"),
     "draft020_merged_nodes_cost_nothing", ["sources = [0, 2, 1, 2, 2, 2], expected [0, 3, 1, 2, 3, 2]"]),
    ("08", None, ("return _tree(parents).attention_mask.tolist()", "return _tree(parents).attention_mask.T.tolist()"),
     "draft010_retrieval_paths_share_prefixes", ["tree_attention_mask(parents [-1, 0, 0, 1, 1, 3])"]),
    ("08", None, ("return (past_length + _tree(parents).depths).tolist()", "return _tree(parents).depths.tolist()"),
     "draft010_retrieval_paths_share_prefixes", ["position_ids(", "past_length=5"]),
    ("09", None, ("predicted=list(predicted))", "predicted=[tokens[1] if n > 1 else p for p in predicted])"),
     "accept010_follow_the_predicted_child", ["accept_greedy(predicted=[11, 22, 0, 0, 0, 50, 0, 0, 0, 0]"]),
    ("10", None, ("    _keep(SimpleNamespace(layers=[layer]), past_length, list(accepted))\n    return layer.keys",
                  "    return keys[:, :, :past_length + len(accepted)]"),
     "kv010_gather_the_path", ["the slots kept (head 0) = [0, 1, 2, 3, 4, 5], expected [0, 1, 2, 3, 5, 8]"]),
]


@pytest.mark.parametrize("number, source, edit, case, words", PLANTED,
                         ids=[f"{p[0]}-{p[3]}-{i}" for i, p in enumerate(PLANTED)])
def test_a_planted_bug_fails_at_the_first_diverging_case_with_a_hint(tmp_path, capsys, number, source, edit, case, words):
    if source is None:
        (solution,) = SOLUTIONS.glob(f"{number}_*.py")
        source = solution.read_text()
    old, new = edit
    assert source.count(old) == 1, f"the planted edit {old!r} does not apply"
    path = tmp_path / f"{number}_planted.py"
    path.write_text(source.replace(old, new))
    status, out = timed_check(path, capsys)
    assert status == 1, out
    fail_lines = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert len(fail_lines) == 1 and fail_lines[0].startswith(f"FAIL {case}:"), out
    for word in words:
        assert word in out, f"{word!r} not in:\n{out}"
    hint = [line for line in out.splitlines() if line.startswith("hint: ")]
    assert len(hint) == 1 and len(hint[0]) > 60, out


def test_an_exception_in_student_code_is_shown_with_its_line(tmp_path, capsys):
    path = tmp_path / "09_raises.py"
    path.write_text("def accept_greedy(predicted, tokens, parents):\n    return predicted[len(tokens)]\n")
    status, out = run_check(path, capsys)
    assert status == 1
    assert "FAIL accept010_follow_the_predicted_child: your code raised an exception" in out
    assert "IndexError" in out and "09_raises.py" in out and "hint: " in out


def test_a_syntax_error_is_reported_not_raised(tmp_path, capsys):
    path = tmp_path / "my_09.py"
    path.write_text("def accept_greedy(predicted, tokens, parents):\n    return (\n")
    status, out = run_check(path, capsys)
    assert status == 1 and "does not import" in out and "SyntaxError" in out


def test_unwritten_finds_ellipsis_bodies_only():
    source = '''
def done():
    """doc"""
    return 1

def todo():
    """doc"""
    ...

class A:
    def m(self):
        ...
    def n(self):
        x = 1
        return x
'''
    assert check.unwritten(source) == ["todo", "A.m"]


def test_bad_file_name_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "trie.py"
    path.write_text("")
    assert check.main([str(path)]) == 2
    assert "NN_*.py" in capsys.readouterr().err


def test_the_cli_runs_the_checker(capsys):
    status = cli_main(["check", str(SOLUTIONS / "09_greedy_acceptance.py")])
    assert status == 0
    assert "PASS: exercise 09" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------
# A checker that teaches (issue 26 item 3): a diagnosis per kind of mistake, hints in
# stages, any file name, a JSON score.
# ---------------------------------------------------------------------------------------

#: The kind of mistake the checker diagnoses for each bug of PLANTED, in the same order.
PLANTED_KINDS = ["01.freq_once", "01.root_window", "02.gave_up", "03.stale", "03.cache", "04.ends", "04.ends",
                 "05.not_last", "06.root_halved", "07.sources", "08.transposed", "08.past_length",
                 "09.stops_early", "10.contiguous"]

_RIGHT = "\n\n_right = accept_greedy\n\n"
#: (file, source or None for the solution, [(old, new), ...] ("" appends new), planted bug,
#: the diagnosed kind, words of the output). Each is a mistake a student makes.
MISTAKES = [
    ("01", STUDENT_01, [("Node(token, window, i + 1)", "Node(token, window, i)")],
     "Node.depth off by one", "01.depth", ["FAIL basic020_counts: step 0 (tokens [1, 2, 1, 2, 1], ngram 3): the node of (1,): depth = 0, expected 1"]),
    ("01", STUDENT_01, [("range(self.ngram - 1, -1, -1)", "range(self.ngram - 2, -1, -1)")],
     "the longest window is skipped", "01.longest_window", ["none of the", "strings of length ngram = 3"]),
    ("01", STUDENT_01, [("new = [self.root] + [None] * self.ngram", "new = self.windows"),
                        ("range(self.ngram - 1, -1, -1)", "range(self.ngram)")],
     "windows updated in place, shortest first", "01.never_committed", ["never occurs in the committed tokens"]),
    ("01", STUDENT_01, [("                    self.nodes += 1\n                child.freq += 1",
                         "                child.freq += 1\n                self.nodes += 1")],
     "a node counted at every visit", "01.count", ["len(trie) = 12, expected 6"]),
    ("01", STUDENT_01, [("Node(token, window, i + 1)", "Node(token, self.root, i + 1)")],
     "every node hung under the root", "01.parent",
     ["FAIL basic020_counts: step 0 (tokens [1, 2, 1, 2, 1], ngram 3): the node of (1, 2): parent is not the node "
      "of (1,)"]),
    ("02", None, [("return eager_failure_links(sorted(paths, key=len))", "return {p: p[1:] for p in paths}")],
     "link to s[1:] even when absent", "02.not_a_state", ["is not a state of the trie"]),
    ("04", None, [("        self.on[slot] = False\n        self.size -= 1", "        self.on[slot] = False")],
     "size not decremented on unlink", "04.len", ["len() = "]),
    ("04", None, [("                return\n            self._unlink(slot)\n", "                return\n")],
     "a slot moved to the head without unlinking it first", "04.cycle",
     ["FAIL lru030_touch_moves_to_the_head: after [('touch', 0), ('touch', 1), ('touch', 2), ('touch', 0)]: "
      "order() has not reached the end of the list after 180 steps, with at most 4 slots on it: the links go "
      "round in a circle", "(following older from the head: 0 -> 2 -> 1 -> 0 (again))"]),
    ("04", None, [("        if self.on[slot]:\n            self._unlink(slot)", "        self.on[slot] = False")],
     "remove only marks the slot off (no eviction from the list)", "04.not_removed",
     ["FAIL lru040_remove_anywhere: ", "('remove', 4)]: order() (most recent first) = [4, 3, 2, 1, 0], "
      "expected [3, 2, 1, 0]"]),
    ("05", None, [("", "\n    def row(self, token):\n        return list(super().row(token)) or [0] * self.k\n")],
     "unseen rows are zeros, not empty", "05.unseen", ["expected []"]),
    ("05", None, [("", "\n    def row(self, token):\n        return list(super().row(token))[:self.k - 1]\n")],
     "row() slices one column short", "05.row_short",
     ["row(4) = [9], expected [9, 0]", "(1 of the k = 2 ids)"]),
    ("05", None, [("", "\n    def row(self, token):\n        return list(super().row(token - 1)) if token else []\n")],
     "row() reads the row of token - 1", "05.row_index",
     ["row(4) = [], expected [9, 0]", "(row(5) gives the row observed for token 4)"]),
    ("05", None, [("", "\n    def row(self, token):\n        self._rows = None\n")],
     "row() without a return", "returned",
     ["FAIL table010_unseen_rows_are_empty: what your code returned cannot be used: TypeError: 'NoneType' "
      "object is not iterable"]),
    ("06", None, [("import child_breadth  # noqa: F401 (the answer)", "import child_breadth as _cb\n\n"
                   "def child_breadth(b, j, parent_is_root):\n    return b >> (j + (0 if parent_is_root else 1))")],
     "Eq. 3 without the floor of 1", "06.floor", ["child_breadth(1, 0, parent_is_root=False) = 0, expected 1"]),
    ("06", None, [("build_draft_tree(root, capacity, [], table)", "build_draft_tree(root, capacity + 1, [], table)")],
     "one node over capacity", "06.capacity", ["nodes, capacity"]),
    ("07", None, [("build_draft_tree(root, capacity, retrieval_paths, table)", "build_draft_tree(root, capacity, [], table)")],
     "retrieval paths left out", "07.retrieval", ["(the retrieval path [0, 1, 2, 3] is missing)"]),
    ("08", None, [("return _tree(parents).attention_mask.tolist()",
                   "return (_tree(parents).attention_mask & ~np.eye(len(parents), dtype=bool)).tolist()")],
     "the diagonal left out", "08.self", ["row 0, column 0 is False, expected True"]),
    ("08", None, [("return _tree(parents).attention_mask.tolist()",
                   "return [[i == j or parents[i] == j for j in range(len(parents))] for i in range(len(parents))]")],
     "the parent only, not every ancestor", "08.ancestors", ["row 3, column 0 is False, expected True",
                                                              "node 0 is an ancestor of node 3"]),
    ("08", None, [("return (past_length + _tree(parents).depths).tolist()",
                   "return (past_length + _tree(parents).depths + 1).tolist()")],
     "positions start at L + 1", "08.depth", ["position_ids(", "node 0 (depth 0): 6, expected 5"]),
    ("09", None, [("", _RIGHT + "def accept_greedy(predicted, tokens, parents):\n"
                       "    accepted, _ = _right(predicted, tokens, parents)\n"
                       "    return accepted, tokens[accepted[-1]]\n")],
     "the bonus token taken from the tree", "09.next_root", ["accept_greedy("]),
    ("09", None, [("", _RIGHT + "def accept_greedy(predicted, tokens, parents):\n"
                       "    accepted = _right(predicted, tokens, parents)[0][:2]\n"
                       "    return accepted, predicted[accepted[-1]]\n")],
     "the walk stops after one child", "09.stops_early", ["accept_greedy("]),
    ("09", None, [("", "\n\ndef accept_greedy(predicted, tokens, parents):\n"
                       "    accepted, node = [0], 0\n"
                       "    while True:\n"
                       "        match = [c for c in range(len(tokens)) if parents[c] == node and tokens[c] == predicted[node]]\n"
                       "        if not match:\n"
                       "            return accepted, predicted[node]\n"
                       "        accepted.append(match[0])\n")],
     "the walk never moves to the accepted child", "09.endless",
     ["FAIL accept010_follow_the_predicted_child: accept_greedy(predicted=[11, 22, 0, 0, 0, 50, 0, 0, 0, 0], ",
      "has not returned after 2620 steps on a tree of 10 nodes: the walk never ends"]),
    ("10", None, [("    _keep(SimpleNamespace(layers=[layer]), past_length, list(accepted))\n    return layer.keys",
                   "    return keys[:, :, list(range(past_length)) + list(accepted)]")],
     "the slots without the offset L", "10.offset", ["the slots kept (head 0)"]),
]


def _planted(tmp_path: Path, number: str, source, edits, name: str = "") -> Path:
    if source is None:
        (solution,) = SOLUTIONS.glob(f"{number}_*.py")
        source = solution.read_text()
    for old, new in edits:
        if old:
            assert source.count(old) == 1, f"the planted edit {old!r} does not apply"
            source = source.replace(old, new)
        else:
            source += new
    path = tmp_path / (name or f"{number}_planted.py")
    path.write_text(source)
    return path


def _diagnosis(out: str) -> str:
    """The kind of mistake whose stage-1 hint the output shows."""
    (line,) = [line for line in out.splitlines() if line.startswith("hint: ")]
    kinds = [kind for kind, hint in check.HINTS.items() if line == f"hint: {hint.diagnosis}"]
    assert len(kinds) == 1, line
    return kinds[0]


def test_every_hint_is_a_diagnosis_and_a_nudge():
    assert len(PLANTED_KINDS) == len(PLANTED)
    for kind, hint in check.HINTS.items():
        assert len(hint.diagnosis) > 54 and len(hint.nudge) > 40, kind
    # One kind of mistake, one diagnosis: the output names the kind unambiguously.
    assert len({hint.diagnosis for hint in check.HINTS.values()}) == len(check.HINTS)
    assert sorted(check.READ) == sorted(check.EXERCISES)


@pytest.mark.parametrize("planted, kind", list(zip(PLANTED, PLANTED_KINDS)),
                         ids=[f"{p[0]}-{k}" for p, k in zip(PLANTED, PLANTED_KINDS)])
def test_the_planted_bugs_get_their_diagnosis(tmp_path, capsys, planted, kind):
    number, source, edit, _, _ = planted
    status, out = timed_check(_planted(tmp_path, number, source, [edit]), capsys)
    assert status == 1 and _diagnosis(out) == kind, out


@pytest.mark.parametrize("number, source, edits, bug, kind, words", MISTAKES,
                         ids=[f"{m[0]}-{m[4]}" for m in MISTAKES])
def test_each_kind_of_mistake_gets_its_own_diagnosis_and_nudge(tmp_path, capsys, number, source, edits, bug,
                                                               kind, words):
    path = _planted(tmp_path, number, source, edits)
    status, out = timed_check(path, capsys)
    assert status == 1, out
    assert _diagnosis(out) == kind, out
    for word in words:
        assert word in out, f"{word!r} not in:\n{out}"
    assert "check.py" not in out  # named in the student's terms, never a traceback into the checker
    assert "hint 2:" not in out and f"racer-ref check --hint 2 {path}" in out
    # Stage 2 adds the nudge for this kind of mistake; stage 3 where to read.
    assert check.main(["--hint", "2", str(path)]) == 1
    out2 = capsys.readouterr().out
    assert f"hint 2: {check.HINTS[kind].nudge}" in out2 and "hint 3:" not in out2
    assert check.main(["--hint", "3", str(path)]) == 1
    assert f"hint 3: read {check.READ[number]}" in capsys.readouterr().out


def test_a_mask_is_shown_by_its_wrong_cell_not_as_two_matrices(tmp_path, capsys):
    path = _planted(tmp_path, *PLANTED[10][:2], [PLANTED[10][2]])  # the transposed mask
    status, out = run_check(path, capsys)
    fail = [line for line in out.splitlines() if line.startswith("FAIL")][0]
    assert fail == ("FAIL draft010_retrieval_paths_share_prefixes: tree_attention_mask(parents [-1, 0, 0, 1, 1, 3]): "
                    "row 0, column 1 is True, expected False (node 1 is not an ancestor of node 0; 18 of 36 cells "
                    "are wrong)"), out
    assert "[[" not in out


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_a_copy_of_an_exercise_under_any_name_is_recognised_by_its_docstring(path):
    assert check.exercise_of(Path("my_answer.py"), path.read_text()).number == path.name[:2]


@pytest.mark.parametrize("name, header", [
    ("my_04_lru.py", ""),                                  # the README's copy
    ("lru_answer.py", 'EXERCISE = "04"\n'),                # a marker line
    ("lru_answer.py", '"""Exercise 04: the LRU list."""\n'),  # the exercises' docstring
])
def test_any_file_name_works(tmp_path, capsys, name, header):
    source = (SOLUTIONS / "04_lru.py").read_text().split("\n", 1)[1]  # without its docstring
    path = tmp_path / name
    path.write_text(header + source)
    status, out = run_check(path, capsys)
    assert status == 0 and "PASS: exercise 04" in out, out


def test_the_exercise_flag_overrides_the_name(tmp_path, capsys):
    path = tmp_path / "answer.py"
    path.write_text((SOLUTIONS / "09_greedy_acceptance.py").read_text().split("\n", 1)[1])
    assert check.main([str(path)]) == 2
    assert "--exercise NN" in capsys.readouterr().err
    assert check.main(["--exercise", "09", str(path)]) == 0
    assert "PASS: exercise 09" in capsys.readouterr().out


def test_json_gives_a_score_per_function(tmp_path, capsys):
    import json

    # Exercise 08 with only position_ids wrong: the other two functions score full marks.
    path = _planted(tmp_path, "08", None, [("return (past_length + _tree(parents).depths).tolist()",
                                            "return _tree(parents).depths.tolist()")], "my_08.py")
    assert check.main(["--json", str(path)]) == 1
    result = json.loads(capsys.readouterr().out)
    (one,) = result["files"]
    assert one["exercise"] == "08" and one["status"] == "fail"
    functions = one["functions"]
    assert sorted(functions) == ["position_ids", "retrieve_indices", "tree_attention_mask"]
    for name in ("retrieve_indices", "tree_attention_mask"):
        assert functions[name]["passed"] == functions[name]["total"] > 200
        assert functions[name]["first_failure"] is None
    positions = functions["position_ids"]
    assert positions["passed"] < positions["total"] == functions["retrieve_indices"]["total"]
    failure = positions["first_failure"]
    assert failure["diagnosis"] == "08.past_length" and failure["case"] == "draft010_retrieval_paths_share_prefixes"
    assert failure["hint"] == check.HINTS["08.past_length"].diagnosis
    assert one["passed"] == sum(f["passed"] for f in functions.values()) == result["passed"]
    assert one["total"] == sum(f["total"] for f in functions.values()) == result["total"]
    # Each function counts the same in the file's score, whatever its number of cases.
    assert one["score"] == round(sum(f["score"] for f in functions.values()) / 3, 4) < 1
    assert positions["score"] == round(positions["passed"] / positions["total"], 4)


def test_json_scores_a_blank_exercise_zero_and_a_solution_one(capsys):
    import json

    blank, solution = EXERCISES[0], SOLUTIONS / EXERCISES[0].name
    assert check.main(["--json", str(blank), str(solution)]) == 1
    result = json.loads(capsys.readouterr().out)
    empty, full = result["files"]
    assert empty["unwritten"] == ["Trie.extend"] and empty["passed"] < empty["total"]
    assert full["status"] == "pass" and full["score"] == 1.0 and full["passed"] == full["total"] > 40
    assert result["total"] == empty["total"] + full["total"]


def test_the_old_import_paths_still_work_with_a_warning():
    import importlib
    import sys

    for old, new in [("racer_ref.check", "racer_ref.course.check"),
                     ("racer_ref.cases.automaton", "racer_ref.course.cases.automaton")]:
        sys.modules.pop(old, None)
        sys.modules.pop(old.rsplit(".", 1)[0] if old.count(".") > 1 else old, None)
        with pytest.warns(DeprecationWarning) as warned:
            module = importlib.import_module(old)
        assert f"{old} moved to {new}" in [str(w.message).split(";")[0] for w in warned]
        assert module is importlib.import_module(new)


# A student's file that exits, loops or prints must fail as a file, never end the checker
# (an autograder would read sys.exit(0) as a pass) nor spoil the JSON.
LRU_INIT = "class LruList:\n    def __init__(self, capacity):\n        {body}\n"


@pytest.mark.parametrize("json_mode", [False, True])
@pytest.mark.parametrize("source, words", [
    ("import sys\nprint('noise ' * 50)\nsys.exit(0)\n", "calls sys.exit(0) when imported"),
    ("while True:\n    pass\n", "still running after 0.5 s"),
    ("raise RuntimeError('at import')\n", "RuntimeError: at import"),
    ("def f(:\n", "SyntaxError"),
])
def test_a_file_that_exits_loops_or_raises_at_import_fails_as_a_file(tmp_path, capsys, monkeypatch, json_mode,
                                                                      source, words):
    import json

    monkeypatch.setattr(check, "CASE_SECONDS", 0.5)
    path = tmp_path / "04_bad.py"
    path.write_text(source)
    monkeypatch.chdir(tmp_path)  # a relative path, as a student types it
    status = check.main((["--json"] if json_mode else []) + ["04_bad.py"])
    out = capsys.readouterr().out
    assert status == 1
    text = json.loads(out)["files"][0]["error"] if json_mode else out
    assert "does not import" in text and words in text, text
    assert "importlib" not in text  # the student's frames only
    if "RuntimeError" in words:
        assert "04_bad.py\", line 1, in <module>" in text
    if json_mode:
        assert "noise" not in out  # what the file prints stays out of the JSON
    if words == "SyntaxError":
        assert "04_bad.py\", line 1" in text


@pytest.mark.parametrize("body, words, kind", [
    ("import sys; sys.exit(0)", "your code called sys.exit(0)", "raised"),
    ("while True: pass", "your code is too slow: still running after 0.5 s", "slow"),
])
def test_a_function_that_exits_or_loops_fails_its_cases(tmp_path, capsys, monkeypatch, body, words, kind):
    import json

    monkeypatch.setattr(check, "CASE_SECONDS", 0.5)
    path = tmp_path / "04_bad.py"
    path.write_text(LRU_INIT.format(body=body))
    status, out = run_check(path, capsys)
    assert status == 1 and f"FAIL lru010_empty: {words}" in out
    assert f"hint: {check.HINTS[kind].diagnosis}" in out
    assert check.main(["--json", str(path)]) == 1
    result = json.loads(capsys.readouterr().out)["files"][0]
    lru = result["functions"]["LruList"]
    assert result["status"] == "fail" and lru["passed"] == 0 and lru["total"] == result["total"] > 40
    assert lru["first_failure"]["diagnosis"] == kind and words in lru["first_failure"]["message"]


@pytest.fixture
def no_rust_core(monkeypatch):
    """As in a source checkout with only numpy: ``racer_ref._core`` cannot be imported."""
    import sys

    import racer_ref

    monkeypatch.delattr(racer_ref, "_core", raising=False)
    monkeypatch.setitem(sys.modules, "racer_ref._core", None)


@pytest.mark.parametrize("number", ["01", "02", "03", "04", "05", "06", "07", "08", "09"])
def test_without_the_rust_core_the_twin_answers(no_rust_core, capsys, number):
    assert check._reference("Automaton").__module__ == "racer_ref.reference.automaton"
    solution = next(SOLUTIONS.glob(f"{number}_*.py"))
    status, out = run_check(solution, capsys)
    assert status == 0 and "PASS" in out, out


def test_without_the_rust_core_a_planted_bug_still_fails(no_rust_core, tmp_path, capsys):
    path = _planted(tmp_path, *PLANTED[10][:2], [PLANTED[10][2]])  # the transposed mask
    status, out = run_check(path, capsys)
    assert status == 1 and "FAIL" in out and "your code raised" not in out, out


def test_without_torch_exercise_09_is_checked_and_10_refused(monkeypatch, capsys):
    import json
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "racer_ref.verify", raising=False)
    assert check.main([str(next(SOLUTIONS.glob("09_*.py")))]) == 0
    assert "PASS: exercise 09" in capsys.readouterr().out
    assert check.main(["--json", str(next(SOLUTIONS.glob("09_*.py")))]) == 0
    assert json.loads(capsys.readouterr().out)["files"][0]["score"] == 1.0
    assert "racer_ref.verify" not in sys.modules  # nothing on the way imported torch's module
    solution = next(SOLUTIONS.glob("10_*.py"))
    assert check.main([str(solution)]) == 2
    assert "needs torch: pip install 'racer-ref[hf]'" in capsys.readouterr().err
    assert check.main(["--json", str(solution)]) == 2
    result = json.loads(capsys.readouterr().out)["files"][0]
    assert result["status"] == "error" and "needs torch" in result["error"]


# ---------------------------------------------------------------------------------------
# Issue 33: unfinished files graded per function, a cycle named at once, weights per exercise.
# ---------------------------------------------------------------------------------------

_LOGITS_TREE_BODY = "def logits_tree(root, capacity, rows, k):\n"


def test_a_partly_written_file_is_graded_where_written(tmp_path, capsys):
    import json

    source = (SOLUTIONS / "06_logits_tree.py").read_text()
    body = source[source.index(_LOGITS_TREE_BODY) + len(_LOGITS_TREE_BODY):]
    path = _planted(tmp_path, "06", source, [(body, '    """The tree."""\n    ...\n')])
    status, out = timed_check(path, capsys)
    assert status == 1
    assert "not written yet: logits_tree (their cases are not run)" in out
    assert "named cases: all 1 pass" in out and "random cases" not in out.splitlines()[-2]
    assert out.rstrip().endswith("PASS so far: child_breadth agrees with the reference on every case; not "
                                 "written yet: logits_tree (a body is still `...`).")
    assert "Traceback" not in out and "check.py" not in out
    # A wrong child_breadth is still diagnosed.
    path = _planted(tmp_path, "06", path.read_text(), [PLANTED[8][2]])
    status, out = timed_check(path, capsys)
    assert status == 1 and _diagnosis(out) == "06.root_halved", out
    assert check.main(["--json", str(path)]) == 1
    (one,) = json.loads(capsys.readouterr().out)["files"]
    tree, breadth = one["functions"]["logits_tree"], one["functions"]["child_breadth"]
    assert tree == {"passed": 0, "total": tree["total"], "score": 0.0, "not_written": ["logits_tree"],
                    "first_failure": None} and tree["total"] > 300
    assert breadth["score"] == 0.0 and breadth["first_failure"]["diagnosis"] == "06.root_halved"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_json_reports_a_blank_exercise_as_not_written_not_as_a_traceback(path, capsys):
    import json

    check.main(["--json", str(path)])
    text = capsys.readouterr().out
    (one,) = json.loads(text)["files"]
    assert one["score"] == 0.0 and one["passed"] == 0 and "check.py" not in text
    for name in check.EXERCISES[path.name[:2]].names:
        function = one["functions"][name]
        assert function["first_failure"] is None and function["not_written"], name
        assert all(m == name or m.startswith(name + ".") for m in function["not_written"])


def test_json_names_a_cycle_as_the_failure_of_its_function(tmp_path, capsys):
    import json

    cycle = next(m for m in MISTAKES if m[4] == "04.cycle")
    path = _planted(tmp_path, "04", None, cycle[2])
    start = time.perf_counter()
    assert check.main(["--json", str(path)]) == 1
    assert time.perf_counter() - start < GUARD_SECONDS
    lru = json.loads(capsys.readouterr().out)["files"][0]["functions"]["LruList"]
    failure = lru["first_failure"]
    assert failure["diagnosis"] == "04.cycle" and failure["case"] == "lru030_touch_moves_to_the_head"
    assert failure["detail"] == "following older from the head: 0 -> 2 -> 1 -> 0 (again)"
    # The cases without a move to the head still pass: a named failure, not a zero for everything.
    assert 0 < lru["passed"] < lru["total"]


def test_the_json_score_weighs_exercises_not_cases(tmp_path, capsys):
    import json

    files = [str(SOLUTIONS / "04_lru.py"), str(EXERCISES[5])]  # a pass (46 cases), a blank 06 (312)

    def score(*flags: str) -> float:
        assert check.main(["--json", *flags, *files]) == 1
        result = json.loads(capsys.readouterr().out)
        return result["score"], [f["weight"] for f in result["files"]]

    assert score() == (0.5, [1.0, 1.0])
    assert score("--weight", "04=3") == (0.75, [3.0, 1.0])
    weights = tmp_path / "weights.txt"
    weights.write_text("# exercise weights\n04=1  06=0  # 06 not graded this term\n01=2\n")
    assert score("--weights", str(weights)) == (1.0, [1.0, 0.0])
    assert score("--weights", str(weights), "--weight", "06=1") == (0.5, [1.0, 1.0])
    for bad in ("4=1", "04=-1", "04", "11=1"):
        with pytest.raises(SystemExit) as exit:
            check.main(["--json", "--weight", bad, *files])
        assert exit.value.code == 2 and "expected NN=W" in capsys.readouterr().err
