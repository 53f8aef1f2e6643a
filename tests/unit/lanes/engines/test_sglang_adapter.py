"""The SGLang adapter against RECORDED response shapes, not a running SGLang: no GPU here, and SGLang does
not serve on this machine's CPU. The shapes below are transcribed from SGLang 0.5.x's documentation
(native API, sampling parameters, production metrics) and its source (http_server.py: /health returns 503
while the server status is Starting, 200 after a one-token generation; tokenizer_manager.py: meta_info
fields and [logprob, token_id, text] triples with a null logprob for the first prompt token). An
httpx MockTransport replays them, so the adapter's own HTTP path is exercised."""

from __future__ import annotations

import httpx
import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.sglang import METRICS, SGLangAdapter

GENERATE = {  # POST /generate {"text": "The capital of France is", return_logprob, logprob_start_len: 0}
    "text": " Paris.",
    "meta_info": {
        "id": "5f1c0e6a9b7d4c2e8f3a1b0c9d8e7f6a",
        "finish_reason": {"type": "length", "length": 2},
        "prompt_tokens": 5,
        "input_token_logprobs": [[None, 785, "The"], [-3.0625, 6722, " capital"], [-0.0713, 315, " of"],
                                 [-1.6016, 9625, " France"], [-0.2139, 374, " is"]],
        "output_token_logprobs": [[-0.1235, 12095, " Paris"], [-0.9414, 13, "."]],
        "input_top_logprobs": [None, [[-3.0625, 6722, " capital"]], [[-0.0713, 315, " of"]],
                               [[-1.6016, 9625, " France"]], [[-0.2139, 374, " is"]]],
        "output_top_logprobs": [[[-0.1235, 12095, " Paris"], [-2.498, 279, " the"]],
                                [[-0.9414, 13, "."], [-1.104, 11, ","]]],
        "completion_tokens": 2,
        "cached_tokens": 0,
        "e2e_latency": 0.0513,
    },
}
SERVER_INFO = {"model_path": "/models/Qwen2.5-0.5B-Instruct", "tokenizer_path": "/models/Qwen2.5-0.5B-Instruct",
               "host": "127.0.0.1", "port": 30000, "tp_size": 1, "dp_size": 1, "context_length": None,
               "mem_fraction_static": 0.88, "enable_metrics": True, "speculative_algorithm": None,
               "attention_backend": "flashinfer", "max_total_num_tokens": 417000, "internal_states": [{}],
               "version": "0.5.3"}
METRICS_TEXT = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.557572e+06
# HELP sglang:cache_hit_rate The cache hit rate
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.007507552643049313
sglang:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.3518979474117756e+06
sglang:time_to_first_token_seconds_bucket{le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
sglang:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 541.0
"""


def lane(**changes: object) -> EffectiveLane:
    data = {"name": "s", "role": "control", "runtime": "docker", "engine": "sglang", "image": "sha256:" + "a" * 64,
            "port": 30000, "model": {"path": "/models/q", "served_name": "qwen"}, "args": ["--enable-metrics"]}
    data.update(changes)
    return EffectiveLane.model_validate(data)


def test_registered_and_launch_arguments() -> None:
    adapter = adapter_for("sglang")
    assert isinstance(adapter, SGLangAdapter)
    assert adapter.server_args(lane(), "/models/q") == ["--model-path", "/models/q", "--host", "127.0.0.1",
                                                        "--port", "30000", "--served-model-name", "qwen",
                                                        "--enable-metrics"]
    assert adapter.server_args(lane(executable="/usr/bin/python3"), "/m")[:3] == ["-m", "sglang.launch_server",
                                                                                  "--model-path"]
    assert adapter.server_args(lane(executable="/usr/local/bin/sglang"), "/m")[:2] == ["serve", "--model-path"]
    assert adapter.api_key(lane(args=["--api-key", "k-123456"])) == "k-123456"
    assert adapter.served_model(lane()) == "qwen"


def replaying(routes: dict[str, object]) -> LaneClient:
    """A LaneClient whose transport replays recorded replies; a route may be an exception to raise."""

    def handler(request: httpx.Request) -> httpx.Response:
        reply = routes[request.url.path]
        if isinstance(reply, Exception):
            raise reply
        status, body = reply  # type: ignore[misc]
        return httpx.Response(status, json=body) if not isinstance(body, str) else httpx.Response(status, text=body)

    client = LaneClient("http://127.0.0.1:30000", lane="s")
    client._http = httpx.AsyncClient(base_url="http://127.0.0.1:30000", transport=httpx.MockTransport(handler))
    return client


async def test_readiness_follows_sglang_semantics() -> None:
    adapter = SGLangAdapter()
    refused = replaying({"/health": httpx.ConnectError("Connection refused")})
    starting = replaying({"/health": (503, "")})
    up = replaying({"/health": (200, "")})
    assert (await adapter.probe(refused)) .detail == "connection refused (loading weights)"
    result = await adapter.probe(starting)
    assert not result.ready and "503" in result.detail
    assert (await adapter.probe(up)).ready
    for client in (refused, starting, up):
        await client.aclose()


async def test_version_from_server_info() -> None:
    client = replaying({"/get_server_info": (200, SERVER_INFO)})
    version = await SGLangAdapter().version(client)
    await client.aclose()
    assert version["version"] == "0.5.3" and version["tp_size"] == 1 and version["enable_metrics"] is True
    assert "internal_states" not in version


async def test_prompt_scoring_request_and_reply() -> None:
    path, body = SGLangAdapter().score_request("The capital of France is", max_new_tokens=2, top_logprobs=2)
    assert path == "/generate" and body["return_logprob"] is True and body["logprob_start_len"] == 0
    assert body["sampling_params"] == {"temperature": 0, "max_new_tokens": 2} and body["top_logprobs_num"] == 2
    client = replaying({"/generate": (200, GENERATE)})
    record = await client.post(path, body)
    await client.aclose()
    parsed = SGLangAdapter.parse_generate(record["response"])
    assert parsed["text"] == " Paris." and parsed["finish_reason"] == "length"
    assert (parsed["prompt_tokens"], parsed["completion_tokens"], parsed["cached_tokens"]) == (5, 2, 0)
    assert parsed["input_logprobs"][0] == {"logprob": None, "token_id": 785, "text": "The"}
    assert [t["logprob"] for t in parsed["input_logprobs"][1:]] == [-3.0625, -0.0713, -1.6016, -0.2139]
    assert [t["text"] for t in parsed["output_logprobs"]] == [" Paris", "."]
    assert parsed["output_top_logprobs"][0][1] == {"logprob": -2.498, "token_id": 279, "text": " the"}
    with pytest.raises(EngineError, match="no text/meta_info"):
        SGLangAdapter.parse_generate({"error": {"message": "bad"}})
    with pytest.raises(EngineError, match="not \\[logprob, token_id, text\\]"):
        SGLangAdapter.parse_generate({"text": "", "meta_info": {"input_token_logprobs": [[-1.0]]}})


def test_tokenize_thinking_and_metrics() -> None:
    assert SGLangAdapter.tokenize_request("hi there") == ("/tokenize", {"prompt": "hi there", "add_special_tokens": False})
    assert SGLangAdapter.parse_tokenize({"tokens": [6023, 1052], "count": 2, "max_model_len": 32768}) == [6023, 1052]
    with pytest.raises(EngineError):
        SGLangAdapter.parse_tokenize({"tokens": [1], "count": 2})
    assert SGLangAdapter.thinking_fields(False) == {"chat_template_kwargs": {"enable_thinking": False}}
    values = SGLangAdapter.metric_values(METRICS_TEXT)
    assert values[METRICS["prompt_tokens"]] == 8.128902e06 and values[METRICS["cache_hit_rate"]] < 0.01
    assert values["sglang:time_to_first_token_seconds_count"] == 541.0
    assert METRICS["spec_accept_length"] not in values  # absent unless speculative decoding runs
