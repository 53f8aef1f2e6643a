"""The offline half of a window: every gate judged, for every candidate, from what the bundle holds.

A window calls it once its lanes ran and the daily is back; ``campaign rejudge`` calls it on a copy of
a signed bundle. Judges are code and code has bugs: each (gate, candidate) is judged apart, so a judge
that raises costs that one verdict (INCONCLUSIVE, with its traceback in the bundle) and never the other
gates' verdicts or the signature.
"""

from __future__ import annotations

import csv
import io
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campaign import __version__
from campaign.contracts.effective import effective_contract
from campaign.contracts.hashing import canonical_sha256
from campaign.contracts.load import LoadedContract
from campaign.contracts.resolve import EffectiveLane, normalize_axis
from campaign.fsutil import atomic_write_bytes, atomic_write_json
from campaign.gates.base import Gate, GateContext, Screen
from campaign.gates.registry import GATES, gate_for
from campaign.gates.result import VERDICT_RULE, GateResult, Presentation, Verdict, combine
from campaign.presentation import deciding_reason, fit, headline
from campaign.window.inspectdiff import runtime_axis_difference

__all__ = ["SCREENED_OUT", "LaneOutcome", "aa_check", "build_gates", "input_copies", "judge_bundle", "judge_one", "predicate",
           "summarize"]


@dataclass
class LaneOutcome:
    status: str = "pending"  # ran | launch_failed | skipped | screened out
    cause: str | None = None
    message: str | None = None
    boot_seconds: float | None = None
    engine_version: dict[str, Any] = field(default_factory=dict)


# A candidate a screen kept out of the live window: never booted, and the daily never stopped for it.
SCREENED_OUT = "screened out"


def input_copies(loaded: LoadedContract, bundle: Path) -> dict[str, Path]:
    """Where the frozen copy of each input lies in the bundle: gates read these, never the originals."""
    return {name: bundle / "contract" / "inputs" / f"{name}{Path(spec.file).suffix}"
            for name, spec in loaded.contract.inputs.items()}


def build_gates(loaded: LoadedContract, bundle: Path) -> list[Gate]:
    ctx = GateContext(bundle=bundle, contract=loaded, input_paths=input_copies(loaded, bundle))
    return [gate_for(spec, ctx) for spec in loaded.contract.gates]


def judge_bundle(loaded: LoadedContract, gates: list[Gate], lanes: dict[str, LaneOutcome],
                 bundle: Path) -> list[GateResult]:
    """Judge, then write ``gates/<gate>/<candidate>.json`` and the gates' tables into ``bundle``."""
    results = []
    for candidate in loaded.candidates():
        control = loaded.lanes[candidate.control or ""]
        blocked, error = _blocked(bundle, control, candidate, lanes)
        for gate in gates:
            if blocked and not isinstance(gate, Screen):  # a screen ran before any lane: what happened to lanes is not its
                result = _result(gate, candidate, control, blocked)
                if error:
                    _write_error(bundle, gate.gate_id, candidate.name, error)
            else:
                result = judge_one(bundle, gate, candidate, control)
            results.append(result)
            atomic_write_json(bundle / "gates" / result.gate / f"{result.candidate}.json", result.dump())
    _write_tables(bundle, gates)
    return results


def _blocked(bundle: Path, control: EffectiveLane, candidate: EffectiveLane,
             lanes: dict[str, LaneOutcome]) -> tuple[list[str], str | None]:
    """Why no gate of this candidate can be judged (empty: all can), and the traceback if it was a bug."""
    blocked = []
    screened = lanes.get(candidate.name)
    if screened is not None and screened.status == SCREENED_OUT:
        return [f"not booted: {screened.cause} ({screened.message}): not worth a live window"], None
    for name in (control.name, candidate.name):
        outcome = lanes.get(name) or LaneOutcome(cause="no record of it")
        if outcome.status != "ran":
            blocked.append(f"lane {name} did not launch ({outcome.cause}): a launch failure is not a finding")
    if blocked:
        return blocked, None
    try:
        mismatch = runtime_axis_difference(bundle, control, candidate, {normalize_axis(a) for a in candidate.axis})
    except Exception as exc:  # top level of a candidate's check: a bug or an unreadable snapshot is recorded
        # (traceback kept), and every gate of this candidate says so; the other candidates are still judged
        return [_error_reason(exc)], traceback.format_exc()
    return ([f"what ran differs from the declared axis: {mismatch}"] if mismatch else []), None


def judge_one(bundle: Path, gate: Gate, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
    try:
        result = gate.judge(candidate, control)
    except Exception as exc:  # top level of one judgement: the traceback goes to the bundle, the verdict says
        _write_error(bundle, gate.gate_id, candidate.name, traceback.format_exc())
        return _result(gate, candidate, control, [_error_reason(exc)])
    if result.window_finding and result.verdict is Verdict.FAIL:
        # a finding about the window's instrument is the window's, reported once: never this candidate's loss
        result.overrule(Verdict.INCONCLUSIVE, f"instrument: {result.window_finding}")
    result.settle()
    try:  # the verdict is final here: its headline opens with it (the kind's own words, else the deciding reason)
        own = gate.headline_words(gate.spec.rule, result.dump())
    except Exception:  # top level of the headline: a bug there costs the kind's words, never the verdict
        own = None
        atomic_write_bytes(bundle / "gates" / gate.gate_id / f"{candidate.name}.headline-error.txt",
                           traceback.format_exc().encode())
    result.headline = fit(f"{result.verdict.value} {own or deciding_reason(result.dump())}")
    try:  # what the report shows of it
        result.presentation = gate.presentation(result)
    except Exception:  # top level of the presentation: a bug there costs the plots, never the verdict
        result.presentation = Presentation()
        atomic_write_bytes(bundle / "gates" / gate.gate_id / f"{candidate.name}.present-error.txt",
                           traceback.format_exc().encode())
    return result


def _error_reason(exc: Exception) -> str:
    # one line: the full message and the traceback are in the error file next to the result
    lines = str(exc).strip().splitlines()
    return f"judge error: {type(exc).__name__}" + (f": {lines[0]}" if lines else "")


def _write_error(bundle: Path, gate_id: str, candidate: str, text: str) -> None:
    atomic_write_bytes(bundle / "gates" / gate_id / f"{candidate}.judge-error.txt", text.encode())


def _result(gate: Gate, candidate: EffectiveLane, control: EffectiveLane, reasons: list[str]) -> GateResult:
    try:
        rule = gate.rule_dump()
    except Exception as exc:  # top level of an error's verdict: it must still be written (the error it reports
        # is recorded already); the rule is in the bundle's contract copy, and why it is missing here is said
        rule = {"unavailable": f"{type(exc).__name__}: {exc}"[:300]}
    return GateResult(gate=gate.gate_id, kind=gate.spec.kind, candidate=candidate.name, control=control.name,
                      verdict=Verdict.INCONCLUSIVE, reasons=reasons, rule=rule, presentation=Presentation(),
                      headline=fit(f"INCONCLUSIVE {reasons[0] if reasons else 'without a stated reason'}"))


def _write_tables(bundle: Path, gates: list[Gate]) -> None:
    """Each gate's derived tables (e.g. throughput.csv) as CSV; columns in first-seen order. A gate whose
    tables cannot be built leaves its traceback instead; the verdicts do not depend on tables."""
    tables: dict[str, list[dict[str, Any]]] = {}
    for gate in gates:
        try:
            produced = gate.bundle_tables()
        except Exception:  # top level of one gate's tables: its traceback is written in their place
            atomic_write_bytes(bundle / "gates" / gate.gate_id / "tables.judge-error.txt",
                               traceback.format_exc().encode())
            continue
        for name, rows in produced.items():
            tables.setdefault(name, []).extend(rows)
    for name, rows in tables.items():
        columns = list(dict.fromkeys(key for row in rows for key in row))
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_bytes(bundle / name, out.getvalue().encode())


def predicate(loaded: LoadedContract, window_id: str) -> dict[str, Any]:
    """What the bundle's signature says about it, besides its files."""
    return {"window": window_id, "contract": loaded.contract.contract, "contract_version": loaded.contract.version,
            "canonical_sha256": loaded.canonical_sha256, "tool_version": __version__}


def summarize(loaded: LoadedContract, freeze_record: dict[str, Any], window_id: str, started: float, status: str,
              lanes: dict[str, LaneOutcome], results: list[GateResult]) -> dict[str, Any]:
    """SUMMARY.json's body: every verdict with its numbers, and the promotion gates' overall verdict."""
    return {
        "schema": "campaign.summary/v1",
        "tool_version": __version__,
        # how gate verdicts combine into a candidate's overall (gates.result.combine); a bundle without it was
        # judged by v1, which readers read by today's rule (receipts.decision.read_with_current_rule)
        "verdict_rule": VERDICT_RULE,
        "window": window_id,
        "status": status,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "ended_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "duration": {"value": round(time.time() - started, 3), "unit": "s"},
        "contract": {"name": loaded.contract.contract, "version": loaded.contract.version,
                     "canonical_sha256": loaded.canonical_sha256, "frozen_at": freeze_record.get("frozen_at"),
                     "freeze_keyid": (freeze_record.get("signature") or {}).get("keyid"),
                     # the rules it was judged by (every default resolved), and how they differ from the frozen
                     # ones when the run accepted this tool's defaults (--accept-tool-defaults)
                     "effective_sha256": freeze_record.get("judged_effective_sha256")
                                         or canonical_sha256(effective_contract(loaded)),
                     "accepted_tool_defaults": list(freeze_record.get("accepted_tool_defaults") or []),
                     # folders outside the contract's own tree the runner let it read (--allow-path)
                     "allowed_paths": [str(p) for p in loaded.allowed_roots]},
        "lanes": {name: {"status": o.status, "cause": o.cause, "message": o.message,
                         "boot_seconds": None if o.boot_seconds is None else
                         {"value": round(o.boot_seconds, 3), "unit": "s"},
                         "engine_version": o.engine_version} for name, o in lanes.items()},
        "candidates": (candidates := _candidates(loaded, status, results, lanes)),
        # only where the contract has an A/A lane: a bundle without one holds what it held before
        **({"aa_check": check} if (check := aa_check(loaded, candidates)) else {}),
        "warnings": [w for r in results for w in r.warnings],
        "findings": window_findings(results),
    }


def window_findings(results: list[GateResult]) -> list[dict[str, Any]]:
    """Findings about the window's instruments, each once with the candidates whose results carried it, in the
    order they were found: what the window could not measure is not any candidate's verdict."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for result in results:
        if result.window_finding:
            entry = found.setdefault((result.gate, result.window_finding),
                                     {"gate": result.gate, "finding": result.window_finding, "candidates": []})
            entry["candidates"].append(result.candidate)
    return list(found.values())


def aa_check(loaded: LoadedContract, candidates: dict[str, Any]) -> dict[str, Any] | None:
    """The window's false-decision check, from its A/A lanes (the control again): each verdict that claims a
    difference from the control, which cannot be there. None when the contract has no A/A lane."""
    aa = [lane.name for lane in loaded.contract.lanes if lane.aa]
    if not aa:
        return None
    specs = {spec.id or spec.kind: spec for spec in loaded.contract.gates}
    found = []
    for lane in aa:
        entry = candidates.get(lane) or {}
        entry["aa"] = True
        for gate, result in (entry.get("gates") or {}).items():
            spec = specs.get(gate)
            claim = GATES[spec.kind].aa_claims(getattr(spec, "rule", None), result) if spec else None
            if claim:
                found.append({"lane": lane, "gate": gate, "verdict": result["verdict"], "claims": claim})
    return {"lanes": aa, "false_decisions": found}


def _candidates(loaded: LoadedContract, status: str, results: list[GateResult],
                lanes: dict[str, LaneOutcome]) -> dict[str, Any]:
    candidates: dict[str, Any] = {}
    for result in results:
        entry = candidates.setdefault(result.candidate, {"control": result.control, "gates": {}})
        entry["gates"][result.gate] = {"kind": result.kind, "verdict": result.verdict.value,
                                       "headline": headline(result.dump()), "reasons": result.reasons,
                                       "metrics": {k: m.model_dump(exclude_none=True)
                                                   for k, m in result.metrics.items()}}
        if result.deciding_reason is not None:  # promote's next step reads it (receipts.decision)
            entry["gates"][result.gate]["deciding_reason"] = result.deciding_reason
        if result.window_finding:
            entry["gates"][result.gate]["window_finding"] = result.window_finding
        if result.warnings:
            entry["gates"][result.gate]["warnings"] = list(result.warnings)
            entry.setdefault("warnings", []).extend(result.warnings)
    promotion = loaded.contract.promotion
    for entry in candidates.values():
        required = promotion.requires if promotion else list(entry["gates"])
        verdicts = [Verdict(entry["gates"][g]["verdict"]) if g in entry["gates"] else Verdict.INCONCLUSIVE
                    for g in required]
        entry["promotion_gates"] = required
        entry["promotion_rule"] = promotion is not None  # without one, promote refuses whatever passed
        entry["overall"] = combine(verdicts).value if status == "complete" else Verdict.INCONCLUSIVE.value
    screen_ids = {r.gate for r in results if _is_screen(r.kind)}
    for name, entry in candidates.items():
        outcome = lanes.get(name)
        if outcome is not None and outcome.status == SCREENED_OUT:
            screen = next((g for g, r in entry["gates"].items() if g in screen_ids and r["verdict"] != "PASS"), None)
            entry["screened_out"] = {"gate": screen, "verdict": entry["gates"][screen]["verdict"] if screen else None,
                                     "reason": outcome.message}
    return candidates


def _is_screen(kind: str) -> bool:
    """A result's gate is a screen by its class (the registry), never by its kind's name."""
    gate = GATES.get(kind)
    return gate is not None and issubclass(gate, Screen)
