"""One streamed request, read back from its raw record: is it whole, and how fast was it.

A stream that failed, ended without a finish reason, lost or repeated chunks, or produced fewer
tokens than asked without stopping is an error with a reason, never throughput. Times are the
client's arrival times of SSE events, seconds after sending (see ``LaneClient.stream``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StreamFacts", "StreamStats", "analyze_stream", "streamed_text"]

_FINISHED = {"stop", "length", "tool_calls"}


@dataclass(frozen=True)
class StreamFacts:
    """What the engine adapter declared about its streams when the records were taken."""

    token_counter: str | None = None  # dotted path in a chunk to the engine's running token count
    tokens_per_chunk: int | None = None  # every content chunk is exactly this many tokens (no usage)
    # no usage, no counter: the streamed text is counted by the engine's own tokenizer after the rep
    # (record["engine_token_count"]); a stream that ran to the limit generated exactly max_tokens
    count_by_tokenizer: bool = False


@dataclass(frozen=True)
class StreamStats:
    tokens: int  # output tokens, as the engine counted them
    token_source: str  # usage | counter | chunks | limit | tokenizer
    ttft_s: float  # first event carrying content, reasoning or a tool call (not the role-only chunk)
    decode_tok_s: float | None  # tokens after the first, over first content -> finish event
    effective_tok_s: float  # tokens over the request's wall time
    elapsed_s: float
    finish_reason: str
    text: str
    prompt_tokens: int | None
    itl_s: tuple[float, ...] = ()  # each gap between consecutive chunks carrying output, in arrival order


def streamed_text(record: dict[str, Any]) -> str:
    """The content a stream delivered, whole or not (what a reply check or a tokenizer count reads)."""
    parts = []
    for event in record.get("events") or []:
        for choice in (event.get("data") or {}).get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if isinstance(content, str):
                parts.append(content)
    return "".join(parts)


def _dig(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _carries_output(delta: dict[str, Any]) -> bool:
    return any(bool(delta.get(key)) for key in ("content", "reasoning_content", "reasoning", "tool_calls"))


@dataclass
class _Events:
    """What a stream's events said, read in arrival order."""

    ids: set[str] = field(default_factory=set)
    first_t: float | None = None
    finish_t: float | None = None
    finish: str | None = None
    usage: dict[str, Any] | None = None
    text: list[str] = field(default_factory=list)
    chunks: int = 0
    counters: list[tuple[int, str]] = field(default_factory=list)
    last_t: float = 0.0
    output_t: list[float] = field(default_factory=list)  # arrival of each chunk carrying output


def analyze_stream(record: dict[str, Any], max_tokens: int,
                   facts: StreamFacts = StreamFacts()) -> tuple[StreamStats | None, str | None]:
    """(stats, None) for a whole stream, (None, reason) for an error record."""
    if record.get("error"):
        return None, str(record["error"])
    if record.get("status") != 200:
        return None, f"HTTP {record.get('status')}"
    seen, problem = _read_events(record.get("events") or [], facts)
    problem = problem or _cut_short(record, seen)
    if problem:
        return None, problem
    counted = _token_count(record, seen, facts, max_tokens)
    if counted is None:
        return None, "the engine reported no token count (no usage, no per-chunk counter)"
    tokens, source = counted
    problem = _count_problem(seen, tokens, source, max_tokens)
    if problem:
        return None, problem
    # for mypy: _cut_short returned a problem for a stream without these
    assert seen.first_t is not None and seen.finish_t is not None and seen.finish is not None
    first_t, finish_t = seen.first_t, seen.finish_t
    elapsed = float(record.get("elapsed_s") or seen.last_t)
    decode = (tokens - 1) / (finish_t - first_t) if tokens >= 2 and finish_t > first_t else None
    prompt_tokens = seen.usage.get("prompt_tokens") if seen.usage else None
    return StreamStats(tokens=tokens, token_source=source, ttft_s=first_t, decode_tok_s=decode,
                       effective_tok_s=tokens / elapsed if elapsed > 0 else 0.0, elapsed_s=elapsed,
                       finish_reason=seen.finish, text="".join(seen.text),
                       prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else None,
                       itl_s=tuple(b - a for a, b in itertools.pairwise(seen.output_t))), None


def _read_events(events: list[dict[str, Any]], facts: StreamFacts) -> tuple[_Events, str | None]:
    """The events' facts, or the first reason the stream cannot be trusted."""
    seen = _Events()
    for index, event in enumerate(events):
        t = event.get("t")
        data = event.get("data")
        if not isinstance(data, dict) or not isinstance(t, (int, float)):
            return seen, f"event {index} is not a JSON chunk: {str(event.get('raw'))[:80]!r}"
        if t < seen.last_t:
            return seen, f"event {index} arrived before event {index - 1}: the record's clock is broken"
        seen.last_t = t
        if data.get("error"):
            return seen, f"engine error mid-stream: {str(data['error'])[:200]}"
        if isinstance(data.get("id"), str):
            seen.ids.add(data["id"])
        if isinstance(data.get("usage"), dict):
            seen.usage = data["usage"]
        for choice in data.get("choices") or []:
            problem = _read_choice(seen, index, t, data, choice, facts)
            if problem:
                return seen, problem
    return seen, None


def _read_choice(seen: _Events, index: int, t: float, data: dict[str, Any], choice: dict[str, Any],
                 facts: StreamFacts) -> str | None:
    if seen.finish is not None:
        return f"event {index} arrived after the finish reason"
    delta = choice.get("delta") or {}
    if _carries_output(delta):
        seen.chunks += 1
        seen.first_t = t if seen.first_t is None else seen.first_t
        seen.output_t.append(t)
        piece = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
        seen.text.append(piece if isinstance(piece, str) else "")
        if facts.token_counter:
            count = _dig(data, facts.token_counter)
            if not isinstance(count, int):
                return f"event {index} lacks the engine's token count {facts.token_counter}"
            seen.counters.append((count, seen.text[-1]))
    if choice.get("finish_reason"):
        seen.finish, seen.finish_t = str(choice["finish_reason"]), t
    return None


def _cut_short(record: dict[str, Any], seen: _Events) -> str | None:
    if len(seen.ids) > 1:
        return f"events from {len(seen.ids)} different streams in one response"
    if not record.get("done_marker"):
        return "stream ended without [DONE]: cut short"
    if seen.finish is None:
        return "stream ended without a finish reason: cut short"
    if seen.finish not in _FINISHED:
        return f"finish reason {seen.finish!r}"
    if seen.first_t is None or seen.finish_t is None:
        return "no content, reasoning or tool call in the stream"
    return None


def _token_count(record: dict[str, Any], seen: _Events, facts: StreamFacts,
                 max_tokens: int) -> tuple[int, str] | None:
    """(tokens, source) by the engine's own numbers only; a client-side chunk count is used only where
    the adapter declared that its engine streams a fixed number of tokens per chunk."""
    usage, finish = seen.usage, seen.finish
    if usage is not None and isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"]), "usage"
    if seen.counters:
        return seen.counters[-1][0] + (1 if finish == "stop" else 0), "counter"
    if facts.tokens_per_chunk:
        return seen.chunks * facts.tokens_per_chunk, "chunks"
    if facts.count_by_tokenizer and finish == "length":
        return max_tokens, "limit"  # the engine stops a stream at exactly max_tokens
    if facts.count_by_tokenizer and isinstance(record.get("engine_token_count"), int):
        return int(record["engine_token_count"]), "tokenizer"
    return None


def _count_problem(seen: _Events, tokens: int, source: str, max_tokens: int) -> str | None:
    finish = seen.finish
    if seen.counters:
        problem = _counter_problem(seen.counters, tokens, finish)
        if problem:
            return problem
    elif source == "usage" and seen.chunks > tokens:
        return f"{seen.chunks} content chunks for {tokens} tokens: repeated chunks"
    if tokens > max_tokens:
        return f"{tokens} tokens, more than the {max_tokens} asked"
    if finish == "length" and tokens < max_tokens:
        return f"finish 'length' after {tokens} of {max_tokens} tokens: ended early without a stop"
    return None


def _counter_problem(counters: list[tuple[int, str]], tokens: int, finish: str | None) -> str | None:
    """The engine's running count must rise by one per chunk; a jump is a lost chunk unless the
    chunk holds a multi-byte character the engine held back until it was whole."""
    previous = 0
    for index, (count, piece) in enumerate(counters):
        if count <= previous:
            return f"content chunk {index} repeats token count {count}: repeated chunk"
        if count > previous + 1 and piece.isascii():
            return f"content chunk {index} jumps from token {previous} to {count}: lost chunks"
        previous = count
    expected = tokens - (1 if finish == "stop" else 0)  # a stop's EOS is counted, not streamed
    if previous in (expected, tokens):
        return None
    # llama-server holds back a token whose text ends in an incomplete UTF-8 character until the character
    # is whole; a generation that reaches its limit there never streams it (up to 3 byte tokens of one
    # 4-byte character). Seen on an H200 with random weights, which often end on a byte token. The decode
    # time still runs to the finish event, after those tokens were made, so the count stays the engine's.
    if finish == "length" and 0 < tokens - previous <= 3:
        return None
    return f"the last chunk is token {previous} but the engine counted {tokens}: lost chunks at the end"
