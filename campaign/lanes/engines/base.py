"""Engine adapters: how an engine is launched, when it is ready, and what it can do.

An adapter turns an effective lane into a command line and knows the engine's readiness semantics
(connection refused while loading, 503 while loading, or no health route at all).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import httpx

from campaign.contracts.engines import EngineFacts
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import CapabilityError, EngineError
from campaign.kinds import add_kind
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.declared import Evidence, Finding, Observable, check_declared
from campaign.lanes.engines.prometheus import Samples
from campaign.lanes.engines.scoring import Generation, Position, TokenSeq

__all__ = ["EngineAdapter", "Readiness", "fresh_cache_salt", "register"]


def fresh_cache_salt() -> str:
    """A prefix-cache salt no other request has: vLLM 0.32.0 and SGLang 0.5.23 hash a request's ``cache_salt``
    into its first cached block (and so every block after it), so a request with a salt of its own can reuse no
    other request's cached prompt (docs/engines.md, "Prefix caches"). No slash, ``@`` or NUL, under 128
    characters: what vLLM's validation accepts."""
    return f"uncached-{uuid.uuid4()}"


@dataclass(frozen=True)
class Readiness:
    ready: bool
    detail: str


class EngineAdapter(ABC):
    name: str  # the engine kind a contract names (`engine:`)
    facts: EngineFacts  # what the contract checks read about its command line

    @abstractmethod
    def server_args(self, lane: EffectiveLane, model_path: str) -> list[str]:
        """Arguments after the executable: model, host, port, then the lane's own args."""

    @abstractmethod
    async def probe(self, client: LaneClient) -> Readiness:
        """One readiness poll."""

    async def poll(self, client: LaneClient, path: str, *, refused: str = "connection refused",
                   timeout: float = 5.0) -> tuple[int | None, str]:
        """One readiness poll of ``path``: (status, body), or (None, why nothing answered). A refused
        connection is the normal state of a loading engine, reported with the adapter's own words."""
        try:
            return await client.get_text(path, timeout=timeout)
        except EngineError as exc:
            if isinstance(exc.__cause__, httpx.ConnectError):
                return None, refused
            return None, str(exc.__cause__ or exc)

    def served_model(self, lane: EffectiveLane) -> str:
        return lane.model.served_name or "default"

    async def version(self, client: LaneClient) -> dict[str, Any]:
        return {}

    # How the engine takes its API key: an option on its command line, else a variable of its environment
    # (read from the engine's own source for the version targeted; None: it reads none).
    api_key_option: str = "--api-key"
    api_key_env: str | None = None
    # The options that say where the engine listens: lane plumbing, which promotion maps back to the daily's.
    listen_options: tuple[str, str] = ("--host", "--port")

    def api_key(self, lane: EffectiveLane) -> str | None:
        """The key the lane's server demands, so our own client can call it: its key option (the first of a
        comma-separated list, as the server reads several), else its key variable in the lane's env.
        ``lane`` is the lane as launched (its ``${env:NAME}`` references resolved)."""
        given = lane.options.get(self.api_key_option) or (lane.env.get(self.api_key_env) if self.api_key_env
                                                           else None)
        return next((key.strip() for key in (given or "").split(",") if key.strip()), None)

    def launch_env(self, lane: EffectiveLane, scratch: str) -> dict[str, str]:
        """Variables that keep what the engine writes (temp files, caches) under ``scratch``, a folder
        the lane owns for one boot. The contract's own ``env`` overrides them."""
        return {}

    def seed_scratch(self, lane: EffectiveLane, scratch: Path) -> None:
        """Before a process lane starts: what of the engine's own cache may carry over from boot to boot into
        ``scratch``. Nothing, unless the engine caches facts about its own code that no lane's numbers depend
        on (vLLM's model-class facts): then every boot reads the same, and none pays again for them."""
        return None

    async def count_chat_tokens(self, client: LaneClient, lane: EffectiveLane,
                                messages: list[dict[str, Any]]) -> int:
        """Prompt tokens the engine will see for these chat messages, counted by its own tokenizer
        (chat template included). Raises ``EngineError`` when the engine cannot say."""

        raise EngineError(f"engine {self.name}: counting prompt tokens is not supported by this adapter")

    def uncached_fields(self) -> dict[str, Any]:
        """Request fields that keep the engine's prompt cache out of a scored request, fresh for each request
        (none known: empty). Every gate's scoring requests carry them (``LiveGate.scoring_request``, and the
        adapters' own generate and score)."""
        return {}

    def engine_timings(self, response: dict[str, Any]) -> dict[str, float]:
        """The engine's own prefill numbers from a response (or final stream event), if it reports them:
        ``prompt_tokens_processed``, ``prefill_ms``, ``prefill_tok_s``, ``cached_tokens``. By default the OpenAI
        usage shape's ``prompt_tokens_details.cached_tokens`` (vLLM with --enable-prompt-tokens-details, SGLang
        with --enable-cache-report)."""
        usage = response.get("usage")
        details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return {"cached_tokens": float(cached)} if isinstance(cached, int) and not isinstance(cached, bool) else {}
    # --- scoring and request shapes. Gates call these and never build engine-specific requests.
    # Each live method writes every raw record through ``sink`` with ``tags``; each ``parse_*`` reads
    # those records back offline, so a bundle can be re-judged without the engine.
    capabilities: frozenset[str] = frozenset()  # render_chat, tokenize, generate, score, json_schema, tools

    def _unsupported(self, what: str) -> CapabilityError:
        return CapabilityError(f"engine {self.name!r}: the adapter cannot {what}")

    async def render_chat(self, client: LaneClient, messages: list[dict[str, Any]], *, sink: Any,
                          tags: dict[str, Any]) -> str:
        """The prompt text the engine's own chat template makes of ``messages``."""
        raise self._unsupported("render a chat template")

    async def tokenize(self, client: LaneClient, text: str, *, special: bool, sink: Any,
                       tags: dict[str, Any]) -> TokenSeq:
        """Token ids (and pieces) of ``text``; ``special`` parses special-token text as special tokens."""
        raise self._unsupported("tokenize")

    async def generate(self, client: LaneClient, lane: EffectiveLane, prompt: TokenSeq, *, max_tokens: int,
                       top_k: int, sink: Any, tags: dict[str, Any]) -> Generation:
        """Greedy continuation of ``prompt`` with generation-time logprobs and top-k per token."""
        raise self._unsupported("generate with logprobs")

    def parse_generation(self, records: list[dict[str, Any]]) -> Generation:
        raise self._unsupported("generate with logprobs")

    async def score(self, client: LaneClient, lane: EffectiveLane, prompt: TokenSeq, continuation: TokenSeq, *,
                    top_k: int, sink: Any, tags: dict[str, Any]) -> list[Position]:
        """Teacher forcing: each token of ``continuation`` scored after ``prompt`` plus the tokens before it;
        one more position at the end, the next-token distribution after the whole continuation."""
        raise self._unsupported("score given tokens")

    def parse_score(self, records: list[dict[str, Any]], prompt: TokenSeq,
                    continuation: TokenSeq) -> list[Position]:
        raise self._unsupported("score given tokens")

    def chat_body(self, lane: EffectiveLane, messages: list[dict[str, Any]], *, max_tokens: int,
                  json_schema: dict[str, Any] | None = None,
                  tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """A greedy /v1/chat/completions body, with a json_schema response format or tools in this
        engine's own shape."""
        if json_schema is not None and "json_schema" not in self.capabilities:
            raise self._unsupported("constrain output to a JSON schema")
        if tools is not None and "tools" not in self.capabilities:
            raise self._unsupported("parse tool calls")
        body: dict[str, Any] = {"model": self.served_model(lane), "messages": messages, "temperature": 0,
                                "max_tokens": max_tokens, "seed": 0}
        if json_schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "answer", "strict": True, "schema": json_schema}}
        if tools is not None:
            body["tools"] = tools
        return body

    # Streaming measurement (speed gate). The defaults suit an OpenAI-compatible engine that streams
    # usage on request and exports no metrics; an adapter overrides what its engine does better.
    stream_token_counter: str | None = None  # dotted path in a chunk to the engine's running token count
    stream_tokens_per_chunk: int | None = None  # set only if every content chunk is exactly this many tokens
    # an engine that streams no usage and no counter: its tokenizer counts the streamed text (count_tokens)
    stream_count_by_tokenizer: bool = False

    async def count_tokens(self, client: LaneClient, text: str) -> int:
        """How many tokens ``text`` is, by the engine's own tokenizer (no special tokens added)."""
        raise CapabilityError(f"{self.name}: no tokenizer endpoint to count streamed tokens")

    def stream_request_fields(self) -> dict[str, Any]:
        """Fields a streaming request adds so the engine reports its own token counts."""
        return {"stream_options": {"include_usage": True}}

    async def scrape_metrics(self, client: LaneClient) -> str | None:
        """The engine's Prometheus metrics page, or None when it exports none (the ruler and the speed
        gate both read it here); an engine that should answer and does not raises ``EngineError``."""
        return None

    def metrics_busy(self, samples: Samples) -> bool:
        """True while the engine reports requests in flight, so its counters may not be final yet."""
        return False

    # The options whose value the engine shows, keyed by axis field (``args.ctx-size``), each with the
    # observable that bounds it; an axis value none covers is reported unproven by the ruler.
    declared_observables: Mapping[str, Observable] = MappingProxyType({})

    def check_declared(self, lane: EffectiveLane, fields: list[str], evidence: Evidence) -> list[Finding]:
        """Whether each declared axis field's value on ``lane`` is the one the engine runs with."""
        return check_declared(self.name, self.declared_observables, lane, fields, evidence)

    def metric_summary(self, deltas: Samples) -> dict[str, Any]:
        """Counter deltas under engine-neutral names (requests, prompt_tokens, cached_prompt_tokens,
        generated_tokens, spec_drafts, spec_draft_tokens, spec_accepted_tokens,
        spec_accepted_per_position); a name is absent when the engine does not export it."""
        return {}


# Engine kinds to adapters, filled by ``register`` as each adapter module is imported. Read it as
# ``lanes.engines.registry.ADAPTERS``: that module imports every module of this package first.
ADAPTERS: dict[str, type[EngineAdapter]] = {}

A = TypeVar("A", bound=type[EngineAdapter])


def register(cls: A) -> A:
    """Beside an adapter class: the adapter of the engine kind its ``name`` says, with the facts the contract
    checks read (``facts``, declared on the class itself: a subclass never inherits another kind's)."""
    name, facts = vars(cls).get("name"), vars(cls).get("facts")
    if not isinstance(name, str) or not name or not isinstance(facts, EngineFacts):
        raise TypeError(f"{cls.__name__}: a registered adapter declares its engine kind (`name`) and its "
                        "`facts` (contracts.engines.EngineFacts)")
    add_kind(ADAPTERS, name, cls)
    return cls
