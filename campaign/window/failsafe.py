"""Failsafe backends: whatever happens to the runner, the daily serves again by the deadline.

``auto`` picks a systemd transient timer in system scope where systemd runs (``/run/systemd/system``),
otherwise the detached watchdog (``campaign.window.watchdog``). Both are checked before the incumbent
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
from pathlib import Path

from campaign.errors import PreflightError
from campaign.window.state import WindowState, boottime

__all__ = ["arm", "choose_backend", "disarm", "dry_run", "spawn_watchdog"]

DRY_RUN_AFTER = 1.0
DRY_RUN_WAIT = 15.0


def choose_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    return "systemd" if Path("/run/systemd/system").is_dir() and shutil.which("systemd-run") else "watchdog"


def _spawn_detached(args: list[str], log: Path) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as handle:
        popen = subprocess.Popen([sys.executable, "-m", "campaign.window.watchdog", *args],
                                 stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                 start_new_session=True, close_fds=True)
    return popen.pid


def spawn_watchdog(state: WindowState, generation: int, role: str) -> int:
    return _spawn_detached([state.window, str(generation), "--role", role], state.directory / "watchdog.log")


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
            _spawn_detached(["--dry-run", str(target), "--after", str(DRY_RUN_AFTER)], state_dir / "watchdog.log")
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
    with state.locked():
        state = state.reload()
        state.failsafe_generation += 1
        state.failsafe_backend = backend
        state.deadline_boottime = boottime() + deadline_s
        state.deadline_wall = time.time() + deadline_s
        state.armed = True
        state.save()
    state.beat()
    generation = state.failsafe_generation
    if backend == "watchdog":
        from campaign.window.watchdog import ack_path

        from campaign.window.watchdog import pidfile, record_pid

        pid = spawn_watchdog(state, generation, "a")  # it starts its partner b itself
        record_pid(pidfile(state, generation, "a"), pid)
        acks = [ack_path(state, generation, role) for role in ("a", "b")]
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline and not all(ack.exists() for ack in acks):
            time.sleep(0.05)
        if not all(ack.exists() for ack in acks):
            _disarm_state(state)
            raise PreflightError(f"failsafe watchdog pair (pid {pid}) did not report active; the incumbent was "
                                 "not touched")
    elif backend == "systemd":
        unit = f"campaign-failsafe-{state.window}-{generation}"[:200]
        _systemd(["systemd-run", f"--unit={unit}", f"--on-active={int(deadline_s)}",
                  "--timer-property=AccuracySec=1s", sys.executable, "-m", "campaign.window.restore_now",
                  state.window])
        active = subprocess.run(["systemctl", "is-active", f"{unit}.timer"], capture_output=True, text=True)
        if active.stdout.strip() != "active":
            _disarm_state(state)
            raise PreflightError(f"failsafe timer {unit}.timer is {active.stdout.strip() or 'unknown'}, not active")
        with state.locked():
            state = state.reload()
            state.failsafe_unit = unit
            state.save()
    return state.reload()


def _disarm_state(state: WindowState) -> None:
    with state.locked():
        fresh = state.reload()
        fresh.armed = False
        fresh.save()


def disarm(state: WindowState) -> None:
    """The watchdog sees ``armed: false`` and exits; a systemd timer is stopped."""
    _disarm_state(state)
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
