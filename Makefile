# gpflow-tight developer commands. Every target creates .venv (Python 3.11) if it is missing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python

.PHONY: demo test test-gpflow test-docs lint format bench docs clean

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

test: lint
	$(BIN)/pytest -n 2 --durations=15 --ignore=tests/integration/test_gpflow_suite.py tests
	$(MAKE) --no-print-directory test-gpflow

# GPflow's own tests with each drop-in swapped in (they run on both cores in subprocesses)
test-gpflow: $(VENV)/.installed-test
	$(BIN)/pytest -p no:xdist --durations=0 tests/integration/test_gpflow_suite.py

# the site works offline: built without the notebooks, its maths checked in headless Chromium
# (`make test` runs this test too; it needs /usr/bin/chromium: `apt-get install -y chromium`)
test-docs: $(VENV)/.installed-test
	$(BIN)/pytest -p no:xdist --durations=0 tests/integration/test_docs_offline.py

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
	rm -rf $(VENV) demo_output build docs/_build *.egg-info
