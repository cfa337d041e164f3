# tigon: `make demo` runs the training demo, `make test` builds everything and runs every test this
# machine can run. Both install what they need (system packages, a pinned virtualenv) first.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
JOBS ?= $(shell nproc)
TIGON_CUDA ?= AUTO
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CORE_BUILD := build/core
# The venv's CMake (pinned in requirements-dev.txt), the version CI and the GPU machine use.
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: all deps venv install test test-cpp test-python test-convergence test-compat demo checkstyle format bench clean

all: test

deps:
	@tools/install_deps.sh

$(VENV)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

# The C++ core and its tests, without Python or torch (the CUDA library compiles when nvcc exists).
test-cpp: deps venv
	cmake -S . -B $(CORE_BUILD) $(GENERATOR) -DTIGON_CUDA=$(TIGON_CUDA) -DTIGON_BUILD_TORCH=OFF \
	  -DTIGON_BUILD_TESTS=ON
	cmake --build $(CORE_BUILD) -j $(JOBS)
	ctest --test-dir $(CORE_BUILD) --output-on-failure -j $(JOBS)

# The torch operators and the Python package: pip install into the venv (incremental build in
# build/py), then pytest. pytest exits non-zero when it collects nothing, so this cannot pass empty.
install: deps venv
	$(PY) -m pip install -q --no-build-isolation --no-deps . -Ccmake.define.TIGON_CUDA=$(TIGON_CUDA)

test-python: install
	$(PY) -m pytest tests/python -q

# HF training with and without tigon on tiny models of every supported family (also in test-python).
test-convergence: install
	$(PY) -m pytest tests/python/test_convergence.py -m convergence -q

# The patches on the newest transformers too (the venv pins the oldest supported one): that
# release goes to a directory of its own, put before the venv's on the path for the transformers
# tests alone. Both versions are tigon.transformers.supported_versions()["tested"].
COMPAT_TRANSFORMERS ?= 5.23.0
COMPAT_DIR := build/compat/transformers-$(COMPAT_TRANSFORMERS)
test-compat: install
	[ -f $(COMPAT_DIR)/.installed ] || { rm -rf $(COMPAT_DIR) && \
	  $(PY) -m pip install -q --target $(COMPAT_DIR) transformers==$(COMPAT_TRANSFORMERS) && \
	  rm -rf $(COMPAT_DIR)/torch* $(COMPAT_DIR)/bin && touch $(COMPAT_DIR)/.installed; }
	PYTHONPATH=$(abspath $(COMPAT_DIR)) $(PY) -m pytest -q -p no:cacheprovider \
	  tests/python/test_transformers_patch.py tests/python/test_transformers_kernels.py \
	  tests/python/test_transformers_add_norm.py \
	  tests/python/test_convergence.py --expect-transformers $(COMPAT_TRANSFORMERS)

# The training demo: HF vs tigon-patched Llama-style model, CUDA when present, else the CPU.
demo: install
	$(PY) examples/train_demo.py $(DEMO_ARGS)

test: test-cpp test-python

bench: install
	$(PY) benchmarks/python/bench_rms_norm.py

checkstyle: deps venv
	clang-format --dry-run --Werror $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
	$(VENV)/bin/ruff check python tests benchmarks examples tools
	$(VENV)/bin/ruff format --check python tests benchmarks examples tools

format: venv
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
	$(VENV)/bin/ruff format python tests benchmarks examples tools

clean:
	rm -rf build
