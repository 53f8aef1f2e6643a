"""The load path of streamed requests: aiohttp (its C HTTP parser), each socket read kept with its arrival.

The hot path does one thing per read: it keeps the bytes with the time they were taken. The SSE events and
their JSON (orjson) are read after the response has ended, each event stamped with the read that completed
its line, so no decode, dict or line split competes with the timing of other streams. Measured in one run by
``benchmarks/client_capacity.py`` (docs/speed.md, "The speed client") against the hand-written HTTP/1.1 client this
replaced, a plain aiohttp client and a raw socket.

Times count from the request's write on an open connection (aiohttp's ``on_request_chunk_sent`` hook fires
as the body goes out), so the handshake (slow under load, when the server is busy streaming to others and
accepts late) is never inside a TTFT: it is recorded beside it (``connect_s``). A fresh connection per stream
(``force_close``): llama-server closes a streamed response's connection while advertising keep-alive, so a
pooled connection would be reused just as the server closes it. ``HTTP(S)_PROXY`` and ``NO_PROXY`` apply, as
they do to httpx, which stays for everything else (health, metrics, scoring).
"""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp
import orjson

from campaign.fsutil import jsonl_line

__all__ = ["StreamSession", "StreamedResponse", "post_stream"]

_MAX_ERROR_BODY = 4000
# A speed gate's reply of 32k tokens streams about 13 MB; past this the server is not sending a reply.
MAX_STREAM_BYTES = 128 << 20


@dataclass
class StreamedResponse:
    """What came back: the status, the SSE data payloads with their arrival times (seconds after the
    request was written), whether ``[DONE]`` came, and an error when the response was not whole."""

    status: int | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    done_marker: bool = False
    error: str | None = None
    response_text: str | None = None
    elapsed_s: float = 0.0  # to the last byte received (framing it afterwards is not the server's time), or
    # to the connect error or timeout
    connect_s: float | None = None  # the handshake before the request was written (outside every time above)
    sent_wall: float | None = None  # the wall clock when the request was written: the events' zero


async def _on_body_sent(_session: object, context: SimpleNamespace, _params: object) -> None:
    sent = context.trace_request_ctx
    if sent is not None:  # the last body chunk's moment, when a body goes out in several
        sent.perf, sent.wall = time.perf_counter(), time.time()


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """Built once: loading the CA bundle takes ~20 ms, which would sit inside every https stream's TTFT.
    The same CAs httpx trusts (certifi, or SSL_CERT_FILE / SSL_CERT_DIR when set)."""
    import certifi

    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if cafile or capath:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    return ssl.create_default_context(cafile=certifi.where())


class _ArrivalStamped(aiohttp.ClientResponse):
    """aiohttp's response with each socket read of its connection stamped on arrival, before the parser
    sees it, as ``marks``: (arrival, payload bytes fed so far). A read's stamp taken where the reading task
    resumes is late by whatever else the loop runs first: with 64 streams ending in one turn of the loop,
    the last token of each read up to 18 ms late, -6% on the decode rate."""

    marks: list[tuple[float, int]]

    async def start(self, connection: aiohttp.connector.Connection) -> aiohttp.ClientResponse:
        self.marks = []
        before_head: list[float] = []  # reads that arrived before the head was parsed
        protocol = connection.protocol
        if protocol is not None:
            parse = protocol.data_received

            def stamped(data: bytes) -> None:
                arrived = time.perf_counter()
                parse(data)
                content: aiohttp.StreamReader | None = self.content  # None (the class's) until start() sets it
                if content is None:
                    before_head.append(arrived)
                else:
                    self.marks.append((arrived, content.total_bytes))

            protocol.data_received = stamped  # type: ignore[method-assign]  # the transport looks it up per read
        started = await super().start(connection)
        if before_head:  # the body's first bytes came with the head: never stamped before the head's last read
            self.marks.insert(0, (before_head[-1], self.content.total_bytes))
        return started


def _target(url: str, path: str) -> tuple[str, bool]:
    """The request's URL, the base URL's path prefix kept and its credentials never sent."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    netloc = (host if ":" not in host else f"[{host}]") + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + path, "", "")), parts.scheme == "https"


class StreamSession:
    """The aiohttp session streams go through, made on first use in the running loop (a session belongs
    to its loop; a client used from another loop gets a new one)."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxies: dict[tuple[str, str], str | None] = {}

    def _proxy(self, url: str) -> str | None:
        """The proxy the environment names for this URL's host, looked up once: aiohttp's own lookup
        (``trust_env``) runs on a thread for every request, a thread hop inside every stream's setup."""
        parts = urlsplit(url)
        key = (parts.scheme, parts.hostname or "")
        if key not in self._proxies:
            self._proxies[key] = None if proxy_bypass(key[1]) else getproxies().get(parts.scheme)
        return self._proxies[key]

    def _current(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            if self._session is not None and not self._session.closed:
                self._session.detach()  # its loop is gone; with force_close it holds no connection
            trace = aiohttp.TraceConfig()
            trace.on_request_chunk_sent.append(_on_body_sent)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True),
                auto_decompress=False, trace_configs=[trace], response_class=_ArrivalStamped)
            self._loop = loop
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            if self._loop is asyncio.get_running_loop():
                await session.close()
            else:
                session.detach()

    async def post(self, url: str, path: str, body: dict[str, Any], *, headers: dict[str, str], timeout: float,
                   connect_timeout: float = 10.0) -> StreamedResponse:
        """POST ``body`` and read the whole streamed response. ``timeout`` is the longest silence tolerated
        (as httpx's read timeout); failures come back in ``error``, never raised (a gate decides)."""
        target, tls = _target(url, path)
        payload = jsonl_line(body)[:-1]  # orjson, the stdlib where orjson refuses (an integer past 64 bits)
        sent = SimpleNamespace(perf=None, wall=None)
        reads: list[bytes] = []
        marks: list[tuple[float, int]] = []
        called = time.perf_counter()
        response = StreamedResponse()
        chunked = False
        try:
            async with self._current().post(
                    target, data=payload, headers={
                        "Content-Type": "application/json", "Accept": "text/event-stream",
                        "Accept-Encoding": "identity", **headers},
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=timeout),
                    ssl=_tls_context() if tls else True, proxy=self._proxy(url), trace_request_ctx=sent) as reply:
                response.status = reply.status
                chunked = "chunked" in reply.headers.get("Transfer-Encoding", "").lower()
                marks = reply.marks if isinstance(reply, _ArrivalStamped) else []
                content, size = reply.content, 0
                while data := await content.readany():
                    reads.append(data)
                    size += len(data)
                    if not marks:  # no protocol to stamp (not seen with aiohttp 3.14): stamped here, later
                        marks.append((time.perf_counter(), size))
                    if size > MAX_STREAM_BYTES:
                        response.error = f"ResponseTooLarge: over {MAX_STREAM_BYTES:,} bytes"
                        break
        except aiohttp.ConnectionTimeoutError:
            response.error = f"ConnectError: no connection within {connect_timeout:g}s"
        except aiohttp.ClientConnectorError as exc:
            response.error = f"ConnectError: {exc}"
        except (aiohttp.ServerTimeoutError, asyncio.TimeoutError):
            response.error = f"ReadTimeout: nothing received for {timeout:g}s"
        except aiohttp.ClientPayloadError:
            response.error = ("RemoteProtocolError: peer closed connection without sending complete message body"
                              + (" (incomplete chunked read)" if chunked else ""))
        except aiohttp.ServerDisconnectedError:
            response.error = "RemoteProtocolError: Server disconnected without sending a response"
        except aiohttp.ClientResponseError as exc:  # the C parser refused the status line or the head
            response.error = f"RemoteProtocolError: malformed response ({_one_line(exc.message)})"
        except (aiohttp.ClientError, OSError) as exc:
            response.error = f"RemoteProtocolError: {type(exc).__name__}: {_one_line(exc)}"
        zero = sent.perf if sent.perf is not None else called
        if sent.perf is not None:
            response.connect_s, response.sent_wall = sent.perf - called, sent.wall
        response.elapsed_s = (marks[-1][0] if marks and response.error is None else time.perf_counter()) - zero
        _frame(response, b"".join(reads), [(t - zero, fed) for t, fed in marks])
        return response


async def post_stream(url: str, path: str, body: dict[str, Any], *, headers: dict[str, str], timeout: float,
                      connect_timeout: float = 10.0, session: StreamSession | None = None) -> StreamedResponse:
    """One streamed POST (``StreamSession.post``), through ``session`` or a session of its own."""
    if session is not None:
        return await session.post(url, path, body, headers=headers, timeout=timeout, connect_timeout=connect_timeout)
    own = StreamSession()
    try:
        return await own.post(url, path, body, headers=headers, timeout=timeout, connect_timeout=connect_timeout)
    finally:
        await own.aclose()


def _one_line(what: object) -> str:
    return " ".join(str(what).split())[:200]


def _frame(response: StreamedResponse, body: bytes, marks: list[tuple[float, int]]) -> None:
    """Each ``data:`` line of the body becomes an event stamped with the arrival of the read that brought
    its newline (``marks``: each read's arrival and the body's bytes fed once it was parsed); an error status
    keeps its body's text instead."""
    if response.status is not None and response.status >= 400:
        response.response_text = body[:4 * _MAX_ERROR_BODY].decode(errors="replace")[:_MAX_ERROR_BODY]
        response.error = f"HTTP {response.status}"
        return
    if not marks:
        return  # nothing was read
    ends = [fed for _, fed in marks]
    last = len(marks) - 1
    events, position = response.events, 0
    while (newline := body.find(b"\n", position)) >= 0:
        line = body[position:newline].rstrip(b"\r")
        position = newline + 1
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            response.done_marker = True
            continue
        arrived = marks[min(bisect_right(ends, newline), last)][0]  # the first read whose bytes end past it
        try:
            events.append({"t": arrived, "data": orjson.loads(payload)})
        except orjson.JSONDecodeError:
            events.append({"t": arrived, "raw": payload[:2000].decode(errors="replace")})
