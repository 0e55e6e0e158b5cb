# Spillway: `make demo` runs the sample pipeline end to end; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test setup clean lock

# The runtime only: what the demo and the service need.
$(BIN)/spillway: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(BIN)/spillway

# The test extra on top (pytest, selenium, moto, schemathesis, duckdb, ...), for `make test` only.
$(VENV)/.test-deps: $(BIN)/spillway
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

setup: $(BIN)/spillway

demo: setup
	$(BIN)/spillway demo

test: $(VENV)/.test-deps
	$(BIN)/python -m pytest

# deploy/requirements.lock, what the images install (pinned, with hashes), from pyproject.toml's
# ranges: run after changing a dependency, and commit it. Needs uv (installed into the venv if missing).
lock:
	bash deploy/lock.sh

clean:
	rm -rf var/demo .pytest_cache
