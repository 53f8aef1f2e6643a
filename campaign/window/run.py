"""A window: frozen contract -> pre-flight -> for each lane: boot, ready, gates -> stop -> judge -> sign.

Raw records are written as they arrive; judging reads only what is in the bundle, so a bundle can be
re-judged later. The journal and SUMMARY.json are written in ``finally``; only a window that reached
the end is signed, so an interrupted one fails verification as incomplete.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campaign import __version__
from campaign.contracts.freeze import check_frozen, default_record_path
from campaign.contracts.hashing import sha256_file
from campaign.contracts.load import LoadedContract, load_contract
from campaign.contracts.resolve import EffectiveLane, normalize_axis
from campaign.errors import LaunchError, PreflightError
from campaign.fsutil import JsonlAppender, atomic_write_bytes, atomic_write_json
from campaign.gates.base import Gate, GateContext, Visit, gate_for
from campaign.gates.result import GateResult, Verdict, worst
from campaign.lanes.session import boot_lane, port_is_free, resolve_executable
from campaign.receipts.bundle import sign_bundle
from campaign.signing import SigningKey, TrustedKeys
from campaign.window.inspectdiff import runtime_axis_difference
from campaign.window.source import source_snapshot

__all__ = ["WindowOutcome", "run_window"]


@dataclass
class LaneOutcome:
    status: str = "pending"  # ran | launch_failed | skipped
    cause: str | None = None
    message: str | None = None
    boot_seconds: float | None = None
    engine_version: dict[str, Any] = field(default_factory=dict)


@dataclass
class WindowOutcome:
    bundle: Path
    window_id: str
    verdicts: dict[str, dict[str, str]]  # candidate -> gate -> verdict
    signed: bool
    summary: dict[str, Any]


def _window_id(loaded: LoadedContract) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{stamp}-{loaded.contract.contract}-v{loaded.contract.version}-{loaded.canonical_sha256[:8]}"


def run_window(contract_path: Path, *, key: SigningKey, trusted: TrustedKeys, out_dir: Path = Path("runs"),
               record_path: Path | None = None) -> WindowOutcome:
    loaded = load_contract(contract_path)
    record_path = record_path or default_record_path(loaded.path)
    freeze_record = check_frozen(loaded, record_path, trusted)
    model_paths = preflight(loaded)
    window_id = _window_id(loaded)
    bundle = out_dir / window_id
    bundle.mkdir(parents=True, exist_ok=False)
    return asyncio.run(_run(loaded, record_path, freeze_record, model_paths, bundle, window_id, key))


def preflight(loaded: LoadedContract) -> dict[str, str]:
    """Everything checkable before a lane starts: engines, executables, model identity, ports."""
    contract = loaded.contract
    if contract.incumbent is not None or contract.failsafe is not None:
        raise PreflightError("this version cannot yet stop and restore an incumbent behind a failsafe; "
                             "remove `incumbent`/`failsafe` or run a version that supports them")
    from campaign.lanes.adapter import adapter_for

    model_paths: dict[str, str] = {}
    hashed: dict[Path, str] = {}
    for lane in loaded.lanes.values():
        adapter_for(lane.engine)
        if lane.runtime == "process":
            resolve_executable(lane)
        path = loaded.resolve(lane.model.path)
        if not path.exists():
            raise PreflightError(f"lane {lane.name}: model {path} not found")
        if lane.model.sha256:
            if path not in hashed:
                hashed[path] = sha256_file(path)
            if hashed[path] != lane.model.sha256:
                raise PreflightError(f"lane {lane.name}: model {path} has sha256 {hashed[path]}, "
                                     f"not the pinned {lane.model.sha256}")
        if lane.model.sha256_manifest:
            _check_manifest(loaded, lane, path)
        model_paths[lane.name] = str(path.resolve())
        if not port_is_free(lane.host, lane.port):
            raise PreflightError(f"lane {lane.name}: port {lane.host}:{lane.port} is already in use; "
                                 "another server there would be measured instead")
    return model_paths


def _check_manifest(loaded: LoadedContract, lane: EffectiveLane, model_dir: Path) -> None:
    manifest = loaded.resolve(lane.model.sha256_manifest or "")
    lines = [l.split(None, 1) for l in manifest.read_text().splitlines() if l.strip()]
    bad = [name.strip().lstrip("*") for digest, name in lines
           if sha256_file(model_dir / name.strip().lstrip("*")) != digest]
    if bad:
        raise PreflightError(f"lane {lane.name}: {len(bad)}/{len(lines)} model files differ from "
                             f"{manifest.name}, e.g. {bad[0]}")


async def _run(loaded: LoadedContract, record_path: Path, freeze_record: dict[str, Any],
               model_paths: dict[str, str], bundle: Path, window_id: str, key: SigningKey) -> WindowOutcome:
    from campaign.window.journal import Journal

    journal = Journal(bundle / "journal.jsonl")
    started = time.time()
    lanes: dict[str, LaneOutcome] = {name: LaneOutcome() for name in loaded.lanes}  # by visit key
    results: list[GateResult] = []
    status = "interrupted"
    signed = False
    summary: dict[str, Any] = {}
    try:
        journal.done("start", window=window_id, contract=loaded.contract.contract,
                     canonical_sha256=loaded.canonical_sha256)
        input_paths = _copy_contract(loaded, record_path, bundle)
        ctx = GateContext(bundle=bundle, contract=loaded, input_paths=input_paths)
        gates = [gate_for(spec, ctx) for spec in loaded.contract.gates]
        atomic_write_json(bundle / "source.json", source_snapshot())
        labels = {"campaign.window": window_id, "campaign.contract": loaded.canonical_sha256}
        for visit in plan_visits(loaded, gates):
            lane = visit.lane
            if visit.index == 0:
                atomic_write_json(bundle / "lanes" / lane.name / "spec.json", lane.model_dump(mode="json"))
            visit_gates = gates if visit.index == 0 else [g for g in gates if g.rerun_control]
            await _run_lane(visit, visit_gates, model_paths[lane.name], bundle, journal,
                            lanes.setdefault(visit.key, LaneOutcome()), labels)
        journal.intent("judge")
        results = _judge(loaded, gates, lanes, bundle)
        for result in results:
            atomic_write_json(bundle / "gates" / result.gate / f"{result.candidate}.json", result.dump())
        _write_tables(bundle, gates)
        journal.done("judge", verdicts={f"{r.gate}/{r.candidate}": r.verdict.value for r in results})
        status = "complete"
    finally:
        summary = _summary(loaded, freeze_record, window_id, started, status, lanes, results)
        atomic_write_json(bundle / "SUMMARY.json", summary)
        journal.done("end", status=status)
        journal.close()
    if status == "complete":
        sign_bundle(bundle, key, {"window": window_id, "contract": loaded.contract.contract,
                                  "contract_version": loaded.contract.version,
                                  "canonical_sha256": loaded.canonical_sha256, "tool_version": __version__})
        signed = True
    verdicts: dict[str, dict[str, str]] = {}
    for result in results:
        verdicts.setdefault(result.candidate, {})[result.gate] = result.verdict.value
    return WindowOutcome(bundle=bundle, window_id=window_id, verdicts=verdicts, signed=signed, summary=summary)


def _copy_contract(loaded: LoadedContract, record_path: Path, bundle: Path) -> dict[str, Path]:
    """The frozen contract, its record and its input files go into the bundle; gates read these copies."""
    target = bundle / "contract"
    target.mkdir(parents=True)
    shutil.copyfile(loaded.path, target / loaded.path.name)
    shutil.copyfile(record_path, target / "freeze.json")
    paths = {}
    for name, spec in loaded.contract.inputs.items():
        destination = target / "inputs" / f"{name}{Path(spec.file).suffix}"
        destination.parent.mkdir(exist_ok=True)
        shutil.copyfile(loaded.resolve(spec.file), destination)
        paths[name] = destination
    return paths


def plan_visits(loaded: LoadedContract, gates: list[Gate]) -> list[Visit]:
    """Lanes in contract order (controls precede their candidates); then, if a gate asks for it,
    each control once more, so its drift across the window is measured, not assumed."""
    visits = [Visit(lane) for lane in loaded.lanes.values()]
    if any(gate.rerun_control for gate in gates):
        visits += [Visit(lane, 1) for lane in loaded.controls()
                   if any(c.control == lane.name for c in loaded.candidates())]
    return visits


async def _run_lane(visit: Visit, gates: list[Gate], model_path: str, bundle: Path, journal: Any,
                    outcome: LaneOutcome, labels: dict[str, str]) -> None:
    lane = visit.lane
    lane_dir = bundle / "lanes" / visit.key
    journal.intent("boot", lane=visit.key)
    with JsonlAppender(bundle / "raw" / "warmup" / f"{visit.key}.jsonl") as warm_sink:
        try:
            run = await boot_lane(lane, model_path=model_path, log_path=lane_dir / "boot.log",
                                  warm_sink=warm_sink, labels=labels)
        except LaunchError as exc:
            outcome.status, outcome.cause, outcome.message = "launch_failed", exc.cause, str(exc)
            (lane_dir / "launch_failure.txt").write_text(f"{exc.cause}: {exc}\n\n{exc.log_tail}\n")
            journal.failed("boot", lane=visit.key, cause=exc.cause, message=str(exc))
            return
    outcome.boot_seconds, outcome.engine_version = run.boot_seconds, run.engine_version
    journal.done("boot", lane=visit.key, boot_seconds=run.boot_seconds)
    try:
        atomic_write_json(lane_dir / "inspect.json", _redacted(run.inspect, lane))
        for gate in gates:
            journal.intent("gate", gate=gate.gate_id, lane=visit.key)
            with JsonlAppender(gate.ctx.raw_path(gate.gate_id, visit.key)) as sink:
                await gate.collect(run, sink, visit)
            journal.done("gate", gate=gate.gate_id, lane=visit.key)
        outcome.status = "ran"
    finally:
        journal.intent("stop", lane=visit.key)
        code = await run.stop()
        journal.done("stop", lane=visit.key, exit_code=code)


def _write_tables(bundle: Path, gates: list[Gate]) -> None:
    """Each gate's derived tables (e.g. throughput.csv) as CSV; columns in first-seen order."""
    tables: dict[str, list[dict[str, Any]]] = {}
    for gate in gates:
        for name, rows in gate.bundle_tables().items():
            tables.setdefault(name, []).extend(rows)
    for name, rows in tables.items():
        columns = list(dict.fromkeys(key for row in rows for key in row))
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_bytes(bundle / name, out.getvalue().encode())


def _redacted(snapshot: dict[str, Any], lane: EffectiveLane) -> dict[str, Any]:
    """Env values the contract did not declare are replaced by a digest: they may be secrets."""
    out = dict(snapshot)
    env = snapshot.get("env") or {}
    out["env"] = {k: (v if k in lane.env else "sha256:" + hashlib.sha256(v.encode()).hexdigest()[:16])
                  for k, v in env.items()}
    return out


def _judge(loaded: LoadedContract, gates: list[Gate], lanes: dict[str, LaneOutcome],
           bundle: Path) -> list[GateResult]:
    results = []
    for candidate in loaded.candidates():
        control = loaded.lanes[candidate.control or ""]
        blocked = [f"lane {name} did not launch ({lanes[name].cause}): a launch failure is not a finding"
                   for name in (control.name, candidate.name) if lanes[name].status != "ran"]
        if not blocked:
            mismatch = runtime_axis_difference(bundle, control, candidate,
                                               {normalize_axis(a) for a in candidate.axis})
            if mismatch:
                blocked.append(f"what ran differs from the declared axis: {mismatch}")
        for gate in gates:
            if blocked:
                results.append(GateResult(gate=gate.gate_id, kind=gate.spec.kind, candidate=candidate.name,
                                          control=control.name, verdict=Verdict.INCONCLUSIVE, reasons=blocked,
                                          rule=gate.rule_dump()))
            else:
                results.append(gate.judge(candidate, control))
    return results


def _summary(loaded: LoadedContract, freeze_record: dict[str, Any], window_id: str, started: float, status: str,
             lanes: dict[str, LaneOutcome], results: list[GateResult]) -> dict[str, Any]:
    candidates: dict[str, Any] = {}
    for result in results:
        entry = candidates.setdefault(result.candidate, {"control": result.control, "gates": {}})
        entry["gates"][result.gate] = {"verdict": result.verdict.value, "reasons": result.reasons,
                                       "metrics": {k: m.model_dump(exclude_none=True)
                                                   for k, m in result.metrics.items()}}
    promotion = loaded.contract.promotion
    for name, entry in candidates.items():
        required = promotion.requires if promotion else list(entry["gates"])
        verdicts = [Verdict(entry["gates"][g]["verdict"]) if g in entry["gates"] else Verdict.INCONCLUSIVE
                    for g in required]
        entry["promotion_gates"] = required
        entry["overall"] = worst(verdicts).value if status == "complete" else Verdict.INCONCLUSIVE.value
    return {
        "schema": "campaign.summary/v1",
        "tool_version": __version__,
        "window": window_id,
        "status": status,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "ended_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "duration": {"value": round(time.time() - started, 3), "unit": "s"},
        "contract": {"name": loaded.contract.contract, "version": loaded.contract.version,
                     "canonical_sha256": loaded.canonical_sha256, "frozen_at": freeze_record.get("frozen_at"),
                     "freeze_keyid": (freeze_record.get("signature") or {}).get("keyid")},
        "lanes": {name: {"status": o.status, "cause": o.cause, "message": o.message,
                         "boot_seconds": None if o.boot_seconds is None else
                         {"value": round(o.boot_seconds, 3), "unit": "s"},
                         "engine_version": o.engine_version} for name, o in lanes.items()},
        "candidates": candidates,
    }
