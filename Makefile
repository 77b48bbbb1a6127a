# The two commands of the README: `make run` (a local cluster) and `make test` (lint, types,
# the whole suite). Both create .venv in the checkout and install the project into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
ARGS ?=

.PHONY: run test lint typecheck pytest bench clean setup native

$(STAMP): pyproject.toml scripts/bootstrap.sh
	PYTHON=$(PYTHON) bash scripts/bootstrap.sh
	touch $(STAMP)

setup: $(STAMP)

# Rebuild the mypyc-compiled NameNode modules after editing them (make setup builds them
# once; a stale build is ignored, the sources run: xdfs.common.native).
native: $(STAMP)
	$(BIN)/python scripts/build_native.py

run: $(STAMP)
	$(BIN)/xdfs dev $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest $(ARGS)

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python bench/rpc.py

clean:
	-$(BIN)/python scripts/build_native.py --clean
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
