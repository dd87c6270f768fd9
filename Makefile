# Two entry points on a fresh machine: `make demo` and `make test`.
# Both create .venv and install graphtape (editable, with test extras) on first use.
# `make demo` records the examples (when the store has none), then serves them in the Studio until Ctrl-C;
# `make demo-record` records and replays them, then exits (for scripts).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo demo-record test lint bench

$(BIN)/graphtape: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $@

demo: $(BIN)/graphtape
	$(BIN)/python -m examples.demo

demo-record: $(BIN)/graphtape
	$(BIN)/python -m examples.demo --no-serve
	@echo "graphtape is installed in $(VENV): run 'source $(BIN)/activate' to put it on your PATH, or call $(BIN)/graphtape"

test: $(BIN)/graphtape
	$(BIN)/python -m pytest

# lint, format and type check (configured in pyproject.toml); each fails on any finding
LINTED := src tests benchmarks examples
lint: $(BIN)/graphtape
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

bench: $(BIN)/graphtape
	$(BIN)/python -m pip install -q -e ".[test,bench]"
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/history.py
	$(BIN)/python benchmarks/savers.py
	$(BIN)/python benchmarks/faults.py
