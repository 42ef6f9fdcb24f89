# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
# The other Pythons `make lanes` installs the wheels on, each where the machine
# has it (TorchNeuron's wheels are 3.12 to 3.14); one it lacks is skipped, said.
OTHER_PYTHONS ?= 3.12 3.13 3.14
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
XLA_VENV := .venv-xla
XLA_STAMP := $(XLA_VENV)/.installed
BACKENDS := backends/mock backends/cuda backends/neuron
# Named, not globbed: an editable install writes *.egg-info folders beside them.
BACKEND_PKGS := backends/mock/ray_accel_mock backends/cuda/ray_accel_cuda backends/neuron/ray_accel_neuron
# Every tool pinned too: a new ruff or mypy release must not fail a change that did not touch it.
# setuptools builds the wheels (`make dist`) without a build venv of its own.
TOOL_PINS := nvidia-ml-py==13.615.71 psutil==7.2.2 click==8.5.1 setuptools==84.2.1
TEST_PINS := pytest==9.2.0 pytest-randomly==5.1.0 hypothesis==6.170.17
# The Ray every lane but one tests; the `ray` extra declares a range
# (pyproject.toml), whose oldest release `make lanes` tests.
RAY := 2.60.0
OLDEST_RAY := 2.57.0
TORCH_PIN := torch==2.13.0
UV_PIN := uv==0.13.9
PINS := "ray[default,train,serve]==$(RAY)" "$(TORCH_PIN)" $(TOOL_PINS) $(TEST_PINS) ruff==0.17.6 mypy==2.4.1
XLA_PINS := "torch==2.9.0" "torch-xla==2.9.0" "ray[default,train]==$(RAY)" $(TOOL_PINS) $(TEST_PINS)
# pytest-randomly shuffles every run (.ci/pytest-tiers prints the seed); replay one with
# `make unit PYTEST_ARGS=--randomly-seed=N`. The tests that start Ray or make
# hosts run in two shards, each in its own network namespace, the pure tests
# beside them (.ci/pytest-tiers).
PYTEST_ARGS ?=

.PHONY: demo test lint unit test-xla dist lanes clean

# uv installs into the venv (from the package cache: 19 s where pip takes
# 80), and reads no pip configuration: where pip is told to find wheels (this
# machine's CPU build of torch) is handed to it. It compiles the bytecode at
# install, as pip does: left to the first imports, every process of the
# suite's first minutes compiles Ray's modules at once, and raylets miss
# Ray's 30 s to register.
FIND_LINKS = $(shell $(PYTHON) -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$$/--find-links \1/p" | sort -u)

$(VENV)/bin/uv:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(UV_PIN)

$(STAMP): Makefile pyproject.toml $(addsuffix /pyproject.toml,$(BACKENDS)) | $(VENV)/bin/uv
	VIRTUAL_ENV=$(VENV) $(VENV)/bin/uv pip install -q --compile-bytecode $(FIND_LINKS) $(PINS)
	VIRTUAL_ENV=$(VENV) $(VENV)/bin/uv pip install -q --no-deps -e . $(addprefix -e ,$(BACKENDS))
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy ray_accel $(BACKEND_PKGS)

unit: $(STAMP)
	.ci/pytest-tiers $(PY) $(PYTEST_ARGS)

test: lint unit

# torch-xla pins torch 2.9, so the XLA lane has a venv of its own, made with
# uv. Only Ray's modules are compiled at install (.ci/compile-ray says why);
# torch's and torch-xla's are left to their first import.
$(XLA_STAMP): Makefile pyproject.toml $(addsuffix /pyproject.toml,$(BACKENDS)) | $(VENV)/bin/uv
	test -x $(XLA_VENV)/bin/python || $(VENV)/bin/uv venv -q --python $(PYTHON) $(XLA_VENV)
	VIRTUAL_ENV=$(XLA_VENV) $(VENV)/bin/uv pip install -q $(XLA_PINS)
	VIRTUAL_ENV=$(XLA_VENV) $(VENV)/bin/uv pip install -q --no-deps -e . $(addprefix -e ,$(BACKENDS))
	.ci/compile-ray $(XLA_VENV)
	touch $(XLA_STAMP)

# Only the files that mark tests `xla` are collected (collecting the whole suite
# in this venv costs 10 s); -m xla then picks those tests.
XLA_FILES = $(shell grep -rl 'mark\.xla' tests --include='*.py')

test-xla: $(XLA_STAMP)
	PJRT_DEVICE=CPU $(XLA_VENV)/bin/python -m pytest -q -m xla --durations=10 $(PYTEST_ARGS) $(XLA_FILES)

# The four wheels, built from this tree with the venv's setuptools (no build
# venv, so nothing is fetched). setuptools copies into build/ and never prunes
# it, so a module deleted from the tree would live on in the wheel: build/ goes first.
dist: $(STAMP)
	rm -rf dist build $(addsuffix /build,$(BACKENDS))
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist . $(BACKENDS)
	rm -rf build $(addsuffix /build,$(BACKENDS))

# The wheels installed (not editable) into new venvs, on Ray $(RAY) and on
# the oldest Ray the `ray` extra declares, and on each of $(OTHER_PYTHONS)
# the machine has (.ci/wheel-lanes says what each runs).
lanes: dist | $(VENV)/bin/uv
	.ci/wheel-lanes $(VENV)/bin/uv $(PYTHON) "$(OTHER_PYTHONS)" $(RAY) $(OLDEST_RAY) "$(TORCH_PIN)" $(TEST_PINS)

clean:
	rm -rf $(VENV) $(XLA_VENV) dist .mypy_cache .ruff_cache .pytest_cache .hypothesis
