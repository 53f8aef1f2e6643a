"""The speed gate's hand-written HTTP/1.1 client before #35, kept only as the "before" of
``client_capacity.py``: one POST per connection on asyncio's protocol layer, each socket read kept with its
arrival time, the chunked framing walked as reads arrive and again after the end, the SSE events read after
the response ended. The gate now streams through aiohttp (``campaign/lanes/engines/sse.py``) with the same
read-stamping design; this file is the code it replaced, unchanged but for this docstring, ``__all__`` and
the response class and TLS context it now shares with the gate's module.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from bisect import bisect_right
from typing import Any
from urllib.parse import urlsplit

import orjson

from campaign.fsutil import jsonl_line
from campaign.lanes.engines.sse import StreamedResponse, _tls_context

__all__ = ["post_stream"]

_MAX_ERROR_BODY = 4000


class _Reads(asyncio.Protocol):
    """Keeps every read with its arrival time. Besides that, only what tells the end of the response: its
    framing, learnt once from the head, then a length count or a walk over the chunk-size lines, so a
    server that keeps the connection open despite ``Connection: close`` still ends the stream."""

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.times: list[float] = []
        self.chunks: list[bytes] = []
        self.done = done
        self.lost: Exception | None = None
        self._framing: str | None = None  # "chunked", "length", "close" or "broken-chunked", from the head on
        self.body_begin = -1  # offset of the body in the joined reads, once the head has arrived
        self.pieces: list[tuple[int, int]] = []  # the chunks' data, (start, end) in the body's bytes
        self.chunks_whole = False  # the zero-size chunk and its trailers arrived
        self._remaining = 0  # bytes of a content-length body still to come
        self._buffer = bytearray()  # the chunked body so far: the walk needs it contiguous
        self._position = 0  # where the walk over the chunked body stands
        self._skip = 0  # bytes of chunk data (and its CRLF) still to pass over

    def data_received(self, data: bytes) -> None:
        self.times.append(time.perf_counter())
        self.chunks.append(data)
        if self._framing == "chunked":
            self._buffer += data
            self._walk_chunks()
        elif self._framing == "length":
            self._remaining -= len(data)
            if self._remaining <= 0:
                self._finish()
        elif self._framing is None:
            self._learn_framing()

    def _learn_framing(self) -> None:
        raw = b"".join(self.chunks)
        head_end = raw.find(b"\r\n\r\n")
        if head_end < 0:
            return
        fields = _fields(raw[:head_end])
        self.body_begin = head_end + 4
        if "chunked" in fields.get("transfer-encoding", ""):
            self._framing = "chunked"
            self._buffer += raw[head_end + 4:]
            self._walk_chunks()
        elif fields.get("content-length", "").isdigit():
            self._framing, self._remaining = "length", int(fields["content-length"]) - (len(raw) - head_end - 4)
            if self._remaining <= 0:
                self._finish()
        else:
            self._framing = "close"

    def _walk_chunks(self) -> None:
        """Note each chunk's data as its size line arrives and skip over it; the response ends at the
        zero-size chunk and its trailers. The only chunk parser: ``_read`` frames the body from ``pieces``."""
        buffer, position = self._buffer, self._position
        while True:
            if self._skip:
                taken = min(self._skip, len(buffer) - position)
                position += taken
                self._skip -= taken
                if self._skip:
                    break
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                break
            try:
                size = int(bytes(buffer[position:line_end]).split(b";", 1)[0], 16)
            except ValueError:  # a bad size line: the body is not whole, and the close will end it
                self._framing = "broken-chunked"
                return
            if size == 0:  # the last chunk: trailer lines (usually none), then an empty line
                if buffer.find(b"\r\n\r\n", line_end) >= 0:
                    self.chunks_whole = True
                    self._finish()
                break
            self.pieces.append((line_end + 2, line_end + 2 + size))
            position, self._skip = line_end + 2, size + 2
        self._position = position

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def eof_received(self) -> bool:
        return False  # close our side too: the response ends with the connection

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc
        self._finish()


def _fields(head: bytes) -> dict[str, str]:
    fields = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return fields


def _request_bytes(url: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[bytes, Any]:
    parts = urlsplit(url)
    target = (parts.path.rstrip("/") + path) or "/"
    payload = jsonl_line(body)[:-1]  # orjson, the stdlib where orjson refuses (an integer past 64 bits)
    host = parts.hostname or "localhost"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    authority = host if ":" not in host else f"[{host}]"
    lines = [f"POST {target} HTTP/1.1", f"Host: {authority}{f':{parts.port}' if parts.port else ''}",
             "Content-Type: application/json", f"Content-Length: {len(payload)}", "Accept: text/event-stream",
             "Accept-Encoding: identity", "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload, (host, port, parts.scheme == "https")


async def post_stream(url: str, path: str, body: dict[str, Any], *, headers: dict[str, str], timeout: float,
                      connect_timeout: float = 10.0) -> StreamedResponse:
    """POST ``body`` and read the whole streamed response. The events' times count from the moment the
    request is written on an open connection; the handshake before it is ``connect_s``. ``timeout`` is the
    longest silence tolerated (as httpx's read timeout); failures come back in ``error``, never raised (a
    gate decides)."""
    request, (host, port, tls) = _request_bytes(url, path, body, headers)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    reads = _Reads(done)
    called = time.perf_counter()
    try:
        transport, _ = await asyncio.wait_for(loop.create_connection(
            lambda: reads, host, port, ssl=_tls_context() if tls else None), connect_timeout)
    except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
        return StreamedResponse(error=f"ConnectError: {str(exc) or f'no connection within {connect_timeout:g}s'}",
                                elapsed_s=time.perf_counter() - called)
    start, sent_wall = time.perf_counter(), time.time()
    try:
        transport.write(request)
        while not done.done():
            quiet_since = reads.times[-1] if reads.times else start
            left = quiet_since + timeout - time.perf_counter()
            if left <= 0:
                transport.abort()
                response = _read(reads, start)
                response.error = (f"ReadTimeout: nothing received for {timeout:g}s"
                                  f"{f' ({response.error})' if response.error else ''}")
                response.elapsed_s = time.perf_counter() - start
                return response
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(done), left)
    finally:
        transport.close()
    response = _read(reads, start)
    response.elapsed_s = (reads.times[-1] if reads.times else time.perf_counter()) - start
    response.connect_s, response.sent_wall = start - called, sent_wall
    return response


def _read(reads: _Reads, start: float) -> StreamedResponse:
    """Frames the bytes kept by ``_Reads``: the status line, the (chunked) body, the SSE data lines."""
    raw = b"".join(reads.chunks)
    ends: list[int] = []
    total = 0
    for chunk in reads.chunks:
        total += len(chunk)
        ends.append(total)
    head_end = raw.find(b"\r\n\r\n")
    if head_end < 0:
        reason = f" ({reads.lost})" if reads.lost else ""
        return StreamedResponse(error=f"RemoteProtocolError: Server disconnected without sending a response{reason}")
    status_line = raw[:raw.find(b"\r\n")].decode("latin-1")
    try:
        status = int(status_line.split(" ", 2)[1])
    except (IndexError, ValueError):
        return StreamedResponse(error=f"RemoteProtocolError: malformed status line {status_line[:80]!r}")
    fields = _fields(raw[:head_end])
    chunked = reads._framing in ("chunked", "broken-chunked")
    pieces, whole = _body_pieces(reads, len(raw), fields)
    body = b"".join(raw[begin:end] for begin, end in pieces)
    response = StreamedResponse(status=status)
    if not whole:
        response.error = ("RemoteProtocolError: peer closed connection without sending complete message body "
                          "(incomplete chunked read)" if chunked else
                          "RemoteProtocolError: peer closed connection without sending complete message body")
    if status >= 400:
        response.response_text = body.decode(errors="replace")[:_MAX_ERROR_BODY]
        response.error = f"HTTP {status}"
        return response
    _events(response, body, pieces, ends, [t - start for t in reads.times])
    return response


def _body_pieces(reads: _Reads, raw_length: int, fields: dict[str, str]) -> tuple[list[tuple[int, int]], bool]:
    """(start, end) offsets in the joined reads of the body's bytes, and whether the body arrived whole.
    A chunked body's pieces are the ones ``_Reads`` noted while it watched for the end."""
    begin = reads.body_begin
    if reads._framing in ("chunked", "broken-chunked"):
        pieces = [(begin + a, min(begin + b, raw_length)) for a, b in reads.pieces if begin + a < raw_length]
        return pieces, reads.chunks_whole
    length = fields.get("content-length", "")
    if not length.isdigit():
        return [(begin, raw_length)], True  # delimited by the close
    end = begin + int(length)
    return [(begin, min(end, raw_length))], end <= raw_length


def _events(response: StreamedResponse, body: bytes, pieces: list[tuple[int, int]], ends: list[int],
            times: list[float]) -> None:
    """Each ``data:`` line becomes an event stamped with the arrival of the read holding its newline."""
    piece_starts, offset = [], 0
    for begin, end in pieces:
        piece_starts.append(offset)
        offset += end - begin
    events = response.events
    position = 0
    while True:
        newline = body.find(b"\n", position)
        if newline < 0:
            break
        line = body[position:newline].rstrip(b"\r")
        position = newline + 1
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            response.done_marker = True
            continue
        index = bisect_right(piece_starts, newline) - 1
        raw_offset = pieces[index][0] + (newline - piece_starts[index])
        arrived = times[bisect_right(ends, raw_offset)]  # the read whose bytes end past the newline
        try:
            events.append({"t": arrived, "data": orjson.loads(payload)})
        except orjson.JSONDecodeError:
            events.append({"t": arrived, "raw": payload[:2000].decode(errors="replace")})
