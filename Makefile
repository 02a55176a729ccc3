# specfleet: `make demo` runs the quickstart experiment, `make test` runs the test suite.
# Each creates its own virtual environment (.venv) and installs what it needs first.
PYTHON ?= python3
VENV ?= .venv
# torch first and pinned: a plain `torch` requirement would pull whatever build the index prefers.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: demo test install clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

demo: install
	$(BIN)/specfleet run experiments/quickstart.yaml
	$(BIN)/specfleet best

test: install
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .specfleet
