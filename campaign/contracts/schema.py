"""The contract schema, version 1.

A contract declares lanes (defaults plus per-lane changes, one declared axis per candidate), input
sets pinned by sha256, gates chosen by ``kind`` with their frozen rules (each kind's spec in its module under ``gates/``), and
the promotion rule. Every model shares one strict config (``contracts.model``): unknown fields are
errors, values are immutable once loaded.
"""

from __future__ import annotations

import os
import re
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BeforeValidator, Field, StringConstraints, field_validator, model_validator

from campaign.contracts.gatespecs import GateSpecBase
from campaign.contracts.model import (
    ENV_NAME_PATTERN,
    FILES_MOUNT_ROOT,
    MAX_CONTEXT_TOKENS,
    MODELS_SINCE,
    NAME_PATTERN,
    SERVED_ROLE,
    SHA256_PATTERN,
    ContractJsonSchema,
    EnvName,
    LaneFile,
    LaneModel,
    StrictModel,
    StrList,
    stringify_scalars,
    takes,
    unique_file_names,
    valid_regexes,
)
from campaign.contracts.units import Cpuset, Duration, Size, duration_json_schema, parse_duration

if TYPE_CHECKING:
    from campaign.contracts.engines import EngineKind
# else: EngineKind, like GateSpec, is named by contracts.kinds once every engine kind is registered

__all__ = [
    "SCHEMA_VERSION",
    "contract_json_schema",
    "BootLogRules",
    "Contract",
    "DockerHost",
    "DockerSSH",
    "DockerTLS",
    "engine_is_local",
    "FailsafeSpec",
    "IncumbentSpec",
    "FILES_MOUNT_ROOT",
    "InputSet",
    "Lane",
    "LaneFile",
    "LaneChanges",
    "LaneModel",
    "ModelRole",
    "LaneFields",
    "ModelSpec",
    "Mount",
    "PromotionRule",
    "ReadinessSpec",
    "Role",
]

SCHEMA_VERSION = 1
Role = Literal["control", "candidate"]
_IMAGE = re.compile(r"^(?:[^@\s]++@)?+sha256:[0-9a-f]{64}$")  # possessive: linear
MAX_GPUS = 1024  # a GPU count: past the largest single host (a docker device request counts one host's)
MAX_VERSION = 2**31 - 1
# a model's role names its mount (/campaign/models/<role>) and its axis key (models.<role>): an identifier
ModelRole = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


class Mount(StrictModel):
    host: str = Field(description="Absolute host path.")
    container: str = Field(description="Absolute path inside the container.")
    read_only: bool = Field(True, description="Mounted read-only unless declared otherwise.")


class DockerTLS(StrictModel):
    ca_cert: str | None = Field(None, description="CA certificate (PEM) that signed the engine's certificate.")
    client_cert: str | None = Field(None, description="Client certificate (PEM), with client_key.")
    client_key: str | None = Field(None, description="Client key (PEM), with client_cert.")
    verify: bool = Field(True, description="Verify the engine's certificate against ca_cert.")


class DockerSSH(StrictModel):
    identity_file: str | None = Field(None, description="Private key to log in with (absolute or ~/); default: "
                                                        "the runner's ssh config and agent.")
    known_hosts: str | None = Field(None, description="known_hosts file holding the box's host key (absolute or "
                                                      "~/); default: the runner's. An unknown box is refused.")


def pinned_image(image: str | None) -> str | None:
    if image is not None and not _IMAGE.match(image):
        raise ValueError(f"{image!r} is not pinned by digest: use name@sha256:<64 hex> or sha256:<64 hex>")
    return image


DOCKER_URL_PATTERN = r"^(unix|tcp|ssh)://\S+$"


def _docker_host_from_url(value: Any) -> Any:
    return {"url": value} if isinstance(value, str) else value


class DockerHost(StrictModel):
    """The Docker engine a lane runs on: this box's socket, or another box's engine."""

    url: str = Field(pattern=DOCKER_URL_PATTERN,
                     description="unix:///var/run/docker.sock, tcp://box:2376 (with tls) or ssh://user@box[:port].")
    tls: DockerTLS | None = Field(None, description="tcp:// only: TLS client settings (paths absolute or ~/).")
    ssh: DockerSSH | None = Field(None, description="ssh:// only: the key and known_hosts to use (never a prompt).")
    socket: str = Field("/var/run/docker.sock", pattern=r"^/\S+$",
                        description="The engine's socket on its own box: ssh:// forwards to it, and the "
                                    "`engine` failsafe mounts it into its watchdog container.")

    @model_validator(mode="after")
    def _options_fit_the_scheme(self) -> "DockerHost":
        if self.url.startswith("unix://") and "socket" not in self.model_fields_set:
            object.__setattr__(self, "socket", self.url[len("unix://"):])  # a rootless engine's own socket
        if self.tls is not None and not self.url.startswith("tcp://"):
            raise ValueError("`tls` applies to tcp:// engines only")
        if self.ssh is not None and not self.url.startswith("ssh://"):
            raise ValueError("`ssh` applies to ssh:// engines only")
        return self


def engine_is_local(host: DockerHost | None) -> bool:
    """Whether a docker lane's engine is this box (its ports and files are this box's): no host given means
    DOCKER_HOST's engine, else the local socket."""
    url = host.url if host else os.environ.get("DOCKER_HOST", "unix://")
    return url.startswith(("unix://", "tcp://127.", "tcp://localhost"))


# `docker_host: unix:///...` is short for `docker_host: {url: ...}`: the JSON Schema takes either
_DOCKER_HOST_OR_URL = BeforeValidator(_docker_host_from_url, json_schema_input_type=Union[
    DockerHost, Annotated[str, StringConstraints(pattern=DOCKER_URL_PATTERN)], None])


class ModelSpec(StrictModel):
    path: str = Field(description="Model file or directory; relative paths are relative to the contract.")
    sha256: str | None = Field(None, pattern=SHA256_PATTERN, description="sha256 of a single model file.")
    sha256_manifest: str | None = Field(
        None, description="A `sha256sum`-format manifest of the model's files, relative to the contract.")
    served_name: str | None = Field(None, description="Model name the engine answers to, if not its default.")


class ReadinessSpec(StrictModel):
    budget: Duration = Field(2400.0, description="How long a cold load may take before it is a launch failure "
                                                 "(1ms to 168h; a tiny one forces a launch failure on purpose).")
    # 10 ms: a shorter poll is a busy loop against the engine it waits for
    poll_interval: Annotated[float, BeforeValidator(partial(parse_duration, minimum=0.01)),
                             duration_json_schema(0.01)] = Field(
        0.5, description="Seconds between readiness polls (10ms to 168h).")


class BootLogRules(StrictModel):
    require: list[str] = Field(default_factory=list,
                               description="Regexes that must appear in the boot log (after readiness).")
    forbid: list[str] = Field(default_factory=list, description="Regexes that must not appear in the boot log.")

    @field_validator("require", "forbid")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        return valid_regexes(patterns)


class LaneFields(StrictModel):
    """Everything that says how a lane serves. In ``lane_defaults`` and ``set`` every field is optional."""

    runtime: Literal["process", "docker"] | None = Field(None, description="Local process or docker container.")
    engine: EngineKind | None = Field(None, description="Engine adapter that launches and talks to the lane.")
    executable: str | None = Field(None, description="process runtime: the server binary, a path or a PATH name; "
                                                      "docker: its absolute path inside the container "
                                                      "(default: the image ENTRYPOINT).")
    image: str | None = Field(None, description="docker runtime: image pinned by digest, name@sha256:... or sha256:...")
    args: StrList | None = Field(None, description="Engine arguments, as on a command line.")
    env: Annotated[dict[EnvName, str], BeforeValidator(stringify_scalars),
                   takes(dict[EnvName, str | int | float])] | None = Field(
        None, description="Environment variables given to the lane (names: letters, digits, '_').")
    mounts: list[Mount] | None = Field(None, description="Bind mounts (docker runtime).")
    files: list[LaneFile] | None = Field(None, description="Files the engine reads, pinned by sha256; in `set`, an "
                                                           "entry changes the default of the same name (its "
                                                           "mount kept unless given).")
    shm_size: Size | None = Field(None, description="/dev/shm size (docker runtime), e.g. 64g.")
    gpus: str | Annotated[int, Field(ge=0, le=MAX_GPUS)] | None = Field(
        None, description="GPU request: 'all', a count, or device ids.")
    cpus: Cpuset | None = Field(None, description="CPUs the lane runs on, a cpuset like '1' or '0-3,8': "
                                               "sched_setaffinity for a process lane, cpuset_cpus for a "
                                               "container. Keeps the engine off the speed client's cores.")
    host: str | None = Field(None, description="Address the lane listens on.")
    port: int | None = Field(None, ge=1, le=65535, description="Port the lane listens on.")
    model: ModelSpec | None = Field(None, description="The served model and its identity (role `served`).")
    models: dict[ModelRole, LaneModel] | None = Field(
        None, description="Every other model the engine reads, by role (draft, tokenizer, adapter, ...): a file "
                          "or a directory, pinned, referenced in args and env as ${model:<role>}; in `set`, an "
                          "entry replaces the default's role (its mount kept unless given), null removes it.",
        json_schema_extra={"since": MODELS_SINCE})
    readiness: ReadinessSpec | None = Field(None, description="Readiness budget.")
    boot_log: BootLogRules | None = Field(None, description="Patterns required or forbidden in the boot log.")
    stop: Literal["remove", "keep"] | None = Field(None, description="After its gates: remove the lane or keep it.")
    network: Literal["host", "bridge"] | None = Field(
        None, description="docker runtime: share the host's network (default) or publish the port from a bridge.")
    docker_host: Annotated[DockerHost | None, _DOCKER_HOST_OR_URL] = Field(
        None, description="docker runtime: the engine to run on (default: the contract's host.docker, then DOCKER_HOST).")
    context: int | None = Field(None, ge=1, le=MAX_CONTEXT_TOKENS,
                                description="Context tokens one request may use, for engines whose "
                                                       "args do not say it (must agree with them if they do).")

    @field_validator("files")
    @classmethod
    def _unique_files(cls, files: list[LaneFile] | None) -> list[LaneFile] | None:
        unique_file_names(files or [])
        mounts = [f.mount for f in files or [] if f.mount]
        if len(set(mounts)) != len(mounts):
            raise ValueError("two files share one mount path")
        return files

    @field_validator("models")
    @classmethod
    def _model_roles(cls, models: dict[str, LaneModel | None] | None) -> dict[str, LaneModel | None] | None:
        return model_roles(models)

    @field_validator("image")
    @classmethod
    def _pinned(cls, image: str | None) -> str | None:
        return pinned_image(image)


def model_roles(models: dict[str, Any] | None) -> dict[str, Any] | None:
    """Roles are not ``served`` (that is the lane's ``model:``), differ also ignoring case (each is a folder
    name in a container), and no two share a mount path."""
    if SERVED_ROLE in (models or {}):
        raise ValueError(f"role {SERVED_ROLE!r} is the lane's `model:` (the model the engine serves); "
                         "`models:` holds the others (draft, tokenizer, adapter, ...)")
    folded: dict[str, str] = {}
    for role in models or {}:
        earlier = folded.setdefault(role.casefold(), role)
        if earlier != role:
            raise ValueError(f"model roles {earlier!r} and {role!r} differ only in case")
    mounts = [m.mount for m in (models or {}).values() if m is not None and m.mount]
    if len(set(mounts)) != len(mounts):
        raise ValueError("two models share one mount path")
    return models


class LaneChanges(LaneFields):
    """A candidate's changes. ``args`` here is a mapping option -> value (null removes, true is a bare flag)."""

    # the two ignores: a field of LaneFields given another type here, on purpose (pydantic allows it)
    args: dict[str, str | bool | None] | None = Field(  # type: ignore[assignment]
        None, description="Options to change: value, null to remove, true for a bare flag.")
    env: dict[EnvName, str | None] | None = Field(  # type: ignore[assignment]
        None, description="Variables to set, or null to unset.")
    models: dict[ModelRole, LaneModel | None] | None = Field(  # type: ignore[assignment]
        None, description="Models to add or replace by role, or null to remove one.",
        json_schema_extra={"since": MODELS_SINCE})

    # a YAML number is taken as its text (so the JSON Schema takes numbers too); in args a boolean is a bare flag
    @field_validator("args", mode="before", json_schema_input_type=dict[str, str | int | float | bool | None] | None)
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        return stringify_scalars(value)

    @field_validator("env", mode="before", json_schema_input_type=dict[EnvName, str | int | float | None] | None)
    @classmethod
    def _stringify_env(cls, value: Any) -> Any:
        return stringify_scalars(value)


class Lane(StrictModel):
    name: str = Field(pattern=NAME_PATTERN, description="Unique lane name.")
    role: Role = Field(description="control or candidate.")
    control: str | None = Field(None, description="candidate: the control lane it is compared with.")
    axis: list[str] = Field(default_factory=list,
                            description="candidate: what it changes, e.g. [args.spec-draft-n-max, env.HOOK].")
    set: LaneChanges = Field(default_factory=LaneChanges, description="Changes relative to lane_defaults.")
    aa: bool = Field(False, description="candidate: an A/A lane, the control again (no `set`, no `axis`), booted "
                                        "in its own slot and measured as a candidate, never promoted. Its verdicts "
                                        "are the window's false-decision check: one that claims a difference from "
                                        "the control (a not-worse gate's FAIL, a speed PASS past a positive bar, a "
                                        "ruler PASS) marks every other decision of the window suspect.",
                    json_schema_extra={"since": "0.3.0"})


class InputSet(StrictModel):
    file: str = Field(description="Path relative to the contract file.")
    sha256: str | None = Field(None, pattern=SHA256_PATTERN, description="Pinned digest; checked at freeze and run.")
    classes: list[str] | None = Field(None, description="Prompt classes present (prose, code, ...).")


class IncumbentSpec(StrictModel):
    """The daily lane serving users before the window: stopped only behind an armed failsafe, restored
    with proof after the last lane."""

    runtime: Literal["process", "docker"] = Field("process", description="How the daily runs.")
    endpoint: str = Field(description="Where the daily answers, e.g. http://127.0.0.1:30006.")
    pidfile: str | None = Field(None, description="process: file holding the daily's pid (relative to the contract).")
    container: str | None = Field(None, description="docker: the daily container's name (or id), as started "
                                                    "by hand with `docker run` or by `campaign promote`.")
    docker_host: Annotated[DockerHost | None, _DOCKER_HOST_OR_URL] = Field(
        None, description="docker: the engine the daily container runs on (default: DOCKER_HOST, as the CLI).")
    lane: str | None = Field(None, description="A lane of this contract whose spec the daily runs "
                                               "(used by `campaign daily start`).")
    api_key_env: str | None = Field(None, pattern=ENV_NAME_PATTERN,
                                    description="Name of the env var holding the daily's API key; "
                                                      "the key itself never enters a contract or a receipt.")
    served_model: str | None = Field(None, description="Model name for the proof completion.")
    stop_timeout: Duration = Field(30.0, description="Seconds between SIGTERM and SIGKILL when stopping it.")
    readiness: ReadinessSpec = Field(default_factory=lambda: ReadinessSpec(budget=600.0),
                                 description="How long a restored daily may take to serve again.")

    @model_validator(mode="after")
    def _names_its_daily(self) -> "IncumbentSpec":
        if self.runtime == "process" and not self.pidfile:
            raise ValueError("a process daily needs `pidfile` (the file holding its pid)")
        if self.runtime == "docker" and not self.container:
            raise ValueError("a docker daily needs `container` (its name)")
        if self.runtime == "process" and (self.container or self.docker_host):
            raise ValueError("`container` and `docker_host` are for runtime: docker")
        return self


class FailsafeSpec(StrictModel):
    deadline: Duration = Field(description="Restore the incumbent no later than this after the window starts.")
    backend: Literal["auto", "systemd", "watchdog", "engine"] = Field(
        "auto", description="Where the deadline is guarded. auto: `engine` for a daily container on another "
                            "box's engine, or on this machine's when every lane is a container there too (falling "
                            "back, saying so, when the daily's image has no python and none of image, python, "
                            "mounts is set), else a systemd transient timer where systemd runs, else a detached "
                            "watchdog pair (backed by the periodic check of `campaign failsafe install`). engine: "
                            "a watchdog container on the daily's own engine (restart policy always), so every "
                            "process of the window killed, or the runner's machine dying, still restores the daily.")
    heartbeat_grace: Duration = Field(60.0, description="Watchdog: restore early when the runner's heartbeat "
                                                        "is older than this.")
    image: str | None = Field(None, description="engine backend: the watchdog container's image, pinned by digest "
                                                "(default: the daily's own image). It needs a python3.")
    python: str = Field("python3", description="engine backend: the python inside that image (a path or PATH name).")
    mounts: list[Mount] = Field(default_factory=list, description="engine backend: bind mounts the watchdog needs "
                                                                  "on that box (e.g. where its python lives).")

    @field_validator("image")
    @classmethod
    def _pinned(cls, image: str | None) -> str | None:
        return pinned_image(image)

    @model_validator(mode="after")
    def _engine_fields_need_the_engine_backend(self) -> "FailsafeSpec":
        given = [name for name in ("image", "python", "mounts") if name in self.model_fields_set]
        if given and self.backend in ("systemd", "watchdog"):
            raise ValueError(f"failsafe {', '.join(given)} apply to the engine backend only (a watchdog container "
                             f"on the daily's box); backend {self.backend} would ignore them")
        return self


class PromotionRule(StrictModel):
    requires: list[str] = Field(description="Gate ids that must all be PASS.")
    daily_name: str | None = Field(None, description="Name the promoted lane serves under.")

    @model_validator(mode="before")
    @classmethod
    def _removed_fields(cls, data: Any) -> Any:
        # These were accepted, frozen and hashed, but never read: a contract that still sets them must not
        # look as if they did something, and a bare "unknown field" would not say why they went.
        removed = {
            "smoke_after_promotion": "promote always runs its own smoke (the proof completion, then the "
                                     "candidate's measured greedy replies replayed byte-identically)",
            "keep_previous_as_rollback": "promote always keeps the previous daily for rollback",
        }
        if isinstance(data, dict):
            found = [f"promotion.{name} was removed from the contract schema: {why}; delete it"
                     for name, why in removed.items() if name in data]
            if found:
                raise ValueError("; ".join(found))
        return data


if TYPE_CHECKING:
    GateSpec = GateSpecBase
# else: a name left open until contracts.kinds.complete_gate_kinds names every kind's spec

class Contract(StrictModel):
    contract: str = Field(pattern=NAME_PATTERN, description="Contract name.")
    version: int = Field(ge=1, le=MAX_VERSION, description="A new version is a new contract; a frozen one never "
                                                           "changes.")
    schema_version: Literal[1] = Field(1, description="Schema version of this file.")
    description: str = ""
    host: dict[str, str] | None = Field(None, description="Where lanes run, e.g. {docker: unix:///var/run/docker.sock}.")
    incumbent: IncumbentSpec | None = None
    failsafe: FailsafeSpec | None = None
    lane_defaults: LaneFields = Field(default_factory=LaneFields)
    lanes: list[Lane] = Field(min_length=1)
    file_copy_limit: Size = Field(16 * 1024 * 1024, description="Lane files up to this size are copied into the "
                                                                "bundle; larger ones are recorded by digest only.")
    request_defaults: dict[str, Any] = Field(default_factory=dict,
                                             description="Fields merged into every request body.")
    # names become file names in the bundle (contract/inputs/<name>.jsonl): identifiers, never paths
    inputs: dict[Annotated[str, StringConstraints(pattern=NAME_PATTERN)], InputSet] = Field(
        default_factory=dict, description="Input sets by name (letters, digits, '_', '.', '-').")
    gates: list[GateSpec] = Field(default_factory=list)
    promotion: PromotionRule | None = None


def contract_json_schema() -> dict[str, Any]:
    """What `campaign schema` prints: the JSON Schema of a contract as written (a duration or a size as a
    number or as text, an argv value as a YAML number), for editors and validators."""
    return Contract.model_json_schema(schema_generator=ContractJsonSchema)
