"""Effective lanes (defaults plus a lane's changes) and the one-axis check.

The computed difference between a candidate and its control is a set of dotted keys
(``args.spec-draft-n-max``, ``env.SLOT_CACHE_HOOK``, ``image``, ``model.path``...). It must equal the
declared axis exactly: an undeclared change and a declared change that does not happen are both errors.
Readiness budgets and boot-log rules are checks on a lane, not how it serves, so they are not axes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from campaign.contracts.args import arg_axis_keys, axis_key, last_values, merge_args, parse_args, render_args
from campaign.contracts.model import FILE_REF, MODEL_REF, MODELS_MOUNT_ROOT, LaneModel, StrictModel, unique_file_names
from campaign.contracts.modelrefs import substitute_arg, substitute_value
from campaign.contracts.schema import (
    FILES_MOUNT_ROOT,
    BootLogRules,
    Contract,
    DockerHost,
    Lane,
    LaneFile,
    ModelSpec,
    Mount,
    ReadinessSpec,
    Role,
    model_roles,
)
from campaign.contracts.units import format_cpuset, parse_cpuset

if TYPE_CHECKING:
    from campaign.contracts.engines import EngineKind
# else: named by contracts.kinds once every engine kind is registered

__all__ = ["FILE_REF", "MODEL_REF", "EffectiveLane", "axis_difference", "contract_docker_host", "effective_lane",
           "flatten_serving", "implied_by_models", "normalize_axis"]

_NOT_AXES = {"readiness", "boot_log", "stop"}


class EffectiveLane(StrictModel):
    name: str
    role: Role
    control: str | None = None
    axis: list[str] = Field(default_factory=list)
    aa: bool = False
    runtime: Literal["process", "docker"]
    engine: EngineKind
    executable: str | None = None
    image: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    mounts: list[Mount] = Field(default_factory=list)
    files: list[LaneFile] = Field(default_factory=list)
    models: dict[str, LaneModel] = Field(default_factory=dict)
    shm_size: int | None = None
    gpus: str | int | None = None
    cpus: str | None = None
    host: str = "127.0.0.1"
    port: int
    model: ModelSpec
    readiness: ReadinessSpec = Field(default_factory=ReadinessSpec)
    boot_log: BootLogRules = Field(default_factory=BootLogRules)
    stop: Literal["remove", "keep"] = "remove"
    network: Literal["host", "bridge"] = "host"
    docker_host: DockerHost | None = None
    context: int | None = None

    @field_validator("files")
    @classmethod
    def _unique_files(cls, files: list[LaneFile]) -> list[LaneFile]:
        unique_file_names(files)  # a default's `map` and a lane's `Map` would be one file in its folder
        return files

    @field_validator("models")
    @classmethod
    def _distinct_models(cls, models: dict[str, LaneModel]) -> dict[str, LaneModel]:
        model_roles(models)  # a default's `draft` and a lane's `Draft` (or one mount) are one folder in a container
        return models

    @field_validator("cpus")
    @classmethod
    def _canonical_cpuset(cls, cpus: str | None) -> str | None:
        # '0,1' and '0-1' are one pinning: the one-axis check must not call them two
        return format_cpuset(parse_cpuset(cpus)) if cpus else None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def file_seen_at(self, file: LaneFile) -> str:
        """The path the engine reads a lane file at: its mount inside a container, its own path otherwise."""
        if self.runtime == "docker":
            return file.mount or f"{FILES_MOUNT_ROOT}/{file.name}"
        return file.path

    def model_seen_at(self, role: str) -> str:
        """The path the engine reads a role's model at: its mount inside a container, its own path otherwise."""
        model = self.models[role]
        if self.runtime == "docker":
            return model.mount or f"{MODELS_MOUNT_ROOT}/{role}"
        return model.path

    def with_file_paths(self) -> "EffectiveLane":
        """The lane with every ${file:NAME} and ${model:ROLE} replaced by the path its engine reads that file
        or model at (a ${model:ROLE} inside a JSON argument JSON-escaped)."""
        seen = {f.name: self.file_seen_at(f) for f in self.files}
        models = {role: self.model_seen_at(role) for role in self.models}

        def one(value: str) -> str:
            return FILE_REF.sub(lambda match: seen[match.group(1)], value)

        return self.model_copy(update={"args": [substitute_arg(one(a), models) for a in self.args],
                                       "env": {k: substitute_value(one(v), models) for k, v in self.env.items()}})

    @property
    def options(self) -> dict[str, str | None]:
        """The lane's args as the engine reads them (an option given twice: its last value)."""
        return last_values(self.args)


def effective_lane(contract: Contract, lane: Lane, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge ``lane_defaults`` with ``lane.set``; returns plain data for ``EffectiveLane`` to validate.
    ``defaults``: ``lane_defaults`` already dumped (one dump for many lanes; only copied here, never changed)."""
    merged: dict[str, Any] = (dict(defaults) if defaults is not None
                              else contract.lane_defaults.model_dump(exclude_none=True))
    for key in sorted(lane.set.model_fields_set):
        value = getattr(lane.set, key)
        if value is None:
            continue
        if key == "args":
            merged["args"] = render_args(merge_args(parse_args(merged.get("args", [])), value))
        elif key == "files":
            by_name = {f["name"]: f for f in merged.get("files", [])}
            for file in value:  # a new path and digest; the default's mount stays unless given
                by_name[file.name] = {**by_name.get(file.name, {}), **file.model_dump(exclude_none=True)}
            merged["files"] = list(by_name.values())
        elif key == "models":
            roles = dict(merged.get("models", {}))
            for role, model in value.items():  # a new path and digest; the default's mount stays unless given
                if model is None:
                    roles.pop(role, None)
                else:
                    kept = {"mount": roles[role]["mount"]} if roles.get(role, {}).get("mount") else {}
                    roles[role] = {**kept, **model.model_dump(exclude_none=True)}
            merged["models"] = roles
        elif key == "env":
            env = dict(merged.get("env", {}))
            for name, val in value.items():
                if val is None:
                    env.pop(name, None)
                else:
                    env[name] = val
            merged["env"] = env
        elif isinstance(value, list):
            merged[key] = [v.model_dump() if isinstance(v, StrictModel) else v for v in value]
        elif isinstance(value, StrictModel):
            merged[key] = value.model_dump(exclude_none=True)
        else:
            merged[key] = value
    if merged.get("runtime") == "docker" and "docker_host" not in merged:
        shared = contract_docker_host(contract)
        if shared is not None:
            merged["docker_host"] = shared
    merged.update(name=lane.name, role=lane.role, control=lane.control, axis=list(lane.axis), aa=lane.aa)
    return merged


_HOST_TLS_KEYS = {"tls_ca_cert": "ca_cert", "tls_client_cert": "client_cert", "tls_client_key": "client_key"}
_HOST_SSH_KEYS = {"ssh_identity_file": "identity_file", "ssh_known_hosts": "known_hosts"}


def contract_docker_host(contract: Contract) -> dict[str, Any] | None:
    """The contract's ``host: {docker: URL, tls_ca_cert: ..., tls_client_cert: ..., tls_client_key: ...,
    tls_verify: "true", ssh_identity_file: ..., ssh_known_hosts: ..., socket: ...}`` as a lane's
    ``docker_host``; a lane's own ``docker_host`` wins."""
    if not contract.host:
        return None
    known = {"docker", "tls_verify", "socket", *_HOST_TLS_KEYS, *_HOST_SSH_KEYS}
    unknown = sorted(set(contract.host) - known)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    if "docker" not in contract.host:
        raise ValueError("`docker` (the engine URL) is missing")
    tls: dict[str, str | bool] = {field: contract.host[key]
                                  for key, field in _HOST_TLS_KEYS.items() if key in contract.host}
    if "tls_verify" in contract.host:
        tls["verify"] = contract.host["tls_verify"].lower() in ("1", "true", "yes")
    ssh = {field: contract.host[key] for key, field in _HOST_SSH_KEYS.items() if key in contract.host}
    host: dict[str, Any] = {"url": contract.host["docker"]}
    if tls:
        host["tls"] = tls
    if ssh:
        host["ssh"] = ssh
    if "socket" in contract.host:
        host["socket"] = contract.host["socket"]
    return DockerHost.model_validate(host).model_dump(exclude_none=True)


def normalize_axis(entry: str) -> str:
    entry = entry.strip()
    if entry.startswith("args."):
        return axis_key(entry[len("args."):])
    return entry


def flatten_serving(lane: EffectiveLane) -> dict[str, Any]:
    """The lane as dotted keys, for diffing. Repeated options keep all their values."""
    flat: dict[str, Any] = {}
    data = lane.model_dump(exclude={"name", "role", "control", "axis", "aa", "args", "env", "mounts", "model", "files",
                                    "models", *_NOT_AXES})
    flat.update({k: v for k, v in data.items()})
    flat.update(arg_axis_keys(lane.args))
    for name, value in lane.env.items():
        flat[f"env.{name}"] = value
    for mount in lane.mounts:
        flat[f"mounts.{mount.container}"] = mount.model_dump()
    for key, value in lane.model.model_dump().items():
        flat[f"model.{key}"] = value
    for file in lane.files:  # the bytes and where the engine sees them, not where they lie on this box
        flat[f"files.{file.name}"] = f"sha256:{file.sha256}" + (f" at {lane.file_seen_at(file)}"
                                                                if lane.runtime == "docker" else "")
    for role, model in lane.models.items():  # likewise: a drafter is its digest (a directory: its manifest's)
        flat[f"models.{role}"] = (f"{'manifest ' if model.is_directory else ''}sha256:{model.sha256}"
                                  + (f" at {lane.model_seen_at(role)}" if lane.runtime == "docker" else ""))
    return flat


def implied_by_models(control: EffectiveLane, candidate: EffectiveLane, computed: set[str],
                      declared: set[str]) -> set[str]:
    """Argument and env keys a declared ``models.<role>`` covers: where one lane has the role and the other
    has not (a drafter added or removed), the arguments that hand it to the engine (whose value holds
    ``${model:ROLE}``) necessarily appear or go with it. Where both lanes have the role, nothing is implied:
    a changed argument beside a changed drafter is a second axis."""
    added = {key[len("models."):] for key in declared & computed if key.startswith("models.")
             and (key[len("models."):] in control.models) != (key[len("models."):] in candidate.models)}
    if not added:
        return set()
    implied = set()
    for lane in (control, candidate):
        keyed: dict[str, list[str | None]] = {**arg_axis_keys(lane.args), **{f"env.{k}": [v] for k, v in lane.env.items()}}
        for key, values in keyed.items():
            if key in computed and any(role in added for value in values if value
                                       for role in MODEL_REF.findall(value)):
                implied.add(key)
    return implied


def axis_difference(control: EffectiveLane, candidate: EffectiveLane,
                    control_flat: dict[str, Any] | None = None) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ, with (control value, candidate value); absent is ``None``.
    ``control_flat``: the control already flattened (one control, many candidates)."""
    a, b = control_flat if control_flat is not None else flatten_serving(control), flatten_serving(candidate)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
