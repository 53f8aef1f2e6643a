"""SGLang 0.5.23's own replies, recorded from a running server here, through the adapter's parsers.

tests/data/sglang/ holds the recordings (README.md there: the commands, the server flags, how the CPU
kernels were left out). Which code of the release builds each shape, under python/sglang/srt/:
- /generate meta_info: managers/tokenizer_manager.py:2507-2558 (ids, counts, finish_reason from
  managers/schedule_batch.py:320-329), logprob triples tokenizer_manager.py:3098-3135, the null first prompt
  position managers/scheduler_components/logprob_result_processor.py:38 and 66.
- /tokenize: entrypoints/openai/serving_tokenize.py:39-81 (TokenizeResponse, protocol.py:1796-1801).
- chat completions: entrypoints/openai/serving_chat.py:2930-3010 (reasoning split, tool calls 3150-3276),
  ChatMessage/ToolCall in entrypoints/openai/protocol.py:732-745, 1293-1297.
- /metrics: observability/metrics_collector.py (names and types at the lines in campaign/lanes/engines/
  sglang.py) exposed by prometheus_client's multiprocess collector (utils/common.py:2843-2853).
Facts that no recording here can show (speculative decoding needs a draft model) are tested on the
counters that code defines, and say so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from campaign.errors import EngineError
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.prometheus import counter_deltas, parse_prometheus
from campaign.lanes.engines.sglang import METRIC_TYPES, METRICS, SGLangAdapter
from tests.support.sglang import sglang_lane, sglang_recorded, sglang_replaying

DATA = Path(__file__).parents[3] / "data" / "sglang"


def reply(name: str) -> dict[str, Any]:
    record = sglang_recorded(name)
    assert record["status"] == 200, record
    return record["response"]


def test_teacher_forcing_reply_scores_every_prompt_token_but_the_first() -> None:
    request = sglang_recorded("generate_score")["request"]
    path, body = SGLangAdapter().score_request("The capital of France is", max_new_tokens=4, top_logprobs=2)
    assert (path, body) == ("/generate", request)  # the adapter's own request is the one recorded
    parsed = SGLangAdapter.parse_generate(reply("generate_score"))
    assert parsed["text"] == " Paris.\n\n" and parsed["finish_reason"] == "length"
    assert (parsed["prompt_tokens"], parsed["completion_tokens"], parsed["cached_tokens"]) == (5, 4, 0)
    assert [t["token_id"] for t in parsed["input_logprobs"]] == reply("tokenize_prompt")["tokens"]
    assert parsed["input_logprobs"][0] == {"logprob": None, "token_id": 504, "text": "The"}
    assert all(t["logprob"] < 0 for t in parsed["input_logprobs"][1:])
    assert [t["text"] for t in parsed["output_logprobs"]] == [" Paris", ".", "\n", "\n"]
    # top-k: None at the unscored first prompt position, then k entries best first
    assert parsed["input_top_logprobs"][0] is None and len(parsed["input_top_logprobs"]) == 5
    assert parsed["input_top_logprobs"][2][0] == parsed["input_logprobs"][2]  # " of" was the model's first pick
    top = parsed["output_top_logprobs"]
    assert len(top) == 4 and all(len(pos) == 2 and pos[0]["logprob"] >= pos[1]["logprob"] for pos in top)
    assert [pos[0] for pos in top] == parsed["output_logprobs"]  # greedy: the generated token is the top-1


def test_logprob_texts_and_the_prefix_cache() -> None:
    scored, plain = SGLangAdapter.parse_generate(reply("generate_score")), SGLangAdapter.parse_generate(
        reply("generate_no_text"))
    # without return_text_in_logprobs the triples carry null text, same numbers
    assert all(t["text"] is None for t in plain["input_logprobs"] + plain["output_logprobs"])
    assert [t["logprob"] for t in plain["input_logprobs"]] == [t["logprob"] for t in scored["input_logprobs"]]
    # logprob_start_len 0 read nothing from the prefix cache although the same prompt was just served
    assert plain["cached_tokens"] == 0
    # the default logprob_start_len (-1): no prompt positions at all, and the cached prefix is used
    default = SGLangAdapter.parse_generate(reply("generate_default_start"))
    assert default["input_logprobs"] == [] and default["input_top_logprobs"] == []
    assert default["cached_tokens"] == 4 and len(default["output_logprobs"]) == 2
    assert SGLangAdapter.parse_generate(reply("generate_plain"))["input_logprobs"] == []  # no return_logprob


def test_generate_shapes_that_are_not_this_release_are_refused() -> None:
    good = reply("generate_score")
    shifted = json.loads(json.dumps(good))
    shifted["meta_info"]["input_token_logprobs"][0][0] = -1.5
    with pytest.raises(EngineError, match="input_token_logprobs\\[0\\] has a logprob"):
        SGLangAdapter.parse_generate(shifted)
    with pytest.raises(EngineError, match="no text/meta_info"):
        SGLangAdapter.parse_generate({"error": {"message": "bad"}})
    with pytest.raises(EngineError, match="not \\[logprob, token_id, text\\]"):
        SGLangAdapter.parse_generate({"text": "", "meta_info": {"output_token_logprobs": [[-1.0, 5]]}})


async def test_tokenize_and_chat_token_count_agree_with_the_chat_usage() -> None:
    assert SGLangAdapter.tokenize_request("The capital of France is") == ("/tokenize", sglang_recorded("tokenize_prompt")["request"])
    assert SGLangAdapter.parse_tokenize(reply("tokenize_prompt")) == [504, 3575, 282, 4649, 314]
    with pytest.raises(EngineError):
        SGLangAdapter.parse_tokenize({"tokens": [1], "count": 2, "max_model_len": 8192})
    client = sglang_replaying({"/tokenize": (200, reply("tokenize_messages"))})
    count = await SGLangAdapter().count_chat_tokens(client, sglang_lane(), [{"role": "user", "content": "What is 2+2?"}])
    await client.aclose()
    assert count == reply("chat")["usage"]["prompt_tokens"] == 37


def test_chat_reasoning_split_and_the_thinking_switch() -> None:
    plain = SGLangAdapter.parse_chat_message(reply("chat"))  # no --reasoning-parser
    assert plain["content"] == "The answer to this classic math problem is 4." and plain["reasoning"] is None
    assert (plain["finish_reason"], plain["matched_stop"]) == ("stop", 2)
    # --reasoning-parser qwen3 on a template without a thinking block: the whole answer is "reasoning"...
    parsed = SGLangAdapter.parse_chat_message(reply("parsers_chat"))
    assert parsed["content"] == "" and parsed["reasoning"] == plain["content"]
    # ...until enable_thinking: false, which the template ignores (same text) and only the parser reads
    nothink = sglang_recorded("parsers_chat_nothink")
    assert nothink["request"]["chat_template_kwargs"] == SGLangAdapter.thinking_fields(False)["chat_template_kwargs"]
    off = SGLangAdapter.parse_chat_message(nothink["response"])
    assert off["content"] == plain["content"] and off["reasoning"] is None


def test_tool_calls_with_and_without_a_parser() -> None:
    # no --tool-call-parser: tool_choice "required" constrains the output, the calls stay in the content
    raw = SGLangAdapter.parse_chat_message(reply("chat_tools_required"))
    assert raw["tool_calls"] == [] and json.loads(raw["content"])[0]["name"] == "get_weather"
    # --tool-call-parser qwen25: message.tool_calls, arguments a JSON string (here not even an object)
    parsed = SGLangAdapter.parse_chat_message(reply("parsers_chat_tools_required_long"))
    assert [(c["name"], c["arguments"]) for c in parsed["tool_calls"]] == [("get_weather", '"Paris"')]
    assert parsed["tool_calls"][0]["id"].startswith("call_") and parsed["content"] == ""
    assert parsed["finish_reason"] == "length"  # finish "tool_calls" only replaces "stop" (serving_chat.py:3210)
    auto = SGLangAdapter.parse_chat_message(reply("parsers_chat_tools_auto"))
    assert auto["tool_calls"] == [] and auto["content"].startswith("Paris")
    with pytest.raises(EngineError, match="not \\{function"):
        SGLangAdapter.parse_chat_message({"choices": [{"message": {"tool_calls": [{"function": {"arguments": {}}}]}}]})


def test_metric_names_and_types_are_the_recorded_ones() -> None:
    text = (DATA / "metrics_after.prom").read_text()
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for name, kind in METRIC_TYPES.items():
        if name in (METRICS["aborted_requests"], METRICS["spec_verify_calls"]):
            # never incremented here (no abort, no speculation): multiprocess mode exports no TYPE for them;
            # their types are the Counter(...) declarations at metrics_collector.py:1866, 1960
            assert name not in declared
        else:
            assert declared[name] == kind, name
    # the speculative gauges are exported, at 0, even with speculation off: present is not "speculating"
    assert parse_prometheus(text)[
        'sglang:spec_accept_length{engine_type="unified",model_name="smollm2",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
    ] == 0.0


def test_metric_summary_matches_the_requests_recorded_in_between() -> None:
    """metrics_before.prom was scraped after the server's warmup; metrics_after.prom after the six
    generations recorded here (generate_score, generate_no_text, generate_default_start, generate_plain,
    chat, chat_template_kwargs); health checks are not counted (http_server.py:756-760 log_metrics=False)."""
    before = parse_prometheus((DATA / "metrics_before.prom").read_text())
    after = parse_prometheus((DATA / "metrics_after.prom").read_text())
    names = ("generate_score", "generate_no_text", "generate_default_start", "generate_plain")
    metas = [reply(n)["meta_info"] for n in names]
    chats = [reply(n)["usage"] for n in ("chat", "chat_template_kwargs")]
    summary = SGLangAdapter().metric_summary(counter_deltas(before, after))
    assert summary == {
        "requests": 6.0,
        "prompt_tokens": sum(m["prompt_tokens"] for m in metas) + sum(u["prompt_tokens"] for u in chats),
        "generated_tokens": sum(m["completion_tokens"] for m in metas) + sum(u["completion_tokens"] for u in chats),
        "cached_prompt_tokens": 40.0,  # 4 (generate_default_start) + 36 (the second chat: its prompt less one)
    }
    assert metas[2]["cached_tokens"] == 4 and chats[1]["prompt_tokens"] - 1 == 36
    assert not SGLangAdapter().metrics_busy(after)
    busy = {k: (1.0 if k.startswith(METRICS["running_requests"] + "{") else v) for k, v in after.items()}
    assert SGLangAdapter().metrics_busy(busy)


def test_speculative_counters_as_the_code_defines_them() -> None:
    """No draft model here, so no recording: SGLang counts verify passes (spec_verify_calls_total,
    metrics_collector.py:2111-2112) and no accepted tokens; its accept length is completion tokens per
    verify pass (tokenizer_manager.py:3166). The summary's acceptance length must equal that."""
    deltas = {'sglang:generation_tokens_total{is_streaming="false",model_name="m"}': 250.0,
              'sglang:spec_verify_calls_total{model_name="m"}': 100.0,
              'sglang:prompt_tokens_total{is_streaming="false",model_name="m"}': 40.0}
    summary = SGLangAdapter().metric_summary(deltas)
    assert (summary["spec_drafts"], summary["spec_accepted_tokens"]) == (100.0, 150.0)
    assert 1 + summary["spec_accepted_tokens"] / summary["spec_drafts"] == 250.0 / 100.0
    assert summary["cached_prompt_tokens"] == 0.0  # prompts counted, no hit series: zero hits
    assert "spec_drafts" not in SGLangAdapter().metric_summary({k: v for k, v in deltas.items() if "spec" not in k})


async def test_metrics_route_absent_without_enable_metrics() -> None:
    disabled = sglang_recorded("metrics_disabled")
    assert (disabled["status"], disabled["response"]) == (404, {"detail": "Not Found"})
    off = sglang_replaying({})  # every path 404 {"detail": "Not Found"}, as sglang_recorded
    assert await SGLangAdapter().scrape_metrics(off) is None
    await off.aclose()
    on = sglang_replaying({"/metrics": (200, (DATA / "metrics_after.prom").read_text())})
    assert "sglang:num_requests_total" in (await SGLangAdapter().scrape_metrics(on) or "")
    await on.aclose()
    broken = LaneClient("http://127.0.0.1:30000", lane="s")
    broken._http = httpx.AsyncClient(base_url="http://127.0.0.1:30000",
                                     transport=httpx.MockTransport(lambda r: httpx.Response(500, text="boom")))
    with pytest.raises(EngineError, match="500"):
        await SGLangAdapter().scrape_metrics(broken)
    await broken.aclose()
