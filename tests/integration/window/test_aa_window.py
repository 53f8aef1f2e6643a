"""A real window with an A/A lane (the control again, booted in its own slot) on llama-server and the small
model: its verdicts claim no difference (the false-decision check is clean), it is never promoted, and
the report and the console say so first."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict
from tests.support.cli import campaign
from tests.support.contracts import QUIET_ARGS, contract_yaml, control, free_port, process_defaults, write_contract
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration


def test_an_a_a_lane_on_a_real_engine_claims_no_difference_and_is_never_promoted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not shutil.which("llama-server"):
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    body = contract_yaml(
        "t-aa", defaults=process_defaults(free_port(), args=QUIET_ARGS),
        lanes=[control(), {"name": "again", "role": "candidate", "aa": True}],
        inputs={"p": {"file": "prompts/p.jsonl"}},
        gates=[{"kind": "greedy", "input": "p", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "3/3"}},
               {"kind": "ruler", "input": "p", "probes": 2, "max_tokens": 8}],
        requires=["greedy"])
    bundle, ran = window_bundle(tmp_path, write_contract(tmp_path, body), verify=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # the window's key: publish and promote trust it
    summary = load_json_strict(bundle / "SUMMARY.json")
    # CPU llama-server at temperature 0 is deterministic: the same config again passes greedy (not a claim of a
    # difference) and the ruler finds the axis inert (the right answer for no axis): a clean check
    gates = summary["candidates"]["again"]["gates"]
    assert gates["greedy"]["verdict"] in ("PASS", "INCONCLUSIVE"), gates["greedy"]
    assert gates["ruler"]["verdict"] in ("FAIL", "INCONCLUSIVE"), gates["ruler"]
    assert summary["aa_check"] == {"lanes": ["again"], "false_decisions": []}
    assert "again: REFUSED" in ran.stdout and "A/A FALSE DECISION" not in ran.stdout
    published = campaign("publish", str(bundle), "--out", str(tmp_path / "report"))
    assert published.returncode == 0, published.stderr
    markdown = next((tmp_path / "report").glob("*.md")).read_text()
    assert "**A/A check: clean.**" in markdown
    # promote reads the receipts and refuses the A/A lane, whatever its gates said
    refused = campaign("promote", str(bundle), "--candidate", "again")
    assert refused.returncode != 0 and "again is an A/A lane (the control again)" in refused.stdout + refused.stderr
