"""llama.cpp's llama-server.

Ready: /health answers 503 {"error": {"message": "Loading model"}} while loading, then 200.
Greedy at temperature <= 0. No prompt-token logprobs (echo is rejected); top-k logprobs of
generated tokens only. Metrics need --metrics. Speculative decoding without a draft model:
--spec-type ngram-simple --spec-draft-n-max K. Token counting: POST /apply-template renders the chat
template, POST /tokenize counts it (with special tokens parsed, as a chat request does); the count
equals the chat response's usage.prompt_tokens. ``cache_prompt: false`` keeps the slot's prompt cache
out of a request; responses (and the last stream event) carry ``timings`` with prompt_n/prompt_ms.
"""

from __future__ import annotations

from typing import Any

import httpx

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.lanes.adapter import EngineAdapter, Readiness
from campaign.lanes.client import LaneClient

__all__ = ["LlamaCppAdapter"]


class LlamaCppAdapter(EngineAdapter):
    name = "llamacpp"

    def server_args(self, lane: EffectiveLane, model_path: str) -> list[str]:
        args = ["-m", model_path, "--host", lane.host, "--port", str(lane.port)]
        if lane.model.served_name:
            args += ["--alias", lane.model.served_name]
        return args + list(lane.args)

    async def probe(self, client: LaneClient) -> Readiness:
        try:
            status, text = await client.get_text("/health", timeout=5.0)
        except EngineError as exc:
            cause = exc.__cause__
            if isinstance(cause, httpx.ConnectError):
                return Readiness(False, "connection refused")
            return Readiness(False, str(cause or exc))
        if status == 200:
            return Readiness(True, "health 200")
        return Readiness(False, f"health {status}: {text[:120]}")

    async def version(self, client: LaneClient) -> dict[str, Any]:
        try:
            props = await client.get_json("/props")
        except EngineError:
            return {}
        return {"build_info": props.get("build_info"), "model_path": props.get("model_path"),
                "n_ctx": (props.get("default_generation_settings") or {}).get("n_ctx"),
                "total_slots": props.get("total_slots")}

    async def count_chat_tokens(self, client: LaneClient, lane: EffectiveLane,
                                messages: list[dict[str, Any]]) -> int:
        rendered = await client.post("/apply-template", {"messages": messages})
        prompt = (rendered.get("response") or {}).get("prompt")
        if rendered.get("error") or not isinstance(prompt, str):
            raise EngineError(f"lane {lane.name}: /apply-template failed: {rendered.get('error', 'no prompt')}")
        counted = await client.post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})
        tokens = (counted.get("response") or {}).get("tokens")
        if counted.get("error") or not isinstance(tokens, list):
            raise EngineError(f"lane {lane.name}: /tokenize failed: {counted.get('error', 'no tokens')}")
        return len(tokens)

    def uncached_fields(self) -> dict[str, Any]:
        return {"cache_prompt": False}

    def engine_timings(self, response: dict[str, Any]) -> dict[str, float]:
        timings = response.get("timings") or {}
        out: dict[str, float] = {}
        for key, name in (("prompt_n", "prompt_tokens_processed"), ("prompt_ms", "prefill_ms"),
                          ("prompt_per_second", "prefill_tok_s"), ("cache_n", "cached_tokens")):
            if isinstance(timings.get(key), (int, float)):
                out[name] = float(timings[key])
        return out
