"""What can be checked of a lane before it starts, for pre-flight and ``campaign doctor``: where it runs, its
model (a regular file or a folder on this box, its sha256), its port, and what a launch needs beyond the
model (referenced secrets set, pinned CPUs here; a docker lane's engine, image, mounts and model path)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from campaign.contracts.hashing import sha256_file
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import PreflightError
from campaign.fsutil import UnreadableFile, open_regular
from campaign.lanes.command import resolve_refs
from campaign.lanes.hostcpu import check_cpus_here

__all__ = ["check_lane", "is_local", "local_model", "model_sha256", "port_is_free"]


def is_local(lane: EffectiveLane) -> bool:
    """Whether the lane runs on this box (so its port, files and binary are this box's)."""
    if lane.runtime != "docker":
        return True
    from campaign.lanes.runtimes.dockerhost import is_local as engine_is_local

    return engine_is_local(lane.docker_host)


def check_lane(lane: EffectiveLane, model_path: str) -> dict[str, Any]:
    """Pre-flight for what a launch needs beyond the model: referenced secrets set; for docker lanes the
    engine, the pinned image, the mounts and the model's path inside the container (returned with the
    image id: ``{"image_id", "model_path"}``; empty for a process lane)."""
    resolve_refs(lane)
    if lane.runtime == "process" and lane.cpus:
        check_cpus_here(lane.cpus, f"lane {lane.name}")
    if lane.runtime == "docker":
        from campaign.lanes.runtimes.docker import check_lane as check_docker_lane

        return check_docker_lane(lane, model_path)
    return {}


def local_model(lane: EffectiveLane, path: Path) -> tuple[str, str]:
    """A model path on this box, resolved, and what it is (``"file"`` or ``"folder"``): a PreflightError
    naming the path and what is wrong with it otherwise (missing, a FIFO, a device, a socket, a symlink loop,
    a NUL byte, a kernel file system), never a hang on ``/dev/zero`` or a FIFO, never a traceback."""
    try:
        with open_regular(path, what="model"):
            kind = "file"
    except UnreadableFile as exc:
        if not os.path.isdir(path):  # a folder (a Hugging Face checkpoint) is a model too; isdir never raises
            raise PreflightError(f"lane {lane.name}: {exc}") from exc
        kind = "folder"
    if kind == "folder" and lane.model.sha256:
        raise PreflightError(f"lane {lane.name}: model {path} is a folder, but model.sha256 pins a single file "
                             "(pin a folder's files with model.sha256_manifest)")
    return os.path.realpath(path), kind  # realpath, not Path.resolve: a loop made meanwhile is no traceback


def model_sha256(lane: EffectiveLane, path: Path) -> str:
    """The sha256 of a lane's model file, streamed; a path that is not a regular file is a PreflightError
    naming it and what it is."""
    try:
        return sha256_file(path, what="model")
    except UnreadableFile as exc:
        raise PreflightError(f"lane {lane.name}: {exc}") from exc


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
