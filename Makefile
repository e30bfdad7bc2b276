# Two set-up commands (see README):
#   make run   - virtualenv, install, index workspace-template/ into ./.state, run sample searches
#   make test  - install the test dependencies (compiles llama-cpp-python once) and run the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STATE  := $(CURDIR)/.state
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF

.PHONY: run test venv bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.base: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.test: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e ".[test,local]"
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
	$(BIN)/python benchmarks/search_latency.py

lint: $(VENV)/.test
	$(BIN)/ruff check mdmemory tests benchmarks
	$(BIN)/ruff format --check mdmemory tests benchmarks

clean:
	rm -rf $(VENV) $(STATE) .pytest_cache
