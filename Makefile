# Two set-up commands on a fresh machine: `make demo` (a whole window on the embedded default) and
# `make test`. Engine builds and the model are cached outside the clone ($(CAMPAIGN_CACHE)).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
CAMPAIGN_CACHE ?= $(HOME)/.cache/campaign
export CAMPAIGN_CACHE
LLAMA_SERVER_BIN = $(shell scripts/build-llama-server.sh | tail -n 1)

.PHONY: venv engine engine-python model keys demo test test-unit clean

$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

venv: $(VENV)/.installed

engine:
	scripts/build-llama-server.sh

model:
	scripts/fetch-model.sh

# llama-cpp-python's server, the second real engine the quality-gate tests run (built once, cached)
engine-python:
	scripts/build-llama-cpp-python.sh

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

test: venv engine engine-python model
	@bin_dir=$$(dirname "$$(scripts/build-llama-server.sh | tail -n 1)"); \
	lcp_python=$$(scripts/build-llama-cpp-python.sh | tail -n 1); \
	PATH="$$bin_dir:$$PATH" LLAMA_CPP_PYTHON="$$lcp_python" $(VENV)/bin/python -m pytest -q -rs

test-unit: venv
	$(VENV)/bin/python -m pytest -q -m "not integration"

clean:
	rm -rf runs .pytest_cache
