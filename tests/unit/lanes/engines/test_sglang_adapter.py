"""The SGLang adapter's launch line, readiness and identity, against SGLang 0.5.23.

The replies replayed here are recordings of a real SGLang 0.5.23 server on this machine
(tests/data/sglang/README.md says how they were made); the readiness states that a recording cannot
show on demand (refused, 503) are the ones entrypoints/engine.py:1348-1350 and http_server.py:735-736
produce: nothing listens before the schedulers loaded the weights, then /health is a bare 503 until the
server's own warmup request passed. An httpx MockTransport replays them through the adapter's HTTP path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from campaign.contracts.resolve import EffectiveLane
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.engines.sglang import SGLangAdapter

DATA = Path(__file__).parents[3] / "data" / "sglang"


def recorded(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text())


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
    for python in ("/usr/bin/python3", "python3.11", "/c/bin/sglang-cpu-python"):
        assert adapter.server_args(lane(executable=python), "/m")[:3] == ["-m", "sglang.launch_server", "--model-path"]
    assert adapter.server_args(lane(executable="/usr/local/bin/sglang"), "/m")[:2] == ["serve", "--model-path"]
    assert adapter.server_args(lane(executable="/opt/start-sglang.sh"), "/m")[0] == "--model-path"
    assert adapter.api_key(lane(args=["--api-key", "k-123456"])) == "k-123456"
    assert adapter.served_model(lane()) == "qwen"
    assert adapter.served_model(lane(model={"path": "/m"})) == "default"


def test_launch_env_keeps_every_write_under_the_scratch_folder() -> None:
    env = SGLangAdapter().launch_env(lane(), "/tmp/s")
    paths = {k: v for k, v in env.items() if v.startswith("/")}
    assert {"TMPDIR", "HF_HOME", "TRITON_CACHE_DIR", "OUTLINES_CACHE_DIR"} <= set(paths)
    assert all(v == "/tmp/s" or v.startswith("/tmp/s/") for v in paths.values())
    assert env["HF_HUB_OFFLINE"] == "1"


def replaying(routes: dict[str, object]) -> LaneClient:
    """A LaneClient whose transport replays replies (status, body); a route may be an exception to raise."""

    def handler(request: httpx.Request) -> httpx.Response:
        reply = routes.get(request.url.path, (404, {"detail": "Not Found"}))
        if isinstance(reply, Exception):
            raise reply
        status, body = reply if isinstance(reply, tuple) else (500, "bad route")
        return httpx.Response(status, json=body) if not isinstance(body, str) else httpx.Response(status, text=body)

    client = LaneClient("http://127.0.0.1:30000", lane="s")
    client._http = httpx.AsyncClient(base_url="http://127.0.0.1:30000", transport=httpx.MockTransport(handler))
    return client


async def test_readiness_follows_sglang_semantics() -> None:
    adapter = SGLangAdapter()
    health = recorded("health")
    assert (health["status"], health["response_text"]) == (200, "")  # a bare 200, no body
    refused = replaying({"/health": httpx.ConnectError("Connection refused")})
    starting = replaying({"/health": (503, "")})
    up = replaying({"/health": (health["status"], health["response_text"])})
    assert (await adapter.probe(refused)).detail == "connection refused (loading weights)"
    result = await adapter.probe(starting)
    assert not result.ready and "503" in result.detail
    assert (await adapter.probe(up)).ready
    for client in (refused, starting, up):
        await client.aclose()


async def test_version_from_server_info_and_its_deprecated_alias() -> None:
    info = recorded("server_info")["response"]
    client = replaying({"/server_info": (200, info)})
    version = await SGLangAdapter().version(client)
    await client.aclose()
    assert version["version"] == "0.5.23" and version["frontend"] == "python"
    assert (version["device"], version["attention_backend"]) == ("cpu", "torch_native")  # no AMX here
    assert version["served_model_name"] == "smollm2" and version["enable_metrics"] is True
    assert version["chunked_prefill_size"] == 4096 and version["max_total_num_tokens"] == 680384
    assert "internal_states" not in version and "launch_command" not in version
    older = replaying({"/get_server_info": (200, info)})  # a release before /server_info: only the old name
    assert (await SGLangAdapter().version(older))["version"] == "0.5.23"
    await older.aclose()
    nothing = replaying({})
    assert await SGLangAdapter().version(nothing) == {}
    await nothing.aclose()


async def test_parser_flags_are_reported_resolved() -> None:
    """/server_info reports resolved values: `--tool-call-parser qwen25` comes back as its canonical `qwen`;
    only launch_command keeps what was asked (http_server.py:866-872)."""
    info = recorded("parsers_server_info")["response"]
    client = replaying({"/server_info": (200, info)})
    version = await SGLangAdapter().version(client)
    await client.aclose()
    assert (version["reasoning_parser"], version["tool_call_parser"], version["enable_metrics"]) == ("qwen3", "qwen",
                                                                                                    False)
    assert "--tool-call-parser qwen25" in info["launch_command"]
