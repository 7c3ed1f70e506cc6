# Entry points for developers and CI (.ci/run calls `make test`).
#
#   make test            lint, unit and integration tests, then LangGraph's own suite
#   make lint            ruff and mypy
#   make test-unit       only our tests (pytest over tests/)
#   make test-langgraph  LangGraph's test suite against our savers
#   make demo            the CLI demo
#   make bench           benchmarks against the upstream savers
#
# Services: tests use $LGD_POSTGRES_URL, else a PostgreSQL answering on 127.0.0.1:5432,
# else a throwaway server they start themselves (see tests/servers.py).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Re-installs when pyproject.toml changes or the virtualenv is recreated.
SETUP_STAMP := $(VENV)/.lgd-setup-stamp
PYTEST_WORKERS ?= 2
PYTEST_ARGS ?=

.PHONY: setup test lint test-unit test-langgraph demo bench

setup: $(SETUP_STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# pip >= 25.1 is needed for --group (PEP 735 dependency groups), hence the upgrade first.
$(SETUP_STAMP): pyproject.toml Makefile | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[all]' --group test --group bench --group lint
	touch $@

test: lint test-unit
	$(MAKE) --no-print-directory test-langgraph

# ruff (lint and format) over everything, mypy over the package.
lint: $(SETUP_STAMP)
	$(VENV)/bin/ruff check langgraph_durable tests benchmarks
	$(VENV)/bin/ruff format --check langgraph_durable tests benchmarks
	$(VENV)/bin/mypy langgraph_durable

# pytest exits non-zero (5) when it collects no test, which fails the target too.
test-unit: $(SETUP_STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS) tests

test-langgraph: $(SETUP_STAMP)
	$(PY) tests/langgraph_suite/run_suite.py

demo: $(SETUP_STAMP)
	$(VENV)/bin/langgraph-durable demo

bench: $(SETUP_STAMP)
	$(PY) benchmarks/run.py
