"""The reason that decided a verdict is recorded by the rule that reached it, when it is judged: the headline
and promote's next step read that record, not a guess from the sentences' words (which stays for results
written before the record, and for an instrument's verdict)."""

from __future__ import annotations

from pathlib import Path

from campaign.gates.result import GateResult, Verdict, combine
from campaign.presentation import deciding_reason, headline
from campaign.window.judge import judge_one
from tests.support.greedyrecords import greedy_gate


def _result() -> GateResult:
    return GateResult(gate="g", kind="structured", candidate="spec", control="base", verdict=Verdict.INCONCLUSIVE)


def test_the_first_rule_that_reached_the_verdict_decides_it() -> None:
    result = _result()
    verdicts = [result.weigh(Verdict.PASS, "correct 8/8 >= required 8/8"),
                result.weigh(Verdict.FAIL, "schema_valid 5/8 < required 8/8"),
                result.weigh(Verdict.FAIL, "tool_calls 0/8 < required 8/8")]
    result.reasons.append("a note no rule wrote")
    result.verdict = combine(verdicts)
    result.settle()
    assert result.deciding_reason == "schema_valid 5/8 < required 8/8"
    result.verdict = Verdict.PASS  # had every rule passed: the first PASS
    result.settle()
    assert result.deciding_reason == "correct 8/8 >= required 8/8"


def test_a_sentence_that_reads_like_a_miss_does_not_decide_a_fail_another_rule_reached() -> None:
    result = _result()
    result.verdict = combine([result.weigh(Verdict.PASS, "first token at 0.2 s < the 0.5 s bound"),
                              result.weigh(Verdict.FAIL, "the replies lost their tool calls on 3 of 8 rows")])
    result.settle()
    dumped = result.dump()
    assert deciding_reason(dumped) == "the replies lost their tool calls on 3 of 8 rows"
    assert headline(dumped) == "FAIL the replies lost their tool calls on 3 of 8 rows"


def test_an_overruled_verdict_is_decided_by_the_finding_and_a_dropped_sentence_decides_nothing() -> None:
    result = _result()
    result.verdict = result.weigh(Verdict.FAIL, "schema_valid 5/8 < required 8/8")
    result.overrule(Verdict.INCONCLUSIVE, "instrument: replies were built on a cached prompt")
    result.settle()
    assert result.verdict is Verdict.INCONCLUSIVE and result.reasons[0].startswith("instrument: replies")
    assert result.deciding_reason == "instrument: replies were built on a cached prompt"
    replaced = _result()
    replaced.verdict = replaced.weigh(Verdict.FAIL, "schema_valid 5/8 < required 8/8")
    replaced.reasons = ["instrument: not every row got a reply"]  # a later check replaced what the rule said
    replaced.settle()
    assert replaced.deciding_reason is None


def test_a_real_judge_records_the_rule_that_failed(tmp_path: Path) -> None:
    base = {f"p{i}": [f"Reply {i}.", f"Reply {i}."] for i in range(8)}
    spec = {f"p{i}": [f"Reply {i}.", f"Reply {i}!"] for i in range(7)} | {"p7": ["Reply 7.", "Reply 7."]}
    gate, cand, ctrl = greedy_gate(tmp_path, {"base": base, "spec": spec}, rule='"8/8"')
    result = judge_one(tmp_path / "bundle", gate, cand, ctrl)
    assert result.verdict is Verdict.FAIL
    assert result.deciding_reason is not None and result.deciding_reason.startswith("self_identical 1/8 < required")
    assert result.headline is not None and result.headline.startswith("FAIL self_identical 1/8 < required 8/8")
    (tmp_path / "cached").mkdir()
    gate, cand, ctrl = greedy_gate(tmp_path / "cached", {"base": base, "spec": spec}, rule='"8/8"', cached=6)
    overruled = judge_one(tmp_path / "cached" / "bundle", gate, cand, ctrl)
    assert overruled.verdict is Verdict.INCONCLUSIVE
    assert overruled.deciding_reason is not None and overruled.deciding_reason.startswith("instrument: replies were")
