"""The greedy judge on hand-written raw records: it reads only the bundle, so its rules can be
pinned without an engine. (Engine-backed greedy runs are in tests/window.)"""

from __future__ import annotations

from pathlib import Path

from campaign.contracts.load import load_contract
from campaign.fsutil import JsonlAppender
from campaign.gates.base import GateContext
from campaign.gates.registry import gate_for
from campaign.gates.result import Verdict
from tests.support.contracts import demo_like, write_contract


def _gate(tmp_path: Path, replies: dict[str, dict[str, list[str]]]):
    contract = load_contract(write_contract(tmp_path, demo_like(18000)))
    ctx = GateContext(bundle=tmp_path / "bundle", contract=contract,
                      input_paths={"p": tmp_path / "prompts" / "p.jsonl"})
    gate = gate_for(contract.contract.gates[0], ctx)
    for lane, table in replies.items():
        with JsonlAppender(ctx.raw_path("greedy", lane)) as sink:
            for pid, texts in table.items():
                for repeat, text in enumerate(texts):
                    sink.append({"tags": {"prompt": pid, "repeat": repeat}, "status": 200,
                                 "response": {"choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                                              "usage": {"completion_tokens": 5}}})
    return gate, contract.lanes["spec"], contract.lanes["base"]


def test_identical_repeats_pass_and_cross_identity_is_counted(tmp_path: Path) -> None:
    base = {"capital": ["Paris.", "Paris."], "haiku": ["Waves.", "Waves."], "fib": ["def f", "def f"]}
    spec = {"capital": ["Paris.", "Paris."], "haiku": ["Tides.", "Tides."], "fib": ["def f", "def f"]}
    gate, cand, ctrl = _gate(tmp_path, {"base": base, "spec": spec})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.PASS
    assert result.metrics["self_identical"].value == 3
    assert result.metrics["cross_identical"].value == 2
    assert result.details["prompts"][1]["first_divergence_char"] == 0


def test_nondeterministic_candidate_fails_the_rule(tmp_path: Path) -> None:
    base = {"capital": ["Paris.", "Paris."], "haiku": ["Waves.", "Waves."], "fib": ["def f", "def f"]}
    spec = {"capital": ["Paris.", "Paris!"], "haiku": ["Waves.", "Waves."], "fib": ["def f", "def f"]}
    gate, cand, ctrl = _gate(tmp_path, {"base": base, "spec": spec})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.FAIL
    assert "self_identical 2/3 < required 3/3" in result.reasons


def test_a_lane_that_answers_nothing_cannot_pass(tmp_path: Path) -> None:
    base = {"capital": ["Paris.", "Paris."], "haiku": ["Waves.", "Waves."], "fib": ["def f", "def f"]}
    spec = {"capital": ["", ""], "haiku": ["", ""], "fib": ["", ""]}
    gate, cand, ctrl = _gate(tmp_path, {"base": base, "spec": spec})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "empty reply" in " ".join(result.reasons)


def test_the_same_reply_to_every_prompt_is_an_instrument_failure(tmp_path: Path) -> None:
    base = {"capital": ["Paris.", "Paris."], "haiku": ["Waves.", "Waves."], "fib": ["def f", "def f"]}
    spec = {pid: ["OK", "OK"] for pid in base}
    gate, cand, ctrl = _gate(tmp_path, {"base": base, "spec": spec})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "same reply to all 3 prompts" in result.reasons[0]


def test_missing_records_are_inconclusive(tmp_path: Path) -> None:
    base = {"capital": ["Paris.", "Paris."], "haiku": ["Waves.", "Waves."], "fib": ["def f", "def f"]}
    spec = {"capital": ["Paris.", "Paris."], "haiku": ["Waves."]}
    gate, cand, ctrl = _gate(tmp_path, {"base": base, "spec": spec})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any("no valid reply for repeats [1]" in r for r in result.reasons)
