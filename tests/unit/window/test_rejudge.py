"""`campaign rejudge` reads only a verified bundle and writes a new signed one.

Engine-backed rejudging (same verdicts, "no verdict changed") is in tests/integration/window/test_window.py.
Here the bundles are hand-made: a verdict that changes needs an older judge's verdict beside today's
records, which no engine produces on demand, so the source's verdict is set by hand before signing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from campaign.errors import InputError
from campaign.fsutil import atomic_write_json, load_json_strict
from campaign.receipts.bundle import sign_bundle, verify_bundle
from campaign.signing import init_keys, load_signing_key, load_trusted
from campaign.window.judge import LaneOutcome, build_gates, judge_bundle, predicate, summarize
from campaign.window.rejudge import rejudge
from tests.support.cli import campaign
from tests.support.judging import signed_window, unjudged_bundle


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_tampered_bundle_is_refused_in_one_line(bundle: Path, tmp_path: Path) -> None:
    summary = bundle / "SUMMARY.json"
    data = bytearray(summary.read_bytes())
    data[len(data) // 2] ^= 0x01
    summary.write_bytes(bytes(data))
    refused = campaign("rejudge", str(bundle), "--out", str(tmp_path / "out"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert "does not verify" in refused.stderr and "SUMMARY.json: sha256 does not match" in refused.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_an_unsigned_folder_is_refused(tmp_path: Path) -> None:
    init_keys()
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "SUMMARY.json").write_text("{}")
    with pytest.raises(InputError, match="does not verify: .*no receipt.dsse.json"):
        rejudge(tmp_path / "half", key=load_signing_key(), trusted=load_trusted())


def test_a_changed_verdict_is_reported_and_the_new_bundle_names_its_source(tmp_path: Path) -> None:
    source = signed_window(tmp_path, old_verdict="FAIL")
    before = _tree(source)
    done = campaign("rejudge", str(source), "--out", str(tmp_path / "rejudged"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "greedy/spec: PASS  changed: FAIL -> PASS" in done.stdout
    assert "no verdict changed" not in done.stdout
    assert _tree(source) == before  # the source is only read
    (new,) = (tmp_path / "rejudged").iterdir()
    assert new.name.startswith(f"{source.name}.rejudged-") and new.name.endswith("Z")
    assert f"bundle: {new}" in done.stdout
    assert verify_bundle(new, load_trusted()).files > 0
    summary = load_json_strict(new / "SUMMARY.json")
    assert summary["rejudge"]["source"] == {
        "path": str(source.resolve()), "window": source.name,
        "envelope_sha256": hashlib.sha256((source / "receipt.dsse.json").read_bytes()).hexdigest()}
    assert summary["candidates"]["spec"]["gates"]["greedy"]["verdict"] == "PASS"
    assert summary["lanes"]["base"]["boot_seconds"] == {"value": 1.25, "unit": "s"}
    assert load_json_strict(new / "gates" / "greedy" / "spec.json")["verdict"] == "PASS"
    # what judges read came along, byte for byte; what the window alone wrote did not
    for name in ("contract/c.yaml", "contract/freeze.json", "contract/inputs/p.jsonl", "raw/greedy/spec.jsonl",
                 "lanes/spec/spec.json", "lanes/spec/inspect.json",
                 "incumbent/snapshot.json"):  # promotion reads the daily's snapshot
        assert (new / name).read_bytes() == (source / name).read_bytes(), name
    assert not (new / "journal.jsonl").exists() and (new / "source.json").is_file()
    envelope = json.loads((new / "receipt.dsse.json").read_text())
    assert envelope["signatures"][0]["keyid"] == load_signing_key().keyid


def test_rejudging_with_the_same_code_changes_nothing(tmp_path: Path) -> None:
    source = signed_window(tmp_path)
    done = campaign("rejudge", str(source))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "greedy/spec: PASS" in done.stdout and "changed:" not in done.stdout
    assert done.stdout.count("no verdict changed") == 1
    (new,) = [p for p in source.parent.iterdir() if ".rejudged-" in p.name]  # next to the source by default
    # a rejudge is itself a bundle that can be rejudged
    again = rejudge(new, key=load_signing_key(), trusted=load_trusted(), out_dir=tmp_path / "again")
    assert [(v.gate, v.candidate, v.before, v.after, v.changed) for v in again.verdicts] == [
        ("greedy", "spec", "PASS", "PASS", False)]
    assert load_json_strict(again.bundle / "SUMMARY.json")["rejudge"]["source"]["path"] == str(new.resolve())


def test_a_bundle_without_lane_specs_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    source = signed_window(tmp_path)
    broken = tmp_path / "copy" / source.name
    shutil.copytree(source, broken)
    (broken / "lanes" / "base" / "spec.json").unlink()
    (broken / "receipt.dsse.json").unlink()
    sign_bundle(broken, load_signing_key(), {"window": source.name})
    with pytest.raises(InputError, match="lanes/base/spec.json: missing"):
        rejudge(broken, key=load_signing_key(), trusted=load_trusted(), out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _window_whose_lanes_differ(tmp_path: Path) -> Path:
    """A signed window judged by its frozen rules, in which the candidate's replies differ from the control's:
    no rule on cross-identity was written, so under the frozen default (none) greedy passes."""
    from campaign.fsutil import JsonlAppender

    bundle, loaded = unjudged_bundle(tmp_path)
    (bundle / "raw" / "greedy" / "spec.jsonl").unlink()
    with JsonlAppender(bundle / "raw" / "greedy" / "spec.jsonl") as sink:
        for repeat in range(2):
            for pid in ("capital", "haiku", "fib"):
                sink.append({"tags": {"prompt": pid, "repeat": repeat}, "status": 200, "request": {"temperature": 0},
                             "response": {"choices": [{"message": {"content": f"another {pid}"}, "finish_reason": "stop"}],
                                          "usage": {"completion_tokens": 5}}})
    lanes = {"base": LaneOutcome(status="ran"), "spec": LaneOutcome(status="ran")}
    results = judge_bundle(loaded, build_gates(loaded, bundle), lanes, bundle)
    summary = summarize(loaded, {}, bundle.name, 0.0, "complete", lanes, results)
    summary["restore"] = {"incumbent": None}
    atomic_write_json(bundle / "SUMMARY.json", summary)
    sign_bundle(bundle, load_signing_key(), predicate(loaded, bundle.name))
    return bundle


def test_a_rejudge_keeps_the_frozen_rules_and_shows_what_the_tool_defaults_would_decide(tmp_path: Path) -> None:
    from campaign.gates.greedy import GreedyRule
    from tests.support.schema import patched_default

    source = _window_whose_lanes_differ(tmp_path)
    assert load_json_strict(source / "SUMMARY.json")["candidates"]["spec"]["gates"]["greedy"]["verdict"] == "PASS"
    with patched_default(GreedyRule, "cross_identical", "3/3"):  # a newer tool judging cross-identity by default
        kept = rejudge(source, key=load_signing_key(), trusted=load_trusted(), out_dir=tmp_path / "kept")
        moved = rejudge(source, key=load_signing_key(), trusted=load_trusted(), out_dir=tmp_path / "moved",
                        with_current_defaults=True)
        from typer.testing import CliRunner

        from campaign.cli import app

        shown = CliRunner().invoke(app, ["rejudge", str(source), "--out", str(tmp_path / "shown")])
    assert shown.exit_code == 0, shown.output
    assert "signed by the rules the window was judged by; this tool's defaults differ in 1 field(s)" in shown.output
    assert 'gates[greedy].rule.cross_identical: frozen null, this tool "3/3"' in shown.output
    # three prompts apart of three cannot reach the sign test's margin: a difference, not a FAIL
    assert "by this tool's defaults: greedy/spec: INCONCLUSIVE (signed: PASS)" in shown.output
    line = 'gates[greedy].rule.cross_identical: frozen null, this tool "3/3"'
    # by default the signed verdict is the frozen rules'; the tool's defaults' verdict is only reported
    assert kept.rules == "recorded" and kept.rule_changes == [line]
    assert [(c.gate, c.after, c.changed) for c in kept.verdicts] == [("greedy", "PASS", False)]
    assert [(c.gate, c.before, c.after) for c in kept.under_current_defaults] == [("greedy", "PASS", "INCONCLUSIVE")]
    summary = load_json_strict(kept.bundle / "SUMMARY.json")
    assert summary["rejudge"]["rules"] == "recorded" and summary["contract"]["accepted_tool_defaults"] == []
    # asked to, it signs the judgement by the tool's defaults beside the old one, and records why
    assert moved.rules == "this tool's defaults"
    assert [(c.gate, c.before, c.after) for c in moved.verdicts] == [("greedy", "PASS", "INCONCLUSIVE")]
    summary = load_json_strict(moved.bundle / "SUMMARY.json")
    assert summary["contract"]["accepted_tool_defaults"] == [line]
    effective = load_json_strict(moved.bundle / "contract" / "effective.json")
    assert effective["contract"]["gates"][0]["rule"]["cross_identical"] == "3/3"
    for bundle in (kept.bundle, moved.bundle):
        verify_bundle(bundle, load_trusted())
    # the same canonical contract: what the file says is unchanged, only the rules applied to it
    assert summary["contract"]["canonical_sha256"] == load_json_strict(source / "SUMMARY.json")["contract"]["canonical_sha256"]
