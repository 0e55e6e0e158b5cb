# Spillway: `make demo` runs the sample pipeline end to end; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test setup clean

$(BIN)/spillway: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/spillway

setup: $(BIN)/spillway

demo: setup
	$(BIN)/spillway demo

test: setup
	$(BIN)/python -m pytest

clean:
	rm -rf var/demo .pytest_cache
