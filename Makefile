# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
SCENARIO ?= scenarios/leakage_vs_accuracy.yaml
PYTEST_ARGS ?=
JOBS ?= 2
# make test runs the default suite in one pytest-xdist worker per CPU, at most 4 (many tests start
# processes of their own; a worker and its sandbox forkserver hold 1.3 GB), an idle worker taking
# tests queued for a busy one (worksteal: the long ones do not end up at the tail of one queue);
# TEST_WORKERS=0 runs it in order in this process (make test-slow too). The benchmark and Ray
# targets stay in order.
# --benchmark-disable: the suite deselects the benchmarks anyway; without it pytest-benchmark warns
# that xdist disabled them
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)

.PHONY: demo test test-slow test-ray bench lint install clean docs-check mutation

# pip -qq: errors only. From pip 24 on, -q still shows the build backend's warnings, and
# setuptools warns on every editable install of a project of several top-level packages
# ("Editable installation ... be careful with folders ... of the same name"), which a user can
# do nothing about; a failed install still prints its error and stops make.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the testbed and its dependencies into $(VENV) (first run only: 4-5 min on 2 busy cores)"
	@$(PY) -m pip install -qq --upgrade pip
	@# a line per dependency while pip works (scripts/install_deps.py); plain pip finds the
	@# local CPU torch wheel; never let it pull a CUDA build
	@$(PY) scripts/install_deps.py dev
	@echo "installing the testbed itself"
	@$(PY) -m pip install -qq -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@$(VENV)/bin/testbed run $(SCENARIO) --jobs $(JOBS)

# compileall first: bytecode for the checkout's packages, so that the many processes the tests
# start (the command line, sandboxed attacks, guard workers) read it instead of compiling every
# module again where the environment sets PYTHONDONTWRITEBYTECODE (compileall writes it anyway)
COMPILED := testbed protocols attacks defenses bench scripts tests
test: $(STAMP)
	@$(PY) -m compileall -q -j 0 $(COMPILED) >/dev/null
	@$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --benchmark-disable -m "not slow and not benchmark and not ray" $(PYTEST_ARGS)

# the slow suite: the long scenario runs whose protocol and command `make test` covers with a
# shorter end-to-end test, on the same workers; the figures of README.md and docs/ are `make
# docs-check`'s (the demo and several sweeps again), not these
DOCS_CHECK_TESTS := tests/test_docs_figures.py tests/test_findings_first_audit.py
test-slow: $(STAMP)
	@$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --benchmark-disable -m "slow" $(addprefix --ignore=,$(DOCS_CHECK_TESTS)) $(PYTEST_ARGS)

# the dev extra (make test) includes Ray: the slow suite runs scenarios/engine_ray.yaml.
# The Ray engine's own tests (start and stop local Ray clusters bound to 127.0.0.1; no usage
# statistics; session files under the run directory or /tmp, removed after each run):
test-ray: $(STAMP)
	@$(PY) -m pip install -qq -e '.[ray]'
	@$(PY) -m pytest -m ray tests/test_engine_ray.py tests/test_engine_ray_cluster.py $(PYTEST_ARGS)

# pytest-benchmark smoke timings + the quick `testbed bench` subset (BENCH_ARGS=--full for docs)
BENCH_ARGS ?=
bench: $(STAMP)
	@$(PY) -m pytest -m benchmark tests/benchmarks $(PYTEST_ARGS)
	@$(VENV)/bin/testbed bench $(BENCH_ARGS)

# recompute the figures README.md and docs/ quote (docs/findings/figures.json and the demo table);
# fails when one drifts beyond its rounding or its seeds' 95 % interval (slow: the demo, frontier_fedbary, frontier_dp and three distillation
# sweeps, the FedBary seeds; one group: PYTEST_ARGS='-k fedbary'; timings in docs/ are not checked)
docs-check: $(STAMP)
	@$(PY) -m pytest -m slow $(DOCS_CHECK_TESTS) $(PYTEST_ARGS)

lint: $(STAMP)
	@$(VENV)/bin/ruff check testbed protocols attacks defenses bench tests
	@$(VENV)/bin/ruff format --check testbed protocols attacks defenses bench tests

# mutation testing of the metrics, the ledger and the guard (docs/guide/development.md; [tool.mutmut]
# in pyproject.toml); long (~15 min on 2 busy cores), never part of `make test`
MUTMUT_CHILDREN ?= 1
mutation: $(STAMP)
	@OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 15 $(VENV)/bin/mutmut run --max-children $(MUTMUT_CHILDREN) > /dev/null || true
	@$(VENV)/bin/mutmut results --all true | $(PY) scripts/mutation_score.py

clean:
	rm -rf runs .pytest_cache .hypothesis .benchmarks mutants
