"""Task and needle gate specs: what validation refuses, with file:line and field, before any window."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from campaign.contracts.engines import lane_context
from campaign.contracts.load import load_contract
from campaign.errors import ContractError
from tests.support.contracts import REPO, demo_like, write_contract

GREEDY = """          - kind: greedy
            input: p
            repeats: 2
            max_tokens: 24
            rule: {self_identical: "3/3"}"""


def _body(gate: str, **kwargs: str) -> str:
    body = demo_like(18000).replace(GREEDY, gate).replace("requires: [greedy]", "requires: []")
    for old, new in kwargs.items():
        body = body.replace(old.replace("_", "-"), new)
    return body


def _error(tmp_path: Path, body: str) -> ContractError:
    path = write_contract(tmp_path, body)
    with pytest.raises(ContractError) as info:
        load_contract(path)
    return info.value


def _line_of(tmp_path: Path, text: str) -> int:
    lines = (tmp_path / "c.yaml").read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if text in line)


def test_demo_contract_has_both_gates() -> None:
    loaded = load_contract(REPO / "examples" / "demo.yaml")
    kinds = [g.kind for g in loaded.contract.gates]
    assert {"task", "needle"} <= set(kinds)
    needle = loaded.contract.gates[kinds.index("needle")]
    assert needle.rungs == [256, 512, 896]
    assert all(lane_context(lane)[0] == 1024 for lane in loaded.lanes.values())  # 4096 over 4 slots


def test_a_rung_over_the_lane_context_is_refused_at_its_line(tmp_path: Path) -> None:
    gate = """          - kind: needle
            rungs:
              - 512
              - 2000
            max_tokens: 64"""
    error = _error(tmp_path, _body(gate))  # demo_like lanes run --ctx-size 2048
    assert error.field == "gates[0].rungs[1]"
    assert error.line == _line_of(tmp_path, "- 2000")
    assert "rung 2000 tokens + max_tokens 64 does not fit lane base's context of 2048 tokens (--ctx-size 2048)" \
        in error.message


def test_parallel_slots_split_the_context(tmp_path: Path) -> None:
    body = _body("""          - kind: needle
            rungs: [1000]""").replace('--parallel, "1"', '--parallel, "2"')
    error = _error(tmp_path, body)
    assert "context of 1024 tokens (--ctx-size 2048 / --parallel 2)" in error.message


def test_a_lane_without_a_known_context_is_refused(tmp_path: Path) -> None:
    body = _body("""          - kind: needle
            rungs: [256]""").replace('--ctx-size, "2048", ', "")
    error = _error(tmp_path, body)
    assert "lane base's context is not known" in error.message and "--ctx-size or -c" in error.message


def test_a_declared_context_must_agree_with_the_args(tmp_path: Path) -> None:
    body = _body("""          - kind: needle
            rungs: [256]""").replace("          readiness:", "          context: 4096\n          readiness:")
    error = _error(tmp_path, body)
    assert "declared context 4096 disagrees with --ctx-size 2048" in error.message


def test_reach_must_be_a_rung(tmp_path: Path) -> None:
    error = _error(tmp_path, _body("""          - kind: needle
            rungs: [256, 512]
            rule: {reach: 300}"""))
    assert "rule.reach 300 is not one of the rungs" in error.message
    assert error.field == "gates[0]"


def test_rungs_must_ascend(tmp_path: Path) -> None:
    error = _error(tmp_path, _body("""          - kind: needle
            rungs: [512, 256]"""))
    assert error.field == "gates[0].rungs" and "ascending" in error.message


def test_an_unreachable_margin_is_refused(tmp_path: Path) -> None:
    error = _error(tmp_path, _body("""          - kind: task
            arithmetic: {count: 20}
            rule: {max_loss_upper: 0.05}"""))
    assert error.field == "gates[0].rule.max_loss_upper"
    assert "cannot be met with 20 tasks: even 0 losses gives an upper bound of 0.1391" in error.message
    assert "use at least 59 tasks" in error.message


def test_user_rows_count_toward_n(tmp_path: Path) -> None:
    rows = "".join(f'{{"id": {i}, "prompt": "x", "answer": {i}, "match": "numeric"}}\n' for i in range(10))
    body = _body("""          - kind: task
            arithmetic: {count: 10}
            input: u
            rule: {max_loss_upper: 0.15}""").replace("p: {file: prompts/p.jsonl}",
                                                      "p: {file: prompts/p.jsonl}\n          u: {file: u.jsonl}")
    (tmp_path / "u.jsonl").write_text(rows)
    loaded = load_contract(write_contract(tmp_path, body))  # 20 tasks: 0 losses bound at 0.139 < 0.15
    assert loaded.contract.gates[0].input == "u"
    (tmp_path / "u.jsonl").write_text(rows[: rows.index("\n") + 1])
    with pytest.raises(ContractError, match="cannot be met with 11 tasks"):
        load_contract(tmp_path / "c.yaml")


def test_a_task_gate_needs_tasks(tmp_path: Path) -> None:
    error = _error(tmp_path, _body("""          - kind: task
            rule: {max_loss_upper: 0.5}"""))
    assert "needs at least one of `humaneval`, `arithmetic`, `input`" in error.message


def test_humaneval_ids_are_checked(tmp_path: Path) -> None:
    error = _error(tmp_path, _body("""          - kind: task
            humaneval: {ids: [HumanEval/164]}
            rule: {max_loss_upper: 0.99}"""))
    assert error.field.startswith("gates[0].humaneval.ids")


def test_cli_validate_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    write_contract(tmp_path, _body("""          - kind: needle
            rungs: [4096]"""))
    done = subprocess.run([sys.executable, "-m", "campaign.cli", "validate", str(tmp_path / "c.yaml")],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert "gates[0].rungs[0]: rung 4096 tokens" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 or "c.yaml:" in done.stderr


def test_the_scoring_instrument_needs_a_cap_for_its_measured_drift(tmp_path: Path) -> None:
    gate = """          - kind: teacher_forced
            input: p
            rule: {instrument: scoring}"""
    error = _error(tmp_path, _body(gate))
    assert "instrument: scoring measures its drift and caps it" in str(error) and "rule" in str(error)
    # with a margin it loads, and no lane needs a dtype (llama-server declares none)
    capped = gate.replace("{instrument: scoring}", "{instrument: scoring, max_site_delta: 1.0}")
    assert load_contract(write_contract(tmp_path, _body(capped))).contract.gates[0].rule.instrument == "scoring"
