# Two commands on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# uv installs what pip would (the same releases, pinned by constraints.txt) in a fraction
# of its time. It compiles no bytecode: Python writes each module's the first time it is
# imported, a fifth of the venv's 25,000 modules, where compiling all of them at install
# takes more than a minute on 2 cores.
INSTALL := $(BIN)/uv pip install --python $(BIN)/python -q -c constraints.txt
# Python writes that bytecode even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): else every process compiles again every module it imports.
RUN := PYTHONDONTWRITEBYTECODE=

.PHONY: install serve test test-images test-unit test-integration docs docs-serve bench clean

$(STAMP): pyproject.toml constraints.txt setup.py api/grpc/proto/tei.proto
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q uv
	# torch and torchvision pinned as a pair built together (constraints.txt): PyPI's
	# build, which runs on the CPU where there is no GPU. setuptools and wheel: the wheel
	# test builds ours with this environment's (tests/integration/test_wheel.py). The build
	# generates TEI's gRPC stubs (setup.py, grpcio-tools); grpc: TEI's gRPC API's health and
	# reflection services.
	$(INSTALL) torch==2.14.1 torchvision==0.29.1 "setuptools>=68" wheel -e ".[convert,test,triton,s3,grpc]"
	# For the install test (tests/integration/test_wheel.py): a user's environment with
	# numpy 2 and protobuf 7, whose Triton gets its own (nvidia-pytriton, numpy 1), offline.
	$(BIN)/python -m pip download --disable-pip-version-check -q --no-deps --only-binary :all: -d $(VENV)/wheels \
		"numpy>=2,<3" "protobuf>=7,<8"
	$(BIN)/python -m pip download --disable-pip-version-check -q --no-deps --only-binary :all: -d $(VENV)/wheels \
		nvidia-pytriton==0.7.0 "numpy>=1.24,<2"
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(RUN) $(BIN)/embedgate serve

# The manual first (seconds; a broken link or a page left out of the nav fails it), then
# every test: unit, integration (the real tritonserver) and the OpenAPI contract, in two
# processes that each take whole files (a file's module fixtures built once) in the order
# tests/conftest.py gives them (not xdist's own, most tests first): on 2 cores about half
# the time of one process (docs/development.md has the figures). The 25 slowest tests are
# listed at the end: where the suite's time goes. Beside them, in a process of their own,
# the container images are built and run (tests/docker/test_images.py): minutes spent
# mostly waiting on the disk and the registries, which would hold one of the two processes.
TEST_PROCESSES ?= 2
IMAGES_LOG := $(VENV)/test-images.log
test: docs
	@$(RUN) $(BIN)/pytest -q -ra -p no:cacheprovider tests/docker/test_images.py > $(IMAGES_LOG) 2>&1 & images=$$!; \
	$(RUN) $(BIN)/pytest -q -ra -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder --durations=25 \
		--ignore=tests/docker/test_images.py; tests=$$?; \
	wait $$images; built=$$?; echo "--- the images (tests/docker/test_images.py)"; cat $(IMAGES_LOG); \
	exit $$(( tests ? tests : built ))

test-images: $(STAMP)
	$(RUN) $(BIN)/pytest -q -ra tests/docker/test_images.py

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

docs-serve: $(STAMP)
	$(BIN)/mkdocs serve

test-unit: $(STAMP)
	$(RUN) $(BIN)/pytest -q -m "not integration"

test-integration: $(STAMP)
	$(RUN) $(BIN)/pytest -q -m integration

# make bench BENCH_ARGS='--payload batch --inprocess'
bench: $(STAMP)
	$(RUN) $(BIN)/python benchmark.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build dist site *.egg-info
