"""The A/A lane as the window's false-decision check: judged from hand-written raw records (the judge reads
only the bundle), then decided and rendered as the report does. A real window with an A/A lane is in
tests/integration/window/test_aa_window.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.fsutil import JsonlAppender, atomic_write_json
from campaign.gates.needle.gate import NeedleRule
from campaign.gates.registry import GATES
from campaign.gates.ruler import RulerRule
from campaign.gates.speed.spec import SpeedRule
from campaign.receipts.decision import decisions
from campaign.receipts.publish import render_html, render_markdown
from campaign.window.judge import LaneOutcome, build_gates, input_copies, judge_bundle, summarize
from tests.support.contracts import demo_like, write_contract
from tests.support.judging import SPEC_ARGS, lane_inspect

PROMPTS = [(f"p{i}", f"Say something about the number {i}.") for i in range(8)]
STEADY = {pid: [f"Reply {pid}.", f"Reply {pid}."] for pid, _ in PROMPTS}
WANDERING = {pid: [f"Reply {pid}.", f"Reply {pid}, again."] for pid, _ in PROMPTS}


def _summary(tmp_path: Path, again: dict[str, list[str]]) -> dict:
    body = demo_like(18000, rule='"8/8"').replace(
        "        inputs:\n", "          - name: again\n            role: candidate\n            aa: true\n        inputs:\n", 1)
    loaded = load_contract(write_contract(tmp_path, body, prompts=PROMPTS))
    bundle = tmp_path / "bundle"
    for name, copy in input_copies(loaded, bundle).items():
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(loaded.resolve(loaded.contract.inputs[name].file), copy)
    argv = ["/usr/bin/llama-server", "--port", "18000"]
    for lane, table, ran in (("base", STEADY, argv), ("spec", STEADY, argv + SPEC_ARGS), ("again", again, argv)):
        atomic_write_json(bundle / "lanes" / lane / "spec.json", loaded.lanes[lane].model_dump(mode="json"))
        atomic_write_json(bundle / "lanes" / lane / "inspect.json", lane_inspect(ran))
        with JsonlAppender(bundle / "raw" / "greedy" / f"{lane}.jsonl") as sink:
            for pid, texts in table.items():
                for repeat, text in enumerate(texts):
                    sink.append({"tags": {"prompt": pid, "repeat": repeat}, "status": 200,
                                 "response": {"choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                                              "usage": {"completion_tokens": 5}}})
    lanes = {name: LaneOutcome(status="ran") for name in ("base", "spec", "again")}
    results = judge_bundle(loaded, build_gates(loaded, bundle), lanes, bundle)
    summary = summarize(loaded, {}, "w1", 0.0, "complete", lanes, results)
    summary["restore"] = {"incumbent": "http://127.0.0.1:18000", "proved": True}
    return summary


def test_a_clean_a_a_leaves_the_decisions_as_they_are_and_is_never_promoted(tmp_path: Path) -> None:
    summary = _summary(tmp_path, STEADY)
    assert summary["aa_check"] == {"lanes": ["again"], "false_decisions": []}
    assert summary["candidates"]["again"]["aa"] is True and "aa" not in summary["candidates"]["spec"]
    by_lane = {d.candidate: d for d in decisions(summary)}
    assert by_lane["spec"].decision == "PROMOTABLE" and by_lane["spec"].suspect == ""
    assert by_lane["again"].decision == "REFUSED"
    assert "false-decision check, and no verdict claimed a difference" in by_lane["again"].reason
    markdown = render_markdown({"summary": summary, "gates": [], "lanes": {}, "bundle": "w1"})
    assert "**A/A check: clean.**" in markdown and "FALSE DECISION" not in markdown


def test_an_a_a_that_fails_makes_every_decision_suspect_and_none_promotable(tmp_path: Path) -> None:
    summary = _summary(tmp_path, WANDERING)  # diverges on every prompt where the control never does
    (found,) = summary["aa_check"]["false_decisions"]
    assert found == {"lane": "again", "gate": "greedy", "verdict": "FAIL", "claims": "worse than its control"}
    by_lane = {d.candidate: d for d in decisions(summary)}
    spec = by_lane["spec"]  # every one of its own gates passed: only the A/A keeps it from promotion
    assert spec.decision == "INCONCLUSIVE" and spec.gate is None
    assert spec.reason.startswith("A/A lane again got greedy FAIL, claiming it worse than its control: this "
                                  "window's decisions are suspect")
    assert "run the window again" in spec.next_step
    assert "and it made greedy FAIL (claiming it worse than its control)" in by_lane["again"].reason
    data = {"summary": summary, "gates": [], "lanes": {}, "bundle": "w1"}
    assert "**A/A check: FALSE DECISION.**" in render_markdown(data)
    html = render_html(data)
    assert html.index('id="aa-check"') < html.index('id="decision"') and "FALSE DECISION" in html


@pytest.mark.parametrize(("kind", "rule", "verdict", "claims"), [
    ("speed", SpeedRule(), "PASS", "faster than its control by the bar (+5%, CI low above +0%)"),
    ("speed", SpeedRule(), "FAIL", None),  # not a +5% win: the right answer for no change at all
    ("speed", SpeedRule(min_mean_change=-0.05, ci_lower_above=-0.1), "FAIL",
     "slower than its control beyond the bar (-5%)"),
    ("speed", SpeedRule(min_mean_change=-0.05, ci_lower_above=-0.1), "PASS", None),
    ("ruler", RulerRule(), "PASS", "an axis acting on what the engine computes"),
    ("ruler", RulerRule(), "FAIL", None),  # "axis may be inert": right for the control again
    ("teacher_forced", None, "FAIL", "worse than its control"),
    ("teacher_forced", None, "PASS", None),
    ("structured", None, "FAIL", None),  # its rule counts the candidate's own answers: no claim of a difference
    ("tools", None, "PASS", None),
])
def test_each_gate_says_which_of_its_verdicts_claims_a_difference(kind: str, rule: object, verdict: str,
                                                                  claims: str | None) -> None:
    assert GATES[kind].aa_claims(rule, {"verdict": verdict}) == claims


def _needle_entry(verdict: str, ours: int, theirs: int) -> dict:
    return {"verdict": verdict, "metrics": {"highest_rung_passed": {"value": ours},
                                            "control_highest_rung_passed": {"value": theirs}}}


@pytest.mark.parametrize(("rule", "entry", "claims"), [
    (NeedleRule(reach=4096, not_below_control=True), _needle_entry("FAIL", 1024, 2048),
     "reaching less far than its control"),
    (NeedleRule(reach=4096, not_below_control=True), _needle_entry("FAIL", 2048, 2048), None),  # by reach alone
    (NeedleRule(reach=4096, not_below_control=False), _needle_entry("FAIL", 1024, 2048), None),  # weighs it alone
    (NeedleRule(reach=1024, not_below_control=True), _needle_entry("PASS", 2048, 2048), None),
    (NeedleRule(not_below_control=True), {"verdict": "FAIL", "metrics": {}}, None),  # an older entry
])
def test_a_needle_fail_claims_a_difference_only_when_it_is_below_its_control(rule: object, entry: dict,
                                                                               claims: str | None) -> None:
    assert GATES["needle"].aa_claims(rule, entry) == claims
