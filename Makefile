# The two commands of the README: `make run` (a local cluster) and `make test` (lint, types,
# the whole suite). Both create .venv in the checkout and install the project into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
ARGS ?=
# pytest workers for make test: most tests wait on real server processes, so three keep two
# cores busy (the suite takes ~15 min instead of ~30 serially); PYTEST_WORKERS=0 runs serially.
PYTEST_WORKERS ?= 3

.PHONY: run test lint typecheck pytest bench clean setup native native-ready

$(STAMP): pyproject.toml scripts/bootstrap.sh
	PYTHON=$(PYTHON) bash scripts/bootstrap.sh
	touch $(STAMP)

setup: $(STAMP)

# Rebuild the mypyc-compiled NameNode modules after editing them (make setup starts their
# build in the background; a stale or unfinished build is ignored, the sources run:
# xdfs.common.native).
native: $(STAMP)
	$(BIN)/python scripts/build_native.py

# The tests and benchmarks run on the compiled build: wait for the background build (or
# build now when the sources changed). Never fatal: without a C compiler the sources run.
native-ready: $(STAMP)
	-$(BIN)/python scripts/build_native.py --if-stale

run: $(STAMP)
	$(BIN)/xdfs dev $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) native-ready
	$(BIN)/pytest -n $(PYTEST_WORKERS) --durations=25 $(ARGS)

test: lint typecheck pytest

bench: $(STAMP) native-ready
	$(BIN)/python bench/rpc.py

clean:
	-$(BIN)/python scripts/build_native.py --clean
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build/native.*
