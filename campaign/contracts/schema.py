"""The contract schema, version 1.

A contract declares lanes (defaults plus per-lane changes, one declared axis per candidate), input
sets pinned by sha256, gates chosen by ``kind`` with their frozen rules, and the promotion rule.
Every model shares one strict config: unknown fields are errors, values are immutable once loaded.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from campaign.contracts.units import Duration, Size

__all__ = [
    "SCHEMA_VERSION",
    "BootLogRules",
    "Contract",
    "EngineKind",
    "FailsafeSpec",
    "GateSpec",
    "GreedyGate",
    "GreedyRule",
    "IncumbentSpec",
    "InputSet",
    "Lane",
    "LaneChanges",
    "LaneFields",
    "ModelSpec",
    "Mount",
    "PromotionRule",
    "Readiness",
    "Role",
    "SpeedGate",
    "SpeedRule",
    "StrictModel",
    "parse_fraction",
]

SCHEMA_VERSION = 1
EngineKind = Literal["llamacpp", "llama-cpp-python", "vllm", "sglang"]
Role = Literal["control", "candidate"]
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_SHA256 = r"^[0-9a-f]{64}$"
_IMAGE = re.compile(r"^(?:[^@\s]+@)?sha256:[0-9a-f]{64}$")


class StrictModel(BaseModel):
    """The one config every contract model shares."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False,
                              validate_default=True)


def _stringify_scalars(value: Any) -> Any:
    # YAML turns `262144` into an int; a command line is strings, and the same text must hash the same.
    if isinstance(value, list):
        return [_scalar_to_str(v) for v in value]
    if isinstance(value, dict):
        return {k: (v if v is None or isinstance(v, bool) else _scalar_to_str(v)) for k, v in value.items()}
    return value


def _scalar_to_str(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


StrList = Annotated[list[str], BeforeValidator(_stringify_scalars)]
StrDict = Annotated[dict[str, str], BeforeValidator(_stringify_scalars)]


class Mount(StrictModel):
    host: str = Field(description="Absolute host path.")
    container: str = Field(description="Absolute path inside the container.")
    read_only: bool = Field(True, description="Mounted read-only unless declared otherwise.")


class ModelSpec(StrictModel):
    path: str = Field(description="Model file or directory; relative paths are relative to the contract.")
    sha256: str | None = Field(None, pattern=_SHA256, description="sha256 of a single model file.")
    sha256_manifest: str | None = Field(
        None, description="A `sha256sum`-format manifest of the model's files, relative to the contract.")
    served_name: str | None = Field(None, description="Model name the engine answers to, if not its default.")


class Readiness(StrictModel):
    budget: Duration = Field(2400.0, description="How long a cold load may take before it is a launch failure.")
    poll_interval: Duration = Field(0.5, description="Seconds between readiness polls.")


class BootLogRules(StrictModel):
    require: list[str] = Field(default_factory=list,
                               description="Regexes that must appear in the boot log (after readiness).")
    forbid: list[str] = Field(default_factory=list, description="Regexes that must not appear in the boot log.")

    @field_validator("require", "forbid")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regex: {exc}") from exc
        return patterns


class LaneFields(StrictModel):
    """Everything that says how a lane serves. In ``lane_defaults`` and ``set`` every field is optional."""

    runtime: Literal["process", "docker"] | None = Field(None, description="Local process or docker container.")
    engine: EngineKind | None = Field(None, description="Engine adapter that launches and talks to the lane.")
    executable: str | None = Field(None, description="process runtime: the server binary, a path or a PATH name.")
    image: str | None = Field(None, description="docker runtime: image pinned by digest, name@sha256:... or sha256:...")
    args: StrList | None = Field(None, description="Engine arguments, as on a command line.")
    env: StrDict | None = Field(None, description="Environment variables given to the lane.")
    mounts: list[Mount] | None = Field(None, description="Bind mounts (docker runtime).")
    shm_size: Size | None = Field(None, description="/dev/shm size (docker runtime), e.g. 64g.")
    gpus: str | int | None = Field(None, description="GPU request: 'all', a count, or device ids.")
    host: str | None = Field(None, description="Address the lane listens on.")
    port: int | None = Field(None, ge=1, le=65535, description="Port the lane listens on.")
    model: ModelSpec | None = Field(None, description="The served model and its identity.")
    readiness: Readiness | None = Field(None, description="Readiness budget.")
    boot_log: BootLogRules | None = Field(None, description="Patterns required or forbidden in the boot log.")
    stop: Literal["remove", "keep"] | None = Field(None, description="After its gates: remove the lane or keep it.")

    @field_validator("image")
    @classmethod
    def _pinned(cls, image: str | None) -> str | None:
        if image is not None and not _IMAGE.match(image):
            raise ValueError(f"{image!r} is not pinned by digest: use name@sha256:<64 hex> or sha256:<64 hex>")
        return image


class LaneChanges(LaneFields):
    """A candidate's changes. ``args`` here is a mapping option -> value (null removes, true is a bare flag)."""

    args: dict[str, str | bool | None] | None = Field(  # type: ignore[assignment]
        None, description="Options to change: value, null to remove, true for a bare flag.")
    env: dict[str, str | None] | None = Field(  # type: ignore[assignment]
        None, description="Variables to set, or null to unset.")

    @field_validator("args", "env", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        return _stringify_scalars(value)


class Lane(StrictModel):
    name: str = Field(pattern=_NAME, description="Unique lane name.")
    role: Role = Field(description="control or candidate.")
    control: str | None = Field(None, description="candidate: the control lane it is compared with.")
    axis: list[str] = Field(default_factory=list,
                            description="candidate: what it changes, e.g. [args.spec-draft-n-max, env.HOOK].")
    set: LaneChanges = Field(default_factory=LaneChanges, description="Changes relative to lane_defaults.")


class InputSet(StrictModel):
    file: str = Field(description="Path relative to the contract file.")
    sha256: str | None = Field(None, pattern=_SHA256, description="Pinned digest; checked at freeze and run.")
    classes: list[str] | None = Field(None, description="Prompt classes present (prose, code, ...).")


_FRACTION = re.compile(r"^\s*(?:>=\s*)?(\d+)\s*/\s*(\d+)\s*$")


def parse_fraction(text: str) -> tuple[int, int]:
    """``"20/20"`` or ``">= 19/20"`` -> (19, 20): at least k of n."""
    match = _FRACTION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a count rule like '20/20' or '>= 19/20'")
    k, n = int(match.group(1)), int(match.group(2))
    if n <= 0 or k > n:
        raise ValueError(f"{text!r}: need 0 <= k <= n and n > 0")
    return k, n


class GreedyRule(StrictModel):
    self_identical: str = Field(description="Prompts whose repeats are byte-identical, at least k/N, e.g. '20/20'.")
    cross_identical: str | None = Field(
        None, description="Prompts byte-identical to control, at least k/N. A kernel-shape diagnostic, "
                          "not a quality verdict; omit to report without judging.")

    @field_validator("self_identical", "cross_identical")
    @classmethod
    def _fraction(cls, value: str | None) -> str | None:
        if value is not None:
            parse_fraction(value)
        return value


class GreedyGate(StrictModel):
    kind: Literal["greedy"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Name of an input set of prompts.")
    repeats: int = Field(3, ge=2, le=100, description="Self-repeats per prompt per lane.")
    max_tokens: int = Field(64, ge=1, le=65536, description="Tokens generated per prompt.")
    rule: GreedyRule


class SpeedRule(StrictModel):
    """The frozen speed bar and the validity rules that void a row. Changes are fractions: 0.05 is +5%."""

    metric: Literal["decode_tok_s", "effective_tok_s", "ttft_s"] = Field(
        "decode_tok_s", description="Per-request number compared per prompt: decode tok/s after the first "
                                    "token, output tokens over request wall time, or time to first token "
                                    "(for ttft_s a positive change means faster).")
    levels: list[int] | None = Field(None, description="Concurrency levels judged against the bar; "
                                                       "default every measured level. Others are reported.")
    min_mean_change: float = Field(0.05, ge=-1.0, le=10.0,
                                   description="Mean per-prompt change vs control must be at least this.")
    ci_lower_above: float = Field(0.0, ge=-1.0, le=10.0,
                                  description="The paired bootstrap CI's lower bound must exceed this.")
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="Two-sided confidence of the CI.")
    min_wins: str | None = Field(None, description="Prompts where the candidate is faster, at least k/P, "
                                                   "e.g. '6/8'; omit to report without judging.")
    max_spread: float = Field(0.10, gt=0.0, description="A row whose reps' aggregate tok/s spread "
                                                        "((max - min) / mean) exceeds this is VOID.")
    max_errors: int = Field(0, ge=0, description="Error records (cut, truncated, failed streams) a row "
                                                 "tolerates; more voids it.")
    max_reruns: int = Field(2, ge=0, le=10, description="A VOID row is re-warmed and re-run up to this "
                                                        "many times; still VOID means INCONCLUSIVE.")
    max_host_busy: float | None = Field(
        0.25, gt=0.0, le=1.0, description="Share of the host's CPU time that processes other than the lane "
                                          "and this client (or a hypervisor's other tenants) may use during "
                                          "a rep; more voids the row. Checked for local process lanes; "
                                          "null disables it.")
    max_control_drift: float | None = Field(
        0.05, gt=0.0, description="The control's re-run in the same window may differ from its first run "
                                  "by at most this mean per-prompt change; null reports drift without a limit.")

    @field_validator("min_wins")
    @classmethod
    def _wins(cls, value: str | None) -> str | None:
        if value is not None:
            parse_fraction(value)
        return value


class SpeedGate(StrictModel):
    kind: Literal["speed"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Name of an input set of prompts; each prompt's `class` makes a row.")
    concurrency: list[int] = Field([1], min_length=1, description="Concurrency levels (users in flight).")
    max_tokens: int = Field(128, ge=2, le=65536, description="Tokens asked per request.")
    reps: int = Field(3, ge=2, le=50, description="Reps per row (lane x level x class); spread needs two.")
    resamples: int = Field(10000, ge=100, le=1000000, description="Bootstrap resamples for the CI.")
    seed: int = Field(0, description="Seed of the bootstrap, so a bundle re-judges to the same numbers.")
    rule: SpeedRule = Field(default_factory=SpeedRule)

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, levels: list[int]) -> list[int]:
        if any(level < 1 or level > 1024 for level in levels) or len(set(levels)) != len(levels):
            raise ValueError("concurrency levels are distinct integers from 1 to 1024")
        return levels

    @model_validator(mode="after")
    def _judged_levels_are_measured(self) -> "SpeedGate":
        missing = sorted(set(self.rule.levels or []) - set(self.concurrency))
        if missing:
            raise ValueError(f"rule.levels {missing} are not in concurrency {self.concurrency}")
        return self


GateSpec = Annotated[Union[GreedyGate, SpeedGate], Field(discriminator="kind")]


class IncumbentSpec(StrictModel):
    lane: str | None = Field(None, description="A lane of this contract that is the daily one.")
    container: str | None = Field(None, description="Name of the daily container (docker).")
    endpoint: str | None = Field(None, description="Where the daily lane answers.")
    api_key_env: str | None = Field(None, description="Name of the env var holding the daily's API key.")


class FailsafeSpec(StrictModel):
    deadline: Duration = Field(description="Restore the incumbent no later than this after the window starts.")
    backend: Literal["auto", "systemd", "watchdog"] = "auto"


class PromotionRule(StrictModel):
    requires: list[str] = Field(description="Gate ids that must all be PASS.")
    daily_name: str | None = Field(None, description="Name the promoted lane serves under.")
    smoke_after_promotion: dict[str, Any] | None = Field(None, description="A gate run after the swap.")
    keep_previous_as_rollback: bool = True


class Contract(StrictModel):
    contract: str = Field(pattern=_NAME, description="Contract name.")
    version: int = Field(ge=1, description="A new version is a new contract; a frozen one never changes.")
    schema_version: Literal[1] = Field(1, description="Schema version of this file.")
    description: str = ""
    host: dict[str, str] | None = Field(None, description="Where lanes run, e.g. {docker: unix:///var/run/docker.sock}.")
    incumbent: IncumbentSpec | None = None
    failsafe: FailsafeSpec | None = None
    lane_defaults: LaneFields = Field(default_factory=LaneFields)
    lanes: list[Lane] = Field(min_length=1)
    request_defaults: dict[str, Any] = Field(default_factory=dict,
                                             description="Fields merged into every request body.")
    inputs: dict[str, InputSet] = Field(default_factory=dict)
    gates: list[GateSpec] = Field(default_factory=list)
    promotion: PromotionRule | None = None
