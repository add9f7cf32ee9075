# The two commands a new user needs (see README):
#   make run    set up (idempotent) and run the main job on the embedded default into ./out
#   make test   set up (idempotent) and run the test suite
VENV ?= $(HOME)/.cache/drivegen/venv
export DRIVEGEN_VENV := $(VENV)
OUT ?= out
PYTEST_ARGS ?=

.PHONY: setup run test bench
setup:
	@bash scripts/setup.sh

run: setup
	$(VENV)/bin/drivegen run --out $(OUT)

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

bench: setup
	for b in bench/*.py; do $(VENV)/bin/python $$b || exit 1; done
