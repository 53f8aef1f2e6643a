"""Boot a lane and prove it serves: launch, readiness within budget, boot-log rules, one real completion.

Anything that goes wrong here raises ``LaunchError`` with a classified cause and the log tail, and
the lane is stopped before the error leaves: a launch failure is INCONCLUSIVE, never a finding.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from campaign.contracts.hashing import sha256_file
from campaign.contracts.model import LANE_FILE_BYTES
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import LaunchError, PreflightError, RunError
from campaign.fsutil import JsonlAppender, UnreadableFile
from campaign.lanes.bootlog import HINTS, check_rules, classify_failure, describe_exit, log_tail, read_log
from campaign.lanes.command import launch_command, resolve_executable, resolve_refs
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.lanecheck import check_lane, is_local, local_model, model_sha256, port_is_free
from campaign.lanes.lanerun import LaneRun
from campaign.lanes.modelcheck import models_unchanged, read_back_models
from campaign.lanes.redact import Redactor, redactor_for
from campaign.lanes.runtimes.base import LaunchSpec, RunningLane, Runtime
from campaign.lanes.runtimes.process import ProcessRuntime
from campaign.lanes.scratch import scratch_path

__all__ = ["LaneRun", "boot_lane", "check_lane", "is_local", "lane_scratch", "launch_command", "local_model",
           "model_sha256", "port_is_free", "files_unchanged", "read_back_files", "resolve_executable", "resolve_refs",
           "runtime_for"]

# A lane whose boot failed is stopped with a short grace: nothing of it is kept, and an engine still loading
# may not act on SIGTERM yet (in a container, an engine that is PID 1 ignores it until it installs a handler:
# llama-server does so only once its model is loaded), which the default grace would wait out in full.
FAILED_BOOT_GRACE_S = 5.0


def lane_scratch(lane: EffectiveLane) -> Path:
    """A fresh folder for what the engine writes during one boot (temp files, caches).

    Keyed by the lane's address, which only one lane can hold at a time, so a control and its
    candidate on the same port see the same path (no undeclared env difference) but never each
    other's files: the folder is emptied before each boot and removed at stop."""
    scratch = scratch_path(lane)
    scratch.parent.mkdir(mode=0o700, exist_ok=True)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(mode=0o700)
    return scratch


def runtime_for(lane: EffectiveLane, redactor: Redactor | None = None) -> Runtime:
    """The lane's runtime; ``redactor``: the boot's own (its engine's env already built), else one made here."""
    redactor = redactor or redactor_for(lane)
    if lane.runtime == "process":
        return ProcessRuntime(redactor)
    if lane.runtime == "docker":
        from campaign.lanes.runtimes.docker import DockerRuntime

        return DockerRuntime(lane, redactor)
    raise PreflightError(f"lane {lane.name}: runtime {lane.runtime!r} is not available yet")


async def boot_lane(lane: EffectiveLane, *, model_path: str, log_path: Path, warm_sink: JsonlAppender,
                    labels: dict[str, str] | None = None, runtime: Runtime | None = None,
                    on_started: Callable[[RunningLane], None] | None = None) -> LaneRun:
    adapter = adapter_for(lane.engine)
    resolved = resolve_refs(lane)
    argv, executable = launch_command(resolved, adapter, model_path)
    if lane.runtime == "process":
        scratch = lane_scratch(lane)
        adapter.seed_scratch(lane, scratch)
    else:  # a container's scratch is a tmpfs at this path inside it: nothing of it on this machine to leave behind
        scratch = scratch_path(lane)
    # one adapter and one engine env per boot: the launch, its log's redactor and its snapshot's share them
    engine_env = adapter.launch_env(lane, str(scratch))
    redactor = redactor_for(lane, engine_env)
    runtime = runtime or runtime_for(lane, redactor)
    env = {**engine_env, **resolved.env}
    started = time.monotonic()
    launching = asyncio.ensure_future(asyncio.to_thread(
        runtime.start, LaunchSpec(lane=lane.name, argv=argv, env=env, log_path=log_path, labels=labels or {},
                                  scratch=str(scratch), cpus=lane.cpus, gpus=lane.gpus)))
    try:
        running = await asyncio.shield(launching)
    except asyncio.CancelledError:
        await _stop_late_start(launching)
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if on_started is not None:
        on_started(running)
    client = LaneClient(lane.base_url, lane=lane.name, api_key=adapter.api_key(resolved))
    run = LaneRun(lane=lane, adapter=adapter, running=running, client=client, boot_seconds=0.0, scratch=scratch)
    try:
        await _wait_ready(run, log_path, started)
        run.boot_seconds = time.monotonic() - started
        problems = check_rules(read_log(log_path), lane.boot_log)
        if problems:
            raise LaunchError(f"lane {lane.name}: " + "; ".join(problems), cause="boot_log_rule",
                              log_tail=log_tail(log_path))
        await _first_completion(run, warm_sink)
        snapshot = running.inspect()
        snapshot["executable_sha256"] = (await asyncio.to_thread(sha256_file, executable)
                                         if executable is not None else None)
        snapshot["files"] = await asyncio.to_thread(read_back_files, running, resolved)
        if lane.models:  # a lane without models keeps the snapshot older bundles have
            snapshot["models"] = await asyncio.to_thread(read_back_models, running, resolved)
        if snapshot.get("launched_gpus") and snapshot.get("gpu_use") == []:
            # nvidia-smi lists other processes' GPU memory but none of this one's: it serves on the CPU
            raise LaunchError(f"lane {lane.name}: asked for GPUs {snapshot['launched_gpus']} but holds no GPU "
                              "memory (nvidia-smi sees other processes, not this one): it serves on the CPU",
                              cause="gpu_unavailable", log_tail=log_tail(log_path))
        run.inspect = redactor.snapshot(snapshot)
        run.engine_version = await adapter.version(client)
    except BaseException:
        await run.stop(timeout=FAILED_BOOT_GRACE_S)
        raise
    return run


async def _stop_late_start(launching: asyncio.Future[RunningLane]) -> None:
    """A window interrupted while its lane starts: a thread cannot be cancelled, so the start goes on (a container
    created and started, on the daily's port) after the interrupt; it is waited for and stopped here, else nothing
    knows of it (the state records a lane's pid or container only once started) and it outlives the window."""
    try:
        running = await launching
    except LaunchError:
        return  # it failed to start: nothing runs
    await asyncio.to_thread(running.stop, 1.0)


def read_back_files(running: RunningLane, lane: EffectiveLane) -> dict[str, dict[str, Any]]:
    """Each lane file's digest read back where the running engine sees it; a file that is not the pinned
    one fails the lane (what ran is not what the contract froze, so nothing it measured counts)."""
    found: dict[str, dict[str, Any]] = {}
    for file in lane.files:
        seen_at = lane.file_seen_at(file)
        try:
            digest = running.file_sha256(seen_at)
        except Exception as exc:  # an engine that cannot hand the file out: the lane cannot be proven
            raise LaunchError(f"lane {lane.name}: cannot read file {file.name} back at {seen_at}: {exc}",
                              cause="file_mismatch") from exc
        found[file.name] = {"path": seen_at, "pinned_sha256": file.sha256, "sha256": digest}
        if digest != file.sha256:
            raise LaunchError(f"lane {lane.name}: file {file.name} at {seen_at} has sha256 {digest}, not the pinned "
                              f"{file.sha256}", cause="file_mismatch")
    return found


def files_unchanged(lane: EffectiveLane) -> None:
    """Each lane file and pinned model still holds the bytes the window measured (promotion starts the
    daily on them later): RunError naming the first that moved or changed."""
    models_unchanged(lane)
    for file in lane.files:
        try:
            digest = sha256_file(Path(file.path), limit=LANE_FILE_BYTES)
        except UnreadableFile as exc:  # gone, or no longer a regular file: said as it is
            why = "is gone" if exc.reason.startswith("no such") else f"is unreadable: {exc.reason}"
            raise RunError(f"lane {lane.name}: file {file.name} ({file.path}) {why}; the daily would read "
                           "something else") from exc
        if digest != file.sha256:
            raise RunError(f"lane {lane.name}: file {file.name} ({file.path}) changed since the window measured it "
                           f"(sha256 {digest[:12]}..., pinned {file.sha256[:12]}...); refusing to promote")


async def _wait_ready(run: LaneRun, log_path: Path, started: float) -> None:
    lane = run.lane
    detail = "not polled"
    # a runtime that can tell why the lane's port leads nowhere (a container without an address) says so at
    # once: waiting out the readiness budget would end in a timeout that names no cause
    unreachable: Callable[[], str | None] = getattr(run.running, "unreachable_because", lambda: None)
    if run.running.alive() and (why := unreachable()):
        raise LaunchError(f"lane {lane.name}: {why}", cause="no_address", log_tail=log_tail(log_path))
    while True:
        if not run.running.alive():
            code = run.running.exit_code()
            tail = log_tail(log_path)
            # runtimes written before it may lack it
            facts: dict[str, Any] = getattr(run.running, "failure_facts", dict)()
            why = f" ({facts['error']})" if facts.get("error") else ""
            # the whole log: vLLM prints the root cause a hundred lines before its last traceback
            full = read_log(log_path) or tail
            cause = classify_failure(f"{full}\n{facts.get('error', '')}", code,
                                     oom_killed=bool(facts.get("oom_killed")), engine=run.adapter.facts)
            hint = f": {HINTS[cause]}" if cause in HINTS else ""
            raise LaunchError(f"lane {lane.name}: {describe_exit(code)} before it was ready{why}{hint}",
                              cause=cause, log_tail=tail)
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
