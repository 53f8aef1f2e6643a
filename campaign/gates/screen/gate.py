"""screen: an offline decision before any lane boots, so a window can end at "not worth a live window"
with that verdict in its signed receipt, and the daily is never stopped for it.

Two kinds, each run once per candidate: a user's Python script pinned by sha256 (run inside the task
sandbox's fences, printing one JSON object of metrics), or the built-in cache replay of a routing trace
at the candidate's slot map (``gates.screen.cachereplay``). The frozen rule is a list of clauses over the
metrics (``hit_rate >= 0.75``). A screen that could not measure (the script failed, timed out, printed
something that is not one JSON object, or the trace could not be read) is INCONCLUSIVE with the reason,
never a PASS; and a subsampled replay says so in its verdict's words.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import re
import time
import traceback
from pathlib import Path
from typing import Annotated, Any, Literal, TypeGuard

from pydantic import AfterValidator, Field, model_validator

from campaign.contracts.gatespecs import GateSpecBase, LoadedContract
from campaign.contracts.hashing import sha256_file
from campaign.contracts.model import MAX_COUNT, SHA256_PATTERN, LaneFile, StrictModel, StrList, unique_file_names
from campaign.contracts.resolve import FILE_REF, EffectiveLane
from campaign.contracts.units import Duration, Size
from campaign.errors import CampaignError, InputError
from campaign.fsutil import JsonlAppender, read_bounded
from campaign.gates.base import Screen, metric_headlines, register
from campaign.gates.result import GateResult, Metric, Verdict
from campaign.gates.task.sandbox import SandboxLimits, run_python
from campaign.presentation import Presentation

__all__ = ["CacheReplay", "Clause", "ScreenGate", "ScreenRule", "ScreenScript", "ScreenSpec", "evaluate",
           "parse_clause"]


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


_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
# A screen script is a page or two of Python; 4 MiB bounds what is read before its sha256 is checked.
SCRIPT_BYTES = 4 << 20


@register
class ScreenGate(Screen):
    fail_claims = None  # its rule weighs the candidate's own files, never against the control's
    spec: ScreenSpec

    @classmethod
    def present(cls, rule: Any, result: dict[str, Any]) -> Presentation:
        """The metrics its rule's clauses weigh, as the screen reported them."""
        names = []
        for clause in getattr(rule, "require", None) or []:
            try:
                names.append(parse_clause(clause)[0])
            except ValueError:  # a clause an older tool accepted: its metric is still in the result's table
                continue
        return Presentation(headlines=metric_headlines(result, tuple(names)))

    def screen(self, candidate: EffectiveLane, control: EffectiveLane, sink: JsonlAppender) -> dict[str, Any]:
        """Run the screen for one candidate; its one record goes to ``sink`` (the raw file) and is returned."""
        started = time.monotonic()
        try:
            record = self._cache_replay(candidate, control) if self.spec.cache_replay else self._script(candidate)
        except CampaignError as exc:  # bad trace, slot map, unreadable file: the screen could not measure
            record = {"status": "error", "reason": str(exc)}
        except Exception as exc:  # a bug must not pass for a finding: the traceback goes with it
            record = {"status": "error", "reason": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        record = {"kind": "screen", "candidate": candidate.name, "control": control.name,
                  "elapsed_s": round(time.monotonic() - started, 3), **record}
        sink.append(record)
        return record

    def _paths(self, candidate: EffectiveLane) -> dict[str, str]:
        paths = {f.name: f.path for f in candidate.files}
        paths.update({f.name: str(self.ctx.contract.resolve(f.path)) for f in self.spec.files})
        return paths

    def _script(self, candidate: EffectiveLane) -> dict[str, Any]:
        script = self.spec.script
        assert script is not None
        paths = self._paths(candidate)  # every reference names one of them: checked when the contract loads
        args = [FILE_REF.sub(lambda match: paths[match.group(1)], a) for a in script.args]
        source = Path(str(self.ctx.contract.resolve(script.path)))
        limits = SandboxLimits(timeout_s=self.spec.timeout, memory_bytes=int(self.spec.memory), file_bytes=64 << 20)
        program = read_bounded(source, SCRIPT_BYTES, what="screen script")  # UnreadableFile: the screen's error
        if hashlib.sha256(program).hexdigest() != script.sha256:  # what runs is what was frozen, or nothing
            return {"status": "error", "reason": f"{script.path} changed since freezing"}
        # the sandbox's fences and audit hook (no processes, sockets or writes outside its directory); it
        # can read what the runner can, so only the numbers the rule weighs leave it: no text it wrote
        # (a value, a key, an exception's message) enters the bundle
        result = run_python(program.decode("utf-8", errors="replace"), "", limits, as_main=True,
                            argv=[source.name, *args], site_packages=True, preload=("numpy",))
        # what failed, never the script's own words (an exception's text can carry what it read)
        kind = result.reason.split(":", 1)[0]
        record: dict[str, Any] = {"sandbox": {"reason": kind, "exit_code": result.exit_code,
                                              "containment": result.containment,
                                              "violations": [v.split(":", 1)[0] for v in result.violations]}}
        if not result.passed:
            return {**record, "status": "error", "reason": f"the screen script did not finish ({kind}, exit code "
                                                           f"{result.exit_code}): run it by hand to see its error"}
        metrics, problem = _one_json_object(result.stdout_tail)
        if problem:
            return {**record, "status": "error", "reason": problem}
        weighed = {parse_clause(clause)[0] for clause in self.spec.rule.require}
        kept = {k: v for k, v in metrics.items() if k in weighed and _finite_number(v)}
        return {**record, "status": "ok", "metrics": kept, "reported": len(metrics)}

    def _cache_replay(self, candidate: EffectiveLane, control: EffectiveLane) -> dict[str, Any]:
        from campaign.gates.screen import cachereplay

        spec = self.spec.cache_replay
        assert spec is not None
        paths = self._paths(candidate)
        _still_pinned(Path(paths[spec.trace]), next(f.sha256 for f in self.spec.files if f.name == spec.trace))
        trace = cachereplay.load_trace(Path(paths[spec.trace]), spec.n_experts)
        details: dict[str, Any] = {"trace": {"file": Path(paths[spec.trace]).name, "steps": trace.steps,
                                             "layers": trace.layers, "k": trace.k, "experts": trace.n_experts}}
        metrics: dict[str, Any] = {}
        for role, lane in (("candidate", candidate), ("control", control)):
            slot_file = next((f for f in lane.files if f.name == spec.slot_map), None)
            if slot_file is None:
                continue  # a control without the slot map: the candidate's figures stand alone
            _still_pinned(Path(slot_file.path), slot_file.sha256)
            slots = cachereplay.load_slot_map(Path(slot_file.path), trace.layers, trace.n_experts)
            replays = {policy: cachereplay.replay(trace, slots, policy, lookahead=spec.lookahead,
                                                  sample_every=spec.sample_every)
                       for policy in dict.fromkeys([spec.policy, *spec.compare])}
            details[role] = {"lane": lane.name, "slot_map": Path(slot_file.path).name, "slot_map_sha256":
                             slot_file.sha256, "slots_total": int(slots.sum()),
                             "replays": {p: r.to_json() for p, r in replays.items()},
                             "words": [r.describe() for r in replays.values()]}
            prefix = "" if role == "candidate" else "control_"
            main = replays[spec.policy]
            metrics[f"{prefix}hit_rate"] = main.hit_rate
            metrics[f"{prefix}misses_per_layer_step"] = main.misses_per_layer_step
            for policy, result in replays.items():  # lookahead hides misses, not traffic: its loads say what it costs
                metrics.update({f"{prefix}{policy}.hit_rate": result.hit_rate,
                                f"{prefix}{policy}.loads_per_layer_step": result.loads_per_layer_step})
            details.setdefault("exact", main.exact)
            details.setdefault("fraction", main.fraction)
        if "control_hit_rate" in metrics:
            metrics["hit_rate_gain"] = metrics["hit_rate"] - metrics["control_hit_rate"]
        details["overlap"] = {"words": []}
        # beside their chance level: an overlap alone says nothing (0.031 is chance for top-8 of 256)
        for name, measure, possible in (("cross_layer", cachereplay.cross_layer_overlap, trace.layers > 1),
                                        ("step", cachereplay.step_overlap, trace.steps > 1)):
            if possible:
                overlap = measure(trace)
                details["overlap"][name] = overlap.to_json()
                details["overlap"]["words"].append(overlap.describe())
                metrics.update({f"{name}_overlap": overlap.observed, f"{name}_chance": overlap.chance})
        return {"status": "ok", "metrics": metrics, "details": details}

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        result = self.new_result(candidate, control)
        records = [r for r in self.ctx.raw_records(self.gate_id, candidate.name) if r.get("kind") == "screen"]
        if not records:
            result.reasons.append("the screen did not run for this candidate")
            return result
        record = records[-1]
        result.details = {k: v for k, v in record.items() if k not in ("kind", "traceback")}
        if record.get("status") != "ok":
            result.reasons.append(f"the screen could not measure: {record.get('reason')}")
            return result
        metrics = record.get("metrics") or {}
        result.metrics = {name: Metric(value=value, unit="") for name, value in metrics.items() if _finite_number(value)}
        verdict, outcomes = evaluate(self.spec.rule.require, metrics)
        for clause_verdict, sentence in outcomes:
            result.weigh(clause_verdict, sentence)
        result.verdict = verdict
        result.reasons += _sampling_words(record)
        if verdict is Verdict.PASS and record.get("details", {}).get("exact") is False:
            result.caveats.append("a subsampled replay: not the exact replay of the trace")
        return result


def evaluate(clauses: list[str], metrics: dict[str, Any]) -> tuple[Verdict, list[tuple[Verdict, str]]]:
    """PASS when every clause holds; FAIL when one does not; INCONCLUSIVE when a metric is missing or not a
    finite number (the screen did not report what the rule weighs). With each clause's own verdict and sentence."""
    outcomes: list[tuple[Verdict, str]] = []
    failed = False
    for clause in clauses:
        name, op, bound = parse_clause(clause)
        value = metrics.get(name)
        if not _finite_number(value):
            shown = "not reported" if name not in metrics else f"{value!r}, not a number"
            return Verdict.INCONCLUSIVE, [(Verdict.INCONCLUSIVE,
                                           f"{name} was {shown} (reported: {', '.join(sorted(metrics)) or 'nothing'})")]
        holds = _OPS[op](value, bound)
        failed |= not holds
        outcomes.append((Verdict.PASS if holds else Verdict.FAIL,
                         f"{name} {value:.4g} {op} {bound:g}: {'holds' if holds else 'does not hold'}"))
    return (Verdict.FAIL if failed else Verdict.PASS), outcomes


def _still_pinned(path: Path, sha256: str) -> None:
    """What the screen reads is what was frozen (the window checked at its start; a screen runs later)."""
    digest = sha256_file(path)  # UnreadableFile names the path and what it is (a FIFO, a folder, gone)
    if digest != sha256:
        raise InputError(f"{path} changed since freezing (sha256 {digest[:12]}..., pinned {sha256[:12]}...)")


def _finite_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _sampling_words(record: dict[str, Any]) -> list[str]:
    details = record.get("details") or {}
    words = (details.get("candidate") or {}).get("words") or []
    if details.get("exact") is False:
        return [f"a declared subsample ({details.get('fraction', 0):.4%} of the steps): " + (words[0] if words else "")]
    return words[:1]


def _one_json_object(stdout: str) -> tuple[dict[str, Any], str | None]:
    text = stdout.strip()
    if not text:
        return {}, "the screen script printed nothing (it must print one JSON object of metrics)"
    try:
        value = json.loads(text)
    except ValueError:
        last = text.splitlines()[-1]
        try:
            value = json.loads(last)
        except ValueError:
            return {}, "the screen script's output is not one JSON object (its last line is not JSON either)"
    if not isinstance(value, dict):
        return {}, f"the screen script printed a JSON {type(value).__name__}, not an object of metrics"
    return value, None
