"""``campaign rejudge``: judge a signed bundle again with the code of today, into a new signed bundle.

Only the bundle is read: its contract and freeze record, the frozen input copies, the raw records, the
lanes' specs and snapshots. Those are copied into the new bundle first and judged there, so what is
signed is exactly what was judged; the source bundle is never written to. The new SUMMARY.json names
its source by path, window id and the sha256 of its signed envelope, so a rejudge can be traced to the
measurement it re-read, and a rejudge never passes for a window that ran.

The rules are the ones the window was judged by (the bundle's effective contract), never this tool's
defaults: a newer tool re-judges with today's code but yesterday's rules. Where this tool's defaults would
set a rule otherwise, the rejudge also judges a scratch copy by them and reports, per gate, those rules and
the verdict they would give; ``with_current_defaults`` signs that judgement instead, recording the change.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from campaign import __version__
from campaign.contracts.effective import (
    EFFECTIVE_FILE,
    LANE_TOOL_DEFAULTS,
    contract_rules,
    effective_contract,
    effective_document,
    read_document,
    recorded_rules,
    with_rules,
)
from campaign.contracts.freeze import tool_default_changes
from campaign.contracts.hashing import canonical_sha256, sha256_file
from campaign.contracts.load import LoadedContract, load_contract
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import InputError, VerifyError
from campaign.fsutil import atomic_write_json, load_json_strict, private_tempdir
from campaign.receipts.bundle import ENVELOPE, copy_bundle, errors_named_as, sign_bundle, verify_bundle
from campaign.signing import SigningKey, TrustedKeys
from campaign.window.judge import LaneOutcome, build_gates, judge_bundle, predicate, summarize
from campaign.window.source import source_snapshot

__all__ = ["Rejudged", "VerdictChange", "rejudge"]

# What judges read (contract/: contract, freeze record, input copies; lanes/: spec.json, inspect.json,
# boot.log), and the raw records. gates/, tables and SUMMARY.json are what a rejudge writes anew.
# what the source window measured and proved, unchanged: the contract, each lane's spec and inspect, the
# raw records, the daily's snapshot and restore proof (promotion reads them). Not its journal: that is
# the run's, and this command ran nothing.
COPIED = ("contract", "lanes", "raw", "incumbent")


@dataclass(frozen=True)
class VerdictChange:
    gate: str
    candidate: str
    before: str | None  # None: the source bundle has no verdict for it
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after


@dataclass(frozen=True)
class Rejudged:
    bundle: Path
    source: Path
    verdicts: list[VerdictChange]
    # how this tool's defaults would set the rules otherwise ("field: frozen X, this tool Y"), and per gate the
    # verdict under the rules signed (before) and under this tool's defaults (after); empty when they agree
    rule_changes: list[str] = dataclasses.field(default_factory=list)
    under_current_defaults: list[VerdictChange] = dataclasses.field(default_factory=list)
    # what the signed judgement used: "recorded" (the rules the window was judged by), "this tool's defaults"
    # (asked for), "recorded none" (a bundle from before effective contracts: this tool's defaults)
    rules: str = "recorded"
    # fields of an older schema read in today's terms to judge it (``LoadedContract.read_as``)
    read_as: list[str] = dataclasses.field(default_factory=list)


def rejudge(source: Path, *, key: SigningKey, trusted: TrustedKeys, out_dir: Path | None = None,
            with_current_defaults: bool = False) -> Rejudged:
    # verified and read from one private copy: a source changed after its check is never judged and signed
    with private_tempdir("campaign-rejudge-") as private:
        copy = private / "bundle"
        with errors_named_as(copy, source):
            copy_bundle(source, copy)
            try:
                verify_bundle(copy, trusted)
            except VerifyError as exc:
                raise InputError(f"{source}: refusing to rejudge a bundle that does not verify: {exc}") from exc
            return _rejudge_verified(copy, source, key=key, out_dir=out_dir, current=with_current_defaults)


def _rejudge_verified(copy: Path, source: Path, *, key: SigningKey, out_dir: Path | None, current: bool) -> Rejudged:
    before = load_json_strict(copy / "SUMMARY.json")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = (out_dir if out_dir is not None else source.resolve().parent) / f"{source.resolve().name}.rejudged-{stamp}"
    if target.exists():
        raise InputError(f"{target}: already exists; rejudge again in a second, or choose --out")
    # built under a hidden name and renamed once signed: a crash leaves no unsigned bundle that looks done
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        with errors_named_as(partial, source):  # judged from copies of the source; errors name the source
            judged = _build(copy, source, partial, before, key, current)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    after = load_json_strict(target / "SUMMARY.json")
    signed = {(c.gate, c.candidate): c.after for c in _compare(before, after)}
    what_if = [VerdictChange(gate=gate, candidate=candidate, before=signed.get((gate, candidate)), after=verdict)
               for (gate, candidate), verdict in judged.other.items()]
    return Rejudged(bundle=target, source=source, verdicts=_compare(before, after), rule_changes=judged.changes,
                    under_current_defaults=what_if, rules=judged.rules, read_as=judged.read_as)


@dataclass(frozen=True)
class _Judged:
    """What ``_build`` signed: which rules, how this tool's defaults differ from the recorded ones, the
    verdicts under whichever rules were not signed (this tool's defaults, or with ``current`` the recorded
    ones) by (gate, candidate), and how older fields were read."""

    rules: str
    changes: list[str]
    other: dict[tuple[str, str], str]
    read_as: list[str]


def _build(copy: Path, source: Path, bundle: Path, before: dict[str, Any], key: SigningKey,
           current: bool) -> _Judged:
    """Judge the copied measurement into ``bundle`` and sign it (what was signed: ``_Judged``)."""
    started = time.time()
    _copy_measurement(copy, bundle)
    freeze_record = load_json_strict(bundle / "contract" / "freeze.json")
    if not isinstance(freeze_record, dict):
        raise InputError(f"{source}: contract/freeze.json is not a freeze record (not a JSON object)")
    as_written = _contract(bundle, freeze_record)
    recorded, where = recorded_rules(bundle / "contract", freeze_record)
    by_recorded = with_rules(as_written, recorded, where) if recorded is not None else as_written
    changes = (tool_default_changes(contract_rules(recorded), contract_rules(effective_contract(as_written)))
               if recorded else [])
    rules = "this tool's defaults" if current and changes else "recorded" if recorded is not None else "recorded none"
    loaded, other_rules = (as_written, by_recorded) if current else (by_recorded, as_written)
    lanes = _lane_outcomes(before)
    other: dict[tuple[str, str], str] = {}
    if changes:  # judged again in a scratch copy by the rules not signed, to say what they would decide
        with private_tempdir("campaign-rejudge-other-") as scratch:
            _copy_measurement(copy, scratch / "b")
            other = {(r.gate, r.candidate): r.verdict.value
                     for r in judge_bundle(other_rules, build_gates(other_rules, scratch / "b"), lanes, scratch / "b")}
    results = judge_bundle(loaded, build_gates(loaded, bundle), lanes, bundle)
    document = read_document(bundle / "contract") or {}
    accepted = list(document.get("accepted_tool_defaults") or [])
    judged = document.get("effective_sha256") or (canonical_sha256(recorded) if recorded is not None else None)
    if current and changes:  # the signed rules are this tool's: its effective contract replaces the recorded one
        accepted += changes
        replaced = effective_document(loaded, __version__, accepted)
        # its lanes were judged as they ran (spec.json): the tool defaults they took are the recorded ones
        replaced["contract"][LANE_TOOL_DEFAULTS] = (recorded or {}).get(LANE_TOOL_DEFAULTS, {})
        replaced["effective_sha256"] = judged = canonical_sha256(replaced["contract"])
        atomic_write_json(bundle / "contract" / EFFECTIVE_FILE, replaced)
    atomic_write_json(bundle / "source.json", source_snapshot())
    window = str(before.get("window") or source.name)
    summary = summarize(loaded, {**freeze_record, "accepted_tool_defaults": accepted, "judged_effective_sha256": judged},
                        window, started, "complete", lanes, results)
    # the measurement's facts are the source window's, not this command's
    summary.update({k: before[k] for k in ("started_at", "ended_at", "duration", "resumed", "restore") if k in before})
    summary["rejudge"] = {"source": {"path": str(source.resolve()), "window": before.get("window"),
                                     "envelope_sha256": sha256_file(copy / ENVELOPE)},
                          "rejudged_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                          "rules": rules, "rules_differ_under_this_tool": changes,
                          "read_as": as_written.read_as}
    atomic_write_json(bundle / "SUMMARY.json", summary)
    sign_bundle(bundle, key, {**predicate(loaded, window), "rejudge_of": summary["rejudge"]["source"]})
    return _Judged(rules=rules, changes=changes, other=other, read_as=as_written.read_as)


def _copy_measurement(copy: Path, bundle: Path) -> None:
    bundle.mkdir(parents=True)
    for name in COPIED:
        if (copy / name).is_dir():
            shutil.copytree(copy / name, bundle / name, symlinks=True, copy_function=shutil.copyfile)


def _contract(bundle: Path, freeze_record: dict[str, Any]) -> LoadedContract:
    """The bundle's contract copy, with each lane as its spec.json recorded it (what ran, not what today's
    code would merge from the contract)."""
    folder = bundle / "contract"
    name = freeze_record.get("contract_file")
    path = folder / str(name) if name else next(iter(sorted(folder.glob("*.y*ml"))), folder / "contract.yaml")
    if not path.is_file():
        raise InputError(f"{path}: the bundle holds no contract copy to judge against")
    loaded = load_contract(path, check_files=False, allow_paths=[], bundle_copy=True)
    lanes: dict[str, EffectiveLane] = {}
    for lane in loaded.lanes:
        spec = bundle / "lanes" / lane / "spec.json"
        if not spec.is_file():
            raise InputError(f"{spec}: missing; a rejudge reads each lane as the window recorded it")
        try:
            lanes[lane] = EffectiveLane.model_validate(load_json_strict(spec))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InputError(f"{spec}: not a lane this version reads: {'.'.join(map(str, first['loc']))}: "
                             f"{first['msg']}") from None
    return dataclasses.replace(loaded, lanes=lanes)


def _lane_outcomes(summary: dict[str, Any]) -> dict[str, LaneOutcome]:
    """How each visit went, as the source window recorded it: a lane that did not launch stays so."""
    out = {}
    for name, lane in (summary.get("lanes") or {}).items():
        boot = lane.get("boot_seconds") or {}
        out[name] = LaneOutcome(status=lane.get("status") or "pending", cause=lane.get("cause"),
                                message=lane.get("message"), boot_seconds=boot.get("value"),
                                engine_version=lane.get("engine_version") or {})
    return out


def _compare(before: dict[str, Any], after: dict[str, Any]) -> list[VerdictChange]:
    def verdicts(summary: dict[str, Any]) -> dict[tuple[str, str], str]:
        return {(gate, candidate): result.get("verdict")
                for candidate, entry in (summary.get("candidates") or {}).items()
                for gate, result in (entry.get("gates") or {}).items()}

    old, new = verdicts(before), verdicts(after)
    return [VerdictChange(gate=gate, candidate=candidate, before=old.get((gate, candidate)), after=verdict)
            for (gate, candidate), verdict in new.items()]
