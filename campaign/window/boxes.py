"""Which boxes a window uses, and one window per box at a time.

Two windows on one box measure each other (the same GPUs, cores and memory bandwidth), so a runner claims
every box its window touches before anything is stopped or booted, and holds the claim until it ends. A
box is this machine (process lanes and dailies, and a local engine) or another box's Docker engine, named
by the engine's own identity rather than its URL: ``tcp://box:2376`` and ``ssh://ops@box`` reach one engine.
The claim is a lock file on the runner's machine, released by the kernel when the runner dies.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
from dataclasses import dataclass, field
from typing import IO, Any

from campaign.contracts.load import LoadedContract
from campaign.contracts.schema import DockerHost
from campaign.daily.state import state_root
from campaign.errors import PreflightError

__all__ = ["Box", "BoxClaim", "boxes_of", "claim", "overlapping"]

THIS_MACHINE = "this machine"


@dataclass(frozen=True)
class Box:
    key: str  # stable across URLs that reach the same engine
    name: str  # what a person reads: "this machine" or the engine's URL


@dataclass
class BoxClaim:
    window: str
    boxes: list[Box]
    _handles: list[IO[str]] = field(default_factory=list)

    def release(self) -> None:
        for handle in self._handles:
            handle.close()
        self._handles.clear()


def _engine_box(host: DockerHost | None) -> Box:
    from campaign.lanes.runtimes.dockerhost import engine_identity, is_local

    if is_local(host):
        return Box(THIS_MACHINE, THIS_MACHINE)
    found = engine_identity(host)
    key = hashlib.sha256(json.dumps([found["id"], found["name"], found["root"]]).encode()).hexdigest()[:24]
    return Box(key, found["url"])


def boxes_of(loaded: LoadedContract) -> list[Box]:
    """Every box the window touches: its lanes' and its daily's. Contacts each remote engine once."""
    hosts: dict[str, DockerHost | None] = {}
    for lane in loaded.lanes.values():
        host = lane.docker_host if lane.runtime == "docker" else None
        hosts[host.model_dump_json() if host else ""] = host
    spec = loaded.contract.incumbent
    if spec is not None:
        host = spec.docker_host if spec.runtime == "docker" else None
        hosts[host.model_dump_json() if host else ""] = host
    found: dict[str, Box] = {}
    for host in hosts.values():
        box = _engine_box(host)
        found.setdefault(box.key, box)
    return sorted(found.values(), key=lambda b: b.key)


def overlapping(windows: dict[str, list[Box]]) -> list[str]:
    """Pairs of windows (by name) that share a box, as sentences."""
    seen: dict[str, str] = {}
    problems = []
    for name, boxes in windows.items():
        for box in boxes:
            if box.key in seen:
                problems.append(f"{seen[box.key]} and {name} both use {box.name}")
            else:
                seen[box.key] = name
    return problems


def claim(window: str, boxes: list[Box]) -> BoxClaim:
    """Hold every box for ``window``, or refuse naming the window that holds one (nothing held then)."""
    folder = state_root() / "boxes"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    held = BoxClaim(window=window, boxes=boxes)
    for box in boxes:
        key = box.key if box.key != THIS_MACHINE else f"local-{socket.gethostname()}"
        handle = open(folder / f"{key}.lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _holder(handle.read(4096))  # one small JSON object; bounded all the same
            handle.close()
            held.release()
            raise PreflightError(f"{box.name} is in window {holder.get('window', '?')} (runner pid "
                                 f"{holder.get('pid', '?')}) already: two windows on one box would measure each "
                                 "other; wait for it or run this one on another box") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"window": window, "pid": os.getpid(), "box": box.name}))
        handle.flush()
        held._handles.append(handle)
    return held


def _holder(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
        return found if isinstance(found, dict) else {}
    except ValueError:
        return {}
