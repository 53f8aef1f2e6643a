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
from campaign.lanes.metrics import Samples

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

    # Streaming measurement (speed gate). The defaults suit an OpenAI-compatible engine that streams
    # usage on request and exports no metrics; an adapter overrides what its engine does better.
    stream_token_counter: str | None = None  # dotted path in a chunk to the engine's running token count
    stream_tokens_per_chunk: int | None = None  # set only if every content chunk is exactly this many tokens
    stream_new_connection: bool = True  # False only for an engine known to keep streamed connections open

    def stream_request_fields(self) -> dict[str, Any]:
        """Fields a streaming request adds so the engine reports its own token counts."""
        return {"stream_options": {"include_usage": True}}

    async def scrape_metrics(self, client: LaneClient) -> str | None:
        """The raw metrics text, or None when the engine exports none."""
        return None

    def metrics_busy(self, samples: Samples) -> bool:
        """True while the engine reports requests in flight, so its counters may not be final yet."""
        return False

    def metric_summary(self, deltas: Samples) -> dict[str, Any]:
        """Counter deltas under engine-neutral names (requests, prompt_tokens, cached_prompt_tokens,
        generated_tokens, spec_drafts, spec_draft_tokens, spec_accepted_tokens,
        spec_accepted_per_position); a name is absent when the engine does not export it."""
        return {}


def adapter_for(engine: str) -> EngineAdapter:
    from campaign.lanes.llamacpp import LlamaCppAdapter

    adapters: dict[str, type[EngineAdapter]] = {"llamacpp": LlamaCppAdapter}
    try:
        return adapters[engine]()
    except KeyError:
        from campaign.errors import PreflightError

        raise PreflightError(f"engine {engine!r} has no adapter yet (available: {', '.join(adapters)})") from None
