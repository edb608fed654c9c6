"""MkDocs hook: serve MathJax with the site, so that the maths renders with no network.

The MathJax 3 build comes from the ``django-static-mathjax`` wheel (a plain copy of
MathJax's ``es5`` folder under ``mathjax/static/mathjax``; it needs no Django), which the
``dev`` extra installs. We add the files the pages use to the site as
``javascripts/mathjax/``: the ``tex-mml-chtml.js`` component, its fonts, the TeX extensions
it loads on demand, and the menu and accessibility components. ``mkdocs.yml`` loads
``javascripts/mathjax/tex-mml-chtml.js``; no page refers to a CDN.
"""

from __future__ import annotations

from pathlib import Path

#: Sub-folders and files of MathJax's es5 folder that the site needs (2.5 MB in all).
PARTS = ("tex-mml-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2", "ui", "a11y", "adaptors")
#: Where they go in the site.
TARGET = "javascripts/mathjax"


def mathjax_es5() -> Path:
    try:
        import mathjax  # the django-static-mathjax wheel's package
    except ImportError:
        raise SystemExit("docs/hooks/mathjax.py: MathJax is not installed; `pip install "
                         "django-static-mathjax` (in racer-ref's dev extra)") from None
    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (es5 / "tex-mml-chtml.js").is_file():
        raise SystemExit(f"docs/hooks/mathjax.py: no tex-mml-chtml.js in {es5}")
    return es5


def on_files(files, config):
    from mkdocs.structure.files import File

    es5 = mathjax_es5()
    for part in PARTS:
        path = es5 / part
        for source in sorted([path] if path.is_file() else path.rglob("*")):
            if source.is_file():
                uri = f"{TARGET}/{source.relative_to(es5).as_posix()}"
                files.append(File.generated(config, uri, abs_src_path=str(source)))
    return files
