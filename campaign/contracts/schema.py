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
    "KlGate",
    "KlRule",
    "Lane",
    "LaneChanges",
    "LaneFields",
    "ModelSpec",
    "Mount",
    "PromotionRule",
    "Readiness",
    "Role",
    "RulerGate",
    "RulerRule",
    "StrictModel",
    "StructuredGate",
    "StructuredRule",
    "TeacherForcedGate",
    "TeacherForcedRule",
    "ToolsGate",
    "ToolsRule",
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


class TeacherForcedRule(StrictModel):
    instrument_tolerance: float = Field(
        ge=0, description="nats: the most a lane's own greedy token may move between its generation-time "
                          "logprob and its teacher-forced score (and its rank-1 tie margin); beyond it the "
                          "scoring instrument is broken and the gate is INCONCLUSIVE.")
    max_site_delta: float | None = Field(
        None, ge=0, description="nats: at every divergence site, |logp(control token) - logp(candidate token)| "
                                "on the control's server is at most this: the lanes disagree only at near-ties.")
    max_cross_server_delta: float | None = Field(
        None, ge=0, description="nats: the same token at the same site scored on both servers differs by at "
                                "most this (0.0: the servers share prefill numerics).")
    noninferiority_max: float | None = Field(
        None, ge=0, description="nats: max |delta logprob| over all reference-text tokens, candidate vs control.")
    noninferiority_mean: float | None = Field(
        None, ge=0, description="nats: mean |delta logprob| over all reference-text tokens.")
    min_self_fidelity: float | None = Field(
        None, ge=0, le=1, description="Fraction of the candidate's greedy tokens that are strictly rank 1 "
                                      "when teacher-forced on its own server.")


class TeacherForcedGate(StrictModel):
    kind: Literal["teacher_forced"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Input set of prompts (prompt, messages or raw context) generated greedily.")
    references: str | None = Field(None, description="Input set of reference texts (rows with `text`) "
                                                     "teacher-forced on both lanes for noninferiority.")
    max_tokens: int = Field(32, ge=1, le=4096, description="Greedy tokens generated per prompt.")
    top_k: int = Field(20, ge=2, le=200, description="Top-k logprobs asked for at every scored position.")
    rule: TeacherForcedRule


class KlRule(StrictModel):
    max_mean: float | None = Field(None, ge=0, description="nats: mean per-token KL(oracle || lane), all texts.")
    max_p99: float | None = Field(None, ge=0, description="nats: 99th percentile per-token KL, all texts.")
    max_max: float | None = Field(None, ge=0, description="nats: largest per-token KL.")

    @model_validator(mode="after")
    def _some_bound(self) -> "KlRule":
        if self.max_mean is None and self.max_p99 is None and self.max_max is None:
            raise ValueError("give at least one of max_mean, max_p99, max_max")
        return self


class KlGate(StrictModel):
    kind: Literal["kl"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Input set of reference texts (rows with `text`).")
    oracle: str | None = Field(None, description="Lane whose distributions are the reference; default: the "
                                                 "candidate's control.")
    top_k: int = Field(20, ge=2, le=200, description="Top-k logprobs asked for at every position.")
    rule: KlRule


class StructuredRule(StrictModel):
    correct: str = Field(description="Rows whose output is valid, schema-valid and equal to the oracle answer, "
                                     "at least k/N.")
    schema_valid: str | None = Field(None, description="Rows whose output is schema-valid JSON, at least k/N.")

    @field_validator("correct", "schema_valid")
    @classmethod
    def _fraction(cls, value: str | None) -> str | None:
        if value is not None:
            parse_fraction(value)
        return value


class StructuredGate(StrictModel):
    kind: Literal["structured"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Rows {id, prompt|messages, schema, answer}.")
    constrained: bool = Field(True, description="Send each row's schema as a json_schema response format "
                                                "(false: ask in the prompt only, as unconstrained chat does).")
    max_tokens: int = Field(128, ge=1, le=8192, description="Token budget per reply.")
    rule: StructuredRule


class ToolsRule(StrictModel):
    passed: str = Field(description="Episodes whose every expected call was parsed with the right function "
                                    "and arguments, at least k/N.")

    @field_validator("passed")
    @classmethod
    def _fraction(cls, value: str) -> str:
        parse_fraction(value)
        return value


class ToolsGate(StrictModel):
    kind: Literal["tools"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Episodes {id, prompt|messages, tools, expect: [calls], results: [...], "
                                   "optional tool_choice (call turns), final_tool_choice, final_contains}.")
    max_tokens: int = Field(128, ge=1, le=8192, description="Token budget per turn.")
    rule: ToolsRule


Observable = Literal["outputs", "logprobs", "metrics", "speed", "boot_log", "props"]


class RulerRule(StrictModel):
    observe: list[Observable] = Field(
        default_factory=lambda: ["outputs", "logprobs", "metrics", "boot_log", "props"],
        description="What may show the axis taking effect; indistinguishable on all of them: axis may be inert. "
                    "`speed` is opt-in: a few short probes on a shared host differ by 2-3x from noise alone.")
    speed_tolerance: float = Field(
        0.25, gt=0, description="Relative probe-speed change that counts as a difference (and only when the "
                                "per-probe ranges do not overlap): small probes on a shared host are noisy.")
    require_counters: list[str] = Field(
        default_factory=list, description="Metric names that must be non-zero on the candidate after its probes.")
    require_boot_log: list[str] = Field(
        default_factory=list, description="Regexes the candidate's boot log must match.")
    inert_verdict: Literal["FAIL", "INCONCLUSIVE"] = Field(
        "FAIL", description="Verdict when the candidate is indistinguishable from control.")

    @field_validator("require_boot_log")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regex: {exc}") from exc
        return patterns


class RulerGate(StrictModel):
    kind: Literal["ruler"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Input set of probe prompts.")
    probes: int = Field(3, ge=1, le=100, description="How many of the input's prompts are sent.")
    max_tokens: int = Field(16, ge=1, le=4096, description="Greedy tokens per probe.")
    top_k: int = Field(5, ge=1, le=100, description="Top-k logprobs compared per token.")
    rule: RulerRule = Field(default_factory=RulerRule)


GateSpec = Annotated[Union[GreedyGate, TeacherForcedGate, KlGate, StructuredGate, ToolsGate, RulerGate],
                     Field(discriminator="kind")]


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
