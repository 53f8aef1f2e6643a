"""The speed gate's load path: aiohttp underneath, each socket read kept with its arrival time, the SSE events
framed after the response ended and stamped with the read that completed each line, and an error (never an
exception) whenever the response was not whole.

The framing is checked on constructed reads; the rest runs against a fake server, to inject what real
engines will not do on demand (a cut body, a malformed head, a silent or never-closing server, a proxy).
The load path against real engines is covered by tests/integration/speed."""

from __future__ import annotations

import asyncio
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from campaign.lanes.engines import sse
from campaign.lanes.engines.sse import StreamedResponse, StreamSession, _frame, post_stream

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(text: str, n: int) -> bytes:
    return b'data: {"choices":[{"delta":{"content":"%s"}}],"n":%d}\n\n' % (text.encode(), n)


def _framed(reads: list[tuple[float, bytes]]) -> StreamedResponse:
    response = StreamedResponse(status=200)
    marks, fed = [], 0
    for arrived, data in reads:
        fed += len(data)
        marks.append((arrived, fed))
    _frame(response, b"".join(data for _, data in reads), marks)
    return response


def test_each_event_is_stamped_with_the_read_that_completed_its_line() -> None:
    body = _event("a", 1) + _event("b", 2) + _event("c", 3) + b"data: [DONE]\n\n"
    split_in_second = len(_event("a", 1)) + 20  # the second event's line spans two reads
    response = _framed([(0.010, body[:split_in_second]), (0.025, body[split_in_second:])])
    assert response.error is None and response.done_marker
    assert [e["data"]["n"] for e in response.events] == [1, 2, 3]
    assert [e["t"] for e in response.events] == [0.010, 0.025, 0.025]


def test_a_line_ending_exactly_at_a_read_is_stamped_with_that_read() -> None:
    first = _event("a", 1)
    newline_read = first.index(b"\n") + 1  # the first read ends just past the line's newline
    response = _framed([(0.1, first[:newline_read]), (0.2, first[newline_read:] + _event("b", 2))])
    assert [(e["t"], e["data"]["n"]) for e in response.events] == [(0.1, 1), (0.2, 2)]


def test_a_non_json_data_line_is_kept_raw_and_other_lines_are_skipped() -> None:
    response = _framed([(0.3, b": a comment\nevent: x\ndata: {not json\n\n")])
    assert response.events == [{"t": 0.3, "raw": "{not json"}]


# ---- through aiohttp, against a fake server ----

async def _serve(pieces: list[bytes], then_wait: float = 0.0, heads: list[bytes] | None = None):
    """Answers each request with ``pieces`` (a pause between them, so each is its own read), then neither
    closes nor sends for ``then_wait`` seconds. The request heads are kept in ``heads``."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if heads is not None:
                heads.append(head + await reader.read(4096))
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.02)
            await asyncio.sleep(then_wait)
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _post(pieces: list[bytes], *, then_wait: float = 0.0, timeout: float = 5.0) -> StreamedResponse:
    server, port = await _serve(pieces, then_wait)
    async with server:
        return await asyncio.wait_for(post_stream(f"http://127.0.0.1:{port}", "/x", {}, headers={},
                                                  timeout=timeout), 10.0)


async def test_a_whole_stream_read_over_several_reads_times_each_event_from_the_write() -> None:
    response = await _post([HEAD, _chunk(_event("a", 1)), _chunk(_event("b", 2)),
                            _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"])
    assert (response.status, response.error, response.done_marker) == (200, None, True)
    first, second = (e["t"] for e in response.events)
    assert 0.015 < first < second  # each piece its own read, a pause of 20 ms before each
    assert response.connect_s is not None and response.sent_wall is not None
    assert response.elapsed_s >= second


async def test_a_chunked_body_cut_before_its_end_is_an_error_with_what_arrived_kept() -> None:
    response = await _post([HEAD + _chunk(_event("a", 1)) + _chunk(b"data: [DONE]\n\n")])  # no last chunk
    assert "incomplete chunked read" in response.error
    assert response.done_marker and [e["data"]["n"] for e in response.events] == [1]


async def test_a_content_length_body_short_of_its_length_is_an_error() -> None:
    body = _event("a", 1)
    response = await _post([b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (len(body) + 10) + body])
    assert response.error.startswith("RemoteProtocolError") and len(response.events) == 1


async def test_an_http_error_keeps_its_body_and_has_no_events() -> None:
    response = await _post([b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 17\r\n\r\n{\"error\":\"busy\"}\n"])
    assert (response.status, response.error, response.events) == (503, "HTTP 503", [])
    assert response.response_text == '{"error":"busy"}\n'


@pytest.mark.parametrize("wire, expected", [
    (b"", "Server disconnected without sending a response"),
    (b"HTTP/1.1 200 OK\r\ncontent-", "Server disconnected without sending a response"),
    (b"garbage\r\n\r\n", "malformed response"),
])
async def test_no_response_head_is_an_error_on_one_line(wire: bytes, expected: str) -> None:
    response = await _post([wire] if wire else [])
    assert response.status is None and expected in response.error and "\n" not in response.error


async def test_nothing_listening_is_a_connect_error_not_an_exception() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        response = await post_stream(f"http://127.0.0.1:{port}", "/v1/chat/completions", {}, headers={},
                                     timeout=5.0)
    assert response.status is None and response.error.startswith("ConnectError")


@pytest.mark.parametrize("cut", [1, 3, 5, 7])
async def test_a_server_that_keeps_the_connection_open_still_ends_the_stream(cut: int) -> None:
    # cpp-httplib writes "0\r\n" and "\r\n" apart; a server that keeps the connection open must still end
    wire = HEAD + _chunk(_event("a", 1)) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    response = await _post([wire[:-cut], wire[-cut:]], then_wait=30, timeout=20.0)
    assert response.error is None and response.done_marker and len(response.events) == 1


async def test_a_silent_server_is_a_read_timeout_with_what_arrived_kept() -> None:
    response = await _post([HEAD + _chunk(_event("a", 1))], then_wait=30, timeout=0.5)
    assert response.error.startswith("ReadTimeout: nothing received for 0.5s")
    assert [e["data"]["n"] for e in response.events] == [1] and response.elapsed_s >= 0.5


async def test_a_reply_past_the_stream_cap_is_cut_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "MAX_STREAM_BYTES", 1000)
    endless = [HEAD] + [_chunk(_event("x" * 100, n)) for n in range(40)]
    response = await _post(endless, then_wait=30)
    assert response.error.startswith("ResponseTooLarge") and 5 < len(response.events) < 40


async def test_the_request_names_the_host_joins_a_path_prefix_and_never_sends_the_urls_credentials() -> None:
    heads: list[bytes] = []
    server, port = await _serve([HEAD + b"0\r\n\r\n"], heads=heads)
    async with server:
        await post_stream(f"http://user:secret@127.0.0.1:{port}/proxy/", "/v1/chat/completions",
                          {"logit_bias": {15043: -100}}, headers={"Authorization": "Bearer k"}, timeout=5.0)
    request = heads[0].decode()
    assert request.startswith("POST /proxy/v1/chat/completions HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{port}\r\n" in request and "Authorization: Bearer k\r\n" in request
    assert "secret" not in request and "dXNlcjpzZWNyZXQ" not in request  # nor as basic auth
    assert request.endswith('{"logit_bias":{"15043":-100}}')


async def test_the_proxy_the_environment_names_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # a fake proxy (none is installed here): it answers the request it was sent in absolute form
    heads: list[bytes] = []
    proxy, proxy_port = await _serve([HEAD + _chunk(_event("a", 1)) + b"0\r\n\r\n"], heads=heads)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with proxy:
        response = await post_stream("http://lane.invalid:8000", "/v1/chat/completions", {}, headers={},
                                     timeout=5.0)
    assert response.error is None and len(response.events) == 1
    assert heads[0].startswith(b"POST http://lane.invalid:8000/v1/chat/completions HTTP/1.1\r\n")


async def test_one_session_serves_many_streams_and_a_new_loop_gets_its_own() -> None:
    session = StreamSession()
    server, port = await _serve([HEAD + _chunk(_event("a", 1)) + b"0\r\n\r\n"])
    async with server:
        replies = await asyncio.gather(*(session.post(f"http://127.0.0.1:{port}", "/x", {}, headers={},
                                                      timeout=5.0) for _ in range(8)))
    assert all(r.error is None and len(r.events) == 1 for r in replies)
    first = session._current()
    other = await asyncio.to_thread(asyncio.run, _current_of(session))
    assert other is not first and first.closed  # the old loop's session let go, not reused across loops
    await session.aclose()


async def _current_of(session: StreamSession) -> object:
    return session._current()


_LINES = st.one_of(st.just(b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'), st.just(b"data: [DONE]\n\n"),
                   st.just(b": keep-alive\n"), st.binary(max_size=40))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(pieces=st.lists(_LINES, max_size=30), cuts=st.lists(st.integers(min_value=1, max_value=2000), max_size=12))
def test_any_body_split_anyhow_frames_without_raising_and_stamps_in_arrival_order(pieces: list[bytes],
                                                                                 cuts: list[int]) -> None:
    body = b"".join(pieces)
    points = sorted({c for c in cuts if c < len(body)}) + [len(body)]
    marks = [(0.1 * (i + 1), end) for i, end in enumerate(points)]
    response = StreamedResponse(status=200)
    _frame(response, body, marks)
    times = [event["t"] for event in response.events]
    assert times == sorted(times) and set(times) <= {t for t, _ in marks}
    assert len(response.events) <= body.count(b"\n")
