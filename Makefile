# Two set-up commands (see README):
#   make run   - virtualenv, install, index workspace-template/ into ./.state, run sample searches
#   make test  - install the test dependencies (compiles llama-cpp-python once) and run the whole suite
# and one for faster local vectors:
#   make local-fast - compile llama-cpp-python for this venv (~20 min, progress shown); mdmemory then uses it
#                     instead of xllamacpp, the prebuilt binding the `local` extra installs (docs/providers.md)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STATE  := $(CURDIR)/.state
# llama-cpp-python is compiled from source (no binary wheel on PyPI) as a portable build: every x86 CPU
# backend variant (SSE4.2 ... AVX-512, AMX) is built as its own library and llama.cpp picks the one this CPU
# supports at load time (mdmemory.providers.native), so the same wheel runs on any machine of this kind and
# no CPU feature is hard-coded here. mdmemory also probes each model in a child process before loading it,
# stepping down a variant if the best-scored one dies with SIGILL (mdmemory.providers.probe). The built
# wheel is kept in a wheelhouse keyed by version and flags, so later runs reuse it instead of compiling again.
LLAMA_VERSION ?= 0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DLLAVA_BUILD=OFF
WHEELHOUSE ?= $(HOME)/.cache/mdmemory/wheels/$(shell echo '$(LLAMA_VERSION) $(LLAMA_CMAKE_ARGS) $(shell uname -m)' | sha1sum | cut -c1-12)

.PHONY: run test venv bench lint clean local-fast

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

$(VENV)/.test: SHELL := /bin/bash
$(VENV)/.test: .SHELLFLAGS := -o pipefail -c
$(VENV)/.test: $(BIN)/python pyproject.toml
	$(BUILD_LLAMA)
	$(BIN)/pip install --quiet --force-reinstall --no-deps $(WHEELHOUSE)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(BIN)/pip install --quiet --find-links $(WHEELHOUSE) -e ".[test,local]" "llama-cpp-python==$(LLAMA_VERSION)"
	touch $@ $(VENV)/.base

venv: $(VENV)/.base

local-fast: SHELL := /bin/bash
local-fast: .SHELLFLAGS := -o pipefail -c
local-fast: $(VENV)/.base
	$(BUILD_LLAMA)
	$(BIN)/pip install --quiet --find-links $(WHEELHOUSE) -e ".[local]" "llama-cpp-python==$(LLAMA_VERSION)"
	@$(BIN)/python -c "from mdmemory.providers.local import choose_binding as c; print('provider local now uses', c())"

run: $(VENV)/.base
	MDMEMORY_HOME=$(STATE) MDMEMORY_WORKSPACE=$(CURDIR)/workspace-template $(BIN)/mdmemory index
	MDMEMORY_HOME=$(STATE) MDMEMORY_WORKSPACE=$(CURDIR)/workspace-template $(BIN)/mdmemory search "when do the backups run"
	MDMEMORY_HOME=$(STATE) MDMEMORY_WORKSPACE=$(CURDIR)/workspace-template $(BIN)/mdmemory search "寿司"
	MDMEMORY_HOME=$(STATE) MDMEMORY_WORKSPACE=$(CURDIR)/workspace-template $(BIN)/mdmemory status

test: $(VENV)/.test
	$(BIN)/python -m pytest -q

bench: $(VENV)/.test
	$(BIN)/pip install --quiet -e ".[bench]"
	$(BIN)/python benchmarks/run_all.py

lint: $(VENV)/.test
	$(BIN)/ruff check mdmemory tests benchmarks
	$(BIN)/ruff format --check mdmemory tests benchmarks
	$(BIN)/mypy mdmemory
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) $(STATE) .pytest_cache site
