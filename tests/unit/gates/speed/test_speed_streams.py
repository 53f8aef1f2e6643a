"""Stream integrity and per-request timing on hand-written raw records (the shapes a real llama-server
and llama-cpp-python stream; see campaign/lanes/llamacpp.py). Faults a real engine will not produce on
demand (lost, repeated or reordered chunks, a mid-stream error) can only be pinned this way."""

from __future__ import annotations

from typing import Any

import pytest

from campaign.gates.common.streams import StreamFacts, analyze_stream

LLAMA = StreamFacts(token_counter="timings.predicted_n")


def chunk(t: float, content: str | None = None, n: int | None = None, finish: str | None = None,
          role: bool = False, sid: str = "a") -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant", "content": None} if role else {}
    if content is not None:
        delta["content"] = content
    data: dict[str, Any] = {"id": sid, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if n is not None:
        data["timings"] = {"predicted_n": n}
    return {"t": t, "data": data}


def stream(pieces: list[str], *, finish: str | None = "length", usage: int | None = None, counters: bool = True,
           done: bool = True, start: float = 0.5, step: float = 0.1) -> dict[str, Any]:
    events = [chunk(0.05, role=True)]
    for i, piece in enumerate(pieces):
        events.append(chunk(start + i * step, piece, n=i + 1 if counters else None))
    end = start + len(pieces) * step
    if finish:
        events.append(chunk(end, finish=finish))
    if usage is not None:
        events.append({"t": end + 0.001, "data": {"id": "a", "choices": [], "usage": {
            "completion_tokens": usage, "prompt_tokens": 30}}})
    return {"status": 200, "events": events, "done_marker": done, "elapsed_s": end + 0.002}


def test_whole_stream_times_from_first_content_not_the_role_chunk() -> None:
    stats, problem = analyze_stream(stream(["a", "b", "c", "d"], usage=4), 4, LLAMA)
    assert problem is None and stats is not None
    assert stats.ttft_s == 0.5  # the role-only chunk at 0.05 does not count
    assert stats.tokens == 4 and stats.token_source == "usage"
    assert stats.decode_tok_s == pytest.approx(3 / 0.4)  # 3 tokens after the first, first -> finish
    assert stats.effective_tok_s == pytest.approx(4 / 0.902)
    assert stats.text == "abcd" and stats.prompt_tokens == 30


def test_stop_counts_the_unstreamed_eos_token() -> None:
    stats, problem = analyze_stream(stream(["a", "b"], finish="stop", usage=3), 8, LLAMA)
    assert problem is None and stats.tokens == 3  # fewer than asked is fine with a stop
    stats, problem = analyze_stream(stream(["a", "b"], finish="stop", usage=None), 8, LLAMA)
    assert problem is None and stats.tokens == 3 and stats.token_source == "counter"


@pytest.mark.parametrize("record, reason", [
    (stream(["a", "b"], finish=None, usage=None), "without a finish reason"),  # llama-cpp-python interrupt
    (stream(["a", "b"], usage=2, done=False), "without [DONE]"),
    (stream(["a", "b"], usage=2), "ended early without a stop"),  # length after 2 of 4
    (stream(["a", "b", "c", "d", "e"], usage=5), "more than the 4 asked"),
    (stream([], usage=0), "no content"),
    ({"status": 500, "events": [], "done_marker": False}, "HTTP 500"),
    ({"error": "ReadTimeout: timed out", "events": []}, "ReadTimeout"),
])
def test_broken_streams_are_errors_never_throughput(record: dict, reason: str) -> None:
    stats, problem = analyze_stream(record, 4, LLAMA)
    assert stats is None and reason in problem


def test_repeated_and_lost_chunks_are_caught_by_the_engine_counter() -> None:
    repeated = stream(["a", "b", "c", "d"], usage=4)
    repeated["events"][3]["data"]["timings"]["predicted_n"] = 2
    assert "repeated chunk" in analyze_stream(repeated, 4, LLAMA)[1]
    lost = stream(["a", "b", "c", "d"], usage=4)
    del lost["events"][2]  # token 2 never arrived
    assert "lost chunks" in analyze_stream(lost, 4, LLAMA)[1]
    tail = stream(["a"], usage=5)  # the engine made 5, 1 arrived, finish 'length': more than one character held
    assert "lost chunks at the end" in analyze_stream(tail, 5, LLAMA)[1]
    stopped = stream(["a", "b"], finish="stop", usage=5)  # a stop after 2 streamed of 4 made: no character excuses it
    assert "lost chunks at the end" in analyze_stream(stopped, 8, LLAMA)[1]


def test_a_last_character_held_back_at_the_limit_is_not_a_lost_chunk() -> None:
    # llama-server never streams a token that ends in an incomplete UTF-8 character when the limit comes
    # there: the engine counted 4, the last streamed chunk is token 3 (seen on the H200 window)
    stats, problem = analyze_stream(stream(["a", "b", "c"], usage=4), 4, LLAMA)
    assert problem is None and stats.tokens == 4
    assert stats.decode_tok_s == pytest.approx(3 / 0.3)  # first chunk -> the finish event, after all 4 were made


def test_a_held_back_multibyte_character_is_not_a_lost_chunk() -> None:
    record = stream(["a", "b", "é", "d"], usage=5)
    for event, n in zip(record["events"][1:5], (1, 2, 4, 5), strict=True):
        event["data"]["timings"]["predicted_n"] = n
    stats, problem = analyze_stream(record, 5, LLAMA)
    assert problem is None and stats.tokens == 5


def test_without_engine_counts_there_is_no_throughput() -> None:
    record = stream(["a", "b", "c", "d"], counters=False)
    assert "no token count" in analyze_stream(record, 4, StreamFacts())[1]
    stats, problem = analyze_stream(record, 4, StreamFacts(tokens_per_chunk=1))
    assert problem is None and stats.tokens == 4 and stats.token_source == "chunks"
    doubled = stream(["a", "b", "c", "d"], usage=3, counters=False)
    assert "repeated chunks" in analyze_stream(doubled, 4, StreamFacts())[1]


def test_mixed_streams_mid_stream_errors_and_reordered_events() -> None:
    mixed = stream(["a", "b", "c", "d"], usage=4)
    mixed["events"][2]["data"]["id"] = "other"
    assert "different streams" in analyze_stream(mixed, 4, LLAMA)[1]
    failed = stream(["a", "b"], finish=None)
    failed["events"].append({"t": 9.0, "data": {"error": {"message": "slot unavailable"}}})
    assert "engine error mid-stream" in analyze_stream(failed, 4, LLAMA)[1]
    reordered = stream(["a", "b", "c", "d"], usage=4)
    reordered["events"][3]["t"] = 0.1
    assert "arrived before" in analyze_stream(reordered, 4, LLAMA)[1]
    late = stream(["a", "b", "c", "d"], usage=4)
    late["events"].append(chunk(2.0, "e", n=5))
    assert "after the finish reason" in analyze_stream(late, 4, LLAMA)[1]
