"""What windows leave behind: a window nobody is left to finish, which every `campaign` command restores
first, and containers (lanes, stale box watchdogs) that `campaign cleanup` lists and removes.

The failsafe is a pair of watchdogs (or a systemd timer, or a watchdog container on the daily's engine); if
the runner and every watchdog were killed together, or the deadline passed while nothing ran, the next
`campaign` command of any kind (status included) brings the daily back at once, and so does the periodic
check (`campaign failsafe check`, run every minute by cron once `campaign failsafe install` put it there),
with no command typed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from campaign.daily.state import WindowState, boot_id, boottime, process_start_time, windows_dir
from campaign.errors import CampaignError, RunError
from campaign.failsafe.watchdog import alive, pidfile

if TYPE_CHECKING:
    from campaign.contracts.load import LoadedContract
    from campaign.contracts.schema import DockerHost

__all__ = ["engines_to_sweep", "install_periodic_check", "leftover_containers", "periodic_check", "remove_leftover",
           "restore_orphaned_windows"]


def _orphaned(state: WindowState) -> str | None:
    """Why an armed window's daily must be restored now by whoever notices, or None: its deadline has
    passed, or its runner and both watchdogs are gone (killed together), so nothing else will."""
    if not state.armed or not state.incumbent_stopped or state.restored:
        return None
    if state.boot_id != boot_id():
        return "the machine rebooted during the window"
    if state.deadline_boottime is not None and boottime() >= state.deadline_boottime:
        return "deadline passed"
    if state.deadline_boottime is None and state.deadline_wall is not None and time.time() >= state.deadline_wall:
        # kept on the daily's engine, by its own clock: past the deadline here, that watchdog has restored the
        # daily (or cannot), so the sweep proves it, and ends the window's arming here
        return "deadline passed"
    runner_alive = process_start_time(state.runner_pid) == state.runner_start_time
    if runner_alive or state.failsafe_backend != "watchdog":
        return None
    gen = state.failsafe_generation
    if any(alive(pidfile(state, gen, role)) for role in ("a", "b")):
        return None
    return "the runner and both watchdogs are gone"


def restore_orphaned_windows(by: str = "campaign (next command)") -> list[str]:
    """Run by every `campaign` command before its own work: an expired or orphaned window is restored at
    once. Returns one line per window restored (or not)."""
    return _sweep(by)[0]


def _sweep(by: str) -> tuple[list[str], bool]:
    """One line per window looked at and restored, and whether a restore failed."""
    done, failed = [], False
    root = windows_dir()
    for state_file in sorted(root.glob("*/state.json")) if root.is_dir() else []:
        try:
            state = WindowState.load(state_file.parent.name)
            reason = _orphaned(state)
        except (CampaignError, OSError) as exc:  # a state this version cannot read must not stop every command
            done.append(f"window {state_file.parent.name}: state unreadable ({type(exc).__name__}); not checked")
            continue
        if reason is None:
            if state.restored and state.incumbent is not None:  # restored while its runner lived, which is gone now
                from campaign.daily.restore import forget_when_over

                forget_when_over(state.window)
            continue
        # here, not above: every command sweeps, and the restore's imports (the engines' clients, docker) are
        # half of a command's start; most sweeps restore nothing
        from campaign.daily.restore import restore

        try:
            record = restore(state.window, reason=reason, by=by, if_needed=True)
            if record.get("event") == "skipped":
                continue
            _disarm_after_restore(state)
            done.append(f"window {state.window}: {reason}; the daily was restored")
        except (RunError, OSError) as exc:
            done.append(f"window {state.window}: {reason}; restoring the daily FAILED: {exc}")
            failed = True
    return done, failed


def _disarm_after_restore(state: WindowState) -> None:
    """Proven back: disarmed as the window itself disarms (a systemd timer stopped, a watchdog container on
    the daily's engine removed). Disarming marks the state first, so what it cannot finish (an engine that
    does not let go of its watchdog container) is left for `campaign cleanup`: stale once disarmed."""
    from campaign.failsafe.failsafe import disarm

    try:
        disarm(state)
    except (RunError, OSError):
        pass


def periodic_check() -> tuple[list[str], bool]:
    """`campaign failsafe check`, what cron runs every minute (``failsafe/supervisor.py``): the sweep above,
    from outside any window's process tree, and a mark that it ran, which a window being armed reads to
    say the periodic check guards it. The lines, and whether a restore failed (its exit code)."""
    from campaign.failsafe.supervisor import mark_check_ran

    mark_check_ran()
    return _sweep(by="campaign failsafe check")


def install_periodic_check(*, remove: bool = False, show: bool = False) -> list[str]:
    """`campaign failsafe install`: the check's crontab line installed (or shown, or removed), in lines to
    print; a machine with no crontab is refused with the line for another scheduler."""
    from campaign.daily.state import state_root
    from campaign.failsafe import supervisor

    state_root().mkdir(parents=True, exist_ok=True, mode=0o700)  # the line's log lives there
    if show:
        return [supervisor.check_line(), f"runs: {supervisor.environment_note()}"]
    if remove:
        return ["removed the periodic check from this user's crontab" if supervisor.uninstall()
                else "no periodic check was installed"]
    done = supervisor.install()
    return [f"installed in this user's crontab (every minute): {done.line}",
            f"runs: {supervisor.environment_note()}",
            "it restores the daily of a window whose runner and watchdogs are all gone, or whose deadline "
            "passed; windows armed from now on say it guards them",
            *(f"warning: {warning}" for warning in done.warnings)]


def engines_to_sweep(loaded: LoadedContract | None, docker_host: str | None) -> dict[str, DockerHost | None]:
    """The Docker engines to look on, by the name they are shown under: every engine ``loaded`` names (its
    lanes' and its daily's, with their TLS and ssh settings), else the one at ``docker_host`` (DOCKER_HOST
    when None)."""
    # imported here: every command imports this module for restore_orphaned_windows, few need docker
    from campaign.contracts.schema import DockerHost
    from campaign.lanes.runtimes.dockerhost import describe

    if loaded is None:
        host = DockerHost(url=docker_host) if docker_host else None
        return {describe(host): host}
    named = [lane.docker_host for lane in loaded.lanes.values() if lane.runtime == "docker"]
    if loaded.contract.incumbent is not None and loaded.contract.incumbent.runtime == "docker":
        named.append(loaded.contract.incumbent.docker_host)
    return {describe(h): h for h in named}


def leftover_containers(hosts: dict[str, DockerHost | None], *, window: str | None = None,
                        contract: str | None = None) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """(engine shown, its client, the container) for each container windows left on ``hosts``: lanes found by
    their campaign.* labels, and box watchdogs that guard nothing any more (one whose window is still armed
    on this machine is never listed)."""
    from campaign.failsafe.enginefailsafe import stale_watchdogs
    from campaign.lanes.runtimes.docker import find_leftovers
    from campaign.lanes.runtimes.dockerhost import client_for

    for where, host in hosts.items():
        client = client_for(host)
        for item in find_leftovers(client, window=window, contract=contract):
            yield where, client, item
        for item in stale_watchdogs(client):
            if window is None or item["window"] == window:
                yield where, client, {**item, "lane": "(failsafe watchdog)"}


def remove_leftover(client: Any, item: dict[str, Any]) -> None:
    from campaign.lanes.runtimes.docker import remove_container

    remove_container(client, item["id"])
