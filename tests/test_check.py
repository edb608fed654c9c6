"""``racer-ref check``: the twin's own code passes every exercise, planted bugs fail with the
first diverging case and a hint, and the blank exercises are refused as unwritten."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from racer_ref.course import check
from racer_ref.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]
EXERCISES = sorted((REPO / "exercises").glob("[0-9][0-9]_*.py"))
SOLUTIONS = REPO / "tests" / "check_solutions"


def run_check(path: Path, capsys) -> tuple[int, str]:
    status = check.main([str(path)])
    return status, capsys.readouterr().out


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
    status, out = run_check(path, capsys)
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
