"""Declared values and the observables that bound them.

A flag can parse and do something other than what its name says (llama-server 0.3.36 takes
``--spec-draft-n-max 4`` beside ``--spec-type ngram-simple`` and drafts 48 tokens deep: that type's depth
is ``--spec-ngram-simple-size-m``). The ruler proves that the lanes differ; this proves that each declared
axis value is the one in effect, where the engine shows it: an adapter maps the options it knows to an
``Observable`` that reads the engine's own account (its metrics, /props, boot log) and says whether the
value holds, is contradicted, or cannot be shown. A value no observable covers is unproven, said so in
the ruler's evidence, never silently accepted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from campaign.contracts.args import axis_key
from campaign.contracts.resolve import EffectiveLane
from campaign.lanes.engines.prometheus import Samples, series

__all__ = ["Check", "Evidence", "Finding", "Observable", "Status", "boot_values", "check_declared",
           "depth_check", "per_position"]

Status = Literal["holds", "contradicted", "unproven"]


@dataclass(frozen=True)
class Evidence:
    """What the ruler saw of one lane: its metrics after the probes (cumulative since boot: the warmup's and
    other gates' traffic on that boot count too, and any of it can contradict a bound), its engine
    properties, and its boot log's text."""

    metrics: Samples | None
    props: Mapping[str, Any] | None
    boot_log: str


@dataclass(frozen=True)
class Check:
    status: Status
    seen: str  # what the observable showed, in words


@dataclass(frozen=True)
class Observable:
    what: str  # where the engine shows the value, e.g. "per-position acceptance counters (/metrics)"
    check: Callable[[str, Evidence], Check]  # (the declared value, the evidence) -> the verdict on it
    sets: str = "sets the value"  # what the flag claims to do, for the contradiction's sentence: "limits the depth"


@dataclass(frozen=True)
class Finding:
    lane: str
    field: str  # the axis field, e.g. "args.spec-draft-n-max"
    declared: str  # the option and its value as the lane gives it, e.g. "--spec-draft-n-max 4"
    status: Status
    observable: str | None
    seen: str
    sets: str = "sets the value"

    def sentence(self) -> str:
        if self.status == "contradicted":
            return f"{self.lane}: declared {self.declared}, {self.seen}: the flag is not what {self.sets} here"
        if self.status == "holds":
            return f"{self.lane}: declared {self.declared} in effect ({self.seen})"
        return f"{self.lane}: declared {self.declared} unproven ({self.seen})"

    def dump(self) -> dict[str, Any]:
        return {"lane": self.lane, "field": self.field, "declared": self.declared, "status": self.status,
                "observable": self.observable, "seen": self.seen}


def check_declared(engine: str, observables: Mapping[str, Observable], lane: EffectiveLane, fields: list[str],
                   evidence: Evidence) -> list[Finding]:
    """One finding per axis field the lane sets: ``observables`` are keyed by axis field (each alias of an
    option listed), a field without one is unproven. A field the lane does not set declares nothing here
    (a control without the candidate's option runs the engine's default, which no contract declared)."""
    options = {axis_key(name): (name, value) for name, value in lane.options.items() if not name.startswith("#")}
    out = []
    for field in fields:
        if field.startswith("args."):
            if field not in options:
                continue
            name, value = options[field]
            declared = f"{name} {value}" if value is not None else name
        else:
            value = _field_value(lane, field)
            if value is None:
                continue
            declared = f"{field}={value}"
        observable = observables.get(field)
        if observable is None or value is None:
            out.append(Finding(lane.name, field, declared, "unproven", None,
                               f"the {engine} adapter knows no observable of {field}"))
            continue
        check = observable.check(value, evidence)
        out.append(Finding(lane.name, field, declared, check.status, observable.what, check.seen, observable.sets))
    return out


def _field_value(lane: EffectiveLane, field: str) -> str | None:
    """A non-argument axis field's value on the lane (cpus, env.NAME, image...), as text; None when unset."""
    if field.startswith("env."):
        return lane.env.get(field[len("env."):])
    value: Any = lane.model_dump(exclude_none=True)
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return None if value is None else str(value)


def boot_values(log: str, pattern: str) -> list[str]:
    """Every value ``pattern`` (one group) captures in the boot log, in order."""
    return [match.group(1) for match in re.finditer(pattern, log)]


def per_position(samples: Samples, metric: str) -> dict[int, float]:
    """A per-position counter's series, position -> value: ``metric{position="3"} 7`` is {3: 7.0}; summed
    over the engine's other labels (vLLM labels each series by engine index and model too)."""
    out: dict[int, float] = {}
    for labels, value in series(samples, metric):
        if labels.get("position", "").isdigit():
            out[int(labels["position"])] = out.get(int(labels["position"]), 0.0) + value
    return out


def _int_depth(value: str) -> int | None:
    return int(value) if value.isdigit() else None


def depth_check(metric: str, depth_of: Callable[[str], int | None] = _int_depth) -> Callable[[str, Evidence], Check]:
    """Speculative depth K bounded by a per-position acceptance counter (position p counts verification
    steps that accepted more than p draft tokens, so a draft K deep accepts at positions 0..K-1 at most):
    an accepted draft at a position >= K contradicts K; so does a series of another length than K, where
    the engine exports one series per position it can draft (llama-server: its effective draft limit;
    vLLM: ``num_speculative_tokens``). ``depth_of`` reads K from the declared value (None: it holds none)."""

    def check(value: str, evidence: Evidence) -> Check:
        depth = depth_of(value)
        if depth is None:
            return Check("unproven", f"{value!r} declares no depth")
        if evidence.metrics is None:
            return Check("unproven", "the engine served no metrics")
        series = per_position(evidence.metrics, metric)
        if not series:
            return Check("unproven", "no draft was verified on this lane, so no per-position counter exists")
        beyond = sorted(p for p, n in series.items() if p >= depth and n > 0)
        if beyond:
            return Check("contradicted", f"drafts accepted at position {beyond[-1]}")
        if len(series) != depth:
            return Check("contradicted", f"the engine counts acceptance at {len(series)} draft positions "
                                         f"(0-{len(series) - 1}): its draft limit is {len(series)}")
        deepest = max((p for p, n in series.items() if n > 0), default=None)
        return Check("holds", f"{len(series)} draft positions counted, deepest accepted "
                              f"{'none' if deepest is None else f'at position {deepest}'}")

    return check
