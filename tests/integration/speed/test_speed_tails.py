"""A latency-tail rule on real llama-server lanes: time to first token at p90 not worse by more than 10%,
judged boot by boot against a candidate that serves one request at a time (`--parallel 1` under eight users:
seven of every eight requests wait in its queue) and against an A/A lane (the control again)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict
from tests.support.contracts import candidate, contract_yaml, control, free_port, process_defaults, write_contract
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration

PROMPTS = ["Name a colour.", "Name a fruit.", "Name a city.", "Name a river.", "Name a tree.", "Name a bird.",
           "Name a metal.", "Name a planet."]


def test_a_ttft_tail_rule_fails_a_queueing_candidate_and_never_an_a_a_lane(tmp_path: Path) -> None:
    if not shutil.which("llama-server"):
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    args = ["--ctx-size", "2048", "--threads", "1", "--parallel", "8", "--seed", "0", "--no-webui", "--metrics"]
    body = contract_yaml(
        "t-tail", defaults=process_defaults(free_port(), args=args),
        lanes=[control(), {"name": "again", "role": "candidate", "aa": True},
               candidate("one-slot", ["args.parallel"], args={"--parallel": "1"})],
        inputs={"p": {"file": "prompts/p.jsonl"}},
        # 7 reps x 8 prompts: 56 TTFTs per boot, the 50 a p90 needs (a p99 would need 500 and is refused).
        # The rows' validity guards off (the host's other load, the reps' spread): this test is about the tail
        # rule; a CI run lost the whole comparison to rows voided by 32-42% other load and a 74% spread. The
        # guards have tests of their own (speed_llamaserver). Eight users, not four: the one-slot lane's work
        # is the same 56 requests in turn, its queue twice as deep; and a third pair where two leave the CI
        # wide (a CI run: -54.3% [-79.2%, +0.2%] at C4 after two pairs, one degree of freedom for the boots).
        gates=[{"kind": "speed", "input": "p", "concurrency": [8], "max_tokens": 8, "reps": 7, "max_boot_pairs": 3,
                "rule": {"metric": "ttft_p90_s", "min_mean_change": -0.10, "ci_lower_above": -0.10,
                         "max_spread": 5.0, "max_reruns": 1, "max_host_busy": None}}],
        requires=["speed"])
    prompts = [(f"p{i}", text) for i, text in enumerate(PROMPTS)]
    bundle, _ = window_bundle(tmp_path, write_contract(tmp_path, body, prompts=prompts))
    summary = load_json_strict(bundle / "SUMMARY.json")
    slow = load_json_strict(bundle / "gates" / "speed" / "one-slot.json")
    # measured here (two runs): -87.7% [-92.6%, -79.6%] after 2 pairs, -86.7% [-90.7%, -81.1%] after 3; the A/A
    # -16.0% [-34.3%, +7.4%] and -2.2% [-34.0%, +45.0%], both INCONCLUSIVE
    assert slow["verdict"] == "FAIL", slow["reasons"]
    assert slow["reasons"][0].startswith("C8 ttft_p90_s: -"), slow["reasons"]
    assert slow["metrics"]["C8.candidate.ttft_p90_s"]["value"] > 1.5 * slow["metrics"]["C8.control.ttft_p90_s"]["value"]
    again = load_json_strict(bundle / "gates" / "speed" / "again.json")
    assert again["verdict"] in ("PASS", "INCONCLUSIVE"), again["reasons"]
    assert summary["aa_check"] == {"lanes": ["again"], "false_decisions": []}
