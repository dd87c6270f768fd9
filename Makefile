# Two entry points on a fresh machine: `make demo` and `make test`.
# Both create .venv and install graphtape (editable, with test extras) on first use.
# `make demo` records the examples (when the store has none), then serves them in the Studio until Ctrl-C;
# `make demo-record` records and replays them, then exits (for scripts).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo demo-record test lint bench langgraph-suite web-check front-end-e2e

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
	$(BIN)/python benchmarks/server.py
	$(BIN)/python benchmarks/server_queue.py

# LangGraph's own test files (from the sdist of the installed langgraph, fetched once into ~/.cache/graphtape)
# with graphtape's saver on each backend, then with every graph recorded and every run replayed strictly;
# options through ARGS, e.g. make langgraph-suite ARGS="--mode recorded --files time_travel"
langgraph-suite: $(BIN)/graphtape
	$(BIN)/python -m pip install -q -e ".[test,conformance]"
	$(BIN)/python benchmarks/langgraph_suite.py $(ARGS)

# the web UI (source in web/, built assets committed in src/graphtape/ui/): lint, type check, unit tests, and a
# rebuild from the lock file that must give exactly the committed assets (needs Node.js and npm, not the venv)
web-check:
	cd web && npm ci --no-audit --no-fund --loglevel=error && npm run lint && npm test && npm run build
	@if [ -n "$$(git status --porcelain -- src/graphtape/ui)" ]; then \
	  git status --short -- src/graphtape/ui; \
	  echo "the committed web UI build is not what web/ builds: run 'cd web && npm ci && npm run build' and commit src/graphtape/ui"; \
	  exit 1; \
	fi

# a LangGraph front end in a real browser against `graphtape dev`: e2e/front_end is a chat page on
# @langchain/langgraph-sdk's useStream (built with npm and esbuild from its lock file), driven by Playwright in
# Chromium (/usr/bin/chromium); about a minute, so not part of `make test` (the test skips without the build)
front-end-e2e: $(BIN)/graphtape
	cd e2e/front_end && npm ci --no-audit --no-fund --loglevel=error && npm run build
	$(BIN)/python -m pytest tests/test_front_end_browser.py -q
