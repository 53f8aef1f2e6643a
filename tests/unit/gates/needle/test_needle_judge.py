"""Needle prompts (pure functions of a seed) and the needle judge on hand-written stream records.
Engine-backed ladders, with prompts sized by the engine's tokenizer, are in test_ladders_integration.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from campaign.contracts.load import load_contract
from campaign.fsutil import JsonlAppender
from campaign.gates.base import GateContext
from campaign.gates.needle.prompts import VARIANTS, build_case, case_seed, check_reply
from campaign.gates.registry import gate_for
from campaign.gates.result import Verdict
from tests.support.contracts import demo_like, write_contract

GATE = """          - kind: needle
            rungs: [256, 512]
            max_tokens: 64
            rule: {not_below_control: true}"""


def _gate(tmp_path: Path, gate: str = GATE):
    body = demo_like(18000).replace("""          - kind: greedy
            input: p
            repeats: 2
            max_tokens: 24
            rule: {self_identical: "3/3"}""", gate).replace("requires: [greedy]", "requires: [needle]")
    contract = load_contract(write_contract(tmp_path, body))
    ctx = GateContext(bundle=tmp_path / "bundle", contract=contract)
    return gate_for(contract.contract.gates[0], ctx), contract.lanes["spec"], contract.lanes["base"]


def _record(rung: int, variant: str, attempt: int, *, reply: str | None = None, passed: bool = True,
            prompt_tokens: int | None = None, done: bool = True, error: str | None = None) -> dict[str, Any]:
    case = build_case(variant, case_seed(0, rung, variant, attempt), 40)
    if reply is None:
        reply = "\n".join(case.expected) if passed else "I do not know."
    tokens = rung if prompt_tokens is None else prompt_tokens
    events = [{"t": 0.01, "data": {"choices": [{"delta": {"role": "assistant", "content": None}}]}},
              {"t": 0.5, "data": {"choices": [{"delta": {"content": reply}}]}},
              {"t": 0.6, "data": {"choices": [{"delta": {}, "finish_reason": "stop"}]}},
              {"t": 0.6, "data": {"choices": [], "usage": {"prompt_tokens": tokens, "completion_tokens": 9},
                                  "timings": {"prompt_n": tokens, "prompt_ms": 400.0, "prompt_per_second": tokens / 0.4,
                                              "cache_n": 0}}}]
    record = {"tags": {"rung": rung, "attempt": attempt, **case.tags(), "counted_tokens": tokens},
              "request": {"messages": case.messages}, "events": events, "done_marker": done, "elapsed_s": 0.7}
    if error:
        record = {"tags": record["tags"], "error": error}
    return record


def _write(gate, lane: str, records: list[dict[str, Any]]) -> None:
    with JsonlAppender(gate.ctx.raw_path(gate.gate_id, lane)) as sink:
        for record in records:
            sink.append(record)


def _full(rungs: tuple[int, ...] = (256, 512)) -> list[dict[str, Any]]:
    return [_record(r, v, 0) for r in rungs for v in VARIANTS]


def test_cases_are_a_pure_function_of_the_seed() -> None:
    for variant in VARIANTS:
        a, b = build_case(variant, 42, 100), build_case(variant, 42, 100)
        assert a == b
        assert build_case(variant, 43, 100).messages != a.messages
    multi = build_case("multi", 42, 100)
    text = multi.messages[0]["content"]
    positions = [text.index(k) for k in multi.expected]
    assert positions == sorted(positions) and len(set(multi.expected)) == 5
    decoy = build_case("decoy", 42, 100)
    assert len(decoy.decoys) == 4 and all(d[:5] == decoy.expected[0][:5] for d in decoy.decoys)
    assert all(k in decoy.messages[0]["content"] for k in [*decoy.expected, *decoy.decoys])
    # more filler moves the end, not the start: sizing keeps the same text
    longer = build_case("single", 7, 300).messages[0]["content"]
    assert longer.split()[:8] == build_case("single", 7, 200).messages[0]["content"].split()[:8]
    assert case_seed(0, 256, "single", 0) != case_seed(0, 256, "single", 1)


def test_check_reply_rules() -> None:
    assert check_reply("single", ["1234-5678"], [], "It is 1234-5678.")[0]
    assert not check_reply("single", ["1234-5678"], [], "")[0]
    keys = ["1111-2222", "3333-4444", "5555-6666", "7777-8888", "9999-1111"]
    assert check_reply("multi", keys, [], "\n".join(keys))[0]
    ok, why = check_reply("multi", keys, [], "\n".join([keys[1], keys[0], *keys[2:]]))
    assert not ok and "out of order" in why
    ok, why = check_reply("decoy", ["1234-5678"], ["1234-0000"], "1234-5678 or 1234-0000")
    assert not ok and "decoy 1234-0000" in why


def test_a_full_ladder_passes_with_per_rung_numbers(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path)
    _write(gate, "base", _full())
    _write(gate, "spec", _full())
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.PASS, result.reasons
    assert result.metrics["highest_rung_passed"].value == 512
    assert result.metrics["rungs_passed"].value == 2 and result.metrics["rungs_passed"].denominator == 2
    rung = result.details["ladders"]["spec"]["rungs"][0]
    assert rung["variants"] == {"single": True, "multi": True, "decoy": True}
    assert rung["prompt_tokens"]["multi"] == [256]
    assert rung["ttft_s"] == 0.5 and rung["prefill_tok_s_engine"] == 640.0 and rung["prefill_tok_s_client"] == 512.0
    assert rung["wall_s"] == pytest.approx(2.1)


def test_a_retry_that_passes_saves_the_variant(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path)
    records = _full()
    records[1] = _record(256, "multi", 0, passed=False)
    records.insert(2, _record(256, "multi", 1))
    _write(gate, "base", _full())
    _write(gate, "spec", records)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.PASS
    assert result.details["ladders"]["spec"]["rungs"][0]["requests"] == 4


def test_the_ladder_stops_at_the_first_failed_rung_and_fails_below_control(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path)
    spec = [_record(256, "single", 0), _record(256, "multi", 0), _record(256, "decoy", 0, passed=False),
            _record(256, "decoy", 1, passed=False)]
    _write(gate, "base", _full())
    _write(gate, "spec", spec)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.FAIL
    assert result.metrics["highest_rung_passed"].value == 0
    assert result.metrics["control_highest_rung_passed"].value == 512
    rows = result.details["ladders"]["spec"]["rungs"]
    assert rows[0]["variants"]["decoy"] is False and rows[1]["status"] == "not run (ladder stopped)"


def test_a_lane_that_answers_nothing_cannot_pass(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, GATE.replace("not_below_control: true", "not_below_control: false"))
    empty = [_record(256, v, a, reply="") for v in VARIANTS for a in (0, 1)]
    _write(gate, "base", empty)
    _write(gate, "spec", empty)
    result = gate.judge(cand, ctrl)
    # neither lane passed a rung: nothing measured about the candidate, so not a FAIL either
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "neither lane passed a rung" in result.reasons[0] and "measured nothing" in result.reasons[0]


def test_a_candidate_that_answers_nothing_fails_when_the_control_climbs(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, GATE.replace("not_below_control: true", "not_below_control: false"))
    _write(gate, "base", _full())
    _write(gate, "spec", [_record(256, v, a, reply="") for v in VARIANTS for a in (0, 1)])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.FAIL
    assert "required 512: not met" in result.reasons[0]


def test_a_prompt_off_its_rung_is_no_measurement(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path)
    records = _full()
    records[0] = _record(256, "single", 0, prompt_tokens=259)  # 1.2% over
    _write(gate, "base", _full())
    _write(gate, "spec", records)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any("prompt was 259 tokens, 1.17% off its rung of 256" in r for r in result.reasons)


@pytest.mark.parametrize("kwargs,reason", [
    ({"done": False}, "without its [DONE] marker"),
    ({"error": "HTTP 400"}, "HTTP 400"),
])
def test_broken_streams_are_no_measurement(tmp_path: Path, kwargs: dict[str, Any], reason: str) -> None:
    gate, cand, ctrl = _gate(tmp_path)
    _write(gate, "base", _full())
    _write(gate, "spec", [_record(256, "single", 0, **kwargs)])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any(reason in r for r in result.reasons)


def test_a_failure_without_its_retry_is_incomplete(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path)
    _write(gate, "base", _full())
    _write(gate, "spec", [_record(256, "single", 0, passed=False)])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any("failed without its retry" in r for r in result.reasons)
