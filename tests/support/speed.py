"""Shared by the engine-backed speed tests: prompts, a contract, and real servers started by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from campaign.contracts.load import load_contract
from campaign.fsutil import JsonlAppender
from campaign.gates.base import GateContext
from campaign.gates.registry import gate_for
from campaign.gates.speed.run import SpeedMeasurement
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.llamacpp import LlamaCppAdapter
from tests.support.contracts import MODEL, MODEL_SHA256, free_port, write_contract

SPEED_PROMPTS = [
    ("haiku", "prose", "Write a haiku about the sea."),
    ("photosynthesis", "prose", "Explain photosynthesis to a ten-year-old."),
    ("exercise", "prose", "List three benefits of regular exercise."),
    ("letter", "prose", "Write a short letter inviting a friend to dinner."),
    ("fib", "code", "Write a Python function that returns the n-th Fibonacci number."),
    ("sort", "code", "Write a Python function that sorts a list of integers without using sorted()."),
    ("reverse", "code", "Write a Python function that reverses a string."),
    ("json", "code", "Give a JSON object with keys name and age for a person called Ada who is 36."),
]


def write_prompts(path: Path, rows: list[tuple[str, str, str]] = SPEED_PROMPTS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "class": c, "prompt": p}) + "\n" for i, c, p in rows))
    return path


# One engine thread: on 2 shared cores, two llama.cpp threads stall at every barrier whenever anything
# else runs (measured here under load: 1-4 tok/s with --threads 2 against ~30 tok/s with --threads 1).
def speed_contract(port: int, *, gate: str, args: str = '--threads, "1", --parallel, "4"',
                   candidate_env: str = "UNUSED_KNOB") -> str:
    """Two lanes that serve identically: the candidate only sets an environment variable the engine
    never reads (the seeds' dead flag), so the axis is declared and real, and does nothing."""
    return f"""\
        contract: t-speed
        version: 1
        lane_defaults:
          runtime: process
          engine: llamacpp
          executable: llama-server
          port: {port}
          model: {{path: {MODEL}, sha256: {MODEL_SHA256}}}
          args: [--ctx-size, "4096", {args}, --metrics, --seed, "0", --no-webui]
          readiness: {{budget: 120s}}
        lanes:
          - {{name: base, role: control}}
          - name: same
            role: candidate
            axis: [env.{candidate_env}]
            set: {{env: {{{candidate_env}: "1"}}}}
        inputs:
          p: {{file: prompts/p.jsonl}}
        gates:
          - {gate}
        promotion:
          requires: [speed]
        """


@contextmanager
def process(argv: list[str], log: Path, ready_url: str, budget: float = 180.0) -> Iterator[subprocess.Popen]:
    """A real server in its own process group, stopped by its PID whatever happens."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + budget
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(ready_url, timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} not ready within {budget}s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def llama_server_argv(executable: str, port: int, *extra: str) -> list[str]:
    return [executable, "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(port), "--ctx-size", "4096",
            "--threads", "1", "--parallel", "4", "--metrics", "--seed", "0", "--no-webui", *extra]


__all__ = ["SPEED_PROMPTS", "free_port", "llama_server_argv", "process", "speed_contract", "write_prompts"]


def gate_on(tmp_path: Path, gate: str, prompts: list[tuple[str, str, str]] = SPEED_PROMPTS[:2] + SPEED_PROMPTS[4:6]):
    """A speed gate whose raw records go to ``tmp_path/bundle``, driven without a window."""
    contract = load_contract(write_contract(tmp_path, speed_contract(18000, gate=gate)))
    write_prompts(tmp_path / "prompts" / "p.jsonl", prompts)
    ctx = GateContext(bundle=tmp_path / "bundle", contract=contract,
                      input_paths={"p": tmp_path / "prompts" / "p.jsonl"})
    return gate_for(contract.contract.gates[0], ctx), contract


async def measure(gate, base_url: str, visit: str, adapter: LlamaCppAdapter | None = None):
    warm = gate.ctx.bundle / "raw" / gate.gate_id / "warmup" / f"{visit}.jsonl"
    async with LaneClient(base_url, lane=visit) as client:
        with JsonlAppender(gate.ctx.raw_path(gate.gate_id, visit)) as sink, JsonlAppender(warm) as warm_sink:
            return await SpeedMeasurement(gate.spec, gate.prompts(), client=client,
                                          adapter=adapter or LlamaCppAdapter(), model="default", sink=sink,
                                          warm_sink=warm_sink).run()
