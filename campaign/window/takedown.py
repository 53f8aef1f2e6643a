"""The daily's part of a window: taken down behind the failsafe (snapshot, dry run, arm, stop, each
journaled), kept from the failsafe's trigger by the runner's heartbeat, brought back with proof and only
then the failsafe disarmed; and what of the daily the bundle may hold (its snapshot redacted, its
credentials known to the bundle's secret scan) and the private state keeps (its credentials removed once
the window is over, read from the environment again by a resumed window)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from campaign.daily import incumbent
from campaign.daily.restore import forget_credentials, restore, stop_window_lanes
from campaign.daily.secretstate import references, resolve
from campaign.daily.state import WindowState
from campaign.errors import PreflightError, RunError
from campaign.failsafe.failsafe import arm, choose_backend, disarm, dry_run, fallback_backend
from campaign.failsafe.supervisor import guard
from campaign.fsutil import atomic_write_json
from campaign.lanes.redact import Redactor, lane_secrets, launch_secrets
from campaign.window.context import Window, say

__all__ = ["NEVER_STOPPED", "bring_back_incumbent", "forget_secrets", "heartbeat", "known_secrets",
           "restore_summary", "stop_lanes_left", "take_down_incumbent"]

# The window ended at its screens: the daily was never stopped, so there was nothing to restore or prove.
NEVER_STOPPED = "never stopped"


async def heartbeat(state: WindowState) -> None:
    beats = 0
    while True:
        await asyncio.to_thread(state.beat)
        beats += 1
        fresh = await asyncio.to_thread(state.reload)
        if fresh.failsafe_backend == "engine" and fresh.armed:
            from campaign.failsafe import enginefailsafe

            try:  # a box that does not hear us for the grace restores its daily: the failsafe doing its job
                await asyncio.to_thread(enginefailsafe.beat, fresh, beats)
            except Exception as exc:  # top level of the heartbeat: nothing awaits this task, so an error that
                # ended it would go unseen and the box would restore its daily mid-window; every failure to
                # reach the box (a DockerError kind, the ssh tunnel's OSError, a timeout) is written down
                _note_beat_failure(fresh, exc)
        await asyncio.sleep(2.0)


def _note_beat_failure(state: WindowState, exc: BaseException) -> None:
    from campaign.failsafe.watchdog import describe

    with open(state.directory / "heartbeat.err", "a", encoding="utf-8") as handle:
        handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} heartbeat to the box failed: {describe(exc)}\n")


def stop_lanes_left(w: Window) -> dict[str, Any]:
    """A resumed window's first act: the killed runner's lanes outlive it where no failsafe restored a daily,
    and hold the ports the resumed visits boot on (pid and start time checked, so a reused pid is never
    signalled). Returns what the resume record says of them."""
    stopped, not_stopped = stop_window_lanes(w.state)
    return {"stopped_lanes": stopped, **({"lanes_not_stopped": not_stopped} if not_stopped else {})}


def take_down_incumbent(w: Window, journal: Any) -> WindowState:
    """Snapshot, failsafe dry run, arm, stop: in that order, each journaled; any failure before the
    stop leaves the daily untouched."""
    spec, failsafe_spec = w.loaded.contract.incumbent, w.loaded.contract.failsafe
    assert spec is not None and failsafe_spec is not None
    state = w.state.reload()
    if state.incumbent is None:
        journal.intent("incumbent.snapshot")
        snap = incumbent.snapshot(spec, w.loaded.base_dir)
        with state.locked():
            state = state.reload()
            state.incumbent = snap
            state.incumbent_api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
            state.heartbeat_grace = failsafe_spec.heartbeat_grace
            state.save()
        atomic_write_json(w.bundle / "incumbent" / "snapshot.json", _redacted_snapshot(snap))
        journal.done("incumbent.snapshot", **({"container": snap["container_id"]} if snap.get("runtime") == "docker"
                                               else {"pid": snap["pid"]}))
    elif references(state.incumbent):
        state = _credentials_back(state, spec.api_key_env)
    state = _arm_failsafe(w, journal, state)
    journal.intent("incumbent.stop")
    stopped = incumbent.stop(state.incumbent or {}, escalate_after=1.0 if w.escalated else None)
    with state.locked():
        state = state.reload()
        state.incumbent_stopped, state.restored = True, False
        state.save()
    journal.done("incumbent.stop", pid=stopped)
    w.state = state
    return state


def _credentials_back(state: WindowState, api_key_env: str | None) -> WindowState:
    """A resumed window stops the daily again: the credentials the ended run removed from the state are read
    from this environment and kept there while the daily is down (a failsafe restoring it in a bare
    environment needs them), before anything is touched; a variable this environment lacks is refused."""
    resolved, missing = resolve(state.incumbent, os.environ)
    if missing:
        raise PreflightError(f"window {state.window}: the daily's credentials were removed from its private state "
                             f"when it ended; to stop the daily again this runner needs them in its environment: "
                             f"{', '.join(sorted(missing))}; the daily was not touched")
    with state.locked():
        state = state.reload()
        state.incumbent = resolved
        if api_key_env:
            state.incumbent_api_key = os.environ.get(api_key_env)
        state.save()
    return state


def _arm_failsafe(w: Window, journal: Any, state: WindowState) -> WindowState:
    """The failsafe's dry run and arming, journaled, and the console told which supervisor outside the
    runner's process tree keeps the deadline (or warned that none does)."""
    spec, failsafe_spec = w.loaded.contract.incumbent, w.loaded.contract.failsafe
    assert spec is not None and failsafe_spec is not None
    backend = choose_backend(failsafe_spec.backend, spec, w.loaded.lanes.values())
    journal.intent("failsafe.dry_run", backend=backend)
    if backend == "engine":
        from campaign.failsafe import enginefailsafe

        try:
            result = enginefailsafe.dry_run(state, failsafe_spec, spec.endpoint)
        except PreflightError as exc:
            fallback = fallback_backend(failsafe_spec, spec)
            if fallback is None:
                raise
            journal.failed("failsafe.dry_run", backend=backend, error=str(exc), fallback=fallback)
            say(w, f"failsafe: the watchdog container cannot run on the daily's engine ({exc}); falling back to "
                   f"the {fallback} backend (set failsafe.image to an image with a python to have the engine keep "
                   "the deadline)")
            backend = fallback
            journal.intent("failsafe.dry_run", backend=backend)
    if backend != "engine":
        result = dry_run(backend, state.directory)
    journal.done("failsafe.dry_run", backend=backend, result=result)
    journal.intent("failsafe.arm", backend=backend, deadline_s=failsafe_spec.deadline)
    if backend == "engine":
        state = enginefailsafe.arm(state, failsafe_spec, spec.endpoint)
    else:
        state = arm(state, backend, failsafe_spec.deadline)
    supervisor, warning = guard(backend, state)
    with state.locked():
        state = state.reload()
        state.failsafe_supervisor = supervisor
        state.save()
    journal.done("failsafe.arm", backend=backend, generation=state.failsafe_generation,
                 deadline_wall=state.deadline_wall, supervisor=supervisor, **({"warning": warning} if warning else {}))
    deadline = time.strftime("%H:%M:%S", time.localtime(state.deadline_wall or 0))
    say(w, f"failsafe armed ({backend}): the daily serves again by {deadline} whatever happens to this runner; "
           f"outside its process tree: {supervisor}")
    if warning:
        say(w, f"warning: {warning}")
    return state


def bring_back_incumbent(w: Window, journal: Any, reason: str) -> dict[str, Any]:
    """Restore with proof, then disarm: the failsafe stays armed until the daily is proven."""
    journal.close()  # restore appends its own intent/result records to the same journal
    try:
        record = restore(w.window_id, reason=reason, by="runner", grace=1.0 if w.escalated else 10.0)
    except RunError as exc:
        state = w.state.reload()
        if state.failsafe_backend == "engine" and state.armed:
            from campaign.contracts.schema import DockerHost
            from campaign.lanes.runtimes.dockerhost import describe

            box = describe(DockerHost.model_validate((state.incumbent or {}).get("docker_host")))
            deadline = time.strftime("%H:%M:%S", time.localtime(state.deadline_wall or 0))
            raise RunError(f"{exc}; the watchdog on {box} restores the daily by itself once this runner's heartbeat "
                           f"is silent for {state.heartbeat_grace:g}s or at the deadline {deadline} (an engine that "
                           f"went down: once it is back); then `campaign resume {w.window_id}` finishes the "
                           "window") from exc
        raise
    finally:
        journal.reopen()
    atomic_write_json(w.bundle / "incumbent" / "restore.json", record)
    journal.intent("failsafe.disarm")
    disarm(w.state)
    journal.done("failsafe.disarm")
    return record


def forget_secrets(w: Window) -> None:
    """Once the window is over with the daily proven back (and the bundle scanned for its credentials), its
    private state keeps no credential: the key kept for a failsafe restoring in a bare environment goes, and
    each credential in the daily's snapshot becomes a reference to the variable holding it
    (``daily/secretstate.py``). A run that did not prove the daily keeps them: a failsafe may still need them."""
    state = w.state.reload()
    if not state.restored or state.armed or state.incumbent is None:
        return
    with state.locked():
        state = state.reload()
        if forget_credentials(state):
            state.save()
    w.state = state


def restore_summary(w: Window, record: dict[str, Any] | None) -> dict[str, Any]:
    spec = w.loaded.contract.incumbent
    if spec is None:
        return {"incumbent": None}
    if record is not None and record.get("action") == NEVER_STOPPED:
        return {"incumbent": spec.endpoint, "proved": None, "action": NEVER_STOPPED, "error": None}
    ok = bool(record and record.get("event") == "done" and record.get("proof"))
    left = (record or {}).get("lanes_not_stopped")  # a lane whose engine did not answer may still hold its GPUs
    return {"incumbent": spec.endpoint, "proved": ok,
            "action": (record or {}).get("action"), "error": (record or {}).get("error"),
            **({"lanes_not_stopped": left} if left else {})}


def known_secrets(w: Window) -> list[str]:
    """Every credential value this runner knows: what the lanes reference, and the daily's own."""
    found = [value for lane in w.loaded.lanes.values() for value in lane_secrets(lane)]
    state = w.state.reload()
    snap = resolve(state.incumbent, os.environ)[0]  # a resumed window's state may hold references only
    if snap:
        found += launch_secrets(snap.get("argv") or [], snap.get("env") or {}, [snap.get("api_key_env") or ""])
    if state.incumbent_api_key:  # a resumed runner may not have the variable the window began with
        found.append(state.incumbent_api_key)
    return found


def _redacted_snapshot(snap: dict[str, Any]) -> dict[str, Any]:
    """The bundle's copy of the daily's snapshot: credential values cut out of argv and every string, every
    environment value a keyed digest (the daily's environment is the host's, not the contract's: nothing
    in it is declared). The private copy in the state folder (0600) keeps the values, for the restore."""
    secrets = launch_secrets(snap.get("argv") or [], snap.get("env") or {}, [snap.get("api_key_env") or ""])
    redacted = Redactor(secrets).snapshot(snap)
    if snap.get("runtime") == "docker":  # the engine's own Env list: the same digests as the env above
        from campaign.daily.dailycontainer import BUNDLE_HOST_CONFIG

        redacted["config"] = {**redacted["config"], "Env": [f"{k}={v}" for k, v in redacted["env"].items()]}
        redacted["host_config"] = {k: v for k, v in redacted["host_config"].items() if k in BUNDLE_HOST_CONFIG}
        redacted.pop("env_sha256", None)  # an unkeyed digest of the values would let a guess be checked
    return redacted
