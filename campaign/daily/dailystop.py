"""`campaign daily stop`: stop the daily this tool started, and refuse one it did not (unless forced).

What `campaign daily start` started is known by a mark in the daily's environment
(``CAMPAIGN_DAILY_STARTED=<mark>``) and a record of that mark under the state folder, one per pidfile
(``$XDG_STATE_HOME/campaign/daily/<digest of the pidfile path>.json``). A window's restore and a rollback
relaunch the daily with the environment read back from /proc, so the mark follows the daily through them,
and a daily started by hand under the same pidfile never has it. A promoted process daily runs the
candidate's measured environment, without the mark: it is the candidate's, and stopping it needs --force. A
container daily is the tool's when `campaign promote` created it (its ``campaign.promoted_from`` label);
one started with `docker run` is the user's. The mark is a number (the start's Unix time): nothing a
secret scan or a redaction takes for a credential.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from campaign.contracts.load import LoadedContract
from campaign.daily import incumbent
from campaign.daily.state import WindowState, process_start_time, state_root, windows_dir
from campaign.errors import InputError, RunError
from campaign.fsutil import UnreadableFile, atomic_write_bytes, load_json_strict

__all__ = ["MARK_ENV", "new_mark", "record_started", "stop_daily", "tool_started"]

MARK_ENV = "CAMPAIGN_DAILY_STARTED"
PROMOTED_LABEL = "campaign.promoted_from"


def _record_path(pidfile: Path) -> Path:
    digest = hashlib.sha256(str(pidfile.resolve()).encode()).hexdigest()[:16]
    return state_root() / "daily" / f"{digest}.json"


def new_mark() -> str:
    return str(time.time_ns() // 1_000_000)  # milliseconds: two starts under one pidfile differ


def record_started(pidfile: Path, pid: int, mark: str, argv: list[str]) -> None:
    """Written by `campaign daily start` once the daily runs (private: mode 0600 under a 0700 folder)."""
    path = _record_path(pidfile)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    record = {"pidfile": str(pidfile.resolve()), "mark": mark, "pid": pid, "start_time": process_start_time(pid),
              "executable": argv[0] if argv else None, "at": time.time()}
    atomic_write_bytes(path, json.dumps(record).encode(), mode=0o600)


def _environ_mark(pid: int) -> str | None:
    from campaign.lanes.runtimes.base import PROC_ARGS_BYTES, read_proc

    try:
        environ = read_proc(f"/proc/{pid}/environ", PROC_ARGS_BYTES)
    except OSError:
        return None
    prefix = f"{MARK_ENV}=".encode()
    return next((item[len(prefix):].decode(errors="replace") for item in environ.split(b"\0")
                 if item.startswith(prefix)), None)


def tool_started(pidfile: Path, pid: int) -> bool:
    """The process ``pid`` is a daily `campaign daily start` started under ``pidfile`` (or the tool's restart
    of it): its environment carries the mark recorded for that pidfile."""
    try:
        record = load_json_strict(_record_path(pidfile), what="daily start record")
    except (UnreadableFile, OSError):
        return False
    mark = _environ_mark(pid)
    return isinstance(record, dict) and mark is not None and mark == record.get("mark")


def _armed_windows() -> list[str]:
    found = windows_dir().glob("*/state.json") if windows_dir().exists() else []
    armed = []
    for state_file in found:
        try:
            state = WindowState.load(state_file.parent.name)
        except (InputError, OSError):
            continue
        if state.armed and not state.restored:
            armed.append(state.window)
    return armed


def stop_daily(loaded: LoadedContract | None, pidfile: Path | None, *, force: bool) -> str:
    """Stop the daily; what was done, in words. Refused (InputError, exit 2) when the tool did not start it
    and ``force`` is not given, and while a window holds the daily (its restore would start it again)."""
    armed = _armed_windows()
    if armed:
        raise InputError(f"window {armed[0]} holds the daily (its failsafe restores it): `campaign abort "
                         f"{armed[0]}` first")
    spec = loaded.contract.incumbent if loaded is not None else None
    if spec is not None and spec.runtime == "docker":
        return _stop_container(spec, force=force)
    if pidfile is None:
        raise InputError("no daily known: give the contract whose incumbent it is (campaign daily stop CONTRACT)")
    pid = incumbent._read_pid(pidfile)
    argv = incumbent._cmdline(pid) if pid is not None else None
    if pid is None or argv is None:
        return f"no daily running (pidfile {pidfile}): nothing to stop"
    ours = tool_started(pidfile, pid)
    if not ours and not force:
        raise InputError(f"daily pid {pid} (pidfile {pidfile}) was not started by `campaign daily start`: "
                         "stop it as it was started, or add --force")
    stop_timeout = spec.stop_timeout if spec is not None else 30.0
    stopped = incumbent.stop({"pidfile": str(pidfile), "argv": argv, "stop_timeout": stop_timeout})
    if stopped is None:
        return f"daily pid {pid} exited meanwhile: nothing to stop"
    if process_start_time(pid) is not None:
        raise RunError(f"daily pid {pid} is still running after SIGTERM and SIGKILL")
    if ours:
        _record_path(pidfile).unlink(missing_ok=True)
    return f"daily stopped: pid {pid}{'' if ours else ' (not started by campaign; --force)'}"


def _stop_container(spec: Any, *, force: bool) -> str:
    from campaign.daily import dailycontainer
    from campaign.errors import PreflightError

    host = spec.docker_host.model_dump(mode="json") if spec.docker_host else None
    try:
        snap = dailycontainer.snapshot(spec.container, host, {"stop_timeout": spec.stop_timeout})
    except PreflightError as exc:
        if "is not running" in str(exc):
            return f"daily container {spec.container} is not running: nothing to stop"
        raise
    promoted = (snap["config"].get("Labels") or {}).get(PROMOTED_LABEL)
    if not promoted and not force:
        raise InputError(f"daily container {spec.container} was started by hand (`docker run`), not by `campaign "
                         "promote`: stop it with `docker stop`, or add --force")
    stopped = dailycontainer.stop(snap)
    how = f"promoted from {promoted}" if promoted else "not started by campaign; --force"
    return (f"daily container {spec.container} stopped ({how}); its restart policy is held at `no` so it stays "
            f"down: `docker start {spec.container}` starts it again" if stopped else
            f"daily container {spec.container} was not running: nothing to stop")
