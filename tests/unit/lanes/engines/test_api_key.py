"""Our client sends a lane's key however the lane gives it to its engine: the engine's key option (the first
of a comma-separated list) or, failing that, the variable the engine reads (llama-server LLAMA_API_KEY,
common/arg.cpp; vLLM VLLM_API_KEY, 0.32 envs.py; llama-cpp-python only its --api_key option)."""

from __future__ import annotations

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.lanes.engines.registry import adapter_for


def lane(engine: str, args: list[str] | None = None, env: dict[str, str] | None = None) -> EffectiveLane:
    return EffectiveLane.model_validate({"name": "l", "role": "control", "runtime": "process", "engine": engine,
                                         "port": 18000, "model": {"path": "/m"}, "args": args or [],
                                         "env": env or {}})


@pytest.mark.parametrize(("engine", "variable"), [("llamacpp", "LLAMA_API_KEY"), ("vllm", "VLLM_API_KEY")])
def test_the_key_from_the_option_else_from_the_engines_variable(engine: str, variable: str) -> None:
    adapter = adapter_for(engine)
    assert adapter.api_key(lane(engine, env={variable: "k-env"})) == "k-env"
    assert adapter.api_key(lane(engine, ["--api-key", "k-flag"], {variable: "k-env"})) == "k-flag"  # flag wins
    assert adapter.api_key(lane(engine, env={"OTHER_KEY": "k"})) is None


def test_llama_server_takes_several_keys_and_any_one_serves() -> None:
    assert adapter_for("llamacpp").api_key(lane("llamacpp", ["--api-key", " k1,k2"])) == "k1"


def test_llama_cpp_python_reads_its_own_option() -> None:
    adapter = adapter_for("llama-cpp-python")
    assert adapter.api_key(lane("llama-cpp-python", ["--api_key", "k"])) == "k"
    assert adapter.api_key(lane("llama-cpp-python", env={"LLAMA_API_KEY": "k"})) is None
