"""SGLang 0.5.23 replies recorded on this machine (tests/data/sglang/README.md), a docker lane of it, and a client that
replays them through the adapter's HTTP path (an httpx MockTransport), for the SGLang adapter's unit tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from campaign.contracts.resolve import EffectiveLane
from campaign.lanes.engines.client import LaneClient

__all__ = ["SGLANG_DATA", "sglang_lane", "sglang_recorded", "sglang_replaying"]

SGLANG_DATA = Path(__file__).parents[1] / "data" / "sglang"


def sglang_recorded(name: str) -> dict[str, Any]:
    return json.loads((SGLANG_DATA / f"{name}.json").read_text())


def sglang_lane(**changes: object) -> EffectiveLane:
    data = {"name": "s", "role": "control", "runtime": "docker", "engine": "sglang", "image": "sha256:" + "a" * 64,
            "port": 30000, "model": {"path": "/models/q", "served_name": "qwen"}, "args": ["--enable-metrics"]}
    data.update(changes)
    return EffectiveLane.model_validate(data)


def sglang_replaying(routes: dict[str, object]) -> LaneClient:
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
