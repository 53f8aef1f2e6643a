"""Promotion and rollback when the daily is a container.

The new daily is the candidate's container as the window measured it (image id, entrypoint and command as
in ``lanes/<candidate>/inspect.json``, each redacted credential put back from the lane's ``${env:NAME}``,
its env, mounts and /dev/shm) with the daily's serving identity (``identity``): the daily's name, labels,
network, published ports, restart policy, GPUs and CPUs, and the daily's --host and --port in its command.
The previous daily is stopped, never removed, and renamed ``<name>-rollback-<time>``: the ledger keeps its snapshot, so a
rollback renames it back and starts that same container (or recreates it from the snapshot if it was
pruned). A promotion interrupted at any step is put back by ``put_back``.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from campaign.contracts.resolve import EffectiveLane
from campaign.daily import dailycontainer
from campaign.errors import DockerNotFound, DockerRefused, RunError
from campaign.faults import crash_point
from campaign.lanes.command import engine_argv
from campaign.lanes.runtimes.dockererrors import docker_errors
from campaign.lanes.session import files_unchanged, resolve_refs
from campaign.promotion.candidate import measured_lane, unredacted_argv
from campaign.promotion.identity import axis_names, listen_positions, map_listen

__all__ = ["candidate_container", "put_back", "swap_back", "swap_in"]


def _mount_binds(mounts: list[dict[str, Any]]) -> list[str]:
    return [f"{m['source']}:{m['destination']}{':ro' if m.get('read_only') else ''}" for m in mounts
            if m.get("type") in (None, "bind")]


def _env(inspect: dict[str, Any], lane: EffectiveLane, candidate: str) -> list[str]:
    """What the lane was launched with; a value the bundle redacted comes back from the lane's own
    ``${env:NAME}`` reference, resolved now (a literal credential is not recoverable: refused)."""
    resolved = resolve_refs(lane).env
    env = []
    for name, value in (inspect.get("launched_env") or {}).items():
        if "<redacted" in str(value):
            if name not in resolved or "<redacted" in resolved[name]:
                raise RunError(f"lane {candidate}: env {name} is redacted in the bundle and not a ${{env:NAME}} "
                               "reference; refusing to promote a container that cannot be rebuilt exactly")
            value = resolved[name]
        env.append(f"{name}={value}")
    return env


def candidate_container(copy: Path, candidate: str, daily: dict[str, Any], window: str | None) -> dict[str, Any]:
    """The create config of the new daily: the candidate as measured (image, command with the daily's
    --host and --port, env, mounts, shm) under the daily's name, labels, network, published ports, restart
    policy, GPUs and CPUs (``identity``)."""
    inspect, lane = measured_lane(copy, candidate)
    if inspect.get("runtime") != "docker":
        raise RunError(f"lane {candidate} ran as a {inspect.get('runtime')}, and the daily is a container: a "
                       "container daily is promoted from a docker lane's measured container")
    files_unchanged(lane)  # a moved file would be bound as an empty directory in its place
    entrypoint, cmd = _command(inspect, lane, candidate, daily["argv"])
    labels = {k: v for k, v in (daily["config"].get("Labels") or {}).items() if not k.startswith("campaign.")}
    labels["campaign.promoted_from"] = f"{window or ''}/{candidate}"
    config = {"Image": inspect["image_id"], "Entrypoint": entrypoint, "Cmd": cmd,
              "Env": _env(inspect, lane, candidate), "Labels": labels,
              "ExposedPorts": daily["config"].get("ExposedPorts")}
    axis = axis_names(lane)
    # the daily's host config (network, published ports, restart policy, ipc, ...) with what the candidate
    # brings: its mounts, /dev/shm and scratch tmpfs, and GPUs or CPUs only when its axis changes them
    host_config = {**daily["host_config"], "Binds": _mount_binds(inspect.get("mounts") or []), "Mounts": None,
                   "ShmSize": inspect.get("shm_size") or daily["host_config"].get("ShmSize"),
                   "Tmpfs": inspect.get("tmpfs") or None}
    if "gpus" in axis:
        host_config["DeviceRequests"] = inspect.get("device_requests") or None
    if "cpus" in axis:
        host_config["CpusetCpus"] = inspect.get("cpuset_cpus") or ""
    return {"config": {k: v for k, v in config.items() if v is not None}, "host_config": host_config}


def _command(inspect: dict[str, Any], lane: EffectiveLane, candidate: str,
             daily_argv: list[str]) -> tuple[list[str] | None, list[str]]:
    """The measured entrypoint and cmd, each redacted credential put back from its ``${env:NAME}`` and the
    lane's --host and --port mapped to the daily's. The lane's command built again from its spec, as its
    launch built it (``launch_command``), says where each of those stands."""
    entrypoint, cmd = inspect.get("entrypoint"), list(inspect.get("cmd") or [])
    serving = lane if lane.network == "host" else lane.model_copy(update={"host": "0.0.0.0"})
    template = engine_argv(lane.executable, serving, "<model>")
    measured = [*(entrypoint or []), *cmd] if lane.executable else cmd
    words = unredacted_argv(measured, lane, candidate, template)
    words = map_listen(words, listen_positions(template, lane, serving.host), daily_argv)
    return ([words[0]], words[1:]) if lane.executable else (entrypoint, words)


def _client(snap: dict[str, Any]) -> Any:
    return dailycontainer._client(snap.get("docker_host"))


def _where(snap: dict[str, Any]) -> str:
    return dailycontainer._engine_name(snap.get("docker_host"))


def swap_in(daily: dict[str, Any], create: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Stop the daily and rename it aside; create and start the new daily under its name. Returns the new
    daily's snapshot (it may already have exited: the smoke says so, and rolls back) and the name the
    previous one is kept under. Any failure or interrupt before the new daily runs puts the old one back."""
    client = _client(daily)
    kept_as = f"{daily['container']}-rollback-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    new_id = None
    try:
        dailycontainer.stop(daily)
        with docker_errors(f"keeping the daily aside as {kept_as}", _where(daily)):
            client.api.rename(daily["container_id"], kept_as)
        crash_point("promote.renamed")
        body = {**create["config"], "HostConfig": create["host_config"]}
        with docker_errors("creating and starting the new daily", _where(daily)):
            new_id = client.api.create_container_from_config(body, name=daily["container"])["Id"]
            client.api.start(new_id)
    except BaseException as exc:  # top level of a swap: whatever stopped it (an interrupt too), the previous
        # daily is put back first; the error goes on to the caller, which records promote-failed
        _put_back(client, daily, new_id)
        if isinstance(exc, Exception):
            raise RunError(f"the candidate's container did not start as the daily ({exc}); the previous daily "
                           "was started again") from exc
        raise
    settings = {k: daily.get(k) for k in ("endpoint", "api_key_env", "served_model", "stop_timeout", "ready_budget")}
    return dailycontainer.snapshot(daily["container"], daily.get("docker_host"), settings, running=False), kept_as


def _put_back(client: Any, daily: dict[str, Any], new_id: str | None) -> None:
    if new_id is not None:  # a half-made new daily holds the name: it goes (by its id, never by name)
        with docker_errors(f"removing the half-made new daily {new_id[:12]}", _where(daily)):
            client.api.remove_container(new_id, force=True)
    put_back(daily, daily["container"])


def put_back(daily: dict[str, Any], name: str) -> tuple[str, str]:
    """The daily of an interrupted swap serves under ``name`` again: renamed back from wherever it was kept
    (its id does not change), or recreated from its snapshot if it was removed since; then started with its
    restart policy. Returns its container id and "still serving", "started" or "recreated"."""
    client = _client(daily)
    try:
        with docker_errors(f"renaming the daily back to {name}", _where(daily)):
            client.api.rename(daily["container_id"], name)
    except DockerNotFound:
        pass  # removed since: start() recreates it from the snapshot under that name
    except DockerRefused:
        pass  # not renamed yet, or already back (an engine that did not answer is raised: never taken for done)
    serving = dailycontainer.is_running({**daily, "container": name})  # interrupted before its stop
    started = dailycontainer.start({**daily, "container": name})  # its restart policy back, in either case
    return started["container_id"], "still serving" if serving else started["action"]


def swap_back(current: dict[str, Any], previous: dict[str, Any], *, undone: int) -> tuple[str, str, str]:
    """Stop the promoted daily and keep it aside as ``<name>-undone-<seq>``; rename the kept previous daily
    back to the daily's name and start that same container, or, if it was removed (pruned), recreate it from
    its snapshot. Returns the name the promoted one is kept under, the restored daily's container id, and
    "started" or "recreated". Nothing is touched when neither the kept container nor its image is there."""
    client = _client(previous)
    where = _where(previous)
    name = current["container"]
    try:
        with docker_errors("looking for the kept previous daily", where):
            client.api.inspect_container(previous["container_id"])
        pruned = False
    except DockerNotFound:
        pruned = True
        try:
            with docker_errors("looking for the previous daily's image", where):
                client.images.get(previous["image_id"])
        except DockerNotFound:
            raise RunError(f"the previous daily container {previous['container']} ({previous['container_id'][:12]}) "
                           f"is gone (removed or pruned) and so is its image {previous['image_id'][:19]}: it cannot be "
                           "recreated; the promoted daily was left serving") from None
    kept_as = f"{name}-undone-{undone}"
    dailycontainer.stop(current)
    with docker_errors(f"keeping the promoted daily aside as {kept_as}", where):
        client.api.rename(current["container_id"], kept_as)
    restored = {**previous, "container": name}
    try:
        if pruned:
            restored_id = dailycontainer.start(restored)["container_id"]  # no container by that name: recreated
        else:
            with docker_errors(f"renaming the previous daily back to {name}", where):
                client.api.rename(previous["container_id"], name)
            restored_id = dailycontainer.start(restored)["container_id"]
    except BaseException:  # top level of a rollback: whatever stopped it (an interrupt too), a daily serves
        # again before the error goes on. The name is freed first (a half-made recreation goes; the kept daily
        # goes back to its kept name), then the promoted daily takes it again and serves, rather than none
        with contextlib.suppress(DockerNotFound, DockerRefused), docker_errors("freeing the daily's name", where):
            if pruned:
                client.api.remove_container(name, force=True)
            else:
                client.api.stop(previous["container_id"], timeout=10)
                client.api.rename(previous["container_id"], previous["container"])
        with docker_errors("putting the promoted daily back under its name", where):
            client.api.rename(current["container_id"], name)
        dailycontainer.start(current)
        raise
    return kept_as, restored_id, "recreated" if pruned else "started"
