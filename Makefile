# gpflow-tight developer commands. Every target creates .venv (Python 3.11) if it is missing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python

.PHONY: demo test test-gpflow test-gpflow-full test-compat test-docs browser lint format bench docs dist clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m gpflow_tight demo --output demo_output

lint: $(VENV)/.installed-test
	$(BIN)/ruff check gpflow_tight tests benchmarks notebooks examples docs/conf.py
	$(BIN)/ruff format --check gpflow_tight tests benchmarks notebooks examples docs/conf.py
	$(BIN)/mypy gpflow_tight

format: $(VENV)/.installed-test
	$(BIN)/ruff format gpflow_tight tests benchmarks notebooks examples docs/conf.py
	$(BIN)/ruff check --fix gpflow_tight tests benchmarks notebooks examples docs/conf.py

test: lint browser
	$(BIN)/pytest -n 2 --durations=15 --ignore=tests/integration/test_gpflow_suite.py \
		--ignore=tests/compat tests
	$(MAKE) --no-print-directory test-gpflow

# GPflow's own tests with each drop-in swapped in (they run on both cores in subprocesses):
# test-gpflow (part of `make test`, about 5 minutes) runs 15 of its 22 files under 3 of the 5 swaps
# (one per family of drop-ins), test-gpflow-full (about an hour) runs them all
test-gpflow: $(VENV)/.installed-test
	$(BIN)/pytest -p no:xdist --durations=0 tests/integration/test_gpflow_suite.py

test-gpflow-full: $(VENV)/.installed-test
	GPFLOW_TIGHT_GPFLOW_SUITE=full $(BIN)/pytest -p no:xdist --durations=0 \
		tests/integration/test_gpflow_suite.py

# the sdist, and the wheel built from it (so a file missing from the sdist breaks the wheel)
dist: $(VENV)/.installed-test
	rm -rf dist
	$(PY) -m build --outdir dist .

# A second environment on the stack Trieste and GPflux pin (tensorflow 2.18): the wheel of
# `make dist` installed into it, a smoke test of the installed package from outside the source
# tree, and the integration tests (tests/compat: they also build the site with the two
# integration notebooks executed from their committed records, and run both notebooks as
# scripts on their smoke settings).
COMPAT := .venv-compat
COMPAT_PINS := trieste==4.6.1 gpflux==0.4.5

$(COMPAT)/bin/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	$(PYTHON) -m venv $(COMPAT)
	$(COMPAT)/bin/python -m pip install --quiet --upgrade pip

test-compat: dist | $(COMPAT)/bin/python
	$(COMPAT)/bin/pip install --quiet "$$(ls dist/*.whl)[docs]" $(COMPAT_PINS) pytest pytest-xdist
	$(COMPAT)/bin/pip install --quiet --force-reinstall --no-deps dist/*.whl
	$(COMPAT)/bin/pip check
	cd "$$(mktemp -d)" && $(abspath $(COMPAT))/bin/python $(abspath tests/compat/installed_smoke.py)
	$(COMPAT)/bin/pytest -n 2 --durations=10 tests/compat

# the site builds without warnings with every notebook executed (on their short settings) and
# works offline, its maths checked in headless Chromium (`make test` runs this test too)
test-docs: $(VENV)/.installed-test browser
	$(BIN)/pytest -p no:xdist --durations=0 tests/integration/test_site.py

# Debian's Chromium for the docs test, installed with apt-get when it is missing (as root, or
# through sudo); GPFLOW_TIGHT_CHROMIUM names another Chromium or Chrome binary instead
CHROMIUM ?= $(or $(GPFLOW_TIGHT_CHROMIUM),/usr/bin/chromium)
browser:
	@test -x $(CHROMIUM) || { \
		echo "installing chromium (Debian's package) for the docs test"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo -n ); \
		{ $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; } >/tmp/apt-chromium.log 2>&1 || \
		{ tail -20 /tmp/apt-chromium.log; echo "error: could not install chromium: run 'sudo apt-get install -y chromium', or set GPFLOW_TIGHT_CHROMIUM to a Chromium binary"; exit 1; }; }

# the site, with the notebooks executed (cached: rerun only when they change)
docs: $(VENV)/.installed-test
	$(BIN)/sphinx-build -W --keep-going -b html -c docs . docs/_build/html
	@echo "open docs/_build/html/index.html"

bench: $(VENV)/.installed
	$(PY) benchmarks/cost.py
	$(PY) benchmarks/snelson.py
	$(PY) benchmarks/table1.py
	$(PY) benchmarks/power_ep_cost.py
	$(PY) benchmarks/power_ep_regression.py
	$(PY) benchmarks/power_ep_classification.py
	$(PY) benchmarks/vnngp_cost.py
	$(PY) benchmarks/vnngp_uci.py
	$(PY) benchmarks/gplvm_cost.py
	$(PY) benchmarks/gplvm_oil_flow.py
	$(PY) benchmarks/solve_cost.py
	$(PY) benchmarks/solve_uci.py
	$(PY) benchmarks/gpflow_notebooks.py

clean:
	rm -rf $(VENV) $(COMPAT) demo_output build dist docs/_build *.egg-info
