"""The detached watchdog failsafe: ``python -m campaign.failsafe.watchdog WINDOW GENERATION --role a|b``.

Two watchdogs run as a pair, each in its own session and process group, so the runner's death (kill -9,
a lost SSH session) does not take them along; each watches its partner and starts it again when it is
gone, so killing the runner and one watchdog together still leaves one that restores at once (the
runner is gone), and the partner is back within a poll. It holds the deadline as boot id plus boot-clock
seconds, and restores the daily when the deadline passes, when the runner is gone, or when the runner's
heartbeat is older than the grace. It exits, doing nothing, once its window is disarmed or a newer
generation supersedes it.

It is loud and persistent: every error goes to the window's failsafe log (``watchdog.log`` in the state
folder) and, while the bundle is unsigned, to the window's journal. A failed restore is retried with
backoff until the daily serves or ``RESTORE_LIMIT`` passes; a final failure is recorded in the window
state (``campaign status`` shows it) and the watchdog exits non-zero.

``--dry-run FILE --after S`` is the pre-flight check: the same detached start and clock loop, firing a
harmless action (creating FILE) instead of a restore.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from campaign.daily.state import FailsafeFailure, WindowState, boot_id, boottime, process_start_time, windows_dir
from campaign.errors import CampaignError
from campaign.failsafe.watchdogfiles import LOG_NAME, ack_path, alive, pidfile, record_pid, spawn_watchdog
from campaign.fsutil import JsonlAppender

__all__ = ["Report", "ack_path", "alive", "describe", "fire_reason", "main", "pidfile", "record_pid",
           "restore_until_served", "watch"]

POLL = 0.25
PARTNER = {"a": "b", "b": "a"}
RESPAWN_EVERY = 1.0  # seconds between attempts to start a missing partner
RETRY_FIRST = 2.0  # seconds before the second restore attempt; doubled after each failure
RETRY_CAP = 60.0  # the daily is down while we wait: never longer than this between attempts
RESTORE_LIMIT = 600.0  # seconds of failed attempts after which the failure is final, for a person to fix
UNREADABLE_LIMIT = 600.0  # seconds of an unreadable state after which this watchdog gives up
EXIT_RESTORE_FAILED = 1
EXIT_STATE_UNREADABLE = 2
EXIT_CRASHED = 3


def describe(exc: BaseException) -> str:
    # our own errors already read as a sentence; anything else needs its type to be understood
    return str(exc) if isinstance(exc, CampaignError) else f"{type(exc).__name__}: {exc}"


class Report:
    """Where a failsafe's news goes: a line in the window's failsafe log, and for errors also a record in
    the window's journal, so the window's own history says what went wrong and when."""

    def __init__(self, window: str, by: str) -> None:
        self.window, self.by = window, by
        self.bundle: Path | None = None
        self._said: set[str] = set()

    def know(self, state: WindowState) -> None:
        self.bundle = Path(state.bundle)

    def log(self, message: str) -> None:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {self.by} (pid {os.getpid()}): {message}\n"
        directory = windows_dir() / self.window
        try:
            if not directory.is_dir():  # the window was removed: recreating its folder would leave a stray
                raise FileNotFoundError(directory)
            with open(directory / LOG_NAME, "a", encoding="utf-8") as handle:
                handle.write(line)
        except OSError:
            sys.stderr.write(line)
            sys.stderr.flush()

    def error(self, step: str, message: str, *, once: bool = False, **fields: Any) -> None:
        """``once``: a condition seen at every poll is reported when it starts, not four times a second."""
        if once:
            if message in self._said:
                return
            self._said.add(message)
        self.log(f"ERROR {step}: {message}")
        self._journal({"t": time.time(), "event": "failed", "step": step, "by": self.by, "pid": os.getpid(),
                       "error": message, **fields})

    def _journal(self, record: dict[str, Any]) -> None:
        bundle = self.bundle
        if bundle is None or not bundle.is_dir() or (bundle / "receipt.dsse.json").exists():
            return  # a signed bundle is never written to again; the log still has it
        # JsonlAppender, not Journal: Journal's crash-test fault injection counts records per process, and a
        # watchdog inherits the runner's environment
        try:
            with JsonlAppender(bundle / "journal.jsonl") as out:
                out.append(record)
        except OSError as exc:
            self.log(f"ERROR could not write to {bundle / 'journal.jsonl'}: {exc}")


def _restore(window: str, **kwargs: Any) -> dict[str, Any]:
    # imported at the first use: a watchdog must ack quickly, and restore pulls in every runtime
    from campaign.daily.restore import restore

    return restore(window, **kwargs)


def _runner_gone(state: WindowState) -> bool:
    return process_start_time(state.runner_pid) != state.runner_start_time


def fire_reason(state: WindowState) -> str | None:
    """Why the daily must be restored now, or None while the window is fine."""
    if state.deadline_boottime is not None and boottime() >= state.deadline_boottime:
        return "deadline reached"
    if _runner_gone(state):
        return "runner is gone"
    beat = state.last_beat()
    if beat is not None and boottime() - beat > state.heartbeat_grace:
        return f"runner heartbeat older than {state.heartbeat_grace:g}s"
    return None


def _ours(state: WindowState, generation: int | None) -> bool:
    return generation is None or state.failsafe_generation == generation


def _disarm(window: str, generation: int | None, report: Report) -> None:
    try:
        state = WindowState.load(window)
        with state.locked():
            fresh = state.reload()
            if _ours(fresh, generation):
                fresh.armed = False
                fresh.save()
    except Exception as exc:  # top level of a watchdog process: the daily serves; an armed state only means
        # the next command re-proves it. Reported, never raised
        report.error("failsafe.disarm", f"the daily was restored but the window could not be disarmed: "
                                        f"{describe(exc)}")


def _give_up(window: str, generation: int | None, report: Report, error: str, attempts: int,
             since_wall: float) -> None:
    """Record the final failure where `campaign status` reads it. The window is left armed on purpose: the
    daily is still owed, and every `campaign` command's orphan sweep tries again once nothing else will."""
    message = f"restoring the daily FAILED after {attempts} attempts: {error}"
    first = True
    try:
        state = WindowState.load(window)
        with state.locked():
            fresh = state.reload()
            if _ours(fresh, generation):
                earlier = fresh.failsafe_failed
                # both watchdogs of a pair retry the same restore: the first to give up reports for both
                first = earlier is None or earlier.at < since_wall
                if first:
                    fresh.failsafe_failed = FailsafeFailure(at=time.time(), error=error, by=report.by,
                                                            attempts=attempts)
                    fresh.save()
    except Exception as exc:  # top level of a watchdog process: the final failure is still reported
        report.error("failsafe.restore", f"{message}; and the failure could not be recorded in the window "
                                         f"state: {describe(exc)}", attempts=attempts, final=True)
        return
    if first:
        report.error("failsafe.restore", message, attempts=attempts, final=True)
    else:
        report.log(f"{message} (already recorded by the partner)")


def restore_until_served(window: str, *, reason: str, generation: int | None, report: Report,
                         sleep: Callable[[float], None] = time.sleep,
                         clock: Callable[[], float] = boottime) -> int:
    """Restore, retried with backoff (``RETRY_FIRST`` doubling up to ``RETRY_CAP``) until the daily serves,
    someone else restored it, or the window was disarmed or re-armed; after ``RESTORE_LIMIT`` seconds of
    failures, give up loudly. Returns the exit status: 0, or ``EXIT_RESTORE_FAILED``."""
    report.log(f"restoring the daily: {reason}")
    started, since_wall = clock(), time.time()
    wait = RETRY_FIRST
    attempt = 0
    while True:
        attempt += 1
        try:
            record = _restore(window, reason=reason, by=report.by, if_needed=True, generation=generation)
        except Exception as exc:  # top level of a watchdog process: whatever broke (a DockerError kind, a
            # bug), the daily is down until an attempt works: reported, then tried again
            error = describe(exc)
            if clock() - started + wait > RESTORE_LIMIT:
                _give_up(window, generation, report, error, attempt, since_wall)
                return EXIT_RESTORE_FAILED
            report.error("failsafe.restore", f"attempt {attempt} failed: {error}; retrying in {wait:g}s",
                         attempt=attempt, retry_in=wait)
            sleep(wait)
            wait = min(wait * 2, RETRY_CAP)
            continue
        if record.get("event") == "skipped":
            report.log(f"attempt {attempt}: nothing to do ({record.get('reason')})")
        else:
            report.log(f"attempt {attempt}: the daily serves again ({record.get('action', 'restored')})")
        _disarm(window, generation, report)
        return 0


def _keep_partner(state: WindowState, generation: int, role: str, last_spawn: float) -> float:
    partner = PARTNER[role]
    if alive(pidfile(state, generation, partner)) or boottime() - last_spawn < RESPAWN_EVERY:
        return last_spawn
    # recorded by the spawner at once, so a partner still starting up is not started a second time
    record_pid(pidfile(state, generation, partner), spawn_watchdog(state, generation, partner))
    return boottime()


def _state_gone(window: str) -> bool:
    try:
        return not (windows_dir() / window / "state.json").exists()
    except OSError:
        return False  # cannot even look: unreadable, not gone


def watch(window: str, generation: int, role: str = "a") -> int:
    report = Report(window, f"watchdog generation {generation} ({role})")
    try:
        return _watch(window, generation, role, report)
    except Exception as exc:  # top level of a watchdog process: a bug or a broken disk is said where someone
        # will look, then the process exits non-zero
        report.log(traceback.format_exc().rstrip())
        report.error("failsafe.watchdog", f"watchdog crashed: {describe(exc)}")
        return EXIT_CRASHED


def _watch(window: str, generation: int, role: str, report: Report) -> int:
    my_boot = boot_id()
    ack = None
    last_spawn = 0.0
    unreadable_since: float | None = None
    while True:
        try:
            state = WindowState.load(window)
        except Exception as exc:  # top level of a watchdog process: a state unreadable for any reason is
            # reported once and read again; the watchdog must not die of it
            if _state_gone(window):
                report.log("the window's state is gone (the window was removed); nothing left to watch")
                return 0
            now = boottime()
            unreadable_since = now if unreadable_since is None else unreadable_since
            if now - unreadable_since >= UNREADABLE_LIMIT:
                report.error("failsafe.state", f"the window state was unreadable for {UNREADABLE_LIMIT:g}s; "
                                               f"this watchdog cannot restore the daily and gives up: "
                                               f"{describe(exc)}", final=True)
                return EXIT_STATE_UNREADABLE
            report.error("failsafe.state", f"cannot read the window state (trying again every {POLL:g}s): "
                                           f"{describe(exc)}", once=True)
            time.sleep(POLL)
            continue
        if unreadable_since is not None:
            report.log("the window state is readable again")
            unreadable_since = None
        report.know(state)
        if state.failsafe_generation != generation:
            report.log(f"superseded by generation {state.failsafe_generation}; exiting")
            return 0
        if not state.armed:
            report.log("the window is disarmed; exiting")
            return 0
        if state.boot_id != my_boot:
            report.log("the window state is from another boot; exiting")
            return 0
        if ack is None:
            record_pid(pidfile(state, generation, role), os.getpid())
            ack = ack_path(state, generation, role)
            ack.write_text(f"{boottime():.3f}\n")
        try:
            last_spawn = _keep_partner(state, generation, role, last_spawn)
        except Exception as exc:  # top level of a watchdog process: this one still guards the daily alone;
            # reported, and tried again after RESPAWN_EVERY
            report.error("failsafe.watchdog", f"could not start partner {PARTNER[role]}: {describe(exc)}",
                         once=True)
            last_spawn = boottime()
        reason = fire_reason(state)
        if reason:
            return restore_until_served(window, reason=reason, generation=generation, report=report)
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
    if args.window is None or args.generation is None:
        parser.error("WINDOW and GENERATION are required (or --dry-run FILE)")
    return watch(args.window, args.generation, args.role)


if __name__ == "__main__":
    sys.exit(main())
