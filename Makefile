# Entry points for developers and CI (.ci/run calls `make test`).
#
#   make test            lint, unit and integration tests, then LangGraph's own suite
#   make lint            ruff and mypy
#   make test-unit       only our tests (pytest over tests/)
#   make test-langgraph  LangGraph's test suite against all our savers (PostgreSQL, Redis,
#                        DynamoDB; sync and async) and stores; LANGGRAPH_SUITE_ARGS="--saver redis"
#                        narrows it; then the store tests of langgraph-checkpoint and
#                        langgraph-checkpoint-postgres against our stores (run_store_tests.py)
#   make demo            the CLI demo
#   make bench           benchmarks against the upstream savers
#   make soak            the long runs: 500 SIGKILL trials per backend (make test runs 8),
#                        100 property examples per test (make test runs 4) and the full
#                        tamper matrix (every backend, mode and edit; make test runs a part),
#                        every Redis Cluster failover variant, forget over 10,000 store items
#                        and the store differential tests at 100 examples
#
# Services (tests/servers.py, docs/testing.md): PostgreSQL from $LGD_POSTGRES_URL, else one
# answering on 127.0.0.1:5432, else a throwaway server; Redis from $LGD_REDIS_URL, else one
# answering on 127.0.0.1:6379, else a throwaway redis-server; a 3-node Redis Cluster from
# $LGD_REDIS_CLUSTER_URL, else a throwaway one; DynamoDB from $LGD_DYNAMODB_ENDPOINT, else
# moto's server. Throwaway servers are started by the tests and stopped when they end.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Re-installs when pyproject.toml changes or the virtualenv is recreated.
SETUP_STAMP := $(VENV)/.lgd-setup-stamp
# `langchain` (create_agent, for the redaction tests) lives outside the virtualenv: when it is
# installed, langchain-core stamps its version into model metadata, which LangGraph's own
# suite compares against expectations made without it. Tests that need it add this folder
# to sys.path (tests/redaction_helpers.py).
AGENT_DEPS := .lgd/agent-deps
PYTEST_WORKERS ?= 2
# The tests start hundreds of Python processes (CLI commands, crash trials, workers): with
# PYTHONDONTWRITEBYTECODE set, each compiled the package again. Bytecode caches go to
# __pycache__ folders, which git ignores.
unexport PYTHONDONTWRITEBYTECODE
PYTEST_ARGS ?=
LANGGRAPH_SUITE_ARGS ?=

.PHONY: setup test lint test-unit test-langgraph demo bench soak

# Everything the tests need from the network is fetched here, so that `make test` runs
# offline afterwards: the packages (above), and LangGraph's sdist for its own test suite
# (cached under .lgd/langgraph-suite/; a no-op when it is there), and the sdists of
# langgraph-checkpoint and langgraph-checkpoint-postgres for their store tests (same place).
setup: $(SETUP_STAMP)
	$(PY) tests/langgraph_suite/run_suite.py --fetch-only
	$(PY) tests/langgraph_suite/run_store_tests.py --fetch-only

$(PY):
	$(PYTHON) -m venv $(VENV)

# pip >= 25.1 is needed for --group (PEP 735 dependency groups), hence the upgrade first.
$(SETUP_STAMP): pyproject.toml Makefile | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[all]' --group test --group bench --group lint
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --upgrade --target $(AGENT_DEPS) 'langchain>=1.0,<2'
	touch $@

test: lint test-unit
	$(MAKE) --no-print-directory test-langgraph

# ruff (lint and format) over everything, mypy over the package.
lint: setup
	$(VENV)/bin/ruff check langgraph_durable tests benchmarks
	$(VENV)/bin/ruff format --check langgraph_durable tests benchmarks
	$(VENV)/bin/mypy langgraph_durable

# pytest exits non-zero (5) when it collects no test, which fails the target too.
test-unit: setup
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS) tests

test-langgraph: setup
	$(PY) tests/langgraph_suite/run_suite.py $(LANGGRAPH_SUITE_ARGS)
	$(PY) tests/langgraph_suite/run_store_tests.py

demo: setup
	$(VENV)/bin/langgraph-durable demo

bench: setup
	$(PY) benchmarks/run.py

# The effect journal's crash harness with 500 trials per backend (tests/effects/test_crash.py)
# and the property tests with 100 examples each (tests/property); make test runs 8 trials
# and 4 examples. LGD_TAMPER_FULL=1: the tamper matrix on every backend in every mode, sync
# and async, every edit (tests/security/test_tamper_matrix.py; make test runs about 40
# seconds of it: DynamoDB on a sample of 60 edits). Then the soak (tests/soak), the three
# backends at once (-n 3): 16 concurrent threads for 30 minutes per backend in 4 worker
# processes, SIGKILLed at random, their connections cut (PostgreSQL, Redis) or their calls
# throttled and their replies lost (DynamoDB); every thread's history and effects checked.
# Meanwhile one worker per backend runs 100,000 steps (at most 30 minutes: moto is slow) and
# its RSS may grow 10% at most after warm-up. make test runs 2 seconds, 4 threads, 40 steps.
SOAK_TRIALS ?= 500
SOAK_PROPERTY_EXAMPLES ?= 100
SOAK_SECONDS ?= 1800
SOAK_THREADS ?= 16
SOAK_RSS_STEPS ?= 100000
soak: setup
	mkdir -p .lgd && rm -f .lgd/soak-report.txt
	LGD_CRASH_TRIALS=$(SOAK_TRIALS) LGD_CRASH_REPORT=.lgd/soak-report.txt \
		LGD_PROPERTY_EXAMPLES=$(SOAK_PROPERTY_EXAMPLES) LGD_TAMPER_FULL=1 \
		LGD_FAILOVER_FULL=1 LGD_FORGET_FULL=1 \
		$(PY) -m pytest -n 4 --timeout 0 tests/effects/test_crash.py tests/property \
		tests/security/test_tamper_matrix.py tests/faults/test_redis_failover.py \
		tests/cli/test_forget.py tests/store; \
		status=$$?; \
		LGD_SOAK_SECONDS=$(SOAK_SECONDS) LGD_SOAK_THREADS=$(SOAK_THREADS) LGD_SOAK_WORKERS=4 \
		LGD_SOAK_RSS_STEPS=$(SOAK_RSS_STEPS) LGD_SOAK_RSS_SECONDS=$(SOAK_SECONDS) \
		LGD_SOAK_RSS_BOUND=0.1 LGD_SOAK_REPORT=.lgd/soak-report.txt \
		$(PY) -m pytest -n 3 --timeout 0 tests/soak; \
		soak=$$?; cat .lgd/soak-report.txt; [ $$status -eq 0 ] && [ $$soak -eq 0 ]
