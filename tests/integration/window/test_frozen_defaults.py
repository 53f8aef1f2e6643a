"""A contract frozen under one default and run by a tool with another: refused with the field named, run
only when told (``--accept-tool-defaults``), and the bundle and its report say which rules judged it.

A newer tool is simulated by a schema default patched in this process (``tests/support/schema.py``); the
window itself is real: llama-server lanes serving the small model."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from campaign.contracts.freeze import ToolDefaultsChanged, freeze
from campaign.contracts.load import load_contract
from campaign.fsutil import load_json_strict, read_jsonl
from campaign.gates.greedy import GreedySpec
from campaign.receipts.publish import publish
from campaign.signing import init_keys, load_signing_key, load_trusted
from campaign.window.run import run_window
from tests.support.cli import campaign, keys_and_freeze
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


# the CLI of a newer tool: this one with GreedySpec.max_tokens defaulting to 6 (run in a child process)
_NEWER_TOOL = ("from campaign.cli import main\nfrom campaign.gates.greedy import GreedySpec\n"
               "from tests.support.schema import patched_default\n"
               "with patched_default(GreedySpec, 'max_tokens', 6):\n    main()\n")


def test_a_resume_accepts_the_defaults_its_start_accepted_and_only_those(
        tmp_path: Path, llama_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    body = textwrap.dedent(demo_like(free_port(), rule='"2/2"')).replace("    max_tokens: 24\n", "")
    contract = write_contract(tmp_path, body, prompts=[("capital", "What is the capital of France?"),
                                                       ("sea", "Describe the sea in one sentence.")])
    keys_and_freeze(contract)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    runner = subprocess.Popen([sys.executable, "-c", _NEWER_TOOL, "run", str(contract), "--out",
                               str(tmp_path / "runs"), "--accept-tool-defaults"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # killed once the candidate's gate has written a reply: the window is left to resume
        deadline = time.monotonic() + 300
        while not [p for p in (tmp_path / "runs").glob("*/raw/greedy/spec.jsonl") if p.read_text().strip()]:
            assert runner.poll() is None and time.monotonic() < deadline, "the candidate's gate never started"
            time.sleep(0.05)
    finally:
        runner.kill()
        runner.wait()
    (bundle,) = (tmp_path / "runs").iterdir()
    # this tool's defaults are the frozen ones: not what the window accepted, so its records would mix two rules
    refused = campaign("resume", bundle.name)
    assert refused.returncode == 2 and "differ from the ones the window accepted at its start" in refused.stderr, \
        refused.stdout + refused.stderr
    resumed = subprocess.run([sys.executable, "-c", _NEWER_TOOL, "resume", bundle.name], env=env,
                             capture_output=True, text=True, timeout=600)  # no flag: its start accepted them
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    summary = load_json_strict(bundle / "SUMMARY.json")
    assert summary["resumed"] is True and summary["candidates"]["spec"]["gates"]["greedy"]["verdict"] == "PASS"
    # no daily, so no failsafe cleaned up after the kill: the resume stopped the candidate the killed runner left
    (resume,) = [r for r in read_jsonl(bundle / "journal.jsonl") if r["step"] == "resume"]
    assert resume["stopped_lanes"] == ["spec"]
    assert summary["contract"]["accepted_tool_defaults"] == ["gates[greedy].max_tokens: frozen 64, this tool 6"]
    replies = [r for r in (bundle / "raw" / "greedy" / "spec.jsonl").read_text().splitlines() if r]
    assert len(replies) == 4 and all('"max_tokens":6' in r.replace(" ", "") for r in replies)
