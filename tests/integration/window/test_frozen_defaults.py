"""A contract frozen under one default and run by a tool with another: refused with the field named, run
only when told (``--accept-tool-defaults``), and the bundle and its report say which rules judged it.

A newer tool is simulated by a schema default patched in this process (``tests/support/schema.py``); the
window itself is real: llama-server lanes serving the small model."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from campaign.contracts.freeze import ToolDefaultsChanged, freeze
from campaign.contracts.gatespecs import GreedySpec
from campaign.contracts.load import load_contract
from campaign.fsutil import load_json_strict
from campaign.receipts.publish import publish
from campaign.signing import init_keys, load_signing_key, load_trusted
from campaign.window.run import run_window
from tests.support.contracts import demo_like, free_port, write_contract
from tests.support.schema import patched_default

pytestmark = pytest.mark.integration


def test_a_tool_with_another_default_refuses_then_runs_when_told_and_the_bundle_says_so(
        tmp_path: Path, llama_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    body = textwrap.dedent(demo_like(free_port(), rule='"1/1"')).replace("    max_tokens: 24\n", "")  # left to the default
    contract = write_contract(tmp_path, body, prompts=[("capital", "What is the capital of France?")])
    init_keys()
    freeze(load_contract(contract), load_signing_key())  # frozen with max_tokens 64, the default then
    line = "gates[greedy].max_tokens: frozen 64, this tool 6"
    with patched_default(GreedySpec, "max_tokens", 6):  # the newer tool's default
        with pytest.raises(ToolDefaultsChanged, match=r"gates\[greedy\]\.max_tokens: frozen 64, this tool 6"):
            run_window(contract, key=load_signing_key(), trusted=load_trusted(), out_dir=tmp_path / "runs")
        assert not (tmp_path / "runs").exists()  # refused before anything started
        outcome = run_window(contract, key=load_signing_key(), trusted=load_trusted(), out_dir=tmp_path / "runs",
                             accept_tool_defaults=True)
    assert outcome.signed
    summary = load_json_strict(outcome.bundle / "SUMMARY.json")
    assert summary["contract"]["accepted_tool_defaults"] == [line]
    assert summary["candidates"]["spec"]["gates"]["greedy"]["verdict"] == "PASS"
    # the rules it was judged by are in the bundle, and they are the accepted ones
    effective = load_json_strict(outcome.bundle / "contract" / "effective.json")
    assert effective["contract"]["gates"][0]["max_tokens"] == 6 and effective["accepted_tool_defaults"] == [line]
    replies = [r for r in (outcome.bundle / "raw" / "greedy" / "spec.jsonl").read_text().splitlines() if r]
    assert replies and all('"max_tokens":6' in r.replace(" ", "") for r in replies)
    written = publish(outcome.bundle, tmp_path / "report")
    markdown = written["markdown"].read_text().replace("\\", "")  # markdown escapes _ and [
    assert line in markdown and "--accept-tool-defaults" in markdown
    assert 'id="accepted-tool-defaults"' in written["html"].read_text()
