"""The runtime one-axis check: what actually ran must differ exactly as what was meant to run.

The contract check proved the intended launches differ only on the declared axis; here the launches
read back from the runtime (``/proc`` for processes, ``docker inspect`` for containers) are diffed the
same way, so a flag dropped by a wrapper or an env var the runtime injected shows up as a mismatch.
Lane files and pinned models are compared by the digest read back inside the running lane
(``files.<name>``, ``models.<role>``), and their paths in argv and env are put back as ``${file:NAME}``
and ``${model:ROLE}`` (inside a JSON argument too), as the contract wrote them.
Container snapshots add the image id, mounts, /dev/shm size, cpuset, device requests and network,
compared as launched (``launched``) and as the engine reports them; process snapshots add the CPUs the
kernel lets the lane run on. Keys a contract names directly (``env.X``, ``image``, ``mounts.<path>``,
``shm_size``, ``gpus``, ``cpus``, ``network``, ``docker_host``) must moreover differ
only where the axis says so: a variable the contract never set, injected into one lane, is caught even
when the runtime was asked to inject it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from campaign.contracts.args import arg_axis_keys
from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.units import format_cpuset, parse_cpuset
from campaign.fsutil import load_json_strict

__all__ = ["container_keys", "file_keys", "launch_keys", "runtime_axis_difference"]

_DIRECT = ("env.", "image", "mounts.", "files.", "models.", "shm_size", "gpus", "cpus", "network", "docker_host")


def file_keys(snapshot: dict[str, Any], *, launched: bool) -> dict[str, Any]:
    """Each lane file and model as pinned (launched) or as read back inside the running lane: ``files.<name>``,
    ``models.<role>``."""
    which = "pinned_sha256" if launched else "sha256"
    files = snapshot.get("files") or {}
    keys = {f"files.{name}": entry.get(which) for name, entry in files.items()}
    keys.update({f"models.{role}": entry.get(which) for role, entry in (snapshot.get("models") or {}).items()})
    return keys


def _as_written(snapshot: dict[str, Any], values: list[str] | dict[str, str]) -> Any:
    """argv or env with each lane file's path put back as ${file:NAME}: two lanes reading different slot
    maps through the same reference differ in ``files.<name>``, not in every argument that names it."""
    paths = {entry["path"]: f"${{file:{name}}}" for name, entry in (snapshot.get("files") or {}).items()
             if entry.get("path")}
    models = {entry["path"]: f"${{model:{role}}}" for role, entry in (snapshot.get("models") or {}).items()
              if entry.get("path")}
    paths.update(models)
    if not paths:
        return values

    def one(value: str) -> str:  # whole values, as the contract may write them; a model's also inside JSON
        if value in paths:
            return paths[value]
        option, eq, rest = value.partition("=")
        if eq and option.startswith("-") and rest in paths:
            return f"{option}={paths[rest]}"
        for path, ref in models.items():
            value = value.replace(json.dumps(path), f'"{ref}"')
        return value

    if isinstance(values, dict):
        return {k: one(v) for k, v in values.items()}
    return [one(v) for v in values]


def launch_keys(argv: list[str], env: dict[str, str], exe: str | None = None) -> dict[str, Any]:
    flat: dict[str, Any] = {"executable": exe or (argv[0] if argv else None)}
    flat.update(arg_axis_keys(argv[1:]))
    flat.update({f"env.{k}": v for k, v in env.items()})
    return flat


def container_keys(snapshot: dict[str, Any], *, launched: bool) -> dict[str, Any]:
    """A container snapshot's serving facts as axis keys, as launched or as read back ({} for processes)."""
    if snapshot.get("runtime") != "docker":
        return {}
    source = (snapshot.get("launched") or {}) if launched else snapshot
    flat: dict[str, Any] = {"image": source.get("image_id"), "shm_size": source.get("shm_size"),
                            "cpus": _cpus(source.get("cpuset_cpus")), "docker_host": snapshot.get("docker_host")}
    file_paths = {entry.get("path") for entry in [*(snapshot.get("files") or {}).values(),
                                                  *(snapshot.get("models") or {}).values()]}
    for mount in source.get("mounts") or []:
        if mount.get("destination") in file_paths:
            continue  # a lane file or model: compared by the digest read back inside, not its host path
        flat[f"mounts.{mount.get('destination')}"] = (mount.get("source"), bool(mount.get("read_only")))
    requests = source.get("device_requests") or []
    flat["gpus"] = sorted(((r.get("Count"), tuple(r.get("DeviceIDs") or ()),
                            tuple(tuple(c) for c in r.get("Capabilities") or ())) for r in requests), key=repr)
    flat["network"] = (source.get("network_mode"), sorted((source.get("port_bindings") or {}).items()))
    return flat


def _cpus(cpuset: str | None) -> str | None:
    return format_cpuset(parse_cpuset(cpuset)) if cpuset else None


def process_keys(snapshot: dict[str, Any], *, launched: bool) -> dict[str, Any]:
    """A process lane's pinning and GPUs as launched (None: not set) or as read back from the running
    process ({} for containers). The GPUs read back are the devices nvidia-smi sees it hold memory on
    when it can say, else its CUDA_VISIBLE_DEVICES."""
    if snapshot.get("runtime") != "process":
        return {}
    if launched:
        return {"cpus": snapshot.get("launched_cpus"), "gpus": snapshot.get("launched_gpus")}
    gpus = snapshot.get("gpus")
    if snapshot.get("gpu_use"):
        gpus = ",".join(str(use["index"]) for use in snapshot["gpu_use"])
    return {"cpus": snapshot.get("cpus"), "gpus": gpus}


def _env_of(snapshot: dict[str, Any], key: str) -> dict[str, str]:
    """The env to compare: CUDA_VISIBLE_DEVICES belongs to ``gpus`` where the lane's gpus set it."""
    env = dict(snapshot.get(key) or {})
    if snapshot.get("launched_gpus") is not None:
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env.pop("CUDA_DEVICE_ORDER", None)
    return env


def _image_env(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    """Variables in what ran that neither lane was launched with: they come from the image."""
    names = set(a.get("env") or {}) | set(b.get("env") or {})
    return names - (set(a.get("launched_env") or {}) | set(b.get("launched_env") or {}))


def _undeclared_direct(a: dict[str, Any], b: dict[str, Any], keys: set[str], declared: set[str]) -> set[str]:
    """Directly declarable keys that differ without being on the axis. Env variables that neither lane was
    launched with come from the image, so a declared image change covers them."""
    from_image = _image_env(a, b)
    out = set()
    for key in keys:
        if not key.startswith(_DIRECT) or key in declared:
            continue
        if key.startswith("env.") and "image" in declared and key[4:] in from_image:
            continue
        out.add(key)
    return out


def _diff(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    return {k for k in set(a) | set(b) if a.get(k) != b.get(k)}


def runtime_axis_difference(bundle: Path, control: EffectiveLane, candidate: EffectiveLane,
                            declared: set[str]) -> str:
    """Empty when the read-back launches differ exactly as intended; otherwise what differs."""
    snapshots = {}
    for lane in (control, candidate):
        path = bundle / "lanes" / lane.name / "inspect.json"
        if not path.exists():
            return f"no inspect snapshot for lane {lane.name}"
        snapshots[lane.name] = load_json_strict(path)
    a, b = snapshots[control.name], snapshots[candidate.name]
    intended = _diff(launch_keys(_as_written(a, a["launched_argv"]), _as_written(a, _env_of(a, "launched_env"))),
                     launch_keys(_as_written(b, b["launched_argv"]), _as_written(b, _env_of(b, "launched_env"))))
    intended |= _diff(file_keys(a, launched=True), file_keys(b, launched=True))
    intended |= _diff(container_keys(a, launched=True), container_keys(b, launched=True))
    intended |= _diff(process_keys(a, launched=True), process_keys(b, launched=True))
    actual = _diff(launch_keys(_as_written(a, a["argv"]), _as_written(a, _env_of(a, "env"))),
                   launch_keys(_as_written(b, b["argv"]), _as_written(b, _env_of(b, "env"))))
    actual |= _diff(file_keys(a, launched=False), file_keys(b, launched=False))
    actual |= _diff(container_keys(a, launched=False), container_keys(b, launched=False))
    actual |= _diff(process_keys(a, launched=False), process_keys(b, launched=False))
    if a.get("executable_sha256") != b.get("executable_sha256") and "executable" not in declared:
        actual.add("executable (binary sha256)")
    if "image" in declared:  # variables only an image sets change with a declared image
        intended |= {k for k in actual if k.startswith("env.") and k[4:] in _image_env(a, b)}
    undeclared = _undeclared_direct(a, b, actual | intended, declared)
    if actual == intended and not undeclared:
        return ""
    parts = []
    if extra := sorted((actual - intended) | undeclared):
        parts.append("ran with undeclared differences " + ", ".join(extra))
    if lost := sorted(intended - actual):
        parts.append("declared differences absent from what ran " + ", ".join(lost))
    return "; ".join(parts)
