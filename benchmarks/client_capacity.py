"""How fast can the speed gate's client go, and how wrong are its clocks?

Starts its own local SSE server (a child process, streaming llama-server-shaped chunks), then drives
the gate's real client (``LaneClient.stream`` on aiohttp, records written by the gate's background writer
and made durable once at the end, cyclic GC held, as a rep does; each stream checked by the gate's
``analyze_stream``) at several concurrency levels, beside the hand-written client it replaced (the "before":
``handwritten_sse.py``, an fsync per record, GC on), a plain aiohttp client and a raw socket:

* capacity: the server streams as fast as it can; reports streamed tok/s, the client's CPU time per
  1,000 tokens and its CPU share (near 100% of a core means the client is the limit), the server's
  CPU share (near 100% means the server is), and how late the client's event loop woke for a 5 ms
  timer at p99 (the gate voids a row past 20 ms: an arrival waits that long to be timed);
* timing: the server sleeps a known TTFT before the first content chunk and a known delay between
  tokens; reports the client's TTFT and inter-token errors. Every client counts from the request's
  write on an open connection and records that moment's wall clock; the server stamps when it read the
  request and when it sent each chunk (one clock on one machine), so the error splits into the server's
  lateness (reading the request late, e.g. from its accept queue, and oversleeping) and the client's
  own (the first token's arrival stamped after the server sent it: transit, parse, scheduling).

    python benchmarks/client_capacity.py                   # the README's figures
    python benchmarks/client_capacity.py --levels 1,4 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import handwritten_sse  # noqa: E402
from campaign.fsutil import JsonlAppender, jsonl_line  # noqa: E402
from campaign.gates.speed.run import RecordWriter, _lag_figures, _watch_loop  # noqa: E402
from campaign.gates.common.streams import StreamFacts, analyze_stream  # noqa: E402
from campaign.lanes.engines.client import LaneClient  # noqa: E402

FACTS = StreamFacts(token_counter="timings.predicted_n")


# ---- the server (child process) ----

def _chunk(payload: str) -> bytes:
    data = f"data: {payload}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ttft: float, itl: float) -> None:
    try:
        while True:
            request_line = await reader.readline()
            if not request_line:
                return
            length = 0
            while True:
                header = await reader.readline()
                if header in (b"\r\n", b"\n", b""):
                    break
                name, _, value = header.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            body = await reader.readexactly(length) if length else b"{}"
            received, received_wall = time.perf_counter(), time.time()
            if not request_line.startswith(b"POST"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}")
                await writer.drain()
                continue
            tokens = int(json.loads(body).get("max_tokens", 256))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            writer.write(_chunk('{"id":"b","choices":[{"index":0,"delta":{"role":"assistant","content":null},'
                                '"finish_reason":null}]}'))
            await writer.drain()
            if ttft:
                await asyncio.sleep(ttft)
            for i in range(tokens):
                if itl and i:
                    await asyncio.sleep(itl)
                srv = time.perf_counter() - received
                writer.write(_chunk(f'{{"id":"b","choices":[{{"index":0,"delta":{{"content":" tok"}},'
                                    f'"finish_reason":null}}],"timings":{{"predicted_n":{i + 1}}},'
                                    f'"srv_t":{srv:.6f},"srv_rcv":{received_wall:.6f},'
                                    f'"srv_snd":{time.time():.6f}}}'))
                if itl or i % 16 == 15:
                    await writer.drain()
            writer.write(_chunk('{"id":"b","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}'))
            writer.write(_chunk(f'{{"id":"b","choices":[],"usage":{{"completion_tokens":{tokens},'
                                f'"prompt_tokens":8}}}}'))
            writer.write(_chunk("[DONE]") + b"0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


def serve(port: int, ttft: float, itl: float) -> None:
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: _serve_one(r, w, ttft, itl), "127.0.0.1", port,
                                            backlog=1024)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---- the client (this process) ----

def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, ttft: float = 0.0, itl: float = 0.0) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(self.port), "--ttft-ms",
                                      str(ttft * 1000), "--itl-ms", str(itl * 1000)], stdout=subprocess.PIPE)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == b"ready"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


async def _peer_aiohttp(port: int) -> Any:
    """A plain aiohttp client, as a user would write one: each SSE line stamped and decoded as it arrives."""
    import aiohttp

    session = aiohttp.ClientSession(f"http://127.0.0.1:{port}", connector=aiohttp.TCPConnector(limit=0))

    async def stream(body: dict[str, Any]) -> dict[str, Any]:
        events, done, start, sent_wall = [], False, time.perf_counter(), time.time()
        async with session.post("/v1/chat/completions", json={**body, "stream": True}) as response:
            async for line in response.content:
                now = time.perf_counter() - start
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                    else:
                        events.append({"t": now, "data": json.loads(payload)})
        return {"status": response.status, "events": events, "done_marker": done, "sent_wall": sent_wall,
                "elapsed_s": time.perf_counter() - start}

    return stream, session.close


async def _peer_raw(port: int) -> Any:
    """The floor: a raw socket per request, the request bytes written by hand, each read stamped, complete
    lines decoded from a buffer (the benchmark's server writes whole events, so chunk framing is skipped)."""

    async def stream(body: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps({**body, "stream": True}).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        start, sent_wall = time.perf_counter(), time.time()  # from the write, as the gate's client counts
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
        events, done, buffer = [], False, b""
        while not done:
            data = await reader.read(65536)
            if not data:
                break
            now = time.perf_counter() - start
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.startswith(b"data:"):
                    if line[5:].strip() == b"[DONE]":
                        done = True
                    else:
                        events.append({"t": now, "data": json.loads(line[5:])})
        writer.close()
        return {"status": 200, "events": events, "done_marker": done, "sent_wall": sent_wall,
                "elapsed_s": time.perf_counter() - start}

    async def close() -> None:
        return None

    return stream, close


async def _gate_client(port: int, writer: RecordWriter) -> Any:
    client = LaneClient(f"http://127.0.0.1:{port}", lane="bench")

    async def stream(body: dict[str, Any]) -> dict[str, Any]:
        record = await client.stream("/v1/chat/completions", body)
        writer.put(record)  # written as the gate writes them, off the event loop
        return record

    return stream, client.aclose


class _SyncEachWriter:
    """The gate's writer before #35: every record fsynced on its own, on the writer thread."""

    def __init__(self, sink: JsonlAppender) -> None:
        self._sink, self._pending = sink, []
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="speed-sink")

    def put(self, record: dict[str, Any]) -> None:
        line = jsonl_line(record)
        self._pending.append(asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(self._sink.append_line, line, sync=True)))

    async def drain(self) -> None:
        pending, self._pending = self._pending, []
        await asyncio.gather(*pending)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


async def _handwritten_client(port: int, writer: _SyncEachWriter) -> Any:
    async def stream(body: dict[str, Any]) -> dict[str, Any]:
        body = {**body, "stream": True}
        record: dict[str, Any] = {"request": body, "wall_start": time.time()}
        response = await handwritten_sse.post_stream(f"http://127.0.0.1:{port}", "/v1/chat/completions", body,
                                                     headers={}, timeout=600.0)
        record.update(status=response.status, events=response.events, done_marker=response.done_marker,
                      elapsed_s=response.elapsed_s, connect_s=response.connect_s, sent_wall=response.sent_wall)
        if response.error:
            record["error"] = response.error
        writer.put(record)
        return record

    async def close() -> None:
        return None

    return stream, close


CLIENTS = {"campaign": _gate_client, "hand-written": _handwritten_client, "aiohttp": _peer_aiohttp,
           "raw-socket": _peer_raw}
WRITES = {"campaign": RecordWriter, "hand-written": _SyncEachWriter}  # the peers keep records in memory only


async def drive(port: int, level: int, requests_per_user: int, tokens: int, sink_dir: Path,
                client: str = "campaign") -> dict[str, Any]:
    records: list[dict[str, Any]] = []
    lags: list[float] = []
    with JsonlAppender(sink_dir / f"{client}-c{level}-{time.monotonic_ns()}.jsonl") as sink:
        writer = WRITES.get(client, RecordWriter)(sink)
        factory = CLIENTS[client]
        stream, close = await (factory(port, writer) if client in WRITES else factory(port))
        try:
            await stream({"max_tokens": 2})  # imports and first connection outside the clock

            async def user() -> None:
                for _ in range(requests_per_user):
                    records.append(await stream({"model": "x", "max_tokens": tokens, "messages": []}))

            watch = asyncio.create_task(_watch_loop(lags))
            cpu, start = time.process_time(), time.perf_counter()
            if client == "campaign":  # as the gate's rep does
                gc.disable()
            try:
                await asyncio.gather(*(user() for _ in range(level)))
                await writer.drain()
            finally:
                gc.enable()
                watch.cancel()
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        finally:
            await close()
            writer.close()
    stats = [analyze_stream(r, tokens, FACTS) for r in records]
    bad = [problem for s, problem in stats if s is None]
    good = [s for s, _ in stats if s is not None]
    total = sum(s.tokens for s in good)
    return {"records": records, "stats": good, "errors": bad, "wall_s": wall, "client_cpu_s": cpu,
            "tok_s": total / wall, "tokens": total, "loop_lag_p99_ms": _lag_figures(lags).get("loop_lag_p99_ms")}


def _srv_times(record: dict[str, Any]) -> list[tuple[float, float]]:
    """(client arrival, server send) of each content chunk, both seconds after the request."""
    return [(e["t"], e["data"]["srv_t"]) for e in record["events"] if "srv_t" in e.get("data", {})]


def capacity(levels: list[int], tokens: int, budget_tokens: int, sink_dir: Path,
             clients: list[str]) -> list[dict[str, Any]]:
    rows = []
    for level in levels:
        for client in clients:  # one server per client and level: none inherits another's state
            server = Server()
            try:
                per_user = max(2, budget_tokens // (tokens * level))
                srv_cpu = _cpu_seconds(server.proc.pid)
                result = asyncio.run(drive(server.port, level, per_user, tokens, sink_dir, client))
                srv_cpu = _cpu_seconds(server.proc.pid) - srv_cpu
            finally:
                server.stop()
            ttfts = [s.ttft_s for s in result["stats"]]
            rows.append({"client": client, "level": level, "requests": len(result["records"]),
                         "errors": len(result["errors"]), "tok_s": round(result["tok_s"]),
                         "client_cpu_ms_per_1k_tokens": round(1e6 * result["client_cpu_s"] / result["tokens"], 1),
                         "client_cpu_share": round(result["client_cpu_s"] / result["wall_s"], 2),
                         "server_cpu_share": round(srv_cpu / result["wall_s"], 2),
                         "median_ttft_ms": round(1000 * statistics.median(ttfts), 1),
                         "loop_lag_p99_ms": _ms(result["loop_lag_p99_ms"])})
    return rows


def timing(levels: list[int], ttft: float, itl: float, tokens: int, requests: int,
           sink_dir: Path, clients: list[str]) -> list[dict[str, Any]]:
    rows = []
    for level, client in [(level, client) for level in levels for client in clients]:
        server = Server(ttft, itl)
        try:
            result = asyncio.run(drive(server.port, level, max(2, requests // level), tokens, sink_dir, client))
        finally:
            server.stop()
        ttft_err, server_late, client_late, itl_err, decode_err = [], [], [], [], []
        for record, stats in zip(result["records"], result["stats"]):
            times = _srv_times(record)
            first = next(e["data"] for e in record["events"] if "srv_snd" in e.get("data", {}))
            ttft_err.append(stats.ttft_s - ttft)  # against the injected value
            # the server's part: it read the request late (accept queue, busy loop), then overslept
            server_late.append(first["srv_rcv"] - record["sent_wall"] + times[0][1] - ttft)
            # the client's part: its stamp of the first token after the server sent it
            client_late.append(record["sent_wall"] + stats.ttft_s - first["srv_snd"])
            gaps = [(b[0] - a[0]) - (b[1] - a[1]) for a, b in zip(times, times[1:])]
            itl_err.append(statistics.fmean(abs(g) for g in gaps))
            server_rate = (len(times) - 1) / (times[-1][1] - times[0][1])
            decode_err.append(stats.decode_tok_s / server_rate - 1)
        ms = lambda values: round(1000 * statistics.median(values), 2)  # noqa: E731
        rows.append({"client": client, "level": level, "requests": len(result["records"]),
                     "errors": len(result["errors"]), "ttft_error_ms": ms(ttft_err),
                     "ttft_error_ms_p95": round(1000 * sorted(ttft_err)[int(0.95 * (len(ttft_err) - 1))], 2),
                     "of_which_server_ms": ms(server_late), "of_which_client_ms": ms(client_late),
                     "itl_jitter_ms": round(1000 * statistics.fmean(itl_err), 3),
                     "decode_rate_error": f"{statistics.median(decode_err):+.2%}",
                     "client_cpu_share": round(result["client_cpu_s"] / result["wall_s"], 2),
                     "loop_lag_p99_ms": _ms(result["loop_lag_p99_ms"])})
    return rows


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _table(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(str(r[c]).rjust(w) for c, w in zip(columns, widths)) for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="injected TTFT (timing run)")
    parser.add_argument("--itl-ms", type=float, default=5.0, help="injected inter-token delay (timing run)")
    parser.add_argument("--levels", default="1,16,64", help="concurrency levels")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per reply (capacity run)")
    parser.add_argument("--budget-tokens", type=int, default=200_000, help="tokens per capacity level")
    parser.add_argument("--timing-requests", type=int, default=48, help="requests per timing level")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="clients compared (campaign is the gate's)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.ttft_ms / 1000, args.itl_ms / 1000)
        return
    levels = [int(x) for x in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="client-capacity-") as tmp:
        load = os.getloadavg()[0]
        clients = [c for c in CLIENTS if c in args.clients.split(",")]
        cap = capacity(levels, args.tokens, args.budget_tokens, Path(tmp), clients)
        tim = timing(levels, args.ttft_ms / 1000, args.itl_ms / 1000, 64, args.timing_requests, Path(tmp), clients)
    print(f"host: {os.cpu_count()} cores, load average {load:.2f} at start; python {sys.version.split()[0]}")
    print(f"\ncapacity: server streams {args.tokens}-token replies as fast as it can")
    print(_table(cap))
    print(f"\ntiming: injected TTFT {args.ttft_ms:g} ms, inter-token delay {args.itl_ms:g} ms, 64-token replies")
    print(_table(tim))
    print("\nthe gate's client against its peers, measured in this run:")
    for line in _ratios(cap, tim):
        print("  " + line)
    if args.json:
        args.json.write_text(json.dumps({"load_average": load, "capacity": cap, "timing": tim}, indent=2))


def _ratios(cap: list[dict[str, Any]], tim: list[dict[str, Any]]) -> list[str]:
    lines = []
    for level in sorted({r["level"] for r in cap}):
        at = {r["client"]: r for r in cap if r["level"] == level}
        mine = at.get("campaign")
        for peer in [c for c in at if c != "campaign"]:
            if mine:
                lines.append(f"C{level}: tok/s {mine['tok_s'] / at[peer]['tok_s']:.2f}x {peer}'s; CPU per 1k tokens "
                             f"{mine['client_cpu_ms_per_1k_tokens']} ms vs {at[peer]['client_cpu_ms_per_1k_tokens']} ms; loop "
                             f"lag p99 {mine['loop_lag_p99_ms']} ms vs {at[peer]['loop_lag_p99_ms']} ms")
    for level in sorted({r["level"] for r in tim}):
        at = {r["client"]: r for r in tim if r["level"] == level}
        if "campaign" in at and "raw-socket" in at:
            mine, floor = at["campaign"], at["raw-socket"]
            lines.append(f"C{level}: TTFT error {mine['ttft_error_ms']} ms, the raw socket's {floor['ttft_error_ms']} ms "
                         f"({mine['ttft_error_ms'] - floor['ttft_error_ms']:+.2f} ms); the client's own part "
                         f"{mine['of_which_client_ms']} ms (the raw socket's {floor['of_which_client_ms']} ms), the "
                         f"rest the server's lateness")
    return lines


if __name__ == "__main__":
    main()
