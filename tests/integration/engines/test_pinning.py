"""CPU pinning as a lane field and for the speed client, on a real llama-server: every engine thread
runs on the lane's cpus (read back from the kernel, recorded in inspect.json), the speed client's
threads on its own while it measures and as they were after; a pinning the contract did not declare
as the axis is a runtime one-axis mismatch."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.units import format_cpuset
from campaign.fsutil import JsonlAppender, atomic_write_json
from campaign.lanes.hostcpu import pinned_threads
from campaign.lanes.session import boot_lane
from campaign.window.inspectdiff import runtime_axis_difference
from tests.support.contracts import MODEL, free_port, llama_server_lane

pytestmark = pytest.mark.integration


def lane(name: str, cpus: str | None, port: int, role: str = "control") -> EffectiveLane:
    return llama_server_lane(name, port, role, cpus=cpus)


def boot_and_inspect(spec: EffectiveLane, tmp_path: Path) -> tuple[dict, set[str]]:
    async def go() -> tuple[dict, set[str]]:
        with JsonlAppender(tmp_path / f"{spec.name}-warm.jsonl") as sink:
            run = await boot_lane(spec, model_path=str(MODEL), log_path=tmp_path / f"{spec.name}.log",
                                  warm_sink=sink, labels={"campaign.window": f"pinning-{os.getpid()}"})
            try:
                pid = run.inspect["pid"]
                threads = {_allowed(pid, tid) for tid in os.listdir(f"/proc/{pid}/task")}
                return run.inspect, threads
            finally:
                await run.stop()

    return asyncio.run(go())


def _allowed(pid: int, tid: str) -> str:
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def test_every_engine_thread_runs_on_the_lanes_cpus_and_an_undeclared_pinning_is_caught(tmp_path: Path) -> None:
    first = min(os.sched_getaffinity(0))
    pinned, threads = boot_and_inspect(lane("d", str(first), free_port(), role="candidate"), tmp_path)
    assert pinned["cpus"] == pinned["launched_cpus"] == str(first)
    assert len(threads) == 1 and threads == {str(first)}  # --threads 2: its worker threads inherited the mask
    free, _ = boot_and_inspect(lane("c", None, free_port()), tmp_path)
    assert free["cpus"] == format_cpuset(os.sched_getaffinity(0)) and free["launched_cpus"] is None
    atomic_write_json(tmp_path / "lanes" / "c" / "inspect.json", free)
    atomic_write_json(tmp_path / "lanes" / "d" / "inspect.json", pinned)
    control, candidate = lane("c", None, 1), lane("d", str(first), 1, role="candidate")
    assert runtime_axis_difference(tmp_path, control, candidate, {"cpus"}) == ""
    assert runtime_axis_difference(tmp_path, control, candidate, set()) == "ran with undeclared differences cpus"


def test_the_client_is_pinned_while_it_measures_and_put_back_after() -> None:
    before = os.sched_getaffinity(0)
    target = str(max(before))
    with pinned_threads(target) as in_force:
        assert in_force == target and os.sched_getaffinity(0) == {int(target)}
        seen = []
        worker = __import__("threading").Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        worker.start()
        worker.join()
        assert seen == [{int(target)}]  # a thread started meanwhile inherits the mask
    assert os.sched_getaffinity(0) == before
