"""Engine kinds to adapters: the one place an engine kind meets its adapter. The kinds themselves and the
facts the contract checks use live in ``contracts.engines``; a test keeps the two in step."""

from __future__ import annotations

from campaign.errors import PreflightError
from campaign.lanes.engines.base import EngineAdapter
from campaign.lanes.engines.llamacpp import LlamaCppAdapter
from campaign.lanes.engines.llamacpp_python import LlamaCppPythonAdapter
from campaign.lanes.engines.sglang import SGLangAdapter
from campaign.lanes.engines.vllm import VllmAdapter

__all__ = ["ADAPTERS", "adapter_for"]

ADAPTERS: dict[str, type[EngineAdapter]] = {
    "llamacpp": LlamaCppAdapter,
    "llama-cpp-python": LlamaCppPythonAdapter,
    "sglang": SGLangAdapter,
    "vllm": VllmAdapter,
}


def adapter_for(engine: str) -> EngineAdapter:
    try:
        return ADAPTERS[engine]()
    except KeyError:
        raise PreflightError(f"engine {engine!r} has no adapter yet (available: {', '.join(ADAPTERS)})") from None
