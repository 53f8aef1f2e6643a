"""Promotion and rollback on a real window's bundle and a real daily llama-server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from campaign.contracts.hashing import canonical_json
from campaign.daily.state import process_start_time
from campaign.receipts.bundle import sign_bundle
from campaign.signing import load_signing_key
from tests.support.cli import campaign
from tests.support.daily import daily_pid, serves

pytestmark = pytest.mark.integration


def _cmdline(pid: int) -> list[str]:
    return [p.decode() for p in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if p]


@pytest.fixture
def window_bundle(daily: dict) -> Path:
    ran = campaign("run", str(daily["contract"]), "--out", str(daily["root"] / "runs"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    bundle = next((daily["root"] / "runs").iterdir())
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    assert summary["candidates"]["spec"]["overall"] == "PASS", summary  # greedy 2/2 self-identical
    return bundle


def test_promote_then_rollback_with_ledger_and_a_promotion_killed_at_each_step(daily: dict,
                                                                             window_bundle: Path) -> None:
    import tempfile

    original = _cmdline(daily_pid(daily["root"]))
    assert "--spec-type" not in original
    copies_before = set(Path(tempfile.gettempdir()).glob("campaign-promote-*"))
    dry = campaign("promote", str(window_bundle), "--dry-run")
    assert dry.returncode == 0 and "would promote spec" in dry.stdout
    assert _cmdline(daily_pid(daily["root"])) == original  # a dry run changes nothing
    promoted = campaign("promote", str(window_bundle))
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    now = _cmdline(daily_pid(daily["root"]))
    measured = json.loads((window_bundle / "lanes" / "spec" / "inspect.json").read_text())["launched_argv"]
    assert now == measured  # byte-identical to the measured lane
    assert serves(daily["port"])
    assert "greedy replies replayed byte-identical" in promoted.stdout
    assert set(Path(tempfile.gettempdir()).glob("campaign-promote-*")) == copies_before  # no copy left behind
    shown = campaign("daily", "show")
    assert shown.returncode == 0 and "--spec-type ngram-simple" in shown.stdout
    # the promoted daily runs the candidate's measured launch, not the one `daily start` started: not stopped
    kept = campaign("daily", "stop", str(daily["contract"]))
    assert kept.returncode == 2 and "add --force" in kept.stderr and serves(daily["port"]), kept.stderr
    rolled = campaign("rollback")
    assert rolled.returncode == 0, rolled.stderr
    assert _cmdline(daily_pid(daily["root"])) == original and serves(daily["port"])
    ledger = json.loads(campaign("ledger", "--json").stdout)
    assert [e["kind"] for e in ledger] == ["promote-begun", "promote", "rollback"]
    assert ledger[1]["begun"] == 1 and ledger[2]["undoes"] == 2 and ledger[1]["rollback"]["argv"] == original
    assert campaign("rollback").returncode == 2  # nothing left to roll back

    # a promotion SIGKILLed at each of its steps (one window's bundle serves them all)
    for point, action in (("promote.begun", "still serving"), ("promote.stopped", "started"),
                          ("promote.swapped", "started")):
        killed = campaign("promote", str(window_bundle), env={"CAMPAIGN_FAULT_KILL_AT": point})
        assert killed.returncode == -9, (point, killed.stdout + killed.stderr)
        begun = json.loads(campaign("ledger", "--json").stdout)[-1]
        assert begun["kind"] == "promote-begun" and begun["candidate"] == "spec", point
        shown = campaign("daily", "show")
        assert f"promotion {begun['seq']} of spec began" in shown.stderr and "never finished" in shown.stderr
        refused = campaign("promote", str(window_bundle))  # not on top of a half-made swap
        assert refused.returncode != 0 and "never finished" in refused.stderr, point
        rolled = campaign("rollback")
        assert rolled.returncode == 0, (point, rolled.stdout + rolled.stderr)
        entry = json.loads(campaign("ledger", "--json").stdout)[-1]
        assert entry["kind"] == "rollback" and entry["undoes"] == begun["seq"] and entry["action"] == action, point
        assert _cmdline(daily_pid(daily["root"])) == original and serves(daily["port"]), point
    assert campaign("rollback").returncode == 2  # every begun promotion is accounted for
    # restored by the window, then by four rollbacks, from snapshots: still the daily `daily start` started
    pid = daily_pid(daily["root"])
    stopped = campaign("daily", "stop", str(daily["contract"]))
    assert stopped.returncode == 0 and f"daily stopped: pid {pid}" in stopped.stdout, stopped.stdout + stopped.stderr
    assert not serves(daily["port"]) and process_start_time(pid) is None  # gone (a zombie here counts as gone)


def _resigned(bundle: Path, tmp: Path, edit) -> Path:  # noqa: ANN001
    """A copy of the bundle changed by ``edit`` and signed again by the trusted key: a bundle that
    verifies, so the refusal must come from its content."""
    copy = tmp / f"edited-{len(list(tmp.iterdir()))}"
    shutil.copytree(bundle, copy)
    (copy / "receipt.dsse.json").unlink()
    edit(copy)
    sign_bundle(copy, load_signing_key(), {"window": "edited"})
    return copy


def _refusal(bundle: Path) -> str:
    refused = campaign("promote", str(bundle), "--dry-run")
    assert refused.returncode == 1
    return refused.stderr


def test_promotion_refusals_each_with_its_reason(daily: dict, window_bundle: Path, tmp_path: Path) -> None:
    def set_gate(verdict: str):
        def edit(copy: Path) -> None:
            path = copy / "gates" / "greedy" / "spec.json"
            result = json.loads(path.read_text())
            result["verdict"], result["reasons"] = verdict, ["edited for the test"]
            path.write_text(json.dumps(result))
        return edit

    assert "gate greedy: FAIL" in _refusal(_resigned(window_bundle, tmp_path, set_gate("FAIL")))
    assert "gate greedy: INCONCLUSIVE" in _refusal(_resigned(window_bundle, tmp_path, set_gate("INCONCLUSIVE")))
    missing = _resigned(window_bundle, tmp_path, lambda c: (c / "gates" / "greedy" / "spec.json").unlink())
    assert "gate greedy: missing from the bundle" in _refusal(missing)

    def unproven(copy: Path) -> None:
        summary = json.loads((copy / "SUMMARY.json").read_text())
        summary["restore"]["proved"] = False
        (copy / "SUMMARY.json").write_text(json.dumps(summary))
    assert "did not prove the incumbent restored" in _refusal(_resigned(window_bundle, tmp_path, unproven))

    def frozen_late(copy: Path) -> None:
        record = json.loads((copy / "contract" / "freeze.json").read_text())
        record.pop("signature")
        record["frozen_at"] = "2999-01-01T00:00:00Z"
        key = load_signing_key()
        record["signature"] = {"keyid": key.keyid, "sig": key.sign(canonical_json(record))}
        (copy / "contract" / "freeze.json").write_text(json.dumps(record))
    assert "after the window began" in _refusal(_resigned(window_bundle, tmp_path, frozen_late))

    tampered = tmp_path / "tampered"
    shutil.copytree(window_bundle, tampered)
    (tampered / "SUMMARY.json").write_text((tampered / "SUMMARY.json").read_text().replace("PASS", "PASS "))
    assert "bundle does not verify: SUMMARY.json: sha256 does not match" in _refusal(tampered)


def test_untrusted_signer_is_refused(daily: dict, window_bundle: Path, monkeypatch: pytest.MonkeyPatch,
                                     tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "stranger"))
    assert campaign("keys", "init").returncode == 0
    assert "no valid signature by a trusted key" in _refusal(window_bundle)
