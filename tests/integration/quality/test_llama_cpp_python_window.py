"""The quality gates on a second real engine: llama-cpp-python's server (built once by
scripts/build-llama-cpp-python.sh), two lanes serving SmolLM2 with one axis (flash attention).

Its echo scores prompt tokens; the instrument check must accept it where its positions line up (a
prompt that starts with the model's BOS, here ChatML's <|im_start|>) and refuse it where they do not
(a raw prompt without BOS: the engine reports each prompt-token logprob one position off and drops the
generated token). Its chatml-function-calling chat format parses real tool calls.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from tests.support.contracts import (
    DEFAULT_PYTHON,
    EXAMPLES,
    candidate,
    contract_yaml,
    control,
    free_port,
    process_defaults,
)
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration




@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = Path(os.environ.get("LLAMA_CPP_PYTHON", DEFAULT_PYTHON))
    if not python.exists():
        pytest.fail(f"{python} missing: run scripts/build-llama-cpp-python.sh (make test does)")
    root = tmp_path_factory.mktemp("lcp")
    body = contract_yaml(
        "t-lcp",
        defaults=process_defaults(free_port(), engine="llama-cpp-python", executable=python,
                                  args=["--n_ctx", "2048", "--n_threads", "2", "--seed", "0", "--chat_format",
                                        "chatml-function-calling"]),
        lanes=[control(), candidate("fa", ["args.flash_attn"], args={"--flash_attn": "true"})],
        inputs={"chatml": {"file": EXAMPLES / "prompts/chatml2.jsonl"}, "raw": {"file": EXAMPLES / "prompts/raw2.jsonl"},
                "structured": {"file": EXAMPLES / "structured/structured4.jsonl"},
                "tools": {"file": EXAMPLES / "tools/tools2.jsonl"}},
        gates=[
            # an instrument self-check with no site rule: nothing to weigh, and this contract says PASS to that
            {"id": "tf-chatml", "kind": "teacher_forced", "input": "chatml", "max_tokens": 12, "top_k": 10,
             "rule": {"instrument_tolerance": 0.01, "nothing_to_weigh": "PASS"}},
            {"id": "tf-raw", "kind": "teacher_forced", "input": "raw", "max_tokens": 8, "top_k": 10,
             "rule": {"instrument_tolerance": 0.01}},
            {"kind": "structured", "input": "structured", "max_tokens": 32, "rule": {"correct": "1/4"}},
            {"kind": "tools", "input": "tools", "max_tokens": 32, "rule": {"passed": "1/2"}}])
    path = root / "c.yaml"
    path.write_text(body)
    return window_bundle(root, path, allow=EXAMPLES)[0]


def result(bundle: Path, gate: str) -> dict:
    return load_json_strict(bundle / "gates" / gate / "fa.json")


def test_echo_scores_give_generation_logprobs_back(bundle: Path) -> None:
    r = result(bundle, "tf-chatml")
    assert r["verdict"] == "PASS", r["reasons"]
    assert any("nothing to weigh" in reason for reason in r["reasons"])  # said in words, not as a number
    for who in ("control", "candidate"):
        assert r["metrics"][f"instrument_{who}"]["value"] == r["metrics"][f"instrument_{who}"]["denominator"] > 0
        assert r["metrics"][f"instrument_max_drift_{who}"]["value"] <= 0.01


def test_misaligned_echo_is_inconclusive_not_scored(bundle: Path) -> None:
    r = result(bundle, "tf-raw")
    assert r["verdict"] == "INCONCLUSIVE"
    assert any("not aligned" in reason for reason in r["reasons"])
    assert "sites" not in r["metrics"]


def test_engine_shaped_structured_and_real_tool_calls(bundle: Path) -> None:
    structured = result(bundle, "structured")
    assert structured["metrics"]["valid_json"]["value"] >= 1
    body = [line for line in (bundle / "raw" / "structured" / "fa.jsonl").read_text().splitlines()][0]
    assert '"json_object"' in body  # the engine's own request shape, not llama-server's
    tools = result(bundle, "tools")
    outcomes = [e["candidate"]["outcome"] for e in tools["details"]["episodes"]]
    # calls were parsed into tool_calls in every episode; whether the tiny model filled in the right
    # arguments is the measurement, and the verdict follows the frozen rule from it
    assert "passed" in outcomes and not {"no_call", "error"} & set(outcomes), tools["details"]
    assert tools["verdict"] == ("PASS" if tools["metrics"]["passed"]["value"] >= 1 else "FAIL")
    sent = [message for record in read_jsonl(bundle / "raw" / "tools" / "fa.jsonl")
            for message in (record.get("request") or {}).get("messages", [])]
    assert any(m.get("tool_calls") for m in sent)  # the model's call went back in the conversation,
    assert any(m.get("role") == "tool" for m in sent)  # and the scripted result with it
