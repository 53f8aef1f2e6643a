"""Engine adapters: how an engine is launched, when it is ready, and what it can do.

An adapter turns an effective lane into a command line and knows the engine's readiness semantics
(connection refused while loading, 503 while loading, or no health route at all).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from campaign.contracts.resolve import EffectiveLane
from campaign.lanes.client import LaneClient

__all__ = ["EngineAdapter", "Readiness", "adapter_for"]


@dataclass(frozen=True)
class Readiness:
    ready: bool
    detail: str


class EngineAdapter(ABC):
    name: str

    @abstractmethod
    def server_args(self, lane: EffectiveLane, model_path: str) -> list[str]:
        """Arguments after the executable: model, host, port, then the lane's own args."""

    @abstractmethod
    async def probe(self, client: LaneClient) -> Readiness:
        """One readiness poll."""

    def served_model(self, lane: EffectiveLane) -> str:
        return lane.model.served_name or "default"

    async def version(self, client: LaneClient) -> dict[str, Any]:
        return {}

    def api_key(self, lane: EffectiveLane) -> str | None:
        """The key the lane's server demands (its ``--api-key``), so our own client can call it."""
        from campaign.contracts.args import parse_args

        keys = [value for name, value in parse_args(lane.args) if name == "--api-key" and value]
        return keys[-1] if keys else None

    def launch_env(self, lane: EffectiveLane, scratch: str) -> dict[str, str]:
        """Variables that keep what the engine writes (temp files, caches) under ``scratch``, a folder
        the lane owns for one boot. The contract's own ``env`` overrides them."""
        return {}

    async def count_chat_tokens(self, client: LaneClient, lane: EffectiveLane,
                                messages: list[dict[str, Any]]) -> int:
        """Prompt tokens the engine will see for these chat messages, counted by its own tokenizer
        (chat template included). Raises ``EngineError`` when the engine cannot say."""
        from campaign.errors import EngineError

        raise EngineError(f"engine {self.name}: counting prompt tokens is not supported by this adapter")

    def uncached_fields(self) -> dict[str, Any]:
        """Request fields that keep the engine's prompt cache out of a measurement (none known: empty)."""
        return {}

    def engine_timings(self, response: dict[str, Any]) -> dict[str, float]:
        """The engine's own prefill numbers from a response (or final stream event), if it reports them:
        ``prompt_tokens_processed``, ``prefill_ms``, ``prefill_tok_s``, ``cached_tokens``."""
        return {}


def adapter_for(engine: str) -> EngineAdapter:
    from campaign.lanes.llamacpp import LlamaCppAdapter
    from campaign.lanes.sglang import SGLangAdapter
    from campaign.lanes.vllm import VllmAdapter

    adapters: dict[str, type[EngineAdapter]] = {"llamacpp": LlamaCppAdapter, "sglang": SGLangAdapter,
                                                "vllm": VllmAdapter}
    try:
        return adapters[engine]()
    except KeyError:
        from campaign.errors import PreflightError

        raise PreflightError(f"engine {engine!r} has no adapter yet (available: {', '.join(adapters)})") from None
