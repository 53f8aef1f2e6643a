"""A busy host is waited for, bounded: before a row that other processes voided is re-run, the gate waits for
a quiet second (real processes burn the CPUs here; the lane is idle), records the wait, and the judge says it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from campaign.fsutil import JsonlAppender
from campaign.gates.speed.run import SpeedMeasurement
from campaign.gates.speed.spec import SpeedSpec
from tests.support.speedrecords import judge_gate, rates, write_boots

BURN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


class _Sink:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def put(self, record: dict[str, Any]) -> None:
        self.records.append(record)


def _waiter(bound: float) -> tuple[SpeedMeasurement, _Sink]:
    measurement = SpeedMeasurement.__new__(SpeedMeasurement)  # only the wait: no lane, no client
    measurement.spec = SpeedSpec(kind="speed", input="p", rule={"host_quiet_wait_s": bound, "max_host_busy": 0.25})
    measurement.lane_cpu = lambda: 0.0  # an idle lane
    measurement._sink = sink = _Sink()  # type: ignore[assignment]
    return measurement, sink


@pytest.mark.quiet  # another worker's tests would be the other load it waits out
def test_the_wait_ends_when_the_host_quiets_and_gives_up_at_its_bound() -> None:
    burners = [subprocess.Popen([sys.executable, "-c", BURN.format(seconds=4)]) for _ in range(os.cpu_count() or 1)]
    try:
        short, sink = _waiter(2.0)
        asyncio.run(short._wait_for_quiet(1, "prose", 1))
        (held,) = sink.records
        assert held["quiet"] is False and 1.9 <= held["waited_s"] <= 3.5 and held["limit_s"] == 2.0
        assert all(share > 0.5 for share in held["other_shares"]), held
        long, sink = _waiter(20.0)
        asyncio.run(long._wait_for_quiet(1, "prose", 2))
        (quiet,) = sink.records
        assert quiet["quiet"] is True and quiet["other_shares"][-1] <= 0.25 and quiet["waited_s"] < 10, quiet
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def test_no_wait_at_zero_the_old_rule() -> None:
    waiter, sink = _waiter(0.0)
    asyncio.run(waiter._wait_for_quiet(1, "prose", 1))
    assert sink.records == []


def test_the_judge_says_what_the_wait_saw(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path)
    write_boots(gate, [rates(), rates(1.01), rates(0.995)], [rates(1.10), rates(1.11)])
    with JsonlAppender(gate.ctx.raw_path(gate.gate_id, "cand")) as sink:
        sink.append({"kind": "host_wait", "level": 1, "class": "prose", "attempt": 1, "waited_s": 30.0,
                     "limit_s": 30.0, "quiet": False, "other_shares": [0.61, 0.48]})
    result = gate.judge(cand, ctrl)
    assert ("cand C1/prose: before re-run 1 waited 30 s for the host to quiet: it did not within 30 s (other "
            "processes 48% at the end)") in result.caveats
