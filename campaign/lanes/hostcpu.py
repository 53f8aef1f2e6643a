"""CPU time of the host and of a lane's processes (Linux /proc), so a measurement can tell whether
something else was using the machine while it ran: a shared box makes wall-clock speed a coin flip.
And CPU pinning: the speed client kept off the engine's cores.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from campaign.contracts.units import format_cpuset, parse_cpuset
from campaign.errors import PreflightError
from campaign.lanes.runtimes.base import PROC_ARGS_BYTES, read_proc

__all__ = ["check_cpus_here", "host_busy_seconds", "pinned_threads", "session_cpu_seconds"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def host_busy_seconds() -> float | None:
    """CPU seconds the host spent not idle, summed over CPUs (user, nice, system, irq, softirq, and
    steal: time a hypervisor gave to other tenants). None where /proc/stat is missing."""
    try:
        fields = read_proc("/proc/stat", PROC_ARGS_BYTES).decode(errors="replace").splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICK


def session_cpu_seconds(session: int) -> float | None:
    """CPU seconds of every live process in a session (a process lane starts one of its own), plus
    what its leader collected from children that already exited. None if the leader is gone."""
    total, found = 0.0, False
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = read_proc(Path(entry.path, "stat")).decode(errors="replace")
        except OSError:
            continue  # exited while we looked
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) != session:
            continue
        total += int(fields[11]) + int(fields[12])
        if int(entry.name) == session:
            found = True
            total += int(fields[13]) + int(fields[14])
    return total / _TICK if found else None


def check_cpus_here(cpus: str, what: str) -> None:
    """Refuse, before anything starts, a cpuset this runner cannot use."""
    here = os.sched_getaffinity(0)
    if missing := parse_cpuset(cpus) - here:
        raise PreflightError(f"{what}: cpus {cpus} include {format_cpuset(missing)}, which this runner cannot "
                             f"use (it may use {format_cpuset(here)})")


@contextlib.contextmanager
def pinned_threads(cpus: str | None) -> Iterator[str]:
    """Every thread of this process on ``cpus`` while inside (threads started meanwhile inherit the mask
    from the one that starts them), each put back as it was after; yields the set in force."""
    if not cpus:
        yield format_cpuset(os.sched_getaffinity(0))
        return
    wanted, saved = parse_cpuset(cpus), {}
    for tid in _threads():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            saved[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, wanted)
    try:
        yield format_cpuset(os.sched_getaffinity(0))
    finally:
        for tid in _threads():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, saved.get(tid, saved.get(os.getpid(), wanted)))


def _threads() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return [0]

