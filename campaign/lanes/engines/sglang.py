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
- Teacher forcing (render_chat, tokenize, generate, score below): token ids in, ``/tokenize`` and
  ``/detokenize`` for the chat prompt and each token's text, ``logprob_start_len`` at the prompt's last token
  so its null entry is the only one; proven on this CPU in tests/integration/engines/test_sglang_window.py.
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

from campaign.contracts.engines import EngineFacts
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError, ScoreError
from campaign.lanes.bootlog import HUB_REFUSED
from campaign.lanes.engines.base import EngineAdapter, Readiness, fresh_cache_salt, register
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.prometheus import Samples, parse_prometheus, series_sum, totals
from campaign.lanes.engines.scoring import Alt, Generation, Position, TokenSeq, one_record

__all__ = ["METRICS", "METRIC_TYPES", "SGLangAdapter"]

_PYTHON = re.compile(r"(^|[-_.])python(\d+(\.\d+)*)?$")  # python, python3.11, sglang-cpu-python
# /generate fields of every scoring request: logprobs with each token's text (managers/io_struct.py:177-250), and
# greedy sampling that keeps special tokens and the stop token in the text (sampling/sampling_params.py:174-176)
_LOGPROBS = {"return_logprob": True, "return_text_in_logprobs": True}
_GREEDY = {"temperature": 0, "skip_special_tokens": False, "no_stop_trim": True}

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


@register
class SGLangAdapter(EngineAdapter):
    name = "sglang"
    # Draft flags from its documented server arguments; 0.5.23: --speculative-draft-model is an alias
    # (srt/arg_groups/fields/spec.py L36-42).
    facts = EngineFacts(context_options=("--context-length",), model_forms=("directory",), dtype_options=("--dtype",),
                        build_hint="make sglang", boot_failures=(("model_load_failed", HUB_REFUSED),),
                        draft_options=("--speculative-draft-model-path", "--speculative-draft-model",
                                       "--speculative-draft"),
                        underscores_are_dashes=True)
    reasoning_field = "reasoning_content"
    metrics_flag = "--enable-metrics"
    capabilities = frozenset({"render_chat", "tokenize", "generate", "score", "json_schema", "tools", "metrics"})

    def uncached_fields(self) -> dict[str, Any]:
        # a salt of its own per request: no cached prefix of another request is reused (docs/engines.md)
        return {"cache_salt": fresh_cache_salt()}

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

    # --- token shapes for the scoring gates (teacher_forced, kl); every raw record goes to ``sink`` ---------

    async def render_chat(self, client: LaneClient, messages: list[dict[str, Any]], *, sink: Any,
                          tags: dict[str, Any]) -> str:
        """The prompt a chat completion of ``messages`` is made of: /tokenize renders them as for a chat
        completion (add_generation_prompt left out, protocol.py:1763-1769) and /detokenize gives the text
        back with special tokens kept (http_server.py:1925-1937, serving_tokenize.py:139-190)."""
        record = await client.post("/tokenize", {"messages": messages}, sink=sink, tags={**tags, "part": "render_chat"})
        ids = _ids(record, client.lane)
        text = await client.post("/detokenize", {"tokens": ids, "skip_special_tokens": False}, sink=sink,
                                 tags={**tags, "part": "render_text"})
        prompt = (text.get("response") or {}).get("text") if not text.get("error") else None
        if not isinstance(prompt, str):
            raise ScoreError(f"lane {client.lane}: /detokenize failed: {text.get('error') or 'no text'}")
        return prompt

    async def tokenize(self, client: LaneClient, text: str, *, special: bool, sink: Any,
                       tags: dict[str, Any]) -> TokenSeq:
        """Ids by the server's tokenizer (a Hugging Face tokenizer parses special-token text whatever
        ``special`` says; ``special`` adds BOS/EOS), and each token's text from /detokenize of each id
        alone, kept when they join up to ``text``."""
        record = await client.post("/tokenize", {"prompt": text, "add_special_tokens": special}, sink=sink,
                                   tags={**tags, "part": "tokenize"})
        ids = _ids(record, client.lane)
        pieces: tuple[str, ...] = ()
        if ids:
            each = await client.post("/detokenize", {"tokens": [[i] for i in ids], "skip_special_tokens": False},
                                     sink=sink, tags={**tags, "part": "pieces"})
            texts = (each.get("response") or {}).get("text") if not each.get("error") else None
            if isinstance(texts, list) and len(texts) == len(ids) and "".join(map(str, texts)) == text:
                pieces = tuple(texts)
        return TokenSeq(tuple(ids), text, pieces)

    async def generate(self, client: LaneClient, lane: EffectiveLane, prompt: TokenSeq, *, max_tokens: int,
                       top_k: int, sink: Any, tags: dict[str, Any]) -> Generation:
        """Native /generate from token ids: greedy, with each generated token's logprob and top-k (raw
        log-softmax when the batch is all greedy, layers/sampler.py:208-225). The stop token stays in the
        text (no_stop_trim, skip_special_tokens off; else the detokenizer trims it, detokenizer_manager.py:194-224)
        so the text is the tokens' own; each token's text comes from decoding it alone (tokenizer_manager.py:3098-3116)."""
        body = {"input_ids": list(prompt.ids), **_LOGPROBS, "top_logprobs_num": top_k,
                "sampling_params": {**_GREEDY, "max_new_tokens": max_tokens}, **self.uncached_fields()}
        record = await client.post("/generate", body, sink=sink, tags={**tags, "part": "generate"})
        return self.parse_generation([record])

    def parse_generation(self, records: list[dict[str, Any]]) -> Generation:
        record = one_record(records, "generate")
        response, sent = record["response"], list(record["request"].get("input_ids") or [])
        parsed = self.parse_generate(response)
        if parsed["prompt_tokens"] != len(sent):
            raise ScoreError(f"the server generated after {parsed['prompt_tokens']} prompt tokens, {len(sent)} sent")
        outputs, tops = parsed["output_logprobs"], parsed["output_top_logprobs"]
        ids = [t["token_id"] for t in outputs]
        if response.get("output_ids") is not None and list(response["output_ids"]) != ids:
            raise ScoreError("generated token ids differ from the ids their logprobs are reported for")
        if record["request"].get("top_logprobs_num") and len(tops) != len(ids):
            raise ScoreError(f"top-k logprobs for {len(tops)} of {len(ids)} generated tokens")
        positions = tuple(_position(out, tops[i] if tops else []) for i, out in enumerate(outputs))
        texts = [t["text"] for t in outputs]
        text = parsed["text"]
        pieces = tuple(texts) if all(isinstance(t, str) for t in texts) and "".join(texts) == text else ()
        finish = parsed["finish_reason"]
        return Generation(tokens=TokenSeq(tuple(ids), text, pieces), positions=positions,
                          finish=finish if finish in ("length", "stop") else "other",
                          extra={"usage": {k: parsed[k] for k in ("prompt_tokens", "completion_tokens", "cached_tokens")}})

    async def score(self, client: LaneClient, lane: EffectiveLane, prompt: TokenSeq, continuation: TokenSeq, *,
                    top_k: int, sink: Any, tags: dict[str, Any]) -> list[Position]:
        """Teacher forcing in one /generate: prompt + continuation as ids, prompt logprobs from the prompt's
        last token (whose own entry is always null, logprob_result_processor.py:38), so each continuation
        token is scored after everything before it; one generated token gives the next-token distribution
        after the whole continuation. The prefix cache is read only up to logprob_start_len
        (managers/schedule_batch.py:1774-1775), so every continuation token is a prefill; the request's own
        cache_salt keeps the prompt before it from another request's cache too."""
        if not prompt.ids:
            raise ScoreError("nothing to score after: the prompt has no tokens")
        body = {"input_ids": list(prompt.ids) + list(continuation.ids), **_LOGPROBS,
                "logprob_start_len": len(prompt) - 1, "top_logprobs_num": top_k,
                "sampling_params": {**_GREEDY, "max_new_tokens": 1}, **self.uncached_fields()}
        record = await client.post("/generate", body, sink=sink, tags={**tags, "part": "score"})
        return self.parse_score([record], prompt, continuation)

    def parse_score(self, records: list[dict[str, Any]], prompt: TokenSeq,
                    continuation: TokenSeq) -> list[Position]:
        record = one_record(records, "score")
        request = record["request"]
        expected = list(prompt.ids) + list(continuation.ids)
        if list(request.get("input_ids") or []) != expected or request.get("logprob_start_len") != len(prompt) - 1:
            raise ScoreError("the scoring request does not hold this prompt and continuation")
        parsed = self.parse_generate(record["response"])
        inputs, input_tops = parsed["input_logprobs"], parsed["input_top_logprobs"]
        if [t["token_id"] for t in inputs] != expected[len(prompt) - 1:]:
            raise ScoreError(f"the server scored {len(inputs)} prompt positions, not the prompt's last token and "
                             f"the {len(continuation)} of the continuation")
        if request.get("top_logprobs_num") and len(input_tops) != len(inputs):
            raise ScoreError(f"top-k logprobs for {len(input_tops)} of {len(inputs)} scored positions")
        positions = [_position(entry, input_tops[t + 1] if input_tops else [], _piece(continuation, t))
                     for t, entry in enumerate(inputs[1:])]
        outputs, tops = parsed["output_logprobs"], parsed["output_top_logprobs"]
        if len(outputs) != 1:
            raise ScoreError(f"expected one next-token distribution after the continuation, got {len(outputs)}")
        positions.append(_position(outputs[0], tops[0] if tops else []))  # the engine's pick after it all
        return positions

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


def _ids(record: dict[str, Any], lane: str) -> list[int]:
    """The ids of a /tokenize reply (one prompt, or chat messages)."""
    response = record.get("response") if not record.get("error") else None
    if not isinstance(response, dict):
        raise ScoreError(f"lane {lane}: /tokenize failed: {record.get('error') or 'no reply'}: "
                         f"{str(record.get('response') or record.get('response_text'))[:300]}")
    try:
        return SGLangAdapter.parse_tokenize(response)
    except EngineError as exc:
        raise ScoreError(f"lane {lane}: {exc}") from exc


def _position(entry: dict[str, Any], top: list[dict[str, Any]] | None, text: str = "") -> Position:
    """One scored position from a logprob triple and its top-k triples (best first)."""
    alts = tuple(sorted((Alt(token=t["token_id"], text=t["text"] or "", logprob=float(t["logprob"]))
                         for t in top or [] if t["logprob"] is not None), key=lambda alt: -alt.logprob))
    logprob = entry["logprob"]
    return Position(token=entry["token_id"], text=entry["text"] or text,
                    logprob=None if logprob is None else float(logprob), top=alts)


def _piece(seq: TokenSeq, index: int) -> str:
    return seq.pieces[index] if index < len(seq.pieces) else ""
