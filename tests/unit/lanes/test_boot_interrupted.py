"""A window interrupted while its lane is starting: the start runs in a thread that a cancel cannot stop, so
the lane it starts after the interrupt is stopped by the boot, not left running (a container left this way
held the daily's port after its window; tests/integration/docker/test_docker_daily.py's SIGINT fallback).
A real process lane; the one thing injected is the delay, so that the cancel lands mid-start every time."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.fsutil import JsonlAppender
from campaign.lanes.runtimes.base import LaunchSpec
from campaign.lanes.runtimes.process import ProcessLane, ProcessRuntime
from campaign.lanes.session import boot_lane


class SlowStart:
    """ProcessRuntime whose start waits for ``release`` (as docker's create and start take seconds)."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.started: list[ProcessLane] = []

    def start(self, spec: LaunchSpec) -> ProcessLane:
        self.entered.set()
        self.release.wait(10)
        lane = ProcessRuntime().start(replace(spec, argv=["sleep", "30"]))
        self.started.append(lane)
        return lane


def test_a_lane_started_after_the_interrupt_is_stopped_not_left_running(tmp_path: Path) -> None:
    lane = EffectiveLane.model_validate({
        "name": "cand", "role": "candidate", "control": "base", "runtime": "process", "engine": "llamacpp",
        "executable": "sleep", "port": 1, "model": {"path": "/m"}})
    runtime = SlowStart()

    async def interrupted() -> None:
        with JsonlAppender(tmp_path / "warm.jsonl") as sink:
            boot = asyncio.create_task(boot_lane(lane, model_path="/m", log_path=tmp_path / "boot.log",
                                                 warm_sink=sink, runtime=runtime))
            await asyncio.to_thread(runtime.entered.wait, 10)
            boot.cancel()  # the window's SIGINT, while the thread is still starting the lane
            await asyncio.sleep(0.1)
            runtime.release.set()
            with pytest.raises(asyncio.CancelledError):
                await boot

    try:
        asyncio.run(interrupted())
        (started,) = runtime.started
        assert not started.alive(), "the lane started after the interrupt is still running"
    finally:
        for left in runtime.started:
            left.stop(timeout=1.0)
