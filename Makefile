# Two entry points do the whole set-up on a fresh machine:
#   make verify   install everything, then run `python -m verify all`
#   make test     install everything, then run the test suite
# Every install goes through constraints.txt, the one place where torch is pinned.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --constraint constraints.txt
STAMP  := $(VENV)/.installed

.PHONY: install test test-all verify bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PIP) --quiet --editable ".[all]" --group dev
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

test-all: $(STAMP)
	$(PY) -m pytest -m "slow or not slow"

verify: $(STAMP)
	$(PY) -m verify all $(VERIFY_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/bench.py

clean:
	rm -rf $(VENV) verify-report .pytest_cache .hypothesis
