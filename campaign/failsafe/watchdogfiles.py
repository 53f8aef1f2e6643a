"""What the arming side (``failsafe``) and the watchdogs themselves (``watchdog``) both need: the pid and
ack files of a watchdog pair, and starting a watchdog as a detached process.

Kept apart so that neither of those two modules imports the other: the watchdog is started by module
name (``python -m campaign.failsafe.watchdog``), never by importing it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from campaign.daily.state import PIDFILE_BYTES, WindowState, process_start_time
from campaign.fsutil import UnreadableFile, atomic_write_bytes, read_text_bounded

__all__ = ["LOG_NAME", "ack_path", "alive", "pidfile", "record_pid", "spawn_detached", "spawn_watchdog"]

LOG_NAME = "watchdog.log"  # in the window's state folder: the failsafe's log, whoever writes it


def pidfile(state: WindowState, generation: int, role: str) -> Path:
    return state.directory / f"watchdog-{generation}-{role}.pid"


def ack_path(state: WindowState, generation: int, role: str) -> Path:
    return state.directory / (f"watchdog-{generation}.ack" if role == "a" else f"watchdog-{generation}-{role}.ack")


def alive(path: Path) -> bool:
    """Whether the watchdog recorded in ``path`` (pid and kernel start time) still runs."""
    try:
        pid, start = (int(x) for x in read_text_bounded(path, PIDFILE_BYTES, what="watchdog pidfile").split())
    except (UnreadableFile, ValueError):
        return False
    return process_start_time(pid) == start


def record_pid(path: Path, pid: int) -> None:
    atomic_write_bytes(path, f"{pid} {process_start_time(pid)}\n".encode())


def spawn_detached(args: list[str], log: Path) -> int:
    """``python -m campaign.failsafe.watchdog ARGS`` in its own session, so the spawner's death (kill -9, a
    lost SSH session) does not take it along; its output goes to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as handle:
        popen = subprocess.Popen([sys.executable, "-m", "campaign.failsafe.watchdog", *args],
                                 stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                 start_new_session=True, close_fds=True)
    return popen.pid


def spawn_watchdog(state: WindowState, generation: int, role: str) -> int:
    return spawn_detached([state.window, str(generation), "--role", role], state.directory / LOG_NAME)
