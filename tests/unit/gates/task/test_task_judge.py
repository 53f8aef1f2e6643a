"""The task gate's judge on hand-written raw records (it reads only the bundle), with real sandboxed
code runs for HumanEval. Engine-backed task runs are in test_ladders_integration.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.errors import ContractError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import GateContext
from campaign.gates.registry import gate_for
from campaign.gates.result import Verdict
from campaign.gates.task.catalog import arithmetic_tasks, extract_answer, match_answer, user_tasks
from campaign.gates.task.spec import ArithmeticTasks
from tests.support.contracts import demo_like, write_contract

SOLUTION_53 = "```python\ndef add(x: int, y: int):\n    return x + y\n```"
WRONG_53 = "```python\ndef add(x: int, y: int):\n    return x - y\n```"


def _contract(tmp_path: Path, gate: str, user_rows: str | None = None):
    body = demo_like(18000).replace("""          - kind: greedy
            input: p
            repeats: 2
            max_tokens: 24
            rule: {self_identical: "3/3"}""", gate)
    body = body.replace("requires: [greedy]", "requires: [task]")
    if user_rows is not None:
        body = body.replace("p: {file: prompts/p.jsonl}", "p: {file: prompts/p.jsonl}\n          u: {file: u.jsonl}")
        (tmp_path / "u.jsonl").write_text(user_rows)
    return load_contract(write_contract(tmp_path, body))


def _gate(tmp_path: Path, gate: str, user_rows: str | None = None):
    contract = _contract(tmp_path, gate, user_rows)
    ctx = GateContext(bundle=tmp_path / "bundle", contract=contract,
                      input_paths={"u": tmp_path / "u.jsonl"} if user_rows is not None else {})
    return gate_for(contract.contract.gates[0], ctx), contract.lanes["spec"], contract.lanes["base"]


def _write(gate, lane: str, replies: dict[str, list[str]], *, finish: str = "stop") -> None:
    by_id = {t.id: t for t in gate.tasks}
    with JsonlAppender(gate.ctx.raw_path(gate.gate_id, lane)) as sink:
        for tid, texts in replies.items():
            for repeat, text in enumerate(texts):
                sink.append({"tags": {"task": tid, "repeat": repeat, "task_sha256": by_id[tid].digest},
                             "status": 200, "response": {"choices": [{"message": {"content": text},
                                                                      "finish_reason": finish}]}})


ARITH_GATE = """          - kind: task
            arithmetic: {count: 10, seed: 3}
            repeats: 2
            rule: {max_loss_upper: 0.3}"""


def _answers(gate, wrong: set[str] = frozenset(), repeats: int = 2) -> dict[str, list[str]]:
    return {t.id: [f"Working... Answer: {int(t.answer) + (1 if t.id in wrong else 0)}"] * repeats
            for t in gate.tasks}


def test_ties_pass_and_denominators_are_unique_tasks(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, ARITH_GATE)
    _write(gate, "base", _answers(gate, wrong={"arith/3/0"}))
    _write(gate, "spec", _answers(gate, wrong={"arith/3/0"}))
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.PASS, result.reasons
    assert result.metrics["losses"].value == 0 and result.metrics["losses"].denominator == 10
    assert result.metrics["ties"].value == 10
    assert result.metrics["candidate_correct"].value == 18 and result.metrics["candidate_correct"].denominator == 20
    assert result.metrics["loss_upper_bound"].value == pytest.approx(1 - 0.05 ** (1 / 10))
    assert result.metrics["loss_upper_bound"].denominator == 10


def test_losses_beyond_the_margin_fail(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, ARITH_GATE)
    _write(gate, "base", _answers(gate))
    _write(gate, "spec", _answers(gate, wrong={"arith/3/1", "arith/3/4"}))
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.FAIL
    assert result.metrics["losses"].value == 2
    assert "losses 2/10 tasks" in result.reasons[0]
    lost = [row for row in result.details["tasks"] if row["outcome"] == "loss"]
    assert {row["task"] for row in lost} == {"arith/3/1", "arith/3/4"}
    assert lost[0]["candidate"][0]["reason"].startswith("numeric match failed")


def test_a_loss_is_counted_by_correct_repeats_not_by_any_repeat(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, ARITH_GATE)
    base = _answers(gate)
    spec = _answers(gate)
    first = gate.tasks[0]
    spec[first.id] = [f"Answer: {first.answer}", "Answer: -1"]  # 1 of 2 right vs 2 of 2: a loss
    _write(gate, "base", base)
    _write(gate, "spec", spec)
    result = gate.judge(cand, ctrl)
    assert result.metrics["losses"].value == 1
    assert result.details["tasks"][0]["outcome"] == "loss"


def test_a_lane_that_answers_nothing_cannot_pass(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, ARITH_GATE)
    _write(gate, "base", _answers(gate))
    _write(gate, "spec", {t.id: ["", ""] for t in gate.tasks})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any("empty reply; it is not answering" in r for r in result.reasons)


def test_the_same_reply_to_every_task_is_no_measurement(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, ARITH_GATE)
    _write(gate, "base", _answers(gate))
    _write(gate, "spec", {t.id: ["Answer: 12", "Answer: 12"] for t in gate.tasks})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any("same reply to all 10 tasks" in r for r in result.reasons)


def test_a_control_that_solved_nothing_makes_the_bound_meaningless(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, ARITH_GATE)
    wrong = {t.id for t in gate.tasks}
    _write(gate, "base", _answers(gate, wrong=wrong))
    _write(gate, "spec", _answers(gate, wrong=wrong))
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "control solved none of the 10 tasks" in result.reasons[0]


def test_errors_and_missing_repeats_are_instrument_failures(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, ARITH_GATE)
    _write(gate, "base", _answers(gate))
    answers = _answers(gate)
    del answers[gate.tasks[5].id]
    _write(gate, "spec", answers)
    with JsonlAppender(gate.ctx.raw_path("task", "spec")) as sink:
        sink.append({"tags": {"task": gate.tasks[5].id, "repeat": 0, "task_sha256": gate.tasks[5].digest},
                     "error": "HTTP 500"})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any("HTTP 500" in r for r in result.reasons)
    assert any("no valid reply for repeats [0, 1]" in r for r in result.reasons)


def test_records_for_a_changed_task_are_refused(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, ARITH_GATE)
    _write(gate, "base", _answers(gate))
    with JsonlAppender(gate.ctx.raw_path("task", "spec")) as sink:
        for task in gate.tasks:
            for repeat in range(2):
                sink.append({"tags": {"task": task.id, "repeat": repeat, "task_sha256": "0" * 64},
                             "response": {"choices": [{"message": {"content": f"Answer: {task.answer}"},
                                                       "finish_reason": "stop"}]}})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any("not a task of the frozen set" in r for r in result.reasons)


HUMANEVAL_GATE = """          - kind: task
            humaneval: {ids: [HumanEval/53]}
            arithmetic: {count: 3, seed: 1}
            repeats: 1
            sandbox: {timeout: 2s, memory: 256m}
            rule: {max_loss_upper: 0.7}"""


@pytest.mark.parametrize("hostile,reason", [
    ("```python\ndef add(x: int, y: int):\n    while True:\n        pass\n```", "timeout: still running after 2s"),
    ("```python\ndef add(x: int, y: int):\n    hog = []\n    while True:\n        hog.append(bytearray(1 << 24))\n```",
     "memory limit"),
    ("```python\ndef add(x: int, y: int):\n    open('/etc/campaign-escape', 'w').write('x')\n    return x + y\n```",
     "write outside its directory: /etc/campaign-escape"),
])
def test_hostile_model_code_is_contained_and_counted_incorrect(tmp_path: Path, hostile: str, reason: str) -> None:
    gate, cand, ctrl = _gate(tmp_path, HUMANEVAL_GATE)
    answers = {t.id: [f"Answer: {t.answer}"] for t in gate.tasks if t.kind == "arithmetic"}
    _write(gate, "base", {**answers, "HumanEval/53": [SOLUTION_53]})
    _write(gate, "spec", {**answers, "HumanEval/53": [hostile]})
    result = gate.judge(cand, ctrl)
    assert not Path("/etc/campaign-escape").exists()
    row = next(r for r in result.details["tasks"] if r["task"] == "HumanEval/53")
    assert row["control"][0] == {"correct": True, "reason": "passed", "sandbox": row["control"][0]["sandbox"]}
    assert row["candidate"][0]["correct"] is False
    assert reason in row["candidate"][0]["reason"]
    assert row["outcome"] == "loss"
    assert result.metrics["losses"].value == 1 and result.metrics["losses"].denominator == 4
    assert result.details["sandbox_containment"]


def test_humaneval_wrong_code_is_a_wrong_answer(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path, HUMANEVAL_GATE)
    answers = {t.id: [f"Answer: {t.answer}"] for t in gate.tasks if t.kind == "arithmetic"}
    _write(gate, "base", {**answers, "HumanEval/53": [WRONG_53]})
    _write(gate, "spec", {**answers, "HumanEval/53": [SOLUTION_53]})
    result = gate.judge(cand, ctrl)
    row = next(r for r in result.details["tasks"] if r["task"] == "HumanEval/53")
    assert row["control"][0]["reason"].startswith("wrong answer: AssertionError")
    assert row["outcome"] == "win" and result.metrics["wins"].value == 1


def test_arithmetic_problems_are_a_pure_function_of_the_seed() -> None:
    first = arithmetic_tasks(ArithmeticTasks(count=5, seed=9))
    again = arithmetic_tasks(ArithmeticTasks(count=5, seed=9))
    other = arithmetic_tasks(ArithmeticTasks(count=5, seed=10))
    assert [t.digest for t in first] == [t.digest for t in again]
    assert [t.messages for t in first] != [t.messages for t in other]
    # pinned: a change to the generator changes frozen task sets, so it must be deliberate
    assert first[0].messages[0]["content"].endswith(
        "Kemi has 32 stickers, buys 20 more, then gives 26 to a friend. How many stickers does Kemi have now?")
    assert first[0].answer == "26" and first[0].match == "numeric"
    for task in first:
        assert task.answer.lstrip("-").isdigit() and int(task.answer) >= 0


@pytest.mark.parametrize("reply,answer,rule,ok", [
    ("The answer is 12. Answer: 1,234.", "1234", "numeric", True),
    ("I think 5 plus 7... answer = 12", "12", "numeric", True),
    ("12 apples, Answer: 13", "12", "numeric", False),
    ("Paris.", "Paris", "exact", True),
    ("paris", "Paris", "exact", False),
    ("It is Paris, of course.", r"\bParis\b", "regex", True),
    ("", "1", "numeric", False),
])
def test_match_rules(reply: str, answer: str, rule: str, ok: bool) -> None:
    assert match_answer(extract_answer(reply), answer, rule) is ok


def test_user_rows_are_validated_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    path.write_text('{"id": 1, "prompt": "x", "answer": 3, "match": "numeric"}\n'
                    '{"id": 2, "prompt": "y", "answer": "z", "match": "fuzzy"}\n')
    with pytest.raises(ContractError) as err:
        user_tasks(path)
    assert f"{path}:2: match:" in str(err.value)
    path.write_text('{"id": 1, "prompt": "x", "answer": "three", "match": "numeric"}\n')
    with pytest.raises(ContractError, match="numeric match needs a numeric answer"):
        user_tasks(path)


def test_user_tasks_in_a_gate(tmp_path: Path) -> None:
    rows = ('{"id": "a", "prompt": "Capital of France?", "answer": "Paris", "match": "regex"}\n'
            '{"id": "b", "prompt": "2+2?", "answer": 4, "match": "numeric"}\n')
    gate, cand, ctrl = _gate(tmp_path, """          - kind: task
            input: u
            repeats: 1
            rule: {max_loss_upper: 0.9}""", user_rows=rows)
    _write(gate, "base", {"a": ["Paris"], "b": ["Answer: 4"]})
    _write(gate, "spec", {"a": ["Lyon"], "b": ["Answer: 4"]})
    result = gate.judge(cand, ctrl)
    assert result.metrics["losses"].value == 1 and result.metrics["losses"].denominator == 2
    assert result.details["by_kind"]["user"]["tasks"] == 2
