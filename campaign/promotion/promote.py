"""Promotion and rollback, reading only verified receipts.

``decide`` copies the bundle to a private directory, verifies that copy (so nothing can change between
the check and the use), and refuses, each time with its reason: an untrusted or tampered bundle, an
incomplete window, a contract frozen after the window began or not matching its freeze record, a
restore that was not proven, or a required gate that is not PASS (FAIL, INCONCLUSIVE or missing).
``promote`` then swaps the daily, behind a ``promote-begun`` ledger entry written before anything is
touched (a promotion interrupted at any step is put back by ``rollback``): the current one is snapshotted
and kept for rollback, the candidate
starts with the arguments it was measured with, byte for byte, and must pass the smoke check (the
proof completion, then its measured greedy replies replayed byte-identically: ``candidate``); a failed
smoke rolls back automatically.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from campaign.contracts.effective import recorded_rules, with_rules
from campaign.contracts.freeze import FREEZE_SCHEMA
from campaign.contracts.hashing import canonical_json, sha256_file
from campaign.contracts.load import load_contract
from campaign.daily import incumbent
from campaign.daily.launchrefs import to_references
from campaign.daily.ledger import Ledger, shown_argv
from campaign.errors import CampaignError, InputError, PreflightError, RunError, VerifyError
from campaign.faults import crash_point
from campaign.fsutil import load_json_strict, private_tempdir
from campaign.promotion.candidate import candidate_launch, smoke_candidate
from campaign.promotion.identity import KEPT, promoted_daily_summary
from campaign.receipts.bundle import ENVELOPE, copy_bundle, errors_named_as, verify_bundle
from campaign.receipts.decision import headline, suspicion
from campaign.receipts.shapes import checked_gate, checked_summary
from campaign.signing import SigningKey, TrustedKeys

__all__ = ["Decision", "decide", "promote", "promoted_daily_summary", "rollback"]


@dataclass
class Decision:
    bundle: Path
    candidate: str | None
    refusals: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    # a refused gate's full reasoning (its reasons), behind `campaign promote --explain`: a refusal is a headline
    explained: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.refusals


def decide(bundle: Path, trusted: TrustedKeys, candidate: str | None, private: Path) -> tuple[Decision, Path]:
    """The decision, and the private verified copy (under ``private``) everything later is read from."""
    copy = private / "bundle"
    decision = Decision(bundle=bundle, candidate=candidate)
    try:
        # walked with the verifier's bounds, then copied file by file; errors name the user's folder
        with errors_named_as(copy, bundle):
            copy_bundle(bundle, copy)
            verified = verify_bundle(copy, trusted)
    except OSError as exc:
        raise InputError(f"{bundle}: cannot copy the bundle: {exc.strerror or exc}") from exc
    except VerifyError as exc:
        decision.refusals.append(f"bundle does not verify: {exc}")
        return decision, copy
    decision.facts["signed_by"] = verified.keyid
    with errors_named_as(copy, bundle):
        return _decide_verified(copy, trusted, candidate, decision)


def _decide_verified(copy: Path, trusted: TrustedKeys, candidate: str | None,
                     decision: Decision) -> tuple[Decision, Path]:
    # validly signed is not the same as the shape this version reads: a hand-made or other-version bundle
    # is one line naming its file and field
    summary = checked_summary(load_json_strict(copy / "SUMMARY.json"), copy / "SUMMARY.json")
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
    contracts = sorted(p for p in (copy / "contract").glob("*") if p.suffix in (".yaml", ".yml"))
    if not contracts:
        raise InputError(f"{copy / 'contract'}: the bundle holds no contract copy")
    loaded = load_contract(contracts[0], check_files=False, bundle_copy=True)
    # the promotion rule the window was judged by, whatever this tool's defaults now say
    record = load_json_strict(copy / "contract" / "freeze.json")
    rules, where = recorded_rules(copy / "contract", record if isinstance(record, dict) else {})
    if rules is not None:
        loaded = with_rules(loaded, rules, where)
    lane = loaded.lanes.get(candidate)
    if lane is not None and lane.aa:
        decision.refusals.append(f"{candidate} is an A/A lane (the control again): it checks the window's "
                                 "instruments and is never promoted")
    if suspect := suspicion(summary):
        decision.refusals.append(f"{suspect}: this window's decisions are suspect")
    required = loaded.contract.promotion.requires if loaded.contract.promotion else []
    if not required:
        decision.refusals.append("the contract has no promotion rule naming the gates that must pass")
    for gate in required:
        path = copy / "gates" / gate / f"{candidate}.json"
        if not path.exists():
            decision.refusals.append(f"gate {gate}: missing from the bundle")
            continue
        result = checked_gate(load_json_strict(path), path)
        if result.get("verdict") != "PASS":
            decision.refusals.append(f"gate {gate}: {headline(result)}")
            decision.explained[gate] = [str(reason) for reason in result.get("reasons") or []]
    decision.facts.update(window=summary.get("window"), contract=loaded.contract.contract,
                          daily_name=loaded.contract.promotion.daily_name if loaded.contract.promotion else None,
                          required=required)
    return decision, copy


def _check_freeze(copy: Path, summary: dict[str, Any], trusted: TrustedKeys, decision: Decision) -> None:
    record = load_json_strict(copy / "contract" / "freeze.json")
    if not isinstance(record, dict) or not isinstance(record.get("signature") or {}, dict):
        decision.refusals.append("the freeze record is not a signed record this version reads")
        return
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


def promote(bundle: Path, *, key: SigningKey | None, trusted: TrustedKeys, candidate: str | None = None,
            dry_run: bool = False, ledger: Ledger | None = None) -> tuple[Decision, list[str], dict[str, Any] | None]:
    # the private copy is removed whatever happens: a promotion reads it, nothing keeps it
    with private_tempdir("campaign-promote-") as private, \
            errors_named_as(private / "bundle", bundle):  # the copy is gone when the error is read
        return _promote(bundle, private, key=key, trusted=trusted, candidate=candidate, dry_run=dry_run,
                        ledger=ledger)


def _promote(bundle: Path, private: Path, *, key: SigningKey | None, trusted: TrustedKeys, candidate: str | None,
             dry_run: bool, ledger: Ledger | None) -> tuple[Decision, list[str], dict[str, Any] | None]:
    decision, copy = decide(bundle, trusted, candidate, private)
    if not decision.ok:
        return decision, [], None
    cand = decision.candidate or ""
    # every check the promotion makes runs before anything is touched, and a dry run stops only after them
    # all, so it never says "would promote" where the promotion refuses
    ledger = ledger or Ledger()
    unfinished = unfinished_promotion(ledger.entries())
    if unfinished is not None:
        raise RunError(f"promotion {unfinished['seq']} ({unfinished.get('candidate')}, begun {unfinished['at']}) never "
                       "finished: the daily may be half swapped; `campaign rollback` puts the previous daily back first")
    settings = load_json_strict(copy / "incumbent" / "snapshot.json")
    container = settings.get("runtime") == "docker"
    previous = _daily_snapshot(settings)
    to_references(previous)  # a credential of the daily no variable holds: refused now, not at the ledger
    made = (_container_daily(copy, cand, previous, decision.facts.get("window")) if container
            else candidate_launch(copy, cand, previous))
    steps = _steps(cand, previous, made, container)
    if dry_run:
        return decision, steps, None
    if key is None:  # only a dry run goes without the signing key (a check, not an assert: -O keeps it)
        raise InputError("promote needs the signing key to record the promotion (only --dry-run goes without)")
    # written before anything is touched: an interrupt from here to the promotion's own entry leaves a
    # record `campaign rollback` can undo from (the previous daily's launch is kept with it)
    begun = ledger.append(key, "promote-begun", {
        "candidate": cand, "bundle": str(bundle.resolve()), "window": decision.facts.get("window"),
        **({"container": settings["container"]} if container else {"pidfile": settings["pidfile"]})},
        rollback_launch=previous)
    crash_point("promote.begun")
    swap = _swap_container if container else _swap_process
    try:
        previous, launch, fields = swap(copy, cand, previous, made, ledger)
    except BaseException as exc:  # top level of a promotion: recorded as promote-failed, or raised
        # the swap puts the previous daily back before it raises; only a daily seen serving again closes
        # the promotion, otherwise it stays begun and `campaign rollback` finishes the job
        if _serving(previous):
            ledger.append(key, "promote-failed", {"begun": begun["seq"], "candidate": cand,
                                                   "error": f"{type(exc).__name__}: {exc}"})
        elif isinstance(exc, Exception):
            raise RunError(f"promotion {begun['seq']} failed ({exc}) and the previous daily is not serving: "
                           "`campaign rollback` puts it back") from exc
        raise
    crash_point("promote.swapped")
    return decision, steps, _finish(bundle, copy, cand, decision, (previous, launch, fields, begun), key, ledger)


def _finish(bundle: Path, copy: Path, cand: str, decision: Decision, swapped: tuple[Any, ...], key: SigningKey,
            ledger: Ledger) -> dict[str, Any]:
    """The smoke, the promotion's ledger entry, and the automatic rollback of a failed smoke."""
    previous, launch, fields, begun = swapped
    try:
        smoke = smoke_candidate(copy, cand, launch)
    except (RunError, httpx.HTTPError, KeyError, ValueError) as exc:
        smoke = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    fields.update({"begun": begun["seq"], "bundle": str(bundle.resolve()), "receipt_sha256": sha256_file(copy / ENVELOPE),
                   "window": decision.facts.get("window"), "contract": decision.facts.get("contract"),
                   "candidate": cand, "daily_name": decision.facts.get("daily_name") or cand,
                   "endpoint": launch["endpoint"], "smoke": smoke})
    entry = ledger.append(key, "promote", fields, rollback_launch=previous)
    if not smoke["ok"]:
        rollback(key=key, ledger=ledger, reason=f"smoke failed after promotion {entry['seq']}")
        decision.refusals.append(f"smoke failed ({smoke.get('error') or smoke.get('greedy_mismatches')}); "
                                 "rolled back to the previous daily")
    return entry


def _steps(cand: str, previous: dict[str, Any], made: dict[str, Any], container: bool) -> list[str]:
    where = f"container {previous['container']}" if container else previous["pidfile"]
    if container:
        config = made["config"]
        command = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    else:
        command, env = made["argv"], made["env"]
    return [f"snapshot the daily ({where}) and keep it for rollback"
            + (" (stopped, renamed <name>-rollback-<time>)" if container else ""),
            f"stop it, start {cand} as the daily with its measured "
            + ("container (image id, command, env and mounts)" if container else "arguments")
            + f", under the daily's {', '.join(KEPT)}, answering at {previous['endpoint']}",
            f"the new daily's command: {' '.join(shown_argv(command, env))}",
            "smoke: proof completion and its measured greedy replies, byte-identical",
            "record the promotion in the ledger (a failed smoke rolls back automatically)"]


def _serving(daily: dict[str, Any]) -> bool:
    try:
        return incumbent.is_serving(daily)
    except CampaignError:  # an engine that does not answer (a DockerError) cannot say it serves: not proven
        return False


def unfinished_promotion(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A promotion that began and has neither its own entry, a failure, nor a rollback: interrupted."""
    ended = {e.get("begun") for e in entries if e["kind"] in ("promote", "promote-failed")}
    ended |= {e.get("undoes") for e in entries if e["kind"] == "rollback"}
    return next((e for e in reversed(entries) if e["kind"] == "promote-begun" and e["seq"] not in ended), None)


def _daily_snapshot(settings: dict[str, Any]) -> dict[str, Any]:
    wanted = {k: settings.get(k) for k in incumbent.SETTINGS}
    if settings.get("runtime") == "docker":
        from campaign.daily import dailycontainer

        return dailycontainer.snapshot(settings["container"], settings.get("docker_host"), wanted)
    return incumbent.snapshot_pidfile(Path(settings["pidfile"]), wanted)


def _swap_process(copy: Path, cand: str, previous: dict[str, Any], launch: dict[str, Any],
                  ledger: Ledger) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    log = ledger.path.parent / "daily.log"
    try:
        incumbent.stop(previous)
        crash_point("promote.stopped")
        incumbent.start(launch, log)
    except BaseException as exc:  # top level of a swap: an interrupt or a failed start; the previous daily
        # serves again first, then the error goes on
        started = incumbent.running_pid(launch)
        if started is not None:
            incumbent.stop(launch)
        if not incumbent.is_serving(previous):
            incumbent.start(previous, log)
        if isinstance(exc, Exception):
            raise RunError(f"the candidate did not start as the daily ({exc}); the previous daily was started "
                           "again") from exc
        raise
    return previous, launch, {
        "daily": {"argv": shown_argv(launch["argv"], launch["env"]),
                  "declared_env": load_json_strict(copy / "lanes" / cand / "spec.json").get("env", {}),
                  "exe_sha256": launch["exe_sha256"]},
        "pidfile": previous["pidfile"]}


def _container_daily(copy: Path, cand: str, previous: dict[str, Any], window: str | None) -> dict[str, Any]:
    from campaign.promotion import promotecontainer

    return promotecontainer.candidate_container(copy, cand, previous, window)


def _swap_container(copy: Path, cand: str, previous: dict[str, Any], create: dict[str, Any],
                    ledger: Ledger) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    from campaign.promotion import promotecontainer

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
    """Undo the last promotion not undone yet, or put back the daily of one that was interrupted (begun, never
    finished): whatever state the swap was left in, the previous daily serves again, with proof."""
    ledger = ledger or Ledger()
    entries = ledger.entries()
    undone = {e.get("undoes") for e in entries if e["kind"] == "rollback"}
    targets = [e for e in entries if e["kind"] == "promote" and e["seq"] not in undone]
    unfinished = unfinished_promotion(entries)
    if unfinished is not None:
        targets.append(unfinished)
    if not targets:
        raise InputError(f"{ledger.path}: no promotion left to roll back")
    target = max(targets, key=lambda e: e["seq"])
    previous = ledger.rollback_launch(target["seq"])
    if previous.get("runtime") == "docker":
        fields = _roll_back_container(target, previous)
    else:
        fields = _roll_back_process(target, previous, ledger)
    return ledger.append(key, "rollback", {"undoes": target["seq"], "reason": reason,
                                           "endpoint": previous["endpoint"], **fields})


def _roll_back_process(target: dict[str, Any], previous: dict[str, Any], ledger: Ledger) -> dict[str, Any]:
    try:
        current = incumbent.snapshot_pidfile(Path(target["pidfile"]),
                                             {k: previous.get(k) for k in incumbent.SETTINGS})
    except PreflightError:
        current = None  # a promotion interrupted between the daily's stop and the candidate's start
    if current is not None and (current["pid"], current["start_time"]) == (previous["pid"], previous["start_time"]):
        action = "still serving"  # a promotion interrupted before it stopped the daily
    else:
        if current is not None:
            incumbent.stop(current)
        incumbent.start(previous, ledger.path.parent / "daily.log")
        action = "started"
    return {"pidfile": target["pidfile"], "action": action, "proof": incumbent.prove(previous),
            "daily": {"argv": shown_argv(previous["argv"], previous.get("env") or {}),
                      "exe_sha256": previous["exe_sha256"]}}


def _roll_back_container(target: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    from campaign.daily import dailycontainer
    from campaign.promotion import promotecontainer

    name = target["container"]
    under_name = dailycontainer.container_id(previous.get("docker_host"), name)
    undone_kept_as = None
    if under_name is None or under_name == previous["container_id"]:
        # a promotion interrupted before the candidate's container took the daily's name
        restored_id, action = promotecontainer.put_back(previous, name)
    else:
        current = dailycontainer.snapshot(name, previous.get("docker_host"),
                                          {k: previous.get(k) for k in incumbent.SETTINGS}, running=False)
        kept_as, restored_id, action = promotecontainer.swap_back(current, previous, undone=target["seq"])
        undone_kept_as = {"container": kept_as, "container_id": current["container_id"]}
    restored = {**previous, "container": name}
    return {"container": name, "action": action, "proof": incumbent.prove(restored),
            "daily": {"container": name, "container_id": restored_id, "image_id": previous["image_id"],
                      "argv": shown_argv(previous["argv"], previous.get("env") or {})},
            **({"undone_kept_as": undone_kept_as} if undone_kept_as else {})}
