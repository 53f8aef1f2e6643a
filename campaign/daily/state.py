"""A window's private state, kept outside the bundle (it holds the incumbent's full environment).

``$XDG_STATE_HOME/campaign/windows/<window>/`` (default ``~/.local/state``), mode 0700: ``state.json``
(atomic), ``heartbeat`` (the runner's boot-clock time), ``lock`` (restore runs under it), and the
restored incumbent's log. The failsafe reads only this directory, so it works after the runner died.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from campaign.errors import InputError
from campaign.fsutil import UnreadableFile, atomic_write_bytes, load_json_strict, read_text_bounded
from campaign.lanes.runtimes.base import read_proc

__all__ = ["PIDFILE_BYTES", "FailsafeFailure", "LaneProcess", "WindowState", "boot_id", "boottime", "mark_disarmed",
           "process_start_time",
           "record_arming", "state_root",
           "windows_dir"]


# state.json holds the daily's snapshot, its environment included (the kernel holds a process's environment to
# a few MB): 16 MiB. The heartbeat is one number; a pidfile one pid (a watchdog's: and its start time).
STATE_BYTES = 16 << 20
HEARTBEAT_BYTES = 64
PIDFILE_BYTES = 64


def state_root() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "campaign"


def windows_dir() -> Path:
    return state_root() / "windows"


def boot_id() -> str:
    try:
        return read_proc("/proc/sys/kernel/random/boot_id").decode(errors="replace").strip()
    except OSError:
        return "unknown"


def boottime() -> float:
    """Seconds since boot, counting suspend: wall-clock changes and sleep cannot move a deadline."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def process_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` (clock ticks since boot): tells a live process from a reused pid."""
    try:
        stat = read_proc(f"/proc/{pid}/stat").decode(errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):  # dead, not yet reaped (an init that does not reap keeps zombies around)
        return None
    return int(fields[19])


# A SIGKILLed llama-server holds its port until the kernel has torn it down; a daily started on that port
# in the meantime dies at bind, so whoever stops a process waits for it to be gone.
EXIT_WAIT_S = 10.0


def wait_gone(pid: int, seconds: float) -> bool:
    """Wait until ``pid`` has exited (reaping it if it is ours); False if it still runs after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if process_start_time(pid) is None:  # gone, or a zombie: its sockets and memory are released
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


class LaneProcess(BaseModel):
    model_config = ConfigDict(extra="forbid")

    visit: str
    pid: int | None = None
    start_time: int | None = None
    container: str | None = None
    docker_host: dict[str, Any] | None = None
    scratch: str | None = Field(None, description="The lane's scratch folder on this machine (lanes/scratch.py), "
                                "recorded before the folder is made (pid and container come once the lane "
                                "starts): removed once the restore has stopped the lane, or found empty, so a "
                                "killed runner leaves none.")


class FailsafeFailure(BaseModel):
    """The failsafe gave up restoring the daily: kept in the state so `campaign status` can say so."""

    model_config = ConfigDict(extra="forbid")

    at: float = Field(description="Wall time of the final failure.")
    error: str
    by: str
    attempts: int


class WindowState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    window: str
    bundle: str
    contract: str
    record: str
    runner_pid: int
    runner_start_time: int | None = None
    boot_id: str
    started_at: float = Field(default_factory=time.time, description="Wall time the window began (not a resume).")
    deadline_boottime: float | None = Field(None, description="Boot-clock second by which the daily must serve.")
    deadline_wall: float | None = None
    heartbeat_grace: float = 60.0
    failsafe_generation: int = 0
    failsafe_backend: str | None = None
    failsafe_unit: str | None = None
    armed: bool = False
    failsafe_failed: FailsafeFailure | None = None  # optional: a state written before it existed still loads
    incumbent: dict[str, Any] | None = None  # the full snapshot, env included: never copied to the bundle
    incumbent_api_key: str | None = Field(None, description="The daily's API key as the runner had it (the "
                                          "contract's api_key_env): a systemd timer restores in a bare "
                                          "environment and needs it for the proof completion. Private, as the "
                                          "snapshot's env is.")
    incumbent_stopped: bool = False
    restored: bool = False
    lanes: list[LaneProcess] = Field(default_factory=list)
    allowed_paths: list[str] = Field(default_factory=list, description="Roots outside the contract's folder "
                                                                        "the runner allowed (--allow-path).")
    boxes: list[str] = Field(default_factory=list, description="The boxes the window uses (this machine, or "
                                                               "another box's engine URL), as `status` shows them.")
    failsafe_container: str | None = Field(None, description="engine failsafe: the watchdog container's id.")
    failsafe_supervisor: str | None = Field(None, description="Which supervisor outside the runner's process "
                                            "tree keeps the deadline (the engine's watchdog container, the "
                                            "systemd timer, the periodic check), or \"none\", as said at arm time.")

    @property
    def directory(self) -> Path:
        return windows_dir() / self.window

    @classmethod
    def load(cls, window: str) -> "WindowState":
        path = windows_dir() / window / "state.json"
        try:
            return cls.model_validate(load_json_strict(path, limit=STATE_BYTES))
        except ValidationError as exc:  # written by another version of the tool, or by hand
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise InputError(f"{path}: {where}: {first['msg']} ({exc.error_count()} problem(s))") from exc

    def save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.directory, 0o700)
        atomic_write_bytes(self.directory / "state.json", self.model_dump_json(indent=2).encode())
        os.chmod(self.directory / "state.json", 0o600)

    def beat(self) -> None:
        atomic_write_bytes(self.directory / "heartbeat", f"{boottime():.3f}\n".encode())

    def last_beat(self) -> float | None:
        try:
            return float(read_text_bounded(self.directory / "heartbeat", HEARTBEAT_BYTES, what="heartbeat"))
        except (UnreadableFile, ValueError):
            return None

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Restore and state changes that race with the failsafe run under this lock."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.directory / "lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def reload(self) -> "WindowState":
        return WindowState.load(self.window)


def record_arming(state: WindowState, backend: str, deadline_s: float, *, boot_clock: bool = True) -> WindowState:
    """A new failsafe generation with its deadline, armed, saved before the backend starts. ``boot_clock``:
    the deadline is this machine's too (not for a watchdog on another box, which keeps its own)."""
    with state.locked():
        state = state.reload()
        state.failsafe_generation += 1
        state.failsafe_backend = backend
        state.deadline_boottime = boottime() + deadline_s if boot_clock else None
        state.deadline_wall = time.time() + deadline_s
        state.armed = True
        state.failsafe_failed = None  # a failure of an earlier generation is not this one's
        state.save()
    return state


def mark_disarmed(state: WindowState) -> None:
    with state.locked():
        fresh = state.reload()
        fresh.armed = False
        fresh.save()
