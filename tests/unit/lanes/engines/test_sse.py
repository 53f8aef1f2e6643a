"""Framing a streamed response after it ended: the bytes of each socket read with its arrival time, read
back into status, SSE events stamped with the read that completed each line, and an error whenever the
response was not whole. The reads are constructed here (split where a real socket may split them); the
load path against real engines is covered by tests/integration/speed."""

from __future__ import annotations

import asyncio

import pytest

from campaign.lanes.engines.sse import _read, _Reads, post_stream

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _reads(pieces: list[tuple[float, bytes]], lost: Exception | None = None) -> _Reads:
    loop = asyncio.new_event_loop()
    try:
        reads = _Reads(loop.create_future())
    finally:
        loop.close()
    for _, data in pieces:  # as the socket delivers them, so the live framing walk sees them too
        reads.data_received(data)
    reads.times = [t for t, _ in pieces]
    reads.lost = lost
    return reads


def _event(text: str, n: int) -> bytes:
    return b'data: {"choices":[{"delta":{"content":"%s"}}],"n":%d}\n\n' % (text.encode(), n)


def test_each_event_is_stamped_with_the_read_that_completed_its_line() -> None:
    first, second, third = _event("a", 1), _event("b", 2), _event("c", 3)
    body = _chunk(first) + _chunk(second) + _chunk(third) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    split_in_second = len(HEAD) + len(_chunk(first)) + 20  # the second event's line spans two reads
    wire = HEAD + body
    response = _read(_reads([(10.010, wire[:split_in_second]), (10.025, wire[split_in_second:])]), start=10.0)
    assert response.status == 200 and response.error is None and response.done_marker
    assert [e["data"]["n"] for e in response.events] == [1, 2, 3]
    assert [round(e["t"], 3) for e in response.events] == [0.010, 0.025, 0.025]


def test_an_event_split_across_two_chunks_of_the_body_is_one_event() -> None:
    event = _event("hello", 7)
    body = _chunk(event[:15]) + _chunk(event[15:]) + b"0\r\n\r\n"
    response = _read(_reads([(1.5, HEAD + body)]), start=1.0)
    assert [(e["t"], e["data"]["n"]) for e in response.events] == [(0.5, 7)]
    assert response.error is None and not response.done_marker


def test_a_chunked_body_cut_before_its_end_is_an_error_with_what_arrived_kept() -> None:
    wire = HEAD + _chunk(_event("a", 1)) + _chunk(b"data: [DONE]\n\n")  # no terminating chunk
    response = _read(_reads([(0.2, wire)], lost=ConnectionResetError("reset")), start=0.0)
    assert "incomplete chunked read" in response.error
    assert response.done_marker and [e["data"]["n"] for e in response.events] == [1]


def test_a_content_length_body_short_of_its_length_is_an_error() -> None:
    body = _event("a", 1)
    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (len(body) + 10)
    response = _read(_reads([(0.1, head + body)]), start=0.0)
    assert response.error.startswith("RemoteProtocolError") and len(response.events) == 1


def test_an_http_error_keeps_its_body_and_has_no_events() -> None:
    wire = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 17\r\n\r\n{\"error\":\"busy\"}\n"
    response = _read(_reads([(0.1, wire)]), start=0.0)
    assert (response.status, response.error, response.events) == (503, "HTTP 503", [])
    assert response.response_text == '{"error":"busy"}\n'


@pytest.mark.parametrize("wire, expected", [
    (b"", "Server disconnected without sending a response"),
    (b"HTTP/1.1 200 OK\r\ncontent-", "Server disconnected without sending a response"),
    (b"garbage\r\n\r\n", "malformed status line"),
])
def test_no_response_head_is_an_error(wire: bytes, expected: str) -> None:
    assert expected in _read(_reads([(0.1, wire)] if wire else []), start=0.0).error


def test_a_non_json_data_line_is_kept_raw() -> None:
    wire = HEAD + _chunk(b"data: {not json\n\n") + b"0\r\n\r\n"
    response = _read(_reads([(0.3, wire)]), start=0.0)
    assert response.events == [{"t": 0.3, "raw": "{not json"}]


async def test_nothing_listening_is_a_connect_error_not_an_exception() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        response = await post_stream(f"http://127.0.0.1:{port}", "/v1/chat/completions", {}, headers={},
                                     timeout=5.0)
    assert response.status is None and response.error.startswith("ConnectError")


def _feed(pieces: list[bytes]) -> bool:
    """Whether the protocol saw the end of the response from these reads alone (no close)."""
    loop = asyncio.new_event_loop()
    try:
        reads = _Reads(loop.create_future())
        for piece in pieces:
            reads.data_received(piece)
        return reads.done.done()
    finally:
        loop.close()


@pytest.mark.parametrize("cut", [1, 3, 5, 7])
def test_the_end_of_a_chunked_body_is_seen_however_the_reads_split_it(cut: int) -> None:
    # cpp-httplib writes "0\r\n" and "\r\n" apart; a server that keeps the connection open must still end
    wire = HEAD + _chunk(_event("a", 1)) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    assert _feed([wire[:-cut], wire[-cut:]])
    assert not _feed([wire[:-cut]])


def test_trailers_after_the_last_chunk_end_the_body_and_a_data_chunk_ending_like_it_does_not() -> None:
    assert _feed([HEAD + _chunk(_event("a", 1)) + b"0\r\nx-trailer: 1\r\n\r\n"])
    assert not _feed([HEAD + _chunk(b"data: 10\r\n\r\n")])  # the data's own bytes end in "0\r\n\r\n"


def test_a_content_length_body_ends_when_its_length_arrived() -> None:
    body = b'{"error": "no"}'
    head = b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n" % len(body)
    assert _feed([head, body[:5], body[5:]]) and not _feed([head, body[:5]])


def test_the_request_names_the_host_and_joins_a_path_prefix() -> None:
    from campaign.lanes.engines.sse import _request_bytes

    request, (host, port, tls) = _request_bytes("https://user:secret@gpu.example:8443/proxy/", "/v1/chat/completions",
                                                {"logit_bias": {15043: -100}}, {"Authorization": "Bearer k"})
    head = request.split(b"\r\n\r\n")[0].decode()
    assert head.startswith("POST /proxy/v1/chat/completions HTTP/1.1\r\n")
    assert "Host: gpu.example:8443\r\n" in head and "secret" not in head  # never the URL's credentials
    assert (host, port, tls) == ("gpu.example", 8443, True)
    assert request.endswith(b'{"logit_bias":{"15043":-100}}')


# A fake server, to inject what real engines will not do on demand: keep the connection open after the
# response, or fall silent mid-stream.
async def _serve(wire: bytes, then_wait: float):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(wire)
        await writer.drain()
        await asyncio.sleep(then_wait)  # neither closing nor sending
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_server_that_keeps_the_connection_open_still_ends_the_stream() -> None:
    server, port = await _serve(HEAD + _chunk(_event("a", 1)) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n", 30)
    async with server:
        response = await asyncio.wait_for(post_stream(f"http://127.0.0.1:{port}", "/x", {}, headers={},
                                                      timeout=20.0), 5.0)
    assert response.error is None and response.done_marker and len(response.events) == 1


async def test_a_silent_server_is_a_read_timeout_with_what_arrived_kept() -> None:
    server, port = await _serve(HEAD + _chunk(_event("a", 1)), 30)
    async with server:
        response = await post_stream(f"http://127.0.0.1:{port}", "/x", {}, headers={}, timeout=0.5)
    assert response.error.startswith("ReadTimeout: nothing received for 0.5s")
    assert [e["data"]["n"] for e in response.events] == [1]
