# The two commands a new user needs (see README.md):
#   make run    set up (idempotent) and run the main job on the embedded default into ./out (a second
#               make run replaces the finished run there; make clean deletes its files)
#   make test   set up (idempotent) and run the test suite (the whole of it: what CI runs)
#   make quick  the edit loop: the suite without the tests marked slow
HOME ?= $(shell getent passwd $$(id -u) | cut -d: -f6)
VENV ?= $(HOME)/.cache/drivegen/venv
export DRIVEGEN_VENV := $(VENV)
OUT ?= out
PYTEST_ARGS ?=
# PYTEST_WORKERS: the suite on that many pytest-xdist workers, each taking the next test as it frees (a Ray test
# leaves cores idle while it waits on its cluster, a node or a subprocess). 3 (default, what CI runs): on 2 cores,
# 834 tests in 633 s (2026-11-29, AMD EPYC; 750 s before the inputs were built once per test run, see
# tests/support/shared.py); 4 workers took 716 s with the cores 96 % busy, 2 workers 778-800 s. 0: one process.
# No test depends on the machine's load (the model actor pools in tests/pipeline/test_gpu_scheduling.py wait for
# their second actor). --dist worksteal: whole modules to a worker (--dist loadscope) took 695 s.
PYTEST_WORKERS ?= 3

.PHONY: setup run test quick bench clean
setup:
	@bash scripts/setup.sh

run: setup
	$(VENV)/bin/drivegen run --out $(OUT) --overwrite

# the default run folder's own files, by the rule of drivegen run --overwrite (drivegen clean): a user's file in it
# stays, and so does a folder that is not a drivegen run folder
clean:
	@if [ -e $(OUT) ] || [ -L $(OUT) ]; then \
	  if [ ! -x $(VENV)/bin/drivegen ]; then echo "$(VENV) is missing: make setup first"; exit 1; fi; \
	  $(VENV)/bin/drivegen clean $(OUT); fi

# --durations=20: the slowest tests in every run's output, so a regression in the suite's time shows
test: setup
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal --durations=20 $(PYTEST_ARGS)

quick: setup
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal -m "not slow" $(PYTEST_ARGS)

# Benchmarks that need no input (bench/validate.py takes a run folder: python bench/validate.py OUT).
bench: setup
	for b in synth perception writers regenerate pipeline anonymize; do $(VENV)/bin/python bench/$$b.py || exit 1; done
