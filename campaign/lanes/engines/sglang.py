"""SGLang's server (``python -m sglang.launch_server`` / ``sglang serve``).

Checked against the code of SGLang 0.5.23 (the PyPI wheel ``sglang-0.5.23``, the tree ``python/`` of
tag v0.5.23); every fact below cites ``path:line`` under ``python/sglang/srt/`` of that release, and
docs/engines.md has the full table. Then checked against that release serving here (scripts/setup-sglang.sh;
its replies are recorded in tests/data/sglang/ and replayed by the unit tests).

- Ready: the HTTP server is started only after the schedulers loaded the weights, so the port refuses
  connections while loading (entrypoints/engine.py:1348-1350, then http_server.py:3179). Then ``/health``
  (the same handler as ``/health_generate``) answers 503 while the status is Starting, i.e. until the
  server's own warmup request passed (http_server.py:735-736, 2502), and otherwise submits a one-token
  generation and answers 200 once anything comes back within SGLANG_HEALTH_CHECK_TIMEOUT (20 s), else
  503 and the status turns UnHealthy (http_server.py:218, 751-799). With
  SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0 ``/health`` is a bare 200 (http_server.py:745-749).
- Identity: ``GET /server_info`` (``/get_server_info`` is its deprecated alias, http_server.py:853-864):
  every resolved server argument as a flat key (server_args.py:316-333; utils/common.py:3584-3593),
  ``launch_command``, the scheduler's info, ``version`` and ``frontend`` (http_server.py:883-890).
- Prompt-token logprobs: native ``/generate`` with ``return_logprob: true, logprob_start_len: 0``
  (default -1: output tokens only, managers/io_struct.py:231-233, 568). ``meta_info.input_token_logprobs``
  is ``[[logprob, token_id, text|null], ...]``: the first entry's logprob is always null (the scheduler
  prepends None and drops the sampling position, scheduler_components/logprob_result_processor.py:38);
  the text is null unless ``return_text_in_logprobs`` (tokenizer_manager.py:3098-3116).
  ``input_top_logprobs`` / ``output_top_logprobs`` (only with ``top_logprobs_num`` > 0) hold one list of
  triples per position, ``null`` for the first prompt position (logprob_result_processor.py:58-81;
  tokenizer_manager.py:3118-3135). ``finish_reason`` is ``{"type": "length", "length": n}`` or
  ``{"type": "stop", "matched": id|str}`` (managers/schedule_batch.py:284-329).
- Token counts: ``meta_info.prompt_tokens``, ``completion_tokens``, ``cached_tokens`` and
  ``reasoning_tokens`` (tokenizer_manager.py:2507-2576); with speculative decoding ``spec_verify_ct`` and
  ``spec_accept_length`` = completion_tokens / spec_verify_ct (tokenizer_manager.py:3138-3172).
- Metrics: only with ``--enable-metrics`` (else /metrics is 404, http_server.py:314-315); prometheus
  multiprocess mode (utils/common.py:2843-2853), names in METRICS with the types in METRIC_TYPES
  (observability/metrics_collector.py, lines there). Request counters move when a request finishes
  (metrics_collector.py:2092-2152).
- Reasoning: with ``--reasoning-parser`` the chat message carries ``reasoning_content`` (null when there
  was none) and ``content`` the rest (entrypoints/openai/protocol.py:1293-1297, serving_chat.py:2930-3003).
  Tool calls (``--tool-call-parser``): ``message.tool_calls`` = ``[{"id", "index", "type": "function",
  "function": {"name", "arguments"}}]`` with arguments a JSON string (not necessarily an object: recorded
  ``"\"Paris\""``), finish_reason turned ``tool_calls`` only from ``stop`` (protocol.py:732-745,
  serving_chat.py:3150-3213). Without a tool-call parser, tool_choice "required" still constrains the output
  and the calls stay in ``content``.
- Thinking switch: ``chat_template_kwargs`` are passed as keyword arguments to the chat template
  (serving_chat.py:2163-2167, 2299-2306); the key is the template's own (Qwen3: ``enable_thinking``), and
  the reasoning parser reads the same key to decide whether output starts inside a thinking block
  (serving_chat.py:3518-3600, parser/template_detection.py:195-270). On a template with no such toggle the
  parser's default rules (qwen3: thinking unless ``enable_thinking`` is false, parser/reasoning_parser.py:483):
  recorded, the whole answer came back as ``reasoning_content`` until ``enable_thinking: false``, which the
  template ignored (same text) and only the parser read.
- Tokenize: ``POST /tokenize`` (alias of /v1/tokenize) ``{"prompt", "add_special_tokens"}`` or
  ``{"messages"}`` (rendered as for a chat completion) -> ``{"tokens", "count", "max_model_len"}``
  (http_server.py:1906-1917, entrypoints/openai/protocol.py:1744-1801, serving_tokenize.py:39-81).
"""

from __future__ import annotations

import os
import re
from typing import Any

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.lanes.engines.base import EngineAdapter, Readiness
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.prometheus import Samples, parse_prometheus, series_sum, totals

__all__ = ["METRICS", "METRIC_TYPES", "SGLangAdapter"]

_PYTHON = re.compile(r"(^|[-_.])python(\d+(\.\d+)*)?$")  # python, python3.11, sglang-cpu-python

# observability/metrics_collector.py @ v0.5.23: the line that names each metric.
METRICS = {
    "prompt_tokens": "sglang:prompt_tokens_total",  # 1856, counter; every prompt token, cached included
    "generation_tokens": "sglang:generation_tokens_total",  # 1861, counter
    "cached_tokens": "sglang:cached_tokens_total",  # 1935, counter, label cache_source; absent until a hit
    "requests": "sglang:num_requests_total",  # 1941, counter; finished requests, any finish reason
    "aborted_requests": "sglang:num_aborted_requests_total",  # 1960, counter; aborts sent to the scheduler
    "spec_verify_calls": "sglang:spec_verify_calls_total",  # 1866, counter; verify passes, spec only
    "ttft_seconds": "sglang:time_to_first_token_seconds",  # 2041, histogram
    "running_requests": "sglang:num_running_reqs",  # 365, gauge
    "queued_requests": "sglang:num_queue_reqs",  # 371, gauge
    "cache_hit_rate": "sglang:cache_hit_rate",  # 389, gauge: the last prefill batch's, not cumulative
    "spec_accept_length": "sglang:spec_accept_length",  # 512, gauge: the last logging interval's
    "spec_accept_rate": "sglang:spec_accept_rate",  # 518, gauge
}
METRIC_TYPES = {  # as each is declared there (Counter / Gauge / Histogram)
    **{METRICS[k]: "counter" for k in ("prompt_tokens", "generation_tokens", "cached_tokens", "requests",
                                       "aborted_requests", "spec_verify_calls")},
    **{METRICS[k]: "gauge" for k in ("running_requests", "queued_requests", "cache_hit_rate", "spec_accept_length",
                                     "spec_accept_rate")},
    METRICS["ttft_seconds"]: "histogram",
}


class SGLangAdapter(EngineAdapter):
    name = "sglang"
    reasoning_field = "reasoning_content"
    metrics_flag = "--enable-metrics"
    capabilities = frozenset({"json_schema", "tools", "metrics"})

    def server_args(self, lane: EffectiveLane, model_path: str) -> list[str]:
        exe = os.path.basename(lane.executable or "")
        # a python (or the sglang-cpu-python wrapper of scripts/setup-sglang.sh) needs the module, the `sglang`
        # CLI its verb (sglang/cli/main.py); an image ENTRYPOINT already has both
        prefix = ["-m", "sglang.launch_server"] if _PYTHON.search(exe) else (["serve"] if exe == "sglang" else [])
        args = [*prefix, "--model-path", model_path, "--host", lane.host, "--port", str(lane.port)]
        if lane.model.served_name:
            args += ["--served-model-name", lane.model.served_name]
        return args + list(lane.args)

    def launch_env(self, lane: EffectiveLane, scratch: str) -> dict[str, str]:
        """What SGLang, torch, Triton, outlines and Hugging Face write goes under the lane's scratch folder
        (SGLang's prometheus multiprocess folder is a TemporaryDirectory, so under TMPDIR too:
        utils/common.py:2825-2840); the model is a local directory, so hub access is off."""
        return {"TMPDIR": scratch, "HF_HOME": f"{scratch}/hf-home", "XDG_CACHE_HOME": f"{scratch}/xdg-cache",
                "TORCHINDUCTOR_CACHE_DIR": f"{scratch}/torchinductor", "TRITON_CACHE_DIR": f"{scratch}/triton",
                "OUTLINES_CACHE_DIR": f"{scratch}/outlines", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "DO_NOT_TRACK": "1"}

    def served_model(self, lane: EffectiveLane) -> str:
        # the OpenAI routes do not check the name (serving_base.py:40-60); "default" is their default
        return lane.model.served_name or "default"

    async def probe(self, client: LaneClient) -> Readiness:
        status, text = await self.poll(client, "/health", refused="connection refused (loading weights)",
                                       timeout=30.0)  # one-token generation, up to 20 s (http_server.py:218)
        if status is None:
            return Readiness(False, text)
        if status == 200:
            return Readiness(True, "health 200")
        if status == 503:
            return Readiness(False, "health 503 (warming up, shutting down, or no reply to its test generation)")
        return Readiness(False, f"health {status}: {text[:120]}")

    async def version(self, client: LaneClient) -> dict[str, Any]:
        info: dict[str, Any] | None = None
        for path in ("/server_info", "/get_server_info"):  # the second for releases before the rename
            try:
                info = await client.get_json(path)
                break
            except EngineError:
                continue
        if not isinstance(info, dict):
            return {}
        keys = ("version", "frontend", "model_path", "served_model_name", "device", "dtype", "tp_size", "dp_size",
                "context_length", "chunked_prefill_size", "disable_radix_cache", "attention_backend",
                "mem_fraction_static", "max_total_num_tokens", "speculative_algorithm",
                "speculative_num_draft_tokens", "reasoning_parser", "tool_call_parser", "enable_metrics")
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
        inputs = _triples(meta.get("input_token_logprobs"))
        if inputs and inputs[0]["logprob"] is not None:
            # logprob_result_processor.py:38 always leaves the first requested position unscored
            raise EngineError(f"sglang input_token_logprobs[0] has a logprob ({inputs[0]['logprob']}); "
                              "this is not the shape of SGLang 0.5.23")
        finish = meta.get("finish_reason")
        out = {"text": response["text"], "prompt_tokens": meta.get("prompt_tokens"),
               "completion_tokens": meta.get("completion_tokens"), "cached_tokens": meta.get("cached_tokens"),
               "reasoning_tokens": meta.get("reasoning_tokens"),
               "finish_reason": finish.get("type") if isinstance(finish, dict) else finish,
               "matched_stop": finish.get("matched") if isinstance(finish, dict) else None,
               "input_logprobs": inputs, "output_logprobs": _triples(meta.get("output_token_logprobs")),
               "input_top_logprobs": [_triples(pos) if pos is not None else None
                                      for pos in meta.get("input_top_logprobs") or []],
               "output_top_logprobs": [_triples(pos) for pos in meta.get("output_top_logprobs") or []]}
        for key in ("spec_verify_ct", "spec_accept_length"):
            if key in meta:
                out[key] = meta[key]
        return out

    @staticmethod
    def tokenize_request(text: str) -> tuple[str, dict[str, Any]]:
        return "/tokenize", {"prompt": text, "add_special_tokens": False}

    @staticmethod
    def parse_tokenize(response: dict[str, Any]) -> list[int]:
        tokens = response.get("tokens")
        if (not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens)
                or response.get("count") != len(tokens)):
            raise EngineError(f"sglang /tokenize reply is not {{tokens, count}} of one prompt: {response!r:.200}")
        return tokens

    async def count_chat_tokens(self, client: LaneClient, lane: EffectiveLane,
                                messages: list[dict[str, Any]]) -> int:
        # no add_generation_prompt: then the messages are rendered as for a chat completion (protocol.py:1763)
        record = await client.post("/tokenize", {"model": self.served_model(lane), "messages": messages})
        if record.get("error") or not isinstance(record.get("response"), dict):
            raise EngineError(f"lane {client.lane}: /tokenize of chat messages failed: {record.get('error')}: "
                              f"{str(record.get('response') or record.get('response_text'))[:200]}")
        return len(self.parse_tokenize(record["response"]))

    async def count_tokens(self, client: LaneClient, text: str) -> int:
        path, body = self.tokenize_request(text)
        record = await client.post(path, body)
        if record.get("error") or not isinstance(record.get("response"), dict):
            raise EngineError(f"lane {client.lane}: /tokenize failed: {record.get('error')}")
        return len(self.parse_tokenize(record["response"]))

    @staticmethod
    def thinking_fields(enabled: bool, template_key: str = "enable_thinking") -> dict[str, Any]:
        """Request fields for the thinking switch; the key is the chat template's (Qwen3: enable_thinking)."""
        return {"chat_template_kwargs": {template_key: enabled}}

    @staticmethod
    def parse_chat_message(response: dict[str, Any]) -> dict[str, Any]:
        """One non-streamed chat completion as content, reasoning (None when the parser found none or none
        runs) and tool calls with their arguments as SGLang sent them (a JSON string)."""
        choices = response.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0].get("message"), dict):
            raise EngineError(f"sglang chat reply has not one choice with a message: {response!r:.200}")
        message, choice = choices[0]["message"], choices[0]
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
                raise EngineError(f"sglang tool call {call!r:.200} is not {{function: {{name, arguments: str}}}}")
            calls.append({"id": call.get("id"), "name": function.get("name"), "arguments": function["arguments"]})
        return {"content": message.get("content"), "reasoning": message.get("reasoning_content"),
                "tool_calls": calls, "finish_reason": choice.get("finish_reason"),
                "matched_stop": choice.get("matched_stop")}

    # --- metrics ---------------------------------------------------------------------------------

    async def scrape_metrics(self, client: LaneClient) -> str | None:
        status, text = await client.get_text("/metrics", timeout=10.0)
        if status == 404:  # started without --enable-metrics: the route is not mounted
            return None
        if status != 200:
            raise EngineError(f"lane {client.lane}: GET /metrics answered {status}: {text[:120]}")
        return text

    def metrics_busy(self, samples: Samples) -> bool:
        return any((series_sum(samples, METRICS[key]) or 0.0) > 0 for key in ("running_requests", "queued_requests"))

    def metric_summary(self, deltas: Samples) -> dict[str, Any]:
        """Engine-neutral counter deltas, summed over SGLang's labels (model_name, engine_type,
        is_streaming, cache_source). ``cached_prompt_tokens`` is 0 when prompts were counted and no
        cache-hit series exists (SGLang creates one only at the first hit). SGLang counts no accepted
        draft tokens: ``spec_drafts`` is its verify passes and ``spec_accepted_tokens`` = generated tokens
        - verify passes, so 1 + accepted / drafts is SGLang's own accept length (completion tokens per
        verify pass, bonus token included: tokenizer_manager.py:3166); drafted tokens are not counted."""
        def get(key: str) -> float | None:
            return series_sum(deltas, METRICS[key])

        summary: dict[str, Any] = {}
        for ours, key in (("requests", "requests"), ("prompt_tokens", "prompt_tokens"),
                          ("cached_prompt_tokens", "cached_tokens"), ("generated_tokens", "generation_tokens")):
            value = get(key)
            if value is not None:
                summary[ours] = value
        if "prompt_tokens" in summary:
            summary.setdefault("cached_prompt_tokens", 0.0)
        verify = get("spec_verify_calls")
        if verify and "generated_tokens" in summary:
            summary["spec_drafts"] = verify
            summary["spec_accepted_tokens"] = summary["generated_tokens"] - verify
        return summary

    @staticmethod
    def metric_values(text: str) -> dict[str, float]:
        """Prometheus text -> {metric name: value summed over label sets}, for the names in METRICS."""
        wanted = set(METRICS.values()) | {f"{m}_sum" for m in METRICS.values()} | {f"{m}_count" for m in METRICS.values()}
        return totals(parse_prometheus(text), wanted)


def _triples(rows: Any) -> list[dict[str, Any]]:
    """``[[logprob, token_id, text|null], ...]`` (tokenizer_manager.py:3098-3116) as dicts."""
    out = []
    for row in rows or []:
        if not isinstance(row, (list, tuple)) or len(row) != 3 or not isinstance(row[1], int):
            raise EngineError(f"sglang logprob entry {row!r} is not [logprob, token_id, text]")
        out.append({"logprob": row[0], "token_id": row[1], "text": row[2]})
    return out
