"""No import circle in ``python/racer_ref``: the modules' import graph is acyclic.

Every import statement of every module counts, at module level and inside functions alike
(a function-level import is a dependency too: it only runs later). Not counted: the code
under ``if __name__ == "__main__":`` (a module's walkthrough, run as a script, never on
import) and under ``if TYPE_CHECKING:``. ``from package import name`` counts as an import of
``package.name`` where that is a module, else of ``package``; a module that imports its own
package's ``__init__`` (``from racer_ref import missing_hf_extra``) is no circle, since the
package's ``__init__`` imports its names lazily (checked below: it imports no module of its own).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "racer_ref"


def module_names() -> Dict[str, Path]:
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _skipped(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` and ``if TYPE_CHECKING:`` blocks."""
    if not isinstance(node, ast.If):
        return False
    test = ast.unparse(node.test).replace("'", '"')
    return test in ('__name__ == "__main__"', "TYPE_CHECKING", "typing.TYPE_CHECKING")


def imports(path: Path, module: str, modules: Dict[str, Path]) -> Set[str]:
    """The modules of the package that ``module`` (at ``path``) imports anywhere in its code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: Set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _skipped(child):
                for other in child.orelse:  # the else branch does run
                    visit(other)
                continue
            names: List[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                names = [f"{base}.{alias.name}" for alias in child.names] + [base]
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    found.add(name)
                    break
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def import_graph() -> Dict[str, Set[str]]:
    modules = module_names()
    return {name: imports(path, name, modules) for name, path in modules.items()}


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_package_has_no_import_circle():
    assert circles(import_graph()) == []


def test_the_checker_finds_a_circle_and_the_imports_it_counts():
    graph = import_graph()
    # a function-level import counts: racer_ref.options imports racer_ref.integrations.processing in resolve()
    assert "racer_ref.integrations.processing" in graph["racer_ref.options"]
    assert "racer_ref.guard" in graph["racer_ref.drafter"] and "racer_ref.drafter" not in graph["racer_ref.guard"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_package_init_imports_none_of_its_modules():
    """``racer_ref/__init__.py`` names its public names lazily, so importing it (as every module
    does, being inside it) never runs another module: no circle can go through it."""
    assert import_graph()["racer_ref"] == set()
