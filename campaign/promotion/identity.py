"""The promoted daily's serving identity: what it keeps from the daily it replaces, what it takes from the
candidate, and the lane plumbing mapped back.

A window measures a candidate on a lane: its own port, its host address, its container name, perhaps the
host network. None of that is what the candidate changed; it is where the window happened to run it. The
daily's users call the daily's endpoint, so the promoted daily keeps, from the daily:

- ``KEPT``: its name (container name or pidfile), network, published ports (and exposed ports), the
  engine's host and port arguments (the daily's own ``--host``/``--port`` values, or none where the daily
  gave none and the engine's default served), restart policy, the GPUs and CPUs it held, and its labels;

and takes from the candidate, as measured, its axis and what the axis implies (``TAKEN``): image, engine
command and flags, env, mounts and files, /dev/shm (and GPUs or CPUs when the axis names ``gpus`` or
``cpus``). The lane's plumbing (its --host and --port, container name, network mode, published ports) is
mapped back to the daily's.

``promoted_daily_summary`` says it in words before a window runs (``campaign validate``; ``campaign plan``
may show it too).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from campaign.contracts.args import last_values
from campaign.contracts.load import LoadedContract
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import RunError
from campaign.lanes.engines.registry import adapter_for

__all__ = ["KEPT", "TAKEN", "axis_names", "listen_positions", "map_listen", "promoted_daily_summary"]

KEPT = ("name", "network", "published ports", "engine host and port arguments", "restart policy", "GPUs", "CPUs",
        "labels")
TAKEN = ("image", "engine command and flags", "env", "mounts and files", "shm size")


def axis_names(lane: dict[str, Any] | EffectiveLane) -> set[str]:
    """The top-level fields a candidate's axis names (``args.x`` -> ``args``, ``gpus`` -> ``gpus``)."""
    axis = lane.axis if isinstance(lane, EffectiveLane) else lane.get("axis") or []
    return {str(entry).split(".", 1)[0].strip() for entry in axis}


def listen_positions(template: list[str], lane: EffectiveLane, host: str) -> dict[str, int]:
    """Where, in a lane's command built from its spec, the engine's host and port options stand: the
    adapter's server arguments put them before the lane's own args, so the first of each is plumbing."""
    options = adapter_for(lane.engine).listen_options
    wanted = dict(zip(options, (host, str(lane.port)), strict=True))
    found = {}
    for option, value in wanted.items():
        at = next((i for i in range(len(template) - 1) if template[i] == option and template[i + 1] == value), None)
        if at is None:
            raise RunError(f"lane {lane.name}: its command has no {option} {value} where the engine's "
                           "arguments put it; refusing to promote a command whose listen address cannot be mapped")
        found[option] = at
    return found


def map_listen(words: list[str], positions: dict[str, int], daily_argv: list[str]) -> list[str]:
    """The candidate's command with each listen option given the daily's value for it, or dropped where the
    daily gave none (the engine's default is where the daily listens)."""
    daily = last_values(list(daily_argv))
    mapped: list[str | None] = list(words)
    for option, at in positions.items():
        if daily.get(option):
            mapped[at + 1] = daily[option]
        else:
            mapped[at] = mapped[at + 1] = None
    return [word for word in mapped if word is not None]


def _lane_address(lane: EffectiveLane) -> str:
    where = "the host network" if lane.runtime == "docker" and lane.network == "host" else (
        "a bridge network" if lane.runtime == "docker" else "this host")
    return f"{lane.host}:{lane.port} on {where}"


def promoted_daily_summary(loaded: LoadedContract) -> list[str]:
    """One line per candidate whose lane listens elsewhere than the daily's endpoint (another port or
    address; a container lane's network named with it), saying what the promoted daily will be. Empty when there is no daily, or every candidate listens where the daily does."""
    spec = loaded.contract.incumbent
    if spec is None:
        return []
    endpoint = urlsplit(spec.endpoint)
    daily_port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    daily = f"container {spec.container}" if spec.runtime == "docker" else f"the process in {spec.pidfile}"
    lines = []
    for lane in loaded.lanes.values():
        if lane.role != "candidate":
            continue
        hosts = {endpoint.hostname, "0.0.0.0"} | ({"127.0.0.1"} if endpoint.hostname == "localhost" else set())
        if lane.port == daily_port and lane.host in hosts:
            continue
        axis = ", ".join(lane.axis) or "its axis"
        lines.append(f"lane {lane.name} is measured at {_lane_address(lane)}, the daily answers at {spec.endpoint}: "
                     f"promoted, {lane.name} runs as {daily} with the daily's {', '.join(KEPT)}; only {axis} (and "
                     f"what it implies: {', '.join(TAKEN)}) comes from the lane")
    return lines
