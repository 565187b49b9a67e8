# Two entry points do the whole set-up on a fresh machine:
#   make verify       install everything, then run `python -m verify all`
#   make test         install everything, then run the test suite
#   make docs         install everything, then build the documentation site (warnings are errors)
#                     and check that each notebook page shows every figure its notebook draws
#   make check-install  build the sdist and wheel, install the wheel with the core dependencies only
#                     into a fresh environment and run both command lines there (CI runs it)
# Every install goes through constraints.txt, the lock file: every package installed, direct
# and transitive, pinned to one version (torch to its CPU build). Two targets maintain it:
#   make lock         regenerate constraints.txt (tools/lock.sh): a throwaway environment gets
#                     the newest releases allowed by pyproject.toml and the torch pin, and the
#                     versions installed there become the lock. Run it after changing the
#                     dependencies in pyproject.toml, or to refresh the lock once
#                     `make test-latest` passes.
#   make test-latest  the test suite in a separate environment ($(LATEST)) with the newest
#                     releases, constrained only by the torch pin: an early warning that a
#                     new release breaks the project, before the lock moves to it.
PYTHON ?= python3
VENV   ?= .venv
LATEST ?= .venv-latest
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --constraint constraints.txt
STAMP  := $(VENV)/.installed

CORE   ?= .venv-core
DIST   ?= dist
VERSION = $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' theory/_version.py)

.PHONY: install test test-all test-notebooks test-latest lock verify bench docs check-install clean

# the example plug-in (a fifth paper as its own package, docs/adding-a-paper.md) is installed too,
# so that its entry points are real for the tests and the documentation
EXAMPLE := examples/saxe_linear_network

$(STAMP): pyproject.toml constraints.txt $(EXAMPLE)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) --quiet --upgrade pip
	$(PIP) --quiet --editable ".[all]" --group dev
	$(PIP) --quiet --no-deps --editable $(EXAMPLE)
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest --durations=20

test-all: $(STAMP)
	$(PY) -m pytest -m "slow or not slow"

# Not incremental on purpose: every run re-resolves to the newest releases.
test-latest:
	$(PYTHON) -m venv $(LATEST)
	echo '*' > $(LATEST)/.gitignore
	grep -E '^torch==' constraints.txt > $(LATEST)/torch-pin.txt
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager \
		--constraint $(LATEST)/torch-pin.txt --editable ".[all]" --group dev
	$(LATEST)/bin/python -m pip install --quiet --no-deps --editable $(EXAMPLE)
	$(LATEST)/bin/python -m pip freeze --exclude-editable | sed -E 's/\+[^+]*$$//' | sort -f > $(LATEST)/versions.txt
	@echo "newer than constraints.txt:"
	@grep -vE '^(#|pip==)' constraints.txt | sort -f | diff - $(LATEST)/versions.txt | grep '^>' || echo "  nothing"
	$(LATEST)/bin/python -m pytest

lock:
	PYTHON=$(PYTHON) tools/lock.sh constraints.txt

verify: $(STAMP)
	$(PY) -m verify all $(VERIFY_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/bench.py

test-notebooks: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow" tests/test_notebooks.py

docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html
	DOCS_HTML=docs/_build/html $(PY) -m pytest -q tests/test_docs.py -k built_site_shows_every_figure

# The package as a user installs it: an sdist and a wheel built from this tree, the wheel installed
# into a fresh environment with the core dependencies only (no torch, matplotlib, dask, pandas, tqdm),
# then both command lines run there from outside the source tree (tools/check_install.py: theory
# fully, verify list, and verify all skipping the checks that need a missing package, with the reason).
check-install: $(STAMP)
	rm -rf $(DIST) $(CORE)
	$(PY) -m build --no-isolation --outdir $(DIST) .
	$(PYTHON) -m venv $(CORE)
	$(CORE)/bin/python -m pip install --quiet --constraint constraints.txt --upgrade pip
	$(CORE)/bin/python -m pip install --quiet --constraint constraints.txt $(DIST)/*.whl
	cd "$$(mktemp -d)" && $(CURDIR)/$(CORE)/bin/python $(CURDIR)/tools/check_install.py $(VERSION)

clean:
	rm -rf $(VENV) $(LATEST) $(CORE) $(DIST) verify-report .pytest_cache .hypothesis docs/_build docs/_generated
