# Two commands do all the set-up: `make report` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# PyPI's torch 2.13.0 is a CUDA build on Linux x86-64; override for another, e.g.
#   make report TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: report test test-fast test-gpu lab lint clean install notebooks mutate

$(BIN)/python:
	$(PY) -c 'import sys; assert sys.version_info >= (3, 10), "h2dlab needs Python >= 3.10"'
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c 'import torch' 2>/dev/null || $(BIN)/python -m pip install -q $(TORCH_SPEC)
	$(BIN)/python -m pip install -q -e '.[notebooks,test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name h2dlab --display-name "h2dlab (Python)" >/dev/null
	touch $(STAMP)

install: $(STAMP)

report: $(STAMP)
	$(BIN)/h2dlab report

# Two pytest-xdist workers (CI has 2 cores); TEST_WORKERS=0 runs in one process. loadfile keeps
# each test file on one worker (a module's fixtures load once); the notebooks are executed
# once per run (tests/conftest.py's once_per_run).
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

test: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST)

# The edit-test loop: every test but the slow tier (notebooks, subprocesses, the longest
# property and real-data tests; tests/conftest.py lists them), under 2 minutes on 2 cores.
# `make test` runs everything and is what CI runs.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m 'not slow and not cuda and not wheel'

# On a machine without CUDA this fails, saying so, instead of skipping every GPU test.
test-gpu: $(STAMP)
	@$(BIN)/python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "make test-gpu: this machine has no CUDA device (torch.cuda.is_available() is False), so the GPU tests cannot run here: run them on a GPU machine; make test runs the rest")'
	$(BIN)/python -m pytest -q -m cuda tests/gpu

# Refresh the outputs committed in notebooks/*.ipynb from the recorded data (replay).
notebooks: $(STAMP)
	$(BIN)/h2dlab report --mode replay --inplace \
	  --only 01-forum-experiment-revisited,02-fastest-way,03-spikes-explained,04-pinned-memory-primer,05-explore,06-your-trace,07-fleet

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

lint: $(STAMP)
	$(BIN)/ruff check h2dlab tests benchmarks
	$(BIN)/ruff format --check h2dlab tests benchmarks

# Mutation testing (mutmut) of the analysis, spec and resume modules, configured in
# pyproject.toml's [tool.mutmut]; slow (hours on 2 cores), never run in CI. Survivors and why
# each may live: tests/mutation-report.md. Results stay in mutants/ (`mutmut browse`).
MUTATE_JOBS ?= 2
mutate: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[mutate]'
	$(BIN)/mutmut run --max-children $(MUTATE_JOBS)
	$(BIN)/mutmut results

clean:
	rm -rf $(VENV) reports .pytest_cache mutants
