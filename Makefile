# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
SCENARIO ?= scenarios/leakage_vs_accuracy.yaml
PYTEST_ARGS ?=

.PHONY: demo test test-slow bench lint install clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@# plain pip finds the local CPU torch wheel; never let it pull a CUDA build
	@$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@$(VENV)/bin/testbed run $(SCENARIO)

test: $(STAMP)
	@$(PY) -m pytest -m "not slow and not benchmark" $(PYTEST_ARGS)

test-slow: $(STAMP)
	@$(PY) -m pytest -m "slow" $(PYTEST_ARGS)

bench: $(STAMP)
	@$(VENV)/bin/testbed bench

lint: $(STAMP)
	@$(VENV)/bin/ruff check testbed protocols attacks defenses tests
	@$(VENV)/bin/ruff format --check testbed protocols attacks defenses tests

clean:
	rm -rf runs .pytest_cache .hypothesis .benchmarks
