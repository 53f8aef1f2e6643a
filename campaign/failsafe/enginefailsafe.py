"""The ``engine`` failsafe: the deadline kept on the daily's own box, by a watchdog container on its engine.

A daily container on another box is restored by that box, not by the runner's machine: the runner may be
the thing that dies. ``boxwatchdog.py`` is copied into a container of a python image (the failsafe's
``image``, by default the daily's own), with the box engine's socket mounted and restart policy
``always``; its labels carry the window, the generation and the deadline in the box's own clock (read from
the engine, so the two machines' clocks need not agree). The runner rewrites a heartbeat file inside it
through the engine's archive API; a runner that stops beating for ``heartbeat_grace`` is taken as dead.

Pre-flight runs the same image with ``--dry-run`` (it must reach the engine through the socket and see the
daily), and removes a stale watchdog of an ended window found on that engine, saying so.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from campaign.contracts.schema import DockerHost, FailsafeSpec
from campaign.daily.state import WindowState, mark_disarmed, record_arming, windows_dir
from campaign.errors import CampaignError, DockerError, DockerNotFound, DockerRefused, PreflightError, RunError
from campaign.lanes.runtimes.dockererrors import docker_errors, why

ENGINE_FOLDER = "/campaign/engine"  # where the watchdog sees the folder of the engine's socket

__all__ = ["LABEL_FAILSAFE", "arm", "beat", "box_report", "disarm", "dry_run", "remove_stale", "stale_watchdogs"]

LABEL_FAILSAFE = "campaign.failsafe"
SCRIPT = Path(__file__).with_name("boxwatchdog.py")
ACK_WAIT = 30.0
DRY_RUN_WAIT = 60.0
REMOVE_WAIT = 30.0


def _client(snap: dict[str, Any]) -> Any:
    from campaign.lanes.runtimes.dockerhost import client_for

    return client_for(DockerHost.model_validate(snap["docker_host"]))


def _host(snap: dict[str, Any]) -> DockerHost:
    return DockerHost.model_validate(snap["docker_host"])


def _why(exc: BaseException) -> str:
    """The engine's part of a ``DockerError`` (its own line already names the engine and the step)."""
    return why(exc.__cause__ or exc) if isinstance(exc, DockerError) else str(exc)


def _archive(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _create(snap: dict[str, Any], spec: FailsafeSpec, state: WindowState, *, name: str, settings: dict[str, Any],
            labels: dict[str, str], restart: bool, command: list[str]) -> str:
    from docker.types import Mount

    client = _client(snap)
    host = _host(snap)
    script = SCRIPT.read_bytes()
    folder, socket_name = host.socket.rsplit("/", 1)
    # the socket's folder, not the socket: an engine started again makes its socket anew, and a watchdog
    # that kept running (live-restore) holding the old file would reach nothing; a runc that binds a
    # socket file whose inode is gone refuses to start the container at all (seen on a restarted engine)
    engine = (Mount(target=ENGINE_FOLDER, source=folder, type="bind", read_only=True) if folder
              else Mount(target=f"{ENGINE_FOLDER}/{socket_name}", source=host.socket, type="bind"))
    mounts = [engine, *(Mount(target=m.container, source=m.host, type="bind", read_only=m.read_only)
                        for m in spec.mounts)]
    with docker_errors(f"creating the failsafe watchdog container {name}", host.url):
        container = client.api.create_container(
            spec.image or snap["image_id"], entrypoint=[spec.python, "/campaign/watchdog.py"], command=command,
            name=name, environment={"CAMPAIGN_FAILSAFE": json.dumps(settings), "PYTHONDONTWRITEBYTECODE": "1",
                                    "CAMPAIGN_ENGINE_SOCKET": f"{ENGINE_FOLDER}/{socket_name}"},
            labels={LABEL_FAILSAFE: "1", "campaign.window": state.window, **labels},
            host_config=client.api.create_host_config(
                mounts=mounts, network_mode="host", restart_policy={"Name": "always"} if restart else {"Name": "no"}))
        client.api.put_archive(container["Id"], "/", _archive({"campaign/watchdog.py": script,
                                                               "campaign/heartbeat": b"0\n"}))
    return str(container["Id"])


def _settings(snap: dict[str, Any], state: WindowState, spec: FailsafeSpec, endpoint: str, deadline: float) -> dict[str, Any]:
    return {"window": state.window, "daily": snap["container_id"], "restart_policy": snap["restart_policy"],
            "deadline": deadline, "grace": spec.heartbeat_grace, "endpoint": endpoint, "budget": 600}


def dry_run(state: WindowState, spec: FailsafeSpec, endpoint: str) -> str:
    """The watchdog's image, python and socket work on that box and it sees the daily: else nothing is touched."""
    snap = state.incumbent or {}
    client = _client(snap)
    where = _host(snap).url
    try:
        stale = remove_stale(snap)
        container = _create(snap, spec, state, name=f"campaign-failsafe-dryrun-{state.window}"[:120],
                            settings=_settings(snap, state, spec, endpoint, time.time()), labels={},
                            restart=False, command=["--dry-run"])
        with docker_errors("the failsafe's dry run", where):
            try:
                client.api.start(container)
                code = client.api.wait(container, timeout=DRY_RUN_WAIT).get("StatusCode")
                said = client.api.logs(container).decode(errors="replace")
            finally:
                client.api.remove_container(container, force=True)
    except DockerError as exc:
        raise PreflightError(f"failsafe dry run on {where} failed, so the incumbent was not touched: "
                             f"{_why(exc)}") from exc
    if code != 0 or "fired" not in said:
        last = (said.strip().splitlines() or [f"exit code {code}"])[-1]
        raise PreflightError(f"failsafe dry run on {where} failed, so the incumbent was not touched: the watchdog "
                             f"container said: {last[:200]} (failsafe.image needs a python at failsafe.python)")
    removed = "".join(f"; removed the stale watchdog {item['name']} of window {item['window'] or '?'} ({item['status']})"
                      for item in stale)
    return f"engine dry run fired on {where}{removed}"


def _box_clock(client: Any) -> float:
    with docker_errors("reading the box's clock", getattr(client, "campaign_engine", None)):
        text = str(client.info().get("SystemTime") or "")
    try:  # "2026-12-01T12:00:00.123456789Z": Python wants at most microseconds
        head, _, frac = text.rstrip("Z").partition(".")
        return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()
    except ValueError:
        return time.time()


def arm(state: WindowState, spec: FailsafeSpec, endpoint: str) -> WindowState:
    """Start the watchdog container on the daily's engine and see it report armed; records it in the state."""
    snap = state.incumbent or {}
    client = _client(snap)
    where = _host(snap).url
    state = record_arming(state, "engine", spec.deadline, boot_clock=False)  # the box keeps its own clock
    generation = state.failsafe_generation
    try:  # an earlier generation's (a resumed window) would restore the daily mid-window: gone before this one
        _remove_window_watchdogs(client, state.window)
    except DockerError as exc:
        mark_disarmed(state)
        raise PreflightError(f"failsafe watchdog on {where}: an earlier one of window {state.window} could not be "
                             f"removed ({_why(exc)}); the incumbent was not touched") from exc
    try:
        box_deadline = _box_clock(client) + spec.deadline
        container = _create(snap, spec, state, name=f"campaign-failsafe-{state.window}-{generation}"[:120],
                            settings=_settings(snap, state, spec, endpoint, box_deadline),
                            labels={"campaign.generation": str(generation), "campaign.deadline": f"{box_deadline:.0f}"},
                            restart=True, command=[])
        with docker_errors("starting the failsafe watchdog container", where):
            client.api.start(container)
        with state.locked():
            state = state.reload()
            state.failsafe_container = container
            state.save()
        said = _await_armed(client, container, where)
        if said is None:
            return state.reload()
    except DockerError as exc:
        _disarm_quietly(state)
        raise PreflightError(f"failsafe watchdog on {where} could not be armed: {_why(exc)}; the incumbent was not "
                             "touched") from exc
    _disarm_quietly(state)
    last = (said.strip().splitlines() or ["nothing"])[-1]
    raise PreflightError(f"failsafe watchdog on {where} did not report armed within {ACK_WAIT:g}s (it said: "
                         f"{last[:160]}); the incumbent was not touched")


def _await_armed(client: Any, container: str, where: str) -> str | None:
    """None once the watchdog said it is armed; else what it said last (it stopped, or ACK_WAIT passed)."""
    waited = time.monotonic() + ACK_WAIT
    said = ""
    with docker_errors("waiting for the failsafe watchdog to report armed", where):
        while time.monotonic() < waited:
            said = client.api.logs(container).decode(errors="replace")
            if "armed:" in said:
                return None
            if not client.api.inspect_container(container)["State"]["Running"]:
                break
            time.sleep(0.2)
    return said


def beat(state: WindowState, count: int) -> None:
    """The runner is alive: rewrite the heartbeat inside the watchdog container."""
    if not state.failsafe_container or not state.armed:
        return
    client = _client(state.incumbent or {})
    with docker_errors("writing the runner's heartbeat", _host(state.incumbent or {}).url):
        client.api.put_archive(state.failsafe_container, "/", _archive({"campaign/heartbeat": f"{count}\n".encode()}))


def _disarm_quietly(state: WindowState) -> None:
    try:
        disarm(state)
    except RunError:
        pass


def disarm(state: WindowState) -> None:
    """Remove the watchdog container. Called only once the daily is proven back: a watchdog left behind
    (the engine did not answer) finds the daily running at its deadline and starts nothing."""
    mark_disarmed(state)
    fresh = state.reload()
    if not fresh.failsafe_container:
        return
    try:  # every generation's: one an earlier removal missed is found by its label, not by the state's last id
        _remove_window_watchdogs(_client(fresh.incumbent or {}), fresh.window)
    except DockerError as exc:
        raise RunError(f"failsafe watchdog {fresh.failsafe_container[:12]} on {_host(fresh.incumbent or {}).url} "
                       f"could not be removed ({_why(exc)}); it will find the daily serving and do nothing; "
                       "remove it with `campaign cleanup --remove`") from exc


def _remove_window_watchdogs(client: Any, window: str) -> None:
    """Remove every watchdog container of ``window`` on this engine and see them gone. A container its restart
    policy is restarting can outlive one forced removal (the engine answers 409 while it is being removed), so
    this asks again until the engine lists none, for up to REMOVE_WAIT seconds."""
    engine = getattr(client, "campaign_engine", None)
    filters = {"label": [LABEL_FAILSAFE, f"campaign.window={window}"]}
    waited, said = time.monotonic() + REMOVE_WAIT, ""
    while True:
        with docker_errors("listing the failsafe watchdog containers", engine):
            left = [item["Id"] for item in client.api.containers(all=True, filters=filters)]
        if not left:
            return
        if time.monotonic() > waited:
            raise DockerRefused(f"docker engine {engine or '?'}: {len(left)} watchdog container(s) still listed "
                                f"after {REMOVE_WAIT:g}s of removal{said}", engine=engine or "")
        for container in left:
            try:
                with docker_errors(f"removing watchdog container {container[:12]}", engine):
                    client.api.remove_container(container, force=True)
            except DockerNotFound:
                pass
            except DockerRefused as exc:  # being removed or restarted: asked again until the wait is out
                said = f" (the engine said: {_why(exc)})"
        time.sleep(0.2)


def stale_watchdogs(client: Any) -> list[dict[str, Any]]:
    """Watchdog containers on an engine that guard nothing any more. A window this machine knows is judged
    by its state (armed, with this very container); one from another runner machine by the container itself:
    stopped, its deadline passed on the box's clock, or it said it restored the daily. A live window of
    another runner is never touched."""
    found = []
    box_now: float | None = None
    engine = getattr(client, "campaign_engine", None)
    with docker_errors("listing the failsafe watchdog containers", engine):
        items = client.api.containers(all=True, filters={"label": [LABEL_FAILSAFE]})
    for item in items:
        labels = item.get("Labels") or {}
        window = labels.get("campaign.window", "")
        state_file = windows_dir() / window / "state.json"
        if window and state_file.exists():
            try:
                state = WindowState.load(window)
                stale = not (state.armed and state.failsafe_container == item["Id"])
            except (CampaignError, OSError):  # an unreadable state is not a live window's
                stale = True
        elif item.get("State") != "running":
            stale = True
        else:
            if box_now is None:
                box_now = _box_clock(client)
            deadline = labels.get("campaign.deadline", "")
            with docker_errors(f"reading what watchdog {item['Id'][:12]} said", engine):
                said = client.api.logs(item["Id"], tail=20).decode(errors="replace")
            stale = (deadline.replace(".", "", 1).isdigit() and box_now > float(deadline)) or "restored:" in said \
                or "restored already" in said
        if stale:
            found.append({"id": item["Id"], "name": (item.get("Names") or ["?"])[0].lstrip("/"), "window": window,
                          "status": item.get("Status")})
    return found


def remove_stale(snap: dict[str, Any]) -> list[dict[str, Any]]:
    """Remove (and return, to be reported) stale watchdogs on the daily's engine: one of an ended window
    would otherwise start the daily in the middle of this one."""
    client = _client(snap)
    stale = stale_watchdogs(client)
    for item in stale:
        try:
            with docker_errors(f"removing stale watchdog {item['name']}", _host(snap).url):
                client.api.remove_container(item["id"], force=True)
        except DockerNotFound:
            pass  # removed meanwhile (its own restart policy, or another cleanup): what was wanted
    return stale


def box_report(state: WindowState) -> str:
    """The box watchdog's last word, for `campaign status`: armed, restoring, restored, or gone."""
    container = state.failsafe_container or ""
    try:
        client = _client(state.incumbent or {})
        with docker_errors("asking the box watchdog how it is", _host(state.incumbent or {}).url):
            attrs = client.api.inspect_container(container)
            said = client.api.logs(container, tail=1).decode(errors="replace").strip()
    except DockerNotFound:  # the engine answered: no such container (removed by hand, or by cleanup)
        return "box watchdog: gone from its engine"
    except Exception as exc:  # top level of a status line: `campaign status` says "unknown" (never "gone")
        # whatever kept the box from answering, and never ends in a traceback
        why = str(exc) if isinstance(exc, CampaignError) else f"{type(exc).__name__}: {str(exc)[:200]}"
        return f"box watchdog: unknown ({why})"
    running = (attrs.get("State") or {}).get("Running")
    return f"box watchdog {'running' if running else 'stopped'}: {said[21:] or 'nothing said yet'}"
