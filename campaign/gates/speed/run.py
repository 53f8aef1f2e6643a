"""The live part of the speed gate: warm, measure rows in reps, void and re-run.

Per lane: one warmup wave at every concurrency level x prompt class first (the first hit of each
batch shape pays for autotune, JIT and cache set-up, so it is discarded: its records go to a separate
warmup file). Then each row: scrape the engine's metrics, run R reps (a rep: every prompt of the
class once, in the same order on every lane, with C users in flight, each taking the next prompt when
its last one ends), scrape again, judge the row
with the same function the offline judge uses; a VOID row is re-warmed and re-run up to the frozen
count. Every record is kept, void attempts included.

Records are encoded on the event loop and written by one background thread as they arrive, so a disk
write never stalls the loop while other streams' chunks are being timed; they are made durable once per
rep, outside its clock. Cyclic GC is held during a rep.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

import aiohttp

from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender, jsonl_line
from campaign.gates.common.inputs import Prompt
from campaign.gates.common.stats import percentile
from campaign.gates.common.streams import StreamFacts, streamed_text
from campaign.gates.speed.arrivals import schedule
from campaign.gates.speed.rows import BUSY_HOST, RowAttempt, RowResult, evaluate_row
from campaign.gates.speed.spec import Level, SpeedSpec
from campaign.lanes.engines.base import EngineAdapter
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.prometheus import parse_prometheus
from campaign.lanes.hostcpu import host_busy_seconds

__all__ = ["RecordWriter", "SpeedMeasurement", "by_class", "rep_order"]

CHAT_PATH = "/v1/chat/completions"
_SETTLE_POLLS, _SETTLE_SLEEP = 40, 0.05  # up to 2 s for the engine's counters to settle after a row


def rep_order(prompts: list[Prompt], level: Level) -> list[Prompt]:
    """A rep's requests: every prompt of the class once, in file order (the same on every lane), at a
    concurrency level cycled until there are at least as many requests as users, so the level is actually
    reached (a rate level sends each once, on its schedule)."""
    users = level if isinstance(level, int) else 0
    return [prompts[i % len(prompts)] for i in range(max(len(prompts), users))]


def by_class(prompts: list[Prompt]) -> dict[str, list[Prompt]]:
    """Prompt classes in the order they first appear; prompts without a class form 'all'."""
    classes: dict[str, list[Prompt]] = {}
    for prompt in prompts:
        classes.setdefault(prompt.cls or "all", []).append(prompt)
    return classes


_LAG_TICK_S = 0.005


async def _watch_loop(lags: list[float]) -> None:
    """How late the event loop wakes up for a timer, every few ms: an arrival waits at least that long to
    be timed, so a loop that lags is a client that measures its own queue."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + _LAG_TICK_S
        await asyncio.sleep(_LAG_TICK_S)
        lags.append(max(0.0, loop.time() - due))


def _lag_figures(lags: list[float]) -> dict[str, Any]:
    if not lags:
        return {}
    return {"loop_lag_p99_ms": 1000 * percentile(lags, 99), "loop_lag_max_ms": 1000 * max(lags),
            "loop_lag_samples": len(lags)}


Send = Callable[[int, dict[str, Any]], Awaitable[None]]


def _senders(send: Send, level: Level, requests: int, offsets: list[float] | None) -> list[Awaitable[None]]:
    """A rep's senders: at a concurrency level, one per user, each taking the next request as soon as its
    last one ends; at a rate level, one per request, each sent at its offset from now."""
    if isinstance(level, int):
        taken = iter(range(requests))

        async def user(index: int) -> None:
            for position in taken:
                await send(position, {"user": index})

        return [user(index) for index in range(level)]
    loop = asyncio.get_running_loop()
    begin = loop.time()

    async def scheduled(position: int, due: float) -> None:
        # lateness is the client's (its loop woke up late or was busy); the tags keep it for the judge
        await asyncio.sleep(max(0.0, due - loop.time()))
        await send(position, {"scheduled_s": round(due - begin, 6), "late_s": round(loop.time() - due, 6)})

    return [scheduled(position, begin + at) for position, at in enumerate(offsets or [])]


class RecordWriter:
    """Appends records in order on one worker thread, each written as it arrives; ``drain`` makes them
    durable with one fsync and waits for all of them. One fsync per record cost 17% of the client's CPU at
    64 streams; the gate drains after every rep, outside its clock."""

    def __init__(self, sink: JsonlAppender) -> None:
        self._sink = sink
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="speed-sink")
        self._pending: list[asyncio.Future[None]] = []

    def put(self, record: dict[str, Any]) -> None:
        # encoded here, on the loop's thread (tens of microseconds with orjson): an encoder running on the
        # writer's thread would hold the GIL, and the loop would wait up to a switch interval (5 ms) to
        # time the next arrival. The write releases the GIL.
        line = jsonl_line(record)
        self._pending.append(asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(self._sink.append_line, line, sync=False)))

    async def drain(self) -> None:
        pending, self._pending = self._pending, []
        pending.append(asyncio.get_running_loop().run_in_executor(self._pool, self._sink.sync))
        await asyncio.gather(*pending)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class SpeedMeasurement:
    """Measures one lane. Needs only a client, an adapter and a model name, so tests can drive it
    against an engine started outside a window."""

    def __init__(self, spec: SpeedSpec, prompts: list[Prompt], *, client: LaneClient, adapter: EngineAdapter,
                 model: str, sink: JsonlAppender, warm_sink: JsonlAppender,
                 request_defaults: dict[str, Any] | None = None,
                 lane_cpu: Callable[[], float | None] | None = None, facts: dict[str, Any] | None = None) -> None:
        self.spec, self.client, self.adapter, self.model = spec, client, adapter, model
        self.instrument_facts = facts or {}  # e.g. the CPUs the client and the lane ran on
        self.lane_cpu = lane_cpu  # the lane's CPU seconds so far, when the runtime can read them
        self.classes = by_class(prompts)
        self.request_defaults = dict(request_defaults or {})
        self.facts = StreamFacts(token_counter=adapter.stream_token_counter,
                                 tokens_per_chunk=adapter.stream_tokens_per_chunk,
                                 count_by_tokenizer=adapter.stream_count_by_tokenizer)
        self._sink, self._warm = RecordWriter(sink), RecordWriter(warm_sink)
        self.results: dict[tuple[Level, str], list[RowResult]] = {}

    async def run(self) -> dict[tuple[Level, str], list[RowResult]]:
        try:
            self._sink.put({"kind": "instrument", "engine": self.adapter.name, "client": "campaign.lanes.engines.sse",
                            "client_library": f"aiohttp {aiohttp.__version__}", "new_connection_per_stream": True,
                            "token_counter": self.facts.token_counter,
                            "count_by_tokenizer": self.facts.count_by_tokenizer,
                            "tokens_per_chunk": self.facts.tokens_per_chunk,
                            "request_fields": self.adapter.stream_request_fields(), **self.instrument_facts})
            for level in self.spec.loads:
                for cls in self.classes:
                    if isinstance(level, str):
                        self._sink.put({"kind": "schedule", "level": level, "class": cls,
                                        **self.spec.arrival.model_dump(), "offsets_s": self._schedule(level, cls)})
                    await self._warm_wave(level, cls, "initial", 0)
            for level in self.spec.loads:
                for cls in self.classes:
                    await self._row(level, cls)
        finally:
            await self._sink.drain()
            await self._warm.drain()
            self._sink.close()
            self._warm.close()
        return self.results

    def body(self, prompt: Prompt) -> dict[str, Any]:
        return {**self.request_defaults, "model": self.model, "messages": prompt.messages, "temperature": 0,
                "max_tokens": self.spec.max_tokens, **self.adapter.stream_request_fields()}

    def _schedule(self, level: str, cls: str) -> list[float]:
        return schedule(self.spec.arrival, level, cls, len(rep_order(self.classes[cls], level)))

    async def _warm_wave(self, level: Level, cls: str, wave: str, attempt: int) -> None:
        """One request per user at once; at a rate level, the row's own schedule once (its batch shapes)."""
        prompts = self.classes[cls]

        async def one(user: int, at: float) -> None:
            await asyncio.sleep(at)
            prompt = prompts[user % len(prompts)]
            tags = {"phase": "warmup", "wave": wave, "level": level, "class": cls, "attempt": attempt,
                    "user": user, "prompt": prompt.id}
            record = await self.client.stream(CHAT_PATH, self.body(prompt), tags=tags)
            self._warm.put(record)

        offsets = [0.0] * level if isinstance(level, int) else self._schedule(level, cls)
        await asyncio.gather(*(one(user, at) for user, at in enumerate(offsets)))
        await self._warm.drain()

    async def _row(self, level: Level, cls: str) -> None:
        results = self.results.setdefault((level, cls), [])
        for attempt in range(self.spec.rule.max_reruns + 1):
            if attempt:
                if any(BUSY_HOST in reason for reason in results[-1].reasons):
                    await self._wait_for_quiet(level, cls, attempt)
                await self._warm_wave(level, cls, "rewarm", attempt)
            row = RowAttempt(level=level, cls=cls, attempt=attempt)
            row.metrics["before"] = await self._scrape(level, cls, attempt, "before")
            for rep in range(self.spec.reps):
                await self._rep(row, rep)
            row.metrics["after"] = await self._scrape(level, cls, attempt, "after")
            result = evaluate_row(row, per_rep=len(rep_order(self.classes[cls], level)), reps=self.spec.reps,
                                  max_tokens=self.spec.max_tokens, facts=self.facts, rule=self.spec.rule,
                                  summarize=self.adapter.metric_summary, arrival=self.spec.arrival)
            self._sink.put({"kind": "row", "level": level, "class": cls, "attempt": attempt,
                            "status": result.status, "reasons": result.reasons, "spread": result.spread,
                            "median_aggregate_tok_s": result.median_aggregate})
            await self._sink.drain()
            results.append(result)
            if result.valid:
                return

    async def _wait_for_quiet(self, level: Level, cls: str, attempt: int) -> None:
        """Before re-running a row other processes voided: wait, at most ``host_quiet_wait_s`` seconds, for a
        second in which they use no more than ``max_host_busy`` of the host (the lane idles meanwhile; this
        runner's own CPU is not theirs). The wait and each second's share are recorded: the judge says it."""
        rule = self.spec.rule
        if rule.max_host_busy is None or not rule.host_quiet_wait_s or self.lane_cpu is None:
            return
        started, shares = time.monotonic(), []
        while time.monotonic() - started < rule.host_quiet_wait_s:
            # as the rep's own check counts it: everything but the lane and this (the client's) thread
            before = (host_busy_seconds(), self.lane_cpu(), time.thread_time(), time.perf_counter())
            await asyncio.sleep(1.0)
            after = (host_busy_seconds(), self.lane_cpu(), time.thread_time(), time.perf_counter())
            if any(v is None for v in (*before, *after)):
                break  # the host or the lane cannot be read now: the re-run goes on, and the record says so
            host, lane, own, span = (b - a for a, b in zip(before, after, strict=True))  # type: ignore[operator]
            shares.append(round(max(0.0, host - lane - own) / (span * (os.cpu_count() or 1)), 3))
            if shares[-1] <= rule.max_host_busy:
                break
        self._sink.put({"kind": "host_wait", "level": level, "class": cls, "attempt": attempt,
                        "waited_s": round(time.monotonic() - started, 1), "limit_s": rule.host_quiet_wait_s,
                        "quiet": bool(shares) and shares[-1] <= rule.max_host_busy, "other_shares": shares[-30:]})

    async def _rep(self, row: RowAttempt, rep: int) -> None:
        queue = rep_order(self.classes[row.cls], row.level)

        async def send(position: int, extra: dict[str, Any]) -> None:
            prompt = queue[position]
            tags = {"phase": "measure", "level": row.level, "class": row.cls, "attempt": row.attempt,
                    "rep": rep, "position": position, "prompt": prompt.id, **extra}
            record = await self.client.stream(CHAT_PATH, self.body(prompt), tags=tags)
            row.requests.append(record)
            if self.facts.count_by_tokenizer:
                held.append(record)  # written once counted, after the clock stops (seconds later)
            else:
                self._sink.put(record)

        held: list[dict[str, Any]] = []
        offsets = None if isinstance(row.level, int) else self._schedule(row.level, row.cls)

        # host, lane and client CPU are read over one window around the rep (the reads included). The
        # client is this event-loop thread: the runner's other threads (each process lane's boot-log copier
        # redacting every engine log line, the heartbeat) are counted apart, as runner_other_cpu_s, so the
        # client's figure compares with benchmarks/client_capacity.py's
        window, cpu, wall = time.perf_counter(), time.thread_time(), time.time()
        process_cpu = time.process_time()
        host, lane = host_busy_seconds(), self.lane_cpu() if self.lane_cpu else None
        lags: list[float] = []
        watch = asyncio.create_task(_watch_loop(lags))
        start = time.perf_counter()
        senders = _senders(send, row.level, len(queue), offsets)
        collecting = gc.isenabled()
        gc.disable()  # cyclic GC over a rep's event dicts took 17% of the client's CPU at 64 streams, in bursts
        try:
            await asyncio.gather(*senders)
        except BaseException:
            for request in held:  # cut short: what arrived is still written, uncounted
                self._sink.put(request)
            raise
        finally:
            watch.cancel()
            if collecting:
                gc.enable()
        duration = time.perf_counter() - start
        host_after, lane_after = host_busy_seconds(), self.lane_cpu() if self.lane_cpu else None
        record = {"kind": "rep", "level": row.level, "class": row.cls, "attempt": row.attempt, "rep": rep,
                  "wall_start": wall, "duration_s": duration, "client_cpu_s": time.thread_time() - cpu,
                  "runner_other_cpu_s": max(0.0, time.process_time() - process_cpu - (time.thread_time() - cpu)),
                  "host_cpus": os.cpu_count(), "host_window_s": time.perf_counter() - window,
                  **_lag_figures(lags)}
        if host is not None and lane is not None and host_after is not None and lane_after is not None:
            record["host_busy_s"], record["lane_cpu_s"] = host_after - host, lane_after - lane
        for request in held:
            await self._count_tokens(request)
            self._sink.put(request)
        row.reps.append(record)
        self._sink.put(record)
        await self._sink.drain()  # the rep's records made durable together, outside its clock

    async def _count_tokens(self, record: dict[str, Any]) -> None:
        """The streamed text counted by the engine's own tokenizer, for an engine that reports no count;
        asked after the rep, so the counting requests never share the clock with the measured ones."""
        if record.get("error") or record.get("status") != 200:
            return
        try:
            record["engine_token_count"] = await self.adapter.count_tokens(self.client, streamed_text(record))
        except EngineError as exc:
            record["engine_token_count_error"] = str(exc)

    async def _scrape(self, level: Level, cls: str, attempt: int, when: str) -> dict[str, Any]:
        record: dict[str, Any] = {"kind": "metrics", "level": level, "class": cls, "attempt": attempt,
                                  "when": when, "wall": time.time()}
        try:
            text = await self.adapter.scrape_metrics(self.client)
            for _ in range(_SETTLE_POLLS):
                if text is None or not self.adapter.metrics_busy(parse_prometheus(text)):
                    break
                await asyncio.sleep(_SETTLE_SLEEP)
                text = await self.adapter.scrape_metrics(self.client)
            record["text"] = text
            record["busy"] = text is not None and self.adapter.metrics_busy(parse_prometheus(text))
        except EngineError as exc:
            record["error"] = str(exc)
        self._sink.put(record)
        return record
