"""The task and needle gates in a whole window against real llama-server processes and the real
SmolLM2 model: raw records per task and per variant, judged results with denominators, prompt sizes
counted by the engine within 1% of each rung. Kept tiny (one rung, four tasks, one repeat) for CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from tests.support.contracts import demo_like, free_port, write_contract
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration

GREEDY = """          - kind: greedy
            input: p
            repeats: 2
            max_tokens: 24
            rule: {self_identical: "3/3"}"""
GATES = """          - kind: task
            humaneval: {ids: [HumanEval/53]}
            arithmetic: {count: 2, seed: 7}
            input: u
            repeats: 1
            max_tokens: 32
            code_max_tokens: 96
            sandbox: {timeout: 5s, memory: 512m}
            rule: {max_loss_upper: 0.6}
          - kind: needle
            rungs: [256]
            max_tokens: 24"""
USER_ROWS = '{"id": "capital", "prompt": "What is the capital of France?", "answer": "Paris", "match": "regex"}\n'



@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    if not shutil.which("llama-server"):
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    root = tmp_path_factory.mktemp("ladders")
    body = (demo_like(free_port()).replace(GREEDY, GATES).replace("requires: [greedy]", "requires: [task, needle]")
            .replace("p: {file: prompts/p.jsonl}", "p: {file: prompts/p.jsonl}\n          u: {file: u.jsonl}"))
    (root / "u.jsonl").write_text(USER_ROWS)
    yield window_bundle(root, write_contract(root, body), verify=True)[0]


def test_window_judges_both_gates_with_denominators(bundle: Path) -> None:
    summary = load_json_strict(bundle / "SUMMARY.json")
    assert summary["status"] == "complete"
    gates = summary["candidates"]["spec"]["gates"]
    assert gates["task"]["metrics"]["losses"]["denominator"] == 4
    assert gates["task"]["metrics"]["loss_upper_bound"]["unit"] == "proportion of tasks"
    assert gates["task"]["metrics"]["candidate_correct"]["denominator"] == 4
    assert gates["needle"]["metrics"]["rungs_passed"]["denominator"] == 1
    for gate in ("task", "needle"):
        assert gates[gate]["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE")
        assert not any(r.startswith("instrument: not every") or r.startswith("instrument: the ladder")
                       for r in gates[gate]["reasons"]), gates[gate]["reasons"]


def test_task_raw_records_per_task_and_scored_code(bundle: Path) -> None:
    for lane in ("base", "spec"):
        records = read_jsonl(bundle / "raw" / "task" / f"{lane}.jsonl")
        assert sorted(r["tags"]["task"] for r in records) == ["HumanEval/53", "arith/7/0", "arith/7/1", "capital"]
        assert all(r["status"] == 200 and r["request"]["temperature"] == 0 and r["request"]["seed"] == 0
                   for r in records)
        assert all(len(r["tags"]["task_sha256"]) == 64 for r in records)
    result = load_json_strict(bundle / "gates" / "task" / "spec.json")
    code = next(row for row in result["details"]["tasks"] if row["task"] == "HumanEval/53")
    for side in ("control", "candidate"):
        run = code[side][0]
        assert run["reason"]  # passed, wrong answer, an error or a limit: always a reason
        assert run["sandbox"]["elapsed_s"] > 0 and run["sandbox"]["exit_code"] is not None
    assert any("landlock" in c or "uid 65534" in c for c in result["details"]["sandbox_containment"])
    assert sum(row["repeats"] for row in result["details"]["tasks"]) == 4


def test_needle_prompts_are_sized_by_the_engine_within_one_percent(bundle: Path) -> None:
    for lane in ("base", "spec"):
        records = read_jsonl(bundle / "raw" / "needle" / f"{lane}.jsonl")
        assert {r["tags"]["variant"] for r in records} == {"single", "multi", "decoy"}
        for record in records:
            assert record["done_marker"] and not record.get("error")
            usage = next(e["data"]["usage"] for e in record["events"] if (e.get("data") or {}).get("usage"))
            assert abs(usage["prompt_tokens"] - 256) <= 2.56, usage
            assert usage["prompt_tokens"] == record["tags"]["counted_tokens"]  # /tokenize agrees with serving
            assert record["request"]["cache_prompt"] is False
        seeds = [r["tags"]["seed"] for r in records]
        assert len(set(seeds)) == len(seeds)  # every attempt is new text


def test_needle_result_has_per_rung_numbers(bundle: Path) -> None:
    result = load_json_strict(bundle / "gates" / "needle" / "spec.json")
    for lane in ("base", "spec"):
        rung = result["details"]["ladders"][lane]["rungs"][0]
        assert rung["rung"] == 256 and set(rung["variants"]) == {"single", "multi", "decoy"}
        assert rung["ttft_s"] > 0 and rung["prefill_tok_s_engine"] > 0 and rung["prefill_tok_s_client"] > 0
        assert rung["wall_s"] > 0 and 3 <= rung["requests"] <= 6
        assert all(abs(t - 256) <= 2.56 for tokens in rung["prompt_tokens"].values() for t in tokens)
