"""Restore: idempotent and fenced.

It stops only this window's own lanes (pids recorded with their kernel start times, so a reused pid or
another window's lane is never touched), starts the incumbent from its snapshot unless it already
serves, proves it, and records what it did in the journal. A second run finds the daily serving and
only re-proves it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from campaign.daily import incumbent
from campaign.daily.secretstate import forget, resolve
from campaign.daily.state import EXIT_WAIT_S, LaneProcess, WindowState, process_start_time, wait_gone
from campaign.errors import DockerNotFound, DockerRefused, RunError
from campaign.fsutil import JsonlAppender
from campaign.lanes.redact import launch_secrets
from campaign.lanes.scratch import remove_scratch

__all__ = ["forget_credentials", "forget_when_over", "restore", "stop_window_lanes"]


def _remove_container(state: WindowState, lane: LaneProcess, container: str, not_stopped: list[str]) -> bool:
    """Only ``lane``'s container that still carries this window's label is removed (fenced by label, not name):
    True when it was. Only the engine saying "no such container" is "gone"; an engine that cannot be asked
    (unreachable, TLS, refused, its ssh tunnel or TLS files gone) never is: the lane is named in
    ``not_stopped`` with why, and the restore carries on (the daily may be on another engine; the record,
    SUMMARY and reports list it apart, never as stopped)."""
    from campaign.contracts.schema import DockerHost
    from campaign.lanes.runtimes.docker import LABEL_WINDOW, remove_container
    from campaign.lanes.runtimes.dockererrors import docker_errors
    from campaign.lanes.runtimes.dockerhost import client_for, describe

    try:
        host = DockerHost.model_validate(lane.docker_host) if lane.docker_host else None
        client = client_for(host)
        with docker_errors(f"inspecting lane container {container[:12]}", describe(host)):
            labels = client.api.inspect_container(container)["Config"].get("Labels") or {}
        if labels.get(LABEL_WINDOW) != state.window:
            return False
        remove_container(client, container)
    except DockerNotFound:
        return False  # the engine says it is gone: nothing of ours to stop
    except DockerRefused as exc:  # the engine answered and said no
        not_stopped.append(f"{lane.visit}: its engine refused ({str(exc)[:200]}); "
                           "`campaign cleanup --remove` finds it and tries again")
        return False
    except Exception as exc:  # top level of one lane's stop: whatever broke (unreachable, TLS, no client, a
        # state an older version wrote, the ssh tunnel), the other lanes and the daily's start still run
        not_stopped.append(f"{lane.visit}: its engine could not be asked ({type(exc).__name__}: {str(exc)[:200]}); "
                           "`campaign cleanup --remove` finds it once the engine answers")
        return False
    return True


def _stop_process(lane: LaneProcess, grace: float) -> bool:
    """A process lane stopped, fenced by its pid and start time: True when this call stopped it."""
    if lane.pid is None or lane.start_time is None or process_start_time(lane.pid) != lane.start_time:
        return False  # gone, or the pid now belongs to someone else
    try:
        os.killpg(lane.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    if not wait_gone(lane.pid, grace):
        try:
            os.killpg(lane.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        wait_gone(lane.pid, EXIT_WAIT_S)
    return True


def stop_window_lanes(state: WindowState, *, grace: float = 10.0,
                      leftovers: list[tuple[str, bool]] | None = None) -> tuple[list[str], list[str]]:
    """This window's lanes stopped (fenced: pid and start time, or the container's window label): the visits
    stopped, and each lane that could not be (its engine did not answer) with why. A lane's scratch folder
    goes with it (the whole folder for a lane stopped here, an empty one for a lane already gone); a lane that
    could not be stopped keeps its folder. ``leftovers`` collects the folders instead, for the restore to
    remove once the daily serves again (a large folder must not keep it down)."""
    stopped: list[str] = []
    not_stopped: list[str] = []
    for lane in state.lanes:
        unanswered = len(not_stopped)
        if lane.container is not None:
            stopped_here = _remove_container(state, lane, lane.container, not_stopped)
        else:
            stopped_here = _stop_process(lane, grace)
        if stopped_here:
            stopped.append(lane.visit)
        if lane.scratch is not None and len(not_stopped) == unanswered:  # a lane not stopped keeps its folder
            if leftovers is None:
                remove_scratch(lane.scratch, stopped_here=stopped_here)
            else:
                leftovers.append((lane.scratch, stopped_here))
    # a process lane started in the instant before the runner could record it (killed in between)
    from campaign.lanes.runtimes.process import marked_processes

    for pid in marked_processes(state.window):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        wait_gone(pid, EXIT_WAIT_S)
        stopped.append(f"untracked pid {pid}")
    return stopped, not_stopped


def _start_if_down(state: WindowState, snap: dict[str, Any], record: dict[str, Any]) -> None:
    if not incumbent.is_serving(snap):
        started = incumbent.start(snap, state.directory / "incumbent.log")
        if isinstance(started, dict):  # a container: started again, or recreated from the snapshot
            record["started_container"], record["action"] = started["container_id"], started["action"]
        else:
            record["started_pid"], record["action"] = started, "started"
    else:
        record["action"] = "already serving"
        if snap.get("runtime") == "docker":
            from campaign.daily.dailycontainer import ensure_restart_policy

            ensure_restart_policy(snap)


def forget_credentials(state: WindowState) -> bool:
    """The daily's credentials out of a window's private state (``secretstate``): the key kept for a failsafe
    restoring in a bare environment goes, and each credential in the daily's snapshot becomes a reference to
    the variable that holds it. The caller holds the state's lock and saves; True when anything changed."""
    snap = state.incumbent or {}
    key = state.incumbent_api_key
    secrets = launch_secrets(snap.get("argv") or [], snap.get("env") or {}, [snap.get("api_key_env") or ""])
    scrubbed = forget(snap, [*secrets, *([key] if key else [])], api_key_env=snap.get("api_key_env"), api_key=key,
                      environ=os.environ)
    changed = scrubbed != snap or key is not None
    state.incumbent, state.incumbent_api_key = scrubbed, None
    return changed


def _forget_if_over(state: WindowState) -> None:
    """A window whose daily is proven back and whose runner is gone is over, whoever restored it (a watchdog,
    the orphan sweep, `campaign abort`): nothing will need the daily's credentials from its state again (a
    resume reads them from its own environment). A runner still alive scans its bundle for them first and
    forgets them at its own end. Called with the state's lock held."""
    if not state.restored or state.incumbent is None or process_start_time(state.runner_pid) == state.runner_start_time:
        return
    if forget_credentials(state):
        state.save()


def forget_when_over(window: str) -> None:
    """``_forget_if_over`` under the state's lock (the orphan sweep, for a window restored while its runner
    lived and whose runner has gone since)."""
    state = WindowState.load(window)
    with state.locked():
        _forget_if_over(state.reload())


def restore(window: str, *, reason: str, by: str, grace: float = 10.0, if_needed: bool = False,
            generation: int | None = None) -> dict[str, Any]:
    """Bring the daily back. Safe to call from the runner, the failsafe and `campaign abort` alike.
    ``if_needed`` (the failsafe, the orphan sweep): under the lock, do nothing when another restore got
    there first or the window was disarmed (or re-armed as a newer ``generation``), so two watchdogs firing
    at one deadline restore once and write nothing into a bundle that may be signed meanwhile."""
    state = WindowState.load(window)
    with state.locked():
        state = state.reload()
        if if_needed and (state.restored or not state.armed or
                          (generation is not None and state.failsafe_generation != generation)):
            _forget_if_over(state)
            return {"event": "skipped", "by": by, "reason": "already restored or disarmed"}
        journal = JsonlAppender(Path(state.bundle) / "journal.jsonl") if Path(state.bundle).is_dir() else None
        record: dict[str, Any] = {"t": time.time(), "step": "incumbent.restore", "by": by, "reason": reason,
                                  "pid": os.getpid()}
        leftovers: list[tuple[str, bool]] = []
        try:
            if journal:
                journal.append({**record, "event": "intent"})
            record["stopped_lanes"], not_stopped = stop_window_lanes(state, grace=grace, leftovers=leftovers)
            if not_stopped:
                record["lanes_not_stopped"] = not_stopped
            # a window that ended removed the daily's credentials from its state: this environment's, if any
            snap = resolve(state.incumbent, os.environ)[0]
            if snap is None:
                record["incumbent"] = "none declared"
            else:
                for attempt in (1, 2):
                    _start_if_down(state, snap, record)
                    try:
                        record["proof"] = incumbent.prove(snap, api_key=state.incumbent_api_key)
                        break
                    except RunError:
                        if attempt == 2 or snap.get("runtime") == "docker" or incumbent.is_serving(snap):
                            raise
                        # The daily died at once: a lane the dead runner had forked but not yet exec'd (so not
                        # yet marked) can take the daily's port in that instant. Marked by now: stop it, again.
                        time.sleep(0.5)
                        record["stopped_lanes"] += stop_window_lanes(state, grace=grace, leftovers=leftovers)[0]
                        record["retried"] = True
            state.restored, state.incumbent_stopped = True, False
            state.save()
            _forget_if_over(state)
            record["event"] = "done"
            return record
        except Exception as exc:  # top level of a restore: whatever broke, the journal says failed, and the
            # caller (runner, watchdog, timer, next command) gets one RunError and retries or reports it
            record["event"], record["error"] = "failed", f"{type(exc).__name__}: {exc}"
            raise RunError(f"restore failed: {exc}") from exc
        finally:
            for folder, stopped_here in leftovers:  # after the daily's start: removing never raises
                remove_scratch(folder, stopped_here=stopped_here)
            if journal:
                journal.append(record)
                journal.close()
