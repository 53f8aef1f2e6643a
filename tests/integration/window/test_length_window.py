"""A length gate on a real window: llama-server lanes serving the small model, a greedy gate that gathers
the replies and a length gate that reads them from the greedy gate's raw records (it sends nothing). The
candidate's axis (n-gram speculation) is lossless, so its greedy replies are the control's and so are their
lengths: the gate PASSes with no change, and the report shows its headline and plots from the result alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.contracts.freeze import freeze
from campaign.contracts.load import load_contract
from campaign.fsutil import load_json_strict
from campaign.receipts.publish import publish
from campaign.signing import init_keys, load_signing_key, load_trusted
from campaign.window.run import run_window
from tests.support.contracts import demo_like, free_port, write_contract

pytestmark = pytest.mark.integration

PROMPTS = [("france", "What is the capital of France? Answer in one word."),
           ("japan", "What is the capital of Japan? Answer in one word."),
           ("two", "What is 2 + 2? Answer with a number only."),
           ("sky", "What colour is the sky on a clear day? One word."),
           ("water", "What is the chemical formula of water? Answer briefly."),
           ("hello", "Say hello in French, one word only.")]

LENGTH = """\
          - kind: length
            source: greedy
            rule: {max_mean_change: 0.25, min_pairs: 4, max_left_out: 0.34}
        promotion:"""


def test_a_length_gate_measures_the_greedy_gate_s_replies_and_the_report_shows_it(
        tmp_path: Path, llama_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    body = demo_like(free_port(), rule='"6/6"', max_tokens=96).replace("        promotion:", LENGTH)
    contract = write_contract(tmp_path, body, prompts=PROMPTS)
    init_keys()
    freeze(load_contract(contract), load_signing_key())
    outcome = run_window(contract, key=load_signing_key(), trusted=load_trusted(), out_dir=tmp_path / "runs")
    assert outcome.signed
    assert not (outcome.bundle / "raw" / "length").exists()  # it sent nothing: it read the greedy gate's records
    result = load_json_strict(outcome.bundle / "gates" / "length" / "spec.json")
    items = result["details"]["items"]
    assert len(items) == len(PROMPTS) and all(row["replies"] == 4 for row in items), items  # 2 repeats x 2 lanes
    assert result["verdict"] == "PASS", result["reasons"]
    assert result["metrics"]["mean_change"]["value"] == 0.0 and result["details"]["estimate"]["high"] == 0.0
    assert result["presentation"]["headlines"][0]["label"] == "mean_change"
    written = publish(outcome.bundle, tmp_path / "report")  # the report knows no kinds: the result carries it
    assert "length mean\\_change +0.0%" in written["markdown"].read_text()
    html = written["html"].read_text()
    assert "Reply length: candidate vs control" in html and "Reply length per item" in html
