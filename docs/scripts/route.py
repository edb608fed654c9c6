"""The student's route through one decode: which functions of racer_ref run, in which files.

Traces one greedy RACER decode (``racer_ref.generate(model, None, PROMPT, max_new_tokens=24,
method="racer", backend=..., capacity=16)``) on a random 2-layer Llama (vocab 300, hidden 64,
eager attention), after one warm-up call, with ``sys.setprofile``: every function of the
``racer_ref`` package that is called is recorded in the order of its first call. A
function's lines run from its ``def`` to the end of its body (its docstring and comments
included: a student reads them too; comprehensions and lambdas count inside their function,
a nested ``def`` inside the function that holds it). A *file change* is a step of that order
whose function stands in another file than the one before.

Usage::

    python docs/scripts/route.py            # both backends, Markdown, on stdout
    python docs/scripts/route.py --backend python
    python docs/scripts/route.py --write    # regenerate docs/includes/one-step-route.md

The same decode also follows one argument, ``max_new_tokens``, from ``generate()`` through the
calls that pass it on (:func:`journey`): every call of a ``racer_ref`` function that receives
the very object as an argument (by name, inside ``*args`` / ``**kwargs``, or one level down in
a dict, list or tuple argument) from a function that received it; its *returns* are the calls
that bring it back into a file it had left. (What runs is followed, so a branch the decode
does not take, such as the logits processors', is not.)

The docs page "One step, in the code" (docs/explanation/one-step.md) includes the output
of ``--write``; ``tests/test_route.py`` checks that the file matches a fresh run.
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import sys
from pathlib import Path
from typing import Dict, List, Tuple

#: Where ``--write`` puts the Markdown (the docs page includes it).
INCLUDE = Path(__file__).resolve().parents[1] / "includes" / "one-step-route.md"
#: The traced prompt: a passage that repeats, so that drafting has something to copy.
PROMPT = [5, 6, 7, 8, 9, 10, 11, 12] * 4 + [5, 6, 7]
#: The limits the package keeps to: lines, files, file changes (tests/test_route.py).
TARGETS = {"python": (1150, 12, 31), "rust": (500, 5, None)}
#: The most times ``max_new_tokens`` may come back into a file it had left (issue 35).
MAX_RETURNS = 2


def tiny_llama():
    """A seeded random 2-layer Llama: vocab 300, hidden 64, eager attention."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None,
                         attn_implementation="eager")
    return LlamaForCausalLM(config).eval()


@functools.lru_cache(maxsize=None)
def _spans(path: str) -> Dict[int, Tuple[str, int, int]]:
    """For each function of the file: first line of its code object -> (qualified name, def
    line, end line)."""
    spans: Dict[int, Tuple[str, int, int]] = {}

    def visit(parent: ast.AST, prefix: str) -> None:
        for node in ast.iter_child_nodes(parent):
            if isinstance(node, ast.ClassDef):
                visit(node, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                # Named as Python's __qualname__ does: Class.method, outer.<locals>.inner.
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                spans[first] = spans[node.lineno] = (prefix + node.name, node.lineno, node.end_lineno)
                visit(node, f"{prefix}{node.name}.<locals>.")
            else:
                visit(node, prefix)

    visit(ast.parse(Path(path).read_text(encoding="utf-8")), "")
    return spans


def trace(backend: str) -> List[Tuple[str, str, int, int]]:
    """The functions of racer_ref that one decode calls, in first-call order:
    ``(file relative to the package, function name, def line, end line)``."""
    import racer_ref

    root = os.path.dirname(os.path.abspath(racer_ref.__file__)) + os.sep
    model = tiny_llama()

    def decode():
        return racer_ref.generate(model, None, PROMPT, max_new_tokens=24, method="racer",
                                  backend=backend, capacity=16)

    decode()  # warm-up: imports and one-time set-up are not the step
    seen, order = set(), []

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if code in seen:
            return
        seen.add(code)
        path = code.co_filename
        if path.startswith(root) and not code.co_name.startswith("<"):
            span = _spans(path).get(code.co_firstlineno)
            if span is not None:
                order.append((path[len(root):].replace(os.sep, "/"),) + span)

    sys.setprofile(profile)
    try:
        decode()
    finally:
        sys.setprofile(None)
    return order


def journey(backend: str) -> List[Tuple[str, str]]:
    """``(file, function)`` of every call that ``max_new_tokens`` is passed to, in call order,
    in the traced decode: a call of a ``racer_ref`` function with the very object among its
    arguments, made by ``generate()`` or by a function that received it too. (The object is
    an ``int`` of its own class, so that no other 24 is taken for it.)"""
    import racer_ref

    class Carried(int):
        """``max_new_tokens``, told apart from every other int by its identity."""

    root = os.path.dirname(os.path.abspath(racer_ref.__file__)) + os.sep
    model, carried = tiny_llama(), Carried(24)
    racer_ref.generate(model, None, PROMPT, max_new_tokens=24, backend=backend, capacity=16)  # warm-up
    carriers, order = [], []

    def receives(frame) -> bool:
        code, names = frame.f_code, frame.f_code.co_varnames
        count = code.co_argcount + code.co_kwonlyargcount
        values = [frame.f_locals.get(name) for name in names[:count]]
        for flag, name in ((0x04, names[count] if code.co_flags & 0x04 else None),
                           (0x08, names[count + bool(code.co_flags & 0x04)] if code.co_flags & 0x08 else None)):
            packed = frame.f_locals.get(name) if name else None
            values += list(packed.values() if isinstance(packed, dict) else packed or ())
        # ... or one level down, in a dict, list or tuple passed on (an options dict, say)
        values += [item for value in values if isinstance(value, (dict, list, tuple))
                   for item in (value.values() if isinstance(value, dict) else value)]
        return any(value is carried for value in values)

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(root):
            return
        first = not carriers and frame.f_code.co_name == "generate"
        if (first or frame.f_back in carriers) and receives(frame):
            carriers.append(frame)
            order.append((frame.f_code.co_filename[len(root):].replace(os.sep, "/"), frame.f_code.co_qualname))

    sys.setprofile(profile)
    try:
        racer_ref.generate(model, None, PROMPT, max_new_tokens=carried, method="racer", backend=backend, capacity=16)
    finally:
        sys.setprofile(None)
    return order


def returns(order: List[Tuple[str, str]]) -> int:
    """How many calls of ``order`` bring it back into a file it had left."""
    files = [path for i, (path, _) in enumerate(order) if i == 0 or order[i - 1][0] != path]
    return sum(1 for i, path in enumerate(files) if path in files[:i])


def figures(order: List[Tuple[str, str, int, int]]) -> Dict[str, object]:
    """Lines (the union of the functions' line ranges, so a nested def counts once), functions,
    files, file changes, and per file its functions and lines, files in first-call order."""
    per_file: Dict[str, set] = {}
    functions: Dict[str, int] = {}
    for path, _name, start, end in order:
        per_file.setdefault(path, set()).update(range(start, end + 1))
        functions[path] = functions.get(path, 0) + 1
    changes = sum(1 for a, b in zip(order, order[1:]) if a[0] != b[0])
    return {"lines": sum(len(lines) for lines in per_file.values()), "functions": len(order),
            "files": len(per_file), "changes": changes,
            "per_file": [(path, functions[path], len(lines)) for path, lines in per_file.items()]}


def markdown(backend: str, order: List[Tuple[str, str, int, int]], passed: List[Tuple[str, str]]) -> str:
    """The route of one backend as Markdown: totals, files, the reading order, then where
    ``max_new_tokens`` goes (``passed``: :func:`journey`)."""
    fig = figures(order)
    name = {"python": "the Python twin (`backend=\"python\"`)", "rust": "the Rust core (`backend=\"rust\"`)"}[backend]
    out = [f"**With {name}**: {fig['lines']:,} lines in {fig['functions']} functions in "
           f"{fig['files']} files, {fig['changes']} file changes in first-call order.", "",
           "| file | functions | lines |", "|---|---:|---:|"]
    out += [f"| `{path}` | {count} | {lines} |" for path, count, lines in fig["per_file"]]
    out += ["", "Reading order (a new item at each file change):", ""]
    runs: List[Tuple[str, List[str]]] = []
    for path, func, start, end in order:
        label = f"`{func}` ({end - start + 1})"
        if runs and runs[-1][0] == path:
            runs[-1][1].append(label)
        else:
            runs.append((path, [label]))
    out += [f"{i}. `{path}`: {', '.join(labels)}" for i, (path, labels) in enumerate(runs, 1)]
    out += ["", f"`max_new_tokens` from `generate()`: passed to {len(passed)} functions "
            f"({', '.join(f'`{path}` `{name}`' for path, name in passed)}); it comes back into a file it "
            f"had left {returns(passed)} times."]
    return "\n".join(out) + "\n"


def backends() -> List[str]:
    """The backends to trace: the Rust one only where its extension is built."""
    import importlib.util

    return ["python"] + (["rust"] if importlib.util.find_spec("racer_ref._core") else [])


def render(chosen: List[str]) -> str:
    head = ("<!-- Generated by docs/scripts/route.py --write; tests/test_route.py checks it. -->\n\n")
    return head + "\n".join(markdown(b, trace(b), journey(b)) for b in chosen)


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["python", "rust"], action="append",
                        help="trace this backend only (repeatable; default: both, rust where built)")
    parser.add_argument("--write", action="store_true", help=f"write the Markdown to {INCLUDE}")
    args = parser.parse_args(argv)
    text = render(args.backend or backends())
    if args.write:
        INCLUDE.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
