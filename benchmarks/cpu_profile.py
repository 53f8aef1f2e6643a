"""Per-test wall time and this machine's CPU use over it, a pytest plugin: which tests compute and which wait
(for a container, a timer, a failsafe), the figure that says what could overlap the unit tests (#47).

    # with make test's PATH and LLAMA_CPP_PYTHON (engines on the path); one process, not under xdist
    PYTHONPATH=benchmarks CPU_PROFILE_OUT=/tmp/cpu.jsonl .venv/bin/python -m pytest -q -p cpu_profile -m integration
    python benchmarks/cpu_profile.py /tmp/cpu.jsonl   # the slowest tests with their share of the cores

Machine-wide (/proc/stat), so run it with nothing else on the machine; under pytest-xdist the figures of
two workers overlap and mean nothing."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest


def _cpu() -> tuple[int, int]:
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]  # all jiffies, idle and iowait


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    started, (total0, idle0) = time.monotonic(), _cpu()
    yield
    wall, (total1, idle1) = time.monotonic() - started, _cpu()
    spent = total1 - total0
    busy = (spent - (idle1 - idle0)) / spent if spent else 0.0
    with open(os.environ.get("CPU_PROFILE_OUT", "cpu-profile.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps({"test": item.nodeid, "wall_s": round(wall, 2), "busy": round(busy, 3)}) + "\n")


def main(path: str) -> None:
    with open(path, encoding="utf-8") as rows_file:
        rows = [json.loads(line) for line in rows_file]
    wall = sum(row["wall_s"] for row in rows)
    busy = sum(row["wall_s"] * row["busy"] for row in rows)
    print(f"{len(rows)} tests, {wall:.0f} s, the cores busy {busy / wall:.0%} of it on average")
    for row in sorted(rows, key=lambda row: -row["wall_s"])[:15]:
        print(f"{row['wall_s']:7.1f} s  busy {row['busy']:4.0%}  {row['test'][:100]}")


if __name__ == "__main__":
    main(sys.argv[1])
