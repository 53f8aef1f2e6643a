"""Pre-flight: everything a window can check before any lane starts or the daily is touched: each lane's
engine and executable, its model's identity (sha256 or a manifest, hashed here or on the lane's box), its
port, and the CPUs a gate pins its client to."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from campaign.contracts.load import LoadedContract
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import InputError, PreflightError
from campaign.fsutil import read_text_bounded
from campaign.lanes.hostcpu import check_cpus_here
from campaign.lanes.session import check_lane, is_local, local_model, model_sha256, port_is_free, resolve_executable

__all__ = ["MANIFEST_BYTES", "daily_port_of", "describe_engine", "preflight"]


def preflight(loaded: LoadedContract, *, ports: bool = True) -> dict[str, str]:
    """Everything checkable before a lane starts: engines, executables, model identity, ports.
    A port held by the incumbent is fine: it is stopped before the first lane boots."""
    from campaign.lanes.engines.registry import adapter_for

    incumbent_port = daily_port_of(loaded)
    spec = loaded.contract.incumbent
    if spec is not None and spec.runtime == "docker":
        from campaign.daily import dailycontainer

        # the daily container exists on the named engine, runs, and its image is there: else nothing starts
        dailycontainer.snapshot(spec.container or "", spec.docker_host.model_dump(mode="json")
                                if spec.docker_host else None, {})

    model_paths: dict[str, str] = {}
    hashed: dict[Any, str] = {}
    for lane in loaded.lanes.values():
        adapter_for(lane.engine)
        if lane.runtime == "process":
            resolve_executable(lane)
        if is_local(lane):  # a FIFO, a device or a loop is named as such: never hashed forever, never a traceback
            model_paths[lane.name], _kind = local_model(lane, loaded.resolve(lane.model.path))
            check_lane(lane, model_paths[lane.name])
        else:
            model_paths[lane.name] = _remote_model_path(lane)
            checked = check_lane(lane, model_paths[lane.name])
        if lane.model.sha256:
            digest = (_hash_here(lane, Path(model_paths[lane.name]), hashed) if is_local(lane)
                      else _hash_there(lane, checked["image_id"], [model_paths[lane.name]], hashed)[0])
            if digest != lane.model.sha256:
                raise PreflightError(f"lane {lane.name}: model {model_paths[lane.name]} has sha256 {digest}"
                                     f"{'' if is_local(lane) else ' on ' + describe_engine(lane)}, "
                                     f"not the pinned {lane.model.sha256}")
        if lane.model.sha256_manifest:
            _check_manifest(loaded, lane, Path(model_paths[lane.name]),
                            None if is_local(lane) else partial(_hash_there, lane, checked["image_id"], hashed=hashed))
        if ports and is_local(lane) and lane.port != incumbent_port and not port_is_free(lane.host, lane.port):
            raise PreflightError(f"lane {lane.name}: port {lane.host}:{lane.port} is already in use; "
                                 "another server there would be measured instead")
    for index, gate in enumerate(loaded.contract.gates):
        if cpus := getattr(gate, "client_cpus", None):
            check_cpus_here(cpus, f"gates[{index}] ({gate.id or gate.kind}) client_cpus")
    return model_paths


def daily_port_of(loaded: LoadedContract) -> int | None:
    incumbent = loaded.contract.incumbent
    return urlsplit(incumbent.endpoint).port if incumbent else None


def _check_manifest(loaded: LoadedContract, lane: EffectiveLane, model_dir: Path,
                    hash_there: Callable[[list[str]], list[str]] | None = None) -> None:
    manifest = loaded.resolve(lane.model.sha256_manifest or "")
    lines = _manifest_lines(manifest)
    files = [str(model_dir / name.strip().lstrip("*")) for _digest, name in lines]
    digests = hash_there(files) if hash_there else [model_sha256(lane, Path(f)) for f in files]
    bad = [Path(f).relative_to(model_dir) for f, (digest, _), seen in zip(files, lines, digests, strict=True) if seen != digest]
    if bad:
        raise PreflightError(f"lane {lane.name}: {len(bad)}/{len(lines)} model files differ from "
                             f"{manifest.name}, e.g. {bad[0]}")


# A sha256sum listing of a model's files: about 100 bytes a file, so 4 MiB is some 40,000 files.
MANIFEST_BYTES = 4 << 20


def _manifest_lines(manifest: Path) -> list[tuple[str, str]]:
    """(digest, name) per line of a ``sha256sum`` manifest, read bounded; a line of another shape is an
    InputError naming the manifest's line."""
    lines = []
    text = read_text_bounded(manifest, MANIFEST_BYTES, what="model manifest")
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split(None, 1)
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].strip().lstrip("*"):
            raise InputError(f"{manifest}:{number}: not a `sha256sum` line (<sha256>  <file>)")
        lines.append((parts[0], parts[1]))
    return lines


def _remote_model_path(lane: EffectiveLane) -> str:
    """A lane on another box loads the model from that box's disk: its path is that box's, absolute."""
    if not lane.model.path.startswith("/"):
        raise PreflightError(f"lane {lane.name}: model path {lane.model.path!r} must be absolute: the lane runs on "
                             f"{describe_engine(lane)}, and a path relative to the contract means nothing there")
    return os.path.normpath(lane.model.path)


def describe_engine(lane: EffectiveLane) -> str:
    from campaign.lanes.runtimes.dockerhost import describe

    return describe(lane.docker_host)


def _hash_here(lane: EffectiveLane, path: Path, hashed: dict[Any, str]) -> str:
    if path not in hashed:
        hashed[path] = model_sha256(lane, path)
    return hashed[path]


def _hash_there(lane: EffectiveLane, image_id: str, paths: list[str], hashed: dict[Any, str]) -> list[str]:
    """Each path hashed once per engine, on that box (lanes sharing a model share the work)."""
    from campaign.lanes.runtimes.docker import hash_on_engine

    engine = describe_engine(lane)
    todo = [p for p in paths if (engine, p) not in hashed]
    if todo:
        for path, digest in hash_on_engine(lane, image_id, todo, labels={"campaign.lane": lane.name}).items():
            hashed[(engine, path)] = digest
    return [hashed[(engine, p)] for p in paths]
