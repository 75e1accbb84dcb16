PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip

.PHONY: demo test lint install install-test clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(PIP) install --quiet -c constraints.txt torch==2.13.0
	$(PIP) install --quiet -c constraints.txt -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install --quiet -c constraints.txt -e '.[test,ray]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: install
	$(BIN)/placewise demo

test: install-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 --dist loadfile --durations=40
	$(BIN)/python -m pytest --doctest-modules src/placewise

lint: install-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV)
