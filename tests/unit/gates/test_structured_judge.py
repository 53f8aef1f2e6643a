"""The structured gate's count rules over hand-written replies: the judge reads only records, so its rule can be
pinned without an engine (the real replies are in tests/integration/quality/test_quality_window.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.fsutil import JsonlAppender
from campaign.gates.base import GateContext
from campaign.gates.registry import gate_for
from campaign.gates.result import Verdict
from tests.support.contracts import EXAMPLES, write_contract
from tests.support.speedrecords import speed_contract

ROWS = [json.loads(line) for line in (EXAMPLES / "structured" / "structured4.jsonl").read_text().splitlines()]


def judged(tmp_path: Path, rule: str, wrong: int) -> tuple[Verdict, list[str]]:
    """The candidate answers the first ``wrong`` rows with valid JSON of the wrong value, the control all right."""
    body = speed_contract("""\
        - {name: base, role: control}
        - {name: cand, role: candidate, axis: [args.threads], set: {args: {--threads: "2"}}}
        """, f"- {{kind: structured, input: s, max_tokens: 32, rule: {rule}}}", name="t-structured")
    body = body.replace("  p: {file: prompts/p.jsonl}\n", "  p: {file: prompts/p.jsonl}\n  s: {file: s.jsonl}\n")
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "p.jsonl").write_text('{"id": "a", "prompt": "a"}\n')
    shutil.copy(EXAMPLES / "structured" / "structured4.jsonl", tmp_path / "s.jsonl")
    loaded = load_contract(write_contract(tmp_path, body))
    ctx = GateContext(bundle=tmp_path / "bundle", contract=loaded, input_paths={"s": tmp_path / "s.jsonl"})
    (gate,) = [gate_for(spec, ctx) for spec in loaded.contract.gates]
    for lane, wrong_rows in (("base", 0), ("cand", wrong)):
        with JsonlAppender(ctx.raw_path(gate.gate_id, lane)) as sink:
            for index, row in enumerate(ROWS):
                answer = row["answer"] if index >= wrong_rows else {k: _other(v) for k, v in row["answer"].items()}
                sink.append({"tags": {"item": row["id"]}, "status": 200, "response": {"choices": [
                    {"message": {"content": json.dumps(answer)}, "finish_reason": "stop"}]}})
    result = gate.judge(loaded.lanes["cand"], loaded.lanes["base"])
    return result.verdict, result.reasons


def _other(value: object) -> object:
    """A value of the same JSON type, never equal (so the reply stays schema-valid and is wrong)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    return f"not {value}"


@pytest.mark.parametrize(("rule", "wrong", "verdict"), [
    ('{correct: "3/4"}', 1, Verdict.PASS),
    ('{correct: "3/4"}', 2, Verdict.FAIL),
    ('{correct: "4/4", schema_valid: "4/4"}', 1, Verdict.FAIL),  # schema-valid, wrong: the correct rule decides
    ('{correct: "1/4", schema_valid: "4/4"}', 3, Verdict.PASS),
])
def test_the_count_rules_decide_by_the_rows_answered_right(tmp_path: Path, rule: str, wrong: int,
                                                            verdict: Verdict) -> None:
    got, reasons = judged(tmp_path, rule, wrong)
    assert got is verdict, reasons
    assert any(reason.startswith(f"correct {4 - wrong}/4 ") for reason in reasons), reasons
