"""The length judge on hand-written raw records of a greedy gate (the source it reads): it sends nothing
and reads only the bundle, so its rules and its honest INCONCLUSIVEs are pinned without an engine. The
engine-backed window is tests/integration/window/test_length_window.py."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.errors import ContractError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import GateContext, LiveGate, Screen
from campaign.gates.registry import gate_for
from campaign.gates.result import Verdict
from campaign.receipts.plots import plots_for
from tests.support.contracts import demo_like, write_contract

PROMPTS = [(f"p{i}", f"Question number {i}?") for i in range(8)]
LENGTH = """\
          - kind: length
            source: greedy
            rule: {max_mean_change: 0.2, min_pairs: 5}
        promotion:"""


def _gates(tmp_path: Path, gates: str = LENGTH):
    tmp_path.mkdir(parents=True, exist_ok=True)
    contract = load_contract(write_contract(tmp_path, demo_like(18000).replace("        promotion:", gates),
                                            prompts=PROMPTS))
    ctx = GateContext(bundle=tmp_path / "bundle", contract=contract, input_paths={"p": tmp_path / "prompts" / "p.jsonl"})
    return [gate_for(spec, ctx) for spec in contract.contract.gates], contract


def _write(gate, lane: str, tokens: dict[str, list[int]], *, cut: set[str] = frozenset()) -> None:  # noqa: ANN001
    with JsonlAppender(gate.ctx.raw_path("greedy", lane)) as sink:
        for pid, counts in tokens.items():
            for repeat, count in enumerate(counts):
                sink.append({"tags": {"prompt": pid, "repeat": repeat}, "status": 200,
                             "response": {"choices": [{"message": {"content": "x" * count},
                                                       "finish_reason": "length" if pid in cut else "stop"}],
                                          "usage": {"completion_tokens": count}}})


def _judge(tmp_path: Path, control: dict[str, list[int]], candidate: dict[str, list[int]], **kwargs):  # noqa: ANN003
    (_, length), contract = _gates(tmp_path)
    _write(length, "base", control, **kwargs)
    _write(length, "spec", candidate, **kwargs)
    return length, length.judge(contract.lanes["spec"], contract.lanes["base"])


def test_it_gathers_nothing_itself_and_the_window_judges_it_only() -> None:
    from campaign.gates.length import LengthGate

    assert not issubclass(LengthGate, (LiveGate, Screen))  # neither booted for nor screened: judged from records


def test_an_a_a_with_identical_replies_passes_with_no_change(tmp_path: Path) -> None:
    lengths = {pid: [10 + 3 * i, 10 + 3 * i] for i, (pid, _) in enumerate(PROMPTS)}
    gate, result = _judge(tmp_path, lengths, lengths)
    assert result.verdict is Verdict.PASS, result.reasons
    assert result.metrics["mean_change"].value == 0.0 and result.details["estimate"]["low"] == 0.0
    assert "+0.0%" in result.reasons[0] and "within +-20.0%" in result.reasons[0]


def test_an_a_a_of_noise_never_fails(tmp_path: Path) -> None:
    """Sampled replies of one server twice: lengths that differ by noise alone give a CI around zero."""
    verdicts = []
    for seed in range(20):
        rng = random.Random(seed)
        base = {pid: 40 + 5 * i for i, (pid, _) in enumerate(PROMPTS)}
        noisy = [{pid: [max(1, round(rng.gauss(n, 6))) for _ in range(2)] for pid, n in base.items()} for _ in (0, 1)]
        verdicts.append(_judge(tmp_path / str(seed), noisy[0], noisy[1])[1].verdict)
    assert Verdict.FAIL not in verdicts, verdicts


def test_replies_twice_as_long_fail_and_the_report_shows_it(tmp_path: Path) -> None:
    control = {pid: [20 + i, 20 + i] for i, (pid, _) in enumerate(PROMPTS)}
    candidate = {pid: [2 * (20 + i), 2 * (20 + i) + 1] for i, (pid, _) in enumerate(PROMPTS)}
    gate, result = _judge(tmp_path, control, candidate)
    assert result.verdict is Verdict.FAIL and "wholly beyond +-20.0%" in result.reasons[0], result.reasons
    assert 1.0 < result.metrics["mean_change"].value < 1.05
    presentation = gate.presentation(result)
    assert [h.label for h in presentation.headlines] == ["mean_change"]
    assert presentation.headlines[0].value.startswith("+10")  # "+102.2% [95% CI ...]"
    plots = plots_for({"presentation": presentation.model_dump()})
    assert [p.title.split(":")[0] for p in plots] == ["Reply length", "Reply length per item (cut"]
    assert "max_mean_change" in plots[0].svg


def test_replies_cut_at_max_tokens_on_both_lanes_are_censored_and_too_many_are_inconclusive(tmp_path: Path) -> None:
    lengths = {pid: [24, 24] for pid, _ in PROMPTS}
    _, result = _judge(tmp_path, lengths, lengths, cut={"p0", "p1", "p2"})
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "3/8 items are left out" in result.reasons[0] and "3 cut at max_tokens on both lanes" in result.reasons[0]
    assert result.metrics["cut_on_both"].value == 3


def test_a_runaway_on_the_candidate_only_never_passes_on_the_replies_left(tmp_path: Path) -> None:
    """One item in eight runs to max_tokens on the candidate alone (under max_left_out), the rest unchanged:
    weighing only the clean seven would PASS a length regression. The cut reply bounds the change instead."""
    (_, length), contract = _gates(tmp_path)
    control = {pid: [20, 20] for pid, _ in PROMPTS}
    candidate = {**control, "p0": [64, 64]}
    _write(length, "base", control)
    _write(length, "spec", candidate, cut={"p0"})
    result = length.judge(contract.lanes["spec"], contract.lanes["base"])
    assert result.verdict is Verdict.INCONCLUSIVE, result.reasons
    assert "1 cut on the candidate only" in result.reasons[0] and "bound of the change" in result.reasons[0]
    assert result.metrics["cut_on_candidate"].value == 1 and result.metrics["pairs"].value == 7


def test_a_candidate_cut_often_enough_to_be_past_the_bound_fails_on_the_bound(tmp_path: Path) -> None:
    (_, length), contract = _gates(tmp_path)
    control = {pid: [20, 20] for pid, _ in PROMPTS}
    candidate = {pid: [64, 64] if i < 3 else [20, 20] for i, (pid, _) in enumerate(PROMPTS)}
    _write(length, "base", control)
    _write(length, "spec", candidate, cut={"p0", "p1", "p2"})
    result = length.judge(contract.lanes["spec"], contract.lanes["base"])
    assert result.verdict is Verdict.FAIL, result.reasons
    assert "already with the cut replies at their cut length" in result.reasons[0]


def test_failures_on_the_candidate_beyond_max_left_out_are_inconclusive_not_a_pass_on_the_survivors(
        tmp_path: Path) -> None:
    """The candidate's long generations time out: only its short replies are left. Never a PASS on those."""
    (_, length), contract = _gates(tmp_path)
    lengths = {pid: [10, 10] for pid, _ in PROMPTS}
    _write(length, "base", lengths)
    _write(length, "spec", {pid: n for pid, n in lengths.items() if pid not in ("p0", "p1")})
    with JsonlAppender(length.ctx.raw_path("greedy", "spec")) as sink:
        for pid in ("p0", "p1"):
            sink.append({"tags": {"prompt": pid, "repeat": 0}, "error": "read timed out"})
    result = length.judge(contract.lanes["spec"], contract.lanes["base"])
    assert result.verdict is Verdict.INCONCLUSIVE, result.reasons
    assert "2/8 items are left out" in result.reasons[0] and "2 failed on a lane" in result.reasons[0]
    assert result.details["left_out"]['{"prompt": "p0"}'] == ["read timed out"]


def test_items_answered_on_one_lane_only_count_as_left_out(tmp_path: Path) -> None:
    lengths = {pid: [10, 10] for pid, _ in PROMPTS}
    _, result = _judge(tmp_path, lengths, {pid: n for pid, n in lengths.items() if pid not in ("p0", "p1", "p2")})
    assert result.verdict is Verdict.INCONCLUSIVE and "3/8 items are left out" in result.reasons[0], result.reasons
    assert result.details["left_out"]['{"prompt": "p1"}'] == ["answered on one lane only"]


def test_a_source_that_gathered_nothing_on_a_lane_is_inconclusive(tmp_path: Path) -> None:
    (_, length), contract = _gates(tmp_path)
    _write(length, "base", {pid: [10, 10] for pid, _ in PROMPTS})
    result = length.judge(contract.lanes["spec"], contract.lanes["base"])
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reasons == ["the greedy gate gathered no measurable reply on lane spec: nothing to measure"]


def test_fewer_pairs_than_the_minimum_are_inconclusive(tmp_path: Path) -> None:
    control = {pid: [10, 10] for pid, _ in PROMPTS[:4]}
    _, result = _judge(tmp_path, control, control)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reasons == ["4 items measured on both lanes, fewer than min_pairs 5"]


def test_a_failed_request_is_left_out_and_said(tmp_path: Path) -> None:
    (_, length), contract = _gates(tmp_path)
    lengths = {pid: [10, 10] for pid, _ in PROMPTS}
    _write(length, "base", lengths)
    _write(length, "spec", lengths)
    with JsonlAppender(length.ctx.raw_path("greedy", "spec")) as sink:
        sink.append({"tags": {"prompt": "p9", "repeat": 0}, "error": "connection reset"})
    result = length.judge(contract.lanes["spec"], contract.lanes["base"])
    assert result.verdict is Verdict.PASS
    assert any("1 items left out" in c and "connection reset" in c for c in result.caveats), result.caveats
    assert result.metrics["left_out"].value == 1 and result.metrics["left_out"].denominator == 9


@pytest.mark.parametrize("gates, message", [
    (LENGTH.replace("source: greedy", "source: nosuch"), r"gates\[1\]\.source.*'nosuch' names no gate"),
    (LENGTH.replace("        promotion:", "          - kind: length\n            id: twice\n            source: length\n"
                                         "            rule: {max_mean_change: 0.2}\n        promotion:"),
     r"gate 'length' is a length gate: replies are read from a greedy or task gate"),
])
def test_a_source_that_is_not_a_reply_gate_of_the_contract_is_a_located_contract_error(
        tmp_path: Path, gates: str, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        _gates(tmp_path, gates)
