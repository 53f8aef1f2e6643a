"""A lane's command: its ``${file:NAME}`` and ``${env:NAME}`` references resolved, its executable found, and
the argv its engine runs. ``engine_argv`` is the one builder of that argv: a lane's launch (``session.boot_lane``
through ``launch_command``), the identity a resume checks, the daily started by hand (``daily.daily``) and
promotion's rebuild of a measured command (``promotion.candidate``) all call it, so promotion's token-for-token
match with what the window measured holds by construction."""

from __future__ import annotations

import shutil
from pathlib import Path

from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.secretrefs import substitute
from campaign.errors import PreflightError
from campaign.lanes.engines.base import EngineAdapter
from campaign.lanes.engines.registry import adapter_for

__all__ = ["engine_argv", "launch_command", "resolve_executable", "resolve_refs"]


def resolve_refs(lane: EffectiveLane) -> EffectiveLane:
    """The lane with every ``${file:NAME}`` in its args and env replaced by the path its engine reads the
    file at, and every ``${env:NAME}`` by the runner's value. Only the runtime ever sees this copy; everything
    recorded is built from the lane as written, then redacted."""
    lane = lane.with_file_paths()
    try:
        return lane.model_copy(update={"args": [substitute(a) for a in lane.args],
                                       "env": {k: substitute(v) for k, v in lane.env.items()}})
    except KeyError as exc:
        raise PreflightError(f"lane {lane.name}: the contract references ${{env:{exc.args[0]}}} but "
                             f"{exc.args[0]} is not set in the runner's environment") from None


def engine_argv(executable: str | None, lane: EffectiveLane, model_path: str,
                adapter: EngineAdapter | None = None) -> list[str]:
    """The argv a lane's engine runs: ``executable`` first (None: the image's ENTRYPOINT runs the rest), then
    the adapter's server arguments: the model at ``model_path``, the lane's host and port, then its args.
    ``lane`` is the lane as it will serve (resolved for a launch, as written for a template)."""
    served = (adapter or adapter_for(lane.engine)).server_args(lane, model_path)
    return [executable, *served] if executable is not None else served


def launch_command(lane: EffectiveLane, adapter: EngineAdapter, model_path: str) -> tuple[list[str], Path | None]:
    """The command a lane runs (``lane`` already resolved) and the host file of its executable, when
    known, for its sha256. A docker lane's command is its ``executable`` (a path inside the container)
    or the image's ENTRYPOINT, then the adapter's arguments with the model's path inside the container."""
    if lane.runtime != "docker":
        executable = resolve_executable(lane)
        return engine_argv(executable, lane, model_path, adapter), Path(executable)
    from campaign.lanes.runtimes.docker import container_path, host_path

    inside = container_path(lane, model_path)
    if inside is None:
        raise PreflightError(f"lane {lane.name}: model {model_path} is not under any of the lane's mounts")
    # on a bridge network the server must listen on the container's interface; docker publishes the port
    serving = lane if lane.network == "host" else lane.model_copy(update={"host": "0.0.0.0"})
    if lane.executable:
        return engine_argv(lane.executable, serving, inside, adapter), host_path(lane, lane.executable)
    return engine_argv(None, serving, inside, adapter), None


def resolve_executable(lane: EffectiveLane) -> str:
    found = shutil.which(lane.executable or "")
    if not found:
        raise PreflightError(f"lane {lane.name}: executable {lane.executable!r} not found on PATH")
    return found
