# Two set-up commands (see README):
#   make run   - virtualenv, install, index workspace-template/ into ./.state, run sample searches
#   make test  - install the test dependencies (compiles llama-cpp-python once) and run the whole suite
#   make lint  - ruff, mypy, the import contracts (CI runs it before the tests); make graph - the import graph
# and, for the release: make dist-check - the built wheel installed in a fresh virtualenv, every extra smoked
# and one for faster local vectors:
#   make local-fast - compile llama-cpp-python for this venv (~20 min, progress shown); mdmem then uses it
#                     instead of xllamacpp, the prebuilt binding the `local` extra installs (docs/providers.md)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STATE  := $(CURDIR)/.state
# llama-cpp-python is compiled from source (no binary wheel on PyPI) as a portable build: every x86 CPU
# backend variant (SSE4.2 ... AVX-512, AMX) is built as its own library and llama.cpp picks the one this CPU
# supports at load time (mdmem.providers.native), so the same wheel runs on any machine of this kind and
# no CPU feature is hard-coded here. mdmem also probes each model in a child process before loading it,
# stepping down a variant if the best-scored one dies with SIGILL (mdmem.providers.probe). The built
# wheel is kept in a wheelhouse keyed by version and flags, so later runs reuse it instead of compiling again.
LLAMA_VERSION ?= 0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DLLAVA_BUILD=OFF
WHEELHOUSE ?= $(HOME)/.cache/mdmemory/wheels/$(shell echo '$(LLAMA_VERSION) $(LLAMA_CMAKE_ARGS) $(shell uname -m)' | sha1sum | cut -c1-12)

.PHONY: run test venv bench lint graph clean dist-check llama-wheel local-fast

# Compile the llama-cpp-python wheel into the wheelhouse unless it is there, printing [compiled/total] file
# for each of the ~390 compile steps (the whole build log goes to $(WHEELHOUSE)/build.log).
define BUILD_LLAMA
	@mkdir -p $(WHEELHOUSE)
	@ls $(WHEELHOUSE)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || { \
	  echo "compiling llama-cpp-python $(LLAMA_VERSION) once, every CPU variant (about 20 minutes on 2 cores)"; \
	  CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel -v --no-cache-dir \
	    --no-deps -w $(WHEELHOUSE) "llama-cpp-python==$(LLAMA_VERSION)" 2>&1 | tee $(WHEELHOUSE)/build.log \
	    | sed -unE 's|^ *\[([0-9]+)/([0-9]+)\] .* -o ([^ ]*/)?([^ /]+) .*|  [\1/\2] \4|p' \
	  || { echo "the build failed: see $(WHEELHOUSE)/build.log"; exit 1; }; }
endef

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.base: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e .
	touch $@

# The llama-cpp-python wheel in the wheelhouse, compiled once when it is not there yet.
llama-wheel: SHELL := /bin/bash
llama-wheel: .SHELLFLAGS := -o pipefail -c
llama-wheel: $(BIN)/python
	$(BUILD_LLAMA)

$(VENV)/.test: $(BIN)/python pyproject.toml | llama-wheel
	$(BIN)/pip install --quiet --force-reinstall --no-deps $(WHEELHOUSE)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(BIN)/pip install --quiet --find-links $(WHEELHOUSE) -e ".[test,local]" "llama-cpp-python==$(LLAMA_VERSION)"
	touch $@ $(VENV)/.base

venv: $(VENV)/.base

local-fast: $(VENV)/.base | llama-wheel
	$(BIN)/pip install --quiet --find-links $(WHEELHOUSE) -e ".[local]" "llama-cpp-python==$(LLAMA_VERSION)"
	@$(BIN)/python -c "from mdmem.providers.local import choose_binding as c; print('provider local now uses', c())"

run: $(VENV)/.base
	MDMEMORY_HOME=$(STATE) MDMEMORY_WORKSPACE=$(CURDIR)/workspace-template $(BIN)/mdmem index
	MDMEMORY_HOME=$(STATE) MDMEMORY_WORKSPACE=$(CURDIR)/workspace-template $(BIN)/mdmem search "when do the backups run"
	MDMEMORY_HOME=$(STATE) MDMEMORY_WORKSPACE=$(CURDIR)/workspace-template $(BIN)/mdmem search "寿司"
	MDMEMORY_HOME=$(STATE) MDMEMORY_WORKSPACE=$(CURDIR)/workspace-template $(BIN)/mdmem status

test: $(VENV)/.test
	$(BIN)/python -m pytest -q

# Build the sdist and wheel, check them, install the wheel into a fresh virtualenv and run make run's job and a
# smoke of every extra with it (scripts/dist_check.py; about 1.5 minutes, llama-cpp-python from the wheelhouse).
dist-check: $(VENV)/.base | llama-wheel
	$(BIN)/pip install --quiet "build>=1.2" "twine>=5"
	$(BIN)/python scripts/dist_check.py --wheelhouse $(WHEELHOUSE)

bench: $(VENV)/.test
	$(BIN)/pip install --quiet -e ".[bench]"
	$(BIN)/python benchmarks/run_all.py

# ruff, mypy, the floors (an import-linter layers contract and no cycles: pyproject.toml [tool.importlinter]),
# and the graph's shape (no cycle, nothing but __init__/__main__/memory at the root, no module over 450 lines).
lint: $(VENV)/.test
	$(BIN)/ruff check mdmem tests benchmarks scripts
	$(BIN)/ruff format --check mdmem tests benchmarks scripts
	$(BIN)/mypy mdmem scripts/import_graph.py scripts/dist_check.py
	$(BIN)/lint-imports
	$(BIN)/python scripts/import_graph.py --check
	$(BIN)/mkdocs build --strict

# The package's import graph: floors (subpackages) with their sizes, the edges between them, cycles.
graph:
	$(PYTHON) scripts/import_graph.py

clean:
	rm -rf $(VENV) $(STATE) .pytest_cache site
