"""Promotion and rollback, reading only verified receipts.

``decide`` copies the bundle to a private directory, verifies that copy (so nothing can change between
the check and the use), and refuses, each time with its reason: an untrusted or tampered bundle, an
incomplete window, a contract frozen after the window began or not matching its freeze record, a
restore that was not proven, or a required gate that is not PASS (FAIL, INCONCLUSIVE or missing).
``promote`` then swaps the daily: the current one is snapshotted and kept for rollback, the candidate
starts with the arguments it was measured with, byte for byte, and must pass the smoke check (the
proof completion, then its measured greedy replies replayed byte-identically); a failed smoke rolls
back automatically.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from campaign.contracts.freeze import FREEZE_SCHEMA
from campaign.contracts.hashing import canonical_json, sha256_file
from campaign.contracts.load import load_contract
from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.secretrefs import REF
from campaign.errors import InputError, RunError, VerifyError
from campaign.fsutil import load_json_strict, read_jsonl
from campaign.gates.records import greedy_replays
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.runtimes.process import BASE_ENV_KEYS
from campaign.lanes.session import resolve_refs
from campaign.receipts.bundle import ENVELOPE, verify_bundle
from campaign.signing import SigningKey, TrustedKeys
from campaign.window import incumbent
from campaign.window.ledger import Ledger, shown_argv

__all__ = ["Decision", "decide", "promote", "rollback"]


@dataclass
class Decision:
    bundle: Path
    candidate: str | None
    refusals: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.refusals


def decide(bundle: Path, trusted: TrustedKeys, candidate: str | None, private: Path) -> tuple[Decision, Path]:
    """The decision, and the private verified copy (under ``private``) everything later is read from."""
    copy = private / "bundle"
    try:
        shutil.copytree(bundle, copy, symlinks=True)
    except OSError as exc:
        raise InputError(f"{bundle}: cannot copy the bundle: {exc}") from exc
    decision = Decision(bundle=bundle, candidate=candidate)
    try:
        verified = verify_bundle(copy, trusted)
    except VerifyError as exc:
        decision.refusals.append(f"bundle does not verify: {exc}")
        return decision, copy
    decision.facts["signed_by"] = verified.keyid
    summary = load_json_strict(copy / "SUMMARY.json")
    if summary.get("status") != "complete":
        decision.refusals.append(f"the window did not complete (status {summary.get('status')})")
    _check_freeze(copy, summary, trusted, decision)
    candidates = list((summary.get("candidates") or {}))
    if candidate is None:
        if len(candidates) != 1:
            decision.refusals.append(f"name the candidate to promote (--candidate): {', '.join(candidates) or 'none'}")
            return decision, copy
        candidate = decision.candidate = candidates[0]
    if candidate not in candidates:
        decision.refusals.append(f"no candidate {candidate!r} in this bundle ({', '.join(candidates)})")
        return decision, copy
    restore = summary.get("restore") or {}
    if not restore.get("incumbent"):
        decision.refusals.append("the contract declares no incumbent: there is no daily to swap")
    elif restore.get("proved") is not True:
        decision.refusals.append(f"the window did not prove the incumbent restored ({restore.get('error') or 'no proof'})")
    loaded = load_contract(next(p for p in (copy / "contract").iterdir() if p.suffix in (".yaml", ".yml")),
                           check_files=False)
    required = loaded.contract.promotion.requires if loaded.contract.promotion else []
    if not required:
        decision.refusals.append("the contract has no promotion rule naming the gates that must pass")
    for gate in required:
        path = copy / "gates" / gate / f"{candidate}.json"
        if not path.exists():
            decision.refusals.append(f"gate {gate}: missing from the bundle")
            continue
        result = load_json_strict(path)
        if result.get("verdict") != "PASS":
            decision.refusals.append(f"gate {gate}: {result.get('verdict')} ({'; '.join(result.get('reasons', [])[:2])})")
    decision.facts.update(window=summary.get("window"), contract=loaded.contract.contract,
                          daily_name=loaded.contract.promotion.daily_name if loaded.contract.promotion else None,
                          required=required)
    return decision, copy


def _check_freeze(copy: Path, summary: dict[str, Any], trusted: TrustedKeys, decision: Decision) -> None:
    record = load_json_strict(copy / "contract" / "freeze.json")
    signature = record.get("signature") or {}
    body = {k: v for k, v in record.items() if k != "signature"}
    if record.get("schema") != FREEZE_SCHEMA or not trusted.verify(str(signature.get("keyid")),
                                                                   str(signature.get("sig")), canonical_json(body)):
        decision.refusals.append("the freeze record is not signed by a trusted key")
    contract_file = copy / "contract" / str(record.get("contract_file"))
    if not contract_file.is_file() or sha256_file(contract_file) != record.get("contract_sha256"):
        decision.refusals.append("the bundle's contract does not match its freeze record")
    if record.get("canonical_sha256") != (summary.get("contract") or {}).get("canonical_sha256"):
        decision.refusals.append("the window ran a different contract than the freeze record holds")
    frozen_at, started_at = str(record.get("frozen_at")), str(summary.get("started_at"))
    if not frozen_at or frozen_at > started_at:  # both ISO-8601 UTC, so text order is time order
        decision.refusals.append(f"the contract was frozen at {frozen_at}, after the window began at {started_at}: "
                                 "rules must be fixed before scoring")


def _candidate_launch(copy: Path, candidate: str, daily: dict[str, Any]) -> dict[str, Any]:
    """The candidate exactly as measured: its launched argv, its declared env on the same base."""
    inspect = load_json_strict(copy / "lanes" / candidate / "inspect.json")
    spec = load_json_strict(copy / "lanes" / candidate / "spec.json")
    argv = _unredacted_argv(inspect["launched_argv"], EffectiveLane.model_validate(spec), candidate)
    if sha256_file(Path(argv[0])) != inspect.get("executable_sha256"):
        raise RunError(f"{argv[0]} changed since the window measured it; refusing to promote a different binary")
    # the declared env, its ${env:NAME} references resolved now, as every launch resolves them
    lane = resolve_refs(EffectiveLane.model_validate(spec))
    env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ} | dict(lane.env)
    return {"runtime": "process", "argv": argv, "env": env, "cwd": os.getcwd(), "exe": argv[0],
            "exe_sha256": inspect["executable_sha256"], "pidfile": daily["pidfile"],
            "cpus": inspect.get("launched_cpus"),  # pinned as measured (None: as it was, unpinned)
            **{k: daily.get(k) for k in incumbent.SETTINGS}}


def _unredacted_argv(launched: list[str], lane: EffectiveLane, candidate: str) -> list[str]:
    """The measured command line with each redacted credential put back from the lane's own
    ``${env:NAME}`` reference (resolved now). Redaction is token for token, so the lane's command built
    again lines up with it; a credential the contract wrote literally is not recoverable, and refused."""
    template = [launched[0], *adapter_for(lane.engine).server_args(lane, "<model>")]
    if len(template) != len(launched):
        raise RunError(f"lane {candidate}: its measured command line does not line up with its spec; "
                       "refusing to promote a command that cannot be rebuilt exactly")
    argv = []
    for measured, written in zip(launched, template):
        if "<redacted" in measured:
            if not REF.search(written):
                raise RunError(f"lane {candidate}: a credential in its command line was written literally and "
                               "is redacted in the bundle; use ${env:NAME} for it")
            argv.append(resolve_refs(lane.model_copy(update={"args": [written], "env": {}})).args[0])
        else:
            argv.append(measured)
    return argv


def _smoke(copy: Path, candidate: str, launch: dict[str, Any]) -> dict[str, Any]:
    """Proof completion, then the candidate's measured greedy replies must come back byte-identical."""
    proof = incumbent.prove(launch)
    replayed, mismatches = 0, []
    for raw in sorted((copy / "raw").glob(f"*/{candidate}.jsonl")):
        for replay in greedy_replays(read_jsonl(raw), limit=4):
            with httpx.Client(base_url=launch["endpoint"], timeout=120.0) as client:
                response = client.post(replay.path, json=replay.request).json()
            replayed += 1
            if response["choices"][0]["message"]["content"] != replay.reply:
                mismatches.append(replay.prompt)
    return {"proof": proof, "greedy_replayed": replayed, "greedy_mismatches": mismatches,
            "ok": not mismatches}


def promote(bundle: Path, *, key: SigningKey, trusted: TrustedKeys, candidate: str | None = None,
            dry_run: bool = False, ledger: Ledger | None = None) -> tuple[Decision, list[str], dict[str, Any] | None]:
    # the private copy is removed whatever happens: a promotion reads it, nothing keeps it
    with tempfile.TemporaryDirectory(prefix="campaign-promote-") as private:
        return _promote(bundle, Path(private), key=key, trusted=trusted, candidate=candidate, dry_run=dry_run,
                        ledger=ledger)


def _promote(bundle: Path, private: Path, *, key: SigningKey, trusted: TrustedKeys, candidate: str | None,
             dry_run: bool, ledger: Ledger | None) -> tuple[Decision, list[str], dict[str, Any] | None]:
    decision, copy = decide(bundle, trusted, candidate, private)
    if not decision.ok:
        return decision, [], None
    cand = decision.candidate or ""
    settings = load_json_strict(copy / "incumbent" / "snapshot.json")
    container = settings.get("runtime") == "docker"
    where = f"container {settings.get('container')}" if container else f"{settings.get('pidfile')}"
    steps = [f"snapshot the daily ({where}) and keep it for rollback"
             + (" (stopped, renamed <name>-rollback-<time>)" if container else ""),
             f"stop it, start {cand} as the daily with its measured "
             + ("container (image id and command byte-identical)" if container else "arguments"),
             "smoke: proof completion and its measured greedy replies, byte-identical",
             "record the promotion in the ledger (a failed smoke rolls back automatically)"]
    if dry_run:
        return decision, steps, None
    ledger = ledger or Ledger()
    swap = _swap_container if container else _swap_process
    previous, launch, fields = swap(copy, cand, settings, ledger, decision.facts.get("window"))
    try:
        smoke = _smoke(copy, cand, launch)
    except (RunError, httpx.HTTPError, KeyError, ValueError) as exc:
        smoke = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    fields.update({"bundle": str(bundle.resolve()), "receipt_sha256": sha256_file(copy / ENVELOPE),
                   "window": decision.facts.get("window"), "contract": decision.facts.get("contract"),
                   "candidate": cand, "daily_name": decision.facts.get("daily_name") or cand,
                   "endpoint": launch["endpoint"], "smoke": smoke})
    entry = ledger.append(key, "promote", fields, rollback_launch=previous)
    if not smoke["ok"]:
        rollback(key=key, ledger=ledger, reason=f"smoke failed after promotion {entry['seq']}")
        decision.refusals.append(f"smoke failed ({smoke.get('error') or smoke.get('greedy_mismatches')}); "
                                 "rolled back to the previous daily")
    return decision, steps, entry


def _swap_process(copy: Path, cand: str, settings: dict[str, Any], ledger: Ledger,
                  window: str | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    pidfile = Path(settings["pidfile"])
    previous = incumbent.snapshot_pidfile(pidfile, {k: settings.get(k) for k in incumbent.SETTINGS})
    launch = _candidate_launch(copy, cand, previous)
    incumbent.stop(previous)
    incumbent.start(launch, ledger.path.parent / "daily.log")
    return previous, launch, {
        "daily": {"argv": shown_argv(launch["argv"], launch["env"]),
                  "declared_env": load_json_strict(copy / "lanes" / cand / "spec.json").get("env", {}),
                  "exe_sha256": launch["exe_sha256"]},
        "pidfile": str(pidfile)}


def _swap_container(copy: Path, cand: str, settings: dict[str, Any], ledger: Ledger,
                    window: str | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    from campaign.window import dailycontainer, promotecontainer

    previous = dailycontainer.snapshot(settings["container"], settings.get("docker_host"),
                                       {k: settings.get(k) for k in incumbent.SETTINGS})
    create = promotecontainer.candidate_container(copy, cand, previous, window)
    launch, kept_as = promotecontainer.swap_in(previous, create)
    previous = {**previous, "container": kept_as}  # where the rollback finds it
    return previous, launch, {
        "daily": {"container": launch["container"], "container_id": launch["container_id"],
                  "image_id": launch["image_id"], "argv": shown_argv(launch["argv"], launch["env"]),
                  "declared_env": load_json_strict(copy / "lanes" / cand / "spec.json").get("env", {})},
        "previous": {"container": kept_as, "container_id": previous["container_id"],
                     "image_id": previous["image_id"]},
        "container": launch["container"]}


def rollback(*, key: SigningKey, ledger: Ledger | None = None, reason: str = "manual") -> dict[str, Any]:
    ledger = ledger or Ledger()
    entries = ledger.entries()
    undone = {e.get("undoes") for e in entries if e["kind"] == "rollback"}
    target = next((e for e in reversed(entries) if e["kind"] == "promote" and e["seq"] not in undone), None)
    if target is None:
        raise InputError(f"{ledger.path}: no promotion left to roll back")
    previous = ledger.rollback_launch(target["seq"])
    if previous.get("runtime") == "docker":
        fields = _roll_back_container(target, previous)
    else:
        current = incumbent.snapshot_pidfile(Path(target["pidfile"]),
                                             {k: previous.get(k) for k in incumbent.SETTINGS})
        incumbent.stop(current)
        incumbent.start(previous, ledger.path.parent / "daily.log")
        fields = {"pidfile": target["pidfile"], "proof": incumbent.prove(previous),
                  "daily": {"argv": shown_argv(previous["argv"], previous.get("env") or {}),
                            "exe_sha256": previous["exe_sha256"]}}
    return ledger.append(key, "rollback", {"undoes": target["seq"], "reason": reason,
                                           "endpoint": previous["endpoint"], **fields})


def _roll_back_container(target: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    from campaign.window import dailycontainer, promotecontainer

    name = target["container"]
    current = dailycontainer.snapshot(name, previous.get("docker_host"),
                                      {k: previous.get(k) for k in incumbent.SETTINGS}, running=False)
    kept_as = promotecontainer.swap_back(current, previous, undone=target["seq"])
    restored = {**previous, "container": name}
    return {"container": name, "proof": incumbent.prove(restored),
            "daily": {"container": name, "container_id": previous["container_id"], "image_id": previous["image_id"],
                      "argv": shown_argv(previous["argv"], previous.get("env") or {})},
            "undone_kept_as": {"container": kept_as, "container_id": current["container_id"]}}
