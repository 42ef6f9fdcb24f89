# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
XLA_VENV := .venv-xla
XLA_STAMP := $(XLA_VENV)/.installed
BACKENDS := $(wildcard backends/*/pyproject.toml)
PINS := "ray[default,train]==2.60.0" "torch==2.13.0" nvidia-ml-py psutil pytest hypothesis ruff mypy
XLA_PINS := "torch==2.9.0" "torch-xla==2.9.0" "ray[default,train]==2.60.0" nvidia-ml-py psutil pytest hypothesis

.PHONY: demo test lint unit test-xla clean

$(STAMP): pyproject.toml $(BACKENDS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(PINS)
	$(PY) -m pip install -q --no-deps -e . $(addprefix -e ,$(dir $(BACKENDS)))
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy ray_accel $(wildcard backends/*/ray_accel_*)

unit: $(STAMP)
	$(PY) -m pytest -q

test: lint unit

# torch-xla pins torch 2.9, so the XLA lane has a venv of its own, made with uv.
$(XLA_STAMP): pyproject.toml $(BACKENDS) | $(STAMP)
	test -x $(VENV)/bin/uv || $(PY) -m pip install -q uv
	test -x $(XLA_VENV)/bin/python || $(VENV)/bin/uv venv -q --python $(PYTHON) $(XLA_VENV)
	VIRTUAL_ENV=$(XLA_VENV) $(VENV)/bin/uv pip install -q $(XLA_PINS)
	VIRTUAL_ENV=$(XLA_VENV) $(VENV)/bin/uv pip install -q --no-deps -e . $(addprefix -e ,$(dir $(BACKENDS)))
	touch $(XLA_STAMP)

test-xla: $(XLA_STAMP)
	PJRT_DEVICE=CPU $(XLA_VENV)/bin/python -m pytest -q -m xla

clean:
	rm -rf $(VENV) $(XLA_VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
