# Two entry points do the whole set-up on a fresh machine:
#   make verify   install everything, then run `python -m verify all`
#   make test     install everything, then run the test suite
#   make docs     install everything, then build the documentation site (warnings are errors)
# Every install goes through constraints.txt, the one place where torch is pinned.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --constraint constraints.txt
STAMP  := $(VENV)/.installed

.PHONY: install test test-all verify bench docs clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PIP) --quiet --editable ".[all]" --group dev
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest --durations=20

test-all: $(STAMP)
	$(PY) -m pytest -m "slow or not slow"

verify: $(STAMP)
	$(PY) -m verify all $(VERIFY_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/bench.py

docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) verify-report .pytest_cache .hypothesis docs/_build docs/_generated
