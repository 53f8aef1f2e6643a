"""Offline judging isolates each gate: a judge that raises costs its own verdict, never the others'
verdicts or the bundle's signature.

The raw records here are written by hand and one gate is a hand-made subclass whose judge raises: the
fault under test is a bug in judging code, which no engine can produce on demand; the gate that passes
is the real greedy judge on records of the shape a window writes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from campaign.contracts.load import load_contract
from campaign.fsutil import atomic_write_json
from campaign.gates.greedy import GreedyGate
from campaign.gates.result import GateResult, Verdict
from campaign.receipts.bundle import sign_bundle, verify_bundle
from campaign.signing import load_signing_key, load_trusted
from campaign.window.judge import LaneOutcome, build_gates, judge_bundle, predicate, summarize
from tests.support.contracts import demo_like, write_contract
from tests.support.judging import unjudged_bundle


class BrokenJudge(GreedyGate):
    """Collects like greedy; its judge has a bug."""

    def judge(self, candidate, control) -> GateResult:  # noqa: ANN001
        raise KeyError("no such record field: 'choices'")


def test_a_judge_that_raises_costs_only_its_own_verdict(tmp_path: Path) -> None:
    bundle, loaded = unjudged_bundle(tmp_path)
    greedy = build_gates(loaded, bundle)[0]
    broken = BrokenJudge(greedy.spec.model_copy(update={"id": "broken"}), greedy.ctx)
    lanes = {"base": LaneOutcome(status="ran"), "spec": LaneOutcome(status="ran")}
    results = judge_bundle(loaded, [broken, greedy], lanes, bundle)
    by_gate = {r.gate: r for r in results}
    assert by_gate["greedy"].verdict is Verdict.PASS, by_gate["greedy"].reasons
    assert by_gate["broken"].verdict is Verdict.INCONCLUSIVE
    assert by_gate["broken"].reasons == ["judge error: KeyError: \"no such record field: 'choices'\""]
    assert by_gate["broken"].rule == {"self_identical": "3/3"}  # the frozen rule is still shown
    error = (bundle / "gates" / "broken" / "spec.judge-error.txt").read_text()
    assert error.startswith("Traceback") and 'raise KeyError("no such record field' in error
    assert json.loads((bundle / "gates" / "greedy" / "spec.json").read_text())["verdict"] == "PASS"
    assert json.loads((bundle / "gates" / "broken" / "spec.json").read_text())["verdict"] == "INCONCLUSIVE"
    summary = summarize(loaded, {}, bundle.name, 0.0, "complete", lanes, results)
    atomic_write_json(bundle / "SUMMARY.json", summary)
    assert summary["candidates"]["spec"]["gates"]["greedy"]["verdict"] == "PASS"
    # the bundle is still signed, and verifies with the error text in it
    sign_bundle(bundle, load_signing_key(), predicate(loaded, bundle.name))
    assert verify_bundle(bundle, load_trusted()).files > 0


class BrokenPresentation(GreedyGate):
    """Judges like greedy; what it shows of its result has a bug."""

    @classmethod
    def present(cls, rule, result):  # noqa: ANN001, ANN206
        raise RuntimeError("a plot builder's bug")


def test_every_result_carries_its_gate_s_presentation_and_a_bug_there_costs_no_verdict(tmp_path: Path) -> None:
    bundle, loaded = unjudged_bundle(tmp_path)
    greedy = build_gates(loaded, bundle)[0]
    broken = BrokenPresentation(greedy.spec.model_copy(update={"id": "broken"}), greedy.ctx)
    shutil.copytree(bundle / "raw" / "greedy", bundle / "raw" / "broken")  # the same records, its own gate id
    lanes = {"base": LaneOutcome(status="ran"), "spec": LaneOutcome(status="ran")}
    by_gate = {r.gate: r for r in judge_bundle(loaded, [broken, greedy], lanes, bundle)}
    assert by_gate["greedy"].presentation is not None
    assert [(h.label, h.value, h.denominator) for h in by_gate["greedy"].presentation.headlines] == [
        ("self_identical", 3, 3), ("control_self_identical", 3, 3)]
    assert by_gate["broken"].verdict is Verdict.PASS and by_gate["broken"].presentation.headlines == []
    assert "a plot builder's bug" in (bundle / "gates" / "broken" / "spec.present-error.txt").read_text()
    written = json.loads((bundle / "gates" / "greedy" / "spec.json").read_text())
    assert written["presentation"]["headlines"][0]["label"] == "self_identical"


def test_a_lane_that_did_not_launch_blocks_every_gate_without_a_judge_error(tmp_path: Path) -> None:
    bundle, loaded = unjudged_bundle(tmp_path)
    lanes = {"base": LaneOutcome(status="ran"), "spec": LaneOutcome(status="launch_failed", cause="bad_argument")}
    (result,) = judge_bundle(loaded, build_gates(loaded, bundle), lanes, bundle)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reasons == ["lane spec did not launch (bad_argument): a launch failure is not a finding"]
    assert not list(bundle.glob("gates/*/*.judge-error.txt"))


def test_an_unreadable_snapshot_is_a_judge_error_of_each_gate(tmp_path: Path) -> None:
    bundle, loaded = unjudged_bundle(tmp_path)
    (bundle / "lanes" / "spec" / "inspect.json").write_text('{"argv": [], "argv": []}')  # duplicate key
    lanes = {"base": LaneOutcome(status="ran"), "spec": LaneOutcome(status="ran")}
    (result,) = judge_bundle(loaded, build_gates(loaded, bundle), lanes, bundle)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reasons[0].startswith("judge error: UnreadableFile: ") and "inspect.json: not valid JSON" in result.reasons[0]
    assert "Traceback" in (bundle / "gates" / "greedy" / "spec.judge-error.txt").read_text()


def test_each_candidates_overall_verdict_is_its_own(tmp_path: Path) -> None:
    """Two candidates, one lost on its required gate: the summary says so for that one only."""
    contract = write_contract(tmp_path, demo_like(18000, extra_candidate="").replace(
        "        inputs:", "          - name: spec2\n            role: candidate\n            axis: [args.spec-type]\n"
        "            set: {args: {--spec-type: ngram-simple}}\n        inputs:"))
    loaded = load_contract(contract)
    results = [GateResult(gate="greedy", kind="greedy", candidate=name, control="base", verdict=verdict)
               for name, verdict in (("spec", Verdict.FAIL), ("spec2", Verdict.PASS))]
    lanes = {name: LaneOutcome(status="ran") for name in ("base", "spec", "spec2")}
    summary = summarize(loaded, {}, "w", 0.0, "complete", lanes, results)
    assert {name: entry["overall"] for name, entry in summary["candidates"].items()} == {"spec": "FAIL",
                                                                                        "spec2": "PASS"}
