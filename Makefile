# Two set-up commands (see README):
#   make run   - virtualenv, install, index workspace-template/ into ./.state, run sample searches
#   make test  - install the test dependencies (compiles llama-cpp-python once) and run the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STATE  := $(CURDIR)/.state
# llama-cpp-python is compiled from source (no binary wheel on PyPI). GGML_NATIVE is off because a native
# build on VMs that advertise AMX but do not enable it dies with SIGILL on quantised models; the explicit
# x86-64 feature set below is what this project's machines run. The built wheel is kept in a wheelhouse
# keyed by these flags, so later runs (and CI on the same machine) reuse it instead of compiling again.
LLAMA_VERSION ?= 0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX_VNNI=ON -DLLAVA_BUILD=OFF
WHEELHOUSE ?= $(HOME)/.cache/mdmemory/wheels/$(shell echo '$(LLAMA_VERSION) $(LLAMA_CMAKE_ARGS)' | sha1sum | cut -c1-12)

.PHONY: run test venv bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.base: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.test: $(BIN)/python pyproject.toml
	@mkdir -p $(WHEELHOUSE)
	@ls $(WHEELHOUSE)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || { \
	  echo "compiling llama-cpp-python $(LLAMA_VERSION) once (about 5 minutes on 2 cores)"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel --quiet --no-cache-dir --no-deps -w $(WHEELHOUSE) \
	    "llama-cpp-python==$(LLAMA_VERSION)"; }
	$(BIN)/pip install --quiet --force-reinstall --no-deps $(WHEELHOUSE)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(BIN)/pip install --quiet --find-links $(WHEELHOUSE) -e ".[test,local]" "llama-cpp-python==$(LLAMA_VERSION)"
	touch $@ $(VENV)/.base

venv: $(VENV)/.base

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

clean:
	rm -rf $(VENV) $(STATE) .pytest_cache
