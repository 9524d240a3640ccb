# Two commands set everything up on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build of torch. On a machine without a GPU an unpinned torch would pull a multi-GB
# CUDA build; on a GPU machine override it, e.g. `make TORCH_SPEC="torch==2.13.0" test`
# with pip pointed at the CUDA wheels you want (see README).
TORCH_SPEC ?= torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: install test lint format demo bench model clean help

help:
	@echo "make test   - create .venv, install, run the test suite (what CI runs)"
	@echo "make demo   - create .venv, install, run the main job on the shipped defaults"
	@echo "make bench  - run benchmarks/ and rewrite benchmarks/RESULTS.md"
	@echo "make lint   - ruff check + format check"
	@echo "make model  - retrain the shipped tiny code model (about 20 minutes on 2 cores)"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check copilot_cli tests benchmarks scripts
	$(BIN)/ruff format --check copilot_cli tests benchmarks scripts

format: $(STAMP)
	$(BIN)/ruff format copilot_cli tests benchmarks scripts
	$(BIN)/ruff check --fix copilot_cli tests benchmarks scripts

test: $(STAMP) lint
	$(BIN)/python -m pytest -m "not slow" -q

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

bench: $(STAMP)
	# peers the benchmarks compare against live outside the venv (transformers imports
	# torchao whenever it is importable, which would change every command's behaviour)
	test -d .bench-peers/torchao || $(BIN)/python -m pip install -q --no-deps --target .bench-peers torchao
	test -x .venv-peers/bin/python || ($(PYTHON) -m venv .venv-peers && \
		.venv-peers/bin/python -m pip install -q langchain-text-splitters semchunk tokenizers)
	test -x .venv-llmlingua/bin/python || ($(PYTHON) -m venv .venv-llmlingua && \
		.venv-llmlingua/bin/python -m pip install -q "$(TORCH_SPEC)" && \
		.venv-llmlingua/bin/python -m pip install -q "transformers==4.46.3" llmlingua==0.2.2)
	$(BIN)/python benchmarks/run_all.py

model: $(STAMP)
	$(BIN)/python scripts/train_tiny_model.py --out sample_data/models/tiny-code-llama

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache
