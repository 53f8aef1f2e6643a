"""An OpenAI-compatible client that keeps one raw record per request, written as it completes.

Timings use ``perf_counter`` taken as late as possible before sending; streaming requests record
every event's arrival so gates can compute TTFT and decode rates from raw data later. Request
headers (which may carry an API key) are never recorded.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import httpx

from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender
from campaign.lanes.engines.sse import StreamSession

__all__ = ["LaneClient", "RawRecord"]

RawRecord = dict[str, Any]

# Servers close idle keep-alive connections after ~5 s (cpp-httplib in llama-server, uvicorn); httpx's
# default expiry is also 5 s, and at that edge a request goes out on a connection the server is closing
# ("Server disconnected without sending a response"), seen here under load. Expire ours well before.
KEEPALIVE_EXPIRY_S = 2.0


class LaneClient:
    def __init__(self, base_url: str, *, lane: str, api_key: str | None = None, timeout: float = 600.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._headers, self._timeout = headers, timeout
        self.lane = lane
        self.base_url = base_url
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers,
                                       timeout=httpx.Timeout(timeout, connect=10.0),
                                       limits=httpx.Limits(max_connections=256, max_keepalive_connections=256,
                                                           keepalive_expiry=KEEPALIVE_EXPIRY_S))
        self._streams = StreamSession()
        self._seq = itertools.count()

    async def aclose(self) -> None:
        await self._http.aclose()
        await self._streams.aclose()

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
                     tags: dict[str, Any] | None = None) -> RawRecord:
        """A streaming POST; every SSE event is kept with its arrival time (seconds after the request was
        written on an open connection; the handshake before it is ``connect_s``).

        Sent through the load path of ``sse.py`` (aiohttp; bytes kept with their arrival time, framed after
        the response ends), on a fresh connection per stream: llama-server closes the connection after
        every streamed response while advertising keep-alive."""
        body = {**body, "stream": True}
        record: RawRecord = {"seq": next(self._seq), "lane": self.lane, "path": path, "request": body,
                             "tags": tags or {}, "wall_start": time.time()}
        response = await self._streams.post(self.base_url, path, body, headers=self._headers, timeout=self._timeout)
        record["elapsed_s"] = response.elapsed_s
        if response.connect_s is not None:
            record["connect_s"], record["sent_wall"] = response.connect_s, response.sent_wall
        record["events"] = response.events
        if response.status is not None:
            record["status"] = response.status
        if response.response_text is not None:
            record["response_text"] = response.response_text
        if response.error is not None:
            record["error"] = response.error
        record["done_marker"] = response.done_marker
        if sink is not None:
            sink.append(record)
        return record
