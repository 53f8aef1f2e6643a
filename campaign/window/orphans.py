"""A window nobody is left to finish: every `campaign` command restores it first.

The failsafe is a pair of watchdogs (or a systemd timer); if the runner and every watchdog were killed
together, or the deadline passed while nothing ran, the next `campaign` command of any kind (status
included) brings the daily back at once.
"""

from __future__ import annotations

from campaign.errors import RunError
from campaign.window.state import WindowState, boot_id, boottime, process_start_time, windows_dir
from campaign.window.watchdog import alive, pidfile

__all__ = ["restore_orphaned_windows"]


def _orphaned(state: WindowState) -> str | None:
    """Why an armed window's daily must be restored now by whoever notices, or None: its deadline has
    passed, or its runner and both watchdogs are gone (killed together), so nothing else will."""
    if not state.armed or not state.incumbent_stopped or state.restored:
        return None
    if state.boot_id != boot_id():
        return "the machine rebooted during the window"
    if state.deadline_boottime is not None and boottime() >= state.deadline_boottime:
        return "deadline passed"
    runner_alive = process_start_time(state.runner_pid) == state.runner_start_time
    if runner_alive or state.failsafe_backend != "watchdog":
        return None
    gen = state.failsafe_generation
    if any(alive(pidfile(state, gen, role)) for role in ("a", "b")):
        return None
    return "the runner and both watchdogs are gone"


def restore_orphaned_windows() -> list[str]:
    """Run by every `campaign` command before its own work: an expired or orphaned window is restored at
    once. Returns one line per window restored."""
    from campaign.window.restore import restore

    done = []
    root = windows_dir()
    for state_file in sorted(root.glob("*/state.json")) if root.is_dir() else []:
        try:
            state = WindowState.load(state_file.parent.name)
            reason = _orphaned(state)
        except Exception as exc:  # a state this version cannot read must not stop every command
            done.append(f"window {state_file.parent.name}: state unreadable ({type(exc).__name__}); not checked")
            continue
        if reason is None:
            continue
        try:
            record = restore(state.window, reason=reason, by="campaign (next command)", if_needed=True)
            if record.get("event") == "skipped":
                continue
            with state.locked():
                fresh = state.reload()
                fresh.armed = False
                fresh.save()
            done.append(f"window {state.window}: {reason}; the daily was restored")
        except (RunError, OSError) as exc:
            done.append(f"window {state.window}: {reason}; restoring the daily FAILED: {exc}")
    return done
