"""The speed gate's contract spec: the levels (concurrencies and request rates), the arrival schedule, the SLO, the
frozen rule and its sequential design, and the names every part of the speed package shares for a level and a
latency tail. Its own module in the kind's package, because each of the package's parts reads it."""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar, Literal, Union

from pydantic import Field, ValidationInfo, field_validator, model_validator

from campaign.contracts.gatespecs import BUNDLE_COPY, SINCE_0_3, GateSpecBase, LoadedContract
from campaign.contracts.model import INPUT_FILE_BYTES, MAX_COUNT, CountRule, StrictModel, parse_fraction
from campaign.contracts.units import Cpuset
from campaign.fsutil import UnreadableFile, read_text_bounded

__all__ = ["RATE_UNIT", "TAIL_BEYOND", "TAIL_METRICS", "Arrival", "Level", "Slo", "SpeedRule", "SpeedSpec",
           "level_of_key", "level_tag", "load_order", "rate_key", "tail_of", "tail_samples_needed"]


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
        json_schema_extra=SINCE_0_3)
    fail_levels: Literal["holm", "each"] = Field(
        "holm", description="A FAIL at any judged level fails the comparison. 'holm': the levels share the FAIL "
                            "side's error rate (Holm's step-down over each level's one-sided p), so the stated "
                            "false-FAIL rate holds however many levels are judged; 'each': every level at the "
                            "full rate (two levels, twice the false FAILs; what tools before 0.3 did).",
        json_schema_extra=SINCE_0_3)
    futility: Literal["conditional_power", "reach", "none"] = Field(
        "conditional_power", description="When the window stops pairing an undecided comparison early. "
                                         "'conditional_power': when the chance that the remaining pairs decide "
                                         "(simulated from this window's boots, the true change drawn from the "
                                         "estimate and its uncertainty) is under min_conditional_power; 'reach': "
                                         "only when no number of pairs could (what tools before 0.3 did); "
                                         "'none': pair until decided or max_boot_pairs. Futility only ever ends "
                                         "INCONCLUSIVE, so the error rates stand.",
        json_schema_extra=SINCE_0_3)
    min_conditional_power: float = Field(
        0.05, ge=0.0, lt=1.0, description="With futility 'conditional_power': the chance of a decision in the "
                                          "remaining pairs under which the window boots no more pairs for this "
                                          "comparison.", json_schema_extra=SINCE_0_3)


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
        json_schema_extra=SINCE_0_3)
    arrival: Arrival = Field(default_factory=Arrival, description="The rate levels' arrival schedule.",
                             json_schema_extra=SINCE_0_3)
    slo: Slo | None = Field(None, description="A per-request latency SLO: goodput and the good share are "
                                              "reported per lane and level (not judged).",
                            json_schema_extra=SINCE_0_3)
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
