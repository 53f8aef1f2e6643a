"""Boot a lane and prove it serves: launch, readiness within budget, boot-log rules, one real completion.

Anything that goes wrong here raises ``LaunchError`` with a classified cause and the log tail, and
the lane is stopped before the error leaves: a launch failure is INCONCLUSIVE, never a finding.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campaign.contracts.hashing import sha256_file
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import LaunchError, PreflightError
from campaign.fsutil import JsonlAppender
from campaign.lanes.adapter import EngineAdapter, adapter_for
from campaign.lanes.bootlog import check_rules, classify_failure, log_tail
from campaign.lanes.client import LaneClient
from campaign.lanes.process import ProcessRuntime
from campaign.lanes.runtime import LaunchSpec, RunningLane, Runtime

__all__ = ["LaneRun", "boot_lane", "lane_scratch", "port_is_free", "resolve_executable", "runtime_for"]


@dataclass
class LaneRun:
    lane: EffectiveLane
    adapter: EngineAdapter
    running: RunningLane
    client: LaneClient
    boot_seconds: float
    inspect: dict[str, Any] = field(default_factory=dict)
    engine_version: dict[str, Any] = field(default_factory=dict)
    scratch: Path | None = None

    async def stop(self) -> int | None:
        await self.client.aclose()
        code = await asyncio.to_thread(self.running.stop)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return code


def lane_scratch(lane: EffectiveLane) -> Path:
    """A fresh folder for what the engine writes during one boot (temp files, caches).

    Keyed by the lane's address, which only one lane can hold at a time, so a control and its
    candidate on the same port see the same path (no undeclared env difference) but never each
    other's files: the folder is emptied before each boot and removed at stop."""
    base = Path(tempfile.gettempdir()) / f"campaign-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    scratch = base / f"lane-{lane.host}-{lane.port}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(mode=0o700)
    return scratch


def runtime_for(lane: EffectiveLane) -> Runtime:
    if lane.runtime == "process":
        return ProcessRuntime()
    raise PreflightError(f"lane {lane.name}: runtime {lane.runtime!r} is not available yet")


def resolve_executable(lane: EffectiveLane) -> str:
    found = shutil.which(lane.executable or "")
    if not found:
        raise PreflightError(f"lane {lane.name}: executable {lane.executable!r} not found on PATH")
    return found


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


async def boot_lane(lane: EffectiveLane, *, model_path: str, log_path: Path, warm_sink: JsonlAppender,
                    labels: dict[str, str] | None = None, runtime: Runtime | None = None) -> LaneRun:
    adapter = adapter_for(lane.engine)
    executable = resolve_executable(lane)
    argv = [executable, *adapter.server_args(lane, model_path)]
    runtime = runtime or runtime_for(lane)
    scratch = lane_scratch(lane)
    env = {**adapter.launch_env(lane, str(scratch)), **lane.env}
    started = time.monotonic()
    try:
        running = await asyncio.to_thread(runtime.start, LaunchSpec(lane=lane.name, argv=argv, env=env,
                                                                    log_path=log_path, labels=labels or {}))
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    client = LaneClient(lane.base_url, lane=lane.name)
    run = LaneRun(lane=lane, adapter=adapter, running=running, client=client, boot_seconds=0.0, scratch=scratch)
    try:
        await _wait_ready(run, log_path, started)
        run.boot_seconds = time.monotonic() - started
        problems = check_rules(log_path.read_text(errors="replace"), lane.boot_log)
        if problems:
            raise LaunchError(f"lane {lane.name}: " + "; ".join(problems), cause="boot_log_rule",
                              log_tail=log_tail(log_path))
        await _first_completion(run, warm_sink)
        run.inspect = running.inspect()
        run.inspect["executable_sha256"] = await asyncio.to_thread(sha256_file, Path(executable))
        run.engine_version = await adapter.version(client)
    except BaseException:
        await run.stop()
        raise
    return run


async def _wait_ready(run: LaneRun, log_path: Path, started: float) -> None:
    lane = run.lane
    detail = "not polled"
    while True:
        if not run.running.alive():
            code = run.running.exit_code()
            tail = log_tail(log_path)
            # the whole log: vLLM prints the root cause a hundred lines before its last traceback
            full = log_path.read_text(errors="replace") if log_path.exists() else tail
            raise LaunchError(f"lane {lane.name}: exited with code {code} before it was ready",
                              cause=classify_failure(full, code), log_tail=tail)
        readiness = await run.adapter.probe(run.client)
        if readiness.ready:
            return
        detail = readiness.detail
        if time.monotonic() - started > lane.readiness.budget:
            raise LaunchError(f"lane {lane.name}: not ready within its {lane.readiness.budget:g}s budget "
                              f"(last: {detail})", cause="readiness_timeout", log_tail=log_tail(log_path))
        await asyncio.sleep(lane.readiness.poll_interval)


async def _first_completion(run: LaneRun, sink: JsonlAppender) -> None:
    """Readiness ends with one real completion: a health route can say 200 while serving nothing."""
    record = await run.client.post("/v1/chat/completions", {
        "model": run.adapter.served_model(run.lane), "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "user", "content": "Say hello."}]}, sink=sink, tags={"purpose": "first_completion"})
    choices = (record.get("response") or {}).get("choices") or []
    if record.get("error") or not choices:
        raise LaunchError(f"lane {run.lane.name}: first completion failed: {record.get('error', 'no choices')}",
                          cause="first_completion_failed")
