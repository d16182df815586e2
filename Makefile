# Two commands on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip install --disable-pip-version-check -q -c constraints.txt

.PHONY: install serve test test-unit test-integration docs docs-serve bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q --upgrade pip setuptools wheel
	# torch first and pinned: a free resolution would pull a multi-GB CUDA build.
	$(PIP) torch==2.13.0
	$(PIP) -e ".[convert,test]"
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/embedgate serve

# The manual first (seconds; a broken link or a page left out of the nav fails it), then
# every test: unit, integration (the real tritonserver) and the OpenAPI contract.
test: docs
	$(BIN)/pytest -q -ra

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

docs-serve: $(STAMP)
	$(BIN)/mkdocs serve

test-unit: $(STAMP)
	$(BIN)/pytest -q -m "not integration"

test-integration: $(STAMP)
	$(BIN)/pytest -q -m integration

# make bench BENCH_ARGS='--payload batch --inprocess'
bench: $(STAMP)
	$(BIN)/python benchmark.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build dist site *.egg-info
