"""An OpenAI-compatible client that keeps one raw record per request, written as it completes.

Timings use ``perf_counter`` taken as late as possible before sending; streaming requests record
every event's arrival so gates can compute TTFT and decode rates from raw data later. Request
headers (which may carry an API key) are never recorded.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import httpx

from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender

__all__ = ["LaneClient", "RawRecord"]

RawRecord = dict[str, Any]

# Servers close idle keep-alive connections after ~5 s (cpp-httplib in llama-server, uvicorn); httpx's
# default expiry is also 5 s, and at that edge a request goes out on a connection the server is closing
# ("Server disconnected without sending a response"), seen here under load. Expire ours well before.
KEEPALIVE_EXPIRY_S = 2.0


class LaneClient:
    def __init__(self, base_url: str, *, lane: str, api_key: str | None = None, timeout: float = 600.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.lane = lane
        self.base_url = base_url
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers,
                                       timeout=httpx.Timeout(timeout, connect=10.0),
                                       limits=httpx.Limits(max_connections=256, max_keepalive_connections=256,
                                                           keepalive_expiry=KEEPALIVE_EXPIRY_S))
        self._seq = itertools.count()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "LaneClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def get_json(self, path: str) -> Any:
        try:
            response = await self._http.get(path)
            response.raise_for_status()
            return response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise EngineError(f"lane {self.lane}: GET {path} failed: {exc}") from exc

    async def get_text(self, path: str, *, timeout: float | None = None) -> tuple[int, str]:
        try:
            response = await self._http.get(path, timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            raise EngineError(f"lane {self.lane}: GET {path} failed: {exc}") from exc
        return response.status_code, response.text

    async def post(self, path: str, body: dict[str, Any], *, sink: JsonlAppender | None = None,
                   tags: dict[str, Any] | None = None) -> RawRecord:
        """POST and return the raw record; failures are recorded, not raised (a gate decides)."""
        record: RawRecord = {"seq": next(self._seq), "lane": self.lane, "path": path, "request": body,
                             "tags": tags or {}, "wall_start": time.time()}
        start = time.perf_counter()
        try:
            response = await self._http.post(path, json=body)
            record["elapsed_s"] = time.perf_counter() - start
            record["status"] = response.status_code
            try:
                record["response"] = response.json()
            except ValueError:
                record["response_text"] = response.text[:4000]
                record["error"] = "response is not JSON"
            if response.status_code >= 400:
                record["error"] = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            record["elapsed_s"] = time.perf_counter() - start
            record["error"] = f"{type(exc).__name__}: {exc}"
        if sink is not None:
            sink.append(record)
        return record

    async def stream(self, path: str, body: dict[str, Any], *, sink: JsonlAppender | None = None,
                     tags: dict[str, Any] | None = None, new_connection: bool = True) -> RawRecord:
        """A streaming POST; every SSE event is kept with its arrival time (seconds after sending).

        ``new_connection``: llama-server closes the connection after every streamed response while
        advertising keep-alive (seen on this build with a raw socket), so a request sent right after a
        stream on the pooled connection fails with "Server disconnected without sending a response".
        A fresh connection per stream costs one local TCP handshake inside the TTFT, the same on
        every lane; an engine known to keep streamed connections may pass False."""
        body = {**body, "stream": True}
        headers = {"Connection": "close"} if new_connection else None
        record: RawRecord = {"seq": next(self._seq), "lane": self.lane, "path": path, "request": body,
                             "tags": tags or {}, "wall_start": time.time(), "events": []}
        events: list[dict[str, Any]] = record["events"]
        done = False
        start = time.perf_counter()
        try:
            async with self._http.stream("POST", path, json=body, headers=headers) as response:
                record["status"] = response.status_code
                if response.status_code >= 400:
                    record["response_text"] = (await response.aread()).decode(errors="replace")[:4000]
                    record["error"] = f"HTTP {response.status_code}"
                else:
                    async for line in response.aiter_lines():
                        now = time.perf_counter() - start
                        if not line.startswith("data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == "[DONE]":
                            done = True
                            continue
                        try:
                            events.append({"t": now, "data": json.loads(payload)})
                        except ValueError:
                            events.append({"t": now, "raw": payload[:2000]})
        except httpx.HTTPError as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"
        record["elapsed_s"] = time.perf_counter() - start
        record["done_marker"] = done
        if sink is not None:
            sink.append(record)
        return record
