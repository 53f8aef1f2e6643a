"""SGLang's server (``python -m sglang.launch_server`` / ``sglang serve``).

Checked against SGLang 0.5.x: the docs (native API, sampling parameters, production metrics, server
arguments) and the source of ``srt/entrypoints/http_server.py`` and ``srt/managers/tokenizer_manager.py``.
- Ready: nothing listens while weights load (connection refused); then ``/health`` answers 503 while the
  server status is Starting (its own warmup) and 200 once a one-token generation went through.
- Prompt-token logprobs: native ``/generate`` with ``return_logprob: true, logprob_start_len: 0``;
  ``meta_info.input_token_logprobs`` is ``[[logprob, token_id, text|null], ...]`` with ``null`` logprob
  for the first prompt token; ``output_token_logprobs`` likewise for generated tokens; top-k in
  ``input_top_logprobs`` / ``output_top_logprobs`` with ``top_logprobs_num``. (The OpenAI route's echo
  needs max_tokens >= 1.) Greedy at ``temperature: 0``.
- Token counts: ``meta_info.prompt_tokens``, ``completion_tokens``, ``cached_tokens`` (prefix-cache hits).
- Metrics need ``--enable-metrics``: ``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``,
  ``sglang:cache_hit_rate`` (gauge), ``sglang:spec_accept_length`` (gauge, speculative decoding),
  ``sglang:time_to_first_token_seconds`` (histogram), ``sglang:num_requests_total``.
- Reasoning: with ``--reasoning-parser`` the chat message carries ``reasoning_content``; the thinking switch
  goes through ``chat_template_kwargs`` (its key depends on the model's chat template, e.g. Qwen3's
  ``enable_thinking``).
- Tokenize: ``POST /tokenize {"prompt", "add_special_tokens"}`` -> ``{"tokens", "count", "max_model_len"}``.
- Version: ``GET /get_server_info`` (server args, scheduler info and ``version``).
"""

from __future__ import annotations

import os
from typing import Any

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.lanes.engines.base import EngineAdapter, Readiness
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.prometheus import parse_prometheus, totals

__all__ = ["METRICS", "SGLangAdapter"]

METRICS = {
    "prompt_tokens": "sglang:prompt_tokens_total",
    "generation_tokens": "sglang:generation_tokens_total",
    "cache_hit_rate": "sglang:cache_hit_rate",
    "spec_accept_length": "sglang:spec_accept_length",
    "requests": "sglang:num_requests_total",
    "ttft_seconds": "sglang:time_to_first_token_seconds",
}


class SGLangAdapter(EngineAdapter):
    name = "sglang"
    reasoning_field = "reasoning_content"
    metrics_flag = "--enable-metrics"

    def server_args(self, lane: EffectiveLane, model_path: str) -> list[str]:
        exe = os.path.basename(lane.executable or "")
        # `python3` needs the module, the `sglang` CLI its verb; an image ENTRYPOINT already has both
        prefix = ["-m", "sglang.launch_server"] if exe.startswith("python") else (["serve"] if exe == "sglang" else [])
        args = [*prefix, "--model-path", model_path, "--host", lane.host, "--port", str(lane.port)]
        if lane.model.served_name:
            args += ["--served-model-name", lane.model.served_name]
        return args + list(lane.args)

    def served_model(self, lane: EffectiveLane) -> str:
        return lane.model.served_name or "default"

    async def probe(self, client: LaneClient) -> Readiness:
        status, text = await self.poll(client, "/health", refused="connection refused (loading weights)",
                                       timeout=30.0)  # SGLang's /health runs a 1-token generation
        if status is None:
            return Readiness(False, text)
        if status == 200:
            return Readiness(True, "health 200")
        if status == 503:
            return Readiness(False, "health 503 (starting or unhealthy)")
        return Readiness(False, f"health {status}: {text[:120]}")

    async def version(self, client: LaneClient) -> dict[str, Any]:
        try:
            info = await client.get_json("/get_server_info")
        except EngineError:
            return {}
        keys = ("version", "model_path", "tp_size", "dp_size", "context_length", "speculative_algorithm",
                "enable_metrics", "attention_backend", "mem_fraction_static")
        return {k: info.get(k) for k in keys if k in info}

    # Engine-specific request shapes, for the gates that need more than chat completions.

    def score_request(self, text: str, *, max_new_tokens: int = 1, top_logprobs: int = 0) -> tuple[str, dict[str, Any]]:
        """Teacher forcing: the prompt's own token logprobs (from the first token) and greedy continuation."""
        body: dict[str, Any] = {"text": text, "return_logprob": True, "logprob_start_len": 0,
                                "return_text_in_logprobs": True,
                                "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
        if top_logprobs:
            body["top_logprobs_num"] = top_logprobs
        return "/generate", body

    @staticmethod
    def parse_generate(response: dict[str, Any]) -> dict[str, Any]:
        """A native /generate reply as plain fields; an unexpected shape is an EngineError, never a guess."""
        meta = response.get("meta_info")
        if not isinstance(meta, dict) or "text" not in response:
            raise EngineError(f"sglang /generate reply has no text/meta_info: keys {sorted(response)}")

        def triples(rows: Any) -> list[dict[str, Any]]:
            out = []
            for row in rows or []:
                if not isinstance(row, (list, tuple)) or len(row) < 2:
                    raise EngineError(f"sglang logprob entry {row!r} is not [logprob, token_id, text]")
                out.append({"logprob": row[0], "token_id": row[1], "text": row[2] if len(row) > 2 else None})
            return out

        finish = meta.get("finish_reason")
        return {"text": response["text"], "prompt_tokens": meta.get("prompt_tokens"),
                "completion_tokens": meta.get("completion_tokens"), "cached_tokens": meta.get("cached_tokens"),
                "finish_reason": finish.get("type") if isinstance(finish, dict) else finish,
                "input_logprobs": triples(meta.get("input_token_logprobs")),
                "output_logprobs": triples(meta.get("output_token_logprobs")),
                "output_top_logprobs": [triples(pos) for pos in meta.get("output_top_logprobs") or []]}

    @staticmethod
    def tokenize_request(text: str) -> tuple[str, dict[str, Any]]:
        return "/tokenize", {"prompt": text, "add_special_tokens": False}

    @staticmethod
    def parse_tokenize(response: dict[str, Any]) -> list[int]:
        tokens = response.get("tokens")
        if not isinstance(tokens, list) or response.get("count", len(tokens)) != len(tokens):
            raise EngineError(f"sglang /tokenize reply is not {{tokens, count}}: {response!r:.200}")
        return tokens

    @staticmethod
    def thinking_fields(enabled: bool, template_key: str = "enable_thinking") -> dict[str, Any]:
        """Request fields for the thinking switch; the key is the chat template's (Qwen3: enable_thinking)."""
        return {"chat_template_kwargs": {template_key: enabled}}

    @staticmethod
    def metric_values(text: str) -> dict[str, float]:
        """Prometheus text -> {metric name: value summed over label sets}, for the names in METRICS."""
        wanted = set(METRICS.values()) | {f"{m}_sum" for m in METRICS.values()} | {f"{m}_count" for m in METRICS.values()}
        return totals(parse_prometheus(text), wanted)
