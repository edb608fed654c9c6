"""MkDocs hook: pages that quote the code, so they cannot drift from it.

Two jobs:

1. ``@code PATH NAME`` on a line of its own, in any page, is replaced by a fenced code
   block holding that item's current source, found *by name* (not by line numbers):

   * Python (``.py``): a dotted name such as ``Automaton.retrieve`` (classes, functions,
     methods), found with :mod:`ast`; the comment lines right above it come along.
   * Rust (``.rs``): ``Type::method`` (a ``fn`` inside an ``impl ... Type`` block), or a
     top-level ``fn`` / ``struct`` / ``enum`` / ``trait`` / ``const`` / ``type`` name; its
     ``///`` doc comment and attributes come along.

   A name that no longer exists fails the build, so a rename is caught at once.

   ``@docstring PATH`` inserts a tutorial's module docstring (without its title line) as
   Markdown, and ``@output PATH N`` inserts section N (the lines from "── N." to the next
   "── ") of a tutorial transcript, i.e. what the tutorial prints, as a text block. The test
   suite checks that each transcript is exactly what its tutorial prints.

2. ``reference/rust.md`` is generated from the crate's doc comments (``//!`` module docs,
   ``///`` item docs, the signatures of ``pub`` items), module by module. ``cargo doc
   --open`` gives the full rustdoc; this page keeps the summary inside the site and the
   strict build.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path
from typing import List, Optional, Tuple

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
RUST_SRC = ROOT / "rust" / "src"

_DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)@code[ \t]+(?P<path>\S+)[ \t]+(?P<name>\S+)[ \t]*$", re.M)
_DOCSTRING = re.compile(r"^@docstring[ \t]+(?P<path>\S+)[ \t]*$", re.M)
_BENCH = re.compile(r"^@bench-results[ \t]*$", re.M)
_HEADLINE = re.compile(r"^@bench-headline[ \t]*$", re.M)
BENCH_DATA = ROOT / "docs" / "data" / "bench"
_OUTPUT = re.compile(r"^(?P<indent>[ \t]*)@output[ \t]+(?P<path>\S+)[ \t]+(?P<section>\d+)[ \t]*$", re.M)


# --------------------------------------------------------------------------------------
# Python: find a dotted name with ast, keep the comment block and decorators above it.
# --------------------------------------------------------------------------------------
def python_item(path: Path, dotted: str) -> str:
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    body = ast.parse(source).body
    node: Optional[ast.AST] = None
    for part in dotted.split("."):
        node = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.name == part
            ),
            None,
        )
        if node is None:
            raise PluginError(f"@code: {dotted!r} not found in {path.relative_to(ROOT)}")
        body = node.body
    assert node is not None
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    # Walk up over the comment lines that explain the item (no blank line in between).
    while first > 0 and lines[first - 1].strip().startswith("#"):
        first -= 1
    last = node.end_lineno  # type: ignore[attr-defined]
    return textwrap.dedent("\n".join(lines[first:last]))


# --------------------------------------------------------------------------------------
# Rust: a tiny lexer that knows enough (comments, strings, chars vs lifetimes) to match
# braces, then a search for items by name.
# --------------------------------------------------------------------------------------
def _rust_code_mask(text: str) -> List[bool]:
    """``mask[i]`` is True when ``text[i]`` is code (not inside a comment, string or char)."""
    mask = [True] * len(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            mask[i:j] = [False] * (j - i)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            mask[i:j] = [False] * (j - i)
            i = j
        elif c == '"' or (c == "r" and re.match(r'r#*"', text[i:i + 20]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            if c == "r":
                m = re.match(r'r(#*)"', text[i:])
                assert m is not None
                end = '"' + m.group(1)
                j = text.find(end, i + m.end())
                j = n if j < 0 else j + len(end)
            else:
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                j += 1
            mask[i:j] = [False] * (j - i)
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}'); otherwise a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                mask[i:i + m.end()] = [False] * m.end()
                i += m.end()
            else:
                i += 1
        else:
            i += 1
    return mask


def _match_brace(text: str, mask: List[bool], open_at: int) -> int:
    """Index just past the ``}`` that closes the ``{`` at ``open_at``."""
    depth = 0
    for i in range(open_at, len(text)):
        if not mask[i]:
            continue
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise PluginError("unbalanced braces")


def _item_end(text: str, mask: List[bool], start: int) -> int:
    """End of the item starting at ``start``: its ``{...}`` body, or its ``;``."""
    for i in range(start, len(text)):
        if mask[i] and text[i] == "{":
            return _match_brace(text, mask, i)
        if mask[i] and text[i] == ";":
            return i + 1
    raise PluginError("item without end")


def _with_docs(text: str, start: int) -> int:
    """Move ``start`` (a line start) up over ``///`` docs, ``#[...]`` attributes and ``//`` comments."""
    lines_before = text[:start].split("\n")[:-1]
    k = len(lines_before)
    while k > 0 and re.match(r"\s*(///|//|#\[|#!\[)", lines_before[k - 1]):
        k -= 1
    return len("\n".join(lines_before[:k])) + (1 if k else 0)


_ITEM_KW = r"(?:pub(?:\([^)]*\))?\s+)?(?:const\s+|unsafe\s+|async\s+|extern\s+\"[^\"]*\"\s+)*(?:fn|struct|enum|trait|const|type|static|mod)"


def _find_item(text: str, mask: List[bool], name: str, lo: int, hi: int) -> Optional[Tuple[int, int]]:
    pattern = re.compile(r"^[ \t]*" + _ITEM_KW + r"\s+" + re.escape(name) + r"\b", re.M)
    for m in pattern.finditer(text, lo, hi):
        if mask[m.start() + len(m.group(0)) - len(m.group(0).lstrip())]:
            return m.start(), _item_end(text, mask, m.end())
    return None


def rust_item(path: Path, name: str) -> str:
    text = path.read_text(encoding="utf-8")
    mask = _rust_code_mask(text)
    if "::" in name:
        type_name, item = name.split("::", 1)
        impl = re.compile(
            r"^[ \t]*impl\b[^{;]*?\b" + re.escape(type_name) + r"\b(?:<[^{]*>)?\s*(?:where[^{]*)?\{", re.M
        )
        for m in impl.finditer(text):
            # `impl Trait for Type`: the type must be what follows `for` when there is one.
            head = m.group(0)
            if " for " in head and not re.search(r"\bfor\s+" + re.escape(type_name) + r"\b", head):
                continue
            if not mask[m.start() + len(head) - len(head.lstrip())]:
                continue
            end = _match_brace(text, mask, m.end() - 1)
            found = _find_item(text, mask, item, m.end(), end)
            if found:
                start, stop = found
                start = _with_docs(text, start)
                return textwrap.dedent(text[start:stop])
        raise PluginError(f"@code: {name!r} not found in {path.relative_to(ROOT)}")
    found = _find_item(text, mask, name, 0, len(text))
    if not found:
        raise PluginError(f"@code: {name!r} not found in {path.relative_to(ROOT)}")
    start, stop = found
    start = _with_docs(text, start)
    return textwrap.dedent(text[start:stop])


def quote(path_str: str, name: str) -> Tuple[str, str]:
    """``(language, source)`` of ``name`` in the repository file ``path_str``."""
    path = (ROOT / path_str).resolve()
    if ROOT not in path.parents or not path.is_file():
        raise PluginError(f"@code: no file {path_str!r} in the repository")
    if path.suffix == ".py":
        return "python", python_item(path, name)
    if path.suffix == ".rs":
        return "rust", rust_item(path, name)
    raise PluginError(f"@code: cannot quote from {path_str!r} (only .py and .rs)")


def _repo_file(path_str: str, what: str) -> Path:
    path = (ROOT / path_str).resolve()
    if ROOT not in path.parents or not path.is_file():
        raise PluginError(f"{what}: no file {path_str!r} in the repository")
    return path


def module_docstring(path_str: str) -> str:
    """A tutorial's docstring without its first paragraph (the title, which the page has)."""
    doc = ast.get_docstring(ast.parse(_repo_file(path_str, "@docstring").read_text(encoding="utf-8")))
    if not doc:
        raise PluginError(f"@docstring: {path_str} has no module docstring")
    parts = doc.split("\n\n", 1)
    return parts[1] if len(parts) > 1 else ""


def output_section(path_str: str, section: int) -> str:
    """Section ``section`` of a tutorial transcript: from its header line "── N. ..." up to
    the next header (the transcripts are what the tutorials print; tests keep them true)."""
    lines = _repo_file(path_str, "@output").read_text(encoding="utf-8").splitlines()
    header = re.compile(r"^── (\d+)\.")
    out: List[str] = []
    inside = False
    for line in lines:
        m = header.match(line)
        if m:
            inside = int(m.group(1)) == section
        if inside:
            out.append(line)
    if not out:
        raise PluginError(f"@output: no section '── {section}.' in {path_str}")
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def bench_results() -> str:
    """Markdown for every committed benchmark run ``docs/data/bench/<set>/`` (``results.jsonl``
    and ``meta.json`` as ``racer-ref bench --out`` writes them): the run's settings and
    hardware, then the tables of ``racer_ref.harness.bench.summary_tables``, the same code that
    writes ``summary.md``."""
    import json
    import sys

    if str(ROOT / "python") not in sys.path:
        sys.path.insert(0, str(ROOT / "python"))
    from racer_ref.harness.summary import read_results, summary_tables

    runs = sorted(p.parent for p in BENCH_DATA.glob("*/results.jsonl"))
    if not runs:
        return textwrap.dedent("""\
            !!! warning "No decoding benchmark recorded yet"
                Run the commands above, then copy `results.jsonl` and `meta.json` from the
                `--out` folder into `docs/data/bench/<set>/`; this section and the plot
                below are drawn from them at build time.
            """)
    keys = ["model", "device", "cpu", "torch_threads", "prepacked_linears", "routed_linears", "load_average", "load_average_end", "dtype", "attn_implementation",
            "max_new_tokens", "capacity", "temperature", "turns", "context_method", "drafter_state",
            "warmup_runs", "warmup_tokens", "seed", "torch", "transformers", "date", "command"]
    parts = []
    for run in runs:
        meta = json.loads((run / "meta.json").read_text()) if (run / "meta.json").is_file() else {}
        rows = read_results(run)
        lines = [f"### {run.name}", ""]
        lines += [f"- {k.replace('_', ' ')}: {meta[k]}" for k in keys if meta.get(k) is not None]
        generations = len({(r["prompt_id"], r.get("turn", 1)) for r in rows})
        lines.append(f"- prompts: {len({r['prompt_id'] for r in rows})}; generations (prompt, turn): "
                     f"{generations}; runs: {len(rows)}; "
                     f"data: `{run.relative_to(ROOT).as_posix()}/`")
        for method, text in (meta.get("capacity_auto_text") or {}).items():
            lines.append(f"- `{method}`: {text}")
        tables = summary_tables(rows, meta.get("methods")).strip().split("\n\n### ")
        # The overall table stays in view; the per-category tables fold away (a click opens them).
        lines += ["", re.sub(r"^### ", "#### ", tables[0], flags=re.M)]
        for table in tables[1:]:
            title, _, body = table.partition("\n\n")
            lines += ["", f'??? abstract "{title.replace(chr(96), "")}"', "", textwrap.indent(body, "    ")]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


#: The method of a run that the headline table reports: the first of these that the run has
#: (else its first ``racer@C``).
HEADLINE_METHODS = ("racer@auto", "racer")


def bench_headline() -> str:
    """One table, one row per committed run: RACER's MAT and token-weighted speedups over
    ``hf-greedy`` and ``ar`` (``racer_ref.bench``'s own aggregate and speedup), the drafter
    state and the machine; the runs' full tables follow on the page (``@bench-results``)."""
    import json
    import sys

    if str(ROOT / "python") not in sys.path:
        sys.path.insert(0, str(ROOT / "python"))
    from racer_ref.harness.summary import aggregate, read_results, speedup

    rows_out = []
    for run in sorted(p.parent for p in BENCH_DATA.glob("*/results.jsonl")):
        meta = json.loads((run / "meta.json").read_text()) if (run / "meta.json").is_file() else {}
        rows = read_results(run)
        present = {r["method"] for r in rows}
        method = next((m for m in HEADLINE_METHODS if m in present), None) or next(
            (m for m in dict.fromkeys(r["method"] for r in rows) if m.startswith("racer")), None)
        if method is None:
            continue
        agg = aggregate(r for r in rows if r["method"] == method)
        capacity = "" if "@" in method else f" (C = {meta.get('capacity', '?')})"
        compiled = ((meta.get("cpu_kernels") or {}).get("compiled_passes") or {}).get("sizes")
        if compiled:  # racer_ref.speedups.compiled (--compile) was on
            capacity += f", compiled {','.join(map(str, compiled))}"
        machine = ", ".join(str(x) for x in (
            (meta.get("cpu") or meta.get("device") or "").replace("(R)", ""), f"{meta['torch_threads']} threads" if meta.get("torch_threads") else None,
            meta.get("dtype")) if x)
        fmt = lambda x: "n/a" if x != x else f"{x:.2f}×"  # noqa: E731 (NaN check)
        rows_out.append(
            f"| [{run.name}](#{run.name}) | {len({r['prompt_id'] for r in rows})} "
            f"| {meta.get('drafter_state', 'per request').replace('-', ' ')} | `{method}`{capacity} | {agg.mat:.2f} "
            f"| {fmt(speedup(rows, method, 'hf-greedy'))} | {fmt(speedup(rows, method, 'ar'))} "
            f"| {agg.matches}/{agg.checked} | {machine} | {str(meta.get('date', ''))[:10]} |")
    if not rows_out:
        return ""
    head = ("| set | prompts | drafter state | method | MAT | speedup over `hf-greedy` | speedup over `ar` "
            "| outputs = `ar` | machine | date |\n|---|---:|---|---|---:|---:|---:|---:|---|---|")
    return head + "\n" + "\n".join(rows_out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(m: "re.Match[str]") -> str:
        lang, src = quote(m.group("path"), m.group("name"))
        indent = m.group("indent")
        title = f'{m.group("path")} · {m.group("name")}'
        block = f'```{lang} title="{title}"\n{src}\n```'
        return textwrap.indent(block, indent)

    def replace_output(m: "re.Match[str]") -> str:
        text = output_section(m.group("path"), int(m.group("section")))
        block = f'```text title="output"\n{text}\n```'
        return textwrap.indent(block, m.group("indent"))

    markdown = _DOCSTRING.sub(lambda m: module_docstring(m.group("path")), markdown)
    if _HEADLINE.search(markdown):
        markdown = _HEADLINE.sub(lambda m: bench_headline(), markdown)
    if _BENCH.search(markdown):
        markdown = _BENCH.sub(lambda m: bench_results(), markdown)
    markdown = _OUTPUT.sub(replace_output, markdown)
    return _DIRECTIVE.sub(replace, markdown)


# --------------------------------------------------------------------------------------
# The Rust crate reference page.
# --------------------------------------------------------------------------------------
_PUB_ITEM = re.compile(
    r"^(?P<indent>[ \t]*)pub(?:\((?:crate|super)[^)]*\))?\s+"
    r"(?P<kw>(?:const\s+|unsafe\s+)*fn|struct|enum|trait|const|type|static|mod|use)\s+(?P<rest>.*)$"
)


def _rustdoc_to_markdown(doc: List[str]) -> str:
    """Rustdoc Markdown -> this site's Markdown: demote headings, drop intra-doc link targets
    (they point into rustdoc, not into this site), hide ``# `` lines of Rust examples."""
    out: List[str] = []
    fence: Optional[str] = None
    for line in doc:
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence is None:
                lang = stripped[3:].strip()
                fence = lang or "rust"
                line = "```" + ("rust" if lang in ("", "rust", "ignore", "no_run", "should_panic") else lang)
            else:
                fence = None
            out.append(line)
            continue
        if fence is not None:
            if fence in ("rust", "ignore", "no_run") and (stripped == "#" or stripped.startswith("# ")):
                continue
            out.append(line)
            continue
        if stripped.startswith("#"):
            line = "###" + line.lstrip()  # "# X" -> "#### X": below the module and item headings
        # [`text`](crate::path) or [text](path) with a non-URL target -> text.
        line = re.sub(r"\[([^\]]+)\]\((?!https?://)[^)]*\)", r"\1", line)
        # [`Text`][crate::path] -> `Text`
        line = re.sub(r"\[([^\]]+)\]\[[^\]]*\]", r"\1", line)
        # Shortcut intra-doc links [`Text`] -> `Text`.
        line = re.sub(r"\[(`[^`\]]+`)\]", r"\1", line)
        out.append(line)
    return "\n".join(out)


def _signature(lines: List[str], i: int) -> str:
    """The item's signature from line ``i`` up to its ``{`` or ``;`` (body left out)."""
    sig: List[str] = []
    for line in lines[i:i + 30]:
        sig.append(line.rstrip())
        if re.search(r"[{;]\s*(//.*)?$", line.rstrip()) or line.rstrip().endswith("{"):
            break
    text = textwrap.dedent("\n".join(sig)).rstrip()
    text = re.sub(r"\s*\{\s*$", "", text)
    if text.rstrip().endswith("{"):
        text = text.rstrip()[:-1].rstrip()
    return text


def rust_module_page(path: Path) -> str:
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    mask = _rust_code_mask(text)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    module = path.relative_to(RUST_SRC).with_suffix("").as_posix().replace("/", "::")
    module = "crate" if module == "lib" else module.replace("::mod", "")
    parts = [f"## `{module}`", "", f"Source: `{rel}`", ""]
    module_doc = [ln.strip()[3:][1:] if ln.strip()[3:4] == " " else ln.strip()[3:] for ln in lines if ln.strip().startswith("//!")]
    if module_doc:
        parts += [_rustdoc_to_markdown(module_doc), ""]
    # Skip test modules: `#[cfg(test)] mod tests { ... }`.
    skip: List[Tuple[int, int]] = []
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        skip.append((m.start(), _match_brace(text, mask, m.end() - 1)))
    impls: List[Tuple[int, str, int]] = []
    for m in re.finditer(r"^[ \t]*impl\b([^{;]*)\{", text, re.M):
        if mask[m.start() + len(m.group(0)) - len(m.group(0).lstrip())]:
            head = " ".join(m.group(1).split())
            impls.append((m.start(), head, _match_brace(text, mask, m.end() - 1)))
    items = 0
    for i, line in enumerate(lines):
        m = _PUB_ITEM.match(line)
        if not m or m.group("kw") in ("use", "mod"):
            continue
        pos = offsets[i] + len(m.group("indent"))
        if not mask[pos] or any(a <= pos < b for a, b in skip):
            continue
        owner = next((head for a, head, b in impls if a <= pos < b), None)
        # Methods of `impl Trait for Type` blocks are the trait's; list only inherent ones.
        if owner and " for " in f" {owner} ":
            continue
        doc: List[str] = []
        k = i - 1
        while k >= 0 and re.match(r"\s*(///|#\[)", lines[k]):
            s = lines[k].strip()
            if s.startswith("///"):
                body = s[3:]
                doc.append(body[1:] if body.startswith(" ") else body)
            k -= 1
        doc.reverse()
        name_m = re.match(r"(\w+)", m.group("rest"))
        name = name_m.group(1) if name_m else "?"
        owner_type = re.sub(r"^<[^>]*>\s*", "", owner).split("<")[0].strip() if owner else ""
        title = f"{owner_type}::{name}" if owner else name
        kind = "fn" if m.group("kw").endswith("fn") else m.group("kw")
        parts += [f"### `{title}` <small>{'method' if owner and kind == 'fn' else kind}</small>", ""]
        parts += ["```rust", _signature(lines, i), "```", ""]
        if doc:
            parts += [_rustdoc_to_markdown(doc), ""]
        items += 1
    if items == 0:
        parts += ["*(No public items.)*", ""]
    return "\n".join(parts)


def rust_reference_page() -> str:
    header = textwrap.dedent(
        """\
        # Rust crate reference

        !!! info "Generated from the code"
            This page is written at build time by `docs/hooks/code.py` from the doc comments
            (`//!` and `///`) and the signatures of the public items in `rust/src/`, so it is
            always the current API. The PyO3 wrappers in `rust/src/py/` are the
            `racer_ref._core` extension and are documented as Python on the
            [racer_ref page](python-api.md). For the full rustdoc (private items, trait
            impls, source links) run:

            ```bash
            cargo doc --no-deps --open
            ```

        The crate is `racer-ref`, library `racer_ref` (`Cargo.toml` at the repository
        root, `[lib] path = "rust/src/lib.rs"`). Without the `python` feature it has no
        dependencies and knows nothing of Python or torch; `cargo test` runs its unit tests
        and the examples in the doc comments below, and
        `cargo run --example drafting_loop` runs a whole decoding loop in Rust alone. How
        to depend on it: [Using the crate from Rust](../explanation/rust-and-python.md#using-the-crate-from-rust).

        """
    )
    files = sorted(p for p in RUST_SRC.rglob("*.rs") if "py" not in p.relative_to(RUST_SRC).parts[:-1])
    files.sort(key=lambda p: (p.name != "lib.rs", p.as_posix()))
    pages = []
    for path in files:
        if path.stat().st_size < 10:  # an empty placeholder file
            continue
        pages.append(rust_module_page(path))
    return header + "\n\n".join(pages) + "\n"


def on_files(files, config):
    files.append(File.generated(config, "reference/rust.md", content=rust_reference_page()))
    return files
