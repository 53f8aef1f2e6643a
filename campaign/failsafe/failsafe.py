"""Failsafe backends: whatever happens to the runner, the daily serves again by the deadline.

``auto`` picks the watchdog container on the daily's engine for a daily container (``enginefailsafe``; on
this machine's engine when the lanes are containers there too, and it falls back to the process daily's
backend when the daily's image has no python),
else a systemd transient timer in system scope where systemd runs (``/run/systemd/system``), otherwise
the detached watchdog pair (``campaign.failsafe.watchdog``), which the periodic check (``supervisor``)
backs from outside the runner's process tree where it is installed. Both are checked before the incumbent
is touched: a dry run fires a harmless action on the backend's own timer, and after arming the backend
must report itself active. Either failing leaves the incumbent untouched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from campaign.daily.state import WindowState, mark_disarmed, record_arming
from campaign.errors import PreflightError
from campaign.failsafe.watchdogfiles import LOG_NAME, ack_path, pidfile, record_pid, spawn_detached, spawn_watchdog

__all__ = ["arm", "choose_backend", "disarm", "dry_run", "fallback_backend", "spawn_watchdog"]

# long enough that the detached watchdog must outlive its starter and its clock loop must tick; a window pays it
DRY_RUN_AFTER = 0.25
DRY_RUN_WAIT = 15.0
ACK_WAIT = 15.0  # a watchdog that has not acked by then is not trusted with the daily


def choose_backend(requested: str, daily: Any = None, lanes: Iterable[Any] = ()) -> str:
    """``auto``: a daily container is guarded by a watchdog container on its own engine (the engine restarts
    it, whatever kills the runner's processes): always for another box's engine, and on this machine's when
    every lane is a container there too (the watchdog removes the window's lane containers before it starts
    the daily; a lane process holding the daily's port is out of its reach, and the runner-side failsafe
    stops those). Else systemd where it runs, else the watchdog pair (with the periodic check, if
    installed, outside it)."""
    container = daily is not None and daily.runtime == "docker"
    if requested == "engine" and not container:
        raise PreflightError("failsafe.backend engine keeps the deadline beside a daily container: this daily is "
                             "not a container")
    if requested != "auto":
        return requested
    if container and (not _engine_is_local(daily.docker_host) or
                      all(lane.runtime == "docker" and _engine_is_local(lane.docker_host) for lane in lanes)):
        return "engine"
    return "systemd" if Path("/run/systemd/system").is_dir() and shutil.which("systemd-run") else "watchdog"


def fallback_backend(spec: Any, daily: Any) -> str | None:
    """What ``auto`` falls back to when the engine's watchdog cannot run (the daily's image has no python):
    the backend of a process daily, for a daily on this machine's own engine whose contract did not ask for
    the engine watchdog by its settings (image, python, mounts). None: no fallback, the refusal stands (a
    daily on another box: this machine may be what dies)."""
    asked = {"image", "python", "mounts"} & set(spec.model_fields_set)
    if spec.backend != "auto" or asked or daily is None or not _engine_is_local(daily.docker_host):
        return None
    return choose_backend("auto")


def _engine_is_local(host: Any) -> bool:
    from campaign.lanes.runtimes.dockerhost import is_local

    return is_local(host)


def dry_run(backend: str, state_dir: Path) -> str:
    """Arm a short dummy timer on the backend and see it fire."""
    try:
        return _dry_run(backend, state_dir)
    except PreflightError as exc:
        raise PreflightError(f"failsafe dry run failed, so the incumbent was not touched: {exc}") from exc


def _dry_run(backend: str, state_dir: Path) -> str:
    with tempfile.TemporaryDirectory(dir=state_dir) as tmp:
        target = Path(tmp) / "fired"
        if backend == "watchdog":
            spawn_detached(["--dry-run", str(target), "--after", str(DRY_RUN_AFTER)], state_dir / LOG_NAME)
        elif backend == "systemd":
            unit = f"campaign-dryrun-{os.getpid()}-{int(time.time())}"
            _systemd(["systemd-run", f"--unit={unit}", f"--on-active={int(DRY_RUN_AFTER) or 1}",
                      "--timer-property=AccuracySec=100ms", "/bin/touch", str(target)])
        else:
            raise PreflightError(f"unknown failsafe backend {backend!r}")
        deadline = time.monotonic() + DRY_RUN_WAIT
        while time.monotonic() < deadline:
            if target.exists():
                return f"{backend} dry run fired"
            time.sleep(0.1)
    raise PreflightError(f"the {backend} timer did not fire within {DRY_RUN_WAIT:g}s")


def arm(state: WindowState, backend: str, deadline_s: float) -> WindowState:
    """Record the deadline (boot id + boot clock), start the backend, check it is active."""
    state = record_arming(state, backend, deadline_s)
    state.beat()
    generation = state.failsafe_generation
    if backend == "watchdog":
        pid = spawn_watchdog(state, generation, "a")  # it starts its partner b itself
        record_pid(pidfile(state, generation, "a"), pid)
        acks = [ack_path(state, generation, role) for role in ("a", "b")]
        deadline = time.monotonic() + ACK_WAIT
        while time.monotonic() < deadline and not all(ack.exists() for ack in acks):
            time.sleep(0.05)
        if not all(ack.exists() for ack in acks):
            mark_disarmed(state)
            raise PreflightError(f"failsafe watchdog pair (pid {pid}) did not report active within {ACK_WAIT:g}s "
                                 f"(log: {state.directory / LOG_NAME}); the incumbent was not touched")
    elif backend == "systemd":
        unit = f"campaign-failsafe-{state.window}-{generation}"[:200]
        _systemd(["systemd-run", f"--unit={unit}", f"--on-active={int(deadline_s)}",
                  "--timer-property=AccuracySec=1s", sys.executable, "-m", "campaign.failsafe.restore_now",
                  state.window, str(generation)])
        active = subprocess.run(["systemctl", "is-active", f"{unit}.timer"], capture_output=True, text=True)
        if active.stdout.strip() != "active":
            mark_disarmed(state)
            raise PreflightError(f"failsafe timer {unit}.timer is {active.stdout.strip() or 'unknown'}, not active")
        with state.locked():
            state = state.reload()
            state.failsafe_unit = unit
            state.save()
    return state.reload()


def disarm(state: WindowState) -> None:
    """The watchdog sees ``armed: false`` and exits; a systemd timer is stopped; the box's watchdog container
    is removed."""
    if state.reload().failsafe_backend == "engine":
        from campaign.failsafe import enginefailsafe

        enginefailsafe.disarm(state)
        return
    mark_disarmed(state)
    fresh = state.reload()
    if fresh.failsafe_unit:
        subprocess.run(["systemctl", "stop", f"{fresh.failsafe_unit}.timer"], capture_output=True)


def _systemd(cmd: list[str]) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PreflightError(f"{cmd[0]} failed: {exc}") from exc
    if done.returncode != 0:
        detail = " ".join(done.stderr.split())[:200]
        raise PreflightError(f"{cmd[0]} failed: {detail}")
