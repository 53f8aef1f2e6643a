"""llama.cpp's llama-server.

Ready: /health answers 503 {"error": {"message": "Loading model"}} while loading, then 200.
Greedy at temperature <= 0. No prompt-token logprobs (echo is rejected); top-k logprobs of
generated tokens only. Metrics need --metrics. Speculative decoding without a draft model:
--spec-type ngram-simple --spec-draft-n-max K.

Streams (measured on this build): with ``timings_per_token`` every content chunk carries
``timings.predicted_n``, the running count of generated tokens, one per chunk even when speculative
decoding accepts several at once; ``stream_options.include_usage`` adds a final chunk with ``usage``
(a stop's EOS token is counted there but never streamed). /metrics has no request counter: generated
and prompt token counters are what tell another client's traffic apart.
"""

from __future__ import annotations

from typing import Any

import httpx

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.lanes.adapter import EngineAdapter, Readiness
from campaign.lanes.client import LaneClient
from campaign.lanes.metrics import Samples

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

    stream_token_counter = "timings.predicted_n"

    def stream_request_fields(self) -> dict[str, Any]:
        return {"stream_options": {"include_usage": True}, "timings_per_token": True}

    async def scrape_metrics(self, client: LaneClient) -> str | None:
        status, text = await client.get_text("/metrics", timeout=10.0)
        if status == 501:  # started without --metrics
            return None
        if status != 200:
            raise EngineError(f"lane {client.lane}: GET /metrics answered {status}: {text[:120]}")
        return text

    def metrics_busy(self, samples: Samples) -> bool:
        return samples.get("llamacpp:requests_processing", 0.0) > 0

    def metric_summary(self, deltas: Samples) -> dict[str, Any]:
        def get(name: str) -> float | None:
            return deltas.get(f"llamacpp:{name}")

        summary: dict[str, Any] = {}
        processed, cached = get("prompt_tokens_total"), get("prompt_tokens_cached_total")
        if processed is not None and cached is not None:
            summary["prompt_tokens"] = processed + cached  # the counter excludes cached tokens
            summary["cached_prompt_tokens"] = cached
        for ours, theirs in (("generated_tokens", "tokens_predicted_total"),
                             ("spec_drafts", "spec_decode_num_drafts_total"),
                             ("spec_draft_tokens", "spec_decode_num_draft_tokens_total"),
                             ("spec_accepted_tokens", "spec_decode_num_accepted_tokens_total")):
            if get(theirs) is not None:
                summary[ours] = get(theirs)
        prefix = 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="'
        per_position = {key[len(prefix):-2]: value for key, value in deltas.items() if key.startswith(prefix)}
        if per_position:
            summary["spec_accepted_per_position"] = dict(sorted(per_position.items(), key=lambda kv: int(kv[0])))
        return summary
