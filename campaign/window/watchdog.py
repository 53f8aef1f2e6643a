"""The detached watchdog failsafe: ``python -m campaign.window.watchdog WINDOW GENERATION --role a|b``.

Two watchdogs run as a pair, each in its own session and process group, so the runner's death (kill -9,
a lost SSH session) does not take them along; each watches its partner and starts it again when it is
gone, so killing the runner and one watchdog together still leaves one that restores at once (the
runner is gone), and the partner is back within a poll. It holds the deadline as boot id plus boot-clock seconds, and restores the
daily when the deadline passes, when the runner is gone, or when the runner's heartbeat is older than
the grace. It exits, doing nothing, once its window is disarmed or a newer generation supersedes it.

``--dry-run FILE --after S`` is the pre-flight check: the same detached start and clock loop, firing a
harmless action (creating FILE) instead of a restore.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from campaign.window.state import WindowState, boot_id, boottime, process_start_time

POLL = 0.25
PARTNER = {"a": "b", "b": "a"}
RESPAWN_EVERY = 1.0  # seconds between attempts to start a missing partner


def pidfile(state: WindowState, generation: int, role: str) -> Path:
    return state.directory / f"watchdog-{generation}-{role}.pid"


def ack_path(state: WindowState, generation: int, role: str) -> Path:
    return state.directory / (f"watchdog-{generation}.ack" if role == "a" else f"watchdog-{generation}-{role}.ack")


def alive(path: Path) -> bool:
    """Whether the watchdog recorded in ``path`` (pid and kernel start time) still runs."""
    try:
        pid, start = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return False
    return process_start_time(pid) == start


def _keep_partner(state: WindowState, generation: int, role: str, last_spawn: float) -> float:
    partner = PARTNER[role]
    if alive(pidfile(state, generation, partner)) or boottime() - last_spawn < RESPAWN_EVERY:
        return last_spawn
    from campaign.window.failsafe import spawn_watchdog

    # recorded by the spawner at once, so a partner still starting up is not started a second time
    record_pid(pidfile(state, generation, partner), spawn_watchdog(state, generation, partner))
    return boottime()


def record_pid(path: Path, pid: int) -> None:
    from campaign.fsutil import atomic_write_bytes

    atomic_write_bytes(path, f"{pid} {process_start_time(pid)}\n".encode())


def _runner_gone(state: WindowState) -> bool:
    return process_start_time(state.runner_pid) != state.runner_start_time


def watch(window: str, generation: int, role: str = "a") -> int:
    my_boot = boot_id()
    ack = None
    last_spawn = 0.0
    while True:
        try:
            state = WindowState.load(window)
        except Exception:  # state removed: the window is over
            return 0
        if state.failsafe_generation != generation or not state.armed or state.boot_id != my_boot:
            return 0
        if ack is None:
            record_pid(pidfile(state, generation, role), os.getpid())
            ack = ack_path(state, generation, role)
            ack.write_text(f"{boottime():.3f}\n")
        last_spawn = _keep_partner(state, generation, role, last_spawn)
        reason = None
        if state.deadline_boottime is not None and boottime() >= state.deadline_boottime:
            reason = "deadline reached"
        elif _runner_gone(state):
            reason = "runner is gone"
        else:
            beat = state.last_beat()
            if beat is not None and boottime() - beat > state.heartbeat_grace:
                reason = f"runner heartbeat older than {state.heartbeat_grace:g}s"
        if reason:
            from campaign.window.restore import restore

            try:
                restore(window, reason=reason, by=f"watchdog generation {generation} ({role})", if_needed=True,
                        generation=generation)
            finally:
                with state.locked():
                    fresh = state.reload()
                    if fresh.failsafe_generation == generation:
                        fresh.armed = False
                        fresh.save()
            return 0
        time.sleep(POLL)


def dry_run(target: Path, after: float) -> int:
    fire_at = boottime() + after
    while boottime() < fire_at:
        time.sleep(0.05)
    target.write_text(f"fired at boot-clock {boottime():.3f}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="campaign-watchdog")
    parser.add_argument("window", nargs="?")
    parser.add_argument("generation", nargs="?", type=int)
    parser.add_argument("--dry-run", type=Path)
    parser.add_argument("--after", type=float, default=1.0)
    parser.add_argument("--role", choices=sorted(PARTNER), default="a")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run(args.dry_run, args.after)
    return watch(args.window, args.generation, args.role)


if __name__ == "__main__":
    sys.exit(main())
