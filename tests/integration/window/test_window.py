"""A whole window against real llama-server processes and the real SmolLM2 model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from tests.support.cli import campaign, keys_and_freeze
from tests.support.contracts import demo_like, free_port, write_contract
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def window(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import os
    import shutil

    if not shutil.which("llama-server"):
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    root = tmp_path_factory.mktemp("window")
    contract = write_contract(root, demo_like(free_port()))
    bundle, ran = window_bundle(root, contract)
    with pytest.MonkeyPatch.context() as patch:  # the window's own key signs and trusts what the tests do next
        patch.setenv("XDG_CONFIG_HOME", str(root / "xdg"))
        yield {"root": root, "contract": contract, "bundle": bundle, "xdg": root / "xdg",
               "stdout": Path(os.devnull), "run_stdout": ran.stdout}  # type: ignore[dict-item]


def test_window_writes_complete_bundle(window: dict) -> None:
    bundle = window["bundle"]
    summary = load_json_strict(bundle / "SUMMARY.json")
    assert summary["status"] == "complete"
    assert summary["lanes"]["base"]["status"] == "ran" and summary["lanes"]["spec"]["status"] == "ran"
    gate = summary["candidates"]["spec"]["gates"]["greedy"]
    assert gate["verdict"] in ("PASS", "FAIL")  # measured, whichever way it went
    assert gate["metrics"]["self_identical"]["denominator"] == 3
    assert gate["metrics"]["self_identical"]["unit"] == "prompts"
    for name in ("contract/c.yaml", "contract/freeze.json", "contract/inputs/p.jsonl", "lanes/base/boot.log",
                 "lanes/spec/inspect.json", "raw/greedy/base.jsonl", "raw/greedy/spec.jsonl",
                 "gates/greedy/spec.json", "journal.jsonl", "source.json", "receipt.dsse.json"):
        assert (bundle / name).is_file(), name
    records = read_jsonl(bundle / "raw" / "greedy" / "spec.jsonl")
    assert len(records) == 3 * 2
    assert all(r["status"] == 200 and r["request"]["temperature"] == 0 for r in records)
    texts = {r["response"]["choices"][0]["message"]["content"] for r in records}
    assert len(texts) >= 2  # the prompts got different answers from the real model
    assert "bundle:" in window["run_stdout"]
    # written to a pipe (a log, CI): the end lines keep whole names, and the window shows progress
    assert "…" not in window["run_stdout"]
    assert "elapsed" in window["run_stdout"] and "gate done lane=spec gate=greedy [" in window["run_stdout"]
    # the end: the daily (none declared), one line per candidate (its decision, the figure, the first step), the bundle
    same, control_same = (gate["metrics"][name]["value"] for name in ("self_identical", "control_self_identical"))
    assert window["run_stdout"].strip().splitlines()[-3:] == [
        "no daily declared: nothing was stopped",
        f"spec: REFUSED: greedy self_identical {same}/3 prompts; greedy control_self_identical {control_same}/3 "
        "prompts; next: declare the daily (incumbent) in a new contract version; this window measured only",
        f"bundle: {bundle}"]


def test_runtime_inspect_shows_the_axis(window: dict) -> None:
    inspect = load_json_strict(window["bundle"] / "lanes" / "spec" / "inspect.json")
    argv = inspect["argv"]
    assert argv[argv.index("--spec-draft-n-max") + 1] == "4"
    base = load_json_strict(window["bundle"] / "lanes" / "base" / "inspect.json")
    assert "--spec-type" not in base["argv"]
    assert len(inspect["executable_sha256"]) == 64


def test_greedy_result_has_per_prompt_evidence(window: dict) -> None:
    result = load_json_strict(window["bundle"] / "gates" / "greedy" / "spec.json")
    rows = result["details"]["prompts"]
    assert [r["prompt"] for r in rows] == ["capital", "haiku", "fib"]
    assert all(len(r["candidate_sha256"]) == 64 for r in rows)
    assert result["rule"] == {"self_identical": "3/3"}


def test_verify_accepts_then_rejects_each_tampering(window: dict, tmp_path: Path, monkeypatch) -> None:
    import shutil

    monkeypatch.setenv("XDG_CONFIG_HOME", str(window["xdg"]))
    ok = campaign("verify", str(window["bundle"]))
    assert ok.returncode == 0, ok.stderr
    files = sorted(p for p in window["bundle"].rglob("*") if p.is_file() and p.name != "receipt.dsse.json")
    for victim in files:
        copy = tmp_path / "b"
        shutil.copytree(window["bundle"], copy)
        target = copy / victim.relative_to(window["bundle"])
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x01
        target.write_bytes(bytes(data))
        bad = campaign("verify", str(copy))
        assert bad.returncode == 1, victim
        assert "sha256 does not match" in bad.stderr or "duplicate" in bad.stderr
        shutil.rmtree(copy)


def test_rejudge_of_a_real_window_gives_the_same_verdicts(window: dict, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(window["xdg"]))
    done = campaign("rejudge", str(window["bundle"]), "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no verdict changed" in done.stdout and "changed:" not in done.stdout
    (new,) = tmp_path.iterdir()
    before = load_json_strict(window["bundle"] / "SUMMARY.json")
    after = load_json_strict(new / "SUMMARY.json")
    for candidate, entry in before["candidates"].items():
        for gate, result in entry["gates"].items():
            assert f"{gate}/{candidate}: {result['verdict']}" in done.stdout
            assert after["candidates"][candidate]["gates"][gate]["verdict"] == result["verdict"]
            assert load_json_strict(new / "gates" / gate / f"{candidate}.json")["metrics"] == \
                load_json_strict(window["bundle"] / "gates" / gate / f"{candidate}.json")["metrics"]
        assert after["candidates"][candidate]["overall"] == entry["overall"]
    assert after["rejudge"]["source"]["window"] == before["window"] == after["window"]
    assert (new / "raw" / "greedy" / "spec.jsonl").read_bytes() == \
        (window["bundle"] / "raw" / "greedy" / "spec.jsonl").read_bytes()
    assert campaign("verify", str(new)).returncode == 0
    assert campaign("verify", str(window["bundle"])).returncode == 0  # the source is only read


def test_verify_rejects_untrusted_signer(window: dict, tmp_path: Path) -> None:
    # the autouse fixture points XDG_CONFIG_HOME at a fresh directory with a different key
    assert campaign("keys", "init").returncode == 0
    bad = campaign("verify", str(window["bundle"]))
    assert bad.returncode == 1 and "no valid signature by a trusted key" in bad.stderr
    ok = campaign("verify", str(window["bundle"]), "--trust", str(window["xdg"] / "campaign" / "signing.pub"))
    assert ok.returncode == 0


def test_run_refuses_prompt_file_changed_after_freezing(window: dict, tmp_path: Path, monkeypatch) -> None:
    import shutil

    monkeypatch.setenv("XDG_CONFIG_HOME", str(window["xdg"]))
    shutil.copytree(window["root"] / "prompts", tmp_path / "prompts")
    shutil.copy(window["contract"], tmp_path / "c.yaml")
    shutil.copy(window["root"] / "c.freeze.json", tmp_path / "c.freeze.json")
    prompts = tmp_path / "prompts" / "p.jsonl"
    prompts.write_text(prompts.read_text().replace("haiku", "sonnet"))
    refused = campaign("run", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "runs"))
    assert refused.returncode == 2
    assert "changed since freezing" in refused.stderr and "file prompts/p.jsonl" in refused.stderr
    assert not (tmp_path / "runs").exists()


def test_launch_failure_is_inconclusive_not_a_finding(tmp_path: Path, llama_server: str) -> None:
    body = demo_like(free_port(), extra_candidate=', --no-such-flag: "1"').replace(
        "axis: [args.spec-type, args.spec-draft-n-max]", "axis: [args.spec-type, args.spec-draft-n-max, args.no-such-flag]")
    contract = write_contract(tmp_path, body)
    keys_and_freeze(contract)
    ran = campaign("run", str(contract), "--out", str(tmp_path / "runs"))
    assert ran.returncode == 3, ran.stderr  # the window completed; its verdict is INCONCLUSIVE: nothing promotable
    bundle = next((tmp_path / "runs").iterdir())
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    assert summary["lanes"]["spec"]["status"] == "launch_failed"
    assert summary["lanes"]["spec"]["cause"] == "bad_argument"
    assert summary["candidates"]["spec"]["gates"]["greedy"]["verdict"] == "INCONCLUSIVE"
    assert "launch failure is not a finding" in summary["candidates"]["spec"]["gates"]["greedy"]["reasons"][0]
    assert "no-such-flag" in (bundle / "lanes" / "spec" / "launch_failure.txt").read_text()
    assert campaign("verify", str(bundle)).returncode == 0


def test_readiness_budget_spent_is_a_classified_launch_failure(tmp_path: Path, llama_server: str) -> None:
    contract = write_contract(tmp_path, demo_like(free_port(), budget="10ms"))
    keys_and_freeze(contract)
    ran = campaign("run", str(contract), "--out", str(tmp_path / "runs"), "--exit-zero")
    assert ran.returncode == 0, ran.stderr  # nothing promotable, but --exit-zero: 0 for a completed window
    summary = json.loads(next((tmp_path / "runs").iterdir()).joinpath("SUMMARY.json").read_text())
    assert summary["lanes"]["base"]["cause"] == "readiness_timeout"
    assert summary["candidates"]["spec"]["overall"] == "INCONCLUSIVE"
