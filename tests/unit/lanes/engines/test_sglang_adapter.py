"""The SGLang adapter's launch line, readiness and identity, against SGLang 0.5.23.

The replies replayed here are recordings of a real SGLang 0.5.23 server on this machine
(tests/data/sglang/README.md says how they were made); the readiness states that a recording cannot
show on demand (refused, 503) are the ones entrypoints/engine.py:1348-1350 and http_server.py:735-736
produce: nothing listens before the schedulers loaded the weights, then /health is a bare 503 until the
server's own warmup request passed. An httpx MockTransport replays them through the adapter's HTTP path.
"""

from __future__ import annotations

import httpx

from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.engines.sglang import SGLangAdapter
from tests.support.sglang import sglang_lane, sglang_recorded, sglang_replaying


def test_registered_and_launch_arguments() -> None:
    adapter = adapter_for("sglang")
    assert isinstance(adapter, SGLangAdapter)
    assert adapter.server_args(sglang_lane(), "/models/q") == ["--model-path", "/models/q", "--host", "127.0.0.1",
                                                        "--port", "30000", "--served-model-name", "qwen",
                                                        "--enable-metrics"]
    for python in ("/usr/bin/python3", "python3.11", "/c/bin/sglang-cpu-python"):
        assert adapter.server_args(sglang_lane(executable=python), "/m")[:3] == ["-m", "sglang.launch_server", "--model-path"]
    assert adapter.server_args(sglang_lane(executable="/usr/local/bin/sglang"), "/m")[:2] == ["serve", "--model-path"]
    assert adapter.server_args(sglang_lane(executable="/opt/start-sglang.sh"), "/m")[0] == "--model-path"
    assert adapter.api_key(sglang_lane(args=["--api-key", "k-123456"])) == "k-123456"
    assert adapter.served_model(sglang_lane()) == "qwen"
    assert adapter.served_model(sglang_lane(model={"path": "/m"})) == "default"


def test_launch_env_keeps_every_write_under_the_scratch_folder() -> None:
    env = SGLangAdapter().launch_env(sglang_lane(), "/tmp/s")
    paths = {k: v for k, v in env.items() if v.startswith("/")}
    assert {"TMPDIR", "HF_HOME", "TRITON_CACHE_DIR", "OUTLINES_CACHE_DIR"} <= set(paths)
    assert all(v == "/tmp/s" or v.startswith("/tmp/s/") for v in paths.values())
    assert env["HF_HUB_OFFLINE"] == "1"


async def test_readiness_follows_sglang_semantics() -> None:
    adapter = SGLangAdapter()
    health = sglang_recorded("health")
    assert (health["status"], health["response_text"]) == (200, "")  # a bare 200, no body
    refused = sglang_replaying({"/health": httpx.ConnectError("Connection refused")})
    starting = sglang_replaying({"/health": (503, "")})
    up = sglang_replaying({"/health": (health["status"], health["response_text"])})
    assert (await adapter.probe(refused)).detail == "connection refused (loading weights)"
    result = await adapter.probe(starting)
    assert not result.ready and "503" in result.detail
    assert (await adapter.probe(up)).ready
    for client in (refused, starting, up):
        await client.aclose()


async def test_version_from_server_info_and_its_deprecated_alias() -> None:
    info = sglang_recorded("server_info")["response"]
    client = sglang_replaying({"/server_info": (200, info)})
    version = await SGLangAdapter().version(client)
    await client.aclose()
    assert version["version"] == "0.5.23" and version["frontend"] == "python"
    assert (version["device"], version["attention_backend"]) == ("cpu", "torch_native")  # no AMX here
    assert version["served_model_name"] == "smollm2" and version["enable_metrics"] is True
    assert version["chunked_prefill_size"] == 4096 and version["max_total_num_tokens"] == 680384
    assert "internal_states" not in version and "launch_command" not in version
    older = sglang_replaying({"/get_server_info": (200, info)})  # a release before /server_info: only the old name
    assert (await SGLangAdapter().version(older))["version"] == "0.5.23"
    await older.aclose()
    nothing = sglang_replaying({})
    assert await SGLangAdapter().version(nothing) == {}
    await nothing.aclose()


async def test_parser_flags_are_reported_resolved() -> None:
    """/server_info reports resolved values: `--tool-call-parser qwen25` comes back as its canonical `qwen`;
    only launch_command keeps what was asked (http_server.py:866-872)."""
    info = sglang_recorded("parsers_server_info")["response"]
    client = sglang_replaying({"/server_info": (200, info)})
    version = await SGLangAdapter().version(client)
    await client.aclose()
    assert (version["reasoning_parser"], version["tool_call_parser"], version["enable_metrics"]) == ("qwen3", "qwen",
                                                                                                    False)
    assert "--tool-call-parser qwen25" in info["launch_command"]
